//! A tunnel's or SA's outer DSCP changed in place — with `set gtpu tunnel … dscp`, `set
//! udp tunnel … dscp`, `ipsec sa set … dscp` (the typed API's requests), or by a reload
//! that changes nothing else — keeps the tunnel or SA: its id, routes and counters, a
//! GRE tunnel's sequence number, an SA's sequence numbers; the next packet carries the
//! new DSCP and the inner packet's ECN field (RFC 6040; RFC 4301 §5.1.2.1 for ESP). A
//! whole worker with its control plane (the graph fuzz target's harness, which checks
//! every frame it sends).

use common::{ACCESS0, CORE0};
use control::api::{Reply, Request};
use control::fuzz::graph::Harness;
use io::mem::RxFrame;
use ip::outer::tos::{Dscp, ECT0};

use crate::common;

const CFG: &str = concat!(
    access0_core0_config!(),
    r#"
[[neighbour]]
interface = "core0"
ip = "198.18.1.2"
mac = "02:00:00:00:02:02"
"#,
    gre_and_gtpu_tunnels_config!(),
    r#"
[[ipsec_sa]]
index = 0
spi = 0x1000
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "0102030405060708090a0b0c0d0e0f1011121314"
local = "198.18.1.1"
remote = "198.18.1.2"
routes = ["198.19.3.0/24"]
"#
);

/// The inner packet's traffic class: DSCP 46 (EF), ECT(0).
const INNER_TC: u8 = 46 << 2 | ECT0;

/// A UDP datagram from behind access0 to 198.19.`net`.1, with [`INNER_TC`].
fn inner_to(net: u8) -> RxFrame {
    let mut p = vec![0u8; 28 + 4];
    p[0] = 0x45;
    p[1] = INNER_TC;
    p[2..4].copy_from_slice(&32u16.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[198, 18, 0, 2]);
    p[16..20].copy_from_slice(&[198, 19, net, 1]);
    let sum = wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20..22].copy_from_slice(&4000u16.to_be_bytes());
    p[22..24].copy_from_slice(&9u16.to_be_bytes());
    p[24..26].copy_from_slice(&12u16.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 1, 2, 0x08, 0x00];
    f.extend_from_slice(&p);
    RxFrame { bytes: f, vnet: None }
}

/// The outer IPv4 packet the datagram to 198.19.`net`.1 leaves core0 as.
fn send(h: &mut Harness, net: u8) -> Vec<u8> {
    let out = h.frame(ACCESS0, inner_to(net));
    let sent: Vec<_> = out.into_iter().filter(|(port, _)| *port == CORE0).collect();
    assert_eq!(sent.len(), 1, "one packet out of core0 for 198.19.{net}.1");
    let ip = sent[0].1.bytes[14..].to_vec();
    assert!(wire::ipv4::Ipv4Packet::new_checked(&ip[..]).unwrap().verify_checksum());
    ip
}

/// What the outer packets tell of the three: each one's traffic class, the GRE
/// sequence number (after the GRE key) and the ESP sequence number.
struct Outer {
    tc: [u8; 3],
    gre_seq: u32,
    esp_seq: u32,
}

fn send_all(h: &mut Harness) -> Outer {
    let (gre, gtpu, esp) = (send(h, 1), send(h, 2), send(h, 3));
    assert_eq!((gre[9], gtpu[9], esp[9]), (17, 17, 50), "GRE in UDP, GTP-U, ESP");
    let word = |b: &[u8], at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
    // GRE after IPv4 and UDP: flags (K and S), protocol, key, sequence number.
    assert_eq!(word(&gre, 28) >> 16, 0x3000, "GRE with a key and a sequence number");
    Outer { tc: [gre[1], gtpu[1], esp[1]], gre_seq: word(&gre, 36), esp_seq: word(&esp, 24) }
}

fn ok(h: &mut Harness, r: Request) -> Reply {
    let reply = h.control.handle(&r);
    assert!(reply.ok, "{r:?}: {reply:?}");
    reply
}

