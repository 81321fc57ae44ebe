//! `lb4-nat` / `lb6-nat`: one node, generic over the family, for every packet of a
//! load-balanced service and its replies.
//!
//! ```text
//! ip4-lookup ─(route to a ClusterIP / LoadBalancer address)─► lb4-nat ─► ip4-lookup (to the backend)
//! ip4-local ─(TCP/UDP/SCTP to the node: NodePort, SNAT replies)┘      └► ip4-icmp-error (no backend)
//! ip4-local ─(ICMP error for the node)─────────────────────────┘
//! ```
//! A packet is first looked up as a reply (the session's reply entry): translated back
//! to the service's address and the client. Otherwise it is a client's: its service by
//! address, port and protocol (NodePort services only for packets that came by
//! `ipN-local`), its session or a new one (Maglev), and the translation to the backend.
//! An ICMP error is translated when the packet it quotes belongs to a session; one
//! about a direct-server-return backend's reply (sent to the service address) goes to
//! that backend, encapsulated as the connection's packets.
//!
//! A service with `forwarding` other than NAT (direct server return) takes the same
//! steps up to the backend's choice (one session entry per connection, no reply
//! entry), then the same node puts the client's packet, unchanged, into the backend's
//! outer headers ([`crate::encap::Outer`], a shape shared by services of one encapsulation,
//! the backend's address patched in) and sends it by the
//! backend's adjacency when the control plane resolved it and the packet fits its link,
//! else routes it to the backend like any packet the node sends. One node for the
//! choice and the encapsulation: a session hit needs nothing else (no second frame, no
//! metadata hand-over; docs/PERFORMANCE.md).
//!
//! ```text
//! lb4-nat ─(encapsulated service)─► interface-output (the backend's resolved adjacency)
//!                                ├► ip4-lookup (the outer header, when unresolved or past the link MTU)
//!                                └► ip-gso-segment (a GSO frame: segments come back by the route)
//! ```

use crate::context::{HasLb, LbFamily};
use crate::encap::EncapError;
use crate::family::Family;
use crate::nat::{self, Flow, NatError};
use crate::session::{Hit, Key, LbDrop, Outcome, Rewrite};
use crate::table::{Hashed, Table, TableKey};
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Enqueue, GraphBuilder, Node, Pool, Verdict, VECTOR_SIZE};
use ip::nodes::IcmpRequest;
use ip::tables::{Adjacency, TunnelKind, TunnelRef, ADJ_MISS, MAX_INDEX};

next_nodes! {
    pub enum LbNatNext {
        Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup", Ip4IcmpError = "ip4-icmp-error", Ip6IcmpError = "ip6-icmp-error",
        Ip4Rewrite = "ip4-rewrite", Ip6Rewrite = "ip6-rewrite",
        Output = "interface-output", Segment = "ip-gso-segment",
        Ip4Fragment = "ip4-fragment", Ip6Fragment = "ip6-fragment",
        Ip4Reassembly = "ip4-reassembly", Ip6Reassembly = "ip6-reassembly",
        ResumeHandoff = "resume-handoff",
        // A forwarded reply on into its route's tunnel (`ip::tunnel_next!`), or its
        // link's SPD.
        Gtpu4Encap = "gtpu4-encap", Gtpu6Encap = "gtpu6-encap", Gue4Encap = "gue4-encap", Gue6Encap = "gue6-encap",
        Lb4Nat = "lb4-nat", Lb6Nat = "lb6-nat",
        Esp4Encrypt = "esp4-encrypt", Esp6Encrypt = "esp6-encrypt",
        Upf4Downlink = "upf4-downlink", Upf6Downlink = "upf6-downlink",
        Ipsec4Output = "ipsec4-output", Ipsec6Output = "ipsec6-output",
    }
}

