//! One rule for every kind of route: none on an address of ours, and a prefix routed
//! from one place (a static route, or the tunnel, SA or service that owns it).

use super::*;
use crate::prefix::IfAddr;
use crate::tables::TunnelKind;

fn router() -> RouterState {
    let spec = |name: &str, mac: u8, addrs: &[&str]| InterfaceSpec {
        name: name.into(),
        mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
        mtu: 1500,
        addresses: addrs.iter().map(|a| a.parse::<IfAddr>().unwrap()).collect(),
    };
    RouterState::new(vec![spec("eth0", 1, &["198.18.0.1/24", "2001:db8::1/64"]), spec("eth1", 2, &["198.18.2.1/24", "2001:db8:2::1/64"])])
        .unwrap()
}

fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn via(a: &str) -> RouteTarget {
    RouteTarget::Via { next_hop: ip(a), interface: None }
}

const SA4: TunnelRef = TunnelRef { kind: TunnelKind::Esp4, id: 20 };
const SA6: TunnelRef = TunnelRef { kind: TunnelKind::Esp6, id: 21 };
const GTPU: TunnelRef = TunnelRef { kind: TunnelKind::Gtpu4, id: 3 };

#[test]
fn no_kind_of_route_may_be_an_address_of_ours() {
    let mut r = router();
    // eth1's addresses, and eth0's derived link-local one.
    for (host, ifname) in [("198.18.2.1/32", "eth1"), ("2001:db8:2::1/128", "eth1"), ("fe80::ff:fe00:1/128", "eth0")] {
        let want = StateError::OwnAddress { prefix: p(host), interface: ifname.into() };
        assert_eq!(r.create_route(p(host), RouteTarget::Blackhole), Err(want.clone()), "ip route add {host}");
        assert_eq!(r.add_route(p(host), RouteTarget::Blackhole), Err(want.clone()), "a reload's route {host}");
        assert_eq!(r.add_routes([(p(host), RouteTarget::Blackhole)]), Err((0, want.clone())), "a batch's {host}");
        assert_eq!(r.add_tunnel_routes(&[(p(host), GTPU)]), Err((0, want.clone())), "a ue {host}");
        assert_eq!(r.add_owned_routes(&[(p(host), SA4)]), Err((0, want)), "an SA's route {host}");
    }
    assert_eq!(r.route_count() + r.tunnel_route_count(), 0);
    let local = r.lookup(ip("198.18.2.1"));
    assert_eq!(local, ADJ_LOCAL);
    // Wider prefixes that contain them, and other hosts of the subnets, are routes.
    r.create_route(p("198.18.0.0/16"), via("198.18.0.2")).unwrap();
    r.create_route(p("2001:db8::/32"), via("2001:db8::2")).unwrap();
    r.add_tunnel_routes(&[(p("198.18.2.9/32"), GTPU)]).unwrap();
    r.add_owned_routes(&[(p("2001:db8:2::9/128"), SA6)]).unwrap();
    assert_eq!(r.lookup(ip("198.18.2.1")), ADJ_LOCAL, "the longest match keeps our address local");
    assert_eq!(r.lookup(ip("2001:db8:2::1")), ADJ_LOCAL);
}

#[test]
fn an_address_of_ours_may_not_be_routed_already() {
    let mut r = router();
    r.create_route(p("198.18.5.1/32"), via("198.18.0.2")).unwrap();
    r.add_tunnel_routes(&[(p("2001:db8:5::1/128"), TunnelRef { kind: TunnelKind::Lb6, id: 0 })]).unwrap();
    r.add_owned_routes(&[(p("198.18.6.1/32"), SA4)]).unwrap();
    let spec = |a: &str| InterfaceSpec {
        name: "eth2".into(),
        mac: EthernetAddress([2, 0, 0, 0, 0, 3]),
        mtu: 1500,
        addresses: vec![a.parse().unwrap()],
    };
    let cases = [
        ("198.18.5.1/24", "198.18.5.1", "the static route 198.18.5.1/32 via 198.18.0.2"),
        ("2001:db8:5::1/64", "2001:db8:5::1", "2001:db8:5::1/128 is a load-balanced service address (lb-vip)"),
        ("198.18.6.1/24", "198.18.6.1", "198.18.6.1/32 is one of SA 20's routes (ipsec_tunnel20)"),
    ];
    for (addr, a, by) in cases {
        assert_eq!(r.add_interface(spec(addr)), Err(StateError::AddressRouted { addr: ip(a), by: by.into() }), "{addr}");
    }
    assert_eq!(r.interfaces().len(), 2);
}

