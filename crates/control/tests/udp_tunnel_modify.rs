//! UDP tunnels changed in place through the typed API: `set_udp_tunnel` moves one
//! GRE-in-UDP tunnel between two peers, ports and keys between vectors, many times, while
//! a generator sends packets routed into it and into a second (GUE) tunnel; every packet
//! of both is encapsulated and sent, none dropped, and the tunnel keeps its routes and
//! counters. Finding tunnels by remote, local address or id, through the same API.

use common::api_ok;
use control::api::{Reply, Request};
use control::config::Config;
use control::dataplane::assemble;
use engine::worker::Context;
use std::path::Path;

use crate::common;

const CFG: &str = concat!(
    pg0_null0_config!(null0_also: "2001:db8:1::1/64"),
    r#"
[metrics]
tunnel_counters = true

[[neighbour]]
interface = "null0"
ip = "198.18.1.3"
mac = "02:00:00:00:01:03"

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gre"
key = 7
gre_sequence = true
routes = ["198.19.1.0/24"]

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
routes = ["198.19.2.0/24"]

[[stream]]
name = "into-gre"
interface = "pg0"
size = 64
count = 50000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.1.1"

[[stream]]
name = "into-gue"
interface = "pg0"
size = 64
count = 50000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.2.1"
"#
);

fn set(name: &str, remote: Option<&str>, port: Option<u16>, key: Option<Option<u32>>) -> Request {
    Request::SetUdpTunnel { name: name.into(), remote: remote.map(Into::into), port, key, dscp: None }
}

#[test]
fn a_tunnel_changed_in_place_under_traffic_loses_no_packet() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut control, mut worker) = assemble(&cfg).unwrap().into_single();
    let mut polls = 0u32;
    let mut changes = 0u32;
    while !worker.inputs_done() {
        worker.poll_once();
        polls += 1;
        if polls % 2 == 0 {
            changes += 1;
            let odd = changes % 2 == 1;
            let (remote, port, key) = if odd { ("198.18.1.3", 5000, Some(0x1000 + changes)) } else { ("198.18.1.2", 4754, None) };
            let r = api_ok(&mut control, set("udp_tunnel0", Some(remote), Some(port), Some(key)));
            assert_eq!(r.data["remote"], remote);
            assert_eq!(r.data["port"], port);
            assert_eq!(r.data["key"], serde_json::json!(key));
        }
    }
    worker.poll_once();
    worker.cx.refresh();
    assert!(changes > 50, "only {changes} changes");
    let s = worker.snapshot();
    let sink = s.ports.iter().find(|p| p.name == "null0").unwrap();
    assert_eq!(sink.counters.tx_packets, 100_000, "every packet of both tunnels sent");
    let count = |node: &str, c: &str| s.counters.iter().find(|x| x.node == node && x.counter == c).map_or(0, |x| x.count);
    assert_eq!(count("gue4-encap", "encapsulated"), 100_000);
    common::assert_no_drops(&s);
    assert_eq!(worker.pool.in_use(), 0);
    // The tunnel kept its routes, counters and id through every change.
    let r = api_ok(&mut control, Request::FindUdpTunnels { remote: None, local: None, id: Some(0) });
    let row = &r.data[0];
    assert_eq!(row["name"], "udp_tunnel0");
    assert_eq!(row["counters"]["tx_packets"], 50_000, "{row}");
    let fib = api_ok(&mut control, Request::ShowIpFibEntry { query: "198.19.1.1".into() });
    assert!(fib.text.contains("udp_tunnel0"), "{}", fib.text);
}

