//! The UPF nodes in a graph with sinks in place of the IP nodes: golden packets in,
//! the packet each sink received (or the drop counter) out. Sessions are installed as
//! the control plane does, from PFCP rules.

use arc_swap::ArcSwap;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Graph, GraphBuilder, Node, NodeId, Pool, Verdict};
use ip::{HasIp, IpContext};
use pfcp::ie::{apply_action, Interface, NodeId as PfcpNode};
use pfcp::rules::{Bar, ExtendedBuffering, Far, GtpuEndpoint, Pdr, Qer, SessionRules, Urr};
use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use upf::buffering::BufferCmd;
use upf::context::{HasUpf, Policer, Usage, UsageCells};
use upf::tables::{UpfState, UpfTables};
use upf::{UpfContext, UpfEvent};
use wire::gtpu::{GtpuPacket, GtpuRepr, MessageType, PduSession, Qfi, Teid};

struct Cx {
    ip: IpContext,
    upf: UpfContext,
}
impl engine::worker::Context for Cx {
    fn refresh(&mut self) {
        self.ip.refresh();
        self.upf.refresh();
    }
}
impl HasIp for Cx {
    fn ip(&mut self) -> &mut IpContext {
        &mut self.ip
    }
}
impl HasUpf for Cx {
    fn split_upf(&mut self) -> (&mut IpContext, &mut UpfContext) {
        (&mut self.ip, &mut self.upf)
    }
}

next_nodes! { enum SinkNext { Drop = "error-drop" } }
counters! { enum SinkCounter { Seen(Info, "seen", "packets the sink took") } }

type Seen = Arc<Mutex<Vec<(&'static str, Vec<u8>)>>>;

/// Stands in for an IP node: records what it is given (and its metadata), then drops it.
struct Sink {
    name: &'static str,
    seen: Seen,
    metas: Arc<Mutex<Vec<engine::Meta>>>,
}
impl Node<Cx> for Sink {
    type Next = SinkNext;
    type Counter = SinkCounter;
    fn name(&self) -> &'static str {
        self.name
    }
    fn process(&mut self, _: &mut Cx, c: &mut Counts<'_, SinkCounter>, buf: &mut Buffer) -> Verdict<SinkNext, SinkCounter> {
        c.inc(SinkCounter::Seen);
        self.seen.lock().unwrap().push((self.name, buf.bytes().to_vec()));
        self.metas.lock().unwrap().push(buf.meta);
        Verdict::Next(SinkNext::Drop)
    }
}

const N3: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
const N3_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 2);
const GNB: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 10);
const GNB6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 10);
const UE: Ipv4Addr = Ipv4Addr::new(198, 19, 7, 1);
const UE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x19, 1, 0, 0, 0, 1);
const DN: Ipv4Addr = Ipv4Addr::new(198, 18, 8, 9);

struct Rig {
    graph: Graph<Cx>,
    pool: Pool,
    cx: Cx,
    state: UpfState,
    shared: Arc<ArcSwap<UpfTables>>,
    usage: Arc<UsageCells>,
    events: crossbeam_channel::Receiver<UpfEvent>,
    seen: Seen,
    /// The metadata of what the sinks saw, in the same order.
    metas: Arc<Mutex<Vec<engine::Meta>>>,
    inputs: [NodeId; 4],
    buffer_input: NodeId,
    /// Publish the sessions' records unresolved, so that every packet takes the full PDR
    /// match (the reference the records are held to).
    full_match_only: bool,
    /// The IP tables the workers read (N3 on interface 0), and their state.
    ip_tables: Arc<ArcSwap<ip::Tables>>,
    router: ip::RouterState,
}

impl Rig {
    fn new() -> Rig {
        Rig::with_n3_mtu(1500)
    }

    /// [`Rig::new`] with the N3 link's MTU `mtu`.
    fn with_n3_mtu(mtu: u16) -> Rig {
        let seen: Seen = Arc::default();
        let metas: Arc<Mutex<Vec<engine::Meta>>> = Arc::default();
        let mut g = GraphBuilder::new();
        upf::nodes::register(&mut g);
        for name in [
            "ip4-input",
            "ip6-input",
            "ip4-lookup",
            "ip6-lookup",
            "ip4-icmp-error",
            "ip6-icmp-error",
            "ip4-fragment",
            "ip6-fragment",
            "ip-gso-segment",
        ] {
            g.add(Sink { name, seen: Arc::clone(&seen), metas: Arc::clone(&metas) });
        }
        let inputs = [
            g.add_input("test-n3", "upf4-uplink"),
            g.add_input("test-n3-6", "upf6-uplink"),
            g.add_input("test-n6", "upf4-downlink"),
            g.add_input("test-n6-6", "upf6-downlink"),
        ];
        let graph = g.build().unwrap();
        let buffer_input = graph.node_id(upf::nodes::BUFFER_INPUT).unwrap();
        let mut state = UpfState::new(1000, 1000, 1000);
        state.set_n3(Some(N3), Some(N3_6));
        let shared = Arc::new(ArcSwap::from_pointee(state.build()));
        let usage = UsageCells::new(1000);
        let (tx, events) = crossbeam_channel::bounded(16);
        // N3: the gNBs' subnets, on a 1500-byte link unless told.
        let n3 = ip::InterfaceSpec {
            name: "n3".into(),
            mac: "02:00:00:00:07:02".parse().unwrap(),
            mtu,
            addresses: vec!["198.18.7.2/24".parse().unwrap(), "2001:db8:7::2/64".parse().unwrap()],
        };
        let mut router = ip::RouterState::new(vec![n3]).unwrap();
        let ip_tables = Arc::new(ArcSwap::from_pointee(router.build()));
        let cx = Cx {
            ip: IpContext::new(ip_tables.clone(), None, Default::default()),
            upf: UpfContext::new(shared.clone(), usage.clone(), Policer::new(1000), Some(tx)).with_buffering(16, 8, Arc::default()),
        };
        Rig {
            graph,
            pool: Pool::new(1024, 4),
            cx,
            state,
            shared,
            usage,
            events,
            seen,
            metas,
            inputs,
            buffer_input,
            full_match_only: false,
            ip_tables,
            router,
        }
    }

    /// Publish IP tables with these transport-mode SA entries (the control plane's
    /// `tunnel_esp`).
    fn set_tunnel_esp(&mut self, esp: Vec<ip::tables::TunnelEsp>) {
        self.router.set_tunnel_esp(esp);
        self.ip_tables.store(Arc::new(self.router.build()));
        engine::worker::Context::refresh(&mut self.cx);
    }

    /// What the control plane sends a worker's `upf-buffer` after a publish.
    fn command(&mut self, c: BufferCmd) -> Vec<(&'static str, Vec<u8>)> {
        let input = self.buffer_input;
        self.inject(input, &[c.to_frame()])
    }

    fn install(&mut self, r: &SessionRules) {
        self.state.install_rules(r).unwrap();
        self.publish();
    }

    fn publish(&mut self) {
        let mut t = self.state.build();
        if self.full_match_only {
            t.records = upf::tables::RecordArray::new(t.records.len(), upf::tables::SessionRecords::UNRESOLVED);
        }
        self.shared.store(Arc::new(t));
        engine::worker::Context::refresh(&mut self.cx);
    }

    /// Send packets into input `i` (0: N3 over IPv4, 1: N3 over IPv6, 2: to an IPv4 UE,
    /// 3: to an IPv6 UE); returns what the sinks saw.
    fn send(&mut self, i: usize, pkts: &[Vec<u8>]) -> Vec<(&'static str, Vec<u8>)> {
        let input = self.inputs[i];
        self.inject(input, pkts)
    }

    fn inject(&mut self, input: NodeId, pkts: &[Vec<u8>]) -> Vec<(&'static str, Vec<u8>)> {
        self.inject_prepared(input, pkts, |_| {})
    }

    /// [`Rig::inject`], each buffer given to `prepare` once its packet is written.
    fn inject_prepared(&mut self, input: NodeId, pkts: &[Vec<u8>], prepare: impl Fn(&mut Buffer)) -> Vec<(&'static str, Vec<u8>)> {
        self.seen.lock().unwrap().clear();
        self.metas.lock().unwrap().clear();
        let mut bufs: Vec<BufIdx> = Vec::new();
        for p in pkts {
            let b = self.pool.alloc(p.len()).unwrap();
            self.pool.get_mut(b).write(p).unwrap();
            prepare(self.pool.get_mut(b));
            bufs.push(b);
        }
        self.graph.inject(input, &mut self.pool, &bufs, 0);
        self.graph.run(&mut self.cx, &mut self.pool);
        std::mem::take(&mut *self.seen.lock().unwrap())
    }

    /// [`Rig::inject`] with each packet placed so that only `headroom` bytes are free in
    /// front of it (a buffer another node left short of room).
    fn inject_with_headroom(&mut self, i: usize, pkts: &[Vec<u8>], headroom: usize) -> Vec<(&'static str, Vec<u8>)> {
        self.inject_prepared(self.inputs[i], pkts, |buf| {
            let (len, grow) = (buf.len(), buf.headroom() - headroom);
            buf.extend_front(grow).unwrap();
            buf.bytes_mut().copy_within(grow.., 0);
            buf.truncate(len);
            assert_eq!(buf.headroom(), headroom);
        })
    }

    fn counter(&self, node: &str, name: &str) -> u64 {
        self.graph.counter_snapshots().iter().find(|c| c.node == node && c.counter == name).map_or(0, |c| c.count)
    }

    fn usage(&self, seid: u64, urr: u32) -> Usage {
        let s = self.state.urr_slots(seid).iter().find(|(id, _)| *id == urr).unwrap().1;
        self.usage.read(s.slot, s.generation)
    }
}

fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let total = 28 + payload;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let sum = wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    for (i, b) in p[28..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

fn udp6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut p = vec![0u8; 48 + payload];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p[40..42].copy_from_slice(&sport.to_be_bytes());
    p[42..44].copy_from_slice(&dport.to_be_bytes());
    p[44..46].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    p
}

/// A G-PDU from the gNB to our N3 address, with an UL PDU Session Container if `qfi`.
fn gpdu4(teid: u32, qfi: Option<u8>, inner: &[u8]) -> Vec<u8> {
    gtpu4(MessageType::GPdu, teid, qfi, inner)
}

/// A GTP-U message of any type from the gNB to our N3 address (a sequence number with
/// the path-management messages, which carry one).
fn gtpu4(msg_type: MessageType, teid: u32, qfi: Option<u8>, inner: &[u8]) -> Vec<u8> {
    let repr = GtpuRepr {
        msg_type,
        teid: Teid(teid),
        seq: (msg_type == MessageType::EchoRequest).then_some(7),
        npdu: None,
        pdu_session: qfi.map(|q| PduSession::Uplink { qfi: Qfi::new(q).unwrap() }),
        udp_port: None,
        pdcp_number: None,
        payload_len: inner.len(),
    };
    let mut g = vec![0u8; repr.header_len()];
    repr.emit(&mut g);
    g.extend_from_slice(inner);
    let mut p = udp4(GNB, N3, 2152, 2152, g.len());
    p.truncate(28);
    p.extend_from_slice(&g);
    p
}

fn gpdu6(teid: u32, inner: &[u8]) -> Vec<u8> {
    let mut p = udp6(GNB6, N3_6, 2152, 2152, 8 + inner.len());
    p.truncate(48);
    p.extend_from_slice(&[0x30, 255]);
    p.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    p.extend_from_slice(&teid.to_be_bytes());
    p.extend_from_slice(inner);
    p
}

fn pdr(id: u16, precedence: u32, far: u32) -> Pdr {
    Pdr {
        id,
        precedence,
        source: Interface::Access,
        local_f_teid: None,
        ue_ipv4: None,
        ue_ipv6: None,
        ue_is_destination: false,
        sdf_filters: vec![],
        qfi: None,
        outer_header_removal: false,
        far_id: Some(far),
        qer_ids: vec![1],
        urr_ids: vec![1],
    }
}

