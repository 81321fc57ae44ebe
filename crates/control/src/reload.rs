//! `vecgate ctl reload` and SIGHUP: apply a changed configuration file to a running
//! gateway.
//!
//! The file is read and validated whole first (the same checks as at start-up, on
//! scratch state); a file with any error changes nothing. Then the objects the file
//! declares — this time or last time — are brought to what it says now: each one that
//! differs from the **running** state (changed with `ctl` since, say) is replaced, each
//! one the file no longer declares is removed, and every other object is left alone.
//! Objects that another controller made (PFCP sessions, `ctl` additions the file never
//! named) are not the file's and are never touched. The IP, GTP-U and UDP tunnel changes
//! reach the workers as one publication, so no packet of an unchanged route or tunnel is
//! lost or sees a half-applied state.
//!
//! Interfaces of the kinds that open at run time (af_packet, tap, null) are added,
//! replaced and removed like the other objects (`crate::interfaces`). What a running
//! gateway cannot change (its workers, pools, generators, other interface kinds, PFCP
//! and metrics endpoints, the load balancer's table sizes and addresses) is refused by
//! field, with "restart" as the way; the load balancer's timeouts change in place.

use crate::api::{Reply, Request};
use crate::config::Config;
use crate::dataplane::{resolve_target, Control};
use gtpu::TunnelSpec;
use ip::tables::{TunnelRef, UdpApp};
use ip::{Prefix, RouteTarget};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::PathBuf;

/// One change a reload made, for the reply and the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// `added`, `removed` or `replaced`.
    pub action: &'static str,
    /// `interface`, `route`, `neighbour`, `gtpu_tunnel`, `udp_tunnel`, `ipsec_sa`,
    /// `ipsec_policy`, `ipsec_spd`, `lb_service`, `setting`.
    pub object: &'static str,
    /// The object as a person names it (`198.19.0.0/16 via 198.18.1.2`, `gtpu_tunnel3`).
    pub name: String,
}

impl Change {
    fn new(action: &'static str, object: &'static str, name: impl Into<String>) -> Change {
        Change { action, object, name: name.into() }
    }
}

/// Read `path` (default: the file the gateway was started with), validate it and apply
/// the difference.
pub fn reload(c: &mut Control, path: Option<&str>) -> Result<Reply, String> {
    let path = match path {
        Some(p) => PathBuf::from(p),
        None => c
            .config_path
            .clone()
            .ok_or("this gateway runs the built-in default (no --config file): there is no file to reload; name one: `reload FILE`")?,
    };
    let new = Config::load(&path).map_err(|e| e.to_string())?;
    crate::dataplane::check(&new).map_err(|e| e.to_string())?;
    check_fixed(&c.applied, &new)?;
    check_interfaces(c, &new)?;
    check_local_services(c, &new)?;
    check_punt_link(c, &new)?;
    check_ctl_node_ports(c, &new)?;
    check_punt_ports(c, &new)?;
    let mut changes = Vec::new();
    // Interfaces first (routes and tunnels may need their subnets); the ones the file
    // dropped go last, after the routes through them.
    interfaces_add(c, &new, &mut changes)?;
    // What the file routes itself (tunnels' and SAs' own routes): a route re-attached to
    // a replaced tunnel must not take one of these.
    let claimed = file_claims(c, &new);
    routes_dropped(c, &new, &mut changes)?;
    // SAs first: routes may lead into their tunnels.
    ipsec_sas(c, &new, &claimed, &mut changes)?;
    let (gtpu_ids, udp_ids) = tunnels(c, &new, &claimed, &mut changes)?;
    neighbours(c, &new, &mut changes)?;
    routes(c, &new, &gtpu_ids, &udp_ids, &mut changes)?;
    tunnel_counting(c, &new, &mut changes);
    source_checks(c, &new, &mut changes);
    let punt = crate::punt::apply(&new, &mut c.state).map_err(|e| e.to_string())?;
    if punt.changed {
        let what = new.punt.as_ref().map_or("off".to_string(), |p| format!("to {}", p.interface));
        changes.push(Change::new("replaced", "setting", format!("punt {what}")));
    }
    for port in punt.dropped {
        tracing::warn!(port = %port, "punt port added at run time removed: the file has no [punt] now");
        changes.push(Change::new("removed", "punt_port", port));
    }
    c.publish_routes();
    // The tables name the new punt link's host: now its port may hand the host's packets
    // to ip-punt-inject, and the old one's no longer.
    crate::punt::repoint(c, new.punt.as_ref().map(|p| p.interface.clone()))?;
    if changes.iter().any(|ch| ch.object == "neighbour" && ch.action != "removed") {
        c.release_held();
    }
    interfaces_remove(c, &new, &mut changes)?;
    ipsec_policies(c, &new, &mut changes)?;
    lb_services(c, &new, &mut changes)?;
    lb_timeouts(c, &new, &mut changes);
    // A file named in the request applies once: `config_path` stays the --config file,
    // which plain reloads and SIGHUP read (docs/CONFIGURATION.md, "Reloading").
    c.applied = new;
    for ch in &changes {
        tracing::info!(action = ch.action, object = ch.object, name = %ch.name, "config applied");
    }
    tracing::info!(file = %path.display(), changes = changes.len(), "reloaded");
    let mut text = format!("reloaded {}: ", path.display());
    if changes.is_empty() {
        text += "no changes\n";
    } else {
        text += &format!("{} change{}\n", changes.len(), if changes.len() == 1 { "" } else { "s" });
        for ch in &changes {
            text += &format!("  {:<8} {:<12} {}\n", ch.action, ch.object, ch.name);
        }
    }
    Ok(Reply::ok(serde_json::json!({ "file": path.display().to_string(), "changes": changes }), text))
}

