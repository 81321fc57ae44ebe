//! `vecgate bench fib-update`: route adds and deletes into a table of N BGP-like routes,
//! published (a new `Tables` through the `ArcSwap`, the changes of the last millisecond
//! together) to a worker that forwards packets meanwhile on another core. Reports how many changes a second the
//! control plane applies and publishes, how long the worker takes to see each one, and
//! what the worker's forwarding costs with and without 100 000 changes a second.

use crate::bench::{random_prefixes, rss_bytes, Rng, BASE};
use anyhow::{anyhow, bail, Result};
use control::config::Config;
use control::dataplane::assemble;
use engine::clock;
use io::pg::{Field, L4Spec, ModifierSpec, PacketGenerator, PacketSpec, Pattern, StreamSpec};
use ip::{Prefix, RouteTarget};
use serde::Serialize;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Serialize)]
struct Forwarding {
    packets: u64,
    delivered: u64,
    /// Packets nodes dropped (every counter above info severity, since start).
    dropped: u64,
    cycles_per_packet: f64,
}

#[derive(Serialize)]
struct Report {
    scenario: &'static str,
    family: String,
    routes: usize,
    cpu: String,
    /// Loading the N routes in one batch (compiled once) and publishing.
    load_seconds: f64,
    rss_bytes_after_load: u64,
    fib_bytes: usize,
    /// The same after every change (what churn leaves in the arena).
    fib_bytes_after_updates: usize,
    /// Adds and deletes applied and each published, as fast as the control plane goes.
    updates: u64,
    updates_per_sec: f64,
    /// The same per second of the control thread's own CPU time (on a loaded host the
    /// wall-clock rate also counts the time the thread waited for a core).
    updates_per_cpu_sec: f64,
    /// Changes applied since the last publish are published together, at most every
    /// this many µs.
    publish_every_us: u64,
    publishes: u64,
    /// From a change being applied to the forwarding worker's first vector with it, µs.
    publish_latency_us_median: f64,
    publish_latency_us_p99: f64,
    publish_latency_us_max: f64,
    /// From a change being applied to the store of the version holding it (the control
    /// plane's part of the latency above), µs.
    store_latency_us_median: f64,
    store_latency_us_max: f64,
    /// Forwarding alone, then while changes are applied at `paced_rate` a second.
    forwarding_idle: Forwarding,
    paced_rate: u64,
    paced_updates: u64,
    forwarding_during_updates: Forwarding,
}

// CPU time from the thread's CPU clock: schedstat's count, read before, moves only at
// scheduler events, so a short run read 0 (and a rate of 10^12 per CPU second).
use io::linux::thread_cpu_ns;

/// What the worker thread saw: (generation, TSC) at its first vector of each new version.
type Seen = Vec<(u64, u64)>;

/// Changes are published together at most this often (each is visible to the workers
/// within this plus one vector; the latency reported counts from the change).
const PUBLISH_EVERY_US: u64 = 1000;

