//! PFCP (N4) in the control plane: the `[pfcp]` config section, the UDP socket around the
//! sans-IO [`pfcp::upf::Upf`], and the mapping of its dataplane actions.
//!
//! I/O: a thread reads datagrams from the socket and hands them, stamped, to the control
//! loop, which feeds the UPF, sends what it queues and applies its actions; the same loop
//! calls [`Control::pfcp_tick`] for heartbeats and retransmissions. Only the control loop
//! touches the UPF and the dataplane state, so nothing is locked.
//!
//! Dataplane mapping: each session's rules are compiled into the UPF tables
//! ([`upf::tables::UpfState`]: PDRs by direction and precedence with their FAR, QERs and
//! URRs) and published like every other table; the `upfN-uplink` / `upfN-downlink` nodes
//! apply them. A session never touches the FIB: one route per UE pool (`ue_pool`,
//! `ue_pool6`) sends downlink traffic to `upfN-downlink`, and G-PDUs for TEIDs of no
//! configured GTP-U tunnel go from `gtpuN-input` to `upfN-uplink`. URR volumes counted by
//! the workers are summed here every [`USAGE_SYNC`] and before a deletion or modification
//! is handled, and fed to the sans-IO core, which reports thresholds and quotas (a quota
//! used up reinstalls the session with its PDRs stopped). A buffering FAR's packets are
//! held by the workers (`upf-buffer`), the first one (with NOCP) making the core send a
//! Downlink Data Report; once a change is published, every worker is told to release
//! (the FAR forwards now) or discard (deleted, DROBU) what it holds of the sessions that
//! had a buffering FAR (`upf-buffer-input`). End Markers the core asks for (a FAR's
//! outer header changed with SNDEM) are built here and sent into a worker's graph
//! (`upfN-control-input`) right after the new tables are published.

use crate::dataplane::Control;
use arc_swap::ArcSwap;
use crossbeam_channel::{Receiver, Sender};
use pfcp::ie::NodeId;
use pfcp::upf::{Action, Config as UpfConfig, Liveness, Upf};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use upf::buffering::BufferCmd;
use upf::context::{Policer, Usage, UsageCells};
use upf::tables::{UpfState, UpfTables};
use upf::UpfEvent;

/// `[pfcp]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PfcpConfig {
    /// Address and port PFCP is heard on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Our Node ID (an address); default: the listen address.
    #[serde(default)]
    pub node_id: Option<String>,
    /// The N3 address put in the F-TEIDs the UPF allocates: one of the interfaces' own.
    pub n3: String,
    #[serde(default)]
    pub n3_ipv6: Option<String>,
    /// Seconds between heartbeats to each SMF.
    #[serde(default = "default_heartbeat")]
    pub heartbeat_interval: f64,
    /// Silent intervals before an SMF is lost.
    #[serde(default = "default_misses")]
    pub heartbeat_misses: u32,
    /// Seconds a lost SMF's sessions are kept (and forward) before they are deleted.
    #[serde(default = "default_grace")]
    pub grace: f64,
    /// SMF addresses heard; empty: any.
    #[serde(default)]
    pub allowed_peers: Vec<String>,
    /// UE address pools for CHOOSE (IPv4 hosts, IPv6 /64s).
    #[serde(default)]
    pub ue_pool: Option<String>,
    #[serde(default)]
    pub ue_pool6: Option<String>,
    /// TEIDs carry the worker in their low bits: log2 of the workers to spread over.
    #[serde(default)]
    pub teid_worker_bits: u8,
    /// Sessions the dataplane has room for; each worker keeps twice as many QER buckets
    /// and URR counters.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: u32,
    /// Downlink packets held for buffering sessions, in all (shared out evenly over the
    /// workers, each holding its share).
    #[serde(default = "default_buffer_packets")]
    pub buffer_packets: u32,
    /// Packets held for one session on one worker.
    #[serde(default = "default_buffer_per_session")]
    pub buffer_per_session: u32,
    /// The port our requests (heartbeats, Session Report Requests) go to on each SMF:
    /// 8805 (TS 29.244 §4.2.2); 0: the port its Association Setup Request came from.
    #[serde(default = "default_smf_port")]
    pub smf_port: u16,
}

fn default_smf_port() -> u16 {
    pfcp::PORT
}

fn default_buffer_packets() -> u32 {
    4096
}
fn default_buffer_per_session() -> u32 {
    upf::buffering::DEFAULT_PER_SESSION as u32
}

/// The most `buffer_packets` may ask for (2 KB each: 2 GB).
pub const MAX_BUFFER_PACKETS: u32 = 1 << 20;

fn default_max_sessions() -> u32 {
    131_072
}

/// The most `max_sessions` may ask for (the tables' slot ids stay below the FIB's tunnel
/// id range and a worker's counters below a few hundred MB).
pub const MAX_SESSIONS: u32 = 4 << 20;

