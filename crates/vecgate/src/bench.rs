//! `vecgate bench <scenario>`: generator → graph → null sink, one core, fixed packet
//! count, per-node TSC cycles like VPP's `show runtime`.
//!
//! `cycles_per_packet` sums every node except the generator's input node, per packet
//! generated (the figure comparable with VPP's path clocks); `total_cycles_per_packet`
//! is the whole run's TSC per packet, generator and loop included.

use anyhow::{anyhow, bail, Result};
use control::config::Config;
use control::dataplane::assemble;
use engine::clock;
use io::pg::{Field, L4Spec, ModifierSpec, PacketGenerator, PacketSpec, Pattern, StreamSpec};
use ip::{Prefix, RouteTarget};
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Instant;

pub const SCENARIOS: &[&str] = &[
    "ip4-forward",
    "ip6-forward",
    "ip4-forward-1m",
    "ip6-forward-1m",
    "gtpu4-encap",
    "gtpu4-decap",
    "gtpu6-encap",
    "gtpu6-decap",
    "gtpu4-decap-frag",
    "gue4-encap",
    "gue4-decap",
    "gre-udp4-encap",
    "lb4-nat",
    "lb4-encap",
    "esp4-encrypt",
    "esp4-decrypt",
    "upf4-uplink",
    "upf4-downlink",
];

/// Options of the load-balancer scenarios.
#[derive(Debug, Clone)]
pub struct LbOptions {
    pub services: u32,
    /// Backends per service.
    pub backends: u32,
    /// Client source ports cycled through (each a connection per service it meets).
    pub flows: u32,
    /// Session table slots per worker (`lb.limits.sessions`); the default's when `None`.
    pub sessions: Option<usize>,
}

/// Options of the GTP-U scenarios (ignored by the forwarding ones).
#[derive(Debug, Clone)]
pub struct GtpuOptions {
    /// Inner IP packet size in bytes.
    pub inner_size: usize,
    /// Outer UDP checksum; default as VPP does it (zero over IPv4, software over IPv6).
    pub checksum: Option<gtpu::ChecksumMode>,
    pub tunnels: u32,
    /// Inner family: "ip4" (default) or "ip6" (needed above 32768 encap tunnels: the
    /// allowed IPv4 range has no room for a million UE addresses).
    pub inner: String,
    /// Techniques to turn off (`all` for every one).
    pub disable: Vec<String>,
    /// Count per tunnel (`[metrics] tunnel_counters`).
    pub tunnel_counters: bool,
    /// esp4-encrypt: the SA's algorithm.
    pub alg: ipsec::Algorithm,
    /// upf scenarios: each session's rules (`all`, `no-qer`, `no-urr`, `pdr-far`).
    pub session_rules: String,
}

impl Default for GtpuOptions {
    fn default() -> Self {
        GtpuOptions {
            inner_size: 64,
            checksum: None,
            tunnels: 1,
            inner: "ip4".into(),
            disable: Vec::new(),
            tunnel_counters: false,
            alg: ipsec::Algorithm::AesGcm128,
            session_rules: "all".into(),
        }
    }
}

pub(crate) const BASE: &str = r#"
[dataplane]
buffers = 4096
icmp_errors_per_sec = 1000

