//! The tunnel hint: the outer headers of the tunnel whose packets a worker decapsulated
//! last, as a template `ethernet-input` tests each packet that passes its endpoint
//! filter against, before its other tests.
//!
//! A tunnel input node (`gueN-input`) publishes one when it plans its fast path for a
//! tunnel; a packet that matches it, and whose outer header passes `ipN-input`'s checks,
//! goes to that node with the hint's tag in `meta.param`, and the node takes its fast
//! path without testing the outer header again. A hint lives until the worker picks up
//! new tables ([`TunnelHints::forget`]), and a tag changes with every hint, so
//! a tag names one hint built from the tables the packet is processed under.

use crate::tables::UdpApp;
use std::num::NonZeroU32;

/// A test of a packet's first bytes against a fixed header.
pub trait HeadMatch: Copy + Send + 'static {
    /// How many bytes of the packet it compares: shorter packets never match.
    const LEN: usize;
    fn matches(&self, b: &[u8]) -> bool;
    /// This test with `bytes` at `at` fixed too (within the first `LEN` bytes).
    fn with(self, at: usize, bytes: &[u8]) -> Self;
}

/// A tunnel's fixed outer header as a fast path compares it: the packet's first `8 * W`
/// bytes, read as words, equal `want` wherever `mask` is set. A few word comparisons
/// stand for the tests of version and header length, protocol, fragment, both
/// addresses, the port and the UDP checksum, byte by byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadTemplate<const W: usize> {
    want: [u64; W],
    mask: [u64; W],
}

impl<const W: usize> HeadTemplate<W> {
    /// From (offset, bytes, mask of those bytes) fields inside the `8 * W` bytes (`W` at
    /// most 8). Built on the packet path (a plan per vector), so on the stack.
    pub fn new(fields: &[(usize, &[u8], &[u8])]) -> Self {
        let (mut want, mut mask) = ([0u8; 64], [0u8; 64]);
        for (at, bytes, m) in fields {
            debug_assert_eq!(bytes.len(), m.len(), "a template field's bytes and mask");
            for (i, (b, m)) in bytes.iter().zip(m.iter()).enumerate() {
                want[at + i] = b & m;
                mask[at + i] = *m;
            }
        }
        let words = |v: &[u8; 64]| {
            let (w, _) = v.as_chunks::<8>();
            std::array::from_fn(|i| u64::from_ne_bytes(w[i]))
        };
        HeadTemplate { want: words(&want), mask: words(&mask) }
    }
}

impl<const W: usize> HeadMatch for HeadTemplate<W> {
    const LEN: usize = 8 * W;
    #[inline(always)]
    fn matches(&self, b: &[u8]) -> bool {
        let Some((words, _)) = b.get(..Self::LEN).map(|h| h.as_chunks::<8>()) else { return false };
        let mut diff = 0;
        for ((w, want), mask) in words.iter().zip(&self.want).zip(&self.mask) {
            diff |= (u64::from_ne_bytes(*w) ^ want) & mask;
        }
        diff == 0
    }

    fn with(self, at: usize, bytes: &[u8]) -> Self {
        let (mut want, mut mask) = (self.want, self.mask);
        for (i, b) in bytes.iter().enumerate() {
            let (w, shift) = ((at + i) / 8, 8 * ((at + i) % 8));
            // Words are read native-endian: byte k of a word is bits 8k.. on little-endian
            // machines, bits 56 - 8k.. on big-endian ones.
            let shift = if cfg!(target_endian = "little") { shift } else { 56 - shift };
            want[w] = want[w] & !(0xff << shift) | (*b as u64) << shift;
            mask[w] |= 0xff << shift;
        }
        HeadTemplate { want, mask }
    }
}

/// One tunnel's outer header and the node its packets go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelHint<H> {
    /// Matches only unfragmented UDP packets without IP options (or IPv6 extension
    /// headers) from the tunnel's peer to our endpoint and port.
    pub head: H,
    pub app: UdpApp,
    pub tag: NonZeroU32,
}

/// A worker's hints, one per outer family, and the source of their tags.
#[derive(Debug, Default)]
pub struct TunnelHints {
    pub v4: Option<TunnelHint<HeadTemplate<4>>>,
    pub v6: Option<TunnelHint<HeadTemplate<7>>>,
    last_tag: u32,
}

impl TunnelHints {
    /// The next tag. Tags wrap (skipping zero) after 2^32 - 1 hints: a tag only has to
    /// differ from the tags of packets still between `ethernet-input` and the tunnel
    /// node, which are all consumed in the graph run that set them, and a family's node
    /// holds the tag of the hint it published last.
    pub fn next_tag(&mut self) -> NonZeroU32 {
        self.last_tag = self.last_tag.checked_add(1).unwrap_or(1);
        NonZeroU32::new(self.last_tag).unwrap_or(NonZeroU32::MIN)
    }

    /// Drop both hints (the tables they were built from are gone). Tags go on from where
    /// they were.
    pub fn forget(&mut self) {
        self.v4 = None;
        self.v6 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_change_and_wrap_past_zero() {
        let mut h = TunnelHints::default();
        let (a, b) = (h.next_tag(), h.next_tag());
        assert_eq!((a.get(), b.get()), (1, 2));
        h.forget();
        assert_eq!(h.next_tag().get(), 3, "forgetting hints does not restart tags");
        h.last_tag = u32::MAX - 1;
        assert_eq!(h.next_tag().get(), u32::MAX);
        assert_eq!(h.next_tag().get(), 1);
    }

    #[test]
    fn template_compares_only_masked_bytes() {
        let t = HeadTemplate::<2>::new(&[(0, &[0x45], &[0xff]), (9, &[17], &[0xff]), (12, &[0xc6, 0x12], &[0xff, 0xf0])]);
        let mut p = [0u8; 16];
        p[0] = 0x45;
        p[9] = 17;
        p[12] = 0xc6;
        p[13] = 0x1f;
        assert!(t.matches(&p));
        p[3] = 0xee; // a free byte
        assert!(t.matches(&p));
        p[13] = 0x2f; // a masked nibble
        assert!(!t.matches(&p));
        assert!(!t.matches(&p[..15]), "a shorter packet never matches");
        let p = [0x45, 0, 0, 0xee, 0, 0, 0, 0, 0, 17, 0, 0, 0xc6, 0x1f, 0xaa, 0xbb];
        assert!(t.matches(&p));
        let t = t.with(13, &[0x1f, 0xaa]);
        assert!(t.matches(&p));
        assert_eq!(t, HeadTemplate::new(&[(0, &[0x45], &[0xff]), (9, &[17], &[0xff]), (12, &[0xc6, 0x1f, 0xaa], &[0xff; 3])]));
        assert!(!t.matches(&[0x45, 0, 0, 0xee, 0, 0, 0, 0, 0, 17, 0, 0, 0xc6, 0x1f, 0xab, 0xbb]));
    }
}
