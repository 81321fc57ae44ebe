//! Path MTU learning per outbound SA (RFC 4301 §8.2; RFC 1191, RFC 8201): a router that
//! cannot forward one of our ESP packets sends back an ICMP frag-needed or Packet Too
//! Big quoting it. Sans-IO: [`parse_v4`] / [`parse_v6`] read the quote, [`find_outbound`]
//! names the SA, [`check_mtu`] bounds the reported value; the `espN-pmtu` nodes
//! ([`crate::nodes::pmtu`]) store it in the SA ([`crate::sa::Outbound::learn_path_mtu`]).
//!
//! An off-path sender must not shrink an SA it cannot name: the quote must carry the
//! SA's outer source and destination, its protocol (ESP, or UDP between the SA's ports
//! with a non-zero SPI after it) and its SPI, and the error must be addressed to the
//! SA's local address. The SPI is 32 bits the peer chose, seen only on the path.

use crate::sa::{Direction, SaSpec};
use crate::tables::IpsecTables;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::IpProtocol;

/// The least path MTU believed over IPv4. 576 is the datagram every IPv4 host must
/// accept (RFC 791, RFC 1122 §3.3.2): no honest path is narrower, and below it an
/// attacker's report would shrink the tunnel to uselessness. (Linux floors at 552, a
/// 576-byte datagram less IP and TCP options' room; ESP's outer packet is what is sized
/// here, so the datagram's own floor is the one that applies.)
pub const MIN_MTU_V4: u32 = 576;
/// IPv6's minimum link MTU (RFC 8200 §5): a smaller report is not believed (RFC 8201 §4).
pub const MIN_MTU_V6: u32 = 1280;

/// What an ICMP error says about one of our ESP packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooBig {
    /// The reported MTU (the next-hop MTU over IPv4, 16 bits; 32 bits over IPv6).
    pub mtu: u32,
    /// The quoted packet's source and destination.
    pub src: IpAddr,
    pub dst: IpAddr,
    /// ESP in UDP: the quoted source and destination ports.
    pub udp: Option<(u16, u16)>,
    pub spi: u32,
}

/// Why a quote names no ESP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuoteError {
    #[error("icmp: {len} bytes, expected at least 8")]
    IcmpTruncated { len: usize },
    #[error("quoted header: {len} bytes, expected at least {need}")]
    HeaderTruncated { len: usize, need: usize },
    #[error("quoted version {0}: expected the ICMP's family")]
    Version(u8),
    #[error("quoted protocol {0}: expected ESP (50) or UDP (17)")]
    NotEsp(u8),
    #[error("quoted extension headers: malformed or past the quote's end")]
    ExtensionHeaders,
    #[error("quoted packet: a later fragment, without the ESP header")]
    LaterFragment,
    #[error("quoted spi: {len} bytes after the header, expected {need}")]
    SpiTruncated { len: usize, need: usize },
    #[error("quoted spi: 0 after UDP (a non-ESP marker: IKE, not ESP)")]
    NonEspMarker,
}

/// Why a reported MTU is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MtuError {
    #[error("mtu {mtu}: expected at least {min}")]
    BelowMinimum { mtu: u32, min: u32 },
    #[error("mtu {mtu}: expected below the link MTU {link}")]
    NotBelowLink { mtu: u32, link: u16 },
}

/// The SPI (and ports) after the quoted header: `after` starts at the ESP or UDP header.
fn spi_after(proto: IpProtocol, after: &[u8]) -> Result<(Option<(u16, u16)>, u32), QuoteError> {
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    match proto {
        IpProtocol::Esp => match after.get(..4) {
            Some(b) => Ok((None, be32(b))),
            None => Err(QuoteError::SpiTruncated { len: after.len(), need: 4 }),
        },
        IpProtocol::Udp => {
            // RFC 792 asks routers to quote 8 bytes past the header only: the UDP
            // header, not the SPI. Without it the SA cannot be named, so nothing is learned.
            let Some(b) = after.get(..12) else {
                return Err(QuoteError::SpiTruncated { len: after.len(), need: 12 });
            };
            let spi = be32(&b[8..]);
            if spi == 0 {
                return Err(QuoteError::NonEspMarker);
            }
            Ok((Some((u16::from_be_bytes([b[0], b[1]]), u16::from_be_bytes([b[2], b[3]]))), spi))
        }
        other => Err(QuoteError::NotEsp(other.into())),
    }
}