counters! {
    pub enum LbNatCounter {
        NewSession(Info, "new-session", "new connections, backend chosen by Maglev"),
        Affine(Info, "affinity", "new connections sent to the client's affinity backend"),
        Rechosen(Info, "backend-gone", "connections whose backend left the service, chosen again"),
        Replies(Info, "reply-translated", "replies translated back to the service address"),
        IcmpTranslated(Info, "icmp-translated", "ICMP errors about a translated connection translated"),
        IcmpToBackend(Info, "icmp-to-backend", "ICMP errors about a direct-server-return backend's reply carried to that backend"),
        NoService(Info, "no-service", "TCP/UDP/SCTP to the node on a port no service has (ICMP port unreachable requested)"),
        NoBackend(Info, "no-backend", "service without a backend that takes new connections (ICMP port unreachable requested)"),
        NoLocalBackend(Info, "no-local-backend", "Local-policy service whose backends are all on other nodes: dropped, not refused (as kube-proxy)"),
        SourceNotAllowed(Info, "source-not-allowed", "load_balancer service's source_ranges hold no range of the source: dropped (kube-proxy's loadBalancerSourceRanges)"),
        SessionTableFull(Error, "session-table-full", "no room in the session table for a new connection"),
        SnatPortsExhausted(Error, "snat-ports-exhausted", "no free source port on the node address toward the backend"),
        ReplyTupleInUse(Warn, "reply-tuple-in-use", "the new connection's reply direction is another connection's"),
        IcmpNotOurs(Info, "icmp-not-translated", "ICMP error about no session, or not an error"),
        Truncated(Warn, "truncated", "shorter than its headers say"),
        FragmentAgain(Warn, "fragment-again", "a fragment the gateway cut from a datagram it reassembled, routed back to a service (a routing loop): dropped"),
        ToSessionWorker(Info, "to-session-worker", "a NAT connection's packet on another worker than its session's (a datagram reassembled here; a client's packet, a backend's reply or an ICMP error out of a tunnel, steered by its outer header): handed to that worker"),
        ToReassembly(Info, "to-reassembly", "fragments to a service or of a reply to translate (ports only in the first): sent to ipN-reassembly, their datagram back here whole"),
        ExtensionHeaders(Warn, "extension-headers", "IPv6 extension headers not translated: a Routing header, AH, ESP, mobility, HIP, shim6, a malformed chain or one over 215 bytes (Hop-by-Hop and Destination Options are carried)"),
        Protocol(Warn, "not-tcp-udp", "not TCP, UDP, SCTP or an ICMP error about them"),
        BadUdpLength(Warn, "bad-udp-length", "UDP length field below 8 or past the packet"),
        SctpBadChunk(Warn, "sctp-bad-chunk", "SCTP chunk length below 4 or past the packet"),
        SctpBadParameter(Warn, "sctp-bad-parameter", "SCTP INIT or INIT ACK parameter length below 4 or past its chunk, or the chunk shorter than its fixed fields: dropped (its address parameters could not be removed)"),
        SctpAddressesRemoved(Info, "sctp-addresses-removed", "SCTP INIT and INIT ACK translated without the addresses they listed for multi-homing (the peer takes the translated source address only)"),
        SctpAsconfDropped(Warn, "sctp-asconf-dropped", "SCTP ASCONF or ASCONF-ACK chunk on a NAT association: dropped (the addresses it adds, deletes or makes primary are the endpoints' own, wrong through the translation; AUTH signs it, so it cannot be rewritten)"),
        SctpAsconfUnlisted(Info, "sctp-asconf-unlisted", "SCTP INIT and INIT ACK translated without ASCONF and ASCONF-ACK among their Supported Extensions (the peer then reconfigures no address, RFC 5061)"),
        SctpPathChanged(Info, "sctp-path-changed", "SCTP packets of a direct-server-return association from another client address than its previous packet (a multi-homed client's path change: the association keeps its backend)"),
        SctpBadChecksum(Warn, "sctp-bad-checksum", "SCTP CRC32c wrong on arrival: dropped, not recomputed into a good one after translation"),
        Encapsulated(Info, "encapsulated", "packets sent to their backend inside the service's encapsulation"),
        GsoSegmented(Info, "gso-to-segment", "GSO frames sent to software segmentation before encapsulation"),
        NoOuter(Error, "no-outer-headers", "the service or backend the balancer chose has no outer headers in the tables (never expected)"),
        NoHeadroom(Error, "no-headroom", "not enough headroom for the outer headers"),
        TooBig(Warn, "too-big", "encapsulated packet longer than an IP packet can be"),
        FragmentOuter(Info, "fragment-outer", "encapsulated packets too big for the backend's link sent to ipN-fragment (the client's packet may be fragmented)"),
        InnerTooBig(Info, "inner-too-big", "client packet too big for the backend's link once encapsulated, with DF or IPv6 (ICMP frag-needed / packet-too-big requested)"),
    }
}

/// A family's next nodes and ICMP "port unreachable".
pub trait NatNodeFamily: LbFamily {
    const NODE: &'static str;
    const LOOKUP: LbNatNext;
    const ICMP_ERROR: LbNatNext;
    const REWRITE: LbNatNext;
    /// Fragmentation of the outer packets (their family is the service's).
    const FRAGMENT: LbNatNext;
    /// Reassembly of fragments to a service, or of a reply to translate.
    const REASSEMBLY: LbNatNext;
    /// The SPD's node for a forwarded packet whose link has one.
    const IPSEC_OUTPUT: LbNatNext;
    /// The kind of a service address's route (`meta.adj` of a packet to a service).
    const SERVICE_ROUTE: TunnelKind;
    const PORT_UNREACHABLE: IcmpRequest;
    /// The outer packet's family on the forwarding side (its adjacency).
    type Ip: ip::nodes::family::Family;
}

impl NatNodeFamily for crate::V4 {
    const NODE: &'static str = "lb4-nat";
    const LOOKUP: LbNatNext = LbNatNext::Ip4Lookup;
    const ICMP_ERROR: LbNatNext = LbNatNext::Ip4IcmpError;
    const REWRITE: LbNatNext = LbNatNext::Ip4Rewrite;
    const FRAGMENT: LbNatNext = LbNatNext::Ip4Fragment;
    const REASSEMBLY: LbNatNext = LbNatNext::Ip4Reassembly;
    const IPSEC_OUTPUT: LbNatNext = LbNatNext::Ipsec4Output;
    const SERVICE_ROUTE: TunnelKind = TunnelKind::Lb4;
    const PORT_UNREACHABLE: IcmpRequest = IcmpRequest::new(3, wire::icmpv4::unreach::PORT, 0);
    type Ip = ip::nodes::family::Ip4;
}

impl NatNodeFamily for crate::V6 {
    const NODE: &'static str = "lb6-nat";
    const LOOKUP: LbNatNext = LbNatNext::Ip6Lookup;
    const ICMP_ERROR: LbNatNext = LbNatNext::Ip6IcmpError;
    const REWRITE: LbNatNext = LbNatNext::Ip6Rewrite;
    const FRAGMENT: LbNatNext = LbNatNext::Ip6Fragment;
    const REASSEMBLY: LbNatNext = LbNatNext::Ip6Reassembly;
    const IPSEC_OUTPUT: LbNatNext = LbNatNext::Ipsec6Output;
    const SERVICE_ROUTE: TunnelKind = TunnelKind::Lb6;
    const PORT_UNREACHABLE: IcmpRequest = IcmpRequest::new(1, wire::icmpv6::unreach::PORT, 0);
    type Ip = ip::nodes::family::Ip6;
}

/// What `prepare` read of one packet for `process`, so that a packet is parsed and
/// hashed once: its flow as whole words, written with a few full-word stores (as a
/// 40-byte `Result<Flow>` it was twelve narrow ones, and a narrower field alone made
/// it longer; docs/PERFORMANCE.md). The key is the session table's own form, compared
/// in place by the hit, and the hash comes with the key's home slot, so that the
/// prefetch and the lookup start there.
#[derive(Clone, Copy)]
struct Prepared<F: Family> {
    /// The flow's 5-tuple (default when the packet has no flow).
    key: Key<F>,
    /// The flow's hash (0 without a flow) and its home slot in the session table.
    at: Hashed,
    /// The flow's transport header's offset (bits 0–7), its TCP flags (8–15), and 0,
    /// or why the packet has no flow (16–23: the place in [`NO_FLOW`] plus one).
    meta: u32,
}