fn far(id: u32, action: u64, to: Option<(IpAddr, u32)>) -> Far {
    Far {
        id,
        action,
        destination: None,
        outer_header: to.map(|(addr, teid)| GtpuEndpoint { teid, addr }),
        transport_marking: None,
        network_instance: None,
        bar_id: None,
    }
}

/// A session of an SMF on this host with no rules yet.
fn no_rules(seid: u64) -> SessionRules {
    SessionRules {
        seid,
        cp_node: PfcpNode::Ipv4(Ipv4Addr::LOCALHOST),
        pdrs: Default::default(),
        fars: Default::default(),
        qers: Default::default(),
        urrs: Default::default(),
        bar: None,
    }
}

/// A session like an SMF's: uplink on TEID 0x100 (QFI 9), downlink to the UE toward the
/// gNB on TEID 0x200, one QER (QFI 9), one URR.
fn session(seid: u64) -> SessionRules {
    let mut r = no_rules(seid);
    let mut up = pdr(1, 100, 1);
    up.local_f_teid = Some(GtpuEndpoint { teid: 0x100, addr: IpAddr::V4(N3) });
    up.ue_ipv4 = Some(UE);
    up.qfi = Some(9);
    up.outer_header_removal = true;
    let mut down = pdr(2, 100, 2);
    down.source = Interface::Core;
    down.ue_ipv4 = Some(UE);
    down.ue_is_destination = true;
    r.pdrs.insert(1, up);
    r.pdrs.insert(2, down);
    r.fars.insert(1, far(1, apply_action::FORW, None));
    r.fars.insert(2, far(2, apply_action::FORW, Some((IpAddr::V4(GNB), 0x200))));
    r.qers.insert(
        1,
        Qer {
            id: 1,
            ul_open: true,
            dl_open: true,
            mbr_ul_kbps: None,
            mbr_dl_kbps: None,
            gbr_ul_kbps: None,
            gbr_dl_kbps: None,
            qfi: Some(9),
        },
    );
    r.urrs.insert(1, Urr { id: 1, ..Default::default() });
    r
}

/// The GTP-U header and inner packet of an encapsulated IPv4 packet, checked field by field.
fn decap4(p: &[u8]) -> (Ipv4Addr, Ipv4Addr, GtpuRepr, Vec<u8>) {
    assert_eq!(p[0], 0x45);
    assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, p.len(), "IPv4 total length");
    assert!(wire::checksum::verify(&p[..20]), "IPv4 header checksum");
    assert_eq!(p[9], 17);
    assert_eq!(u16::from_be_bytes([p[20], p[21]]), 2152);
    assert_eq!(u16::from_be_bytes([p[22], p[23]]), 2152);
    assert_eq!(u16::from_be_bytes([p[24], p[25]]) as usize, p.len() - 20, "UDP length");
    let g = GtpuPacket::new_checked(&p[28..]).unwrap();
    let r = GtpuRepr::parse(&g).unwrap();
    let inner = p[p.len() - r.payload_len..].to_vec();
    (Ipv4Addr::new(p[12], p[13], p[14], p[15]), Ipv4Addr::new(p[16], p[17], p[18], p[19]), r, inner)
}

#[test]
fn uplink_decapsulates_and_counts_the_inner_bytes() {
    let mut rig = Rig::new();
    rig.install(&session(1));
    let inner = udp4(UE, DN, 4000, 53, 100);
    let got = rig.send(0, &[gpdu4(0x100, Some(9), &inner), gpdu4(0x100, Some(9), &inner)]);
    assert_eq!(got, vec![("ip4-input", inner.clone()), ("ip4-input", inner.clone())]);
    assert_eq!(rig.counter("upf4-uplink", "forwarded"), 2);
    assert_eq!(rig.usage(1, 1), Usage { ul_bytes: 2 * inner.len() as u64, ul_packets: 2, ..Default::default() });
    // Another TEID: no session, answered with an Error Indication; the right TEID with
    // another QFI: no PDR.
    let got = rig.send(0, &[gpdu4(0x101, Some(9), &inner)]);
    assert_eq!(error_indications(&got), vec![(N3, GNB, 0x101, IpAddr::V4(N3))]);
    assert_eq!(rig.counter("upf4-uplink", "error-indications-sent"), 1);
    assert!(rig.send(0, &[gpdu4(0x100, Some(5), &inner), gpdu4(0x100, None, &inner)]).is_empty());
    assert_eq!(rig.counter("upf4-uplink", "no-pdr"), 2);
}

/// `show trace` of the UPF nodes: the QFI as a number (or `none`), the inner protocol
/// by name and its ports; never `Some(9)` or `Some((4000, 53))`.
#[test]
fn traces_print_qfi_protocol_and_ports_as_words() {
    let mut rig = Rig::new();
    rig.install(&session(1));
    let inner = udp4(UE, DN, 4000, 53, 100);
    for (i, name) in [(0, "test-n3"), (2, "test-n6")] {
        rig.graph.trace_add(name, 4).unwrap();
        let pkts = if i == 0 { vec![gpdu4(0x100, Some(9), &inner), gpdu4(0x100, None, &inner)] } else { vec![udp4(DN, UE, 53, 4000, 100)] };
        rig.send(i, &pkts);
    }
    let text: Vec<String> =
        rig.graph.trace_records().iter().filter(|r| r.node.starts_with("upf4")).map(|r| format!("{}: {}", r.node, r.text)).collect();
    assert_eq!(
        text,
        [
            "upf4-uplink: teid 0x100 qfi 9 inner 128 bytes".to_string(),
            "upf4-uplink: teid 0x100 qfi none inner 128 bytes".into(),
            "upf4-downlink: 198.18.8.9 -> 198.19.7.1 udp ports 53 -> 4000".into(),
        ]
    );
}

/// TS 29.244 §5.2.1: the uplink PDR's PDI names the UE's address, so a G-PDU whose inner
/// source is another is matched by no PDR (dropped as `wrong-ue-source`), through the
/// session's record and through the full match alike; IPv6 by the UE's /64; a PDI without
/// a UE address takes any source; S/D set compares the inner destination.
#[test]
fn a_ue_cannot_send_from_an_address_not_its_own() {
    let spoofed = Ipv4Addr::new(198, 19, 7, 99);
    let in_prefix: Ipv6Addr = "2001:db8:19:1::abcd".parse().unwrap();
    let off_prefix: Ipv6Addr = "2001:db8:19:2::1".parse().unwrap();
    let dn6: Ipv6Addr = "2001:db8:8::9".parse().unwrap();
    for full_match_only in [false, true] {
        let mut rig = Rig::new();
        rig.full_match_only = full_match_only;
        let mut r = session(1);
        r.pdrs.get_mut(&1).unwrap().ue_ipv6 = Some(UE6);
        rig.install(&r);
        let own = udp4(UE, DN, 4000, 53, 10);
        let other = udp4(spoofed, DN, 4000, 53, 10);
        let got = rig.send(0, &[gpdu4(0x100, Some(9), &own), gpdu4(0x100, Some(9), &other), gpdu4(0x100, Some(9), &own)]);
        assert_eq!(got, vec![("ip4-input", own.clone()), ("ip4-input", own.clone())], "full match only: {full_match_only}");
        let own6 = udp6(in_prefix, dn6, 4000, 53, 10);
        let other6 = udp6(off_prefix, dn6, 4000, 53, 10);
        let got = rig.send(0, &[gpdu4(0x100, Some(9), &other6), gpdu4(0x100, Some(9), &own6)]);
        assert_eq!(got, vec![("ip6-input", own6.clone())]);
        assert_eq!(rig.counter("upf4-uplink", "wrong-ue-source"), 2);
        assert_eq!(rig.counter("upf4-uplink", "no-pdr"), 0);
        assert_eq!(rig.usage(1, 1).ul_packets, 3, "what was dropped is not counted as usage");
        // Another QFI fails the PDR on its own: no PDR, whatever the source.
        assert!(rig.send(0, &[gpdu4(0x100, Some(5), &other)]).is_empty());
        assert_eq!(rig.counter("upf4-uplink", "no-pdr"), 1);

        // Without a UE address in the PDI any source goes; with S/D set, the destination
        // is compared.
        let up = r.pdrs.get_mut(&1).unwrap();
        (up.ue_ipv4, up.ue_ipv6) = (None, None);
        rig.install(&r);
        assert_eq!(rig.send(0, &[gpdu4(0x100, Some(9), &other)]).len(), 1);
        let up = r.pdrs.get_mut(&1).unwrap();
        (up.ue_ipv4, up.ue_is_destination) = (Some(DN), true);
        rig.install(&r);
        assert_eq!(rig.send(0, &[gpdu4(0x100, Some(9), &other), gpdu4(0x100, Some(9), &udp4(DN, UE, 1, 2, 3))]).len(), 1);
        assert_eq!(rig.counter("upf4-uplink", "wrong-ue-source"), 3);
    }
}

#[test]
fn downlink_encapsulates_toward_the_gnb_with_the_qfi() {
    let mut rig = Rig::new();
    rig.install(&session(1));
    let inner = udp4(DN, UE, 53, 4000, 60);
    let got = rig.send(2, &[inner.clone()]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "ip4-lookup");
    let (src, dst, g, back) = decap4(&got[0].1);
    assert_eq!((src, dst, g.teid, g.msg_type), (N3, GNB, Teid(0x200), MessageType::GPdu));
    assert_eq!(g.pdu_session, Some(PduSession::Downlink { qfi: Qfi::new(9).unwrap(), rqi: false, ppi: None }));
    assert_eq!(back, inner);
    assert_eq!(rig.usage(1, 1), Usage { dl_bytes: inner.len() as u64, dl_packets: 1, ..Default::default() });
    // Another UE address in the pool: no session.
    assert!(rig.send(2, &[udp4(DN, Ipv4Addr::new(198, 19, 7, 2), 53, 4000, 10)]).is_empty());
    assert_eq!(rig.counter("upf4-downlink", "no-session"), 1);
}

/// The downlink's outer header takes the inner packet's DSCP and ECN, but for the DSCP
/// bits the SMF's Transport Level Marking sets (a mask of 0 meaning the whole DSCP); the
/// ECN field is always the inner packet's.
#[test]
fn downlink_outer_traffic_class_is_the_inner_ones_or_the_smfs_marking() {
    use ip::outer::tos::{set_ipv4_tos, CE, ECT0};
    let mut inner = udp4(DN, UE, 53, 4000, 60);
    set_ipv4_tos(&mut inner, (34 << 2) | ECT0);
    for (marking, want) in [
        (None, (34 << 2) | ECT0),
        (Some((46 << 2, 0xfc)), (46 << 2) | ECT0),
        (Some(((46 << 2) | CE, 0)), (46 << 2) | ECT0),
        (Some((0xff, 0x20)), (34 << 2) | 0x20 | ECT0),
    ] {
        let mut rig = Rig::new();
        let mut r = session(1);
        r.fars.get_mut(&2).unwrap().transport_marking = marking;
        rig.install(&r);
        let got = rig.send(2, &[inner.clone()]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1[1], want, "{marking:?}");
        assert!(wire::checksum::verify(&got[0].1[..20]));
        assert_eq!(decap4(&got[0].1).3, inner, "the inner packet as it came");
    }
}

/// `udp4` with DF set.
fn with_df(mut p: Vec<u8>) -> Vec<u8> {
    p[6] |= 0x40;
    p[10..12].copy_from_slice(&[0, 0]);
    let sum = wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p
}

