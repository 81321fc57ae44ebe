//! A FIB: host routes (/32, /128) in an exact-match hash table, every other prefix in the
//! poptrie. A host route is always the longest match for its address, so checking the
//! hash first is the same longest-prefix match; and it keeps a million UE addresses
//! (one /128 or /32 each, a UPF's downlink routes) from turning into a million chains
//! of trie levels — a /128 in a 6-bit-stride trie is 19 levels deep. The gateway's own
//! addresses (local /32s and /128s) stay in the trie, so a router's usual table costs
//! no hash probe.
//!
//! Both parts change in place by copy-on-write of small pieces (see [`FibBuilder`]):
//! the control plane keeps one `Fib` per family, changes it route by route, and
//! publishes a clone, which shares every piece the next change does not touch.

use crate::lpm::{LpmKey, Poptrie, Route, DIRECT_BITS};
use std::collections::BTreeMap;
use std::sync::Arc;

const EMPTY: u32 = u32::MAX;
/// Slots per copy-on-write chunk of the host table.
const HOST_CHUNK: usize = 256;

/// Exact-match table of host routes: open addressing, linear probing, load ≤ 1/2,
/// slots in chunks behind `Arc`s so that an insert or a removal copies the one or two
/// chunks it writes (a growth rebuilds it whole, doubling: amortised).
pub struct HostTable<K: LpmKey> {
    /// (packed key, value): 8-byte slots for IPv4, 24-byte for IPv6.
    chunks: Vec<Arc<[(K::Packed, u32); HOST_CHUNK]>>,
    bits: u32,
    len: usize,
}

impl<K: LpmKey> Clone for HostTable<K> {
    fn clone(&self) -> Self {
        HostTable { chunks: self.chunks.clone(), bits: self.bits, len: self.len }
    }
}

impl<K: LpmKey> HostTable<K> {
    /// Build from (key, value) pairs with distinct keys.
    pub fn build(hosts: &[(K, u32)]) -> Self {
        let mut t = HostTable::with_bits(if hosts.is_empty() { 0 } else { (hosts.len() * 2).next_power_of_two().trailing_zeros().max(8) });
        for &(k, v) in hosts {
            t.insert(k, v);
        }
        t
    }

    fn with_bits(bits: u32) -> Self {
        let n = if bits == 0 { 0 } else { (1usize << bits) / HOST_CHUNK };
        let chunk = Arc::new([(K::Packed::default(), EMPTY); HOST_CHUNK]);
        HostTable { chunks: vec![chunk; n], bits, len: 0 }
    }

    fn capacity(&self) -> usize {
        self.chunks.len() * HOST_CHUNK
    }

    #[inline(always)]
    fn slot(&self, i: usize) -> &(K::Packed, u32) {
        &self.chunks[i / HOST_CHUNK][i % HOST_CHUNK]
    }

    fn slot_mut(&mut self, i: usize) -> &mut (K::Packed, u32) {
        &mut Arc::make_mut(&mut self.chunks[i / HOST_CHUNK])[i % HOST_CHUNK]
    }

    /// Add or replace `k`'s value.
    pub fn insert(&mut self, k: K, v: u32) {
        if (self.len + 1) * 2 > self.capacity() {
            let mut bigger = HostTable::with_bits((self.bits + 1).max(8));
            for c in &self.chunks {
                for &(pk, pv) in c.iter() {
                    if pv != EMPTY {
                        bigger.insert(K::unpack(pk), pv);
                    }
                }
            }
            *self = bigger;
        }
        let mask = self.capacity() - 1;
        let mut i = self.home(k);
        loop {
            let (sk, sv) = *self.slot(i);
            if sv == EMPTY {
                self.len += 1;
                break;
            }
            if sk == k.pack() {
                break;
            }
            i = (i + 1) & mask;
        }
        *self.slot_mut(i) = (k.pack(), v);
    }

