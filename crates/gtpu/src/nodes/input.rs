//! `gtpu4-input` / `gtpu6-input`: GTP-U packets addressed to one of our endpoints.
//!
//! Validates the outer UDP (length, checksum — a zero IPv6 checksum only for tunnels
//! that accept it, RFC 6936), the GTP-U header and its extension chain, looks the
//! (endpoint, TEID) key up, strips the outer headers and hands the inner packet on.
//! Echo Requests are answered; G-PDUs to an unknown TEID get a rate-limited Error
//! Indication; Error Indications and Echo Responses from peers go to the control plane.

use super::{reply_datagram, udp_checksum_ok, Outer, OuterError};
use crate::context::{GtpuEvent, HasGtpu};
use crate::messages;
use crate::tables::GtpuTables;
use crate::teid_table::{self, TeidKey};
use crate::tunnel::{DecapNext, Tunnel};
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Node, Pool, Verdict, VECTOR_SIZE};
use ip::nodes::input_fast_path_len;
use ip::outer::tos::EcnDecap;
use ip::tables::{TunnelKind, TunnelRef};
use ip::urpf::{Arrival, SourceFault, Urpf};
use wire::gtpu::{GtpuError, GtpuPacket, GtpuRepr, MessageType};

next_nodes! {
    pub enum GtpuInputNext {
        Ip4Input = "ip4-input", Ip6Input = "ip6-input",
        Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup",
        Output = "interface-output",
        Upf4Uplink = "upf4-uplink", Upf6Uplink = "upf6-uplink",
    }
}

counters! {
    pub enum GtpuInputCounter {
        Decapsulated(Info, "decapsulated", "G-PDUs decapsulated"),
        MssClamped(Info, "mss-clamped", "TCP SYN MSS lowered to fit the tunnel"),
        EcnMarked(Info, "ecn-marked", "the outer header's congestion mark (CE, or ECT(1)) copied into the inner packet (RFC 6040)"),
        EcnCeNotEct(Warn, "ecn-ce-not-ect", "outer header marked CE over an inner packet that is not ECN-capable: dropped, as RFC 6040 asks"),
        EchoReplies(Info, "echo-replies", "Echo Responses sent"),
        RateLimited(Warn, "rate-limited", "Echo Request not answered: reply rate limit"),
        ErrorIndicationsSent(Info, "error-indications-sent", "Error Indications sent for unknown TEIDs"),
        NotificationsSent(Info, "ext-notifications-sent", "Supported Extension Headers Notifications sent"),
        EventQueueFull(Warn, "event-queue-full", "path-management event lost: control queue full"),
        OuterTruncated(Warn, "outer-truncated", "outer IP header truncated"),
        NotPlainUdp(Warn, "outer-not-plain-udp", "IPv6 extension headers before UDP, or an outer fragment (not reassembled yet)"),
        BadUdpLength(Warn, "bad-udp-length", "UDP length shorter than UDP + GTP-U headers or past the packet"),
        BadUdpChecksum(Warn, "bad-udp-checksum", "outer UDP checksum mismatch"),
        ZeroChecksumRefused(Warn, "zero-checksum-refused", "zero UDP checksum over IPv6 on a tunnel not configured to accept it (RFC 6936)"),
        GtpTruncated(Warn, "gtp-truncated", "GTP-U header, optional fields or length field past the packet"),
        BadVersion(Warn, "bad-version", "not GTPv1 (or GTP' with PT 0)"),
        BadExtension(Warn, "bad-extension", "extension header of length 0 or past the message"),
        TooManyExtensions(Warn, "too-many-extensions", "more extension headers than the walk allows"),
        BadPduSession(Warn, "bad-pdu-session", "malformed PDU Session Container"),
        UnknownRequiredExtension(Warn, "unknown-required-extension", "unknown extension header marked comprehension required"),
        UnknownTeid(Warn, "unknown-teid", "G-PDU for a TEID with no tunnel (Error Indication rate-limited away)"),
        BadSignalling(Warn, "bad-signalling", "path-management message with a non-zero TEID or malformed IEs"),
        EchoResponses(Info, "echo-responses", "Echo Responses received (reported to the control plane)"),
        ErrorIndications(Info, "error-indications", "Error Indications received (reported to the control plane)"),
        EndMarkers(Info, "end-markers", "End Markers received (a path switch finished), consumed"),
        Notifications(Info, "ext-notifications", "Supported Extension Headers Notifications received, consumed"),
        UnknownMessage(Warn, "unknown-message", "GTP-U message type not handled"),
        BadInner(Warn, "bad-inner", "inner packet does not match the tunnel's decap-next or is truncated"),
        UrpfNoRoute(Warn, "urpf-no-route", "uRPF: no route back to the inner packet's source (or a blackhole)"),
        UrpfWrongTunnel(Warn, "urpf-wrong-tunnel", "strict uRPF: the route back to the inner packet's source does not go into this tunnel"),
        UrpfOwnAddress(Warn, "urpf-own-address", "uRPF: the inner packet's source is one of the gateway's own addresses"),
        NoHeadroom(Error, "no-room", "no room to build a reply"),
    }
}

