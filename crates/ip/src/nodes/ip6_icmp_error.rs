//! `ip6-icmp-error`: build the requested ICMPv6 error in place (RFC 4443 §2.4): quote as
//! much of the offending packet as fits in the minimum MTU, rate-limited, never about an
//! ICMPv6 error or a packet from an unspecified or multicast source, and about a
//! multicast destination only for packet-too-big and parameter problem code 2.

use super::IcmpRequest;
use crate::context::HasIp;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::icmpv6::Icmpv6Packet;
use wire::ipv6::{Ipv6Packet, Ipv6Repr, HEADER_LEN, MIN_MTU};
use wire::ipv6_ext::walk_chain;
use wire::IpProtocol;

next_nodes! {
    pub enum Ip6IcmpErrorNext { Lookup = "ip6-lookup", Output = "interface-output" }
}

counters! {
    pub enum Ip6IcmpErrorCounter {
        Sent(Info, "sent", "ICMPv6 errors sent"),
        RateLimited(Warn, "rate-limited", "ICMPv6 error not sent: rate limit"),
        Suppressed(Info, "suppressed", "no error about ICMPv6 errors, unspecified/multicast sources, or multicast destinations"),
        Malformed(Error, "malformed", "offending packet unreadable"),
    }
}

pub struct Ip6IcmpError;

impl<Cx: HasIp> Node<Cx> for Ip6IcmpError {
    type Next = Ip6IcmpErrorNext;
    type Counter = Ip6IcmpErrorCounter;

    fn name(&self) -> &'static str {
        "ip6-icmp-error"
    }

    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = cx.ip();
        use Ip6IcmpErrorCounter as C;
        let req = IcmpRequest::decode(buf.meta.param);
        let Ok(p) = Ipv6Packet::new_checked(buf.bytes()) else {
            return Verdict::Drop(C::Malformed);
        };
        let (orig_src, orig_dst) = (p.src_addr(), p.dst_addr());
        let multicast_ok = req.msg_type == 2 || (req.msg_type == 4 && req.code == 2);
        let about_error = walk_chain(p.next_header(), p.payload())
            .ok()
            .is_some_and(|i| i.upper == Some(IpProtocol::Icmpv6) && p.payload().get(i.upper_offset).is_some_and(|&t| t < 128));
        if orig_src.is_unspecified() || orig_src.is_multicast() || about_error || (orig_dst.is_multicast() && !multicast_ok) {
            return Verdict::Drop(C::Suppressed);
        }
        let Some(src) = cx.tables.interface(buf.meta.rx_if).map(|i| i.ip6_source()) else {
            return Verdict::Drop(C::Malformed);
        };
        if !cx.icmp6.take() {
            return Verdict::Drop(C::RateLimited);
        }
        let quote = buf.len().min(MIN_MTU - HEADER_LEN - 8);
        buf.truncate(quote);
        // A new packet: offload work the original carried (a partial checksum, GSO)
        // is not this one's.
        buf.meta.offload = engine::Offload::default();
        if buf.prepend(HEADER_LEN + 8).is_err() {
            return Verdict::Drop(C::Malformed);
        }
        let b = buf.bytes_mut();
        Ipv6Repr {
            src,
            dst: orig_src,
            next_header: IpProtocol::Icmpv6,
            payload_len: 8 + quote,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut b[..HEADER_LEN]));
        let mut icmp = Icmpv6Packet::new_unchecked(&mut b[HEADER_LEN..]);
        icmp.set_header(req.msg_type, req.code, req.value as u32);
        icmp.fill_checksum(&src, &orig_src);
        counts.inc(C::Sent);
        // Ours, not forwarded: sent with the TTL / hop limit of 64 it was given.
        match super::family::send_own::<super::family::Ip6>(&cx.tables, buf, true) {
            true => Verdict::Next(Ip6IcmpErrorNext::Output),
            false => Verdict::Next(Ip6IcmpErrorNext::Lookup),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        let r = IcmpRequest::decode(buf.meta.param);
        format!("type {} code {} value {} for {}", r.msg_type, r.code, r.value, super::trace_ip6(buf.bytes()))
    }
}
