//! ARP for IPv4 over Ethernet (RFC 826). Other hardware/protocol pairs are refused.
//!
//! ```text
//! 0      2      4  5  6      8            14       18           24       28
//! +------+------+--+--+------+------------+--------+------------+--------+
//! | htype| ptype|hl|pl|  op  | sender MAC |sender IP| target MAC |target IP|
//! +------+------+--+--+------+------------+--------+------------+--------+
//! ```

use crate::ethernet::EthernetAddress;
use core::net::Ipv4Addr;

pub const PACKET_LEN: usize = 28;

mod field {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: usize = 8;
    pub const SPA: usize = 14;
    pub const THA: usize = 18;
    pub const TPA: usize = 24;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ArpError {
    #[error("ARP packet shorter than 28 bytes")]
    Truncated,
    #[error("ARP hardware type is not Ethernet (1) with 6-byte addresses")]
    UnsupportedHardware,
    #[error("ARP protocol type is not IPv4 (0x0800) with 4-byte addresses")]
    UnsupportedProtocol,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOperation {
    Request,
    Reply,
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            o => ArpOperation::Unknown(o),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(v: ArpOperation) -> u16 {
        match v {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(o) => o,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self, ArpError> {
        let b = buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(ArpError::Truncated);
        }
        if crate::be16(b, field::HTYPE) != 1 || b[field::HLEN] != 6 {
            return Err(ArpError::UnsupportedHardware);
        }
        if crate::be16(b, field::PTYPE) != 0x0800 || b[field::PLEN] != 4 {
            return Err(ArpError::UnsupportedProtocol);
        }
        Ok(ArpPacket { buffer })
    }
    pub fn operation(&self) -> ArpOperation {
        crate::be16(self.buffer.as_ref(), field::OPER).into()
    }
    pub fn sender_hw(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::SHA..])
    }
    pub fn sender_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(crate::be32(self.buffer.as_ref(), field::SPA))
    }
    pub fn target_hw(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::THA..])
    }
    pub fn target_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(crate::be32(self.buffer.as_ref(), field::TPA))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    pub operation: ArpOperation,
    pub sender_hw: EthernetAddress,
    pub sender_ip: Ipv4Addr,
    pub target_hw: EthernetAddress,
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<Self, ArpError> {
        Ok(ArpRepr {
            operation: p.operation(),
            sender_hw: p.sender_hw(),
            sender_ip: p.sender_ip(),
            target_hw: p.target_hw(),
            target_ip: p.target_ip(),
        })
    }
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }
    /// Write all 28 bytes. `buf` must be at least `PACKET_LEN` long.
    pub fn emit(&self, buf: &mut [u8]) {
        crate::put16(buf, field::HTYPE, 1);
        crate::put16(buf, field::PTYPE, 0x0800);
        buf[field::HLEN] = 6;
        buf[field::PLEN] = 4;
        crate::put16(buf, field::OPER, self.operation.into());
        buf[field::SHA..field::SHA + 6].copy_from_slice(&self.sender_hw.0);
        buf[field::SPA..field::SPA + 4].copy_from_slice(&self.sender_ip.octets());
        buf[field::THA..field::THA + 6].copy_from_slice(&self.target_hw.0);
        buf[field::TPA..field::TPA + 4].copy_from_slice(&self.target_ip.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(op in 0u16..4, sha: [u8; 6], spa: u32, tha: [u8; 6], tpa: u32) {
            let r = ArpRepr { operation: op.into(), sender_hw: EthernetAddress(sha), sender_ip: spa.into(),
                              target_hw: EthernetAddress(tha), target_ip: tpa.into() };
            let mut b = [0u8; PACKET_LEN];
            r.emit(&mut b);
            prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap(), r);
        }
    }

    #[test]
    fn refuses_other_types() {
        let mut b = [0u8; PACKET_LEN];
        ArpRepr {
            operation: ArpOperation::Request,
            sender_hw: EthernetAddress([2; 6]),
            sender_ip: Ipv4Addr::new(198, 18, 0, 1),
            target_hw: EthernetAddress([0; 6]),
            target_ip: Ipv4Addr::new(198, 18, 0, 2),
        }
        .emit(&mut b);
        assert!(ArpPacket::new_checked(&b[..27]).is_err());
        let mut x = b;
        x[1] = 6; // IEEE 802 hardware type
        assert_eq!(ArpPacket::new_checked(&x[..]).unwrap_err(), ArpError::UnsupportedHardware);
        let mut y = b;
        y[5] = 16;
        assert_eq!(ArpPacket::new_checked(&y[..]).unwrap_err(), ArpError::UnsupportedProtocol);
    }
}
