//! `esp4-encrypt` / `esp6-encrypt`: ESP for the packet at the buffer start, with
//! outbound SA `meta.param`; optionally in UDP (RFC 3948). Tunnel mode wraps the whole
//! packet behind a new outer header; transport mode puts ESP between the packet's own
//! IP header and its payload (the header moves forward into the headroom).
//!
//! In place: the trailer goes into the tailroom, the ESP header and IV, UDP and the
//! outer IP header into the headroom, and the payload is encrypted where it lies.

use super::EspOuter;
use crate::context::{HasIpsec, IpsecContext};
use crate::sa::{Age, Mode, Sa, SaSpec, SeqError, UdpEncapPorts};
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Node, Pool, Verdict, VECTOR_SIZE};
use ip::outer::{encap_mtu, inner_hop, ChecksumMode, EncapMtu, InnerHop, MtuPolicy};
use ip::IpContext;
use wire::esp::{EspLayout, EspRepr, EspTrailer, HEADER_LEN};
use wire::IpProtocol;

next_nodes! {
    pub enum EspEncryptNext {
        Output = "interface-output", Ip4Rewrite = "ip4-rewrite", Ip4Lookup = "ip4-lookup",
        Ip6Rewrite = "ip6-rewrite", Ip6Lookup = "ip6-lookup",
        Ip4IcmpError = "ip4-icmp-error", Ip6IcmpError = "ip6-icmp-error",
        Segment = "ip-gso-segment", Ip4Fragment = "ip4-fragment", Ip6Fragment = "ip6-fragment",
    }
}

counters! {
    pub enum EspEncryptCounter {
        Encrypted(Info, "encrypted", "packets encrypted"),
        SoftLifetime(Warn, "soft-lifetime", "an SA passed a soft lifetime (packets or bytes): time to rekey"),
        NoSa(Error, "no-sa", "no outbound SA at the index the route or policy named"),
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

/// The node works on a whole vector in [`Node::prepare`], in three passes: the checks
/// before the sequence number (SA, MTU, inner hop) for every packet; then, per run of
/// packets of one SA, the run's numbers taken at once ([`crate::sa::Outbound::reserve`])
/// and each packet written but for its cipher (trailer, ESP header, outer headers),
/// noting what is left ([`PendingSeal`]); then the seals. `process` hands out the
/// verdicts in order. VPP's `esp4-encrypt` works the same way (its crypto ops run after
/// the frame's packets are written). Why: a locked instruction per packet (the counter's
/// `lock xadd`) waits for every store before it to reach the cache, and so does
/// intel-ipsec-mb's masked load of a nonce or AAD written just before (it cannot be
/// forwarded from the store buffer); packet by packet, each packet waited for the last
/// one's stores. A traced vector (`prepare_traced`) is done packet by packet in
/// `process`, as before.
pub struct EspEncrypt<O: EspOuter> {
    /// The vector's verdicts, in its order.
    verdicts: Vec<Verdict<EspEncryptNext, EspEncryptCounter>>,
    /// The next verdict `process` hands out.
    at: usize,
    /// The packets the checks let through, with what they found (by place in the vector).
    checked: Vec<(u16, Checked)>,
    /// The last pass's work.
    seals: Vec<PendingSeal>,
    /// Counters the first pass incremented, added to the node's by the vector's first
    /// `process` (only `process` holds the node's counters).
    tally: Tally,
    _outer: std::marker::PhantomData<O>,
}

impl<O: EspOuter> Default for EspEncrypt<O> {
    fn default() -> Self {
        EspEncrypt {
            verdicts: Vec::with_capacity(VECTOR_SIZE),
            at: 0,
            checked: Vec::with_capacity(VECTOR_SIZE),
            seals: Vec::with_capacity(VECTOR_SIZE),
            tally: Tally::default(),
            _outer: std::marker::PhantomData,
        }
    }
}

/// A packet written whole but for its cipher: [`Transform::seal_finish`] is left to do,
/// over the last `esp_len` bytes of buffer `buf` (nothing after the seal moves the
/// packet's end).
///
/// [`Transform::seal_finish`]: crate::crypto::Transform::seal_finish
#[derive(Debug, Clone, Copy)]
struct PendingSeal {
    buf: BufIdx,
    /// Its place in the vector (its verdict's).
    at: u16,
    sa: u32,
    esp_len: u32,
    seq: u64,
    nonce: [u8; 12],
}

/// What [`seal_at`] left for later: the ESP's length from its header on, and the nonce
/// when the cipher is still to run.
struct Sealed {
    esp_len: usize,
    nonce: Option<[u8; 12]>,
}

/// Where the packet path counts: the node's counters, or the first pass's tally.
trait Count {
    fn inc(&mut self, c: EspEncryptCounter);
}

impl Count for Counts<'_, EspEncryptCounter> {
    #[inline(always)]
    fn inc(&mut self, c: EspEncryptCounter) {
        Counts::inc(self, c)
    }
}

/// Counters incremented before the node's counters are at hand: `encrypted` as a sum
/// (every packet), the rare others one by one.
#[derive(Debug, Default)]
struct Tally {
    encrypted: u64,
    others: Vec<EspEncryptCounter>,
}

impl Count for Tally {
    #[inline(always)]
    fn inc(&mut self, c: EspEncryptCounter) {
        match c {
            EspEncryptCounter::Encrypted => self.encrypted += 1,
            _ => self.others.push(c),
        }
    }
}

impl Tally {
    fn flush(&mut self, counts: &mut Counts<'_, EspEncryptCounter>) {
        if self.encrypted > 0 {
            counts.add(EspEncryptCounter::Encrypted, self.encrypted);
            self.encrypted = 0;
        }
        for c in self.others.drain(..) {
            counts.inc(c);
        }
    }
}

/// What the encrypt nodes need of an outbound SA that follows from its spec alone,
/// worked out once when the SA is made (`Sa::new`) rather than per packet: the ESP
/// layout, the block padding's alignment, the bytes the tunnel adds at most (for the
/// inner MTU) and the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncryptPlan {
    /// The algorithm's layout, with its least alignment.
    pub layout: EspLayout,
    /// [`crate::crypto::Algorithm::block_align`]: the padding used where the link has room.
    pub block_align: usize,
    /// Outer headers (tunnel mode), UDP (ESP in UDP) and the most ESP adds.
    pub overhead: usize,
    pub transport: bool,
}

