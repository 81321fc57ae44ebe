//! What differs between IPv4 and IPv6 for the nodes that are otherwise the same: the key
//! type and position of the destination, the FIB, the next-node names and ICMP codes.
//! Twin nodes are one generic node over `Family` (`IpLookup<Ip4>` is `ip4-lookup`).

use super::IcmpRequest;
use crate::fib::Fib;
use crate::lpm::LpmKey;
use crate::tables::{l2_rewrite, Adjacency, Neighbour, Tables, TunnelKind};
use engine::node::NextNodes;
use engine::IfIndex;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::EtherType;

pub trait Family: Send + 'static {
    type Key: LpmKey;
    type Addr: Copy + Eq + std::hash::Hash + std::fmt::Display;
    /// The lookup node's next nodes (Rewrite, Local, IcmpError, tunnel encaps).
    type LookupNext: NextNodes;
    const LOOKUP: &'static str;
    const REWRITE: Self::LookupNext;
    const LOCAL: Self::LookupNext;
    const ICMP_ERROR: Self::LookupNext;
    /// The load balancer's node, which forwarded packets pass when `Tables::lb_replies`.
    const LB_NAT: Self::LookupNext;
    const IPSEC_OUTPUT: Self::LookupNext;
    /// `interface-output`: a packet the lookup rewrote itself ([`rewrite_fast`]).
    const OUTPUT: Self::LookupNext;
    /// The encap node of each tunnel kind.
    fn tunnel_next(k: TunnelKind) -> Self::LookupNext;
    /// Minimum header length and where the destination address sits in it.
    const HEADER_LEN: usize;
    /// The source address is `SRC_AT..DST_AT`, the destination right after it.
    const SRC_AT: usize;
    const DST_AT: usize;
    const ETHERTYPE: EtherType;
    /// The ICMP error for "no route".
    const NO_ROUTE: IcmpRequest;
    fn key(dst: &[u8]) -> Self::Key;
    fn addr(key: Self::Key) -> Self::Addr;
    fn fib(t: &Tables) -> &Fib<Self::Key>;
    fn neighbour(t: &Tables, a: &Self::Addr) -> Option<Neighbour>;
    fn from_ip(a: IpAddr) -> Option<Self::Addr>;
    /// Overwrite `buf` with a solicitation for `target` out of `ifl` (ARP request or
    /// neighbour solicitation); false if the interface cannot send one.
    fn write_solicitation(buf: &mut engine::Buffer, ifl: &crate::tables::IfL3, target: Self::Addr) -> bool;
    /// The forwarding hop's header work when the TTL / hop limit is above 1 and the packet
    /// fits `mtu`: decrement it (IPv4's checksum patched, RFC 1624) and return true;
    /// otherwise leave the packet as it is and return false.
    fn hop_fast(buf: &mut engine::Buffer, mtu: u16) -> bool;
}

/// The rewrite's fast path, in one place for `ipN-rewrite` and `ipN-lookup`: a resolved
/// next hop (`Adjacency::Rewrite`), TTL / hop limit above 1, the packet within the link's
/// MTU and room for the Ethernet header: the hop's header work done, the next hop's
/// Ethernet header prepended, `tx_if` set, true. Anything else (an unresolved neighbour,
/// an expiring TTL, a packet too big, no headroom) is left untouched for the rewrite
/// node's general path: false. `ipN-lookup` takes it for the packets its route sends to
/// a next hop, so a forwarded packet is rewritten without a hop to `ipN-rewrite`
/// (docs/PERFORMANCE.md, "Two hops fewer for a forwarded packet").
#[inline(always)]
pub fn rewrite_fast<F: Family>(adj: &Adjacency, buf: &mut engine::Buffer) -> bool {
    let Adjacency::Rewrite { tx_if, rewrite, mtu } = adj else { return false };
    if buf.headroom() < rewrite.len() || !F::hop_fast(buf, *mtu) {
        return false;
    }
    // Cannot fail: the headroom was checked above.
    prepend_l2(buf, *tx_if, rewrite)
}

