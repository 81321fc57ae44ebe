//! A load_balancer service's `source_ranges` through the whole graph (the fuzz graph's
//! gateway, services added through the control API): a client inside a range is
//! translated to a backend, one outside every range gets nothing and is counted as
//! `source-not-allowed` in `lb4-nat` / `lb6-nat`; after the ranges change (the service
//! deleted and added again, as a controller does, its id reused), a connection made
//! under the old ranges by a client now outside them passes no more, not even by its
//! session, and one now inside passes. A cluster_ip service on the same address and port
//! space takes every source.

use crate::common;

use common::{count_all as count, seed_frames as seed, tcp4, udp6};
use control::api::Request;
use control::fuzz::graph::Harness;
use lb::{BackendSpec, ServiceSpec};
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::ipv4::Ipv4Packet;
use wire::ipv6::Ipv6Packet;
use wire::tcp::TcpPacket;

#[allow(clippy::too_many_arguments)]
fn service(
    name: &str,
    kind: lb::ServiceType,
    vip: &str,
    port: u16,
    protocol: lb::Protocol,
    backend: &str,
    bport: u16,
    ranges: &[&str],
) -> ServiceSpec {
    let mut s = ServiceSpec::new(name, kind, vip.parse().unwrap(), port, protocol);
    s.backends = vec![BackendSpec::new(backend.parse().unwrap(), bport)];
    s.source_ranges = ranges.iter().map(|r| r.parse().unwrap()).collect();
    s
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

#[test]
fn sources_outside_the_ranges_are_dropped_and_their_sessions_end() {
    let mut h = Harness::new();
    let vip = Ipv4Addr::new(198, 18, 131, 20);
    let (inside, outside) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 100));
    let lb4 = |ranges: &[&str]| {
        service(
            "t/lbsr:http@198.18.131.20",
            lb::ServiceType::LoadBalancer,
            "198.18.131.20",
            80,
            lb::Protocol::Tcp,
            "198.19.1.10",
            8080,
            ranges,
        )
    };
    let r = h.control.handle(&Request::LbServiceAdd(lb4(&["198.18.0.0/28", "198.18.77.0/24"])));
    assert!(r.ok, "{r:?}");
    let show = h.control.handle(&Request::ShowLbServices { service: Some("t/lbsr:http@198.18.131.20".into()) });
    assert_eq!(show.data[0]["source_ranges"], serde_json::json!(["198.18.0.0/28", "198.18.77.0/24"]), "{show:?}");
    let syn = seed("lb4-tcp")[0].clone();
    let sent = |h: &mut Harness, src, sport, flags| h.frame(0, tcp4(&syn, src, sport, vip, 80, Some(flags)));

    // Inside a range: translated to the backend.
    let out = sent(&mut h, inside, 40001, SYN);
    assert_eq!(out.len(), 1);
    let ip = Ipv4Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
    assert_eq!((ip.dst_addr(), TcpPacket::new_checked(ip.payload()).unwrap().dst_port()), (Ipv4Addr::new(198, 19, 1, 10), 8080));
    assert!(sent(&mut h, inside, 40001, ACK).len() == 1, "its session's hit");
    // Outside every range: nothing, counted.
    assert!(sent(&mut h, outside, 40002, SYN).is_empty());
    assert_eq!(count(&h, "lb4-nat", "source-not-allowed"), 1);
    assert_eq!(count(&h, "lb4-nat", "new-session"), 1);

    // The ranges change: `inside` is outside them now, `outside` inside.
    assert!(h.control.handle(&Request::LbServiceDel { name: "t/lbsr:http@198.18.131.20".into() }).ok);
    assert!(h.control.handle(&Request::LbServiceAdd(lb4(&["198.18.0.64/26"]))).ok);
    let live = |h: &Harness| h.workers().map(|w| w.cx.lb.b4.sessions.live(w.cx.lb.now_ms)).sum::<usize>();
    assert_eq!(live(&h), 2, "the old connection's two entries");
    assert!(sent(&mut h, inside, 40001, ACK).is_empty(), "the connection made under the old ranges");
    assert_eq!(count(&h, "lb4-nat", "source-not-allowed"), 2);
    assert_eq!(live(&h), 0, "its session went with it");
    assert!(sent(&mut h, inside, 40001, ACK).is_empty(), "and stays out");
    assert_eq!(count(&h, "lb4-nat", "source-not-allowed"), 3);
    assert_eq!(sent(&mut h, outside, 40002, SYN).len(), 1, "inside the new ranges");
    assert_eq!(sent(&mut h, outside, 40002, ACK).len(), 1);
    assert_eq!(count(&h, "lb4-nat", "source-not-allowed"), 3);

    // The cluster IP service of the gateway takes any source.
    let cluster = Ipv4Addr::new(198, 18, 128, 10);
    assert_eq!(h.frame(0, tcp4(&syn, Ipv4Addr::new(198, 18, 0, 200), 40003, cluster, 80, Some(SYN))).len(), 1);
    assert_eq!(count(&h, "lb4-nat", "source-not-allowed"), 3);

    // IPv6: a range of its own family.
    let vip6: Ipv6Addr = "2001:db8:131::20".parse().unwrap();
    let spec6 = service(
        "t/lbsr6:dns@2001:db8:131::20",
        lb::ServiceType::LoadBalancer,
        "2001:db8:131::20",
        53,
        lb::Protocol::Udp,
        "2001:db8:98::10",
        5353,
        &["2001:db8::/124"],
    );
    assert!(h.control.handle(&Request::LbServiceAdd(spec6)).ok);
    let query = seed("lb6-udp")[0].clone();
    let out = h.frame(0, udp6(&query, "2001:db8::2".parse().unwrap(), 42001, vip6, 53));
    assert_eq!(out.len(), 1);
    let ip = Ipv6Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
    assert_eq!(ip.dst_addr(), "2001:db8:98::10".parse::<Ipv6Addr>().unwrap());
    assert!(h.frame(0, udp6(&query, "2001:db8::100".parse().unwrap(), 42002, vip6, 53)).is_empty());
    assert_eq!(count(&h, "lb6-nat", "source-not-allowed"), 1);
}

