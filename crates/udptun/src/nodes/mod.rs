//! The UDP tunnel nodes: `gue4-input`/`gue6-input` (decap) and `gue4-encap`/`gue6-encap`,
//! each pair one generic node over the outer family.

pub mod encap;
pub mod input;

use crate::context::HasUdpTun;
use crate::tables::UdpTunTables;
use engine::GraphBuilder;
use ip::outer::{Ip4Outer, Ip6Outer, OuterFamily};

/// Add the UDP tunnel nodes to a graph (the IP nodes must be there too).
pub fn register<Cx: HasUdpTun>(g: &mut GraphBuilder<Cx>) {
    g.add(input::UdpTunInput::<Ip4Outer>::default());
    g.add(input::UdpTunInput::<Ip6Outer>::default());
    g.add(encap::UdpTunEncap::<Ip4Outer>::default());
    g.add(encap::UdpTunEncap::<Ip6Outer>::default());
}

/// The UDP tunnels' part of an outer family: node names and the decap table.
pub trait TunOuter: OuterFamily {
    const INPUT: &'static str;
    const ENCAP: &'static str;
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32>;
}

impl TunOuter for Ip4Outer {
    const INPUT: &'static str = "gue4-input";
    const ENCAP: &'static str = "gue4-encap";
    #[inline(always)]
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32> {
        t.decap4.get(&(local, remote, port)).copied()
    }
}

impl TunOuter for Ip6Outer {
    const INPUT: &'static str = "gue6-input";
    const ENCAP: &'static str = "gue6-encap";
    #[inline(always)]
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32> {
        t.decap6.get(&(local, remote, port)).copied()
    }
}
