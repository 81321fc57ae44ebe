//! The IPsec SPD in the control plane: the config file's `[spd]`, `[[ipsec_spd]]` and
//! `[[ipsec_policy]]` sections, the API's policy and binding requests, and the text of
//! `show ipsec spd` / `show ipsec flow-cache`.
//!
//! ```toml
//! [spd]
//! flow_cache = 1048576          # slots per worker and family, a power of two
//!
//! [[ipsec_spd]]
//! id = 1
//! interfaces = ["eth1"]
//!
//! [[ipsec_policy]]
//! spd = 1
//! direction = "outbound"
//! priority = 100
//! action = "protect"
//! sa = 7
//! local = "198.18.0.0/24"
//! remote = "198.19.0.0/16"
//! protocol = "udp"
//! remote_ports = "4000-4999"
//! ```

use crate::config::{Config, ConfigError, Problems};
use ip::RouterState;
use serde::{Deserialize, Serialize};
use spd::context::FlowCacheGauges;
use spd::policy::{Action, Direction, PolicySpec};
use spd::{FlowCacheStats, SpdState};
use std::sync::Arc;

/// `[spd]`: feature-wide settings.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SpdConfig {
    /// Flow cache slots per worker and address family (a power of two; default 2^20,
    /// a million flows); 0 turns the cache off.
    #[serde(default = "default_flow_cache")]
    pub flow_cache: usize,
}

fn default_flow_cache() -> usize {
    spd::context::DEFAULT_FLOW_CACHE
}

impl Default for SpdConfig {
    fn default() -> Self {
        SpdConfig { flow_cache: default_flow_cache() }
    }
}

impl SpdConfig {
    /// The cache size a worker context takes, `None` for no cache.
    pub fn cache_size(&self) -> Option<usize> {
        (self.flow_cache != 0).then_some(self.flow_cache)
    }
}

/// `[[ipsec_spd]]`: an SPD bound to interfaces (for both directions).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SpdBindingConfig {
    pub id: u32,
    pub interfaces: Vec<String>,
}

/// `[spd]`, each `[[ipsec_policy]]` and each binding's SPD id on their own, every
/// entry's error recorded: what needs no interface is checked with the core sections, so
/// one run reports all of them.
pub fn check_entries(cfg: &Config, problems: &mut Problems) {
    if let Some(n) = cfg.spd.cache_size() {
        problems.take(spd::FlowCache::<u32>::check_size(n).map_err(|e| cfg.err("spd.flow_cache", format!("{e} (or 0 for none)"))));
    }
    for (i, p) in cfg.ipsec_policies.iter().enumerate() {
        let r = p.build(spd::PolicyId(i as u32));
        problems.take(
            r.map_err(|pe| cfg.err(format!("ipsec_policy[{i}].{}", pe.field), format!("got {:?}, expected {}", pe.got, pe.expected))),
        );
    }
    for (i, b) in cfg.ipsec_spds.iter().enumerate() {
        if u16::try_from(b.id).map_or(true, |id| id > spd::SpdId::MAX) {
            problems.push(cfg.err(format!("ipsec_spd[{i}].id"), format!("got {}, expected an SPD id from 0 to {}", b.id, spd::SpdId::MAX)));
        }
    }
}

/// The SPD state the config describes, checked field by field, every entry's error
/// reported.
pub fn build_state(cfg: &Config, router: &RouterState) -> Result<SpdState, ConfigError> {
    let mut problems = Problems::default();
    check_entries(cfg, &mut problems);
    problems.check()?;
    let mut s = SpdState::new();
    for (i, p) in cfg.ipsec_policies.iter().enumerate() {
        problems.take(s.add_policy(p).map_err(|e| cfg.err(format!("ipsec_policy[{i}]"), e.to_string())));
    }
    for (i, b) in cfg.ipsec_spds.iter().enumerate() {
        for (j, name) in b.interfaces.iter().enumerate() {
            let field = format!("ipsec_spd[{i}].interfaces[{j}]");
            let r = router.if_index(name).map_err(|e| cfg.err(&field, e.to_string())).and_then(|ifx| match ifx.0 < 64 {
                true => Ok(ifx),
                false => Err(cfg.err(&field, format!("{name}: an SPD binds to the first 64 interfaces only"))),
            });
            let r = r.and_then(|ifx| s.bind(ifx, b.id).map_err(|e| cfg.err(format!("ipsec_spd[{i}].id"), e.to_string())));
            problems.take(r);
        }
    }
    problems.check()?;
    s.publish();
    Ok(s)
}

