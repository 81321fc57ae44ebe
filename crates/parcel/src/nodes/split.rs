//! `parcel4-split` / `parcel6-split`: a parcel into ordinary UDP datagrams, one per
//! segment, each rewritten here for its next hop when `parcelN-input` found one (they
//! all go to the parcel's destination; `ipN-rewrite`'s fast path, the rest to
//! `ipN-rewrite`), else to `ipN-lookup`. Copying, the last datagram reuses the
//! parcel's buffer. Every datagram's metadata is a new packet's with the parcel's
//! receiving interface, next hop and trace mark, whichever buffer it is in.
//!
//! The datagrams' IP and UDP headers are built once per parcel (a template); each
//! datagram gets a copy with its IPv4 identification patched and the header checksum
//! updated incrementally (RFC 1624). A datagram's UDP checksum comes from its segment's
//! integrity slot (the complement of the segment's sum), so the slot's check travels on
//! to the receiver. When `parcelN-input` asks (`PARAM_CHECK_SEGMENTS`) each segment is
//! summed in the same pass that copies it (`Checksum::add_copied`) and left out when the
//! sum does not match its slot; a zero slot (the sender computed none) is summed here.
//!
//! **Chained datagrams** (`chain`), both families: where every datagram will take the
//! rewrite's fast path (a resolved next hop, TTL or hop limit left, within the MTU), a
//! datagram is its headers in a fresh buffer plus an extent of its segment where it lies
//! in the parcel's buffer (`Pool::alloc_chained`; the headers placed so that the
//! rewrite's link header shares their line): no segment is copied, and the check sums it
//! in place. The parcel's buffer goes back to the pool with its last datagram. The
//! dispatcher and the worker copy a chained datagram into one buffer before any node or
//! device that does not take chains, so the bytes that leave are the copying split's.

use super::input::{PARAM_CHECK_SEGMENTS, PARAM_FROM_INPUT, PARAM_NEXT_HOP};
use super::{ParcelFamily, Shape};
use crate::context::HasParcel;
use engine::{counters, BufIdx, Counts, ExpandNode, Pool};
use ip::nodes::family::rewrite_fast;
use ip::tables::Adjacency;
use wire::checksum::Checksum;
use wire::parcel::DatagramChecksums;

counters! {
    pub enum ParcelSplitCounter {
        Split(Info, "parcels-split", "parcels split into UDP datagrams"),
        Datagrams(Info, "datagrams", "UDP datagrams made from segments"),
        Summed(Info, "segments-summed", "segments with a zero slot, whose datagram checksum was summed in full"),
        BadSegment(Warn, "bad-segment-dropped", "segments left out: their checksum did not match their slot"),
        NotParcel(Error, "not-a-parcel", "no longer a valid parcel (parcelN-input should have dropped it)"),
        BadUdpChecksum(Warn, "bad-udp-checksum", "parcel UDP header checksum mismatch, found here for a parcel not split by parcelN-input's choice (a tunnel's inner parcel): its ports and lengths would go into every datagram's checksum"),
        NoBuffer(Error, "no-buffer", "out of buffers while splitting: the rest of the parcel dropped"),
    }
}

pub struct ParcelSplit<F>(std::marker::PhantomData<F>);

impl<F> Default for ParcelSplit<F> {
    fn default() -> Self {
        ParcelSplit(std::marker::PhantomData)
    }
}

/// What splitting one parcel did, for the node's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub datagrams: u64,
    pub summed: u64,
    pub bad: u64,
}

/// Why a split stopped; the datagrams made before it go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    NotParcel,
    NoBuffer,
}

/// The IP and UDP headers every datagram of one parcel starts from: those of datagram 0
/// for a full segment, and the checksum sums they imply.
struct Template {
    bytes: [u8; 48],
    /// The datagrams' UDP checksums from their slots.
    checksums: DatagramChecksums,
    udp_len: usize,
}

impl Template {
    fn new<F: ParcelFamily>(head: &[u8], udp_at: usize, udp_len: usize) -> Template {
        let hl = F::DATAGRAM_IP_LEN;
        let mut bytes = [0u8; 48];
        let pseudo = F::write_datagram_ip(head, 0, udp_len, &mut bytes[..hl]);
        bytes[hl..hl + 4].copy_from_slice(&head[udp_at..udp_at + 4]);
        bytes[hl + 4..hl + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        let port = |at: usize| u16::from_be_bytes([head[at], head[at + 1]]);
        let checksums = DatagramChecksums::new(pseudo, port(udp_at), port(udp_at + 2), udp_len as u16);
        Template { bytes, checksums, udp_len }
    }
}

/// Where a split's datagrams may be chained: a resolved next hop whose link's MTU they
/// must fit, and the length of the link header its rewrite puts in front of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainTo {
    pub mtu: usize,
    pub l2_len: usize,
}

