//! GTP-U tunnels in the control plane: the one text form of a tunnel (shared by the
//! config file's `[[gtpu_tunnel]]`, the JSON API's `create_gtpu_tunnel` and the CLI),
//! its conversion to a validated [`TunnelSpec`], and the rows `show gtpu tunnels` prints.

use crate::cli::address_word as address;
use gtpu::{ChecksumMode, DecapNext, Dscp, PduDirection, SrcPort, TunnelSpec};
use ip::outer::{FragmentPolicy, MtuPolicy};
use ip::tables::{TunnelRef, GTPU_IF_PREFIX};
use ip::{Prefix, RouteTarget, RouterState};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecapNextName {
    #[default]
    Ip4,
    Ip6,
    Ip,
    Ethernet,
}

/// A tunnel as text: config, API and CLI all fill this in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GtpuTunnelConfig {
    pub local: String,
    pub remote: String,
    pub teid_in: u32,
    pub teid_out: u32,
    /// Add a PDU Session Container with this QFI (0..=63).
    #[serde(default)]
    pub qfi: Option<u8>,
    #[serde(default)]
    pub pdu_direction: PduDirection,
    #[serde(default)]
    pub decap_next: DecapNextName,
    /// For `decap_next = "ethernet"`: the interface inner frames leave by.
    #[serde(default)]
    pub decap_interface: Option<String>,
    #[serde(default)]
    pub sequence: bool,
    /// Default: zero over IPv4 (as VPP does), software over IPv6.
    #[serde(default)]
    pub checksum: Option<ChecksumMode>,
    #[serde(default)]
    pub accept_zero_checksum: bool,
    #[serde(default)]
    pub src_port: SrcPort,
    /// Downlink route into the tunnel (the UE address or prefix).
    #[serde(default)]
    pub ue: Option<String>,
    /// Inner MTU cap; the effective MTU is also at most the outer path's MTU less the
    /// tunnel's headers.
    #[serde(default)]
    pub mtu: Option<u16>,
    /// Inner IPv4 without DF larger than the MTU: fragment the inner packet (default)
    /// or the outer one.
    #[serde(default)]
    pub fragment: FragmentPolicy,
    /// Lower the MSS of TCP SYNs in both directions to fit the tunnel's MTU.
    #[serde(default)]
    pub tcp_mss_clamp: bool,
    /// Check the sources of the inner packets it decapsulates (RFC 3704): strict, the
    /// route back goes into this tunnel; loose, there is a route back.
    #[serde(default)]
    pub urpf: ip::urpf::Urpf,
    /// The outer DSCP: `"inherit"` (the inner packet's, the default) or 0 to 63 (the
    /// tunnel's own; ECN still the inner packet's).
    #[serde(default)]
    pub dscp: Dscp,
}

