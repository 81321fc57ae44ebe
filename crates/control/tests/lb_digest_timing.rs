//! How long `show_lb_digests` takes at 10 000 services (10 backends each), the cached
//! digests (`LbState::digests`) against computing every one afresh as the reply did
//! before: a measurement to print, not a test of speed (ignored; run it with
//! `cargo test --release -p vecgate-control --test integration -- --ignored --nocapture lb_digest_timing`).
//! What it asserts is only that both give the same reply.

use control::api::Request;
use control::config::Config;
use control::dataplane::{assemble, Control};
use control::lb::service_digest;
use lb::{BackendSpec, ServiceSpec};
use std::time::{Duration, Instant};

const CFG: &str = r#"
[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[lb]
snat4 = "198.18.1.1"
"#;

const SERVICES: u32 = 10_000;

fn spec(i: u32) -> ServiceSpec {
    let vip = [198, 19, (i >> 8) as u8, i as u8].into();
    let mut s = ServiceSpec::new(format!("default/svc{i}:http"), lb::ServiceType::ClusterIp, vip, 80, lb::Protocol::Tcp);
    s.backends = (1..=10).map(|b| BackendSpec::new([198, 18, 200, b].into(), 8080)).collect();
    s
}

/// The median of `n` runs of `f`.
fn median(n: usize, mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..n)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    t.sort();
    t[n / 2]
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture, in release"]
fn show_lb_digests_at_10000_services() {
    let cfg = Config::parse(CFG, "gw.toml", std::path::Path::new(".")).unwrap();
    let mut c: Control = assemble(&cfg).unwrap().into_single().0;
    for i in 0..SERVICES {
        c.lb.state.add_service(spec(i)).unwrap();
    }
    let afresh = |c: &Control| -> serde_json::Map<String, serde_json::Value> {
        c.lb.state.services().map(|(_, s)| (s.name.clone(), service_digest(s).into())).collect()
    };
    let before = median(21, || {
        std::hint::black_box(afresh(&c));
    });
    let start = Instant::now();
    let r = c.handle(&Request::ShowLbDigests {});
    let first = start.elapsed();
    assert_eq!(r.data, serde_json::Value::Object(afresh(&c)));
    let cached = median(21, || {
        std::hint::black_box(c.handle(&Request::ShowLbDigests {}));
    });
    let one_changed = median(21, || {
        let b = BackendSpec { weight: 2, ..BackendSpec::new([198, 18, 200, 1].into(), 8080) };
        c.lb.state.set_backend("default/svc77:http", b).unwrap();
        std::hint::black_box(c.handle(&Request::ShowLbDigests {}));
    });
    let r = c.handle(&Request::ShowLbDigests {});
    assert_eq!(r.data, serde_json::Value::Object(afresh(&c)));
    println!(
        "show_lb_digests at {SERVICES} services: every digest afresh (before) {before:?}; cached: first call {first:?}, \
         then {cached:?}, with one service changed before each {one_changed:?} (set_backend and its rebuild included)"
    );
}
