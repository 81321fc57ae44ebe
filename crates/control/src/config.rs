//! The configuration file.
//!
//! Parsing is strict (`deny_unknown_fields`): a misspelt key is an error, not a silent
//! default. Every error names the file, the field path (`route[2].via`) and what was
//! expected. See `docs/CONFIGURATION.md`.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// What is wrong with a configuration: the first error, with the file's further ones in
/// `more` (one run reports them all, up to [`MAX_ERRORS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    /// Path of the offending field, e.g. `route[2].via`, or `(file)`.
    pub field: String,
    pub message: String,
    /// The line of the file where the field (or the nearest enclosing table) is.
    pub line: Option<usize>,
    /// The file's further errors, in the order found.
    pub more: Vec<ConfigError>,
    /// Errors found past [`MAX_ERRORS`], counted only.
    pub not_shown: usize,
}

impl ConfigError {
    pub fn new(file: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { file: file.to_string(), field: field.into(), message: message.into(), line: None, more: Vec::new(), not_shown: 0 }
    }

    /// This error and the ones reported with it, in order.
    pub fn all(&self) -> impl Iterator<Item = &ConfigError> {
        std::iter::once(self).chain(self.more.iter())
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.field, self.message)?;
        if let Some(l) = self.line {
            write!(f, " (line {l})")?;
        }
        for e in &self.more {
            write!(f, "\n{e}")?;
        }
        if self.not_shown > 0 {
            write!(f, "\n{}: {} more errors not shown", self.file, self.not_shown)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// The most errors one run reports; past it, a last line says how many more there were.
pub const MAX_ERRORS: usize = 20;

/// Errors gathered over a whole file, so a file with several mistakes takes one run.
/// Checks that depend on an earlier stage (routes on interfaces) run only when that stage
/// had none, so every error reported is a real one.
#[derive(Debug, Default)]
pub struct Problems {
    errors: Vec<ConfigError>,
    /// Errors past `MAX_ERRORS`, counted only.
    dropped: usize,
}

impl Problems {
    /// The value, or `None` with its error (and the errors it carries) recorded.
    pub fn take<T>(&mut self, r: Result<T, ConfigError>) -> Option<T> {
        r.map_err(|e| self.push(e)).ok()
    }

    pub fn push(&mut self, mut e: ConfigError) {
        self.dropped += std::mem::take(&mut e.not_shown);
        let more = std::mem::take(&mut e.more);
        for e in std::iter::once(e).chain(more) {
            if self.errors.len() < MAX_ERRORS {
                self.errors.push(e);
            } else {
                self.dropped += 1;
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// `Err` with every error recorded so far (the first carrying the rest).
    pub fn check(&mut self) -> Result<(), ConfigError> {
        let mut errors = std::mem::take(&mut self.errors).into_iter();
        let Some(mut first) = errors.next() else { return Ok(()) };
        first.more = errors.collect();
        first.not_shown = std::mem::take(&mut self.dropped);
        Err(first)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub dataplane: DataplaneConfig,
    #[serde(default, rename = "interface")]
    pub interfaces: Vec<InterfaceConfig>,
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteConfig>,
    #[serde(default, rename = "neighbour")]
    pub neighbours: Vec<NeighbourConfig>,
    #[serde(default, rename = "stream")]
    pub streams: Vec<StreamConfig>,
    #[serde(default)]
    pub gtpu: GtpuConfig,
    /// The Prometheus endpoint (`[metrics] listen = "127.0.0.1:9464"`); off by default.
    #[serde(default)]
    pub metrics: crate::metrics::MetricsConfig,
    /// `[log] level`: what `vecgate run` logs (RUST_LOG overrides it).
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default, rename = "gtpu_tunnel")]
    pub gtpu_tunnels: Vec<crate::gtpu::GtpuTunnelConfig>,
    /// UDP tunnels: GUE, GRE-in-UDP, direct IP-in-UDP.
    #[serde(default, rename = "udp_tunnel")]
    pub udp_tunnels: Vec<crate::udptun::UdpTunnelConfig>,
    /// PFCP (N4): the UPF an SMF drives.
    #[serde(default)]
    pub pfcp: Option<crate::pfcp::PfcpConfig>,
    /// Service load balancer settings and services.
    #[serde(default)]
    pub lb: crate::lb::LbConfig,
    #[serde(default, rename = "lb_service")]
    pub lb_services: Vec<lb::ServiceSpec>,
    #[serde(default, rename = "ipsec_sa")]
    pub ipsec_sas: Vec<crate::ipsec::IpsecSaConfig>,
    /// The IPsec SPD: settings, SPDs bound to interfaces, policies.
    #[serde(default)]
    pub spd: crate::spd::SpdConfig,
    #[serde(default, rename = "ipsec_spd")]
    pub ipsec_spds: Vec<crate::spd::SpdBindingConfig>,
    #[serde(default, rename = "ipsec_policy")]
    pub ipsec_policies: Vec<spd::PolicySpec>,
    /// Ports of our addresses handed to the host's stack (IKE, BGP, SSH daemons).
    #[serde(default)]
    pub punt: Option<crate::punt::PuntConfig>,
    /// Where relative paths (pcap files) are resolved; the config file's folder.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The file name, for error messages.
    #[serde(skip)]
    pub source: String,
    /// The file's text, to find the line of a field an error names.
    #[serde(skip)]
    pub text: String,
}

/// `[log]`: the log filter of `vecgate run`, in `RUST_LOG` syntax (`info`,
/// `warn,control=debug`); the environment's `RUST_LOG` wins when set.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    pub level: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Regular buffers in the worker's pool.
    #[serde(default = "default_buffers")]
    pub buffers: usize,
    /// Large (256 KiB) buffers for jumbograms and parcels.
    #[serde(default = "default_large_buffers")]
    pub large_buffers: usize,
    /// Medium (16 KiB) buffers for jumbo frames and datagrams of 2–16 KiB.
    #[serde(default = "default_medium_buffers")]
    pub medium_buffers: usize,
    #[serde(default = "default_icmp_rate")]
    pub icmp_errors_per_sec: u64,
    #[serde(default = "default_solicit_rate")]
    pub solicitations_per_sec: u64,
    /// Packets held per unresolved next hop while it is solicited (0: none held).
    #[serde(default = "default_neighbour_hold")]
    pub neighbour_hold: usize,
    /// ICMP/ICMPv6 echo replies, ARP replies and neighbour advertisements per second per
    /// worker, each kind its own bucket (burst up to 100).
    #[serde(default = "default_replies_rate")]
    pub replies_per_sec: u64,
    /// Control socket path.
    #[serde(default = "default_socket")]
    pub socket: String,
    /// CPU core to pin the worker to (none: not pinned).
    #[serde(default)]
    pub worker_core: Option<usize>,
    /// Never wait when idle: poll the devices without pause (a core at 100 %, the lowest
    /// latency, as VPP's polling mode). Default: after a run of empty polls the worker
    /// waits in poll(2) until a packet arrives.
    #[serde(default)]
    pub busy_poll: bool,
    /// Worker threads. More than one needs af_packet interfaces only: each worker opens
    /// its own socket per interface in a fanout group, and the kernel hashes flows to
    /// workers (a flow's packets stay in order).
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// The core of each worker (one entry per worker); otherwise `worker_core` pins
    /// the first and the rest float.
    #[serde(default)]
    pub worker_cores: Vec<usize>,
    /// Reassembly of fragments addressed to the gateway (`[dataplane.reassembly]`).
    #[serde(default)]
    pub reassembly: ReassemblyConfig,
    /// Parcel segments are checked against their integrity slots where a parcel is taken
    /// apart (split into datagrams, or handed to a host as a GSO frame): a bad segment is
    /// dropped, the rest forwarded. false: segments are never read on the way through
    /// (the slots travel on, and a split derives each datagram's checksum from its slot,
    /// so the receiver finds a damaged segment). Default true.
    #[serde(default = "default_verify_parcel_segments")]
    pub verify_parcel_segments: bool,
    /// With `verify_parcel_segments`, also every parcel forwarded whole (the strict mode:
    /// every segment read at every hop). Default false.
    #[serde(default)]
    pub verify_parcel_segments_in_transit: bool,
}

fn default_verify_parcel_segments() -> bool {
    true
}

/// Bounds of each worker's reassembly table, per address family.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ReassemblyConfig {
    pub max_datagrams: usize,
    pub max_per_source: usize,
    pub max_bytes: usize,
    pub timeout_ms: u64,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        let d = ip::reassembly::ReassemblyLimits::default();
        ReassemblyConfig {
            max_datagrams: d.max_datagrams,
            max_per_source: d.max_per_source,
            max_bytes: d.max_bytes,
            timeout_ms: d.timeout.as_millis() as u64,
        }
    }
}

impl ReassemblyConfig {
    pub fn limits(&self) -> ip::reassembly::ReassemblyLimits {
        ip::reassembly::ReassemblyLimits {
            max_datagrams: self.max_datagrams,
            max_per_source: self.max_per_source,
            max_bytes: self.max_bytes,
            timeout: std::time::Duration::from_millis(self.timeout_ms),
        }
    }