/// A field-named error, for config messages (`gtpu_tunnel[3].remote: …`).
pub type FieldError = (&'static str, String);

impl GtpuTunnelConfig {
    /// Parse the text fields; semantic checks (our address, duplicates) follow in
    /// `GtpuState::validate`.
    pub fn to_spec(&self, router: &RouterState) -> Result<TunnelSpec, FieldError> {
        let local: IpAddr = self.local.parse().map_err(|_| ("local", format!("{:?}: expected an IPv4 or IPv6 address", self.local)))?;
        let remote: IpAddr = self.remote.parse().map_err(|_| ("remote", format!("{:?}: expected an IPv4 or IPv6 address", self.remote)))?;
        let mut s = TunnelSpec::new(local, remote, self.teid_in, self.teid_out);
        if let Some(q) = self.qfi {
            s.qfi = Some(wire::gtpu::Qfi::new(q).ok_or(("qfi", format!("{q}: expected 0 to 63")))?);
        }
        s.pdu_direction = self.pdu_direction;
        s.decap_next = match (self.decap_next, &self.decap_interface) {
            (DecapNextName::Ethernet, Some(i)) => DecapNext::Ethernet(router.if_index(i).map_err(|e| ("decap_interface", e.to_string()))?),
            (DecapNextName::Ethernet, None) => {
                return Err(("decap_interface", "decap_next ethernet needs the interface frames leave by".into()))
            }
            (_, Some(_)) => return Err(("decap_interface", "only decap_next = \"ethernet\" takes an interface".into())),
            (DecapNextName::Ip4, None) => DecapNext::Ip4,
            (DecapNextName::Ip6, None) => DecapNext::Ip6,
            (DecapNextName::Ip, None) => DecapNext::Ip,
        };
        s.sequence = self.sequence;
        ChecksumMode::check_for(self.checksum, self.accept_zero_checksum, local)?;
        s.checksum = self.checksum.unwrap_or(s.checksum);
        s.accept_zero_checksum = self.accept_zero_checksum;
        s.src_port = self.src_port;
        if let Some(u) = &self.ue {
            s.ue = Some(u.parse::<Prefix>().map_err(|e| ("ue", format!("{u:?}: {e}")))?);
        }
        s.mtu = MtuPolicy::checked(self.mtu, self.fragment, self.tcp_mss_clamp)?;
        s.urpf = self.urpf;
        s.dscp = self.dscp;
        Ok(s)
    }
}

/// The tunnel an interface name like `gtpu_tunnel3` names.
pub fn tunnel_by_name(g: &gtpu::GtpuState, name: &str) -> Option<TunnelRef> {
    let id = TunnelRef::gtpu_id(name)?;
    let t = g.tunnel(id)?;
    Some(TunnelRef { kind: t.kind(), id })
}

/// A route out of `interface = "gtpu_tunnelN"` becomes a route into that tunnel.
pub fn resolve_target(g: &gtpu::GtpuState, router: &RouterState, t: RouteTarget) -> Result<RouteTarget, String> {
    match t {
        RouteTarget::Interface(name) if router.if_index(&name).is_err() => match tunnel_by_name(g, &name) {
            Some(t) => Ok(RouteTarget::Tunnel(t)),
            None if name.starts_with(GTPU_IF_PREFIX) => Err(format!("no tunnel named {name:?}")),
            None => Ok(RouteTarget::Interface(name)),
        },
        RouteTarget::Via { interface: Some(name), .. } if name.starts_with(GTPU_IF_PREFIX) => {
            Err(format!("{name} is a tunnel: route into it with `interface {name}`, not via a next hop"))
        }
        other => Ok(other),
    }
}

/// One row of `show gtpu tunnels`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TunnelRow {
    pub name: String,
    /// Packets and bytes out of (`rx`) and into (`tx`) the tunnel, all workers; `None`
    /// while per-tunnel counting is off (`[metrics] tunnel_counters`).
    pub counters: Option<ip::tunnel_counters::TunnelCount>,
    pub local: String,
    pub remote: String,
    pub teid_in: u32,
    pub teid_out: u32,
    pub qfi: Option<u8>,
    pub checksum: ChecksumMode,
    pub accept_zero_checksum: bool,
    pub src_port: SrcPort,
    pub sequence: bool,
    pub decap_next: String,
    pub ue: Option<String>,
    pub outer_adjacency: u32,
    /// The inner MTU now: the outer link's MTU less the headers, capped by `mtu`
    /// (none while the outer route is unresolved and no cap is set).
    pub inner_mtu: Option<usize>,
    pub mtu: MtuPolicy,
    pub urpf: ip::urpf::Urpf,
    /// `"inherit"` or the fixed outer DSCP.
    pub dscp: Dscp,
}

pub fn rows(g: &gtpu::GtpuState, router: &RouterState, limit: usize) -> Vec<TunnelRow> {
    let shown: Vec<(u32, &gtpu::Tunnel)> = g.tunnels().take(limit).collect();
    // The UE prefixes of the shown tunnels, from the router in one pass.
    let last = shown.last().map_or(0, |(id, _)| *id);
    let ue: std::collections::HashMap<u32, Prefix> =
        router.tunnel_routes_of(|r| is_gtpu(r) && r.id <= last).into_iter().map(|(p, r)| (r.id, p)).collect();
    rows_of(g, router, shown, &ue)
}

