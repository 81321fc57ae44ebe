//! Prometheus metrics: an HTTP endpoint (`[metrics] listen`, `vecgate run --metrics`)
//! serving the OpenMetrics text format through `prometheus-client`.
//!
//! Workers keep their counters as plain per-worker integers; a scrape asks each worker
//! for a snapshot between vectors (the same path as `show runtime`) and encodes them, so
//! the packet path gains no lock and no atomic. Series are per worker and bounded by the
//! graph, the interfaces and the counters the code defines — never by the number of
//! tunnels, routes or flows: table sizes are gauges, not series per entry. Tunnel traffic
//! is one series per tunnel kind (all tunnels together) plus the `top_tunnels` busiest
//! tunnels by name (default 10, at most 1000), so a million tunnels cost a scrape
//! a handful of series; `show gtpu tunnels` has every tunnel's counts. Per-tunnel
//! counting is off unless `[metrics] tunnel_counters = true` (it costs about 2 % of a
//! tunnel path); off, the scrape has no tunnel series and
//! `vecgate_tunnel_counters_enabled` is 0.

use crate::api::{Reply, Request};
use crate::server::Job;
use crossbeam_channel::Sender;
use engine::stats::Snapshot;
use ip::tunnel_counters::TunnelCount;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::time::Duration;

/// `[metrics]`: off unless `listen` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address and port to serve `GET /metrics` on, e.g. "127.0.0.1:9464". The bind
    /// address is explicit: nothing listens on all addresses unless told to.
    pub listen: Option<String>,
    /// How many of the busiest tunnels (by bytes both ways) get series of their own
    /// (default 10, at most 1000).
    pub top_tunnels: Option<usize>,
    /// Count packets and bytes per GTP-U and UDP tunnel (default off: it costs about
    /// 2 % of a tunnel path, docs/PERFORMANCE.md). Off, no per-tunnel series are served
    /// and `show gtpu tunnels` / `show udp tunnels` say that counting is off.
    #[serde(default)]
    pub tunnel_counters: bool,
}

/// Tunnels with series of their own at most.
pub const MAX_TOP_TUNNELS: usize = 1000;

