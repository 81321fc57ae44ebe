//! The feature sections (`[[ipsec_sa]]`, `[[ipsec_policy]]`, `[[ipsec_spd]]`, `[lb]`,
//! `[[lb_service]]`) report every entry's error in the same run as the core sections'
//! errors, in the same form: file, field path, line, what was expected; bounded by
//! `MAX_ERRORS` like the rest.

use control::config::{Config, ConfigError, MAX_ERRORS};
use control::dataplane::assemble;
use std::path::Path;

const PG0: &str =
    "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.0.1/24\", \"2001:db8::1/64\"]\n";

fn refuse(text: &str) -> ConfigError {
    let cfg = Config::parse(text, "gw.toml", Path::new(".")).expect("the file parses; the errors are semantic");
    match assemble(&cfg) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

/// The 1-based line of the `n`-th (0-based) line of `text` containing `needle`.
fn line_of(text: &str, needle: &str, n: usize) -> usize {
    text.lines().enumerate().filter(|(_, l)| l.contains(needle)).nth(n).map(|(i, _)| i + 1).expect("needle in text")
}

fn sa(index: u32, spi: u32, extra: &str) -> String {
    format!(
        "[[ipsec_sa]]\nindex = {index}\nspi = {spi}\ndirection = \"inbound\"\nalgorithm = \"null\"\nlocal = \"198.18.0.1\"\nremote = \"198.18.0.9\"\n{extra}"
    )
}

fn policy(extra: &str) -> String {
    format!("[[ipsec_policy]]\nspd = 1\ndirection = \"outbound\"\naction = \"bypass\"\n{extra}")
}

fn service(name: &str, port: u16, extra: &str) -> String {
    format!("[[lb_service]]\nname = \"{name}\"\ntype = \"cluster_ip\"\nvip = \"198.18.128.10\"\nport = {port}\nprotocol = \"tcp\"\n{extra}")
}

#[test]
fn every_feature_entry_error_is_reported_with_the_core_errors() {
    let text = [
        PG0.replace("198.18.0.1/24", "198.18.0.300/24"),
        "[[route]]\nprefix = \"198.19.0.0/16\"\nvia = \"198.18.0.2\"\n".into(),
        "[[route]]\nprefix = \"198.19.0.0/16\"\nvia = \"198.18.0.3\"\n".into(),
        sa(1, 5, ""),
        sa(2, 1000, ""),
        sa(3, 1001, "remote = \"2001:db8::9\"\n").replace("remote = \"198.18.0.9\"\n", ""),
        sa(2, 1002, ""),
        sa(4, 1000, ""),
        policy("remote = \"198.19.0.0/33\"\n"),
        policy("priority = 4\n"),
        policy("sa = 7\n"),
        "[[ipsec_spd]]\nid = 40000\ninterfaces = [\"pg0\"]\n".into(),
        "[lb]\nsnat4 = \"2001:db8::5\"\n".into(),
        service("web", 80, "backends = [{ addr = \"198.19.1.10\", port = 8080, weight = 0 }]\n"),
        service("dns", 0, ""),
        service("api", 443, ""),
        service("api", 444, ""),
        service("api2", 443, ""),
    ]
    .concat();
    let e = refuse(&text);
    let all: Vec<&ConfigError> = e.all().collect();
    let fields: Vec<&str> = all.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "interface[0].addresses[0]",
            "ipsec_sa[0].spi",
            "ipsec_sa[2].remote",
            "ipsec_sa[3].index",
            "ipsec_sa[4].spi",
            "ipsec_policy[0].remote",
            "ipsec_policy[2].sa",
            "ipsec_spd[0].id",
            "lb.snat4",
            "lb_service[0].backends[0].weight",
            "lb_service[1].port",
            "lb_service[3].name",
            "lb_service[4].port",
        ],
        "{e}"
    );
    assert_eq!(e.not_shown, 0);
    for err in &all {
        assert_eq!(err.file, "gw.toml", "{err:?}");
        assert!(err.message.contains("expected"), "says what was expected: {err:?}");
    }
    let line = |f: &str| all.iter().find(|e| e.field == f).and_then(|e| e.line);
    assert_eq!(line("ipsec_sa[0].spi"), Some(line_of(&text, "spi = 5", 0)), "{e}");
    assert_eq!(line("ipsec_sa[2].remote"), Some(line_of(&text, "remote = \"2001:db8::9\"", 0)), "{e}");
    assert_eq!(line("ipsec_sa[3].index"), Some(line_of(&text, "index = 2", 1)), "{e}");
    assert_eq!(line("ipsec_sa[4].spi"), Some(line_of(&text, "spi = 1000", 1)), "{e}");
    assert_eq!(line("ipsec_policy[0].remote"), Some(line_of(&text, "198.19.0.0/33", 0)), "{e}");
    assert_eq!(line("ipsec_spd[0].id"), Some(line_of(&text, "id = 40000", 0)), "{e}");
    assert_eq!(line("lb_service[0].backends[0].weight"), Some(line_of(&text, "weight = 0", 0)), "{e}");
    assert_eq!(line("lb_service[3].name"), Some(line_of(&text, "name = \"api\"", 1)), "{e}");
    // The duplicates name the entry they repeat.
    let msg = |f: &str| all.iter().find(|e| e.field == f).map(|e| e.message.clone()).unwrap();
    assert!(msg("ipsec_sa[3].index").contains("already ipsec_sa[1]'s index"), "{e}");
    assert!(msg("ipsec_sa[4].spi").contains("already inbound ipsec_sa[1]'s SPI"), "{e}");
    assert!(msg("lb_service[3].name").contains("already lb_service[2]'s name"), "{e}");
    assert!(msg("lb_service[4].port").contains("198.18.128.10 port 443 tcp is already lb_service[2]'s"), "{e}");
    // Displayed: one line per error, each with the file, the field and its line.
    let shown = e.to_string();
    assert_eq!(shown.lines().count(), 13, "{shown}");
    assert!(shown.lines().all(|l| l.starts_with("gw.toml: ") && l.contains("(line ")), "{shown}");

    // With the address fixed, the routes are checked (a stage needs the interfaces
    // right): the duplicate route comes with the same feature errors, in one run.
    let fixed = text.replace("198.18.0.300/24", "198.18.0.1/24");
    let e = refuse(&fixed);
    let fields: Vec<&str> = e.all().map(|e| e.field.as_str()).collect();
    assert_eq!(fields.len(), 13, "{e}");
    assert_eq!((fields[0], fields[1], fields[12]), ("route[1].prefix", "ipsec_sa[0].spi", "lb_service[4].port"), "{e}");
    assert!(e.message.contains("already route[0]'s prefix"), "{e}");
}

