//! The node graph: nodes wired by name, validated when built, dispatched in vectors.
//!
//! Every graph has three engine nodes: `error-drop` (frees dropped buffers; the reason
//! was counted by the dropping node), `interface-output` (queues buffers for their
//! `tx_if`, a run of packets for one interface in one copy) and `interface-tx` (the devices' transmit time, accounted by the worker).
//! Input nodes (`pg-input`, `pcap-input`, …) are graph members too, so their time and
//! packets show in the runtime and `trace add` can name them.
//!
//! The per-packet toll the dispatcher adds to every node's function is kept small:
//! one bounds-checked buffer lookup, the node's function inlined into its vector loop,
//! and a *speculative enqueue* (VPP's): each node remembers the next node its packets
//! mostly took, a packet going there is written to a local run (a store and an
//! increment) joined to that node's queue in one copy after the vector, and only the
//! others are pushed to their queue one by one. Arrival order per queue is kept.
//! (docs/PERFORMANCE.md, "The per-packet toll": 2-6 % fewer instructions per packet on
//! every path measured.)

use crate::buffer::{BufIdx, Buffer, DropReason, IfIndex};
use crate::clock;
use crate::device::{DropSink, DroppedAs};
use crate::node::{CounterInfo, Counters, Counts, Enqueue, ExpandNode, NextNodes, Node, Receives, Taken, Verdict};
use crate::pool::Pool;
use crate::stats::{per_packet, CounterSnapshot, NodeRuntime, NodeSnapshot};
use crate::trace::{TraceLog, TraceRecord};
use crate::VECTOR_SIZE;

pub const ERROR_DROP: &str = "error-drop";
pub const INTERFACE_OUTPUT: &str = "interface-output";
pub const INTERFACE_TX: &str = "interface-tx";
/// Slots of the built-in nodes: `GraphBuilder::new` adds them first, in this order.
const ERROR_DROP_SLOT: usize = 0;
const INTERFACE_OUTPUT_SLOT: usize = 1;
const INTERFACE_TX_SLOT: usize = 2;

/// A node's position in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeId(pub(crate) usize);

impl NodeId {
    pub fn get(self) -> usize {
        self.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("node {from:?} names next node {to:?}, which is not in the graph")]
    UnknownNext { from: String, to: String },
    #[error("two nodes are named {0:?}")]
    DuplicateName(String),
    #[error("no node named {0:?}")]
    NoSuchNode(String),
    #[error("{0:?} is not an input node (trace add takes an input node)")]
    NotAnInput(String),
    #[error("trace add {0}: expected a packet count of at least 1")]
    ZeroTraceCount(String),
    #[error("no input node named {name:?}; input nodes: {inputs}")]
    NoSuchInput { name: String, inputs: String },
    #[error("no counter named {counter:?} in {scope}")]
    NoSuchCounter { counter: String, scope: String },
}

crate::counters! {
    /// `interface-output`'s own drops.
    pub enum OutputCounter {
        NoDevice(Error, "no-device", "transmit interface has no device"),
    }
}

/// The dispatch inputs a node's runner borrows for one vector.
struct DispatchIo<'a> {
    pool: &'a mut Pool,
    input: &'a [BufIdx],
    next: &'a [usize],
    queues: &'a mut [Vec<BufIdx>],
    counters: &'a mut [u64],
    node: u16,
    drop_queue: usize,
    trace: Option<&'a mut TraceLog>,
}

