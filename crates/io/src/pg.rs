//! The packet generator: streams of packets built once from a template and varied per
//! packet (addresses or ports incremented or randomised over a range, with the IPv4
//! header and L4 checksums patched incrementally, RFC 1624), sent at a rate or as fast
//! as possible, for a count or forever. It is an interface's receive side: the graph
//! sees its packets as arriving on that interface (`pg-input`).

use engine::device::{Device, RxStatus, TxResult};
use engine::{clock, BufIdx, Pool};
use std::net::IpAddr;
use wire::checksum;
use wire::ethernet::EthernetRepr;
use wire::icmpv4::Icmpv4Repr;
use wire::icmpv6::Icmpv6Repr;
use wire::ipv4::{Ipv4Packet, Ipv4Repr};
use wire::ipv6::{Ipv6Packet, Ipv6Repr};
use wire::tcp::{TcpFlags, TcpPacket, TcpRepr};
use wire::udp::{UdpPacket, UdpRepr};
use wire::{EtherType, EthernetAddress, IpProtocol};

/// The transport part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L4Spec {
    Udp {
        src_port: u16,
        dst_port: u16,
    },
    Tcp {
        src_port: u16,
        dst_port: u16,
        flags: u16,
    },
    IcmpEcho {
        ident: u16,
        seq: u16,
    },
    /// A GTP-U G-PDU (UDP 2152, no optional fields) carrying an inner UDP packet between
    /// `inner_src` and `inner_dst`; the outer UDP checksum is computed when `checksum`,
    /// zero otherwise.
    Gtpu {
        teid: u32,
        inner_src: IpAddr,
        inner_dst: IpAddr,
        checksum: bool,
    },
    /// A UDP tunnel packet to `dst_port` (from port 40000): the tunnel header `header`
    /// (GUE, GRE; empty for direct), then an inner UDP packet between `inner_src` and
    /// `inner_dst`; zero outer checksum.
    UdpTunnel {
        dst_port: u16,
        header: Vec<u8>,
        inner_src: IpAddr,
        inner_dst: IpAddr,
    },
    /// An IP payload given whole (an ESP packet a control plane sealed): `payload` after
    /// the IP header, as protocol `protocol`; the frame is exactly that long
    /// (`frame_size` must say so). Only addresses can be modified (the payload is opaque).
    Payload {
        protocol: u8,
        payload: Vec<u8>,
    },
}

/// An inner UDP packet (ports 1024) filling `inner`, with its checksums.
fn emit_inner_udp(inner: &mut [u8], src: IpAddr, dst: IpAddr) -> Result<(), TemplateError> {
    let len = inner.len();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Ipv4Repr {
                src: s,
                dst: d,
                protocol: IpProtocol::Udp,
                payload_len: len - 20,
                ttl: 64,
                dscp: 0,
                ecn: 0,
                ident: 0,
                dont_frag: false,
            }
            .emit(&mut Ipv4Packet::new_unchecked(&mut inner[..20]));
            let mut u = UdpPacket::new_unchecked(&mut inner[20..]);
            UdpRepr { src_port: 1024, dst_port: 1024 }.emit(&mut u, len - 28);
            u.fill_checksum_v4(s, d);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ipv6Repr {
                src: s,
                dst: d,
                next_header: IpProtocol::Udp,
                payload_len: len - 40,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut Ipv6Packet::new_unchecked(&mut inner[..40]));
            let mut u = UdpPacket::new_unchecked(&mut inner[40..]);
            UdpRepr { src_port: 1024, dst_port: 1024 }.emit(&mut u, len - 48);
            u.fill_checksum_v6(&s, &d);
        }
        _ => return Err(TemplateError::MixedFamilies),
    }
    Ok(())
}

/// One template packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketSpec {
    pub src_mac: EthernetAddress,
    pub dst_mac: EthernetAddress,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ttl: u8,
    pub l4: L4Spec,
    /// Frame length in bytes, Ethernet header included, FCS excluded.
    pub frame_size: usize,
}

