//! A bounded, per-worker hash table with expiring entries: the session table and the
//! client-affinity table are two of these. Set-associative open addressing with two
//! choices: a key hashes to two buckets of [`WAYS`] slots, looked up by a 32-bit tag
//! before the key is compared; an insert takes its home slot (below) or a free or expired
//! slot of the bucket with more room, or fails (the caller counts the table full). Random
//! keys fill 76 % of the slots before the first refusal (the test below measures it):
//! size the table for a third more sessions than it must hold. Slots never move, so an
//! entry can name another by index (a session's twin), and nothing is allocated after
//! construction. Time is a parameter (milliseconds of any clock the caller keeps), so
//! tests run on virtual time.
//!
//! Each key has a home slot in its first bucket (a way from the tag's top bits), which an
//! insert takes when it is free and that bucket is not crowded ([`HOME_ROOM`]): a lookup
//! reads the home slot first, the whole entry with its tag and key, and only when the
//! key is not there the buckets' tags. A hit in a table that is not crowded is then one
//! line (one slot), where a tags-first lookup read two dependent lines, the tags and then
//! the slot (docs/PERFORMANCE.md).

/// Slots per bucket.
pub const WAYS: usize = 8;

/// A new key takes its free home slot while the home bucket has this many free slots,
/// whatever the other bucket holds. Two choices alone sent every key whose first bucket
/// held an entry to an emptier second bucket, where each of its hits reads the tags and
/// then the slot: 23 % of random keys away from home at a tenth of the table full, 52 %
/// at seven tenths; with this rule 5 % and 39 %. Past it the two choices keep the
/// buckets level, and the table fills as far before its first refusal (tests below).
const HOME_ROOM: usize = WAYS / 2;

/// The slots of a table made for `capacity` entries: whole buckets, a power of two of them.
pub fn slots_for(capacity: usize) -> usize {
    capacity.div_ceil(WAYS).max(1).next_power_of_two() * WAYS
}

/// A key the table can hash.
pub trait TableKey: Copy + Eq + Default + zerocopy::FromZeros {
    fn hash(&self) -> u32;
}

/// One cache line (64-byte aligned) for an IPv4 session, so the lookup's one dependent
/// miss is one line, never two (a 60-byte slot straddled lines; docs/PERFORMANCE.md).
#[derive(Debug, Clone, Copy, zerocopy::FromZeros)]
#[repr(align(64))]
struct Slot<K, V> {
    /// When the entry expires, in the caller's milliseconds; 0 for a free slot.
    expires: u64,
    /// The key's hash, as in `tags`: the home slot's check reads no other line.
    tag: u32,
    key: K,
    val: V,
}

/// Where an entry lives; stable for the entry's life.
pub type SlotIdx = u32;

/// A key's hash and its home slot, worked out once where the key is read (`lbN-nat`'s
/// `prepare`) for the prefetch and the lookup after it: they then start at the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hashed {
    pub tag: u32,
    pub home: SlotIdx,
}

/// A live entry as [`Table::find_at`] found it.
#[derive(Debug, Clone, Copy)]
pub struct Found<'a, V> {
    pub at: SlotIdx,
    pub val: &'a V,
    /// Its expiry when found (as [`Table::expires`] reads it).
    pub expires: u64,
}

pub struct Table<K: Copy, V: Copy> {
    /// Each slot's key hash, apart from the slots: a lookup whose key is not in its
    /// home slot reads its buckets' tags (a 32-byte run each) and only the slots whose
    /// tag matches.
    tags: engine::mem::HugeSlice<u32>,
    slots: engine::mem::HugeSlice<Slot<K, V>>,
    bucket_mask: u32,
}

impl<K: TableKey, V: Copy + Default + zerocopy::FromZeros> Table<K, V> {
    /// A table of at least `capacity` slots (whole buckets, a power of two of them), on
    /// 2 MiB pages of its own where the kernel allows ([`engine::mem::HugeSlice`]): a
    /// lookup reads one random line of tens of megabytes, which on 4 KiB pages is a TLB
    /// miss as well as a cache miss (docs/PERFORMANCE.md). Empty is all zeros (a free
    /// slot's `expires` is 0), so the table is made without writing it
    /// ([`engine::mem::HugeSlice::zeroed`]): its pages cost nothing until entries land
    /// in them, and a gateway that balances nothing keeps none.
    pub fn new(capacity: usize) -> Self {
        let buckets = slots_for(capacity) / WAYS;
        Table {
            tags: engine::mem::HugeSlice::zeroed(buckets * WAYS),
            slots: engine::mem::HugeSlice::zeroed(buckets * WAYS),
            bucket_mask: buckets as u32 - 1,
        }
    }
}

