//! The outer headers of an encapsulated (direct server return) service, built on the
//! control plane as one shape per encapsulation (mode, GUE port, the node's address),
//! shared by every service and backend that has it; a packet costs one copy of the shape
//! and a few patches, its backend's address among them.
//!
//! ```text
//! ipip: [outer IP, protocol 4 or 41][client's packet]
//! gre:  [outer IP, protocol 47][GRE: 0, EtherType 0x0800 or 0x86dd][client's packet]
//! gue:  [outer IP, protocol 17][UDP: flow-hash port → gue_port][GUE variant 0: proto 4 or 41][client's packet]
//! ```
//! The outer source is the node's address (`lb.snat4` / `lb.snat6`), the destination the
//! backend; outer and inner are the service's family. The outer IPv4 header has DF set
//! and identification 0 (an atomic datagram, RFC 6864), as `ip::outer` emits it for the
//! UDP tunnels. The GUE UDP checksum is zero over IPv4 and computed over IPv6 (Linux's
//! fou takes no zero checksum over IPv6 unless configured to).
//!
//! Why a shape and not a template per backend: with packets going round 10 000 services,
//! a template a backend was a cache line apart for every connection, the one miss of a
//! session hit, and prefetching it cost a second read of the session a packet
//! (docs/PERFORMANCE.md). The few shapes stay in the L1 cache; the backend's address and
//! adjacency come with the session.

use crate::service::{Forwarding, ServiceSpec};
use ip::outer::{udp_checksum, Ip4Outer, Ip6Outer, OuterFamily};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::checksum::Checksum;

/// The longest outer headers: IPv6 (40), UDP (8), GUE (4).
pub const MAX_OUTER: usize = 52;

/// GUE source ports: the dynamic range, as the UDP tunnels use by default.
const GUE_PORT_MIN: u16 = 49152;
const GUE_PORT_SPAN: u32 = 65536 - GUE_PORT_MIN as u32;

/// Why a packet could not be encapsulated (each a node counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncapError {
    /// Not enough headroom in front of the packet for the outer headers.
    NoHeadroom,
    /// The packet with its outer headers is longer than an IP packet can be.
    TooBig,
}

/// What makes two encapsulated services' outer headers alike, their backends apart: the
/// mode and, for GUE, the destination port (the source, the node's address, is the
/// family's). A service's shape is found by it ([`crate::LbState`] interns them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShapeKey {
    pub forwarding: Forwarding,
    /// GUE's destination port; 0 for the other modes.
    pub gue_port: u16,
}

impl ShapeKey {
    /// An encapsulated service's key; `None` for NAT.
    pub fn of(spec: &ServiceSpec) -> Option<ShapeKey> {
        let gue_port = if spec.forwarding == Forwarding::Gue { spec.gue_port() } else { 0 };
        spec.forwarding.is_encap().then_some(ShapeKey { forwarding: spec.forwarding, gue_port })
    }
}

/// One shape of outer headers, the destination left zero: one cache line
/// (`an_outer_shape_is_one_cache_line`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(align(64))]
pub struct Outer {
    /// The headers, from the outer IP header on, at the end (the last `len` bytes;
    /// zeros before them): the whole array goes in front of a packet with one fixed-size
    /// copy, the bytes before the headers landing in headroom (a copy of the headers'
    /// own length was a call to `memcpy` a packet, perf).
    bytes: [u8; MAX_OUTER],
    len: u8,
    /// Where UDP starts (GUE only; 0 without UDP).
    udp_at: u8,
    v6: bool,
    /// IPv4: the header's ones'-complement sum with a zero total length and a zero
    /// destination, folded, not complemented: the checksum of a packet of `n` bytes to
    /// `d` is `!(sum + n + d)` folded.
    ip_sum: u16,
    /// IPv6 GUE: the UDP pseudo-header sum without the length and the destination,
    /// folded (as [`Checksum::fold`] gives it).
    pseudo: u16,
}

