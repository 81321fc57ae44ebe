//! `parcel4-input` / `parcel6-input`: check a parcel's headers (layout, IPv4 header
//! checksum; the UDP header checksum where it is split), count it and its segments, and choose: forward it
//! whole when the route's egress interface takes parcels and its MTU the whole parcel,
//! else split it. Segments are read only where the crate's docs say (the edge).
//! The common case, forwarded whole, is mostly decided before a parcel gets here:
//! `ethernet-input` takes it by the same function ([`ip::parcel::forward_whole`]), so
//! this node sees the rest, traced parcels, parcels from `ipN-input` (a tunnel's inner
//! parcel) and every parcel in the strict mode.

use super::ParcelFamily;
use crate::context::HasParcel;
use engine::{counters, BufIdx, Buffer, Counts, Enqueue, Node, Pool, Verdict};
use ip::nodes::family::rewrite_fast;
use ip::parcel::{forward_whole, next_hop, takes_whole, Whole};
use ip::tables::{TunnelKind, TunnelRef};
use wire::parcel::ParcelError;

counters! {
    pub enum ParcelInputCounter {
        Parcels(Info, "parcels", "parcels received"),
        Segments(Info, "segments", "segments in the parcels received"),
        Whole(Info, "forwarded-whole", "parcels forwarded whole (egress takes parcels, within its MTU)"),
        ToGso(Info, "to-gso-frame", "parcels sent on as one UDP GSO frame (egress exchanges virtio-net headers): its kernel segments it or hands it whole to a UDP_GRO socket"),
        ToTunnel(Info, "to-tunnel", "parcels routed into a UDP tunnel, carried whole (the tunnel fragments its outer packets or has the parcel split, by its fragment policy)"),
        ToSplit(Info, "to-split", "parcels sent to be split into UDP datagrams"),
        BadSegment(Warn, "bad-segment-checksum", "segments whose checksum does not match their slot, found here (every hop with verify_parcel_segments_in_transit; before a GSO frame): the segment is dropped when split"),
        Truncated(Warn, "truncated", "shorter than the parcel's IP and UDP headers"),
        NotParcel(Warn, "not-udp-parcel", "version, header length or protocol not a UDP parcel's"),
        BadOption(Warn, "bad-option", "parcel option malformed (IPv4 0x0b length not 6 or 20, IPv6 jumbo option length not 4)"),
        BadHeaderChecksum(Warn, "bad-header-checksum", "IPv4 header checksum mismatch"),
        NoSegments(Warn, "no-segments", "NSegs is 0"),
        NoSegmentLength(Warn, "no-segment-length", "segment length (IPv4 Total Length, IPv6 Payload Length) is 0"),
        BadUdpLength(Warn, "bad-udp-length", "UDP length is not 0"),
        IntegrityTruncated(Warn, "integrity-truncated", "jumbo length or packet too short for the integrity block"),
        SegmentTruncated(Warn, "segment-truncated", "packet shorter than its jumbo length: a segment is shorter than declared"),
        LengthMismatch(Warn, "length-mismatch", "jumbo length exceeds the headers plus NSegs x segment length"),
        ShortNonFinal(Warn, "short-non-final-segment", "segments end before the last one begins"),
        BadUdpChecksum(Warn, "bad-udp-checksum", "parcel UDP header checksum mismatch (neither form), checked where the parcel is split or made a GSO frame (forwarded whole, its receiver checks it)"),
        BadSource(Warn, "bad-source", "source address is multicast or broadcast"),
    }
}

pub fn counter(e: ParcelError) -> ParcelInputCounter {
    use ParcelInputCounter as C;
    match e {
        ParcelError::Truncated => C::Truncated,
        ParcelError::NotParcel => C::NotParcel,
        ParcelError::BadOption => C::BadOption,
        ParcelError::BadHeaderChecksum => C::BadHeaderChecksum,
        ParcelError::NoSegments => C::NoSegments,
        ParcelError::NoSegmentLength => C::NoSegmentLength,
        ParcelError::BadUdpLength => C::BadUdpLength,
        ParcelError::IntegrityTruncated => C::IntegrityTruncated,
        ParcelError::SegmentTruncated => C::SegmentTruncated,
        ParcelError::LengthMismatch => C::LengthMismatch,
        ParcelError::ShortNonFinalSegment => C::ShortNonFinal,
    }
}

