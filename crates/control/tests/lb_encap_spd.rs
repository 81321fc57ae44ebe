//! A load-balanced service that carries its clients' packets to the backends in GRE
//! (direct server return) sends outer packets of the gateway's own: out of a link with
//! an IPsec SPD bound they meet its outbound policies, as every tunnel's outer packets
//! do, rather than leaving straight by the backend's adjacency past a DISCARD or
//! PROTECT. A whole worker with its control plane (the graph fuzz target's harness).

use common::{count_all as count, ACCESS0, CORE0};
use control::fuzz::graph::Harness;
use io::mem::RxFrame;

use crate::common;

fn config(action: &str) -> String {
    format!(
        concat!(
            access0_core0_config!(),
            r#"
[[neighbour]]
interface = "access0"
ip = "198.18.0.2"
mac = "02:00:00:00:01:02"

[[neighbour]]
interface = "core0"
ip = "198.18.1.50"
mac = "02:00:00:00:02:50"

[lb]
snat4 = "198.18.1.1"

[[lb_service]]
name = "dsr"
type = "cluster_ip"
vip = "198.18.128.10"
port = 9
protocol = "udp"
forwarding = "gre"
backends = [{{ addr = "198.18.1.50", port = 9 }}]

[[ipsec_spd]]
id = 1
interfaces = ["core0"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 10
action = "{action}"
remote = "198.18.1.50/32"
protocol = "47"

[[ipsec_policy]]
spd = 1
direction = "outbound"
action = "bypass"
"#
        ),
        action = action
    )
}

/// A client's datagram to the service address.
fn to_service() -> RxFrame {
    let mut p = vec![0u8; 28 + 4];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&32u16.to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[198, 18, 0, 2]);
    p[16..20].copy_from_slice(&[198, 18, 128, 10]);
    let sum = wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20..22].copy_from_slice(&5000u16.to_be_bytes());
    p[22..24].copy_from_slice(&9u16.to_be_bytes());
    p[24..26].copy_from_slice(&12u16.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 1, 2, 8, 0];
    f.extend_from_slice(&p);
    RxFrame { bytes: f, vnet: None }
}

#[test]
fn a_discard_policy_stops_the_encapsulated_packets() {
    let mut h = Harness::with_config(&config("discard"));
    let out = h.frame(ACCESS0, to_service());
    assert!(out.iter().all(|(i, _)| *i != CORE0), "GRE left core0 past its DISCARD policy: {out:?}");
    assert_eq!(count(&h, "lb4-nat", "encapsulated"), 1);
    assert_eq!(count(&h, "ipsec4-output", "policy-discard"), 1);
}

#[test]
fn a_bypass_policy_lets_them_leave_as_the_service_sent_them() {
    let mut h = Harness::with_config(&config("bypass"));
    let out = h.frame(ACCESS0, to_service());
    let gre: Vec<_> = out.iter().filter(|(i, t)| *i == CORE0 && t.bytes[12..14] == [8, 0] && t.bytes[23] == 47).collect();
    assert_eq!(gre.len(), 1, "{out:?}");
    let b = &gre[0].1.bytes;
    // To the backend's MAC, from the node's address, the TTL the service gave it (the
    // lookup's rewrite takes back the one added for it).
    assert_eq!((&b[0..6], &b[26..30], &b[30..34]), (&[2, 0, 0, 0, 2, 0x50][..], &[198, 18, 1, 1][..], &[198, 18, 1, 50][..]));
    assert_eq!(b[22], 64, "outer TTL");
    assert_eq!(wire::checksum::checksum(&b[14..34]), 0, "outer header checksum");
}
