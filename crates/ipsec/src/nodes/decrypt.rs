//! `esp4-decrypt` / `esp6-decrypt`: ESP (IP protocol 50, or in UDP 4500) to one of our
//! addresses, demultiplexed by SPI to its inbound SA, checked against the replay window,
//! verified and decrypted in place; the inner packet goes to its lookup, or first to
//! `ipsecN-decrypted` (the spd crate) when it arrived on an interface with an SPD.
//!
//! Order (RFC 4303 §3.4): SA by SPI, replay check, ICV, decrypt, trailer, then the window
//! moves, so a forged or damaged packet changes no state.

use super::EspOuter;
use crate::context::{HasIpsec, IpsecContext};
use crate::crypto::{AeadInputs, OpenError};
use crate::replay::ReplayError;
use crate::sa::{Age, InboundError, Mode, Sa};
use crate::tables::IpsecTables;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict, VECTOR_SIZE};
use ip::outer::tos::EcnDecap;
use ip::tables::{TunnelKind, TunnelRef};
use ip::urpf::{self, Arrival, SourceFault, Urpf};
use wire::esp::{classify_udp, EspError, EspPacket, EspTrailer, UdpEncap, HEADER_LEN};
use wire::IpProtocol;

next_nodes! {
    pub enum EspDecryptNext {
        Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup",
        // An inner IPv6 packet whose hop-by-hop option asks for a parameter problem.
        Ip6IcmpError = "ip6-icmp-error",
        Ipsec4Decrypted = "ipsec4-decrypted", Ipsec6Decrypted = "ipsec6-decrypted",
        // IKE behind the non-ESP marker, to the IKE daemon on the host (`[punt]`).
        Punt = "ip-punt",
    }
}

counters! {
    pub enum EspDecryptCounter {
        Decrypted(Info, "decrypted", "packets decrypted"),
        EcnMarked(Info, "ecn-marked", "the outer header's congestion mark (CE, or ECT(1)) copied into the inner packet (RFC 6040)"),
        EcnCeNotEct(Warn, "ecn-ce-not-ect", "outer header marked CE over an inner packet that is not ECN-capable: dropped, as RFC 6040 asks"),
        SoftLifetime(Warn, "soft-lifetime", "an inbound SA passed a soft lifetime (packets or bytes)"),
        NatKeepalive(Info, "nat-keepalive", "NAT keep-alives received (RFC 3948), consumed"),
        IkeNotHandled(Info, "ike", "IKE messages behind the non-ESP marker, consumed: their port is not punted to an IKE daemon"),
        NotEsp(Error, "not-esp", "neither ESP nor UDP after the outer header (ipN-local should not send it)"),
        Truncated(Warn, "truncated", "ESP packet shorter than its header, IV, trailer and ICV"),
        BadSpi(Warn, "bad-spi", "SPI 0 or in the reserved range 1-255"),
        NoSa(Warn, "no-sa", "no inbound SA with this SPI and these tunnel addresses"),
        Unaligned(Warn, "unaligned", "ciphertext not a whole number of cipher blocks"),
        Replay(Warn, "replay", "sequence number already received (anti-replay window)"),
        TooOld(Warn, "too-old", "sequence number below the anti-replay window"),
        BadIcv(Warn, "bad-icv", "integrity check failed"),
        BadPadding(Warn, "bad-padding", "padding longer than the payload or not 1, 2, 3, ..."),
        LifetimeExpired(Error, "lifetime-expired", "the SA passed a hard lifetime (packets or bytes)"),
        Dummy(Info, "dummy", "dummy packets (next header 59, RFC 4303 2.6), consumed"),
        BadNextHeader(Warn, "bad-next-header", "tunnel-mode payload neither IPv4 nor IPv6"),
        BadInner(Warn, "bad-inner", "inner packet's header disagrees with the payload"),
        InnerBadSource(Warn, "inner-bad-source", "decrypted packet's source is one ipN-input refuses (0/8, 127/8, multicast, 240/4, broadcast; IPv6 multicast or ::1)"),
        InnerBadChecksum(Warn, "inner-bad-checksum", "decrypted IPv4 packet's header checksum is wrong"),
        InnerBadOption(Warn, "inner-bad-option", "decrypted packet's IPv4 options or IPv6 hop-by-hop header malformed, or an unrecognised option says discard"),
        InnerParamProblem(Info, "inner-param-problem", "decrypted IPv6 packet's unrecognised hop-by-hop option asks for an ICMPv6 parameter problem: sent to ip6-icmp-error, as ip6-input does"),
        InnerMulticast(Info, "inner-multicast", "decrypted IPv6 packet to a multicast address: not routed, and link-scope groups are no business of a tunnel's"),
        TransportExtHeader(Warn, "transport-extension-header", "transport-mode ESP after IPv6 extension headers (not restored)"),
        UrpfNoRoute(Warn, "urpf-no-route", "uRPF: no route back to the decrypted packet's source"),
        UrpfWrongTunnel(Warn, "urpf-wrong-tunnel", "strict uRPF: the route back to the source does not go to the SA's peer"),
        UrpfOwnAddress(Warn, "urpf-own-address", "uRPF: the decrypted packet's source is one of the gateway's addresses"),
    }
}

