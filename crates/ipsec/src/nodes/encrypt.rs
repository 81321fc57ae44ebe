//! `esp4-encrypt` / `esp6-encrypt`: tunnel-mode ESP around the inner packet at the
//! buffer start, with outbound SA `meta.param`; optionally in UDP (RFC 3948).
//!
//! In place: the trailer goes into the tailroom, the ESP header and IV, UDP and the
//! outer IP header into the headroom, and the payload is encrypted where it lies.

use super::EspOuter;
use crate::context::HasIpsec;
use crate::sa::{Age, Sa, SeqError};
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use ip::outer::{encap_mtu, inner_hop, ChecksumMode, EncapMtu, InnerHop, MtuPolicy};
use wire::esp::{EspRepr, EspTrailer, HEADER_LEN};
use wire::IpProtocol;

next_nodes! {
    pub enum EspEncryptNext {
        Output = "interface-output", Ip4Rewrite = "ip4-rewrite", Ip4Lookup = "ip4-lookup",
        Ip6Rewrite = "ip6-rewrite", Ip6Lookup = "ip6-lookup",
        Ip4IcmpError = "ip4-icmp-error", Ip6IcmpError = "ip6-icmp-error",
        Segment = "ip-gso-segment", Ip4Fragment = "ip4-fragment", Ip6Fragment = "ip6-fragment",
    }
}

counters! {
    pub enum EspEncryptCounter {
        Encrypted(Info, "encrypted", "packets encrypted"),
        SoftLifetime(Warn, "soft-lifetime", "an SA passed a soft lifetime (packets or bytes): time to rekey"),
        NoSa(Error, "no-sa", "no outbound SA at the index the route or policy named"),
        SeqOverflow(Error, "seq-overflow", "the SA's sequence number reached its end: dropped, never wrapped (RFC 4303 3.3.3)"),
        LifetimeExpired(Error, "lifetime-expired", "the SA passed a hard lifetime (packets or bytes)"),
        NoHeadroom(Error, "no-headroom", "not enough headroom for the outer headers"),
        NoTailroom(Error, "no-tailroom", "not enough tailroom for padding, trailer and ICV"),
        TooBig(Warn, "too-big", "encrypted packet longer than an IP packet can be"),
        InnerTtlExpired(Info, "inner-ttl-expired", "inner TTL or hop limit would reach 0 (ICMP time exceeded requested)"),
        BadInner(Warn, "bad-inner", "inner packet is not IPv4 or IPv6"),
        InnerTooBig(Info, "inner-too-big", "inner packet larger than the tunnel MTU, with DF or IPv6 (ICMP frag-needed / packet-too-big requested)"),
        FragmentInner(Info, "fragment-inner", "inner IPv4 packet without DF larger than the tunnel MTU: fragmented before encryption"),
        FragmentOuter(Info, "fragment-outer", "encrypted packet larger than the outer link MTU: the outer packet fragmented"),
        GsoSegmented(Info, "gso-to-segment", "GSO frames sent to software segmentation before encryption"),
        InnerChecksumCompleted(Info, "inner-checksum-completed", "inner partial checksum completed before encryption"),
    }
}

pub struct EspEncrypt<O: EspOuter>(std::marker::PhantomData<O>);

impl<O: EspOuter> Default for EspEncrypt<O> {
    fn default() -> Self {
        EspEncrypt(std::marker::PhantomData)
    }
}

