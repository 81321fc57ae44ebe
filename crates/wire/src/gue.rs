//! Generic UDP Encapsulation (draft-ietf-intarea-gue-09), as Linux's `fou` speaks it.
//!
//! Variant 0, after the UDP header:
//! ```text
//! |Ver|C|  Hlen   |  Proto/ctype  |        Flags                |P|
//! |            extension fields: Hlen 32-bit words ...            |
//! ```
//! `Ver` 0; `C` set: a control message whose type is `ctype`, else a data message whose
//! payload is IP protocol `proto` (4 IPv4, 41 IPv6, 47 GRE, …). `Hlen` counts the 32-bit
//! words of extension fields after the first word, so the header is 4 + 4·Hlen bytes.
//! Flags say which optional fields are present. The one flag defined here (and by Linux)
//! is `P`, the last bit: a 32-bit private-flags word follows. A receiver must not guess
//! the size of a field it does not know, so an unknown flag refuses the packet; the
//! fields the known flags announce must fit in Hlen, and any words past them are skipped.
//!
//! The one private flag Linux defines is remote checksum offload (the top bit): a word
//! after the private flags holds where the inner packet's partial checksum starts and
//! where its field is, both counted from the start of the GUE payload; the field holds
//! the pseudo-header sum, and the receiver completes it (draft-herbert-remotecsumoffload).
//!
//! Variant 1 has no GUE header at all: the UDP payload is an IPv4 or IPv6 packet, told
//! apart from variant 0 by its first two bits (01: the top of an IP version nibble 4 or 6).

use crate::ip::IpProtocol;

/// The first word of a variant 0 header.
pub const BASE_LEN: usize = 4;
/// The longest variant 0 header: the first word and 31 words of fields.
pub const MAX_HEADER_LEN: usize = BASE_LEN + 31 * 4;

/// Flags field bit `P`: a private-flags word is present.
pub const FLAG_PRIV: u16 = 0x0001;
/// Every flag this implementation knows the field size of.
pub const KNOWN_FLAGS: u16 = FLAG_PRIV;
/// Private flag: remote checksum offload; a word (start, field offset) follows the
/// private flags.
pub const PRIV_FLAG_REMCSUM: u32 = 0x8000_0000;

mod field {
    pub const VER_C_HLEN: usize = 0;
    pub const PROTO: usize = 1;
    pub const FLAGS: usize = 2;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GueError {
    #[error("GUE header shorter than its first word")]
    Truncated,
    #[error("GUE Hlen reaches past the end of the packet")]
    HeaderBeyondPacket,
    #[error("GUE version 2 or 3 (reserved)")]
    BadVersion,
    #[error("GUE variant 1 payload is neither IPv4 nor IPv6")]
    BadDirectPayload,
    #[error("GUE flags name fields of unknown size")]
    UnknownFlags,
    #[error("GUE flags announce more fields than Hlen holds")]
    FlagsBeyondHlen,
    #[error("GUE private flags set that this implementation does not know")]
    UnknownPrivateFlags,
}

/// Which GUE variant a UDP payload is, from its first two bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// A GUE header follows.
    Header,
    /// Direct IPv4 or IPv6, no header.
    Direct,
}

/// The variant of a UDP payload (None: empty or a reserved version).
pub fn variant(payload: &[u8]) -> Option<Variant> {
    match payload.first()? >> 6 {
        0 => Some(Variant::Header),
        1 => Some(Variant::Direct),
        _ => None,
    }
}

