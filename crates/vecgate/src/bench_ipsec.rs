//! `vecgate bench ipsec4-encrypt`: the outbound SPD and ESP on one core, as the vpp-dev
//! flow-cache thread measured VPP's `ipsec4-output-feature`: 64-byte (`--inner-size`)
//! UDP from pg0 to 198.19.0.1 over `--flows` source ports, leaving by null0, whose SPD
//! holds `--policies` outbound policies; the one that matches (PROTECT with SA 0,
//! `--alg`) is `--position`-th in priority order, every policy before it a near miss
//! (UDP, the same remote prefix, other ports). `--no-flow-cache` classifies every packet.
//! The report names `ipsec4-output` and `esp4-encrypt` among its nodes and adds the
//! SPD's figures (`ipsec`).
//!
//! More than 64,000 `--flows` vary the source address too (1,024 ports times an odd
//! number of addresses, so the two counters cycle through every pair). `--churn R`
//! adds and deletes DISCARD policies R times a second from a control thread while the
//! measured run goes, each change published as `ipsec policy add|del` publishes it;
//! the report's `churn` says what rate was achieved, how many packets the churned
//! policies discarded and how many of the other flows were lost (must be 0).
//! `--export DIR` writes the frames (`frames.pcap`) and the policies (`policies.txt`)
//! for `scripts/bench-ipsec-vs-vpp.sh`, which configures VPP with the same ones.

use anyhow::{anyhow, bail, Result};
use control::config::Config;
use control::dataplane::assemble;
use io::pg::{Field, L4Spec, ModifierSpec, PacketGenerator, PacketSpec, Pattern, StreamSpec};
use serde::Serialize;
use spd::policy::{ActionKind, Direction, PolicySpec};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
    /// Policy changes per second while the measured run goes (0: none).
    pub churn: u32,
    /// Write the frames and policies here and exit.
    pub export: Option<PathBuf>,
}

/// Source ports cycled when the flows also vary the source address.
const PORTS_WITH_ADDRS: u32 = 1024;
/// The first source port; the generated flows use ports from it on.
const FIRST_PORT: u16 = 1024;
/// DISCARD policies the churn adds and deletes in turn, each for one source port.
const CHURN_POLICIES: u32 = 4;
/// At most this many flows (source addresses from 198.18.0.2 stay inside 198.18.0.0/15).
const MAX_FLOWS: u32 = 4 << 20;

/// How the flows are laid out: `ports` source ports times `addrs` source addresses,
/// coprime, so the two generator counters together visit every pair once a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlowLayout {
    ports: u32,
    addrs: u32,
}

impl FlowLayout {
    fn new(flows: u32) -> FlowLayout {
        if flows <= 64_000 {
            return FlowLayout { ports: flows, addrs: 1 };
        }
        let addrs = flows.div_ceil(PORTS_WITH_ADDRS) | 1;
        FlowLayout { ports: PORTS_WITH_ADDRS, addrs }
    }
    fn flows(self) -> u32 {
        self.ports * self.addrs
    }
    /// The source port of the `k`-th generated packet.
    fn port(self, k: u64) -> u16 {
        FIRST_PORT + (k % self.ports as u64) as u16
    }
    /// The source ports whose flows the churned policies discard: spread over the range.
    fn churn_ports(self) -> Vec<u16> {
        (0..CHURN_POLICIES.min(self.ports)).map(|j| FIRST_PORT + (j * self.ports / CHURN_POLICIES.min(self.ports)) as u16).collect()
    }
    fn modifiers(self) -> Vec<ModifierSpec> {
        let mut m = vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: self.ports } }];
        if self.addrs > 1 {
            m.push(ModifierSpec { field: Field::SrcAddr, pattern: Pattern::Increment { count: self.addrs } });
        }
        m
    }
}

/// Churned policy `j`: discard the flows of source port `port`, ahead of every other.
fn churn_policy(j: u32, port: u16, policies: u32) -> PolicySpec {
    PolicySpec {
        spd: 1,
        direction: Direction::Outbound,
        priority: policies + 1 + j,
        action: ActionKind::Discard,
        sa: None,
        local: "any".into(),
        remote: "198.19.0.0/16".into(),
        protocol: "udp".into(),
        local_ports: port.to_string(),
        remote_ports: "9".into(),
    }
}

