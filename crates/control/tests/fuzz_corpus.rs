//! Replays the committed corpus of the control-level fuzz targets (`fuzz/corpus/graph`,
//! …) through the same bodies cargo-fuzz runs (`control::fuzz`), on stable Rust: every
//! input that ever found something keeps passing the invariants.

use common::count_all as count;
use control::fuzz::graph::Harness;
use std::path::{Path, PathBuf};

use crate::common;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    files.sort();
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect()
}

/// The frames of the graph corpus's `seed-NAME`.
fn seed(name: &str) -> Vec<(usize, io::mem::RxFrame)> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/graph").join(format!("seed-{name}"));
    control::fuzz::graph::decode(&std::fs::read(p).unwrap())
}

#[test]
fn graph_corpus_replays_cleanly() {
    let inputs = corpus("graph");
    assert!(inputs.len() >= 40, "the scapy seeds are there");
    let mut h = Harness::new();
    for (path, data) in &inputs {
        // A panic names the input it came from.
        eprintln!("{}", path.display());
        h.input(data);
    }
}

/// The scapy seeds reach the paths they were written for (if the config or the seeds
/// drift apart, fuzzing starts from nowhere).
#[test]
fn graph_seeds_reach_every_feature() {
    seeds_reach_every_feature(Harness::new(), &[]);
}

/// The `graph_workers` target's harness: the whole corpus passes the invariants through
/// two workers (worker 0 spreads by flow over the handoff lanes, the other sends back
/// through its lane), and the seeds reach every feature the same way: fragments meet in
/// one worker's reassembly, parcels' datagrams in one worker's join, and a load-balanced
/// connection's replies in the worker that holds its session.
#[test]
fn graph_corpus_through_two_workers() {
    let mut h = Harness::with_workers(2);
    for (path, data) in &corpus("graph") {
        eprintln!("{}", path.display());
        h.input(data);
    }
    let other = |node: &str| h.others[0].snapshot().nodes.iter().find(|x| x.name == node).map_or(0, |x| x.runtime.packets);
    assert!(count(&h, "worker-handoff", "handed-off") > 100 && count(&h, "worker-handoff", "kept") > 100, "{:?}", nonzero(&h));
    assert!(other("ethernet-input") > 100 && other("ip4-lookup") > 0 && other("ip6-lookup") > 0, "{:?}", nonzero(&h));
    assert_eq!(count(&h, "worker-handoff", "lane-full"), 0);
    // Datagrams made whole, and clients' packets out of tunnels, on another worker than
    // their connection's went on to it, and entered its graph at `ip-resume`.
    let resumed = node_packets(&h, "ip-resume");
    let handed = count(&h, "resume-handoff", "handed-off");
    assert!(handed > 0 && resumed == handed, "{handed} handed, {resumed} resumed: {:?}", nonzero(&h));
    assert_eq!(count(&h, "lb4-nat", "to-session-worker") + count(&h, "lb6-nat", "to-session-worker"), handed);
    assert_eq!(count(&h, "resume-handoff", "lane-full"), 0);
    // The seeds' replies go to the client's own port on the SNAT address, which a worker
    // keeps only when replies to it come to that worker: tests/lb_workers.rs replies to
    // the port chosen.
    seeds_reach_every_feature(
        Harness::with_workers(2),
        &[("lb4-nat", "reply-translated"), ("lb6-nat", "reply-translated"), ("lb6-nat", "icmp-translated")],
    );
}

/// The `graph_local` target's harness (services that keep the client's address, so every
/// forwarded packet passes `lbN-nat`): the whole corpus passes the invariants, and the
/// seeds still reach every feature.
#[test]
fn graph_corpus_with_local_services() {
    let mut h = Harness::with_local_services();
    for (path, data) in &corpus("graph") {
        eprintln!("{}", path.display());
        h.input(data);
    }
    // With lbN-nat on the forwarded path (an output feature, as an SPD is: each datagram
    // must pass it), parcels are not forwarded whole nor datagrams joined into them.
    seeds_reach_every_feature(
        Harness::with_local_services(),
        &[
            ("ethernet-input", "parcels-forwarded-whole"),
            ("parcel4-join", "parcels-joined"),
            ("parcel6-join", "parcels-joined"),
            ("parcel4-join", "gso-frames-joined"),
            ("parcel6-join", "gso-frames-joined"),
            ("parcel4-input", "to-gso-frame"),
            ("parcel6-input", "to-gso-frame"),
        ],
    );
}

