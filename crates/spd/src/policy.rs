//! Policies: a priority, selectors over the packet's 5-tuple and an action.
//!
//! Selectors name the *local* and *remote* side (RFC 4301 §4.4.1.1): on the outbound
//! path local is the source, on the inbound path local is the destination, so one
//! policy pair reads the same in both SPDs. Addresses are ranges (a prefix is a range);
//! ports are ranges; the protocol is one number or any.
//!
//! Order: the higher `priority` wins; among equal priorities the older policy (the
//! lower [`PolicyId`]) wins. [`Rule::rank`] folds both into one number, smaller first.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An SA as the SPD sees it: an opaque number the ESP nodes resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SaId(pub u32);

/// A policy's id, given in insertion order: the tie-breaker between equal priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PolicyId(pub u32);

/// An SPD's id (below [`SpdId::MAX`], so that an SPD and a direction fit a cache key's
/// 16 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpdId(pub u16);

impl SpdId {
    pub const MAX: u16 = 0x7fff;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Inbound,
    Outbound,
}

/// What a matching policy does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Send through (outbound) / require arrival through (inbound) this SA.
    Protect(SaId),
    Bypass,
    Discard,
}

/// The SPD's answer for one flow: a policy's action, or no policy at all (which RFC
/// 4301 §5.1 says to discard; the nodes count it apart from a discard policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    Act(Action),
    NoMatch,
}

/// An address type the SPD classifies on: IPv4 as `u32`, IPv6 as `u128` (host order).
pub trait SpdAddr: Copy + Eq + Ord + Hash + Default + fmt::Debug + Send + Sync + 'static {
    const BITS: u32;
    fn to_u128(self) -> u128;
    fn from_u128(v: u128) -> Self;
    fn from_ip(a: IpAddr) -> Option<Self>;
    fn to_ip(self) -> IpAddr;
    fn and(self, mask: Self) -> Self;
    /// The first `len` bits, the rest cleared.
    #[inline(always)]
    fn masked(self, len: u8) -> Self {
        if len == 0 {
            return Self::default();
        }
        let shift = 128 - len as u32;
        let bits = Self::BITS;
        // Work in the top `bits` bits of a u128 so one shift serves both widths.
        let v = self.to_u128() << (128 - bits);
        Self::from_u128(((v >> shift) << shift) >> (128 - bits))
    }
}

impl SpdAddr for u32 {
    const BITS: u32 = 32;
    #[inline(always)]
    fn to_u128(self) -> u128 {
        self as u128
    }
    #[inline(always)]
    fn from_u128(v: u128) -> Self {
        v as u32
    }
    fn from_ip(a: IpAddr) -> Option<Self> {
        match a {
            IpAddr::V4(v) => Some(v.into()),
            IpAddr::V6(_) => None,
        }
    }
    fn to_ip(self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self))
    }
    #[inline(always)]
    fn and(self, mask: u32) -> u32 {
        self & mask
    }
}

impl SpdAddr for u128 {
    const BITS: u32 = 128;
    #[inline(always)]
    fn to_u128(self) -> u128 {
        self
    }
    #[inline(always)]
    fn from_u128(v: u128) -> Self {
        v
    }
    fn from_ip(a: IpAddr) -> Option<Self> {
        match a {
            IpAddr::V6(v) => Some(v.into()),
            IpAddr::V4(_) => None,
        }
    }
    fn to_ip(self) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(self))
    }
    #[inline(always)]
    fn and(self, mask: u128) -> u128 {
        self & mask
    }
}

/// An inclusive range, `lo <= hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Range<T> {
    pub lo: T,
    pub hi: T,
}

impl<T: Ord + Copy> Range<T> {
    #[inline(always)]
    pub fn contains(&self, v: T) -> bool {
        self.lo <= v && v <= self.hi
    }
}