impl Outer {
    /// The outer headers of `key` from the node's address `src`.
    pub fn new(key: ShapeKey, src: IpAddr) -> Option<Outer> {
        let mut bytes = [0u8; MAX_OUTER];
        let (ip_len, pseudo) = match src {
            IpAddr::V4(s) => {
                let any = Ipv4Addr::UNSPECIFIED;
                (Ip4Outer::emit_header(s, any, 0, &mut bytes), Ip4Outer::pseudo(&s, &any))
            }
            IpAddr::V6(s) => {
                let any = Ipv6Addr::UNSPECIFIED;
                (Ip6Outer::emit_header(s, any, 0, &mut bytes), Ip6Outer::pseudo(&s, &any))
            }
        };
        let v6 = ip_len == 40;
        // The inner packet is of the outer family (a service's backends are of its family).
        let (inner_proto, ethertype) = if v6 { (41u8, 0x86ddu16) } else { (4u8, 0x0800u16) };
        let (proto, extra, udp_at) = match key.forwarding {
            Forwarding::Nat => return None,
            Forwarding::Ipip => (inner_proto, 0, 0),
            Forwarding::Gre => {
                wire::gre::GreRepr { protocol: ethertype, checksum: false, key: None, sequence: None }.emit(&mut bytes[ip_len..]);
                (47, wire::gre::BASE_LEN, 0)
            }
            Forwarding::Gue => {
                let u = &mut bytes[ip_len..ip_len + 8];
                u[0..2].copy_from_slice(&GUE_PORT_MIN.to_be_bytes());
                u[2..4].copy_from_slice(&key.gue_port.to_be_bytes());
                wire::gue::GueRepr::data(wire::IpProtocol::from(inner_proto)).emit(&mut bytes[ip_len + 8..]);
                (17, 8 + wire::gue::BASE_LEN, ip_len)
            }
        };
        // The emitted header names UDP and sums a zero length: name the protocol and sum
        // the header again (IPv4), so a packet adds only its length and destination.
        let ip_sum = if v6 {
            bytes[6] = proto;
            0
        } else {
            bytes[9] = proto;
            bytes[2..4].copy_from_slice(&[0, 0]);
            bytes[10..12].copy_from_slice(&[0, 0]);
            let c = wire::checksum::checksum(&bytes[..20]);
            bytes[10..12].copy_from_slice(&c.to_be_bytes());
            !c
        };
        let len = ip_len + extra;
        bytes.copy_within(..len, MAX_OUTER - len);
        bytes[..MAX_OUTER - len].fill(0);
        Some(Outer { bytes, len: len as u8, udp_at: udp_at as u8, v6, ip_sum, pseudo: pseudo.fold() })
    }

