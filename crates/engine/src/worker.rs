//! One worker thread's run-to-completion loop.
//!
//! Each iteration: answer control requests, let the context pick up newly published
//! tables, poll every receiving device for one vector, run the graph until it is
//! empty, hand each transmit queue to its device. Nothing here blocks on the packet
//! path; control requests are answered between vectors.

use crate::buffer::{BufIdx, IfIndex};
use crate::clock;
use crate::device::{Device, DropSink, FrameSink, RxStatus};
use crate::graph::{DropFilter, Graph, NodeId};
use crate::handoff::{HandoffKind, LaneRx};
use crate::pool::Pool;
use crate::stats::{PortCounters, PortSnapshot, Snapshot};
use crate::trace::TraceRecord;
use crate::VECTOR_SIZE;
use crossbeam_channel::{Receiver, Sender};

/// Empty polls before a worker waits instead of spinning.
const IDLE_SPINS: u32 = 256;
/// Longest wait in `poll`, in milliseconds (bounds the control-request latency).
const IDLE_WAIT_MS: u8 = 1;

/// Per-worker feature state the graph's nodes share (tables, rate limiters, …).
pub trait Context: Send {
    /// Called once per loop iteration, between vectors: pick up published tables.
    fn refresh(&mut self) {}
    /// The context for a control-plane reader ([`WorkerCmd::Inspect`]); none by default.
    fn as_any(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}

/// One interface with a device on this worker.
pub struct Port {
    pub if_index: IfIndex,
    pub name: String,
    pub device: Box<dyn Device>,
    /// The input node its packets enter through (`<kind>-input`); none for
    /// transmit-only devices.
    pub input: Option<NodeId>,
    pub counters: PortCounters,
    /// A running capture of this interface (`pcap trace`).
    pub capture: Option<Box<dyn FrameSink>>,
    rx_done: bool,
    /// [`Device::each_loop`], asked once.
    each_loop: bool,
}

impl Port {
    pub fn new(if_index: IfIndex, name: String, device: Box<dyn Device>, input: Option<NodeId>) -> Port {
        let rx_done = !device.has_rx() || input.is_none();
        let each_loop = device.each_loop();
        Port { if_index, name, device, input, counters: PortCounters::default(), capture: None, rx_done, each_loop }
    }
}

/// Requests from the control plane, answered between vectors.
pub enum WorkerCmd {
    Snapshot(Sender<Snapshot>),
    ClearRuntime,
    TraceAdd {
        node: String,
        count: u32,
        reply: Sender<Result<(), String>>,
    },
    TraceShow(Sender<Vec<TraceRecord>>),
    TraceClear,
    /// Start (`Some`) or stop (`None`) capturing an interface's frames.
    Capture {
        interface: String,
        sink: Option<Box<dyn FrameSink>>,
        reply: Sender<Result<(), String>>,
    },
    /// Start (`Some`) or stop (`None`) capturing dropped packets (those `filter`
    /// names); the reply says whether a capture was running before.
    CaptureDrops {
        sink: Option<Box<dyn DropSink>>,
        filter: DropFilter,
        reply: Sender<Result<bool, String>>,
    },
    /// Send frames the control plane built (a UPF's End Markers) into the graph at this
    /// input node; frames that find no free buffer are lost, as on a full ring.
    Inject {
        input: String,
        frames: Vec<Vec<u8>>,
    },
    /// Read the worker's context between vectors (`show lb sessions`): the closure gets
    /// [`Context::as_any`] and sends what it found back itself.
    Inspect(Box<dyn FnOnce(Option<&mut dyn std::any::Any>) + Send>),
    /// Start polling and sending on an interface added at run time; its packets enter
    /// through the input node named `input` (none: transmit only).
    AddPort {
        if_index: IfIndex,
        name: String,
        device: Box<dyn Device>,
        input: Option<String>,
        reply: Sender<Result<(), String>>,
    },
    /// Let the packets an interface receives enter through the input node named `input`
    /// from the next poll on (a reload moving the punt link: its first node is
    /// `ip-punt-inject`, the others' their kind's); its device stays open, its counters
    /// and queues as they are. A transmit-only port (no input) is left as it is.
    SetPortInput {
        if_index: IfIndex,
        input: String,
        /// `Ok(false)`: no such port here, or a transmit-only one.
        reply: Sender<Result<bool, String>>,
    },
    /// Stop using an interface removed at run time: its device is flushed and closed,
    /// packets queued to it are freed (and from then on counted as `no-device`).
    RemovePort {
        if_index: IfIndex,
        reply: Sender<Result<(), String>>,
    },
    Stop,
}

/// Hand each frame to the port's capture; drop the capture once it is done.
fn capture(port: &mut Port, pool: &Pool, bufs: &[BufIdx]) {
    if let Some(c) = port.capture.as_mut() {
        for &b in bufs {
            if !c.record(pool.get(b).bytes()) {
                port.capture = None;
                return;
            }
        }
    }
}

pub struct Worker<C: Context> {
    pub id: usize,
    pub graph: Graph<C>,
    pub pool: Pool,
    pub ports: Vec<Port>,
    pub cx: C,
    /// `ports` index by interface index.
    port_of: Vec<Option<usize>>,
    scratch: Vec<BufIdx>,
    /// Never wait when idle (see `run`).
    pub busy_poll: bool,
    /// Lanes from the other workers, and the input nodes received packets
    /// ([`HandoffKind::Rx`]) and resumed ones ([`HandoffKind::Resume`]) enter by.
    handoff: Vec<LaneRx>,
    handoff_input: Option<(NodeId, NodeId)>,
    /// The resumed packets of one poll of the lanes.
    resumed: Vec<BufIdx>,
    /// Packets received from other workers' lanes (counted with `show runtime`'s
    /// per-worker receive figures).
    handoff_rx: u64,
    loops: u64,
    cleared_at: u64,
}

impl<C: Context> Worker<C> {
    pub fn new(id: usize, graph: Graph<C>, pool: Pool, ports: Vec<Port>, cx: C) -> Self {
        let mut w = Worker {
            id,
            graph,
            pool,
            ports,
            cx,
            port_of: Vec::new(),
            scratch: Vec::with_capacity(VECTOR_SIZE),
            busy_poll: false,
            handoff: Vec::new(),
            handoff_input: None,
            resumed: Vec::new(),
            handoff_rx: 0,
            loops: 0,
            cleared_at: clock::now(),
        };
        w.index_ports();
        w
    }

