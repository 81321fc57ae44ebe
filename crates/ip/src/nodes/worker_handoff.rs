//! `worker-handoff`: software RSS for a device with fewer receive queues than workers.
//! The worker that received a frame hashes its flow ([`crate::flow::frame_flow_hash`]:
//! the TEID of a GTP-U packet, else the 5-tuple) to pick the worker that processes it;
//! its own share goes on to `ethernet-input`, the rest over the lanes of
//! `engine::handoff`. A flow always hashes to the same worker and a lane is FIFO, so
//! each flow stays in order.

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

pub struct WorkerHandoff {
    me: usize,
    /// `to[k]`: the lane to worker `k`; `None` for this worker.
    to: Vec<Option<LaneTx>>,
}

impl WorkerHandoff {
    pub fn new(me: usize, to: Vec<Option<LaneTx>>) -> WorkerHandoff {
        assert!(me < to.len() && to[me].is_none());
        WorkerHandoff { me, to }
    }
}

impl<Cx: Send + 'static> ExpandNode<Cx> for WorkerHandoff {
    type Next = WorkerHandoffNext;
    type Counter = WorkerHandoffCounter;
    const RECEIVES: engine::Receives = engine::Receives::Ethernet;

    fn name(&self) -> &'static str {
        "worker-handoff"
    }

    fn expand(
        &mut self,
        _cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        let target = engine::hash::reduce(crate::flow::frame_flow_hash(pool.get(bi).bytes()), self.to.len() as u32) as usize;
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