    /// Remove `k`; returns its value. Later entries of the probe run shift back
    /// (no tombstones: lookups stay as short as the load allows).
    pub fn remove(&mut self, k: K) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mask = self.capacity() - 1;
        let mut i = self.home(k);
        loop {
            let (sk, sv) = *self.slot(i);
            if sv == EMPTY {
                return None;
            }
            if sk == k.pack() {
                break;
            }
            i = (i + 1) & mask;
        }
        let gone = self.slot(i).1;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let (sk, sv) = *self.slot(j);
            if sv == EMPTY {
                break;
            }
            let h = self.home(K::unpack(sk));
            // Entry j may move to the hole at i unless its home lies cyclically in (i, j].
            let stays = if i <= j { i < h && h <= j } else { i < h || h <= j };
            if !stays {
                *self.slot_mut(i) = (sk, sv);
                i = j;
            }
        }
        *self.slot_mut(i) = (K::Packed::default(), EMPTY);
        self.len -= 1;
        Some(gone)
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl<K: LpmKey> HostTable<K> {
    #[inline(always)]
    fn home(&self, k: K) -> usize {
        (k.fold64().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    pub fn get(&self, k: K) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mask = self.capacity() - 1;
        let pk = k.pack();
        let mut i = self.home(k);
        loop {
            let (sk, v) = *self.slot(i);
            if v == EMPTY {
                return None;
            }
            if sk == pk {
                return Some(v);
            }
            i = (i + 1) & mask;
        }
    }

    /// The slot a lookup of `k` starts at, for prefetching.
    #[inline(always)]
    pub fn home_slot(&self, k: K) -> Option<&(K::Packed, u32)> {
        if self.len == 0 {
            return None;
        }
        Some(self.slot(self.home(k)))
    }

    pub fn memory_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<(K::Packed, u32)>()
    }
}

/// Host table plus poptrie: the FIB of one address family.
#[derive(Clone)]
pub struct Fib<K: LpmKey> {
    pub hosts: HostTable<K>,
    pub trie: Poptrie<K>,
}

impl<K: LpmKey + Default> Fib<K> {
    pub fn empty() -> Self {
        Fib { hosts: HostTable::build(&[]), trie: Poptrie::empty() }
    }

    /// Build from routes sorted by (prefix, length): host routes other than the
    /// gateway's own addresses into the hash, the rest into the trie.
    pub fn build(routes: &[Route<K>]) -> Self {
        let hosts: Vec<(K, u32)> = routes.iter().filter(|r| in_host_table(r)).map(|r| (r.0, r.2)).collect();
        let rest: Vec<Route<K>> = routes.iter().filter(|r| !in_host_table(r)).copied().collect();
        Fib { hosts: HostTable::build(&hosts), trie: Poptrie::build(&rest) }
    }
}

/// Host routes go to the hash, except the gateway's own addresses: with only those, no
/// lookup pays for a probe (a router's usual table), and a UE address (one /32 or /128
/// per tunnel) costs one probe — where a /32 is three trie levels deep and a /128
/// nineteen (measured in docs/PERFORMANCE.md).
fn in_host_table<K: LpmKey>(r: &Route<K>) -> bool {
    r.1 == K::BITS && r.2 != crate::tables::ADJ_LOCAL
}

/// The control plane's copy of one family's FIB with the routes it was compiled from,
/// changed one route at a time: a route longer than the direct table's `DIRECT_BITS`
/// recompiles its direct slot's subtrie (the routes sharing its first 16 bits), a shorter
/// one repaints the slots it covers, a host route is one hash insert or removal. What a
/// change copies is those pieces, never the table; [`FibBuilder::fib`] is what to publish.
pub struct FibBuilder<K: LpmKey> {
    /// Routes of at most `DIRECT_BITS` bits (they paint direct slots).
    short: BTreeMap<(K, u8), u32>,
    /// Longer routes kept in the trie (host routes of the gateway's own addresses too),
    /// per direct slot, sorted by (key, length): a slot's subtrie compiles straight from
    /// its vector, and a change is a binary search and a short shift, where an ordered
    /// map of the million paid a cache miss per level and a node per route.
    long: Vec<Vec<Route<K>>>,
    long_len: usize,
    fib: Fib<K>,
}

impl<K: LpmKey + Default> FibBuilder<K> {
    pub fn new() -> Self {
        FibBuilder { short: BTreeMap::new(), long: vec![Vec::new(); 1 << DIRECT_BITS], long_len: 0, fib: Fib::empty() }
    }

