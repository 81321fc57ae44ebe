//! ICMPv6 (RFC 4443) and the neighbour-discovery messages vecgate needs (RFC 4861).
//!
//! ```text
//! | Type | Code | Checksum | message body ...
//! ```
//! The checksum covers the IPv6 pseudo-header. Errors: body = 4 bytes (unused / MTU /
//! pointer) + as much of the invoking packet as fits in the minimum MTU.
//! Neighbour solicitation/advertisement: body = 4 bytes (R|S|O flags for NA) + target
//! address (16) + options (type, length in 8-byte units, value).

use crate::checksum;
use crate::ethernet::EthernetAddress;
use crate::ip::IpProtocol;
use core::net::Ipv6Addr;

pub const HEADER_LEN: usize = 8;
/// NS/NA: 4 header + 4 flags/reserved + 16 target.
pub const ND_LEN: usize = 24;
/// Source/target link-layer address option for Ethernet.
pub const LLADDR_OPT_LEN: usize = 8;

pub mod types {
    pub const DST_UNREACHABLE: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAM_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const ROUTER_SOLICIT: u8 = 133;
    pub const ROUTER_ADVERT: u8 = 134;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
    pub const REDIRECT: u8 = 137;
}

/// Destination-unreachable codes.
pub mod unreach {
    pub const NO_ROUTE: u8 = 0;
    pub const ADDRESS: u8 = 3;
    pub const PORT: u8 = 4;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Icmpv6Error {
    #[error("ICMPv6 message shorter than its type requires")]
    Truncated,
    #[error("ICMPv6 checksum mismatch")]
    BadChecksum,
    #[error("neighbour-discovery option of length 0 or past the message")]
    BadOption,
    #[error("neighbour-discovery message with a hop limit other than 255 or a nonzero code")]
    BadNdHeader,
    #[error("neighbour-discovery target is a multicast address")]
    MulticastTarget,
}

#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }
    /// Checks the 4-byte common header, the 8 bytes every type vecgate reads has, and
    /// for NS/NA the full fixed part.
    pub fn new_checked(buffer: T) -> Result<Self, Icmpv6Error> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Icmpv6Error::Truncated);
        }
        if matches!(b[0], types::NEIGHBOR_SOLICIT | types::NEIGHBOR_ADVERT) && b.len() < ND_LEN {
            return Err(Icmpv6Error::Truncated);
        }
        Ok(Icmpv6Packet { buffer })
    }
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
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
    /// The 32-bit field after the checksum (MTU for packet-too-big, pointer for
    /// parameter problem, flags for NA).
    pub fn word1(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), 4)
    }
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// NS/NA target address. Only valid after `new_checked` on an NS/NA.
    pub fn nd_target(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[8..24]);
        Ipv6Addr::from(a)
    }
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let mut c = checksum::pseudo_header_v6(src, dst, IpProtocol::Icmpv6.into(), b.len() as u32);
        c.add_bytes(b);
        c.fold() == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    pub fn set_header(&mut self, msg_type: u8, code: u8, word1: u32) {
        let b = self.buffer.as_mut();
        b[0] = msg_type;
        b[1] = code;
        crate::put16(b, 2, 0);
        crate::put32(b, 4, word1);
    }
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        let b = self.buffer.as_mut();
        crate::put16(b, 2, 0);
        let mut c = checksum::pseudo_header_v6(src, dst, IpProtocol::Icmpv6.into(), b.len() as u32);
        c.add_bytes(b);
        crate::put16(b, 2, c.finish());
    }
}

/// NA flags (RFC 4861 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NaFlags {
    pub router: bool,
    pub solicited: bool,
    pub override_: bool,
}

