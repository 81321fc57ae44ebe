//! `esp4-encrypt` / `esp6-encrypt`: ESP for the packet at the buffer start, with
//! outbound SA `meta.param`; optionally in UDP (RFC 3948). Tunnel mode wraps the whole
//! packet behind a new outer header; transport mode puts ESP between the packet's own
//! IP header and its payload (the header moves forward into the headroom).
//!
//! In place: the trailer goes into the tailroom, the ESP header and IV, UDP and the
//! outer IP header into the headroom, and the payload is encrypted where it lies.

use super::EspOuter;
use crate::context::HasIpsec;
use crate::crypto::AeadInputs;
use crate::sa::{Age, Mode, Reserved, Sa, SaSpec, SeqError, UdpEncapPorts};
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use ip::outer::tos::Marking;
use ip::outer::{encap_mtu, inner_hop, ChecksumMode, EncapMtu, InnerHop, MtuPolicy};
use wire::esp::{EspLayout, EspRepr, EspTrailer, HEADER_LEN};
use wire::IpProtocol;

next_nodes! {
    pub enum EspEncryptNext {
        Output = "interface-output", Ip4Rewrite = "ip4-rewrite", Ip4Lookup = "ip4-lookup",
        Ip6Rewrite = "ip6-rewrite", Ip6Lookup = "ip6-lookup",
        Ip4IcmpError = "ip4-icmp-error", Ip6IcmpError = "ip6-icmp-error",
        Segment = "ip-gso-segment", Ip4Fragment = "ip4-fragment", Ip6Fragment = "ip6-fragment",
        // A tunnel-mode SA of the other outer family (an SPD node chose this one by the
        // inner packet's family).
        Esp4Encrypt = "esp4-encrypt", Esp6Encrypt = "esp6-encrypt",
    }
}

