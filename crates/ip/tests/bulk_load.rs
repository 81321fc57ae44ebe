//! A bulk load (`add_routes` of a batch larger than the table: the route map built once
//! from the sorted set, the FIBs compiled once) ends as the same routes and the same
//! lookups as the same changes applied one at a time.

use ip::state::{RouteTarget, RouterState};
use ip::{IfAddr, InterfaceSpec, Prefix};
use std::net::{IpAddr, Ipv4Addr};

fn router() -> RouterState {
    RouterState::new(vec![InterfaceSpec {
        name: "eth0".into(),
        mac: "02:00:00:00:00:01".parse().unwrap(),
        mtu: 1500,
        addresses: vec!["198.18.1.1/24".parse::<IfAddr>().unwrap()],
    }])
    .unwrap()
}

fn via(i: u32) -> RouteTarget {
    RouteTarget::Via { next_hop: IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2 + (i % 5) as u8)), interface: None }
}

#[test]
fn a_bulk_load_equals_the_changes_one_by_one() {
    let mut x: u32 = 0x2545_f491;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    // Some routes first; then a batch of 3000 holding some of them again with other next
    // hops, and prefixes given twice inside the batch.
    let first: Vec<(Prefix, RouteTarget)> =
        (0..40).map(|i| (Prefix::covering(IpAddr::V4(Ipv4Addr::from(0xc613_0000 | (i << 8))), 24), via(i))).collect();
    let mut batch: Vec<(Prefix, RouteTarget)> = Vec::new();
    for i in 0..3000u32 {
        let len = [16u8, 20, 24, 24, 28, 32][(next() % 6) as usize];
        let p = Prefix::covering(IpAddr::V4(Ipv4Addr::from(0xc400_0000 | (next() & 0x03ff_ffff))), len);
        batch.push((p, via(next())));
        if i % 100 == 0 {
            batch.push((first[(i / 100) as usize].0, via(i + 1)));
        }
        if i % 250 == 0 {
            batch.push((batch[i as usize / 2].0, via(i + 3)));
        }
    }
    let mut bulk = router();
    let mut one_by_one = router();
    bulk.add_routes(first.clone()).unwrap();
    for (p, t) in &first {
        one_by_one.add_route(*p, t.clone()).unwrap();
    }
    bulk.add_routes(batch.clone()).unwrap();
    for (p, t) in &batch {
        one_by_one.add_route(*p, t.clone()).unwrap();
    }
    let a: Vec<(Prefix, RouteTarget)> = bulk.routes().map(|(p, t)| (*p, t.clone())).collect();
    let b: Vec<(Prefix, RouteTarget)> = one_by_one.routes().map(|(p, t)| (*p, t.clone())).collect();
    assert_eq!(a, b);
    // The same next hop for every probe (adjacency ids may be numbered differently).
    let hop = |r: &mut RouterState, dst: IpAddr| r.fib_match(&Prefix::host(dst), false).and_then(|e| e.next_hop);
    for _ in 0..5000 {
        let dst = IpAddr::V4(Ipv4Addr::from(0xc400_0000 | (next() & 0x03ff_ffff)));
        assert_eq!(hop(&mut bulk, dst), hop(&mut one_by_one, dst), "{dst}");
    }
    for (p, _) in &batch {
        let Prefix::V4(a, _) = p else { unreachable!() };
        let dst = IpAddr::V4(*a);
        assert_eq!(hop(&mut bulk, dst), hop(&mut one_by_one, dst), "{dst}");
        assert_eq!(bulk.lookup(dst) == 0, one_by_one.lookup(dst) == 0);
    }
}
