//! Per-tunnel packet and byte counters, one set per worker, that the control plane
//! reads while the worker runs (as VPP's stats segment is read by its clients).
//!
//! Each worker owns its set: it alone writes it, by a relaxed load and a relaxed store
//! (plain moves on x86: no lock prefix, no shared cache line with another worker), so
//! counting costs what a plain `+= 1` costs. The control thread reads the same memory
//! at any time without stopping the worker; a read may miss the increments of the
//! packet being counted, never tear a value. Counters live in fixed chunks of
//! [`CHUNK`] tunnels: when tunnels outgrow them the worker adds chunks (outside the
//! packet loop, on a new table version) and republishes the chunk list; existing chunks
//! never move, so a reader's old list stays valid.
//!
//! A worker counts a run of packets of one tunnel in its own fields and writes the sum
//! to the tunnel's slot when the tunnel changes or the vector ends (each counting node
//! calls [`TunnelCounterWriter::flush`] from its `end_of_vector`), as VPP's tunnel nodes
//! do: the packets of a vector mostly belong to few tunnels, so most packets cost a
//! compare and one add on a line the worker already holds. A reader sees a count at
//! most one vector late.
//!
//! `rx` is what came out of the tunnel (decapsulated), `tx` what went into it
//! (encapsulated); bytes are the inner packet's IP bytes, the traffic the tunnel
//! carries.
//!
//! Counting is a configuration choice, off by default (`[metrics] tunnel_counters`, as
//! VPP's adjacency counters are off until enabled): on, it costs about 2 % of a GTP-U path
//! (docs/PERFORMANCE.md, issue 22). [`WorkerCounters::enabled`] is published with the
//! tunnel tables; the worker's writer takes it with each table version
//! ([`TunnelCounterWriter::follow`]) and, when off, counts nothing. The counting nodes
//! come in two forms, with and without their counting code, the graph running the one
//! the switch names for each vector ([`TunnelCounterWriter::counting`]): switched off,
//! counting costs one test a vector, not code in every packet's path.

use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Tunnels per chunk.
pub const CHUNK: usize = 1024;
const _: () = assert!(CHUNK.is_power_of_two());

#[derive(Default)]
pub struct Slot {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
}

/// One tunnel's counts as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TunnelCount {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

impl TunnelCount {
    pub fn add(&mut self, o: &TunnelCount) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
    }
}

type Chunk = [Slot; CHUNK];
type Chunks = Vec<Arc<Chunk>>;

/// A worker's counters for one tunnel kind family (GTP-U, UDP tunnels): the shared
/// handle the control plane keeps.
#[derive(Default)]
pub struct TunnelCounters {
    chunks: ArcSwap<Chunks>,
}

impl std::fmt::Debug for TunnelCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TunnelCounters({} chunks)", self.chunks.load().len())
    }
}

impl TunnelCounters {
    pub fn new() -> Arc<TunnelCounters> {
        Arc::new(TunnelCounters::default())
    }

    /// One tunnel's counts (zero for an id never counted).
    pub fn get(&self, id: u32) -> TunnelCount {
        let chunks = self.chunks.load();
        let (c, i) = (id as usize / CHUNK, id as usize % CHUNK);
        chunks.get(c).map_or_else(TunnelCount::default, |ch| {
            let s = &ch[i];
            TunnelCount {
                rx_packets: s.rx_packets.load(Relaxed),
                rx_bytes: s.rx_bytes.load(Relaxed),
                tx_packets: s.tx_packets.load(Relaxed),
                tx_bytes: s.tx_bytes.load(Relaxed),
            }
        })
    }

    /// Every tunnel id with counts, in id order, and their counts.
    pub fn for_each(&self, mut f: impl FnMut(u32, TunnelCount)) {
        let chunks = self.chunks.load();
        for (c, ch) in chunks.iter().enumerate() {
            for (i, s) in ch.iter().enumerate() {
                let n = TunnelCount {
                    rx_packets: s.rx_packets.load(Relaxed),
                    rx_bytes: s.rx_bytes.load(Relaxed),
                    tx_packets: s.tx_packets.load(Relaxed),
                    tx_bytes: s.tx_bytes.load(Relaxed),
                };
                if n != TunnelCount::default() {
                    f((c * CHUNK + i) as u32, n);
                }
            }
        }
    }

    /// Start a tunnel id from zero (the control plane, when a tunnel is deleted, so the
    /// next tunnel with its id does not inherit its counts). Packets of the old tunnel
    /// still in a worker's vector at that moment may be counted after the reset.
    pub fn reset(&self, id: u32) {
        let chunks = self.chunks.load();
        if let Some(ch) = chunks.get(id as usize / CHUNK) {
            let s = &ch[id as usize % CHUNK];
            for a in [&s.rx_packets, &s.rx_bytes, &s.tx_packets, &s.tx_bytes] {
                a.store(0, Relaxed);
            }
        }
    }
}