counters! {
    pub enum EspEncryptCounter {
        Encrypted(Info, "encrypted", "packets encrypted"),
        SoftLifetime(Warn, "soft-lifetime", "an SA passed a soft lifetime (packets or bytes): time to rekey"),
        NoSa(Error, "no-sa", "no outbound SA at the index the route or policy named"),
        ToOuterFamily(Info, "to-outer-family", "packets for a tunnel-mode SA whose outer family is the other one (an SPD policy protects IPv6 with an IPv4 tunnel, or the reverse): handed to that family's encrypt node"),
        TransportFamily(Warn, "transport-family-mismatch", "a transport-mode SA of the other address family than the packet's: nothing to put ESP into"),
        TransportNotEndpoints(Warn, "transport-not-endpoints", "a packet for a transport-mode SA that is not from its local to its remote address (a forwarded one): its ESP would reach no SA"),
        SeqOverflow(Error, "seq-overflow", "the SA's sequence number reached its end: dropped, never wrapped (RFC 4303 3.3.3)"),
        LifetimeExpired(Error, "lifetime-expired", "the SA passed a hard lifetime (packets or bytes)"),
        NoHeadroom(Error, "no-headroom", "not enough headroom for the outer headers"),
        TransportExtHeader(Warn, "transport-extension-header", "IPv6 packet with a hop-by-hop, routing or fragment header for a transport-mode SA (ESP would go after them: not done)"),
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

pub struct EspEncrypt<O: EspOuter> {
    /// The last tunnel-mode SA's outer hop in this vector: the next packet of the same
    /// SA (most are) takes it from here instead of through the SA's adjacency index and
    /// the adjacency table. Forgotten at each vector's start, so a table change between
    /// vectors is seen.
    outer: Option<OuterHop>,
    /// The vector's sequence numbers, reserved per SA.
    seqs: VectorSeqs,
    /// The current packet's nonce and AAD, written as soon as its sequence number is
    /// known, some way ahead of the seal that reads them
    /// ([`crate::crypto::Transform::write_seal_inputs`]).
    seal: AeadInputs,
    _family: std::marker::PhantomData<O>,
}

impl<O: EspOuter> Default for EspEncrypt<O> {
    fn default() -> Self {
        EspEncrypt { outer: None, seqs: VectorSeqs::default(), seal: AeadInputs::default(), _family: std::marker::PhantomData }
    }
}

/// How many SAs of one vector get their sequence numbers reserved at once; a vector's
/// packets of any further SA take theirs one atomic add each.
const VECTOR_SAS: usize = 4;

/// The sequence numbers of a vector's packets, reserved per SA with one atomic add
/// ([`crate::sa::Outbound::reserve`]): `prepare` counts the packets naming each SA, an
/// SA's first packet that gets as far as its number reserves that many, and
/// `end_of_vector` settles (bytes into the SA's count; numbers left for packets that
/// went elsewhere first, as skipped).
#[derive(Debug, Default)]
struct VectorSeqs {
    n: usize,
    sa: [u32; VECTOR_SAS],
    /// Packets naming the SA, until its numbers are reserved.
    want: [u32; VECTOR_SAS],
    reserved: [Reserved; VECTOR_SAS],
}

impl VectorSeqs {
    /// `run` more packets of SA `sa`.
    #[inline(always)]
    fn count(&mut self, sa: u32, run: u32) {
        for i in 0..self.n {
            if self.sa[i] == sa {
                self.want[i] += run;
                return;
            }
        }
        if self.n < VECTOR_SAS {
            let n = self.n;
            (self.sa[n], self.want[n], self.reserved[n]) = (sa, run, Reserved::default());
            self.n += 1;
        }
    }

    /// A sequence number for a packet of `len` bytes of SA `index` (`sa`).
    #[inline(always)]
    fn take(&mut self, index: u32, sa: &Sa, len: u64) -> Result<(u64, Age), SeqError> {
        let s = &*sa.spec;
        for i in 0..self.n {
            if self.sa[i] == index {
                let r = &mut self.reserved[i];
                if r.left() == 0 && self.want[i] != 0 {
                    *r = sa.outbound.reserve(self.want[i] as u64);
                    self.want[i] = 0;
                }
                return sa.outbound.take(r, len, s.esn, &s.lifetime);
            }
        }
        sa.outbound.next(len, s.esn, &s.lifetime)
    }

    fn settle(&mut self, tables: &crate::tables::IpsecTables) {
        for i in 0..self.n {
            if let Some(sa) = tables.outbound(self.sa[i]) {
                sa.outbound.settle(&mut self.reserved[i]);
            }
        }
        self.n = 0;
    }
}

/// A tunnel-mode SA's outer adjacency and its link's MTU, as the tables give them, and
/// the MTU its packets are sized by: the link's, or the SA's learned path MTU below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OuterHop {
    sa: u32,
    adj: u32,
    link_mtu: Option<u16>,
    mtu: Option<u16>,
}

/// The MTU an SA's packets are sized by: its outer link's, or the path MTU a router
/// reported about its ESP below it (`crate::pmtu`; read once per SA per vector in
/// tunnel mode: one relaxed load, the clock only when one was learned).
#[inline(always)]
fn sized_mtu(sa: &Sa, link_mtu: Option<u16>) -> Option<u16> {
    match sa.outbound.path_mtu() {
        Some(p) => Some(link_mtu.map_or(p, |l| l.min(p))),
        None => link_mtu,
    }
}

/// What the encrypt nodes need of an outbound SA that follows from its spec alone,
/// worked out once when the SA is made (`Sa::new`) rather than per packet: the ESP
/// layout, the block padding's alignment, the bytes the tunnel adds at most (for the
/// inner MTU), the mode and the outer DSCP policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncryptPlan {
    /// The algorithm's layout, with its least alignment.
    pub layout: EspLayout,
    /// [`crate::crypto::Algorithm::block_align`]: the padding used where the link has room.
    pub block_align: usize,
    /// Outer headers (tunnel mode), UDP (ESP in UDP) and the most ESP adds.
    pub overhead: usize,
    pub transport: bool,
    /// The outer family (its `local` address's): the encrypt node of the other family
    /// hands the SA's packets over.
    pub outer_v6: bool,
    /// The SA's inner MTU cap, fragmentation policy and MSS clamping.
    pub mtu: MtuPolicy,
    /// Tunnel mode: the outer traffic class from the inner one (the SA's `dscp`; the
    /// ECN field always the inner packet's).
    pub marking: Marking,
}

