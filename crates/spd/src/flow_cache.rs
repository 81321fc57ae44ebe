//! The flow cache: a worker's recent SPD decisions, one slot per hash value.
//!
//! Answers to the three questions of the vpp-dev thread this design comes from:
//! - **How many entries?** A fixed power of two chosen at start-up (default 2^20, a
//!   million flows); nothing is allocated afterwards.
//! - **What when it is full?** It never is: a flow owns the slot its hash names, and a
//!   new flow on a held slot overwrites it (no chains, no ageing). An evicted flow costs
//!   one classifier lookup when it comes back.
//! - **How is it flushed when policies change?** It is not. Each entry carries the
//!   version of the tables it was decided under; a lookup hits at once when that is the
//!   version the worker holds now. Publishing any change (policy, binding, SA) bumps the
//!   version, so every entry goes stale at once, in O(1); an entry found under an older
//!   version is used (and restamped) only if no rule added or deleted since can select
//!   its flow ([`Changes`]: a few loads), else refilled by the classifier: no flush, no
//!   fallback mode, no stale decision ever used, and a change to one port's policy does
//!   not send a million other flows through the classifier.
//!
//! A hit reads one line: keys are packed into whole words ([`CacheKey::Packed`]: two for
//! IPv4, five for IPv6) and compared whole, and slots are aligned so that none straddles
//! two lines (32 bytes for IPv4, 64 for IPv6).
//!
//! Entries keep the version's low 32 bits. After 2^32 publications those repeat; a
//! worker that sees the high bits change (once per 2^32 changes) clears its cache
//! ([`FlowCache::sync`]), so an old stamp can never read as current. Stamp 0 is never
//! published, so a cleared slot never hits.
//!
//! Per worker, not shared: a lookup that misses writes its slot, and on a shared table
//! those writes would need atomics or seqlocks on the fast path and bounce cache lines
//! between cores. RSS and the handoff keep a flow on one worker, so per-worker caches
//! hold each flow once; the price is memory per worker.

use crate::changes::{Changes, DIMS};
use crate::policy::{Action, Decision, FlowKey, SaId, SpdAddr, SpdId};
use std::ops::{Deref, DerefMut};

/// A slot's contents: the packed key ([`CacheKey::Packed`], compared whole) and the
/// decision. Each family's slot is laid out in one aligned piece of a cache line
/// ([`Line32`] / [`Line64`]), so a lookup reads one line.
#[derive(Debug, Clone, Copy, Default, zerocopy::FromZeros)]
#[repr(C)]
pub struct Entry<K> {
    key: K,
    stamp: u32,
    sa: u32,
    kind: u8,
}

/// An IPv4 slot: 16 bytes of key and 9 of value in 32 aligned bytes (two to a line).
#[derive(Debug, Clone, Copy, Default, zerocopy::FromZeros)]
#[repr(C, align(32))]
pub struct Line32<T>(T);

/// An IPv6 slot: 40 bytes of key and 9 of value in one line.
#[derive(Debug, Clone, Copy, Default, zerocopy::FromZeros)]
#[repr(C, align(64))]
pub struct Line64<T>(T);

macro_rules! line_deref {
    ($($l:ident),*) => {$(
        impl<T> Deref for $l<T> {
            type Target = T;
            #[inline(always)]
            fn deref(&self) -> &T {
                &self.0
            }
        }
        impl<T> DerefMut for $l<T> {
            #[inline(always)]
            fn deref_mut(&mut self) -> &mut T {
                &mut self.0
            }
        }
    )*};
}
line_deref!(Line32, Line64);

const KIND_PROTECT: u8 = 1;
const KIND_BYPASS: u8 = 2;
const KIND_DISCARD: u8 = 3;
const KIND_NO_MATCH: u8 = 4;

/// The SPD field of a cache key: the SPD id and the direction's bit.
#[inline(always)]
pub const fn cache_spd(spd: u16, inbound: bool) -> u16 {
    (spd << 1) | inbound as u16
}

/// The SPD and direction of a cache key's SPD field ([`cache_spd`]).
#[inline(always)]
pub const fn spd_of_field(field: u16) -> (SpdId, bool) {
    (SpdId(field >> 1), field & 1 != 0)
}

