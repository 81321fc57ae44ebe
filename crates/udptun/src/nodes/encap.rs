//! `gue4-encap` / `gue6-encap`: put an inner packet into its UDP tunnel. The IP lookup
//! sent it here with the tunnel id in `meta.param`. The node decrements the inner TTL
//! (entering a tunnel is a routing hop), prepends the tunnel's precomputed outer
//! headers, patches the lengths, the inner protocol (GUE) or EtherType (GRE), the source
//! port (a hash of the inner flow, so ECMP and RSS spread the tunnel's flows) and the
//! UDP checksum by the tunnel's mode, then sends the outer packet by the tunnel's outer
//! adjacency (resolved on the control plane) straight to `interface-output` with the
//! configured outer TTL, or to `ipN-rewrite` (a neighbour to solicit) or `ipN-lookup`
//! (no adjacency: the remote is routed into another tunnel, or not at all).
//!
//! A GSO frame goes to `ip-gso-segment` first; a partial inner checksum stays partial
//! under a zero outer checksum and is completed otherwise, since the outer one covers it.

use super::TunOuter;
use crate::context::HasUdpTun;
use crate::tunnel::{Encap, Tunnel, MAX_PLAIN_REWRITE, MAX_REWRITE};
use engine::{counters, next_nodes, Buffer, Counts, GsoKind, IfIndex, Node, Verdict};
use ip::outer::tos::Marking;
use ip::outer::{encap_mtu, inner_hop, udp_checksum, ChecksumMode, EncapMtu, InnerHop};
use ip::tables::Adjacency;
use wire::ipv4::Ipv4Packet;

next_nodes! {
    pub enum UdpTunEncapNext {
        Output = "interface-output", Ip4Rewrite = "ip4-rewrite", Ip4Lookup = "ip4-lookup",
        Ip6Rewrite = "ip6-rewrite", Ip6Lookup = "ip6-lookup",
        Ip4IcmpError = "ip4-icmp-error", Ip6IcmpError = "ip6-icmp-error",
        Segment = "ip-gso-segment", Ip4Fragment = "ip4-fragment", Ip6Fragment = "ip6-fragment",
    }
}

counters! {
    pub enum UdpTunEncapCounter {
        Encapsulated(Info, "encapsulated", "packets encapsulated"),
        InnerChecksumCompleted(Info, "inner-checksum-completed", "inner partial checksum completed before the outer one covered it"),
        GsoSegmented(Info, "gso-to-segment", "GSO frames sent to software segmentation before encapsulation"),
        NoTunnel(Error, "no-tunnel", "route names a tunnel that does not exist (deleted while the packet was in flight)"),
        NoHeadroom(Error, "no-headroom", "not enough headroom for the outer headers"),
        TooBig(Warn, "too-big", "encapsulated packet longer than an IP packet can be"),
        InnerTtlExpired(Info, "inner-ttl-expired", "inner TTL or hop limit would reach 0 (ICMP time exceeded requested)"),
        BadInner(Warn, "bad-inner", "inner packet is not IPv4 or IPv6"),
        InnerTooBig(Info, "inner-too-big", "inner packet larger than the tunnel MTU, with DF or IPv6 (ICMP frag-needed / packet-too-big requested)"),
        FragmentInner(Info, "fragment-inner", "inner IPv4 packet without DF larger than the tunnel MTU: fragmented before encapsulation (a parcel: split)"),
        FragmentOuter(Info, "fragment-outer", "encapsulated packet larger than the outer link MTU: the outer packet fragmented"),
        MssClamped(Info, "mss-clamped", "TCP SYN MSS lowered to fit the tunnel"),
    }
}

/// `COUNT`: the form that counts per tunnel; the graph runs it only while per-tunnel
/// counting is on ([`super::register`]).
pub struct UdpTunEncap<O: TunOuter, const COUNT: bool> {
    /// The fast path's plan for the tunnel last seen in this vector.
    plan: EncapPlan,
    outer: std::marker::PhantomData<O>,
}

impl<O: TunOuter, const COUNT: bool> Default for UdpTunEncap<O, COUNT> {
    fn default() -> Self {
        UdpTunEncap { plan: EncapPlan::default(), outer: std::marker::PhantomData }
    }
}