/// Every worker's counters of one tunnel family, as its control-plane state keeps them,
/// and whether the workers count at all.
#[derive(Debug, Default)]
pub struct WorkerCounters {
    workers: Vec<Arc<TunnelCounters>>,
    enabled: bool,
}

impl WorkerCounters {
    /// Read a worker's counters from now on.
    pub fn watch(&mut self, c: Arc<TunnelCounters>) {
        self.workers.push(c);
    }

    /// Whether the workers count per tunnel (published with the next table version).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Count per tunnel, or stop (from the next table version on). Counts already made
    /// stay readable.
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// One tunnel's counts, all workers together.
    pub fn count(&self, id: u32) -> TunnelCount {
        let mut n = TunnelCount::default();
        for w in &self.workers {
            n.add(&w.get(id));
        }
        n
    }

    /// Every tunnel id with counts, all workers together.
    pub fn per_tunnel(&self) -> std::collections::HashMap<u32, TunnelCount> {
        let mut per: std::collections::HashMap<u32, TunnelCount> = std::collections::HashMap::new();
        for w in &self.workers {
            w.for_each(|id, n| per.entry(id).or_default().add(&n));
        }
        per
    }

    /// A tunnel id was freed: its next tunnel starts from zero in every worker.
    pub fn reset(&self, id: u32) {
        for w in &self.workers {
            w.reset(id);
        }
    }
}

/// Packets of one tunnel in one direction counted since the last write to its slot.
/// Packets and bytes share one word, so a packet costs one add: a run never outlives a
/// node's vector, whose packets are fewer than the pool's buffers (far below 2^24) and
/// whose bytes are far below 2^40.
#[derive(Clone, Copy)]
struct Run {
    /// `u32::MAX`: no run.
    id: u32,
    /// Packets above bit [`PACKET_SHIFT`], bytes below.
    sum: u64,
}

const PACKET_SHIFT: u32 = 40;

/// Directions, as indices of a writer's runs.
const RX: usize = 0;
const TX: usize = 1;

impl Run {
    const NONE: Run = Run { id: u32::MAX, sum: 0 };

    #[inline(always)]
    fn one(bytes: usize) -> u64 {
        (1 << PACKET_SHIFT) | bytes as u64
    }

    fn packets(self) -> u64 {
        self.sum >> PACKET_SHIFT
    }

    fn bytes(self) -> u64 {
        self.sum & ((1 << PACKET_SHIFT) - 1)
    }
}

/// The worker's side: the chunk list it writes through.
pub struct TunnelCounterWriter {
    shared: Arc<TunnelCounters>,
    /// The worker's own copy of the chunk list (one indirection less per packet than
    /// the shared `Arc<Vec<…>>`).
    chunks: Chunks,
    /// The run being counted in each direction ([`RX`], [`TX`]).
    runs: [Run; 2],
    /// Whether to count at all: the published tables' switch, taken with each table
    /// version ([`TunnelCounterWriter::follow`]).
    counting: bool,
}

impl TunnelCounterWriter {
    pub fn new(shared: Arc<TunnelCounters>) -> TunnelCounterWriter {
        let chunks = (*shared.chunks.load_full()).clone();
        TunnelCounterWriter { shared, chunks, runs: [Run::NONE; 2], counting: true }
    }

    /// The handle the control plane reads through.
    pub fn shared(&self) -> Arc<TunnelCounters> {
        self.shared.clone()
    }

    /// Take a table version's tunnel count and counting switch (never per packet).
    pub fn follow(&mut self, tunnels: usize, counting: bool) {
        self.counting = counting;
        self.reserve(tunnels);
    }

    /// Whether the tables say to count: the counting nodes run in the form that counts
    /// only while this holds (`engine::GraphBuilder::add_either`).
    #[inline(always)]
    pub fn counting(&self) -> bool {
        self.counting
    }

    /// Make room for tunnel ids below `tunnels` (on a new table version, never per
    /// packet).
    pub fn reserve(&mut self, tunnels: usize) {
        let want = tunnels.div_ceil(CHUNK);
        if want <= self.chunks.len() {
            return;
        }
        while self.chunks.len() < want {
            self.chunks.push(Arc::new(std::array::from_fn(|_| Slot::default())));
        }
        self.shared.chunks.store(Arc::new(self.chunks.clone()));
    }

    #[inline(always)]
    fn slot(&self, id: u32) -> Option<&Slot> {
        // CHUNK is a power of two: the index within a chunk needs no bounds check.
        self.chunks.get(id as usize / CHUNK).map(|c| &c[id as usize & (CHUNK - 1)])
    }

