//! `[punt]`: ports of the gateway's own addresses whose packets go to the host's stack
//! behind one of its links (a tap), where a daemon answers them: an IKE daemon (UDP 500
//! and 4500, with the IKE messages behind ESP-in-UDP's non-ESP marker), a BGP speaker, sshd.
//! The host's replies come back through the link and are routed like any packet.
//!
//! ```toml
//! [punt]
//! interface = "host"          # the link toward the host's stack
//! host4 = "198.18.250.2"      # the host's address on it (IPv4 packets' next hop)
//! host6 = "2001:db8:250::2"   # likewise for IPv6 (either or both)
//! udp_ports = [500, 4500]
//! tcp_ports = [179]
//! ```

use crate::config::{Config, ConfigError};
use ip::punt::PuntSpec;
use ip::tables::UdpApp;
use ip::RouterState;
use serde::Deserialize;
use std::net::{Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PuntConfig {
    pub interface: String,
    #[serde(default)]
    pub host4: Option<String>,
    #[serde(default)]
    pub host6: Option<String>,
    #[serde(default)]
    pub udp_ports: Vec<u16>,
    #[serde(default)]
    pub tcp_ports: Vec<u16>,
}

/// The section as the router state takes it, checked field by field against `state`'s
/// interfaces and tunnel ports.
pub fn spec(cfg: &Config, pc: &PuntConfig, state: &RouterState) -> Result<PuntSpec, ConfigError> {
    if state.if_index(&pc.interface).is_err() {
        return Err(cfg.err(
            "punt.interface",
            format!("{:?}: expected the name of an [[interface]] (the link toward the host's stack)", pc.interface),
        ));
    }
    let host4 = pc
        .host4
        .as_deref()
        .map(|a| crate::config::parse_field::<Ipv4Addr>(cfg, "punt.host4", a, "the host's IPv4 address on the punt interface"))
        .transpose()?;
    let host6 = pc
        .host6
        .as_deref()
        .map(|a| crate::config::parse_field::<Ipv6Addr>(cfg, "punt.host6", a, "the host's IPv6 address on the punt interface"))
        .transpose()?;
    if host4.is_none() && host6.is_none() {
        return Err(cfg.err("punt", "no host4 or host6: expected the host's address on the punt interface for at least one family"));
    }
    // No ports is a section all the same: the link and the host for ports added at run
    // time (`punt_port_add`), and the host's ping replies.
    for (field, ports, tcp) in [("punt.udp_ports", &pc.udp_ports, false), ("punt.tcp_ports", &pc.tcp_ports, true)] {
        if let Some(why) = ports.iter().find_map(|&p| port_refusal(state, tcp, p)) {
            return Err(cfg.err(field, why));
        }
    }
    let spec = PuntSpec {
        interface: pc.interface.clone(),
        host4,
        host6,
        udp_ports: pc.udp_ports.clone(),
        tcp_ports: pc.tcp_ports.clone(),
        ..Default::default()
    };
    let host_on_link = |hop: Option<std::net::IpAddr>, field: &str| match hop {
        Some(h) if !state.on_interface(h, &pc.interface) => Err(cfg.err(
            field,
            format!("{h} is not on a connected subnet of {:?}: expected the host's address on the punt interface", pc.interface),
        )),
        _ => Ok(()),
    };
    host_on_link(host4.map(Into::into), "punt.host4")?;
    host_on_link(host6.map(Into::into), "punt.host6")?;
    Ok(spec)
}

/// Why `port` (TCP if `tcp`, else UDP) of the gateway's addresses cannot be punted, if it
/// cannot: the one check of the file's ports (`punt.udp_ports`, `punt.tcp_ports`) and of
/// those added at run time (`punt_port_add`). A tunnel's own port reaches its input node
/// first; ESP in UDP's (4500) is fine: its IKE messages are punted from `espN-decrypt`
/// ([`shares_punted_port`]; [`receiver_refusal`] is the same rule the other way round).
/// (A service on the port is the load balancer's check, `crate::lb::local_port_service`,
/// as the file's services are checked against the file's ports when they are added.)
pub fn port_refusal(state: &RouterState, tcp: bool, port: u16) -> Option<String> {
    if port == 0 {
        return Some("0: expected ports 1 to 65535".into());
    }
    if tcp {
        return None;
    }
    let app = state.udp_port(port)?;
    if shares_punted_port(app, port) {
        return None;
    }
    let what = match app {
        UdpApp::Gtpu => "GTP-U's",
        UdpApp::Gue => "a UDP tunnel's",
        UdpApp::Esp => "an inbound SA's ESP-in-UDP",
    };
    Some(format!("{port} is {what} port: expected a port no tunnel of this gateway takes"))
}

/// Whether a tunnel feature receiving on UDP `port` of the gateway's addresses and
/// `[punt]` punting that port can both be: only ESP in UDP on its own port, 4500 (RFC
/// 3948), where `espN-decrypt` keeps the ESP and hands the IKE messages behind the
/// non-ESP marker to the host's IKE daemon. Any other tunnel's port (GTP-U's, a UDP
/// tunnel's, an inbound SA's other than 4500) is handed on by `ipN-local` before the
/// punted ones, so the tunnel would silently take the host's packets.
pub fn shares_punted_port(app: UdpApp, port: u16) -> bool {
    app == UdpApp::Esp && port == wire::esp::UDP_PORT
}

/// Why a tunnel or an inbound SA made or changed at run time (`create_udp_tunnel`,
/// `set_udp_tunnel`, `ipsec_sa_add`, `ipsec_sa_update`; `app` what it is) cannot receive
/// on UDP `port` of the gateway's addresses, if `[punt]` punts that port (the file's
/// `udp_ports` or `punt_port_add`): [`port_refusal`]'s rule the other way round, as the
/// punted port was there first. The caller names the request and the field. (GTP-U's
/// port, 2152, is taken from start-up on: never punted, so never refused here.)
pub fn receiver_refusal(state: &RouterState, app: UdpApp, port: u16) -> Option<String> {
    let spec = state.punt()?;
    if !spec.punts(false, port) || shares_punted_port(app, port) {
        return None;
    }
    let file = spec.udp_ports.contains(&port).then(|| "[punt] udp_ports".to_string());
    let added = spec.added_udp.get(&port).map(|owner| format!("punt_port_add by owner {owner}"));
    let by = [file, added].into_iter().flatten().collect::<Vec<_>>().join(" and ");
    Some(format!("{port} is punted to the host ({by}): expected a port the host does not take"))
}

/// What a reload's `[punt]` did: whether the tables changed, and the ports added at run
/// time that went with a `[punt]` turned off (`tcp/10256 (owner k8s)`).
#[derive(Debug, Default)]
pub struct Applied {
    pub changed: bool,
    pub dropped: Vec<String>,
}

/// Apply the file's `[punt]` (start-up and reload). The ports added at run time stay
/// while the file has a `[punt]` (its link and ports may change around them); a file
/// without one drops them, as deleting an interface takes the routes through it: the
/// link and the host's address they need came from the section.
pub fn apply(cfg: &Config, state: &mut RouterState) -> Result<Applied, ConfigError> {
    let mut spec = cfg.punt.as_ref().map(|pc| spec(cfg, pc, state)).transpose()?;
    let mut dropped = Vec::new();
    match (spec.as_mut(), state.punt()) {
        (Some(new), Some(old)) => {
            new.added_udp = old.added_udp.clone();
            new.added_tcp = old.added_tcp.clone();
        }
        (None, Some(old)) => {
            for (tcp, name) in [(false, "udp"), (true, "tcp")] {
                dropped.extend(old.added(tcp).iter().map(|(port, owner)| format!("{name}/{port} (owner {owner})")));
            }
        }
        _ => {}
    }
    if state.punt() == spec.as_ref() {
        return Ok(Applied::default());
    }
    state.set_punt(spec).map_err(|e| cfg.err("punt", e.to_string()))?;
    Ok(Applied { changed: true, dropped })
}

/// An owner's name: what `show punt` prints and a controller reconciles by.
fn check_owner(op: &str, owner: &str) -> Result<(), String> {
    let good = !owner.is_empty() && owner.len() <= 32 && owner.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if good {
        Ok(())
    } else {
        Err(format!("{op}: owner: {owner:?}: expected 1 to 32 letters, digits, '-', '_' or '.'"))
    }
}

/// A punted port's protocol: TCP or UDP, as `[punt]`'s `tcp_ports` and `udp_ports`
/// (the load balancer's protocols are more: SCTP is not punted).
pub fn tcp_or_udp<'de, D: serde::Deserializer<'de>>(d: D) -> Result<lb::Protocol, D::Error> {
    use serde::Deserialize;
    match lb::Protocol::deserialize(d)? {
        lb::Protocol::Sctp => Err(serde::de::Error::custom("protocol sctp: expected tcp or udp (ports punted to the host are TCP or UDP)")),
        p => Ok(p),
    }
}

/// The default owner of a port added without one.
pub const CTL_OWNER: &str = "ctl";

/// `punt_port_add`: punt one more port, with `[punt]`'s link and host, at run time. Its
/// owner is recorded; adding it again for the same owner changes nothing (a controller
/// re-asserts what it serves), for another owner is refused (delete it first). A port
/// the file punts too is recorded all the same: it stays punted if the file drops it.
pub fn add_port(
    c: &mut crate::dataplane::Control,
    protocol: lb::Protocol,
    port: u16,
    owner: Option<&str>,
) -> Result<crate::api::Reply, String> {
    const OP: &str = "punt_port_add";
    let owner = owner.unwrap_or(CTL_OWNER);
    check_owner(OP, owner)?;
    let tcp = protocol == lb::Protocol::Tcp;
    let name = format!("{}/{port}", protocol.name());
    let Some(spec) = c.state.punt() else {
        return Err(format!(
            "{OP}: the gateway has no [punt] section: the punt link and the host's addresses come only from the config file (add [punt] and reload)"
        ));
    };
    if let Some(why) = port_refusal(&c.state, tcp, port) {
        return Err(format!("{OP}: port: {why}"));
    }
    match spec.added(tcp).get(&port) {
        Some(o) if o == owner => {
            let data = serde_json::json!({ "protocol": protocol.name(), "port": port, "owner": owner, "changed": false });
            return Ok(crate::api::Reply::ok(data, format!("punt {name} unchanged (already added for {owner})")));
        }
        Some(o) => {
            return Err(format!("{OP}: port: {name} was added by owner {o:?}: expected a port no other owner added (delete it first)"))
        }
        None => {}
    }
    if let Some((_, service)) = crate::lb::local_port_service(&c.lb.state, port, protocol, |a| crate::lb::is_node_address(&c.state, a)) {
        return Err(format!(
            "{OP}: port: {name} of the node's addresses: {service} receives on it; expected a port no service of the node's addresses uses"
        ));
    }
    let also = if spec.file_ports(tcp).contains(&port) { " (the file punts it too)" } else { "" };
    let mut spec = spec.clone();
    spec.added_mut(tcp).insert(port, owner.to_string());
    c.state.set_punt(Some(spec)).map_err(|e| format!("{OP}: {e}"))?;
    c.publish();
    let data = serde_json::json!({ "protocol": protocol.name(), "port": port, "owner": owner, "changed": true });
    Ok(crate::api::Reply::ok(data, format!("punt {name} added for {owner}{also}")))
}

/// `punt_port_del`: stop punting a port added at run time (`owner`, if given, must be
/// the one that added it). The file's ports are the file's: a reload changes those.
pub fn del_port(
    c: &mut crate::dataplane::Control,
    protocol: lb::Protocol,
    port: u16,
    owner: Option<&str>,
) -> Result<crate::api::Reply, String> {
    const OP: &str = "punt_port_del";
    let tcp = protocol == lb::Protocol::Tcp;
    let name = format!("{}/{port}", protocol.name());
    let Some(spec) = c.state.punt() else { return Err(format!("{OP}: the gateway has no [punt] section: no port is punted")) };
    let had = match spec.added(tcp).get(&port) {
        Some(o) if owner.is_some_and(|w| w != o) => {
            return Err(format!("{OP}: owner: {name} was added by owner {o:?}, not {:?}", owner.unwrap_or_default()))
        }
        Some(o) => o.clone(),
        None if spec.file_ports(tcp).contains(&port) => {
            return Err(format!("{OP}: port: {name} is the file's ([punt] {}_ports): a reload changes those", protocol.name()))
        }
        None => return Err(format!("{OP}: port: {name} was not added (`show punt` lists the ports)")),
    };
    let still = if spec.file_ports(tcp).contains(&port) { " (the file still punts it)" } else { "" };
    let mut spec = spec.clone();
    spec.added_mut(tcp).remove(&port);
    c.state.set_punt(Some(spec)).map_err(|e| format!("{OP}: {e}"))?;
    c.publish();
    let data = serde_json::json!({ "protocol": protocol.name(), "port": port, "owner": had });
    Ok(crate::api::Reply::ok(data, format!("punt {name} deleted (owner {had}){still}")))
}

/// One punted port for `show punt`: where it came from (`file`, `api`, or both) and,
/// if added at run time, by which owner.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PortRow {
    pub protocol: &'static str,
    pub port: u16,
    pub file: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl PortRow {
    /// `file`, `api (owner k8s)`, or `file, api (owner k8s)`.
    pub fn source(&self) -> String {
        let api = self.owner.as_ref().map(|o| format!("api (owner {o})"));
        [self.file.then(|| "file".to_string()), api].into_iter().flatten().collect::<Vec<_>>().join(", ")
    }
}

/// Every punted port, UDP then TCP, each in order.
pub fn rows(spec: &PuntSpec) -> Vec<PortRow> {
    let mut rows = Vec::new();
    for protocol in [lb::Protocol::Udp, lb::Protocol::Tcp] {
        let tcp = protocol == lb::Protocol::Tcp;
        let mut ports: Vec<u16> = spec.file_ports(tcp).iter().chain(spec.added(tcp).keys()).copied().collect();
        ports.sort_unstable();
        ports.dedup();
        rows.extend(ports.into_iter().map(|port| PortRow {
            protocol: protocol.name(),
            port,
            file: spec.file_ports(tcp).contains(&port),
            owner: spec.added(tcp).get(&port).cloned(),
        }));
    }
    rows
}

/// `show punt`: the link, the host's addresses and each port with where it came from.
pub fn show(c: &crate::dataplane::Control) -> crate::api::Reply {
    let Some(spec) = c.state.punt() else {
        return crate::api::Reply::ok(
            serde_json::json!({ "enabled": false, "punt": null, "ports": [] }),
            "punt off (no [punt] section)\n".into(),
        );
    };
    let rows = rows(spec);
    let hosts = [spec.host4.map(|a| format!("host4 {a}")), spec.host6.map(|a| format!("host6 {a}"))];
    let mut text = format!("punt link {}, {}\n", spec.interface, hosts.into_iter().flatten().collect::<Vec<_>>().join(", "));
    text += &format!("  {:<12} source\n", "port");
    for r in &rows {
        text += &format!("  {:<12} {}\n", format!("{}/{}", r.protocol, r.port), r.source());
    }
    let data = serde_json::json!({
        "enabled": true,
        "punt": { "interface": spec.interface, "host4": spec.host4, "host6": spec.host6 },
        "ports": rows,
    });
    crate::api::Reply::ok(data, text)
}

/// Make `link` the punt link (none: punt off): the port of the link that was
/// (`Control::punt_link`) goes back to its kind's input, `link`'s to its kind's punt input,
/// whose first node is `ip-punt-inject`, on every worker. The devices stay open and
/// nothing is counted afresh: only where the next polled frames enter changes. Called
/// after the tables naming `link` as the punt link were published, so the first packet
/// the host sends through it finds the host's next hop there. A link without an input
/// (a null device) or one already gone has nothing to point.
///
/// All or nothing: if a worker does not answer, the workers already pointed are pointed
/// back (the old link's port at the punt input again), `punt_link` stays, and the error
/// says so.
pub fn repoint(c: &mut crate::dataplane::Control, link: Option<String>) -> Result<(), String> {
    if link == c.punt_link {
        return Ok(());
    }
    if let Some(old) = c.punt_link.as_deref() {
        set_input(c, old, false)?;
    }
    if let Some(new) = link.as_deref() {
        if let Err(e) = set_input(c, new, true) {
            let Some(old) = c.punt_link.as_deref() else { return Err(e) };
            return Err(match set_input(c, old, true) {
                Ok(()) => format!("{e}; {old} is the punt link again on every worker"),
                Err(again) => format!("{e}; {old} could not be made the punt link again: {again}"),
            });
        }
    }
    c.punt_link = link;
    Ok(())
}

/// Point interface `name`'s port on every worker at its kind's punt input (`punt`) or its
/// kind's own input. If a worker does not answer, those already pointed are pointed back
/// (an error names what was undone); nothing is left half-applied unless the undo fails
/// too, which the error says.
fn set_input(c: &crate::dataplane::Control, name: &str, punt: bool) -> Result<(), String> {
    let Ok(i) = c.state.if_index(name) else { return Ok(()) };
    let Some(kind) = c.interfaces.get(i.get()).map(|info| info.kind).filter(|k| *k != "null" && *k != "removed") else { return Ok(()) };
    let (to, back) = (format!("{kind}-punt-input"), format!("{kind}-input"));
    let (input, previous) = if punt { (to, back) } else { (back, to) };
    let point = |k: usize, w: &crossbeam_channel::Sender<engine::worker::WorkerCmd>, input: &str| {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cmd = engine::worker::WorkerCmd::SetPortInput { if_index: i, input: input.to_string(), reply: tx };
        match w.send(cmd) {
            Ok(()) => rx.recv_timeout(crate::interfaces::WORKER_REPLY).unwrap_or_else(|_| Err(format!("worker {k} did not answer"))),
            Err(_) => Err(format!("worker {k} has stopped")),
        }
    };
    for (k, w) in c.workers.iter().enumerate() {
        let Err(e) = point(k, w, &input) else { continue };
        let e = format!("punt: {name}'s packets to {input}: {e}");
        if k == 0 {
            return Err(e);
        }
        let undone: Vec<String> = c.workers[..k].iter().enumerate().filter_map(|(j, w)| point(j, w, &previous).err()).collect();
        let which = if k == 1 { "worker 0".to_string() } else { format!("workers 0 to {}", k - 1) };
        return Err(match undone.is_empty() {
            true => format!("{e}; {which} pointed back to {previous}"),
            false => format!("{e}; pointing {which} back to {previous} failed too: {}", undone.join("; ")),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::api::{Reply, Request};
    use crate::config::Config;
    use crate::dataplane::{assemble, Control};
    use wire::IpProtocol;

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

[[udp_tunnel]]
local = "198.18.0.1"
remote = "198.18.0.9"
encap = "gue"
port = 7000

[lb]
snat4 = "198.18.1.1"
"#;
    const PUNT: &str = "\n[punt]\ninterface = \"host\"\nhost4 = \"198.18.250.2\"\nudp_ports = [500]\ntcp_ports = [179]\n";

    fn control(text: &str) -> Control {
        let cfg = Config::parse(text, "gw.toml", std::path::Path::new(".")).unwrap();
        assemble(&cfg).unwrap().into_single().0
    }

    fn run(c: &mut Control, line: &str) -> Reply {
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        c.handle(&crate::cli::parse(&words).unwrap_or_else(|e| panic!("{line}: {e}")))
    }

    fn refused(c: &mut Control, line: &str) -> String {
        let r = run(c, line);
        r.error.unwrap_or_else(|| panic!("{line}: accepted: {}", r.text))
    }

    /// Whether the published tables hand a TCP segment to `port` of ours to the host.
    fn punted_tcp(c: &Control, port: u16) -> bool {
        let mut l4 = [0u8; 8];
        l4[..2].copy_from_slice(&40000u16.to_be_bytes());
        l4[2..4].copy_from_slice(&port.to_be_bytes());
        c.shared.load().punt.target(false, IpProtocol::Tcp, &l4).is_some()
    }

    #[test]
    fn the_shared_port_checks() {
        let c = control(&format!("{LINKS}{PUNT}"));
        assert_eq!(super::port_refusal(&c.state, true, 0).as_deref(), Some("0: expected ports 1 to 65535"));
        assert_eq!(super::port_refusal(&c.state, false, 0).as_deref(), Some("0: expected ports 1 to 65535"));
        let gtpu = super::port_refusal(&c.state, false, 2152).unwrap();
        assert_eq!(gtpu, "2152 is GTP-U's port: expected a port no tunnel of this gateway takes");
        assert!(super::port_refusal(&c.state, false, 7000).unwrap().starts_with("7000 is a UDP tunnel's port"));
        assert_eq!(super::port_refusal(&c.state, true, 7000), None, "the same number over TCP is another port");
        assert_eq!(super::port_refusal(&c.state, false, 500), None);
    }

    #[test]
    fn without_a_punt_section_nothing_is_added() {
        let mut c = control(LINKS);
        let e = refused(&mut c, "punt port add tcp 10256 owner k8s");
        assert!(
            e.starts_with(
                "punt_port_add: the gateway has no [punt] section: the punt link and the host's addresses come only from the config file"
            ),
            "{e}"
        );
        assert!(refused(&mut c, "punt port del tcp 10256").starts_with("punt_port_del: the gateway has no [punt] section"));
        let show = run(&mut c, "show punt");
        assert_eq!((show.ok, show.text.as_str()), (true, "punt off (no [punt] section)\n"));
    }

    #[test]
    fn a_show_of_a_section_left_out_says_it_is_off() {
        // Without [punt] or [pfcp], `show punt` and `show pfcp …` answer (exit 0) that
        // the feature is off, in text and in JSON; not an error.
        let mut c = control(LINKS);
        let show = run(&mut c, "show punt");
        assert_eq!((show.ok, show.text.as_str(), &show.data["enabled"]), (true, "punt off (no [punt] section)\n", &false.into()));
        for line in ["show pfcp associations", "show pfcp sessions"] {
            let r = run(&mut c, line);
            assert!(r.ok && r.error.is_none(), "{line}: {:?}", r.error);
            assert_eq!(r.text, "pfcp off (no [pfcp] section: this gateway is no UPF; add one and restart)\n", "{line}");
            assert_eq!(r.data["enabled"], false, "{line}: {}", r.data);
        }
        assert_eq!(run(&mut c, "show pfcp sessions").data["sessions"], serde_json::json!([]));
        let mut c = control(&format!("{LINKS}{PUNT}"));
        assert_eq!(run(&mut c, "show punt").data["enabled"], true);
    }

    #[test]
    fn bad_ports_are_refused_by_field_and_change_nothing() {
        let mut c = control(&format!("{LINKS}{PUNT}"));
        assert!(run(&mut c, "lb service add np node_port 0.0.0.0 30080 tcp backend 198.18.0.40:80").ok);
        let before = c.state.punt().cloned();
        let cases = [
            ("punt port add tcp 0", "punt_port_add: port: 0: expected ports 1 to 65535"),
            ("punt port add udp 2152", "punt_port_add: port: 2152 is GTP-U's port: expected a port no tunnel of this gateway takes"),
            ("punt port add udp 7000 owner k8s", "punt_port_add: port: 7000 is a UDP tunnel's port: expected a port no tunnel of this gateway takes"),
            (
                "punt port add tcp 30080",
                "punt_port_add: port: tcp/30080 of the node's addresses: node_port service \"np\" receives on it; expected a port no service of the node's addresses uses",
            ),
            ("punt port add tcp 80 owner k 8s", "expected: punt port add tcp|udp <port> [owner <name>]"),
            ("punt port add tcp 80 owner k/8s", "punt_port_add: owner: \"k/8s\": expected 1 to 32 letters, digits, '-', '_' or '.'"),
        ];
        for (line, says) in cases {
            let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            let e = match crate::cli::parse(&words) {
                Ok(req) => c.handle(&req).error.unwrap_or_else(|| panic!("{line}: accepted")),
                Err(e) => e,
            };
            assert_eq!(e, says, "{line}");
        }
        assert_eq!(c.state.punt().cloned(), before, "nothing refused changed the punt ports");
        assert!(!punted_tcp(&c, 30080));
    }

    #[test]
    fn add_is_idempotent_for_its_owner_and_del_only_takes_added_ports() {
        let mut c = control(&format!("{LINKS}{PUNT}"));
        assert!(!punted_tcp(&c, 10256));
        let r = run(&mut c, "punt port add tcp 10256 owner k8s");
        assert_eq!((r.ok, r.data["changed"].as_bool()), (true, Some(true)), "{r:?}");
        assert!(punted_tcp(&c, 10256), "published");
        let again = run(&mut c, "punt port add tcp 10256 owner k8s");
        assert_eq!(
            (again.ok, again.data["changed"].as_bool(), again.text.as_str()),
            (true, Some(false), "punt tcp/10256 unchanged (already added for k8s)")
        );
        let e = refused(&mut c, "punt port add tcp 10256 owner bgp");
        assert_eq!(e, "punt_port_add: port: tcp/10256 was added by owner \"k8s\": expected a port no other owner added (delete it first)");
        // A node port on it is refused the other way round, naming the API.
        let e = refused(&mut c, "lb service add np node_port 0.0.0.0 10256 tcp backend 198.18.0.40:80");
        assert!(e.contains("10256/tcp of the node's addresses is taken by punt_port_add (handed to the host's stack)"), "{e}");
        // The file's port too: recorded, so that it stays if the file drops it.
        assert!(run(&mut c, "punt port add tcp 179").text.ends_with("(the file punts it too)"));
        let rows = super::rows(c.state.punt().unwrap());
        let sources: Vec<(String, String)> = rows.iter().map(|r| (format!("{}/{}", r.protocol, r.port), r.source())).collect();
        let want = [("udp/500", "file"), ("tcp/179", "file, api (owner ctl)"), ("tcp/10256", "api (owner k8s)")];
        assert_eq!(sources, want.map(|(a, b)| (a.to_string(), b.to_string())));
        // Delete: the owner, if named, must match; the file's ports are the file's.
        assert_eq!(
            refused(&mut c, "punt port del tcp 10256 owner bgp"),
            "punt_port_del: owner: tcp/10256 was added by owner \"k8s\", not \"bgp\""
        );
        assert!(run(&mut c, "punt port del tcp 10256 owner k8s").ok);
        assert!(!punted_tcp(&c, 10256), "published");
        assert!(run(&mut c, "punt port del tcp 179").text.ends_with("(the file still punts it)"));
        assert!(punted_tcp(&c, 179));
        assert_eq!(
            refused(&mut c, "punt port del tcp 179"),
            "punt_port_del: port: tcp/179 is the file's ([punt] tcp_ports): a reload changes those"
        );
        assert_eq!(
            refused(&mut c, "punt port del udp 10256"),
            "punt_port_del: port: udp/10256 was not added (`show punt` lists the ports)"
        );
    }

    #[test]
    fn requests_parse_from_json_and_the_cli_alike() {
        let j: Request = serde_json::from_str(r#"{"op":"punt_port_add","protocol":"tcp","port":30123,"owner":"k8s"}"#).unwrap();
        let words: Vec<String> = "punt port add tcp 30123 owner k8s".split_whitespace().map(str::to_string).collect();
        assert_eq!(crate::cli::parse(&words).unwrap(), j);
        let d: Request = serde_json::from_str(r#"{"op":"punt_port_del","protocol":"udp","port":3784}"#).unwrap();
        assert_eq!(d, Request::PuntPortDel { protocol: lb::Protocol::Udp, port: 3784, owner: None });
        assert!(serde_json::from_str::<Request>(r#"{"op":"punt_port_add","protocol":"sctp","port":1}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"punt_port_add","protocol":"tcp","port":70000}"#).is_err());
        let bad: Vec<String> = "punt port add tcp 65536".split_whitespace().map(str::to_string).collect();
        assert_eq!(crate::cli::parse(&bad).unwrap_err(), "port \"65536\": expected a port, 1 to 65535");
    }
}