/// Object-safe wrapper so the graph can hold nodes of different types.
trait Runner<C>: Send {
    fn run(&mut self, cx: &mut C, io: DispatchIo<'_>);
    /// Whether [`Self::end_of_loop`] has work ([`ExpandNode::EACH_LOOP`]).
    fn each_loop(&self) -> bool {
        false
    }
    /// At the end of every worker loop, whether or not the node ran.
    fn end_of_loop(&mut self, _cx: &mut C) {}
}

/// A [`Node`] and the next node its packets are speculated to take (see `run`).
struct NodeBox<N> {
    node: N,
    /// Index (into the node's next nodes) of the next node the previous vector's
    /// packets mostly took: VPP's "speculative enqueue" target.
    speculated: usize,
}

impl<C, N: Node<C>> Runner<C> for NodeBox<N> {
    fn run(&mut self, cx: &mut C, io: DispatchIo<'_>) {
        let DispatchIo { pool, input, next, queues, counters, node, drop_queue, trace } = io;
        if N::RUNS_VECTORS && trace.is_none() {
            let mut out = Enqueue::<N::Next, N::Counter>::new(self.speculated, next, queues, counters, node, drop_queue);
            self.node.run_vector(cx, pool, input, &mut out);
            self.speculated = out.finish();
            self.node.end_of_vector(cx);
            return;
        }
        if trace.is_some() {
            self.node.prepare_traced(cx, pool, input);
        } else {
            self.node.prepare(cx, pool, input);
        }
        // Exactly one entry per next node: the index a verdict carries is then in range
        // by its type, and the per-packet bounds check on it goes.
        let next = &next[..N::Next::NAMES.len()];
        // Likewise one slot per counter: a node's `counts.inc` needs no bounds check.
        let counters = &mut counters[..N::Counter::INFO.len()];
        match trace {
            None => {
                // Speculative enqueue: a packet that takes the speculated next node (most
                // do: a vector is mostly one kind of traffic) is written to a local run,
                // with its index in a register, and the run joins that node's queue in
                // one copy after the vector; only the others are pushed one by one to
                // their queue (a load of the queue index, a bounds check, a `Vec` push
                // through memory). Each queue still gets its packets in arrival order.
                // `Enqueue::push` does the same for the nodes that run vectors; this loop
                // keeps the state in variables of its own: through an `Enqueue` it
                // compiled to 3-6 more instructions a packet on other nodes (registers
                // spilled; docs/PERFORMANCE.md, the SPD hit's eleventh session).
                let mut run = [BufIdx(0); VECTOR_SIZE];
                let mut taken = 0usize;
                let speculated = self.speculated.min(next.len().saturating_sub(1));
                let mut missed = 0usize;
                let mut last_miss = speculated;
                // Once per vector: the slice's base and length stay local, where
                // `pool.get_mut` reloaded them after every store into a buffer.
                let bufs = pool.buffers_mut();
                for &bi in input {
                    let b = &mut bufs[bi.get()];
                    let mut counts = Counts::new(counters);
                    match self.node.process(cx, &mut counts, b) {
                        Verdict::Next(n) if n.index() == speculated => {
                            // The dispatcher's vectors hold at most VECTOR_SIZE packets,
                            // so the mask never wraps: it only spares the bounds check.
                            run[taken & (VECTOR_SIZE - 1)] = bi;
                            taken += 1;
                        }
                        Verdict::Next(n) => {
                            missed += 1;
                            last_miss = n.index();
                            queues[next[n.index()]].push(bi);
                        }
                        Verdict::Drop(c) => {
                            counters[c.index()] += 1;
                            b.meta.drop = Some(DropReason { node, counter: c.index() as u16 });
                            queues[drop_queue].push(bi);
                        }
                    }
                }
                if taken > 0 {
                    queues[next[speculated]].extend_from_slice(&run[..taken.min(VECTOR_SIZE)]);
                }
                // Most packets went elsewhere: speculate on where the last of them went.
                if missed > taken {
                    self.speculated = last_miss;
                }
            }
            Some(log) => {
                for &bi in input {
                    let b = pool.get_mut(bi);
                    let traced = b.meta.trace;
                    let text = traced.map(|_| self.node.trace(b));
                    let mut counts = Counts::new(counters);
                    let verdict = self.node.process(cx, &mut counts, b);
                    let shown = match verdict {
                        Verdict::Next(n) => {
                            queues[next[n.index()]].push(bi);
                            N::Next::NAMES[n.index()].to_string()
                        }
                        Verdict::Drop(c) => {
                            counters[c.index()] += 1;
                            b.meta.drop = Some(DropReason { node, counter: c.index() as u16 });
                            queues[drop_queue].push(bi);
                            format!("drop: {}", <N::Counter as Counters>::INFO[c.index()].name)
                        }
                    };
                    if let (Some(id), Some(text)) = (traced, text) {
                        log.push(TraceRecord { packet: id.get(), node: self.node.name(), text, verdict: shown, time_ns: 0 });
                    }
                }
            }
        }
        self.node.end_of_vector(cx);
    }
}

/// Runs an [`ExpandNode`]: one call per packet, or per run of packets the node takes at
/// once ([`ExpandNode::expand_run`]), its outputs queued to their next nodes.
struct ExpandRunner<N: ExpandNode<C>, C> {
    node: N,
    out: Vec<(BufIdx, N::Next)>,
    _c: core::marker::PhantomData<fn(&mut C)>,
}

impl<C, N: ExpandNode<C>> Runner<C> for ExpandRunner<N, C> {
    fn each_loop(&self) -> bool {
        N::EACH_LOOP
    }

    fn end_of_loop(&mut self, cx: &mut C) {
        self.node.end_of_vector(cx);
    }

