//! Tunnels are created and deleted while traffic flows through other tunnels, and those
//! lose nothing: a generator sends a fixed count of downlink packets into one tunnel and
//! of uplink G-PDUs into another; between vectors the control plane creates and deletes
//! other tunnels (with UE routes, so the FIB changes too); every packet of the steady
//! tunnels is encapsulated or decapsulated and reaches the sink.

use control::config::Config;
use control::dataplane::assemble;
use engine::worker::Context;
use gtpu::TunnelSpec;
use std::path::Path;

use crate::common;

const CFG: &str = concat!(
    pg0_null0_config!(null0_also: "2001:db8:1::1/64"),
    r#"
[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"

[[neighbour]]
interface = "null0"
ip = "2001:db8:1::2"
mac = "02:00:00:00:01:02"

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 7
teid_out = 8
ue = "198.18.200.1/32"

[[stream]]
name = "downlink"
interface = "pg0"
size = 64
count = 100000
protocol = "udp"
src = "198.18.0.2"
dst = "198.18.200.1"

[[stream]]
name = "uplink"
interface = "pg0"
size = 114
count = 100000
protocol = "gtpu"
src = "198.18.1.2"
dst = "198.18.1.1"
teid = 7
inner_src = "198.18.200.1"
inner_dst = "198.19.0.1"
"#
);

#[test]
fn tunnel_churn_loses_no_packets_of_other_tunnels() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let a = assemble(&cfg).unwrap();
    let (mut control, mut worker) = a.into_single();
    let mut polls = 0u32;
    let mut live: Vec<u32> = Vec::new();
    let mut versions = 0;
    while !worker.inputs_done() {
        worker.poll_once();
        polls += 1;
        if polls % 2 == 0 {
            let i = polls / 2;
            if i % 3 == 2 {
                if let Some(id) = live.pop() {
                    control.gtpu.delete(&mut control.state, id).unwrap();
                }
            } else {
                // IPv4 and IPv6 outer headers, a UE route each.
                let spec = if i % 2 == 0 {
                    let mut s = TunnelSpec::new("198.18.1.1".parse().unwrap(), "198.18.1.2".parse().unwrap(), 1000 + i, i + 1);
                    s.ue = Some(format!("198.18.{}.{}/32", 201 + (i / 250) % 50, i % 250).parse().unwrap());
                    s
                } else {
                    let mut s = TunnelSpec::new("2001:db8:1::1".parse().unwrap(), "2001:db8:1::2".parse().unwrap(), 1000 + i, i + 1);
                    s.ue = Some(format!("2001:db8:300::{i:x}/128").parse().unwrap());
                    s
                };
                live.push(control.gtpu.create(&mut control.state, spec).unwrap());
            }
            control.publish_routes();
            versions += 1;
        }
    }
    worker.poll_once();
    worker.cx.refresh();
    assert!(versions > 300, "only {versions} table versions");
    let s = worker.snapshot();
    let sink = s.ports.iter().find(|p| p.name == "null0").unwrap();
    assert_eq!(sink.counters.tx_packets, 200_000, "every packet of the steady tunnel delivered across {versions} versions");
    let count = |node: &str, c: &str| s.counters.iter().find(|x| x.node == node && x.counter == c).map_or(0, |x| x.count);
    assert_eq!(count("gtpu4-encap", "encapsulated"), 100_000);
    assert_eq!(count("gtpu4-input", "decapsulated"), 100_000);
    common::assert_no_drops(&s);
    assert_eq!(worker.pool.in_use(), 0);
    assert!(control.gtpu.len() > 1);
}

#[test]
fn bad_tunnels_are_refused_with_field_paths() {
    let tunnel = "local = \"198.18.1.1\"\nremote = \"198.18.1.2\"\nteid_in = 7\nteid_out = 8";
    let cases = [
        (CFG.replace("local = \"198.18.1.1\"", "local = \"198.18.9.9\""), "gtpu_tunnel[0]", "not an address of any interface"),
        (CFG.replace("teid_in = 7\nteid_out", "teid_in = 0\nteid_out"), "gtpu_tunnel[0]", "reserved"),
        (CFG.replace("remote = \"198.18.1.2\"", "remote = \"2001:db8:1::2\""), "gtpu_tunnel[0]", "different address families"),
        (CFG.replace("teid_out = 8", "teid_out = 8\nqfi = 64"), "gtpu_tunnel[0].qfi", "0 to 63"),
        (CFG.replace("teid_out = 8", "teid_out = 8\nchecksum = \"sometimes\""), "gtpu_tunnel[0].checksum", "unknown variant"),
        (CFG.replace("teid_out = 8", "teid_out = 8\naccept_zero_checksum = true"), "gtpu_tunnel[0].accept_zero_checksum", "IPv6 setting"),
        (CFG.replace("teid_out = 8", "teid_out = 8\ndecap_next = \"ethernet\""), "gtpu_tunnel[0].decap_interface", "needs the interface"),
        (CFG.replace("ue = \"198.18.200.1/32\"", "ue = \"198.19.0.0/16\""), "gtpu_tunnel[0].ue", "already routed by route[0].prefix"),
        (
            CFG.replace("[[stream]]\nname = \"downlink\"", &format!("[[gtpu_tunnel]]\n{tunnel}\n\n[[stream]]\nname = \"downlink\"")),
            "gtpu_tunnel[1].teid_in",
            "already the key of gtpu_tunnel[0]",
        ),
        (CFG.replace("teid = 7\n", ""), "stream[1].protocol", "needs `teid`"),
    ];
    for (text, field, words) in cases {
        let e = match Config::parse(&text, "gw.toml", Path::new(".")).and_then(|c| assemble(&c).map(|_| ())) {
            Err(e) => e,
            Ok(()) => panic!("accepted a config with a bad {field}"),
        };
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().contains(words), "{e}");
    }
}
