//! `ip4-local`: packets addressed to the gateway. Answers echo requests in place;
//! everything else gets the ICMP error a host would send.

use super::IcmpRequest;
use crate::context::HasIp;
use crate::tables::UdpApp;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::checksum;
use wire::icmpv4::{unreach, Icmpv4Packet, Icmpv4Type};
use wire::ipv4::Ipv4Packet;
use wire::IpProtocol;

next_nodes! {
    pub enum Ip4LocalNext { Lookup = "ip4-lookup", Output = "interface-output", IcmpError = "ip4-icmp-error", Gtpu4Input = "gtpu4-input", Gue4Input = "gue4-input", Reassembly = "ip4-reassembly", Lb4Nat = "lb4-nat", Esp4Decrypt = "esp4-decrypt", Esp4Pmtu = "esp4-pmtu", Punt = "ip-punt", Segment = "ip-gso-segment" }
}

counters! {
    pub enum Ip4LocalCounter {
        EchoReplies(Info, "echo-replies", "ICMP echo replies sent"),
        RateLimited(Warn, "rate-limited", "echo request not answered: reply rate limit"),
        IcmpMalformed(Warn, "icmp-malformed", "ICMP message truncated or with a bad checksum"),
        IcmpIgnored(Info, "icmp-ignored", "ICMP messages other than echo request (and frag-needed about ESP: esp4-pmtu), consumed"),
        GsoToSegment(Info, "gso-to-segment", "UDP GSO frames of several datagrams to a tunnel's port, sent to ip-gso-segment first: each datagram is decapsulated on its own"),
        PortUnreachable(Info, "port-unreachable", "UDP to a port nothing listens on (ICMP requested)"),
        ProtocolUnreachable(Info, "protocol-unreachable", "protocol not handled locally (ICMP requested)"),
        Fragment(Info, "to-reassembly", "fragment addressed to the gateway: sent to ip4-reassembly"),
        Truncated(Error, "truncated", "shorter than an IPv4 header"),
    }
}

pub struct Ip4Local;

impl<Cx: HasIp> Node<Cx> for Ip4Local {
    type Next = Ip4LocalNext;
    type Counter = Ip4LocalCounter;

