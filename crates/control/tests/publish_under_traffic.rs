//! Control-plane changes are published while traffic flows and lose no packets: a
//! generator sends a fixed count; between vectors the control plane adds and deletes
//! hundreds of unrelated routes and learns neighbours (each a new published table
//! version); every packet still reaches the sink, and no buffer leaks.

use control::config::Config;
use control::dataplane::assemble;
use engine::worker::Context;
use ip::{Prefix, RouteTarget};
use std::path::Path;

use crate::common;

const CFG: &str = concat!(
    pg0_null0_config!(),
    r#"
[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"

[[stream]]
name = "steady"
interface = "pg0"
size = 64
count = 200000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.0.1"
[[stream.modify]]
field = "dst"
increment = 4096
"#
);

#[test]
fn route_churn_loses_no_packets() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let a = assemble(&cfg).unwrap();
    let (mut control, mut worker) = a.into_single();
    let first = control.shared.load().generation;
    let mut polls = 0u32;
    while !worker.inputs_done() {
        worker.poll_once();
        polls += 1;
        // Every third vector: a new table version with a route added or removed.
        if polls % 3 == 0 {
            let i = polls / 3;
            let p: Prefix = format!("198.19.{}.0/24", 100 + (i % 100)).parse().unwrap();
            if i % 2 == 0 {
                control.state.add_route(p, RouteTarget::Via { next_hop: "198.18.1.2".parse().unwrap(), interface: None }).unwrap();
            } else {
                let _ = control.state.del_route(&p);
            }
            control.publish();
        }
    }
    worker.poll_once();
    worker.cx.refresh();
    assert!(worker.cx.ip.tables.generation > first + 100, "tables were republished under traffic");
    let s = worker.snapshot();
    let sink = s.ports.iter().find(|p| p.name == "null0").unwrap();
    assert_eq!(
        sink.counters.tx_packets,
        200_000,
        "every packet forwarded across {} table versions",
        worker.cx.ip.tables.generation - first
    );
    common::assert_no_drops(&s);
    assert_eq!(worker.pool.in_use(), 0);
}

#[test]
fn bad_configs_are_refused_whole_with_field_paths() {
    let cases = [
        (CFG.replace("via = \"198.18.1.2\"", "via = \"198.18.7.2\""), "route[0]", "not on a connected subnet"),
        (CFG.replace("size = 64", "size = 30"), "stream[0]", "frame size 30"),
        (CFG.replace("mac = \"02:00:00:00:00:02\"", "mac = \"01:00:00:00:00:02\""), "interface[1].mac", "unicast"),
        (CFG.replace("interface = \"pg0\"\nsize", "interface = \"null0\"\nsize"), "stream[0].interface", "pg interface"),
        (CFG.replace("prefix = \"198.19.0.0/16\"", "prefix = \"198.19.0.1/16\""), "route[0].prefix", "host bits"),
        (CFG.replace("increment = 4096", "increment = 4096\nrandom = 3"), "stream[0].modify[0]", "exactly one"),
    ];
    for (text, field, words) in cases {
        let e = match Config::parse(&text, "gw.toml", Path::new(".")).and_then(|c| assemble(&c).map(|_| ())) {
            Err(e) => e,
            Ok(()) => panic!("accepted a config with a bad {field}"),
        };
        assert_eq!(e.file, "gw.toml");
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().contains(words), "{e}");
    }
}