    /// Replace everything with `routes` (masked keys; for a prefix listed twice the later
    /// entry wins), compiled in one pass: the bulk load.
    pub fn rebuild(&mut self, mut v: Vec<Route<K>>) {
        v.sort_by_key(|r| (r.0, r.1)); // stable: duplicates keep their order
        let mut out: Vec<Route<K>> = Vec::with_capacity(v.len());
        for r in v {
            match out.last_mut() {
                Some(last) if (last.0, last.1) == (r.0, r.1) => *last = r,
                _ => out.push(r),
            }
        }
        self.fib = Fib::build(&out);
        self.short = out.iter().filter(|r| r.1 <= DIRECT_BITS).map(|r| ((r.0, r.1), r.2)).collect();
        self.long = vec![Vec::new(); 1 << DIRECT_BITS];
        self.long_len = 0;
        for r in out.iter().filter(|r| r.1 > DIRECT_BITS && !in_host_table(r)) {
            self.long[r.0.stride(0, DIRECT_BITS)].push(*r);
            self.long_len += 1;
        }
    }

    /// The FIB as it stands: clone it to publish (a clone shares every piece).
    pub fn fib(&self) -> &Fib<K> {
        &self.fib
    }

    pub fn route_count(&self) -> usize {
        self.short.len() + self.long_len + self.fib.hosts.len()
    }

    /// The value for exactly this prefix, if it has a route.
    pub fn get(&self, k: K, len: u8) -> Option<u32> {
        let k = k.masked(len);
        if len <= DIRECT_BITS {
            self.short.get(&(k, len)).copied()
        } else {
            let slot = &self.long[k.stride(0, DIRECT_BITS)];
            let found = slot.binary_search_by_key(&(k, len), |r| (r.0, r.1)).ok().map(|i| slot[i].2);
            found.or_else(|| if len == K::BITS { self.fib.hosts.get(k) } else { None })
        }
    }

    /// Set (`Some`) or remove (`None`) the route for `k/len`.
    pub fn set(&mut self, k: K, len: u8, v: Option<u32>) {
        if let Some(slot) = self.set_deferred(k, len, v) {
            self.recompile_slot(slot, &[(k.masked(len), len)]);
        }
    }

    /// Many changes: each direct slot's subtrie is recompiled once, after all of them.
    pub fn set_many(&mut self, changes: impl IntoIterator<Item = (K, u8, Option<u32>)>) {
        let mut dirty: BTreeMap<usize, Vec<(K, u8)>> = BTreeMap::new();
        for (k, len, v) in changes {
            if let Some(slot) = self.set_deferred(k, len, v) {
                dirty.entry(slot).or_default().push((k.masked(len), len));
            }
        }
        for (slot, changed) in dirty {
            self.recompile_slot(slot, &changed);
        }
    }

    /// Apply a change except the subtrie recompilation; returns the slot that needs it.
    fn set_deferred(&mut self, k: K, len: u8, v: Option<u32>) -> Option<usize> {
        let k = k.masked(len);
        let mut dirty = None;
        if len <= DIRECT_BITS {
            match v {
                Some(v) => self.short.insert((k, len), v),
                None => self.short.remove(&(k, len)),
            };
            self.repaint(k, len);
        } else {
            let slot = &mut self.long[k.stride(0, DIRECT_BITS)];
            let at = slot.binary_search_by_key(&(k, len), |r| (r.0, r.1));
            let in_trie = match (v, at) {
                (Some(v), Ok(i)) if !in_host_table(&(k, len, v)) => {
                    slot[i].2 = v;
                    true
                }
                (Some(v), Err(i)) if !in_host_table(&(k, len, v)) => {
                    slot.insert(i, (k, len, v));
                    self.long_len += 1;
                    true
                }
                (_, Ok(i)) => {
                    slot.remove(i);
                    self.long_len -= 1;
                    true
                }
                (_, Err(_)) => false,
            };
            if len == K::BITS {
                match v {
                    Some(v) if in_host_table(&(k, len, v)) => self.fib.hosts.insert(k, v),
                    _ => {
                        self.fib.hosts.remove(k);
                    }
                }
            }
            if in_trie {
                dirty = Some(k.stride(0, DIRECT_BITS));
            }
        }
        self.fib.trie.set_route_count(self.short.len() + self.long_len);
        dirty
    }