/// The `Local` seeds do what they are for in the `graph_local` harness: the backend's
/// reply and a router's ICMP error about the connection, both addressed to the client,
/// leave translated to the service's address and port (scapy checks the same
/// translation in tests/test_lb.py; here the seeds' paths are pinned).
#[test]
fn graph_local_seeds_translate_forwarded_replies_and_errors() {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let mut h = Harness::with_local_services();
    // (source, source port of the reply / destination port quoted in the error)
    let mut seen = Vec::new();
    for name in ["lb4-local", "lb6-local"] {
        for (port, f) in seed(name) {
            for (_, t) in h.frame(port, f) {
                let l3 = &t.bytes[14..];
                let (src, proto, l4, quoted): (IpAddr, _, &[u8], &[u8]) = match l3[0] >> 4 {
                    4 => {
                        let ip = wire::ipv4::Ipv4Packet::new_checked(l3).unwrap();
                        let p = &l3[usize::from(l3[0] & 0xf) * 4..];
                        (IpAddr::V4(ip.src_addr()), ip.protocol(), p, p.get(8..).unwrap_or(&[]))
                    }
                    _ => {
                        let ip = wire::ipv6::Ipv6Packet::new_checked(l3).unwrap();
                        let p = &l3[40..];
                        (IpAddr::V6(ip.src_addr()), ip.next_header(), p, p.get(8..).unwrap_or(&[]))
                    }
                };
                seen.push(match proto {
                    wire::IpProtocol::Icmp => {
                        let q = wire::ipv4::Ipv4Packet::new_unchecked(quoted);
                        ("icmp", IpAddr::V4(q.dst_addr()), u16::from_be_bytes([quoted[22], quoted[23]]))
                    }
                    wire::IpProtocol::Icmpv6 => {
                        let q = wire::ipv6::Ipv6Packet::new_unchecked(quoted);
                        ("icmp", IpAddr::V6(q.dst_addr()), u16::from_be_bytes([quoted[42], quoted[43]]))
                    }
                    _ => ("reply", src, u16::from_be_bytes([l4[0], l4[1]])),
                });
            }
        }
    }
    let vip4 = IpAddr::V4(Ipv4Addr::new(198, 18, 128, 12));
    let vip6 = IpAddr::V6("2001:db8:128::12".parse::<Ipv6Addr>().unwrap());
    for want in [("reply", vip4, 80), ("icmp", vip4, 80), ("reply", vip6, 53), ("icmp", vip6, 53)] {
        assert!(seen.contains(&want), "{want:?} in {seen:?}");
    }
    assert_eq!(count(&h, "lb4-nat", "reply-translated") + count(&h, "lb6-nat", "reply-translated"), 2, "{:?}", nonzero(&h));
    assert_eq!(count(&h, "lb4-nat", "icmp-translated") + count(&h, "lb6-nat", "icmp-translated"), 2, "{:?}", nonzero(&h));
}

/// lb4-dsr-gre: the connection's two packets and a router's frag-needed about the
/// backend's direct reply (sent to the service address) all leave in GRE to one
/// backend, the error unchanged and untranslated (path MTU discovery through direct
/// server return).
#[test]
fn graph_dsr_seed_carries_an_error_to_the_connections_backend() {
    let mut h = Harness::new();
    let sent = seed("lb4-dsr-gre");
    let mut left = Vec::new();
    for (port, f) in sent.clone() {
        for (_, t) in h.frame(port, f) {
            let ip = wire::ipv4::Ipv4Packet::new_checked(&t.bytes[14..]).unwrap();
            assert_eq!(ip.protocol(), wire::IpProtocol::Gre, "{:?}", nonzero(&h));
            // GRE's 4 bytes, then the client's (or the router's) packet.
            left.push((ip.dst_addr(), ip.payload()[4..].to_vec()));
        }
    }
    assert_eq!(left.len(), 3, "{:?}", nonzero(&h));
    assert!(left.iter().all(|(b, _)| *b == left[0].0), "one backend: {left:?}");
    for ((_, inner), (_, f)) in left.iter().zip(&sent) {
        assert_eq!(inner[..], f.bytes[14..], "carried unchanged");
    }
    assert_eq!(count(&h, "lb4-nat", "icmp-to-backend"), 1);
    assert_eq!(count(&h, "lb4-nat", "icmp-translated"), 0);
    assert_eq!(count(&h, "lb4-nat", "new-session"), 1);
}

