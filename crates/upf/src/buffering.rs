//! Downlink buffering (FAR BUFF): the packets a worker holds for sessions whose FAR
//! buffers, in arrival order per session, until the FAR forwards (they are sent first,
//! before any newer packet) or the session goes (they are freed and counted).
//!
//! A worker's store is its own (no lock): a fixed arena of `capacity` packet slots of
//! [`HELD_LEN`] bytes, allocated once, so holding a packet copies it and allocates
//! nothing. The packet's pool buffer goes back to the pool at once: held packets never
//! take the receive buffers a worker needs to go on forwarding (an idle UE's downlink
//! could otherwise starve every other session of buffers).
//!
//! Bounds: `capacity` packets per worker (the configured total shared out over the
//! workers) and `per_session` packets of one session on one worker; what does not fit is
//! dropped by the caller under a named counter ([`HoldError`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The longest packet held: a full-sized Ethernet payload and more, one regular buffer.
pub const HELD_LEN: usize = 2048;

/// Per worker unless configured (`[pfcp] buffer_packets`, `buffer_per_session`).
pub const DEFAULT_CAPACITY: usize = 1024;
pub const DEFAULT_PER_SESSION: usize = 64;

/// No next entry.
const END: u32 = u32::MAX;

/// Why a packet was not held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldError {
    /// The worker holds `capacity` packets.
    Full,
    /// The session holds `per_session` packets on this worker.
    SessionFull,
    /// The session holds as many packets as its BAR allows (the `limit` of
    /// [`HeldPackets::hold`], below `per_session`).
    BarLimit,
    /// Longer than [`HELD_LEN`].
    TooLong,
}

/// One session's queue: a list through the entries' `next`, oldest first.
#[derive(Debug, Clone, Copy)]
struct Queue {
    seid: u64,
    head: u32,
    tail: u32,
    len: u32,
}

/// A worker's held packets.
pub struct HeldPackets {
    data: Box<[u8]>,
    lens: Box<[u16]>,
    next: Box<[u32]>,
    /// Free entries (a stack; its capacity is the arena's, so pushing never allocates).
    free: Vec<u32>,
    /// Session slot → its queue. Room reserved for one queue per entry, so inserting
    /// never allocates either.
    queues: HashMap<u32, Queue>,
    per_session: u32,
    /// Packets held now, for `show pfcp` (read by the control plane).
    gauge: Arc<AtomicU64>,
}

impl HeldPackets {
    /// `capacity` packets in all, at most `per_session` of one session. The arena is
    /// zeroed memory: the OS maps its pages when first written, so an unused store costs
    /// address space only.
    pub fn new(capacity: usize, per_session: usize) -> HeldPackets {
        let capacity = capacity.min(END as usize - 1);
        HeldPackets {
            data: vec![0u8; capacity * HELD_LEN].into_boxed_slice(),
            lens: vec![0u16; capacity].into_boxed_slice(),
            next: vec![END; capacity].into_boxed_slice(),
            free: (0..capacity as u32).rev().collect(),
            queues: HashMap::with_capacity(capacity),
            per_session: per_session.min(u32::MAX as usize) as u32,
            gauge: Arc::default(),
        }
    }

    /// Keep `gauge` at the count of packets held.
    pub fn reporting_to(mut self, gauge: Arc<AtomicU64>) -> HeldPackets {
        gauge.store(self.len() as u64, Relaxed);
        self.gauge = gauge;
        self
    }

