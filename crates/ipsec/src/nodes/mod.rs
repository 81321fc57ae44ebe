//! The ESP nodes, each pair one generic node over the outer family:
//!
//! ```text
//! ip4-lookup ─(route into ipsec_tunnelN)→ esp4-encrypt ─→ ip4-rewrite / ip4-lookup (outer)
//! (an SPD node: PROTECT with SA N) ─────↗   meta.param = outbound SA index N
//! ip4-local ─(IP protocol 50, or UDP 4500)→ esp4-decrypt ─→ ip4-lookup / ip6-lookup (inner)
//!                                               └─(arrived where an SPD is bound)→ ipsec4-decrypted / ipsec6-decrypted
//! ip4-local ─(ICMP frag-needed quoting ESP)→ esp4-pmtu (the SA's path MTU: `crate::pmtu`)
//! ```
//! and the same over IPv6 outer headers (`esp6-*`). **The encrypt node's argument is the
//! outbound SA's index in `meta.param`**: `ipN-lookup` puts it there for a route into
//! `ipsec_tunnelN` (as for every tunnel), and an SPD output node sends a PROTECT packet
//! the same way.

pub mod decrypt;
pub mod encrypt;
pub mod pmtu;

use crate::context::HasIpsec;
use encrypt::EspEncryptCounter;
use engine::GraphBuilder;
use ip::outer::{Ip4Outer, Ip6Outer, OuterFamily};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::ipv4::{Ipv4Packet, Ipv4Repr};
use wire::ipv6::{Ipv6Packet, Ipv6Repr};
use wire::IpProtocol;

/// Add the ESP nodes to a graph (the IP nodes must be there too).
pub fn register<Cx: HasIpsec>(g: &mut GraphBuilder<Cx>) {
    g.add(encrypt::EspEncrypt::<Ip4Outer>::default());
    g.add(encrypt::EspEncrypt::<Ip6Outer>::default());
    g.add(decrypt::EspDecrypt::<Ip4Outer>::default());
    g.add(decrypt::EspDecrypt::<Ip6Outer>::default());
    g.add(pmtu::EspPmtu::<Ip4Outer>::default());
    g.add(pmtu::EspPmtu::<Ip6Outer>::default());
}

/// Where the outer header of a received ESP packet ends, and what follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OuterEsp<A> {
    /// Offset of the ESP header, or of the UDP header when `udp`.
    pub at: usize,
    pub udp: bool,
    pub src: A,
    pub dst: A,
}

/// Room for the longer outer header, IPv6's.
pub const OUTER_TEMPLATE_LEN: usize = 40;

/// A tunnel-mode SA's outer header, built once per SA (`Sa::new`) for an empty payload;
/// the encrypt node copies it and sets the length ([`EspOuter::emit_from_template`]),
/// where emitting it field by field and summing it cost ~6 % of `esp4-encrypt` at 64 B
/// (docs/PERFORMANCE.md, "IPsec ESP"). Zeros for a transport-mode SA (its packets keep
/// their own header) and for endpoints of two families (`SaSpec::build` refuses them).
pub fn outer_template(spec: &crate::sa::SaSpec) -> [u8; OUTER_TEMPLATE_LEN] {
    let mut t = [0u8; OUTER_TEMPLATE_LEN];
    let proto = if spec.udp_encap.is_some() { IpProtocol::Udp } else { IpProtocol::Esp };
    match (spec.mode, spec.local, spec.remote) {
        (crate::sa::Mode::Transport, _, _) => {}
        (_, IpAddr::V4(src), IpAddr::V4(dst)) => Ip4Outer::emit(src, dst, proto, 0, &mut t),
        (_, IpAddr::V6(src), IpAddr::V6(dst)) => Ip6Outer::emit(src, dst, proto, 0, &mut t),
        _ => {}
    }
    t
}

