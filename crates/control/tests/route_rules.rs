//! One rule for every kind of route, in the config file and at run time: no route, UE
//! prefix, tunnel's or SA's route or service address on an address of the gateway's own
//! (nor a service on `[lb]`'s SNAT address), no interface address where one of those is
//! already; and a prefix routed from one place — `ip route add` refuses a prefix that has
//! another route, tunnels and SAs refuse a static route's prefix, `ip route del` refuses
//! a tunnel's or SA's route, naming what owns it.

use common::{control_from_file, reload_file, running_from_file, stop};
use control::api::{Reply, Request};
use control::config::Config;
use control::dataplane::{assemble, Control};
use std::path::Path;

use crate::common;

const CFG: &str = r#"
[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:03"
addresses = ["198.18.2.1/24", "2001:db8:2::1/64"]

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.2.2"

[[route]]
prefix = "2001:db8:100::/48"
via = "2001:db8:2::2"

[[neighbour]]
interface = "null0"
ip = "198.18.2.2"
mac = "02:00:00:00:02:02"

[lb]
snat4 = "198.18.1.1"
snat6 = "2001:db8:1::1"
"#;

fn control() -> Control {
    let cfg = Config::parse(CFG, "gw.toml", Path::new(".")).unwrap();
    assemble(&cfg).unwrap().into_single().0
}

fn run(c: &mut Control, line: &str) -> Reply {
    let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    let req = control::cli::parse(&words).unwrap_or_else(|e| panic!("{line}: {e}"));
    c.handle(&req)
}

fn ok(c: &mut Control, line: &str) -> Reply {
    let r = run(c, line);
    assert!(r.ok, "{line}: {r:?}");
    r
}

/// The request is refused with exactly `says`.
fn refused(c: &mut Control, line: &str, says: &str) {
    let r = run(c, line);
    assert_eq!(r.error.as_deref(), Some(says), "{line}");
}

/// What the FIB holds for exactly `prefix`: (kind, interface), or None.
fn fib(c: &mut Control, prefix: &str) -> Option<(String, String)> {
    let r = c.handle(&Request::ShowIpFibEntry { query: prefix.into() });
    r.ok.then(|| (r.data["kind"].as_str().unwrap().to_string(), r.data["interface"].as_str().unwrap_or("").to_string()))
}

fn batch(c: &mut Control, add: &[&str], del: &[&str]) -> Reply {
    c.handle(&Request::IpRouteBatch { add: add.iter().map(|s| s.to_string()).collect(), del: del.iter().map(|s| s.to_string()).collect() })
}

const OWN: &str = "packets to it are the gateway's own, and a route there would take them; expected another prefix (a wider one that contains it is fine)";
const SNAT: &str = "the source Cluster-policy connections are translated to (their replies come back to it): expected another address";

#[test]
fn no_route_of_any_kind_takes_an_address_of_ours_at_run_time() {
    let mut c = control();
    for (line, says) in [
        ("ip route add 198.18.0.1/32 blackhole", format!("198.18.0.1/32 is an address of pg0: {OWN}")),
        ("ip route add 2001:db8:2::1/128 via 2001:db8:2::2", format!("2001:db8:2::1/128 is an address of null0: {OWN}")),
        ("ip route add fe80::ff:fe00:1/128 blackhole", format!("fe80::ff:fe00:1/128 is an address of pg0: {OWN}")),
        (
            "create gtpu tunnel local 198.18.0.1 remote 198.18.0.5 teid-in 78 teid-out 7 ue 198.18.0.1/32",
            format!("ue 198.18.0.1/32: 198.18.0.1/32 is an address of pg0: {OWN}"),
        ),
        (
            "create gtpu tunnel local 2001:db8::1 remote 2001:db8::5 teid-in 78 teid-out 7 ue 2001:db8:2::1/128",
            format!("ue 2001:db8:2::1/128: 2001:db8:2::1/128 is an address of null0: {OWN}"),
        ),
        (
            "create udp tunnel local 198.18.2.1 remote 198.18.2.9 encap gue route 198.18.2.1/32",
            format!("route 198.18.2.1/32: 198.18.2.1/32 is an address of null0: {OWN}"),
        ),
        (
            "ipsec sa add 20 spi 3000 outbound alg null local 2001:db8:2::1 remote 2001:db8:2::9 route 2001:db8::1/128",
            format!("routes[0]: 2001:db8::1/128 is an address of pg0: {OWN}"),
        ),
        (
            "lb service add s4 cluster_ip 198.18.1.1 80 tcp backend 198.19.1.40:80",
            format!("service \"s4\": vip: 198.18.1.1 is lb.snat4, {SNAT}"),
        ),
        (
            "lb service add s6 cluster_ip 2001:db8:1::1 80 tcp backend [2001:db8:9::1]:80",
            format!("service \"s6\": vip: 2001:db8:1::1 is lb.snat6, {SNAT}"),
        ),
    ] {
        refused(&mut c, line, &says);
    }
    let r = batch(&mut c, &["198.19.9.0/24 blackhole", "2001:db8::1/128 blackhole"], &[]);
    assert_eq!(r.error.as_deref(), Some(format!("add[1]: 2001:db8::1/128 is an address of pg0: {OWN}").as_str()));
    assert!(c.ipsec.get(20).is_none() && c.gtpu.len() == 0 && c.udptun.len() == 0, "nothing refused stays");
    assert_eq!(c.lb.state.services().count(), 0);
    for a in ["198.18.0.1/32", "2001:db8:2::1/128", "198.18.2.1/32", "2001:db8::1/128"] {
        assert_eq!(fib(&mut c, a).map(|f| f.0), Some("local".into()), "{a} stays ours");
    }
    // A wider prefix containing an address of ours is a route; the address stays local.
    // Node ports use our addresses on purpose, and so may other services (an external
    // IP that is the node's): served by `ipN-local`, without a route.
    ok(&mut c, "lb service add own cluster_ip 198.18.0.1 80 tcp backend 198.19.1.40:80");
    ok(&mut c, "lb service add own6 load_balancer 2001:db8::1 80 udp backend [2001:db8:9::1]:80");
    ok(&mut c, "ip route add 198.18.0.0/16 via 198.18.2.2");
    ok(&mut c, "ip route add 2001:db8::/32 via 2001:db8:2::2");
    ok(&mut c, "lb service add np node_port 0.0.0.0 30080 tcp backend 198.19.1.40:80");
    ok(&mut c, "lb service add np6 node_port :: 30080 tcp backend [2001:db8:9::1]:80");
    ok(&mut c, "create gtpu tunnel local 198.18.0.1 remote 198.18.0.5 teid-in 78 teid-out 7 ue 198.18.0.9/32");
    let r = c.handle(&Request::ShowIpFibEntry { query: "198.18.0.1".into() });
    assert_eq!((r.data["prefix"].as_str(), r.data["kind"].as_str()), (Some("198.18.0.1/32"), Some("local")), "{r:?}");
    let r = c.handle(&Request::ShowIpFibEntry { query: "2001:db8::1".into() });
    assert_eq!(r.data["kind"].as_str(), Some("local"), "{r:?}");
}

#[test]
fn the_file_names_each_route_on_an_address_of_ours() {
    let bad = format!(
        "{CFG}\
[[route]]\nprefix = \"198.18.0.1/32\"\nblackhole = true\n\
[[route]]\nprefix = \"198.18.0.0/16\"\nvia = \"198.18.2.2\"\n\
[[gtpu_tunnel]]\nlocal = \"198.18.0.1\"\nremote = \"198.18.0.5\"\nteid_in = 5\nteid_out = 6\nue = \"198.18.2.1/32\"\n\
[[udp_tunnel]]\nlocal = \"2001:db8::1\"\nremote = \"2001:db8::9\"\nencap = \"gue\"\nroutes = [\"2001:db8:5::/48\", \"2001:db8::1/128\"]\n\
[[ipsec_sa]]\nindex = 1\nspi = 1000\ndirection = \"outbound\"\nalgorithm = \"null\"\nlocal = \"198.18.2.1\"\nremote = \"198.18.2.9\"\nroutes = [\"198.18.2.1/32\"]\n\
[[lb_service]]\nname = \"a\"\ntype = \"cluster_ip\"\nvip = \"2001:db8:2::1\"\nport = 80\nprotocol = \"tcp\"\nbackends = [{{ addr = \"2001:db8:9::1\", port = 80 }}]\n\
[[lb_service]]\nname = \"b\"\ntype = \"load_balancer\"\nvip = \"198.18.1.1\"\nport = 80\nprotocol = \"tcp\"\nbackends = [{{ addr = \"198.19.1.10\", port = 80 }}]\n\
[[lb_service]]\nname = \"np\"\ntype = \"node_port\"\nvip = \"0.0.0.0\"\nport = 30080\nprotocol = \"tcp\"\nbackends = [{{ addr = \"198.19.1.10\", port = 80 }}]\n"
    );
    let cfg = Config::parse(&bad, "gw.toml", Path::new(".")).unwrap();
    let e = assemble(&cfg).err().expect("refused");
    let got: Vec<(String, String)> = e.all().map(|e| (e.field.clone(), e.message.clone())).collect();
    let want = [
        ("route[2].prefix", format!("198.18.0.1/32 is interface[0].addresses[0] (pg0): {OWN}")),
        ("gtpu_tunnel[0].ue", format!("198.18.2.1/32 is interface[1].addresses[0] (null0): {OWN}")),
        ("udp_tunnel[0].routes[1]", format!("2001:db8::1/128 is interface[0].addresses[1] (pg0): {OWN}")),
        ("ipsec_sa[0].routes[0]", format!("198.18.2.1/32 is interface[1].addresses[0] (null0): {OWN}")),
        ("lb_service[1].vip", format!("198.18.1.1 is lb.snat4, {SNAT}")),
    ];
    assert_eq!(got, want.map(|(f, m)| (f.to_string(), m)), "{e}");
    assert!(e.all().all(|e| e.line.is_some()), "{e}");
    // Without them (the wider route and the node port kept) the file loads.
    let fixed = bad
        .replace("prefix = \"198.18.0.1/32\"", "prefix = \"198.18.0.9/32\"")
        .replace("ue = \"198.18.2.1/32\"", "ue = \"198.18.2.9/32\"")
        .replace("\"2001:db8::1/128\"]", "\"2001:db8::9/128\"]")
        .replace("routes = [\"198.18.2.1/32\"]", "routes = [\"198.18.2.8/32\"]")
        .replace("vip = \"2001:db8:2::1\"", "vip = \"2001:db8:2::10\"")
        .replace("vip = \"198.18.1.1\"", "vip = \"198.18.1.10\"");
    let cfg = Config::parse(&fixed, "gw.toml", Path::new(".")).unwrap();
    assemble(&cfg).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_prefix_is_routed_from_one_place_whatever_adds_it() {
    let mut c = control();
    // `ip route add` over a different route: refused, the route kept; the same again: nothing.
    refused(
        &mut c,
        "ip route add 198.19.0.0/16 blackhole",
        "198.19.0.0/16 exists: via 198.18.2.2; delete it first (ip route del 198.19.0.0/16)",
    );
    refused(
        &mut c,
        "ip route add 2001:db8:100::/48 via 198.18.2.2",
        "2001:db8:100::/48 exists: via 2001:db8:2::2; delete it first (ip route del 2001:db8:100::/48)",
    );
    assert_eq!(fib(&mut c, "198.19.0.0/16").unwrap().0, "via");
    assert_eq!(ok(&mut c, "ip route add 198.19.0.0/16 via 198.18.2.2").text, "route 198.19.0.0/16 unchanged (already so)");

    // Tunnels' and SAs' routes over static routes: refused alike, all or nothing.
    let exists4 = "198.19.0.0/16 exists: via 198.18.2.2; delete it first (ip route del 198.19.0.0/16)";
    let exists6 = "2001:db8:100::/48 exists: via 2001:db8:2::2; delete it first (ip route del 2001:db8:100::/48)";
    let sa = "ipsec sa add 20 spi 3000 outbound alg null local 198.18.2.1 remote 198.18.2.9";
    refused(&mut c, &format!("{sa} route 198.20.0.0/16 route 198.19.0.0/16"), &format!("routes[1]: {exists4}"));
    assert!(c.ipsec.get(20).is_none());
    assert_eq!(fib(&mut c, "198.20.0.0/16"), None, "no route of the refused SA stays");
    refused(
        &mut c,
        "ipsec sa add 21 spi 3001 outbound alg null local 2001:db8:2::1 remote 2001:db8:2::9 route 2001:db8:100::/48",
        &format!("routes[0]: {exists6}"),
    );
    refused(
        &mut c,
        "create gtpu tunnel local 198.18.0.1 remote 198.18.0.5 teid-in 79 teid-out 7 ue 198.19.0.0/16",
        &format!("ue 198.19.0.0/16: {exists4}"),
    );
    refused(
        &mut c,
        "create udp tunnel local 2001:db8:2::1 remote 2001:db8:2::9 encap gue route 2001:db8:100::/48",
        &format!("route 2001:db8:100::/48: {exists6}"),
    );
    assert_eq!(fib(&mut c, "198.19.0.0/16").unwrap().0, "via");

    // Their own routes are theirs: not replaced or deleted as static routes.
    ok(&mut c, &format!("{sa} route 198.20.0.0/16"));
    ok(&mut c, "create udp tunnel local 2001:db8:2::1 remote 2001:db8:2::9 encap gue route 2001:db8:200::/48");
    ok(&mut c, "create gtpu tunnel local 198.18.0.1 remote 198.18.0.5 teid-in 79 teid-out 7 ue 198.21.0.0/16");
    let sa_owner = "198.20.0.0/16 is one of SA 20's routes (ipsec_tunnel20), not a static route: it goes with the SA (ipsec sa del 20)";
    refused(&mut c, "ip route del 198.20.0.0/16", sa_owner);
    refused(
        &mut c,
        "ip route del 2001:db8:200::/48",
        "2001:db8:200::/48 is one of udp_tunnel0's routes, not a static route: it goes with the tunnel (delete udp tunnel udp_tunnel0)",
    );
    refused(
        &mut c,
        "ip route del 198.21.0.0/16",
        "198.21.0.0/16 is gtpu_tunnel0's ue, not a static route: it goes with the tunnel (delete gtpu tunnel gtpu_tunnel0)",
    );
    refused(
        &mut c,
        "ip route add 198.20.0.0/16 blackhole",
        "198.20.0.0/16 exists: one of SA 20's routes (ipsec_tunnel20); it goes with the SA (ipsec sa del 20)",
    );
    refused(
        &mut c,
        "ip route add 2001:db8:200::/48 interface udp_tunnel0",
        "2001:db8:200::/48 exists: one of udp_tunnel0's routes; it goes with the tunnel (delete udp tunnel udp_tunnel0)",
    );
    let r = batch(&mut c, &["198.20.0.0/16 blackhole"], &[]);
    assert_eq!(
        r.error.as_deref(),
        Some("add[0]: 198.20.0.0/16 exists: one of SA 20's routes (ipsec_tunnel20); it goes with the SA (ipsec sa del 20)")
    );
    let r = batch(&mut c, &[], &["198.19.0.0/16", "198.20.0.0/16"]);
    assert_eq!(r.error, Some(format!("del[1]: {sa_owner}")));
    assert_eq!(fib(&mut c, "198.19.0.0/16").unwrap().0, "via", "a refused batch deletes nothing");
    assert_eq!(fib(&mut c, "198.20.0.0/16").unwrap().1, "ipsec_tunnel20");
    assert_eq!(fib(&mut c, "2001:db8:200::/48").unwrap().1, "udp_tunnel0");

    // A route into them made by `ip route add` is a static route, deleted as one.
    ok(&mut c, "ip route add 198.22.0.0/16 interface ipsec_tunnel20");
    ok(&mut c, "ip route del 198.22.0.0/16");
    ok(&mut c, "ip route add 2001:db8:300::/48 interface udp_tunnel0");
    ok(&mut c, "ip route del 2001:db8:300::/48");

    // They go with their owner; the prefixes are free again.
    ok(&mut c, "ipsec sa del 20");
    ok(&mut c, "delete udp tunnel udp_tunnel0");
    assert_eq!(fib(&mut c, "198.20.0.0/16"), None);
    ok(&mut c, "ip route add 198.20.0.0/16 blackhole");
    ok(&mut c, "ip route add 2001:db8:200::/48 via 2001:db8:2::2");

    // A batch line replaces a static route, in one publication, and says so.
    let r = batch(&mut c, &["198.19.0.0/16 blackhole", "198.23.0.0/16 blackhole"], &[]);
    assert_eq!(r.text, "2 routes added (1 of them replaced a route), 0 deleted", "{r:?}");
    assert_eq!(fib(&mut c, "198.19.0.0/16").unwrap().0, "blackhole");
}

#[test]
fn an_interface_address_is_refused_where_a_route_or_service_is() {
    let (dir, mut c, handle) = running_from_file(CFG);

    ok(&mut c, "ip route add 198.18.7.1/32 via 198.18.2.2");
    ok(&mut c, "create gtpu tunnel local 2001:db8::1 remote 2001:db8::5 teid-in 78 teid-out 7 ue 2001:db8:7::1/128");
    ok(&mut c, "lb service add web cluster_ip 198.18.8.1 80 tcp backend 198.19.1.40:80");
    for (addr, says) in [
        ("198.18.7.1/24", "address 198.18.7.1 is already routed: the static route 198.18.7.1/32 via 198.18.2.2; remove that first"),
        ("2001:db8:7::1/64", "address 2001:db8:7::1 is already routed: 2001:db8:7::1/128 is gtpu_tunnel0's ue; remove that first"),
        (
            "198.18.8.1/24",
            "address 198.18.8.1 is already routed: 198.18.8.1/32 is a load-balanced service address (lb-vip); remove that first",
        ),
    ] {
        refused(
            &mut c,
            &format!("create interface x0 null mac 02:00:00:00:00:09 address {addr}"),
            &format!("create interface x0: interface[0]: {says}"),
        );
        // A reload bringing the interface is refused the same way.
        let text = format!("{CFG}[[interface]]\nname = \"x0\"\ntype = \"null\"\nmac = \"02:00:00:00:00:09\"\naddresses = [\"{addr}\"]\n");
        let r = reload_file(&dir, &mut c, &text);
        let e = r.error.unwrap_or_else(|| panic!("reload with {addr} accepted: {}", r.text));
        assert!(e.contains(says), "{e}");
        assert!(c.state.if_index("x0").is_err());
    }
    // Once the route is gone, the address may come.
    ok(&mut c, "ip route del 198.18.7.1/32");
    ok(&mut c, "create interface x0 null mac 02:00:00:00:00:09 address 198.18.7.1/24");

    stop(c, handle);
}

/// `ipN-local` hands the tunnels' UDP ports (GTP-U, UDP tunnels, ESP in UDP) and
/// `[punt]`'s ports on before the load balancer sees them, so a node_port service there
/// would never receive a packet: refused either way round, naming the other, in the
/// file and at run time. The same number over TCP is another port.
#[test]
fn node_ports_and_tunnel_ports_exclude_each_other() {
    let mut c = control();
    let taken = |name: &str, port: &str, owner: &str| {
        format!("service {name:?}: port: {port} of the node's addresses is taken by {owner}; expected a port nothing else receives on")
    };
    refused(&mut c, "lb service add gtp node_port 0.0.0.0 2152 udp backend 198.19.1.40:2152", &taken("gtp", "2152/udp", "GTP-U"));
    ok(&mut c, "create udp tunnel local 198.18.2.1 remote 198.18.2.9 encap gue port 7000");
    refused(&mut c, "lb service add g6 node_port :: 7000 udp backend [2001:db8:9::1]:7000", &taken("g6", "7000/udp", "a UDP tunnel"));
    ok(&mut c, "ipsec sa add 21 spi 3001 inbound alg null local 198.18.2.1 remote 198.18.2.9 udp-encap");
    refused(
        &mut c,
        "lb service add nat-t node_port 0.0.0.0 4500 udp backend 198.19.1.40:4500",
        &taken("nat-t", "4500/udp", "ESP in UDP (an inbound SA)"),
    );
    ok(&mut c, "lb service add tcp4500 node_port 0.0.0.0 4500 tcp backend 198.19.1.40:80");
    assert_eq!(c.lb.state.services().map(|(_, s)| s.name.as_str()).collect::<Vec<_>>(), ["tcp4500"]);

    // The other way round: the node port was there first.
    ok(&mut c, "lb service add np node_port 0.0.0.0 30080 udp backend 198.19.1.40:80");
    let np = "port 30080: node_port service \"np\" receives on it; expected a port no node_port service uses";
    refused(&mut c, "create udp tunnel local 198.18.2.1 remote 198.18.2.10 encap gue port 30080", np);
    refused(&mut c, "set udp tunnel udp_tunnel0 port 30080", np);
    refused(&mut c, "ipsec sa set 21 udp-ports 4500 30080", &format!("udp_dst_port: {np}"));
    assert_eq!((c.udptun.len(), c.udptun.spec(0).map(|s| s.port)), (1, Some(7000)), "nothing refused changed");
    assert_eq!(c.ipsec.get(21).and_then(|s| s.spec.udp_receive_port()), Some(4500));
    assert_eq!(c.state.udp_port(30080), None);
    // Another port is fine, and so is an outbound SA's (it receives nothing).
    ok(&mut c, "set udp tunnel udp_tunnel0 port 7001");
    ok(&mut c, "ipsec sa set 21 udp-ports 4500 4501");
    ok(&mut c, "ipsec sa add 22 spi 3002 outbound alg null local 198.18.2.1 remote 198.18.2.9 udp-encap");

    // In the file: the service after the tunnels, refused by its entry.
    let file = format!(
        "{CFG}\n[[udp_tunnel]]\nlocal = \"198.18.2.1\"\nremote = \"198.18.2.9\"\nencap = \"gue\"\nport = 7000\n\n\
         [[lb_service]]\nname = \"g\"\ntype = \"node_port\"\nvip = \"0.0.0.0\"\nport = 7000\nprotocol = \"udp\"\n\
         backends = [{{ addr = \"198.19.1.40\", port = 7000 }}]\n"
    );
    let cfg = Config::parse(&file, "gw.toml", Path::new(".")).unwrap();
    let e = assemble(&cfg).err().expect("a node port on a tunnel's port is refused").to_string();
    assert!(e.contains(&format!("gw.toml: lb_service[0]: {}", taken("g", "7000/udp", "a UDP tunnel"))), "{e}");
    // And on a port `[punt]` hands to the host.
    let file = format!(
        "{CFG}
[punt]
interface = \"pg0\"
host4 = \"198.18.0.2\"
tcp_ports = [179]

\
         [[lb_service]]
name = \"bgp\"
type = \"node_port\"
vip = \"0.0.0.0\"
port = 179
protocol = \"tcp\"
\
         backends = [{{ addr = \"198.19.1.40\", port = 179 }}]
"
    );
    let cfg = Config::parse(&file, "gw.toml", Path::new(".")).unwrap();
    let e = assemble(&cfg).err().expect("a node port on a punted port is refused").to_string();
    assert!(e.contains(&taken("bgp", "179/tcp", "[punt] (handed to the host's stack)")), "{e}");
}

/// A reload whose file brings a UDP tunnel or an inbound SA onto the port of a node_port
/// service made with `ctl` is refused before anything changes; a file service on that
/// port, which the same file replaces, is no obstacle.
#[test]
fn a_reload_does_not_put_a_tunnel_on_a_ctl_node_port() {
    let (dir, mut c) = control_from_file(CFG);
    ok(&mut c, "lb service add np node_port 0.0.0.0 30080 udp backend 198.19.1.40:80");
    let tunnel = "\n[[udp_tunnel]]\nlocal = \"198.18.2.1\"\nremote = \"198.18.2.9\"\nencap = \"gue\"\nport = 30080\n";
    let sa = "\n[[ipsec_sa]]\nindex = 3\nspi = 3000\ndirection = \"inbound\"\nalgorithm = \"null\"\nlocal = \"198.18.2.1\"\n\
              remote = \"198.18.2.9\"\nudp_encap = true\nudp_dst_port = 30080\n";
    for (extra, field) in [(tunnel, "udp_tunnel[0].port"), (sa, "ipsec_sa[0].udp_dst_port")] {
        let r = reload_file(&dir, &mut c, &format!("{CFG}{extra}"));
        let e = r.error.unwrap_or_else(|| panic!("reload with {field} on the node port accepted"));
        assert!(
            e.ends_with(&format!(
                "{field}: 30080: node_port service \"np\" (made with ctl) receives on it; expected a port no node_port service uses; nothing was changed"
            )),
            "{e}"
        );
        assert_eq!((c.udptun.len(), c.ipsec.get(3).is_some(), c.state.udp_port(30080)), (0, false, None));
    }
    // Once the service is gone, the same file applies.
    ok(&mut c, "lb service del np");
    let r = reload_file(&dir, &mut c, &format!("{CFG}{tunnel}"));
    assert!(r.ok, "{r:?}");
    assert_eq!(c.udptun.len(), 1);
}

/// The UPF's UE pools are `[pfcp]`'s routes: neither deleted nor replaced as static ones.
#[test]
fn the_ue_pools_are_the_upfs_routes() {
    let file = format!(
        "{CFG}\n[pfcp]\nlisten = \"127.0.0.1:0\"\nn3 = \"198.18.2.1\"\nue_pool = \"198.20.0.0/17\"\nue_pool6 = \"2001:db8:20::/48\"\n"
    );
    let cfg = Config::parse(&file, "gw.toml", Path::new(".")).unwrap();
    let mut c = assemble(&cfg).unwrap().into_single().0;
    for pool in ["198.20.0.0/17", "2001:db8:20::/48"] {
        let before = fib(&mut c, pool).expect("the pool is routed");
        let del = run(&mut c, &format!("ip route del {pool}"));
        let e = del.error.unwrap_or_else(|| panic!("ip route del {pool} accepted"));
        assert!(e.starts_with(&format!("{pool} is the UPF's UE pool (")) && e.ends_with("it goes with [pfcp] ue_pool (a restart)"), "{e}");
        let add = run(&mut c, &format!("ip route add {pool} blackhole"));
        assert!(add.error.is_some_and(|e| e.starts_with(&format!("{pool} exists: the UPF's UE pool ("))), "{pool}");
        assert_eq!(fib(&mut c, pool), Some(before));
    }
}
