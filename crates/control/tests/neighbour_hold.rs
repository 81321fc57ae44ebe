//! Packets to a next hop whose MAC is unknown wait for it (`ip-glean`): the first ones
//! are held while an ARP request or neighbour solicitation goes out, and leave, in
//! order and routed as any packet, once the neighbour answers and the control plane
//! has published it; past the neighbour's share a packet becomes the solicitation, as
//! before; what waits too long, or is left when a run ends, is dropped by name. A whole
//! worker (the graph fuzz target's dataplane) with its control plane, every frame
//! checked by the harness.

use common::{ACCESS0, CORE0};
use control::fuzz::graph::{Harness, CONFIG};
use engine::worker::WorkerCmd;
use io::mem::{RxFrame, TxFrame};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::common;

const GW_ACCESS: [u8; 6] = [2, 0, 0, 0, 0, 1];
const GW_CORE: [u8; 6] = [2, 0, 0, 0, 0, 2];
const HOST: [u8; 6] = [2, 0, 0, 0, 1, 2];
/// The next hop to learn, on core0's subnet (no configured neighbour).
const PEER: [u8; 6] = [2, 0, 0, 0, 2, 0x77];
const PEER4: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 77);
const PEER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x77);

fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> RxFrame {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    RxFrame { bytes: f, vnet: None }
}

/// A UDP datagram from the host on access0 to `dst`, its source port saying which.
fn udp4(dst: Ipv4Addr, sport: u16) -> RxFrame {
    let mut p = vec![0u8; 28 + 4];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&32u16.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[198, 18, 0, 2]);
    p[16..20].copy_from_slice(&dst.octets());
    let sum = wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&9u16.to_be_bytes());
    p[24..26].copy_from_slice(&12u16.to_be_bytes());
    eth(GW_ACCESS, HOST, 0x0800, &p)
}

fn udp6(dst: Ipv6Addr, sport: u16) -> RxFrame {
    let mut p = vec![0u8; 48 + 4];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&12u16.to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..24].copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    p[24..40].copy_from_slice(&dst.octets());
    p[40..42].copy_from_slice(&sport.to_be_bytes());
    p[42..44].copy_from_slice(&9u16.to_be_bytes());
    p[44..46].copy_from_slice(&12u16.to_be_bytes());
    let src: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let c = wire::checksum::pseudo_header_v6(&src, &dst, 17, 12).add_bytes(&p[40..52]).finish();
    p[46..48].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    eth(GW_ACCESS, HOST, 0x86dd, &p)
}

/// The peer's ARP reply to the gateway on core0.
fn arp_reply() -> RxFrame {
    let mut a = vec![0u8; 28];
    a[0..2].copy_from_slice(&1u16.to_be_bytes());
    a[2..4].copy_from_slice(&0x0800u16.to_be_bytes());
    a[4] = 6;
    a[5] = 4;
    a[6..8].copy_from_slice(&2u16.to_be_bytes());
    a[8..14].copy_from_slice(&PEER);
    a[14..18].copy_from_slice(&PEER4.octets());
    a[18..24].copy_from_slice(&GW_CORE);
    a[24..28].copy_from_slice(&[198, 18, 1, 1]);
    eth(GW_CORE, PEER, 0x0806, &a)
}

/// A counter of `ip-glean` and `ip-glean-release` together (both settle the hold).
fn count(h: &Harness, counter: &str) -> u64 {
    h.worker.graph.counter_snapshots().iter().filter(|c| c.node.starts_with("ip-glean") && c.counter == counter).map(|c| c.count).sum()
}

/// The frames out of core0: ARP requests (for whom), and UDP datagrams (their source
/// port, destination MAC and TTL / hop limit).
#[derive(Debug, PartialEq, Eq)]
enum Out {
    ArpRequest(Ipv4Addr),
    Solicitation,
    Udp { sport: u16, to: [u8; 6], hops: u8 },
}

