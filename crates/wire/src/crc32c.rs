//! CRC32c (Castagnoli, polynomial 0x1EDC6F41, reflected), the checksum of SCTP
//! (RFC 9260 §6.8 and Appendix A). The one implementation in the workspace: SCTP's
//! header view fills and verifies with it, the load balancer recomputes it after
//! rewriting SCTP ports.
//!
//! Where the build has SSE4.2 (x86-64-v3, as `.cargo/config.toml` sets), the CPU's
//! `crc32` instruction does eight bytes a step; elsewhere a table-driven software loop
//! ("slicing by 8"). Both give the same value (`hardware_and_software_agree`).

/// The table for one byte at a time (index: the low byte of the state).
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse4.2"), allow(dead_code))]
const fn byte_table() -> [u32; 256] {
    // The reflected polynomial.
    const POLY: u32 = 0x82f6_3b78;
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// Slicing-by-8 tables: `TABLES[k][b]` is byte `b` followed by `k` zero bytes.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse4.2"), allow(dead_code))]
const fn tables() -> [[u32; 256]; 8] {
    let t0 = byte_table();
    let mut t = [[0u32; 256]; 8];
    t[0] = t0;
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t0[(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse4.2"), allow(dead_code))]
static TABLES: [[u32; 256]; 8] = tables();

/// The raw state after `data`, from `state` (no inversion before or after).
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse4.2"), allow(dead_code))]
fn update_software(mut state: u32, data: &[u8]) -> u32 {
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ state;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        state = TABLES[7][(lo & 0xff) as usize]
            ^ TABLES[6][((lo >> 8) & 0xff) as usize]
            ^ TABLES[5][((lo >> 16) & 0xff) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][(hi & 0xff) as usize]
            ^ TABLES[2][((hi >> 8) & 0xff) as usize]
            ^ TABLES[1][((hi >> 16) & 0xff) as usize]
            ^ TABLES[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        state = (state >> 8) ^ TABLES[0][((state ^ b as u32) & 0xff) as usize];
    }
    state
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse4.2"))]
fn update_hardware(state: u32, data: &[u8]) -> u32 {
    use core::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut s = state as u64;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let v = u64::from_le_bytes(w.try_into().expect("chunks of 8"));
        #[allow(unsafe_code)]
        // SAFETY: the build enables SSE4.2 (the cfg above), so the instruction exists.
        unsafe {
            s = _mm_crc32_u64(s, v);
        }
    }
    let mut s = s as u32;
    for &b in words.remainder() {
        #[allow(unsafe_code)]
        // SAFETY: as above.
        unsafe {
            s = _mm_crc32_u8(s, b);
        }
    }
    s
}

/// The raw CRC32c state after `data` (no inversion before or after): for checksums over
/// several pieces, `!update(update(!0, a), b)` is the CRC of `a` then `b`.
#[inline]
pub fn update(state: u32, data: &[u8]) -> u32 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse4.2"))]
    {
        update_hardware(state, data)
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse4.2")))]
    {
        update_software(state, data)
    }
}

/// The CRC32c of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    !update(!0, data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The check value of the CRC catalogue, and RFC 3720 §B.4's examples (iSCSI uses
    /// the same CRC; its values are given as they go on the wire, least significant
    /// byte first, as SCTP's too).
    #[test]
    fn known_values() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0u8; 32]).to_le_bytes(), [0xaa, 0x36, 0x91, 0x8a]);
        assert_eq!(crc32c(&[0xffu8; 32]).to_le_bytes(), [0x43, 0xab, 0xa8, 0x62]);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&inc).to_le_bytes(), [0x4e, 0x79, 0xdd, 0x46]);
        assert_eq!(crc32c(&[]), 0);
    }

    proptest! {
        #[test]
        fn hardware_and_software_agree(data in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..300) {
            let want = !update_software(!0, &data);
            prop_assert_eq!(crc32c(&data), want);
            // In pieces, as one.
            let cut = cut.min(data.len());
            prop_assert_eq!(!update(update(!0, &data[..cut]), &data[cut..]), want);
            // Bit by bit, the definition.
            let mut c = !0u32;
            for &b in &data {
                c ^= b as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 { (c >> 1) ^ 0x82f6_3b78 } else { c >> 1 };
                }
            }
            prop_assert_eq!(!c, want);
        }
    }
}
