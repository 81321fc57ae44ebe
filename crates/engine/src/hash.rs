//! Flow hashing: a fast, well-mixed 32-bit hash of a few words, for RSS/ECMP source
//! ports and worker handoff. Protocol nodes pick the words (addresses, ports); this
//! only mixes them.

/// Odd constants with no structure (hexadecimal digits of pi), one per multiply.
const K: [u64; 6] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7345,
    0xa409_3822_299f_31d1,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6d,
];

/// Multiply as 128 bits and fold the halves together: every input bit reaches the middle
/// of the product, so one multiply mixes two words (the step aHash's fallback and
/// wyhash are built on). A few cycles, where a MurmurHash3 word costs a chain of ten.
#[inline(always)]
pub fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128) * (b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Hash two words. Two independent multiplies (they run in parallel): one alone
/// collapses to 0 for every `b` when `a` equals its constant, two cannot both.
#[inline(always)]
pub fn hash_pair(a: u64, b: u64) -> u64 {
    fold_mul(a ^ K[0], b ^ K[1]) ^ fold_mul(a ^ K[2], b ^ K[3])
}

/// A flow hash of an IPv4 flow: both addresses as one word, protocol and ports as the
/// other (below 2^40). One 128-bit multiply mixes the two; a 64-bit one of the ports
/// word keeps flows apart when the address word cancels its constant (the 128-bit
/// product is then 0, whatever the ports). The ports operand never cancels: its constant
/// has bits above 2^40. Half the instructions of [`hash_pair`], on the path of every
/// encapsulated packet.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse4.2")))]
#[inline(always)]
pub fn flow_hash2(addrs: u64, proto_ports: u64) -> u32 {
    fold32(fold_mul(addrs ^ K[0], proto_ports ^ K[1]) ^ (proto_ports ^ K[3]).wrapping_mul(K[2]))
}

/// [`flow_hash2`] where the CPU has a CRC32C instruction (SSE4.2, in the x86-64-v3
/// this project builds for): two CRC steps, a third of the instructions of the
/// multiplies. CRC is linear, like the Toeplitz hash NICs use for RSS; spreading flows
/// over ports and workers needs no more (the spread tests below hold for both).
#[cfg(all(target_arch = "x86_64", target_feature = "sse4.2"))]
#[inline(always)]
pub fn flow_hash2(addrs: u64, proto_ports: u64) -> u32 {
    use core::arch::x86_64::_mm_crc32_u64;
    #[allow(unsafe_code)]
    // SAFETY: the build enables SSE4.2 (the cfg above), so the instruction exists.
    unsafe {
        _mm_crc32_u64(_mm_crc32_u64(K[0] as u32 as u64, addrs), proto_ports) as u32
    }
}

/// A flow hash of an IPv6 flow: each 128-bit address folded to a word first (the two
/// in parallel), then as [`flow_hash2`].
#[inline(always)]
pub fn flow_hash6(src: [u64; 2], dst: [u64; 2], proto_ports: u64) -> u32 {
    let s = fold_mul(src[0] ^ K[4], src[1] ^ K[1]);
    let d = fold_mul(dst[0] ^ K[5], dst[1] ^ K[3]);
    fold32(hash_pair(s, d ^ proto_ports))
}

#[inline(always)]
fn fold32(h: u64) -> u32 {
    (h ^ (h >> 32)) as u32
}

/// Map a 32-bit hash onto `0..n` by its high bits (a multiply and a shift; Lemire's
/// reduction), where `%` would cost a division of some 25 cycles per packet.
#[inline(always)]
pub fn reduce(h: u32, n: u32) -> u32 {
    ((h as u64 * n as u64) >> 32) as u32
}

/// Mix one 32-bit word into a running hash (the MurmurHash3 block step).
#[inline(always)]
pub fn mix(h: u32, w: u32) -> u32 {
    let k = w.wrapping_mul(0xcc9e_2d51).rotate_left(15).wrapping_mul(0x1b87_3593);
    (h ^ k).rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64)
}

