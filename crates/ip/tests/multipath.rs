//! ECMP through the router's typed API: a multipath route's FIB value, the paths the
//! published tables choose by flow hash, the weights, and paths skipped while their next
//! hop is unresolved or their link down (and back after).

use ip::multipath;
use ip::state::{Path, RouteTarget, RouterState, StateError};
use ip::tables::{Adjacency, Tables, TunnelKind, TunnelRef, MAX_INDEX};
use ip::Prefix;
use std::net::IpAddr;

use crate::common;

fn router() -> RouterState {
    let mut r = common::two_links();
    for (i, a, m) in [
        ("eth0", "198.18.1.2", "02:aa:00:00:00:01"),
        ("eth1", "198.18.2.2", "02:aa:00:00:00:02"),
        ("eth0", "2001:db8:1::2", "02:aa:00:00:00:01"),
        ("eth1", "2001:db8:2::2", "02:aa:00:00:00:02"),
    ] {
        r.add_static_neighbour(i, a.parse().unwrap(), m.parse().unwrap()).unwrap();
    }
    r
}

fn via(a: &str, weight: u32) -> Path {
    Path { target: RouteTarget::Via { next_hop: a.parse().unwrap(), interface: None }, weight }
}

/// An IPv4 or IPv6 UDP header pair as `ip_flow_hash` reads it.
fn packet(src: IpAddr, dst: IpAddr, sport: u16) -> Vec<u8> {
    let mut p = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut p = vec![0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0];
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            p
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut p = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
            p
        }
        _ => unreachable!(),
    };
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&4789u16.to_be_bytes());
    p
}

/// Where each of `n` flows to `dst` leaves: the interface index of its adjacency.
fn spread(t: &Tables, r: &mut RouterState, dst: &str, n: u16) -> Vec<u16> {
    let dst: IpAddr = dst.parse().unwrap();
    let src: IpAddr = if dst.is_ipv4() { "198.18.0.9".parse().unwrap() } else { "2001:db8::9".parse().unwrap() };
    let v = r.lookup(dst);
    let group = multipath::decode(v).expect("a multipath value");
    (0..n)
        .map(|i| {
            let adj = t.multipath_choose(group, ip::flow::ip_flow_hash(&packet(src, dst, 1024 + i)));
            match t.adjacency(adj) {
                Adjacency::Rewrite { tx_if, .. } => tx_if.0,
                other => panic!("flow {i}: {other:?}"),
            }
        })
        .collect()
}

fn share(on: &[u16], i: u16) -> f64 {
    on.iter().filter(|&&x| x == i).count() as f64 / on.len() as f64
}

#[test]
fn flows_spread_by_weight_and_skip_a_path_whose_neighbour_went() {
    for (prefix, a, b, dst) in [
        ("198.19.0.0/16", "198.18.1.2", "198.18.2.2", "198.19.3.4"),
        ("2001:db8:100::/48", "2001:db8:1::2", "2001:db8:2::2", "2001:db8:100::7"),
    ] {
        let mut r = router();
        let p: Prefix = prefix.parse().unwrap();
        r.add_route(p, RouteTarget::Multipath(vec![via(a, 3), via(b, 1)])).unwrap();
        let t = r.build();
        let before = spread(&t, &mut r, dst, 8000);
        assert!((share(&before, 0) - 0.75).abs() < 0.03, "{prefix}: 3:1 gave {}", share(&before, 0));
        assert_eq!(before, spread(&t, &mut r, dst, 8000), "one flow, one path");
        let e = r.fib_match(&p, true).unwrap();
        assert_eq!(e.kind, "multipath");
        let shown: Vec<(Option<String>, Option<String>, u32, bool)> =
            e.paths.iter().map(|x| (x.next_hop.clone(), x.interface.clone(), x.weight, x.skipped)).collect();
        assert_eq!(shown, [(Some(a.to_string()), Some("eth0".into()), 3, false), (Some(b.to_string()), Some("eth1".into()), 1, false)]);

        // b's neighbour goes: its flows move to a, a's flows stay.
        assert!(r.del_static_neighbour(b.parse().unwrap()));
        let t = r.build();
        let without = spread(&t, &mut r, dst, 8000);
        assert!(without.iter().all(|&x| x == 0), "{prefix}: a flow still on the path without a neighbour");
        assert!(r.fib_match(&p, true).unwrap().paths[1].skipped);
        // Back: every flow where it was.
        r.add_static_neighbour("eth1", b.parse().unwrap(), "02:aa:00:00:00:02".parse().unwrap()).unwrap();
        let t = r.build();
        assert_eq!(spread(&t, &mut r, dst, 8000), before, "{prefix}: the flows went back to their paths");

        // a's link goes down: everything on b, b's flows stay; up again: as before.
        assert!(r.set_link_down(r.if_index("eth0").unwrap(), true));
        let t = r.build();
        let down = spread(&t, &mut r, dst, 8000);
        assert!(down.iter().all(|&x| x == 1));
        assert!(r.fib_match(&p, true).unwrap().paths[0].skipped);
        assert!(r.set_link_down(r.if_index("eth0").unwrap(), false));
        assert!(!r.set_link_down(r.if_index("eth0").unwrap(), false), "no change, nothing to publish");
        let t = r.build();
        assert_eq!(spread(&t, &mut r, dst, 8000), before);
    }
}

