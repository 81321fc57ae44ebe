//! ECMP: a prefix with several weighted paths, one chosen per packet by its flow hash.
//!
//! A multipath route's FIB value is not an adjacency but a group: [`encode`] puts the
//! group's index under the tag [`MULTIPATH_TAG`] in the bits a [`TunnelRef`] keeps its
//! kind in, so a single-path route's value (an adjacency or a tunnel) and the lookup's
//! handling of it stay exactly as they were, and only a value above `MAX_INDEX` is
//! checked for the tag. The group is a table of [`BUCKETS`] path values (each an
//! adjacency index or an encoded tunnel) filled in proportion to the weights;
//! `ipN-lookup` takes the bucket the packet's flow hash ([`crate::flow`], the hash UDP
//! tunnels derive their entropy source ports from) picks. So one flow always takes one
//! path, and a tunnel's outer packets, whose source ports differ by inner flow, spread.
//!
//! A path that cannot send (its next hop unresolved, its link down) is skipped: its
//! buckets go to the others in proportion to their weights while every other bucket
//! stays where it was, so only the flows of the path that went away move; when it comes
//! back, the table is as before. When no path can send, every path keeps its buckets
//! (packets to an unresolved next hop solicit it).
//!
//! [`TunnelRef`]: crate::tables::TunnelRef

use crate::tables::{MAX_INDEX, TUNNEL_SHIFT};

/// The tag of a multipath group in a FIB value's top bits (tunnel kinds use 1..=10).
pub const MULTIPATH_TAG: u32 = 15;
/// Buckets per group: each path's share of flows is its share of the weights to
/// within 1/`BUCKETS`.
pub const BUCKETS: usize = 512;
/// The most paths a route may have.
pub const MAX_PATHS: usize = 64;
/// The largest weight of a path (as VPP's API, one byte).
pub const MAX_WEIGHT: u32 = 255;

/// The FIB value of group `id`.
#[inline(always)]
pub const fn encode(id: u32) -> u32 {
    (MULTIPATH_TAG << TUNNEL_SHIFT) | (id & MAX_INDEX)
}

/// The group a FIB value names, if it names one.
#[inline(always)]
pub const fn decode(v: u32) -> Option<u32> {
    if v >> TUNNEL_SHIFT == MULTIPATH_TAG {
        Some(v & MAX_INDEX)
    } else {
        None
    }
}

/// One group's buckets, as published to the workers.
#[derive(Clone, PartialEq, Eq)]
pub struct Multipath {
    buckets: Box<[u32; BUCKETS]>,
    /// Bit i: a path leaves by interface i (usable now or not), for strict uRPF
    /// (`crate::urpf`): a source routed over this group may come in by any of them.
    pub links: u64,
}

impl std::fmt::Debug for Multipath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multipath").field("shares", &self.shares()).finish()
    }
}

impl Multipath {
    /// The path value for a packet of flow hash `hash`. The hash is mixed once more
    /// first: UDP tunnels take their source port from its high bits and GTP-U from its
    /// low ones, and a path chosen by the same bits would give each tunnel a slice of
    /// the port range rather than all of it.
    #[inline(always)]
    pub fn choose(&self, hash: u32) -> u32 {
        self.buckets[bucket(hash)]
    }