fn core0(out: &[(usize, TxFrame)]) -> Vec<Out> {
    out.iter()
        .filter(|(i, _)| *i == CORE0)
        .map(|(_, t)| {
            let b = &t.bytes;
            let to: [u8; 6] = b[0..6].try_into().unwrap();
            match u16::from_be_bytes([b[12], b[13]]) {
                0x0806 => Out::ArpRequest(Ipv4Addr::new(b[38], b[39], b[40], b[41])),
                0x0800 => Out::Udp { sport: u16::from_be_bytes([b[34], b[35]]), to, hops: b[22] },
                0x86dd if b[20] == 58 => Out::Solicitation,
                0x86dd => Out::Udp { sport: u16::from_be_bytes([b[54], b[55]]), to, hops: b[21] },
                e => panic!("ethertype {e:#x} out of core0"),
            }
        })
        .collect()
}

/// What the control plane does when a worker reports the neighbour: publish it, and tell
/// the workers (the harness's worker has no command channel: the command given here).
fn learn(h: &mut Harness) -> Vec<(usize, TxFrame)> {
    assert!(h.control.process_events() >= 1, "the neighbour was reported and applied");
    h.command(WorkerCmd::Inject { input: ip::nodes::glean::GLEAN_INPUT.to_string(), frames: vec![vec![1]] })
}

#[test]
fn the_first_packets_wait_for_the_next_hop_and_leave_in_order() {
    let mut h = Harness::with_config(CONFIG);
    // Three datagrams: held, each with an ARP request for the peer (one a packet here:
    // the solicitation rate allows it).
    for sport in [1001, 1002, 1003] {
        let out = h.frame(ACCESS0, udp4(PEER4, sport));
        assert_eq!(core0(&out), [Out::ArpRequest(PEER4)], "datagram {sport}");
    }
    assert_eq!((count(&h, "held"), count(&h, "arp-request-sent")), (3, 3));
    assert_eq!(h.worker.pool.in_use(), 3, "the held datagrams' buffers");
    // The fourth is past the peer's share: it becomes the request itself.
    let out = h.frame(ACCESS0, udp4(PEER4, 1004));
    assert_eq!(core0(&out), [Out::ArpRequest(PEER4)]);
    assert_eq!((count(&h, "held"), count(&h, "hold-full"), count(&h, "arp-request-sent")), (3, 1, 4));
    // The peer answers; once the control plane has published it, the three leave in the
    // order they came, to the peer's MAC, their TTL decremented once.
    assert!(core0(&h.frame(CORE0, arp_reply())).is_empty());
    let out = learn(&mut h);
    let expect: Vec<Out> = [1001, 1002, 1003].into_iter().map(|sport| Out::Udp { sport, to: PEER, hops: 63 }).collect();
    assert_eq!(core0(&out), expect);
    assert_eq!(count(&h, "released"), 3);
    assert_eq!(h.worker.pool.in_use(), 0);
    // The next datagram goes straight through.
    assert_eq!(core0(&h.frame(ACCESS0, udp4(PEER4, 1005))), [Out::Udp { sport: 1005, to: PEER, hops: 63 }]);
    assert_eq!(count(&h, "held"), 3);
}

#[test]
fn an_ipv6_next_hop_is_solicited_and_its_packets_held() {
    let mut h = Harness::with_config(CONFIG);
    let out = h.frame(ACCESS0, udp6(PEER6, 2001));
    assert_eq!(core0(&out), [Out::Solicitation]);
    assert_eq!((count(&h, "held"), count(&h, "ns-sent")), (1, 1));
    // Not answered: the end of a run drops it by name, and the pool is whole again.
    h.worker.drain();
    assert_eq!(count(&h, "hold-flushed"), 1);
    assert_eq!(h.worker.pool.in_use(), 0);
    assert!(h.worker.cx.ip.hold.is_empty());
}