/// Which template field a modifier varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    SrcAddr,
    DstAddr,
    SrcPort,
    DstPort,
    /// The GTP-U TEID of a `Gtpu` stream.
    Teid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// base, base+1, … base+count-1, then again.
    Increment { count: u32 },
    /// base + a uniform random offset in [0, count).
    Random { count: u32 },
    /// Exactly these values (for addresses: the low 32 bits), cycled.
    List(Vec<u32>),
    /// Exactly these whole addresses (of the stream's family), cycled.
    Addresses(Vec<IpAddr>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModifierSpec {
    pub field: Field,
    pub pattern: Pattern,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub name: String,
    pub packet: PacketSpec,
    pub modifiers: Vec<ModifierSpec>,
    /// Packets to send; `None` = forever.
    pub count: Option<u64>,
    /// Packets per second; `None` = as fast as the worker takes them.
    pub rate_pps: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("frame size {size} is below the {min} bytes the headers need")]
    TooSmall { size: usize, min: usize },
    #[error("frame size {0} is above the 9216-byte jumbo frame limit")]
    TooLarge(usize),
    #[error("source and destination are different address families")]
    MixedFamilies,
    #[error("ICMP echo over IPv6 has no ports to modify")]
    NoPorts,
    #[error("a list modifier needs at least one value")]
    EmptyList,
    #[error("count must be at least 1")]
    ZeroCount,
    #[error("only a gtpu stream has a TEID to modify")]
    NoTeid,
    #[error("at most {MAX_MODIFIERS} modifiers per stream")]
    TooManyModifiers,
    #[error("frame size {size}: a packet of a given payload is exactly {exact} bytes")]
    PayloadSize { size: usize, exact: usize },
}

/// Where a template keeps the fields modifiers touch.
#[derive(Debug, Clone, Copy, Default)]
struct Layout {
    /// Offset of the varied 32 bits of the source/destination address.
    src_addr: usize,
    dst_addr: usize,
    src_port: Option<usize>,
    dst_port: Option<usize>,
    teid: Option<usize>,
    ip_checksum: Option<usize>,
    /// L4 checksum (UDP/TCP; ICMPv6 covers the pseudo-header too), and whether a
    /// computed zero must be sent as 0xffff (UDP).
    l4_checksum: Option<(usize, bool)>,
}

/// The frame a packet spec makes (before any modifier).
pub fn template(spec: &PacketSpec) -> Result<Vec<u8>, TemplateError> {
    build(spec).map(|(f, _)| f)
}