/// A packet's nonce as `prepare` wrote it, for the SA and IV it was written for.
#[derive(Clone, Copy, Default)]
struct Nonce {
    /// The SPI and the inbound SA's index it was looked up to (the default, SPI 0, which
    /// no ESP packet has: none).
    spi: u32,
    index: u32,
    /// The packet's IV, as its 8 bytes read in place.
    iv: u64,
    inputs: AeadInputs,
}

impl Nonce {
    /// The nonce of the ESP packet `b` (from its outer header) for its inbound SA, when
    /// that SA's cipher reads one; anything else is left to [`decrypt_with`], which
    /// checks it all. `last`: the SA the previous packet's SPI named (a vector is mostly
    /// one SA's packets: one table lookup a run).
    #[inline(always)]
    fn of<'t, O: EspOuter>(tables: &'t IpsecTables, last: &mut Option<(u32, u32, &'t Sa)>, b: &[u8]) -> Option<Nonce> {
        let outer = O::outer_esp(b)?;
        let at = outer.at + if outer.udp { 8 } else { 0 };
        let esp = b.get(at..)?;
        let spi = u32::from_be_bytes(esp.get(..4)?.try_into().ok()?);
        let iv = iv_word(esp)?;
        let (index, sa) = match *last {
            Some((s, index, sa)) if s == spi => (index, sa),
            _ => {
                let (index, sa) = tables.inbound(spi)?;
                *last = Some((spi, index, sa));
                (index, sa)
            }
        };
        if !sa.transform.opens_with_nonce() {
            return None;
        }
        let mut inputs = AeadInputs::default();
        sa.transform.write_open_nonce(esp, &mut inputs);
        Some(Nonce { spi, index, iv, inputs })
    }
}

/// The 8 bytes after the ESP header `esp` starts with, as one word (where AES-GCM's IV
/// is), if the packet has them.
#[inline(always)]
fn iv_word(esp: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(esp.get(HEADER_LEN..HEADER_LEN + 8)?.try_into().ok()?))
}

/// `inputs`: scratch for a packet's nonce when `prepare` did not write it. `nonces`: the
/// current vector's, written by `prepare` before any of its packets is opened: the
/// cipher (intel-ipsec-mb) reads its nonce with a masked load, which the store buffer
/// does not forward, so a nonce written just before the call waited for its stores to
/// reach the cache (~22 cycles a packet on the Zen 5; docs/PERFORMANCE.md, session 72).
/// `next`: the place in the vector of the packet `process` takes next.
pub struct EspDecrypt<O: EspOuter> {
    inputs: AeadInputs,
    /// The vector's last SPI and its inbound SA's index ([`decrypt_with`]).
    last: Option<(u32, u32)>,
    nonces: Box<[Nonce; VECTOR_SIZE]>,
    len: usize,
    next: usize,
    _family: std::marker::PhantomData<O>,
}

