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
//! hash is the kernel's or the NIC's) and moves only those frames. A packet such state
//! meets on the wrong worker further on (out of a tunnel, whose outer header steered it;
//! made whole from fragments) goes by `resume-handoff` and enters the other worker at
//! `ip-resume`, past the input checks it passed.
use engine::handoff::{HandoffKind, LaneTx};
use engine::{BufIdx, Counts, ExpandNode, Pool};

engine::next_nodes! {
    pub enum WorkerHandoffNext { EthernetInput = "ethernet-input" }
}

engine::counters! {
    pub enum WorkerHandoffCounter {
        HandedOff(Info, "handed-off", "frames (packets, resume-handoff) sent to another worker to process"),
        Kept(Info, "kept", "frames (packets) this worker processes itself"),
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
        hand_over(lane, counts, pool.get_mut(bi), HandoffKind::Rx)
    }

    /// Also at every loop's end: a batch held for a receiver that was behind.
    const EACH_LOOP: bool = true;

    fn end_of_vector(&mut self, _cx: &mut Cx) {
        flush(&mut self.to);
    }
}

/// `buf` (received on its `rx_if`) into `lane` as `kind`, counted; the dispatcher then
/// frees the buffer: its bytes travel in the lane frame.
fn hand_over(
    lane: &mut LaneTx,
    counts: &mut Counts<'_, WorkerHandoffCounter>,
    buf: &mut engine::Buffer,
    kind: HandoffKind,
) -> Result<(), WorkerHandoffCounter> {
    let rx_if = buf.meta.rx_if;
    if lane.push(buf, rx_if, kind) {
        counts.inc(WorkerHandoffCounter::HandedOff);
        Ok(())
    } else {
        Err(WorkerHandoffCounter::LaneFull)
    }
}

/// The batches every lane of `to` is filling sent (a vector's end).
fn flush(to: &mut [Option<LaneTx>]) {
    for lane in to.iter_mut().flatten() {
        lane.flush();
    }
}

engine::next_nodes! {
    pub enum ResumeHandoffNext { Resume = "ip-resume" }
}

/// `resume-handoff`: an IP packet that a feature met on a worker other than the one
/// holding its state, sent to that worker (the sender names it in `meta.param`). It
/// passed its input checks here, and perhaps came out of a tunnel here (the load
/// balancer's client behind a tunnel: its packets were steered by their outer header),
/// so it does not enter the other worker as a received frame, which would check it
/// again on the link it came by (uRPF, the link's SPD); it continues at `ip-resume`.
pub struct ResumeHandoff {
    me: usize,
    /// `to[k]`: the lane to worker `k`; `None` for this worker.
    to: Vec<Option<LaneTx>>,
}

impl ResumeHandoff {
    /// Worker `me`'s node, with its lanes to the others (`vec![None]` alone).
    pub fn new(me: usize, to: Vec<Option<LaneTx>>) -> ResumeHandoff {
        assert!(me < to.len() && to[me].is_none());
        ResumeHandoff { me, to }
    }
}

impl<Cx: Send + 'static> ExpandNode<Cx> for ResumeHandoff {
    type Next = ResumeHandoffNext;
    type Counter = WorkerHandoffCounter;

    fn name(&self) -> &'static str {
        "resume-handoff"
    }

    fn expand(
        &mut self,
        _cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        let buf = pool.get_mut(bi);
        let target = buf.meta.param as usize;
        let Some(Some(lane)) = self.to.get_mut(target) else {
            debug_assert!(target == self.me, "worker {target} of {}", self.to.len());
            counts.inc(WorkerHandoffCounter::Kept);
            out.push((bi, ResumeHandoffNext::Resume));
            return Ok(());
        };
        hand_over(lane, counts, buf, HandoffKind::Resume)
    }

    /// Also at every loop's end: a batch held for a receiver that was behind.
    const EACH_LOOP: bool = true;

    fn end_of_vector(&mut self, _cx: &mut Cx) {
        flush(&mut self.to);
    }
}

engine::next_nodes! {
    pub enum IpResumeNext { Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup" }
}

engine::counters! {
    pub enum IpResumeCounter {
        NotIp(Error, "not-ip", "a resumed packet that is neither IPv4 nor IPv6 (a sender's bug)"),
    }
}

/// `ip-resume`: where a packet another worker handed over with `resume-handoff` enters
/// this worker's graph: its lookup, as if it had just passed `ipN-input` here.
pub struct IpResume;

impl<Cx: Send + 'static> engine::Node<Cx> for IpResume {
    type Next = IpResumeNext;
    type Counter = IpResumeCounter;

    fn name(&self) -> &'static str {
        "ip-resume"
    }

    fn process(
        &mut self,
        _cx: &mut Cx,
        _: &mut Counts<'_, Self::Counter>,
        buf: &mut engine::Buffer,
    ) -> engine::Verdict<Self::Next, Self::Counter> {
        match buf.bytes().first().map(|b| b >> 4) {
            Some(4) => engine::Verdict::Next(IpResumeNext::Ip4Lookup),
            Some(6) => engine::Verdict::Next(IpResumeNext::Ip6Lookup),
            _ => engine::Verdict::Drop(IpResumeCounter::NotIp),
        }
    }
}