/// What needs the interfaces (an SA's local address, an SPD's interfaces) is checked
/// when the section is built, again entry by entry.
#[test]
fn errors_that_need_the_interfaces_are_reported_per_entry() {
    let text = [
        PG0.to_string(),
        sa(1, 1000, "local = \"198.18.5.1\"\n").replacen("local = \"198.18.0.1\"\n", "", 1),
        sa(2, 1001, ""),
        sa(3, 1002, "local = \"198.18.6.1\"\n").replacen("local = \"198.18.0.1\"\n", "", 1),
    ]
    .concat();
    let e = refuse(&text);
    let fields: Vec<&str> = e.all().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["ipsec_sa[0].local", "ipsec_sa[2].local"], "{e}");
    assert!(e.message.contains("198.18.5.1 is not an address of this gateway"), "{e}");
    assert_eq!(e.line, Some(line_of(&text, "198.18.5.1", 0)), "{e}");

    let spd = "[[ipsec_spd]]\nid = 1\ninterfaces = [\"pg9\", \"pg0\", \"pg8\"]\n";
    let e = refuse(&format!("{PG0}{}{spd}", policy("")));
    let fields: Vec<&str> = e.all().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["ipsec_spd[0].interfaces[0]", "ipsec_spd[0].interfaces[2]"], "{e}");
}

/// `[pfcp]`'s N3 addresses go to SMFs in the F-TEIDs the UPF chooses: one no interface
/// has (a typo) would send every gNB's G-PDUs nowhere, so it is refused by field.
#[test]
fn a_pfcp_n3_address_no_interface_has_is_refused_by_field() {
    for (field, good, bad) in [("n3", "198.18.0.1", "198.18.9.1"), ("n3_ipv6", "2001:db8::1", "2001:db8:9::1")] {
        let n3 = if field == "n3" { "" } else { "n3 = \"198.18.0.1\"\n" };
        let pfcp = |v: &str| format!("[pfcp]\nlisten = \"127.0.0.1:0\"\n{n3}{field} = \"{v}\"\n");
        let text = format!("{PG0}{}", pfcp(bad));
        let e = refuse(&text);
        assert_eq!(e.field, format!("pfcp.{field}"), "{e}");
        assert!(e.message.contains(&format!("{bad}: expected an address of one of the interfaces")), "{e}");
        assert_eq!(e.line, Some(line_of(&text, bad, 0)), "{e}");
        let cfg = Config::parse(&format!("{PG0}{}", pfcp(good)), "gw.toml", Path::new(".")).unwrap();
        assert!(assemble(&cfg).is_ok(), "{field} = {good} is pg0's");
    }
}

#[test]
fn feature_errors_are_bounded_like_the_rest() {
    let text: String = std::iter::once(PG0.to_string()).chain((0..MAX_ERRORS as u32 + 5).map(|k| sa(k, k, ""))).collect();
    let e = refuse(&text);
    assert_eq!(e.all().count(), MAX_ERRORS, "{e}");
    assert_eq!(e.not_shown, 5, "{e}");
    assert_eq!(e.more.last().unwrap().field, format!("ipsec_sa[{}].spi", MAX_ERRORS - 1));
    assert!(e.to_string().ends_with("\ngw.toml: 5 more errors not shown"), "{e}");
}

