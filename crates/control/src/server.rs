//! The control socket: a Unix stream socket, mode 0600 (root only), one JSON request per
//! line in, one JSON reply per line out. Connections are served on their own threads;
//! requests are carried out one at a time by the control loop.

use crate::api::{Reply, Request};
use crossbeam_channel::Sender;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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

/// Connections served at once, each on its own thread: one more is answered with an
/// error and closed, so that a client leaking connections cannot use up the process's
/// threads.
pub const MAX_CONNECTIONS: usize = 64;

/// Accept connections forever on a background thread.
pub fn serve(listener: UnixListener, jobs: Sender<Job>) {
    let open = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("vecgate-ctl".into())
        .spawn(move || {
            for mut conn in listener.incoming().flatten() {
                if open.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                    open.fetch_sub(1, Ordering::AcqRel);
                    let why = format!("too many control connections ({MAX_CONNECTIONS} open): close some and retry");
                    let _ = send(&mut conn, &Reply::err(why));
                    continue;
                }
                let (jobs, done) = (jobs.clone(), open.clone());
                let spawned = std::thread::Builder::new().name("vecgate-ctl-conn".into()).spawn(move || {
                    session(conn, jobs);
                    done.fetch_sub(1, Ordering::AcqRel);
                });
                if spawned.is_err() {
                    open.fetch_sub(1, Ordering::AcqRel);
                }
            }
        })
        .expect("spawn control socket thread");
}

/// One reply as a line.
fn send(out: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    let mut text = serde_json::to_string(reply)?;
    text.push('\n');
    out.write_all(text.as_bytes())
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
        if send(&mut out, &reply).is_err() {
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
    call_on(UnixStream::connect(path)?, req)
}

fn call_on(mut s: UnixStream, req: &Request) -> std::io::Result<Reply> {
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    let wrote = s.write_all(line.as_bytes());
    // A connection past the limit is answered and closed before its request is read, so
    // the write may fail with a broken pipe while the refusal waits to be read.
    let mut r = String::new();
    let read = BufReader::new(s).read_line(&mut r);
    match (wrote, read) {
        (_, Ok(n)) if n > 0 => {}
        (Err(e), _) | (Ok(()), Err(e)) => return Err(e),
        (Ok(()), Ok(_)) => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the control socket closed without a reply")),
    }
    serde_json::from_str(&r).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_past_the_limit_are_answered_and_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let (listener, _bound) = bind(&path).unwrap();
        let (jobs, requests) = crossbeam_channel::unbounded::<Job>();
        serve(listener, jobs);
        // The control loop: every request answered.
        std::thread::spawn(move || {
            for (_, tx) in requests {
                let _ = tx.send(Reply::ok(serde_json::Value::Null, "fine".to_string()));
            }
        });
        let ask = |s: &UnixStream| {
            let mut w = s.try_clone().unwrap();
            w.write_all(b"{\"op\":\"show_runtime\"}\n").unwrap();
            let mut line = String::new();
            BufReader::new(s.try_clone().unwrap()).read_line(&mut line).unwrap();
            serde_json::from_str::<Reply>(&line).unwrap()
        };
        // Held open, each answered once so that its session runs.
        let mut held: Vec<UnixStream> = (0..MAX_CONNECTIONS).map(|_| UnixStream::connect(&path).unwrap()).collect();
        for s in &held {
            assert!(ask(s).ok);
        }
        let extra = UnixStream::connect(&path).unwrap();
        // Served like the others, it would wait for a request: a bounded wait fails it.
        extra.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let mut line = String::new();
        BufReader::new(&extra).read_line(&mut line).unwrap();
        let r: Reply = serde_json::from_str(&line).unwrap();
        assert!(r.error.as_deref().is_some_and(|e| e.starts_with("too many control connections (64 open)")), "{r:?}");
        // A client that writes its request only after the server closed (a broken pipe)
        // still reads the refusal.
        let late = UnixStream::connect(&path).unwrap();
        // POLLHUP is reported without being asked for, once the peer has closed.
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(std::os::fd::AsFd::as_fd(&late), PollFlags::empty())];
        assert_eq!(poll(&mut fds, PollTimeout::from(10_000u16)).unwrap(), 1, "the server never closed the connection past the limit");
        let r = call_on(late, &Request::ShowRuntime {}).unwrap();
        assert!(r.error.as_deref().is_some_and(|e| e.starts_with("too many control connections")), "{r:?}");
        // One closed makes room again.
        drop(held.pop());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // Until the server has seen the close, a new connection is refused and closed,
            // perhaps before the request is written: `call` reads the refusal even then.
            if call(&path, &Request::ShowRuntime {}).unwrap().ok {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no room after a connection closed");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

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
