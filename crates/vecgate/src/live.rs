//! The live view of `vecgate run`: rates over the last interval (packets and bits per
//! second per interface, packets per second, cycles per packet and packets per vector
//! per node, drops per second by reason), in at most 100 columns, or one JSON object per
//! line with `--json`. Totals since start stay in `vecgate ctl show runtime`.

use engine::stats::Snapshot;
use serde::Serialize;
use std::fmt::Write;

/// The widest line the text view prints.
pub const MAX_COLUMNS: usize = 100;

/// Rates between two snapshots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rates {
    /// Seconds since start (of the later snapshot).
    pub uptime_s: f64,
    /// The interval the rates are over.
    pub interval_s: f64,
    pub interfaces: Vec<InterfaceRate>,
    pub nodes: Vec<NodeRate>,
    pub drops: Vec<DropRate>,
    /// Buffers free in the pools of all workers.
    pub buffers_free: usize,
    pub buffers_total: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InterfaceRate {
    pub name: String,
    pub rx_pps: f64,
    pub tx_pps: f64,
    pub rx_bps: f64,
    pub tx_bps: f64,
    /// Since start.
    pub rx_packets: u64,
    pub tx_packets: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRate {
    pub name: String,
    pub pps: f64,
    /// Over the interval; 0 when no packet passed.
    pub cycles_per_packet: f64,
    pub packets_per_vector: f64,
    /// Since start.
    pub packets: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DropRate {
    pub node: String,
    pub counter: String,
    pub per_s: f64,
    /// Since start.
    pub total: u64,
}

/// Rates from `prev` to `now`, `seconds` apart (the first view: from start). Counters
/// cleared in between (`clear runtime`) count from zero.
pub fn rates(prev: Option<&Snapshot>, now: &Snapshot, seconds: f64) -> Rates {
    let dt = seconds.max(1e-9);
    let interfaces = now
        .ports
        .iter()
        .map(|p| {
            let before = prev.and_then(|s| s.ports.iter().find(|q| q.name == p.name)).map(|q| q.counters.clone()).unwrap_or_default();
            let c = &p.counters;
            let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
            InterfaceRate {
                name: p.name.clone(),
                rx_pps: d(c.rx_packets, before.rx_packets),
                tx_pps: d(c.tx_packets, before.tx_packets),
                rx_bps: 8.0 * d(c.rx_bytes, before.rx_bytes),
                tx_bps: 8.0 * d(c.tx_bytes, before.tx_bytes),
                rx_packets: c.rx_packets,
                tx_packets: c.tx_packets,
            }
        })
        .collect();
    let nodes = now
        .nodes
        .iter()
        .filter_map(|n| {
            let before = prev.and_then(|s| s.nodes.iter().find(|m| m.name == n.name)).map(|m| m.runtime).unwrap_or_default();
            let packets = n.runtime.packets.saturating_sub(before.packets);
            if packets == 0 {
                return None;
            }
            let cycles = n.runtime.cycles.saturating_sub(before.cycles);
            let vectors = n.runtime.vectors.saturating_sub(before.vectors).max(1);
            Some(NodeRate {
                name: n.name.clone(),
                pps: packets as f64 / dt,
                cycles_per_packet: cycles as f64 / packets as f64,
                packets_per_vector: packets as f64 / vectors as f64,
                packets: n.runtime.packets,
            })
        })
        .collect();
    let drops = now
        .counters
        .iter()
        .filter(|c| c.severity != engine::Severity::Info)
        .filter_map(|c| {
            let before = prev.and_then(|s| s.counters.iter().find(|d| d.node == c.node && d.counter == c.counter)).map_or(0, |d| d.count);
            let n = c.count.saturating_sub(before);
            (n > 0).then(|| DropRate { node: c.node.to_string(), counter: c.counter.to_string(), per_s: n as f64 / dt, total: c.count })
        })
        .collect();
    Rates {
        uptime_s: now.elapsed_cycles as f64 / now.tsc_hz.max(1) as f64,
        interval_s: seconds,
        interfaces,
        nodes,
        drops,
        buffers_free: now.pool.regular_free,
        buffers_total: now.pool.regular_total,
    }
}

/// `1.23M`, `45.6k`, `789`: a rate in 7 columns.
fn si(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.2}G", v / 1e9),
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

/// Why these cycles/packet are higher than `vecgate bench`'s, said under the table.
pub const CYCLES_NOTE: &str = "Cycles/pkt are this interval's. A node's per-vector cost is shared by the packets of the \
vector: at the default generators' rates vectors are small (Pkts/vec), so each packet carries more of it than in \
`vecgate bench`, which sends full 256-packet vectors.";

/// The text view: header, interfaces, nodes, drops; every line at most `MAX_COLUMNS`.
pub fn text(r: &Rates, title: &str) -> String {
    let mut o = String::new();
    let head = format!("vecgate {} — {title}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(o, "{}", clip(&head, MAX_COLUMNS - 30));
    let _ = writeln!(
        o,
        "up {:.1} s, rates over the last {:.1} s, buffers free {}/{} (ctrl-c to stop)\n",
        r.uptime_s, r.interval_s, r.buffers_free, r.buffers_total
    );
    let _ = writeln!(
        o,
        "{:<22} {:>9} {:>9} {:>10} {:>10} {:>14} {:>14}",
        "Interface", "rx pkt/s", "tx pkt/s", "rx bit/s", "tx bit/s", "rx total", "tx total"
    );
    for i in &r.interfaces {
        let _ = writeln!(
            o,
            "{:<22} {:>9} {:>9} {:>10} {:>10} {:>14} {:>14}",
            clip(&i.name, 22),
            si(i.rx_pps),
            si(i.tx_pps),
            si(i.rx_bps),
            si(i.tx_bps),
            i.rx_packets,
            i.tx_packets
        );
    }
    let _ = writeln!(o, "\n{:<22} {:>9} {:>11} {:>9} {:>14}", "Node", "pkt/s", "Cycles/pkt", "Pkts/vec", "total pkts");
    for n in &r.nodes {
        let _ = writeln!(
            o,
            "{:<22} {:>9} {:>11.1} {:>9.1} {:>14}",
            clip(&n.name, 22),
            si(n.pps),
            n.cycles_per_packet,
            n.packets_per_vector,
            n.packets
        );
    }
    if r.nodes.is_empty() {
        o.push_str("(no packets in this interval)\n");
    }
    if !r.drops.is_empty() {
        let _ = writeln!(o, "\n{:<22} {:<30} {:>9} {:>14}", "Dropped by", "reason", "per s", "total");
        for d in &r.drops {
            let _ = writeln!(o, "{:<22} {:<30} {:>9} {:>14}", clip(&d.node, 22), clip(&d.counter, 30), si(d.per_s), d.total);
        }
    }
    o.push('\n');
    o += &wrap(CYCLES_NOTE, MAX_COLUMNS);
    o
}

/// One JSON object, one line (`vecgate run --json`).
pub fn json_line(r: &Rates) -> String {
    serde_json::to_string(r).expect("rates serialize")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('…')).collect()
    }
}

/// Words into lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> String {
    let mut o = String::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + w.chars().count() > width {
            o += &line;
            o.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += w;
    }
    if !line.is_empty() {
        o += &line;
        o.push('\n');
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use control::config::Config;
    use control::dataplane::assemble;

    /// Two snapshots of the default gateway a known number of packets apart: rates are
    /// the differences over the interval, not the totals, and the view fits 100 columns.
    #[test]
    fn rates_are_per_interval_and_the_view_fits() {
        let cfg = Config::default_gateway();
        let (_control, mut worker) = assemble(&cfg).unwrap().into_single();
        for _ in 0..50 {
            worker.poll_once();
        }
        let a = worker.snapshot();
        for _ in 0..50 {
            worker.poll_once();
        }
        let b = worker.snapshot();
        let r = rates(Some(&a), &b, 2.0);
        let port = |s: &Snapshot, n: &str| s.ports.iter().find(|p| p.name == n).unwrap().counters.clone();
        let pg0 = r.interfaces.iter().find(|i| i.name == "pg0").unwrap();
        let want = (port(&b, "pg0").rx_packets - port(&a, "pg0").rx_packets) as f64 / 2.0;
        assert!(want > 0.0);
        assert_eq!(pg0.rx_pps, want);
        assert_eq!(pg0.rx_packets, port(&b, "pg0").rx_packets);
        let eth = r.nodes.iter().find(|n| n.name == "ethernet-input").unwrap();
        let node = |s: &Snapshot| s.nodes.iter().find(|n| n.name == "ethernet-input").unwrap().runtime;
        let (na, nb) = (node(&a), node(&b));
        assert_eq!(eth.pps, (nb.packets - na.packets) as f64 / 2.0);
        assert_eq!(eth.cycles_per_packet, (nb.cycles - na.cycles) as f64 / (nb.packets - na.packets) as f64);
        assert_eq!(eth.packets_per_vector, (nb.packets - na.packets) as f64 / (nb.vectors - na.vectors) as f64);
        // Drops: exactly the non-info counters that grew in the interval, as rates.
        for c in b.counters.iter().filter(|c| c.severity != engine::Severity::Info) {
            let before = a.counters.iter().find(|d| d.node == c.node && d.counter == c.counter).map_or(0, |d| d.count);
            let shown = r.drops.iter().find(|d| d.node == c.node && d.counter == c.counter);
            assert_eq!(shown.map(|d| d.per_s), (c.count > before).then(|| (c.count - before) as f64 / 2.0), "{c:?}");
        }
        let t = text(&r, "built-in default gateway");
        for l in t.lines() {
            assert!(l.chars().count() <= MAX_COLUMNS, "{} columns: {l}", l.chars().count());
        }
        assert!(t.contains("vecgate bench") && t.contains("Pkts/vec"), "{t}");
        // JSON: one line that parses back to the same numbers.
        let j = json_line(&r);
        assert!(!j.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["interfaces"].as_array().unwrap().len(), r.interfaces.len());
        assert_eq!(v["interval_s"], 2.0);
        // Counters cleared between two views count from zero, never negative.
        let r = rates(Some(&b), &a, 1.0);
        assert!(r.interfaces.iter().all(|i| i.rx_pps == 0.0 && i.tx_pps == 0.0));
    }
}