/// Replace a packet whose next hop is unresolved by a solicitation for it, within the
/// worker's solicitation rate. True if the buffer now holds the solicitation, ready for
/// `interface-output` on `tx_if`.
pub fn solicit<F: Family>(cx: &mut crate::context::IpContext, buf: &mut engine::Buffer, tx_if: IfIndex, target: F::Addr) -> bool {
    let crate::context::IpContext { tables, solicit: limiter, .. } = cx;
    let Some(ifl) = tables.interface(tx_if) else { return false };
    if !limiter.take() || !F::write_solicitation(buf, ifl, target) {
        return false;
    }
    buf.meta.tx_if = tx_if;
    true
}

/// The encap node of each tunnel kind as a variant of a next-node enum that lists them
/// under these names (`ipN-lookup`'s; `ethernet-input`'s, which sends a tunnel route's
/// packets on itself; `lbN-nat`'s, which sends a forwarded reply on into its route's
/// tunnel): the one mapping from a route into a tunnel to its node.
#[macro_export]
macro_rules! tunnel_next {
    ($next:ident, $kind:expr) => {
        match $kind {
            $crate::tables::TunnelKind::Gtpu4 => $next::Gtpu4Encap,
            $crate::tables::TunnelKind::Gtpu6 => $next::Gtpu6Encap,
            $crate::tables::TunnelKind::Gue4 => $next::Gue4Encap,
            $crate::tables::TunnelKind::Gue6 => $next::Gue6Encap,
            $crate::tables::TunnelKind::Lb4 => $next::Lb4Nat,
            $crate::tables::TunnelKind::Lb6 => $next::Lb6Nat,
            $crate::tables::TunnelKind::Esp4 => $next::Esp4Encrypt,
            $crate::tables::TunnelKind::Esp6 => $next::Esp6Encrypt,
            $crate::tables::TunnelKind::Upf4 => $next::Upf4Downlink,
            $crate::tables::TunnelKind::Upf6 => $next::Upf6Downlink,
        }
    };
}

engine::next_nodes! {
    pub enum Ip4LookupNext {
        Rewrite = "ip4-rewrite", Output = "interface-output", Local = "ip4-local", IcmpError = "ip4-icmp-error",
        Gtpu4Encap = "gtpu4-encap", Gtpu6Encap = "gtpu6-encap", Gue4Encap = "gue4-encap", Gue6Encap = "gue6-encap",
        Lb4Nat = "lb4-nat", Lb6Nat = "lb6-nat",
        Esp4Encrypt = "esp4-encrypt", Esp6Encrypt = "esp6-encrypt",
        Ipsec4Output = "ipsec4-output", Ipsec6Output = "ipsec6-output",
        Upf4Downlink = "upf4-downlink", Upf6Downlink = "upf6-downlink",
    }
}
engine::next_nodes! {
    pub enum Ip6LookupNext {
        Rewrite = "ip6-rewrite", Output = "interface-output", Local = "ip6-local", IcmpError = "ip6-icmp-error",
        Gtpu4Encap = "gtpu4-encap", Gtpu6Encap = "gtpu6-encap", Gue4Encap = "gue4-encap", Gue6Encap = "gue6-encap",
        Lb4Nat = "lb4-nat", Lb6Nat = "lb6-nat",
        Esp4Encrypt = "esp4-encrypt", Esp6Encrypt = "esp6-encrypt",
        Ipsec4Output = "ipsec4-output", Ipsec6Output = "ipsec6-output",
        Upf4Downlink = "upf4-downlink", Upf6Downlink = "upf6-downlink",
    }
}

pub struct Ip4;
pub struct Ip6;