/// Final avalanche (MurmurHash3 fmix32).
#[inline(always)]
pub fn finish(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// Hash a slice of words with a seed.
#[inline]
pub fn hash_words(seed: u32, words: &[u32]) -> u32 {
    let mut h = seed;
    for &w in words {
        h = mix(h, w);
    }
    finish(h ^ words.len() as u32)
}

/// A `std::hash::Hasher` over the same mixing, for hash maps keyed by a few addresses
/// and ports on the packet path (the default SipHash costs tens of cycles per lookup and
/// guards against flooding attacks these control-plane-built keys are not exposed to).
#[derive(Debug, Default, Clone, Copy)]
pub struct WordHasher(u32);

impl std::hash::Hasher for WordHasher {
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(4);
        for c in &mut chunks {
            self.0 = mix(self.0, u32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 4];
            w[..rest.len()].copy_from_slice(rest);
            self.0 = mix(self.0, u32::from_ne_bytes(w));
        }
    }
    #[inline(always)]
    fn write_u16(&mut self, v: u16) {
        self.0 = mix(self.0, v as u32);
    }
    #[inline(always)]
    fn write_u32(&mut self, v: u32) {
        self.0 = mix(self.0, v);
    }
    #[inline(always)]
    fn finish(&self) -> u64 {
        finish(self.0) as u64
    }
}

/// `HashMap<K, V, WordHashBuilder>`: a map hashed by [`WordHasher`].
pub type WordHashBuilder = std::hash::BuildHasherDefault<WordHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 000 flows into 16 buckets by `reduce`, no bucket 10 % off the mean: flows that
    /// differ only in the source port, only in the source address (IPv4 and IPv6), in
    /// both ports with the address word equal to the multiply's constant, and in the
    /// addresses near that constant.
    #[test]
    fn flow_hashes_spread_sequential_flows_evenly() {
        let check = |hashes: &mut dyn Iterator<Item = u32>| {
            let mut buckets = [0u32; 16];
            for h in hashes {
                buckets[reduce(h, 16) as usize] += 1;
            }
            let mean = 10_000 / 16;
            assert!(buckets.iter().all(|&b| b < mean * 11 / 10 && b > mean * 9 / 10), "{buckets:?}");
        };
        let addrs = 0xc612_0001_c613_0001u64;
        check(&mut (0..10_000u64).map(|p| flow_hash2(addrs, (17 << 32) | (p << 16) | 2152)));
        check(&mut (0..10_000u64).map(|a| flow_hash2(addrs + (a << 32), (17 << 32) | 2152 << 16 | 2152)));
        check(&mut (0..10_000u64).map(|p| flow_hash2(K[0], (6 << 32) | (p << 16) | p)));
        check(&mut (0..10_000u64).map(|a| flow_hash2(K[0] ^ (a << 40), (17 << 32) | 53)));
        let (s, d) = ([0x2001_0db8_0000_0001, 0], [0x2001_0db8_0000_0002, 1]);
        check(&mut (0..10_000u64).map(|p| flow_hash6(s, d, (17 << 32) | (p << 16) | 2152)));
        check(&mut (0..10_000u64).map(|a| flow_hash6([s[0], a], d, (17 << 32) | 53)));
        // The low bits spread too (some users mask rather than reduce).
        let mut low = [0u32; 16];
        (0..10_000u64).for_each(|p| low[(flow_hash2(addrs, p << 16) & 15) as usize] += 1);
        assert!(low.iter().all(|&b| b.abs_diff(625) < 63), "{low:?}");
    }

    #[test]
    fn reduce_maps_onto_the_range() {
        assert_eq!(reduce(0, 7), 0);
        assert_eq!(reduce(u32::MAX, 7), 6);
        assert_eq!(reduce(u32::MAX, 1), 0);
        assert_eq!(reduce(1 << 31, 16384), 8192);
    }

    #[test]
    fn spreads_sequential_flows_evenly() {
        // 10 000 flows differing only in the source port, into 16 buckets.
        let mut buckets = [0u32; 16];
        for port in 0..10_000u32 {
            let h = hash_words(0, &[0xc612_0001, 0xc613_0001, (port << 16) | 2152, 17]);
            buckets[(h % 16) as usize] += 1;
        }
        let mean = 10_000 / 16;
        for b in buckets {
            assert!(b < mean * 11 / 10 && b > mean * 9 / 10, "{buckets:?}");
        }
    }
}
