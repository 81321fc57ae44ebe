//! The per-worker SPD context: the tables version the worker holds and its flow caches.

use crate::flow_cache::{cache_spd, CacheKey, FlowCache, FlowCacheStats, SizeError, Slot};
use crate::policy::{Action, Decision, FlowKey, SaId, SpdId};
use crate::tables::{Classified, SpdTables};
use arc_swap::{ArcSwap, Cache};
use ip::{HasIp, IpContext};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Flow cache slots per worker and family: a million flows.
pub const DEFAULT_FLOW_CACHE: usize = 1 << 20;

pub struct SpdContext {
    cache: Cache<Arc<ArcSwap<SpdTables>>, Arc<SpdTables>>,
    pub tables: Arc<SpdTables>,
    /// `None` until an SPD is first bound (a gateway without IPsec policies spends no
    /// memory on them), and always without a cache size (`--no-flow-cache`: every
    /// packet is classified, to measure the miss path).
    pub flows4: Option<FlowCache<u32>>,
    pub flows6: Option<FlowCache<u128>>,
    size: Option<usize>,
    gauges: Arc<FlowCacheGauges>,
}

/// A worker's flow-cache counters as the control plane reads them: the worker stores
/// them between vectors (relaxed stores to lines only it writes), never per packet.
#[derive(Debug, Default)]
pub struct FlowCacheGauges {
    size: AtomicU64,
    v4: [AtomicU64; 6],
    v6: [AtomicU64; 6],
}

fn store(g: &[AtomicU64; 6], s: &FlowCacheStats) {
    for (a, v) in g.iter().zip([s.hits, s.misses, s.stale, s.overwrites, s.wraps, s.revalidated]) {
        a.store(v, Relaxed);
    }
}

fn load(g: &[AtomicU64; 6]) -> FlowCacheStats {
    let v: [u64; 6] = std::array::from_fn(|i| g[i].load(Relaxed));
    FlowCacheStats { hits: v[0], misses: v[1], stale: v[2], overwrites: v[3], wraps: v[4], revalidated: v[5] }
}

/// A packet's key made ready for the flow cache by [`SpdContext::prepare`]: packed and
/// its slot found ([`CacheView::prefetch`](crate::flow_cache::CacheView::prefetch) starts loading it).
#[derive(Debug, Clone, Copy)]
pub struct Prepared<A: CacheKey> {
    /// The SPD and direction are in it ([`cache_spd`]): on a miss, unpacked for the
    /// classifier; a hit needs nothing else.
    pub key: A::Packed,
    pub slot: Slot,
}

impl FlowCacheGauges {
    /// Slots per family (0: not allocated) and the IPv4 and IPv6 counters.
    pub fn read(&self) -> (u64, FlowCacheStats, FlowCacheStats) {
        (self.size.load(Relaxed), load(&self.v4), load(&self.v6))
    }
}

impl SpdContext {
    /// A context whose flow caches will have `flows` slots per family (a power of two),
    /// or that has none.
    pub fn new(shared: Arc<ArcSwap<SpdTables>>, flows: Option<usize>) -> Result<Self, SizeError> {
        if let Some(n) = flows {
            FlowCache::<u32>::check_size(n)?;
        }
        let tables = shared.load_full();
        let mut cx = SpdContext { cache: Cache::new(shared), tables, flows4: None, flows6: None, size: flows, gauges: Arc::default() };
        cx.sync_caches();
        Ok(cx)
    }

    /// Where the control plane reads this worker's flow-cache counters.
    pub fn gauges(&self) -> Arc<FlowCacheGauges> {
        Arc::clone(&self.gauges)
    }

    fn sync_caches(&mut self) {
        if let (None, Some(n), false) = (&self.flows4, self.size, self.tables.bound.is_empty()) {
            // Sizes were checked in `new`.
            self.flows4 = FlowCache::new(n).ok();
            self.flows6 = FlowCache::new(n).ok();
            self.gauges.size.store(n as u64, Relaxed);
        }
        let v = self.tables.version;
        self.flows4.iter_mut().for_each(|c| c.sync(v));
        self.flows6.iter_mut().for_each(|c| c.sync(v));
    }