/// An entry with an error still holds its name, index and SPI: a repeat of it is reported
/// in the same run, not on the next one.
#[test]
fn a_repeat_of_a_bad_entry_is_reported_too() {
    let text = [
        PG0.to_string(),
        sa(1, 5, ""),
        sa(1, 1000, ""),
        service("web", 80, "backends = [{ addr = \"198.19.1.10\", port = 8080, weight = 0 }]\n"),
        service("web", 81, ""),
    ]
    .concat();
    let e = refuse(&text);
    let fields: Vec<&str> = e.all().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["ipsec_sa[0].spi", "ipsec_sa[1].index", "lb_service[0].backends[0].weight", "lb_service[1].name"], "{e}");
}

/// `urpf` is for inbound tunnel-mode SAs: on an outbound or a transport-mode SA it is
/// refused by name, with its line; on an inbound tunnel-mode SA it is taken.
#[test]
fn urpf_only_on_inbound_tunnel_sas() {
    let text = [
        PG0.to_string(),
        sa(1, 1000, "urpf = \"strict\"\n"),
        sa(2, 1001, "urpf = \"loose\"\nmode = \"transport\"\n"),
        sa(3, 1002, "urpf = \"strict\"\n").replace("\"inbound\"", "\"outbound\""),
    ]
    .concat();
    let e = refuse(&text);
    let fields: Vec<&str> = e.all().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["ipsec_sa[1].urpf", "ipsec_sa[2].urpf"], "{e}");
    assert!(e.message.contains("loose: expected off except on an inbound tunnel-mode SA"), "{e}");
    assert_eq!(e.line, Some(line_of(&text, "urpf = \"loose\"", 0)), "{e}");
    let unknown = Config::parse(&format!("{PG0}{}", sa(1, 1000, "urpf = \"sometimes\"\n")), "gw.toml", Path::new("."));
    assert!(unknown.is_err_and(|e| e.to_string().contains("ipsec_sa") && e.to_string().contains("sometimes")));
}

/// `[punt]`: each mistake refused by its field, with what was expected; a good section
/// is taken.
#[test]
fn punt_errors_name_their_field() {
    let punt = |body: &str| format!("{PG0}\n[punt]\n{body}");
    let good = "interface = \"pg0\"\nhost4 = \"198.18.0.2\"\nhost6 = \"2001:db8::2\"\nudp_ports = [500, 4500]\ntcp_ports = [179]\n";
    let cfg = Config::parse(&punt(good), "gw.toml", Path::new(".")).unwrap();
    assert!(assemble(&cfg).is_ok());
    // No ports: the link and host for ports added at run time (`punt_port_add`).
    let cfg = Config::parse(&punt("interface = \"pg0\"\nhost4 = \"198.18.0.2\"\n"), "gw.toml", Path::new(".")).unwrap();
    assert!(assemble(&cfg).is_ok_and(|a| a.control.state.punt().is_some_and(|p| p.tcp_ports.is_empty())));
    let cases = [
        (good.replace("\"pg0\"", "\"eth9\""), "punt.interface", "\"eth9\": expected the name of an [[interface]]"),
        (good.replace("198.18.0.2", "2001:db8::5"), "punt.host4", "expected the host's IPv4 address"),
        (good.replace("198.18.0.2", "198.18.9.9"), "punt.host4", "198.18.9.9 is not on a connected subnet of \"pg0\""),
        (good.replace("2001:db8::2", "2001:db8:9::2"), "punt.host6", "not on a connected subnet"),
        ("interface = \"pg0\"\nudp_ports = [500]\n".to_string(), "punt", "no host4 or host6"),
        (good.replace("[179]", "[179, 0]"), "punt.tcp_ports", "0: expected ports 1 to 65535"),
    ];
    for (body, field, what) in cases {
        let text = punt(&body);
        let e = refuse(&text);
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(what), "{e}");
        let at = match field.strip_prefix("punt.") {
            Some(key) => line_of(&text, &format!("{key} ="), 0),
            None => line_of(&text, "[punt]", 0),
        };
        assert_eq!(e.line, Some(at), "{e}");
    }
    let gtpu = format!(
        "{}[[gtpu_tunnel]]\nlocal = \"198.18.0.1\"\nremote = \"198.18.0.9\"\nteid_in = 1\nteid_out = 2\n",
        punt(&good.replace("[500, 4500]", "[2152]"))
    );
    let e = refuse(&gtpu);
    assert_eq!((e.field.as_str(), e.message.contains("2152 is GTP-U's port")), ("punt.udp_ports", true), "{e}");
}