#[test]
fn a_single_path_route_keeps_its_plain_value() {
    let mut r = router();
    r.add_route("198.19.0.0/16".parse().unwrap(), RouteTarget::Via { next_hop: "198.18.1.2".parse().unwrap(), interface: None }).unwrap();
    r.add_route("198.20.0.0/16".parse().unwrap(), RouteTarget::Multipath(vec![via("198.18.1.2", 1), via("198.18.2.2", 1)])).unwrap();
    let single = r.lookup("198.19.0.1".parse().unwrap());
    assert!(single <= MAX_INDEX && multipath::decode(single).is_none());
    assert!(multipath::decode(r.lookup("198.20.0.1".parse().unwrap())).is_some());
    // Routes with the same paths share one group.
    r.add_route("198.21.0.0/16".parse().unwrap(), RouteTarget::Multipath(vec![via("198.18.1.2", 1), via("198.18.2.2", 1)])).unwrap();
    assert_eq!(r.lookup("198.21.0.1".parse().unwrap()), r.lookup("198.20.0.1".parse().unwrap()));
    assert_eq!(r.build().multipaths.len(), 1);
    // A tunnel endpoint behind a multipath route takes the lookup (its packets spread).
    assert_eq!(r.resolve_endpoint("198.20.0.1".parse().unwrap()), ip::tables::ADJ_MISS);
}

#[test]
fn bad_paths_are_refused_by_name() {
    let mut r = router();
    let p: Prefix = "198.19.0.0/16".parse().unwrap();
    let mp = |v| RouteTarget::Multipath(v);
    assert_eq!(r.add_route(p, mp(vec![])), Err(StateError::PathCount(0)));
    assert_eq!(r.add_route(p, mp(vec![via("198.18.1.2", 1), via("198.18.2.2", 0)])), Err(StateError::PathWeight { path: 1, weight: 0 }));
    assert_eq!(
        r.add_route(p, mp(vec![via("198.18.1.2", 1), via("198.18.2.2", 256)])),
        Err(StateError::PathWeight { path: 1, weight: 256 })
    );
    assert_eq!(r.add_route(p, mp(vec![via("198.18.1.2", 1), via("198.18.1.2", 2)])), Err(StateError::DuplicatePath(1)));
    assert_eq!(
        r.add_route(p, mp(vec![via("198.18.1.2", 1), Path { target: RouteTarget::Blackhole, weight: 1 }])),
        Err(StateError::PathTarget(1))
    );
    let e = r.add_route(p, mp(vec![via("198.18.1.2", 1), via("2001:db8:1::2", 1)])).unwrap_err();
    assert!(matches!(&e, StateError::Path { path: 1, error } if matches!(**error, StateError::FamilyMismatch { .. })), "{e:?}");
    assert_eq!(e.to_string(), "path 1: next hop 2001:db8:1::2 and prefix 198.19.0.0/16 are of different address families");
    let e = r.add_route(p, mp(vec![via("198.18.1.2", 1), via("198.18.9.2", 1)])).unwrap_err();
    assert_eq!(e.to_string(), "path 1: next hop 198.18.9.2 is not on a connected subnet of any interface");
    assert_eq!(r.route_count(), 0, "nothing refused was applied");
}

#[test]
fn a_deleted_tunnel_leaves_the_other_paths() {
    let mut r = router();
    let t0 = TunnelRef { kind: TunnelKind::Gue4, id: 0 };
    let t1 = TunnelRef { kind: TunnelKind::Gue4, id: 1 };
    let p: Prefix = "198.19.0.0/16".parse().unwrap();
    let q: Prefix = "198.20.0.0/16".parse().unwrap();
    let tun = |t, weight| Path { target: RouteTarget::Tunnel(t), weight };
    r.add_route(p, RouteTarget::Multipath(vec![tun(t0, 1), tun(t1, 1)])).unwrap();
    r.add_route(q, RouteTarget::Multipath(vec![tun(t0, 1)])).unwrap();
    // Paths into tunnels: every flow into one of the two.
    let t = r.build();
    let g = multipath::decode(r.lookup("198.19.0.1".parse().unwrap())).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..200u16 {
        let h = ip::flow::ip_flow_hash(&packet("198.18.0.9".parse().unwrap(), "198.19.0.1".parse().unwrap(), i));
        seen.insert(t.multipath_choose(g, h));
    }
    assert_eq!(seen, [t0.encode(), t1.encode()].into());
    assert_eq!(r.del_routes_into(t0), 1, "q had only the deleted tunnel");
    assert_eq!(r.route(&p), Some(&RouteTarget::Multipath(vec![tun(t1, 1)])));
    assert_eq!(r.route(&q), None);
    let t = r.build();
    let g = multipath::decode(r.lookup("198.19.0.1".parse().unwrap())).unwrap();
    assert!((0..200u32).all(|h| t.multipath_choose(g, h.wrapping_mul(0x9e37_79b9)) == t1.encode()));
}
