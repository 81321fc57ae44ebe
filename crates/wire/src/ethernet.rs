//! Ethernet II frames (IEEE 802.3 with an EtherType), without the FCS.
//!
//! ```text
//!  0                   6                  12      14
//! +-------------------+-------------------+-------+---------
//! | destination MAC   | source MAC        | type  | payload
//! +-------------------+-------------------+-------+---------
//! ```

use core::fmt;
use core::str::FromStr;

pub const HEADER_LEN: usize = 14;

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
}

/// A 48-bit IEEE MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    pub fn from_bytes(b: &[u8]) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&b[..6]);
        EthernetAddress(a)
    }
    pub const fn is_broadcast(&self) -> bool {
        matches!(self.0, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
    }
    /// Group bit set (includes broadcast).
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }
    /// The IPv6 multicast MAC of RFC 2464 §7: 33:33 and the address's last 32 bits.
    pub fn ipv6_multicast(addr: &core::net::Ipv6Addr) -> EthernetAddress {
        let o = addr.octets();
        EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a MAC address string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected six hex octets separated by ':' (e.g. 02:00:00:00:00:01)")]
pub struct ParseMacError;

impl FromStr for EthernetAddress {
    type Err = ParseMacError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.is_empty() || part.len() > 2 {
                return Err(ParseMacError);
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| ParseMacError)?;
            n += 1;
        }
        if n != 6 {
            return Err(ParseMacError);
        }
        Ok(EthernetAddress(out))
    }
}

/// EtherType values vecgate dispatches on; anything else is `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    Ipv4,
    Arp,
    /// IEEE 802.1Q customer tag.
    Vlan,
    /// IEEE 802.1ad service tag.
    QinQ,
    Ipv6,
    Unknown(u16),
}

impl From<u16> for EtherType {
    #[inline(always)]
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            0x88a8 => EtherType::QinQ,
            0x86dd => EtherType::Ipv6,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline(always)]
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::QinQ => 0x88a8,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Unknown(v) => v,
        }
    }
}

/// As tcpdump and VPP write it: the number in hex, and the name of one vecgate knows
/// (`0x86dd (IPv6)`; an unknown one `0x88cc`).
impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let name = match self {
            EtherType::Ipv4 => "IPv4",
            EtherType::Arp => "ARP",
            EtherType::Vlan => "802.1Q",
            EtherType::QinQ => "802.1ad",
            EtherType::Ipv6 => "IPv6",
            EtherType::Unknown(_) => return write!(f, "{:#06x}", u16::from(*self)),
        };
        write!(f, "{:#06x} ({name})", u16::from(*self))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EthernetError {
    #[error("frame shorter than the 14-byte Ethernet header")]
    Truncated,
}

/// A view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, EthernetError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(EthernetError::Truncated);
        }
        Ok(EthernetFrame { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    #[inline]
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::DST])
    }
    #[inline]
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::SRC])
    }
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        crate::be16(self.buffer.as_ref(), field::ETHERTYPE).into()
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    #[inline]
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0)
    }
    #[inline]
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0)
    }
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        crate::put16(self.buffer.as_mut(), field::ETHERTYPE, t.into())
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    pub src: EthernetAddress,
    pub dst: EthernetAddress,
    pub ethertype: EtherType,
}

impl EthernetRepr {
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Result<Self, EthernetError> {
        Ok(EthernetRepr { src: f.src_addr(), dst: f.dst_addr(), ethertype: f.ethertype() })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut EthernetFrame<T>) {
        f.set_src_addr(self.src);
        f.set_dst_addr(self.dst);
        f.set_ethertype(self.ethertype);
    }
    /// The 14 header bytes, for precomputed rewrites.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        self.emit(&mut EthernetFrame::new_unchecked(&mut b[..]));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ethertypes_print_as_tcpdump_writes_them() {
        let shown: Vec<String> =
            [0x0800u16, 0x0806, 0x86dd, 0x8100, 0x88a8, 0x88cc, 0x0042].map(|t| EtherType::from(t).to_string()).to_vec();
        assert_eq!(shown, ["0x0800 (IPv4)", "0x0806 (ARP)", "0x86dd (IPv6)", "0x8100 (802.1Q)", "0x88a8 (802.1ad)", "0x88cc", "0x0042"]);
    }

    #[test]
    fn truncated() {
        assert_eq!(EthernetFrame::new_checked(&[0u8; 13][..]).unwrap_err(), EthernetError::Truncated);
    }

    #[test]
    fn mac_parse_and_print() {
        let m: EthernetAddress = "02:00:5e:10:00:ff".parse().unwrap();
        assert_eq!(m.to_string(), "02:00:5e:10:00:ff");
        assert!("02:00:5e:10:00".parse::<EthernetAddress>().is_err());
        assert!("02:00:5e:10:00:ff:01".parse::<EthernetAddress>().is_err());
        assert!("zz:00:5e:10:00:ff".parse::<EthernetAddress>().is_err());
        assert!(EthernetAddress::BROADCAST.is_multicast());
    }

    proptest! {
        #[test]
        fn roundtrip(src in any::<[u8; 6]>(), dst in any::<[u8; 6]>(), et in any::<u16>()) {
            let r = EthernetRepr { src: EthernetAddress(src), dst: EthernetAddress(dst), ethertype: et.into() };
            let bytes = r.to_bytes();
            let parsed = EthernetRepr::parse(&EthernetFrame::new_checked(&bytes[..]).unwrap()).unwrap();
            prop_assert_eq!(parsed, r);
            prop_assert_eq!(u16::from(parsed.ethertype), et);
        }
    }
}
