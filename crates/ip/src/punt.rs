//! Punt: packets for the gateway's own addresses that a daemon on the host answers (an
//! IKE daemon on UDP 500 and 4500, a BGP speaker on TCP 179, sshd), handed whole to the
//! host's stack behind one of the gateway's links (a tap), as VPP's punt and linux-cp do.
//! The host's replies come back through that link and are routed like any packet.
//!
//! ```text
//! ipN-local ──(UDP/TCP to a punted port)──┐
//! espN-decrypt ──(IKE behind the non-ESP  ├─► ip-punt ─► interface-output (the punt link)
//!                 marker on a punted port)┘        └──► ip-glean (host next hop unresolved)
//! ```
//!
//! The packet is delivered, not forwarded: its TTL / hop limit stays as it arrived.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::IpProtocol;

/// What `[punt]` asks for, as the router state keeps it: the link toward the host, the
/// host's address on it per family (the packets' next hop), the ports: the file's, and
/// those added at run time (`punt_port_add`), each with the owner that added it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PuntSpec {
    pub interface: String,
    pub host4: Option<Ipv4Addr>,
    pub host6: Option<Ipv6Addr>,
    pub udp_ports: Vec<u16>,
    pub tcp_ports: Vec<u16>,
    /// UDP ports added at run time → their owner (`k8s`, `ctl`); kept while `[punt]` is.
    pub added_udp: BTreeMap<u16, String>,
    /// TCP ports added at run time → their owner.
    pub added_tcp: BTreeMap<u16, String>,
}

impl PuntSpec {
    /// The ports added at run time of one protocol (`tcp`: TCP, else UDP).
    pub fn added(&self, tcp: bool) -> &BTreeMap<u16, String> {
        if tcp {
            &self.added_tcp
        } else {
            &self.added_udp
        }
    }

    pub fn added_mut(&mut self, tcp: bool) -> &mut BTreeMap<u16, String> {
        if tcp {
            &mut self.added_tcp
        } else {
            &mut self.added_udp
        }
    }

    /// The file's ports of one protocol.
    pub fn file_ports(&self, tcp: bool) -> &[u16] {
        if tcp {
            &self.tcp_ports
        } else {
            &self.udp_ports
        }
    }

    /// Whether `port` of this protocol is punted, by the file or added.
    pub fn punts(&self, tcp: bool, port: u16) -> bool {
        self.file_ports(tcp).contains(&port) || self.added(tcp).contains_key(&port)
    }
}

/// The published side: which ports go to the host and by which adjacency.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Punt {
    udp: Vec<u16>,
    tcp: Vec<u16>,
    /// The host next hop's adjacency per family (`None`: that family is not punted).
    adj4: Option<u32>,
    adj6: Option<u32>,
}