/// Build the template frame and the layout of its variable fields.
fn build(spec: &PacketSpec) -> Result<(Vec<u8>, Layout), TemplateError> {
    if spec.frame_size > 9216 {
        return Err(TemplateError::TooLarge(spec.frame_size));
    }
    let (l3, et) = match (spec.src, spec.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (20, EtherType::Ipv4),
        (IpAddr::V6(_), IpAddr::V6(_)) => (40, EtherType::Ipv6),
        _ => return Err(TemplateError::MixedFamilies),
    };
    let l4 = match spec.l4 {
        L4Spec::Udp { .. } => 8,
        L4Spec::Tcp { .. } => 20,
        L4Spec::IcmpEcho { .. } => 8,
        L4Spec::Gtpu { inner_src, .. } => 8 + 8 + if inner_src.is_ipv4() { 20 } else { 40 } + 8,
        L4Spec::UdpTunnel { ref header, inner_src, .. } => 8 + header.len() + if inner_src.is_ipv4() { 20 } else { 40 } + 8,
        L4Spec::Payload { ref payload, .. } => payload.len(),
    };
    let min = 14 + l3 + l4;
    if spec.frame_size < min {
        return Err(TemplateError::TooSmall { size: spec.frame_size, min });
    }
    if matches!(spec.l4, L4Spec::Payload { .. }) && spec.frame_size != min {
        return Err(TemplateError::PayloadSize { size: spec.frame_size, exact: min });
    }
    let mut f = vec![0u8; spec.frame_size];
    f[..14].copy_from_slice(&EthernetRepr { src: spec.src_mac, dst: spec.dst_mac, ethertype: et }.to_bytes());
    let l4_off = 14 + l3;
    let l4_len = spec.frame_size - l4_off;
    // A recognisable payload: bytes counting up.
    for (i, b) in f[l4_off + l4..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let proto = match (&spec.l4, et) {
        (L4Spec::Udp { .. } | L4Spec::Gtpu { .. } | L4Spec::UdpTunnel { .. }, _) => IpProtocol::Udp,
        (L4Spec::Tcp { .. }, _) => IpProtocol::Tcp,
        (L4Spec::IcmpEcho { .. }, EtherType::Ipv4) => IpProtocol::Icmp,
        (L4Spec::IcmpEcho { .. }, _) => IpProtocol::Icmpv6,
        (L4Spec::Payload { protocol, .. }, _) => IpProtocol::from(*protocol),
    };
    let mut lay = Layout::default();
    match (spec.src, spec.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Ipv4Repr { src: s, dst: d, protocol: proto, payload_len: l4_len, ttl: spec.ttl, dscp: 0, ecn: 0, ident: 0, dont_frag: false }
                .emit(&mut Ipv4Packet::new_unchecked(&mut f[14..34]));
            lay.src_addr = 14 + 12;
            lay.dst_addr = 14 + 16;
            lay.ip_checksum = Some(14 + 10);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ipv6Repr { src: s, dst: d, next_header: proto, payload_len: l4_len, hop_limit: spec.ttl, traffic_class: 0, flow_label: 0 }
                .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
            lay.src_addr = 14 + 8 + 12;
            lay.dst_addr = 14 + 24 + 12;
        }
        _ => return Err(TemplateError::MixedFamilies),
    }
    let seg = &mut f[l4_off..];
    match spec.l4 {
        L4Spec::Udp { src_port, dst_port } => {
            let mut u = UdpPacket::new_unchecked(&mut *seg);
            UdpRepr { src_port, dst_port }.emit(&mut u, l4_len - 8);
            match (spec.src, spec.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => u.fill_checksum_v4(s, d),
                (IpAddr::V6(s), IpAddr::V6(d)) => u.fill_checksum_v6(&s, &d),
                _ => {}
            }
            lay.src_port = Some(l4_off);
            lay.dst_port = Some(l4_off + 2);
            lay.l4_checksum = Some((l4_off + 6, true));
        }
        L4Spec::Tcp { src_port, dst_port, flags } => {
            let mut t = TcpPacket::new_unchecked(&mut *seg);
            TcpRepr { src_port, dst_port, seq: 1, ack: 0, flags: TcpFlags(flags), window: 65535, mss: None }.emit(&mut t);
            match (spec.src, spec.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => t.fill_checksum_v4(s, d),
                (IpAddr::V6(s), IpAddr::V6(d)) => t.fill_checksum_v6(&s, &d),
                _ => {}
            }
            lay.src_port = Some(l4_off);
            lay.dst_port = Some(l4_off + 2);
            lay.l4_checksum = Some((l4_off + 16, false));
        }
        L4Spec::Gtpu { teid, inner_src, inner_dst, checksum } => {
            let glen = l4_len - 16;
            seg[8..16].copy_from_slice(&[0x30, 255, (glen >> 8) as u8, glen as u8, 0, 0, 0, 0]);
            seg[12..16].copy_from_slice(&teid.to_be_bytes());
            emit_inner_udp(&mut seg[16..], inner_src, inner_dst)?;
            let mut u = UdpPacket::new_unchecked(&mut *seg);
            UdpRepr { src_port: wire::gtpu::PORT, dst_port: wire::gtpu::PORT }.emit(&mut u, l4_len - 8);
            if checksum {
                match (spec.src, spec.dst) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => u.fill_checksum_v4(s, d),
                    (IpAddr::V6(s), IpAddr::V6(d)) => u.fill_checksum_v6(&s, &d),
                    _ => {}
                }
                lay.l4_checksum = Some((l4_off + 6, true));
            } else {
                u.set_checksum(0);
            }
            lay.src_port = Some(l4_off);
            lay.dst_port = Some(l4_off + 2);
            lay.teid = Some(l4_off + 12);
        }
        L4Spec::UdpTunnel { dst_port, ref header, inner_src, inner_dst } => {
            let h = header.len();
            seg[8..8 + h].copy_from_slice(header);
            emit_inner_udp(&mut seg[8 + h..], inner_src, inner_dst)?;
            let mut u = UdpPacket::new_unchecked(&mut *seg);
            UdpRepr { src_port: 40000, dst_port }.emit(&mut u, l4_len - 8);
            u.set_checksum(0);
            lay.src_port = Some(l4_off);
            lay.dst_port = Some(l4_off + 2);
        }
        L4Spec::Payload { ref payload, .. } => seg.copy_from_slice(payload),
        L4Spec::IcmpEcho { ident, seq } => match (spec.src, spec.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => {
                let data = seg[8..].to_vec();
                // The ICMPv4 checksum covers no addresses: address changes leave it valid.
                Icmpv4Repr::EchoRequest { ident, seq, data: &data }.emit(seg);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let data = seg[8..].to_vec();
                Icmpv6Repr::EchoRequest { ident, seq, data: &data }.emit(seg, &s, &d);
                lay.l4_checksum = Some((l4_off + 2, false));
            }
            _ => {}
        },
    }
    Ok((f, lay))
}

