//! `upf4-uplink` / `upf6-uplink` (G-PDUs from the gNB, by outer family) and
//! `upf4-downlink` / `upf6-downlink` (packets to a UE, by the UE's family).
//!
//! Each finds the session (uplink: by the G-PDU's TEID; downlink: by the destination
//! address), takes the first of the session's PDRs for its direction that matches (TEID,
//! QFI, SDF filters, in precedence order) and applies it: the FAR's DROP or BUFF, else it
//! removes the outer header (uplink) and adds one toward the gNB or peer UPF where the
//! FAR says so, then a URR whose quota is used up, a closed gate or the MBR may still
//! stop it; only a packet that goes on is counted in its URRs and as `forwarded`. Every
//! packet is counted once, under what happened to it: one with no room for its new
//! outer header is a `no-room` drop, not also forwarded or usage.
//!
//! Most sessions never get that far: the lookup's slot indexes the session's
//! [`Record`], where the first PDR's outcome for the direction is already resolved (FAR,
//! gate and quota applied, the outer header built, the QER bucket and URR cell named), so
//! a packet reads the table slot, the record and its bucket and cell; the full match runs
//! for sessions whose record is unresolved, for an uplink TEID other than the record's,
//! and for a G-PDU whose QFI is not the record's.
//!
//! Buffering (BUFF, downlink): `upfN-downlink` sends a packet whose FAR buffers — and any
//! packet of a session the worker holds packets for, so that none overtakes them — to
//! `upf-buffer`, which holds it ([`crate::buffering`]) and, for the session's first held
//! packet with NOCP, asks the control plane for a Downlink Data Report. Once the FAR
//! forwards, the held packets go out first, in order: when the next packet of the
//! session arrives, or when the control plane's release command (a frame injected at
//! [`BUFFER_INPUT`] after it published the change) reaches the worker, whichever is
//! first. A session's deletion (or DROBU) frees what is held, counted. An uplink FAR
//! that buffers drops under `buffered-dropped` (uplink buffering is not offered).

use crate::buffering::{BufferCmd, HoldError};
use crate::context::{HasUpf, Policer, UpfContext, UpfEvent, UsageCells};
use crate::sdf::FlowView;
use crate::tables::{Action, Forward, OuterHeader, Record, Rule, Session, Stop, UeMatch, UpfTables};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, ExpandNode, GraphBuilder, Node, Pool, Verdict, VECTOR_SIZE};
use ip::outer::tos::EcnDecap;
use ip::outer::{udp_checksum, FragmentPolicy, Ip4Outer, Ip6Outer, OuterFamily};
use std::sync::Arc;
use wire::gtpu::{GtpuPacket, GtpuRepr, MessageType, PduSession, Teid};

next_nodes! {
    pub enum UpfNext {
        Ip4Input = "ip4-input", Ip6Input = "ip6-input",
        Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup",
        Buffer = "upf-buffer",
        Ip4IcmpError = "ip4-icmp-error", Ip6IcmpError = "ip6-icmp-error",
        Ip4Fragment = "ip4-fragment", Ip6Fragment = "ip6-fragment", Segment = "ip-gso-segment",
    }
}

counters! {
    pub enum UpfCounter {
        Forwarded(Info, "forwarded", "packets a PDR matched and its FAR forwarded"),
        Encapsulated(Info, "encapsulated", "packets sent on in a GTP-U header toward a gNB or peer UPF"),
        EventQueueFull(Warn, "event-queue-full", "a Downlink Data Report request lost: control queue full"),
        Truncated(Warn, "truncated", "outer, GTP-U or inner headers truncated or inconsistent"),
        NotGpdu(Warn, "not-gpdu", "a GTP-U message other than a G-PDU"),
        BadInner(Warn, "bad-inner", "the packet inside is not IPv4 or IPv6"),
        EcnMarked(Info, "ecn-marked", "uplink: the outer header's congestion mark (CE, or ECT(1)) copied into the inner packet (RFC 6040)"),
        EcnCeNotEct(Warn, "ecn-ce-not-ect", "uplink: outer header marked CE over an inner packet that is not ECN-capable: dropped, as RFC 6040 asks"),
        NoSession(Warn, "no-session", "no session for the TEID (Error Indication rate-limited away) or UE address"),
        ErrorIndicationsSent(Info, "error-indications-sent", "Error Indications sent for G-PDUs to TEIDs no session has"),
        NoPdr(Warn, "no-pdr", "no PDR of the session matches the packet"),
        WrongUeSource(Warn, "wrong-ue-source", "uplink: a PDR would match but the inner source is not the UE address its PDI names (spoofed)"),
        FarDrop(Info, "far-drop", "the matched PDR's FAR says DROP"),
        BufferedDropped(Warn, "buffered-dropped", "an uplink FAR says BUFF: only downlink packets are held, dropped"),
        Held(Info, "held", "downlink packets held for a session whose FAR buffers"),
        Released(Info, "released", "held packets sent on once the session's FAR forwarded"),
        Discarded(Info, "discarded", "held packets freed: session deleted, DROBU, or its slot reused"),
        BufferFull(Warn, "buffer-full", "the worker holds as many packets as it may (buffer_packets): dropped"),
        SessionBufferFull(Warn, "session-buffer-full", "the session holds as many packets as it may on this worker (buffer_per_session): dropped"),
        BarLimit(Warn, "bar-limit", "the session holds as many packets as its BAR's suggested count: dropped"),
        TooLongToHold(Warn, "too-long-to-hold", "a packet to buffer is longer than a held packet's room (2048 bytes): dropped"),
        NoBuffer(Warn, "no-buffer", "no free buffer to send a held packet in: it is lost"),
        BadCommand(Error, "bad-command", "a malformed release/discard frame at upf-buffer-input"),
        QuotaExhausted(Warn, "quota-exhausted", "a URR of the PDR has used up its volume quota"),
        GateClosed(Warn, "gate-closed", "a QER of the PDR closes the gate for this direction"),
        MbrExceeded(Warn, "mbr-exceeded", "over a QER's maximum bit rate (this worker's share)"),
        NoOuterHeader(Error, "no-outer-header", "a downlink FAR forwards without an outer header to create"),
        NoN3Address(Error, "no-n3-address", "no N3 address of the peer's family to send from"),
        NoRoom(Error, "no-room", "no headroom for the outer headers"),
        InnerTooBig(Info, "inner-too-big", "packet larger than its GTP-U path's MTU (downlink: N3; uplink: N9 to a peer UPF) less the GTP-U headers, with DF or IPv6 (ICMP frag-needed / packet-too-big to its source requested)"),
        FragmentInner(Info, "fragment-inner", "downlink IPv4 packet without DF larger than the N3 path allows: fragmented before encapsulation"),
        FragmentOuter(Info, "fragment-outer", "the outer packet fragmented: an IPv6 packet of at most 1280 bytes on a GTP-U path narrower than that, or an uplink IPv4 packet without DF too big for its N9 path"),
        GsoSegmented(Info, "gso-to-segment", "GSO frames sent to software segmentation before encapsulation"),
    }
}

/// Where the control plane's End Markers enter the graph (`WorkerCmd::Inject`), by outer
/// family: routed like any packet we originate.
pub const CONTROL_INPUT4: &str = "upf4-control-input";
pub const CONTROL_INPUT6: &str = "upf6-control-input";
/// Where the control plane's release and discard commands ([`BufferCmd`]) enter.
pub const BUFFER_INPUT: &str = "upf-buffer-input";

