//! PFCP (N4) in the control plane: the `[pfcp]` config section, the UDP socket around the
//! sans-IO [`pfcp::upf::Upf`], and the mapping of its dataplane actions.
//!
//! I/O: a thread reads datagrams from the socket and hands them, stamped, to the control
//! loop, which feeds the UPF, sends what it queues and applies its actions; the same loop
//! calls [`Control::pfcp_tick`] for heartbeats and retransmissions. Only the control loop
//! touches the UPF and the dataplane state, so nothing is locked.
//!
//! Dataplane mapping (first cut): a session becomes one GTP-U tunnel — the uplink PDR
//! (the highest-precedence PDR with a local F-TEID) gives `local` and `teid_in`, the
//! downlink PDR (the highest-precedence one matching the UE address as destination, or
//! from the Core side) gives
//! the UE route, its FAR's outer header `remote` and `teid_out`; QFI from the QER or the
//! PDR. A session is mapped while both directions forward and no gate is closed or quota
//! exhausted; otherwise it has no tunnel and its traffic is dropped by the dataplane
//! (no route / unknown TEID). Not mapped yet: buffering (BUFF drops), SDF filters
//! beyond one PDR per direction, MBR policing, per-rule usage counting and End Marker
//! sending (the core asks for them; `show pfcp sessions` says what was asked). Each
//! change recompiles the FIB (the UE route), as any tunnel with a UE route does today.

