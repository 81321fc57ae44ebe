//! Outer IPv4 / IPv6 headers of UDP tunnels: what differs between the two families
//! (header parsing on receive, the pseudo-header, emitting a header), the UDP checksum
//! rules and the per-tunnel checksum mode. Shared by every UDP tunnel feature (GTP-U,
//! GUE and its kin); each adds its own per-family constants on top.

pub mod tos;

use crate::nodes::IcmpRequest;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::checksum::{self, Checksum};
use wire::ipv4::{Ipv4Packet, Ipv4Repr};
use wire::ipv6::{Ipv6Packet, Ipv6Repr};
use wire::IpProtocol;

/// The outer UDP checksum, per tunnel (draft-murakami-dmm-udp-checksum-impact-gtpu).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChecksumMode {
    /// Zero: always allowed over IPv4; over IPv6 per RFC 6935 (the receiver must be
    /// configured to accept it, RFC 6936).
    #[default]
    Zero,
    /// Computed by vecgate.
    Software,
    /// Left to the device (virtio-net NEEDS_CSUM); computed in software, and counted,
    /// when the outgoing device cannot.
    Offload,
}

impl std::str::FromStr for ChecksumMode {
    type Err = String;
    /// The names the config uses (`zero`, `software`, `offload`), for the CLI and bench.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "zero" => Ok(ChecksumMode::Zero),
            "software" => Ok(ChecksumMode::Software),
            "offload" => Ok(ChecksumMode::Offload),
            _ => Err(format!("{s:?}: expected zero, software or offload")),
        }
    }
}

/// What a tunnel does with an inner IPv4 packet without DF that is larger than its MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FragmentPolicy {
    /// Fragment the inner packet, then encapsulate each fragment: the far tunnel end
    /// decapsulates whole packets and the inner destination reassembles.
    #[default]
    Inner,
    /// Encapsulate the whole packet and fragment the outer one: the far tunnel end
    /// reassembles.
    Outer,
}

impl std::str::FromStr for FragmentPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "inner" => Ok(FragmentPolicy::Inner),
            "outer" => Ok(FragmentPolicy::Outer),
            _ => Err(format!("{s:?}: expected inner or outer")),
        }
    }
}

/// A tunnel's inner MTU: its outer link's MTU less the exact bytes of its headers
/// (outer IP, UDP, tunnel header and options), capped by a configured MTU (0: none).
#[inline(always)]
pub fn inner_mtu(link_mtu: Option<u16>, overhead: usize, configured: u16) -> usize {
    let path = link_mtu.map_or(usize::MAX, |m| (m as usize).saturating_sub(overhead));
    if configured == 0 {
        path
    } else {
        path.min(configured as usize)
    }
}

/// What a tunnel does with an inner packet, given its inner MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InnerFit {
    Fits,
    /// Too big and may not be fragmented here (IPv4 with DF, IPv6): tell the source
    /// (ICMP frag-needed / Packet Too Big with the tunnel's MTU, RFC 1191 / RFC 8201).
    TooBig {
        v4: bool,
        icmp: IcmpRequest,
    },
    /// IPv4 without DF under the `inner` policy: fragment to this size, then encapsulate
    /// (an IP parcel, with DF or not: split into its datagrams, see `ipN-fragment`).
    FragmentInner(u16),
    /// Encapsulate whole and fragment the outer packet: IPv4 without DF under the
    /// `outer` policy, or IPv6 no larger than 1280 bytes, which every IPv6 link must
    /// carry (a tunnel narrower than that fragments its outer packets, RFC 2473 §7.1).
    FragmentOuter,
}