/// Why a packet has no flow, by its code in [`Prepared::meta`] less one.
/// SCTP is one of them: its flow is read on the full path ([`LbNat::sctp_flow`]).
const NO_FLOW: [NatError; 6] =
    [NatError::Truncated, NatError::Fragment, NatError::ExtensionHeaders, NatError::Protocol, NatError::BadUdpLength, NatError::Sctp];

impl<F: Family> Prepared<F> {
    /// `sessions`: the table whose home slot the record names.
    #[inline(always)]
    fn new<V: Copy + Default>(flow: Result<Flow<F::Addr>, NatError>, sessions: &Table<Key<F>, V>) -> Self {
        match flow {
            Ok(f) => {
                let key = Key::new(&f.key);
                // `l4` is at most 255 (an IPv4 header with options is 60 bytes; IPv6's
                // extension headers at most `nat::MAX_EXTENSION_BYTES`).
                let meta = (f.l4 as u32 & 0xff) | (f.flags as u32) << 8;
                Prepared { key, at: sessions.hashed(key.hash()), meta }
            }
            Err(e) => Self::without_flow(e),
        }
    }

    fn without_flow(e: NatError) -> Self {
        let code = NO_FLOW.iter().position(|&n| n == e).map_or(0, |p| p + 1) as u32;
        Prepared { key: Key::default(), at: Hashed::default(), meta: code << 16 }
    }

    #[inline(always)]
    fn hash(&self) -> u32 {
        self.at.tag
    }

    #[inline(always)]
    fn l4(&self) -> usize {
        self.meta as u8 as usize
    }

    #[inline(always)]
    fn flags(&self) -> u8 {
        (self.meta >> 8) as u8
    }

    /// Whether the packet has a flow (else [`Prepared::flow`] says why not).
    #[inline(always)]
    fn has_flow(&self) -> bool {
        self.meta >> 16 == 0
    }

    /// The flow as [`nat::flow`] read it, or why there is none.
    fn flow(&self) -> Result<Flow<F::Addr>, NatError> {
        match (self.meta >> 16) as usize {
            0 => Ok(Flow { key: self.key.flow(), flags: self.flags(), l4: self.l4() }),
            code => Err(NO_FLOW.get(code - 1).copied().unwrap_or(NatError::Truncated)),
        }
    }
}

pub struct LbNat<F: Family> {
    /// The current vector's packets as `prepare` read them, by their place in the
    /// vector (in `meta.param`, as `ipsecN-output` keeps its `Ready`).
    ready: Box<[Prepared<F>; VECTOR_SIZE]>,
    /// How many of `ready` are the current vector's.
    len: usize,
}

impl<F: Family> Default for LbNat<F> {
    fn default() -> Self {
        LbNat { ready: Box::new([Prepared::without_flow(NatError::Truncated); VECTOR_SIZE]), len: 0 }
    }
}

/// How many packets ahead of the one it decides `process` starts loading a session
/// slot: the misses of a few packets overlap each other and the work in between, and a
/// line arrives shortly before its packet needs it. Loading a whole vector's (256 lines)
/// up front queued them behind the core's few outstanding misses and, with the packets'
/// own lines, overflowed the L1 cache before the first were used (perf: a third of the
/// node's samples on that prefetch and on the hit's load; docs/PERFORMANCE.md).
const AHEAD: usize = 16;

fn nat_drop(e: NatError) -> LbNatCounter {
    match e {
        NatError::Truncated => LbNatCounter::Truncated,
        // Not reached: fragments go to reassembly (`LbNat::to_reassembly`).
        NatError::Fragment => LbNatCounter::ToReassembly,
        NatError::ExtensionHeaders => LbNatCounter::ExtensionHeaders,
        NatError::Protocol => LbNatCounter::Protocol,
        NatError::BadUdpLength => LbNatCounter::BadUdpLength,
        // Never a drop: an SCTP packet is read on by `LbNat::sctp_flow`.
        NatError::Sctp => LbNatCounter::Protocol,
        NatError::BadSctpChunk => LbNatCounter::SctpBadChunk,
        NatError::SctpChecksum => LbNatCounter::SctpBadChecksum,
        NatError::BadSctpParameter => LbNatCounter::SctpBadParameter,
    }
}

/// An ICMP error about a packet of one of this worker's connections, translated in place
/// to be about the packet the error's receiver sent (PMTU discovery through the
/// translation); false, untouched, for anything else.
fn translate_error<F: nat::Layout>(lb: &crate::session::Balancer<F>, pkt: &mut [u8], now: u64) -> bool {
    let Ok(e) = nat::icmp_error::<F>(pkt) else { return false };
    let Some(rw) = lb.peek(&e.quoted.reversed(), now) else { return false };
    nat::translate_icmp_error::<F>(pkt, &e, &rw);
    true
}