/// An ICMPv4 frag-needed (type 3 code 4; `icmp` from its type byte on).
pub fn parse_v4(icmp: &[u8]) -> Result<TooBig, QuoteError> {
    if icmp.len() < 8 {
        return Err(QuoteError::IcmpTruncated { len: icmp.len() });
    }
    let mtu = u16::from_be_bytes([icmp[6], icmp[7]]) as u32;
    let q = &icmp[8..];
    if q.len() < 20 {
        return Err(QuoteError::HeaderTruncated { len: q.len(), need: 20 });
    }
    if q[0] >> 4 != 4 {
        return Err(QuoteError::Version(q[0] >> 4));
    }
    let hl = (q[0] & 0xf) as usize * 4;
    if hl < 20 || q.len() < hl {
        return Err(QuoteError::HeaderTruncated { len: q.len(), need: hl.max(20) });
    }
    if u16::from_be_bytes([q[6], q[7]]) & 0x1fff != 0 {
        return Err(QuoteError::LaterFragment);
    }
    let (udp, spi) = spi_after(IpProtocol::from(q[9]), &q[hl..])?;
    let addr = |b: &[u8]| IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]));
    Ok(TooBig { mtu, src: addr(&q[12..16]), dst: addr(&q[16..20]), udp, spi })
}

/// An ICMPv6 Packet Too Big (type 2; `icmp` from its type byte on).
pub fn parse_v6(icmp: &[u8]) -> Result<TooBig, QuoteError> {
    if icmp.len() < 8 {
        return Err(QuoteError::IcmpTruncated { len: icmp.len() });
    }
    let mtu = u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]);
    let q = &icmp[8..];
    if q.len() < 40 {
        return Err(QuoteError::HeaderTruncated { len: q.len(), need: 40 });
    }
    if q[0] >> 4 != 6 {
        return Err(QuoteError::Version(q[0] >> 4));
    }
    let info = wire::ipv6_ext::walk_chain(IpProtocol::from(q[6]), &q[40..]).map_err(|_| QuoteError::ExtensionHeaders)?;
    let Some(upper) = info.upper else {
        return Err(QuoteError::LaterFragment);
    };
    let (udp, spi) = spi_after(upper, q.get(40 + info.upper_offset..).unwrap_or(&[]))?;
    let addr = |b: &[u8]| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(b).expect("16 bytes")));
    Ok(TooBig { mtu, src: addr(&q[8..24]), dst: addr(&q[24..40]), udp, spi })
}

/// Whether `spec` is the outbound SA that sent the quoted packet, to `to` (the ICMP's
/// destination: the quoted packet's source came back to it).
pub fn is_sender(spec: &SaSpec, q: &TooBig, to: IpAddr) -> bool {
    let ports = spec.udp_encap.map(|p| (p.src, p.dst));
    spec.direction == Direction::Outbound
        && spec.spi == q.spi
        && spec.local == q.src
        && spec.local == to
        && spec.remote == q.dst
        && ports == q.udp
}

/// The outbound SA that sent the quoted packet: one look-up by everything the quote
/// names ([`crate::tables::QuoteKey`]: outbound SPIs, chosen by each peer, are unique
/// only with the addresses), built with the tables, then [`is_sender`] to be sure.
pub fn find_outbound(tables: &IpsecTables, q: &TooBig, to: IpAddr) -> Option<u32> {
    let key = crate::tables::QuoteKey { src: q.src, dst: q.dst, spi: q.spi, udp: q.udp };
    let i = *tables.outbound_by_quote.get(&key)?;
    tables.outbound(i).filter(|s| is_sender(&s.spec, q, to)).map(|_| i)
}

