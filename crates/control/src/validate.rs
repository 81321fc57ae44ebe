//! Checks of a configuration that involve several of its entries: each address once,
//! each subnet on one interface, no route or service on an address of ours, each routed
//! prefix in one place, each policy once.
//! Entry-by-entry checks stay with the code that builds the entry.

use crate::config::{Config, Problems};
use ip::{IfAddr, InterfaceSpec, Prefix};
use std::collections::BTreeMap;

/// What a file with no interface is told: the least a gateway needs.
pub const MINIMAL_CONFIG: &str = "a gateway needs at least one [[interface]] with `name`, `type` and `mac` \
(and `addresses` to route), e.g.\n  [[interface]]\n  name = \"pg0\"\n  type = \"pg\"\n  mac = \"02:00:00:00:00:01\"\n  \
addresses = [\"198.18.0.1/24\"]\nsee docs/CONFIGURATION.md";

/// The feature sections' entries on their own (`[[ipsec_sa]]`, `[[ipsec_policy]]`,
/// `[[ipsec_spd]]` ids, `[lb]`, `[[lb_service]]`), reported with the core sections'
/// errors; what they need of the interfaces and routes is checked when they are built.
pub fn check_feature_entries(cfg: &Config, problems: &mut Problems) {
    crate::ipsec::check_entries(cfg, problems);
    crate::spd::check_entries(cfg, problems);
    crate::lb::check_entries(cfg, problems);
}

/// Each address once in the whole file, and each subnet on one interface: a second
/// interface on an overlapping subnet would make the connected routes ambiguous. Then
/// no address of ours routed elsewhere (`check_own_addresses`).
pub fn check_addresses(cfg: &Config, specs: &[InterfaceSpec], problems: &mut Problems) {
    let mut seen: Vec<(IfAddr, usize, usize)> = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        for (j, a) in s.addresses.iter().enumerate() {
            let field = format!("interface[{i}].addresses[{j}]");
            if let Some((_, oi, oj)) = seen.iter().find(|(o, ..)| o.addr == a.addr) {
                let why = format!("{} is already interface[{oi}].addresses[{oj}] ({}): each address once", a.addr, specs[*oi].name);
                problems.push(cfg.err(field, why));
            } else if let Some((o, oi, oj)) = seen.iter().find(|(o, oi, _)| *oi != i && o.subnet().overlaps(&a.subnet())) {
                let why = format!(
                    "subnet {} overlaps {} of interface[{oi}].addresses[{oj}] ({}): expected each subnet on one interface",
                    a.subnet(),
                    o.subnet(),
                    specs[*oi].name
                );
                problems.push(cfg.err(field, why));
            }
            seen.push((*a, i, j));
        }
    }
    check_own_addresses(cfg, specs, problems);
}

/// Every prefix the file routes, with its field: `[[route]]`s, GTP-U tunnels' `ue`, UDP
/// tunnels' and SAs' `routes`.
fn routed_prefixes(cfg: &Config) -> Vec<(String, &str)> {
    let mut places: Vec<(String, &str)> = Vec::new();
    places.extend(cfg.routes.iter().enumerate().map(|(i, r)| (format!("route[{i}].prefix"), r.prefix.as_str())));
    places.extend(cfg.gtpu_tunnels.iter().enumerate().filter_map(|(i, t)| Some((format!("gtpu_tunnel[{i}].ue"), t.ue.as_deref()?))));
    for (i, t) in cfg.udp_tunnels.iter().enumerate() {
        places.extend(t.routes.iter().enumerate().map(|(j, r)| (format!("udp_tunnel[{i}].routes[{j}]"), r.as_str())));
    }
    for (i, sa) in cfg.ipsec_sas.iter().enumerate() {
        places.extend(sa.routes.iter().enumerate().map(|(j, r)| (format!("ipsec_sa[{i}].routes[{j}]"), r.as_str())));
    }
    places
}

/// No route, GTP-U `ue`, tunnel's or SA's `routes` is one of our own addresses (a /32
/// or /128 equal to it): it would take the gateway's own packets. A wider prefix is
/// fine (the address stays local by the longest match). A service on an address of
/// ours is served without a route (`crate::lb::add_service`); a service address that is
/// not ours may not be `[lb]`'s SNAT address, to which every translated connection's
/// replies come.
fn check_own_addresses(cfg: &Config, specs: &[InterfaceSpec], problems: &mut Problems) {
    let own = |a: std::net::IpAddr| {
        specs.iter().enumerate().find_map(|(i, s)| s.addresses.iter().position(|x| x.addr == a).map(|j| (i, j, s.name.as_str())))
    };
    let places = routed_prefixes(cfg);
    for (field, text) in &places {
        // Prefixes that do not parse are reported where they are built.
        let Ok(p) = text.parse::<Prefix>() else { continue };
        let (a, len) = match p {
            Prefix::V4(a, l) => (std::net::IpAddr::V4(a), l),
            Prefix::V6(a, l) => (std::net::IpAddr::V6(a), l),
        };
        if len != Prefix::max_len(a) {
            continue;
        }
        if let Some((i, j, name)) = own(a) {
            let why = format!(
                "{p} is interface[{i}].addresses[{j}] ({name}): packets to it are the gateway's own, and a route there would take them; expected another prefix (a wider one that contains it is fine)"
            );
            problems.push(cfg.err(field, why));
        }
    }
    for (k, s) in cfg.lb_services.iter().enumerate() {
        if s.kind == lb::ServiceType::NodePort {
            continue;
        }
        let field = format!("lb_service[{k}].vip");
        // A service on an address of ours is served by `ipN-local`, as a node port is
        // (`crate::lb::add_service`), so it may be the SNAT address too.
        if own(s.vip).is_some() {
            continue;
        }
        if let Some(snat) = [("lb.snat4", cfg.lb.snat4), ("lb.snat6", cfg.lb.snat6)].into_iter().find(|(_, a)| *a == Some(s.vip)) {
            let why = format!(
                "{} is {}, the source Cluster-policy connections are translated to (their replies come back to it): expected another address",
                s.vip, snat.0
            );
            problems.push(cfg.err(field, why));
        }
    }
}

/// A prefix routed from two places of the file (a `[[route]]`, a GTP-U tunnel's `ue`, a
/// UDP tunnel's or an outbound SA's `routes`) would go to whichever is installed last:
/// refused, naming both. Prefixes that do not parse are reported where they are built.
/// So is a `[[ipsec_policy]]` written twice.
pub fn check_once(cfg: &Config, problems: &mut Problems) {
    let places = routed_prefixes(cfg);
    let mut first: BTreeMap<Prefix, &str> = BTreeMap::new();
    for (field, text) in &places {
        let Ok(p) = text.parse::<Prefix>() else { continue };
        match first.get(&p) {
            // A route's own duplicates are reported where routes are built.
            Some(other) if !(other.starts_with("route[") && field.starts_with("route[")) => {
                problems.push(cfg.err(field.as_str(), format!("{p} is already routed by {other}: expected each prefix in one place")));
            }
            Some(_) => {}
            None => {
                first.insert(p, field);
            }
        }
    }
    for (i, p) in cfg.ipsec_policies.iter().enumerate() {
        if let Some(k) = cfg.ipsec_policies[..i].iter().position(|q| q == p) {
            problems
                .push(cfg.err(format!("ipsec_policy[{i}]"), format!("the same policy as ipsec_policy[{k}]: expected each policy once")));
        }
    }
}
