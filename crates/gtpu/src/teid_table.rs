//! `TeidTable`: the decap lookup from (local endpoint, TEID) to a tunnel id.
//!
//! Each slot holds the key, the tunnel id and 32 bits of `aux` data the caller keeps with
//! it (GTP-U keeps what decap needs, so a decap reads one slot and never the tunnel).
//! Open addressing with linear probing over 16-byte slots (four per cache line), a
//! Fibonacci hash of the 64-bit key, load factor at most 1/2, and backward-shift
//! deletion (no tombstones, so a long-lived table never degrades). The slots live in a
//! [`CowVec`], so adding or deleting one tunnel under traffic copies one chunk. A lookup
//! touches the chunk pointer and, at this load factor, almost always one slot line,
//! which `prefetch` can start for a whole vector before any probe waits on memory.

use engine::cow::CowVec;

/// A packed decap key: the endpoint index (with bit 31 set for IPv6 endpoints) in the
/// high word, the TEID in the low word.
pub type TeidKey = u64;

pub const fn key(endpoint: u32, teid: u32) -> TeidKey {
    ((endpoint as u64) << 32) | teid as u64
}

const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Slot {
    key: TeidKey,
    value: u32,
    aux: u32,
}

const FREE: Slot = Slot { key: 0, value: EMPTY, aux: 0 };

#[derive(Clone)]
pub struct TeidTable {
    slots: CowVec<Slot>,
    bits: u32,
    len: usize,
}

impl Default for TeidTable {
    fn default() -> Self {
        TeidTable::with_capacity(0)
    }
}

impl TeidTable {
    /// A table sized for `n` entries without growing.
    pub fn with_capacity(n: usize) -> Self {
        let bits = (n.max(8) * 2).next_power_of_two().trailing_zeros();
        TeidTable { slots: CowVec::new(1 << bits, FREE), bits, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn home(&self, k: TeidKey) -> usize {
        (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        (1 << self.bits) - 1
    }

    /// The slot a lookup of `k` starts at, for prefetching.
    #[inline(always)]
    pub fn home_slot(&self, k: TeidKey) -> Option<&Slot> {
        self.slots.get(self.home(k))
    }

    #[inline(always)]
    pub fn get(&self, k: TeidKey) -> Option<u32> {
        self.get_entry(k).map(|(v, _)| v)
    }

    /// The value and its aux data.
    #[inline(always)]
    pub fn get_entry(&self, k: TeidKey) -> Option<(u32, u32)> {
        let mut i = self.home(k);
        loop {
            let s = self.slots.get(i)?;
            if s.value == EMPTY {
                return None;
            }
            if s.key == k {
                return Some((s.value, s.aux));
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Insert or replace; returns the previous value.
    pub fn insert(&mut self, k: TeidKey, v: u32) -> Option<u32> {
        self.insert_entry(k, v, 0)
    }

    /// Insert or replace a value with its aux data; returns the previous value.
    pub fn insert_entry(&mut self, k: TeidKey, v: u32, aux: u32) -> Option<u32> {
        assert!(v != EMPTY, "tunnel id {v} is reserved");
        if (self.len + 1) * 2 > 1 << self.bits {
            self.grow();
        }
        let mut i = self.home(k);
        loop {
            let s = *self.slots.get(i).expect("slot index within the table");
            if s.value == EMPTY {
                *self.slots.get_mut(i).expect("slot index") = Slot { key: k, value: v, aux };
                self.len += 1;
                return None;
            }
            if s.key == k {
                *self.slots.get_mut(i).expect("slot index") = Slot { key: k, value: v, aux };
                return Some(s.value);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Remove `k`; returns its value.
    pub fn remove(&mut self, k: TeidKey) -> Option<u32> {
        let mask = self.mask();
        let mut i = self.home(k);
        loop {
            let s = *self.slots.get(i)?;
            if s.value == EMPTY {
                return None;
            }
            if s.key == k {
                break;
            }
            i = (i + 1) & mask;
        }
        let old = self.slots.get(i).map(|s| s.value);
        // Backward shift: move later members of the probe run into the hole when their
        // home is at or before it, so every key stays reachable from its home.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let s = *self.slots.get(j).expect("slot index");
            if s.value == EMPTY {
                break;
            }
            let home = self.home(s.key);
            // Distance from home to j versus from home to the hole, on the ring.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                *self.slots.get_mut(hole).expect("slot index") = s;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        *self.slots.get_mut(hole).expect("slot index") = FREE;
        self.len -= 1;
        old
    }

    fn grow(&mut self) {
        let mut bigger = TeidTable { slots: CowVec::new(1 << (self.bits + 1), FREE), bits: self.bits + 1, len: 0 };
        for i in 0..1 << self.bits {
            let s = *self.slots.get(i).expect("slot index");
            if s.value != EMPTY {
                bigger.insert_entry(s.key, s.value, s.aux);
            }
        }
        *self = bigger;
    }

    pub fn memory_bytes(&self) -> usize {
        self.slots.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Any sequence of inserts and removes leaves the table agreeing with a HashMap.
        #[test]
        fn matches_hashmap(ops in prop::collection::vec((any::<bool>(), 0u32..4, 0u32..64, 0u32..1000), 0..400)) {
            let mut t = TeidTable::with_capacity(4);
            let mut m = HashMap::new();
            for (ins, ep, teid, v) in ops {
                let k = key(ep, teid);
                if ins {
                    prop_assert_eq!(t.insert(k, v), m.insert(k, v));
                } else {
                    prop_assert_eq!(t.remove(k), m.remove(&k));
                }
                prop_assert_eq!(t.len(), m.len());
            }
            for ep in 0..4 {
                for teid in 0..64 {
                    let k = key(ep, teid);
                    prop_assert_eq!(t.get(k), m.get(&k).copied());
                }
            }
        }
    }

    #[test]
    fn a_published_copy_does_not_see_later_changes() {
        let mut t = TeidTable::with_capacity(100);
        t.insert(key(0, 1), 10);
        let published = t.clone();
        t.insert(key(0, 2), 20);
        t.remove(key(0, 1));
        assert_eq!(published.get(key(0, 1)), Some(10));
        assert_eq!(published.get(key(0, 2)), None);
        assert_eq!(t.get(key(0, 1)), None);
        assert_eq!(t.get(key(0, 2)), Some(20));
    }
}
