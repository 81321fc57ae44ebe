//! The service load balancer in the control plane: the `[lb]` settings and
//! `[[lb_service]]` tables of the config file, the `lb_*` API requests, the VIP routes
//! into `lbN-nat`, and the rows `show lb services | backends` print. Every change goes
//! through [`lb::LbState`], which rebuilds the one service it touches.

use crate::api::{Reply, Request};
use crate::config::{Config, ConfigError, Problems};
use arc_swap::ArcSwap;
use ip::tables::{TunnelKind, TunnelRef, UdpApp};
use ip::{Prefix, RouterState};
use lb::session::{Limits, Timeouts};
use lb::{BackendSpec, Conditions, LbState, LbTables, Protocol, ServiceSpec, ServiceType};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// `[lb]`: the node's source address for `Cluster`-policy services and the per-worker
/// table sizes and timeouts. A reload changes the timeouts ([`LbControl::set_timeouts`]);
/// the rest needs a restart ([`restart_key_changed`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LbConfig {
    /// The address `Cluster`-policy IPv4 services translate client sources to.
    #[serde(default)]
    pub snat4: Option<IpAddr>,
    #[serde(default)]
    pub snat6: Option<IpAddr>,
    #[serde(default)]
    pub limits: Option<Limits>,
    #[serde(default)]
    pub timeouts: Option<Timeouts>,
}

/// The LB's part of [`crate::dataplane::Control`].
pub struct LbControl {
    pub state: LbState,
    pub shared: Arc<ArcSwap<LbTables>>,
    pub limits: Limits,
}

/// The first key of `[lb]` that a running gateway cannot change and that differs between
/// `old` and `new` (`lb.limits.sessions`), if any: the addresses and the tables' sizes
/// (the workers' tables are made at start-up). The timeouts are not among them.
pub fn restart_key_changed(old: &LbConfig, new: &LbConfig) -> Option<String> {
    // Destructured whole: a field added to `[lb]` must be placed on one side or the other.
    let LbConfig { snat4, snat6, limits, timeouts: _ } = old;
    let (Limits { sessions, affinity }, now) = (limits.unwrap_or_default(), new.limits.unwrap_or_default());
    [
        ("lb.snat4", *snat4 != new.snat4),
        ("lb.snat6", *snat6 != new.snat6),
        ("lb.limits.sessions", sessions != now.sessions),
        ("lb.limits.affinity", affinity != now.affinity),
    ]
    .into_iter()
    .find(|&(_, changed)| changed)
    .map(|(key, _)| key.to_string())
}

/// The route that sends a service address to `lbN-nat` (one per address, whatever the
/// services on it).
fn vip_route(spec: &ServiceSpec) -> Option<(Prefix, TunnelRef)> {
    if spec.kind == ServiceType::NodePort {
        return None;
    }
    let (len, kind) = if spec.vip.is_ipv4() { (32, TunnelKind::Lb4) } else { (128, TunnelKind::Lb6) };
    Some((Prefix::new(spec.vip, len).ok()?, TunnelRef { kind, id: 0 }))
}

/// Whether other services are reached at `spec`'s address (`spec` itself, if in
/// `state`, not counted).
fn vip_shared(state: &LbState, spec: &ServiceSpec, counted: bool) -> bool {
    state.on_address(spec.vip) > usize::from(counted)
}

/// `[lb]` and each `[[lb_service]]` on their own — settings in range, each service's
/// fields and backends, names and addresses each once — every entry's error recorded:
/// what needs no interface is checked with the core sections, so one run reports all.
pub fn check_entries(cfg: &Config, problems: &mut Problems) {
    for (field, a) in [("lb.snat4", cfg.lb.snat4), ("lb.snat6", cfg.lb.snat6)] {
        let Some(a) = a else { continue };
        if a.is_ipv4() != (field == "lb.snat4") {
            problems.push(cfg.err(field, format!("{a}: expected an address of that family")));
        } else {
            problems.take(LbState::new().set_snat(Some(a)).map_err(|e| cfg.err(field, e.to_string())));
        }
    }
    let limits = cfg.lb.limits.unwrap_or_default();
    for (field, n, max) in [("lb.limits.sessions", limits.sessions, 1usize << 26), ("lb.limits.affinity", limits.affinity, 1 << 24)] {
        if n == 0 || n > max {
            problems.push(cfg.err(field, format!("{n}: expected 1 to {max} (per worker and family)")));
        }
    }
    let t = cfg.lb.timeouts.unwrap_or_default();
    for (field, ms) in t.named() {
        if ms == 0 || ms > 30 * 86_400_000 {
            problems.push(cfg.err(format!("lb.timeouts.{field}"), format!("{ms}: expected 1 ms to 30 days")));
        }
    }
    let mut names = HashMap::new();
    let mut addresses = HashMap::new();
    for (i, spec) in cfg.lb_services.iter().enumerate() {
        // Names and addresses are taken even by an entry with other errors, so a
        // repeat of it is reported too.
        let first_name = names.insert(spec.name.as_str(), i);
        // A node port and a service address are told apart, as `LbState` does.
        let first_address = addresses.insert((spec.vip, spec.port, spec.protocol, spec.kind == ServiceType::NodePort), i);
        let r = spec.validate().map_err(|e| spec_error(cfg, i, &e)).and_then(|()| {
            if let Some(first) = first_name {
                let why = format!("{:?} is already lb_service[{first}]'s name: expected each name once", spec.name);
                return Err(cfg.err(format!("lb_service[{i}].name"), why));
            }
            if let Some(first) = first_address {
                let protocol = spec.protocol.name();
                let why = format!(
                    "{} port {} {protocol} is already lb_service[{first}]'s: expected each address, port and protocol once",
                    spec.vip, spec.port
                );
                return Err(cfg.err(format!("lb_service[{i}].port"), why));
            }
            Ok(())
        });
        problems.take(r);
    }
}

/// A service's own error under its entry's path: `SpecError`s name their field first
/// (`backends[0].weight: …`).
fn spec_error(cfg: &Config, i: usize, e: &lb::SpecError) -> ConfigError {
    let text = e.to_string();
    match text.split_once(": ") {
        Some((field, rest)) => cfg.err(format!("lb_service[{i}].{field}"), rest),
        None => cfg.err(format!("lb_service[{i}]"), text),
    }
}

impl LbControl {
    /// The LB state of a configuration, its VIP routes added to `router`; every entry's
    /// error reported.
    pub fn from_config(cfg: &Config, router: &mut RouterState) -> Result<LbControl, ConfigError> {
        let mut problems = Problems::default();
        check_entries(cfg, &mut problems);
        problems.check()?;
        let mut state = LbState::new();
        for (field, a) in [("lb.snat4", cfg.lb.snat4), ("lb.snat6", cfg.lb.snat6)] {
            state.set_snat(a).map_err(|e| cfg.err(field, e.to_string()))?;
        }
        for (i, s) in cfg.lb_services.iter().enumerate() {
            problems.take(add_service(&mut state, router, s.clone()).map_err(|e| cfg.err(format!("lb_service[{i}]"), e)));
        }
        problems.check()?;
        state.resolve_outers(|a| router.resolve_outer(a));
        set_router_flags(&state, router);
        state.set_timeouts(cfg.lb.timeouts.unwrap_or_default());
        let limits = cfg.lb.limits.unwrap_or_default();
        Ok(LbControl { shared: Arc::new(ArcSwap::new(state.tables())), state, limits })
    }

