//! What a node is: a per-packet function with named next nodes and named counters.
//!
//! The dispatcher (in `graph`) owns the vector loop, the traced/untraced choice and the
//! stats; a node only says what happens to one packet. Next nodes are resolved by name
//! when the graph is built, so a wrong name fails at start-up.

use crate::buffer::{BufIdx, Buffer, DropReason};
use crate::pool::Pool;
use crate::VECTOR_SIZE;

/// How bad a counter's event is, for `show errors`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Normal operation worth counting (e.g. echo replies sent).
    Info,
    /// The packet was dropped for a reason that is the sender's business.
    Warn,
    /// The packet was dropped and that points at a problem here.
    Error,
}

/// One counter's name (short, stable, for scripts) and description (for people).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterInfo {
    pub name: &'static str,
    pub severity: Severity,
    pub description: &'static str,
}

/// A node's set of next nodes, as an enum. Use [`next_nodes!`](crate::next_nodes).
pub trait NextNodes: Copy + Send + 'static {
    /// Target node names, indexed by `index()`.
    const NAMES: &'static [&'static str];
    fn index(self) -> usize;
}

/// A node's counters, as an enum. Use [`counters!`](crate::counters).
pub trait Counters: Copy + 'static {
    const INFO: &'static [CounterInfo];
    fn index(self) -> usize;
}

/// What a node decided for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<N, C> {
    Next(N),
    /// Drop and count under this counter (the dispatcher sends it to `error-drop`).
    Drop(C),
}

/// A node's own counters, for events that are not drops.
pub struct Counts<'a, C: Counters> {
    slots: &'a mut [u64],
    _c: core::marker::PhantomData<C>,
}

impl<'a, C: Counters> Counts<'a, C> {
    pub(crate) fn new(slots: &'a mut [u64]) -> Self {
        Counts { slots, _c: core::marker::PhantomData }
    }
    #[inline(always)]
    pub fn inc(&mut self, c: C) {
        self.slots[c.index()] += 1;
    }
    #[inline(always)]
    pub fn add(&mut self, c: C, n: u64) {
        self.slots[c.index()] += n;
    }
}

/// Where an untraced vector's packets go, each with its verdict ([`Enqueue::push`]): the
/// dispatcher's speculative enqueue (see `graph`). A packet that takes the speculated next
/// node is written to a local run, joined to that node's queue in one copy after the
/// vector; only the others are pushed one by one to their queue (a load of the queue
/// index, a bounds check, a `Vec` push through memory). Each queue still gets its packets
/// in arrival order. A node that decides its whole vector in one loop
/// ([`Node::RUNS_VECTORS`]) pushes its packets here itself, with no `process` call a
/// packet.
pub struct Enqueue<'a, N: NextNodes, C: Counters> {
    run: [BufIdx; VECTOR_SIZE],
    taken: usize,
    /// Index (into the node's next nodes) of the speculated next node.
    speculated: usize,
    missed: usize,
    last_miss: usize,
    next: &'a [usize],
    queues: &'a mut [Vec<BufIdx>],
    counters: &'a mut [u64],
    node: u16,
    drop_queue: usize,
    _v: core::marker::PhantomData<fn(N, C)>,
}

impl<'a, N: NextNodes, C: Counters> Enqueue<'a, N, C> {
    /// `next` and `counters` exactly one entry per next node and counter: a verdict's
    /// index is then in range by its type, and the per-packet bounds checks go.
    #[inline(always)]
    pub(crate) fn new(
        speculated: usize,
        next: &'a [usize],
        queues: &'a mut [Vec<BufIdx>],
        counters: &'a mut [u64],
        node: u16,
        drop_queue: usize,
    ) -> Self {
        let next = &next[..N::NAMES.len()];
        let counters = &mut counters[..C::INFO.len()];
        let speculated = speculated.min(next.len().saturating_sub(1));
        Enqueue {
            run: [BufIdx(0); VECTOR_SIZE],
            taken: 0,
            speculated,
            missed: 0,
            last_miss: speculated,
            next,
            queues,
            counters,
            node,
            drop_queue,
            _v: core::marker::PhantomData,
        }
    }

