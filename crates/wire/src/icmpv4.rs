//! ICMP for IPv4 (RFC 792, RFC 1191 for the next-hop MTU).
//!
//! ```text
//! | Type | Code | Checksum | rest of header (4 bytes) | data ...
//! ```
//! Echo: rest = identifier, sequence. Destination unreachable code 4: rest = unused(2),
//! next-hop MTU(2). Errors carry the offending IP header plus at least 8 bytes.

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

/// A parsed ICMPv4 message; `data` borrows the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
    EchoRequest { ident: u16, seq: u16, data: &'a [u8] },
    EchoReply { ident: u16, seq: u16, data: &'a [u8] },
    DstUnreachable { code: u8, next_hop_mtu: u16, data: &'a [u8] },
    TimeExceeded { code: u8, data: &'a [u8] },
    Other { msg_type: u8, code: u8, rest: u32, data: &'a [u8] },
}

impl<'a> Icmpv4Repr<'a> {
    pub fn parse(p: &Icmpv4Packet<&'a [u8]>) -> Result<Self, Icmpv4Error> {
        if !p.verify_checksum() {
            return Err(Icmpv4Error::BadChecksum);
        }
        let b: &'a [u8] = p.buffer;
        let data = &b[HEADER_LEN..];
        Ok(match p.msg_type() {
            Icmpv4Type::EchoRequest => Icmpv4Repr::EchoRequest { ident: p.echo_ident(), seq: p.echo_seq(), data },
            Icmpv4Type::EchoReply => Icmpv4Repr::EchoReply { ident: p.echo_ident(), seq: p.echo_seq(), data },
            Icmpv4Type::DstUnreachable => Icmpv4Repr::DstUnreachable { code: p.code(), next_hop_mtu: p.next_hop_mtu(), data },
            Icmpv4Type::TimeExceeded => Icmpv4Repr::TimeExceeded { code: p.code(), data },
            t => Icmpv4Repr::Other { msg_type: t.into(), code: p.code(), rest: crate::be32(b, 4), data },
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
            Icmpv4Repr::DstUnreachable { code, next_hop_mtu, data } => (Icmpv4Type::DstUnreachable, code, 0, next_hop_mtu, data),
            Icmpv4Repr::TimeExceeded { code, data } => (Icmpv4Type::TimeExceeded, code, 0, 0, data),
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
        fn unreachable_roundtrip(code in 0u8..16, mtu: u16, data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let r = Icmpv4Repr::DstUnreachable { code, next_hop_mtu: mtu, data: &data };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Icmpv4Repr::parse(&p).unwrap(), r);
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