/// Fragments to services: each seed's datagram is reassembled by the node, load-balanced
/// whole, and leaves fragmented again (no fragment dropped, no Packet Too Big): the
/// IPv6 NAT service's translated datagram in IPv6 fragments, the IPv4 one's (its
/// fragments reversed) in IPv4 fragments, the GUE service's in outer IPv6 fragments.
#[test]
fn graph_fragment_seeds_are_reassembled_and_leave_fragmented() {
    let mut h = Harness::new();
    let mut sent = Vec::new();
    for name in ["lb6-fragments", "lb4-fragments", "lb6-dsr-fragments"] {
        sent.push(seed(name).len() as u64);
        let left = leaving(&mut h, name);
        assert!(left.len() >= 2, "{name}: {} frames left: {:?}", left.len(), nonzero(&h));
        for f in &left {
            let l3 = &f[14..];
            let fragment = match l3[0] >> 4 {
                4 => wire::ipv4::Ipv4Packet::new_checked(l3).unwrap().is_fragment(),
                _ => wire::ipv6::Ipv6Packet::new_checked(l3).unwrap().next_header() == wire::IpProtocol::Ipv6Frag,
            };
            assert!(fragment, "{name}: a fragment left");
        }
    }
    assert_eq!(count(&h, "lb6-nat", "to-reassembly"), sent[0] + sent[2]);
    assert_eq!(count(&h, "lb4-nat", "to-reassembly"), sent[1]);
    assert_eq!(count(&h, "ip6-reassembly", "reassembled"), 2);
    assert_eq!(count(&h, "ip4-reassembly", "reassembled"), 1);
    assert_eq!(count(&h, "lb6-nat", "new-session") + count(&h, "lb6-nat", "affinity"), 2);
    assert_eq!(count(&h, "lb4-nat", "new-session"), 1);
    assert_eq!(count(&h, "lb6-nat", "fragment-outer"), 1);
    assert_eq!(count(&h, "ip6-rewrite", "packet-too-big"), 0, "{:?}", nonzero(&h));
}

/// A `Local` service's client behind a GUE tunnel (seed lb4-local-tunnel, the
/// `graph_local` harness): the backend's reply leaves inside the tunnel, translated to the
/// service's address and port.
#[test]
fn graph_local_tunnel_seed_sends_the_translated_reply_into_the_tunnel() {
    let mut h = Harness::with_local_services();
    let left = leaving(&mut h, "lb4-local-tunnel");
    let gue: Vec<_> = left
        .iter()
        .filter_map(|f| {
            let ip = wire::ipv4::Ipv4Packet::new_checked(&f[14..]).ok()?;
            (ip.protocol() == wire::IpProtocol::Udp && ip.dst_addr() == std::net::Ipv4Addr::new(198, 18, 1, 5))
                .then(|| ip.payload().to_vec())
        })
        .collect();
    assert_eq!(gue.len(), 1, "{:?}", nonzero(&h));
    // UDP's 8 bytes, GUE's 4, then the reply.
    let inner = wire::ipv4::Ipv4Packet::new_checked(&gue[0][12..]).unwrap();
    assert_eq!(inner.src_addr(), std::net::Ipv4Addr::new(198, 18, 128, 12));
    assert_eq!(u16::from_be_bytes([inner.payload()[0], inner.payload()[1]]), 80);
    assert_eq!(count(&h, "lb4-nat", "reply-translated"), 1, "{:?}", nonzero(&h));
}

/// IPv6 options headers to a service (seed lb6-options): the query behind Hop-by-Hop and
/// Destination Options headers leaves translated with both, the datagram fragmented
/// behind a Hop-by-Hop header is reassembled and leaves in fragments that keep it, the
/// query behind a Routing header is refused by name.
#[test]
fn graph_options_seed_is_translated_with_its_headers() {
    let mut h = Harness::new();
    let left = leaving(&mut h, "lb6-options");
    assert!(left.len() >= 3, "{} frames left: {:?}", left.len(), nonzero(&h));
    for f in &left {
        let ip = wire::ipv6::Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(ip.next_header(), wire::IpProtocol::HopByHop, "the Hop-by-Hop header kept: {:?} {:?}", ip.dst_addr(), nonzero(&h));
        assert_ne!(ip.dst_addr().octets()[..], [0x20, 0x01, 0x0d, 0xb8, 1, 0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10], "translated");
    }
    assert_eq!(count(&h, "lb6-nat", "new-session") + count(&h, "lb6-nat", "affinity"), 2, "{:?}", nonzero(&h));
    assert_eq!(count(&h, "lb6-nat", "extension-headers"), 1);
    assert_eq!(count(&h, "ip6-reassembly", "reassembled"), 1);
}