/// The stamp entries carry for a tables version.
#[inline(always)]
pub const fn stamp(version: u64) -> u32 {
    version as u32
}

/// Whether a version may be published: its stamp is never 0 (the empty slot's).
#[inline(always)]
pub const fn publishable(version: u64) -> bool {
    stamp(version) != 0
}

/// The hit/miss accounting of one cache, read by `show ipsec flow-cache`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlowCacheStats {
    /// Lookups answered from the cache (includes `revalidated`).
    pub hits: u64,
    /// Lookups that found no entry for their flow (includes `stale`).
    pub misses: u64,
    /// Misses that found their own flow under an older version that a policy change
    /// since may have touched.
    pub stale: u64,
    /// Inserts that overwrote a current entry of another flow.
    pub overwrites: u64,
    /// Clears after the version's high bits changed.
    pub wraps: u64,
    /// Hits that found their flow under an older version no change since can touch
    /// ([`Changes`]); the entry is restamped with the current one.
    #[serde(default)]
    pub revalidated: u64,
}

impl FlowCacheStats {
    pub fn add(&mut self, o: &FlowCacheStats) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.stale += o.stale;
        self.overwrites += o.overwrites;
        self.wraps += o.wraps;
        self.revalidated += o.revalidated;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("flow cache size {0}: expected a power of two from 1 to 2^28")]
pub struct SizeError(pub usize);

/// The slot a key's hash names, for [`FlowCache::lookup`] and [`FlowCache::insert`]:
/// the hash itself, whose low bits the table keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Slot(u32);

/// A decision as a slot holds it, found by [`CacheView::current`]: what a node maps
/// straight to its verdict ([`Cached::kind_index`]) without a [`Decision`] between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    kind: u8,
    /// The SA of a PROTECT decision; 0 for any other (as [`FlowCache::insert`] writes it).
    pub sa: u32,
}

impl Cached {
    /// How many values [`Cached::kind_index`] takes.
    pub const KINDS: usize = 8;

    /// The decision's kind, below [`Cached::KINDS`]: an index into a node's table of
    /// verdicts by kind, which [`Cached::decision_of_kind`] fills.
    #[inline(always)]
    pub fn kind_index(self) -> usize {
        (self.kind as usize) % Self::KINDS
    }

    /// The decision of a kind index, its SA (if PROTECT) 0.
    pub fn decision_of_kind(kind_index: usize) -> Decision {
        decode(kind_index as u8, 0)
    }

    #[inline(always)]
    pub fn decision(self) -> Decision {
        decode(self.kind, self.sa)
    }
}

/// A family's cache key: the flow key and the SPD field packed into whole words,
/// hashed and compared as they are (no field-by-field compare on a hit), and unpacked
/// again for the classifier on a miss.
pub trait CacheKey: SpdAddr {
    type Packed: Copy + Eq + Default + std::fmt::Debug + Send + Sync + 'static;
    /// The cache's slot type: an [`Entry`] in an aligned line.
    type Line: Copy + Default + std::fmt::Debug + Send + Deref<Target = Entry<Self::Packed>> + DerefMut + zerocopy::FromZeros;
    fn pack(spd: u16, k: &FlowKey<Self>) -> Self::Packed;
    fn unpack(p: &Self::Packed) -> (u16, FlowKey<Self>);
    fn key_hash(p: &Self::Packed) -> u32;
    /// The key's class in each dimension of [`Changes`]: the SPD field, the local and
    /// remote addresses' low bits, the local and remote ports.
    fn classes(p: &Self::Packed) -> [u32; DIMS];
    /// `p` masked word by word: the classifier masks packed keys to a selector shape
    /// (a mask packed with SPD field 0 also clears the SPD).
    fn mask_words(p: &Self::Packed, mask: &Self::Packed) -> Self::Packed;
}

/// SPD, protocol and ports in one word, as the hash's second input.
#[inline(always)]
fn proto_ports<A>(spd: u16, k: &FlowKey<A>) -> u64 {
    proto_ports_word(spd, k.proto, (k.local_port as u32) << 16 | k.remote_port as u32)
}