/// Prepend and patch the outer headers of `t` before the inner packet in `buf` (IPv4
/// when `inner_v4`; its traffic class `tc`, which the tunnel's marking makes the outer
/// one); the buffer then starts at the outer IP header.
#[inline(always)]
pub fn encap(t: &Tunnel, is_v6: bool, inner_v4: bool, tc: u8, buf: &mut Buffer) -> Result<(), UdpTunEncapCounter> {
    let port = t.src_port(ip::flow::ip_flow_hash(buf.bytes()));
    let inner_len = buf.len();
    let rl = t.rewrite_len as usize;
    let ua = t.udp_at as usize;
    let total = rl + inner_len;
    let ip_payload = total - ua;
    if ip_payload > u16::MAX as usize || (!is_v6 && total > u16::MAX as usize) {
        return Err(UdpTunEncapCounter::TooBig);
    }
    // Copy the whole right-aligned template (fixed size), then start at its header.
    let room = buf.prepend(MAX_REWRITE).map_err(|_| UdpTunEncapCounter::NoHeadroom)?;
    room.copy_from_slice(&t.rewrite);
    buf.advance(MAX_REWRITE - rl).map_err(|_| UdpTunEncapCounter::NoHeadroom)?;
    if !patch_outer(is_v6, t.ip_sum, buf.bytes_mut(), total, port, t.marking.apply(tc)) {
        return Err(UdpTunEncapCounter::NoHeadroom);
    }
    if !inner_v4 {
        name_inner6(t, buf.bytes_mut());
    }
    gre_options(t, &mut buf.bytes_mut()[ua + 8..]);
    match t.checksum {
        ChecksumMode::Zero => {}
        ChecksumMode::Offload => {
            // The device sums from the UDP header on; the field starts it off with the
            // pseudo-header (lengths included), not complemented.
            let mut c = t.pseudo;
            c.add_u32(ip_payload as u32);
            buf.bytes_mut()[ua + 6..ua + 8].copy_from_slice(&c.fold().to_be_bytes());
            buf.set_partial_checksum(ua, 6);
        }
        ChecksumMode::Software => {
            let seg = &mut buf.bytes_mut()[ua..];
            let c = udp_checksum(t.pseudo, seg);
            seg[6..8].copy_from_slice(&c.to_be_bytes());
        }
    }
    Ok(())
}

/// A GRE header's per-packet fields, in `gre` (the GRE header on): the next sequence
/// number, then the checksum over the header and the inner packet (which the UDP
/// checksum then covers).
#[inline]
fn gre_options(t: &Tunnel, gre: &mut [u8]) {
    if let Some((counter, at)) = &t.gre_sequence {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let at = *at as usize;
        gre[at..at + 4].copy_from_slice(&n.to_be_bytes());
    }
    if t.gre_checksum {
        wire::gre::GreRepr::fill_checksum(gre);
    }
}

/// Room in front of an inner packet for the Ethernet header and the longest outer headers
/// the fast path puts on (a plain tunnel's).
const HEAD: usize = 14 + MAX_PLAIN_REWRITE;
const _: () = assert!(HEAD >= 64, "put_head copies the first 64 bytes and the last 8");

/// What the fast path needs of one tunnel and its outer adjacency, gathered once per
/// vector (a vector's packets mostly go into one tunnel): the Ethernet header and the
/// outer headers as one right-aligned block, so a packet costs one copy and no table
/// lookups, and the few values its patches need. Rebuilt at every vector, since the
/// tables may be republished in between.
#[derive(Clone)]
pub struct EncapPlan {
    /// The tunnel (`meta.param`) planned for; [`EncapPlan::NONE`] for none yet.
    id: u32,
    /// The Ethernet header then the tunnel's outer headers, right-aligned, as they read
    /// for an inner IPv4 packet and for an inner IPv6 one (GUE's protocol, GRE's
    /// EtherType).
    head: [[u8; HEAD]; 2],
    /// Where the outer IP header starts in `head`.
    ip_at: usize,
    /// How many bytes of `head` go on a packet: the Ethernet and outer headers (at most
    /// `HEAD`; `HEAD + 14 - ip_at`). Kept beside `ip_at`: derived per packet, it cost
    /// four instructions a packet (`scripts/instr.sh gue4-encap`).
    front: usize,
    /// The longest inner packet that fits the link with the outer headers; 0 when the
    /// fast path cannot take this tunnel's packets at all (not plain, no resolved outer
    /// adjacency, no such tunnel).
    max_inner: usize,
    /// The tunnel's [`Tunnel::ip_sum`], [`Tunnel::src_port_min`], [`Tunnel::src_port_span`],
    /// [`Tunnel::marking`].
    ip_sum: u32,
    marking: Marking,
    port_min: u16,
    port_span: u32,
    tx_if: IfIndex,
    adj: u32,
    tunnel: Option<Tunnel>,
}

impl Default for EncapPlan {
    fn default() -> Self {
        EncapPlan {
            id: EncapPlan::NONE,
            head: [[0; HEAD]; 2],
            ip_at: HEAD,
            front: 14,
            max_inner: 0,
            ip_sum: 0,
            marking: Marking::INHERIT,
            port_min: 0,
            port_span: 1,
            tx_if: IfIndex(0),
            adj: 0,
            tunnel: None,
        }
    }
}