#[test]
fn ip_route_add_refuses_a_different_route_and_a_batch_replaces_it() {
    let mut r = router();
    for (pre, hop) in [("198.19.0.0/16", "198.18.2.2"), ("2001:db8:100::/48", "2001:db8:2::2")] {
        assert_eq!(r.create_route(p(pre), via(hop)), Ok(true));
        let want = StateError::RouteExists {
            prefix: p(pre),
            existing: format!("via {hop}"),
            remedy: format!("delete it first (ip route del {pre})"),
        };
        assert_eq!(r.create_route(p(pre), RouteTarget::Blackhole), Err(want));
        assert_eq!(r.route(&p(pre)), Some(&via(hop)), "unchanged");
        assert_eq!(r.create_route(p(pre), via(hop)), Ok(false), "the same route again changes nothing");
        // A batch line (a route feed's update) and a reload replace it.
        r.add_routes([(p(pre), RouteTarget::Blackhole)]).unwrap();
        assert_eq!(r.route(&p(pre)), Some(&RouteTarget::Blackhole));
        r.add_route(p(pre), via(hop)).unwrap();
        assert_eq!(r.route(&p(pre)), Some(&via(hop)));
    }
}

#[test]
fn a_tunnels_or_sas_route_and_a_static_route_never_take_each_others_prefix() {
    let mut r = router();
    r.create_route(p("198.19.0.0/16"), via("198.18.2.2")).unwrap();
    r.create_route(p("2001:db8:100::/48"), via("2001:db8:2::2")).unwrap();
    // An SA's routes over static routes: refused as a UE prefix is, and all or nothing.
    let e = r.add_owned_routes(&[(p("198.20.0.0/16"), SA4), (p("198.19.0.0/16"), SA4)]).unwrap_err();
    assert_eq!(
        e,
        (
            1,
            StateError::RouteExists {
                prefix: p("198.19.0.0/16"),
                existing: "via 198.18.2.2".into(),
                remedy: "delete it first (ip route del 198.19.0.0/16)".into()
            }
        )
    );
    assert_eq!(r.route(&p("198.20.0.0/16")), None, "nothing of a refused SA's routes stays");
    assert!(matches!(r.add_owned_routes(&[(p("2001:db8:100::/48"), SA6)]), Err((0, StateError::RouteExists { .. }))));
    assert!(matches!(r.add_tunnel_routes(&[(p("198.19.0.0/16"), GTPU)]), Err((0, StateError::RouteExists { .. }))));

    // The SA's own routes are not static routes: `ip route add`, a batch and a reload
    // leave them alone, and `ip route del` says how they go.
    r.add_owned_routes(&[(p("198.20.0.0/16"), SA4), (p("2001:db8:200::/48"), SA6)]).unwrap();
    for (pre, sa) in [("198.20.0.0/16", SA4), ("2001:db8:200::/48", SA6)] {
        let owner = format!("one of SA {}'s routes (ipsec_tunnel{})", sa.id, sa.id);
        let remedy = format!("it goes with the SA (ipsec sa del {})", sa.id);
        let exists = StateError::RouteExists { prefix: p(pre), existing: owner.clone(), remedy: remedy.clone() };
        assert_eq!(r.create_route(p(pre), RouteTarget::Blackhole), Err(exists.clone()));
        assert_eq!(r.create_route(p(pre), RouteTarget::Tunnel(sa)), Err(exists.clone()), "not even the same route");
        assert_eq!(r.add_route(p(pre), RouteTarget::Blackhole), Err(exists.clone()));
        assert_eq!(r.add_routes([(p(pre), RouteTarget::Blackhole)]), Err((0, exists)));
        assert_eq!(r.add_tunnel_routes(&[(p(pre), GTPU)]).unwrap_err().0, 0);
        let owned = StateError::OwnedRoute { prefix: p(pre), owner, remedy };
        assert_eq!(r.del_route(&p(pre)), Err(owned.clone()));
        assert_eq!(r.del_routes(&[p("198.19.0.0/16"), p(pre)]), Err((1, owned)));
        assert_eq!(r.route(&p(pre)), Some(&RouteTarget::Tunnel(sa)));
    }
    assert!(r.route(&p("198.19.0.0/16")).is_some(), "a refused batch deleted nothing");
    // A UE route is refused the same way.
    r.add_tunnel_routes(&[(p("198.21.0.0/16"), GTPU)]).unwrap();
    let gtpu = |f: fn(Prefix, String, String) -> StateError| {
        f(p("198.21.0.0/16"), "gtpu_tunnel3's ue".into(), "it goes with the tunnel (delete gtpu tunnel gtpu_tunnel3)".into())
    };
    assert_eq!(r.del_route(&p("198.21.0.0/16")), Err(gtpu(|prefix, owner, remedy| StateError::OwnedRoute { prefix, owner, remedy })));
    assert_eq!(
        r.create_route(p("198.21.0.0/16"), RouteTarget::Blackhole),
        Err(gtpu(|prefix, existing, remedy| StateError::RouteExists { prefix, existing, remedy }))
    );

    // They go with the SA; the prefixes are free again.
    assert_eq!(r.del_routes_into(SA4), 1);
    assert_eq!(r.del_routes_into(SA6), 1);
    r.create_route(p("198.20.0.0/16"), RouteTarget::Blackhole).unwrap();
    r.del_route(&p("198.20.0.0/16")).unwrap();
    assert_eq!(r.del_route(&p("2001:db8:200::/48")), Err(StateError::NoSuchRoute(p("2001:db8:200::/48"))));
    // A route into the SA made by `ip route add` is a static route: deleted as one.
    r.create_route(p("198.22.0.0/16"), RouteTarget::Tunnel(SA4)).unwrap();
    r.del_route(&p("198.22.0.0/16")).unwrap();
}