    /// Rebuild the interface-index map and the names traces show, after the ports changed.
    fn index_ports(&mut self) {
        let max_if = self.ports.iter().map(|p| p.if_index.get() + 1).max().unwrap_or(0);
        let mut names: Vec<String> = (0..max_if).map(|i| format!("if{i}")).collect();
        self.port_of = vec![None; max_if];
        for (i, p) in self.ports.iter().enumerate() {
            names[p.if_index.get()] = p.name.clone();
            self.port_of[p.if_index.get()] = Some(i);
        }
        self.graph.set_interface_names(names);
    }

    /// Add a port between vectors (an interface added at run time). Its interface index
    /// must be free on this worker, and `input`, if any, an input node of the graph.
    pub fn add_port(&mut self, if_index: IfIndex, name: String, device: Box<dyn Device>, input: Option<&str>) -> Result<(), String> {
        if self.port_of.get(if_index.get()).copied().flatten().is_some() {
            return Err(format!("interface index {} is in use on worker {}", if_index.get(), self.id));
        }
        let input = match input {
            Some(n) => Some(self.graph.node_id(n).map_err(|e| e.to_string())?),
            None => None,
        };
        self.ports.push(Port::new(if_index, name, device, input));
        self.index_ports();
        Ok(())
    }

    /// Between vectors, send what the port of `if_index` receives to the input node
    /// `input` from now on ([`WorkerCmd::SetPortInput`]). `Ok(false)`: no such port on
    /// this worker, or one without an input (transmit-only), left alone.
    pub fn set_port_input(&mut self, if_index: IfIndex, input: &str) -> Result<bool, String> {
        let Some(pi) = self.port_of.get(if_index.get()).copied().flatten() else { return Ok(false) };
        if self.ports[pi].input.is_none() {
            return Ok(false);
        }
        let id = self.graph.node_id(input).map_err(|e| e.to_string())?;
        self.ports[pi].input = Some(id);
        Ok(true)
    }