/// One row of `show ipsec spd`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyRow {
    pub id: u32,
    #[serde(flatten)]
    pub spec: PolicySpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BindingRow {
    pub interface: String,
    pub spd: u16,
}

pub fn policy_rows(s: &SpdState) -> Vec<PolicyRow> {
    let mut rows: Vec<PolicyRow> = s.policies().map(|p| PolicyRow { id: p.id().0, spec: p.spec.clone() }).collect();
    // As the classifier orders them: SPD, direction, then rank (priority first, then age).
    rows.sort_by_key(|r| (r.spec.spd, r.spec.direction == Direction::Outbound, std::cmp::Reverse(r.spec.priority), r.id));
    rows
}

/// The interfaces with an SPD bound, as the IP tables' `spd_links` bit mask.
pub fn links(s: &SpdState) -> u64 {
    s.bindings().filter(|(i, _)| i.0 < 64).fold(0, |m, (i, _)| m | 1 << i.0)
}

pub fn binding_rows(s: &SpdState, router: &RouterState) -> Vec<BindingRow> {
    s.bindings()
        .map(|(i, spd)| BindingRow {
            interface: router.interfaces().get(i.get()).map_or_else(|| format!("#{}", i.0), |l| l.name.clone()),
            spd: spd.0,
        })
        .collect()
}

pub fn format_spd(policies: &[PolicyRow], bindings: &[BindingRow], version: u64) -> String {
    let mut t = format!("SPD tables version {version}\n");
    for b in bindings {
        t += &format!("interface {} -> spd {}\n", b.interface, b.spd);
    }
    t += &format!(
        "{:>6} {:>4} {:>8} {:>10}  {:<16} {:<24} {:<24} {:<6} {:<11} {:<11}\n",
        "id", "spd", "dir", "priority", "action", "local", "remote", "proto", "lports", "rports"
    );
    for r in policies {
        let s = &r.spec;
        let action = match (s.action, s.sa) {
            (spd::policy::ActionKind::Protect, Some(sa)) => spd::classifier::action_name(Action::Protect(spd::SaId(sa))),
            (spd::policy::ActionKind::Bypass, _) => "bypass".into(),
            _ => "discard".into(),
        };
        let dir = if s.direction == Direction::Inbound { "inbound" } else { "outbound" };
        t += &format!(
            "{:>6} {:>4} {:>8} {:>10}  {:<16} {:<24} {:<24} {:<6} {:<11} {:<11}\n",
            r.id, s.spd, dir, s.priority, action, s.local, s.remote, s.protocol, s.local_ports, s.remote_ports
        );
    }
    t
}

/// `show ipsec flow-cache`: every worker's caches, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FlowCacheReport {
    /// Slots per worker and family (0: not allocated yet, or turned off).
    pub size: u64,
    pub workers: usize,
    pub ipv4: FlowCacheStats,
    pub ipv6: FlowCacheStats,
}

pub fn flow_cache_report(gauges: &[Arc<FlowCacheGauges>]) -> FlowCacheReport {
    let mut r = FlowCacheReport { workers: gauges.len(), ..Default::default() };
    for g in gauges {
        let (size, v4, v6) = g.read();
        r.size = r.size.max(size);
        r.ipv4.add(&v4);
        r.ipv6.add(&v6);
    }
    r
}