    /// New session timeouts (a reload's `[lb] timeouts`), published to the workers with
    /// the tables: a new session takes them, an existing one from its next packet (an
    /// idle one keeps the expiry its last packet set). Each timeout that changed, by its
    /// key (`udp_ms`), with its new value.
    pub fn set_timeouts(&mut self, timeouts: Timeouts) -> Vec<(&'static str, u64)> {
        let was = self.state.timeouts().named();
        let changed: Vec<_> = timeouts.named().into_iter().zip(was).filter(|(new, old)| new != old).map(|(new, _)| new).collect();
        if !changed.is_empty() {
            self.state.set_timeouts(timeouts);
            self.shared.store(self.state.tables());
        }
        changed
    }

    /// Resolve the changed services' new encapsulated backends, then publish the tables;
    /// the router's flags follow the services. True if those changed: the IP tables are
    /// then to be published too.
    #[must_use]
    pub fn publish(&mut self, router: &mut RouterState) -> bool {
        self.state.resolve_changed(|a| router.resolve_outer(a));
        self.shared.store(self.state.tables());
        set_router_flags(&self.state, router)
    }

    /// After a route change: publish if an encapsulated backend's adjacency changed.
    pub fn refresh_outer(&mut self, router: &mut RouterState) {
        if self.state.resolve_outers(|a| router.resolve_outer(a)) {
            self.shared.store(self.state.tables());
        }
    }
}

/// What takes `port`/`protocol` of the gateway's own addresses before the load balancer
/// does (`ipN-local` hands the tunnels' UDP ports and `[punt]`'s ports on first), so a
/// node_port service there would never see a packet.
fn local_port_owner(router: &RouterState, port: u16, protocol: Protocol) -> Option<&'static str> {
    if protocol == Protocol::Udp {
        if let Some(app) = router.udp_port(port) {
            return Some(match app {
                UdpApp::Gtpu => "GTP-U",
                UdpApp::Gue => "a UDP tunnel",
                UdpApp::Esp => "ESP in UDP (an inbound SA)",
            });
        }
    }
    // Punting is by TCP or UDP port: no SCTP port is taken.
    if protocol == Protocol::Sctp {
        return None;
    }
    let punt = router.punt()?;
    let tcp = protocol == Protocol::Tcp;
    if punt.file_ports(tcp).contains(&port) {
        return Some("[punt] (handed to the host's stack)");
    }
    punt.added(tcp).contains_key(&port).then_some("punt_port_add (handed to the host's stack)")
}

/// Whether `spec`'s packets come by `ipN-local` (a node port, or a service on one of the
/// node's own addresses as `is_own` tells them), where the tunnels' and the punted ports
/// are taken first: the one test both ways round (a service on a taken port, a port taken
/// under a service).
fn on_local_path(spec: &ServiceSpec, is_own: impl Fn(IpAddr) -> bool) -> bool {
    spec.kind == ServiceType::NodePort || is_own(spec.vip)
}

/// The running gateway's interface that has `addr` as one of its own addresses (its
/// IPv6 link-local one too), if any.
pub fn node_address_owner(router: &RouterState, addr: IpAddr) -> Option<&str> {
    router.own_address_of(&Prefix::host(addr))
}

/// Whether `addr` is one of the running gateway's own addresses ([`node_address_owner`]).
pub fn is_node_address(router: &RouterState, addr: IpAddr) -> bool {
    node_address_owner(router, addr).is_some()
}

/// The service that receives `port`/`protocol` of the gateway's own addresses (a node
/// port, or a service whose VIP is the node's as `is_own` tells: the running gateway's
/// addresses for `punt_port_add`, the file's once applied for a reload), which punting
/// that port would starve: both refuse it, naming the service. Its name, and how to say
/// it (`node_port service "np"`).
pub fn local_port_service(state: &LbState, port: u16, protocol: Protocol, is_own: impl Fn(IpAddr) -> bool) -> Option<(String, String)> {
    if let Some(name) = state.node_port_service(port, protocol) {
        return Some((name.to_string(), format!("node_port service {name:?}")));
    }
    state
        .services()
        .find(|(_, s)| s.port == port && s.protocol == protocol && on_local_path(s, &is_own))
        .map(|(_, s)| (s.name.clone(), format!("service {:?} (on the node's address {})", s.name, s.vip)))
}

/// A tunnel or SA about to receive on UDP `port` of the gateway's addresses: refused
/// if a node_port service is there (the tunnel would take its packets).
pub fn check_tunnel_port(state: &LbState, port: u16) -> Result<(), String> {
    match state.node_port_service(port, Protocol::Udp) {
        Some(name) => Err(format!("port {port}: node_port service {name:?} receives on it; expected a port no node_port service uses")),
        None => Ok(()),
    }
}

/// Add a service and its VIP route (not published). A service on one of the node's own
/// addresses (an external IP or load balancer address that is the node's, as Kubernetes
/// allows) gets no route: a route there would take every packet to the address, echo
/// requests and tunnels' too, into `lbN-nat`. Its packets come by `ipN-local`, as a
/// node port's do, so the same ports are refused.
pub fn add_service(state: &mut LbState, router: &mut RouterState, spec: ServiceSpec) -> Result<u32, String> {
    let name = spec.name.clone();
    let local = on_local_path(&spec, |a| is_node_address(router, a));
    let ours = spec.kind != ServiceType::NodePort && local;
    if local {
        if let Some(owner) = local_port_owner(router, spec.port, spec.protocol) {
            let (port, protocol) = (spec.port, spec.protocol.name());
            let on = if ours { format!("{}", spec.vip) } else { "the node's addresses".into() };
            return Err(format!(
                "service {name:?}: port: {port}/{protocol} of {on} is taken by {owner}; expected a port nothing else receives on"
            ));
        }
    }
    let id = state.add_service_at(spec, ours).map_err(|e| e.to_string())?;
    let (_, spec) = state.service(&name).expect("just added");
    if let Some(r) = vip_route(spec).filter(|_| !ours && !vip_shared(state, spec, true)) {
        if let Err((_, e)) = router.add_tunnel_routes(&[r]) {
            state.del_service(&name).expect("just added");
            return Err(format!("service {name:?}: vip: {e}"));
        }
    }
    Ok(id)
}

/// A backend's place in a service, for requests that change or remove it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendRef {
    pub service: String,
    pub addr: IpAddr,
    pub port: u16,
}

/// `lb backend set`: what changes (weight and/or conditions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendChange {
    pub service: String,
    pub addr: IpAddr,
    pub port: u16,
    #[serde(default)]
    pub weight: Option<u32>,
    #[serde(default)]
    pub conditions: Option<Conditions>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "BackendAddFields")]
pub struct BackendAdd {
    pub service: String,
    #[serde(flatten)]
    pub backend: BackendSpec,
}

/// A [`BackendAdd`] as it arrives. A flattened struct takes only its own fields and
/// leaves the rest unread, so the rest is collected here and refused: a misspelt
/// `weight` must not add the backend with weight 1.
#[derive(Deserialize)]
struct BackendAddFields {
    service: String,
    #[serde(flatten)]
    backend: BackendSpec,
    #[serde(flatten)]
    rest: std::collections::BTreeMap<String, serde::de::IgnoredAny>,
}