fn default_listen() -> String {
    "127.0.0.1:8805".into()
}
fn default_heartbeat() -> f64 {
    10.0
}
fn default_misses() -> u32 {
    3
}
fn default_grace() -> f64 {
    60.0
}

/// A field-named error (`listen`, `ue_pool`, …) and what was expected.
type FieldError = (&'static str, String);

/// Seconds between 1900 (NTP's epoch, which PFCP time stamps use) and 1970.
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// The `[pfcp]` key that differs between two files (`pfcp` when one has no section),
/// for a reload that refuses the change by name.
pub fn changed_key(old: Option<&PfcpConfig>, new: Option<&PfcpConfig>) -> String {
    let (Some(old), Some(new)) = (old, new) else { return "pfcp".into() };
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) = (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return "pfcp".into();
    };
    a.iter().find(|(k, v)| b.get(*k) != Some(*v)).map_or("pfcp".into(), |(k, _)| format!("pfcp.{k}"))
}

impl PfcpConfig {
    pub fn listen_addr(&self) -> Result<SocketAddr, FieldError> {
        self.listen.parse().map_err(|_| ("listen", format!("{:?}: expected an address and port like 127.0.0.1:8805", self.listen)))
    }

    /// The sans-IO UPF's configuration, every field checked.
    pub fn upf_config(&self, recovery_time_stamp: u32) -> Result<UpfConfig, FieldError> {
        let ip = |f: &'static str, v: &str| v.parse::<IpAddr>().map_err(|_| (f, format!("{v:?}: expected an IPv4 or IPv6 address")));
        let listen = self.listen_addr()?;
        let node = match &self.node_id {
            Some(n) => ip("node_id", n)?,
            None => listen.ip(),
        };
        // The Node ID and our F-SEIDs carry it: SMFs send their requests there.
        if node.is_unspecified() {
            let why = match &self.node_id {
                Some(n) => format!("{n:?}"),
                None => format!("not set, and listen ({}) is a wildcard address", self.listen),
            };
            return Err(("node_id", format!("{why}: expected the address SMFs reach this UPF at")));
        }
        let node_id = match node {
            IpAddr::V4(a) => NodeId::Ipv4(a),
            IpAddr::V6(a) => NodeId::Ipv6(a),
        };
        let mut c = UpfConfig::new(node_id, recovery_time_stamp);
        match ip("n3", &self.n3)? {
            IpAddr::V4(a) => c.n3_ipv4 = Some(a),
            IpAddr::V6(_) => return Err(("n3", format!("{:?}: expected an IPv4 address (IPv6 goes in n3_ipv6)", self.n3))),
        }
        if let Some(v) = &self.n3_ipv6 {
            match ip("n3_ipv6", v)? {
                IpAddr::V6(a) => c.n3_ipv6 = Some(a),
                IpAddr::V4(_) => return Err(("n3_ipv6", format!("{v:?}: expected an IPv6 address"))),
            }
        }
        let secs = |f: &'static str, v: f64, min: f64| {
            if v.is_finite() && v >= min && v <= 86_400.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err((f, format!("{v}: expected {min} to 86400 seconds")))
            }
        };
        c.heartbeat_interval = secs("heartbeat_interval", self.heartbeat_interval, 0.1)?;
        c.grace = secs("grace", self.grace, 0.0)?;
        if self.heartbeat_misses == 0 {
            return Err(("heartbeat_misses", "expected at least 1".into()));
        }
        c.heartbeat_misses = self.heartbeat_misses;
        c.allowed_peers = self.allowed_peers.iter().map(|p| ip("allowed_peers", p)).collect::<Result<_, _>>()?;
        if let Some(p) = &self.ue_pool {
            match p.parse::<ip::Prefix>().map_err(|e| ("ue_pool", format!("{p:?}: {e}")))? {
                ip::Prefix::V4(a, len) if len <= 30 => c.ue_pool_v4 = Some((a, len)),
                _ => return Err(("ue_pool", format!("{p:?}: expected an IPv4 prefix of /30 or shorter"))),
            }
        }
        if let Some(p) = &self.ue_pool6 {
            match p.parse::<ip::Prefix>().map_err(|e| ("ue_pool6", format!("{p:?}: {e}")))? {
                ip::Prefix::V6(a, len) if len <= 63 => c.ue_pool_v6 = Some((a, len)),
                _ => return Err(("ue_pool6", format!("{p:?}: expected an IPv6 prefix of /63 or shorter (UEs get /64s)"))),
            }
        }
        if self.teid_worker_bits > 8 {
            return Err(("teid_worker_bits", format!("{}: expected 0 to 8", self.teid_worker_bits)));
        }
        c.teid_worker_bits = self.teid_worker_bits;
        c.smf_port = (self.smf_port != 0).then_some(self.smf_port);
        if self.max_sessions == 0 || self.max_sessions > MAX_SESSIONS {
            return Err(("max_sessions", format!("{}: expected 1 to {MAX_SESSIONS}", self.max_sessions)));
        }
        if self.buffer_packets > MAX_BUFFER_PACKETS {
            return Err(("buffer_packets", format!("{}: expected 0 to {MAX_BUFFER_PACKETS}", self.buffer_packets)));
        }
        if self.buffer_per_session > self.buffer_packets {
            return Err((
                "buffer_per_session",
                format!("{}: expected at most buffer_packets ({})", self.buffer_per_session, self.buffer_packets),
            ));
        }
        Ok(c)
    }

    /// `n3` and `n3_ipv6` are addresses of the gateway's interfaces: the UPF hands them to
    /// SMFs in the F-TEIDs it chooses, and G-PDUs sent to an address no interface has
    /// would never arrive.
    pub fn check_n3(&self, router: &ip::RouterState) -> Result<(), FieldError> {
        let c = self.upf_config(0)?;
        let ours = |a: IpAddr| {
            router.interfaces().iter().any(|i| match a {
                IpAddr::V4(v) => i.has_ip4(v),
                IpAddr::V6(v) => i.has_ip6(&v),
            })
        };
        for (field, a) in [("n3", c.n3_ipv4.map(IpAddr::V4)), ("n3_ipv6", c.n3_ipv6.map(IpAddr::V6))] {
            if let Some(a) = a.filter(|a| !ours(*a)) {
                return Err((field, format!("{a}: expected an address of one of the interfaces (gNBs send G-PDUs to it)")));
            }
        }
        Ok(())
    }

    /// The UE pools' routes (into `upfN-downlink`), checked like `upf_config` does.
    pub fn pool_routes(&self) -> Result<Vec<(ip::Prefix, ip::tables::TunnelRef)>, FieldError> {
        let c = self.upf_config(0)?;
        let route = |p: ip::Prefix, kind| (p, ip::tables::TunnelRef { kind, id: 0 });
        let mut v = Vec::new();
        if let Some((a, len)) = c.ue_pool_v4 {
            v.push(route(ip::Prefix::new(IpAddr::V4(a), len).map_err(|e| ("ue_pool", e.to_string()))?, ip::tables::TunnelKind::Upf4));
        }
        if let Some((a, len)) = c.ue_pool_v6 {
            v.push(route(ip::Prefix::new(IpAddr::V6(a), len).map_err(|e| ("ue_pool6", e.to_string()))?, ip::tables::TunnelKind::Upf6));
        }
        Ok(v)
    }
}