    fn run(&mut self, cx: &mut C, io: DispatchIo<'_>) {
        let DispatchIo { pool, input, next, queues, counters, node, drop_queue, trace } = io;
        let mut trace = trace;
        self.node.prepare(cx, pool, input);
        if !N::TAKES_RUNS {
            for &bi in input {
                self.out.clear();
                let traced = pool.get(bi).meta.trace;
                let r = {
                    let mut counts = Counts::new(counters);
                    self.node.expand(cx, &mut counts, pool, bi, &mut self.out)
                };
                mark_dropped::<C, N>(&self.out, pool, node);
                let reused = queue_expanded(&self.out, bi, next, queues);
                if let Some(log) = trace.as_deref_mut() {
                    trace_expanded(log, self.node.name(), pool, &[bi], traced, self.out.len(), r);
                }
                if !reused {
                    settle(pool, queues, counters, node, drop_queue, bi, r);
                }
            }
            self.node.end_of_vector(cx);
            return;
        }
        let mut i = 0;
        while i < input.len() {
            let rest = &input[i..];
            let bi = rest[0];
            self.out.clear();
            // Read before the call, which may rewrite the packet it reuses.
            let traced = if trace.is_some() { pool.get(bi).meta.trace } else { None };
            let (n, r) = {
                let mut counts = Counts::new(counters);
                self.node.expand_run(cx, &mut counts, pool, rest, &mut self.out)
            };
            // At least the first packet, at most what is left (a node's miscount must not
            // skip or repeat packets).
            let taken = &rest[..n.clamp(1, rest.len())];
            i += taken.len();
            let held = matches!(r, Ok(Taken::Held));
            let r = r.map(|_| ());
            mark_dropped::<C, N>(&self.out, pool, node);
            let reused = queue_expanded(&self.out, bi, next, queues);
            if let Some(log) = trace.as_deref_mut() {
                trace_expanded(log, self.node.name(), pool, taken, traced, self.out.len(), r);
            }
            if held {
                // The pushed packets hold the rest (a chained parcel's extents).
                continue;
            }
            if !reused {
                settle(pool, queues, counters, node, drop_queue, bi, r);
            }
            let later = &taken[1..];
            if later.is_empty() {
                continue;
            }
            // A run's packets are freed in one batch unless one of them went on.
            if r.is_ok() && !self.out.iter().any(|(b, _)| later.contains(b)) {
                pool.free_many(later);
            } else {
                for &b in later {
                    if !self.out.iter().any(|&(o, _)| o == b) {
                        settle(pool, queues, counters, node, drop_queue, b, r);
                    }
                }
            }
        }
        self.node.end_of_vector(cx);
    }
}

/// Give each output an expand node sends to `error-drop` its reason
/// ([`ExpandNode::dropped_as`]); no code for a node that names none.
#[inline(always)]
fn mark_dropped<C, N: ExpandNode<C>>(out: &[(BufIdx, N::Next)], pool: &mut Pool, node: u16) {
    for &(b, n) in out {
        if let Some(c) = N::dropped_as(n) {
            pool.get_mut(b).meta.drop = Some(DropReason { node, counter: c.index() as u16 });
        }
    }
}

/// Queue an expand call's outputs to their next nodes; true if the input packet `bi` is
/// among them (reused).
#[inline(always)]
fn queue_expanded<N: NextNodes>(out: &[(BufIdx, N)], bi: BufIdx, next: &[usize], queues: &mut [Vec<BufIdx>]) -> bool {
    let mut reused = false;
    for &(b, n) in out {
        reused |= b == bi;
        queues[next[n.index()]].push(b);
    }
    reused
}

/// `show trace` records for the traced packets an expand call took: the first one's mark
/// `first` read before the call (which may rewrite the packet it reuses), the others'
/// after it (a run is taken, not rewritten, so their marks are intact).
fn trace_expanded<K: Counters>(
    log: &mut TraceLog,
    node: &'static str,
    pool: &Pool,
    taken: &[BufIdx],
    first: Option<core::num::NonZeroU32>,
    outputs: usize,
    r: Result<(), K>,
) {
    let verdict = match r {
        Ok(()) if taken.len() > 1 => format!("{outputs} packets out of {} taken", taken.len()),
        Ok(()) => format!("{outputs} packets out"),
        Err(c) => format!("drop: {}", K::INFO[c.index()].name),
    };
    for (k, &b) in taken.iter().enumerate() {
        let id = if k == 0 { first } else { pool.get(b).meta.trace };
        if let Some(id) = id {
            log.push(TraceRecord {
                packet: id.get(),
                node,
                text: format!("len {}", pool.get(b).len()),
                verdict: verdict.clone(),
                time_ns: 0,
            });
        }
    }
}

/// An expand node's input packet that did not go on: freed, or on `Err` dropped under
/// the counter.
#[inline(always)]
fn settle<K: Counters>(
    pool: &mut Pool,
    queues: &mut [Vec<BufIdx>],
    counters: &mut [u64],
    node: u16,
    drop_queue: usize,
    bi: BufIdx,
    r: Result<(), K>,
) {
    match r {
        Ok(()) => pool.free(bi),
        Err(c) => {
            counters[c.index()] += 1;
            pool.get_mut(bi).meta.drop = Some(DropReason { node, counter: c.index() as u16 });
            queues[drop_queue].push(bi);
        }
    }
}

/// What chooses the form of an [`EitherBox`] for a vector: the context alone, or the
/// context and the vector's packets.
enum Choose<C> {
    ByContext(fn(&mut C) -> bool),
    ByVector(fn(&mut C, &[Buffer], &[BufIdx]) -> bool),
}

/// One node in two forms, the form to run chosen once per vector
/// ([`GraphBuilder::add_either`], [`GraphBuilder::add_either_by_vector`]).
struct EitherBox<C, A, B> {
    first: NodeBox<A>,
    second: NodeBox<B>,
    use_first: Choose<C>,
}

impl<C: 'static, A: Node<C>, B: Node<C, Next = A::Next, Counter = A::Counter>> Runner<C> for EitherBox<C, A, B> {
    fn run(&mut self, cx: &mut C, io: DispatchIo<'_>) {
        let first = match self.use_first {
            Choose::ByContext(f) => f(cx),
            Choose::ByVector(f) => f(cx, io.pool.buffers(), io.input),
        };
        if first {
            run_form(&mut self.first, cx, io)
        } else {
            run_form(&mut self.second, cx, io)
        }
    }
}

