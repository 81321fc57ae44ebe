//! IPv6 fixed header (RFC 8200 §3). Extension headers are in `ipv6_ext`.
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! |                 Source Address (128 bits)                     |
//! |              Destination Address (128 bits)                   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::ip::IpProtocol;
use core::net::Ipv6Addr;

pub const HEADER_LEN: usize = 40;
/// The minimum link MTU every IPv6 link supports (RFC 8200 §5).
pub const MIN_MTU: usize = 1280;

mod field {
    pub const VER_TC_FL: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ipv6Error {
    #[error("buffer shorter than the IPv6 header or its payload length")]
    Truncated,
    #[error("version field is not 6")]
    BadVersion,
    #[error("payload length 0 without a hop-by-hop header (jumbogram needs one)")]
    BadPayloadLength,
}

#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Checks the version and that header plus payload fit the buffer. A payload length
    /// of zero is accepted only with a hop-by-hop header next (a possible RFC 2675
    /// jumbogram, whose real length the jumbo option carries; `ip6-input` checks it).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Ipv6Error> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Ipv6Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Ipv6Error::BadVersion);
        }
        let pl = crate::be16(b, field::LENGTH) as usize;
        if pl == 0 && b[field::NXT_HDR] == 0 && b.len() > HEADER_LEN {
            return Ok(Ipv6Packet { buffer });
        }
        if HEADER_LEN + pl > b.len() {
            return Err(Ipv6Error::Truncated);
        }
        Ok(Ipv6Packet { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn traffic_class(&self) -> u8 {
        (crate::be16(self.buffer.as_ref(), field::VER_TC_FL) >> 4) as u8
    }
    pub fn flow_label(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), field::VER_TC_FL) & 0x000f_ffff
    }
    #[inline(always)]
    pub fn payload_len(&self) -> usize {
        crate::be16(self.buffer.as_ref(), field::LENGTH) as usize
    }
    /// Payload length 0 with a hop-by-hop header: the jumbo option carries the length.
    pub fn is_jumbo_candidate(&self) -> bool {
        self.payload_len() == 0 && self.buffer.as_ref()[field::NXT_HDR] == 0
    }
    #[inline(always)]
    pub fn next_header(&self) -> IpProtocol {
        self.buffer.as_ref()[field::NXT_HDR].into()
    }
    #[inline(always)]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    #[inline(always)]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr_bytes(field::SRC))
    }
    #[inline(always)]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr_bytes(field::DST))
    }
    #[inline(always)]
    pub fn dst_u128(&self) -> u128 {
        u128::from_be_bytes(self.addr_bytes(field::DST))
    }
    #[inline(always)]
    fn addr_bytes(&self, at: usize) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[at..at + 16]);
        a
    }
    /// Everything after the fixed header up to the payload length (or the buffer end
    /// for a jumbo candidate).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        if self.is_jumbo_candidate() {
            &b[HEADER_LEN..]
        } else {
            &b[HEADER_LEN..HEADER_LEN + self.payload_len()]
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    pub fn set_version_tc_fl(&mut self, tc: u8, flow: u32) {
        let v = (6u32 << 28) | ((tc as u32) << 20) | (flow & 0x000f_ffff);
        crate::put32(self.buffer.as_mut(), field::VER_TC_FL, v)
    }
    pub fn set_payload_len(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::LENGTH, v)
    }
    pub fn set_next_header(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = p.into()
    }
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v
    }
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[field::SRC..field::SRC + 16].copy_from_slice(&a.octets())
    }
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[field::DST..field::DST + 16].copy_from_slice(&a.octets())
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: IpProtocol,
    pub payload_len: usize,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl Ipv6Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Self, Ipv6Error> {
        if p.is_jumbo_candidate() {
            // The length lives in the hop-by-hop jumbo option; not a plain header.
            return Err(Ipv6Error::BadPayloadLength);
        }
        Ok(Ipv6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        p.set_version_tc_fl(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(&self.src);
        p.set_dst_addr(&self.dst);
    }
}

/// The solicited-node multicast address of RFC 4291 §2.7.1 (ff02::1:ffXX:XXXX).
pub fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | o[13] as u16, u16::from_be_bytes([o[14], o[15]]))
}

/// The modified EUI-64 link-local address of RFC 4291 App. A for a MAC.
pub fn link_local_from_mac(mac: &crate::EthernetAddress) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([0xfe, 0x80, 0, 0, 0, 0, 0, 0, m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn malformed() {
        let mut b = [0u8; 48];
        Ipv6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
        assert!(Ipv6Packet::new_checked(&b[..]).is_ok());
        assert_eq!(Ipv6Packet::new_checked(&b[..47]).unwrap_err(), Ipv6Error::Truncated);
        assert_eq!(Ipv6Packet::new_checked(&b[..39]).unwrap_err(), Ipv6Error::Truncated);
        let mut v = b;
        v[0] = 0x40;
        assert_eq!(Ipv6Packet::new_checked(&v[..]).unwrap_err(), Ipv6Error::BadVersion);
    }

    #[test]
    fn solicited_node_and_link_local() {
        let a: Ipv6Addr = "2001:db8::1:2:3344:5566".parse().unwrap();
        assert_eq!(solicited_node(&a), "ff02::1:ff44:5566".parse::<Ipv6Addr>().unwrap());
        let mac = crate::EthernetAddress([0x02, 0, 0x5e, 0x10, 0x20, 0x30]);
        assert_eq!(link_local_from_mac(&mac), "fe80::5eff:fe10:2030".parse::<Ipv6Addr>().unwrap());
    }

    proptest! {
        #[test]
        fn roundtrip(src: u128, dst: u128, nh: u8, len in 1usize..2000, hl: u8, tc: u8, fl in 0u32..(1 << 20)) {
            let r = Ipv6Repr { src: src.into(), dst: dst.into(), next_header: nh.into(), payload_len: len, hop_limit: hl, traffic_class: tc, flow_label: fl };
            let mut b = vec![0u8; HEADER_LEN + len];
            r.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
            prop_assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
        }
    }
}
