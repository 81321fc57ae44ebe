//! The Internet checksum: full computation (RFC 1071) and incremental update (RFC 1624).
//!
//! The sum is accumulated over *native-endian* 16-bit words, which RFC 1071 §2(B) shows
//! is byte-order independent up to a final byte swap; this lets the inner loop add whole
//! 32-bit words into 64-bit lanes with no shuffles, which LLVM vectorises. The AVX-512 or
//! AVX2 build of the same loop is chosen at run time when the CPU has it (measured in
//! `benches/wire.rs`, reported in `docs/PERFORMANCE.md`).

use core::net::{Ipv4Addr, Ipv6Addr};

/// A running one's-complement sum. Add bytes and fields in any order (each `add_bytes`
/// run must start at an even offset of the checksummed data, which holds for every
/// header and payload boundary in IP), then `finish`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checksum {
    /// Sum of native-endian words; never folded until `fold`.
    acc: u64,
}

impl Checksum {
    pub const fn new() -> Self {
        Checksum { acc: 0 }
    }

    /// Add a run of bytes. An odd trailing byte is padded with zero, as the RFC says for
    /// the end of the data; so only the last run may have odd length.
    #[inline]
    pub fn add_bytes(&mut self, data: &[u8]) -> &mut Self {
        self.acc = add_carry(self.acc, sum_native(data));
        self
    }

    /// Copy `src` into `dst` (same length) and add `src`'s bytes, in one pass: each block
    /// is summed while it is in registers for the copy, so a copy that must also be
    /// checked (a parcel segment into its datagram) reads its source once. Same rules as
    /// `add_bytes` (even start; only the last run may be odd).
    #[inline]
    pub fn add_copied(&mut self, dst: &mut [u8], src: &[u8]) -> &mut Self {
        self.acc = add_carry(self.acc, copy_sum_native(dst, src));
        self
    }

    /// Add a fixed-size run of bytes (a header, an address): summed inline word by word,
    /// with no call and no length-generic loop. `N` must be a multiple of 4.
    #[inline(always)]
    pub fn add_array<const N: usize>(&mut self, d: &[u8; N]) -> &mut Self {
        const { assert!(N % 4 == 0, "add_array takes whole 32-bit words") };
        let mut s = 0u64;
        let mut i = 0;
        while i < N {
            s += u32::from_ne_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]) as u64;
            i += 4;
        }
        self.acc = add_carry(self.acc, s);
        self
    }

    /// Add one 16-bit field given as its host value (as read big-endian from the wire).
    #[inline(always)]
    pub fn add_u16(&mut self, v: u16) -> &mut Self {
        self.acc += u16::from_ne_bytes(v.to_be_bytes()) as u64;
        self
    }

    #[inline(always)]
    pub fn add_u32(&mut self, v: u32) -> &mut Self {
        self.acc += u32::from_ne_bytes(v.to_be_bytes()) as u64;
        self
    }

    /// Add another partial sum (e.g. a pseudo-header).
    #[inline(always)]
    pub fn add(&mut self, other: Checksum) -> &mut Self {
        self.acc = add_carry(self.acc, other.acc);
        self
    }

    /// The folded 16-bit one's-complement sum, as a host value of the big-endian field.
    #[inline(always)]
    pub fn fold(self) -> u16 {
        let mut s = self.acc;
        s = (s & 0xffff_ffff) + (s >> 32);
        s = (s & 0xffff_ffff) + (s >> 32);
        s = (s & 0xffff) + (s >> 16);
        s = (s & 0xffff) + (s >> 16);
        s = (s & 0xffff) + (s >> 16);
        u16::from_be(s as u16)
    }

    /// The checksum field value: the complement of the folded sum.
    #[inline(always)]
    pub fn finish(self) -> u16 {
        !self.fold()
    }
}

#[inline(always)]
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, c) = a.overflowing_add(b);
    s + c as u64
}

/// Checksum field value for `data` alone (e.g. an IPv4 header with its checksum zeroed).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    Checksum::new().add_bytes(data).finish()
}

/// True when `data`, which contains its own checksum field, sums to all ones.
#[inline]
pub fn verify(data: &[u8]) -> bool {
    Checksum::new().add_bytes(data).fold() == 0xffff
}

