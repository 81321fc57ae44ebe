//! `lb4-nat` / `lb6-nat` decide an untraced vector in one loop (`run_vector`: each
//! packet's flow read and its session slot loaded a few packets ahead of its decision)
//! and a traced one by `prepare` and a `process` call a packet. Both must send every
//! packet where the other does, with the same bytes and the same counters: vectors
//! longer than the pipeline's distance, mixing new flows, session hits, encapsulated
//! services, a port without a service and packets without a flow.

use crate::common;

use common::{count, counters, seed, traced_and_untraced_agree};
use control::fuzz::graph::Harness;
use io::mem::RxFrame;

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

#[test]
fn a_vector_run_in_one_loop_goes_where_the_traced_one_goes() {
    let mut untraced = Harness::new();
    let mut traced = Harness::new();
    // Three rounds: new sessions, then their hits twice.
    for round in 0..3 {
        let frames = vector(24);
        assert!(frames.len() > 2 * 16, "longer than the pipeline's distance");
        traced_and_untraced_agree(&mut untraced, &mut traced, frames, "lb4-nat", |h| counters(h, "lb"), round);
    }
    let c = counters(&untraced, "lb");
    let count = |node: &str, counter: &str| count(&c, node, counter);
    // Each flow's first packet made its session; the later rounds were hits.
    assert_eq!(count("lb4-nat", "new-session"), 48, "{c:?}");
    // The IPv6 service has client affinity: the client's later flows follow its first.
    assert_eq!(count("lb6-nat", "new-session") + count("lb6-nat", "affinity"), 24, "{c:?}");
    assert_eq!(count("lb4-nat", "encapsulated"), 3 * 24, "{c:?}");
    assert_eq!(count("lb4-nat", "no-service"), 3 * 3, "{c:?}");
    assert_eq!(count("lb4-nat", "truncated"), 3 * 2, "{c:?}");
}