/// Register the UPF nodes.
pub fn register<Cx: HasUpf>(g: &mut GraphBuilder<Cx>) {
    g.add(UpfUplink::<Ip4Outer>::default());
    g.add(UpfUplink::<Ip6Outer>::default());
    g.add(UpfDownlink::<Ue4>::default());
    g.add(UpfDownlink::<Ue6>::default());
    g.add_input(CONTROL_INPUT4, "ip4-lookup");
    g.add_input(CONTROL_INPUT6, "ip6-lookup");
    g.add_expand(UpfBuffer);
    g.add_input(BUFFER_INPUT, "upf-buffer");
}

/// An End Marker (TS 29.281 §7.3.2: GTP-U type 254, no payload) from our N3 address to
/// `peer` on `teid`, as an IP packet, and the control input it enters by. `None` without
/// an N3 address of the peer's family.
pub fn end_marker(t: &UpfTables, peer: IpAddr, teid: u32) -> Option<(&'static str, Vec<u8>)> {
    let repr = GtpuRepr {
        msg_type: MessageType::EndMarker,
        teid: Teid(teid),
        seq: None,
        npdu: None,
        pdu_session: None,
        udp_port: None,
        pdcp_number: None,
        payload_len: 0,
    };
    let mut out = vec![0u8; 40 + 8 + repr.header_len()];
    let n = match peer {
        IpAddr::V4(p) => datagram::<Ip4Outer>(t.n3_v4?, p, &repr, &mut out),
        IpAddr::V6(p) => datagram::<Ip6Outer>(t.n3_v6?, p, &repr, &mut out),
    };
    out.truncate(n);
    Some((if peer.is_ipv4() { CONTROL_INPUT4 } else { CONTROL_INPUT6 }, out))
}

/// IP/UDP/GTP-U with no payload into `out`; returns its length.
fn datagram<O: OuterFamily>(src: O::Addr, dst: O::Addr, repr: &GtpuRepr, out: &mut [u8]) -> usize {
    let ghl = repr.header_len();
    let hl = if O::IS_V6 { 40 } else { 20 };
    let udp_len = 8 + ghl;
    O::emit_header(src, dst, udp_len, out);
    let u = &mut out[hl..hl + udp_len];
    u[0..2].copy_from_slice(&wire::gtpu::PORT.to_be_bytes());
    u[2..4].copy_from_slice(&wire::gtpu::PORT.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    repr.emit(&mut u[8..]);
    if O::IS_V6 {
        let c = udp_checksum(O::pseudo(&src, &dst), u);
        u[6..8].copy_from_slice(&c.to_be_bytes());
    }
    hl + udp_len
}

/// The fields of an inner IP packet the rules read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inner {
    pub v6: bool,
    pub proto: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// TCP/UDP ports when readable (first fragment or unfragmented, no IPv6 extension
    /// headers before them).
    pub ports: Option<(u16, u16)>,
}

impl Inner {
    /// Whether `b` starts with an inner header the rules can read, and its family (true:
    /// IPv6): what [`Inner::parse`] refuses, with the same counter.
    #[inline]
    pub fn family(b: &[u8]) -> Result<bool, UpfCounter> {
        match b.first().map(|v| v >> 4) {
            Some(4) if b.len() >= 20 && b[0] & 0x0f >= 5 => Ok(false),
            Some(6) if b.len() >= 40 => Ok(true),
            Some(4 | 6) | None => Err(UpfCounter::Truncated),
            Some(_) => Err(UpfCounter::BadInner),
        }
    }

    #[inline]
    pub fn parse(b: &[u8]) -> Result<Inner, UpfCounter> {
        let has_ports = |p: u8| p == 6 || p == 17;
        let ports_at = |at: usize| b.get(at..at + 4).map(|p| (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]])));
        if !Inner::family(b)? {
            let h = b.first_chunk::<20>().ok_or(UpfCounter::Truncated)?;
            let ihl = ((h[0] & 0x0f) as usize) * 4;
            let first = u16::from_be_bytes([h[6], h[7]]) & 0x1fff == 0;
            Ok(Inner {
                v6: false,
                proto: h[9],
                src: Inner::address(b, false, false),
                dst: Inner::address(b, false, true),
                ports: if first && has_ports(h[9]) { ports_at(ihl) } else { None },
            })
        } else {
            let h = b.first_chunk::<40>().ok_or(UpfCounter::Truncated)?;
            Ok(Inner {
                v6: true,
                proto: h[6],
                src: Inner::address(b, true, false),
                dst: Inner::address(b, true, true),
                ports: if has_ports(h[6]) { ports_at(40) } else { None },
            })
        }
    }

    /// The source (or destination) address of an inner header [`Inner::family`] accepted.
    #[inline(always)]
    pub fn address(b: &[u8], v6: bool, destination: bool) -> IpAddr {
        let at = match (v6, destination) {
            (false, false) => 12,
            (false, true) => 16,
            (true, false) => 8,
            (true, true) => 24,
        };
        if v6 {
            IpAddr::V6(Ipv6Addr::from(b.get(at..at + 16).and_then(|a| a.first_chunk::<16>()).copied().unwrap_or_default()))
        } else {
            IpAddr::V4(Ipv4Addr::from(b.get(at..at + 4).and_then(|a| a.first_chunk::<4>()).copied().unwrap_or_default()))
        }
    }

    /// The filter's view: the remote end is the destination of uplink packets and the
    /// source of downlink ones.
    #[inline]
    pub fn view(&self, uplink: bool) -> FlowView {
        let (remote, remote_port, ue_port) = match (uplink, self.ports) {
            (true, p) => (self.dst, p.map(|p| p.1), p.map(|p| p.0)),
            (false, p) => (self.src, p.map(|p| p.0), p.map(|p| p.1)),
        };
        FlowView { proto: self.proto, remote, remote_port, ue_port }
    }
}

#[inline]
fn sdf_ok(r: &Rule, v: &FlowView) -> bool {
    r.sdf.is_empty() || r.sdf.iter().any(|f| f.matches(v))
}

/// The QERs and URRs of a matched, forwarding rule: a used-up quota, a closed gate or the
/// MBR stop the packet; otherwise it is counted in the rule's URRs.
#[inline]
fn enforce(usage: &UsageCells, policer: &Policer, r: &Rule, uplink: bool, bytes: u64, now: u64) -> Result<(), UpfCounter> {
    if r.urrs.iter().any(|x| x.exhausted) {
        return Err(UpfCounter::QuotaExhausted);
    }
    for q in r.qers.iter() {
        if !q.open {
            return Err(UpfCounter::GateClosed);
        }
        if let Some(mbr) = q.mbr {
            if !policer.police(q.slot, q.generation, uplink, mbr.divisor(), bytes, now) {
                return Err(UpfCounter::MbrExceeded);
            }
        }
    }
    for x in r.urrs.iter() {
        usage.count(x.slot, x.generation, uplink, bytes);
    }
    Ok(())
}

impl From<Stop> for UpfCounter {
    fn from(s: Stop) -> UpfCounter {
        match s {
            Stop::FarDrop => UpfCounter::FarDrop,
            Stop::NoOuterHeader => UpfCounter::NoOuterHeader,
            Stop::QuotaExhausted => UpfCounter::QuotaExhausted,
            Stop::GateClosed => UpfCounter::GateClosed,
        }
    }
}

