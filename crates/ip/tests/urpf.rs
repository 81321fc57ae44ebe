//! The reverse-path check (`ip::urpf::check`) against tables the router publishes: each
//! kind of route back to a source, in both modes, for packets from a link and out of a
//! tunnel, and the interface bits the tables carry for `ethernet-input`.

use ip::state::{Path, RouteTarget, RouterState};
use ip::tables::{Tables, TunnelKind, TunnelRef};
use ip::urpf::{check, check_source, Arrival, SourceFault, Urpf};
use ip::Prefix;

use crate::common;

fn router() -> RouterState {
    let mut r = common::two_links();
    r.add_static_neighbour("eth1", "198.18.2.2".parse().unwrap(), "02:aa:00:00:00:02".parse().unwrap()).unwrap();
    let via = |a: &str| RouteTarget::Via { next_hop: a.parse().unwrap(), interface: None };
    let path = |a: &str| Path { target: via(a), weight: 1 };
    let routes = [
        ("198.19.1.0/24", via("198.18.1.2")), // by eth0, next hop unresolved
        ("198.19.2.0/24", via("198.18.2.2")), // by eth1, resolved
        ("198.19.3.0/24", RouteTarget::Multipath(vec![path("198.18.1.2"), path("198.18.2.2")])),
        ("198.19.4.0/24", RouteTarget::Multipath(vec![path("198.18.2.2"), path("198.18.2.3")])),
        ("198.19.5.0/24", RouteTarget::Blackhole),
        ("198.19.6.0/24", RouteTarget::Tunnel(TunnelRef { kind: TunnelKind::Gue4, id: 0 })),
        ("2001:db8:9::/48", via("2001:db8:2::2")),
    ];
    for (p, t) in routes {
        r.add_route(p.parse::<Prefix>().unwrap(), t).unwrap();
    }
    r
}

fn verdict(t: &Tables, src: &str, rx: u16, mode: Urpf) -> Result<(), SourceFault> {
    let route = match src.parse().unwrap() {
        std::net::IpAddr::V4(a) => t.fib4.lookup(u32::from(a)),
        std::net::IpAddr::V6(a) => t.fib6.lookup(u128::from(a)),
    };
    check(t, route, Arrival::Link(engine::IfIndex(rx)), mode)
}

#[test]
fn each_kind_of_route_back_in_each_mode() {
    let t = router().build();
    use SourceFault::*;
    // (source, received on eth0: strict, loose; received on eth1: strict)
    let cases: &[(&str, Result<(), SourceFault>, Result<(), SourceFault>, Result<(), SourceFault>)] = &[
        ("198.18.1.7", Ok(()), Ok(()), Err(WrongInterface)), // eth0's subnet
        ("198.19.1.7", Ok(()), Ok(()), Err(WrongInterface)), // by eth0, unresolved still counts
        ("198.19.2.7", Err(WrongInterface), Ok(()), Ok(())), // by eth1
        ("198.19.3.7", Ok(()), Ok(()), Ok(())),              // ECMP over both
        ("198.19.4.7", Err(WrongInterface), Ok(()), Ok(())), // ECMP, eth1 only
        ("198.19.5.7", Err(NoRoute), Err(NoRoute), Err(NoRoute)),
        ("198.19.6.7", Err(WrongInterface), Ok(()), Err(WrongInterface)), // into a tunnel
        ("198.20.0.1", Err(NoRoute), Err(NoRoute), Err(NoRoute)),
        ("198.18.2.1", Err(OwnAddress), Err(OwnAddress), Err(OwnAddress)),
        ("2001:db8:9::1", Err(WrongInterface), Ok(()), Ok(())),
        ("2001:db8:1::1", Err(OwnAddress), Err(OwnAddress), Err(OwnAddress)),
    ];
    for &(src, strict0, loose0, strict1) in cases {
        assert_eq!(verdict(&t, src, 0, Urpf::Strict), strict0, "{src} on eth0, strict");
        assert_eq!(verdict(&t, src, 0, Urpf::Loose), loose0, "{src} on eth0, loose");
        assert_eq!(verdict(&t, src, 1, Urpf::Strict), strict1, "{src} on eth1, strict");
        assert_eq!(verdict(&t, src, 0, Urpf::Off), Ok(()), "{src}: off checks nothing");
    }
}

