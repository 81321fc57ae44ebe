//! Address and port translation of a packet, checksums patched incrementally (RFC 1624
//! through `wire::checksum`), and of the packet an ICMP error quotes, so that an error
//! about a translated flow reaches the client in the client's terms (path MTU discovery
//! through the balancer).
//!
//! SCTP (RFC 9260) is translated too, off the TCP/UDP path: [`flow`] sends it away by
//! [`NatError::Sctp`], [`sctp_flow`] reads it (its chunks and its CRC32c), [`translate`]
//! rewrites it and computes its CRC32c again (a CRC has no cheap incremental patch, and
//! it covers no address: only the ports change it).
//!
//! Works on a packet from its IP header on. IPv4 with options; IPv6 with Hop-by-Hop and
//! Destination Options headers before the transport header (carried unchanged: neither
//! covers an address), other extension headers refused by name. Fragments are refused:
//! their ports are in the first fragment only (`lbN-nat` has them reassembled).

use crate::family::{Family, V4, V6};
use crate::session::{FlowKey, Rewrite};
use wire::checksum::{self, update16};

/// Why a packet could not be read as a translatable flow (each a node counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatError {
    /// Shorter than its headers say.
    Truncated,
    /// An IPv4 fragment, or an IPv6 packet with a Fragment header (after any Hop-by-Hop
    /// and Destination Options headers).
    Fragment,
    /// IPv6 extension headers not translated: a Routing header (the destination is not
    /// the last one, or an SRv6 segment list names it), AH (it covers the addresses),
    /// ESP, mobility, HIP or shim6; a malformed chain, or one of more than
    /// [`MAX_EXTENSION_BYTES`].
    ExtensionHeaders,
    /// Not TCP, UDP or SCTP (or, for errors, not an ICMP error about one of them).
    Protocol,
    /// A UDP length field below the UDP header's 8 bytes or past the packet: translated,
    /// the gateway would send a malformed datagram from its own address.
    BadUdpLength,
    /// SCTP: not an error, the packet goes to [`sctp_flow`] (out of the TCP/UDP path,
    /// which tests for it only where it refused every other protocol).
    Sctp,
    /// An SCTP chunk whose length is below its header's or past the packet's end.
    BadSctpChunk,
    /// An SCTP packet whose CRC32c was wrong on arrival.
    SctpChecksum,
    /// An SCTP INIT or INIT ACK whose parameters do not fit its chunk (a length below 4
    /// or past the chunk) or that is shorter than its fixed fields: its multi-homing
    /// could not be removed ([`remove_sctp_multihoming`]).
    BadSctpParameter,
}

/// The most bytes of IPv6 extension headers before the transport header that a flow
/// may have (the transport header's offset is kept in a byte; real chains are a few
/// dozen bytes).
pub const MAX_EXTENSION_BYTES: usize = 255 - 40;

pub(crate) const TCP: u8 = 6;
pub(crate) const UDP: u8 = 17;
pub(crate) const SCTP: u8 = 132;
const ICMP4: u8 = 1;
const ICMP6: u8 = 58;

/// Where a family keeps its header fields.
pub trait Layout: Family {
    /// The transport header's offset and the protocol; fragments and unknown layouts refused.
    fn l4(pkt: &[u8]) -> Result<(usize, u8), NatError>;
    /// The packet's length as its IP header gives it (after [`Layout::l4`] accepted it).
    fn ip_len(pkt: &[u8]) -> usize;
    /// Write the packet's length (`len`, from the IP header on, no more than it was) in
    /// its IP header, patching the header checksum, if the family has one.
    fn set_ip_len(pkt: &mut [u8], len: usize);
    fn src(pkt: &[u8]) -> Self::Addr;
    fn dst(pkt: &[u8]) -> Self::Addr;
    /// Write an address (`at`: the source's or the destination's offset) and patch the
    /// header checksum, if the family has one.
    fn set_addr(pkt: &mut [u8], at: usize, a: &Self::Addr);
    /// Write both addresses, `delta` being their change (a [`delta`]), and patch the
    /// header checksum, if the family has one.
    fn set_addrs(pkt: &mut [u8], src: &Self::Addr, dst: &Self::Addr, delta: u32);
    const SRC_AT: usize;
    const DST_AT: usize;
    /// The ICMP protocol of the family.
    const ICMP: u8;
    /// Whether an ICMP type is an error that quotes a packet.
    fn icmp_is_error(t: u8) -> bool;
    /// The checksum of an ICMP message from offset `at` to the end (ICMPv6 covers a
    /// pseudo-header).
    fn icmp_checksum(pkt: &[u8], at: usize) -> u16;
    /// A UDP checksum of zero means "none" (IPv4 only).
    const UDP_ZERO_MEANS_NONE: bool;
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The checksum field `field` after the bytes `old` became `new` (even lengths).
fn update_bytes(mut field: u16, old: &[u8], new: &[u8]) -> u16 {
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        field = update16(field, be16(o, 0), be16(n, 0));
    }
    field
}

