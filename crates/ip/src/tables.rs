//! The tables the forwarding nodes read: interfaces' L3 settings, FIBs, adjacencies,
//! neighbours. Built by [`crate::state::RouterState`] on the control plane, published
//! whole through an `ArcSwap`, never mutated once published. A worker picks up a new
//! version between vectors, so a packet sees one consistent version from input to
//! output, and an old version is freed only when the last worker dropped it.

use crate::fib::Fib;
use engine::IfIndex;
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use wire::EthernetAddress;

/// Adjacency index 0: no route (the trie's miss value).
pub const ADJ_MISS: u32 = 0;
/// Adjacency index 1: addressed to this gateway.
pub const ADJ_LOCAL: u32 = 1;

/// The tunnel features a FIB value, a route or a UDP port can lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TunnelKind {
    /// GTP-U over an IPv4 outer header (`gtpu4-encap`).
    Gtpu4 = 1,
    /// GTP-U over an IPv6 outer header (`gtpu6-encap`).
    Gtpu6 = 2,
    /// A UDP tunnel (GUE, GRE-in-UDP, direct IP-in-UDP) over IPv4 (`gue4-encap`).
    Gue4 = 3,
    /// The same over IPv6 (`gue6-encap`).
    Gue6 = 4,
    /// A load-balanced service address (`lb4-nat`, which finds the service by address,
    /// port and protocol; the id is 0).
    Lb4 = 5,
    /// The same over IPv6 (`lb6-nat`).
    Lb6 = 6,
    /// An outbound ESP SA over IPv4 (`esp4-encrypt`; the id is the SA index).
    Esp4 = 7,
    /// The same over IPv6 (`esp6-encrypt`).
    Esp6 = 8,
    /// A UPF's IPv4 UE pool (`upf4-downlink`, which finds the session by UE address; the
    /// id is 0).
    Upf4 = 9,
    /// The same for IPv6 UEs (`upf6-downlink`).
    Upf6 = 10,
}

/// Bits of a FIB value above this hold a [`TunnelKind`]; below, an adjacency index or
/// a tunnel id. A route to a tunnel needs no adjacency of its own, so a million
/// downlink routes (one per UE address) cost the trie's leaves and nothing more.
pub const TUNNEL_SHIFT: u32 = 28;
/// The largest adjacency index and tunnel id.
pub const MAX_INDEX: u32 = (1 << TUNNEL_SHIFT) - 1;

/// GTP-U tunnel interfaces are `gtpu_tunnel<id>`.
pub const GTPU_IF_PREFIX: &str = "gtpu_tunnel";
/// UDP tunnel interfaces (GUE, GRE-in-UDP, direct) are `udp_tunnel<id>`.
pub const UDP_TUNNEL_IF_PREFIX: &str = "udp_tunnel";
/// Routes to load-balanced service addresses show as going to `lb-vip`.
pub const LB_VIP_NAME: &str = "lb-vip";

/// Routes to a UPF's UE pools show as going to `upf-pool`.
pub const UPF_POOL_NAME: &str = "upf-pool";

/// Outbound ESP SAs are interfaces `ipsec_tunnel<SA index>`.
pub const IPSEC_TUNNEL_IF_PREFIX: &str = "ipsec_tunnel";

/// A tunnel as a FIB value: its kind and its id within that feature's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct TunnelRef {
    pub kind: TunnelKind,
    pub id: u32,
}

impl TunnelRef {
    #[inline(always)]
    pub const fn encode(self) -> u32 {
        ((self.kind as u32) << TUNNEL_SHIFT) | (self.id & MAX_INDEX)
    }