/// [`proto_ports`] of the ports as one word, the local port in its high half.
#[inline(always)]
fn proto_ports_word(spd: u16, proto: u8, ports: u32) -> u64 {
    (spd as u64) << 40 | (proto as u64) << 32 | ports as u64
}

/// An IPv4 cache key ([`CacheKey::pack`]) from words as an outbound packet's header
/// holds them, big-endian: source (local) and destination (remote) address, and source
/// and destination port. `ipsec4-output` packs them so, with no field read apart.
#[inline(always)]
pub fn pack4_words(spd: u16, addrs: u64, proto: u8, ports: u32) -> [u64; 2] {
    [addrs, proto_ports_word(spd, proto, ports)]
}

#[inline(always)]
fn unpack_proto_ports(w: u64) -> (u16, u8, u16, u16) {
    ((w >> 40) as u16, (w >> 32) as u8, (w >> 16) as u16, w as u16)
}

impl CacheKey for u32 {
    /// Local and remote address, then [`proto_ports`].
    type Packed = [u64; 2];
    type Line = Line32<Entry<[u64; 2]>>;

    #[inline(always)]
    fn pack(spd: u16, k: &FlowKey<u32>) -> [u64; 2] {
        pack4_words(spd, (k.local as u64) << 32 | k.remote as u64, k.proto, (k.local_port as u32) << 16 | k.remote_port as u32)
    }
    #[inline(always)]
    fn unpack(p: &[u64; 2]) -> (u16, FlowKey<u32>) {
        let (spd, proto, local_port, remote_port) = unpack_proto_ports(p[1]);
        (spd, FlowKey { local: (p[0] >> 32) as u32, remote: p[0] as u32, proto, local_port, remote_port })
    }
    #[inline(always)]
    fn key_hash(p: &[u64; 2]) -> u32 {
        engine::hash::flow_hash2(p[0], p[1])
    }
    #[inline(always)]
    fn classes(p: &[u64; 2]) -> [u32; DIMS] {
        [(p[1] >> 40) as u32, (p[0] >> 32) as u32, p[0] as u32, (p[1] >> 16) as u32 & 0xffff, p[1] as u32 & 0xffff]
    }
    #[inline(always)]
    fn mask_words(p: &[u64; 2], mask: &[u64; 2]) -> [u64; 2] {
        [p[0] & mask[0], p[1] & mask[1]]
    }
}

impl CacheKey for u128 {
    /// Local address (high, low word), remote address (high, low), then [`proto_ports`].
    type Packed = [u64; 5];
    type Line = Line64<Entry<[u64; 5]>>;

    #[inline(always)]
    fn pack(spd: u16, k: &FlowKey<u128>) -> [u64; 5] {
        [(k.local >> 64) as u64, k.local as u64, (k.remote >> 64) as u64, k.remote as u64, proto_ports(spd, k)]
    }
    #[inline(always)]
    fn unpack(p: &[u64; 5]) -> (u16, FlowKey<u128>) {
        let (spd, proto, local_port, remote_port) = unpack_proto_ports(p[4]);
        let local = (p[0] as u128) << 64 | p[1] as u128;
        let remote = (p[2] as u128) << 64 | p[3] as u128;
        (spd, FlowKey { local, remote, proto, local_port, remote_port })
    }
    #[inline(always)]
    fn key_hash(p: &[u64; 5]) -> u32 {
        engine::hash::flow_hash6([p[0], p[1]], [p[2], p[3]], p[4])
    }
    #[inline(always)]
    fn classes(p: &[u64; 5]) -> [u32; DIMS] {
        [(p[4] >> 40) as u32, p[1] as u32, p[3] as u32, (p[4] >> 16) as u32 & 0xffff, p[4] as u32 & 0xffff]
    }
    #[inline(always)]
    fn mask_words(p: &[u64; 5], mask: &[u64; 5]) -> [u64; 5] {
        std::array::from_fn(|i| p[i] & mask[i])
    }
}