/// RFC 1624 eqn. 3 for many words at once: `~m + m'` summed over every word that
/// changes (unfolded), so that one change to the addresses patches the IP header and
/// the transport checksum alike, each folded once (`update16` per word cost ~250
/// instructions a translated packet, callgrind, docs/PERFORMANCE.md).
fn delta(old: &[u8], new: &[u8]) -> u32 {
    old.chunks_exact(2).zip(new.chunks_exact(2)).map(|(o, n)| (!be16(o, 0)) as u32 + be16(n, 0) as u32).sum()
}

/// `field` with a [`delta`] applied: `~(~field + delta)`, folded.
fn apply(field: u16, delta: u32) -> u16 {
    let mut s = (!field) as u32 + delta;
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

impl Layout for V4 {
    fn l4(pkt: &[u8]) -> Result<(usize, u8), NatError> {
        if pkt.len() < 20 {
            return Err(NatError::Truncated);
        }
        let hl = (pkt[0] & 0x0f) as usize * 4;
        if hl < 20 || pkt.len() < hl {
            return Err(NatError::Truncated);
        }
        if be16(pkt, 6) & 0x3fff != 0 {
            return Err(NatError::Fragment);
        }
        Ok((hl, pkt[9]))
    }
    fn ip_len(pkt: &[u8]) -> usize {
        be16(pkt, 2) as usize
    }
    fn set_ip_len(pkt: &mut [u8], len: usize) {
        let len = len as u16;
        let c = update16(be16(pkt, 10), be16(pkt, 2), len);
        pkt[10..12].copy_from_slice(&c.to_be_bytes());
        pkt[2..4].copy_from_slice(&len.to_be_bytes());
    }
    fn src(pkt: &[u8]) -> [u8; 4] {
        pkt[12..16].try_into().expect("checked by l4")
    }
    fn dst(pkt: &[u8]) -> [u8; 4] {
        pkt[16..20].try_into().expect("checked by l4")
    }
    fn set_addr(pkt: &mut [u8], at: usize, a: &[u8; 4]) {
        let c = update_bytes(be16(pkt, 10), &pkt[at..at + 4], a);
        pkt[10..12].copy_from_slice(&c.to_be_bytes());
        pkt[at..at + 4].copy_from_slice(a);
    }
    #[inline(always)]
    fn set_addrs(pkt: &mut [u8], src: &[u8; 4], dst: &[u8; 4], delta: u32) {
        let c = apply(be16(pkt, 10), delta);
        pkt[10..12].copy_from_slice(&c.to_be_bytes());
        pkt[12..16].copy_from_slice(src);
        pkt[16..20].copy_from_slice(dst);
    }
    const SRC_AT: usize = 12;
    const DST_AT: usize = 16;
    const ICMP: u8 = ICMP4;
    fn icmp_is_error(t: u8) -> bool {
        matches!(t, 3 | 11 | 12)
    }
    fn icmp_checksum(pkt: &[u8], at: usize) -> u16 {
        checksum::checksum(&pkt[at..])
    }
    const UDP_ZERO_MEANS_NONE: bool = true;
}

impl Layout for V6 {
    fn l4(pkt: &[u8]) -> Result<(usize, u8), NatError> {
        if pkt.len() < 40 {
            return Err(NatError::Truncated);
        }
        match pkt[6] {
            44 => Err(NatError::Fragment),
            0 | 43 | 50 | 51 | 60 | 135 | 139 | 140 => past_options(pkt),
            p => Ok((40, p)),
        }
    }
    fn ip_len(pkt: &[u8]) -> usize {
        40 + be16(pkt, 4) as usize
    }
    fn set_ip_len(pkt: &mut [u8], len: usize) {
        pkt[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
    }
    fn src(pkt: &[u8]) -> [u8; 16] {
        pkt[8..24].try_into().expect("checked by l4")
    }
    fn dst(pkt: &[u8]) -> [u8; 16] {
        pkt[24..40].try_into().expect("checked by l4")
    }
    fn set_addr(pkt: &mut [u8], at: usize, a: &[u8; 16]) {
        pkt[at..at + 16].copy_from_slice(a);
    }
    #[inline(always)]
    fn set_addrs(pkt: &mut [u8], src: &[u8; 16], dst: &[u8; 16], _delta: u32) {
        pkt[8..24].copy_from_slice(src);
        pkt[24..40].copy_from_slice(dst);
    }
    const SRC_AT: usize = 8;
    const DST_AT: usize = 24;
    const ICMP: u8 = ICMP6;
    fn icmp_is_error(t: u8) -> bool {
        t < 128 && matches!(t, 1..=4)
    }
    fn icmp_checksum(pkt: &[u8], at: usize) -> u16 {
        let (src, dst) = (std::net::Ipv6Addr::from(V6::src(pkt)), std::net::Ipv6Addr::from(V6::dst(pkt)));
        let mut c = checksum::pseudo_header_v6(&src, &dst, ICMP6, (pkt.len() - at) as u32);
        c.add_bytes(&pkt[at..]);
        c.finish()
    }
    const UDP_ZERO_MEANS_NONE: bool = false;
}

/// An IPv6 packet's transport header behind extension headers (out of line: rare): past
/// Hop-by-Hop and Destination Options headers. A Fragment header among them is a
/// fragment; anything else (a Routing header, AH, ESP, mobility, HIP, shim6, a malformed
/// chain, or a chain longer than [`MAX_EXTENSION_BYTES`]) is refused: the one list.
#[cold]
fn past_options(pkt: &[u8]) -> Result<(usize, u8), NatError> {
    use wire::ip::IpProtocol;
    let info = wire::ipv6_ext::walk_chain(IpProtocol::from(pkt[6]), &pkt[40..]).map_err(|_| NatError::ExtensionHeaders)?;
    if info.fragment.is_some() {
        return Err(NatError::Fragment);
    }
    match info.upper {
        _ if info.routing.is_some() || info.upper_offset > MAX_EXTENSION_BYTES => Err(NatError::ExtensionHeaders),
        Some(IpProtocol::Ah | IpProtocol::Esp | IpProtocol::Unknown(135 | 139 | 140)) => Err(NatError::ExtensionHeaders),
        Some(p) => Ok((40 + info.upper_offset, p.into())),
        None => Err(NatError::ExtensionHeaders),
    }
}

/// A TCP or UDP packet's flow as [`flow`] reads it: what the session lookup compares
/// and the translation rewrites, so a packet is read once (`lbN-nat` reads it in
/// `prepare` for the hash and keeps it for `process`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow<A> {
    pub key: FlowKey<A>,
    /// The TCP flags; 0 for UDP.
    pub flags: u8,
    /// The transport header's offset. The packet holds the whole transport header
    /// from here (8 bytes of UDP, 20 of TCP).
    pub l4: usize,
}

/// A TCP or UDP packet's flow.
#[inline]
pub fn flow<F: Layout>(pkt: &[u8]) -> Result<Flow<F::Addr>, NatError> {
    let (l4, proto) = F::l4(pkt)?;
    // `l4()` checked the IP header is within the packet.
    let rest = &pkt[l4..];
    // Each protocol's header checked and read in its own arm (the protocol tested once,
    // the ports read as one word: a shared check and later tests of the protocol were
    // ~10 instructions more a packet, callgrind; docs/PERFORMANCE.md).
    let (ports, flags) = match proto {
        UDP => {
            let Some(t) = rest.first_chunk::<8>() else { return Err(NatError::Truncated) };
            // 8 ≤ the UDP length ≤ the bytes from the header on, as one unsigned compare:
            // a length below 8 wraps round past any packet.
            let udp_len = u16::from_be_bytes([t[4], t[5]]) as usize;
            if udp_len.wrapping_sub(8) > rest.len() - 8 {
                return Err(NatError::BadUdpLength);
            }
            (u32::from_be_bytes([t[0], t[1], t[2], t[3]]), 0)
        }
        TCP => {
            let Some(t) = rest.first_chunk::<20>() else { return Err(NatError::Truncated) };
            (u32::from_be_bytes([t[0], t[1], t[2], t[3]]), t[13])
        }
        // SCTP too (read on its own path, by `sctp_flow`): told apart here, out of the
        // match, so the match and the two arms above are what they were before SCTP.
        _ => return Err(not_tcp_udp(proto)),
    };
    let (sport, dport) = ((ports >> 16) as u16, ports as u16);
    Ok(Flow { key: FlowKey { src: F::src(pkt), dst: F::dst(pkt), sport, dport, proto }, flags, l4 })
}

/// An SCTP packet's flow ([`flow`] answered [`NatError::Sctp`]): its ports, and for
/// `flags` the chunks the association's life turns on ([`wire::sctp::ChunkSet`]'s bits,
/// which the session table reads). Its CRC32c is not checked here: [`sctp_checksum`].
pub fn sctp_flow<F: Layout>(pkt: &[u8]) -> Result<Flow<F::Addr>, NatError> {
    sctp_read::<F>(pkt).map(|r| r.flow)
}

/// An SCTP packet as [`sctp_read`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpRead<A> {
    pub flow: Flow<A>,
    /// It holds an ASCONF or ASCONF-ACK chunk: `lbN-nat` drops it on a translated
    /// association (the addresses it adds, deletes or makes primary are the endpoints'
    /// own, wrong through the translation, and AUTH signs the chunk, so it cannot be
    /// rewritten), counted `sctp-asconf-dropped`.
    pub asconf: bool,
    /// The verification tag (direct server return keys an association by it:
    /// [`crate::session::Balancer::direct_sctp`]).
    pub vtag: u32,
}