/// Downlink takes the tunnel-MTU step every tunnel does: the N3 link (1500) less the
/// outer IPv4, UDP and GTP-U headers (20 + 8 + 16 with the PDU Session Container) leaves
/// 1456 bytes. A larger packet with DF is answered with ICMP frag-needed to its source
/// (it was encapsulated and then dropped as the gateway's own, its source never told), one
/// without DF is fragmented first; neither is counted until it goes out.
#[test]
fn downlink_larger_than_the_n3_path_is_signalled_or_fragmented_not_lost() {
    let mut rig = Rig::new();
    rig.install(&session(1));
    let fits = with_df(udp4(DN, UE, 53, 4000, 1456 - 28));
    let got = rig.send(2, &[fits]);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].1.len()), ("ip4-lookup", 1500), "exactly the link");
    let big = udp4(DN, UE, 53, 4000, 1457 - 28);
    let got = rig.send(2, &[with_df(big.clone())]);
    assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-icmp-error", 1457)]);
    assert_eq!(rig.counter("upf4-downlink", "inner-too-big"), 1);
    let got = rig.send(2, &[big]);
    assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-fragment", 1457)]);
    assert_eq!(rig.counter("upf4-downlink", "fragment-inner"), 1);
    assert_eq!(rig.usage(1, 1), Usage { dl_bytes: 1456, dl_packets: 1, ..Default::default() }, "only what went out");
}

#[test]
fn precedence_and_sdf_filters_pick_the_downlink_pdr() {
    let mut rig = Rig::new();
    let mut r = session(1);
    // PDR 3 (precedence 10, checked first): UDP from 198.18.8.0/24 port 53 to UE port
    // 5000, toward TEID 0x300; everything else takes PDR 2 (precedence 100).
    let mut special = r.pdrs.get(&2).unwrap().clone();
    special.id = 3;
    special.precedence = 10;
    special.far_id = Some(3);
    special.sdf_filters = vec![b"permit out 17 from 198.18.8.0/24 53 to assigned 5000".to_vec()];
    r.pdrs.insert(3, special);
    r.fars.insert(3, far(3, apply_action::FORW, Some((IpAddr::V4(GNB), 0x300))));
    rig.install(&r);
    let teid_of = |rig: &mut Rig, p: Vec<u8>| {
        let got = rig.send(2, &[p]);
        decap4(&got[0].1).2.teid.0
    };
    assert_eq!(teid_of(&mut rig, udp4(DN, UE, 53, 5000, 10)), 0x300);
    assert_eq!(teid_of(&mut rig, udp4(DN, UE, 53, 5001, 10)), 0x200);
    assert_eq!(teid_of(&mut rig, udp4(DN, UE, 54, 5000, 10)), 0x200);
    assert_eq!(teid_of(&mut rig, udp4(Ipv4Addr::new(198, 18, 9, 9), UE, 53, 5000, 10)), 0x200);
    // Lower the special PDR's priority below the catch-all: it never matches.
    r.pdrs.get_mut(&3).unwrap().precedence = 1000;
    rig.install(&r);
    assert_eq!(teid_of(&mut rig, udp4(DN, UE, 53, 5000, 10)), 0x200);
}

#[test]
fn far_drop_buffer_gate_and_quota_drop_by_name() {
    let mut rig = Rig::new();
    let mut r = session(7);
    let dl = udp4(DN, UE, 53, 4000, 10);
    let ul = gpdu4(0x100, Some(9), &udp4(UE, DN, 4000, 53, 10));

    r.fars.get_mut(&2).unwrap().action = apply_action::DROP;
    rig.install(&r);
    assert!(rig.send(2, &[dl.clone()]).is_empty());
    assert_eq!(rig.counter("upf4-downlink", "far-drop"), 1);

    r.fars.get_mut(&2).unwrap().action = apply_action::BUFF | apply_action::NOCP;
    rig.install(&r);
    assert!(rig.send(2, &[dl.clone(), dl.clone(), dl.clone()]).is_empty());
    assert_eq!(rig.counter("upf-buffer", "held"), 3);
    assert_eq!(
        rig.events.try_iter().collect::<Vec<_>>(),
        vec![UpfEvent::DownlinkData { seid: 7, pdr_id: 2 }],
        "one report asked per buffering episode"
    );
    // An uplink FAR that buffers drops by name.
    r.fars.get_mut(&1).unwrap().action = apply_action::BUFF;
    rig.install(&r);
    assert!(rig.send(0, &[ul.clone()]).is_empty());
    assert_eq!(rig.counter("upf4-uplink", "buffered-dropped"), 1);
    r.fars.get_mut(&1).unwrap().action = apply_action::FORW;

    // The gate closes as the FAR forwards again: the held packets meet it too.
    r.fars.get_mut(&2).unwrap().action = apply_action::FORW;
    r.qers.get_mut(&1).unwrap().dl_open = false;
    rig.install(&r);
    assert!(rig.send(2, &[dl.clone()]).is_empty());
    assert_eq!(rig.counter("upf-buffer", "gate-closed"), 4);
    assert_eq!(rig.send(0, &[ul.clone()]).len(), 1, "the uplink gate is still open");

    r.qers.get_mut(&1).unwrap().dl_open = true;
    r.urrs.get_mut(&1).unwrap().quota_exhausted = true;
    rig.install(&r);
    assert!(rig.send(2, &[dl.clone()]).is_empty());
    assert!(rig.send(0, &[ul.clone()]).is_empty());
    assert_eq!(rig.counter("upf4-downlink", "quota-exhausted"), 1);
    assert_eq!(rig.counter("upf4-uplink", "quota-exhausted"), 1);
    // What was dropped was not counted: one uplink packet passed.
    assert_eq!(rig.usage(7, 1), Usage { ul_bytes: 38, ul_packets: 1, ..Default::default() });
}

/// Malformed input on a session's TEID is dropped by name, and nothing else counts it
/// (no other counter, not the session's URR): G-PDUs cut short (the GTP-U length past the
/// datagram, the frame shorter than its headers say), GTP-U messages other than a G-PDU
/// (Echo Request, End Marker) and inner packets that are not IP or are cut short. Over
/// both outer families, through the session's record and through the full PDR match.
#[test]
fn malformed_input_on_a_session_is_dropped_by_name() {
    let inner = udp4(UE, DN, 4000, 53, 40);
    let mut long = gpdu4(0x100, Some(9), &inner);
    let udp_len = u16::from_be_bytes([long[24], long[25]]);
    long[24..26].copy_from_slice(&(udp_len - 4).to_be_bytes());
    let mut long_plain = gpdu4(0x100, None, &inner);
    long_plain[30..32].copy_from_slice(&(inner.len() as u16 + 1).to_be_bytes());
    let mut cut = gpdu4(0x100, Some(9), &inner);
    cut.truncate(cut.len() - 20);
    let mut long6 = gpdu6(0x100, &inner);
    long6[50..52].copy_from_slice(&(inner.len() as u16 + 1).to_be_bytes());
    let mut end_marker6 = gpdu6(0x100, &[]);
    end_marker6[49] = 254;
    let mut ihl_4 = inner.clone();
    ihl_4[0] = 0x44;
    let cases: [(&str, usize, Vec<u8>, &str, &str); 12] = [
        ("GTP-U length past the UDP length", 0, long, "upf4-uplink", "truncated"),
        ("GTP-U length past the UDP length, fixed header", 0, long_plain, "upf4-uplink", "truncated"),
        ("frame cut short", 0, cut, "upf4-uplink", "truncated"),
        ("GTP-U length past the UDP length", 1, long6, "upf6-uplink", "truncated"),
        ("Echo Request", 0, gtpu4(MessageType::EchoRequest, 0x100, None, &[]), "upf4-uplink", "not-gpdu"),
        ("End Marker", 0, gtpu4(MessageType::EndMarker, 0x100, None, &[]), "upf4-uplink", "not-gpdu"),
        ("End Marker", 1, end_marker6, "upf6-uplink", "not-gpdu"),
        ("inner not IP", 0, gpdu4(0x100, Some(9), &[0x00; 40]), "upf4-uplink", "bad-inner"),
        ("inner Ethernet", 1, gpdu6(0x100, &[0x02; 60]), "upf6-uplink", "bad-inner"),
        ("inner IPv4 header cut short", 0, gpdu4(0x100, Some(9), &inner[..12]), "upf4-uplink", "truncated"),
        ("inner IPv4 header length below 20", 0, gpdu4(0x100, Some(9), &ihl_4), "upf4-uplink", "truncated"),
        ("inner IPv6 header cut short", 1, gpdu6(0x100, &udp6(UE6, N3_6, 1, 2, 0)[..30]), "upf6-uplink", "truncated"),
    ];
    for full_match_only in [false, true] {
        let mut rig = Rig::new();
        rig.full_match_only = full_match_only;
        rig.install(&session(1));
        for (what, input, packet, node, counter) in &cases {
            let before = rig.graph.counter_snapshots();
            assert!(rig.send(*input, std::slice::from_ref(packet)).is_empty(), "{what}: nothing passes");
            let after = rig.graph.counter_snapshots();
            let moved: Vec<(&str, &str, u64)> = after
                .iter()
                .zip(&before)
                .filter(|(a, b)| a.count != b.count)
                .map(|(a, b)| (a.node.as_str(), a.counter, a.count - b.count))
                .collect();
            assert_eq!(moved, vec![(*node, *counter, 1)], "{what} into input {input} (full match only: {full_match_only})");
        }
        assert_eq!(rig.usage(1, 1), Usage::default(), "the session's URR counted none of it");
        assert_eq!(rig.pool.in_use(), 0);
        // The session itself still forwards.
        assert_eq!(rig.send(0, &[gpdu4(0x100, Some(9), &inner)]), vec![("ip4-input", inner.clone())]);
    }
}

#[test]
fn mbr_passes_a_burst_then_drops() {
    let mut rig = Rig::new();
    let mut r = session(1);
    // 8 kbit/s = 1000 bytes/s: the bucket holds the minimum burst of 3000 bytes, and the
    // refill during the test run is a few bytes at most.
    r.qers.get_mut(&1).unwrap().mbr_dl_kbps = Some(8);
    rig.install(&r);
    let dl = udp4(DN, UE, 53, 4000, 972); // 1000 bytes
    let got = rig.send(2, &vec![dl; 10]);
    assert_eq!(got.len(), 3);
    assert_eq!(rig.counter("upf4-downlink", "mbr-exceeded"), 7);
    assert_eq!(rig.usage(1, 1).dl_bytes, 3000);
}

#[test]
fn ipv6_outer_and_ipv6_ue() {
    let mut rig = Rig::new();
    let mut r = session(1);
    let up = r.pdrs.get_mut(&1).unwrap();
    up.local_f_teid = Some(GtpuEndpoint { teid: 0x600, addr: IpAddr::V6(N3_6) });
    up.qfi = None;
    (up.ue_ipv4, up.ue_ipv6) = (None, Some(UE6));
    let down = r.pdrs.get_mut(&2).unwrap();
    down.ue_ipv4 = None;
    down.ue_ipv6 = Some(UE6);
    r.fars.get_mut(&2).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x700, addr: IpAddr::V6(GNB6) });
    rig.install(&r);
    let inner = udp6(UE6, "2001:db8:8::9".parse().unwrap(), 1, 2, 20);
    assert_eq!(rig.send(1, &[gpdu6(0x600, &inner)]), vec![("ip6-input", inner.clone())]);
    // Downlink to another address in the UE's /64.
    let to_ue = udp6("2001:db8:8::9".parse().unwrap(), "2001:db8:19:1::77".parse().unwrap(), 2, 1, 20);
    let got = rig.send(3, &[to_ue.clone()]);
    assert_eq!(got.len(), 1);
    let p = &got[0].1;
    assert_eq!((got[0].0, p[0] >> 4, p[6]), ("ip6-lookup", 6, 17));
    assert_eq!(&p[8..24], &N3_6.octets());
    assert_eq!(&p[24..40], &GNB6.octets());
    let mut c = <ip::outer::Ip6Outer as ip::outer::OuterFamily>::pseudo(&N3_6, &GNB6);
    c.add_u32((p.len() - 40) as u32).add_bytes(&p[40..]);
    assert_eq!(c.fold(), 0xffff, "UDP checksum over IPv6");
    assert_eq!(u32::from_be_bytes([p[52], p[53], p[54], p[55]]), 0x700);
    assert_eq!(&p[p.len() - to_ue.len()..], &to_ue[..]);
}

