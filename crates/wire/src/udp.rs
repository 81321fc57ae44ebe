//! UDP (RFC 768), with the IPv4 and IPv6 pseudo-header checksums.
//!
//! ```text
//! | Source Port | Destination Port | Length | Checksum | payload ...
//! ```
//! A zero checksum means "none" over IPv4; over IPv6 it is invalid except where RFC 6935
//! and RFC 6936 allow it for tunnels (the receiving node decides, not this module).

use crate::checksum::{self, Checksum};
use crate::ip::IpProtocol;
use core::net::{Ipv4Addr, Ipv6Addr};

pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UdpError {
    #[error("UDP datagram shorter than its header or its length field")]
    Truncated,
    #[error("UDP length field below 8")]
    BadLength,
    #[error("UDP checksum mismatch")]
    BadChecksum,
}

#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }
    /// Checks the header and that the length field is ≥ 8 and within the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, UdpError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(UdpError::Truncated);
        }
        let len = crate::be16(b, field::LENGTH) as usize;
        if len < HEADER_LEN {
            return Err(UdpError::BadLength);
        }
        if len > b.len() {
            return Err(UdpError::Truncated);
        }
        Ok(UdpPacket { buffer })
    }
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::DST_PORT)
    }
    #[inline(always)]
    pub fn len(&self) -> usize {
        crate::be16(self.buffer.as_ref(), field::LENGTH) as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }
    #[inline(always)]
    pub fn checksum(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len()]
    }
    fn sum_with(&self, pseudo: Checksum) -> u16 {
        let mut c = pseudo;
        c.add_bytes(&self.buffer.as_ref()[..self.len()]);
        c.fold()
    }
    /// IPv4: a zero checksum means "not computed" and is accepted.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0 || self.sum_with(checksum::pseudo_header_v4(src, dst, IpProtocol::Udp.into(), self.len() as u16)) == 0xffff
    }
    /// IPv6: zero is *not* accepted here; RFC 6936 acceptance is the caller's decision.
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        self.checksum() != 0 && self.sum_with(checksum::pseudo_header_v6(src, dst, IpProtocol::Udp.into(), self.len() as u32)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    pub fn set_src_port(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::SRC_PORT, v)
    }
    pub fn set_dst_port(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::DST_PORT, v)
    }
    pub fn set_len(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::LENGTH, v)
    }
    pub fn set_checksum(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::CHECKSUM, v)
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }
    fn fill_with(&mut self, pseudo: Checksum) {
        self.set_checksum(0);
        let mut c = pseudo;
        let len = self.len();
        c.add_bytes(&self.buffer.as_ref()[..len]);
        // RFC 768: a computed zero is sent as all ones.
        let v = match c.finish() {
            0 => 0xffff,
            v => v,
        };
        self.set_checksum(v);
    }
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let len = self.len() as u16;
        self.fill_with(checksum::pseudo_header_v4(src, dst, IpProtocol::Udp.into(), len))
    }
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        let len = self.len() as u32;
        self.fill_with(checksum::pseudo_header_v6(src, dst, IpProtocol::Udp.into(), len))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
}

impl UdpRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Result<Self, UdpError> {
        Ok(UdpRepr { src_port: p.src_port(), dst_port: p.dst_port() })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write the header for a payload of `payload_len` bytes, checksum zero; the caller
    /// fills the checksum once the payload is in place.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut UdpPacket<T>, payload_len: usize) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len((HEADER_LEN + payload_len) as u16);
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip_and_checksums(sp: u16, dp: u16, payload in proptest::collection::vec(any::<u8>(), 0..200), s4: u32, d4: u32, s6: u128, d6: u128) {
            let r = UdpRepr { src_port: sp, dst_port: dp };
            let mut b = vec![0u8; HEADER_LEN + payload.len()];
            b[HEADER_LEN..].copy_from_slice(&payload);
            let mut p = UdpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut p, payload.len());
            p.fill_checksum_v4(s4.into(), d4.into());
            let p = UdpPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(UdpRepr::parse(&p).unwrap(), r);
            prop_assert!(p.verify_checksum_v4(s4.into(), d4.into()));
            prop_assert_eq!(p.payload(), &payload[..]);
            let mut p = UdpPacket::new_checked(&mut b[..]).unwrap();
            p.fill_checksum_v6(&s6.into(), &d6.into());
            prop_assert!(p.verify_checksum_v6(&s6.into(), &d6.into()));
            prop_assert!(p.checksum() != 0);
        }
    }

    #[test]
    fn malformed() {
        assert_eq!(UdpPacket::new_checked(&[0u8; 7][..]).unwrap_err(), UdpError::Truncated);
        let mut b = [0u8; 12];
        b[5] = 4;
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap_err(), UdpError::BadLength);
        b[5] = 13;
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap_err(), UdpError::Truncated);
        b[5] = 12;
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        // Zero checksum: fine on IPv4, refused on IPv6.
        assert!(p.verify_checksum_v4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2)));
        assert!(!p.verify_checksum_v6(&"2001:db8::1".parse().unwrap(), &"2001:db8::2".parse().unwrap()));
    }
}