/// [`sctp_flow`], and whether the packet holds an ASCONF or ASCONF-ACK chunk, seen in
/// the same walk of its chunks.
pub fn sctp_read<F: Layout>(pkt: &[u8]) -> Result<SctpRead<F::Addr>, NatError> {
    let (l4, proto) = F::l4(pkt)?;
    if proto != SCTP {
        return Err(NatError::Protocol);
    }
    let p = wire::sctp::SctpPacket::new_checked(&pkt[l4..]).map_err(|_| NatError::Truncated)?;
    // A chunk that does not fit in a whole packet (its length below 4 or past the end,
    // its header cut short) is a bad chunk, as the `sctp-bad-chunk` counter says; only a
    // packet shorter than its IP header says (an ICMP error's quote) is truncated.
    let summary = p.chunk_summary().map_err(|e| match e {
        wire::sctp::SctpError::Truncated if pkt.len() < F::ip_len(pkt) => NatError::Truncated,
        _ => NatError::BadSctpChunk,
    })?;
    let chunks = summary.set;
    // An INIT's or INIT ACK's parameters are walked now, before a session is made for
    // it: its multi-homing is removed as it is translated (`remove_sctp_multihoming`).
    if chunks.has(wire::sctp::ChunkSet::INIT | wire::sctp::ChunkSet::INIT_ACK) {
        wire::sctp::count_multihoming(p.payload()).map_err(|_| NatError::BadSctpParameter)?;
    }
    let key = FlowKey { src: F::src(pkt), dst: F::dst(pkt), sport: p.src_port(), dport: p.dst_port(), proto };
    Ok(SctpRead { flow: Flow { key, flags: chunks.0, l4 }, asconf: summary.asconf, vtag: p.verification_tag() })
}

