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

    /// Whether FIB value `v` is a route into a tunnel of `kind` (one shift and compare,
    /// for a node's per-packet test; [`TunnelRef::decode`] for the tunnel itself).
    #[inline(always)]
    pub const fn is_kind(v: u32, kind: TunnelKind) -> bool {
        v >> TUNNEL_SHIFT == kind as u32
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
    /// The UDP source ports our outbound ESP in UDP leaves from (each such SA's
    /// `udp_src_port`, 4500 by default): an ICMP error quoting UDP from one of them may
    /// be about our ESP ([`UdpDemux::esp_source`]). Not the ports ESP in UDP arrives on:
    /// an SA may send from another port than its pair takes packets on.
    pub esp_sources: Vec<u16>,
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

    /// Whether our outbound ESP in UDP leaves from UDP port `port`.
    #[inline(always)]
    pub fn esp_source(&self, port: u16) -> bool {
        self.esp_sources.contains(&port)
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
    /// The tunnels' outer packets that an outbound transport-mode SA protects, and on
    /// which links: what it takes off their link MTU ([`Tables::tunnel_link_mtu`]).
    /// Empty (the common case: one test a packet) unless some SPD's answer for a
    /// tunnel's outer packets is PROTECT by a transport-mode SA.
    pub tunnel_esp: Arc<Vec<TunnelEsp>>,
    /// The smallest MTU [`Tables::tunnel_link_mtu_to`] (and [`Tables::tunnel_link_mtu`])
    /// can give a tunnel's outer packets of each family (IPv4, IPv6), whatever their link
    /// and ends: the least link MTU, lowered only where an entry of `tunnel_esp` leaves
    /// less of one of its links ([`tunnel_mtu_floor`], worked out when the tables are
    /// built). An outer packet no larger fits whatever the lookup would say, so a tunnel
    /// may skip it (the UPF's small-packet shortcut), entries or not.
    pub tunnel_mtu_floor: [u16; 2],
}

/// A tunnel's outer packets (UDP from `local` to `remote`, destination port `port`) that
/// an outbound transport-mode SA protects when they leave by one of `links` (bit i:
/// interface i, whose SPD's answer for them is PROTECT by that SA), and what the SA adds
/// to each at worst: its ESP header, IV, most padding, trailer and ICV, and UDP with ESP
/// in UDP (`overhead`); `mtu`: the SA's own inner MTU cap (0: none). Worked out by the
/// control plane when it publishes, from the tunnels, the SAs and the SPDs, so that a
/// packet only compares its header's bytes with the few entries there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelEsp {
    pub local: std::net::IpAddr,
    pub remote: std::net::IpAddr,
    pub port: u16,
    pub links: u64,
    pub overhead: u16,
    pub mtu: u16,
    /// The source and destination as the outer header holds them (the first 8 bytes for
    /// IPv4, all 32 for IPv6): what a packet's header is compared with.
    ends: [u8; 32],
}

impl TunnelEsp {
    pub fn new(local: std::net::IpAddr, remote: std::net::IpAddr, port: u16, links: u64, overhead: u16, mtu: u16) -> TunnelEsp {
        let mut ends = [0; 32];
        match (local, remote) {
            (std::net::IpAddr::V4(l), std::net::IpAddr::V4(r)) => {
                ends[..4].copy_from_slice(&l.octets());
                ends[4..8].copy_from_slice(&r.octets());
            }
            (std::net::IpAddr::V6(l), std::net::IpAddr::V6(r)) => {
                ends[..16].copy_from_slice(&l.octets());
                ends[16..].copy_from_slice(&r.octets());
            }
            // Mixed families: no header has them; the entry matches nothing.
            _ => return TunnelEsp { local, remote, port, links: 0, overhead, mtu, ends },
        }
        TunnelEsp { local, remote, port, links, overhead, mtu, ends }
    }

    /// The largest outer packet a link of MTU `mtu` carries once this SA added its bytes.
    #[inline(always)]
    fn limit(&self, mtu: u16) -> u16 {
        crate::outer::inner_mtu(Some(mtu), self.overhead as usize, self.mtu).min(mtu as usize) as u16
    }

