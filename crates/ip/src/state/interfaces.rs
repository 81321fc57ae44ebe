//! Interfaces added and removed while the gateway runs. An interface's index names it
//! everywhere (ports, counters, adjacencies, neighbours), so a removed interface leaves
//! its slot behind, empty, for the next added one; what pointed through it (static
//! routes, neighbours) goes with it and is reported.

use super::{if_l3, RouterState, StateError};
use crate::prefix::Prefix;
use crate::tables::IfL3;
use crate::InterfaceSpec;
use crate::RouteTarget;
use engine::IfIndex;
use std::net::{IpAddr, Ipv6Addr};

/// The most interface slots (live and removed) a router keeps.
pub const MAX_INTERFACES: usize = 4096;

/// What removing an interface took with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedInterface {
    pub if_index: IfIndex,
    /// Static routes through it: attached to it, or via a next hop on its subnets.
    pub routes: Vec<(Prefix, RouteTarget)>,
    /// Neighbours on it, learned and static.
    pub neighbours: Vec<IpAddr>,
    /// Multipath routes that lost their paths through it (and kept others).
    pub narrowed: Vec<Prefix>,
}

impl RouterState {
    /// Add an interface: its addresses must be new, its subnets must overlap no other
    /// interface's and no route may already hold them. It takes the lowest free index.
    pub fn add_interface(&mut self, spec: InterfaceSpec) -> Result<IfIndex, StateError> {
        if self.if_index(&spec.name).is_ok() {
            return Err(StateError::DuplicateInterface(spec.name));
        }
        for a in &spec.addresses {
            for l in self.interfaces.iter().filter(|l| !l.removed) {
                let theirs = l.ip4.iter().map(|(x, n)| (IpAddr::V4(*x), *n)).chain(l.ip6.iter().map(|(x, n)| (IpAddr::V6(*x), *n)));
                for (x, n) in theirs {
                    if x == a.addr {
                        return Err(StateError::AddressInUse { addr: a.addr, interface: l.name.clone() });
                    }
                    let (other, subnet) = (Prefix::covering(x, n), a.subnet());
                    if other.overlaps(&subnet) {
                        return Err(StateError::SubnetOverlaps { subnet, other, interface: l.name.clone() });
                    }
                }
            }
            let p = a.subnet();
            if self.routes.contains_key(&p) {
                return Err(StateError::StaticRouteExists(p));
            }
            if self.tunnel_routes.contains_key(&p) {
                return Err(StateError::TunnelRouteExists(p));
            }
            // A host route, a UE route or a service address on it would take its packets.
            let host = Prefix::host(a.addr);
            if let Some((what, owner)) = self.route_at(&host) {
                let by = if owner.is_some() { format!("{host} is {what}") } else { format!("the static route {host} {what}") };
                return Err(StateError::AddressRouted { addr: a.addr, by });
            }
        }
        let slot = self.interfaces.iter().position(|l| l.removed).unwrap_or(self.interfaces.len());
        if slot >= MAX_INTERFACES {
            return Err(StateError::TooManyInterfaces(MAX_INTERFACES));
        }
        let l3 = if_l3(spec);
        match self.interfaces.get_mut(slot) {
            Some(s) => *s = l3,
            None => self.interfaces.push(l3),
        }
        let i = IfIndex(slot as u16);
        let changes: Vec<(Prefix, Option<u32>)> = self.entries_of_interface(i).into_iter().map(|(p, v, _)| (p, Some(v))).collect();
        self.fib_set_many(changes);
        Ok(i)
    }