/// A node_port service made with `ctl` (neither the last file nor this one names it)
/// stays through the reload: a UDP tunnel or inbound SA of the file on its port is
/// refused before anything changes. (The file's own services are checked against the
/// file's tunnels by `dataplane::check`.)
fn check_ctl_node_ports(c: &Control, new: &Config) -> Result<(), String> {
    for (field, port, _) in file_udp_receivers(new) {
        let Some(name) = c.lb.state.node_port_service(port, lb::Protocol::Udp) else { continue };
        if !c.applied.lb_services.iter().chain(&new.lb_services).any(|s| s.name == name) {
            return Err(format!(
                "{}: {field}: {port}: node_port service {name:?} (made with ctl) receives on it; expected a port no node_port service uses; nothing was changed",
                new.source
            ));
        }
    }
    Ok(())
}

/// The UDP ports of the gateway's addresses the file's tunnels and inbound SAs receive
/// on, each with its field and what receives.
fn file_udp_receivers(new: &Config) -> Vec<(String, u16, UdpApp)> {
    let tunnels = new
        .udp_tunnels
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((format!("udp_tunnel[{i}].port"), t.to_spec().ok()?.0.port, UdpApp::Gue)));
    let sas = new
        .ipsec_sas
        .iter()
        .enumerate()
        .filter_map(|(i, sa)| Some((format!("ipsec_sa[{i}].udp_dst_port"), sa.to_spec().ok()?.0.udp_receive_port()?, UdpApp::Esp)));
    tunnels.chain(sas).collect()
}

/// The ports punted at run time (`punt_port_add`) stay through a reload that keeps
/// `[punt]`: a file tunnel, inbound SA (but ESP in UDP on 4500) or node-local service (a
/// node port, or a service on an address the node has once the file is applied:
/// [`own_after`]) on one of them is refused before anything changes, as is a file `[punt]` port under a service made with `ctl`
/// (the file's own services are checked against its ports by `dataplane::check`).
fn check_punt_ports(c: &Control, new: &Config) -> Result<(), String> {
    let refuse = |field: &str, what: String| Err(format!("{}: {field}: {what}; nothing was changed", new.source));
    if let (Some(spec), Some(_)) = (c.state.punt(), &new.punt) {
        for (field, port, app) in file_udp_receivers(new) {
            // ESP in UDP on 4500 may be punted too, as at run time (`crate::punt`'s rule).
            if let Some(owner) = spec.added_udp.get(&port).filter(|_| !crate::punt::shares_punted_port(app, port)) {
                return refuse(&field, format!("{port}: punted to the host (punt_port_add, owner {owner}); expected a port not punted"));
            }
        }
        for (i, s) in new.lb_services.iter().enumerate() {
            let Some(owner) = spec.added(s.protocol == lb::Protocol::Tcp).get(&s.port) else { continue };
            if s.kind == lb::ServiceType::NodePort || own_after(c, new, s.vip) {
                let what = format!(
                    "{}/{} of the node's addresses is punted to the host (punt_port_add, owner {owner})",
                    s.port,
                    s.protocol.name()
                );
                return refuse(&format!("lb_service[{i}].port"), format!("{what}; expected a port nothing else receives on"));
            }
        }
    }
    let Some(pc) = &new.punt else { return Ok(()) };
    for (field, ports, protocol) in
        [("punt.udp_ports", &pc.udp_ports, lb::Protocol::Udp), ("punt.tcp_ports", &pc.tcp_ports, lb::Protocol::Tcp)]
    {
        for &port in ports {
            let Some((name, service)) = crate::lb::local_port_service(&c.lb.state, port, protocol, |a| own_after(c, new, a)) else {
                continue;
            };
            let of_a_file = c.applied.lb_services.iter().chain(&new.lb_services).any(|s| s.name == name);
            if !of_a_file {
                return refuse(
                    field,
                    format!("{port}: {service} (made with ctl) receives on it; expected a port no service of the node's addresses uses"),
                );
            }
        }
    }
    Ok(())
}

/// A service on one of the node's own addresses has no VIP route: its packets come by
/// `ipN-local` (`lb::add_service`). A reload that takes the address away (an interface's
/// addresses changed, or the interface removed) while the service stays would leave
/// nothing delivering them, so it is refused before anything changes, as adding an
/// address where a VIP route is is refused the other way round. A service the reload
/// removes, or replaces (added again by `lb::add_service`, which then routes the VIP),
/// does not block it.
fn check_local_services(c: &Control, new: &Config) -> Result<(), String> {
    for (_, s) in c.lb.state.services().filter(|(_, s)| s.kind != lb::ServiceType::NodePort) {
        let Some(interface) = crate::lb::node_address_owner(&c.state, s.vip) else { continue };
        if own_after(c, new, s.vip) {
            continue;
        }
        let (made, way) = match new.lb_services.iter().find(|n| n.name == s.name) {
            Some(n) if n.same_as(s) => ("the file's, unchanged", "remove it from the file too"),
            Some(_) => continue,
            None if c.applied.lb_services.iter().any(|o| o.name == s.name) => continue,
            None => ("made with ctl", "delete the service first"),
        };
        let field = match new.interfaces.iter().position(|i| i.name == interface) {
            Some(i) => format!("interface[{i}].addresses"),
            None => {
                let was = c.applied.interfaces.iter().position(|i| i.name == interface).unwrap_or_default();
                format!("interface {interface:?} (was interface[{was}])")
            }
        };
        return Err(format!(
            "{}: {field}: {} of {interface:?} is the address service {:?} ({made}) receives on; \
             expected the address kept while a service receives on it ({way}); nothing was changed",
            new.source, s.vip, s.name
        ));
    }
    Ok(())
}

/// Whether `addr` is one of the node's own addresses once `new` is applied (what a
/// service's packets come by `ipN-local` for, as the reload's `lb::add_service` will judge
/// it, after the file's interfaces): an address of one of the file's interfaces (its IPv6
/// link-local one too), or of a running interface the reload keeps (one made with `ctl`,
/// which no file declares). Not the running gateway's: the file may add the address, or
/// take it away, with the service.
fn own_after(c: &Control, new: &Config, addr: IpAddr) -> bool {
    let of_file = (0..new.interfaces.len())
        .filter_map(|i| crate::dataplane::interface_spec(new, i).ok())
        .any(|s| s.addresses.iter().any(|a| a.addr == addr) || IpAddr::V6(wire::ipv6::link_local_from_mac(&s.mac)) == addr);
    let declared = |name: &str| new.interfaces.iter().chain(&c.applied.interfaces).any(|i| i.name == name);
    of_file || crate::lb::node_address_owner(&c.state, addr).is_some_and(|name| !declared(name))
}