/// Does the inner packet (at the buffer start) fit a tunnel of inner MTU `mtu`? A GSO
/// frame is judged by its segments.
#[inline(always)]
pub fn inner_fit(buf: &engine::Buffer, mtu: usize, policy: FragmentPolicy) -> InnerFit {
    let b = buf.bytes();
    if b.len() <= mtu {
        return InnerFit::Fits;
    }
    let len = crate::nodes::wire_segment_len(buf, b.len());
    if len <= mtu {
        return InnerFit::Fits;
    }
    let report = mtu.min(u16::MAX as usize) as u16;
    // An IP parcel follows the fragment policy, DF or not: whole in fragmented outer
    // packets, or split into its datagrams by `ipN-fragment`; never frag-needed or
    // Packet Too Big, which its source could not act on.
    if is_parcel(b) {
        return match policy {
            FragmentPolicy::Inner => InnerFit::FragmentInner(report),
            FragmentPolicy::Outer => InnerFit::FragmentOuter,
        };
    }
    match b.first().map(|v| v >> 4) {
        Some(4) if b.get(6).is_some_and(|f| f & 0x40 != 0) => {
            InnerFit::TooBig { v4: true, icmp: IcmpRequest::new(3, wire::icmpv4::unreach::FRAG_NEEDED, report) }
        }
        Some(4) => match policy {
            FragmentPolicy::Inner => InnerFit::FragmentInner(report),
            FragmentPolicy::Outer => InnerFit::FragmentOuter,
        },
        Some(6) if len <= 1280 => InnerFit::FragmentOuter,
        Some(6) => InnerFit::TooBig { v4: false, icmp: IcmpRequest::new(2, 0, report.max(1280)) },
        _ => InnerFit::Fits,
    }
}

/// An IPv4 or IPv6 parcel (`wire::parcel`), by its header.
#[inline]
fn is_parcel(b: &[u8]) -> bool {
    match b.first().map(|v| v >> 4) {
        Some(4) => wire::parcel::is_ipv4_parcel(b),
        Some(6) => wire::parcel::is_ipv6_parcel(b),
        _ => false,
    }
}

/// A tunnel's MTU settings, the same for every tunnel kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct MtuPolicy {
    /// Inner MTU cap (0: the outer path's MTU less the tunnel's headers, alone).
    pub mtu: u16,
    pub fragment: FragmentPolicy,
    /// Lower the MSS of TCP SYNs entering and leaving the tunnel to fit its MTU.
    pub mss_clamp: bool,
}

impl MtuPolicy {
    /// IPv4's minimum datagram (RFC 791) to a jumbo frame's payload.
    pub const MIN_MTU: u16 = 576;
    pub const MAX_MTU: u16 = 9216;

    /// The settings as configured, checked: the field at fault and why, for config and
    /// API errors alike.
    pub fn checked(mtu: Option<u16>, fragment: FragmentPolicy, mss_clamp: bool) -> Result<MtuPolicy, (&'static str, String)> {
        if let Some(m) = mtu {
            if !(Self::MIN_MTU..=Self::MAX_MTU).contains(&m) {
                return Err(("mtu", format!("{m}: expected {} to {} bytes", Self::MIN_MTU, Self::MAX_MTU)));
            }
        }
        Ok(MtuPolicy { mtu: mtu.unwrap_or(0), fragment, mss_clamp })
    }
}

/// The tunnel-MTU step before encapsulation, for every UDP tunnel's encap node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncapMtu {
    /// Encapsulate. `fragment_outer`: then fragment the outer packet to this link MTU
    /// if it is larger. `clamped`: a SYN's MSS was lowered.
    Encap { fragment_outer: Option<u16>, clamped: bool },
    /// Send to `ip4-icmp-error` / `ip6-icmp-error` (`meta.param` set).
    TooBig { v4: bool },
    /// Send to `ip4-fragment` (`meta.param` set), or `ip6-fragment` for an IPv6 parcel
    /// (to be split); the fragments or datagrams come back by the route.
    FragmentInner,
    /// A GSO frame: segment it first (its segments come back by the route).
    Segment,
}

