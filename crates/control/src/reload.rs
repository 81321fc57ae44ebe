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
//! and metrics endpoints) is refused by field, with "restart" as the way.

use crate::api::{Reply, Request};
use crate::config::Config;
use crate::dataplane::{build_state, resolve_target, Control};
use gtpu::TunnelSpec;
use ip::tables::TunnelRef;
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
    check_scratch(&new)?;
    check_fixed(&c.applied, &new)?;
    check_interfaces(c, &new)?;
    check_punt_link(c, &new)?;
    let mut changes = Vec::new();
    // Interfaces first (routes and tunnels may need their subnets); the ones the file
    // dropped go last, after the routes through them.
    interfaces_add(c, &new, &mut changes)?;
    // SAs first: routes may lead into their tunnels.
    ipsec_sas(c, &new, &mut changes)?;
    let (gtpu_ids, udp_ids) = tunnels(c, &new, &mut changes)?;
    neighbours(c, &new, &mut changes)?;
    routes(c, &new, &gtpu_ids, &udp_ids, &mut changes)?;
    tunnel_counting(c, &new, &mut changes);
    source_checks(c, &new, &mut changes);
    if crate::punt::apply(&new, &mut c.state).map_err(|e| e.to_string())? {
        let what = new.punt.as_ref().map_or("off".to_string(), |p| format!("to {}", p.interface));
        changes.push(Change::new("replaced", "setting", format!("punt {what}")));
    }
    c.publish_routes();
    if changes.iter().any(|ch| ch.object == "neighbour" && ch.action != "removed") {
        c.release_held();
    }
    interfaces_remove(c, &new, &mut changes)?;
    ipsec_policies(c, &new, &mut changes)?;
    lb_services(c, &new, &mut changes)?;
    c.applied = new;
    c.config_path = Some(path.clone());
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

/// The start-up validation, on scratch state: every cross-reference of the file holds
/// on its own.
fn check_scratch(new: &Config) -> Result<(), String> {
    let (mut state, _, _) = build_state(new).map_err(|e| e.to_string())?;
    // The feature sections' errors that need the interfaces, all of them.
    let mut problems = crate::config::Problems::default();
    problems.take(crate::ipsec::build_state(new, &mut state));
    problems.take(crate::lb::LbControl::from_config(new, &mut state));
    problems.take(crate::spd::build_state(new, &state));
    problems.check().map_err(|e| e.to_string())
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
        return refuse("pfcp", "the PFCP endpoint");
    }
    if old.lb != new.lb {
        return refuse("lb", "the load balancer's limits and addresses");
    }
    if old.spd != new.spd {
        return refuse("spd", "the flow cache settings");
    }
    Ok(())
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