/// The UPF dataplane's shared parts: the published tables and each worker's usage cells
/// and event queue. Made whether or not `[pfcp]` is configured (the nodes are always in
/// the graph; without it the tables stay empty and the cells take no room).
pub struct UpfDataplane {
    pub shared: Arc<ArcSwap<UpfTables>>,
    pub usage: Vec<Arc<UsageCells>>,
    /// The QERs' MBR buckets, one set all workers take from.
    pub policer: Arc<Policer>,
    events_tx: Sender<UpfEvent>,
    pub events: Receiver<UpfEvent>,
    /// QER buckets and URR cells.
    pub rule_slots: u32,
    pub max_sessions: u32,
    /// Each worker's held packets (`upf-buffer`), and its room: packets in all and per
    /// session.
    pub held: Vec<Arc<AtomicU64>>,
    pub buffer_per_worker: usize,
    pub buffer_per_session: usize,
    /// Error Indications each worker sends a second for unknown TEIDs.
    pub replies_per_sec: u64,
}

impl UpfDataplane {
    pub fn new(cfg: Option<&PfcpConfig>, workers: usize) -> UpfDataplane {
        let max_sessions = cfg.map_or(0, |c| c.max_sessions.min(MAX_SESSIONS));
        let rule_slots = max_sessions.saturating_mul(2);
        let (events_tx, events) = crossbeam_channel::bounded(1024);
        let workers = workers.max(1);
        UpfDataplane {
            held: (0..workers).map(|_| Arc::default()).collect(),
            buffer_per_worker: cfg.map_or(0, |c| c.buffer_packets.min(MAX_BUFFER_PACKETS) as usize / workers),
            buffer_per_session: cfg.map_or(0, |c| c.buffer_per_session as usize),
            shared: Arc::new(ArcSwap::from_pointee(UpfTables::default())),
            usage: (0..workers).map(|_| UsageCells::new(rule_slots as usize)).collect(),
            policer: Policer::new(rule_slots as usize),
            events_tx,
            events,
            rule_slots,
            max_sessions,
            replies_per_sec: upf::context::DEFAULT_REPLIES_PER_SEC,
        }
    }

    /// Error Indications at the `[gtpu]` reply rate, like gtpu-input's.
    pub fn with_replies(mut self, per_sec: u64) -> UpfDataplane {
        self.replies_per_sec = per_sec;
        self
    }

