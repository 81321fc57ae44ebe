//! Assemble a dataplane from a configuration: router state, the first published tables,
//! and a worker (graph, pool, devices). Everything is validated before anything is
//! built, so a bad configuration changes nothing.

use crate::config::ConfigError;
use crate::config::{parse_field, parse_ip, Config, InterfaceKind, ModifyField, StreamConfig, StreamProtocol};
use arc_swap::ArcSwap;
use crossbeam_channel::{Receiver, Sender};
use engine::device::Device;
use engine::worker::{Port, Worker, WorkerCmd};
use engine::{GraphBuilder, IfIndex, Pool};
use gtpu::{GtpuContext, GtpuEvent, GtpuState, GtpuTables, HasGtpu};
use ip::{HasIp, IfAddr, InterfaceSpec, IpContext, IpEvent, Limits, Prefix, RouteTarget, RouterState, Tables};
use parcel::{HasParcel, ParcelContext};
use spd::{HasSpd, SpdContext, SpdState};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use udptun::{HasUdpTun, UdpTunContext, UdpTunEvent, UdpTunState, UdpTunTables};
use wire::EthernetAddress;

/// The largest interface MTU (a 9216-byte jumbo frame less its Ethernet header).
pub const MAX_MTU: u16 = 9202;

/// What the control plane keeps about an interface beyond its L3 view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceInfo {
    pub name: String,
    pub kind: &'static str,
    /// How the device was opened, where that varies (af_xdp: "copy, native XDP").
    pub detail: Option<String>,
    /// The host interface it binds (af_packet, af_xdp) or creates (tap).
    pub host_if: Option<String>,
}

/// A worker's context: one part per feature. The IP nodes see the IP part, the GTP-U
/// nodes both.
pub struct WorkerContext {
    pub ip: IpContext,
    pub gtpu: GtpuContext,
    pub udptun: UdpTunContext,
    pub parcel: ParcelContext,
    pub lb: lb::LbContext,
    pub ipsec: ipsec::IpsecContext,
    pub spd: SpdContext,
    pub upf: upf::UpfContext,
}

impl engine::worker::Context for WorkerContext {
    #[inline]
    fn refresh(&mut self) {
        // IP first: `Control::publish` stores GTP-U first, so a worker that sees a new
        // route into a tunnel also sees the tunnel.
        self.ip.refresh();
        self.gtpu.refresh();
        if self.udptun.refresh() {
            // The hinted tunnels may be gone or changed (IP tables forget them too).
            self.ip.tunnel_hints.forget();
        }
        self.lb.refresh();
        self.ipsec.refresh();
        self.spd.refresh();
        self.upf.refresh();
    }

    fn as_any(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl HasIp for WorkerContext {
    #[inline(always)]
    fn ip(&mut self) -> &mut IpContext {
        &mut self.ip
    }
    #[inline(always)]
    fn parcels_whole_at_input(&self) -> bool {
        !self.parcel.reads_segments_in_transit()
    }
}

impl HasGtpu for WorkerContext {
    #[inline(always)]
    fn split(&mut self) -> (&mut IpContext, &mut GtpuContext) {
        (&mut self.ip, &mut self.gtpu)
    }
}

impl HasParcel for WorkerContext {
    #[inline(always)]
    fn split_parcel(&mut self) -> (&mut IpContext, &mut ParcelContext) {
        (&mut self.ip, &mut self.parcel)
    }
}

impl HasUdpTun for WorkerContext {
    #[inline(always)]
    fn split_udptun(&mut self) -> (&mut IpContext, &mut UdpTunContext) {
        (&mut self.ip, &mut self.udptun)
    }
}

impl lb::HasLb for WorkerContext {
    #[inline(always)]
    fn lb(&mut self) -> &mut lb::LbContext {
        &mut self.lb
    }
}

/// A load-balanced connection's packets, both ways, go to the worker that holds its
/// session (`lb::steer`); everything else as the flow hash says.
impl ip::nodes::worker_handoff::Steering for WorkerContext {
    #[inline]
    fn steer(&mut self, frame: &[u8], workers: u32) -> Option<u32> {
        let ip = &self.ip.tables;
        lb::steer::owner(&self.lb.tables, ip::flow::frame_ip(frame)?, workers, |a| ip.is_local(a))
    }
}

impl ipsec::HasIpsec for WorkerContext {
    #[inline(always)]
    fn split_ipsec(&mut self) -> (&mut IpContext, &mut ipsec::IpsecContext) {
        (&mut self.ip, &mut self.ipsec)
    }
}

impl upf::HasUpf for WorkerContext {
    #[inline(always)]
    fn split_upf(&mut self) -> (&mut IpContext, &mut upf::UpfContext) {
        (&mut self.ip, &mut self.upf)
    }
}

impl HasSpd for WorkerContext {
    #[inline(always)]
    fn split_spd(&mut self) -> (&mut IpContext, &mut SpdContext) {
        (&mut self.ip, &mut self.spd)
    }
}

/// UDP tunnel control messages kept for `show udp tunnels`.
const RECENT_UDP_EVENTS: usize = 32;

/// Route targets naming a tunnel interface (`gtpu_tunnelN`, `udp_tunnelN`) become
/// routes into that tunnel.
pub fn resolve_target(g: &GtpuState, u: &UdpTunState, router: &RouterState, t: RouteTarget) -> Result<RouteTarget, String> {
    if let RouteTarget::Multipath(paths) = t {
        let paths: Result<Vec<_>, String> = paths
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                Ok(ip::state::Path { target: resolve_target(g, u, router, p.target).map_err(|e| format!("path {i}: {e}"))?, ..p })
            })
            .collect();
        return Ok(RouteTarget::Multipath(paths?));
    }
    match crate::gtpu::resolve_target(g, router, t)? {
        RouteTarget::Interface(name) if crate::udptun::is_tunnel_name(&name) => match crate::udptun::tunnel_by_name(u, &name) {
            Some(t) => Ok(RouteTarget::Tunnel(t)),
            None => Err(format!("no tunnel named {name:?}")),
        },
        RouteTarget::Via { interface: Some(name), .. } if crate::udptun::is_tunnel_name(&name) => {
            Err(format!("{name} is a tunnel: route into it with `interface {name}`, not via a next hop"))
        }
        other => Ok(other),
    }
}

/// The router's local UDP demux: GTP-U's ports and endpoints, and the UDP tunnel ports.
fn udp_demux(g: &GtpuState, u: &UdpTunState) -> ip::tables::UdpDemux {
    let mut d = g.udp_demux();
    u.add_to_demux(&mut d);
    d
}

/// Set the router's local UDP demux with every feature's ports (ESP in UDP too).
pub fn set_udp_demux(state: &mut RouterState, g: &GtpuState, u: &UdpTunState, x: &ipsec::IpsecState) {
    let mut demux = udp_demux(g, u);
    crate::ipsec::add_to_demux(x, &mut demux);
    state.set_udp_demux(demux);
}

/// Set which tunnels' outer packets the outbound transport-mode SAs protect, where
/// (`crate::ipsec::tunnel_esp`): after any change of tunnels, SAs, policies or bindings.
/// `upf_n3`: the UPF's N3 addresses (`[pfcp]`), whose GTP-U to gNBs and peer UPFs the
/// PFCP sessions' outer header creation sends: tunnels like the others.
pub fn set_tunnel_esp(state: &mut RouterState, g: &GtpuState, u: &UdpTunState, x: &ipsec::IpsecState, spd: &SpdState, upf_n3: &[IpAddr]) {
    state.set_tunnel_esp(crate::ipsec::tunnel_esp(x, spd, || {
        let gtpu = g.tunnels().map(|(_, t)| {
            let s = t.spec();
            crate::ipsec::OuterFlow { local: s.local, remote: s.remote, port: wire::gtpu::PORT, src_ports: s.src_port.range() }
        });
        let udp = u.tunnels().map(|(_, s)| crate::ipsec::OuterFlow {
            local: s.local,
            remote: s.remote,
            port: s.port,
            src_ports: (s.src_port_min, s.src_port_max),
        });
        gtpu.chain(udp).chain(upf_outer_flows(x, upf_n3)).collect()
    }));
}

/// The UPF's GTP-U packets as tunnels' outer packets: from an N3 address to a gNB or peer
/// UPF a FAR's outer header creation names, 2152 both ways (`upf::nodes::encap`). The
/// peers come and go with PFCP sessions, which do not republish the IP tables: every peer
/// an outbound transport-mode SA from an N3 address leads to stands for them (a peer
/// without such an SA has nothing to count, and `tunnel_esp` reads only the flows
/// between an SA's addresses), so that a session's first packet already finds its entry.
fn upf_outer_flows<'a>(x: &'a ipsec::IpsecState, upf_n3: &'a [IpAddr]) -> impl Iterator<Item = crate::ipsec::OuterFlow> + 'a {
    let port = wire::gtpu::PORT;
    x.iter()
        .map(|(_, sa)| &sa.spec)
        .filter(|s| s.direction == ipsec::Direction::Outbound && s.mode == ipsec::Mode::Transport && upf_n3.contains(&s.local))
        .map(move |s| crate::ipsec::OuterFlow { local: s.local, remote: s.remote, port, src_ports: (port, port) })
}