/// A link's first node is chosen when its port opens: the punt link's is `ip-punt-inject`
/// (the host's packets sent as the gateway's), chosen at start-up. Another link, or the
/// punt link opened again by this reload, would receive the host's packets as any
/// link's: refused rather than half done.
fn check_punt_link(c: &Control, new: &Config) -> Result<(), String> {
    let Some(p) = &new.punt else { return Ok(()) };
    let refuse = |what: String| Err(format!("{}: punt: interface: {what} (restart to apply); nothing was changed", new.source));
    if c.punt_link.as_deref() != Some(p.interface.as_str()) {
        return refuse(match &c.punt_link {
            Some(link) => format!("the punt link is {link:?} since start-up; {:?} cannot become it while the gateway runs", p.interface),
            None => format!("no punt link was opened at start-up; {:?} cannot become it while the gateway runs", p.interface),
        });
    }
    if new.interfaces.iter().any(|ic| ic.name == p.interface && !interface_current(c, ic)) {
        return refuse(format!("{:?} is the punt link: it cannot be replaced while the gateway runs", p.interface));
    }
    Ok(())
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
/// in file order.
fn tunnels(c: &mut Control, new: &Config, changes: &mut Vec<Change>) -> Result<(Vec<u32>, Vec<u32>), String> {
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
    for t in &c.applied.gtpu_tunnels {
        let Ok(s) = t.to_spec(&c.state) else { continue };
        if kept.contains(&(s.local, s.teid_in)) {
            continue;
        }
        if let Some(id) = c.gtpu.find(s.local, s.teid_in) {
            c.gtpu.delete(&mut c.state, id).map_err(|e| e.to_string())?;
            changes.push(Change::new("removed", "gtpu_tunnel", format!("{} (teid-in {})", gname(id), s.teid_in)));
        }
    }
    let mut gtpu_ids = Vec::with_capacity(want.len());
    for s in want {
        let action = match c.gtpu.find(s.local, s.teid_in) {
            Some(id) if running_spec(c, id).as_ref() == Some(&s) => {
                gtpu_ids.push(id);
                continue;
            }
            // Only the source check differs: changed in place (`set interface … urpf`'s
            // path), so the tunnel keeps its counters.
            Some(id) if running_spec(c, id).is_some_and(|r| TunnelSpec { urpf: s.urpf, ..r } == s) => {
                let change = gtpu::TunnelChange { urpf: Some(s.urpf), ..Default::default() };
                c.gtpu.modify(&mut c.state, id, change).map_err(|e| e.to_string())?;
                changes.push(Change::new("replaced", "gtpu_tunnel", format!("{} (teid-in {}, urpf in place)", gname(id), s.teid_in)));
                gtpu_ids.push(id);
                continue;
            }
            Some(id) => {
                c.gtpu.delete(&mut c.state, id).map_err(|e| e.to_string())?;
                "replaced"
            }
            None => "added",
        };
        let teid = s.teid_in;
        let id = c.gtpu.create(&mut c.state, s).map_err(|e| e.to_string())?;
        changes.push(Change::new(action, "gtpu_tunnel", format!("{} (teid-in {teid})", gname(id))));
        gtpu_ids.push(id);
    }

    let uname = |id: u32| format!("{}{id}", ip::tables::UDP_TUNNEL_IF_PREFIX);
    let mut want = Vec::with_capacity(new.udp_tunnels.len());
    for (i, t) in new.udp_tunnels.iter().enumerate() {
        want.push(t.to_spec().map_err(|(f, m)| format!("{}: udp_tunnel[{i}].{f}: {m}", new.source))?);
    }
    let key = |s: &udptun::UdpTunnelSpec| (s.local, s.remote, s.port);
    let kept: HashSet<_> = want.iter().map(|(s, _)| key(s)).collect();
    for t in &c.applied.udp_tunnels {
        let Ok((s, _)) = t.to_spec() else { continue };
        if kept.contains(&key(&s)) {
            continue;
        }
        if let Some(id) = c.udptun.find(s.local, s.remote, s.port) {
            c.udptun.delete(&mut c.state, id).map_err(|e| e.to_string())?;
            changes.push(Change::new("removed", "udp_tunnel", format!("{} (remote {})", uname(id), s.remote)));
        }
    }
    let mut udp_ids = Vec::with_capacity(want.len());
    for (s, routes) in want {
        let action = match c.udptun.find(s.local, s.remote, s.port) {
            Some(id) if c.udptun.spec(id) == Some(&s) && routes_into(c, s.kind(), id) == sorted(&routes) => {
                udp_ids.push(id);
                continue;
            }
            // Only the GRE key or the source check differs: changed in place, so the
            // tunnel keeps its counters and GRE sequence (`set udp tunnel`'s and `set
            // interface … urpf`'s path).
            Some(id)
                if c.udptun.spec(id).is_some_and(|r| udptun::UdpTunnelSpec { gre_key: s.gre_key, urpf: s.urpf, ..r.clone() } == s)
                    && routes_into(c, s.kind(), id) == sorted(&routes) =>
            {
                let r = c.udptun.spec(id).expect("tested above");
                let what = match (r.gre_key != s.gre_key, r.urpf != s.urpf) {
                    (true, true) => "key and urpf",
                    (true, false) => "key",
                    _ => "urpf",
                };
                let change = udptun::UdpTunnelChange { gre_key: Some(s.gre_key), urpf: Some(s.urpf), ..Default::default() };
                c.udptun.modify(&mut c.state, id, change).map_err(|e| e.to_string())?;
                changes.push(Change::new("replaced", "udp_tunnel", format!("{} (remote {}, {what} in place)", uname(id), s.remote)));
                udp_ids.push(id);
                continue;
            }
            Some(id) => {
                c.udptun.delete(&mut c.state, id).map_err(|e| e.to_string())?;
                "replaced"
            }
            None => "added",
        };
        let remote = s.remote;
        let id = c.udptun.create(&mut c.state, s, &routes).map_err(|e| e.to_string())?;
        changes.push(Change::new(action, "udp_tunnel", format!("{} (remote {remote})", uname(id))));
        udp_ids.push(id);
    }
    Ok((gtpu_ids, udp_ids))
}

fn routes_into(c: &Control, kind: ip::tables::TunnelKind, id: u32) -> Vec<Prefix> {
    let t = TunnelRef { kind, id };
    let mut v: Vec<Prefix> = c.state.routes().filter(|(_, r)| **r == RouteTarget::Tunnel(t)).map(|(p, _)| *p).collect();
    v.sort();
    v
}

fn sorted(p: &[Prefix]) -> Vec<Prefix> {
    let mut v = p.to_vec();
    v.sort();
    v
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
    for r in &c.applied.routes {
        let Ok(p) = r.prefix.parse::<Prefix>() else { continue };
        if want.contains_key(&p) {
            continue;
        }
        if let Some(t) = c.state.route(&p).cloned() {
            c.state.del_route(&p).map_err(|e| e.to_string())?;
            changes.push(Change::new("removed", "route", describe(&p, &t)));
        }
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

fn ipsec_sas(c: &mut Control, new: &Config, changes: &mut Vec<Change>) -> Result<(), String> {
    let want: BTreeMap<u32, &crate::ipsec::IpsecSaConfig> = new.ipsec_sas.iter().map(|s| (s.index, s)).collect();
    let old: BTreeMap<u32, crate::ipsec::IpsecSaConfig> = c.applied.ipsec_sas.iter().map(|s| (s.index, s.clone())).collect();
    for &index in old.keys() {
        if !want.contains_key(&index) && c.ipsec.get(index).is_some() {
            apply(c, Request::IpsecSaDel { index })?;
            changes.push(Change::new("removed", "ipsec_sa", format!("SA {index}")));
        }
    }
    for (index, sa) in want {
        // Keys are never read back, so "unchanged" is the file's entry as applied last,
        // with the SA still there.
        let running_urpf = c.ipsec.get(index).map(|s| s.spec.urpf);
        let present = running_urpf.is_some();
        // Only the source check differs from the file's entry as applied last, or from
        // the running SA (`ipsec sa set`): changed in place, keeping the replay window.
        if present && old.get(&index).is_some_and(|o| crate::ipsec::IpsecSaConfig { urpf: sa.urpf, ..o.clone() } == *sa) {
            if running_urpf != Some(sa.urpf) {
                apply(c, Request::IpsecSaSet { index, urpf: sa.urpf })?;
                changes.push(Change::new("replaced", "ipsec_sa", format!("SA {index} (urpf in place)")));
            }
            continue;
        }
        if present {
            apply(c, Request::IpsecSaDel { index })?;
        }
        apply(c, Request::IpsecSaAdd(sa.clone()))?;
        changes.push(Change::new(if present { "replaced" } else { "added" }, "ipsec_sa", format!("SA {index}")));
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
            Some((_, running)) if running == s => continue,
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