    /// Remove an interface with the static routes through it and its neighbours.
    pub fn remove_interface(&mut self, name: &str) -> Result<RemovedInterface, StateError> {
        let i = self.if_index(name)?;
        let own: Vec<Prefix> = self.entries_of_interface(i).into_iter().map(|(p, _, _)| p).collect();
        let through: Vec<(Prefix, RouteTarget)> =
            self.routes.iter().filter(|(_, t)| self.route_leaves_by(t, i)).map(|(p, t)| (*p, t.clone())).collect();
        for (p, _) in &through {
            self.routes.remove(p);
        }
        // Multipath routes keep their other paths (and went with their last one, above).
        let narrowed: Vec<Prefix> = self.narrow_multipath(|s, t| s.route_leaves_by(t, i)).into_iter().map(|(p, _)| p).collect();
        self.set_link_down(i, false);
        let neighbours: Vec<IpAddr> = self.neighbours.iter().filter(|(_, n)| n.if_index == i).map(|(a, _)| *a).collect();
        for a in &neighbours {
            self.neighbours.remove(a);
        }
        let mac = self.interfaces[i.get()].mac;
        self.interfaces[i.get()] = IfL3 {
            name: String::new(),
            mac,
            mtu: 0,
            ip4: Vec::new(),
            ip6: Vec::new(),
            ip6_link_local: Ipv6Addr::UNSPECIFIED,
            removed: true,
            urpf: crate::urpf::Urpf::Off,
        };
        // Each prefix it gave or routed now takes what is left: a static route on one
        // of its host addresses, another interface's entry, or nothing.
        let mut changes = Vec::new();
        for p in own.iter().chain(through.iter().map(|(p, _)| p)).chain(narrowed.iter()) {
            let v = match self.routes.get(p).cloned() {
                Some(t) => Some(self.target_adj(&t)),
                None => self.interface_value(p),
            };
            changes.push((*p, v));
        }
        self.fib_set_many(changes);
        Ok(RemovedInterface { if_index: i, routes: through, neighbours, narrowed })
    }

    /// Whether packets routed by `t` leave by interface `i`.
    fn route_leaves_by(&self, t: &RouteTarget, i: IfIndex) -> bool {
        let name = &self.interfaces[i.get()].name;
        match t {
            RouteTarget::Interface(n) | RouteTarget::Via { interface: Some(n), .. } => n == name,
            RouteTarget::Via { next_hop, interface: None } => self.connected_if(*next_hop) == Some(i),
            RouteTarget::Blackhole | RouteTarget::Tunnel(_) => false,
            // Through it when every path is (a route with other paths only narrows).
            RouteTarget::Multipath(paths) => paths.iter().all(|x| self.route_leaves_by(&x.target, i)),
        }
    }