/// Path-management events kept for `show gtpu tunnels`.
const RECENT_EVENTS: usize = 32;

/// The control plane's side of a running dataplane.
pub struct Control {
    pub state: RouterState,
    pub gtpu: GtpuState,
    pub shared: Arc<ArcSwap<Tables>>,
    pub gtpu_shared: Arc<ArcSwap<GtpuTables>>,
    pub udptun: UdpTunState,
    pub udptun_shared: Arc<ArcSwap<UdpTunTables>>,
    pub udptun_events: Receiver<UdpTunEvent>,
    /// The latest UDP tunnel control messages, newest last.
    pub recent_udptun_events: std::collections::VecDeque<UdpTunEvent>,
    pub events: Receiver<IpEvent>,
    pub gtpu_events: Receiver<GtpuEvent>,
    /// The latest GTP-U path-management events, newest last.
    pub recent_gtpu_events: std::collections::VecDeque<GtpuEvent>,
    pub ipsec: ipsec::IpsecState,
    pub ipsec_shared: Arc<ArcSwap<ipsec::IpsecTables>>,
    pub interfaces: Vec<InterfaceInfo>,
    pub workers: Vec<Sender<WorkerCmd>>,
    /// The snapshot the last `show graph` took, for its rates.
    pub graph_prev: Option<(std::time::Instant, engine::stats::Snapshot)>,
    /// The PFCP endpoint, with `[pfcp]`.
    pub pfcp: Option<crate::pfcp::Pfcp>,
    pub lb: crate::lb::LbControl,
    /// IPsec policies and bindings (publishes its own tables), and where each worker
    /// leaves its flow-cache counters.
    pub spd: SpdState,
    pub spd_gauges: Vec<Arc<spd::context::FlowCacheGauges>>,
    /// Per worker: how many packets its `ip-glean` holds ([`ip::hold::NeighbourHold::gauge`]).
    pub hold_gauges: Vec<Arc<std::sync::atomic::AtomicUsize>>,
    /// The configuration as last applied (at start-up or by `reload`): what a reload
    /// compares against to know which objects the file owns.
    pub applied: Config,
    /// The file `reload` reads by default (none for the built-in default gateway).
    pub config_path: Option<std::path::PathBuf>,
    /// The link whose port's first node is `ip-punt-inject` (`[punt]`'s interface since
    /// start-up or the last reload that moved it: `crate::punt::repoint`).
    pub punt_link: Option<String>,
    /// With several workers, which way `ip-punt-inject` passes on what it does not
    /// inject ([`punt_spreads`]: true `worker-handoff`, false `session-handoff`), fixed
    /// when the graph was built; none with one worker (`ethernet-input`).
    pub punt_pass_on: Option<bool>,
    /// The input kinds whose first node spreads what their owner receives
    /// ([`kind_spreads`]).
    pub spread_kinds: Vec<InterfaceKind>,
    /// Each worker's lanes to the others (`lanes_to[k][j]`: from worker k to j), for the
    /// devices of interfaces added at run time on workers that do not own them.
    pub lanes_to: Vec<Vec<Option<engine::handoff::LaneTx>>>,
    /// When multipath routes' links were last read (`crate::fib::poll_links`).
    pub link_poll: crate::fib::LinkPoll,
    /// When this gateway process assembled its dataplane (`show instance`).
    pub started: std::time::SystemTime,
}

impl Control {
    /// Compile the state into new tables and publish them to every worker.
    pub fn publish(&mut self) {
        set_udp_demux(&mut self.state, &self.gtpu, &self.udptun, &self.ipsec);
        let upf_n3 = self.pfcp.as_ref().map_or(Vec::new(), |p| crate::pfcp::n3_addresses(p.upf.config()));
        set_tunnel_esp(&mut self.state, &self.gtpu, &self.udptun, &self.ipsec, &self.spd, &upf_n3);
        let t = self.state.build();
        self.gtpu_shared.store(Arc::new(self.gtpu.build()));
        self.ipsec_shared.store(Arc::new(self.ipsec.build()));
        self.udptun_shared.store(Arc::new(self.udptun.build()));
        self.shared.store(Arc::new(t));
    }

    /// After a route change: re-resolve tunnels' outer adjacencies, then publish.
    pub fn publish_routes(&mut self) {
        self.gtpu.refresh_outer(&mut self.state);
        self.udptun.refresh_outer(&mut self.state);
        self.ipsec.refresh_outer(&mut self.state);
        self.lb.refresh_outer(&mut self.state);
        self.publish();
    }

    /// Apply neighbour events from the workers; publish once if anything changed.
    pub fn process_events(&mut self) -> usize {
        let (mut changed, mut learned) = (0, 0);
        while let Ok(ev) = self.events.try_recv() {
            match ev {
                IpEvent::NeighbourLearned { if_index, ip, mac } => {
                    if self.state.set_neighbour(if_index, ip, mac, false) {
                        changed += 1;
                        learned += 1;
                    }
                }
            }
        }
        while let Ok(ev) = self.udptun_events.try_recv() {
            if self.recent_udptun_events.len() == RECENT_UDP_EVENTS {
                self.recent_udptun_events.pop_front();
            }
            self.recent_udptun_events.push_back(ev);
        }
        while let Ok(ev) = self.gtpu_events.try_recv() {
            if self.recent_gtpu_events.len() == RECENT_EVENTS {
                self.recent_gtpu_events.pop_front();
            }
            self.recent_gtpu_events.push_back(ev);
        }
        if crate::fib::poll_links(self) {
            changed += 1;
        }
        if changed > 0 {
            self.publish();
            if learned > 0 {
                self.release_held();
            }
        }
        changed
    }

    /// After publishing neighbours: the workers send on the packets they hold for them.
    pub fn release_held(&self) {
        self.workers.iter().for_each(look_at_hold);
    }

    /// The workers that hold packets look at them (as [`Control::release_held`]), so that
    /// what waited too long is dropped while no packet reaches `ip-glean`; the others
    /// are left alone.
    pub fn look_at_held(&self) {
        for (w, held) in self.workers.iter().zip(&self.hold_gauges) {
            if held.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                look_at_hold(w);
            }
        }
    }

    /// What `read` finds in worker `w`'s context, read between its vectors
    /// ([`WorkerCmd::Inspect`]).
    pub fn inspect<T: Send + 'static>(
        w: &Sender<WorkerCmd>,
        read: impl FnOnce(&mut WorkerContext) -> T + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let read = move |cx: Option<&mut dyn std::any::Any>| {
            let _ = tx.send(cx.and_then(|a| a.downcast_mut::<WorkerContext>()).map(read));
        };
        w.send(WorkerCmd::Inspect(Box::new(read))).map_err(|_| "worker has stopped".to_string())?;
        rx.recv_timeout(WORKER_TIMEOUT)
            .map_err(|_| "worker did not answer".to_string())?
            .ok_or_else(|| "worker context is not the gateway's".to_string())
    }
}

/// A worker's `ip-glean-release` settles its hold: sends on what can go, drops what
/// waited too long (any frame but an empty one, which flushes).
fn look_at_hold(w: &Sender<WorkerCmd>) {
    let _ = w.send(WorkerCmd::Inject { input: ip::nodes::glean::GLEAN_INPUT.to_string(), frames: vec![vec![1]] });
}

/// How long the control plane waits for a worker to answer a command.
pub(crate) const WORKER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) fn kind_name(k: InterfaceKind) -> &'static str {
    match k {
        InterfaceKind::Pg => "pg",
        InterfaceKind::Pcap => "pcap",
        InterfaceKind::Null => "null",
        InterfaceKind::AfPacket => "af_packet",
        InterfaceKind::Tap => "tap",
        InterfaceKind::AfXdp => "af_xdp",
    }
}

/// An interface's MAC: the configured one, or (kernel-backed interfaces) the host
/// interface's own.
fn interface_mac(cfg: &Config, i: usize) -> Result<EthernetAddress, ConfigError> {
    let ic = &cfg.interfaces[i];
    let f = format!("interface[{i}].mac");
    match (&ic.mac, ic.kind, ic.host_if.as_deref()) {
        (Some(m), _, _) => parse_field(cfg, &f, m, "a MAC address like 02:00:00:00:00:01"),
        (None, InterfaceKind::AfPacket | InterfaceKind::AfXdp, Some(h)) => match io::linux::mac(h) {
            Some(m) => Ok(EthernetAddress(m)),
            // A missing interface is the problem to report, not the MAC it cannot lend.
            None if io::linux::if_index(h).is_err() => {
                Err(cfg.err(format!("interface[{i}].host_if"), format!("host interface {h:?} does not exist")))
            }
            None => Err(cfg.err(f, format!("no `mac` given and host interface {h:?} has none to borrow"))),
        },
        // No host interface to lend one: that is the thing missing.
        (None, InterfaceKind::AfPacket | InterfaceKind::AfXdp, None) => Err(cfg.err(
            format!("interface[{i}].host_if"),
            format!("an {} interface needs `host_if`, the host interface to bind to", kind_name(ic.kind)),
        )),
        (None, kind, _) => Err(cfg.err(
            f,
            format!(
                "missing: a {} interface needs a `mac` like 02:00:00:00:00:01 (af_packet and af_xdp borrow their host interface's)",
                kind_name(kind)
            ),
        )),
    }
}

