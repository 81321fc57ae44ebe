//! The inbound sequence-number state of an SA: the anti-replay window (RFC 4303
//! §3.4.3) over 64-bit extended sequence numbers, whose high half the receiver infers
//! from the low half on the wire (RFC 4303 Appendix A2). Sans-IO: sequence numbers in,
//! verdicts out.
//!
//! Two steps per packet, as RFC 4303 orders them: [`ReplayWindow::check`] before the
//! ICV is verified (cheap rejection of duplicates and stale packets; it also yields
//! the full 64-bit number the ICV covers) and [`ReplayWindow::accept`] after, so a
//! forged packet never moves the window.

/// Bits in the window: the most recent `WINDOW` sequence numbers are tracked.
pub const WINDOW: u64 = 1024;
const WORDS: usize = (WINDOW / 64) as usize;

/// Why a sequence number is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// Seen before, inside the window.
    Replayed,
    /// Older than the window.
    TooOld,
}

/// A bitmap of the last [`WINDOW`] sequence numbers, kept as a ring of words: bit
/// `s % WINDOW` stands for `s`, valid for `top - WINDOW < s <= top`.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// The highest sequence number accepted (0: none yet; 0 is never sent, RFC 4303 §3.3.3).
    top: u64,
    bits: [u64; WORDS],
    esn: bool,
}

impl ReplayWindow {
    pub fn new(esn: bool) -> Self {
        ReplayWindow { top: 0, bits: [0; WORDS], esn }
    }

    pub fn top(&self) -> u64 {
        self.top
    }

    /// The full sequence number of a packet carrying `low` (its low 32 bits), and
    /// whether it may be new. Without ESN the number is `low` itself.
    #[inline]
    pub fn check(&self, low: u32) -> Result<u64, ReplayError> {
        let seq = self.infer(low);
        if seq == 0 {
            // Never sent: the counter starts at 1. Without ESN, 0 is also what a wrapped
            // sender would send, which it must not.
            return Err(ReplayError::TooOld);
        }
        if seq > self.top {
            return Ok(seq);
        }
        if self.top - seq >= WINDOW {
            return Err(ReplayError::TooOld);
        }
        if self.bit(seq) {
            return Err(ReplayError::Replayed);
        }
        Ok(seq)
    }

    /// Record `seq` (from [`ReplayWindow::check`], its ICV verified): slide the window
    /// when it is the newest, and mark it. A packet that raced past its duplicate's
    /// check is refused here.
    #[inline]
    pub fn accept(&mut self, seq: u64) -> Result<(), ReplayError> {
        if seq > self.top {
            self.slide_to(seq);
        } else if self.top - seq >= WINDOW {
            return Err(ReplayError::TooOld);
        } else if self.bit(seq) {
            return Err(ReplayError::Replayed);
        }
        self.bits[word(seq)] |= mask(seq);
        Ok(())
    }

    /// The full number of a packet carrying `low`, whether or not it is new (for an SA
    /// without anti-replay).
    #[inline(always)]
    pub fn full(&self, low: u32) -> u64 {
        self.infer(low)
    }

    /// RFC 4303 Appendix A2.2: the high half is that of the window's bottom (the window
    /// then spans at most two 2^32 epochs), or the next when `low` sits below the bottom.
    #[inline(always)]
    fn infer(&self, low: u32) -> u64 {
        if !self.esn {
            return low as u64;
        }
        let bottom = self.top.saturating_sub(WINDOW - 1);
        let hi = bottom >> 32;
        let bl = bottom as u32;
        if low >= bl {
            (hi << 32) | low as u64
        } else {
            // Below the bottom's low half: the next epoch (a packet ahead of the window
            // after the low half wrapped). A stale packet below the window in this
            // epoch is indistinguishable from it; its ICV then fails (A2.2).
            ((hi + 1) << 32) | low as u64
        }
    }

    fn slide_to(&mut self, seq: u64) {
        let gap = seq - self.top;
        if gap >= WINDOW {
            self.bits = [0; WORDS];
        } else {
            // Clear the bits of the numbers entering the window (top+1 ..= seq); whole
            // words where possible.
            let mut s = self.top + 1;
            while s <= seq {
                if s % 64 == 0 && seq - s >= 63 {
                    self.bits[word(s)] = 0;
                    s += 64;
                } else {
                    self.bits[word(s)] &= !mask(s);
                    s += 1;
                }
            }
        }
        self.top = seq;
    }