/// `not_here`: counters the seeds cannot reach with this harness.
fn seeds_reach_every_feature(mut h: Harness, not_here: &[(&str, &str)]) {
    for (path, data) in corpus("graph") {
        if path.file_name().unwrap().to_string_lossy().starts_with("seed-") {
            h.input(&data);
        }
    }
    let s = h.worker.snapshot();
    let sent = |name: &str| s.ports.iter().find(|p| p.name == name).unwrap().counters.tx_packets;
    assert!(sent("access0") > 0 && sent("core0") > 0 && sent("narrow0") > 0 && sent("parcel0") > 0);
    for (node, counter) in [
        ("gtpu4-input", "decapsulated"),
        ("gtpu6-input", "decapsulated"),
        ("gue4-input", "decapsulated"),
        ("gue6-input", "decapsulated"),
        ("ip4-reassembly", "reassembled"),
        ("ip6-reassembly", "reassembled"),
        ("esp4-decrypt", "decrypted"),
        ("esp6-decrypt", "decrypted"),
        ("esp6-decrypt", "nat-keepalive"),
        ("esp6-decrypt", "urpf-wrong-tunnel"),
        ("esp6-decrypt", "urpf-wrong-tunnel"),
        ("esp4-encrypt", "encrypted"),
        ("esp6-encrypt", "encrypted"),
        ("ipsec4-output", "policy-discard"),
        ("ipsec6-output", "policy-discard"),
        ("lb4-nat", "new-session"),
        ("lb4-nat", "reply-translated"),
        ("lb6-nat", "new-session"),
        ("lb6-nat", "reply-translated"),
        ("lb4-nat", "no-service"),
        ("lb6-nat", "no-service"),
        ("lb6-nat", "icmp-translated"),
        ("lb4-nat", "icmp-to-backend"),
        ("lb4-nat", "to-reassembly"),
        ("lb6-nat", "to-reassembly"),
        ("ip6-rewrite", "to-fragment"),
        ("lb4-nat", "source-not-allowed"),
        ("lb6-nat", "source-not-allowed"),
        ("lb4-nat", "sctp-bad-checksum"),
        ("lb4-nat", "sctp-bad-chunk"),
        ("lb6-nat", "sctp-bad-checksum"),
        ("lb6-nat", "sctp-bad-chunk"),
        ("lb4-nat", "sctp-addresses-removed"),
        ("lb4-nat", "sctp-bad-parameter"),
        ("lb4-nat", "sctp-asconf-unlisted"),
        ("lb4-nat", "sctp-asconf-dropped"),
        ("lb6-nat", "encapsulated"),
        ("lb6-nat", "sctp-path-changed"),
        ("ethernet-input", "parcels-forwarded-whole"),
        ("parcel4-input", "to-split"),
        ("parcel4-split", "parcels-split"),
        ("parcel6-split", "parcels-split"),
        ("parcel4-join", "parcels-joined"),
        ("parcel6-join", "parcels-joined"),
        ("parcel4-input", "to-gso-frame"),
        ("parcel6-input", "to-gso-frame"),
        ("parcel4-join", "gso-frames-joined"),
        ("parcel6-join", "gso-frames-joined"),
        ("parcel6-input", "to-tunnel"),
        ("ip6-fragment", "parcel-to-split"),
        ("ip-punt", "punted"),
        ("ip-punt", "host-unresolved"),
        ("ip-punt-inject", "injected"),
    ] {
        if not_here.contains(&(node, counter)) {
            continue;
        }
        assert!(count(&h, node, counter) > 0, "{node} {counter}: {:?}", nonzero(&h));
    }
    for node in [
        "gtpu4-encap",
        "gtpu6-encap",
        "gue4-encap",
        "gue6-encap",
        "ip4-fragment",
        "ip6-fragment",
        "ip4-icmp-error",
        "ip6-icmp-error",
        "arp-input",
        "ip-gso-segment",
        "ipsec4-output",
        "ipsec6-output",
    ] {
        assert!(node_packets(&h, node) > 0, "{node} saw no packet: {:?}", nonzero(&h));
    }
}

/// Each of narrow0's SPD policies does what it says: UDP to 198.19.0.128/25 leaves
/// core0 as ESP with SA 5's SPI toward 198.18.1.8, the discarded destinations leave
/// nothing, everything else bypasses out of narrow0 in the clear. Regression: while an
/// interface took parcels, `parcelN-join` sent UDP straight to `ipN-rewrite` past the
/// SPD, so protected and discarded datagrams left narrow0 in the clear.
#[test]
fn graph_spd_seeds_take_their_policies() {
    let mut h = Harness::new();
    for (port, f) in seed("spd-protect") {
        // The larger one is fragmented before encryption (SA 5's tunnel MTU): two ESP
        // packets.
        let out = h.frame(port, f);
        assert!(!out.is_empty());
        for (i, t) in &out {
            assert_eq!(h.worker.ports[*i].name, "core0");
            let ip = wire::ipv4::Ipv4Packet::new_checked(&t.bytes[14..]).unwrap();
            assert_eq!((ip.protocol(), ip.dst_addr()), (wire::IpProtocol::Esp, std::net::Ipv4Addr::new(198, 18, 1, 8)));
            assert_eq!(ip.payload()[..4], 4101u32.to_be_bytes(), "SA 5's SPI");
        }
    }
    for (port, f) in seed("spd-discard") {
        assert!(h.frame(port, f).is_empty(), "discarded");
    }
    assert_eq!(count(&h, "ipsec4-output", "policy-discard") + count(&h, "ipsec6-output", "policy-discard"), 2);
    // A parcel of three segments (split, each datagram discarded) and a run of three
    // datagrams in one vector (not joined past the SPD: each discarded).
    let mut held = Vec::new();
    for (port, f) in seed("spd-parcel") {
        held.push((port, f));
    }
    let parcel = held.remove(0);
    assert!(h.frames(vec![parcel]).is_empty(), "the parcel's datagrams discarded");
    assert!(h.frames(held).is_empty(), "the run discarded");
    assert_eq!(count(&h, "ipsec4-output", "policy-discard"), 1 + 3 + 3);
    for name in ["route4", "route6"] {
        for (port, f) in seed(name) {
            let out = h.frame(port, f.clone());
            assert_eq!(out.len(), 1);
            assert_eq!(h.worker.ports[out[0].0].name, "narrow0");
            // The same packet, TTL / hop limit one less (and the IPv4 checksum with it).
            assert_eq!(out[0].1.bytes[14 + 20..], f.bytes[14 + 20..], "bypassed in the clear");
        }
    }
}