    /// The buckets for `paths` (value, weight, whether it can send now), in the given
    /// order. Weights are at least 1.
    pub fn new(paths: &[(u32, u32, bool)]) -> Multipath {
        let mut buckets = Box::new([crate::tables::ADJ_MISS; BUCKETS]);
        if paths.is_empty() {
            return Multipath { buckets, links: 0 };
        }
        // Every path's own buckets, as when all can send: what a path keeps when
        // another goes away.
        let all = apportion(&paths.iter().map(|p| p.1).collect::<Vec<_>>());
        let mut owner = Vec::with_capacity(BUCKETS);
        for (i, &n) in all.iter().enumerate() {
            owner.extend(std::iter::repeat(i).take(n));
        }
        let usable: Vec<usize> = (0..paths.len()).filter(|&i| paths[i].2).collect();
        if !usable.is_empty() && usable.len() < paths.len() {
            // The buckets of the paths that cannot send go to those that can, each up
            // to its share among them; what rounding leaves goes round the usable paths.
            let want = apportion(&usable.iter().map(|&i| paths[i].1).collect::<Vec<_>>());
            let mut deficit: Vec<usize> = usable.iter().zip(&want).map(|(&i, &w)| w.saturating_sub(all[i])).collect();
            let mut next = 0;
            for o in owner.iter_mut().filter(|o| !paths[**o].2) {
                let j = match deficit.iter().position(|&d| d > 0) {
                    Some(j) => {
                        deficit[j] -= 1;
                        j
                    }
                    None => {
                        next = (next + 1) % usable.len();
                        next
                    }
                };
                *o = usable[j];
            }
        }
        for (b, &o) in buckets.iter_mut().zip(&owner) {
            *b = paths[o].0;
        }
        Multipath { buckets, links: 0 }
    }

    /// How many buckets each path value holds, in value order.
    pub fn shares(&self) -> Vec<(u32, usize)> {
        let mut m = std::collections::BTreeMap::new();
        for &b in self.buckets.iter() {
            *m.entry(b).or_insert(0) += 1;
        }
        m.into_iter().collect()
    }
}

/// The bucket of flow hash `hash` (see [`Multipath::choose`]).
#[inline(always)]
pub fn bucket(hash: u32) -> usize {
    engine::hash::reduce(engine::hash::finish(hash), BUCKETS as u32) as usize
}

