//! Runtime statistics and the snapshots the control plane reads.
//!
//! Counters are plain integers owned by the worker; the control plane asks the worker
//! for a snapshot between vectors and merges snapshots across workers.

use serde::Serialize;

/// Per-node runtime, VPP `show runtime` style.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NodeRuntime {
    /// Times the node was dispatched (input nodes: polled).
    pub calls: u64,
    /// Dispatches that carried at least one packet.
    pub vectors: u64,
    pub packets: u64,
    /// TSC cycles spent in the node.
    pub cycles: u64,
}

impl NodeRuntime {
    pub fn add(&mut self, o: &NodeRuntime) {
        self.calls += o.calls;
        self.vectors += o.vectors;
        self.packets += o.packets;
        self.cycles += o.cycles;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSnapshot {
    pub name: String,
    /// `input`, `internal`, `drop`, `output`.
    pub kind: &'static str,
    #[serde(flatten)]
    pub runtime: NodeRuntime,
    pub cycles_per_packet: f64,
    /// While the graph samples vectors: the cycles per packet of the median packet's
    /// vector (vectors ordered by cycles per packet, each weighing its packets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_median: Option<f64>,
    /// The names of the nodes this one can send packets to (its next nodes), for
    /// drawing the graph.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub next: Vec<String>,
}

/// The packet-weighted median of vectors' cycles per packet, from (cycles, packets) per
/// vector; `None` for no packets.
pub fn vector_median(samples: &[(u32, u32)]) -> Option<f64> {
    let mut v: Vec<(f64, u64)> = samples.iter().filter(|s| s.1 > 0).map(|&(c, p)| (c as f64 / p as f64, p as u64)).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let half = v.iter().map(|s| s.1).sum::<u64>().div_ceil(2);
    let mut seen = 0;
    v.into_iter()
        .find(|s| {
            seen += s.1;
            seen >= half
        })
        .map(|s| s.0)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterSnapshot {
    pub node: String,
    pub counter: &'static str,
    pub severity: crate::node::Severity,
    pub description: &'static str,
    pub count: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Packets the device could not take (full ring, link down).
    pub tx_errors: u64,
    /// Receive-side refusals (no buffer, frame too large).
    pub rx_errors: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortSnapshot {
    pub if_index: u16,
    pub name: String,
    pub kind: &'static str,
    pub counters: PortCounters,
    /// The device's own counters (`Device::counters`), non-zero ones only.
    pub device: Vec<(&'static str, u64)>,
}

/// Everything `show runtime`, `show errors` and `show interfaces` print.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    pub worker: usize,
    pub tsc_hz: u64,
    /// TSC cycles since the runtime was last cleared.
    pub elapsed_cycles: u64,
    /// Loop iterations of the worker.
    pub loops: u64,
    pub nodes: Vec<NodeSnapshot>,
    pub counters: Vec<CounterSnapshot>,
    pub ports: Vec<PortSnapshot>,
    pub pool: crate::pool::PoolStats,
    /// Packets received by each worker merged into this snapshot, by worker id.
    pub worker_rx: Vec<(usize, u64)>,
}

impl Snapshot {
    /// Merge another worker's snapshot of the same graph into this one.
    pub fn merge(&mut self, o: &Snapshot) {
        self.loops += o.loops;
        self.worker_rx.extend_from_slice(&o.worker_rx);
        self.elapsed_cycles = self.elapsed_cycles.max(o.elapsed_cycles);
        for (a, b) in self.nodes.iter_mut().zip(&o.nodes) {
            a.runtime.add(&b.runtime);
            a.cycles_per_packet = per_packet(a.runtime.cycles, a.runtime.packets);
            // Medians of different workers' vectors do not combine.
            a.vector_median = None;
        }
        for (a, b) in self.counters.iter_mut().zip(&o.counters) {
            a.count += b.count;
        }
        for (a, b) in self.ports.iter_mut().zip(&o.ports) {
            a.counters.rx_packets += b.counters.rx_packets;
            a.counters.rx_bytes += b.counters.rx_bytes;
            a.counters.tx_packets += b.counters.tx_packets;
            a.counters.tx_bytes += b.counters.tx_bytes;
            a.counters.tx_errors += b.counters.tx_errors;
            a.counters.rx_errors += b.counters.rx_errors;
            for &(name, v) in &b.device {
                match a.device.iter_mut().find(|c| c.0 == name) {
                    Some(c) => c.1 += v,
                    None => a.device.push((name, v)),
                }
            }
        }
    }
}

pub fn per_packet(cycles: u64, packets: u64) -> f64 {
    if packets == 0 {
        0.0
    } else {
        cycles as f64 / packets as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_median_weighs_vectors_by_packets() {
        assert_eq!(vector_median(&[]), None);
        assert_eq!(vector_median(&[(100, 0)]), None);
        // One slow vector (the worker stopped) among quick ones moves the mean, not this.
        assert_eq!(vector_median(&[(2560, 256), (2560, 256), (1_000_000, 256)]), Some(10.0));
        // A full vector outweighs two small slow ones.
        assert_eq!(vector_median(&[(50, 1), (50, 1), (2560, 256)]), Some(10.0));
        assert_eq!(vector_median(&[(30, 1), (10, 1), (20, 1)]), Some(20.0));
    }
}