    /// The tunnel a FIB value names; `None` for an adjacency index.
    #[inline(always)]
    pub const fn decode(v: u32) -> Option<TunnelRef> {
        let kind = match v >> TUNNEL_SHIFT {
            1 => TunnelKind::Gtpu4,
            2 => TunnelKind::Gtpu6,
            3 => TunnelKind::Gue4,
            4 => TunnelKind::Gue6,
            5 => TunnelKind::Lb4,
            6 => TunnelKind::Lb6,
            7 => TunnelKind::Esp4,
            8 => TunnelKind::Esp6,
            9 => TunnelKind::Upf4,
            10 => TunnelKind::Upf6,
            _ => return None,
        };
        Some(TunnelRef { kind, id: v & MAX_INDEX })
    }

    /// The tunnel's interface name, as routes and `show` use it.
    pub fn if_name(self) -> String {
        match self.kind {
            TunnelKind::Gtpu4 | TunnelKind::Gtpu6 => format!("{GTPU_IF_PREFIX}{}", self.id),
            TunnelKind::Gue4 | TunnelKind::Gue6 => format!("{UDP_TUNNEL_IF_PREFIX}{}", self.id),
            TunnelKind::Lb4 | TunnelKind::Lb6 => LB_VIP_NAME.to_string(),
            TunnelKind::Esp4 | TunnelKind::Esp6 => format!("{IPSEC_TUNNEL_IF_PREFIX}{}", self.id),
            TunnelKind::Upf4 | TunnelKind::Upf6 => UPF_POOL_NAME.to_string(),
        }
    }

    /// The UDP tunnel id an interface name like `udp_tunnel3` names.
    pub fn udp_tunnel_id(if_name: &str) -> Option<u32> {
        if_name.strip_prefix(UDP_TUNNEL_IF_PREFIX)?.parse().ok()
    }

    /// The GTP-U tunnel id an interface name like `gtpu_tunnel3` names (both outer
    /// families share one id space, so the name does not tell the kind).
    pub fn gtpu_id(if_name: &str) -> Option<u32> {
        if_name.strip_prefix(GTPU_IF_PREFIX)?.parse().ok()
    }
}

/// Which feature's input node takes a UDP packet addressed to the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpApp {
    Gtpu,
    /// A UDP tunnel port (GUE, GRE-in-UDP, direct): `gue4-input` / `gue6-input`.
    Gue,
    /// ESP in UDP (RFC 3948): `esp4-decrypt` / `esp6-decrypt`.
    Esp,
}

/// The local UDP demux: ports that tunnel features listen on, and the endpoint addresses
/// for which `ethernet-input` sends such packets straight to the feature, skipping
/// `ipN-input` (whose fast-path checks it runs itself), the route lookup and `ipN-local`
/// (the GTP-U deck's "bypass the first lookup").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdpDemux {
    pub ports: Vec<(u16, UdpApp)>,
    pub bypass4: Vec<(Ipv4Addr, u16, UdpApp)>,
    pub bypass6: Vec<(Ipv6Addr, u16, UdpApp)>,
    /// Filters, so that a forwarded packet (most of them) costs `ethernet-input` a test
    /// or two rather than a scan: bit `port % 64` for every bypass port, and for every
    /// bypass address a bit picked by a multiplicative hash of its last 32 bits (not the
    /// low bits themselves: so many addresses end in .1). Set by [`UdpDemux::seal`] when
    /// the demux is published.
    bypass_ports: u64,
    bypass_addrs: u64,
}

impl UdpDemux {
    /// Compute the filters; call after the last change.
    pub fn seal(&mut self) {
        let ports = self.bypass4.iter().map(|b| b.1).chain(self.bypass6.iter().map(|b| b.1));
        self.bypass_ports = ports.fold(0, |m, p| m | 1 << (p % 64));
        let low = |o: &[u8]| u32::from_be_bytes([o[o.len() - 4], o[o.len() - 3], o[o.len() - 2], o[o.len() - 1]]);
        let addrs = self.bypass4.iter().map(|b| low(&b.0.octets())).chain(self.bypass6.iter().map(|b| low(&b.0.octets())));
        self.bypass_addrs = addrs.fold(0, |m, a| m | addr_bit(a));
    }