impl EncryptPlan {
    pub fn new(spec: &SaSpec) -> EncryptPlan {
        let layout = spec.alg.layout();
        EncryptPlan {
            layout,
            block_align: spec.alg.block_align(),
            overhead: spec.outer_len() + layout.max_overhead(),
            transport: spec.mode == Mode::Transport,
            outer_v6: spec.local.is_ipv6(),
            mtu: spec.mtu,
            marking: Marking::of(spec.dscp),
        }
    }
}

/// Whether packet `b` goes from the SA's `local` to its `remote` address.
#[inline(always)]
fn between_endpoints<O: EspOuter>(spec: &SaSpec, b: &[u8]) -> bool {
    if b.len() < O::HEADER_LEN {
        return false;
    }
    let (src, dst) = O::addrs(b);
    O::from_ip(spec.local) == Some(src) && O::from_ip(spec.remote) == Some(dst)
}

/// Put ESP around `buf[at..]` in place: padding (to a multiple of `align`), trailer and
/// room for the ICV after it; the ESP header and IV inserted at `at`, after `gap` bytes
/// left for a UDP header (the `at` bytes before it move to the front, into the headroom);
/// then seal. Returns the length from the ESP header on.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn seal_at(
    sa: &Sa,
    seq: u64,
    next_header: IpProtocol,
    buf: &mut Buffer,
    at: usize,
    gap: usize,
    align: usize,
    inputs: &AeadInputs,
) -> Result<usize, EspEncryptCounter> {
    let s = &*sa.spec;
    let l = EspLayout { align, ..sa.plan.layout };
    let len = buf.len();
    let pad = l.pad_len(len - at);
    let trailer = EspTrailer { pad_len: pad as u8, next_header };
    buf.set_len(len + trailer.buffer_len() + l.icv_len).map_err(|_| EspEncryptCounter::NoTailroom)?;
    // With the ICV's room after it: the padding goes in with one store (`EspTrailer::emit`).
    trailer.emit(&mut buf.bytes_mut()[len..]);
    let insert = gap + HEADER_LEN + l.iv_len;
    buf.prepend(insert).map_err(|_| EspEncryptCounter::NoHeadroom)?;
    let b = buf.bytes_mut();
    // Tunnel mode (`at` 0) moves nothing: no call into `memmove` for 0 bytes.
    if at > 0 {
        b.copy_within(insert..insert + at, 0);
    }
    EspRepr { spi: s.spi, seq: seq as u32 }.emit(&mut b[at + gap..]);
    sa.transform.seal_with(&mut b[at + gap..], seq, s.esn, inputs);
    Ok(b.len() - at - gap)
}

/// The UDP header of ESP in UDP (RFC 3948) at the start of `udp`, for `esp_len` bytes
/// of ESP after it. Over IPv4 its checksum is 0 (RFC 3948 §2.1); IPv6 has no zero UDP
/// checksum for ESP in UDP (RFC 6935 allows zero for tunnels, but the peer must opt in),
/// so there it is computed, over the pseudo-header of `src` and `dst`.
#[inline(always)]
fn emit_udp<O: EspOuter>(ports: UdpEncapPorts, src: &O::Addr, dst: &O::Addr, udp: &mut [u8]) -> Result<(), EspEncryptCounter> {
    let udp_len = udp.len();
    if udp_len > u16::MAX as usize {
        return Err(EspEncryptCounter::TooBig);
    }
    udp[..2].copy_from_slice(&ports.src.to_be_bytes());
    udp[2..4].copy_from_slice(&ports.dst.to_be_bytes());
    udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
    if O::IS_V6 {
        let sum = ip::outer::udp_checksum(O::pseudo(src, dst), udp);
        udp[6..8].copy_from_slice(&sum.to_be_bytes());
    }
    Ok(())
}