/// Modifiers a stream may have (values are drawn into a fixed array per packet).
pub const MAX_MODIFIERS: usize = 4;

struct Modifier {
    offset: usize,
    wide: bool,
    /// For `Pattern::Addresses`: the address bytes, and where the address starts.
    addrs: Vec<[u8; 16]>,
    addr_start: usize,
    addr_len: usize,
    base: u32,
    pattern: Pattern,
    next: u32,
    /// Checksums to patch: (offset, is UDP).
    fixups: Vec<(usize, bool)>,
}

struct Stream {
    template: Vec<u8>,
    modifiers: Vec<Modifier>,
    remaining: Option<u64>,
    rate_pps: Option<u64>,
    sent: u64,
    started: Option<u64>,
}

/// A generator interface: one or more streams, served round-robin.
pub struct PacketGenerator {
    streams: Vec<Stream>,
    rng: u64,
    hz: u64,
    next_stream: usize,
}

impl PacketGenerator {
    pub fn new(specs: &[StreamSpec]) -> Result<PacketGenerator, (String, TemplateError)> {
        let mut streams = Vec::new();
        for s in specs {
            let (template, lay) = build(&s.packet).map_err(|e| (s.name.clone(), e))?;
            if s.modifiers.len() > MAX_MODIFIERS {
                return Err((s.name.clone(), TemplateError::TooManyModifiers));
            }
            let mut modifiers = Vec::new();
            for m in &s.modifiers {
                match &m.pattern {
                    Pattern::List(v) if v.is_empty() => return Err((s.name.clone(), TemplateError::EmptyList)),
                    Pattern::Addresses(v) if v.is_empty() => return Err((s.name.clone(), TemplateError::EmptyList)),
                    Pattern::Addresses(v) if v.iter().any(|a| a.is_ipv4() != s.packet.src.is_ipv4()) => {
                        return Err((s.name.clone(), TemplateError::MixedFamilies))
                    }
                    Pattern::Addresses(_) if !matches!(m.field, Field::SrcAddr | Field::DstAddr) => {
                        return Err((s.name.clone(), TemplateError::NoPorts))
                    }
                    Pattern::Increment { count: 0 } | Pattern::Random { count: 0 } => {
                        return Err((s.name.clone(), TemplateError::ZeroCount))
                    }
                    _ => {}
                }
                let (offset, wide, fixups) = match m.field {
                    Field::Teid => {
                        let off = lay.teid.ok_or((s.name.clone(), TemplateError::NoTeid))?;
                        (off, true, lay.l4_checksum.into_iter().collect())
                    }
                    Field::SrcAddr | Field::DstAddr => {
                        let off = if m.field == Field::SrcAddr { lay.src_addr } else { lay.dst_addr };
                        // Addresses are in the IPv4 header checksum and every pseudo-header.
                        let fix = lay
                            .ip_checksum
                            .map(|c| (c, false))
                            .into_iter()
                            .chain(lay.l4_checksum.filter(|_| !is_icmp4(&s.packet)))
                            .collect();
                        (off, true, fix)
                    }
                    Field::SrcPort | Field::DstPort => {
                        let off = if m.field == Field::SrcPort { lay.src_port } else { lay.dst_port };
                        let off = off.ok_or((s.name.clone(), TemplateError::NoPorts))?;
                        (off, false, lay.l4_checksum.into_iter().collect())
                    }
                };
                let base = if wide {
                    u32::from_be_bytes(template[offset..offset + 4].try_into().expect("4 bytes"))
                } else {
                    u16::from_be_bytes([template[offset], template[offset + 1]]) as u32
                };
                let addr_len = if s.packet.src.is_ipv4() { 4 } else { 16 };
                let addrs = match &m.pattern {
                    Pattern::Addresses(v) => v
                        .iter()
                        .map(|a| {
                            let mut b = [0u8; 16];
                            match a {
                                IpAddr::V4(x) => b[..4].copy_from_slice(&x.octets()),
                                IpAddr::V6(x) => b.copy_from_slice(&x.octets()),
                            }
                            b
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                let addr_start = offset + 4 - addr_len;
                modifiers.push(Modifier { offset, wide, addrs, addr_start, addr_len, base, pattern: m.pattern.clone(), next: 0, fixups });
            }
            streams.push(Stream { template, modifiers, remaining: s.count, rate_pps: s.rate_pps, sent: 0, started: None });
        }
        Ok(PacketGenerator { streams, rng: 0x9e37_79b9_7f4a_7c15, hz: clock::hz(), next_stream: 0 })
    }

    /// Fixed frames, each a stream of `count` copies (streams take turns a vector at a
    /// time). With `vary_ipv4_ident`, each stream's n-th frame carries IPv4
    /// identification n (mod 65536): the fragments of one datagram, one per stream,
    /// stay matched, and each datagram differs from the last.
    pub fn fixed_frames(frames: &[Vec<u8>], count: u64, vary_ipv4_ident: bool) -> PacketGenerator {
        let streams = frames
            .iter()
            .map(|f| {
                let ident = vary_ipv4_ident && f.len() >= 34 && f[12..14] == [0x08, 0x00];
                let modifiers = if ident {
                    let (offset, check) = (14 + 4, 14 + 10);
                    let base = u16::from_be_bytes([f[offset], f[offset + 1]]) as u32;
                    vec![Modifier {
                        offset,
                        wide: false,
                        addrs: Vec::new(),
                        addr_start: 0,
                        addr_len: 0,
                        base,
                        pattern: Pattern::Increment { count: 1 << 16 },
                        next: 0,
                        fixups: vec![(check, false)],
                    }]
                } else {
                    Vec::new()
                };
                Stream { template: f.clone(), modifiers, remaining: Some(count), rate_pps: None, sent: 0, started: None }
            })
            .collect();
        PacketGenerator { streams, rng: 0x9e37_79b9_7f4a_7c15, hz: clock::hz(), next_stream: 0 }
    }

    fn rand(&mut self) -> u32 {
        // xorshift64*: cheap and good enough to spread flows.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
}

fn is_icmp4(p: &PacketSpec) -> bool {
    matches!(p.l4, L4Spec::IcmpEcho { .. }) && p.src.is_ipv4()
}

/// Write a whole address from an address list (`i` is its index), patching every
/// checksum word by word.
#[inline]
fn apply_address(frame: &mut [u8], m: &Modifier, i: u32) {
    let new = &m.addrs[i as usize][..m.addr_len];
    for w in 0..m.addr_len / 4 {
        let at = m.addr_start + 4 * w;
        let old = u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
        let nw = u32::from_be_bytes([new[4 * w], new[4 * w + 1], new[4 * w + 2], new[4 * w + 3]]);
        for &(c, udp) in &m.fixups {
            let cur = u16::from_be_bytes([frame[c], frame[c + 1]]);
            if udp && cur == 0 {
                continue;
            }
            let mut n = checksum::update32(cur, old, nw);
            if udp && n == 0 {
                n = 0xffff;
            }
            frame[c..c + 2].copy_from_slice(&n.to_be_bytes());
        }
        frame[at..at + 4].copy_from_slice(&nw.to_be_bytes());
    }
}

/// Apply one modifier's value `v` to a frame built from the template.
#[inline]
fn apply(frame: &mut [u8], m: &Modifier, v: u32) {
    if !m.addrs.is_empty() {
        return apply_address(frame, m, v);
    }
    let (old, new) = if m.wide {
        let new = v;
        frame[m.offset..m.offset + 4].copy_from_slice(&new.to_be_bytes());
        (m.base, new)
    } else {
        let new = v as u16;
        frame[m.offset..m.offset + 2].copy_from_slice(&new.to_be_bytes());
        (m.base, new as u32)
    };
    for &(c, udp) in &m.fixups {
        let cur = u16::from_be_bytes([frame[c], frame[c + 1]]);
        if udp && cur == 0 {
            continue; // UDP over IPv4 without a checksum stays without one.
        }
        let mut n = if m.wide { checksum::update32(cur, old, new) } else { checksum::update16(cur, old as u16, new as u16) };
        if udp && n == 0 {
            n = 0xffff;
        }
        frame[c..c + 2].copy_from_slice(&n.to_be_bytes());
    }
}

impl Device for PacketGenerator {
    fn kind(&self) -> &'static str {
        "pg"
    }

    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        let now = clock::now();
        let n_streams = self.streams.len();
        let start_len = out.len();
        let mut live = 0;
        for k in 0..n_streams {
            let si = (self.next_stream + k) % n_streams;
            let budget = max - (out.len() - start_len);
            if budget == 0 {
                live += 1;
                continue;
            }
            let hz = self.hz;
            let s = &mut self.streams[si];
            if s.remaining == Some(0) {
                continue;
            }
            live += 1;
            let started = *s.started.get_or_insert(now);
            let mut want = budget as u64;
            if let Some(r) = s.rate_pps {
                let due = (now.wrapping_sub(started) as u128 * r as u128 / hz.max(1) as u128) as u64 + 1;
                want = want.min(due.saturating_sub(s.sent));
            }
            if let Some(rem) = s.remaining {
                want = want.min(rem);
            }
            let first = out.len();
            let got = pool.alloc_regular_many(want as usize, out);
            for idx in first..first + got {
                // Values for this packet, drawn before borrowing the buffer.
                let mut vals = [0u32; MAX_MODIFIERS];
                for (j, m) in self.streams[si].modifiers.iter_mut().enumerate().take(MAX_MODIFIERS) {
                    vals[j] = match &m.pattern {
                        Pattern::Increment { count } => {
                            let v = m.base.wrapping_add(m.next);
                            m.next = (m.next + 1) % count;
                            v
                        }
                        Pattern::List(l) => {
                            let v = l[m.next as usize];
                            m.next = (m.next + 1) % l.len() as u32;
                            v
                        }
                        Pattern::Random { .. } => 0,
                        Pattern::Addresses(l) => {
                            let v = m.next;
                            m.next = (m.next + 1) % l.len() as u32;
                            v
                        }
                    };
                }
                for j in 0..self.streams[si].modifiers.len().min(MAX_MODIFIERS) {
                    if let Pattern::Random { count } = self.streams[si].modifiers[j].pattern {
                        let r = self.rand() % count;
                        vals[j] = self.streams[si].modifiers[j].base.wrapping_add(r);
                    }
                }
                let s = &self.streams[si];
                let b = pool.get_mut(out[idx]);
                // Template sizes were checked against the regular buffer capacity.
                let _ = b.write(&s.template);
                b.meta = engine::Meta::default();
                let frame = b.bytes_mut();
                for (j, m) in s.modifiers.iter().enumerate().take(MAX_MODIFIERS) {
                    apply(frame, m, if m.wide || vals[j] <= 0xffff { vals[j] } else { vals[j] & 0xffff });
                }
            }
            let s = &mut self.streams[si];
            s.sent += got as u64;
            if let Some(rem) = s.remaining.as_mut() {
                *rem -= got as u64;
            }
        }
        self.next_stream = (self.next_stream + 1) % n_streams.max(1);
        if live == 0 {
            RxStatus::Exhausted
        } else {
            RxStatus::Open
        }
    }

    /// A generator interface transmits into nothing (packets routed back out of it are
    /// counted and freed).
    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        crate::null::NullSink.tx(pool, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::udp::UdpPacket;

    fn spec(count: u64) -> StreamSpec {
        StreamSpec {
            name: "t".into(),
            packet: PacketSpec {
                src_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
                dst_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                src: "198.18.0.2".parse().unwrap(),
                dst: "198.19.1.1".parse().unwrap(),
                ttl: 64,
                l4: L4Spec::Udp { src_port: 1024, dst_port: 2152 },
                frame_size: 64,
            },
            modifiers: vec![
                ModifierSpec { field: Field::SrcAddr, pattern: Pattern::Increment { count: 256 } },
                ModifierSpec { field: Field::SrcPort, pattern: Pattern::Random { count: 1000 } },
            ],
            count: Some(count),
            rate_pps: None,
        }
    }

    #[test]
    fn every_packet_has_valid_checksums() {
        let mut g = PacketGenerator::new(&[spec(600)]).unwrap();
        let mut pool = Pool::new(1024, 0);
        let mut out = Vec::new();
        let mut srcs = std::collections::HashSet::new();
        while g.rx(&mut pool, &mut out, 256) == RxStatus::Open {}
        assert_eq!(out.len(), 600);
        for &b in &out {
            let f = pool.get(b).bytes();
            assert_eq!(f.len(), 64);
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            assert!(ip.verify_checksum());
            let u = UdpPacket::new_checked(ip.payload()).unwrap();
            assert!(u.verify_checksum_v4(ip.src_addr(), ip.dst_addr()), "udp checksum");
            assert!((1024..2024).contains(&u.src_port()));
            srcs.insert(ip.src_addr());
        }
        assert_eq!(srcs.len(), 256);
    }

    #[test]
    fn a_given_payload_follows_the_ip_header_as_given() {
        let payload: Vec<u8> = (0..37u8).collect();
        let mut s = spec(3);
        s.packet.l4 = L4Spec::Payload { protocol: 50, payload: payload.clone() };
        s.packet.frame_size = 14 + 20 + payload.len();
        s.modifiers = vec![ModifierSpec { field: Field::DstAddr, pattern: Pattern::Increment { count: 2 } }];
        let mut g = PacketGenerator::new(&[s.clone()]).unwrap();
        let mut pool = Pool::new(16, 0);
        let mut out = Vec::new();
        g.rx(&mut pool, &mut out, 256);
        assert_eq!(out.len(), 3);
        for &b in &out {
            let f = pool.get(b).bytes();
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!((u8::from(ip.protocol()), ip.payload()), (50, &payload[..]));
        }
        // The frame is exactly the payload's; ports are not there to modify.
        let mut wrong = s.clone();
        wrong.packet.frame_size += 1;
        assert_eq!(PacketGenerator::new(&[wrong]).err().map(|e| e.1), Some(TemplateError::PayloadSize { size: 72, exact: 71 }));
        s.modifiers = vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 2 } }];
        assert_eq!(PacketGenerator::new(&[s]).err().map(|e| e.1), Some(TemplateError::NoPorts));
    }