impl<A: SpdAddr> Range<A> {
    /// The longest prefix that covers the whole range (the bits `lo` and `hi` share).
    pub fn covering_len(&self) -> u8 {
        let diff = (self.lo.to_u128() ^ self.hi.to_u128()) << (128 - A::BITS);
        diff.leading_zeros().min(A::BITS) as u8
    }
    /// Whether the range is exactly its covering prefix (every address with those first
    /// bits, no other).
    pub fn is_prefix(&self) -> bool {
        let free = A::BITS - self.covering_len() as u32;
        let host = if free == 128 { u128::MAX } else { (1u128 << free) - 1 };
        self.lo.to_u128() & host == 0 && self.hi.to_u128() == self.lo.to_u128() | host
    }
    pub fn any() -> Self {
        Range { lo: A::default(), hi: A::from_u128(u128::MAX >> (128 - A::BITS)) }
    }
}

impl Range<u16> {
    pub const ANY: Range<u16> = Range { lo: 0, hi: u16::MAX };
    pub fn covering_len(&self) -> u8 {
        (self.lo ^ self.hi).leading_zeros() as u8
    }
    /// Whether the range is exactly its covering prefix of the port's bits.
    pub fn is_prefix(&self) -> bool {
        let host = u16::MAX.checked_shr(self.covering_len() as u32).unwrap_or(0);
        self.lo & host == 0 && self.hi == self.lo | host
    }
}

/// A packet's selector fields, as the SPD of one direction sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct FlowKey<A> {
    pub local: A,
    pub remote: A,
    pub proto: u8,
    pub local_port: u16,
    pub remote_port: u16,
}

/// One policy of one address family, ready to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule<A> {
    pub id: PolicyId,
    pub priority: u32,
    pub local: Range<A>,
    pub remote: Range<A>,
    /// `None`: any protocol.
    pub proto: Option<u8>,
    pub local_ports: Range<u16>,
    pub remote_ports: Range<u16>,
    pub action: Action,
}

impl<A: SpdAddr> Rule<A> {
    /// Smaller wins: the higher priority first, then the lower id.
    #[inline(always)]
    pub fn rank(&self) -> u64 {
        ((!self.priority as u64) << 32) | self.id.0 as u64
    }

    #[inline(always)]
    pub fn matches(&self, k: &FlowKey<A>) -> bool {
        self.local.contains(k.local)
            && self.remote.contains(k.remote)
            && self.proto.is_none_or(|p| p == k.proto)
            && self.local_ports.contains(k.local_port)
            && self.remote_ports.contains(k.remote_port)
    }
}

/// A validated policy: its SPD, direction and the rule for each family it covers (both
/// when neither address selector names a family).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub spd: SpdId,
    pub direction: Direction,
    pub v4: Option<Rule<u32>>,
    pub v6: Option<Rule<u128>>,
    /// The request it was built from, for `show ipsec spd`.
    pub spec: PolicySpec,
}

impl Policy {
    pub fn id(&self) -> PolicyId {
        self.v4.map(|r| r.id).or(self.v6.map(|r| r.id)).unwrap_or(PolicyId(0))
    }
    pub fn action(&self) -> Action {
        self.v4.map(|r| r.action).or(self.v6.map(|r| r.action)).unwrap_or(Action::Discard)
    }
}

/// A policy as configuration and the API give it: strings where people write them.
///
/// `local` / `remote`: `any`, a prefix (`198.18.0.0/24`) or a range
/// (`198.18.0.10-198.18.0.20`); `protocol`: `any`, `tcp`, `udp`, `icmp`, `icmpv6`,
/// `sctp` or a number; ports: `any`, `80` or `1000-2000`; `action`: `protect` (with
/// `sa`), `bypass` or `discard`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    pub spd: u16,
    pub direction: Direction,
    #[serde(default)]
    pub priority: u32,
    pub action: ActionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sa: Option<u32>,
    #[serde(default = "any")]
    pub local: String,
    #[serde(default = "any")]
    pub remote: String,
    #[serde(default = "any")]
    pub protocol: String,
    #[serde(default = "any")]
    pub local_ports: String,
    #[serde(default = "any")]
    pub remote_ports: String,
}