    #[inline(always)]
    fn may_bypass(&self, port: u16) -> bool {
        self.bypass_ports & 1 << (port % 64) != 0
    }

    /// Whether a packet to an address ending in these 32 bits (big-endian) may be for a
    /// bypass endpoint: false means certainly not.
    #[inline(always)]
    pub fn may_be_endpoint(&self, low32: u32) -> bool {
        self.bypass_addrs & addr_bit(low32) != 0
    }

    #[inline(always)]
    pub fn port(&self, port: u16) -> Option<UdpApp> {
        self.ports.iter().find(|(p, _)| *p == port).map(|(_, a)| *a)
    }
    #[inline(always)]
    pub fn bypass4(&self, dst: Ipv4Addr, port: u16) -> Option<UdpApp> {
        if !self.may_bypass(port) {
            return None;
        }
        self.bypass4.iter().find(|(a, p, _)| *a == dst && *p == port).map(|(_, _, x)| *x)
    }
    #[inline(always)]
    pub fn bypass6(&self, dst: &Ipv6Addr, port: u16) -> Option<UdpApp> {
        if !self.may_bypass(port) {
            return None;
        }
        self.bypass6.iter().find(|(a, p, _)| a == dst && *p == port).map(|(_, _, x)| *x)
    }
}

/// An address's bit in [`UdpDemux`]'s filter: the top six bits of a Fibonacci hash.
#[inline(always)]
fn addr_bit(low32: u32) -> u64 {
    1 << (low32.wrapping_mul(0x9e37_79b1) >> 26)
}

/// What to do with a packet a lookup sent here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adjacency {
    /// No route: ICMP destination unreachable.
    Miss,
    /// One of our addresses: local delivery.
    Local,
    /// Silently discard (a `blackhole` route).
    Blackhole,
    /// Resolved next hop: prepend this Ethernet header, send on `tx_if`.
    Rewrite { tx_if: IfIndex, rewrite: [u8; 14], mtu: u16 },
    /// Attached subnet: the destination itself is the next hop; resolve it in the
    /// neighbour table per packet.
    Glean { tx_if: IfIndex, mtu: u16 },
    /// Next hop `via` not yet resolved: solicit it.
    Incomplete { tx_if: IfIndex, mtu: u16, via: std::net::IpAddr },
}

impl Adjacency {
    /// The link this adjacency sends on, if it sends.
    #[inline(always)]
    pub fn tx_if(&self) -> Option<IfIndex> {
        match self {
            Adjacency::Rewrite { tx_if, .. } | Adjacency::Glean { tx_if, .. } | Adjacency::Incomplete { tx_if, .. } => Some(*tx_if),
            _ => None,
        }
    }

    /// The MTU of the link this adjacency sends on, if it sends.
    #[inline(always)]
    pub fn mtu(&self) -> Option<u16> {
        match self {
            Adjacency::Rewrite { mtu, .. } | Adjacency::Glean { mtu, .. } | Adjacency::Incomplete { mtu, .. } => Some(*mtu),
            _ => None,
        }
    }
}

/// A resolved neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    pub if_index: IfIndex,
    pub mac: EthernetAddress,
    /// Configured (never replaced by learning) or learned.
    pub is_static: bool,
}

/// An interface's L3 view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfL3 {
    pub name: String,
    pub mac: EthernetAddress,
    pub mtu: u16,
    pub ip4: Vec<(Ipv4Addr, u8)>,
    pub ip6: Vec<(Ipv6Addr, u8)>,
    pub ip6_link_local: Ipv6Addr,
    /// Removed at run time: the slot keeps its index (ports, counters and adjacencies
    /// name interfaces by index) until an added interface reuses it; it has no name and
    /// no addresses, so nothing matches it.
    pub removed: bool,
    /// The reverse-path check of what it receives (`ethernet-input` reads it per packet,
    /// from the interface it has loaded for the MAC test). The first 64 interfaces only:
    /// an ECMP group knows its links as a 64-bit mask (`Multipath::links`).
    pub urpf: crate::urpf::Urpf,
}

