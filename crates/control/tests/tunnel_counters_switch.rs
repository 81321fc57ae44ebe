//! `[metrics] tunnel_counters`: per-tunnel counting is off unless configured. Off, the
//! workers count nothing per tunnel, the listings and the scrape say so and have no
//! per-tunnel figures; on, every packet into a GTP-U and a UDP tunnel is counted exactly;
//! a reload turns it on for the workers' next table version.

use control::api::Request;
use control::dataplane::{Control, WorkerContext};
use control::metrics::{render, tunnel_traffic, TableSizes};
use engine::worker::{Context, Worker};

use crate::common;

const PACKETS: u64 = 1000;
/// The streams' 64-byte frames less the Ethernet header: the inner IP packet.
const INNER_BYTES: u64 = 50;

const CFG: &str = concat!(
    pg0_null0_config!(),
    r#"
[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
routes = ["198.19.1.0/24"]

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 100
teid_out = 200
ue = "198.19.2.1/32"

[[stream]]
name = "into-gue"
interface = "pg0"
size = 64
count = 1000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.1.1"

[[stream]]
name = "into-gtpu"
interface = "pg0"
size = 64
count = 1000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.2.1"
"#
);

const ON: &str = "[metrics]\ntunnel_counters = true\n";

/// The gateway of `text` ([`common::from_file`]) after its streams went through.
fn run(text: &str) -> (tempfile::TempDir, Control, Worker<WorkerContext>) {
    let (dir, c, mut worker) = common::from_file(text);
    common::run_to_end(&mut worker);
    (dir, c, worker)
}

fn encapsulated(worker: &Worker<WorkerContext>, node: &str) -> u64 {
    worker.snapshot().counters.iter().filter(|c| c.node == node && c.counter == "encapsulated").map(|c| c.count).sum()
}

#[test]
fn off_by_default_nothing_is_counted_and_the_gateway_says_so() {
    let (_dir, mut c, worker) = run(CFG);
    // The packets went through the tunnels, uncounted per tunnel.
    assert_eq!(encapsulated(&worker, "gue4-encap"), PACKETS);
    assert_eq!(encapsulated(&worker, "gtpu4-encap"), PACKETS);
    assert!(c.udptun.counters.per_tunnel().is_empty() && c.gtpu.counters.per_tunnel().is_empty());
    for (req, kind) in [(Request::ShowUdpTunnels {}, "UDP"), (Request::ShowGtpuTunnels { limit: None }, "GTP-U")] {
        let r = c.handle(&req);
        assert!(r.ok, "{r:?}");
        assert!(r.text.starts_with(&format!("1 {kind} tunnels (per-tunnel counters off")), "{}", r.text);
        assert!(!r.text.contains(" packets "), "{}", r.text);
        assert_eq!(r.data["tunnels"][0]["counters"], serde_json::Value::Null, "{}", r.data);
    }
    let traffic = tunnel_traffic(&c.gtpu, &c.udptun, 10);
    assert!(!traffic.counting && traffic.totals.is_empty() && traffic.top.is_empty(), "{traffic:?}");
    let text = render(&[], TableSizes::default(), &traffic);
    assert!(text.contains("vecgate_tunnel_counters_enabled 0"), "{text}");
    assert!(!text.contains("vecgate_tunnel_packets") && !text.contains("vecgate_tunnel_kind"), "{text}");
}

#[test]
fn on_every_packet_is_counted_exactly() {
    let (_dir, mut c, _worker) = run(&format!("{ON}{CFG}"));
    let want = ip::tunnel_counters::TunnelCount { tx_packets: PACKETS, tx_bytes: PACKETS * INNER_BYTES, ..Default::default() };
    assert_eq!(c.udptun.counters.count(0), want);
    assert_eq!(c.gtpu.counters.count(0), want);
    let r = c.handle(&Request::ShowGtpuTunnels { limit: None });
    assert_eq!(r.data["tunnels"][0]["counters"]["tx_packets"], PACKETS, "{}", r.data);
    assert!(r.text.starts_with("1 GTP-U tunnels\n") && r.text.contains("tx 1000 packets 50000 bytes"), "{}", r.text);
    let traffic = tunnel_traffic(&c.gtpu, &c.udptun, 10);
    let text = render(&[], TableSizes::default(), &traffic);
    assert!(text.contains("vecgate_tunnel_counters_enabled 1"), "{text}");
    assert!(text.contains(r#"vecgate_tunnel_packets_total{kind="gtpu",tunnel="gtpu_tunnel0",direction="tx"} 1000"#), "{text}");
}

#[test]
fn a_reload_turns_counting_on_for_the_workers() {
    let (dir, mut c, mut worker) = run(CFG);
    assert!(!worker.cx.gtpu.tables.count_tunnels && !worker.cx.udptun.tables.count_tunnels);
    let r = common::reload_file(&dir, &mut c, &format!("{ON}{CFG}"));
    assert!(r.ok, "{r:?}");
    assert_eq!(
        r.data["changes"],
        serde_json::json!([{ "action": "replaced", "object": "setting", "name": "metrics.tunnel_counters = true" }])
    );
    worker.cx.refresh();
    assert!(worker.cx.gtpu.tables.count_tunnels && worker.cx.udptun.tables.count_tunnels);
    // The endpoint itself still cannot change.
    let r = common::reload_file(&dir, &mut c, &format!("{ON}listen = \"127.0.0.1:9464\"\n{CFG}"));
    assert!(!r.ok && r.text.contains("metrics"), "{r:?}");
}
