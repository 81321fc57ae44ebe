//! The GTP-U nodes: `gtpu4-input`/`gtpu6-input` (decap, echo, error indication) and
//! `gtpu4-encap`/`gtpu6-encap`. Each pair is one generic node over the outer address
//! family ([`Outer`]).

pub mod encap;
pub mod input;

use crate::context::HasGtpu;
use crate::tables::GtpuTables;
use engine::GraphBuilder;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Add the GTP-U nodes to a graph (the IP nodes must be there too).
pub fn register<Cx: HasGtpu>(g: &mut GraphBuilder<Cx>) {
    // Each node in two forms, counting per tunnel and not, chosen per vector.
    g.add_either(input::GtpuInput::<Ip4Outer, true>::default(), input::GtpuInput::<Ip4Outer, false>::default(), counting::<Cx>);
    g.add_either(input::GtpuInput::<Ip6Outer, true>::default(), input::GtpuInput::<Ip6Outer, false>::default(), counting::<Cx>);
    g.add_either(encap::GtpuEncap::<Ip4Outer, true>::default(), encap::GtpuEncap::<Ip4Outer, false>::default(), counting::<Cx>);
    g.add_either(encap::GtpuEncap::<Ip6Outer, true>::default(), encap::GtpuEncap::<Ip6Outer, false>::default(), counting::<Cx>);
}

/// Whether per-tunnel counting is on (`[metrics] tunnel_counters`).
fn counting<Cx: HasGtpu>(cx: &mut Cx) -> bool {
    cx.split().1.counters.counting()
}

pub use ip::outer::{udp_checksum, udp_checksum_field, udp_checksum_ok, Ip4Outer, Ip6Outer, OuterError, OuterFamily};

/// GTP-U's part of an outer family: its node names and endpoint table.
pub trait Outer: OuterFamily {
    const INPUT: &'static str;
    const ENCAP: &'static str;
    fn endpoint(t: &GtpuTables, a: &Self::Addr) -> Option<u32>;
}

impl Outer for Ip4Outer {
    const INPUT: &'static str = "gtpu4-input";
    const ENCAP: &'static str = "gtpu4-encap";
    #[inline(always)]
    fn endpoint(t: &GtpuTables, a: &Ipv4Addr) -> Option<u32> {
        t.endpoint4(*a)
    }
}

impl Outer for Ip6Outer {
    const INPUT: &'static str = "gtpu6-input";
    const ENCAP: &'static str = "gtpu6-encap";
    #[inline(always)]
    fn endpoint(t: &GtpuTables, a: &Ipv6Addr) -> Option<u32> {
        t.endpoint6(a)
    }
}

/// Build a UDP datagram from `ours` to `peer` carrying `msg` into `out`; returns its
/// length.
pub fn reply_datagram<O: OuterFamily>(ours: O::Addr, peer: O::Addr, dst_port: u16, msg: &[u8], out: &mut [u8]) -> usize {
    let udp_len = 8 + msg.len();
    let hl = O::emit_header(ours, peer, udp_len, out);
    let u = &mut out[hl..hl + udp_len];
    u[0..2].copy_from_slice(&wire::gtpu::PORT.to_be_bytes());
    u[2..4].copy_from_slice(&dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    u[6..8].copy_from_slice(&[0, 0]);
    u[8..].copy_from_slice(msg);
    let c = udp_checksum(O::pseudo(&ours, &peer), u);
    u[6..8].copy_from_slice(&c.to_be_bytes());
    hl + udp_len
}
