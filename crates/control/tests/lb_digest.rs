//! `show lb digests` through the control API: the digest the gateway gives for a service
//! is `control::lb::service_digest` of the spec a program applied, whatever order the
//! backends came in and whichever requests built it; every hand change to a backend
//! (weight, conditions, one added, one removed) gives another; `show lb services <name>`
//! gives that one service's row.

use control::api::Request;
use control::fuzz::graph::Harness;
use control::lb::{service_digest, BackendAdd, BackendChange, BackendRef};
use lb::{BackendSpec, Conditions, ServiceSpec};

fn digest_held(h: &mut Harness, name: &str) -> Option<String> {
    let r = h.control.handle(&Request::ShowLbDigests {});
    assert!(r.ok, "{r:?}");
    r.data.get(name).map(|d| d.as_str().unwrap().to_string())
}

#[test]
fn the_gateways_digest_is_that_of_the_spec_applied() {
    let mut h = Harness::new();
    let name = "default/dg:http@198.18.131.7";
    let b = |host: u8, port| BackendSpec::new([198, 19, 7, host].into(), port);
    let spec = ServiceSpec {
        name: name.into(),
        kind: lb::ServiceType::ClusterIp,
        vip: [198, 18, 131, 7].into(),
        port: 80,
        protocol: lb::Protocol::Tcp,
        // Not in address order: the gateway keeps them as they came.
        backends: vec![b(30, 8080), b(10, 8080), b(20, 8080)],
        traffic_policy: lb::TrafficPolicy::Cluster,
        affinity: lb::Affinity::None,
        table_size: 0,
        forwarding: lb::Forwarding::Nat,
        gue_port: 0,
        source_ranges: Vec::new(),
    };
    assert!(h.control.handle(&Request::LbServiceAdd(spec.clone())).ok);
    let mut sorted = spec.clone();
    sorted.backends.sort_by_key(|b| (b.addr, b.port));
    assert_eq!(digest_held(&mut h, name), Some(service_digest(&sorted)));
    let r = h.control.handle(&Request::ShowLbServices { service: Some(name.into()) });
    assert_eq!(r.data.as_array().map(|a| a.iter().map(|x| x["name"].clone()).collect::<Vec<_>>()), Some(vec![name.into()]), "{r:?}");
    assert_eq!(r.data[0]["gue_port"], 0);
    assert!(!h.control.handle(&Request::ShowLbServices { service: Some("no-such".into()) }).ok);

    // By hand: each change gives a digest not seen before; the applied spec, changed the
    // same way, gives the gateway's.
    let mut want = sorted.clone();
    let mut seen = vec![service_digest(&want)];
    let mut check = |h: &mut Harness, want: &ServiceSpec, what: &str| {
        let d = digest_held(h, name).unwrap();
        assert_eq!(d, service_digest(want), "{what}");
        assert!(!seen.contains(&d), "{what}: {d} seen before");
        seen.push(d);
    };
    let set = |service: &str, addr, weight, conditions| {
        Request::LbBackendSet(BackendChange { service: service.into(), addr, port: 8080, weight, conditions })
    };
    assert!(h.control.handle(&set(name, b(20, 0).addr, Some(4), None)).ok);
    want.backends[1].weight = 4;
    check(&mut h, &want, "weight");
    let draining = Conditions { ready: false, serving: true, terminating: true };
    assert!(h.control.handle(&set(name, b(10, 0).addr, None, Some(draining))).ok);
    want.backends[0].conditions = draining;
    check(&mut h, &want, "draining");
    assert!(h.control.handle(&Request::LbBackendDel(BackendRef { service: name.into(), addr: b(30, 0).addr, port: 8080 })).ok);
    want.backends.pop();
    check(&mut h, &want, "removed");
    // Another port of an address already there: a backend of its own.
    assert!(h.control.handle(&Request::LbBackendAdd(BackendAdd { service: name.into(), backend: b(20, 8081) })).ok);
    want.backends.push(b(20, 8081));
    check(&mut h, &want, "added on another port");
    assert!(h.control.handle(&Request::LbServiceDel { name: name.into() }).ok);
    assert_eq!(digest_held(&mut h, name), None);
}