    /// Worker `k`'s context.
    pub fn context(&self, k: usize) -> upf::UpfContext {
        upf::UpfContext::new(
            self.shared.clone(),
            self.usage[k % self.usage.len()].clone(),
            self.policer.clone(),
            Some(self.events_tx.clone()),
        )
        .with_buffering(self.buffer_per_worker, self.buffer_per_session, self.held[k % self.held.len()].clone())
        .with_replies(self.replies_per_sec)
    }
}

/// Datagrams handled before their session changes are published.
pub const BATCH: usize = 64;

/// How often the workers' URR counts are summed and handed to the PFCP core.
pub const USAGE_SYNC: Duration = Duration::from_millis(100);

/// A datagram read by the socket thread.
pub type Datagram = (Vec<u8>, SocketAddr, Instant);

/// The running PFCP endpoint.
pub struct Pfcp {
    pub upf: Upf,
    socket: UdpSocket,
    /// Datagrams from the socket thread, for the control loop.
    pub rx: Receiver<Datagram>,
    /// The dataplane's sessions, and where they are published.
    pub tables: UpfState,
    shared: Arc<ArcSwap<UpfTables>>,
    usage: Vec<Arc<UsageCells>>,
    events: Receiver<UpfEvent>,
    /// The counts last handed to the core, by (SEID, URR id).
    reported: HashMap<(u64, u32), Usage>,
    last_sync: Instant,
    /// End Markers to send (the control input they enter by, the packet).
    end_markers: Vec<(&'static str, Vec<u8>)>,
    /// Release and discard commands for every worker's `upf-buffer`, sent after the
    /// publish.
    buffer_cmds: Vec<BufferCmd>,
    /// Sessions that had a buffering FAR (the only ones workers may hold packets for):
    /// only their changes and deletions reach the workers' `upf-buffer`.
    buffering: HashSet<u64>,
    /// Packets each worker holds, and the room.
    held: Vec<Arc<AtomicU64>>,
    buffer_room: (usize, usize),
    /// What could not be applied, and asks not mapped yet (newest last).
    pub recent: VecDeque<String>,
}

/// The UPF's N3 addresses: the source of every GTP-U packet its sessions send (the IP
/// tables count what transport-mode SAs add to them, `dataplane::set_tunnel_esp`).
pub fn n3_addresses(c: &UpfConfig) -> Vec<IpAddr> {
    c.n3_ipv4.map(IpAddr::V4).into_iter().chain(c.n3_ipv6.map(IpAddr::V6)).collect()
}

const RECENT: usize = 32;

impl Pfcp {
    /// Binds the socket and starts its reader thread.
    pub fn open(cfg: &PfcpConfig, dp: &UpfDataplane) -> Result<Pfcp, FieldError> {
        let now_ntp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) + NTP_UNIX_OFFSET;
        let upf = Upf::new(cfg.upf_config(now_ntp as u32)?);
        let addr = cfg.listen_addr()?;
        let socket = UdpSocket::bind(addr).map_err(|e| ("listen", format!("{addr}: cannot bind: {e}")))?;
        let reader = socket.try_clone().map_err(|e| ("listen", e.to_string()))?;
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::Builder::new()
            .name("vecgate-pfcp".into())
            .spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while let Ok((n, from)) = reader.recv_from(&mut buf) {
                    if tx.send((buf[..n].to_vec(), from, Instant::now())).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| ("listen", e.to_string()))?;
        let mut tables = UpfState::new(dp.max_sessions as usize, dp.rule_slots, dp.rule_slots);
        tables.set_n3(upf.config().n3_ipv4, upf.config().n3_ipv6);
        dp.shared.store(Arc::new(tables.build()));
        Ok(Pfcp {
            upf,
            socket,
            rx,
            tables,
            shared: dp.shared.clone(),
            usage: dp.usage.clone(),
            events: dp.events.clone(),
            reported: HashMap::new(),
            last_sync: Instant::now(),
            end_markers: Vec::new(),
            buffer_cmds: Vec::new(),
            buffering: HashSet::new(),
            held: dp.held.clone(),
            buffer_room: (dp.buffer_per_worker * dp.held.len(), dp.buffer_per_session),
            recent: VecDeque::new(),
        })
    }

    /// Publish the UPF tables to the workers.
    pub fn publish(&mut self) {
        self.shared.store(Arc::new(self.tables.build()));
    }

    /// Hand the core the workers' URR counts of one session (those that changed).
    fn sync_usage(&mut self, now: Instant, seid: u64) {
        for &(urr, s) in self.tables.urr_slots(seid) {
            let mut u = Usage::default();
            for cells in &self.usage {
                u += cells.read(s.slot, s.generation);
            }
            let last = self.reported.entry((seid, urr)).or_default();
            if *last != u {
                *last = u;
                let u = pfcp::upf::Usage { ul_bytes: u.ul_bytes, dl_bytes: u.dl_bytes, ul_packets: u.ul_packets, dl_packets: u.dl_packets };
                self.upf.usage(now, seid, urr, u);
            }
        }
    }

