//! The router's control-plane state and the one typed API that changes it. The config
//! loader, the CLI and the JSON API all call these functions; each change is validated
//! whole before anything is applied, and `build` turns the state into a new immutable
//! [`Tables`] to publish.

use crate::fib::FibBuilder;
use crate::lpm::Route;
use crate::multipath::{self, Multipath, MAX_PATHS, MAX_WEIGHT};
use crate::prefix::{IfAddr, Prefix};
use crate::tables::{l2_rewrite, Adjacency, IfL3, Neighbour, Tables, TunnelKind, TunnelRef, UdpDemux, ADJ_LOCAL, ADJ_MISS, MAX_INDEX};
use engine::IfIndex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use wire::{EtherType, EthernetAddress};

mod interfaces;
pub use interfaces::RemovedInterface;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("no interface named {0:?}")]
    UnknownInterface(String),
    #[error("interface name {0:?} used twice")]
    DuplicateInterface(String),
    #[error("next hop {0} is not on a connected subnet of any interface")]
    NextHopNotConnected(IpAddr),
    #[error("next hop {hop} is not on a connected subnet of {interface}")]
    NextHopNotOnInterface { hop: IpAddr, interface: String },
    #[error("next hop {hop} and prefix {prefix} are of different address families")]
    FamilyMismatch { hop: IpAddr, prefix: Prefix },
    #[error("{0} is the connected subnet of an interface; it cannot be a static route")]
    ConnectedPrefix(Prefix),
    #[error("{prefix} is an address of {interface}: packets to it are the gateway's own, and a route there would take them; expected another prefix (a wider one that contains it is fine)")]
    OwnAddress { prefix: Prefix, interface: String },
    #[error("{prefix} exists: {existing}; {remedy}")]
    RouteExists { prefix: Prefix, existing: String, remedy: String },
    #[error("{prefix} is {owner}, not a static route: {remedy}")]
    OwnedRoute { prefix: Prefix, owner: String, remedy: String },
    #[error("address {addr} is already routed: {by}; remove that first")]
    AddressRouted { addr: IpAddr, by: String },
    #[error("no route for {0}")]
    NoSuchRoute(Prefix),
    #[error("neighbour {0} is not on a connected subnet of {1}")]
    NeighbourNotConnected(IpAddr, String),
    #[error("{0} is already routed into a tunnel")]
    TunnelRouteExists(Prefix),
    #[error("{0} is already a static route")]
    StaticRouteExists(Prefix),
    #[error("more than {MAX_INDEX} adjacencies")]
    TooManyAdjacencies,
    #[error("{addr} is already an address of {interface}")]
    AddressInUse { addr: IpAddr, interface: String },
    #[error("subnet {subnet} overlaps {other} of {interface}: each subnet on one interface")]
    SubnetOverlaps { subnet: Prefix, other: Prefix, interface: String },
    #[error("more than {0} interfaces")]
    TooManyInterfaces(usize),
    #[error("{0} paths: expected 1 to {MAX_PATHS}")]
    PathCount(usize),
    #[error("path {path}: weight {weight}: expected 1 to {MAX_WEIGHT}")]
    PathWeight { path: usize, weight: u32 },
    #[error("path {0}: expected a next hop, an interface or a tunnel (a path is not a blackhole or a list of paths)")]
    PathTarget(usize),
    #[error("path {0} is the same as an earlier path")]
    DuplicatePath(usize),
    #[error("path {path}: {error}")]
    Path { path: usize, error: Box<StateError> },
}

/// An interface as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceSpec {
    pub name: String,
    pub mac: EthernetAddress,
    pub mtu: u16,
    pub addresses: Vec<IfAddr>,
}

/// Where a route sends packets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteTarget {
    /// Through a next hop on a connected subnet (optionally pinned to an interface).
    Via { next_hop: IpAddr, interface: Option<String> },
    /// Directly attached out of an interface (destinations resolved per packet).
    Interface(String),
    /// Discard silently.
    Blackhole,
    /// Into a tunnel (the tunnel is the outgoing interface).
    Tunnel(TunnelRef),
    /// ECMP: several weighted paths, one per flow (`crate::multipath`).
    Multipath(Vec<Path>),
}

/// One path of a multipath route: a next hop, an attached interface or a tunnel, and its
/// weight (its share of the flows is its share of the weights of the paths that can send).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Path {
    pub target: RouteTarget,
    pub weight: u32,
}

/// One path of a multipath route as `show ip fib` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FibPath {
    pub next_hop: Option<String>,
    pub interface: Option<String>,
    pub weight: u32,
    /// For a next hop: is its MAC known?
    pub resolved: bool,
    /// The path gets no flows now (its next hop unresolved or its link down).
    pub skipped: bool,
}

/// One row of `show ip fib`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FibEntry {
    pub prefix: String,
    /// `local`, `attached`, `via`, `blackhole`.
    pub kind: &'static str,
    pub next_hop: Option<String>,
    pub interface: Option<String>,
    pub adjacency: u32,
    /// For `via`: is the next hop's MAC known?
    pub resolved: bool,
    /// For `multipath`: every path with its weight.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<FibPath>,
}

/// An interface's L3 view from its spec.
fn if_l3(s: InterfaceSpec) -> IfL3 {
    let mut ip4 = Vec::new();
    let mut ip6 = Vec::new();
    for a in &s.addresses {
        match a.addr {
            IpAddr::V4(v) => ip4.push((v, a.len)),
            IpAddr::V6(v) => ip6.push((v, a.len)),
        }
    }
    IfL3 {
        ip6_link_local: wire::ipv6::link_local_from_mac(&s.mac),
        name: s.name,
        mac: s.mac,
        mtu: s.mtu,
        ip4,
        ip6,
        removed: false,
        urpf: crate::urpf::Urpf::Off,
    }
}

/// A route's target in `ip route add`'s words (`via 198.18.2.2`, `blackhole`).
pub fn target_words(t: &RouteTarget) -> String {
    match t {
        RouteTarget::Via { next_hop, interface: None } => format!("via {next_hop}"),
        RouteTarget::Via { next_hop, interface: Some(i) } => format!("via {next_hop} interface {i}"),
        RouteTarget::Interface(i) => format!("interface {i}"),
        RouteTarget::Blackhole => "blackhole".into(),
        RouteTarget::Tunnel(r) => format!("interface {}", r.if_name()),
        RouteTarget::Multipath(paths) => {
            paths.iter().map(|p| format!("{} weight {}", target_words(&p.target), p.weight)).collect::<Vec<_>>().join(" ")
        }
    }
}

