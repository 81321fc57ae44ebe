//! Text tables for people. The JSON API returns the same data structured.

use crate::dataplane::InterfaceInfo;
use engine::stats::{CounterSnapshot, Snapshot};
use engine::trace::TraceRecord;
use ip::tables::IfL3;
use ip::RouterState;
use serde::Serialize;
use std::fmt::Write;

/// Per-node runtime, like VPP's `show runtime`, with the path total.
pub fn runtime(s: &Snapshot) -> String {
    let mut o = String::new();
    let secs = s.elapsed_cycles as f64 / s.tsc_hz.max(1) as f64;
    let _ = writeln!(
        o,
        "Time {:.1} s, {} loops, TSC {:.2} GHz, buffers free {}/{}",
        secs,
        s.loops,
        s.tsc_hz as f64 / 1e9,
        s.pool.regular_free,
        s.pool.regular_total
    );
    if s.worker_rx.len() > 1 {
        let per: Vec<String> = s.worker_rx.iter().map(|(w, n)| format!("worker {w}: {n}")).collect();
        let _ = writeln!(o, "Packets received per worker (from devices and handed over): {}", per.join(", "));
    }
    let _ = writeln!(
        o,
        "{:<22} {:>8} {:>12} {:>12} {:>14} {:>11} {:>10}",
        "Name", "Kind", "Calls", "Vectors", "Packets", "Cycles/pkt", "Pkts/vec"
    );
    for n in s.nodes.iter().filter(|n| n.runtime.calls > 0 || n.runtime.packets > 0) {
        let per_vector = if n.runtime.vectors > 0 { n.runtime.packets as f64 / n.runtime.vectors as f64 } else { 0.0 };
        let _ = writeln!(
            o,
            "{:<22} {:>8} {:>12} {:>12} {:>14} {:>11.1} {:>10.1}",
            n.name, n.kind, n.runtime.calls, n.runtime.vectors, n.runtime.packets, n.cycles_per_packet, per_vector
        );
    }
    let input_packets: u64 = s.nodes.iter().filter(|n| n.kind == "input").map(|n| n.runtime.packets).sum();
    let graph_cycles: u64 = s.nodes.iter().filter(|n| n.kind != "input").map(|n| n.runtime.cycles).sum();
    if input_packets > 0 {
        let _ = writeln!(
            o,
            "graph: {:.1} cycles/packet over {} packets received ({:.2} Mpps received)",
            graph_cycles as f64 / input_packets as f64,
            input_packets,
            input_packets as f64 / secs.max(1e-9) / 1e6
        );
    }
    o
}

pub fn errors(rows: &[CounterSnapshot]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{:>12}  {:<18} {:<24} {:<6} Description", "Count", "Node", "Counter", "Sev");
    for c in rows {
        let sev = match c.severity {
            engine::Severity::Info => "info",
            engine::Severity::Warn => "warn",
            engine::Severity::Error => "error",
        };
        let _ = writeln!(o, "{:>12}  {:<18} {:<24} {:<6} {}", c.count, c.node, c.counter, sev, c.description);
    }
    if rows.is_empty() {
        o.push_str("(no counters are non-zero)\n");
    }
    o
}

/// Traced packets one by one, VPP-style: each packet's path through the nodes in order,
/// under a header with the time it entered (UTC); a later step shows how long after.
/// Records arrive node by node for a whole vector, so they are grouped here.
pub fn trace(recs: &[TraceRecord]) -> String {
    let mut o = String::new();
    let mut order: Vec<&TraceRecord> = recs.iter().collect();
    // Stable: within a packet, the steps stay in the order they happened.
    order.sort_by_key(|r| r.packet);
    let mut first: Option<&TraceRecord> = None;
    let mut step = 0;
    for r in order {
        if first.is_none_or(|f| f.packet != r.packet) {
            let _ = writeln!(o, "Packet {} at {}", r.packet, time_of_day(r.time_ns));
            first = Some(r);
            step = 0;
        }
        let after = r.time_ns.saturating_sub(first.map_or(r.time_ns, |f| f.time_ns));
        let at = if after > 0 { format!(" (+{} us)", after / 1000) } else { String::new() };
        let _ = writeln!(o, "  {:02} {:<18} {}  -> {}{at}", step, r.node, r.text, r.verdict);
        step += 1;
    }
    if recs.is_empty() {
        o.push_str("(no trace; `trace add <input-node> <count>` first, e.g. trace add pg-input 10)\n");
    }
    o
}

/// A text column's width: its widest entry, at least `min` (the header's room), so that
/// long names (Kubernetes' `namespace/name:port`) do not push the next columns out of line.
pub fn column<'a>(min: usize, entries: impl IntoIterator<Item = &'a str>) -> usize {
    entries.into_iter().map(|e| e.chars().count()).max().unwrap_or(0).max(min)
}

/// A value as the config file and JSON spell it (`zero`, `flow-hash`, `cluster_ip`), for
/// text output: never the Rust name (`Zero`, `ClusterIp`).
pub fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// `HH:MM:SS.micros` (UTC) of a time in nanoseconds since the Unix epoch.
pub fn time_of_day(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let day = secs % 86_400;
    format!("{:02}:{:02}:{:02}.{:06} UTC", day / 3600, day / 60 % 60, day % 60, ns % 1_000_000_000 / 1000)
}