/// [`enforce`] for a resolved record, whose quota and gate were applied when it was
/// built: the MBR stops the packet, else it is counted. `now`: the clock as the vector
/// started (read once a vector by the nodes: in a VM `rdtsc` a packet was ~40 % of the
/// policing's samples).
#[inline]
fn enforce_record(usage: &UsageCells, policer: &Policer, rec: &Record, uplink: bool, bytes: u64, now: u64) -> Result<(), UpfCounter> {
    if let Some(p) = rec.policer {
        if !policer.police(p.slot, p.generation.get(), uplink, p.rate, bytes, now) {
            return Err(UpfCounter::MbrExceeded);
        }
    }
    if let Some(c) = rec.usage {
        usage.count(c.slot, c.generation.get(), uplink, bytes);
    }
    Ok(())
}

/// Where a matched downlink rule that does not buffer sends the packet: its FAR's outer
/// header, or why it does not.
#[inline]
fn outer_of(r: &Rule) -> Result<OuterHeader, UpfCounter> {
    match r.forward {
        Forward::Drop => Err(UpfCounter::FarDrop),
        Forward::Buffer => Err(UpfCounter::BufferedDropped),
        Forward::Forward(None) => Err(UpfCounter::NoOuterHeader),
        Forward::Forward(Some(o)) => Ok(o),
    }
}

/// Apply a matched downlink rule that does not buffer (`upf-buffer`'s packets): the N3
/// path's MTU as `upfN-downlink` does, its FAR, QERs and URRs, then the GTP-U header
/// toward the gNB.
#[inline]
fn deliver_downlink(
    ip: &ip::Tables,
    t: &UpfTables,
    usage: &UsageCells,
    policer: &Policer,
    r: &Rule,
    buf: &mut Buffer,
    counts: &mut Counts<'_, UpfCounter>,
    now: u64,
) -> Result<UpfNext, UpfCounter> {
    // Only reached by a caller that did not hold it: a Buffer FAR has nothing to forward with.
    let o = outer_of(r)?;
    let outer_mtu = match fit_path(ip, t, &o, buf, FragmentPolicy::Inner) {
        Ok(m) => m,
        Err((next, c)) => {
            counts.inc(c);
            return Ok(next);
        }
    };
    // Encapsulated before the QERs and URRs see it: a packet with no room for the outer
    // header is counted once, under that drop, neither as forwarded nor as usage.
    let bytes = buf.len() as u64;
    let n = encap(buf, t, &o)?;
    enforce(usage, policer, r, false, bytes, now)?;
    counts.inc(UpfCounter::Forwarded);
    counts.inc(UpfCounter::Encapsulated);
    Ok(fragment_outer(buf, outer_mtu, n, counts))
}

/// Put the buffer's packet in IP/UDP/GTP-U toward `o`; the next node routes the outer
/// packet.
#[inline]
pub fn encap(buf: &mut Buffer, t: &UpfTables, o: &OuterHeader) -> Result<UpfNext, UpfCounter> {
    let gtpu = &o.gtpu_header[..o.gtpu_len as usize];
    match o.peer {
        IpAddr::V4(peer) => {
            let src = t.n3_v4.ok_or(UpfCounter::NoN3Address)?;
            emit::<Ip4Outer>(buf, src, peer, gtpu, o)?;
            Ok(UpfNext::Ip4Lookup)
        }
        IpAddr::V6(peer) => {
            let src = t.n3_v6.ok_or(UpfCounter::NoN3Address)?;
            emit::<Ip6Outer>(buf, src, peer, gtpu, o)?;
            Ok(UpfNext::Ip6Lookup)
        }
    }
}

/// The small-packet shortcut: an inner packet of `len` bytes whose GTP-U packet toward
/// `o` is no larger than the least MTU any link leaves that family's outer packets, a
/// transport-mode SA's bytes off included (`ip::Tables::tunnel_mtu_floor`, worked out
/// from the same entries when the tables were built), fits whatever the lookup would
/// find: nothing to look up.
#[inline(always)]
fn fits_every_path(ip: &ip::Tables, o: &OuterHeader, len: usize) -> bool {
    let (outer_hl, floor) = match o.peer {
        IpAddr::V4(_) => (20, ip.tunnel_mtu_floor[0]),
        IpAddr::V6(_) => (40, ip.tunnel_mtu_floor[1]),
    };
    len + outer_hl + 8 + o.gtpu_len as usize <= floor as usize
}

/// The tunnel-MTU step every tunnel takes ([`ip::outer::encap_mtu`], docs "Tunnel MTU"),
/// for a packet about to be put in GTP-U toward `o`: its room is the MTU of the link the
/// outer route to the peer leaves by, less the outer headers, and less what an outbound
/// transport-mode SA adds where that link's SPD PROTECTs our GTP-U packets to the peer
/// by it (the control plane's `tunnel_esp`, as for gtpuN-encap's and udptun's tunnels:
/// `ip::Tables::tunnel_link_mtu_to`). `Ok`: encapsulate (then fragment the outer packet
/// to the MTU given, if any: never one such an SA protects, which goes whole to
/// `espN-encrypt` to be fragmented as ESP, since fragments made here would leave past the
/// SPD in the clear); `Err`: the next node (ICMP to the packet's source, inner
/// fragmentation or GSO segmentation; `meta.param` set) and the counter. A packet that
/// fits every path ([`fits_every_path`]) needs no lookup, SAs or not.
/// `fragment`: what an IPv4 packet without DF gets (downlink: fragmented first, the
/// fragments coming back to the session by the UE pool's route).
#[inline]
fn fit_path(
    ip: &ip::Tables,
    t: &UpfTables,
    o: &OuterHeader,
    buf: &mut Buffer,
    fragment: FragmentPolicy,
) -> Result<Option<u16>, (UpfNext, UpfCounter)> {
    if fits_every_path(ip, o, buf.len()) {
        return Ok(None);
    }
    let (adj, local, outer_hl) = match o.peer {
        IpAddr::V4(p) => (ip.fib4.lookup(u32::from(p)), t.n3_v4.map(IpAddr::V4), 20),
        IpAddr::V6(p) => (ip.fib6.lookup(u128::from(p)), t.n3_v6.map(IpAddr::V6), 40),
    };
    // Without an N3 address of the peer's family `encap` refuses the packet anyway.
    let (link_mtu, protected) = match local {
        Some(l) => ip.tunnel_link_mtu_to(adj, l, o.peer, wire::gtpu::PORT).map_or((None, false), |(m, p)| (Some(m), p)),
        None => (ip.adjacency(adj).mtu(), false),
    };
    let inner_v6 = buf.bytes().first().is_some_and(|v| v >> 4 == 6);
    let policy = ip::outer::MtuPolicy { fragment, ..Default::default() };
    match ip::outer::encap_mtu(buf, link_mtu, outer_hl + 8 + o.gtpu_len as usize, policy) {
        ip::outer::EncapMtu::Encap { fragment_outer, .. } => Ok(fragment_outer.filter(|_| !protected)),
        ip::outer::EncapMtu::TooBig { v4 } => {
            Err((if v4 { UpfNext::Ip4IcmpError } else { UpfNext::Ip6IcmpError }, UpfCounter::InnerTooBig))
        }
        ip::outer::EncapMtu::FragmentInner => {
            Err((if inner_v6 { UpfNext::Ip6Fragment } else { UpfNext::Ip4Fragment }, UpfCounter::FragmentInner))
        }
        ip::outer::EncapMtu::Segment => Err((UpfNext::Segment, UpfCounter::GsoSegmented)),
    }
}

