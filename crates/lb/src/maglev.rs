//! Maglev consistent hashing (Eisenbud et al., NSDI 2016, §3.4) as a pure function:
//! backends and weights in, a lookup table out. Each backend walks its own permutation
//! of the table's slots (an offset and a skip from two hashes of its identity) and
//! claims the next free slot in turn, so every backend owns an even share of the table,
//! and a backend that leaves frees only its own slots, which the others refill: a flow
//! hashed to a surviving backend's slot stays there (a small fraction of slots change
//! hands in the refill, the paper's "disruption" — measured in the tests below).
//!
//! Weights: in each round a backend takes `weight / max_weight` of a turn, carried as
//! credit, so shares follow weights (the scheme Katran's second table generator uses,
//! written here from the idea).
//!
//! The table size must be prime (the permutation needs a skip coprime with it) and at
//! least 100× the backends for an even spread; [`table_size_for`] picks one.

use engine::hash::{finish, mix};

/// The default table size, prime: enough for 100 backends at 100 slots each.
pub const DEFAULT_TABLE_SIZE: u32 = 16_381;
/// Table sizes chosen when none is configured: primes just below powers of two, so that
/// a service's table changes size (and every slot its owner) only when its backends
/// quadruple past 10, not at every addition; small services keep small tables (4 KiB
/// for 10 backends, where one size for all would cost 10 000 services 640 MB).
pub const SIZE_CLASSES: [u32; 6] = [1021, 4093, 16_381, 65_521, 262_139, MAX_TABLE_SIZE];
/// The largest table size accepted (prime): 100 slots for each of ~10 000 backends.
pub const MAX_TABLE_SIZE: u32 = 1_048_573;
/// Slots per backend the table must at least have.
pub const MIN_SLOTS_PER_BACKEND: u32 = 100;

/// A backend as Maglev sees it: an identity that fixes its permutation (the same
/// backend gets the same slots whatever its place in the list) and a weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaglevBackend {
    pub id: u64,
    pub weight: u32,
}

pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    if n % 2 == 0 {
        return n == 2;
    }
    let mut d = 3u32;
    while (d as u64) * (d as u64) <= n as u64 {
        if n % d == 0 {
            return false;
        }
        d += 2;
    }
    true
}

/// The smallest prime at or above `n` (`None` past `MAX_TABLE_SIZE`).
pub fn prime_at_least(n: u32) -> Option<u32> {
    (n.max(2)..=MAX_TABLE_SIZE).find(|&p| is_prime(p))
}

/// The table size for `backends` backends given a configured size (0 for none): the
/// configured one (validated elsewhere to be prime) if it has 100 slots per backend,
/// else the smallest prime that has; with none configured, the smallest of
/// [`SIZE_CLASSES`] that has.
pub fn table_size_for(backends: usize, configured: u32) -> u32 {
    let need = (backends as u64 * MIN_SLOTS_PER_BACKEND as u64).min(MAX_TABLE_SIZE as u64) as u32;
    if configured == 0 {
        return SIZE_CLASSES.into_iter().find(|&c| c >= need).unwrap_or(MAX_TABLE_SIZE);
    }
    if configured >= need {
        configured
    } else {
        prime_at_least(need).unwrap_or(MAX_TABLE_SIZE)
    }
}

/// The backend's (offset, skip) in a table of prime size `m`: two independent hashes.
fn permutation(id: u64, m: u32) -> (u32, u32) {
    let (lo, hi) = (id as u32, (id >> 32) as u32);
    let h1 = finish(mix(mix(0x5bd1_e995, lo), hi));
    let h2 = finish(mix(mix(0x2718_2818, hi), lo));
    (h1 % m, h2 % (m - 1) + 1)
}

