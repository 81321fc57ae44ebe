//! The per-worker LB context: the tables version the worker holds, its session tables
//! (one per family, never shared) and the time of the current vector in milliseconds.

use crate::family::{Family, V4, V6};
use crate::session::{Balancer, Limits};
use crate::tables::{FamilyTables, LbTables};
use arc_swap::{ArcSwap, Cache};
use ip::HasIp;
use std::sync::Arc;

pub struct LbContext {
    cache: Cache<Arc<ArcSwap<LbTables>>, Arc<LbTables>>,
    pub tables: Arc<LbTables>,
    pub b4: Balancer<V4>,
    pub b6: Balancer<V6>,
    /// Milliseconds of the TSC, read once per vector in `refresh`.
    pub now_ms: u64,
    ticks_per_ms: u64,
}

impl LbContext {
    /// The balancers' timeouts are the tables' ([`LbTables::timeouts`]), now and from
    /// each version published.
    pub fn new(shared: Arc<ArcSwap<LbTables>>, limits: Limits) -> Self {
        let tables = shared.load_full();
        let ticks_per_ms = (engine::clock::hz() / 1000).max(1);
        LbContext {
            cache: Cache::new(shared),
            b4: Balancer::new(limits, tables.timeouts),
            b6: Balancer::new(limits, tables.timeouts),
            tables,
            now_ms: engine::clock::now() / ticks_per_ms,
            ticks_per_ms,
        }
    }

    /// Worker `me` of `workers`: the SNAT ports it may use ([`crate::steer`]).
    pub fn set_worker(&mut self, me: u32, workers: u32) {
        self.b4.set_worker(me, workers);
        self.b6.set_worker(me, workers);
    }

    /// Pick up a newly published table version (its timeouts too, if they changed) and
    /// the time.
    #[inline]
    pub fn refresh(&mut self) {
        let t = self.cache.load();
        if !Arc::ptr_eq(t, &self.tables) {
            if t.timeouts != self.tables.timeouts {
                self.b4.set_timeouts(t.timeouts);
                self.b6.set_timeouts(t.timeouts);
            }
            self.tables = Arc::clone(t);
        }
        self.now_ms = engine::clock::now() / self.ticks_per_ms;
    }
}

/// A worker context with the IP and LB parts.
pub trait HasLb: HasIp {
    fn lb(&mut self) -> &mut LbContext;
}

/// A family's balancer and tables within the context.
pub trait LbFamily: Family + crate::nat::Layout {
    fn parts(cx: &mut LbContext) -> (&FamilyTables<Self>, &mut Balancer<Self>, u64);
}

impl LbFamily for V4 {
    #[inline(always)]
    fn parts(cx: &mut LbContext) -> (&FamilyTables<V4>, &mut Balancer<V4>, u64) {
        (&cx.tables.v4, &mut cx.b4, cx.now_ms)
    }
}

impl LbFamily for V6 {
    #[inline(always)]
    fn parts(cx: &mut LbContext) -> (&FamilyTables<V6>, &mut Balancer<V6>, u64) {
        (&cx.tables.v6, &mut cx.b6, cx.now_ms)
    }
}