impl Family for Ip4 {
    type Key = u32;
    type Addr = Ipv4Addr;
    type LookupNext = Ip4LookupNext;
    const LOOKUP: &'static str = "ip4-lookup";
    const REWRITE: Ip4LookupNext = Ip4LookupNext::Rewrite;
    const LOCAL: Ip4LookupNext = Ip4LookupNext::Local;
    const ICMP_ERROR: Ip4LookupNext = Ip4LookupNext::IcmpError;
    const LB_NAT: Ip4LookupNext = Ip4LookupNext::Lb4Nat;
    const IPSEC_OUTPUT: Ip4LookupNext = Ip4LookupNext::Ipsec4Output;
    const OUTPUT: Ip4LookupNext = Ip4LookupNext::Output;
    #[inline(always)]
    fn tunnel_next(k: TunnelKind) -> Ip4LookupNext {
        tunnel_next!(Ip4LookupNext, k)
    }
    const HEADER_LEN: usize = 20;
    const SRC_AT: usize = 12;
    const DST_AT: usize = 16;
    const ETHERTYPE: EtherType = EtherType::Ipv4;
    const NO_ROUTE: IcmpRequest = IcmpRequest::new(3, wire::icmpv4::unreach::NET, 0);
    #[inline(always)]
    fn key(d: &[u8]) -> u32 {
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }
    #[inline(always)]
    fn addr(k: u32) -> Ipv4Addr {
        Ipv4Addr::from(k)
    }
    #[inline(always)]
    fn fib(t: &Tables) -> &Fib<u32> {
        &t.fib4
    }
    fn neighbour(t: &Tables, a: &Ipv4Addr) -> Option<Neighbour> {
        t.neighbours4.get(a).copied()
    }
    fn from_ip(a: IpAddr) -> Option<Ipv4Addr> {
        match a {
            IpAddr::V4(v) => Some(v),
            IpAddr::V6(_) => None,
        }
    }
    fn write_solicitation(buf: &mut engine::Buffer, ifl: &crate::tables::IfL3, target: Ipv4Addr) -> bool {
        super::solicit::arp_request(buf, ifl, target)
    }
    /// The header's total length against the MTU (ipv4-input validated the header).
    #[inline(always)]
    fn hop_fast(buf: &mut engine::Buffer, mtu: u16) -> bool {
        let Some(h) = buf.bytes_mut().first_chunk_mut::<20>() else { return false };
        if h[8] <= 1 || u16::from_be_bytes([h[2], h[3]]) > mtu {
            return false;
        }
        wire::ipv4::Ipv4Packet::new_unchecked(&mut h[..]).decrement_ttl();
        true
    }
}

impl Family for Ip6 {
    type Key = u128;
    type Addr = Ipv6Addr;
    type LookupNext = Ip6LookupNext;
    const LOOKUP: &'static str = "ip6-lookup";
    const REWRITE: Ip6LookupNext = Ip6LookupNext::Rewrite;
    const LOCAL: Ip6LookupNext = Ip6LookupNext::Local;
    const ICMP_ERROR: Ip6LookupNext = Ip6LookupNext::IcmpError;
    const LB_NAT: Ip6LookupNext = Ip6LookupNext::Lb6Nat;
    const IPSEC_OUTPUT: Ip6LookupNext = Ip6LookupNext::Ipsec6Output;
    const OUTPUT: Ip6LookupNext = Ip6LookupNext::Output;
    #[inline(always)]
    fn tunnel_next(k: TunnelKind) -> Ip6LookupNext {
        tunnel_next!(Ip6LookupNext, k)
    }
    const HEADER_LEN: usize = 40;
    const SRC_AT: usize = 8;
    const DST_AT: usize = 24;
    const ETHERTYPE: EtherType = EtherType::Ipv6;
    const NO_ROUTE: IcmpRequest = IcmpRequest::new(1, wire::icmpv6::unreach::NO_ROUTE, 0);
    #[inline(always)]
    fn key(d: &[u8]) -> u128 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&d[..16]);
        u128::from_be_bytes(a)
    }
    #[inline(always)]
    fn addr(k: u128) -> Ipv6Addr {
        Ipv6Addr::from(k)
    }
    #[inline(always)]
    fn fib(t: &Tables) -> &Fib<u128> {
        &t.fib6
    }
    fn neighbour(t: &Tables, a: &Ipv6Addr) -> Option<Neighbour> {
        t.neighbours6.get(a).copied()
    }
    fn from_ip(a: IpAddr) -> Option<Ipv6Addr> {
        match a {
            IpAddr::V6(v) => Some(v),
            IpAddr::V4(_) => None,
        }
    }
    fn write_solicitation(buf: &mut engine::Buffer, ifl: &crate::tables::IfL3, target: Ipv6Addr) -> bool {
        super::solicit::neighbor_solicit(buf, ifl, target)
    }
    /// The whole buffer against the MTU: ip6-input trimmed it to the packet, jumbograms
    /// included, and a GSO frame is larger than the MTU, so it takes the general path.
    #[inline(always)]
    fn hop_fast(buf: &mut engine::Buffer, mtu: u16) -> bool {
        let len = buf.len();
        let Some(h) = buf.bytes_mut().first_chunk_mut::<40>() else { return false };
        if h[7] <= 1 || len > mtu as usize {
            return false;
        }
        h[7] -= 1;
        true
    }
}