impl<F: NatNodeFamily> LbNat<F> {
    /// A forwarded packet: translated if it is the reply of a `Local`-policy connection,
    /// or an ICMP error about one of its packets (from the backend or a router on the
    /// way: the client must see the error about the packet it sent, for path MTU
    /// discovery); on along its route either way (the client's, unchanged: [`LbNat::onward`]).
    #[inline]
    fn forwarded<Cx: HasLb>(
        cx: &mut Cx,
        counts: &mut Counts<'_, LbNatCounter>,
        buf: &mut Buffer,
        flow: Result<Flow<F::Addr>, NatError>,
    ) -> Verdict<LbNatNext, LbNatCounter> {
        let partial = buf.meta.offload.has_partial_checksum();
        let (t, lb, now) = F::parts(cx.lb());
        match &flow {
            Ok(flow) => {
                if t.reply_sources.contains(&flow.key.src) {
                    if let Some(rw) = lb.reverse(&flow.key, flow.flags, now) {
                        nat::translate::<F>(buf.bytes_mut(), flow, &rw, partial);
                        counts.inc(LbNatCounter::Replies);
                    } else if let Some(v) = Self::owned_elsewhere(cx, counts, buf) {
                        // A backend's reply out of a tunnel, steered by its outer header.
                        return v;
                    }
                }
            }
            Err(NatError::Protocol) => {
                if translate_error(lb, buf.bytes_mut(), now) {
                    counts.inc(LbNatCounter::IcmpTranslated);
                } else if let Some(v) = Self::owned_elsewhere(cx, counts, buf) {
                    return v;
                }
            }
            Err(NatError::Sctp) => return Self::forwarded_sctp(cx, counts, buf),
            // A fragment of a `Local` connection's reply: translated whole. Not one the
            // gateway cut itself (a reassembled datagram, fragmented again on its way out
            // and routed here again): that would go round for ever.
            Err(NatError::Fragment) if !buf.meta.refragment && t.reply_sources.contains(&F::src(buf.bytes())) => {
                return Self::to_reassembly(counts, buf)
            }
            Err(_) => {}
        }
        Verdict::Next(Self::onward(cx, buf))
    }

    /// Where a forwarded packet goes on along the route `ipN-lookup` found: into its
    /// tunnel (the tunnel's id in `meta.param`, as the lookup gives it to the tunnel's
    /// node), to `ipsecN-output` for a link with an SPD, else to `ipN-rewrite`.
    #[inline(always)]
    fn onward<Cx: HasLb>(cx: &mut Cx, buf: &mut Buffer) -> LbNatNext {
        let adj = buf.meta.adj;
        if let Some(t) = TunnelRef::decode(adj) {
            buf.meta.param = t.id;
            return ip::tunnel_next!(LbNatNext, t.kind);
        }
        let tables = &cx.ip().tables;
        match tables.adjacency(adj).tx_if() {
            Some(i) if tables.has_spd(i) => F::IPSEC_OUTPUT,
            _ => F::REWRITE,
        }
    }

    /// [`LbNat::forwarded`] for SCTP: a `Local` association's reply translated (its
    /// CRC32c checked first: a bad one is dropped, as on the full path); anything else
    /// passes untouched, whatever its CRC (not the balancer's packet).
    #[inline(never)]
    fn forwarded_sctp<Cx: HasLb>(cx: &mut Cx, counts: &mut Counts<'_, LbNatCounter>, buf: &mut Buffer) -> Verdict<LbNatNext, LbNatCounter> {
        let (t, lb, now) = F::parts(cx.lb());
        let Ok(read) = nat::sctp_read::<F>(buf.bytes()) else { return Verdict::Next(Self::onward(cx, buf)) };
        let flow = read.flow;
        if !t.reply_sources.contains(&flow.key.src) || lb.peek(&flow.key, now).is_none() {
            return Verdict::Next(Self::onward(cx, buf));
        }
        // A CRC32c its sender left to the device: computed here, and no longer pending
        // (see `LbNat::crc_left`).
        let left = buf.take_partial_checksum().is_some();
        if nat::sctp_checksum_or_fill(buf.bytes_mut(), &flow, left).is_err() {
            return Verdict::Drop(LbNatCounter::SctpBadChecksum);
        }
        if read.asconf && lb.is_reply(&flow.key, now) {
            return Verdict::Drop(LbNatCounter::SctpAsconfDropped);
        }
        if let Some(rw) = lb.reverse(&flow.key, flow.flags, now) {
            Self::translate(counts, buf, &flow, &rw, false);
            counts.inc(LbNatCounter::Replies);
        }
        Verdict::Next(Self::onward(cx, buf))
    }

    /// [`nat::translate`] on the full path, an SCTP INIT's or INIT ACK's multi-homing
    /// (its addresses, ASCONF among its extensions) removed first
    /// ([`nat::remove_sctp_multihoming`]), the packet cut to its new length. Not the
    /// session hit's (TCP and UDP only).
    #[inline(always)]
    fn translate(counts: &mut Counts<'_, LbNatCounter>, buf: &mut Buffer, flow: &Flow<F::Addr>, rw: &Rewrite<F::Addr>, partial: bool) {
        if flow.key.proto == nat::SCTP {
            Self::remove_sctp_multihoming(counts, buf, flow);
        }
        nat::translate::<F>(buf.bytes_mut(), flow, rw, partial);
    }

    #[inline(never)]
    fn remove_sctp_multihoming(counts: &mut Counts<'_, LbNatCounter>, buf: &mut Buffer, flow: &Flow<F::Addr>) {
        if let Some((len, removed)) = nat::remove_sctp_multihoming::<F>(buf.bytes_mut(), flow) {
            buf.truncate(len);
            if removed.addresses > 0 {
                counts.inc(LbNatCounter::SctpAddressesRemoved);
            }
            if removed.asconf > 0 {
                counts.inc(LbNatCounter::SctpAsconfUnlisted);
            }
        }
    }

    /// Whether `buf`'s pending partial checksum is an SCTP packet's CRC32c that its
    /// sender left to the device (a local Linux sender's, by a vnet header); if so it is
    /// no longer pending: the nodes and devices that complete a partial checksum
    /// complete an Internet checksum, which would spoil the CRC32c. [`LbNat::sctp_flow`]
    /// computes the CRC32c itself then. Only asked of a packet with a partial checksum
    /// on the full path.
    #[inline(never)]
    fn crc_left(buf: &mut Buffer, ready: &Prepared<F>) -> bool {
        matches!(ready.flow(), Err(NatError::Sctp)) && buf.take_partial_checksum().is_some()
    }

