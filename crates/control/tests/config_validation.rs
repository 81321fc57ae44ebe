//! A bad configuration file is refused whole, with every error in one run (up to
//! `MAX_ERRORS`), each naming the file, the field path, its line and what was expected.

use control::config::{Config, ConfigError, MAX_ERRORS};
use control::dataplane::assemble;
use std::path::Path;

const PG0: &str =
    "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.0.1/24\", \"2001:db8::1/64\"]\n";
const PG1: &str = "[[interface]]\nname = \"pg1\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:02\"\naddresses = [\"198.18.1.1/24\"]\n";

fn refuse(text: &str) -> ConfigError {
    let cfg = Config::parse(text, "gw.toml", Path::new(".")).expect("the file parses; the error is semantic");
    match assemble(&cfg) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

/// The 1-based line of the `n`-th (0-based) line of `text` containing `needle`.
fn line_of(text: &str, needle: &str, n: usize) -> usize {
    text.lines().enumerate().filter(|(_, l)| l.contains(needle)).nth(n).map(|(i, _)| i + 1).expect("needle in text")
}

#[test]
fn three_mistakes_are_reported_in_one_run_with_their_lines() {
    let text = format!(
        "{PG0}[[interface]]\nname = \"pg1\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:02\"\naddresses = [\"198.18.1.1/24\", \"198.18.0.300/24\"]\nmtu = 40\n\
         [[interface]]\nname = \"pg2\"\ntype = \"pg\"\nmac = \"ff:ff:ff:ff:ff:ff\"\n"
    );
    let e = refuse(&text);
    let all: Vec<&ConfigError> = e.all().collect();
    let fields: Vec<&str> = all.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["interface[1].addresses[1]", "interface[2].mac"], "{e}");
    // pg1's bad address stops its other checks; the MTU is reported once the address is fixed.
    assert!(all.iter().all(|e| e.file == "gw.toml"), "{e}");
    assert_eq!(all[0].line, Some(line_of(&text, "198.18.0.300", 0)), "{e}");
    assert_eq!(all[1].line, Some(line_of(&text, "ff:ff:ff", 0)), "{e}");
    let text = text.replace("198.18.0.300/24", "198.18.3.1/24");
    let e = refuse(&text);
    let fields: Vec<&str> = e.all().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["interface[1].mtu", "interface[2].mac"], "{e}");
    assert_eq!(e.line, Some(line_of(&text, "mtu = 40", 0)), "{e}");
    // Displayed: one line per error, each with file, field and line.
    let shown = e.to_string();
    assert_eq!(shown.lines().count(), 2, "{shown}");
    assert!(shown.lines().all(|l| l.starts_with("gw.toml: interface[") && l.contains("(line ")), "{shown}");
}

#[test]
fn a_bad_address_says_what_is_wrong_once() {
    let e = refuse(&PG0.replace("198.18.0.1/24", "198.18.0.300/24"));
    assert_eq!(e.field, "interface[0].addresses[0]");
    assert!(e.message.contains("\"198.18.0.300\" is not an IPv4 or IPv6 address"), "{e}");
    assert_eq!(e.message.matches("expected").count(), 1, "{e}");
    assert_eq!(e.line, Some(5), "{e}");
    let e = refuse(&PG0.replace("198.18.0.1/24", "198.18.0.1/2x"));
    assert!(e.message.contains("length \"2x\" is not a number"), "{e}");
}

#[test]
fn an_empty_file_says_what_a_minimal_one_needs() {
    for text in ["", "[dataplane]\nbuffers = 1024\n"] {
        let e = refuse(text);
        assert_eq!(e.field, "interface", "{e}");
        assert!(e.message.contains("[[interface]]") && e.message.contains("type = \"pg\""), "{e}");
        // The example it gives is itself a valid gateway.
        let example: String = e.message.lines().filter(|l| l.starts_with("  ")).map(|l| format!("{}\n", l.trim())).collect();
        assemble(&Config::parse(&example, "example.toml", Path::new(".")).unwrap()).expect("the suggested minimal file runs");
    }
}