/// One form's vector loop, kept a function of its own: inlined side by side with the
/// other form's, it compiled to more instructions a packet (registers shared by two
/// loops) than the same node added alone.
#[inline(never)]
fn run_form<C, N: Node<C>>(form: &mut NodeBox<N>, cx: &mut C, io: DispatchIo<'_>) {
    form.run(cx, io)
}

enum Kind<C> {
    Process(Box<dyn Runner<C>>),
    Input,
    ErrorDrop,
    InterfaceOutput,
    InterfaceTx,
}

impl<C> Kind<C> {
    fn label(&self) -> &'static str {
        match self {
            Kind::Process(_) => "internal",
            Kind::Input => "input",
            Kind::ErrorDrop => "drop",
            Kind::InterfaceOutput | Kind::InterfaceTx => "output",
        }
    }
}

struct Slot<C> {
    name: String,
    kind: Kind<C>,
    /// The node takes chained packets as they are ([`Node::TAKES_CHAINS`]).
    takes_chains: bool,
    /// Where its packets start ([`Node::RECEIVES`]): how a capture records its drops.
    receives: Receives,
    next_names: Vec<String>,
    next: Vec<usize>,
    counter_info: &'static [CounterInfo],
    counters: Vec<u64>,
    runtime: NodeRuntime,
    /// Each vector's (cycles, packets), while the graph samples vectors.
    samples: Vec<(u32, u32)>,
}

impl<C> Slot<C> {
    /// A vector of `packets` that took `cycles`, into the runtime (and the samples, when
    /// `sampling`).
    fn account_vector(&mut self, packets: u64, cycles: u64, sampling: bool) {
        self.runtime.vectors += 1;
        self.runtime.packets += packets;
        self.runtime.cycles += cycles;
        if sampling && self.samples.len() < MAX_SAMPLES {
            self.samples.push((cycles.min(u32::MAX as u64) as u32, packets.min(u32::MAX as u64) as u32));
        }
    }
}

/// Collects nodes, then resolves every next-node name.
pub struct GraphBuilder<C> {
    slots: Vec<Slot<C>>,
    /// Inputs that get an empty frame when a run to completion ends ([`Graph::drained_inputs`]).
    drained: Vec<String>,
}

impl<C: 'static> Default for GraphBuilder<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: 'static> GraphBuilder<C> {
    pub fn new() -> Self {
        let mut g = GraphBuilder { slots: Vec::new(), drained: Vec::new() };
        // `error-drop` frees (the pool lets extents go), `interface-output` reads the
        // metadata only: both take chains as they are.
        g.push(ERROR_DROP, Kind::ErrorDrop, vec![], &[], true, Receives::Ip);
        g.push(INTERFACE_OUTPUT, Kind::InterfaceOutput, vec![], OutputCounter::INFO, true, Receives::Ethernet);
        g.push(INTERFACE_TX, Kind::InterfaceTx, vec![], &[], true, Receives::Ethernet);
        g
    }

    fn push(
        &mut self,
        name: &str,
        kind: Kind<C>,
        next_names: Vec<String>,
        info: &'static [CounterInfo],
        takes_chains: bool,
        receives: Receives,
    ) -> NodeId {
        self.slots.push(Slot {
            name: name.to_string(),
            kind,
            takes_chains,
            receives,
            next: Vec::new(),
            next_names,
            counter_info: info,
            counters: vec![0; info.len()],
            runtime: NodeRuntime::default(),
            samples: Vec::new(),
        });
        NodeId(self.slots.len() - 1)
    }

    /// Add a processing node. Its next nodes are resolved in `build`.
    pub fn add<N: Node<C>>(&mut self, node: N) -> NodeId {
        let name = node.name();
        let next = N::Next::NAMES.iter().map(|s| s.to_string()).collect();
        let kind = Kind::Process(Box::new(NodeBox { node, speculated: 0 }));
        self.push(name, kind, next, <N::Counter as Counters>::INFO, N::TAKES_CHAINS, N::RECEIVES)
    }

    /// Add one node built in two forms with the same name, next nodes and counters,
    /// `use_first` choosing which runs, once per vector. For a feature that can be
    /// switched off at run time (per-tunnel counting): switched off, it costs one call a
    /// vector, where a per-packet test would keep its code in every packet's path (and
    /// that code's registers and layout cost even when the branch is never taken).
    pub fn add_either<A, B>(&mut self, first: A, second: B, use_first: fn(&mut C) -> bool) -> NodeId
    where
        A: Node<C>,
        B: Node<C, Next = A::Next, Counter = A::Counter>,
    {
        self.add_forms(first, second, Choose::ByContext(use_first))
    }