impl<O: EspOuter> Default for EspDecrypt<O> {
    fn default() -> Self {
        EspDecrypt {
            inputs: AeadInputs::default(),
            last: None,
            nonces: Box::new([Nonce::default(); VECTOR_SIZE]),
            len: 0,
            next: 0,
            _family: std::marker::PhantomData,
        }
    }
}

impl From<EspError> for EspDecryptCounter {
    fn from(e: EspError) -> Self {
        match e {
            EspError::Truncated | EspError::ShortUdpPayload => EspDecryptCounter::Truncated,
            EspError::ZeroSpi | EspError::ReservedSpi => EspDecryptCounter::BadSpi,
            EspError::Unaligned => EspDecryptCounter::Unaligned,
            EspError::PadTooLong | EspError::BadPadding => EspDecryptCounter::BadPadding,
        }
    }
}

/// Decrypt the ESP packet in `buf` (from its outer header on); on success the buffer
/// holds the inner packet and `meta.param` the inbound SA's index (for the inbound SPD
/// check), and the result names its lookup, the SA's age and its source check.
#[inline(always)]
pub fn decrypt<O: EspOuter>(x: &mut IpsecContext, buf: &mut Buffer) -> Result<(EspDecryptNext, Age, Urpf), EspDecryptCounter> {
    decrypt_with::<O>(x, buf, None, &mut AeadInputs::default(), &mut None)
}

