//! `--punt-health-ports`: the controller punts its own health check ports. Where the
//! node's addresses belong to the gateway, a load balancer's check of the node (TCP to
//! the proxy health server's port, 10256 by default, and to each Service's
//! `healthCheckNodePort`) reaches the host's stack, and so this controller, only if the
//! gateway punts that port (`[punt]`). With the flag, each port the health server listens
//! on is added to the gateway's punt ports (`punt_port_add`, owner [`OWNER`]) when its
//! listener opens, and deleted when it closes.
//!
//! One thread does the gateway's requests, so the listeners' loop never waits on the
//! gateway: the hooks only say which ports are open. The thread brings the gateway's
//! owner-`k8s` ports to that set on every change and every [`RESYNC`] (a gateway
//! restarted from its file has forgotten them; a refused request is tried again). Ports
//! of the owner that this run does not serve — a previous run's — are deleted once the
//! controller's initial sync is done ([`HealthPunt::reconcile`]): before it, the
//! listeners of the Services not yet seen are still to open.

use control::api::{Reply, Request};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// The owner of the ports this controller adds.
pub const OWNER: &str = "k8s";

/// How often the gateway's ports are checked against the open listeners without a change.
pub const RESYNC: Duration = Duration::from_secs(5);

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    Open(u16),
    Close(u16),
    Reconcile,
}

/// The handle the health server's hooks call; the thread stops when it is dropped.
#[derive(Clone, Debug)]
pub struct HealthPunt {
    tx: mpsc::Sender<Msg>,
}

impl HealthPunt {
    /// Start the thread that programs the gateway behind `socket` (one that cannot start
    /// is logged: the health checks are answered all the same, their ports not punted).
    pub fn start(socket: PathBuf) -> HealthPunt {
        let (tx, rx) = mpsc::channel();
        if let Err(e) = std::thread::Builder::new().name("health-punt".into()).spawn(move || run(socket, rx)) {
            tracing::error!(error = %e, "health check ports not punted: no thread");
        }
        HealthPunt { tx }
    }

    /// A handle whose messages a test reads instead of a thread.
    #[cfg(test)]
    pub(crate) fn recording() -> (HealthPunt, mpsc::Receiver<Msg>) {
        let (tx, rx) = mpsc::channel();
        (HealthPunt { tx }, rx)
    }

    /// A health listener on TCP `port` is open.
    pub fn open(&self, port: u16) {
        let _ = self.tx.send(Msg::Open(port));
    }

    /// A health listener on TCP `port` closed.
    pub fn close(&self, port: u16) {
        let _ = self.tx.send(Msg::Close(port));
    }

    /// The initial sync is done: every listener this run serves is known, so the owner's
    /// other ports (a previous run's) go.
    pub fn reconcile(&self) {
        let _ = self.tx.send(Msg::Reconcile);
    }
}

/// What this run wants punted and what it may delete.
#[derive(Debug, Default)]
pub struct Wanted {
    /// Open listeners by port (a port may pass from one Service to another: closed for
    /// one, opened for the next).
    open: BTreeMap<u16, usize>,
    /// Ports whose listeners this run closed: deleted even before the reconcile.
    released: BTreeSet<u16>,
    /// The initial sync is done: every port of the owner not open is deleted.
    reconciled: bool,
}

impl Wanted {
    pub fn open(&mut self, port: u16) {
        *self.open.entry(port).or_default() += 1;
        self.released.remove(&port);
    }

    pub fn close(&mut self, port: u16) {
        if let Some(n) = self.open.get_mut(&port) {
            *n -= 1;
            if *n == 0 {
                self.open.remove(&port);
                self.released.insert(port);
            }
        }
    }

    pub fn reconcile(&mut self) {
        self.reconciled = true;
    }

    /// The requests that bring the owner's ports on the gateway (`have`) to the open
    /// listeners: adds first, then deletes.
    pub fn plan(&self, have: &BTreeSet<u16>) -> Vec<Request> {
        let port_req = |port: u16, add: bool| {
            let (protocol, owner) = (lb::Protocol::Tcp, Some(OWNER.to_string()));
            if add {
                Request::PuntPortAdd { protocol, port, owner }
            } else {
                Request::PuntPortDel { protocol, port, owner }
            }
        };
        let adds = self.open.keys().filter(|p| !have.contains(p)).map(|&p| port_req(p, true));
        let stale = have.iter().filter(|p| !self.open.contains_key(p) && (self.reconciled || self.released.contains(p)));
        adds.chain(stale.map(|&p| port_req(p, false))).collect()
    }

    /// A port deleted on the gateway is no longer this run's to release.
    fn deleted(&mut self, port: u16) {
        self.released.remove(&port);
    }
}

/// The owner's TCP ports in a `show_punt` reply; `None`: the gateway has no `[punt]`.
pub fn owned_ports(reply: &Reply) -> Option<BTreeSet<u16>> {
    reply.data.get("punt").filter(|p| !p.is_null())?;
    let rows = reply.data.get("ports").and_then(|p| p.as_array()).map(Vec::as_slice).unwrap_or_default();
    let mine = rows.iter().filter(|r| r["protocol"] == "tcp" && r["owner"] == OWNER);
    Some(mine.filter_map(|r| r["port"].as_u64().and_then(|p| u16::try_from(p).ok())).collect())
}

