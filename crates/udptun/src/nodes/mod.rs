//! The UDP tunnel nodes: `gue4-input`/`gue6-input` (decap) and `gue4-encap`/`gue6-encap`,
//! each pair one generic node over the outer family.

pub mod encap;
pub mod input;

use crate::context::HasUdpTun;
use crate::tables::UdpTunTables;
use engine::GraphBuilder;
use ip::outer::{Ip4Outer, Ip6Outer, OuterFamily};
use std::net::{Ipv4Addr, Ipv6Addr};

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
    /// The outer header's length on the decap fast path: no IPv4 options, no IPv6
    /// extension headers.
    const FIXED_LEN: usize;
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32>;
    /// Our address, the peer's and the UDP header (with the four bytes after it) of an
    /// unfragmented UDP packet with the fixed outer header, read at fixed offsets after
    /// one bounds check; `None` for any other packet (the node's full parse then takes
    /// it).
    fn fixed_head(b: &[u8]) -> Option<(Self::Addr, Self::Addr, OuterUdp)>;
}

/// The outer UDP header of a tunnel packet as the input node reads it: where it starts,
/// its destination port, length and checksum, and the four bytes after it where there
/// are four (the start of a GUE or GRE header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OuterUdp {
    pub hl: usize,
    pub dst_port: u16,
    pub len: usize,
    pub sum: u16,
    pub after: Option<[u8; 4]>,
}

impl OuterUdp {
    /// The UDP header at `hl` in `b`, if there are 8 bytes.
    pub fn read(b: &[u8], hl: usize) -> Option<OuterUdp> {
        let h = b.get(hl..)?.first_chunk::<8>()?;
        let after = b.get(hl + 8..).and_then(|x| x.first_chunk::<4>()).copied();
        Some(OuterUdp::new(hl, h, after))
    }

    /// The UDP header at `hl` and the word after it, `u` (12 bytes in hand).
    #[inline(always)]
    fn fixed(hl: usize, u: &[u8; 12]) -> OuterUdp {
        let [a, b, c, d, e, f, g, h, w @ ..] = *u;
        OuterUdp::new(hl, &[a, b, c, d, e, f, g, h], Some(w))
    }

    #[inline(always)]
    fn new(hl: usize, h: &[u8; 8], after: Option<[u8; 4]>) -> OuterUdp {
        let be = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        OuterUdp { hl, dst_port: be(2), len: be(4) as usize, sum: be(6), after }
    }
}

impl TunOuter for Ip4Outer {
    const INPUT: &'static str = "gue4-input";
    const ENCAP: &'static str = "gue4-encap";
    const FIXED_LEN: usize = 20;
    #[inline(always)]
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32> {
        t.decap4.get(&(local, remote, port)).copied()
    }
    #[inline(always)]
    fn fixed_head(b: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, OuterUdp)> {
        let (h, u) = b.first_chunk::<32>()?.split_first_chunk::<20>()?;
        let plain = h[0] == 0x45 && h[9] == 17 && h[6] & 0x3f == 0 && h[7] == 0;
        let u = u.first_chunk::<12>()?;
        plain.then(|| (Ipv4Addr::new(h[16], h[17], h[18], h[19]), Ipv4Addr::new(h[12], h[13], h[14], h[15]), OuterUdp::fixed(20, u)))
    }
}

impl TunOuter for Ip6Outer {
    const INPUT: &'static str = "gue6-input";
    const ENCAP: &'static str = "gue6-encap";
    const FIXED_LEN: usize = 40;
    #[inline(always)]
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32> {
        t.decap6.get(&(local, remote, port)).copied()
    }
    #[inline(always)]
    fn fixed_head(b: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr, OuterUdp)> {
        let (h, u) = b.first_chunk::<52>()?.split_first_chunk::<40>()?;
        let addr = |at: usize| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&h[at..at + 16]);
            Ipv6Addr::from(a)
        };
        let u = u.first_chunk::<12>()?;
        (h[6] == 17).then(|| (addr(24), addr(8), OuterUdp::fixed(40, u)))
    }
}
