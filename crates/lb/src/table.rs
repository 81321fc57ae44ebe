//! A bounded, per-worker hash table with expiring entries: the session table and the
//! client-affinity table are two of these. Set-associative open addressing with two
//! choices: a key hashes to two buckets of [`WAYS`] slots, looked up by a 32-bit tag
//! before the key is compared; an insert takes a free or expired slot of the bucket with more
//! room, or fails (the caller counts the table full). Random keys fill 76 %
//! of the slots before the first refusal (the test below measures it): size the table
//! for a third more sessions than it must hold. Slots never move, so an entry can name another by index (a session's
//! twin), and nothing is allocated after construction. Time is a parameter (milliseconds
//! of any clock the caller keeps), so tests run on virtual time.

/// Slots per bucket.
pub const WAYS: usize = 8;

/// A key the table can hash.
pub trait TableKey: Copy + Eq + Default {
    fn hash(&self) -> u32;
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot<K, V> {
    /// When the entry expires, in the caller's milliseconds; 0 for a free slot.
    expires: u64,
    key: K,
    val: V,
}

/// Where an entry lives; stable for the entry's life.
pub type SlotIdx = u32;

pub struct Table<K, V> {
    /// Each slot's key hash, apart from the slots: a lookup reads its bucket's tags
    /// (one 32-byte run) and only the slot whose tag matches.
    tags: Box<[u32]>,
    slots: Box<[Slot<K, V>]>,
    bucket_mask: u32,
}

impl<K: TableKey, V: Copy + Default> Table<K, V> {
    /// A table of at least `capacity` slots (whole buckets, a power of two of them).
    pub fn new(capacity: usize) -> Self {
        let buckets = capacity.div_ceil(WAYS).max(1).next_power_of_two();
        Table {
            tags: vec![0; buckets * WAYS].into_boxed_slice(),
            slots: vec![Slot::default(); buckets * WAYS].into_boxed_slice(),
            bucket_mask: buckets as u32 - 1,
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Bytes the table holds per slot.
    pub const fn slot_bytes() -> usize {
        core::mem::size_of::<Slot<K, V>>() + core::mem::size_of::<u32>()
    }

    /// The key's two buckets' first slots: from the tag's low bits and from a remix of it
    /// (the tag still compares all 32 bits).
    #[inline(always)]
    fn buckets(&self, tag: u32) -> [usize; 2] {
        let second = engine::hash::finish(tag ^ 0x9e37_79b9);
        [((tag & self.bucket_mask) as usize) * WAYS, ((second & self.bucket_mask) as usize) * WAYS]
    }

    #[inline(always)]
    fn slots_of(&self, tag: u32) -> impl Iterator<Item = usize> {
        let [a, b] = self.buckets(tag);
        (a..a + WAYS).chain(b..b + WAYS)
    }

    /// Start loading the tags of `key`'s first bucket (where most keys are), so that
    /// the lookups of a vector's packets overlap their misses.
    #[inline(always)]
    pub fn prefetch(&self, key: &K) {
        let [a, _] = self.buckets(key.hash());
        engine::prefetch::read(&self.tags[a]);
    }

    /// Start loading the slot whose tag matches `key`'s (after [`Table::prefetch`] had
    /// time to bring the tags in): the lookup's second, dependent miss, overlapped too.
    #[inline(always)]
    pub fn prefetch_slot(&self, key: &K) {
        let tag = key.hash();
        let [a, b] = self.buckets(tag);
        if let Some(i) = (a..a + WAYS).chain(b..b + WAYS).find(|&i| self.tags[i] == tag) {
            engine::prefetch::read(&self.slots[i]);
        }
    }

    /// The live entry for `key` at `now`.
    #[inline]
    pub fn find(&self, key: &K, now: u64) -> Option<SlotIdx> {
        let tag = key.hash();
        let [a, b] = self.buckets(tag);
        let hit = |i: usize| {
            self.tags[i] == tag && {
                let s = &self.slots[i];
                s.expires > now && s.key == *key
            }
        };
        (a..a + WAYS).find(|&i| hit(i)).or_else(|| (b..b + WAYS).find(|&i| hit(i))).map(|i| i as SlotIdx)
    }

    /// Insert `key` (not live in the table) with `val`, expiring at `expires`; `None` if
    /// both its buckets hold live entries only. It goes to the bucket with more room (the
    /// choice that keeps buckets level), in its first free or expired slot.
    #[inline]
    pub fn insert(&mut self, key: K, val: V, now: u64, expires: u64) -> Option<SlotIdx> {
        let tag = key.hash();
        let [a, b] = self.buckets(tag);
        let free = |from: usize| (from..from + WAYS).filter(|&i| self.slots[i].expires <= now).count();
        let bucket = if free(b) > free(a) { b } else { a };
        let i = (bucket..bucket + WAYS).find(|&i| self.slots[i].expires <= now)?;
        self.slots[i] = Slot { expires: expires.max(1), key, val };
        self.tags[i] = tag;
        Some(i as SlotIdx)
    }

    /// Whether a new entry for `key` would find room at `now` (so that two entries made
    /// together can both be made or neither).
    pub fn has_room(&self, key: &K, now: u64) -> bool {
        self.slots_of(key.hash()).any(|i| self.slots[i].expires <= now)
    }

    #[inline(always)]
    pub fn key(&self, i: SlotIdx) -> &K {
        &self.slots[i as usize].key
    }

    #[inline(always)]
    pub fn get(&self, i: SlotIdx) -> &V {
        &self.slots[i as usize].val
    }

    #[inline(always)]
    pub fn get_mut(&mut self, i: SlotIdx) -> &mut V {
        &mut self.slots[i as usize].val
    }

    #[inline(always)]
    pub fn expires(&self, i: SlotIdx) -> u64 {
        self.slots[i as usize].expires
    }

    #[inline(always)]
    pub fn set_expires(&mut self, i: SlotIdx, expires: u64) {
        self.slots[i as usize].expires = expires.max(1);
    }

    /// Free a slot now.
    pub fn remove(&mut self, i: SlotIdx) {
        self.slots[i as usize].expires = 0;
    }

    /// Live entries at `now`, with their slots (a scan of the whole table: for `show`).
    pub fn iter_live(&self, now: u64) -> impl Iterator<Item = (SlotIdx, &K, &V, u64)> {
        self.slots.iter().enumerate().filter(move |(_, s)| s.expires > now).map(|(i, s)| (i as SlotIdx, &s.key, &s.val, s.expires))
    }

    pub fn live(&self, now: u64) -> usize {
        self.slots.iter().filter(|s| s.expires > now).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    struct K(u32);
    impl TableKey for K {
        fn hash(&self) -> u32 {
            engine::hash::finish(self.0)
        }
    }
    /// A key whose every value lands in the same two buckets.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    struct Same(u32);
    impl TableKey for Same {
        fn hash(&self) -> u32 {
            7
        }
    }

    #[test]
    fn insert_find_expire() {
        let mut t: Table<K, u32> = Table::new(1000);
        assert_eq!(t.capacity(), 1024);
        for k in 0..500 {
            assert!(t.insert(K(k), k * 2, 0, 100 + k as u64).is_some());
        }
        for k in 0..500 {
            let i = t.find(&K(k), 50).unwrap();
            assert_eq!(*t.get(i), k * 2);
            assert_eq!(t.key(i), &K(k));
        }
        assert!(t.find(&K(500), 50).is_none());
        // Expired at its time, not before.
        assert!(t.find(&K(10), 109).is_some());
        assert!(t.find(&K(10), 110).is_none());
        // Entries 201..500 expire after 300.
        assert_eq!(t.live(300), 299);
    }

    #[test]
    fn a_full_bucket_refuses_until_an_entry_expires() {
        let mut t: Table<Same, u32> = Table::new(64);
        for k in 0..2 * WAYS as u32 {
            assert!(t.insert(Same(k), k, 0, 10 + k as u64).is_some());
        }
        assert!(!t.has_room(&Same(99), 5));
        assert!(t.insert(Same(99), 99, 5, 100).is_none());
        // At 10 the first entry has expired: its slot is reused, the others stay.
        assert!(t.has_room(&Same(99), 10));
        let i = t.insert(Same(99), 99, 10, 100).unwrap();
        assert_eq!(*t.get(i), 99);
        assert!(t.find(&Same(0), 10).is_none());
        assert!((1..2 * WAYS as u32).all(|k| t.find(&Same(k), 10).is_some()));
        t.remove(i);
        assert!(t.find(&Same(99), 10).is_none());
        t.set_expires(t.find(&Same(1), 10).unwrap(), 11);
        assert!(t.find(&Same(1), 11).is_none());
        assert!(t.has_room(&Same(5), 10));
    }

    /// Random keys fill three quarters of the table before the first insert fails (76.5 %
    /// measured).
    #[test]
    fn two_choices_fill_the_table() {
        let mut t: Table<K, u32> = Table::new(1 << 16);
        let first_failure = (0..1u32 << 16).find(|&k| t.insert(K(k), k, 0, 1).is_none()).unwrap_or(1 << 16);
        assert!(first_failure as f64 > 0.75 * (1 << 16) as f64, "{first_failure}");
        assert!((0..first_failure).all(|k| t.find(&K(k), 0).is_some_and(|i| *t.get(i) == k)));
    }
}