    /// Every session's counts.
    fn sync_all_usage(&mut self, now: Instant) {
        let seids: Vec<u64> = self.upf.sessions().filter(|s| !s.urrs.is_empty()).map(|s| s.seid).collect();
        for seid in seids {
            self.sync_usage(now, seid);
        }
        self.last_sync = now;
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.socket.local_addr().ok()
    }

    fn note(&mut self, s: String) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(s);
    }

    fn flush(&mut self) {
        while let Some(t) = self.upf.poll_transmit() {
            // A send error (no route to the SMF) is the same as a lost datagram: PFCP's
            // own retransmission and heartbeats deal with it.
            let _ = self.socket.send_to(&t.data, t.dst);
        }
    }
}

impl Control {
    /// One datagram from the PFCP socket, and up to [`BATCH`] more already waiting: the
    /// session changes they make are published once (a burst of establishments copies
    /// each table chunk once, not once per session).
    pub fn pfcp_datagram(&mut self, first: Datagram) {
        let Some(p) = self.pfcp.as_mut() else { return };
        let mut next = Some(first);
        let mut handled = 0;
        let mut changed = false;
        while let Some((data, from, at)) = next.take() {
            // A deletion answers with the final usage, a modification may query it: the
            // core needs the latest counts first.
            if let Ok((h, _)) = pfcp::Header::parse(&data) {
                if matches!(h.msg_type, pfcp::MessageType::SessionDeletionRequest | pfcp::MessageType::SessionModificationRequest) {
                    if let Some(seid) = h.seid {
                        p.sync_usage(at, seid);
                    }
                }
            }
            // The tables admit a session's rules before the core accepts them. What the
            // core queued (the usage just synced may stop a session) is applied first, and
            // the request's own actions right after, so that the tables the admission read
            // are those its install meets (publishing waits for the batch).
            changed |= p.apply_queued();
            let mut admission = TablesAdmission { tables: &p.tables, refused: Vec::new() };
            p.upf.handle_with(at, from, &data, &mut admission);
            for r in std::mem::take(&mut admission.refused) {
                p.note(r);
            }
            changed |= p.apply_queued();
            handled += 1;
            if handled < BATCH {
                next = p.rx.try_recv().ok();
            }
        }
        self.pfcp_apply(changed);
    }

    /// Heartbeats, grace periods and retransmissions that are due.
    pub fn pfcp_tick(&mut self) {
        let Some(p) = self.pfcp.as_mut() else { return };
        let now = Instant::now();
        if p.upf.poll_timeout().is_some_and(|t| t <= now) {
            p.upf.handle_timeout(now);
        }
        while let Ok(UpfEvent::DownlinkData { seid, pdr_id }) = p.events.try_recv() {
            p.upf.downlink_data(now, seid, pdr_id);
        }
        if now.duration_since(p.last_sync) >= USAGE_SYNC {
            p.sync_all_usage(now);
        }
        self.pfcp_apply(false);
    }

    /// Apply the core's actions, publish (also when `changed` says actions applied before
    /// changed the tables), then send what it queued: an SMF hears that a session is
    /// accepted once its rules are in the workers' tables.
    fn pfcp_apply(&mut self, changed: bool) {
        let Some(p) = self.pfcp.as_mut() else { return };
        let changed = p.apply_queued() | changed;
        if changed {
            p.publish();
        }
        p.flush();
        // After the publish: the old path's last G-PDUs went out before its End Marker.
        if let Some(w) = self.workers.first() {
            for input in [upf::nodes::CONTROL_INPUT4, upf::nodes::CONTROL_INPUT6] {
                let frames: Vec<Vec<u8>> = p.end_markers.iter().filter(|(i, _)| *i == input).map(|(_, f)| f.clone()).collect();
                if !frames.is_empty() {
                    let _ = w.send(engine::worker::WorkerCmd::Inject { input: input.to_string(), frames });
                }
            }
        }
        p.end_markers.clear();
        // After the publish too: a worker releasing held packets sends them with the new
        // FAR (a newer packet of the session that came first released them already).
        if !p.buffer_cmds.is_empty() {
            let frames: Vec<Vec<u8>> = p.buffer_cmds.drain(..).map(BufferCmd::to_frame).collect();
            for w in &self.workers {
                let _ = w.send(engine::worker::WorkerCmd::Inject { input: upf::nodes::BUFFER_INPUT.to_string(), frames: frames.clone() });
            }
        }
    }
}

/// The UPF tables admitting sessions for the core ([`UpfState::check_rules`]), noting why
/// they refused one for `show pfcp sessions` (the SMF hears only the Cause and IE).
struct TablesAdmission<'a> {
    tables: &'a UpfState,
    refused: Vec<String>,
}

impl pfcp::upf::Admission for TablesAdmission<'_> {
    fn admit(&mut self, rules: &pfcp::rules::SessionRules) -> Result<(), pfcp::upf::Refusal> {
        self.tables.check_rules(rules).map_err(|e| {
            self.refused.push(format!("a session of {}: refused: {e}", node_name(&rules.cp_node)));
            e.refusal(rules)
        })
    }
}