fn is_gtpu(r: TunnelRef) -> bool {
    matches!(r.kind, ip::tables::TunnelKind::Gtpu4 | ip::tables::TunnelKind::Gtpu6)
}

fn rows_of(
    g: &gtpu::GtpuState,
    router: &RouterState,
    shown: Vec<(u32, &gtpu::Tunnel)>,
    ue: &std::collections::HashMap<u32, Prefix>,
) -> Vec<TunnelRow> {
    shown
        .into_iter()
        .map(|(id, t)| {
            let mut s = t.spec();
            s.ue = ue.get(&id).copied();
            TunnelRow {
                name: TunnelRef { kind: t.kind(), id }.if_name(),
                counters: g.counters.enabled().then(|| g.counters.count(id)),
                local: s.local.to_string(),
                remote: s.remote.to_string(),
                teid_in: s.teid_in,
                teid_out: s.teid_out,
                qfi: s.qfi.map(|q| q.get()),
                checksum: s.checksum,
                accept_zero_checksum: s.accept_zero_checksum,
                src_port: s.src_port,
                sequence: s.sequence,
                decap_next: match s.decap_next {
                    DecapNext::Ip4 => "ip4".into(),
                    DecapNext::Ip6 => "ip6".into(),
                    DecapNext::Ip => "ip".into(),
                    DecapNext::Ethernet(i) => format!("ethernet {}", router.interfaces().get(i.get()).map_or("?", |x| x.name.as_str())),
                },
                ue: s.ue.map(|p| p.to_string()),
                outer_adjacency: g.outer_adj(id),
                inner_mtu: Some(ip::outer::inner_mtu(
                    router.tunnel_link_mtu(g.outer_adj(id), s.local, s.remote, wire::gtpu::PORT),
                    t.rewrite_len as usize,
                    t.mtu.mtu,
                ))
                .filter(|&m| m != usize::MAX),
                mtu: t.mtu,
                urpf: t.urpf,
                dscp: s.dscp,
            }
        })
        .collect()
}

pub fn format_rows(rows: &[TunnelRow], total: usize) -> String {
    let mut s = format!("{total} GTP-U tunnels{}\n", counting_note(rows));
    for r in rows {
        s += &format!(
            "{:<16} {} -> {} teid in {:#x} out {:#x}{}{} checksum {} src-port {}{} decap {}{}{} mtu {}{}{}{}\n",
            r.name,
            r.local,
            r.remote,
            r.teid_in,
            r.teid_out,
            r.qfi.map(|q| format!(" qfi {q}")).unwrap_or_default(),
            if r.sequence { " seq" } else { "" },
            crate::format::word(&r.checksum),
            crate::format::word(&r.src_port),
            dscp_words(r.dscp),
            r.decap_next,
            r.ue.as_ref().map(|u| format!(" ue {u}")).unwrap_or_default(),
            // The way to the remote (a route and its next hop's address) is not known yet.
            if r.outer_adjacency == ip::tables::ADJ_MISS { " remote unresolved" } else { "" },
            r.inner_mtu.map_or("?".into(), |m| m.to_string()),
            if r.mtu.fragment == FragmentPolicy::Outer { " fragment outer" } else { "" },
            if r.mtu.mss_clamp { " mss-clamp" } else { "" },
            crate::format::urpf_words(r.urpf),
        );
        if let Some(c) = &r.counters {
            s +=
                &format!("{:<16} rx {} packets {} bytes, tx {} packets {} bytes\n", "", c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes);
        }
    }
    if rows.len() < total {
        s += &format!("… {} more\n", total - rows.len());
    }
    s
}

/// A tunnel row's DSCP policy: nothing for the default (the inner packet's), ` dscp N`
/// for a fixed one (any tunnel kind's rows).
pub fn dscp_words(d: Dscp) -> String {
    match d {
        Dscp::Inherit => String::new(),
        Dscp::Fixed(n) => format!(" dscp {n}"),
    }
}