/// `show ipsec flow-cache` of a gateway whose `[spd] flow_cache` is 0 (JSON:
/// `"enabled": false`, the counters kept, all zero).
pub const FLOW_CACHE_OFF: &str = "flow cache off ([spd] flow_cache = 0: every packet is classified; set a power of two and restart)\n";

/// `show ipsec flow-cache`: the report, and whether the cache is on (`[spd]` is fixed
/// while the gateway runs, so the applied file says it); off, the text says so instead of
/// a table of zeros.
pub fn show_flow_cache(c: &crate::dataplane::Control) -> crate::api::Reply {
    let r = flow_cache_report(&c.spd_gauges);
    let v = c.spd.shared().load().version;
    let enabled = c.applied.spd.cache_size().is_some();
    let text = if enabled { format_flow_cache(&r, v) } else { FLOW_CACHE_OFF.into() };
    crate::api::Reply::ok(serde_json::json!({ "enabled": enabled, "version": v, "flow_cache": r }), text)
}

pub fn format_flow_cache(r: &FlowCacheReport, version: u64) -> String {
    let mut t = format!("flow cache: {} slots per worker and family, {} worker(s), tables version {version}\n", r.size, r.workers);
    t += &format!(
        "{:<6} {:>14} {:>14} {:>14} {:>14} {:>14} {:>8}\n",
        "family", "hits", "revalidated", "misses", "stale", "overwrites", "wraps"
    );
    for (name, s) in [("ipv4", &r.ipv4), ("ipv6", &r.ipv6)] {
        t += &format!(
            "{:<6} {:>14} {:>14} {:>14} {:>14} {:>14} {:>8}\n",
            name, s.hits, s.revalidated, s.misses, s.stale, s.overwrites, s.wraps
        );
    }
    t
}