/// A datagram with a wrong UDP checksum translated by the load balancer to our own
/// address leaves with a checksum wrong by as much (as a NAT must); the checker tells it
/// from one the gateway built wrong.
#[test]
fn graph_harness_accepts_a_translated_wrong_checksum() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/graph/seed-lb6-udp");
    let (port, mut f) = control::fuzz::graph::decode(&std::fs::read(p).unwrap()).remove(0);
    let last = f.bytes.len() - 1;
    f.bytes[last] ^= 0x5a;
    let mut h = Harness::new();
    let out = h.frame(port, f);
    assert_eq!(out.len(), 1, "translated and sent to a backend");
    let ip = wire::ipv6::Ipv6Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
    assert_eq!(ip.src_addr(), "2001:db8:1::1".parse::<std::net::Ipv6Addr>().unwrap(), "source-translated to the node");
    let udp = wire::udp::UdpPacket::new_checked(ip.payload()).unwrap();
    assert!(!udp.verify_checksum_v6(&ip.src_addr(), &ip.dst_addr()), "still wrong");
    // Built by the gateway (nothing like it came in), the same bytes are refused.
    let h = Harness::new();
    assert!(h.check_sent(0, &out[0].1).unwrap_err().contains("bad UDP checksum"));
}

/// The checker's SCTP arm: a packet the gateway sent from its own address carries the
/// CRC32c the gateway computed, and one whose CRC32c is wrong is refused; a packet
/// forwarded as it came but for its CRC32c field (a spoofed source of ours, a checksum
/// its sender left pending completed as a device completes one) is not the gateway's.
#[test]
fn graph_harness_checks_the_sctp_crc32c_from_our_address() {
    let (port, f) = seed("lb4-sctp").remove(0);
    let init = f.bytes[14 + 20..].to_vec();
    let mut h = Harness::new();
    let out = h.frame(port, f);
    assert_eq!(out.len(), 1, "the INIT, translated to a backend from the node's address");
    let l4 = 14 + 20;
    let sent = &out[0].1;
    assert_eq!(&sent.bytes[26..30], &[198, 18, 1, 1]);
    assert!(h.check_sent(0, sent).is_ok());
    let mut bad = sent.clone();
    bad.bytes[l4 + 8] ^= 1;
    assert!(h.check_sent(0, &bad).unwrap_err().contains("bad SCTP CRC32c"));
    // The INIT as the client sent it (ports and chunks), its CRC32c field other.
    let mut forwarded = sent.clone();
    forwarded.bytes.truncate(l4);
    forwarded.bytes.extend_from_slice(&init);
    forwarded.bytes[l4 + 8..l4 + 10].copy_from_slice(&[0x12, 0x34]);
    assert!(h.check_sent(0, &forwarded).is_ok());
}

/// The packets node `node` took, all workers summed.
fn node_packets(h: &Harness, node: &str) -> u64 {
    h.workers().flat_map(|w| w.snapshot().nodes).filter(|x| x.name == node).map(|x| x.runtime.packets).sum()
}

fn nonzero(h: &Harness) -> Vec<String> {
    h.workers()
        .flat_map(|w| w.graph.counter_snapshots().into_iter().map(move |c| (w.id, c)))
        .filter(|(_, c)| c.count > 0)
        .map(|(k, c)| format!("{k}: {} {} {}", c.node, c.counter, c.count))
        .collect()
}