impl EncapPlan {
    pub const NONE: u32 = u32::MAX;

    /// The plan for tunnel `id` (`t`, if it exists) sent by adjacency `adj`.
    pub fn new(id: u32, t: Option<&Tunnel>, adj: u32, adjacency: &Adjacency) -> EncapPlan {
        let mut plan = EncapPlan { id, adj, ..EncapPlan::default() };
        let Some(t) = t else { return plan };
        let rl = t.rewrite_len as usize;
        if let Adjacency::Rewrite { tx_if, rewrite: l2, mtu } = adjacency {
            // The patch needs the whole IP and UDP headers (always there in a template).
            if t.plain && rl >= t.udp_at as usize + 8 && rl <= MAX_PLAIN_REWRITE {
                let ip_at = HEAD - rl;
                for head in &mut plan.head {
                    head[ip_at..].copy_from_slice(&t.rewrite[MAX_REWRITE - rl..]);
                    head[ip_at - 14..ip_at].copy_from_slice(l2);
                }
                name_inner6(t, &mut plan.head[1][ip_at..]);
                plan.ip_at = ip_at;
                plan.front = 14 + rl;
                plan.max_inner = (*mtu as usize).saturating_sub(rl);
                (plan.ip_sum, plan.port_min, plan.port_span) = (t.ip_sum, t.src_port_min, t.src_port_span);
                plan.marking = t.marking;
                plan.tx_if = *tx_if;
            }
        }
        plan.tunnel = Some(t.clone());
        plan
    }
}

/// The fast path, for the common packet: a tunnel the plan takes (plain: zero outer
/// checksum, no MTU cap, no clamping; a resolved outer adjacency), an inner IPv4 packet
/// without options or an IPv6 packet, with TTL to spare, no GSO frame, that fits the
/// link with the outer headers. The inner TTL goes down, the planned headers go on in
/// front, and the lengths, checksum and source port are patched: a forwarded packet's
/// rewrite plus one copy and the flow hash. False, with the buffer untouched, for
/// anything else.
#[inline(always)]
fn encap_planned<O: TunOuter>(p: &EncapPlan, buf: &mut Buffer) -> bool {
    let inner_len = buf.len();
    if inner_len > p.max_inner || buf.meta.offload.gso != GsoKind::None {
        return false;
    }
    // The room in front, then the inner header and the ports (the flow hash's words):
    // an IPv4 header without options, else an IPv6 one.
    if let Some(w) = buf.front_window::<{ HEAD + 24 }>(HEAD).filter(|w| w[HEAD] == 0x45 && w[HEAD + 8] > 1) {
        // Never `else`: the window is HEAD + 24 bytes.
        let Some((head, inner)) = w.split_first_chunk_mut::<HEAD>() else { return false };
        let Some(inner) = inner.first_chunk_mut::<24>() else { return false };
        let hash = ip::flow::ip4_flow_hash_plain(inner);
        Ipv4Packet::new_unchecked(&mut inner[..]).decrement_ttl();
        put_head::<O>(p, head, 0, inner_len, hash, inner[1]);
    } else if let Some(w) = buf.front_window::<{ HEAD + 44 }>(HEAD).filter(|w| w[HEAD] >> 4 == 6 && w[HEAD + 7] > 1) {
        let Some((head, inner)) = w.split_first_chunk_mut::<HEAD>() else { return false };
        let Some(h) = inner.first_chunk::<40>() else { return false };
        let hash = ip::flow::ip6_flow_hash(h, inner);
        let tc = ip::outer::tos::traffic_class(inner);
        inner[7] -= 1;
        put_head::<O>(p, head, 1, inner_len, hash, tc);
    } else {
        return false;
    }
    // The Ethernet header and the tunnel's outer headers join the packet.
    // At most HEAD, which the window proved there is room for.
    let Ok(()) = buf.extend_front(p.front) else { return false };
    buf.meta.tx_if = p.tx_if;
    buf.meta.adj = p.adj;
    true
}

/// The planned headers for the inner family (`family`: 0 IPv4, 1 IPv6) into the room in
/// front of an inner packet of `inner_len` bytes and traffic class `tc` (the outer one by
/// the tunnel's marking), patched for it.
#[inline(always)]
fn put_head<O: TunOuter>(p: &EncapPlan, head: &mut [u8; HEAD], family: usize, inner_len: usize, hash: u32, tc: u8) {
    // As 64 bytes and an overlapping last word: four vector moves and one word move,
    // which LLVM does not always choose for a 70-byte copy by itself.
    let from = &p.head[family];
    head[..64].copy_from_slice(&from[..64]);
    head[HEAD - 8..].copy_from_slice(&from[HEAD - 8..]);
    let port = crate::tunnel::src_port(p.port_min, p.port_span, hash);
    // Never false: the plan only takes templates with whole IP and UDP headers.
    let total = p.front - 14 + inner_len;
    let tc = p.marking.apply(tc);
    let patched = head.get_mut(p.ip_at..).is_some_and(|h| patch_outer(O::IS_V6, p.ip_sum, h, total, port, tc));
    debug_assert!(patched);
}

