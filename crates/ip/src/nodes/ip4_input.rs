//! `ip4-input`: validate the IPv4 header (version, IHL, total length against the frame,
//! checksum, options, source), trim Ethernet padding.

use crate::context::HasIp;
use crate::hint::{HeadMatch, HeadTemplate, TunnelHint};
use crate::tables::{UdpApp, UdpDemux};
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::ipv4::{Ipv4Error, Ipv4Packet, HEADER_LEN};

next_nodes! {
    pub enum Ip4InputNext { Lookup = "ip4-lookup", Parcel = "parcel4-input", Join = "parcel4-join", Ipsec = "ipsec4-input" }
}

counters! {
    pub enum Ip4InputCounter {
        Truncated(Warn, "truncated", "frame shorter than the IPv4 header or its total length"),
        BadVersion(Warn, "bad-version", "version field is not 4"),
        BadHeaderLength(Warn, "bad-ihl", "IHL below 5"),
        BadTotalLength(Warn, "bad-length", "total length below the header length"),
        BadChecksum(Warn, "bad-checksum", "header checksum mismatch"),
        BadOption(Warn, "bad-option", "malformed IPv4 option"),
        BadSource(Warn, "bad-source", "source address on network 0 or 127, multicast, reserved or limited broadcast"),
    }
}

pub struct Ip4Input;

/// The fast path's test, shared with nodes that hand on a packet without the hop through
/// `ip4-input` (GTP-U decap): version 4 with IHL 5, a total length within the frame, a
/// good header checksum, a source below multicast. The total length, or `None` for the
/// general path with its counters.
#[inline(always)]
pub fn fast_path_len(h: &[u8; HEADER_LEN], frame_len: usize) -> Option<usize> {
    let total = u16::from_be_bytes([h[2], h[3]]) as usize;
    (h[0] == 0x45 && total >= HEADER_LEN && total <= frame_len && wire::checksum::verify_ipv4_header(h) && forwardable_source(h[12]))
        .then_some(total)
}

/// The test `ethernet-input` runs on each IPv4 packet so that a tunnel packet for one of
/// our endpoints goes straight to its feature's node, skipping this node, the lookup and
/// `ip4-local` (the GTP-U deck's "bypass the first lookup", one node earlier): an
/// unfragmented UDP packet to a tunnel endpoint and port in `udp`, whose header passes
/// this node's fast-path checks (so nothing this node would refuse gets past it). The
/// feature, the packet's IP length and the tag of the worker's tunnel hint when the
/// packet matched it (else 0), or `None` (the packet goes through this node). Most
/// packets are turned away by the demux's filter on the destination, before any other
/// test; a packet of the tunnel hinted is known by one template test.
#[inline(always)]
pub fn tunnel_endpoint(udp: &UdpDemux, hint: Option<&TunnelHint<HeadTemplate<4>>>, b: &[u8]) -> Option<(UdpApp, usize, u32)> {
    // The header and the UDP ports (the fast path has no options).
    let h = b.first_chunk::<{ HEADER_LEN + 4 }>()?;
    if !udp.may_be_endpoint(u32::from_be_bytes([h[16], h[17], h[18], h[19]])) {
        return None;
    }
    if let Some(t) = hint.filter(|t| t.head.matches(b)) {
        // The template fixed version and IHL, the fragment fields, the protocol and a
        // unicast source (hints are only made for such peers): the length and the
        // checksum are left of this node's checks.
        let total = u16::from_be_bytes([h[2], h[3]]) as usize;
        return (total >= HEADER_LEN && total <= b.len() && wire::checksum::verify_ipv4_header(h.first_chunk()?)).then_some((
            t.app,
            total,
            t.tag.get(),
        ));
    }
    if h[9] != 17 || h[6] & 0x3f != 0 || h[7] != 0 {
        return None;
    }
    let total = fast_path_len(h.first_chunk::<HEADER_LEN>()?, b.len())?;
    let dst = std::net::Ipv4Addr::new(h[16], h[17], h[18], h[19]);
    Some((udp.bypass4(dst, u16::from_be_bytes([h[22], h[23]]))?, total, 0))
}