[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

# A jumbo MTU towards the tunnel peer, so 1492-byte inner packets fit encapsulated.
[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:02"
mtu = 9000
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[neighbour]]
interface = "null0"
ip = "198.18.1.2"
mac = "02:00:00:00:01:02"
[[neighbour]]
interface = "null0"
ip = "198.18.1.3"
mac = "02:00:00:00:01:03"
[[neighbour]]
interface = "null0"
ip = "198.18.1.4"
mac = "02:00:00:00:01:04"
[[neighbour]]
interface = "null0"
ip = "198.18.1.5"
mac = "02:00:00:00:01:05"
[[neighbour]]
interface = "null0"
ip = "2001:db8:1::2"
mac = "02:00:00:00:01:02"
[[neighbour]]
interface = "null0"
ip = "2001:db8:1::3"
mac = "02:00:00:00:01:03"
[[neighbour]]
interface = "null0"
ip = "2001:db8:1::4"
mac = "02:00:00:00:01:04"
[[neighbour]]
interface = "null0"
ip = "2001:db8:1::5"
mac = "02:00:00:00:01:05"

# The small FIB.
[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"
[[route]]
prefix = "198.19.1.0/24"
via = "198.18.1.3"
[[route]]
prefix = "198.19.128.0/17"
via = "198.18.1.4"
[[route]]
prefix = "198.19.2.0/23"
via = "198.18.1.5"
[[route]]
prefix = "2001:db8:100::/48"
via = "2001:db8:1::2"
[[route]]
prefix = "2001:db8:100:1::/64"
via = "2001:db8:1::3"
[[route]]
prefix = "2001:db8:200::/40"
via = "2001:db8:1::4"
[[route]]
prefix = "2001:db8:101::/48"
via = "2001:db8:1::5"
"#;

/// One node's line in a bench report: every scenario reports its nodes this way.
#[derive(Serialize)]
pub(crate) struct NodeRow {
    name: String,
    calls: u64,
    vectors: u64,
    packets: u64,
    cycles_per_packet: f64,
    /// The median vector's cycles per packet (steal and other pauses move it less).
    vector_median: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    scenario: String,
    packets: u64,
    delivered: u64,
    mpps: f64,
    cycles_per_packet: f64,
    /// The nodes' median vectors' cycles per packet, summed.
    median_cycles_per_packet: f64,
    total_cycles_per_packet: f64,
    tsc_hz: u64,
    cpu: String,
    routes: usize,
    fib_bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    gtpu: Option<GtpuReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lb: Option<LbReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    upf: Option<crate::bench_upf::UpfReport>,
    /// The ESP scenarios with AES-GCM: the implementation that sealed or opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    aes_gcm: Option<&'static str>,
    nodes: Vec<NodeRow>,
}

#[derive(Serialize)]
struct GtpuReport {
    tunnels: u32,
    inner: String,
    inner_size: usize,
    checksum: gtpu::ChecksumMode,
    techniques: gtpu::Techniques,
    /// Seconds to create the tunnels and publish the tables.
    load_seconds: f64,
    /// Dataplane GTP-U tables, and the whole process's resident memory after loading.
    table_bytes: usize,
    rss_bytes: u64,
}

#[derive(Serialize)]
struct LbReport {
    services: u32,
    backends: u32,
    flows: u32,
    /// Seconds to add the services (Maglev tables, VIP routes) and publish.
    load_seconds: f64,
    /// Bytes of one session-table slot (a connection takes two) and of the services'
    /// Maglev tables and backends, per service.
    session_slot_bytes: usize,
    /// Slots of a worker's session table (`lb.limits.sessions`, whole buckets).
    session_slots: usize,
    bytes_per_service: usize,
    rss_bytes: u64,
}

/// The process's resident set size (VmRSS).
pub(crate) fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()))
        .map_or(0, |kb: u64| kb * 1024)
}

/// A small deterministic PRNG (xorshift64*) so runs are comparable.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Pick from a weighted list.
    fn pick<T: Copy>(&mut self, w: &[(T, u32)]) -> T {
        let total: u32 = w.iter().map(|x| x.1).sum();
        let mut r = (self.next() % total as u64) as u32;
        for &(v, n) in w {
            if r < n {
                return v;
            }
            r -= n;
        }
        w[0].0
    }
}

/// IPv4 prefix lengths roughly as in a full BGP table (/24 dominates).
const V4_MIX: &[(u8, u32)] = &[(8, 1), (12, 2), (14, 3), (16, 12), (18, 15), (19, 25), (20, 40), (21, 50), (22, 110), (23, 100), (24, 600)];
/// IPv6: /48 dominates, then /32, /44, /40, /36, /29.
const V6_MIX: &[(u8, u32)] = &[(29, 30), (32, 150), (36, 50), (40, 90), (44, 110), (46, 30), (47, 20), (48, 480), (56, 25), (64, 15)];

pub(crate) fn random_prefixes(rng: &mut Rng, n: usize, v6: bool) -> Vec<Prefix> {
    let mut set = std::collections::BTreeSet::new();
    while set.len() < n {
        if v6 {
            let len = rng.pick(V6_MIX);
            // Global unicast 2000::/3, as real tables.
            let a = (0x2000u128 << 112) | (((rng.next() as u128) << 64 | rng.next() as u128) >> 3);
            let masked = a & (u128::MAX << (128 - len));
            set.insert(Prefix::V6(Ipv6Addr::from(masked), len));
        } else {
            let len = rng.pick(V4_MIX);
            let a = (rng.next() >> 32) as u32;
            // Keep clear of the interfaces' own /24s: they are connected routes.
            if a >> 16 == 0xc612 {
                continue;
            }
            set.insert(Prefix::V4(Ipv4Addr::from(a & (u32::MAX << (32 - len))), len));
        }
    }
    set.into_iter().collect()
}