/// Sections a running gateway cannot change.
fn check_fixed(old: &Config, new: &Config) -> Result<(), String> {
    let refuse = |field: &str, what: &str| {
        Err(format!("{}: {field}: {what} cannot change while the gateway runs (restart it to apply); nothing was changed", new.source))
    };
    if old.dataplane != new.dataplane {
        return refuse("dataplane", "the dataplane section (workers, pools, socket)");
    }
    if old.streams != new.streams {
        return refuse("stream", "the packet generators");
    }
    if old.gtpu != new.gtpu {
        return refuse("gtpu", "the GTP-U settings");
    }
    // Per-tunnel counting is a table flag: it changes with the next publication.
    let endpoint = |m: &crate::metrics::MetricsConfig| crate::metrics::MetricsConfig { tunnel_counters: false, ..m.clone() };
    if endpoint(&old.metrics) != endpoint(&new.metrics) {
        return refuse("metrics", "the metrics endpoint");
    }
    if old.log != new.log {
        return refuse("log", "the log filter");
    }
    if old.pfcp != new.pfcp {
        return refuse(&crate::pfcp::changed_key(old.pfcp.as_ref(), new.pfcp.as_ref()), "the PFCP settings");
    }
    // The timeouts change in place ([`lb_timeouts`]).
    if let Some(key) = crate::lb::restart_key_changed(&old.lb, &new.lb) {
        return refuse(&key, "the load balancer's table sizes and addresses");
    }
    if old.spd != new.spd {
        return refuse("spd", "the flow cache settings");
    }
    Ok(())
}

/// `[lb] timeouts` as the file says, published to the workers with the LB tables: new
/// sessions take them, existing ones from their next packet.
fn lb_timeouts(c: &mut Control, new: &Config, changes: &mut Vec<Change>) {
    for (key, ms) in c.lb.set_timeouts(new.lb.timeouts.unwrap_or_default()) {
        changes.push(Change::new("replaced", "setting", format!("lb.timeouts.{key} = {ms}")));
    }
}

/// `[metrics] tunnel_counters` turned on or off: the workers start or stop counting with
/// the publication that follows (the counts made so far stay readable).
fn tunnel_counting(c: &mut Control, new: &Config, changes: &mut Vec<Change>) {
    let on = new.metrics.tunnel_counters;
    if c.gtpu.counters.enabled() == on && c.udptun.counters.enabled() == on {
        return;
    }
    c.gtpu.counters.set_enabled(on);
    c.udptun.counters.set_enabled(on);
    changes.push(Change::new("replaced", "setting", format!("metrics.tunnel_counters = {on}")));
}

/// Whether the file's interface `ic` runs as the file says (it was applied as it is now),
/// its reverse-path check aside: that changes in place ([`source_checks`]).
fn interface_current(c: &Control, ic: &crate::config::InterfaceConfig) -> bool {
    c.applied.interfaces.iter().any(|o| crate::config::InterfaceConfig { urpf: ic.urpf, ..o.clone() } == *ic)
        && c.state.if_index(&ic.name).is_ok()
}

/// Each interface's `urpf` as the file says, in place (from the publication that
/// follows; a `set interface … urpf` since the last load is undone too).
fn source_checks(c: &mut Control, new: &Config, changes: &mut Vec<Change>) {
    for ic in &new.interfaces {
        let Ok(i) = c.state.if_index(&ic.name) else { continue };
        if c.state.interfaces().get(i.get()).is_some_and(|l| l.urpf != ic.urpf) {
            c.state.set_urpf(i, ic.urpf);
            changes.push(Change::new("replaced", "setting", format!("interface {}: urpf = {}", ic.name, ic.urpf)));
        }
    }
}

/// What the interfaces' changes need, before anything changes: each interface to add
/// or replace opens at run time, and no parcel link comes or goes.
fn check_interfaces(c: &Control, new: &Config) -> Result<(), String> {
    let refuse = |i: usize, what: String| Err(format!("{}: interface[{i}]: {what}; nothing was changed", new.source));
    for (i, ic) in new.interfaces.iter().enumerate() {
        if interface_current(c, ic) {
            continue;
        }
        if !crate::interfaces::RUNTIME_KINDS.contains(&ic.kind) {
            return refuse(i, format!("{:?} is new or changed, and its type opens at start-up only (restart to apply; af_packet, tap and null change at run time)", ic.name));
        }
        if ic.parcels || c.applied.interfaces.iter().any(|o| o.name == ic.name && o.parcels) {
            return refuse(i, format!("{:?}: a parcel link changes by a restart only", ic.name));
        }
    }
    for (i, o) in c.applied.interfaces.iter().enumerate() {
        if o.parcels && !new.interfaces.iter().any(|n| n.name == o.name) {
            return Err(format!(
                "{}: interface {:?} (was interface[{i}]) takes parcels: a parcel link is removed by a restart only; nothing was changed",
                new.source, o.name
            ));
        }
    }
    Ok(())
}

