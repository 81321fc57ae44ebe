//! ICMP for IPv4 (RFC 792, RFC 1191 for the next-hop MTU).
//!
//! ```text
//! | Type | Code | Checksum | rest of header (4 bytes) | data ...
//! ```
//! Echo: rest = identifier, sequence. Destination unreachable: rest = unused(1),
//! length(1), next-hop MTU(2) (RFC 1191 for code 4). Time exceeded: unused(1), length(1),
//! unused(2). The length (RFC 4884) counts the original datagram in 32-bit words when
//! extensions follow it. Errors carry the offending IP header plus at least 8 bytes.
//!
//! [`Icmpv4Repr`] keeps every byte: a message whose fixed fields break the rules its
//! named variant encodes (an echo with a non-zero code, an unused byte that is set) parses
//! as [`Icmpv4Repr::Other`] with its whole rest-of-header word, so `emit` gives back the
//! bytes `parse` read.

use crate::checksum;

pub const HEADER_LEN: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Type {
    EchoReply,
    DstUnreachable,
    Redirect,
    EchoRequest,
    TimeExceeded,
    ParamProblem,
    Unknown(u8),
}

impl From<u8> for Icmpv4Type {
    fn from(v: u8) -> Self {
        match v {
            0 => Icmpv4Type::EchoReply,
            3 => Icmpv4Type::DstUnreachable,
            5 => Icmpv4Type::Redirect,
            8 => Icmpv4Type::EchoRequest,
            11 => Icmpv4Type::TimeExceeded,
            12 => Icmpv4Type::ParamProblem,
            o => Icmpv4Type::Unknown(o),
        }
    }
}

impl From<Icmpv4Type> for u8 {
    fn from(v: Icmpv4Type) -> u8 {
        match v {
            Icmpv4Type::EchoReply => 0,
            Icmpv4Type::DstUnreachable => 3,
            Icmpv4Type::Redirect => 5,
            Icmpv4Type::EchoRequest => 8,
            Icmpv4Type::TimeExceeded => 11,
            Icmpv4Type::ParamProblem => 12,
            Icmpv4Type::Unknown(o) => o,
        }
    }
}

impl Icmpv4Type {
    /// Error messages must never be answered with another error (RFC 1122 §3.2.2).
    pub fn is_error(self) -> bool {
        matches!(self, Icmpv4Type::DstUnreachable | Icmpv4Type::Redirect | Icmpv4Type::TimeExceeded | Icmpv4Type::ParamProblem)
    }
}