impl NaFlags {
    fn to_word(self) -> u32 {
        ((self.router as u32) << 31) | ((self.solicited as u32) << 30) | ((self.override_ as u32) << 29)
    }
    fn from_word(w: u32) -> Self {
        NaFlags { router: w & (1 << 31) != 0, solicited: w & (1 << 30) != 0, override_: w & (1 << 29) != 0 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv6Repr<'a> {
    EchoRequest { ident: u16, seq: u16, data: &'a [u8] },
    EchoReply { ident: u16, seq: u16, data: &'a [u8] },
    DstUnreachable { code: u8, data: &'a [u8] },
    PacketTooBig { mtu: u32, data: &'a [u8] },
    TimeExceeded { code: u8, data: &'a [u8] },
    ParamProblem { code: u8, pointer: u32, data: &'a [u8] },
    NeighborSolicit { target: Ipv6Addr, source_lladdr: Option<EthernetAddress> },
    NeighborAdvert { flags: NaFlags, target: Ipv6Addr, target_lladdr: Option<EthernetAddress> },
    Other { msg_type: u8, code: u8, word1: u32, data: &'a [u8] },
}

/// Find the link-layer address option of `want` type among ND options; validates all
/// option lengths (RFC 4861 §4.6: zero length is invalid).
fn nd_lladdr(opts: &[u8], want: u8) -> Result<Option<EthernetAddress>, Icmpv6Error> {
    let mut rest = opts;
    let mut found = None;
    while !rest.is_empty() {
        if rest.len() < 2 {
            return Err(Icmpv6Error::BadOption);
        }
        let len = rest[1] as usize * 8;
        if len == 0 || len > rest.len() {
            return Err(Icmpv6Error::BadOption);
        }
        if rest[0] == want && len >= LLADDR_OPT_LEN && found.is_none() {
            found = Some(EthernetAddress::from_bytes(&rest[2..8]));
        }
        rest = &rest[len..];
    }
    Ok(found)
}

impl<'a> Icmpv6Repr<'a> {
    /// Parse with the checksum verified against the pseudo-header. `hop_limit` is the
    /// IPv6 hop limit, which ND messages require to be 255 (RFC 4861 §7.1).
    pub fn parse(p: &Icmpv6Packet<&'a [u8]>, src: &Ipv6Addr, dst: &Ipv6Addr, hop_limit: u8) -> Result<Self, Icmpv6Error> {
        if !p.verify_checksum(src, dst) {
            return Err(Icmpv6Error::BadChecksum);
        }
        let b: &'a [u8] = p.buffer;
        let data = &b[HEADER_LEN..];
        Ok(match p.msg_type() {
            types::ECHO_REQUEST => Icmpv6Repr::EchoRequest { ident: p.echo_ident(), seq: p.echo_seq(), data },
            types::ECHO_REPLY => Icmpv6Repr::EchoReply { ident: p.echo_ident(), seq: p.echo_seq(), data },
            types::DST_UNREACHABLE => Icmpv6Repr::DstUnreachable { code: p.code(), data },
            types::PACKET_TOO_BIG => Icmpv6Repr::PacketTooBig { mtu: p.word1(), data },
            types::TIME_EXCEEDED => Icmpv6Repr::TimeExceeded { code: p.code(), data },
            types::PARAM_PROBLEM => Icmpv6Repr::ParamProblem { code: p.code(), pointer: p.word1(), data },
            t @ (types::NEIGHBOR_SOLICIT | types::NEIGHBOR_ADVERT) => {
                if hop_limit != 255 || p.code() != 0 {
                    return Err(Icmpv6Error::BadNdHeader);
                }
                let target = p.nd_target();
                if target.is_multicast() {
                    return Err(Icmpv6Error::MulticastTarget);
                }
                let opts = &b[ND_LEN..];
                if t == types::NEIGHBOR_SOLICIT {
                    Icmpv6Repr::NeighborSolicit { target, source_lladdr: nd_lladdr(opts, 1)? }
                } else {
                    Icmpv6Repr::NeighborAdvert { flags: NaFlags::from_word(p.word1()), target, target_lladdr: nd_lladdr(opts, 2)? }
                }
            }
            t => Icmpv6Repr::Other { msg_type: t, code: p.code(), word1: p.word1(), data },
        })
    }

    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv6Repr::EchoRequest { data, .. }
            | Icmpv6Repr::EchoReply { data, .. }
            | Icmpv6Repr::DstUnreachable { data, .. }
            | Icmpv6Repr::PacketTooBig { data, .. }
            | Icmpv6Repr::TimeExceeded { data, .. }
            | Icmpv6Repr::ParamProblem { data, .. }
            | Icmpv6Repr::Other { data, .. } => HEADER_LEN + data.len(),
            Icmpv6Repr::NeighborSolicit { source_lladdr: l, .. } | Icmpv6Repr::NeighborAdvert { target_lladdr: l, .. } => {
                ND_LEN + if l.is_some() { LLADDR_OPT_LEN } else { 0 }
            }
        }
    }

    /// Emit with the checksum over the pseudo-header of `src`/`dst`.
    pub fn emit(&self, buf: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) {
        let len = self.buffer_len();
        let buf = &mut buf[..len];
        let mut p = Icmpv6Packet::new_unchecked(&mut *buf);
        let echo = |i: u16, s: u16| ((i as u32) << 16) | s as u32;
        let (t, code, w, data): (u8, u8, u32, &[u8]) = match *self {
            Icmpv6Repr::EchoRequest { ident, seq, data } => (types::ECHO_REQUEST, 0, echo(ident, seq), data),
            Icmpv6Repr::EchoReply { ident, seq, data } => (types::ECHO_REPLY, 0, echo(ident, seq), data),
            Icmpv6Repr::DstUnreachable { code, data } => (types::DST_UNREACHABLE, code, 0, data),
            Icmpv6Repr::PacketTooBig { mtu, data } => (types::PACKET_TOO_BIG, 0, mtu, data),
            Icmpv6Repr::TimeExceeded { code, data } => (types::TIME_EXCEEDED, code, 0, data),
            Icmpv6Repr::ParamProblem { code, pointer, data } => (types::PARAM_PROBLEM, code, pointer, data),
            Icmpv6Repr::Other { msg_type, code, word1, data } => (msg_type, code, word1, data),
            Icmpv6Repr::NeighborSolicit { target, source_lladdr } => {
                p.set_header(types::NEIGHBOR_SOLICIT, 0, 0);
                emit_nd_tail(buf, &target, 1, source_lladdr);
                Icmpv6Packet::new_unchecked(&mut *buf).fill_checksum(src, dst);
                return;
            }
            Icmpv6Repr::NeighborAdvert { flags, target, target_lladdr } => {
                p.set_header(types::NEIGHBOR_ADVERT, 0, flags.to_word());
                emit_nd_tail(buf, &target, 2, target_lladdr);
                Icmpv6Packet::new_unchecked(&mut *buf).fill_checksum(src, dst);
                return;
            }
        };
        p.set_header(t, code, w);
        buf[HEADER_LEN..].copy_from_slice(data);
        Icmpv6Packet::new_unchecked(&mut *buf).fill_checksum(src, dst);
    }
}

fn emit_nd_tail(buf: &mut [u8], target: &Ipv6Addr, opt_type: u8, lladdr: Option<EthernetAddress>) {
    buf[8..24].copy_from_slice(&target.octets());
    if let Some(l) = lladdr {
        buf[24] = opt_type;
        buf[25] = 1;
        buf[26..32].copy_from_slice(&l.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addrs() -> (Ipv6Addr, Ipv6Addr) {
        ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap())
    }

    proptest! {
        #[test]
        fn echo_and_errors_roundtrip(kind in 0u8..6, a: u16, b: u16, data in proptest::collection::vec(any::<u8>(), 0..80)) {
            let (s, d) = addrs();
            let r = match kind {
                0 => Icmpv6Repr::EchoRequest { ident: a, seq: b, data: &data },
                1 => Icmpv6Repr::EchoReply { ident: a, seq: b, data: &data },
                2 => Icmpv6Repr::DstUnreachable { code: (a % 7) as u8, data: &data },
                3 => Icmpv6Repr::PacketTooBig { mtu: a as u32 + 1280, data: &data },
                4 => Icmpv6Repr::TimeExceeded { code: (a % 2) as u8, data: &data },
                _ => Icmpv6Repr::ParamProblem { code: (a % 3) as u8, pointer: b as u32, data: &data },
            };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf, &s, &d);
            let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Icmpv6Repr::parse(&p, &s, &d, 64).unwrap(), r);
        }

        #[test]
        fn nd_roundtrip(t: u128, mac: Option<[u8; 6]>, na: bool, r: bool, so: bool) {
            let (s, d) = addrs();
            let target = Ipv6Addr::from(t & !(0xffu128 << 120)); // never multicast
            let l = mac.map(EthernetAddress);
            let repr = if na { Icmpv6Repr::NeighborAdvert { flags: NaFlags { router: r, solicited: so, override_: true }, target, target_lladdr: l } }
                       else { Icmpv6Repr::NeighborSolicit { target, source_lladdr: l } };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf, &s, &d);
            let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Icmpv6Repr::parse(&p, &s, &d, 255).unwrap(), repr);
        }
    }

    #[test]
    fn nd_validation() {
        let (s, d) = addrs();
        let r = Icmpv6Repr::NeighborSolicit { target: d, source_lladdr: Some(EthernetAddress([2, 0, 0, 0, 0, 1])) };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf, &s, &d);
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, &s, &d, 64).unwrap_err(), Icmpv6Error::BadNdHeader);
        // Option length zero.
        buf[25] = 0;
        let mut p = Icmpv6Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum(&s, &d);
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, &s, &d, 255).unwrap_err(), Icmpv6Error::BadOption);
        assert_eq!(Icmpv6Packet::new_checked(&buf[..20]).unwrap_err(), Icmpv6Error::Truncated);
        // Wrong pseudo-header (another source) → bad checksum.
        let other: Ipv6Addr = "2001:db8::9".parse().unwrap();
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, &other, &d, 255).unwrap_err(), Icmpv6Error::BadChecksum);
    }
}
