//! The per-worker IPsec context: the tables version the worker holds and its inbound
//! SAs' replay windows (per worker: see [`crate::sa`] on why that is enough).

use crate::sa::{Inbound, Outbound, Sa};
use crate::tables::IpsecTables;
use arc_swap::{ArcSwap, Cache};
use ip::{HasIp, IpContext};
use std::sync::Arc;

/// A worker's inbound SA states by SA index, each with the SA's shared counters as its
/// identity.
pub type InboundStates = Vec<Option<(Arc<Outbound>, Inbound)>>;

pub struct IpsecContext {
    cache: Cache<Arc<ArcSwap<IpsecTables>>, Arc<IpsecTables>>,
    pub tables: Arc<IpsecTables>,
    /// By SA index: the state of the inbound SA it belongs to (told apart by the SA's
    /// shared counters, which a replaced SA does not share), made on its first packet.
    inbound: InboundStates,
}

/// One worker's count of an inbound SA ([`IpsecContext::inbound_counts`]).
#[derive(Debug, Clone)]
pub struct InboundCount {
    pub index: u32,
    /// The SA's identity: a count of an SA since replaced at the index is not its.
    pub id: Arc<Outbound>,
    pub packets: u64,
    pub bytes: u64,
    /// A packet was refused here for a hard lifetime.
    pub expired: bool,
}

impl IpsecContext {
    pub fn new(shared: Arc<ArcSwap<IpsecTables>>) -> Self {
        let tables = shared.load_full();
        IpsecContext { cache: Cache::new(shared), tables, inbound: Vec::new() }
    }

    /// Pick up a newly published table version; true if there was one.
    #[inline]
    pub fn refresh(&mut self) -> bool {
        let t = self.cache.load();
        if Arc::ptr_eq(t, &self.tables) {
            return false;
        }
        self.tables = Arc::clone(t);
        true
    }

    /// What this worker's inbound SAs took, for each that received a packet here
    /// (`show ipsec sa` sums the workers').
    pub fn inbound_counts(&self) -> Vec<InboundCount> {
        let slots = self.inbound.iter().enumerate();
        slots
            .filter_map(|(i, s)| {
                s.as_ref().map(|(id, st)| InboundCount {
                    index: i as u32,
                    id: Arc::clone(id),
                    packets: st.packets,
                    bytes: st.bytes,
                    expired: st.expired,
                })
            })
            .collect()
    }

    /// This worker's state of inbound SA `index` (`sa` its table entry); fresh if the SA
    /// at that index was replaced since.
    #[inline(always)]
    pub fn inbound_state<'a>(inbound: &'a mut InboundStates, index: u32, sa: &Sa) -> &'a mut Inbound {
        let i = index as usize;
        if inbound.len() <= i {
            // Grows once per new SA index, not per packet.
            inbound.resize_with(i + 1, || None);
        }
        let slot = &mut inbound[i];
        if !matches!(slot, Some((id, _)) if Arc::ptr_eq(id, &sa.outbound)) {
            *slot = Some((Arc::clone(&sa.outbound), Inbound::new(sa.spec.esn)));
        }
        &mut slot.as_mut().expect("set above").1
    }

    /// The tables and the per-worker inbound states, borrowed apart.
    #[inline(always)]
    pub fn split(&mut self) -> (&IpsecTables, &mut InboundStates) {
        (&self.tables, &mut self.inbound)
    }
}

/// A worker context with the IP and the IPsec parts.
pub trait HasIpsec: HasIp {
    fn split_ipsec(&mut self) -> (&mut IpContext, &mut IpsecContext);
}