fn random_address_in(rng: &mut Rng, p: &Prefix) -> IpAddr {
    match *p {
        Prefix::V4(a, l) => {
            let host = if l == 32 { 0 } else { (rng.next() >> 32) as u32 & (u32::MAX >> l) };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) | host))
        }
        Prefix::V6(a, l) => {
            let r = (rng.next() as u128) << 64 | rng.next() as u128;
            let host = if l == 128 { 0 } else { r & (u128::MAX >> l) };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) | host))
        }
    }
}

pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}

pub fn bench(
    scenario: &str,
    packets: u64,
    json: bool,
    core: usize,
    opts: &GtpuOptions,
    lb_opts: &LbOptions,
    side: &crate::bench_side::SideBySide,
) -> Result<()> {
    if !SCENARIOS.contains(&scenario) {
        let all: Vec<&str> = SCENARIOS
            .iter()
            .chain(crate::bench_ipsec::SCENARIOS)
            .chain(crate::bench_parcel::SCENARIOS)
            .chain(&["fib-update"])
            .copied()
            .collect();
        bail!("unknown scenario {scenario:?}; expected one of {}", all.join(", "));
    }
    let mut base =
        if scenario.starts_with("upf") { format!("{BASE}{}", crate::bench_upf::config_section(opts.tunnels)) } else { BASE.to_string() };
    if opts.tunnel_counters {
        base += "\n[metrics]\ntunnel_counters = true\n";
    }
    if let (true, Some(n)) = (scenario.starts_with("lb"), lb_opts.sessions) {
        base += &format!("\n[lb]\nlimits = {{ sessions = {n} }}\n");
    }
    let cfg = Config::parse(&base, "(bench scenario)", Path::new("."))?;
    let (mut control, mut worker) = assemble(&cfg)?.into_single();
    let mut lb_report = None;
    let mut upf_report = None;
    let (packet, modifiers, gtpu_report) = if scenario.starts_with("upf") {
        let (p, m, r) = crate::bench_upf::setup(scenario, opts, &mut control, json)?;
        upf_report = Some(r);
        (p, m, None)
    } else if scenario.starts_with("lb") {
        let forwarding = if scenario == "lb4-encap" { lb::Forwarding::Gre } else { lb::Forwarding::Nat };
        let (p, m, r) = lb_setup(lb_opts, forwarding, &mut control)?;
        lb_report = Some(r);
        (p, m, None)
    } else if scenario.starts_with("gtpu") {
        let (p, m, r) = gtpu_setup(scenario, opts, &mut control, json)?;
        (p, m, Some(r))
    } else if scenario.starts_with("esp") {
        (
            esp_setup(opts, &mut control, scenario)?,
            vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 256 } }],
            None,
        )
    } else if scenario.starts_with("gue") || scenario.starts_with("gre-udp") {
        let (p, m) = udp_tunnel_setup(scenario, &mut control)?;
        (p, m, None)
    } else {
        let (p, m) = forward_setup(scenario, &mut control, json, side)?;
        (p, m, None)
    };
    let fragments = if scenario.ends_with("-frag") { Some(two_fragments(&packet)?) } else { None };
    let esp_frame = if scenario == "esp4-decrypt" { Some(esp_frame(&packet, opts)?) } else { None };
    engine::worker::Context::refresh(&mut worker.cx); // pick up the new tables

    // Whole vectors, so the warm-up ends exactly where the measured run begins; pairs of
    // them, as the fragment scenario's generator sends a vector of first fragments, then
    // one of the second fragments completing them (a warm-up ending between the two
    // counted the completions of its last firsts in the measured run).
    let warmup = (packets / 10).max(1024).div_ceil(2 * engine::VECTOR_SIZE as u64) * 2 * engine::VECTOR_SIZE as u64;
    let stream = StreamSpec { name: scenario.into(), packet, modifiers, count: Some(warmup + packets), rate_pps: None };
    if let Some(dir) = &side.export {
        let path = dir.join("frames.pcap");
        let n = match (&fragments, &esp_frame) {
            (Some(f), _) => crate::bench_side::export_fixed(f.iter().map(Vec::as_slice), &path)?,
            (None, Some(e)) => crate::bench_side::export_fixed([e.as_slice()], &path)?,
            (None, None) => crate::bench_side::export_frames(&stream, &mut worker.pool, &path)?,
        };
        eprintln!("{scenario}: {n} frames written to {}", path.display());
        return Ok(());
    }
    worker.ports[0].device = match &fragments {
        _ if side.frames.is_some() => Box::new(crate::bench_side::FrameCycle::new(
            crate::bench_side::load_frames(side.frames.as_deref().expect("checked"))?,
            warmup + packets,
        )),
        // Each datagram as two fragments, the second stream's n-th frame completing the
        // first's: the count is of fragments.
        Some(f) => Box::new(PacketGenerator::fixed_frames(f, (warmup + packets) / 2, true)),
        None if esp_frame.is_some() => Box::new(PacketGenerator::fixed_frames(esp_frame.as_slice(), warmup + packets, false)),
        None => Box::new(PacketGenerator::new(&[stream]).map_err(|(_, e)| anyhow!(e))?),
    };
    let (s, secs, cycles) = measure(&mut worker, core, warmup);
    let input = s.nodes.iter().find(|n| n.name == "pg-input").map(|n| n.runtime.packets).unwrap_or(0);
    let graph_cycles: u64 = s.nodes.iter().filter(|n| n.kind != "input").map(|n| n.runtime.cycles).sum();
    let median_cycles: f64 = s.nodes.iter().filter(|n| n.kind != "input").filter_map(|n| n.vector_median).sum();
    let delivered = s.ports.iter().find(|p| p.name == "null0").map(|p| p.counters.tx_packets).unwrap_or(0);
    let tables = control.shared.load();
    let fib_bytes = tables.fib4.memory_bytes() + tables.fib6.memory_bytes();
    let report = Report {
        scenario: scenario.into(),
        packets: input,
        delivered,
        mpps: input as f64 / secs / 1e6,
        cycles_per_packet: graph_cycles as f64 / input.max(1) as f64,
        median_cycles_per_packet: median_cycles,
        total_cycles_per_packet: cycles as f64 / input.max(1) as f64,
        tsc_hz: s.tsc_hz,
        cpu: cpu_model(),
        routes: control.state.route_count(),
        fib_bytes,
        gtpu: gtpu_report,
        lb: lb_report,
        upf: upf_report,
        aes_gcm: (scenario.starts_with("esp") && matches!(opts.alg, ipsec::Algorithm::AesGcm128 | ipsec::Algorithm::AesGcm256))
            .then(ipsec::crypto::aes_gcm_backend),
        nodes: node_rows(&s),
    };
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", control::format::runtime(&s));
        println!(
            "{}: {} packets, {} delivered, {:.2} Mpps, {:.1} cycles/packet in the graph, {:.1} total ({}; TSC {:.2} GHz; {} routes, FIB {:.1} MB)",
            report.scenario,
            report.packets,
            report.delivered,
            report.mpps,
            report.cycles_per_packet,
            report.total_cycles_per_packet,
            report.cpu,
            report.tsc_hz as f64 / 1e9,
            report.routes,
            report.fib_bytes as f64 / 1e6
        );
    }
    // Two fragments make one delivered packet.
    let expected = if fragments.is_some() { input / 2 } else { input };
    if delivered != expected {
        bail!("{delivered} of {input} packets reached the sink, not {expected}: the scenario is broken");
    }
    Ok(())
}

