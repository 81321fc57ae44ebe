//! Flow hashing: a fast, well-mixed 32-bit hash of a few words, for RSS/ECMP source
//! ports and worker handoff. Protocol nodes pick the words (addresses, ports); this
//! only mixes them.

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