    /// A packet of `bytes` came out of tunnel `id`.
    #[inline(always)]
    pub fn rx(&mut self, id: u32, bytes: usize) {
        self.count::<RX>(id, bytes);
    }

    /// A packet of `bytes` went into tunnel `id`.
    #[inline(always)]
    pub fn tx(&mut self, id: u32, bytes: usize) {
        self.count::<TX>(id, bytes);
    }

    #[inline(always)]
    fn count<const DIR: usize>(&mut self, id: u32, bytes: usize) {
        if !self.counting {
            return;
        }
        let run = &mut self.runs[DIR];
        if run.id == id {
            run.sum += Run::one(bytes);
        } else {
            self.start::<DIR>(id, bytes);
        }
    }

    #[inline(never)]
    fn start<const DIR: usize>(&mut self, id: u32, bytes: usize) {
        self.write(DIR);
        self.runs[DIR] = Run { id, sum: Run::one(bytes) };
    }

    fn write(&mut self, dir: usize) {
        let r = std::mem::replace(&mut self.runs[dir], Run::NONE);
        if let Some(s) = self.slot(r.id) {
            let (packets, bytes) = if dir == TX { (&s.tx_packets, &s.tx_bytes) } else { (&s.rx_packets, &s.rx_bytes) };
            bump(packets, r.packets());
            bump(bytes, r.bytes());
        }
    }

    /// Write the runs being counted to their slots: at the end of every vector of a
    /// node that counts, so nothing stays unseen longer than a vector.
    #[inline]
    pub fn flush(&mut self) {
        for dir in [RX, TX] {
            if self.runs[dir].id != u32::MAX {
                self.write(dir);
            }
        }
    }
}

/// Single writer: a load and a store, not a read-modify-write instruction.
#[inline(always)]
fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_growth_and_reset() {
        let shared = TunnelCounters::new();
        let mut w = TunnelCounterWriter::new(shared.clone());
        // Before any room is made, counting is a no-op (never a panic).
        w.tx(5, 100);
        w.flush();
        assert_eq!(shared.get(5), TunnelCount::default());
        w.reserve(10);
        w.tx(5, 100);
        w.tx(5, 50);
        w.rx(5, 60);
        // A run is not visible before it is written out.
        assert_eq!(shared.get(5), TunnelCount::default());
        w.reserve(3 * CHUNK + 1);
        w.rx(3 * CHUNK as u32, 1);
        // Changing tunnel wrote the rx run of tunnel 5; its tx run is still open.
        assert_eq!(shared.get(5), TunnelCount { rx_packets: 1, rx_bytes: 60, tx_packets: 0, tx_bytes: 0 });
        w.flush();
        assert_eq!(shared.get(5), TunnelCount { rx_packets: 1, rx_bytes: 60, tx_packets: 2, tx_bytes: 150 });
        assert_eq!(shared.get(3 * CHUNK as u32).rx_packets, 1);
        assert_eq!(shared.get(u32::MAX), TunnelCount::default());
        let mut seen = Vec::new();
        shared.for_each(|id, n| seen.push((id, n.rx_packets + n.tx_packets)));
        assert_eq!(seen, vec![(5, 3), (3 * CHUNK as u32, 1)]);
        shared.reset(5);
        assert_eq!(shared.get(5), TunnelCount::default());
        w.tx(5, 1);
        w.flush();
        assert_eq!(shared.get(5).tx_packets, 1);
        // A flush with nothing counted writes nothing.
        w.flush();
        assert_eq!(shared.get(5).tx_packets, 1);
    }

    proptest::proptest! {
        /// Runs summed in the writer equal counting every packet in its slot, whatever
        /// the order of tunnels, directions and flushes.
        #[test]
        fn runs_sum_like_per_packet_counting(ops in proptest::collection::vec((0u32..6, proptest::bool::ANY, 0usize..70_000, proptest::bool::ANY), 0..300)) {
            let shared = TunnelCounters::new();
            let mut w = TunnelCounterWriter::new(shared.clone());
            w.reserve(6);
            let mut want = [TunnelCount::default(); 6];
            for (id, rx, bytes, flush) in ops {
                if rx { w.rx(id, bytes) } else { w.tx(id, bytes) }
                let c = &mut want[id as usize];
                if rx { c.rx_packets += 1; c.rx_bytes += bytes as u64 } else { c.tx_packets += 1; c.tx_bytes += bytes as u64 }
                if flush { w.flush() }
            }
            w.flush();
            for id in 0..6u32 {
                proptest::prop_assert_eq!(shared.get(id), want[id as usize]);
            }
        }
    }
}