    /// [`GraphBuilder::add_either`] with the choice made from the vector as well (its
    /// buffers by index): for a case some vectors carry and most do not (IP parcels at
    /// `ethernet-input`), whose code inlined into the node's loop would cost every
    /// packet. Both forms must decide every packet alike: the choice is of code.
    pub fn add_either_by_vector<A, B>(&mut self, first: A, second: B, use_first: fn(&mut C, &[Buffer], &[BufIdx]) -> bool) -> NodeId
    where
        A: Node<C>,
        B: Node<C, Next = A::Next, Counter = A::Counter>,
    {
        self.add_forms(first, second, Choose::ByVector(use_first))
    }

    fn add_forms<A, B>(&mut self, first: A, second: B, use_first: Choose<C>) -> NodeId
    where
        A: Node<C>,
        B: Node<C, Next = A::Next, Counter = A::Counter>,
    {
        let name = first.name();
        assert_eq!(name, second.name(), "the two forms of a node have one name");
        let next = A::Next::NAMES.iter().map(|s| s.to_string()).collect();
        let runner =
            EitherBox { first: NodeBox { node: first, speculated: 0 }, second: NodeBox { node: second, speculated: 0 }, use_first };
        let takes_chains = A::TAKES_CHAINS && B::TAKES_CHAINS;
        self.push(name, Kind::Process(Box::new(runner)), next, <A::Counter as Counters>::INFO, takes_chains, A::RECEIVES)
    }

    /// Add a node that turns one packet into several (see [`ExpandNode`]).
    pub fn add_expand<N: ExpandNode<C>>(&mut self, node: N) -> NodeId
    where
        C: Send,
    {
        let name = node.name();
        let next = N::Next::NAMES.iter().map(|s| s.to_string()).collect();
        let runner = ExpandRunner { node, out: Vec::new(), _c: core::marker::PhantomData };
        self.push(name, Kind::Process(Box::new(runner)), next, <N::Counter as Counters>::INFO, N::TAKES_CHAINS, N::RECEIVES)
    }

    /// Add an input node (e.g. `pg-input`) that hands its packets to `next`.
    pub fn add_input(&mut self, name: &str, next: &str) -> NodeId {
        if let Some(i) = self.slots.iter().position(|s| s.name == name) {
            return NodeId(i);
        }
        // Inputs drop nothing; where their packets start does not matter.
        self.push(name, Kind::Input, vec![next.to_string()], &[], false, Receives::Ip)
    }

    /// An input node as [`GraphBuilder::add_input`], which also gets one empty frame when
    /// a run to completion ends (`vecgate pcap`): a node that holds packets across vectors
    /// (`ip-glean`) gives account of them there, so none is left uncounted.
    pub fn add_input_drained(&mut self, name: &str, next: &str) -> NodeId {
        if !self.drained.iter().any(|d| d == name) {
            self.drained.push(name.to_string());
        }
        self.add_input(name, next)
    }

    pub fn build(mut self) -> Result<Graph<C>, GraphError> {
        for (i, s) in self.slots.iter().enumerate() {
            if self.slots[..i].iter().any(|o| o.name == s.name) {
                return Err(GraphError::DuplicateName(s.name.clone()));
            }
        }
        let names: Vec<String> = self.slots.iter().map(|s| s.name.clone()).collect();
        for s in &mut self.slots {
            s.next = s
                .next_names
                .iter()
                .map(|n| names.iter().position(|x| x == n).ok_or_else(|| GraphError::UnknownNext { from: s.name.clone(), to: n.clone() }))
                .collect::<Result<_, _>>()?;
        }
        let n = self.slots.len();
        let each_loop =
            self.slots.iter().enumerate().filter(|(_, s)| matches!(&s.kind, Kind::Process(r) if r.each_loop())).map(|(i, _)| i).collect();
        Ok(Graph {
            each_loop,
            slots: self.slots,
            queues: (0..n).map(|_| Vec::with_capacity(2 * VECTOR_SIZE)).collect(),
            tx: Vec::new(),
            trace: TraceLog::default(),
            sampling: false,
            drained: self.drained.iter().filter_map(|d| names.iter().position(|n| n == d).map(NodeId)).collect(),
            drop_capture: None,
        })
    }
}

/// A built graph, owned by one worker.
pub struct Graph<C> {
    slots: Vec<Slot<C>>,
    /// The nodes whose `end_of_vector` also runs at every loop's end
    /// ([`ExpandNode::EACH_LOOP`]).
    each_loop: Vec<usize>,
    queues: Vec<Vec<BufIdx>>,
    /// Per-interface transmit queues filled by `interface-output`.
    pub(crate) tx: Vec<Vec<BufIdx>>,
    pub(crate) trace: TraceLog,
    /// Keep every vector's time per node (see [`Graph::sample_vectors`]).
    sampling: bool,
    drained: Vec<NodeId>,
    /// A running capture of dropped packets (`pcap trace drop`).
    drop_capture: Option<DropCapture>,
}

/// An Ethernet header without VLAN tags: what `ethernet-input` advances past before a
/// node that [`Receives::EthernetPayload`].
const ETHERNET_HEADER_LEN: usize = 14;