/// Split the parcel in `bi` into datagrams, handing each to `out` (copying, the last one
/// made in `bi` itself). With `check`, each segment is summed as it is copied and left out
/// (counted in `tally.bad`) when the sum does not match a non-zero slot. With
/// `chain_to` (a resolved next hop: the datagrams rewritten by the caller), each datagram
/// that fits its MTU, with TTL left, is a chained packet: its headers, then its segment in
/// `bi`, which the caller frees as ever (the pool keeps it until the last datagram goes).
pub fn split_parcel<F: ParcelFamily>(
    pool: &mut Pool,
    bi: BufIdx,
    check: bool,
    chain_to: Option<ChainTo>,
    tally: &mut Tally,
    mut out: impl FnMut(BufIdx, &mut engine::Buffer),
) -> Result<(), SplitError> {
    let src = pool.get(bi);
    let s: Shape = F::check(src.bytes()).map_err(|_| SplitError::NotParcel)?;
    let meta = src.meta;
    let hl = F::DATAGRAM_IP_LEN;
    // The parcel's headers, kept aside: the last datagram is made in the parcel's own
    // buffer, its headers written over the end of the segment before it.
    let mut head = [0u8; 64];
    head[..s.udp_at + 8].copy_from_slice(&src.bytes()[..s.udp_at + 8]);
    let head = &head[..s.udp_at + 8];
    let mut tmpl = Template::new::<F>(head, s.udp_at, 8 + s.seg_len);
    // Every datagram takes `ipN-rewrite`'s fast path (no ICMP error, no fragmenting,
    // whose parsers would see the head alone): the largest fits, the TTL does not expire.
    // The MTU is compared here for both families: IPv6's fast path compares the buffer's
    // length, which for a chained head is its own 48 bytes.
    let chain = chain_to.is_some_and(|c| hl + 8 + s.seg_len <= c.mtu && head[F::HOP_LIMIT_AT] > 1);
    let l2_len = chain_to.map_or(0, |c| c.l2_len);
    for i in 0..s.nsegs {
        let range = s.segment(i);
        let udp_len = 8 + range.len();
        if udp_len != tmpl.udp_len {
            // The last segment, shorter.
            tmpl = Template::new::<F>(head, s.udp_at, udp_len);
        }
        let p = pool.get(bi).bytes();
        let at = s.udp_at + 8 + 2 * i;
        let slot = u16::from_be_bytes([p[at], p[at + 1]]);
        // The segment's own sum, when it is read (checked, or a zero slot).
        let mut sum = None;
        let d = if chain || i + 1 == s.nsegs {
            // The segment stays where it is (chained, or the parcel's buffer narrowed to
            // the last datagram): summed in place.
            if check || slot == 0 {
                sum = Some(*Checksum::new().add_bytes(&p[range.clone()]));
            }
            if check && slot != 0 && sum.map(segment_slot) != Some(slot) {
                tally.bad += 1;
                continue;
            }
            if chain {
                // A buffer for the whole datagram, so that it can be made one again
                // wherever a node or device needs it whole (`Pool::alloc_chained`).
                // Its headers start `l2_len` into a line, so that the link header the
                // rewrite puts in front shares their line: one line written a datagram,
                // not two (the buffers come back cold after the next parcels' bytes).
                pool.alloc_chained(bi, range, l2_len, hl + 8).map_err(|_| SplitError::NoBuffer)?
            } else {
                // A new packet in the parcel's buffer: nothing of the parcel's metadata
                // (its node arguments, device checks, offload work) carries over but
                // what every datagram gets below.
                let b = pool.get_mut(bi);
                if b.narrow_to_new(range.start - hl - 8, hl + udp_len).is_err() {
                    return Err(SplitError::NotParcel);
                }
                bi
            }
        } else {
            let Some(d) = pool.alloc(hl + udp_len) else { return Err(SplitError::NoBuffer) };
            let Some((src, dst)) = pool.two_mut(bi, d) else {
                pool.free(d);
                return Err(SplitError::NoBuffer);
            };
            if dst.set_len(hl + udp_len).is_err() {
                pool.free(d);
                return Err(SplitError::NoBuffer);
            }
            let (seg, body) = (&src.bytes()[range], &mut dst.bytes_mut()[hl + 8..]);
            if check || slot == 0 {
                sum = Some(*Checksum::new().add_copied(body, seg));
            } else {
                body.copy_from_slice(seg);
            }
            if check && slot != 0 && sum.map(segment_slot) != Some(slot) {
                pool.free(d);
                tally.bad += 1;
                continue;
            }
            d
        };
        // Every datagram, copied, chained or the parcel's own buffer, starts with fresh
        // metadata and takes the same from the parcel: where it came in, its next hop,
        // its trace mark (as every packet made from another, `parcel_to_gso`'s too).
        let dst = pool.get_mut(d);
        dst.meta.rx_if = meta.rx_if;
        dst.meta.adj = meta.adj;
        dst.meta.trace = meta.trace;
        // The headers made aside and stored once: read back from the datagram's line
        // right after the template's store, they waited for that line.
        let mut hdr = tmpl.bytes;
        F::patch_datagram_ident(&mut hdr, i);
        let udp_sum = match (slot, sum) {
            (0, Some(sum)) => {
                tally.summed += 1;
                tmpl.checksums.of_sum(sum)
            }
            _ => tmpl.checksums.checksum(slot),
        };
        hdr[hl + 6..hl + 8].copy_from_slice(&udp_sum.to_be_bytes());
        dst.bytes_mut()[..hl + 8].copy_from_slice(&hdr[..hl + 8]);
        out(d, dst);
        tally.datagrams += 1;
    }
    Ok(())
}