/// Set in `meta.param` of packets whose key `prepare` already looked up: the tunnel id
/// (or `NOT_FOUND`) is in `meta.adj`, the decap data (`Tunnel::decap_aux`, which leaves
/// this bit clear) in the rest of `meta.param`.
const PREPARED: u32 = 1 << 15;
const _: () = assert!(PREPARED & Tunnel::AUX_FREE == PREPARED, "PREPARED is a bit decap_aux leaves clear");
const NOT_FOUND: u32 = u32::MAX;

/// `COUNT`: the form that counts per tunnel; the graph runs it only while per-tunnel
/// counting is on ([`super::register`]).
pub struct GtpuInput<O: Outer, const COUNT: bool>(std::marker::PhantomData<O>);

impl<O: Outer, const COUNT: bool> Default for GtpuInput<O, COUNT> {
    fn default() -> Self {
        GtpuInput(std::marker::PhantomData)
    }
}

/// The decap key of a plain G-PDU (the fast path's shape), for `prepare`.
#[inline(always)]
fn quick_key<O: Outer>(t: &GtpuTables, b: &[u8]) -> Option<TeidKey> {
    let (hl, _, dst) = O::outer(b).ok()?;
    let g = b.get(hl + 8..hl + 16)?;
    if g[0] != 0x30 || g[1] != 255 {
        return None;
    }
    let e = O::endpoint(t, &dst)?;
    Some(teid_table::key(e, u32::from_be_bytes([g[4], g[5], g[6], g[7]])))
}

/// Look a key up through the last-key cache: (tunnel id or `NOT_FOUND`, decap data).
#[inline(always)]
fn lookup(t: &GtpuTables, last: &mut Option<(TeidKey, u32, u32)>, k: TeidKey) -> (u32, u32) {
    if t.techniques.lookup_cache {
        if let Some((lk, id, aux)) = *last {
            if lk == k {
                return (id, aux);
            }
        }
    }
    match t.decap.get_entry(k) {
        Some((id, aux)) => {
            *last = Some((k, id, aux));
            (id, aux)
        }
        None => (NOT_FOUND, 0),
    }
}

fn gtp_counter(e: GtpuError) -> GtpuInputCounter {
    match e {
        GtpuError::Truncated => GtpuInputCounter::GtpTruncated,
        GtpuError::BadVersion => GtpuInputCounter::BadVersion,
        GtpuError::BadExtension => GtpuInputCounter::BadExtension,
        GtpuError::UnknownRequiredExtension => GtpuInputCounter::UnknownRequiredExtension,
        GtpuError::TooManyExtensions => GtpuInputCounter::TooManyExtensions,
        GtpuError::BadPduSessionContainer => GtpuInputCounter::BadPduSession,
    }
}

/// The outer and GTP-U facts `process` decides on, read before the buffer changes.
struct Parsed<A> {
    hl: usize,
    src: A,
    dst: A,
    src_port: u16,
    zero_checksum: bool,
    msg: MessageType,
    teid: u32,
    seq: u16,
    /// GTP-U header length (with optional fields and extensions) and payload length.
    ghl: usize,
    payload: usize,
}