/// An SA rekeyed make-before-break: the new outbound SA's routes are its predecessor's,
/// added while the old SA still holds them, so they move to the new SA; a UDP tunnel's
/// may not take them, nor may an SA take a static route.
#[test]
fn a_rekeyed_sa_takes_its_predecessors_routes() {
    let mut r = router();
    let old = TunnelRef { kind: TunnelKind::Esp4, id: 1 };
    let new = TunnelRef { kind: TunnelKind::Esp4, id: 2 };
    r.add_owned_routes(&[(p("198.19.30.0/24"), old)]).unwrap();
    r.add_owned_routes(&[(p("198.19.30.0/24"), new)]).unwrap();
    assert_eq!(r.route(&p("198.19.30.0/24")), Some(&RouteTarget::Tunnel(new)));
    // The old SA going takes no route with it; the prefix stays the new SA's own.
    assert_eq!(r.del_routes_into(old), 0);
    assert!(r.del_route(&p("198.19.30.0/24")).is_err(), "an SA's own route goes with the SA only");
    let gue = TunnelRef { kind: TunnelKind::Gue4, id: 3 };
    assert!(r.add_owned_routes(&[(p("198.19.30.0/24"), gue)]).is_err());
    r.add_route(p("198.19.31.0/24"), via("198.18.2.2")).unwrap();
    assert!(r.add_owned_routes(&[(p("198.19.31.0/24"), new)]).is_err());
}

/// The tables a publish builds carry the small-packet shortcut's bound for the entries
/// and links they were built with (`Tables::tunnel_mtu_floor`): the entries set before
/// the build and the interfaces' own MTUs, worked out again at each build.
#[test]
fn built_tables_carry_the_tunnel_mtu_floor_of_their_entries_and_links() {
    let spec = |name: &str, mtu, a: &str| InterfaceSpec {
        name: name.into(),
        mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
        mtu,
        addresses: vec![a.parse::<IfAddr>().unwrap()],
    };
    let mut r = RouterState::new(vec![spec("n3", 1500, "198.18.7.2/24"), spec("n9", 1300, "2001:db8:9::2/64")]).unwrap();
    assert_eq!(r.build().tunnel_mtu_floor, [576, 1280]);
    let esp4 = crate::tables::TunnelEsp::new(ip("198.18.7.2"), ip("198.18.7.10"), 2152, 0b11, 57, 0);
    r.set_tunnel_esp(vec![esp4]);
    assert_eq!(r.build().tunnel_mtu_floor, [576, 1280], "an IPv4 SA on both links: 1300 less 57 is above 576");
    let esp6 = crate::tables::TunnelEsp::new(ip("2001:db8:9::2"), ip("2001:db8:9::10"), 2152, 0b10, 57, 0);
    r.set_tunnel_esp(vec![esp4, esp6]);
    assert_eq!(r.build().tunnel_mtu_floor, [576, 1300 - 57]);
    r.set_tunnel_esp(vec![]);
    assert_eq!(r.build().tunnel_mtu_floor, [576, 1280], "the entries gone, the bound back");
}