/// One interface's L3 view, checked on its own (see `check_addresses` for what
/// involves several).
pub(crate) fn interface_spec(cfg: &Config, i: usize) -> Result<InterfaceSpec, ConfigError> {
    let ic = &cfg.interfaces[i];
    let f = |n: &str| format!("interface[{i}].{n}");
    if cfg.interfaces[..i].iter().any(|o| o.name == ic.name) {
        return Err(cfg.err(f("name"), format!("{:?} is already the name of another interface", ic.name)));
    }
    if ic.name.is_empty() || ic.name.len() > 32 {
        return Err(cfg.err(f("name"), "expected 1 to 32 characters"));
    }
    // Two sockets on one host interface would each receive (and forward) every frame.
    if let Some((j, o)) =
        ic.host_if.as_ref().and_then(|h| cfg.interfaces[..i].iter().enumerate().find(|(_, o)| o.host_if.as_ref() == Some(h)))
    {
        let h = ic.host_if.as_deref().unwrap_or_default();
        return Err(cfg.err(
            f("host_if"),
            format!("{h:?} is already interface[{j}]'s ({}) host interface: expected each host interface once", o.name),
        ));
    }
    let mac = interface_mac(cfg, i)?;
    if !mac.is_unicast() {
        return Err(cfg.err(f("mac"), format!("{mac}: expected a unicast MAC (group bit clear)")));
    }
    let mut addresses = Vec::new();
    for (j, a) in ic.addresses.iter().enumerate() {
        let ia: IfAddr = parse_field(cfg, &format!("interface[{i}].addresses[{j}]"), a, "ADDRESS/LENGTH, e.g. 198.18.0.1/24")?;
        addresses.push(ia);
    }
    let min_mtu = if addresses.iter().any(|a| a.addr.is_ipv6()) { 1280 } else { 68 };
    // Frames above the regular buffer size travel in the pool's large buffers.
    // A link that takes parcels may carry a 64 KiB parcel whole (the large buffers hold it).
    let max_mtu = if ic.parcels { u16::MAX } else { MAX_MTU };
    if ic.parcels && i >= 64 {
        return Err(cfg.err(f("parcels"), "only the first 64 interfaces may take parcels"));
    }
    if ic.urpf != ip::urpf::Urpf::Off && i >= 64 {
        return Err(cfg.err(f("urpf"), "only the first 64 interfaces may check sources"));
    }
    if ic.mtu < min_mtu || ic.mtu > max_mtu {
        return Err(cfg.err(f("mtu"), format!("{}: expected {min_mtu} to {max_mtu} bytes", ic.mtu)));
    }
    let af_packet_keys =
        ic.vnet_hdr.is_some() || ic.rx_retire_ms.is_some() || ic.rx_ring.is_some() || ic.rx_frame_size.is_some() || ic.rx_frames.is_some();
    let af_xdp_keys = ic.xdp_mode.is_some() || ic.zero_copy.is_some() || ic.xdp_frames.is_some() || ic.xdp_frame_size.is_some();
    if af_xdp_keys && ic.kind != InterfaceKind::AfXdp {
        return Err(cfg.err(f("xdp_mode"), "`xdp_mode`, `zero_copy`, `xdp_frames` and `xdp_frame_size` are for af_xdp interfaces"));
    }
    match ic.kind {
        InterfaceKind::Pcap if ic.input.is_none() && ic.output.is_none() => {
            return Err(cfg.err(f("input"), "a pcap interface needs `input`, `output` or both"));
        }
        InterfaceKind::Pg | InterfaceKind::Null | InterfaceKind::AfPacket | InterfaceKind::Tap | InterfaceKind::AfXdp
            if ic.input.is_some() || ic.output.is_some() =>
        {
            return Err(cfg.err(f("input"), "only pcap interfaces take `input`/`output` files"));
        }
        InterfaceKind::AfPacket | InterfaceKind::AfXdp if ic.host_if.is_none() => {
            return Err(
                cfg.err(f("host_if"), format!("an {} interface needs `host_if`, the host interface to bind to", kind_name(ic.kind)))
            );
        }
        InterfaceKind::AfXdp if af_packet_keys => {
            return Err(cfg.err(
                f("vnet_hdr"),
                "`vnet_hdr`, `rx_ring`, `rx_frame_size`, `rx_frames` and `rx_retire_ms` are for af_packet interfaces",
            ));
        }
        InterfaceKind::AfXdp if ic.xdp_frames.is_some_and(|n| !n.is_power_of_two() || !(64..=1 << 20).contains(&n)) => {
            return Err(cfg.err(f("xdp_frames"), "expected a power of two from 64 to 1048576"));
        }
        InterfaceKind::AfXdp if ic.xdp_frame_size.is_some_and(|n| n != 2048 && n != 4096) => {
            return Err(cfg.err(f("xdp_frame_size"), "expected 2048 or 4096"));
        }
        InterfaceKind::Tap if ic.host_if.as_deref().is_none_or(|n| n.is_empty() || n.len() > 15) => {
            return Err(cfg.err(f("host_if"), "a tap interface needs `host_if`: the name of the TAP device to create (1 to 15 bytes)"));
        }
        InterfaceKind::Tap if af_packet_keys => {
            return Err(cfg.err(
                f("vnet_hdr"),
                "`vnet_hdr`, `rx_ring`, `rx_frame_size`, `rx_frames` and `rx_retire_ms` are for af_packet interfaces",
            ));
        }
        InterfaceKind::Pg | InterfaceKind::Null | InterfaceKind::Pcap if ic.host_if.is_some() || af_packet_keys => {
            return Err(cfg.err(
                f("host_if"),
                "`host_if` is for af_packet, af_xdp and tap interfaces; `vnet_hdr`, `rx_ring`, `rx_frame_size`, `rx_frames` and `rx_retire_ms` for af_packet",
            ));
        }
        _ => {}
    }
    Ok(InterfaceSpec { name: ic.name.clone(), mac, mtu: ic.mtu, addresses })
}

/// Build router and GTP-U state from the config (no devices). Every error of the file
/// is reported at once (see `config::Problems`); a stage whose input had errors is
/// skipped, so no error is a consequence of another. The feature sections' entries are
/// checked on their own beside it, so their errors come in the same run.
pub fn build_state(cfg: &Config) -> Result<(RouterState, GtpuState, UdpTunState), ConfigError> {
    let mut problems = crate::config::Problems::default();
    let core = problems.take(build_core_state(cfg));
    crate::validate::check_feature_entries(cfg, &mut problems);
    problems.check()?;
    Ok(core.expect("no error, so built"))
}