impl<K: TableKey, V: Copy + Default> Table<K, V> {
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Whether the slots and the tags are each on memory of their own aligned to a huge
    /// page ([`engine::mem::HugeSlice::is_huge_aligned`]; a table under 2 MiB is not).
    pub fn is_huge_aligned(&self) -> (bool, bool) {
        (self.slots.is_huge_aligned(), self.tags.is_huge_aligned())
    }

    /// Bytes the table holds per slot.
    pub const fn slot_bytes() -> usize {
        Self::slot_size() + core::mem::size_of::<u32>()
    }

    /// Bytes of one slot (whole cache lines), without the tag array's copy of its tag.
    pub const fn slot_size() -> usize {
        core::mem::size_of::<Slot<K, V>>()
    }

    /// The key's two buckets' first slots.
    #[inline(always)]
    fn buckets(&self, tag: u32) -> [usize; 2] {
        [self.first_bucket(tag), self.second_bucket(tag)]
    }

    #[inline(always)]
    fn slots_of(&self, tag: u32) -> impl Iterator<Item = usize> {
        let [a, b] = self.buckets(tag);
        (a..a + WAYS).chain(b..b + WAYS)
    }

    /// The hash `tag` with its home slot.
    #[inline(always)]
    pub fn hashed(&self, tag: u32) -> Hashed {
        Hashed { tag, home: self.home(tag) as SlotIdx }
    }

    /// Start loading the home slot of a key (where most keys are), so that the lookups
    /// of a vector's packets overlap their misses.
    #[inline(always)]
    pub fn prefetch(&self, at: Hashed) {
        if let Some(s) = self.slots.get(at.home as usize) {
            engine::prefetch::read(s);
        }
    }

    /// The home slot of a key whose hash is `tag`: in its first bucket, the way from the
    /// tag's top bits (the bucket is from its low bits).
    #[inline(always)]
    fn home(&self, tag: u32) -> usize {
        self.first_bucket(tag) + (tag >> (32 - WAYS.trailing_zeros())) as usize
    }

    /// The first slot of the bucket from the tag's low bits, where most keys are.
    #[inline(always)]
    fn first_bucket(&self, tag: u32) -> usize {
        ((tag & self.bucket_mask) as usize) * WAYS
    }

    /// The first slot of the other bucket, from a remix of the tag (the tag still
    /// compares all 32 bits); computed only when the first bucket did not answer.
    #[inline(always)]
    fn second_bucket(&self, tag: u32) -> usize {
        ((engine::hash::finish(tag ^ 0x9e37_79b9) & self.bucket_mask) as usize) * WAYS
    }

    /// The tags of the bucket at `from` (one bounds check for the eight).
    #[inline(always)]
    fn bucket_tags(&self, from: usize) -> &[u32; WAYS] {
        self.tags[from..from + WAYS].try_into().expect("whole buckets")
    }

    /// The live entry for `key` at `now`.
    #[inline]
    pub fn find(&self, key: &K, now: u64) -> Option<SlotIdx> {
        self.find_hashed(key.hash(), key, now)
    }

    /// [`Table::find`] with the key's hash computed by the caller (`tag` must be
    /// `key.hash()` for the entry to be found; any other value finds nothing). The home
    /// slot first (one line); the buckets' tags only when the key is not at home.
    #[inline(always)]
    pub fn find_hashed(&self, tag: u32, key: &K, now: u64) -> Option<SlotIdx> {
        self.find_at(self.hashed(tag), key, now).map(|f| f.at)
    }

