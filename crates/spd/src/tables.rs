//! The tables the SPD nodes read: each SPD's classifiers and which SPD each interface
//! is bound to. Built by [`crate::state::SpdState`], published whole, never changed
//! once published; `version` stamps the flow cache entries decided under it.

use crate::changes::Changes;
use crate::classifier::TupleSpace;
use crate::flow_cache::{spd_of_field, CacheKey, FlowCache};
use crate::policy::{Action, Decision, FlowKey, SaId, SpdId};
use engine::IfIndex;
use std::sync::Arc;

/// One SPD: a classifier per direction and family.
#[derive(Debug, Clone, Default)]
pub struct Spd {
    pub out4: TupleSpace<u32>,
    pub out6: TupleSpace<u128>,
    pub in4: TupleSpace<u32>,
    pub in6: TupleSpace<u128>,
}

/// `output` / `input` value of an interface without an SPD.
pub const NO_SPD: u16 = u16::MAX;

#[derive(Debug, Clone, Default)]
pub struct SpdTables {
    /// Bumped by every publication; never one whose stamp is 0 (`flow_cache::publishable`).
    pub version: u64,
    /// By SPD id; `None` for ids without policies or bindings.
    pub spds: Vec<Option<Arc<Spd>>>,
    /// By interface index: the SPD bound to it, or `NO_SPD`.
    pub bound: Vec<u16>,
    /// Where each family's rules changed, and when: which older cached decisions still
    /// hold under this version.
    pub changes4: Changes,
    pub changes6: Changes,
}

/// An address family's classifiers and cache: what the generic code picks per family.
pub trait Classified: CacheKey {
    /// The address as people write it (traces).
    fn ip(self) -> std::net::IpAddr;
    fn space(spd: &Spd, inbound: bool) -> &TupleSpace<Self>;
    fn changes(t: &SpdTables) -> &Changes;
    /// This family's cache among a worker's two.
    fn cache_of<'a>(f4: &'a mut Option<FlowCache<u32>>, f6: &'a mut Option<FlowCache<u128>>) -> Option<&'a mut FlowCache<Self>>;
    /// This family's cache among a worker's two, to read.
    fn cache_ref<'a>(f4: &'a Option<FlowCache<u32>>, f6: &'a Option<FlowCache<u128>>) -> Option<&'a FlowCache<Self>>;
}

impl Classified for u32 {
    fn ip(self) -> std::net::IpAddr {
        std::net::Ipv4Addr::from(self).into()
    }

    #[inline(always)]
    fn space(spd: &Spd, inbound: bool) -> &TupleSpace<u32> {
        if inbound {
            &spd.in4
        } else {
            &spd.out4
        }
    }
    #[inline(always)]
    fn changes(t: &SpdTables) -> &Changes {
        &t.changes4
    }
    #[inline(always)]
    fn cache_of<'a>(f4: &'a mut Option<FlowCache<u32>>, _: &'a mut Option<FlowCache<u128>>) -> Option<&'a mut FlowCache<u32>> {
        f4.as_mut()
    }
    #[inline(always)]
    fn cache_ref<'a>(f4: &'a Option<FlowCache<u32>>, _: &'a Option<FlowCache<u128>>) -> Option<&'a FlowCache<u32>> {
        f4.as_ref()
    }
}

impl Classified for u128 {
    fn ip(self) -> std::net::IpAddr {
        std::net::Ipv6Addr::from(self).into()
    }

    #[inline(always)]
    fn space(spd: &Spd, inbound: bool) -> &TupleSpace<u128> {
        if inbound {
            &spd.in6
        } else {
            &spd.out6
        }
    }
    #[inline(always)]
    fn changes(t: &SpdTables) -> &Changes {
        &t.changes6
    }
    #[inline(always)]
    fn cache_of<'a>(_: &'a mut Option<FlowCache<u32>>, f6: &'a mut Option<FlowCache<u128>>) -> Option<&'a mut FlowCache<u128>> {
        f6.as_mut()
    }
    #[inline(always)]
    fn cache_ref<'a>(_: &'a Option<FlowCache<u32>>, f6: &'a Option<FlowCache<u128>>) -> Option<&'a FlowCache<u128>> {
        f6.as_ref()
    }
}

impl SpdTables {
    /// The SPD bound to an interface.
    #[inline(always)]
    pub fn spd_of(&self, i: IfIndex) -> Option<SpdId> {
        match self.bound.get(i.get()) {
            Some(&s) if s != NO_SPD => Some(SpdId(s)),
            _ => None,
        }
    }

    /// The classifier's decision for `k` in `spd` (no cache).
    #[inline]
    pub fn classify<A: Classified>(&self, spd: SpdId, inbound: bool, k: &FlowKey<A>) -> Decision {
        match self.spds.get(spd.0 as usize) {
            Some(Some(s)) => A::space(s, inbound).decide(k),
            _ => Decision::NoMatch,
        }
    }

    /// [`SpdTables::classify`] of a key packed for the flow cache, with its SPD field
    /// ([`cache_spd`](crate::flow_cache::cache_spd)): what a cache miss hands over as it is.
    #[inline(always)]
    pub fn classify_packed<A: Classified>(&self, p: &A::Packed) -> Decision {
        let (spd, inbound) = spd_of_field(A::unpack(p).0);
        match self.spds.get(spd.0 as usize) {
            Some(Some(s)) => A::space(s, inbound).decide_packed(p),
            _ => Decision::NoMatch,
        }
    }

    /// Whether a packet that arrived through SA `sa` and was decrypted is one that
    /// SPD `spd`'s inbound policies require to come through that SA (RFC 4301 §5.2,
    /// step 4): `ipsecN-decrypted` drops and counts it otherwise. `k` is the inner
    /// packet's key as the inbound SPD sees it (local = its destination).
    pub fn check_inbound<A: Classified>(&self, spd: SpdId, sa: SaId, k: &FlowKey<A>) -> bool {
        self.classify(spd, true, k) == Decision::Act(Action::Protect(sa))
    }
}