/// The reported MTU if it is one to take: at least the family's minimum and below the
/// SA's link MTU (`link`, when known; the path is never wider than its first link, and
/// a report at or above it changes nothing).
pub fn check_mtu(mtu: u32, v6: bool, link: Option<u16>) -> Result<u16, MtuError> {
    let min = if v6 { MIN_MTU_V6 } else { MIN_MTU_V4 };
    if mtu < min {
        return Err(MtuError::BelowMinimum { mtu, min });
    }
    match link {
        Some(l) if mtu >= l as u32 => Err(MtuError::NotBelowLink { mtu, link: l }),
        // No link MTU known (the outer adjacency is looked up per packet): 16 bits is the
        // most an IP packet's length allows.
        _ => Ok(mtu.min(u16::MAX as u32) as u16),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sa::{Outbound, PATH_MTU_AGE_SECS};

    fn v4_quote(proto: u8, after: &[u8]) -> Vec<u8> {
        let mut m = vec![3, 4, 0, 0, 0, 0, 0x05, 0x00]; // next-hop MTU 1280
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2];
        h.extend_from_slice(after);
        m.extend_from_slice(&h);
        m
    }

    fn v6_quote(nh: u8, after: &[u8]) -> Vec<u8> {
        let mut m = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
        let mut h = vec![0x60, 0, 0, 0, 0, 0, nh, 64];
        h.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        h.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        m.extend_from_slice(&h);
        m.extend_from_slice(after);
        m
    }

    const ESP: [u8; 8] = [0, 0, 0x10, 0, 0, 0, 0, 1];
    const UDP_ESP: [u8; 16] = [0x11, 0x94, 0x11, 0x94, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 1];

    #[test]
    fn esp_and_esp_in_udp_quotes_name_their_spi() {
        let q = parse_v4(&v4_quote(50, &ESP)).unwrap();
        assert_eq!(q, TooBig { mtu: 1280, src: "198.18.0.1".parse().unwrap(), dst: "198.18.0.2".parse().unwrap(), udp: None, spi: 0x1000 });
        let q = parse_v4(&v4_quote(17, &UDP_ESP)).unwrap();
        assert_eq!((q.udp, q.spi), (Some((4500, 4500)), 0x1000));
        let q = parse_v6(&v6_quote(50, &ESP)).unwrap();
        assert_eq!((q.mtu, q.src, q.spi), (1280, "2001:db8::1".parse().unwrap(), 0x1000));
        // Behind a first fragment's header.
        let q = parse_v6(&v6_quote(44, &[&[50, 0, 0, 0, 0, 0, 0, 9][..], &ESP].concat())).unwrap();
        assert_eq!(q.spi, 0x1000);
    }

    /// Each way a quote falls short is its own error, at every length up to the SPI.
    #[test]
    fn truncated_and_foreign_quotes_are_typed_errors() {
        let full = v4_quote(50, &ESP);
        for len in 0..full.len() - 4 {
            let want = match len {
                0..=7 => QuoteError::IcmpTruncated { len },
                8..=27 => QuoteError::HeaderTruncated { len: len - 8, need: 20 },
                _ => QuoteError::SpiTruncated { len: len - 28, need: 4 },
            };
            assert_eq!(parse_v4(&full[..len]), Err(want), "length {len}");
        }
        let udp = v4_quote(17, &UDP_ESP);
        // The 8 bytes RFC 792 asks for: the UDP header, no SPI.
        assert_eq!(parse_v4(&udp[..36]), Err(QuoteError::SpiTruncated { len: 8, need: 12 }));
        assert_eq!(parse_v4(&v4_quote(17, &[0x11, 0x94, 0x11, 0x94, 0, 0, 0, 0, 0, 0, 0, 0])), Err(QuoteError::NonEspMarker));
        assert_eq!(parse_v4(&v4_quote(6, &ESP)), Err(QuoteError::NotEsp(6)));
        let mut later = v4_quote(50, &ESP);
        later[8 + 7] = 1; // fragment offset 8 bytes
        assert_eq!(parse_v4(&later), Err(QuoteError::LaterFragment));
        let mut long_header = v4_quote(50, &ESP);
        long_header[8] = 0x4f; // 60-byte header, 28 bytes there
        assert_eq!(parse_v4(&long_header), Err(QuoteError::HeaderTruncated { len: 28, need: 60 }));
        let mut v6_in_v4 = v4_quote(50, &ESP);
        v6_in_v4[8] = 0x65;
        assert_eq!(parse_v4(&v6_in_v4), Err(QuoteError::Version(6)));

        let full6 = v6_quote(50, &ESP);
        for len in 8..full6.len() - 4 {
            let want = match len {
                8..=47 => QuoteError::HeaderTruncated { len: len - 8, need: 40 },
                _ => QuoteError::SpiTruncated { len: len - 48, need: 4 },
            };
            assert_eq!(parse_v6(&full6[..len]), Err(want), "length {len}");
        }
        assert_eq!(parse_v6(&v6_quote(44, &[50, 0, 0, 8, 0, 0, 0, 9])), Err(QuoteError::LaterFragment));
        assert_eq!(parse_v6(&v6_quote(58, &ESP)), Err(QuoteError::NotEsp(58)));
        assert_eq!(parse_v6(&v6_quote(44, &[50, 0, 0])), Err(QuoteError::ExtensionHeaders));
    }

    fn spec(udp: bool) -> SaSpec {
        crate::sa::test_spec("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap(), udp)
    }

    /// Every part of the quote names the SA: change any one and it is not the sender.
    #[test]
    fn only_the_sas_own_addresses_ports_and_spi_name_it() {
        let to: IpAddr = "198.18.0.1".parse().unwrap();
        let q = parse_v4(&v4_quote(50, &ESP)).unwrap();
        let s = spec(false);
        assert!(is_sender(&s, &q, to));
        let other: IpAddr = "198.18.0.9".parse().unwrap();
        assert!(!is_sender(&s, &TooBig { spi: 0x1001, ..q }, to));
        assert!(!is_sender(&s, &TooBig { src: other, ..q }, to));
        assert!(!is_sender(&s, &TooBig { dst: other, ..q }, to));
        assert!(!is_sender(&s, &q, other));
        assert!(!is_sender(&s, &TooBig { udp: Some((4500, 4500)), ..q }, to));
        assert!(!is_sender(&SaSpec { direction: Direction::Inbound, ..s.clone() }, &q, to));
        let u = parse_v4(&v4_quote(17, &UDP_ESP)).unwrap();
        assert!(is_sender(&spec(true), &u, to));
        assert!(!is_sender(&spec(true), &TooBig { udp: Some((4500, 4501)), ..u }, to));
        assert!(!is_sender(&spec(true), &TooBig { udp: Some((4501, 4500)), ..u }, to));
        assert!(!is_sender(&spec(true), &q, to));
    }

    /// Among many outbound SAs (the same SPI to other peers, the same peer with other
    /// SPIs, ESP in UDP on other ports, an inbound SA with the very key) the quote finds
    /// the one that sent it, through the tables' look-up.
    #[test]
    fn the_right_sa_among_many_is_found() {
        let mut x = crate::state::IpsecState::new();
        let local: IpAddr = "198.18.0.1".parse().unwrap();
        let peer = |i: u32| IpAddr::V4(Ipv4Addr::new(198, 19, (i / 200) as u8, (i % 200) as u8 + 1));
        let mut index = 0;
        let mut add = |x: &mut crate::state::IpsecState, s: SaSpec| {
            x.add(index, s, [0; 16]).unwrap();
            index += 1;
            index - 1
        };
        let base = crate::sa::test_spec(local, peer(0), false);
        let inbound = add(&mut x, SaSpec { direction: Direction::Inbound, local: peer(7), remote: local, spi: 0x1007, ..base.clone() });
        let mut want = std::collections::HashMap::new();
        for i in 0..300u32 {
            let udp = (i % 3 == 1).then_some(crate::sa::UdpEncapPorts { src: 4500 + (i % 5) as u16, dst: 4600 + (i % 7) as u16 });
            // Two SPIs per peer; the same SPIs at every peer.
            let s = SaSpec { remote: peer(i / 2), spi: 0x1000 + i % 2, udp_encap: udp, ..base.clone() };
            let key = crate::tables::QuoteKey::of(&s);
            let n = add(&mut x, s);
            want.insert(key, n);
        }
        let t = x.build();
        assert_eq!(t.outbound_by_quote.len(), 300);
        for (k, n) in &want {
            let q = TooBig { mtu: 1300, src: k.src, dst: k.dst, udp: k.udp, spi: k.spi };
            assert_eq!(find_outbound(&t, &q, local), Some(*n), "{k:?}");
            assert_eq!(find_outbound(&t, &q, peer(0)), None, "sent to another address");
            assert_eq!(find_outbound(&t, &TooBig { spi: k.spi ^ 2, ..q }, local), None);
            let other_ports = k.udp.map(|(a, b)| (a, b + 100));
            if k.udp.is_some() {
                assert_eq!(find_outbound(&t, &TooBig { udp: other_ports, ..q }, local), None);
                assert_eq!(find_outbound(&t, &TooBig { udp: None, ..q }, local), None);
            }
        }
        // The inbound SA's own key names no outbound SA.
        let q = TooBig { mtu: 1300, src: peer(7), dst: local, udp: None, spi: 0x1007 };
        assert_eq!(find_outbound(&t, &q, peer(7)), None, "inbound SA {inbound}");
    }

    #[test]
    fn mtu_bounds() {
        assert_eq!(check_mtu(575, false, Some(1500)), Err(MtuError::BelowMinimum { mtu: 575, min: 576 }));
        assert_eq!(check_mtu(576, false, Some(1500)), Ok(576));
        assert_eq!(check_mtu(1279, true, Some(1500)), Err(MtuError::BelowMinimum { mtu: 1279, min: 1280 }));
        assert_eq!(check_mtu(1280, true, Some(1500)), Ok(1280));
        assert_eq!(check_mtu(1499, false, Some(1500)), Ok(1499));
        assert_eq!(check_mtu(1500, false, Some(1500)), Err(MtuError::NotBelowLink { mtu: 1500, link: 1500 }));
        assert_eq!(check_mtu(70_000, true, None), Ok(65_535));
    }

    /// Lower reports are taken, higher ones not while the learned one is young; it ages
    /// out after [`PATH_MTU_AGE_SECS`], and a same report renews it.
    #[test]
    fn learned_mtu_goes_down_only_and_ages_out() {
        let o = Outbound::default();
        assert_eq!(o.learned_mtu(100), None);
        assert!(o.learn_path_mtu(1400, 100));
        assert!(!o.learn_path_mtu(1450, 101));
        assert!(o.learn_path_mtu(1300, 102));
        assert_eq!(o.learned_mtu(110).map(|l| (l.mtu, l.age_secs)), Some((1300, 8)));
        assert!(o.learn_path_mtu(1300, 200));
        assert_eq!(o.learned_mtu(200 + PATH_MTU_AGE_SECS - 1).map(|l| l.mtu), Some(1300));
        assert_eq!(o.learned_mtu(200 + PATH_MTU_AGE_SECS), None);
        // Aged out: a higher report is taken again.
        assert!(o.learn_path_mtu(1450, 200 + PATH_MTU_AGE_SECS));
        o.forget_path_mtu();
        assert_eq!(o.learned_mtu(900), None);
    }
}