fn build_core_state(cfg: &Config) -> Result<(RouterState, GtpuState, UdpTunState), ConfigError> {
    let mut problems = crate::config::Problems::default();
    if let Some(n) = cfg.metrics.top_tunnels.filter(|&n| n > crate::metrics::MAX_TOP_TUNNELS) {
        problems.push(cfg.err("metrics.top_tunnels", format!("{n}: expected 0 to {}", crate::metrics::MAX_TOP_TUNNELS)));
    }
    if let Some(Err(e)) = cfg.metrics.listen.as_deref().map(crate::metrics::parse_listen) {
        problems.push(cfg.err("metrics.listen", e));
    }
    if cfg.interfaces.is_empty() {
        problems.push(cfg.err("interface", format!("no interface: {}", crate::validate::MINIMAL_CONFIG)));
    }
    let specs: Vec<InterfaceSpec> = (0..cfg.interfaces.len()).filter_map(|i| problems.take(interface_spec(cfg, i))).collect();
    crate::validate::check_addresses(cfg, &specs, &mut problems);
    problems.check()?;
    crate::validate::check_once(cfg, &mut problems);
    let mut state = RouterState::new(specs).map_err(|e| cfg.err("interface", e.to_string()))?;
    state.set_parcel_links(cfg.interfaces.iter().enumerate().filter(|(_, ic)| ic.parcels).fold(0, |m, (i, _)| m | 1 << i));
    for (i, ic) in cfg.interfaces.iter().enumerate() {
        state.set_urpf(IfIndex(i as u16), ic.urpf);
    }
    let mut neighbour_ips: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for (i, n) in cfg.neighbours.iter().enumerate() {
        let r = (|| {
            let ipa = parse_ip(cfg, &format!("neighbour[{i}].ip"), &n.ip)?;
            let mac: EthernetAddress = parse_field(cfg, &format!("neighbour[{i}].mac"), &n.mac, "a MAC address")?;
            if !mac.is_unicast() || mac.0 == [0; 6] {
                let what = if mac.is_broadcast() {
                    "the broadcast MAC"
                } else if mac.0 == [0; 6] {
                    "all zero"
                } else {
                    "a multicast MAC"
                };
                return Err(cfg.err(format!("neighbour[{i}].mac"), format!("{mac} is {what}: expected a neighbour's unicast MAC")));
            }
            if let Some(first) = neighbour_ips.insert(ipa, i) {
                return Err(cfg.err(format!("neighbour[{i}].ip"), format!("{ipa} is already neighbour[{first}]: each neighbour once")));
            }
            state.add_static_neighbour(&n.interface, ipa, mac).map_err(|e| cfg.err(format!("neighbour[{i}]"), e.to_string()))
        })();
        problems.take(r);
    }
    // Tunnels before routes, so routes can name them (`interface = "gtpu_tunnel0"`).
    let mut gtpu = GtpuState::new(cfg.gtpu.techniques);
    gtpu.counters.set_enabled(cfg.metrics.tunnel_counters);
    let mut specs = Vec::with_capacity(cfg.gtpu_tunnels.len());
    let mut keys = std::collections::HashMap::new();
    for (i, t) in cfg.gtpu_tunnels.iter().enumerate() {
        let Some(spec) = problems.take(t.to_spec(&state).map_err(|(f, m)| cfg.err(format!("gtpu_tunnel[{i}].{f}"), m))) else { continue };
        // A tunnel is known by its key (local address, teid_in) until it has an id.
        if let Some(first) = keys.insert((spec.local, spec.teid_in), i) {
            let why =
                format!("local {} teid_in {} is already the key of gtpu_tunnel[{first}]: expected each key once", spec.local, spec.teid_in);
            problems.push(cfg.err(format!("gtpu_tunnel[{i}].teid_in"), why));
        }
        specs.push(spec);
    }
    if problems.is_empty() {
        problems.take(gtpu.create_many(&mut state, specs).map_err(|(i, e)| cfg.err(format!("gtpu_tunnel[{i}]"), e.to_string())));
    }
    let mut udp = UdpTunState::new();
    udp.counters.set_enabled(cfg.metrics.tunnel_counters);
    for (i, t) in cfg.udp_tunnels.iter().enumerate() {
        let r = t.to_spec().map_err(|(f, m)| cfg.err(format!("udp_tunnel[{i}].{f}"), m)).and_then(|(spec, routes)| {
            udp.create(&mut state, spec, &routes).map_err(|e| cfg.err(format!("udp_tunnel[{i}]"), e.to_string()))
        });
        problems.take(r);
    }
    // Routes may name the tunnels: only checked once they all exist.
    problems.check()?;
    let mut routes = Vec::new();
    let mut prefixes: BTreeMap<Prefix, usize> = BTreeMap::new();
    for (i, r) in cfg.routes.iter().enumerate() {
        let route = (|| {
            let prefix: Prefix = parse_field(cfg, &format!("route[{i}].prefix"), &r.prefix, "a prefix like 198.19.0.0/16")?;
            if let Some(first) = prefixes.insert(prefix, i) {
                return Err(cfg
                    .err(format!("route[{i}].prefix"), format!("{prefix} is already route[{first}]'s prefix: expected each prefix once")));
            }
            let target = crate::fib::target_from_fields(r.via.as_deref(), r.interface.as_deref(), r.blackhole, &r.paths, str::to_string)
                .map_err(|(f, m)| cfg.err(format!("route[{i}]{f}"), m))?;
            let target = resolve_target(&gtpu, &udp, &state, target).map_err(|m| cfg.err(format!("route[{i}].interface"), m))?;
            Ok((prefix, target))
        })();
        routes.extend(problems.take(route));
    }
    problems.check()?;
    state.add_routes(routes).map_err(|(i, e)| cfg.err(format!("route[{i}]"), e.to_string()))?;
    gtpu.refresh_outer(&mut state);
    udp.refresh_outer(&mut state);
    state.set_udp_demux(udp_demux(&gtpu, &udp));
    crate::punt::apply(cfg, &mut state)?;
    Ok((state, gtpu, udp))
}

/// The one way text fields become a `RouteTarget` (config and API alike).
pub fn route_target(via: Option<&str>, interface: Option<&str>, blackhole: bool) -> Result<RouteTarget, String> {
    match (via, interface, blackhole) {
        (None, None, true) => Ok(RouteTarget::Blackhole),
        (Some(_), _, true) | (_, Some(_), true) => Err("a blackhole route takes neither `via` nor `interface`".into()),
        (Some(v), i, false) => {
            let next_hop: IpAddr = v.parse().map_err(|_| format!("via {v:?}: expected an IPv4 or IPv6 address"))?;
            Ok(RouteTarget::Via { next_hop, interface: i.map(str::to_string) })
        }
        (None, Some(i), false) => Ok(RouteTarget::Interface(i.to_string())),
        (None, None, false) => Err("expected `via`, `interface` or `blackhole = true`".into()),
    }
}

fn stream_specs(cfg: &Config) -> Result<BTreeMap<String, Vec<io::pg::StreamSpec>>, ConfigError> {
    use io::pg::{Field, L4Spec, ModifierSpec, PacketSpec, Pattern, StreamSpec};
    let mut by_if: BTreeMap<String, Vec<StreamSpec>> = BTreeMap::new();
    for (i, s) in cfg.streams.iter().enumerate() {
        let f = |n: &str| format!("stream[{i}].{n}");
        let Some(ic) = cfg.interfaces.iter().find(|x| x.name == s.interface) else {
            return Err(cfg.err(f("interface"), format!("{:?}: expected the name of a pg interface", s.interface)));
        };
        if ic.kind != InterfaceKind::Pg {
            return Err(
                cfg.err(f("interface"), format!("{:?} is a {} interface; streams need a pg interface", s.interface, kind_name(ic.kind)))
            );
        }
        let src = parse_ip(cfg, &f("src"), &s.src)?;
        let dst = parse_ip(cfg, &f("dst"), &s.dst)?;
        let src_mac: EthernetAddress =
            parse_field(cfg, &f("src_mac"), s.src_mac.as_deref().unwrap_or("02:fe:00:00:00:01"), "a MAC address")?;
        let if_mac = cfg.interfaces.iter().position(|x| x.name == s.interface).map(|k| interface_mac(cfg, k)).transpose()?;
        let dst_mac: EthernetAddress = match s.dst_mac.as_deref() {
            Some(m) => parse_field(cfg, &f("dst_mac"), m, "a MAC address")?,
            None => if_mac.expect("the stream's interface was found above"),
        };
        // The frame's length: `size`, but an esp stream's is its sealed packet's.
        let mut frame_size = s.size;
        let l4 = match s.protocol {
            StreamProtocol::Udp => L4Spec::Udp { src_port: s.src_port, dst_port: s.dst_port },
            StreamProtocol::Tcp => L4Spec::Tcp { src_port: s.src_port, dst_port: s.dst_port, flags: s.tcp_flags },
            StreamProtocol::IcmpEcho => L4Spec::IcmpEcho { ident: s.src_port, seq: 1 },
            StreamProtocol::Gtpu => {
                let (Some(teid), Some(isrc), Some(idst)) = (s.teid, s.inner_src.as_deref(), s.inner_dst.as_deref()) else {
                    return Err(cfg.err(f("protocol"), "a gtpu stream needs `teid`, `inner_src` and `inner_dst`"));
                };
                let inner_src = parse_ip(cfg, &f("inner_src"), isrc)?;
                let inner_dst = parse_ip(cfg, &f("inner_dst"), idst)?;
                L4Spec::Gtpu { teid, inner_src, inner_dst, checksum: s.udp_checksum.unwrap_or(true) }
            }
            StreamProtocol::Gue => {
                let (Some(isrc), Some(idst)) = (s.inner_src.as_deref(), s.inner_dst.as_deref()) else {
                    return Err(cfg.err(f("protocol"), "a gue stream needs `inner_src` and `inner_dst`"));
                };
                let inner_src = parse_ip(cfg, &f("inner_src"), isrc)?;
                let inner_dst = parse_ip(cfg, &f("inner_dst"), idst)?;
                // A GUE variant 0 data header naming the inner protocol (IPIP or IPv6).
                let proto = if inner_src.is_ipv4() { 4 } else { 41 };
                L4Spec::UdpTunnel { dst_port: s.dst_port, header: vec![0, proto, 0, 0], inner_src, inner_dst }
            }
            StreamProtocol::Esp => {
                let (l4, len) = esp_stream_payload(cfg, i, s, src, dst)?;
                frame_size = len;
                l4
            }
        };
        if s.protocol != StreamProtocol::Gtpu && (s.teid.is_some() || s.udp_checksum.is_some()) {
            return Err(cfg.err(f("teid"), "`teid` and `udp_checksum` are for protocol = \"gtpu\" streams"));
        }
        if s.protocol != StreamProtocol::Esp && s.sa.is_some() {
            return Err(cfg.err(f("sa"), "`sa` is for protocol = \"esp\" streams"));
        }
        if !matches!(s.protocol, StreamProtocol::Gtpu | StreamProtocol::Gue | StreamProtocol::Esp)
            && (s.inner_src.is_some() || s.inner_dst.is_some())
        {
            return Err(cfg.err(f("inner_src"), "`inner_src` and `inner_dst` are for protocol = \"gtpu\", \"gue\" and \"esp\" streams"));
        }
        if s.protocol == StreamProtocol::Esp && !s.modify.is_empty() {
            return Err(cfg.err(f("modify"), "an esp stream resends one sealed packet: expected no modifiers (they would break its ICV)"));
        }
        let mut modifiers = Vec::new();
        for (j, m) in s.modify.iter().enumerate() {
            let pattern = match (m.increment, m.random) {
                (Some(n), None) => Pattern::Increment { count: n },
                (None, Some(n)) => Pattern::Random { count: n },
                _ => return Err(cfg.err(format!("stream[{i}].modify[{j}]"), "expected exactly one of `increment` or `random`")),
            };
            let field = match m.field {
                ModifyField::Src => Field::SrcAddr,
                ModifyField::Dst => Field::DstAddr,
                ModifyField::SrcPort => Field::SrcPort,
                ModifyField::DstPort => Field::DstPort,
                ModifyField::Teid => Field::Teid,
            };
            modifiers.push(ModifierSpec { field, pattern });
        }
        if s.rate == Some(0) {
            return Err(cfg.err(f("rate"), "expected at least 1 packet per second (omit it for line rate)"));
        }
        let spec = StreamSpec {
            name: s.name.clone(),
            packet: PacketSpec { src_mac, dst_mac, src, dst, ttl: s.ttl, l4, frame_size },
            modifiers,
            count: s.count,
            rate_pps: s.rate,
        };
        // Build it once now so template errors name this stream.
        io::pg::PacketGenerator::new(std::slice::from_ref(&spec)).map_err(|(_, e)| cfg.err(format!("stream[{i}]"), e.to_string()))?;
        by_if.entry(s.interface.clone()).or_default().push(spec);
    }
    Ok(by_if)
}

