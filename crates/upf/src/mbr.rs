//! A QER's MBR as the policer divides by it: the rate in bytes per second and a
//! reciprocal of it, made when a session's rules are compiled (`session::compile`, then
//! [`crate::tables::Record::resolve`]), so that a packet's cost in clock ticks is a
//! multiplication and a shift instead of a 64-bit division ([`crate::context::Policer`]).

use std::num::NonZeroU64;

/// Numerators below `2^EXACT_BITS` divide exactly ([`Divisor::div_floor`]). A packet's
/// numerator is its bytes times the clock rate: 65 535 bytes at a 68 GHz clock stay
/// below it.
pub const EXACT_BITS: u32 = 52;

/// Division by a fixed `d ≥ 1` as a multiplication and a shift: `⌊n / d⌋ = ⌊n·c / 2^f⌋`
/// for every `n < 2^52`, where `k = ⌈log2 d⌉`, `f = 52 + k` and `c = ⌈2^f / d⌉` (the
/// method of Granlund and Montgomery, "Division by invariant integers using
/// multiplication", 1994; the bound is the one Lemire, Kaser and Kurz prove in "Faster
/// remainder by direct computation", 2019, Theorem 1).
///
/// Why it is exact: write `c·d = 2^f + e`, where `0 ≤ e < d ≤ 2^k` since `c` is `2^f / d`
/// rounded up. Then `n·c / 2^f = n/d + n·e / (d·2^f)`, and `n·e < 2^52·2^k = 2^f`, so the
/// second term is below `1/d`. `n/d` is `⌊n/d⌋` plus at most `(d−1)/d`: adding less than
/// `1/d` does not reach the next integer, and the floor is `⌊n/d⌋`. The proptests below
/// hold it to the division over every `d` and `n`'s whole range.
///
/// As computed: `n < 2^52`, so `n·2^12` is a word and `⌊n·c / 2^f⌋` is the high word of
/// `n·2^12 × c` shifted right by `k` (floors of floors by powers of two). `c` lies in
/// `[2^52, 2^53]`: the word holds `c` above 8 bits and `k` in them, at most 63 (`d` above
/// 2^63 has `k` = 64, and there both the quotient and the high word shifted by 63 are 0,
/// the high word being below 2^53). So a packet's division is a shift, a multiplication
/// and a shift by the word itself, and a [`crate::tables::Record`] keeps its 64 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divisor(u64);

impl Divisor {
    pub fn new(d: NonZeroU64) -> Divisor {
        let d = d.get();
        let k = u64::BITS - (d - 1).leading_zeros();
        let c = (1u128 << (EXACT_BITS + k)).div_ceil(u128::from(d));
        debug_assert!(c <= 1 << (EXACT_BITS + 1));
        Divisor((c as u64) << 8 | u64::from(k.min(63)))
    }

    /// `⌊n / d⌋`; `None` when `n ≥ 2^52`, where it is not known exact.
    #[inline(always)]
    pub fn div_floor(self, n: u64) -> Option<u64> {
        if n >> EXACT_BITS != 0 {
            return None;
        }
        Some(self.quotient(n))
    }

    /// `⌊n / d⌋` for `n < 2^52`. (The shift takes the low 6 bits of the word: `k`.)
    #[inline(always)]
    fn quotient(self, n: u64) -> u64 {
        let high = ((u128::from(n << (64 - EXACT_BITS)) * u128::from(self.0 >> 8)) >> 64) as u64;
        high.wrapping_shr(self.0 as u32)
    }

    /// `⌈x / d⌉`, for `x ≤ 2^52` (`⌊(x − 1) / d⌋ + 1`, 0 for 0); `None` above.
    #[inline(always)]
    pub fn div_ceil(self, x: u64) -> Option<u64> {
        let n = x.wrapping_sub(1);
        if n >> EXACT_BITS != 0 {
            return (x == 0).then_some(0);
        }
        Some(self.quotient(n) + 1)
    }
}

/// A QER direction's maximum bit rate, in bytes per second, with its [`Divisor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mbr {
    bytes_per_sec: u64,
    divisor: Divisor,
}