/// A dual-stack session whose SMF gives each family its own downlink PDR (TS 29.244
/// §5.2.1: every match field of the PDI, the UE address included): an IPv6 packet to
/// the UE takes the IPv6 PDR even when the IPv4 one has precedence, and the other way
/// round; with the IPv6 PDR gone, the session no longer takes IPv6 packets at all.
#[test]
fn downlink_pdrs_of_one_family_take_only_that_family() {
    let mut rig = Rig::new();
    let mut r = session(1);
    let mut v6 = r.pdrs.get(&2).unwrap().clone();
    (v6.id, v6.precedence, v6.far_id, v6.ue_ipv4, v6.ue_ipv6) = (3, 200, Some(3), None, Some(UE6));
    r.pdrs.insert(3, v6);
    r.fars.insert(3, far(3, apply_action::FORW, Some((IpAddr::V4(GNB), 0x300))));
    let dn6: Ipv6Addr = "2001:db8:8::9".parse().unwrap();
    let teid_of = |rig: &mut Rig, input: usize, p: Vec<u8>| {
        let got = rig.send(input, &[p]);
        assert_eq!(got.len(), 1, "{got:?}");
        decap4(&got[0].1).2.teid.0
    };
    for v4_first in [true, false] {
        r.pdrs.get_mut(&2).unwrap().precedence = if v4_first { 100 } else { 300 };
        rig.install(&r);
        assert_eq!(teid_of(&mut rig, 2, udp4(DN, UE, 53, 4000, 10)), 0x200, "IPv4, v4 first {v4_first}");
        assert_eq!(teid_of(&mut rig, 3, udp6(dn6, UE6, 53, 4000, 10)), 0x300, "IPv6, v4 first {v4_first}");
        let slot = rig.state.slot(1).unwrap();
        let down = rig.shared.load_full().records(slot).downlink;
        assert_eq!(down.action, None, "two PDRs by family: the full match decides");
    }
    // One PDR naming both addresses ahead of the IPv6 one: it takes both families, and
    // the record does (it names every address the session is found by).
    let both = r.pdrs.get_mut(&2).unwrap();
    (both.precedence, both.ue_ipv6) = (100, Some(UE6));
    rig.install(&r);
    assert_eq!(teid_of(&mut rig, 3, udp6(dn6, UE6, 53, 4000, 10)), 0x200);
    let slot = rig.state.slot(1).unwrap();
    assert!(rig.shared.load_full().records(slot).downlink.action.is_some(), "the first PDR covers both UE addresses");
    // Only the IPv4 PDR left: no IPv6 key, no session for IPv6 packets.
    r.pdrs.get_mut(&2).unwrap().ue_ipv6 = None;
    r.pdrs.remove(&3);
    rig.install(&r);
    assert!(rig.send(3, &[udp6(dn6, UE6, 53, 4000, 10)]).is_empty());
    assert_eq!(rig.counter("upf6-downlink", "no-session"), 1);
    assert_eq!(teid_of(&mut rig, 2, udp4(DN, UE, 53, 4000, 10)), 0x200);
}

#[test]
fn forwarding_to_a_peer_upf_replaces_the_outer_header() {
    let mut rig = Rig::new();
    let mut r = session(1);
    // N9: the uplink FAR sends on to a peer UPF on TEID 0x900.
    r.fars.get_mut(&1).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x900, addr: IpAddr::V4(Ipv4Addr::new(198, 18, 9, 1)) });
    rig.install(&r);
    let inner = udp4(UE, DN, 4000, 53, 30);
    let got = rig.send(0, &[gpdu4(0x100, Some(9), &inner)]);
    assert_eq!(got[0].0, "ip4-lookup");
    let (src, dst, g, back) = decap4(&got[0].1);
    assert_eq!((src, dst, g.teid), (N3, Ipv4Addr::new(198, 18, 9, 1), Teid(0x900)));
    assert_eq!(back, inner);
}

/// RFC 6040 on the uplink: the gNB path's outer CE mark reaches an ECN-capable inner
/// packet (its checksum patched) and drops one that is not; re-encapsulated toward a
/// peer UPF (N9), the new outer header carries the inner traffic class so combined.
#[test]
fn uplink_carries_congestion_marks_into_the_inner_packet() {
    use ip::outer::tos::{set_ipv4_tos, CE, ECT0};
    let marked = |mut p: Vec<u8>| {
        set_ipv4_tos(&mut p, CE);
        p
    };
    let mut ect0 = udp4(UE, DN, 4000, 53, 20);
    set_ipv4_tos(&mut ect0, 0xb8 | ECT0);
    let not_ect = udp4(UE, DN, 4001, 53, 20);
    let mut want = ect0.clone();
    want[1] = 0xb8 | CE;
    want[10..12].copy_from_slice(&[0, 0]);
    let sum = wire::checksum::checksum(&want[..20]);
    want[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut rig = Rig::new();
    rig.install(&session(1));
    let sent = [marked(gpdu4(0x100, Some(9), &ect0)), marked(gpdu4(0x100, Some(9), &not_ect)), gpdu4(0x100, Some(9), &not_ect)];
    let got = rig.send(0, &sent);
    assert_eq!(got, vec![("ip4-input", want.clone()), ("ip4-input", not_ect.clone())]);
    assert_eq!((rig.counter("upf4-uplink", "ecn-marked"), rig.counter("upf4-uplink", "ecn-ce-not-ect")), (1, 1));
    let mut rig = Rig::new();
    let mut r = session(1);
    r.fars.get_mut(&1).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x900, addr: IpAddr::V4(Ipv4Addr::new(198, 18, 9, 1)) });
    rig.install(&r);
    let got = rig.send(0, &[marked(gpdu4(0x100, Some(9), &ect0))]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1[1], 0xb8 | CE, "the N9 outer header carries the combined traffic class");
    assert!(wire::checksum::verify(&got[0].1[..20]));
    assert_eq!(decap4(&got[0].1).3, want);
}

/// N9 takes the tunnel-MTU step the downlink's N3 does: a peer UPF on the 1500-byte link
/// leaves 1456 bytes for the inner packet in IPv4/UDP/GTP-U with the PDU Session
/// Container. A larger one with DF is answered with ICMP frag-needed to the UE (it was
/// re-encapsulated and then dropped as the gateway's own); one without DF goes whole in
/// fragmented outer packets (its own fragments would come back by the route, to the data
/// network in the clear). Through the session's record and the full match alike; only
/// what goes out is counted.
/// A transport-mode SA that the N3 link's SPD PROTECTs our GTP-U to a peer by (the
/// control plane's `tunnel_esp` entry: N3 address → peer, UDP 2152, the link's bit) takes
/// its bytes off that path's MTU, as for gtpuN-encap's tunnels: downlink toward the gNB
/// and uplink re-encapsulated toward a peer UPF, by the record and the full match alike.
/// A packet that fits the link but not the link less ESP is signalled (DF) where it
/// went out before; an N9 one without DF too big for the link goes whole, not in outer
/// fragments that would leave past the SPD in the clear. An entry for another port, peer
/// or link changes nothing.
#[test]
fn a_transport_sa_protecting_our_gtpu_takes_its_bytes_off_the_path_mtu() {
    let peer = Ipv4Addr::new(198, 18, 7, 3);
    let overhead = 57;
    let limit = ip::outer::inner_mtu(Some(1500), overhead, 0) as u16;
    assert!(limit < 1500 - 40, "{limit}");
    let esp = |to: Ipv4Addr, port, links| ip::tables::TunnelEsp::new(N3.into(), to.into(), port, links, overhead as u16, 0);
    for full_match_only in [false, true] {
        let mut rig = Rig::new();
        rig.full_match_only = full_match_only;
        rig.install(&session(1));
        let fits = with_df(udp4(DN, UE, 53, 4000, 1456 - 28));
        for other in [esp(GNB, 2153, 1), esp(peer, 2152, 1), esp(GNB, 2152, 2)] {
            rig.set_tunnel_esp(vec![other]);
            let got = rig.send(2, &[fits.clone()]);
            assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-lookup", 1500)], "{other:?}");
        }
        rig.set_tunnel_esp(vec![esp(GNB, 2152, 1)]);
        let got = rig.send(2, &[fits.clone()]);
        assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-icmp-error", 1456)]);
        assert_eq!(rig.counter("upf4-downlink", "inner-too-big"), 1);
        let room = with_df(udp4(DN, UE, 53, 4000, limit as usize - 44 - 28));
        let got = rig.send(2, &[room]);
        assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-lookup", limit as usize)], "the link less ESP");

        // Uplink toward a peer UPF (N9), the SA protecting GTP-U to it.
        let mut rig = Rig::new();
        rig.full_match_only = full_match_only;
        let mut r = session(1);
        r.fars.get_mut(&1).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x900, addr: IpAddr::V4(peer) });
        rig.install(&r);
        rig.set_tunnel_esp(vec![esp(peer, 2152, 1)]);
        let fits = with_df(udp4(UE, DN, 4000, 53, 1456 - 28));
        let got = rig.send(0, &[gpdu4(0x100, Some(9), &fits)]);
        assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-icmp-error", 1456)]);
        let big = udp4(UE, DN, 4000, 53, 1457 - 28);
        let got = rig.send(0, &[gpdu4(0x100, Some(9), &big)]);
        assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-lookup", 1457 + 44)], "whole, for ESP");
        assert_eq!(rig.counter("upf4-uplink", "fragment-outer"), 0);
    }
}

/// What the sinks saw, by node and length.
fn shapes(got: &[(&'static str, Vec<u8>)]) -> Vec<(&'static str, usize)> {
    got.iter().map(|(n, p)| (*n, p.len())).collect()
}

/// The MTU the last packet's ICMP error request carries (frag-needed's next-hop MTU,
/// Packet Too Big's MTU).
fn icmp_mtu(rig: &Rig) -> u16 {
    ip::nodes::IcmpRequest::decode(rig.metas.lock().unwrap().last().unwrap().param).value
}

/// A session with an IPv6 UE (uplink TEID 0x600 on N3's IPv6 address) whose downlink
/// goes to the gNB over IPv6 (TEID 0x700, with the QFI's PDU Session Container).
fn session6(seid: u64) -> SessionRules {
    let mut r = session(seid);
    let up = r.pdrs.get_mut(&1).unwrap();
    up.local_f_teid = Some(GtpuEndpoint { teid: 0x600, addr: IpAddr::V6(N3_6) });
    up.qfi = None;
    (up.ue_ipv4, up.ue_ipv6) = (None, Some(UE6));
    let down = r.pdrs.get_mut(&2).unwrap();
    (down.ue_ipv4, down.ue_ipv6) = (None, Some(UE6));
    r.fars.get_mut(&2).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x700, addr: IpAddr::V6(GNB6) });
    r
}

