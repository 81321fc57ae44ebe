//! What the whole-graph tests share: committed fuzz seeds as frames, re-addressed copies
//! of them, counters, and the check that a vector decided in one loop goes where the same
//! vector traced (a `process` call a packet) goes; the gateway most of them start from
//! and the checks they end with. Each test file uses some of it.
#![allow(dead_code)]

/// The gateway most whole-graph tests start from, as TOML: `pg0` (a generator,
/// 198.18.0.1/24) on the sources' side, `null0` (a sink, 198.18.1.1/24) on the peer's,
/// and the peer 198.18.1.2 on `null0` with its MAC known. A macro rather than a `const`
/// so that a test can `concat!` its own sections to it into a `const` of its own
/// (`#[macro_use] mod common;`). `pg0_null0_config!(null0_also: "2001:db8:1::1/64", …)`
/// gives `null0` those addresses after its own.
#[allow(unused_macros)]
macro_rules! pg0_null0_config {
    ($(null0_also: $($also:literal),+)?) => {
        concat!(
            r#"
[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24""#,
            $($(", \"", $also, "\"",)+)?
            r#"]

[[neighbour]]
interface = "null0"
ip = "198.18.1.2"
mac = "02:00:00:00:01:02"
"#
        )
    };
}

/// The two links of the tests that feed a worker by port (`Harness::frame`), as TOML:
/// `access0` (a generator, 198.18.0.1/24) on the users' side, `core0` (a generator,
/// 198.18.1.1/24) on the peers'; [`ACCESS0`] and [`CORE0`] are their ports. With
/// `dual_stack`, 2001:db8::1/64 and 2001:db8:1::1/64 too.
#[allow(unused_macros)]
macro_rules! access0_core0_config {
    () => {
        access0_core0_config!(@ "", "")
    };
    (dual_stack) => {
        access0_core0_config!(@ r#", "2001:db8::1/64""#, r#", "2001:db8:1::1/64""#)
    };
    (@ $access0_v6:literal, $core0_v6:literal) => {
        concat!(
            r#"
[[interface]]
name = "access0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24""#,
            $access0_v6,
            r#"]

[[interface]]
name = "core0"
type = "pg"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24""#,
            $core0_v6,
            r#"]
"#
        )
    };
}

/// The tunnels the tests of changes in place make their changes to, as TOML: from
/// 198.18.1.1 to the peer 198.18.1.2, a GRE-in-UDP tunnel (key 7, sequence numbers) for
/// 198.19.1.0/24 and a GTP-U tunnel (TEIDs 100 in, 200 out) for the UEs 198.19.2.0/24,
/// each counted (`[metrics] tunnel_counters`).
#[allow(unused_macros)]
macro_rules! gre_and_gtpu_tunnels_config {
    () => {
        r#"
[metrics]
tunnel_counters = true

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gre"
key = 7
gre_sequence = true
routes = ["198.19.1.0/24"]

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 100
teid_out = 200
ue = "198.19.2.0/24"
"#
    };
}

/// The ports of `access0` and `core0` in [`access0_core0_config`] and in the graph fuzz
/// target's gateway (`control::fuzz::graph::CONFIG`), where they come first too.
pub const ACCESS0: usize = 0;
pub const CORE0: usize = 1;

use control::api::{Reply, Request};
use control::config::Config;
use control::dataplane::{assemble, Control, WorkerContext};
use control::fuzz::graph::{decode, Harness};
use engine::stats::Snapshot;
use engine::worker::{Context, Worker, WorkerCmd};
use io::mem::RxFrame;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::thread::JoinHandle;
use wire::ipv4::Ipv4Packet;
use wire::ipv6::Ipv6Packet;
use wire::tcp::TcpPacket;
use wire::udp::UdpPacket;

/// The first frame of a committed fuzz seed (fuzz/make_graph_corpus.py): its port and bytes.
pub fn seed(name: &str) -> (usize, Vec<u8>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/graph").join(name);
    let (port, f) = decode(&std::fs::read(&path).unwrap()).remove(0);
    (port, f.bytes)
}

/// Every frame of the committed fuzz seed `seed-NAME`.
pub fn seed_frames(name: &str) -> Vec<RxFrame> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/graph").join(format!("seed-{name}"));
    decode(&std::fs::read(p).unwrap()).into_iter().map(|(_, f)| f).collect()
}

/// The name of the gateway's file in the directory [`from_file`] makes.
pub const GATEWAY_FILE: &str = "gw.toml";

/// A gateway started from `text` written to [`GATEWAY_FILE`] in a new directory and
/// kept as its `--config` (a plain reload reads the file again): the directory, the
/// control plane and its worker.
pub fn from_file(text: &str) -> (tempfile::TempDir, Control, Worker<WorkerContext>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(GATEWAY_FILE);
    std::fs::write(&path, text).unwrap();
    let (mut c, worker) = assemble(&Config::load(&path).unwrap()).unwrap().into_single();
    c.config_path = Some(path);
    (dir, c, worker)
}

/// The control plane of [`from_file`], its worker dropped: enough for a reload that
/// changes no interface.
pub fn control_from_file(text: &str) -> (tempfile::TempDir, Control) {
    let (dir, c, _worker) = from_file(text);
    (dir, c)
}

/// [`from_file`] with its worker running in a thread of its own (a reload changes
/// interfaces through it); [`stop`] ends it.
pub fn running_from_file(text: &str) -> (tempfile::TempDir, Control, JoinHandle<Worker<WorkerContext>>) {
    let (dir, mut c, worker) = from_file(text);
    let handle = control::dataplane::spawn(&mut c, worker, None, false);
    (dir, c, handle)
}

/// Stops the workers of `c` and waits for the one `handle` runs ([`running_from_file`]).
pub fn stop<T>(c: Control, handle: JoinHandle<T>) {
    for w in &c.workers {
        let _ = w.send(WorkerCmd::Stop);
    }
    handle.join().unwrap();
}

/// `text` written as the gateway's file ([`from_file`]) in `dir` and reloaded: the reply.
pub fn reload_file(dir: &tempfile::TempDir, c: &mut Control, text: &str) -> Reply {
    std::fs::write(dir.path().join(GATEWAY_FILE), text).unwrap();
    c.handle(&Request::Reload { file: None })
}

/// [`reload_file`]: Ok(the names of the changes, in the reply's order) or Err(the refusal).
pub fn reload_names(dir: &tempfile::TempDir, c: &mut Control, text: &str) -> Result<Vec<String>, String> {
    let r = reload_file(dir, c, text);
    match r.ok {
        true => Ok(r.data["changes"].as_array().unwrap().iter().map(|ch| ch["name"].as_str().unwrap().to_string()).collect()),
        false => Err(r.error.unwrap_or_default()),
    }
}

/// Polls `worker` until its generators are done and their last packets are through,
/// then takes the tables last published.
pub fn run_to_end(worker: &mut Worker<WorkerContext>) {
    while !worker.inputs_done() {
        worker.poll_once();
    }
    worker.poll_once();
    worker.cx.refresh();
}

/// The reply to `r`, which must have succeeded.
#[track_caller]
pub fn api_ok(c: &mut Control, r: Request) -> Reply {
    let reply = c.handle(&r);
    assert!(reply.ok, "{r:?}: {reply:?}");
    reply
}

/// Every counter of `s` that counted is informational: nothing was dropped, else the
/// counters that counted, to say where.
#[track_caller]
pub fn assert_no_drops(s: &Snapshot) {
    assert!(
        s.counters.iter().all(|c| c.count == 0 || c.severity == engine::Severity::Info),
        "no drops: {:?}",
        s.counters.iter().filter(|c| c.count > 0).collect::<Vec<_>>()
    );
}

/// `node`'s `counter` summed over the harness's workers.
pub fn count_all(h: &Harness, node: &str, counter: &str) -> u64 {
    h.workers().flat_map(|w| w.graph.counter_snapshots()).filter(|c| c.node == node && c.counter == counter).map(|c| c.count).sum()
}

/// Frame `f` (IPv4 TCP) from `src`:`sport` to `dst`:`dport`, its TCP flags `flags` if
/// given, checksums filled.
pub fn tcp4(f: &RxFrame, src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, flags: Option<u8>) -> RxFrame {
    let mut b = f.bytes.clone();
    let mut ip = Ipv4Packet::new_unchecked(&mut b[14..]);
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
    ip.fill_checksum();
    let hl = ip.header_len();
    if let Some(flags) = flags {
        // TCP flags at byte 13 of the header.
        b[14 + hl + 13] = flags;
    }
    let mut t = TcpPacket::new_unchecked(&mut b[14 + hl..]);
    t.set_ports(sport, dport);
    t.fill_checksum_v4(src, dst);
    RxFrame { bytes: b, vnet: None }
}

/// Frame `f` (IPv6 UDP) from `src`:`sport` to `dst`:`dport`, checksum filled.
pub fn udp6(f: &RxFrame, src: Ipv6Addr, sport: u16, dst: Ipv6Addr, dport: u16) -> RxFrame {
    let mut b = f.bytes.clone();
    let mut ip = Ipv6Packet::new_unchecked(&mut b[14..]);
    ip.set_src_addr(&src);
    ip.set_dst_addr(&dst);
    let mut u = UdpPacket::new_unchecked(&mut b[14 + 40..]);
    u.set_src_port(sport);
    u.set_dst_port(dport);
    u.fill_checksum_v6(&src, &dst);
    RxFrame { bytes: b, vnet: None }
}

/// The non-zero counters of the nodes whose names start with `prefix`, sorted.
pub fn counters(h: &Harness, prefix: &str) -> Vec<(String, String, u64)> {
    let mut c: Vec<_> = h
        .worker
        .graph
        .counter_snapshots()
        .into_iter()
        .filter(|c| c.node.starts_with(prefix) && c.count > 0)
        .map(|c| (c.node.to_string(), c.counter.to_string(), c.count))
        .collect();
    c.sort();
    c
}

/// The count of `node`'s `counter` in `c` ([`counters`]), 0 when absent.
pub fn count(c: &[(String, String, u64)], node: &str, counter: &str) -> u64 {
    c.iter().find(|(n, k, _)| n == node && k == counter).map_or(0, |e| e.2)
}

/// `frames` through `untraced` and, every packet traced (so `node` sees them by
/// `process`), through `traced`: the same frames must leave by the same ports, byte
/// for byte, and the counters `view` gives of each must agree.
pub fn traced_and_untraced_agree(
    untraced: &mut Harness,
    traced: &mut Harness,
    frames: Vec<(usize, RxFrame)>,
    node: &str,
    view: impl Fn(&Harness) -> Vec<(String, String, u64)>,
    round: usize,
) {
    traced.worker.graph.trace_add("pg-input", 10_000).unwrap();
    // Compared as sets: packets that take different paths through the graph leave in
    // the order of its nodes (a parcel forwarded whole by `ethernet-input` untraced
    // reaches `interface-output` a node earlier than traced), the order on each path kept.
    let sorted = |mut f: Vec<(usize, io::mem::TxFrame)>| {
        f.sort_by(|x, y| (x.0, &x.1.bytes).cmp(&(y.0, &y.1.bytes)));
        f
    };
    let a = sorted(untraced.frames(frames.clone()));
    let b = sorted(traced.frames(frames));
    assert!(traced.worker.graph.trace_records().iter().any(|t| t.node == node), "round {round}: traced");
    traced.worker.graph.trace_clear();
    assert_eq!(a.len(), b.len(), "round {round}: frames sent");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "round {round}: frame {i}");
    }
    assert_eq!(view(untraced), view(traced), "round {round}");
}
