//! SDF filters: the IPFilterRule text of a PDR's Flow Description (RFC 6733 §4.3.1, as
//! TS 29.244 §5.2.1A uses it), compiled once when a session is installed, and the
//! per-packet match.
//!
//! The rule is written for the downlink: `permit out <proto> from <remote> [ports] to
//! <ue> [ports]`. For an uplink PDR the same rule is matched with source and destination
//! swapped (§5.2.1A: "the UP function shall apply the flow description … in the reverse
//! direction"). `assigned` (and `any`) as the UE side matches the session's UE address,
//! which the lookup already found.

use core::net::IpAddr;

/// A compiled filter. Ports apply to TCP and UDP only (a filter naming ports does not match
/// other protocols, nor non-first fragments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdfFilter {
    /// `None`: any protocol (`ip`).
    pub proto: Option<u8>,
    /// The remote (data network) side: an address and prefix length in the packet's
    /// family, or any.
    pub remote: Option<(IpAddr, u8)>,
    pub remote_ports: Box<[(u16, u16)]>,
    pub ue_ports: Box<[(u16, u16)]>,
}

/// Why a Flow Description was refused: which word, and what was expected there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SdfError {
    #[error("expected `permit` (deny rules are not supported)")]
    Action,
    #[error("expected direction `out`")]
    Direction,
    #[error("expected a protocol number or `ip`")]
    Protocol,
    #[error("expected `from`")]
    From,
    #[error("expected `to`")]
    To,
    #[error("expected `any`, `assigned`, an address or address/length")]
    Address,
    #[error("expected ports like 80, 1000-2000 or 80,443")]
    Ports,
    #[error("unexpected words after the rule (options are not supported)")]
    Trailing,
}

/// The packet fields a filter reads, in the downlink orientation: `remote` is the data
/// network's end, `ue` the UE's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowView {
    pub proto: u8,
    pub remote: IpAddr,
    /// Ports when the packet is TCP/UDP with its ports readable.
    pub remote_port: Option<u16>,
    pub ue_port: Option<u16>,
}

impl SdfFilter {
    pub fn parse(text: &str) -> Result<SdfFilter, SdfError> {
        let mut w = text.split_ascii_whitespace().peekable();
        if w.next() != Some("permit") {
            return Err(SdfError::Action);
        }
        if w.next() != Some("out") {
            return Err(SdfError::Direction);
        }
        let proto = match w.next().ok_or(SdfError::Protocol)? {
            "ip" => None,
            "tcp" => Some(6),
            "udp" => Some(17),
            "icmp" => Some(1),
            "icmp6" | "ipv6-icmp" => Some(58),
            n => Some(n.parse::<u8>().map_err(|_| SdfError::Protocol)?),
        };
        if w.next() != Some("from") {
            return Err(SdfError::From);
        }
        let remote = address(w.next().ok_or(SdfError::Address)?)?;
        let remote_ports = match w.peek() {
            Some(&p) if p != "to" => {
                w.next();
                ports(p)?
            }
            _ => Box::default(),
        };
        if w.next() != Some("to") {
            return Err(SdfError::To);
        }
        // The UE side: the session's own address, whatever is written.
        address(w.next().ok_or(SdfError::Address)?)?;
        let ue_ports = match w.next() {
            Some(p) => ports(p)?,
            None => Box::default(),
        };
        if w.next().is_some() {
            return Err(SdfError::Trailing);
        }
        Ok(SdfFilter { proto, remote, remote_ports, ue_ports })
    }

    #[inline]
    pub fn matches(&self, f: &FlowView) -> bool {
        if self.proto.is_some_and(|p| p != f.proto) {
            return false;
        }
        if let Some((net, len)) = self.remote {
            if !in_prefix(f.remote, net, len) {
                return false;
            }
        }
        port_ok(&self.remote_ports, f.remote_port) && port_ok(&self.ue_ports, f.ue_port)
    }
}

fn port_ok(ranges: &[(u16, u16)], p: Option<u16>) -> bool {
    if ranges.is_empty() {
        return true;
    }
    p.is_some_and(|p| ranges.iter().any(|&(lo, hi)| lo <= p && p <= hi))
}

fn in_prefix(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - len as u32) };
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if len == 0 { 0 } else { u128::MAX << (128 - len as u32) };
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