/// `meta.param` bit from this node to `parcelN-split`: the split checks each segment
/// against its slot as it copies it (this node did not read them, or found a bad one);
/// otherwise it trusts the slots.
pub const PARAM_CHECK_SEGMENTS: u32 = 1;
/// `meta.param` bit: `meta.adj` is a next hop (a rewrite or glean adjacency), so the
/// split's datagrams, all to the parcel's destination, skip `ipN-lookup`.
pub const PARAM_NEXT_HOP: u32 = 2;
/// `meta.param` bit: this node sent the parcel and checked its UDP header checksum (the
/// other bits say the rest). A parcel reaching the split another way (`ipN-fragment`,
/// a tunnel's inner packet, with `meta.param` 0) has the split do the edge's checks.
pub const PARAM_FROM_INPUT: u32 = 4;

pub struct ParcelInput<F>(std::marker::PhantomData<F>);

impl<F> Default for ParcelInput<F> {
    fn default() -> Self {
        ParcelInput(std::marker::PhantomData)
    }
}

/// The number of segments whose checksum does not match a non-zero slot.
pub fn bad_segments(b: &[u8], s: &super::Shape) -> usize {
    (0..s.nsegs)
        .filter(|&i| {
            let at = s.udp_at + 8 + 2 * i;
            let slot = u16::from_be_bytes([b[at], b[at + 1]]);
            slot != 0 && slot != wire::parcel::segment_checksum(&b[s.segment(i)])
        })
        .count()
}

/// The route `adj` leads into a UDP tunnel (GUE, GRE-in-UDP, IP-in-UDP).
fn into_udp_tunnel(adj: u32) -> bool {
    TunnelRef::decode(adj).is_some_and(|t| matches!(t.kind, TunnelKind::Gue4 | TunnelKind::Gue6))
}

impl<Cx: HasParcel, F: ParcelFamily> Node<Cx> for ParcelInput<F> {
    type Next = F::InputNext;
    type Counter = ParcelInputCounter;

    fn name(&self) -> &'static str {
        F::INPUT
    }

    /// The vector in one loop: the parcels forwarded whole ([`forward_whole`]: those from
    /// `ipN-input`; `ethernet-input` forwards the others itself) pushed on and counted
    /// once a vector; every other packet through `process`, in order.
    const RUNS_VECTORS: bool = true;

    fn run_vector(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx], out: &mut Enqueue<'_, Self::Next, Self::Counter>) {
        use ParcelInputCounter as C;
        let in_transit = cx.split_parcel().1.reads_segments_in_transit();
        let bufs = pool.buffers_mut();
        let (mut whole, mut segments) = (0u64, 0u64);
        for &bi in input {
            let b = &mut bufs[bi.get()];
            let fast = if in_transit { Whole::Refused } else { forward_whole::<F>(&cx.split_parcel().0.tables, b) };
            let v = match fast {
                Whole::Forwarded { nsegs, rewritten } => {
                    whole += 1;
                    segments += nsegs as u64;
                    Verdict::Next(Self::whole_next(rewritten))
                }
                Whole::Looked(s, adj) => Self::decide(cx, &mut out.counts(), b, s, adj),
                Whole::Refused => self.process(cx, &mut out.counts(), b),
            };
            out.push(bi, b, v);
        }
        let mut counts = out.counts();
        counts.add(C::Parcels, whole);
        counts.add(C::Segments, segments);
        counts.add(C::Whole, whole);
    }

    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use ParcelInputCounter as C;
        let b = buf.bytes();
        let s = match F::check(b) {
            Ok(s) => s,
            Err(e) => return Verdict::Drop(counter(e)),
        };
        if F::bad_source(b) {
            return Verdict::Drop(C::BadSource);
        }
        let adj = F::fib(&cx.split_parcel().0.tables).lookup(F::key(&b[F::DST_AT..]));
        Self::decide(cx, counts, buf, s, adj)
    }

    fn trace(&self, buf: &Buffer) -> String {
        match F::check(buf.bytes()) {
            Ok(s) => format!("parcel {} x {} B, {} B", s.nsegs, s.seg_len, s.total_len),
            Err(e) => format!("not a parcel: {e}"),
        }
    }
}