#[test]
fn the_same_address_twice_and_overlapping_subnets_are_refused() {
    let twice = format!("{PG0}{}", PG1.replace("198.18.1.1/24", "198.18.0.1/24"));
    let e = refuse(&twice);
    assert_eq!(e.field, "interface[1].addresses[0]", "{e}");
    assert!(e.message.contains("198.18.0.1 is already interface[0].addresses[0] (pg0)"), "{e}");
    let overlap = format!("{PG0}{}", PG1.replace("198.18.1.1/24", "198.18.0.129/25"));
    let e = refuse(&overlap);
    assert_eq!(e.field, "interface[1].addresses[0]", "{e}");
    assert!(e.message.contains("198.18.0.128/25 overlaps 198.18.0.0/24"), "{e}");
    let overlap6 = format!("{PG0}{}", PG1.replace("198.18.1.1/24", "2001:db8::2/48"));
    assert!(refuse(&overlap6).message.contains("2001:db8::/48 overlaps 2001:db8::/64"));
    // Two addresses of one subnet on the same interface are fine, as are neighbouring subnets.
    let ok = format!("{}{PG1}", PG0.replace("\"198.18.0.1/24\"", "\"198.18.0.1/24\", \"198.18.0.2/24\", \"198.18.5.1/24\""));
    assemble(&Config::parse(&ok, "gw.toml", Path::new(".")).unwrap()).expect("secondary addresses");
}

#[test]
fn group_macs_and_duplicate_neighbours_are_refused() {
    let n = |mac: &str, ip: &str| format!("[[neighbour]]\ninterface = \"pg0\"\nip = \"{ip}\"\nmac = \"{mac}\"\n");
    for (mac, says) in [("ff:ff:ff:ff:ff:ff", "broadcast"), ("01:00:5e:00:00:01", "multicast"), ("00:00:00:00:00:00", "all zero")] {
        let text = format!("{PG0}{}", n(mac, "198.18.0.2"));
        let e = refuse(&text);
        assert_eq!(e.field, "neighbour[0].mac", "{e}");
        assert!(e.message.contains(says) && e.message.contains("unicast"), "{e}");
        assert_eq!(e.line, Some(line_of(&text, mac, 0)), "{e}");
    }
    let e = refuse(&format!("{PG0}{}{}", n("02:00:00:00:00:09", "198.18.0.2"), n("02:00:00:00:00:0a", "198.18.0.2")));
    assert_eq!(e.field, "neighbour[1].ip", "{e}");
    assert!(e.message.contains("already neighbour[0]"), "{e}");
}

#[test]
fn duplicate_routes_are_refused_not_last_wins() {
    let r = |p: &str, via: &str| format!("[[route]]\nprefix = \"{p}\"\nvia = \"{via}\"\n");
    let text = format!("{PG0}{}{}{}", r("198.19.0.0/16", "198.18.0.2"), r("198.20.0.0/16", "198.18.0.3"), r("198.19.0.0/16", "198.18.0.4"));
    let e = refuse(&text);
    assert_eq!(e.field, "route[2].prefix", "{e}");
    assert!(e.message.contains("198.19.0.0/16 is already route[0]'s prefix"), "{e}");
    assert_eq!(e.line, Some(line_of(&text, "198.19.0.0/16", 1)), "{e}");
    assert!(e.more.is_empty(), "{e}");
}

#[test]
fn a_duplicate_gtpu_tunnel_is_named_by_its_key() {
    let t = |teid_in: u32| format!("[[gtpu_tunnel]]\nlocal = \"198.18.0.1\"\nremote = \"198.18.0.9\"\nteid_in = {teid_in}\nteid_out = 7\n");
    let text = format!("{PG0}{}{}{}", t(256), t(257), t(256));
    let e = refuse(&text);
    assert_eq!(e.field, "gtpu_tunnel[2].teid_in", "{e}");
    assert!(e.message.contains("local 198.18.0.1 teid_in 256 is already the key of gtpu_tunnel[0]"), "{e}");
    assert!(!e.to_string().contains("4294967295"), "{e}");
    assert_eq!(e.line, Some(line_of(&text, "teid_in = 256", 1)), "{e}");
}

/// `vecgate check` (and so `systemctl reload`) refuses a metrics address that `vecgate run`
/// could not listen on, as start-up does, instead of saying `ok`.
#[test]
fn a_bad_metrics_address_is_refused_by_check() {
    for listen in ["0.0.0.0:99999", "198.18.0.1", "localhost:9464"] {
        let text = format!("{PG0}[metrics]\nlisten = \"{listen}\"\n");
        let cfg = Config::parse(&text, "gw.toml", Path::new(".")).expect("the file parses");
        let e = control::dataplane::check(&cfg).expect_err(listen);
        assert_eq!(e.field, "metrics.listen", "{e}");
        assert!(e.message.contains(listen) && e.message.contains("expected ADDRESS:PORT"), "{e}");
        assert_eq!(e.line, Some(line_of(&text, "listen", 0)), "{e}");
    }
    let ok = format!("{PG0}[metrics]\nlisten = \"[2001:db8::1]:9464\"\n");
    control::dataplane::check(&Config::parse(&ok, "gw.toml", Path::new(".")).unwrap()).expect("a good address");
}

