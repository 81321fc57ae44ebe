//! IPv4 (RFC 791) with options walked safely.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |    DSCP   |ECN|          Total Length         |
//! |         Identification        |Flags|      Fragment Offset    |
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! |                       Source Address                          |
//! |                    Destination Address                        |
//! |                    Options                    |    Padding    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::checksum;
use crate::ip::IpProtocol;
use core::net::Ipv4Addr;

pub const HEADER_LEN: usize = 20;
pub const MAX_HEADER_LEN: usize = 60;

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// Why an IPv4 header was refused. Each maps to an `ip4-input` drop counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ipv4Error {
    #[error("buffer shorter than the IPv4 header or its total length")]
    Truncated,
    #[error("version field is not 4")]
    BadVersion,
    #[error("IHL below 5 words")]
    BadHeaderLength,
    #[error("total length smaller than the header length")]
    BadTotalLength,
    #[error("header checksum mismatch")]
    BadChecksum,
    #[error("malformed option (length beyond the header, or below 2)")]
    BadOption,
}

#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Checks version, IHL, and that the header and the total length fit the buffer.
    /// Bytes beyond the total length (Ethernet padding) are allowed. Does not verify the
    /// checksum (that is a separate, countable step) nor walk options.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Ipv4Error> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Ipv4Error::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Ipv4Error::BadVersion);
        }
        let hl = ((b[field::VER_IHL] & 0x0f) as usize) * 4;
        if hl < HEADER_LEN {
            return Err(Ipv4Error::BadHeaderLength);
        }
        let total = crate::be16(b, field::LENGTH) as usize;
        if total < hl {
            return Err(Ipv4Error::BadTotalLength);
        }
        if hl > b.len() || total > b.len() {
            return Err(Ipv4Error::Truncated);
        }
        Ok(Ipv4Packet { buffer })
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize) * 4
    }
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 3
    }
    #[inline(always)]
    pub fn total_len(&self) -> usize {
        crate::be16(self.buffer.as_ref(), field::LENGTH) as usize
    }
    pub fn ident(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::IDENT)
    }
    #[inline(always)]
    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[field::FLG_OFF] & 0x40 != 0
    }
    #[inline(always)]
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[field::FLG_OFF] & 0x20 != 0
    }
    /// Fragment offset in bytes.
    #[inline(always)]
    pub fn frag_offset(&self) -> u16 {
        (crate::be16(self.buffer.as_ref(), field::FLG_OFF) & 0x1fff) << 3
    }
    /// True for any fragment (first, middle or last).
    #[inline(always)]
    pub fn is_fragment(&self) -> bool {
        crate::be16(self.buffer.as_ref(), field::FLG_OFF) & 0x3fff != 0
    }
    #[inline(always)]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    #[inline(always)]
    pub fn protocol(&self) -> IpProtocol {
        self.buffer.as_ref()[field::PROTOCOL].into()
    }
    pub fn checksum(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    #[inline(always)]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(crate::be32(self.buffer.as_ref(), field::SRC))
    }
    #[inline(always)]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(crate::be32(self.buffer.as_ref(), field::DST))
    }
    #[inline(always)]
    pub fn dst_u32(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), field::DST)
    }
    /// Valid when the header (including options) sums to all ones.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(&self.buffer.as_ref()[..self.header_len()])
    }
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }
    pub fn options(&self) -> Ipv4Options<'_> {
        Ipv4Options { data: &self.buffer.as_ref()[HEADER_LEN..self.header_len()] }
    }
    /// Walk every option; refuses lengths that run past the header.
    pub fn check_options(&self) -> Result<(), Ipv4Error> {
        for o in self.options() {
            o?;
        }
        Ok(())
    }
    /// The payload up to the total length (padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    pub fn set_version_ihl(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 3);
    }
    pub fn set_total_len(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::LENGTH, v)
    }
    pub fn set_ident(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::IDENT, v)
    }
    /// Set DF/MF and the offset (bytes, multiple of 8).
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = ((dont_frag as u16) << 14) | ((more_frags as u16) << 13) | ((offset >> 3) & 0x1fff);
        crate::put16(self.buffer.as_mut(), field::FLG_OFF, v)
    }
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v
    }
    pub fn set_protocol(&mut self, p: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = p.into()
    }
    pub fn set_checksum(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::CHECKSUM, v)
    }
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC..field::SRC + 4].copy_from_slice(&a.octets())
    }
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST..field::DST + 4].copy_from_slice(&a.octets())
    }
    /// Recompute the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(c);
    }
    /// Decrement the TTL and patch the checksum incrementally, the forwarding fast path.
    /// The caller has checked TTL > 1. With the word (TTL, protocol) one 0x0100 lower,
    /// RFC 1624 eqn. 3 comes to adding 0x0100 to the field with the end-around carry,
    /// a carry into bit 16 (or a sum of exactly 0xffff) adding one: eqn. 3 to the bit
    /// (tested below against it for every field and TTL), at a third of its cost.
    #[inline(always)]
    pub fn decrement_ttl(&mut self) {
        let b = self.buffer.as_mut();
        b[field::TTL] = b[field::TTL].wrapping_sub(1);
        let s = crate::be16(b, field::CHECKSUM) as u32 + 0x0100;
        crate::put16(b, field::CHECKSUM, (s + (s >= 0xffff) as u32) as u16);
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), self.total_len());
        &mut self.buffer.as_mut()[h..t]
    }
}