/// The forwarding scenarios: 64-byte UDP over 256 flows, optionally into a million
/// BGP-like routes.
fn forward_setup(
    scenario: &str,
    control: &mut control::dataplane::Control,
    json: bool,
    side: &crate::bench_side::SideBySide,
) -> Result<(PacketSpec, Vec<ModifierSpec>)> {
    let v6 = scenario.starts_with("ip6");
    let big = scenario.ends_with("-1m");
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let (src, dst): (IpAddr, IpAddr) =
        if v6 { ("2001:db8::2".parse()?, "2001:db8:100::1".parse()?) } else { ("198.18.0.2".parse()?, "198.19.0.1".parse()?) };
    let mut modifiers = vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 256 } }];
    if big {
        let t0 = Instant::now();
        let prefixes = random_prefixes(&mut rng, 1_000_000, v6);
        let hops: Vec<IpAddr> = (2..=5)
            .map(|i| if v6 { format!("2001:db8:1::{i}").parse().unwrap() } else { format!("198.18.1.{i}").parse().unwrap() })
            .collect();
        let mut routes: Vec<(Prefix, RouteTarget)> =
            prefixes.iter().enumerate().map(|(i, p)| (*p, RouteTarget::Via { next_hop: hops[i % hops.len()], interface: None })).collect();
        if let Some(dir) = &side.export {
            crate::bench_side::export_routes(&routes, &dir.join("routes.txt"))?;
        }
        if let Some(f) = &side.routes {
            routes = crate::bench_side::load_routes(f)?;
        }
        control.state.add_routes(routes).map_err(|(i, e)| anyhow!("route {i}: {e}"))?;
        control.publish();
        let dsts: Vec<IpAddr> = (0..65_536)
            .map(|_| {
                let p = prefixes[(rng.next() % prefixes.len() as u64) as usize];
                random_address_in(&mut rng, &p)
            })
            .collect();
        modifiers.push(ModifierSpec { field: Field::DstAddr, pattern: Pattern::Addresses(dsts) });
        if !json {
            eprintln!("loaded {} routes in {:.2} s", control.state.route_count(), t0.elapsed().as_secs_f64());
        }
    }
    let packet = PacketSpec {
        src_mac: "02:fe:00:00:00:01".parse()?,
        dst_mac: "02:00:00:00:00:01".parse()?,
        src,
        dst,
        ttl: 64,
        l4: L4Spec::Udp { src_port: 1024, dst_port: 9 },
        frame_size: 64,
    };
    Ok((packet, modifiers))
}

