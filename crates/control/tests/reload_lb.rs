//! `[lb] timeouts` change with a reload, through the whole graph: the published tables
//! carry them to the worker, a new session takes the new timeout (UDP's over IPv6, a
//! SYN's over IPv4) and an existing one takes it from its next packet. The rest of `[lb]` (table sizes, addresses) needs
//! a restart: a reload that changes it is refused naming the key, and changes nothing.
//! (No timed assertion: the expiries compared are minutes apart.)

use crate::common;

use common::{reload_names, running_from_file as running, seed_frames as seed, stop, tcp4, udp6};
use control::api::Request;
use control::fuzz::graph::Harness;
use std::net::{Ipv4Addr, Ipv6Addr};

const GATEWAY: &str = r#"
[dataplane]
buffers = 256

[[interface]]
name = "access0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[[neighbour]]
interface = "access0"
ip = "2001:db8::2"
mac = "02:00:00:00:01:02"

[[neighbour]]
interface = "access0"
ip = "198.18.0.2"
mac = "02:00:00:00:01:02"

[[route]]
prefix = "2001:db8:98::/48"
via = "2001:db8::2"

[[route]]
prefix = "198.19.1.0/24"
via = "198.18.0.2"

[[lb_service]]
name = "t/web4:http"
type = "cluster_ip"
vip = "198.18.128.10"
port = 80
protocol = "tcp"
backends = [{ addr = "198.19.1.10", port = 8080 }]

[[lb_service]]
name = "t/dns6:udp"
type = "cluster_ip"
vip = "2001:db8:128::10"
port = 53
protocol = "udp"
backends = [{ addr = "2001:db8:98::10", port = 5353 }]

[lb]
snat4 = "198.18.0.1"
snat6 = "2001:db8::1"
limits = { sessions = 1024, affinity = 256 }
"#;

const VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x128, 0, 0, 0, 0, 0x10);

/// Reload `text` (written to a file in `dir`): Ok(the changes as `action object name`
/// lines) or Err(the refusal).
fn reload(h: &mut Harness, dir: &tempfile::TempDir, text: &str) -> Result<Vec<String>, String> {
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, text).unwrap();
    let r = h.control.handle(&Request::Reload { file: Some(path.display().to_string()) });
    if !r.ok {
        return Err(r.error.unwrap_or_default());
    }
    let changes = r.data["changes"].as_array().unwrap();
    Ok(changes.iter().map(|c| format!("{} {} {}", c["action"], c["object"], c["name"]).replace('"', "")).collect())
}

/// A UDP query from `client`:`port` to the service, forwarded to its backend; then the
/// milliseconds until its session expires, as `show lb sessions` reads them.
fn query(h: &mut Harness, client: u16, port: u16) -> u64 {
    let q = seed("lb6-udp")[0].clone();
    let src = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, client);
    assert_eq!(h.frame(0, udp6(&q, src, port, VIP, 53)).len(), 1, "forwarded to the backend");
    let lb = &h.worker.cx.lb;
    let (rows, _) = lb::show::sessions(&lb.b6, 0, lb.now_ms, None, 100);
    let row = rows.iter().find(|r| r.client == src && r.client_port == port).expect("the query's session");
    row.expires_in_ms
}

/// A SYN from `client`:`port` to the IPv4 service, forwarded; then the milliseconds until
/// its session expires.
fn syn(h: &mut Harness, client: u8, port: u16) -> u64 {
    let s = seed("lb4-tcp")[0].clone();
    let src = Ipv4Addr::new(198, 18, 0, client);
    assert_eq!(h.frame(0, tcp4(&s, src, port, Ipv4Addr::new(198, 18, 128, 10), 80, Some(0x02))).len(), 1, "forwarded to the backend");
    let lb = &h.worker.cx.lb;
    let (rows, _) = lb::show::sessions(&lb.b4, 0, lb.now_ms, None, 100);
    rows.iter().find(|r| r.client == src && r.client_port == port).expect("the SYN's session").expires_in_ms
}