#[test]
fn what_waits_too_long_is_dropped_by_name() {
    let mut h = Harness::with_config(CONFIG);
    // A hold whose packets expire at once (the 3 s of a real one are no test's to wait).
    h.worker.cx.ip.hold = ip::hold::NeighbourHold::new(3, 0);
    h.frame(ACCESS0, udp4(PEER4, 3001));
    assert_eq!(count(&h, "held"), 1);
    // The next look at the hold (a learned neighbour, or another packet to glean) drops it.
    let out = h.command(WorkerCmd::Inject { input: ip::nodes::glean::GLEAN_INPUT.to_string(), frames: vec![vec![1]] });
    assert!(core0(&out).is_empty());
    assert_eq!(count(&h, "hold-expired"), 1);
    assert_eq!(h.worker.pool.in_use(), 0);
}

#[test]
fn with_holding_off_each_packet_becomes_the_solicitation() {
    let mut h = Harness::with_config(&CONFIG.replace("[dataplane]\n", "[dataplane]\nneighbour_hold = 0\n"));
    for sport in [4001, 4002] {
        assert_eq!(core0(&h.frame(ACCESS0, udp4(PEER4, sport))), [Out::ArpRequest(PEER4)]);
    }
    assert_eq!((count(&h, "held"), count(&h, "hold-full"), count(&h, "arp-request-sent")), (0, 0, 2));
    assert_eq!(h.worker.pool.in_use(), 0);
}

/// A link with an SPD bound, and an SA to a peer on it whose MAC is not known yet: the
/// SA's ESP (of a flow a PROTECT policy sends through it, and of a route into its
/// tunnel) is held like any packet, and once the peer answers it leaves as ESP. It had
/// passed the link's outbound policies (or never meets them, as the outer packet of a
/// tunnel): released to the lookup, it met them again and, with no policy for ESP, was
/// dropped as `no-policy`, so a tunnel's first packets were lost.
#[test]
fn held_esp_leaves_a_link_with_an_spd_once_the_peer_answers() {
    let cfg = concat!(
        access0_core0_config!(dual_stack),
        r#"
[[neighbour]]
interface = "access0"
ip = "198.18.0.2"
mac = "02:00:00:00:01:02"

[[route]]
prefix = "198.19.77.0/24"
via = "198.18.1.77"

[[ipsec_sa]]
index = 7
spi = 0x7001
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "0102030405060708090a0b0c0d0e0f1011121314"
local = "198.18.1.1"
remote = "198.18.1.77"
routes = ["198.19.78.0/24"]

[[ipsec_spd]]
id = 1
interfaces = ["core0"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
action = "protect"
sa = 7
remote = "198.19.77.0/24"
"#
    );
    let mut h = Harness::with_config(cfg);
    for (dst, sport) in [(Ipv4Addr::new(198, 19, 77, 1), 5001), (Ipv4Addr::new(198, 19, 78, 1), 5002)] {
        assert_eq!(core0(&h.frame(ACCESS0, udp4(dst, sport))), [Out::ArpRequest(PEER4)], "datagram {sport}");
    }
    assert_eq!(count(&h, "held"), 2);
    assert!(core0(&h.frame(CORE0, arp_reply())).is_empty());
    let out = learn(&mut h);
    assert_eq!(count(&h, "released"), 2);
    // Both leave as ESP to the peer, sequence numbers 1 and 2, in the order they came.
    let esp: Vec<(u32, [u8; 6])> = out
        .iter()
        .filter(|(i, t)| *i == CORE0 && t.bytes[12..14] == [8, 0] && t.bytes[23] == 50)
        .map(|(_, t)| (u32::from_be_bytes(t.bytes[38..42].try_into().unwrap()), t.bytes[0..6].try_into().unwrap()))
        .collect();
    let drops: Vec<_> = h.worker.graph.counter_snapshots().into_iter().filter(|c| c.count > 0 && c.node.starts_with("ipsec")).collect();
    assert_eq!(esp, [(1, PEER), (2, PEER)], "{drops:?}");
    assert_eq!(h.worker.pool.in_use(), 0);
}
