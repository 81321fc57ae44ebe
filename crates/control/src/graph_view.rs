//! A live picture of the node graph: each node with its packet and drop rates and the
//! nodes it sends to, laid out in columns by distance from the input nodes. `ctl show
//! graph` prints it as text; the metrics endpoint's `/graph` page draws it.
//!
//! Rates are the difference between this snapshot and the one the previous call took
//! (so two calls a second apart show the last second), or the average since the
//! runtime was cleared on the first call.

use engine::node::Severity;
use engine::stats::Snapshot;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphNode {
    pub name: String,
    /// `input`, `internal`, `drop`, `output`.
    pub kind: &'static str,
    /// Distance from the nearest input node (inputs are 0); nodes no input reaches
    /// come after the deepest reached column.
    pub column: usize,
    pub packets: u64,
    pub packets_per_sec: f64,
    /// Packets this node dropped (its warn and error counters).
    pub drops: u64,
    pub drops_per_sec: f64,
    pub cycles_per_packet: f64,
    pub next: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphView {
    /// Seconds the rates were measured over.
    pub interval_sec: f64,
    pub nodes: Vec<GraphNode>,
}

fn drops_by_node(s: &Snapshot) -> HashMap<&str, u64> {
    let mut m = HashMap::new();
    for c in s.counters.iter().filter(|c| c.severity != Severity::Info) {
        *m.entry(c.node.as_str()).or_insert(0) += c.count;
    }
    m
}

/// Columns by breadth-first distance from the input nodes.
fn columns(s: &Snapshot) -> Vec<usize> {
    let index: HashMap<&str, usize> = s.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut col = vec![usize::MAX; s.nodes.len()];
    let mut queue = VecDeque::new();
    for (i, n) in s.nodes.iter().enumerate() {
        if n.kind == "input" {
            col[i] = 0;
            queue.push_back(i);
        }
    }
    while let Some(i) = queue.pop_front() {
        for next in &s.nodes[i].next {
            if let Some(&j) = index.get(next.as_str()) {
                if col[j] == usize::MAX {
                    col[j] = col[i] + 1;
                    queue.push_back(j);
                }
            }
        }
    }
    let deepest = col.iter().copied().filter(|&c| c != usize::MAX).max().unwrap_or(0);
    col.into_iter().map(|c| if c == usize::MAX { deepest + 1 } else { c }).collect()
}

/// The view of `cur`, with rates against `prev` (taken at `prev.0`) when given.
pub fn view(prev: Option<&(Instant, Snapshot)>, now: Instant, cur: &Snapshot) -> GraphView {
    let drops = drops_by_node(cur);
    let base = prev.filter(|(t, p)| now.duration_since(*t).as_secs_f64() >= 0.05 && p.nodes.len() == cur.nodes.len());
    let (interval, prev_packets, prev_drops): (f64, Vec<u64>, HashMap<&str, u64>) = match base {
        Some((t, p)) => (now.duration_since(*t).as_secs_f64(), p.nodes.iter().map(|n| n.runtime.packets).collect(), drops_by_node(p)),
        None => {
            let secs = if cur.tsc_hz > 0 { cur.elapsed_cycles as f64 / cur.tsc_hz as f64 } else { 0.0 };
            (secs, vec![0; cur.nodes.len()], HashMap::new())
        }
    };
    let rate = |now: u64, before: u64| if interval > 0.0 { now.saturating_sub(before) as f64 / interval } else { 0.0 };
    let cols = columns(cur);
    let nodes = cur
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let d = drops.get(n.name.as_str()).copied().unwrap_or(0);
            GraphNode {
                name: n.name.clone(),
                kind: n.kind,
                column: cols[i],
                packets: n.runtime.packets,
                packets_per_sec: rate(n.runtime.packets, prev_packets[i]),
                drops: d,
                drops_per_sec: rate(d, prev_drops.get(n.name.as_str()).copied().unwrap_or(0)),
                cycles_per_packet: n.cycles_per_packet,
                next: n.next.clone(),
            }
        })
        .collect();
    GraphView { interval_sec: interval, nodes }
}