/// The control side of `--churn`: policy `j % 4` added if absent, else deleted, and the
/// SPD published (as the API does for `ipsec policy add|del`), `rate` times a second
/// until `stop`. Returns the changes made and the seconds they took.
fn churn_loop(spd: &mut spd::SpdState, ports: &[u16], policies: u32, rate: u32, stop: &AtomicBool) -> Result<(u64, f64)> {
    let mut present: Vec<Option<u32>> = vec![None; ports.len()];
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let t0 = Instant::now();
    let mut changes = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let j = changes as usize % ports.len();
        match present[j].take() {
            Some(id) => {
                spd.del_policy(id).map_err(|e| anyhow!("churn: delete policy {id}: {e}"))?;
            }
            None => {
                let id = spd.add_policy(&churn_policy(j as u32, ports[j], policies)).map_err(|e| anyhow!("churn: {e}"))?;
                present[j] = Some(id.0);
            }
        }
        spd.publish();
        changes += 1;
        // Paced against the start, so a slow publish is caught up rather than lost.
        if let Some(wait) = (t0 + period * changes as u32).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    Ok((changes, t0.elapsed().as_secs_f64()))
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
    /// `ipsec4-output`'s mean cycles per packet over the run (what VPP's `show runtime`
    /// gives), next to the median vector above.
    spd_cycles_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    churn: Option<ChurnReport>,
}

#[derive(Serialize)]
struct ChurnReport {
    /// Changes asked for and achieved per second (each an add or a delete, published).
    rate: u32,
    changes: u64,
    changes_per_second: f64,
    /// Source ports whose flows the churned policies discard, and those flows' packets
    /// in the measured run.
    ports: Vec<u16>,
    affected_flows: u64,
    affected_packets: u64,
    /// Packets `ipsec4-output` discarded by policy (only the churned policies discard).
    discarded: u64,
    /// Generated packets neither delivered nor discarded by a churned policy: must be 0.
    lost: u64,
    /// Flow-cache lookups that found their entry stamped by an older policy set, and a
    /// change since that may select their flow (re-decided by the classifier).
    cache_stale: u64,
    /// Those that found it stamped by an older policy set no change since can select
    /// (kept, restamped).
    cache_revalidated: u64,
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
    if o.flows == 0 || o.flows > MAX_FLOWS {
        bail!("--flows {}: expected 1 to {MAX_FLOWS}", o.flows);
    }
    if !(28..=1500).contains(&o.inner_size) {
        bail!("--inner-size {}: expected 28 to 1500 bytes", o.inner_size);
    }
    if o.churn > 1_000_000 {
        bail!("--churn {}: expected at most 1000000 changes per second", o.churn);
    }
    let layout = FlowLayout::new(o.flows);
    let (mut control, mut worker, load_seconds, shapes) = setup(o)?;
    let warmup = (packets / 10).max(1024).div_ceil(engine::VECTOR_SIZE as u64) * engine::VECTOR_SIZE as u64;
    let stream = StreamSpec {
        name: scenario.into(),
        packet: packet_spec(o)?,
        modifiers: layout.modifiers(),
        count: Some(warmup + packets),
        rate_pps: None,
    };
    if let Some(dir) = &o.export {
        let n = crate::bench_side::export_frames(&stream, &mut worker.pool, &dir.join("frames.pcap"))?;
        export_policies(o, &dir.join("policies.txt"))?;
        eprintln!("{scenario}: {n} frames and {} policies written to {}", o.policies, dir.display());
        return Ok(());
    }
    worker.ports[0].device = Box::new(PacketGenerator::new(&[stream]).map_err(|(_, e)| anyhow!(e))?);
    // The warm-up here rather than in `measure`, so the cache's counters can be read
    // between it and the measured run.
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
    let mut generated = 0u64;
    while generated < warmup {
        generated += worker.poll_once() as u64;
    }
    let before = worker.cx.spd.flows4.as_ref().map(|c| c.stats).unwrap_or_default();
    let discards_before = output_discards(&worker.snapshot());
    let churn_ports = layout.churn_ports();
    let stop = AtomicBool::new(false);
    let ((s, secs, cycles), churned) = std::thread::scope(|scope| {
        let churner = (o.churn > 0).then(|| {
            let (spd, ports, stop) = (&mut control.spd, &churn_ports, &stop);
            scope.spawn(move || {
                // A new thread inherits the worker's core: the control side runs beside it.
                if let Some(other) = core_affinity::get_core_ids().unwrap_or_default().into_iter().find(|c| c.id != core) {
                    core_affinity::set_for_current(other);
                }
                churn_loop(spd, ports, o.policies, o.churn, stop)
            })
        });
        let measured = crate::bench::measure(&mut worker, core, 0);
        stop.store(true, Ordering::Relaxed);
        let churned = churner.map(|h| h.join().map_err(|_| anyhow!("the churn thread panicked")).and_then(|r| r)).transpose();
        (measured, churned)
    });
    let churned = churned?;
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
            flows: layout.flows(),
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
            spd_cycles_mean: s.nodes.iter().find(|n| n.name == "ipsec4-output").map(|n| n.cycles_per_packet),
            churn: churned.map(|(changes, churn_secs)| {
                let discarded = output_discards(&s) - discards_before;
                let affected_packets = (warmup..warmup + input).filter(|&k| churn_ports.contains(&layout.port(k))).count() as u64;
                ChurnReport {
                    rate: o.churn,
                    changes,
                    changes_per_second: changes as f64 / churn_secs,
                    ports: churn_ports.clone(),
                    affected_flows: churn_ports.len() as u64 * layout.addrs as u64,
                    affected_packets,
                    discarded,
                    lost: input.saturating_sub(delivered + discarded),
                    cache_stale: after.stale - before.stale,
                    cache_revalidated: after.revalidated - before.revalidated,
                }
            }),
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
        if let Some(c) = &r.churn {
            println!(
                "churn: {} changes ({:.0}/s, asked {}/s); {} packets of the {} affected flows, {} discarded; {} packets of other flows lost; {} stale cache lookups, {} revalidated",
                c.changes,
                c.changes_per_second,
                c.rate,
                c.affected_packets,
                c.affected_flows,
                c.discarded,
                c.lost,
                c.cache_stale,
                c.cache_revalidated
            );
        }
    }
    match &report.ipsec.churn {
        None if delivered != input => bail!("{delivered} of {input} packets reached the sink: the scenario is broken"),
        Some(c) if c.lost != 0 => bail!("{} packets of flows no churned policy selects were lost", c.lost),
        Some(c) if c.discarded > c.affected_packets => {
            bail!("{} packets discarded, more than the {} of the churned policies' flows", c.discarded, c.affected_packets)
        }
        _ => Ok(()),
    }
}