/// Wrap the inner packet (IPv4 when `inner_v4`) in tunnel-mode ESP for `sa` with
/// sequence number `seq`, then UDP if configured, then the outer header, whose traffic
/// class is the inner packet's under the SA's DSCP policy (`ip::outer::tos`); the
/// buffer then starts at the outer header.
#[inline(always)]
pub fn encrypt<O: EspOuter>(sa: &Sa, seq: u64, inner_v4: bool, buf: &mut Buffer) -> Result<(), EspEncryptCounter> {
    let inner_tc = ip::outer::tos::traffic_class(buf.bytes());
    encrypt_padded::<O>(sa, seq, inner_v4, inner_tc, sa.plan.layout.align, buf)
}

/// The nonce and AAD of SA `sa`'s seal of sequence number `seq`, into `out`.
#[inline(always)]
fn write_seal_inputs(sa: &Sa, seq: u64, out: &mut AeadInputs) {
    sa.transform.write_seal_inputs(sa.spec.spi, seq, sa.spec.esn, out);
}

/// [`encrypt`] with the ciphertext padded to a multiple of `align` (at least the
/// algorithm's alignment, and dividing 256), for an inner packet whose traffic class
/// is `inner_tc` (the node has it from `inner_hop`: read once a packet).
#[inline(always)]
pub fn encrypt_padded<O: EspOuter>(
    sa: &Sa,
    seq: u64,
    inner_v4: bool,
    inner_tc: u8,
    align: usize,
    buf: &mut Buffer,
) -> Result<(), EspEncryptCounter> {
    let mut inputs = AeadInputs::default();
    write_seal_inputs(sa, seq, &mut inputs);
    encrypt_tunnel::<O>(sa, seq, inner_v4, inner_tc, align, buf, &inputs)
}

/// [`encrypt_padded`] with the seal's nonce and AAD written before
/// ([`crate::crypto::Transform::write_seal_inputs`]).
#[inline(always)]
fn encrypt_tunnel<O: EspOuter>(
    sa: &Sa,
    seq: u64,
    inner_v4: bool,
    inner_tc: u8,
    align: usize,
    buf: &mut Buffer,
    inputs: &AeadInputs,
) -> Result<(), EspEncryptCounter> {
    let s = &*sa.spec;
    if s.local.is_ipv4() == O::IS_V6 {
        // SaSpec::build keeps both endpoints in one family, and the FIB kind follows it.
        return Err(EspEncryptCounter::NoSa);
    }
    // RFC 4301 §5.1.2.1: the outer DSCP copied from the inner header, or the SA's own;
    // ECN per RFC 6040 (the inner field, copied): one and, one or.
    let tc = sa.plan.marking.apply(inner_tc);
    seal_at(sa, seq, if inner_v4 { IpProtocol::IpIp } else { IpProtocol::Ipv6 }, buf, 0, 0, align, inputs)?;
    if let Some(ports) = s.udp_encap {
        let (Some(src), Some(dst)) = (O::from_ip(s.local), O::from_ip(s.remote)) else {
            return Err(EspEncryptCounter::NoSa);
        };
        buf.prepend(8).map_err(|_| EspEncryptCounter::NoHeadroom)?;
        emit_udp::<O>(ports, &src, &dst, buf.bytes_mut())?;
    }
    let payload_len = buf.len();
    if payload_len + O::HEADER_LEN > u16::MAX as usize + if O::IS_V6 { 40 } else { 0 } {
        return Err(EspEncryptCounter::TooBig);
    }
    let h = buf.prepend(O::HEADER_LEN).map_err(|_| EspEncryptCounter::NoHeadroom)?;
    O::emit_from_template(&sa.outer_header, payload_len, tc, h);
    Ok(())
}