impl Pfcp {
    /// Applies the core's queued actions; true when the tables changed.
    fn apply_queued(&mut self) -> bool {
        let mut changed = false;
        while let Some(a) = self.upf.poll_action() {
            changed |= self.apply(a);
        }
        changed
    }

    /// Applies one action to the UPF tables; true when they changed.
    fn apply(&mut self, a: Action) -> bool {
        match a {
            Action::Install(rules) => match self.tables.install_rules(&rules) {
                Ok(()) => {
                    // Workers may hold packets of a session that ever had a buffering
                    // FAR: they send them if it forwards now.
                    if let Some(slot) = self.tables.slot(rules.seid) {
                        if self.buffering.contains(&rules.seid) {
                            self.buffer_cmds.push(BufferCmd::Release { slot, seid: rules.seid });
                        }
                        if self.tables.session(rules.seid).is_some_and(|s| s.downlink.iter().any(|r| r.forward == upf::Forward::Buffer)) {
                            self.buffering.insert(rules.seid);
                        }
                    }
                    true
                }
                Err(e) => {
                    // The tables admitted these rules when the core accepted them: only a
                    // change the core makes on its own (a quota used up, a BAR timer) gets
                    // here unasked, and it adds no key or rule.
                    self.note(format!("session {:#x}: not installed: {e}", rules.seid));
                    false
                }
            },
            Action::Remove { seid } => {
                self.reported.retain(|(s, _), _| *s != seid);
                if let (true, Some(slot)) = (self.buffering.remove(&seid), self.tables.slot(seid)) {
                    self.buffer_cmds.push(BufferCmd::Discard { slot, seid });
                }
                self.tables.remove(seid)
            }
            Action::EndMarker { seid, old } => {
                match upf::nodes::end_marker(&self.shared.load(), old.addr, old.teid) {
                    Some(m) => {
                        self.end_markers.push(m);
                        self.note(format!("session {seid:#x}: End Marker sent to {} teid {:#x}", old.addr, old.teid));
                    }
                    None => self.note(format!("session {seid:#x}: no End Marker to {}: no N3 address of its family", old.addr)),
                }
                false
            }
            Action::DropBuffered { seid } => {
                if let (true, Some(slot)) = (self.buffering.contains(&seid), self.tables.slot(seid)) {
                    self.buffer_cmds.push(BufferCmd::Discard { slot, seid });
                }
                false
            }
        }
    }
}

/// The buffering part of `show pfcp sessions`: packets held now over all workers, and
/// the room (in all, per session per worker).
#[derive(Debug, Clone, Serialize)]
pub struct BufferRow {
    pub held: u64,
    pub capacity: usize,
    pub per_session: usize,
}

/// `show pfcp …` of a gateway without `[pfcp]` (JSON: `"enabled": false`).
pub const OFF: &str = "pfcp off (no [pfcp] section: this gateway is no UPF; add one and restart)\n";

pub fn buffer_row(p: &Pfcp) -> BufferRow {
    BufferRow { held: p.held.iter().map(|g| g.load(Relaxed)).sum(), capacity: p.buffer_room.0, per_session: p.buffer_room.1 }
}

pub fn format_buffer(b: &BufferRow) -> String {
    format!("buffered downlink packets: {} held, room for {} ({} per session per worker)\n", b.held, b.capacity, b.per_session)
}

/// One row of `show pfcp associations`.
#[derive(Debug, Clone, Serialize)]
pub struct AssociationRow {
    pub node_id: String,
    pub peer: String,
    pub recovery_time_stamp: u32,
    pub state: String,
    pub misses: u32,
    pub sessions: usize,
}

/// One row of `show pfcp sessions`.
#[derive(Debug, Clone, Serialize)]
pub struct SessionRow {
    pub seid: u64,
    pub cp_node: String,
    pub pdrs: usize,
    pub fars: usize,
    pub qers: usize,
    pub urrs: usize,
    /// Installed in the dataplane.
    pub installed: bool,
    /// The UE addresses downlink packets find the session by.
    pub ue: Vec<String>,
    /// The installed rules (PDRs with their FAR, QERs and URRs), by direction, in the
    /// order they are matched.
    pub uplink: Vec<RuleRow>,
    pub downlink: Vec<RuleRow>,
}

