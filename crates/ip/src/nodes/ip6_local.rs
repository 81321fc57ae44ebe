//! `ip6-local`: packets for the gateway's own addresses and the multicast groups it
//! listens to: echo replies, neighbour discovery (answer solicitations for our
//! addresses, learn from solicitations and advertisements), ICMPv6 errors for the rest.

use super::IcmpRequest;
use crate::context::{HasIp, IpContext};
use crate::tables::{l2_rewrite, UdpApp};
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use std::net::{IpAddr, Ipv6Addr};
use wire::icmpv6::{unreach, Icmpv6Packet, Icmpv6Repr, NaFlags};
use wire::ipv6::{Ipv6Packet, Ipv6Repr, HEADER_LEN};
use wire::ipv6_ext::walk_chain;
use wire::{EtherType, EthernetAddress, IpProtocol};

next_nodes! {
    pub enum Ip6LocalNext { Lookup = "ip6-lookup", IcmpError = "ip6-icmp-error", Output = "interface-output", Gtpu6Input = "gtpu6-input", Gue6Input = "gue6-input", Reassembly = "ip6-reassembly", Lb6Nat = "lb6-nat", Esp6Decrypt = "esp6-decrypt", Esp6Pmtu = "esp6-pmtu", Punt = "ip-punt", Segment = "ip-gso-segment" }
}

counters! {
    pub enum Ip6LocalCounter {
        EchoReplies(Info, "echo-replies", "ICMPv6 echo replies sent"),
        NaSent(Info, "na-sent", "neighbour advertisements sent for our addresses"),
        RateLimited(Warn, "rate-limited", "echo request or solicitation not answered: reply rate limit"),
        Learned(Info, "learned", "neighbours reported to the control plane"),
        LearnQueueFull(Warn, "learn-queue-full", "neighbour could not be reported: control queue full"),
        NdConsumed(Info, "nd-consumed", "advertisements and other ND messages consumed"),
        NdNotForUs(Info, "nd-not-for-us", "solicitation for an address that is not ours"),
        IcmpMalformed(Warn, "icmp-malformed", "ICMPv6 truncated, bad checksum, or invalid ND"),
        IcmpIgnored(Info, "icmp-ignored", "ICMPv6 messages other than echo request and ND (and packet-too-big about ESP: esp6-pmtu), consumed"),
        GsoToSegment(Info, "gso-to-segment", "UDP GSO frames of several datagrams to a tunnel's port, sent to ip-gso-segment first: each datagram is decapsulated on its own"),
        PortUnreachable(Info, "port-unreachable", "UDP to a port nothing listens on (ICMPv6 requested)"),
        UnknownNextHeader(Info, "unknown-next-header", "upper-layer protocol not handled (ICMPv6 parameter problem requested)"),
        NotOurGroup(Info, "not-our-group", "multicast to a group this interface does not listen to"),
        BadExtHeader(Warn, "bad-ext-header", "malformed extension header chain"),
        Fragment(Info, "to-reassembly", "fragment addressed to the gateway: sent to ip6-reassembly"),
        NoHeadroom(Error, "no-headroom", "no headroom for the Ethernet header"),
        NoInterface(Error, "no-interface", "received on an interface without L3 configuration"),
    }
}

pub struct Ip6Local;

impl<Cx: HasIp> Node<Cx> for Ip6Local {
    type Next = Ip6LocalNext;
    type Counter = Ip6LocalCounter;