    /// An SCTP packet's flow (out of the TCP/UDP path, which reads none for it) and
    /// whether it holds an ASCONF chunk ([`nat::sctp_read`]), its CRC32c checked, or
    /// computed when its sender left it to the device (`left`, [`LbNat::crc_left`]:
    /// nothing to check, the sender trusted its device); and its flow hash (for a GUE
    /// source port).
    #[inline(never)]
    fn sctp_flow(pkt: &mut [u8], left: bool) -> Result<(nat::SctpRead<F::Addr>, u32), NatError> {
        let read = nat::sctp_read::<F>(pkt)?;
        nat::sctp_checksum_or_fill(pkt, &read.flow, left)?;
        let k = &read.flow.key;
        Ok((read, F::flow_hash(&k.src, &k.dst, k.sport, k.dport, k.proto)))
    }

    /// A direct-server-return packet, its backend chosen: `outer` put in front of the
    /// packet, addressed to `dst` (the backend), `hash` the flow's (the GUE source port),
    /// the adjacency to send it by (`adj`) returned for [`LbNat::send_outer`] (a GSO
    /// frame and a refusal: the verdict; a GSO frame goes to segmentation first, its
    /// segments come back by the service's route and each is encapsulated here). Apart
    /// from the sending, which needs the context the shape is borrowed from.
    #[inline(always)]
    fn put_outer(
        counts: &mut Counts<'_, LbNatCounter>,
        buf: &mut Buffer,
        outer: &crate::encap::Outer,
        dst: &[u8],
        adj: u32,
        hash: u32,
    ) -> Result<u32, Verdict<LbNatNext, LbNatCounter>> {
        use LbNatCounter as C;
        if buf.meta.offload.gso != engine::GsoKind::None {
            counts.inc(C::GsoSegmented);
            return Err(Verdict::Next(LbNatNext::Segment));
        }
        match outer.apply(buf, hash, dst) {
            Ok(()) => counts.inc(C::Encapsulated),
            Err(EncapError::NoHeadroom) => return Err(Verdict::Drop(C::NoHeadroom)),
            Err(EncapError::TooBig) => return Err(Verdict::Drop(C::TooBig)),
        }
        Ok(adj)
    }

    /// An encapsulated packet by its backend's adjacency `adj`: no second lookup for a
    /// resolved backend (as the tunnels' encap nodes); what the link cannot carry whole
    /// goes by the lookup, whose rewrite decides, unless the client must be told
    /// ([`LbNat::too_big_for_link`]).
    #[inline(always)]
    fn send_outer<Cx: HasLb>(
        cx: &mut Cx,
        counts: &mut Counts<'_, LbNatCounter>,
        buf: &mut Buffer,
        adj: u32,
        outer_len: usize,
    ) -> Verdict<LbNatNext, LbNatCounter> {
        if adj != ADJ_MISS {
            // Out of a link with an SPD bound, the outer packet meets the link's outbound
            // policies, which the lookup sends it through.
            if ip::nodes::family::outer_to_output_features(&cx.ip().tables, buf, adj) {
                return Verdict::Next(F::LOOKUP);
            }
            if ip::nodes::family::send_originated_whole::<F::Ip>(&cx.ip().tables, buf, adj) {
                buf.meta.adj = adj;
                return Verdict::Next(LbNatNext::Output);
            }
            if let Some(v) = Self::too_big_for_link(cx, counts, buf, adj, outer_len) {
                return v;
            }
        }
        Verdict::Next(F::LOOKUP)
    }

    /// The encapsulated packet is longer than the backend's link carries. The outer
    /// header has DF, so a router would only tell the node; the client is told instead,
    /// as every tunnel tells its sources (`ip::outer::inner_fit`, with the link MTU less
    /// the outer headers): frag-needed or packet too big about its own packet, when that
    /// may not be fragmented (IPv4 with DF, IPv6 over 1280 bytes). Otherwise the outer
    /// packet is fragmented as a tunnel's (`ip::outer::fragment_outer`: `ipN-fragment`
    /// gives it an identification and clears its DF, we being its source; the backend
    /// reassembles). `None`: the link is not the reason.
    #[inline(never)]
    fn too_big_for_link<Cx: HasLb>(
        cx: &mut Cx,
        counts: &mut Counts<'_, LbNatCounter>,
        buf: &mut Buffer,
        adj: u32,
        outer_len: usize,
    ) -> Option<Verdict<LbNatNext, LbNatCounter>> {
        let mtu = cx.ip().tables.adjacency(adj).mtu()? as usize;
        if buf.len() <= mtu {
            return None;
        }
        // The client's packet at the start again (the outer headers stay in headroom).
        buf.advance(outer_len).ok()?;
        match ip::outer::inner_fit(buf, mtu.saturating_sub(outer_len), ip::outer::FragmentPolicy::Outer) {
            // A datagram reassembled here: its sender fragmented it and cannot make it
            // smaller; it goes in outer fragments.
            ip::outer::InnerFit::TooBig { icmp, .. } if !buf.meta.refragment => {
                buf.meta.param = icmp.encode();
                counts.inc(LbNatCounter::InnerTooBig);
                Some(Verdict::Next(F::ICMP_ERROR))
            }
            _ => {
                buf.extend_front(outer_len).ok()?;
                let mtu = u16::try_from(mtu).ok()?;
                ip::outer::fragment_outer(buf, Some(mtu)).then(|| {
                    counts.inc(LbNatCounter::FragmentOuter);
                    Verdict::Next(F::FRAGMENT)
                })
            }
        }
    }

