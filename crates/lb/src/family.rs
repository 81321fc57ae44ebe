//! IPv4 and IPv6 twins: the address type and flow hash each family's tables and nodes
//! use, so one generic implementation serves `lb4-*` and `lb6-*`.

use engine::hash::{flow_hash2, flow_hash6};
use std::fmt::Debug;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub trait Family: Copy + Default + Eq + Send + Sync + Debug + 'static {
    /// An address as the packet carries it.
    type Addr: Copy + Eq + Hash + Default + Debug + Send + Sync + AsRef<[u8]> + zerocopy::FromZeros + 'static;
    const NAME: &'static str;
    /// The flow hash of a 5-tuple (the same words `ip` and the tunnels hash).
    #[inline(always)]
    fn flow_hash(src: &Self::Addr, dst: &Self::Addr, sport: u16, dport: u16, proto: u8) -> u32 {
        Self::words_hash(&Self::words(src, dst, sport, dport, proto))
    }
    /// A 5-tuple as the whole words the flow hash reads: the addresses' words, then
    /// protocol and ports as one (`proto << 32 | sport << 16 | dport`). The session
    /// table keeps its keys so, so that a lookup compares them a word at a time, XORed
    /// and ORed into one test (docs/PERFORMANCE.md).
    type Words: Copy + Eq + Default + Debug + Send + Sync + zerocopy::FromZeros + 'static;
    fn words(src: &Self::Addr, dst: &Self::Addr, sport: u16, dport: u16, proto: u8) -> Self::Words;
    /// The 5-tuple back: (source, destination, source port, destination port, protocol).
    fn unwords(w: &Self::Words) -> (Self::Addr, Self::Addr, u16, u16, u8);
    /// The protocol of a key's words.
    fn words_proto(w: &Self::Words) -> u8;
    /// Whether two keys' words are equal: one branch on every bit (no early exit).
    fn words_eq(a: &Self::Words, b: &Self::Words) -> bool;
    fn words_hash(w: &Self::Words) -> u32;
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
    /// Source and destination, then protocol and ports.
    type Words = [u64; 2];
    #[inline(always)]
    fn words(src: &[u8; 4], dst: &[u8; 4], sport: u16, dport: u16, proto: u8) -> [u64; 2] {
        [(u32::from_be_bytes(*src) as u64) << 32 | u32::from_be_bytes(*dst) as u64, proto_ports(sport, dport, proto)]
    }
    fn unwords(w: &[u64; 2]) -> ([u8; 4], [u8; 4], u16, u16, u8) {
        let (sport, dport, proto) = unproto_ports(w[1]);
        (((w[0] >> 32) as u32).to_be_bytes(), (w[0] as u32).to_be_bytes(), sport, dport, proto)
    }
    #[inline(always)]
    fn words_proto(w: &[u64; 2]) -> u8 {
        (w[1] >> 32) as u8
    }
    #[inline(always)]
    fn words_eq(a: &[u64; 2], b: &[u64; 2]) -> bool {
        (a[0] ^ b[0]) | (a[1] ^ b[1]) == 0
    }
    #[inline(always)]
    fn words_hash(w: &[u64; 2]) -> u32 {
        flow_hash2(w[0], w[1])
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
    /// Source (two words), destination (two), then protocol and ports.
    type Words = [u64; 5];
    #[inline(always)]
    fn words(src: &[u8; 16], dst: &[u8; 16], sport: u16, dport: u16, proto: u8) -> [u64; 5] {
        let (s, d) = (u128::from_be_bytes(*src), u128::from_be_bytes(*dst));
        [(s >> 64) as u64, s as u64, (d >> 64) as u64, d as u64, proto_ports(sport, dport, proto)]
    }
    fn unwords(w: &[u64; 5]) -> ([u8; 16], [u8; 16], u16, u16, u8) {
        let (sport, dport, proto) = unproto_ports(w[4]);
        let addr = |hi: u64, lo: u64| ((hi as u128) << 64 | lo as u128).to_be_bytes();
        (addr(w[0], w[1]), addr(w[2], w[3]), sport, dport, proto)
    }
    #[inline(always)]
    fn words_proto(w: &[u64; 5]) -> u8 {
        (w[4] >> 32) as u8
    }
    #[inline(always)]
    fn words_eq(a: &[u64; 5], b: &[u64; 5]) -> bool {
        (a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) == 0
    }
    #[inline(always)]
    fn words_hash(w: &[u64; 5]) -> u32 {
        flow_hash6([w[0], w[1]], [w[2], w[3]], w[4])
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

/// Protocol and ports as one word, as the flow hash reads them.
#[inline(always)]
fn proto_ports(sport: u16, dport: u16, proto: u8) -> u64 {
    (proto as u64) << 32 | (sport as u64) << 16 | dport as u64
}

/// [`proto_ports`] undone: (source port, destination port, protocol).
fn unproto_ports(w: u64) -> (u16, u16, u8) {
    ((w >> 16) as u16, w as u16, (w >> 32) as u8)
}