/// Where a rewrite node sends a packet, from its adjacency.
pub enum Resolved<A> {
    /// Prepend `rewrite`, send on `tx_if` if the packet fits `mtu`.
    Send { tx_if: IfIndex, mtu: u16, rewrite: [u8; 14] },
    /// The next hop `target` has no MAC yet: solicit it out of `tx_if`.
    Solicit { tx_if: IfIndex, target: A },
    /// Not a forwarding adjacency (a bug upstream; counted).
    Bad,
}

/// Send a packet this gateway built (a tunnel's outer packet or a fragment of one; the
/// buffer starts at its IP header, its length already fitted to the link) by adjacency
/// `adj`, as `ipN-rewrite` would but without the forwarding hop: we are its source, so
/// it leaves with the TTL we gave it, and the node that built it goes straight to
/// `interface-output`. False when the next hop needs soliciting or the adjacency does
/// not send: the caller then hands the packet to `ipN-rewrite` / `ipN-lookup`.
#[inline(always)]
pub fn send_originated<F: Family>(t: &Tables, buf: &mut engine::Buffer, adj: u32) -> bool {
    match t.adjacency(adj) {
        Adjacency::Rewrite { tx_if, rewrite, .. } => prepend_l2(buf, *tx_if, rewrite),
        Adjacency::Glean { .. } => send_originated_glean::<F>(t, buf, adj),
        _ => false,
    }
}

/// Whether a tunnel's outer packet (the gateway's own, its buffer at the IP header) bound
/// for adjacency `adj` leaves by a link with an IPsec SPD bound. Such a packet must meet
/// the link's outbound policies (a transport-mode SA that protects the tunnel, a DISCARD),
/// which only `ipN-lookup` sends it through: [`send_originated`] and `ipN-rewrite` send it
/// straight out, in the clear. Its TTL / hop limit is raised by one first, for the
/// `ipN-rewrite` after the policies that takes one off, so it leaves as the tunnel set it.
/// One test of a table word while no SPD is bound anywhere.
#[inline(always)]
pub fn outer_to_output_features(t: &Tables, buf: &mut engine::Buffer, adj: u32) -> bool {
    if t.spd_links == 0 {
        return false;
    }
    match t.adjacency(adj) {
        Adjacency::Rewrite { tx_if, .. } | Adjacency::Glean { tx_if, .. } | Adjacency::Incomplete { tx_if, .. } if t.has_spd(*tx_if) => {
            raise_hop_limit(buf.bytes_mut());
            true
        }
        _ => false,
    }
}

/// One more TTL (IPv4, its checksum patched) or hop limit (IPv6), at most 255.
#[cold]
fn raise_hop_limit(b: &mut [u8]) {
    match b.first().map(|v| v >> 4) {
        Some(4) if b.len() >= 20 => {
            let mut h = wire::ipv4::Ipv4Packet::new_unchecked(&mut b[..20]);
            h.set_ttl(h.ttl().saturating_add(1));
            h.fill_checksum();
        }
        Some(6) if b.len() >= 40 => b[7] = b[7].saturating_add(1),
        _ => {}
    }
}

