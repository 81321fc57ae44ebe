//! Unicast reverse-path forwarding (RFC 3704, BCP 84): an interface may check the source
//! of what it receives against the FIB, to drop what a spoofing host sends. *Strict*: the
//! route back to the source leaves by the interface the packet came in on (any path of an
//! ECMP route will do); *loose*: there is a route back at all (a default route counts,
//! a blackhole does not). Both drop a packet that claims one of the gateway's own
//! addresses as its source, which without uRPF is forwarded (RFC 1812 §5.3.7 leaves that
//! to the router; VPP forwards it too, Linux drops it as a martian).
//!
//! The check is `ipN-source-check`'s, run on the packets `ethernet-input` receives on such
//! an interface before `ipN-input`: packets a tunnel decapsulates are not checked against
//! the link the tunnel came in by.

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

/// The check of a source whose FIB lookup gave `route` (an adjacency index, an ECMP group
/// or a tunnel), for a packet received on `rx_if` in `mode`.
#[inline]
pub fn check(tables: &Tables, route: u32, rx_if: IfIndex, mode: Urpf) -> Result<(), SourceFault> {
    let strict = match mode {
        Urpf::Off => return Ok(()),
        Urpf::Loose => false,
        Urpf::Strict => true,
    };
    if let Some(group) = multipath::decode(route) {
        let links = tables.multipaths.get(group as usize).map_or(0, |m| m.links);
        return match strict && links.checked_shr(rx_if.0 as u32).unwrap_or(0) & 1 == 0 {
            true => Err(SourceFault::WrongInterface),
            false => Ok(()),
        };
    }
    if TunnelRef::decode(route).is_some() {
        return if strict { Err(SourceFault::WrongInterface) } else { Ok(()) };
    }
    let adj = tables.adjacency(route);
    match adj.tx_if() {
        Some(tx_if) if strict && tx_if != rx_if => Err(SourceFault::WrongInterface),
        Some(_) => Ok(()),
        None if matches!(adj, Adjacency::Local) => Err(SourceFault::OwnAddress),
        None => Err(SourceFault::NoRoute),
    }
}