/// `ipsec policy add` words → a policy request: `spd <n> inbound|outbound
/// [priority <n>] protect <sa>|bypass|discard [local <sel>] [remote <sel>]
/// [protocol <p>] [local-ports <r>] [remote-ports <r>]`.
pub fn parse_policy(w: &[&str]) -> Result<PolicySpec, String> {
    let mut p = PolicySpec {
        spd: 0,
        direction: Direction::Outbound,
        priority: 0,
        action: spd::policy::ActionKind::Discard,
        sa: None,
        local: "any".into(),
        remote: "any".into(),
        protocol: "any".into(),
        local_ports: "any".into(),
        remote_ports: "any".into(),
    };
    let (mut has_spd, mut has_dir, mut has_action) = (false, false, false);
    let mut it = w.iter();
    let num = |name: &str, v: Option<&&str>| -> Result<u32, String> {
        let v = v.ok_or_else(|| format!("{name}: expected a number after it"))?;
        v.parse().map_err(|_| format!("{name} {v:?}: expected a number"))
    };
    while let Some(&word) = it.next() {
        match word {
            "spd" => {
                p.spd = u16::try_from(num("spd", it.next())?).map_err(|_| "spd: expected 0 to 32767".to_string())?;
                has_spd = true;
            }
            "inbound" | "outbound" => {
                p.direction = if word == "inbound" { Direction::Inbound } else { Direction::Outbound };
                has_dir = true;
            }
            "priority" => p.priority = num("priority", it.next())?,
            "protect" => {
                p.action = spd::policy::ActionKind::Protect;
                p.sa = Some(num("protect", it.next())?);
                has_action = true;
            }
            "bypass" => (p.action, has_action) = (spd::policy::ActionKind::Bypass, true),
            "discard" => (p.action, has_action) = (spd::policy::ActionKind::Discard, true),
            "local" | "remote" | "protocol" | "local-ports" | "remote-ports" => {
                let v = it.next().ok_or_else(|| format!("{word}: expected a value after it"))?.to_string();
                match word {
                    "local" => p.local = v,
                    "remote" => p.remote = v,
                    "protocol" => p.protocol = v,
                    "local-ports" => p.local_ports = v,
                    _ => p.remote_ports = v,
                }
            }
            other => return Err(format!("unexpected {other:?} in ipsec policy add")),
        }
    }
    if !(has_spd && has_dir && has_action) {
        return Err("expected: ipsec policy add spd <n> inbound|outbound [priority <n>] protect <sa>|bypass|discard [local <sel>] [remote <sel>] [protocol <p>] [local-ports <range>] [remote-ports <range>]".into());
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_words_make_the_policy() {
        let p = parse_policy(&[
            "spd",
            "2",
            "outbound",
            "priority",
            "50",
            "protect",
            "7",
            "remote",
            "198.19.0.0/16",
            "protocol",
            "udp",
            "remote-ports",
            "4000-4999",
        ])
        .unwrap();
        assert_eq!((p.spd, p.direction, p.priority, p.sa), (2, Direction::Outbound, 50, Some(7)));
        assert_eq!(
            (p.remote.as_str(), p.protocol.as_str(), p.remote_ports.as_str(), p.local.as_str()),
            ("198.19.0.0/16", "udp", "4000-4999", "any")
        );
        assert!(p.build(spd::PolicyId(1)).is_ok());
        assert!(parse_policy(&["spd", "2", "bypass"]).unwrap_err().contains("expected"));
        assert!(parse_policy(&["spd", "x", "inbound", "bypass"]).unwrap_err().contains("spd"));
        assert!(parse_policy(&["spd", "1", "inbound", "bypass", "frob"]).unwrap_err().contains("frob"));
    }

    /// Bad SPD settings are refused by field name before anything runs; good ones reach
    /// the API, whose requests change and show them.
    #[test]
    fn config_and_api() {
        use crate::api::Request;
        use crate::config::Config;
        use crate::dataplane::assemble;
        use std::path::Path;
        let base = "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.1.1/24\"]\n";
        let pol = "[[ipsec_policy]]\nspd = 1\ndirection = \"outbound\"\n";
        for (extra, field, says) in [
            (format!("{pol}action = \"protect\"\n"), "ipsec_policy[0].sa", "SA id"),
            (format!("{pol}action = \"bypass\"\nremote = \"198.19.0.1/16\"\n"), "ipsec_policy[0].remote", "no host bits"),
            (format!("{pol}action = \"bypass\"\nremote_ports = \"80\"\n"), "ipsec_policy[0].protocol", "tcp, udp or sctp"),
            ("[[ipsec_spd]]\nid = 1\ninterfaces = [\"eth9\"]\n".into(), "ipsec_spd[0].interfaces[0]", "eth9"),
            ("[[ipsec_spd]]\nid = 99999\ninterfaces = [\"pg0\"]\n".into(), "ipsec_spd[0].id", "32767"),
            ("[spd]\nflow_cache = 1000\n".into(), "spd.flow_cache", "power of two"),
        ] {
            let cfg = Config::parse(&format!("{base}{extra}"), "gw.toml", Path::new(".")).unwrap();
            let e = assemble(&cfg).err().unwrap_or_else(|| panic!("{extra} accepted"));
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.contains(says), "{e}");
        }
        let e = Config::parse(&format!("{base}{pol}action = \"encrypt\"\n"), "gw.toml", Path::new(".")).unwrap_err();
        assert!(e.field.starts_with("ipsec_policy[0]") && e.message.contains("protect"), "{e}");
        let good = format!("{base}[spd]\nflow_cache = 1024\n[[ipsec_spd]]\nid = 1\ninterfaces = [\"pg0\"]\n{pol}action = \"protect\"\nsa = 3\nremote = \"198.19.0.0/16\"\n");
        let mut a = assemble(&Config::parse(&good, "gw.toml", Path::new(".")).unwrap()).expect("a valid SPD");
        let c = &mut a.control;
        let v0 = c.spd.shared().load().version;
        let r = c.handle(&crate::cli::parse(&["show", "ipsec", "spd"].map(String::from)).unwrap());
        assert!(r.ok && r.text.contains("protect sa 3") && r.text.contains("interface pg0 -> spd 1"), "{}", r.text);
        let add = crate::cli::parse(
            &"ipsec policy add spd 1 outbound priority 9 discard remote 198.19.1.0/24".split(' ').map(String::from).collect::<Vec<_>>(),
        )
        .unwrap();
        let r = c.handle(&add);
        assert!(r.ok, "{:?}", r.error);
        let id = r.data["id"].as_u64().unwrap() as u32;
        assert!(c.spd.shared().load().version > v0);
        let r = c.handle(&Request::IpsecPolicyAdd(PolicySpec { sa: Some(1), ..c.spd.policy(id).unwrap().spec.clone() }));
        assert!(!r.ok && r.error.as_deref().unwrap_or("").contains("`sa`"), "{:?}", r.error);
        assert!(c.handle(&Request::IpsecPolicyDel { id }).ok);
        assert!(!c.handle(&Request::IpsecPolicyDel { id }).ok);
        let r = c.handle(&Request::IpsecSpdBind { spd: 2, interface: "nope".into() });
        assert!(!r.ok && r.error.unwrap().contains("interface"));
        // Another SPD on a bound interface replaces it, and the reply says so; unbinding an
        // interface with none names it.
        let r = c.handle(&Request::IpsecSpdBind { spd: 2, interface: "pg0".into() });
        assert!(r.ok && r.text == "spd 2 bound to pg0 (replacing spd 1)", "{}", r.text);
        assert!(c.handle(&Request::IpsecSpdUnbind { interface: "pg0".into() }).ok);
        let r = c.handle(&Request::IpsecSpdUnbind { interface: "pg0".into() });
        assert_eq!(r.error.as_deref(), Some("pg0: no SPD bound"));
        let r = c.handle(&Request::IpsecSpdBind { spd: 1, interface: "pg0".into() });
        assert!(r.ok && r.text == "spd 1 bound to pg0", "{}", r.text);
        let r = c.handle(&Request::ShowIpsecFlowCache {});
        assert!(r.ok && r.text.starts_with("flow cache: 1024 slots"), "{}", r.text);
        assert_eq!((&r.data["enabled"], &r.data["flow_cache"]["size"]), (&true.into(), &1024.into()), "{}", r.data);
        // The JSON form of the API takes the config's field names.
        let j: Request =
            serde_json::from_str(r#"{"op":"ipsec_policy_add","spd":1,"direction":"inbound","action":"bypass","remote":"198.19.0.0/16"}"#)
                .unwrap();
        assert!(c.handle(&j).ok);
    }

    /// `[spd] flow_cache = 0`: the show says the cache is off, not a table of zeros, and
    /// its JSON says `"enabled": false` with the same fields as when on.
    #[test]
    fn a_flow_cache_turned_off_is_shown_off() {
        use crate::config::Config;
        use std::path::Path;
        let text = "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.1.1/24\"]\n\
                    [spd]\nflow_cache = 0\n[[ipsec_spd]]\nid = 1\ninterfaces = [\"pg0\"]\n";
        let mut a = crate::dataplane::assemble(&Config::parse(text, "gw.toml", Path::new(".")).unwrap()).unwrap();
        let r = a.control.handle(&crate::cli::parse(&["show", "ipsec", "flow-cache"].map(String::from)).unwrap());
        assert!(r.ok && r.error.is_none(), "{:?}", r.error);
        assert_eq!(r.text, FLOW_CACHE_OFF);
        assert_eq!(r.data["enabled"], false, "{}", r.data);
        assert_eq!((&r.data["flow_cache"]["size"], &r.data["flow_cache"]["ipv4"]["hits"]), (&0.into(), &0.into()), "{}", r.data);
        assert!(r.data["version"].is_u64(), "{}", r.data);
    }

    #[test]
    fn reports_sum_the_workers() {
        let a = Arc::new(FlowCacheGauges::default());
        let r = flow_cache_report(&[a.clone(), a]);
        assert_eq!((r.workers, r.size, r.ipv4.hits), (2, 0, 0));
        assert!(format_flow_cache(&r, 3).contains("tables version 3"));
    }
}
