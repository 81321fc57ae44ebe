//! An SA moved in place through the typed API (`ipsec_sa_update`, as a NAT rebinding or
//! MOBIKE asks of an IKE daemon's kernel interface) between vectors, while a generator
//! sends packets routed into it: every packet is encrypted and sent, none dropped; the
//! SA keeps its index, SPI, route and sequence counter (the counts run on across the
//! moves), its outer header names the new peer and UDP ports, and the outer packets
//! leave by the new peer's adjacency. Bad changes are refused by field and change
//! nothing.

use common::api_ok;
use control::api::Request;
use control::config::Config;
use control::dataplane::{assemble, Control};
use control::ipsec::SaEndpoints;
use engine::worker::Context;
use std::path::Path;

use crate::common;

const CFG: &str = concat!(
    pg0_null0_config!(null0_also: "198.18.1.5/24", "2001:db8:1::1/64"),
    r#"
[[neighbour]]
interface = "null0"
ip = "198.18.1.3"
mac = "02:00:00:00:01:03"

[[ipsec_sa]]
index = 0
spi = 0x1000
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "0102030405060708090a0b0c0d0e0f1011121314"
local = "198.18.1.1"
remote = "198.18.1.2"
udp_encap = true
routes = ["198.19.1.0/24"]

[[ipsec_sa]]
index = 1
spi = 0x2000
direction = "inbound"
algorithm = "aes-gcm-128"
enc_key = "0102030405060708090a0b0c0d0e0f1011121314"
local = "198.18.1.1"
remote = "198.18.1.2"
udp_encap = true

[[stream]]
name = "into-esp"
interface = "pg0"
size = 100
count = 20000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.1.1"
"#
);

fn update(index: u32, remote: &str, dst_port: u16) -> Request {
    Request::IpsecSaUpdate(SaEndpoints { index, remote: Some(remote.into()), udp_dst_port: Some(dst_port), ..Default::default() })
}

fn row(c: &mut Control, index: u32) -> serde_json::Value {
    api_ok(c, Request::ShowIpsecSa { index: Some(index) }).data["sas"][0].clone()
}

#[test]
fn an_sa_moved_in_place_under_traffic_keeps_its_counter_and_loses_no_packet() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut control, mut worker) = assemble(&cfg).unwrap().into_single();
    let counters = std::sync::Arc::clone(&control.ipsec.get(0).unwrap().outbound);
    let (mut polls, mut moves) = (0u32, 0u32);
    while !worker.inputs_done() {
        worker.poll_once();
        polls += 1;
        if polls % 2 == 0 {
            moves += 1;
            let (remote, port) = if moves % 2 == 1 { ("198.18.1.3", 61000 + moves as u16) } else { ("198.18.1.2", 4500) };
            let r = api_ok(&mut control, update(0, remote, port));
            assert_eq!(r.text, format!("SA 0: 198.18.1.1 -> {remote} UDP 4500>{port}"));
            let sa = control.ipsec.get(0).unwrap();
            assert!(std::sync::Arc::ptr_eq(&sa.outbound, &counters), "the same counters");
            // The outer header template: IPv4 to the new remote, UDP inside.
            assert_eq!(sa.outer_header[9], 17);
            assert_eq!(&sa.outer_header[16..20], &remote.parse::<std::net::Ipv4Addr>().unwrap().octets());
        }
    }
    worker.poll_once();
    worker.cx.refresh();
    assert!(moves > 20, "only {moves} moves");
    let s = worker.snapshot();
    let sink = s.ports.iter().find(|p| p.name == "null0").unwrap();
    assert_eq!(sink.counters.tx_packets, 20_000, "every packet encrypted and sent");
    let count = |node: &str, c: &str| s.counters.iter().find(|x| x.node == node && x.counter == c).map_or(0, |x| x.count);
    assert_eq!(count("esp4-encrypt", "encrypted"), 20_000);
    common::assert_no_drops(&s);
    // The counter ran on through every move: one sequence number per packet.
    let r = row(&mut control, 0);
    assert_eq!((r["packets"].as_u64(), r["spi"].as_u64(), r["name"].as_str()), (Some(20_000), Some(0x1000), Some("ipsec_tunnel0")));
    let expect = if moves % 2 == 1 { ("198.18.1.3", 61000 + moves as u64) } else { ("198.18.1.2", 4500) };
    assert_eq!((r["remote"].as_str(), r["udp_encap"]["dst"].as_u64()), (Some(expect.0), Some(expect.1)));
    let fib = api_ok(&mut control, Request::ShowIpFibEntry { query: "198.19.1.1".into() });
    assert!(fib.text.contains("ipsec_tunnel0"), "the route stays: {}", fib.text);
}

#[test]
fn bad_moves_name_the_field_and_change_nothing() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut c, _worker) = assemble(&cfg).unwrap().into_single();
    let before = (row(&mut c, 0), row(&mut c, 1));
    let e = |f: fn(&mut SaEndpoints)| {
        let mut x = SaEndpoints { index: 0, ..Default::default() };
        f(&mut x);
        Request::IpsecSaUpdate(x)
    };
    for (bad, says) in [
        (e(|x| x.local = Some("198.18.1.9".into())), "local: 198.18.1.9 is not an address of this gateway"),
        (e(|x| x.local = Some("2001:db8:1::1".into())), "local: 2001:db8:1::1: expected the SA's address family"),
        (e(|x| x.remote = Some("2001:db8:1::2".into())), "remote: 2001:db8:1::2: expected the SA's address family"),
        (e(|x| x.remote = Some("somewhere".into())), "remote: \"somewhere\": expected an IPv4 or IPv6 address"),
        (e(|x| x.udp_dst_port = Some(0)), "udp_dst_port: 0: expected 1 to 65535"),
        (e(|x| (x.udp_encap, x.udp_src_port) = (Some(false), Some(4500))), "udp_encap: UDP ports are given"),
        (e(|x| x.index = 9), "index 9: no such SA"),
    ] {
        let r = c.handle(&bad);
        assert!(!r.ok && r.error.as_deref().unwrap().contains(says), "{bad:?}: {r:?}");
    }
    assert_eq!((row(&mut c, 0), row(&mut c, 1)), before, "nothing changed");
    // The local address moves to another of ours; UDP off and on again: the ports are
    // 4500 again unless given.
    let r = api_ok(&mut c, e(|x| (x.local, x.udp_encap) = (Some("198.18.1.5".into()), Some(false))));
    assert_eq!(r.text, "SA 0: 198.18.1.5 -> 198.18.1.2 no UDP");
    assert_eq!(row(&mut c, 0)["udp_encap"], serde_json::Value::Null);
    let r = api_ok(&mut c, e(|x| x.udp_src_port = Some(4501)));
    assert_eq!(r.text, "SA 0: 198.18.1.5 -> 198.18.1.2 UDP 4501>4500");
    // An inbound SA moves too (its peer seen from a new address).
    let r = api_ok(&mut c, update(1, "198.18.1.3", 4500));
    assert_eq!(r.text, "SA 1: 198.18.1.1 -> 198.18.1.3 UDP 4500>4500");
    assert_eq!(row(&mut c, 1)["remote"], "198.18.1.3");
}
