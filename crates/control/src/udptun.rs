//! UDP tunnels (GUE, GRE-in-UDP, direct) in the control plane: the one text form of a
//! tunnel (the config file's `[[udp_tunnel]]`, the JSON API's `create_udp_tunnel`, the
//! CLI), its conversion to a [`UdpTunnelSpec`], the rows `show udp tunnels` prints, and
//! the requests that change a tunnel in place (`set udp tunnel`) and find tunnels
//! (`show udp tunnel remote|local|id …`).

use crate::cli::address_word as address;
use ip::outer::{ChecksumMode, FragmentPolicy, MtuPolicy};
use ip::tables::{TunnelRef, UDP_TUNNEL_IF_PREFIX};
use ip::Prefix;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use udptun::{Encap, UdpTunState, UdpTunnelChange, UdpTunnelSpec};

/// A tunnel as text: config, API and CLI all fill this in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdpTunnelConfig {
    pub local: String,
    pub remote: String,
    /// `gue`, `gre` (GRE-in-UDP) or `direct`.
    pub encap: Encap,
    /// Destination port of what we send and the port we receive on. Default: 6080 for
    /// GUE, 4754 for GRE; direct encapsulation needs one.
    #[serde(default)]
    pub port: Option<u16>,
    /// The source-port range a hash of the inner flow is spread over (default
    /// 49152–65535).
    #[serde(default)]
    pub src_port_min: Option<u16>,
    #[serde(default)]
    pub src_port_max: Option<u16>,
    /// GRE key (encap = "gre").
    #[serde(default)]
    pub key: Option<u32>,
    /// Send a GRE checksum / GRE sequence numbers (encap = "gre"; RFC 2784, 2890).
    #[serde(default)]
    pub gre_checksum: bool,
    #[serde(default)]
    pub gre_sequence: bool,
    /// Default: zero over IPv4, software over IPv6.
    #[serde(default)]
    pub checksum: Option<ChecksumMode>,
    #[serde(default)]
    pub accept_zero_checksum: bool,
    #[serde(default)]
    pub ttl: Option<u8>,
    /// Inner MTU cap, fragmentation policy and MSS clamping, as for GTP-U tunnels.
    #[serde(default)]
    pub mtu: Option<u16>,
    #[serde(default)]
    pub fragment: FragmentPolicy,
    #[serde(default)]
    pub tcp_mss_clamp: bool,
    /// Check the sources of the inner packets it decapsulates, as for GTP-U tunnels.
    #[serde(default)]
    pub urpf: ip::urpf::Urpf,
    /// The outer DSCP, as for GTP-U tunnels.
    #[serde(default)]
    pub dscp: udptun::Dscp,
    /// Routes into the tunnel.
    #[serde(default)]
    pub routes: Vec<String>,
}