impl EncryptPlan {
    pub fn new(spec: &SaSpec) -> EncryptPlan {
        let layout = spec.alg.layout();
        EncryptPlan {
            layout,
            block_align: spec.alg.block_align(),
            overhead: spec.outer_len() + layout.max_overhead(),
            transport: spec.mode == Mode::Transport,
        }
    }
}

/// Put ESP around `buf[at..]` in place: padding (to a multiple of `align`), trailer and
/// room for the ICV after it; the ESP header and IV inserted at `at`, after `gap` bytes
/// left for a UDP header (the `at` bytes before it move to the front, into the headroom);
/// then seal, or with `defer` start the seal and leave the cipher to the caller
/// ([`crate::crypto::Transform::seal_begin`]).
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
    defer: bool,
) -> Result<Sealed, EspEncryptCounter> {
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
    let esp = &mut b[at + gap..];
    EspRepr { spi: s.spi, seq: seq as u32 }.emit(esp);
    let nonce = match defer {
        true => sa.transform.seal_begin(esp, seq, s.esn),
        false => {
            sa.transform.seal(esp, seq, s.esn);
            None
        }
    };
    Ok(Sealed { esp_len: esp.len(), nonce })
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
/// sequence number `seq`, then UDP if configured, then the outer header; the buffer
/// then starts at the outer header.
#[inline(always)]
pub fn encrypt<O: EspOuter>(sa: &Sa, seq: u64, inner_v4: bool, buf: &mut Buffer) -> Result<(), EspEncryptCounter> {
    encrypt_padded::<O>(sa, seq, inner_v4, sa.plan.layout.align, buf)
}

/// [`encrypt`] with the ciphertext padded to a multiple of `align` (at least the
/// algorithm's alignment, and dividing 256).
#[inline(always)]
pub fn encrypt_padded<O: EspOuter>(sa: &Sa, seq: u64, inner_v4: bool, align: usize, buf: &mut Buffer) -> Result<(), EspEncryptCounter> {
    encrypt_tunnel::<O>(sa, seq, inner_v4, align, buf, false).map(|_| ())
}

/// [`encrypt_padded`], with `defer` leaving the cipher to the caller where nothing after
/// it needs the ciphertext (not for ESP in UDP over IPv6, whose UDP checksum covers it).
#[inline(always)]
fn encrypt_tunnel<O: EspOuter>(
    sa: &Sa,
    seq: u64,
    inner_v4: bool,
    align: usize,
    buf: &mut Buffer,
    defer: bool,
) -> Result<Sealed, EspEncryptCounter> {
    let s = &*sa.spec;
    if s.local.is_ipv4() == O::IS_V6 {
        // SaSpec::build keeps both endpoints in one family, and the FIB kind follows it.
        return Err(EspEncryptCounter::NoSa);
    }
    let defer = defer && !(O::IS_V6 && s.udp_encap.is_some());
    let sealed = seal_at(sa, seq, if inner_v4 { IpProtocol::IpIp } else { IpProtocol::Ipv6 }, buf, 0, 0, align, defer)?;
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
    O::emit_from_template(&sa.outer_header, payload_len, h);
    Ok(sealed)
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
    encrypt_transport_staged::<O>(sa, seq, align, buf, false).map(|_| ())
}

/// [`encrypt_transport_padded`], with `defer` as for [`encrypt_tunnel`].
#[inline(always)]
fn encrypt_transport_staged<O: EspOuter>(
    sa: &Sa,
    seq: u64,
    align: usize,
    buf: &mut Buffer,
    defer: bool,
) -> Result<Sealed, EspEncryptCounter> {
    let (hl, upper) = O::transport_split(buf.bytes())?;
    let (gap, proto) = if sa.spec.udp_encap.is_some() { (8, IpProtocol::Udp) } else { (0, IpProtocol::Esp) };
    let defer = defer && !(O::IS_V6 && gap > 0);
    let sealed = seal_at(sa, seq, upper, buf, hl, gap, align, defer)?;
    let esp_len = sealed.esp_len;
    if hl + gap + esp_len > u16::MAX as usize + if O::IS_V6 { 40 } else { 0 } {
        return Err(EspEncryptCounter::TooBig);
    }
    let b = buf.bytes_mut();
    if let Some(ports) = sa.spec.udp_encap {
        let (src, dst) = O::addrs(b);
        emit_udp::<O>(ports, &src, &dst, &mut b[hl..])?;
    }
    O::set_upper(b, hl, proto);
    Ok(sealed)
}

/// One packet through the node, packet by packet (a traced vector).
#[inline(always)]
fn encrypt_one<O: EspOuter>(
    ipc: &IpContext,
    x: &IpsecContext,
    counts: &mut Counts<'_, EspEncryptCounter>,
    buf: &mut Buffer,
) -> Verdict<EspEncryptNext, EspEncryptCounter> {
    let r = match check_one::<O>(ipc, x, counts, buf) {
        Ok(r) => r,
        Err(v) => return v,
    };
    let Some(sa) = x.tables.outbound(r.index) else {
        return Verdict::Drop(EspEncryptCounter::NoSa);
    };
    let next = sa.outbound.next(buf.len() as u64, sa.spec.esn, &sa.spec.lifetime);
    finish_one::<O>(ipc, sa, counts, buf, &r, next, None)
}

/// What the checks before the sequence number found for a packet that goes on.
#[derive(Debug, Clone, Copy)]
struct Checked {
    index: u32,
    adj: u32,
    link_mtu: Option<u16>,
    fragment_outer: Option<u16>,
    inner_v4: bool,
}

/// The node up to the sequence number: the SA, the MTU, the inner hop and checksum.
/// Err: the packet's verdict (it goes no further here).
#[inline(always)]
fn check_one<O: EspOuter>(
    ipc: &IpContext,
    x: &IpsecContext,
    counts: &mut impl Count,
    buf: &mut Buffer,
) -> Result<Checked, Verdict<EspEncryptNext, EspEncryptCounter>> {
    use EspEncryptCounter as C;
    let index = buf.meta.param;
    let Some(sa) = x.tables.outbound(index) else {
        return Err(Verdict::Drop(C::NoSa));
    };
    // Tunnel mode: the outer packet leaves by the SA's own adjacency. Transport
    // mode: the packet keeps its header, so it leaves where its lookup sent it.
    let plan = &sa.plan;
    let transport = plan.transport;
    let adj = if transport { buf.meta.adj } else { x.tables.outer_adj(index) };
    let link_mtu = ipc.tables.adjacency(adj).mtu();
    // The inner MTU leaves room for the most padding the cipher may need.
    let overhead = plan.overhead;
    let fragment_outer = match encap_mtu(buf, link_mtu, overhead, MtuPolicy::default()) {
        EncapMtu::Encap { fragment_outer, .. } => fragment_outer,
        EncapMtu::TooBig { v4 } => {
            counts.inc(C::InnerTooBig);
            return Err(Verdict::Next(if v4 { EspEncryptNext::Ip4IcmpError } else { EspEncryptNext::Ip6IcmpError }));
        }
        EncapMtu::FragmentInner => {
            counts.inc(C::FragmentInner);
            return Err(Verdict::Next(EspEncryptNext::Ip4Fragment));
        }
        EncapMtu::Segment => {
            counts.inc(C::GsoSegmented);
            return Err(Verdict::Next(EspEncryptNext::Segment));
        }
    };
    // The forwarding hop: the inner packet's in tunnel mode (the outer packet is
    // ours); in transport mode `ipN-rewrite` takes it, as for any forwarded packet.
    let inner_v4 = match transport {
        true => !O::IS_V6,
        false => match inner_hop(buf.bytes_mut()) {
            InnerHop::Forwarded { v4 } => v4,
            InnerHop::Expired { v4, icmp } => {
                counts.inc(C::InnerTtlExpired);
                buf.meta.param = icmp.encode();
                return Err(Verdict::Next(if v4 { EspEncryptNext::Ip4IcmpError } else { EspEncryptNext::Ip6IcmpError }));
            }
            InnerHop::NotIp => return Err(Verdict::Drop(C::BadInner)),
        },
    };
    // Nothing can complete a checksum inside ciphertext: do it now.
    if ChecksumMode::Software.settle_inner_checksum(buf) {
        counts.inc(C::InnerChecksumCompleted);
    }
    Ok(Checked { index, adj, link_mtu, fragment_outer, inner_v4 })
}

/// The node from the sequence number on (`next`: what the SA's counter gave): the
/// padding, ESP, the outer headers and where the packet goes. With `later` (the first
/// pass over a vector) a seal that can wait is only started, and what it needs left
/// there (SA index, ESP length, sequence number, nonce).
#[inline(always)]
fn finish_one<O: EspOuter>(
    ipc: &IpContext,
    sa: &Sa,
    counts: &mut impl Count,
    buf: &mut Buffer,
    r: &Checked,
    next: Result<(u64, Age), SeqError>,
    later: Option<&mut Option<(u32, usize, u64, [u8; 12])>>,
) -> Verdict<EspEncryptNext, EspEncryptCounter> {
    use EspEncryptCounter as C;
    let Checked { index, adj, link_mtu, fragment_outer, inner_v4 } = *r;
    let plan = &sa.plan;
    let (transport, overhead) = (plan.transport, plan.overhead);
    let seq = match next {
        Ok((seq, age)) => {
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
    let align = match link_mtu {
        Some(m) if buf.len() + overhead + block - least <= m as usize => block,
        _ => least,
    };
    let defer = later.is_some();
    let sealed = match transport {
        true => encrypt_transport_staged::<O>(sa, seq, align, buf, defer),
        false => encrypt_tunnel::<O>(sa, seq, inner_v4, align, buf, defer),
    };
    match sealed {
        Ok(Sealed { esp_len, nonce: Some(nonce) }) => {
            if let Some(l) = later {
                *l = Some((index, esp_len, seq, nonce));
            }
        }
        Ok(_) => {}
        Err(c) => return Verdict::Drop(c),
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

/// How many packets the node's passes take at a time: few enough that the lines the first
/// pass touched (each packet's `Buffer`, headroom, first and trailer lines) are still in
/// L1 for the others; a whole vector's are not.
const PASS_BATCH: usize = 32;

impl<O: EspOuter> EspEncrypt<O> {
    /// The three passes over the packets `batch` of `input`; their verdicts are pushed.
    fn passes(&mut self, ipc: &IpContext, x: &IpsecContext, pool: &mut Pool, input: &[BufIdx], batch: std::ops::Range<usize>) {
        self.checked.clear();
        self.seals.clear();
        // The checks before the sequence number, every packet.
        for (at, &bi) in input[batch.clone()].iter().enumerate().map(|(i, b)| (batch.start + i, b)) {
            match check_one::<O>(ipc, x, &mut self.tally, pool.get_mut(bi)) {
                Ok(r) => {
                    self.checked.push((at as u16, r));
                    // Its verdict is the second pass's.
                    self.verdicts.push(Verdict::Drop(EspEncryptCounter::NoSa));
                }
                Err(v) => self.verdicts.push(v),
            }
        }
        // Runs of packets of one SA: their numbers at once, then each packet written.
        let mut i = 0;
        while let Some(&(_, first)) = self.checked.get(i) {
            let run = self.checked[i..].iter().take_while(|(_, r)| r.index == first.index).count();
            let Some(sa) = x.tables.outbound(first.index) else {
                i += run;
                continue;
            };
            let (esn, life) = (sa.spec.esn, &sa.spec.lifetime);
            let mut numbers = (!life.counts_bytes()).then(|| sa.outbound.reserve(run as u64, esn));
            for &(at, r) in &self.checked[i..i + run] {
                let bi = input[at as usize];
                let buf = pool.get_mut(bi);
                let len = buf.len() as u64;
                let next = match &mut numbers {
                    Some(n) => n.take(&sa.outbound, len, life),
                    None => sa.outbound.next(len, esn, life),
                };
                let mut later = None;
                let verdict = finish_one::<O>(ipc, sa, &mut self.tally, buf, &r, next, Some(&mut later));
                if let Some((sa, esp_len, seq, nonce)) = later {
                    self.seals.push(PendingSeal { buf: bi, at, sa, esp_len: esp_len as u32, seq, nonce });
                }
                self.verdicts[at as usize] = verdict;
            }
            if let Some(n) = numbers {
                n.finish(&sa.outbound);
            }
            i += run;
        }
        // The seals.
        for p in &self.seals {
            let esp = pool.get_mut(p.buf).bytes_mut();
            let from = esp.len().wrapping_sub(p.esp_len as usize);
            // The SA is the one the first pass found, in the same tables: this cannot
            // miss, but were it to, the packet is dropped rather than sent unsealed.
            match (x.tables.outbound(p.sa), esp.get_mut(from..)) {
                (Some(sa), Some(esp)) => sa.transform.seal_finish(esp, p.seq, sa.spec.esn, &p.nonce),
                _ => {
                    if let Some(v) = self.verdicts.get_mut(p.at as usize) {
                        *v = Verdict::Drop(EspEncryptCounter::NoSa);
                    }
                }
            }
        }
    }
}

impl<Cx: HasIpsec, O: EspOuter> Node<Cx> for EspEncrypt<O> {
    type Next = EspEncryptNext;
    type Counter = EspEncryptCounter;

    fn name(&self) -> &'static str {
        O::ENCRYPT
    }

    /// The vector's passes (see [`EspEncrypt`]), over [`PASS_BATCH`] packets at a time.
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        let (ipc, x) = cx.split_ipsec();
        self.verdicts.clear();
        self.at = 0;
        for from in (0..input.len()).step_by(PASS_BATCH) {
            self.passes(ipc, x, pool, input, from..input.len().min(from + PASS_BATCH));
        }
    }

    /// A traced vector goes packet by packet through `process`, so that each packet's
    /// trace line shows it as it came.
    fn prepare_traced(&mut self, _cx: &mut Cx, _pool: &mut Pool, _input: &[BufIdx]) {
        self.verdicts.clear();
        self.at = 0;
    }

    fn end_of_vector(&mut self, _cx: &mut Cx) {
        self.verdicts.clear();
        self.at = 0;
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        if let Some(&verdict) = self.verdicts.get(self.at) {
            if self.at == 0 {
                self.tally.flush(counts);
            }
            self.at += 1;
            return verdict;
        }
        let (ipc, x) = cx.split_ipsec();
        encrypt_one::<O>(ipc, x, counts, buf)
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
                    }
                }
            }
        }
        // Spot values: tunnel over IPv4 in UDP, AES-GCM: 20 + 8 + 8 + 8 + 3 + 2 + 16.
        let p = EncryptPlan::new(&spec(Algorithm::AesGcm128, Mode::Tunnel, "198.18.0.1", true));
        assert_eq!(p.overhead, 65);
    }
}