/// A capture of dropped packets and which drops it takes.
struct DropCapture {
    sink: Box<dyn DropSink>,
    /// `wanted[node][counter]`: the drops it records (all, or a node's, or a counter's).
    wanted: Vec<Vec<bool>>,
}

/// Which drops a capture records: all, or those of one node, or under one counter name
/// (in any node), or both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropFilter {
    pub node: Option<String>,
    pub counter: Option<String>,
}

impl DropFilter {
    /// Whether drops by `node` under `counter` are taken.
    pub fn takes(&self, node: &str, counter: &str) -> bool {
        self.node.as_deref().is_none_or(|n| n == node) && self.counter.as_deref().is_none_or(|c| c == counter)
    }

    /// The filter against a graph's nodes and their counters (`(node, counter)` names):
    /// an error if it names a node the graph lacks, or a counter no node it covers has.
    /// The control plane checks a request this way (against a worker's snapshot) before
    /// it starts anything.
    pub fn check<'a>(
        &self,
        mut nodes: impl Iterator<Item = &'a str>,
        mut counters: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<(), GraphError> {
        if let Some(n) = &self.node {
            if !nodes.any(|x| x == n) {
                return Err(GraphError::NoSuchNode(n.clone()));
            }
        }
        match &self.counter {
            Some(c) if !counters.any(|(n, x)| self.takes(n, x)) => {
                let scope = self.node.as_ref().map_or("any node".to_string(), |n| format!("node {n:?}"));
                Err(GraphError::NoSuchCounter { counter: c.clone(), scope })
            }
            _ => Ok(()),
        }
    }
}

/// The most vectors a node keeps while sampling: a bench of a few million packets.
const MAX_SAMPLES: usize = 1 << 20;

impl<C> Graph<C> {
    /// The inputs that get an empty frame when a run to completion ends
    /// ([`GraphBuilder::add_input_drained`]).
    pub fn drained_inputs(&self) -> &[NodeId] {
        &self.drained
    }

    /// Start (`Some`) or stop (`None`) capturing dropped packets into `sink`, those
    /// `filter` names. A filter naming a node or counter the graph lacks is an error, and
    /// changes nothing.
    pub fn set_drop_capture(&mut self, sink: Option<Box<dyn DropSink>>, filter: &DropFilter) -> Result<(), GraphError> {
        let Some(sink) = sink else {
            self.drop_capture = None;
            return Ok(());
        };
        filter.check(
            self.slots.iter().map(|s| s.name.as_str()),
            self.slots.iter().flat_map(|s| s.counter_info.iter().map(|c| (s.name.as_str(), c.name))),
        )?;
        let wanted = self.slots.iter().map(|s| s.counter_info.iter().map(|c| filter.takes(&s.name, c.name)).collect()).collect();
        self.drop_capture = Some(DropCapture { sink, wanted });
        Ok(())
    }

    /// Whether a capture of dropped packets is running.
    pub fn capturing_drops(&self) -> bool {
        self.drop_capture.is_some()
    }

    /// Hand the dropped packets of `chunk` that the capture wants to its sink; end the
    /// capture when the sink is done.
    fn capture_drops(&mut self, pool: &mut Pool, chunk: &[BufIdx]) {
        let Some(cap) = self.drop_capture.as_mut() else { return };
        if pool.has_chains() {
            pool.linearize_all(chunk);
        }
        for &b in chunk {
            let buf = pool.get(b);
            let Some(r) = buf.meta.drop else { continue };
            let (node, counter) = (r.node as usize, r.counter as usize);
            if !cap.wanted.get(node).and_then(|w| w.get(counter)).copied().unwrap_or(false) {
                continue;
            }
            let s = &self.slots[node];
            let reason = format!("{}: {}, received on {}", s.name, s.counter_info[counter].name, self.trace.if_name(buf.meta.rx_if.get()));
            let (bytes, link) = match s.receives {
                Receives::Ip => (buf.bytes(), DroppedAs::Ip),
                Receives::Ethernet => (buf.bytes(), DroppedAs::Ethernet),
                // The Ethernet header a node advanced past, and the packet after it.
                Receives::EthernetPayload => (buf.with_preceding(ETHERNET_HEADER_LEN).unwrap_or(buf.bytes()), DroppedAs::Ethernet),
            };
            if !cap.sink.record(bytes, link, &reason) {
                self.drop_capture = None;
                return;
            }
        }
    }

    pub fn node_id(&self, name: &str) -> Result<NodeId, GraphError> {
        self.slots.iter().position(|s| s.name == name).map(NodeId).ok_or_else(|| GraphError::NoSuchNode(name.to_string()))
    }