/// The UDP tunnel scenarios, on the packets of `ip4-forward` (64-byte frames, 256 flows):
/// one tunnel from null0's address to 198.18.1.2 (GUE on port 6080, or GRE-in-UDP on
/// 4754). Encap: a route sends the forwarded packets into the tunnel. Decap: the same
/// 50-byte inner packets arrive inside GUE from the peer (96-byte frames) and are routed
/// out of null0 as `ip4-forward` routes them.
fn udp_tunnel_setup(scenario: &str, control: &mut control::dataplane::Control) -> Result<(PacketSpec, Vec<ModifierSpec>)> {
    use udptun::{Encap, UdpTunnelSpec};
    let encap = if scenario.starts_with("gre-udp") { Encap::Gre } else { Encap::Gue };
    let (local, remote): (IpAddr, IpAddr) = ("198.18.1.1".parse()?, "198.18.1.2".parse()?);
    let spec = UdpTunnelSpec::new(local, remote, encap, encap.default_port().expect("gue and gre have ports"));
    let decap = scenario.ends_with("decap");
    let routes: Vec<Prefix> = if decap { Vec::new() } else { vec!["198.19.0.0/24".parse()?] };
    control.udptun.create(&mut control.state, spec, &routes).map_err(|e| anyhow!("tunnel: {e}"))?;
    control.publish_routes();
    let modifiers = vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 256 } }];
    let (src, dst): (IpAddr, IpAddr) = ("198.18.0.2".parse()?, "198.19.0.1".parse()?);
    let mac = ("02:fe:00:00:00:01".parse()?, "02:00:00:00:00:01".parse()?);
    let packet = if decap {
        PacketSpec {
            src_mac: mac.0,
            dst_mac: mac.1,
            src: remote,
            dst: local,
            ttl: 64,
            l4: L4Spec::UdpTunnel { dst_port: 6080, header: vec![0, 4, 0, 0], inner_src: src, inner_dst: dst },
            frame_size: 14 + 20 + 8 + 4 + 50,
        }
    } else {
        PacketSpec { src_mac: mac.0, dst_mac: mac.1, src, dst, ttl: 64, l4: L4Spec::Udp { src_port: 1024, dst_port: 9 }, frame_size: 64 }
    };
    Ok((packet, modifiers))
}

