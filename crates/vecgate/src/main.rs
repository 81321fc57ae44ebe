//! `vecgate`: run the dataplane, talk to a running one, run pcaps offline, benchmark.
#![forbid(unsafe_code)]

mod bench;
mod bench_fib;
mod bench_ipsec;
mod bench_parcel;
mod bench_side;
mod bench_upf;
mod live;
mod logging;
mod run;
mod trafgen;

use clap::{CommandFactory, Parser, Subcommand};
use std::net::IpAddr;
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "vecgate", version, about = "A vector packet processing dataplane for UDP tunnel gateways")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the gateway (the built-in default gateway without --config), printing live stats.
    Run {
        /// The gateway's TOML file (docs/CONFIGURATION.md); `vecgate ctl reload` and SIGHUP
        /// read it again.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
        #[arg(long)]
        duration: Option<f64>,
        /// Seconds between live stats screens (0: none).
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Control socket path (overrides the config's).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Serve Prometheus metrics on ADDRESS:PORT (overrides the config's `[metrics] listen`).
        #[arg(long, value_name = "ADDRESS:PORT")]
        metrics: Option<String>,
        /// Count packets and bytes per tunnel, as the config's `[metrics] tunnel_counters
        /// = true` (off by default: it costs about 2 % of a tunnel path; a reload
        /// applies the file's setting).
        #[arg(long)]
        tunnel_counters: bool,
        /// Live stats as one JSON object per line (rates over each interval) instead of screens.
        #[arg(long)]
        json: bool,
    },
    /// Send a command to a running instance, e.g. `vecgate ctl show runtime`.
    #[command(after_help = CTL_EXIT_CODES)]
    Ctl {
        /// The running gateway's control socket (`[dataplane] socket`, or its `run --socket`).
        #[arg(long, default_value = "/run/vecgate.sock")]
        socket: PathBuf,
        /// Print the reply's JSON instead of its text.
        #[arg(long)]
        json: bool,
        /// The command words (`vecgate ctl help` lists them).
        #[arg(trailing_var_arg = true, required = true)]
        words: Vec<String>,
    },
    /// Check a configuration file as start-up and `ctl reload` do, without opening any
    /// interface: exit 0 and print `<file>: ok`, or exit 1 with every error found
    /// (file, line, field and what was expected). Before a restart or a reload.
    Check {
        /// The gateway's TOML file.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Run a config's pcap inputs through the graph to completion, write pcap outputs, exit.
    Pcap {
        /// The gateway's TOML file, with `pcap` interfaces (`input`, `output`).
        #[arg(short, long)]
        config: PathBuf,
        /// Print the final runtime and counters as JSON.
        #[arg(long)]
        json: bool,
        /// Write every dropped packet to this pcapng file, each with why it was dropped
        /// (the record's comment: `<node>: <counter>, received on <interface>`).
        #[arg(long, value_name = "FILE")]
        drops: Option<PathBuf>,
    },
    /// Benchmark a scenario: generator → graph → null sink on one core.
    Bench {
        /// ip4-forward, ip6-forward, ip4-forward-1m, ip6-forward-1m, gtpu4-encap,
        /// gtpu4-decap, gtpu6-encap, gtpu6-decap, gtpu4-decap-frag (outer packets in two
        /// fragments, reassembled), gue4-encap, gue4-decap, gre-udp4-encap, lb4-nat,
        /// lb4-encap (the services in GRE, as VPP's lb4-gre4), esp4-encrypt, esp4-decrypt,
        /// ipsec4-encrypt (the SPD and ESP), upf4-uplink, upf4-downlink, parcel-forward,
        /// parcel-split, parcel-join, fib-update (route adds and deletes into a table of
        /// BGP-like routes)
        scenario: String,
        /// Packets to send through the graph in the measured run.
        #[arg(long, default_value_t = 20_000_000)]
        packets: u64,
        /// Print the results as JSON (mean and median vector per node).
        #[arg(long)]
        json: bool,
        /// CPU core to pin to.
        #[arg(long, default_value_t = 1)]
        core: usize,
        /// GTP-U and ESP scenarios: inner IP packet size in bytes.
        #[arg(long, default_value_t = 64)]
        inner_size: usize,
        /// GTP-U scenarios: outer UDP checksum, zero or software (default: zero over
        /// IPv4, software over IPv6, as VPP does).
        #[arg(long)]
        checksum: Option<gtpu::ChecksumMode>,
        /// GTP-U scenarios: number of tunnels (random tunnel per packet when > 1).
        #[arg(long, default_value_t = 1)]
        tunnels: u32,
        /// GTP-U scenarios: inner family, ip4 or ip6.
        #[arg(long, default_value = "ip4")]
        inner: String,
        /// esp4-encrypt, esp4-decrypt, ipsec4-encrypt: the SA's algorithm (null,
        /// null-sha256, aes-gcm-128, aes-gcm-256, chacha20-poly1305, aes-cbc-sha256).
        #[arg(long, default_value = "aes-gcm-128")]
        alg: ipsec::Algorithm,
        /// GTP-U scenarios: turn a fast-path technique off (repeatable; `all`).
        #[arg(long)]
        disable: Vec<String>,
        /// Tunnel scenarios: count packets and bytes per tunnel, as `[metrics]
        /// tunnel_counters = true` does (off by default, as in a gateway).
        #[arg(long)]
        tunnel_counters: bool,
        /// upf scenarios: each session's rules: all (2 PDRs, 2 FARs, a QER, a URR),
        /// no-qer, no-urr or pdr-far (the split of the UPF's per-packet cost).
        #[arg(long, default_value = "all")]
        session_rules: String,
        /// parcel-forward, parcel-split, parcel-join: bytes per segment.
        #[arg(long, default_value_t = 1280)]
        segment_size: usize,
        /// parcel-forward, parcel-split, parcel-join: segments per parcel (join: at most).
        #[arg(long, default_value_t = 16)]
        segments: usize,
        /// parcel scenarios: frames the replay device hands the graph a vector (default:
        /// parcel-forward a full vector, 256 parcels, as a loaded receiver gives them;
        /// parcel-split 256 / segments parcels, so that a split makes one vector of
        /// datagrams; parcel-join 256 datagrams, or 256 / segments GSO frames).
        #[arg(long)]
        per_vector: Option<usize>,
        /// parcel scenarios: `verify_parcel_segments = false` (segments never read).
        #[arg(long)]
        no_segment_check: bool,
        /// parcel scenarios: `verify_parcel_segments_in_transit = true` (every segment
        /// read at every hop, forwarded whole too).
        #[arg(long)]
        segment_check_in_transit: bool,
        /// Load-balancer scenarios: services.
        #[arg(long, default_value_t = 1)]
        services: u32,
        /// Load-balancer scenarios: backends per service.
        #[arg(long, default_value_t = 10)]
        backends: u32,
        /// Load-balancer and ipsec4-encrypt scenarios: client flows.
        #[arg(long, default_value_t = 1024)]
        flows: u32,
        /// Load-balancer scenarios: session table slots per worker (`lb.limits.sessions`;
        /// the default's when absent), to see what the table's spread costs.
        #[arg(long)]
        lb_sessions: Option<usize>,
        /// Write the scenario's frames (frames.pcap; esp4-decrypt: the ESP packet it
        /// sends) and large route table (routes.txt) into this directory and exit (for
        /// scripts/bench-vs-vpp.sh, bench-esp-decrypt-vs-vpp.sh).
        #[arg(long)]
        export: Option<std::path::PathBuf>,
        /// Replay these frames (pcap, in order, cycled) instead of the generator.
        #[arg(long)]
        frames: Option<std::path::PathBuf>,
        /// ip4-forward-1m, ip6-forward-1m: load this route file instead of drawing routes.
        #[arg(long)]
        route_file: Option<std::path::PathBuf>,
        /// fib-update: routes in the table.
        #[arg(long, default_value_t = 1_000_000)]
        routes: usize,
        /// fib-update, parcel scenarios: ip4 or ip6.
        #[arg(long, default_value = "ip4")]
        family: String,
        /// parcel-join: the datagrams come as UDP GSO frames of `--segments` segments (a
        /// local sender's, through a virtio-net header).
        #[arg(long)]
        gso: bool,
        /// fib-update: adds and deletes applied as fast as they go.
        #[arg(long, default_value_t = 200_000)]
        updates: u64,
        /// ipsec4-encrypt: outbound policies in the SPD.
        #[arg(long, default_value_t = 1)]
        policies: u32,
        /// ipsec4-encrypt: the matching policy's place in priority order (from 1).
        #[arg(long, default_value_t = 1)]
        position: u32,
        /// ipsec4-encrypt: no flow cache (every packet classified).
        #[arg(long)]
        no_flow_cache: bool,
        /// ipsec4-encrypt: policy changes per second (DISCARD policies added and deleted,
        /// each published) while the measured run goes.
        #[arg(long, default_value_t = 0)]
        churn: u32,
    },
    /// Send UDP packets out of one interface at a fixed size and rate, receive them on
    /// another, report throughput, loss and latency (timestamps carried in the packets).
    Trafgen {
        /// Interface to send from (af_packet).
        #[arg(long)]
        tx_if: String,
        /// Interface to receive on (default: the sending one).
        #[arg(long)]
        rx_if: Option<String>,
        /// Frame size in bytes, Ethernet header included, FCS excluded.
        #[arg(long, default_value_t = 1492)]
        size: usize,
        /// Packets per second (0: as fast as possible).
        #[arg(long, default_value_t = 100)]
        rate: u64,
        /// Seconds to send for.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Source IP address of the packets sent.
        #[arg(long)]
        src: IpAddr,
        /// Destination IP address (routed by the device under test back to --rx-if).
        #[arg(long)]
        dst: IpAddr,
        /// Source MAC (default: the sending interface's).
        #[arg(long)]
        src_mac: Option<wire::EthernetAddress>,
        /// Destination MAC: the device under test's.
        #[arg(long)]
        dst_mac: wire::EthernetAddress,
        /// UDP source port.
        #[arg(long, default_value_t = 40000)]
        src_port: u16,
        /// UDP destination port.
        #[arg(long, default_value_t = 40001)]
        dst_port: u16,
        /// Receive ring: v2 (a frame is seen at once; default) or v3 (blocks).
        #[arg(long, default_value = "v2")]
        rx_ring: String,
        /// Use AF_XDP sockets (an XDP program on both interfaces, removed on exit) instead
        /// of packet sockets; frames from a local sender must carry full checksums.
        #[arg(long)]
        af_xdp: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Program a running gateway's load balancer from Kubernetes: watch Services and
    /// EndpointSlices, apply the smallest change per event through the control socket.
    K8s {
        /// The gateway's control socket, to program its load balancer through.
        #[arg(long, default_value = "/run/vecgate.sock")]
        socket: PathBuf,
        /// Kubeconfig file (default: the in-cluster service account, or KUBECONFIG).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// This node's name: its endpoints are the local ones (externalTrafficPolicy and
        /// internalTrafficPolicy Local).
        #[arg(long)]
        node_name: Option<String>,
        /// Maglev table size of every service (a prime; 0: 100 slots per backend).
        #[arg(long, default_value_t = 0)]
        table_size: u32,
        /// The proxy health server's address (`/healthz`, `/livez`: 503 once the gateway
        /// went unprogrammed for --healthz-timeout), as kube-proxy's flag; "" for none.
        #[arg(long, default_value = "[::]:10256")]
        healthz_bind_address: k8s::health::ProxyAddress,
        /// Seconds the gateway may go unprogrammed (unreachable) before /healthz and the
        /// health check ports say 503.
        #[arg(long, default_value_t = 60)]
        healthz_timeout: u64,
        /// The address the Services' health check ports (spec.healthCheckNodePort of
        /// LoadBalancer Services with externalTrafficPolicy Local) listen on ("::": all).
        #[arg(long, default_value = "::")]
        health_check_bind_address: std::net::IpAddr,
        /// Punt the health ports: each port the health checks are answered on (the proxy
        /// health server's, each healthCheckNodePort listener) is added to the gateway's
        /// [punt] ports (owner k8s) while it listens, and a previous run's are removed after
        /// the initial sync. Needs a [punt] section on the gateway.
        #[arg(long)]
        punt_health_ports: bool,
        /// Serve only the Services and EndpointSlices labelled
        /// service.kubernetes.io/service-proxy-name=NAME (default: those without that
        /// label, as kube-proxy; either way not those labelled service.kubernetes.io/headless).
        #[arg(long, value_name = "NAME")]
        service_proxy_name: Option<k8s::objects::ProxyName>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell), generated
    /// from this command line's definition: `vecgate completions bash > /etc/bash_completion.d/vecgate`.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff), generated from this command line's definition:
    /// `vecgate man > vecgate.1 && man -l vecgate.1`.
    Man,
}

/// `vecgate ctl`'s exit status, for scripts (README.md, "CLI"; tests/test_ctl_safety.py).
const CTL_EXIT_CODES: &str = "\
Exit status:
  0  the gateway did what was asked (or `help`); the reply on stdout
  1  nothing was asked of the gateway: the command line or its command words are wrong,
     or no gateway answered on the socket (none running, a stale socket, permission
     denied, the connection closed without a reply); the reason on stderr
  2  the gateway answered and refused the request: the reason on stderr (with --json,
     the reply, \"ok\": false and its \"error\", on stdout)";

/// The build targets x86-64-v3 (`.cargo/config.toml`): on a CPU without one of its
/// features the first such instruction would kill the process with SIGILL. Say which
/// feature is missing instead, before code that may use it runs (checked under qemu-user
/// with an older CPU model by tests/test_cli_docs.py). CPUID is read directly: with
/// these features enabled at build time, `is_x86_feature_detected!` answers "yes"
/// without asking the CPU.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn require_cpu_features() {
    use std::arch::x86_64::__cpuid_count;
    let l1 = __cpuid_count(1, 0).ecx;
    let l7 = __cpuid_count(7, 0).ebx;
    let ext = __cpuid_count(0x8000_0001, 0).ecx;
    // (name, leaf, bit) per Intel SDM vol. 2A, CPUID; only what this build was compiled
    // to use (a build for an older CPU asks for less).
    const NEEDED: [(&str, u8, u32, bool); 10] = [
        ("sse4.2", 1, 20, cfg!(target_feature = "sse4.2")),
        ("popcnt", 1, 23, cfg!(target_feature = "popcnt")),
        ("avx", 1, 28, cfg!(target_feature = "avx")),
        ("fma", 1, 12, cfg!(target_feature = "fma")),
        ("movbe", 1, 22, cfg!(target_feature = "movbe")),
        ("f16c", 1, 29, cfg!(target_feature = "f16c")),
        ("bmi1", 7, 3, cfg!(target_feature = "bmi1")),
        ("avx2", 7, 5, cfg!(target_feature = "avx2")),
        ("bmi2", 7, 8, cfg!(target_feature = "bmi2")),
        ("lzcnt", 0x81, 5, cfg!(target_feature = "lzcnt")),
    ];
    for (name, leaf, bit, needed) in NEEDED {
        if !needed {
            continue;
        }
        let reg = match leaf {
            1 => l1,
            7 => l7,
            _ => ext,
        };
        if reg & (1 << bit) == 0 {
            eprintln!(
                "vecgate: this CPU lacks {name}: this build needs an x86-64-v3 CPU (Intel Haswell, AMD Zen or later); \
                 build one for this CPU with RUSTFLAGS=\"-C target-cpu=native\" cargo build --release"
            );
            std::process::exit(1);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn require_cpu_features() {}

fn main() {
    require_cpu_features();
    io::linux::default_sigpipe();
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // clap exits 2 on a command line it refuses; for `ctl`, 2 says the gateway refused
        // the request, and a command line that asked the gateway nothing exits 1, as bad
        // command words do (CTL_EXIT_CODES).
        if e.use_stderr() && std::env::args_os().nth(1).is_some_and(|a| a == "ctl") {
            let _ = e.print();
            std::process::exit(1);
        }
        e.exit()
    });
    if matches!(cli.cmd, Some(Cmd::K8s { .. })) {
        let _ = logging::init(None, "info", "");
    } else if !matches!(cli.cmd, None | Some(Cmd::Run { .. })) {
        let _ = logging::init(None, "warn", "");
    }
    let r = match cli.cmd.unwrap_or(Cmd::Run {
        config: None,
        duration: None,
        interval: 1.0,
        socket: None,
        metrics: None,
        tunnel_counters: false,
        json: false,
    }) {
        Cmd::Run { config, duration, interval, socket, metrics, tunnel_counters, json } => {
            run::run(config.as_deref(), duration, interval, socket, metrics, tunnel_counters, json)
        }
        Cmd::Ctl { socket, json, words } => run::ctl(&socket, json, &words),
        Cmd::Check { config } => run::check(&config),
        Cmd::Pcap { config, json, drops } => run::pcap(&config, json, drops.as_deref()),
        Cmd::Bench {
            scenario,
            packets,
            json,
            core,
            segment_size,
            segments,
            no_segment_check,
            segment_check_in_transit,
            family,
            gso,
            per_vector,
            ..
        } if scenario.starts_with("parcel-") => bench_parcel::bench(
            &scenario,
            packets,
            json,
            core,
            segment_size,
            segments,
            !no_segment_check,
            segment_check_in_transit,
            &family,
            gso,
            per_vector,
        ),
        Cmd::Bench { scenario, json, routes, family, updates, .. } if scenario == "fib-update" => {
            bench_fib::bench(routes, &family, updates, json)
        }
        Cmd::Bench { scenario, packets, json, core, inner_size, alg, flows, policies, position, no_flow_cache, churn, export, .. }
            if bench_ipsec::SCENARIOS.contains(&scenario.as_str()) =>
        {
            let o = bench_ipsec::IpsecOptions { policies, position, flows, flow_cache: !no_flow_cache, alg, inner_size, churn, export };
            bench_ipsec::bench(&scenario, packets, json, core, &o)
        }
        Cmd::Bench {
            scenario,
            packets,
            json,
            core,
            inner_size,
            checksum,
            tunnels,
            inner,
            alg,
            disable,
            tunnel_counters,
            session_rules,
            services,
            backends,
            flows,
            lb_sessions,
            export,
            frames,
            route_file,
            ..
        } => {
            let lb = bench::LbOptions { services, backends, flows, sessions: lb_sessions };
            let side = bench_side::SideBySide { export, frames, routes: route_file };
            bench::bench(
                &scenario,
                packets,
                json,
                core,
                &bench::GtpuOptions { inner_size, checksum, tunnels, inner, alg, disable, tunnel_counters, session_rules },
                &lb,
                &side,
            )
        }
        Cmd::Trafgen { tx_if, rx_if, size, rate, duration, src, dst, src_mac, dst_mac, src_port, dst_port, rx_ring, af_xdp, json } => {
            let rx_ring = match rx_ring.as_str() {
                "v2" => io::af_packet::RingVersion::V2,
                "v3" => io::af_packet::RingVersion::V3,
                o => {
                    eprintln!("vecgate: --rx-ring {o:?}: expected v2 or v3");
                    std::process::exit(2);
                }
            };
            let rx_if = rx_if.unwrap_or_else(|| tx_if.clone());
            let args = trafgen::TrafgenArgs {
                tx_if,
                rx_if,
                size,
                rate,
                duration,
                src,
                dst,
                src_mac,
                dst_mac,
                src_port,
                dst_port,
                rx_ring,
                af_xdp,
                json,
            };
            trafgen::run(&args).map(|r| {
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&r).expect("report serializes"));
                } else {
                    trafgen::print(&r);
                }
            })
        }
        Cmd::K8s {
            socket,
            kubeconfig,
            node_name,
            table_size,
            healthz_bind_address,
            healthz_timeout,
            health_check_bind_address,
            service_proxy_name,
            punt_health_ports,
        } => {
            let settings = k8s::Settings { node: node_name, table_size, ..Default::default() };
            let health = k8s::health::HealthOptions {
                service_address: health_check_bind_address,
                proxy_address: healthz_bind_address.0,
                timeout: std::time::Duration::from_secs(healthz_timeout),
                punt: if punt_health_ports { Some(k8s::punt::HealthPunt::start(socket.clone())) } else { None },
            };
            k8s::controller::run_blocking(k8s::Options { socket, kubeconfig, settings, health, proxy_name: service_proxy_name })
                .map(|_| ())
                .map_err(Into::into)
        }
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "vecgate", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()).map_err(Into::into),
    };
    if let Err(e) = r {
        eprintln!("vecgate: {e:#}");
        std::process::exit(1);
    }
}