    /// Whether the outer IP + UDP header `h` is one of these packets: its addresses
    /// (compared as bytes, not parsed) and its destination port. Any source port: see the
    /// control plane's `tunnel_esp`, which counts an SA that protects some of a
    /// tunnel's source ports as protecting all of them.
    #[inline(always)]
    fn matches(&self, h: &[u8]) -> bool {
        let (ends, udp) = match h.first().map(|v| v >> 4) {
            Some(4) => (h.get(12..20), (h[0] as usize & 0xf) * 4),
            Some(6) => (h.get(8..40), 40),
            _ => return false,
        };
        let n = ends.map_or(0, <[u8]>::len);
        ends.is_some_and(|e| e == &self.ends[..n]) && h.get(udp + 2..udp + 4).is_some_and(|p| u16::from_be_bytes([p[0], p[1]]) == self.port)
    }
}

/// The MTU of a link (`mtu`, interface `i`) for the tunnel outer packets from `local`
/// to `remote` to port `port` once the transport-mode SAs in `esp` that protect them
/// there have added their bytes (the control plane's view of
/// [`Tables::tunnel_link_mtu`]).
pub(crate) fn esp_limited_mtu(
    esp: &[TunnelEsp],
    i: IfIndex,
    mtu: u16,
    local: std::net::IpAddr,
    remote: std::net::IpAddr,
    port: u16,
) -> u16 {
    esp_of(esp, i, local, remote, port).map(|e| e.limit(mtu)).fold(mtu, u16::min)
}

/// The most [`Tables::tunnel_mtu_floor`] is for each family (IPv4, IPv6): IPv4's
/// datagram every host takes ([`crate::outer::MtuPolicy::MIN_MTU`]) and IPv6's minimum
/// link MTU, the bounds the small-packet shortcut always had (a larger one would send
/// small GSO frames, which the lookup's MTU step segments, into the tunnel whole).
pub const LINK_MTU_FLOOR: [u16; 2] = [crate::outer::MtuPolicy::MIN_MTU, wire::ipv6::MIN_MTU as u16];

/// [`Tables::tunnel_mtu_floor`]: for each family (IPv4, IPv6), at most
/// [`LINK_MTU_FLOOR`] and no more than the smallest MTU a tunnel's outer packets can have
/// on any link, `mtus` being the links' (interface i's at i; every adjacency that sends
/// has one of them): the least of them (an IPv4-only link may be narrower than 576),
/// lowered where an entry of `esp` takes its bytes off one of its links
/// ([`TunnelEsp::limit`], as [`esp_limited_mtu`] does for a packet). An SA on
/// full-size links leaves it where it was (1500 less any SA's bytes is still above
/// 576 and 1280): small packets skip the lookup whatever the entries.
pub fn tunnel_mtu_floor(esp: &[TunnelEsp], mtus: &[u16]) -> [u16; 2] {
    let least = mtus.iter().copied().min().unwrap_or(u16::MAX);
    let mut floor = LINK_MTU_FLOOR.map(|f| f.min(least));
    for e in esp {
        let f = usize::from(e.remote.is_ipv6());
        let mut links = e.links;
        while links != 0 {
            let i = links.trailing_zeros() as usize;
            links &= links - 1;
            if let Some(&mtu) = mtus.get(i) {
                floor[f] = floor[f].min(e.limit(mtu));
            }
        }
    }
    floor
}

/// Whether an entry of `esp` protects the outer packets from `local` to `remote` to port
/// `port` leaving by interface `i`.
fn esp_protects(esp: &[TunnelEsp], i: IfIndex, local: std::net::IpAddr, remote: std::net::IpAddr, port: u16) -> bool {
    esp_of(esp, i, local, remote, port).next().is_some()
}