#[derive(Debug, Clone, Serialize)]
pub struct InterfaceRow {
    pub index: usize,
    pub name: String,
    pub kind: &'static str,
    /// How the device was opened, where that varies (af_xdp: "copy, native XDP").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub mac: String,
    pub mtu: u16,
    /// The reverse-path check of what it receives: `strict`, `loose` or `off`.
    pub urpf: ip::urpf::Urpf,
    pub addresses: Vec<String>,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
    /// The device's own non-zero counters (kernel drops, full queues, link events).
    pub device: Vec<(&'static str, u64)>,
}

pub fn interface_rows(l3: &[IfL3], info: &[InterfaceInfo], s: Option<&Snapshot>) -> Vec<InterfaceRow> {
    l3.iter()
        .enumerate()
        .filter(|(_, ifl)| !ifl.removed)
        .map(|(i, ifl)| {
            let port = s.and_then(|s| s.ports.iter().find(|p| p.if_index as usize == i));
            let c = port.map(|p| p.counters.clone()).unwrap_or_default();
            let mut addresses: Vec<String> = ifl.ip4.iter().map(|(a, l)| format!("{a}/{l}")).collect();
            addresses.extend(ifl.ip6.iter().map(|(a, l)| format!("{a}/{l}")));
            addresses.push(format!("{}/64", ifl.ip6_link_local));
            InterfaceRow {
                index: i,
                name: ifl.name.clone(),
                kind: info.get(i).map_or("?", |x| x.kind),
                detail: info.get(i).and_then(|x| x.detail.clone()),
                mac: ifl.mac.to_string(),
                mtu: ifl.mtu,
                urpf: ifl.urpf,
                addresses,
                rx_packets: c.rx_packets,
                rx_bytes: c.rx_bytes,
                tx_packets: c.tx_packets,
                tx_bytes: c.tx_bytes,
                tx_errors: c.tx_errors,
                device: port.map(|p| p.device.clone()).unwrap_or_default(),
            }
        })
        .collect()
}

/// ` urpf <mode>` for an interface or tunnel that checks sources, nothing for one that
/// does not (`show interfaces`, `show gtpu tunnels`, `show udp tunnels`).
pub fn urpf_words(u: ip::urpf::Urpf) -> String {
    match u {
        ip::urpf::Urpf::Off => String::new(),
        m => format!(" urpf {m}"),
    }
}

pub fn interfaces(rows: &[InterfaceRow]) -> String {
    let mut o = String::new();
    for r in rows {
        let kind = match &r.detail {
            Some(d) => format!("{}: {d}", r.kind),
            None => r.kind.to_string(),
        };
        let _ = writeln!(o, "{} ({kind}) index {} mac {} mtu {}{}", r.name, r.index, r.mac, r.mtu, urpf_words(r.urpf));
        for a in &r.addresses {
            let _ = writeln!(o, "    {a}");
        }
        let _ = writeln!(
            o,
            "    rx {} packets {} bytes   tx {} packets {} bytes   tx errors {}",
            r.rx_packets, r.rx_bytes, r.tx_packets, r.tx_bytes, r.tx_errors
        );
        if !r.device.is_empty() {
            let parts: Vec<String> = r.device.iter().map(|(n, v)| format!("{n} {v}")).collect();
            let _ = writeln!(o, "    device: {}", parts.join("   "));
        }
    }
    o
}

/// `show ip fib` lists this many entries unless asked for more.
pub const FIB_LIMIT: usize = 1000;

pub fn fib(rows: &[ip::state::FibEntry], generation: u64) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "FIB generation {generation}, {} entries", rows.len());
    // Tunnels are interfaces too (`ipsec_tunnel12`, `gtpu_tunnel100000`): the column is as
    // wide as its longest name, so the adjacencies stay under their header.
    let names = rows.iter().flat_map(|r| r.interface.iter().chain(r.paths.iter().flat_map(|x| x.interface.iter())));
    let if_w = column(10, names.map(String::as_str));
    let _ = writeln!(o, "{:<44} {:<10} {:<28} {:<if_w$} {:>5}", "Prefix", "Kind", "Next hop", "Interface", "Adj");
    for r in rows {
        let _ = writeln!(
            o,
            "{:<44} {:<10} {:<28} {:<if_w$} {:>5}  {}",
            r.prefix,
            r.kind,
            r.next_hop.as_deref().unwrap_or("-"),
            r.interface.as_deref().unwrap_or("-"),
            // A tunnel's route leads to the tunnel (its interface column), not to an
            // adjacency: its value is an internal code, not shown.
            if r.adjacency > ip::tables::MAX_INDEX { "-".to_string() } else { r.adjacency.to_string() },
            if r.resolved { "" } else { "(unresolved)" }
        );
        for x in &r.paths {
            let _ = writeln!(
                o,
                "{:<44} {:<10} {:<28} {:<if_w$} weight {}{}",
                "",
                "  path",
                x.next_hop.as_deref().unwrap_or("-"),
                x.interface.as_deref().unwrap_or("-"),
                x.weight,
                if x.skipped { " (skipped)" } else { "" }
            );
        }
    }
    o
}