/// `trusted`: the device already verified the UDP checksum.
#[inline(always)]
fn parse<O: Outer>(b: &[u8], trusted: bool) -> Result<Parsed<O::Addr>, GtpuInputCounter> {
    use GtpuInputCounter as C;
    let (hl, src, dst) = O::outer(b).map_err(|e| match e {
        OuterError::Truncated => C::OuterTruncated,
        OuterError::NotPlainUdp => C::NotPlainUdp,
    })?;
    let u = b.get(hl..hl + 8).ok_or(C::BadUdpLength)?;
    let ulen = u16::from_be_bytes([u[4], u[5]]) as usize;
    if ulen < 16 || hl + ulen > b.len() {
        return Err(if ulen >= 8 && hl + ulen <= b.len() { C::GtpTruncated } else { C::BadUdpLength });
    }
    let zero_checksum = u[6] == 0 && u[7] == 0;
    let seg = &b[hl..hl + ulen];
    if !zero_checksum && !trusted && !udp_checksum_ok(O::pseudo(&src, &dst), seg) {
        return Err(C::BadUdpChecksum);
    }
    let src_port = u16::from_be_bytes([u[0], u[1]]);
    let g = &seg[8..];
    // Fast path: a G-PDU without optional fields.
    if g[0] == 0x30 && g[1] == 255 {
        let glen = u16::from_be_bytes([g[2], g[3]]) as usize;
        if 8 + glen > g.len() {
            return Err(C::GtpTruncated);
        }
        let teid = u32::from_be_bytes([g[4], g[5], g[6], g[7]]);
        return Ok(Parsed { hl, src, dst, src_port, zero_checksum, msg: MessageType::GPdu, teid, seq: 0, ghl: 8, payload: glen });
    }
    let p = GtpuPacket::new_checked(g).map_err(gtp_counter)?;
    let repr = GtpuRepr::parse(&p).map_err(gtp_counter)?;
    let total = 8 + p.length();
    Ok(Parsed {
        hl,
        src,
        dst,
        src_port,
        zero_checksum,
        msg: repr.msg_type,
        teid: repr.teid.0,
        seq: repr.seq.unwrap_or(0),
        ghl: total - repr.payload_len,
        payload: repr.payload_len,
    })
}

/// What a tunnel does beyond decapsulating, by its decap data (out of the fast path):
/// the reverse-path check of the inner packet (an IP packet of another version is left
/// to `forward`, which drops it as `bad-inner`), then MSS clamping.
#[cold]
#[inline(never)]
fn more_than_decap<O: Outer>(
    ipc: &ip::context::IpContext,
    t: &GtpuTables,
    counts: &mut Counts<'_, GtpuInputCounter>,
    buf: &mut Buffer,
    id: u32,
    aux: u32,
    next: DecapNext,
) -> Result<(), GtpuInputCounter> {
    let urpf = Tunnel::aux_urpf(aux);
    let v6 = match buf.bytes().first().map(|v| v >> 4) {
        Some(4) => Some(false),
        Some(6) => Some(true),
        _ => None,
    };
    if let Some(v6) = v6.filter(|_| urpf != Urpf::Off && !matches!(next, DecapNext::Ethernet(_))) {
        let from = Arrival::Tunnel(TunnelRef { kind: if O::IS_V6 { TunnelKind::Gtpu6 } else { TunnelKind::Gtpu4 }, id });
        ip::urpf::check_source(&ipc.tables, buf.bytes(), v6, from, urpf).map_err(|f| match f {
            SourceFault::NoRoute => GtpuInputCounter::UrpfNoRoute,
            SourceFault::WrongInterface => GtpuInputCounter::UrpfWrongTunnel,
            SourceFault::OwnAddress => GtpuInputCounter::UrpfOwnAddress,
        })?;
    }
    if Tunnel::aux_mss_clamp(aux) {
        if let Some(tun) = t.tunnel(id) {
            let link_mtu = ipc.tables.adjacency(t.outer_adj(id)).mtu();
            if ip::outer::decap_mss_clamp(buf, link_mtu, tun.rewrite_len as usize, tun.mtu) {
                counts.inc(GtpuInputCounter::MssClamped);
            }
        }
    }
    Ok(())
}

impl<O: Outer, const COUNT: bool> GtpuInput<O, COUNT> {
    const REPLY: GtpuInputNext = if O::IS_V6 { GtpuInputNext::Ip6Lookup } else { GtpuInputNext::Ip4Lookup };