fn any() -> String {
    "any".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    Protect,
    Bypass,
    Discard,
}

/// A policy request that cannot be built: the field, what it holds, what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: got {got:?}, expected {expected}")]
pub struct PolicyError {
    pub field: &'static str,
    pub got: String,
    pub expected: &'static str,
}

fn err(field: &'static str, got: impl fmt::Display, expected: &'static str) -> PolicyError {
    PolicyError { field, got: got.to_string(), expected }
}

const ADDR_EXPECTED: &str =
    "`any`, a prefix like 198.18.0.0/24 or 2001:db8::/64 (no host bits), or a range like 198.18.0.1-198.18.0.9 (low <= high, one family)";
const PORT_EXPECTED: &str = "`any`, a port like 443, or a range like 1000-2000 (low <= high, at most 65535)";

/// An address selector as written: any, or a range of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddrSel {
    Any,
    Range(IpAddr, IpAddr),
}

fn parse_addr(field: &'static str, s: &str) -> Result<AddrSel, PolicyError> {
    let s = s.trim();
    if s == "any" {
        return Ok(AddrSel::Any);
    }
    let bad = || err(field, s, ADDR_EXPECTED);
    if let Some((a, len)) = s.split_once('/') {
        let a: IpAddr = a.parse().map_err(|_| bad())?;
        let len: u8 = len.parse().map_err(|_| bad())?;
        let p = ip::Prefix::new(a, len).map_err(|_| bad())?;
        return Ok(match p {
            ip::Prefix::V4(a, l) => {
                let lo = u32::from(a);
                let hi = lo | (u32::MAX.checked_shr(l as u32).unwrap_or(0));
                AddrSel::Range(lo.to_ip(), hi.to_ip())
            }
            ip::Prefix::V6(a, l) => {
                let lo = u128::from(a);
                let hi = lo | (u128::MAX.checked_shr(l as u32).unwrap_or(0));
                AddrSel::Range(lo.to_ip(), hi.to_ip())
            }
        });
    }
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let lo: IpAddr = lo.trim().parse().map_err(|_| bad())?;
    let hi: IpAddr = hi.trim().parse().map_err(|_| bad())?;
    if lo.is_ipv4() != hi.is_ipv4() || lo > hi {
        return Err(bad());
    }
    Ok(AddrSel::Range(lo, hi))
}

fn parse_ports(field: &'static str, s: &str) -> Result<Range<u16>, PolicyError> {
    let s = s.trim();
    if s == "any" {
        return Ok(Range::ANY);
    }
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let lo: u16 = lo.trim().parse().map_err(|_| err(field, s, PORT_EXPECTED))?;
    let hi: u16 = hi.trim().parse().map_err(|_| err(field, s, PORT_EXPECTED))?;
    if lo > hi {
        return Err(err(field, s, PORT_EXPECTED));
    }
    Ok(Range { lo, hi })
}

fn parse_proto(s: &str) -> Result<Option<u8>, PolicyError> {
    Ok(Some(match s.trim() {
        "any" => return Ok(None),
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "esp" => 50,
        "icmpv6" => 58,
        "sctp" => 132,
        n => n.parse().map_err(|_| err("protocol", s, "`any`, tcp, udp, icmp, icmpv6, sctp, esp or a number 0-255"))?,
    }))
}

fn range_of<A: SpdAddr>(sel: AddrSel) -> Option<Range<A>> {
    match sel {
        AddrSel::Any => Some(Range::any()),
        AddrSel::Range(lo, hi) => Some(Range { lo: A::from_ip(lo)?, hi: A::from_ip(hi)? }),
    }
}