/// Completes a partial L4 checksum, as a device does for a packet handed over with
/// `NEEDS_CSUM`: the field at `start + offset` holds the pseudo-header sum (not
/// complemented); the checksum of `data[start..]` replaces it. A result of zero is sent
/// as all ones (for UDP zero means "no checksum"; for TCP the two are equivalent).
/// Returns false, changing nothing, when the field lies outside `data`.
pub fn complete_partial(data: &mut [u8], start: usize, offset: usize) -> bool {
    let field = start + offset;
    if field + 2 > data.len() {
        return false;
    }
    let c = match checksum(&data[start..]) {
        0 => 0xffff,
        c => c,
    };
    data[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// `verify` for an option-less IPv4 header, summed inline as two 64-bit words and a
/// 32-bit one (2^64, like 2^16, is 1 modulo 0xffff, so the carries out of the word
/// fold back in as ones), for the fast paths that check one per packet (a call and a
/// length-generic loop cost more than the sum).
/// Without the fold: a one's-complement sum is 0xffff exactly when the plain sum of the
/// words is a non-zero multiple of 0xffff (2^16 ≡ 1 modulo 0xffff, so every way of
/// cutting the bytes into words, either byte order included, keeps the residue's zero),
/// and divisibility by an odd constant is one multiply by its inverse modulo 2^64 and a
/// comparison (a multiple of d times the inverse is the quotient, at most (2^64 - 1) / d;
/// anything else lands above), where the fold is a chain of dependent adds. Written out,
/// since the compiler makes that of `% 0xffff == 0` in some call sites and a remainder of
/// twice the instructions in others.
#[inline(always)]
pub fn verify_ipv4_header(h: &[u8; 20]) -> bool {
    let w = |i: usize| u64::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3], h[i + 4], h[i + 5], h[i + 6], h[i + 7]]);
    let c = u32::from_ne_bytes([h[16], h[17], h[18], h[19]]) as u64;
    let acc = w(0) as u128 + w(8) as u128 + c as u128;
    // 2^64 is 1 modulo 0xffff: the carries count as ones.
    let (lo, carry) = (acc as u64).overflowing_add((acc >> 64) as u64);
    let acc = lo + carry as u64;
    acc != 0 && multiple_of_ffff(acc)
}

/// [`verify_ipv4_header`] for a header with options, `N` bytes (a multiple of 4, at most
/// 60): its 32-bit words summed in 64 bits (fifteen cannot carry out), then the same
/// test. For headers of a fixed size a node checks per packet (an IP parcel's 28 bytes),
/// where [`verify`]'s length-generic loop costs several times the sum.
#[inline(always)]
pub fn verify_ipv4_header_words<const N: usize>(h: &[u8; N]) -> bool {
    const { assert!(N % 4 == 0 && N <= 60) };
    // An index loop of constant bounds, unrolled whole (an iterator chain was left a
    // call of its own).
    let mut acc = 0u64;
    let mut i = 0;
    while i < N {
        acc += u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u64;
        i += 4;
    }
    acc != 0 && multiple_of_ffff(acc)
}

/// `n % 0xffff == 0`, by the inverse.
#[inline(always)]
fn multiple_of_ffff(n: u64) -> bool {
    /// 0xffff's inverse modulo 2^64: 0xffff * INV wraps to 1.
    const INV: u64 = 0xfffe_fffe_fffe_ffff;
    n.wrapping_mul(INV) <= u64::MAX / 0xffff
}

/// The IPv4 pseudo-header of RFC 768/793: addresses, protocol and upper-layer length.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> Checksum {
    let mut c = Checksum::new();
    c.add_u32(u32::from(src)).add_u32(u32::from(dst)).add_u16(protocol as u16).add_u16(length);
    c
}

/// The IPv6 pseudo-header of RFC 8200 §8.1 (the 32-bit length covers jumbograms).
#[inline]
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, length: u32) -> Checksum {
    let mut c = Checksum::new();
    c.add_array(&src.octets()).add_array(&dst.octets()).add_u32(length).add_u32(next_header as u32);
    c
}