/// A link's first node is chosen per port: the punt link's port enters by its kind's punt
/// input (`ip-punt-inject` first), the others' by their kind's own, and a reload moves
/// the punt link by pointing the two ports at the other inputs (`crate::punt::repoint`,
/// devices left open). Two things it cannot do while the gateway runs, refused with
/// nothing changed:
/// - replace the running punt link's interface (its port closes and opens again) while it
///   still is the punt link: an interface is not removed while punting to it
///   (`crate::interfaces::remove`); move the punt link off it first.
/// - with several workers, move it to a link whose kind passes received packets on the
///   other way (`worker-handoff` or `session-handoff`): `ip-punt-inject`'s next node was
///   fixed for the start-up link's kind when the graphs were built (`Control::punt_pass_on`).
fn check_punt_link(c: &Control, new: &Config) -> Result<(), String> {
    let refuse = |what: String| Err(format!("{}: punt: interface: {what} (restart to apply); nothing was changed", new.source));
    if let Some(link) = c.punt_link.as_deref() {
        if new.interfaces.iter().any(|ic| ic.name == link && !interface_current(c, ic)) && c.state.punt().is_some() {
            return refuse(format!(
                "{link:?} is the punt link: it cannot be replaced while the gateway punts to it (move the punt link off it first)"
            ));
        }
    }
    let Some(p) = &new.punt else { return Ok(()) };
    if c.punt_link.as_deref() == Some(p.interface.as_str()) {
        return Ok(());
    }
    let Some(ic) = new.interfaces.iter().find(|ic| ic.name == p.interface) else { return Ok(()) };
    let spreads = crate::dataplane::kind_spreads(ic.kind, &c.spread_kinds);
    match c.punt_pass_on {
        Some(way) if ic.kind != crate::config::InterfaceKind::Null && spreads != way => {
            let hand = |s: bool| if s { "worker-handoff" } else { "session-handoff" };
            refuse(format!(
                "{:?} ({}) passes what it receives on to {}, and ip-punt-inject to {} since start-up",
                p.interface,
                crate::dataplane::kind_name(ic.kind),
                hand(spreads),
                hand(way),
            ))
        }
        _ => Ok(()),
    }
}

/// Interfaces the file declares that do not run as it says: added, or replaced
/// (removed, then added; the routes through it come back with the routes' step).
fn interfaces_add(c: &mut Control, new: &Config, changes: &mut Vec<Change>) -> Result<(), String> {
    for (i, ic) in new.interfaces.iter().enumerate() {
        if interface_current(c, ic) {
            continue;
        }
        let action = if c.state.if_index(&ic.name).is_ok() {
            crate::interfaces::remove(c, &ic.name)?;
            "replaced"
        } else {
            "added"
        };
        crate::interfaces::add(c, new, i)?;
        changes.push(Change::new(action, "interface", ic.name.clone()));
    }
    Ok(())
}

/// Interfaces the old file declared and the new one does not.
fn interfaces_remove(c: &mut Control, new: &Config, changes: &mut Vec<Change>) -> Result<(), String> {
    let gone: Vec<String> =
        c.applied.interfaces.iter().filter(|o| !new.interfaces.iter().any(|n| n.name == o.name)).map(|o| o.name.clone()).collect();
    for name in gone {
        if c.state.if_index(&name).is_ok() {
            crate::interfaces::remove(c, &name)?;
            changes.push(Change::new("removed", "interface", name));
        }
    }
    Ok(())
}

/// A file's name for a tunnel (`gtpu_tunnel3` is its fourth `[[gtpu_tunnel]]`), as the
/// running gateway names the same tunnel.
fn rename_tunnel(name: &str, gtpu_ids: &[u32], udp_ids: &[u32]) -> String {
    if let Some(i) = TunnelRef::gtpu_id(name) {
        if let Some(id) = gtpu_ids.get(i as usize) {
            return format!("{}{id}", ip::tables::GTPU_IF_PREFIX);
        }
    }
    if let Some(i) = TunnelRef::udp_tunnel_id(name) {
        if let Some(id) = udp_ids.get(i as usize) {
            return format!("{}{id}", ip::tables::UDP_TUNNEL_IF_PREFIX);
        }
    }
    name.to_string()
}