    /// Remove a port between vectors: flush its device and close it (by dropping it),
    /// free what was queued for it. Later packets routed there are `no-device` drops.
    pub fn remove_port(&mut self, if_index: IfIndex) -> Result<(), String> {
        let Some(pi) = self.port_of.get(if_index.get()).copied().flatten() else {
            return Err(format!("no interface with index {} on worker {}", if_index.get(), self.id));
        };
        let mut port = self.ports.remove(pi);
        if let Err(e) = port.device.flush() {
            eprintln!("vecgate: flushing {}: {e}", port.name);
        }
        if let Some(q) = self.graph.tx_queue(if_index) {
            let n = q.len() as u64;
            self.pool.free_many(q);
            q.clear();
            self.graph.count_no_device(n);
        }
        self.index_ports();
        Ok(())
    }

    /// True when every receiving device is exhausted (pcap files read, counts sent).
    pub fn inputs_done(&self) -> bool {
        self.ports.iter().all(|p| p.rx_done)
    }

    /// Receive from the other workers' lanes (see [`crate::handoff`]): handed-off received
    /// packets enter the graph at `input`, resumed ones at `resume`, handed-off
    /// transmits go to their device.
    pub fn set_handoff(&mut self, from: Vec<LaneRx>, input: NodeId, resume: NodeId) {
        self.handoff = from;
        self.handoff_input = Some((input, resume));
    }

    /// One vector's worth from the lanes.
    fn poll_handoff(&mut self) -> usize {
        let Some((input, resume)) = self.handoff_input else { return 0 };
        let t0 = clock::now();
        self.scratch.clear();
        self.resumed.clear();
        let mut moved = 0;
        for lane in &mut self.handoff {
            while moved < VECTOR_SIZE {
                let Some((b, ifx, kind)) = lane.pop(&mut self.pool) else { break };
                moved += 1;
                match kind {
                    HandoffKind::Rx => {
                        self.pool.get_mut(b).meta.rx_if = ifx;
                        self.scratch.push(b);
                    }
                    HandoffKind::Tx => self.graph.queue_tx(ifx, b),
                    HandoffKind::Resume => {
                        self.pool.get_mut(b).meta.rx_if = ifx;
                        self.resumed.push(b);
                    }
                }
            }
        }
        let t1 = clock::now();
        self.graph.inject(input, &mut self.pool, &self.scratch, t1.wrapping_sub(t0));
        if !self.resumed.is_empty() {
            self.graph.inject(resume, &mut self.pool, &self.resumed, 0);
        }
        self.handoff_rx += (self.scratch.len() + self.resumed.len()) as u64;
        moved
    }

    /// One loop iteration; returns the packets received.
    pub fn poll_once(&mut self) -> usize {
        self.loops += 1;
        self.cx.refresh();
        let mut received = 0;
        for p in 0..self.ports.len() {
            if self.ports[p].rx_done {
                continue;
            }
            let t0 = clock::now();
            self.scratch.clear();
            let port = &mut self.ports[p];
            let status = port.device.rx(&mut self.pool, &mut self.scratch, VECTOR_SIZE);
            let mut bytes = 0;
            for &b in &self.scratch {
                let buf = self.pool.get_mut(b);
                // Devices hand over fresh metadata (with offload state from a vnet
                // header, where they have one); the port is ours to fill in.
                buf.meta.rx_if = port.if_index;
                bytes += buf.len() as u64;
            }
            capture(port, &self.pool, &self.scratch);
            port.counters.rx_packets += self.scratch.len() as u64;
            port.counters.rx_bytes += bytes;
            if status == RxStatus::Exhausted {
                port.rx_done = true;
            }
            received += self.scratch.len();
            let t1 = clock::now();
            match port.input {
                Some(input) => self.graph.inject(input, &mut self.pool, &self.scratch, t1.wrapping_sub(t0)),
                None => self.pool.free_many(&self.scratch),
            }
        }
        received += self.poll_handoff();
        self.graph.run(&mut self.cx, &mut self.pool);
        self.flush_tx();
        // What the handoff nodes and devices held while a receiver was behind.
        self.graph.end_of_loop(&mut self.cx);
        for p in self.ports.iter_mut().filter(|p| p.each_loop) {
            p.device.end_of_loop();
        }
        received
    }