/// [`send_originated`] for a packet that must cross the adjacency's link whole: false as
/// well when it is longer than the link's MTU (the caller hands it to `ipN-lookup`, whose
/// rewrite fragments it or signals). One read of the adjacency for both.
#[inline(always)]
pub fn send_originated_whole<F: Family>(t: &Tables, buf: &mut engine::Buffer, adj: u32) -> bool {
    match t.adjacency(adj) {
        Adjacency::Rewrite { tx_if, rewrite, mtu } => buf.len() <= *mtu as usize && prepend_l2(buf, *tx_if, rewrite),
        Adjacency::Glean { mtu, .. } => buf.len() <= *mtu as usize && send_originated_glean::<F>(t, buf, adj),
        _ => false,
    }
}

/// Send an IP packet the gateway built (an echo reply, an ICMP error, the punt host's own)
/// by its destination's route when that route names a resolved next hop and the packet
/// fits: the TTL / hop limit goes out as set, where `ipN-rewrite` would take one off as
/// for a forwarded packet. With `features`, not where an output feature must see it
/// first (an SPD on the link; the load balancer, which translates an ICMP error about a
/// client-kept connection: `Tables::straight_to_rewrite`). True when the buffer holds the
/// frame for `interface-output`; false (the packet untouched) for anything else, which
/// the caller hands to `ipN-lookup`.
pub fn send_own<F: Family>(t: &Tables, buf: &mut engine::Buffer, features: bool) -> bool {
    let Some(dst) = buf.bytes().get(F::DST_AT..F::HEADER_LEN) else { return false };
    let key = F::key(dst);
    let Resolved::Send { tx_if, mtu, rewrite } = resolve::<F>(t, F::fib(t).lookup(key), F::addr(key)) else { return false };
    if (features && !t.straight_to_rewrite(tx_if)) || super::wire_segment_len(buf, buf.len()) > mtu as usize {
        return false;
    }
    prepend_l2(buf, tx_if, &rewrite)
}

/// [`send_originated`] on an attached subnet: the neighbour looked up per packet. Out of
/// line, so that the resolved case stays small where it is inlined.
#[inline(never)]
fn send_originated_glean<F: Family>(t: &Tables, buf: &mut engine::Buffer, adj: u32) -> bool {
    let Some(dst) = buf.bytes().get(F::DST_AT..F::HEADER_LEN) else { return false };
    match resolve::<F>(t, adj, F::addr(F::key(dst))) {
        Resolved::Send { tx_if, rewrite, .. } => prepend_l2(buf, tx_if, &rewrite),
        _ => false,
    }
}

/// Put a next hop's Ethernet header in front of a packet bound for `tx_if`; false if
/// the headroom is short.
#[inline(always)]
pub(crate) fn prepend_l2(buf: &mut engine::Buffer, tx_if: IfIndex, rewrite: &[u8; 14]) -> bool {
    let Ok(h) = buf.prepend(rewrite.len()) else { return false };
    h.copy_from_slice(rewrite);
    buf.meta.tx_if = tx_if;
    true
}

/// Resolve adjacency `adj` for a packet to `dst`: a precomputed rewrite, a per-packet
/// neighbour lookup for attached subnets, or a solicitation.
#[inline(always)]
pub fn resolve<F: Family>(t: &Tables, adj: u32, dst: F::Addr) -> Resolved<F::Addr> {
    match t.adjacency(adj) {
        Adjacency::Rewrite { tx_if, rewrite, mtu } => Resolved::Send { tx_if: *tx_if, mtu: *mtu, rewrite: *rewrite },
        Adjacency::Glean { tx_if, mtu } => match (F::neighbour(t, &dst), t.interface(*tx_if)) {
            (Some(n), Some(ifl)) => Resolved::Send { tx_if: *tx_if, mtu: *mtu, rewrite: l2_rewrite(ifl, n.mac, F::ETHERTYPE) },
            _ => Resolved::Solicit { tx_if: *tx_if, target: dst },
        },
        Adjacency::Incomplete { tx_if, via, .. } => match F::from_ip(*via) {
            Some(v) => Resolved::Solicit { tx_if: *tx_if, target: v },
            None => Resolved::Bad,
        },
        _ => Resolved::Bad,
    }
}