use crate::dataplane::Control;
use crossbeam_channel::Receiver;
use gtpu::TunnelSpec;
use pfcp::ie::{Interface, NodeId};
use pfcp::rules::SessionRules;
use pfcp::upf::{Action, Config as UpfConfig, Liveness, Upf};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `[pfcp]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
}

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
        Ok(c)
    }
}

/// A datagram read by the socket thread.
pub type Datagram = (Vec<u8>, SocketAddr, Instant);

/// The running PFCP endpoint.
pub struct Pfcp {
    pub upf: Upf,
    socket: UdpSocket,
    /// Datagrams from the socket thread, for the control loop.
    pub rx: Receiver<Datagram>,
    /// The GTP-U tunnel each mapped session has, and the spec it was made from.
    tunnels: HashMap<u64, (u32, TunnelSpec)>,
    /// What could not be applied, and asks not mapped yet (newest last).
    pub recent: VecDeque<String>,
}

const RECENT: usize = 32;

impl Pfcp {
    /// Binds the socket and starts its reader thread.
    pub fn open(cfg: &PfcpConfig) -> Result<Pfcp, FieldError> {
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
        Ok(Pfcp { upf, socket, rx, tunnels: HashMap::new(), recent: VecDeque::new() })
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

/// The GTP-U tunnel a session maps onto, if it forwards both ways (see the module docs).
pub fn tunnel_for(r: &SessionRules) -> Option<TunnelSpec> {
    let uplink = r.pdrs.values().filter(|p| p.local_f_teid.is_some()).min_by_key(|p| p.precedence)?;
    // The UE address as destination: S/D set, or (pfcpsim leaves S/D clear) a PDR for
    // traffic from the core side, which can only be addressed to the UE.
    let toward_ue = |p: &&pfcp::rules::Pdr| p.ue_is_destination || matches!(p.source, Interface::Core | Interface::SgiLanN6Lan);
    let downlink = r.pdrs.values().filter(|p| p.ue_ipv4.is_some() || p.ue_ipv6.is_some()).filter(toward_ue).min_by_key(|p| p.precedence)?;
    let (ul_far, dl_far) = (r.fars.get(&uplink.far_id?)?, r.fars.get(&downlink.far_id?)?);
    if !ul_far.forwards() || !dl_far.forwards() {
        return None;
    }
    let blocked = |p: &pfcp::rules::Pdr| {
        p.qer_ids.iter().filter_map(|q| r.qers.get(q)).any(|q| !q.ul_open || !q.dl_open)
            || p.urr_ids.iter().filter_map(|u| r.urrs.get(u)).any(|u| u.quota_exhausted)
    };
    if blocked(uplink) || blocked(downlink) {
        return None;
    }
    let local = uplink.local_f_teid?;
    let remote = dl_far.outer_header?;
    if local.addr.is_ipv4() != remote.addr.is_ipv4() {
        return None;
    }
    let mut spec = TunnelSpec::new(local.addr, remote.addr, local.teid, remote.teid);
    spec.decap_next = gtpu::DecapNext::Ip;
    spec.ue = match (downlink.ue_ipv4, downlink.ue_ipv6) {
        (Some(a), _) => ip::Prefix::new(IpAddr::V4(a), 32).ok(),
        (None, Some(a)) => ip::Prefix::new(IpAddr::V6(a), 128).ok(),
        (None, None) => None,
    };
    let qfi = downlink.qer_ids.iter().filter_map(|q| r.qers.get(q)).find_map(|q| q.qfi).or(downlink.qfi);
    spec.qfi = qfi.and_then(wire::gtpu::Qfi::new);
    Some(spec)
}

impl Control {
    /// One datagram from the PFCP socket.
    pub fn pfcp_datagram(&mut self, (data, from, at): Datagram) {
        let Some(p) = self.pfcp.as_mut() else { return };
        p.upf.handle(at, from, &data);
        self.pfcp_apply();
    }

    /// Heartbeats, grace periods and retransmissions that are due.
    pub fn pfcp_tick(&mut self) {
        let Some(p) = self.pfcp.as_mut() else { return };
        let now = Instant::now();
        if p.upf.poll_timeout().is_some_and(|t| t <= now) {
            p.upf.handle_timeout(now);
        }
        self.pfcp_apply();
    }

    fn pfcp_apply(&mut self) {
        let Some(p) = self.pfcp.as_mut() else { return };
        p.flush();
        let mut changed = false;
        while let Some(a) = self.pfcp.as_mut().and_then(|p| p.upf.poll_action()) {
            changed |= self.pfcp_action(a);
        }
        if changed {
            self.publish_routes();
        }
    }

    /// Applies one action; true when the dataplane state changed.
    fn pfcp_action(&mut self, a: Action) -> bool {
        let Some(p) = self.pfcp.as_mut() else { return false };
        match a {
            Action::Install(rules) => {
                let want = tunnel_for(&rules);
                let have = p.tunnels.get(&rules.seid).map(|(_, s)| s.clone());
                if want == have {
                    return false;
                }
                if let Some((id, _)) = p.tunnels.remove(&rules.seid) {
                    let _ = self.gtpu.delete(&mut self.state, id);
                }
                let Some(spec) = want else { return true };
                match self.gtpu.create(&mut self.state, spec.clone()) {
                    Ok(id) => {
                        if let Some(p) = self.pfcp.as_mut() {
                            p.tunnels.insert(rules.seid, (id, spec));
                        }
                    }
                    Err(e) => {
                        if let Some(p) = self.pfcp.as_mut() {
                            p.note(format!("session {:#x}: no tunnel: {e}", rules.seid));
                        }
                    }
                }
                true
            }
            Action::Remove { seid } => match p.tunnels.remove(&seid) {
                Some((id, _)) => self.gtpu.delete(&mut self.state, id).is_ok(),
                None => false,
            },
            Action::EndMarker { seid, old } => {
                p.note(format!("session {seid:#x}: End Marker to {} teid {:#x} asked, not sent (not mapped yet)", old.addr, old.teid));
                false
            }
            Action::DropBuffered { .. } => false,
        }
    }
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
    /// The GTP-U tunnel the session maps onto, if any.
    pub tunnel: Option<String>,
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
            tunnel: p.tunnels.get(&s.seid).map(|(id, spec)| ip::tables::TunnelRef { kind: spec.kind(), id: *id }.if_name()),
        })
        .collect();
    rows.sort_by_key(|r| r.seid);
    rows.truncate(limit);
    rows
}

pub fn format_associations(rows: &[AssociationRow]) -> String {
    let mut s = format!("{} PFCP associations\n", rows.len());
    for r in rows {
        s += &format!(
            "{:<24} peer {:<22} recovery {} {} misses {} sessions {}\n",
            r.node_id, r.peer, r.recovery_time_stamp, r.state, r.misses, r.sessions
        );
    }
    s
}

pub fn format_sessions(rows: &[SessionRow], total: usize, recent: &VecDeque<String>) -> String {
    let mut s = format!("{total} PFCP sessions\n");
    for r in rows {
        s += &format!(
            "seid {:#x} smf {} pdr {} far {} qer {} urr {} {}\n",
            r.seid,
            r.cp_node,
            r.pdrs,
            r.fars,
            r.qers,
            r.urrs,
            r.tunnel.as_deref().map_or("(not mapped)".to_string(), |t| format!("-> {t}"))
        );
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
        for (extra, field, says) in [
            ("listen = \"nowhere\"", "listen", "address and port"),
            ("ue_pool = \"198.19.0.0/31\"", "ue_pool", "/30"),
            ("ue_pool6 = \"198.19.0.0/16\"", "ue_pool6", "IPv6"),
            ("heartbeat_misses = 0", "heartbeat_misses", "at least 1"),
            ("heartbeat_interval = 0.0", "heartbeat_interval", "seconds"),
            ("allowed_peers = [\"smf\"]", "allowed_peers", "address"),
            ("teid_worker_bits = 9", "teid_worker_bits", "0 to 8"),
        ] {
            let (f, m) = cfg(extra).upf_config(1).unwrap_err();
            assert_eq!(f, field, "{extra}");
            assert!(m.contains(says), "{extra}: {m}");
        }
        let (f, _) = toml::from_str::<PfcpConfig>("n3 = \"2001:db8::1\"").unwrap().upf_config(1).unwrap_err();
        assert_eq!(f, "n3");
    }
}