    #[test]
    fn ipv6_icmp_and_errors() {
        let mut s = spec(10);
        s.packet.src = "2001:db8::2".parse().unwrap();
        s.packet.dst = "2001:db8:1::1".parse().unwrap();
        s.packet.l4 = L4Spec::IcmpEcho { ident: 1, seq: 1 };
        s.modifiers = vec![ModifierSpec { field: Field::DstAddr, pattern: Pattern::Increment { count: 4 } }];
        let mut g = PacketGenerator::new(&[s.clone()]).unwrap();
        let mut pool = Pool::new(64, 0);
        let mut out = Vec::new();
        g.rx(&mut pool, &mut out, 256);
        for &b in &out {
            let f = pool.get(b).bytes();
            let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
            let icmp = wire::icmpv6::Icmpv6Packet::new_checked(ip.payload()).unwrap();
            assert!(icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
        }
        let mut list = s.clone();
        let addrs: Vec<IpAddr> = vec!["2001:db8:aa::1".parse().unwrap(), "2001:db8:bb:cc::7".parse().unwrap()];
        list.modifiers = vec![ModifierSpec { field: Field::DstAddr, pattern: Pattern::Addresses(addrs.clone()) }];
        let mut g = PacketGenerator::new(&[list]).unwrap();
        out.clear();
        g.rx(&mut pool, &mut out, 4);
        for (k, &b) in out.iter().enumerate() {
            let f = pool.get(b).bytes();
            let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
            assert_eq!(IpAddr::V6(ip.dst_addr()), addrs[k % 2]);
            let icmp = wire::icmpv6::Icmpv6Packet::new_checked(ip.payload()).unwrap();
            assert!(icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr()), "checksum after whole-address rewrite");
        }
        let mut bad = s.clone();
        bad.packet.frame_size = 40;
        assert!(matches!(PacketGenerator::new(&[bad]), Err((_, TemplateError::TooSmall { .. }))));
        let mut many = s.clone();
        many.modifiers = vec![ModifierSpec { field: Field::DstAddr, pattern: Pattern::Increment { count: 2 } }; 5];
        assert!(matches!(PacketGenerator::new(&[many]), Err((_, TemplateError::TooManyModifiers))));
        let mut ports = s;
        ports.modifiers = vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 4 } }];
        assert!(matches!(PacketGenerator::new(&[ports]), Err((_, TemplateError::NoPorts))));
    }
}