/// Decide what a tunnel does with the inner packet at the buffer start, given the MTU
/// of the link its outer packets leave on (unknown when the outer route is not
/// resolved) and the tunnel's header bytes; clamp a SYN's MSS when configured. A GSO
/// frame whose segments are too big with DF is answered at once, not segmented first.
#[inline(always)]
pub fn encap_mtu(buf: &mut engine::Buffer, link_mtu: Option<u16>, overhead: usize, policy: MtuPolicy) -> EncapMtu {
    // The common case in a few instructions: a plain packet that fits the link, in a
    // tunnel with no MTU cap and no clamping.
    let plain = policy.mtu == 0 && !policy.mss_clamp && buf.meta.offload.gso == engine::GsoKind::None;
    if plain && link_mtu.is_some_and(|m| buf.len() + overhead <= m as usize) {
        return EncapMtu::Encap { fragment_outer: None, clamped: false };
    }
    let mtu = inner_mtu(link_mtu, overhead, policy.mtu);
    let fit = inner_fit(buf, mtu, policy.fragment);
    if let InnerFit::TooBig { v4, icmp } = fit {
        buf.meta.param = icmp.encode();
        return EncapMtu::TooBig { v4 };
    }
    if buf.meta.offload.gso != engine::GsoKind::None {
        return EncapMtu::Segment;
    }
    // Outer fragments reassemble into one IP packet, at most 65535 bytes: a longer one
    // is fragmented (or, a parcel, split) before it enters.
    let fit = match fit {
        InnerFit::FragmentOuter if buf.len() + overhead > u16::MAX as usize => InnerFit::FragmentInner(mtu.min(u16::MAX as usize) as u16),
        fit => fit,
    };
    let fragment_outer = match fit {
        InnerFit::FragmentInner(m) => {
            buf.meta.param = crate::nodes::FragmentRequest { mtu: m, originated: false }.encode();
            return EncapMtu::FragmentInner;
        }
        InnerFit::FragmentOuter => link_mtu,
        _ => None,
    };
    let clamped = policy.mss_clamp && {
        let partial = buf.meta.offload.has_partial_checksum();
        crate::mss::clamp_syn_mss(buf.bytes_mut(), mtu, partial)
    };
    EncapMtu::Encap { fragment_outer, clamped }
}

/// After encapsulation under [`EncapMtu::Encap`]: true (with `meta.param` set for
/// `ipN-fragment`) when the outer packet must be fragmented to the link MTU.
#[inline(always)]
pub fn fragment_outer(buf: &mut engine::Buffer, link_mtu: Option<u16>) -> bool {
    match link_mtu {
        Some(m) if buf.len() > m as usize => {
            buf.meta.param = crate::nodes::FragmentRequest { mtu: m, originated: true }.encode();
            true
        }
        _ => false,
    }
}

/// MSS clamping on a packet leaving a tunnel (the inner packet at the buffer start):
/// a SYN from the far side announces at most what fits this tunnel. True when lowered.
#[inline(always)]
pub fn decap_mss_clamp(buf: &mut engine::Buffer, link_mtu: Option<u16>, overhead: usize, policy: MtuPolicy) -> bool {
    if !policy.mss_clamp {
        return false;
    }
    let partial = buf.meta.offload.has_partial_checksum();
    crate::mss::clamp_syn_mss(buf.bytes_mut(), inner_mtu(link_mtu, overhead, policy.mtu), partial)
}

/// What entering a tunnel did to the inner packet, or why it cannot enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InnerHop {
    /// TTL / hop limit decremented; the inner packet is IPv4 (`true`) or IPv6, its traffic
    /// class `tc` (DSCP and ECN: what the outer header takes, [`tos`]).
    Forwarded { v4: bool, tc: u8 },
    /// The TTL or hop limit would reach 0: the ICMP error to send (time exceeded), to be
    /// built by `ip4-icmp-error` (`v4`) or `ip6-icmp-error`.
    Expired { v4: bool, icmp: crate::nodes::IcmpRequest },
    /// Not an IPv4 or IPv6 packet.
    NotIp,
}

