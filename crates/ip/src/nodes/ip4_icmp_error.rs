//! `ip4-icmp-error`: turn the packet into the ICMP error another node asked for
//! (`Meta::param`), in place: the offending header and data become the quote, the new
//! IPv4 and ICMP headers go in the headroom. Rate-limited; never sent about ICMP
//! errors, non-first fragments or multicast/broadcast sources (RFC 1812 §4.3.2.7).

use super::IcmpRequest;
use crate::context::HasIp;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::icmpv4::{Icmpv4Packet, Icmpv4Type};
use wire::ipv4::{Ipv4Packet, Ipv4Repr, HEADER_LEN};
use wire::IpProtocol;

/// RFC 1812 §4.3.2.3: quote as much as fits in 576 bytes.
const MAX_ERROR_LEN: usize = 576;

next_nodes! {
    pub enum Ip4IcmpErrorNext { Lookup = "ip4-lookup", Output = "interface-output" }
}

counters! {
    pub enum Ip4IcmpErrorCounter {
        Sent(Info, "sent", "ICMP errors sent"),
        RateLimited(Warn, "rate-limited", "ICMP error not sent: rate limit"),
        Suppressed(Info, "suppressed", "no ICMP error for ICMP errors, non-first fragments, or multicast/broadcast sources"),
        NoSource(Error, "no-source-address", "no IPv4 address to send the error from"),
        Malformed(Error, "malformed", "offending packet unreadable"),
    }
}

pub struct Ip4IcmpError;

fn is_icmp_error(p: &Ipv4Packet<&[u8]>) -> bool {
    p.protocol() == IpProtocol::Icmp && p.payload().first().is_some_and(|&t| Icmpv4Type::from(t).is_error())
}

impl<Cx: HasIp> Node<Cx> for Ip4IcmpError {
    type Next = Ip4IcmpErrorNext;
    type Counter = Ip4IcmpErrorCounter;

    fn name(&self) -> &'static str {
        "ip4-icmp-error"
    }

    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = cx.ip();
        use Ip4IcmpErrorCounter as C;
        let req = IcmpRequest::decode(buf.meta.param);
        let Ok(p) = Ipv4Packet::new_checked(buf.bytes()) else {
            return Verdict::Drop(C::Malformed);
        };
        let orig_src = p.src_addr();
        if p.frag_offset() != 0 || orig_src.is_multicast() || orig_src.is_broadcast() || orig_src.is_unspecified() || is_icmp_error(&p) {
            return Verdict::Drop(C::Suppressed);
        }
        let src = cx
            .tables
            .interface(buf.meta.rx_if)
            .and_then(|i| i.ip4_source())
            .or_else(|| cx.tables.interfaces.iter().find_map(|i| i.ip4_source()));
        let Some(src) = src else {
            return Verdict::Drop(C::NoSource);
        };
        if !cx.icmp4.take() {
            return Verdict::Drop(C::RateLimited);
        }
        let quote = buf.len().min(MAX_ERROR_LEN - HEADER_LEN - 8);
        buf.truncate(quote);
        // A new packet: offload work the original carried (a partial checksum, GSO)
        // is not this one's.
        buf.meta.offload = engine::Offload::default();
        if buf.prepend(HEADER_LEN + 8).is_err() {
            return Verdict::Drop(C::Malformed);
        }
        cx.ident = cx.ident.wrapping_add(1);
        let b = buf.bytes_mut();
        Ipv4Repr {
            src,
            dst: orig_src,
            protocol: IpProtocol::Icmp,
            payload_len: 8 + quote,
            ttl: 64,
            dscp: 48, // CS6, network control, as Linux sends ICMP errors
            ecn: 0,
            ident: cx.ident,
            dont_frag: false,
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut b[..HEADER_LEN]));
        let mut icmp = Icmpv4Packet::new_unchecked(&mut b[HEADER_LEN..]);
        icmp.set_msg_type(Icmpv4Type::from(req.msg_type));
        icmp.set_code(req.code);
        icmp.set_rest(0, req.value);
        icmp.fill_checksum();
        counts.inc(C::Sent);
        // Ours, not forwarded: sent with the TTL / hop limit of 64 it was given.
        match super::family::send_own::<super::family::Ip4>(&cx.tables, buf, true) {
            true => Verdict::Next(Ip4IcmpErrorNext::Output),
            false => Verdict::Next(Ip4IcmpErrorNext::Lookup),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        let r = IcmpRequest::decode(buf.meta.param);
        format!("type {} code {} value {} for {}", r.msg_type, r.code, r.value, super::trace_ip4(buf.bytes()))
    }
}
