//! The SPD's miss path: tuple space search (Srinivasan, Suri, Varghese 1999).
//!
//! Each rule is filed under its *shape*: the covering prefix length of each of its
//! ranges (local and remote address, local and remote port) and whether it names a
//! protocol. All rules of one shape sit in one hash table keyed by the packet fields
//! masked to that shape, so a packet costs one probe per shape, whatever the number of
//! rules. A range that is not a prefix is filed under the prefix that covers it and
//! checked exactly in its bucket; each bucket is sorted by rank, so the first rule that
//! matches is the bucket's answer.
//!
//! A lookup works on the flow cache's packed key as a miss hands it over: masking it to
//! a shape is an AND per word, its bucket's hash the cache's hash of the masked words,
//! the compare one per word. A bucket whose best rule is exactly its prefixes (the
//! common case) needs no range check: every key that reaches it matches that rule, so
//! the slot holds the rule's rank and the rules are read only for the final answer.
//!
//! Priority pruning: shapes are searched in order of the best rank they hold; once the
//! best match so far outranks a shape's best rule, no later shape can win and the search
//! stops. With policies of a handful of shapes (the common case: host or subnet pairs,
//! any or one port) a lookup is a few probes at 100 000 policies as at 1.
//!
//! Its cost grows with the number of distinct shapes (at most 129² · 17² · 2 in theory,
//! a few in practice) and with bucket lengths where many rules share the same covering
//! prefixes (ranges that are not prefixes and overlap). `linear` is the reference it must
//! agree with.

use crate::flow_cache::CacheKey;
use crate::policy::{Action, Decision, FlowKey, Rule, SpdAddr};
use engine::mem::MaskedTable;

/// A rule set's shape: covering prefix lengths and protocol presence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Shape {
    local: u8,
    remote: u8,
    proto: bool,
    local_port: u8,
    remote_port: u8,
}

impl Shape {
    fn of<A: SpdAddr>(r: &Rule<A>) -> Shape {
        Shape {
            local: r.local.covering_len(),
            remote: r.remote.covering_len(),
            proto: r.proto.is_some(),
            local_port: r.local_ports.covering_len(),
            remote_port: r.remote_ports.covering_len(),
        }
    }
}

/// The masks of one shape, applied to a packet's key.
#[derive(Debug, Clone, Copy)]
struct Masks<A> {
    local: A,
    remote: A,
    proto: u8,
    local_port: u16,
    remote_port: u16,
}

impl<A: SpdAddr> Masks<A> {
    fn of(s: Shape) -> Masks<A> {
        let port = |len: u8| u16::MAX.checked_shl(16 - len as u32).unwrap_or(0);
        Masks {
            local: A::from_u128(u128::MAX).masked(s.local),
            remote: A::from_u128(u128::MAX).masked(s.remote),
            proto: if s.proto { 0xff } else { 0 },
            local_port: port(s.local_port),
            remote_port: port(s.remote_port),
        }
    }

    fn apply(&self, k: &FlowKey<A>) -> FlowKey<A> {
        FlowKey {
            local: k.local.and(self.local),
            remote: k.remote.and(self.remote),
            proto: k.proto & self.proto,
            local_port: k.local_port & self.local_port,
            remote_port: k.remote_port & self.remote_port,
        }
    }
}

/// Whether a rule matches every key its shape's mask maps to its bucket: each range is
/// exactly its covering prefix (a protocol is exact in any shape).
fn exact<A: SpdAddr>(r: &Rule<A>) -> bool {
    r.local.is_prefix() && r.remote.is_prefix() && r.local_ports.is_prefix() && r.remote_ports.is_prefix()
}

/// The rules of one shape.
#[derive(Debug, Clone)]
struct Tuple<A: CacheKey> {
    /// The shape's masks packed as the cache packs a key, SPD field 0: ANDed with a
    /// packed key, the key of its bucket here.
    mask: A::Packed,
    /// The best (smallest) rank of any rule here, for pruning.
    best: u64,
    /// Masked key → the bucket's range in `rules`.
    buckets: Buckets<A>,
    /// The one bucket of a shape that has one (a catch-all or a subnet pair's policy):
    /// its key compared in place, with no hash and no table read.
    only: Option<BucketSlot<A::Packed>>,
    /// Buckets end to end, each sorted by rank.
    rules: Vec<Rule<A>>,
}

