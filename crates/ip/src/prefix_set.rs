//! A set of prefixes of one family, asked one question: does it hold an address?
//!
//! Where the FIB ([`crate::lpm`]) answers *which* prefix is the longest match and pays a
//! direct table of 2^16 slots for it, a membership set needs no value per prefix: the
//! prefixes are turned into address ranges, overlapping and adjacent ranges merged, and
//! the disjoint ranges that are left kept sorted. An address is in the set when the last
//! range starting at or below it ends at or above it.
//!
//! To find that range without a search of all of them, the span the ranges cover (from
//! the first one's first address to the last one's last, whose leading bits every
//! address in it shares) is cut into 2^k buckets by the next k bits, k about log2 of the
//! number of ranges plus one (at most 12): a bucket's entry in a direct index is the
//! first range that reaches into it, the next bucket's entry the last that can. A check
//! is a compare with the span, one index read, and a binary search (with no branch on
//! the data) of the ranges reaching into the address's bucket: one or two for ranges
//! spread over the span, whatever their number. Ranges crowded into one bucket cost
//! `log2` of how many there are, as a search of them all would. A set of n ranges takes
//! 32·n bytes and an index of at most 4·(2n + 2).
//!
//! Used where a list of ranges is checked per connection (a load-balancer service's
//! `source_ranges`, kube-proxy's `loadBalancerSourceRanges`, which cloud allowlists fill
//! with hundreds): the cost of a check no longer grows with the list (`benches/prefix_set.rs`).

use crate::lpm::LpmKey;
use crate::Prefix;
use std::net::IpAddr;

/// Prefixes of one family as disjoint, sorted, non-adjacent address ranges (IPv4
/// addresses in the low 32 bits of a `u128`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixSet {
    v6: bool,
    /// Each range's first address, ascending.
    starts: Box<[u128]>,
    /// Each range's last address (`ends[i]` < `starts[i + 1]` - 1).
    ends: Box<[u128]>,
    /// Leading bits every address of the span (`starts[0]` to the last end) shares.
    common: u32,
    /// Bits after `common` that pick a bucket (0: one bucket).
    bits: u32,
    /// Per bucket, the first range that ends in it or after it; one more entry past the
    /// last bucket (the number of ranges).
    index: Box<[u32]>,
}

impl PrefixSet {
    /// The set of `prefixes` of one family (IPv6 if `v6`); a prefix of the other family
    /// is left out (it holds no address of this one).
    pub fn new(v6: bool, prefixes: impl IntoIterator<Item = Prefix>) -> PrefixSet {
        let mut ranges: Vec<(u128, u128)> = prefixes
            .into_iter()
            .filter_map(|p| match p {
                Prefix::V4(a, len) if !v6 => {
                    let net = u32::from(a).masked(len);
                    Some((net as u128, net.last(len) as u128))
                }
                Prefix::V6(a, len) if v6 => {
                    let net = u128::from(a).masked(len);
                    Some((net, net.last(len)))
                }
                _ => None,
            })
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (first, last) in ranges {
            match merged.last_mut() {
                // Overlapping or adjacent: one range (an end at the top of the family's
                // space saturates: everything after it is in it already).
                Some(m) if first <= m.1.saturating_add(1) => m.1 = m.1.max(last),
                _ => merged.push((first, last)),
            }
        }
        let (starts, ends): (Vec<u128>, Vec<u128>) = merged.into_iter().unzip();
        let (common, bits) = match (starts.first(), ends.last()) {
            (Some(&lo), Some(&hi)) => {
                let common = (lo ^ hi).leading_zeros();
                let want = usize::BITS - starts.len().leading_zeros() + 1;
                (common, want.min(12).min(128 - common))
            }
            _ => (128, 0),
        };
        // Bucket b's first address: the span's shared bits, then b.
        let base = starts.first().map_or(0, |&lo| lo & !(u128::MAX.checked_shr(common).unwrap_or(0)));
        let first = |b: u128| base | b.checked_shl(128 - common - bits).unwrap_or(0);
        let mut index = Vec::with_capacity((1 << bits) + 1);
        let mut i = 0;
        for b in 0..1u128 << bits {
            while i < ends.len() && ends[i] < first(b) {
                i += 1;
            }
            index.push(i as u32);
        }
        index.push(ends.len() as u32);
        PrefixSet { v6, starts: starts.into(), ends: ends.into(), common, bits, index: index.into() }
    }

