//! The whole-graph target: frames, alone or in short sequences (so fragments meet in
//! reassembly and tunnel hints are taken), some with a virtio-net header, through a
//! worker built from [`CONFIG`], which configures every feature the project has: IPv4
//! and IPv6 routes, neighbours and a blackhole; GTP-U tunnels over both families with
//! every checksum mode, sequence numbers, PDU session containers and Ethernet decap;
//! GUE, GRE-in-UDP (key, checksum, sequence) and direct UDP tunnels over both families;
//! tunnel MTUs with inner and outer fragmentation; MSS clamping; routed fragmentation
//! (a narrower interface, which checks sources: loose uRPF); reassembly; IPsec ESP tunnels (AES-GCM, AES-CBC with
//! HMAC-SHA-256, NULL with HMAC-SHA-256 in UDP over IPv6) and an SPD with protect, bypass
//! and discard policies bound to the narrow interface; load-balanced services (TCP over
//! IPv4, UDP over IPv6, NAT both ways; SCTP, NAT over IPv4 and direct server return in
//! GUE over IPv6); a parcel-capable link; access0 as a link that takes
//! UDP GSO frames (see [`Harness::new`]); a UPF with sessions forwarding both ways over
//! both families, buffering, and re-encapsulating on N9. The `graph_workers` target runs
//! the same through two workers ([`Harness::with_workers`]): worker 0 owns the devices
//! and spreads what it receives over the handoff lanes (`worker-handoff`, the load
//! balancer's connections steered to their session's worker), the other sends back
//! through its lane; the invariants below hold summed over both.
//! The `graph_local` target ([`Harness::with_local_services`]) adds services that keep
//! the client's address ([`LOCAL_CONFIG`]): their replies are forwarded packets, so every
//! forwarded packet passes `lbN-nat` before `ipN-rewrite`, and the forwarding fast paths
//! (and parcels forwarded whole or joined) step aside, as for an SPD.
//!
//! One dataplane serves every input (building one per input runs ~10x slower), so state
//! a real gateway keeps (reassembly in progress, hints, rate limiters) carries from one
//! input to the next; learned neighbours are not applied, so the tables stay as built.
//! After every frame, [`Harness::frame`] checks:
//! - the frame left something behind: a transmitted frame, a counter that moved, or a
//!   device counter (a refused vnet header);
//! - every drop was named: `error-drop` took no more packets than counters moved;
//! - every drop was captured: a capture of drops (`pcap trace drop`, to memory) runs
//!   throughout and recorded each packet `error-drop` took, with its node and counter;
//! - no buffer is held but the packets `ip-glean` holds for a next hop it solicits: the
//!   pool is back to all free but those;
//! - every frame the gateway sends from its own MAC parses (Ethernet, then IPv4, IPv6 or
//!   ARP; frames a GTP-U tunnel decapsulates keep their own source and go as they
//!   came); an IPv4 header has a correct checksum and a consistent length (checked
//!   view); the UDP, ICMP and ICMPv6 checksums and the SCTP CRC32c
//!   of what the gateway itself sources (from one of its addresses, with transport
//!   bytes that did not come in whole) are correct (a forwarded packet keeps the L4
//!   checksum it came with, right or wrong, even with a spoofed source; a GTP-U outer
//!   checksum derived from a wrong inner one is wrong by as much, see
//!   `inner_checksum_wrong`; so is a datagram the load balancer translated to our
//!   address, see `translated`);
//! - no frame is larger than its interface's MTU allows (a GSO frame: its segments).
//!
//! Input format (mutation-friendly, and what `fuzz/make_graph_corpus.py` writes): records
//! of `[control u8][length u16 BE][frame]`; control bits 0-1 pick the receiving
//! interface (`access0`, `core0`, `narrow0`, `parcel0`), bit 2 says the first 10 bytes of
//! the frame are a virtio-net header, bit 3 holds the frame back to arrive in one poll
//! with the next (so a vector holds several packets: parcel joining, the flow caches).
//! A length beyond the input takes the rest. At most [`MAX_FRAMES`] frames per input.

