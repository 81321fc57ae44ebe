//! IPv4 and IPv6 twins: the address type and flow hash each family's tables and nodes
//! use, so one generic implementation serves `lb4-*` and `lb6-*`.

use engine::hash::{flow_hash2, flow_hash6};
use std::fmt::Debug;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub trait Family: Copy + Default + Eq + Send + Sync + Debug + 'static {
    /// An address as the packet carries it.
    type Addr: Copy + Eq + Hash + Default + Debug + Send + Sync + AsRef<[u8]> + 'static;
    const NAME: &'static str;
    /// The flow hash of a 5-tuple (the same words `ip` and the tunnels hash).
    fn flow_hash(src: &Self::Addr, dst: &Self::Addr, sport: u16, dport: u16, proto: u8) -> u32;
    fn to_ip(a: &Self::Addr) -> IpAddr;
    fn from_ip(a: IpAddr) -> Option<Self::Addr>;
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct V4;
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct V6;

impl Family for V4 {
    type Addr = [u8; 4];
    const NAME: &'static str = "ip4";
    #[inline(always)]
    fn flow_hash(src: &[u8; 4], dst: &[u8; 4], sport: u16, dport: u16, proto: u8) -> u32 {
        let addrs = (u32::from_be_bytes(*src) as u64) << 32 | u32::from_be_bytes(*dst) as u64;
        flow_hash2(addrs, (proto as u64) << 32 | (sport as u64) << 16 | dport as u64)
    }
    fn to_ip(a: &[u8; 4]) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(*a))
    }
    fn from_ip(a: IpAddr) -> Option<[u8; 4]> {
        match a {
            IpAddr::V4(a) => Some(a.octets()),
            IpAddr::V6(_) => None,
        }
    }
}

impl Family for V6 {
    type Addr = [u8; 16];
    const NAME: &'static str = "ip6";
    #[inline(always)]
    fn flow_hash(src: &[u8; 16], dst: &[u8; 16], sport: u16, dport: u16, proto: u8) -> u32 {
        let w = |a: &[u8; 16]| {
            let v = u128::from_be_bytes(*a);
            [(v >> 64) as u64, v as u64]
        };
        flow_hash6(w(src), w(dst), (proto as u64) << 32 | (sport as u64) << 16 | dport as u64)
    }
    fn to_ip(a: &[u8; 16]) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(*a))
    }
    fn from_ip(a: IpAddr) -> Option<[u8; 16]> {
        match a {
            IpAddr::V6(a) => Some(a.octets()),
            IpAddr::V4(_) => None,
        }
    }
}
