//! UDP tunnels (GUE, GRE-in-UDP, direct) in the control plane: the one text form of a
//! tunnel (the config file's `[[udp_tunnel]]`, the JSON API's `create_udp_tunnel`, the
//! CLI), its conversion to a [`UdpTunnelSpec`], and the rows `show udp tunnels` prints.

use ip::outer::{ChecksumMode, FragmentPolicy, MtuPolicy};
use ip::tables::{TunnelRef, UDP_TUNNEL_IF_PREFIX};
use ip::Prefix;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use udptun::{Encap, UdpTunState, UdpTunnelSpec};

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
    /// Packets and bytes out of (`rx`) and into (`tx`) the tunnel, all workers.
    pub counters: ip::tunnel_counters::TunnelCount,
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
}

pub fn rows(u: &UdpTunState, router: &ip::RouterState) -> Vec<UdpTunnelRow> {
    u.tunnels()
        .map(|(id, s)| UdpTunnelRow {
            counters: u.counters.count(id),
            inner_mtu: u
                .outer(id)
                .map(|(overhead, adj)| ip::outer::inner_mtu(router.adjacency_mtu(adj), overhead, s.mtu.mtu))
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
        })
        .collect()
}

pub fn format_rows(rows: &[UdpTunnelRow]) -> String {
    use std::fmt::Write;
    let mut o = format!("{} UDP tunnels\n", rows.len());
    for r in rows {
        let key = r.key.map(|k| format!(" key {k:#x}")).unwrap_or_default()
            + if r.gre_checksum { " gre-checksum" } else { "" }
            + if r.gre_sequence { " gre-sequence" } else { "" };
        let _ = writeln!(
            o,
            "{:<16} {} -> {} {} port {} src-ports {}{} checksum {}{} ttl {}{}{}{}",
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
            format!(" mtu {}", r.inner_mtu.map_or("?".into(), |m| m.to_string())),
            if r.mtu.fragment == FragmentPolicy::Outer { " fragment outer" } else { "" },
            if r.mtu.mss_clamp { " mss-clamp" } else { "" },
        );
        let c = &r.counters;
        let _ =
            writeln!(o, "{:<16} rx {} packets {} bytes, tx {} packets {} bytes", "", c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes);
    }
    o
}