    /// Hand a vector from an input node to its next node, accounting the input's time.
    /// Marks packets for an armed trace.
    pub fn inject(&mut self, input: NodeId, pool: &mut Pool, bufs: &[BufIdx], cycles: u64) {
        let slot = &mut self.slots[input.0];
        slot.runtime.calls += 1;
        // Only polls that found packets count their time: an idle worker's empty polls
        // would otherwise turn cycles/packet into 1 / load.
        if bufs.is_empty() {
            return;
        }
        slot.runtime.cycles += cycles;
        slot.runtime.vectors += 1;
        slot.runtime.packets += bufs.len() as u64;
        let next = slot.next[0];
        if self.trace.active && self.trace.armed_any() {
            for &b in bufs {
                if let Some(id) = self.trace.mark(input.0) {
                    pool.get_mut(b).meta.trace = Some(id);
                    let len = pool.get(b).len();
                    self.trace.stamp();
                    let rx = self.trace.if_name(pool.get(b).meta.rx_if.0 as usize);
                    self.trace.push(TraceRecord {
                        packet: id.get(),
                        node: "input",
                        text: format!("{} len {} from {rx}", self.slots[input.0].name, len),
                        verdict: self.slots[next].name.clone(),
                        time_ns: 0,
                    });
                }
            }
        }
        self.queues[next].extend_from_slice(bufs);
    }

    /// Add time and packets to `interface-tx` (the worker's device flush).
    pub(crate) fn account_tx(&mut self, packets: u64, cycles: u64) {
        let tx = &mut self.slots[INTERFACE_TX_SLOT];
        tx.runtime.calls += 1;
        if packets > 0 {
            tx.account_vector(packets, cycles, self.sampling);
        }
    }

    pub(crate) fn count_no_device(&mut self, n: u64) {
        self.slots[INTERFACE_OUTPUT_SLOT].counters[OutputCounter::NoDevice.index()] += n;
    }

    /// Run every queued buffer to completion: until all queues are empty, dispatch each
    /// non-empty node in graph order, in vectors of at most `VECTOR_SIZE`.
    pub fn run(&mut self, cx: &mut C, pool: &mut Pool) {
        loop {
            let mut any = false;
            for i in 0..self.slots.len() {
                if !self.queues[i].is_empty() {
                    any = true;
                    self.dispatch(i, cx, pool);
                }
            }
            if !any {
                break;
            }
        }
        if self.trace.active && !self.trace.armed_any() {
            self.trace.active = false;
        }
    }

    /// The end of a worker loop (after [`Graph::run`]): the nodes that hold work for a
    /// later vector ([`ExpandNode::EACH_LOOP`]: batches for a lane whose receiver is
    /// behind) complete what they can, so nothing they hold waits for more traffic.
    pub fn end_of_loop(&mut self, cx: &mut C) {
        for &i in &self.each_loop {
            if let Kind::Process(runner) = &mut self.slots[i].kind {
                runner.end_of_loop(cx);
            }
        }
    }

    fn dispatch(&mut self, i: usize, cx: &mut C, pool: &mut Pool) {
        let mut input = std::mem::take(&mut self.queues[i]);
        let tracing = self.trace.active;
        if tracing {
            self.trace.stamp();
        }
        for chunk in input.chunks(VECTOR_SIZE) {
            let t0 = clock::now();
            let Slot { kind, next, counters, takes_chains, .. } = &mut self.slots[i];
            // Chained packets (made by `parcel4-split`) reach only nodes that take them,
            // and untraced: a trace's text reads the packet. Asked once a vector, one
            // load while no chain is live (every other path).
            if pool.has_chains() && (!*takes_chains || tracing) {
                pool.linearize_all(chunk);
            }
            match kind {
                Kind::Process(runner) => {
                    runner.run(
                        cx,
                        DispatchIo {
                            pool,
                            input: chunk,
                            next,
                            queues: &mut self.queues,
                            counters,
                            node: i as u16,
                            drop_queue: ERROR_DROP_SLOT,
                            trace: if tracing { Some(&mut self.trace) } else { None },
                        },
                    );
                }
                Kind::ErrorDrop => {
                    if self.drop_capture.is_some() {
                        self.capture_drops(pool, chunk);
                    }
                    if tracing {
                        for &b in chunk {
                            let m = pool.get(b).meta;
                            if let (Some(id), Some(r)) = (m.trace, m.drop) {
                                let s = &self.slots[r.node as usize];
                                let c = s.counter_info.get(r.counter as usize).map_or("?", |c| c.name);
                                self.trace.push(TraceRecord {
                                    packet: id.get(),
                                    node: ERROR_DROP,
                                    text: format!("{}: {}", s.name, c),
                                    verdict: "freed".into(),
                                    time_ns: 0,
                                });
                            }
                        }
                    }
                    pool.free_many(chunk);
                }
                Kind::InterfaceOutput if !tracing => {
                    // Untraced: the packets of a vector mostly leave by one interface, so
                    // each run of packets for the same interface joins its transmit queue
                    // in one copy (no per-packet push through memory).
                    let bufs = pool.buffers();
                    let mut rest = &chunk[..];
                    while let Some((&first, _)) = rest.split_first() {
                        let q = bufs[first.get()].meta.tx_if.get();
                        let run = 1 + rest[1..].iter().take_while(|b| bufs[b.get()].meta.tx_if.get() == q).count();
                        if q >= self.tx.len() {
                            self.tx.resize_with(q + 1, Vec::new);
                        }
                        self.tx[q].extend_from_slice(&rest[..run]);
                        rest = &rest[run..];
                    }
                }
                Kind::InterfaceOutput => {
                    for &b in chunk {
                        let m = pool.get(b).meta;
                        let q = m.tx_if.get();
                        if q >= self.tx.len() {
                            self.tx.resize_with(q + 1, Vec::new);
                        }
                        if let (true, Some(id)) = (tracing, m.trace) {
                            let tx = self.trace.if_name(q);
                            self.trace.push(TraceRecord {
                                packet: id.get(),
                                node: INTERFACE_OUTPUT,
                                text: format!("to {tx} len {}", pool.get(b).len()),
                                verdict: "tx".into(),
                                time_ns: 0,
                            });
                        }
                        self.tx[q].push(b);
                    }
                }
                Kind::Input | Kind::InterfaceTx => {
                    // Nothing is ever queued to these; free defensively so nothing leaks.
                    pool.free_many(chunk);
                }
            }
            let t1 = clock::now();
            let slot = &mut self.slots[i];
            slot.runtime.calls += 1;
            slot.account_vector(chunk.len() as u64, t1.wrapping_sub(t0), self.sampling);
        }
        input.clear();
        // Keep the allocation; keep anything a self-loop queued meanwhile.
        let queued = std::mem::replace(&mut self.queues[i], input);
        self.queues[i].extend_from_slice(&queued);
    }

