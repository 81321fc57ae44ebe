//! `ip6-input`: validate the fixed header and the hop-by-hop header (the one extension
//! header routers must process, RFC 8200 §4.3), trim padding, send link-scope and other
//! multicast to `ip6-local`.

use super::IcmpRequest;
use crate::context::HasIp;
use crate::hint::{HeadMatch, HeadTemplate, TunnelHint};
use crate::tables::{UdpApp, UdpDemux};
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::ipv6::{Ipv6Error, Ipv6Packet, HEADER_LEN};
use wire::ipv6_ext::{walk_chain, OptionAction};
use wire::IpProtocol;

next_nodes! {
    pub enum Ip6InputNext { Lookup = "ip6-lookup", Local = "ip6-local", IcmpError = "ip6-icmp-error", Parcel = "parcel6-input", Join = "parcel6-join", Ipsec = "ipsec6-input" }
}

counters! {
    pub enum Ip6InputCounter {
        Truncated(Warn, "truncated", "frame shorter than the IPv6 header or its payload length"),
        BadVersion(Warn, "bad-version", "version field is not 6"),
        BadJumbo(Warn, "bad-jumbo", "payload length 0 without a valid jumbo payload option"),
        BadSource(Warn, "bad-source", "source address is multicast or the loopback address"),
        BadHopByHop(Warn, "bad-hop-by-hop", "malformed hop-by-hop options header"),
        OptionDiscard(Warn, "option-discard", "unrecognised hop-by-hop option says discard"),
        OptionParamProblem(Info, "option-param-problem", "unrecognised hop-by-hop option: ICMP parameter problem requested"),
    }
}

pub struct Ip6Input;

/// The fast path's test, shared with nodes that skip the hop through `ip6-input` (GTP-U
/// decap): version 6, no hop-by-hop header, unicast source and destination, a non-empty
/// payload within the frame. A source in ::/8 (the unspecified and loopback addresses
/// among them) takes the general path too, which refuses ::1. The packet's end, or
/// `None` for the general path.
#[inline(always)]
pub fn fast_path_len(h: &[u8; HEADER_LEN], frame_len: usize) -> Option<usize> {
    let end = HEADER_LEN + u16::from_be_bytes([h[4], h[5]]) as usize;
    (h[0] >> 4 == 6 && h[6] != 0 && !matches!(h[8], 0 | 0xff) && h[24] != 0xff && end <= frame_len && end > HEADER_LEN).then_some(end)
}

/// [`super::ip4_input::tunnel_endpoint`] for IPv6: a UDP packet (no extension headers)
/// to one of our tunnel endpoints and ports, whose header passes this node's fast-path
/// checks. The feature, the packet's end and the hint's tag (0 when it did not match),
/// or `None`.
#[inline(always)]
pub fn tunnel_endpoint(udp: &UdpDemux, hint: Option<&TunnelHint<HeadTemplate<7>>>, b: &[u8]) -> Option<(UdpApp, usize, u32)> {
    let h = b.first_chunk::<{ HEADER_LEN + 4 }>()?;
    if !udp.may_be_endpoint(u32::from_be_bytes([h[36], h[37], h[38], h[39]])) {
        return None;
    }
    if let Some(t) = hint.filter(|t| t.head.matches(b)) {
        // The template fixed the version, UDP as the next header and both addresses
        // (a unicast peer, our endpoint): the payload length is left.
        let end = HEADER_LEN + u16::from_be_bytes([h[4], h[5]]) as usize;
        return (end > HEADER_LEN && end <= b.len()).then_some((t.app, end, t.tag.get()));
    }
    if h[6] != 17 {
        return None;
    }
    let end = fast_path_len(h.first_chunk::<HEADER_LEN>()?, b.len())?;
    let mut d = [0u8; 16];
    d.copy_from_slice(&h[24..40]);
    Some((udp.bypass6(&std::net::Ipv6Addr::from(d), u16::from_be_bytes([h[42], h[43]]))?, end, 0))
}

/// What [`full_check`] found in a packet it did not refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ip6Checked {
    /// The packet's end (a jumbogram's from its jumbo option) and whether its
    /// destination is multicast.
    Pass { len: usize, dst_multicast: bool },
    /// An unrecognised hop-by-hop option asks for an ICMP parameter problem (code 2)
    /// pointing at it (`pointer`, from the IPv6 header's start): not forwarded.
    ParamProblem { pointer: u16 },
}

