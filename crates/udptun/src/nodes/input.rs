//! `gue4-input` / `gue6-input`: UDP tunnel packets addressed to one of our endpoints on
//! a tunnel port (`ipN-local` sends them here).
//!
//! Finds the tunnel by (our address, the peer's address, port), checks the outer UDP
//! (length; checksum, with a zero IPv6 checksum only on tunnels that accept it, RFC
//! 6936), then the tunnel's encapsulation: a GUE header (data messages are stripped;
//! control messages go to the control plane; unknown flags and a header longer than the
//! packet are dropped), a GRE header (version 0, the tunnel's key, a correct checksum if
//! present) or nothing. The inner IPv4 or IPv6 packet goes to `ipN-lookup` when it passes
//! `ipN-input`'s fast-path checks here, else to `ipN-input`. `ethernet-input` hands this
//! node the packets for our tunnel endpoints and ports directly, their outer header
//! checked as `ipN-input` would (no `ipN-input`, no lookup, no `ipN-local`).

use super::{HeadMatch, OuterUdp, TunOuter};
use crate::context::{HasUdpTun, UdpTunEvent};
use crate::tunnel::{Encap, Tunnel};
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use ip::hint::{TunnelHint, TunnelHints};
use ip::nodes::input_fast_path_len;
use ip::outer::tos::EcnDecap;
use ip::outer::{udp_checksum_ok, OuterError};
use ip::tables::{TunnelKind, TunnelRef, UdpApp};
use ip::urpf::{Arrival, SourceFault, Urpf};
use std::num::NonZeroU32;
use wire::gre::{GreError, GrePacket, GreRepr};
use wire::gue::{self, GueError, GuePacket, GueRepr, Variant};