/// This node's checks of a packet the fast path did not take (options, errors): its
/// total length, or why it is dropped. Also for a node that hands on an inner packet
/// without the hop through this node (`esp4-decrypt`), so that a packet out of a tunnel
/// is held to the same rules as one from a wire.
#[inline]
pub fn full_check(b: &[u8]) -> Result<usize, Ip4InputCounter> {
    let p = Ipv4Packet::new_checked(b).map_err(counter)?;
    if !p.verify_checksum() {
        return Err(Ip4InputCounter::BadChecksum);
    }
    if p.header_len() > HEADER_LEN && p.check_options().is_err() {
        return Err(Ip4InputCounter::BadOption);
    }
    if !forwardable_source(p.src_addr().octets()[0]) {
        return Err(Ip4InputCounter::BadSource);
    }
    Ok(p.total_len())
}

fn counter(e: Ipv4Error) -> Ip4InputCounter {
    match e {
        Ipv4Error::Truncated => Ip4InputCounter::Truncated,
        Ipv4Error::BadVersion => Ip4InputCounter::BadVersion,
        Ipv4Error::BadHeaderLength => Ip4InputCounter::BadHeaderLength,
        Ipv4Error::BadTotalLength => Ip4InputCounter::BadTotalLength,
        Ipv4Error::BadChecksum => Ip4InputCounter::BadChecksum,
        Ipv4Error::BadOption => Ip4InputCounter::BadOption,
    }
}

impl<Cx: HasIp> Node<Cx> for Ip4Input {
    type Next = Ip4InputNext;
    type Counter = Ip4InputCounter;

    fn name(&self) -> &'static str {
        "ip4-input"
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, _: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        // Fast path for the common header (version 4, IHL 5): one bounds proof for all
        // 20 bytes; anything else, and every error, takes the general path below.
        if let Some(h) = buf.bytes().first_chunk::<HEADER_LEN>() {
            if let Some(total) = fast_path_len(h, buf.len()) {
                // UDP, where some link takes parcels: `parcel4-join` may coalesce it.
                let join = h[9] == 17 && cx.ip().tables.parcel_links != 0;
                // Arrived on an interface with an SPD: its inbound policies first.
                let ipsec = cx.ip().tables.has_spd(buf.meta.rx_if);
                buf.truncate(total);
                return Verdict::Next(match (ipsec, join) {
                    (true, _) => Ip4InputNext::Ipsec,
                    (false, true) => Ip4InputNext::Join,
                    (false, false) => Ip4InputNext::Lookup,
                });
            }
        }
        // An IP parcel: Total Length is its segment length, not its length, so the
        // trim below would cut it to one segment; `parcel4-input` checks it whole.
        if wire::parcel::is_ipv4_parcel(buf.bytes()) {
            return Verdict::Next(Ip4InputNext::Parcel);
        }
        let total = match full_check(buf.bytes()) {
            Ok(total) => total,
            Err(c) => return Verdict::Drop(c),
        };
        buf.truncate(total);
        if cx.ip().tables.has_spd(buf.meta.rx_if) {
            return Verdict::Next(Ip4InputNext::Ipsec);
        }
        Verdict::Next(Ip4InputNext::Lookup)
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip4(buf.bytes())
    }
}

