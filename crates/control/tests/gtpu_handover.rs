//! A handover through the typed API: `set_gtpu_tunnel` moves one tunnel to a new peer
//! and TEID between vectors, many times, while a generator sends downlink packets into
//! it and into a second tunnel; every packet of both is encapsulated and sent, none
//! dropped. Finding tunnels by TEID, remote or UE address, and deleting one (which says
//! which routes went with it), through the same API.

use control::api::Request;
use control::config::Config;
use control::dataplane::assemble;
use engine::worker::Context;
use std::path::Path;

use crate::common;

const CFG: &str = concat!(
    pg0_null0_config!(),
    r#"
[[neighbour]]
interface = "null0"
ip = "198.18.1.3"
mac = "02:00:00:00:01:03"

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 256
teid_out = 8
ue = "198.18.200.1/32"

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 257
teid_out = 9
ue = "198.18.200.2/32"

[[route]]
prefix = "198.19.7.0/24"
interface = "gtpu_tunnel0"

[[stream]]
name = "to-ue1"
interface = "pg0"
size = 64
count = 50000
protocol = "udp"
src = "198.18.0.2"
dst = "198.18.200.1"

[[stream]]
name = "to-ue2"
interface = "pg0"
size = 64
count = 50000
protocol = "udp"
src = "198.18.0.2"
dst = "198.18.200.2"
"#
);

fn ok(c: &mut control::dataplane::Control, r: Request) -> control::api::Reply {
    let reply = c.handle(&r);
    assert!(reply.ok, "{r:?}: {reply:?}");
    reply
}

#[test]
fn a_handover_in_place_loses_no_packet() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut control, mut worker) = assemble(&cfg).unwrap().into_single();
    let mut polls = 0u32;
    let mut handovers = 0u32;
    while !worker.inputs_done() {
        worker.poll_once();
        polls += 1;
        if polls % 2 == 0 {
            handovers += 1;
            let (remote, teid_out) = if handovers % 2 == 1 { ("198.18.1.3", 0x1000 + handovers) } else { ("198.18.1.2", 8) };
            let r = ok(
                &mut control,
                Request::SetGtpuTunnel {
                    name: "gtpu_tunnel0".into(),
                    remote: Some(remote.into()),
                    teid_out: Some(teid_out),
                    qfi: None,
                    dscp: None,
                },
            );
            assert_eq!(r.data["remote"], remote);
            assert_eq!(r.data["teid_out"], teid_out);
        }
    }
    worker.poll_once();
    worker.cx.refresh();
    assert!(handovers > 50, "only {handovers} handovers");
    let s = worker.snapshot();
    let sink = s.ports.iter().find(|p| p.name == "null0").unwrap();
    assert_eq!(sink.counters.tx_packets, 100_000, "every packet of both tunnels sent");
    let count = |node: &str, c: &str| s.counters.iter().find(|x| x.node == node && x.counter == c).map_or(0, |x| x.count);
    assert_eq!(count("gtpu4-encap", "encapsulated"), 100_000);
    common::assert_no_drops(&s);
    assert_eq!(worker.pool.in_use(), 0);
}

#[test]
fn tunnels_are_found_by_teid_remote_and_ue_and_deletion_names_its_routes() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut c, _worker) = assemble(&cfg).unwrap().into_single();
    let names = |r: &control::api::Reply| -> Vec<String> {
        r.data.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    let find = |teid, remote: Option<&str>, ue: Option<&str>| Request::FindGtpuTunnels {
        teid,
        remote: remote.map(str::to_string),
        ue: ue.map(str::to_string),
    };
    // By incoming or outgoing TEID.
    assert_eq!(names(&ok(&mut c, find(Some(256), None, None))), ["gtpu_tunnel0"]);
    assert_eq!(names(&ok(&mut c, find(Some(9), None, None))), ["gtpu_tunnel1"]);
    assert!(names(&ok(&mut c, find(Some(4242), None, None))).is_empty());
    assert_eq!(names(&ok(&mut c, find(None, Some("198.18.1.2"), None))), ["gtpu_tunnel0", "gtpu_tunnel1"]);
    let r = ok(&mut c, find(None, None, Some("198.18.200.2")));
    assert_eq!(names(&r), ["gtpu_tunnel1"]);
    assert!(r.text.contains("ue 198.18.200.2/32") && r.text.contains("checksum zero") && r.text.contains("src-port fixed"), "{}", r.text);
    assert!(!r.text.contains("adj"), "no internal adjacency codes: {}", r.text);
    // After a handover, the tunnel is found at its new peer.
    let set = Request::SetGtpuTunnel {
        name: "gtpu_tunnel1".into(),
        remote: Some("198.18.1.3".into()),
        teid_out: Some(77),
        qfi: Some(5),
        dscp: None,
    };
    let r = ok(&mut c, set);
    assert!(
        r.text.contains("remote 198.18.1.2 -> 198.18.1.3") && r.text.contains("0x9 -> 0x4d") && r.text.contains("qfi none -> 5"),
        "{}",
        r.text
    );
    assert_eq!(names(&ok(&mut c, find(None, Some("198.18.1.3"), None))), ["gtpu_tunnel1"]);
    assert_eq!(names(&ok(&mut c, find(Some(77), None, None))), ["gtpu_tunnel1"]);
    // Refused changes say why and change nothing.
    for (bad, says) in [
        (Request::SetGtpuTunnel { name: "gtpu_tunnel1".into(), remote: None, teid_out: Some(0), qfi: None, dscp: None }, "teid_out 0"),
        (
            Request::SetGtpuTunnel {
                name: "gtpu_tunnel1".into(),
                remote: Some("198.18.1.1".into()),
                teid_out: None,
                qfi: None,
                dscp: None,
            },
            "own addresses",
        ),
        (
            Request::SetGtpuTunnel {
                name: "gtpu_tunnel1".into(),
                remote: Some("2001:db8::9".into()),
                teid_out: None,
                qfi: None,
                dscp: None,
            },
            "families",
        ),
        (Request::SetGtpuTunnel { name: "gtpu_tunnel1".into(), remote: None, teid_out: None, qfi: Some(64), dscp: None }, "0 to 63"),
        (Request::SetGtpuTunnel { name: "gtpu_tunnel9".into(), remote: None, teid_out: Some(5), qfi: None, dscp: None }, "no tunnel named"),
        (find(Some(1), Some("198.18.1.2"), None), "one of"),
    ] {
        let r = c.handle(&bad);
        assert!(!r.ok && r.error.as_deref().unwrap().contains(says), "{bad:?}: {r:?}");
    }
    assert_eq!(names(&ok(&mut c, find(Some(77), None, None))), ["gtpu_tunnel1"]);
    // Deleting says which routes went with the tunnel: its UE route and a static one.
    let r = ok(&mut c, Request::DeleteGtpuTunnel { name: "gtpu_tunnel0".into() });
    assert_eq!(r.data["routes"], serde_json::json!(["198.18.200.1/32", "198.19.7.0/24"]));
    assert_eq!(r.text, "deleted gtpu_tunnel0 and 2 routes into it: 198.18.200.1/32, 198.19.7.0/24");
    assert!(names(&ok(&mut c, find(None, None, Some("198.18.200.1")))).is_empty());
}
