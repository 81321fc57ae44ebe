//! The tables the forwarding nodes read: interfaces' L3 settings, FIBs, adjacencies,
//! neighbours. Built by [`crate::state::RouterState`] on the control plane, published
//! whole through an `ArcSwap`, never mutated once published. A worker picks up a new
//! version between vectors, so a packet sees one consistent version from input to
//! output, and an old version is freed only when the last worker dropped it.

use crate::lpm::Poptrie;
use engine::IfIndex;
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use wire::EthernetAddress;

/// Adjacency index 0: no route (the trie's miss value).
pub const ADJ_MISS: u32 = 0;
/// Adjacency index 1: addressed to this gateway.
pub const ADJ_LOCAL: u32 = 1;

/// What to do with a packet a lookup sent here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adjacency {
    /// No route: ICMP destination unreachable.
    Miss,
    /// One of our addresses: local delivery.
    Local,
    /// Silently discard (a `blackhole` route).
    Blackhole,
    /// Resolved next hop: prepend this Ethernet header, send on `tx_if`.
    Rewrite { tx_if: IfIndex, rewrite: [u8; 14], mtu: u16 },
    /// Attached subnet: the destination itself is the next hop; resolve it in the
    /// neighbour table per packet.
    Glean { tx_if: IfIndex, mtu: u16 },
    /// Next hop `via` not yet resolved: solicit it.
    Incomplete { tx_if: IfIndex, mtu: u16, via: std::net::IpAddr },
}

/// A resolved neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    pub if_index: IfIndex,
    pub mac: EthernetAddress,
    /// Configured (never replaced by learning) or learned.
    pub is_static: bool,
}

/// An interface's L3 view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfL3 {
    pub name: String,
    pub mac: EthernetAddress,
    pub mtu: u16,
    pub ip4: Vec<(Ipv4Addr, u8)>,
    pub ip6: Vec<(Ipv6Addr, u8)>,
    pub ip6_link_local: Ipv6Addr,
}

impl IfL3 {
    pub fn has_ip4(&self, a: Ipv4Addr) -> bool {
        self.ip4.iter().any(|(x, _)| *x == a)
    }
    pub fn has_ip6(&self, a: &Ipv6Addr) -> bool {
        *a == self.ip6_link_local || self.ip6.iter().any(|(x, _)| x == a)
    }
    /// Is `a` a multicast group this interface listens to (all-nodes, solicited-node
    /// of one of its addresses)?
    pub fn listens_ip6(&self, a: &Ipv6Addr) -> bool {
        let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
        *a == all_nodes
            || *a == wire::ipv6::solicited_node(&self.ip6_link_local)
            || self.ip6.iter().any(|(x, _)| *a == wire::ipv6::solicited_node(x))
    }
    /// Source address for packets this gateway originates out of this interface.
    pub fn ip4_source(&self) -> Option<Ipv4Addr> {
        self.ip4.first().map(|(a, _)| *a)
    }
    pub fn ip6_source(&self) -> Ipv6Addr {
        self.ip6.first().map_or(self.ip6_link_local, |(a, _)| *a)
    }
}

pub struct Tables {
    /// Increments on every publish (shown by `show ip fib`).
    pub generation: u64,
    pub interfaces: Arc<Vec<IfL3>>,
    pub fib4: Arc<Poptrie<u32>>,
    pub fib6: Arc<Poptrie<u128>>,
    pub adjacencies: Arc<Vec<Adjacency>>,
    pub neighbours4: Arc<HashMap<Ipv4Addr, Neighbour>>,
    pub neighbours6: Arc<HashMap<Ipv6Addr, Neighbour>>,
}

impl Tables {
    pub fn empty() -> Tables {
        Tables {
            generation: 0,
            interfaces: Arc::new(Vec::new()),
            fib4: Arc::new(Poptrie::empty()),
            fib6: Arc::new(Poptrie::empty()),
            adjacencies: Arc::new(vec![Adjacency::Miss, Adjacency::Local]),
            neighbours4: Arc::new(HashMap::new()),
            neighbours6: Arc::new(HashMap::new()),
        }
    }

    #[inline(always)]
    pub fn interface(&self, i: IfIndex) -> Option<&IfL3> {
        self.interfaces.get(i.get())
    }

    #[inline(always)]
    pub fn adjacency(&self, i: u32) -> &Adjacency {
        self.adjacencies.get(i as usize).unwrap_or(&Adjacency::Miss)
    }
}

/// The Ethernet header for sending to `dst` from interface `ifl`.
pub fn l2_rewrite(ifl: &IfL3, dst: EthernetAddress, ethertype: wire::EtherType) -> [u8; 14] {
    wire::ethernet::EthernetRepr { src: ifl.mac, dst, ethertype }.to_bytes()
}