    fn flush_tx(&mut self) {
        let t0 = clock::now();
        let mut packets = 0u64;
        for q in 0..self.graph.tx.len() {
            let ifx = IfIndex(q as u16);
            let Some(queue) = self.graph.tx_queue(ifx) else {
                continue;
            };
            if queue.is_empty() {
                continue;
            }
            match self.port_of.get(q).copied().flatten() {
                Some(pi) => {
                    let port = &mut self.ports[pi];
                    // Chained packets go whole to a capture and to a device that does not
                    // gather (asked once a queue: one load while no chain is live).
                    if self.pool.has_chains() && (port.capture.is_some() || !port.device.takes_chains()) {
                        self.pool.linearize_all(queue);
                    }
                    capture(port, &self.pool, queue);
                    packets += queue.len() as u64;
                    let r = port.device.tx(&mut self.pool, queue);
                    port.counters.tx_packets += r.sent as u64;
                    port.counters.tx_bytes += r.sent_bytes as u64;
                    port.counters.tx_errors += r.failed as u64;
                }
                None => {
                    let n = queue.len() as u64;
                    self.pool.free_many(queue);
                    queue.clear();
                    self.graph.count_no_device(n);
                }
            }
        }
        let t1 = clock::now();
        self.graph.account_tx(packets, t1.wrapping_sub(t0));
    }

    /// Answer one control request; false means stop.
    pub fn handle(&mut self, cmd: WorkerCmd) -> bool {
        match cmd {
            WorkerCmd::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            WorkerCmd::ClearRuntime => self.clear_runtime(),
            WorkerCmd::TraceAdd { node, count, reply } => {
                let _ = reply.send(self.graph.trace_add(&node, count).map_err(|e| e.to_string()));
            }
            WorkerCmd::TraceShow(reply) => {
                let _ = reply.send(self.graph.trace_records().to_vec());
            }
            WorkerCmd::TraceClear => self.graph.trace_clear(),
            WorkerCmd::Capture { interface, sink, reply } => {
                let r = match self.ports.iter_mut().find(|p| p.name == interface) {
                    // Stopping a capture that is not running is an error: the operator
                    // expected a file to be complete and it never started (or ended early).
                    Some(p) if sink.is_none() && p.capture.is_none() => {
                        Err(format!("no capture running on {interface} (none was started, or it ended at its frame count)"))
                    }
                    Some(p) => {
                        p.capture = sink;
                        Ok(())
                    }
                    None => Err(format!("no interface {interface:?}")),
                };
                let _ = reply.send(r);
            }
            WorkerCmd::CaptureDrops { sink, filter, reply } => {
                let was = self.graph.capturing_drops();
                let _ = reply.send(self.graph.set_drop_capture(sink, &filter).map(|()| was).map_err(|e| e.to_string()));
            }
            WorkerCmd::Inject { input, frames } => {
                if let Ok(id) = self.graph.node_id(&input) {
                    let mut bufs = Vec::with_capacity(frames.len());
                    for f in &frames {
                        if let Some(b) = self.pool.alloc(f.len()) {
                            if self.pool.get_mut(b).write(f).is_ok() {
                                bufs.push(b);
                            } else {
                                self.pool.free(b);
                            }
                        }
                    }
                    self.graph.inject(id, &mut self.pool, &bufs, 0);
                }
            }
            WorkerCmd::Inspect(read) => read(self.cx.as_any()),
            WorkerCmd::AddPort { if_index, name, device, input, reply } => {
                let _ = reply.send(self.add_port(if_index, name, device, input.as_deref()));
            }
            WorkerCmd::SetPortInput { if_index, input, reply } => {
                let _ = reply.send(self.set_port_input(if_index, &input));
            }
            WorkerCmd::RemovePort { if_index, reply } => {
                let _ = reply.send(self.remove_port(if_index));
            }
            WorkerCmd::Stop => return false,
        }
        true
    }