    /// The first field out of range and what it expects.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for (field, v) in [("max_datagrams", self.max_datagrams), ("max_per_source", self.max_per_source), ("max_bytes", self.max_bytes)] {
            if v == 0 {
                return Err((field, "expected at least 1".into()));
            }
        }
        if !(10..=120_000).contains(&self.timeout_ms) {
            return Err(("timeout_ms", format!("{}: expected 10 to 120000 milliseconds", self.timeout_ms)));
        }
        Ok(())
    }
}

fn default_workers() -> usize {
    1
}

fn default_buffers() -> usize {
    16384
}
fn default_large_buffers() -> usize {
    64
}
fn default_medium_buffers() -> usize {
    512
}
fn default_icmp_rate() -> u64 {
    1000
}
fn default_solicit_rate() -> u64 {
    100
}
fn default_neighbour_hold() -> usize {
    ip::hold::HOLD_PER_NEIGHBOUR
}
fn default_replies_rate() -> u64 {
    1000
}
pub fn default_socket() -> String {
    "/run/vecgate.sock".into()
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            buffers: default_buffers(),
            large_buffers: default_large_buffers(),
            medium_buffers: default_medium_buffers(),
            icmp_errors_per_sec: default_icmp_rate(),
            solicitations_per_sec: default_solicit_rate(),
            neighbour_hold: default_neighbour_hold(),
            replies_per_sec: default_replies_rate(),
            socket: default_socket(),
            worker_core: None,
            busy_poll: false,
            workers: 1,
            worker_cores: Vec::new(),
            reassembly: ReassemblyConfig::default(),
            verify_parcel_segments: default_verify_parcel_segments(),
            verify_parcel_segments_in_transit: false,
        }
    }
}

