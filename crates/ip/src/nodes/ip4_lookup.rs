//! `ip4-lookup`: longest-prefix match on the destination; the adjacency decides.

use super::IcmpRequest;
use crate::context::IpContext;
use crate::tables::Adjacency;
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Node, Pool, Verdict, VECTOR_SIZE};
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

    /// Look up the whole vector first; for tables larger than the caches level by level
    /// (`Poptrie::lookup_batch`), so the misses of independent packets overlap.
    /// `process` then only dispatches on `meta.adj`. Measured in docs/PERFORMANCE.md.
    fn prepare(&mut self, cx: &mut IpContext, pool: &mut Pool, input: &[BufIdx]) {
        let n = input.len().min(VECTOR_SIZE);
        let mut keys = [0 as u32; VECTOR_SIZE];
        let mut adj = [0u32; VECTOR_SIZE];
        for (k, &b) in keys.iter_mut().zip(&input[..n]) {
            if let Some(d) = pool.get(b).bytes().get(16..20) {
                *k = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
            }
        }
        let fib = &cx.tables.fib4;
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
        if buf.len() < 20 {
            return Verdict::Drop(Ip4LookupCounter::Truncated);
        }
        // `prepare` looked the destination up for the whole vector.
        let adj = buf.meta.adj;
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