#[test]
fn a_missing_host_interface_is_reported_as_missing() {
    for kind in ["af_packet", "af_xdp"] {
        let text = format!("[[interface]]\nname = \"a\"\ntype = \"{kind}\"\nhost_if = \"vg-no-such-if\"\n");
        let e = refuse(&text);
        assert_eq!(e.field, "interface[0].host_if", "{e}");
        assert!(e.message.contains("\"vg-no-such-if\" does not exist"), "{e}");
        assert_eq!(e.line, Some(4), "{e}");
    }
}

#[test]
fn errors_are_bounded() {
    // One bad address stops that interface's checks, so each interface has one.
    let text: String = (0..MAX_ERRORS + 7)
        .map(|k| {
            format!("[[interface]]\nname = \"pg{k}\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.{k}.300/24\"]\n")
        })
        .collect();
    let e = refuse(&text);
    assert_eq!(e.all().count(), MAX_ERRORS, "{e}");
    assert_eq!(e.not_shown, 7, "{e}");
    assert!(e.to_string().ends_with("\ngw.toml: 7 more errors not shown"), "{e}");
    let last = e.more.last().unwrap();
    assert_eq!(last.field, format!("interface[{}].addresses[0]", MAX_ERRORS - 1));
    assert_eq!(last.line, Some(5 * MAX_ERRORS), "{e}");
}

/// Section errors still name the line of the field.
#[test]
fn lines_of_nested_fields() {
    let text = "[dataplane]\nworkers = 0\n".to_string() + PG0;
    let e = refuse(&text);
    assert_eq!((e.field.as_str(), e.line), ("dataplane.workers", Some(2)), "{e}");
    let e = refuse(&format!("{PG0}[dataplane.reassembly]\ntimeout_ms = 1\n"));
    assert_eq!((e.field.as_str(), e.line), ("dataplane.reassembly.timeout_ms", Some(7)), "{e}");
}

/// A prefix is routed from one place of the file, whichever sections name it.
#[test]
fn a_prefix_routed_from_two_places_is_refused() {
    let route = "[[route]]\nprefix = \"198.19.0.0/16\"\nvia = \"198.18.0.2\"\n";
    let gtpu = |teid: u32| {
        format!(
            "[[gtpu_tunnel]]\nlocal = \"198.18.0.1\"\nremote = \"198.18.0.9\"\nteid_in = {teid}\nteid_out = 7\nue = \"198.19.0.0/16\"\n"
        )
    };
    let udp = "[[udp_tunnel]]\nlocal = \"198.18.0.1\"\nremote = \"198.18.0.2\"\nencap = \"gue\"\nroutes = [\"198.19.0.0/16\"]\n";
    let sa = |index: u32| {
        format!(
            "[[ipsec_sa]]\nindex = {index}\nspi = {}\ndirection = \"outbound\"\nalgorithm = \"null\"\nlocal = \"198.18.0.1\"\nremote = \"198.18.0.9\"\nroutes = [\"198.19.0.0/16\"]\n",
            1000 + index
        )
    };
    for (extra, field, other) in [
        (format!("{route}{}", sa(1)), "ipsec_sa[0].routes[0]", "route[0].prefix"),
        (format!("{}{}", sa(1), sa(2)), "ipsec_sa[1].routes[0]", "ipsec_sa[0].routes[0]"),
        (format!("{}{}", gtpu(5), gtpu(6)), "gtpu_tunnel[1].ue", "gtpu_tunnel[0].ue"),
        (format!("{route}{}", gtpu(5)), "gtpu_tunnel[0].ue", "route[0].prefix"),
        (format!("{}{udp}", gtpu(5)), "udp_tunnel[0].routes[0]", "gtpu_tunnel[0].ue"),
    ] {
        let text = format!("{PG0}{extra}");
        let e = refuse(&text);
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(&format!("198.19.0.0/16 is already routed by {other}")), "{e}");
        assert!(e.line.is_some(), "{e}");
    }
}

#[test]
fn the_same_ipsec_policy_twice_is_refused() {
    let pol = "[[ipsec_policy]]\nspd = 1\ndirection = \"outbound\"\naction = \"bypass\"\npriority = 5\nremote = \"198.19.0.0/16\"\n";
    let text = format!("{PG0}{pol}{pol}");
    let e = refuse(&text);
    assert_eq!(e.field, "ipsec_policy[1]", "{e}");
    assert!(e.message.contains("the same policy as ipsec_policy[0]"), "{e}");
    assert_eq!(e.line, Some(line_of(&text, "[[ipsec_policy]]", 1)), "{e}");
    // Differing in priority only, they are two policies.
    let other = pol.replace("priority = 5", "priority = 6");
    assemble(&Config::parse(&format!("{PG0}{pol}{other}"), "gw.toml", Path::new(".")).unwrap()).expect("two policies");
}
