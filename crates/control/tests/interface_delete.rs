//! `delete interface` refuses an interface whose address a GTP-U tunnel, a UDP tunnel, an
//! IPsec SA, the load balancer's SNAT or the UPF's N3 sends from (they would go on
//! sending from an address the gateway no longer has), or a service is on, naming them;
//! once they are gone it deletes it.

use control::config::Config;
use control::dataplane::{assemble, Control};

const LINKS: &str = r#"
[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "eth1"
type = "null"
mac = "02:00:00:00:00:02"
addresses = ["198.18.2.1/24", "2001:db8:2::1/64"]
"#;

fn start(text: &str) -> Control {
    let cfg = Config::parse(text, "gw.toml", std::path::Path::new(".")).unwrap();
    assemble(&cfg).unwrap().into_single().0
}

/// Run a `vecgate ctl` command line: Ok(reply text) or Err(the refusal).
fn ctl(c: &mut Control, line: &str) -> Result<String, String> {
    let words: Vec<String> = line.split_whitespace().map(String::from).collect();
    let r = c.handle(&control::cli::parse(&words).unwrap());
    if r.ok {
        Ok(r.text)
    } else {
        Err(r.error.unwrap_or_default())
    }
}

#[test]
fn an_interface_that_tunnels_and_sas_send_from_is_not_deleted() {
    let mut c = start(LINKS);
    ctl(&mut c, "create gtpu tunnel local 198.18.2.1 remote 198.18.2.5 teid-in 78 teid-out 7").unwrap();
    ctl(&mut c, "create udp tunnel local 2001:db8:2::1 remote 2001:db8:2::8 encap gue port 7000").unwrap();
    ctl(&mut c, "ipsec sa add 20 spi 3000 outbound alg null local 198.18.2.1 remote 198.18.2.9").unwrap();
    let e = ctl(&mut c, "delete interface eth1").unwrap_err();
    assert!(e.starts_with("eth1 holds the local address of "), "{e}");
    for who in ["gtpu_tunnel", "(local 198.18.2.1)", "udp_tunnel", "(local 2001:db8:2::1)", "SA 20"] {
        assert!(e.contains(who), "{who} in {e}");
    }
    assert!(c.state.if_index("eth1").is_ok(), "still there");
    // pg0 holds none of them.
    ctl(&mut c, "ipsec sa del 20").unwrap();
    let gtpu = c.gtpu.tunnels().map(|(id, _)| id).next().unwrap();
    ctl(&mut c, &format!("delete gtpu tunnel gtpu_tunnel{gtpu}")).unwrap();
    let e = ctl(&mut c, "delete interface eth1").unwrap_err();
    assert!(e.contains("udp_tunnel") && !e.contains("gtpu_tunnel") && !e.contains("SA 20"), "{e}");
    let udp = c.udptun.tunnels().map(|(id, _)| id).next().unwrap();
    ctl(&mut c, &format!("delete udp tunnel udp_tunnel{udp}")).unwrap();
    ctl(&mut c, "delete interface eth1").unwrap();
    assert!(c.state.if_index("eth1").is_err());
}

#[test]
fn the_load_balancers_snat_address_keeps_its_interface() {
    let mut c = start(&format!("{LINKS}\n[lb]\nsnat6 = \"2001:db8:2::1\"\n"));
    let e = ctl(&mut c, "delete interface eth1").unwrap_err();
    assert!(e.contains("[lb] snat6 (local 2001:db8:2::1)"), "{e}");
    ctl(&mut c, "delete interface pg0").unwrap();
}

/// A service on one of the interface's addresses (served by `ipN-local`, without a
/// route) would stop being served when the address goes.
#[test]
fn a_service_on_its_address_keeps_an_interface() {
    let mut c = start(LINKS);
    ctl(&mut c, "lb service add ext load_balancer 198.18.2.1 80 tcp backend 198.18.0.40:80").unwrap();
    ctl(&mut c, "lb service add np node_port 0.0.0.0 30080 tcp backend 198.18.0.40:80").unwrap();
    let e = ctl(&mut c, "delete interface eth1").unwrap_err();
    assert_eq!(e, "eth1 holds the local address of service \"ext\" (local 198.18.2.1): delete or move them first");
    ctl(&mut c, "lb service del ext").unwrap();
    ctl(&mut c, "delete interface eth1").unwrap();
}

/// The UPF's N3 address: the F-TEIDs handed to SMFs name it.
#[test]
fn the_upfs_n3_address_keeps_its_interface() {
    let mut c = start(&format!("{LINKS}\n[pfcp]\nlisten = \"127.0.0.1:0\"\nn3 = \"198.18.2.1\"\nn3_ipv6 = \"2001:db8:2::1\"\n"));
    let e = ctl(&mut c, "delete interface eth1").unwrap_err();
    assert!(e.contains("[pfcp] n3 (local 198.18.2.1)") && e.contains("[pfcp] n3_ipv6 (local 2001:db8:2::1)"), "{e}");
    assert!(c.state.if_index("eth1").is_ok());
}
