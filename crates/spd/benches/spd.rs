//! The SPD's cost against the number of policies, in TSC cycles, on one core:
//!
//! - the `ipsec4-output` node (per-packet cycles as `show runtime` counts them) with the
//!   matching policy at position P of N (the seed thread's experiment), with the flow
//!   cache (F flows, all hits after the first vector) and without (every packet through
//!   the classifier);
//! - the classifier alone (`TupleSpace::decide`) against the linear scan it replaces.
//!
//! `cargo bench -p vecgate-spd --bench spd -- [--policies 1,10,...] [--flows F] [--packets N] [--cache-size S]`
//! and `-- --churn-every V [--flows F]` for invalidation under load.

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use engine::BufIdx;
use spd::classifier::linear;
use spd::policy::{ActionKind, Direction, PolicySpec};
use spd::{FlowKey, TupleSpace};
use std::hint::black_box;

/// Policy `i` of `n` (position i + 1 in priority order); the one at `target` matches the
/// benchmark's flows, the others cannot (another local subnet), in four shapes: a remote
/// host, a host and port, a /30, a range that is not a prefix.
fn policy(i: usize, n: usize, target: usize) -> PolicySpec {
    let priority = (n - i) as u32;
    let (local, remote, ports) = if i == target {
        ("198.18.0.0/24".to_string(), "198.19.255.254/32".to_string(), "any")
    } else {
        let local = format!("198.18.{}.0/24", 1 + i / 65536);
        let r = 0xc613_0000u32 + (i % 65536) as u32;
        let a = |x: u32| std::net::Ipv4Addr::from(x).to_string();
        match i % 4 {
            0 => (local, format!("{}/32", a(r)), "any"),
            1 => (local, format!("{}/32", a(r)), "4500"),
            2 => (local, format!("{}/30", a(r & !3)), "any"),
            _ => (local, format!("{}-{}", a(r & !3), a((r & !3) + 2)), "any"),
        }
    };
    PolicySpec {
        spd: 1,
        direction: Direction::Outbound,
        priority,
        action: ActionKind::Protect,
        sa: Some(i as u32),
        local,
        remote,
        protocol: "udp".into(),
        local_ports: "any".into(),
        remote_ports: ports.into(),
    }
}

fn node_cycles(n: usize, flows: usize, packets: usize, cache: Option<usize>) -> (f64, f64) {
    let mut r = Rig::new(cache);
    for i in 0..n {
        r.spd.add_policy(&policy(i, n, n - 1)).unwrap();
    }
    r.spd.bind(OUT_IF, 1).unwrap();
    r.publish();
    let dst = "198.19.255.254".parse().unwrap();
    let adj = r.router.lookup(dst);
    let pkts: Vec<Vec<u8>> = (0..flows).map(|f| udp_packet(1 + (f % 250) as u8, 1000 + (f / 250) as u16, dst, 4500)).collect();
    let run = |r: &mut Rig, count: usize| {
        let mut sent = 0;
        let mut f = 0;
        while sent < count {
            let mut bufs: Vec<BufIdx> = Vec::with_capacity(engine::VECTOR_SIZE);
            for _ in 0..engine::VECTOR_SIZE {
                let b = r.pool.alloc(128).unwrap();
                let buf = r.pool.get_mut(b);
                buf.write(&pkts[f]).unwrap();
                buf.meta.adj = adj;
                bufs.push(b);
                f = (f + 1) % pkts.len();
            }
            r.graph.inject(r.out4, &mut r.pool, &bufs, 0);
            r.graph.run(&mut r.cx, &mut r.pool);
            r.seen4.lock().unwrap().clear();
            sent += bufs.len();
        }
    };
    // Warm: the caches (and the CPU's) hold the flows.
    run(&mut r, flows.max(engine::VECTOR_SIZE) * 2);
    r.reset();
    r.graph.sample_vectors(true);
    run(&mut r, packets);
    let s = r.graph.node_snapshots().into_iter().find(|s| s.name == "ipsec4-output").unwrap();
    assert_eq!(r.packets("esp4-encrypt"), s.runtime.packets, "every packet matched the target policy");
    (s.cycles_per_packet, s.vector_median.unwrap_or(f64::NAN))
}

