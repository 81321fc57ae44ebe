//! The whole-graph fuzz target's UPF: its seeds (`fuzz/make_upf_graph_corpus.py`, built by
//! scapy) reach the UPF nodes with the harness's sessions in place and pass every
//! invariant of the harness (`control::fuzz::graph`), and each does what it was written
//! for — so fuzzing starts from inside the UPF, not from a drop at its door.

use common::count_all as count;
use control::fuzz::graph::{decode, Harness};
use std::path::Path;

use crate::common;

fn seed(name: &str) -> Vec<(usize, io::mem::RxFrame)> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/graph").join(format!("seed-upf-{name}"));
    decode(&std::fs::read(p).unwrap())
}

/// The frames of a seed, in one poll; what came out, as (interface, outer IP bytes).
fn run(h: &mut Harness, name: &str) -> Vec<(String, Vec<u8>)> {
    let out = h.frames(seed(name));
    out.into_iter().map(|(i, t)| (h.worker.ports[i].name.clone(), t.bytes[14..].to_vec())).collect()
}

/// The TEID and inner packet of a G-PDU in IPv4 or IPv6.
fn gtpu(ip: &[u8]) -> (u32, Vec<u8>) {
    let hl = if ip[0] >> 4 == 4 { 20 } else { 40 };
    let g = wire::gtpu::GtpuPacket::new_checked(&ip[hl + 8..]).unwrap();
    let r = wire::gtpu::GtpuRepr::parse(&g).unwrap();
    (r.teid.0, ip[ip.len() - r.payload_len..].to_vec())
}

#[test]
fn upf_seeds_take_their_paths() {
    let mut h = Harness::new();
    // Uplink: decapsulated toward the data network on access0.
    for name in ["uplink4", "uplink4-qfi"] {
        let out = run(&mut h, name);
        assert_eq!(out.len(), 1, "{name}");
        assert_eq!(out[0].0, "access0");
        assert_eq!(out[0].1[..20][16..20], [198, 18, 0, 2], "to the DN host, decapsulated");
    }
    assert_eq!(count(&h, "upf4-uplink", "forwarded"), 2);
    let out = run(&mut h, "uplink6");
    assert_eq!((out.len(), out[0].0.as_str(), out[0].1[0] >> 4), (1, "access0", 6));
    // The SDF-filtered PDR drops; a TEID of no session gets an Error Indication (GTP-U
    // type 26) back to its sender.
    assert!(run(&mut h, "uplink4-sdf-drop").is_empty());
    assert_eq!(count(&h, "upf4-uplink", "far-drop"), 1);
    let out = run(&mut h, "no-session");
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].1[9], out[0].1[20 + 8 + 1]), (17, 26), "UDP, Error Indication");
    assert_eq!(count(&h, "upf4-uplink", "error-indications-sent"), 1);
    // N9: re-encapsulated toward the peer UPF with its TEID.
    let out = run(&mut h, "n9");
    assert_eq!((out.len(), out[0].0.as_str()), (1, "core0"));
    assert_eq!(out[0].1[16..20], [198, 18, 1, 3]);
    assert_eq!(gtpu(&out[0].1).0, 0x7000);
    // Downlink: in GTP-U toward the gNB, both families.
    let out = run(&mut h, "downlink4");
    assert_eq!((out.len(), out[0].0.as_str(), gtpu(&out[0].1).0), (1, "core0", 0x6000));
    let out = run(&mut h, "downlink6");
    assert_eq!((out.len(), out[0].0.as_str(), gtpu(&out[0].1).0), (1, "core0", 0x6002));
    // Buffering: held up to the session's BAR count, nothing sent, counted.
    assert!(run(&mut h, "buffer").is_empty());
    assert_eq!((count(&h, "upf-buffer", "held"), count(&h, "upf-buffer", "bar-limit")), (2, 1));
}

/// Malformed input on a session's TEID, through the whole graph: dropped by name, and no
/// other counter moves. `gtpu4-input` takes what is not a well-formed G-PDU before the UPF
/// sees it (a GTP-U length past the datagram, an Echo Request with a TEID, an End Marker);
/// `upfN-uplink` takes a G-PDU whose inner packet is not IP or is cut short.
#[test]
fn malformed_upf_seeds_are_dropped_by_name() {
    let mut h = Harness::new();
    for (name, node, counter) in [
        ("gtp-length-past-udp", "gtpu4-input", "gtp-truncated"),
        ("echo-request-on-session", "gtpu4-input", "bad-signalling"),
        ("end-marker-on-session", "gtpu4-input", "end-markers"),
        ("bad-inner4", "upf4-uplink", "bad-inner"),
        ("bad-inner6", "upf6-uplink", "bad-inner"),
        ("inner-truncated", "upf4-uplink", "truncated"),
    ] {
        let before = h.worker.graph.counter_snapshots();
        assert!(run(&mut h, name).is_empty(), "{name}: nothing sent");
        let after = h.worker.graph.counter_snapshots();
        let moved: Vec<(&str, &str, u64)> = after
            .iter()
            .zip(&before)
            .filter(|(a, b)| a.count != b.count)
            .map(|(a, b)| (a.node.as_str(), a.counter, a.count - b.count))
            .collect();
        assert_eq!(moved, vec![(node, counter, 1)], "{name}");
    }
}