pub fn bench(routes: usize, family: &str, updates: u64, json: bool) -> Result<()> {
    let v6 = match family {
        "ip4" => false,
        "ip6" => true,
        f => bail!("--family {f:?}: expected ip4 or ip6"),
    };
    if !(1..=4_000_000).contains(&routes) {
        bail!("--routes {routes}: expected 1 to 4000000");
    }
    let cfg = Config::parse(BASE, "(bench scenario)", Path::new("."))?;
    let (mut control, mut worker) = assemble(&cfg)?.into_single();
    let mut rng = Rng(0x5eed_f1b0_0000_0023);
    let hops: Vec<IpAddr> =
        (2..=5).map(|i| if v6 { format!("2001:db8:1::{i}").parse().unwrap() } else { format!("198.18.1.{i}").parse().unwrap() }).collect();
    // The table, and as many more prefixes to add (each added, later deleted).
    let all = random_prefixes(&mut rng, routes + (updates as usize).min(2_000_000), v6);
    let mut order: Vec<usize> = (0..all.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    let (table, spare): (Vec<Prefix>, Vec<Prefix>) = {
        let t = order[..routes].iter().map(|&i| all[i]).collect();
        let s = order[routes..].iter().map(|&i| all[i]).collect();
        (t, s)
    };
    drop(all);
    drop(order);
    let target = |i: usize| RouteTarget::Via { next_hop: hops[i % hops.len()], interface: None };
    let t0 = Instant::now();
    control.state.add_routes(table.iter().enumerate().map(|(i, p)| (*p, target(i)))).map_err(|(i, e)| anyhow!("route {i}: {e}"))?;
    control.shared.store(Arc::new(control.state.build()));
    let load_seconds = t0.elapsed().as_secs_f64();
    let rss_after_load = rss_bytes();
    let fib_bytes = {
        let t = control.shared.load();
        t.fib4.memory_bytes() + t.fib6.memory_bytes()
    };
    if !json {
        eprintln!("loaded {} routes in {load_seconds:.2} s; resident {:.0} MB", control.state.route_count(), rss_after_load as f64 / 1e6);
    }

    // The worker forwards 64-byte packets to one of the table's prefixes per flow.
    let (src, dst): (IpAddr, IpAddr) =
        if v6 { ("2001:db8::2".parse()?, "2001:db8:100::1".parse()?) } else { ("198.18.0.2".parse()?, "198.19.0.1".parse()?) };
    let packet = PacketSpec {
        src_mac: "02:fe:00:00:00:01".parse()?,
        dst_mac: "02:00:00:00:00:01".parse()?,
        src,
        dst,
        ttl: 64,
        l4: L4Spec::Udp { src_port: 1024, dst_port: 9 },
        frame_size: 64,
    };
    let stream = StreamSpec {
        name: "fib-update".into(),
        packet,
        modifiers: vec![ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 256 } }],
        count: None,
        rate_pps: None,
    };
    worker.ports[0].device = Box::new(PacketGenerator::new(&[stream]).map_err(|(_, e)| anyhow!(e))?);
    engine::worker::Context::refresh(&mut worker.cx);
    let stop = Arc::new(AtomicBool::new(false));
    let phase = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<(u64, Seen, Forwarding)>();
    let handle = {
        let stop = stop.clone();
        let phase = phase.clone();
        std::thread::spawn(move || {
            core_affinity::set_for_current(core_affinity::CoreId { id: 1 });
            let mut seen: Seen = Vec::with_capacity(4 << 20);
            let mut current = 0u64;
            loop {
                // Each phase: clear, forward until the phase changes, report.
                let p = phase.load(Ordering::Acquire);
                worker.clear_runtime();
                while phase.load(Ordering::Acquire) == p && !stop.load(Ordering::Acquire) {
                    worker.poll_once();
                    let g = worker.cx.ip.tables.generation;
                    if g != current {
                        current = g;
                        seen.push((g, clock::now()));
                    }
                }
                let s = worker.snapshot();
                let input = s.nodes.iter().find(|n| n.name == "pg-input").map_or(0, |n| n.runtime.packets);
                let graph: u64 = s.nodes.iter().filter(|n| n.kind != "input").map(|n| n.runtime.cycles).sum();
                let delivered = s.ports.iter().find(|p| p.name == "null0").map_or(0, |p| p.counters.tx_packets);
                let dropped = s.counters.iter().filter(|c| c.severity != engine::node::Severity::Info).map(|c| c.count).sum();
                let f = Forwarding { packets: input, delivered, dropped, cycles_per_packet: graph as f64 / input.max(1) as f64 };
                let done = stop.load(Ordering::Acquire);
                let _ = tx.send((p, std::mem::take(&mut seen), f));
                if done {
                    return;
                }
            }
        })
    };
    core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
    std::thread::sleep(Duration::from_millis(300));
    // Phase 0 → 1: forwarding alone.
    phase.store(1, Ordering::Release);
    let (_, _, idle) = rx.recv()?;

    // Phase 1: changes as fast as they go, alternating an add of a new prefix and the
    // delete of one added before (the table stays at N routes), each published.
    let hz = clock::hz() as f64;
    let every = (PUBLISH_EVERY_US as f64 * hz / 1e6) as u64;
    // Per change: (generation that published it, TSC when applied).
    let mut published: Vec<(u64, u64)> = Vec::with_capacity(updates as usize + 200_000);
    let mut unpublished = 0usize;
    let mut last_publish = clock::now();
    let mut publishes = 0u64;
    let mut added = std::collections::VecDeque::new();
    let mut next_spare = 0usize;
    let mut stored: Vec<u64> = Vec::with_capacity(updates as usize + 200_000);
    let mut publish = |control: &mut control::dataplane::Control, published: &mut Vec<(u64, u64)>, unpublished: &mut usize| {
        let t = control.state.build();
        let g = t.generation;
        control.shared.store(Arc::new(t));
        let at = clock::now();
        let n = published.len();
        for p in &mut published[n - *unpublished..] {
            p.0 = g;
            stored.push(at.saturating_sub(p.1));
        }
        *unpublished = 0;
        publishes += 1;
    };
    let mut apply = |control: &mut control::dataplane::Control, i: u64, published: &mut Vec<(u64, u64)>| -> Result<()> {
        if i % 2 == 0 || added.is_empty() {
            let p = spare[next_spare % spare.len()];
            next_spare += 1;
            control.state.add_route(p, target(i as usize)).map_err(|e| anyhow!("add {p}: {e}"))?;
            added.push_back(p);
        } else {
            let p = added.pop_front().expect("checked");
            control.state.del_route(&p).map_err(|e| anyhow!("delete {p}: {e}"))?;
        }
        published.push((0, clock::now()));
        Ok(())
    };
    let t1 = Instant::now();
    let cpu1 = thread_cpu_ns();
    for i in 0..updates {
        apply(&mut control, i, &mut published)?;
        unpublished += 1;
        let now = clock::now();
        if now - last_publish >= every {
            publish(&mut control, &mut published, &mut unpublished);
            last_publish = now;
        }
    }
    publish(&mut control, &mut published, &mut unpublished);
    let secs = t1.elapsed().as_secs_f64();
    let cpu_secs = thread_cpu_ns().saturating_sub(cpu1) as f64 / 1e9;
    std::thread::sleep(Duration::from_millis(20));
    phase.store(2, Ordering::Release);
    let (_, seen1, _) = rx.recv()?;

    // Phase 2: 100 000 changes a second for a second, paced, while the worker forwards.
    let paced_rate = 100_000u64;
    let c0 = clock::now();
    let mut paced = 0u64;
    while paced < paced_rate {
        let due = ((clock::now() - c0) as f64 / hz * paced_rate as f64) as u64;
        while paced < due.min(paced_rate) {
            apply(&mut control, updates + paced, &mut published)?;
            unpublished += 1;
            paced += 1;
        }
        let now = clock::now();
        if unpublished > 0 && now - last_publish >= every {
            publish(&mut control, &mut published, &mut unpublished);
            last_publish = now;
        }
        std::hint::spin_loop();
    }
    if unpublished > 0 {
        publish(&mut control, &mut published, &mut unpublished);
    }
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, Ordering::Release);
    phase.store(3, Ordering::Release);
    let (_, seen2, during) = rx.recv()?;
    handle.join().map_err(|_| anyhow!("worker thread panicked"))?;

    let fib_bytes_after_updates = {
        let t = control.shared.load();
        t.fib4.memory_bytes() + t.fib6.memory_bytes()
    };
    stored.sort_unstable();
    let store_us = |f: f64| stored.get(((stored.len().max(1) - 1) as f64 * f) as usize).map_or(0.0, |&c| c as f64 / hz * 1e6);
    // Latency of each published generation: the first vector at or past it.
    if std::env::var_os("VECGATE_FIB_DEBUG").is_some() {
        eprintln!("published {:?}\nseen {:?}", &published[..published.len().min(20)], &seen1[..seen1.len().min(20)]);
    }
    let mut seen: Seen = seen1;
    seen.extend(seen2);
    let mut lat: Vec<f64> = Vec::with_capacity(published.len());
    let mut j = 0;
    for &(g, at) in &published {
        while j < seen.len() && seen[j].0 < g {
            j += 1;
        }
        if let Some(&(_, t)) = seen.get(j) {
            lat.push(t.saturating_sub(at) as f64 / hz * 1e6);
        }
    }
    if lat.len() < published.len() * 99 / 100 {
        bail!("the worker saw only {} of {} published versions", lat.len(), published.len());
    }
    lat.sort_by(f64::total_cmp);
    let q = |f: f64| lat[((lat.len() - 1) as f64 * f) as usize];
    let report = Report {
        scenario: "fib-update",
        family: family.into(),
        routes: control.state.route_count(),
        cpu: crate::bench::cpu_model(),
        load_seconds,
        rss_bytes_after_load: rss_after_load,
        fib_bytes,
        fib_bytes_after_updates,
        updates,
        updates_per_sec: updates as f64 / secs,
        updates_per_cpu_sec: updates as f64 / cpu_secs.max(1e-9),
        publish_every_us: PUBLISH_EVERY_US,
        publishes,
        publish_latency_us_median: q(0.5),
        publish_latency_us_p99: q(0.99),
        publish_latency_us_max: q(1.0),
        store_latency_us_median: store_us(0.5),
        store_latency_us_max: store_us(1.0),
        forwarding_idle: idle,
        paced_rate,
        paced_updates: paced,
        forwarding_during_updates: during,
    };
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "fib-update ({family}, {} routes): {} updates in {secs:.2} s = {:.0}/s ({:.0} per CPU second), published {} times (every {} µs at most); change → worker latency median {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            report.routes, updates, report.updates_per_sec, report.updates_per_cpu_sec, report.publishes, PUBLISH_EVERY_US, report.publish_latency_us_median, report.publish_latency_us_p99, report.publish_latency_us_max
        );
        println!(
            "forwarding: {:.1} cycles/packet alone, {:.1} while {} updates/s ({} packets, {} delivered, {} dropped)",
            report.forwarding_idle.cycles_per_packet,
            report.forwarding_during_updates.cycles_per_packet,
            paced_rate,
            report.forwarding_during_updates.packets,
            report.forwarding_during_updates.delivered,
            report.forwarding_during_updates.dropped
        );
    }
    let f = &report.forwarding_during_updates;
    // Packets still in the graph when the phase ended are neither; at most a few vectors.
    if f.dropped > 0 || f.packets.saturating_sub(f.delivered) > 4 * engine::VECTOR_SIZE as u64 {
        bail!("packets lost while routes changed: {} generated, {} delivered, {} dropped", f.packets, f.delivered, f.dropped);
    }
    Ok(())
}