/// The load-balancer scenario: N UDP ClusterIP services (198.18.128.0 + i, port 53)
/// of M backends each (in 198.19.0.0/16, routed out of null0), source-translated to
/// null0's address. 64-byte UDP from pg0, source ports cycled over F, destinations
/// cycled over the N service addresses. `lb4-encap`: the same services in GRE from
/// null0's address (VPP's `lb4-gre4`), backends on the service's port.
fn lb_setup(
    o: &LbOptions,
    forwarding: lb::Forwarding,
    control: &mut control::dataplane::Control,
) -> Result<(PacketSpec, Vec<ModifierSpec>, LbReport)> {
    if o.services == 0 || o.services > 30_000 || o.backends == 0 || o.flows == 0 || o.flows > 65_535 {
        bail!("--services 1 to 30000, --backends and --flows (1 to 65535) at least 1");
    }
    let t0 = Instant::now();
    control.lb.state.set_snat(Some("198.18.1.1".parse()?))?;
    let vip0 = u32::from(Ipv4Addr::new(198, 18, 128, 0));
    for i in 0..o.services {
        let backends = (0..o.backends)
            .map(|b| {
                let a = u32::from(Ipv4Addr::new(198, 19, 0, 0)) + (i * o.backends + b) % 65_000 + 1;
                let port = if forwarding.is_encap() { 53 } else { 8053 + (((i * o.backends + b) / 65_000) as u16) };
                lb::BackendSpec::new(IpAddr::V4(Ipv4Addr::from(a)), port)
            })
            .collect();
        let spec = lb::ServiceSpec {
            name: format!("bench/svc{i}"),
            kind: lb::ServiceType::ClusterIp,
            vip: IpAddr::V4(Ipv4Addr::from(vip0 + i)),
            port: 53,
            protocol: lb::Protocol::Udp,
            backends,
            traffic_policy: lb::TrafficPolicy::Cluster,
            affinity: lb::Affinity::None,
            table_size: 0,
            forwarding,
            gue_port: 0,
            source_ranges: Vec::new(),
        };
        control::lb::add_service(&mut control.lb.state, &mut control.state, spec).map_err(|e| anyhow!(e))?;
    }
    // The router's flags follow the services; the routes publish them.
    let _ = control.lb.publish(&mut control.state);
    control.publish_routes();
    let load_seconds = t0.elapsed().as_secs_f64();
    let t = control.lb.state.tables();
    let per_service: usize = t
        .v4
        .services
        .iter()
        .flatten()
        .map(|s| std::mem::size_of_val(&**s) + s.maglev.len() * 4 + s.backends.len() * std::mem::size_of::<lb::tables::Backend<lb::V4>>())
        .sum::<usize>()
        / o.services as usize;
    let report = LbReport {
        services: o.services,
        backends: o.backends,
        flows: o.flows,
        load_seconds,
        session_slot_bytes: lb::table::Table::<lb::session::Key<lb::V4>, lb::session::Session<[u8; 4]>>::slot_bytes(),
        session_slots: lb::table::slots_for(control.lb.limits.sessions),
        bytes_per_service: per_service,
        rss_bytes: rss_bytes(),
    };
    let mut modifiers = vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: o.flows } }];
    if o.services > 1 {
        modifiers.push(ModifierSpec { field: Field::DstAddr, pattern: Pattern::Increment { count: o.services } });
    }
    let mac = ("02:fe:00:00:00:01".parse()?, "02:00:00:00:00:01".parse()?);
    let packet = PacketSpec {
        src_mac: mac.0,
        dst_mac: mac.1,
        src: "198.18.0.2".parse()?,
        dst: IpAddr::V4(Ipv4Addr::from(vip0)),
        ttl: 64,
        l4: L4Spec::Udp { src_port: 1024, dst_port: 53 },
        frame_size: 64,
    };
    Ok((packet, modifiers, report))
}

/// The keys of the ESP scenarios' SA (both directions): fixed bytes of `alg`'s lengths.
fn esp_sa(alg: ipsec::Algorithm, direction: ipsec::Direction) -> control::ipsec::IpsecSaConfig {
    control::ipsec::IpsecSaConfig {
        index: if direction == ipsec::Direction::Outbound { 0 } else { 1 },
        spi: 0x1000,
        direction,
        mode: ipsec::Mode::Tunnel,
        algorithm: alg,
        enc_key: "a5".repeat(alg.enc_key_lens()[0]),
        integ_key: "5a".repeat(alg.integ_key_len()),
        local: "198.18.1.1".into(),
        remote: "198.18.1.2".into(),
        udp_encap: false,
        udp_src_port: None,
        udp_dst_port: None,
        esn: false,
        // esp4-decrypt resends one sealed packet.
        anti_replay: false,
        lifetime: Default::default(),
        routes: if direction == ipsec::Direction::Outbound { vec!["198.19.0.0/24".into()] } else { Vec::new() },
        urpf: Default::default(),
        mtu: None,
        fragment: Default::default(),
        tcp_mss_clamp: false,
        dscp: Default::default(),
    }
}

/// `esp4-encrypt`: outbound SA 0 (`--alg`, fixed keys) from null0's address to
/// 198.18.1.2; a route sends `--inner-size`-byte IPv4 packets (256 flows) into
/// `ipsec_tunnel0`, as VPP's route-based (ipip-protected) ESP tunnel does.
/// `esp4-decrypt`: inbound SA 1 with the same keys, without anti-replay, receiving one
/// packet sealed for it over and over (`esp_frame`); the inner packet is routed to null0.
fn esp_setup(opts: &GtpuOptions, control: &mut control::dataplane::Control, scenario: &str) -> Result<PacketSpec> {
    let dir = if scenario == "esp4-decrypt" { ipsec::Direction::Inbound } else { ipsec::Direction::Outbound };
    let sa = esp_sa(opts.alg, dir);
    control::ipsec::add(&mut control.ipsec, &mut control.state, &sa, |_, _| Ok(())).map_err(|e| anyhow!("SA: {e}"))?;
    control.publish_routes();
    if !(28..=1500).contains(&opts.inner_size) {
        bail!("--inner-size {}: expected 28 to 1500 bytes", opts.inner_size);
    }
    Ok(PacketSpec {
        src_mac: "02:fe:00:00:00:01".parse()?,
        dst_mac: "02:00:00:00:00:01".parse()?,
        src: "198.18.0.2".parse()?,
        dst: "198.19.0.1".parse()?,
        ttl: 64,
        l4: L4Spec::Udp { src_port: 1024, dst_port: 9 },
        frame_size: 14 + opts.inner_size,
    })
}