/// Whether the SCTP packet of `flow` ([`sctp_flow`]) came with a good CRC32c; else
/// [`NatError::SctpChecksum`], and the load balancer drops it.
///
/// A middlebox that rewrites SCTP must compute the CRC again (the ports changed), which
/// would make a corrupted packet good: SCTP has no other end-to-end check (no
/// pseudo-header; the IP header's checksum is the link's), so its receiver would take
/// the corruption. And the session table acts on the chunks (an ABORT ends the
/// association's session), which must be the sender's. So the CRC is checked first
/// and a bad one dropped, counted by name, rather than carried on (keeping it bad would
/// also do for the receiver, not for our own session table).
pub fn sctp_checksum<A>(pkt: &[u8], flow: &Flow<A>) -> Result<(), NatError> {
    match wire::sctp::SctpPacket::new_checked(&pkt[flow.l4..]) {
        Ok(p) if p.verify_checksum() => Ok(()),
        _ => Err(NatError::SctpChecksum),
    }
}

/// [`sctp_checksum`], or, when its sender left the CRC32c to the device (`left`: a vnet
/// partial checksum, nothing to check, the sender trusted its device), the CRC32c
/// computed here: the nodes and devices that complete a partial checksum complete an
/// Internet checksum, which would spoil it.
pub fn sctp_checksum_or_fill<A>(pkt: &mut [u8], flow: &Flow<A>, left: bool) -> Result<(), NatError> {
    if left {
        wire::sctp::SctpPacket::new_unchecked(&mut pkt[flow.l4..]).fill_checksum();
        return Ok(());
    }
    sctp_checksum(pkt, flow)
}

