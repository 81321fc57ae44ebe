//! `ip6-lookup`: longest-prefix match on the IPv6 destination.

use super::IcmpRequest;
use crate::context::IpContext;
use crate::tables::Adjacency;
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Node, Pool, Verdict, VECTOR_SIZE};
use wire::icmpv6::unreach;

next_nodes! {
    pub enum Ip6LookupNext { Rewrite = "ip6-rewrite", Local = "ip6-local", IcmpError = "ip6-icmp-error" }
}

counters! {
    pub enum Ip6LookupCounter {
        NoRoute(Info, "no-route", "no route to the destination (ICMPv6 unreachable requested)"),
        Blackhole(Info, "blackhole", "matched a blackhole route"),
        Truncated(Error, "truncated", "shorter than an IPv6 header (ip6-input should have dropped it)"),
    }
}

pub struct Ip6Lookup;

impl Node<IpContext> for Ip6Lookup {
    type Next = Ip6LookupNext;
    type Counter = Ip6LookupCounter;

    fn name(&self) -> &'static str {
        "ip6-lookup"
    }

    /// Look up the whole vector first; for tables larger than the caches level by level
    /// (`Poptrie::lookup_batch`), so the misses of independent packets overlap.
    /// `process` then only dispatches on `meta.adj`. Measured in docs/PERFORMANCE.md.
    fn prepare(&mut self, cx: &mut IpContext, pool: &mut Pool, input: &[BufIdx]) {
        let n = input.len().min(VECTOR_SIZE);
        let mut keys = [0 as u128; VECTOR_SIZE];
        let mut adj = [0u32; VECTOR_SIZE];
        for (k, &b) in keys.iter_mut().zip(&input[..n]) {
            if let Some(d) = pool.get(b).bytes().get(24..40) {
                *k = {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(d);
                    u128::from_be_bytes(a)
                };
            }
        }
        let fib = &cx.tables.fib6;
        if fib.prefers_batch() {
            fib.lookup_batch(&keys[..n], &mut adj[..n]);
        } else {
            for (a, &k) in adj.iter_mut().zip(&keys[..n]) {
                *a = fib.lookup(k);
            }
        }
        for (a, &b) in adj.iter().zip(&input[..n]) {
            pool.get_mut(b).meta.adj = *a;
        }
    }

    #[inline(always)]
    fn process(
        &mut self,
        cx: &mut IpContext,
        counts: &mut Counts<'_, Self::Counter>,
        buf: &mut Buffer,
    ) -> Verdict<Self::Next, Self::Counter> {
        if buf.len() < 40 {
            return Verdict::Drop(Ip6LookupCounter::Truncated);
        }
        // `prepare` looked the destination up for the whole vector.
        let adj = buf.meta.adj;
        match cx.tables.adjacency(adj) {
            Adjacency::Rewrite { .. } | Adjacency::Glean { .. } | Adjacency::Incomplete { .. } => Verdict::Next(Ip6LookupNext::Rewrite),
            Adjacency::Local => Verdict::Next(Ip6LookupNext::Local),
            Adjacency::Miss => {
                counts.inc(Ip6LookupCounter::NoRoute);
                buf.meta.param = IcmpRequest::new(1, unreach::NO_ROUTE, 0).encode();
                Verdict::Next(Ip6LookupNext::IcmpError)
            }
            Adjacency::Blackhole => Verdict::Drop(Ip6LookupCounter::Blackhole),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip6(buf.bytes())
    }
}