    /// The node's own counters, for `process`.
    #[inline(always)]
    pub fn counts(&mut self) -> Counts<'_, C> {
        Counts::new(self.counters)
    }

    /// Send packet `bi` (`buf`) on by its verdict: to a next node, or dropped under the
    /// counter (counted, its reason in `meta.drop`, queued to `error-drop`). At most
    /// [`VECTOR_SIZE`] packets a vector.
    #[inline(always)]
    pub fn push(&mut self, bi: BufIdx, buf: &mut Buffer, verdict: Verdict<N, C>) {
        match verdict {
            Verdict::Next(n) if n.index() == self.speculated => self.push_run(bi),
            Verdict::Next(n) => {
                self.missed += 1;
                self.last_miss = n.index();
                self.queues[self.next[n.index()]].push(bi);
            }
            Verdict::Drop(c) => {
                self.counters[c.index()] += 1;
                buf.meta.drop = Some(DropReason { node: self.node, counter: c.index() as u16 });
                self.queues[self.drop_queue].push(bi);
            }
        }
    }

    /// Whether [`Enqueue::push`] sends a packet with `verdict` to the local run (the
    /// speculated next node, fixed for the vector): a node that decides its packets from
    /// a few verdicts tests each verdict once a vector, not once a packet, and hands the
    /// packets of those that run to [`Enqueue::push_run`].
    #[inline(always)]
    pub fn runs(&self, verdict: Verdict<N, C>) -> bool {
        matches!(verdict, Verdict::Next(n) if n.index() == self.speculated)
    }

    /// [`Enqueue::push`] of a packet whose verdict [`Enqueue::runs`].
    #[inline(always)]
    pub fn push_run(&mut self, bi: BufIdx) {
        // The dispatcher's vectors hold at most VECTOR_SIZE packets, so the mask never
        // wraps: it only spares the bounds check.
        self.run[self.taken & (VECTOR_SIZE - 1)] = bi;
        self.taken += 1;
    }

    /// Join the run to the speculated node's queue; the next node to speculate on for
    /// the next vector: where the last of the packets went, if most went elsewhere.
    #[inline(always)]
    pub(crate) fn finish(self) -> usize {
        if self.taken > 0 {
            self.queues[self.next[self.speculated]].extend_from_slice(&self.run[..self.taken.min(VECTOR_SIZE)]);
        }
        if self.missed > self.taken {
            self.last_miss
        } else {
            self.speculated
        }
    }
}

/// Where the packets a node is given start: what a capture of its drops
/// (`pcap trace drop`) records them as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receives {
    /// At an IP header (IPv4 or IPv6): most nodes.
    Ip,
    /// At an Ethernet header (`ethernet-input`, `interface-output`).
    Ethernet,
    /// Just past an Ethernet header that is still in the buffer in front of them
    /// (`arp-input`): recorded with it.
    EthernetPayload,
}