    /// Replace the packet by a GTP-U message from our address to the sender.
    fn reply(buf: &mut Buffer, ours: O::Addr, peer: O::Addr, dst_port: u16, msg: &[u8]) -> Verdict<GtpuInputNext, GtpuInputCounter> {
        let mut out = [0u8; 40 + 8 + messages::MAX_MESSAGE];
        let n = reply_datagram::<O>(ours, peer, dst_port, msg, &mut out);
        if buf.write(&out[..n]).is_err() {
            return Verdict::Drop(GtpuInputCounter::NoHeadroom);
        }
        Verdict::Next(Self::REPLY)
    }

    /// Hand the inner packet (now at the buffer start) on by its decap-next.
    #[inline(always)]
    fn forward(buf: &mut Buffer, next: DecapNext, skip_input: bool) -> Verdict<GtpuInputNext, GtpuInputCounter> {
        use GtpuInputNext as N;
        let b = buf.bytes();
        let version = b.first().map_or(0, |v| v >> 4);
        match (next, version) {
            (DecapNext::Ip4 | DecapNext::Ip, 4) => {
                if skip_input {
                    // ip4-input's fast-path checks, without the node hop; anything unusual
                    // still goes through ip4-input.
                    if let Some(total) = input_fast_path_len(b, true) {
                        buf.truncate(total);
                        return Verdict::Next(N::Ip4Lookup);
                    }
                }
                Verdict::Next(N::Ip4Input)
            }
            (DecapNext::Ip6 | DecapNext::Ip, 6) => {
                if skip_input {
                    if let Some(end) = input_fast_path_len(b, false) {
                        buf.truncate(end);
                        return Verdict::Next(N::Ip6Lookup);
                    }
                }
                Verdict::Next(N::Ip6Input)
            }
            (DecapNext::Ethernet(tx), _) if b.len() >= 14 => {
                buf.meta.tx_if = tx;
                Verdict::Next(N::Output)
            }
            _ => Verdict::Drop(GtpuInputCounter::BadInner),
        }
    }
}

impl<Cx: HasGtpu, O: Outer, const COUNT: bool> Node<Cx> for GtpuInput<O, COUNT> {
    type Next = GtpuInputNext;
    type Counter = GtpuInputCounter;