    fn name(&self) -> &'static str {
        "ip4-local"
    }

    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use Ip4LocalCounter as C;
        let Ok(p) = Ipv4Packet::new_checked(buf.bytes()) else {
            return Verdict::Drop(C::Truncated);
        };
        if p.is_fragment() {
            counts.inc(C::Fragment);
            buf.meta.param = 0;
            return Verdict::Next(Ip4LocalNext::Reassembly);
        }
        let hl = p.header_len();
        // A host daemon's TCP port (BGP, SSH) before the load balancer's NodePorts.
        if p.protocol() == IpProtocol::Tcp {
            if let Some(adj) = cx.ip().tables.punt.target(false, IpProtocol::Tcp, p.payload()) {
                buf.meta.adj = adj;
                return Verdict::Next(Ip4LocalNext::Punt);
            }
        }
        match p.protocol() {
            IpProtocol::Icmp => {
                let Ok(icmp) = Icmpv4Packet::new_checked(p.payload()) else {
                    return Verdict::Drop(C::IcmpMalformed);
                };
                if !icmp.verify_checksum() {
                    return Verdict::Drop(C::IcmpMalformed);
                }
                if let Some(adj) = cx.ip().tables.punt.icmp_target(false, p.payload()) {
                    buf.meta.adj = adj;
                    return Verdict::Next(Ip4LocalNext::Punt);
                }
                if icmp.msg_type() == Icmpv4Type::DstUnreachable
                    && icmp.code() == unreach::FRAG_NEEDED
                    && super::quotes_esp(p.payload().get(8..).unwrap_or(&[]), false, &cx.ip().tables.udp)
                {
                    // About ESP we may have sent: the SA's path MTU (RFC 4301 §8.2).
                    buf.meta.param = hl as u32;
                    return Verdict::Next(Ip4LocalNext::Esp4Pmtu);
                }
                if icmp.msg_type().is_error() && cx.ip().tables.lb_local {
                    // Perhaps about a load-balanced connection translated to our address.
                    return Verdict::Next(Ip4LocalNext::Lb4Nat);
                }
                if icmp.msg_type() != Icmpv4Type::EchoRequest {
                    return Verdict::Drop(C::IcmpIgnored);
                }
                if !cx.ip().echo4.take() {
                    return Verdict::Drop(C::RateLimited);
                }
                let (src, dst) = (p.src_addr(), p.dst_addr());
                let total = p.total_len();
                let b = buf.bytes_mut();
                let mut ip = Ipv4Packet::new_unchecked(&mut b[..total]);
                ip.set_src_addr(dst);
                ip.set_dst_addr(src);
                ip.set_ttl(64);
                ip.fill_checksum();
                // Type 8 → 0, code unchanged: patch the ICMP checksum for that one word.
                let code = b[hl + 1] as u16;
                let mut icmp = Icmpv4Packet::new_unchecked(&mut b[hl..total]);
                let old = icmp.checksum();
                icmp.set_msg_type(Icmpv4Type::EchoReply);
                icmp.set_checksum(checksum::update16(old, 0x0800 | code, code));
                counts.inc(C::EchoReplies);
                // Ours, not forwarded: sent with the TTL / hop limit of 64 it was given.
                match super::family::send_own::<super::family::Ip4>(&cx.ip().tables, buf, true) {
                    true => Verdict::Next(Ip4LocalNext::Output),
                    false => Verdict::Next(Ip4LocalNext::Lookup),
                }
            }
            IpProtocol::Udp => {
                let port = p.payload().get(2..4).map(|d| u16::from_be_bytes([d[0], d[1]]));
                if let Some(app) = port.and_then(|port| cx.ip().tables.udp.port(port)) {
                    // A tunnel node decapsulates one datagram a buffer: a local
                    // sender's GSO frame of several is cut first, its datagrams coming
                    // back here one by one (by way of the lookup).
                    if super::gso_segment::several_datagrams(buf) {
                        counts.inc(C::GsoToSegment);
                        return Verdict::Next(Ip4LocalNext::Segment);
                    }
                    // A tunnel node's argument is the tag of a tunnel hint: none here.
                    buf.meta.param = 0;
                    return Verdict::Next(match app {
                        UdpApp::Gtpu => Ip4LocalNext::Gtpu4Input,
                        UdpApp::Gue => Ip4LocalNext::Gue4Input,
                        UdpApp::Esp => Ip4LocalNext::Esp4Decrypt,
                    });
                }
                if let Some(adj) = cx.ip().tables.punt.target(false, IpProtocol::Udp, p.payload()) {
                    buf.meta.adj = adj;
                    return Verdict::Next(Ip4LocalNext::Punt);
                }
                if cx.ip().tables.lb_local {
                    return Verdict::Next(Ip4LocalNext::Lb4Nat);
                }
                counts.inc(C::PortUnreachable);
                buf.meta.param = IcmpRequest::new(3, unreach::PORT, 0).encode();
                Verdict::Next(Ip4LocalNext::IcmpError)
            }
            IpProtocol::Tcp | IpProtocol::Sctp if cx.ip().tables.lb_local => Verdict::Next(Ip4LocalNext::Lb4Nat),
            IpProtocol::Esp => Verdict::Next(Ip4LocalNext::Esp4Decrypt),
            _ => {
                counts.inc(C::ProtocolUnreachable);
                buf.meta.param = IcmpRequest::new(3, unreach::PROTOCOL, 0).encode();
                Verdict::Next(Ip4LocalNext::IcmpError)
            }
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip4(buf.bytes())
    }
}