/// A view of a variant 0 GUE header and what follows it.
#[derive(Debug, Clone)]
pub struct GuePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GuePacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        GuePacket { buffer }
    }

    /// Checks that the buffer holds the whole header Hlen announces, version 0, and flags
    /// whose fields fit in it. Private flags are left to the caller (`priv_flags`).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, GueError> {
        let b = buffer.as_ref();
        if b.len() < BASE_LEN {
            return Err(GueError::Truncated);
        }
        let p = GuePacket { buffer };
        match p.version() {
            0 => {}
            1 => return Err(GueError::BadDirectPayload),
            _ => return Err(GueError::BadVersion),
        }
        if p.header_len() > p.buffer.as_ref().len() {
            return Err(GueError::HeaderBeyondPacket);
        }
        let flags = p.flags();
        if flags & !KNOWN_FLAGS != 0 {
            return Err(GueError::UnknownFlags);
        }
        if flags_fields_len(flags) > p.hlen() as usize * 4 {
            return Err(GueError::FlagsBeyondHlen);
        }
        Ok(p)
    }

    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_C_HLEN] >> 6
    }
    #[inline(always)]
    pub fn control(&self) -> bool {
        self.buffer.as_ref()[field::VER_C_HLEN] & 0x20 != 0
    }
    /// Words of fields after the first word.
    #[inline(always)]
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::VER_C_HLEN] & 0x1f
    }
    /// The whole header, in bytes.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        BASE_LEN + self.hlen() as usize * 4
    }
    /// The payload's IP protocol (data messages) or the control type (`control()`).
    #[inline(always)]
    pub fn proto_ctype(&self) -> u8 {
        self.buffer.as_ref()[field::PROTO]
    }
    #[inline(always)]
    pub fn flags(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::FLAGS)
    }
    /// The private-flags word (`P` set): the first field after the first word.
    pub fn priv_flags(&self) -> Option<u32> {
        (self.flags() & FLAG_PRIV != 0).then(|| crate::be32(self.buffer.as_ref(), BASE_LEN))
    }
    /// The remote checksum offload word (start, field offset from the payload's start),
    /// when the private flags have it and Hlen holds it.
    pub fn remote_checksum(&self) -> Option<(u16, u16)> {
        let b = self.buffer.as_ref();
        (self.priv_flags()? & PRIV_FLAG_REMCSUM != 0 && self.hlen() >= 2)
            .then(|| (crate::be16(b, BASE_LEN + 4), crate::be16(b, BASE_LEN + 6)))
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// Bytes of fields the flags announce (in the order the flags define them).
fn flags_fields_len(flags: u16) -> usize {
    if flags & FLAG_PRIV != 0 {
        4
    } else {
        0
    }
}

/// What a variant 0 header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GueRepr {
    pub control: bool,
    pub proto_ctype: u8,
    /// Words of fields (0 for a plain header).
    pub hlen: u8,
    pub flags: u16,
    /// The private-flags word, when `flags` has `P`.
    pub priv_flags: u32,
    /// Remote checksum offload (private flag [`PRIV_FLAG_REMCSUM`]): where the inner
    /// packet's partial checksum starts and where its field is.
    pub remote_checksum: Option<(u16, u16)>,
}

impl GueRepr {
    /// A data message header for an inner protocol, with no optional fields (as Linux
    /// sends it without remote checksum offload).
    pub fn data(proto: IpProtocol) -> GueRepr {
        GueRepr { control: false, proto_ctype: proto.into(), hlen: 0, flags: 0, priv_flags: 0, remote_checksum: None }
    }

    /// Parse a checked header. Of the private flags only remote checksum offload is
    /// known (its word must fit in Hlen); any other refuses the packet, since none can
    /// be ignored.
    pub fn parse<T: AsRef<[u8]>>(p: &GuePacket<T>) -> Result<GueRepr, GueError> {
        let priv_flags = p.priv_flags().unwrap_or(0);
        if priv_flags & !PRIV_FLAG_REMCSUM != 0 {
            return Err(GueError::UnknownPrivateFlags);
        }
        let remote_checksum = p.remote_checksum();
        if priv_flags & PRIV_FLAG_REMCSUM != 0 && remote_checksum.is_none() {
            return Err(GueError::FlagsBeyondHlen);
        }
        Ok(GueRepr { control: p.control(), proto_ctype: p.proto_ctype(), hlen: p.hlen(), flags: p.flags(), priv_flags, remote_checksum })
    }

    pub const fn buffer_len(&self) -> usize {
        BASE_LEN + self.hlen as usize * 4
    }