/// A [`FlowCache`] to look up without changing it ([`FlowCache::view`]): its slots'
/// address and mask as values, which `ipsec4-output`'s loop keeps in registers where
/// reads through the cache loaded both again after each packet's stores.
pub struct CacheView<'a, A: CacheKey> {
    slots: engine::mem::MaskedView<'a, A::Line>,
}

impl<A: CacheKey> Clone for CacheView<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: CacheKey> Copy for CacheView<'_, A> {}

impl<A: CacheKey> CacheView<'_, A> {
    /// Start loading a slot (see `IpsecOutput`).
    #[inline(always)]
    pub fn prefetch(self, slot: Slot) {
        engine::prefetch::read(self.slots.get(slot.0));
    }

    /// What the slot holds for `key` decided under the version whose stamp is
    /// `current` ([`stamp`]): the hit of [`FlowCache::lookup`] without its count (the
    /// caller adds its hits with [`FlowCache::count_hits`]); `None` leaves the rest to
    /// `lookup` (an older version, or another flow).
    #[inline(always)]
    pub fn current(self, slot: Slot, key: &A::Packed, current: u32) -> Option<Cached> {
        let e = &**self.slots.get(slot.0);
        (e.key == *key && e.stamp == current).then_some(Cached { kind: e.kind, sa: e.sa })
    }
}

pub struct FlowCache<A: CacheKey> {
    slots: engine::mem::MaskedTable<A::Line>,
    /// The high bits of the version the entries were stamped under.
    epoch: u32,
    pub stats: FlowCacheStats,
}

impl<A: CacheKey> FlowCache<A> {
    /// Whether `size` may be a cache's size: a power of two up to 2^28.
    pub fn check_size(size: usize) -> Result<(), SizeError> {
        if !size.is_power_of_two() || size > 1 << 28 {
            return Err(SizeError(size));
        }
        Ok(())
    }

    /// A cache of `size` slots (a power of two).
    pub fn new(size: usize) -> Result<Self, SizeError> {
        Self::check_size(size)?;
        Ok(FlowCache {
            // Huge pages: the default 2^20 slots are 32 MiB (IPv4), read at random. Not
            // written: a worker makes its caches when an SPD is first bound, between
            // vectors, and a free slot (stamp 0, as `Line::default()`) is all zeros.
            slots: engine::mem::MaskedTable::zeroed(size).map_err(|_| SizeError(size))?,
            epoch: 0,
            stats: FlowCacheStats::default(),
        })
    }

    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// Take up a tables version: clears the cache only when the stamps would repeat.
    #[inline(always)]
    pub fn sync(&mut self, version: u64) {
        let epoch = (version >> 32) as u32;
        if epoch != self.epoch {
            self.slots.fill(A::Line::default());
            self.epoch = epoch;
            self.stats.wraps += 1;
        }
    }

    /// The slot of a packed key (of any cache: the table keeps the bits it needs).
    #[inline(always)]
    pub fn slot(key: &A::Packed) -> Slot {
        Slot(A::key_hash(key))
    }

    /// The cache to look up without changing it, for a loop over many packets.
    #[inline(always)]
    pub fn view(&self) -> CacheView<'_, A> {
        CacheView { slots: self.slots.view() }
    }

    /// Count `n` hits found by [`CacheView::current`].
    #[inline(always)]
    pub fn count_hits(&mut self, n: u64) {
        self.stats.hits += n;
    }

    /// The decision cached for `key` (its [`FlowCache::slot`]) that holds under tables
    /// `version`: decided under that very version, or under an older one that no policy
    /// change since can have touched (`changes`: then restamped). `None`: classify and
    /// [`FlowCache::insert`].
    #[inline(always)]
    pub fn lookup(&mut self, slot: Slot, key: &A::Packed, version: u64, changes: &Changes) -> Option<Decision> {
        let e = &mut **self.slots.get_mut(slot.0);
        if e.key == *key {
            if e.stamp == stamp(version) {
                self.stats.hits += 1;
                return Some(decode(e.kind, e.sa));
            }
            if e.stamp != 0 {
                if changes.untouched_since(e.stamp, &A::classes(key)) {
                    e.stamp = stamp(version);
                    self.stats.hits += 1;
                    self.stats.revalidated += 1;
                    return Some(decode(e.kind, e.sa));
                }
                self.stats.stale += 1;
            }
        }
        self.stats.misses += 1;
        None
    }

    /// Put the decision for `key` in its slot (where its lookup missed), overwriting
    /// whatever flow held it.
    #[inline(always)]
    pub fn insert(&mut self, slot: Slot, key: &A::Packed, version: u64, d: Decision) {
        let e = &mut **self.slots.get_mut(slot.0);
        self.stats.overwrites += (e.key != *key && e.stamp == stamp(version)) as u64;
        let (kind, sa) = encode(d);
        *e = Entry { key: *key, stamp: stamp(version), sa, kind };
    }
}