/// A field-named error, for config messages (`udp_tunnel[3].port: …`).
pub type FieldError = (&'static str, String);

impl UdpTunnelConfig {
    /// Parse the text fields; semantic checks (our address, duplicates) follow in
    /// `UdpTunState::validate`.
    pub fn to_spec(&self) -> Result<(UdpTunnelSpec, Vec<Prefix>), FieldError> {
        let local: IpAddr = self.local.parse().map_err(|_| ("local", format!("{:?}: expected an IPv4 or IPv6 address", self.local)))?;
        let remote: IpAddr = self.remote.parse().map_err(|_| ("remote", format!("{:?}: expected an IPv4 or IPv6 address", self.remote)))?;
        let port = match (self.port, self.encap.default_port()) {
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => return Err(("port", "direct encapsulation has no standard port: give one".into())),
        };
        let mut s = UdpTunnelSpec::new(local, remote, self.encap, port);
        s.src_port_min = self.src_port_min.unwrap_or(s.src_port_min);
        s.src_port_max = self.src_port_max.unwrap_or(s.src_port_max);
        if s.src_port_min == 0 || s.src_port_min > s.src_port_max {
            return Err(("src_port_min", format!("{}-{}: expected 1 to 65535, low end first", s.src_port_min, s.src_port_max)));
        }
        if self.key.is_some() && self.encap != Encap::Gre {
            return Err(("key", "a key is for encap = \"gre\"".into()));
        }
        s.gre_key = self.key;
        for (set, field) in [(self.gre_checksum, "gre_checksum"), (self.gre_sequence, "gre_sequence")] {
            if set && self.encap != Encap::Gre {
                return Err((field, format!("{field} is for encap = \"gre\"")));
            }
        }
        (s.gre_checksum, s.gre_sequence) = (self.gre_checksum, self.gre_sequence);
        ChecksumMode::check_for(self.checksum, self.accept_zero_checksum, local)?;
        s.checksum = self.checksum.unwrap_or(s.checksum);
        s.accept_zero_checksum = self.accept_zero_checksum;
        if let Some(t) = self.ttl {
            if t == 0 {
                return Err(("ttl", "expected 1 to 255".into()));
            }
            s.ttl = t;
        }
        s.mtu = MtuPolicy::checked(self.mtu, self.fragment, self.tcp_mss_clamp)?;
        s.urpf = self.urpf;
        s.dscp = self.dscp;
        let routes = self
            .routes
            .iter()
            .map(|r| r.parse::<Prefix>().map_err(|e| ("routes", format!("{r:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((s, routes))
    }
}

/// The tunnel an interface name like `udp_tunnel3` names.
pub fn tunnel_by_name(u: &UdpTunState, name: &str) -> Option<TunnelRef> {
    let id = TunnelRef::udp_tunnel_id(name)?;
    let s = u.spec(id)?;
    Some(TunnelRef { kind: s.kind(), id })
}

pub fn is_tunnel_name(name: &str) -> bool {
    name.starts_with(UDP_TUNNEL_IF_PREFIX)
}

/// One row of `show udp tunnels`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UdpTunnelRow {
    pub name: String,
    /// Packets and bytes out of (`rx`) and into (`tx`) the tunnel, all workers; `None`
    /// while per-tunnel counting is off (`[metrics] tunnel_counters`).
    pub counters: Option<ip::tunnel_counters::TunnelCount>,
    pub local: String,
    pub remote: String,
    pub encap: Encap,
    pub port: u16,
    pub src_ports: String,
    pub key: Option<u32>,
    pub gre_checksum: bool,
    pub gre_sequence: bool,
    pub checksum: ChecksumMode,
    pub accept_zero_checksum: bool,
    pub ttl: u8,
    pub mtu: MtuPolicy,
    /// The inner MTU now (see `gtpu::TunnelRow::inner_mtu`).
    pub inner_mtu: Option<usize>,
    pub urpf: ip::urpf::Urpf,
    /// `"inherit"` or the fixed outer DSCP.
    pub dscp: udptun::Dscp,
}

pub fn rows(u: &UdpTunState, router: &ip::RouterState) -> Vec<UdpTunnelRow> {
    rows_where(u, router, |_, _| true)
}

/// The rows of the tunnels `keep` picks.
pub fn rows_where(u: &UdpTunState, router: &ip::RouterState, keep: impl Fn(u32, &UdpTunnelSpec) -> bool) -> Vec<UdpTunnelRow> {
    u.tunnels()
        .filter(|&(id, s)| keep(id, s))
        .map(|(id, s)| UdpTunnelRow {
            counters: u.counters.enabled().then(|| u.counters.count(id)),
            inner_mtu: u
                .outer(id)
                .map(|(overhead, adj)| ip::outer::inner_mtu(router.tunnel_link_mtu(adj, s.local, s.remote, s.port), overhead, s.mtu.mtu))
                .filter(|&m| m != usize::MAX),
            name: format!("{UDP_TUNNEL_IF_PREFIX}{id}"),
            local: s.local.to_string(),
            remote: s.remote.to_string(),
            encap: s.encap,
            port: s.port,
            src_ports: format!("{}-{}", s.src_port_min, s.src_port_max),
            key: s.gre_key,
            gre_checksum: s.gre_checksum,
            gre_sequence: s.gre_sequence,
            checksum: s.checksum,
            accept_zero_checksum: s.accept_zero_checksum,
            ttl: s.ttl,
            mtu: s.mtu,
            urpf: s.urpf,
            dscp: s.dscp,
        })
        .collect()
}

pub fn format_rows(rows: &[UdpTunnelRow]) -> String {
    use std::fmt::Write;
    let mut o = format!("{} UDP tunnels{}\n", rows.len(), crate::gtpu::counting_note(rows));
    for r in rows {
        let key = r.key.map(|k| format!(" key {k:#x}")).unwrap_or_default()
            + if r.gre_checksum { " gre-checksum" } else { "" }
            + if r.gre_sequence { " gre-sequence" } else { "" };
        let _ = writeln!(
            o,
            "{:<16} {} -> {} {} port {} src-ports {}{} checksum {}{} ttl {}{}{}{}{}{}",
            r.name,
            r.local,
            r.remote,
            r.encap.name(),
            r.port,
            r.src_ports,
            key,
            crate::format::word(&r.checksum),
            if r.accept_zero_checksum { " accept-zero-checksum" } else { "" },
            r.ttl,
            crate::gtpu::dscp_words(r.dscp),
            format!(" mtu {}", r.inner_mtu.map_or("?".into(), |m| m.to_string())),
            if r.mtu.fragment == FragmentPolicy::Outer { " fragment outer" } else { "" },
            if r.mtu.mss_clamp { " mss-clamp" } else { "" },
            crate::format::urpf_words(r.urpf),
        );
        if let Some(c) = &r.counters {
            let _ = writeln!(
                o,
                "{:<16} rx {} packets {} bytes, tx {} packets {} bytes",
                "", c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes
            );
        }
    }
    o
}

impl crate::gtpu::HasTunnelCount for UdpTunnelRow {
    fn count(&self) -> Option<ip::tunnel_counters::TunnelCount> {
        self.counters
    }
}

/// A tunnel named `udp_tunnel<id>` or by its bare id (`3`), as `set` and `show` take it.
fn named(u: &UdpTunState, name: &str) -> Result<TunnelRef, String> {
    let full = if name.bytes().all(|b| b.is_ascii_digit()) { format!("{UDP_TUNNEL_IF_PREFIX}{name}") } else { name.to_string() };
    tunnel_by_name(u, &full).ok_or_else(|| format!("no tunnel named {full:?} (show udp tunnels lists them)"))
}

/// `set udp tunnel <udp_tunnelN> [remote <addr>] [port <n>] [key <n>|none] [dscp inherit|<0-63>]`.
pub fn parse_set(name: &str, w: &[&str]) -> Result<crate::api::Request, String> {
    let (mut remote, mut port, mut key, mut dscp) = (None, None, None, None);
    for pair in w.chunks(2) {
        match pair {
            ["remote", v] => remote = Some(v.to_string()),
            ["port", v] => port = Some(crate::cli::port_word("port", v)?),
            ["key", "none"] => key = Some(None),
            ["key", v] => key = Some(Some(crate::cli::u32_word("key", v)?)),
            ["dscp", v] => dscp = Some(v.parse::<ip::outer::tos::Dscp>().map_err(|e| format!("dscp {e}"))?),
            [k, _] => return Err(format!("set udp tunnel: {k:?} cannot be changed in place (remote, port, key or dscp)")),
            [k] => return Err(format!("set udp tunnel: {k:?} needs a value")),
            _ => unreachable!("chunks of two"),
        }
    }
    if remote.is_none() && port.is_none() && key.is_none() && dscp.is_none() {
        return Err("set udp tunnel <name> needs remote <addr>, port <n>, key <n>|none or dscp inherit|<0-63>".into());
    }
    Ok(crate::api::Request::SetUdpTunnel { name: name.to_string(), remote, port, key, dscp })
}

/// `show udp tunnel remote <addr> | local <addr> | id <n>`.
pub fn parse_find(key: &str, value: &str) -> Result<crate::api::Request, String> {
    let (mut remote, mut local, mut id) = (None, None, None);
    match key {
        "remote" => remote = Some(value.to_string()),
        "local" => local = Some(value.to_string()),
        _ => id = Some(crate::cli::u32_word("id", value)?),
    }
    Ok(crate::api::Request::FindUdpTunnels { remote, local, id })
}

/// The UDP tunnel requests of the typed API beyond create, delete and list.
pub fn handle(c: &mut crate::dataplane::Control, req: &crate::api::Request) -> Result<crate::api::Reply, String> {
    use crate::api::{Reply, Request};
    Ok(match req {
        Request::SetUdpTunnel { name, remote, port, key, dscp } => {
            let t = named(&c.udptun, name)?;
            if *port == Some(0) {
                return Err("port 0: expected 1 to 65535".into());
            }
            if let Some(p) = port.filter(|p| c.udptun.spec(t.id).is_some_and(|s| s.port != *p)) {
                crate::lb::check_tunnel_port(&c.lb.state, p)?;
                if let Some(why) = crate::punt::receiver_refusal(&c.state, ip::tables::UdpApp::Gue, p) {
                    return Err(format!("set_udp_tunnel: port: {why}"));
                }
            }
            let change = UdpTunnelChange {
                remote: remote.as_deref().map(|r| address("remote", r)).transpose()?,
                port: *port,
                gre_key: *key,
                urpf: None,
                dscp: *dscp,
            };
            let before = c.udptun.modify(&mut c.state, t.id, change).map_err(|e| e.to_string())?;
            // One publication: the tunnel's new outer header, its receive key and (for a
            // new port) the demux reach the workers together; other tunnels are untouched.
            c.publish();
            let after = c.udptun.spec(t.id).expect("modified, so live").clone();
            let name = format!("{UDP_TUNNEL_IF_PREFIX}{}", t.id);
            let key_word = |k: Option<u32>| k.map_or("none".to_string(), |k| format!("{k:#x}"));
            let mut text = format!("{name}: remote {} -> {}, port {} -> {}", before.remote, after.remote, before.port, after.port);
            if before.gre_key != after.gre_key {
                text += &format!(", key {} -> {}", key_word(before.gre_key), key_word(after.gre_key));
            }
            if before.dscp != after.dscp {
                text += &format!(", dscp {} -> {}", before.dscp, after.dscp);
            }
            let data =
                serde_json::json!({ "name": name, "remote": after.remote, "port": after.port, "key": after.gre_key, "dscp": after.dscp });
            Reply::ok(data, text)
        }
        Request::FindUdpTunnels { remote, local, id } => {
            let rows = match (remote, local, id) {
                (Some(r), None, None) => {
                    let r = address("remote", r)?;
                    rows_where(&c.udptun, &c.state, |_, s| s.remote == r)
                }
                (None, Some(l), None) => {
                    let l = address("local", l)?;
                    rows_where(&c.udptun, &c.state, |_, s| s.local == l)
                }
                (None, None, Some(n)) => rows_where(&c.udptun, &c.state, |i, _| i == *n),
                _ => return Err("find UDP tunnels by one of remote, local or id".into()),
            };
            let text = format_rows(&rows).replacen(" UDP tunnels", " UDP tunnels match", 1);
            Reply::ok(serde_json::to_value(&rows).map_err(|e| e.to_string())?, text)
        }
        _ => unreachable!("only UDP tunnel set/find requests are sent here"),
    })
}

/// For an API field that, when present, holds a value or null (`"key": null` removes a
/// GRE key): present is `Some`, absent stays `None` (serde's default).
pub fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u32>>, D::Error> {
    Option::<u32>::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use crate::api::Request;

    fn p(line: &str) -> Result<Request, String> {
        crate::cli::parse(&line.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn set_and_find_words() {
        let want = Request::SetUdpTunnel {
            name: "udp_tunnel3".into(),
            remote: Some("198.18.1.9".into()),
            port: Some(5000),
            key: Some(Some(16)),
            dscp: None,
        };
        assert_eq!(p("set udp tunnel udp_tunnel3 remote 198.18.1.9 port 5000 key 0x10"), Ok(want));
        assert_eq!(
            p("set udp tunnel 3 key none"),
            Ok(Request::SetUdpTunnel { name: "3".into(), remote: None, port: None, key: Some(None), dscp: None })
        );
        let dscp = |d| Ok(Request::SetUdpTunnel { name: "3".into(), remote: None, port: None, key: None, dscp: Some(d) });
        assert_eq!(p("set udp tunnel 3 dscp 10"), dscp(ip::outer::tos::Dscp::Fixed(10)));
        assert_eq!(p("set udp tunnel 3 dscp inherit"), dscp(ip::outer::tos::Dscp::Inherit));
        assert_eq!(p("set udp tunnel 3 dscp 99").unwrap_err(), "dscp 99: expected \"inherit\" or a DSCP 0 to 63");
        assert!(p("set udp tunnel udp_tunnel3").unwrap_err().contains("needs remote"));
        assert!(p("set udp tunnel udp_tunnel3 encap gue").unwrap_err().contains("cannot be changed in place"));
        assert!(p("set udp tunnel udp_tunnel3 port").unwrap_err().contains("needs a value"));
        assert_eq!(p("set udp tunnel udp_tunnel3 port 70000").unwrap_err(), "port \"70000\": expected a port, 1 to 65535");
        assert!(p("set udp tunnel udp_tunnel3 key 4294967296").unwrap_err().contains("out of range"));
        let find = |remote: Option<&str>, local: Option<&str>, id| Request::FindUdpTunnels {
            remote: remote.map(Into::into),
            local: local.map(Into::into),
            id,
        };
        assert_eq!(p("show udp tunnel remote 198.18.1.2"), Ok(find(Some("198.18.1.2"), None, None)));
        assert_eq!(p("show udp tunnels local 2001:db8::1"), Ok(find(None, Some("2001:db8::1"), None)));
        assert_eq!(p("show udp tunnel id 4"), Ok(find(None, None, Some(4))));
        assert!(p("show udp tunnel id four").unwrap_err().contains("expected a number"));
    }
}