impl Punt {
    pub fn new(spec: &PuntSpec, adj4: Option<u32>, adj6: Option<u32>) -> Punt {
        // The file's ports and the added ones, in one sorted list per protocol.
        let sorted = |p: &[u16], added: &BTreeMap<u16, String>| {
            let mut v: Vec<u16> = p.iter().chain(added.keys()).copied().collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        Punt { udp: sorted(&spec.udp_ports, &spec.added_udp), tcp: sorted(&spec.tcp_ports, &spec.added_tcp), adj4, adj6 }
    }

    /// Nothing is punted (the default): one test in `ipN-local`.
    #[inline(always)]
    pub fn is_off(&self) -> bool {
        self.adj4.is_none() && self.adj6.is_none()
    }

    /// The adjacency toward the host for a UDP or TCP packet of this family whose header
    /// starts `l4`, if it is punted: its destination port is a daemon's, or its source
    /// port is (a reply to a connection the host's daemon opened, as a BGP speaker does).
    #[inline]
    pub fn target(&self, v6: bool, protocol: IpProtocol, l4: &[u8]) -> Option<u32> {
        let adj = if v6 { self.adj6 } else { self.adj4 };
        adj?;
        let ports = match protocol {
            IpProtocol::Udp => &self.udp,
            IpProtocol::Tcp => &self.tcp,
            _ => return None,
        };
        let (src, dst) = match l4 {
            [a, b, c, d, ..] => (u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d])),
            _ => return None,
        };
        adj.filter(|_| ports.binary_search(&dst).is_ok() || ports.binary_search(&src).is_ok())
    }

    /// The adjacency toward the host for an ICMP or ICMPv6 message (`icmp`: from its
    /// type on) to one of our addresses that is the host's: an echo reply (the gateway
    /// sends no echo requests of its own: it answers the host's ping), or an error that
    /// quotes a packet of a punted port (the host's IKE or BGP packet was refused, too
    /// big, or timed out on its way).
    pub fn icmp_target(&self, v6: bool, icmp: &[u8]) -> Option<u32> {
        let adj = if v6 { self.adj6 } else { self.adj4 }?;
        let t = *icmp.first()?;
        let (echo_reply, error) = if v6 { (t == 129, t < 128) } else { (t == 0, matches!(t, 3 | 11 | 12)) };
        if echo_reply {
            return Some(adj);
        }
        if !error {
            return None;
        }
        // The quoted packet is cut short (IPv4: its header and 8 bytes): read its
        // protocol and ports by position, not through a checked header view.
        let q = icmp.get(8..)?;
        let (protocol, l4) = match v6 {
            true => (IpProtocol::from(*q.get(6)?), wire::ipv6::HEADER_LEN),
            false => (IpProtocol::from(*q.get(9)?), usize::from(*q.first()? & 0x0f) * 4),
        };
        self.target(v6, protocol, q.get(l4..)?)
    }

    /// [`Punt::target`] for a whole IP packet (UDP or TCP right after the fixed header,
    /// or after IPv6 extension headers): `espN-decrypt` asks it of an IKE message on 4500.
    pub fn target_of(&self, ip: &[u8]) -> Option<u32> {
        if self.is_off() {
            return None;
        }
        let (v6, protocol, l4) = l4_of(ip)?;
        self.target(v6, protocol, ip.get(l4..)?)
    }
}

/// An IP packet's upper-layer protocol and where its header starts (`None`: truncated,
/// or an IPv4 fragment other than the first).
fn l4_of(ip: &[u8]) -> Option<(bool, IpProtocol, usize)> {
    match ip.first()? >> 4 {
        4 => {
            let p = wire::ipv4::Ipv4Packet::new_checked(ip).ok()?;
            (p.frag_offset() == 0).then(|| (false, p.protocol(), p.header_len()))
        }
        6 => {
            let p = wire::ipv6::Ipv6Packet::new_checked(ip).ok()?;
            let chain = wire::ipv6_ext::walk_chain(p.next_header(), p.payload()).ok()?;
            if chain.fragment.is_some() {
                return None;
            }
            Some((true, chain.upper?, wire::ipv6::HEADER_LEN + chain.upper_offset))
        }
        _ => None,
    }
}

