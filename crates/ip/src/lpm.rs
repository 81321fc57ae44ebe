//! Longest-prefix match: a poptrie (Asai & Ohara, SIGCOMM 2015) over IPv4 or IPv6 keys.
//!
//! Layout: a direct-indexed table on the top `DIRECT_BITS` bits, then nodes of 64
//! slots (6-bit strides). A node keeps two bitmaps instead of 64 pointers: `children`
//! marks slots that continue into a child node, `leaf_runs` marks slots where a new run
//! of equal leaf values starts. Children and leaves of a node are stored contiguously,
//! so the index of slot `v`'s child or leaf is a base plus a popcount. A node is 24
//! bytes; a route set of a million prefixes compiles to tens of MB and a lookup touches
//! one direct entry and one node per 6 bits past the direct table.
//!
//! The direct table is cut into chunks and every direct slot's longer routes form a
//! subtrie of their own, each behind an `Arc`: a route change copies the chunk and
//! recompiles the one subtrie it touches, and the clone the workers hold keeps sharing
//! the rest (see [`Poptrie`]). Values are adjacency indices < 2^31; 0 means no route.

use std::marker::PhantomData;
use std::sync::Arc;

pub const DIRECT_BITS: u8 = 16;
pub const STRIDE: u8 = 6;
/// Table size above which batched lookups pay (roughly the L2 cache).
const BATCH_ABOVE_BYTES: usize = 2 << 20;

/// An address usable as a trie key.
pub trait LpmKey: Copy + Ord + Eq + std::hash::Hash + Send + Sync + 'static + std::fmt::Debug {
    const BITS: u8;
    /// `width` bits of the key starting `depth` bits from the top, zero-padded past the
    /// end of the key.
    fn stride(self, depth: u8, width: u8) -> usize;
    /// The key with all bits after the first `len` cleared.
    fn masked(self, len: u8) -> Self;
    /// The key folded to 64 bits, for hashing.
    fn fold64(self) -> u64;
    /// The key as stored in a hash slot: a `u128` as two `u64`s, so a slot of key and
    /// value takes 24 bytes rather than the 32 that `u128`'s 16-byte alignment forces.
    type Packed: Copy + Eq + Default + Send + Sync + 'static;
    fn pack(self) -> Self::Packed;
    fn unpack(p: Self::Packed) -> Self;
    /// The first key of direct slot `slot` (its top `DIRECT_BITS` bits).
    fn from_slot(slot: usize) -> Self;
    /// The key with every bit after the first `len` set: the last key of that prefix.
    fn last(self, len: u8) -> Self;
}