/// Remove multi-homing from an SCTP packet's INIT or INIT ACK (`flow`, as [`sctp_flow`]
/// read it: its parameters fit), before it is translated
/// ([`wire::sctp::remove_multihoming`]): through the translation the addresses a
/// multi-homed endpoint lists are wrong for its peer (the client's reached directly,
/// around the translation; the backend's real ones told to the client). Without them
/// each end takes the packet's source address, the translated one, as the other's only
/// address (RFC 9260 §5.1.2); and without ASCONF among the peer's Supported Extensions
/// neither adds or moves an address later (RFC 5061 §4.2.7), which the balancer could
/// not translate (ASCONF is signed by AUTH). The IP header's length follows; the CRC32c
/// is left to the translation, which computes it. Returns the packet's new length (to
/// cut it to) and what went; `None` when nothing changed (another packet, or an INIT
/// that lists no address and offers no ASCONF).
pub fn remove_sctp_multihoming<F: Layout>(pkt: &mut [u8], flow: &Flow<F::Addr>) -> Option<(usize, wire::sctp::Multihoming)> {
    use wire::sctp::{remove_multihoming, ChunkSet, HEADER_LEN};
    if flow.key.proto != SCTP || !ChunkSet(flow.flags).has(ChunkSet::INIT | ChunkSet::INIT_ACK) {
        return None;
    }
    let chunks_at = flow.l4 + HEADER_LEN;
    let r = remove_multihoming(pkt.get_mut(chunks_at..)?).ok().filter(|r| !r.removed.is_none())?;
    let cut = pkt.len() - chunks_at - r.len;
    F::set_ip_len(pkt, F::ip_len(pkt) - cut);
    Some((pkt.len() - cut, r.removed))
}

/// Rewrite an SCTP packet (as [`sctp_flow`] read it) to `to`: ports and addresses, the
/// IPv4 header's checksum patched, and the CRC32c computed again over the packet. A
/// packet with a wrong CRC32c never gets here (`lbN-nat` checks it first). Never left
/// to the device, partial or not: a pending checksum is an Internet checksum to the
/// nodes and devices that complete one (`lbN-nat` clears it for SCTP).
fn translate_sctp<F: Layout>(pkt: &mut [u8], from: &Flow<F::Addr>, to: &Rewrite<F::Addr>) {
    let l4 = from.l4;
    pkt[l4..l4 + 2].copy_from_slice(&to.sport.to_be_bytes());
    pkt[l4 + 2..l4 + 4].copy_from_slice(&to.dport.to_be_bytes());
    let d = Deltas::new::<F>(&from.key, to);
    F::set_addrs(pkt, &to.src, &to.dst, d.addrs as u32);
    wire::sctp::SctpPacket::new_unchecked(&mut pkt[l4..]).fill_checksum();
}