/// A built, immutable classifier over one family's rules of one SPD direction.
#[derive(Debug, Clone)]
pub struct TupleSpace<A: CacheKey> {
    /// Sorted by `best`.
    tuples: Vec<Tuple<A>>,
    len: usize,
}

/// An open-addressing table from masked packed keys to buckets, at most half full, in
/// groups of [`GROUP`] slots a line: one hash (the flow cache's) and, for most lookups,
/// one line read. A slot is a tag (the key's hash, never 0: 0 is an empty slot) and the
/// bucket's place in `entries`, where its key is compared only on a tag match. A probe
/// compares a group's tags at once and ends at the first group with an empty slot:
/// slots of a whole key one by one ended after a number of slots that varies from flow
/// to flow, a branch the core mispredicted on a third of the misses (docs/PERFORMANCE.md,
/// the SPD miss, tenth session). A std `HashMap` with the engine's word hasher cost some
/// 120 cycles more per probe here (`benches/spd.rs`). On huge pages from 2 MiB up
/// (`engine::mem::MaskedTable`): 100,000 policies of one shape are 2 MiB of groups,
/// which 1,024 flows read at 1,024 places.
#[derive(Debug, Clone)]
struct Buckets<A: CacheKey> {
    groups: MaskedTable<BucketGroup>,
    entries: Box<[BucketSlot<A::Packed>]>,
    /// The bits of the hash kept (all but in tests, which squeeze it to force tag
    /// collisions and full groups).
    #[cfg(test)]
    squeeze: u32,
}

/// Slots a [`BucketGroup`] holds.
const GROUP: usize = 8;

/// One line of [`Buckets`]: each slot's tag, then its bucket's place.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct BucketGroup {
    tags: [u32; GROUP],
    places: [u32; GROUP],
}

impl BucketGroup {
    /// Whether a slot's tag is `tag`: one vector compare of the eight and a test, no
    /// branch a slot (a mask of which slot, gathered bit by bit, cost some 30
    /// instructions a group; which slot is found by the scalar loop of a match).
    #[inline(always)]
    fn has(&self, tag: u32) -> bool {
        self.tags.iter().fold(false, |any, &t| any | (t == tag))
    }

    /// Whether the group has an empty slot: slots are filled in order, so its last.
    #[inline(always)]
    fn has_room(&self) -> bool {
        self.tags[GROUP - 1] == 0
    }
}

/// One bucket: its rules are `rules[start..start + len]` of its tuple, sorted by rank.
#[derive(Debug, Clone, Copy, Default)]
struct BucketSlot<P> {
    key: P,
    /// The first rule's rank: whether the bucket can beat the best match so far,
    /// without reading the rule.
    rank: u64,
    start: u32,
    /// The number of rules (a bucket holds at least one), with [`EXACT`] set when the
    /// first rule matches every key of the bucket.
    len: u32,
}

/// [`BucketSlot::len`]'s flag: the bucket's first rule is [`exact`].
const EXACT: u32 = 1 << 31;

impl<A: CacheKey> Buckets<A> {
    /// The table of `entries`, with the hash's bits `squeeze` keeps (`u32::MAX`
    /// outside tests).
    fn new(entries: Vec<BucketSlot<A::Packed>>, squeeze: u32) -> Self {
        // At most half the slots used: some group has an empty slot, so every probe
        // ends, and few groups are full (a full group sends a probe on to the next).
        // A power of two; more than 2^31 groups would be 2^33 buckets, which no SPD
        // holds (the control plane's limits are far below).
        let size = (entries.len() * 2).div_ceil(GROUP).next_power_of_two();
        let mut groups = MaskedTable::new(size, BucketGroup::default()).expect("a power of two up to 2^31 groups");
        for (place, e) in entries.iter().enumerate() {
            let h = A::key_hash(&e.key) & squeeze;
            let mut g = h;
            loop {
                let group = groups.get_mut(g);
                if let Some(i) = group.tags.iter().position(|&t| t == 0) {
                    group.tags[i] = h | 1;
                    group.places[i] = place as u32;
                    break;
                }
                g = g.wrapping_add(1);
            }
        }
        Buckets {
            groups,
            entries: entries.into_boxed_slice(),
            #[cfg(test)]
            squeeze,
        }
    }

    #[inline(always)]
    fn hash(&self, k: &A::Packed) -> u32 {
        let h = A::key_hash(k);
        #[cfg(test)]
        let h = h & self.squeeze;
        h
    }

