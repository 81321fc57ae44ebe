//! Which parts of the key space policy changes touched, and when: what lets a flow-cache
//! entry decided under an older version stay in use after a change that cannot have
//! altered its decision.
//!
//! A decision for a key is the best-ranked rule of its SPD, direction and family that
//! matches the key. Adding or deleting a rule that does not match the key leaves that
//! best rule where it was; so an entry decided under version `s` still holds under a
//! later version if no rule added or deleted after `s` matches its key. Checking each
//! change since `s` against the key would cost what the classifier costs; instead each
//! change is recorded coarsely, per *dimension* of the key (the SPD field, the local and
//! remote address, the local and remote port): each dimension is cut into
//! [`CLASSES`] classes by the value's low bits, and a change stamps the classes its
//! selector's range overlaps (or, when the range covers every class, the dimension's
//! floor). A key whose class in some dimension has not been stamped since `s` is outside
//! every change since `s` in that dimension, so no such change matches it. That is one
//! load per dimension tried, in a table of 20 KiB per family, instead of a classifier
//! lookup; and a change to one port's or one host's policy leaves the decisions of every
//! other flow in use (`vecgate bench ipsec4-encrypt --churn`, docs/PERFORMANCE.md).
//!
//! Changes that are not a rule's (an interface bound or unbound, an SA changed) stamp
//! every floor: every entry decided before them goes stale, as every entry did on every
//! change before this record existed.
//!
//! Stamps are the versions' low 32 bits, as in the cache. When the high bits change the
//! workers clear their caches ([`crate::FlowCache::sync`]) and the record starts again
//! from zero ([`Changes::reset`]), so a stamp from an earlier epoch is never compared
//! with a later one.

use crate::policy::{Rule, SpdAddr};

/// Classes per dimension (a power of two).
pub const CLASSES: usize = 1024;
/// Dimensions of a key: the SPD field, local address, remote address, local port,
/// remote port ([`crate::flow_cache::CacheKey::classes`] gives a key's).
pub const DIMS: usize = 5;
const MASK: usize = CLASSES - 1;

/// Per dimension and class, the stamp of the last change that touched it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Per dimension: the last change whose range covered every class of it.
    floor: [u32; DIMS],
    /// Dimension `d`'s class `c` at `d * CLASSES + c`.
    last: Box<[u32]>,
}

impl Default for Changes {
    fn default() -> Self {
        Changes { floor: [0; DIMS], last: vec![0; DIMS * CLASSES].into_boxed_slice() }
    }
}

impl Changes {
    /// Whether no change stamped after `stamp` can match a key of these classes: in some
    /// dimension, neither the floor nor the key's class was stamped later.
    #[inline(always)]
    pub fn untouched_since(&self, stamp: u32, classes: &[u32; DIMS]) -> bool {
        (0..DIMS).any(|d| self.floor[d] <= stamp && self.last[d * CLASSES + (classes[d] as usize & MASK)] <= stamp)
    }

    /// A rule of SPD field `spd` (see `flow_cache::cache_spd`) was added or deleted in
    /// the publication stamped `stamp`.
    pub fn record<A: SpdAddr>(&mut self, spd: u16, r: &Rule<A>, stamp: u32) {
        self.mark(0, spd as u128, spd as u128, stamp);
        self.mark(1, r.local.lo.to_u128(), r.local.hi.to_u128(), stamp);
        self.mark(2, r.remote.lo.to_u128(), r.remote.hi.to_u128(), stamp);
        self.mark(3, r.local_ports.lo as u128, r.local_ports.hi as u128, stamp);
        self.mark(4, r.remote_ports.lo as u128, r.remote_ports.hi as u128, stamp);
    }

    /// A change that may alter any decision.
    pub fn record_all(&mut self, stamp: u32) {
        self.floor = [stamp; DIMS];
    }

    /// A new epoch of stamps: nothing recorded before it applies (the caches are clear).
    pub fn reset(&mut self) {
        *self = Changes::default();
    }

    /// Stamp the classes of `lo..=hi` in dimension `d`: a run of low-bit values, which
    /// wraps round the classes, or all of them.
    fn mark(&mut self, d: usize, lo: u128, hi: u128, stamp: u32) {
        if hi - lo >= MASK as u128 {
            self.floor[d] = stamp;
            return;
        }
        let (mut c, end) = (lo as usize & MASK, hi as usize & MASK);
        loop {
            self.last[d * CLASSES + c] = stamp;
            if c == end {
                break;
            }
            c = (c + 1) & MASK;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Action, PolicyId, Range};

    fn rule(local: Range<u32>, remote_ports: Range<u16>) -> Rule<u32> {
        Rule {
            id: PolicyId(1),
            priority: 1,
            local,
            remote: Range::any(),
            proto: None,
            local_ports: Range::ANY,
            remote_ports,
            action: Action::Bypass,
        }
    }

    #[test]
    fn a_change_touches_only_the_classes_its_ranges_overlap() {
        let mut c = Changes::default();
        // A host and one remote port, in SPD field 2, at stamp 7.
        c.record(2, &rule(Range { lo: 0xc612_0005, hi: 0xc612_0005 }, Range { lo: 4003, hi: 4003 }), 7);
        let key = |spd: u32, local: u32, rport: u32| [spd, local, 0xc613_0001, 1000, rport];
        // Decided at 7 or later: untouched.
        assert!(c.untouched_since(7, &key(2, 0xc612_0005, 4003)));
        // Decided before 7: the key inside every range is touched; one outside any
        // range (another SPD, host or port) is not.
        assert!(!c.untouched_since(6, &key(2, 0xc612_0005, 4003)));
        assert!(c.untouched_since(6, &key(4, 0xc612_0005, 4003)));
        assert!(c.untouched_since(6, &key(2, 0xc612_0006, 4003)));
        assert!(c.untouched_since(6, &key(2, 0xc612_0005, 4004)));
        // A class is the low bits: a host 1024 addresses away shares the local class
        // (touched there) but not the port's.
        assert!(c.untouched_since(6, &key(2, 0xc612_0405, 4004)));
        assert!(!c.untouched_since(6, &key(2, 0xc612_0405, 4003 + 1024)));
    }

    #[test]
    fn ranges_wrap_round_the_classes_or_cover_them_all() {
        let mut c = Changes::default();
        // 1020..=1030 covers classes 1020..1023 and 0..6.
        c.record(0, &rule(Range::any(), Range { lo: 1020, hi: 1030 }), 3);
        let at = |rport: u32| [0, 0, 0, 0, rport];
        // The SPD field and the "any" ranges are touched in every class, so only the
        // remote port can show a key untouched.
        for p in [1020, 1023, 1024, 1030, 2044] {
            assert!(!c.untouched_since(2, &at(p)), "port {p}");
        }
        for p in [1019, 1031, 7, 500] {
            assert!(c.untouched_since(2, &at(p)), "port {p}");
        }
        // A range of CLASSES values or more covers every class: the floor.
        c.record(0, &rule(Range::any(), Range { lo: 0, hi: CLASSES as u16 - 1 }), 4);
        assert!(!c.untouched_since(3, &at(500)));
        assert!(c.untouched_since(4, &at(500)));
        c.record_all(5);
        assert!(!c.untouched_since(4, &[9, 9, 9, 9, 9]));
        c.reset();
        assert!(c.untouched_since(1, &at(1020)));
    }
}
