//! A FIB: host routes (/32, /128) in an exact-match hash table, every other prefix in the
//! poptrie. A host route is always the longest match for its address, so checking the
//! hash first is the same longest-prefix match; and it keeps a million UE addresses
//! (one /128 or /32 each, a UPF's downlink routes) from turning into a million chains
//! of trie levels — a /128 in a 6-bit-stride trie is 19 levels deep.

use crate::lpm::{LpmKey, Poptrie, Route};

const EMPTY: u32 = u32::MAX;

/// Exact-match table of host routes: open addressing, linear probing, load ≤ 1/2, built
/// once per FIB version (never changed in place).
pub struct HostTable<K: LpmKey> {
    /// (packed key, value): 8-byte slots for IPv4, 24-byte for IPv6.
    slots: Vec<(K::Packed, u32)>,
    bits: u32,
    len: usize,
}

impl<K: LpmKey> HostTable<K> {
    /// Build from (key, value) pairs with distinct keys.
    pub fn build(hosts: &[(K, u32)]) -> Self {
        if hosts.is_empty() {
            return HostTable { slots: Vec::new(), bits: 0, len: 0 };
        }
        let bits = (hosts.len() * 2).next_power_of_two().trailing_zeros().max(3);
        let mut t = HostTable { slots: vec![(K::Packed::default(), EMPTY); 1 << bits], bits, len: hosts.len() };
        let mask = (1usize << bits) - 1;
        for &(k, v) in hosts {
            let mut i = t.home(k);
            while t.slots[i].1 != EMPTY && t.slots[i].0 != k.pack() {
                i = (i + 1) & mask;
            }
            t.slots[i] = (k.pack(), v);
        }
        t
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
        let mask = self.slots.len() - 1;
        let pk = k.pack();
        let mut i = self.home(k);
        loop {
            let (sk, v) = *self.slots.get(i)?;
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
        self.slots.get(self.home(k))
    }

    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<(K::Packed, u32)>()
    }
}

/// Host table plus poptrie: the FIB of one address family.
pub struct Fib<K: LpmKey> {
    pub hosts: HostTable<K>,
    pub trie: Poptrie<K>,
}

impl<K: LpmKey + Default> Fib<K> {
    pub fn empty() -> Self {
        Fib { hosts: HostTable::build(&[]), trie: Poptrie::empty() }
    }

    /// Build from routes sorted by (prefix, length). With no host routes but the
    /// gateway's own addresses, everything stays in the trie (a router's usual table:
    /// no lookup pays for a hash probe). One other host route (a UE address) moves them
    /// all to the hash: a /32 is three trie levels deep and a /128 nineteen, where the
    /// probe is one multiply and, usually, one slot (measured in docs/PERFORMANCE.md).
    pub fn build(routes: &[Route<K>]) -> Self {
        let hosts_beyond_ours = routes.iter().any(|r| r.1 == K::BITS && r.2 != crate::tables::ADJ_LOCAL);
        if !hosts_beyond_ours {
            return Fib { hosts: HostTable::build(&[]), trie: Poptrie::build(routes) };
        }
        let hosts: Vec<(K, u32)> = routes.iter().filter(|r| r.1 == K::BITS).map(|r| (r.0, r.2)).collect();
        let rest: Vec<Route<K>> = routes.iter().filter(|r| r.1 != K::BITS).copied().collect();
        Fib { hosts: HostTable::build(&hosts), trie: Poptrie::build(&rest) }
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

    fn naive(routes: &[Route<u32>], k: u32) -> u32 {
        routes.iter().filter(|r| k.masked(r.1) == r.0).max_by_key(|r| r.1).map_or(0, |r| r.2)
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