#[test]
fn a_reload_changes_the_timeouts_and_refuses_the_sizes_by_key() {
    let mut h = Harness::with_config(GATEWAY);
    let dir = tempfile::tempdir().unwrap();
    let d = lb::session::Timeouts::default();
    assert!(query(&mut h, 0x10, 40001) <= d.udp_ms);
    assert!(syn(&mut h, 0x10, 40001) <= d.tcp_syn_ms);

    let longer = GATEWAY.replace("[lb]\n", "[lb]\ntimeouts = { udp_ms = 600000, tcp_syn_ms = 600000 }\n");
    let changes = reload(&mut h, &dir, &longer).unwrap();
    assert_eq!(changes, ["replaced setting lb.timeouts.tcp_syn_ms = 600000", "replaced setting lb.timeouts.udp_ms = 600000"]);
    assert_eq!(h.control.lb.shared.load().timeouts.udp_ms, 600_000, "published with the tables");
    // A new session takes the new timeout; the existing one from its next packet.
    assert!(query(&mut h, 0x11, 40002) > d.udp_ms);
    assert_eq!(h.worker.cx.lb.tables.timeouts.udp_ms, 600_000, "the worker holds the new tables");
    assert!(query(&mut h, 0x10, 40001) > d.udp_ms);
    assert!(syn(&mut h, 0x11, 40002) > d.tcp_syn_ms);
    assert!(syn(&mut h, 0x10, 40001) > d.tcp_syn_ms);
    assert_eq!(reload(&mut h, &dir, &longer).unwrap(), Vec::<String>::new(), "the same file: no changes");

    // Sizes and addresses: refused by key, nothing changed (the timeouts with them).
    let both = |from: &str, to: &str| longer.replace("udp_ms = 600000,", "udp_ms = 700000,").replace(from, to);
    for (text, key) in [
        (both("sessions = 1024", "sessions = 2048"), "lb.limits.sessions"),
        (both("affinity = 256", "affinity = 512"), "lb.limits.affinity"),
        (both("snat6 = \"2001:db8::1\"", "snat6 = \"2001:db8::3\""), "lb.snat6"),
        (both("snat4 = \"198.18.0.1\"\n", ""), "lb.snat4"),
    ] {
        let e = reload(&mut h, &dir, &text).unwrap_err();
        assert!(e.contains(&format!("gw.toml: {key}: ")) && e.contains("restart") && e.contains("nothing was changed"), "{key}: {e}");
        assert_eq!(h.control.lb.state.timeouts().udp_ms, 600_000, "{key}: nothing changed");
    }
    // The timeouts dropped from the file: the defaults again.
    let changes = reload(&mut h, &dir, GATEWAY).unwrap();
    assert_eq!(
        changes,
        [
            format!("replaced setting lb.timeouts.tcp_syn_ms = {}", d.tcp_syn_ms),
            format!("replaced setting lb.timeouts.udp_ms = {}", d.udp_ms)
        ]
    );
}

/// `GATEWAY` with a second link, "other", whose addresses are `addresses`.
fn with_other(addresses: &str) -> String {
    GATEWAY.replacen(
        "\n[[neighbour]]",
        &format!(
            "\n[[interface]]\nname = \"other\"\ntype = \"null\"\nmac = \"02:00:00:00:00:03\"\naddresses = [{addresses}]\n\n[[neighbour]]"
        ),
        1,
    )
}

const WEB_VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 252, 1);

