//! The GTP-U nodes: `gtpu4-input`/`gtpu6-input` (decap, echo, error indication) and
//! `gtpu4-encap`/`gtpu6-encap`. Each pair is one generic node over the outer address
//! family ([`Outer`]).

pub mod encap;
pub mod input;

use crate::context::HasGtpu;
use crate::tables::GtpuTables;
use engine::GraphBuilder;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::checksum::{self, Checksum};
use wire::ipv4::{Ipv4Packet, Ipv4Repr};
use wire::ipv6::{Ipv6Packet, Ipv6Repr};
use wire::IpProtocol;

/// Add the GTP-U nodes to a graph (the IP nodes must be there too).
pub fn register<Cx: HasGtpu>(g: &mut GraphBuilder<Cx>) {
    g.add(input::GtpuInput::<Ip4Outer>::default());
    g.add(input::GtpuInput::<Ip6Outer>::default());
    g.add(encap::GtpuEncap::<Ip4Outer>::default());
    g.add(encap::GtpuEncap::<Ip6Outer>::default());
}

/// Why an outer header cannot carry GTP-U to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterError {
    Truncated,
    /// IPv6 extension headers before UDP, or an IPv4 fragment (reassembly comes with
    /// tunnel MTU handling).
    NotPlainUdp,
}

/// What differs between GTP-U over IPv4 and over IPv6.
pub trait Outer: Send + 'static {
    type Addr: Copy + Eq + Into<IpAddr> + std::fmt::Display;
    const INPUT: &'static str;
    const ENCAP: &'static str;
    const IS_V6: bool;
    /// Outer header length, source and destination of a packet that reached us.
    fn outer(b: &[u8]) -> Result<(usize, Self::Addr, Self::Addr), OuterError>;
    fn endpoint(t: &GtpuTables, a: &Self::Addr) -> Option<u32>;
    /// The pseudo-header sum (without length) for a UDP checksum.
    fn pseudo(src: &Self::Addr, dst: &Self::Addr) -> Checksum;
    /// Emit a 20- or 40-byte header for a packet we originate; returns its length.
    fn emit_header(src: Self::Addr, dst: Self::Addr, payload_len: usize, out: &mut [u8]) -> usize;
}

pub struct Ip4Outer;
pub struct Ip6Outer;

impl Outer for Ip4Outer {
    type Addr = Ipv4Addr;
    const INPUT: &'static str = "gtpu4-input";
    const ENCAP: &'static str = "gtpu4-encap";
    const IS_V6: bool = false;
    #[inline(always)]
    fn outer(b: &[u8]) -> Result<(usize, Ipv4Addr, Ipv4Addr), OuterError> {
        // ip4-input validated the header; recheck only what indexing needs.
        let h = b.first_chunk::<20>().ok_or(OuterError::Truncated)?;
        let hl = ((h[0] & 0x0f) as usize) * 4;
        if hl < 20 || b.len() < hl {
            return Err(OuterError::Truncated);
        }
        if h[9] != 17 || (h[6] & 0x3f) != 0 || h[7] != 0 {
            return Err(OuterError::NotPlainUdp);
        }
        Ok((hl, Ipv4Addr::new(h[12], h[13], h[14], h[15]), Ipv4Addr::new(h[16], h[17], h[18], h[19])))
    }
    #[inline(always)]
    fn endpoint(t: &GtpuTables, a: &Ipv4Addr) -> Option<u32> {
        t.endpoint4(*a)
    }
    #[inline(always)]
    fn pseudo(src: &Ipv4Addr, dst: &Ipv4Addr) -> Checksum {
        checksum::pseudo_header_v4(*src, *dst, 17, 0)
    }
    fn emit_header(src: Ipv4Addr, dst: Ipv4Addr, payload_len: usize, out: &mut [u8]) -> usize {
        // An atomic datagram (RFC 6864): identification 0 is fine, and a path that cannot
        // carry it answers with frag-needed.
        let r = Ipv4Repr { src, dst, protocol: IpProtocol::Udp, payload_len, ttl: 64, dscp: 0, ecn: 0, ident: 0, dont_frag: true };
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..20]));
        20
    }
}

impl Outer for Ip6Outer {
    type Addr = Ipv6Addr;
    const INPUT: &'static str = "gtpu6-input";
    const ENCAP: &'static str = "gtpu6-encap";
    const IS_V6: bool = true;
    #[inline(always)]
    fn outer(b: &[u8]) -> Result<(usize, Ipv6Addr, Ipv6Addr), OuterError> {
        let h = b.first_chunk::<40>().ok_or(OuterError::Truncated)?;
        if h[6] != 17 {
            return Err(OuterError::NotPlainUdp);
        }
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&h[8..24]);
        d.copy_from_slice(&h[24..40]);
        Ok((40, Ipv6Addr::from(s), Ipv6Addr::from(d)))
    }
    #[inline(always)]
    fn endpoint(t: &GtpuTables, a: &Ipv6Addr) -> Option<u32> {
        t.endpoint6(a)
    }
    #[inline(always)]
    fn pseudo(src: &Ipv6Addr, dst: &Ipv6Addr) -> Checksum {
        checksum::pseudo_header_v6(src, dst, 17, 0)
    }
    fn emit_header(src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize, out: &mut [u8]) -> usize {
        let r = Ipv6Repr { src, dst, next_header: IpProtocol::Udp, payload_len, hop_limit: 64, traffic_class: 0, flow_label: 0 };
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..40]));
        40
    }
}

/// The UDP checksum field for `seg` (UDP header with a zero checksum field, then the
/// payload) under pseudo-header sum `pseudo`.
#[inline(always)]
pub fn udp_checksum(pseudo: Checksum, seg: &[u8]) -> u16 {
    let mut c = pseudo;
    c.add_u32(seg.len() as u32).add_bytes(seg);
    udp_checksum_field(c)
}

/// The UDP checksum field for a complete sum: its complement, with zero sent as all
/// ones (RFC 768: zero means "no checksum").
#[inline(always)]
pub fn udp_checksum_field(c: Checksum) -> u16 {
    match c.finish() {
        0 => 0xffff,
        x => x,
    }
}

/// Does `seg` (a whole UDP datagram with its checksum field) verify?
#[inline(always)]
pub fn udp_checksum_ok(pseudo: Checksum, seg: &[u8]) -> bool {
    let mut c = pseudo;
    c.add_u32(seg.len() as u32).add_bytes(seg);
    c.fold() == 0xffff
}

/// Build a UDP datagram from `ours` to `peer` carrying `msg` into `out`; returns its
/// length.
pub fn reply_datagram<O: Outer>(ours: O::Addr, peer: O::Addr, dst_port: u16, msg: &[u8], out: &mut [u8]) -> usize {
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