/// One ESP frame from 198.18.1.2 to null0's address carrying the frame of `spec`'s IP
/// packet, sealed with the ESP scenarios' keys by the encrypt step itself.
fn esp_frame(spec: &PacketSpec, opts: &GtpuOptions) -> Result<Vec<u8>> {
    let frame = io::pg::template(spec).map_err(|e| anyhow!(e))?;
    let (l2, inner) = frame.split_at(14);
    let sealed = esp_sa(opts.alg, ipsec::Direction::Inbound).peer_packet(inner).map_err(|(f, m)| anyhow!("{f}: {m}"))?;
    Ok([l2, &sealed].concat())
}

/// The frame of `spec` cut into two IPv4 fragments of about equal size by the
/// dataplane's own fragmenter, each with its Ethernet header.
fn two_fragments(spec: &PacketSpec) -> Result<Vec<Vec<u8>>> {
    let frame = io::pg::template(spec).map_err(|e| anyhow!(e))?;
    let (l2, ip) = frame.split_at(14);
    let mut pool = engine::Pool::new(4, 1);
    let bi = pool.alloc(ip.len()).ok_or_else(|| anyhow!("no buffer"))?;
    pool.get_mut(bi).write(ip)?;
    let half = (ip.len() - 20).div_ceil(2).div_ceil(8) * 8;
    let mut out = Vec::new();
    ip::nodes::ip_fragment::fragment4(&mut pool, bi, 20 + half, None, &mut out).map_err(|e| anyhow!("{e:?}"))?;
    if out.len() != 2 {
        bail!("{} fragments: expected 2", out.len());
    }
    Ok(out.iter().map(|(b, _)| [l2, pool.get(*b).bytes()].concat()).collect())
}