/// [`decrypt`] with the nonce `prepare` wrote for this packet (used when it was written
/// for the SA and IV the packet has), the node's scratch for the nonce otherwise, and
/// `last`: the SPI and inbound SA index the vector's previous packet looked up (the
/// tables do not change within a vector, and its packets are mostly one SA's: the SPI's
/// hash lookup once a run of them).
#[inline(always)]
fn decrypt_with<O: EspOuter>(
    x: &mut IpsecContext,
    buf: &mut Buffer,
    ahead: Option<&Nonce>,
    scratch: &mut AeadInputs,
    last: &mut Option<(u32, u32)>,
) -> Result<(EspDecryptNext, Age, Urpf), EspDecryptCounter> {
    use EspDecryptCounter as C;
    let outer = O::outer_esp(buf.bytes()).ok_or(C::NotEsp)?;
    let mut at = outer.at;
    if outer.udp {
        let udp = buf.bytes().get(at..at + 8).ok_or(C::Truncated)?;
        let udp_len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
        if udp_len < 8 || at + udp_len > buf.len() {
            return Err(C::Truncated);
        }
        // The UDP checksum is not checked: the ICV covers everything it would.
        buf.truncate(at + udp_len);
        at += 8;
        match classify_udp(&buf.bytes()[at..])? {
            UdpEncap::Esp => {}
            UdpEncap::Keepalive => return Err(C::NatKeepalive),
            UdpEncap::Ike => return Err(C::IkeNotHandled),
        }
    }
    let (tables, states) = x.split();
    let p = EspPacket::new_checked(&buf.bytes()[at..])?;
    let (spi, low) = (p.spi(), p.seq());
    let (index, sa) = match *last {
        Some((s, index)) if s == spi => (index, tables.inbound_at(index).ok_or(C::NoSa)?),
        _ => {
            let (index, sa) = tables.inbound(spi).ok_or(C::NoSa)?;
            *last = Some((spi, index));
            (index, sa)
        }
    };
    let s = &*sa.spec;
    if O::from_ip(s.local) != Some(outer.dst) || O::from_ip(s.remote) != Some(outer.src) || s.udp_encap.is_some() != outer.udp {
        return Err(C::NoSa);
    }
    let l = s.alg.layout();
    p.check_layout(&l)?;
    // The nonce `prepare` wrote when it was for this SA and this IV (AES-GCM's 8 bytes
    // after the header; a packet too short for them gets the scratch, and its error).
    let iv = iv_word(&buf.bytes()[at..]);
    let inputs = match ahead {
        Some(n) if n.spi == spi && n.index == index && Some(n.iv) == iv => &n.inputs,
        _ => {
            sa.transform.write_open_nonce(&buf.bytes()[at..], scratch);
            &*scratch
        }
    };
    let state = IpsecContext::inbound_state(states, index, sa);
    let seq = if s.anti_replay { state.window.check(low).map_err(replay_counter)? } else { state.window.full(low) };
    let esp = &mut buf.bytes_mut()[at..];
    sa.transform.open_with(esp, seq, s.esn, inputs).map_err(|e| match e {
        OpenError::BadIcv => C::BadIcv,
        OpenError::Unaligned => C::Unaligned,
    })?;
    let text_at = at + HEADER_LEN + l.iv_len;
    let text_len = buf.len() - text_at - l.icv_len;
    let trailer = EspTrailer::parse(&buf.bytes()[text_at..text_at + text_len])?;
    let payload_len = trailer.payload_len(text_len);
    // Counted as the sender counts it: the packet it sealed, its own IP header with it in
    // transport mode (`outer.at` bytes, where ESP or its UDP header began).
    let counted = if s.mode == Mode::Transport { outer.at + payload_len } else { payload_len };
    let age = match state.accept(seq, counted as u64, &s.lifetime, s.anti_replay) {
        Ok(Age::Expired) | Err(InboundError::Expired) => return Err(C::LifetimeExpired),
        Ok(age) => age,
        Err(InboundError::Replay(e)) => return Err(replay_counter(e)),
    };
    if s.mode == Mode::Transport && trailer.next_header != IpProtocol::Ipv6NoNxt {
        return restore_transport::<O>(buf, outer.at, text_at, payload_len, trailer.next_header, index).map(|n| (n, age, s.urpf));
    }
    // The inner packet's own length: a sender may follow it with TFC padding (RFC 4303
    // §2.7, Linux's `tfcpad`, strongSwan's `tfc_padding`), which goes with the trailer.
    // It then gets `ipN-input`'s checks (a martian source, a bad header checksum or
    // option), as a packet from a wire does: the SA's peer vouches only for having sent it.
    let inner = &buf.bytes()[text_at..text_at + payload_len];
    let (next, v4) = match trailer.next_header {
        IpProtocol::IpIp => (EspDecryptNext::Ip4Lookup, true),
        IpProtocol::Ipv6 => (EspDecryptNext::Ip6Lookup, false),
        IpProtocol::Ipv6NoNxt => return Err(C::Dummy),
        _ => return Err(C::BadNextHeader),
    };
    let inner_len = match ip::nodes::input_fast_path_len(inner, v4) {
        Some(len) => len,
        None => match inner_full_check(inner, v4)? {
            InnerChecked::Pass(len) => len,
            InnerChecked::Icmp(req) => {
                // The error quotes the inner packet (its header's length, at most what
                // ESP carried), from the interface the ESP arrived on.
                let len = (40 + u16::from_be_bytes([inner[4], inner[5]]) as usize).min(inner.len());
                plaintext(buf, text_at, len)?;
                buf.meta.param = req.encode();
                return Err(C::InnerParamProblem);
            }
        },
    };
    plaintext(buf, text_at, inner_len)?;
    buf.meta.param = index;
    Ok((next, age, s.urpf))
}

/// The decrypted packet, the `len` bytes from `at`, with nothing left of what the
/// receiving device said about the ESP packet it saw: in both modes the result is
/// another packet than the device's (the inner one in tunnel mode; in transport mode the
/// packet's own header over an upper layer the device saw only encrypted). So, as for
/// every tunnel (`Buffer::decapsulate`): its word that it verified the L4 checksum (for
/// ESP in UDP that was the outer UDP's; the plaintext's checksums nobody verified), its
/// GSO mark (one ESP packet, one inner packet; a frame of several was cut before
/// `ipN-local` sent it here), a partial checksum in the stripped headers; and then also
/// a partial checksum left inside the result, which `decapsulate` would keep as an inner
/// packet's own: no sender leaves a checksum pending under ESP (it seals finished bytes,
/// as `espN-encrypt` completes one first), so such a mark points at bytes that were
/// ciphertext, or, in transport mode, into the header moved up over the stripped ones
/// (an outer UDP's, under the null algorithms, whose ESP has no IV), and completing it
/// would corrupt them.
#[inline(always)]
fn plaintext(buf: &mut Buffer, at: usize, len: usize) -> Result<(), EspDecryptCounter> {
    buf.decapsulate(at, len).map_err(|_| EspDecryptCounter::Truncated)?;
    buf.meta.offload.csum_start = 0;
    buf.meta.offload.csum_offset = 0;
    Ok(())
}