/// The payload of stream `i`, `protocol = "esp"`, and its frame's length: an inner UDP
/// packet from `inner_src` to `inner_dst` (`size` its frame's length before encryption),
/// sealed as the peer of inbound SA `sa` sends it, from `src` (the SA's `remote`) to
/// `dst` (its `local`).
fn esp_stream_payload(cfg: &Config, i: usize, s: &StreamConfig, src: IpAddr, dst: IpAddr) -> Result<(io::pg::L4Spec, usize), ConfigError> {
    use io::pg::{L4Spec, PacketSpec};
    let f = |n: &str| format!("stream[{i}].{n}");
    let (Some(index), Some(isrc), Some(idst)) = (s.sa, s.inner_src.as_deref(), s.inner_dst.as_deref()) else {
        return Err(cfg.err(f("protocol"), "an esp stream needs `sa` (an inbound SA's index), `inner_src` and `inner_dst`"));
    };
    let Some(sa) = cfg.ipsec_sas.iter().find(|c| c.index == index && c.direction == ipsec::Direction::Inbound) else {
        return Err(cfg.err(f("sa"), format!("{index}: expected the index of an inbound [[ipsec_sa]]")));
    };
    if sa.anti_replay {
        return Err(cfg.err(
            f("sa"),
            format!("SA {index} has anti_replay on: an esp stream resends one sealed packet, which its window drops as a replay; expected anti_replay = false on it"),
        ));
    }
    for (field, addr, want, what) in [("src", src, &sa.remote, "remote"), ("dst", dst, &sa.local, "local")] {
        if want.parse::<IpAddr>().ok() != Some(addr) {
            return Err(cfg.err(f(field), format!("{addr}: expected SA {index}'s {what} ({want})")));
        }
    }
    let inner_src = parse_ip(cfg, &f("inner_src"), isrc)?;
    let inner_dst = parse_ip(cfg, &f("inner_dst"), idst)?;
    let mac = EthernetAddress([2, 0, 0, 0, 0, 0]);
    let inner = PacketSpec {
        src_mac: mac,
        dst_mac: mac,
        src: inner_src,
        dst: inner_dst,
        ttl: s.ttl,
        l4: L4Spec::Udp { src_port: s.src_port, dst_port: s.dst_port },
        frame_size: s.size,
    };
    let frame = io::pg::template(&inner).map_err(|e| cfg.err(f("size"), e.to_string()))?;
    let sealed = sa.peer_packet(&frame[14..]).map_err(|(field, m)| cfg.err(f(&format!("sa ({field})")), m))?;
    let unreadable = |e: String| cfg.err(f("sa"), format!("the sealed packet: {e}"));
    let (protocol, l3) = match src {
        IpAddr::V4(_) => wire::ipv4::Ipv4Packet::new_checked(&sealed[..])
            .map(|h| (h.protocol(), h.header_len()))
            .map_err(|e| unreadable(e.to_string()))?,
        IpAddr::V6(_) => {
            wire::ipv6::Ipv6Packet::new_checked(&sealed[..]).map(|h| (h.next_header(), 40)).map_err(|e| unreadable(e.to_string()))?
        }
    };
    Ok((L4Spec::Payload { protocol: protocol.into(), payload: sealed[l3..].to_vec() }, 14 + sealed.len()))
}

/// Everything a running dataplane is made of.
pub struct Assembly {
    pub control: Control,
    /// One per `dataplane.workers`, each with its own devices, pool and graph.
    pub workers: Vec<Worker<WorkerContext>>,
}

impl Assembly {
    /// The one worker of a single-worker dataplane (pcap runs, benchmarks).
    pub fn into_single(mut self) -> (Control, Worker<WorkerContext>) {
        let w = self.workers.swap_remove(0);
        (self.control, w)
    }
}

/// The most workers a dataplane runs.
pub const MAX_WORKERS: usize = 64;

/// The most buffers of each class a worker's pool holds (about 4.5 GiB of regular and
/// 1 GiB of large buffers): a pool is allocated whole at start-up, so a mistyped count
/// must be an error, not an allocation that takes the machine's memory.
pub const MAX_BUFFERS: usize = 1 << 21;
pub const MAX_LARGE_BUFFERS: usize = 4096;
/// The most medium buffers per worker (16 KiB each: 1 GiB).
pub const MAX_MEDIUM_BUFFERS: usize = 65536;

/// Workers share the receive load of an af_packet interface through a fanout group
/// (the kernel hashes each flow to one worker's socket, so a flow stays in order).
fn check_workers(cfg: &Config) -> Result<(), ConfigError> {
    let n = cfg.dataplane.workers;
    if n == 0 || n > MAX_WORKERS {
        return Err(cfg.err("dataplane.workers", format!("{n}: expected 1 to {MAX_WORKERS}")));
    }
    if !cfg.dataplane.worker_cores.is_empty() && cfg.dataplane.worker_cores.len() != n {
        return Err(cfg.err(
            "dataplane.worker_cores",
            format!("{} cores for {n} workers: expected one core per worker", cfg.dataplane.worker_cores.len()),
        ));
    }
    // Pinning to a core the process may not run on fails, and polling workers sharing a
    // core take turns at it: refused here rather than noticed in the rates.
    let allowed: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect();
    let pinned: Vec<(String, usize)> = match cfg.dataplane.worker_cores.is_empty() {
        true => cfg.dataplane.worker_core.map(|c| ("dataplane.worker_core".to_string(), c)).into_iter().collect(),
        false => cfg.dataplane.worker_cores.iter().enumerate().map(|(k, &c)| (format!("dataplane.worker_cores[{k}]"), c)).collect(),
    };
    for (k, (field, c)) in pinned.iter().enumerate() {
        if !allowed.is_empty() && !allowed.contains(c) {
            return Err(cfg.err(field, format!("core {c}: expected one of the cores this process may run on ({allowed:?})")));
        }
        if let Some((other, _)) = pinned[..k].iter().find(|(_, o)| o == c) {
            return Err(cfg.err(field, format!("core {c} is already {other}'s: expected a core per worker")));
        }
    }
    if !(1..=MAX_BUFFERS).contains(&cfg.dataplane.buffers) {
        return Err(cfg.err("dataplane.buffers", format!("{}: expected 1 to {MAX_BUFFERS}", cfg.dataplane.buffers)));
    }
    if cfg.dataplane.large_buffers > MAX_LARGE_BUFFERS {
        return Err(cfg.err("dataplane.large_buffers", format!("{}: expected 0 to {MAX_LARGE_BUFFERS}", cfg.dataplane.large_buffers)));
    }
    if cfg.dataplane.medium_buffers > MAX_MEDIUM_BUFFERS {
        return Err(cfg.err("dataplane.medium_buffers", format!("{}: expected 0 to {MAX_MEDIUM_BUFFERS}", cfg.dataplane.medium_buffers)));
    }
    if cfg.dataplane.neighbour_hold > ip::hold::HOLD_MAX {
        return Err(cfg.err("dataplane.neighbour_hold", format!("{}: expected 0 to {}", cfg.dataplane.neighbour_hold, ip::hold::HOLD_MAX)));
    }
    cfg.dataplane.reassembly.check().map_err(|(field, why)| cfg.err(format!("dataplane.reassembly.{field}"), why))
}

/// Which workers own an interface's device; the others reach it through handoff lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Every worker opens its own: an af_packet socket in a fanout group, af_xdp
    /// sockets on its share of the queues, a null sink.
    Everywhere,
    /// Workers `0..m` own one each (a TAP device, a generator, a pcap file: `m` = 1; an
    /// af_xdp interface with `m` queues, fewer than the workers). Worker `k >= m` hands
    /// what it sends there to worker `k % m`; owners spread what they receive by flow.
    Owners(usize),
}