fn classifier_cycles(n: usize, with_linear: bool) -> (f64, Option<f64>) {
    let mut state = spd::SpdState::new();
    for i in 0..n {
        state.add_policy(&policy(i, n, n - 1)).unwrap();
    }
    let rules: Vec<_> = state.policies().filter_map(|p| p.v4).collect();
    let ts = TupleSpace::new(&rules);
    let keys: Vec<FlowKey<u32>> = (0..1024u32)
        .map(|f| FlowKey { local: 0xc612_0001 + f % 250, remote: 0xc613_fffe, proto: 17, local_port: 1000 + f as u16, remote_port: 4500 })
        .collect();
    // The median batch of 1024 lookups: a shared host's steal moves it far less than the mean.
    let time = |f: &mut dyn FnMut(&FlowKey<u32>) -> usize, reps: usize| {
        let mut batches: Vec<u64> = (0..reps)
            .map(|_| {
                let t0 = engine::clock::now();
                for k in &keys {
                    black_box(f(black_box(k)));
                }
                engine::clock::now() - t0
            })
            .collect();
        batches.sort_unstable();
        batches[reps / 2] as f64 / keys.len() as f64
    };
    let ts_cycles = time(&mut |k| ts.lookup(k).map_or(0, |r| r.id.0 as usize), 200);
    assert_eq!(ts.lookup(&keys[0]).map(|r| r.id), linear(&rules, &keys[0]).map(|r| r.id));
    let lin = with_linear.then(|| time(&mut |k| linear(&rules, k).map_or(0, |r| r.id.0 as usize), (20_000 / n).max(3)));
    (ts_cycles, lin)
}