/// Why a packet that is neither TCP nor UDP has no flow here: SCTP has one elsewhere
/// ([`sctp_flow`]), anything else none.
#[cold]
#[inline(never)]
fn not_tcp_udp(proto: u8) -> NatError {
    if proto == SCTP {
        NatError::Sctp
    } else {
        NatError::Protocol
    }
}

/// The transport checksum field's offset, if the packet carries one to patch.
fn l4_checksum_at<F: Layout>(pkt: &[u8], l4: usize, proto: u8) -> Option<usize> {
    let at = l4 + if proto == TCP { 16 } else { 6 };
    let present = pkt.len() >= at + 2 && !(proto == UDP && F::UDP_ZERO_MEANS_NONE && be16(pkt, at) == 0);
    present.then_some(at)
}

/// A translation's checksum changes (RFC 1624 eqn. 3, folded to 16 bits), computed once
/// when a session is made so that each of its packets only adds them: `addrs` for the
/// IP header (and a partial transport checksum), `all` (addresses and ports) for the
/// transport checksum. Folding first gives the same checksums: one's-complement sums
/// are equal modulo 0xffff, and a non-zero sum folds to non-zero either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deltas {
    pub addrs: u16,
    pub all: u16,
}

impl Deltas {
    pub fn new<F: Family>(from: &FlowKey<F::Addr>, to: &Rewrite<F::Addr>) -> Self {
        let addrs = delta(from.src.as_ref(), to.src.as_ref()) + delta(from.dst.as_ref(), to.dst.as_ref());
        let ports = (!from.sport) as u32 + to.sport as u32 + (!from.dport) as u32 + to.dport as u32;
        Deltas { addrs: fold(addrs), all: fold(addrs + ports) }
    }
}