fn run(socket: PathBuf, rx: mpsc::Receiver<Msg>) {
    let mut wanted = Wanted::default();
    // Logged once until it changes: no [punt] on the gateway, the gateway unreachable.
    let mut said = None::<&'static str>;
    loop {
        match rx.recv_timeout(RESYNC) {
            Ok(Msg::Open(p)) => wanted.open(p),
            Ok(Msg::Close(p)) => wanted.close(p),
            Ok(Msg::Reconcile) => wanted.reconcile(),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        // Several changes at once (a resync) make one pass.
        while let Ok(m) = rx.try_recv() {
            match m {
                Msg::Open(p) => wanted.open(p),
                Msg::Close(p) => wanted.close(p),
                Msg::Reconcile => wanted.reconcile(),
            }
        }
        let have = match control::server::call(&socket, &Request::ShowPunt {}) {
            Ok(r) if r.ok => owned_ports(&r),
            Ok(r) => {
                tracing::warn!(error = r.error.as_deref().unwrap_or(""), "show punt refused: health check ports not punted");
                continue;
            }
            Err(e) => {
                if said != Some("unreachable") {
                    tracing::warn!(socket = %socket.display(), error = %e, "gateway unreachable: health check ports not punted yet");
                    said = Some("unreachable");
                }
                continue;
            }
        };
        let Some(have) = have else {
            if said != Some("no punt") {
                tracing::warn!("the gateway has no [punt] section: health check ports cannot be punted (--punt-health-ports)");
                said = Some("no punt");
            }
            continue;
        };
        said = None;
        for req in wanted.plan(&have) {
            let (port, add) = match &req {
                Request::PuntPortAdd { port, .. } => (*port, true),
                Request::PuntPortDel { port, .. } => (*port, false),
                _ => continue,
            };
            match control::server::call(&socket, &req) {
                Ok(r) if r.ok => {
                    if !add {
                        wanted.deleted(port);
                    }
                    tracing::info!(
                        port,
                        owner = OWNER,
                        "{}",
                        if add { "health check port punted" } else { "health check port no longer punted" }
                    );
                }
                Ok(r) => tracing::warn!(port, error = r.error.as_deref().unwrap_or(""), "punt request refused; tried again"),
                Err(e) => tracing::warn!(port, error = %e, "punt request failed; tried again"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(reqs: &[Request]) -> Vec<(bool, u16)> {
        reqs.iter()
            .map(|r| match r {
                Request::PuntPortAdd { port, owner, protocol } => {
                    assert_eq!((owner.as_deref(), *protocol), (Some(OWNER), lb::Protocol::Tcp));
                    (true, *port)
                }
                Request::PuntPortDel { port, owner, .. } => {
                    assert_eq!(owner.as_deref(), Some(OWNER), "only the owner's own ports");
                    (false, *port)
                }
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn open_listeners_are_added_closed_ones_deleted_a_previous_runs_after_the_sync() {
        let mut w = Wanted::default();
        w.open(10256);
        w.open(30123);
        // The gateway has a previous run's 31000 and our 10256 already.
        let have: BTreeSet<u16> = [10256, 31000].into();
        assert_eq!(ports(&w.plan(&have)), [(true, 30123)], "31000 may be a Service not seen yet");
        w.reconcile();
        assert_eq!(ports(&w.plan(&have)), [(true, 30123), (false, 31000)]);
        let have: BTreeSet<u16> = [10256, 30123].into();
        assert!(w.plan(&have).is_empty());
        w.close(30123);
        assert_eq!(ports(&w.plan(&have)), [(false, 30123)]);
    }

    #[test]
    fn a_port_closed_before_the_sync_is_deleted_and_one_passed_on_stays() {
        let mut w = Wanted::default();
        w.open(30123);
        w.close(30123);
        assert_eq!(ports(&w.plan(&[30123].into())), [(false, 30123)], "this run's own, released");
        w.deleted(30123);
        assert!(w.plan(&BTreeSet::new()).is_empty());
        // Closed for one Service and opened for the next: still wanted, not deleted.
        w.open(30200);
        w.open(30200);
        w.close(30200);
        w.reconcile();
        assert!(w.plan(&[30200].into()).is_empty());
    }

    #[test]
    fn the_owners_ports_from_show_punt() {
        let data = serde_json::json!({
            "punt": {"interface": "host"},
            "ports": [
                {"protocol": "tcp", "port": 179, "file": true},
                {"protocol": "tcp", "port": 10256, "file": false, "owner": "k8s"},
                {"protocol": "udp", "port": 10257, "file": false, "owner": "k8s"},
                {"protocol": "tcp", "port": 30123, "file": true, "owner": "k8s"},
                {"protocol": "tcp", "port": 30124, "file": false, "owner": "bgp"},
            ],
        });
        let r = Reply::ok(data, String::new());
        assert_eq!(owned_ports(&r), Some([10256, 30123].into()));
        let off = Reply::ok(serde_json::json!({"punt": null, "ports": []}), String::new());
        assert_eq!(owned_ports(&off), None);
    }
}