    /// A packet its session alone did not decide: an ICMP error or a packet without a
    /// flow, a reply found by the full lookup, or a client's packet to its service by
    /// the service lookup (a new flow, a changed service, a restarted connection).
    #[inline(never)]
    fn full_path<Cx: HasLb>(
        cx: &mut Cx,
        counts: &mut Counts<'_, LbNatCounter>,
        buf: &mut Buffer,
        ready: &Prepared<F>,
        local: bool,
    ) -> Verdict<LbNatNext, LbNatCounter> {
        use LbNatCounter as C;
        let partial = buf.meta.offload.has_partial_checksum();
        let left = partial && Self::crc_left(buf, ready);
        let mut hash = ready.hash();
        let (_, lb, now) = F::parts(cx.lb());
        let pkt = buf.bytes_mut();
        // An SCTP packet holding an ASCONF or ASCONF-ACK chunk: dropped on a translated
        // association (`nat::SctpRead::asconf`), both ways; carried on a direct one.
        let mut asconf = false;
        // An SCTP packet's verification tag (0 for TCP and UDP).
        let mut vtag = 0;
        let flow = match ready.flow() {
            Ok(flow) => flow,
            Err(NatError::Sctp) => match Self::sctp_flow(pkt, left) {
                Ok((read, h)) => {
                    hash = h;
                    (asconf, vtag) = (read.asconf, read.vtag);
                    read.flow
                }
                Err(e) => return Verdict::Drop(nat_drop(e)),
            },
            Err(NatError::Protocol) if F::l4(pkt).is_ok_and(|(_, p)| p == F::ICMP) => {
                return Self::error_to_service(cx, counts, buf, local);
            }
            Err(NatError::Fragment) if buf.meta.refragment => return Verdict::Drop(C::FragmentAgain),
            Err(NatError::Fragment) => return Self::to_reassembly(counts, buf),
            Err(e) => return Verdict::Drop(nat_drop(e)),
        };
        let (key, flags) = (flow.key, flow.flags);
        // Replies are addressed to the node (SNAT) and come by ipN-local; a packet routed
        // to a service address is a client's.
        if local {
            if asconf && lb.is_reply(&key, now) {
                return Verdict::Drop(C::SctpAsconfDropped);
            }
            if let Some(rw) = lb.reverse(&key, flags, now) {
                Self::translate(counts, buf, &flow, &rw, partial);
                counts.inc(C::Replies);
                return Verdict::Next(F::LOOKUP);
            }
            // A reply to the SNAT address that came out of a tunnel here (a backend
            // behind one), steered by its outer header: its session is the worker's
            // whose port it is.
            if let Some(v) = Self::owned_elsewhere(cx, counts, buf) {
                return v;
            }
        }
        let (t, lb, now) = F::parts(cx.lb());
        let Some(svc) = t.lookup(&key.dst, key.dport, key.proto, local) else {
            counts.inc(C::NoService);
            buf.meta.param = F::PORT_UNREACHABLE.encode();
            return Verdict::Next(F::ICMP_ERROR);
        };
        // A new connection, or a session whose service changed since it was checked
        // (new ranges are a new generation): a session hit never gets here, and never
        // reads the ranges.
        if svc.sources.as_ref().is_some_and(|s| !s.contains_bytes(key.src.as_ref())) {
            lb.forget(&key, now);
            return Verdict::Drop(C::SourceNotAllowed);
        }
        if svc.forwarding.is_encap() {
            let chosen = if key.proto == nat::SCTP {
                lb.direct_sctp(svc, &key, vtag, flags, now).map(|(b, outcome, moved)| {
                    if moved {
                        counts.inc(C::SctpPathChanged);
                    }
                    (b, outcome)
                })
            } else {
                lb.direct(svc, &key, flags, now)
            };
            return match chosen {
                Ok((b, outcome)) => {
                    count_outcome(counts, outcome);
                    let Some((outer, backend)) = t.shape(svc.shape).zip(svc.backends.get(b as usize)) else {
                        return Verdict::Drop(C::NoOuter);
                    };
                    let outer_len = outer.len();
                    match Self::put_outer(counts, buf, outer, backend.addr.as_ref(), backend.adj, hash) {
                        Ok(adj) => Self::send_outer(cx, counts, buf, adj, outer_len),
                        Err(v) => v,
                    }
                }
                Err(LbDrop::NoBackend) if svc.drop_without_backend => Verdict::Drop(C::NoLocalBackend),
                Err(LbDrop::NoBackend) => {
                    counts.inc(C::NoBackend);
                    buf.meta.param = F::PORT_UNREACHABLE.encode();
                    Verdict::Next(F::ICMP_ERROR)
                }
                Err(LbDrop::SessionTableFull) => Verdict::Drop(C::SessionTableFull),
                Err(LbDrop::SnatPortsExhausted) => Verdict::Drop(C::SnatPortsExhausted),
                Err(LbDrop::ReplyTupleInUse) => Verdict::Drop(C::ReplyTupleInUse),
            };
        }
        if asconf {
            return Verdict::Drop(C::SctpAsconfDropped);
        }
        // Its session is its client's worker's, where the replies come
        // ([`crate::steer`]); a client's packet that came out of a tunnel here was
        // steered by its outer header, and goes there now.
        let (me, workers) = lb.worker();
        if workers > 1 {
            let owner = crate::steer::client_worker::<F>(&key.src, key.sport, key.proto, workers);
            if owner != me {
                return Self::to_session_worker(counts, buf, owner);
            }
        }
        match lb.forward(t, svc, &key, flags, now) {
            Ok((rw, outcome)) => {
                Self::translate(counts, buf, &flow, &rw, partial);
                count_outcome(counts, outcome);
                Verdict::Next(F::LOOKUP)
            }
            Err(LbDrop::NoBackend) if svc.drop_without_backend => Verdict::Drop(C::NoLocalBackend),
            Err(LbDrop::NoBackend) => {
                counts.inc(C::NoBackend);
                buf.meta.param = F::PORT_UNREACHABLE.encode();
                Verdict::Next(F::ICMP_ERROR)
            }
            Err(LbDrop::SessionTableFull) => Verdict::Drop(C::SessionTableFull),
            Err(LbDrop::SnatPortsExhausted) => Verdict::Drop(C::SnatPortsExhausted),
            Err(LbDrop::ReplyTupleInUse) => Verdict::Drop(C::ReplyTupleInUse),
        }
    }

    /// A fragment of a client's datagram to a service, or of a reply to translate: only
    /// the first carries the ports that choose the session. The fragments are reassembled
    /// (`ipN-reassembly`, the worker's bounded table, as for the node's own) and the whole
    /// datagram comes back here to take its session's path like any packet; it is
    /// fragmented again where a link needs it (`Meta::refragment`), as Linux's conntrack
    /// does, or, encapsulated, in outer fragments.
    #[cold]
    fn to_reassembly(counts: &mut Counts<'_, LbNatCounter>, buf: &mut Buffer) -> Verdict<LbNatNext, LbNatCounter> {
        counts.inc(LbNatCounter::ToReassembly);
        buf.meta.param = ip::nodes::ip_reassembly::FOR_LB;
        Verdict::Next(F::REASSEMBLY)
    }

