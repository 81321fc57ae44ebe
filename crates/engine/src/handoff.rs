//! Software RSS: handing packets between workers.
//!
//! When a device has fewer receive queues than there are workers (one AF_XDP queue, a
//! TAP device, a generator, a pcap file), the worker that owns it hashes each packet's
//! flow and hands the packets that belong to another worker over a lane to it (receive
//! handoff); a worker with no queue on an interface hands the packets it sends there to
//! the owner (transmit handoff, [`HandoffTx`]). Each ordered pair of workers has one
//! lane: a bounded FIFO, so a flow (always hashed to the same worker) stays in order.
//!
//! Pools are per worker, so a handed-off packet is copied into a lane frame and out
//! again into the receiver's pool. Frames travel in batches of up to a vector: the
//! sender fills a batch and sends it when full or at the end of the vector, so the two
//! cores exchange one message per batch rather than touching shared cache lines for
//! every packet. Batches come back through a return queue, so the steady state
//! allocates nothing. A lane with no free batch drops the packet, and the sender counts it.
//!
//! While the receiver is behind (it has not taken [`HOLD_BEHIND`] batches sent), a sender
//! keeps filling its batch past a vector's end, and sends it full or once the receiver
//! has caught up, at the end of a later vector or loop (the nodes that hand packets over
//! run their `end_of_vector` at every loop's end, [`HandoffTx`] its device's
//! `end_of_loop`). A batch a vector end would spend the lane's [`LANE_BATCHES`] on a few
//! packets each at low rates (the generator's paced vectors: ~3 a batch), so a receiver
//! that lost its core for a fraction of a millisecond found the lane full; held, the
//! lane holds up to `LANE_BATCHES` × a vector of packets whatever the rate.

use crate::buffer::{BufIdx, Buffer, GsoKind, IfIndex};
use crate::device::{Device, RxStatus, TxResult};
use crate::pool::Pool;
use crate::VECTOR_SIZE;
use crossbeam_channel::{Receiver, Sender};

/// What the receiving worker does with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoffKind {
    /// Process it as received on `if_index` (receive handoff).
    Rx,
    /// Send it out of `if_index` (transmit handoff).
    Tx,
    /// An IP packet that passed its input checks on the sending worker (received on
    /// `if_index`, perhaps decapsulated there): it continues at the receiving worker's
    /// resume input, as a packet of the state that worker holds.
    Resume,
}

/// A packet in transit between workers, with the metadata that must survive the copy.
#[derive(Debug)]
struct HandoffFrame {
    data: Vec<u8>,
    if_index: IfIndex,
    kind: HandoffKind,
    /// A pending partial checksum (start, offset), relative to the packet start.
    partial: Option<(usize, usize)>,
    gso: GsoKind,
    gso_size: u16,
    /// [`crate::Meta::refragment`]: a datagram reassembled by the sending worker.
    refragment: bool,
}

/// Up to a vector of frames; `len` of them are filled.
#[derive(Debug)]
struct Batch {
    frames: Vec<HandoffFrame>,
    len: usize,
}

impl Batch {
    fn new() -> Batch {
        let frames = (0..VECTOR_SIZE)
            .map(|_| HandoffFrame {
                // Grown on first use and kept: memory follows what the lane carries.
                data: Vec::new(),
                if_index: IfIndex(0),
                kind: HandoffKind::Rx,
                partial: None,
                gso: GsoKind::None,
                gso_size: 0,
                refragment: false,
            })
            .collect();
        Batch { frames, len: 0 }
    }
}

/// Batches per lane: in flight, queued, or waiting to be refilled. At low rates a batch
/// carries a packet or two, so there are many.
pub const LANE_BATCHES: usize = 64;

/// Batches queued and not yet taken by the receiver from which a sender holds its batch
/// at a vector's end (see the module's notes): two, so a receiver that keeps up (takes
/// each batch before the next comes) never waits for one.
pub const HOLD_BEHIND: usize = 2;

/// The sending end of one lane. Clones share the lane; each fills its own batch.
pub struct LaneTx {
    full: Sender<Batch>,
    empty: Receiver<Batch>,
    filling: Option<Batch>,
}

impl Clone for LaneTx {
    fn clone(&self) -> LaneTx {
        LaneTx { full: self.full.clone(), empty: self.empty.clone(), filling: None }
    }
}

/// The receiving end of one lane.
pub struct LaneRx {
    full: Receiver<Batch>,
    empty: Sender<Batch>,
    /// The batch being emptied and the next frame in it.
    draining: Option<(Batch, usize)>,
}

