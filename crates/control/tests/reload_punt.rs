//! The punt link's first node (`ip-punt-inject`) is chosen per port: a reload may change
//! what `[punt]` hands to the host and which link it is (the two ports pointed at other
//! inputs, `control::punt::repoint`), or turn it on where none was at start-up. Replacing
//! the running punt link's interface, or (several workers) moving it to a link of a kind
//! that passes packets on the other way, are refused by field with nothing changed; so is
//! deleting the punt link with `ctl`.

use common::{control_from_file, reload_names as reload, running_from_file, stop};
use control::api::Request;
use control::dataplane::Control;

use crate::common;

const LINKS: &str = r#"
[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "host"
type = "null"
mac = "02:00:00:00:00:02"
addresses = ["198.18.250.1/24"]

[[interface]]
name = "other"
type = "null"
mac = "02:00:00:00:00:03"
addresses = ["198.18.251.1/24"]
"#;

fn punt(link: &str, host: &str, ports: &str) -> String {
    format!("\n[punt]\ninterface = \"{link}\"\nhost4 = \"{host}\"\nudp_ports = [{ports}]\n")
}

#[test]
fn the_punt_settings_change_in_place_on_the_start_up_link() {
    let (dir, mut c) = control_from_file(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500, 4500"))).unwrap(), ["punt to host"]);
    assert_eq!(c.state.punt().unwrap().udp_ports, [500, 4500]);
    // Off and on again on the same link: its port still opens with ip-punt-inject.
    assert_eq!(reload(&dir, &mut c, LINKS).unwrap(), ["punt off"]);
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500"))).unwrap(), ["punt to host"]);
}

#[test]
fn a_reload_moves_the_punt_link_to_another_link_and_back() {
    let (dir, mut c) = control_from_file(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("other", "198.18.251.2", "500"))).unwrap(), ["punt to other"]);
    assert_eq!(c.state.punt().unwrap().interface, "other");
    assert_eq!(c.punt_link.as_deref(), Some("other"));
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500"))).unwrap(), ["punt to host"]);
    assert_eq!(c.punt_link.as_deref(), Some("host"));
}

#[test]
fn a_punt_link_where_none_was_at_start_up_and_off_again() {
    let (dir, mut c) = control_from_file(LINKS);
    assert_eq!(c.punt_link, None);
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500"))).unwrap(), ["punt to host"]);
    assert_eq!((c.state.punt().unwrap().interface.as_str(), c.punt_link.as_deref()), ("host", Some("host")));
    assert_eq!(reload(&dir, &mut c, LINKS).unwrap(), ["punt off"]);
    assert_eq!((c.state.punt(), c.punt_link.as_deref()), (None, None));
}

/// With several workers, `ip-punt-inject` passes on what it does not inject as the
/// start-up punt link's kind does: a link whose kind goes the other way is refused.
#[test]
fn a_link_that_hands_packets_on_the_other_way_cannot_become_the_punt_link() {
    let (dir, mut c) = control_from_file(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
    let pg_spreads = control::dataplane::kind_spreads(control::config::InterfaceKind::Pg, &c.spread_kinds);
    c.punt_pass_on = Some(!pg_spreads);
    let e = reload(&dir, &mut c, &(LINKS.to_string() + &punt("pg0", "198.18.0.2", "500"))).unwrap_err();
    assert!(e.contains("punt: interface: \"pg0\" (pg) passes what it receives on to") && e.contains("restart"), "{e}");
    assert_eq!(c.state.punt().unwrap().interface, "host", "nothing was changed");
    c.punt_pass_on = Some(pg_spreads);
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("pg0", "198.18.0.2", "500"))).unwrap(), ["punt to pg0"]);
}

#[test]
fn the_punt_link_is_neither_replaced_nor_deleted_while_punting() {
    let text = LINKS.to_string() + &punt("host", "198.18.250.2", "500");
    let (dir, mut c) = control_from_file(&text);
    let changed = text.replace("02:00:00:00:00:02", "02:00:00:00:00:12");
    let e = reload(&dir, &mut c, &changed).unwrap_err();
    assert!(e.contains("\"host\" is the punt link: it cannot be replaced while the gateway punts to it"), "{e}");
    let r = c.handle(&Request::DeleteInterface { name: "host".into() });
    assert!(!r.ok && r.error.as_deref().unwrap_or("").contains("host is the punt link"), "{:?}", r.error);
    assert!(c.state.if_index("host").is_ok());
}