    /// Pick up a newly published version (between vectors): from the next packet on,
    /// every decision cached under the old one misses. Also hands the flow-cache
    /// counters to the control plane.
    #[inline]
    pub fn refresh(&mut self) -> bool {
        if let (Some(c4), Some(c6)) = (&self.flows4, &self.flows6) {
            store(&self.gauges.v4, &c4.stats);
            store(&self.gauges.v6, &c6.stats);
        }
        let t = self.cache.load();
        if Arc::ptr_eq(t, &self.tables) {
            return false;
        }
        self.tables = Arc::clone(t);
        self.sync_caches();
        true
    }

    /// The decision for `k` in `spd`: from the flow cache when it holds one that holds
    /// under this version, else from the classifier (and then cached).
    #[inline(always)]
    pub fn decide<A: Classified>(&mut self, spd: SpdId, inbound: bool, k: &FlowKey<A>) -> Decision {
        let p = self.prepare(spd, inbound, k);
        self.decide_prepared(&p)
    }

    /// Pack `k` for the flow cache and find its slot: the first half of
    /// [`SpdContext::decide`], which a node runs some packets ahead of the second (with
    /// [`CacheView::prefetch`](crate::flow_cache::CacheView::prefetch)) so that the slots' cache misses overlap.
    #[inline(always)]
    pub fn prepare<A: Classified>(&self, spd: SpdId, inbound: bool, k: &FlowKey<A>) -> Prepared<A> {
        self.prepare_packed(A::pack(cache_spd(spd.0, inbound), k))
    }

    /// [`SpdContext::prepare`] of a key already packed ([`CacheKey::pack`]).
    #[inline(always)]
    pub fn prepare_packed<A: Classified>(&self, key: A::Packed) -> Prepared<A> {
        // Without a cache nothing reads the slot: not hashed.
        let slot = A::cache_ref(&self.flows4, &self.flows6).map_or(Slot::default(), |_| FlowCache::<A>::slot(&key));
        Prepared { key, slot }
    }

    /// The second half of [`SpdContext::decide`].
    #[inline(always)]
    pub fn decide_prepared<A: Classified>(&mut self, p: &Prepared<A>) -> Decision {
        let (tables, cache) = self.tables_and_cache::<A>();
        match cache {
            Some(cache) => decide_cached(tables, cache, p),
            None => tables.classify_packed::<A>(&p.key),
        }
    }

    /// The tables and this family's flow cache (`None` without one), borrowed together:
    /// a node that decides a whole vector finds the cache once for it.
    #[inline(always)]
    pub fn tables_and_cache<A: Classified>(&mut self) -> (&SpdTables, Option<&mut FlowCache<A>>) {
        (&self.tables, A::cache_of(&mut self.flows4, &mut self.flows6))
    }

    /// [`SpdTables::check_inbound`] through the flow cache: for `ipsecN-decrypted`.
    #[inline]
    pub fn check_inbound<A: Classified>(&mut self, spd: SpdId, sa: SaId, k: &FlowKey<A>) -> bool {
        self.decide(spd, true, k) == Decision::Act(Action::Protect(sa))
    }
}

/// [`SpdContext::decide_prepared`] with a cache: its entry if it holds under `tables`'
/// version, else the classifier's decision, then cached.
#[inline(always)]
pub fn decide_cached<A: Classified>(tables: &SpdTables, cache: &mut FlowCache<A>, p: &Prepared<A>) -> Decision {
    if let Some(d) = cache.lookup(p.slot, &p.key, tables.version, A::changes(tables)) {
        return d;
    }
    let d = tables.classify_packed::<A>(&p.key);
    cache.insert(p.slot, &p.key, tables.version, d);
    d
}

/// A worker context with the IP and the SPD parts.
pub trait HasSpd: HasIp {
    fn split_spd(&mut self) -> (&mut IpContext, &mut SpdContext);
}