/// Packets out of a tunnel: strict passes a source whose route back goes into that same
/// tunnel and nothing else (not another tunnel, not a link, not an ECMP group of links);
/// loose any route but a blackhole; the gateway's own addresses never.
#[test]
fn packets_out_of_a_tunnel_in_each_mode() {
    let t = router().build();
    use SourceFault::*;
    let gue0 = Arrival::Tunnel(TunnelRef { kind: TunnelKind::Gue4, id: 0 });
    let gue1 = Arrival::Tunnel(TunnelRef { kind: TunnelKind::Gue4, id: 1 });
    let gtpu0 = Arrival::Tunnel(TunnelRef { kind: TunnelKind::Gtpu4, id: 0 });
    let v4 = |a: &str| {
        let mut p = vec![0x45u8; 20];
        p[12..16].copy_from_slice(&a.parse::<std::net::Ipv4Addr>().unwrap().octets());
        p
    };
    let v6 = |a: &str| {
        let mut p = vec![0x60u8; 40];
        p[8..24].copy_from_slice(&a.parse::<std::net::Ipv6Addr>().unwrap().octets());
        p
    };
    // (source, from udp_tunnel0: strict, loose; from udp_tunnel1 strict; gtpu_tunnel0 strict)
    let cases: &[(&str, Result<(), SourceFault>, Result<(), SourceFault>, Result<(), SourceFault>, Result<(), SourceFault>)] = &[
        ("198.19.6.7", Ok(()), Ok(()), Err(WrongInterface), Err(WrongInterface)), // into udp_tunnel0
        ("198.19.2.7", Err(WrongInterface), Ok(()), Err(WrongInterface), Err(WrongInterface)), // by eth1
        ("198.19.3.7", Err(WrongInterface), Ok(()), Err(WrongInterface), Err(WrongInterface)), // ECMP of links
        ("198.19.5.7", Err(NoRoute), Err(NoRoute), Err(NoRoute), Err(NoRoute)),
        ("198.20.0.1", Err(NoRoute), Err(NoRoute), Err(NoRoute), Err(NoRoute)),
        ("198.18.2.1", Err(OwnAddress), Err(OwnAddress), Err(OwnAddress), Err(OwnAddress)),
    ];
    for &(src, strict0, loose0, strict1, gtpu) in cases {
        let p = v4(src);
        assert_eq!(check_source(&t, &p, false, gue0, Urpf::Strict), strict0, "{src} from udp_tunnel0, strict");
        assert_eq!(check_source(&t, &p, false, gue0, Urpf::Loose), loose0, "{src} from udp_tunnel0, loose");
        assert_eq!(check_source(&t, &p, false, gue1, Urpf::Strict), strict1, "{src} from udp_tunnel1, strict");
        assert_eq!(check_source(&t, &p, false, gtpu0, Urpf::Strict), gtpu, "{src} from gtpu_tunnel0, strict");
        assert_eq!(check_source(&t, &p, false, gue1, Urpf::Off), Ok(()), "{src}: off checks nothing");
    }
    assert_eq!(check_source(&t, &v6("2001:db8:9::1"), true, gue0, Urpf::Loose), Ok(()));
    assert_eq!(check_source(&t, &v6("2001:db8:9::1"), true, gue0, Urpf::Strict), Err(WrongInterface));
    assert_eq!(check_source(&t, &v6("2001:db8:77::1"), true, gue0, Urpf::Loose), Err(NoRoute));
    // Link-local and unspecified sources need no route back; a header too short to
    // hold a source is the input node's to drop.
    assert_eq!(check_source(&t, &v6("fe80::1"), true, gue0, Urpf::Strict), Ok(()));
    assert_eq!(check_source(&t, &v6("::"), true, gue0, Urpf::Strict), Ok(()));
    assert_eq!(check_source(&t, &v4("198.20.0.1")[..14], false, gue0, Urpf::Strict), Ok(()));
}

#[test]
fn the_tables_mark_the_interfaces_that_check_and_a_removed_one_stops() {
    let modes = |t: &Tables| t.interfaces.iter().map(|l| l.urpf).collect::<Vec<_>>();
    let mut r = router();
    assert_eq!(modes(&r.build()), [Urpf::Off, Urpf::Off]);
    assert!(r.set_urpf(engine::IfIndex(1), Urpf::Loose));
    let t = r.build();
    assert_eq!(modes(&t), [Urpf::Off, Urpf::Loose]);
    assert!(t.interface(engine::IfIndex(70)).is_none());
    assert!(!r.set_urpf(engine::IfIndex(5), Urpf::Strict), "no such interface");
    r.remove_interface("eth1").unwrap();
    assert_eq!(modes(&r.build()), [Urpf::Off, Urpf::Off]);
    assert!(!r.set_urpf(engine::IfIndex(1), Urpf::Strict), "removed");
}
