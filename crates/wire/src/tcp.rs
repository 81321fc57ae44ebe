//! TCP header (RFC 9293): ports and flags for flow hashing and ACLs, options for MSS
//! clamping. vecgate does not terminate TCP.
//!
//! ```text
//! | Src Port | Dst Port | Sequence | Acknowledgment |Off|Rsv|Flags| Window | Checksum | Urgent | options
//! ```

use crate::checksum;
use crate::ip::IpProtocol;
use core::net::{Ipv4Addr, Ipv6Addr};

pub const HEADER_LEN: usize = 20;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const OFF_FLAGS: usize = 12;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TcpError {
    #[error("TCP segment shorter than its header")]
    Truncated,
    #[error("TCP data offset below 5 words")]
    BadDataOffset,
    #[error("malformed TCP option")]
    BadOption,
    #[error("TCP checksum mismatch")]
    BadChecksum,
}

/// The nine flag bits (NS through FIN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    pub const FIN: u16 = 0x001;
    pub const SYN: u16 = 0x002;
    pub const RST: u16 = 0x004;
    pub const PSH: u16 = 0x008;
    pub const ACK: u16 = 0x010;
    pub const URG: u16 = 0x020;
    pub const ECE: u16 = 0x040;
    pub const CWR: u16 = 0x080;
    pub const NS: u16 = 0x100;
    pub fn has(self, f: u16) -> bool {
        self.0 & f != 0
    }
}

/// The header length (data offset × 4) of the TCP header starting at `at` in `p`, read
/// without building a view: for callers that only need where a segment's payload begins
/// (GSO segment sizes, vnet headers). `None` if the byte is outside `p`.
pub fn header_len_at(p: &[u8], at: usize) -> Option<usize> {
    p.get(at + field::OFF_FLAGS).map(|b| (*b as usize >> 4) * 4)
}

#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, TcpError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(TcpError::Truncated);
        }
        let off = (b[field::OFF_FLAGS] >> 4) as usize * 4;
        if off < HEADER_LEN {
            return Err(TcpError::BadDataOffset);
        }
        if off > b.len() {
            return Err(TcpError::Truncated);
        }
        Ok(TcpPacket { buffer })
    }
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::DST_PORT)
    }
    pub fn seq(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), field::SEQ)
    }
    pub fn ack(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), field::ACK)
    }
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::OFF_FLAGS] >> 4) as usize * 4
    }
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(crate::be16(self.buffer.as_ref(), field::OFF_FLAGS) & 0x01ff)
    }
    pub fn window(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::WINDOW)
    }
    pub fn checksum(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    pub fn urgent(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::URGENT)
    }
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// The MSS option's value, if present; errors on a malformed option list.
    pub fn mss(&self) -> Result<Option<u16>, TcpError> {
        let mut o = self.options();
        let mut mss = None;
        while let Some((&kind, rest)) = o.split_first() {
            match kind {
                0 => break,
                1 => o = rest,
                _ => {
                    let len = *rest.first().ok_or(TcpError::BadOption)? as usize;
                    if len < 2 || len > o.len() {
                        return Err(TcpError::BadOption);
                    }
                    if kind == 2 {
                        if len != 4 {
                            return Err(TcpError::BadOption);
                        }
                        mss = Some(u16::from_be_bytes([o[2], o[3]]));
                    }
                    o = &o[len..];
                }
            }
        }
        Ok(mss)
    }
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let mut c = checksum::pseudo_header_v4(src, dst, IpProtocol::Tcp.into(), b.len() as u16);
        c.add_bytes(b);
        c.fold() == 0xffff
    }
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let mut c = checksum::pseudo_header_v6(src, dst, IpProtocol::Tcp.into(), b.len() as u32);
        c.add_bytes(b);
        c.fold() == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    pub fn set_ports(&mut self, src: u16, dst: u16) {
        crate::put16(self.buffer.as_mut(), field::SRC_PORT, src);
        crate::put16(self.buffer.as_mut(), field::DST_PORT, dst);
    }
    pub fn set_seq_ack(&mut self, seq: u32, ack: u32) {
        crate::put32(self.buffer.as_mut(), field::SEQ, seq);
        crate::put32(self.buffer.as_mut(), field::ACK, ack);
    }
    pub fn set_header_len_flags(&mut self, header_len: usize, flags: TcpFlags) {
        let v = (((header_len / 4) as u16) << 12) | (flags.0 & 0x01ff);
        crate::put16(self.buffer.as_mut(), field::OFF_FLAGS, v);
    }
    pub fn set_window(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::WINDOW, v)
    }
    pub fn set_urgent(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::URGENT, v)
    }
    pub fn set_checksum(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::CHECKSUM, v)
    }
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let mut c = checksum::pseudo_header_v4(src, dst, IpProtocol::Tcp.into(), b.len() as u16);
        c.add_bytes(b);
        let v = c.finish();
        self.set_checksum(v);
    }
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let mut c = checksum::pseudo_header_v6(src, dst, IpProtocol::Tcp.into(), b.len() as u32);
        c.add_bytes(b);
        let v = c.finish();
        self.set_checksum(v);
    }
}

/// The header fields vecgate reads or writes; options other than MSS are not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    pub mss: Option<u16>,
}

impl TcpRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Result<Self, TcpError> {
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
            mss: p.mss()?,
        })
    }
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + if self.mss.is_some() { 4 } else { 0 }
    }
    /// Write the header (checksum zero; fill it once the payload is in place).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut TcpPacket<T>) {
        p.set_ports(self.src_port, self.dst_port);
        p.set_seq_ack(self.seq, self.ack);
        p.set_header_len_flags(self.buffer_len(), self.flags);
        p.set_window(self.window);
        p.set_urgent(0);
        p.set_checksum(0);
        if let Some(m) = self.mss {
            let b = p.buffer.as_mut();
            b[HEADER_LEN] = 2;
            b[HEADER_LEN + 1] = 4;
            crate::put16(b, HEADER_LEN + 2, m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(sp: u16, dp: u16, seq: u32, ack: u32, flags in 0u16..0x200, win: u16, mss: Option<u16>) {
            let r = TcpRepr { src_port: sp, dst_port: dp, seq, ack, flags: TcpFlags(flags), window: win, mss };
            let mut b = vec![0u8; r.buffer_len() + 5];
            let mut p = TcpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut p);
            p.fill_checksum_v4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 19, 0, 1));
            let p = TcpPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(TcpRepr::parse(&p).unwrap(), r);
            prop_assert!(p.verify_checksum_v4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 19, 0, 1)));
        }
    }

    #[test]
    fn malformed() {
        assert_eq!(TcpPacket::new_checked(&[0u8; 19][..]).unwrap_err(), TcpError::Truncated);
        let mut b = [0u8; 24];
        b[12] = 0x40;
        assert_eq!(TcpPacket::new_checked(&b[..]).unwrap_err(), TcpError::BadDataOffset);
        b[12] = 0x70;
        assert_eq!(TcpPacket::new_checked(&b[..]).unwrap_err(), TcpError::Truncated);
        b[12] = 0x60;
        b[20] = 2;
        b[21] = 9;
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.mss(), Err(TcpError::BadOption));
    }
}