/// What differs between ESP over IPv4 and over IPv6.
pub trait EspOuter: OuterFamily {
    const ENCRYPT: &'static str;
    const DECRYPT: &'static str;
    const HEADER_LEN: usize;
    /// The outer header of a packet `ipN-local` sent here: ESP or UDP next.
    fn outer_esp(b: &[u8]) -> Option<OuterEsp<Self::Addr>>;
    /// Write the outer header (protocol `proto`, then `payload_len` bytes) into `out`.
    fn emit(src: Self::Addr, dst: Self::Addr, proto: IpProtocol, payload_len: usize, out: &mut [u8]);
    /// Write the outer header into `out` (`HEADER_LEN` bytes) from an SA's template
    /// ([`outer_template`]: the header for an empty payload), with its length set for
    /// `payload_len` bytes and its traffic class `tc` (the inner packet's, RFC 4301
    /// §5.1.2.1; the IPv4 checksum patched incrementally).
    fn emit_from_template(template: &[u8; OUTER_TEMPLATE_LEN], payload_len: usize, tc: u8, out: &mut [u8]);
    fn from_ip(a: IpAddr) -> Option<Self::Addr>;
    /// Transport mode: where the packet's IP header ends (ESP goes there) and the
    /// protocol after it, or why ESP cannot go in.
    fn transport_split(b: &[u8]) -> Result<(usize, IpProtocol), EspEncryptCounter>;
    /// The source and destination of a packet whose header [`EspOuter::transport_split`]
    /// or [`EspOuter::outer_esp`] accepted.
    fn addrs(b: &[u8]) -> (Self::Addr, Self::Addr);
    /// Transport mode: make the header of `b` (`hl` bytes) name `upper` after it and
    /// the packet's new length.
    fn set_upper(b: &mut [u8], hl: usize, upper: IpProtocol);
}

impl EspOuter for Ip4Outer {
    const ENCRYPT: &'static str = "esp4-encrypt";
    const DECRYPT: &'static str = "esp4-decrypt";
    const HEADER_LEN: usize = 20;
    #[inline(always)]
    fn outer_esp(b: &[u8]) -> Option<OuterEsp<Ipv4Addr>> {
        let p = Ipv4Packet::new_checked(b).ok()?;
        let udp = match p.protocol() {
            IpProtocol::Esp => false,
            IpProtocol::Udp => true,
            _ => return None,
        };
        Some(OuterEsp { at: p.header_len(), udp, src: p.src_addr(), dst: p.dst_addr() })
    }
    #[inline(always)]
    fn emit(src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, payload_len: usize, out: &mut [u8]) {
        // DF: a path that cannot carry the packet drops it and says so (the frag-needed
        // lowers the SA's path MTU: `crate::pmtu`) rather than fragmenting it on the way.
        let r = Ipv4Repr { src, dst, protocol, payload_len, ttl: 64, dscp: 0, ecn: 0, ident: 0, dont_frag: true };
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..20]));
    }
    #[inline(always)]
    fn emit_from_template(template: &[u8; OUTER_TEMPLATE_LEN], payload_len: usize, tc: u8, out: &mut [u8]) {
        let h = &mut out[..20];
        h.copy_from_slice(&template[..20]);
        let total = (20 + payload_len) as u16;
        // The template's first two words: TOS 0, length 20.
        let sum = wire::checksum::update32(u16::from_be_bytes([h[10], h[11]]), 20, (tc as u32) << 16 | total as u32);
        h[1] = tc;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[10..12].copy_from_slice(&sum.to_be_bytes());
    }
    fn from_ip(a: IpAddr) -> Option<Ipv4Addr> {
        match a {
            IpAddr::V4(v) => Some(v),
            IpAddr::V6(_) => None,
        }
    }
    #[inline(always)]
    fn transport_split(b: &[u8]) -> Result<(usize, IpProtocol), EspEncryptCounter> {
        let p = Ipv4Packet::new_checked(b).map_err(|_| EspEncryptCounter::BadInner)?;
        Ok((p.header_len(), p.protocol()))
    }
    #[inline(always)]
    fn addrs(b: &[u8]) -> (Ipv4Addr, Ipv4Addr) {
        let p = Ipv4Packet::new_unchecked(b);
        (p.src_addr(), p.dst_addr())
    }
    #[inline(always)]
    fn set_upper(b: &mut [u8], hl: usize, upper: IpProtocol) {
        let total = b.len() as u16;
        let mut p = Ipv4Packet::new_unchecked(&mut b[..hl]);
        p.set_protocol(upper);
        p.set_total_len(total);
        p.fill_checksum();
    }
}

