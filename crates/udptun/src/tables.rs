//! The tables the UDP tunnel nodes read, published whole like the IP tables.

use crate::tunnel::Tunnel;
use engine::hash::WordHashBuilder;
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, Default)]
pub struct UdpTunTables {
    /// By tunnel id; `None` for deleted ids.
    pub tunnels: Vec<Option<Tunnel>>,
    /// (our address, the peer's address, UDP port) → tunnel id.
    pub decap4: HashMap<(Ipv4Addr, Ipv4Addr, u16), u32, WordHashBuilder>,
    pub decap6: HashMap<(Ipv6Addr, Ipv6Addr, u16), u32, WordHashBuilder>,
    /// Per tunnel: the adjacency its outer packets leave by (resolved on the control
    /// plane, so encap goes straight to `ipN-rewrite`), or `ADJ_MISS` for "look it up".
    pub outer_adj: Vec<u32>,
    /// The nodes count packets and bytes per tunnel (`[metrics] tunnel_counters`).
    pub count_tunnels: bool,
}

impl UdpTunTables {
    #[inline(always)]
    pub fn tunnel(&self, id: u32) -> Option<&Tunnel> {
        self.tunnels.get(id as usize).and_then(Option::as_ref)
    }

    #[inline(always)]
    pub fn outer_adj(&self, id: u32) -> u32 {
        self.outer_adj.get(id as usize).copied().unwrap_or(ip::tables::ADJ_MISS)
    }
}
