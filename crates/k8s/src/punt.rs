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
//! owner-`k8s` ports to that set on every change and every [`RESYNC`] (a refused request
//! is tried again). A gateway restarted from its file has forgotten them: the thread
//! keeps one idle connection to the control socket open, whose end (the gateway gone)
//! wakes it at once, and then tries every [`RETRY_GONE`] until the gateway answers again
//! and takes the ports back, rather than at the next [`RESYNC`]; so does a controller
//! started before its gateway. A gateway down for longer than a restart is tried less
//! and less often, up to every [`RETRY_GONE_MAX`] ([`retry_wait`]), and logged at the
//! first failure and then every [`UNREACHABLE_LOG`] ([`Tries`]). One that answers with a
//! refusal (an older gateway, one past its connection limit) is reachable: the failures
//! end, it is asked again every [`RESYNC`], and the refusal is logged as an outage is. Ports
//! of the owner that this run does not serve — a previous run's — are deleted once the
//! controller's initial sync is done ([`HealthPunt::reconcile`]): before it, the
//! listeners of the Services not yet seen are still to open.

use control::api::{Reply, Request};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The owner of the ports this controller adds.
pub const OWNER: &str = "k8s";

/// How often the gateway's ports are checked against the open listeners without a change.
pub const RESYNC: Duration = Duration::from_secs(5);

/// How often a gateway that went away (or never answered yet) is tried again at first.
pub const RETRY_GONE: Duration = Duration::from_millis(200);

/// Failed tries at [`RETRY_GONE`] before the wait doubles: 5 s of them, a restart's time,
/// so a restarted gateway gets its ports back within 0.2 s of answering.
pub const RETRY_GONE_TRIES: u32 = 25;

/// The longest wait between tries at a gateway that does not answer (as often as
/// [`RESYNC`] checks one that does).
pub const RETRY_GONE_MAX: Duration = Duration::from_secs(5);

/// How often a gateway that still does not answer is logged again.
pub const UNREACHABLE_LOG: Duration = Duration::from_secs(60);

/// The wait before the next try at the gateway after `failures` tries in a row failed:
/// [`RETRY_GONE`] for the first [`RETRY_GONE_TRIES`], then doubling up to
/// [`RETRY_GONE_MAX`].
pub fn retry_wait(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(RETRY_GONE_TRIES).min(16);
    RETRY_GONE.saturating_mul(1 << doublings).min(RETRY_GONE_MAX)
}

/// What one try at the gateway (`show punt`) came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No answer: no socket, the connection refused, or closed without a reply.
    NoAnswer,
    /// An error reply: an older gateway, a transient refusal, one past its connection
    /// limit. It answers, so it is reachable; its ports are not known.
    Refused,
    /// The gateway's punt ports.
    Answered,
}

/// What of a try to log; each run of like tries is logged at its first and then at most
/// every [`UNREACHABLE_LOG`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Note {
    /// `gateway unreachable`: for how long the gateway has not answered.
    pub unreachable: Option<Duration>,
    /// `gateway answers`: after this many tries it did not.
    pub answers_after: u32,
    /// `show punt refused`: for how long it has been refused.
    pub refused: Option<Duration>,
    /// `show punt answered`: after this many tries it was refused.
    pub answered_after: u32,
}

/// Tries in a row that came to the same failure, since when, and when last logged.
#[derive(Debug, Default)]
struct Run {
    count: u32,
    since: Option<Instant>,
    logged: Option<Instant>,
}

impl Run {
    /// One more at `now`: whether to log it (the first, then at most every
    /// [`UNREACHABLE_LOG`]) and for how long the run has lasted.
    fn add(&mut self, now: Instant) -> Option<Duration> {
        self.count = self.count.saturating_add(1);
        let since = *self.since.get_or_insert(now);
        let due = self.logged.is_none_or(|t| now.saturating_duration_since(t) >= UNREACHABLE_LOG);
        due.then(|| {
            self.logged = Some(now);
            now.saturating_duration_since(since)
        })
    }

