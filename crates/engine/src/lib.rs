//! The vector engine: everything a node needs and nothing about any protocol.
//!
//! - [`buffer`]: packet buffers with headroom, in one [`pool::Pool`] per worker, named by
//!   [`BufIdx`]; two size classes (regular and large) so a 64 KiB+ packet is always one
//!   contiguous buffer.
//! - [`node`]: the `Node` trait (per-packet function, named next nodes, named counters,
//!   trace text).
//! - [`graph`]: nodes wired by name and validated at build time; dispatch in vectors of
//!   up to [`VECTOR_SIZE`] buffers with speculative enqueue (a packet that takes the
//!   next node its node's previous vector mostly took costs a store into a local run,
//!   not a queue push); per-node runtime stats (TSC cycles) and counters; packet trace.
//! - [`worker`]: the run-to-completion loop of one thread: poll devices, run the graph,
//!   flush transmit queues, answer control requests between vectors.
//!
//! Invariants: a worker owns its pool, graph and counters outright (no locks on the
//! packet path); every buffer that enters the graph leaves it through a device transmit
//! or `error-drop`, which counts the reason; the engine never panics on packet contents
//! because it never reads them.
#![deny(unsafe_code)]

pub mod buffer;
pub mod clock;
pub mod cow;
pub mod device;
pub mod graph;
pub mod handoff;
pub mod hash;
pub mod mem;
pub mod node;
pub mod pool;
pub mod prefetch;
pub mod stats;
pub mod trace;
pub mod worker;

pub use buffer::{BufIdx, Buffer, GsoKind, IfIndex, Meta, Offload, HEADROOM};
pub use graph::{DropFilter, Graph, GraphBuilder, GraphError, NodeId};
pub use node::{CounterInfo, Counters, Counts, Enqueue, ExpandNode, NextNodes, Node, Receives, Severity, Taken, Verdict};
pub use pool::Pool;

/// The most buffers a node processes in one call (VPP's frame size).
pub const VECTOR_SIZE: usize = 256;
