//! Where `ethernet-input` sends a packet it looks up itself (the lookup's fast path): a
//! route to a resolved next hop straight to `interface-output`, a route into a tunnel
//! straight to the tunnel's encap node, everything else to `ip4-lookup` with the FIB's
//! answer (there: no route, counted and answered by ICMP).

use control::config::Config;
use control::dataplane::{assemble, spawn};
use engine::stats::Snapshot;
use engine::worker::WorkerCmd;
use std::path::Path;
use std::time::Duration;

const CFG: &str = concat!(
    pg0_null0_config!(),
    r#"
[[route]]
prefix = "198.19.0.0/17"
via = "198.18.1.2"

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 256
teid_out = 8
ue = "198.18.200.1/32"

[[stream]]
name = "routed"
interface = "pg0"
size = 64
count = 3000
rate = 30000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.0.1"

[[stream]]
name = "to-ue"
interface = "pg0"
size = 64
count = 2000
rate = 20000
protocol = "udp"
src = "198.18.0.2"
dst = "198.18.200.1"

[[stream]]
name = "no-route"
interface = "pg0"
size = 64
count = 100
rate = 1000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.200.1"
"#
);

fn packets(s: &Snapshot, node: &str) -> u64 {
    s.nodes.iter().find(|n| n.name == node).map_or(0, |n| n.runtime.packets)
}

fn counter(s: &Snapshot, node: &str, name: &str) -> u64 {
    s.counters.iter().find(|c| c.node == node && c.counter == name).map_or(0, |c| c.count)
}

#[test]
fn ethernet_input_forwards_and_encapsulates_what_the_lookup_would() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut control, worker) = assemble(&cfg).unwrap().into_single();
    let handle = spawn(&mut control, worker, None, false);
    // Bounded wait for the three streams (0.1 s each at their rates).
    let mut snap = None;
    for _ in 0..400 {
        std::thread::sleep(Duration::from_millis(10));
        let s = control.snapshot().unwrap();
        if packets(&s, "gtpu4-encap") == 2000 && counter(&s, "ip4-lookup", "no-route") == 100 && packets(&s, "interface-output") >= 5000 {
            snap = Some(s);
            break;
        }
    }
    let s = snap.expect("the three streams passed within four seconds");
    // The routed and tunnelled packets never reached the lookup node: what it saw is the
    // 100 without a route and the ICMP errors answering them (rate-limited, at most one
    // each), nothing of the 5,000 others.
    let lookup = packets(&s, "ip4-lookup");
    assert!((100..=200).contains(&lookup), "ip4-lookup saw {lookup} packets");
    assert_eq!(packets(&s, "ip4-input"), 0);
    // ip4-rewrite sees only the ICMP errors, back toward a sender whose address is not
    // resolved (it solicits it): none of the routed packets.
    assert!(packets(&s, "ip4-rewrite") <= 100, "{:?}", s.nodes);
    assert_eq!(counter(&s, "ip4-icmp-error", "sent") + counter(&s, "ip4-icmp-error", "rate-limited"), 100, "{:?}", s.counters);
    assert_eq!(packets(&s, "gtpu4-encap"), 2000);
    // (A traced packet takes the lookup node: `trace_by_packet.rs` sees it in the trace.)
    control.workers[0].send(WorkerCmd::Stop).unwrap();
    handle.join().unwrap();
}