/// Entering a tunnel is a routing hop for the inner packet (as `ipN-rewrite` is for any
/// other interface): TTL / hop limit down by one, ICMP time exceeded when it runs out.
#[inline(always)]
pub fn inner_hop(b: &mut [u8]) -> InnerHop {
    use crate::nodes::IcmpRequest;
    match b.first().map(|v| v >> 4) {
        Some(4) if b.len() >= 20 => {
            if b[8] <= 1 {
                return InnerHop::Expired { v4: true, icmp: IcmpRequest::new(11, 0, 0) };
            }
            Ipv4Packet::new_unchecked(&mut b[..20]).decrement_ttl();
            InnerHop::Forwarded { v4: true, tc: b[1] }
        }
        Some(6) if b.len() >= 40 => {
            if b[7] <= 1 {
                return InnerHop::Expired { v4: false, icmp: IcmpRequest::new(3, 0, 0) };
            }
            b[7] -= 1;
            InnerHop::Forwarded { v4: false, tc: (b[0] << 4) | (b[1] >> 4) }
        }
        _ => InnerHop::NotIp,
    }
}

impl ChecksumMode {
    /// Before an outer checksum in this mode covers the inner packet, complete the inner
    /// packet's pending partial checksum (from a vnet-header device). Under a zero outer
    /// checksum it stays pending at its shifted position for the transmitting device.
    /// True when one was completed.
    #[inline(always)]
    pub fn settle_inner_checksum(self, buf: &mut engine::Buffer) -> bool {
        if self == ChecksumMode::Zero {
            return false;
        }
        match buf.take_partial_checksum() {
            Some((start, offset)) => {
                checksum::complete_partial(buf.bytes_mut(), start, offset);
                true
            }
            None => false,
        }
    }

    /// Check a configured mode and zero-checksum acceptance against the outer family:
    /// the field at fault and why, for config and API errors alike.
    pub fn check_for(checksum: Option<ChecksumMode>, accept_zero_checksum: bool, local: IpAddr) -> Result<(), (&'static str, String)> {
        if checksum == Some(ChecksumMode::Offload) && local.is_ipv4() {
            return Err(("checksum", "offload is for IPv6 outer headers; over IPv4 choose zero or software".into()));
        }
        if accept_zero_checksum && local.is_ipv4() {
            return Err(("accept_zero_checksum", "IPv4 always accepts a zero UDP checksum; this is an IPv6 setting".into()));
        }
        Ok(())
    }
}

/// Why an outer header cannot carry a tunnel packet to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterError {
    Truncated,
    /// IPv6 extension headers before UDP, or an IPv4 fragment (reassembly comes with
    /// tunnel MTU handling).
    NotPlainUdp,
}

/// What differs between a UDP tunnel over IPv4 and over IPv6.
pub trait OuterFamily: Send + 'static {
    type Addr: Copy + Eq + Send + std::hash::Hash + Into<IpAddr> + std::fmt::Display;
    /// The IP family's forwarding side (adjacency resolution).
    type Ip: crate::nodes::family::Family<Addr = Self::Addr>;
    const IS_V6: bool;
    /// Outer header length, source and destination of a packet that reached us.
    fn outer(b: &[u8]) -> Result<(usize, Self::Addr, Self::Addr), OuterError>;
    /// The pseudo-header sum (without length) for a UDP checksum.
    fn pseudo(src: &Self::Addr, dst: &Self::Addr) -> Checksum;
    /// Emit a 20- or 40-byte header for a packet we originate; returns its length.
    fn emit_header(src: Self::Addr, dst: Self::Addr, payload_len: usize, out: &mut [u8]) -> usize {
        Self::emit_header_with(src, dst, payload_len, 0, out)
    }
    /// [`OuterFamily::emit_header`] with traffic class `tc` (DSCP and ECN, [`tos`]).
    fn emit_header_with(src: Self::Addr, dst: Self::Addr, payload_len: usize, tc: u8, out: &mut [u8]) -> usize;
}

