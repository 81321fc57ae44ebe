//! `worker-handoff`: software RSS for a device with fewer receive queues than workers.
//! The worker that received a frame hashes its flow ([`crate::flow::frame_flow_hash`]:
//! the TEID of a GTP-U packet, else the 5-tuple) to pick the worker that processes it;
//! its own share goes on to `ethernet-input`, the rest over the lanes of
//! `engine::handoff`. A flow always hashes to the same worker and a lane is FIFO, so
//! each flow stays in order.
//!
//! A feature that keeps per-worker state for flows the flow hash would split (the load
//! balancer's NAT: a connection's client packets and its replies) names their worker
//! first ([`Steering`]). `session-handoff`, the same node without the spreading, takes
//! what a worker received itself (devices that give every worker its own share, whose
//! hash is the kernel's or the NIC's) and moves only those frames.
use engine::handoff::{HandoffKind, LaneTx};
use engine::{BufIdx, Counts, ExpandNode, Pool};

engine::next_nodes! {
    pub enum WorkerHandoffNext { EthernetInput = "ethernet-input" }
}

engine::counters! {
    pub enum WorkerHandoffCounter {
        HandedOff(Info, "handed-off", "frames sent to another worker to process"),
        Kept(Info, "kept", "frames this worker processes itself"),
        LaneFull(Warn, "lane-full", "the lane to the chosen worker was full: dropped"),
    }
}

/// The worker a frame must be processed by, where a feature says (`None`: the flow hash
/// decides, or the worker that has it keeps it).
pub trait Steering {
    fn steer(&mut self, frame: &[u8], workers: u32) -> Option<u32>;
}

pub struct WorkerHandoff {
    me: usize,
    /// `to[k]`: the lane to worker `k`; `None` for this worker.
    to: Vec<Option<LaneTx>>,
    /// Spread every frame by its flow hash (`worker-handoff`), or move only what
    /// [`Steering`] names (`session-handoff`).
    spread: bool,
}

impl WorkerHandoff {
    /// `worker-handoff`: spreads what a worker's device receives over the workers.
    pub fn new(me: usize, to: Vec<Option<LaneTx>>) -> WorkerHandoff {
        assert!(me < to.len() && to[me].is_none());
        WorkerHandoff { me, to, spread: true }
    }

    /// `session-handoff`: moves only the frames [`Steering`] gives another worker.
    pub fn sessions_only(me: usize, to: Vec<Option<LaneTx>>) -> WorkerHandoff {
        WorkerHandoff { spread: false, ..WorkerHandoff::new(me, to) }
    }
}

impl<Cx: Steering + Send + 'static> ExpandNode<Cx> for WorkerHandoff {
    type Next = WorkerHandoffNext;
    type Counter = WorkerHandoffCounter;
    const RECEIVES: engine::Receives = engine::Receives::Ethernet;

    fn name(&self) -> &'static str {
        if self.spread {
            "worker-handoff"
        } else {
            "session-handoff"
        }
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        let (frame, n) = (pool.get(bi).bytes(), self.to.len() as u32);
        let target = match cx.steer(frame, n) {
            Some(k) => k.min(n - 1) as usize,
            None if self.spread => engine::hash::reduce(crate::flow::frame_flow_hash(frame), n) as usize,
            None => self.me,
        };
        let Some(lane) = &mut self.to[target] else {
            counts.inc(WorkerHandoffCounter::Kept);
            out.push((bi, WorkerHandoffNext::EthernetInput));
            return Ok(());
        };
        debug_assert_ne!(target, self.me);
        let buf = pool.get_mut(bi);
        let rx_if = buf.meta.rx_if;
        if lane.push(buf, rx_if, HandoffKind::Rx) {
            // The dispatcher frees the input buffer: its bytes travel in the lane frame.
            counts.inc(WorkerHandoffCounter::HandedOff);
            Ok(())
        } else {
            Err(WorkerHandoffCounter::LaneFull)
        }
    }

    fn end_of_vector(&mut self, _cx: &mut Cx) {
        for lane in self.to.iter_mut().flatten() {
            lane.flush();
        }
    }
}