type Worker = engine::worker::Worker<control::dataplane::WorkerContext>;

/// The dataplane of the scenario with its policies published: control, worker, the
/// seconds the policies took to add and publish, and the selector shapes.
fn setup(o: &IpsecOptions) -> Result<(control::dataplane::Control, Worker, f64, usize)> {
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
    Ok((control, worker, load_seconds, shapes))
}

/// `ipsec4-output`'s DISCARD count in a snapshot.
fn output_discards(s: &engine::stats::Snapshot) -> u64 {
    s.counters.iter().filter(|c| c.node == "ipsec4-output" && c.counter == "policy-discard").map(|c| c.count).sum()
}

/// The packet every flow sends: `--inner-size` bytes of UDP from 198.18.0.2 (source port
/// and address varied by the flow layout) to 198.19.0.1 port 9.
fn packet_spec(o: &IpsecOptions) -> Result<PacketSpec> {
    Ok(PacketSpec {
        src_mac: "02:fe:00:00:00:01".parse()?,
        dst_mac: "02:00:00:00:00:01".parse()?,
        src: "198.18.0.2".parse()?,
        dst: "198.19.0.1".parse()?,
        ttl: 64,
        l4: L4Spec::Udp { src_port: FIRST_PORT, dst_port: 9 },
        frame_size: 14 + o.inner_size,
    })
}