/// Invalidation under load: `flows` flows (destination ports 4000–4006) through
/// `ipsec4-output` round after round while a policy moving port 4003 to SA 100 is added
/// and deleted every `every` vectors. Every packet is checked against the policy set of
/// its vector: none lost, none decided by a stale policy. Returns (changes per second,
/// packets per second, node cycles per packet: mean, median vector), wall-clock rates of this one thread
/// doing the control plane's work too.
fn churn(flows: usize, rounds: usize, every: usize) -> (f64, f64, f64, f64) {
    let mut r = Rig::new(Some(spd::context::DEFAULT_FLOW_CACHE));
    let base = PolicySpec {
        spd: 1,
        direction: Direction::Outbound,
        priority: 10,
        action: ActionKind::Protect,
        sa: Some(1),
        local: "any".into(),
        remote: "198.19.0.0/16".into(),
        protocol: "any".into(),
        local_ports: "any".into(),
        remote_ports: "any".into(),
    };
    r.spd.add_policy(&base).unwrap();
    let moved = PolicySpec { priority: 20, sa: Some(100), protocol: "udp".into(), remote_ports: "4003".into(), ..base };
    r.spd.bind(OUT_IF, 1).unwrap();
    r.publish();
    let dst = "198.19.255.254".parse().unwrap();
    let adj = r.router.lookup(dst);
    // Flow f: source 198.18.0.(1 + f % 250), source port 1 + f / 250 ... kept apart by
    // (host, port); destination port 4000 + f % 7.
    let pkt = |f: usize| udp_packet(1 + (f % 250) as u8, 1 + (f / 250) as u16, dst, 4000 + (f % 7) as u16);
    let pkts: Vec<Vec<u8>> = (0..flows).map(pkt).collect();
    let mut moved_id: Option<u32> = None;
    let (mut changes, mut sent, mut vectors) = (0u64, 0u64, 0usize);
    r.reset();
    r.graph.sample_vectors(true);
    let t0 = std::time::Instant::now();
    for _ in 0..rounds {
        for chunk in (0..flows).collect::<Vec<_>>().chunks(engine::VECTOR_SIZE) {
            if vectors % every == every - 1 {
                match moved_id.take() {
                    Some(id) => {
                        r.spd.del_policy(id).unwrap();
                    }
                    None => moved_id = Some(r.spd.add_policy(&moved).unwrap().0),
                }
                r.publish();
                changes += 1;
            }
            vectors += 1;
            let bufs: Vec<BufIdx> = chunk
                .iter()
                .map(|&f| {
                    let b = r.pool.alloc(128).unwrap();
                    let buf = r.pool.get_mut(b);
                    buf.write(&pkts[f]).unwrap();
                    buf.meta.adj = adj;
                    b
                })
                .collect();
            r.graph.inject(r.out4, &mut r.pool, &bufs, 0);
            r.graph.run(&mut r.cx, &mut r.pool);
            let mut seen = r.seen4.lock().unwrap();
            assert_eq!(seen.len(), chunk.len(), "a packet lost");
            for (&(sa, _), &f) in seen.iter().zip(chunk) {
                let want = if moved_id.is_some() && f % 7 == 3 { 100 } else { 1 };
                assert_eq!(sa, want, "flow {f} decided by a stale policy set");
            }
            seen.clear();
            sent += chunk.len() as u64;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let s = r.graph.node_snapshots().into_iter().find(|s| s.name == "ipsec4-output").unwrap();
    (changes as f64 / secs, sent as f64 / secs, s.cycles_per_packet, s.vector_median.unwrap_or(f64::NAN))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let policies: Vec<usize> =
        arg("--policies").map_or(vec![1, 10, 100, 1000, 10_000, 100_000], |s| s.split(',').map(|x| x.parse().unwrap()).collect());
    let flows: usize = arg("--flows").map_or(1024, |s| s.parse().unwrap());
    let packets: usize = arg("--packets").map_or(2_000_000, |s| s.parse().unwrap());
    // Flow cache slots: the default (2^20) is larger than L2, so the node prefetches.
    let cache_size: usize = arg("--cache-size").map_or(spd::context::DEFAULT_FLOW_CACHE, |s| s.parse().unwrap());
    if let Some(n) = arg("--publish") {
        // The control plane's cost of one change: the touched SPD is rebuilt whole.
        let n: usize = n.parse().unwrap();
        let mut state = spd::SpdState::new();
        for i in 0..n {
            state.add_policy(&policy(i, n, n - 1)).unwrap();
        }
        state.publish();
        let t0 = std::time::Instant::now();
        let rounds = 5;
        for i in 0..rounds {
            let id = state.add_policy(&policy(i, n, n)).unwrap();
            state.publish();
            state.del_policy(id.0).unwrap();
            state.publish();
        }
        println!("publish: {n} policies in the SPD, {:.2} ms per change", t0.elapsed().as_secs_f64() * 1e3 / (2 * rounds) as f64);
        return;
    }
    if let Some(every) = arg("--churn-every") {
        let churn_flows: usize = arg("--flows").map_or(1 << 20, |s| s.parse().unwrap());
        let (cps, pps, mean, median) = churn(churn_flows, 3, every.parse().unwrap());
        println!(
            "churn: {churn_flows} flows, a policy added or deleted every {every} vectors: {cps:.0} changes/s, {:.2} Mpps through the harness, ipsec4-output {mean:.1} / {median:.1} cycles/packet (mean / median vector); every packet checked",
            pps / 1e6
        );
        return;
    }
    println!(
        "TSC {:.2} GHz; {flows} flows; {packets} packets per run; match at the last position; flow cache {cache_size} slots",
        engine::clock::hz() as f64 / 1e9
    );
    println!("cycles per packet: the node's mean / median vector; the classifier's and the linear scan's median of 1024 lookups");
    println!("{:>8}  {:>18}  {:>18}  {:>10}  {:>12}", "policies", "node, cache hits", "node, no cache", "classifier", "linear scan");
    for &n in &policies {
        let (hit, hit_med) = node_cycles(n, flows, packets, Some(cache_size));
        let (miss, miss_med) = node_cycles(n, flows, packets, None);
        let (cls, lin) = classifier_cycles(n, n <= 10_000);
        println!(
            "{n:>8}  {hit:>10.1} / {hit_med:>5.1}  {miss:>10.1} / {miss_med:>5.1}  {cls:>10.1}  {:>12}",
            lin.map_or("-".to_string(), |l| format!("{l:.1}"))
        );
    }
}