/// GTP-U and UDP tunnels; returns the running id of each tunnel the new file declares,
/// in file order. A tunnel replaced keeps the routes into it (see [`reattach`]).
fn tunnels(c: &mut Control, new: &Config, claimed: &HashSet<Prefix>, changes: &mut Vec<Change>) -> Result<(Vec<u32>, Vec<u32>), String> {
    let gname = |id: u32| format!("{}{id}", ip::tables::GTPU_IF_PREFIX);
    // Each running tunnel's UE prefix, in one pass over the tunnel routes.
    let ue: HashMap<TunnelRef, Prefix> = c.state.tunnel_routes_of(|_| true).into_iter().map(|(p, t)| (t, p)).collect();
    let running_spec = |c: &Control, id: u32| -> Option<TunnelSpec> {
        let mut s = c.gtpu.tunnel(id)?.spec();
        s.ue = ue.get(&TunnelRef { kind: s.kind(), id }).copied();
        Some(s)
    };
    let mut want = Vec::with_capacity(new.gtpu_tunnels.len());
    for (i, t) in new.gtpu_tunnels.iter().enumerate() {
        want.push(t.to_spec(&c.state).map_err(|(f, m)| format!("{}: gtpu_tunnel[{i}].{f}: {m}", new.source))?);
    }
    let kept: HashSet<(IpAddr, u32)> = want.iter().map(|s| (s.local, s.teid_in)).collect();
    // Tunnels the old file declared and the new one does not.
    for t in &c.applied.gtpu_tunnels.clone() {
        let Ok(s) = t.to_spec(&c.state) else { continue };
        if kept.contains(&(s.local, s.teid_in)) {
            continue;
        }
        if let Some(id) = c.gtpu.find(s.local, s.teid_in) {
            let t = TunnelRef { kind: s.kind(), id };
            let held = routes_through(c, t);
            c.gtpu.delete(&mut c.state, id).map_err(|e| e.to_string())?;
            changes.push(Change::new("removed", "gtpu_tunnel", format!("{} (teid-in {})", gname(id), s.teid_in)));
            reattach(c, held, t, None, Own::default(), claimed, changes);
        }
    }
    let mut gtpu_ids = Vec::with_capacity(want.len());
    for s in want {
        let replaced = match c.gtpu.find(s.local, s.teid_in) {
            Some(id) if running_spec(c, id).as_ref() == Some(&s) => {
                gtpu_ids.push(id);
                continue;
            }
            // Only the source check or the outer DSCP differs: changed in place (`set
            // interface … urpf`'s and `set gtpu tunnel … dscp`'s path), so the tunnel
            // keeps its counters.
            Some(id) if running_spec(c, id).is_some_and(|r| TunnelSpec { urpf: s.urpf, dscp: s.dscp, ..r } == s) => {
                let r = running_spec(c, id).expect("tested above");
                let what = in_place(&[("urpf", r.urpf != s.urpf), ("dscp", r.dscp != s.dscp)]);
                let change = gtpu::TunnelChange { urpf: Some(s.urpf), dscp: Some(s.dscp), ..Default::default() };
                c.gtpu.modify(&mut c.state, id, change).map_err(|e| e.to_string())?;
                changes.push(Change::new("replaced", "gtpu_tunnel", format!("{} (teid-in {}, {what})", gname(id), s.teid_in)));
                gtpu_ids.push(id);
                continue;
            }
            Some(id) => {
                let t = TunnelRef { kind: running_spec(c, id).map_or(s.kind(), |r| r.kind()), id };
                let held = routes_through(c, t);
                c.gtpu.delete(&mut c.state, id).map_err(|e| e.to_string())?;
                Some((t, held))
            }
            None => None,
        };
        let (teid, kind) = (s.teid_in, s.kind());
        let id = c.gtpu.create(&mut c.state, s).map_err(|e| e.to_string())?;
        let (action, mut note, mut lost) = ("added", String::new(), Vec::new());
        let action = match replaced {
            Some((old, held)) => {
                note = kept_note(reattach(c, held, old, Some(TunnelRef { kind, id }), Own::default(), claimed, &mut lost));
                "replaced"
            }
            None => action,
        };
        changes.push(Change::new(action, "gtpu_tunnel", format!("{} (teid-in {teid}{note})", gname(id))));
        changes.append(&mut lost);
        gtpu_ids.push(id);
    }

    let uname = |id: u32| format!("{}{id}", ip::tables::UDP_TUNNEL_IF_PREFIX);
    let mut want = Vec::with_capacity(new.udp_tunnels.len());
    for (i, t) in new.udp_tunnels.iter().enumerate() {
        want.push(t.to_spec().map_err(|(f, m)| format!("{}: udp_tunnel[{i}].{f}: {m}", new.source))?);
    }
    let key = |s: &udptun::UdpTunnelSpec| (s.local, s.remote, s.port);
    let kept: HashSet<_> = want.iter().map(|(s, _)| key(s)).collect();
    // Each tunnel's own `routes` in the old file, by tunnel.
    let old_routes: HashMap<_, Vec<Prefix>> =
        c.applied.udp_tunnels.iter().filter_map(|t| t.to_spec().ok()).map(|(s, r)| (key(&s), r)).collect();
    for t in &c.applied.udp_tunnels.clone() {
        let Ok((s, own)) = t.to_spec() else { continue };
        if kept.contains(&key(&s)) {
            continue;
        }
        if let Some(id) = c.udptun.find(s.local, s.remote, s.port) {
            let t = TunnelRef { kind: s.kind(), id };
            let held = routes_through(c, t);
            c.udptun.delete(&mut c.state, id).map_err(|e| e.to_string())?;
            changes.push(Change::new("removed", "udp_tunnel", format!("{} (remote {})", uname(id), s.remote)));
            // Its own routes went with it, as the file says; any other route is listed.
            reattach(c, held, t, None, Own { new: &own, old: &[] }, claimed, changes);
        }
    }
    let mut udp_ids = Vec::with_capacity(want.len());
    for (i, (s, routes)) in want.into_iter().enumerate() {
        let own_old = old_routes.get(&key(&s)).map_or(&[][..], Vec::as_slice);
        // The tunnel's own routes are as the file says: each one into it, and none the
        // last file gave it and this one does not. Other routes into it (added with
        // `ctl`) are no reason to replace it.
        let own_current = |c: &Control, id: u32| {
            let into = RouteTarget::Tunnel(TunnelRef { kind: s.kind(), id });
            routes.iter().all(|p| c.state.route(p) == Some(&into))
                && own_old.iter().all(|p| routes.contains(p) || c.state.route(p) != Some(&into))
        };
        let replaced = match c.udptun.find(s.local, s.remote, s.port) {
            // The tunnel runs as the file says (made by the last file or with `ctl`): kept.
            Some(id) if c.udptun.spec(id) == Some(&s) && own_current(c, id) => {
                udp_ids.push(id);
                continue;
            }
            // Only the GRE key, the source check or the outer DSCP differs: changed in
            // place, so the tunnel keeps its counters and GRE sequence (`set udp
            // tunnel`'s and `set interface … urpf`'s path).
            Some(id)
                if c.udptun
                    .spec(id)
                    .is_some_and(|r| udptun::UdpTunnelSpec { gre_key: s.gre_key, urpf: s.urpf, dscp: s.dscp, ..r.clone() } == s)
                    && own_current(c, id) =>
            {
                let r = c.udptun.spec(id).expect("tested above");
                let what = in_place(&[("key", r.gre_key != s.gre_key), ("urpf", r.urpf != s.urpf), ("dscp", r.dscp != s.dscp)]);
                let change =
                    udptun::UdpTunnelChange { gre_key: Some(s.gre_key), urpf: Some(s.urpf), dscp: Some(s.dscp), ..Default::default() };
                c.udptun.modify(&mut c.state, id, change).map_err(|e| e.to_string())?;
                changes.push(Change::new("replaced", "udp_tunnel", format!("{} (remote {}, {what})", uname(id), s.remote)));
                udp_ids.push(id);
                continue;
            }
            // Anything else differs, its own routes as the file says: replaced under the
            // same id, so its name and the routes into it stay as they are.
            Some(id) if own_current(c, id) => {
                let kept = routes_through(c, TunnelRef { kind: s.kind(), id }).iter().filter(|(p, _)| !routes.contains(p)).count();
                let remote = s.remote;
                c.udptun.replace(&mut c.state, id, s).map_err(|e| format!("{}: udp_tunnel[{i}]: {e}", new.source))?;
                changes.push(Change::new("replaced", "udp_tunnel", format!("{} (remote {remote}{})", uname(id), kept_note(kept))));
                udp_ids.push(id);
                continue;
            }
            // Its own routes changed too: removed and made again with them (its other
            // routes put back).
            Some(id) => {
                let t = TunnelRef { kind: c.udptun.spec(id).map_or(s.kind(), |r| r.kind()), id };
                let held = routes_through(c, t);
                c.udptun.delete(&mut c.state, id).map_err(|e| e.to_string())?;
                Some((t, held))
            }
            None => None,
        };
        let (remote, kind) = (s.remote, s.kind());
        let replaced_id = replaced.as_ref().map(|(t, _)| t.id);
        let id = c.udptun.create(&mut c.state, s, &routes).map_err(|e| format!("{}: udp_tunnel[{i}]: {e}", new.source))?;
        let (action, mut note, mut lost) = ("added", String::new(), Vec::new());
        let action = match replaced {
            Some((old, held)) => {
                let own = Own { new: &routes, old: own_old };
                note = kept_note(reattach(c, held, old, Some(TunnelRef { kind, id }), own, claimed, &mut lost));
                "replaced"
            }
            None => action,
        };
        // `create` takes the lowest free id: a replacement may run under another name.
        let was = match replaced_id {
            Some(o) if o != id => format!("was {}, ", uname(o)),
            _ => String::new(),
        };
        changes.push(Change::new(action, "udp_tunnel", format!("{} ({was}remote {remote}{note})", uname(id))));
        changes.append(&mut lost);
        udp_ids.push(id);
    }
    Ok((gtpu_ids, udp_ids))
}

