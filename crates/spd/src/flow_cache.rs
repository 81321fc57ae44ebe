//! The flow cache: a worker's recent SPD decisions, one slot per hash value.
//!
//! Answers to the three questions of the vpp-dev thread this design comes from:
//! - **How many entries?** A fixed power of two chosen at start-up (default 2^20, a
//!   million flows); nothing is allocated afterwards.
//! - **What when it is full?** It never is: a flow owns the slot its hash names, and a
//!   new flow on a held slot overwrites it (no chains, no ageing). An evicted flow costs
//!   one classifier lookup when it comes back.
//! - **How is it flushed when policies change?** It is not. Each entry carries the
//!   version of the tables it was decided under; a lookup hits only when that is the
//!   version the worker holds now. Publishing any change (policy, binding, SA) bumps the
//!   version, so every entry goes stale at once, in O(1), and is refilled by the next
//!   packet of its flow: no flush, no fallback mode, no stale decision ever used.
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

use crate::policy::{Action, Decision, FlowKey, SaId, SpdAddr};

/// A slot's contents. 24 bytes for IPv4, 48 for IPv6.
#[derive(Debug, Clone, Copy, Default)]
struct Entry<A> {
    local: A,
    remote: A,
    ports: u32,
    stamp: u32,
    sa: u32,
    /// SPD and direction ([`cache_spd`]).
    spd: u16,
    proto: u8,
    kind: u8,
}

const KIND_PROTECT: u8 = 1;
const KIND_BYPASS: u8 = 2;
const KIND_DISCARD: u8 = 3;
const KIND_NO_MATCH: u8 = 4;

/// The SPD field of a cache key: the SPD id and the direction's bit.
#[inline(always)]
pub const fn cache_spd(spd: u16, inbound: bool) -> u16 {
    (spd << 1) | inbound as u16
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
    pub hits: u64,
    /// Lookups that found no entry for their flow (includes `stale`).
    pub misses: u64,
    /// Misses that found their own flow under an older version.
    pub stale: u64,
    /// Inserts that overwrote a current entry of another flow.
    pub overwrites: u64,
    /// Clears after the version's high bits changed.
    pub wraps: u64,
}

impl FlowCacheStats {
    pub fn add(&mut self, o: &FlowCacheStats) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.stale += o.stale;
        self.overwrites += o.overwrites;
        self.wraps += o.wraps;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("flow cache size {0}: expected a power of two from 1 to 2^28")]
pub struct SizeError(pub usize);

/// What a lookup found: the decision, or the slot the decision belongs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Hit(Decision),
    Miss(Slot),
}

/// A slot index from a missed lookup, for [`FlowCache::insert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(u32);

/// Hashing a key to a slot: per family, from the engine's flow hashes.
pub trait CacheKey: SpdAddr {
    fn slot_hash(spd: u16, k: &FlowKey<Self>) -> u32;
}

#[inline(always)]
fn proto_ports<A>(spd: u16, k: &FlowKey<A>) -> u64 {
    (spd as u64) << 40 | (k.proto as u64) << 32 | (k.local_port as u64) << 16 | k.remote_port as u64
}

impl CacheKey for u32 {
    #[inline(always)]
    fn slot_hash(spd: u16, k: &FlowKey<u32>) -> u32 {
        engine::hash::flow_hash2((k.local as u64) << 32 | k.remote as u64, proto_ports(spd, k))
    }
}

impl CacheKey for u128 {
    #[inline(always)]
    fn slot_hash(spd: u16, k: &FlowKey<u128>) -> u32 {
        let w = |a: u128| [(a >> 64) as u64, a as u64];
        engine::hash::flow_hash6(w(k.local), w(k.remote), proto_ports(spd, k))
    }
}