/// N3 over IPv6 with a transport-mode SA from N3's IPv6 address to the gNB that the
/// link's SPD PROTECTs GTP-U by: the downlink path MTU is the link (1500) less the SA's
/// bytes (57) less IPv6, UDP and GTP-U with the container (64). An IPv6 packet that
/// fills it goes out as an outer packet of exactly the link less ESP; one byte more is
/// answered with Packet Too Big carrying that reduced MTU (an IPv4 one with DF, with
/// frag-needed), where without the SA both fitted; a small packet still goes out.
#[test]
fn a_transport_sa_protecting_gtpu_over_ipv6_takes_its_bytes_off_the_path_mtu() {
    let overhead = 57;
    let limit = 1500 - overhead;
    let room = limit - 40 - 8 - 16;
    let dn6: Ipv6Addr = "2001:db8:8::9".parse().unwrap();
    for full_match_only in [false, true] {
        let mut rig = Rig::new();
        rig.full_match_only = full_match_only;
        rig.install(&session6(1));
        let fits = udp6(dn6, UE6, 53, 4000, room - 48);
        let over = udp6(dn6, UE6, 53, 4000, room + 1 - 48);
        assert_eq!(shapes(&rig.send(3, std::slice::from_ref(&over))), [("ip6-lookup", 1500 - overhead + 1)], "no SA: it fits the link");
        rig.set_tunnel_esp(vec![ip::tables::TunnelEsp::new(N3_6.into(), GNB6.into(), 2152, 1, overhead as u16, 0)]);
        let got = rig.send(3, &[fits]);
        assert_eq!(shapes(&got), [("ip6-lookup", limit)], "the link less ESP");
        assert_eq!(&got[0].1[24..40], &GNB6.octets());
        assert_eq!(shapes(&rig.send(3, &[over])), [("ip6-icmp-error", room + 1)]);
        assert_eq!(icmp_mtu(&rig) as usize, room, "Packet Too Big with the reduced MTU");
        assert_eq!(rig.counter("upf6-downlink", "inner-too-big"), 1);
        let small = udp6(dn6, UE6, 53, 4000, 20);
        assert_eq!(shapes(&rig.send(3, &[small])), [("ip6-lookup", 68 + 64)]);

        // An IPv4 UE's packet with DF in the same IPv6 tunnel: frag-needed, same MTU.
        let mut rig = Rig::new();
        rig.full_match_only = full_match_only;
        let mut r = session(1);
        r.fars.get_mut(&2).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x700, addr: IpAddr::V6(GNB6) });
        rig.install(&r);
        rig.set_tunnel_esp(vec![ip::tables::TunnelEsp::new(N3_6.into(), GNB6.into(), 2152, 1, overhead as u16, 0)]);
        assert_eq!(shapes(&rig.send(2, &[with_df(udp4(DN, UE, 53, 4000, room - 28))])), [("ip6-lookup", limit)]);
        assert_eq!(shapes(&rig.send(2, &[with_df(udp4(DN, UE, 53, 4000, room + 1 - 28))])), [("ip4-icmp-error", room + 1)]);
        assert_eq!(icmp_mtu(&rig) as usize, room, "frag-needed with the reduced MTU");
    }
}

/// The small-packet shortcut's bound (`ip::Tables::tunnel_mtu_floor`) comes down with a
/// transport-mode SA on a link narrower than 576 (IPv4) or 1280 (IPv6) plus its bytes:
/// on a 600-byte N3 link an SA of 57 bytes leaves 543, on a 1300-byte one 1243, and an
/// outer packet one byte over that, though under 576 or 1280, is not waved through
/// unlooked-at: it is answered with frag-needed carrying the reduced MTU, where the
/// packet that fills it goes out. IPv4 and IPv6 outer, the inner packet IPv4 with DF.
#[test]
fn a_packet_just_over_an_sa_reduced_mtu_below_the_shortcuts_bound_is_still_signalled() {
    let overhead = 57u16;
    for (mtu, gnb) in [(600u16, IpAddr::V4(GNB)), (1300, IpAddr::V6(GNB6))] {
        let (local, outer_hl) = match gnb {
            IpAddr::V4(_) => (IpAddr::V4(N3), 20),
            IpAddr::V6(_) => (IpAddr::V6(N3_6), 40),
        };
        let limit = (mtu - overhead) as usize;
        let room = limit - outer_hl - 8 - 16;
        assert!(limit < if gnb.is_ipv4() { 576 } else { 1280 }, "{mtu}: under the bound without entries");
        for full_match_only in [false, true] {
            let mut rig = Rig::with_n3_mtu(mtu);
            rig.full_match_only = full_match_only;
            let mut r = session(1);
            r.fars.get_mut(&2).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x200, addr: gnb });
            rig.install(&r);
            rig.set_tunnel_esp(vec![ip::tables::TunnelEsp::new(local, gnb, 2152, 1, overhead, 0)]);
            let lookup = if gnb.is_ipv4() { "ip4-lookup" } else { "ip6-lookup" };
            let got = rig.send(2, &[with_df(udp4(DN, UE, 53, 4000, room - 28))]);
            assert_eq!(shapes(&got), [(lookup, limit)], "{mtu}: fills the link less ESP");
            let got = rig.send(2, &[with_df(udp4(DN, UE, 53, 4000, room + 1 - 28))]);
            assert_eq!(shapes(&got), [("ip4-icmp-error", room + 1)], "{mtu}: one byte over");
            assert_eq!(icmp_mtu(&rig) as usize, room, "{mtu}: frag-needed with the reduced MTU");
            assert_eq!(rig.counter("upf4-downlink", "inner-too-big"), 1);
        }
    }
}

#[test]
fn uplink_re_encapsulated_larger_than_the_n9_path_is_signalled_or_fragmented_not_lost() {
    let peer = Ipv4Addr::new(198, 18, 7, 3);
    for full_match_only in [false, true] {
        let mut rig = Rig::new();
        rig.full_match_only = full_match_only;
        let mut r = session(1);
        r.fars.get_mut(&1).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x900, addr: IpAddr::V4(peer) });
        rig.install(&r);
        let fits = with_df(udp4(UE, DN, 4000, 53, 1456 - 28));
        let got = rig.send(0, &[gpdu4(0x100, Some(9), &fits)]);
        assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-lookup", 1500)], "exactly the link");
        assert_eq!(decap4(&got[0].1).1, peer);
        let big = udp4(UE, DN, 4000, 53, 1457 - 28);
        let got = rig.send(0, &[gpdu4(0x100, Some(9), &with_df(big.clone()))]);
        assert_eq!(
            got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(),
            [("ip4-icmp-error", 1457)],
            "the inner packet, for its source"
        );
        assert_eq!(rig.counter("upf4-uplink", "inner-too-big"), 1);
        let got = rig.send(0, &[gpdu4(0x100, Some(9), &big)]);
        assert_eq!(got.iter().map(|(n, p)| (*n, p.len())).collect::<Vec<_>>(), [("ip4-fragment", 1457 + 44)], "re-encapsulated whole");
        assert_eq!(decap4(&got[0].1).3, big);
        assert_eq!(rig.counter("upf4-uplink", "fragment-outer"), 1);
        assert_eq!(rig.counter("upf4-uplink", "encapsulated"), 2);
        assert_eq!(rig.usage(1, 1), Usage { ul_bytes: 1456 + 1457, ul_packets: 2, ..Default::default() }, "only what went out");
    }
}

/// A packet whose new outer header finds no room in front of it is dropped as `no-room`
/// and counted nowhere else: not as forwarded or encapsulated, not in the session's
/// usage. Uplink re-encapsulated toward a peer UPF (a plain 8-byte GTP-U header
/// removed, 16 bytes with the PDU Session Container to add) and downlink toward the gNB,
/// through the session's record and the full match alike; the same packets with room go
/// on and are counted.
#[test]
fn a_packet_without_room_for_its_outer_header_is_only_a_drop() {
    for full_match_only in [false, true] {
        let mut rig = Rig::new();
        rig.full_match_only = full_match_only;
        let mut r = session(1);
        r.pdrs.get_mut(&1).unwrap().qfi = None;
        r.fars.get_mut(&1).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x900, addr: IpAddr::V4(Ipv4Addr::new(198, 18, 7, 3)) });
        rig.install(&r);
        let up = gpdu4(0x100, None, &udp4(UE, DN, 4000, 53, 20));
        let down = udp4(DN, UE, 53, 4000, 20);
        assert!(rig.inject_with_headroom(0, std::slice::from_ref(&up), 0).is_empty());
        assert!(rig.inject_with_headroom(2, std::slice::from_ref(&down), 0).is_empty());
        for node in ["upf4-uplink", "upf4-downlink"] {
            assert_eq!(rig.counter(node, "no-room"), 1, "{node}");
            assert_eq!((rig.counter(node, "forwarded"), rig.counter(node, "encapsulated")), (0, 0), "{node}");
        }
        assert_eq!(rig.usage(1, 1), Usage::default(), "nothing went out");
        let got = rig.inject_with_headroom(0, &[up], 44);
        assert_eq!(got.len(), 1, "44 bytes are room enough");
        let got = rig.inject_with_headroom(2, &[down], 44);
        assert_eq!(got.len(), 1);
        for node in ["upf4-uplink", "upf4-downlink"] {
            assert_eq!((rig.counter(node, "no-room"), rig.counter(node, "forwarded")), (1, 1), "{node}");
        }
        assert_eq!(rig.usage(1, 1), Usage { ul_bytes: 48, ul_packets: 1, dl_bytes: 48, dl_packets: 1 });
    }
}

/// The uplink's decap drops the offload marks that described the outer packet, as
/// gtpuN-input's does (one helper, `Buffer::decapsulate`): a G-PDU that came as a UDP GSO
/// frame with its outer UDP checksum pending and the device's DATA_VALID reaches the
/// router as one plain packet; a partial checksum inside the inner packet (its own UDP's)
/// stays, moved with it.
#[test]
fn uplink_decap_drops_the_outer_packets_offload_marks() {
    let mut rig = Rig::new();
    rig.install(&session(1));
    let inner = udp4(UE, DN, 4000, 53, 100);
    let gpdu = gpdu4(0x100, Some(9), &inner);
    let inner_at = gpdu.len() - inner.len();
    let n3 = rig.inputs[0];
    let outer = |csum_at: usize| {
        move |buf: &mut Buffer| {
            buf.set_partial_checksum(csum_at, 6);
            buf.meta.offload.gso = engine::GsoKind::UdpL4;
            buf.meta.offload.gso_size = 1000;
            buf.meta.l4_checksum_ok = true;
        }
    };
    let got = rig.inject_prepared(n3, std::slice::from_ref(&gpdu), outer(20));
    assert_eq!(got, vec![("ip4-input", inner.clone())]);
    let m = rig.metas.lock().unwrap()[0];
    assert_eq!((m.offload, m.l4_checksum_ok), (engine::Offload::default(), false), "the outer datagram's marks");
    let got = rig.inject_prepared(n3, std::slice::from_ref(&gpdu), outer(inner_at + 20));
    assert_eq!(got, vec![("ip4-input", inner.clone())]);
    let m = rig.metas.lock().unwrap()[0];
    assert_eq!((m.offload.gso, m.offload.gso_size, m.l4_checksum_ok), (engine::GsoKind::None, 0, false));
    let own = (m.offload.csum_start as usize, m.offload.csum_offset);
    assert_eq!(own, (engine::HEADROOM + inner_at + 20, 6), "the inner UDP's own partial checksum stays");
}

#[test]
fn a_removed_session_drops_and_its_slots_count_afresh_for_the_next() {
    let mut rig = Rig::new();
    rig.install(&session(1));
    let inner = udp4(UE, DN, 4000, 53, 10);
    rig.send(0, &[gpdu4(0x100, Some(9), &inner)]);
    assert_eq!(rig.usage(1, 1).ul_packets, 1);
    assert!(rig.state.remove(1));
    rig.publish();
    let got = rig.send(0, &[gpdu4(0x100, Some(9), &inner)]);
    assert_eq!(error_indications(&got), vec![(N3, GNB, 0x100, IpAddr::V4(N3))], "the TEID is no session's any more");
    assert_eq!(rig.state.slots_in_use(), (0, 0));
    rig.install(&session(2));
    assert_eq!(rig.usage(2, 1), Usage::default(), "the reused URR slot starts at zero");
    rig.send(0, &[gpdu4(0x100, Some(9), &inner)]);
    assert_eq!(rig.usage(2, 1).ul_packets, 1);
}