/// Ranges are refused where they mean nothing: on a cluster_ip or node_port service, or
/// of the other family than the service address; the reply names the field.
#[test]
fn misplaced_ranges_are_refused_by_the_api() {
    let mut h = Harness::new();
    let s = service(
        "t/c:http@198.18.131.30",
        lb::ServiceType::ClusterIp,
        "198.18.131.30",
        80,
        lb::Protocol::Tcp,
        "198.19.1.10",
        8080,
        &["198.18.0.0/24"],
    );
    let r = h.control.handle(&Request::LbServiceAdd(s));
    assert!(!r.ok && r.error.as_deref().unwrap_or("").contains("source_ranges: on a cluster_ip service: expected none"), "{r:?}");
    let s = service(
        "t/l:http@198.18.131.30",
        lb::ServiceType::LoadBalancer,
        "198.18.131.30",
        80,
        lb::Protocol::Tcp,
        "198.19.1.10",
        8080,
        &["2001:db8::/32"],
    );
    let r = h.control.handle(&Request::LbServiceAdd(s));
    assert!(
        !r.ok && r.error.as_deref().unwrap_or("").contains("source_ranges[0]: 2001:db8::/32: expected a prefix of the vip's family (IPv4)"),
        "{r:?}"
    );
    let r: Result<Request, _> = serde_json::from_str(
        r#"{"op":"lb_service_add","name":"x","type":"load_balancer","vip":"198.18.131.30","port":80,"protocol":"tcp","source_ranges":["198.18.0.1/24"]}"#,
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("\"198.18.0.1/24\": host bits are set after /24"), "{e}");
}