/// A service on one of the node's own addresses has no VIP route: its packets come by
/// `ip4-local`. A reload taking the address away from its interface while a service made
/// with `ctl` stays there is refused naming the file's field, the address and the service,
/// before anything changes: the address stays the node's and the service goes on
/// receiving. (Accepted, nothing would deliver the service's packets: no route covers
/// the address.)
#[test]
fn a_reload_keeps_the_address_a_ctl_service_receives_on() {
    let with_address = with_other(r#""198.18.251.1/24", "198.18.252.1/24""#);
    let mut h = Harness::with_config(&with_address);
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> =
        "lb service add web load_balancer 198.18.252.1 80 tcp backend 198.19.1.10:8080".split_whitespace().map(str::to_string).collect();
    let r = h.control.handle(&control::cli::parse(&words).unwrap());
    assert!(r.ok, "{r:?}");
    let s = seed("lb4-tcp")[0].clone();
    let syn = |h: &mut Harness, port: u16| h.frame(0, tcp4(&s, Ipv4Addr::new(198, 18, 0, 10), port, WEB_VIP, 80, Some(0x02))).len();
    assert_eq!(syn(&mut h, 40001), 1, "forwarded to the backend (by ip4-local)");

    let e = reload(&mut h, &dir, &with_other(r#""198.18.251.1/24""#)).unwrap_err();
    assert!(
        e.ends_with(
            "gw.toml: interface[1].addresses: 198.18.252.1 of \"other\" is the address service \"web\" (made with ctl) receives on; \
             expected the address kept while a service receives on it (delete the service first); nothing was changed"
        ),
        "{e}"
    );
    assert_eq!(h.control.state.own_address_of(&"198.18.252.1/32".parse().unwrap()), Some("other"), "nothing changed");
    assert_eq!(syn(&mut h, 40002), 1, "still forwarded to the backend");
}

/// A file's service on the node's address does not keep the address when the same
/// reload removes the service, or changes it (added again, judged by the file's
/// addresses: its VIP is then routed to the load balancer). Unchanged, it does, as a
/// service made with `ctl` does.
#[test]
fn a_file_service_the_reload_removes_or_changes_lets_its_address_go() {
    let web = "\n[[lb_service]]\nname = \"web\"\ntype = \"load_balancer\"\nvip = \"198.18.252.1\"\nport = 80\nprotocol = \"tcp\"\n\
               backends = [{ addr = \"198.19.1.10\", port = 8080 }]\n";
    let with_address = with_other(r#""198.18.251.1/24", "198.18.252.1/24""#) + web;
    let without = with_other(r#""198.18.251.1/24""#);
    let ours = |c: &control::dataplane::Control| c.state.own_address_of(&"198.18.252.1/32".parse().unwrap()).map(str::to_string);
    let fib_prefix = |c: &mut control::dataplane::Control| {
        let r = c.handle(&Request::ShowIpFibEntry { query: "198.18.252.1".into() });
        r.data["prefix"].as_str().map(str::to_string)
    };
    let reload_text = |dir: &tempfile::TempDir, c: &mut control::dataplane::Control, text: &str| {
        reload_names(dir, c, text).map(|mut names| {
            names.sort();
            names
        })
    };

    // Removed with the address.
    let (dir, mut c, handle) = running(&with_address);
    assert_eq!(ours(&c).as_deref(), Some("other"));
    assert_eq!(reload_text(&dir, &mut c, &without).unwrap(), ["other", "web"]);
    assert_eq!((ours(&c), c.lb.state.service("web").is_some()), (None, false));
    stop(c, handle);

    // Unchanged: refused; changed (another backend port): added again with a VIP route.
    let (dir, mut c, handle) = running(&with_address);
    let e = reload_text(&dir, &mut c, &(without.clone() + web)).unwrap_err();
    assert!(
        e.ends_with(
            "interface[1].addresses: 198.18.252.1 of \"other\" is the address service \"web\" (the file's, unchanged) receives on; \
             expected the address kept while a service receives on it (remove it from the file too); nothing was changed"
        ),
        "{e}"
    );
    assert_eq!(ours(&c).as_deref(), Some("other"), "nothing changed");
    assert_eq!(reload_text(&dir, &mut c, &(without + &web.replace("port = 8080", "port = 8081"))).unwrap(), ["other", "web"]);
    assert_eq!((ours(&c), fib_prefix(&mut c).as_deref()), (None, Some("198.18.252.1/32")), "the VIP routed");
    stop(c, handle);
}
