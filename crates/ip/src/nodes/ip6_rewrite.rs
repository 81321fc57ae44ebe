//! `ip6-rewrite`: hop-limit and MTU checks (IPv6 routers never fragment: packet too big,
//! RFC 8201; but a datagram whose fragments the gateway reassembled on the way through
//! is cut again, `engine::Meta::refragment`), hop-limit decrement, Ethernet header from
//! the adjacency.

use super::family::{prepend_l2, resolve, rewrite_fast, Ip6, Resolved};
use super::IcmpRequest;
use crate::context::HasIp;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::ipv6::Ipv6Packet;

next_nodes! {
    pub enum Ip6RewriteNext { Output = "interface-output", IcmpError = "ip6-icmp-error", Glean = "ip-glean", Fragment = "ip6-fragment" }
}

counters! {
    pub enum Ip6RewriteCounter {
        HopLimitExpired(Info, "hop-limit-expired", "hop limit would reach 0 (ICMPv6 time exceeded requested)"),
        PacketTooBig(Info, "packet-too-big", "larger than the MTU (ICMPv6 packet too big requested)"),
        ToFragment(Info, "to-fragment", "a datagram reassembled on its way through, larger than the MTU: sent to ip6-fragment"),
        NoHeadroom(Error, "no-headroom", "no headroom for the Ethernet header"),
        BadAdjacency(Error, "bad-adjacency", "adjacency is not a forwarding one"),
        Truncated(Error, "truncated", "shorter than an IPv6 header"),
    }
}

pub struct Ip6Rewrite;

impl<Cx: HasIp> Node<Cx> for Ip6Rewrite {
    type Next = Ip6RewriteNext;
    type Counter = Ip6RewriteCounter;

    fn name(&self) -> &'static str {
        "ip6-rewrite"
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = cx.ip();
        use Ip6RewriteCounter as C;
        // ip6-input trimmed the buffer to the packet, jumbograms included.
        let len = buf.len();
        // Fast path: a resolved next hop, hop limit > 1, the whole buffer within the MTU
        // (a GSO frame is larger and takes the general path). A forwarded packet has
        // mostly taken it in `ip6-lookup` already.
        if rewrite_fast::<Ip6>(cx.tables.adjacency(buf.meta.adj), buf) {
            return Verdict::Next(Ip6RewriteNext::Output);
        }
        let Ok(p) = Ipv6Packet::new_checked(buf.bytes()) else {
            return Verdict::Drop(C::Truncated);
        };
        let hl = p.hop_limit();
        if hl <= 1 {
            counts.inc(C::HopLimitExpired);
            buf.meta.param = IcmpRequest::new(3, 0, 0).encode();
            return Verdict::Next(Ip6RewriteNext::IcmpError);
        }
        let dst = p.dst_addr();
        let (tx_if, mtu, rewrite) = match resolve::<Ip6>(&cx.tables, buf.meta.adj, dst) {
            Resolved::Send { tx_if, mtu, rewrite } => (tx_if, mtu, rewrite),
            // Its next hop to learn: held (or turned into the solicitation) by `ip-glean`.
            Resolved::Solicit { .. } => return Verdict::Next(Ip6RewriteNext::Glean),
            Resolved::Bad => return Verdict::Drop(C::BadAdjacency),
        };
        if super::wire_segment_len(buf, len) > mtu as usize {
            // Its sender fragmented it; the gateway reassembled it (the load balancer):
            // cut again, not refused (`Meta::refragment`).
            if buf.meta.refragment {
                counts.inc(C::ToFragment);
                buf.meta.param = super::FragmentRequest { mtu, originated: false }.encode();
                return Verdict::Next(Ip6RewriteNext::Fragment);
            }
            counts.inc(C::PacketTooBig);
            buf.meta.param = IcmpRequest::new(2, 0, mtu).encode();
            return Verdict::Next(Ip6RewriteNext::IcmpError);
        }
        Ipv6Packet::new_unchecked(buf.bytes_mut()).set_hop_limit(hl - 1);
        if !prepend_l2(buf, tx_if, &rewrite) {
            return Verdict::Drop(C::NoHeadroom);
        }
        Verdict::Next(Ip6RewriteNext::Output)
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("{} {}", super::trace_adj(buf.meta.adj), super::trace_ip6(buf.bytes()))
    }
}
