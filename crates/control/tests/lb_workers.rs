//! The load balancer's NAT through two workers (the fuzz graph's gateway,
//! `Harness::with_workers(2)`): worker 0 owns the devices and spreads what it receives
//! over the handoff lanes. A connection's client packets and the backend's replies carry
//! different addresses and ports, and sessions are per worker, so each direction must be
//! steered to the worker holding the session (`lb::steer`): every reply here is
//! translated back, none leaves as the backend sent it. Regression: with the flow hash
//! alone about half of them went to the worker without the session.

use crate::common;

use common::{count_all as count, seed_frames as seed, tcp4, udp6};
use control::fuzz::graph::Harness;
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::ipv4::Ipv4Packet;
use wire::ipv6::Ipv6Packet;
use wire::tcp::TcpPacket;
use wire::udp::UdpPacket;

const CLIENTS: u16 = 64;

#[test]
fn replies_reach_the_worker_with_the_session() {
    let mut h = Harness::with_workers(2);
    let (client, vip, snat) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 128, 10), Ipv4Addr::new(198, 18, 1, 1));
    let (syn, syn_ack) = {
        let s = seed("lb4-tcp");
        (s[0].clone(), s[1].clone())
    };
    let mut snat_ports = std::collections::HashSet::new();
    for k in 0..CLIENTS {
        let cport = 41000 + k;
        // The SYN goes to a backend, its source the SNAT address and a port of the worker
        // that took it.
        let out = h.frame(0, tcp4(&syn, client, cport, vip, 80, None));
        assert_eq!(out.len(), 1, "client port {cport}");
        let ip = Ipv4Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
        let t = TcpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((ip.src_addr(), t.dst_port()), (snat, 8080));
        let (backend, sport) = (ip.dst_addr(), t.src_port());
        assert!(snat_ports.insert(sport), "SNAT port {sport} given twice");
        // The backend's SYN-ACK comes back to the client from the service.
        let out = h.frame(0, tcp4(&syn_ack, backend, 8080, snat, sport, None));
        assert_eq!(out.len(), 1, "client port {cport}: the reply");
        let ip = Ipv4Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
        let t = TcpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((ip.src_addr(), t.src_port(), ip.dst_addr(), t.dst_port()), (vip, 80, client, cport), "client port {cport}");
        assert!(t.verify_checksum_v4(vip, client));
    }
    assert_eq!(count(&h, "lb4-nat", "new-session"), CLIENTS as u64);
    assert_eq!(count(&h, "lb4-nat", "reply-translated"), CLIENTS as u64);
    // Both workers had sessions (the clients spread), and replies crossed the lanes.
    let sessions = |w: &control::dataplane::WorkerContext| w.lb.b4.sessions.live(w.lb.now_ms);
    assert!(h.workers().all(|w| sessions(&w.cx) >= 2 * 8), "{:?}", h.workers().map(|w| sessions(&w.cx)).collect::<Vec<_>>());

    // UDP over IPv6, SNAT to 2001:db8:1::1.
    let (client6, vip6, snat6): (Ipv6Addr, Ipv6Addr, Ipv6Addr) =
        ("2001:db8::2".parse().unwrap(), "2001:db8:128::10".parse().unwrap(), "2001:db8:1::1".parse().unwrap());
    let (query, answer) = {
        let s = seed("lb6-udp");
        (s[0].clone(), s[1].clone())
    };
    for k in 0..CLIENTS {
        let cport = 42000 + k;
        let out = h.frame(0, udp6(&query, client6, cport, vip6, 53));
        assert_eq!(out.len(), 1, "client port {cport}");
        let ip = Ipv6Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
        let u = UdpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((ip.src_addr(), u.dst_port()), (snat6, 5353));
        let (backend, sport) = (ip.dst_addr(), u.src_port());
        let out = h.frame(0, udp6(&answer, backend, 5353, snat6, sport));
        assert_eq!(out.len(), 1, "client port {cport}: the reply");
        let ip = Ipv6Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
        let u = UdpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((ip.src_addr(), u.src_port(), ip.dst_addr(), u.dst_port()), (vip6, 53, client6, cport), "client port {cport}");
        assert!(u.verify_checksum_v6(&vip6, &client6));
    }
    assert_eq!(count(&h, "lb6-nat", "reply-translated"), CLIENTS as u64);
    assert!(count(&h, "worker-handoff", "handed-off") >= CLIENTS as u64, "the lanes carried about half");
}