/// The ICMPv6 error about an unrecognised option at `pointer` (from the IPv6 header's
/// start) whose type asks for one: parameter problem, code 2 (RFC 4443 §3.4, RFC 8200
/// §4.2). Also `esp6-decrypt`'s, for an inner packet with such an option.
pub const fn option_param_problem(pointer: u16) -> IcmpRequest {
    IcmpRequest::new(4, 2, pointer)
}

/// This node's checks of a packet the fast path did not take (a hop-by-hop header,
/// multicast, errors). Also for a node that hands on an inner packet without the hop
/// through this node (`esp6-decrypt`), so that a packet out of a tunnel is held to the
/// same rules as one from a wire.
#[inline]
pub fn full_check(b: &[u8]) -> Result<Ip6Checked, Ip6InputCounter> {
    use Ip6InputCounter as C;
    let p = match Ipv6Packet::new_checked(b) {
        Ok(p) => p,
        Err(Ipv6Error::BadVersion) => return Err(C::BadVersion),
        Err(_) => return Err(C::Truncated),
    };
    let dst_multicast = p.dst_addr().is_multicast();
    // RFC 4291 §2.5.3: ::1 never leaves a node, so it never arrives from a link.
    let src = p.src_addr();
    if src.is_multicast() || src.is_loopback() {
        return Err(C::BadSource);
    }
    let mut len = HEADER_LEN + p.payload_len();
    if p.next_header() == IpProtocol::HopByHop {
        let Ok(info) = walk_chain(IpProtocol::HopByHop, p.payload()) else {
            return Err(C::BadHopByHop);
        };
        if let Some((off, action)) = info.unknown_option {
            let icmp = match action {
                OptionAction::Skip => false,
                OptionAction::Discard => false,
                OptionAction::DiscardSendIcmp => true,
                OptionAction::DiscardSendIcmpUnlessMulticast => !dst_multicast,
            };
            if !icmp {
                return Err(C::OptionDiscard);
            }
            return Ok(Ip6Checked::ParamProblem { pointer: (HEADER_LEN + off) as u16 });
        }
        if p.is_jumbo_candidate() {
            // RFC 2675: the jumbo option carries a length > 65535 that must fit.
            match info.jumbo_len {
                Some(j) if j > 65_535 && HEADER_LEN + j as usize <= b.len() => len = HEADER_LEN + j as usize,
                _ => return Err(C::BadJumbo),
            }
        } else if info.jumbo_len.is_some() {
            return Err(C::BadJumbo);
        }
    }
    Ok(Ip6Checked::Pass { len, dst_multicast })
}

impl<Cx: HasIp> Node<Cx> for Ip6Input {
    type Next = Ip6InputNext;
    type Counter = Ip6InputCounter;

    fn name(&self) -> &'static str {
        "ip6-input"
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use Ip6InputCounter as C;
        // Fast path: version 6, no hop-by-hop header, unicast source and destination,
        // payload within the frame; one bounds proof for the 40 header bytes.
        if let Some(h) = buf.bytes().first_chunk::<HEADER_LEN>() {
            if let Some(end) = fast_path_len(h, buf.len()) {
                // UDP, where some link takes parcels: `parcel6-join` may coalesce it.
                let join = h[6] == 17 && cx.ip().tables.parcel_links != 0;
                // Arrived on an interface with an SPD: its inbound policies first.
                let ipsec = cx.ip().tables.has_spd(buf.meta.rx_if);
                buf.truncate(end);
                return Verdict::Next(match (ipsec, join) {
                    (true, _) => Ip6InputNext::Ipsec,
                    (false, true) => Ip6InputNext::Join,
                    (false, false) => Ip6InputNext::Lookup,
                });
            }
        }
        // An IP parcel (a jumbo option with a non-zero Payload Length, its segment
        // length): `parcel6-input` checks it whole.
        if wire::parcel::is_ipv6_parcel(buf.bytes()) {
            return Verdict::Next(Ip6InputNext::Parcel);
        }
        let (len, dst_multicast) = match full_check(buf.bytes()) {
            Ok(Ip6Checked::Pass { len, dst_multicast }) => (len, dst_multicast),
            Ok(Ip6Checked::ParamProblem { pointer }) => {
                counts.inc(C::OptionParamProblem);
                buf.meta.param = option_param_problem(pointer).encode();
                return Verdict::Next(Ip6InputNext::IcmpError);
            }
            Err(c) => return Verdict::Drop(c),
        };
        buf.truncate(len);
        if dst_multicast {
            return Verdict::Next(Ip6InputNext::Local);
        }
        if cx.ip().tables.has_spd(buf.meta.rx_if) {
            return Verdict::Next(Ip6InputNext::Ipsec);
        }
        Verdict::Next(Ip6InputNext::Lookup)
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip6(buf.bytes())
    }
}
