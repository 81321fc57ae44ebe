//! The typed API. Every operation is one `Request`; the CLI parses text into one, the
//! JSON socket deserialises one, and `Control::handle` is the only code that acts on
//! them. Replies carry structured `data` (for automation) and `text` (for people).

use crate::dataplane::Control;
use crate::format;
use engine::stats::Snapshot;
use engine::worker::WorkerCmd;
use ip::Prefix;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    ShowRuntime {},
    /// Which gateway process answers: its pid and start time (`instance` joins them). A
    /// controller polls it to notice a restarted gateway without reading its tables.
    ShowInstance {},
    /// Every worker's counters and the table sizes in the OpenMetrics text format (the
    /// reply's `text`), as `GET /metrics` serves them.
    Metrics {},
    /// The node graph with each node's packet and drop rates since the previous
    /// `show_graph` (or since the runtime was cleared).
    ShowGraph {},
    ShowErrors {
        /// Include counters that are zero.
        #[serde(default)]
        all: bool,
    },
    ShowTrace {},
    TraceAdd {
        node: String,
        count: u32,
    },
    TraceClear {},
    ShowInterfaces {},
    /// Set an interface's reverse-path check (until a reload applies the file's).
    SetInterfaceUrpf {
        interface: String,
        mode: ip::urpf::Urpf,
    },
    /// Add an interface to the running gateway (the fields of an `[[interface]]` table;
    /// af_packet, tap or null).
    CreateInterface(crate::config::InterfaceConfig),
    /// Remove an interface, with the static routes through it.
    DeleteInterface {
        name: String,
    },
    ShowIpFib {
        /// At most this many entries (default 1000; 0: all — there may be a million).
        #[serde(default)]
        limit: Option<usize>,
    },
    /// `show ip fib <address>` (the longest match) or `show ip fib <prefix>` (exactly it).
    ShowIpFibEntry {
        query: String,
    },
    ShowNeighbours {},
    IpRouteAdd {
        prefix: String,
        via: Option<String>,
        interface: Option<String>,
        #[serde(default)]
        blackhole: bool,
        /// ECMP: several next hops with weights, instead of `via`/`interface`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        paths: Vec<crate::fib::RoutePath>,
    },
    IpRouteDel {
        prefix: String,
    },
    /// Many route changes in one request, all or nothing, published once: `add` holds
    /// routes as route-file lines (`<prefix> via <addr>`, …), `del` prefixes.
    IpRouteBatch {
        #[serde(default)]
        add: Vec<String>,
        #[serde(default)]
        del: Vec<String>,
    },
    ClearRuntime {},
    /// Create a GTP-U tunnel (the fields of a `[[gtpu_tunnel]]` table).
    CreateGtpuTunnel(crate::gtpu::GtpuTunnelConfig),
    DeleteGtpuTunnel {
        /// The tunnel's interface name, `gtpu_tunnel<id>`.
        name: String,
    },
    ShowGtpuTunnels {
        /// At most this many rows (default 100; there may be a million tunnels).
        #[serde(default)]
        limit: Option<usize>,
    },
    /// Change a GTP-U tunnel in place, as a handover does: it keeps its name, routes and
    /// incoming TEID; other tunnels are untouched.
    SetGtpuTunnel {
        /// The tunnel's interface name, `gtpu_tunnel<id>`.
        name: String,
        #[serde(default)]
        remote: Option<String>,
        #[serde(default)]
        teid_out: Option<u32>,
        #[serde(default)]
        qfi: Option<u8>,
        /// The outer DSCP, `"inherit"` or 0 to 63 (`ip::outer::tos`): the next packet
        /// carries it; the tunnel keeps its counters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dscp: Option<ip::outer::tos::Dscp>,
    },
    /// The GTP-U tunnels with this TEID (incoming or outgoing), this peer, or a UE route
    /// covering this address; give one.
    FindGtpuTunnels {
        #[serde(default)]
        teid: Option<u32>,
        #[serde(default)]
        remote: Option<String>,
        #[serde(default)]
        ue: Option<String>,
    },
    /// Create a UDP tunnel (the fields of a `[[udp_tunnel]]` table).
    CreateUdpTunnel(crate::udptun::UdpTunnelConfig),
    DeleteUdpTunnel {
        /// The tunnel's interface name, `udp_tunnel<id>`.
        name: String,
    },
    ShowUdpTunnels {},
    /// Change a UDP tunnel in place (a new peer, port or GRE key): it keeps its name,
    /// routes, counters and GRE sequence; other tunnels are untouched.
    SetUdpTunnel {
        /// The tunnel's interface name, `udp_tunnel<id>` (or the bare id).
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remote: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
        /// The GRE key: a number, or null to send none (absent: unchanged).
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::udptun::present")]
        key: Option<Option<u32>>,
        /// The outer DSCP, `"inherit"` or 0 to 63 (`ip::outer::tos`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dscp: Option<ip::outer::tos::Dscp>,
    },
    /// The UDP tunnels to this peer, from this local address, or with this id; give one.
    FindUdpTunnels {
        #[serde(default)]
        remote: Option<String>,
        #[serde(default)]
        local: Option<String>,
        #[serde(default)]
        id: Option<u32>,
    },
    /// Load balancer: add a service (the fields of an `[[lb_service]]` table).
    LbServiceAdd(lb::ServiceSpec),
    LbServiceDel {
        name: String,
    },
    /// Add a backend to a service, or replace the one with its address and port.
    LbBackendAdd(crate::lb::BackendAdd),
    LbBackendSet(crate::lb::BackendChange),
    LbBackendDel(crate::lb::BackendRef),
    /// Every service's row, or the named one's.
    ShowLbServices {
        #[serde(default)]
        service: Option<String>,
    },
    /// Every service's digest (`lb::service_digest`), by name: what changed since a spec
    /// was applied, in about 55 bytes a service.
    ShowLbDigests {},
    ShowLbBackends {
        #[serde(default)]
        service: Option<String>,
    },
    /// Live connections, every worker's, bounded.
    ShowLbSessions {
        #[serde(default)]
        service: Option<String>,
        /// At most this many rows (default 100, at most 100 000); the total is counted.
        #[serde(default)]
        limit: Option<usize>,
    },
    /// Add an IPsec SA (the fields of an `[[ipsec_sa]]` table).
    IpsecSaAdd(crate::ipsec::IpsecSaConfig),
    IpsecSaDel {
        index: u32,
    },
    /// Change an SA's settings in place (keys, counters, sequence numbers, replay window
    /// and routes stay), each one given: an inbound SA's uRPF, an outbound tunnel-mode
    /// SA's outer DSCP (`"inherit"` or 0 to 63; RFC 4301 §5.1.2.1).
    IpsecSaSet {
        index: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        urpf: Option<ip::urpf::Urpf>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dscp: Option<ip::outer::tos::Dscp>,
    },
    /// Move an SA to new endpoints in place — local and remote address, UDP
    /// encapsulation and its ports (a NAT rebinding, MOBIKE); keys, SPI, sequence
    /// numbers, replay window, counts, index and routes stay. Fields not given stay.
    IpsecSaUpdate(crate::ipsec::SaEndpoints),
    /// SAs without their keys: all, or the one at `index` (an error if there is none).
    ShowIpsecSa {
        #[serde(default)]
        index: Option<u32>,
    },
    /// Capture an interface's received and sent frames to a pcap file (one file, what
    /// every worker receives and sends there).
    PcapTrace {
        interface: String,
        file: String,
        /// Frames before the capture stops (default 10000), from all workers.
        #[serde(default)]
        count: Option<u64>,
    },
    PcapTraceOff {
        interface: String,
    },
    /// Capture dropped packets, each with its reason, to a pcapng file (one file, what
    /// every worker drops): all drops, or one node's, or those under one counter name.
    PcapTraceDrop {
        file: String,
        /// Packets before the capture stops (default 10000), from all workers.
        #[serde(default)]
        count: Option<u64>,
        #[serde(default)]
        node: Option<String>,
        /// A counter name (`ttl-expired`), in `node` or in any node.
        #[serde(default)]
        error: Option<String>,
    },
    PcapTraceDropOff {},
    ShowPfcpAssociations {},
    ShowPfcpSessions {
        /// At most this many rows (default 100).
        #[serde(default)]
        limit: Option<usize>,
    },
    /// Add an IPsec policy (the fields of an `[[ipsec_policy]]` table).
    IpsecPolicyAdd(spd::PolicySpec),
    IpsecPolicyDel {
        id: u32,
    },
    /// Bind an SPD to an interface (both directions).
    IpsecSpdBind {
        spd: u32,
        interface: String,
    },
    IpsecSpdUnbind {
        interface: String,
    },
    ShowIpsecSpd {},
    ShowIpsecFlowCache {},
    /// Punt one more port of the gateway's addresses to the host's stack at run time,
    /// through `[punt]`'s link and host (`crate::punt::add_port`): kept across reloads
    /// while the file has a `[punt]`. The same port and owner again changes nothing.
    PuntPortAdd {
        /// `tcp` or `udp` (the host's stack is reached by TCP and UDP ports).
        #[serde(deserialize_with = "crate::punt::tcp_or_udp")]
        protocol: lb::Protocol,
        port: u16,
        /// Who added it (default `ctl`): `show punt` names it; a controller (`k8s`)
        /// reconciles its own ports by it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
    /// Stop punting a port added at run time (not one of the file's).
    PuntPortDel {
        #[serde(deserialize_with = "crate::punt::tcp_or_udp")]
        protocol: lb::Protocol,
        port: u16,
        /// If given, the port must be this owner's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
    /// `[punt]`'s link and host, and every punted port with where it came from (the
    /// file, or `punt_port_add` and its owner).
    ShowPunt {},
    /// Read the configuration file again (or `file`), validate it whole and apply what
    /// changed (see `crate::reload`); SIGHUP does the same.
    Reload {
        #[serde(default)]
        file: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub data: serde_json::Value,
    pub text: String,
}

impl Reply {
    pub fn ok(data: serde_json::Value, text: String) -> Reply {
        Reply { ok: true, error: None, data, text }
    }
    pub fn err(msg: impl Into<String>) -> Reply {
        let m = msg.into();
        Reply { ok: false, error: Some(m.clone()), data: serde_json::Value::Null, text: format!("error: {m}") }
    }
}

use crate::dataplane::WORKER_TIMEOUT;

/// The checks of the UDP port an inbound SA is about to receive on (`op`: the request):
/// no node_port service is there (the SA would take its packets), and `[punt]` does not
/// hand it to the host (`crate::punt::receiver_refusal`; ESP in UDP's 4500 may be both).
fn sa_port_free<'a>(lb: &'a lb::LbState, op: &'a str) -> impl Fn(&ip::RouterState, u16) -> Result<(), String> + 'a {
    move |router, port| {
        crate::lb::check_tunnel_port(lb, port).map_err(|e| format!("udp_dst_port: {e}"))?;
        match crate::punt::receiver_refusal(router, ip::tables::UdpApp::Esp, port) {
            Some(why) => Err(format!("{op}: udp_dst_port: {why}")),
            None => Ok(()),
        }
    }
}

/// Log what a request changed (or why it changed nothing) at info; reads (`show_*`,
/// `metrics`) at debug. One place for every front-end: CLI, JSON socket, metrics.
fn log_request(req: &Request, reply: &Reply) {
    let op = serde_json::to_value(req).ok().and_then(|v| v.get("op").and_then(|o| o.as_str()).map(str::to_string)).unwrap_or_default();
    let read_only = op.starts_with("show") || op == "metrics";
    match (&reply.error, read_only) {
        (Some(e), _) => tracing::warn!(op = %op, error = %e, "request refused"),
        (None, true) => tracing::debug!(op = %op, "request"),
        (None, false) => {
            // One line per request: a reply of several lines (a reload's changes) is joined.
            let result = reply.text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
            tracing::info!(op = %op, result = %result, "applied")
        }
    }
}

impl Control {
    /// Ask every worker for its snapshot and merge them.
    pub fn snapshot(&self) -> Result<Snapshot, String> {
        let mut merged: Option<Snapshot> = None;
        for s in self.worker_snapshots()? {
            match merged.as_mut() {
                None => merged = Some(s),
                Some(m) => m.merge(&s),
            }
        }
        merged.ok_or_else(|| "no workers are running".to_string())
    }

    /// Each worker's snapshot, taken between its vectors.
    pub fn worker_snapshots(&self) -> Result<Vec<Snapshot>, String> {
        let mut all = Vec::with_capacity(self.workers.len());
        for w in &self.workers {
            let (tx, rx) = crossbeam_channel::bounded(1);
            w.send(WorkerCmd::Snapshot(tx)).map_err(|_| "worker has stopped".to_string())?;
            all.push(rx.recv_timeout(WORKER_TIMEOUT).map_err(|_| "worker did not answer".to_string())?);
        }
        Ok(all)
    }

    /// The neighbours each worker solicits with packets held for them, and how long the
    /// oldest of each has waited (ms).
    fn held_for_neighbours(&self) -> Result<Vec<(ip::hold::Waiting, u64)>, String> {
        let mut all = Vec::new();
        for w in &self.workers {
            all.extend(Control::inspect(w, |cx| {
                let (now, hz) = (engine::clock::now(), engine::clock::hz().max(1));
                let age_ms = |since: u64| (now.saturating_sub(since) as u128 * 1000 / hz as u128) as u64;
                cx.ip.hold.waiting().into_iter().map(|w| (w, age_ms(w.since))).collect::<Vec<_>>()
            })?);
        }
        Ok(all)
    }

    fn broadcast(&self, make: impl Fn() -> WorkerCmd) -> Result<(), String> {
        for w in &self.workers {
            w.send(make()).map_err(|_| "worker has stopped".to_string())?;
        }
        Ok(())
    }

    /// Carry out one request.
    pub fn handle(&mut self, req: &Request) -> Reply {
        let reply = match self.try_handle(req) {
            Ok(r) => r,
            Err(e) => Reply::err(e),
        };
        log_request(req, &reply);
        reply
    }

    fn try_handle(&mut self, req: &Request) -> Result<Reply, String> {
        Ok(match req {
            Request::ShowInstance {} => {
                let pid = std::process::id();
                let started = self.started.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                let instance = format!("{pid}-{}", started.as_nanos());
                let uptime_s = self.started.elapsed().unwrap_or_default().as_secs_f64();
                let text = format!("instance {instance}: pid {pid}, started {:.3} (unix s), up {uptime_s:.0} s\n", started.as_secs_f64());
                Reply::ok(
                    serde_json::json!({"instance": instance, "pid": pid, "started_unix_s": started.as_secs_f64(), "uptime_s": uptime_s}),
                    text,
                )
            }
            Request::ShowRuntime {} => {
                let s = self.snapshot()?;
                Reply::ok(serde_json::to_value(&s).map_err(|e| e.to_string())?, format::runtime(&s))
            }
            Request::Metrics {} => {
                let tables = crate::metrics::TableSizes {
                    routes: self.state.route_count() + self.state.tunnel_route_count(),
                    neighbours: self.state.neighbours().count(),
                    gtpu_tunnels: self.gtpu.len(),
                    udp_tunnels: self.udptun.len(),
                    pfcp: self.pfcp.as_ref().map(|p| crate::metrics::PfcpCounts {
                        associations: p.upf.associations().count(),
                        sessions: p.upf.session_count(),
                        stats: p.upf.stats(),
                    }),
                    punt_ports: self.state.punt().map(crate::punt::rows).unwrap_or_default(),
                };
                let top = self.applied.metrics.top_tunnels.unwrap_or(10);
                let tunnels = crate::metrics::tunnel_traffic(&self.gtpu, &self.udptun, top);
                Reply::ok(serde_json::Value::Null, crate::metrics::render(&self.worker_snapshots()?, tables, &tunnels))
            }
            Request::ShowGraph {} => {
                let s = self.snapshot()?;
                let now = std::time::Instant::now();
                let v = crate::graph_view::view(self.graph_prev.as_ref(), now, &s);
                self.graph_prev = Some((now, s));
                Reply::ok(serde_json::to_value(&v).map_err(|e| e.to_string())?, crate::graph_view::text(&v))
            }
            Request::ShowErrors { all } => {
                let s = self.snapshot()?;
                let rows: Vec<_> = s.counters.iter().filter(|c| *all || c.count > 0).cloned().collect();
                Reply::ok(serde_json::to_value(&rows).map_err(|e| e.to_string())?, format::errors(&rows))
            }
            Request::ShowTrace {} => {
                // Packet numbers are per worker: each worker's packets are shown apart.
                let (mut all, mut text) = (Vec::new(), String::new());
                let many = self.workers.len() > 1;
                for (k, w) in self.workers.iter().enumerate() {
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    w.send(WorkerCmd::TraceShow(tx)).map_err(|_| "worker has stopped".to_string())?;
                    let recs = rx.recv_timeout(WORKER_TIMEOUT).map_err(|_| "worker did not answer".to_string())?;
                    if many && !recs.is_empty() {
                        text += &format!("worker {k}\n");
                    }
                    if !recs.is_empty() || (k + 1 == self.workers.len() && all.is_empty()) {
                        text += &format::trace(&recs);
                    }
                    for r in recs {
                        let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
                        v["worker"] = k.into();
                        all.push(v);
                    }
                }
                Reply::ok(serde_json::Value::Array(all), text)
            }
            Request::TraceAdd { node, count } => {
                for w in &self.workers {
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    w.send(WorkerCmd::TraceAdd { node: node.clone(), count: *count, reply: tx })
                        .map_err(|_| "worker has stopped".to_string())?;
                    rx.recv_timeout(WORKER_TIMEOUT).map_err(|_| "worker did not answer".to_string())??;
                }
                Reply::ok(serde_json::Value::Null, format!("tracing the next {count} packets from {node}"))
            }
            Request::PcapTrace { interface, file, count } => {
                if !self.interfaces.iter().any(|i| &i.name == interface) {
                    return Err(format!("no interface {interface:?}"));
                }
                let count = count.unwrap_or(10_000);
                // One file, its records from every worker (each has its share of the
                // interface's queues, or hands frames to the one that sends).
                let sink = io::pcap::PcapCapture::create(std::path::Path::new(file), count).map_err(|e| e.to_string())?;
                for w in &self.workers {
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    w.send(WorkerCmd::Capture { interface: interface.clone(), sink: Some(Box::new(sink.clone())), reply: tx })
                        .map_err(|_| "worker has stopped".to_string())?;
                    rx.recv_timeout(WORKER_TIMEOUT).map_err(|_| "worker did not answer".to_string())??;
                }
                Reply::ok(serde_json::Value::Null, format!("capturing up to {count} frames of {interface} into {file}"))
            }
            Request::PcapTraceOff { interface } => {
                for w in &self.workers {
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    w.send(WorkerCmd::Capture { interface: interface.clone(), sink: None, reply: tx })
                        .map_err(|_| "worker has stopped".to_string())?;
                    rx.recv_timeout(WORKER_TIMEOUT).map_err(|_| "worker did not answer".to_string())??;
                }
                Reply::ok(serde_json::Value::Null, format!("capture of {interface} stopped"))
            }
            Request::PcapTraceDrop { file, count, node, error } => {
                let count = count.unwrap_or(10_000);
                if count == 0 {
                    return Err("pcap trace drop: count: expected at least 1 packet".into());
                }
                let filter = engine::DropFilter { node: node.clone(), counter: error.clone() };
                // Checked before anything starts: a running capture goes on, its file whole.
                let snap = self.snapshot()?;
                filter
                    .check(snap.nodes.iter().map(|n| n.name.as_str()), snap.counters.iter().map(|c| (c.node.as_str(), c.counter)))
                    .map_err(|e| format!("pcap trace drop: {e}"))?;
                // One file, its records from every worker.
                let sink = io::pcap::DropCapture::create(std::path::Path::new(file), count).map_err(|e| format!("pcap trace drop: {e}"))?;
                for w in &self.workers {
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    let started = w
                        .send(WorkerCmd::CaptureDrops { sink: Some(Box::new(sink.clone())), filter: filter.clone(), reply: tx })
                        .map_err(|_| "worker has stopped".to_string())
                        .and_then(|()| rx.recv_timeout(WORKER_TIMEOUT).map_err(|_| "worker did not answer".to_string())?);
                    if let Err(e) = started {
                        // All workers or none: the ones started stop, and no file is left.
                        for w in &self.workers {
                            let (tx, _rx) = crossbeam_channel::bounded(1);
                            let _ = w.send(WorkerCmd::CaptureDrops { sink: None, filter: engine::DropFilter::default(), reply: tx });
                        }
                        let _ = std::fs::remove_file(file);
                        return Err(format!("pcap trace drop: {e}"));
                    }
                }
                let which = match (node, error) {
                    (None, None) => "dropped packets".to_string(),
                    (Some(n), None) => format!("packets dropped by {n}"),
                    (None, Some(e)) => format!("packets dropped as {e}"),
                    (Some(n), Some(e)) => format!("packets dropped by {n} as {e}"),
                };
                Reply::ok(serde_json::Value::Null, format!("capturing up to {count} {which} into {file}"))
            }
            Request::PcapTraceDropOff {} => {
                let mut running = false;
                for w in &self.workers {
                    let (tx, rx) = crossbeam_channel::bounded(1);
                    w.send(WorkerCmd::CaptureDrops { sink: None, filter: engine::DropFilter::default(), reply: tx })
                        .map_err(|_| "worker has stopped".to_string())?;
                    running |= rx.recv_timeout(WORKER_TIMEOUT).map_err(|_| "worker did not answer".to_string())??;
                }
                if !running {
                    return Err("no capture of drops running (none was started, or it ended at its packet count)".into());
                }
                Reply::ok(serde_json::Value::Null, "capture of drops stopped".into())
            }
            Request::TraceClear {} => {
                self.broadcast(|| WorkerCmd::TraceClear)?;
                Reply::ok(serde_json::Value::Null, "trace cleared".into())
            }
            Request::ClearRuntime {} => {
                self.broadcast(|| WorkerCmd::ClearRuntime)?;
                Reply::ok(serde_json::Value::Null, "runtime and counters cleared".into())
            }
            Request::ShowInterfaces {} => {
                let s = self.snapshot().ok();
                let rows = format::interface_rows(self.state.interfaces(), &self.interfaces, s.as_ref());
                Reply::ok(serde_json::to_value(&rows).map_err(|e| e.to_string())?, format::interfaces(&rows))
            }
            Request::SetInterfaceUrpf { interface, mode } if self.state.if_index(interface).is_err() => {
                // A tunnel: its decap node checks what it takes out.
                if let Some(t) = crate::gtpu::tunnel_by_name(&self.gtpu, interface) {
                    let change = gtpu::TunnelChange { urpf: Some(*mode), ..Default::default() };
                    self.gtpu.modify(&mut self.state, t.id, change).map_err(|e| e.to_string())?;
                } else if let Some(t) = crate::udptun::tunnel_by_name(&self.udptun, interface) {
                    let change = udptun::UdpTunnelChange { urpf: Some(*mode), ..Default::default() };
                    self.udptun.modify(&mut self.state, t.id, change).map_err(|e| e.to_string())?;
                } else {
                    return Err(format!("no interface or tunnel {interface:?}"));
                }
                self.publish();
                Reply::ok(serde_json::Value::Null, format!("{interface}: urpf {mode}"))
            }
            Request::SetInterfaceUrpf { interface, mode } => {
                let i = self.state.if_index(interface).map_err(|_| format!("no interface {interface:?}"))?;
                if *mode != ip::urpf::Urpf::Off && i.get() >= 64 {
                    return Err(format!("{interface} is interface {}: only the first 64 interfaces may check sources", i.get()));
                }
                self.state.set_urpf(i, *mode);
                self.publish_routes();
                Reply::ok(serde_json::Value::Null, format!("{interface}: urpf {mode}"))
            }
            Request::CreateInterface(ic) => crate::interfaces::create(self, ic.clone())?,
            Request::DeleteInterface { name } => crate::interfaces::delete(self, name)?,
            Request::ShowIpFib { limit } => {
                let limit = match limit.unwrap_or(format::FIB_LIMIT) {
                    0 => usize::MAX,
                    n => n,
                };
                let (rows, total) = self.state.fib_listing(limit);
                let mut text = format::fib(&rows, self.shared.load().generation);
                if rows.len() < total {
                    text += &format!("… {} more of {total} (show ip fib limit <n>, or 0 for all)\n", total - rows.len());
                }
                Reply::ok(serde_json::to_value(&rows).map_err(|e| e.to_string())?, text)
            }
            Request::ShowNeighbours {} => {
                let rows = format::neighbour_rows(&self.state, &self.held_for_neighbours()?);
                Reply::ok(serde_json::to_value(&rows).map_err(|e| e.to_string())?, format::neighbours(&rows))
            }
            Request::IpRouteAdd { prefix, via, interface, blackhole, paths } => {
                let p: Prefix = prefix.parse().map_err(|e| format!("prefix {prefix:?}: {e}"))?;
                let t = crate::fib::target_from_fields(via.as_deref(), interface.as_deref(), *blackhole, paths, str::to_string)
                    .map_err(|(f, m)| if f.is_empty() { m } else { format!("ip_route_add{f}: {m}") })?;
                let t = crate::ipsec::resolve_target(&self.ipsec, t)?;
                let t = crate::dataplane::resolve_target(&self.gtpu, &self.udptun, &self.state, t)?;
                // A prefix with a different route is refused, naming it: a change is a
                // delete and an add, or a batch line (which replaces, in one publication).
                if !self.state.create_route(p, t).map_err(|e| e.to_string())? {
                    return Ok(Reply::ok(serde_json::Value::Null, format!("route {p} unchanged (already so)")));
                }
                self.publish_routes();
                Reply::ok(serde_json::Value::Null, format!("route {p} added"))
            }
            Request::ShowIpFibEntry { query } => {
                let row = crate::fib::fib_entry(&mut self.state, query)?;
                let gen = self.shared.load().generation;
                Reply::ok(serde_json::to_value(&row).map_err(|e| e.to_string())?, format::fib(std::slice::from_ref(&row), gen))
            }
            Request::IpRouteBatch { add, del } => {
                let text = crate::fib::route_batch(self, add, del)?;
                Reply::ok(serde_json::Value::Null, text)
            }
            Request::IpRouteDel { prefix } => {
                let p: Prefix = prefix.parse().map_err(|e| format!("prefix {prefix:?}: {e}"))?;
                self.state.del_route(&p).map_err(|e| e.to_string())?;
                self.publish_routes();
                Reply::ok(serde_json::Value::Null, format!("route {p} deleted"))
            }
            Request::CreateGtpuTunnel(c) => {
                let spec = c.to_spec(&self.state).map_err(|(f, m)| format!("{f}: {m}"))?;
                let had_ue = spec.ue.is_some();
                let kind = spec.kind();
                // The reply is the log line too: it names what was made, as `show gtpu tunnels` does.
                let what = format!("{} -> {} teid in {:#x} out {:#x}", spec.local, spec.remote, spec.teid_in, spec.teid_out);
                let id = self.gtpu.create(&mut self.state, spec).map_err(|e| e.to_string())?;
                if had_ue {
                    // The UE route changed the FIB; tunnels' outer routes may have moved.
                    self.publish_routes();
                } else {
                    self.publish();
                }
                let name = ip::tables::TunnelRef { kind, id }.if_name();
                Reply::ok(serde_json::json!({ "name": name, "id": id }), format!("created {name} {what}"))
            }
            Request::DeleteGtpuTunnel { .. } | Request::SetGtpuTunnel { .. } | Request::FindGtpuTunnels { .. } => {
                crate::gtpu::handle(self, req)?
            }
            Request::CreateUdpTunnel(c) => {
                let (spec, routes) = c.to_spec().map_err(|(f, m)| format!("{f}: {m}"))?;
                crate::lb::check_tunnel_port(&self.lb.state, spec.port)?;
                if let Some(why) = crate::punt::receiver_refusal(&self.state, ip::tables::UdpApp::Gue, spec.port) {
                    return Err(format!("create_udp_tunnel: port: {why}"));
                }
                let kind = spec.kind();
                let what = format!("{} -> {} {} port {}", spec.local, spec.remote, spec.encap.name(), spec.port);
                let id = self.udptun.create(&mut self.state, spec, &routes).map_err(|e| e.to_string())?;
                self.publish_routes();
                let name = ip::tables::TunnelRef { kind, id }.if_name();
                Reply::ok(serde_json::json!({ "name": name, "id": id }), format!("created {name} {what}"))
            }
            Request::SetUdpTunnel { .. } | Request::FindUdpTunnels { .. } => crate::udptun::handle(self, req)?,
            Request::DeleteUdpTunnel { name } => {
                let t = crate::udptun::tunnel_by_name(&self.udptun, name).ok_or_else(|| format!("no tunnel named {name:?}"))?;
                let routes = crate::gtpu::routes_into(&self.state, t);
                self.udptun.delete(&mut self.state, t.id).map_err(|e| e.to_string())?;
                self.publish_routes();
                crate::gtpu::deleted_reply(name, &routes)
            }
            Request::ShowPfcpAssociations {} => {
                // Without [pfcp] the answer is that PFCP is off, as `show punt` says of [punt].
                let Some(p) = self.pfcp.as_ref() else {
                    let data = serde_json::json!({ "enabled": false, "associations": [], "stats": {} });
                    return Ok(Reply::ok(data, crate::pfcp::OFF.into()));
                };
                let rows = crate::pfcp::association_rows(p);
                let stats = p.upf.stats();
                let counts: serde_json::Map<String, serde_json::Value> =
                    stats.named().iter().map(|(name, v)| (name.to_string(), (*v).into())).collect();
                let data = serde_json::json!({ "enabled": true, "associations": rows, "stats": counts });
                Reply::ok(data, crate::pfcp::format_associations(&rows, &stats))
            }
            Request::ShowPfcpSessions { limit } => {
                let Some(p) = self.pfcp.as_ref() else {
                    let data = serde_json::json!({ "enabled": false, "sessions": [], "total": 0, "buffered": null });
                    return Ok(Reply::ok(data, crate::pfcp::OFF.into()));
                };
                let rows = crate::pfcp::session_rows(p, limit.unwrap_or(100));
                let buffered = crate::pfcp::buffer_row(p);
                let text = crate::pfcp::format_sessions(&rows, p.upf.session_count(), &p.recent) + &crate::pfcp::format_buffer(&buffered);
                let data = serde_json::json!({ "enabled": true, "sessions": rows, "total": p.upf.session_count(), "buffered": buffered });
                Reply::ok(data, text)
            }
            Request::ShowUdpTunnels {} => {
                let rows = crate::udptun::rows(&self.udptun, &self.state);
                let mut text = crate::udptun::format_rows(&rows);
                if !self.recent_udptun_events.is_empty() {
                    text += "recent control messages:\n";
                    for e in &self.recent_udptun_events {
                        text += &format!("  {e}\n");
                    }
                }
                let data = serde_json::json!({ "tunnels": rows, "events": self.recent_udptun_events });
                Reply::ok(data, text)
            }
            Request::LbServiceAdd(..)
            | Request::LbServiceDel { .. }
            | Request::LbBackendAdd(..)
            | Request::LbBackendSet(..)
            | Request::LbBackendDel(..)
            | Request::ShowLbServices { .. }
            | Request::ShowLbDigests {}
            | Request::ShowLbBackends { .. }
            | Request::ShowLbSessions { .. } => crate::lb::handle(self, req)?,
            Request::IpsecSaAdd(c) => {
                let name = crate::ipsec::add(&mut self.ipsec, &mut self.state, c, sa_port_free(&self.lb.state, "ipsec_sa_add"))?;
                self.publish_routes();
                Reply::ok(serde_json::json!({ "index": c.index, "name": name }), format!("added SA {} ({name})", c.index))
            }
            Request::IpsecSaDel { index } => {
                crate::ipsec::del(&mut self.ipsec, &mut self.state, *index)?;
                self.publish_routes();
                Reply::ok(serde_json::Value::Null, format!("deleted SA {index}"))
            }
            Request::IpsecSaSet { index, urpf, dscp } => {
                if urpf.is_none() && dscp.is_none() {
                    return Err("ipsec_sa_set needs urpf or dscp".into());
                }
                // Both checked before either is set: a refused request changes nothing.
                let sa = self.ipsec.get(*index).ok_or_else(|| format!("index {index}: no such SA"))?;
                let spec = ipsec::SaSpec { urpf: urpf.unwrap_or(sa.spec.urpf), dscp: dscp.unwrap_or(sa.spec.dscp), ..(*sa.spec).clone() };
                spec.check_urpf().and_then(|_| spec.check_dscp()).map_err(|e| e.to_string())?;
                let mut done = Vec::new();
                if let Some(u) = urpf {
                    self.ipsec.set_urpf(*index, *u).map_err(|e| e.to_string())?;
                    done.push(format!("urpf {u}"));
                }
                if let Some(d) = dscp {
                    self.ipsec.set_dscp(*index, *d).map_err(|e| e.to_string())?;
                    done.push(format!("dscp {d}"));
                }
                // No route changed: the tables as they are, with the SA's new spec.
                self.publish();
                Reply::ok(serde_json::Value::Null, format!("SA {index}: {}", done.join(", ")))
            }
            Request::IpsecSaUpdate(e) => {
                let now = crate::ipsec::update(&mut self.ipsec, &self.state, e, sa_port_free(&self.lb.state, "ipsec_sa_update"))?;
                // The outer adjacency follows the new remote; the UDP demux the ports.
                self.publish_routes();
                Reply::ok(serde_json::json!({ "index": e.index }), format!("SA {}: {now}", e.index))
            }
            Request::ShowIpsecSa { index } => {
                let mut rows = crate::ipsec::rows(&self.ipsec);
                if let Some(i) = index {
                    rows.retain(|r| r.index == *i);
                    if rows.is_empty() {
                        return Err(format!("index {i}: no SA has it"));
                    }
                }
                let mut taken = Vec::new();
                for w in &self.workers {
                    taken.extend(Control::inspect(w, |cx| cx.ipsec.inbound_counts())?);
                }
                crate::ipsec::add_inbound_counts(&self.ipsec, &mut rows, &taken);
                Reply::ok(serde_json::json!({ "sas": rows }), crate::ipsec::format_rows(&rows))
            }
            Request::IpsecPolicyAdd(p) => {
                let id = self.spd.add_policy(p).map_err(|e| e.to_string())?;
                let v = self.spd.publish().version;
                // Which tunnels' outer packets transport-mode SAs protect may have changed.
                self.publish();
                Reply::ok(serde_json::json!({ "id": id.0, "version": v }), format!("ipsec policy {} added (SPD version {v})", id.0))
            }
            Request::IpsecPolicyDel { id } => {
                self.spd.del_policy(*id).map_err(|e| e.to_string())?;
                let v = self.spd.publish().version;
                // Which tunnels' outer packets transport-mode SAs protect may have changed.
                self.publish();
                Reply::ok(serde_json::json!({ "id": id, "version": v }), format!("ipsec policy {id} deleted (SPD version {v})"))
            }
            Request::IpsecSpdBind { spd, interface } => {
                let i = self.state.if_index(interface).map_err(|e| format!("interface: {e}"))?;
                if i.0 >= 64 {
                    return Err(format!("interface {interface}: an SPD binds to the first 64 interfaces only"));
                }
                let was = self.spd.binding(i);
                self.spd.bind(i, *spd).map_err(|e| e.to_string())?;
                // The SPD tables first, then the IP tables that send packets to them.
                let v = self.spd.publish().version;
                self.state.set_spd_links(crate::spd::links(&self.spd));
                self.publish();
                // Binding another SPD replaces the one bound, in one step: say so.
                let replaced = was.filter(|w| u32::from(w.0) != *spd).map(|w| format!(" (replacing spd {})", w.0)).unwrap_or_default();
                Reply::ok(
                    serde_json::json!({ "version": v, "replaced": was.map(|w| w.0) }),
                    format!("spd {spd} bound to {interface}{replaced}"),
                )
            }
            Request::IpsecSpdUnbind { interface } => {
                let i = self.state.if_index(interface).map_err(|e| format!("interface: {e}"))?;
                let s = self.spd.unbind(i).map_err(|_| format!("{interface}: no SPD bound"))?;
                let v = self.spd.publish().version;
                self.state.set_spd_links(crate::spd::links(&self.spd));
                self.publish();
                Reply::ok(serde_json::json!({ "version": v }), format!("spd {} unbound from {interface}", s.0))
            }
            Request::ShowIpsecSpd {} => {
                let policies = crate::spd::policy_rows(&self.spd);
                let bindings = crate::spd::binding_rows(&self.spd, &self.state);
                let v = self.spd.shared().load().version;
                let text = crate::spd::format_spd(&policies, &bindings, v);
                Reply::ok(serde_json::json!({ "version": v, "bindings": bindings, "policies": policies }), text)
            }
            Request::ShowIpsecFlowCache {} => crate::spd::show_flow_cache(self),
            Request::Reload { file } => crate::reload::reload(self, file.as_deref())?,
            Request::PuntPortAdd { protocol, port, owner } => crate::punt::add_port(self, *protocol, *port, owner.as_deref())?,
            Request::PuntPortDel { protocol, port, owner } => crate::punt::del_port(self, *protocol, *port, owner.as_deref())?,
            Request::ShowPunt {} => crate::punt::show(self),
            Request::ShowGtpuTunnels { limit } => {
                let rows = crate::gtpu::rows(&self.gtpu, &self.state, limit.unwrap_or(100));
                let mut text = crate::gtpu::format_rows(&rows, self.gtpu.len());
                if !self.recent_gtpu_events.is_empty() {
                    text += "recent path-management events:\n";
                    for e in &self.recent_gtpu_events {
                        text += &format!("  {e}\n");
                    }
                }
                let data = serde_json::json!({
                    "total": self.gtpu.len(),
                    "tunnels": rows,
                    "techniques": self.gtpu.techniques(),
                    "events": self.recent_gtpu_events.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
                });
                Reply::ok(data, text)
            }
        })
    }
}