/// A graph node over context `C` (the feature's tables and per-worker state).
pub trait Node<C>: Send + 'static {
    type Next: NextNodes;
    type Counter: Counters;

    /// The node's name, e.g. `ip4-input`.
    fn name(&self) -> &'static str;

    /// Where the packets given to this node start.
    const RECEIVES: Receives = Receives::Ip;

    /// Whether `process` may see a chained packet (a head buffer whose bytes continue in
    /// an extent the pool keeps, [`Pool::attach`]): true only for a node that reads and
    /// writes nothing past the headers in its head and never rewrites the packet whole, on
    /// any path (the parcel split rewrites its chained datagrams itself, so no IP node
    /// needs to). For every other node the dispatcher
    /// copies a chained packet into one buffer first, so its parsers see it all.
    const TAKES_CHAINS: bool = false;

    /// Decide what happens to one packet. Must not panic on any packet contents.
    fn process(&mut self, cx: &mut C, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter>;

    /// Called once per vector, before `process` runs on each packet: a node may do work
    /// that gains from seeing the whole vector at once, such as starting every table
    /// lookup before waiting on any (see `ip4-lookup`). Only where a benchmark shows the
    /// gain; the default does nothing.
    #[inline(always)]
    fn prepare(&mut self, _cx: &mut C, _pool: &mut Pool, _input: &[BufIdx]) {}

    /// Whether the dispatcher hands an untraced vector to [`Node::run_vector`] (one call)
    /// in place of `prepare` and a `process` call a packet. Traced vectors still take
    /// `prepare_traced`, `trace` and `process`.
    const RUNS_VECTORS: bool = false;

    /// Decide an untraced vector and hand each packet of `input` to `out` once, in order
    /// ([`Enqueue::push`]); called only for a node that sets [`Node::RUNS_VECTORS`]. For
    /// a node whose per-packet work is a loop of its own already (a pipeline over the
    /// vector), which then pushes from that loop: the dispatcher's per-packet loop and
    /// call go. The default is that loop: `prepare`, then `process` a packet.
    #[inline(always)]
    fn run_vector(&mut self, cx: &mut C, pool: &mut Pool, input: &[BufIdx], out: &mut Enqueue<'_, Self::Next, Self::Counter>) {
        self.prepare(cx, pool, input);
        // Once per vector: the slice's base and length stay local, where `pool.get_mut`
        // reloaded them after every store into a buffer.
        let bufs = pool.buffers_mut();
        for &bi in input {
            let b = &mut bufs[bi.get()];
            let v = self.process(cx, &mut out.counts(), b);
            out.push(bi, b, v);
        }
    }

    /// `prepare` for a vector that is being traced (`trace add`): `trace` runs before
    /// `process`, so a node whose trace line shows what `process` would work out (a
    /// lookup's adjacency) works it out here for the whole vector. Defaults to `prepare`.
    #[inline(always)]
    fn prepare_traced(&mut self, cx: &mut C, pool: &mut Pool, input: &[BufIdx]) {
        self.prepare(cx, pool, input)
    }

    /// Called once per vector, after `process` ran on each packet: a node that sums
    /// across packets (a run of packets of one tunnel counted in the worker's context,
    /// VPP-style) writes the sum out here. The default does nothing.
    #[inline(always)]
    fn end_of_vector(&mut self, _cx: &mut C) {}

    /// One line describing the packet as this node sees it, for `show trace`. Called
    /// before `process`, only for traced packets.
    fn trace(&self, buf: &Buffer) -> String {
        let b = buf.bytes();
        let n = b.len().min(16);
        let hex: Vec<String> = b[..n].iter().map(|x| format!("{x:02x}")).collect();
        format!("len {} {}", b.len(), hex.join(""))
    }
}