/// Destination-unreachable codes vecgate sends.
pub mod unreach {
    pub const NET: u8 = 0;
    pub const HOST: u8 = 1;
    pub const PROTOCOL: u8 = 2;
    pub const PORT: u8 = 3;
    pub const FRAG_NEEDED: u8 = 4;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Icmpv4Error {
    #[error("ICMP message shorter than 8 bytes")]
    Truncated,
    #[error("ICMP checksum mismatch")]
    BadChecksum,
}

#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, Icmpv4Error> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Icmpv4Error::Truncated);
        }
        Ok(Icmpv4Packet { buffer })
    }
    pub fn msg_type(&self) -> Icmpv4Type {
        self.buffer.as_ref()[0].into()
    }
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    pub fn checksum(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), 2)
    }
    pub fn echo_ident(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), 4)
    }
    pub fn echo_seq(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), 6)
    }
    pub fn next_hop_mtu(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), 6)
    }
    /// The RFC 4884 length of the original datagram, in 32-bit words (errors only).
    pub fn original_len_words(&self) -> u8 {
        self.buffer.as_ref()[5]
    }
    /// The whole rest-of-header word (bytes 4 to 7).
    pub fn rest(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), 4)
    }
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// ICMP checksums cover the whole message.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    pub fn set_msg_type(&mut self, t: Icmpv4Type) {
        self.buffer.as_mut()[0] = t.into()
    }
    pub fn set_code(&mut self, c: u8) {
        self.buffer.as_mut()[1] = c
    }
    pub fn set_checksum(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), 2, v)
    }
    pub fn set_rest(&mut self, hi: u16, lo: u16) {
        crate::put16(self.buffer.as_mut(), 4, hi);
        crate::put16(self.buffer.as_mut(), 6, lo);
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// A parsed ICMPv4 message; `data` borrows the packet. `length` is the RFC 4884
/// original-datagram length in 32-bit words (0: none given). `Other` is any other message,
/// or one of the named ones whose code (echo) or unused bytes are not zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
    EchoRequest { ident: u16, seq: u16, data: &'a [u8] },
    EchoReply { ident: u16, seq: u16, data: &'a [u8] },
    DstUnreachable { code: u8, length: u8, next_hop_mtu: u16, data: &'a [u8] },
    TimeExceeded { code: u8, length: u8, data: &'a [u8] },
    Other { msg_type: u8, code: u8, rest: u32, data: &'a [u8] },
}

impl<'a> Icmpv4Repr<'a> {
    pub fn parse(p: &Icmpv4Packet<&'a [u8]>) -> Result<Self, Icmpv4Error> {
        if !p.verify_checksum() {
            return Err(Icmpv4Error::BadChecksum);
        }
        let b: &'a [u8] = p.buffer;
        let data = &b[HEADER_LEN..];
        let (code, rest) = (p.code(), p.rest());
        // Bytes 4 and (time exceeded) 6-7 are unused; the named variants hold them as zero.
        let unused_clear = |mask: u32| rest & mask == 0;
        Ok(match p.msg_type() {
            Icmpv4Type::EchoRequest if code == 0 => Icmpv4Repr::EchoRequest { ident: p.echo_ident(), seq: p.echo_seq(), data },
            Icmpv4Type::EchoReply if code == 0 => Icmpv4Repr::EchoReply { ident: p.echo_ident(), seq: p.echo_seq(), data },
            Icmpv4Type::DstUnreachable if unused_clear(0xff00_0000) => {
                Icmpv4Repr::DstUnreachable { code, length: p.original_len_words(), next_hop_mtu: p.next_hop_mtu(), data }
            }
            Icmpv4Type::TimeExceeded if unused_clear(0xff00_ffff) => {
                Icmpv4Repr::TimeExceeded { code, length: p.original_len_words(), data }
            }
            t => Icmpv4Repr::Other { msg_type: t.into(), code, rest, data },
        })
    }
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Icmpv4Repr::EchoRequest { data, .. }
                | Icmpv4Repr::EchoReply { data, .. }
                | Icmpv4Repr::DstUnreachable { data, .. }
                | Icmpv4Repr::TimeExceeded { data, .. }
                | Icmpv4Repr::Other { data, .. } => data.len(),
            }
    }
    /// Emit header, data and checksum into `buf` (at least `buffer_len()` bytes).
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = Icmpv4Packet::new_unchecked(&mut buf[..self.buffer_len()]);
        let (t, code, hi, lo, data) = match *self {
            Icmpv4Repr::EchoRequest { ident, seq, data } => (Icmpv4Type::EchoRequest, 0, ident, seq, data),
            Icmpv4Repr::EchoReply { ident, seq, data } => (Icmpv4Type::EchoReply, 0, ident, seq, data),
            Icmpv4Repr::DstUnreachable { code, length, next_hop_mtu, data } => {
                (Icmpv4Type::DstUnreachable, code, length as u16, next_hop_mtu, data)
            }
            Icmpv4Repr::TimeExceeded { code, length, data } => (Icmpv4Type::TimeExceeded, code, length as u16, 0, data),
            Icmpv4Repr::Other { msg_type, code, rest, data } => (msg_type.into(), code, (rest >> 16) as u16, rest as u16, data),
        };
        p.set_msg_type(t);
        p.set_code(code);
        p.set_rest(hi, lo);
        p.data_mut().copy_from_slice(data);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn echo_roundtrip(ident: u16, seq: u16, data in proptest::collection::vec(any::<u8>(), 0..64), req: bool) {
            let r = if req { Icmpv4Repr::EchoRequest { ident, seq, data: &data } } else { Icmpv4Repr::EchoReply { ident, seq, data: &data } };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Icmpv4Repr::parse(&p).unwrap(), r);
        }

        #[test]
        fn unreachable_roundtrip(code in 0u8..16, length: u8, mtu: u16, data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let r = Icmpv4Repr::DstUnreachable { code, length, next_hop_mtu: mtu, data: &data };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Icmpv4Repr::parse(&p).unwrap(), r);
        }
    }

    /// Any 8-byte header with a valid checksum: emit gives back exactly the bytes read.
    #[test]
    fn every_header_roundtrips() {
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&(any::<[u8; 8]>(), proptest::collection::vec(any::<u8>(), 0..16)), |(head, data)| {
                let mut b = [&head[..], &data[..]].concat();
                Icmpv4Packet::new_unchecked(&mut b[..]).fill_checksum();
                let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&b[..]).unwrap()).unwrap();
                let mut out = vec![0u8; r.buffer_len()];
                r.emit(&mut out);
                prop_assert_eq!(out, b);
                Ok(())
            })
            .unwrap();
    }

    /// The first campaign's reproducers (fuzz target `icmpv4`): an echo request with
    /// code 1, an echo reply with code 255, a time exceeded with bytes 6-7 set, a
    /// destination unreachable and a time exceeded with an RFC 4884 length.
    #[test]
    fn campaign_reproducers_keep_every_byte() {
        let cases: [(&str, fn(&Icmpv4Repr) -> bool); 5] = [
            ("0801f7fc00010001", |r| matches!(r, Icmpv4Repr::Other { msg_type: 8, code: 1, rest: 0x0001_0001, .. })),
            ("00ffff0000ffff00", |r| matches!(r, Icmpv4Repr::Other { msg_type: 0, code: 0xff, rest: 0x00ff_ff00, .. })),
            ("0b00f4fe00000001", |r| matches!(r, Icmpv4Repr::Other { msg_type: 11, code: 0, rest: 1, .. })),
            ("0304f71e000105dc", |r| matches!(r, Icmpv4Repr::DstUnreachable { code: 4, length: 1, next_hop_mtu: 1500, .. })),
            ("0b00f4df00200000", |r| matches!(r, Icmpv4Repr::TimeExceeded { code: 0, length: 0x20, .. })),
        ];
        for (hex, expect) in cases {
            let b: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
            let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&b[..]).unwrap()).unwrap();
            assert!(expect(&r), "{hex}: {r:?}");
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut out);
            assert_eq!(out, b, "{hex}");
            crate::fuzz::icmpv4(&b);
        }
    }

    #[test]
    fn bad_checksum_and_truncation() {
        let r = Icmpv4Repr::EchoRequest { ident: 1, seq: 2, data: b"abcd" };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        b[9] ^= 0x40;
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p).unwrap_err(), Icmpv4Error::BadChecksum);
        assert_eq!(Icmpv4Packet::new_checked(&b[..7]).unwrap_err(), Icmpv4Error::Truncated);
    }
}