impl IfL3 {
    pub fn has_ip4(&self, a: Ipv4Addr) -> bool {
        self.ip4.iter().any(|(x, _)| *x == a)
    }
    pub fn has_ip6(&self, a: &Ipv6Addr) -> bool {
        *a == self.ip6_link_local || self.ip6.iter().any(|(x, _)| x == a)
    }
    /// Is `a` a multicast group this interface listens to (all-nodes, solicited-node
    /// of one of its addresses)?
    pub fn listens_ip6(&self, a: &Ipv6Addr) -> bool {
        let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
        *a == all_nodes
            || *a == wire::ipv6::solicited_node(&self.ip6_link_local)
            || self.ip6.iter().any(|(x, _)| *a == wire::ipv6::solicited_node(x))
    }
    /// Source address for packets this gateway originates out of this interface.
    pub fn ip4_source(&self) -> Option<Ipv4Addr> {
        self.ip4.first().map(|(a, _)| *a)
    }
    pub fn ip6_source(&self) -> Ipv6Addr {
        self.ip6.first().map_or(self.ip6_link_local, |(a, _)| *a)
    }
}

pub struct Tables {
    /// Increments on every publish (shown by `show ip fib`).
    pub generation: u64,
    pub interfaces: Arc<Vec<IfL3>>,
    pub fib4: Arc<Fib<u32>>,
    pub fib6: Arc<Fib<u128>>,
    pub adjacencies: Arc<Vec<Adjacency>>,
    /// ECMP groups (a FIB value tagged `multipath::MULTIPATH_TAG` indexes this).
    pub multipaths: Arc<Vec<Arc<crate::multipath::Multipath>>>,
    pub neighbours4: Arc<HashMap<Ipv4Addr, Neighbour>>,
    pub neighbours6: Arc<HashMap<Ipv6Addr, Neighbour>>,
    pub udp: Arc<UdpDemux>,
    /// Bit i: interface i takes IP parcels (`parcels = true`). Non-zero, `ipN-input`
    /// hands UDP datagrams to `parcelN-join`, which coalesces runs of them toward these.
    pub parcel_links: u64,
    /// Bit i: interface i has an IPsec SPD bound; forwarded packets leaving by it go to
    /// `ipsecN-output` before `ipN-rewrite`, packets arriving on it to `ipsecN-input`
    /// after `ipN-input`, and ESP decrypted from it to `ipsecN-decrypted` (0: no SPD
    /// anywhere, one test per packet).
    pub spd_links: u64,
    /// TCP and UDP for the gateway's own addresses go to `lbN-nat` (NodePort services,
    /// replies to source-translated connections) rather than being refused.
    pub lb_local: bool,
    /// Forwarded packets go to `lbN-nat` before `ipN-rewrite`: replies of load-balanced
    /// connections that kept the client's address (services with the `Local` policy).
    pub lb_replies: bool,
    /// Ports of our addresses whose packets go to the host's stack (`[punt]`).
    pub punt: Arc<crate::punt::Punt>,
    /// Outbound transport-mode SAs' cost on the packets they protect, for the tunnels
    /// whose outer packets they protect ([`Tables::tunnel_link_mtu`]).
    pub transport_esp: Arc<Vec<TransportEsp>>,
}

/// What an outbound transport-mode SA adds to each packet it protects (the gateway's
/// own, from `local` to `remote`) at worst: its ESP header, IV, most padding, trailer
/// and ICV, and UDP with ESP in UDP; `mtu`: the SA's own inner MTU cap (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportEsp {
    pub local: std::net::IpAddr,
    pub remote: std::net::IpAddr,
    pub overhead: u16,
    pub mtu: u16,
}

