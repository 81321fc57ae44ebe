//! The control socket: a Unix stream socket, mode 0600 (root only), one JSON request per
//! line in, one JSON reply per line out. Connections are served on their own threads;
//! requests are carried out one at a time by the control loop.

use crate::api::{Reply, Request};
use crossbeam_channel::Sender;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

pub type Job = (Request, Sender<Reply>);

/// The control socket's file as this process bound it: removed on exit only while the
/// path still names this very socket (its device and inode), so an instance never
/// deletes a socket another instance bound after it.
pub struct BoundSocket {
    path: std::path::PathBuf,
    id: (u64, u64),
}

impl BoundSocket {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Remove the socket file if it is still ours.
    pub fn remove_if_ours(&self) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.id {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Bind the socket (replacing a stale one) with owner-only permissions. A socket a
/// live instance answers on is never replaced: that is `AddrInUse`.
pub fn bind(path: &Path) -> std::io::Result<(UnixListener, BoundSocket)> {
    use std::os::unix::fs::MetadataExt;
    if path.exists() {
        // A live instance answers; a stale file does not.
        if UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, format!("{} is in use by a running vecgate", path.display())));
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let m = std::fs::symlink_metadata(path)?;
    Ok((l, BoundSocket { path: path.to_path_buf(), id: (m.dev(), m.ino()) }))
}

/// Accept connections forever on a background thread.
pub fn serve(listener: UnixListener, jobs: Sender<Job>) {
    std::thread::Builder::new()
        .name("vecgate-ctl".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let jobs = jobs.clone();
                let _ = std::thread::Builder::new().name("vecgate-ctl-conn".into()).spawn(move || session(conn, jobs));
            }
        })
        .expect("spawn control socket thread");
}

fn session(conn: UnixStream, jobs: Sender<Job>) {
    let Ok(mut out) = conn.try_clone() else { return };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match parse_request(&line) {
            Err(e) => Reply::err(e),
            Ok(req) => {
                let (tx, rx) = crossbeam_channel::bounded(1);
                if jobs.send((req, tx)).is_err() {
                    return;
                }
                match rx.recv() {
                    Ok(r) => r,
                    Err(_) => return,
                }
            }
        };
        let Ok(mut text) = serde_json::to_string(&reply) else { return };
        text.push('\n');
        if out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// One request line, or an error that names the field it is about. serde reads an
/// internally tagged enum's object whole before it reads the variant's fields, so a
/// field's wrong type or value reports no field name; the field is found by removing
/// the object's keys one at a time: the key whose removal changes the error is the one
/// it was about (a struct's fields are read in order, and a missing field is only
/// reported after all of them, so removing any other key leaves the same error).
pub fn parse_request(line: &str) -> Result<Request, String> {
    let err = match serde_json::from_str::<Request>(line) {
        Ok(req) => return Ok(req),
        Err(e) => e,
    };
    // Not JSON, or not an object: the parser's own message (with its position) says it.
    let Ok(serde_json::Value::Object(object)) = serde_json::from_str::<serde_json::Value>(line) else {
        return Err(format!("bad request: {err}"));
    };
    let error_of = |object: serde_json::Map<String, serde_json::Value>| {
        serde_json::from_value::<Request>(serde_json::Value::Object(object)).err().map(|e| e.to_string())
    };
    let Some(whole) = error_of(object.clone()) else {
        return Err(format!("bad request: {err}"));
    };
    // These already name what they are about; and a request has a few dozen fields at
    // most, so an object of many more keys is not searched (each try copies it).
    let named = ["missing field", "unknown field", "unknown variant", "duplicate field"].iter().any(|p| whole.starts_with(p));
    if named || object.len() > 64 {
        return Err(format!("bad request: {whole}"));
    }
    let field = object.keys().filter(|k| *k != "op").find(|k| {
        let mut without = object.clone();
        without.remove(*k);
        error_of(without).as_deref() != Some(whole.as_str())
    });
    match field {
        Some(field) => Err(format!("bad request: field `{field}`: {whole}")),
        None => Err(format!("bad request: {whole}")),
    }
}

/// Client side: send one request, read one reply.
pub fn call(path: &Path, req: &Request) -> std::io::Result<Reply> {
    let mut s = UnixStream::connect(path)?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut r = String::new();
    BufReader::new(s).read_line(&mut r)?;
    serde_json::from_str(&r).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::parse_request;

    #[test]
    fn a_wrong_type_or_value_names_its_field() {
        let e = parse_request(r#"{"op":"ip_route_add","prefix":"2001:db8:5::/48","via":5}"#).unwrap_err();
        assert!(e.starts_with("bad request: field `via`: "), "{e}");
        let e = parse_request(r#"{"op":"ip_route_add","prefix":"2001:db8:5::/48","blackhole":"yes","via":"2001:db8::2"}"#).unwrap_err();
        assert!(e.starts_with("bad request: field `blackhole`: "), "{e}");
        // The wrong one among several good ones, wherever it stands.
        let e = parse_request(r#"{"op":"create_gtpu_tunnel","teid_out":"x","local":"2001:db8::1","remote":"2001:db8::2","teid_in":1}"#)
            .unwrap_err();
        assert!(e.starts_with("bad request: field `teid_out`: "), "{e}");
        let e = parse_request(r#"{"op":"create_gtpu_tunnel","local":"2001:db8::1","remote":"2001:db8::2","teid_in":1,"teid_out":-2}"#)
            .unwrap_err();
        assert!(e.starts_with("bad request: field `teid_out`: "), "{e}");
    }

    #[test]
    fn errors_that_name_their_subject_are_kept() {
        let e = parse_request(r#"{"op":"show_runtime","extra":1}"#).unwrap_err();
        assert!(e.starts_with("bad request: unknown field `extra`"), "{e}");
        let e = parse_request(r#"{"op":"ip_route_add","via":"2001:db8::2"}"#).unwrap_err();
        assert!(e.starts_with("bad request: missing field `prefix`"), "{e}");
        let e = parse_request(r#"{"op":"no_such_op"}"#).unwrap_err();
        assert!(e.starts_with("bad request: unknown variant `no_such_op`"), "{e}");
        let e = parse_request(r#"{"op":"show_runtime""#).unwrap_err();
        assert!(e.starts_with("bad request: EOF while parsing"), "{e}");
        assert!(parse_request(r#"{"op":"show_runtime"}"#).is_ok());
        // A wrong type ahead of very many keys: answered without searching them.
        let keys: String = (0..100_000).map(|i| format!(r#","k{i}":0"#)).collect();
        let e = parse_request(&format!(r#"{{"op":"ip_route_add","blackhole":"yes"{keys}}}"#)).unwrap_err();
        assert!(e.starts_with("bad request: invalid type"), "{e}");
    }
}
