//! `ip4-lookup`: longest-prefix match on the destination; the adjacency decides.

use super::IcmpRequest;
use crate::context::IpContext;
use crate::tables::Adjacency;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::icmpv4::unreach;

next_nodes! {
    pub enum Ip4LookupNext { Rewrite = "ip4-rewrite", Local = "ip4-local", IcmpError = "ip4-icmp-error" }
}

counters! {
    pub enum Ip4LookupCounter {
        NoRoute(Info, "no-route", "no route to the destination (ICMP unreachable requested)"),
        Blackhole(Info, "blackhole", "matched a blackhole route"),
        Truncated(Error, "truncated", "shorter than an IPv4 header (ip4-input should have dropped it)"),
    }
}

pub struct Ip4Lookup;

impl Node<IpContext> for Ip4Lookup {
    type Next = Ip4LookupNext;
    type Counter = Ip4LookupCounter;

    fn name(&self) -> &'static str {
        "ip4-lookup"
    }

    #[inline]
    fn process(
        &mut self,
        cx: &mut IpContext,
        counts: &mut Counts<'_, Self::Counter>,
        buf: &mut Buffer,
    ) -> Verdict<Self::Next, Self::Counter> {
        let Some(d) = buf.bytes().get(16..20) else {
            return Verdict::Drop(Ip4LookupCounter::Truncated);
        };
        let dst = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        let adj = cx.tables.fib4.lookup(dst);
        buf.meta.adj = adj;
        match cx.tables.adjacency(adj) {
            Adjacency::Rewrite { .. } | Adjacency::Glean { .. } | Adjacency::Incomplete { .. } => Verdict::Next(Ip4LookupNext::Rewrite),
            Adjacency::Local => Verdict::Next(Ip4LookupNext::Local),
            Adjacency::Miss => {
                counts.inc(Ip4LookupCounter::NoRoute);
                buf.meta.param = IcmpRequest::new(3, unreach::NET, 0).encode();
                Verdict::Next(Ip4LookupNext::IcmpError)
            }
            Adjacency::Blackhole => Verdict::Drop(Ip4LookupCounter::Blackhole),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip4(buf.bytes())
    }
}