/// What [`inner_full_check`] found in an inner packet it did not refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InnerChecked {
    /// Its length.
    Pass(usize),
    /// The ICMPv6 error `ip6-input` would send about it (an unrecognised hop-by-hop
    /// option whose type asks for a parameter problem, RFC 8200 §4.2).
    Icmp(ip::nodes::IcmpRequest),
}

/// `ipN-input`'s checks past its fast path for a decrypted inner packet (IPv4 when
/// `v4`), the same functions: its length, the ICMPv6 parameter problem `ip6-input` would
/// send for it (sent too: the error goes back by the route to the packet's source, into
/// the SA's pair where the peer sent it from behind it), or the reason it is dropped. An
/// IPv6 packet to a multicast address is dropped (`inner-multicast`): vecgate routes no
/// multicast, and `ip6-local`, where `ip6-input` sends multicast from a wire for the
/// link's groups (neighbour discovery), is for the link the packet arrived on, which a
/// packet out of a tunnel did not come from.
#[cold]
#[inline(never)]
fn inner_full_check(inner: &[u8], v4: bool) -> Result<InnerChecked, EspDecryptCounter> {
    use ip::nodes::ip4_input::{self, Ip4InputCounter as C4};
    use ip::nodes::ip6_input::{self, Ip6Checked, Ip6InputCounter as C6};
    use EspDecryptCounter as C;
    if v4 {
        return ip4_input::full_check(inner).map(InnerChecked::Pass).map_err(|e| match e {
            C4::BadSource => C::InnerBadSource,
            C4::BadChecksum => C::InnerBadChecksum,
            C4::BadOption => C::InnerBadOption,
            C4::Truncated | C4::BadVersion | C4::BadHeaderLength | C4::BadTotalLength => C::BadInner,
        });
    }
    match ip6_input::full_check(inner) {
        // A payload length of 0 (a jumbogram's) says nothing of where it ends in ESP.
        Ok(Ip6Checked::Pass { len, .. }) if len > inner.len() || (len == 40 && inner.len() != 40) => Err(C::BadInner),
        Ok(Ip6Checked::Pass { dst_multicast: true, .. }) => Err(C::InnerMulticast),
        Ok(Ip6Checked::Pass { len, .. }) => Ok(InnerChecked::Pass(len)),
        Ok(Ip6Checked::ParamProblem { pointer }) => Ok(InnerChecked::Icmp(ip6_input::option_param_problem(pointer))),
        Err(C6::BadSource) => Err(C::InnerBadSource),
        Err(C6::BadHopByHop | C6::OptionDiscard | C6::OptionParamProblem) => Err(C::InnerBadOption),
        Err(C6::Truncated | C6::BadVersion | C6::BadJumbo) => Err(C::BadInner),
    }
}

/// Transport mode: the packet's own IP header (`hl` bytes, where ESP or its UDP header
/// began) moves up against the decrypted payload and names `upper` after it again.
#[inline(always)]
fn restore_transport<O: EspOuter>(
    buf: &mut Buffer,
    hl: usize,
    text_at: usize,
    payload_len: usize,
    upper: IpProtocol,
    index: u32,
) -> Result<EspDecryptNext, EspDecryptCounter> {
    // IPv6 extension headers before ESP: the next-header field to restore is in the
    // last of them, and none of our peers send them in transport mode.
    if O::IS_V6 && hl != 40 {
        return Err(EspDecryptCounter::TransportExtHeader);
    }
    buf.bytes_mut().copy_within(0..hl, text_at - hl);
    plaintext(buf, text_at - hl, hl + payload_len)?;
    O::set_upper(buf.bytes_mut(), hl, upper);
    buf.meta.param = index;
    Ok(if O::IS_V6 { EspDecryptNext::Ip6Lookup } else { EspDecryptNext::Ip4Lookup })
}

