//! A UDP port `[punt]` hands to the host (the file's `udp_ports` or `punt_port_add`) is
//! not taken by a tunnel or an inbound SA made or changed at run time: `ipN-local` hands
//! the tunnels' ports on before the punted ones, so the tunnel would silently take the
//! host's packets. Each request is refused naming itself, the field and the punted port,
//! with nothing changed. ESP in UDP's own port, 4500, may be both (`espN-decrypt` keeps
//! the ESP and punts the IKE behind the non-ESP marker), as in the file; and the other
//! way round, punting an inbound SA's other port is refused as a tunnel's is.

use control::api::{Reply, Request};
use control::config::Config;
use control::dataplane::{assemble, Control};
use ip::tables::UdpApp;

const CFG: &str = r#"
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

[punt]
interface = "host"
host4 = "198.18.250.2"
udp_ports = [500, 4500, 5555]
"#;

fn control() -> Control {
    let cfg = Config::parse(CFG, "gw.toml", std::path::Path::new(".")).unwrap();
    assemble(&cfg).unwrap().into_single().0
}

fn run(c: &mut Control, line: &str) -> Reply {
    let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    c.handle(&control::cli::parse(&words).unwrap_or_else(|e| panic!("{line}: {e}")))
}

fn ok(c: &mut Control, line: &str) {
    let r = run(c, line);
    assert!(r.ok, "{line}: {:?}", r.error);
}

fn json(c: &mut Control, req: &str) -> Reply {
    c.handle(&serde_json::from_str::<Request>(req).unwrap_or_else(|e| panic!("{req}: {e}")))
}

/// An inbound ESP-in-UDP SA receiving on `port` (`ipsec_sa_add`).
fn sa_add(index: u32, port: u16) -> String {
    format!(
        r#"{{"op":"ipsec_sa_add","index":{index},"spi":{},"direction":"inbound","algorithm":"null","local":"198.18.0.1","remote":"198.18.0.{}","udp_encap":true,"udp_dst_port":{port}}}"#,
        3000 + index,
        10 + index
    )
}

fn punted(port: u16, by: &str) -> String {
    format!("{port} is punted to the host ({by}): expected a port the host does not take")
}

#[test]
fn tunnels_and_sas_made_at_run_time_are_refused_on_a_punted_port() {
    let mut c = control();
    assert!(run(&mut c, "punt port add udp 3784 owner k8s").ok);
    let before = c.state.punt().cloned();

    // create_udp_tunnel, on the file's port and on an added one.
    let r = run(&mut c, "create udp tunnel local 198.18.0.1 remote 198.18.0.9 encap gue port 5555");
    assert_eq!(r.error.as_deref(), Some(format!("create_udp_tunnel: port: {}", punted(5555, "[punt] udp_ports")).as_str()));
    let r = run(&mut c, "create udp tunnel local 198.18.0.1 remote 198.18.0.9 encap gue port 3784");
    let e = format!("create_udp_tunnel: port: {}", punted(3784, "punt_port_add by owner k8s"));
    assert_eq!(r.error.as_deref(), Some(e.as_str()));
    assert_eq!(c.udptun.len(), 0);

    // set_udp_tunnel: a tunnel moved onto a punted port.
    ok(&mut c, "create udp tunnel local 198.18.0.1 remote 198.18.0.9 encap gue port 7000");
    let r = run(&mut c, "set udp tunnel udp_tunnel0 port 3784");
    assert_eq!(r.error.as_deref(), Some(format!("set_udp_tunnel: port: {}", punted(3784, "punt_port_add by owner k8s")).as_str()));
    assert_eq!(c.udptun.spec(0).map(|s| s.port), Some(7000), "nothing refused changed");

    // ipsec_sa_add: an inbound SA's ESP-in-UDP port.
    let r = json(&mut c, &sa_add(21, 5555));
    assert_eq!(r.error.as_deref(), Some(format!("ipsec_sa_add: udp_dst_port: {}", punted(5555, "[punt] udp_ports")).as_str()));
    assert!(c.ipsec.get(21).is_none());

    // ipsec_sa_update: an SA moved onto a punted port (the file's and added both).
    assert!(run(&mut c, "punt port add udp 5555 owner bfd").ok);
    assert!(json(&mut c, &sa_add(22, 4600)).ok);
    let r = run(&mut c, "ipsec sa set 22 udp-ports 4500 5555");
    let both = punted(5555, "[punt] udp_ports and punt_port_add by owner bfd");
    assert_eq!(r.error.as_deref(), Some(format!("ipsec_sa_update: udp_dst_port: {both}").as_str()));
    assert_eq!(c.ipsec.get(22).and_then(|s| s.spec.udp_receive_port()), Some(4600), "nothing refused changed");

    // The punted ports are still the host's: no tunnel took them in the demux.
    for port in [3784, 5555] {
        assert_eq!(c.state.udp_port(port), None, "{port}");
    }
    let mut after = c.state.punt().cloned().unwrap();
    after.added_udp.remove(&5555);
    assert_eq!(Some(after), before);

    // An outbound SA receives nothing: its port may be a punted one.
    let out = sa_add(23, 5555).replace("inbound", "outbound");
    assert!(json(&mut c, &out).ok);
    // Once the port is punted no more, the tunnel may take it.
    assert!(run(&mut c, "punt port del udp 3784 owner k8s").ok);
    ok(&mut c, "set udp tunnel udp_tunnel0 port 3784");
    assert_eq!(c.state.udp_port(3784), Some(UdpApp::Gue));
}

#[test]
fn esp_in_udp_on_4500_may_be_punted_and_an_sas_port_both() {
    let mut c = control();
    // 4500 is punted by the file: an inbound SA there is fine (IKE behind the non-ESP
    // marker still goes to the host from espN-decrypt).
    assert!(json(&mut c, &sa_add(21, 4500)).ok);
    assert_eq!(c.state.udp_port(4500), Some(UdpApp::Esp));
    // Moved off 4500 and back.
    ok(&mut c, "ipsec sa set 21 udp-ports 4500 4600");
    ok(&mut c, "ipsec sa set 21 udp-ports 4500 4500");
    // A UDP tunnel on 4500 is another matter: it would take the IKE too.
    let r = run(&mut c, "create udp tunnel local 198.18.0.1 remote 198.18.0.9 encap gue port 4500");
    assert_eq!(r.error.as_deref(), Some(format!("create_udp_tunnel: port: {}", punted(4500, "[punt] udp_ports")).as_str()));

    // The other way round, punting an SA's port: 4500 is fine, another is refused.
    let mut c = control();
    assert!(json(&mut c, &sa_add(21, 4500)).ok);
    assert!(json(&mut c, &sa_add(22, 4600)).ok);
    assert!(run(&mut c, "punt port add udp 4500 owner ike").ok);
    let r = run(&mut c, "punt port add udp 4600 owner ike");
    assert_eq!(
        r.error.as_deref(),
        Some("punt_port_add: port: 4600 is an inbound SA's ESP-in-UDP port: expected a port no tunnel of this gateway takes")
    );
}