/// The entries of `esp` for the outer packets from `local` to `remote` to port `port`
/// leaving by interface `i`.
fn esp_of(esp: &[TunnelEsp], i: IfIndex, local: std::net::IpAddr, remote: std::net::IpAddr, port: u16) -> impl Iterator<Item = &TunnelEsp> {
    let bit = 1u64.checked_shl(i.0 as u32).unwrap_or(0);
    esp.iter().filter(move |e| e.links & bit != 0 && e.local == local && e.remote == remote && e.port == port)
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
            tunnel_esp: Arc::new(Vec::new()),
            tunnel_mtu_floor: LINK_MTU_FLOOR,
        }
    }

    /// The MTU a tunnel's outer packets (IP and UDP header `outer`, as the tunnel's
    /// rewrite holds it) have on the link of adjacency `adj`: the link's, less what an
    /// outbound transport-mode SA adds to them where the link's SPD PROTECTs them by it
    /// (its answer for their addresses, protocol and ports, worked out when the tables
    /// were published: [`TunnelEsp`]), so full-size inner packets still fit the link as
    /// ESP. `None` when `adj` does not send.
    #[inline(always)]
    pub fn tunnel_link_mtu(&self, adj: u32, outer: &[u8]) -> Option<u16> {
        let a = self.adjacency(adj);
        let mtu = a.mtu()?;
        if self.tunnel_esp.is_empty() {
            return Some(mtu);
        }
        Some(self.tunnel_esp_of(a, outer).map(|e| e.limit(mtu)).fold(mtu, u16::min))
    }

    /// [`Tables::tunnel_link_mtu`] and [`Tables::tunnel_esp_protected`] at once for outer
    /// packets given by their addresses and UDP destination port rather than a built
    /// header: a tunnel that checks its MTU before it builds the header (the UPF's, whose
    /// FARs name only the peer, the source being its N3 address). The same entries decide
    /// as for a header: the MTU of the link of `adj` less what a transport-mode SA its SPD
    /// PROTECTs these packets by adds, and whether there is one. `None` when `adj` does
    /// not send.
    #[inline]
    pub fn tunnel_link_mtu_to(&self, adj: u32, local: std::net::IpAddr, remote: std::net::IpAddr, port: u16) -> Option<(u16, bool)> {
        let a = self.adjacency(adj);
        let mtu = a.mtu()?;
        match a.tx_if() {
            Some(i) if !self.tunnel_esp.is_empty() => {
                let limited = esp_limited_mtu(&self.tunnel_esp, i, mtu, local, remote, port);
                Some((limited, esp_protects(&self.tunnel_esp, i, local, remote, port)))
            }
            _ => Some((mtu, false)),
        }
    }

    /// Whether a tunnel's outer packets (IP and UDP header `outer`) sent by adjacency
    /// `adj` go to an outbound transport-mode SA ([`Tables::tunnel_link_mtu`] counts it):
    /// one too big is then left whole, for `espN-encrypt` to fragment as ESP, since
    /// fragments made before it would leave past the link's policies, in the clear.
    #[inline(always)]
    pub fn tunnel_esp_protected(&self, adj: u32, outer: &[u8]) -> bool {
        !self.tunnel_esp.is_empty() && self.tunnel_esp_of(self.adjacency(adj), outer).next().is_some()
    }

    /// The entries of [`Tables::tunnel_esp`] that protect outer packets `outer` leaving
    /// by adjacency `a`'s link.
    #[inline(always)]
    fn tunnel_esp_of<'a>(&'a self, a: &Adjacency, outer: &'a [u8]) -> impl Iterator<Item = &'a TunnelEsp> + 'a {
        let bit = a.tx_if().map_or(0, |i| 1u64.checked_shl(i.0 as u32).unwrap_or(0));
        self.tunnel_esp.iter().filter(move |e| e.links & bit != 0 && e.matches(outer))
    }

    /// A packet routed out of interface `i` may go from the route lookup straight to
    /// `ipN-rewrite`: no SPD is bound to `i` and no LB reply translation is on. A node that
    /// looks routes up itself (the parcel nodes) sends the others to `ipN-lookup`, which
    /// passes them through those features; otherwise they would bypass a DISCARD policy.
    #[inline(always)]
    pub fn straight_to_rewrite(&self, i: IfIndex) -> bool {
        !self.lb_replies && self.spd_links.checked_shr(i.0 as u32).unwrap_or(0) & 1 == 0
    }

    /// A forwarded packet routed into tunnel `t` goes to the load balancer's node first
    /// (which sends it on into the tunnel): while LB reply translation is on, a `Local`
    /// connection's reply may be routed into a tunnel toward its client (a client behind
    /// a UDP tunnel, an IPsec SA or a UPF's UE pool). Not a service address's route.
    #[inline(always)]
    pub fn lb_sees_tunnel(&self, t: TunnelRef) -> bool {
        self.lb_replies && !matches!(t.kind, TunnelKind::Lb4 | TunnelKind::Lb6)
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

    /// An outer IPv4 (options of `ihl` words) or IPv6 header and UDP to port `port`.
    fn outer(src: &str, dst: &str, ihl: usize, port: u16) -> Vec<u8> {
        let (src, dst): (std::net::IpAddr, std::net::IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let mut h = match (src, dst) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                let mut h = vec![0u8; ihl * 4];
                h[0] = 0x40 | ihl as u8;
                h[9] = 17;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                h
            }
            (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => {
                let mut h = vec![0u8; 40];
                h[0] = 0x60;
                h[6] = 17;
                h[8..24].copy_from_slice(&s.octets());
                h[24..40].copy_from_slice(&d.octets());
                h
            }
            _ => unreachable!(),
        };
        h.extend_from_slice(&[0xc0, 0x01]);
        h.extend_from_slice(&port.to_be_bytes());
        h.extend_from_slice(&[0; 4]);
        h
    }

    #[test]
    fn a_tunnels_link_mtu_counts_only_the_sa_protecting_its_packets_on_that_link() {
        let mut t = Tables::empty();
        let rewrite = |i| Adjacency::Rewrite { tx_if: IfIndex(i), rewrite: [0; 14], mtu: 1400 };
        t.adjacencies = Arc::new(vec![Adjacency::Miss, Adjacency::Local, rewrite(1), rewrite(2), Adjacency::Blackhole]);
        let ip = |a: &str| a.parse::<std::net::IpAddr>().unwrap();
        let h4 = outer("198.18.1.1", "198.18.1.2", 5, 2152);
        let h6 = outer("2001:db8:1::1", "2001:db8:1::2", 0, 6080);
        // Nothing protected: the link's MTU, nothing read past the adjacency.
        assert_eq!(t.tunnel_link_mtu(2, &h4), Some(1400));
        assert!(!t.tunnel_esp_protected(2, &h4));
        t.tunnel_esp = Arc::new(vec![
            TunnelEsp::new(ip("198.18.1.1"), ip("198.18.1.2"), 2152, 0b10, 40, 0),
            TunnelEsp::new(ip("198.18.1.1"), ip("198.18.1.2"), 2152, 0b10, 60, 1300),
            TunnelEsp::new(ip("2001:db8:1::1"), ip("2001:db8:1::2"), 6080, 0b110, 48, 0),
        ]);
        // The SA with the larger cost (and a cap) wins; only on interface 1's link.
        assert_eq!(t.tunnel_link_mtu(2, &h4), Some(1300));
        assert!(t.tunnel_esp_protected(2, &h4));
        assert_eq!(t.tunnel_link_mtu(3, &h4), Some(1400), "interface 2's SPD does not protect them");
        assert!(!t.tunnel_esp_protected(3, &h4));
        assert_eq!(t.tunnel_link_mtu(4, &h4), None);
        assert!(!t.tunnel_esp_protected(4, &h4));
        // Another port, address or family: the link's whole MTU.
        assert_eq!(t.tunnel_link_mtu(2, &outer("198.18.1.1", "198.18.1.2", 5, 2153)), Some(1400));
        assert_eq!(t.tunnel_link_mtu(2, &outer("198.18.1.1", "198.18.1.3", 5, 2152)), Some(1400));
        assert_eq!(t.tunnel_link_mtu(2, &outer("198.18.1.3", "198.18.1.2", 5, 2152)), Some(1400));
        // IPv4 options move the UDP header: its port is still found.
        assert_eq!(t.tunnel_link_mtu(2, &outer("198.18.1.1", "198.18.1.2", 6, 2152)), Some(1300));
        assert_eq!(t.tunnel_link_mtu(3, &h6), Some(1400 - 48));
        assert!(t.tunnel_esp_protected(3, &h6));
        assert_eq!(t.tunnel_link_mtu(3, &outer("2001:db8:1::1", "2001:db8:1::2", 0, 2152)), Some(1400));
        assert_eq!(t.tunnel_link_mtu(3, &outer("2001:db8:1::1", "2001:db8:1::3", 0, 6080)), Some(1400));
        // Truncated headers and other versions match nothing (and do not panic).
        for n in 0..h6.len() {
            assert_eq!(t.tunnel_link_mtu(3, &h6[..n]), Some(if n >= 44 { 1400 - 48 } else { 1400 }), "{n} bytes");
            assert_eq!(
                t.tunnel_link_mtu(2, &h4[..n.min(h4.len())]),
                Some(if n >= 24 { 1300 } else { 1400 }),
                "{n} bytes: the port ends at byte 24"
            );
        }
        assert_eq!(t.tunnel_link_mtu(2, &[0x50; 40]), Some(1400));
    }

    /// The small-packet shortcut's bound survives transport-mode SA entries: an SA on
    /// full-size links leaves it at 576 / 1280; only a link narrower than that bound plus
    /// an SA's bytes (or an SA's own cap) lowers it, and only for its family. It is
    /// never above what the lookup gives any adjacency for any entry's packets, and is
    /// exactly the least of them where an entry lowers it.
    #[test]
    fn the_tunnel_mtu_floor_is_the_least_mtu_any_entry_leaves() {
        let ip = |a: &str| a.parse::<std::net::IpAddr>().unwrap();
        let (l4, r4, l6, r6) = (ip("198.18.1.1"), ip("198.18.1.2"), ip("2001:db8:1::1"), ip("2001:db8:1::2"));
        let v4 = |links, overhead, cap| TunnelEsp::new(l4, r4, 2152, links, overhead, cap);
        let v6 = |links, overhead| TunnelEsp::new(l6, r6, 2152, links, overhead, 0);
        let links = [1500, 9000, 1300];
        assert_eq!(tunnel_mtu_floor(&[], &links), [576, 1280], "no entries: the bound the shortcut always had");
        assert_eq!(Tables::empty().tunnel_mtu_floor, LINK_MTU_FLOOR);
        assert_eq!(tunnel_mtu_floor(&[v4(0b111, 73, 0), v6(0b11, 73)], &links), [576, 1280], "SAs on full-size links");
        assert_eq!(tunnel_mtu_floor(&[v6(0b100, 57)], &links), [576, 1300 - 57], "the 1300-byte link less ESP, IPv6 only");
        assert_eq!(tunnel_mtu_floor(&[v4(0b100, 57, 0)], &links), [576, 1280], "1300 less ESP is above 576");
        assert_eq!(tunnel_mtu_floor(&[v4(0b1, 57, 500)], &links), [500, 1280], "the SA's own cap");
        assert_eq!(tunnel_mtu_floor(&[], &[1500, 400]), [400, 400], "an IPv4-only link narrower than 576");
        assert_eq!(tunnel_mtu_floor(&[v4(0b10, 57, 0)], &[1500, 400]), [400 - 57, 400]);
        assert_eq!(tunnel_mtu_floor(&[v4(1 << 40, 57, 0)], &links), [576, 1280], "no such link");
        let mixed = TunnelEsp::new(l4, r6, 2152, 0b111, 57, 0);
        assert_eq!(tunnel_mtu_floor(&[mixed], &[1300]), [576, 1280], "mixed families match nothing");

        // Never above the lookup's answer, and reached by it.
        let mut t = Tables::empty();
        let rewrite = |i: usize| Adjacency::Rewrite { tx_if: IfIndex(i as u16), rewrite: [0; 14], mtu: links[i] };
        t.adjacencies = Arc::new(vec![Adjacency::Miss, Adjacency::Local, rewrite(0), rewrite(1), rewrite(2)]);
        for esp in [vec![v4(0b101, 57, 0), v6(0b110, 41)], vec![v4(0b1, 57, 600), v6(0b100, 73)], vec![]] {
            t.tunnel_mtu_floor = tunnel_mtu_floor(&esp, &links);
            t.tunnel_esp = Arc::new(esp.clone());
            for (f, (l, r)) in [(l4, r4), (l6, r6)].into_iter().enumerate() {
                let least = (2..5).filter_map(|adj| t.tunnel_link_mtu_to(adj, l, r, 2152)).map(|(m, _)| m).min().unwrap();
                assert!(t.tunnel_mtu_floor[f] <= least, "{esp:?}: family {f}");
                if t.tunnel_mtu_floor[f] < LINK_MTU_FLOOR[f] {
                    assert_eq!(t.tunnel_mtu_floor[f], least, "{esp:?}: family {f}");
                }
            }
        }
    }

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