    /// A removed slot's adjacency keys stay (their ids are in use until every user is
    /// re-resolved); this names what they send by, for tests.
    #[cfg(test)]
    fn adjacency_interface(&self, adj: u32) -> Option<IfIndex> {
        use super::AdjKey;
        match self.adj_keys.get((adj as usize).wrapping_sub(2))? {
            AdjKey::Attached(i) | AdjKey::NextHop(i, _) => Some(*i),
            AdjKey::Blackhole => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::IfAddr;
    use wire::EthernetAddress;

    fn spec(name: &str, mac: u8, addrs: &[&str]) -> InterfaceSpec {
        InterfaceSpec {
            name: name.into(),
            mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
            mtu: 1500,
            addresses: addrs.iter().map(|a| a.parse::<IfAddr>().unwrap()).collect(),
        }
    }

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_added_interface_routes_and_a_removed_one_takes_its_routes_along() {
        let mut r = RouterState::new(vec![spec("eth0", 1, &["198.18.0.1/24"])]).unwrap();
        let before = r.lookup(ip("198.18.5.7"));
        let i = r.add_interface(spec("eth1", 2, &["198.18.5.1/24", "2001:db8:5::1/64"])).unwrap();
        assert_eq!(i, IfIndex(1));
        assert_eq!(r.if_index("eth1"), Ok(IfIndex(1)));
        // Its addresses are local, its subnets attached to it.
        assert_eq!(r.lookup(ip("198.18.5.1")), crate::tables::ADJ_LOCAL);
        let glean = r.lookup(ip("198.18.5.7"));
        assert_ne!(glean, before);
        assert_eq!(r.adjacency_interface(glean), Some(i));
        let v6 = r.lookup(ip("2001:db8:5::9"));
        assert_eq!(r.adjacency_interface(v6), Some(i));
        // Routes through it, and one that is not.
        r.add_route(p("198.19.0.0/16"), RouteTarget::Via { next_hop: ip("198.18.5.2"), interface: None }).unwrap();
        r.add_route(p("198.19.1.0/24"), RouteTarget::Interface("eth1".into())).unwrap();
        r.add_route(p("198.19.2.0/24"), RouteTarget::Via { next_hop: ip("198.18.0.2"), interface: None }).unwrap();
        let via = |a: &str| crate::state::Path { target: RouteTarget::Via { next_hop: ip(a), interface: None }, weight: 1 };
        r.add_route(p("198.19.3.0/24"), RouteTarget::Multipath(vec![via("198.18.5.2"), via("198.18.0.2")])).unwrap();
        r.set_neighbour(i, ip("198.18.5.2"), EthernetAddress([2, 0, 0, 0, 9, 9]), false);
        r.set_neighbour(IfIndex(0), ip("198.18.0.2"), EthernetAddress([2, 0, 0, 0, 9, 8]), true);

        let gone = r.remove_interface("eth1").unwrap();
        assert_eq!(gone.if_index, i);
        let mut routes: Vec<Prefix> = gone.routes.iter().map(|(p, _)| *p).collect();
        routes.sort();
        assert_eq!(routes, [p("198.19.0.0/16"), p("198.19.1.0/24")]);
        assert_eq!(gone.neighbours, [ip("198.18.5.2")]);
        assert!(r.route(&p("198.19.2.0/24")).is_some(), "a route by another interface stays");
        assert_eq!(gone.narrowed, [p("198.19.3.0/24")]);
        assert_eq!(r.route(&p("198.19.3.0/24")), Some(&RouteTarget::Multipath(vec![via("198.18.0.2")])), "the other path stays");
        assert!(r.neighbour(ip("198.18.0.2")).is_some());
        assert_eq!(r.if_index("eth1"), Err(StateError::UnknownInterface("eth1".into())));
        for a in ["198.18.5.1", "198.18.5.7", "198.19.0.1", "198.19.1.1", "2001:db8:5::9"] {
            assert_eq!(r.lookup(ip(a)), crate::tables::ADJ_MISS, "{a} is no longer routed");
        }
        assert_eq!(r.lookup(ip("198.19.2.1")), r.lookup(ip("198.19.2.200")));
        assert!(r.fib_entries().iter().all(|e| e.interface.as_deref() != Some("eth1")));

        // The next interface takes the free slot.
        let j = r.add_interface(spec("eth2", 3, &["198.18.6.1/24"])).unwrap();
        assert_eq!(j, i);
        let v = r.lookup(ip("198.18.6.9"));
        assert_eq!(r.adjacency_interface(v), Some(j));
        let t = r.build();
        assert_eq!(t.interfaces.len(), 2);
        assert!(t.interfaces.iter().all(|l| !l.removed));
    }

    #[test]
    fn conflicting_interfaces_are_refused_and_change_nothing() {
        let mut r = RouterState::new(vec![spec("eth0", 1, &["198.18.0.1/24"])]).unwrap();
        r.add_route(p("198.18.9.0/24"), RouteTarget::Via { next_hop: ip("198.18.0.2"), interface: None }).unwrap();
        let cases = [
            (spec("eth0", 2, &[]), StateError::DuplicateInterface("eth0".into())),
            (spec("eth1", 2, &["198.18.0.1/24"]), StateError::AddressInUse { addr: ip("198.18.0.1"), interface: "eth0".into() }),
            (
                spec("eth1", 2, &["198.18.0.200/25"]),
                StateError::SubnetOverlaps { subnet: p("198.18.0.128/25"), other: p("198.18.0.0/24"), interface: "eth0".into() },
            ),
            (spec("eth1", 2, &["198.18.9.1/24"]), StateError::StaticRouteExists(p("198.18.9.0/24"))),
        ];
        for (s, want) in cases {
            assert_eq!(r.add_interface(s), Err(want));
            assert_eq!(r.interfaces().len(), 1);
        }
        assert_eq!(r.remove_interface("eth7"), Err(StateError::UnknownInterface("eth7".into())));
    }
}