/// Wrap the inner packet (IPv4 when `inner_v4`) in ESP for `sa` with sequence number
/// `seq`, then UDP if configured, then the outer header; the buffer then starts at the
/// outer header.
#[inline(always)]
pub fn encrypt<O: EspOuter>(sa: &Sa, seq: u64, inner_v4: bool, buf: &mut Buffer) -> Result<(), EspEncryptCounter> {
    let s = &*sa.spec;
    let l = s.alg.layout();
    let len = buf.len();
    let pad = l.pad_len(len);
    let trailer = EspTrailer { pad_len: pad as u8, next_header: if inner_v4 { IpProtocol::IpIp } else { IpProtocol::Ipv6 } };
    buf.set_len(len + trailer.buffer_len() + l.icv_len).map_err(|_| EspEncryptCounter::NoTailroom)?;
    trailer.emit(&mut buf.bytes_mut()[len..len + trailer.buffer_len()]);
    let head = buf.prepend(HEADER_LEN + l.iv_len).map_err(|_| EspEncryptCounter::NoHeadroom)?;
    EspRepr { spi: s.spi, seq: seq as u32 }.emit(head);
    sa.transform.seal(buf.bytes_mut(), seq, s.esn);
    let (Some(src), Some(dst)) = (O::from_ip(s.local), O::from_ip(s.remote)) else {
        // SaSpec::build keeps both endpoints in one family, and the FIB kind follows it.
        return Err(EspEncryptCounter::NoSa);
    };
    let esp_len = buf.len();
    let proto = match s.udp_encap {
        Some(ports) => {
            let udp_len = esp_len + 8;
            if udp_len > u16::MAX as usize {
                return Err(EspEncryptCounter::TooBig);
            }
            let h = buf.prepend(8).map_err(|_| EspEncryptCounter::NoHeadroom)?;
            h[..2].copy_from_slice(&ports.src.to_be_bytes());
            h[2..4].copy_from_slice(&ports.dst.to_be_bytes());
            h[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            h[6..8].copy_from_slice(&[0, 0]);
            if O::IS_V6 {
                // IPv6 has no zero UDP checksum for ESP in UDP (RFC 3948 is IPv4-only
                // on that point; RFC 6935 allows zero for tunnels but the peer must opt in).
                let sum = ip::outer::udp_checksum(O::pseudo(&src, &dst), buf.bytes());
                buf.bytes_mut()[6..8].copy_from_slice(&sum.to_be_bytes());
            }
            IpProtocol::Udp
        }
        None => IpProtocol::Esp,
    };
    let payload_len = buf.len();
    if payload_len + O::HEADER_LEN > u16::MAX as usize + if O::IS_V6 { 40 } else { 0 } {
        return Err(EspEncryptCounter::TooBig);
    }
    let h = buf.prepend(O::HEADER_LEN).map_err(|_| EspEncryptCounter::NoHeadroom)?;
    O::emit(src, dst, proto, payload_len, h);
    Ok(())
}

impl<Cx: HasIpsec, O: EspOuter> Node<Cx> for EspEncrypt<O> {
    type Next = EspEncryptNext;
    type Counter = EspEncryptCounter;

    fn name(&self) -> &'static str {
        O::ENCRYPT
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use EspEncryptCounter as C;
        let (ipc, x) = cx.split_ipsec();
        let index = buf.meta.param;
        let Some(sa) = x.tables.outbound(index) else {
            return Verdict::Drop(C::NoSa);
        };
        let adj = x.tables.outer_adj(index);
        let link_mtu = ipc.tables.adjacency(adj).mtu();
        // The inner MTU leaves room for the most padding the cipher may need.
        let overhead = sa.spec.outer_len() + sa.spec.alg.layout().max_overhead();
        let fragment_outer = match encap_mtu(buf, link_mtu, overhead, MtuPolicy::default()) {
            EncapMtu::Encap { fragment_outer, .. } => fragment_outer,
            EncapMtu::TooBig { v4 } => {
                counts.inc(C::InnerTooBig);
                return Verdict::Next(if v4 { EspEncryptNext::Ip4IcmpError } else { EspEncryptNext::Ip6IcmpError });
            }
            EncapMtu::FragmentInner => {
                counts.inc(C::FragmentInner);
                return Verdict::Next(EspEncryptNext::Ip4Fragment);
            }
            EncapMtu::Segment => {
                counts.inc(C::GsoSegmented);
                return Verdict::Next(EspEncryptNext::Segment);
            }
        };
        let inner_v4 = match inner_hop(buf.bytes_mut()) {
            InnerHop::Forwarded { v4 } => v4,
            InnerHop::Expired { v4, icmp } => {
                counts.inc(C::InnerTtlExpired);
                buf.meta.param = icmp.encode();
                return Verdict::Next(if v4 { EspEncryptNext::Ip4IcmpError } else { EspEncryptNext::Ip6IcmpError });
            }
            InnerHop::NotIp => return Verdict::Drop(C::BadInner),
        };
        // Nothing can complete a checksum inside ciphertext: do it now.
        if ChecksumMode::Software.settle_inner_checksum(buf) {
            counts.inc(C::InnerChecksumCompleted);
        }
        let seq = match sa.outbound.next(buf.len() as u64, sa.spec.esn, &sa.spec.lifetime) {
            Ok((seq, age)) => {
                if age == Age::SoftReached {
                    counts.inc(C::SoftLifetime);
                }
                seq
            }
            Err(SeqError::Overflow) => return Verdict::Drop(C::SeqOverflow),
            Err(SeqError::Expired) => return Verdict::Drop(C::LifetimeExpired),
        };
        if let Err(c) = encrypt::<O>(sa, seq, inner_v4, buf) {
            return Verdict::Drop(c);
        }
        counts.inc(C::Encrypted);
        buf.meta.adj = adj;
        if fragment_outer.is_some() && ip::outer::fragment_outer(buf, fragment_outer) {
            counts.inc(C::FragmentOuter);
            return Verdict::Next(if O::IS_V6 { EspEncryptNext::Ip6Fragment } else { EspEncryptNext::Ip4Fragment });
        }
        if ip::nodes::family::send_originated::<O::Ip>(&ipc.tables, buf, adj) {
            return Verdict::Next(EspEncryptNext::Output);
        }
        match (link_mtu.is_some(), O::IS_V6) {
            (true, false) => Verdict::Next(EspEncryptNext::Ip4Rewrite),
            (true, true) => Verdict::Next(EspEncryptNext::Ip6Rewrite),
            (false, false) => Verdict::Next(EspEncryptNext::Ip4Lookup),
            (false, true) => Verdict::Next(EspEncryptNext::Ip6Lookup),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("sa {} len {}", buf.meta.param, buf.len())
    }
}
