//! `gtpu4-encap` / `gtpu6-encap`: put an inner packet into its tunnel. The IP lookup
//! sent it here with the tunnel id in `meta.param`; the node prepends the tunnel's
//! precomputed outer header, patches the lengths (IPv4 header checksum incrementally),
//! the sequence number and source port where configured, and the UDP checksum by the
//! tunnel's mode, then sends the outer packet by the tunnel's outer adjacency straight
//! to `interface-output` with the outer TTL as built, or through `ipN-rewrite` (a
//! neighbour to solicit) or `ipN-lookup` (no adjacency; or that technique off, when the
//! outer packet is forwarded like any other and leaves with its TTL one lower).
//!
//! Offload metadata from a vnet-header device: a GSO frame goes to `ip-gso-segment`
//! first (each segment comes back here through the lookup); a partial inner checksum
//! stays partial under a zero outer checksum (the transmitting kernel completes it at
//! its shifted position) and is completed here otherwise, since the outer checksum
//! covers it. Mode `offload` leaves the outer UDP checksum partial for the device.

use super::{udp_checksum, udp_checksum_field, Outer};
use crate::context::HasGtpu;
use crate::tunnel::{ChecksumMode, SrcPort, Tunnel, MAX_REWRITE};
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Node, Pool, Verdict, VECTOR_SIZE};
use ip::outer::{encap_mtu, inner_hop, EncapMtu, InnerHop};
use wire::checksum;

next_nodes! {
    pub enum GtpuEncapNext {
        Output = "interface-output", Ip4Rewrite = "ip4-rewrite", Ip4Lookup = "ip4-lookup",
        Ip6Rewrite = "ip6-rewrite", Ip6Lookup = "ip6-lookup",
        Ip4IcmpError = "ip4-icmp-error", Ip6IcmpError = "ip6-icmp-error",
        Segment = "ip-gso-segment", Ip4Fragment = "ip4-fragment", Ip6Fragment = "ip6-fragment",
    }
}

counters! {
    pub enum GtpuEncapCounter {
        Encapsulated(Info, "encapsulated", "packets encapsulated"),
        InnerChecksumCompleted(Info, "inner-checksum-completed", "inner partial checksum completed before the outer one covered it"),
        GsoSegmented(Info, "gso-to-segment", "GSO frames sent to software segmentation before encapsulation"),
        NoTunnel(Error, "no-tunnel", "route names a tunnel that does not exist (deleted while the packet was in flight)"),
        NoHeadroom(Error, "no-headroom", "not enough headroom for the outer headers"),
        TooBig(Warn, "too-big", "encapsulated packet longer than an IP packet can be"),
        InnerTtlExpired(Info, "inner-ttl-expired", "inner TTL or hop limit would reach 0 (ICMP time exceeded requested)"),
        BadInner(Warn, "bad-inner", "inner packet is not IPv4 or IPv6"),
        InnerTooBig(Info, "inner-too-big", "inner packet larger than the tunnel MTU, with DF or IPv6 (ICMP frag-needed / packet-too-big requested)"),
        FragmentInner(Info, "fragment-inner", "inner IPv4 packet without DF larger than the tunnel MTU: fragmented before encapsulation"),
        FragmentOuter(Info, "fragment-outer", "encapsulated packet larger than the outer link MTU: the outer packet fragmented"),
        MssClamped(Info, "mss-clamped", "TCP SYN MSS lowered to fit the tunnel"),
    }
}

/// `COUNT`: the form that counts per tunnel; the graph runs it only while per-tunnel
/// counting is on ([`super::register`]).
pub struct GtpuEncap<O: Outer, const COUNT: bool>(std::marker::PhantomData<O>);

impl<O: Outer, const COUNT: bool> Default for GtpuEncap<O, COUNT> {
    fn default() -> Self {
        GtpuEncap(std::marker::PhantomData)
    }
}