    /// [`Table::find_hashed`] from a [`Table::hashed`] worked out before, with the
    /// entry and its expiry (read where it was found: a hit that refreshes the entry
    /// reads the slot no second time). A `home` that is not the tag's home slot (or
    /// past the table) only sends the lookup through the buckets' tags.
    #[inline(always)]
    pub fn find_at(&self, at: Hashed, key: &K, now: u64) -> Option<Found<'_, V>> {
        if let Some(s) = self.slots.get(at.home as usize) {
            if s.tag == at.tag && s.expires > now && s.key == *key {
                return Some(Found { at: at.home, val: &s.val, expires: s.expires });
            }
        }
        let i = self.find_away(at.tag, key, now)?;
        let s = &self.slots[i as usize];
        Some(Found { at: i, val: &s.val, expires: s.expires })
    }

    /// A key not in its home slot: both buckets by their tags (out of line, so that the
    /// home slot's check is all a hit inlines).
    #[inline(never)]
    fn find_away(&self, tag: u32, key: &K, now: u64) -> Option<SlotIdx> {
        self.find_in_bucket(self.first_bucket(tag), tag, key, now).or_else(|| self.find_in_bucket(self.second_bucket(tag), tag, key, now))
    }

    /// The live entry for `key` in the bucket at `from`.
    #[inline(always)]
    fn find_in_bucket(&self, from: usize, tag: u32, key: &K, now: u64) -> Option<SlotIdx> {
        let tags = self.bucket_tags(from);
        (0..WAYS)
            .find(|&j| {
                tags[j] == tag && {
                    let s = &self.slots[from + j];
                    s.expires > now && s.key == *key
                }
            })
            .map(|j| (from + j) as SlotIdx)
    }

    /// Insert `key` (not live in the table) with `val`, expiring at `expires`; `None` if
    /// both its buckets hold live entries only. It takes its home slot when that is free
    /// and the home bucket has [`HOME_ROOM`] free slots (a later hit then reads one line);
    /// otherwise it goes to the bucket with more room (the choice that keeps buckets
    /// level; the first on a tie), in the home slot when that is the bucket and the slot
    /// is free, else in its first free or expired slot.
    #[inline]
    pub fn insert(&mut self, key: K, val: V, now: u64, expires: u64) -> Option<SlotIdx> {
        let tag = key.hash();
        let [a, b] = self.buckets(tag);
        let free = |from: usize| (from..from + WAYS).filter(|&i| self.slots[i].expires <= now).count();
        let home = self.home(tag);
        let free_a = free(a);
        if free_a >= HOME_ROOM && self.slots[home].expires <= now {
            return Some(self.put(home, tag, key, val, expires));
        }
        let bucket = if free(b) > free_a { b } else { a };
        let i = if bucket == a && self.slots[home].expires <= now {
            home
        } else {
            (bucket..bucket + WAYS).find(|&i| self.slots[i].expires <= now)?
        };
        Some(self.put(i, tag, key, val, expires))
    }

    #[inline(always)]
    fn put(&mut self, i: usize, tag: u32, key: K, val: V, expires: u64) -> SlotIdx {
        self.slots[i] = Slot { expires: expires.max(1), tag, key, val };
        self.tags[i] = tag;
        i as SlotIdx
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

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
    struct K(u32);
    impl TableKey for K {
        fn hash(&self) -> u32 {
            engine::hash::finish(self.0)
        }
    }
    /// A key whose every value lands in the same two buckets.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
    struct Same(u32);
    impl TableKey for Same {
        fn hash(&self) -> u32 {
            7
        }
    }

    /// A key whose hash is itself: its home slot chosen by the test.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
    struct Hashed(u32);
    impl TableKey for Hashed {
        fn hash(&self) -> u32 {
            self.0
        }
    }

    /// A table of a million slots (64 MiB of slots, 4 MiB of tags) is on 2 MiB pages of
    /// its own, both arrays; one of 64 slots is an ordinary allocation. Either works.
    #[test]
    fn a_large_table_is_on_huge_page_aligned_memory() {
        let mut big: Table<K, u32> = Table::new(1 << 20);
        assert_eq!(big.is_huge_aligned(), (true, true));
        assert_eq!((big.slots.as_ptr() as usize % (2 << 20), big.tags.as_ptr() as usize % (2 << 20)), (0, 0));
        let at = big.insert(K(9), 90, 0, 10).unwrap();
        assert_eq!((big.find(&K(9), 0), *big.get(at)), (Some(at), 90));
        let mut small: Table<K, u32> = Table::new(64);
        assert_eq!(small.is_huge_aligned(), (false, false));
        let at = small.insert(K(9), 91, 0, 10).unwrap();
        assert_eq!(small.find(&K(9), 0), Some(at));
    }

    /// A key goes to its home slot when that is free (a hit then reads that one slot);
    /// a key whose home is taken goes elsewhere and is still found, through the tags.
    #[test]
    fn a_key_lives_at_home_when_it_can() {
        let mut t: Table<Hashed, u32> = Table::new(64);
        // Bucket 3, way 5; then another key with the same home (a bit between the two).
        let (a, b) = (Hashed(5 << 29 | 3), Hashed(5 << 29 | 1 << 12 | 3));
        assert_eq!(t.home(a.0), t.home(b.0));
        let ia = t.insert(a, 1, 0, 10).unwrap();
        assert_eq!(ia as usize, t.home(a.0));
        let ib = t.insert(b, 2, 0, 10).unwrap();
        assert_ne!(ia, ib);
        assert_eq!((t.find(&a, 0), t.find(&b, 0)), (Some(ia), Some(ib)));
        // The home freed, the next key with that home takes it; b stays where it is.
        t.remove(ia);
        let c = Hashed(5 << 29 | 2 << 12 | 3);
        assert_eq!(t.insert(c, 3, 0, 10), Some(ia));
        assert_eq!((t.find(&b, 0), t.find(&c, 0), t.find(&a, 0)), (Some(ib), Some(ia), None));
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

    /// Random keys live in their home slots, where a hit reads one line: 95 % of them
    /// with a tenth of the table full, 85 % with three tenths (two choices alone: 77 %
    /// and 64 %).
    #[test]
    fn keys_stay_at_home_while_buckets_have_room() {
        let slots = 1usize << 16;
        let mut t: Table<K, u32> = Table::new(slots);
        let at_home = |t: &Table<K, u32>, n: u32| {
            (0..n).filter(|&k| t.find(&K(k), 0) == Some(t.home(K(k).hash()) as SlotIdx)).count() as f64 / n as f64
        };
        let tenth = slots as u32 / 10;
        (0..tenth).for_each(|k| assert!(t.insert(K(k), k, 0, 1).is_some()));
        let share = at_home(&t, tenth);
        assert!(share > 0.92, "{share}");
        (tenth..3 * tenth).for_each(|k| assert!(t.insert(K(k), k, 0, 1).is_some()));
        let share = at_home(&t, 3 * tenth);
        assert!(share > 0.80, "{share}");
    }

    proptest::proptest! {
        /// The table finds what a plain map holds, through inserts and removals,
        /// with keys crowded into a small table (second buckets used).
        #[test]
        fn finds_what_a_map_holds(ops in proptest::collection::vec((0u32..300, 0u8..3, 1u64..50), 1..400)) {
            let mut t: Table<K, u32> = Table::new(64);
            let mut map = std::collections::HashMap::new();
            let now = 10;
            for (k, op, ttl) in ops {
                match (op, t.find(&K(k), now)) {
                    (0, None) => {
                        if let Some(i) = t.insert(K(k), k ^ 7, now, now + ttl) {
                            map.insert(k, i);
                        }
                    }
                    (1, Some(i)) => {
                        t.remove(i);
                        map.remove(&k);
                    }
                    _ => {}
                }
                for (&k, &i) in &map {
                    proptest::prop_assert_eq!(t.find_hashed(K(k).hash(), &K(k), now), Some(i));
                    proptest::prop_assert_eq!(t.find_hashed(K(k).hash() ^ 1, &K(k), now), None);
                    // A home slot that is not the key's (any slot, or past the table)
                    // costs the lookup its shortcut, never its answer.
                    // The expiry comes with the entry, from its own slot.
                    let tag = K(k).hash();
                    for home in [t.hashed(tag).home, i ^ 1, i.wrapping_add(WAYS as u32), u32::MAX] {
                        let found = t.find_at(super::Hashed { tag, home }, &K(k), now).map(|f| (f.at, *f.val, f.expires));
                        proptest::prop_assert_eq!(found, Some((i, k ^ 7, t.expires(i))));
                    }
                }
                proptest::prop_assert_eq!(t.live(now), map.len());
            }
        }
    }
}