next_nodes! {
    pub enum UdpTunInputNext { Ip4Input = "ip4-input", Ip6Input = "ip6-input", Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup" }
}

counters! {
    pub enum UdpTunInputCounter {
        Decapsulated(Info, "decapsulated", "packets decapsulated"),
        MssClamped(Info, "mss-clamped", "TCP SYN MSS lowered to fit the tunnel"),
        EcnMarked(Info, "ecn-marked", "the outer header's congestion mark (CE, or ECT(1)) copied into the inner packet (RFC 6040)"),
        EcnCeNotEct(Warn, "ecn-ce-not-ect", "outer header marked CE over an inner packet that is not ECN-capable: dropped, as RFC 6040 asks"),
        ControlMessages(Info, "control-messages", "GUE control messages (C bit): passed to the control plane, not forwarded"),
        EventQueueFull(Warn, "event-queue-full", "control message lost: control queue full"),
        OuterTruncated(Warn, "outer-truncated", "outer IP header truncated"),
        NotPlainUdp(Warn, "outer-not-plain-udp", "IPv6 extension headers before UDP, or an outer fragment (not reassembled yet)"),
        BadUdpLength(Warn, "bad-udp-length", "UDP length below 8 or past the packet"),
        BadUdpChecksum(Warn, "bad-udp-checksum", "outer UDP checksum mismatch"),
        ZeroChecksumRefused(Warn, "zero-checksum-refused", "zero UDP checksum over IPv6 on a tunnel not configured to accept it (RFC 6936)"),
        NoTunnel(Warn, "no-tunnel", "no tunnel joins this peer and our address on this port"),
        GueTruncated(Warn, "gue-truncated", "GUE header or its Hlen past the packet"),
        GueBadVersion(Warn, "gue-bad-version", "GUE version 2 or 3, or a variant 1 payload that is not IP"),
        GueUnknownFlags(Warn, "gue-unknown-flags", "GUE flags or private flags this implementation cannot skip"),
        GueRemoteChecksumCompleted(Info, "gue-remote-checksum-completed", "inner checksum completed for GUE remote checksum offload"),
        GueBadRemoteChecksum(Warn, "gue-bad-remote-checksum", "GUE remote checksum offload start or field outside the inner packet"),
        GreMalformed(Warn, "gre-malformed", "GRE header truncated, not version 0, or with reserved bits set"),
        GreBadChecksum(Warn, "gre-bad-checksum", "GRE checksum mismatch"),
        GreKeyMismatch(Warn, "gre-key-mismatch", "GRE key absent, unexpected or not the tunnel's"),
        UnsupportedInner(Warn, "unsupported-inner", "inner protocol is not IPv4 or IPv6"),
        UrpfNoRoute(Warn, "urpf-no-route", "uRPF: no route back to the inner packet's source (or a blackhole)"),
        UrpfWrongTunnel(Warn, "urpf-wrong-tunnel", "strict uRPF: the route back to the inner packet's source does not go into this tunnel"),
        UrpfOwnAddress(Warn, "urpf-own-address", "uRPF: the inner packet's source is one of the gateway's own addresses"),
    }
}

/// `COUNT`: the form that counts per tunnel; the graph runs it only while per-tunnel
/// counting is on ([`super::register`]).
pub struct UdpTunInput<O: TunOuter, const COUNT: bool> {
    /// The tunnel last looked up: a vector's packets mostly come from a few peers.
    /// Forgotten at each vector, since the tables may be republished between vectors.
    /// Boxed so that it stays in memory, where the fast path reads it: inline, the
    /// compiler carries its fields in registers around the node's loop and shuffles them
    /// on every packet (three instructions a packet, by `scripts/instr.sh`).
    last: Box<Last<O>>,
}

/// The tunnel last looked up, and its fast path's test when its packets can take it;
/// and the tag of the hint this node published last (see [`ip::hint`]) with the inner
/// family it is for (true: IPv4). A packet `ethernet-input` found matching the hint is
/// known to be a plain data packet of that tunnel, with its outer header checked.
struct Last<O: TunOuter> {
    plan: Option<DecapPlan<O::Addr>>,
    fast: Option<FastDecap<O::Head>>,
    hinted: Option<(NonZeroU32, bool, u32)>,
}

/// The decap fast path for one tunnel: the test of its fixed outer header (which
/// includes a zero UDP checksum) and its plain data headers.
#[derive(Clone, Copy)]
struct FastDecap<H> {
    head: H,
    plain: ([u8; 4], [u8; 4]),
}

impl<O: TunOuter> Last<O> {
    fn new(plan: Option<DecapPlan<O::Addr>>) -> Self {
        let fast = plan.and_then(|p| {
            let (local, remote, port) = p.key;
            let plain = p.plain.filter(|_| p.zero_checksum_ok)?;
            Some(FastDecap { head: O::head(local, remote, port), plain })
        });
        Last { plan, fast, hinted: None }
    }
}

/// What decap needs of one tunnel, kept for the packets after the first in a vector.
#[derive(Clone, Copy)]
struct DecapPlan<A> {
    /// (our address, the peer's, the port) it was looked up by.
    key: (A, A, u16),
    id: u32,
    /// The fast path's test: the four header bytes after UDP of a plain data packet
    /// with an inner IPv4 and with an inner IPv6 packet (a GUE header without flags or
    /// extensions, a GRE header without options). `None`: this tunnel's packets always
    /// take the full path (no such header, a GRE key, MSS clamping, a source check).
    plain: Option<([u8; 4], [u8; 4])>,
    /// A zero UDP checksum is accepted (always over IPv4, RFC 6936 over IPv6).
    zero_checksum_ok: bool,
}

impl<A> DecapPlan<A> {
    fn new(key: (A, A, u16), id: u32, t: &Tunnel, is_v6: bool) -> Self {
        let plain = if t.mtu.mss_clamp || t.urpf != Urpf::Off { None } else { plain_headers(t.encap, t.gre_key) };
        DecapPlan { key, id, plain, zero_checksum_ok: !is_v6 || t.accept_zero_checksum }
    }
}

/// The four bytes after UDP of a plain data packet carrying IPv4 and carrying IPv6, for
/// the encapsulations that have them: a GUE header without flags or extensions (version
/// 0, C clear, Hlen 0), a GRE header without options (no key). Either is the whole
/// encapsulation header.
fn plain_headers(encap: Encap, key: Option<u32>) -> Option<([u8; 4], [u8; 4])> {
    match (encap, key) {
        (Encap::Gue, _) => Some(([0, 4, 0, 0], [0, 41, 0, 0])),
        (Encap::Gre, None) => Some(([0, 0, 0x08, 0x00], [0, 0, 0x86, 0xdd])),
        (Encap::Gre, Some(_)) | (Encap::Direct, _) => None,
    }
}

impl<O: TunOuter, const COUNT: bool> Default for UdpTunInput<O, COUNT> {
    fn default() -> Self {
        UdpTunInput { last: Box::new(Last::new(None)) }
    }
}

/// What comes after the UDP header: the encapsulation's header length and the inner
/// family (true: IPv4), or why it is refused. `Ok(None)`: a GUE control message.
#[inline(always)]
fn inner(encap: Encap, key: Option<u32>, p: &[u8]) -> Result<Option<(usize, bool)>, UdpTunInputCounter> {
    // The plain data header in one comparison; everything else takes the full parse.
    if let (Some((for_v4, for_v6)), Some(h)) = (plain_headers(encap, key), p.first_chunk::<4>()) {
        if *h == for_v4 || *h == for_v6 {
            return Ok(Some((4, *h == for_v4)));
        }
    }
    inner_parsed(encap, key, p)
}

/// [`inner`] by the wire library's full parse.
fn inner_parsed(encap: Encap, key: Option<u32>, p: &[u8]) -> Result<Option<(usize, bool)>, UdpTunInputCounter> {
    use UdpTunInputCounter as C;
    let by_version = |b: &[u8], skip: usize| match b.get(skip).map(|v| v >> 4) {
        Some(4) => Ok(Some((skip, true))),
        Some(6) => Ok(Some((skip, false))),
        _ => Err(C::UnsupportedInner),
    };
    match encap {
        Encap::Direct => by_version(p, 0),
        Encap::Gue => match gue::variant(p) {
            Some(Variant::Direct) => by_version(p, 0),
            None if p.is_empty() => Err(C::GueTruncated),
            None => Err(C::GueBadVersion),
            Some(Variant::Header) => {
                let g = GuePacket::new_checked(p).map_err(|e| match e {
                    GueError::Truncated | GueError::HeaderBeyondPacket => C::GueTruncated,
                    GueError::BadVersion | GueError::BadDirectPayload => C::GueBadVersion,
                    GueError::UnknownFlags | GueError::FlagsBeyondHlen | GueError::UnknownPrivateFlags => C::GueUnknownFlags,
                })?;
                let r = GueRepr::parse(&g).map_err(|_| C::GueUnknownFlags)?;
                if r.control {
                    return Ok(None);
                }
                match r.proto_ctype {
                    4 => Ok(Some((g.header_len(), true))),
                    41 => Ok(Some((g.header_len(), false))),
                    _ => Err(C::UnsupportedInner),
                }
            }
        },
        Encap::Gre => {
            let g = GrePacket::new_checked(p).map_err(|_| C::GreMalformed)?;
            let r = GreRepr::parse(&g).map_err(|e| match e {
                GreError::BadChecksum => C::GreBadChecksum,
                _ => C::GreMalformed,
            })?;
            if r.key != key {
                return Err(C::GreKeyMismatch);
            }
            match r.protocol {
                0x0800 => Ok(Some((g.header_len(), true))),
                0x86dd => Ok(Some((g.header_len(), false))),
                _ => Err(C::UnsupportedInner),
            }
        }
    }
}

/// The fast path: the datagram is the whole packet (ipN-input cut it to the IP length),
/// with a zero checksum the tunnel accepts and the tunnel's plain data header, and the
/// inner packet passes ipN-input's fast-path checks. The buffer then holds the inner
/// packet, and the node it goes to is returned; `None`, with the buffer untouched, for
/// anything else: [`decap_full`] takes it, and counts what it refuses.
#[inline(always)]
fn decap_plain<A>(plan: &DecapPlan<A>, udp: OuterUdp, buf: &mut Buffer) -> Option<UdpTunInputNext> {
    let plain = plan.plain?;
    if udp.sum != 0 || !plan.zero_checksum_ok {
        return None;
    }
    plain_payload(plain, udp, buf)
}

/// [`decap_plain`] after its checksum test: the length, the plain header, the inner
/// packet's checks, the strip.
#[inline(always)]
fn plain_payload((for_v4, for_v6): ([u8; 4], [u8; 4]), udp: OuterUdp, buf: &mut Buffer) -> Option<UdpTunInputNext> {
    let b = buf.bytes();
    if udp.hl + udp.len != b.len() {
        return None;
    }
    let at = udp.hl + 12;
    // The inner packet's version picks the header it must follow (the checks after
    // reject any other version): one comparison, not one per family.
    let v4 = b.get(at)? >> 4 == 4;
    if udp.after? != if v4 { for_v4 } else { for_v6 } {
        return None;
    }
    inner_fast(at, v4, buf)
}

/// The fast path for a packet that matched this node's hint in `ethernet-input`: the
/// outer header of the hinted tunnel (`hl` long) and its plain data header for an inner
/// packet of the family `v4` are known. The UDP length, the inner packet's checks and
/// the strip are left.
#[inline(always)]
fn hinted_payload(hl: usize, v4: bool, buf: &mut Buffer) -> Option<UdpTunInputNext> {
    let b = buf.bytes();
    // The UDP length alone: `OuterUdp::read` would read the rest of the header too,
    // two instructions a packet more.
    let h = b.get(..hl + 12)?;
    if hl + u16::from_be_bytes([h[hl + 4], h[hl + 5]]) as usize != b.len() {
        return None;
    }
    inner_fast(hl + 12, v4, buf)
}

/// The inner packet at `at` passes `ipN-input`'s fast-path checks: strip to it.
#[inline(always)]
fn inner_fast(at: usize, v4: bool, buf: &mut Buffer) -> Option<UdpTunInputNext> {
    let inner_len = input_fast_path_len(buf.bytes().get(at..)?, v4)?;
    // The outer packet's offload marks go with its headers (`Buffer::decapsulate`).
    buf.decapsulate(at, inner_len).ok()?;
    Some(lookup_next(v4))
}

/// `ipN-lookup` for an inner packet that passed `ipN-input`'s fast-path checks here.
#[inline(always)]
fn lookup_next(v4: bool) -> UdpTunInputNext {
    if v4 {
        UdpTunInputNext::Ip4Lookup
    } else {
        UdpTunInputNext::Ip6Lookup
    }
}

/// Everything about a tunnel packet the fast path does not take: the outer checksum by
/// the tunnel's rules, then its encapsulation header. `Ok(Some((inner is IPv4, a remote
/// checksum offload was completed)))` with the buffer at the inner packet; `Ok(None)`
/// for a GUE control message (buffer untouched).
fn decap_full<O: TunOuter>(
    t: &Tunnel,
    udp: OuterUdp,
    src: &O::Addr,
    dst: &O::Addr,
    buf: &mut Buffer,
) -> Result<Option<(bool, bool)>, UdpTunInputCounter> {
    use UdpTunInputCounter as C;
    let OuterUdp { hl, len, sum, .. } = udp;
    let seg = buf.bytes().get(hl..hl + len).ok_or(C::BadUdpLength)?;
    if sum == 0 {
        if O::IS_V6 && !t.accept_zero_checksum {
            return Err(C::ZeroChecksumRefused);
        }
    } else {
        let trusted = buf.meta.l4_checksum_ok || buf.meta.offload.has_partial_checksum();
        if !trusted && !udp_checksum_ok(O::pseudo(src, dst), seg) {
            return Err(C::BadUdpChecksum);
        }
    }
    let Some((skip, v4)) = inner(t.encap, t.gre_key, &seg[8..])? else { return Ok(None) };
    // Only a GUE header with fields past its first word can carry the offload.
    let remote = if t.encap == Encap::Gue && skip > gue::BASE_LEN { GuePacket::new_unchecked(&seg[8..]).remote_checksum() } else { None };
    // The outer packet's offload marks go with its headers (`Buffer::decapsulate`).
    let inner_len = len.checked_sub(8 + skip).ok_or(C::BadUdpLength)?;
    buf.decapsulate(hl + 8 + skip, inner_len).map_err(|_| C::BadUdpLength)?;
    if let Some((start, field)) = remote {
        // The field holds the pseudo-header sum; the sum from `start` on completes it.
        // The field must be a 16-bit word of that sum: an even distance from `start`.
        let (start, field) = (start as usize, field as usize);
        let completed = field >= start && field % 2 == start % 2 && wire::checksum::complete_partial(buf.bytes_mut(), start, field - start);
        if !completed {
            return Err(C::GueBadRemoteChecksum);
        }
    }
    Ok(Some((v4, remote.is_some())))
}

/// Where a decapsulated inner packet goes: `ipN-input`'s fast-path checks here, without
/// the node hop (then straight to `ipN-lookup`); anything unusual through `ipN-input`.
fn inner_next(buf: &mut Buffer, v4: bool) -> UdpTunInputNext {
    match (input_fast_path_len(buf.bytes(), v4), v4) {
        (Some(end), _) => {
            buf.truncate(end);
            lookup_next(v4)
        }
        (None, true) => UdpTunInputNext::Ip4Input,
        (None, false) => UdpTunInputNext::Ip6Input,
    }
}

impl<O: TunOuter, const COUNT: bool> UdpTunInput<O, COUNT> {
    /// [`decap_plain`] for a packet of the tunnel planned, its outer header tested
    /// against the plan's template in a few word comparisons.
    #[inline(always)]
    /// The next node and the tunnel, for a packet the fast path decapsulated.
    fn fast(&self, buf: &mut Buffer) -> Option<(UdpTunInputNext, u32)> {
        if let Some((tag, v4, id)) = self.last.hinted {
            if buf.meta.param == tag.get() {
                return hinted_payload(O::FIXED_LEN, v4, buf).map(|n| (n, id));
            }
        }
        let b = buf.bytes();
        let f = self.last.fast.as_ref()?;
        let id = self.last.plan.as_ref()?.id;
        if !f.head.matches(b) {
            return None;
        }
        plain_payload(f.plain, OuterUdp::read(b, O::FIXED_LEN)?, buf).map(|n| (n, id))
    }

    /// Plan for a tunnel, and hint its outer header to `ethernet-input` when its packets
    /// can take the fast path. The hint fixes the data header too, the one for the inner
    /// family of the packet planned for (`after`, the four bytes after UDP): its
    /// packets are then known by the template alone.
    fn plan(&mut self, hints: &mut TunnelHints, p: DecapPlan<O::Addr>, after: Option<[u8; 4]>) {
        let hinted = self.last.hinted;
        *self.last = Last { hinted, ..Last::new(Some(p)) };
        let (local, remote, _) = p.key;
        let Some(f) = self.last.fast.filter(|_| O::hintable(&local, &remote)) else { return };
        let (for_v4, for_v6) = f.plain;
        let v4 = match after {
            Some(w) if w == for_v4 => true,
            Some(w) if w == for_v6 => false,
            _ => return,
        };
        let tag = hints.next_tag();
        let head = f.head.with(O::FIXED_LEN + 8, if v4 { &for_v4 } else { &for_v6 });
        *O::hint(hints) = Some(TunnelHint { head, app: UdpApp::Gue, tag });
        self.last.hinted = Some((tag, v4, p.id));
    }
}

impl<Cx: HasUdpTun, O: TunOuter, const COUNT: bool> Node<Cx> for UdpTunInput<O, COUNT> {
    type Next = UdpTunInputNext;
    type Counter = UdpTunInputCounter;

    fn name(&self) -> &'static str {
        O::INPUT
    }

    fn end_of_vector(&mut self, cx: &mut Cx) {
        if COUNT {
            cx.split_udptun().1.counters.flush();
        }
    }

    #[inline(always)]
    fn prepare(&mut self, _cx: &mut Cx, _pool: &mut engine::Pool, _input: &[engine::BufIdx]) {
        // The tables may have changed since the last vector; a hint is forgotten with
        // them (by the worker's context) and its tag not seen again.
        self.last.plan = None;
        self.last.fast = None;
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use UdpTunInputCounter as C;
        // Most packets: the tunnel of the packet before, the fixed outer header, the
        // fast path. The first of a vector, and anything else, take the full parse.
        if let Some((next, id)) = self.fast(buf) {
            counts.inc(C::Decapsulated);
            if COUNT {
                cx.split_udptun().1.counters.rx(id, buf.len());
            }
            return Verdict::Next(next);
        }
        let (ipc, u) = cx.split_udptun();
        let b = buf.bytes();
        let (hl, src, dst) = match O::outer(b) {
            Ok(x) => x,
            Err(OuterError::Truncated) => return Verdict::Drop(C::OuterTruncated),
            Err(OuterError::NotPlainUdp) => return Verdict::Drop(C::NotPlainUdp),
        };
        let Some(udp) = OuterUdp::read(b, hl) else { return Verdict::Drop(C::BadUdpLength) };
        let ecn = ip::outer::tos::ecn(b, O::IS_V6);
        let (port, udp_len) = (udp.dst_port, udp.len);
        if udp_len < 8 || hl + udp_len > b.len() {
            return Verdict::Drop(C::BadUdpLength);
        }
        let plan = match self.last.plan {
            Some(p) if p.key == (dst, src, port) => p,
            _ => {
                let Some(id) = O::decap(&u.tables, dst, src, port) else { return Verdict::Drop(C::NoTunnel) };
                let Some(t) = u.tables.tunnel(id) else { return Verdict::Drop(C::NoTunnel) };
                let p = DecapPlan::new((dst, src, port), id, t, O::IS_V6);
                self.plan(&mut ipc.tunnel_hints, p, udp.after);
                p
            }
        };
        // The fast path leaves the inner ECN field as it is: only for the outer fields that
        // change nothing inside (its template tests the same).
        let plain = if ecn & ip::outer::tos::ECT1 == 0 { decap_plain(&plan, udp, buf) } else { None };
        if let Some(next) = plain {
            counts.inc(C::Decapsulated);
            if COUNT {
                u.counters.rx(plan.id, buf.len());
            }
            return Verdict::Next(next);
        }
        let id = plan.id;
        let Some(t) = u.tables.tunnel(id) else { return Verdict::Drop(C::NoTunnel) };
        match decap_full::<O>(t, udp, &src, &dst, buf) {
            Err(c) => Verdict::Drop(c),
            Ok(None) => {
                let payload = &buf.bytes()[hl + 8..hl + udp_len];
                let ev = UdpTunEvent::Control { tunnel: id, peer: src.into(), ctype: payload[1], len: payload.len() };
                if !u.report(ev) {
                    return Verdict::Drop(C::EventQueueFull);
                }
                // Consumed here: counted under an info counter, not forwarded.
                Verdict::Drop(C::ControlMessages)
            }
            Ok(Some((v4, remote_checksum))) => {
                match ip::outer::tos::decap_ecn(ecn, buf) {
                    EcnDecap::Unchanged => {}
                    EcnDecap::Marked => counts.inc(C::EcnMarked),
                    EcnDecap::Drop => return Verdict::Drop(C::EcnCeNotEct),
                }
                counts.inc(C::Decapsulated);
                if COUNT {
                    u.counters.rx(id, buf.len());
                }
                if remote_checksum {
                    counts.inc(C::GueRemoteChecksumCompleted);
                }
                if t.urpf != Urpf::Off {
                    let from = Arrival::Tunnel(TunnelRef { kind: if O::IS_V6 { TunnelKind::Gue6 } else { TunnelKind::Gue4 }, id });
                    if let Err(f) = ip::urpf::check_source(&ipc.tables, buf.bytes(), !v4, from, t.urpf) {
                        return Verdict::Drop(match f {
                            SourceFault::NoRoute => C::UrpfNoRoute,
                            SourceFault::WrongInterface => C::UrpfWrongTunnel,
                            SourceFault::OwnAddress => C::UrpfOwnAddress,
                        });
                    }
                }
                if t.mtu.mss_clamp {
                    let link_mtu = ipc.tables.adjacency(u.tables.outer_adj(id)).mtu();
                    if ip::outer::decap_mss_clamp(buf, link_mtu, t.rewrite_len as usize, t.mtu) {
                        counts.inc(C::MssClamped);
                    }
                }
                Verdict::Next(inner_next(buf, v4))
            }
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("len {}", buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tunnel::UdpTunnelSpec;
    use engine::Pool;
    use ip::outer::{Ip4Outer, Ip6Outer};
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// A valid inner header: IPv4 (checksummed) or IPv6, with `payload` bytes after it.
    fn inner_packet(v4: bool, payload: usize) -> Vec<u8> {
        if v4 {
            let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 2, 198, 19, 0, 1];
            p[2..4].copy_from_slice(&((20 + payload) as u16).to_be_bytes());
            let c = wire::checksum::checksum(&p);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            p.resize(20 + payload, 0xab);
            p
        } else {
            let mut p = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
            p[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            p.resize(40 + payload, 0xab);
            p
        }
    }

    /// An outer IPv4 or IPv6 header and UDP header (length `udp_len`, checksum `sum`)
    /// from 198.18.1.2 / 2001:db8:1::2 to 198.18.1.1 / 2001:db8:1::1, port 6080.
    fn outer(v6: bool, udp_len: usize, sum: u16) -> Vec<u8> {
        let mut p = if v6 {
            let mut h = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
            h[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            h
        } else {
            let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 1, 2, 198, 18, 1, 1];
            h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            h
        };
        p.extend_from_slice(&[0xc0, 0x01, 0x17, 0xc0]);
        p.extend_from_slice(&(udp_len as u16).to_be_bytes());
        p.extend_from_slice(&sum.to_be_bytes());
        p
    }

    /// A short path (`path`) and the full one on one packet: the short path either
    /// declines and leaves the buffer as it was, or leaves it exactly as the full path
    /// and the inner checks do, bound for the same node. The inner family (true: IPv4)
    /// when the short path took it.
    fn agrees_with_full(t: &Tunnel, v6: bool, packet: &[u8], path: impl FnOnce(&mut Buffer) -> Option<UdpTunInputNext>) -> Option<bool> {
        let mut pool = Pool::new(4, 0);
        let (short, full) = (pool.alloc(256).unwrap(), pool.alloc(256).unwrap());
        pool.get_mut(short).write(packet).unwrap();
        pool.get_mut(full).write(packet).unwrap();
        let Some(next) = path(pool.get_mut(short)) else {
            assert_eq!(pool.get(short).bytes(), packet);
            return None;
        };
        let udp = OuterUdp::read(packet, if v6 { 40 } else { 20 }).expect("a UDP header");
        let b = pool.get_mut(full);
        let full_result = if v6 {
            decap_full::<Ip6Outer>(t, udp, &"2001:db8:1::2".parse().unwrap(), &"2001:db8:1::1".parse().unwrap(), b)
        } else {
            decap_full::<Ip4Outer>(t, udp, &"198.18.1.2".parse().unwrap(), &"198.18.1.1".parse().unwrap(), b)
        };
        let Ok(Some((v4, false))) = full_result else { panic!("the short path took what the full path refuses: {full_result:?}") };
        assert_eq!(inner_next(b, v4), next);
        assert_eq!(pool.get(short).bytes(), pool.get(full).bytes());
        assert_eq!(pool.get(short).meta.l4_checksum_ok, pool.get(full).meta.l4_checksum_ok);
        Some(v4)
    }

    /// The template fast path and the hinted one (see [`hinted_agrees`]) against the full
    /// path on one packet. Returns whether the template fast path took it.
    fn both_paths(t: &Tunnel, v6: bool, packet: &[u8]) -> bool {
        hinted_agrees(t, v6, packet);
        let hl = if v6 { 40 } else { 20 };
        let udp = OuterUdp::read(packet, hl).expect("a UDP header");
        assert!(udp.len >= 8 && hl + udp.len <= packet.len(), "the node checks these first");
        let plan = DecapPlan::new(((), (), 6080), 1, t, v6);
        agrees_with_full(t, v6, packet, |b| decap_plain(&plan, udp, b)).is_some()
    }

    /// The hinted path on one packet, for each inner family a hint can name: a packet
    /// that matches the hint `plan` would publish for this tunnel (`ethernet-input`'s
    /// test) either leaves the path with the buffer untouched or ends as the full path
    /// ends it, with an inner packet of the hint's family. Returns how many of the two
    /// hints took it.
    fn hinted_agrees(t: &Tunnel, v6: bool, packet: &[u8]) -> usize {
        let plan = DecapPlan::new(((), (), 6080), 1, t, v6);
        let Some((for_v4, for_v6)) = plan.plain.filter(|_| plan.zero_checksum_ok) else { return 0 };
        let hl = if v6 { 40 } else { 20 };
        let mut took = 0;
        for hint_v4 in [true, false] {
            let word = if hint_v4 { &for_v4 } else { &for_v6 };
            let matched = if v6 {
                let (l, r) = v6_ends();
                Ip6Outer::head(l, r, 6080).with(hl + 8, word).matches(packet)
            } else {
                let (l, r) = v4_ends();
                Ip4Outer::head(l, r, 6080).with(hl + 8, word).matches(packet)
            };
            if matched {
                if let Some(v4) = agrees_with_full(t, v6, packet, |b| hinted_payload(hl, hint_v4, b)) {
                    assert_eq!(v4, hint_v4);
                    took += 1;
                }
            }
        }
        took
    }

    fn tunnel(v6: bool, encap: Encap, key: Option<u32>, accept_zero: bool, clamp: bool) -> Tunnel {
        let (l, r): (IpAddr, IpAddr) = if v6 {
            ("2001:db8:1::1".parse().unwrap(), "2001:db8:1::2".parse().unwrap())
        } else {
            ("198.18.1.1".parse().unwrap(), "198.18.1.2".parse().unwrap())
        };
        let mut s = UdpTunnelSpec::new(l, r, encap, 6080);
        s.gre_key = key;
        s.accept_zero_checksum = accept_zero;
        s.mtu.mss_clamp = clamp;
        Tunnel::new(&s)
    }

    #[test]
    fn plain_packets_take_the_fast_path() {
        for (encap, h4, h6) in [(Encap::Gue, [0u8, 4, 0, 0], [0u8, 41, 0, 0]), (Encap::Gre, [0, 0, 8, 0], [0, 0, 0x86, 0xdd])] {
            for (v4, h) in [(true, h4), (false, h6)] {
                let inner = inner_packet(v4, 10);
                let mut p = outer(false, 8 + 4 + inner.len(), 0);
                p.extend_from_slice(&h);
                p.extend_from_slice(&inner);
                assert!(both_paths(&tunnel(false, encap, None, false, false), false, &p), "{encap:?} v4 {v4}");
                // The hinted path takes them too, under the hint naming their family.
                assert_eq!(hinted_agrees(&tunnel(false, encap, None, false, false), false, &p), 1);
                // Not with a UDP length short of the inner packet (the full path sends
                // what is left to ip4-input).
                let mut q = p.clone();
                q[25] -= 4;
                assert_eq!(hinted_agrees(&tunnel(false, encap, None, false, false), false, &q), 0);
                // Declined: a clamping tunnel, a keyed GRE tunnel, trailing bytes past the
                // datagram, a checksum, a broken inner header.
                assert!(!both_paths(&tunnel(false, encap, None, false, true), false, &p));
                if encap == Encap::Gre {
                    assert!(!both_paths(&tunnel(false, encap, Some(1), false, false), false, &p));
                }
                let mut q = p.clone();
                q.push(0);
                assert!(!both_paths(&tunnel(false, encap, None, false, false), false, &q));
                let mut q = p.clone();
                q[27] = 1;
                assert!(!both_paths(&tunnel(false, encap, None, false, false), false, &q));
                let mut q = p.clone();
                q[32] = 0x55;
                assert!(!both_paths(&tunnel(false, encap, None, false, false), false, &q));
            }
        }
        // Padding inside the datagram after the inner packet is cut off.
        let inner = inner_packet(true, 10);
        let mut p = outer(false, 8 + 4 + inner.len() + 2, 0);
        p.extend_from_slice(&[0, 4, 0, 0]);
        p.extend_from_slice(&inner);
        p.extend_from_slice(&[0xee, 0xee]);
        assert!(both_paths(&tunnel(false, Encap::Gue, None, false, false), false, &p));
        let mut pool = Pool::new(1, 0);
        let b = pool.alloc(256).unwrap();
        pool.get_mut(b).write(&p).unwrap();
        let plan = DecapPlan::new(((), (), 6080), 1, &tunnel(false, Encap::Gue, None, false, false), false);
        assert_eq!(decap_plain(&plan, OuterUdp::read(&p, 20).unwrap(), pool.get_mut(b)), Some(UdpTunInputNext::Ip4Lookup));
        assert_eq!(pool.get(b).bytes(), &inner[..]);
        // Over IPv6, a zero checksum only on a tunnel that accepts it.
        let inner = inner_packet(true, 10);
        let mut p = outer(true, 8 + 4 + inner.len(), 0);
        p.extend_from_slice(&[0, 4, 0, 0]);
        p.extend_from_slice(&inner);
        assert!(both_paths(&tunnel(true, Encap::Gue, None, true, false), true, &p));
        assert!(!both_paths(&tunnel(true, Encap::Gue, None, false, false), true, &p));
    }

    /// The template's verdict against the full parse's: it matches exactly the packets
    /// whose outer header the full parse reads as plain UDP with the fixed length (for
    /// IPv4, IHL 5 and version 4 too), from `remote` to `local` on port 6080 with a zero
    /// checksum, and that have the template's bytes.
    fn head_agrees<O: TunOuter>(local: O::Addr, remote: O::Addr, b: &[u8]) -> bool {
        let matched = O::head(local, remote, 6080).matches(b);
        let version_ok = if O::IS_V6 { b.first().is_some_and(|v| v >> 4 == 6) } else { b.first() == Some(&0x45) };
        // Outer ECT(1) and CE take the full path, which carries them inside.
        let ecn_ok = ip::outer::tos::traffic_class(b) & ip::outer::tos::ECT1 == 0;
        let parsed = O::outer(b).ok().zip(OuterUdp::read(b, O::FIXED_LEN));
        let expected = b.len() >= <O::Head as HeadMatch>::LEN
            && version_ok
            && ecn_ok
            && parsed.is_some_and(|((hl, src, dst), udp)| {
                hl == O::FIXED_LEN && (src, dst) == (remote, local) && udp.dst_port == 6080 && udp.sum == 0
            });
        assert_eq!(matched, expected, "{b:02x?}");
        matched
    }

    fn v4_ends() -> (Ipv4Addr, Ipv4Addr) {
        ("198.18.1.1".parse().unwrap(), "198.18.1.2".parse().unwrap())
    }

    fn v6_ends() -> (Ipv6Addr, Ipv6Addr) {
        ("2001:db8:1::1".parse().unwrap(), "2001:db8:1::2".parse().unwrap())
    }

    #[test]
    fn head_template_picks_the_planned_tunnels_plain_packets() {
        let ((l4, r4), (l6, r6)) = (v4_ends(), v6_ends());
        let mut p = outer(false, 12 + 20, 0);
        p.extend_from_slice(&[0, 4, 0, 0]);
        p.extend_from_slice(&inner_packet(true, 0));
        assert!(head_agrees::<Ip4Outer>(l4, r4, &p));
        // Free: DSCP and ECT(0), total length, identification, DF, TTL, IP checksum,
        // source port, UDP length and what follows UDP.
        for i in [1, 2, 3, 4, 5, 6, 8, 10, 11, 20, 21, 24, 25, 28, 29, 30, 31] {
            let mut q = p.clone();
            q[i] ^= match i {
                1 => 0xfe,
                6 => 0x40,
                _ => 0x11,
            };
            assert!(head_agrees::<Ip4Outer>(l4, r4, &q), "byte {i}");
        }
        // Fixed: version and IHL, ECT(1) or CE, MF, offset, protocol, addresses, port,
        // checksum.
        for (i, x) in [
            (0, 0x01),
            (1, 0x01),
            (0, 0x10),
            (6, 0x20),
            (6, 0x01),
            (7, 1),
            (9, 0x17),
            (12, 1),
            (15, 0x80),
            (16, 1),
            (19, 2),
            (22, 1),
            (23, 1),
            (26, 1),
            (27, 0x80),
        ] {
            let mut q = p.clone();
            q[i] ^= x;
            assert!(!head_agrees::<Ip4Outer>(l4, r4, &q), "byte {i} ^ {x:#x}");
        }
        assert_eq!(<Ip4Outer as TunOuter>::Head::LEN, 32);
        assert!(!head_agrees::<Ip4Outer>(l4, r4, &p[..31]), "shorter than its words");
        // Another tunnel's template: the ends swapped.
        assert!(!Ip4Outer::head(r4, l4, 6080).matches(&p));
        let mut p6 = outer(true, 12 + 20, 0);
        p6.extend_from_slice(&[0, 4, 0, 0]);
        p6.extend_from_slice(&inner_packet(true, 0));
        assert!(head_agrees::<Ip6Outer>(l6, r6, &p6));
        for i in [0, 1, 2, 3, 4, 5, 7, 40, 41, 44, 45, 48, 55] {
            let mut q = p6.clone();
            q[i] ^= match i {
                0 => 0x0f,
                1 => 0xef,
                _ => 0x11,
            };
            assert!(head_agrees::<Ip6Outer>(l6, r6, &q), "byte {i}");
        }
        for (i, x) in [(0, 0x20), (1, 0x10), (6, 0x01), (8, 1), (23, 1), (24, 1), (39, 1), (42, 1), (43, 1), (46, 1), (47, 1)] {
            let mut q = p6.clone();
            q[i] ^= x;
            assert!(!head_agrees::<Ip6Outer>(l6, r6, &q), "byte {i} ^ {x:#x}");
        }
        assert_eq!(<Ip6Outer as TunOuter>::Head::LEN, 56);
        assert!(!head_agrees::<Ip6Outer>(l6, r6, &p6[..55]), "shorter than its words");
    }

    proptest! {
        #[test]
        fn head_template_agrees_on_any_bytes(
            b in proptest::collection::vec(any::<u8>(), 0..64),
            v4 in any::<bool>(),
            plain in any::<bool>(),
            flip in any::<(usize, u8)>(),
        ) {
            let mut b = b;
            // Often the planned tunnel's header with one byte changed, so that matches
            // and near misses are both tested, not only the refusals of random bytes.
            if plain {
                let head = if v4 { outer(false, 12, 0) } else { outer(true, 12, 0) };
                for (i, x) in head.iter().enumerate().take(b.len()) {
                    b[i] = *x;
                }
                if let Some(x) = b.get_mut(flip.0 % 64) {
                    *x ^= flip.1;
                }
            }
            if v4 {
                let (l, r) = v4_ends();
                head_agrees::<Ip4Outer>(l, r, &b);
            } else {
                let (l, r) = v6_ends();
                head_agrees::<Ip6Outer>(l, r, &b);
            }
        }

        /// Any packet after a well-formed outer UDP header, in any tunnel: the fast path
        /// declines with the buffer untouched or agrees with the full path.
        #[test]
        fn fast_path_agrees_with_the_full_path(
            v6 in any::<bool>(),
            kind in 0usize..3,
            key in proptest::option::of(any::<u32>()),
            accept_zero in any::<bool>(),
            clamp in 0u8..4,
            zero_sum in 0u8..4,
            header in 0usize..3,
            random_header in any::<[u8; 4]>(),
            inner_v4 in any::<bool>(),
            inner_ok in any::<bool>(),
            mut noise in proptest::collection::vec(any::<u8>(), 0..64),
            payload in 0usize..40,
            trailing in 0usize..6,
            flip in any::<(usize, u8)>(),
        ) {
            let encap = [Encap::Gue, Encap::Gre, Encap::Direct][kind];
            let t = tunnel(v6, encap, if encap == Encap::Gre { key } else { None }, accept_zero, clamp == 0);
            let h = match (header, encap, inner_v4) {
                (0, _, _) => random_header,
                (_, Encap::Gre, true) => [0, 0, 8, 0],
                (_, Encap::Gre, false) => [0, 0, 0x86, 0xdd],
                (_, _, true) => [0, 4, 0, 0],
                (_, _, false) => [0, 41, 0, 0],
            };
            let mut inner = if inner_ok { inner_packet(inner_v4, payload) } else { std::mem::take(&mut noise) };
            if !inner.is_empty() && flip.1 != 0 && header == 1 {
                let i = flip.0 % inner.len();
                inner[i] ^= flip.1;
            }
            let mut p = outer(v6, 8 + 4 + inner.len(), if zero_sum > 0 { 0 } else { 0x1234 });
            p.extend_from_slice(&h);
            p.extend_from_slice(&inner);
            p.extend(std::iter::repeat(0).take(trailing.saturating_sub(3)));
            both_paths(&t, v6, &p);
        }
    }

    #[test]
    fn inner_by_encapsulation() {
        let v4 = [0x45u8, 0, 0, 20];
        assert_eq!(inner(Encap::Direct, None, &v4), Ok(Some((0, true))));
        assert_eq!(inner(Encap::Direct, None, &[0x60]), Ok(Some((0, false))));
        assert_eq!(inner(Encap::Direct, None, &[0x00]), Err(UdpTunInputCounter::UnsupportedInner));
        // GUE: variant 0 with IPIP, with IPv6, variant 1 direct, a control message.
        assert_eq!(inner(Encap::Gue, None, &[0, 4, 0, 0, 0x45]), Ok(Some((4, true))));
        assert_eq!(inner(Encap::Gue, None, &[0, 41, 0, 0, 0x60]), Ok(Some((4, false))));
        // The one-comparison path agrees with the full parse.
        for h in [[0u8, 4, 0, 0, 0x45], [0, 41, 0, 0, 0x60], [0, 4, 0, 0, 0x60]] {
            assert_eq!(inner(Encap::Gue, None, &h), inner_parsed(Encap::Gue, None, &h));
        }
        for h in [[0u8, 0, 0x08, 0, 0x45], [0, 0, 0x86, 0xdd, 0x60]] {
            assert_eq!(inner(Encap::Gre, None, &h), inner_parsed(Encap::Gre, None, &h));
            assert!(inner(Encap::Gre, None, &h).unwrap().is_some());
        }
        assert_eq!(inner(Encap::Gue, None, &v4), Ok(Some((0, true))));
        assert_eq!(inner(Encap::Gue, None, &[0x20, 7, 0, 0]), Ok(None));
        assert_eq!(inner(Encap::Gue, None, &[0, 4, 0x40, 0]), Err(UdpTunInputCounter::GueUnknownFlags));
        assert_eq!(inner(Encap::Gue, None, &[0x03, 4, 0, 0]), Err(UdpTunInputCounter::GueTruncated));
        assert_eq!(inner(Encap::Gue, None, &[0x80, 4, 0, 0]), Err(UdpTunInputCounter::GueBadVersion));
        assert_eq!(inner(Encap::Gue, None, &[0, 47, 0, 0]), Err(UdpTunInputCounter::UnsupportedInner));
        assert_eq!(inner(Encap::Gue, None, &[]), Err(UdpTunInputCounter::GueTruncated));
        // GRE: EtherType, key match.
        assert_eq!(inner(Encap::Gre, None, &[0, 0, 0x08, 0, 0x45]), Ok(Some((4, true))));
        assert_eq!(inner(Encap::Gre, Some(9), &[0x20, 0, 0x86, 0xdd, 0, 0, 0, 9, 0x60]), Ok(Some((8, false))));
        assert_eq!(inner(Encap::Gre, Some(9), &[0x20, 0, 0x86, 0xdd, 0, 0, 0, 8, 0x60]), Err(UdpTunInputCounter::GreKeyMismatch));
        assert_eq!(inner(Encap::Gre, Some(9), &[0, 0, 0x08, 0, 0x45]), Err(UdpTunInputCounter::GreKeyMismatch));
        assert_eq!(inner(Encap::Gre, None, &[0, 1, 0x08, 0]), Err(UdpTunInputCounter::GreMalformed));
        assert_eq!(inner(Encap::Gre, None, &[0, 0, 0x65, 0x58]), Err(UdpTunInputCounter::UnsupportedInner));
    }
}