/// What a reload changed in place, for its report: `key and urpf in place`, `dscp in
/// place` (the names of the settings that differ, in order).
fn in_place(settings: &[(&str, bool)]) -> String {
    let changed: Vec<&str> = settings.iter().filter(|s| s.1).map(|s| s.0).collect();
    let names = match changed.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "nothing".to_string(),
    };
    format!("{names} in place")
}

/// The prefixes the file routes as part of a tunnel or an SA (a GTP-U tunnel's `ue`, a
/// UDP tunnel's or an outbound SA's `routes`). Entries with errors are left out: the
/// validation on scratch state has refused such a file already.
fn file_claims(c: &Control, new: &Config) -> HashSet<Prefix> {
    let mut claimed: HashSet<Prefix> = new.gtpu_tunnels.iter().filter_map(|t| t.to_spec(&c.state).ok()?.ue).collect();
    claimed.extend(new.udp_tunnels.iter().filter_map(|t| t.to_spec().ok()).flat_map(|(_, r)| r));
    claimed.extend(new.ipsec_sas.iter().filter_map(|s| s.to_spec().ok()).flat_map(|(_, r)| r));
    claimed
}

/// Whether route target `r` leads into tunnel `t` (wholly, or by one of its paths).
fn leads_into(r: &RouteTarget, t: TunnelRef) -> bool {
    match r {
        RouteTarget::Tunnel(x) => *x == t,
        RouteTarget::Multipath(paths) => paths.iter().any(|p| p.target == RouteTarget::Tunnel(t)),
        _ => false,
    }
}

/// The static routes into tunnel `t`, as they are: what deleting it takes away.
fn routes_through(c: &Control, t: TunnelRef) -> Vec<(Prefix, RouteTarget)> {
    c.state.routes().filter(|(_, r)| leads_into(r, t)).map(|(p, r)| (*p, r.clone())).collect()
}

/// A tunnel's or SA's own routes (`routes` in its `[[udp_tunnel]]` or `[[ipsec_sa]]`) in
/// the new file and in the old one.
#[derive(Default, Clone, Copy)]
struct Own<'a> {
    new: &'a [Prefix],
    old: &'a [Prefix],
}

/// Put the routes that led into tunnel `old` before it was deleted (`held`, from
/// [`routes_through`]) back into its replacement `new`. Deleting a tunnel deletes the
/// routes into it, which for a reload's replacement would silently drop routes added
/// with `ctl` (their traffic falling to a covering route, for an SA unencrypted). Not
/// put back: the replacement's own routes (made with it), the old ones the file no
/// longer gives it, and prefixes the file routes elsewhere; each of these but the
/// first, and any route that has nowhere to go (`new` is none: the tunnel was removed,
/// or the SA is no longer an outbound tunnel), is pushed to `changes`. Returns how many
/// were put back.
fn reattach(
    c: &mut Control,
    held: Vec<(Prefix, RouteTarget)>,
    old: TunnelRef,
    new: Option<TunnelRef>,
    own: Own,
    claimed: &HashSet<Prefix>,
    changes: &mut Vec<Change>,
) -> usize {
    let swap = |r: &RouteTarget, to: TunnelRef| match r {
        RouteTarget::Multipath(paths) => RouteTarget::Multipath(
            paths
                .iter()
                .map(|p| match p.target {
                    RouteTarget::Tunnel(x) if x == old => ip::state::Path { target: RouteTarget::Tunnel(to), ..p.clone() },
                    _ => p.clone(),
                })
                .collect(),
        ),
        _ => RouteTarget::Tunnel(to),
    };
    let mut kept = 0;
    for (p, r) in held {
        if own.new.contains(&p) {
            continue;
        }
        let why = if own.old.contains(&p) {
            "the file no longer routes it there".to_string()
        } else if claimed.contains(&p) {
            "the file routes this prefix elsewhere".to_string()
        } else if let Some(to) = new {
            match c.state.add_route(p, swap(&r, to)) {
                Ok(()) => {
                    kept += 1;
                    continue;
                }
                Err(e) => e.to_string(),
            }
        } else {
            format!("{} is gone", old.if_name())
        };
        // A multipath route keeps its other paths.
        match c.state.route(&p) {
            Some(now) => changes.push(Change::new("replaced", "route", format!("{} (was {}: {why})", describe(&p, now), describe(&p, &r)))),
            None => changes.push(Change::new("removed", "route", format!("{} ({why})", describe(&p, &r)))),
        }
    }
    kept
}

/// `, N routes kept` for a replaced tunnel's or SA's name, or nothing.
fn kept_note(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => ", 1 route kept".into(),
        n => format!(", {n} routes kept"),
    }
}