/// The policies in priority order, one a line: `priority action local-ports
/// remote-ports remote-prefix` (protocol UDP, local any), the PROTECT one with SA 0.
fn export_policies(o: &IpsecOptions, path: &Path) -> Result<()> {
    let mut text = String::from("# priority action local_ports remote_ports remote (protocol udp, local any)\n");
    for i in 0..o.policies {
        let p = policy(i, o.policies, o.position);
        let action = match p.action {
            ActionKind::Protect => "protect",
            ActionKind::Bypass => "bypass",
            ActionKind::Discard => "discard",
        };
        text += &format!("{} {action} {} {} {}\n", p.priority, p.local_ports, p.remote_ports, p.remote);
    }
    std::fs::write(path, text).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packets null0 sent and `ipsec4-output` discarded by policy, so far.
    fn counts(w: &Worker) -> (u64, u64) {
        let s = w.snapshot();
        let sent = s.ports.iter().find(|p| p.name == "null0").map_or(0, |p| p.counters.tx_packets);
        (sent, output_discards(&s))
    }

    /// The churn at a small scale, a change before every other vector, each published as
    /// the API publishes it: every flow is in the flow cache when a change lands (each
    /// vector carries all 256 flows), yet the very next vector discards exactly the
    /// packets of the ports a churned policy now selects and delivers every other one
    /// (checked per vector, on every add and every delete, and on the cache hits between).
    #[test]
    fn churned_flows_follow_the_new_policy_from_the_next_vector() {
        let o = IpsecOptions {
            policies: 10,
            position: 10,
            flows: engine::VECTOR_SIZE as u32,
            flow_cache: true,
            alg: ipsec::Algorithm::Null,
            inner_size: 64,
            churn: 0,
            export: None,
        };
        let layout = FlowLayout::new(o.flows);
        let (mut control, mut worker, _, _) = setup(&o).unwrap();
        let vectors = 24u64;
        let n = engine::VECTOR_SIZE as u64;
        let stream = StreamSpec {
            name: "churn".into(),
            packet: packet_spec(&o).unwrap(),
            modifiers: layout.modifiers(),
            count: Some(vectors * n),
            rate_pps: None,
        };
        worker.ports[0].device = Box::new(PacketGenerator::new(&[stream]).unwrap());
        let ports = layout.churn_ports();
        assert_eq!(ports.len(), CHURN_POLICIES as usize);
        let mut present: Vec<Option<u32>> = vec![None; ports.len()];
        let mut changes = 0;
        for v in 0..vectors {
            // A change before every other vector: the vectors between use the cache.
            if v % 2 == 1 {
                let j = changes % ports.len();
                match present[j].take() {
                    Some(id) => {
                        control.spd.del_policy(id).unwrap();
                    }
                    None => present[j] = Some(control.spd.add_policy(&churn_policy(j as u32, ports[j], o.policies)).unwrap().0),
                }
                control.spd.publish();
                changes += 1;
            }
            let (sent0, discarded0) = counts(&worker);
            assert_eq!(worker.poll_once() as u64, n, "vector {v}: a whole vector generated");
            let (sent1, discarded1) = counts(&worker);
            let discarding: Vec<u16> = ports.iter().zip(&present).filter(|(_, id)| id.is_some()).map(|(&p, _)| p).collect();
            let expected = (v * n..(v + 1) * n).filter(|&k| discarding.contains(&layout.port(k))).count() as u64;
            assert_eq!(discarded1 - discarded0, expected, "vector {v}: discarded, with ports {discarding:?} discarding");
            assert_eq!(sent1 - sent0, n - expected, "vector {v}: delivered, with ports {discarding:?} discarding");
        }
        // Both directions were seen: ports discarding, and ports let through again.
        assert!(changes > 2 * ports.len());
        // After a change every lookup found its flow in the cache, decided under the
        // version before: the changed policy's flow (one source port, one flow here)
        // did not use that decision, every other flow did (revalidated); between changes
        // every lookup hit on its stamp.
        let stats = worker.cx.spd.flows4.as_ref().map(|c| c.stats).unwrap();
        let changed = vectors / 2;
        assert_eq!(layout.addrs, 1);
        assert_eq!(
            (stats.hits, stats.revalidated, stats.stale, stats.misses),
            ((vectors - 1) * n - changed, changed * (n - 1), changed, n + changed),
            "{stats:?}"
        );
    }

    #[test]
    fn large_flow_counts_visit_every_port_and_address_pair() {
        let l = FlowLayout::new(1_000_000);
        assert_eq!(l.ports, PORTS_WITH_ADDRS);
        assert!(l.flows() >= 1_000_000 && l.addrs % 2 == 1, "{l:?}");
        assert_eq!(FlowLayout::new(1000), FlowLayout { ports: 1000, addrs: 1 });
        assert_eq!(
            crate::bench_side::period(&StreamSpec {
                name: "x".into(),
                packet: packet_spec(&IpsecOptions {
                    policies: 1,
                    position: 1,
                    flows: 1_000_000,
                    flow_cache: true,
                    alg: ipsec::Algorithm::Null,
                    inner_size: 64,
                    churn: 0,
                    export: None,
                })
                .unwrap(),
                modifiers: l.modifiers(),
                count: None,
                rate_pps: None,
            }),
            Some(l.flows() as u64)
        );
    }
}
