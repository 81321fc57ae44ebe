//! IP prefixes (`198.18.0.0/15`, `2001:db8::/32`), parsed strictly: host bits set after
//! the length are an error, as in `ip route`.

use crate::lpm::LpmKey;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("no /LENGTH after the address (expected ADDRESS/LENGTH, e.g. 198.18.0.0/15 or 2001:db8::/32)")]
    Syntax,
    #[error("{0:?} is not an IPv4 or IPv6 address")]
    Address(String),
    #[error("length {0:?} is not a number")]
    LengthSyntax(String),
    #[error("prefix length {0} is out of range for the address family")]
    Length(u8),
    #[error("host bits are set after /{0} (did you mean {1}?)")]
    HostBits(u8, String),
}

/// An IPv4 or IPv6 prefix with a masked address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prefix {
    V4(Ipv4Addr, u8),
    V6(Ipv6Addr, u8),
}

impl Prefix {
    pub fn new(addr: IpAddr, len: u8) -> Result<Prefix, PrefixError> {
        match addr {
            IpAddr::V4(a) => {
                if len > 32 {
                    return Err(PrefixError::Length(len));
                }
                let m = u32::from(a).masked(len);
                if m != u32::from(a) {
                    return Err(PrefixError::HostBits(len, format!("{}/{}", Ipv4Addr::from(m), len)));
                }
                Ok(Prefix::V4(a, len))
            }
            IpAddr::V6(a) => {
                if len > 128 {
                    return Err(PrefixError::Length(len));
                }
                let m = u128::from(a).masked(len);
                if m != u128::from(a) {
                    return Err(PrefixError::HostBits(len, format!("{}/{}", Ipv6Addr::from(m), len)));
                }
                Ok(Prefix::V6(a, len))
            }
        }
    }

    /// The prefix of `len` bits that covers `addr` (host bits cleared).
    pub fn covering(addr: IpAddr, len: u8) -> Prefix {
        match addr {
            IpAddr::V4(a) => Prefix::V4(u32::from(a).masked(len.min(32)).into(), len.min(32)),
            IpAddr::V6(a) => Prefix::V6(u128::from(a).masked(len.min(128)).into(), len.min(128)),
        }
    }

    /// The host prefix of `addr`: the /32 or /128 that is `addr` alone (a local address's
    /// route, an address asked of the FIB as a prefix).
    pub fn host(addr: IpAddr) -> Prefix {
        match addr {
            IpAddr::V4(a) => Prefix::V4(a, 32),
            IpAddr::V6(a) => Prefix::V6(a, 128),
        }
    }

    /// The longest prefix of `addr`'s family: 32 for IPv4, 128 for IPv6.
    pub fn max_len(addr: IpAddr) -> u8 {
        if addr.is_ipv4() {
            32
        } else {
            128
        }
    }

    pub fn len(&self) -> u8 {
        match self {
            Prefix::V4(_, l) | Prefix::V6(_, l) => *l,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self, addr) {
            (Prefix::V4(p, l), IpAddr::V4(a)) => u32::from(a).masked(*l) == u32::from(*p),
            (Prefix::V6(p, l), IpAddr::V6(a)) => u128::from(a).masked(*l) == u128::from(*p),
            _ => false,
        }
    }

    /// The first address of the prefix.
    pub fn network(&self) -> IpAddr {
        match *self {
            Prefix::V4(a, _) => IpAddr::V4(a),
            Prefix::V6(a, _) => IpAddr::V6(a),
        }
    }

    /// Whether the two share an address: the shorter contains the longer's network.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        let (short, long) = if self.len() <= other.len() { (self, other) } else { (other, self) };
        short.contains(long.network())
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, l) = s.split_once('/').ok_or(PrefixError::Syntax)?;
        let addr: IpAddr = a.trim().parse().map_err(|_| PrefixError::Address(a.trim().into()))?;
        let len: u8 = l.trim().parse().map_err(|_| PrefixError::LengthSyntax(l.trim().into()))?;
        Prefix::new(addr, len)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Prefix::V4(a, l) => write!(f, "{a}/{l}"),
            Prefix::V6(a, l) => write!(f, "{a}/{l}"),
        }
    }
}

impl fmt::Debug for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An interface address with its subnet length, `198.18.0.1/24`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct IfAddr {
    pub addr: IpAddr,
    pub len: u8,
}

impl IfAddr {
    pub fn subnet(&self) -> Prefix {
        Prefix::covering(self.addr, self.len)
    }
}

impl FromStr for IfAddr {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, l) = s.split_once('/').ok_or(PrefixError::Syntax)?;
        let addr: IpAddr = a.trim().parse().map_err(|_| PrefixError::Address(a.trim().into()))?;
        let len: u8 = l.trim().parse().map_err(|_| PrefixError::LengthSyntax(l.trim().into()))?;
        if len > Prefix::max_len(addr) {
            return Err(PrefixError::Length(len));
        }
        Ok(IfAddr { addr, len })
    }
}

impl fmt::Display for IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_strictly() {
        assert_eq!("198.18.0.0/15".parse::<Prefix>().unwrap().to_string(), "198.18.0.0/15");
        assert_eq!("2001:db8::/32".parse::<Prefix>().unwrap().len(), 32);
        assert!(matches!("198.18.0.1/24".parse::<Prefix>(), Err(PrefixError::HostBits(24, s)) if s == "198.18.0.0/24"));
        assert_eq!("198.18.0.0/33".parse::<Prefix>(), Err(PrefixError::Length(33)));
        assert_eq!("198.18.0.0".parse::<Prefix>(), Err(PrefixError::Syntax));
        let p: Prefix = "198.18.0.0/15".parse().unwrap();
        assert!(p.contains("198.19.255.255".parse().unwrap()));
        assert!(!p.contains("198.20.0.0".parse().unwrap()));
        let a: IfAddr = "198.18.0.1/24".parse().unwrap();
        assert_eq!(a.subnet().to_string(), "198.18.0.0/24");
    }

    #[test]
    fn a_host_prefix_is_the_address_alone() {
        let v4: IpAddr = "198.18.0.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(Prefix::host(v4), "198.18.0.1/32".parse().unwrap());
        assert_eq!(Prefix::host(v6), "2001:db8::1/128".parse().unwrap());
        for a in [v4, v6] {
            let host = Prefix::host(a);
            assert_eq!((host.network(), host.contains(a)), (a, true), "{host}");
        }
        assert!(!Prefix::host(v4).contains("198.18.0.0".parse().unwrap()), "no neighbour");
        assert!(!Prefix::host(v6).contains("2001:db8::".parse().unwrap()), "no neighbour");
    }
}