    /// Recompile one direct slot's subtrie from the long routes inside it, of which
    /// `changed` are the prefixes changed since its last compilation (only the nodes
    /// they overlap are compiled again).
    fn recompile_slot(&mut self, slot: usize, changed: &[(K, u8)]) {
        self.fib.trie.update_slot_routes(slot, &self.long[slot], Some(changed));
    }

    /// Repaint the direct slots `k/len` (at most `DIRECT_BITS` long) covers: the value
    /// of the longest shorter route covering it, then every short route inside it,
    /// shortest first.
    fn repaint(&mut self, k: K, len: u8) {
        let base = (0..len).rev().find_map(|l| self.short.get(&(k.masked(l), l)).copied()).unwrap_or(0);
        let first = k.stride(0, DIRECT_BITS);
        self.fib.trie.set_slot_values(first, 1 << (DIRECT_BITS - len), base);
        let last = k.last(len);
        let mut inside: Vec<(K, u8, u32)> =
            self.short.range((k, len)..=(last, DIRECT_BITS)).map(|(&(k, l), &v)| (k, l, v)).filter(|r| r.1 >= len).collect();
        inside.sort_by_key(|r| r.1);
        for (k, l, v) in inside {
            self.fib.trie.set_slot_values(k.stride(0, DIRECT_BITS), 1 << (DIRECT_BITS - l), v);
        }
    }
}

impl<K: LpmKey + Default> Default for FibBuilder<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: LpmKey> Fib<K> {
    #[inline(always)]
    pub fn lookup(&self, k: K) -> u32 {
        match self.hosts.get(k) {
            Some(v) => v,
            None => self.trie.lookup(k),
        }
    }

    /// Look up many keys: the trie level by level (`Poptrie::lookup_batch`), host routes
    /// with every slot prefetched first.
    pub fn lookup_batch(&self, keys: &[K], out: &mut [u32]) {
        self.trie.lookup_batch(keys, out);
        if !self.hosts.is_empty() {
            for &k in keys {
                if let Some(s) = self.hosts.home_slot(k) {
                    engine::prefetch::read(s);
                }
            }
            for (o, &k) in out.iter_mut().zip(keys) {
                if let Some(v) = self.hosts.get(k) {
                    *o = v;
                }
            }
        }
    }

    /// Whether the tables are large enough for `lookup_batch` to win.
    pub fn prefers_batch(&self) -> bool {
        self.trie.prefers_batch() || self.hosts.memory_bytes() > 2 << 20
    }