/// One installed PDR as `show pfcp sessions` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct RuleRow {
    pub pdr: u16,
    pub precedence: u32,
    /// Uplink: the local TEID matched.
    pub teid: Option<u32>,
    pub qfi: Option<u8>,
    /// Uplink: the UE addresses the inner packet must carry (its source, or with the
    /// PDI's S/D bit its destination; IPv6 as the UE's /64).
    pub ue: Vec<String>,
    pub sdf_filters: usize,
    /// `forward`, `drop` or `buffer`.
    pub action: &'static str,
    /// Buffering: the most packets held for the session, from its BAR.
    pub hold_limit: Option<u16>,
    /// Where a forwarded packet goes in GTP-U: the peer and its TEID, and the QFI sent.
    pub peer: Option<String>,
    pub teid_out: Option<u32>,
    pub qfi_out: Option<u8>,
    /// Per QER: gate open and MBR in bytes per second.
    pub qers: Vec<(bool, Option<u64>)>,
    /// Per QER: GBR in bytes per second (what each worker's MBR share is at least).
    pub gbrs: Vec<Option<u64>>,
    /// Per URR: quota used up.
    pub urrs_exhausted: Vec<bool>,
}

fn rule_row(r: &upf::Rule) -> RuleRow {
    let (action, out) = match r.forward {
        upf::Forward::Forward(o) => ("forward", o),
        upf::Forward::Drop => ("drop", None),
        upf::Forward::Buffer => ("buffer", None),
    };
    RuleRow {
        pdr: r.pdr_id,
        precedence: r.precedence,
        teid: r.teid,
        qfi: r.qfi,
        ue: r.ue.map_or(vec![], |m| m.addresses()),
        sdf_filters: r.sdf.len(),
        action,
        hold_limit: r.hold_limit.filter(|_| r.forward == upf::Forward::Buffer),
        peer: out.map(|o| o.peer.to_string()),
        teid_out: out.map(|o| o.teid()),
        qfi_out: out.and_then(|o| o.qfi()),
        qers: r.qers.iter().map(|q| (q.open, q.mbr.map(|m| m.bytes_per_sec()))).collect(),
        gbrs: r.qers.iter().map(|q| q.gbr_bytes_per_sec).collect(),
        urrs_exhausted: r.urrs.iter().map(|u| u.exhausted).collect(),
    }
}

fn format_rule(dir: &str, r: &RuleRow) -> String {
    let mut s = format!("    {dir} pdr {} precedence {}", r.pdr, r.precedence);
    if let Some(t) = r.teid {
        s += &format!(" teid {t:#x}");
    }
    if let Some(q) = r.qfi {
        s += &format!(" qfi {q}");
    }
    if !r.ue.is_empty() {
        s += &format!(" ue {}", r.ue.join(","));
    }
    if r.sdf_filters > 0 {
        s += &format!(" sdf {}", r.sdf_filters);
    }
    s += &format!(" -> {}", r.action);
    if let Some(n) = r.hold_limit {
        s += &format!(" (at most {n} held)");
    }
    if let (Some(p), Some(t)) = (&r.peer, r.teid_out) {
        s += &format!(" gtpu {p} teid {t:#x}");
    }
    if let Some(q) = r.qfi_out {
        s += &format!(" qfi {q}");
    }
    for (k, (open, mbr)) in r.qers.iter().enumerate() {
        s += if *open { " gate open" } else { " gate closed" };
        if let Some(m) = mbr {
            s += &format!(" mbr {} kbit/s", m / 125);
        }
        if let Some(Some(g)) = r.gbrs.get(k) {
            s += &format!(" gbr {} kbit/s", g / 125);
        }
    }
    if r.urrs_exhausted.iter().any(|e| *e) {
        s += " quota used up";
    }
    s + "\n"
}