/// Patch the copied template `h` (outer IP header first) for a packet of `total` bytes
/// from source port `port` whose outer traffic class is `tc`: the IP length and traffic
/// class (and IPv4 checksum, from the template's precomputed sum `ip_sum`), the UDP
/// length and port. Fixed offsets per family, so one bounds check. False if `h` is
/// shorter than IP + UDP (never for a template).
#[inline(always)]
fn patch_outer(is_v6: bool, ip_sum: u32, h: &mut [u8], total: usize, port: u16, tc: u8) -> bool {
    let port = port.to_be_bytes();
    if is_v6 {
        let Some(h) = h.first_chunk_mut::<48>() else { return false };
        let len = ((total - 40) as u16).to_be_bytes();
        ip::outer::tos::set_ipv6_traffic_class(h, tc);
        h[4..6].copy_from_slice(&len);
        h[40..42].copy_from_slice(&port);
        h[44..46].copy_from_slice(&len);
    } else {
        let Some(h) = h.first_chunk_mut::<28>() else { return false };
        h[1] = tc;
        h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        // The template's TOS byte is 0: the outer one adds its value to the first word.
        let mut c = ip_sum + total as u32 + tc as u32;
        c = (c & 0xffff) + (c >> 16);
        c = (c & 0xffff) + (c >> 16);
        h[10..12].copy_from_slice(&(!(c as u16)).to_be_bytes());
        h[20..22].copy_from_slice(&port);
        h[24..26].copy_from_slice(&((total - 20) as u16).to_be_bytes());
    }
    true
}

/// Make the template `h` (outer IP header first), which names an inner IPv4 packet (GUE
/// protocol 4, GRE EtherType 0x0800), name an inner IPv6 one.
fn name_inner6(t: &Tunnel, h: &mut [u8]) {
    let e = t.udp_at as usize + 8;
    match t.encap {
        Encap::Gue => h[e + 1] = 41,
        Encap::Gre => h[e + 2..e + 4].copy_from_slice(&0x86ddu16.to_be_bytes()),
        Encap::Direct => {}
    }
}

impl<Cx: HasUdpTun, O: TunOuter, const COUNT: bool> Node<Cx> for UdpTunEncap<O, COUNT> {
    type Next = UdpTunEncapNext;
    type Counter = UdpTunEncapCounter;