/// The harness's checks bite: a frame sent with a broken header checksum or over the
/// MTU fails them.
#[test]
fn graph_harness_rejects_a_broken_ipv4_checksum() {
    let h = Harness::new();
    let mut bytes = vec![0u8; 14 + 20];
    bytes[..6].copy_from_slice(&[2, 0, 0, 0, 1, 2]);
    bytes[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    bytes[12..14].copy_from_slice(&[0x08, 0x00]);
    bytes[14] = 0x45;
    bytes[17] = 20;
    bytes[22] = 64;
    bytes[26..30].copy_from_slice(&[198, 18, 0, 1]);
    bytes[30..34].copy_from_slice(&[198, 18, 0, 2]);
    let frame = |bytes: &[u8]| io::mem::TxFrame { bytes: bytes.to_vec(), gso: engine::GsoKind::None, gso_size: 0 };
    assert!(h.check_sent(0, &frame(&bytes)).unwrap_err().contains("IPv4 header checksum"), "checksum 0 is wrong");
    wire::ipv4::Ipv4Packet::new_unchecked(&mut bytes[14..]).fill_checksum();
    assert_eq!(h.check_sent(0, &frame(&bytes)), Ok(()));
    // Longer than access0's 1500-byte MTU.
    bytes.resize(14 + 1501, 0);
    bytes[16..18].copy_from_slice(&1501u16.to_be_bytes());
    wire::ipv4::Ipv4Packet::new_unchecked(&mut bytes[14..]).fill_checksum();
    assert!(h.check_sent(0, &frame(&bytes)).unwrap_err().contains("over an MTU of 1500"));
}

#[test]
fn config_corpus_replays_cleanly() {
    let inputs = corpus("config");
    assert!(inputs.len() >= 5);
    for (path, data) in &inputs {
        eprintln!("{}", path.display());
        control::fuzz::config::run(data);
    }
}

/// Found by reading the loader for the config target: `buffers` had no bound, and a
/// pool is allocated whole at start-up, so a stray digit took all the memory there was.
#[test]
fn a_pool_beyond_the_limit_is_a_config_error() {
    use control::config::Config;
    for (text, field) in [
        ("[dataplane]\nbuffers = 1000000000000\n", "dataplane.buffers"),
        ("[dataplane]\nbuffers = 0\n", "dataplane.buffers"),
        ("[dataplane]\nlarge_buffers = 5000\n", "dataplane.large_buffers"),
        ("[dataplane]\nmedium_buffers = 70000\n", "dataplane.medium_buffers"),
        ("[dataplane]\nneighbour_hold = 257\n", "dataplane.neighbour_hold"),
    ] {
        let cfg = Config::parse(text, "gw.toml", Path::new(".")).unwrap();
        let errors = control::dataplane::assemble(&cfg).err().expect("refused");
        // Reported with the others of the file (it has no interface either).
        let e = errors.all().find(|e| e.field == field).unwrap_or_else(|| panic!("{field} not reported: {errors}"));
        assert_eq!(e.file.as_str(), "gw.toml", "{e}");
        assert!(e.message.starts_with("expected") || e.message.contains(": expected"), "{e}");
    }
}

#[test]
fn api_corpus_replays_cleanly() {
    let inputs = corpus("api");
    assert!(inputs.len() >= 3);
    for (path, data) in &inputs {
        eprintln!("{}", path.display());
        control::fuzz::api::run(data);
    }
}

/// Every command of the CLI seed parses (the seed covers the language, so the fuzzer
/// starts from every request kind).
#[test]
fn api_cli_seed_parses_line_by_line() {
    let (_, data) = corpus("api").into_iter().find(|(p, _)| p.ends_with("seed-cli")).unwrap();
    for line in std::str::from_utf8(&data).unwrap().lines() {
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        control::cli::parse(&words).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
}

/// The SCTP seeds take the SCTP paths (`fuzz/make_graph_corpus.py`, scapy-built): an
/// association to the NAT service over IPv4 through its life, each packet to or from the
/// backend Maglev chose (the other backend's answers are no reply of ours: ICMP port
/// unreachable), every SCTP packet sent with its CRC32c right; the refusals by name (a
/// wrong CRC32c, a chunk length below 4, one past the packet: `sctp-bad-chunk`, as
/// documented, where it was `truncated`); an INIT whose CRC32c its sender left to the
/// device made good; direct server return in GUE over IPv6, the inner CRC32c right.
#[test]
fn graph_sctp_seeds_take_their_paths() {
    use std::net::IpAddr;
    use wire::sctp::SctpPacket;
    let mut h = Harness::new();
    // (seed, frame) → what left: (source, destination, SCTP bytes) of each SCTP packet,
    // and GUE's inner packets.
    let mut sctp = Vec::new();
    let mut icmp = 0;
    for name in ["lb4-sctp", "lb4-sctp-refused", "lb6-sctp-dsr"] {
        for (port, f) in seed(name) {
            for (_, t) in h.frame(port, f) {
                let l3 = &t.bytes[14..];
                let (src, dst, proto, l4): (IpAddr, IpAddr, _, &[u8]) = match l3[0] >> 4 {
                    4 => {
                        let ip = wire::ipv4::Ipv4Packet::new_checked(l3).unwrap();
                        (ip.src_addr().into(), ip.dst_addr().into(), ip.protocol(), &l3[20..])
                    }
                    _ => {
                        let ip = wire::ipv6::Ipv6Packet::new_checked(l3).unwrap();
                        (ip.src_addr().into(), ip.dst_addr().into(), ip.next_header(), &l3[40..])
                    }
                };
                match proto {
                    wire::IpProtocol::Sctp => sctp.push((name, src, dst, l4.to_vec())),
                    // GUE to the backend: UDP, the 4-byte GUE header, the client's packet.
                    wire::IpProtocol::Udp => sctp.push((name, src, dst, l4[8 + 4 + 40..].to_vec())),
                    wire::IpProtocol::Icmp => icmp += 1,
                    p => panic!("{name}: {p:?} from {src}"),
                }
            }
        }
    }
    for (name, src, dst, s) in &sctp {
        assert!(SctpPacket::new_checked(&s[..]).unwrap().verify_checksum(), "{name}: {src} → {dst}: the CRC32c");
    }
    let of = |n: &str| sctp.iter().filter(|x| x.0 == n).map(|x| (x.1.to_string(), x.2.to_string())).collect::<Vec<_>>();
    // lb4-sctp: the client's INIT, COOKIE ECHO, HEARTBEAT and SHUTDOWN ACK to one backend
    // from the node; that backend's four answers to the client from the service.
    let a = of("lb4-sctp");
    assert_eq!(a.len(), 8, "{a:?}");
    let backend = a[0].1.clone();
    assert!(["198.19.1.40", "198.19.1.41"].contains(&backend.as_str()));
    let (to_backend, to_client): (Vec<_>, Vec<_>) = a.iter().partition(|x| x.1 == backend);
    assert!(to_backend.iter().all(|x| x.0 == "198.18.1.1") && to_backend.len() == 4, "{a:?}");
    assert!(to_client.iter().all(|x| x.0 == "198.18.128.13" && x.1 == "198.18.0.2") && to_client.len() == 4, "{a:?}");
    assert_eq!(icmp, 4, "the other backend's four answers: port unreachable");
    // lb4-sctp-refused: the ABORT (a session of its own, closed) and the INIT whose
    // CRC32c was left to the device go through; the rest are dropped by name.
    assert_eq!(of("lb4-sctp-refused").len(), 2);
    assert_eq!(count(&h, "lb4-nat", "sctp-bad-checksum"), 1);
    assert_eq!(count(&h, "lb4-nat", "sctp-bad-chunk"), 2);
    assert_eq!(count(&h, "lb4-nat", "truncated"), 0);
    assert_eq!(count(&h, "lb4-nat", "new-session"), 3);
    assert_eq!(count(&h, "lb4-nat", "reply-translated"), 4);
    // lb6-sctp-dsr: INIT, COOKIE ECHO, HEARTBEAT, DATA from the client's second address
    // (whose own 5-tuple Maglev sends to the other backend), the DATA whose CRC32c was
    // left, the ABORT, each in GUE to one backend; a wrong CRC32c and a bad chunk dropped.
    let d = of("lb6-sctp-dsr");
    assert_eq!(d.len(), 6, "{d:?}");
    assert!(d.iter().all(|x| x.0 == "2001:db8:1::1" && x.1 == d[0].1), "{d:?}");
    assert_eq!(count(&h, "lb6-nat", "encapsulated"), 6);
    assert_eq!(count(&h, "lb6-nat", "sctp-path-changed"), 2, "to the second address and back");
    assert_eq!(count(&h, "lb6-nat", "new-session"), 1);
    assert_eq!(count(&h, "lb6-nat", "sctp-bad-checksum"), 1);
    assert_eq!(count(&h, "lb6-nat", "sctp-bad-chunk"), 1);
}

/// Every frame that leaves the graph for the seed `name`'s frames, in order.
fn leaving(h: &mut Harness, name: &str) -> Vec<Vec<u8>> {
    seed(name).into_iter().flat_map(|(port, f)| h.frame(port, f)).map(|(_, t)| t.bytes).collect()
}

/// The IPv4 SCTP packets (from the common header on) that leave the graph for the seed
/// `name`'s frames, each frame's length its IP length.
fn sctp_leaving(h: &mut Harness, name: &str) -> Vec<Vec<u8>> {
    let mut sctp = Vec::new();
    for (port, f) in seed(name) {
        for (_, t) in h.frame(port, f) {
            let ip = wire::ipv4::Ipv4Packet::new_checked(&t.bytes[14..]).unwrap();
            assert_eq!(t.bytes.len(), 14 + usize::from(ip.total_len()), "the IP length is the packet's");
            if ip.protocol() == wire::IpProtocol::Sctp {
                sctp.push(ip.payload().to_vec());
            }
        }
    }
    sctp
}

/// Each packet of `sctp` starts with the chunk type at its place in `types`, its CRC32c
/// right, with no multi-homing left in it (no address, no ASCONF offered).
fn all_translated_whole(sctp: &[Vec<u8>], types: &[wire::sctp::ChunkType]) {
    use wire::sctp::{count_multihoming, Multihoming, SctpPacket};
    for (s, &t) in sctp.iter().zip(types) {
        let p = SctpPacket::new_checked(&s[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.chunks().next().unwrap().unwrap().chunk_type, t);
        assert_eq!(count_multihoming(p.payload()), Ok(Multihoming::default()));
    }
}

/// The multi-homed SCTP seed (`fuzz/make_graph_corpus.py`): the client's INIT reaches
/// one backend and that backend's INIT ACK the client, each without the addresses it
/// listed, the other parameters kept, the CRC32c right; the other backend's INIT ACK is
/// no reply of ours (ICMP port unreachable); an INIT whose parameter runs past its chunk
/// is dropped by name and makes no session.
#[test]
fn graph_sctp_multihomed_seed_loses_its_addresses() {
    use wire::sctp::ChunkType;
    let mut h = Harness::new();
    let sctp = sctp_leaving(&mut h, "lb4-sctp-multihomed");
    assert_eq!(sctp.len(), 2, "the INIT to a backend, its INIT ACK to the client");
    all_translated_whole(&sctp, &[ChunkType::Init, ChunkType::InitAck]);
    // What is left of the INIT: Supported Address Types, then ECN; of the INIT ACK, the cookie.
    assert_eq!(sctp[0][12 + 20..], [0, 12, 0, 8, 0, 5, 0, 6, 0x80, 0, 0, 4]);
    assert_eq!(&sctp[1][12 + 20..12 + 24], &[0, 7, 0, 25]);
    assert_eq!(&sctp[1][12 + 24..12 + 45], b"cookie-of-the-backend");
    assert_eq!(count(&h, "lb4-nat", "sctp-addresses-removed"), 2);
    assert_eq!(count(&h, "lb4-nat", "sctp-bad-parameter"), 1);
    assert_eq!(count(&h, "lb4-nat", "new-session"), 1);
}

/// The ASCONF seed (`fuzz/make_graph_corpus.py`): the client's INIT reaches one backend
/// offering FORWARD-TSN only (ASCONF and ASCONF-ACK gone from its Supported Extensions,
/// the AUTH Chunk List naming them kept), that backend's INIT ACK the client without
/// its Supported Extensions (it offered ASCONF alone); the client's ASCONF and that
/// backend's ASCONF-ACK are dropped by name (the other backend's is no reply of ours:
/// ICMP port unreachable); the client's DATA after them reaches the backend.
#[test]
fn graph_sctp_asconf_seed_is_not_reconfigured() {
    use wire::sctp::ChunkType;
    let mut h = Harness::new();
    let sctp = sctp_leaving(&mut h, "lb4-sctp-asconf");
    assert_eq!(sctp.len(), 3, "the INIT to a backend, its INIT ACK to the client, the DATA to the backend");
    all_translated_whole(&sctp, &[ChunkType::Init, ChunkType::InitAck, ChunkType::Data]);
    // The INIT: Supported Extensions [FORWARD-TSN] (length 5, padded), the Chunk List
    // [ASCONF, ASCONF-ACK] as it was, ECN. The INIT ACK: the cookie only.
    assert_eq!(sctp[0][12 + 20..], [0x80, 0x08, 0, 5, 0xc0, 0, 0, 0, 0x80, 0x03, 0, 6, 0xc1, 0x80, 0, 0, 0x80, 0, 0, 4]);
    assert_eq!((u16::from_be_bytes([sctp[1][14], sctp[1][15]]), sctp[1].len()), (20 + 25, 12 + 20 + 28), "chunk length, packet padded");
    assert_eq!(&sctp[1][12 + 20..12 + 24], &[0, 7, 0, 25]);
    assert_eq!(count(&h, "lb4-nat", "sctp-asconf-unlisted"), 2);
    assert_eq!(count(&h, "lb4-nat", "sctp-asconf-dropped"), 2);
    assert_eq!(count(&h, "lb4-nat", "new-session"), 1);
}