/// Tunnel traffic for a scrape: per kind, and the busiest tunnels.
#[derive(Debug, Clone, Default)]
pub struct TunnelTraffic {
    /// Whether the workers count per tunnel (`[metrics] tunnel_counters`); off, the
    /// scrape has no tunnel series, only this as a gauge.
    pub counting: bool,
    pub totals: Vec<(&'static str, TunnelCount)>,
    /// (kind, tunnel name, counts), busiest first.
    pub top: Vec<(&'static str, String, TunnelCount)>,
}

/// Sum every worker's tunnel counters per kind; keep the `top` busiest of all kinds.
pub fn tunnel_traffic(gtpu: &gtpu::GtpuState, udp: &udptun::UdpTunState, top: usize) -> TunnelTraffic {
    type Named<'a> = &'a dyn Fn(u32) -> Option<String>;
    let gtpu_name = |id| gtpu.tunnel(id).map(|_| format!("{}{id}", ip::tables::GTPU_IF_PREFIX));
    let udp_name = |id| udp.spec(id).map(|_| format!("{}{id}", ip::tables::UDP_TUNNEL_IF_PREFIX));
    let kinds: [(&'static str, &ip::tunnel_counters::WorkerCounters, Named); 2] =
        [("gtpu", &gtpu.counters, &gtpu_name), ("udp", &udp.counters, &udp_name)];
    let mut t = TunnelTraffic { counting: gtpu.counters.enabled() || udp.counters.enabled(), ..Default::default() };
    if !t.counting {
        return t;
    }
    let mut busiest = Vec::new();
    for (kind, counters, name) in kinds {
        let mut total = TunnelCount::default();
        for (id, n) in counters.per_tunnel() {
            total.add(&n);
            if let Some(name) = name(id) {
                busiest.push((kind, name, n));
            }
        }
        t.totals.push((kind, total));
    }
    busiest.sort_by(|a, b| (b.2.rx_bytes + b.2.tx_bytes).cmp(&(a.2.rx_bytes + a.2.tx_bytes)).then_with(|| a.1.cmp(&b.1)));
    busiest.truncate(top.min(MAX_TOP_TUNNELS));
    t.top = busiest;
    t
}

/// The control plane's tables, as gauges.
#[derive(Debug, Clone, Default)]
pub struct TableSizes {
    pub routes: usize,
    pub neighbours: usize,
    pub gtpu_tunnels: usize,
    pub udp_tunnels: usize,
    /// With `[pfcp]`: its associations, sessions and message counts.
    pub pfcp: Option<PfcpCounts>,
    /// The punted ports (`show punt`'s rows): each a series by where it came from.
    pub punt_ports: Vec<crate::punt::PortRow>,
}

/// The UPF's control side for a scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct PfcpCounts {
    pub associations: usize,
    pub sessions: usize,
    pub stats: pfcp::upf::Stats,
}

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn counter_family(r: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let f = Family::<Labels, Counter>::default();
    r.register(name, help, f.clone());
    f
}

fn gauge_family(r: &mut Registry, name: &str, help: &str) -> Family<Labels, Gauge> {
    let f = Family::<Labels, Gauge>::default();
    r.register(name, help, f.clone());
    f
}

fn gauge(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Encode per-worker snapshots and table sizes as OpenMetrics text.
pub fn render(workers: &[Snapshot], tables: TableSizes, tunnels: &TunnelTraffic) -> String {
    let mut r = Registry::with_prefix("vecgate");
    let calls = counter_family(&mut r, "node_calls", "Times a node ran (once per vector it was given)");
    let vectors = counter_family(&mut r, "node_vectors", "Vectors a node processed");
    let packets = counter_family(&mut r, "node_packets", "Packets a node processed");
    let cycles = counter_family(&mut r, "node_cycles", "TSC cycles spent in a node");
    let errors = counter_family(&mut r, "errors", "Named node counters (drops and events), by node and reason");
    let rx_packets = counter_family(&mut r, "interface_rx_packets", "Frames received on an interface");
    let rx_bytes = counter_family(&mut r, "interface_rx_bytes", "Bytes received on an interface");
    let tx_packets = counter_family(&mut r, "interface_tx_packets", "Frames sent on an interface");
    let tx_bytes = counter_family(&mut r, "interface_tx_bytes", "Bytes sent on an interface");
    let rx_errors = counter_family(&mut r, "interface_rx_errors", "Receive errors of an interface's device");
    let tx_errors = counter_family(&mut r, "interface_tx_errors", "Frames a device could not send (dropped at transmit)");
    let device = counter_family(&mut r, "interface_device", "A device's own counters (kernel drops, ring stalls, ...)");
    let loops = counter_family(&mut r, "worker_loops", "Iterations of a worker's main loop");
    let elapsed = counter_family(&mut r, "worker_cycles", "TSC cycles since the worker's runtime was last cleared");
    let buffers = gauge_family(&mut r, "buffers", "Buffers in a worker's pool, by class (regular, medium, large) and state (free, total)");
    let alloc_fail = counter_family(&mut r, "buffer_alloc_failures", "Buffer allocations refused: the class was empty");
    let table = gauge_family(&mut r, "table_entries", "Entries in a control-plane table");
    let kind_packets = counter_family(&mut r, "tunnel_kind_packets", "Packets out of (rx) and into (tx) all tunnels of a kind");
    let kind_bytes = counter_family(&mut r, "tunnel_kind_bytes", "Inner bytes out of (rx) and into (tx) all tunnels of a kind");
    let tun_packets = counter_family(&mut r, "tunnel_packets", "Packets out of (rx) and into (tx) one of the busiest tunnels");
    let tun_bytes = counter_family(&mut r, "tunnel_bytes", "Inner bytes out of (rx) and into (tx) one of the busiest tunnels");
    let counting =
        gauge_family(&mut r, "tunnel_counters_enabled", "1 when per-tunnel counters are on ([metrics] tunnel_counters), 0 when off");
    counting.get_or_create(&Vec::new()).set(i64::from(tunnels.counting));
    for (kind, n) in &tunnels.totals {
        for (dir, p, b) in [("rx", n.rx_packets, n.rx_bytes), ("tx", n.tx_packets, n.tx_bytes)] {
            kind_packets.get_or_create(&labels(&[("kind", kind), ("direction", dir)])).inc_by(p);
            kind_bytes.get_or_create(&labels(&[("kind", kind), ("direction", dir)])).inc_by(b);
        }
    }
    for (kind, name, n) in &tunnels.top {
        for (dir, p, b) in [("rx", n.rx_packets, n.rx_bytes), ("tx", n.tx_packets, n.tx_bytes)] {
            tun_packets.get_or_create(&labels(&[("kind", kind), ("tunnel", name), ("direction", dir)])).inc_by(p);
            tun_bytes.get_or_create(&labels(&[("kind", kind), ("tunnel", name), ("direction", dir)])).inc_by(b);
        }
    }
    for s in workers {
        let w = s.worker.to_string();
        for n in &s.nodes {
            let l = labels(&[("worker", &w), ("node", &n.name)]);
            calls.get_or_create(&l).inc_by(n.runtime.calls);
            vectors.get_or_create(&l).inc_by(n.runtime.vectors);
            packets.get_or_create(&l).inc_by(n.runtime.packets);
            cycles.get_or_create(&l).inc_by(n.runtime.cycles);
        }
        for c in &s.counters {
            let sev = crate::format::word(&c.severity);
            errors.get_or_create(&labels(&[("worker", &w), ("node", &c.node), ("reason", c.counter), ("severity", &sev)])).inc_by(c.count);
        }
        for p in &s.ports {
            let l = labels(&[("worker", &w), ("interface", &p.name), ("kind", p.kind)]);
            rx_packets.get_or_create(&l).inc_by(p.counters.rx_packets);
            rx_bytes.get_or_create(&l).inc_by(p.counters.rx_bytes);
            tx_packets.get_or_create(&l).inc_by(p.counters.tx_packets);
            tx_bytes.get_or_create(&l).inc_by(p.counters.tx_bytes);
            rx_errors.get_or_create(&l).inc_by(p.counters.rx_errors);
            tx_errors.get_or_create(&l).inc_by(p.counters.tx_errors);
            for (name, v) in &p.device {
                device.get_or_create(&labels(&[("worker", &w), ("interface", &p.name), ("counter", name)])).inc_by(*v);
            }
        }
        let l = labels(&[("worker", &w)]);
        loops.get_or_create(&l).inc_by(s.loops);
        elapsed.get_or_create(&l).inc_by(s.elapsed_cycles);
        alloc_fail.get_or_create(&l).inc_by(s.pool.alloc_failures);
        for (class, state, v) in [
            ("regular", "free", s.pool.regular_free),
            ("regular", "total", s.pool.regular_total),
            ("large", "free", s.pool.large_free),
            ("large", "total", s.pool.large_total),
            ("medium", "free", s.pool.medium_free),
            ("medium", "total", s.pool.medium_total),
        ] {
            buffers.get_or_create(&labels(&[("worker", &w), ("class", class), ("state", state)])).set(gauge(v));
        }
    }
    for (name, v) in [
        ("routes", tables.routes),
        ("neighbours", tables.neighbours),
        ("gtpu_tunnels", tables.gtpu_tunnels),
        ("udp_tunnels", tables.udp_tunnels),
    ] {
        table.get_or_create(&labels(&[("table", name)])).set(gauge(v));
    }
    if let Some(p) = tables.pfcp {
        table.get_or_create(&labels(&[("table", "pfcp_associations")])).set(gauge(p.associations));
        table.get_or_create(&labels(&[("table", "pfcp_sessions")])).set(gauge(p.sessions));
        let counts = counter_family(&mut r, "pfcp", "PFCP (N4) messages and sessions, by counter (as show pfcp associations)");
        for (name, v) in p.stats.named() {
            counts.get_or_create(&labels(&[("counter", name)])).inc_by(v);
        }
    }
    if !tables.punt_ports.is_empty() {
        let punt = gauge_family(
            &mut r,
            "punt_port",
            "1 for each port of the gateway's addresses handed to the host's stack, by protocol, port and source: file ([punt]) or api (punt_port_add, with its owner)",
        );
        for p in &tables.punt_ports {
            let port = p.port.to_string();
            if p.file {
                punt.get_or_create(&labels(&[("protocol", p.protocol), ("port", &port), ("source", "file"), ("owner", "")])).set(1);
            }
            if let Some(owner) = &p.owner {
                punt.get_or_create(&labels(&[("protocol", p.protocol), ("port", &port), ("source", "api"), ("owner", owner)])).set(1);
            }
        }
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    in_order(&out)
}

/// The encoder writes a family's series in its hash map's order, another at every
/// scrape. Put them in one order, so that two scrapes of an idle gateway list the same
/// series in the same places: families stay in the order `render` registers them, and
/// each family's series are sorted by name and labels, numbers (a worker, a port) by
/// their value (`worker="2"` before `worker="10"`).
fn in_order(text: &str) -> String {
    fn flush(series: &mut Vec<&str>, out: &mut String) {
        // The key is the series without its value (`name{labels}`), unique in a scrape.
        series.sort_by(|a, b| natural_cmp(a.rsplit_once(' ').map_or(*a, |k| k.0), b.rsplit_once(' ').map_or(*b, |k| k.0)));
        for s in series.drain(..) {
            out.push_str(s);
            out.push('\n');
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut series = Vec::new();
    for line in text.lines() {
        // `# HELP`, `# TYPE`, `# UNIT` open a family (and end the one before); `# EOF` ends all.
        if line.starts_with('#') {
            flush(&mut series, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            series.push(line);
        }
    }
    flush(&mut series, &mut out);
    out
}

/// Compare as text, but runs of digits by their value: "w2" < "w10".
fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering::Equal;
    let digits = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        let (Some(&x), Some(&y)) = (a.first(), b.first()) else { return a.len().cmp(&b.len()) };
        let (n, m, order) = if x.is_ascii_digit() && y.is_ascii_digit() {
            let (n, m) = (digits(a), digits(b));
            let (v, w) = (trim_zeros(&a[..n]), trim_zeros(&b[..m]));
            // Equal values: fewer leading zeros first ("7" < "07").
            (n, m, v.len().cmp(&w.len()).then_with(|| v.cmp(w)).then_with(|| n.cmp(&m)))
        } else {
            (1, 1, x.cmp(&y))
        };
        if order != Equal {
            return order;
        }
        (a, b) = (&a[n..], &b[m..]);
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|c| **c == b'0').count();
    &d[z..]
}

/// The content type of `render`'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a scrape waits for the control loop (which asks every worker).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Parse a listen address, naming the field on error.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| format!("{s:?}: expected ADDRESS:PORT, e.g. 127.0.0.1:9464 or [2001:db8::1]:9464"))
}

/// Serve `GET /metrics` on `addr` from a background thread; each scrape is one
/// `Request::Metrics` through the control loop's job queue, like a `ctl` request.
pub fn serve(addr: SocketAddr, jobs: Sender<Job>) -> Result<SocketAddr, String> {
    let server = tiny_http::Server::http(addr).map_err(|e| format!("metrics listen {addr}: {e}"))?;
    let bound = server.server_addr().to_ip().unwrap_or(addr);
    std::thread::Builder::new()
        .name("vecgate-metrics".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                let resp = answer(&req, &jobs);
                let _ = req.respond(resp);
            }
        })
        .map_err(|e| format!("metrics thread: {e}"))?;
    Ok(bound)
}

fn answer(req: &tiny_http::Request, jobs: &Sender<Job>) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let text = |code: u16, body: String| {
        let ct = tiny_http::Header::from_bytes("Content-Type", "text/plain; charset=utf-8").expect("static header");
        tiny_http::Response::from_string(body).with_status_code(code).with_header(ct)
    };
    let path = req.url().split('?').next().unwrap_or("");
    if *req.method() != tiny_http::Method::Get {
        return text(405, "only GET\n".into());
    }
    let (request, content_type) = match path {
        "/metrics" => (Request::Metrics {}, CONTENT_TYPE),
        "/graph.json" => (Request::ShowGraph {}, "application/json"),
        "/graph" => {
            let ct = tiny_http::Header::from_bytes("Content-Type", "text/html; charset=utf-8").expect("static header");
            return tiny_http::Response::from_string(crate::graph_view::PAGE).with_header(ct);
        }
        _ => return text(404, "vecgate serves /metrics, /graph and /graph.json\n".into()),
    };
    let (tx, rx) = crossbeam_channel::bounded::<Reply>(1);
    if jobs.send((request, tx)).is_err() {
        return text(503, "the control loop has stopped\n".into());
    }
    match rx.recv_timeout(SCRAPE_TIMEOUT) {
        Ok(r) if r.ok => {
            let body = if content_type == CONTENT_TYPE { r.text } else { r.data.to_string() };
            let ct = tiny_http::Header::from_bytes("Content-Type", content_type).expect("static header");
            tiny_http::Response::from_string(body).with_header(ct)
        }
        Ok(r) => text(503, format!("{}\n", r.error.unwrap_or_default())),
        Err(_) => text(503, "the control loop did not answer in time\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::node::Severity;
    use engine::stats::{CounterSnapshot, NodeRuntime, NodeSnapshot, PortCounters, PortSnapshot};

    fn snapshot(worker: usize, packets: u64) -> Snapshot {
        Snapshot {
            worker,
            tsc_hz: 1,
            elapsed_cycles: 1000,
            loops: 7,
            nodes: vec![NodeSnapshot {
                name: "ip4-lookup".into(),
                kind: "internal",
                runtime: NodeRuntime { calls: 2, vectors: 2, packets, cycles: 30 * packets, ..Default::default() },
                cycles_per_packet: 30.0,
                vector_median: None,
                next: vec![],
            }],
            counters: vec![CounterSnapshot {
                node: "ip4-lookup".into(),
                counter: "no-route",
                severity: Severity::Warn,
                description: "",
                count: 5,
            }],
            ports: vec![PortSnapshot {
                if_index: 0,
                name: "pg0".into(),
                kind: "pg",
                counters: PortCounters { rx_packets: packets, rx_bytes: 64 * packets, ..Default::default() },
                device: vec![("kernel-drops", 3)],
            }],
            pool: Default::default(),
            worker_rx: vec![],
        }
    }

    #[test]
    fn every_worker_has_its_own_series_with_its_values() {
        let t = render(&[snapshot(0, 100), snapshot(1, 250)], TableSizes { routes: 12, ..Default::default() }, &TunnelTraffic::default());
        assert!(t.contains(r#"vecgate_node_packets_total{worker="0",node="ip4-lookup"} 100"#), "{t}");
        assert!(t.contains(r#"vecgate_node_packets_total{worker="1",node="ip4-lookup"} 250"#), "{t}");
        assert!(t.contains(r#"vecgate_errors_total{worker="0",node="ip4-lookup",reason="no-route",severity="warn"} 5"#), "{t}");
        assert!(t.contains(r#"vecgate_interface_rx_bytes_total{worker="1",interface="pg0",kind="pg"} 16000"#), "{t}");
        assert!(t.contains(r#"vecgate_interface_device_total{worker="0",interface="pg0",counter="kernel-drops"} 3"#), "{t}");
        assert!(t.contains(r#"vecgate_table_entries{table="routes"} 12"#), "{t}");
        assert!(t.trim_end().ends_with("# EOF"), "OpenMetrics text ends with # EOF");
    }

    #[test]
    fn a_upf_has_its_sessions_and_pfcp_counts_in_the_scrape() {
        let stats = pfcp::upf::Stats { malformed: 3, report_timeouts: 1, ..Default::default() };
        let pfcp = PfcpCounts { associations: 1, sessions: 2, stats };
        let t = render(&[], TableSizes { pfcp: Some(pfcp), ..Default::default() }, &TunnelTraffic::default());
        assert!(t.contains(r#"vecgate_table_entries{table="pfcp_sessions"} 2"#), "{t}");
        assert!(t.contains(r#"vecgate_table_entries{table="pfcp_associations"} 1"#), "{t}");
        assert!(t.contains(r#"vecgate_pfcp_total{counter="malformed"} 3"#), "{t}");
        assert!(t.contains(r#"vecgate_pfcp_total{counter="report-timeouts"} 1"#), "{t}");
        let without = render(&[], TableSizes::default(), &TunnelTraffic::default());
        assert!(!without.contains("pfcp"), "no [pfcp], no PFCP series: {without}");
    }

    #[test]
    fn punted_ports_say_where_they_came_from() {
        let row =
            |protocol, port, file, owner: Option<&str>| crate::punt::PortRow { protocol, port, file, owner: owner.map(str::to_string) };
        let punt_ports = vec![row("udp", 500, true, None), row("tcp", 179, true, Some("ctl")), row("tcp", 10256, false, Some("k8s"))];
        let t = render(&[], TableSizes { punt_ports, ..Default::default() }, &TunnelTraffic::default());
        assert!(t.contains(r#"vecgate_punt_port{protocol="udp",port="500",source="file",owner=""} 1"#), "{t}");
        assert!(t.contains(r#"vecgate_punt_port{protocol="tcp",port="179",source="file",owner=""} 1"#), "{t}");
        assert!(t.contains(r#"vecgate_punt_port{protocol="tcp",port="179",source="api",owner="ctl"} 1"#), "{t}");
        assert!(t.contains(r#"vecgate_punt_port{protocol="tcp",port="10256",source="api",owner="k8s"} 1"#), "{t}");
        assert!(!t.contains(r#"port="10256",source="file""#), "{t}");
        let without = render(&[], TableSizes::default(), &TunnelTraffic::default());
        assert!(!without.contains("punt"), "no punted port, no series: {without}");
    }

    /// The sample lines of family `name` (its series and values), in the order served.
    fn series_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' '])).collect()
    }

    #[test]
    fn two_scrapes_list_the_same_series_in_the_documented_order() {
        // Twelve workers, three nodes each: a hash map's order would differ between
        // renders and would not be sorted.
        let workers: Vec<Snapshot> = (0..12)
            .map(|w| {
                let mut s = snapshot(w, 100);
                for name in ["ip4-rewrite", "ethernet-input"] {
                    let mut n = s.nodes[0].clone();
                    n.name = name.into();
                    s.nodes.push(n);
                }
                s
            })
            .collect();
        let punt_ports = [10256, 179, 8022].map(|port| crate::punt::PortRow { protocol: "tcp", port, file: true, owner: None }).to_vec();
        let tables = TableSizes { routes: 3, punt_ports, ..Default::default() };
        let first = render(&workers, tables.clone(), &TunnelTraffic::default());
        let second = render(&workers, tables, &TunnelTraffic::default());
        assert_eq!(first, second);
        // Series sorted by their labels, numbers by value: worker 2 before worker 10.
        let mut want = Vec::new();
        for w in 0..12 {
            for node in ["ethernet-input", "ip4-lookup", "ip4-rewrite"] {
                want.push(format!(r#"vecgate_node_packets_total{{worker="{w}",node="{node}"}} 100"#));
            }
        }
        assert_eq!(series_of(&first, "vecgate_node_packets_total"), want);
        let punt = series_of(&first, "vecgate_punt_port");
        assert!(punt[0].contains(r#"port="179""#) && punt[1].contains(r#"port="8022""#) && punt[2].contains(r#"port="10256""#), "{punt:?}");
        // Families in the order they are registered: runtime, errors, interfaces, workers,
        // buffers, tables, tunnels, then PFCP and punt when there are.
        let families: Vec<&str> = first.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).collect();
        let at = |f: &str| families.iter().position(|x| *x == f).unwrap_or_else(|| panic!("{f} not in {families:?}"));
        let order =
            ["vecgate_node_calls", "vecgate_node_packets", "vecgate_errors", "vecgate_interface_rx_packets", "vecgate_worker_loops"];
        let more = ["vecgate_buffers", "vecgate_table_entries", "vecgate_tunnel_counters_enabled", "vecgate_punt_port"];
        let places: Vec<usize> = order.iter().chain(&more).map(|f| at(f)).collect();
        assert!(places.windows(2).all(|w| w[0] < w[1]), "{families:?}");
        assert!(first.ends_with("# EOF\n"), "{first}");
    }

    #[test]
    fn numbers_in_labels_sort_by_value() {
        use std::cmp::Ordering::*;
        assert_eq!(natural_cmp(r#"x{worker="2"}"#, r#"x{worker="10"}"#), Less);
        assert_eq!(natural_cmp(r#"x{worker="10",node="a"}"#, r#"x{worker="10",node="b"}"#), Less);
        assert_eq!(natural_cmp("a7", "a07"), Less);
        assert_eq!(natural_cmp("a", "a1"), Less);
        assert_eq!(natural_cmp("b", "a9"), Greater);
        assert_eq!(natural_cmp("a9", "a9"), Equal);
    }

    #[test]
    fn listen_addresses_are_checked() {
        assert!(parse_listen("127.0.0.1:9464").is_ok());
        assert!(parse_listen("[2001:db8::1]:9464").is_ok());
        let e = parse_listen("localhost").unwrap_err();
        assert!(e.contains("expected ADDRESS:PORT"), "{e}");
    }
}