#[test]
fn tunnels_are_found_by_remote_local_and_id_and_bad_changes_change_nothing() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut c, _worker) = assemble(&cfg).unwrap().into_single();
    let names = |r: &Reply| -> Vec<String> { r.data.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect() };
    let find = |remote: Option<&str>, local: Option<&str>, id: Option<u32>| Request::FindUdpTunnels {
        remote: remote.map(str::to_string),
        local: local.map(str::to_string),
        id,
    };
    assert_eq!(names(&api_ok(&mut c, find(Some("198.18.1.2"), None, None))), ["udp_tunnel0", "udp_tunnel1"]);
    assert_eq!(names(&api_ok(&mut c, find(None, Some("198.18.1.1"), None))), ["udp_tunnel0", "udp_tunnel1"]);
    assert!(names(&api_ok(&mut c, find(None, Some("198.18.0.1"), None))).is_empty());
    let r = api_ok(&mut c, find(None, None, Some(1)));
    assert_eq!(names(&r), ["udp_tunnel1"]);
    assert!(r.text.starts_with("1 UDP tunnels match\n") && r.text.contains("198.18.1.1 -> 198.18.1.2 gue port 6080"), "{}", r.text);

    // Moved: found at the new peer, no longer at the old one; the text says what changed.
    let r = api_ok(&mut c, set("udp_tunnel0", Some("198.18.1.3"), None, Some(Some(0x20))));
    assert_eq!(r.text, "udp_tunnel0: remote 198.18.1.2 -> 198.18.1.3, port 4754 -> 4754, key 0x7 -> 0x20");
    assert_eq!(names(&api_ok(&mut c, find(Some("198.18.1.3"), None, None))), ["udp_tunnel0"]);
    assert_eq!(names(&api_ok(&mut c, find(Some("198.18.1.2"), None, None))), ["udp_tunnel1"]);
    // The bare id names the tunnel too; `key: null` removes the key.
    let r = api_ok(&mut c, set("0", None, Some(4800), Some(None)));
    assert_eq!(r.data["key"], serde_json::Value::Null);
    assert!(r.text.ends_with("key 0x20 -> none"), "{}", r.text);

    // Refused changes say why and change nothing.
    for (bad, says) in [
        (set("udp_tunnel1", Some("198.18.1.1"), None, None), "own addresses"),
        (set("udp_tunnel1", Some("2001:db8:1::9"), None, None), "address families"),
        (set("udp_tunnel1", None, Some(2152), None), "2152"),
        (set("udp_tunnel1", None, Some(0), None), "1 to 65535"),
        (set("udp_tunnel1", None, None, Some(Some(5))), "GRE"),
        (set("udp_tunnel0", Some("198.18.1.2"), Some(6080), Some(None)), "udp_tunnel1 already joins"),
        (set("udp_tunnel1", Some("not-an-address"), None, None), "expected an IPv4 or IPv6 address"),
        (set("udp_tunnel9", Some("198.18.1.3"), None, None), "no tunnel named \"udp_tunnel9\""),
        (find(Some("198.18.1.2"), None, Some(1)), "one of"),
    ] {
        let r = c.handle(&bad);
        assert!(!r.ok && r.error.as_deref().unwrap().contains(says), "{bad:?}: {r:?}");
    }
    let r = api_ok(&mut c, find(None, None, Some(1)));
    assert_eq!(
        (r.data[0]["remote"].as_str(), r.data[0]["port"].as_u64(), &r.data[0]["key"]),
        (Some("198.18.1.2"), Some(6080), &serde_json::Value::Null)
    );
    let r = api_ok(&mut c, find(None, None, Some(0)));
    assert_eq!((r.data[0]["remote"].as_str(), r.data[0]["port"].as_u64()), (Some("198.18.1.3"), Some(4800)));
}

/// The JSON form: `key` absent keeps the key, null removes it, a number sets it; each
/// serializes back to itself.
#[test]
fn the_json_form_tells_an_absent_key_from_a_removed_one() {
    for (json, key) in [
        (r#"{"op":"set_udp_tunnel","name":"udp_tunnel0","remote":"198.18.1.3"}"#, None),
        (r#"{"op":"set_udp_tunnel","name":"udp_tunnel0","key":null}"#, Some(None)),
        (r#"{"op":"set_udp_tunnel","name":"udp_tunnel0","key":9}"#, Some(Some(9))),
    ] {
        let r: Request = serde_json::from_str(json).unwrap();
        let Request::SetUdpTunnel { key: k, .. } = &r else { panic!("{r:?}") };
        assert_eq!(*k, key, "{json}");
        let back: Request = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