    /// A packet whose connection belongs to another worker ([`crate::steer::owner`],
    /// the worker its packets are steered to when they arrive as they are): handed to
    /// that worker ([`LbNat::to_session_worker`]). A datagram reassembled on this worker
    /// (the worker its fragments' addresses hash to: only the first fragment has ports),
    /// or a backend's reply or an ICMP error that came out of a tunnel here (steered by
    /// its outer header). `None`: this worker's.
    #[cold]
    fn owned_elsewhere<Cx: HasLb>(
        cx: &mut Cx,
        counts: &mut Counts<'_, LbNatCounter>,
        buf: &mut Buffer,
    ) -> Option<Verdict<LbNatNext, LbNatCounter>> {
        let (me, workers) = cx.lb().b4.worker();
        if workers <= 1 {
            return None;
        }
        let lb = std::sync::Arc::clone(&cx.lb().tables);
        let ip = &cx.ip().tables;
        let owner = crate::steer::owner(&lb, buf.bytes(), workers, |a| ip.is_local(a))?;
        (owner != me).then(|| Self::to_session_worker(counts, buf, owner))
    }

    /// A NAT connection's packet met on this worker while worker `owner` holds (or is to
    /// hold) its session: handed to it (`resume-handoff`) to take its session's path
    /// there. It continues at that worker's lookup, past the input checks it passed
    /// here: it may have come out of a tunnel here (a client behind a tunnel, steered by
    /// its outer header), or been made whole here from fragments.
    #[cold]
    fn to_session_worker(counts: &mut Counts<'_, LbNatCounter>, buf: &mut Buffer, owner: u32) -> Verdict<LbNatNext, LbNatCounter> {
        buf.meta.param = owner;
        counts.inc(LbNatCounter::ToSessionWorker);
        Verdict::Next(LbNatNext::ResumeHandoff)
    }

    /// An ICMP error routed to the node, about a load-balanced connection's packet. A
    /// direct-server-return backend's reply leaves it from the service's address, so a
    /// router's error about the reply (frag-needed, packet too big: path MTU discovery)
    /// comes to the service address, here: it goes on unchanged, inside the service's
    /// outer headers, to the backend that holds the connection, which knows the reply
    /// it quotes (its GUE source port the connection's, as its packets'). An error
    /// about a translated connection's packet is translated to be about the packet its
    /// receiver sent.
    #[cold]
    fn error_to_service<Cx: HasLb>(
        cx: &mut Cx,
        counts: &mut Counts<'_, LbNatCounter>,
        buf: &mut Buffer,
        local: bool,
    ) -> Verdict<LbNatNext, LbNatCounter> {
        use LbNatCounter as C;
        let (t, lb, now) = F::parts(cx.lb());
        let Ok(e) = nat::icmp_error::<F>(buf.bytes()) else { return Verdict::Drop(C::IcmpNotOurs) };
        let key = e.quoted.reversed();
        if let Some(svc) = t.lookup(&key.dst, key.dport, key.proto, local).filter(|s| s.forwarding.is_encap()) {
            let Some(b) = lb.direct_backend(svc, &key, now) else { return Verdict::Drop(C::IcmpNotOurs) };
            let Some((outer, backend)) = t.shape(svc.shape).zip(svc.backends.get(b as usize)) else {
                return Verdict::Drop(C::NoOuter);
            };
            let (outer_len, hash) = (outer.len(), Key::<F>::new(&key).hash());
            counts.inc(C::IcmpToBackend);
            return match Self::put_outer(counts, buf, outer, backend.addr.as_ref(), backend.adj, hash) {
                Ok(adj) => Self::send_outer(cx, counts, buf, adj, outer_len),
                Err(v) => v,
            };
        }
        // The session of the connection it is about is its client's worker's (an error
        // out of a tunnel was steered by its outer header).
        if let Some(v) = Self::owned_elsewhere(cx, counts, buf) {
            return v;
        }
        let (_, lb, now) = F::parts(cx.lb());
        if !translate_error(lb, buf.bytes_mut(), now) {
            return Verdict::Drop(C::IcmpNotOurs);
        }
        counts.inc(C::IcmpTranslated);
        Verdict::Next(F::LOOKUP)
    }
}

impl<Cx: HasLb, F: NatNodeFamily> Node<Cx> for LbNat<F> {
    type Next = LbNatNext;
    type Counter = LbNatCounter;

    fn name(&self) -> &'static str {
        F::NODE
    }

    const RUNS_VECTORS: bool = true;

    /// The vector decided and sent on in one loop: each packet's flow read as in
    /// `prepare`, then each decided (its session's hit, or the full path) and pushed to
    /// its next node in arrival order, its place in the vector the loop's own index (no
    /// `process` call and no `meta.param` round trip a packet).
    fn run_vector(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx], out: &mut Enqueue<'_, Self::Next, Self::Counter>) {
        self.read_vector(cx, pool, input, false);
        let bufs = pool.buffers_mut();
        for (at, &bi) in input[..self.len].iter().enumerate() {
            let buf = &mut bufs[bi.get()];
            let v = self.decide(cx, &mut out.counts(), buf, at);
            out.push(bi, buf, v);
        }
    }

    /// For a traced vector: the flows read as in `run_vector`, each packet's place in
    /// the vector left in `meta.param` for `process` (which runs after its trace line).
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        self.read_vector(cx, pool, input, true);
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        // `prepare` ran on this vector (the dispatcher runs it first) and left the
        // packet's place in it; the packet is as `prepare` read it.
        let at = buf.meta.param as usize % VECTOR_SIZE;
        self.decide(cx, counts, buf, at)
    }
}