/// Each one's packets as counted: the UDP and GTP-U tunnels' `tx_packets`, the SA's.
fn counts(h: &mut Harness) -> [u64; 3] {
    let udp = ok(h, Request::FindUdpTunnels { remote: None, local: None, id: Some(0) }).data[0]["counters"]["tx_packets"].as_u64();
    let gtpu = ok(h, Request::FindGtpuTunnels { teid: Some(100), remote: None, ue: None }).data[0]["counters"]["tx_packets"].as_u64();
    let sa = ok(h, Request::ShowIpsecSa { index: Some(0) }).data["sas"][0]["packets"].as_u64();
    [udp.unwrap(), gtpu.unwrap(), sa.unwrap()]
}

/// The three changed to `d` with the typed API's `set` requests.
fn set_all(h: &mut Harness, d: Dscp) {
    let r = ok(h, Request::SetUdpTunnel { name: "udp_tunnel0".into(), remote: None, port: None, key: None, dscp: Some(d) });
    assert_eq!(r.data["dscp"], serde_json::to_value(d).unwrap());
    let r = ok(h, Request::SetGtpuTunnel { name: "gtpu_tunnel0".into(), remote: None, teid_out: None, qfi: None, dscp: Some(d) });
    assert_eq!(r.data["dscp"], serde_json::to_value(d).unwrap());
    let r = ok(h, Request::IpsecSaSet { index: 0, urpf: None, dscp: Some(d) });
    assert_eq!(r.text, format!("SA 0: dscp {d}"));
}

#[test]
fn set_dscp_marks_the_next_packet_and_keeps_counters_and_sequences() {
    let mut h = Harness::with_config(CFG);
    let mut last = Outer { tc: [0; 3], gre_seq: 0, esp_seq: 0 };
    for _ in 0..3 {
        last = send_all(&mut h);
        assert_eq!(last.tc, [INNER_TC; 3], "inherit: the inner byte whole");
    }
    assert_eq!(counts(&mut h), [3, 3, 3]);

    set_all(&mut h, Dscp::Fixed(10));
    let next = send_all(&mut h);
    assert_eq!(next.tc, [10 << 2 | ECT0; 3], "the new DSCP, the inner ECN field");
    assert_eq!((next.gre_seq, next.esp_seq), (last.gre_seq + 1, last.esp_seq + 1), "the sequences go on");
    assert_eq!(counts(&mut h), [4, 4, 4], "the counters go on");
    // Shown as set (text and JSON), and back to the inner packet's.
    assert!(ok(&mut h, Request::ShowIpsecSa { index: Some(0) }).text.contains(" dscp 10"));
    assert_eq!(ok(&mut h, Request::ShowIpsecSa { index: Some(0) }).data["sas"][0]["dscp"], 10);
    set_all(&mut h, Dscp::Inherit);
    let back = send_all(&mut h);
    assert_eq!(back.tc, [INNER_TC; 3]);
    assert_eq!((back.gre_seq, back.esp_seq), (next.gre_seq + 1, next.esp_seq + 1));
    assert_eq!(counts(&mut h), [5, 5, 5]);
    assert_eq!(ok(&mut h, Request::ShowIpsecSa { index: Some(0) }).data["sas"][0]["dscp"], "inherit");

    // The words the CLI sends, to the same requests.
    for line in ["set udp tunnel udp_tunnel0 dscp 63", "set gtpu tunnel gtpu_tunnel0 dscp 63", "ipsec sa set 0 dscp 63"] {
        let words: Vec<String> = line.split(' ').map(String::from).collect();
        let r = control::cli::parse(&words).unwrap();
        ok(&mut h, r);
    }
    assert_eq!(send_all(&mut h).tc, [63 << 2 | ECT0; 3]);
}