    #[inline(always)]
    fn bit(&self, seq: u64) -> bool {
        self.bits[word(seq)] & mask(seq) != 0
    }
}

#[inline(always)]
fn word(seq: u64) -> usize {
    ((seq % WINDOW) / 64) as usize
}

#[inline(always)]
fn mask(seq: u64) -> u64 {
    1 << (seq % 64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn take(w: &mut ReplayWindow, low: u32) -> Result<u64, ReplayError> {
        let s = w.check(low)?;
        w.accept(s)?;
        Ok(s)
    }

    #[test]
    fn duplicates_and_stale_numbers_refused() {
        let mut w = ReplayWindow::new(false);
        assert_eq!(take(&mut w, 0), Err(ReplayError::TooOld));
        assert_eq!(take(&mut w, 5), Ok(5));
        assert_eq!(take(&mut w, 5), Err(ReplayError::Replayed));
        assert_eq!(take(&mut w, 3), Ok(3), "late but inside the window");
        assert_eq!(take(&mut w, 2000), Ok(2000));
        assert_eq!(take(&mut w, 2000 - 1023), Ok(977), "the window's oldest slot");
        assert_eq!(take(&mut w, 2000 - 1024), Err(ReplayError::TooOld));
        assert_eq!(take(&mut w, 5), Err(ReplayError::TooOld));
    }

    #[test]
    fn a_forged_packet_does_not_move_the_window() {
        let mut w = ReplayWindow::new(false);
        take(&mut w, 10).unwrap();
        // check() alone, as when the ICV then fails: number 1_000_000 is not recorded.
        assert_eq!(w.check(1_000_000), Ok(1_000_000));
        assert_eq!(w.top(), 10);
        assert_eq!(take(&mut w, 9), Ok(9));
    }

    #[test]
    fn esn_infers_the_high_half_across_the_wrap() {
        let mut w = ReplayWindow::new(true);
        assert_eq!(take(&mut w, u32::MAX - 10), Ok(u32::MAX as u64 - 10));
        // The low half wraps: the next epoch.
        assert_eq!(take(&mut w, 3), Ok((1 << 32) + 3));
        // A late packet from before the wrap, still in the window: the old epoch.
        assert_eq!(take(&mut w, u32::MAX - 5), Ok(u32::MAX as u64 - 5));
        assert_eq!(take(&mut w, u32::MAX - 5), Err(ReplayError::Replayed));
        let mut plain = ReplayWindow::new(false);
        take(&mut plain, u32::MAX - 10).unwrap();
        assert_eq!(take(&mut plain, 3), Err(ReplayError::TooOld), "without ESN there is no next epoch");
    }

    proptest! {
        /// Against a reference: a set of every number accepted, and the highest.
        #[test]
        fn window_matches_a_set_of_seen_numbers(ops in proptest::collection::vec(
            prop_oneof![(0u64..3000).prop_map(|d| (true, d)), (0u64..1500).prop_map(|d| (false, d))], 1..400)) {
            let mut w = ReplayWindow::new(true);
            let mut seen = BTreeSet::new();
            let mut top = 0u64;
            for (ahead, d) in ops {
                // Numbers ahead of the top, or behind it, across 2^32 now and then.
                let seq = if ahead { top + d + 1 } else { top.saturating_sub(d) };
                let seq = seq + if top == 0 && ahead { u32::MAX as u64 - 4000 } else { 0 };
                let expect = if seq == 0 || (seq <= top && top - seq >= WINDOW) {
                    Err(ReplayError::TooOld)
                } else if seen.contains(&seq) {
                    Err(ReplayError::Replayed)
                } else {
                    Ok(seq)
                };
                let got = match w.check(seq as u32) {
                    // A number below the window read as the next epoch (A2.2): its ICV,
                    // computed over the true number, fails, so it is never accepted.
                    Ok(s) if s != seq => {
                        prop_assert_eq!(expect, Err(ReplayError::TooOld), "seq {} read as {}", seq, s);
                        continue;
                    }
                    Ok(s) => w.accept(s).map(|_| s),
                    Err(e) => Err(e),
                };
                prop_assert_eq!(got, expect, "seq {} top {}", seq, top);
                if expect.is_ok() {
                    seen.insert(seq);
                    top = top.max(seq);
                }
            }
        }
    }
}