/// The largest packet from `src` to `dst` a link of MTU `mtu` carries once the
/// transport-mode SAs in `esp` between those addresses have added their bytes.
pub(crate) fn esp_limited_mtu(esp: &[TransportEsp], mtu: u16, src: std::net::IpAddr, dst: std::net::IpAddr) -> u16 {
    esp.iter()
        .filter(|e| e.local == src && e.remote == dst)
        .map(|e| crate::outer::inner_mtu(Some(mtu), e.overhead as usize, e.mtu) as u16)
        .fold(mtu, u16::min)
}

/// The source and destination of the IPv4 or IPv6 header at the start of `h`.
fn header_addrs(h: &[u8]) -> Option<(std::net::IpAddr, std::net::IpAddr)> {
    match h.first().map(|v| v >> 4) {
        Some(4) => {
            let a = h.get(12..20)?;
            Some((Ipv4Addr::new(a[0], a[1], a[2], a[3]).into(), Ipv4Addr::new(a[4], a[5], a[6], a[7]).into()))
        }
        Some(6) => {
            let a: &[u8; 32] = h.get(8..40)?.try_into().ok()?;
            Some((Ipv6Addr::from(*a.first_chunk::<16>()?).into(), Ipv6Addr::from(*a.last_chunk::<16>()?).into()))
        }
        _ => None,
    }
}

impl Tables {
    pub fn empty() -> Tables {
        Tables {
            generation: 0,
            interfaces: Arc::new(Vec::new()),
            fib4: Arc::new(Fib::empty()),
            fib6: Arc::new(Fib::empty()),
            adjacencies: Arc::new(vec![Adjacency::Miss, Adjacency::Local]),
            multipaths: Arc::new(Vec::new()),
            neighbours4: Arc::new(HashMap::new()),
            neighbours6: Arc::new(HashMap::new()),
            udp: Arc::new(UdpDemux::default()),
            parcel_links: 0,
            spd_links: 0,
            lb_local: false,
            lb_replies: false,
            punt: Arc::new(crate::punt::Punt::default()),
            transport_esp: Arc::new(Vec::new()),
        }
    }

    /// The MTU a tunnel's outer packets (IP header `outer`, as the tunnel's rewrite holds
    /// it) have on the link of adjacency `adj`: the link's, less what an outbound
    /// transport-mode SA between the header's addresses adds to them where the link has
    /// an SPD (its PROTECT policy sends them there after the tunnel), so full-size inner
    /// packets still fit the link as ESP. `None` when `adj` does not send.
    #[inline(always)]
    pub fn tunnel_link_mtu(&self, adj: u32, outer: &[u8]) -> Option<u16> {
        let mtu = self.adjacency(adj).mtu()?;
        Some(match self.transport_ends(adj, outer) {
            Some((src, dst)) => esp_limited_mtu(&self.transport_esp, mtu, src, dst),
            None => mtu,
        })
    }

    /// Whether a tunnel's outer packets (IP header `outer`) sent by adjacency `adj` go
    /// to an outbound transport-mode SA ([`Tables::tunnel_link_mtu`] counts it): one too
    /// big is then left whole, for `espN-encrypt` to fragment as ESP, since fragments
    /// made before it would leave past the link's policies, in the clear.
    pub fn tunnel_esp_protected(&self, adj: u32, outer: &[u8]) -> bool {
        self.transport_ends(adj, outer).is_some_and(|(src, dst)| self.transport_esp.iter().any(|e| e.local == src && e.remote == dst))
    }

    /// The addresses of a tunnel's outer header `outer` when its packets, sent by
    /// adjacency `adj`, may meet an outbound transport-mode SA: some SA exists and the
    /// link has an SPD. `None` (the common case, one test) otherwise.
    #[inline(always)]
    fn transport_ends(&self, adj: u32, outer: &[u8]) -> Option<(std::net::IpAddr, std::net::IpAddr)> {
        if self.transport_esp.is_empty() || !self.adjacency(adj).tx_if().is_some_and(|i| self.has_spd(i)) {
            return None;
        }
        header_addrs(outer)
    }

