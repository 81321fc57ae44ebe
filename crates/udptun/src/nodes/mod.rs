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
    /// The decap fast path's test of one tunnel's packets: see [`HeadTemplate`].
    type Head: HeadMatch;
    fn decap(t: &UdpTunTables, local: Self::Addr, remote: Self::Addr, port: u16) -> Option<u32>;
    /// The fixed outer header of an unfragmented UDP packet from `remote` to `local` on
    /// `port`, with a zero UDP checksum.
    fn head(local: Self::Addr, remote: Self::Addr, port: u16) -> Self::Head;
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

/// The test of the decap fast path: is this packet one of the planned tunnel's, with
/// the fixed outer header?
pub trait HeadMatch: Copy + Send + 'static {
    /// How many bytes of the packet it compares: shorter packets never match.
    const LEN: usize;
    fn matches(&self, b: &[u8]) -> bool;
}

/// A tunnel's fixed outer header as the decap fast path compares it: the packet's first
/// `8 * W` bytes, read as words, equal `want` wherever `mask` is set. A few word
/// comparisons stand for the tests of version and header length, protocol, fragment,
/// both addresses, the port and the UDP checksum, byte by byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadTemplate<const W: usize> {
    want: [u64; W],
    mask: [u64; W],
}

impl<const W: usize> HeadTemplate<W> {
    /// From (offset, bytes, mask of those bytes) fields inside the `8 * W` bytes (`W` at
    /// most 8). Built on the packet path (a plan per vector), so on the stack.
    fn new(fields: &[(usize, &[u8], &[u8])]) -> Self {
        let (mut want, mut mask) = ([0u8; 64], [0u8; 64]);
        for (at, bytes, m) in fields {
            debug_assert_eq!(bytes.len(), m.len(), "a template field's bytes and mask");
            for (i, (b, m)) in bytes.iter().zip(m.iter()).enumerate() {
                want[at + i] = b & m;
                mask[at + i] = *m;
            }
        }
        let words = |v: &[u8; 64]| {
            let (w, _) = v.as_chunks::<8>();
            std::array::from_fn(|i| u64::from_ne_bytes(w[i]))
        };
        HeadTemplate { want: words(&want), mask: words(&mask) }
    }
}

impl<const W: usize> HeadMatch for HeadTemplate<W> {
    const LEN: usize = 8 * W;
    #[inline(always)]
    fn matches(&self, b: &[u8]) -> bool {
        let Some((words, _)) = b.get(..Self::LEN).map(|h| h.as_chunks::<8>()) else { return false };
        let mut diff = 0;
        for ((w, want), mask) in words.iter().zip(&self.want).zip(&self.mask) {
            diff |= (u64::from_ne_bytes(*w) ^ want) & mask;
        }
        diff == 0
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
    fn head(local: Ipv4Addr, remote: Ipv4Addr, port: u16) -> HeadTemplate<4> {
        // Version 4 and IHL 5; no MF flag or fragment offset; UDP; the addresses; the
        // port; a zero UDP checksum. Free: TOS, lengths, identification, TTL, the IP
        // checksum (`ip4-input`'s checks, made before this node), the source port.
        HeadTemplate::new(&[
            (0, &[0x45], &[0xff]),
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
    fn head(local: Ipv6Addr, remote: Ipv6Addr, port: u16) -> HeadTemplate<7> {
        // Version 6; UDP right after the fixed header; the addresses; the port; a zero UDP
        // checksum (only on tunnels that accept one, RFC 6936).
        HeadTemplate::new(&[
            (0, &[0x60], &[0xf0]),
            (6, &[17], &[0xff]),
            (8, &remote.octets(), &[0xff; 16]),
            (24, &local.octets(), &[0xff; 16]),
            (42, &port.to_be_bytes(), &[0xff; 2]),
            (46, &[0, 0], &[0xff; 2]),
        ])
    }
}