use crate::config::Config;
use crate::dataplane::{assemble, Control, WorkerContext};
use engine::worker::{Port, Worker};
use engine::GsoKind;
use io::mem::{mem_device, MemHandle, RxFrame, TxFrame};
use io::vnet::{VnetHdr, VNET_HDR_LEN};
use ip::outer::ChecksumMode;
use std::cell::RefCell;
use std::net::{IpAddr, Ipv6Addr};
use wire::ethernet::EthernetFrame;
use wire::{EtherType, IpProtocol};

/// Frames per input: enough for a fragmented datagram and a hinted tunnel run.
pub const MAX_FRAMES: usize = 16;

/// Every feature the dataplane has today, on three interfaces (all fed from memory).
pub const CONFIG: &str = include_str!("graph.toml");
/// The UPF [`Harness::new`] adds to it, with the sessions of [`super::upf_sessions`].
pub const UPF_CONFIG: &str = include_str!("graph_upf.toml");
/// What the `graph_local` target adds ([`Harness::with_local_services`]): services that
/// keep the client's address, which send every forwarded packet through `lbN-nat`.
pub const LOCAL_CONFIG: &str = include_str!("graph_local.toml");

/// The dataplane an input goes through, kept across inputs.
pub struct Harness {
    pub control: Control,
    /// Worker 0: it owns every device (each fed from memory).
    pub worker: Worker<WorkerContext>,
    /// With more than one worker ([`Harness::with_workers`]): the others. Worker 0
    /// spreads what it receives over the handoff lanes by flow (software RSS,
    /// `worker-handoff`), and they send through their lanes back to worker 0's devices.
    pub others: Vec<Worker<WorkerContext>>,
    handles: Vec<MemHandle>,
    /// Per interface: its MTU and MAC; and every address of ours (what we source).
    mtu: Vec<u16>,
    macs: Vec<wire::EthernetAddress>,
    ours: Vec<IpAddr>,
    /// The frames received since the input began: a packet sent with one of our source
    /// addresses whose transport bytes came in whole (a spoofed source, forwarded or
    /// decapsulated) is not one the gateway built, and keeps its checksums as they came.
    received: Vec<Vec<u8>>,
    /// IPv6 tunnel endpoints (ours, peer) that send zero UDP checksums (RFC 6935).
    zero_csum6: Vec<(IpAddr, IpAddr)>,
    /// Dropped packets the capture of drops (always on here) recorded.
    captured: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// The harness's capture of drops: counts the records, each checked for its form.
struct DropTally(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl engine::device::DropSink for DropTally {
    fn record(&mut self, _packet: &[u8], _link: engine::device::DroppedAs, reason: &str) -> bool {
        let (node_counter, from) = reason.split_once(", received on ").expect("a drop's reason says where it came from");
        assert!(node_counter.split_once(": ").is_some_and(|(n, c)| !n.is_empty() && !c.is_empty()), "{reason}");
        assert!(!from.is_empty(), "{reason}");
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        true
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_workers(1)
    }

    /// [`CONFIG`] and its UPF with `workers` workers.
    pub fn with_workers(workers: usize) -> Harness {
        Harness::with_extra(workers, "")
    }

    /// One worker, and [`LOCAL_CONFIG`]'s services besides [`CONFIG`]'s.
    pub fn with_local_services() -> Harness {
        Harness::with_extra(1, LOCAL_CONFIG)
    }

    /// [`CONFIG`], its UPF and `extra` with `workers` workers.
    fn with_extra(workers: usize, extra: &str) -> Harness {
        let config = CONFIG.replacen("[dataplane]\n", &format!("[dataplane]\nworkers = {workers}\n"), 1);
        let mut h = Harness::with_config(&format!("{config}\n{UPF_CONFIG}\n{extra}"));
        super::upf_sessions::install(&mut h.control);
        // access0 stands for a host link with virtio-net headers (an af_packet
        // interface's default, which memory devices cannot be configured as): a parcel
        // toward it leaves as one UDP GSO frame (`parcelN-input`'s `to-gso-frame`).
        let access0 = h.worker.ports.iter().position(|p| p.name == "access0").expect("graph.toml has access0");
        for w in h.workers_mut() {
            w.cx.parcel.gso_links |= 1 << access0;
        }
        h
    }

    /// A harness over another configuration (its interfaces are all fed from memory).
    pub fn with_config(text: &str) -> Harness {
        let cfg = Config::parse(text, "fuzz/graph.toml", std::path::Path::new(".")).expect("the graph harness config is valid");
        let a = assemble(&cfg).expect("the graph harness config assembles");
        let control = a.control;
        let mut workers = a.workers.into_iter();
        let mut worker = workers.next().expect("one worker at least");
        let mut handles = Vec::new();
        for port in worker.ports.iter_mut() {
            let (dev, h) = mem_device();
            *port = Port::new(port.if_index, port.name.clone(), Box::new(dev), port.input);
            handles.push(h);
        }
        let others: Vec<Worker<WorkerContext>> = workers.collect();
        for w in &others {
            for p in &w.ports {
                assert_eq!(p.device.kind(), "handoff", "{}: the other workers reach every device through worker 0", p.name);
            }
        }
        let ifs = control.state.interfaces();
        let mtu = ifs.iter().map(|i| i.mtu).collect();
        let macs = ifs.iter().map(|i| i.mac).collect();
        let mut ours: Vec<IpAddr> = Vec::new();
        for i in ifs {
            ours.extend(i.ip4.iter().map(|(a, _)| IpAddr::V4(*a)));
            ours.extend(i.ip6.iter().map(|(a, _)| IpAddr::V6(*a)));
            ours.push(IpAddr::V6(i.ip6_link_local));
        }
        let zero_csum6 = cfg
            .gtpu_tunnels
            .iter()
            .filter(|t| t.checksum == Some(ChecksumMode::Zero))
            .map(|t| (t.local.as_str(), t.remote.as_str()))
            .chain(cfg.udp_tunnels.iter().filter(|t| t.checksum == Some(ChecksumMode::Zero)).map(|t| (t.local.as_str(), t.remote.as_str())))
            .filter_map(|(l, r)| Some((l.parse().ok()?, r.parse().ok()?)))
            .collect();
        let captured = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut h =
            Harness { control, worker, others, handles, mtu, macs, ours, zero_csum6, received: Vec::new(), captured: captured.clone() };
        for w in h.workers_mut() {
            w.graph.set_drop_capture(Some(Box::new(DropTally(captured.clone()))), &engine::DropFilter::default()).expect("no filter");
        }
        h
    }

    /// Run one fuzz input (see the module's format) and check every invariant.
    pub fn input(&mut self, data: &[u8]) {
        self.received.clear();
        let mut held = Vec::new();
        for (port, f, hold) in decode_held(data) {
            held.push((port, f));
            if !hold {
                self.frames(std::mem::take(&mut held));
            }
        }
        if !held.is_empty() {
            self.frames(held);
        }
        // Events would change the tables between inputs; the test keeps them as built.
        while self.control.events.try_recv().is_ok() {}
        while self.control.gtpu_events.try_recv().is_ok() {}
        while self.control.udptun_events.try_recv().is_ok() {}
    }

    /// One frame in through interface `port`; the invariants checked on what came out,
    /// which is returned with the index of the interface that sent each frame.
    pub fn frame(&mut self, port: usize, f: RxFrame) -> Vec<(usize, TxFrame)> {
        self.frames(vec![(port, f)])
    }

    /// Frames that arrive together (one poll, one vector per interface); the invariants
    /// checked on what came out, as for [`Harness::frame`].
    pub fn frames(&mut self, frames: Vec<(usize, RxFrame)>) -> Vec<(usize, TxFrame)> {
        let before = self.tally();
        for (port, f) in frames {
            self.received.push(f.bytes.clone());
            self.handles[port].rx.send(f).expect("the device holds its receiver");
        }
        self.run_checked(before)
    }

    /// A control request to the worker (an `Inject` of the control plane's frames, say),
    /// then one poll; what came out checked as for [`Harness::frame`].
    pub fn command(&mut self, cmd: engine::worker::WorkerCmd) -> Vec<(usize, TxFrame)> {
        let before = self.tally();
        assert!(self.worker.handle(cmd), "not a stop");
        self.run_checked(before)
    }

    /// One poll (and with other workers, rounds of theirs and worker 0's until nothing
    /// moves between them), then the invariants on what came out since `before`.
    fn run_checked(&mut self, before: Tally) -> Vec<(usize, TxFrame)> {
        self.worker.poll_once();
        // A frame goes to another worker and what it sends comes back: two rounds; the
        // bound is for what a lane may hold over.
        for _ in 0..HANDOFF_ROUNDS {
            if self.others.is_empty() {
                break;
            }
            let moved: usize = self.others.iter_mut().map(|w| w.poll_once()).sum::<usize>() + self.worker.poll_once();
            if moved == 0 {
                break;
            }
        }
        let mut out = Vec::new();
        for (i, h) in self.handles.iter().enumerate() {
            while let Ok(t) = h.tx.try_recv() {
                if let Err(why) = self.check_sent(i, &t) {
                    panic!("frame sent on {}: {why}: {:02x?}", self.worker.ports[i].name, t.bytes);
                }
                out.push((i, t));
            }
        }
        let sent = out.len() as u64;
        let after = self.tally();
        let counted = after.counters - before.counters;
        assert!(sent + counted + (after.device - before.device) >= 1, "a frame vanished: nothing sent and no counter moved");
        assert!(after.dropped - before.dropped <= counted, "a drop without a named counter");
        assert_eq!(after.captured - before.captured, after.dropped - before.dropped, "every drop captured, with its reason");
        assert_eq!(after.port_tx - before.port_tx, sent, "interface tx counters match the frames sent");
        // Packets to a next hop being solicited wait in `ip-glean`'s hold (bounded); no
        // other buffer outlives the graph's run, on any worker.
        for w in self.workers() {
            assert_eq!(w.pool.in_use(), w.cx.ip.hold.len(), "buffers held after the graph ran on worker {}", w.id);
        }
        out
    }

    /// Worker 0, then the others.
    pub fn workers(&self) -> impl Iterator<Item = &Worker<WorkerContext>> {
        std::iter::once(&self.worker).chain(self.others.iter())
    }

    fn workers_mut(&mut self) -> impl Iterator<Item = &mut Worker<WorkerContext>> {
        std::iter::once(&mut self.worker).chain(self.others.iter_mut())
    }

    /// The sums over every worker.
    fn tally(&self) -> Tally {
        let mut t = Tally { captured: self.captured.load(std::sync::atomic::Ordering::Relaxed), ..Tally::default() };
        for w in self.workers() {
            let (counters, dropped) = w.graph.counter_sum();
            t.counters += counters;
            t.dropped += dropped;
            t.device += w.ports.iter().flat_map(|p| p.device.counters()).map(|(_, n)| n).sum::<u64>();
            t.port_tx += w.ports.iter().map(|p| p.counters.tx_packets + p.counters.tx_errors).sum::<u64>();
        }
        t
    }

    /// What every frame leaving interface `i` must be.
    pub fn check_sent(&self, i: usize, t: &TxFrame) -> Result<(), String> {
        let eth = EthernetFrame::new_checked(&t.bytes[..]).map_err(|e| format!("ethernet: {e}"))?;
        let (ethertype, l3) = match eth.ethertype() {
            EtherType::Vlan | EtherType::QinQ => {
                let tag = wire::vlan::VlanTag::new_checked(eth.payload()).map_err(|e| format!("vlan: {e}"))?;
                (tag.ethertype(), &eth.payload()[wire::vlan::TAG_LEN..])
            }
            e => (e, eth.payload()),
        };
        let mtu = self.mtu[i] as usize;
        match t.gso {
            GsoKind::None if l3.len() > mtu => return Err(format!("{} bytes over an MTU of {mtu}", l3.len())),
            GsoKind::None => {}
            // A GSO frame that fits is one segment, whatever its segment size says.
            _ if l3.len() > mtu && t.gso_size as usize > mtu => {
                return Err(format!("{} bytes in GSO segments of {} over an MTU of {mtu}", l3.len(), t.gso_size))
            }
            _ => {}
        }
        // A frame from another source address is one a GTP-U tunnel decapsulated
        // (`decap_next = "ethernet"`): it goes out as it came.
        if eth.src_addr() != self.macs[i] {
            return Ok(());
        }
        match ethertype {
            EtherType::Ipv4 => self.check_ipv4(l3),
            EtherType::Ipv6 => self.check_ipv6(l3),
            EtherType::Arp => wire::arp::ArpPacket::new_checked(l3).map(|_| ()).map_err(|e| format!("arp: {e}")),
            e => Err(format!("ethertype {e:?} from our own address")),
        }
    }

    /// Whether `l4` arrived whole in a frame of this input (see `received`).
    fn came_in(&self, l4: &[u8]) -> bool {
        // A linear-time search: a window compare at every offset made one input of
        // large frames (reassembly, GSO, parcels) take seconds under the sanitizer.
        !l4.is_empty() && self.received.iter().any(|f| memchr::memmem::find(f, l4).is_some())
    }

    /// Whether UDP datagram `udp` is one that came in and was translated (the load
    /// balancer's NAT: addresses and ports rewritten, the checksum updated for them, so a
    /// wrong one stays wrong by as much, as a NAT must leave it): a received frame holds
    /// its payload right after a UDP header of the same length.
    fn translated(&self, udp: &[u8]) -> bool {
        let (Some(len), Some(payload)) = (udp.get(4..6), udp.get(8..)) else { return false };
        self.received.iter().any(|f| {
            if payload.is_empty() {
                return f.windows(2).skip(4).any(|w| w == len);
            }
            // Every occurrence, overlapping ones too (find_iter skips those).
            let finder = memchr::memmem::Finder::new(payload);
            let mut from = 0;
            while let Some(i) = finder.find(&f[from..]) {
                let at = from + i;
                if at >= 8 && &f[at - 4..at - 2] == len {
                    return true;
                }
                from = at + 1;
            }
            false
        })
    }

    /// Whether SCTP packet `l4` came in as it leaves but for its CRC32c field: forwarded
    /// (a spoofed source of ours), its checksum, if its sender left one pending, completed
    /// as any device completes one (an Internet checksum: a vnet header cannot ask for a
    /// CRC32c). Not the gateway's CRC32c: translation changes the ports, or leaves the
    /// packet, CRC32c and all, as it came.
    fn forwarded_sctp(&self, l4: &[u8]) -> bool {
        l4.len() >= 12 && self.came_in(&l4[..8]) && (l4.len() == 12 || self.came_in(&l4[12..]))
    }

    fn check_ipv4(&self, l3: &[u8]) -> Result<(), String> {
        use wire::ipv4::Ipv4Packet;
        let p = Ipv4Packet::new_checked(l3).map_err(|e| format!("ipv4: {e}"))?;
        if !p.verify_checksum() {
            return Err("bad IPv4 header checksum".into());
        }
        let whole = !p.more_frags() && p.frag_offset() == 0;
        if !whole || !self.ours.contains(&IpAddr::V4(p.src_addr())) || self.came_in(p.payload()) {
            return Ok(());
        }
        let (src, dst) = (p.src_addr(), p.dst_addr());
        match p.protocol() {
            IpProtocol::Udp => {
                let u = wire::udp::UdpPacket::new_checked(p.payload()).map_err(|e| format!("udp: {e}"))?;
                if u.checksum() != 0
                    && !u.verify_checksum_v4(src, dst)
                    && !inner_checksum_wrong(u.payload())
                    && !self.translated(p.payload())
                {
                    return Err("bad UDP checksum (IPv4)".into());
                }
            }
            IpProtocol::Icmp => {
                let m = wire::icmpv4::Icmpv4Packet::new_checked(p.payload()).map_err(|e| format!("icmp: {e}"))?;
                if !m.verify_checksum() {
                    return Err("bad ICMP checksum".into());
                }
            }
            IpProtocol::Sctp if !self.forwarded_sctp(p.payload()) => sctp_crc_right(p.payload())?,
            _ => {}
        }
        Ok(())
    }

    fn check_ipv6(&self, l3: &[u8]) -> Result<(), String> {
        use wire::ipv6::Ipv6Packet;
        let p = Ipv6Packet::new_checked(l3).map_err(|e| format!("ipv6: {e}"))?;
        let (src, dst): (Ipv6Addr, Ipv6Addr) = (p.src_addr(), p.dst_addr());
        if !self.ours.contains(&IpAddr::V6(src)) || self.came_in(p.payload()) {
            return Ok(());
        }
        let chain = wire::ipv6_ext::walk_chain(p.next_header(), p.payload()).map_err(|e| format!("ipv6 extension headers: {e}"))?;
        if chain.fragment.is_some() {
            return Ok(());
        }
        let upper = &p.payload()[chain.upper_offset..];
        match chain.upper {
            Some(IpProtocol::Udp) => {
                let u = wire::udp::UdpPacket::new_checked(upper).map_err(|e| format!("udp: {e}"))?;
                let zero_ok = self.zero_csum6.contains(&(IpAddr::V6(src), IpAddr::V6(dst)));
                if u.checksum() == 0 && !zero_ok {
                    return Err("zero UDP checksum over IPv6 from a tunnel that computes them".into());
                }
                if u.checksum() != 0 && !u.verify_checksum_v6(&src, &dst) && !inner_checksum_wrong(u.payload()) && !self.translated(upper) {
                    return Err("bad UDP checksum (IPv6)".into());
                }
            }
            Some(IpProtocol::Icmpv6) => {
                let m = wire::icmpv6::Icmpv6Packet::new_checked(upper).map_err(|e| format!("icmpv6: {e}"))?;
                if !m.verify_checksum(&src, &dst) {
                    return Err("bad ICMPv6 checksum".into());
                }
            }
            Some(IpProtocol::Sctp) if !self.forwarded_sctp(upper) => sctp_crc_right(upper)?,
            _ => {}
        }
        Ok(())
    }
}

/// An SCTP packet the gateway sent from its own address, not as it came (the load
/// balancer's translation, SNAT): its CRC32c is the gateway's, computed over the packet
/// as sent, never one that was wrong on arrival (`lbN-nat` drops those) nor an Internet
/// checksum completed over it (a CRC32c left to the device is computed, not left).
fn sctp_crc_right(l4: &[u8]) -> Result<(), String> {
    let s = wire::sctp::SctpPacket::new_checked(l4).map_err(|e| format!("sctp: {e}"))?;
    if !s.verify_checksum() {
        return Err("bad SCTP CRC32c from our address".into());
    }
    Ok(())
}

/// The frames of an input (see the module's format), each with its receiving interface.
pub fn decode(data: &[u8]) -> Vec<(usize, RxFrame)> {
    decode_held(data).into_iter().map(|(port, f, _)| (port, f)).collect()
}

/// The frames of an input, each with its receiving interface and whether it is held
/// back to arrive with the next.
pub fn decode_held(data: &[u8]) -> Vec<(usize, RxFrame, bool)> {
    let mut out = Vec::new();
    let mut rest = data;
    while out.len() < MAX_FRAMES {
        let [ctl, hi, lo, tail @ ..] = rest else { break };
        let len = (u16::from_be_bytes([*hi, *lo]) as usize).min(tail.len());
        let (frame, next) = tail.split_at(len);
        rest = next;
        let port = (ctl & 3) as usize;
        let f = if ctl & 4 != 0 && frame.len() >= VNET_HDR_LEN {
            let (h, bytes) = frame.split_at(VNET_HDR_LEN);
            RxFrame { bytes: bytes.to_vec(), vnet: Some(VnetHdr::parse(h.try_into().expect("split at its length"))) }
        } else {
            RxFrame { bytes: frame.to_vec(), vnet: None }
        };
        out.push((port, f, ctl & 8 != 0));
    }
    out
}

/// A G-PDU whose inner UDP or TCP checksum is wrong. GTP-U derives a software outer
/// checksum from the inner packet's own (`checksum_from_inner`, docs/PERFORMANCE.md):
/// equal to the full sum whenever the inner checksum is right, and wrong by as much when
/// it is not, so the peer drops at the outer header what the inner receiver would have
/// dropped. Those outer checksums are not the gateway's error.
fn inner_checksum_wrong(udp_payload: &[u8]) -> bool {
    use wire::gtpu::{GtpuPacket, GtpuRepr, MessageType};
    let Some(r) = GtpuPacket::new_checked(udp_payload).ok().and_then(|g| GtpuRepr::parse(&g).ok()) else { return false };
    let Some(inner) = udp_payload.get(r.header_len()..).filter(|_| r.msg_type == MessageType::GPdu) else { return false };
    // The segment after the inner IP header, summed with its pseudo-header as the
    // receiver would (whatever its TCP header says about itself). The encapsulation
    // vouches by the same protocols' checksums (`gtpu::nodes::encap::inner_sum_from_headers`).
    let wrong = |proto: IpProtocol, sum: wire::checksum::Checksum, l4: &[u8]| {
        let mut c = sum;
        c.add_bytes(l4);
        match proto {
            IpProtocol::Udp => l4.len() >= 8 && l4[6..8] != [0, 0] && c.fold() != 0xffff,
            IpProtocol::Tcp => l4.len() >= 18 && c.fold() != 0xffff,
            IpProtocol::Icmp | IpProtocol::Icmpv6 => l4.len() >= 4 && c.fold() != 0xffff,
            _ => false,
        }
    };
    match inner.first().map(|b| b >> 4) {
        Some(4) => {
            let Ok(p) = wire::ipv4::Ipv4Packet::new_checked(inner) else { return false };
            let l4 = p.payload();
            // ICMPv4 sums its message alone: no pseudo-header.
            let sum = match p.protocol() {
                IpProtocol::Icmp => wire::checksum::Checksum::new(),
                proto => wire::checksum::pseudo_header_v4(p.src_addr(), p.dst_addr(), proto.into(), l4.len() as u16),
            };
            !p.more_frags() && p.frag_offset() == 0 && wrong(p.protocol(), sum, l4)
        }
        Some(6) => {
            let Ok(p) = wire::ipv6::Ipv6Packet::new_checked(inner) else { return false };
            let l4 = p.payload();
            let sum = wire::checksum::pseudo_header_v6(&p.src_addr(), &p.dst_addr(), p.next_header().into(), l4.len() as u32);
            wrong(p.next_header(), sum, l4)
        }
        _ => false,
    }
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

#[derive(Default)]
struct Tally {
    counters: u64,
    dropped: u64,
    captured: u64,
    device: u64,
    port_tx: u64,
}

/// Rounds of polls between the workers after an input's poll (see `run_checked`).
const HANDOFF_ROUNDS: usize = 4;

thread_local! {
    static HARNESS: RefCell<Option<Harness>> = const { RefCell::new(None) };
    static HARNESS2: RefCell<Option<Harness>> = const { RefCell::new(None) };
    static HARNESS_LOCAL: RefCell<Option<Harness>> = const { RefCell::new(None) };
}

/// The fuzz target: one input through this thread's dataplane (built on first use).
pub fn run(data: &[u8]) {
    HARNESS.with(|h| h.borrow_mut().get_or_insert_with(Harness::new).input(data));
}

/// The `graph_workers` target: the same through two workers, handoff lanes between them.
pub fn run_workers(data: &[u8]) {
    HARNESS2.with(|h| h.borrow_mut().get_or_insert_with(|| Harness::with_workers(2)).input(data));
}

/// The `graph_local` target: the same with services that keep the client's address.
pub fn run_local(data: &[u8]) {
    HARNESS_LOCAL.with(|h| h.borrow_mut().get_or_insert_with(Harness::with_local_services).input(data));
}