/// Ports added through the API (`punt_port_add`) are kept by a reload that keeps
/// `[punt]`, whatever else of it changes, and go with it (each a `removed punt_port`
/// change) when a reload turns it off. A file tunnel on an added UDP port is refused
/// before anything changes.
#[test]
fn ports_added_at_run_time_stay_while_punt_does() {
    let (dir, mut c) = control_from_file(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
    let add = |protocol, port| Request::PuntPortAdd { protocol, port, owner: Some("k8s".into()) };
    assert!(c.handle(&add(lb::Protocol::Tcp, 10256)).ok);
    assert!(c.handle(&add(lb::Protocol::Udp, 3784)).ok);
    let added = |c: &Control| c.state.punt().map(|p| (p.added_tcp.keys().copied().collect::<Vec<_>>(), p.added_udp.len()));
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("other", "198.18.251.2", "500, 4500"))).unwrap(), ["punt to other"]);
    assert_eq!(added(&c), Some((vec![10256], 1)), "kept when the link and the file's ports change");
    assert_eq!(c.state.punt().unwrap().added_tcp[&10256], "k8s");
    // No change of the file: no change at all.
    assert!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("other", "198.18.251.2", "500, 4500"))).unwrap().is_empty());
    // A tunnel of the file on the added UDP port: refused, nothing changed.
    let tunnel = "\n[[udp_tunnel]]\nlocal = \"198.18.251.1\"\nremote = \"198.18.251.9\"\nencap = \"gue\"\nport = 3784\n";
    let e = reload(&dir, &mut c, &(LINKS.to_string() + &punt("other", "198.18.251.2", "500, 4500") + tunnel)).unwrap_err();
    assert!(
        e.ends_with(
            "udp_tunnel[0].port: 3784: punted to the host (punt_port_add, owner k8s); expected a port not punted; nothing was changed"
        ),
        "{e}"
    );
    assert_eq!((c.udptun.len(), c.state.udp_port(3784)), (0, None));
    // Off: the added ports go too, each named.
    let mut changes = reload(&dir, &mut c, LINKS).unwrap();
    changes.sort();
    assert_eq!(changes, ["punt off", "tcp/10256 (owner k8s)", "udp/3784 (owner k8s)"]);
    assert_eq!(c.state.punt(), None);
    // And on again: nothing comes back by itself.
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500"))).unwrap(), ["punt to host"]);
    assert_eq!(added(&c), Some((vec![], 0)));
}