/// The `[gtpu]` section: feature-wide GTP-U settings.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GtpuConfig {
    /// The six fast-path techniques, each on by default (`[gtpu.techniques]`).
    #[serde(default)]
    pub techniques: gtpu::Techniques,
    /// Error Indications and extension notifications sent per second per worker.
    #[serde(default = "default_gtpu_replies")]
    pub replies_per_sec: u64,
}

fn default_gtpu_replies() -> u64 {
    100
}

impl Default for GtpuConfig {
    fn default() -> Self {
        GtpuConfig { techniques: gtpu::Techniques::default(), replies_per_sec: default_gtpu_replies() }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InterfaceKind {
    /// Packet generator (receive side) that discards what is sent to it.
    Pg,
    /// Reads `input` as its receive side, writes its transmit side to `output`.
    Pcap,
    /// Transmit-only sink.
    Null,
    /// A Linux packet socket on host interface `host_if` (TPACKET_V3 ring, vnet headers).
    AfPacket,
    /// A TAP device named `host_if`, created by vecgate (the host stack as a neighbour).
    Tap,
    /// AF_XDP sockets on host interface `host_if`, one per receive queue, fed by an XDP
    /// program vecgate attaches (and removes).
    AfXdp,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: InterfaceKind,
    /// Our MAC on the link. af_packet: defaults to the host interface's own.
    pub mac: Option<String>,
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// The link takes IP parcels: a parcel routed out of it goes whole (within its MTU)
    /// instead of split into UDP datagrams. Default false.
    #[serde(default)]
    pub parcels: bool,
    /// The reverse-path check of the sources it receives (RFC 3704): `strict` (the route
    /// back leaves by this interface), `loose` (there is a route back) or `off` (the
    /// default). Both drop sources that are the gateway's own addresses.
    #[serde(default)]
    pub urpf: ip::urpf::Urpf,
    #[serde(default)]
    pub addresses: Vec<String>,
    /// pcap: file read as the receive side.
    pub input: Option<String>,
    /// pcap: file the transmit side writes.
    pub output: Option<String>,
    /// af_packet: the host interface to bind to; tap: the TAP device to create.
    pub host_if: Option<String>,
    /// af_packet: exchange virtio-net headers with the kernel (checksum and GSO offload
    /// pass-through). Default true.
    pub vnet_hdr: Option<bool>,
    /// af_packet: milliseconds before a partly filled receive block is handed over.
    pub rx_retire_ms: Option<u32>,
    /// af_packet: receive ring layout, "v3" (default: blocks, best throughput) or "v2"
    /// (a slot per frame, handed over at once: lowest latency at low rates).
    pub rx_ring: Option<RxRing>,
    /// af_packet v2 ring: bytes per slot (a multiple of 4096; default 69632, a whole
    /// 64 KiB GSO frame) and slots (default 512).
    pub rx_frame_size: Option<usize>,
    pub rx_frames: Option<usize>,
    /// af_xdp: where the XDP program runs, "native" or "generic" (default: native where
    /// the driver has it).
    pub xdp_mode: Option<XdpModeConfig>,
    /// af_xdp: bind zero-copy (true) or copy mode (false); default: zero-copy where the
    /// driver allows.
    pub zero_copy: Option<bool>,
    /// af_xdp: UMEM frames per socket (a power of two, default 4096: half receive, half
    /// transmit) and their size (2048 or 4096, default 4096).
    pub xdp_frames: Option<u32>,
    pub xdp_frame_size: Option<u32>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum XdpModeConfig {
    Native,
    Generic,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RxRing {
    V2,
    V3,
}

pub(crate) fn default_mtu() -> u16 {
    1500
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    pub prefix: String,
    pub via: Option<String>,
    pub interface: Option<String>,
    #[serde(default)]
    pub blackhole: bool,
    /// ECMP: several next hops with weights, instead of `via`/`interface`.
    #[serde(default)]
    pub paths: Vec<crate::fib::RoutePath>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NeighbourConfig {
    pub interface: String,
    pub ip: String,
    pub mac: String,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum StreamProtocol {
    Udp,
    Tcp,
    IcmpEcho,
    /// A GTP-U G-PDU carrying inner UDP (`teid`, `inner_src`, `inner_dst`).
    Gtpu,
    /// A GUE packet to `dst_port` carrying inner UDP (`inner_src`, `inner_dst`).
    Gue,
    /// Tunnel-mode ESP as the peer of inbound SA `sa` sends it (from its `remote` to its
    /// `local`), carrying inner UDP (`inner_src`, `inner_dst`, the ports): one packet
    /// sealed with the SA's keys, sent again and again (the SA needs `anti_replay = false`).
    Esp,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    pub name: String,
    /// The pg interface whose receive side the stream feeds.
    pub interface: String,
    /// Frame size in bytes, Ethernet header included, FCS excluded.
    pub size: usize,
    pub count: Option<u64>,
    /// Packets per second (absent: as fast as possible).
    pub rate: Option<u64>,
    pub protocol: StreamProtocol,
    pub src: String,
    pub dst: String,
    pub src_mac: Option<String>,
    pub dst_mac: Option<String>,
    #[serde(default = "default_port")]
    pub src_port: u16,
    #[serde(default = "default_port")]
    pub dst_port: u16,
    #[serde(default = "default_ttl")]
    pub ttl: u8,
    /// TCP flags as a number (0x02 = SYN).
    #[serde(default)]
    pub tcp_flags: u16,
    #[serde(default)]
    pub modify: Vec<ModifyConfig>,
    /// For `protocol = "gtpu"` (`teid`), `"esp"` (`sa`, an inbound SA's index), and
    /// `"gtpu"`, `"gue"` or `"esp"` (`inner_src`, `inner_dst`).
    pub teid: Option<u32>,
    pub sa: Option<u32>,
    pub inner_src: Option<String>,
    pub inner_dst: Option<String>,
    /// Outer UDP checksum of a gtpu stream (default: computed).
    pub udp_checksum: Option<bool>,
}

fn default_port() -> u16 {
    1024
}
fn default_ttl() -> u8 {
    64
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ModifyField {
    Src,
    Dst,
    SrcPort,
    DstPort,
    Teid,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ModifyConfig {
    pub field: ModifyField,
    /// Cycle through this many consecutive values from the template's.
    pub increment: Option<u32>,
    /// Pick uniformly among this many values from the template's.
    pub random: Option<u32>,
}

impl Config {
    /// Parse TOML text; `source` names it in errors.
    pub fn parse(text: &str, source: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let mut cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.message().to_string();
            // A few syntax errors come without a message: their line says where.
            let msg = if msg.is_empty() { "expected valid TOML".to_string() } else { msg };
            let value = inner.span().and_then(|s| text.get(s));
            let mut e = ConfigError::new(source, if path == "." { "(file)".to_string() } else { path }, plain_words(&msg, value));
            e.line = inner.span().map(|s| line_at(text, s.start));
            e
        })?;
        cfg.base_dir = base_dir.to_path_buf();
        cfg.source = source.to_string();
        cfg.text = text.to_string();
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::new(&name, "(file)", format!("cannot read: {e}")))?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Config::parse(&text, &name, &dir)
    }

    /// The built-in default gateway.
    pub fn default_gateway() -> Config {
        Config::parse(crate::DEFAULT_CONFIG, "(built-in default gateway)", Path::new(".")).expect("the built-in configuration is valid")
    }

    pub fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    pub fn err(&self, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let mut e = ConfigError::new(&self.source, field, message);
        e.line = field_line(&self.text, &e.field);
        e
    }
}

/// A schema error in an operator's words: serde names Rust types (`expected u16`, `a
/// sequence`) and `std::net` says `invalid IP address syntax` without the value; the
/// file's reader wants the range, TOML's word and the value written (`value`: the text
/// the error's span covers).
fn plain_words(msg: &str, value: Option<&str>) -> String {
    const TYPES: [(&str, &str); 9] = [
        ("expected u8", "expected an integer from 0 to 255"),
        ("expected u16", "expected an integer from 0 to 65535"),
        ("expected u32", "expected an integer from 0 to 4294967295"),
        ("expected u64", "expected an integer from 0 up"),
        ("expected usize", "expected an integer from 0 up"),
        ("expected i64", "expected an integer"),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected a table"),
    ];
    if let Some((rust, plain)) = TYPES.iter().find(|(rust, _)| msg.ends_with(rust)) {
        return format!("{}{plain}", &msg[..msg.len() - rust.len()]);
    }
    let written = value.map(str::trim).unwrap_or("the value");
    match msg {
        "invalid IP address syntax" => format!("{written}: expected an IPv4 or IPv6 address (no /LENGTH)"),
        "invalid socket address syntax" => format!("{written}: expected ADDRESS:PORT, e.g. 198.18.0.1:8805 or [2001:db8::1]:8805"),
        _ => msg.to_string(),
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The line where a field path (`interface[1].addresses[0]`, `dataplane.buffers`) is
/// written, or that of the nearest enclosing table or array entry that is; `None` for
/// paths that name no place in the text (`(file)`, a default).
pub fn field_line(text: &str, path: &str) -> Option<usize> {
    use toml_edit::{Item, TableLike, Value};
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut table: Option<&dyn TableLike> = Some(doc.as_table());
    let mut best = None;
    for segment in path.split('.') {
        let (key, index) = match segment.split_once('[') {
            Some((k, rest)) => (k, rest.strip_suffix(']').and_then(|n| n.parse::<usize>().ok())),
            None => (segment, None),
        };
        let Some((k, item)) = table.and_then(|t| t.get_key_value(key)) else { break };
        best = item.span().or(k.span()).or(best);
        table = item.as_table_like();
        let Some(i) = index else { continue };
        match item {
            Item::ArrayOfTables(a) => {
                let Some(t) = a.get(i) else { break };
                best = t.span().or(best);
                table = Some(t);
            }
            Item::Value(Value::Array(a)) => {
                let Some(v) = a.get(i) else { break };
                best = v.span().or(best);
                table = v.as_inline_table().map(|t| t as &dyn TableLike);
            }
            _ => break,
        }
    }
    best.map(|s| line_at(text, s.start))
}

/// Parse a field value, naming the field and what was expected on failure.
pub fn parse_field<T: std::str::FromStr>(cfg: &Config, field: &str, value: &str, expected: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.parse::<T>().map_err(|e| {
        // Say what is wrong, then what was expected, each once (a parser's own text may
        // already be the expectation).
        let why = e.to_string();
        match why.starts_with("expected") || why.contains("(expected") {
            true => cfg.err(field, format!("{value:?}: expected {expected}")),
            false => cfg.err(field, format!("{value:?}: {why}; expected {expected}")),
        }
    })
}

pub fn parse_ip(cfg: &Config, field: &str, value: &str) -> Result<IpAddr, ConfigError> {
    parse_field(cfg, field, value, "an IPv4 or IPv6 address")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_is_named_with_path_and_line() {
        let text = "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\nmtu_bytes = 9000\n";
        let e = Config::parse(text, "gw.toml", Path::new(".")).unwrap_err();
        assert_eq!(e.file, "gw.toml");
        assert!(e.field.starts_with("interface[0]"), "{e}");
        assert!(e.message.contains("mtu_bytes"), "{e}");
        assert_eq!(e.line, Some(5), "{e}");
    }

    #[test]
    fn wrong_type_is_named() {
        let text = "[[interface]]\nname = \"pg0\"\ntype = \"ethernet\"\nmac = \"02:00:00:00:00:01\"\n";
        let e = Config::parse(text, "gw.toml", Path::new(".")).unwrap_err();
        assert!(e.field.contains("interface[0].type"), "{e}");
        assert!(e.message.contains("pg") && e.message.contains("pcap"), "{e}");
        let e = Config::parse("[dataplane]\nbuffers = \"many\"\n", "gw.toml", Path::new(".")).unwrap_err();
        assert_eq!(e.field, "dataplane.buffers", "{e}");
    }

    /// A value of the wrong range or kind is refused in TOML's words with the range (not
    /// serde's Rust type names), and an address that does not parse is quoted.
    #[test]
    fn schema_errors_say_the_range_not_the_rust_type() {
        let pg = "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\n";
        for (extra, field, line, says) in [
            ("mtu = 70000", "interface[0].mtu", 5, "integer `70000`, expected an integer from 0 to 65535"),
            ("mtu = \"1500\"", "interface[0].mtu", 5, "string \"1500\", expected an integer from 0 to 65535"),
            ("addresses = \"198.18.0.1/24\"", "interface[0].addresses", 5, "expected an array"),
            (
                "[[lb_service]]\nname = \"web\"\ntype = \"cluster_ip\"\nvip = \"198.18.128.10/32\"\nport = 80\nprotocol = \"tcp\"",
                "lb_service[0].vip",
                8,
                "\"198.18.128.10/32\": expected an IPv4 or IPv6 address (no /LENGTH)",
            ),
            ("[dataplane]\nbuffers = -3", "dataplane.buffers", 6, "integer `-3`, expected an integer from 0 up"),
        ] {
            let e = Config::parse(&format!("{pg}{extra}\n"), "gw.toml", Path::new(".")).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.ends_with(says), "{e}");
            assert_eq!(e.line, Some(line), "{e}");
        }
    }

    /// Interface and worker settings that cannot work together are refused by name.
    #[test]
    fn kernel_interface_settings_are_checked() {
        use crate::dataplane::assemble;
        let pg = "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\n";
        // A generator has one owner (worker 0); the other worker reaches it by handoff.
        let cfg = Config::parse(&format!("[dataplane]\nworkers = 2\n{pg}"), "gw.toml", Path::new(".")).unwrap();
        let a = assemble(&cfg).expect("devices with one queue are shared by handoff");
        let kinds: Vec<&str> = a.workers.iter().map(|w| w.ports[0].device.kind()).collect();
        assert_eq!(kinds, ["pg", "handoff"]);
        let cfg = Config::parse(&format!("[dataplane]\nworkers = 0\n{pg}"), "gw.toml", Path::new(".")).unwrap();
        assert_eq!(assemble(&cfg).err().unwrap().field, "dataplane.workers");
        let cfg = Config::parse(&format!("[dataplane]\nworker_cores = [0, 1]\n{pg}"), "gw.toml", Path::new(".")).unwrap();
        assert_eq!(assemble(&cfg).err().unwrap().field, "dataplane.worker_cores");
        // A core the process may not run on, or one core for two workers.
        let cfg = Config::parse(&format!("[dataplane]\nworker_core = 100000\n{pg}"), "gw.toml", Path::new(".")).unwrap();
        let e = assemble(&cfg).err().unwrap();
        assert!(e.field == "dataplane.worker_core" && e.message.contains("core 100000: expected one of the cores"), "{e}");
        let cfg = Config::parse(&format!("[dataplane]\nworkers = 2\nworker_cores = [0, 0]\n{pg}"), "gw.toml", Path::new(".")).unwrap();
        let e = assemble(&cfg).err().unwrap();
        assert!(e.field == "dataplane.worker_cores[1]" && e.message.contains("already dataplane.worker_cores[0]'s"), "{e}");
        let tap = "[[interface]]\nname = \"t\"\ntype = \"tap\"\nmac = \"02:00:00:00:00:01\"\n";
        let cfg = Config::parse(tap, "gw.toml", Path::new(".")).unwrap();
        assert_eq!(assemble(&cfg).err().unwrap().field, "interface[0].host_if");
        let afp = "[[interface]]\nname = \"a\"\ntype = \"af_packet\"\nhost_if = \"vg-no-such-if\"\nmac = \"02:00:00:00:00:01\"\n";
        let e = assemble(&Config::parse(afp, "gw.toml", Path::new(".")).unwrap()).err().unwrap();
        assert_eq!(e.field, "interface[0].host_if", "{e}");
        assert!(e.message.contains("does not exist"), "{e}");
        let pg_ring = format!("{pg}rx_ring = \"v2\"\n");
        let e = assemble(&Config::parse(&pg_ring, "gw.toml", Path::new(".")).unwrap()).err().unwrap();
        assert_eq!(e.field, "interface[0].host_if", "{e}");
        // af_xdp: its own keys only, checked before any socket opens.
        let xdp = "[[interface]]\nname = \"x\"\ntype = \"af_xdp\"\nhost_if = \"vg-no-such-if\"\nmac = \"02:00:00:00:00:01\"\n";
        for (extra, field, says) in [
            ("xdp_frames = 1000\n", "interface[0].xdp_frames", "power of two"),
            ("xdp_frame_size = 1500\n", "interface[0].xdp_frame_size", "2048 or 4096"),
            ("rx_ring = \"v2\"\n", "interface[0].vnet_hdr", "af_packet"),
            ("", "interface[0].host_if", "does not exist"),
        ] {
            let cfg = Config::parse(&format!("{xdp}{extra}"), "gw.toml", Path::new(".")).unwrap();
            let e = assemble(&cfg).err().unwrap();
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.contains(says), "{e}");
        }
        let e = assemble(&Config::parse(&format!("{pg}zero_copy = true\n"), "gw.toml", Path::new(".")).unwrap()).err().unwrap();
        assert_eq!(e.field, "interface[0].xdp_mode", "{e}");
        let e = Config::parse(&format!("{xdp}xdp_mode = \"offload\"\n"), "gw.toml", Path::new(".")).unwrap_err();
        assert!(e.field.starts_with("interface[0]") && e.message.contains("native"), "{e}");
        // What is missing is named: a null interface's MAC, an af_packet interface's
        // host interface (whose MAC it would borrow).
        let e =
            assemble(&Config::parse("[[interface]]\nname = \"n\"\ntype = \"null\"\n", "gw.toml", Path::new(".")).unwrap()).err().unwrap();
        assert!(e.field == "interface[0].mac" && e.message.starts_with("missing: a null interface needs a `mac`"), "{e}");
        let e = assemble(&Config::parse("[[interface]]\nname = \"a\"\ntype = \"af_packet\"\n", "gw.toml", Path::new(".")).unwrap())
            .err()
            .unwrap();
        assert!(e.field == "interface[0].host_if" && e.message.contains("needs `host_if`"), "{e}");
        // One host interface, one vecgate interface (of whatever kind binds it).
        let b = "[[interface]]\nname = \"b\"\ntype = \"tap\"\nhost_if = \"vg-no-such-if\"\nmac = \"02:00:00:00:00:02\"\n";
        let e = assemble(&Config::parse(&format!("{afp}{b}"), "gw.toml", Path::new(".")).unwrap()).err().unwrap();
        assert_eq!(e.field, "interface[1].host_if", "{e}");
        assert!(e.message.contains("\"vg-no-such-if\" is already interface[0]'s (a) host interface"), "{e}");
    }

    /// Bad UDP tunnels are refused by field name before anything runs.
    #[test]
    fn udp_tunnel_settings_are_checked() {
        use crate::dataplane::assemble;
        let base = "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.1.1/24\", \"2001:db8:1::1/64\"]\n";
        let t = |extra: &str| format!("{base}[[udp_tunnel]]\nlocal = \"198.18.1.1\"\nremote = \"198.18.1.2\"\n{extra}");
        for (extra, field, says) in [
            ("encap = \"direct\"\n", "udp_tunnel[0].port", "give one"),
            ("encap = \"gue\"\nkey = 5\n", "udp_tunnel[0].key", "gre"),
            ("encap = \"gue\"\ngre_sequence = true\n", "udp_tunnel[0].gre_sequence", "gre"),
            ("encap = \"direct\"\nport = 5\ngre_checksum = true\n", "udp_tunnel[0].gre_checksum", "gre"),
            ("encap = \"gue\"\nsrc_port_min = 6000\nsrc_port_max = 5000\n", "udp_tunnel[0].src_port_min", "low end first"),
            ("encap = \"gue\"\nchecksum = \"offload\"\n", "udp_tunnel[0].checksum", "IPv6"),
            ("encap = \"gue\"\nroutes = [\"198.19.0.0/33\"]\n", "udp_tunnel[0].routes", "198.19.0.0/33"),
            ("encap = \"gue\"\nport = 2152\n", "udp_tunnel[0]", "2152"),
        ] {
            let cfg = Config::parse(&t(extra), "gw.toml", Path::new(".")).unwrap();
            let e = assemble(&cfg).err().unwrap_or_else(|| panic!("{extra} accepted"));
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.contains(says), "{e}");
        }
        let e = Config::parse(&t("encap = \"vxlan\"\n"), "gw.toml", Path::new(".")).unwrap_err();
        assert!(e.field.starts_with("udp_tunnel[0]") && e.message.contains("gue"), "{e}");
        let ok = Config::parse(&t("encap = \"gre\"\nkey = 5\nroutes = [\"198.19.0.0/24\"]\n"), "gw.toml", Path::new(".")).unwrap();
        let a = assemble(&ok).expect("a valid tunnel");
        assert_eq!(a.control.udptun.len(), 1);
    }

    /// A tunnel's `dscp` is "inherit" or 0 to 63; anything else is refused naming the
    /// file, the tunnel and the field; a good one reaches the running tunnel.
    #[test]
    fn tunnel_dscp_is_checked() {
        use crate::dataplane::assemble;
        use ip::outer::tos::Dscp;
        let base = "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.1.1/24\", \"2001:db8:1::1/64\"]\n";
        let udp = |v: &str| format!("{base}[[udp_tunnel]]\nlocal = \"198.18.1.1\"\nremote = \"198.18.1.2\"\nencap = \"gue\"\ndscp = {v}\n");
        let gtpu = |v: &str| {
            format!("{base}[[gtpu_tunnel]]\nlocal = \"2001:db8:1::1\"\nremote = \"2001:db8:1::2\"\nteid_in = 1\nteid_out = 2\ndscp = {v}\n")
        };
        for bad in ["64", "-1", "300", "\"ef\"", "\"Inherit\"", "4.5", "true", "\"\""] {
            for (text, field) in [(udp(bad), "udp_tunnel[0].dscp"), (gtpu(bad), "gtpu_tunnel[0].dscp")] {
                let e = Config::parse(&text, "gw.toml", Path::new(".")).err().unwrap_or_else(|| panic!("{field} = {bad} accepted"));
                assert_eq!(e.field, field, "{e}");
                assert!(e.message.contains("expected \"inherit\" or a DSCP 0 to 63"), "{e}");
                assert!(e.to_string().starts_with(&format!("gw.toml: {field}: ")), "{e}");
                assert_eq!(e.line, text.lines().position(|l| l.starts_with("dscp")).map(|n| n + 1), "{e}");
            }
        }
        for (v, want) in [("\"inherit\"", Dscp::Inherit), ("46", Dscp::Fixed(46)), ("0", Dscp::Fixed(0)), ("63", Dscp::Fixed(63))] {
            let a = assemble(&Config::parse(&udp(v), "gw.toml", Path::new(".")).unwrap()).expect("a valid tunnel");
            assert_eq!(a.control.udptun.tunnels().map(|(_, s)| s.dscp).collect::<Vec<_>>(), [want]);
            let a = assemble(&Config::parse(&gtpu(v), "gw.toml", Path::new(".")).unwrap()).expect("a valid tunnel");
            assert_eq!(a.control.gtpu.tunnels().map(|(_, t)| t.spec().dscp).collect::<Vec<_>>(), [want]);
        }
        // Left out: the inner packet's.
        let text = format!("{base}[[udp_tunnel]]\nlocal = \"198.18.1.1\"\nremote = \"198.18.1.2\"\nencap = \"gre\"\n");
        let a = assemble(&Config::parse(&text, "gw.toml", Path::new(".")).unwrap()).unwrap();
        assert_eq!(a.control.udptun.tunnels().map(|(_, s)| s.dscp).collect::<Vec<_>>(), [Dscp::Inherit]);
    }

    #[test]
    fn the_default_gateway_parses() {
        let c = Config::default_gateway();
        assert!(c.interfaces.len() >= 2);
        assert!(!c.streams.is_empty());
    }
}