fn human(r: f64) -> String {
    match r {
        r if r >= 1e6 => format!("{:.2}M", r / 1e6),
        r if r >= 1e3 => format!("{:.1}k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// The graph as text, a column at a time: each node with its rates and the next nodes
/// packets can take (`*` marks those that moved packets in the interval).
pub fn text(v: &GraphView) -> String {
    let busy: HashMap<&str, bool> = v.nodes.iter().map(|n| (n.name.as_str(), n.packets_per_sec > 0.0)).collect();
    let mut order: Vec<&GraphNode> = v.nodes.iter().collect();
    order.sort_by_key(|n| n.column);
    let mut out = format!(
        "{:<24} {:>9} {:>9} {:>8}  next nodes (* moved packets), rates over {:.1} s\n",
        "node", "pkts/s", "drops/s", "clk/pkt", v.interval_sec
    );
    let mut col = usize::MAX;
    for n in order {
        if n.column != col {
            col = n.column;
            out += &format!("-- column {col}\n");
        }
        let next: Vec<String> =
            n.next.iter().map(|x| if busy.get(x.as_str()).copied().unwrap_or(false) { format!("{x}*") } else { x.clone() }).collect();
        out += &format!(
            "{:<24} {:>9} {:>9} {:>8.1}  {}\n",
            n.name,
            human(n.packets_per_sec),
            human(n.drops_per_sec),
            n.cycles_per_packet,
            if next.is_empty() { "-".to_string() } else { next.join(" ") }
        );
    }
    out
}

/// The `/graph` page: no external assets (it draws SVG from `/graph.json`).
pub const PAGE: &str = include_str!("graph.html");

#[cfg(test)]
mod tests {
    use super::*;
    use engine::stats::{CounterSnapshot, NodeRuntime, NodeSnapshot};

    fn node(name: &str, kind: &'static str, packets: u64, next: &[&str]) -> NodeSnapshot {
        NodeSnapshot {
            name: name.into(),
            kind,
            runtime: NodeRuntime { packets, ..Default::default() },
            cycles_per_packet: 0.0,
            vector_median: None,
            next: next.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn snap(pkts: u64, drops: u64) -> Snapshot {
        Snapshot {
            worker: 0,
            tsc_hz: 1000,
            elapsed_cycles: 2000,
            loops: 0,
            nodes: vec![
                node("pg-input", "input", pkts, &["ethernet-input"]),
                node("ethernet-input", "internal", pkts, &["ip4-input", "arp-input"]),
                node("ip4-input", "internal", pkts, &["ip4-lookup"]),
                node("arp-input", "internal", 0, &[]),
                node("ip4-lookup", "internal", pkts, &[]),
                node("orphan", "internal", 0, &[]),
            ],
            counters: vec![
                CounterSnapshot { node: "ip4-lookup".into(), counter: "no-route", severity: Severity::Warn, description: "", count: drops },
                CounterSnapshot { node: "ip4-lookup".into(), counter: "event", severity: Severity::Info, description: "", count: 99 },
            ],
            ports: vec![],
            pool: Default::default(),
            worker_rx: vec![],
        }
    }

    #[test]
    fn columns_follow_distance_from_inputs() {
        let v = view(None, Instant::now(), &snap(10, 0));
        let col: HashMap<_, _> = v.nodes.iter().map(|n| (n.name.as_str(), n.column)).collect();
        assert_eq!((col["pg-input"], col["ethernet-input"], col["ip4-input"], col["arp-input"], col["ip4-lookup"]), (0, 1, 2, 2, 3));
        assert_eq!(col["orphan"], 4, "unreached nodes go after the deepest column");
    }

    #[test]
    fn rates_are_deltas_against_the_previous_call_and_info_counters_are_not_drops() {
        let t0 = Instant::now();
        let first = view(None, t0, &snap(1000, 10));
        // No previous snapshot: averages over the runtime (2000 cycles at 1000 Hz = 2 s).
        assert_eq!(first.interval_sec, 2.0);
        assert_eq!(first.nodes[4].packets_per_sec, 500.0);
        assert_eq!(first.nodes[4].drops, 10);
        let prev = (t0, snap(1000, 10));
        let later = t0 + std::time::Duration::from_secs(2);
        let v = view(Some(&prev), later, &snap(5000, 30));
        assert_eq!(v.nodes[4].packets_per_sec, 2000.0);
        assert_eq!(v.nodes[4].drops_per_sec, 10.0);
        let t = text(&v);
        assert!(t.contains("ip4-input*"), "{t}");
        assert!(t.contains("arp-input") && !t.contains("arp-input*"), "{t}");
    }
}