    /// Wait for packets after a run of empty polls: in `poll` on every receiving
    /// device's descriptor when they all have one (woken by the first arrival; at most
    /// `IDLE_WAIT` so control requests are answered), else a short nap.
    fn idle_wait(&self) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = Vec::with_capacity(self.ports.len());
        for p in self.ports.iter().filter(|p| !p.rx_done) {
            match p.device.poll_fd() {
                Some(fd) => fds.push(PollFd::new(fd, PollFlags::POLLIN)),
                None => {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                    return;
                }
            }
        }
        // Handoff lanes have no descriptor to wait on: nap briefly instead, so a handed
        // packet waits ~100 µs at most, not the whole poll timeout.
        if fds.is_empty() || !self.handoff.is_empty() {
            std::thread::sleep(std::time::Duration::from_micros(100));
            return;
        }
        let _ = poll(&mut fds, PollTimeout::from(IDLE_WAIT_MS));
    }

    /// Run until told to stop (or, with `until_inputs_done`, until every input is
    /// exhausted and the graph drained). When idle it waits (see `idle_wait`) so an idle
    /// gateway does not spin a core at 100 %.
    pub fn run(&mut self, cmds: &Receiver<WorkerCmd>, until_inputs_done: bool) {
        let mut idle = 0u32;
        loop {
            while let Ok(cmd) = cmds.try_recv() {
                if !self.handle(cmd) {
                    self.shutdown();
                    return;
                }
            }
            if self.poll_once() == 0 {
                if until_inputs_done && self.inputs_done() {
                    self.drain();
                    self.shutdown();
                    return;
                }
                idle += 1;
                if idle > IDLE_SPINS && !self.busy_poll {
                    self.idle_wait();
                }
            } else {
                idle = 0;
            }
        }
    }

    /// The inputs are done and the graph ran dry: an empty frame to each drained input
    /// ([`crate::graph::GraphBuilder::add_input_drained`]), so what nodes still hold is
    /// sent or dropped, and counted, before the run ends.
    pub fn drain(&mut self) {
        let inputs = self.graph.drained_inputs().to_vec();
        if inputs.is_empty() {
            return;
        }
        for id in inputs {
            if let Some(b) = self.pool.alloc(0) {
                self.graph.inject(id, &mut self.pool, &[b], 0);
            }
        }
        self.graph.run(&mut self.cx, &mut self.pool);
        self.flush_tx();
    }

    /// Flush devices (pcap writers) before exit.
    pub fn shutdown(&mut self) {
        for p in &mut self.ports {
            if let Err(e) = p.device.flush() {
                eprintln!("vecgate: flushing {}: {e}", p.name);
            }
        }
    }

    /// Keep each vector's time per node from now on (for `vecgate bench`): see
    /// [`crate::graph::Graph::sample_vectors`].
    pub fn sample_vectors(&mut self, on: bool) {
        self.graph.sample_vectors(on);
    }

    pub fn clear_runtime(&mut self) {
        self.graph.clear_runtime();
        self.graph.clear_counters();
        for p in &mut self.ports {
            p.counters = PortCounters::default();
        }
        self.handoff_rx = 0;
        self.loops = 0;
        self.cleared_at = clock::now();
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            worker: self.id,
            tsc_hz: clock::hz(),
            elapsed_cycles: clock::now().wrapping_sub(self.cleared_at),
            loops: self.loops,
            nodes: self.graph.node_snapshots(),
            counters: self.graph.counter_snapshots(),
            ports: self
                .ports
                .iter()
                .map(|p| PortSnapshot {
                    if_index: p.if_index.0,
                    name: p.name.clone(),
                    kind: p.device.kind(),
                    counters: p.counters.clone(),
                    device: p.device.counters().into_iter().filter(|c| c.1 != 0).collect(),
                })
                .collect(),
            pool: self.pool.stats(),
            worker_rx: vec![(self.id, self.ports.iter().map(|p| p.counters.rx_packets).sum::<u64>() + self.handoff_rx)],
        }
    }
}