    #[inline(always)]
    fn get(&self, k: &A::Packed) -> Option<&BucketSlot<A::Packed>> {
        let h = self.hash(k);
        let tag = h | 1;
        let mut g = h;
        loop {
            let group = self.groups.get(g);
            if group.has(tag) {
                for (_, &place) in group.tags.iter().zip(&group.places).filter(|(&t, _)| t == tag) {
                    if let Some(e) = self.entries.get(place as usize).filter(|e| e.key == *k) {
                        return Some(e);
                    }
                }
            }
            if group.has_room() {
                return None;
            }
            g = g.wrapping_add(1);
        }
    }
}

impl<A: CacheKey> Default for TupleSpace<A> {
    fn default() -> Self {
        TupleSpace { tuples: Vec::new(), len: 0 }
    }
}

impl<A: CacheKey> TupleSpace<A> {
    pub fn new(rules: &[Rule<A>]) -> Self {
        Self::with_squeeze(rules, u32::MAX)
    }

    /// [`TupleSpace::new`] with the bucket tables' hashes ANDed with `squeeze`: tests
    /// force tag collisions and full groups with a few bits.
    fn with_squeeze(rules: &[Rule<A>], squeeze: u32) -> Self {
        // Sorted by shape, then masked key, then rank: each shape's rules and each
        // bucket's are then one run, the bucket in rank order (no map of maps to build:
        // the control plane rebuilds an SPD on every change).
        let mut keyed: Vec<(Shape, FlowKey<A>, u64, &Rule<A>)> = rules
            .iter()
            .map(|r| {
                let shape = Shape::of(r);
                let lo = FlowKey {
                    local: r.local.lo,
                    remote: r.remote.lo,
                    proto: r.proto.unwrap_or(0),
                    local_port: r.local_ports.lo,
                    remote_port: r.remote_ports.lo,
                };
                (shape, Masks::of(shape).apply(&lo), r.rank(), r)
            })
            .collect();
        keyed.sort_unstable_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
        let mut tuples: Vec<Tuple<A>> = keyed
            .chunk_by(|a, b| a.0 == b.0)
            .map(|shape_run| {
                let mut rules = Vec::with_capacity(shape_run.len());
                let mut entries = Vec::new();
                for bucket in shape_run.chunk_by(|a, b| a.1 == b.1) {
                    let start = rules.len() as u32;
                    rules.extend(bucket.iter().map(|k| *k.3));
                    let first = bucket[0].3;
                    let len = bucket.len() as u32 | if exact(first) { EXACT } else { 0 };
                    entries.push(BucketSlot { key: A::pack(0, &bucket[0].1), rank: bucket[0].2, start, len });
                }
                let best = shape_run.iter().map(|k| k.2).min().unwrap_or(u64::MAX);
                let m = Masks::<A>::of(shape_run[0].0);
                let mask = A::pack(
                    0,
                    &FlowKey { local: m.local, remote: m.remote, proto: m.proto, local_port: m.local_port, remote_port: m.remote_port },
                );
                let only = if let [one] = entries[..] { Some(one) } else { None };
                Tuple { mask, best, buckets: Buckets::new(entries, squeeze), only, rules }
            })
            .collect();
        tuples.sort_by_key(|t| t.best);
        TupleSpace { tuples, len: rules.len() }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many shapes a lookup may probe.
    pub fn shapes(&self) -> usize {
        self.tuples.len()
    }

    /// The best-ranked rule matching `k`.
    #[inline]
    pub fn lookup(&self, k: &FlowKey<A>) -> Option<&Rule<A>> {
        self.lookup_packed(&A::pack(0, k))
    }

    /// [`TupleSpace::lookup`] of a key packed for the flow cache ([`CacheKey::pack`]);
    /// its SPD field is ignored.
    #[inline]
    pub fn lookup_packed(&self, p: &A::Packed) -> Option<&Rule<A>> {
        // The winner as its tuple and place: its rule is read once, at the end.
        let mut best: Option<(&Tuple<A>, u32)> = None;
        let mut best_rank = u64::MAX;
        for t in &self.tuples {
            if t.best >= best_rank {
                break;
            }
            let masked = A::mask_words(p, &t.mask);
            let found = match &t.only {
                Some(one) => Some(one).filter(|one| one.key == masked),
                None => t.buckets.get(&masked),
            };
            let Some(b) = found else { continue };
            if b.rank >= best_rank {
                continue;
            }
            if b.len & EXACT != 0 {
                best = Some((t, b.start));
                best_rank = b.rank;
                continue;
            }
            let k = A::unpack(p).1;
            let end = b.start + b.len;
            for (i, r) in t.rules.get(b.start as usize..end as usize).unwrap_or_default().iter().enumerate() {
                let rank = r.rank();
                if rank >= best_rank {
                    break;
                }
                if r.matches(&k) {
                    best = Some((t, b.start + i as u32));
                    best_rank = rank;
                    break;
                }
            }
        }
        best.and_then(|(t, i)| t.rules.get(i as usize))
    }

    #[inline]
    pub fn decide(&self, k: &FlowKey<A>) -> Decision {
        Self::decision(self.lookup(k))
    }

    /// [`TupleSpace::decide`] of a packed key ([`TupleSpace::lookup_packed`]).
    #[inline]
    pub fn decide_packed(&self, p: &A::Packed) -> Decision {
        Self::decision(self.lookup_packed(p))
    }

    #[inline(always)]
    fn decision(r: Option<&Rule<A>>) -> Decision {
        r.map_or(Decision::NoMatch, |r| Decision::Act(r.action))
    }
}

/// The reference: scan the rules in rank order, take the first that matches.
pub fn linear<'a, A: SpdAddr>(rules: &'a [Rule<A>], k: &FlowKey<A>) -> Option<&'a Rule<A>> {
    rules.iter().filter(|r| r.matches(k)).min_by_key(|r| r.rank())
}

