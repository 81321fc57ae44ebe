//! `vecgate`: run the dataplane, talk to a running one, run pcaps offline, benchmark.
#![forbid(unsafe_code)]

mod bench;
mod run;
mod trafgen;

use clap::{Parser, Subcommand};
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
        #[arg(long)]
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
    },
    /// Send a command to a running instance, e.g. `vecgate ctl show runtime`.
    Ctl {
        #[arg(long, default_value = "/run/vecgate.sock")]
        socket: PathBuf,
        /// Print the reply's JSON instead of its text.
        #[arg(long)]
        json: bool,
        /// The command words (`vecgate ctl help` lists them).
        #[arg(trailing_var_arg = true, required = true)]
        words: Vec<String>,
    },
    /// Run a config's pcap inputs through the graph to completion, write pcap outputs, exit.
    Pcap {
        #[arg(long)]
        config: PathBuf,
        /// Print the final runtime and counters as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Benchmark a scenario: generator → graph → null sink on one core.
    Bench {
        /// ip4-forward, ip6-forward, ip4-forward-1m, ip6-forward-1m, gtpu4-encap,
        /// gtpu4-decap, gtpu6-encap, gtpu6-decap, gtpu4-decap-frag (outer packets in two
        /// fragments, reassembled), gue4-encap, gue4-decap, gre-udp4-encap
        scenario: String,
        #[arg(long, default_value_t = 20_000_000)]
        packets: u64,
        #[arg(long)]
        json: bool,
        /// CPU core to pin to.
        #[arg(long, default_value_t = 1)]
        core: usize,
        /// GTP-U scenarios: inner IP packet size in bytes.
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
        /// esp4-encrypt: the SA's algorithm (null, null-sha256, aes-gcm-128, aes-gcm-256,
        /// chacha20-poly1305, aes-cbc-sha256).
        #[arg(long, default_value = "aes-gcm-128")]
        alg: ipsec::Algorithm,
        /// GTP-U scenarios: turn a fast-path technique off (repeatable; `all`).
        #[arg(long)]
        disable: Vec<String>,
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
        #[arg(long)]
        src: IpAddr,
        #[arg(long)]
        dst: IpAddr,
        /// Source MAC (default: the sending interface's).
        #[arg(long)]
        src_mac: Option<wire::EthernetAddress>,
        /// Destination MAC: the device under test's.
        #[arg(long)]
        dst_mac: wire::EthernetAddress,
        #[arg(long, default_value_t = 40000)]
        src_port: u16,
        #[arg(long, default_value_t = 40001)]
        dst_port: u16,
        /// Receive ring: v2 (a frame is seen at once; default) or v3 (blocks).
        #[arg(long, default_value = "v2")]
        rx_ring: String,
        /// Use AF_XDP sockets (an XDP program on both interfaces, removed on exit) instead
        /// of packet sockets; frames from a local sender must carry full checksums.
        #[arg(long)]
        af_xdp: bool,
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd.unwrap_or(Cmd::Run { config: None, duration: None, interval: 1.0, socket: None }) {
        Cmd::Run { config, duration, interval, socket } => run::run(config.as_deref(), duration, interval, socket),
        Cmd::Ctl { socket, json, words } => run::ctl(&socket, json, &words),
        Cmd::Pcap { config, json } => run::pcap(&config, json),
        Cmd::Bench { scenario, packets, json, core, inner_size, checksum, tunnels, inner, alg, disable } => {
            bench::bench(&scenario, packets, json, core, &bench::GtpuOptions { inner_size, checksum, tunnels, inner, alg, disable })
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
    };
    if let Err(e) = r {
        eprintln!("vecgate: {e:#}");
        std::process::exit(1);
    }
}
