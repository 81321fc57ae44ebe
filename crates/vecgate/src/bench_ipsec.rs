//! `vecgate bench ipsec4-encrypt`: the outbound SPD and ESP on one core, as the vpp-dev
//! flow-cache thread measured VPP's `ipsec4-output-feature`: 64-byte (`--inner-size`)
//! UDP from pg0 to 198.19.0.1 over `--flows` source ports, leaving by null0, whose SPD
//! holds `--policies` outbound policies; the one that matches (PROTECT with SA 0,
//! `--alg`) is `--position`-th in priority order, every policy before it a near miss
//! (UDP, the same remote prefix, other ports). `--no-flow-cache` classifies every packet.
//! The report names `ipsec4-output` and `esp4-encrypt` among its nodes and adds the
//! SPD's figures (`ipsec`).

use anyhow::{anyhow, bail, Result};
use control::config::Config;
use control::dataplane::assemble;
use io::pg::{Field, L4Spec, ModifierSpec, PacketGenerator, PacketSpec, Pattern, StreamSpec};
use serde::Serialize;
use spd::policy::{ActionKind, Direction, PolicySpec};
use std::path::Path;
use std::time::Instant;

pub const SCENARIOS: &[&str] = &["ipsec4-encrypt"];

/// The options of `ipsec4-encrypt`.
#[derive(Debug, Clone)]
pub struct IpsecOptions {
    pub policies: u32,
    /// The matching policy's place in priority order, from 1.
    pub position: u32,
    pub flows: u32,
    pub flow_cache: bool,
    pub alg: ipsec::Algorithm,
    pub inner_size: usize,
}

/// Near misses use source ports 1 and 2 and destination ports from this one on: the
/// generated packets (source ports from 1024, destination port 9) never match them.
const MISS_PORT: u32 = 10_000;
const MISS_PORTS: u32 = 50_000;