impl LpmKey for u32 {
    const BITS: u8 = 32;
    type Packed = u32;
    #[inline(always)]
    fn pack(self) -> u32 {
        self
    }
    #[inline(always)]
    fn unpack(p: u32) -> u32 {
        p
    }
    fn from_slot(slot: usize) -> u32 {
        (slot as u32) << (32 - DIRECT_BITS)
    }
    fn last(self, len: u8) -> u32 {
        self | u32::MAX.checked_shr(len as u32).unwrap_or(0)
    }
    #[inline(always)]
    fn fold64(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn stride(self, depth: u8, width: u8) -> usize {
        ((((self as u64) << 32) << depth) >> (64 - width)) as usize
    }
    #[inline(always)]
    fn masked(self, len: u8) -> Self {
        if len == 0 {
            0
        } else {
            self & (u32::MAX << (32 - len))
        }
    }
}

impl LpmKey for u128 {
    const BITS: u8 = 128;
    type Packed = [u64; 2];
    #[inline(always)]
    fn pack(self) -> [u64; 2] {
        [(self >> 64) as u64, self as u64]
    }
    #[inline(always)]
    fn unpack(p: [u64; 2]) -> u128 {
        (p[0] as u128) << 64 | p[1] as u128
    }
    fn from_slot(slot: usize) -> u128 {
        (slot as u128) << (128 - DIRECT_BITS)
    }
    fn last(self, len: u8) -> u128 {
        self | u128::MAX.checked_shr(len as u32).unwrap_or(0)
    }
    #[inline(always)]
    fn fold64(self) -> u64 {
        (self as u64) ^ ((self >> 64) as u64).rotate_left(31)
    }
    #[inline(always)]
    fn stride(self, depth: u8, width: u8) -> usize {
        ((self << depth) >> (128 - width)) as usize
    }
    #[inline(always)]
    fn masked(self, len: u8) -> Self {
        if len == 0 {
            0
        } else {
            self & (u128::MAX << (128 - len))
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct PNode {
    children: u64,
    leaf_runs: u64,
    child_base: u32,
    leaf_base: u32,
}

/// Slots of the direct table per chunk: a change copies one chunk (4 KiB), not the table.
const CHUNK: usize = 256;
const CHUNKS: usize = (1 << DIRECT_BITS) / CHUNK;

/// One direct-table slot: the value of the longest route of at most `DIRECT_BITS` bits
/// covering it, and the subtrie of the longer routes inside it (whose leaves are 0 where
/// none of them matches: the slot's value applies there).
#[derive(Clone, Default)]
struct Slot {
    value: u32,
    sub: Option<Arc<Sub>>,
}

/// The poptrie below one direct slot: node 0 is its root, at depth `DIRECT_BITS`.
#[derive(Default)]
struct Sub {
    nodes: Box<[PNode]>,
    leaves: Box<[u32]>,
}

impl Sub {
    /// The value inside this subtrie for `key` (0: none of its routes covers it).
    #[inline(always)]
    fn lookup<K: LpmKey>(&self, key: K) -> u32 {
        let mut i = 0usize;
        let mut depth = DIRECT_BITS;
        loop {
            let node = &self.nodes[i];
            let v = key.stride(depth, STRIDE);
            let upto = u64::MAX >> (63 - v);
            if node.children & (1u64 << v) != 0 {
                i = (node.child_base + (node.children & upto).count_ones() - 1) as usize;
                depth += STRIDE;
            } else {
                return self.leaves[(node.leaf_base + (node.leaf_runs & upto).count_ones() - 1) as usize];
            }
        }
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Sub>() + 16 + self.nodes.len() * std::mem::size_of::<PNode>() + self.leaves.len() * 4
    }
}

/// A longest-prefix-match table, immutable once published, changed by copy-on-write:
/// the direct table is 256 chunks behind `Arc`s and each slot's longer routes are a
/// subtrie of their own, so a route change copies one chunk (or, for a short route, the
/// chunks its range spans) and compiles one subtrie — the routes sharing its first
/// `DIRECT_BITS` bits — while a published clone keeps sharing everything else.
#[derive(Clone)]
pub struct Poptrie<K: LpmKey> {
    chunks: Vec<Arc<[Slot; CHUNK]>>,
    routes: usize,
    /// Bytes of the subtries (kept up to date by `set_slot_routes`).
    sub_bytes: usize,
    _k: PhantomData<K>,
}

/// One route for compilation: a masked key, its length, its value (non-zero, < 2^31).
pub type Route<K> = (K, u8, u32);

impl<K: LpmKey> Poptrie<K> {
    /// An empty table (every lookup misses).
    pub fn empty() -> Self {
        let chunk: Arc<[Slot; CHUNK]> = Arc::new(std::array::from_fn(|_| Slot::default()));
        Poptrie { chunks: vec![chunk; CHUNKS], routes: 0, sub_bytes: 0, _k: PhantomData }
    }

    /// Compile `routes`, which must be sorted by (key, length) with unique pairs and
    /// masked keys (as a `BTreeMap<(K, u8), u32>` iterates).
    pub fn build(routes: &[Route<K>]) -> Self {
        debug_assert!(routes.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
        let mut t = Self::empty();
        t.routes = routes.len();
        // Short routes paint the slots, shortest first so longer ones win.
        let mut short: Vec<&Route<K>> = routes.iter().filter(|r| r.1 <= DIRECT_BITS).collect();
        short.sort_by_key(|r| r.1);
        for &&(k, len, v) in &short {
            let start = k.stride(0, DIRECT_BITS);
            t.set_slot_values(start, 1usize << (DIRECT_BITS - len), v);
        }
        // Long routes, grouped by their direct slot (contiguous in key order).
        let long: Vec<Route<K>> = routes.iter().copied().filter(|r| r.1 > DIRECT_BITS).collect();
        let mut i = 0;
        while i < long.len() {
            let slot = long[i].0.stride(0, DIRECT_BITS);
            let mut j = i;
            while j < long.len() && long[j].0.stride(0, DIRECT_BITS) == slot {
                j += 1;
            }
            t.set_slot_routes(slot, &long[i..j]);
            i = j;
        }
        t
    }

    /// Set the short-route value of `count` slots from `first`.
    pub fn set_slot_values(&mut self, first: usize, count: usize, v: u32) {
        let mut s = first;
        while s < first + count {
            let chunk = Arc::make_mut(&mut self.chunks[s / CHUNK]);
            let end = (first + count).min((s / CHUNK + 1) * CHUNK);
            for slot in &mut chunk[s % CHUNK..s % CHUNK + (end - s)] {
                slot.value = v;
            }
            s = end;
        }
    }

    /// The short-route value of a slot.
    pub fn slot_value(&self, slot: usize) -> u32 {
        self.chunks[slot / CHUNK][slot % CHUNK].value
    }

    /// Recompile slot `slot`'s subtrie from `routes`: every route longer than
    /// `DIRECT_BITS` inside the slot, sorted by (key, length), none if empty.
    pub fn set_slot_routes(&mut self, slot: usize, routes: &[Route<K>]) {
        debug_assert!(routes.iter().all(|r| r.1 > DIRECT_BITS && r.0.stride(0, DIRECT_BITS) == slot));
        let sub = if routes.is_empty() {
            None
        } else {
            let mut b = SubBuilder { nodes: vec![PNode::default()], leaves: Vec::new() };
            b.build_node(0, routes, DIRECT_BITS, 0);
            Some(Arc::new(Sub { nodes: b.nodes.into_boxed_slice(), leaves: b.leaves.into_boxed_slice() }))
        };
        let entry = &mut Arc::make_mut(&mut self.chunks[slot / CHUNK])[slot % CHUNK];
        self.sub_bytes -= entry.sub.as_ref().map_or(0, |s| s.memory_bytes());
        self.sub_bytes += sub.as_ref().map_or(0, |s| s.memory_bytes());
        entry.sub = sub;
    }

    /// Record the number of routes (for `route_count`) after incremental changes.
    pub fn set_route_count(&mut self, n: usize) {
        self.routes = n;
    }

    #[inline(always)]
    fn slot(&self, key: K) -> &Slot {
        let s = key.stride(0, DIRECT_BITS);
        &self.chunks[s / CHUNK][s % CHUNK]
    }

    /// The value of the longest prefix covering `key`, or 0.
    #[inline(always)]
    pub fn lookup(&self, key: K) -> u32 {
        let slot = self.slot(key);
        match &slot.sub {
            None => slot.value,
            Some(sub) => match sub.lookup(key) {
                0 => slot.value,
                v => v,
            },
        }
    }

    /// Look up a batch: the direct slot for every key first, then each node level for
    /// every key still walking, so independent cache misses overlap (measured in
    /// `benches/fib.rs`: the gain is large once the table outgrows the caches).
    #[inline]
    pub fn lookup_batch(&self, keys: &[K], out: &mut [u32]) {
        let n = keys.len().min(out.len());
        for (k, o) in keys[..n].chunks(64).zip(out[..n].chunks_mut(64)) {
            self.lookup_batch64(k, o);
        }
    }

    #[inline]
    fn lookup_batch64(&self, keys: &[K], out: &mut [u32]) {
        // Per key: the subtrie it walks (None: done), its node there, its slot's value.
        let mut walk: [(Option<&Sub>, u32, u32); 64] = [(None, 0, 0); 64];
        let mut pending = false;
        for (i, &k) in keys.iter().enumerate() {
            let slot = self.slot(k);
            out[i] = slot.value;
            if let Some(sub) = &slot.sub {
                walk[i] = (Some(sub), 0, slot.value);
                pending = true;
            }
        }
        let mut depth = DIRECT_BITS;
        while pending {
            pending = false;
            for (i, &k) in keys.iter().enumerate() {
                let (Some(sub), at, value) = walk[i] else { continue };
                let node = &sub.nodes[at as usize];
                let v = k.stride(depth, STRIDE);
                let upto = u64::MAX >> (63 - v);
                if node.children & (1u64 << v) != 0 {
                    walk[i].1 = node.child_base + (node.children & upto).count_ones() - 1;
                    pending = true;
                } else {
                    let leaf = sub.leaves[(node.leaf_base + (node.leaf_runs & upto).count_ones() - 1) as usize];
                    out[i] = if leaf == 0 { value } else { leaf };
                    walk[i].0 = None;
                }
            }
            depth += STRIDE;
        }
    }

    /// Whether `lookup_batch` beats one-at-a-time lookups for this table: only once the
    /// structure outgrows the caches (criterion `fib` bench: batched is 1.4× faster for
    /// IPv4 and 1.8× for IPv6 at 1M prefixes, and ~1.2× slower on a small, cached table).
    pub fn prefers_batch(&self) -> bool {
        self.memory_bytes() > BATCH_ABOVE_BYTES
    }

    pub fn route_count(&self) -> usize {
        self.routes
    }

    /// Bytes of lookup structure (direct chunks, subtries).
    pub fn memory_bytes(&self) -> usize {
        CHUNKS * (CHUNK * std::mem::size_of::<Slot>() + 16) + self.sub_bytes
    }

    pub fn node_count(&self) -> usize {
        self.chunks.iter().flat_map(|c| c.iter()).filter_map(|s| s.sub.as_ref()).map(|s| s.nodes.len()).sum()
    }
}

struct SubBuilder {
    nodes: Vec<PNode>,
    leaves: Vec<u32>,
}

impl SubBuilder {
    /// Fill node `idx` covering bits `depth..depth+STRIDE` from `routes` (all longer
    /// than `depth`, all sharing the node's prefix), inheriting `default`.
    fn build_node<K: LpmKey>(&mut self, idx: usize, routes: &[Route<K>], depth: u8, default: u32) {
        let end = depth + STRIDE;
        let mut slots = [default; 64];
        let mut short: Vec<&Route<K>> = routes.iter().filter(|r| r.1 <= end).collect();
        short.sort_by_key(|r| r.1);
        for &&(k, len, v) in &short {
            let start = k.stride(depth, STRIDE);
            let n = 1usize << (end - len);
            slots[start..start + n].fill(v);
        }
        // Groups of longer routes, one child each, in slot order.
        let mut groups: Vec<(usize, usize, usize)> = Vec::new();
        let mut i = 0;
        while i < routes.len() {
            if routes[i].1 <= end {
                i += 1;
                continue;
            }
            let s = routes[i].0.stride(depth, STRIDE);
            let mut j = i;
            // Routes of this slot are contiguous in key order; shorter ones (painted
            // above) may sit among them, skip those.
            while j < routes.len() && routes[j].0.stride(depth, STRIDE) == s {
                j += 1;
            }
            groups.push((s, i, j));
            i = j;
        }
        let mut children = 0u64;
        for &(s, _, _) in &groups {
            children |= 1 << s;
        }
        let leaf_base = self.leaves.len() as u32;
        let mut leaf_runs = 0u64;
        let mut prev: Option<u32> = None;
        for (v, &val) in slots.iter().enumerate() {
            if children & (1 << v) != 0 {
                continue;
            }
            if prev != Some(val) {
                leaf_runs |= 1 << v;
                self.leaves.push(val);
                prev = Some(val);
            }
        }
        let child_base = self.nodes.len() as u32;
        self.nodes.resize(self.nodes.len() + groups.len(), PNode::default());
        self.nodes[idx] = PNode { children, leaf_runs, child_base, leaf_base };
        for (n, &(s, a, b)) in groups.iter().enumerate() {
            let sub: Vec<Route<K>> = routes[a..b].iter().copied().filter(|r| r.1 > end).collect();
            self.build_node(child_base as usize + n, &sub, end, slots[s]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn naive<K: LpmKey>(routes: &BTreeMap<(K, u8), u32>, key: K) -> u32 {
        routes.iter().filter(|((p, l), _)| key.masked(*l) == *p).max_by_key(|((_, l), _)| *l).map_or(0, |(_, v)| *v)
    }

    fn compile<K: LpmKey>(m: &BTreeMap<(K, u8), u32>) -> Poptrie<K> {
        let v: Vec<Route<K>> = m.iter().map(|(&(k, l), &v)| (k, l, v)).collect();
        Poptrie::build(&v)
    }

    #[test]
    fn v4_basics() {
        let mut m = BTreeMap::new();
        let p = |a: [u8; 4]| u32::from_be_bytes(a);
        m.insert((0u32, 0u8), 1);
        m.insert((p([198, 18, 0, 0]), 15), 2);
        m.insert((p([198, 18, 0, 0]), 24), 3);
        m.insert((p([198, 18, 0, 128]), 25), 4);
        m.insert((p([198, 18, 0, 129]), 32), 5);
        m.insert((p([198, 19, 255, 0]), 24), 6);
        let t = compile(&m);
        assert_eq!(t.lookup(p([8, 8, 8, 8])), 1);
        assert_eq!(t.lookup(p([198, 18, 1, 1])), 2);
        assert_eq!(t.lookup(p([198, 18, 0, 1])), 3);
        assert_eq!(t.lookup(p([198, 18, 0, 130])), 4);
        assert_eq!(t.lookup(p([198, 18, 0, 129])), 5);
        assert_eq!(t.lookup(p([198, 19, 255, 9])), 6);
        assert_eq!(t.lookup(p([198, 19, 254, 9])), 2);
        let empty = Poptrie::<u32>::empty();
        assert_eq!(empty.lookup(p([1, 2, 3, 4])), 0);
    }

    #[test]
    fn v6_deep_prefixes() {
        let mut m = BTreeMap::new();
        let a = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().unwrap());
        m.insert((a("2001:db8::"), 32), 1);
        m.insert((a("2001:db8:1::"), 48), 2);
        m.insert((a("2001:db8:1:2::"), 64), 3);
        m.insert((a("2001:db8:1:2::7"), 128), 4);
        let t = compile(&m);
        assert_eq!(t.lookup(a("2001:db8:ffff::1")), 1);
        assert_eq!(t.lookup(a("2001:db8:1:3::1")), 2);
        assert_eq!(t.lookup(a("2001:db8:1:2::8")), 3);
        assert_eq!(t.lookup(a("2001:db8:1:2::7")), 4);
        assert_eq!(t.lookup(a("2001:db9::")), 0);
        let keys = [a("2001:db8:ffff::1"), a("2001:db8:1:2::7"), a("2001:db9::"), a("2001:db8:1:3::1")];
        let mut out = [0u32; 4];
        t.lookup_batch(&keys, &mut out);
        assert_eq!(out, [1, 4, 0, 2]);
    }

    fn arb_routes_v4() -> impl Strategy<Value = BTreeMap<(u32, u8), u32>> {
        // Keys concentrated in a few /8s so prefixes nest and collide.
        proptest::collection::vec((0u32..4, any::<u32>(), 0u8..=32, 1u32..1000), 0..200).prop_map(|v| {
            v.into_iter()
                .map(|(hi, lo, len, val)| {
                    let k = (hi << 30) | (lo >> 2);
                    ((k.masked(len), len), val)
                })
                .collect()
        })
    }

    fn arb_routes_v6() -> impl Strategy<Value = BTreeMap<(u128, u8), u32>> {
        proptest::collection::vec((0u128..4, any::<u128>(), 0u8..=128, 1u32..1000), 0..200).prop_map(|v| {
            v.into_iter()
                .map(|(hi, lo, len, val)| {
                    let k = (hi << 126) | (lo >> 2);
                    ((k.masked(len), len), val)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn v4_matches_naive(m in arb_routes_v4(), keys in proptest::collection::vec(any::<u32>(), 64)) {
            let t = compile(&m);
            let mut probes: Vec<u32> = keys.iter().map(|k| (k & 0xc000_0000) | (k >> 2) ).collect();
            // Also probe each route's own first and last address.
            for &(k, l) in m.keys() { probes.push(k); probes.push(k | if l == 32 { 0 } else { u32::MAX >> l }); }
            let mut out = vec![0u32; probes.len()];
            t.lookup_batch(&probes, &mut out);
            for (i, &k) in probes.iter().enumerate() {
                prop_assert_eq!(t.lookup(k), naive(&m, k), "key {:#x}", k);
                prop_assert_eq!(out[i], naive(&m, k));
            }
        }

        #[test]
        fn v6_matches_naive(m in arb_routes_v6(), keys in proptest::collection::vec(any::<u128>(), 64)) {
            let t = compile(&m);
            let mut probes: Vec<u128> = keys.iter().map(|k| (k & (3u128 << 126)) | (k >> 2)).collect();
            for &(k, l) in m.keys() { probes.push(k); probes.push(k | if l == 128 { 0 } else { u128::MAX >> l }); }
            for &k in &probes {
                prop_assert_eq!(t.lookup(k), naive(&m, k), "key {:#x}", k);
            }
        }
    }
}
