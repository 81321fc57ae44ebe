//! `lb4-nat` / `lb6-nat` decide an untraced vector in one loop (`run_vector`: each
//! packet's flow read and its session slot loaded a few packets ahead of its decision)
//! and a traced one by `prepare` and a `process` call a packet. Both must send every
//! packet where the other does, with the same bytes and the same counters: vectors
//! longer than the pipeline's distance, mixing new flows, session hits, encapsulated
//! services, a port without a service and packets without a flow.

use control::fuzz::graph::{decode, Harness};
use io::mem::RxFrame;
use std::path::Path;

/// The first frame of a committed fuzz seed (fuzz/make_graph_corpus.py).
fn seed(name: &str) -> (usize, Vec<u8>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/graph").join(name);
    let (port, f) = decode(&std::fs::read(&path).unwrap()).remove(0);
    (port, f.bytes)
}

/// A 16-bit field at `at` set to `v`, the checksum at `sum` kept right (RFC 1624).
fn set_field(frame: &mut [u8], at: usize, v: u16, sum: usize) {
    let old = u16::from_be_bytes([frame[at], frame[at + 1]]);
    let c = u16::from_be_bytes([frame[sum], frame[sum + 1]]);
    frame[at..at + 2].copy_from_slice(&v.to_be_bytes());
    frame[sum..sum + 2].copy_from_slice(&wire::checksum::update16(c, old, v).to_be_bytes());
}

/// One vector's frames: per flow number `k`, a TCP packet to the NAT service and one to
/// the GRE service (IPv4, source port by `k`), a UDP packet to the IPv6 service; every
/// seventh flow also a TCP packet to a port no service has, every eleventh a frame cut
/// short in its TCP header.
fn vector(flows: u16) -> Vec<(usize, RxFrame)> {
    let (p4, nat4) = seed("seed-lb4-tcp");
    let (pg, gre4) = seed("seed-lb4-dsr-gre");
    let (pn, none4) = seed("seed-lb-no-service");
    let (p6, udp6) = seed("seed-lb6-udp");
    let mut out = Vec::new();
    for k in 0..flows {
        // Ethernet 14 + IPv4 20: TCP source port at 34, checksum at 50; Ethernet 14 +
        // IPv6 40: UDP source port at 54, checksum at 60.
        let mut a = nat4.clone();
        set_field(&mut a, 34, 30000 + k, 50);
        let mut b = gre4.clone();
        set_field(&mut b, 34, 31000 + k, 50);
        let mut c = udp6.clone();
        set_field(&mut c, 54, 32000 + k, 60);
        out.extend([(p4, a), (pg, b), (p6, c)]);
        if k % 7 == 3 {
            let mut d = none4.clone();
            set_field(&mut d, 34, 33000 + k, 50);
            out.push((pn, d));
        }
        if k % 11 == 5 {
            // Its IPv4 total length (at 16, header checksum at 24) says 10 bytes of TCP.
            let mut e = nat4[..14 + 20 + 10].to_vec();
            set_field(&mut e, 16, 20 + 10, 24);
            out.push((p4, e));
        }
    }
    out.into_iter().map(|(port, bytes)| (port, RxFrame { bytes, vnet: None })).collect()
}

fn lb_counters(h: &Harness) -> Vec<(String, String, u64)> {
    let mut c: Vec<_> = h
        .worker
        .graph
        .counter_snapshots()
        .into_iter()
        .filter(|c| c.node.starts_with("lb") && c.count > 0)
        .map(|c| (c.node.to_string(), c.counter.to_string(), c.count))
        .collect();
    c.sort();
    c
}

#[test]
fn a_vector_run_in_one_loop_goes_where_the_traced_one_goes() {
    let mut untraced = Harness::new();
    let mut traced = Harness::new();
    // Three rounds: new sessions, then their hits twice.
    for round in 0..3 {
        traced.worker.graph.trace_add("pg-input", 10_000).unwrap();
        let frames = vector(24);
        assert!(frames.len() > 2 * 16, "longer than the pipeline's distance");
        let a = untraced.frames(frames.clone());
        let b = traced.frames(frames);
        assert!(traced.worker.graph.trace_records().iter().any(|t| t.node == "lb4-nat"), "round {round}: traced");
        traced.worker.graph.trace_clear();
        assert_eq!(a.len(), b.len(), "round {round}: frames sent");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x, y, "round {round}: frame {i}");
        }
        assert_eq!(lb_counters(&untraced), lb_counters(&traced), "round {round}");
    }
    let c = lb_counters(&untraced);
    let count = |node: &str, counter: &str| c.iter().find(|(n, k, _)| n == node && k == counter).map_or(0, |e| e.2);
    // Each flow's first packet made its session; the later rounds were hits.
    assert_eq!(count("lb4-nat", "new-session"), 48, "{c:?}");
    // The IPv6 service has client affinity: the client's later flows follow its first.
    assert_eq!(count("lb6-nat", "new-session") + count("lb6-nat", "affinity"), 24, "{c:?}");
    assert_eq!(count("lb4-nat", "encapsulated"), 3 * 24, "{c:?}");
    assert_eq!(count("lb4-nat", "no-service"), 3 * 3, "{c:?}");
    assert_eq!(count("lb4-nat", "truncated"), 3 * 2, "{c:?}");
}
