//! The UDP tunnel nodes: `gue4-input`/`gue6-input` (decap) and `gue4-encap`/`gue6-encap`,
//! each pair one generic node over the outer family.

pub mod encap;
pub mod input;

use crate::context::HasUdpTun;
use crate::tables::UdpTunTables;
use engine::GraphBuilder;
pub use ip::hint::{HeadMatch, HeadTemplate};
use ip::hint::{TunnelHint, TunnelHints};
use ip::outer::{Ip4Outer, Ip6Outer, OuterFamily};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Add the UDP tunnel nodes to a graph (the IP nodes must be there too).
pub fn register<Cx: HasUdpTun>(g: &mut GraphBuilder<Cx>) {
    // Each node in two forms, counting per tunnel and not, chosen per vector.
    g.add_either(input::UdpTunInput::<Ip4Outer, true>::default(), input::UdpTunInput::<Ip4Outer, false>::default(), counting::<Cx>);
    g.add_either(input::UdpTunInput::<Ip6Outer, true>::default(), input::UdpTunInput::<Ip6Outer, false>::default(), counting::<Cx>);
    g.add_either(encap::UdpTunEncap::<Ip4Outer, true>::default(), encap::UdpTunEncap::<Ip4Outer, false>::default(), counting::<Cx>);
    g.add_either(encap::UdpTunEncap::<Ip6Outer, true>::default(), encap::UdpTunEncap::<Ip6Outer, false>::default(), counting::<Cx>);
}

/// Whether per-tunnel counting is on (`[metrics] tunnel_counters`).
fn counting<Cx: HasUdpTun>(cx: &mut Cx) -> bool {
    cx.split_udptun().1.counters.counting()
}

/// The UDP tunnels' part of an outer family: node names and the decap table.
pub trait TunOuter: OuterFamily {
    const INPUT: &'static str;
    const ENCAP: &'static str;
    /// The outer header's length on the decap fast path: no IPv4 options, no IPv6
    /// extension headers.
    const FIXED_LEN: usize;
    /// The decap fast path's test of one tunnel's packets: see [`HeadTemplate`].
    type Head: HeadMatch;
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32>;
    /// The fixed outer header of an unfragmented UDP packet from `remote` to `local` on
    /// `port`, with a zero UDP checksum.
    fn head(local: Self::Addr, remote: Self::Addr, port: u16) -> Self::Head;
    /// This family's hint among a worker's tunnel hints.
    fn hint(h: &mut TunnelHints) -> &mut Option<TunnelHint<Self::Head>>;
    /// Whether a tunnel may be hinted: `ethernet-input` leaves `ipN-input`'s address
    /// checks to the template, so only addresses that pass them.
    fn hintable(local: &Self::Addr, remote: &Self::Addr) -> bool;
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
        let be = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        Some(OuterUdp { hl, dst_port: be(2), len: be(4) as usize, sum: be(6), after })
    }
}

impl TunOuter for Ip4Outer {
    const INPUT: &'static str = "gue4-input";
    const ENCAP: &'static str = "gue4-encap";
    const FIXED_LEN: usize = 20;
    type Head = HeadTemplate<4>;
    #[inline(always)]
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32> {
        t.decap4.get(&(local, remote, port)).copied()
    }
    fn hint(h: &mut TunnelHints) -> &mut Option<TunnelHint<HeadTemplate<4>>> {
        &mut h.v4
    }
    fn hintable(_: &Ipv4Addr, remote: &Ipv4Addr) -> bool {
        remote.octets()[0] < 224
    }
    fn head(local: Ipv4Addr, remote: Ipv4Addr, port: u16) -> HeadTemplate<4> {
        // Version 4 and IHL 5; an ECN field of Not-ECT or ECT(0), which change nothing
        // inside (`ip::outer::tos`); no MF flag or fragment offset; UDP; the addresses;
        // the port; a zero UDP checksum. Free: DSCP, lengths, identification, TTL, the IP
        // checksum (`ip4-input`'s checks, made before this node), the source port.
        HeadTemplate::new(&[
            (0, &[0x45, 0], &[0xff, 0x01]),
            (6, &[0, 0], &[0x3f, 0xff]),
            (9, &[17], &[0xff]),
            (12, &remote.octets(), &[0xff; 4]),
            (16, &local.octets(), &[0xff; 4]),
            (22, &port.to_be_bytes(), &[0xff; 2]),
            (26, &[0, 0], &[0xff; 2]),
        ])
    }
}

impl TunOuter for Ip6Outer {
    const INPUT: &'static str = "gue6-input";
    const ENCAP: &'static str = "gue6-encap";
    const FIXED_LEN: usize = 40;
    /// 56 bytes: the 52 of the headers, and the start of the inner packet.
    type Head = HeadTemplate<7>;
    #[inline(always)]
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32> {
        t.decap6.get(&(local, remote, port)).copied()
    }
    fn hint(h: &mut TunnelHints) -> &mut Option<TunnelHint<HeadTemplate<7>>> {
        &mut h.v6
    }
    fn hintable(local: &Ipv6Addr, remote: &Ipv6Addr) -> bool {
        !local.is_multicast() && !remote.is_multicast()
    }
    fn head(local: Ipv6Addr, remote: Ipv6Addr, port: u16) -> HeadTemplate<7> {
        // Version 6; an ECN field of Not-ECT or ECT(0); UDP right after the fixed header;
        // the addresses; the port; a zero UDP checksum (only on tunnels that accept one,
        // RFC 6936).
        HeadTemplate::new(&[
            (0, &[0x60, 0], &[0xf0, 0x10]),
            (6, &[17], &[0xff]),
            (8, &remote.octets(), &[0xff; 16]),
            (24, &local.octets(), &[0xff; 16]),
            (42, &port.to_be_bytes(), &[0xff; 2]),
            (46, &[0, 0], &[0xff; 2]),
        ])
    }
}