/// The reverse-path check of a packet [`decrypt`] took out of inbound SA
/// `buf.meta.param` (whose `urpf` it returned, not off; `v6`: the inner packet is IPv6).
/// Strict passes a source whose route back goes into an ESP tunnel to the SA's peer
/// ([`IpsecTables::reaches_peer`]), not into another tunnel or out of a link. Out of
/// line: SAs without the check pay one compare.
#[cold]
#[inline(never)]
pub fn check_source(x: &IpsecTables, ip: &ip::tables::Tables, buf: &Buffer, v6: bool) -> Result<(), EspDecryptCounter> {
    let Some(sa) = x.sas.get(buf.meta.param as usize).and_then(Option::as_ref) else { return Ok(()) };
    let s = &*sa.spec;
    let Some(route) = urpf::source_route(ip, buf.bytes(), v6) else { return Ok(()) };
    // The packet came out of the inbound SA, which no route leads into; a route into a
    // tunnel to the same peer counts as leading back into it.
    let kind = if s.local.is_ipv4() { TunnelKind::Esp4 } else { TunnelKind::Esp6 };
    let from = match TunnelRef::decode(route) {
        Some(t) if x.reaches_peer(t, s) => t,
        _ => TunnelRef { kind, id: buf.meta.param },
    };
    urpf::check(ip, route, Arrival::Tunnel(from), s.urpf).map_err(|f| match f {
        SourceFault::NoRoute => EspDecryptCounter::UrpfNoRoute,
        SourceFault::WrongInterface => EspDecryptCounter::UrpfWrongTunnel,
        SourceFault::OwnAddress => EspDecryptCounter::UrpfOwnAddress,
    })
}

fn replay_counter(e: ReplayError) -> EspDecryptCounter {
    match e {
        ReplayError::Replayed => EspDecryptCounter::Replay,
        ReplayError::TooOld => EspDecryptCounter::TooOld,
    }
}

impl<Cx: HasIpsec, O: EspOuter> Node<Cx> for EspDecrypt<O> {
    type Next = EspDecryptNext;
    type Counter = EspDecryptCounter;