impl Placement {
    /// How many workers own a device for this interface.
    fn owners(self, workers: usize) -> usize {
        match self {
            Placement::Everywhere => workers,
            Placement::Owners(m) => m,
        }
    }
}

fn placements(cfg: &Config, programs: &[Option<Arc<io::af_xdp::XdpRedirect>>]) -> Vec<Placement> {
    cfg.interfaces.iter().zip(programs).map(|(ic, prog)| placement(ic.kind, cfg.dataplane.workers, prog.as_deref())).collect()
}

/// Where an interface of `kind` runs among `n` workers.
fn placement(kind: InterfaceKind, n: usize, prog: Option<&io::af_xdp::XdpRedirect>) -> Placement {
    match kind {
        _ if n == 1 => Placement::Everywhere,
        InterfaceKind::AfPacket | InterfaceKind::Null => Placement::Everywhere,
        InterfaceKind::AfXdp => {
            let q = prog.map_or(1, |p| p.queues() as usize);
            if q >= n {
                Placement::Everywhere
            } else {
                Placement::Owners(q)
            }
        }
        InterfaceKind::Tap | InterfaceKind::Pg | InterfaceKind::Pcap => Placement::Owners(1),
    }
}

/// How many of `n` workers own the device of an interface of `kind` (the others send
/// through their lanes).
pub(crate) fn owners(kind: InterfaceKind, n: usize) -> usize {
    placement(kind, n, None).owners(n)
}

/// Attach the XDP program of every af_xdp interface, once for all workers.
fn attach_xdp(cfg: &Config) -> Result<Vec<Option<Arc<io::af_xdp::XdpRedirect>>>, ConfigError> {
    let mut out = Vec::with_capacity(cfg.interfaces.len());
    for (i, ic) in cfg.interfaces.iter().enumerate() {
        if ic.kind != InterfaceKind::AfXdp {
            out.push(None);
            continue;
        }
        let host_if = ic.host_if.as_deref().expect("validated in build_state");
        let field = format!("interface[{i}].host_if");
        let ifindex = io::linux::if_index(host_if).map_err(|e| cfg.err(&field, e.to_string()))?;
        let queues = io::linux::rx_queues(host_if).max(1);
        let mode = ic.xdp_mode.map(|m| match m {
            crate::config::XdpModeConfig::Native => io::af_xdp::XdpMode::Native,
            crate::config::XdpModeConfig::Generic => io::af_xdp::XdpMode::Generic,
        });
        let p = io::af_xdp::XdpRedirect::attach(host_if, ifindex, queues as u32, mode).map_err(|e| cfg.err(&field, e.to_string()))?;
        out.push(Some(Arc::new(p)));
    }
    Ok(out)
}

/// The core worker `k` is pinned to, if any.
pub fn worker_core(cfg: &Config, k: usize) -> Option<usize> {
    match cfg.dataplane.worker_cores.get(k) {
        Some(&c) => Some(c),
        None if k == 0 => cfg.dataplane.worker_core,
        None => None,
    }
}

/// `[pfcp]`'s UE pools as routes into the UPF's downlink, once its N3 addresses are
/// checked.
fn add_ue_pools(cfg: &Config, state: &mut RouterState) -> Result<(), ConfigError> {
    let Some(p) = &cfg.pfcp else { return Ok(()) };
    p.check_n3(state).map_err(|(f, m)| cfg.err(format!("pfcp.{f}"), m))?;
    let routes = p.pool_routes().map_err(|(f, m)| cfg.err(format!("pfcp.{f}"), m))?;
    // Owned by `[pfcp]`: `ip route del` refuses them, naming the pool.
    state
        .add_owned_routes(&routes)
        .map_err(|(i, e)| cfg.err(if matches!(routes[i].0, Prefix::V4(..)) { "pfcp.ue_pool" } else { "pfcp.ue_pool6" }, e.to_string()))
}

/// Every check start-up makes of a file that needs no device, on scratch state
/// (`vecgate check`, and a reload before it changes anything): the core sections, the
/// workers and generators, then what the feature sections need of them, every error of
/// a stage reported together. Host interfaces, XDP and pcap files are only opened by
/// [`assemble`].
pub fn check(cfg: &Config) -> Result<(), ConfigError> {
    let mut problems = crate::config::Problems::default();
    let built = problems.take(build_state(cfg));
    problems.take(check_workers(cfg));
    problems.take(stream_specs(cfg));
    problems.check()?;
    let (mut state, gtpu, udp) = built.expect("no errors, so it was built");
    if let Some(x) = problems.take(crate::ipsec::build_state(cfg, &mut state)) {
        // Node ports are checked against every tunnel's port.
        set_udp_demux(&mut state, &gtpu, &udp, &x);
    }
    problems.take(crate::lb::LbControl::from_config(cfg, &mut state));
    problems.take(crate::spd::build_state(cfg, &state));
    problems.take(add_ue_pools(cfg, &mut state));
    problems.check()
}

/// Validate the whole configuration and build the dataplane. Nothing runs yet.
pub fn assemble(cfg: &Config) -> Result<Assembly, ConfigError> {
    // Independent checks all report before anything is opened.
    let mut problems = crate::config::Problems::default();
    let built = problems.take(build_state(cfg));
    problems.take(check_workers(cfg));
    let streams = problems.take(stream_specs(cfg));
    problems.check()?;
    let ((mut state, gtpu, udp), mut streams) = built.zip(streams).expect("no errors, so both were built");
    let ipsec = crate::ipsec::build_state(cfg, &mut state)?;
    set_udp_demux(&mut state, &gtpu, &udp, &ipsec);
    let programs = attach_xdp(cfg)?;
    let placement = placements(cfg, &programs);
    let lanes = if cfg.dataplane.workers > 1 { engine::handoff::mesh(cfg.dataplane.workers) } else { Vec::new() };
    let mut per_worker = Vec::with_capacity(cfg.dataplane.workers);
    let mut details = Vec::new();
    for k in 0..cfg.dataplane.workers {
        let (devices, d) = open_devices(cfg, k, &mut streams, &programs, &placement, lanes.get(k))?;
        per_worker.push(devices);
        if k == 0 {
            details = d;
        }
    }
    // Receive handoff per input kind: the interfaces of a kind share one input node.
    let spread: Vec<InterfaceKind> =
        cfg.interfaces.iter().zip(&placement).filter(|(_, p)| matches!(p, Placement::Owners(_))).map(|(ic, _)| ic.kind).collect();
    let lanes_to = lanes.iter().map(|l| l.to.clone()).collect();
    let mut lanes = lanes.into_iter();
    let lanes: Vec<Option<engine::handoff::HandoffEnds>> = (0..cfg.dataplane.workers).map(|_| lanes.next()).collect();
    let mut a = build(cfg, state, gtpu, udp, ipsec, per_worker, details, lanes, &spread)?;
    a.control.lanes_to = lanes_to;
    Ok(a)
}

/// Worker `k`'s devices, one per interface, and how each was opened where that varies.
fn open_devices(
    cfg: &Config,
    k: usize,
    streams: &mut BTreeMap<String, Vec<io::pg::StreamSpec>>,
    programs: &[Option<Arc<io::af_xdp::XdpRedirect>>],
    placement: &[Placement],
    lanes: Option<&engine::handoff::HandoffEnds>,
) -> Result<(Vec<Box<dyn Device>>, Vec<Option<String>>), ConfigError> {
    let mut devices: Vec<Box<dyn Device>> = Vec::new();
    let mut details = Vec::new();
    for i in 0..cfg.interfaces.len() {
        let owners = placement[i].owners(cfg.dataplane.workers);
        let to = lanes.map(|l| l.to.as_slice()).unwrap_or_default();
        let (dev, detail) = open_device(cfg, i, IfIndex(i as u16), k, owners, streams, programs[i].clone(), to)?;
        devices.push(dev);
        details.push(detail);
    }
    Ok((devices, details))
}