/// What a tunnel listing says when its rows have no counts: that counting is off and how
/// to turn it on (any tunnel kind's rows).
pub fn counting_note<R: HasTunnelCount>(rows: &[R]) -> &'static str {
    match rows.first() {
        Some(r) if r.count().is_none() => " (per-tunnel counters off: set [metrics] tunnel_counters = true)",
        _ => "",
    }
}

/// A listing's row with per-tunnel counts (when counting is on).
pub trait HasTunnelCount {
    fn count(&self) -> Option<ip::tunnel_counters::TunnelCount>;
}

impl HasTunnelCount for TunnelRow {
    fn count(&self) -> Option<ip::tunnel_counters::TunnelCount> {
        self.counters
    }
}

/// The routes that go with a tunnel when it is deleted: its own (a GTP-U tunnel's
/// `ue`, a UDP tunnel's `routes`) and the static routes into it.
pub fn routes_into(router: &RouterState, t: TunnelRef) -> Vec<Prefix> {
    let mut v: Vec<Prefix> = router.tunnel_routes_of(|r| r == t).into_iter().map(|(p, _)| p).collect();
    v.extend(router.routes_into(t));
    v
}

/// The reply to a tunnel's deletion: what went with it.
pub fn deleted_reply(name: &str, routes: &[Prefix]) -> crate::api::Reply {
    let list: Vec<String> = routes.iter().map(Prefix::to_string).collect();
    let text = match list.len() {
        0 => format!("deleted {name} (no route went with it)"),
        n => format!("deleted {name} and {n} route{} into it: {}", if n == 1 { "" } else { "s" }, list.join(", ")),
    };
    crate::api::Reply::ok(serde_json::json!({ "name": name, "routes": list }), text)
}

/// `set gtpu tunnel <name> [remote <addr>] [teid-out <n>] [qfi <q>] [dscp inherit|<0-63>]`.
pub fn parse_set(name: &str, w: &[&str]) -> Result<crate::api::Request, String> {
    let (mut remote, mut teid_out, mut qfi, mut dscp) = (None, None, None, None);
    let mut pairs = w.chunks(2);
    for pair in &mut pairs {
        match pair {
            ["remote", v] => remote = Some(v.to_string()),
            ["teid-out", v] => teid_out = Some(crate::cli::u32_word("teid-out", v)?),
            ["qfi", v] => qfi = Some(v.parse::<u8>().map_err(|_| format!("qfi {v:?}: expected 0 to 63"))?),
            ["dscp", v] => dscp = Some(v.parse::<Dscp>().map_err(|e| format!("dscp {e}"))?),
            [k, _] => return Err(format!("set gtpu tunnel: {k:?} cannot be changed in place (remote, teid-out, qfi or dscp)")),
            [k] => return Err(format!("set gtpu tunnel: {k:?} needs a value")),
            _ => unreachable!("chunks of two"),
        }
    }
    if remote.is_none() && teid_out.is_none() && qfi.is_none() && dscp.is_none() {
        return Err("set gtpu tunnel <name> needs remote <addr>, teid-out <n>, qfi <0-63> or dscp inherit|<0-63>".into());
    }
    Ok(crate::api::Request::SetGtpuTunnel { name: name.to_string(), remote, teid_out, qfi, dscp })
}

/// `show gtpu tunnel teid <n> | remote <addr> | ue <addr>`.
pub fn parse_find(key: &str, value: &str) -> Result<crate::api::Request, String> {
    let (mut teid, mut remote, mut ue) = (None, None, None);
    match key {
        "teid" => teid = Some(crate::cli::u32_word("teid", value)?),
        "remote" => remote = Some(value.to_string()),
        _ => ue = Some(value.to_string()),
    }
    Ok(crate::api::Request::FindGtpuTunnels { teid, remote, ue })
}