    /// The headers' length.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The headers as a packet of no payload to no destination would carry them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[MAX_OUTER - self.len as usize..]
    }

    /// Grow `buf` at the front by the headers, written: one fixed-size copy of the whole
    /// array when the headroom takes it (always, at the pool's standard headroom), else
    /// a copy of the headers alone. The headers, to patch, or `None` without room for them.
    #[inline(always)]
    fn put_in_front<'b>(&self, buf: &'b mut engine::Buffer) -> Option<&'b mut [u8]> {
        let len = self.len as usize;
        if let Some(w) = buf.front_window::<MAX_OUTER>(MAX_OUTER) {
            *w = self.bytes;
            buf.extend_front(len).ok()?;
            return buf.bytes_mut().get_mut(..len);
        }
        let h = buf.prepend(len).ok()?;
        h.copy_from_slice(self.bytes());
        Some(h)
    }

    /// Put the headers in front of the packet in `buf` (the client's, from its IP header
    /// on), addressed to `dst` (the backend: 4 bytes under an IPv4 shape, 16 under
    /// IPv6), `hash` the flow's hash (the GUE source port). The buffer then starts at
    /// the outer IP header, which takes the client packet's DSCP and ECN (as every
    /// tunnel's does: `ip::outer::tos`). IPv4 inlined into the caller's session hit (as
    /// one `#[inline]` function it stayed a call of its own, perf); IPv6, whose GUE header
    /// takes a whole UDP checksum, out of line.
    #[inline(always)]
    pub fn apply(&self, buf: &mut engine::Buffer, hash: u32, dst: &[u8]) -> Result<(), EncapError> {
        if self.v6 {
            return self.apply6(buf, hash, dst);
        }
        let len = self.len as usize;
        let total = len + buf.len();
        if total > u16::MAX as usize {
            return Err(EncapError::TooBig);
        }
        let tc = buf.bytes().get(1).copied().unwrap_or(0);
        let h = self.put_in_front(buf).ok_or(EncapError::NoHeadroom)?;
        // The IPv4 header's 20 bytes proven once for the patches.
        let ip: &mut [u8; 20] = h.first_chunk_mut().ok_or(EncapError::NoHeadroom)?;
        let d: &[u8; 4] = dst.first_chunk().ok_or(EncapError::NoHeadroom)?;
        ip[16..20].copy_from_slice(d);
        ip[1] = tc;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        let mut c = self.ip_sum as u32
            + tc as u32
            + total as u32
            + u16::from_be_bytes([d[0], d[1]]) as u32
            + u16::from_be_bytes([d[2], d[3]]) as u32;
        c = (c & 0xffff) + (c >> 16);
        c = (c & 0xffff) + (c >> 16);
        ip[10..12].copy_from_slice(&(!(c as u16)).to_be_bytes());
        if self.udp_at != 0 {
            let u = self.udp_at as usize;
            h[u..u + 2].copy_from_slice(&Self::gue_port(hash).to_be_bytes());
            h[u + 4..u + 6].copy_from_slice(&((total - u) as u16).to_be_bytes());
        }
        Ok(())
    }

    /// [`Outer::apply`] for IPv6 outer headers.
    #[inline(never)]
    fn apply6(&self, buf: &mut engine::Buffer, hash: u32, dst: &[u8]) -> Result<(), EncapError> {
        let len = self.len as usize;
        let total = len + buf.len();
        let ip_payload = total - 40;
        if ip_payload > u16::MAX as usize {
            return Err(EncapError::TooBig);
        }
        let d: &[u8; 16] = dst.first_chunk().ok_or(EncapError::NoHeadroom)?;
        // Under a computed outer checksum the inner packet's pending partial checksum
        // (from a vnet-header device) is completed first: the outer one covers it.
        if self.udp_at != 0 {
            ip::outer::ChecksumMode::Software.settle_inner_checksum(buf);
        }
        let tc = ip::outer::tos::traffic_class(buf.bytes());
        let h = self.put_in_front(buf).ok_or(EncapError::NoHeadroom)?;
        ip::outer::tos::set_ipv6_traffic_class(h, tc);
        h[4..6].copy_from_slice(&(ip_payload as u16).to_be_bytes());
        h[24..40].copy_from_slice(d);
        if self.udp_at != 0 {
            let u = self.udp_at as usize;
            h[u..u + 2].copy_from_slice(&Self::gue_port(hash).to_be_bytes());
            h[u + 4..u + 6].copy_from_slice(&((total - u) as u16).to_be_bytes());
            let seg = &mut buf.bytes_mut()[u..];
            let c = udp_checksum(*Checksum::new().add_u16(self.pseudo).add_array(d), seg);
            seg[6..8].copy_from_slice(&c.to_be_bytes());
        }
        Ok(())
    }

    /// The GUE source port of a flow whose hash is `hash` (the backend NIC's RSS).
    #[inline(always)]
    fn gue_port(hash: u32) -> u16 {
        udptun::tunnel::src_port(GUE_PORT_MIN, GUE_PORT_SPAN, hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ipv4::{Ipv4Packet, Ipv4Repr};
    use wire::ipv6::{Ipv6Packet, Ipv6Repr};

    /// Encapsulate `inner` with `o` to `dst` in a buffer of a fresh pool: the bytes out.
    fn encap_to(o: &Outer, dst: IpAddr, inner: &[u8], hash: u32) -> Result<Vec<u8>, EncapError> {
        let mut pool = engine::Pool::new(1, 1);
        let b = pool.alloc(inner.len()).unwrap();
        pool.get_mut(b).write(inner).unwrap();
        let d = match dst {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        o.apply(pool.get_mut(b), hash, &d)?;
        Ok(pool.get(b).bytes().to_vec())
    }

    /// [`encap_to`] the one backend most tests use.
    fn encap(o: &Outer, inner: &[u8], hash: u32) -> Result<Vec<u8>, EncapError> {
        encap_to(o, BACKEND.parse().unwrap(), inner, hash)
    }

    fn shape(forwarding: Forwarding, gue_port: u16) -> ShapeKey {
        ShapeKey { forwarding, gue_port }
    }

    /// An inner IPv4 UDP packet of `n` payload bytes from 198.18.0.2:1234 to 198.18.128.10:53.
    fn inner4(n: usize) -> Vec<u8> {
        let mut p = vec![0u8; 28 + n];
        let r = Ipv4Repr {
            src: "198.18.0.2".parse().unwrap(),
            dst: "198.18.128.10".parse().unwrap(),
            protocol: wire::IpProtocol::Udp,
            payload_len: 8 + n,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 7,
            dont_frag: false,
        };
        r.emit(&mut Ipv4Packet::new_unchecked(&mut p[..20]));
        p[20..28].copy_from_slice(&[4, 210, 0, 53, 0, 8 + n as u8, 0, 0]);
        p
    }

    fn inner6() -> Vec<u8> {
        let mut p = vec![0u8; 48];
        let r = Ipv6Repr {
            src: "2001:db8::2".parse().unwrap(),
            dst: "2001:db8:80::10".parse().unwrap(),
            next_header: wire::IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        r.emit(&mut Ipv6Packet::new_unchecked(&mut p[..40]));
        p[40..48].copy_from_slice(&[4, 210, 0, 53, 0, 8, 0, 0]);
        p
    }

    const NODE: &str = "198.18.1.1";
    const BACKEND: &str = "198.19.1.10";

    /// Each mode's outer IPv4 header parses as valid (checksum, length) with its
    /// protocol, and the inner packet follows unchanged after the mode's headers.
    #[test]
    fn ipv4_outer_headers_parse_and_carry_the_packet() {
        for (mode, proto, extra) in [(Forwarding::Ipip, 4, 0), (Forwarding::Gre, 47, 4), (Forwarding::Gue, 17, 12)] {
            for n in [0, 1, 100, 1400] {
                let inner = inner4(n);
                let o = Outer::new(shape(mode, 6080), NODE.parse().unwrap()).unwrap();
                let p = encap(&o, &inner, 0xdead_beef).unwrap();
                let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
                let r = Ipv4Repr::parse(&ip).unwrap_or_else(|e| panic!("{mode:?} {n}: {e:?}"));
                assert_eq!(r.protocol, wire::IpProtocol::from(proto), "{mode:?}");
                assert_eq!((r.src.to_string(), r.dst.to_string()), (NODE.to_string(), BACKEND.to_string()));
                assert_eq!(r.payload_len, extra + inner.len());
                assert!(r.dont_frag);
                assert_eq!(&p[20 + extra..], &inner[..], "{mode:?}");
                match mode {
                    Forwarding::Gre => assert_eq!(&p[20..24], &[0, 0, 8, 0]),
                    Forwarding::Gue => {
                        let sport = u16::from_be_bytes([p[20], p[21]]);
                        assert!(sport >= 49152);
                        assert_eq!(u16::from_be_bytes([p[22], p[23]]), 6080);
                        assert_eq!(u16::from_be_bytes([p[24], p[25]]) as usize, 8 + 4 + inner.len());
                        assert_eq!(&p[26..28], &[0, 0], "zero UDP checksum over IPv4");
                        let g = wire::gue::GuePacket::new_checked(&p[28..]).unwrap();
                        assert_eq!((g.version(), g.control(), g.proto_ctype(), g.header_len()), (0, false, 4, 4));
                    }
                    _ => {}
                }
            }
        }
    }

    /// The GUE source port follows the flow hash, so flows spread over the range.
    #[test]
    fn gue_source_port_spreads_flows() {
        let o = Outer::new(shape(Forwarding::Gue, 5555), NODE.parse().unwrap()).unwrap();
        let ports: std::collections::HashSet<u16> = (0..64u32)
            .map(|h| {
                let p = encap(&o, &inner4(10), engine::hash::finish(h)).unwrap();
                u16::from_be_bytes([p[20], p[21]])
            })
            .collect();
        assert!(ports.len() > 50, "{}", ports.len());
        assert!(ports.iter().all(|&p| p >= GUE_PORT_MIN));
    }

    /// IPv6: the payload length, protocol, and the GUE UDP checksum verifies.
    #[test]
    fn ipv6_outer_headers() {
        let (src, dst): (IpAddr, IpAddr) = ("2001:db8:1::1".parse().unwrap(), "2001:db8:100::10".parse().unwrap());
        for (mode, proto, extra) in [(Forwarding::Ipip, 41, 0), (Forwarding::Gre, 47, 4), (Forwarding::Gue, 17, 12)] {
            let inner = inner6();
            let o = Outer::new(shape(mode, 6080), src).unwrap();
            let p = encap_to(&o, dst, &inner, 3).unwrap();
            let r = Ipv6Repr::parse(&Ipv6Packet::new_checked(&p[..]).unwrap()).unwrap();
            assert_eq!(r.next_header, wire::IpProtocol::from(proto));
            assert_eq!(r.payload_len, extra + inner.len());
            assert_eq!(&p[40 + extra..], &inner[..]);
            if mode == Forwarding::Gre {
                assert_eq!(&p[40..44], &[0, 0, 0x86, 0xdd]);
            }
            if mode == Forwarding::Gue {
                let (s, d) = match (src, dst) {
                    (IpAddr::V6(s), IpAddr::V6(d)) => (s, d),
                    _ => unreachable!(),
                };
                assert!(ip::outer::udp_checksum_ok(Ip6Outer::pseudo(&s, &d), &p[40..]));
                assert_eq!(p[40 + 8 + 1], 41);
            }
        }
    }

    /// Headroom short of the whole template but enough for the headers: the headers
    /// alone are copied, the same bytes as with room; shorter still, refused by name.
    #[test]
    fn short_headroom_takes_the_headers_alone() {
        let o = Outer::new(shape(Forwarding::Gue, 6080), NODE.parse().unwrap()).unwrap();
        let inner = inner4(10);
        let roomy = encap(&o, &inner, 7).unwrap();
        for headroom in [o.len(), o.len() + 1, MAX_OUTER - 1, 0, o.len() - 1] {
            let mut pool = engine::Pool::new(1, 1);
            let b = pool.alloc(inner.len()).unwrap();
            let buf = pool.get_mut(b);
            buf.write(&inner).unwrap();
            // Move the packet's start down to `headroom` bytes from the buffer's start.
            let down = buf.headroom() - headroom;
            buf.extend_front(down).unwrap();
            buf.bytes_mut()[..inner.len()].copy_from_slice(&inner);
            buf.truncate(inner.len());
            assert_eq!(buf.headroom(), headroom);
            let r = o.apply(buf, 7, &BACKEND.parse::<std::net::Ipv4Addr>().unwrap().octets());
            if headroom >= o.len() {
                assert_eq!(r, Ok(()), "headroom {headroom}");
                assert_eq!(buf.bytes(), &roomy[..], "headroom {headroom}");
            } else {
                assert_eq!(r, Err(EncapError::NoHeadroom), "headroom {headroom}");
            }
        }
    }

    /// The destination goes in with the packet, and the IPv4 header checksum takes it:
    /// addresses whose words carry when summed (all ones) verify too, and one shape
    /// serves every backend.
    #[test]
    fn one_shape_serves_every_destination() {
        let o = Outer::new(shape(Forwarding::Gre, 0), NODE.parse().unwrap()).unwrap();
        assert_eq!(&o.bytes()[16..20], &[0, 0, 0, 0], "no destination in the shape");
        for dst in ["198.19.1.10", "198.19.255.255", "255.255.255.254", "1.0.0.1", "254.255.0.255"] {
            let inner = inner4(3);
            let p = encap_to(&o, dst.parse().unwrap(), &inner, 1).unwrap();
            let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
            assert!(ip.verify_checksum(), "{dst}");
            assert_eq!(ip.dst_addr().to_string(), dst);
            assert_eq!(&p[24..], &inner[..]);
        }
    }

    #[test]
    fn an_outer_shape_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Outer>(), 64);
    }

    #[test]
    fn refusals() {
        assert!(Outer::new(shape(Forwarding::Nat, 0), NODE.parse().unwrap()).is_none());
        let o = Outer::new(shape(Forwarding::Gre, 0), NODE.parse().unwrap()).unwrap();
        // 65 520 bytes with 24 more of outer headers: past IPv4's 65 535.
        let mut big = inner4(0);
        big.resize(65_520, 0);
        assert_eq!(encap(&o, &big, 0), Err(EncapError::TooBig));
    }
}