impl PolicySpec {
    /// Check every field and build the policy under `id`.
    pub fn build(&self, id: PolicyId) -> Result<Policy, PolicyError> {
        if self.spd > SpdId::MAX {
            return Err(err("spd", self.spd, "an SPD id from 0 to 32767"));
        }
        let action = match (self.action, self.sa) {
            (ActionKind::Protect, Some(sa)) => Action::Protect(SaId(sa)),
            (ActionKind::Protect, None) => return Err(err("sa", "nothing", "an SA id with action `protect`")),
            (_, Some(sa)) => return Err(err("sa", sa, "no SA unless the action is `protect`")),
            (ActionKind::Bypass, None) => Action::Bypass,
            (ActionKind::Discard, None) => Action::Discard,
        };
        let local = parse_addr("local", &self.local)?;
        let remote = parse_addr("remote", &self.remote)?;
        let family = |s: AddrSel| match s {
            AddrSel::Any => None,
            AddrSel::Range(a, _) => Some(a.is_ipv4()),
        };
        let (v4, v6) = match (family(local), family(remote)) {
            (Some(a), Some(b)) if a != b => return Err(err("remote", &self.remote, "the same address family as `local`")),
            (Some(v4), _) | (None, Some(v4)) => (v4, !v4),
            (None, None) => (true, true),
        };
        let proto = parse_proto(&self.protocol)?;
        let local_ports = parse_ports("local_ports", &self.local_ports)?;
        let remote_ports = parse_ports("remote_ports", &self.remote_ports)?;
        let has_ports = local_ports != Range::ANY || remote_ports != Range::ANY;
        if has_ports && !matches!(proto, Some(6 | 17 | 132)) {
            return Err(err("protocol", &self.protocol, "tcp, udp or sctp when a port range is given"));
        }
        fn rule<A: SpdAddr>(
            id: PolicyId,
            s: &PolicySpec,
            l: AddrSel,
            r: AddrSel,
            proto: Option<u8>,
            ports: (Range<u16>, Range<u16>),
            action: Action,
        ) -> Rule<A> {
            let range = |sel| range_of::<A>(sel).unwrap_or(Range::any());
            Rule { id, priority: s.priority, local: range(l), remote: range(r), proto, local_ports: ports.0, remote_ports: ports.1, action }
        }
        let ports = (local_ports, remote_ports);
        let v4 = v4.then(|| rule::<u32>(id, self, local, remote, proto, ports, action));
        let v6 = v6.then(|| rule::<u128>(id, self, local, remote, proto, ports, action));
        Ok(Policy { spd: SpdId(self.spd), direction: self.direction, v4, v6, spec: self.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn spec() -> PolicySpec {
        PolicySpec {
            spd: 1,
            direction: Direction::Outbound,
            priority: 10,
            action: ActionKind::Bypass,
            sa: None,
            local: any(),
            remote: any(),
            protocol: any(),
            local_ports: any(),
            remote_ports: any(),
        }
    }

    #[test]
    fn prefix_and_range_selectors_cover_what_they_say() {
        let mut s = spec();
        s.local = "198.18.0.0/24".into();
        s.remote = "198.19.0.10-198.19.0.20".into();
        s.protocol = "udp".into();
        s.remote_ports = "1000-2000".into();
        let p = s.build(PolicyId(7)).unwrap();
        assert!(p.v6.is_none());
        let r = p.v4.unwrap();
        assert_eq!(r.local, Range { lo: 0xc612_0000, hi: 0xc612_00ff });
        assert_eq!(r.remote, Range { lo: 0xc613_000a, hi: 0xc613_0014 });
        assert_eq!(r.proto, Some(17));
        assert_eq!(r.remote_ports, Range { lo: 1000, hi: 2000 });
        let k = FlowKey { local: 0xc612_0005, remote: 0xc613_000f, proto: 17, local_port: 9, remote_port: 1500 };
        assert!(r.matches(&k));
        assert!(!r.matches(&FlowKey { remote_port: 2001, ..k }));
        assert!(!r.matches(&FlowKey { proto: 6, ..k }));
        assert!(!r.matches(&FlowKey { remote: 0xc613_0015, ..k }));
    }

    #[test]
    fn any_addresses_give_both_families() {
        let p = spec().build(PolicyId(1)).unwrap();
        assert_eq!(p.v4.unwrap().local, Range { lo: 0, hi: u32::MAX });
        assert_eq!(p.v6.unwrap().remote, Range { lo: 0, hi: u128::MAX });
        let mut s = spec();
        s.remote = "2001:db8::/32".into();
        let p = s.build(PolicyId(1)).unwrap();
        assert!(p.v4.is_none());
        assert_eq!(p.v6.unwrap().local, Range::any());
    }

    #[test]
    fn bad_fields_are_named_with_what_was_expected() {
        let cases: &[(fn(&mut PolicySpec), &str)] = &[
            (|s| s.local = "198.18.0.1/24".into(), "local"),
            (|s| s.remote = "198.18.0.9-198.18.0.1".into(), "remote"),
            (|s| s.remote = "198.18.0.1-2001:db8::1".into(), "remote"),
            (|s| s.local = "nonsense".into(), "local"),
            (|s| s.local_ports = "80".into(), "protocol"),
            (|s| s.protocol = "300".into(), "protocol"),
            (|s| s.remote_ports = "9-1".into(), "remote_ports"),
            (|s| s.action = ActionKind::Protect, "sa"),
            (|s| s.sa = Some(3), "sa"),
            (|s| s.spd = 40000, "spd"),
            (
                |s| {
                    s.local = "198.18.0.0/15".into();
                    s.remote = "2001:db8::/32".into()
                },
                "remote",
            ),
        ];
        for (edit, field) in cases {
            let mut s = spec();
            edit(&mut s);
            let e = s.build(PolicyId(1)).unwrap_err();
            assert_eq!(e.field, *field, "{e}");
            assert!(e.to_string().contains("expected"), "{e}");
        }
    }

    #[test]
    fn prefixes_are_told_from_other_ranges() {
        let a = |lo: u32, hi: u32| Range { lo, hi }.is_prefix();
        assert!(a(0, u32::MAX) && a(7, 7) && a(16, 19) && a(0xc613_0000, 0xc613_ffff));
        assert!(!a(16, 18) && !a(17, 20) && !a(10, 20) && !a(1, u32::MAX) && !a(0, u32::MAX - 1));
        assert!(Range::<u128>::any().is_prefix() && Range { lo: 4u128, hi: 7 }.is_prefix() && !Range { lo: 4u128, hi: 6 }.is_prefix());
        let p = |lo: u16, hi: u16| Range { lo, hi }.is_prefix();
        assert!(p(0, u16::MAX) && p(4500, 4500) && p(4096, 8191));
        assert!(!p(0, 2) && !p(1, 2) && !p(4096, 8190) && !p(1, u16::MAX));
    }

    #[test]
    fn rank_orders_priority_then_age() {
        let r = |priority, id| Rule::<u32> {
            id: PolicyId(id),
            priority,
            local: Range::any(),
            remote: Range::any(),
            proto: None,
            local_ports: Range::ANY,
            remote_ports: Range::ANY,
            action: Action::Bypass,
        };
        assert!(r(10, 5).rank() < r(9, 1).rank());
        assert!(r(10, 1).rank() < r(10, 2).rank());
        assert!(r(u32::MAX, u32::MAX).rank() < r(0, 0).rank());
    }

    #[test]
    fn masks_and_covering_lengths() {
        assert_eq!(0xc612_34ffu32.masked(24), 0xc612_3400);
        assert_eq!(0xc612_34ffu32.masked(0), 0);
        assert_eq!(0xc612_34ffu32.masked(32), 0xc612_34ff);
        assert_eq!(u128::MAX.masked(1), 1 << 127);
        assert_eq!(Range { lo: 0xc612_0000u32, hi: 0xc612_00ff }.covering_len(), 24);
        assert_eq!(Range { lo: 5u32, hi: 5 }.covering_len(), 32);
        assert_eq!(Range { lo: 1000u16, hi: 2000 }.covering_len(), 5);
        assert_eq!(Range::<u128>::any().covering_len(), 0);
    }
}