/// Worker `k`'s device for `cfg.interfaces[i]`, which runs as interface `if_index` and
/// whose device `owners` workers own (the others send through their lane `to[owner]`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_device(
    cfg: &Config,
    i: usize,
    if_index: IfIndex,
    k: usize,
    owners: usize,
    streams: &mut BTreeMap<String, Vec<io::pg::StreamSpec>>,
    program: Option<Arc<io::af_xdp::XdpRedirect>>,
    to: &[Option<engine::handoff::LaneTx>],
) -> Result<(Box<dyn Device>, Option<String>), ConfigError> {
    let ic = &cfg.interfaces[i];
    if k >= owners {
        // Not an owner: what this worker sends there goes to an owner's lane.
        let owner = k % owners;
        let lane = to.get(owner).cloned().flatten().expect("lanes exist with more than one worker");
        return Ok((Box::new(engine::handoff::HandoffTx::new(lane, if_index)), None));
    }
    let mut detail = None;
    let dev: Box<dyn Device> = match ic.kind {
        InterfaceKind::Pg => {
            let specs = streams.remove(&ic.name).unwrap_or_default();
            Box::new(io::pg::PacketGenerator::new(&specs).map_err(|(s, e)| cfg.err(format!("stream {s:?}"), e.to_string()))?)
        }
        InterfaceKind::Null => Box::new(io::null::NullSink),
        InterfaceKind::AfPacket => {
            let host_if = ic.host_if.as_deref().expect("validated in build_state");
            let mut c = io::af_packet::AfPacketConfig::new(host_if);
            c.vnet_hdr = ic.vnet_hdr.unwrap_or(true);
            c.retire_ms = ic.rx_retire_ms.unwrap_or(c.retire_ms);
            if cfg.dataplane.workers > 1 {
                // One group per interface, unique to this process.
                c.fanout = Some((std::process::id() as u16).wrapping_mul(64).wrapping_add(if_index.0));
            }
            if ic.rx_ring == Some(crate::config::RxRing::V2) {
                c.ring = io::af_packet::RingVersion::V2;
            }
            c.v2_frame_size = ic.rx_frame_size.unwrap_or(c.v2_frame_size);
            c.v2_slots = ic.rx_frames.unwrap_or(c.v2_slots);
            Box::new(io::af_packet::AfPacket::open(c).map_err(|e| cfg.err(format!("interface[{i}].host_if"), e.to_string()))?)
        }
        InterfaceKind::AfXdp => {
            let program = program.expect("attached in attach_xdp");
            let mut c = io::af_xdp::AfXdpConfig::new(ic.host_if.as_deref().expect("validated in build_state"));
            // Owner k takes every n-th queue, starting at k (n: the owners).
            c.queues = (0..program.queues()).filter(|q| *q as usize % owners == k).collect();
            c.frames = ic.xdp_frames.unwrap_or(c.frames);
            c.frame_size = ic.xdp_frame_size.unwrap_or(c.frame_size);
            c.bind = ic.zero_copy.map(|z| if z { io::af_xdp::BindMode::ZeroCopy } else { io::af_xdp::BindMode::Copy });
            let d = io::af_xdp::AfXdp::open(&c, program).map_err(|e| cfg.err(format!("interface[{i}].host_if"), e.to_string()))?;
            detail = Some(d.describe());
            Box::new(d)
        }
        InterfaceKind::Tap => {
            let name = ic.host_if.as_deref().expect("validated in build_state");
            Box::new(io::tap::Tap::open(name).map_err(|e| cfg.err(format!("interface[{i}].host_if"), e.to_string()))?)
        }
        InterfaceKind::Pcap => {
            let input = ic.input.as_ref().map(|p| cfg.resolve(p));
            let output = ic.output.as_ref().map(|p| cfg.resolve(p));
            Box::new(
                io::pcap::PcapDevice::open(input.as_deref(), output.as_deref())
                    .map_err(|e| cfg.err(format!("interface[{i}]"), e.to_string()))?,
            )
        }
    };
    Ok((dev, detail))
}

fn build(
    cfg: &Config,
    mut state: RouterState,
    mut gtpu: GtpuState,
    mut udp: UdpTunState,
    ipsec: ipsec::IpsecState,
    per_worker: Vec<Vec<Box<dyn Device>>>,
    details: Vec<Option<String>>,
    lanes: Vec<Option<engine::handoff::HandoffEnds>>,
    spread: &[InterfaceKind],
) -> Result<Assembly, ConfigError> {
    let lb = crate::lb::LbControl::from_config(cfg, &mut state)?;
    // SPD bindings before the IP tables: forwarded packets leaving by a bound interface
    // take `ipsecN-output` from the first vector on.
    let spd_state = crate::spd::build_state(cfg, &state)?;
    state.set_spd_links(crate::spd::links(&spd_state));
    // (A bad `[pfcp]` is reported when the endpoint opens.)
    let upf_n3 = cfg.pfcp.as_ref().and_then(|p| p.upf_config(0).ok()).map_or(Vec::new(), |c| crate::pfcp::n3_addresses(&c));
    set_tunnel_esp(&mut state, &gtpu, &udp, &ipsec, &spd_state, &upf_n3);
    // The UPF's UE pools route to upfN-downlink, and G-PDUs for TEIDs of no tunnel go to
    // upfN-uplink (with [pfcp]).
    if cfg.pfcp.is_some() {
        add_ue_pools(cfg, &mut state)?;
        gtpu.set_upf_uplink(true);
    }
    let upf_dp = crate::pfcp::UpfDataplane::new(cfg.pfcp.as_ref(), per_worker.len()).with_replies(cfg.gtpu.replies_per_sec);
    let tables = state.build();
    let shared = Arc::new(ArcSwap::from_pointee(tables));
    let (ev_tx, ev_rx) = crossbeam_channel::bounded(4096);
    let limits = Limits {
        icmp_errors_per_sec: cfg.dataplane.icmp_errors_per_sec,
        icmp_burst: 100,
        solicit_per_sec: cfg.dataplane.solicitations_per_sec,
        replies_per_sec: cfg.dataplane.replies_per_sec,
        reassembly: cfg.dataplane.reassembly.limits(),
        neighbour_hold: cfg.dataplane.neighbour_hold,
    };
    let gtpu_shared = Arc::new(ArcSwap::from_pointee(gtpu.build()));
    let (gev_tx, gev_rx) = crossbeam_channel::bounded(1024);
    let udptun_shared = Arc::new(ArcSwap::from_pointee(udp.build()));
    let (uev_tx, uev_rx) = crossbeam_channel::bounded(1024);
    let ipsec_shared = Arc::new(ArcSwap::from_pointee(ipsec.build()));
    let mut spd_gauges = Vec::new();
    let mut hold_gauges = Vec::new();
    let mut workers = Vec::with_capacity(per_worker.len());
    for (k, (devices, lanes)) in per_worker.into_iter().zip(lanes).enumerate() {
        let spd_cx = SpdContext::new(spd_state.shared(), cfg.spd.cache_size()).map_err(|e| cfg.err("spd.flow_cache", e.to_string()))?;
        spd_gauges.push(spd_cx.gauges());
        let gtpu_cx = GtpuContext::new(gtpu_shared.clone(), Some(gev_tx.clone()), cfg.gtpu.replies_per_sec);
        gtpu.counters.watch(gtpu_cx.counters.shared());
        let udptun_cx = UdpTunContext::new(udptun_shared.clone(), Some(uev_tx.clone()));
        udp.counters.watch(udptun_cx.counters.shared());
        let ip_cx = IpContext::new(shared.clone(), Some(ev_tx.clone()), limits);
        hold_gauges.push(ip_cx.hold.gauge());
        let cx = WorkerContext {
            ip: ip_cx,
            gtpu: gtpu_cx,
            udptun: udptun_cx,
            parcel: ParcelContext {
                verify_segments: cfg.dataplane.verify_parcel_segments,
                verify_in_transit: cfg.dataplane.verify_parcel_segments_in_transit,
                gso_links: crate::parcel::gso_links(cfg),
                ..ParcelContext::default()
            },
            lb: {
                let mut c = lb::LbContext::new(lb.shared.clone(), lb.limits);
                c.set_worker(k as u32, cfg.dataplane.workers as u32);
                c
            },
            ipsec: ipsec::IpsecContext::new(ipsec_shared.clone()),
            spd: spd_cx,
            upf: upf_dp.context(k),
        };
        workers.push(build_worker(cfg, k, devices, cx, lanes, spread)?);
    }
    let interfaces = cfg
        .interfaces
        .iter()
        .zip(details.into_iter().chain(std::iter::repeat(None)))
        .map(|(ic, detail)| InterfaceInfo { name: ic.name.clone(), kind: kind_name(ic.kind), detail, host_if: ic.host_if.clone() })
        .collect();
    let control = Control {
        state,
        gtpu,
        shared,
        gtpu_shared,
        udptun: udp,
        udptun_shared,
        udptun_events: uev_rx,
        recent_udptun_events: Default::default(),
        events: ev_rx,
        gtpu_events: gev_rx,
        recent_gtpu_events: Default::default(),
        ipsec,
        ipsec_shared,
        interfaces,
        workers: Vec::new(),
        graph_prev: None,
        pfcp: cfg
            .pfcp
            .as_ref()
            .map(|p| crate::pfcp::Pfcp::open(p, &upf_dp).map_err(|(f, m)| cfg.err(format!("pfcp.{f}"), m)))
            .transpose()?,
        lb,
        spd: spd_state,
        spd_gauges,
        hold_gauges,
        applied: cfg.clone(),
        config_path: None,
        punt_link: cfg.punt.as_ref().map(|p| p.interface.clone()).filter(|name| cfg.interfaces.iter().any(|ic| &ic.name == name)),
        punt_pass_on: (cfg.dataplane.workers > 1).then(|| punt_spreads(cfg, spread)),
        spread_kinds: spread.to_vec(),
        lanes_to: Vec::new(),
        link_poll: Default::default(),
        started: std::time::SystemTime::now(),
    };
    Ok(Assembly { control, workers })
}