/// After [`encap`] under `fit_path`'s `Ok(Some(mtu))`: the outer packet to `ipN-fragment`
/// if it is larger than the link.
#[inline]
fn fragment_outer(buf: &mut Buffer, mtu: Option<u16>, next: UpfNext, counts: &mut Counts<'_, UpfCounter>) -> UpfNext {
    if mtu.is_some() && ip::outer::fragment_outer(buf, mtu) {
        // The fragments take the lookup (the outer packet was routed by it, not sent by
        // an adjacency of ours).
        buf.meta.adj = ip::tables::ADJ_MISS;
        counts.inc(UpfCounter::FragmentOuter);
        return if next == UpfNext::Ip6Lookup { UpfNext::Ip6Fragment } else { UpfNext::Ip4Fragment };
    }
    next
}

/// Prepend the outer IP, UDP (2152 both ways: a UPF answers on the GTP-U port) and the
/// precomputed GTP-U header `gtpu`, its length field increased by the payload's. The UDP
/// checksum is zero over IPv4 (as gtpuN-encap sends by default) and computed over IPv6
/// (RFC 8200 §8.1). The outer header takes the inner packet's DSCP and ECN, as every
/// tunnel's does (`ip::outer::tos`), but for the DSCP bits the SMF's Transport Level
/// Marking sets (TS 29.244 §8.2.12, in the FAR's Forwarding Parameters).
fn emit<O: OuterFamily>(buf: &mut Buffer, src: O::Addr, dst: O::Addr, gtpu: &[u8], o: &OuterHeader) -> Result<(), UpfCounter> {
    let payload_len = buf.len();
    let ghl = gtpu.len();
    let hl = if O::IS_V6 { 40 } else { 20 };
    let udp_len = 8 + ghl + payload_len;
    if udp_len > u16::MAX as usize {
        return Err(UpfCounter::NoRoom);
    }
    let tc = o.traffic_class(ip::outer::tos::traffic_class(buf.bytes()));
    let h = buf.prepend(hl + 8 + ghl).map_err(|_| UpfCounter::NoRoom)?;
    O::emit_header_with(src, dst, udp_len, tc, h);
    let u = &mut h[hl..];
    u[0..2].copy_from_slice(&wire::gtpu::PORT.to_be_bytes());
    u[2..4].copy_from_slice(&wire::gtpu::PORT.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    u[6..8].copy_from_slice(&[0, 0]);
    let g = &mut u[8..8 + ghl];
    g.copy_from_slice(gtpu);
    // The template's length counts its extensions; udp_len bounds the sum.
    let len = u16::from_be_bytes([g[2], g[3]]) as usize + payload_len;
    g[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    if O::IS_V6 {
        let seg = &buf.bytes()[hl..];
        let c = udp_checksum(O::pseudo(&src, &dst), seg);
        buf.bytes_mut()[hl + 6..hl + 8].copy_from_slice(&c.to_be_bytes());
    }
    Ok(())
}

/// Send a forwarded inner packet on: plain IP into the router, or re-encapsulated.
#[inline]
fn send_on(buf: &mut Buffer, t: &UpfTables, ohc: Option<&OuterHeader>, v6: bool) -> Result<UpfNext, UpfCounter> {
    match ohc {
        Some(o) => encap(buf, t, o),
        None if v6 => Ok(UpfNext::Ip6Input),
        None => Ok(UpfNext::Ip4Input),
    }
}

/// Tables this large get the vector's lookups prefetched level by level (below it they
/// stay in cache and the passes only cost).
const PREFETCH_SESSIONS: usize = 1024;

/// Start loading what the vector's packets will read, one level per pass so that the
/// misses of a level overlap across the vector: the table slot of each key, the session
/// pointer, the session, its rules, and the rules' QER bucket and usage cell.
/// `slots` holds each packet's session slot (`None`: not a plain packet of ours).
fn prefetch_sessions(u: &UpfContext, slots: &[Option<u32>]) {
    let t = &*u.tables;
    for s in slots.iter().flatten() {
        if let Some(e) = t.sessions.get(*s as usize) {
            engine::prefetch::read(e);
        }
    }
    for s in slots.iter().flatten() {
        if let Some(Some(sess)) = t.sessions.get(*s as usize) {
            engine::prefetch::read(&**sess);
        }
    }
    for s in slots.iter().flatten() {
        if let Some(sess) = t.session(*s) {
            if let Some(r) = sess.uplink.first() {
                engine::prefetch::read(r);
            }
            if let Some(r) = sess.downlink.first() {
                engine::prefetch::read(r);
            }
        }
    }
    for s in slots.iter().flatten() {
        if let Some(sess) = t.session(*s) {
            for r in sess.uplink.iter().chain(sess.downlink.iter()).take(2) {
                if let Some(q) = r.qers.first() {
                    engine::prefetch::read(q);
                }
                if let Some(x) = r.urrs.first() {
                    engine::prefetch::read(x);
                }
            }
        }
    }
    for s in slots.iter().flatten() {
        if let Some(sess) = t.session(*s) {
            let rules = sess.uplink.iter().map(|r| (r, true)).chain(sess.downlink.iter().map(|r| (r, false)));
            for (r, uplink) in rules.take(2) {
                if let Some(q) = r.qers.first() {
                    u.policer.prefetch(q.slot, uplink);
                }
                if let Some(x) = r.urrs.first() {
                    u.usage.prefetch(x.slot);
                }
            }
        }
    }
}

/// Start loading what the vector's packets will read, one level per pass so that the
/// misses of a level overlap across the vector: each packet's record, then its QER
/// bucket and usage cell; for a session whose record is unresolved, the full match's
/// levels ([`prefetch_sessions`]). `slots` holds each packet's session slot.
fn prefetch_records(u: &UpfContext, slots: &[Option<u32>], uplink: bool) {
    let t = &*u.tables;
    let record = |s: u32| {
        let r = t.records(s);
        if uplink {
            &r.uplink
        } else {
            &r.downlink
        }
    };
    for s in slots.iter().flatten() {
        engine::prefetch::read(record(*s));
    }
    let mut unresolved = [None; VECTOR_SIZE];
    let mut n = 0;
    for s in slots.iter().flatten() {
        let r = record(*s);
        if r.action.is_none() {
            unresolved[n] = Some(*s);
            n += 1;
            continue;
        }
        if let Some(p) = r.policer {
            u.policer.prefetch(p.slot, uplink);
        }
        if let Some(c) = r.usage {
            u.usage.prefetch(c.slot);
        }
    }
    if n > 0 {
        prefetch_sessions(u, &unresolved[..n]);
    }
}

/// The TEID of a plain G-PDU over an outer header of family `O` (the common shape), for
/// the prefetch pass.
#[inline(always)]
fn quick_teid<O: OuterFamily>(b: &[u8]) -> Option<u32> {
    let (hl, _, _) = O::outer(b).ok()?;
    let g = b.get(hl + 8..hl + 16)?;
    (g[1] == 255).then(|| u32::from_be_bytes([g[4], g[5], g[6], g[7]]))
}

/// The GTP-U facts the uplink decides on.
struct Gpdu {
    teid: u32,
    qfi: Option<u8>,
    /// Offset and length of the inner packet.
    inner_at: usize,
    inner_len: usize,
}

/// The G-PDU in `b` (outer IP, UDP, GTP-U). A header with no optional fields (E, S and
/// PN clear) is read from its fixed fields, as gtpuN-input reads it; any other goes
/// through [`GtpuRepr`] ([`parse_gpdu_full`], which a property test holds this to).
#[inline]
fn parse_gpdu<O: OuterFamily>(b: &[u8]) -> Result<Gpdu, UpfCounter> {
    let (hl, g) = gtpu_message::<O>(b)?;
    // Version 1, PT 1 (the reserved bit ignored, as `GtpuPacket::new_checked` does), no
    // optional fields: the payload follows the 8-octet header.
    let Some(h) = g.first_chunk::<8>().filter(|h| h[0] & 0xf7 == 0x30) else { return parse_gpdu_full::<O>(b) };
    let len = u16::from_be_bytes([h[2], h[3]]) as usize;
    if 8 + len > g.len() {
        return Err(UpfCounter::Truncated);
    }
    if h[1] != 255 {
        return Err(UpfCounter::NotGpdu);
    }
    Ok(Gpdu { teid: u32::from_be_bytes([h[4], h[5], h[6], h[7]]), qfi: None, inner_at: hl + 16, inner_len: len })
}

/// The outer header's length and the GTP-U message as far as the UDP length says.
#[inline(always)]
fn gtpu_message<O: OuterFamily>(b: &[u8]) -> Result<(usize, &[u8]), UpfCounter> {
    let (hl, _, _) = O::outer(b).map_err(|_| UpfCounter::Truncated)?;
    let u = b.get(hl..hl + 8).ok_or(UpfCounter::Truncated)?;
    let ulen = u16::from_be_bytes([u[4], u[5]]) as usize;
    Ok((hl, b.get(hl + 8..hl + ulen.max(8)).ok_or(UpfCounter::Truncated)?))
}

/// [`parse_gpdu`] through the whole header: optional fields and extensions.
fn parse_gpdu_full<O: OuterFamily>(b: &[u8]) -> Result<Gpdu, UpfCounter> {
    let (hl, g) = gtpu_message::<O>(b)?;
    let p = GtpuPacket::new_checked(g).map_err(|_| UpfCounter::Truncated)?;
    let r = GtpuRepr::parse(&p).map_err(|_| UpfCounter::Truncated)?;
    if r.msg_type != MessageType::GPdu {
        return Err(UpfCounter::NotGpdu);
    }
    let qfi = match r.pdu_session {
        Some(PduSession::Uplink { qfi }) | Some(PduSession::Downlink { qfi, .. }) => Some(qfi.get()),
        None => None,
    };
    let total = 8 + p.length();
    Ok(Gpdu { teid: r.teid.0, qfi, inner_at: hl + 8 + total - r.payload_len, inner_len: r.payload_len })
}

/// `upf4-uplink` / `upf6-uplink`: G-PDUs `gtpuN-input` found no tunnel for (it checked the
/// outer UDP and the GTP-U header).
pub struct UpfUplink<O: OuterFamily> {
    /// The clock as the vector started: what the QERs' buckets are filled to.
    now: u64,
    _family: core::marker::PhantomData<O>,
}

impl<O: OuterFamily> Default for UpfUplink<O> {
    fn default() -> Self {
        UpfUplink { now: 0, _family: core::marker::PhantomData }
    }
}

/// The uplink PDR a G-PDU matches.
pub fn match_uplink<'a>(s: &'a Session, teid: u32, qfi: Option<u8>, inner: &Inner) -> Option<&'a Rule> {
    let v = inner.view(true);
    s.uplink.iter().find(|r| uplink_but_ue(r, teid, qfi, &v) && r.ue.is_none_or(|m| ue_ok(&m, inner)))
}

