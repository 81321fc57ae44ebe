//! The tables the ESP nodes read, published whole like the IP tables. SAs are shared
//! between versions by `Arc` (keys and outbound counters), so publishing a change to one
//! SA leaves every other SA's sequence numbers running.

use crate::sa::{Direction, Sa, SaSpec};
use engine::hash::WordHashBuilder;
use ip::tables::{TunnelKind, TunnelRef};
use std::collections::HashMap;

#[derive(Debug, Clone, Default)]
pub struct IpsecTables {
    /// By SA index; `None` for deleted indices. Outbound SA `N` is interface
    /// `ipsec_tunnelN`.
    pub sas: Vec<Option<Sa>>,
    /// Inbound SAs by SPI.
    pub inbound: HashMap<u32, u32, WordHashBuilder>,
    /// Per SA index: the adjacency its outer packets leave by (resolved on the control
    /// plane), or `ADJ_MISS` for "look it up".
    pub outer_adj: Vec<u32>,
    /// Outbound SAs by what an ICMP error's quote of their ESP names
    /// ([`crate::pmtu::find_outbound`]); the lowest index where two SAs share a key.
    pub outbound_by_quote: HashMap<QuoteKey, u32>,
    /// Whether an inbound SA's cipher opens with a nonce written ahead
    /// ([`crate::crypto::Transform::opens_with_nonce`]): the decrypt nodes write their
    /// vectors' nonces first only then.
    pub inbound_nonces: bool,
}

/// What identifies an outbound SA's ESP packet as a router quotes it: the outer source
/// (the SA's local address) and destination, the SPI, and with ESP in UDP the source
/// and destination ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuoteKey {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    pub spi: u32,
    pub udp: Option<(u16, u16)>,
}

impl QuoteKey {
    /// The key of outbound SA `spec`'s packets.
    pub fn of(spec: &SaSpec) -> QuoteKey {
        QuoteKey { src: spec.local, dst: spec.remote, spi: spec.spi, udp: spec.udp_encap.map(|p| (p.src, p.dst)) }
    }
}

impl IpsecTables {
    /// Outbound SA `index`, if there is one.
    #[inline(always)]
    pub fn outbound(&self, index: u32) -> Option<&Sa> {
        self.sas.get(index as usize)?.as_ref().filter(|s| s.spec.direction == Direction::Outbound)
    }

    /// The inbound SA with this SPI and its index.
    #[inline(always)]
    pub fn inbound(&self, spi: u32) -> Option<(u32, &Sa)> {
        let i = *self.inbound.get(&spi)?;
        Some((i, self.inbound_at(i)?))
    }

    /// The SA at `index` that [`IpsecTables::inbound`] gave for an SPI (a caller that
    /// keeps the index within one version of the tables).
    #[inline(always)]
    pub fn inbound_at(&self, index: u32) -> Option<&Sa> {
        self.sas.get(index as usize)?.as_ref()
    }

    /// Whether a route into `t` leads back to the peer of inbound SA `inbound`: `t` is
    /// an outbound SA's tunnel between the same two addresses (during a rekey there are
    /// two such SAs, and routes may name either).
    #[inline]
    pub fn reaches_peer(&self, t: TunnelRef, inbound: &SaSpec) -> bool {
        matches!(t.kind, TunnelKind::Esp4 | TunnelKind::Esp6)
            && self.outbound(t.id).is_some_and(|o| o.spec.local == inbound.local && o.spec.remote == inbound.remote)
    }

    #[inline(always)]
    pub fn outer_adj(&self, index: u32) -> u32 {
        self.outer_adj.get(index as usize).copied().unwrap_or(ip::tables::ADJ_MISS)
    }
}