    /// The count of packets held, as the control plane reads it.
    pub fn gauge(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.gauge)
    }

    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    pub fn per_session(&self) -> usize {
        self.per_session as usize
    }

    /// Packets held in all.
    pub fn len(&self) -> usize {
        self.capacity() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Does the worker hold packets for the session in `slot`? One branch when it holds
    /// none (the downlink path asks for every packet).
    #[inline(always)]
    pub fn holds(&self, slot: u32) -> bool {
        !self.queues.is_empty() && self.queues.contains_key(&slot)
    }

    /// Packets held for the session in `slot`.
    pub fn session_len(&self, slot: u32) -> usize {
        self.queues.get(&slot).map_or(0, |q| q.len as usize)
    }

    /// Hold a copy of `packet` for session `seid` in `slot`, after those held already, if
    /// the session holds fewer than `limit` (its BAR's count) and `per_session`.
    /// Packets of an earlier session in the same slot are discarded first (see
    /// [`HeldPackets::discard_stale`]); returns how many.
    pub fn hold(&mut self, slot: u32, seid: u64, packet: &[u8], limit: Option<u32>) -> Result<usize, HoldError> {
        let stale = self.discard_stale(slot, seid);
        if packet.len() > HELD_LEN {
            return Err(HoldError::TooLong);
        }
        let held = self.queues.get(&slot).map_or(0, |q| q.len);
        if held >= self.per_session {
            return Err(HoldError::SessionFull);
        }
        if limit.is_some_and(|l| held >= l) {
            return Err(HoldError::BarLimit);
        }
        let Some(e) = self.free.pop() else { return Err(HoldError::Full) };
        let at = e as usize * HELD_LEN;
        self.data[at..at + packet.len()].copy_from_slice(packet);
        self.lens[e as usize] = packet.len() as u16;
        self.next[e as usize] = END;
        match self.queues.get_mut(&slot) {
            Some(q) => {
                self.next[q.tail as usize] = e;
                q.tail = e;
                q.len += 1;
            }
            None => {
                self.queues.insert(slot, Queue { seid, head: e, tail: e, len: 1 });
            }
        }
        self.gauge.store(self.len() as u64, Relaxed);
        Ok(stale)
    }

    /// Take the oldest packet held for `slot`, handing its bytes to `f`. The entry is
    /// free again once `f` returns.
    pub fn pop<R>(&mut self, slot: u32, f: impl FnOnce(u64, &[u8]) -> R) -> Option<R> {
        let q = self.queues.get_mut(&slot)?;
        let e = q.head;
        let seid = q.seid;
        q.len -= 1;
        if q.len == 0 {
            self.queues.remove(&slot);
        } else {
            q.head = self.next[e as usize];
        }
        self.free.push(e);
        self.gauge.store(self.len() as u64, Relaxed);
        let at = e as usize * HELD_LEN;
        Some(f(seid, &self.data[at..at + self.lens[e as usize] as usize]))
    }

    /// Free what is held for `slot` (session deleted, DROBU); returns how many.
    pub fn discard(&mut self, slot: u32) -> usize {
        let mut n = 0;
        while self.pop(slot, |_, _| ()).is_some() {
            n += 1;
        }
        n
    }

    /// Free what is held for session `seid` in `slot` (not another session's that reuses
    /// the slot); returns how many.
    pub fn discard_session(&mut self, slot: u32, seid: u64) -> usize {
        match self.queues.get(&slot) {
            Some(q) if q.seid == seid => self.discard(slot),
            _ => 0,
        }
    }

    /// Free what is held for `slot` if it was held for another session than `seid` (the
    /// slot was reused before the deletion's discard reached this worker); returns how
    /// many.
    #[inline]
    pub fn discard_stale(&mut self, slot: u32, seid: u64) -> usize {
        match self.queues.get(&slot) {
            Some(q) if q.seid != seid => self.discard(slot),
            _ => 0,
        }
    }

    /// The session slots with packets held.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.queues.keys().copied()
    }
}

/// A request to a worker's `upf-buffer` node from the control plane, as the frame it
/// is injected as: version nibble 0 (never an IP packet), the operation, the session's
/// slot and SEID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferCmd {
    /// The session's FAR changed: send what is held if it forwards now.
    Release { slot: u32, seid: u64 },
    /// Free what is held (session deleted, or the SMF said DROBU).
    Discard { slot: u32, seid: u64 },
}

pub const CMD_LEN: usize = 16;

impl BufferCmd {
    pub fn to_frame(self) -> Vec<u8> {
        let (op, slot, seid) = match self {
            BufferCmd::Release { slot, seid } => (1u8, slot, seid),
            BufferCmd::Discard { slot, seid } => (2u8, slot, seid),
        };
        let mut f = vec![0u8; CMD_LEN];
        f[1] = op;
        f[4..8].copy_from_slice(&slot.to_be_bytes());
        f[8..16].copy_from_slice(&seid.to_be_bytes());
        f
    }