fn neighbours(c: &mut Control, new: &Config, changes: &mut Vec<Change>) -> Result<(), String> {
    let parse = |cfg: &Config, i: usize| -> Result<(String, IpAddr, wire::EthernetAddress), String> {
        let n = &cfg.neighbours[i];
        let ip: IpAddr = n.ip.parse().map_err(|_| format!("{}: neighbour[{i}].ip: {:?}: expected an IP address", cfg.source, n.ip))?;
        let mac = n.mac.parse().map_err(|_| format!("{}: neighbour[{i}].mac: {:?}: expected a MAC address", cfg.source, n.mac))?;
        Ok((n.interface.clone(), ip, mac))
    };
    let mut want = BTreeMap::new();
    for i in 0..new.neighbours.len() {
        let (ifname, ip, mac) = parse(new, i)?;
        want.insert(ip, (ifname, mac));
    }
    for i in 0..c.applied.neighbours.len() {
        let Ok((_, ip, _)) = parse(&c.applied, i) else { continue };
        if !want.contains_key(&ip) && c.state.del_static_neighbour(ip) {
            changes.push(Change::new("removed", "neighbour", ip.to_string()));
        }
    }
    for (ip, (ifname, mac)) in want {
        let i = c.state.if_index(&ifname).map_err(|e| e.to_string())?;
        let had = c.state.neighbour(ip).map(|n| (n.if_index, n.mac, n.is_static));
        if had == Some((i, mac, true)) {
            continue;
        }
        c.state.add_static_neighbour(&ifname, ip, mac).map_err(|e| e.to_string())?;
        let action = if had.is_some_and(|h| h.2) { "replaced" } else { "added" };
        changes.push(Change::new(action, "neighbour", format!("{ip} {mac} on {ifname}")));
    }
    Ok(())
}

pub(crate) fn describe(p: &Prefix, t: &RouteTarget) -> String {
    match t {
        RouteTarget::Via { next_hop, interface: Some(i) } => format!("{p} via {next_hop} on {i}"),
        RouteTarget::Via { next_hop, interface: None } => format!("{p} via {next_hop}"),
        RouteTarget::Interface(i) => format!("{p} on {i}"),
        RouteTarget::Blackhole => format!("{p} blackhole"),
        RouteTarget::Tunnel(t) => format!("{p} into {}", t.if_name()),
        RouteTarget::Multipath(_) => crate::fib::route_line(p, t),
    }
}

/// Remove the last file's `[[route]]`s that the new file does not have, before the SAs
/// and tunnels are applied: a prefix the file moves into an SA's or tunnel's own routes
/// is free for it then (it would be refused over a static route).
fn routes_dropped(c: &mut Control, new: &Config, changes: &mut Vec<Change>) -> Result<(), String> {
    // A prefix that does not parse is reported by `routes`.
    let kept: HashSet<Prefix> = new.routes.iter().filter_map(|r| r.prefix.parse().ok()).collect();
    for r in &c.applied.routes {
        let Ok(p) = r.prefix.parse::<Prefix>() else { continue };
        if kept.contains(&p) {
            continue;
        }
        if let Some(t) = c.state.route(&p).cloned() {
            c.state.del_route(&p).map_err(|e| e.to_string())?;
            changes.push(Change::new("removed", "route", describe(&p, &t)));
        }
    }
    Ok(())
}

/// Add or replace the new file's `[[route]]`s (after the tunnels, which they may name).
fn routes(c: &mut Control, new: &Config, gtpu_ids: &[u32], udp_ids: &[u32], changes: &mut Vec<Change>) -> Result<(), String> {
    let mut want = BTreeMap::new();
    for (i, r) in new.routes.iter().enumerate() {
        let field = |f: &str, m: String| format!("{}: route[{i}]{f}: {m}", new.source);
        let p: Prefix = r.prefix.parse().map_err(|e| field(".prefix", format!("{e}")))?;
        let t = crate::fib::target_from_fields(r.via.as_deref(), r.interface.as_deref(), r.blackhole, &r.paths, |n| {
            rename_tunnel(n, gtpu_ids, udp_ids)
        })
        .map_err(|(f, m)| field(&f, m))?;
        let t = crate::ipsec::resolve_target(&c.ipsec, t).map_err(|m| field(".interface", m))?;
        let t = resolve_target(&c.gtpu, &c.udptun, &c.state, t).map_err(|m| field(".interface", m))?;
        want.insert(p, t);
    }
    for (p, t) in want {
        let action = match c.state.route(&p) {
            Some(old) if *old == t => continue,
            Some(_) => "replaced",
            None => "added",
        };
        let name = describe(&p, &t);
        c.state.add_route(p, t).map_err(|e| format!("route {p}: {e}"))?;
        changes.push(Change::new(action, "route", name));
    }
    Ok(())
}

fn apply(c: &mut Control, req: Request) -> Result<(), String> {
    let r = c.handle(&req);
    if r.ok {
        Ok(())
    } else {
        Err(r.error.unwrap_or_else(|| "refused".into()))
    }
}