/// Whose route a tunnel-owned prefix is, in words.
fn owner_words(t: TunnelRef) -> String {
    use crate::tables::TunnelKind as K;
    let name = t.if_name();
    match t.kind {
        K::Gtpu4 | K::Gtpu6 => format!("{name}'s ue"),
        K::Gue4 | K::Gue6 => format!("one of {name}'s routes"),
        K::Esp4 | K::Esp6 => format!("one of SA {}'s routes ({name})", t.id),
        K::Lb4 | K::Lb6 => format!("a load-balanced service address ({name})"),
        K::Upf4 | K::Upf6 => format!("the UPF's UE pool ({name})"),
    }
}

/// How the route at `p` goes: a static one by `ip route del`, an owned one with its
/// owner (`None`: a static route).
fn remedy(p: &Prefix, owner: Option<TunnelRef>) -> String {
    use crate::tables::TunnelKind as K;
    let Some(t) = owner else { return format!("delete it first (ip route del {p})") };
    let name = t.if_name();
    match t.kind {
        K::Gtpu4 | K::Gtpu6 => format!("it goes with the tunnel (delete gtpu tunnel {name})"),
        K::Gue4 | K::Gue6 => format!("it goes with the tunnel (delete udp tunnel {name})"),
        K::Esp4 | K::Esp6 => format!("it goes with the SA (ipsec sa del {})", t.id),
        K::Lb4 | K::Lb6 => "it goes with the services on it (lb service del <name>)".into(),
        K::Upf4 | K::Upf6 => "it goes with [pfcp] ue_pool (a restart)".into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum AdjKey {
    Blackhole,
    Attached(IfIndex),
    NextHop(IfIndex, IpAddr),
}

pub struct RouterState {
    interfaces: Vec<IfL3>,
    routes: BTreeMap<Prefix, RouteTarget>,
    /// Routes that tunnel features own (a UE address to its GTP-U tunnel), kept apart
    /// from static routes so a million of them cost 8 bytes of target each.
    tunnel_routes: BTreeMap<Prefix, TunnelRef>,
    /// Static routes into a tunnel that the tunnel or SA put there from its own `routes`
    /// (not `ip route add`): they go with it, so `ip route del` and `ip route add` leave
    /// them alone.
    owned: BTreeSet<Prefix>,
    udp: Arc<UdpDemux>,
    parcel_links: u64,
    spd_links: u64,
    tunnel_esp: Arc<Vec<crate::tables::TunnelEsp>>,
    lb_local: bool,
    lb_replies: bool,
    neighbours: HashMap<IpAddr, Neighbour>,
    adj_ids: HashMap<AdjKey, u32>,
    adj_keys: Vec<AdjKey>,
    generation: u64,
    /// The FIBs, kept current route by route (`FibBuilder`); `build` publishes clones.
    fib4: FibBuilder<u32>,
    fib6: FibBuilder<u128>,
    /// ECMP groups by their paths (value, weight), as `adj_ids` for adjacencies: routes
    /// with the same paths share one.
    mp_ids: HashMap<Vec<(u32, u32)>, u32>,
    mp_paths: Vec<Vec<(u32, u32)>>,
    /// Each group's buckets as last published, with which paths could send then: a
    /// publication rebuilds only the groups whose paths changed.
    mp_built: Vec<(Vec<bool>, Arc<Multipath>)>,
    /// Bit i: interface i's link is down (its paths are skipped).
    links_down: u64,
    /// `[punt]`: ports of our addresses handed to the host's stack.
    punt: Option<crate::punt::PuntSpec>,
}

impl RouterState {
    pub fn new(specs: Vec<InterfaceSpec>) -> Result<RouterState, StateError> {
        let mut interfaces = Vec::new();
        for s in specs {
            if interfaces.iter().any(|i: &IfL3| i.name == s.name) {
                return Err(StateError::DuplicateInterface(s.name));
            }
            interfaces.push(if_l3(s));
        }
        let mut state = RouterState {
            interfaces,
            routes: BTreeMap::new(),
            tunnel_routes: BTreeMap::new(),
            owned: BTreeSet::new(),
            udp: Arc::new(UdpDemux::default()),
            parcel_links: 0,
            spd_links: 0,
            tunnel_esp: Arc::new(Vec::new()),
            lb_local: false,
            lb_replies: false,
            neighbours: HashMap::new(),
            adj_ids: HashMap::new(),
            adj_keys: Vec::new(),
            generation: 0,
            fib4: FibBuilder::new(),
            fib6: FibBuilder::new(),
            mp_ids: HashMap::new(),
            mp_paths: Vec::new(),
            mp_built: Vec::new(),
            links_down: 0,
            punt: None,
        };
        state.rebuild_fibs();
        Ok(state)
    }

    pub fn interfaces(&self) -> &[IfL3] {
        &self.interfaces
    }

    pub fn if_index(&self, name: &str) -> Result<IfIndex, StateError> {
        self.interfaces
            .iter()
            .position(|i| !i.removed && i.name == name)
            .map(|i| IfIndex(i as u16))
            .ok_or_else(|| StateError::UnknownInterface(name.to_string()))
    }

    fn connected_if(&self, a: IpAddr) -> Option<IfIndex> {
        self.interfaces
            .iter()
            .position(|i| match a {
                IpAddr::V4(v) => i.ip4.iter().any(|(x, l)| Prefix::covering(IpAddr::V4(*x), *l).contains(IpAddr::V4(v))),
                IpAddr::V6(v) => i.ip6.iter().any(|(x, l)| Prefix::covering(IpAddr::V6(*x), *l).contains(IpAddr::V6(v))),
            })
            .map(|i| IfIndex(i as u16))
    }

    fn is_connected_prefix(&self, p: &Prefix) -> bool {
        self.interfaces.iter().any(|i| {
            i.ip4.iter().any(|(a, l)| Prefix::covering(IpAddr::V4(*a), *l) == *p)
                || i.ip6.iter().any(|(a, l)| Prefix::covering(IpAddr::V6(*a), *l) == *p)
        })
    }

    /// The interface `p` is an address of: a /32 or /128 equal to one of its addresses
    /// (its IPv6 link-local one too). Only these matter: a wider prefix that contains an
    /// address of ours leaves it local by the longest match.
    pub fn own_address_of(&self, p: &Prefix) -> Option<&str> {
        let host = |a: IpAddr| Prefix::host(a) == *p;
        self.interfaces
            .iter()
            .filter(|i| !i.removed)
            .find(|i| {
                i.ip4.iter().any(|(a, _)| host(IpAddr::V4(*a)))
                    || i.ip6.iter().any(|(a, _)| host(IpAddr::V6(*a)))
                    || host(IpAddr::V6(i.ip6_link_local))
            })
            .map(|i| i.name.as_str())
    }

    /// What routes exactly `p` besides the interfaces: a static route (`None` as the
    /// owner), or a tunnel, SA or service that owns its route there.
    fn route_at(&self, p: &Prefix) -> Option<(String, Option<TunnelRef>)> {
        if let Some(t) = self.tunnel_routes.get(p) {
            return Some((owner_words(*t), Some(*t)));
        }
        let target = self.routes.get(p)?;
        match target {
            RouteTarget::Tunnel(t) if self.owned.contains(p) => Some((owner_words(*t), Some(*t))),
            _ => Some((target_words(target), None)),
        }
    }

    /// Refuse a prefix that routes the gateway's own address or is routed already: the
    /// one rule of every kind of route (static, a tunnel's, an SA's, a service address).
    /// `replace`: a static route may be replaced (a batch, a reload), not a tunnel's.
    fn check_prefix_free(&self, p: &Prefix, replace: bool) -> Result<(), StateError> {
        if self.is_connected_prefix(p) {
            return Err(StateError::ConnectedPrefix(*p));
        }
        if let Some(name) = self.own_address_of(p) {
            return Err(StateError::OwnAddress { prefix: *p, interface: name.to_string() });
        }
        match self.route_at(p) {
            Some((_, None)) if replace => Ok(()),
            Some((existing, owner)) => Err(StateError::RouteExists { prefix: *p, existing, remedy: remedy(p, owner) }),
            None => Ok(()),
        }
    }

    /// Check a route without applying it: it may replace a static route, not the route
    /// of a tunnel, SA or service.
    pub fn validate_route(&self, prefix: &Prefix, target: &RouteTarget) -> Result<(), StateError> {
        self.check_prefix_free(prefix, true)?;
        self.validate_target(prefix, target)
    }

    fn validate_target(&self, prefix: &Prefix, target: &RouteTarget) -> Result<(), StateError> {
        match target {
            RouteTarget::Multipath(paths) => {
                if paths.is_empty() || paths.len() > MAX_PATHS {
                    return Err(StateError::PathCount(paths.len()));
                }
                for (i, p) in paths.iter().enumerate() {
                    if !(1..=MAX_WEIGHT).contains(&p.weight) {
                        return Err(StateError::PathWeight { path: i, weight: p.weight });
                    }
                    if matches!(p.target, RouteTarget::Blackhole | RouteTarget::Multipath(_)) {
                        return Err(StateError::PathTarget(i));
                    }
                    if paths[..i].iter().any(|q| q.target == p.target) {
                        return Err(StateError::DuplicatePath(i));
                    }
                    self.validate_target(prefix, &p.target).map_err(|e| StateError::Path { path: i, error: Box::new(e) })?;
                }
                Ok(())
            }
            RouteTarget::Via { next_hop, interface } => {
                if matches!(prefix, Prefix::V4(..)) != next_hop.is_ipv4() {
                    return Err(StateError::FamilyMismatch { hop: *next_hop, prefix: *prefix });
                }
                let on = self.connected_if(*next_hop).ok_or(StateError::NextHopNotConnected(*next_hop))?;
                if let Some(name) = interface {
                    let want = self.if_index(name)?;
                    if want != on {
                        return Err(StateError::NextHopNotOnInterface { hop: *next_hop, interface: name.clone() });
                    }
                }
                Ok(())
            }
            RouteTarget::Interface(name) => self.if_index(name).map(|_| ()),
            RouteTarget::Blackhole | RouteTarget::Tunnel(_) => Ok(()),
        }
    }

    /// Check a route a tunnel feature owns (a UE prefix, a service address, a UDP
    /// tunnel's or an SA's `routes`) without applying it: the prefix must have no route.
    pub fn validate_tunnel_route(&self, prefix: &Prefix) -> Result<(), StateError> {
        self.check_prefix_free(prefix, false)
    }

    /// Add the static routes a UDP tunnel or an SA declares (its `routes`), all or
    /// nothing: listed by `show ip fib` as any route into it, but refused where a route
    /// is already, and removed only with their tunnel (`del_routes_into`).
    pub fn add_owned_routes(&mut self, routes: &[(Prefix, TunnelRef)]) -> Result<(), (usize, StateError)> {
        // A rekeyed SA (make before break: the new outbound SA comes before the old one
        // goes) takes its predecessor's routes over; no other owner's route is taken.
        let esp = |t: &TunnelRef| matches!(t.kind, TunnelKind::Esp4 | TunnelKind::Esp6);
        let handed: Vec<Prefix> = routes
            .iter()
            .filter(|(p, t)| esp(t) && self.owned.contains(p) && matches!(self.routes.get(p), Some(RouteTarget::Tunnel(o)) if esp(o)))
            .map(|(p, _)| *p)
            .collect();
        self.check_tunnel_routes(routes, &handed)?;
        for p in &handed {
            self.owned.remove(p);
        }
        let added = self.add_routes(routes.iter().map(|(p, t)| (*p, RouteTarget::Tunnel(*t))));
        self.owned.extend(handed);
        added?;
        self.owned.extend(routes.iter().map(|(p, _)| *p));
        Ok(())
    }

    /// A tunnel's new routes, before any is added: each free (but those in `taken_over`)
    /// and each once.
    fn check_tunnel_routes(&self, routes: &[(Prefix, TunnelRef)], taken_over: &[Prefix]) -> Result<(), (usize, StateError)> {
        let mut seen = std::collections::HashSet::new();
        for (i, (p, _)) in routes.iter().enumerate() {
            if !taken_over.contains(p) {
                self.validate_tunnel_route(p).map_err(|e| (i, e))?;
            }
            if !seen.insert(*p) {
                return Err((i, StateError::TunnelRouteExists(*p)));
            }
        }
        Ok(())
    }

    /// Add tunnel-owned routes, all or nothing.
    pub fn add_tunnel_routes(&mut self, routes: &[(Prefix, TunnelRef)]) -> Result<(), (usize, StateError)> {
        self.check_tunnel_routes(routes, &[])?;
        for (p, t) in routes {
            self.tunnel_routes.insert(*p, *t);
            self.fib_set(p, Some(t.encode()));
        }
        Ok(())
    }

    /// Remove tunnel-owned routes (those not present are ignored).
    pub fn del_tunnel_routes(&mut self, prefixes: &[Prefix]) {
        for p in prefixes {
            if self.tunnel_routes.remove(p).is_some() {
                self.fib_unset(p);
            }
        }
    }

    /// Remove every static route into `t` (the tunnel is being deleted); returns how many.
    /// Multipath routes lose their paths into `t`, and go only with their last path.
    pub fn del_routes_into(&mut self, t: TunnelRef) -> usize {
        let gone: Vec<Prefix> = self.routes.iter().filter(|(_, r)| **r == RouteTarget::Tunnel(t)).map(|(p, _)| *p).collect();
        for p in &gone {
            self.routes.remove(p);
            self.owned.remove(p);
            self.fib_unset(p);
        }
        let into = RouteTarget::Tunnel(t);
        let mut removed = gone.len();
        for (p, went) in self.narrow_multipath(|_, x| *x == into) {
            if went {
                self.fib_unset(&p);
                removed += 1;
            } else {
                let target = self.routes[&p].clone();
                let v = self.target_adj(&target);
                self.fib_set(&p, Some(v));
            }
        }
        removed
    }

    /// Take the paths `gone` selects out of every multipath route with one: the route
    /// keeps its other paths, or goes with its last. Returns the prefixes changed, each
    /// with whether its route went; their FIB values are the caller's to set. (What a
    /// removed tunnel and a removed interface both do to multipath routes.)
    pub(crate) fn narrow_multipath(&mut self, gone: impl Fn(&Self, &RouteTarget) -> bool) -> Vec<(Prefix, bool)> {
        let narrowed: Vec<(Prefix, Vec<Path>)> = self
            .routes
            .iter()
            .filter_map(|(p, r)| match r {
                RouteTarget::Multipath(paths) if paths.iter().any(|x| gone(self, &x.target)) => {
                    Some((*p, paths.iter().filter(|x| !gone(self, &x.target)).cloned().collect()))
                }
                _ => None,
            })
            .collect();
        narrowed
            .into_iter()
            .map(|(p, rest)| {
                let went = rest.is_empty();
                if went {
                    self.routes.remove(&p);
                } else {
                    self.routes.insert(p, RouteTarget::Multipath(rest));
                }
                (p, went)
            })
            .collect()
    }

    /// Mark interface `i`'s link down or up: the paths of multipath routes out of it are
    /// skipped while it is down. Returns whether anything changed (publish only then).
    pub fn set_link_down(&mut self, i: IfIndex, down: bool) -> bool {
        let bit = 1u64.checked_shl(i.0 as u32).unwrap_or(0);
        let old = self.links_down;
        if down {
            self.links_down |= bit;
        } else {
            self.links_down &= !bit;
        }
        old != self.links_down
    }

    /// Whether any route has several paths (only then does link state matter to the FIB).
    pub fn has_multipath(&self) -> bool {
        !self.mp_paths.is_empty()
    }

    /// The static routes into `t` (those `del_routes_into` would remove).
    pub fn routes_into(&self, t: TunnelRef) -> Vec<Prefix> {
        self.routes.iter().filter(|(_, r)| **r == RouteTarget::Tunnel(t)).map(|(p, _)| *p).collect()
    }

    /// Remove every tunnel-owned route into `t`; returns the prefixes removed. One pass
    /// over the routes: the router is the one place a UE prefix is kept.
    pub fn del_tunnel_routes_into(&mut self, t: TunnelRef) -> Vec<Prefix> {
        let gone: Vec<Prefix> = self.tunnel_routes.iter().filter(|(_, r)| **r == t).map(|(p, _)| *p).collect();
        self.del_tunnel_routes(&gone);
        gone
    }

    /// The tunnel-owned prefixes of the tunnels `want` selects, in one pass.
    pub fn tunnel_routes_of(&self, want: impl Fn(TunnelRef) -> bool) -> Vec<(Prefix, TunnelRef)> {
        self.tunnel_routes.iter().filter(|(_, r)| want(**r)).map(|(p, r)| (*p, *r)).collect()
    }

    pub fn tunnel_route_count(&self) -> usize {
        self.tunnel_routes.len()
    }

    /// Set the local UDP demux (tunnel features' ports and bypass endpoints).
    pub fn set_udp_demux(&mut self, mut d: UdpDemux) {
        d.seal();
        self.udp = Arc::new(d);
    }

    /// Set which interfaces have an outbound SPD (bit i: interface i; see `Tables::spd_links`).
    pub fn set_spd_links(&mut self, links: u64) {
        self.spd_links = links;
    }

    /// Set which tunnels' outer packets outbound transport-mode SAs protect, and on which
    /// links (`Tables::tunnel_esp`).
    pub fn set_tunnel_esp(&mut self, esp: Vec<crate::tables::TunnelEsp>) {
        if *self.tunnel_esp != esp {
            self.tunnel_esp = Arc::new(esp);
        }
    }

    /// [`crate::tables::Tables::tunnel_link_mtu`] for the control plane: adjacency
    /// `adj`'s link MTU as a tunnel from `local` to `remote`, UDP port `port`, can use it.
    pub fn tunnel_link_mtu(&self, adj: u32, local: IpAddr, remote: IpAddr, port: u16) -> Option<u16> {
        let mtu = self.adjacency_mtu(adj)?;
        let i = match self.adj_keys.get((adj as usize).wrapping_sub(2))? {
            AdjKey::Attached(i) | AdjKey::NextHop(i, _) => *i,
            AdjKey::Blackhole => return Some(mtu),
        };
        Some(crate::tables::esp_limited_mtu(&self.tunnel_esp, i, mtu, local, remote, port))
    }

    /// Set interface `i`'s reverse-path check; false if there is no such interface.
    pub fn set_urpf(&mut self, i: IfIndex, mode: crate::urpf::Urpf) -> bool {
        match self.interfaces.get_mut(i.get()).filter(|l| !l.removed) {
            Some(l) => {
                l.urpf = mode;
                true
            }
            None => false,
        }
    }

    /// Set which interfaces take IP parcels (bit i: interface i; see `Tables::parcel_links`).
    pub fn set_parcel_links(&mut self, links: u64) {
        self.parcel_links = links;
    }

    /// Whether TCP and UDP for the gateway's addresses go to the load balancer; true if
    /// that changed.
    pub fn set_lb_local(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.lb_local, on) != on
    }

    /// Punt these ports of our addresses to the host's stack (`None`: nothing is). The
    /// host's addresses must be on connected subnets of the punt link.
    pub fn set_punt(&mut self, spec: Option<crate::punt::PuntSpec>) -> Result<(), StateError> {
        if let Some(s) = &spec {
            let link = self.if_index(&s.interface)?;
            for hop in [crate::punt::host_hop(s, false), crate::punt::host_hop(s, true)].into_iter().flatten() {
                if self.connected_if(hop) != Some(link) {
                    return Err(StateError::NextHopNotOnInterface { hop, interface: s.interface.clone() });
                }
            }
        }
        self.punt = spec;
        Ok(())
    }

    /// Whether `a` is on a connected subnet of interface `name`.
    pub fn on_interface(&self, a: IpAddr, name: &str) -> bool {
        self.if_index(name).is_ok_and(|i| self.connected_if(a) == Some(i))
    }

    /// The tunnel application that takes UDP port `p` of our addresses, if any.
    pub fn udp_port(&self, p: u16) -> Option<crate::tables::UdpApp> {
        self.udp.port(p)
    }

    pub fn punt(&self) -> Option<&crate::punt::PuntSpec> {
        self.punt.as_ref()
    }

    /// The published punt table: each family's host next hop as an adjacency, if it is
    /// still on a connected subnet of the punt link (an interface change may have moved it).
    fn punt_table(&mut self) -> crate::punt::Punt {
        let Some(spec) = self.punt.clone() else { return crate::punt::Punt::default() };
        let link = self.if_index(&spec.interface).ok();
        let mut adj = |v6| {
            let hop = crate::punt::host_hop(&spec, v6)?;
            (link.is_some() && self.connected_if(hop) == link)
                .then(|| self.target_adj(&RouteTarget::Via { next_hop: hop, interface: Some(spec.interface.clone()) }))
        };
        let (adj4, adj6) = (adj(false), adj(true));
        crate::punt::Punt::new(&spec, adj4, adj6)
    }

    /// Whether forwarded packets pass the load balancer (for replies it must translate);
    /// true if that changed.
    pub fn set_lb_replies(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.lb_replies, on) != on
    }

    /// `ip route add`: add a route where the prefix has none. The same route again
    /// changes nothing (`Ok(false)`); a different one is refused, naming what is there
    /// (as Linux's "File exists"): a change is a delete and an add, or a batch line.
    pub fn create_route(&mut self, prefix: Prefix, target: RouteTarget) -> Result<bool, StateError> {
        if self.routes.get(&prefix) == Some(&target) && !self.owned.contains(&prefix) {
            return Ok(false);
        }
        self.check_prefix_free(&prefix, false)?;
        self.add_route(prefix, target).map(|()| true)
    }

    /// Add or replace a static route (a reload's path; not a tunnel's route).
    pub fn add_route(&mut self, prefix: Prefix, target: RouteTarget) -> Result<(), StateError> {
        self.validate_route(&prefix, &target)?;
        let v = self.target_adj(&target);
        self.routes.insert(prefix, target);
        self.fib_set(&prefix, Some(v));
        Ok(())
    }

    /// Add many routes at once, all or nothing (the config loader's path, a route file,
    /// `ip route add` of many prefixes). Into a table at least as large as the batch,
    /// route by route (each change bounded); otherwise the FIBs are compiled once from
    /// the whole route set, which is faster than as many changes.
    pub fn add_routes(&mut self, routes: impl IntoIterator<Item = (Prefix, RouteTarget)>) -> Result<(), (usize, StateError)> {
        let routes: Vec<_> = routes.into_iter().collect();
        for (i, (p, t)) in routes.iter().enumerate() {
            self.validate_route(p, t).map_err(|e| (i, e))?;
        }
        let whole = routes.len() > 1024 && routes.len() > self.route_count();
        if whole {
            // The route map built once from the sorted set: a million inserts in random
            // order were most of a bulk load's time (cache misses down the tree for each).
            for (_, t) in &routes {
                self.target_adj(t);
            }
            let mut all: Vec<(Prefix, RouteTarget)> = std::mem::take(&mut self.routes).into_iter().chain(routes).collect();
            all.sort_by(|a, b| a.0.cmp(&b.0)); // stable: of a prefix given twice, the later stays last
            let mut unique: Vec<(Prefix, RouteTarget)> = Vec::with_capacity(all.len());
            for r in all {
                match unique.last_mut() {
                    Some(last) if last.0 == r.0 => *last = r,
                    _ => unique.push(r),
                }
            }
            self.routes = unique.into_iter().collect();
            self.rebuild_fibs();
            return Ok(());
        }
        let mut changes = Vec::with_capacity(routes.len());
        for (p, t) in routes {
            let v = self.target_adj(&t);
            self.routes.insert(p, t);
            changes.push((p, Some(v)));
        }
        self.fib_set_many(changes);
        Ok(())
    }

    /// Why `p` cannot be deleted as a static route: it has none, or it is a tunnel's,
    /// an SA's or a service's (which goes with its owner).
    fn check_deletable(&self, p: &Prefix) -> Result<(), StateError> {
        match self.route_at(p) {
            None => Err(StateError::NoSuchRoute(*p)),
            Some((_, None)) => Ok(()),
            Some((owner, t)) => Err(StateError::OwnedRoute { prefix: *p, owner, remedy: remedy(p, t) }),
        }
    }

    /// Remove many routes, all or nothing: every prefix must have a static route.
    pub fn del_routes(&mut self, prefixes: &[Prefix]) -> Result<(), (usize, StateError)> {
        for (i, p) in prefixes.iter().enumerate() {
            self.check_deletable(p).map_err(|e| (i, e))?;
        }
        let mut changes = Vec::with_capacity(prefixes.len());
        for p in prefixes {
            if self.routes.remove(p).is_some() {
                changes.push((*p, self.interface_value(p)));
            }
        }
        self.fib_set_many(changes);
        Ok(())
    }

    pub fn del_route(&mut self, prefix: &Prefix) -> Result<(), StateError> {
        self.check_deletable(prefix)?;
        self.routes.remove(prefix).ok_or(StateError::NoSuchRoute(*prefix))?;
        self.fib_unset(prefix);
        Ok(())
    }

    /// Set one prefix's FIB value.
    fn fib_set(&mut self, p: &Prefix, v: Option<u32>) {
        match *p {
            Prefix::V4(a, l) => self.fib4.set(u32::from(a), l, v),
            Prefix::V6(a, l) => self.fib6.set(u128::from(a), l, v),
        }
    }

    /// Every static route.
    pub fn routes(&self) -> impl Iterator<Item = (&Prefix, &RouteTarget)> {
        self.routes.iter()
    }

    /// Many changes, each touched subtrie recompiled once.
    fn fib_set_many(&mut self, changes: Vec<(Prefix, Option<u32>)>) {
        let c4 = changes.iter().filter_map(|(p, v)| if let Prefix::V4(a, l) = p { Some((u32::from(*a), *l, *v)) } else { None });
        self.fib4.set_many(c4.collect::<Vec<_>>());
        let c6 = changes.iter().filter_map(|(p, v)| if let Prefix::V6(a, l) = p { Some((u128::from(*a), *l, *v)) } else { None });
        self.fib6.set_many(c6.collect::<Vec<_>>());
    }

    /// A route went away: what the interfaces give that prefix (their own address or
    /// connected subnet, which a static route may have overridden) comes back.
    fn fib_unset(&mut self, p: &Prefix) {
        let under = self.interface_value(p);
        self.fib_set(p, under);
    }

    /// The value the interfaces' addresses give exactly `p`, if any.
    fn interface_value(&mut self, p: &Prefix) -> Option<u32> {
        if !self.interfaces.iter().filter(|i| !i.removed).any(|i| {
            i.ip4.iter().any(|(a, _)| Prefix::covering(IpAddr::V4(*a), p.len()) == *p)
                || i.ip6.iter().any(|(a, _)| Prefix::covering(IpAddr::V6(*a), p.len()) == *p)
                || Prefix::covering(IpAddr::V6(i.ip6_link_local), p.len()) == *p
        }) {
            return None;
        }
        self.interface_entries().into_iter().filter(|(q, _, _)| q == p).map(|(_, v, _)| v).last()
    }

    /// Compile both FIBs from every entry at once (start-up, bulk loads).
    fn rebuild_fibs(&mut self) {
        // Values only: a million routes need no descriptions.
        let mut entries: Vec<(Prefix, u32, ())> = self.interface_entries().into_iter().map(|(p, v, _)| (p, v, ())).collect();
        let targets: Vec<(Prefix, RouteTarget)> = self.routes.iter().map(|(p, t)| (*p, t.clone())).collect();
        for (p, t) in targets {
            entries.push((p, self.target_adj(&t), ()));
        }
        // Plain vectors, sorted once: a million routes in two allocations the
        // allocator returns whole, where a map's million small nodes would stay
        // resident as heap fragments after the build.
        let mut r4: Vec<Route<u32>> = Vec::new();
        let mut r6: Vec<Route<u128>> = Vec::new();
        let tunnel: Vec<(Prefix, u32)> = self.tunnel_entries().collect();
        for (p, adj) in entries.iter().map(|(p, a, _)| (p, a)).chain(tunnel.iter().map(|(p, a)| (p, a))) {
            match p {
                Prefix::V4(a, l) => r4.push((u32::from(*a), *l, *adj)),
                Prefix::V6(a, l) => r6.push((u128::from(*a), *l, *adj)),
            }
        }
        drop(tunnel);
        drop(entries);
        self.fib4.rebuild(r4);
        self.fib6.rebuild(r6);
    }

    pub fn route_count(&self) -> usize {
        self.routes.len()
    }

    /// The FIB entry for exactly `prefix` (with `exact`), or the one the FIB chooses for
    /// its address — the longest prefix covering it, as VPP's `show ip fib <address>`.
    /// Tunnel-owned routes (UE addresses) are found too.
    pub fn fib_match(&mut self, prefix: &Prefix, exact: bool) -> Option<FibEntry> {
        let (a, len) = match *prefix {
            Prefix::V4(x, l) => (IpAddr::V4(x), l),
            Prefix::V6(x, l) => (IpAddr::V6(x), l),
        };
        let lens: Vec<u8> = if exact { vec![len] } else { (0..=len).rev().collect() };
        for l in lens {
            let p = Prefix::covering(a, l);
            let v = match p {
                Prefix::V4(x, l) => self.fib4.get(u32::from(x), l),
                Prefix::V6(x, l) => self.fib6.get(u128::from(x), l),
            };
            let Some(v) = v else { continue };
            if let Some(t) = self.routes.get(&p).cloned() {
                return Some(self.describe(&p, &t, v));
            }
            if let Some(t) = self.tunnel_routes.get(&p) {
                return Some(self.describe(&p, &RouteTarget::Tunnel(*t), v));
            }
            return self.interface_entries().into_iter().filter(|(q, _, _)| *q == p).map(|(_, _, e)| e).last();
        }
        None
    }

    /// The static route for exactly `p`.
    pub fn route(&self, p: &Prefix) -> Option<&RouteTarget> {
        self.routes.get(p)
    }

    /// Record a neighbour. Learned entries never replace static ones. Returns whether
    /// anything changed (so the caller publishes only then).
    pub fn set_neighbour(&mut self, if_index: IfIndex, ip: IpAddr, mac: EthernetAddress, is_static: bool) -> bool {
        // A worker's report from an interface removed since is stale.
        if self.interfaces.get(if_index.get()).is_some_and(|l| l.removed) {
            return false;
        }
        if let Some(old) = self.neighbours.get(&ip) {
            if old.is_static && !is_static {
                return false;
            }
            if old.mac == mac && old.if_index == if_index && old.is_static == is_static {
                return false;
            }
        }
        self.neighbours.insert(ip, Neighbour { if_index, mac, is_static });
        true
    }

    /// A configured neighbour; its address must be on a connected subnet of `ifname`.
    pub fn add_static_neighbour(&mut self, ifname: &str, ip: IpAddr, mac: EthernetAddress) -> Result<(), StateError> {
        let i = self.if_index(ifname)?;
        if self.connected_if(ip) != Some(i) {
            return Err(StateError::NeighbourNotConnected(ip, ifname.to_string()));
        }
        self.set_neighbour(i, ip, mac, true);
        Ok(())
    }

    /// Remove a configured neighbour (learned ones are left to the workers); whether
    /// there was one.
    pub fn del_static_neighbour(&mut self, ip: IpAddr) -> bool {
        if self.neighbours.get(&ip).is_some_and(|n| n.is_static) {
            self.neighbours.remove(&ip);
            return true;
        }
        false
    }

    /// The neighbour entry of one address.
    pub fn neighbour(&self, ip: IpAddr) -> Option<&Neighbour> {
        self.neighbours.get(&ip)
    }

    pub fn neighbours(&self) -> impl Iterator<Item = (&IpAddr, &Neighbour)> {
        self.neighbours.iter()
    }

    fn adj_id(&mut self, k: AdjKey) -> u32 {
        if let Some(&i) = self.adj_ids.get(&k) {
            return i;
        }
        // Adjacency ids share the FIB value space with tunnel references.
        let id = (2 + self.adj_keys.len() as u32).min(MAX_INDEX);
        self.adj_keys.push(k);
        self.adj_ids.insert(k, id);
        id
    }

    fn target_adj(&mut self, t: &RouteTarget) -> u32 {
        let key = match t {
            RouteTarget::Tunnel(r) => return r.encode(),
            RouteTarget::Multipath(paths) => {
                let key: Vec<(u32, u32)> = paths.iter().map(|p| (self.target_adj(&p.target), p.weight)).collect();
                return multipath::encode(self.multipath_id(key));
            }
            RouteTarget::Blackhole => AdjKey::Blackhole,
            RouteTarget::Interface(n) => AdjKey::Attached(self.if_index(n).unwrap_or(IfIndex(0))),
            RouteTarget::Via { next_hop, .. } => AdjKey::NextHop(self.connected_if(*next_hop).unwrap_or(IfIndex(0)), *next_hop),
        };
        self.adj_id(key)
    }

    /// The ECMP group of these paths (value, weight), made on first use.
    fn multipath_id(&mut self, key: Vec<(u32, u32)>) -> u32 {
        if let Some(&i) = self.mp_ids.get(&key) {
            return i;
        }
        let id = (self.mp_paths.len() as u32).min(MAX_INDEX);
        self.mp_paths.push(key.clone());
        self.mp_ids.insert(key, id);
        id
    }

    /// Whether a path's value can send now: a tunnel, or an adjacency with a next hop
    /// (resolved, or resolved per packet on an attached subnet) on a link that is up.
    fn path_usable(&self, adjacencies: &[Adjacency], v: u32) -> bool {
        if TunnelRef::decode(v).is_some() {
            return true;
        }
        match adjacencies.get(v as usize) {
            Some(Adjacency::Rewrite { tx_if, .. } | Adjacency::Glean { tx_if, .. }) => {
                self.links_down.checked_shr(tx_if.0 as u32).unwrap_or(0) & 1 == 0
            }
            _ => false,
        }
    }

    /// Every group's buckets for the adjacencies about to be published; a group whose
    /// paths' usability did not change keeps the table it had.
    fn multipaths(&mut self, adjacencies: &[Adjacency]) -> Vec<Arc<Multipath>> {
        for (g, paths) in self.mp_paths.iter().enumerate() {
            let usable: Vec<bool> = paths.iter().map(|&(v, _)| self.path_usable(adjacencies, v)).collect();
            let links = paths
                .iter()
                .filter(|&&(v, _)| TunnelRef::decode(v).is_none())
                .filter_map(|&(v, _)| adjacencies.get(v as usize)?.tx_if())
                .fold(0u64, |m, i| m | 1u64.checked_shl(i.0 as u32).unwrap_or(0));
            if self.mp_built.get(g).is_some_and(|(u, m)| *u == usable && m.links == links) {
                continue;
            }
            let spec: Vec<(u32, u32, bool)> = paths.iter().zip(&usable).map(|(&(v, w), &u)| (v, w, u)).collect();
            let mut m = Multipath::new(&spec);
            m.links = links;
            let built = (usable, Arc::new(m));
            match self.mp_built.get_mut(g) {
                Some(b) => *b = built,
                None => self.mp_built.push(built),
            }
        }
        self.mp_built.iter().map(|(_, m)| m.clone()).collect()
    }

    /// Every FIB entry in lookup terms: (prefix, adjacency id, description).
    fn entries(&mut self) -> Vec<(Prefix, u32, FibEntry)> {
        let mut out = self.interface_entries();
        let routes: Vec<(Prefix, RouteTarget)> = self.routes.iter().map(|(p, t)| (*p, t.clone())).collect();
        for (p, t) in routes {
            let adj = self.target_adj(&t);
            out.push((p, adj, self.describe(&p, &t, adj)));
        }
        out
    }

    /// One static route as `show ip fib` shows it.
    fn describe(&self, p: &Prefix, t: &RouteTarget, adj: u32) -> FibEntry {
        if let RouteTarget::Multipath(paths) = t {
            let adjacencies = self.adjacencies();
            let values = multipath::decode(adj).and_then(|g| self.mp_paths.get(g as usize));
            let usable: Vec<bool> =
                (0..paths.len()).map(|i| values.and_then(|v| v.get(i)).is_some_and(|&(v, _)| self.path_usable(&adjacencies, v))).collect();
            // When no path can send, none is skipped (`Multipath::new` keeps them all).
            let any = usable.contains(&true);
            let paths: Vec<FibPath> = paths
                .iter()
                .zip(&usable)
                .map(|(path, &u)| {
                    let e = self.describe(p, &path.target, 0);
                    FibPath { next_hop: e.next_hop, interface: e.interface, weight: path.weight, resolved: e.resolved, skipped: any && !u }
                })
                .collect();
            let resolved = any;
            return FibEntry { prefix: p.to_string(), kind: "multipath", next_hop: None, interface: None, adjacency: adj, resolved, paths };
        }
        let (kind, nh, ifn) = match t {
            RouteTarget::Blackhole => ("blackhole", None, None),
            RouteTarget::Tunnel(r) => ("tunnel", None, Some(r.if_name())),
            RouteTarget::Interface(n) => ("attached", None, Some(n.clone())),
            RouteTarget::Multipath(_) => ("multipath", None, None),
            RouteTarget::Via { next_hop, .. } => {
                let ifn = self.connected_if(*next_hop).map(|i| self.interfaces[i.get()].name.clone());
                ("via", Some(next_hop.to_string()), ifn)
            }
        };
        let resolved = match t {
            RouteTarget::Via { next_hop, .. } => self.neighbours.contains_key(next_hop),
            _ => true,
        };
        FibEntry { prefix: p.to_string(), kind, next_hop: nh, interface: ifn, adjacency: adj, resolved, paths: Vec::new() }
    }

    /// The entries the interfaces' addresses make: each address local, each subnet
    /// attached.
    fn interface_entries(&mut self) -> Vec<(Prefix, u32, FibEntry)> {
        let live: Vec<usize> = (0..self.interfaces.len()).filter(|&i| !self.interfaces[i].removed).collect();
        live.into_iter().flat_map(|i| self.entries_of_interface(IfIndex(i as u16))).collect()
    }

    /// The entries one interface's addresses make.
    fn entries_of_interface(&mut self, i: IfIndex) -> Vec<(Prefix, u32, FibEntry)> {
        let mut out = Vec::new();
        let ifl = self.interfaces[i.get()].clone();
        let glean = self.adj_id(AdjKey::Attached(i));
        let addrs: Vec<(IpAddr, u8)> = ifl
            .ip4
            .iter()
            .map(|(a, l)| (IpAddr::V4(*a), *l))
            .chain(ifl.ip6.iter().map(|(a, l)| (IpAddr::V6(*a), *l)))
            .chain([(IpAddr::V6(ifl.ip6_link_local), 64)])
            .collect();
        for (a, l) in addrs {
            let host = Prefix::host(a);
            out.push((
                host,
                ADJ_LOCAL,
                FibEntry {
                    prefix: host.to_string(),
                    kind: "local",
                    next_hop: None,
                    interface: Some(ifl.name.clone()),
                    adjacency: ADJ_LOCAL,
                    resolved: true,
                    paths: Vec::new(),
                },
            ));
            let is_ll = matches!(a, IpAddr::V6(v) if v == ifl.ip6_link_local);
            if !is_ll {
                let net = Prefix::covering(a, l);
                out.push((
                    net,
                    glean,
                    FibEntry {
                        prefix: net.to_string(),
                        kind: "attached",
                        next_hop: None,
                        interface: Some(ifl.name.clone()),
                        adjacency: glean,
                        resolved: true,
                        paths: Vec::new(),
                    },
                ));
            }
        }
        out
    }

    /// The value every tunnel-owned route compiles to, without building descriptions
    /// (there may be a million of them).
    fn tunnel_entries(&self) -> impl Iterator<Item = (Prefix, u32)> + '_ {
        self.tunnel_routes.iter().map(|(p, t)| (*p, t.encode()))
    }

    /// The routing table as `show ip fib` prints it (tunnel-owned routes are listed by
    /// their feature's `show`, and counted here only through `tunnel_route_count`).
    pub fn fib_entries(&mut self) -> Vec<FibEntry> {
        self.entries().into_iter().map(|(_, _, e)| e).collect()
    }

    /// `show ip fib` at any size: the first `limit` entries — the interfaces' own, then
    /// static routes, then the routes tunnels own (UE addresses), each in prefix order —
    /// and how many there are in all. Only what is shown is described, so a listing of
    /// a million routes costs what its first page costs.
    pub fn fib_listing(&mut self, limit: usize) -> (Vec<FibEntry>, usize) {
        let mut out: Vec<FibEntry> = self.interface_entries().into_iter().map(|(_, _, e)| e).take(limit).collect();
        let ifs = self.interface_entries().len();
        let total = ifs + self.routes.len() + self.tunnel_routes.len();
        let routes: Vec<(Prefix, RouteTarget)> =
            self.routes.iter().take(limit.saturating_sub(out.len())).map(|(p, t)| (*p, t.clone())).collect();
        for (p, t) in routes {
            let adj = self.target_adj(&t);
            out.push(self.describe(&p, &t, adj));
        }
        let tunnel: Vec<(Prefix, TunnelRef)> =
            self.tunnel_routes.iter().take(limit.saturating_sub(out.len())).map(|(p, t)| (*p, *t)).collect();
        for (p, t) in tunnel {
            out.push(self.describe(&p, &RouteTarget::Tunnel(t), t.encode()));
        }
        (out, total)
    }

    /// The adjacency a tunnel endpoint's packets leave by: the FIB's answer, except that
    /// an attached subnet (resolved per packet from the neighbour table) becomes the
    /// neighbour's own adjacency — a precomputed rewrite once it is resolved, a
    /// solicitation until then. This is what lets encap skip the second lookup.
    pub fn resolve_endpoint(&mut self, a: IpAddr) -> u32 {
        let v = self.lookup(a);
        if multipath::decode(v).is_some() {
            // Several paths: each packet's own, chosen by `ipN-lookup` from its flow hash
            // (a tunnel's entropy source port included), so its flows spread.
            return ADJ_MISS;
        }
        match self.adj_keys.get((v as usize).wrapping_sub(2)) {
            Some(&AdjKey::Attached(i)) => self.adj_id(AdjKey::NextHop(i, a)),
            _ => v,
        }
    }

    /// [`RouterState::resolve_endpoint`] for the outer packets the node originates
    /// toward `a`: `ADJ_MISS` (the lookup decides) when `a` is routed into a tunnel.
    /// The one place every encapsulation (GTP-U, UDP tunnels, ESP, the load balancer's
    /// direct server return) asks where its outer packets leave.
    pub fn resolve_outer(&mut self, a: IpAddr) -> u32 {
        let v = self.resolve_endpoint(a);
        if TunnelRef::decode(v).is_some() {
            ADJ_MISS
        } else {
            v
        }
    }

    /// The MTU of the link adjacency `adj` sends on (none for a miss, local delivery,
    /// a blackhole or a tunnel).
    pub fn adjacency_mtu(&self, adj: u32) -> Option<u16> {
        match self.adj_keys.get((adj as usize).wrapping_sub(2))? {
            AdjKey::Attached(i) | AdjKey::NextHop(i, _) => self.interfaces.get(i.get()).map(|l| l.mtu),
            AdjKey::Blackhole => None,
        }
    }

    /// Where `a` goes now, in FIB terms: an adjacency index or an encoded tunnel.
    pub fn lookup(&mut self, a: IpAddr) -> u32 {
        match a {
            IpAddr::V4(v) => self.fib4.fib().lookup(u32::from(v)),
            IpAddr::V6(v) => self.fib6.fib().lookup(u128::from(v)),
        }
    }

    fn adjacencies(&self) -> Vec<Adjacency> {
        let mut v = vec![Adjacency::Miss, Adjacency::Local];
        for k in &self.adj_keys {
            v.push(match *k {
                AdjKey::Blackhole => Adjacency::Blackhole,
                AdjKey::Attached(i) => Adjacency::Glean { tx_if: i, mtu: self.interfaces[i.get()].mtu },
                AdjKey::NextHop(i, via) => {
                    let ifl = &self.interfaces[i.get()];
                    match self.neighbours.get(&via) {
                        Some(n) => {
                            let et = if via.is_ipv4() { EtherType::Ipv4 } else { EtherType::Ipv6 };
                            Adjacency::Rewrite { tx_if: i, rewrite: l2_rewrite(ifl, n.mac, et), mtu: ifl.mtu }
                        }
                        None => Adjacency::Incomplete { tx_if: i, mtu: ifl.mtu, via },
                    }
                }
            });
        }
        v
    }

    /// A new `Tables` to publish: the FIBs as clones of the current ones (sharing every
    /// piece with the version the workers hold but the pieces changed since), the
    /// adjacencies and neighbours rebuilt.
    pub fn build(&mut self) -> Tables {
        self.generation += 1;
        let mut n4 = HashMap::new();
        let mut n6 = HashMap::new();
        for (ip, n) in &self.neighbours {
            match ip {
                IpAddr::V4(a) => {
                    n4.insert(*a, *n);
                }
                IpAddr::V6(a) => {
                    n6.insert(*a, *n);
                }
            }
        }
        let punt = self.punt_table();
        let adjacencies = self.adjacencies();
        let multipaths = self.multipaths(&adjacencies);
        Tables {
            generation: self.generation,
            interfaces: Arc::new(self.interfaces.clone()),
            fib4: Arc::new(self.fib4.fib().clone()),
            fib6: Arc::new(self.fib6.fib().clone()),
            adjacencies: Arc::new(adjacencies),
            multipaths: Arc::new(multipaths),
            neighbours4: Arc::new(n4),
            neighbours6: Arc::new(n6),
            udp: self.udp.clone(),
            parcel_links: self.parcel_links,
            spd_links: self.spd_links,
            tunnel_esp: self.tunnel_esp.clone(),
            tunnel_mtu_floor: crate::tables::tunnel_mtu_floor(&self.tunnel_esp, &self.interfaces.iter().map(|l| l.mtu).collect::<Vec<_>>()),
            lb_local: self.lb_local,
            lb_replies: self.lb_replies,
            punt: Arc::new(punt),
        }
    }
}

#[cfg(test)]
mod tests;