impl LaneTx {
    /// Copy the packet into the batch being filled (sending it once full); false when
    /// the lane has no free batch.
    pub fn push(&mut self, buf: &mut Buffer, if_index: IfIndex, kind: HandoffKind) -> bool {
        if self.filling.is_none() {
            match self.empty.try_recv() {
                Ok(b) => self.filling = Some(b),
                Err(_) => return false,
            }
        }
        let batch = self.filling.as_mut().expect("just filled");
        let f = &mut batch.frames[batch.len];
        f.data.clear();
        f.data.extend_from_slice(buf.bytes());
        f.if_index = if_index;
        f.kind = kind;
        f.partial = buf.take_partial_checksum();
        f.gso = buf.meta.offload.gso;
        f.gso_size = buf.meta.offload.gso_size;
        f.refragment = buf.meta.refragment;
        batch.len += 1;
        if batch.len == batch.frames.len() {
            self.send();
        }
        true
    }

    /// The end of a vector (or of a loop): send the batch being filled, if it has
    /// anything, unless the receiver is behind ([`HOLD_BEHIND`]): then it is filled on
    /// and sent full, or at a later call once the receiver has caught up.
    pub fn flush(&mut self) {
        if self.filling.as_ref().is_some_and(|b| b.len > 0) && self.full.len() < HOLD_BEHIND {
            self.send();
        }
    }

    /// Whether a batch is held with packets in it (sent at a later [`Self::flush`]).
    #[cfg(test)]
    fn holds(&self) -> bool {
        self.filling.as_ref().is_some_and(|b| b.len > 0)
    }

    fn send(&mut self) {
        if let Some(b) = self.filling.take() {
            // As many batches exist as the queue holds: sending never finds it full.
            let _ = self.full.try_send(b);
        }
    }
}

impl LaneRx {
    /// The next packet, in a buffer from `pool`, with its interface and kind. `None`
    /// when the lane is empty, or when the pool is (that packet is dropped: the pool
    /// counts the failed allocation).
    pub fn pop(&mut self, pool: &mut Pool) -> Option<(BufIdx, IfIndex, HandoffKind)> {
        if self.draining.is_none() {
            self.draining = Some((self.full.try_recv().ok()?, 0));
        }
        let (batch, next) = self.draining.as_mut().expect("just filled");
        let f = &batch.frames[*next];
        *next += 1;
        let out = match pool.alloc(f.data.len()) {
            Some(b) => {
                let buf = pool.get_mut(b);
                if buf.write(&f.data).is_ok() {
                    if let Some((start, offset)) = f.partial {
                        buf.set_partial_checksum(start, offset);
                    }
                    buf.meta.offload.gso = f.gso;
                    buf.meta.offload.gso_size = f.gso_size;
                    buf.meta.refragment = f.refragment;
                    Some((b, f.if_index, f.kind))
                } else {
                    pool.free(b);
                    None
                }
            }
            None => None,
        };
        if *next == batch.len {
            let (mut batch, _) = self.draining.take().expect("draining");
            batch.len = 0;
            let _ = self.empty.try_send(batch);
        }
        out
    }

    /// Whether a packet waits (queued or in the batch being emptied).
    pub fn is_empty(&self) -> bool {
        self.draining.is_none() && self.full.is_empty()
    }
}

/// One worker's ends of the lanes: `to[j]` sends to worker `j` (`None` for itself),
/// `from` receives from every other worker.
pub struct HandoffEnds {
    pub to: Vec<Option<LaneTx>>,
    pub from: Vec<LaneRx>,
}

/// Lanes between every ordered pair of `workers` workers; element `k` belongs to worker `k`.
pub fn mesh(workers: usize) -> Vec<HandoffEnds> {
    let mut ends: Vec<HandoffEnds> = (0..workers).map(|_| HandoffEnds { to: Vec::new(), from: Vec::new() }).collect();
    for i in 0..workers {
        for j in 0..workers {
            if i == j {
                ends[i].to.push(None);
                continue;
            }
            let (full_tx, full_rx) = crossbeam_channel::bounded(LANE_BATCHES);
            let (empty_tx, empty_rx) = crossbeam_channel::bounded(LANE_BATCHES);
            for _ in 0..LANE_BATCHES {
                empty_tx.try_send(Batch::new()).expect("sized for LANE_BATCHES");
            }
            ends[i].to.push(Some(LaneTx { full: full_tx, empty: empty_rx, filling: None }));
            ends[j].from.push(LaneRx { full: full_rx, empty: empty_tx, draining: None });
        }
    }
    ends
}