pub struct FlowCache<A> {
    slots: Box<[Entry<A>]>,
    mask: u32,
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
            slots: vec![Entry::default(); size].into_boxed_slice(),
            mask: size as u32 - 1,
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
            self.slots.fill(Entry::default());
            self.epoch = epoch;
            self.stats.wraps += 1;
        }
    }

    /// Start loading the slot of `k` (see `IpsecOutput::prepare`).
    #[inline(always)]
    pub fn prefetch(&self, spd: u16, k: &FlowKey<A>) {
        engine::prefetch::read(&self.slots[(A::slot_hash(spd, k) & self.mask) as usize]);
    }

    /// The decision cached for `k` in SPD `spd` under `version`, or where to put one.
    #[inline(always)]
    pub fn lookup(&mut self, spd: u16, k: &FlowKey<A>, version: u64) -> Probe {
        let i = A::slot_hash(spd, k) & self.mask;
        let e = &self.slots[i as usize];
        let ports = (k.local_port as u32) << 16 | k.remote_port as u32;
        let same = e.local == k.local && e.remote == k.remote && e.ports == ports && e.proto == k.proto && e.spd == spd;
        if same && e.stamp == stamp(version) {
            self.stats.hits += 1;
            return Probe::Hit(decode(e.kind, e.sa));
        }
        self.stats.misses += 1;
        self.stats.stale += (same && e.stamp != 0) as u64;
        Probe::Miss(Slot(i))
    }

    /// Put the decision for `k` in the slot its lookup missed on, overwriting whatever
    /// flow held it.
    #[inline(always)]
    pub fn insert(&mut self, slot: Slot, spd: u16, k: &FlowKey<A>, version: u64, d: Decision) {
        let e = &mut self.slots[(slot.0 & self.mask) as usize];
        let ports = (k.local_port as u32) << 16 | k.remote_port as u32;
        let other = e.local != k.local || e.remote != k.remote || e.ports != ports || e.proto != k.proto || e.spd != spd;
        self.stats.overwrites += (other && e.stamp == stamp(version)) as u64;
        let (kind, sa) = encode(d);
        *e = Entry { local: k.local, remote: k.remote, ports, stamp: stamp(version), sa, spd, proto: k.proto, kind };
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

    fn fill(c: &mut FlowCache<u32>, spd: u16, k: &FlowKey<u32>, v: u64, d: Decision) {
        match c.lookup(spd, k, v) {
            Probe::Miss(s) => c.insert(s, spd, k, v, d),
            Probe::Hit(_) => panic!("expected a miss"),
        }
    }

    #[test]
    fn miss_then_hit() {
        let mut c = FlowCache::new(1024).unwrap();
        fill(&mut c, 2, &key(1), 1, PROTECT);
        assert_eq!(c.lookup(2, &key(1), 1), Probe::Hit(PROTECT));
        // Another SPD, another flow: misses.
        assert!(matches!(c.lookup(3, &key(1), 1), Probe::Miss(_)));
        assert!(matches!(c.lookup(2, &key(2), 1), Probe::Miss(_)));
        assert_eq!(c.stats, FlowCacheStats { hits: 1, misses: 3, ..Default::default() });
        for (port, d) in [(9, Decision::Act(Action::Bypass)), (10, Decision::Act(Action::Discard)), (11, Decision::NoMatch)] {
            let k = FlowKey { remote_port: port, ..key(3) };
            fill(&mut c, 2, &k, 1, d);
            assert_eq!(c.lookup(2, &k, 1), Probe::Hit(d));
        }
    }

    #[test]
    fn a_colliding_flow_overwrites_and_the_first_misses() {
        // One slot: every flow collides.
        let mut c = FlowCache::new(1).unwrap();
        fill(&mut c, 1, &key(1), 5, PROTECT);
        fill(&mut c, 1, &key(2), 5, Decision::Act(Action::Bypass));
        assert_eq!(c.stats.overwrites, 1);
        assert!(matches!(c.lookup(1, &key(1), 5), Probe::Miss(_)));
        assert_eq!(c.lookup(1, &key(2), 5), Probe::Hit(Decision::Act(Action::Bypass)));
    }

    #[test]
    fn a_new_version_makes_every_entry_stale() {
        let mut c = FlowCache::new(64).unwrap();
        for i in 0..32 {
            fill(&mut c, 1, &key(i), 10, PROTECT);
        }
        let hits = (0..32).filter(|&i| c.lookup(1, &key(i), 10) == Probe::Hit(PROTECT)).count();
        let before = c.stats;
        // Version 11: nothing from 10 may come back, whatever slot it is in.
        for i in 0..32 {
            assert!(matches!(c.lookup(1, &key(i), 11), Probe::Miss(_)));
        }
        assert_eq!(c.stats.stale - before.stale, hits as u64);
        // Refilled under 11, they hit again, and a lookup under 10 (an old table) misses.
        fill(&mut c, 1, &key(0), 11, Decision::Act(Action::Discard));
        assert_eq!(c.lookup(1, &key(0), 11), Probe::Hit(Decision::Act(Action::Discard)));
        assert!(matches!(c.lookup(1, &key(0), 10), Probe::Miss(_)));
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
        assert!(matches!(c.lookup(1, &key(1), later), Probe::Miss(_)));
        // Stamp 0 is never published, so an empty slot cannot hit either.
        assert!(!publishable(1u64 << 32));
        assert!(publishable(later));
        assert!(matches!(c.lookup(0, &FlowKey::default(), later), Probe::Miss(_)));
        // And without the sync the repeat would have hit: the test tests the sync.
        let mut d = FlowCache::new(16).unwrap();
        fill(&mut d, 1, &key(1), 1, PROTECT);
        assert_eq!(d.lookup(1, &key(1), later), Probe::Hit(PROTECT));
    }

    #[test]
    fn sizes_are_powers_of_two() {
        assert_eq!(FlowCache::<u32>::new(1000).err(), Some(SizeError(1000)));
        assert_eq!(FlowCache::<u32>::new(0).err(), Some(SizeError(0)));
        assert_eq!(FlowCache::<u128>::new(1 << 10).unwrap().size(), 1024);
        assert_eq!(std::mem::size_of::<Entry<u32>>(), 24);
        assert_eq!(std::mem::size_of::<Entry<u128>>(), 48);
    }

    #[test]
    fn ipv6_flows_hit_and_miss() {
        let mut c = FlowCache::<u128>::new(256).unwrap();
        let k = FlowKey { local: 0x2001_0db8 << 96 | 1, remote: 0x2001_0db8 << 96 | 2, proto: 6, local_port: 1, remote_port: 443 };
        let Probe::Miss(s) = c.lookup(4, &k, 3) else { panic!() };
        c.insert(s, 4, &k, 3, PROTECT);
        assert_eq!(c.lookup(4, &k, 3), Probe::Hit(PROTECT));
        assert!(matches!(c.lookup(4, &FlowKey { remote: k.remote + 1, ..k }, 3), Probe::Miss(_)));
    }
}