    /// The run ended: the next failure starts one, logged at once. Its tries, if any.
    fn end(&mut self) -> u32 {
        std::mem::take(self).count
    }
}

/// The thread's tries at the gateway (sans-IO: the time is a parameter): when the last
/// was, and the runs of tries it did not answer and of those it refused.
#[derive(Debug)]
pub struct Tries {
    last: Instant,
    unanswered: Run,
    refused: Run,
}

impl Tries {
    /// The thread started at `now`: the first try is due [`RETRY_GONE`] later (at the first
    /// change if sooner).
    pub fn new(now: Instant) -> Tries {
        Tries { last: now, unanswered: Run::default(), refused: Run::default() }
    }

    /// A try at `now` came to `outcome`: what to log.
    pub fn tried(&mut self, now: Instant, outcome: Outcome) -> Note {
        self.last = now;
        let mut note = Note::default();
        if outcome == Outcome::NoAnswer {
            note.unreachable = self.unanswered.add(now);
            return note;
        }
        // Any answer, a refusal too: the gateway is reachable, so an outage after it is
        // tried every RETRY_GONE again and logged at once. A refusal run outlasts an
        // outage (an older gateway restarted still refuses): only ports end it.
        note.answers_after = self.unanswered.end();
        if outcome == Outcome::Refused {
            note.refused = self.refused.add(now);
        } else {
            note.answered_after = self.refused.end();
        }
        note
    }

    /// When the next try is due without a change: [`RESYNC`] after the last while the
    /// idle connection is open (`watched`), and after a refusal even if not (an answer
    /// that refuses is no faster for asking sooner, and the idle connection of a gateway
    /// past its connection limit is closed as it opens: trying at once would spin);
    /// otherwise [`retry_wait`] of the tries it did not answer.
    pub fn due(&self, watched: bool) -> Instant {
        let refusing = self.refused.count > 0 && self.unanswered.count == 0;
        self.last + if watched || refusing { RESYNC } else { retry_wait(self.unanswered.count) }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    Open(u16),
    Close(u16),
    Reconcile,
    /// The gateway closed idle connection `n`: it went away (or restarted).
    Gone(u64),
    /// The gateway answered idle connection `n` and closed it: it refused the connection
    /// (past its connection limit), and is still there.
    Shed(u64),
    /// Every handle was dropped.
    Stop,
}

/// The handle the health server's hooks call; the thread stops when the last clone is
/// dropped.
#[derive(Clone, Debug)]
pub struct HealthPunt {
    tx: mpsc::Sender<Msg>,
    _stop: Arc<StopOnDrop>,
}

/// Tells the thread to stop when the last handle goes (the thread holds a sender of its
/// own, for the idle connection's watcher, so the channel does not say it).
#[derive(Debug)]
struct StopOnDrop(mpsc::Sender<Msg>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(Msg::Stop);
    }
}

impl HealthPunt {
    /// Start the thread that programs the gateway behind `socket` (one that cannot start
    /// is logged: the health checks are answered all the same, their ports not punted).
    pub fn start(socket: PathBuf) -> HealthPunt {
        let (tx, rx) = mpsc::channel();
        let own = tx.clone();
        if let Err(e) = std::thread::Builder::new().name("health-punt".into()).spawn(move || run(socket, rx, own)) {
            tracing::error!(error = %e, "health check ports not punted: no thread");
        }
        HealthPunt { tx: tx.clone(), _stop: Arc::new(StopOnDrop(tx)) }
    }

