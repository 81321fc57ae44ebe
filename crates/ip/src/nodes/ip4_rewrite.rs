//! `ip4-rewrite`: TTL and MTU checks (too big: ICMP frag-needed with DF, else
//! `ip4-fragment`), TTL decrement with an incremental checksum (RFC 1624), and the
//! adjacency's Ethernet header prepended in the headroom.

use super::family::{prepend_l2, resolve, rewrite_fast, Ip4, Resolved};
use super::IcmpRequest;
use crate::context::HasIp;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::icmpv4::unreach;
use wire::ipv4::Ipv4Packet;

next_nodes! {
    pub enum Ip4RewriteNext { Output = "interface-output", IcmpError = "ip4-icmp-error", Fragment = "ip4-fragment", Glean = "ip-glean" }
}

counters! {
    pub enum Ip4RewriteCounter {
        TtlExpired(Info, "ttl-expired", "TTL would reach 0 (ICMP time exceeded requested)"),
        FragNeeded(Info, "frag-needed", "larger than the MTU with DF set (ICMP frag-needed requested)"),
        ToFragment(Info, "to-fragment", "larger than the MTU without DF: sent to ip4-fragment"),
        NoHeadroom(Error, "no-headroom", "no headroom for the Ethernet header"),
        BadAdjacency(Error, "bad-adjacency", "adjacency is not a forwarding one"),
        Truncated(Error, "truncated", "shorter than an IPv4 header"),
    }
}

pub struct Ip4Rewrite;

impl<Cx: HasIp> Node<Cx> for Ip4Rewrite {
    type Next = Ip4RewriteNext;
    type Counter = Ip4RewriteCounter;

    fn name(&self) -> &'static str {
        "ip4-rewrite"
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = cx.ip();
        use Ip4RewriteCounter as C;
        let adj = buf.meta.adj;
        // Fast path: a resolved next hop, TTL > 1, within the MTU (ip4-input validated
        // the header). A forwarded packet has mostly taken it in `ip4-lookup` already; the
        // nodes that send here directly (encaps, the SPD's bypass, the LB) take it here.
        if rewrite_fast::<Ip4>(cx.tables.adjacency(adj), buf) {
            return Verdict::Next(Ip4RewriteNext::Output);
        }
        let Ok(p) = Ipv4Packet::new_checked(buf.bytes()) else {
            return Verdict::Drop(C::Truncated);
        };
        if p.ttl() <= 1 {
            counts.inc(C::TtlExpired);
            buf.meta.param = IcmpRequest::new(11, 0, 0).encode();
            return Verdict::Next(Ip4RewriteNext::IcmpError);
        }
        let len = p.total_len();
        let df = p.dont_frag();
        let dst = p.dst_addr();
        let (tx_if, mtu, rewrite) = match resolve::<Ip4>(&cx.tables, adj, dst) {
            Resolved::Send { tx_if, mtu, rewrite } => (tx_if, mtu, rewrite),
            // Its next hop to learn: held (or turned into the solicitation) by `ip-glean`.
            Resolved::Solicit { .. } => return Verdict::Next(Ip4RewriteNext::Glean),
            Resolved::Bad => return Verdict::Drop(C::BadAdjacency),
        };
        if super::wire_segment_len(buf, len) > mtu as usize {
            if df {
                counts.inc(C::FragNeeded);
                buf.meta.param = IcmpRequest::new(3, unreach::FRAG_NEEDED, mtu).encode();
                return Verdict::Next(Ip4RewriteNext::IcmpError);
            }
            counts.inc(C::ToFragment);
            buf.meta.param = super::FragmentRequest { mtu, originated: false }.encode();
            return Verdict::Next(Ip4RewriteNext::Fragment);
        }
        Ipv4Packet::new_unchecked(buf.bytes_mut()).decrement_ttl();
        if !prepend_l2(buf, tx_if, &rewrite) {
            return Verdict::Drop(C::NoHeadroom);
        }
        Verdict::Next(Ip4RewriteNext::Output)
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("{} {}", super::trace_adj(buf.meta.adj), super::trace_ip4(buf.bytes()))
    }
}