    /// A packet routed out of interface `i` may go from the route lookup straight to
    /// `ipN-rewrite`: no SPD is bound to `i` and no LB reply translation is on. A node that
    /// looks routes up itself (the parcel nodes) sends the others to `ipN-lookup`, which
    /// passes them through those features; otherwise they would bypass a DISCARD policy.
    #[inline(always)]
    pub fn straight_to_rewrite(&self, i: IfIndex) -> bool {
        !self.lb_replies && self.spd_links.checked_shr(i.0 as u32).unwrap_or(0) & 1 == 0
    }

    /// Interface `i` takes IP parcels.
    #[inline(always)]
    pub fn takes_parcels(&self, i: IfIndex) -> bool {
        self.parcel_links.checked_shr(i.0 as u32).unwrap_or(0) & 1 != 0
    }

    #[inline(always)]
    pub fn interface(&self, i: IfIndex) -> Option<&IfL3> {
        self.interfaces.get(i.get())
    }

    /// The path ECMP group `group` gives a packet of flow hash `hash` (an adjacency
    /// index or an encoded tunnel; `ADJ_MISS` for a group not published).
    #[inline(always)]
    pub fn multipath_choose(&self, group: u32, hash: u32) -> u32 {
        self.multipaths.get(group as usize).map_or(ADJ_MISS, |m| m.choose(hash))
    }

    #[inline(always)]
    pub fn adjacency(&self, i: u32) -> &Adjacency {
        self.adjacencies.get(i as usize).unwrap_or(&Adjacency::Miss)
    }

    /// Whether `a` is one of the gateway's own addresses (its route is local).
    pub fn is_local(&self, a: std::net::IpAddr) -> bool {
        let route = match a {
            std::net::IpAddr::V4(a) => self.fib4.lookup(u32::from(a)),
            std::net::IpAddr::V6(a) => self.fib6.lookup(u128::from(a)),
        };
        matches!(self.adjacency(route), Adjacency::Local)
    }

    /// Whether interface `i` has an IPsec SPD bound (`spd_links`): one load and one
    /// predictable branch while no SPD is bound anywhere.
    #[inline(always)]
    pub fn has_spd(&self, i: IfIndex) -> bool {
        self.spd_links != 0 && self.spd_links.checked_shr(i.0 as u32).unwrap_or(0) & 1 != 0
    }
}

/// The Ethernet header for sending to `dst` from interface `ifl`.
pub fn l2_rewrite(ifl: &IfL3, dst: EthernetAddress, ethertype: wire::EtherType) -> [u8; 14] {
    wire::ethernet::EthernetRepr { src: ifl.mac, dst, ethertype }.to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_demux_filters_never_hide_an_endpoint() {
        let mut d = UdpDemux::default();
        let ours: Ipv4Addr = "198.18.1.1".parse().unwrap();
        let ours6: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
        d.bypass4.push((ours, 6080, UdpApp::Gue));
        d.bypass6.push((ours6, 2152, UdpApp::Gtpu));
        // Unsealed: the filters are empty and nothing bypasses.
        assert_eq!(d.bypass4(ours, 6080), None);
        d.seal();
        assert_eq!(d.bypass4(ours, 6080), Some(UdpApp::Gue));
        assert_eq!(d.bypass6(&ours6, 2152), Some(UdpApp::Gtpu));
        assert!(d.may_be_endpoint(u32::from(ours)) && d.may_be_endpoint(1));
        assert_eq!(d.bypass4(ours, 6081), None);
        assert_eq!(d.bypass4("198.18.1.2".parse().unwrap(), 6080), None);
        assert_eq!(d.bypass6(&ours6, 6080), None, "the port is a bypass port, but not for this address");
        // The address filter turns most other addresses away at once, including the
        // many that share the endpoint's last byte.
        let others = (0..256u32).map(|i| 0xc613_0001 + (i << 8)).filter(|&a| d.may_be_endpoint(a)).count();
        assert!(others < 32, "{others} of 256 pass the filter");
    }
}