/// The GTP-U requests of the typed API beyond create and list.
pub fn handle(c: &mut crate::dataplane::Control, req: &crate::api::Request) -> Result<crate::api::Reply, String> {
    use crate::api::{Reply, Request};
    Ok(match req {
        Request::DeleteGtpuTunnel { name } => {
            let t = tunnel_by_name(&c.gtpu, name).ok_or_else(|| format!("no tunnel named {name:?}"))?;
            let routes = routes_into(&c.state, t);
            c.gtpu.delete(&mut c.state, t.id).map_err(|e| e.to_string())?;
            c.publish_routes();
            deleted_reply(name, &routes)
        }
        Request::SetGtpuTunnel { name, remote, teid_out, qfi, dscp } => {
            let t = tunnel_by_name(&c.gtpu, name).ok_or_else(|| format!("no tunnel named {name:?}"))?;
            let change = gtpu::TunnelChange {
                remote: remote.as_deref().map(|r| address("remote", r)).transpose()?,
                teid_out: *teid_out,
                qfi: qfi.map(|q| wire::gtpu::Qfi::new(q).ok_or(format!("qfi {q}: expected 0 to 63"))).transpose()?,
                urpf: None,
                dscp: *dscp,
            };
            let before = c.gtpu.modify(&mut c.state, t.id, change).map_err(|e| e.to_string())?;
            // Only this tunnel's slot changed: the other tables are republished as they are.
            c.publish();
            let after = c.gtpu.spec(&c.state, t.id).expect("modified, so live");
            let text = format!(
                "{name}: remote {} -> {}, teid out {:#x} -> {:#x}{}{}",
                before.remote,
                after.remote,
                before.teid_out,
                after.teid_out,
                match (before.qfi, after.qfi) {
                    (b, a) if b != a =>
                        format!(", qfi {} -> {}", b.map_or("none".into(), |q| q.get().to_string()), a.map_or(0, |q| q.get())),
                    _ => String::new(),
                },
                if before.dscp != after.dscp { format!(", dscp {} -> {}", before.dscp, after.dscp) } else { String::new() }
            );
            Reply::ok(
                serde_json::json!({
                    "name": name, "remote": after.remote, "teid_out": after.teid_out, "qfi": after.qfi.map(|q| q.get()), "dscp": after.dscp,
                }),
                text,
            )
        }
        Request::FindGtpuTunnels { teid, remote, ue } => {
            let ids: Vec<u32> = match (teid, remote, ue) {
                (Some(n), None, None) => {
                    c.gtpu.tunnels().filter(|(_, t)| t.teid_in == *n || t.teid_out() == *n).map(|(id, _)| id).collect()
                }
                (None, Some(r), None) => {
                    let r = address("remote", r)?;
                    c.gtpu.tunnels().filter(|(_, t)| t.remote() == r).map(|(id, _)| id).collect()
                }
                (None, None, Some(u)) => {
                    let u = address("ue", u)?;
                    // The most specific UE route covering the address, as the FIB would pick.
                    let best = c.state.tunnel_routes_of(is_gtpu).into_iter().filter(|(p, _)| p.contains(u)).max_by_key(|(p, _)| p.len());
                    best.map(|(_, r)| r.id).into_iter().collect()
                }
                _ => return Err("find GTP-U tunnels by one of teid, remote or ue".into()),
            };
            let ue: std::collections::HashMap<u32, Prefix> =
                c.state.tunnel_routes_of(|r| is_gtpu(r) && ids.contains(&r.id)).into_iter().map(|(p, r)| (r.id, p)).collect();
            let shown: Vec<(u32, &gtpu::Tunnel)> = ids.iter().filter_map(|&id| Some((id, c.gtpu.tunnel(id)?))).collect();
            let rows = rows_of(&c.gtpu, &c.state, shown, &ue);
            let mut text = format_rows(&rows, rows.len());
            text = text.replacen(" GTP-U tunnels", " GTP-U tunnels match", 1);
            Reply::ok(serde_json::to_value(&rows).map_err(|e| e.to_string())?, text)
        }
        _ => unreachable!("only GTP-U requests are sent here"),
    })
}
