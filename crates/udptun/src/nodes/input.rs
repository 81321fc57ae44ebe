//! `gue4-input` / `gue6-input`: UDP tunnel packets addressed to one of our endpoints on
//! a tunnel port (`ipN-local` sends them here).
//!
//! Finds the tunnel by (our address, the peer's address, port), checks the outer UDP
//! (length; checksum, with a zero IPv6 checksum only on tunnels that accept it, RFC
//! 6936), then the tunnel's encapsulation: a GUE header (data messages are stripped;
//! control messages go to the control plane; unknown flags and a header longer than the
//! packet are dropped), a GRE header (version 0, the tunnel's key, a correct checksum if
//! present) or nothing. The inner IPv4 or IPv6 packet goes to `ipN-lookup` when it passes
//! `ipN-input`'s fast-path checks here, else to `ipN-input`. `ipN-input` hands this node
//! the packets for our tunnel endpoints and ports directly (no lookup, no `ipN-local`).

use super::TunOuter;
use crate::context::{HasUdpTun, UdpTunEvent};
use crate::tunnel::Encap;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use ip::nodes::{ip4_input, ip6_input};
use ip::outer::{udp_checksum_ok, OuterError};
use wire::gre::{GreError, GrePacket, GreRepr};
use wire::gue::{self, GueError, GuePacket, GueRepr, Variant};

