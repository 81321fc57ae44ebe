//! Unicast reverse-path forwarding (RFC 3704, BCP 84): an interface may check the source
//! of what it receives against the FIB, to drop what a spoofing host sends. *Strict*: the
//! route back to the source leaves by the interface the packet came in on (any path of an
//! ECMP route will do); *loose*: there is a route back at all (a default route counts,
//! a blackhole does not). Both drop a packet that claims one of the gateway's own
//! addresses as its source, which without uRPF is forwarded (RFC 1812 §5.3.7 leaves that
//! to the router; VPP forwards it too, Linux drops it as a martian).
//!
//! The check is `ipN-source-check`'s, run on the packets `ethernet-input` receives on such
//! an interface before `ipN-input`. A tunnel is an interface too (`gtpu_tunnelN`,
//! `udp_tunnelN`): its decap node checks the inner packets it takes out (strict: the
//! route back goes into the same tunnel), never against the link the tunnel came by.
//! An inbound ESP SA with `urpf` has `espN-decrypt` check what it decrypts (strict: the
//! route back goes into an ESP tunnel to the same peer).

use crate::multipath;
use crate::tables::{Adjacency, Tables, TunnelRef};
use engine::IfIndex;

/// An interface's reverse-path check (`[[interface]] urpf`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Urpf {
    #[default]
    Off,
    Loose,
    Strict,
}

impl std::fmt::Display for Urpf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Urpf::Off => "off",
            Urpf::Loose => "loose",
            Urpf::Strict => "strict",
        })
    }
}

impl std::str::FromStr for Urpf {
    type Err = String;
    fn from_str(s: &str) -> Result<Urpf, String> {
        match s {
            "off" => Ok(Urpf::Off),
            "loose" => Ok(Urpf::Loose),
            "strict" => Ok(Urpf::Strict),
            _ => Err(format!("{s:?}: expected strict, loose or off")),
        }
    }
}

/// Why a source fails the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFault {
    /// No route back to it (or a blackhole).
    NoRoute,
    /// Strict: the route back leaves by another interface (or into a tunnel).
    WrongInterface,
    /// It is one of the gateway's own addresses.
    OwnAddress,
}

/// Where a packet came in: a link, or out of a tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    Link(IfIndex),
    Tunnel(TunnelRef),
}

/// The check of a source whose FIB lookup gave `route` (an adjacency index, an ECMP group
/// or a tunnel), for a packet that arrived by `from`, in `mode`.
#[inline]
pub fn check(tables: &Tables, route: u32, from: Arrival, mode: Urpf) -> Result<(), SourceFault> {
    let strict = match mode {
        Urpf::Off => return Ok(()),
        Urpf::Loose => false,
        Urpf::Strict => true,
    };
    let wrong = |ok: bool| if strict && !ok { Err(SourceFault::WrongInterface) } else { Ok(()) };
    if let Some(group) = multipath::decode(route) {
        let links = tables.multipaths.get(group as usize).map_or(0, |m| m.links);
        return wrong(matches!(from, Arrival::Link(i) if links.checked_shr(i.0 as u32).unwrap_or(0) & 1 != 0));
    }
    if let Some(t) = TunnelRef::decode(route) {
        return wrong(from == Arrival::Tunnel(t));
    }
    let adj = tables.adjacency(route);
    match adj.tx_if() {
        Some(tx_if) => wrong(from == Arrival::Link(tx_if)),
        None if matches!(adj, Adjacency::Local) => Err(SourceFault::OwnAddress),
        None => Err(SourceFault::NoRoute),
    }
}

/// The check of `packet`'s source (an IPv6 packet if `v6`, else IPv4): `Ok` for a
/// packet too short to have one (the input node drops it by name) and for IPv6
/// link-local and unspecified sources (see [`source_route`]).
#[inline]
pub fn check_source(tables: &Tables, packet: &[u8], v6: bool, from: Arrival, mode: Urpf) -> Result<(), SourceFault> {
    if mode == Urpf::Off {
        return Ok(());
    }
    match source_route(tables, packet, v6) {
        Some(route) => check(tables, route, from, mode),
        None => Ok(()),
    }
}

/// The FIB's answer for `packet`'s source (an IPv6 packet if `v6`, else IPv4), or `None`
/// when there is nothing to check: a packet too short to have a source, and IPv6
/// link-local and unspecified sources (neighbour discovery, routing protocols and
/// duplicate address detection never leave the link and need no route back).
#[inline]
pub fn source_route(tables: &Tables, packet: &[u8], v6: bool) -> Option<u32> {
    if v6 {
        let src = <[u8; 16]>::try_from(packet.get(8..24)?).ok()?;
        let a = std::net::Ipv6Addr::from(src);
        if a.is_unicast_link_local() || a.is_unspecified() {
            return None;
        }
        Some(tables.fib6.lookup(u128::from(a)))
    } else {
        let src = <[u8; 4]>::try_from(packet.get(12..16)?).ok()?;
        Some(tables.fib4.lookup(u32::from_be_bytes(src)))
    }
}