fn config(o: &IpsecOptions) -> String {
    let cache = if o.flow_cache { spd::context::DEFAULT_FLOW_CACHE } else { 0 };
    let (enc, integ) = ("a5".repeat(o.alg.enc_key_lens()[0]), "5a".repeat(o.alg.integ_key_len()));
    format!(
        r#"
[dataplane]
buffers = 4096

[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:02"
mtu = 9000
addresses = ["198.18.1.1/24"]

[[neighbour]]
interface = "null0"
ip = "198.18.1.2"
mac = "02:00:00:00:01:02"

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"

[spd]
flow_cache = {cache}

[[ipsec_sa]]
index = 0
spi = 4096
direction = "outbound"
algorithm = "{alg}"
enc_key = "{enc}"
integ_key = "{integ}"
local = "198.18.1.1"
remote = "198.18.1.2"

[[ipsec_spd]]
id = 1
interfaces = ["null0"]
"#,
        alg = o.alg,
    )
}

/// Policy `i` of `n` (0 first in priority order): the match at `position - 1`, a near
/// miss everywhere else.
fn policy(i: u32, n: u32, position: u32) -> PolicySpec {
    let hit = i + 1 == position;
    PolicySpec {
        spd: 1,
        direction: Direction::Outbound,
        priority: n - i,
        action: if hit { ActionKind::Protect } else { ActionKind::Bypass },
        sa: hit.then_some(0),
        local: "any".into(),
        remote: "198.19.0.0/16".into(),
        protocol: "udp".into(),
        local_ports: if hit { "any".into() } else { (1 + i / MISS_PORTS).to_string() },
        remote_ports: if hit { "9".into() } else { (MISS_PORT + i % MISS_PORTS).to_string() },
    }
}

#[derive(Serialize)]
struct IpsecReport {
    policies: u32,
    position: u32,
    flows: u32,
    /// Flow-cache slots per family (0: none).
    flow_cache: usize,
    alg: String,
    inner_size: usize,
    /// Selector shapes the classifier probes at most.
    shapes: usize,
    /// Seconds to add the policies and publish the SPD once.
    load_seconds: f64,
    /// The measured run's flow-cache hits and misses.
    cache_hits: u64,
    cache_misses: u64,
    /// `ipsec4-output` and `esp4-encrypt`: the median vector's cycles per packet.
    spd_cycles: Option<f64>,
    encrypt_cycles: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    scenario: String,
    packets: u64,
    delivered: u64,
    mpps: f64,
    cycles_per_packet: f64,
    median_cycles_per_packet: f64,
    total_cycles_per_packet: f64,
    tsc_hz: u64,
    cpu: String,
    ipsec: IpsecReport,
    nodes: Vec<crate::bench::NodeRow>,
}

pub fn bench(scenario: &str, packets: u64, json: bool, core: usize, o: &IpsecOptions) -> Result<()> {
    if !SCENARIOS.contains(&scenario) {
        bail!("unknown scenario {scenario:?}; expected one of {}", SCENARIOS.join(", "));
    }
    if o.policies == 0 || o.policies > 1_000_000 || o.position == 0 || o.position > o.policies {
        bail!("--policies {} --position {}: expected 1 to 1000000 policies and a position among them", o.policies, o.position);
    }
    if o.flows == 0 || o.flows > 64_000 {
        bail!("--flows {}: expected 1 to 64000 (source ports from 1024)", o.flows);
    }
    if !(28..=1500).contains(&o.inner_size) {
        bail!("--inner-size {}: expected 28 to 1500 bytes", o.inner_size);
    }
    let cfg = Config::parse(&config(o), "(bench scenario)", Path::new("."))?;
    let (mut control, mut worker) = assemble(&cfg)?.into_single();
    let t0 = Instant::now();
    for i in 0..o.policies {
        control.spd.add_policy(&policy(i, o.policies, o.position)).map_err(|e| anyhow!("policy {i}: {e}"))?;
    }
    let tables = control.spd.publish();
    let load_seconds = t0.elapsed().as_secs_f64();
    let shapes = tables.spds.get(1).and_then(|s| s.as_ref()).map_or(0, |s| s.out4.shapes());
    engine::worker::Context::refresh(&mut worker.cx);
    let warmup = (packets / 10).max(1024).div_ceil(engine::VECTOR_SIZE as u64) * engine::VECTOR_SIZE as u64;
    let packet = PacketSpec {
        src_mac: "02:fe:00:00:00:01".parse()?,
        dst_mac: "02:00:00:00:00:01".parse()?,
        src: "198.18.0.2".parse()?,
        dst: "198.19.0.1".parse()?,
        ttl: 64,
        l4: L4Spec::Udp { src_port: 1024, dst_port: 9 },
        frame_size: 14 + o.inner_size,
    };
    let modifiers = vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: o.flows } }];
    let stream = StreamSpec { name: scenario.into(), packet, modifiers, count: Some(warmup + packets), rate_pps: None };
    worker.ports[0].device = Box::new(PacketGenerator::new(&[stream]).map_err(|(_, e)| anyhow!(e))?);
    // The warm-up here rather than in `measure`, so the cache's counters can be read
    // between it and the measured run.
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
    let mut generated = 0u64;
    while generated < warmup {
        generated += worker.poll_once() as u64;
    }
    let before = worker.cx.spd.flows4.as_ref().map(|c| c.stats).unwrap_or_default();
    let (s, secs, cycles) = crate::bench::measure(&mut worker, core, 0);
    let after = worker.cx.spd.flows4.as_ref().map(|c| c.stats).unwrap_or_default();
    let input = s.nodes.iter().find(|n| n.name == "pg-input").map(|n| n.runtime.packets).unwrap_or(0);
    let graph_cycles: u64 = s.nodes.iter().filter(|n| n.kind != "input").map(|n| n.runtime.cycles).sum();
    let median: f64 = s.nodes.iter().filter(|n| n.kind != "input").filter_map(|n| n.vector_median).sum();
    let delivered = s.ports.iter().find(|p| p.name == "null0").map(|p| p.counters.tx_packets).unwrap_or(0);
    let node_median = |name: &str| s.nodes.iter().find(|n| n.name == name).and_then(|n| n.vector_median);
    let report = Report {
        scenario: scenario.into(),
        packets: input,
        delivered,
        mpps: input as f64 / secs / 1e6,
        cycles_per_packet: graph_cycles as f64 / input.max(1) as f64,
        median_cycles_per_packet: median,
        total_cycles_per_packet: cycles as f64 / input.max(1) as f64,
        tsc_hz: s.tsc_hz,
        cpu: crate::bench::cpu_model(),
        ipsec: IpsecReport {
            policies: o.policies,
            position: o.position,
            flows: o.flows,
            flow_cache: if o.flow_cache { spd::context::DEFAULT_FLOW_CACHE } else { 0 },
            alg: o.alg.to_string(),
            inner_size: o.inner_size,
            shapes,
            load_seconds,
            // The warm-up's lookups are left out, as its runtime is.
            cache_hits: after.hits - before.hits,
            cache_misses: after.misses - before.misses,
            spd_cycles: node_median("ipsec4-output"),
            encrypt_cycles: node_median("esp4-encrypt"),
        },
        nodes: crate::bench::node_rows(&s),
    };
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", control::format::runtime(&s));
        let r = &report.ipsec;
        println!(
            "{}: {} policies, match at {}, {} flows, flow cache {}, {} {} B: {} packets, {} delivered, {:.2} Mpps, {:.1} cycles/packet in the graph; ipsec4-output {:.1}, esp4-encrypt {:.1} (vector medians; {} shapes; {})",
            report.scenario,
            r.policies,
            r.position,
            r.flows,
            if o.flow_cache { "on" } else { "off" },
            r.alg,
            r.inner_size,
            report.packets,
            report.delivered,
            report.mpps,
            report.cycles_per_packet,
            r.spd_cycles.unwrap_or(0.0),
            r.encrypt_cycles.unwrap_or(0.0),
            r.shapes,
            report.cpu,
        );
    }
    if delivered != input {
        bail!("{delivered} of {input} packets reached the sink: the scenario is broken");
    }
    Ok(())
}