fn node_name(n: &NodeId) -> String {
    match n {
        NodeId::Ipv4(a) => a.to_string(),
        NodeId::Ipv6(a) => a.to_string(),
        NodeId::Fqdn(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

pub fn association_rows(p: &Pfcp) -> Vec<AssociationRow> {
    let mut rows: Vec<AssociationRow> = p
        .upf
        .associations()
        .map(|a| AssociationRow {
            node_id: node_name(&a.node_id),
            peer: a.peer.to_string(),
            recovery_time_stamp: a.recovery_time_stamp,
            state: match a.liveness {
                Liveness::Up => "up".into(),
                Liveness::Lost { since } => format!("lost {:.0} s ago", since.elapsed().as_secs_f64()),
            },
            misses: a.misses,
            sessions: p.upf.sessions().filter(|s| s.cp_node == a.node_id).count(),
        })
        .collect();
    rows.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    rows
}

pub fn session_rows(p: &Pfcp, limit: usize) -> Vec<SessionRow> {
    let mut rows: Vec<SessionRow> = p
        .upf
        .sessions()
        .map(|s| SessionRow {
            seid: s.seid,
            cp_node: node_name(&s.cp_node),
            pdrs: s.pdrs.len(),
            fars: s.fars.len(),
            qers: s.qers.len(),
            urrs: s.urrs.len(),
            installed: p.tables.session(s.seid).is_some(),
            ue: p.tables.ue_addresses(s.seid).iter().map(|a| a.to_string()).collect(),
            uplink: p.tables.session(s.seid).map_or(vec![], |d| d.uplink.iter().map(rule_row).collect()),
            downlink: p.tables.session(s.seid).map_or(vec![], |d| d.downlink.iter().map(rule_row).collect()),
        })
        .collect();
    rows.sort_by_key(|r| r.seid);
    rows.truncate(limit);
    rows
}

pub fn format_associations(rows: &[AssociationRow], stats: &pfcp::upf::Stats) -> String {
    let mut s = format!("{} PFCP associations\n", rows.len());
    for r in rows {
        s += &format!(
            "{:<24} peer {:<22} recovery {} {} misses {} sessions {}\n",
            r.node_id, r.peer, r.recovery_time_stamp, r.state, r.misses, r.sessions
        );
    }
    // What was dropped or given up is worth seeing where the associations are.
    let counts: Vec<String> = stats.named().iter().map(|(name, v)| format!("{name} {v}")).collect();
    s + &format!("counters: {}\n", counts.join(", "))
}

pub fn format_sessions(rows: &[SessionRow], total: usize, recent: &VecDeque<String>) -> String {
    let mut s = format!("{total} PFCP sessions\n");
    for r in rows {
        s += &format!(
            "seid {:#x} smf {} pdr {} far {} qer {} urr {}{}{}\n",
            r.seid,
            r.cp_node,
            r.pdrs,
            r.fars,
            r.qers,
            r.urrs,
            if r.ue.is_empty() { String::new() } else { format!(" ue {}", r.ue.join(",")) },
            if r.installed { "" } else { " (not installed)" }
        );
        for u in &r.uplink {
            s += &format_rule("uplink  ", u);
        }
        for d in &r.downlink {
            s += &format_rule("downlink", d);
        }
    }
    if rows.len() < total {
        s += &format!("… {} more\n", total - rows.len());
    }
    if !recent.is_empty() {
        s += "recent:\n";
        for e in recent {
            s += &format!("  {e}\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> PfcpConfig {
        toml::from_str(&format!("n3 = \"198.18.1.1\"\n{extra}")).unwrap()
    }

    #[test]
    fn defaults_and_checks_name_the_field() {
        let c = cfg("").upf_config(5).unwrap();
        assert_eq!(c.node_id, NodeId::Ipv4("127.0.0.1".parse().unwrap()));
        assert_eq!((c.heartbeat_interval, c.heartbeat_misses, c.grace), (Duration::from_secs(10), 3, Duration::from_secs(60)));
        assert_eq!(c.recovery_time_stamp, 5);
        assert_eq!(c.smf_port, Some(8805), "requests go to PFCP's port");
        assert_eq!(cfg("smf_port = 0").upf_config(5).unwrap().smf_port, None, "0: where the SMF associated from");
        for (extra, field, says) in [
            ("listen = \"nowhere\"", "listen", "address and port"),
            ("ue_pool = \"198.19.0.0/31\"", "ue_pool", "/30"),
            ("ue_pool6 = \"198.19.0.0/16\"", "ue_pool6", "IPv6"),
            ("heartbeat_misses = 0", "heartbeat_misses", "at least 1"),
            ("heartbeat_interval = 0.0", "heartbeat_interval", "seconds"),
            ("allowed_peers = [\"smf\"]", "allowed_peers", "address"),
            ("teid_worker_bits = 9", "teid_worker_bits", "0 to 8"),
            ("max_sessions = 0", "max_sessions", "1 to"),
            ("buffer_packets = 2000000", "buffer_packets", "0 to"),
            ("buffer_per_session = 5000", "buffer_per_session", "at most buffer_packets (4096)"),
            ("listen = \"0.0.0.0:8805\"", "node_id", "listen (0.0.0.0:8805) is a wildcard address: expected the address SMFs reach"),
            ("node_id = \"::\"", "node_id", "expected the address SMFs reach this UPF at"),
        ] {
            let (f, m) = cfg(extra).upf_config(1).unwrap_err();
            assert_eq!(f, field, "{extra}");
            assert!(m.contains(says), "{extra}: {m}");
        }
        let any = cfg("listen = \"0.0.0.0:8805\"\nnode_id = \"198.18.9.1\"").upf_config(1).unwrap();
        assert_eq!(any.node_id, NodeId::Ipv4("198.18.9.1".parse().unwrap()), "on every address, named by node_id");
        let (f, _) = toml::from_str::<PfcpConfig>("n3 = \"2001:db8::1\"").unwrap().upf_config(1).unwrap_err();
        assert_eq!(f, "n3");
    }

    #[test]
    fn each_ue_pool_is_one_route_into_the_upf() {
        let routes = cfg("ue_pool = \"198.19.0.0/16\"\nue_pool6 = \"2001:db8:19::/48\"").pool_routes().unwrap();
        let kinds: Vec<_> = routes.iter().map(|(p, t)| (p.to_string(), t.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                ("198.19.0.0/16".to_string(), ip::tables::TunnelKind::Upf4),
                ("2001:db8:19::/48".to_string(), ip::tables::TunnelKind::Upf6)
            ]
        );
        assert!(cfg("").pool_routes().unwrap().is_empty());
    }
}