impl<F: ParcelFamily> ParcelInput<F> {
    /// A parcel forwarded whole goes to `interface-output` when rewritten here, else to
    /// `ipN-rewrite`'s general path.
    #[inline(always)]
    fn whole_next(rewritten: bool) -> F::InputNext {
        if rewritten {
            F::TO_OUTPUT
        } else {
            F::TO_REWRITE
        }
    }

    /// The rest of `process` for a parcel whose header passed (`s`), from a unicast
    /// source, whose destination looked up to `adj`.
    #[inline(always)]
    fn decide<Cx: HasParcel>(
        cx: &mut Cx,
        counts: &mut Counts<'_, ParcelInputCounter>,
        buf: &mut Buffer,
        s: super::Shape,
        adj: u32,
    ) -> Verdict<F::InputNext, ParcelInputCounter> {
        use ParcelInputCounter as C;
        let (ipcx, pcx) = cx.split_parcel();
        // Per hop only the headers are checked: the slots travel on (whole, or as each
        // datagram's checksum after a split), so the receiver still finds a damaged
        // segment. Segments are read where that chain would break (a GSO frame: the
        // kernel sums each datagram afresh), and in the split as it copies them.
        let strict = pcx.reads_segments_in_transit();
        let mut bad = if strict { bad_segments(buf.bytes(), &s) } else { 0 };
        buf.truncate(s.total_len);
        buf.meta.adj = adj;
        let next_hop = next_hop(&ipcx.tables, adj);
        // The UDP header checksum is the receiver's, as for any UDP datagram a router
        // forwards: checked here only where the parcel is taken apart or leaves as a GSO
        // frame, since its ports and lengths then go into each datagram's checksum.
        let whole = bad == 0
            && match &next_hop {
                Some(hop) => takes_whole(&ipcx.tables, hop, s.total_len),
                None => into_udp_tunnel(adj),
            };
        if !whole && !F::check_with_udp(buf.bytes()).is_ok_and(|(_, ok)| ok) {
            return Verdict::Drop(C::BadUdpChecksum);
        }
        counts.inc(C::Parcels);
        counts.add(C::Segments, s.nsegs as u64);
        if bad == 0 {
            if let Some(hop) = &next_hop {
                if whole {
                    counts.inc(C::Whole);
                    return Verdict::Next(Self::whole_next(rewrite_fast::<F>(hop.adjacency, buf)));
                }
                // Only verified segments: the kernel gives each datagram a fresh checksum
                // over its bytes, which would hide damage the slots could still show.
                if pcx.verify_segments && pcx.takes_gso(hop.tx_if) && F::DATAGRAM_IP_LEN + 8 + s.seg_len <= hop.mtu {
                    if !strict {
                        bad = bad_segments(buf.bytes(), &s);
                    }
                    if bad == 0 && super::gso::parcel_to_gso::<F>(buf, &s) {
                        counts.inc(C::ToGso);
                        return Verdict::Next(F::TO_REWRITE);
                    }
                }
            } else if whole {
                counts.inc(C::ToTunnel);
                return Verdict::Next(F::TO_TUNNEL);
            }
        }
        if bad > 0 {
            counts.add(C::BadSegment, bad as u64);
        }
        // Segments not read here are checked by the split as it copies them.
        let check = bad > 0 || pcx.verify_segments && !strict;
        buf.meta.param =
            PARAM_FROM_INPUT | if check { PARAM_CHECK_SEGMENTS } else { 0 } | if next_hop.is_some() { PARAM_NEXT_HOP } else { 0 };
        counts.inc(C::ToSplit);
        Verdict::Next(F::TO_SPLIT)
    }
}