/// RFC 1624 eqn. 3: the new checksum field after one 16-bit word changed from `old` to
/// `new`. Eqn. 3 (not eqn. 2) is the form that cannot turn a valid field into -0.
#[inline(always)]
pub fn update16(field: u16, old: u16, new: u16) -> u16 {
    let mut s = (!field) as u32 + (!old) as u32 + new as u32;
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

/// RFC 1624 for a 32-bit field (two words).
#[inline(always)]
pub fn update32(field: u16, old: u32, new: u32) -> u16 {
    let mut s = (!field) as u64 + (!(old >> 16) & 0xffff) as u64 + (!old & 0xffff) as u64 + (new >> 16) as u64 + (new & 0xffff) as u64;
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

/// Sum of native-endian words of `data`, not folded, odd tail byte zero-padded.
#[inline]
fn sum_native(data: &[u8]) -> u64 {
    // Headers (≤ 64 bytes): plain 32-bit words, no vector lanes to set up and reduce.
    if data.len() <= 64 {
        return sum_native_short(data);
    }
    if data.len() >= 256 {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512bw") {
                #[allow(unsafe_code)]
                // SAFETY: `sum_native_avx512` only requires AVX-512F/BW, which the CPU's
                // own feature report (cached by std) just confirmed.
                return unsafe { sum_native_avx512(data) };
            }
            if std::is_x86_feature_detected!("avx2") {
                #[allow(unsafe_code)]
                // SAFETY: `sum_native_avx2` only requires AVX2, confirmed just above.
                return unsafe { sum_native_avx2(data) };
            }
        }
    }
    sum_native_portable(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn sum_native_avx512(data: &[u8]) -> u64 {
    let whole = data.len() & !63;
    add_carry(blocks_avx512::<false>(&mut [], &data[..whole]), sum_native_short(&data[whole..]))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_native_avx2(data: &[u8]) -> u64 {
    let whole = data.len() & !63;
    add_carry(blocks_avx2::<false>(&mut [], &data[..whole]), sum_native_short(&data[whole..]))
}

#[inline(always)]
fn sum_native_short(data: &[u8]) -> u64 {
    let mut total: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        total += u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    // The odd tail, zero-padded without a variable-length copy (a `memcpy` call).
    let last = match *words.remainder() {
        [a] => [a, 0, 0, 0],
        [a, b] => [a, b, 0, 0],
        [a, b, c] => [a, b, c, 0],
        _ => [0; 4],
    };
    total + u32::from_ne_bytes(last) as u64
}

fn sum_native_portable(data: &[u8]) -> u64 {
    sum_native_body(data)
}

/// The whole blocks by `sum_blocks`, then the tail word by word.
#[inline(always)]
fn sum_native_body(data: &[u8]) -> u64 {
    let mut blocks = data.chunks_exact(64);
    let mut total = sum_blocks(&mut blocks, |_| {});
    let rest = blocks.remainder();
    let mut words = rest.chunks_exact(4);
    for w in &mut words {
        total = add_carry(total, u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as u64);
    }
    let tail = words.remainder();
    let mut last = [0u8; 4];
    last[..tail.len()].copy_from_slice(tail);
    add_carry(total, u32::from_ne_bytes(last) as u64)
}

/// `dst.copy_from_slice(src)` and `sum_native(src)` in one pass, the vector build chosen
/// as `sum_native` chooses it.
#[inline]
fn copy_sum_native(dst: &mut [u8], src: &[u8]) -> u64 {
    assert_eq!(dst.len(), src.len(), "add_copied: source and destination lengths differ");
    if src.len() >= 256 {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512bw") {
                #[allow(unsafe_code)]
                // SAFETY: `copy_sum_native_avx512` only requires AVX-512F/BW, which the
                // CPU's own feature report (cached by std) just confirmed.
                return unsafe { copy_sum_native_avx512(dst, src) };
            }
            if std::is_x86_feature_detected!("avx2") {
                #[allow(unsafe_code)]
                // SAFETY: `copy_sum_native_avx2` only requires AVX2, confirmed just above.
                return unsafe { copy_sum_native_avx2(dst, src) };
            }
        }
    }
    copy_sum_native_body(dst, src)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn copy_sum_native_avx512(dst: &mut [u8], src: &[u8]) -> u64 {
    let whole = src.len() & !63;
    let (dst_blocks, dst_rest) = dst.split_at_mut(whole);
    let total = blocks_avx512::<true>(dst_blocks, &src[..whole]);
    let rest = &src[whole..];
    dst_rest.copy_from_slice(rest);
    add_carry(total, sum_native_short(rest))
}

/// The sum of native 16-bit words of `src`, whole 64-byte blocks only, each block also
/// stored to `dst` with `COPY` (`dst` as long as `src`). Written with the intrinsics
/// because LLVM compiles `sum_blocks`' AND/shift/add for AVX-512 into `vpermw` and
/// `vpmovzxwd` (four shuffles a block, on Zen 4's shuffle ports), which made the fused
/// check cost the split a third of its copy. Here a block is one XOR and one
/// `vpmaddwd`: each word biased by 0x8000 becomes a signed word `w - 32768`, a pair of
/// them is added into a 32-bit lane, and the bias is added back per block at the end.
/// A lane moves by at most 2^16 a block, so blocks are reduced into the 64-bit total
/// every `FOLD` blocks (2^30 at most per lane, within `i32`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn blocks_avx512<const COPY: bool>(dst: &mut [u8], src: &[u8]) -> u64 {
    use core::arch::x86_64::*;
    const FOLD: usize = 16_384;
    let n = src.len() / 64;
    assert!(!COPY || dst.len() == src.len(), "add_copied: source and destination lengths differ");
    let bias = _mm512_set1_epi16(i16::MIN);
    let ones = _mm512_set1_epi16(1);
    let mut total: i64 = 0;
    let mut i = 0;
    while i < n {
        let end = n.min(i + FOLD);
        let mut lanes = _mm512_setzero_si512();
        while i < end {
            #[allow(unsafe_code)]
            // SAFETY: `i < n`, so the 64 bytes at `64 * i` lie inside `src` and (with
            // `COPY`, asserted the same length) inside `dst`; both accesses are unaligned
            // forms. The store is written as `asm!` because LLVM otherwise recognises the
            // load-store pair as a `memcpy` and hoists it into a call before the loop,
            // two passes over the data instead of one; the asm touches only those 64
            // bytes of `dst`, no stack and no flags.
            let v = unsafe {
                let v = _mm512_loadu_si512(src.as_ptr().add(64 * i).cast());
                if COPY {
                    core::arch::asm!(
                        "vmovdqu64 zmmword ptr [{p}], {v}",
                        p = in(reg) dst.as_mut_ptr().add(64 * i),
                        v = in(zmm_reg) v,
                        options(nostack, preserves_flags),
                    );
                }
                v
            };
            lanes = _mm512_add_epi32(lanes, _mm512_madd_epi16(_mm512_xor_si512(v, bias), ones));
            i += 1;
        }
        let wide = _mm512_add_epi64(
            _mm512_cvtepi32_epi64(_mm512_castsi512_si256(lanes)),
            _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(lanes)),
        );
        total += _mm512_reduce_add_epi64(wide);
    }
    // 32 words a block, each 32768 short of its unsigned value.
    (total + (n as i64) * 32 * 32_768) as u64
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn copy_sum_native_avx2(dst: &mut [u8], src: &[u8]) -> u64 {
    let whole = src.len() & !63;
    let (dst_blocks, dst_rest) = dst.split_at_mut(whole);
    let total = blocks_avx2::<true>(dst_blocks, &src[..whole]);
    let rest = &src[whole..];
    dst_rest.copy_from_slice(rest);
    add_carry(total, sum_native_short(rest))
}

/// `blocks_avx512`'s kernel in 256-bit lanes, for CPUs with AVX2 and no AVX-512: LLVM
/// compiles `sum_blocks` for AVX2 into four `vpshufb`, two unpacks and two `vpmovzxwd`
/// a 64-byte block (about 20 instructions, most on the shuffle ports), which made a
/// segment's check cost `parcel4-split` 176 cycles a 1280-byte segment on a 1.996 GHz
/// EPYC (docs/PERFORMANCE.md). Here a block is two loads, two XORs (each word biased
/// by 0x8000), two `vpmaddwd` against ones and two adds, into two accumulators; the
/// bias is added back at the end. A lane moves by at most 2^16 a block, so the lanes
/// are reduced into the 64-bit total every `FOLD` blocks (2^30 at most, within `i32`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn blocks_avx2<const COPY: bool>(dst: &mut [u8], src: &[u8]) -> u64 {
    use core::arch::x86_64::*;
    const FOLD: usize = 16_384;
    let n = src.len() / 64;
    assert!(!COPY || dst.len() == src.len(), "add_copied: source and destination lengths differ");
    let bias = _mm256_set1_epi16(i16::MIN);
    let ones = _mm256_set1_epi16(1);
    let mut total: i64 = 0;
    let mut i = 0;
    while i < n {
        let end = n.min(i + FOLD);
        let mut lo = _mm256_setzero_si256();
        let mut hi = _mm256_setzero_si256();
        while i < end {
            #[allow(unsafe_code)]
            // SAFETY: `i < n`, so the 64 bytes at `64 * i` lie inside `src` and (with
            // `COPY`, asserted the same length) inside `dst`; every access is an
            // unaligned form. The stores are `asm!` for the reason `blocks_avx512` gives
            // (LLVM would hoist the load-store pairs into a `memcpy` call, a second pass);
            // they touch only those 64 bytes of `dst`, no stack and no flags.
            let (a, b) = unsafe {
                let p = src.as_ptr().add(64 * i);
                let a = _mm256_loadu_si256(p.cast());
                let b = _mm256_loadu_si256(p.add(32).cast());
                if COPY {
                    core::arch::asm!(
                        "vmovdqu ymmword ptr [{p}], {a}",
                        "vmovdqu ymmword ptr [{p} + 32], {b}",
                        p = in(reg) dst.as_mut_ptr().add(64 * i),
                        a = in(ymm_reg) a,
                        b = in(ymm_reg) b,
                        options(nostack, preserves_flags),
                    );
                }
                (a, b)
            };
            lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_xor_si256(a, bias), ones));
            hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_xor_si256(b, bias), ones));
            i += 1;
        }
        let wide = |v: __m256i| {
            _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)), _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(v)))
        };
        let w = _mm256_add_epi64(wide(lo), wide(hi));
        let w = _mm_add_epi64(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        total += _mm_cvtsi128_si64(w) + _mm_extract_epi64::<1>(w);
    }
    // 32 words a block, each 32768 short of its unsigned value.
    (total + (n as i64) * 32 * 32_768) as u64
}