/// Put transport-mode ESP (and UDP if configured) between the packet's IP header and
/// its payload, for `sa` with sequence number `seq`; the header's protocol (next
/// header) and length follow.
#[inline(always)]
pub fn encrypt_transport<O: EspOuter>(sa: &Sa, seq: u64, buf: &mut Buffer) -> Result<(), EspEncryptCounter> {
    encrypt_transport_padded::<O>(sa, seq, sa.plan.layout.align, buf)
}

/// [`encrypt_transport`] with the ciphertext padded to a multiple of `align`.
#[inline(always)]
pub fn encrypt_transport_padded<O: EspOuter>(sa: &Sa, seq: u64, align: usize, buf: &mut Buffer) -> Result<(), EspEncryptCounter> {
    let mut inputs = AeadInputs::default();
    write_seal_inputs(sa, seq, &mut inputs);
    encrypt_transport_with::<O>(sa, seq, align, buf, &inputs)
}

/// [`encrypt_transport_padded`] with the seal's nonce and AAD written before.
#[inline(always)]
fn encrypt_transport_with<O: EspOuter>(
    sa: &Sa,
    seq: u64,
    align: usize,
    buf: &mut Buffer,
    inputs: &AeadInputs,
) -> Result<(), EspEncryptCounter> {
    let (hl, upper) = O::transport_split(buf.bytes())?;
    let (gap, proto) = if sa.spec.udp_encap.is_some() { (8, IpProtocol::Udp) } else { (0, IpProtocol::Esp) };
    let esp_len = seal_at(sa, seq, upper, buf, hl, gap, align, inputs)?;
    if hl + gap + esp_len > u16::MAX as usize + if O::IS_V6 { 40 } else { 0 } {
        return Err(EspEncryptCounter::TooBig);
    }
    let b = buf.bytes_mut();
    if let Some(ports) = sa.spec.udp_encap {
        let (src, dst) = O::addrs(b);
        emit_udp::<O>(ports, &src, &dst, &mut b[hl..])?;
    }
    O::set_upper(b, hl, proto);
    Ok(())
}

/// A whole (non-GSO) packet that is still one IP datagram once `overhead` bytes of ESP
/// are added, so that its ESP packet can be fragmented.
#[inline]
fn fits_one_datagram(buf: &Buffer, overhead: usize) -> bool {
    buf.meta.offload.gso == engine::GsoKind::None && buf.len() + overhead <= u16::MAX as usize
}

impl<Cx: HasIpsec, O: EspOuter> Node<Cx> for EspEncrypt<O> {
    type Next = EspEncryptNext;
    type Counter = EspEncryptCounter;