    /// Whether the set holds `addr` (an address of the other family: no).
    pub fn contains(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => !self.v6 && self.holds(u32::from(a) as u128),
            IpAddr::V6(a) => self.v6 && self.holds(u128::from(a)),
        }
    }

    /// Whether the set holds the address whose bytes (network order) are `addr`: 4 for
    /// an IPv4 set, 16 for IPv6; any other length is no address of the set's family.
    #[inline]
    pub fn contains_bytes(&self, addr: &[u8]) -> bool {
        addr.len() == if self.v6 { 16 } else { 4 } && self.holds(addr.iter().fold(0u128, |x, &b| x << 8 | b as u128))
    }

    #[inline]
    fn holds(&self, a: u128) -> bool {
        let (Some(&lo), Some(&hi)) = (self.starts.first(), self.ends.last()) else { return false };
        if a < lo || a > hi {
            return false;
        }
        // In the span: its bucket's ranges, from the first that reaches into it to the
        // one after the last that ends in it (which may start in it and go on).
        let b = a.checked_shl(self.common).unwrap_or(0).checked_shr(128 - self.bits).unwrap_or(0) as usize;
        let from = self.index[b] as usize;
        let to = (self.index[b + 1] as usize).min(self.starts.len() - 1);
        let starts = &self.starts[from..=to];
        // The last of them starting at or below `a`, if any: `at` stays on one starting
        // at or below `a` (or the first), halving what is left each step.
        let (mut at, mut left) = (0usize, starts.len());
        while left > 1 {
            let half = left / 2;
            at = if starts[at + half] <= a { at + half } else { at };
            left -= half;
        }
        starts[at] <= a && a <= self.ends[from + at]
    }

    /// The disjoint ranges the prefixes made (what a check searches).
    pub fn ranges(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    pub fn is_v6(&self) -> bool {
        self.v6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// The reference: every prefix tried in turn (what a service's ranges were before).
    fn linear(prefixes: &[Prefix], a: IpAddr) -> bool {
        prefixes.iter().any(|p| p.contains(a))
    }

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_merge_and_ends_hold() {
        let set = PrefixSet::new(false, [p("198.18.1.0/24"), p("198.18.0.0/24"), p("198.18.0.128/25"), p("2001:db8::/32")]);
        assert_eq!(set.ranges(), 1, "adjacent /24s and a covered /25 are one range; the IPv6 prefix is left out");
        for (a, want) in [("198.17.255.255", false), ("198.18.0.0", true), ("198.18.1.255", true), ("198.18.2.0", false)] {
            assert_eq!(set.contains(a.parse().unwrap()), want, "{a}");
        }
        assert!(!set.contains("2001:db8::1".parse().unwrap()), "no address of the other family");
        assert!(!set.contains_bytes(&[0; 16]) && set.contains_bytes(&[198, 18, 0, 7]) && !set.contains_bytes(&[198, 18, 0]));
        let all = PrefixSet::new(true, [p("::/0"), p("2001:db8::/32")]);
        assert_eq!(all.ranges(), 1);
        assert!(all.contains(Ipv6Addr::from(u128::MAX).into()) && all.contains(Ipv6Addr::UNSPECIFIED.into()));
        let top = PrefixSet::new(false, [p("255.255.255.255/32"), p("0.0.0.0/32")]);
        assert!(top.contains(Ipv4Addr::BROADCAST.into()) && top.contains(Ipv4Addr::UNSPECIFIED.into()));
        assert!(!top.contains("0.0.0.1".parse().unwrap()));
        let empty = PrefixSet::new(false, []);
        assert!(empty.is_empty() && !empty.contains(Ipv4Addr::UNSPECIFIED.into()));
    }

    /// A family's prefixes: random addresses, lengths over the whole range, and often
    /// sharing leading bits (nested, adjacent and overlapping ranges, as allowlists
    /// hold), sources near and inside them as well as anywhere.
    fn case(v6: bool) -> impl Strategy<Value = (Vec<Prefix>, Vec<IpAddr>)> {
        let bits = if v6 { 128u32 } else { 32 };
        let addr = move |x: u128| -> IpAddr {
            if v6 {
                Ipv6Addr::from(x).into()
            } else {
                Ipv4Addr::from(x as u32).into()
            }
        };
        // Two common tops, so prefixes cluster.
        let tops = if v6 { [0x2001_0db8u128 << 96, 0x2001_0db8_0001u128 << 80] } else { [0xc612_0000u128, 0xc613_0100] };
        let raw = (any::<u128>(), 0..=bits, 0..3usize);
        let prefixes = prop::collection::vec(raw, 0..150).prop_map(move |v| {
            v.into_iter()
                .map(|(x, len, t)| {
                    let x = if v6 { x } else { x & 0xffff_ffff };
                    let x = if t < 2 { tops[t] | (x & ((1u128 << (bits / 2)) - 1)) } else { x };
                    Prefix::covering(addr(x), len as u8)
                })
                .collect::<Vec<_>>()
        });
        (prefixes, prop::collection::vec((any::<u128>(), 0..4usize, any::<u8>()), 1..60)).prop_map(move |(ps, srcs)| {
            let sources = srcs
                .into_iter()
                .map(|(x, how, d)| {
                    let x = if v6 { x } else { x & 0xffff_ffff };
                    let near = |p: &Prefix, last: bool| {
                        let (net, len) = match *p {
                            Prefix::V4(a, l) => (u32::from(a) as u128, l),
                            Prefix::V6(a, l) => (u128::from(a), l),
                        };
                        let end = if v6 { net.last(len) } else { (net as u32).last(len) as u128 };
                        let at = if last { end.wrapping_add(d as u128 % 2) } else { net.wrapping_sub(d as u128 % 2) };
                        if v6 {
                            at
                        } else {
                            at & 0xffff_ffff
                        }
                    };
                    match (how, ps.get(x as usize % ps.len().max(1))) {
                        // A range's first address or the one before, its last or the one after.
                        (0, Some(p)) => addr(near(p, false)),
                        (1, Some(p)) => addr(near(p, true)),
                        (2, Some(p)) => addr(u128::from_be_bytes(match (p, addr(x)) {
                            (Prefix::V4(a, l), IpAddr::V4(s)) => {
                                let m = u32::MAX.checked_shl(32 - *l as u32).unwrap_or(0);
                                ((u32::from(*a) & m | u32::from(s) & !m) as u128).to_be_bytes()
                            }
                            (Prefix::V6(a, l), IpAddr::V6(s)) => {
                                let m = u128::MAX.checked_shl(128 - *l as u32).unwrap_or(0);
                                (u128::from(*a) & m | u128::from(s) & !m).to_be_bytes()
                            }
                            _ => x.to_be_bytes(),
                        })),
                        _ => addr(x),
                    }
                })
                .collect();
            (ps, sources)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The set agrees with a scan of every prefix, for both families, for addresses
        /// inside, at the edges of and outside the prefixes; the other family's
        /// addresses are never in it.
        #[test]
        fn agrees_with_the_linear_scan((v4, s4) in case(false), (v6, s6) in case(true)) {
            let mixed: Vec<Prefix> = v4.iter().chain(&v6).copied().collect();
            let (set4, set6) = (PrefixSet::new(false, mixed.iter().copied()), PrefixSet::new(true, mixed.iter().copied()));
            prop_assert!(set4.ranges() <= v4.len() && set6.ranges() <= v6.len());
            for &a in s4.iter().chain(&s6) {
                let want = linear(&mixed, a);
                let set = if a.is_ipv6() { &set6 } else { &set4 };
                prop_assert_eq!(set.contains(a), want, "{} in {:?}", a, mixed);
                let bytes = match a { IpAddr::V4(x) => x.octets().to_vec(), IpAddr::V6(x) => x.octets().to_vec() };
                prop_assert_eq!(set.contains_bytes(&bytes), want);
                let other = if a.is_ipv6() { &set4 } else { &set6 };
                prop_assert!(!other.contains(a) && !other.contains_bytes(&bytes));
            }
        }
    }
}