    fn name(&self) -> &'static str {
        "ip6-local"
    }

    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = cx.ip();
        use Ip6LocalCounter as C;
        let Ok(p) = Ipv6Packet::new_checked(buf.bytes()) else {
            return Verdict::Drop(C::BadExtHeader);
        };
        let rx = buf.meta.rx_if;
        let Some(ifl) = cx.tables.interface(rx) else {
            return Verdict::Drop(C::NoInterface);
        };
        let (src, dst, hop_limit) = (p.src_addr(), p.dst_addr(), p.hop_limit());
        if dst.is_multicast() && !ifl.listens_ip6(&dst) {
            return Verdict::Drop(C::NotOurGroup);
        }
        let Ok(info) = walk_chain(p.next_header(), p.payload()) else {
            return Verdict::Drop(C::BadExtHeader);
        };
        if info.fragment.is_some() {
            counts.inc(C::Fragment);
            buf.meta.param = 0;
            return Verdict::Next(Ip6LocalNext::Reassembly);
        }
        let off = HEADER_LEN + info.upper_offset;
        // A host daemon's TCP port (BGP, SSH) before the load balancer's NodePorts.
        if info.upper == Some(IpProtocol::Tcp) {
            if let Some(adj) = cx.tables.punt.target(true, IpProtocol::Tcp, buf.bytes().get(off..).unwrap_or(&[])) {
                buf.meta.adj = adj;
                return Verdict::Next(Ip6LocalNext::Punt);
            }
        }
        match info.upper {
            Some(IpProtocol::Icmpv6) => {}
            Some(IpProtocol::Udp) => {
                // Tunnel input nodes take UDP after the fixed header and any Hop-by-Hop
                // and Destination Options headers (Linux's tunnels send a Tunnel
                // Encapsulation Limit option by default), not after a routing header.
                let port = buf.bytes().get(off + 2..off + 4).map(|d| u16::from_be_bytes([d[0], d[1]]));
                if let (None, Some(app)) = (info.routing, port.and_then(|port| cx.tables.udp.port(port))) {
                    // A tunnel node decapsulates one datagram a buffer: a local
                    // sender's GSO frame of several is cut first, its datagrams coming
                    // back here one by one (by way of the lookup).
                    if super::gso_segment::several_datagrams(buf) {
                        counts.inc(C::GsoToSegment);
                        return Verdict::Next(Ip6LocalNext::Segment);
                    }
                    // A tunnel node's argument is the tag of a tunnel hint: none here.
                    buf.meta.param = 0;
                    return Verdict::Next(match app {
                        UdpApp::Gtpu => Ip6LocalNext::Gtpu6Input,
                        UdpApp::Gue => Ip6LocalNext::Gue6Input,
                        UdpApp::Esp => Ip6LocalNext::Esp6Decrypt,
                    });
                }
                if let Some(adj) = cx.tables.punt.target(true, IpProtocol::Udp, buf.bytes().get(off..).unwrap_or(&[])) {
                    buf.meta.adj = adj;
                    return Verdict::Next(Ip6LocalNext::Punt);
                }
                if cx.tables.lb_local {
                    return Verdict::Next(Ip6LocalNext::Lb6Nat);
                }
                counts.inc(C::PortUnreachable);
                buf.meta.param = IcmpRequest::new(1, unreach::PORT, 0).encode();
                return Verdict::Next(Ip6LocalNext::IcmpError);
            }
            Some(IpProtocol::Ipv6NoNxt) => return Verdict::Drop(C::IcmpIgnored),
            Some(IpProtocol::Tcp | IpProtocol::Sctp) if cx.tables.lb_local => return Verdict::Next(Ip6LocalNext::Lb6Nat),
            Some(IpProtocol::Esp) if info.routing.is_none() => return Verdict::Next(Ip6LocalNext::Esp6Decrypt),
            _ => {
                counts.inc(C::UnknownNextHeader);
                // Pointer to the Next Header field that named the protocol (exact
                // without extension headers; the fixed header's field otherwise).
                buf.meta.param = IcmpRequest::new(4, 1, 6).encode();
                return Verdict::Next(Ip6LocalNext::IcmpError);
            }
        }
        let bytes = buf.bytes();
        let Ok(icmp) = Icmpv6Packet::new_checked(&bytes[off..]) else {
            return Verdict::Drop(C::IcmpMalformed);
        };
        let Ok(repr) = Icmpv6Repr::parse(&icmp, &src, &dst, hop_limit) else {
            return Verdict::Drop(C::IcmpMalformed);
        };
        if let Some(adj) = cx.tables.punt.icmp_target(true, &bytes[off..]) {
            buf.meta.adj = adj;
            return Verdict::Next(Ip6LocalNext::Punt);
        }
        if let Icmpv6Repr::PacketTooBig { data, .. } = repr {
            if super::quotes_esp(data, true, &cx.tables.udp) {
                // About ESP we may have sent: the SA's path MTU (RFC 4301 §8.2).
                buf.meta.param = off as u32;
                return Verdict::Next(Ip6LocalNext::Esp6Pmtu);
            }
        }
        // An error (types below 128, RFC 4443 §2.1) about a translated connection (the
        // node's address is its source translation): the load balancer turns it back to
        // the client, as for IPv4.
        if icmp.msg_type() < 128 && cx.tables.lb_local {
            return Verdict::Next(Ip6LocalNext::Lb6Nat);
        }
        match repr {
            Icmpv6Repr::EchoRequest { .. } => {
                if !cx.echo6.take() {
                    return Verdict::Drop(C::RateLimited);
                }
                // Reply from the address asked (or the interface's, for multicast), with
                // any extension headers dropped: move the ICMPv6 message up.
                let reply_src = if dst.is_multicast() { ifl.ip6_source() } else { dst };
                let icmp_len = bytes.len() - off;
                let b = buf.bytes_mut();
                b.copy_within(off.., HEADER_LEN);
                buf.truncate(HEADER_LEN + icmp_len);
                let b = buf.bytes_mut();
                Ipv6Repr {
                    src: reply_src,
                    dst: src,
                    next_header: IpProtocol::Icmpv6,
                    payload_len: icmp_len,
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                }
                .emit(&mut Ipv6Packet::new_unchecked(&mut b[..HEADER_LEN]));
                b[HEADER_LEN] = wire::icmpv6::types::ECHO_REPLY;
                Icmpv6Packet::new_unchecked(&mut b[HEADER_LEN..]).fill_checksum(&reply_src, &src);
                counts.inc(C::EchoReplies);
                // Ours, not forwarded: sent with the TTL / hop limit of 64 it was given.
                match super::family::send_own::<super::family::Ip6>(&cx.ip().tables, buf, true) {
                    true => Verdict::Next(Ip6LocalNext::Output),
                    false => Verdict::Next(Ip6LocalNext::Lookup),
                }
            }
            Icmpv6Repr::NeighborSolicit { target, source_lladdr } => {
                if !ifl.has_ip6(&target) {
                    return Verdict::Drop(C::NdNotForUs);
                }
                if let (false, Some(mac)) = (src.is_unspecified(), source_lladdr) {
                    learn(cx, counts, rx, src, mac);
                }
                if !cx.advertisements.take() {
                    return Verdict::Drop(C::RateLimited);
                }
                let ifl = &cx.tables.interfaces[rx.get()];
                // Answer the soliciting node, or all nodes for duplicate address detection.
                let (na_dst, l2_dst) = if src.is_unspecified() {
                    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
                    (all, EthernetAddress::ipv6_multicast(&all))
                } else {
                    (src, source_lladdr.unwrap_or_else(|| ethernet_source(buf)))
                };
                let na = Icmpv6Repr::NeighborAdvert {
                    flags: NaFlags { router: true, solicited: !src.is_unspecified(), override_: true },
                    target,
                    target_lladdr: Some(ifl.mac),
                };
                let n = na.buffer_len();
                if buf.set_len(HEADER_LEN + n).is_err() {
                    return Verdict::Drop(C::NoHeadroom);
                }
                buf.meta.offload = engine::Offload::default();
                let b = buf.bytes_mut();
                Ipv6Repr {
                    src: target,
                    dst: na_dst,
                    next_header: IpProtocol::Icmpv6,
                    payload_len: n,
                    hop_limit: 255,
                    traffic_class: 0,
                    flow_label: 0,
                }
                .emit(&mut Ipv6Packet::new_unchecked(&mut b[..HEADER_LEN]));
                na.emit(&mut b[HEADER_LEN..], &target, &na_dst);
                let l2 = l2_rewrite(ifl, l2_dst, EtherType::Ipv6);
                match buf.prepend(14) {
                    Ok(h) => h.copy_from_slice(&l2),
                    Err(_) => return Verdict::Drop(C::NoHeadroom),
                }
                buf.meta.tx_if = rx;
                counts.inc(C::NaSent);
                Verdict::Next(Ip6LocalNext::Output)
            }
            Icmpv6Repr::NeighborAdvert { target, target_lladdr, .. } => {
                if let Some(mac) = target_lladdr {
                    learn(cx, counts, rx, target, mac);
                }
                Verdict::Drop(C::NdConsumed)
            }
            _ => Verdict::Drop(C::IcmpIgnored),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip6(buf.bytes())
    }
}

/// The Ethernet source of the frame this packet arrived in (still in the headroom,
/// just before the L3 start, since ethernet-input only advanced past it).
fn ethernet_source(buf: &Buffer) -> EthernetAddress {
    buf.preceding(14).map_or(EthernetAddress::BROADCAST, |h| EthernetAddress::from_bytes(&h[6..12]))
}

fn learn(cx: &IpContext, counts: &mut Counts<'_, Ip6LocalCounter>, rx: engine::IfIndex, ip: Ipv6Addr, mac: EthernetAddress) {
    let known = cx.tables.neighbours6.get(&ip).is_some_and(|n| n.mac == mac && n.if_index == rx);
    if known || !mac.is_unicast() {
        return;
    }
    if cx.learn(rx, IpAddr::V6(ip), mac) {
        counts.inc(Ip6LocalCounter::Learned);
    } else {
        counts.inc(Ip6LocalCounter::LearnQueueFull);
    }
}