    fn name(&self) -> &'static str {
        O::ENCRYPT
    }

    fn prepare(&mut self, cx: &mut Cx, pool: &mut engine::Pool, input: &[engine::BufIdx]) {
        self.outer = None;
        if self.seqs.n != 0 {
            // A vector that ended without `end_of_vector` (none does): nothing is lost.
            self.seqs.settle(&cx.split_ipsec().1.tables);
        }
        // Counted a run of one SA's packets at a time (most vectors are one run): a
        // memory increment a packet chained each count on the last one's store.
        let (mut sa, mut run) = (0, 0);
        for &bi in input {
            let p = pool.get(bi).meta.param;
            if p != sa || run == 0 {
                if run != 0 {
                    self.seqs.count(sa, run);
                }
                (sa, run) = (p, 0);
            }
            run += 1;
        }
        if run != 0 {
            self.seqs.count(sa, run);
        }
    }

    fn end_of_vector(&mut self, cx: &mut Cx) {
        self.seqs.settle(&cx.split_ipsec().1.tables);
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use EspEncryptCounter as C;
        let (ipc, x) = cx.split_ipsec();
        let index = buf.meta.param;
        let Some(sa) = x.tables.outbound(index) else {
            return Verdict::Drop(C::NoSa);
        };
        if sa.plan.outer_v6 != O::IS_V6 {
            // Routes reach the node of the SA's outer family; an SPD policy, the node of
            // the packet's. Handed over before anything is counted against the SA.
            if sa.plan.transport {
                return Verdict::Drop(C::TransportFamily);
            }
            counts.inc(C::ToOuterFamily);
            return Verdict::Next(if O::IS_V6 { EspEncryptNext::Esp4Encrypt } else { EspEncryptNext::Esp6Encrypt });
        }
        // Transport mode protects the gateway's own packets to the peer (RFC 4301 §4.1):
        // ESP on another's packet, under its own addresses, would reach no SA.
        if sa.plan.transport && !between_endpoints::<O>(&sa.spec, buf.bytes()) {
            return Verdict::Drop(C::TransportNotEndpoints);
        }
        // Tunnel mode: the outer packet leaves by the SA's own adjacency. Transport
        // mode: the packet keeps its header, so it leaves where its lookup sent it.
        let plan = &sa.plan;
        let transport = plan.transport;
        let (adj, link_mtu, mtu) = match self.outer {
            _ if transport => {
                let link_mtu = ipc.tables.adjacency(buf.meta.adj).mtu();
                (buf.meta.adj, link_mtu, sized_mtu(sa, link_mtu))
            }
            Some(h) if h.sa == index => (h.adj, h.link_mtu, h.mtu),
            _ => {
                let adj = x.tables.outer_adj(index);
                let link_mtu = ipc.tables.adjacency(adj).mtu();
                let mtu = sized_mtu(sa, link_mtu);
                self.outer = Some(OuterHop { sa: index, adj, link_mtu, mtu });
                (adj, link_mtu, mtu)
            }
        };
        // The inner MTU leaves room for the most padding the cipher may need.
        let overhead = plan.overhead;
        let fragment_outer = match encap_mtu(buf, mtu, overhead, plan.mtu) {
            EncapMtu::Encap { fragment_outer, .. } => fragment_outer,
            // Transport mode carries the gateway's own packets (a tunnel's outer ones that
            // it leaves to be fragmented, say): ESP goes on whole datagrams only (RFC 4303
            // §3.3.4), so one too big is sealed whole and the ESP packet fragmented, as
            // their source may; a frag-needed would go to the gateway itself.
            EncapMtu::TooBig { .. } | EncapMtu::FragmentInner if transport && fits_one_datagram(buf, overhead) => mtu,
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
        // The forwarding hop: the inner packet's in tunnel mode (the outer packet is
        // ours); in transport mode `ipN-rewrite` takes it, as for any forwarded packet.
        let (inner_v4, inner_tc) = match transport {
            true => (!O::IS_V6, 0),
            false => match inner_hop(buf.bytes_mut()) {
                InnerHop::Forwarded { v4, tc } => (v4, tc),
                InnerHop::Expired { v4, icmp } => {
                    counts.inc(C::InnerTtlExpired);
                    buf.meta.param = icmp.encode();
                    return Verdict::Next(if v4 { EspEncryptNext::Ip4IcmpError } else { EspEncryptNext::Ip6IcmpError });
                }
                InnerHop::NotIp => return Verdict::Drop(C::BadInner),
            },
        };
        // Nothing can complete a checksum inside ciphertext: do it now.
        if ChecksumMode::Software.settle_inner_checksum(buf) {
            counts.inc(C::InnerChecksumCompleted);
        }
        let seq = match self.seqs.take(index, sa, buf.len() as u64) {
            Ok((seq, age)) => {
                write_seal_inputs(sa, seq, &mut self.seal);
                if age == Age::SoftReached {
                    counts.inc(C::SoftLifetime);
                }
                seq
            }
            Err(SeqError::Overflow) => return Verdict::Drop(C::SeqOverflow),
            Err(SeqError::Expired) => return Verdict::Drop(C::LifetimeExpired),
        };
        // Padded to the cipher's blocks where that still fits the link (so the tunnel MTU
        // stays what the least padding allows): see `Algorithm::block_align`.
        let (block, least) = (plan.block_align, plan.layout.align);
        let align = match mtu {
            Some(m) if buf.len() + overhead + block - least <= m as usize => block,
            _ => least,
        };
        let sealed = if transport {
            encrypt_transport_with::<O>(sa, seq, align, buf, &self.seal)
        } else {
            encrypt_tunnel::<O>(sa, seq, inner_v4, inner_tc, align, buf, &self.seal)
        };
        if let Err(c) = sealed {
            return Verdict::Drop(c);
        }
        counts.inc(C::Encrypted);
        buf.meta.adj = adj;
        if fragment_outer.is_some() && ip::outer::fragment_outer(buf, fragment_outer) {
            counts.inc(C::FragmentOuter);
            return Verdict::Next(if O::IS_V6 { EspEncryptNext::Ip6Fragment } else { EspEncryptNext::Ip4Fragment });
        }
        if !transport && ip::nodes::family::send_originated::<O::Ip>(&ipc.tables, buf, adj) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Algorithm;
    use crate::sa::{Direction, Lifetime, UdpEncapPorts};

    fn spec(alg: Algorithm, mode: Mode, local: &str, udp: bool) -> SaSpec {
        let v4 = !local.contains(':');
        SaSpec {
            spi: 0x1000,
            direction: Direction::Outbound,
            mode,
            alg,
            enc_key: vec![],
            integ_key: vec![],
            esn: false,
            anti_replay: false,
            lifetime: Lifetime::default(),
            local: local.parse().unwrap(),
            remote: if v4 { "198.18.0.2" } else { "2001:db8::2" }.parse().unwrap(),
            udp_encap: udp.then(UdpEncapPorts::default),
            urpf: ip::urpf::Urpf::Off,
            mtu: MtuPolicy::default(),
            dscp: Default::default(),
        }
    }

    /// The padding the node writes, for every algorithm, both alignments it chooses from
    /// and every payload length up to past a jumbo's worth of blocks, against the plain
    /// formula of RFC 4303 §2.4: payload, padding and trailer a multiple of the alignment,
    /// with the least padding that does it.
    #[test]
    fn padding_for_every_algorithm_and_length() {
        for alg in Algorithm::ALL {
            let plan = EncryptPlan::new(&spec(alg, Mode::Tunnel, "198.18.0.1", false));
            for align in [plan.layout.align, plan.block_align] {
                let l = EspLayout { align, ..plan.layout };
                for len in 0..2_100 {
                    let pad = l.pad_len(len);
                    assert_eq!(pad, (align - (len + 2) % align) % align, "{alg} align {align} len {len}");
                    assert_eq!((len + pad + 2) % align, 0);
                    assert!(pad < align && pad <= 255);
                }
            }
        }
    }

    /// The plan holds what the spec's own methods say, for each mode, family and ESP in UDP.
    #[test]
    fn plan_follows_the_spec() {
        for alg in Algorithm::ALL {
            for mode in [Mode::Tunnel, Mode::Transport] {
                for local in ["198.18.0.1", "2001:db8::1"] {
                    for udp in [false, true] {
                        let s = spec(alg, mode, local, udp);
                        let p = EncryptPlan::new(&s);
                        assert_eq!(p.layout, alg.layout());
                        assert_eq!(p.block_align, alg.block_align());
                        assert_eq!(p.overhead, s.outer_len() + alg.layout().max_overhead());
                        assert_eq!(p.transport, mode == Mode::Transport);
                        assert_eq!(p.marking, Marking::INHERIT);
                    }
                }
            }
        }
        // Spot values: tunnel over IPv4 in UDP, AES-GCM: 20 + 8 + 8 + 8 + 3 + 2 + 16.
        let p = EncryptPlan::new(&spec(Algorithm::AesGcm128, Mode::Tunnel, "198.18.0.1", true));
        assert_eq!(p.overhead, 65);
    }
}