/// One option from the options area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Option<'a> {
    /// The full type octet (copied flag, class, number).
    pub kind: u8,
    pub data: &'a [u8],
}

/// Iterator over IPv4 options; yields an error once and stops on a malformed length.
pub struct Ipv4Options<'a> {
    data: &'a [u8],
}

impl<'a> Iterator for Ipv4Options<'a> {
    type Item = Result<Ipv4Option<'a>, Ipv4Error>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (&kind, rest) = self.data.split_first()?;
            match kind {
                0 => {
                    // End of option list: the rest is padding.
                    self.data = &[];
                    return None;
                }
                1 => {
                    self.data = rest;
                    continue;
                }
                _ => {
                    let Some(&len) = rest.first() else {
                        self.data = &[];
                        return Some(Err(Ipv4Error::BadOption));
                    };
                    let len = len as usize;
                    if len < 2 || len > self.data.len() {
                        self.data = &[];
                        return Some(Err(Ipv4Error::BadOption));
                    }
                    let opt = Ipv4Option { kind, data: &self.data[2..len] };
                    self.data = &self.data[len..];
                    return Some(Ok(opt));
                }
            }
        }
    }
}

/// A parsed IPv4 header without options (vecgate emits none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: IpProtocol,
    pub payload_len: usize,
    pub ttl: u8,
    pub dscp: u8,
    pub ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Parse a whole, unfragmented-or-not header: checksum verified, options walked.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self, Ipv4Error> {
        if !p.verify_checksum() {
            return Err(Ipv4Error::BadChecksum);
        }
        p.check_options()?;
        Ok(Ipv4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len(),
            ttl: p.ttl(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Emit the 20-byte header with a valid checksum. The buffer must hold `HEADER_LEN`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) {
        p.set_version_ihl(HEADER_LEN);
        p.set_dscp_ecn(self.dscp, self.ecn);
        p.set_total_len((HEADER_LEN + self.payload_len) as u16);
        p.set_ident(self.ident);
        p.set_frag(self.dont_frag, false, 0);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src);
        p.set_dst_addr(self.dst);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> [u8; 24] {
        let mut b = [0u8; 24];
        let r = Ipv4Repr {
            src: Ipv4Addr::new(198, 18, 0, 1),
            dst: Ipv4Addr::new(198, 19, 0, 1),
            protocol: IpProtocol::Udp,
            payload_len: 4,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 7,
            dont_frag: true,
        };
        r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
        b
    }

    #[test]
    fn malformed_headers_are_typed() {
        let good = sample();
        assert_eq!(Ipv4Packet::new_checked(&good[..19]).unwrap_err(), Ipv4Error::Truncated);
        let mut v = good;
        v[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&v[..]).unwrap_err(), Ipv4Error::BadVersion);
        let mut ihl = good;
        ihl[0] = 0x44;
        assert_eq!(Ipv4Packet::new_checked(&ihl[..]).unwrap_err(), Ipv4Error::BadHeaderLength);
        let mut tl = good;
        tl[3] = 10;
        assert_eq!(Ipv4Packet::new_checked(&tl[..]).unwrap_err(), Ipv4Error::BadTotalLength);
        let mut long = good;
        long[3] = 100;
        assert_eq!(Ipv4Packet::new_checked(&long[..]).unwrap_err(), Ipv4Error::Truncated);
        let mut cs = good;
        cs[8] = 3;
        assert_eq!(Ipv4Repr::parse(&Ipv4Packet::new_checked(&cs[..]).unwrap()).unwrap_err(), Ipv4Error::BadChecksum);
    }

    #[test]
    fn options_are_walked_safely() {
        // IHL 7: NOP, a record-route option claiming 9 bytes but only 7 remain.
        let mut b = [0u8; 28];
        b[..20].copy_from_slice(&sample()[..20]);
        b[0] = 0x47;
        b[3] = 28;
        b[20] = 1;
        b[21] = 7;
        b[22] = 9;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert_eq!(p.check_options(), Err(Ipv4Error::BadOption));
        // A well-formed one: NOP, RR of length 7 (3 + one address).
        b[22] = 7;
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        let opts: Vec<_> = p.options().collect();
        assert_eq!(opts.len(), 1);
        assert_eq!(opts[0].unwrap().kind, 7);
        assert!(Ipv4Repr::parse(&p).is_ok());
    }

    /// The TTL decrement's checksum patch equals RFC 1624 eqn. 3 for every checksum
    /// field and every TTL it may meet (2..=255), whatever the protocol byte.
    #[test]
    fn ttl_decrement_is_rfc1624_exactly() {
        let mut b = sample();
        for proto in [0u8, 1, 17, 0xff] {
            for ttl in 2..=255u8 {
                for field in 0..=0xffffu16 {
                    b[8] = ttl;
                    b[9] = proto;
                    b[10..12].copy_from_slice(&field.to_be_bytes());
                    Ipv4Packet::new_unchecked(&mut b[..]).decrement_ttl();
                    let old = u16::from_be_bytes([ttl, proto]);
                    let want = checksum::update16(field, old, old - 0x0100);
                    assert_eq!((b[8], u16::from_be_bytes([b[10], b[11]])), (ttl - 1, want), "field {field:#06x} ttl {ttl}");
                }
            }
        }
    }

    #[test]
    fn ttl_decrement_keeps_checksum_valid() {
        let mut b = sample();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        for _ in 0..63 {
            p.decrement_ttl();
            assert!(p.verify_checksum());
        }
        assert_eq!(p.ttl(), 1);
    }

    proptest! {
        #[test]
        fn roundtrip(src: u32, dst: u32, proto: u8, len in 0usize..1480, ttl: u8, dscp in 0u8..64, ecn in 0u8..4, ident: u16, df: bool) {
            let r = Ipv4Repr { src: src.into(), dst: dst.into(), protocol: proto.into(), payload_len: len, ttl, dscp, ecn, ident, dont_frag: df };
            let mut b = vec![0u8; HEADER_LEN + len];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
            let p = Ipv4Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Ipv4Packet::new_checked(&data[..]) {
                let _ = Ipv4Repr::parse(&p);
                let _ = p.payload();
                let _ = p.options().count();
            }
        }
    }
}