/// The ones'-complement sum of a whole inner IP packet computed from its headers alone,
/// when its upper-layer checksum vouches for the rest: a TCP, UDP (with a checksum) or
/// ICMPv6 segment with a correct checksum sums to the complement of its pseudo-header,
/// an ICMPv4 message to all ones. `None` when nothing vouches: UDP without a checksum,
/// fragments, IPv4 options or IPv6 extension headers, other protocols, lengths that
/// disagree. The result equals the full sum whenever the inner checksum is correct; when
/// it is not, the outer checksum will not verify and the tunnel's far end drops a packet
/// its destination would have dropped anyway (as with Linux's local checksum offload).
#[inline(always)]
pub fn inner_sum_from_headers(p: &[u8]) -> Option<wire::checksum::Checksum> {
    use wire::checksum::{pseudo_header_v4, pseudo_header_v6, Checksum};
    let mut c = Checksum::new();
    let (hl, proto, seg_len, pseudo) = match p.first()? >> 4 {
        4 => {
            let h = p.first_chunk::<20>()?;
            let total = u16::from_be_bytes([h[2], h[3]]) as usize;
            if h[0] != 0x45 || total != p.len() || (h[6] & 0x3f) != 0 || h[7] != 0 {
                return None;
            }
            c.add_array(h);
            let src = std::net::Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = std::net::Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            let seg = (total - 20) as u16;
            (20, h[9], total - 20, (h[9] != 1).then(|| pseudo_header_v4(src, dst, h[9], seg)))
        }
        6 => {
            let h = p.first_chunk::<40>()?;
            let plen = u16::from_be_bytes([h[4], h[5]]) as usize;
            if 40 + plen != p.len() {
                return None;
            }
            c.add_array(h);
            let src = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&h[8..24]).ok()?);
            let dst = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&h[24..40]).ok()?);
            (40, h[6], plen, Some(pseudo_header_v6(&src, &dst, h[6], plen as u32)))
        }
        _ => return None,
    };
    let seg = &p[hl..];
    let vouched = match (proto, hl) {
        (6, _) => seg_len >= 20,
        (17, _) => seg_len >= 8 && u16::from_be_bytes([seg[4], seg[5]]) as usize == seg_len && (seg[6] | seg[7]) != 0,
        (1, 20) | (58, 40) => seg_len >= 4,
        _ => false,
    };
    if !vouched {
        return None;
    }
    // A correct segment plus its pseudo-header sums to all ones, so the segment alone
    // sums to the pseudo-header's complement (ICMPv4, without one: to all ones).
    c.add_u16(pseudo.map_or(0xffff, |ph| !ph.fold()));
    Some(c)
}

impl<O: Outer, const COUNT: bool> GtpuEncap<O, COUNT> {
    const REWRITE: GtpuEncapNext = if O::IS_V6 { GtpuEncapNext::Ip6Rewrite } else { GtpuEncapNext::Ip4Rewrite };
    const LOOKUP: GtpuEncapNext = if O::IS_V6 { GtpuEncapNext::Ip6Lookup } else { GtpuEncapNext::Ip4Lookup };

    /// Prepend and patch the outer headers; the buffer then starts at the outer IP header.
    #[inline(always)]
    fn encap(t: &Tunnel, tc: u8, seq: Option<&mut u16>, from_inner: bool, buf: &mut Buffer) -> Result<(), GtpuEncapCounter> {
        let inner_len = buf.len();
        let port = match t.src_port {
            SrcPort::Fixed => None,
            SrcPort::FlowHash => Some(SrcPort::flow_hash_port(ip::flow::ip_flow_hash(buf.bytes()))),
        };
        let rl = t.rewrite_len as usize;
        let ua = t.udp_at as usize;
        let total = rl + inner_len;
        let ip_payload = total - ua;
        if ip_payload > u16::MAX as usize || (!O::IS_V6 && total > u16::MAX as usize) {
            return Err(GtpuEncapCounter::TooBig);
        }
        // Copy the whole right-aligned template (fixed size), then start at its header.
        let room = buf.prepend(MAX_REWRITE).map_err(|_| GtpuEncapCounter::NoHeadroom)?;
        room.copy_from_slice(&t.rewrite);
        if buf.advance(MAX_REWRITE - rl).is_err() {
            return Err(GtpuEncapCounter::NoHeadroom);
        }
        let Some(h) = buf.bytes_mut().get_mut(..rl) else { return Err(GtpuEncapCounter::NoHeadroom) };
        // The inner traffic class goes on the outer header, or its ECN field under the
        // tunnel's own DSCP (ip::outer::tos).
        let tc = t.marking.apply(tc);
        if O::IS_V6 {
            ip::outer::tos::set_ipv6_traffic_class(h, tc);
            h[4..6].copy_from_slice(&(ip_payload as u16).to_be_bytes());
        } else {
            h[1] = tc;
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            // The template's checksum is for TOS and length 0: one update for both words.
            let c = checksum::update32(u16::from_be_bytes([h[10], h[11]]), 0, (tc as u32) << 16 | total as u32);
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
        // UDP length, then the GTP-U length (everything after its first 8 bytes).
        h[ua + 4..ua + 6].copy_from_slice(&(ip_payload as u16).to_be_bytes());
        h[ua + 10..ua + 12].copy_from_slice(&((ip_payload - 16) as u16).to_be_bytes());
        if let Some(s) = seq {
            h[ua + 16..ua + 18].copy_from_slice(&s.to_be_bytes());
            *s = s.wrapping_add(1);
        }
        if let Some(p) = port {
            h[ua..ua + 2].copy_from_slice(&p.to_be_bytes());
        }
        match t.checksum {
            ChecksumMode::Zero => {}
            ChecksumMode::Offload => {
                // The device sums from the UDP header on; the field starts it off with
                // the pseudo-header (lengths included), not complemented.
                let mut c = t.pseudo;
                c.add_u32(ip_payload as u32);
                buf.bytes_mut()[ua + 6..ua + 8].copy_from_slice(&c.fold().to_be_bytes());
                buf.set_partial_checksum(ua, 6);
            }
            ChecksumMode::Software => {
                let seg = &mut buf.bytes_mut()[ua..];
                let hdrs = rl - ua;
                let derived = if from_inner { inner_sum_from_headers(&seg[hdrs..]) } else { None };
                let c = match derived {
                    // UDP + GTP-U headers summed, the inner packet from its headers.
                    Some(inner) => {
                        let mut c = t.pseudo;
                        c.add_u32(seg.len() as u32).add_bytes(&seg[..hdrs]).add(inner);
                        udp_checksum_field(c)
                    }
                    None => udp_checksum(t.pseudo, seg),
                };
                seg[6..8].copy_from_slice(&c.to_be_bytes());
            }
        }
        Ok(())
    }
}

impl<Cx: HasGtpu, O: Outer, const COUNT: bool> Node<Cx> for GtpuEncap<O, COUNT> {
    type Next = GtpuEncapNext;
    type Counter = GtpuEncapCounter;