    /// Write the header into `b` (at least `buffer_len()` bytes); fields beyond the
    /// private flags are zeroed.
    pub fn emit(&self, b: &mut [u8]) {
        let len = self.buffer_len();
        b[..len].fill(0);
        b[field::VER_C_HLEN] = (self.control as u8) << 5 | (self.hlen & 0x1f);
        b[field::PROTO] = self.proto_ctype;
        crate::put16(b, field::FLAGS, self.flags);
        if self.flags & FLAG_PRIV != 0 && len >= BASE_LEN + 4 {
            crate::put32(b, BASE_LEN, self.priv_flags);
            if let (Some((start, field)), true) = (self.remote_checksum, len >= BASE_LEN + 8) {
                crate::put16(b, BASE_LEN + 4, start);
                crate::put16(b, BASE_LEN + 6, field);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn linux_ipip_header() {
        // What `ip link add … type ipip encap gue` puts after the UDP header.
        let b = [0x00, 0x04, 0x00, 0x00, 0x45];
        let p = GuePacket::new_checked(&b[..]).unwrap();
        let r = GueRepr::parse(&p).unwrap();
        assert_eq!(r, GueRepr::data(IpProtocol::IpIp));
        assert_eq!(p.payload(), &[0x45]);
        let mut out = [0xffu8; 4];
        r.emit(&mut out);
        assert_eq!(out, b[..4]);
    }

    #[test]
    fn refusals_are_typed() {
        assert_eq!(GuePacket::new_checked(&[0u8, 4, 0][..]).unwrap_err(), GueError::Truncated);
        // Hlen 2 (8 bytes of fields) with 4 present.
        assert_eq!(GuePacket::new_checked(&[0x02u8, 4, 0, 0, 1, 2, 3, 4][..]).unwrap_err(), GueError::HeaderBeyondPacket);
        assert_eq!(GuePacket::new_checked(&[0x80u8, 4, 0, 0][..]).unwrap_err(), GueError::BadVersion);
        assert_eq!(GuePacket::new_checked(&[0x45u8, 0, 0, 0][..]).unwrap_err(), GueError::BadDirectPayload);
        assert_eq!(GuePacket::new_checked(&[0x00u8, 4, 0x80, 0][..]).unwrap_err(), GueError::UnknownFlags);
        // P set but Hlen 0: the private word has no room.
        assert_eq!(GuePacket::new_checked(&[0x00u8, 4, 0, 1][..]).unwrap_err(), GueError::FlagsBeyondHlen);
        // P with a private flag this implementation does not know.
        let p = GuePacket::new_checked(&[0x01u8, 4, 0, 1, 0x40, 0, 0, 0][..]).unwrap();
        assert_eq!(GueRepr::parse(&p).unwrap_err(), GueError::UnknownPrivateFlags);
        // Remote checksum offload without room for its word.
        let p = GuePacket::new_checked(&[0x01u8, 4, 0, 1, 0x80, 0, 0, 0][..]).unwrap();
        assert_eq!(GueRepr::parse(&p).unwrap_err(), GueError::FlagsBeyondHlen);
        // As Linux sends it (`encap-remcsum`): the inner UDP checksum field at 26, the
        // sum from the UDP header at 20.
        let p = GuePacket::new_checked(&[0x02u8, 4, 0, 1, 0x80, 0, 0, 0, 0, 20, 0, 26, 0x45][..]).unwrap();
        let r = GueRepr::parse(&p).unwrap();
        assert_eq!((r.remote_checksum, p.payload()), (Some((20, 26)), &[0x45u8][..]));
        let mut out = [0xffu8; 12];
        r.emit(&mut out);
        assert_eq!(out, p.buffer[..12]);
        // P with zero private flags and an extra word: fine, the extra word skipped.
        let p = GuePacket::new_checked(&[0x02u8, 41, 0, 1, 0, 0, 0, 0, 9, 9, 9, 9, 0x60][..]).unwrap();
        assert_eq!(GueRepr::parse(&p).unwrap().proto_ctype, 41);
        assert_eq!(p.payload(), &[0x60]);
    }

    #[test]
    fn variant_from_the_first_bits() {
        assert_eq!(variant(&[0x00, 4, 0, 0]), Some(Variant::Header));
        assert_eq!(variant(&[0x20, 1, 0, 0]), Some(Variant::Header), "a control message");
        assert_eq!(variant(&[0x45]), Some(Variant::Direct));
        assert_eq!(variant(&[0x60]), Some(Variant::Direct));
        assert_eq!(variant(&[0x80]), None);
        assert_eq!(variant(&[]), None);
    }

    proptest! {
        #[test]
        fn emit_parse_roundtrip(control: bool, proto: u8, extra in 0u8..29, private: bool, rco: Option<(u16, u16)>) {
            let rco = rco.filter(|_| private);
            let hlen = extra + private as u8 + rco.is_some() as u8;
            let priv_flags = if rco.is_some() { PRIV_FLAG_REMCSUM } else { 0 };
            let r = GueRepr { control, proto_ctype: proto, hlen, flags: if private { FLAG_PRIV } else { 0 }, priv_flags, remote_checksum: rco };
            let mut b = vec![0u8; r.buffer_len() + 3];
            r.emit(&mut b);
            let p = GuePacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(GueRepr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload().len(), 3);
            prop_assert_eq!(variant(&b), Some(Variant::Header));
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..160)) {
            if let Ok(p) = GuePacket::new_checked(&b[..]) {
                prop_assert!(p.header_len() <= b.len());
                let _ = GueRepr::parse(&p);
            }
        }
    }
}