    /// A frame that is not an IP packet: a command if well formed, else `Err(())`.
    /// `None`: an IP packet (version 4 or 6 or anything but 0).
    pub fn parse(f: &[u8]) -> Option<Result<BufferCmd, ()>> {
        if f.first().is_some_and(|b| b >> 4 != 0) {
            return None;
        }
        let Some(f) = f.first_chunk::<CMD_LEN>() else { return Some(Err(())) };
        let slot = u32::from_be_bytes([f[4], f[5], f[6], f[7]]);
        let seid = u64::from_be_bytes([f[8], f[9], f[10], f[11], f[12], f[13], f[14], f[15]]);
        Some(match f[1] {
            1 => Ok(BufferCmd::Release { slot, seid }),
            2 => Ok(BufferCmd::Discard { slot, seid }),
            _ => Err(()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, VecDeque};

    fn drain(h: &mut HeldPackets, slot: u32) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| h.pop(slot, |_, b| b.to_vec())).collect()
    }

    #[test]
    fn order_bounds_and_reuse() {
        let mut h = HeldPackets::new(4, 3);
        for i in 0..3u8 {
            assert_eq!(h.hold(7, 70, &[i; 10], None), Ok(0));
        }
        assert_eq!(h.hold(7, 70, &[9; 10], None), Err(HoldError::SessionFull));
        assert_eq!(h.hold(8, 80, &[5; 3000], None), Err(HoldError::TooLong));
        assert_eq!(h.hold(8, 80, &[5; 20], None), Ok(0));
        assert_eq!(h.hold(9, 90, &[6; 20], None), Err(HoldError::Full));
        assert_eq!((h.len(), h.session_len(7), h.gauge().load(Relaxed)), (4, 3, 4));
        assert_eq!(drain(&mut h, 7), vec![vec![0; 10], vec![1; 10], vec![2; 10]]);
        assert!(!h.holds(7) && h.holds(8));
        // Slot 8 reused by another session: the old packet goes, counted.
        assert_eq!(h.hold(8, 81, &[1; 5], None), Ok(1));
        assert_eq!(h.pop(8, |seid, b| (seid, b.to_vec())), Some((81, vec![1; 5])));
        assert!(h.is_empty() && h.len() == 0 && h.gauge().load(Relaxed) == 0);
    }

    #[test]
    fn commands_round_trip_and_ip_is_not_a_command() {
        for c in [BufferCmd::Release { slot: 3, seid: u64::MAX }, BufferCmd::Discard { slot: u32::MAX, seid: 1 }] {
            assert_eq!(BufferCmd::parse(&c.to_frame()), Some(Ok(c)));
        }
        assert_eq!(BufferCmd::parse(&[0x45, 0, 0, 20]), None);
        assert_eq!(BufferCmd::parse(&[0x60; 40]), None);
        assert_eq!(BufferCmd::parse(&[0, 1, 0]), Some(Err(())));
        assert_eq!(BufferCmd::parse(&[0; 16]), Some(Err(())));
        assert_eq!(BufferCmd::parse(&[]), Some(Err(())));
    }

    #[test]
    fn a_bar_limit_below_per_session_bounds_the_session() {
        let mut h = HeldPackets::new(8, 4);
        assert_eq!(h.hold(1, 10, &[1], Some(2)), Ok(0));
        assert_eq!(h.hold(1, 10, &[2], Some(2)), Ok(0));
        assert_eq!(h.hold(1, 10, &[3], Some(2)), Err(HoldError::BarLimit));
        // A limit above per_session: per_session still bounds.
        assert_eq!(h.hold(1, 10, &[3], Some(9)), Ok(0));
        assert_eq!(h.hold(1, 10, &[4], Some(9)), Ok(0));
        assert_eq!(h.hold(1, 10, &[5], Some(9)), Err(HoldError::SessionFull));
        // Zero: nothing held.
        assert_eq!(h.hold(2, 20, &[1], Some(0)), Err(HoldError::BarLimit));
        assert_eq!(drain(&mut h, 1), vec![vec![1], vec![2], vec![3], vec![4]]);
    }

    proptest! {
        /// Any sequence of holds, pops and discards over a few sessions leaves the same
        /// packets, in the same order, as a reference of one bounded deque per session
        /// (bounded by `per_session` and, where given, a lower limit).
        #[test]
        fn behaves_like_bounded_fifos(ops in proptest::collection::vec((0u8..3, 0u32..4, 0usize..40, proptest::option::of(0u32..6)), 0..200)) {
            let (cap, per) = (10usize, 4usize);
            let mut h = HeldPackets::new(cap, per);
            let mut model: BTreeMap<u32, VecDeque<Vec<u8>>> = BTreeMap::new();
            for (k, (op, slot, len, limit)) in ops.into_iter().enumerate() {
                let total: usize = model.values().map(|q| q.len()).sum();
                match op {
                    0 => {
                        let p = vec![k as u8; len];
                        let q = model.entry(slot).or_default();
                        let want = if q.len() >= per {
                            Err(HoldError::SessionFull)
                        } else if limit.is_some_and(|l| q.len() >= l as usize) {
                            Err(HoldError::BarLimit)
                        } else if total >= cap {
                            Err(HoldError::Full)
                        } else {
                            Ok(0)
                        };
                        prop_assert_eq!(h.hold(slot, slot as u64, &p, limit), want);
                        if want.is_ok() {
                            q.push_back(p);
                        }
                    }
                    1 => prop_assert_eq!(h.pop(slot, |_, b| b.to_vec()), model.entry(slot).or_default().pop_front()),
                    _ => prop_assert_eq!(h.discard(slot), model.entry(slot).or_default().drain(..).count()),
                }
                prop_assert_eq!(h.len(), model.values().map(|q| q.len()).sum::<usize>());
                for (s, q) in &model {
                    prop_assert_eq!(h.session_len(*s), q.len());
                    prop_assert_eq!(h.holds(*s), !q.is_empty());
                }
            }
        }
    }
}
