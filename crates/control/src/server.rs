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
        let reply = match serde_json::from_str::<Request>(&line) {
            Err(e) => Reply::err(format!("bad request: {e}")),
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