#[test]
fn a_key_of_another_session_refuses_the_install() {
    let mut rig = Rig::new();
    rig.install(&session(1));
    let err = rig.state.install_rules(&session(2)).unwrap_err();
    assert_eq!(err.to_string(), "TEID 0x100 belongs to another session");
    assert_eq!(rig.state.slots_in_use(), (1, 1), "nothing allocated for the refused one");
    let mut bad = session(3);
    bad.pdrs.get_mut(&2).unwrap().sdf_filters = vec![b"permit in ip from any to assigned".to_vec()];
    assert!(rig.state.install_rules(&bad).unwrap_err().to_string().contains("PDR 2: SDF filter"));
}

proptest! {
    /// Any bytes into any of the four nodes: a named drop or a packet out, never a panic.
    #[test]
    fn any_input_is_safe(input in 0usize..4, bytes in proptest::collection::vec(any::<u8>(), 0..200), teid in prop_oneof![Just(0x100u32), any::<u32>()]) {
        let mut rig = Rig::new();
        rig.install(&session(1));
        let mut p = bytes.clone();
        if input == 0 && p.len() > 40 {
            // Often a real G-PDU header with a random tail.
            let g = gpdu4(teid, Some(9), &p[40..]);
            p = g;
            let n = bytes[0] as usize % (p.len() + 1);
            p.truncate(n.max(28));
        }
        rig.send(input, &[p]);
    }
}

#[test]
fn end_markers_are_gtpu_type_254_from_our_n3_address() {
    let mut rig = Rig::new();
    rig.publish();
    let t = rig.shared.load();
    let (input, p) = upf::nodes::end_marker(&t, IpAddr::V4(GNB), 0x200).unwrap();
    assert_eq!(input, upf::nodes::CONTROL_INPUT4);
    let (src, dst, g, inner) = decap4(&p);
    assert_eq!((src, dst, g.msg_type, g.teid, inner.len()), (N3, GNB, MessageType::EndMarker, Teid(0x200), 0));
    assert_eq!(p.len(), 20 + 8 + 8);
    let (input, p) = upf::nodes::end_marker(&t, IpAddr::V6(GNB6), 0x300).unwrap();
    assert_eq!((input, p.len()), (upf::nodes::CONTROL_INPUT6, 40 + 8 + 8));
    let mut c = <ip::outer::Ip6Outer as ip::outer::OuterFamily>::pseudo(&N3_6, &GNB6);
    c.add_u32(16).add_bytes(&p[40..]);
    assert_eq!(c.fold(), 0xffff, "UDP checksum over IPv6");
    assert_eq!((p[49], u32::from_be_bytes([p[52], p[53], p[54], p[55]])), (254, 0x300));
    // No N3 address of the peer's family: none.
    let mut no_v6 = UpfState::new(1, 1, 1);
    no_v6.set_n3(Some(N3), None);
    assert!(upf::nodes::end_marker(&no_v6.build(), IpAddr::V6(GNB6), 1).is_none());
}

#[test]
fn with_many_sessions_each_packet_finds_its_own() {
    // Past the size where the nodes prefetch a vector's lookups level by level.
    let mut rig = Rig::new();
    rig.state = UpfState::new(2000, 4000, 4000);
    rig.state.set_n3(Some(N3), Some(N3_6));
    for i in 0..1100u32 {
        let mut r = session(i as u64 + 1);
        r.pdrs.get_mut(&1).unwrap().local_f_teid = Some(GtpuEndpoint { teid: 0x1000 + i, addr: IpAddr::V4(N3) });
        let ue = Ipv4Addr::from(u32::from(UE) + i);
        r.pdrs.get_mut(&1).unwrap().ue_ipv4 = Some(ue);
        r.pdrs.get_mut(&2).unwrap().ue_ipv4 = Some(ue);
        r.fars.get_mut(&2).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x8000 + i, addr: IpAddr::V4(GNB) });
        rig.state.install_rules(&r).unwrap();
    }
    rig.publish();
    let picks: Vec<u32> = (0..200).map(|k| (k * 37) % 1100).collect();
    let down: Vec<Vec<u8>> = picks.iter().map(|&i| udp4(DN, Ipv4Addr::from(u32::from(UE) + i), 53, 4000, 20)).collect();
    let got = rig.send(2, &down);
    let teids: Vec<u32> = got.iter().map(|(_, p)| decap4(p).2.teid.0).collect();
    assert_eq!(teids, picks.iter().map(|i| 0x8000 + i).collect::<Vec<_>>());
    let up: Vec<Vec<u8>> =
        picks.iter().map(|&i| gpdu4(0x1000 + i, Some(9), &udp4(Ipv4Addr::from(u32::from(UE) + i), DN, 4000, 53, 20))).collect();
    let got = rig.send(0, &up);
    assert_eq!(got.len(), picks.len());
    for (&i, (_, p)) in picks.iter().zip(&got) {
        assert_eq!(&p[12..16], &Ipv4Addr::from(u32::from(UE) + i).octets());
    }
    assert_eq!(rig.usage(1 + 37, 1).ul_packets, 1);
}

/// The packets' payloads as sent to the UE, in the order the gNB got them, and the TEID
/// they were sent on.
fn delivered(got: &[(&'static str, Vec<u8>)]) -> Vec<(u32, Vec<u8>)> {
    got.iter()
        .map(|(node, p)| {
            assert_eq!(*node, "ip4-lookup");
            let (src, dst, g, inner) = decap4(p);
            assert_eq!((src, dst), (N3, GNB));
            (g.teid.0, inner)
        })
        .collect()
}

/// Downlink packets to the UE, each with its number in the UDP source port.
fn numbered(range: core::ops::Range<u16>) -> Vec<Vec<u8>> {
    range.map(|n| udp4(DN, UE, n, 4000, 10)).collect()
}

#[test]
fn buffered_packets_go_first_in_order_once_the_far_forwards() {
    let mut rig = Rig::new();
    let mut r = session(9);
    r.fars.get_mut(&2).unwrap().action = apply_action::BUFF | apply_action::NOCP;
    rig.install(&r);
    let held = numbered(0..5);
    for p in &held {
        assert!(rig.send(2, std::slice::from_ref(p)).is_empty(), "held, not forwarded");
    }
    assert_eq!(rig.counter("upf-buffer", "held"), 5);
    assert_eq!(rig.events.try_iter().count(), 1, "one Downlink Data Report asked");
    assert_eq!(rig.cx.upf.held.session_len(0), 5);
    // A release for a session that still buffers sends nothing.
    assert!(rig.command(BufferCmd::Release { slot: 0, seid: 9 }).is_empty());
    assert_eq!(rig.cx.upf.held.session_len(0), 5);

    // The SMF forwards toward a new gNB TEID. Before the release command reaches the
    // worker, a newer packet of the session comes: the held ones go first, then it.
    r.fars.get_mut(&2).unwrap().action = apply_action::FORW;
    r.fars.get_mut(&2).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x300, addr: IpAddr::V4(GNB) });
    rig.install(&r);
    let newer = numbered(5..7);
    let got = delivered(&rig.send(2, &newer));
    let want: Vec<(u32, Vec<u8>)> = held.iter().chain(&newer).map(|p| (0x300, p.clone())).collect();
    assert_eq!(got, want);
    assert_eq!(rig.counter("upf-buffer", "released"), 5);
    assert!(rig.cx.upf.held.is_empty());
    // The release command coming late finds nothing; the URR counted every packet once.
    assert!(rig.command(BufferCmd::Release { slot: 0, seid: 9 }).is_empty());
    assert_eq!(rig.usage(9, 1).dl_packets, 7);
    assert_eq!(rig.counter("upf4-downlink", "encapsulated"), 0, "both newer ones found packets held: they queued behind them");
    assert_eq!(delivered(&rig.send(2, &numbered(7..8))), vec![(0x300, numbered(7..8).remove(0))]);
    assert_eq!(rig.counter("upf4-downlink", "encapsulated"), 1, "nothing held: the fast way");

    // Buffer again: this time the release command sends them, with no newer packet.
    r.fars.get_mut(&2).unwrap().action = apply_action::BUFF | apply_action::NOCP;
    rig.install(&r);
    assert!(rig.send(2, &numbered(10..13)).is_empty());
    assert_eq!(rig.events.try_iter().count(), 1, "a new episode, a new report");
    r.fars.get_mut(&2).unwrap().action = apply_action::FORW;
    rig.install(&r);
    let got = delivered(&rig.command(BufferCmd::Release { slot: 0, seid: 9 }));
    assert_eq!(got, numbered(10..13).into_iter().map(|p| (0x300, p)).collect::<Vec<_>>());
}

/// Held packets meet the N3 path's MTU when they are released, as the downlink's own do:
/// one too big with DF is answered to its source, the rest go out.
#[test]
fn a_held_packet_too_big_for_n3_is_signalled_when_released() {
    let mut rig = Rig::new();
    let mut r = session(9);
    r.fars.get_mut(&2).unwrap().action = apply_action::BUFF;
    rig.install(&r);
    let big = with_df(udp4(DN, UE, 53, 4000, 1457 - 28));
    let small = udp4(DN, UE, 53, 4000, 100);
    assert!(rig.send(2, &[big, small.clone()]).is_empty());
    r.fars.get_mut(&2).unwrap().action = apply_action::FORW;
    rig.install(&r);
    let mut got: Vec<_> = rig.command(BufferCmd::Release { slot: 0, seid: 9 }).iter().map(|(n, p)| (*n, p.len())).collect();
    got.sort();
    assert_eq!(got, [("ip4-icmp-error", 1457), ("ip4-lookup", 44 + 128)]);
    assert_eq!(rig.counter("upf-buffer", "inner-too-big"), 1);
    assert_eq!(rig.usage(9, 1), Usage { dl_bytes: small.len() as u64, dl_packets: 1, ..Default::default() });
}

#[test]
fn buffering_without_nocp_holds_silently_and_bounds_are_counted() {
    let mut rig = Rig::new();
    let mut r = session(3);
    r.fars.get_mut(&2).unwrap().action = apply_action::BUFF;
    rig.install(&r);
    // Per session: 8 on this worker; the rest dropped by name.
    assert!(rig.send(2, &numbered(0..11)).is_empty());
    assert_eq!((rig.counter("upf-buffer", "held"), rig.counter("upf-buffer", "session-buffer-full")), (8, 3));
    assert_eq!(rig.events.try_iter().count(), 0, "no NOCP: no report");
    // In all: 16 on this worker.
    let mut other = session(4);
    other.pdrs.get_mut(&1).unwrap().local_f_teid = Some(GtpuEndpoint { teid: 0x101, addr: IpAddr::V4(N3) });
    let ue2 = Ipv4Addr::new(198, 19, 7, 2);
    other.pdrs.get_mut(&2).unwrap().ue_ipv4 = Some(ue2);
    other.fars.get_mut(&2).unwrap().action = apply_action::BUFF;
    rig.install(&other);
    let to_ue2: Vec<Vec<u8>> = (0..8).map(|n| udp4(DN, ue2, n, 4000, 10)).collect();
    assert!(rig.send(2, &to_ue2).is_empty());
    assert_eq!(rig.cx.upf.held.len(), 16);
    let mut third = session(5);
    third.pdrs.get_mut(&1).unwrap().local_f_teid = Some(GtpuEndpoint { teid: 0x102, addr: IpAddr::V4(N3) });
    let ue3 = Ipv4Addr::new(198, 19, 7, 3);
    third.pdrs.get_mut(&2).unwrap().ue_ipv4 = Some(ue3);
    third.fars.get_mut(&2).unwrap().action = apply_action::BUFF;
    rig.install(&third);
    assert!(rig.send(2, &[udp4(DN, ue3, 1, 4000, 10)]).is_empty());
    assert_eq!(rig.counter("upf-buffer", "buffer-full"), 1);
    // Too long to hold.
    r.fars.get_mut(&2).unwrap().action = apply_action::BUFF;
    assert!(rig.send(2, &[udp4(DN, UE, 1, 4000, 2100)]).is_empty());
    assert_eq!(rig.counter("upf-buffer", "too-long-to-hold"), 1);

    // Deleting a session frees its held packets on the discard command, counted; another
    // session's stay.
    rig.state.remove(3);
    rig.publish();
    assert!(rig.command(BufferCmd::Discard { slot: 0, seid: 3 }).is_empty());
    assert_eq!(rig.counter("upf-buffer", "discarded"), 8);
    assert_eq!(rig.cx.upf.held.len(), 8);
    // A discard for a SEID that is not the holder's leaves them.
    assert!(rig.command(BufferCmd::Discard { slot: 1, seid: 99 }).is_empty());
    assert_eq!(rig.cx.upf.held.len(), 8);
    // Its slot reused by a new session before the discard came: the old packets go as
    // the new session's first one is held.
    rig.state.remove(4);
    let mut fourth = session(6);
    fourth.pdrs.get_mut(&1).unwrap().local_f_teid = Some(GtpuEndpoint { teid: 0x103, addr: IpAddr::V4(N3) });
    fourth.pdrs.get_mut(&2).unwrap().ue_ipv4 = Some(ue2);
    fourth.fars.get_mut(&2).unwrap().action = apply_action::BUFF;
    rig.install(&fourth);
    assert!(rig.send(2, &[udp4(DN, ue2, 1, 4000, 10)]).is_empty());
    assert_eq!(rig.counter("upf-buffer", "discarded"), 16);
    assert_eq!(rig.cx.upf.held.len(), 1);
    // A malformed command is dropped by name.
    let bad = rig.buffer_input;
    assert!(rig.inject(bad, &[vec![0, 7, 0]]).is_empty());
    assert_eq!(rig.counter("upf-buffer", "bad-command"), 1);
}