/// [`BUCKETS`] shared out by `weights` (largest remainders): each share within one
/// bucket of its exact value, the total exact.
fn apportion(weights: &[u32]) -> Vec<usize> {
    let total: u64 = weights.iter().map(|&w| w as u64).sum::<u64>().max(1);
    let exact: Vec<u64> = weights.iter().map(|&w| w as u64 * BUCKETS as u64).collect();
    let mut out: Vec<usize> = exact.iter().map(|&e| (e / total) as usize).collect();
    let mut left = BUCKETS - out.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // Largest remainder first; ties to the earlier path.
    order.sort_by_key(|&i| std::cmp::Reverse(exact[i] % total));
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An IPv4 UDP packet header with ports, as `ip_flow_hash` reads it.
    fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn values_do_not_collide_with_tunnels_or_adjacencies() {
        for id in [0, 1, 77, MAX_INDEX] {
            assert_eq!(decode(encode(id)), Some(id));
            assert_eq!(crate::tables::TunnelRef::decode(encode(id)), None);
            assert!(encode(id) > MAX_INDEX);
        }
        for v in [0, 1, 2, MAX_INDEX, crate::tables::TunnelRef { kind: crate::tables::TunnelKind::Upf6, id: 3 }.encode()] {
            assert_eq!(decode(v), None);
        }
    }

    #[test]
    fn apportion_is_exact_in_total_and_within_one_bucket() {
        for w in [vec![1], vec![1, 1], vec![3, 1], vec![255, 1, 7], vec![1; MAX_PATHS], vec![255; 3]] {
            let a = apportion(&w);
            assert_eq!(a.iter().sum::<usize>(), BUCKETS);
            let total: u32 = w.iter().sum();
            for (n, &wi) in a.iter().zip(&w) {
                let exact = wi as f64 * BUCKETS as f64 / total as f64;
                assert!((*n as f64 - exact).abs() < 1.0, "{w:?}: {n} for exact {exact}");
            }
        }
    }

    /// 20 000 flows (one source, varying ports, as a client's connections are) over
    /// weights 3:1: each path within 2 % of its share, every flow on one path.
    #[test]
    fn flows_spread_by_weight_and_stay_put() {
        let m = Multipath::new(&[(10, 3, true), (11, 1, true)]);
        let mut count = [0usize; 2];
        for i in 0..20_000u32 {
            let p = udp4([198, 18, 0, 2], [198, 19, (i >> 8) as u8, i as u8], 1024 + (i % 50_000) as u16, 53);
            let h = crate::flow::ip_flow_hash(&p);
            let v = m.choose(h);
            assert_eq!(v, m.choose(crate::flow::ip_flow_hash(&p)), "one flow, one path");
            count[(v - 10) as usize] += 1;
        }
        let share = count[0] as f64 / 20_000.0;
        assert!((share - 0.75).abs() < 0.02, "3:1 gave {count:?}");
    }

    /// A tunnel's source port comes from the same hash's high bits: the flows one path
    /// gets still cover the whole port range (each quarter of it within 3 % of a quarter).
    #[test]
    fn paths_do_not_slice_the_tunnel_port_range() {
        let m = Multipath::new(&[(10, 1, true), (11, 1, true)]);
        let mut quarters = [0usize; 4];
        let mut on_first = 0;
        for i in 0..40_000u32 {
            let p = udp4([198, 18, 0, 2], [198, 19, 0, 1], 1024 + (i % 60_000) as u16, (i / 60_000) as u16 + 80);
            let h = crate::flow::ip_flow_hash(&p);
            if m.choose(h) == 10 {
                on_first += 1;
                quarters[engine::hash::reduce(h, 4) as usize] += 1;
            }
        }
        for q in quarters {
            let f = q as f64 / on_first as f64;
            assert!((f - 0.25).abs() < 0.03, "port range quarters of one path: {quarters:?}");
        }
    }

    #[test]
    fn no_usable_path_keeps_every_path() {
        let m = Multipath::new(&[(10, 1, false), (11, 1, false)]);
        assert_eq!(m.shares(), vec![(10, BUCKETS / 2), (11, BUCKETS / 2)]);
        assert_eq!(Multipath::new(&[]).shares(), vec![(0, BUCKETS)]);
    }

    proptest! {
        /// For any weights and any set of paths gone: the usable paths hold every bucket,
        /// each within one bucket of its share among them (plus the rounding of the
        /// full table), and no bucket of a usable path moved.
        #[test]
        fn skipping_paths_moves_only_their_flows(
            weights in prop::collection::vec(1u32..=MAX_WEIGHT, 1..12),
            gone in prop::collection::vec(any::<bool>(), 12),
        ) {
            let full: Vec<(u32, u32, bool)> = weights.iter().enumerate().map(|(i, &w)| (100 + i as u32, w, true)).collect();
            let some: Vec<(u32, u32, bool)> = full.iter().zip(&gone).map(|(&(v, w, _), &g)| (v, w, !g)).collect();
            let a = Multipath::new(&full);
            let b = Multipath::new(&some);
            let usable: Vec<&(u32, u32, bool)> = some.iter().filter(|p| p.2).collect();
            if usable.is_empty() {
                prop_assert!(a == b);
                return Ok(());
            }
            for (x, y) in a.buckets.iter().zip(b.buckets.iter()) {
                let x_usable = some.iter().any(|p| p.0 == *x && p.2);
                if x_usable {
                    prop_assert_eq!(x, y, "a usable path's bucket moved");
                }
                prop_assert!(some.iter().any(|p| p.0 == *y && p.2), "bucket on a skipped path");
            }
            let total: u32 = usable.iter().map(|p| p.1).sum();
            for (v, n) in b.shares() {
                let w = some.iter().find(|p| p.0 == v).unwrap().1;
                let exact = w as f64 * BUCKETS as f64 / total as f64;
                prop_assert!((n as f64 - exact).abs() <= 2.0 + usable.len() as f64 / 2.0, "{} buckets for exact {}", n, exact);
            }
        }
    }
}