#[inline(always)]
fn encode(d: Decision) -> (u8, u32) {
    match d {
        Decision::Act(Action::Protect(sa)) => (KIND_PROTECT, sa.0),
        Decision::Act(Action::Bypass) => (KIND_BYPASS, 0),
        Decision::Act(Action::Discard) => (KIND_DISCARD, 0),
        Decision::NoMatch => (KIND_NO_MATCH, 0),
    }
}

#[inline(always)]
fn decode(kind: u8, sa: u32) -> Decision {
    match kind {
        KIND_PROTECT => Decision::Act(Action::Protect(SaId(sa))),
        KIND_BYPASS => Decision::Act(Action::Bypass),
        KIND_NO_MATCH => Decision::NoMatch,
        // Only `insert` writes kinds; a discard is also the safe reading of anything else.
        _ => Decision::Act(Action::Discard),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> FlowKey<u32> {
        FlowKey { local: 0xc612_0000 + i, remote: 0xc613_0001, proto: 17, local_port: 1000, remote_port: 2000 }
    }
    const PROTECT: Decision = Decision::Act(Action::Protect(SaId(7)));

    #[derive(Debug, PartialEq)]
    enum Probe {
        Hit(Decision),
        Miss(Slot),
    }

    /// Every change made before any version: nothing revalidates (the tests of the
    /// version stamps; `changes` tests the record).
    fn all_changed() -> Changes {
        let mut ch = Changes::default();
        ch.record_all(u32::MAX);
        ch
    }

    fn look<A: CacheKey>(c: &mut FlowCache<A>, spd: u16, k: &FlowKey<A>, v: u64) -> Probe {
        let key = A::pack(spd, k);
        let s = FlowCache::<A>::slot(&key);
        match c.lookup(s, &key, v, &all_changed()) {
            Some(d) => Probe::Hit(d),
            None => Probe::Miss(s),
        }
    }

    fn fill(c: &mut FlowCache<u32>, spd: u16, k: &FlowKey<u32>, v: u64, d: Decision) {
        match look(c, spd, k, v) {
            Probe::Miss(s) => c.insert(s, &u32::pack(spd, k), v, d),
            Probe::Hit(_) => panic!("expected a miss"),
        }
    }

    #[test]
    fn miss_then_hit() {
        let mut c = FlowCache::new(1024).unwrap();
        fill(&mut c, 2, &key(1), 1, PROTECT);
        assert_eq!(look(&mut c, 2, &key(1), 1), Probe::Hit(PROTECT));
        // Another SPD, another flow: misses.
        assert!(matches!(look(&mut c, 3, &key(1), 1), Probe::Miss(_)));
        assert!(matches!(look(&mut c, 2, &key(2), 1), Probe::Miss(_)));
        assert_eq!(c.stats, FlowCacheStats { hits: 1, misses: 3, ..Default::default() });
        for (port, d) in [(9, Decision::Act(Action::Bypass)), (10, Decision::Act(Action::Discard)), (11, Decision::NoMatch)] {
            let k = FlowKey { remote_port: port, ..key(3) };
            fill(&mut c, 2, &k, 1, d);
            assert_eq!(look(&mut c, 2, &k, 1), Probe::Hit(d));
        }
    }

    #[test]
    fn current_finds_only_its_flow_under_the_current_stamp_and_counts_nothing() {
        let mut c = FlowCache::<u32>::new(1).unwrap();
        let decisions = [PROTECT, Decision::Act(Action::Bypass), Decision::Act(Action::Discard), Decision::NoMatch];
        for (i, d) in decisions.into_iter().enumerate() {
            let k = u32::pack(1, &key(i as u32));
            let slot = FlowCache::<u32>::slot(&k);
            c.insert(slot, &k, 9, d);
            let hit = c.view().current(slot, &k, stamp(9)).unwrap();
            assert_eq!(hit.decision(), d);
            // A node's verdict table by kind holds the same decision (the SA apart).
            let kind_of = Cached::decision_of_kind(hit.kind_index());
            assert_eq!(kind_of, if d == PROTECT { Decision::Act(Action::Protect(SaId(0))) } else { d });
            assert_eq!(hit.sa, if d == PROTECT { 7 } else { 0 });
            // Another version, or another flow on the same (only) slot: not current.
            assert_eq!(c.view().current(slot, &k, stamp(10)), None);
            let other = u32::pack(1, &key(100));
            assert_eq!(c.view().current(FlowCache::<u32>::slot(&other), &other, stamp(9)), None);
        }
        let before = c.stats;
        assert_eq!(before.hits, 0);
        c.count_hits(3);
        assert_eq!(c.stats, FlowCacheStats { hits: 3, ..before });
    }

    #[test]
    fn a_colliding_flow_overwrites_and_the_first_misses() {
        // One slot: every flow collides.
        let mut c = FlowCache::new(1).unwrap();
        fill(&mut c, 1, &key(1), 5, PROTECT);
        fill(&mut c, 1, &key(2), 5, Decision::Act(Action::Bypass));
        assert_eq!(c.stats.overwrites, 1);
        assert!(matches!(look(&mut c, 1, &key(1), 5), Probe::Miss(_)));
        assert_eq!(look(&mut c, 1, &key(2), 5), Probe::Hit(Decision::Act(Action::Bypass)));
    }

    #[test]
    fn a_new_version_makes_every_entry_stale() {
        let mut c = FlowCache::new(64).unwrap();
        for i in 0..32 {
            fill(&mut c, 1, &key(i), 10, PROTECT);
        }
        let hits = (0..32).filter(|&i| look(&mut c, 1, &key(i), 10) == Probe::Hit(PROTECT)).count();
        let before = c.stats;
        // Version 11: nothing from 10 may come back, whatever slot it is in.
        for i in 0..32 {
            assert!(matches!(look(&mut c, 1, &key(i), 11), Probe::Miss(_)));
        }
        assert_eq!(c.stats.stale - before.stale, hits as u64);
        // Refilled under 11, they hit again, and a lookup under 10 (an old table) misses.
        fill(&mut c, 1, &key(0), 11, Decision::Act(Action::Discard));
        assert_eq!(look(&mut c, 1, &key(0), 11), Probe::Hit(Decision::Act(Action::Discard)));
        assert!(matches!(look(&mut c, 1, &key(0), 10), Probe::Miss(_)));
    }

    #[test]
    fn stamps_that_repeat_after_a_wrap_never_hit() {
        let mut c = FlowCache::new(16).unwrap();
        c.sync(1);
        fill(&mut c, 1, &key(1), 1, PROTECT);
        // 2^32 publications later the stamp is 1 again.
        let later = (1u64 << 32) | 1;
        assert_eq!(stamp(later), stamp(1));
        c.sync(later);
        assert_eq!(c.stats.wraps, 1);
        assert!(matches!(look(&mut c, 1, &key(1), later), Probe::Miss(_)));
        // Stamp 0 is never published, so an empty slot cannot hit either.
        assert!(!publishable(1u64 << 32));
        assert!(publishable(later));
        assert!(matches!(look(&mut c, 0, &FlowKey::default(), later), Probe::Miss(_)));
        // And without the sync the repeat would have hit: the test tests the sync.
        let mut d = FlowCache::new(16).unwrap();
        fill(&mut d, 1, &key(1), 1, PROTECT);
        assert_eq!(look(&mut d, 1, &key(1), later), Probe::Hit(PROTECT));
    }

    #[test]
    fn sizes_are_powers_of_two() {
        assert_eq!(FlowCache::<u32>::new(1000).err(), Some(SizeError(1000)));
        assert_eq!(FlowCache::<u32>::new(0).err(), Some(SizeError(0)));
        assert_eq!(FlowCache::<u128>::new(1 << 10).unwrap().size(), 1024);
        // One slot never straddles two cache lines.
        assert_eq!(std::mem::size_of::<<u32 as CacheKey>::Line>(), 32);
        assert_eq!(std::mem::size_of::<<u128 as CacheKey>::Line>(), 64);
    }

    #[test]
    fn ipv6_flows_hit_and_miss() {
        let mut c = FlowCache::<u128>::new(256).unwrap();
        let k = FlowKey { local: 0x2001_0db8 << 96 | 1, remote: 0x2001_0db8 << 96 | 2, proto: 6, local_port: 1, remote_port: 443 };
        let Probe::Miss(s) = look(&mut c, 4, &k, 3) else { panic!() };
        c.insert(s, &u128::pack(4, &k), 3, PROTECT);
        assert_eq!(look(&mut c, 4, &k, 3), Probe::Hit(PROTECT));
        assert!(matches!(look(&mut c, 4, &FlowKey { remote: k.remote + 1, ..k }, 3), Probe::Miss(_)));
    }

    proptest::proptest! {
        /// Packing keeps every field: what is unpacked is what was packed.
        #[test]
        fn packed_keys_unpack_to_themselves(spd in 0u16..=0xffff, l in proptest::prelude::any::<u128>(), r in proptest::prelude::any::<u128>(), proto in proptest::prelude::any::<u8>(), lp in proptest::prelude::any::<u16>(), rp in proptest::prelude::any::<u16>()) {
            let k6 = FlowKey { local: l, remote: r, proto, local_port: lp, remote_port: rp };
            proptest::prop_assert_eq!(u128::unpack(&u128::pack(spd, &k6)), (spd, k6));
            let k4 = FlowKey { local: l as u32, remote: r as u32, proto, local_port: lp, remote_port: rp };
            proptest::prop_assert_eq!(u32::unpack(&u32::pack(spd, &k4)), (spd, k4));
            let c4 = u32::classes(&u32::pack(spd, &k4));
            proptest::prop_assert_eq!(c4, [spd as u32, l as u32, r as u32, lp as u32, rp as u32]);
            let c6 = u128::classes(&u128::pack(spd, &k6));
            proptest::prop_assert_eq!(c6, [spd as u32, l as u32, r as u32, lp as u32, rp as u32]);
        }
    }

    #[test]
    fn an_entry_no_change_touched_is_restamped() {
        let mut c = FlowCache::<u32>::new(64).unwrap();
        fill(&mut c, 2, &key(1), 10, PROTECT);
        fill(&mut c, 2, &key(2), 10, PROTECT);
        // Version 11 added a rule for key(1)'s local host only.
        let mut ch = Changes::default();
        let host = crate::policy::Range { lo: key(1).local, hi: key(1).local };
        let r = crate::policy::Rule {
            id: crate::policy::PolicyId(1),
            priority: 1,
            local: host,
            remote: crate::policy::Range::any(),
            proto: None,
            local_ports: crate::policy::Range::ANY,
            remote_ports: crate::policy::Range::ANY,
            action: Action::Bypass,
        };
        ch.record(2, &r, stamp(11));
        let k2 = u32::pack(2, &key(2));
        assert_eq!(c.lookup(FlowCache::<u32>::slot(&k2), &k2, 11, &ch), Some(PROTECT));
        assert_eq!(c.stats.revalidated, 1);
        let k1 = u32::pack(2, &key(1));
        assert_eq!(c.lookup(FlowCache::<u32>::slot(&k1), &k1, 11, &ch), None);
        assert_eq!(c.stats.stale, 1);
        // Restamped: the next lookup hits on the stamp alone, even against a record
        // in which everything changed before 12.
        let mut all = Changes::default();
        all.record_all(11);
        assert_eq!(c.lookup(FlowCache::<u32>::slot(&k2), &k2, 11, &all), Some(PROTECT));
        assert_eq!(c.stats.revalidated, 1);
    }
}
