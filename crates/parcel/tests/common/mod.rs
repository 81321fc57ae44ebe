//! What the parcel tests share: a UDP datagram built from scratch with `wire`'s reprs.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The header fields of a test datagram; `v6` picks the family (and with it the address
/// pair and the IPv4-only or IPv6-only fields that apply).
pub struct Datagram {
    pub v6: bool,
    pub src4: Ipv4Addr,
    pub dst4: Ipv4Addr,
    pub src6: Ipv6Addr,
    pub dst6: Ipv6Addr,
    pub ports: (u16, u16),
    pub ttl: u8,
    pub tos: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub flow_label: u32,
}

impl Datagram {
    /// The IP header, the UDP header with its full checksum, then `payload`.
    pub fn build(&self, payload: &[u8]) -> Vec<u8> {
        let hl = if self.v6 { 40 } else { 20 };
        let mut b = vec![0u8; hl + 8 + payload.len()];
        if self.v6 {
            let ip = wire::ipv6::Ipv6Repr {
                src: self.src6,
                dst: self.dst6,
                next_header: wire::IpProtocol::Udp,
                payload_len: 8 + payload.len(),
                hop_limit: self.ttl,
                traffic_class: self.tos,
                flow_label: self.flow_label,
            };
            ip.emit(&mut wire::ipv6::Ipv6Packet::new_unchecked(&mut b[..40]));
        } else {
            let ip = wire::ipv4::Ipv4Repr {
                src: self.src4,
                dst: self.dst4,
                protocol: wire::IpProtocol::Udp,
                payload_len: 8 + payload.len(),
                ttl: self.ttl,
                dscp: self.tos >> 2,
                ecn: self.tos & 3,
                ident: self.ident,
                dont_frag: self.dont_frag,
            };
            ip.emit(&mut wire::ipv4::Ipv4Packet::new_unchecked(&mut b[..20]));
        }
        b[hl + 8..].copy_from_slice(payload);
        let mut u = wire::udp::UdpPacket::new_unchecked(&mut b[hl..]);
        wire::udp::UdpRepr { src_port: self.ports.0, dst_port: self.ports.1 }.emit(&mut u, payload.len());
        if self.v6 {
            u.fill_checksum_v6(&self.src6, &self.dst6);
        } else {
            u.fill_checksum_v4(self.src4, self.dst4);
        }
        b
    }
}

/// Allocate every buffer `pool` has free, whatever its class, and count them: a test that
/// freed everything sees each buffer on a free list exactly once (one handed out twice
/// fails here).
pub fn allocate_each_once(pool: &mut engine::Pool) -> usize {
    let mut seen = std::collections::HashSet::new();
    while let Some(b) = pool.alloc(100).or_else(|| pool.alloc(9000)).or_else(|| pool.alloc(70_000)) {
        assert!(seen.insert(b), "{b:?} handed out twice");
    }
    seen.len()
}