    fn name(&self) -> &'static str {
        O::INPUT
    }

    fn end_of_vector(&mut self, cx: &mut Cx) {
        if COUNT {
            cx.split().1.counters.flush();
        }
    }

    /// With `batch_lookup` and a table larger than the caches: compute every plain
    /// G-PDU's key, prefetch its table slot (with `prefetch`), then look them all up, so
    /// the table misses of one vector overlap. `process` then finds the tunnel id in
    /// `meta.adj`. A small table stays in cache and the extra pass would only cost
    /// (about 90 instructions per packet with one tunnel; docs/PERFORMANCE.md).
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        let (_, g) = cx.split();
        let t = &*g.tables;
        if !t.techniques.batch_lookup || t.decap.memory_bytes() < crate::tables::LARGE_TABLE_BYTES {
            for &b in input {
                pool.get_mut(b).meta.param = 0;
            }
            return;
        }
        let n = input.len().min(VECTOR_SIZE);
        let mut keys = [None; VECTOR_SIZE];
        for (k, &b) in keys.iter_mut().zip(&input[..n]) {
            *k = quick_key::<O>(t, pool.get(b).bytes());
        }
        if t.techniques.prefetch {
            for k in keys[..n].iter().flatten() {
                if let Some(s) = t.decap.home_slot(*k) {
                    engine::prefetch::read(s);
                }
            }
        }
        for (k, &b) in keys[..n].iter().zip(&input[..n]) {
            let m = &mut pool.get_mut(b).meta;
            if let Some(k) = k {
                let (id, aux) = lookup(t, &mut g.last, *k);
                m.adj = id;
                m.param = PREPARED | aux;
            } else {
                m.param = 0;
            }
        }
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use GtpuInputCounter as C;
        let (ipc, g) = cx.split();
        // A checksum still partial was never computed: the frame comes from a local
        // sender over a vnet-header device and is trusted, as the kernel trusts it.
        let trusted = buf.meta.l4_checksum_ok || buf.meta.offload.has_partial_checksum();
        let p = match parse::<O>(buf.bytes(), trusted) {
            Ok(p) => p,
            Err(C::UnknownRequiredExtension) if g.replies.take() => {
                // §5.2.1: tell the sender which extension headers we do support.
                let Ok((hl, src, dst)) = O::outer(buf.bytes()) else { return Verdict::Drop(C::UnknownRequiredExtension) };
                let sport = buf.bytes().get(hl..hl + 2).map_or(wire::gtpu::PORT, |s| u16::from_be_bytes([s[0], s[1]]));
                let mut m = [0u8; messages::MAX_MESSAGE];
                let n = messages::supported_extensions(0, &mut m);
                counts.inc(C::NotificationsSent);
                return Self::reply(buf, dst, src, sport, &m[..n]);
            }
            Err(c) => return Verdict::Drop(c),
        };
        let t = &*g.tables;
        match p.msg {
            MessageType::GPdu => {
                let (id, aux) = if buf.meta.param & PREPARED != 0 {
                    (buf.meta.adj, buf.meta.param & !PREPARED)
                } else {
                    match O::endpoint(t, &p.dst) {
                        Some(e) => lookup(t, &mut g.last, teid_table::key(e, p.teid)),
                        None => (NOT_FOUND, 0),
                    }
                };
                if id == NOT_FOUND {
                    if t.upf_uplink {
                        // Outer headers untouched: the UPF matches its own PDRs.
                        return Verdict::Next(if O::IS_V6 { GtpuInputNext::Upf6Uplink } else { GtpuInputNext::Upf4Uplink });
                    }
                    if !g.replies.take() {
                        return Verdict::Drop(C::UnknownTeid);
                    }
                    let mut m = [0u8; messages::MAX_MESSAGE];
                    let n = messages::error_indication(p.teid, p.dst.into(), p.src_port, &mut m);
                    counts.inc(C::ErrorIndicationsSent);
                    return Self::reply(buf, p.dst, p.src, wire::gtpu::PORT, &m[..n]);
                }
                // Everything decap needs came with the table slot: no tunnel entry read.
                let (next, accept_zero) = Tunnel::decode_aux(aux);
                if p.zero_checksum && !accept_zero {
                    return Verdict::Drop(C::ZeroChecksumRefused);
                }
                let skip = t.techniques.skip_inner_input;
                // The outer ECN field, for the inner packet (`ip::outer::tos`).
                let ecn = ip::outer::tos::ecn(buf.bytes(), O::IS_V6);
                // The outer packet's offload marks go with its headers (`Buffer::decapsulate`).
                if buf.decapsulate(p.hl + 8 + p.ghl, p.payload).is_err() {
                    return Verdict::Drop(C::GtpTruncated);
                }
                // An Ethernet PDU session's frame carries no ECN field of its own here.
                if ecn & ip::outer::tos::ECT1 != 0 && !matches!(next, DecapNext::Ethernet(_)) {
                    match ip::outer::tos::decap_ecn(ecn, buf) {
                        EcnDecap::Unchanged => {}
                        EcnDecap::Marked => counts.inc(C::EcnMarked),
                        EcnDecap::Drop => return Verdict::Drop(C::EcnCeNotEct),
                    }
                }
                counts.inc(C::Decapsulated);
                // One test for the tunnels that do more than decapsulate.
                if aux & Tunnel::AUX_MORE != 0 {
                    if let Err(c) = more_than_decap::<O>(ipc, t, counts, buf, id, aux, next) {
                        return Verdict::Drop(c);
                    }
                }
                // Last, after every read of the tables: a store into the context before
                // them would make the compiler load them again.
                if COUNT {
                    g.counters.rx(id, buf.len());
                }
                Self::forward(buf, next, skip)
            }
            MessageType::EchoRequest => {
                if p.teid != 0 {
                    return Verdict::Drop(C::BadSignalling);
                }
                if !g.echo_replies.take() {
                    return Verdict::Drop(C::RateLimited);
                }
                let mut m = [0u8; messages::MAX_MESSAGE];
                let n = messages::echo_response(p.seq, &mut m);
                counts.inc(C::EchoReplies);
                // §4.4.2.2: the response goes to the request's source port.
                Self::reply(buf, p.dst, p.src, p.src_port, &m[..n])
            }
            MessageType::EchoResponse => {
                let ies = buf.bytes().get(p.hl + 8 + p.ghl..p.hl + 8 + p.ghl + p.payload).unwrap_or(&[]);
                let ev = GtpuEvent::EchoResponse { peer: p.src.into(), recovery: messages::parse_recovery(ies) };
                if !g.report(ev) {
                    counts.inc(C::EventQueueFull);
                }
                Verdict::Drop(C::EchoResponses)
            }
            MessageType::ErrorIndication => {
                let ies = buf.bytes().get(p.hl + 8 + p.ghl..p.hl + 8 + p.ghl + p.payload).unwrap_or(&[]);
                let Some((teid, _peer)) = messages::parse_error_indication(ies) else {
                    return Verdict::Drop(C::BadSignalling);
                };
                if !g.report(GtpuEvent::ErrorIndication { peer: p.src.into(), teid }) {
                    counts.inc(C::EventQueueFull);
                }
                Verdict::Drop(C::ErrorIndications)
            }
            MessageType::EndMarker => Verdict::Drop(C::EndMarkers),
            MessageType::SupportedExtensionHeadersNotification => Verdict::Drop(C::Notifications),
            _ => Verdict::Drop(C::UnknownMessage),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        match parse::<O>(buf.bytes(), buf.meta.l4_checksum_ok) {
            Ok(p) => format!(
                "{} -> {} sport {} {} teid {:#x} gtp-header {} payload {}{}",
                p.src,
                p.dst,
                p.src_port,
                p.msg,
                p.teid,
                p.ghl,
                p.payload,
                if p.zero_checksum { " udp-checksum 0" } else { "" }
            ),
            Err(c) => format!("rejected: {}", <GtpuInputCounter as engine::Counters>::INFO[c as usize].name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::{Ip4Outer, Ip6Outer};
    use proptest::prelude::*;

    /// An outer IPv4/UDP header in front of arbitrary GTP-U bytes, lengths consistent.
    fn frame4(gtp: &[u8], udp_len_delta: i32) -> Vec<u8> {
        let mut b = vec![0u8; 28];
        b[0] = 0x45;
        b[9] = 17;
        b[12..16].copy_from_slice(&[198, 18, 1, 2]);
        b[16..20].copy_from_slice(&[198, 18, 1, 1]);
        b[20..22].copy_from_slice(&2152u16.to_be_bytes());
        b[22..24].copy_from_slice(&2152u16.to_be_bytes());
        let ulen = (8 + gtp.len() as i32 + udp_len_delta).clamp(0, 65535) as u16;
        b[24..26].copy_from_slice(&ulen.to_be_bytes());
        b.extend_from_slice(gtp);
        b
    }

    proptest! {
        /// Arbitrary bytes after the outer headers (and arbitrary outer bytes) give a
        /// parse or a named counter, never a panic.
        #[test]
        fn parse_never_panics(gtp in prop::collection::vec(any::<u8>(), 0..96), delta in -20i32..20, raw in prop::collection::vec(any::<u8>(), 0..80)) {
            let f = frame4(&gtp, delta);
            let _ = parse::<Ip4Outer>(&f, false);
            let _ = parse::<Ip4Outer>(&raw, false);
            let _ = parse::<Ip6Outer>(&raw, true);
            let t = GtpuTables::default();
            let _ = quick_key::<Ip4Outer>(&t, &f);
            let _ = messages::parse_error_indication(&raw);
            let _ = messages::parse_recovery(&raw);
        }

        /// A well-formed G-PDU parses to its TEID and payload, whatever the options.
        #[test]
        fn gpdu_parses(teid in any::<u32>(), seq in prop::option::of(any::<u16>()), payload in prop::collection::vec(any::<u8>(), 0..64)) {
            let repr = GtpuRepr { msg_type: MessageType::GPdu, teid: wire::gtpu::Teid(teid), seq, npdu: None, pdu_session: None, udp_port: None, pdcp_number: None, payload_len: payload.len() };
            let mut g = vec![0u8; repr.header_len()];
            repr.emit(&mut g);
            g.extend_from_slice(&payload);
            let p = parse::<Ip4Outer>(&frame4(&g, 0), false).map_err(|c| c as u16);
            let p = p.expect("a valid G-PDU");
            prop_assert_eq!((p.teid, p.payload, p.ghl), (teid, payload.len(), repr.header_len()));
            prop_assert!(p.zero_checksum);
        }
    }
}