    fn name(&self) -> &'static str {
        O::ENCAP
    }

    fn end_of_vector(&mut self, cx: &mut Cx) {
        if COUNT {
            cx.split().1.counters.flush();
        }
    }

    /// With `prefetch`: start loading every packet's tunnel entry before the first is
    /// encapsulated (a million tunnels do not fit in cache).
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        let (_, g) = cx.split();
        let t = &*g.tables;
        if !t.techniques.prefetch || t.tunnels.memory_bytes() < crate::tables::LARGE_TABLE_BYTES {
            return;
        }
        for &b in &input[..input.len().min(VECTOR_SIZE)] {
            let id = pool.get(b).meta.param as usize;
            if let Some(tun) = t.tunnels.get(id) {
                engine::prefetch::read(tun);
                engine::prefetch::read(&tun.pseudo);
            }
            if let Some(a) = t.outer_adj.get(id) {
                engine::prefetch::read(a);
            }
        }
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let (ipc, g) = cx.split();
        let id = buf.meta.param;
        let Some(t) = g.tables.tunnel(id) else {
            return Verdict::Drop(GtpuEncapCounter::NoTunnel);
        };
        let adj = g.tables.outer_adj(id);
        // Less ESP's bytes where a transport-mode SA protects the outer packets.
        let link_mtu = ipc.tables.tunnel_link_mtu(adj, t.header());
        let fragment_outer = match encap_mtu(buf, link_mtu, t.rewrite_len as usize, t.mtu) {
            EncapMtu::Encap { fragment_outer, clamped } => {
                if clamped {
                    counts.inc(GtpuEncapCounter::MssClamped);
                }
                fragment_outer
            }
            EncapMtu::TooBig { v4 } => {
                counts.inc(GtpuEncapCounter::InnerTooBig);
                return Verdict::Next(if v4 { GtpuEncapNext::Ip4IcmpError } else { GtpuEncapNext::Ip6IcmpError });
            }
            EncapMtu::FragmentInner => {
                counts.inc(GtpuEncapCounter::FragmentInner);
                return Verdict::Next(GtpuEncapNext::Ip4Fragment);
            }
            EncapMtu::Segment => {
                counts.inc(GtpuEncapCounter::GsoSegmented);
                return Verdict::Next(GtpuEncapNext::Segment);
            }
        };
        let tc = match inner_hop(buf.bytes_mut()) {
            InnerHop::Forwarded { tc, .. } => tc,
            InnerHop::Expired { v4, icmp } => {
                counts.inc(GtpuEncapCounter::InnerTtlExpired);
                buf.meta.param = icmp.encode();
                return Verdict::Next(if v4 { GtpuEncapNext::Ip4IcmpError } else { GtpuEncapNext::Ip6IcmpError });
            }
            InnerHop::NotIp => return Verdict::Drop(GtpuEncapCounter::BadInner),
        };
        if t.checksum.settle_inner_checksum(buf) {
            counts.inc(GtpuEncapCounter::InnerChecksumCompleted);
        }
        let inner_len = buf.len();
        let seq = if t.sequence { g.seq.get_mut(id as usize) } else { None };
        if let Err(c) = Self::encap(t, tc, seq, g.tables.techniques.checksum_from_inner, buf) {
            return Verdict::Drop(c);
        }
        counts.inc(GtpuEncapCounter::Encapsulated);
        if COUNT {
            g.counters.tx(id, inner_len);
        }
        buf.meta.adj = adj;
        // Fragments of an outer packet that a transport-mode SA protects would leave in
        // the clear: it goes whole to the SPD, and espN-encrypt fragments its ESP packet.
        let fragment_outer = fragment_outer.filter(|_| !ipc.tables.tunnel_esp_protected(adj, buf.bytes()));
        if fragment_outer.is_some() && ip::outer::fragment_outer(buf, fragment_outer) {
            counts.inc(GtpuEncapCounter::FragmentOuter);
            return Verdict::Next(if O::IS_V6 { GtpuEncapNext::Ip6Fragment } else { GtpuEncapNext::Ip4Fragment });
        }
        if !g.tables.techniques.encap_adjacency {
            // Forwarded like any other packet, the outer one loses a TTL in ipN-rewrite:
            // start one higher (GTP-U's outer TTL is 64) so both ways send the same bytes.
            let b = buf.bytes_mut();
            if O::IS_V6 {
                b[7] = b[7].saturating_add(1);
            } else {
                let mut h = wire::ipv4::Ipv4Packet::new_unchecked(&mut b[..20]);
                h.set_ttl(h.ttl().saturating_add(1));
                h.fill_checksum();
            }
            return Verdict::Next(Self::LOOKUP);
        }
        if ip::nodes::family::outer_to_output_features(&ipc.tables, buf, adj) {
            return Verdict::Next(Self::LOOKUP);
        }
        if ip::nodes::family::send_originated::<O::Ip>(&ipc.tables, buf, adj) {
            return Verdict::Next(GtpuEncapNext::Output);
        }
        // An adjacency with a link MTU is one that sends (a neighbour to solicit).
        Verdict::Next(if link_mtu.is_some() { Self::REWRITE } else { Self::LOOKUP })
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("tunnel gtpu_tunnel{} inner len {}", buf.meta.param, buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wire::checksum::{self, Checksum};

    fn ipv4(proto: u8, seg: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0, 198, 18, 0, 2, 198, 19, 7, 9];
        let total = (20 + seg.len()) as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        let c = checksum::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(seg);
        p
    }