/// The next hop toward the host of `spec` for one family: its address must be on a
/// connected subnet of the punt link.
pub fn host_hop(spec: &PuntSpec, v6: bool) -> Option<IpAddr> {
    if v6 {
        spec.host6.map(IpAddr::V6)
    } else {
        spec.host4.map(IpAddr::V4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn punt() -> Punt {
        let spec = PuntSpec { udp_ports: vec![4500, 500, 500], tcp_ports: vec![179], ..Default::default() };
        Punt::new(&spec, Some(7), None)
    }

    fn ports(src: u16, dst: u16) -> [u8; 8] {
        let mut h = [0u8; 8];
        h[..2].copy_from_slice(&src.to_be_bytes());
        h[2..4].copy_from_slice(&dst.to_be_bytes());
        h
    }

    #[test]
    fn a_daemons_port_either_way_round_and_only_its_protocol() {
        let p = punt();
        assert_eq!(p.target(false, IpProtocol::Udp, &ports(40000, 500)), Some(7));
        assert_eq!(p.target(false, IpProtocol::Udp, &ports(4500, 4500)), Some(7));
        // A reply to a connection the host's daemon opened comes from the daemon's port.
        assert_eq!(p.target(false, IpProtocol::Tcp, &ports(179, 40000)), Some(7));
        assert_eq!(p.target(false, IpProtocol::Tcp, &ports(40000, 500)), None, "500 is a UDP port here");
        assert_eq!(p.target(false, IpProtocol::Udp, &ports(40000, 179)), None, "179 is a TCP port here");
        assert_eq!(p.target(false, IpProtocol::Icmp, &ports(500, 500)), None);
        assert_eq!(p.target(true, IpProtocol::Udp, &ports(40000, 500)), None, "no IPv6 host next hop");
        assert_eq!(p.target(false, IpProtocol::Udp, &ports(40000, 500)[..3]), None, "truncated");
        assert!(Punt::default().is_off() && !p.is_off());
    }

    #[test]
    fn ports_added_at_run_time_are_punted_beside_the_files() {
        let mut spec = PuntSpec { tcp_ports: vec![179], ..Default::default() };
        spec.added_tcp.insert(10256, "k8s".into());
        spec.added_udp.insert(3784, "ctl".into());
        let p = Punt::new(&spec, Some(7), None);
        assert_eq!(p.target(false, IpProtocol::Tcp, &ports(40000, 10256)), Some(7));
        assert_eq!(p.target(false, IpProtocol::Tcp, &ports(40000, 179)), Some(7), "the file's port still");
        assert_eq!(p.target(false, IpProtocol::Udp, &ports(40000, 3784)), Some(7));
        assert_eq!(p.target(false, IpProtocol::Udp, &ports(40000, 10256)), None, "10256 is added for TCP only");
        assert!(spec.punts(true, 10256) && spec.punts(true, 179) && !spec.punts(false, 179));
    }

    #[test]
    fn echo_replies_and_errors_about_a_daemons_packets() {
        let p = punt();
        assert_eq!(p.icmp_target(false, &[0, 0, 0, 0, 0, 1, 0, 1]), Some(7), "echo reply");
        assert_eq!(p.icmp_target(false, &[8, 0, 0, 0, 0, 1, 0, 1]), None, "echo request: the gateway's to answer");
        // Port unreachable quoting our IKE packet (header and 8 bytes, as routers quote).
        let mut err = vec![3, 3, 0, 0, 0, 0, 0, 0, 0x45, 0, 0, 200, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 3, 2, 198, 18, 3, 1];
        err.extend_from_slice(&ports(500, 500));
        assert_eq!(p.icmp_target(false, &err), Some(7));
        err[8 + 20..8 + 24].copy_from_slice(&ports(40000, 53)[..4]);
        assert_eq!(p.icmp_target(false, &err), None, "about another port");
        assert_eq!(p.icmp_target(false, &err[..30]), None, "quote cut before the ports");
        assert_eq!(p.icmp_target(true, &[129, 0, 0, 0]), None, "no IPv6 host next hop");
        let p6 = Punt::new(&PuntSpec { tcp_ports: vec![179], ..Default::default() }, None, Some(9));
        let mut err6 = vec![1, 4, 0, 0, 0, 0, 0, 0, 0x60, 0, 0, 0, 0, 20, 6, 64];
        err6.extend_from_slice(&[0; 32]);
        err6.extend_from_slice(&ports(179, 40000));
        assert_eq!(p6.icmp_target(true, &err6), Some(9));
        assert_eq!(p6.icmp_target(true, &[129, 0, 0, 0]), Some(9));
        assert_eq!(p6.icmp_target(true, &[135, 0, 0, 0]), None, "neighbour solicitation");
    }

    #[test]
    fn whole_packets_found_after_extension_headers_not_in_later_fragments() {
        let spec = PuntSpec { udp_ports: vec![4500], ..Default::default() };
        let p = Punt::new(&spec, Some(3), Some(4));
        let mut v4 = vec![0x45, 0, 0, 36, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 3, 1, 198, 18, 3, 2];
        v4.extend_from_slice(&ports(4500, 4500));
        v4.extend_from_slice(&[0; 8]);
        assert_eq!(p.target_of(&v4), Some(3));
        let mut later = v4.clone();
        later[7] = 1; // fragment offset 8: no UDP header here
        assert_eq!(p.target_of(&later), None);
        // IPv6 with a Destination Options header (8 bytes) before UDP.
        let mut v6 = vec![0x60, 0, 0, 0, 0, 24, 60, 64];
        v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        v6.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v6.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        v6.extend_from_slice(&ports(4500, 4500));
        v6.extend_from_slice(&[0; 8]);
        assert_eq!(p.target_of(&v6), Some(4));
        assert_eq!(p.target_of(&v6[..50]), None, "truncated in the extension header");
        assert_eq!(p.target_of(&[0x15; 40]), None, "neither version");
    }
}