#[test]
fn a_bar_count_bounds_what_is_held_and_a_new_count_applies_at_once() {
    let mut rig = Rig::new();
    let mut r = session(12);
    let far2 = r.fars.get_mut(&2).unwrap();
    far2.action = apply_action::BUFF | apply_action::NOCP;
    far2.bar_id = Some(1);
    r.bar = Some(Bar { id: 1, ddn_delay: Duration::ZERO, suggested_packets: Some(3), extended: None });
    rig.install(&r);
    assert!(rig.send(2, &numbered(0..5)).is_empty());
    assert_eq!((rig.counter("upf-buffer", "held"), rig.counter("upf-buffer", "bar-limit")), (3, 2));
    assert_eq!(rig.counter("upf-buffer", "session-buffer-full"), 0, "the BAR's bound, not the worker's");
    // Extended buffering with a count of 6: three more fit (the worker's 8 still above).
    r.bar.as_mut().unwrap().extended = Some(ExtendedBuffering { until: None, packets: Some(6) });
    rig.install(&r);
    assert!(rig.send(2, &numbered(5..10)).is_empty());
    assert_eq!((rig.counter("upf-buffer", "held"), rig.counter("upf-buffer", "bar-limit")), (6, 4));
    // A FAR that names no BAR buffers up to the worker's per-session bound only.
    r.fars.get_mut(&2).unwrap().bar_id = None;
    rig.install(&r);
    assert!(rig.send(2, &numbered(10..14)).is_empty());
    assert_eq!((rig.counter("upf-buffer", "held"), rig.counter("upf-buffer", "session-buffer-full")), (8, 2));
    // Forwarding: the held ones go out in order.
    r.fars.get_mut(&2).unwrap().action = apply_action::FORW;
    rig.install(&r);
    let got = delivered(&rig.command(BufferCmd::Release { slot: 0, seid: 12 }));
    let want: Vec<Vec<u8>> = numbered(0..3).into_iter().chain(numbered(5..8)).chain(numbered(10..12)).collect();
    assert_eq!(got, want.into_iter().map(|p| (0x200, p)).collect::<Vec<_>>());
}

/// The Error Indications among what the sinks saw: (source, destination, TEID Data I,
/// GTP-U Peer Address), each checked as an IPv4/UDP datagram to port 2152 with a valid
/// UDP checksum and the G-PDU's source port in the UDP Port extension.
fn error_indications(got: &[(&'static str, Vec<u8>)]) -> Vec<(Ipv4Addr, Ipv4Addr, u32, IpAddr)> {
    got.iter()
        .map(|(node, p)| {
            assert_eq!(*node, "ip4-lookup");
            assert_eq!(p[0], 0x45);
            assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, p.len());
            assert!(wire::checksum::verify(&p[..20]), "IPv4 header checksum");
            let (src, dst) = (Ipv4Addr::from([p[12], p[13], p[14], p[15]]), Ipv4Addr::from([p[16], p[17], p[18], p[19]]));
            assert_eq!((p[9], u16::from_be_bytes([p[22], p[23]])), (17, 2152));
            assert!(
                ip::outer::udp_checksum_ok(<ip::outer::Ip4Outer as ip::outer::OuterFamily>::pseudo(&src, &dst), &p[20..]),
                "UDP checksum"
            );
            let g = GtpuPacket::new_checked(&p[28..]).unwrap();
            let r = GtpuRepr::parse(&g).unwrap();
            assert_eq!((r.msg_type, r.teid.0, r.udp_port), (MessageType::ErrorIndication, 0, Some(2152)));
            let ies = &p[28 + r.header_len()..];
            let (teid, peer) = gtpu::messages::parse_error_indication(ies).expect("TEID Data I and GTP-U Peer Address");
            (src, dst, teid, peer)
        })
        .collect()
}

#[test]
fn unknown_teids_get_error_indications_at_the_reply_rate() {
    let mut rig = Rig::new();
    rig.install(&session(1));
    rig.cx.upf = std::mem::replace(&mut rig.cx.upf, dummy_upf()).with_replies(10);
    let inner = udp4(UE, DN, 4000, 53, 20);
    // A burst of 150 to unknown TEIDs: the bucket's burst (10) is answered, and whatever
    // the rate earned meanwhile; the rest dropped by name.
    let burst: Vec<Vec<u8>> = (0..150).map(|i| gpdu4(0x9000 + i, None, &inner)).collect();
    let got = rig.send(0, &burst);
    let sent = rig.counter("upf4-uplink", "error-indications-sent");
    assert!((10..150).contains(&sent), "{sent}");
    assert_eq!(sent + rig.counter("upf4-uplink", "no-session"), 150);
    let eis = error_indications(&got);
    assert_eq!(eis.len() as u64, sent);
    for (k, (src, dst, teid, peer)) in eis.into_iter().enumerate() {
        assert_eq!((src, dst, teid, peer), (N3, GNB, 0x9000 + k as u32, IpAddr::V4(N3)), "answered in order, first ones first");
    }
    // The session's own TEID still forwards.
    assert_eq!(rig.send(0, &[gpdu4(0x100, Some(9), &inner)]), vec![("ip4-input", inner)]);
}

/// A stand-in while a context is rebuilt.
fn dummy_upf() -> UpfContext {
    UpfContext::new(Arc::new(ArcSwap::from_pointee(UpfState::new(1, 1, 1).build())), UsageCells::new(1), Policer::new(1), None)
}

/// The encapsulation before the G-PDU header was precomputed: the header emitted from a
/// `GtpuRepr` per packet (the reference the precomputed path is checked against), the
/// outer traffic class the payload's.
fn encap_reference(src: IpAddr, dst: IpAddr, teid: u32, qfi: Option<u8>, payload: &[u8]) -> Vec<u8> {
    use ip::outer::{Ip4Outer, Ip6Outer, OuterFamily};
    let repr = upf::tables::gpdu_repr(teid, qfi, payload.len());
    let ghl = repr.header_len();
    let hl = if dst.is_ipv6() { 40 } else { 20 };
    let udp_len = 8 + ghl + payload.len();
    let mut out = vec![0u8; hl + udp_len];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Ip4Outer::emit_header(s, d, udp_len, &mut out);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ip6Outer::emit_header(s, d, udp_len, &mut out);
        }
        _ => unreachable!(),
    }
    // The outer header takes the payload's DSCP and ECN where the payload is IP.
    ip::outer::tos::set_traffic_class(&mut out, ip::outer::tos::traffic_class(payload));
    let u = &mut out[hl..];
    u[0..2].copy_from_slice(&2152u16.to_be_bytes());
    u[2..4].copy_from_slice(&2152u16.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    repr.emit(&mut u[8..8 + ghl]);
    u[8 + ghl..].copy_from_slice(payload);
    if let (IpAddr::V6(s), IpAddr::V6(d)) = (src, dst) {
        let c = ip::outer::udp_checksum(Ip6Outer::pseudo(&s, &d), &out[hl..]);
        out[hl + 6..hl + 8].copy_from_slice(&c.to_be_bytes());
    }
    out
}

proptest! {
    /// The precomputed G-PDU header (patched with each packet's length) gives the bytes the
    /// per-packet `GtpuRepr` emit gave, for any TEID, QFI, payload and peer family.
    #[test]
    fn precomputed_gtpu_header_matches_the_reference(
        teid in any::<u32>(), qfi in proptest::option::of(0u8..64), len in 0usize..1500, v6 in any::<bool>(), fill in any::<u8>(),
    ) {
        let mut state = UpfState::new(4, 4, 4);
        state.set_n3(Some(N3), Some(N3_6));
        let tables = state.build();
        let peer = if v6 { IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 9)) } else { IpAddr::V4(GNB) };
        let payload: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
        let mut pool = Pool::new(4, 4);
        let b = pool.alloc(len).unwrap();
        pool.get_mut(b).write(&payload).unwrap();
        let o = upf::tables::OuterHeader::new(teid, peer, qfi);
        prop_assert_eq!((o.teid(), o.qfi()), (teid, qfi), "read back from the header");
        let next = upf::nodes::encap(pool.get_mut(b), &tables, &o).unwrap();
        prop_assert_eq!(next, if v6 { upf::nodes::UpfNext::Ip6Lookup } else { upf::nodes::UpfNext::Ip4Lookup });
        let src = if v6 { IpAddr::V6(N3_6) } else { IpAddr::V4(N3) };
        prop_assert_eq!(pool.get(b).bytes(), &encap_reference(src, peer, teid, qfi, &payload)[..]);
    }
}

/// One of a few SDF filters (downlink-written; the uplink matches them reversed).
const SDF: [&str; 4] = [
    "permit out 17 from 198.18.8.0/24 53 to assigned 5000",
    "permit out ip from any to assigned",
    "permit out 6 from 198.18.8.9 to assigned",
    "permit out ip from 2001:db8:8::/48 to assigned",
];

fn ue4(i: u64) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 7, i as u8)
}

fn ue6(i: u64) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x19, i as u16, 0, 0, 0, 1)
}