#[derive(Debug, Clone, Serialize)]
pub struct NeighbourRow {
    pub ip: String,
    /// Empty while incomplete.
    pub mac: String,
    pub interface: String,
    #[serde(rename = "static")]
    pub is_static: bool,
    /// Being solicited, with packets held for it (`ip-glean`): none has answered yet.
    pub incomplete: bool,
    /// Packets held for it, all workers together, and how long the oldest has waited.
    pub held: usize,
    pub waiting_ms: Option<u64>,
}

/// The known neighbours, and those the workers are soliciting with packets held
/// (`waiting`: each worker's [`ip::hold::Waiting`], with the oldest's age in ms).
pub fn neighbour_rows(state: &RouterState, waiting: &[(ip::hold::Waiting, u64)]) -> Vec<NeighbourRow> {
    let if_name = |i: engine::IfIndex| state.interfaces().get(i.get()).map_or("?".into(), |i| i.name.clone());
    let mut v: Vec<NeighbourRow> = state
        .neighbours()
        .map(|(ip, n)| NeighbourRow {
            ip: ip.to_string(),
            mac: n.mac.to_string(),
            interface: if_name(n.if_index),
            is_static: n.is_static,
            incomplete: false,
            held: 0,
            waiting_ms: None,
        })
        .collect();
    for (w, age_ms) in waiting {
        let (ip, interface) = (w.target.to_string(), if_name(w.if_index));
        // Several workers may wait for one neighbour; one known by now is not incomplete.
        match v.iter_mut().find(|r| r.ip == ip && r.interface == interface) {
            Some(r) => {
                r.held += w.packets;
                r.waiting_ms = r.waiting_ms.max(Some(*age_ms));
            }
            None => v.push(NeighbourRow {
                ip,
                mac: String::new(),
                interface,
                is_static: false,
                incomplete: true,
                held: w.packets,
                waiting_ms: Some(*age_ms),
            }),
        }
    }
    v.sort_by(|a, b| a.ip.cmp(&b.ip));
    v
}

pub fn neighbours(rows: &[NeighbourRow]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{:<40} {:<18} {:<10} Type", "Address", "MAC", "Interface");
    for r in rows {
        let kind = match (r.incomplete, r.is_static) {
            (true, _) => "incomplete",
            (false, true) => "static",
            (false, false) => "learned",
        };
        let held = match r.waiting_ms {
            Some(ms) if r.held > 0 => format!(", {} packet{} held, the oldest {ms} ms", r.held, if r.held == 1 { "" } else { "s" }),
            _ => String::new(),
        };
        let mac = if r.mac.is_empty() { "-" } else { &r.mac };
        let _ = writeln!(o, "{:<40} {:<18} {:<10} {kind}{held}", r.ip, mac, r.interface);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use ip::hold::Waiting;
    use ip::{IfAddr, InterfaceSpec};

    /// Two workers soliciting the same next hop make one incomplete row with both
    /// workers' packets and the older wait; a next hop learned meanwhile is not incomplete
    /// (its packets are on their way), but shows what still waits.
    #[test]
    fn incomplete_neighbours_merge_the_workers_waits() {
        let spec = |name: &str, mac: &str, a: &str| InterfaceSpec {
            name: name.into(),
            mac: mac.parse().unwrap(),
            mtu: 1500,
            addresses: vec![a.parse::<IfAddr>().unwrap()],
        };
        let mut state =
            RouterState::new(vec![spec("a", "02:00:00:00:00:0a", "198.18.0.1/24"), spec("b", "02:00:00:00:00:0b", "198.18.1.1/24")])
                .unwrap();
        let (ghost, known): (std::net::IpAddr, std::net::IpAddr) = ("198.18.1.77".parse().unwrap(), "198.18.1.2".parse().unwrap());
        state.set_neighbour(engine::IfIndex(1), known, "02:00:00:00:01:02".parse().unwrap(), false);
        let w = |target, packets| Waiting { if_index: engine::IfIndex(1), target, packets, since: 0 };
        let rows = neighbour_rows(&state, &[(w(ghost, 2), 40), (w(ghost, 1), 900), (w(known, 1), 5)]);
        let row = |ip: &str| rows.iter().find(|r| r.ip == ip).unwrap();
        assert_eq!(rows.len(), 2);
        let g = row("198.18.1.77");
        assert_eq!((g.incomplete, g.mac.as_str(), g.interface.as_str(), g.held, g.waiting_ms), (true, "", "b", 3, Some(900)));
        let k = row("198.18.1.2");
        assert_eq!((k.incomplete, k.held, k.waiting_ms), (false, 1, Some(5)));
        let text = neighbours(&rows);
        assert!(text.contains("incomplete, 3 packets held, the oldest 900 ms"), "{text}");
        assert!(text.contains("learned, 1 packet held"), "{text}");
    }
}