/// Whether an uplink rule matches but for its UE addresses.
#[inline]
fn uplink_but_ue(r: &Rule, teid: u32, qfi: Option<u8>, v: &FlowView) -> bool {
    r.teid.is_none_or(|t| t == teid) && r.qfi.is_none_or(|q| Some(q) == qfi) && sdf_ok(r, v)
}

#[inline(always)]
fn ue_ok(m: &UeMatch, inner: &Inner) -> bool {
    m.admits(if m.on_destination() { inner.dst } else { inner.src })
}

/// Why no uplink PDR took a G-PDU: one would have but for the UE address (a UE sending
/// from an address not its own), or none.
fn uplink_miss(s: &Session, teid: u32, qfi: Option<u8>, inner: &Inner) -> UpfCounter {
    let v = inner.view(true);
    if s.uplink.iter().any(|r| uplink_but_ue(r, teid, qfi, &v)) {
        UpfCounter::WrongUeSource
    } else {
        UpfCounter::NoPdr
    }
}

/// The downlink PDR a packet to the UE matches.
pub fn match_downlink<'a>(s: &'a Session, inner: &Inner) -> Option<&'a Rule> {
    let v = inner.view(false);
    s.downlink.iter().find(|r| sdf_ok(r, &v) && r.ue.is_none_or(|m| m.admits(inner.dst)))
}

impl<Cx: HasUpf, O: OuterFamily> Node<Cx> for UpfUplink<O> {
    type Next = UpfNext;
    type Counter = UpfCounter;

    fn name(&self) -> &'static str {
        if O::IS_V6 {
            "upf6-uplink"
        } else {
            "upf4-uplink"
        }
    }

    /// With many sessions: prefetch the vector's lookups level by level
    /// (docs/PERFORMANCE.md, `vecgate bench upf4-uplink`).
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        self.now = engine::clock::now();
        let u = cx.upf();
        if u.tables.sessions.len() < PREFETCH_SESSIONS {
            return;
        }
        let n = input.len().min(VECTOR_SIZE);
        let mut teids = [None; VECTOR_SIZE];
        for (k, &b) in teids.iter_mut().zip(&input[..n]) {
            *k = quick_teid::<O>(pool.get(b).bytes());
            if let Some(s) = k.and_then(|t| u.tables.by_teid.home_slot(t as u64)) {
                engine::prefetch::read(s);
            }
        }
        let mut slots = [None; VECTOR_SIZE];
        for (s, t) in slots.iter_mut().zip(&teids[..n]) {
            *s = t.and_then(|t| u.tables.by_teid.get(t as u64));
        }
        prefetch_records(u, &slots[..n], true);
    }

    #[inline]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, UpfCounter>, buf: &mut Buffer) -> Verdict<UpfNext, UpfCounter> {
        let g = match parse_gpdu::<O>(buf.bytes()) {
            Ok(g) => g,
            Err(c) => return Verdict::Drop(c),
        };
        let (ipc, UpfContext { tables, usage, policer, replies, .. }) = cx.split_upf();
        let Some((slot, record_teid)) = tables.by_teid.get_entry(g.teid as u64) else {
            return error_indication::<O>(replies, counts, buf, g.teid);
        };
        let Some(inner_bytes) = buf.bytes().get(g.inner_at..g.inner_at + g.inner_len) else {
            return Verdict::Drop(UpfCounter::Truncated);
        };
        // The session's record, when it is this TEID's and the G-PDU carries its QFI.
        let rec = &tables.records(slot).uplink;
        if let Some(action) = rec.action.filter(|_| record_teid != 0 && rec.qfi.is_none_or(|q| Some(q) == g.qfi)) {
            let v6 = match Inner::family(inner_bytes) {
                Ok(v6) => v6,
                Err(c) => return Verdict::Drop(c),
            };
            // A packet the record's PDR does not take for its UE address: the full match.
            if rec.carried.ue().is_none_or(|m| m.admits(Inner::address(inner_bytes, v6, m.on_destination()))) {
                let ohc = match action {
                    Action::Forward => rec.carried.outer(),
                    Action::Buffer => return Verdict::Drop(UpfCounter::BufferedDropped),
                    Action::Stop(c) => return Verdict::Drop(c.into()),
                };
                let enforced = || enforce_record(usage, policer, rec, true, g.inner_len as u64, self.now);
                return forward_uplink::<O>(&ipc.tables, buf, counts, tables, &g, rec.remove_outer, ohc, v6, enforced);
            }
        }
        let Some(s) = tables.session(slot) else { return error_indication::<O>(replies, counts, buf, g.teid) };
        let inner = match Inner::parse(inner_bytes) {
            Ok(i) => i,
            Err(c) => return Verdict::Drop(c),
        };
        let Some(r) = match_uplink(s, g.teid, g.qfi, &inner) else { return Verdict::Drop(uplink_miss(s, g.teid, g.qfi, &inner)) };
        let ohc = match &r.forward {
            Forward::Drop => return Verdict::Drop(UpfCounter::FarDrop),
            Forward::Buffer => return Verdict::Drop(UpfCounter::BufferedDropped),
            Forward::Forward(o) => o.as_ref(),
        };
        let enforced = || enforce(usage, policer, r, true, g.inner_len as u64, self.now);
        forward_uplink::<O>(&ipc.tables, buf, counts, tables, &g, r.remove_outer, ohc, inner.v6, enforced)
    }

    fn trace(&self, buf: &Buffer) -> String {
        match parse_gpdu::<O>(buf.bytes()) {
            Ok(g) => format!("teid {:#x} qfi {} inner {} bytes", g.teid, g.qfi.map_or("none".into(), |q| q.to_string()), g.inner_len),
            Err(c) => format!("rejected: {}", <UpfCounter as engine::Counters>::INFO[c as usize].name),
        }
    }
}