    fn name(&self) -> &'static str {
        O::DECRYPT
    }

    /// Each packet's nonce written ahead of its opening ([`EspDecrypt`]).
    fn prepare(&mut self, cx: &mut Cx, pool: &mut engine::Pool, input: &[engine::BufIdx]) {
        let (_, x) = cx.split_ipsec();
        let n = if x.tables.inbound_nonces { input.len().min(VECTOR_SIZE) } else { 0 };
        let mut last = None;
        for (nonce, &bi) in self.nonces.iter_mut().zip(&input[..n]) {
            *nonce = Nonce::of::<O>(&x.tables, &mut last, pool.get(bi).bytes()).unwrap_or_default();
        }
        (self.len, self.next, self.last) = (n, 0, None);
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let (ipc, x) = cx.split_ipsec();
        // The outer ECN field, read before decryption strips the outer header, goes into
        // the inner packet by RFC 6040 (RFC 4301 §5.1.2.1). In transport mode the "inner"
        // header is that same header, which the combination leaves as it is.
        let ecn = ip::outer::tos::ecn(buf.bytes(), O::IS_V6);
        // `prepare` ran on this vector and the dispatcher hands its packets here in order;
        // a nonce for another packet (or none) is not used (`decrypt_with`).
        let ahead = self.nonces[..self.len].get(self.next);
        self.next += 1;
        match decrypt_with::<O>(x, buf, ahead, &mut self.inputs, &mut self.last) {
            Ok((next, age, urpf)) => {
                match ip::outer::tos::decap_ecn(ecn, buf) {
                    EcnDecap::Unchanged => {}
                    EcnDecap::Marked => counts.inc(EspDecryptCounter::EcnMarked),
                    EcnDecap::Drop => return Verdict::Drop(EspDecryptCounter::EcnCeNotEct),
                }
                if age == Age::SoftReached {
                    counts.inc(EspDecryptCounter::SoftLifetime);
                }
                counts.inc(EspDecryptCounter::Decrypted);
                if urpf != Urpf::Off {
                    if let Err(c) = check_source(&x.tables, &ipc.tables, buf, next == EspDecryptNext::Ip6Lookup) {
                        return Verdict::Drop(c);
                    }
                }
                // Arrived on an interface with an SPD: the inner packet must be one its
                // inbound policy sends through this SA (the SA index is in meta.param).
                Verdict::Next(match (ipc.tables.has_spd(buf.meta.rx_if), next) {
                    (true, EspDecryptNext::Ip4Lookup) => EspDecryptNext::Ipsec4Decrypted,
                    (true, EspDecryptNext::Ip6Lookup) => EspDecryptNext::Ipsec6Decrypted,
                    (_, n) => n,
                })
            }
            Err(EspDecryptCounter::InnerParamProblem) => {
                counts.inc(EspDecryptCounter::InnerParamProblem);
                Verdict::Next(EspDecryptNext::Ip6IcmpError)
            }
            Err(EspDecryptCounter::IkeNotHandled) => match ipc.tables.punt.target_of(buf.bytes()) {
                Some(adj) => {
                    buf.meta.adj = adj;
                    Verdict::Next(EspDecryptNext::Punt)
                }
                None => Verdict::Drop(EspDecryptCounter::IkeNotHandled),
            },
            Err(c) => Verdict::Drop(c),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("len {}", buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv6 packet from 2001:db8:160::7 to `dst`, with a hop-by-hop header holding one
    /// 4-byte option of type `otype` if any, and 8 bytes of UDP.
    fn inner6(dst: [u8; 16], otype: Option<u8>) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0x01, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        p.extend_from_slice(&dst);
        if let Some(t) = otype {
            p[6] = 0;
            p.extend_from_slice(&[17, 0, t, 4, 0, 0, 0, 0]);
        }
        p.extend_from_slice(&[0, 9, 0, 9, 0, 8, 0, 0]);
        let len = (p.len() - 40) as u16;
        p[4..6].copy_from_slice(&len.to_be_bytes());
        p
    }

    #[test]
    fn inner_checks_send_the_parameter_problem_and_drop_multicast() {
        let unicast = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut group = [0; 16];
        group[..2].copy_from_slice(&[0xff, 0x0e]);
        group[15] = 1;
        let check = |p: Vec<u8>| inner_full_check(&p, false);
        let pp = Ok(InnerChecked::Icmp(ip::nodes::IcmpRequest::new(4, 2, 42)));
        assert_eq!(check(inner6(unicast, Some(0xbe))), pp);
        assert_eq!(check(inner6(unicast, Some(0xfe))), pp);
        assert_eq!(check(inner6(group, Some(0xbe))), pp, "type 10: even to a group");
        assert_eq!(check(inner6(group, Some(0xfe))), Err(EspDecryptCounter::InnerBadOption), "type 11: not to a group");
        assert_eq!(check(inner6(unicast, Some(0x7e))), Err(EspDecryptCounter::InnerBadOption), "type 01: discard");
        assert_eq!(check(inner6(unicast, Some(0x3e))), Ok(InnerChecked::Pass(56)), "type 00: skipped");
        assert_eq!(check(inner6(group, None)), Err(EspDecryptCounter::InnerMulticast));
        group[1] = 0x02;
        assert_eq!(check(inner6(group, Some(0x3e))), Err(EspDecryptCounter::InnerMulticast));
        assert_eq!(check(inner6(unicast, None)), Ok(InnerChecked::Pass(48)));
    }
}