impl TryFrom<BackendAddFields> for BackendAdd {
    type Error = String;
    fn try_from(f: BackendAddFields) -> Result<Self, String> {
        match f.rest.keys().next() {
            Some(k) => Err(format!(
                "unknown field `{k}`, expected one of `service`, `addr`, `port`, `weight`, `conditions`, `local`, `other_zone`"
            )),
            None => Ok(BackendAdd { service: f.service, backend: f.backend }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceRow {
    pub id: u32,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ServiceType,
    pub vip: IpAddr,
    pub port: u16,
    pub protocol: lb::Protocol,
    pub traffic_policy: lb::TrafficPolicy,
    pub affinity: lb::Affinity,
    pub forwarding: lb::Forwarding,
    pub backends: usize,
    /// Backends taking new connections.
    pub eligible: usize,
    pub table_size: usize,
    /// The spec's `table_size` (0: sized by the backends): what a controller reading the
    /// service back compares with the size it would ask for.
    pub configured_table_size: u32,
    /// The spec's `gue_port` (0: the default), so the row and the backend rows give the
    /// whole spec back.
    pub gue_port: u16,
    /// The spec's `source_ranges` (empty: every source).
    pub source_ranges: Vec<lb::service::SourceRange>,
}

impl ServiceRow {
    /// Service `id`'s row: its spec, and what the tables made of it (backends taking new
    /// connections, the Maglev table's size).
    pub fn new(id: u32, s: &lb::ServiceSpec, eligible: usize, table_size: usize) -> ServiceRow {
        ServiceRow {
            id,
            name: s.name.clone(),
            kind: s.kind,
            vip: s.vip,
            port: s.port,
            protocol: s.protocol,
            traffic_policy: s.traffic_policy,
            affinity: s.affinity,
            forwarding: s.forwarding,
            backends: s.backends.len(),
            eligible,
            table_size,
            configured_table_size: s.table_size,
            gue_port: s.gue_port,
            source_ranges: s.source_ranges.clone(),
        }
    }
}

/// A service's digest: 64 bits of SHA-256 over everything it was added and changed with,
/// as 16 hex digits. Every field of the spec counts, and every backend's address, port,
/// weight, conditions and locality; the backends as the set the tables make of them (in
/// address and port order, whatever order they were added in). `show lb digests` gives
/// every service's; a program that applied a spec computes the digest of its own copy with
/// this function and compares: a service changed by hand in any way (deleted and added
/// again otherwise, a backend added, removed, reweighted or drained) has another digest.
/// No per-process key: the same in every process and build (a test pins one value).
pub fn service_digest(spec: &ServiceSpec) -> String {
    format!("{:016x}", digest_of(spec))
}

/// [`service_digest`] as a number: what `LbState::digests` keeps.
pub fn digest_of(spec: &ServiceSpec) -> u64 {
    use lb::{Affinity, Forwarding, TrafficPolicy};
    // Destructured whole, so that a field added to a spec does not compile until it is
    // counted here.
    let ServiceSpec {
        name,
        kind,
        vip,
        port,
        protocol,
        backends,
        traffic_policy,
        affinity,
        table_size,
        forwarding,
        gue_port,
        source_ranges,
    } = spec;
    let mut d = Digest::default();
    d.bytes(name.as_bytes());
    d.word(match kind {
        ServiceType::ClusterIp => 1,
        ServiceType::NodePort => 2,
        ServiceType::LoadBalancer => 3,
    });
    d.addr(*vip);
    d.word(u64::from(*port));
    d.word(u64::from(protocol.number()));
    d.word(match traffic_policy {
        TrafficPolicy::Cluster => 1,
        TrafficPolicy::Local => 2,
    });
    match affinity {
        Affinity::None => d.word(1),
        Affinity::ClientIp { timeout_s } => {
            d.word(2);
            d.word(u64::from(*timeout_s));
        }
    }
    d.word(u64::from(*table_size));
    d.word(match forwarding {
        Forwarding::Nat => 1,
        Forwarding::Ipip => 2,
        Forwarding::Gue => 3,
        Forwarding::Gre => 4,
    });
    d.word(u64::from(*gue_port));
    let mut set: Vec<&BackendSpec> = backends.iter().collect();
    set.sort_unstable_by_key(|b| (b.addr, b.port));
    d.word(set.len() as u64);
    for b in set {
        let BackendSpec { addr, port, weight, conditions: Conditions { ready, serving, terminating }, local, other_zone } = *b;
        d.addr(addr);
        d.word(u64::from(port));
        d.word(u64::from(weight));
        // `other_zone` in a bit of its own that is 0 without it: a backend without topology
        // keeps the digest it had before the flag existed.
        d.word(
            u64::from(ready) | u64::from(serving) << 1 | u64::from(terminating) << 2 | u64::from(local) << 3 | u64::from(other_zone) << 4,
        );
    }
    // Last, and only when there are any, so that a service without ranges keeps the
    // digest it had before ranges existed (a gateway and a controller of either release
    // agree on it). As a set, as the tables make of them: their count, then each range's
    // network and length in order.
    if !source_ranges.is_empty() {
        let mut set: Vec<&lb::service::SourceRange> = source_ranges.iter().collect();
        set.sort_unstable();
        set.dedup();
        d.word(set.len() as u64);
        for r in set {
            d.addr(r.0.network());
            d.word(u64::from(r.0.len()));
        }
    }
    d.finish()
}

/// The digest's state: the encoding (64-bit little-endian words; prefix-free: lengths
/// and tags first) through SHA-256 (ring's), of which the first 8 bytes are the digest.
/// A vetted hash rather than our own mix: two encodings collide only as SHA-256 does.
#[derive(Default)]
struct Digest(Vec<u8>);

impl Digest {
    fn word(&mut self, w: u64) {
        self.0.extend_from_slice(&w.to_le_bytes());
    }

    fn finish(self) -> u64 {
        let d = ring::digest::digest(&ring::digest::SHA256, &self.0);
        u64::from_be_bytes(d.as_ref()[..8].try_into().expect("SHA-256 has 32 bytes"))
    }

    fn bytes(&mut self, b: &[u8]) {
        self.word(b.len() as u64);
        for c in b.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.word(u64::from_le_bytes(w));
        }
    }

    fn addr(&mut self, a: IpAddr) {
        match a {
            IpAddr::V4(a) => {
                self.word(4);
                self.word(u64::from(u32::from(a)));
            }
            IpAddr::V6(a) => {
                let x = u128::from(a);
                self.word(6);
                self.word((x >> 64) as u64);
                self.word(x as u64);
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendRow {
    pub service: String,
    pub addr: IpAddr,
    pub port: u16,
    pub weight: u32,
    pub conditions: Conditions,
    /// On this node (what `Local` policies keep to); a controller reading the rows back
    /// needs it to see the backend unchanged.
    pub local: bool,
    /// Hinted for other zones (topology-aware routing); omitted when false, as in a spec.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub other_zone: bool,
    pub eligible: bool,
    /// Maglev slots the backend owns.
    pub slots: usize,
}

fn service_rows(c: &LbControl, service: Option<&str>) -> Vec<ServiceRow> {
    let t = c.state.tables();
    c.state
        .services()
        .filter(|(_, s)| service.is_none_or(|n| n == s.name))
        .map(|(id, s)| {
            let (eligible, table_size) = match s.vip {
                IpAddr::V4(_) => t.v4.service(id).map_or((0, 0), |x| (x.backends.iter().filter(|b| b.eligible).count(), x.maglev.len())),
                IpAddr::V6(_) => t.v6.service(id).map_or((0, 0), |x| (x.backends.iter().filter(|b| b.eligible).count(), x.maglev.len())),
            };
            ServiceRow::new(id, s, eligible, table_size)
        })
        .collect()
}

fn backend_rows(c: &LbControl, service: Option<&str>) -> Vec<BackendRow> {
    let t = c.state.tables();
    let mut rows = Vec::new();
    for (id, s) in c.state.services().filter(|(_, s)| service.is_none_or(|n| n == s.name)) {
        let (eligible, slots): (Vec<bool>, Vec<usize>) = match s.vip {
            IpAddr::V4(_) => per_backend(
                t.v4.service(id).map(|x| (&x.backends[..], &x.maglev[..])).map(|(b, m)| (b.iter().map(|b| b.eligible).collect(), m)),
            ),
            IpAddr::V6(_) => per_backend(
                t.v6.service(id).map(|x| (&x.backends[..], &x.maglev[..])).map(|(b, m)| (b.iter().map(|b| b.eligible).collect(), m)),
            ),
        };
        for (i, b) in s.backends.iter().enumerate() {
            rows.push(BackendRow {
                service: s.name.clone(),
                addr: b.addr,
                port: b.port,
                weight: b.weight,
                conditions: b.conditions,
                local: b.local,
                other_zone: b.other_zone,
                eligible: eligible.get(i).copied().unwrap_or(false),
                slots: slots.get(i).copied().unwrap_or(0),
            });
        }
    }
    rows
}

fn per_backend(x: Option<(Vec<bool>, &[u32])>) -> (Vec<bool>, Vec<usize>) {
    let Some((eligible, maglev)) = x else { return (Vec::new(), Vec::new()) };
    let mut slots = vec![0usize; eligible.len()];
    maglev.iter().for_each(|&i| slots[i as usize] += 1);
    (eligible, slots)
}

/// An address and port as `show lb` prints them (`[v6]:port`, as a socket address).
fn at(a: IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(a, port).to_string()
}

fn format_services(rows: &[ServiceRow]) -> String {
    let addrs: Vec<String> = rows.iter().map(|r| at(r.vip, r.port)).collect();
    let name_w = crate::format::column(28, rows.iter().map(|r| r.name.as_str()));
    let addr_w = crate::format::column(28, addrs.iter().map(String::as_str));
    let mut s = format!(
        "{:<4} {:<name_w$} {:<13} {:<addr_w$} {:<5} {:<8} {:<10} {:>8} {:>8} {:>7} {}\n",
        "id", "name", "type", "address", "proto", "policy", "forwarding", "backends", "eligible", "table", "sources"
    );
    for (r, addr) in rows.iter().zip(&addrs) {
        s += &format!(
            "{:<4} {:<name_w$} {:<13} {:<addr_w$} {:<5} {:<8} {:<10} {:>8} {:>8} {:>7} {}\n",
            r.id,
            r.name,
            crate::format::word(&r.kind),
            addr,
            crate::format::word(&r.protocol),
            format!("{:?}", r.traffic_policy).to_lowercase(),
            r.forwarding.name(),
            r.backends,
            r.eligible,
            r.table_size,
            sources_word(&r.source_ranges)
        );
    }
    s
}

/// A service's `sources` column: its ranges, comma-separated, or `any`.
fn sources_word(ranges: &[lb::service::SourceRange]) -> String {
    if ranges.is_empty() {
        return "any".into();
    }
    ranges.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

fn format_backends(rows: &[BackendRow]) -> String {
    let name_w = crate::format::column(28, rows.iter().map(|r| r.service.as_str()));
    let mut s = format!("{:<name_w$} {:<40} {:>6} {:<24} {:<5} {:>7}\n", "service", "backend", "weight", "conditions", "local", "slots");
    for r in rows {
        let c = r.conditions;
        let cond = [(c.ready, "ready"), (c.serving, "serving"), (c.terminating, "terminating"), (r.other_zone, "other-zone")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(",");
        let local = if r.local { "yes" } else { "no" };
        s += &format!("{:<name_w$} {:<40} {:>6} {:<24} {:<5} {:>7}\n", r.service, at(r.addr, r.port), r.weight, cond, local, r.slots);
    }
    s
}

/// The router's flags that follow from the services: TCP and UDP to the node's addresses
/// go to `lbN-nat` while there is any service, and forwarded packets pass it while a
/// service that keeps its clients' addresses has backends (their replies come
/// forwarded). True if either changed.
fn set_router_flags(state: &LbState, router: &mut RouterState) -> bool {
    let local = router.set_lb_local(!state.is_empty());
    router.set_lb_replies(state.has_local_policy()) | local
}

/// Publish the LB tables after a change, and the IP tables too if the router's flags
/// changed with it.
fn publish(c: &mut crate::dataplane::Control) {
    if c.lb.publish(&mut c.state) {
        c.publish();
    }
}

/// Carry out an `lb_*` request.
pub fn handle(c: &mut crate::dataplane::Control, req: &Request) -> Result<Reply, String> {
    let reply = match req {
        Request::LbServiceAdd(spec) => {
            let id = add_service(&mut c.lb.state, &mut c.state, spec.clone())?;
            // Its route, and the router's flags, in one publication.
            let _ = c.lb.publish(&mut c.state);
            c.publish_routes();
            Reply::ok(serde_json::json!({ "id": id }), format!("service {:?} added as lb_service{id}", spec.name))
        }
        Request::LbServiceDel { name } => {
            let spec = c.lb.state.del_service(name).map_err(|e| e.to_string())?;
            // A service on an address of ours has no route to remove.
            if let Some((p, _)) = vip_route(&spec).filter(|_| !vip_shared(&c.lb.state, &spec, false)) {
                c.state.del_tunnel_routes(&[p]);
            }
            let _ = c.lb.publish(&mut c.state);
            c.publish_routes();
            Reply::ok(serde_json::Value::Null, format!("service {name:?} deleted"))
        }
        Request::LbBackendAdd(a) => {
            c.lb.state.set_backend(&a.service, a.backend).map_err(|e| e.to_string())?;
            // The first backend of a service that keeps its clients' addresses turns the
            // reply path on.
            publish(c);
            Reply::ok(serde_json::Value::Null, format!("backend {} port {} set in {:?}", a.backend.addr, a.backend.port, a.service))
        }
        Request::LbBackendSet(ch) => {
            c.lb.state.update_backend(&ch.service, ch.addr, ch.port, ch.weight, ch.conditions).map_err(|e| e.to_string())?;
            publish(c);
            Reply::ok(serde_json::Value::Null, format!("backend {} port {} of {:?} changed", ch.addr, ch.port, ch.service))
        }
        Request::LbBackendDel(r) => {
            c.lb.state.del_backend(&r.service, r.addr, r.port).map_err(|e| e.to_string())?;
            publish(c);
            Reply::ok(serde_json::Value::Null, format!("backend {} port {} removed from {:?}", r.addr, r.port, r.service))
        }
        Request::ShowLbServices { service } => {
            if let Some(n) = service {
                c.lb.state.service(n).ok_or_else(|| format!("service {n:?}: no such service"))?;
            }
            let rows = service_rows(&c.lb, service.as_deref());
            Reply::ok(serde_json::to_value(&rows).map_err(|e| e.to_string())?, format_services(&rows))
        }
        Request::ShowLbDigests {} => {
            // For programs (a controller's periodic check): the data only, name → digest,
            // and a one-line text, so the reply stays small at 10 000 services.
            // Each computed once per change of its service (`LbState::digests`).
            let digests: serde_json::Map<String, serde_json::Value> =
                c.lb.state.digests(digest_of).map(|(name, d)| (name.to_string(), format!("{d:016x}").into())).collect();
            let text = format!("{} services' digests (name → digest; in the JSON reply, `vecgate ctl --json`)\n", digests.len());
            Reply::ok(digests.into(), text)
        }
        Request::ShowLbBackends { service } => {
            if let Some(n) = service {
                c.lb.state.service(n).ok_or_else(|| format!("service {n:?}: no such service"))?;
            }
            let rows = backend_rows(&c.lb, service.as_deref());
            Reply::ok(serde_json::to_value(&rows).map_err(|e| e.to_string())?, format_backends(&rows))
        }
        Request::ShowLbSessions { service, limit } => {
            let limit = limit.unwrap_or(100);
            if limit > MAX_SESSION_ROWS {
                return Err(format!("limit: {limit}: expected at most {MAX_SESSION_ROWS}"));
            }
            let id = match service {
                Some(n) => Some(c.lb.state.service(n).ok_or_else(|| format!("service {n:?}: no such service"))?.0),
                None => None,
            };
            // Only the service's own: not those a deleted service with its id left.
            let service = id.map(|id| (id, c.lb.state.first_gen(id).unwrap_or(u32::MAX)));
            let (rows, total) = sessions(c, service, limit)?;
            let text = format_sessions(&c.lb, &rows, total);
            Reply::ok(serde_json::json!({ "sessions": rows, "total": total }), text)
        }
        _ => return Err("not a load-balancer request".into()),
    };
    Ok(reply)
}

/// The most rows `show lb sessions` lists.
pub const MAX_SESSION_ROWS: usize = 100_000;

/// Every worker's connections (of `service`, an id and its first generation, if given):
/// up to `limit` rows, and the total.
fn sessions(
    c: &crate::dataplane::Control,
    service: Option<(u32, u32)>,
    limit: usize,
) -> Result<(Vec<lb::show::SessionRow>, usize), String> {
    let mut rows = Vec::new();
    let mut total = 0;
    for (w, worker) in c.workers.iter().enumerate() {
        let left = limit - rows.len();
        let (r, t) = crate::dataplane::Control::inspect(worker, move |cx| {
            let now = cx.lb.now_ms;
            let (mut r, t4) = lb::show::sessions(&cx.lb.b4, w, now, service, left);
            let (r6, t6) = lb::show::sessions(&cx.lb.b6, w, now, service, left - r.len());
            r.extend(r6);
            (r, t4 + t6)
        })?;
        rows.extend(r);
        total += t;
    }
    Ok((rows, total))
}

fn format_sessions(c: &LbControl, rows: &[lb::show::SessionRow], total: usize) -> String {
    let names: HashMap<u32, &str> = c.state.services().map(|(id, s)| (id, s.name.as_str())).collect();
    // A session of a deleted service (until it expires) is not the current one's, when
    // a new service took the id.
    let name_of = |r: &lb::show::SessionRow| match names.get(&r.service) {
        Some(n) if c.state.owns_session(r.service, r.gen) => n.to_string(),
        _ => "(deleted)".to_string(),
    };
    let row_names: Vec<String> = rows.iter().map(name_of).collect();
    let name_w = crate::format::column(28, row_names.iter().map(String::as_str));
    // SCTP's states are longer than TCP's and UDP's (`sctp_cookie_echoed`).
    // An SCTP association keyed by its verification tag (direct server return) says so.
    let states: Vec<String> = rows
        .iter()
        .map(|r| match r.vtag {
            Some(tag) => format!("{} tag {tag:#010x}", crate::format::word(&r.state)),
            None => crate::format::word(&r.state),
        })
        .collect();
    let state_w = crate::format::column(12, states.iter().map(String::as_str));
    let mut s = format!(
        "{:<3} {:<name_w$} {:<5} {:<26} {:<26} {:<26} {:<26} {:<state_w$} {:>10}\n",
        "wk", "service", "proto", "client", "service address", "backend", "source seen", "state", "expires ms"
    );
    for ((r, name), state) in rows.iter().zip(&row_names).zip(&states) {
        let proto = lb::Protocol::from_number(r.protocol).map_or_else(|| r.protocol.to_string(), |p| p.name().to_string());
        s += &format!(
            "{:<3} {:<name_w$} {:<5} {:<26} {:<26} {:<26} {:<26} {:<state_w$} {:>10}\n",
            r.worker,
            name,
            proto,
            at(r.client, r.client_port),
            at(r.vip, r.vip_port),
            at(r.backend, r.backend_port),
            at(r.source, r.source_port),
            state,
            r.expires_in_ms
        );
    }
    s += &format!("{} of {total} connections\n", rows.len());
    s
}

/// `show lb sessions [service <name>] [limit <n>]` into a request.
pub fn parse_show_sessions(w: &[&str]) -> Result<Request, String> {
    let (mut service, mut limit) = (None, None);
    let mut it = w.iter();
    while let Some(&k) = it.next() {
        let v = it.next().ok_or_else(|| format!("{k}: expected a value"))?;
        match k {
            "service" => service = Some(v.to_string()),
            "limit" => limit = Some(v.parse().map_err(|_| format!("limit {v:?}: expected a number of rows"))?),
            x => return Err(format!("{x:?}: expected service <name> or limit <n>")),
        }
    }
    Ok(Request::ShowLbSessions { service, limit })
}

/// `lb …` CLI words into a request.
pub fn parse_cli(w: &[&str]) -> Result<Request, String> {
    use crate::cli::{address_word as ip, port_word as port};
    match w {
        ["service", "add", name, kind, vip, p, proto, rest @ ..] => {
            let kind = match *kind {
                "cluster_ip" | "clusterip" => ServiceType::ClusterIp,
                "node_port" | "nodeport" => ServiceType::NodePort,
                "load_balancer" | "loadbalancer" => ServiceType::LoadBalancer,
                k => return Err(format!("type {k:?}: expected cluster_ip, node_port or load_balancer")),
            };
            let protocol = match *proto {
                "tcp" => lb::Protocol::Tcp,
                "udp" => lb::Protocol::Udp,
                "sctp" => lb::Protocol::Sctp,
                p => return Err(format!("protocol {p:?}: expected tcp, udp or sctp")),
            };
            let mut spec = ServiceSpec::new(*name, kind, ip("vip", vip)?, port("port", p)?, protocol);
            let mut it = rest.iter();
            while let Some(&k) = it.next() {
                let mut v = || it.next().copied().ok_or_else(|| format!("{k}: expected a value"));
                match k {
                    "policy" => {
                        spec.traffic_policy = match v()? {
                            "cluster" => lb::TrafficPolicy::Cluster,
                            "local" => lb::TrafficPolicy::Local,
                            x => return Err(format!("policy {x:?}: expected cluster or local")),
                        }
                    }
                    "affinity" => {
                        let t = v()?;
                        let timeout_s = t.parse().map_err(|_| format!("affinity {t:?}: expected a timeout in seconds"))?;
                        spec.affinity = lb::Affinity::ClientIp { timeout_s };
                    }
                    "forwarding" => spec.forwarding = v()?.parse().map_err(|e| format!("forwarding {e}"))?,
                    "gue-port" => {
                        let p = v()?;
                        spec.gue_port = port("gue-port", p)?;
                    }
                    "table-size" => {
                        let t = v()?;
                        spec.table_size = t.parse().map_err(|_| format!("table-size {t:?}: expected a prime"))?;
                    }
                    "backend" => {
                        let a = v()?;
                        let (addr, p) = a.rsplit_once(':').ok_or_else(|| format!("backend {a:?}: expected address:port"))?;
                        spec.backends.push(BackendSpec::new(ip("backend", addr.trim_matches(['[', ']']))?, port("backend port", p)?));
                    }
                    "source-range" => {
                        let range = lb::service::SourceRange::parse_or_say(v()?).map_err(|e| format!("source-range {e}"))?;
                        spec.source_ranges.push(range);
                    }
                    x => {
                        return Err(format!("{x:?}: expected policy, affinity, forwarding, gue-port, table-size, backend or source-range"))
                    }
                }
            }
            Ok(Request::LbServiceAdd(spec))
        }
        ["service", "del", name] => Ok(Request::LbServiceDel { name: name.to_string() }),
        ["backend", "add", service, addr, p, rest @ ..] => {
            let mut b = BackendSpec::new(ip("address", addr)?, port("port", p)?);
            let mut it = rest.iter();
            while let Some(&k) = it.next() {
                match (k, it.clone().next()) {
                    ("weight", Some(w)) => {
                        b.weight = w.parse().map_err(|_| format!("weight {w:?}: expected 1 to 1000"))?;
                        it.next();
                    }
                    ("other-zone", _) => b.other_zone = true,
                    _ => return Err("expected: lb backend add <service> <addr> <port> [weight <n>] [other-zone]".into()),
                }
            }
            Ok(Request::LbBackendAdd(BackendAdd { service: service.to_string(), backend: b }))
        }
        ["backend", "del", service, addr, p] => {
            Ok(Request::LbBackendDel(BackendRef { service: service.to_string(), addr: ip("address", addr)?, port: port("port", p)? }))
        }
        ["backend", "set", service, addr, p, rest @ ..] => {
            let mut ch = BackendChange {
                service: service.to_string(),
                addr: ip("address", addr)?,
                port: port("port", p)?,
                weight: None,
                conditions: None,
            };
            let mut it = rest.iter();
            while let Some(&k) = it.next() {
                match k {
                    "weight" => {
                        let w = it.next().ok_or("weight: expected a value")?;
                        ch.weight = Some(w.parse().map_err(|_| format!("weight {w:?}: expected 1 to 1000"))?);
                    }
                    "ready" => ch.conditions = Some(Conditions { ready: true, serving: true, terminating: false }),
                    "terminating" => ch.conditions = Some(Conditions { ready: false, serving: true, terminating: true }),
                    "not-serving" => ch.conditions = Some(Conditions { ready: false, serving: false, terminating: false }),
                    x => return Err(format!("{x:?}: expected weight <n>, ready, terminating or not-serving")),
                }
            }
            Ok(Request::LbBackendSet(ch))
        }
        _ => Err("expected: lb service add|del …, lb backend add|del|set …".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const BASE: &str = "[[interface]]\nname = \"eth0\"\ntype = \"null\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.0.1/24\"]\n";

    fn load(extra: &str) -> Result<(LbControl, RouterState), ConfigError> {
        let cfg = Config::parse(&format!("{BASE}{extra}"), "lb.toml", Path::new(".")).map_err(|e| e)?;
        let (mut router, _, _) = crate::dataplane::build_state(&cfg)?;
        LbControl::from_config(&cfg, &mut router).map(|c| (c, router))
    }

    const WEB: &str = "[[lb_service]]\nname = \"web\"\ntype = \"cluster_ip\"\nvip = \"198.18.128.10\"\nport = 80\nprotocol = \"tcp\"\n";

    /// `lb backend add … [weight <n>] [other-zone]` in either order; the request's JSON
    /// names `other_zone` only when set, and a file's backend takes it too.
    #[test]
    fn a_backend_of_another_zone_from_the_cli_the_api_and_a_file() {
        let add = |w: &[&str]| match parse_cli(w) {
            Ok(Request::LbBackendAdd(a)) => Ok((a.backend.weight, a.backend.other_zone)),
            Ok(r) => panic!("{r:?}"),
            Err(e) => Err(e),
        };
        let base = ["backend", "add", "web", "198.19.1.10", "8080"];
        assert_eq!(add(&base), Ok((1, false)));
        assert_eq!(add(&[&base[..], &["other-zone"]].concat()), Ok((1, true)));
        assert_eq!(add(&[&base[..], &["weight", "3", "other-zone"]].concat()), Ok((3, true)));
        assert_eq!(add(&[&base[..], &["other-zone", "weight", "3"]].concat()), Ok((3, true)));
        assert!(add(&[&base[..], &["zone"]].concat()).unwrap_err().contains("[other-zone]"));
        assert!(add(&[&base[..], &["weight"]].concat()).is_err());
        let json = |other_zone| {
            let mut b = BackendSpec::new("198.19.1.10".parse().unwrap(), 8080);
            b.other_zone = other_zone;
            serde_json::to_string(&Request::LbBackendAdd(BackendAdd { service: "web".into(), backend: b })).unwrap()
        };
        assert!(!json(false).contains("other_zone"), "{}", json(false));
        assert!(json(true).contains("\"other_zone\":true"), "{}", json(true));
        let (c, _) = load(&format!(
            "{WEB}backends = [{{ addr = \"198.19.1.10\", port = 8080, other_zone = true }}, {{ addr = \"198.19.2.10\", port = 8080 }}]\n"
        ))
        .unwrap();
        let rows = backend_rows(&c, None);
        assert_eq!(rows.iter().map(|r| (r.other_zone, r.eligible)).collect::<Vec<_>>(), [(true, false), (false, true)]);
        assert!(format_backends(&rows).contains("ready,serving,other-zone"));
    }

    /// An SCTP service from a file, the CLI and the API alike (`protocol` `sctp`), shown
    /// as sctp; a file's protocol outside tcp, udp and sctp refused by field; the same
    /// address and port may have a TCP and an SCTP service.
    #[test]
    fn an_sctp_service_from_a_file_the_cli_and_the_api() {
        let sctp = WEB.replace("name = \"web\"", "name = \"amf\"").replace("protocol = \"tcp\"", "protocol = \"sctp\"");
        let (c, _) = load(&format!("{WEB}{sctp}")).unwrap();
        let mut protos: Vec<_> = c.state.services().map(|(_, s)| (s.name.clone(), s.protocol)).collect();
        protos.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(protos, [("amf".to_string(), Protocol::Sctp), ("web".to_string(), Protocol::Tcp)]);
        let shown = format_services(&service_rows(&c, Some("amf")));
        assert!(shown.contains(" sctp ") && !shown.contains("tcp"), "{shown}");
        let e = load(&WEB.replace("\"tcp\"", "\"dccp\"")).err().expect("dccp refused").to_string();
        assert!(e.contains("protocol") && e.contains("sctp"), "{e}");
        match parse_cli(&["service", "add", "amf", "cluster_ip", "198.18.128.10", "38412", "sctp"]) {
            Ok(Request::LbServiceAdd(s)) => assert_eq!((s.protocol, s.port), (Protocol::Sctp, 38412)),
            r => panic!("{r:?}"),
        }
        assert!(parse_cli(&["service", "add", "amf", "cluster_ip", "198.18.128.10", "38412", "dccp"]).unwrap_err().contains("sctp"));
        let j: Request = serde_json::from_str(
            r#"{"op":"lb_service_add","name":"amf","type":"cluster_ip","vip":"198.18.128.10","port":38412,"protocol":"sctp"}"#,
        )
        .unwrap();
        assert!(matches!(j, Request::LbServiceAdd(s) if s.protocol == Protocol::Sctp));
    }
    const LB: &str = "[[lb_service]]\nname = \"ext\"\ntype = \"load_balancer\"\nvip = \"198.18.129.10\"\nport = 80\nprotocol = \"tcp\"\n";

    /// Long names (Kubernetes' `namespace/name:port`) and IPv6 addresses widen their
    /// columns: every row's fields start where their headers do.
    #[test]
    fn show_lb_columns_fit_long_names_and_addresses() {
        let long = "[[lb_service]]\nname = \"kube-system/a-rather-long-service-name:metrics-https\"\ntype = \"load_balancer\"\n\
                    vip = \"2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff\"\nport = 65000\nprotocol = \"tcp\"\n\
                    backends = [{ addr = \"2001:db8::10\", port = 8443 }]\n";
        let (c, _) = load(&format!("{WEB}backends = [{{ addr = \"198.19.1.10\", port = 80 }}]\n{long}")).unwrap();
        // The left-aligned columns before the first right-aligned one: id, name, type and
        // address; service and backend.
        for (text, left) in [(format_services(&service_rows(&c, None)), 4), (format_backends(&backend_rows(&c, None)), 2)] {
            let lines: Vec<&str> = text.lines().collect();
            let starts = |l: &str| -> Vec<usize> {
                l.char_indices().filter(|&(i, ch)| ch != ' ' && (i == 0 || l.as_bytes()[i - 1] == b' ')).map(|(i, _)| i).collect()
            };
            let head = starts(lines[0]);
            for l in &lines[1..] {
                assert_eq!(starts(l)[..left], head[..left], "{text}");
            }
        }
    }

    /// `show lb sessions` text: SCTP's long state names (`sctp_cookie_echoed`) widen the
    /// state column, so every row's fields start where their headers do, the right-aligned
    /// expiry ending where its header ends.
    #[test]
    fn show_lb_sessions_fits_sctp_states() {
        use lb::session::ConnState;
        let (c, _) = load(WEB).unwrap();
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let row = |state, expires_in_ms| lb::show::SessionRow {
            worker: 0,
            service: 0,
            protocol: 132,
            client: ip("198.18.0.2"),
            client_port: 40_000,
            vip: ip("198.18.128.10"),
            vip_port: 38_412,
            backend: ip("198.19.1.10"),
            backend_port: 38_412,
            source: ip("198.18.1.1"),
            source_port: 40_000,
            state,
            expires_in_ms,
            gen: 0,
            vtag: None,
        };
        // A direct-server-return association keyed by its verification tag says so.
        let tagged = lb::show::SessionRow { vtag: Some(0x5eed_0001), ..row(ConnState::SctpEstablished, 5) };
        let rows =
            [row(ConnState::SctpCookieEchoed, 2999), row(ConnState::SctpEstablished, 209_999), row(ConnState::Established, 1), tagged];
        let text = format_sessions(&c, &rows, 4);
        let lines: Vec<&str> = text.lines().collect();
        let state_at = lines[0].find("state").unwrap();
        for (l, state) in
            lines[1..5].iter().zip(["sctp_cookie_echoed ", "sctp_established ", "established ", "sctp_established tag 0x5eed0001 "])
        {
            assert!(l[state_at..].starts_with(state), "the state under its header: {text}");
            assert_eq!(l.len(), lines[0].len(), "the expiry ends where its header ends: {text}");
        }
        assert_eq!(lines[5], "4 of 4 connections");
    }

    /// Every timeout of `[lb] timeouts`, SCTP's too, is read by its name and checked
    /// under it (the name the check gives is the key the file has); SCTP's defaults are
    /// their own, not TCP's; a misspelt key is refused by its name.
    #[test]
    fn each_timeout_is_checked_by_its_name() {
        let names = Timeouts::default().named().map(|(n, _)| n);
        assert_eq!(names.iter().filter(|n| n.starts_with("sctp_")).count(), 6);
        for name in names {
            let e = load(&format!("[lb]\ntimeouts = {{ {name} = 0 }}\n")).err().unwrap_or_else(|| panic!("{name} = 0 accepted"));
            assert_eq!(e.to_string(), format!("lb.toml: lb.timeouts.{name}: 0: expected 1 ms to 30 days (line 7)"));
            let (c, _) = load(&format!("[lb]\ntimeouts = {{ {name} = 4321 }}\n")).unwrap();
            let set: Vec<_> = c.state.timeouts().named().into_iter().filter(|&(_, ms)| ms == 4321).map(|(n, _)| n).collect();
            assert_eq!(set, [name], "{name} sets its own timeout alone");
        }
        let (c, _) = load("[lb]\ntimeouts = { sctp_established_ms = 300000, sctp_cookie_wait_ms = 5000 }\n").unwrap();
        let t = c.shared.load().timeouts;
        assert_eq!(
            (t.sctp_established_ms, t.sctp_cookie_wait_ms, t.sctp_closed_ms, t.tcp_established_ms),
            (300_000, 5_000, 10_000, 86_400_000)
        );
        let (c, _) = load("").unwrap();
        let t = c.state.timeouts();
        assert_eq!((t.sctp_established_ms, t.sctp_shutdown_ms), (210_000, 3_000));
        let e = Config::parse(&format!("{BASE}[lb]\ntimeouts = {{ sctp_establish_ms = 1 }}\n"), "lb.toml", Path::new(".")).unwrap_err();
        assert!(e.field.starts_with("lb") && e.message.contains("sctp_establish_ms"), "{e}");
    }

    #[test]
    fn bad_settings_name_file_field_and_expectation() {
        let cases = [
            (
                format!("{WEB}backends = [{{ addr = \"198.19.1.10\", port = 8080, weight = 0 }}]\n"),
                "lb.toml: lb_service[0].backends[0].weight: 0: expected 1 to 1000",
            ),
            (format!("{WEB}{WEB}"), "lb.toml: lb_service[1].name: \"web\" is already lb_service[0]'s name: expected each name once"),
            ("[lb]\nsnat4 = \"2001:db8::1\"\n".into(), "lb.toml: lb.snat4: 2001:db8::1: expected an address of that family"),
            ("[lb]\nlimits = { sessions = 0 }\n".into(), "lb.toml: lb.limits.sessions: 0: expected 1 to"),
            ("[lb]\ntimeouts = { udp_ms = 0 }\n".into(), "lb.toml: lb.timeouts.udp_ms: 0: expected 1 ms to 30 days"),
            (
                format!("{WEB}{LB}source_ranges = [\"198.18.50.0/24\", \"2001:db8:50::/48\"]\n"),
                "lb.toml: lb_service[1].source_ranges[1]: 2001:db8:50::/48: expected a prefix of the vip's family (IPv4)",
            ),
            (
                format!("{WEB}source_ranges = [\"198.18.50.0/24\"]\n"),
                "lb.toml: lb_service[0].source_ranges: on a cluster_ip service: expected none (only a load_balancer service's address is filtered by source)",
            ),
        ];
        for (text, want) in cases {
            let e = load(&text).err().unwrap_or_else(|| panic!("{text} was accepted")).to_string();
            assert!(e.starts_with(want), "{e:?} does not start with {want:?}");
        }
        let e = Config::parse(&format!("{BASE}{WEB}colour = \"blue\"\n"), "lb.toml", Path::new(".")).unwrap_err();
        assert!(e.field.starts_with("lb_service[0]") && e.message.contains("colour"), "{e}");
        // Unknown keys inside a backend or the affinity table too (a misspelt weight
        // must not start with weight 1).
        let e = Config::parse(
            &format!("{BASE}{WEB}backends = [{{ addr = \"198.19.1.10\", port = 80, wieght = 2 }}]\n"),
            "lb.toml",
            Path::new("."),
        )
        .unwrap_err();
        assert!(e.field.starts_with("lb_service[0].backends[0]") && e.message.contains("wieght"), "{e}");
        let e = Config::parse(
            &format!("{BASE}{WEB}affinity = {{ kind = \"client_ip\", timeout_s = 5, extra = 1 }}\n"),
            "lb.toml",
            Path::new("."),
        )
        .unwrap_err();
        assert!(e.field.starts_with("lb_service[0].affinity") && e.message.contains("extra"), "{e}");
        let r: Result<crate::api::Request, _> =
            serde_json::from_str(r#"{"op":"lb_backend_add","service":"web","addr":"198.19.1.50","port":8443,"wieght":7}"#);
        assert!(r.unwrap_err().to_string().contains("wieght"));
        // A malformed range: its place in the file, the field and what was expected.
        let e = Config::parse(&format!("{BASE}{WEB}{LB}source_ranges = [\"198.18.50.1/24\"]\n"), "lb.toml", Path::new(".")).unwrap_err();
        assert_eq!(e.field, "lb_service[1].source_ranges[0]", "{e}");
        assert!(e.message.contains("\"198.18.50.1/24\": host bits are set after /24 (did you mean 198.18.50.0/24?)"), "{e}");
        assert!(e.message.contains("expected a prefix such as"), "{e}");
        // Well placed: served, and shown.
        let (c, _) = load(&format!("{LB}source_ranges = [\"198.18.50.0/24\", \"198.18.60.0/24\"]\n")).unwrap();
        let rows = service_rows(&c, None);
        assert_eq!(rows[0].source_ranges.len(), 2);
        let text = format_services(&rows);
        assert!(text.lines().next().unwrap().ends_with(" sources") && text.contains(" 198.18.50.0/24,198.18.60.0/24\n"), "{text}");
    }

    fn digest_spec() -> ServiceSpec {
        let b = |host: u8, port| BackendSpec::new([198, 19, 1, host].into(), port);
        ServiceSpec {
            name: "default/web:http@198.18.128.10".into(),
            kind: ServiceType::ClusterIp,
            vip: [198, 18, 128, 10].into(),
            port: 80,
            protocol: Protocol::Tcp,
            backends: vec![b(10, 8080), b(20, 8080), b(30, 8080)],
            traffic_policy: lb::TrafficPolicy::Cluster,
            affinity: lb::Affinity::None,
            table_size: 0,
            forwarding: lb::Forwarding::Nat,
            gue_port: 0,
            source_ranges: Vec::new(),
        }
    }

    /// Every field of a spec and of each backend changes the digest, each change to a
    /// digest of its own; the backends' order does not (they are a set, by address and
    /// port); the function is fixed (no per-process key), so one value is pinned.
    #[test]
    fn the_digest_follows_every_field_and_not_the_backends_order() {
        let base = digest_spec();
        let d = service_digest(&base);
        assert_eq!(d.len(), 16);
        // Computed apart too: the encoding as documented, rendered in Python, through
        // hashlib.sha256.
        assert_eq!(d, "8de65321361a3984", "the digest is fixed: a program of another build compares it");
        for order in [[2, 1, 0], [1, 0, 2], [0, 2, 1]] {
            let s = ServiceSpec { backends: order.iter().map(|&i| base.backends[i]).collect(), ..base.clone() };
            assert_eq!(service_digest(&s), d, "{order:?}");
        }
        type Change = (&'static str, fn(&mut ServiceSpec));
        let changes: Vec<Change> = vec![
            ("name", |s| s.name.push('x')),
            ("type", |s| s.kind = ServiceType::LoadBalancer),
            ("vip", |s| s.vip = [198, 18, 128, 11].into()),
            ("vip family", |s| s.vip = "::ffff:198.18.128.10".parse().unwrap()),
            ("port", |s| s.port = 81),
            ("protocol", |s| s.protocol = Protocol::Udp),
            ("traffic_policy", |s| s.traffic_policy = lb::TrafficPolicy::Local),
            ("affinity", |s| s.affinity = lb::Affinity::ClientIp { timeout_s: 10800 }),
            ("affinity timeout", |s| s.affinity = lb::Affinity::ClientIp { timeout_s: 10801 }),
            ("table_size", |s| s.table_size = 1009),
            ("forwarding", |s| s.forwarding = lb::Forwarding::Gue),
            ("gue_port", |s| s.gue_port = 7000),
            ("backend removed", |s| {
                s.backends.pop();
            }),
            ("backend added", |s| s.backends.push(BackendSpec::new([198, 19, 1, 40].into(), 8080))),
            ("backend addr", |s| s.backends[1].addr = [198, 19, 1, 21].into()),
            ("backend port", |s| s.backends[1].port = 8081),
            ("backend weight", |s| s.backends[1].weight = 2),
            ("backend ready", |s| s.backends[1].conditions.ready = false),
            ("backend serving", |s| s.backends[1].conditions.serving = false),
            ("backend terminating", |s| s.backends[1].conditions.terminating = true),
            ("backend local", |s| s.backends[1].local = false),
            ("backend other_zone", |s| s.backends[1].other_zone = true),
        ];
        let mut seen = vec![d];
        for (what, change) in changes {
            let mut s = base.clone();
            change(&mut s);
            let changed = service_digest(&s);
            assert!(!seen.contains(&changed), "{what}: {changed} seen before");
            seen.push(changed);
        }
        // Source ranges: counted only when there are some (the pin above is a service's
        // without, unchanged since before ranges existed), as a set; pinned too, computed
        // apart with Python's ipaddress and hashlib over the encoding as documented.
        let ranged = |r: &[&str]| ServiceSpec { source_ranges: r.iter().map(|r| r.parse().unwrap()).collect(), ..base.clone() };
        let with = service_digest(&ranged(&["198.18.60.0/24", "198.18.50.0/24", "2001:db8:50::/48"]));
        assert_eq!(with, "4f688324793d768d");
        assert_eq!(service_digest(&ranged(&["2001:db8:50::/48", "198.18.50.0/24", "198.18.60.0/24"])), with, "a set");
        assert_eq!(service_digest(&ranged(&["198.18.50.0/24"])), "dd40a4e491617151");
        for (what, r) in [
            ("a range's length", &["198.18.50.0/25"][..]),
            ("a range's network", &["198.18.51.0/24"]),
            ("one more", &["198.18.50.0/24", "198.18.70.0/24"]),
        ] {
            let d = service_digest(&ranged(r));
            assert!(!seen.contains(&d) && d != with, "{what}: {d} seen before");
            seen.push(d);
        }
        // Name bytes are length-prefixed: a name and the next field's bytes do not run
        // together.
        let (mut a, mut b) = (base.clone(), base.clone());
        a.name = "abcdefgh".into();
        b.name = "abcdefgh\0".into();
        assert_ne!(service_digest(&a), service_digest(&b));
    }

    #[test]
    fn services_on_one_address_share_its_route() {
        let dns = WEB.replace("\"web\"", "\"dns\"").replace("port = 80", "port = 53").replace("\"tcp\"", "\"udp\"");
        let (c, router) = load(&format!("{WEB}{dns}")).unwrap();
        assert_eq!(c.state.len(), 2);
        let lb_routes = router.tunnel_routes_of(|t| t.kind == TunnelKind::Lb4);
        assert_eq!(lb_routes.len(), 1);
        assert_eq!(lb_routes[0].0, "198.18.128.10/32".parse().unwrap());
        let t = c.state.tables();
        assert!(t.v4.lookup(&[198, 18, 128, 10], 53, 17, false).is_some() && t.v4.lookup(&[198, 18, 128, 10], 80, 6, false).is_some());
    }
}