/// `any` / `assigned` (None) or an address with an optional prefix length.
fn address(s: &str) -> Result<Option<(IpAddr, u8)>, SdfError> {
    if s == "any" || s == "assigned" {
        return Ok(None);
    }
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| SdfError::Address)?)),
        None => (s, None),
    };
    let a: IpAddr = a.parse().map_err(|_| SdfError::Address)?;
    let max = ip::Prefix::max_len(a);
    let len = len.unwrap_or(max);
    if len > max {
        return Err(SdfError::Address);
    }
    Ok(Some((a, len)))
}

fn ports(s: &str) -> Result<Box<[(u16, u16)]>, SdfError> {
    s.split(',')
        .map(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            let (lo, hi) = (lo.parse::<u16>().map_err(|_| SdfError::Ports)?, hi.parse::<u16>().map_err(|_| SdfError::Ports)?);
            if lo > hi {
                return Err(SdfError::Ports);
            }
            Ok((lo, hi))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn view(proto: u8, remote: &str, rp: Option<u16>, up: Option<u16>) -> FlowView {
        FlowView { proto, remote: remote.parse().unwrap(), remote_port: rp, ue_port: up }
    }

    #[test]
    fn parses_what_smfs_send() {
        let f = SdfFilter::parse("permit out ip from any to assigned").unwrap();
        assert_eq!(f, SdfFilter { proto: None, remote: None, remote_ports: Box::default(), ue_ports: Box::default() });
        assert!(f.matches(&view(17, "198.18.9.9", Some(1), Some(2))));
        let f = SdfFilter::parse("permit out 17 from 198.51.100.0/24 8000-8010 to assigned 5000,6000").unwrap();
        assert!(f.matches(&view(17, "198.51.100.7", Some(8005), Some(6000))));
        assert!(!f.matches(&view(6, "198.51.100.7", Some(8005), Some(6000))), "protocol");
        assert!(!f.matches(&view(17, "198.51.101.7", Some(8005), Some(6000))), "remote prefix");
        assert!(!f.matches(&view(17, "198.51.100.7", Some(8011), Some(6000))), "remote port");
        assert!(!f.matches(&view(17, "198.51.100.7", Some(8005), Some(5001))), "UE port");
        assert!(!f.matches(&view(17, "198.51.100.7", None, None)), "ports unreadable");
        assert!(!f.matches(&view(17, "2001:db8::1", Some(8005), Some(6000))), "other family");
        let f = SdfFilter::parse("permit out ip from 2001:db8:5::/48 to assigned").unwrap();
        assert!(f.matches(&view(58, "2001:db8:5:1::9", None, None)));
        assert!(!f.matches(&view(58, "2001:db8:6::9", None, None)));
    }

    #[test]
    fn refusals_name_the_word() {
        for (text, e) in [
            ("deny out ip from any to assigned", SdfError::Action),
            ("permit in ip from any to assigned", SdfError::Direction),
            ("permit out foo from any to assigned", SdfError::Protocol),
            ("permit out ip any to assigned", SdfError::From),
            ("permit out ip from 198.18.0.0/33 to assigned", SdfError::Address),
            ("permit out ip from any 9-3 to assigned", SdfError::Ports),
            ("permit out ip from any 80", SdfError::To),
            ("permit out ip from any to assigned 80 frag", SdfError::Trailing),
            ("", SdfError::Action),
        ] {
            assert_eq!(SdfFilter::parse(text), Err(e), "{text}");
        }
    }

    proptest! {
        /// Any text parses or is refused; never a panic.
        #[test]
        fn any_text_is_safe(s in "\\PC{0,80}", words in proptest::collection::vec("(permit|out|ip|from|to|any|assigned|[0-9./:,-]{1,12})", 0..10)) {
            let _ = SdfFilter::parse(&s);
            let _ = SdfFilter::parse(&words.join(" "));
        }

        /// The remote prefix matches exactly the addresses whose first `len` bits agree.
        #[test]
        fn prefix_match_is_bitwise(a in any::<u32>(), n in any::<u32>(), len in 0u8..=32) {
            let f = SdfFilter::parse(&format!("permit out ip from {}/{len} to assigned", core::net::Ipv4Addr::from(n))).unwrap();
            let agree = len == 0 || (a ^ n) >> (32 - len as u32) == 0;
            prop_assert_eq!(f.matches(&FlowView { proto: 6, remote: IpAddr::V4(a.into()), remote_port: None, ue_port: None }), agree);
        }
    }
}
