//! The router's control-plane state and the one typed API that changes it. The config
//! loader, the CLI and the JSON API all call these functions; each change is validated
//! whole before anything is applied, and `build` turns the state into a new immutable
//! [`Tables`] to publish.

use crate::fib::Fib;
use crate::lpm::{LpmKey, Route};
use crate::prefix::{IfAddr, Prefix};
use crate::tables::{l2_rewrite, Adjacency, IfL3, Neighbour, Tables, TunnelRef, UdpDemux, ADJ_LOCAL, MAX_INDEX};
use engine::IfIndex;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use wire::{EtherType, EthernetAddress};

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
    udp: Arc<UdpDemux>,
    parcel_links: u64,
    spd_links: u64,
    lb_local: bool,
    lb_replies: bool,
    neighbours: HashMap<IpAddr, Neighbour>,
    adj_ids: HashMap<AdjKey, u32>,
    adj_keys: Vec<AdjKey>,
    generation: u64,
    fib4: Option<Arc<Fib<u32>>>,
    fib6: Option<Arc<Fib<u128>>>,
}

impl RouterState {
    pub fn new(specs: Vec<InterfaceSpec>) -> Result<RouterState, StateError> {
        let mut interfaces = Vec::new();
        for s in specs {
            if interfaces.iter().any(|i: &IfL3| i.name == s.name) {
                return Err(StateError::DuplicateInterface(s.name));
            }
            let mut ip4 = Vec::new();
            let mut ip6 = Vec::new();
            for a in &s.addresses {
                match a.addr {
                    IpAddr::V4(v) => ip4.push((v, a.len)),
                    IpAddr::V6(v) => ip6.push((v, a.len)),
                }
            }
            interfaces.push(IfL3 {
                ip6_link_local: wire::ipv6::link_local_from_mac(&s.mac),
                name: s.name,
                mac: s.mac,
                mtu: s.mtu,
                ip4,
                ip6,
            });
        }
        Ok(RouterState {
            interfaces,
            routes: BTreeMap::new(),
            tunnel_routes: BTreeMap::new(),
            udp: Arc::new(UdpDemux::default()),
            parcel_links: 0,
            spd_links: 0,
            lb_local: false,
            lb_replies: false,
            neighbours: HashMap::new(),
            adj_ids: HashMap::new(),
            adj_keys: Vec::new(),
            generation: 0,
            fib4: None,
            fib6: None,
        })
    }

    pub fn interfaces(&self) -> &[IfL3] {
        &self.interfaces
    }

