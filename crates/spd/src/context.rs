//! The per-worker SPD context: the tables version the worker holds and its flow caches.

use crate::flow_cache::{cache_spd, FlowCache, Probe, SizeError};
use crate::policy::{Action, Decision, FlowKey, SaId, SpdId};
use crate::tables::{Classified, SpdTables};
use arc_swap::{ArcSwap, Cache};
use ip::{HasIp, IpContext};
use std::sync::Arc;

/// Flow cache slots per worker and family: a million flows.
pub const DEFAULT_FLOW_CACHE: usize = 1 << 20;

pub struct SpdContext {
    cache: Cache<Arc<ArcSwap<SpdTables>>, Arc<SpdTables>>,
    pub tables: Arc<SpdTables>,
    /// `None`: every packet is classified (`--no-flow-cache`, for measuring the miss path).
    pub flows4: Option<FlowCache<u32>>,
    pub flows6: Option<FlowCache<u128>>,
}

impl SpdContext {
    /// A context with flow caches of `flows` slots per family (a power of two), or none.
    pub fn new(shared: Arc<ArcSwap<SpdTables>>, flows: Option<usize>) -> Result<Self, SizeError> {
        let tables = shared.load_full();
        let (flows4, flows6) = match flows {
            Some(n) => (Some(FlowCache::new(n)?), Some(FlowCache::new(n)?)),
            None => (None, None),
        };
        let mut cx = SpdContext { cache: Cache::new(shared), tables, flows4, flows6 };
        cx.sync_caches();
        Ok(cx)
    }

    fn sync_caches(&mut self) {
        let v = self.tables.version;
        self.flows4.iter_mut().for_each(|c| c.sync(v));
        self.flows6.iter_mut().for_each(|c| c.sync(v));
    }

    /// Pick up a newly published version (between vectors): from the next packet on,
    /// every decision cached under the old one misses.
    #[inline]
    pub fn refresh(&mut self) -> bool {
        let t = self.cache.load();
        if Arc::ptr_eq(t, &self.tables) {
            return false;
        }
        self.tables = Arc::clone(t);
        self.sync_caches();
        true
    }

    /// The decision for `k` in `spd`: from the flow cache when it holds one for this
    /// version, else from the classifier (and then cached).
    #[inline(always)]
    pub fn decide<A: Classified>(&mut self, spd: SpdId, inbound: bool, k: &FlowKey<A>) -> Decision {
        let version = self.tables.version;
        let key_spd = cache_spd(spd.0, inbound);
        let tables = &self.tables;
        let Some(cache) = A::cache_of(&mut self.flows4, &mut self.flows6) else {
            return tables.classify(spd, inbound, k);
        };
        match cache.lookup(key_spd, k, version) {
            Probe::Hit(d) => d,
            Probe::Miss(slot) => {
                let d = tables.classify(spd, inbound, k);
                cache.insert(slot, key_spd, k, version, d);
                d
            }
        }
    }

    /// [`SpdTables::check_inbound`] through the flow cache: for the ESP decrypt nodes.
    #[inline]
    pub fn check_inbound<A: Classified>(&mut self, spd: SpdId, sa: SaId, k: &FlowKey<A>) -> bool {
        self.decide(spd, true, k) == Decision::Act(Action::Protect(sa))
    }
}

/// A worker context with the IP and the SPD parts.
pub trait HasSpd: HasIp {
    fn split_spd(&mut self) -> (&mut IpContext, &mut SpdContext);
}