next_nodes! {
    pub enum UdpTunInputNext { Ip4Input = "ip4-input", Ip6Input = "ip6-input", Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup" }
}

counters! {
    pub enum UdpTunInputCounter {
        Decapsulated(Info, "decapsulated", "packets decapsulated"),
        MssClamped(Info, "mss-clamped", "TCP SYN MSS lowered to fit the tunnel"),
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
        GreMalformed(Warn, "gre-malformed", "GRE header truncated, not version 0, or with reserved bits set"),
        GreBadChecksum(Warn, "gre-bad-checksum", "GRE checksum mismatch"),
        GreKeyMismatch(Warn, "gre-key-mismatch", "GRE key absent, unexpected or not the tunnel's"),
        UnsupportedInner(Warn, "unsupported-inner", "inner protocol is not IPv4 or IPv6"),
    }
}

pub struct UdpTunInput<O: TunOuter> {
    /// The tunnel last looked up: a vector's packets mostly come from a few peers.
    /// Forgotten at each vector, since the tables may be republished between vectors.
    last: Option<DecapPlan<O::Addr>>,
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
    /// take the full path (no such header, a GRE key, MSS clamping).
    plain: Option<([u8; 4], [u8; 4])>,
    /// A zero UDP checksum is accepted (always over IPv4, RFC 6936 over IPv6).
    zero_checksum_ok: bool,
}

impl<A> DecapPlan<A> {
    fn new(key: (A, A, u16), id: u32, t: &crate::tunnel::Tunnel, is_v6: bool) -> Self {
        let plain = match (t.encap, t.gre_key, t.mtu.mss_clamp) {
            (_, _, true) | (Encap::Direct, _, _) | (Encap::Gre, Some(_), _) => None,
            (Encap::Gue, _, _) => Some(([0, 4, 0, 0], [0, 41, 0, 0])),
            (Encap::Gre, None, _) => Some(([0, 0, 0x08, 0x00], [0, 0, 0x86, 0xdd])),
        };
        DecapPlan { key, id, plain, zero_checksum_ok: !is_v6 || t.accept_zero_checksum }
    }
}

impl<O: TunOuter> Default for UdpTunInput<O> {
    fn default() -> Self {
        UdpTunInput { last: None }
    }
}

/// What comes after the UDP header: the encapsulation's header length and the inner
/// family (true: IPv4), or why it is refused. `Ok(None)`: a GUE control message.
#[inline(always)]
fn inner(encap: Encap, key: Option<u32>, p: &[u8]) -> Result<Option<(usize, bool)>, UdpTunInputCounter> {
    // The usual GUE header, a data message with no flags or extensions (version 0, C
    // clear, Hlen 0), in one comparison; everything else takes the full parse.
    if let (Encap::Gue, Some(&[0, proto @ (4 | 41), 0, 0])) = (encap, p.first_chunk::<4>()) {
        return Ok(Some((wire::gue::BASE_LEN, proto == 4)));
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

impl<Cx: HasUdpTun, O: TunOuter> Node<Cx> for UdpTunInput<O> {
    type Next = UdpTunInputNext;
    type Counter = UdpTunInputCounter;

    fn name(&self) -> &'static str {
        O::INPUT
    }

    #[inline(always)]
    fn prepare(&mut self, _cx: &mut Cx, _pool: &mut engine::Pool, _input: &[engine::BufIdx]) {
        self.last = None;
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use UdpTunInputCounter as C;
        let (ipc, u) = cx.split_udptun();
        let b = buf.bytes();
        let (hl, src, dst) = match O::outer(b) {
            Ok(x) => x,
            Err(OuterError::Truncated) => return Verdict::Drop(C::OuterTruncated),
            Err(OuterError::NotPlainUdp) => return Verdict::Drop(C::NotPlainUdp),
        };
        let Some(h) = b.get(hl..hl + 8) else { return Verdict::Drop(C::BadUdpLength) };
        let port = u16::from_be_bytes([h[2], h[3]]);
        let udp_len = u16::from_be_bytes([h[4], h[5]]) as usize;
        let sum = u16::from_be_bytes([h[6], h[7]]);
        if udp_len < 8 || hl + udp_len > b.len() {
            return Verdict::Drop(C::BadUdpLength);
        }
        let plan = match self.last {
            Some(p) if p.key == (dst, src, port) => p,
            _ => {
                let Some(id) = O::decap(&u.tables, dst, src, port) else { return Verdict::Drop(C::NoTunnel) };
                let Some(t) = u.tables.tunnel(id) else { return Verdict::Drop(C::NoTunnel) };
                let p = DecapPlan::new((dst, src, port), id, t, O::IS_V6);
                self.last = Some(p);
                p
            }
        };
        // The fast path: the datagram is the whole packet (ipN-input cut it to the IP
        // length), with a zero checksum the tunnel accepts and the tunnel's plain data
        // header, and the inner packet passes ipN-input's fast-path checks. Anything
        // else takes the full path below, which counts what it refuses.
        if let Some((for_v4, for_v6)) = plan.plain {
            if hl + udp_len == b.len() && sum == 0 && plan.zero_checksum_ok {
                let at = hl + 12;
                let inner = match b.get(hl + 8..).and_then(|x| x.first_chunk::<4>()) {
                    Some(w) if *w == for_v4 => b
                        .get(at..)
                        .and_then(|x| x.first_chunk::<20>())
                        .and_then(|h| ip4_input::fast_path_len(h, b.len() - at))
                        .map(|n| (n, UdpTunInputNext::Ip4Lookup)),
                    Some(w) if *w == for_v6 => b
                        .get(at..)
                        .and_then(|x| x.first_chunk::<40>())
                        .and_then(|h| ip6_input::fast_path_len(h, b.len() - at))
                        .map(|n| (n, UdpTunInputNext::Ip6Lookup)),
                    _ => None,
                };
                if let Some((inner_len, next)) = inner {
                    if buf.advance(at).is_ok() {
                        buf.truncate(inner_len);
                        buf.meta.l4_checksum_ok = false;
                        counts.inc(C::Decapsulated);
                        return Verdict::Next(next);
                    }
                }
            }
        }
        let id = plan.id;
        let Some(t) = u.tables.tunnel(id) else { return Verdict::Drop(C::NoTunnel) };
        let b = buf.bytes();
        let seg = &b[hl..hl + udp_len];
        if sum == 0 {
            if O::IS_V6 && !t.accept_zero_checksum {
                return Verdict::Drop(C::ZeroChecksumRefused);
            }
        } else {
            let trusted = buf.meta.l4_checksum_ok || buf.meta.offload.has_partial_checksum();
            if !trusted && !udp_checksum_ok(O::pseudo(&src, &dst), seg) {
                return Verdict::Drop(C::BadUdpChecksum);
            }
        }
        let payload = &seg[8..];
        match inner(t.encap, t.gre_key, payload) {
            Err(c) => Verdict::Drop(c),
            Ok(None) => {
                let ev = UdpTunEvent::Control { tunnel: id, peer: src.into(), ctype: payload[1], len: payload.len() };
                if !u.report(ev) {
                    return Verdict::Drop(C::EventQueueFull);
                }
                // Consumed here: counted under an info counter, not forwarded.
                Verdict::Drop(C::ControlMessages)
            }
            Ok(Some((skip, v4))) => {
                buf.truncate(hl + udp_len);
                if buf.advance(hl + 8 + skip).is_err() {
                    return Verdict::Drop(C::BadUdpLength);
                }
                // The outer checksum said nothing about the inner packet's own.
                buf.meta.l4_checksum_ok = false;
                counts.inc(C::Decapsulated);
                if t.mtu.mss_clamp {
                    let link_mtu = ipc.tables.adjacency(u.tables.outer_adj(id)).mtu();
                    if ip::outer::decap_mss_clamp(buf, link_mtu, t.rewrite_len as usize, t.mtu) {
                        counts.inc(C::MssClamped);
                    }
                }
                // ipN-input's fast-path checks without the node hop; anything unusual
                // still goes through ipN-input.
                let b = buf.bytes();
                if v4 {
                    match b.first_chunk::<20>().and_then(|h| ip4_input::fast_path_len(h, b.len())) {
                        Some(total) => {
                            buf.truncate(total);
                            Verdict::Next(UdpTunInputNext::Ip4Lookup)
                        }
                        None => Verdict::Next(UdpTunInputNext::Ip4Input),
                    }
                } else {
                    match b.first_chunk::<40>().and_then(|h| ip6_input::fast_path_len(h, b.len())) {
                        Some(end) => {
                            buf.truncate(end);
                            Verdict::Next(UdpTunInputNext::Ip6Lookup)
                        }
                        None => Verdict::Next(UdpTunInputNext::Ip6Input),
                    }
                }
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