/// A segment's integrity slot from its sum (`wire::parcel::segment_checksum`'s rule).
fn segment_slot(sum: Checksum) -> u16 {
    match sum.finish() {
        0 => 0xffff,
        v => v,
    }
}

impl<Cx: HasParcel, F: ParcelFamily> ExpandNode<Cx> for ParcelSplit<F> {
    type Next = F::SplitNext;
    type Counter = ParcelSplitCounter;

    fn name(&self) -> &'static str {
        F::SPLIT
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        use ParcelSplitCounter as C;
        let param = pool.get(bi).meta.param;
        // Not from `parcelN-input` (a tunnel's inner parcel, from `ipN-fragment`): the
        // edge's checks, which a parcel forwarded whole to here has not had, are here.
        let from_input = param & PARAM_FROM_INPUT != 0;
        if !from_input {
            match F::check_with_udp(pool.get(bi).bytes()) {
                Ok((_, true)) => {}
                Ok((_, false)) => return Err(C::BadUdpChecksum),
                Err(_) => return Err(C::NotParcel),
            }
        }
        let check = if from_input { param & PARAM_CHECK_SEGMENTS != 0 } else { cx.split_parcel().1.verify_segments };
        // `parcelN-input` looked the destination up: a next hop needs no second lookup.
        let to_next_hop = param & PARAM_NEXT_HOP != 0;
        let next = if to_next_hop { F::SPLIT_TO_REWRITE } else { F::TO_LOOKUP };
        // A resolved next hop (no solicitation, which rewrites a packet whole): the
        // datagrams are chained where they fit its MTU.
        let adj = cx.split_parcel().0.tables.adjacency(pool.get(bi).meta.adj);
        let chain_to = match adj {
            Adjacency::Rewrite { mtu, rewrite, .. } if to_next_hop => Some(ChainTo { mtu: *mtu as usize, l2_len: rewrite.len() }),
            _ => None,
        };
        // A datagram to a next hop takes the rewrite's fast path here, where it is made,
        // and goes straight to `interface-output` (a node hop fewer, as `ipN-lookup`
        // does for forwarded packets); the others, and any the fast path leaves (TTL
        // expiring, too big, an unresolved neighbour), go on to `ipN-rewrite` as before
        // (made whole first if chained: `ipN-rewrite` does not take chains).
        let mut tally = Tally::default();
        let r = split_parcel::<F>(pool, bi, check, chain_to, &mut tally, |d, b| {
            let n = if to_next_hop && rewrite_fast::<F>(adj, b) { F::SPLIT_TO_OUTPUT } else { next };
            out.push((d, n))
        });
        if r != Err(SplitError::NotParcel) {
            counts.inc(C::Split);
        }
        counts.add(C::Datagrams, tally.datagrams);
        counts.add(C::Summed, tally.summed);
        counts.add(C::BadSegment, tally.bad);
        r.map_err(|e| match e {
            SplitError::NotParcel => C::NotParcel,
            SplitError::NoBuffer => C::NoBuffer,
        })
    }
}
