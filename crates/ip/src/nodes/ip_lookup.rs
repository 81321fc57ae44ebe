//! `ip4-lookup` / `ip6-lookup`: longest-prefix match on the destination; the adjacency
//! decides where the packet goes. One node, generic over the address family.

use super::family::{rewrite_fast, Family};
use crate::context::HasIp;
use crate::multipath;
use crate::tables::{Adjacency, Tables, TunnelRef, MAX_INDEX};
use engine::{counters, BufIdx, Buffer, Counts, Node, Pool, Verdict, VECTOR_SIZE};

counters! {
    pub enum LookupCounter {
        NoRoute(Info, "no-route", "no route to the destination (ICMP unreachable requested)"),
        Blackhole(Info, "blackhole", "matched a blackhole route"),
        Truncated(Error, "truncated", "shorter than the IP header (ipN-input should have dropped it)"),
    }
}

/// The lookup's common case, in one place for `ipN-lookup` and `ethernet-input` (which
/// takes it for the packets it sends straight on, a node hop fewer): `adj` a single-path
/// route to a resolved next hop whose link has no SPD while no load balancer's replies
/// are to be caught ([`Tables::straight_to_rewrite`]), the packet rewritten for the hop
/// in place ([`rewrite_fast`]): true, the packet is ready for `interface-output`.
/// Otherwise false, the packet untouched: the lookup node's general path decides.
#[inline(always)]
pub(crate) fn forwards_fast<F: Family>(tables: &Tables, adj: u32, buf: &mut Buffer) -> bool {
    if adj > MAX_INDEX {
        return false;
    }
    match tables.adjacency(adj) {
        a @ Adjacency::Rewrite { tx_if, .. } if tables.straight_to_rewrite(*tx_if) => rewrite_fast::<F>(a, buf),
        _ => false,
    }
}

pub struct IpLookup<F: Family> {
    /// This vector was looked up in `prepare` (a table larger than the caches): the
    /// result is in `meta.adj`. Otherwise `process` looks each packet up itself.
    batched: bool,
    _f: std::marker::PhantomData<F>,
}

impl<F: Family> Default for IpLookup<F> {
    fn default() -> Self {
        IpLookup { batched: false, _f: std::marker::PhantomData }
    }
}

impl<F: Family> IpLookup<F> {
    /// Look the whole vector up, level by level, and leave each packet's adjacency in
    /// `meta.adj`.
    fn lookup_vector<Cx: HasIp>(cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        let cx = cx.ip();
        let n = input.len().min(VECTOR_SIZE);
        let mut keys = [F::key(&[0u8; 16]); VECTOR_SIZE];
        let mut adj = [0u32; VECTOR_SIZE];
        for (k, &b) in keys.iter_mut().zip(&input[..n]) {
            if let Some(d) = pool.get(b).bytes().get(F::DST_AT..F::HEADER_LEN) {
                *k = F::key(d);
            }
        }
        F::fib(&cx.tables).lookup_batch(&keys[..n], &mut adj[..n]);
        for (a, &b) in adj.iter().zip(&input[..n]) {
            pool.get_mut(b).meta.adj = *a;
        }
    }
}

impl<Cx: HasIp, F: Family> Node<Cx> for IpLookup<F> {
    type Next = F::LookupNext;
    type Counter = LookupCounter;

    fn name(&self) -> &'static str {
        F::LOOKUP
    }

    /// For tables larger than the caches, look up the whole vector first, level by level
    /// (`Poptrie::lookup_batch`), so the misses of independent packets overlap; `process`
    /// then only dispatches on `meta.adj`. A cached table is looked up in `process`, in
    /// one pass over the packets (the batch's second pass over the buffers and its
    /// per-key state cost more than the misses it hides there). Measured in
    /// docs/PERFORMANCE.md.
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        self.batched = F::fib(&cx.ip().tables).prefers_batch();
        if self.batched {
            Self::lookup_vector(cx, pool, input);
        }
    }

    /// A traced vector is looked up first whatever the table's size, so each packet's
    /// trace line shows the adjacency it takes.
    fn prepare_traced(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        self.batched = true;
        Self::lookup_vector(cx, pool, input);
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = cx.ip();
        // Cleared whatever the branch, so that no buffer keeps it (stored only when set).
        let looked_up = buf.meta.looked_up;
        if looked_up {
            buf.meta.looked_up = false;
        }
        let Some(dst) = buf.bytes().get(F::DST_AT..F::HEADER_LEN) else {
            return Verdict::Drop(LookupCounter::Truncated);
        };
        let mut adj = if self.batched || looked_up {
            // `prepare` looked the destination up for the whole vector, or
            // `ethernet-input` did for this packet.
            buf.meta.adj
        } else {
            let adj = F::fib(&cx.tables).lookup(F::key(dst));
            buf.meta.adj = adj;
            adj
        };
        if adj > MAX_INDEX {
            // ECMP: the flow's path, which may itself lead into a tunnel. Single-path
            // routes never get here (their values are at most `MAX_INDEX`, or tunnels).
            if let Some(group) = multipath::decode(adj) {
                adj = cx.tables.multipath_choose(group, crate::flow::ip_flow_hash(buf.bytes()));
                buf.meta.adj = adj;
            }
            // A route into a tunnel: its encap node takes the tunnel id.
            if let Some(t) = TunnelRef::decode(adj) {
                buf.meta.param = t.id;
                if cx.tables.lb_sees_tunnel(t) {
                    return Verdict::Next(F::LB_NAT);
                }
                return Verdict::Next(F::tunnel_next(t.kind));
            }
        }
        if forwards_fast::<F>(&cx.tables, adj, buf) {
            return Verdict::Next(F::OUTPUT);
        }
        match cx.tables.adjacency(adj) {
            // The balancer first (a reply it translates then meets the SPD in its
            // client's terms): `lbN-nat` sends it on to `ipsecN-output` or `ipN-rewrite`.
            Adjacency::Rewrite { .. } | Adjacency::Glean { .. } | Adjacency::Incomplete { .. } if cx.tables.lb_replies => {
                Verdict::Next(F::LB_NAT)
            }
            Adjacency::Rewrite { tx_if, .. } | Adjacency::Glean { tx_if, .. } | Adjacency::Incomplete { tx_if, .. }
                if cx.tables.has_spd(*tx_if) =>
            {
                Verdict::Next(F::IPSEC_OUTPUT)
            }
            // What `forwards_fast` left (TTL expiring, too big, unresolved) goes to
            // `ipN-rewrite`'s general path.
            Adjacency::Rewrite { .. } | Adjacency::Glean { .. } | Adjacency::Incomplete { .. } => Verdict::Next(F::REWRITE),
            Adjacency::Local => Verdict::Next(F::LOCAL),
            Adjacency::Miss => {
                counts.inc(LookupCounter::NoRoute);
                buf.meta.param = F::NO_ROUTE.encode();
                Verdict::Next(F::ICMP_ERROR)
            }
            Adjacency::Blackhole => Verdict::Drop(LookupCounter::Blackhole),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        let dst = buf.bytes().get(F::DST_AT..F::HEADER_LEN).map(|d| F::addr(F::key(d)).to_string());
        format!("dst {} {}", dst.unwrap_or_else(|| "?".into()), super::trace_adj(buf.meta.adj))
    }
}