pub struct Ip4Outer;
pub struct Ip6Outer;

impl OuterFamily for Ip4Outer {
    type Addr = Ipv4Addr;
    type Ip = crate::nodes::family::Ip4;
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
    fn pseudo(src: &Ipv4Addr, dst: &Ipv4Addr) -> Checksum {
        checksum::pseudo_header_v4(*src, *dst, 17, 0)
    }
    fn emit_header_with(src: Ipv4Addr, dst: Ipv4Addr, payload_len: usize, tc: u8, out: &mut [u8]) -> usize {
        // An atomic datagram (RFC 6864): identification 0 is fine, and a path that cannot
        // carry it answers with frag-needed.
        let (dscp, ecn) = (tc >> 2, tc & tos::CE);
        let r = Ipv4Repr { src, dst, protocol: IpProtocol::Udp, payload_len, ttl: 64, dscp, ecn, ident: 0, dont_frag: true };
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..20]));
        20
    }
}

impl OuterFamily for Ip6Outer {
    type Addr = Ipv6Addr;
    type Ip = crate::nodes::family::Ip6;
    const IS_V6: bool = true;
    #[inline(always)]
    fn outer(b: &[u8]) -> Result<(usize, Ipv6Addr, Ipv6Addr), OuterError> {
        let h = b.first_chunk::<40>().ok_or(OuterError::Truncated)?;
        let hl = if h[6] == 17 { 40 } else { 40 + options_before_udp(h[6], &b[40..])? };
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&h[8..24]);
        d.copy_from_slice(&h[24..40]);
        Ok((hl, Ipv6Addr::from(s), Ipv6Addr::from(d)))
    }
    #[inline(always)]
    fn pseudo(src: &Ipv6Addr, dst: &Ipv6Addr) -> Checksum {
        checksum::pseudo_header_v6(src, dst, 17, 0)
    }
    fn emit_header_with(src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize, tc: u8, out: &mut [u8]) -> usize {
        let r = Ipv6Repr { src, dst, next_header: IpProtocol::Udp, payload_len, hop_limit: 64, traffic_class: tc, flow_label: 0 };
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..40]));
        40
    }
}