impl Mbr {
    /// An MBR of 0 polices as 1 byte per second (the bucket's minimum burst, then
    /// nothing).
    pub fn new(bytes_per_sec: u64) -> Mbr {
        let d = NonZeroU64::new(bytes_per_sec).unwrap_or(NonZeroU64::MIN);
        Mbr { bytes_per_sec, divisor: Divisor::new(d) }
    }

    /// What the QER says, bytes per second (0 as given).
    pub fn bytes_per_sec(&self) -> u64 {
        self.bytes_per_sec
    }

    /// What the policer divides by.
    pub fn divisor(&self) -> Divisor {
        self.divisor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(n: u64) -> Divisor {
        Divisor::new(NonZeroU64::new(n).unwrap())
    }

    const LIMIT: u64 = 1 << EXACT_BITS;

    /// The edges: divisors 1, powers of two and their neighbours, the largest; numerators
    /// 0, 1 and the last exact one, and multiples of the divisor and one either side.
    #[test]
    fn edges_divide_as_the_division() {
        let mut divisors = vec![1, 2, 3, 7, 10, 125, 1000, 30_000, u64::MAX, u64::MAX - 1, u64::MAX / 3];
        for k in 1..64 {
            divisors.extend([(1u64 << k) - 1, 1 << k, (1u64 << k) + 1]);
        }
        for &dv in &divisors {
            let r = d(dv);
            let mut ns = vec![0, 1, 2, LIMIT - 1, LIMIT - 2, LIMIT / 2];
            for m in [1u64, 2, 3, 1000, LIMIT / dv, (LIMIT / dv).saturating_sub(1)] {
                if let Some(x) = dv.checked_mul(m) {
                    ns.extend([x.wrapping_sub(1), x, x.wrapping_add(1)]);
                }
            }
            for n in ns.into_iter().filter(|&n| n < LIMIT) {
                assert_eq!(r.div_floor(n), Some(n / dv), "{n} / {dv}");
                assert_eq!(r.div_ceil(n), Some(n.div_ceil(dv)), "⌈{n} / {dv}⌉");
            }
            assert_eq!(r.div_ceil(LIMIT), Some(LIMIT.div_ceil(dv)), "⌈2^52 / {dv}⌉");
            assert_eq!(r.div_floor(LIMIT), None);
            assert_eq!(r.div_ceil(LIMIT + 1), None);
            assert_eq!(r.div_floor(u64::MAX), None);
        }
    }

    #[test]
    fn an_mbr_of_0_divides_as_1() {
        assert_eq!(Mbr::new(0).divisor(), d(1));
        assert_eq!(Mbr::new(0).bytes_per_sec(), 0);
        assert_eq!(Mbr::new(1250).divisor().div_ceil(2501), Some(3));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Any divisor (a u64's whole range, the PFCP MBR's kbit/s × 125 included) and any
        /// numerator below 2^52.
        #[test]
        fn divides_as_the_division(dv in 1..=u64::MAX, n in 0..LIMIT) {
            let r = d(dv);
            prop_assert_eq!(r.div_floor(n), Some(n / dv));
            prop_assert_eq!(r.div_ceil(n), Some(n.div_ceil(dv)));
        }

        /// Divisors of the MBRs a UPF sees (8 kbit/s .. 400 Gbit/s) against the policer's
        /// numerators: a packet's bytes (up to 65 535) times a clock of up to 68 GHz.
        #[test]
        fn policer_numerators_divide_as_the_division(dv in 1_000u64..50_000_000_000, bytes in 0u64..=65_535, hz in 1u64..(1 << 36)) {
            let r = d(dv);
            prop_assert_eq!(r.div_ceil(bytes * hz), Some((bytes * hz).div_ceil(dv)));
        }

        /// Small numerators against every divisor (the low end, where `c`'s rounding
        /// matters most relative to `n`).
        #[test]
        fn small_numerators_divide_as_the_division(dv in 1..=u64::MAX, n in 0u64..1 << 20) {
            prop_assert_eq!(d(dv).div_floor(n), Some(n / dv));
        }
    }
}