/// A DSCP refused: on an inbound or transport-mode SA (no outer header of its own),
/// on no SA, and an empty set: each names why, and nothing changes.
#[test]
fn a_refused_dscp_changes_nothing() {
    let extra = r#"
[[ipsec_sa]]
index = 1
spi = 0x2000
direction = "inbound"
algorithm = "aes-gcm-128"
enc_key = "0102030405060708090a0b0c0d0e0f1011121314"
local = "198.18.1.1"
remote = "198.18.1.2"
urpf = "loose"

[[ipsec_sa]]
index = 2
spi = 0x3000
direction = "outbound"
mode = "transport"
algorithm = "aes-gcm-128"
enc_key = "0102030405060708090a0b0c0d0e0f1011121314"
local = "198.18.1.1"
remote = "198.18.1.2"
"#;
    let mut h = Harness::with_config(&format!("{CFG}{extra}"));
    let before = ok(&mut h, Request::ShowIpsecSa { index: None }).data;
    for (index, urpf, dscp, says) in [
        (1, None, Some(Dscp::Fixed(46)), "dscp: 46: expected \"inherit\" except on an outbound tunnel-mode SA (an inbound SA"),
        (2, None, Some(Dscp::Fixed(46)), "dscp: 46: expected \"inherit\" except on an outbound tunnel-mode SA (a transport-mode SA"),
        // Both given, the uRPF good and the DSCP not: neither is set.
        (1, Some(ip::urpf::Urpf::Strict), Some(Dscp::Fixed(46)), "dscp: 46"),
        (9, None, Some(Dscp::Fixed(46)), "index 9: no such SA"),
        (0, None, None, "needs urpf or dscp"),
    ] {
        let r = h.control.handle(&Request::IpsecSaSet { index, urpf, dscp });
        assert!(!r.ok && r.error.as_deref().unwrap().contains(says), "{index} {urpf:?} {dscp:?}: {r:?}");
    }
    assert_eq!(ok(&mut h, Request::ShowIpsecSa { index: None }).data, before, "nothing changed");
}

/// A reload that changes only the DSCP (and a GRE key beside it) changes each in place:
/// the changes say so, and the counters and sequences go on under the new marking.
#[test]
fn a_reload_changing_only_dscp_keeps_tunnels_and_sa() {
    let mut h = Harness::with_config(CFG);
    let last = send_all(&mut h);
    assert_eq!(counts(&mut h), [1, 1, 1]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    let changed = CFG
        .replace("key = 7\n", "key = 9\ndscp = 10\n")
        .replace("teid_out = 200\n", "teid_out = 200\ndscp = 46\n")
        .replace("routes = [\"198.19.3.0/24\"]\n", "routes = [\"198.19.3.0/24\"]\ndscp = 0\n");
    std::fs::write(&path, &changed).unwrap();
    let r = ok(&mut h, Request::Reload { file: Some(path.display().to_string()) });
    assert_eq!(
        r.data["changes"],
        serde_json::json!([
            { "action": "replaced", "object": "ipsec_sa", "name": "SA 0 (dscp in place)" },
            { "action": "replaced", "object": "gtpu_tunnel", "name": "gtpu_tunnel0 (teid-in 100, dscp in place)" },
            { "action": "replaced", "object": "udp_tunnel", "name": "udp_tunnel0 (remote 198.18.1.2, key and dscp in place)" },
        ])
    );
    let next = send_all(&mut h);
    assert_eq!(next.tc, [10 << 2 | ECT0, 46 << 2 | ECT0, ECT0]);
    assert_eq!((next.gre_seq, next.esp_seq), (last.gre_seq + 1, last.esp_seq + 1), "the sequences go on");
    assert_eq!(counts(&mut h), [2, 2, 2], "the counters go on");
    // The same file again: nothing to do.
    let r = ok(&mut h, Request::Reload { file: Some(path.display().to_string()) });
    assert_eq!(r.data["changes"], serde_json::json!([]));
    // Back to the first file: back to the inner packet's, still in place.
    std::fs::write(&path, CFG).unwrap();
    let r = ok(&mut h, Request::Reload { file: Some(path.display().to_string()) });
    assert_eq!(r.data["changes"].as_array().map(Vec::len), Some(3), "{}", r.text);
    assert!(r.text.contains("SA 0 (dscp in place)") && r.text.contains("key and dscp in place"), "{}", r.text);
    assert_eq!(send_all(&mut h).tc, [INNER_TC; 3]);
    assert_eq!(counts(&mut h), [3, 3, 3]);
}