/// The length of the Hop-by-Hop and Destination Options headers between an IPv6 header
/// and UDP, the first named by `first`, in `payload` (the bytes after the fixed header).
/// Linux's ip6tnl and ip6gre put a Tunnel Encapsulation Limit option (RFC 2473) in a
/// Destination Options header before the UDP of their fou/GUE encapsulation by default;
/// `ip6-local` has acted on the options by the time a tunnel node reads past them. A
/// fragment (not reassembled) or a routing header (the pseudo-header's destination would
/// be another) is not plain UDP.
fn options_before_udp(first: u8, payload: &[u8]) -> Result<usize, OuterError> {
    let info = wire::ipv6_ext::walk_chain(IpProtocol::from(first), payload).map_err(|_| OuterError::Truncated)?;
    if info.upper != Some(IpProtocol::Udp) || info.fragment.is_some() || info.routing.is_some() {
        return Err(OuterError::NotPlainUdp);
    }
    Ok(info.upper_offset)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_parcels::{parcel4, parcel6};

    /// An IPv6 header from 2001:db8:1::2 to 2001:db8:1::1 naming `next`, then `ext`,
    /// then a UDP header.
    fn v6_packet(next: u8, ext: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, (ext.len() + 8) as u8, next, 64];
        p.extend_from_slice(&"2001:db8:1::2".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&"2001:db8:1::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(ext);
        p.extend_from_slice(&[0xc0, 0x01, 0x15, 0xb5, 0, 8, 0, 0]);
        p
    }

    #[test]
    fn ipv6_outer_skips_options_before_udp() {
        let (src, dst): (Ipv6Addr, Ipv6Addr) = ("2001:db8:1::2".parse().unwrap(), "2001:db8:1::1".parse().unwrap());
        assert_eq!(Ip6Outer::outer(&v6_packet(17, &[])), Ok((40, src, dst)));
        // Linux's ip6tnl: a Destination Options header with a Tunnel Encapsulation Limit
        // of 4 (option 4, length 1) and a PadN.
        let limit = [17, 0, 4, 1, 4, 1, 1, 0];
        assert_eq!(Ip6Outer::outer(&v6_packet(60, &limit)), Ok((48, src, dst)));
        // Hop-by-Hop then Destination Options.
        let both = [60, 0, 1, 4, 0, 0, 0, 0, 17, 0, 4, 1, 4, 1, 1, 0];
        assert_eq!(Ip6Outer::outer(&v6_packet(0, &both)), Ok((56, src, dst)));
        // A fragment, a routing header, something else than UDP: not plain UDP.
        assert_eq!(Ip6Outer::outer(&v6_packet(44, &[17, 0, 0, 1, 0, 0, 0, 7])), Err(OuterError::NotPlainUdp));
        assert_eq!(Ip6Outer::outer(&v6_packet(43, &[17, 0, 0, 0, 0, 0, 0, 0])), Err(OuterError::NotPlainUdp));
        assert_eq!(Ip6Outer::outer(&v6_packet(6, &[])), Err(OuterError::NotPlainUdp));
        // Options past the packet.
        assert_eq!(Ip6Outer::outer(&v6_packet(60, &limit)[..44]), Err(OuterError::Truncated));
    }

    /// What `encap_mtu` decides for `packet` in a tunnel of `overhead` header bytes over a
    /// 1500-byte link under `fragment`.
    fn decide(packet: &[u8], overhead: usize, fragment: FragmentPolicy) -> EncapMtu {
        let mut pool = engine::Pool::new(1, 1);
        let b = pool.alloc(packet.len()).unwrap();
        pool.get_mut(b).write(packet).unwrap();
        encap_mtu(pool.get_mut(b), Some(1500), overhead, MtuPolicy { mtu: 0, fragment, mss_clamp: false })
    }

    #[test]
    fn ipv6_parcels_follow_the_fragment_policy_never_packet_too_big() {
        use FragmentPolicy::{Inner, Outer};
        let frag_outer = EncapMtu::Encap { fragment_outer: Some(1500), clamped: false };
        // 8 x 1000 B (8064 B) over GUE in IPv4 (32 B) and in IPv6 (52 B).
        let p = parcel6(8, 1000);
        for overhead in [32, 52] {
            assert_eq!(decide(&p, overhead, Outer), frag_outer);
            assert_eq!(decide(&p, overhead, Inner), EncapMtu::FragmentInner);
        }
        // Within the tunnel's MTU, a parcel is just a packet.
        assert_eq!(decide(&parcel6(2, 500), 52, Inner), EncapMtu::Encap { fragment_outer: None, clamped: false });
        // Longer than one outer IP packet can be: split whatever the policy.
        let long = parcel6(32, 2044);
        assert!(long.len() <= u16::MAX as usize && long.len() + 32 > u16::MAX as usize);
        assert_eq!(decide(&long, 32, Outer), EncapMtu::FragmentInner);
        // An IPv4 parcel with DF: the policy too, no frag-needed.
        let mut p4 = parcel4(4, 1000);
        p4[6] |= 0x40;
        assert!(wire::parcel::is_ipv4_parcel(&p4));
        assert_eq!(decide(&p4, 32, Outer), frag_outer);
        assert_eq!(decide(&p4, 32, Inner), EncapMtu::FragmentInner);
        // An ordinary IPv6 packet of the same size: Packet Too Big, as before.
        let mut plain = p.clone();
        plain[4..6].copy_from_slice(&((p.len() - 40) as u16).to_be_bytes());
        plain[6] = 17;
        assert_eq!(decide(&plain, 52, Outer), EncapMtu::TooBig { v4: false });
    }
}
