//! GRE (RFC 2784, with the key and sequence number of RFC 2890).
//!
//! ```text
//! |C| |K|S| Reserved0 (9) |Ver|        Protocol Type          |
//! |      Checksum (if C)      |       Reserved1 (if C)        |
//! |                      Key (if K)                           |
//! |                 Sequence Number (if S)                    |
//! ```
//! Version 0 only. Reserved0 must be zero: its first bits were RFC 1701's routing and
//! strict-source-route flags, whose fields this implementation cannot skip. The
//! checksum, when present, covers the GRE header and payload.

use crate::checksum::Checksum;

pub const BASE_LEN: usize = 4;
/// Over UDP (RFC 8086).
pub const UDP_PORT: u16 = 4754;

const FLAG_C: u16 = 0x8000;
const FLAG_K: u16 = 0x2000;
const FLAG_S: u16 = 0x1000;
/// Reserved0 (including RFC 1701's R and s bits, 0x4000 and 0x0800) and the version.
const MUST_BE_ZERO: u16 = 0x4000 | 0x0ff8 | 0x0007;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GreError {
    #[error("GRE header shorter than its flags announce")]
    Truncated,
    #[error("GRE version other than 0")]
    BadVersion,
    #[error("GRE reserved bits set (RFC 1701 routing or unknown flags)")]
    ReservedBits,
    #[error("GRE checksum mismatch")]
    BadChecksum,
}

#[derive(Debug, Clone)]
pub struct GrePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GrePacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        GrePacket { buffer }
    }

    /// Checks version 0, clear reserved bits and that the optional fields the flags
    /// announce are present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, GreError> {
        let b = buffer.as_ref();
        if b.len() < BASE_LEN {
            return Err(GreError::Truncated);
        }
        let p = GrePacket { buffer };
        let f = p.flags_version();
        if f & 0x0007 != 0 {
            return Err(GreError::BadVersion);
        }
        if f & MUST_BE_ZERO != 0 {
            return Err(GreError::ReservedBits);
        }
        if p.header_len() > p.buffer.as_ref().len() {
            return Err(GreError::Truncated);
        }
        Ok(p)
    }

    #[inline(always)]
    fn flags_version(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), 0)
    }
    pub fn has_checksum(&self) -> bool {
        self.flags_version() & FLAG_C != 0
    }
    pub fn has_key(&self) -> bool {
        self.flags_version() & FLAG_K != 0
    }
    pub fn has_sequence(&self) -> bool {
        self.flags_version() & FLAG_S != 0
    }
    /// The payload's EtherType (0x0800 IPv4, 0x86dd IPv6, 0x6558 Ethernet).
    #[inline(always)]
    pub fn protocol(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), 2)
    }
    pub fn header_len(&self) -> usize {
        BASE_LEN + 4 * (self.has_checksum() as usize + self.has_key() as usize + self.has_sequence() as usize)
    }
    pub fn key(&self) -> Option<u32> {
        self.has_key().then(|| crate::be32(self.buffer.as_ref(), BASE_LEN + 4 * self.has_checksum() as usize))
    }
    pub fn sequence(&self) -> Option<u32> {
        let at = BASE_LEN + 4 * (self.has_checksum() as usize + self.has_key() as usize);
        self.has_sequence().then(|| crate::be32(self.buffer.as_ref(), at))
    }
    /// True if there is no checksum or it is correct over the whole buffer.
    pub fn verify_checksum(&self) -> bool {
        if !self.has_checksum() {
            return true;
        }
        let mut c = Checksum::new();
        c.add_bytes(self.buffer.as_ref());
        c.fold() == 0xffff
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// What a GRE header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GreRepr {
    pub protocol: u16,
    /// Compute a checksum over header and payload on emit (`fill_checksum`).
    pub checksum: bool,
    pub key: Option<u32>,
    pub sequence: Option<u32>,
}

impl GreRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &GrePacket<T>) -> Result<GreRepr, GreError> {
        if !p.verify_checksum() {
            return Err(GreError::BadChecksum);
        }
        Ok(GreRepr { protocol: p.protocol(), checksum: p.has_checksum(), key: p.key(), sequence: p.sequence() })
    }

    pub const fn buffer_len(&self) -> usize {
        BASE_LEN + 4 * (self.checksum as usize + self.key.is_some() as usize + self.sequence.is_some() as usize)
    }

    /// Write the header into `b` (at least `buffer_len()` bytes). A checksum field is
    /// written as zero; `fill_checksum` completes it once the payload is in place.
    pub fn emit(&self, b: &mut [u8]) {
        let flags = (self.checksum as u16 * FLAG_C) | (self.key.is_some() as u16 * FLAG_K) | (self.sequence.is_some() as u16 * FLAG_S);
        crate::put16(b, 0, flags);
        crate::put16(b, 2, self.protocol);
        let mut at = BASE_LEN;
        if self.checksum {
            crate::put32(b, at, 0);
            at += 4;
        }
        if let Some(k) = self.key {
            crate::put32(b, at, k);
            at += 4;
        }
        if let Some(s) = self.sequence {
            crate::put32(b, at, s);
        }
    }

    /// Compute the checksum over a whole emitted GRE packet (header and payload).
    pub fn fill_checksum(packet: &mut [u8]) {
        crate::put16(packet, BASE_LEN, 0);
        let mut c = Checksum::new();
        c.add_bytes(packet);
        let v = c.finish();
        crate::put16(packet, BASE_LEN, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_ipv4_payload() {
        let b = [0x00, 0x00, 0x08, 0x00, 0x45];
        let p = GrePacket::new_checked(&b[..]).unwrap();
        let r = GreRepr::parse(&p).unwrap();
        assert_eq!(r, GreRepr { protocol: 0x0800, checksum: false, key: None, sequence: None });
        assert_eq!(p.payload(), &[0x45]);
    }

    #[test]
    fn refusals_are_typed() {
        assert_eq!(GrePacket::new_checked(&[0u8, 0, 8][..]).unwrap_err(), GreError::Truncated);
        assert_eq!(GrePacket::new_checked(&[0u8, 1, 8, 0][..]).unwrap_err(), GreError::BadVersion);
        // RFC 1701 routing present.
        assert_eq!(GrePacket::new_checked(&[0x40u8, 0, 8, 0][..]).unwrap_err(), GreError::ReservedBits);
        // Key announced, not there.
        assert_eq!(GrePacket::new_checked(&[0x20u8, 0, 8, 0, 1, 2][..]).unwrap_err(), GreError::Truncated);
        // A wrong checksum.
        let mut b = vec![0u8; 12];
        GreRepr { protocol: 0x86dd, checksum: true, key: None, sequence: None }.emit(&mut b);
        GreRepr::fill_checksum(&mut b);
        b[10] ^= 1;
        assert_eq!(GreRepr::parse(&GrePacket::new_checked(&b[..]).unwrap()).unwrap_err(), GreError::BadChecksum);
    }

    proptest! {
        #[test]
        fn emit_parse_roundtrip(protocol: u16, checksum: bool, key: Option<u32>, sequence: Option<u32>,
                                payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let r = GreRepr { protocol, checksum, key, sequence };
            let mut b = vec![0u8; r.buffer_len() + payload.len()];
            r.emit(&mut b);
            b[r.buffer_len()..].copy_from_slice(&payload);
            if checksum {
                GreRepr::fill_checksum(&mut b);
            }
            let p = GrePacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(GreRepr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload(), &payload[..]);
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = GrePacket::new_checked(&b[..]) {
                prop_assert!(p.header_len() <= b.len());
                let _ = GreRepr::parse(&p);
            }
        }
    }
}