fn ipsec_sas(c: &mut Control, new: &Config, claimed: &HashSet<Prefix>, changes: &mut Vec<Change>) -> Result<(), String> {
    let want: BTreeMap<u32, (usize, &crate::ipsec::IpsecSaConfig)> =
        new.ipsec_sas.iter().enumerate().map(|(i, s)| (s.index, (i, s))).collect();
    let old: BTreeMap<u32, crate::ipsec::IpsecSaConfig> = c.applied.ipsec_sas.iter().map(|s| (s.index, s.clone())).collect();
    let own = |s: &crate::ipsec::IpsecSaConfig| s.to_spec().map(|(_, r)| r).unwrap_or_default();
    let tunnel = |c: &Control, index: u32| c.ipsec.tunnel_by_name(&format!("{}{index}", ip::tables::IPSEC_TUNNEL_IF_PREFIX));
    // Deleted and added here without publishing (not by requests, which publish each):
    // the SA, its replacement and the routes put back into it reach the workers in the
    // reload's one publication, so no packet finds the route gone meanwhile.
    for (&index, o) in &old {
        if !want.contains_key(&index) && c.ipsec.get(index).is_some() {
            let t = tunnel(c, index);
            let held = t.map(|t| routes_through(c, t)).unwrap_or_default();
            crate::ipsec::del(&mut c.ipsec, &mut c.state, index)?;
            changes.push(Change::new("removed", "ipsec_sa", format!("SA {index}")));
            if let Some(t) = t {
                reattach(c, held, t, None, Own { new: &own(o), old: &[] }, claimed, changes);
            }
        }
    }
    for (index, (i, sa)) in want {
        // Keys are never read back, so "unchanged" is the file's entry as applied last,
        // with the SA still there.
        let running = c.ipsec.get(index).map(|s| (s.spec.urpf, s.spec.dscp));
        let present = running.is_some();
        // Only the source check or the outer DSCP differs from the file's entry as
        // applied last, or from the running SA (`ipsec sa set`): changed in place,
        // keeping the sequence numbers, replay window, counts and routes.
        if let Some((urpf, dscp)) = running
            .filter(|_| old.get(&index).is_some_and(|o| crate::ipsec::IpsecSaConfig { urpf: sa.urpf, dscp: sa.dscp, ..o.clone() } == *sa))
        {
            let (new_urpf, new_dscp) = (urpf != sa.urpf, dscp != sa.dscp);
            if new_urpf || new_dscp {
                let set = Request::IpsecSaSet { index, urpf: new_urpf.then_some(sa.urpf), dscp: new_dscp.then_some(sa.dscp) };
                apply(c, set)?;
                let what = in_place(&[("urpf", new_urpf), ("dscp", new_dscp)]);
                changes.push(Change::new("replaced", "ipsec_sa", format!("SA {index} ({what})")));
            }
            continue;
        }
        let t = tunnel(c, index);
        let held = t.map(|t| routes_through(c, t)).unwrap_or_default();
        let was = c.ipsec.get(index).cloned();
        if present {
            crate::ipsec::del(&mut c.ipsec, &mut c.state, index)?;
        }
        // Its UDP port against the file's node_port services: `dataplane::check`'s.
        crate::ipsec::add(&mut c.ipsec, &mut c.state, sa, |_, _| Ok(()))
            .map_err(|e| format!("{}: ipsec_sa[{i}] (index {index}): {e}", new.source))?;
        // The same keys: the same SA, whose sequence numbers and replay window go on.
        let same_keys = was.is_some_and(|w| c.ipsec.keep_counters(index, &w));
        let mut lost = Vec::new();
        let note = match t {
            Some(t) => {
                let (own_new, own_old) = (own(sa), old.get(&index).map(own).unwrap_or_default());
                let kept = reattach(c, held, t, tunnel(c, index), Own { new: &own_new, old: &own_old }, claimed, &mut lost);
                kept_note(kept)
            }
            None => String::new(),
        };
        let note = if same_keys { format!("{note}, sequence numbers and replay window kept") } else { note };
        let note = note.strip_prefix(", ").map_or(String::new(), |n| format!(" ({n})"));
        changes.push(Change::new(if present { "replaced" } else { "added" }, "ipsec_sa", format!("SA {index}{note}")));
        changes.append(&mut lost);
    }
    Ok(())
}

fn ipsec_policies(c: &mut Control, new: &Config, changes: &mut Vec<Change>) -> Result<(), String> {
    let running = |c: &Control, p: &spd::PolicySpec| c.spd.policies().find(|q| q.spec == *p).map(|q| q.id().0);
    for p in &c.applied.ipsec_policies.clone() {
        if new.ipsec_policies.contains(p) {
            continue;
        }
        if let Some(id) = running(c, p) {
            apply(c, Request::IpsecPolicyDel { id })?;
            changes.push(Change::new("removed", "ipsec_policy", format!("policy {id} (spd {})", p.spd)));
        }
    }
    for p in &new.ipsec_policies {
        if running(c, p).is_none() {
            apply(c, Request::IpsecPolicyAdd(p.clone()))?;
            let id = running(c, p).unwrap_or_default();
            changes.push(Change::new("added", "ipsec_policy", format!("policy {id} (spd {})", p.spd)));
        }
    }
    let binding = |cfg: &Config| -> BTreeMap<String, u32> {
        cfg.ipsec_spds.iter().flat_map(|b| b.interfaces.iter().map(move |i| (i.clone(), b.id))).collect()
    };
    let want = binding(new);
    for ifname in binding(&c.applied).keys() {
        if want.contains_key(ifname) {
            continue;
        }
        let i = c.state.if_index(ifname).map_err(|e| e.to_string())?;
        if c.spd.binding(i).is_some() {
            apply(c, Request::IpsecSpdUnbind { interface: ifname.clone() })?;
            changes.push(Change::new("removed", "ipsec_spd", format!("binding of {ifname}")));
        }
    }
    for (ifname, spd) in want {
        let i = c.state.if_index(&ifname).map_err(|e| e.to_string())?;
        let had = c.spd.binding(i);
        if had.is_some_and(|s| u32::from(s.0) == spd) {
            continue;
        }
        apply(c, Request::IpsecSpdBind { spd, interface: ifname.clone() })?;
        changes.push(Change::new(if had.is_some() { "replaced" } else { "added" }, "ipsec_spd", format!("spd {spd} on {ifname}")));
    }
    Ok(())
}

fn lb_services(c: &mut Control, new: &Config, changes: &mut Vec<Change>) -> Result<(), String> {
    for s in &c.applied.lb_services.clone() {
        if !new.lb_services.iter().any(|n| n.name == s.name) && c.lb.state.service(&s.name).is_some() {
            apply(c, Request::LbServiceDel { name: s.name.clone() })?;
            changes.push(Change::new("removed", "lb_service", s.name.clone()));
        }
    }
    for s in &new.lb_services {
        let action = match c.lb.state.service(&s.name) {
            Some((_, running)) if running.same_as(s) => continue,
            Some(_) => {
                apply(c, Request::LbServiceDel { name: s.name.clone() })?;
                "replaced"
            }
            None => "added",
        };
        apply(c, Request::LbServiceAdd(s.clone()))?;
        changes.push(Change::new(action, "lb_service", s.name.clone()));
    }
    Ok(())
}