/// A random session `seid` (1..=3): up to three uplink PDRs on TEIDs 0x100·seid + 0..2
/// (with or without a QFI, SDF filters, outer header removal, UE addresses), up to three downlink PDRs
/// to its UE addresses, FARs of every action (FORW with or without an outer header over
/// IPv4 or IPv6, DROP, BUFF with or without NOCP, NOCP alone), QERs with gates, MBRs that
/// police (0: a byte a second, so the burst runs out) or never, GBRs, URRs with quotas
/// used up or not; PDRs with none, one or two of each.
fn arb_session(seid: u64) -> impl Strategy<Value = SessionRules> {
    let ids = || prop::collection::vec(1u32..=2, 0..=2);
    let sdf = || prop::collection::vec(0usize..SDF.len(), 0..=2);
    let far_id = || prop::option::weighted(0.95, 1u32..=4);
    let up =
        ((0u32..4, 0u32..3, prop::option::of(prop::sample::select(vec![5u8, 9])), sdf()), any::<bool>(), far_id(), ids(), ids(), 0u8..4);
    let down = (0u32..4, 0u8..3, sdf(), far_id(), ids(), ids());
    let fars = (0u8..8, any::<bool>(), 1u32..0x1000);
    let mbr = || prop::sample::select(vec![None, Some(0u64), Some(10_000_000)]);
    let qer = (any::<bool>(), any::<bool>(), mbr(), mbr(), prop::option::of(0u64..20_000), prop::option::of(Just(9u8)));
    (
        prop::collection::vec(up, 0..=3),
        prop::collection::vec(down, 0..=3),
        prop::collection::vec(fars, 4),
        prop::collection::vec(qer, 2),
        prop::collection::vec(any::<bool>(), 2),
        prop::option::of(1u8..4),
    )
        .prop_map(move |(ups, downs, fars, qers, urrs, bar)| {
            let mut r = no_rules(seid);
            r.bar = bar.map(|n| Bar { id: 1, ddn_delay: Duration::ZERO, suggested_packets: Some(n), extended: None });
            let mut id = 1;
            for ((prec, teid, qfi, sdf), removal, far_id, q, u, ue) in ups {
                let mut p = pdr(id, prec * 50, 0);
                // 0: no UE address in the PDI, 1: the IPv4 one, 2: the IPv6 one, 3: both.
                p.ue_ipv4 = (ue & 1 != 0).then(|| ue4(seid));
                p.ue_ipv6 = (ue & 2 != 0).then(|| ue6(seid));
                p.local_f_teid = Some(GtpuEndpoint { teid: 0x100 * seid as u32 + teid, addr: IpAddr::V4(N3) });
                p.qfi = qfi;
                p.sdf_filters = sdf.iter().map(|i| SDF[*i].as_bytes().to_vec()).collect();
                p.outer_header_removal = removal;
                (p.far_id, p.qer_ids, p.urr_ids) = (far_id, q, u);
                r.pdrs.insert(id, p);
                id += 1;
            }
            for (prec, ue, sdf, far_id, q, u) in downs {
                let mut p = pdr(id, prec * 50, 0);
                p.source = Interface::Core;
                p.ue_is_destination = true;
                // 0: the IPv4 UE, 1: the IPv6 one, 2: both.
                p.ue_ipv4 = (ue != 1).then(|| ue4(seid));
                p.ue_ipv6 = (ue != 0).then(|| ue6(seid));
                p.sdf_filters = sdf.iter().map(|i| SDF[*i].as_bytes().to_vec()).collect();
                (p.far_id, p.qer_ids, p.urr_ids) = (far_id, q, u);
                r.pdrs.insert(id, p);
                id += 1;
            }
            for (i, (kind, v6, teid)) in fars.into_iter().enumerate() {
                let peer = if v6 { IpAddr::V6(GNB6) } else { IpAddr::V4(GNB) };
                let (action, to) = match kind {
                    0 | 1 => (apply_action::FORW, Some((peer, teid))),
                    2 => (apply_action::FORW, None),
                    3 => (apply_action::DROP, None),
                    4 => (apply_action::BUFF, None),
                    5 => (apply_action::BUFF | apply_action::NOCP, None),
                    6 => (apply_action::NOCP, None),
                    _ => (apply_action::FORW | apply_action::NOCP, Some((peer, teid))),
                };
                let mut f = far(i as u32 + 1, action, to);
                f.bar_id = Some(1);
                r.fars.insert(i as u32 + 1, f);
            }
            for (i, (ul_open, dl_open, mbr_ul, mbr_dl, gbr, qfi)) in qers.into_iter().enumerate() {
                let id = i as u32 + 1;
                let q = Qer { id, ul_open, dl_open, mbr_ul_kbps: mbr_ul, mbr_dl_kbps: mbr_dl, gbr_ul_kbps: gbr, gbr_dl_kbps: gbr, qfi };
                r.qers.insert(id, q);
            }
            for (i, exhausted) in urrs.into_iter().enumerate() {
                let id = i as u32 + 1;
                r.urrs.insert(id, Urr { id, quota_exhausted: exhausted, ..Default::default() });
            }
            r
        })
}

/// A packet into one of the rig's inputs: G-PDUs over IPv4 (with or without a QFI) or
/// IPv6 on the sessions' TEIDs and others, and packets to the sessions' UEs and others;
/// inner packets of either family, TCP or UDP from the filters' addresses and ports or
/// not, from the session's UE addresses or another's, and a few that are truncated or
/// not IP.
fn arb_packet() -> impl Strategy<Value = (usize, Vec<u8>)> {
    let inner = (0u8..8, any::<bool>(), prop::sample::select(vec![53u16, 54]), prop::sample::select(vec![5000u16, 4000]), 0usize..200);
    (0usize..4, 1u64..=4, 0u32..3, prop::option::of(prop::sample::select(vec![5u8, 9])), inner).prop_map(
        |(input, seid, teid, qfi, (kind, tcp, dn_port, ue_port, len))| {
            let dn6 = Ipv6Addr::new(0x2001, 0xdb8, 8, 0, 0, 0, 0, 9);
            let dn4 = if kind == 1 { Ipv4Addr::new(198, 18, 9, 9) } else { DN };
            let (ue_a, ue_b) = (ue4(seid), ue6(seid));
            let to_ue = input >= 2;
            // Kinds 2 and 5 from the UE send from another session's address.
            let (spoofed_a, spoofed_b) = (ue4(seid % 4 + 1), ue6(seid % 4 + 1));
            let mut p = match (kind, to_ue) {
                (2, false) => udp4(spoofed_a, dn4, ue_port, dn_port, len),
                (5, false) => udp6(spoofed_b, dn6, ue_port, dn_port, len),
                (0..=3, false) => udp4(ue_a, dn4, ue_port, dn_port, len),
                (0..=3, true) => udp4(dn4, ue_a, dn_port, ue_port, len),
                (4, false) => udp6(ue_b, dn6, ue_port, dn_port, len),
                (4 | 5, true) => udp6(dn6, ue_b, dn_port, ue_port, len),
                (6, _) => vec![0x45, 0, 0],
                _ => vec![0x50; 24],
            };
            if tcp && p.len() > 20 {
                let at = if p[0] >> 4 == 6 { 6 } else { 9 };
                p[at] = 6;
            }
            let teid = 0x100 * seid as u32 + teid;
            match input {
                0 => (0, gpdu4(teid, qfi, &p)),
                1 => (1, gpdu6(teid, &p)),
                i => (i, p),
            }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The session-resolved records against the full PDR match: random sessions (some
    /// modified after their first packets), random packets, two rigs that differ only in
    /// whether the records are published resolved. Every packet must come out the same
    /// (or be dropped under the same counter), every usage count and every Downlink Data
    /// Report must be the same.
    #[test]
    fn records_agree_with_the_full_match(
        sessions in prop::collection::vec((1u64..=3).prop_flat_map(arb_session), 1..=3),
        modified in prop::option::of((1u64..=3).prop_flat_map(arb_session)),
        first in prop::collection::vec(arb_packet(), 1..24),
        then in prop::collection::vec(arb_packet(), 0..24),
    ) {
        let mut rigs = [Rig::new(), Rig::new()];
        rigs[1].full_match_only = true;
        let mut runs: Vec<Vec<(&'static str, Vec<u8>)>> = vec![vec![], vec![]];
        for (rig, run) in rigs.iter_mut().zip(&mut runs) {
            for r in &sessions {
                run.push(("install", format!("{:?}", rig.state.install_rules(r)).into_bytes()));
            }
            rig.publish();
            for (input, p) in &first {
                run.extend(rig.send(*input, &[p.clone()]));
            }
            if let Some(r) = &modified {
                run.push(("modify", format!("{:?}", rig.state.install_rules(r)).into_bytes()));
                rig.publish();
            }
            for input in 0..4 {
                let these: Vec<Vec<u8>> = then.iter().filter(|(i, _)| *i == input).map(|(_, p)| p.clone()).collect();
                run.extend(rig.send(input, &these));
            }
        }
        prop_assert_eq!(&runs[0], &runs[1]);
        let counters = |rig: &Rig| -> Vec<(String, String, u64)> {
            let mut c: Vec<_> = rig.graph.counter_snapshots().iter().filter(|c| c.count > 0).map(|c| (c.node.to_string(), c.counter.to_string(), c.count)).collect();
            c.sort();
            c
        };
        prop_assert_eq!(counters(&rigs[0]), counters(&rigs[1]));
        for seid in 1..=3 {
            for urr in 1..=2 {
                let usage = |rig: &Rig| rig.state.urr_slots(seid).iter().find(|(id, _)| *id == urr).map(|(_, s)| rig.usage.read(s.slot, s.generation));
                prop_assert_eq!(usage(&rigs[0]), usage(&rigs[1]), "seid {} urr {}", seid, urr);
            }
        }
        let events = |rig: &Rig| rig.events.try_iter().collect::<Vec<_>>();
        prop_assert_eq!(events(&rigs[0]), events(&rigs[1]));
    }
}

/// The records the property test above compares are resolved where they should be: an
/// SMF's plain session resolves both directions (its uplink for its QFI), a session whose
/// first downlink PDR has an SDF filter, or two URRs, does not.
#[test]
fn plain_sessions_resolve_and_filtered_ones_do_not() {
    use upf::tables::{Action, Stop};
    let mut rig = Rig::new();
    rig.install(&session(1));
    let slot = rig.state.slot(1).unwrap();
    let t = rig.shared.load_full();
    let (up, down) = (t.records(slot).uplink, t.records(slot).downlink);
    assert_eq!((up.action, up.qfi, up.remove_outer, up.carried.outer()), (Some(Action::Forward), Some(9), true, None));
    assert_eq!(up.carried.ue().map(|m| m.addresses()), Some(vec![UE.to_string()]), "the uplink PDR names the UE's address");
    assert_eq!(down.action, Some(Action::Forward));
    assert_eq!(down.carried.outer().map(|o| (o.teid(), o.peer, o.qfi())), Some((0x200, IpAddr::V4(GNB), Some(9))));
    assert!(up.usage.is_some() && up.policer.is_none(), "one URR; a QER without an MBR does not police");
    assert_eq!(t.by_teid.get_entry(0x100), Some((slot, 1)), "the uplink record is TEID 0x100's");
    let mut r = session(1);
    r.qers.get_mut(&1).unwrap().dl_open = false;
    r.pdrs.get_mut(&1).unwrap().urr_ids = vec![1, 2];
    r.urrs.insert(2, Urr { id: 2, ..Default::default() });
    rig.install(&r);
    let t = rig.shared.load_full();
    assert_eq!(t.records(slot).downlink.action, Some(Action::Stop(Stop::GateClosed)));
    assert_eq!(t.records(slot).uplink.action, None, "two URRs: the full match");
    r.pdrs.get_mut(&2).unwrap().sdf_filters = vec![SDF[0].as_bytes().to_vec()];
    rig.install(&r);
    assert_eq!(rig.shared.load_full().records(slot).downlink.action, None, "an SDF filter: the full match");
    // An uplink PDR that names the UE and re-encapsulates toward a peer UPF: the line has
    // room for one of the two, so the full match.
    let mut r = session(1);
    r.fars.get_mut(&1).unwrap().outer_header = Some(GtpuEndpoint { teid: 0x300, addr: IpAddr::V4(GNB) });
    rig.install(&r);
    assert_eq!(rig.shared.load_full().records(slot).uplink.action, None, "UE address and outer header: the full match");
    r.pdrs.get_mut(&1).unwrap().ue_ipv4 = None;
    rig.install(&r);
    let up = rig.shared.load_full().records(slot).uplink;
    assert_eq!((up.action, up.carried.outer().map(|o| o.teid())), (Some(Action::Forward), Some(0x300)));
}
