//! The punt link's first node (`ip-punt-inject`) is chosen per port: a reload may change
//! what `[punt]` hands to the host and which link it is (the two ports pointed at other
//! inputs, `control::punt::repoint`), or turn it on where none was at start-up. Replacing
//! the running punt link's interface, or (several workers) moving it to a link of a kind
//! that passes packets on the other way, are refused by field with nothing changed; so is
//! deleting the punt link with `ctl`.

use control::api::Request;
use control::config::Config;
use control::dataplane::{assemble, Control};

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

fn start(text: &str) -> (tempfile::TempDir, Control) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.toml");
    std::fs::write(&path, text).unwrap();
    let cfg = Config::load(&path).unwrap();
    let (mut c, _worker) = assemble(&cfg).unwrap().into_single();
    c.config_path = Some(path);
    (dir, c)
}

/// Reload `text`: Ok(the changes' names) or Err(the refusal).
fn reload(dir: &tempfile::TempDir, c: &mut Control, text: &str) -> Result<Vec<String>, String> {
    std::fs::write(dir.path().join("gw.toml"), text).unwrap();
    let r = c.handle(&Request::Reload { file: None });
    match r.ok {
        true => Ok(r.data["changes"].as_array().unwrap().iter().map(|ch| ch["name"].as_str().unwrap().to_string()).collect()),
        false => Err(r.error.unwrap_or_default()),
    }
}

#[test]
fn the_punt_settings_change_in_place_on_the_start_up_link() {
    let (dir, mut c) = start(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500, 4500"))).unwrap(), ["punt to host"]);
    assert_eq!(c.state.punt().unwrap().udp_ports, [500, 4500]);
    // Off and on again on the same link: its port still opens with ip-punt-inject.
    assert_eq!(reload(&dir, &mut c, LINKS).unwrap(), ["punt off"]);
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500"))).unwrap(), ["punt to host"]);
}

#[test]
fn a_reload_moves_the_punt_link_to_another_link_and_back() {
    let (dir, mut c) = start(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("other", "198.18.251.2", "500"))).unwrap(), ["punt to other"]);
    assert_eq!(c.state.punt().unwrap().interface, "other");
    assert_eq!(c.punt_link.as_deref(), Some("other"));
    assert_eq!(reload(&dir, &mut c, &(LINKS.to_string() + &punt("host", "198.18.250.2", "500"))).unwrap(), ["punt to host"]);
    assert_eq!(c.punt_link.as_deref(), Some("host"));
}

#[test]
fn a_punt_link_where_none_was_at_start_up_and_off_again() {
    let (dir, mut c) = start(LINKS);
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
    let (dir, mut c) = start(&(LINKS.to_string() + &punt("host", "198.18.250.2", "500")));
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
    let (dir, mut c) = start(&text);
    let changed = text.replace("02:00:00:00:00:02", "02:00:00:00:00:12");
    let e = reload(&dir, &mut c, &changed).unwrap_err();
    assert!(e.contains("\"host\" is the punt link: it cannot be replaced while the gateway punts to it"), "{e}");
    let r = c.handle(&Request::DeleteInterface { name: "host".into() });
    assert!(!r.ok && r.error.as_deref().unwrap_or("").contains("host is the punt link"), "{:?}", r.error);
    assert!(c.state.if_index("host").is_ok());
}
