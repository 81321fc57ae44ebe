//! The tunnel hint (`ip::hint`): `ethernet-input` knows the packets of the tunnel a
//! worker decapsulated last by one template test, and `gue4-input` takes them without
//! testing their outer header again. These tests run a whole worker: packets the hint
//! does not cover (another tunnel on the same endpoint, the other inner family of the
//! hinted tunnel) are decapsulated all the same, and a hint never outlives its tunnel.

use control::config::Config;
use control::dataplane::assemble;
use engine::worker::Context;
use std::path::Path;

use crate::common;

/// Two GUE tunnels on one endpoint and port, from 198.18.1.2 and 198.18.1.3; inner
/// packets are routed out of null0. Streams: `a` (IPv4 inner) and `a6` (IPv6 inner) in
/// the first tunnel, `b` (IPv4 inner) in the second, taking turns.
const CFG: &str = concat!(
    pg0_null0_config!(null0_also: "2001:db8:1::1/64"),
    r#"
[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.9"

[[route]]
prefix = "2001:db8:99::/48"
via = "2001:db8:1::9"

[[neighbour]]
interface = "null0"
ip = "198.18.1.9"
mac = "02:00:00:00:01:09"

[[neighbour]]
interface = "null0"
ip = "2001:db8:1::9"
mac = "02:00:00:00:01:09"

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
port = 6080

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.3"
encap = "gue"
port = 6080

[[stream]]
name = "a"
interface = "pg0"
dst_mac = "02:00:00:00:00:01"
size = 100
count = COUNT_A
protocol = "gue"
src = "198.18.1.2"
dst = "198.18.1.1"
dst_port = 6080
inner_src = "198.18.0.2"
inner_dst = "198.19.0.1"
"#
);

const STREAM_A6: &str = r#"
[[stream]]
name = "a6"
interface = "pg0"
size = 120
count = 3000
protocol = "gue"
src = "198.18.1.2"
dst = "198.18.1.1"
dst_port = 6080
inner_src = "2001:db8:2::2"
inner_dst = "2001:db8:99::1"

[[stream]]
name = "b"
interface = "pg0"
size = 100
count = 3000
protocol = "gue"
src = "198.18.1.3"
dst = "198.18.1.1"
dst_port = 6080
inner_src = "198.18.0.3"
inner_dst = "198.19.0.2"
"#;

fn count(s: &engine::stats::Snapshot, node: &str, c: &str) -> u64 {
    s.counters.iter().find(|x| x.node == node && x.counter == c).map_or(0, |x| x.count)
}

/// A worker for the config `text`, run until its streams are sent and the last packets
/// are through; `hinted` must have held after some poll (a hint was published).
fn run_to_end(text: &str, hinted: impl Fn(&ip::hint::TunnelHints) -> bool) -> engine::worker::Worker<control::dataplane::WorkerContext> {
    let cfg = Config::parse(text, "test.toml", Path::new(".")).unwrap();
    let (_control, mut worker) = assemble(&cfg).unwrap().into_single();
    let mut seen = false;
    while !worker.inputs_done() {
        worker.poll_once();
        seen |= hinted(&worker.cx.ip.tunnel_hints);
    }
    worker.poll_once();
    assert!(seen, "a hint was published");
    worker
}

#[test]
fn packets_beside_the_hinted_ones_are_decapsulated_too() {
    let text = CFG.replace("COUNT_A", "3000") + STREAM_A6;
    let worker = run_to_end(&text, |h| h.v4.is_some());
    let s = worker.snapshot();
    assert_eq!(count(&s, "gue4-input", "decapsulated"), 9000);
    let sink = s.ports.iter().find(|p| p.name == "null0").unwrap();
    assert_eq!(sink.counters.tx_packets, 9000, "every inner packet routed out");
    common::assert_no_drops(&s);
    assert_eq!(worker.pool.in_use(), 0);
}

#[test]
fn a_deleted_tunnel_is_not_decapsulated_by_its_hint() {
    let text = CFG.replace("COUNT_A", "20000");
    let cfg = Config::parse(&text, "test.toml", Path::new(".")).unwrap();
    let (mut control, mut worker) = assemble(&cfg).unwrap().into_single();
    // Until the hint for the first tunnel is in place and used.
    let mut polls = 0;
    while worker.cx.ip.tunnel_hints.v4.is_none() || polls < 5 {
        worker.poll_once();
        polls += 1;
        assert!(polls < 1000, "no hint published");
    }
    let before = count(&worker.snapshot(), "gue4-input", "decapsulated");
    assert!(before > 0 && before < 20000, "{before} decapsulated before the delete");
    // The tunnel goes; the second keeps the endpoint and port, so its packets still go
    // from `ethernet-input` to `gue4-input`.
    let id = control.udptun.tunnels().find(|(_, t)| t.remote == "198.18.1.2".parse::<std::net::IpAddr>().unwrap()).unwrap().0;
    control.udptun.delete(&mut control.state, id).unwrap();
    control.publish_routes();
    while !worker.inputs_done() {
        worker.poll_once();
    }
    worker.poll_once();
    worker.cx.refresh();
    let s = worker.snapshot();
    assert_eq!(count(&s, "gue4-input", "decapsulated"), before, "nothing decapsulated after the delete");
    assert_eq!(count(&s, "gue4-input", "no-tunnel"), 20000 - before);
    assert!(worker.cx.ip.tunnel_hints.v4.is_none(), "the deleted tunnel's hint is gone");
    assert_eq!(worker.pool.in_use(), 0);
}

/// The same over IPv6: a tunnel that accepts zero UDP checksums (RFC 6936), whose
/// packets take the fast path and so get a hint, and one that does not, whose
/// zero-checksum packets are refused by name, hint or no hint.
#[test]
fn ipv6_outer_headers_are_hinted_too() {
    let text = CFG
        .replace("COUNT_A", "3000")
        .replace(
            "local = \"198.18.1.1\"\nremote = \"198.18.1.2\"",
            "local = \"2001:db8:1::1\"\nremote = \"2001:db8:1::2\"\naccept_zero_checksum = true",
        )
        .replace("local = \"198.18.1.1\"\nremote = \"198.18.1.3\"", "local = \"2001:db8:1::1\"\nremote = \"2001:db8:1::3\"")
        .replace("src = \"198.18.1.2\"\ndst = \"198.18.1.1\"", "src = \"2001:db8:1::2\"\ndst = \"2001:db8:1::1\"")
        + &STREAM_A6
            .replace("src = \"198.18.1.2\"\ndst = \"198.18.1.1\"", "src = \"2001:db8:1::2\"\ndst = \"2001:db8:1::1\"")
            .replace("src = \"198.18.1.3\"\ndst = \"198.18.1.1\"", "src = \"2001:db8:1::3\"\ndst = \"2001:db8:1::1\"");
    let worker = run_to_end(&text, |h| h.v6.is_some());
    assert!(worker.cx.ip.tunnel_hints.v4.is_none());
    let s = worker.snapshot();
    assert_eq!(count(&s, "gue6-input", "decapsulated"), 6000, "streams a and a6");
    assert_eq!(count(&s, "gue6-input", "zero-checksum-refused"), 3000, "stream b");
    let sink = s.ports.iter().find(|p| p.name == "null0").unwrap();
    assert_eq!(sink.counters.tx_packets, 6000);
    assert_eq!(worker.pool.in_use(), 0);
}