impl EspOuter for Ip6Outer {
    const ENCRYPT: &'static str = "esp6-encrypt";
    const DECRYPT: &'static str = "esp6-decrypt";
    const HEADER_LEN: usize = 40;
    #[inline(always)]
    fn outer_esp(b: &[u8]) -> Option<OuterEsp<Ipv6Addr>> {
        let p = Ipv6Packet::new_checked(b).ok()?;
        // ip6-local walked the chain already; options before ESP are skipped again here.
        let info = wire::ipv6_ext::walk_chain(p.next_header(), p.payload()).ok()?;
        let udp = match info.upper? {
            IpProtocol::Esp => false,
            IpProtocol::Udp => true,
            _ => return None,
        };
        if info.fragment.is_some() || info.routing.is_some() {
            return None;
        }
        Some(OuterEsp { at: 40 + info.upper_offset, udp, src: p.src_addr(), dst: p.dst_addr() })
    }
    #[inline(always)]
    fn emit(src: Ipv6Addr, dst: Ipv6Addr, next_header: IpProtocol, payload_len: usize, out: &mut [u8]) {
        let r = Ipv6Repr { src, dst, next_header, payload_len, hop_limit: 64, traffic_class: 0, flow_label: 0 };
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..40]));
    }
    #[inline(always)]
    fn emit_from_template(template: &[u8; OUTER_TEMPLATE_LEN], payload_len: usize, tc: u8, out: &mut [u8]) {
        let h = &mut out[..40];
        h.copy_from_slice(template);
        ip::outer::tos::set_ipv6_traffic_class(h, tc);
        h[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    }
    fn from_ip(a: IpAddr) -> Option<Ipv6Addr> {
        match a {
            IpAddr::V6(v) => Some(v),
            IpAddr::V4(_) => None,
        }
    }
    /// ESP goes after the fixed header: a hop-by-hop, routing or fragment header would
    /// have to stay in front of it (RFC 4303 §3.1.1), which is not done; destination
    /// options after the fixed header are protected with the payload.
    #[inline(always)]
    fn transport_split(b: &[u8]) -> Result<(usize, IpProtocol), EspEncryptCounter> {
        let p = Ipv6Packet::new_checked(b).map_err(|_| EspEncryptCounter::BadInner)?;
        match p.next_header() {
            IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Frag => Err(EspEncryptCounter::TransportExtHeader),
            upper => Ok((40, upper)),
        }
    }
    #[inline(always)]
    fn addrs(b: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
        let p = Ipv6Packet::new_unchecked(b);
        (p.src_addr(), p.dst_addr())
    }
    #[inline(always)]
    fn set_upper(b: &mut [u8], hl: usize, upper: IpProtocol) {
        let payload = (b.len() - 40) as u16;
        let mut p = Ipv6Packet::new_unchecked(&mut b[..hl]);
        p.set_next_header(upper);
        p.set_payload_len(payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sa::{Mode, SaSpec};
    use proptest::prelude::*;

    use crate::sa::test_spec as spec;

    proptest! {
        /// The template path writes the same header as emitting it in full.
        #[test]
        fn template_header_equals_the_emitted_one(
            a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), udp: bool, v6: bool, payload_len in 0usize..65_495, tc: u8,
        ) {
            let (local, remote): (IpAddr, IpAddr) = match v6 {
                false => (Ipv4Addr::from(<[u8; 4]>::try_from(&a[..4]).unwrap()).into(), Ipv4Addr::from(<[u8; 4]>::try_from(&b[..4]).unwrap()).into()),
                true => (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into()),
            };
            let t = outer_template(&spec(local, remote, udp));
            let proto = if udp { IpProtocol::Udp } else { IpProtocol::Esp };
            let (mut want, mut got) = ([0u8; 40], [0u8; 40]);
            match (local, remote) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    Ip4Outer::emit(s, d, proto, payload_len, &mut want);
                    ip::outer::tos::set_ipv4_tos(&mut want, tc);
                    Ip4Outer::emit_from_template(&t, payload_len, tc, &mut got);
                    prop_assert!(wire::checksum::verify(&got[..20]));
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    Ip6Outer::emit(s, d, proto, payload_len, &mut want);
                    ip::outer::tos::set_ipv6_traffic_class(&mut want, tc);
                    Ip6Outer::emit_from_template(&t, payload_len, tc, &mut got);
                }
                _ => unreachable!(),
            }
            prop_assert_eq!(want, got);
        }
    }

    #[test]
    fn transport_mode_has_no_outer_template() {
        let s = SaSpec { mode: Mode::Transport, ..spec("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap(), false) };
        assert_eq!(outer_template(&s), [0; OUTER_TEMPLATE_LEN]);
    }
}