    /// A handle whose messages a test reads instead of a thread.
    #[cfg(test)]
    pub(crate) fn recording() -> (HealthPunt, mpsc::Receiver<Msg>) {
        let (tx, rx) = mpsc::channel();
        (HealthPunt { tx: tx.clone(), _stop: Arc::new(StopOnDrop(tx)) }, rx)
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

/// An idle connection to the control socket, and a thread blocked reading it: the
/// gateway never writes on a connection without a request, so the read ends (end of
/// file, or an error) only when the gateway closes it, by exiting: then `Gone`; or past
/// its connection limit, answered with a refusal as it opens: then `Shed`.
struct Watch(UnixStream, u64);

impl Watch {
    fn open(socket: &Path, tx: mpsc::Sender<Msg>, n: u64) -> Option<Watch> {
        let conn = UnixStream::connect(socket).ok()?;
        let mut reader = conn.try_clone().ok()?;
        std::thread::Builder::new()
            .name("health-punt-watch".into())
            .spawn(move || {
                let end = match reader.read(&mut [0u8; 1]) {
                    Ok(1) => Msg::Shed(n),
                    _ => Msg::Gone(n),
                };
                let _ = tx.send(end);
            })
            .ok()?;
        Some(Watch(conn, n))
    }
}

impl Drop for Watch {
    /// Ends the watcher's read (it sends a `Gone` of a connection no longer watched,
    /// which is ignored, or to no one).
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// Applies a message other than `Stop`: whether it changes the ports wanted (a try at
/// once) rather than ends the idle connection (a try when due, now unwatched).
fn apply(m: Msg, wanted: &mut Wanted, watch: &mut Option<Watch>) -> bool {
    match m {
        Msg::Open(p) => wanted.open(p),
        Msg::Close(p) => wanted.close(p),
        Msg::Reconcile => wanted.reconcile(),
        Msg::Gone(n) | Msg::Shed(n) => {
            if watch.as_ref().is_some_and(|w| w.1 == n) {
                *watch = None;
                if m == Msg::Gone(n) {
                    tracing::info!("gateway gone: its punted health check ports are added again once it answers");
                }
            }
            return false;
        }
        Msg::Stop => {}
    }
    true
}

fn run(socket: PathBuf, rx: mpsc::Receiver<Msg>, own: mpsc::Sender<Msg>) {
    let mut wanted = Wanted::default();
    // Logged once until the gateway answers with one: no [punt] on the gateway.
    let mut said_no_punt = false;
    let mut tries = Tries::new(Instant::now());
    // The idle connection while the gateway answers; `None`: it has not answered since
    // it went away (or ever), or refused the connection.
    let mut watch: Option<Watch> = None;
    let mut watches = 0u64;
    loop {
        // Until a change, or the next try is due (sooner once the idle connection ends).
        loop {
            let wait = tries.due(watch.is_some()).saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Ok(m) => {
                    if apply(m, &mut wanted, &mut watch) {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
            }
        }
        // Several changes at once (a resync) make one pass.
        while let Ok(m) = rx.try_recv() {
            if m == Msg::Stop {
                return;
            }
            apply(m, &mut wanted, &mut watch);
        }
        // Watched before asked: a gateway that goes between the two is seen going.
        if watch.is_none() {
            watches += 1;
            watch = Watch::open(&socket, own.clone(), watches);
        }
        let reply = control::server::call(&socket, &Request::ShowPunt {});
        let outcome = match &reply {
            Ok(r) if r.ok => Outcome::Answered,
            Ok(_) => Outcome::Refused,
            Err(_) => Outcome::NoAnswer,
        };
        let note = tries.tried(Instant::now(), outcome);
        if note.answers_after > 0 {
            tracing::info!(failed_tries = note.answers_after, "gateway answers");
        }
        if note.answered_after > 0 {
            tracing::info!(refused_tries = note.answered_after, "show punt answered");
        }
        let have = match reply {
            Ok(r) if r.ok => owned_ports(&r),
            Ok(r) => {
                if let Some(refused) = note.refused {
                    tracing::warn!(
                        error = r.error.as_deref().unwrap_or(""),
                        refused_s = refused.as_secs(),
                        "show punt refused: health check ports not punted (tried again every {} s)",
                        RESYNC.as_secs()
                    );
                }
                continue;
            }
            Err(e) => {
                watch = None;
                if let Some(down) = note.unreachable {
                    tracing::warn!(
                        socket = %socket.display(),
                        error = %e,
                        down_s = down.as_secs(),
                        "gateway unreachable: health check ports not punted yet (tried again, at most every {} s)",
                        RETRY_GONE_MAX.as_secs()
                    );
                }
                continue;
            }
        };
        let Some(have) = have else {
            if !said_no_punt {
                tracing::warn!("the gateway has no [punt] section: health check ports cannot be punted (--punt-health-ports)");
                said_no_punt = true;
            }
            continue;
        };
        said_no_punt = false;
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

    /// A gateway's control socket as far as this thread uses it: one JSON line each way
    /// per request, `show_punt` and the owner's `punt_port_add`/`punt_port_del` answered
    /// from its own ports (none at start, as a gateway started from its file). `stop`
    /// closes the listener, removes the socket and closes every connection, as a
    /// gateway that exits.
    struct FakeGateway {
        path: PathBuf,
        stop: Arc<std::sync::atomic::AtomicBool>,
        conns: Arc<std::sync::Mutex<Vec<UnixStream>>>,
        added: Arc<std::sync::Mutex<Vec<u16>>>,
        accept: Option<std::thread::JoinHandle<()>>,
    }

    impl FakeGateway {
        fn start(path: &Path) -> FakeGateway {
            use std::sync::atomic::Ordering;
            let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
            listener.set_nonblocking(true).unwrap();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let conns = Arc::new(std::sync::Mutex::new(Vec::<UnixStream>::new()));
            let added = Arc::new(std::sync::Mutex::new(Vec::new()));
            let ports = Arc::new(std::sync::Mutex::new(BTreeSet::<u16>::new()));
            let (s, c, a) = (stop.clone(), conns.clone(), added.clone());
            let accept = std::thread::spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    let Ok((conn, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    conn.set_nonblocking(false).unwrap();
                    c.lock().unwrap().push(conn.try_clone().unwrap());
                    let (ports, added) = (ports.clone(), a.clone());
                    std::thread::spawn(move || serve(conn, &ports, &added));
                }
            });
            FakeGateway { path: path.to_path_buf(), stop, conns, added, accept: Some(accept) }
        }

        fn added(&self) -> Vec<u16> {
            self.added.lock().unwrap().clone()
        }

        fn stop(mut self) {
            self.unbind();
            self.hang_up();
        }

        /// No new connections: the listener closed, the socket file removed.
        fn unbind(&mut self) {
            self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
            self.accept.take().unwrap().join().unwrap();
            std::fs::remove_file(&self.path).unwrap();
        }

        /// Every connection closed.
        fn hang_up(&self) {
            for c in self.conns.lock().unwrap().iter() {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn serve(conn: UnixStream, ports: &std::sync::Mutex<BTreeSet<u16>>, added: &std::sync::Mutex<Vec<u16>>) {
        use std::io::{BufRead, Write};
        let mut out = conn.try_clone().unwrap();
        for line in std::io::BufReader::new(conn).lines() {
            let Ok(line) = line else { return };
            let reply = match serde_json::from_str::<Request>(&line).unwrap() {
                Request::ShowPunt {} => {
                    let rows: Vec<_> = ports
                        .lock()
                        .unwrap()
                        .iter()
                        .map(|p| serde_json::json!({"protocol": "tcp", "port": p, "file": false, "owner": OWNER}))
                        .collect();
                    Reply::ok(serde_json::json!({"punt": {"interface": "host"}, "ports": rows}), String::new())
                }
                Request::PuntPortAdd { port, .. } => {
                    ports.lock().unwrap().insert(port);
                    added.lock().unwrap().push(port);
                    Reply::ok(serde_json::Value::Null, String::new())
                }
                Request::PuntPortDel { port, .. } => {
                    ports.lock().unwrap().remove(&port);
                    Reply::ok(serde_json::Value::Null, String::new())
                }
                other => Reply::err(format!("unexpected {other:?}")),
            };
            let mut text = serde_json::to_string(&reply).unwrap();
            text.push('\n');
            if out.write_all(text.as_bytes()).is_err() {
                return;
            }
        }
    }

    /// How long until `gw` was asked to add `port`, waiting at most `limit`.
    fn added_within(gw: &FakeGateway, port: u16, limit: Duration) -> Option<Duration> {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < limit {
            if gw.added().contains(&port) {
                return Some(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// A gateway that restarts (from its file: no added ports) gets the open listeners'
    /// ports back as soon as it answers, not at the next RESYNC: the idle connection's end
    /// wakes the thread, which tries every RETRY_GONE. A gateway started after the
    /// controller gets them as fast. Both within 2 s where RESYNC is 5.
    #[test]
    fn a_restarted_gateway_gets_the_ports_back_before_the_resync() {
        assert!(RESYNC >= Duration::from_secs(5) && RETRY_GONE <= Duration::from_millis(500));
        let dir = std::env::temp_dir().join(format!("vecgate-health-punt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let _ = std::fs::remove_file(&path);
        let punt = HealthPunt::start(path.clone());
        punt.open(10256);
        // The controller first: the gateway comes up later.
        std::thread::sleep(Duration::from_millis(300));
        let gw = FakeGateway::start(&path);
        let first = added_within(&gw, 10256, Duration::from_secs(2)).expect("added once the gateway came up");
        // Right after that add the thread's next resync is RESYNC away: the gateway
        // restarts now, down for 300 ms.
        gw.stop();
        std::thread::sleep(Duration::from_millis(300));
        let gw = FakeGateway::start(&path);
        let again = added_within(&gw, 10256, Duration::from_secs(2));
        assert!(again.is_some(), "not added again within 2 s of the restart (first add after {first:?})");
        assert_eq!(gw.added(), [10256], "once");
        // A restart with no time down: the new gateway answers before the old one's
        // connections end, so the thread's first request after the end succeeds. It
        // watches the new gateway all the same: its restart is seen too.
        let mut old = gw;
        old.unbind();
        let gw = FakeGateway::start(&path);
        old.hang_up();
        assert!(added_within(&gw, 10256, Duration::from_secs(2)).is_some(), "not added to the gateway that came up at once");
        gw.stop();
        std::thread::sleep(Duration::from_millis(300));
        let gw = FakeGateway::start(&path);
        assert!(added_within(&gw, 10256, Duration::from_secs(2)).is_some(), "the next restart not seen");
        drop(punt);
        gw.stop();
        let _ = std::fs::remove_dir(&dir);
    }

    /// Tries at `t` from `now`, each when the last made it due (unwatched, as the thread
    /// after a failure), all coming to `outcome`, until `span` has passed: when the last
    /// ended, how many there were and each note to log, by its time since `now`.
    fn tried_for(t: &mut Tries, mut now: Instant, outcome: Outcome, span: Duration) -> (Instant, u32, Vec<(Duration, Note)>) {
        let (start, mut tries, mut notes) = (now, 0u32, Vec::new());
        while now - start < span {
            tries += 1;
            let note = t.tried(now, outcome);
            if note != Note::default() {
                notes.push((now - start, note));
            }
            now = t.due(false);
        }
        (now, tries, notes)
    }

    /// A gateway that does not answer is tried every RETRY_GONE for a restart's time,
    /// then less and less often up to RETRY_GONE_MAX; once it answers, from RETRY_GONE
    /// again. Logged at the first failure, then once a minute, not at every try.
    #[test]
    fn a_gateway_down_is_tried_less_often_and_logged_once_a_minute() {
        let ms = Duration::from_millis;
        let schedule: Vec<Duration> = (0..=32).map(retry_wait).collect();
        assert_eq!(schedule[..=RETRY_GONE_TRIES as usize], [ms(200); 26]);
        assert_eq!(schedule[26..], [ms(400), ms(800), ms(1600), ms(3200), ms(5000), ms(5000), ms(5000)]);
        assert_eq!(retry_wait(u32::MAX), RETRY_GONE_MAX);
        let t0 = Instant::now();
        let mut t = Tries::new(t0);
        assert_eq!(t.due(false), t0 + RETRY_GONE, "a controller started before its gateway");
        // Virtual time, 150 s of a gateway that never answers: each try fails, and the
        // next comes after the wait it set. Tries at 0, 0.2, ... 5.0 s (26), 5.4, 6.2, 7.8,
        // 11, 16 s, then every 5 s: 61 and 121 s are the first a minute after a log.
        let (now, tries, notes) = tried_for(&mut t, t0, Outcome::NoAnswer, Duration::from_secs(150));
        let s = Duration::from_secs;
        let down = |d: Duration| Note { unreachable: Some(d), ..Note::default() };
        assert_eq!(
            notes,
            [(s(0), down(s(0))), (s(61), down(s(61))), (s(121), down(s(121)))],
            "the first failure, then at most once a minute"
        );
        assert_eq!(tries, 57);
        // It answers: the next failure is logged at once, and waits RETRY_GONE.
        assert_eq!(t.tried(now, Outcome::Answered), Note { answers_after: tries, ..Note::default() });
        assert_eq!((t.due(true), t.due(false)), (now + RESYNC, now + RETRY_GONE), "unwatched: tried soon, to watch it");
        assert_eq!(t.tried(now, Outcome::NoAnswer), down(Duration::ZERO));
        assert_eq!(t.due(false), now + RETRY_GONE);
        assert_eq!(t.tried(now + ms(200), Outcome::NoAnswer), Note::default());
        assert_eq!(t.tried(now + ms(400), Outcome::Answered).answers_after, 2);
    }

    /// A gateway that answers but refuses `show punt` (an older one, a transient refusal,
    /// one past its connection limit) is reachable: the tries it did not answer end, so an
    /// outage after it is tried every RETRY_GONE again and logged at once. It is tried
    /// again every RESYNC, as a gateway that answers, even unwatched (past its limit it
    /// closes the idle connection as it opens: no spin); the refusal logged at the first
    /// and then once a minute, over outages too, until it answers with its ports.
    #[test]
    fn a_gateway_that_refuses_show_punt_is_reachable_and_tried_at_the_resync() {
        let (s, ms) = (Duration::from_secs, Duration::from_millis);
        let t0 = Instant::now();
        let mut t = Tries::new(t0);
        // Down for 20 s: tried every 5 s by then, logged at the first try only.
        let (now, down_tries, notes) = tried_for(&mut t, t0, Outcome::NoAnswer, s(20));
        assert_eq!(notes.len(), 1);
        assert_eq!(retry_wait(down_tries), RETRY_GONE_MAX);
        // It answers, refusing.
        assert_eq!(t.tried(now, Outcome::Refused), Note { answers_after: down_tries, refused: Some(s(0)), ..Note::default() });
        assert_eq!((t.due(true), t.due(false)), (now + RESYNC, now + RESYNC), "the next try at the resync, watched or not");
        // Then it goes away, within a minute of the last `gateway unreachable`: logged at
        // once all the same, and tried again every RETRY_GONE.
        let r0 = now;
        let now = t.due(false);
        assert_eq!(t.tried(now, Outcome::NoAnswer), Note { unreachable: Some(Duration::ZERO), ..Note::default() });
        assert_eq!(t.due(false), now + RETRY_GONE);
        // Back, still refusing: the refusal run goes on, logged once a minute from r0.
        let now = t.due(false);
        assert_eq!(t.tried(now, Outcome::Refused), Note { answers_after: 1, ..Note::default() });
        let start = t.due(false);
        let (now, refusals, notes) = tried_for(&mut t, start, Outcome::Refused, s(150));
        let logged: Vec<_> = notes.into_iter().map(|(at, n)| (start + at - r0, n)).collect();
        let at = |d: Duration| (d, Note { refused: Some(d), ..Note::default() });
        assert_eq!(logged, [at(ms(60_200)), at(ms(120_200))], "once a minute from the first refusal");
        // It answers with its ports: the refusals end, and a refusal after is logged at once.
        assert_eq!(t.tried(now, Outcome::Answered), Note { answered_after: refusals + 2, ..Note::default() });
        assert_eq!(t.tried(now + RESYNC, Outcome::Refused).refused, Some(Duration::ZERO));
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