/// A one's-complement sum folded to 16 bits.
fn fold(mut s: u32) -> u16 {
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Rewrite the addresses and ports of a packet whose flow is `from` (as [`flow`] read
/// it) to `to`, patching the IP and transport checksums. `partial`: the transport
/// checksum is left to the device (the field holds the pseudo-header's sum, not
/// complemented, and the ports are summed when it is completed), so only the
/// addresses' change goes into it.
/// An SCTP flow ([`sctp_flow`]) is rewritten as SCTP (the CRC32c computed again).
/// Not the session hit's translation ([`translate_with`]), which SCTP never takes.
#[inline]
pub fn translate<F: Layout>(pkt: &mut [u8], from: &Flow<F::Addr>, to: &Rewrite<F::Addr>, partial: bool) {
    if from.key.proto == SCTP {
        return translate_sctp::<F>(pkt, from, to);
    }
    translate_with::<F>(pkt, from.l4, from.key.proto, to, Deltas::new::<F>(&from.key, to), partial);
}

/// [`translate`] with the checksum changes computed beforehand (a session's), of a
/// packet whose flow (the one `d` was computed from) has its transport header at `l4`
/// and protocol `proto`, as [`flow`] read them. Inlined: on the session hit (`lbN-nat`)
/// it was a call a packet (perf).
#[inline(always)]
pub fn translate_with<F: Layout>(pkt: &mut [u8], l4: usize, proto: u8, to: &Rewrite<F::Addr>, d: Deltas, partial: bool) {
    if partial {
        let at = l4 + if proto == TCP { 16 } else { 6 };
        let sum = apply(!be16(pkt, at), d.addrs as u32);
        pkt[at..at + 2].copy_from_slice(&(!sum).to_be_bytes());
    } else if let Some(at) = l4_checksum_at::<F>(pkt, l4, proto) {
        let mut c = apply(be16(pkt, at), d.all as u32);
        if proto == UDP && c == 0 {
            c = 0xffff;
        }
        pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    pkt[l4..l4 + 2].copy_from_slice(&to.sport.to_be_bytes());
    pkt[l4 + 2..l4 + 4].copy_from_slice(&to.dport.to_be_bytes());
    F::set_addrs(pkt, &to.src, &to.dst, d.addrs as u32);
}

/// An ICMP error about a TCP or UDP packet: the quoted packet's flow and where the quote
/// and the ICMP message start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpError<A> {
    pub quoted: FlowKey<A>,
    /// Offset of the ICMP header.
    pub icmp: usize,
    /// Offset of the quoted IP header.
    pub inner: usize,
    pub inner_l4: usize,
}

/// Read an ICMP error (the packet's protocol must be the family's ICMP).
pub fn icmp_error<F: Layout>(pkt: &[u8]) -> Result<IcmpError<F::Addr>, NatError> {
    let (icmp, proto) = F::l4(pkt)?;
    if proto != F::ICMP {
        return Err(NatError::Protocol);
    }
    if pkt.len() < icmp + 8 {
        return Err(NatError::Truncated);
    }
    if !F::icmp_is_error(pkt[icmp]) {
        return Err(NatError::Protocol);
    }
    let inner = icmp + 8;
    let q = &pkt[inner..];
    let (l4, proto) = F::l4(q)?;
    if proto != TCP && proto != UDP && proto != SCTP {
        return Err(NatError::Protocol);
    }
    // The quote holds at least the ports (RFC 792: 64 bits of the transport header).
    if q.len() < l4 + 4 {
        return Err(NatError::Truncated);
    }
    let quoted = FlowKey { src: F::src(q), dst: F::dst(q), sport: be16(q, l4), dport: be16(q, l4 + 2), proto };
    Ok(IcmpError { quoted, icmp, inner, inner_l4: inner + l4 })
}

/// Translate an ICMP error whose quoted packet belongs to a connection: `rw` is the
/// translation of the entry keyed by the quoted flow reversed (the direction the error
/// travels). The quoted packet becomes what the error's receiver sent (addresses and
/// ports swapped back), the outer destination the receiver, and an outer source that was
/// the quoted destination (the backend or client itself reporting) its translated
/// address. The quoted headers' checksums are patched, the ICMP checksum recomputed
/// (the quote is short; ICMPv6 covers the new addresses).
pub fn translate_icmp_error<F: Layout>(pkt: &mut [u8], e: &IcmpError<F::Addr>, rw: &Rewrite<F::Addr>) {
    let q = e.quoted;
    // The entry's key is q reversed; it maps (q.dst:q.dport → q.src:q.sport) to
    // (rw.src:rw.sport → rw.dst:rw.dport). The quoted packet went the other way.
    let quoted_to = Rewrite { src: rw.dst, sport: rw.dport, dst: rw.src, dport: rw.sport };
    let inner_len = pkt.len() - e.inner;
    {
        let inner = &mut pkt[e.inner..];
        let l4 = e.inner_l4 - e.inner;
        // A transport checksum beyond the quote's end stays (it cannot be patched). An
        // SCTP quote's CRC32c stays too: it could only be computed again over the whole
        // packet, which a quote seldom holds, and SCTP checks an ICMP error by the quoted
        // verification tag, not the CRC (RFC 9260 Appendix C).
        let patch = if q.proto == SCTP { None } else { l4_checksum_at::<F>(inner, l4, q.proto) };
        if let Some(at) = patch {
            let mut c = be16(inner, at);
            c = update_bytes(c, q.src.as_ref(), quoted_to.src.as_ref());
            c = update_bytes(c, q.dst.as_ref(), quoted_to.dst.as_ref());
            c = update16(c, q.sport, quoted_to.sport);
            c = update16(c, q.dport, quoted_to.dport);
            inner[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        inner[l4..l4 + 2].copy_from_slice(&quoted_to.sport.to_be_bytes());
        inner[l4 + 2..l4 + 4].copy_from_slice(&quoted_to.dport.to_be_bytes());
        F::set_addr(inner, F::SRC_AT, &quoted_to.src);
        F::set_addr(inner, F::DST_AT, &quoted_to.dst);
    }
    debug_assert_eq!(inner_len, pkt.len() - e.inner);
    if F::src(pkt) == q.dst {
        F::set_addr(pkt, F::SRC_AT, &rw.src);
    }
    F::set_addr(pkt, F::DST_AT, &rw.dst);
    pkt[e.icmp + 2..e.icmp + 4].copy_from_slice(&[0, 0]);
    let c = F::icmp_checksum(pkt, e.icmp);
    pkt[e.icmp + 2..e.icmp + 4].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests;