/// A decision the classifier and the cache agree on, as `show` prints it.
pub fn action_name(a: Action) -> String {
    match a {
        Action::Protect(sa) => format!("protect sa {}", sa.0),
        Action::Bypass => "bypass".into(),
        Action::Discard => "discard".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PolicyId, Range, SaId};
    use proptest::prelude::*;

    /// Address ranges drawn from a small space so that rules overlap often: prefixes
    /// of a few lengths and arbitrary ranges, both anywhere in the space.
    fn addr_range<A: SpdAddr>(base: u128, span_bits: u32) -> impl Strategy<Value = Range<A>> {
        let span = 1u128 << span_bits;
        prop_oneof![
            Just(Range::any()),
            (0..span, 0..=span_bits).prop_map(move |(v, free)| {
                let lo = (base + v) >> free << free;
                Range { lo: A::from_u128(lo), hi: A::from_u128(lo | ((1u128 << free) - 1)) }
            }),
            (0..span, 0..span).prop_map(move |(a, b)| Range { lo: A::from_u128(base + a.min(b)), hi: A::from_u128(base + a.max(b)) }),
        ]
    }

    fn port_range() -> impl Strategy<Value = Range<u16>> {
        prop_oneof![
            Just(Range::ANY),
            (0u16..64).prop_map(|p| Range { lo: p, hi: p }),
            (0u16..64, 0u16..64).prop_map(|(a, b)| Range { lo: a.min(b), hi: a.max(b) }),
            (0u16..64, 0u32..7).prop_map(|(p, free)| Range { lo: p >> free << free, hi: (p >> free << free) | ((1 << free) - 1) }),
        ]
    }

    fn rules<A: SpdAddr>(base: u128) -> impl Strategy<Value = Vec<Rule<A>>> {
        let rule = (
            0u32..4,
            addr_range::<A>(base, 6),
            addr_range::<A>(base, 6),
            prop_oneof![Just(None), Just(Some(6u8)), Just(Some(17u8))],
            port_range(),
            port_range(),
            prop_oneof![Just(Action::Bypass), Just(Action::Discard), (0u32..4).prop_map(|s| Action::Protect(SaId(s)))],
        );
        proptest::collection::vec(rule, 0..60).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (priority, local, remote, proto, local_ports, remote_ports, action))| Rule {
                    id: PolicyId(i as u32),
                    priority,
                    local,
                    remote,
                    proto,
                    local_ports,
                    remote_ports,
                    action,
                })
                .collect()
        })
    }

    fn keys<A: SpdAddr>(base: u128) -> impl Strategy<Value = Vec<FlowKey<A>>> {
        let key = (0u128..80, 0u128..80, prop_oneof![Just(6u8), Just(17u8), Just(1u8)], 0u16..70, 0u16..70).prop_map(
            move |(l, r, proto, lp, rp)| FlowKey {
                local: A::from_u128(base + l),
                remote: A::from_u128(base + r),
                proto,
                local_port: lp,
                remote_port: rp,
            },
        );
        proptest::collection::vec(key, 1..40)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn tuple_space_is_the_linear_scan_v4((rules, keys) in (rules::<u32>(0xc612_0000), keys::<u32>(0xc612_0000))) {
            let ts = TupleSpace::new(&rules);
            for k in &keys {
                prop_assert_eq!(ts.lookup(k), linear(&rules, k), "key {:?}", k);
            }
        }

        /// Every tag alike (squeeze 0: one group, overflowing into the next ones) or a
        /// few bits of them: the keys tell the buckets apart.
        #[test]
        fn tuple_space_with_colliding_tags_is_the_linear_scan_v4((rules, keys) in (rules::<u32>(0xc612_0000), keys::<u32>(0xc612_0000)), squeeze in prop_oneof![Just(0u32), Just(1), Just(6), Just(0x1f)]) {
            let ts = TupleSpace::with_squeeze(&rules, squeeze);
            for k in &keys {
                prop_assert_eq!(ts.lookup(k), linear(&rules, k), "key {:?}", k);
            }
        }

        #[test]
        fn tuple_space_with_colliding_tags_is_the_linear_scan_v6((rules, keys) in (rules::<u128>(0x2001_0db8u128 << 96), keys::<u128>(0x2001_0db8u128 << 96)), squeeze in prop_oneof![Just(0u32), Just(1), Just(6), Just(0x1f)]) {
            let ts = TupleSpace::with_squeeze(&rules, squeeze);
            for k in &keys {
                prop_assert_eq!(ts.lookup(k), linear(&rules, k), "key {:?}", k);
            }
        }

        #[test]
        fn tuple_space_is_the_linear_scan_v6((rules, keys) in (rules::<u128>(0x2001_0db8u128 << 96), keys::<u128>(0x2001_0db8u128 << 96))) {
            let ts = TupleSpace::new(&rules);
            for k in &keys {
                prop_assert_eq!(ts.lookup(k), linear(&rules, k), "key {:?}", k);
            }
        }
    }

    #[test]
    fn equal_priority_goes_to_the_older_policy() {
        let r = |id, action| Rule::<u32> {
            id: PolicyId(id),
            priority: 5,
            local: Range::any(),
            remote: Range { lo: 10, hi: 20 },
            proto: None,
            local_ports: Range::ANY,
            remote_ports: Range::ANY,
            action,
        };
        // The newer one is a prefix (another shape) and listed first: still loses.
        let newer = Rule { remote: Range { lo: 16, hi: 19 }, ..r(9, Action::Discard) };
        let rules = [newer, r(3, Action::Bypass)];
        let ts = TupleSpace::new(&rules);
        let k = FlowKey { local: 1, remote: 17, proto: 6, local_port: 1, remote_port: 2 };
        assert_eq!(ts.lookup(&k).map(|r| r.id), Some(PolicyId(3)));
        assert_eq!(ts.decide(&FlowKey { remote: 21, ..k }), Decision::NoMatch);
    }

    #[test]
    fn a_later_shapes_worse_bucket_does_not_replace_the_match() {
        let r = |id, priority, remote: Range<u32>| Rule::<u32> {
            id: PolicyId(id),
            priority,
            local: Range::any(),
            remote,
            proto: None,
            local_ports: Range::ANY,
            remote_ports: Range::ANY,
            action: Action::Protect(SaId(id)),
        };
        let host = |a: u32| Range { lo: a, hi: a };
        let net24 = |a: u32| Range { lo: a, hi: a | 0xff };
        // Hosts first (best priority 10), the key's at 5; the /24s after (best 8),
        // the key's at 1: the /24 shape is probed (8 beats 5) but its bucket, exact
        // and worse, must not win.
        let rules = [r(0, 10, host(0x0101_0101)), r(1, 5, host(0x0202_0202)), r(2, 8, net24(0x0303_0300)), r(3, 1, net24(0x0202_0200))];
        let ts = TupleSpace::new(&rules);
        assert_eq!(ts.shapes(), 2);
        let k = FlowKey { local: 9, remote: 0x0202_0202, proto: 17, local_port: 1, remote_port: 2 };
        assert_eq!(ts.lookup(&k).map(|r| r.id), Some(PolicyId(1)));
        assert_eq!(ts.lookup(&k), linear(&rules, &k));
        assert_eq!(ts.lookup(&FlowKey { remote: 0x0202_0203, ..k }).map(|r| r.id), Some(PolicyId(3)));
    }

    #[test]
    fn a_large_shapes_buckets_are_on_huge_pages() {
        // 70,000 hosts of one shape: 2^15 groups of 64 bytes, 2 MiB, read at random by
        // the flows a miss classifies; a shape of a few rules stays an ordinary allocation.
        let rule = |id: u32, local: Range<u32>| Rule::<u32> {
            id: PolicyId(id),
            priority: 10,
            local,
            remote: Range::any(),
            proto: None,
            local_ports: Range::ANY,
            remote_ports: Range::ANY,
            action: Action::Protect(SaId(id)),
        };
        let mut rules: Vec<Rule<u32>> = (0..70_000u32).map(|i| rule(i, Range { lo: 0xc612_0000 + i, hi: 0xc612_0000 + i })).collect();
        rules.push(rule(70_000, Range { lo: 0xc613_8000, hi: 0xc613_ffff }));
        let ts = TupleSpace::new(&rules);
        assert_eq!(ts.shapes(), 2);
        let huge: Vec<(usize, bool)> = ts.tuples.iter().map(|t| (t.buckets.groups.len(), t.buckets.groups.is_huge_aligned())).collect();
        assert!(huge.contains(&(1 << 15, true)) && huge.contains(&(1, false)), "{huge:?}");
        let k = FlowKey { local: 0xc612_0000 + 69_999, remote: 1, proto: 6, local_port: 1, remote_port: 2 };
        assert_eq!(ts.decide(&k), Decision::Act(Action::Protect(SaId(69_999))));
        assert_eq!(ts.decide(&FlowKey { local: 0xc613_8203, ..k }), Decision::Act(Action::Protect(SaId(70_000))));
        assert_eq!(ts.decide(&FlowKey { local: 0xc612_0000 + 70_000, ..k }), Decision::NoMatch);
    }

    #[test]
    fn full_groups_and_equal_tags_send_a_probe_on_to_the_key() {
        // Every hash squeezed to 0: one tag, one home group; 40 hosts fill five groups
        // of eight in a table of eight groups, so a probe passes full groups and reads
        // every entry of a tag match, and an absent key's ends at the sixth group.
        let rules: Vec<Rule<u32>> = (0..40u32)
            .map(|i| Rule {
                id: PolicyId(i),
                priority: 7,
                local: Range { lo: 0xc612_0000 + i, hi: 0xc612_0000 + i },
                remote: Range::any(),
                proto: None,
                local_ports: Range::ANY,
                remote_ports: Range::ANY,
                action: Action::Protect(SaId(i)),
            })
            .collect();
        let ts = TupleSpace::with_squeeze(&rules, 0);
        assert_eq!(ts.shapes(), 1);
        let b = &ts.tuples[0].buckets;
        assert_eq!(b.groups.len(), 16);
        let full = (0..16).filter(|&g| !b.groups.get(g).has_room()).count();
        assert_eq!((full, b.groups.get(0).tags), (5, [1; GROUP]));
        for i in 0..40u32 {
            let k = FlowKey { local: 0xc612_0000 + i, remote: 3, proto: 6, local_port: 1, remote_port: 2 };
            assert_eq!(ts.decide(&k), Decision::Act(Action::Protect(SaId(i))), "host {i}");
        }
        let absent = FlowKey { local: 0xc612_0000 + 40, remote: 3, proto: 6, local_port: 1, remote_port: 2 };
        assert_eq!(ts.decide(&absent), Decision::NoMatch);
    }

    #[test]
    fn many_host_policies_share_one_shape() {
        let rules: Vec<Rule<u32>> = (0..10_000u32)
            .map(|i| Rule {
                id: PolicyId(i),
                priority: 100,
                local: Range { lo: 0xc612_0000 + i, hi: 0xc612_0000 + i },
                remote: Range { lo: 0xc613_0000, hi: 0xc613_00ff },
                proto: Some(17),
                local_ports: Range::ANY,
                remote_ports: Range { lo: 4000 + (i % 8) as u16, hi: 4000 + (i % 8) as u16 },
                action: Action::Protect(SaId(i)),
            })
            .collect();
        let ts = TupleSpace::new(&rules);
        assert_eq!(ts.shapes(), 1);
        let k = FlowKey { local: 0xc612_0000 + 9_999, remote: 0xc613_0007, proto: 17, local_port: 1, remote_port: 4007 };
        assert_eq!(ts.decide(&k), Decision::Act(Action::Protect(SaId(9_999))));
        assert_eq!(ts.decide(&FlowKey { remote_port: 4006, ..k }), Decision::NoMatch);
    }
}