/// `sum_native_body`'s loop with each 64-byte block stored to `dst` as it is summed.
#[inline(always)]
fn copy_sum_native_body(dst: &mut [u8], src: &[u8]) -> u64 {
    let mut blocks = src.chunks_exact(64);
    let mut outs = dst.chunks_exact_mut(64);
    let total = sum_blocks(&mut blocks, |block| {
        if let Some(out) = outs.next() {
            out.copy_from_slice(block);
        }
    });
    let rest = blocks.remainder();
    outs.into_remainder().copy_from_slice(rest);
    add_carry(total, sum_native_short(rest))
}

/// The lanes of every whole 64-byte block of `blocks`, each block shown to `visit` as it
/// is summed (a copy rides along in the same pass); the remainder is the caller's.
/// Each native 32-bit word is split into its two 16-bit halves, added into 32-bit lanes:
/// AND, shift and add run on every vector ALU port, where widening 32→64-bit loads would
/// queue on the shuffle port. A lane gains < 2^17 per block, so blocks are folded into
/// the 64-bit total every `FOLD_EVERY` blocks, long before a lane can overflow.
#[inline(always)]
fn sum_blocks(blocks: &mut std::slice::ChunksExact<'_, u8>, mut visit: impl FnMut(&[u8; 64])) -> u64 {
    const FOLD_EVERY: usize = 16_384;
    let mut total: u64 = 0;
    loop {
        let mut lanes = [0u32; 16];
        let mut n = 0;
        for block in blocks.by_ref() {
            let block: &[u8; 64] = block.try_into().expect("chunks_exact(64)");
            visit(block);
            for (i, lane) in lanes.iter_mut().enumerate() {
                let w = u32::from_ne_bytes([block[4 * i], block[4 * i + 1], block[4 * i + 2], block[4 * i + 3]]);
                *lane += (w & 0xffff) + (w >> 16);
            }
            n += 1;
            if n == FOLD_EVERY {
                break;
            }
        }
        for lane in lanes {
            total += lane as u64;
        }
        if n < FOLD_EVERY {
            return total;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partial checksum completed as a device would equals the checksum computed over
    /// pseudo-header and segment in one go.
    #[test]
    fn complete_partial_equals_full_sum() {
        let src = Ipv4Addr::new(198, 18, 0, 2);
        let dst = Ipv4Addr::new(198, 18, 1, 2);
        let mut seg = vec![0x30, 0x39, 0x00, 0x35, 0x00, 0x0d, 0, 0, b'h', b'e', b'l', b'l', b'o'];
        let ph = pseudo_header_v4(src, dst, 17, seg.len() as u16);
        let full = Checksum::new().add(ph).add_bytes(&seg).finish();
        seg[6..8].copy_from_slice(&ph.fold().to_be_bytes());
        let mut frame = vec![0xaa; 20];
        frame.extend_from_slice(&seg);
        assert!(complete_partial(&mut frame, 20, 6));
        assert_eq!(u16::from_be_bytes([frame[26], frame[27]]), full);
        assert!(!complete_partial(&mut frame, 30, 6), "field beyond the data is refused");
    }

    /// Straight from the RFC's definition: big-endian 16-bit words, end-around carry.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for ch in data.chunks(2) {
            let w = if ch.len() == 2 { u16::from_be_bytes([ch[0], ch[1]]) } else { (ch[0] as u16) << 8 };
            s += w as u32;
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    /// The remainder test's edges: nothing summed (not a valid sum: the fold is 0), every
    /// bit set (the fold is 0xffff), a sum that wraps the fold several times.
    #[test]
    fn multiples_of_ffff_by_the_inverse() {
        assert_eq!(0xffffu64.wrapping_mul(0xfffe_fffe_fffe_ffff), 1);
        // Every multiple a five-word sum can reach, and its neighbours.
        for k in 0..=(5 * u32::MAX as u64) / 0xffff + 1 {
            let n = k * 0xffff;
            assert!(multiple_of_ffff(n), "{n}");
            assert!(!multiple_of_ffff(n + 1) && (n == 0 || !multiple_of_ffff(n - 1)), "{n}");
        }
        // 2^64 - 1 is itself a multiple (of 2^16 - 1).
        assert!(multiple_of_ffff(u64::MAX) && !multiple_of_ffff(u64::MAX - 1));
    }

    #[test]
    fn ipv4_header_check_edges() {
        for h in [[0u8; 20], [0xff; 20], [0xfe; 20], [0x01; 20]] {
            assert_eq!(verify_ipv4_header(&h), verify(&h), "{h:?}");
        }
        assert!(verify_ipv4_header(&[0xff; 20]) && !verify_ipv4_header(&[0; 20]));
        for h in [[0u8; 28], [0xff; 28], [0xfe; 28], [0x01; 28]] {
            assert_eq!(verify_ipv4_header_words(&h), verify(&h), "{h:?}");
        }
    }

    proptest::proptest! {
        /// The inline IPv4 header check agrees with the general one, for any 20 bytes
        /// and for those bytes with their checksum filled in.
        #[test]
        fn ipv4_header_fast_check_agrees(mut h in proptest::array::uniform20(proptest::prelude::any::<u8>())) {
            proptest::prop_assert_eq!(verify_ipv4_header(&h), verify(&h));
            h[10] = 0;
            h[11] = 0;
            let c = reference(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            proptest::prop_assert!(verify_ipv4_header(&h));
        }

        /// The fixed-size check of a header with options agrees with the general one, for
        /// any 28 or 40 bytes and for those bytes with their checksum filled in.
        #[test]
        fn ipv4_header_words_check_agrees(mut h in proptest::collection::vec(proptest::prelude::any::<u8>(), 40)) {
            let words = |h: &[u8]| match h.len() {
                28 => verify_ipv4_header_words::<28>(h.try_into().unwrap()),
                _ => verify_ipv4_header_words::<40>(h.try_into().unwrap()),
            };
            for n in [28, 40] {
                proptest::prop_assert_eq!(words(&h[..n]), verify(&h[..n]));
                h[10] = 0;
                h[11] = 0;
                let c = reference(&h[..n]);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                proptest::prop_assert!(words(&h[..n]));
            }
        }

        /// Short inputs of every length (the odd-tail cases) match the RFC definition.
        #[test]
        fn short_lengths_match_reference(d in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..70)) {
            proptest::prop_assert_eq!(checksum(&d), reference(&d));
        }
    }

    proptest::proptest! {
        /// The fused copy-and-sum copies exactly and sums as `add_bytes` does, at every
        /// length and in pieces (the even-start rule), across the vector builds' cut-offs.
        #[test]
        fn add_copied_is_copy_then_add_bytes(
            d in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000),
            cut in 0usize..3000,
        ) {
            let cut = (cut.min(d.len())) & !1;
            let mut out = vec![0u8; d.len()];
            let mut c = Checksum::new();
            c.add_copied(&mut out[..cut], &d[..cut]).add_copied(&mut out[cut..], &d[cut..]);
            proptest::prop_assert_eq!(&out, &d);
            proptest::prop_assert_eq!(c.finish(), reference(&d));
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example bytes: sum is 0xddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Checksum::new().add_bytes(&bytes).fold(), 0xddf2);
    }

    #[test]
    fn matches_reference_all_lengths() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for len in (0..300).chain([1499, 1500, 1501, 2047, 2048, 3000]) {
            assert_eq!(checksum(&data[..len]), reference(&data[..len]), "len {len}");
            assert_eq!(sum_native_portable(&data[..len]) % 0xffff, sum_native(&data[..len]) % 0xffff);
        }
    }

    /// The AVX2 kernels against the portable sum and a plain copy, at every length
    /// around the block and vector cut-offs, with every word at its extremes and a
    /// pattern: tested on any CPU with AVX2, also one whose `sum_native` picks AVX-512.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_kernels_match_the_portable_sum() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let pattern: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for data in [vec![0xffu8; 5000], vec![0u8; 5000], vec![0x80u8; 5000], vec![0x7fu8; 5000], pattern] {
            for len in (0..400).chain([1279, 1280, 1281, 1500, 2047, 2048, 4000, 5000]) {
                let d = &data[..len];
                let want = sum_native_portable(d) % 0xffff;
                #[allow(unsafe_code)]
                // SAFETY: AVX2 is present (checked above).
                let (sum, copied) = unsafe {
                    let mut out = vec![0u8; len];
                    (sum_native_avx2(d), (copy_sum_native_avx2(&mut out, d), out))
                };
                assert_eq!(sum % 0xffff, want, "sum, len {len}");
                assert_eq!(copied.0 % 0xffff, want, "copy and sum, len {len}");
                assert!(copied.1 == d, "copy, len {len}");
            }
        }
    }

    #[test]
    fn all_ones_data_does_not_lose_carries() {
        let data = vec![0xffu8; 70_000];
        assert_eq!(checksum(&data), reference(&data));
    }

    /// Longer than the vector builds' fold interval (1 MiB of blocks): every lane at its
    /// largest (all ones) and smallest (all zeros) partial sum, and a pattern, summed and
    /// copied-and-summed, against the RFC definition.
    #[test]
    fn sums_past_the_fold_interval() {
        let len = (1 << 20) + 64 * 3 + 7;
        let pattern: Vec<u8> = (0..len as u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
        for data in [vec![0xffu8; len], vec![0u8; len], pattern] {
            assert_eq!(checksum(&data), reference(&data));
            let mut out = vec![0u8; len];
            assert_eq!(Checksum::new().add_copied(&mut out, &data).finish(), reference(&data));
            assert!(out == data);
        }
    }

    #[test]
    fn verify_accepts_filled_header() {
        // A real IPv4 header (checksum 0xb861 from the classic example).
        let mut h = [0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7];
        let c = checksum(&h);
        assert_eq!(c, 0xb861);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(verify(&h));
        h[3] ^= 1;
        assert!(!verify(&h));
    }

    #[test]
    fn incremental_matches_full() {
        let mut h = [0x45u8, 0, 0, 0x54, 0x12, 0x34, 0x40, 0, 0x40, 0x01, 0, 0, 198, 18, 0, 1, 198, 19, 7, 9];
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        for ttl in (1..=64u8).rev() {
            let old = u16::from_be_bytes([h[8], h[9]]);
            h[8] = ttl - 1;
            let new = u16::from_be_bytes([h[8], h[9]]);
            let field = u16::from_be_bytes([h[10], h[11]]);
            let upd = update16(field, old, new);
            h[10..12].copy_from_slice(&upd.to_be_bytes());
            assert!(verify(&h), "ttl {ttl}");
        }
        let old = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        let new: u32 = 0xc6130203;
        h[12..16].copy_from_slice(&new.to_be_bytes());
        let upd = update32(u16::from_be_bytes([h[10], h[11]]), old, new);
        h[10..12].copy_from_slice(&upd.to_be_bytes());
        assert!(verify(&h));
    }
}