    fn ipv6(nh: u8, seg: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(seg.len() as u16).to_be_bytes());
        p[6] = nh;
        p[7] = 64;
        p[8..24].copy_from_slice(&"2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        p[24..40].copy_from_slice(&"2001:db8:200::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(seg);
        p
    }

    /// Fill the L4 checksum field at `at` in the packet's segment.
    fn fill(p: &mut [u8], at: usize) {
        let v6 = p[0] >> 4 == 6;
        let hl = if v6 { 40 } else { 20 };
        let proto = if v6 { p[6] } else { p[9] };
        let seg_len = p.len() - hl;
        let mut c = if proto == 1 {
            Checksum::new()
        } else if v6 {
            let s = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&p[8..24]).unwrap());
            let d = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&p[24..40]).unwrap());
            checksum::pseudo_header_v6(&s, &d, proto, seg_len as u32)
        } else {
            checksum::pseudo_header_v4(
                std::net::Ipv4Addr::new(p[12], p[13], p[14], p[15]),
                std::net::Ipv4Addr::new(p[16], p[17], p[18], p[19]),
                proto,
                seg_len as u16,
            )
        };
        p[hl + at..hl + at + 2].copy_from_slice(&[0, 0]);
        c.add_bytes(&p[hl..]);
        let v = match c.finish() {
            0 if proto == 17 => 0xffff,
            x => x,
        };
        p[hl + at..hl + at + 2].copy_from_slice(&v.to_be_bytes());
    }

    proptest! {
        /// For inner packets with correct checksums, the sum from headers equals the sum
        /// of every byte, so the outer checksum is the same either way.
        #[test]
        fn header_sum_equals_full_sum(kind in 0u8..5, body in prop::collection::vec(any::<u8>(), 20..1500)) {
            let udp = |b: &[u8]| {
                let mut s = b.to_vec();
                let l = s.len() as u16;
                s[4..6].copy_from_slice(&l.to_be_bytes());
                s
            };
            let (mut p, at) = match kind {
                0 => (ipv4(17, &udp(&body)), 6),
                1 => (ipv4(6, &body), 16),
                2 => (ipv4(1, &body), 2),
                3 => (ipv6(17, &udp(&body)), 6),
                _ => (ipv6(58, &body), 2),
            };
            fill(&mut p, at);
            let derived = inner_sum_from_headers(&p).expect("vouched for");
            let mut full = Checksum::new();
            full.add_bytes(&p);
            // Equal as ones'-complement numbers (0 and 0xffff are both zero).
            let (a, b) = (derived.fold(), full.fold());
            prop_assert!(a == b || (a == 0xffff && b == 0) || (a == 0 && b == 0xffff), "{a:#x} vs {b:#x}");
        }
    }

    #[test]
    fn nothing_vouches_for_these() {
        let mut udp0 = vec![0u8; 16];
        udp0[4..6].copy_from_slice(&16u16.to_be_bytes());
        assert!(inner_sum_from_headers(&ipv4(17, &udp0)).is_none(), "UDP without a checksum");
        let mut frag = ipv4(6, &[0u8; 40]);
        frag[6] = 0x20;
        assert!(inner_sum_from_headers(&frag).is_none(), "a fragment");
        assert!(inner_sum_from_headers(&ipv4(47, &[0u8; 40])).is_none(), "GRE");
        assert!(inner_sum_from_headers(&ipv6(0, &[0u8; 40])).is_none(), "an extension header");
        let mut short = ipv4(6, &[0u8; 40]);
        short.truncate(50);
        assert!(inner_sum_from_headers(&short).is_none(), "length mismatch");
    }

    /// The outer traffic class under both DSCP models over both outer families and
    /// both inner ones: the inner byte whole (inherit), or the tunnel's DSCP with the
    /// inner ECN field (fixed); the outer IPv4 header checksum right, the IPv6 version
    /// and flow label untouched, the inner packet's own byte kept.
    #[test]
    fn outer_dscp_by_the_tunnel_policy() {
        use crate::tunnel::TunnelSpec;
        use ip::outer::tos;
        let mut pool = Pool::new(4, 0);
        for (local, remote) in [("198.18.1.1", "198.18.1.2"), ("2001:db8:1::1", "2001:db8:1::2")] {
            let v6 = local.contains(':');
            for (policy, inner_tc, want) in tos::DSCP_POLICY_EXAMPLES {
                for mut inner in [ipv4(17, &[0u8; 16]), ipv6(17, &[0u8; 16])] {
                    tos::set_traffic_class(&mut inner, inner_tc);
                    let mut s = TunnelSpec::new(local.parse().unwrap(), remote.parse().unwrap(), 7, 9);
                    s.dscp = policy;
                    let t = Tunnel::build(&s);
                    assert_eq!(t.spec().dscp, policy, "the spec reads the policy back");
                    let b = pool.alloc(128).unwrap();
                    pool.get_mut(b).write(&inner).unwrap();
                    let r = if v6 {
                        GtpuEncap::<crate::nodes::Ip6Outer, false>::encap(&t, inner_tc, None, false, pool.get_mut(b))
                    } else {
                        GtpuEncap::<crate::nodes::Ip4Outer, false>::encap(&t, inner_tc, None, false, pool.get_mut(b))
                    };
                    r.unwrap();
                    let o = pool.get(b).bytes();
                    let what = format!("{policy} over {local}, inner {inner_tc:#x}");
                    assert_eq!(tos::traffic_class(o), want, "{what}");
                    if v6 {
                        assert_eq!(u32::from_be_bytes([o[0], o[1], o[2], o[3]]) & 0xf00f_ffff, 0x6000_0000, "{what}");
                    } else {
                        assert!(wire::ipv4::Ipv4Packet::new_checked(o).unwrap().verify_checksum(), "{what}");
                    }
                    assert_eq!(tos::traffic_class(&o[o.len() - inner.len()..]), inner_tc, "{what}");
                    pool.free(b);
                }
            }
        }
    }
}
