//! A reload that replaces a tunnel or an SA keeps the routes that led into it (routes
//! added with `ctl`, a multipath route's path), re-attached to the replacement under
//! the same name; what cannot be kept (the replacement is no tunnel) is in the reply.
//! A tunnel the file declares as it already runs (made with `ctl`) is not replaced. A
//! file named in `reload FILE` applies once: plain reloads read `--config` again.

use common::{api_ok, control_from_file, reload_file, GATEWAY_FILE};
use control::api::{Reply, Request};
use control::dataplane::Control;
use control::fib::RoutePath;

use crate::common;

/// The shared gateway with the data network routed to the peer on `null0`.
const BASE: &str = concat!(
    pg0_null0_config!(),
    r#"
[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"
"#
);

const SA: &str = r#"
[[ipsec_sa]]
index = 1
spi = 1001
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"
local = "198.18.1.1"
remote = "198.18.1.9"
"#;

const GTPU: &str = r#"
[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.9"
teid_in = 100
teid_out = 200
"#;

const UDP: &str = r#"
[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.9"
encap = "gue"
routes = ["198.19.174.0/24"]
"#;

/// Write `text` as the gateway's file and reload it: the changes as (action, object, name).
fn reload(dir: &tempfile::TempDir, c: &mut Control, text: &str) -> Vec<(String, String, String)> {
    changes(&reload_file(dir, c, text))
}

fn changes(r: &Reply) -> Vec<(String, String, String)> {
    assert!(r.ok, "{r:?}");
    let s = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    r.data["changes"].as_array().unwrap().iter().map(|ch| (s(&ch["action"]), s(&ch["object"]), s(&ch["name"]))).collect()
}

fn ch(action: &str, object: &str, name: &str) -> (String, String, String) {
    (action.into(), object.into(), name.into())
}

fn route_add(c: &mut Control, prefix: &str, interface: &str) {
    api_ok(c, Request::IpRouteAdd { prefix: prefix.into(), via: None, interface: Some(interface.into()), blackhole: false, paths: vec![] });
}

/// `show ip fib <addr>`: the prefix that carries it and where to.
fn fib(c: &mut Control, addr: &str) -> (String, String) {
    let d = &api_ok(c, Request::ShowIpFibEntry { query: addr.into() }).data;
    let to = d["next_hop"].as_str().or(d["interface"].as_str()).unwrap_or(d["kind"].as_str().unwrap());
    (d["prefix"].as_str().unwrap().to_string(), to.to_string())
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.into(), b.into())
}

#[test]
fn a_replaced_sa_keeps_the_routes_into_its_tunnel() {
    let (dir, mut c) = control_from_file(&format!("{BASE}{SA}"));
    route_add(&mut c, "198.19.173.0/24", "ipsec_tunnel1");
    // A multipath route with one path into the tunnel keeps that path too.
    api_ok(
        &mut c,
        Request::IpRouteAdd {
            prefix: "198.19.175.0/24".into(),
            via: None,
            interface: None,
            blackhole: false,
            paths: vec![
                RoutePath { via: None, interface: Some("ipsec_tunnel1".into()), weight: None },
                RoutePath { via: Some("198.18.1.2".into()), interface: None, weight: None },
            ],
        },
    );

    let got = reload(&dir, &mut c, &format!("{BASE}{}", SA.replace("spi = 1001", "spi = 1002")));
    assert_eq!(fib(&mut c, "198.19.173.5"), pair("198.19.173.0/24", "ipsec_tunnel1"));
    assert_eq!(got, [ch("replaced", "ipsec_sa", "SA 1 (2 routes kept)")]);
    let r = c.handle(&Request::ShowIpFibEntry { query: "198.19.175.0/24".into() });
    assert!(r.ok && r.text.contains("ipsec_tunnel1") && r.text.contains("198.18.1.2"), "{}", r.text);

    // SA 1 becomes inbound: no tunnel to keep the routes in. They go, and the reply says so.
    let inbound = SA.replace("spi = 1001", "spi = 1003").replace("\"outbound\"", "\"inbound\"");
    let got = reload(&dir, &mut c, &format!("{BASE}{inbound}"));
    assert_eq!(got[0], ch("replaced", "ipsec_sa", "SA 1"));
    assert!(got.contains(&ch("removed", "route", "198.19.173.0/24 into ipsec_tunnel1 (ipsec_tunnel1 is gone)")), "{got:?}");
    assert!(got.iter().any(|(a, o, n)| a == "replaced" && o == "route" && n.starts_with("198.19.175.0/24 ")), "{got:?}");
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(fib(&mut c, "198.19.173.5"), pair("198.19.0.0/16", "198.18.1.2"));
}

#[test]
fn a_replaced_gtpu_tunnel_keeps_the_routes_into_it() {
    let (dir, mut c) = control_from_file(&format!("{BASE}{GTPU}"));
    route_add(&mut c, "198.19.171.0/24", "gtpu_tunnel0");
    let got = reload(&dir, &mut c, &format!("{BASE}{}", GTPU.replace("teid_out = 200", "teid_out = 201")));
    assert_eq!(fib(&mut c, "198.19.171.5"), pair("198.19.171.0/24", "gtpu_tunnel0"));
    assert_eq!(got, [ch("replaced", "gtpu_tunnel", "gtpu_tunnel0 (teid-in 100, 1 route kept)")]);

    // A file without the tunnel removes it; the route into it goes too, and is listed.
    let got = reload(&dir, &mut c, BASE);
    assert_eq!(
        got,
        [
            ch("removed", "gtpu_tunnel", "gtpu_tunnel0 (teid-in 100)"),
            ch("removed", "route", "198.19.171.0/24 into gtpu_tunnel0 (gtpu_tunnel0 is gone)")
        ]
    );
}

#[test]
fn a_udp_tunnel_keeps_ctl_routes_when_replaced_and_when_its_own_routes_change() {
    let (dir, mut c) = control_from_file(&format!("{BASE}{UDP}"));
    route_add(&mut c, "198.19.172.0/24", "udp_tunnel0");
    // Nothing changed: a route into the tunnel made with ctl is no reason to replace it.
    assert_eq!(reload(&dir, &mut c, &format!("{BASE}{UDP}")), []);

    let got = reload(&dir, &mut c, &format!("{BASE}{UDP}ttl = 9\n"));
    assert_eq!(fib(&mut c, "198.19.172.5"), pair("198.19.172.0/24", "udp_tunnel0"));
    assert_eq!(got, [ch("replaced", "udp_tunnel", "udp_tunnel0 (remote 198.18.1.9, 1 route kept)")]);
    assert_eq!(fib(&mut c, "198.19.174.5"), pair("198.19.174.0/24", "udp_tunnel0"));

    // The file's own routes change: the tunnel is made again with them; the ctl route
    // stays, the file's old one goes and is listed.
    let got = reload(&dir, &mut c, &format!("{BASE}{}ttl = 9\n", UDP.replace("198.19.174.0/24", "198.19.176.0/24")));
    assert_eq!(fib(&mut c, "198.19.172.5"), pair("198.19.172.0/24", "udp_tunnel0"));
    assert_eq!(
        got,
        [
            ch("replaced", "udp_tunnel", "udp_tunnel0 (remote 198.18.1.9, 1 route kept)"),
            ch("removed", "route", "198.19.174.0/24 into udp_tunnel0 (the file no longer routes it there)")
        ]
    );
    assert_eq!(fib(&mut c, "198.19.176.5"), pair("198.19.176.0/24", "udp_tunnel0"));
    assert_eq!(fib(&mut c, "198.19.174.5"), pair("198.19.0.0/16", "198.18.1.2"));
}

#[test]
fn a_replaced_udp_tunnel_keeps_its_name_when_a_lower_id_is_free() {
    let second = "\n[[udp_tunnel]]\nlocal = \"198.18.1.1\"\nremote = \"198.18.1.10\"\nencap = \"gue\"\n";
    let (dir, mut c) = control_from_file(&format!("{BASE}{UDP}{second}"));
    // The first tunnel goes: id 0 is free, and the second runs as udp_tunnel1.
    let got = reload(&dir, &mut c, &format!("{BASE}{second}"));
    assert_eq!(got, [ch("removed", "udp_tunnel", "udp_tunnel0 (remote 198.18.1.9)")]);
    route_add(&mut c, "198.19.172.0/24", "udp_tunnel1");
    let got = reload(&dir, &mut c, &format!("{BASE}{second}ttl = 9\n"));
    assert_eq!(fib(&mut c, "198.19.172.5"), pair("198.19.172.0/24", "udp_tunnel1"));
    assert_eq!(got, [ch("replaced", "udp_tunnel", "udp_tunnel1 (remote 198.18.1.10, 1 route kept)")]);
    let row = &c.handle(&Request::FindUdpTunnels { remote: None, local: None, id: Some(1) }).data[0];
    assert_eq!(row["ttl"], 9, "{row}");
}

#[test]
fn a_file_tunnel_identical_to_a_ctl_one_is_not_replaced() {
    let (dir, mut c) = control_from_file(&format!("{BASE}{UDP}"));
    let made: control::udptun::UdpTunnelConfig =
        serde_json::from_value(serde_json::json!({ "local": "198.18.1.1", "remote": "198.18.1.10", "encap": "gue" })).unwrap();
    let r = c.handle(&Request::CreateUdpTunnel(made));
    assert!(r.ok, "{r:?}");
    assert_eq!(r.data["name"], "udp_tunnel1");
    route_add(&mut c, "198.19.172.0/24", "udp_tunnel1");
    // The file now declares the same tunnel: nothing to replace, the ctl route stays.
    let same = "\n[[udp_tunnel]]\nlocal = \"198.18.1.1\"\nremote = \"198.18.1.10\"\nencap = \"gue\"\n";
    assert_eq!(reload(&dir, &mut c, &format!("{BASE}{UDP}{same}")), []);
    assert_eq!(fib(&mut c, "198.19.172.5"), pair("198.19.172.0/24", "udp_tunnel1"));
}

#[test]
fn a_file_named_in_reload_applies_once() {
    let (dir, mut c) = control_from_file(BASE);
    let other = dir.path().join("gw2.toml");
    std::fs::write(&other, format!("{BASE}\n[[route]]\nprefix = \"198.19.177.0/24\"\nblackhole = true\n")).unwrap();
    let got = changes(&c.handle(&Request::Reload { file: Some(other.display().to_string()) }));
    assert_eq!(got, [ch("added", "route", "198.19.177.0/24 blackhole")]);
    // A plain reload reads the --config file again, and undoes gw2.toml's route.
    let r = c.handle(&Request::Reload { file: None });
    assert_eq!(changes(&r), [ch("removed", "route", "198.19.177.0/24 blackhole")]);
    assert_eq!(r.data["file"], dir.path().join(GATEWAY_FILE).display().to_string());
    assert_eq!(c.config_path.as_deref(), Some(dir.path().join(GATEWAY_FILE).as_path()));
}

/// A prefix the file moves from a `[[route]]` into an SA's or a tunnel's own `routes`
/// (and back) in one reload: the static route goes first, so the owned route may come.
#[test]
fn a_file_moves_a_prefix_between_a_static_route_and_a_tunnels_routes() {
    let route = "\n[[route]]\nprefix = \"198.19.177.0/24\"\nvia = \"198.18.1.2\"\n";
    let (dir, mut c) = control_from_file(&format!("{BASE}{SA}{UDP}{route}"));
    assert_eq!(fib(&mut c, "198.19.177.5"), pair("198.19.177.0/24", "198.18.1.2"));

    let sa_routes = format!("{SA}routes = [\"198.19.177.0/24\"]\n");
    let got = reload(&dir, &mut c, &format!("{BASE}{sa_routes}{UDP}"));
    assert_eq!(fib(&mut c, "198.19.177.5"), pair("198.19.177.0/24", "ipsec_tunnel1"));
    assert_eq!(got[0], ch("removed", "route", "198.19.177.0/24 via 198.18.1.2"), "{got:?}");
    assert!(got.contains(&ch("replaced", "ipsec_sa", "SA 1 (sequence numbers and replay window kept)")), "{got:?}");

    // From the SA's routes into the UDP tunnel's.
    let udp_routes = UDP.replace("[\"198.19.174.0/24\"]", "[\"198.19.174.0/24\", \"198.19.177.0/24\"]");
    reload(&dir, &mut c, &format!("{BASE}{SA}{udp_routes}"));
    assert_eq!(fib(&mut c, "198.19.177.5"), pair("198.19.177.0/24", "udp_tunnel0"));

    // And back to a static route.
    let got = reload(&dir, &mut c, &format!("{BASE}{SA}{UDP}{route}"));
    assert_eq!(fib(&mut c, "198.19.177.5"), pair("198.19.177.0/24", "198.18.1.2"));
    assert!(got.contains(&ch("added", "route", "198.19.177.0/24 via 198.18.1.2")), "{got:?}");
}

/// A reload that changes an SA but not its keys (a route more, a lifetime) replaces it
/// with the same SA to the peer: its sequence numbers go on (AES-GCM's and ChaCha20's
/// nonce is the salt and the sequence number: numbering again from 1 under the same key
/// repeated nonces, and the peer dropped the packets as replays) and an inbound SA keeps
/// its replay window and counts (the workers' state is the one of these counters). New
/// keys make a new SA, whose numbers start again.
#[test]
fn a_replaced_sa_with_the_same_keys_keeps_its_sequence_numbers() {
    let inbound = SA.replace("index = 1", "index = 2").replace("\"outbound\"", "\"inbound\"");
    let (dir, mut c) = control_from_file(&format!("{BASE}{SA}{inbound}"));
    let counters = |c: &Control, i: u32| std::sync::Arc::clone(&c.ipsec.get(i).unwrap().outbound);
    let (out0, in0) = (counters(&c, 1), counters(&c, 2));
    for _ in 0..3 {
        out0.next(100, false, &Default::default()).unwrap();
    }
    let more = SA.replace("remote = \"198.18.1.9\"\n", "remote = \"198.18.1.9\"\nroutes = [\"198.19.176.0/24\"]\n");
    let later = inbound.replace("\"inbound\"\n", "\"inbound\"\nlifetime = { hard_packets = 1000000 }\n");
    let got = reload(&dir, &mut c, &format!("{BASE}{more}{later}"));
    assert_eq!(
        got,
        [
            ch("replaced", "ipsec_sa", "SA 1 (sequence numbers and replay window kept)"),
            ch("replaced", "ipsec_sa", "SA 2 (sequence numbers and replay window kept)")
        ]
    );
    assert!(std::sync::Arc::ptr_eq(&counters(&c, 1), &out0) && std::sync::Arc::ptr_eq(&counters(&c, 2), &in0));
    assert_eq!(c.ipsec.get(1).unwrap().outbound.next(100, false, &Default::default()).map(|(seq, _)| seq), Ok(4));
    assert_eq!(fib(&mut c, "198.19.176.5"), pair("198.19.176.0/24", "ipsec_tunnel1"));
    // A new key: a new SA, numbered from 1.
    let rekeyed = more.replace("enc_key = \"000102", "enc_key = \"ff0102");
    let got = reload(&dir, &mut c, &format!("{BASE}{rekeyed}{later}"));
    assert_eq!(got, [ch("replaced", "ipsec_sa", "SA 1")]);
    assert_eq!(c.ipsec.get(1).unwrap().outbound.next(100, false, &Default::default()).map(|(seq, _)| seq), Ok(1));
}