/// An inbound SA of the file on a UDP port added at run time: refused, but on ESP in
/// UDP's 4500 (punted for the host's IKE daemon, whose messages behind the non-ESP
/// marker `espN-decrypt` still punts), as an SA added through the API there is.
#[test]
fn a_file_sa_may_receive_on_an_added_4500_only() {
    let (dir, mut c) = control_from_file(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
    for port in [4500, 4600] {
        let r = c.handle(&Request::PuntPortAdd { protocol: lb::Protocol::Udp, port, owner: Some("ike".into()) });
        assert!(r.ok, "{r:?}");
    }
    let sa = |port: u16| {
        format!(
            "\n[[ipsec_sa]]\nindex = 1\nspi = 3001\ndirection = \"inbound\"\nalgorithm = \"null\"\nlocal = \"198.18.0.1\"\n\
             remote = \"198.18.0.9\"\nudp_encap = true\nudp_dst_port = {port}\n"
        )
    };
    let base = LINKS.to_string() + &punt("host", "198.18.250.2", "500");
    let e = reload(&dir, &mut c, &(base.clone() + &sa(4600))).unwrap_err();
    assert!(
        e.ends_with("ipsec_sa[0].udp_dst_port: 4600: punted to the host (punt_port_add, owner ike); expected a port not punted; nothing was changed"),
        "{e}"
    );
    assert_eq!((c.ipsec.get(1).is_some(), c.state.udp_port(4600)), (false, None));
    reload(&dir, &mut c, &(base + &sa(4500))).unwrap();
    assert_eq!(c.state.udp_port(4500), Some(ip::tables::UdpApp::Esp));
    assert!(c.state.punt().unwrap().punts(false, 4500), "still punted");
}

/// A file `[punt]` port under a node_port service made with `ctl` is refused by field
/// before anything changes (the service would never see a packet again).
#[test]
fn a_reload_does_not_punt_a_ctl_node_port() {
    let (dir, mut c) = control_from_file(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
    let words: Vec<String> =
        "lb service add np node_port 0.0.0.0 30500 udp backend 198.18.0.40:80".split_whitespace().map(str::to_string).collect();
    let r = c.handle(&control::cli::parse(&words).unwrap());
    assert!(r.ok, "{r:?}");
    let e = reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500, 30500"))).unwrap_err();
    assert!(
        e.ends_with("punt.udp_ports: 30500: node_port service \"np\" (made with ctl) receives on it; expected a port no service of the node's addresses uses; nothing was changed"),
        "{e}"
    );
    assert_eq!(c.state.punt().unwrap().udp_ports, [500]);
}

/// `punt::repoint` is all or nothing: a worker that refuses (or does not answer) leaves
/// every worker's ports as they were, the old punt link's included, and the error says
/// what was pointed back. Fake workers answer `SetPortInput` here: worker 0 takes
/// everything, worker 1 refuses `pg1`.
#[test]
fn a_worker_that_refuses_leaves_the_punt_link_where_it_was() {
    use engine::worker::WorkerCmd;
    use std::sync::{Arc, Mutex};
    let text = r#"
[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "pg1"
type = "pg"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24"]
"#
    .to_string()
        + &punt("pg0", "198.18.0.2", "500");
    let (_dir, mut c) = control_from_file(&text);
    let pg1 = c.state.if_index("pg1").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    type Log = Arc<Mutex<Vec<(String, String)>>>;
    let fake = |refuse: Option<engine::IfIndex>, log: Option<Log>, names: Vec<String>| {
        let (tx, rx) = crossbeam_channel::unbounded::<WorkerCmd>();
        std::thread::spawn(move || {
            while let Ok(cmd) = rx.recv() {
                if let WorkerCmd::SetPortInput { if_index, input, reply } = cmd {
                    if let Some(l) = &log {
                        l.lock().unwrap().push((names[if_index.get()].clone(), input.clone()));
                    }
                    let _ = reply.send(if Some(if_index) == refuse { Err("refused".into()) } else { Ok(true) });
                }
            }
        });
        tx
    };
    let names: Vec<String> = c.state.interfaces().iter().map(|i| i.name.clone()).collect();
    c.workers = vec![fake(None, Some(log.clone()), names.clone()), fake(Some(pg1), None, names)];
    let e = control::punt::repoint(&mut c, Some("pg1".into())).unwrap_err();
    assert_eq!(
        e,
        "punt: pg1's packets to pg-punt-input: refused; worker 0 pointed back to pg-input; pg0 is the punt link again on every worker"
    );
    assert_eq!(c.punt_link.as_deref(), Some("pg0"));
    let seen: Vec<(String, String)> = log.lock().unwrap().clone();
    let want = [("pg0", "pg-input"), ("pg1", "pg-punt-input"), ("pg1", "pg-input"), ("pg0", "pg-punt-input")];
    assert_eq!(seen, want.map(|(a, b)| (a.to_string(), b.to_string())), "worker 0 ends as it began");
}

/// A reload that gives an interface a new address and brings a load_balancer service on
/// that address, on a TCP port punted at run time: the service's packets would come by
/// `ip4-local`, where the port goes to the host first, so the reload is refused by field
/// before anything changes. It is judged by the file's addresses, not the running
/// gateway's (which do not have it yet: the check passed, and the service was refused
/// half-way through, after the interface had changed). The other way round, a reload that
/// takes the address away with the service coming on is let through (the address is the
/// running gateway's, not the file's): the service's address is then routed to it.
#[test]
fn a_service_on_an_address_the_reload_adds_is_judged_by_the_files_addresses() {
    let base = LINKS.to_string() + &punt("host", "198.18.250.2", "500");
    // A running worker: a reload changes interfaces through it.
    let (dir, mut c, handle) = running_from_file(&base);
    let r = c.handle(&Request::PuntPortAdd { protocol: lb::Protocol::Tcp, port: 8443, owner: Some("k8s".into()) });
    assert!(r.ok, "{r:?}");
    let with_address = base.replace(r#"addresses = ["198.18.251.1/24"]"#, r#"addresses = ["198.18.251.1/24", "198.18.252.1/24"]"#);
    assert_ne!(with_address, base);
    let web = "\n[[lb_service]]\nname = \"web\"\ntype = \"load_balancer\"\nvip = \"198.18.252.1\"\nport = 8443\nprotocol = \"tcp\"\n\
               backends = [{ addr = \"198.18.251.40\", port = 8443 }]\n";
    let ours = |c: &Control| c.state.own_address_of(&"198.18.252.1/32".parse().unwrap()).map(str::to_string);
    let e = reload(&dir, &mut c, &(with_address.clone() + web)).unwrap_err();
    assert!(
        e.ends_with(
            "lb_service[0].port: 8443/tcp of the node's addresses is punted to the host (punt_port_add, owner k8s); \
             expected a port nothing else receives on; nothing was changed"
        ),
        "{e}"
    );
    assert_eq!((ours(&c), c.lb.state.service("web").is_some()), (None, false), "nothing changed");
    // The address alone, then the service without it: the address goes, the service comes.
    assert_eq!(reload(&dir, &mut c, &with_address).unwrap(), ["other"]);
    assert_eq!(ours(&c).as_deref(), Some("other"));
    let mut changes = reload(&dir, &mut c, &(base + web)).unwrap();
    changes.sort();
    assert_eq!(changes, ["other", "web"]);
    assert_eq!((ours(&c), c.lb.state.service("web").is_some()), (None, true));
    let r = c.handle(&Request::ShowIpFibEntry { query: "198.18.252.1".into() });
    assert_eq!((r.data["prefix"].as_str(), r.data["kind"].as_str() == Some("local")), (Some("198.18.252.1/32"), false), "{r:?}");
    assert!(c.state.punt().unwrap().punts(true, 8443), "still punted");
    stop(c, handle);
}

/// The other direction: a service made with `ctl` and a file `[punt]` port equal to the
/// service's, judged by the node's addresses once the file is applied, not the running
/// gateway's. A reload that gives an interface the service's address while punting its
/// port is refused by field before anything changes (the service's packets would come by
/// `ip4-local`, where the punted port goes to the host first). A reload that takes the
/// address away from under the service is refused (`reload::check_local_services`).
#[test]
fn a_file_punt_port_under_a_ctl_service_is_judged_by_the_files_addresses() {
    let base = LINKS.to_string() + &punt("host", "198.18.250.2", "500");
    // A running worker: a reload changes interfaces through it.
    let (dir, mut c, handle) = running_from_file(&base);
    let run = |c: &mut Control, line: &str| {
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        let r = c.handle(&control::cli::parse(&words).unwrap());
        assert!(r.ok, "{line}: {r:?}");
    };
    let add_web = "lb service add web load_balancer 198.18.252.1 8443 tcp backend 198.18.251.40:8443";
    run(&mut c, add_web);
    let with_address = base.replace(r#"addresses = ["198.18.251.1/24"]"#, r#"addresses = ["198.18.251.1/24", "198.18.252.1/24"]"#);
    assert_ne!(with_address, base);
    let punt_8443 = "tcp_ports = [8443]\n";
    let ours = |c: &Control| c.state.own_address_of(&"198.18.252.1/32".parse().unwrap()).map(str::to_string);
    let fib_kind = |c: &mut Control| {
        let r = c.handle(&Request::ShowIpFibEntry { query: "198.18.252.1".into() });
        assert_eq!(r.data["prefix"].as_str(), Some("198.18.252.1/32"), "{r:?}");
        r.data["kind"].as_str().unwrap().to_string()
    };
    let e = reload(&dir, &mut c, &(with_address.clone() + punt_8443)).unwrap_err();
    assert!(
        e.ends_with(
            "punt.tcp_ports: 8443: service \"web\" (on the node's address 198.18.252.1) (made with ctl) receives on it; \
             expected a port no service of the node's addresses uses; nothing was changed"
        ),
        "{e}"
    );
    assert_eq!(ours(&c), None, "nothing changed");
    assert!(!c.state.punt().unwrap().punts(true, 8443), "nothing changed");
    // The service again, on the address once it is the node's: local (its packets come
    // by ip4-local), not routed.
    run(&mut c, "lb service del web");
    assert_eq!(reload(&dir, &mut c, &with_address).unwrap(), ["other"]);
    run(&mut c, add_web);
    assert_ne!(fib_kind(&mut c), "lb-vip");
    // The address going away under the service is refused (nothing would deliver the
    // service's packets: it has no VIP route), before the punt check.
    let e = reload(&dir, &mut c, &(base + punt_8443)).unwrap_err();
    assert!(e.contains("198.18.252.1 of \"other\" is the address service \"web\" (made with ctl) receives on"), "{e}");
    assert_eq!(ours(&c).as_deref(), Some("other"), "nothing changed");
    assert!(!c.state.punt().unwrap().punts(true, 8443), "nothing changed");
    stop(c, handle);
}