    /// Take the transmit queue of an interface (the worker hands it to the device).
    pub(crate) fn tx_queue(&mut self, ifx: IfIndex) -> Option<&mut Vec<BufIdx>> {
        self.tx.get_mut(ifx.get())
    }

    /// Queue a packet for transmit on an interface, past the graph (a packet another
    /// worker routed and handed over to the device's owner).
    pub(crate) fn queue_tx(&mut self, ifx: IfIndex, b: BufIdx) {
        let q = ifx.get();
        if q >= self.tx.len() {
            self.tx.resize_with(q + 1, Vec::new);
        }
        self.tx[q].push(b);
    }

    pub fn trace_add(&mut self, input: &str, count: u32) -> Result<(), GraphError> {
        if count == 0 {
            return Err(GraphError::ZeroTraceCount(input.to_string()));
        }
        let id = self.node_id(input).map_err(|_| GraphError::NoSuchInput {
            name: input.to_string(),
            inputs: self.slots.iter().filter(|s| matches!(s.kind, Kind::Input)).map(|s| s.name.as_str()).collect::<Vec<_>>().join(", "),
        })?;
        if !matches!(self.slots[id.0].kind, Kind::Input) {
            return Err(GraphError::NotAnInput(input.to_string()));
        }
        self.trace.arm(id.0, count);
        Ok(())
    }

    /// Name interfaces in trace records (the worker's ports, by index).
    pub fn set_interface_names(&mut self, names: Vec<String>) {
        self.trace.if_names = names;
    }

    pub fn trace_records(&self) -> &[TraceRecord] {
        self.trace.records()
    }

    pub fn trace_clear(&mut self) {
        self.trace.clear()
    }

    pub fn node_snapshots(&self) -> Vec<NodeSnapshot> {
        self.slots
            .iter()
            .map(|s| NodeSnapshot {
                name: s.name.clone(),
                kind: s.kind.label(),
                runtime: s.runtime,
                cycles_per_packet: per_packet(s.runtime.cycles, s.runtime.packets),
                vector_median: crate::stats::vector_median(&s.samples),
                next: s.next_names.clone(),
            })
            .collect()
    }

    /// Start (or stop) keeping each vector's time per node, forgetting those kept: a
    /// benchmark then reports the median vector's cycles per packet beside the mean,
    /// which a host that stops the worker now and then (steal) moves far less.
    pub fn sample_vectors(&mut self, on: bool) {
        self.sampling = on;
        for s in &mut self.slots {
            s.samples = Vec::new();
        }
    }

    pub fn counter_snapshots(&self) -> Vec<CounterSnapshot> {
        let mut out = Vec::new();
        for s in &self.slots {
            for (info, &count) in s.counter_info.iter().zip(&s.counters) {
                out.push(CounterSnapshot {
                    node: s.name.clone(),
                    counter: info.name,
                    severity: info.severity,
                    description: info.description,
                    count,
                });
            }
        }
        out
    }

    /// Every named counter of every node, summed, and the packets `error-drop` freed: a
    /// harness checks after each packet that no drop went uncounted without building
    /// the snapshots (`control::fuzz::graph`).
    pub fn counter_sum(&self) -> (u64, u64) {
        let counted = self.slots.iter().flat_map(|s| s.counters.iter()).sum();
        (counted, self.slots[ERROR_DROP_SLOT].runtime.packets)
    }

    pub fn clear_runtime(&mut self) {
        for s in &mut self.slots {
            s.runtime = NodeRuntime::default();
        }
    }

    pub fn clear_counters(&mut self) {
        for s in &mut self.slots {
            s.counters.iter_mut().for_each(|c| *c = 0);
        }
    }
}