/// Send on a G-PDU's inner packet that its rule forwards (`ohc`: re-encapsulated toward a
/// peer UPF), the outer header removed where the rule or the re-encapsulation says so;
/// `enforce` applies the rule's QERs and URRs once the packet is known to go out (its
/// path fits and its new outer header, if any, is on).
#[inline]
#[allow(clippy::too_many_arguments)]
fn forward_uplink<O: OuterFamily>(
    ip: &ip::Tables,
    buf: &mut Buffer,
    counts: &mut Counts<'_, UpfCounter>,
    tables: &UpfTables,
    g: &Gpdu,
    remove_outer: bool,
    ohc: Option<&OuterHeader>,
    inner_v6: bool,
    enforce: impl FnOnce() -> Result<(), UpfCounter>,
) -> Verdict<UpfNext, UpfCounter> {
    let decap = remove_outer || ohc.is_some();
    if decap {
        let ecn = ip::outer::tos::ecn(buf.bytes(), O::IS_V6);
        // The outer packet's offload marks (GSO, checksums) go with its headers, as in
        // gtpuN-input's decap (`Buffer::decapsulate`).
        if buf.decapsulate(g.inner_at, g.inner_len).is_err() {
            return Verdict::Drop(UpfCounter::Truncated);
        }
        match ip::outer::tos::decap_ecn(ecn, buf) {
            EcnDecap::Unchanged => {}
            EcnDecap::Marked => counts.inc(UpfCounter::EcnMarked),
            EcnDecap::Drop => return Verdict::Drop(UpfCounter::EcnCeNotEct),
        }
    }
    // N9: into another GTP-U tunnel, the tunnel-MTU step the downlink takes, before
    // anything is counted. An IPv4 packet without DF goes whole in fragmented outer
    // packets: fragments of the inner one would come back by the route, to its
    // destination on N6, not into this tunnel.
    let outer_mtu = match ohc {
        Some(o) => match fit_path(ip, tables, o, buf, FragmentPolicy::Outer) {
            Ok(m) => m,
            Err((next, c)) => {
                counts.inc(c);
                return Verdict::Next(next);
            }
        },
        None => None,
    };
    // Sent on (re-encapsulated, where the FAR says so) before the QERs and URRs see it: a
    // packet with no room for the new outer header is counted once, under that drop,
    // neither as forwarded nor as the session's usage.
    let next = match send_on(buf, tables, ohc, if decap { inner_v6 } else { O::IS_V6 }) {
        Ok(n) => n,
        Err(c) => return Verdict::Drop(c),
    };
    if let Err(c) = enforce() {
        return Verdict::Drop(c);
    }
    counts.inc(UpfCounter::Forwarded);
    if ohc.is_some() {
        counts.inc(UpfCounter::Encapsulated);
    }
    Verdict::Next(fragment_outer(buf, outer_mtu, next, counts))
}

/// A G-PDU to a TEID no session has: answered with an Error Indication to its sender
/// (TS 29.281 §7.3.1: TEID Data I and GTP-U Peer Address, the G-PDU's UDP source port in
/// the UDP Port extension), built by gtpu's code for the same reply and rate-limited like
/// it; over the rate, dropped as `no-session`.
fn error_indication<O: OuterFamily>(
    replies: &mut ip::context::TokenBucket,
    counts: &mut Counts<'_, UpfCounter>,
    buf: &mut Buffer,
    teid: u32,
) -> Verdict<UpfNext, UpfCounter> {
    if !replies.take() {
        return Verdict::Drop(UpfCounter::NoSession);
    }
    let Ok((hl, peer, ours)) = O::outer(buf.bytes()) else { return Verdict::Drop(UpfCounter::Truncated) };
    let sport = buf.bytes().get(hl..hl + 2).map_or(wire::gtpu::PORT, |s| u16::from_be_bytes([s[0], s[1]]));
    let mut m = [0u8; gtpu::messages::MAX_MESSAGE];
    let n = gtpu::messages::error_indication(teid, ours.into(), sport, &mut m);
    let mut out = [0u8; 40 + 8 + gtpu::messages::MAX_MESSAGE];
    let len = gtpu::nodes::reply_datagram::<O>(ours, peer, wire::gtpu::PORT, &m[..n], &mut out);
    if buf.write(&out[..len]).is_err() {
        return Verdict::Drop(UpfCounter::NoRoom);
    }
    counts.inc(UpfCounter::ErrorIndicationsSent);
    Verdict::Next(if O::IS_V6 { UpfNext::Ip6Lookup } else { UpfNext::Ip4Lookup })
}

/// What differs between IPv4 and IPv6 UEs: the node name and the session lookup.
pub trait UeFamily: Send + 'static {
    const NAME: &'static str;
    const IS_V6: bool;
    /// The lookup table and a packet's key in it (the destination address, or its /64),
    /// read from a packet of this family.
    fn table(t: &UpfTables) -> &gtpu::teid_table::TeidTable;
    fn key(b: &[u8]) -> Option<u64>;
}

pub struct Ue4;
pub struct Ue6;

impl UeFamily for Ue4 {
    const NAME: &'static str = "upf4-downlink";
    const IS_V6: bool = false;
    fn table(t: &UpfTables) -> &gtpu::teid_table::TeidTable {
        &t.by_ue4
    }
    #[inline(always)]
    fn key(b: &[u8]) -> Option<u64> {
        let d = b.get(16..20)?;
        Some(u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as u64)
    }
}

impl UeFamily for Ue6 {
    const NAME: &'static str = "upf6-downlink";
    const IS_V6: bool = true;
    fn table(t: &UpfTables) -> &gtpu::teid_table::TeidTable {
        &t.by_ue6
    }
    #[inline(always)]
    fn key(b: &[u8]) -> Option<u64> {
        let d = b.get(24..32)?;
        Some(u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]))
    }
}