/// A node that turns one packet into several (or none): GSO segmentation, fragmentation,
/// replication. Unlike [`Node`] it works on buffer indices with the pool at hand, since it
/// allocates. Rare by design: most work is one packet in, one packet out.
pub trait ExpandNode<C>: Send + 'static {
    type Next: NextNodes;
    type Counter: Counters;

    fn name(&self) -> &'static str;

    /// As [`Node::RECEIVES`].
    const RECEIVES: Receives = Receives::Ip;

    /// As [`Node::TAKES_CHAINS`]: whether `expand` may be given a chained packet.
    const TAKES_CHAINS: bool = false;

    /// Replace the packet `bi` with the packets pushed to `out`, each with its next node.
    /// The input buffer may itself be pushed (reused); if it is not, the dispatcher frees
    /// it. On `Err`, whatever was pushed goes on and the input (if not pushed) is dropped
    /// under the counter. Must not panic on any packet contents.
    fn expand(
        &mut self,
        cx: &mut C,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter>;

    /// Whether [`Self::expand_run`] may take more than one packet. The dispatcher keeps
    /// its one-packet loop for nodes that do not (measured: the run loop made
    /// `parcel4-split`, one parcel a call, 2 % slower).
    const TAKES_RUNS: bool = false;

    /// Replace the first packets of `input` (at least the first; `input` is the rest of
    /// the vector, in order) with the packets pushed to `out`, returning how many it
    /// took. A node that combines consecutive packets (`parcel4-join`) takes a whole
    /// run in one call, so the dispatcher's per-packet work is done once per run; it
    /// sets [`Self::TAKES_RUNS`].
    /// Taken packets that are not pushed are freed by the dispatcher ([`Taken::Free`]),
    /// or on `Err` dropped under the counter; or they are held ([`Taken::Held`]: by a
    /// packet the call pushed, a chained parcel whose extents they are, or by the node)
    /// and left be.
    /// The default takes one packet with [`Self::expand`].
    #[inline(always)]
    fn expand_run(
        &mut self,
        cx: &mut C,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        input: &[BufIdx],
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> (usize, Result<Taken, Self::Counter>) {
        (1, self.expand(cx, counts, pool, input[0], out).map(|()| Taken::Free))
    }

    /// Called once per vector before `expand` runs on each packet, as [`Node::prepare`]:
    /// a node that combines packets of one vector (`parcel4-join`) plans it here, so that
    /// nothing waits for a later vector. The default does nothing.
    fn prepare(&mut self, _cx: &mut C, _pool: &mut Pool, _input: &[BufIdx]) {}

    /// Called after each vector: a node that batches work across packets (handing them
    /// to another worker a vector at a time) completes it here.
    fn end_of_vector(&mut self, _cx: &mut C) {}

    /// Whether [`Self::end_of_vector`] also runs at the end of every worker loop, when
    /// the node had no vector: a node whose batches may wait for a later vector (a lane
    /// whose receiver is behind keeps filling one) sends them once it can.
    const EACH_LOOP: bool = false;

    /// For a next node that is `error-drop` (a node dropping packets other than the one
    /// it was given, which it counted itself: `ip-glean`'s expired ones), the counter
    /// that names why, so traces and captures of drops show it. The default names none.
    #[inline(always)]
    fn dropped_as(_next: Self::Next) -> Option<Self::Counter> {
        None
    }
}

/// What becomes of the packets an [`ExpandNode::expand_run`] call took and did not push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The dispatcher frees them.
    Free,
    /// Something else holds them, so the dispatcher leaves them be: a packet the call
    /// pushed (its extents, `Pool::push_extents_taking`: they go back to the pool with
    /// it), or the node itself (`ip-glean`'s hold), which pushes or drops them later.
    Held,
}

/// Define a `NextNodes` enum: `next_nodes! { pub enum FooNext { A = "node-a", B = "node-b" } }`.
#[macro_export]
macro_rules! next_nodes {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($variant:ident = $target:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        $vis enum $name { $($variant),+ }
        impl $crate::node::NextNodes for $name {
            const NAMES: &'static [&'static str] = &[$($target),+];
            #[inline(always)]
            fn index(self) -> usize { self as usize }
        }
    };
}

/// Define a `Counters` enum with a severity and description per counter:
/// `counters! { pub enum FooCounter { Bad(Warn, "bad", "what went wrong") } }`.
#[macro_export]
macro_rules! counters {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($variant:ident ($sev:ident, $cname:literal, $desc:literal)),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u16)]
        $vis enum $name { $($variant),+ }
        impl $crate::node::Counters for $name {
            const INFO: &'static [$crate::node::CounterInfo] = &[$($crate::node::CounterInfo {
                name: $cname, severity: $crate::node::Severity::$sev, description: $desc,
            }),+];
            #[inline(always)]
            fn index(self) -> usize { self as usize }
        }
    };
}