    fn name(&self) -> &'static str {
        O::ENCAP
    }

    fn end_of_vector(&mut self, cx: &mut Cx) {
        if COUNT {
            cx.split_udptun().1.counters.flush();
        }
    }

    #[inline(always)]
    fn prepare(&mut self, _cx: &mut Cx, _pool: &mut engine::Pool, _input: &[engine::BufIdx]) {
        self.plan.id = EncapPlan::NONE;
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let (ipc, u) = cx.split_udptun();
        let id = buf.meta.param;
        if id != self.plan.id {
            let adj = u.tables.outer_adj(id);
            self.plan = EncapPlan::new(id, u.tables.tunnel(id), adj, ipc.tables.adjacency(adj));
            // Out of a link with an SPD, the outer packets meet its policies: not planned
            // straight out (`outer_to_output_features` below).
            if self.plan.max_inner != 0 && ipc.tables.has_spd(self.plan.tx_if) {
                self.plan.max_inner = 0;
            }
        }
        let inner_len = buf.len();
        if encap_planned::<O>(&self.plan, buf) {
            counts.inc(UdpTunEncapCounter::Encapsulated);
            if COUNT {
                u.counters.tx(id, inner_len);
            }
            return Verdict::Next(UdpTunEncapNext::Output);
        }
        // The plan was made for this tunnel: its copy of the tunnel and its adjacency.
        let Some(t) = &self.plan.tunnel else {
            return Verdict::Drop(UdpTunEncapCounter::NoTunnel);
        };
        let adj = self.plan.adj;
        // Less ESP's bytes where a transport-mode SA protects the outer packets.
        let link_mtu = ipc.tables.tunnel_link_mtu(adj, &t.rewrite[MAX_REWRITE - t.rewrite_len as usize..]);
        let fragment_outer = match encap_mtu(buf, link_mtu, t.rewrite_len as usize, t.mtu) {
            EncapMtu::Encap { fragment_outer, clamped } => {
                if clamped {
                    counts.inc(UdpTunEncapCounter::MssClamped);
                }
                fragment_outer
            }
            EncapMtu::TooBig { v4 } => {
                counts.inc(UdpTunEncapCounter::InnerTooBig);
                return Verdict::Next(if v4 { UdpTunEncapNext::Ip4IcmpError } else { UdpTunEncapNext::Ip6IcmpError });
            }
            EncapMtu::FragmentInner => {
                counts.inc(UdpTunEncapCounter::FragmentInner);
                // An IPv6 inner packet here is a parcel, which `ip6-fragment` has split.
                let v6 = buf.bytes().first().is_some_and(|v| v >> 4 == 6);
                return Verdict::Next(if v6 { UdpTunEncapNext::Ip6Fragment } else { UdpTunEncapNext::Ip4Fragment });
            }
            EncapMtu::Segment => {
                counts.inc(UdpTunEncapCounter::GsoSegmented);
                return Verdict::Next(UdpTunEncapNext::Segment);
            }
        };
        let (inner_v4, tc) = match inner_hop(buf.bytes_mut()) {
            InnerHop::Forwarded { v4, tc } => (v4, tc),
            InnerHop::Expired { v4, icmp } => {
                counts.inc(UdpTunEncapCounter::InnerTtlExpired);
                buf.meta.param = icmp.encode();
                return Verdict::Next(if v4 { UdpTunEncapNext::Ip4IcmpError } else { UdpTunEncapNext::Ip6IcmpError });
            }
            InnerHop::NotIp => return Verdict::Drop(UdpTunEncapCounter::BadInner),
        };
        // A GRE checksum covers the inner packet as sent: its own checksum complete.
        let settle = if t.gre_checksum { ip::outer::ChecksumMode::Software } else { t.checksum };
        if settle.settle_inner_checksum(buf) {
            counts.inc(UdpTunEncapCounter::InnerChecksumCompleted);
        }
        if let Err(c) = encap(t, O::IS_V6, inner_v4, tc, buf) {
            return Verdict::Drop(c);
        }
        counts.inc(UdpTunEncapCounter::Encapsulated);
        if COUNT {
            u.counters.tx(id, inner_len);
        }
        buf.meta.adj = adj;
        // Fragments of an outer packet that a transport-mode SA protects would leave in
        // the clear: it goes whole to the SPD, and espN-encrypt fragments its ESP packet.
        let fragment_outer = fragment_outer.filter(|_| !ipc.tables.tunnel_esp_protected(adj, buf.bytes()));
        if fragment_outer.is_some() && ip::outer::fragment_outer(buf, fragment_outer) {
            counts.inc(UdpTunEncapCounter::FragmentOuter);
            return Verdict::Next(if O::IS_V6 { UdpTunEncapNext::Ip6Fragment } else { UdpTunEncapNext::Ip4Fragment });
        }
        if ip::nodes::family::outer_to_output_features(&ipc.tables, buf, adj) {
            return Verdict::Next(if O::IS_V6 { UdpTunEncapNext::Ip6Lookup } else { UdpTunEncapNext::Ip4Lookup });
        }
        if ip::nodes::family::send_originated::<O::Ip>(&ipc.tables, buf, adj) {
            return Verdict::Next(UdpTunEncapNext::Output);
        }
        let resolved = link_mtu.is_some();
        match (resolved, O::IS_V6) {
            (true, false) => Verdict::Next(UdpTunEncapNext::Ip4Rewrite),
            (true, true) => Verdict::Next(UdpTunEncapNext::Ip6Rewrite),
            (false, false) => Verdict::Next(UdpTunEncapNext::Ip4Lookup),
            (false, true) => Verdict::Next(UdpTunEncapNext::Ip6Lookup),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("tunnel udp_tunnel{} inner len {}", buf.meta.param, buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tunnel::UdpTunnelSpec;
    use engine::Pool;
    use std::net::IpAddr;
    use wire::checksum;

    fn inner_udp4(src_port: u16) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 2, 198, 19, 0, 1];
        let c = checksum::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(&src_port.to_be_bytes());
        p.extend_from_slice(&[0, 9, 0, 8, 0, 0]);
        p
    }

    /// The fast path by a plan for `t` sent by `adj` (adjacency 5), outer IPv6 or IPv4.
    fn fast_path(v6: bool, t: &Tunnel, adj: &Adjacency, buf: &mut Buffer) -> bool {
        let plan = EncapPlan::new(1, Some(t), 5, adj);
        let ok = if v6 { encap_planned::<ip::outer::Ip6Outer>(&plan, buf) } else { encap_planned::<ip::outer::Ip4Outer>(&plan, buf) };
        assert!(!ok || buf.meta.adj == 5);
        ok
    }

    fn spec(encap: Encap, local: &str, remote: &str) -> UdpTunnelSpec {
        let (l, r): (IpAddr, IpAddr) = (local.parse().unwrap(), remote.parse().unwrap());
        UdpTunnelSpec::new(l, r, encap, encap.default_port().unwrap_or(5555))
    }

    #[test]
    fn gue_over_ipv4_headers() {
        let t = Tunnel::new(&spec(Encap::Gue, "198.18.1.1", "198.18.1.2"));
        let mut pool = Pool::new(4, 0);
        let b = pool.alloc(64).unwrap();
        let inner = inner_udp4(1000);
        pool.get_mut(b).write(&inner).unwrap();
        encap(&t, false, true, 0, pool.get_mut(b)).unwrap();
        let o = pool.get(b).bytes();
        assert_eq!(o.len(), 20 + 8 + 4 + inner.len());
        let ip = wire::ipv4::Ipv4Packet::new_checked(o).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.total_len(), ip.ttl()), (o.len(), 64));
        let u = wire::udp::UdpPacket::new_checked(&o[20..]).unwrap();
        assert_eq!((u.dst_port(), u.len(), u.checksum()), (6080, o.len() - 20, 0));
        assert!(u.src_port() >= 49152);
        assert_eq!(&o[28..32], &[0, 4, 0, 0], "GUE variant 0, IPIP");
        assert_eq!(&o[32..], &inner[..]);
    }

    #[test]
    fn gre_over_ipv6_with_key_and_software_checksum() {
        let mut s = spec(Encap::Gre, "2001:db8:1::1", "2001:db8:1::2");
        s.gre_key = Some(0x01020304);
        let t = Tunnel::new(&s);
        let mut pool = Pool::new(4, 0);
        let b = pool.alloc(64).unwrap();
        let mut inner = vec![0x60, 0, 0, 0, 0, 0, 59, 64];
        inner.extend_from_slice(&[0x20; 32]);
        pool.get_mut(b).write(&inner).unwrap();
        encap(&t, true, false, 0, pool.get_mut(b)).unwrap();
        let o = pool.get(b).bytes();
        let ip = wire::ipv6::Ipv6Packet::new_checked(o).unwrap();
        let u = wire::udp::UdpPacket::new_checked(&o[40..]).unwrap();
        assert_eq!(u.dst_port(), 4754);
        assert!(u.verify_checksum_v6(&ip.src_addr(), &ip.dst_addr()));
        let g = wire::gre::GrePacket::new_checked(u.payload()).unwrap();
        assert_eq!((g.protocol(), g.key()), (0x86dd, Some(0x01020304)));
        assert_eq!(g.payload(), &inner[..]);
    }

    #[test]
    fn gre_checksum_and_sequence_numbers_per_packet() {
        let mut s = spec(Encap::Gre, "198.18.1.1", "198.18.1.2");
        (s.gre_key, s.gre_checksum, s.gre_sequence) = (Some(7), true, true);
        let shared = crate::tunnel::GreSequence::default();
        shared.store(0xffff_fffe, std::sync::atomic::Ordering::Relaxed);
        // Two table versions of one tunnel count on the control plane's counter.
        let (t1, t2) = (Tunnel::new(&s).counting_on(&shared), Tunnel::new(&s).counting_on(&shared));
        assert!(!t1.plain, "the fast path's template has no per-packet GRE fields");
        let l2 = [2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let adj = Adjacency::Rewrite { tx_if: engine::IfIndex(3), rewrite: l2, mtu: 1500 };
        let mut pool = Pool::new(8, 0);
        let mut seqs = Vec::new();
        for (k, t) in [&t1, &t2, &t1].into_iter().enumerate() {
            let inner = inner_udp4(1000 + k as u16);
            let b = pool.alloc(64).unwrap();
            pool.get_mut(b).write(&inner).unwrap();
            assert!(!fast_path(false, t, &adj, pool.get_mut(b)));
            encap(t, false, true, 0, pool.get_mut(b)).unwrap();
            let o = pool.get(b).bytes();
            let u = wire::udp::UdpPacket::new_checked(&o[20..]).unwrap();
            assert_eq!(u.len(), o.len() - 20);
            let g = wire::gre::GrePacket::new_checked(u.payload()).unwrap();
            assert_eq!((g.header_len(), g.protocol(), g.key()), (16, 0x0800, Some(7)));
            assert!(g.has_checksum() && g.verify_checksum(), "{:02x?}", u.payload());
            assert_eq!(g.payload(), &inner[..]);
            seqs.push(g.sequence().unwrap());
            // A flipped payload bit breaks the checksum: it covers the inner packet.
            let mut bad = u.payload().to_vec();
            *bad.last_mut().unwrap() ^= 1;
            assert!(!wire::gre::GrePacket::new_checked(&bad[..]).unwrap().verify_checksum());
        }
        assert_eq!(seqs, [0xffff_fffe, 0xffff_ffff, 0], "one counter across table versions, wrapping");
    }

    /// The fast path sends exactly what the general path plus `ipN-rewrite`'s Ethernet
    /// header would, for both outer families, every encapsulation and both inner
    /// families; and it declines what it must not take.
    #[test]
    fn fast_path_matches_the_general_path() {
        let l2 = [2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let inner6 = {
            let mut p = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
            p.extend_from_slice(&[0x20; 32]);
            p.extend_from_slice(&[0x13, 0x88, 0, 9, 0, 8, 0, 0]);
            p
        };
        let mut pool = Pool::new(8, 0);
        for (local, remote) in [("198.18.1.1", "198.18.1.2"), ("2001:db8:1::1", "2001:db8:1::2")] {
            for encap_kind in [Encap::Gue, Encap::Gre, Encap::Direct] {
                for inner in [inner_udp4(1000), inner_udp4(4242), inner6.clone()] {
                    let mut s = spec(encap_kind, local, remote);
                    s.checksum = ChecksumMode::Zero;
                    s.gre_key = (encap_kind == Encap::Gre).then_some(7);
                    let t = Tunnel::new(&s);
                    let adj = Adjacency::Rewrite { tx_if: engine::IfIndex(3), rewrite: l2, mtu: 1500 };
                    let (fast, slow) = (pool.alloc(64).unwrap(), pool.alloc(64).unwrap());
                    pool.get_mut(fast).write(&inner).unwrap();
                    pool.get_mut(slow).write(&inner).unwrap();
                    let v6 = local.contains(':');
                    let ok = fast_path(v6, &t, &adj, pool.get_mut(fast));
                    assert!(ok);
                    let b = pool.get_mut(slow);
                    let InnerHop::Forwarded { v4, tc } = inner_hop(b.bytes_mut()) else { panic!("inner") };
                    encap(&t, v6, v4, tc, b).unwrap();
                    b.prepend(14).unwrap().copy_from_slice(&l2);
                    assert_eq!(pool.get(fast).bytes(), pool.get(slow).bytes(), "{encap_kind:?} over {local}");
                    assert_eq!(pool.get(fast).meta.tx_if, engine::IfIndex(3));
                    if !v6 {
                        assert!(wire::ipv4::Ipv4Packet::new_checked(&pool.get(fast).bytes()[14..]).unwrap().verify_checksum());
                    }
                    pool.free(fast);
                    pool.free(slow);
                }
            }
        }
        // Declined, buffer untouched: a link too small, TTL 1, a tunnel that clamps.
        let t = Tunnel::new(&spec(Encap::Gue, "198.18.1.1", "198.18.1.2"));
        let b = pool.alloc(64).unwrap();
        pool.get_mut(b).write(&inner_udp4(1)).unwrap();
        let small = Adjacency::Rewrite { tx_if: engine::IfIndex(3), rewrite: l2, mtu: 40 };
        assert!(!fast_path(false, &t, &small, pool.get_mut(b)));
        pool.get_mut(b).bytes_mut()[8] = 1;
        let adj = Adjacency::Rewrite { tx_if: engine::IfIndex(3), rewrite: l2, mtu: 1500 };
        assert!(!fast_path(false, &t, &adj, pool.get_mut(b)));
        let mut s = spec(Encap::Gue, "198.18.1.1", "198.18.1.2");
        s.mtu.mss_clamp = true;
        pool.get_mut(b).bytes_mut()[8] = 64;
        assert!(!fast_path(false, &Tunnel::new(&s), &adj, pool.get_mut(b)));
        assert_eq!(pool.get(b).bytes(), &inner_udp4(1)[..]);
    }

    /// The outer traffic class under both DSCP models, on the fast and the general path,
    /// both outer and both inner families: the inner byte whole (inherit), or the
    /// tunnel's DSCP with the inner ECN field (fixed); the IPv4 header checksum right.
    #[test]
    fn outer_dscp_by_the_tunnel_policy() {
        use ip::outer::tos;
        let l2 = [2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let adj = Adjacency::Rewrite { tx_if: engine::IfIndex(3), rewrite: l2, mtu: 1500 };
        let mut pool = Pool::new(8, 0);
        for (local, remote) in [("198.18.1.1", "198.18.1.2"), ("2001:db8:1::1", "2001:db8:1::2")] {
            let v6 = local.contains(':');
            for (policy, inner_tc, want) in tos::DSCP_POLICY_EXAMPLES {
                for inner_v6 in [false, true] {
                    let mut inner = if inner_v6 {
                        let mut p = vec![0x60, 0, 0, 0, 0, 8, 17, 64];
                        p.extend_from_slice(&[0x20; 32]);
                        p.extend_from_slice(&[0x13, 0x88, 0, 9, 0, 8, 0, 0]);
                        p
                    } else {
                        inner_udp4(1000)
                    };
                    tos::set_traffic_class(&mut inner, inner_tc);
                    let mut s = spec(Encap::Gue, local, remote);
                    (s.checksum, s.dscp) = (ChecksumMode::Zero, policy);
                    let t = Tunnel::new(&s);
                    let (fast, slow) = (pool.alloc(64).unwrap(), pool.alloc(64).unwrap());
                    pool.get_mut(fast).write(&inner).unwrap();
                    pool.get_mut(slow).write(&inner).unwrap();
                    assert!(fast_path(v6, &t, &adj, pool.get_mut(fast)));
                    let b = pool.get_mut(slow);
                    let InnerHop::Forwarded { v4, tc } = inner_hop(b.bytes_mut()) else { panic!("inner") };
                    encap(&t, v6, v4, tc, b).unwrap();
                    let what = format!("{policy} over {local}, inner v6 {inner_v6}, inner {inner_tc:#x}");
                    for o in [&pool.get(fast).bytes()[14..], pool.get(slow).bytes()] {
                        assert_eq!(tos::traffic_class(o), want, "{what}");
                        if !v6 {
                            assert!(wire::ipv4::Ipv4Packet::new_checked(o).unwrap().verify_checksum(), "{what}");
                        }
                        // The inner packet keeps its own traffic class.
                        assert_eq!(tos::traffic_class(&o[o.len() - inner.len()..]), inner_tc, "{what}");
                    }
                    pool.free(fast);
                    pool.free(slow);
                }
            }
        }
    }

    proptest::proptest! {
        /// Any inner packet (any version nibble, TTL, protocol, length; IPv4 options
        /// too) in any plain tunnel: the fast path either declines and leaves the buffer
        /// as it was, or sends the general path's bytes.
        #[test]
        fn fast_path_agrees_with_the_general_path_on_any_packet(
            v6_outer in proptest::bool::ANY,
            kind in 0usize..3,
            mut inner in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
            version in 0u8..16,
            ihl in 5u8..16,
            mtu in 60u16..300,
            src_min in 1024u16..60000,
            dscp in proptest::option::of(0u8..64),
        ) {
            let encap_kind = [Encap::Gue, Encap::Gre, Encap::Direct][kind];
            if let Some(b) = inner.first_mut() {
                *b = version << 4 | ihl;
            }
            let (local, remote) = if v6_outer { ("2001:db8:1::1", "2001:db8:1::2") } else { ("198.18.1.1", "198.18.1.2") };
            let mut s = spec(encap_kind, local, remote);
            s.checksum = ChecksumMode::Zero;
            s.src_port_min = src_min;
            s.dscp = dscp.map_or(ip::outer::tos::Dscp::Inherit, ip::outer::tos::Dscp::Fixed);
            let t = Tunnel::new(&s);
            let l2 = [2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
            let adj = Adjacency::Rewrite { tx_if: engine::IfIndex(3), rewrite: l2, mtu };
            let mut pool = Pool::new(4, 0);
            let (fast, slow) = (pool.alloc(256).unwrap(), pool.alloc(256).unwrap());
            pool.get_mut(fast).write(&inner).unwrap();
            pool.get_mut(slow).write(&inner).unwrap();
            let ok = fast_path(v6_outer, &t, &adj, pool.get_mut(fast));
            if !ok {
                proptest::prop_assert_eq!(pool.get(fast).bytes(), &inner[..]);
                return Ok(());
            }
            proptest::prop_assert!(inner.len() + t.rewrite_len as usize <= mtu as usize);
            let b = pool.get_mut(slow);
            let InnerHop::Forwarded { v4, tc } = inner_hop(b.bytes_mut()) else { panic!("the fast path took a packet the general path would not") };
            encap(&t, v6_outer, v4, tc, b).unwrap();
            b.prepend(14).unwrap().copy_from_slice(&l2);
            proptest::prop_assert_eq!(pool.get(fast).bytes(), pool.get(slow).bytes());
        }
    }

    /// The spread test: 10 000 inner flows over 16 buckets of source ports, no
    /// bucket more than 10 % above the mean.
    #[test]
    fn source_ports_spread_inner_flows() {
        let t = Tunnel::new(&spec(Encap::Direct, "198.18.1.1", "198.18.1.2"));
        let mut buckets = [0u32; 16];
        for k in 0..10_000u16 {
            let p = t.src_port(ip::flow::ip_flow_hash(&inner_udp4(20_000 + k)));
            assert!(p >= 49152);
            buckets[(p % 16) as usize] += 1;
        }
        let mean = 10_000 / 16;
        assert!(buckets.iter().all(|&n| n * 10 <= mean * 11), "{buckets:?}");
    }
}