/// `upf4-downlink` / `upf6-downlink`: packets routed to a UE pool.
pub struct UpfDownlink<F: UeFamily> {
    /// The clock as the vector started: what the QERs' buckets are filled to.
    now: u64,
    _family: core::marker::PhantomData<F>,
}

impl<F: UeFamily> Default for UpfDownlink<F> {
    fn default() -> Self {
        UpfDownlink { now: 0, _family: core::marker::PhantomData }
    }
}

impl<Cx: HasUpf, F: UeFamily> Node<Cx> for UpfDownlink<F> {
    type Next = UpfNext;
    type Counter = UpfCounter;

    fn name(&self) -> &'static str {
        F::NAME
    }

    /// With many sessions: prefetch the vector's lookups level by level.
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        self.now = engine::clock::now();
        let u = cx.upf();
        if u.tables.sessions.len() < PREFETCH_SESSIONS {
            return;
        }
        let n = input.len().min(VECTOR_SIZE);
        let mut keys = [None; VECTOR_SIZE];
        for (k, &b) in keys.iter_mut().zip(&input[..n]) {
            *k = F::key(pool.get(b).bytes());
            if let Some(s) = k.and_then(|k| F::table(&u.tables).home_slot(k)) {
                engine::prefetch::read(s);
            }
        }
        let mut slots = [None; VECTOR_SIZE];
        for (s, k) in slots.iter_mut().zip(&keys[..n]) {
            *s = k.and_then(|k| F::table(&u.tables).get(k));
        }
        prefetch_records(u, &slots[..n], false);
    }

    #[inline]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, UpfCounter>, buf: &mut Buffer) -> Verdict<UpfNext, UpfCounter> {
        let (ipc, UpfContext { tables, usage, policer, held, .. }) = cx.split_upf();
        let b = buf.bytes();
        let v6 = match Inner::family(b) {
            Ok(v6) => v6,
            Err(c) => return Verdict::Drop(c),
        };
        // A packet of the other family has no session here.
        let Some(slot) = F::key(b).filter(|_| v6 == F::IS_V6).and_then(|k| F::table(tables).get(k)) else {
            return Verdict::Drop(UpfCounter::NoSession);
        };
        let rec = &tables.records(slot).downlink;
        let Some(action) = rec.action else {
            let inner = match Inner::parse(b) {
                Ok(i) => i,
                Err(c) => return Verdict::Drop(c),
            };
            let Some(s) = tables.session(slot) else { return Verdict::Drop(UpfCounter::NoSession) };
            let Some(r) = match_downlink(s, &inner) else { return Verdict::Drop(UpfCounter::NoPdr) };
            // Held packets of the session go first: a newer one waits behind them.
            if r.forward == Forward::Buffer || held.holds(slot) {
                return Verdict::Next(UpfNext::Buffer);
            }
            return match deliver_downlink(&ipc.tables, tables, usage, policer, r, buf, counts, self.now) {
                Ok(n) => Verdict::Next(n),
                Err(c) => Verdict::Drop(c),
            };
        };
        if action == Action::Buffer || held.holds(slot) {
            return Verdict::Next(UpfNext::Buffer);
        }
        let o = match (action, rec.carried.outer()) {
            (Action::Stop(c), _) => return Verdict::Drop(c.into()),
            (_, Some(o)) => o,
            // Resolved as `Stop::NoOuterHeader`.
            (_, None) => return Verdict::Drop(UpfCounter::NoOuterHeader),
        };
        // Too big for the N3 path: told, fragmented or segmented before anything is
        // counted (the pieces come back by the route and are counted as they go out).
        let outer_mtu = match fit_path(&ipc.tables, tables, o, buf, FragmentPolicy::Inner) {
            Ok(m) => m,
            Err((next, c)) => {
                counts.inc(c);
                return Verdict::Next(next);
            }
        };
        // As `deliver_downlink`: encapsulated first, counted only once it can go.
        let bytes = buf.len() as u64;
        let n = match encap(buf, tables, o) {
            Ok(n) => n,
            Err(c) => return Verdict::Drop(c),
        };
        if let Err(c) = enforce_record(usage, policer, rec, false, bytes, self.now) {
            return Verdict::Drop(c);
        }
        counts.inc(UpfCounter::Forwarded);
        counts.inc(UpfCounter::Encapsulated);
        Verdict::Next(fragment_outer(buf, outer_mtu, n, counts))
    }

    fn trace(&self, buf: &Buffer) -> String {
        match Inner::parse(buf.bytes()) {
            Ok(i) => {
                let ports = i.ports.map_or(String::new(), |(s, d)| format!(" ports {s} -> {d}"));
                format!("{} -> {} {}{ports}", i.src, i.dst, wire::IpProtocol::from(i.proto))
            }
            Err(c) => format!("rejected: {}", <UpfCounter as engine::Counters>::INFO[c as usize].name),
        }
    }
}

/// `upf-buffer`: holds downlink packets while their session's FAR buffers and sends them
/// on, oldest first, once it forwards (see the module documentation); also takes the
/// control plane's [`BufferCmd`]s.
pub struct UpfBuffer;

/// The session a packet to a UE belongs to.
fn session_of<'a>(t: &'a UpfTables, inner: &Inner) -> Option<&'a Session> {
    match inner.dst {
        IpAddr::V4(a) => t.by_ue4(a),
        IpAddr::V6(a) => t.by_ue6(&a),
    }
}

impl UpfBuffer {
    /// Hold `packet` for session `s` under rule `r`; the session's first held packet asks
    /// for a Downlink Data Report if the rule notifies.
    fn hold(u: &mut UpfContext, counts: &mut Counts<'_, UpfCounter>, s: &Session, r: &Rule, packet: &[u8]) -> Result<(), UpfCounter> {
        // What is held in the slot may be an earlier session's: freed first, counted.
        counts.add(UpfCounter::Discarded, u.held.discard_stale(s.slot, s.seid) as u64);
        let first = !u.held.holds(s.slot);
        match u.held.hold(s.slot, s.seid, packet, r.hold_limit.map(u32::from)) {
            Ok(_) => {}
            Err(HoldError::Full) => return Err(UpfCounter::BufferFull),
            Err(HoldError::SessionFull) => return Err(UpfCounter::SessionBufferFull),
            Err(HoldError::BarLimit) => return Err(UpfCounter::BarLimit),
            Err(HoldError::TooLong) => return Err(UpfCounter::TooLongToHold),
        }
        counts.inc(UpfCounter::Held);
        if first && r.notify && !u.report(UpfEvent::DownlinkData { seid: s.seid, pdr_id: r.pdr_id }) {
            counts.inc(UpfCounter::EventQueueFull);
        }
        Ok(())
    }

