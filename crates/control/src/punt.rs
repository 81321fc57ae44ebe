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
    if pc.udp_ports.is_empty() && pc.tcp_ports.is_empty() {
        return Err(cfg.err("punt", "no udp_ports or tcp_ports: expected the ports the host's daemons listen on"));
    }
    for (field, ports) in [("punt.udp_ports", &pc.udp_ports), ("punt.tcp_ports", &pc.tcp_ports)] {
        if ports.contains(&0) {
            return Err(cfg.err(field, "0: expected ports 1 to 65535"));
        }
    }
    // A tunnel's own port reaches its input node first; ESP in UDP's (4500) is fine:
    // its IKE messages are punted from espN-decrypt.
    for &p in &pc.udp_ports {
        if let Some(app @ (UdpApp::Gtpu | UdpApp::Gue)) = state.udp_port(p) {
            let what = if app == UdpApp::Gtpu { "GTP-U's" } else { "a UDP tunnel's" };
            return Err(cfg.err("punt.udp_ports", format!("{p} is {what} port: expected a port no tunnel of this gateway takes")));
        }
    }
    let spec = PuntSpec { interface: pc.interface.clone(), host4, host6, udp_ports: pc.udp_ports.clone(), tcp_ports: pc.tcp_ports.clone() };
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

/// Apply the file's `[punt]` (start-up and reload): true if it changed what was there.
pub fn apply(cfg: &Config, state: &mut RouterState) -> Result<bool, ConfigError> {
    let spec = cfg.punt.as_ref().map(|pc| spec(cfg, pc, state)).transpose()?;
    if state.punt() == spec.as_ref() {
        return Ok(false);
    }
    state.set_punt(spec).map_err(|e| cfg.err("punt", e.to_string()))?;
    Ok(true)
}

/// Make `link` the punt link (none: punt off): the port of the link that was
/// (`Control::punt_link`) goes back to its kind's input, `link`'s to its kind's punt input,
/// whose first node is `ip-punt-inject`, on every worker. The devices stay open and
/// nothing is counted afresh: only where the next polled frames enter changes. Called
/// after the tables naming `link` as the punt link were published, so the first packet
/// the host sends through it finds the host's next hop there. A link without an input
/// (a null device) or one already gone has nothing to point.
pub fn repoint(c: &mut crate::dataplane::Control, link: Option<String>) -> Result<(), String> {
    if link == c.punt_link {
        return Ok(());
    }
    if let Some(old) = c.punt_link.take() {
        set_input(c, &old, false)?;
    }
    if let Some(new) = link.as_deref() {
        set_input(c, new, true)?;
    }
    c.punt_link = link;
    Ok(())
}

/// Point interface `name`'s port on every worker at its kind's punt input (`punt`) or its
/// kind's own input.
fn set_input(c: &crate::dataplane::Control, name: &str, punt: bool) -> Result<(), String> {
    let Ok(i) = c.state.if_index(name) else { return Ok(()) };
    let Some(kind) = c.interfaces.get(i.get()).map(|info| info.kind).filter(|k| *k != "null" && *k != "removed") else { return Ok(()) };
    let input = if punt { format!("{kind}-punt-input") } else { format!("{kind}-input") };
    for (k, w) in c.workers.iter().enumerate() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cmd = engine::worker::WorkerCmd::SetPortInput { if_index: i, input: input.clone(), reply: tx };
        let answer = match w.send(cmd) {
            Ok(()) => rx.recv_timeout(crate::interfaces::WORKER_REPLY).unwrap_or_else(|_| Err(format!("worker {k} did not answer"))),
            Err(_) => Err(format!("worker {k} has stopped")),
        };
        answer.map_err(|e| format!("punt: {name}'s packets to {input}: {e}"))?;
    }
    Ok(())
}