/// The lookup table: `m` slots (prime, ≥ 2), each the index in `backends` of the backend
/// that owns it. Backends of weight 0 own no slots; with no backend of positive weight
/// the table is empty.
pub fn build(backends: &[MaglevBackend], m: u32) -> Vec<u32> {
    debug_assert!(is_prime(m));
    let max_w = backends.iter().map(|b| b.weight).max().unwrap_or(0);
    if max_w == 0 || m < 2 {
        return Vec::new();
    }
    let perm: Vec<(u32, u32)> = backends.iter().map(|b| permutation(b.id, m)).collect();
    // Turns are taken in the order of identities, not of the list: the fill's contested
    // slots go the same way however the caller ordered the backends.
    let mut order: Vec<usize> = (0..backends.len()).collect();
    order.sort_unstable_by_key(|&i| backends[i].id);
    // How far along its permutation each backend is, and its credit toward a turn.
    let mut next = vec![0u32; backends.len()];
    let mut credit = vec![0u64; backends.len()];
    let mut table = vec![u32::MAX; m as usize];
    let mut filled = 0u32;
    loop {
        for &i in &order {
            credit[i] += backends[i].weight as u64;
            while credit[i] >= max_w as u64 {
                credit[i] -= max_w as u64;
                let (offset, skip) = perm[i];
                // Walk the permutation to the first free slot; `next` never reaches `m`
                // before the table is full, as the permutation visits every slot.
                let slot = loop {
                    let c = ((offset as u64 + next[i] as u64 * skip as u64) % m as u64) as usize;
                    next[i] += 1;
                    if table[c] == u32::MAX {
                        break c;
                    }
                };
                table[slot] = i as u32;
                filled += 1;
                if filled == m {
                    return table;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::hash::{flow_hash2, reduce};

    fn backends(n: u64) -> Vec<MaglevBackend> {
        (0..n).map(|i| MaglevBackend { id: 0xc613_0100 + i * 7919, weight: 1 }).collect()
    }

    fn flow(i: u64) -> u32 {
        flow_hash2(0xc612_0000_0000_0000 | i << 16, (6 << 32) | (i & 0xffff) << 16 | 80)
    }

    #[test]
    fn primes() {
        assert!(is_prime(2) && is_prime(3) && is_prime(16_381) && is_prime(65_537) && is_prime(MAX_TABLE_SIZE));
        assert!(!is_prime(0) && !is_prime(1) && !is_prime(9) && !is_prime(65_535) && !is_prime(16_383));
        assert_eq!(prime_at_least(1000), Some(1009));
        assert_eq!(prime_at_least(MAX_TABLE_SIZE + 1), None);
        assert_eq!(table_size_for(10, DEFAULT_TABLE_SIZE), DEFAULT_TABLE_SIZE);
        assert_eq!(table_size_for(200, DEFAULT_TABLE_SIZE), 20_011);
        assert!(SIZE_CLASSES.iter().all(|&c| is_prime(c)));
        assert_eq!(table_size_for(10, 0), 1021);
        assert_eq!(table_size_for(11, 0), 4093);
        assert_eq!(table_size_for(200, 0), 65_521);
    }

    #[test]
    fn every_slot_owned_and_spread_evenly() {
        for n in [1u64, 2, 3, 10, 100] {
            let m = table_size_for(n as usize, 1009);
            let t = build(&backends(n), m);
            assert_eq!(t.len(), m as usize);
            let mut owned = vec![0u32; n as usize];
            t.iter().for_each(|&b| owned[b as usize] += 1);
            let mean = m / n as u32;
            // The paper's bound: a backend's share differs from the mean by at most one
            // slot per round of the fill; with one turn each per round, by one slot.
            assert!(owned.iter().all(|&c| c.abs_diff(mean) <= 1), "n {n}: {owned:?}");
        }
    }

    #[test]
    fn weights_set_the_shares() {
        let mut b = backends(3);
        b[0].weight = 1;
        b[1].weight = 2;
        b[2].weight = 5;
        let t = build(&b, 16_381);
        let mut owned = [0u32; 3];
        t.iter().for_each(|&i| owned[i as usize] += 1);
        let unit = 16_381.0 / 8.0;
        for (i, w) in [1.0, 2.0, 5.0].iter().enumerate() {
            let want = unit * w;
            assert!((owned[i] as f64 - want).abs() / want < 0.01, "{owned:?}");
        }
        b[0].weight = 0;
        assert!(build(&b, 1009).iter().all(|&i| i != 0));
        assert!(build(&[MaglevBackend { id: 1, weight: 0 }], 1009).is_empty());
    }

    #[test]
    fn the_table_follows_identities_not_list_order() {
        let b = backends(5);
        let mut r = b.clone();
        r.reverse();
        let (t, u) = (build(&b, 1009), build(&r, 1009));
        assert!(t.iter().zip(&u).all(|(&x, &y)| b[x as usize].id == r[y as usize].id));
    }

    /// Removing one of N backends: about 1/N of the flows move (those it had) and at
    /// most 1 % more (flows between survivors, the refill's disruption).
    #[test]
    fn removing_one_backend_moves_its_flows_and_few_others() {
        const FLOWS: u64 = 200_000;
        for n in [3u64, 10, 50] {
            let all = backends(n);
            let m = table_size_for(n as usize, DEFAULT_TABLE_SIZE);
            let before = build(&all, m);
            for gone in [0, n as usize / 2, n as usize - 1] {
                let rest: Vec<_> = all.iter().enumerate().filter(|&(i, _)| i != gone).map(|(_, b)| *b).collect();
                let after = build(&rest, m);
                let (mut moved, mut between_survivors) = (0u64, 0u64);
                for f in 0..FLOWS {
                    let s = reduce(flow(f), m) as usize;
                    let (x, y) = (all[before[s] as usize].id, rest[after[s] as usize].id);
                    if x != y {
                        moved += 1;
                        if x != all[gone].id {
                            between_survivors += 1;
                        }
                    }
                }
                let share = moved as f64 / FLOWS as f64;
                assert!(share <= 1.0 / n as f64 + 0.01, "n {n}: {share}");
                assert!(share >= 1.0 / n as f64 - 0.01, "n {n}: {share}");
                assert!((between_survivors as f64 / FLOWS as f64) <= 0.01, "n {n}: {between_survivors}");
            }
        }
    }

    /// Adding a backend takes about 1/(N+1) of the flows, all of them to itself bar 1 %.
    #[test]
    fn adding_one_backend_takes_its_share() {
        const FLOWS: u64 = 100_000;
        let all = backends(11);
        let m = DEFAULT_TABLE_SIZE;
        let (before, after) = (build(&all[..10], m), build(&all, m));
        let mut moved_elsewhere = 0;
        let mut to_new = 0;
        for f in 0..FLOWS {
            let s = reduce(flow(f), m) as usize;
            if after[s] == 10 {
                to_new += 1;
            } else if all[before[s] as usize].id != all[after[s] as usize].id {
                moved_elsewhere += 1;
            }
        }
        assert!((to_new as f64 / FLOWS as f64 - 1.0 / 11.0).abs() < 0.01, "{to_new}");
        assert!(moved_elsewhere as f64 / (FLOWS as f64) <= 0.01, "{moved_elsewhere}");
    }
}