    /// Send on what is held for the session in `slot`, oldest first, each matched against
    /// the session's rules as they are now: one that still buffers is held again (behind
    /// the others, so the order stands), one that forwards goes to `out`.
    fn release(
        ip: &ip::Tables,
        u: &mut UpfContext,
        counts: &mut Counts<'_, UpfCounter>,
        pool: &mut Pool,
        slot: u32,
        out: &mut Vec<(BufIdx, UpfNext)>,
    ) {
        let tables = Arc::clone(&u.tables);
        let Some(s) = tables.session(slot) else {
            counts.add(UpfCounter::Discarded, u.held.discard(slot) as u64);
            return;
        };
        counts.add(UpfCounter::Discarded, u.held.discard_stale(slot, s.seid) as u64);
        for _ in 0..u.held.session_len(slot) {
            let Some(b) = u.held.pop(slot, |_, bytes| {
                let b = pool.alloc(bytes.len())?;
                if pool.get_mut(b).write(bytes).is_err() {
                    pool.free(b);
                    return None;
                }
                Some(b)
            }) else {
                return;
            };
            let Some(b) = b else {
                counts.inc(UpfCounter::NoBuffer);
                continue;
            };
            let r = Inner::parse(pool.get(b).bytes()).ok().and_then(|i| match_downlink(s, &i));
            let result = match r {
                None => Err(UpfCounter::NoPdr),
                Some(r) if r.forward == Forward::Buffer => Self::hold(u, counts, s, r, pool.get(b).bytes()).map(|()| None),
                Some(r) => {
                    let UpfContext { usage, policer, .. } = &mut *u;
                    deliver_downlink(ip, &tables, usage, policer, r, pool.get_mut(b), counts, engine::clock::now()).map(Some)
                }
            };
            match result {
                Ok(Some(n)) => {
                    counts.inc(UpfCounter::Released);
                    out.push((b, n));
                }
                Ok(None) => pool.free(b),
                Err(c) => {
                    counts.inc(c);
                    pool.free(b);
                }
            }
        }
    }
}

impl<Cx: HasUpf> ExpandNode<Cx> for UpfBuffer {
    type Next = UpfNext;
    type Counter = UpfCounter;

    fn name(&self) -> &'static str {
        "upf-buffer"
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, UpfCounter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, UpfNext)>,
    ) -> Result<(), UpfCounter> {
        let (ipc, u) = cx.split_upf();
        let ip = &ipc.tables;
        match BufferCmd::parse(pool.get(bi).bytes()) {
            Some(Ok(BufferCmd::Release { slot, seid })) => {
                if u.tables.session(slot).is_some_and(|s| s.seid == seid) {
                    Self::release(ip, u, counts, pool, slot, out);
                }
                return Ok(());
            }
            Some(Ok(BufferCmd::Discard { slot, seid })) => {
                counts.add(UpfCounter::Discarded, u.held.discard_session(slot, seid) as u64);
                return Ok(());
            }
            Some(Err(())) => return Err(UpfCounter::BadCommand),
            None => {}
        }
        let tables = Arc::clone(&u.tables);
        let inner = Inner::parse(pool.get(bi).bytes())?;
        let s = session_of(&tables, &inner).ok_or(UpfCounter::NoSession)?;
        let r = match_downlink(s, &inner).ok_or(UpfCounter::NoPdr)?;
        if r.forward == Forward::Buffer {
            // The buffer goes back to the pool (the dispatcher frees it): its bytes are held.
            return Self::hold(u, counts, s, r, pool.get(bi).bytes());
        }
        // The FAR forwards now: what is held goes first.
        Self::release(ip, u, counts, pool, s.slot, out);
        let UpfContext { usage, policer, .. } = u;
        let n = deliver_downlink(ip, &tables, usage, policer, r, pool.get_mut(bi), counts, engine::clock::now())?;
        out.push((bi, n));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The small-packet shortcut survives transport-mode SA entries: with entries
    /// protecting our GTP-U to the gNB over IPv4 and IPv6 on a full-size N3 link (the
    /// tables as a publish builds them), a packet whose GTP-U packet is at most 576
    /// (IPv4) or 1280 (IPv6) bytes still needs no lookup, one byte more takes it; on
    /// links narrower than that plus the SA's bytes the bound is the link less them.
    #[test]
    fn small_packets_skip_the_lookup_with_transport_sa_entries() {
        let (n3, gnb): (IpAddr, IpAddr) = ("198.18.7.2".parse().unwrap(), "198.18.7.10".parse().unwrap());
        let (n3_6, gnb6): (IpAddr, IpAddr) = ("2001:db8:7::2".parse().unwrap(), "2001:db8:7::10".parse().unwrap());
        let tables = |mtu4: u16, mtu6: u16| {
            let spec = |name: &str, mtu, a: &str| ip::InterfaceSpec {
                name: name.into(),
                mac: "02:00:00:00:07:02".parse().unwrap(),
                mtu,
                addresses: vec![a.parse().unwrap()],
            };
            let mut r = ip::RouterState::new(vec![spec("n3", mtu4, "198.18.7.2/24"), spec("n3v6", mtu6, "2001:db8:7::2/64")]).unwrap();
            r.set_tunnel_esp(vec![
                ip::tables::TunnelEsp::new(n3, gnb, wire::gtpu::PORT, 0b01, 57, 0),
                ip::tables::TunnelEsp::new(n3_6, gnb6, wire::gtpu::PORT, 0b10, 57, 0),
            ]);
            r.build()
        };
        let (o4, o6) = (OuterHeader::new(0x200, gnb, Some(9)), OuterHeader::new(0x200, gnb6, Some(9)));
        let inner = |outer: usize, o: &OuterHeader| outer - if o.peer.is_ipv4() { 28 } else { 48 } - o.gtpu_len as usize;
        let t = tables(1500, 1500);
        assert!(!t.tunnel_esp.is_empty());
        assert!(fits_every_path(&t, &o4, inner(576, &o4)), "IPv4: 576 bytes out, entries or not");
        assert!(!fits_every_path(&t, &o4, inner(577, &o4)));
        assert!(fits_every_path(&t, &o6, inner(1280, &o6)), "IPv6: 1280 bytes out, entries or not");
        assert!(!fits_every_path(&t, &o6, inner(1281, &o6)));
        let t = tables(600, 1500);
        assert!(fits_every_path(&t, &o4, inner(600 - 57, &o4)));
        assert!(!fits_every_path(&t, &o4, inner(600 - 57 + 1, &o4)), "the narrow link less ESP");
        let t = tables(1500, 1300);
        assert!(fits_every_path(&t, &o6, inner(1300 - 57, &o6)));
        assert!(!fits_every_path(&t, &o6, inner(1300 - 57 + 1, &o6)));
    }

    /// The G-PDU read from its fixed fields agrees with the whole parse: same verdict,
    /// same TEID, QFI and inner packet, over headers with and without optional fields
    /// and with lengths that fit, overrun or fall short.
    #[test]
    fn fixed_field_parse_agrees_with_the_full_parse() {
        let flags = prop_oneof![Just(0x30u8), Just(0x38), Just(0x34), Just(0x32), any::<u8>()];
        let gtpu = (flags, prop_oneof![Just(255u8), any::<u8>()], any::<u32>(), proptest::collection::vec(any::<u8>(), 0..24));
        proptest!(|((flags, ty, teid, rest) in gtpu, len_delta in -3i32..4, udp_delta in -3i32..4)| {
            let len = (rest.len() as i32 + len_delta).max(0) as u16;
            let mut g = vec![flags, ty];
            g.extend_from_slice(&len.to_be_bytes());
            g.extend_from_slice(&teid.to_be_bytes());
            g.extend_from_slice(&rest);
            let ulen = ((8 + g.len()) as i32 + udp_delta).max(0) as u16;
            let mut b = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2];
            b.extend_from_slice(&[8, 104, 8, 104]);
            b.extend_from_slice(&ulen.to_be_bytes());
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&g);
            let view = |r: Result<Gpdu, UpfCounter>| r.map(|g| (g.teid, g.qfi, g.inner_at, g.inner_len));
            prop_assert_eq!(view(parse_gpdu::<Ip4Outer>(&b)), view(parse_gpdu_full::<Ip4Outer>(&b)));
        });
    }
}
