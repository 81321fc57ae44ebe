//! `show trace` as an operator reads it: each traced packet's path through the nodes in
//! order (grouped, though records arrive node by node for whole vectors), with the
//! wall-clock time it entered, interface names rather than indices, and tunnels by
//! name rather than their encoded FIB values.

use control::api::Request;
use control::config::Config;
use control::dataplane::{assemble, spawn};
use engine::worker::WorkerCmd;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CFG: &str = concat!(
    pg0_null0_config!(),
    r#"
[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 256
teid_out = 8
ue = "198.18.200.1/32"

[[stream]]
name = "to-ue"
interface = "pg0"
size = 64
count = 1000000
rate = 20000
protocol = "udp"
src = "198.18.0.2"
dst = "198.18.200.1"
"#
);

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[test]
fn show_trace_groups_each_packets_path_with_time_and_names() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut control, worker) = assemble(&cfg).unwrap().into_single();
    let handle = spawn(&mut control, worker, None, false);
    let before = now_ns();
    let r = control.handle(&Request::TraceAdd { node: "pg-input".into(), count: 4 });
    assert!(r.ok, "{r:?}");
    // Bounded wait for the four packets to pass (the stream sends 20,000 a second).
    let mut reply = None;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(10));
        let r = control.handle(&Request::ShowTrace {});
        let done = r.data.as_array().unwrap().iter().filter(|v| v["node"] == "interface-output").count() == 4;
        if done {
            reply = Some(r);
            break;
        }
    }
    let after = now_ns();
    control.workers[0].send(WorkerCmd::Stop).unwrap();
    handle.join().unwrap();
    let r = reply.expect("four traced packets left within two seconds");
    // Grouped: four headers, each followed by that packet's whole path.
    let text = &r.text;
    let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("Packet ")).collect();
    assert_eq!(headers.len(), 4, "{text}");
    for (k, block) in text.split("Packet ").skip(1).enumerate() {
        assert!(block.starts_with(&format!("{} at ", k + 1)), "{text}");
        let nodes: Vec<&str> = block.lines().skip(1).map(|l| l.split_whitespace().nth(1).unwrap()).collect();
        assert_eq!(nodes.first(), Some(&"input"), "{text}");
        assert_eq!(nodes.last(), Some(&"interface-output"), "{text}");
        assert!(nodes.contains(&"gtpu4-encap") && nodes.contains(&"ip4-lookup"), "{text}");
        assert!(block.contains("from pg0") && block.contains("to null0") && block.contains("into gtpu_tunnel0"), "{text}");
    }
    // No index or encoded FIB value where a name belongs.
    for word in ["rx_if", "tx_if", "adj ", "268435456"] {
        assert!(!text.contains(word), "{word:?} in {text}");
    }
    // Real times: every record's between the request and the answer.
    for v in r.data.as_array().unwrap() {
        let t = v["time_ns"].as_u64().unwrap();
        assert!(before <= t && t <= after, "{v}");
        assert_eq!(v["worker"], 0);
    }
    let first = r.data.as_array().unwrap()[0]["time_ns"].as_u64().unwrap();
    assert!(headers[0].ends_with(&format!("{} UTC", &control::format::time_of_day(first)[..15])), "{text}");
}