/// The transmit side of an interface on a worker that does not own its device: every
/// packet goes to the owner's lane, which sends it from the owner's device.
pub struct HandoffTx {
    lane: LaneTx,
    if_index: IfIndex,
}

impl HandoffTx {
    /// Send through `lane` (to the owner of the device) as interface `if_index`.
    pub fn new(lane: LaneTx, if_index: IfIndex) -> HandoffTx {
        HandoffTx { lane, if_index }
    }
}

impl Device for HandoffTx {
    fn kind(&self) -> &'static str {
        "handoff"
    }

    fn has_rx(&self) -> bool {
        false
    }

    fn rx(&mut self, _pool: &mut Pool, _out: &mut Vec<BufIdx>, _max: usize) -> RxStatus {
        RxStatus::Exhausted
    }

    /// A packet handed to the owner is counted as sent by the owner's port when its
    /// device sends it (so the interface's totals count it once); a full lane is this
    /// port's transmit error.
    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let mut r = TxResult::default();
        for &b in bufs.iter() {
            if !self.lane.push(pool.get_mut(b), self.if_index, HandoffKind::Tx) {
                r.failed += 1;
            }
        }
        self.lane.flush();
        pool.free_many(bufs);
        bufs.clear();
        r
    }

    fn each_loop(&self) -> bool {
        true
    }

    /// A batch held while the owner was behind goes once it has caught up.
    fn end_of_loop(&mut self) {
        self.lane.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(pool: &mut Pool, bytes: &[u8]) -> BufIdx {
        let b = pool.alloc(bytes.len()).unwrap();
        pool.get_mut(b).write(bytes).unwrap();
        b
    }

    #[test]
    fn lanes_keep_order_metadata_and_recycle_batches() {
        let kind_of = |k: u8| [HandoffKind::Rx, HandoffKind::Tx, HandoffKind::Resume][k as usize % 3];
        let mut ends = mesh(3);
        let (mut p0, mut p2) = (Pool::new(64, 0), Pool::new(64, 0));
        let mut to2 = ends[0].to[2].clone().unwrap();
        assert!(ends[0].to[0].is_none());
        assert_eq!(ends[2].from.len(), 2, "worker 2 hears from workers 0 and 1");
        // More rounds than the lane has batches: they must come back to be reused.
        for round in 0..(2 * LANE_BATCHES as u8) {
            for k in 0..40u8 {
                let b = packet(&mut p0, &[round, k, 0xaa, 0xbb, 0, 0, 0, 0]);
                let buf = p0.get_mut(b);
                if k == 7 {
                    buf.set_partial_checksum(1, 2);
                    buf.meta.offload.gso = GsoKind::Tcp4;
                    buf.meta.offload.gso_size = 1448;
                }
                assert!(to2.push(buf, IfIndex(5), kind_of(k)));
                p0.free(b);
            }
            let rx = &mut ends[2].from[0];
            assert!(rx.pop(&mut p2).is_none(), "nothing crosses before the end of the vector");
            to2.flush();
            for k in 0..40u8 {
                let (b, ifx, kind) = rx.pop(&mut p2).expect("queued");
                let buf = p2.get_mut(b);
                assert_eq!(buf.bytes(), &[round, k, 0xaa, 0xbb, 0, 0, 0, 0], "in order");
                assert_eq!(ifx, IfIndex(5));
                assert_eq!(kind, kind_of(k));
                if k == 7 {
                    assert_eq!(buf.take_partial_checksum(), Some((1, 2)));
                    assert_eq!((buf.meta.offload.gso, buf.meta.offload.gso_size), (GsoKind::Tcp4, 1448));
                } else {
                    assert!(!buf.meta.offload.has_partial_checksum());
                }
                p2.free(b);
            }
            assert!(rx.pop(&mut p2).is_none() && rx.is_empty());
        }
    }

    /// A receiver that stops taking (its core lost for a while) while the sender hands
    /// it a few packets a vector: the sender holds its batch from the second one queued
    /// on, so the lane takes `LANE_BATCHES` full vectors of packets, not `LANE_BATCHES`
    /// vector ends; all arrive in order, and the last, partly filled batch goes at the
    /// first flush after the receiver caught up, with no more packets to push.
    #[test]
    fn a_receiver_behind_gets_full_batches_and_the_held_one_after() {
        let mut ends = mesh(2);
        let mut to1 = ends[0].to[1].clone().unwrap();
        let (mut p0, mut p1) = (Pool::new(64, 0), Pool::new(64, 0));
        let per_vector = 3;
        // Two small batches, full ones, and 5 packets in the one being filled: every batch.
        let total = HOLD_BEHIND * per_vector + (LANE_BATCHES - HOLD_BEHIND - 1) * VECTOR_SIZE + 5;
        let mut sent = 0u32;
        while (sent as usize) < total {
            for _ in 0..per_vector.min(total - sent as usize) {
                let b = packet(&mut p0, &sent.to_be_bytes());
                assert!(to1.push(p0.get_mut(b), IfIndex(1), HandoffKind::Rx), "packet {sent} refused");
                p0.free(b);
                sent += 1;
            }
            to1.flush();
        }
        let rx = &mut ends[1].from[0];
        assert_eq!(rx.full.len(), LANE_BATCHES - 1, "two small batches, then full ones");
        assert!(to1.holds(), "the last packets wait in the batch being filled");
        let mut got = 0u32;
        while let Some((b, _, _)) = rx.pop(&mut p1) {
            assert_eq!(p1.get(b).bytes(), &got.to_be_bytes(), "in order");
            p1.free(b);
            got += 1;
        }
        assert!((got as usize) < total && rx.is_empty());
        // The receiver caught up: the next flush (a loop's end) sends the rest.
        to1.flush();
        assert!(!to1.holds());
        while let Some((b, _, _)) = rx.pop(&mut p1) {
            assert_eq!(p1.get(b).bytes(), &got.to_be_bytes(), "in order");
            p1.free(b);
            got += 1;
        }
        assert_eq!(got as usize, total);
    }

    /// A transmit handoff's batch held while the owner was behind goes at the end of a
    /// loop in which nothing was sent ([`Device::end_of_loop`]).
    #[test]
    fn a_held_transmit_batch_goes_at_a_loop_end() {
        let mut ends = mesh(2);
        let mut pool = Pool::new(64, 0);
        let mut dev = HandoffTx::new(ends[1].to[0].clone().unwrap(), IfIndex(1));
        assert!(dev.each_loop());
        for round in 0..HOLD_BEHIND as u8 + 1 {
            let mut bufs = vec![packet(&mut pool, &[round])];
            dev.tx(&mut pool, &mut bufs);
        }
        let rx = &mut ends[0].from[0];
        assert_eq!(rx.full.len(), HOLD_BEHIND, "the third is held");
        for round in 0..HOLD_BEHIND as u8 {
            let (b, _, kind) = rx.pop(&mut pool).expect("sent");
            assert_eq!((pool.get(b).bytes(), kind), (&[round][..], HandoffKind::Tx));
            pool.free(b);
        }
        assert!(rx.pop(&mut pool).is_none());
        dev.end_of_loop();
        let (b, _, _) = rx.pop(&mut pool).expect("sent at the loop's end");
        assert_eq!(pool.get(b).bytes(), &[HOLD_BEHIND as u8]);
        pool.free(b);
    }

    #[test]
    fn a_full_lane_refuses_and_counts_through_the_device() {
        let mut ends = mesh(2);
        let capacity = LANE_BATCHES * VECTOR_SIZE;
        let mut pool = Pool::new(capacity + 64, 0);
        let mut dev = HandoffTx::new(ends[1].to[0].clone().unwrap(), IfIndex(1));
        let mut bufs: Vec<BufIdx> = (0..capacity + 10).map(|_| packet(&mut pool, &[1, 2, 3])).collect();
        let r = dev.tx(&mut pool, &mut bufs);
        assert_eq!((r.sent, r.failed), (0, 10), "the owner counts what it sends; the overflow fails");
        assert_eq!(ends[0].from[0].full.len(), LANE_BATCHES);
        assert!(bufs.is_empty());
        let st = pool.stats();
        assert_eq!(st.regular_free, st.regular_total, "every buffer freed");
        // An exhausted receiver pool drops the packet it could not take (the pool counts
        // it); the next one goes through.
        let mut small = Pool::new(1, 0);
        let held = small.alloc(10).unwrap();
        let rx = &mut ends[0].from[0];
        assert!(rx.pop(&mut small).is_none());
        assert_eq!(small.stats().alloc_failures, 1);
        small.free(held);
        let (b, ifx, kind) = rx.pop(&mut small).expect("the next packet");
        assert_eq!((small.get(b).bytes(), ifx, kind), (&[1u8, 2, 3][..], IfIndex(1), HandoffKind::Tx));
    }
}
