//! Amplification (issue 25): no received packet makes the gateway send more than one
//! packet back toward its source, and every kind of reply is rate-limited. A whole
//! worker (the graph fuzz target's dataplane, with low reply rates) takes a burst of each
//! trigger, built by scapy (`fuzz/make_graph_corpus.py`), and the frames sent back out of
//! the interface it came in by are counted, packet by packet (none of these triggers is
//! forwarded there).

use common::count_all as count;
use control::fuzz::graph::{decode, Harness, CONFIG};
use std::path::Path;
use std::time::Instant;

use crate::common;

const BURST: usize = 300;
/// ICMP errors per second (the bucket holds 100, `icmp_burst`) and GTP-U replies per
/// second (the bucket holds as many).
const ICMP_RATE: u64 = 10;
const ICMP_BUCKET: u64 = 100;
const GTPU_RATE: u64 = 10;
/// Echo replies, ARP replies and neighbour advertisements per second (each kind's
/// bucket holds as many).
const REPLY_RATE: u64 = 10;

fn harness() -> Harness {
    let cfg = CONFIG.replace("[dataplane]\n", &format!("[dataplane]\nicmp_errors_per_sec = {ICMP_RATE}\nreplies_per_sec = {REPLY_RATE}\n"))
        + &format!("\n[gtpu]\nreplies_per_sec = {GTPU_RATE}\n");
    Harness::with_config(&cfg)
}

fn seed(name: &str) -> (usize, io::mem::RxFrame) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/graph").join(format!("seed-{name}"));
    decode(&std::fs::read(&p).unwrap()).into_iter().next().unwrap()
}

/// Send `BURST` copies of a seed's first frame; every one gets at most one frame back
/// to the sender. Returns how many got one, and the seconds the burst took.
fn burst(h: &mut Harness, name: &str) -> (u64, f64) {
    let (port, f) = seed(name);
    let t0 = Instant::now();
    let mut answered = 0;
    for _ in 0..BURST {
        let back = h.frame(port, f.clone()).into_iter().filter(|(i, _)| *i == port).count();
        assert!(back <= 1, "{name}: {back} frames back for one");
        answered += back as u64;
    }
    (answered, t0.elapsed().as_secs_f64())
}

/// Every reply kind: a bucket's worth, then what the rate refilled while the burst ran;
/// every one not answered counted by name.
#[test]
fn every_reply_kind_is_rate_limited() {
    for (name, node, limited, bucket, rate) in [
        ("ttl4", "ip4-icmp-error", "rate-limited", ICMP_BUCKET, ICMP_RATE),
        ("port-unreachable", "ip4-icmp-error", "rate-limited", ICMP_BUCKET, ICMP_RATE),
        ("frag-needed4", "ip4-icmp-error", "rate-limited", ICMP_BUCKET, ICMP_RATE),
        ("hlim6", "ip6-icmp-error", "rate-limited", ICMP_BUCKET, ICMP_RATE),
        ("too-big6", "ip6-icmp-error", "rate-limited", ICMP_BUCKET, ICMP_RATE),
        ("gtpu-unknown-teid", "gtpu4-input", "unknown-teid", GTPU_RATE, GTPU_RATE),
        ("gtpu-unknown-ext", "gtpu4-input", "unknown-required-extension", GTPU_RATE, GTPU_RATE),
        ("gtpu-echo", "gtpu4-input", "rate-limited", GTPU_RATE, GTPU_RATE),
        ("echo4", "ip4-local", "rate-limited", REPLY_RATE, REPLY_RATE),
        ("echo6", "ip6-local", "rate-limited", REPLY_RATE, REPLY_RATE),
        ("arp", "arp-input", "rate-limited", REPLY_RATE, REPLY_RATE),
        ("nd", "ip6-local", "rate-limited", REPLY_RATE, REPLY_RATE),
    ] {
        // A fresh worker per trigger: full buckets.
        let mut h = harness();
        let (answered, secs) = burst(&mut h, name);
        let allowed = bucket + (rate as f64 * secs).ceil() as u64 + 1;
        assert!(answered >= 1, "{name}: answered at all");
        assert!(answered <= allowed, "{name}: {answered} replies to {BURST} in {secs:.3} s (bucket {bucket}, {rate}/s)");
        assert_eq!(answered + count(&h, node, limited), BURST as u64, "{name}: every unanswered one counted as {node} {limited}");
    }
}

/// One kind's flood does not starve another: after echo requests emptied their bucket,
/// ARP requests and neighbour solicitations are still answered.
#[test]
fn a_flood_of_one_reply_kind_leaves_the_others() {
    let mut h = harness();
    burst(&mut h, "echo4");
    burst(&mut h, "echo6");
    for name in ["arp", "nd"] {
        let (port, f) = seed(name);
        let back = h.frame(port, f).into_iter().filter(|(i, _)| *i == port).count();
        assert_eq!(back, 1, "{name} answered after the echo floods");
    }
}

/// Echo (ICMP, ICMPv6, GTP-U), ARP and neighbour solicitations: never an answer larger
/// than the question (no amplification in size either).
#[test]
fn echo_and_resolution_replies_are_no_larger() {
    for name in ["echo4", "echo6", "arp", "nd", "gtpu-echo"] {
        let mut h = harness();
        let (port, f) = seed(name);
        for _ in 0..BURST {
            let back: Vec<_> = h.frame(port, f.clone()).into_iter().filter(|(i, _)| *i == port).collect();
            assert!(back.len() <= 1, "{name}: {} frames back for one", back.len());
            for (_, t) in back {
                // Never more than the request's size (a minimum Ethernet frame aside).
                assert!(t.bytes.len() <= f.bytes.len().max(64), "{name}: {} bytes back for {}", t.bytes.len(), f.bytes.len());
            }
        }
    }
}