/// One worker: its graph, pool and ports over its own devices. With several workers,
/// every worker's graph has `worker-handoff` (where the input kinds in `spread` go
/// first), `session-handoff` (where the others go first: it moves a load-balanced
/// connection's packets to the worker with its session), `resume-handoff` (where
/// `lbN-nat` sends a connection's packet it met away from its session's worker),
/// `handoff-input` (frames other workers handed over) and `handoff-resume-input`
/// (packets they resumed here); the graphs stay identical in shape, so their snapshots
/// merge node by node.
fn build_worker(
    cfg: &Config,
    k: usize,
    devices: Vec<Box<dyn Device>>,
    cx: WorkerContext,
    lanes: Option<engine::handoff::HandoffEnds>,
    spread: &[InterfaceKind],
) -> Result<Worker<WorkerContext>, ConfigError> {
    let mut g = GraphBuilder::new();
    ip::nodes::register(&mut g);
    gtpu::nodes::register(&mut g);
    udptun::nodes::register(&mut g);
    parcel::nodes::register(&mut g);
    lb::nodes::register(&mut g);
    ipsec::nodes::register(&mut g);
    spd::nodes::register(&mut g);
    upf::nodes::register(&mut g);
    let mut handoff_input = None;
    if let Some(l) = &lanes {
        use ip::nodes::worker_handoff::{ResumeHandoff, WorkerHandoff};
        g.add_expand(WorkerHandoff::new(k, l.to.clone()));
        g.add_expand(WorkerHandoff::sessions_only(k, l.to.clone()));
        g.add_expand(ResumeHandoff::new(k, l.to.clone()));
        let received = g.add_input("handoff-input", "ethernet-input");
        handoff_input = Some((received, g.add_input("handoff-resume-input", "ip-resume")));
    } else {
        // `lbN-nat` names it (a connection's packet met on another worker than its
        // session's); alone, a worker keeps everything.
        g.add_expand(ip::nodes::worker_handoff::ResumeHandoff::new(k, vec![None]));
    }
    // The first node of an input kind: with several workers, the one that spreads what
    // a device's owner receives, or the one that moves only what belongs elsewhere.
    let first_node = |spreads: bool| match (lanes.is_some(), spreads) {
        (false, _) => "ethernet-input",
        (true, true) => "worker-handoff",
        (true, false) => "session-handoff",
    };
    // The punt link's packets meet `ip-punt-inject` first: the host's own are sent as the
    // gateway's; the rest go on to the kind's first node. Every graph has it, and every
    // input kind a punt input beside its own, so that a reload can make another link the
    // punt link by pointing ports at other inputs (`crate::punt::repoint`).
    let punt_link = cfg.punt.as_ref().map(|p| p.interface.as_str());
    {
        use ip::nodes::ip_punt::{Alone, Handoff, IpPuntInject};
        match lanes {
            None => g.add(IpPuntInject(Alone)),
            Some(_) => g.add(IpPuntInject(Handoff { spread: punt_spreads(cfg, spread) })),
        };
    }
    let mut inputs = BTreeMap::new();
    for ic in &cfg.interfaces {
        if ic.kind != InterfaceKind::Null {
            // Inputs are shared by kind: the punt link's is one of its own.
            let own = g.add_input(&format!("{}-input", kind_name(ic.kind)), first_node(spread.contains(&ic.kind)));
            let punt = g.add_input(&format!("{}-punt-input", kind_name(ic.kind)), "ip-punt-inject");
            inputs.insert(ic.name.clone(), if Some(ic.name.as_str()) == punt_link { punt } else { own });
        }
    }
    // Interfaces added at run time enter by these (`crate::interfaces`): af_packet
    // sockets on every worker, a TAP device on one that spreads what it receives.
    for (kind, spreads) in [(InterfaceKind::AfPacket, false), (InterfaceKind::Tap, true)] {
        g.add_input(&format!("{}-input", kind_name(kind)), first_node(spreads));
        g.add_input(&format!("{}-punt-input", kind_name(kind)), "ip-punt-inject");
    }
    let graph = g.build().map_err(|e| cfg.err("(graph)", e.to_string()))?;
    let ports = cfg
        .interfaces
        .iter()
        .zip(devices)
        .enumerate()
        .map(|(i, (ic, dev))| Port::new(IfIndex(i as u16), ic.name.clone(), dev, inputs.get(&ic.name).copied()))
        .collect();
    let pool = Pool::with_classes(cfg.dataplane.buffers, cfg.dataplane.medium_buffers, cfg.dataplane.large_buffers);
    let mut worker = Worker::new(k, graph, pool, ports, cx);
    worker.busy_poll = cfg.dataplane.busy_poll;
    if let (Some(l), Some((received, resumed))) = (lanes, handoff_input) {
        worker.set_handoff(l.from, received, resumed);
    }
    Ok(worker)
}

/// Whether an input kind's first node spreads what its owner receives among the workers
/// (`worker-handoff`, the kinds in `spread` and TAP devices added at run time) rather
/// than moving only what belongs elsewhere (`session-handoff`).
pub fn kind_spreads(kind: InterfaceKind, spread: &[InterfaceKind]) -> bool {
    spread.contains(&kind) || kind == InterfaceKind::Tap
}

/// Which way `ip-punt-inject` passes on what it does not inject, with several workers:
/// the start-up punt link's kind's way, or (no punt link) a TAP device's, the usual punt
/// link. A reload may move the punt link only to a link of a kind that goes the same way
/// (`crate::reload`).
pub fn punt_spreads(cfg: &Config, spread: &[InterfaceKind]) -> bool {
    let link = cfg.punt.as_ref().and_then(|p| cfg.interfaces.iter().find(|ic| ic.name == p.interface));
    link.is_none_or(|ic| kind_spreads(ic.kind, spread))
}

/// Run a worker on its own thread (pinned if asked); returns its join handle.
pub fn spawn(
    control: &mut Control,
    mut worker: Worker<WorkerContext>,
    core: Option<usize>,
    until_inputs_done: bool,
) -> std::thread::JoinHandle<Worker<WorkerContext>> {
    let (tx, rx) = crossbeam_channel::unbounded();
    control.workers.push(tx);
    std::thread::Builder::new()
        .name(format!("vecgate-worker-{}", worker.id))
        .spawn(move || {
            if let Some(c) = core {
                if !core_affinity::set_for_current(core_affinity::CoreId { id: c }) {
                    tracing::warn!(worker = worker.id, core = c, "could not pin the worker to its core; it runs unpinned");
                }
            }
            worker.run(&rx, until_inputs_done);
            worker
        })
        .expect("spawn worker thread")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outbound SA as the CLI adds it.
    fn sa(words: &str) -> ipsec::SaSpec {
        let c = crate::ipsec::parse_sa_add(&words.split(' ').collect::<Vec<_>>()).unwrap();
        c.to_spec().unwrap().0
    }

    /// The UPF's GTP-U is a tunnel like the others to the transport-mode SAs: with an SPD
    /// on the N3 link PROTECTing UDP to 2152 by an SA from the N3 address to a gNB, the IP
    /// tables get that SA's entry for the N3 address, the gNB and 2152 (what
    /// upfN-downlink and upfN-uplink take off the path's MTU), the gNB named by no GTP-U
    /// or UDP tunnel: PFCP sessions' peers need none. An SA from another address, a
    /// tunnel-mode one, or no `[pfcp]` (no N3 address) gives none.
    #[test]
    fn upf_outer_headers_count_a_transport_sa_protecting_them() {
        let key = "enc-key 0102030405060708090a0b0c0d0e0f1011121314";
        let mut x = ipsec::IpsecState::new();
        let words = |i: u32, local: &str, mode: &str| {
            format!("{i} spi {} outbound alg aes-gcm-128 {key} local {local} remote 198.18.7.10 {mode}", 0x600 + i)
        };
        x.add(1, sa(&words(1, "198.18.7.2", "transport")), [0; 16]).unwrap();
        x.add(2, sa(&words(2, "198.18.7.9", "transport")), [0; 16]).unwrap();
        x.add(3, sa(&words(3, "198.18.7.2", "tunnel")), [0; 16]).unwrap();
        let mut spd = SpdState::new();
        for (sa, local) in [(1, "198.18.7.2"), (2, "198.18.7.9")] {
            spd.add_policy(&spd::PolicySpec {
                spd: 1,
                direction: spd::Direction::Outbound,
                priority: 10,
                action: spd::policy::ActionKind::Protect,
                sa: Some(sa),
                local: local.into(),
                remote: "198.18.7.10".into(),
                protocol: "udp".into(),
                local_ports: "any".into(),
                remote_ports: "2152".into(),
            })
            .unwrap();
        }
        spd.bind(IfIndex(0), 1).unwrap();
        let n3: IpAddr = "198.18.7.2".parse().unwrap();
        let gnb: IpAddr = "198.18.7.10".parse().unwrap();
        let (g, u) = (GtpuState::default(), UdpTunState::new());
        let mut state = RouterState::new(Vec::new()).unwrap();
        set_tunnel_esp(&mut state, &g, &u, &x, &spd, &[n3]);
        let overhead = x.get(1).unwrap().plan.overhead as u16;
        let esp = state.build().tunnel_esp.clone();
        assert_eq!(*esp, [ip::tables::TunnelEsp::new(n3, gnb, wire::gtpu::PORT, 1, overhead, 0)]);
        set_tunnel_esp(&mut state, &g, &u, &x, &spd, &[]);
        assert!(state.build().tunnel_esp.is_empty(), "no [pfcp]: no UPF tunnels");
    }
}