impl<F: NatNodeFamily> LbNat<F> {
    /// Read and hash each packet's flow once, here, kept in `ready` for `decide`, and
    /// start loading the session slots (the key's home slot, the one line a hit reads)
    /// of the first [`AHEAD`] packets; `decide` keeps the loads that far ahead.
    /// `places`: each packet's place in the vector written to its `meta.param`
    /// (for `process`). Measured in docs/PERFORMANCE.md.
    #[inline(always)]
    fn read_vector<Cx: HasLb>(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx], places: bool) {
        let (_, lb, _) = F::parts(cx.lb());
        let n = input.len().min(VECTOR_SIZE);
        let bufs = pool.buffers_mut();
        for (i, (&b, ready)) in input[..n].iter().zip(self.ready.iter_mut()).enumerate() {
            let buf = &mut bufs[b.get()];
            *ready = Prepared::new(nat::flow::<F>(buf.bytes()), &lb.sessions);
            if places {
                buf.meta.param = i as u32;
            }
        }
        self.len = n;
        let ready = &self.ready[..n];
        for r in ready.iter().take(AHEAD) {
            lb.sessions.prefetch(r.at);
        }
    }

    /// The packet at place `at` of the vector `read_vector` read: a session hit here,
    /// inlined into the vector's loop; everything else (a new flow, a changed service, a
    /// reply found by the full lookup, an ICMP error, a bad packet) out of line in
    /// [`LbNat::full_path`], so the hit path's registers and stack stay its own.
    #[inline(always)]
    fn decide<Cx: HasLb>(
        &self,
        cx: &mut Cx,
        counts: &mut Counts<'_, LbNatCounter>,
        buf: &mut Buffer,
        at: usize,
    ) -> Verdict<LbNatNext, LbNatCounter> {
        {
            let (_, lb, _) = F::parts(cx.lb());
            if let Some(r) = self.ready[..self.len].get(at + AHEAD) {
                lb.sessions.prefetch(r.at);
            }
        }
        if buf.meta.refragment {
            if let Some(v) = Self::owned_elsewhere(cx, counts, buf) {
                return v;
            }
        }
        let ready = &self.ready[at % VECTOR_SIZE];
        // Routed here by a service address's FIB entry (a tunnel reference of the
        // service kind), by ipN-local for the node's own addresses, or on its way along
        // its route, to a next hop or into a tunnel (`lb_replies`: a reply that kept the
        // client's address?).
        let adj = buf.meta.adj;
        let service = TunnelRef::is_kind(adj, F::SERVICE_ROUTE);
        let local = !service && adj <= MAX_INDEX && matches!(cx.ip().tables.adjacency(adj), Adjacency::Local);
        if !service && !local {
            return Self::forwarded(cx, counts, buf, ready.flow());
        }
        if !ready.has_flow() {
            return Self::full_path(cx, counts, buf, ready, local);
        }
        let (t, lb, now) = F::parts(cx.lb());
        // An established flow's packet: its session says everything (no service lookup).
        let (rw, d) = match lb.hit(t, ready.at, &ready.key, ready.flags(), local, now) {
            Some(Hit::Forward(rw, d)) => (rw, d),
            Some(Hit::Reply(rw, d)) => {
                counts.inc(LbNatCounter::Replies);
                (rw, d)
            }
            // `ready.hash` is the flow's (its session was found by it).
            Some(Hit::Direct { outer, dst, adj, .. }) => {
                let outer_len = outer.len();
                return match Self::put_outer(counts, buf, outer, dst.as_ref(), adj, ready.hash()) {
                    Ok(adj) => Self::send_outer(cx, counts, buf, adj, outer_len),
                    Err(v) => v,
                };
            }
            None => return Self::full_path(cx, counts, buf, ready, local),
        };
        // One translation for both directions, inlined here (a call a packet before, perf).
        let partial = buf.meta.offload.has_partial_checksum();
        nat::translate_with::<F>(buf.bytes_mut(), ready.l4(), ready.key.proto(), rw, d, partial);
        Verdict::Next(F::LOOKUP)
    }
}

fn count_outcome(counts: &mut Counts<'_, LbNatCounter>, outcome: Outcome) {
    match outcome {
        Outcome::Hit => {}
        Outcome::New => counts.inc(LbNatCounter::NewSession),
        Outcome::NewAffine => counts.inc(LbNatCounter::Affine),
        Outcome::Rechosen => counts.inc(LbNatCounter::Rechosen),
    }
}

/// Add the LB nodes to a graph (the IP nodes must be there too).
pub fn register<Cx: HasLb>(g: &mut GraphBuilder<Cx>) {
    g.add(LbNat::<crate::V4>::default());
    g.add(LbNat::<crate::V6>::default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{FlowKey, Session};

    /// `process` reads back from the packed record what `prepare` read of the packet:
    /// the flow (key, flags, transport offset) with its hash and home slot, or why
    /// there is no flow, for each reason.
    #[test]
    fn the_prepared_record_gives_back_the_flow() {
        let sessions: Table<Key<crate::V4>, Session<[u8; 4]>> = Table::new(1 << 10);
        let key = FlowKey { src: [198, 18, 0, 1], dst: [198, 18, 128, 0], sport: 0xfedc, dport: 53, proto: 6 };
        for (flags, l4) in [(0u8, 20usize), (0x12, 60), (0xff, 24)] {
            let flow = Flow { key, flags, l4 };
            let r = Prepared::<crate::V4>::new(Ok(flow), &sessions);
            assert_eq!(r.flow(), Ok(flow));
            assert!(r.has_flow());
            assert_eq!((r.l4(), r.flags(), r.key.proto()), (l4, flags, 6));
            let hash = crate::V4::flow_hash(&key.src, &key.dst, key.sport, key.dport, key.proto);
            assert_eq!(r.at, sessions.hashed(hash));
        }
        for e in NO_FLOW {
            let r = Prepared::<crate::V4>::new(Err(e), &sessions);
            assert!(!r.has_flow());
            assert_eq!(r.flow(), Err(e));
        }
    }
}