    pub fn memory_bytes(&self) -> usize {
        self.trie.memory_bytes() + self.hosts.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn naive(routes: &[Route<u32>], k: u32) -> u32 {
        routes.iter().filter(|r| k.masked(r.1) == r.0).max_by_key(|r| r.1).map_or(0, |r| r.2)
    }

    /// The reference: the longest of the routes covering `k`.
    fn reference<K: LpmKey>(routes: &BTreeMap<(K, u8), u32>, k: K) -> u32 {
        routes.iter().filter(|((p, l), _)| k.masked(*l) == *p).max_by_key(|((_, l), _)| *l).map_or(0, |(_, v)| *v)
    }

    /// Apply `ops` (add when the value is non-zero, else delete) to a builder and to a
    /// reference map; after each step, the builder's published FIB answers as the
    /// reference for `probes` plus each route's first and last address, one at a time
    /// and batched, and an earlier published clone still answers as it did.
    fn check_incremental<K: LpmKey + Default>(ops: &[(K, u8, u32)], probes: &[K]) -> Result<(), TestCaseError> {
        let mut b = FibBuilder::<K>::new();
        let mut m: BTreeMap<(K, u8), u32> = BTreeMap::new();
        let mut snapshot: Option<(Fib<K>, BTreeMap<(K, u8), u32>)> = None;
        for (step, &(k, l, v)) in ops.iter().enumerate() {
            let k = k.masked(l);
            if v == 0 {
                m.remove(&(k, l));
                b.set(k, l, None);
            } else {
                m.insert((k, l), v);
                b.set(k, l, Some(v));
            }
            prop_assert_eq!(b.route_count(), m.len());
            prop_assert_eq!(b.get(k, l), m.get(&(k, l)).copied());
            let mut keys: Vec<K> = probes.to_vec();
            for &(p, pl) in m.keys() {
                keys.push(p);
                keys.push(p.last(pl));
            }
            let fib = b.fib().clone();
            let mut out = vec![0; keys.len()];
            fib.lookup_batch(&keys, &mut out);
            for (i, &key) in keys.iter().enumerate() {
                let want = reference(&m, key);
                prop_assert_eq!(fib.lookup(key), want, "step {} key {:?}", step, key);
                prop_assert_eq!(out[i], want, "batched, step {} key {:?}", step, key);
            }
            b.fib().trie.check_arena();
            if let Some((old, old_m)) = &snapshot {
                for &key in &keys {
                    prop_assert_eq!(old.lookup(key), reference(old_m, key), "published clone changed");
                }
            }
            if step % 7 == 3 {
                snapshot = Some((fib, m.clone()));
            }
        }
        Ok(())
    }

    /// Lengths as tables have them, short and host routes included; values 0 delete,
    /// 1 is the gateway's own address (kept in the trie even as a host route).
    fn ops_v4() -> impl Strategy<Value = Vec<(u32, u8, u32)>> {
        prop::collection::vec(
            (
                (0u32..4).prop_flat_map(|hi| any::<u32>().prop_map(move |lo| (hi << 30) | (lo >> 2))),
                prop::sample::select(vec![0u8, 4, 8, 15, 16, 17, 20, 22, 24, 24, 28, 31, 32, 32]),
                prop::sample::select(vec![0u32, 0, 1, 5, 6, 7, 9]),
            ),
            1..60,
        )
    }

    fn ops_v6() -> impl Strategy<Value = Vec<(u128, u8, u32)>> {
        prop::collection::vec(
            (
                (0u128..4).prop_flat_map(|hi| any::<u128>().prop_map(move |lo| (hi << 126) | (lo >> 2))),
                prop::sample::select(vec![0u8, 3, 12, 16, 17, 29, 32, 48, 48, 56, 64, 127, 128, 128]),
                prop::sample::select(vec![0u32, 0, 1, 5, 6, 7, 9]),
            ),
            1..60,
        )
    }

    /// The churn tests' body: `batches` of `per_batch` random changes (a third deletes
    /// of routes present, the rest adds of `draw`n prefixes), published as the control
    /// plane publishes them, checked after every batch against the reference, the
    /// arena's accounting (the builder's own copy, with its owner lists) and up to three
    /// clones published before.
    fn churn<K: LpmKey + Default>(
        seed: u64,
        batches: usize,
        per_batch: usize,
        draw: impl Fn(u64) -> (K, u8),
        probe: impl Fn(u64) -> K,
    ) -> Result<(), TestCaseError> {
        let mut rng = seed | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut b = FibBuilder::<K>::new();
        let mut m: BTreeMap<(K, u8), u32> = BTreeMap::new();
        let mut published: Vec<(Fib<K>, BTreeMap<(K, u8), u32>)> = Vec::new();
        for _ in 0..batches {
            let mut changes = Vec::new();
            for _ in 0..per_batch {
                let r = next();
                if r % 3 == 0 && !m.is_empty() {
                    let nth = (r >> 8) as usize % m.len();
                    let &(k, l) = m.keys().nth(nth).expect("in range");
                    m.remove(&(k, l));
                    changes.push((k, l, None));
                } else {
                    let (k, l) = draw(r);
                    let v = 2 + (r >> 20) as u32 % 50;
                    m.insert((k, l), v);
                    changes.push((k, l, Some(v)));
                }
            }
            b.set_many(changes);
            b.fib().trie.check_arena();
            let fib = b.fib().clone();
            prop_assert_eq!(b.route_count(), m.len());
            let mut keys: Vec<K> = (0..32).map(|_| probe(next())).collect();
            keys.extend(m.keys().flat_map(|&(k, l)| [k, k.last(l)]));
            let mut out = vec![0; keys.len()];
            fib.lookup_batch(&keys, &mut out);
            for (i, &k) in keys.iter().enumerate() {
                let want = reference(&m, k);
                prop_assert_eq!(fib.lookup(k), want, "key {:?}", k);
                prop_assert_eq!(out[i], want, "batched, key {:?}", k);
            }
            for (old, old_m) in &published {
                for &k in &keys {
                    prop_assert_eq!(old.lookup(k), reference(old_m, k), "published clone changed, key {:?}", k);
                }
            }
            published.push((fib, m.clone()));
            if published.len() > 3 {
                published.remove(0);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn incremental_v4_matches_reference(ops in ops_v4(), probes in prop::collection::vec(any::<u32>(), 16)) {
            // Deletes also of prefixes added earlier: replay some adds as deletes.
            let mut ops = ops;
            let again: Vec<(u32, u8, u32)> = ops.iter().step_by(3).map(|&(k, l, _)| (k, l, 0)).collect();
            ops.extend(again);
            let probes: Vec<u32> = probes.iter().map(|k| (k & 0xc000_0000) | (k >> 2)).collect();
            check_incremental(&ops, &probes)?;
        }

        #[test]
        fn incremental_v6_matches_reference(ops in ops_v6(), probes in prop::collection::vec(any::<u128>(), 16)) {
            let mut ops = ops;
            let again: Vec<(u128, u8, u32)> = ops.iter().step_by(3).map(|&(k, l, _)| (k, l, 0)).collect();
            ops.extend(again);
            let probes: Vec<u128> = probes.iter().map(|k| (k & (3u128 << 126)) | (k >> 2)).collect();
            check_incremental(&ops, &probes)?;
        }

        /// Changes applied in batches (`set_many`: each touched subtrie recompiled once)
        /// answer as the reference after every batch.
        #[test]
        fn batched_changes_match_reference(ops in ops_v4(), ops6 in ops_v6(), probes in prop::collection::vec(any::<u32>(), 16)) {
            let mut b = FibBuilder::<u32>::new();
            let mut m = BTreeMap::new();
            let mut b6 = FibBuilder::<u128>::new();
            let mut m6 = BTreeMap::new();
            for (chunk, chunk6) in ops.chunks(7).zip(ops6.chunks(7).chain(std::iter::repeat(&[][..]))) {
                b.set_many(chunk.iter().map(|&(k, l, v)| (k, l, if v == 0 { None } else { Some(v) })));
                for &(k, l, v) in chunk {
                    if v == 0 { m.remove(&(k.masked(l), l)); } else { m.insert((k.masked(l), l), v); }
                }
                b6.set_many(chunk6.iter().map(|&(k, l, v)| (k, l, if v == 0 { None } else { Some(v) })));
                for &(k, l, v) in chunk6 {
                    if v == 0 { m6.remove(&(k.masked(l), l)); } else { m6.insert((k.masked(l), l), v); }
                }
                let mut keys: Vec<u32> = probes.iter().map(|k| (k & 0xc000_0000) | (k >> 2)).collect();
                keys.extend(m.keys().flat_map(|&(k, l)| [k, k.last(l)]));
                for &k in &keys {
                    prop_assert_eq!(b.fib().lookup(k), reference(&m, k));
                }
                for &(k, l) in m6.keys() {
                    prop_assert_eq!(b6.fib().lookup(k), reference(&m6, k));
                    prop_assert_eq!(b6.fib().lookup(k.last(l)), reference(&m6, k.last(l)));
                }
                prop_assert_eq!(b.route_count(), m.len());
            }
        }

        /// Churn: random adds and deletes (new prefixes, deletes of earlier ones) in a
        /// few /16s, so the same subtries are rewritten over and over and arena pages
        /// fill, thin out and are reclaimed, applied in batches as the control plane
        /// publishes them. After every batch the FIB answers as the reference (one at a
        /// time and batched), the arena's accounting matches its slots, and a clone
        /// published batches earlier still answers as it did.
        #[test]
        fn churn_matches_reference(seed in any::<u64>(), batches in 5usize..60, per_batch in 1usize..40) {
            let lens = [8u8, 15, 16, 17, 18, 20, 22, 24, 24, 24, 26, 28, 30, 32];
            // Four /16s: 198.18, 198.19, 198.20, 203.0.
            let draw = |r: u64| {
                let hi = [0xc612u32, 0xc613, 0xc614, 0xcb00][(r >> 4) as usize % 4];
                let l = lens[(r >> 12) as usize % lens.len()];
                (((hi << 16) | (r >> 32) as u32 & 0xffff).masked(l), l)
            };
            let probe = |r: u64| [0xc612_0000u32, 0xc613_0000, 0xcb00_0000, 0x0800_0000][r as usize % 4] | (r >> 40) as u32 & 0xffff;
            churn(seed, batches, per_batch, draw, probe)?;
        }

        /// The same for IPv6 where BGP tables are dense: most changes inside
        /// 2001:db8::/32 and three more /32s of the same /16 (so one subtrie holds them
        /// all, and its updates copy most of it and compile a few paths), deep prefixes
        /// to /128 among them, and a few elsewhere.
        #[test]
        fn churn_v6_matches_reference(seed in any::<u64>(), batches in 5usize..40, per_batch in 1usize..40) {
            let lens = [3u8, 16, 17, 29, 32, 36, 40, 44, 48, 48, 48, 52, 56, 64, 64, 96, 127, 128];
            let draw = |r: u64| {
                let hi = [0x2001_0db8u128, 0x2001_0db9, 0x2001_0dba, 0x2001_4000, 0x2a00_0000][(r >> 4) as usize % 5];
                let l = lens[(r >> 12) as usize % lens.len()];
                // The bits past the /32 from the draw, spread over the first 64.
                let lo = ((r >> 24) as u128) << 88 | ((r >> 40) as u128) << 64 | (r as u128 & 0xff);
                ((hi << 96 | lo).masked(l), l)
            };
            let probe = |r: u64| [0x2001_0db8u128 << 96, 0x2001_0dba << 96, 0x2a00 << 112, 0x3000 << 112][r as usize % 4] | ((r >> 8) as u128) << 72 | r as u128;
            churn(seed, batches, per_batch, draw, probe)?;
        }
        /// The host table after inserts and removals holds exactly the reference's keys
        /// (removal shifts probe runs back; growth rehashes), also across a grow.
        #[test]
        fn host_table_insert_remove(ops in prop::collection::vec((0u32..600, any::<bool>()), 0..1500)) {
            let mut t = HostTable::<u32>::build(&[]);
            let mut m = std::collections::HashMap::new();
            for (k, add) in ops {
                let key = k.wrapping_mul(0x0100_0193);
                if add { t.insert(key, k + 2); m.insert(key, k + 2); } else { prop_assert_eq!(t.remove(key), m.remove(&key)); }
                prop_assert_eq!(t.len(), m.len());
            }
            for k in 0u32..600 {
                let key = k.wrapping_mul(0x0100_0193);
                prop_assert_eq!(t.get(key), m.get(&key).copied());
            }
        }
    }

    proptest! {
        /// Host routes in the hash plus the rest in the trie give the longest match.
        #[test]
        fn matches_naive_lpm(raw in prop::collection::btree_map((any::<u32>(), prop::sample::select(vec![8u8, 16, 24, 30, 32, 32, 32])), 1u32..1000, 0..800),
                             probes in prop::collection::vec(any::<u32>(), 0..100)) {
            let dedup: std::collections::BTreeMap<(u32, u8), u32> = raw.iter().map(|(&(k, l), &v)| ((k.masked(l), l), v)).collect();
            let routes: Vec<Route<u32>> = dedup.into_iter().map(|((k, l), v)| (k, l, v)).collect();
            let fib = Fib::build(&routes);
            let mut keys: Vec<u32> = probes;
            keys.extend(routes.iter().map(|r| r.0));
            let mut out = vec![0; keys.len()];
            fib.lookup_batch(&keys, &mut out);
            for (i, &k) in keys.iter().enumerate() {
                prop_assert_eq!(fib.lookup(k), naive(&routes, k));
                prop_assert_eq!(out[i], naive(&routes, k));
            }
        }
    }
}