/// RFC 1812 §5.3.7: never forward (or take) a packet whose source is on network 0 or
/// 127, multicast, reserved (240/4) or the limited broadcast: a test of the source's
/// first octet. A source that is one of the gateway's own addresses is forwarded, as
/// VPP does without uRPF: telling it apart costs a lookup per packet, which a link with
/// a reverse-path check pays (`crate::urpf`, `ip4-source-check`).
#[inline(always)]
fn forwardable_source(first_octet: u8) -> bool {
    !matches!(first_octet, 0 | 127 | 224..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    /// A GUE packet from 198.18.1.2 to 198.18.1.1 port 6080 (checksummed IPv4 header,
    /// zero UDP checksum, a data header for IPv4), `pad` bytes of Ethernet padding after.
    fn packet(src: [u8; 4], pad: usize) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 52, 0, 1, 0x40, 0, 64, 17, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&[198, 18, 1, 1, 0xc0, 0x01, 0x17, 0xc0, 0, 32, 0, 0, 0, 4, 0, 0]);
        p.resize(52 + pad, 0);
        let c = wire::checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    fn demux() -> UdpDemux {
        let mut d = UdpDemux::default();
        d.bypass4.push(("198.18.1.1".parse().unwrap(), 6080, UdpApp::Gue));
        d.seal();
        d
    }

    fn hint() -> TunnelHint<HeadTemplate<4>> {
        let head = HeadTemplate::new(&[
            (0, &[0x45], &[0xff]),
            (6, &[0, 0], &[0x3f, 0xff]),
            (9, &[17], &[0xff]),
            (12, &[198, 18, 1, 2, 198, 18, 1, 1], &[0xff; 8]),
            (22, &[0x17, 0xc0, 0, 0, 0, 0, 0, 4, 0, 0], &[0xff, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        ]);
        TunnelHint { head, app: UdpApp::Gue, tag: NonZeroU32::new(7).unwrap() }
    }

    #[test]
    fn martian_sources_are_not_forwardable() {
        for bad in ["0.0.0.0", "0.1.2.3", "127.0.0.1", "127.255.255.254", "224.0.0.5", "239.1.1.1", "240.0.0.1", "255.255.255.255"] {
            assert!(!forwardable_source(bad.parse::<std::net::Ipv4Addr>().unwrap().octets()[0]), "{bad}");
        }
        for good in ["1.0.0.1", "126.255.255.255", "128.0.0.1", "198.18.0.2", "223.255.255.255"] {
            assert!(forwardable_source(good.parse::<std::net::Ipv4Addr>().unwrap().octets()[0]), "{good}");
        }
    }

    #[test]
    fn the_hinted_tunnel_is_tagged_and_others_take_the_scan() {
        let (d, h) = (demux(), hint());
        assert_eq!(tunnel_endpoint(&d, Some(&h), &packet([198, 18, 1, 2], 8)), Some((UdpApp::Gue, 52, 7)));
        assert_eq!(tunnel_endpoint(&d, None, &packet([198, 18, 1, 2], 0)), Some((UdpApp::Gue, 52, 0)));
        // Another peer of the same endpoint: no tag, the demux's answer.
        assert_eq!(tunnel_endpoint(&d, Some(&h), &packet([198, 18, 1, 3], 0)), Some((UdpApp::Gue, 52, 0)));
    }

    #[test]
    fn a_hinted_packet_still_gets_ip4_inputs_checks() {
        let (d, h) = (demux(), hint());
        let mut bad_sum = packet([198, 18, 1, 2], 0);
        bad_sum[8] = 63;
        assert_eq!(tunnel_endpoint(&d, Some(&h), &bad_sum), None, "a bad header checksum goes to ip4-input");
        let short = packet([198, 18, 1, 2], 0);
        assert_eq!(tunnel_endpoint(&d, Some(&h), &short[..51]), None, "a total length past the frame");
        let mut fragment = packet([198, 18, 1, 2], 0);
        fragment[6] = 0x20;
        let c = wire::checksum::checksum(&{
            let mut z = fragment[..20].to_vec();
            z[10..12].fill(0);
            z
        });
        fragment[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(tunnel_endpoint(&d, Some(&h), &fragment), None, "a fragment goes to ip4-input and reassembly");
        let mut other_family = packet([198, 18, 1, 2], 0);
        other_family[29] = 41;
        assert_eq!(tunnel_endpoint(&d, Some(&h), &other_family), Some((UdpApp::Gue, 52, 0)), "not the hinted data header");
    }
}