    pub fn if_index(&self, name: &str) -> Result<IfIndex, StateError> {
        self.interfaces
            .iter()
            .position(|i| i.name == name)
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

    /// Check a route without applying it.
    pub fn validate_route(&self, prefix: &Prefix, target: &RouteTarget) -> Result<(), StateError> {
        if self.is_connected_prefix(prefix) {
            return Err(StateError::ConnectedPrefix(*prefix));
        }
        if self.tunnel_routes.contains_key(prefix) {
            return Err(StateError::TunnelRouteExists(*prefix));
        }
        match target {
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

    /// Check a route a tunnel feature owns (a UE prefix) without applying it.
    pub fn validate_tunnel_route(&self, prefix: &Prefix) -> Result<(), StateError> {
        if self.is_connected_prefix(prefix) {
            return Err(StateError::ConnectedPrefix(*prefix));
        }
        if self.routes.contains_key(prefix) {
            return Err(StateError::StaticRouteExists(*prefix));
        }
        if self.tunnel_routes.contains_key(prefix) {
            return Err(StateError::TunnelRouteExists(*prefix));
        }
        Ok(())
    }

    /// Add tunnel-owned routes, all or nothing.
    pub fn add_tunnel_routes(&mut self, routes: &[(Prefix, TunnelRef)]) -> Result<(), (usize, StateError)> {
        let mut seen = std::collections::HashSet::new();
        for (i, (p, _)) in routes.iter().enumerate() {
            self.validate_tunnel_route(p).map_err(|e| (i, e))?;
            if !seen.insert(*p) {
                return Err((i, StateError::TunnelRouteExists(*p)));
            }
        }
        for (p, t) in routes {
            self.tunnel_routes.insert(*p, *t);
            self.invalidate(p);
        }
        Ok(())
    }

    /// Remove tunnel-owned routes (those not present are ignored).
    pub fn del_tunnel_routes(&mut self, prefixes: &[Prefix]) {
        for p in prefixes {
            if self.tunnel_routes.remove(p).is_some() {
                self.invalidate(p);
            }
        }
    }

    /// Remove every static route into `t` (the tunnel is being deleted); returns how many.
    pub fn del_routes_into(&mut self, t: TunnelRef) -> usize {
        let gone: Vec<Prefix> = self.routes.iter().filter(|(_, r)| **r == RouteTarget::Tunnel(t)).map(|(p, _)| *p).collect();
        for p in &gone {
            self.routes.remove(p);
            self.invalidate(p);
        }
        gone.len()
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

    /// Set which interfaces take IP parcels (bit i: interface i; see `Tables::parcel_links`).
    pub fn set_parcel_links(&mut self, links: u64) {
        self.parcel_links = links;
    }

    /// Whether TCP and UDP for the gateway's addresses go to the load balancer.
    pub fn set_lb_local(&mut self, on: bool) {
        self.lb_local = on;
    }

    /// Whether forwarded packets pass the load balancer (for replies it must translate).
    pub fn set_lb_replies(&mut self, on: bool) {
        self.lb_replies = on;
    }

    /// Add or replace a route.
    pub fn add_route(&mut self, prefix: Prefix, target: RouteTarget) -> Result<(), StateError> {
        self.validate_route(&prefix, &target)?;
        self.routes.insert(prefix, target);
        self.invalidate(&prefix);
        Ok(())
    }

    /// Add many routes at once, all or nothing (the config loader's path).
    pub fn add_routes(&mut self, routes: impl IntoIterator<Item = (Prefix, RouteTarget)>) -> Result<(), (usize, StateError)> {
        let routes: Vec<_> = routes.into_iter().collect();
        for (i, (p, t)) in routes.iter().enumerate() {
            self.validate_route(p, t).map_err(|e| (i, e))?;
        }
        for (p, t) in routes {
            self.routes.insert(p, t);
        }
        self.fib4 = None;
        self.fib6 = None;
        Ok(())
    }

    pub fn del_route(&mut self, prefix: &Prefix) -> Result<(), StateError> {
        self.routes.remove(prefix).ok_or(StateError::NoSuchRoute(*prefix))?;
        self.invalidate(prefix);
        Ok(())
    }

    fn invalidate(&mut self, p: &Prefix) {
        match p {
            Prefix::V4(..) => self.fib4 = None,
            Prefix::V6(..) => self.fib6 = None,
        }
    }

    /// The static route of exactly this prefix.
    pub fn route(&self, prefix: &Prefix) -> Option<&RouteTarget> {
        self.routes.get(prefix)
    }

    /// Every static route.
    pub fn routes(&self) -> impl Iterator<Item = (&Prefix, &RouteTarget)> {
        self.routes.iter()
    }

    pub fn route_count(&self) -> usize {
        self.routes.len()
    }

    /// Record a neighbour. Learned entries never replace static ones. Returns whether
    /// anything changed (so the caller publishes only then).
    pub fn set_neighbour(&mut self, if_index: IfIndex, ip: IpAddr, mac: EthernetAddress, is_static: bool) -> bool {
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
            RouteTarget::Blackhole => AdjKey::Blackhole,
            RouteTarget::Interface(n) => AdjKey::Attached(self.if_index(n).unwrap_or(IfIndex(0))),
            RouteTarget::Via { next_hop, .. } => AdjKey::NextHop(self.connected_if(*next_hop).unwrap_or(IfIndex(0)), *next_hop),
        };
        self.adj_id(key)
    }

    /// Every FIB entry in lookup terms: (prefix, adjacency id, description).
    fn entries(&mut self) -> Vec<(Prefix, u32, FibEntry)> {
        let mut out = Vec::new();
        let ifs = self.interfaces.clone();
        for (i, ifl) in ifs.iter().enumerate() {
            let glean = self.adj_id(AdjKey::Attached(IfIndex(i as u16)));
            let addrs: Vec<(IpAddr, u8)> = ifl
                .ip4
                .iter()
                .map(|(a, l)| (IpAddr::V4(*a), *l))
                .chain(ifl.ip6.iter().map(|(a, l)| (IpAddr::V6(*a), *l)))
                .chain([(IpAddr::V6(ifl.ip6_link_local), 64)])
                .collect();
            for (a, l) in addrs {
                let host = Prefix::covering(a, if a.is_ipv4() { 32 } else { 128 });
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
                        },
                    ));
                }
            }
        }
        let routes: Vec<(Prefix, RouteTarget)> = self.routes.iter().map(|(p, t)| (*p, t.clone())).collect();
        for (p, t) in routes {
            let adj = self.target_adj(&t);
            let (kind, nh, ifn) = match &t {
                RouteTarget::Blackhole => ("blackhole", None, None),
                RouteTarget::Tunnel(r) => ("tunnel", None, Some(r.if_name())),
                RouteTarget::Interface(n) => ("attached", None, Some(n.clone())),
                RouteTarget::Via { next_hop, .. } => {
                    let ifn = self.connected_if(*next_hop).map(|i| self.interfaces[i.get()].name.clone());
                    ("via", Some(next_hop.to_string()), ifn)
                }
            };
            let resolved = match &t {
                RouteTarget::Via { next_hop, .. } => self.neighbours.contains_key(next_hop),
                _ => true,
            };
            out.push((p, adj, FibEntry { prefix: p.to_string(), kind, next_hop: nh, interface: ifn, adjacency: adj, resolved }));
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

    /// The adjacency a tunnel endpoint's packets leave by: the FIB's answer, except that
    /// an attached subnet (resolved per packet from the neighbour table) becomes the
    /// neighbour's own adjacency — a precomputed rewrite once it is resolved, a
    /// solicitation until then. This is what lets encap skip the second lookup.
    pub fn resolve_endpoint(&mut self, a: IpAddr) -> u32 {
        let v = self.lookup(a);
        match self.adj_keys.get((v as usize).wrapping_sub(2)) {
            Some(&AdjKey::Attached(i)) => self.adj_id(AdjKey::NextHop(i, a)),
            _ => v,
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

    /// Where `a` goes now, in FIB terms: an adjacency index or an encoded tunnel. Builds
    /// the tables first if a route changed.
    pub fn lookup(&mut self, a: IpAddr) -> u32 {
        if self.fib4.is_none() || self.fib6.is_none() {
            self.build();
        }
        match a {
            IpAddr::V4(v) => self.fib4.as_ref().map_or(0, |f| f.lookup(u32::from(v))),
            IpAddr::V6(v) => self.fib6.as_ref().map_or(0, |f| f.lookup(u128::from(v))),
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

    /// Compile everything that changed into a new `Tables` (FIBs are recompiled only
    /// after route changes; neighbour changes only rebuild the adjacencies).
    pub fn build(&mut self) -> Tables {
        if self.fib4.is_none() || self.fib6.is_none() {
            let entries = self.entries();
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
            if self.fib4.is_none() {
                self.fib4 = Some(Arc::new(compile(r4)));
            }
            if self.fib6.is_none() {
                self.fib6 = Some(Arc::new(compile(r6)));
            }
        }
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
        Tables {
            generation: self.generation,
            interfaces: Arc::new(self.interfaces.clone()),
            fib4: self.fib4.clone().expect("compiled above"),
            fib6: self.fib6.clone().expect("compiled above"),
            adjacencies: Arc::new(self.adjacencies()),
            neighbours4: Arc::new(n4),
            neighbours6: Arc::new(n6),
            udp: self.udp.clone(),
            parcel_links: self.parcel_links,
            spd_links: self.spd_links,
            lb_local: self.lb_local,
            lb_replies: self.lb_replies,
        }
    }
}

/// Compile routes into a FIB; for a prefix listed twice the later entry wins.
fn compile<K: LpmKey + Default>(mut v: Vec<Route<K>>) -> Fib<K> {
    v.sort_by_key(|r| (r.0, r.1)); // stable: duplicates keep their order
    let mut out: Vec<Route<K>> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if (last.0, last.1) == (r.0, r.1) => *last = r,
            _ => out.push(r),
        }
    }
    Fib::build(&out)
}