/// The GTP-U scenarios. Tunnels run from our null0 address to 198.18.1.2 /
/// 2001:db8:1::2 (a resolved neighbour), TEIDs 1..=N. Encap: UDP from pg0 to the UE
/// addresses (one per tunnel, chosen at random per packet when N > 1). Decap: G-PDUs
/// from the peer with random TEIDs in 1..=N, inner packets routed out of null0.
fn gtpu_setup(
    scenario: &str,
    o: &GtpuOptions,
    control: &mut control::dataplane::Control,
    json: bool,
) -> Result<(PacketSpec, Vec<ModifierSpec>, GtpuReport)> {
    use gtpu::{ChecksumMode, DecapNext, TunnelSpec};
    let outer6 = scenario.starts_with("gtpu6");
    let encap = scenario.ends_with("encap");
    let inner6 = match o.inner.as_str() {
        "ip4" => false,
        "ip6" => true,
        x => bail!("--inner {x:?}: expected ip4 or ip6"),
    };
    let n = o.tunnels.max(1);
    if encap && !inner6 && n > 32_768 {
        bail!("{n} tunnels with IPv4 UE addresses do not fit in 198.18.128.0/17; use --inner ip6");
    }
    let min = if inner6 { 48 } else { 28 };
    if o.inner_size < min || o.inner_size > 8000 {
        bail!("--inner-size {}: expected {min} to 8000 bytes", o.inner_size);
    }
    let checksum = o.checksum.unwrap_or(if outer6 { ChecksumMode::Software } else { ChecksumMode::Zero });
    let mut techniques = gtpu::Techniques::default();
    for d in &o.disable {
        if d == "all" {
            techniques = gtpu::Techniques::all(false);
        } else if !techniques.set(d, false) {
            bail!("--disable {d:?}: expected all or one of {}", gtpu::Techniques::NAMES.join(", "));
        }
    }
    control.gtpu.set_techniques(techniques);
    let (local, remote): (IpAddr, IpAddr) =
        if outer6 { ("2001:db8:1::1".parse()?, "2001:db8:1::2".parse()?) } else { ("198.18.1.1".parse()?, "198.18.1.2".parse()?) };
    let ue_base: IpAddr = if inner6 { "2001:db8:1000::".parse()? } else { "198.18.128.0".parse()? };
    let ue = |i: u32| -> IpAddr {
        match ue_base {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + i)),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) + i as u128)),
        }
    };
    let t0 = Instant::now();
    let specs: Vec<TunnelSpec> = (0..n)
        .map(|i| {
            let mut s = TunnelSpec::new(local, remote, i + 1, 0x8000_0000 | (i + 1));
            s.checksum = checksum;
            s.accept_zero_checksum = outer6 && checksum == ChecksumMode::Zero;
            s.decap_next = if inner6 { DecapNext::Ip6 } else { DecapNext::Ip4 };
            if encap {
                s.ue = Some(Prefix::host(ue(i)));
            }
            s
        })
        .collect();
    control.gtpu.create_many(&mut control.state, specs).map_err(|(i, e)| anyhow!("tunnel {i}: {e}"))?;
    control.publish();
    let load_seconds = t0.elapsed().as_secs_f64();
    if !json {
        eprintln!("created {n} tunnels in {load_seconds:.2} s; resident {:.1} MB", rss_bytes() as f64 / 1e6);
    }
    let outer_l3 = if outer6 { 40 } else { 20 };
    let (isrc, idst): (IpAddr, IpAddr) =
        if inner6 { ("2001:db8::2".parse()?, "2001:db8:100::1".parse()?) } else { ("198.18.0.2".parse()?, "198.19.0.1".parse()?) };
    let mut modifiers = Vec::new();
    let packet = if encap {
        if n > 1 {
            modifiers.push(ModifierSpec { field: Field::DstAddr, pattern: Pattern::Random { count: n } });
        }
        modifiers.push(ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 256 } });
        PacketSpec {
            src_mac: "02:fe:00:00:00:01".parse()?,
            dst_mac: "02:00:00:00:00:01".parse()?,
            src: isrc,
            dst: ue(0),
            ttl: 64,
            l4: L4Spec::Udp { src_port: 1024, dst_port: 9 },
            frame_size: 14 + o.inner_size,
        }
    } else {
        if n > 1 {
            modifiers.push(ModifierSpec { field: Field::Teid, pattern: Pattern::Random { count: n } });
        }
        PacketSpec {
            src_mac: "02:fe:00:00:00:01".parse()?,
            dst_mac: "02:00:00:00:00:01".parse()?,
            src: remote,
            dst: local,
            ttl: 64,
            l4: L4Spec::Gtpu { teid: 1, inner_src: ue(0), inner_dst: idst, checksum: checksum != ChecksumMode::Zero },
            frame_size: 14 + outer_l3 + 16 + o.inner_size,
        }
    };
    let report = GtpuReport {
        tunnels: n,
        inner: o.inner.clone(),
        inner_size: o.inner_size,
        checksum,
        techniques,
        load_seconds,
        table_bytes: control.gtpu.memory_bytes(),
        rss_bytes: rss_bytes(),
    };
    Ok((packet, modifiers, report))
}

/// The nodes that saw packets in a run, as bench reports list them.
pub(crate) fn node_rows(s: &engine::stats::Snapshot) -> Vec<NodeRow> {
    s.nodes
        .iter()
        .filter(|n| n.runtime.packets > 0)
        .map(|n| NodeRow {
            name: n.name.clone(),
            calls: n.runtime.calls,
            vectors: n.runtime.vectors,
            packets: n.runtime.packets,
            cycles_per_packet: n.cycles_per_packet,
            vector_median: n.vector_median,
        })
        .collect()
}

/// The measuring run every scenario shares: on `core`, `warmup` packets first (runtime
/// then cleared, vectors sampled), then until the inputs are done. Returns the snapshot,
/// the wall-clock seconds and the TSC cycles of the measured part.
pub(crate) fn measure(
    worker: &mut engine::worker::Worker<control::dataplane::WorkerContext>,
    core: usize,
    warmup: u64,
) -> (engine::stats::Snapshot, f64, u64) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
    let mut generated = 0u64;
    while generated < warmup {
        generated += worker.poll_once() as u64;
    }
    worker.clear_runtime();
    worker.sample_vectors(true);
    let t0 = Instant::now();
    let c0 = clock::now();
    while !worker.inputs_done() {
        worker.poll_once();
    }
    let cycles = clock::now() - c0;
    (worker.snapshot(), t0.elapsed().as_secs_f64(), cycles)
}
