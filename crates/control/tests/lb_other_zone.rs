//! Topology-aware routing through the whole graph (the fuzz graph's gateway, a service
//! added through the control API): a backend marked `other_zone` (hinted for other zones
//! than the node's) takes no new connection while a ready one of this zone is there, and
//! keeps the connections it has, as conntrack keeps kube-proxy's established flows when the
//! hints move; deleting a backend instead re-chooses its connections (`backend-gone`).

use crate::common;

use common::{count_all as count, seed_frames as seed, tcp4};
use control::api::Request;
use control::fuzz::graph::Harness;
use control::lb::BackendAdd;
use lb::{BackendSpec, ServiceSpec};
use std::net::Ipv4Addr;
use wire::ipv4::Ipv4Packet;

const SVC: &str = "t/zone:http@198.18.131.40";
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn backend(host: u8, other_zone: bool) -> BackendSpec {
    BackendSpec { other_zone, ..BackendSpec::new(Ipv4Addr::new(198, 19, 1, host).into(), 8080) }
}

#[test]
fn a_backend_of_another_zone_keeps_its_connections_and_takes_no_new_one() {
    let mut h = Harness::new();
    let vip = Ipv4Addr::new(198, 18, 131, 40);
    let mut spec = ServiceSpec::new(SVC, lb::ServiceType::ClusterIp, vip.into(), 80, lb::Protocol::Tcp);
    spec.backends = vec![backend(10, false), backend(11, false)];
    assert!(h.control.handle(&Request::LbServiceAdd(spec)).ok);
    let syn = seed("lb4-tcp")[0].clone();
    let client = Ipv4Addr::new(198, 18, 0, 2);
    // The backend a packet of the client's connection from `sport` went to.
    let to = |h: &mut Harness, sport: u16, flags: u8| {
        let out = h.frame(0, tcp4(&syn, client, sport, vip, 80, Some(flags)));
        assert_eq!(out.len(), 1, "port {sport}");
        Ipv4Packet::new_checked(&out[0].1.bytes[14..]).unwrap().dst_addr().octets()[3]
    };
    // Connections on both backends (Maglev spreads 64 of them).
    let first: Vec<(u16, u8)> = (41000..41064).map(|p| (p, to(&mut h, p, SYN))).collect();
    let on = |b: u8| first.iter().filter(|(_, x)| *x == b).map(|(p, _)| *p).collect::<Vec<_>>();
    let (on10, on11) = (on(10), on(11));
    assert!(!on10.is_empty() && !on11.is_empty(), "{first:?}");

    // 198.19.1.10 hinted for another zone now (the controller sets the backend again).
    let r = h.control.handle(&Request::LbBackendAdd(BackendAdd { service: SVC.into(), backend: backend(10, true) }));
    assert!(r.ok, "{r:?}");
    let rows = h.control.handle(&Request::ShowLbBackends { service: Some(SVC.into()) });
    assert_eq!(rows.data[0]["other_zone"], serde_json::json!(true), "{rows:?}");
    assert_eq!(rows.data[0]["eligible"], serde_json::json!(false), "{rows:?}");
    assert!(rows.data[1].get("other_zone").is_none(), "{rows:?}");
    // Its connections stay on it; every new one goes to this zone's.
    for &p in &on10 {
        assert_eq!(to(&mut h, p, ACK), 10, "the connection from port {p} keeps its backend");
    }
    for &p in &on11 {
        assert_eq!(to(&mut h, p, ACK), 11);
    }
    for p in 42000..42064 {
        assert_eq!(to(&mut h, p, SYN), 11, "a new connection from port {p}");
    }
    assert_eq!(count(&h, "lb4-nat", "backend-gone"), 0);

    // Deleting the backend instead re-chooses its connections.
    assert!(
        h.control
            .handle(&Request::LbBackendDel(control::lb::BackendRef {
                service: SVC.into(),
                addr: Ipv4Addr::new(198, 19, 1, 10).into(),
                port: 8080
            }))
            .ok
    );
    assert_eq!(to(&mut h, on10[0], ACK), 11);
    assert_eq!(count(&h, "lb4-nat", "backend-gone"), 1);
}
