//! `parcel4-split` / `parcel6-split`: a parcel into ordinary UDP datagrams, one per
//! segment, each to `ipN-rewrite` when `parcelN-input` found a next hop (they all go to
//! the parcel's destination), else to `ipN-lookup`. The last datagram reuses the parcel's
//! buffer. A datagram's UDP checksum comes from its segment's
//! integrity slot (the complement of the segment's sum), so the segment bytes are only
//! copied, never summed again; a zero slot (the sender computed none) is summed here.

use super::input::{PARAM_HAS_BAD_SEGMENT, PARAM_NEXT_HOP};
use super::ParcelFamily;
use crate::context::HasParcel;
use engine::{counters, BufIdx, Counts, ExpandNode, Pool};
use wire::parcel::{datagram_checksum_from_slot, segment_checksum};

counters! {
    pub enum ParcelSplitCounter {
        Split(Info, "parcels-split", "parcels split into UDP datagrams"),
        Datagrams(Info, "datagrams", "UDP datagrams made from segments"),
        Summed(Info, "segments-summed", "segments with a zero slot, whose datagram checksum was summed in full"),
        BadSegment(Warn, "bad-segment-dropped", "segments left out: their checksum did not match their slot"),
        NotParcel(Error, "not-a-parcel", "no longer a valid parcel (parcelN-input should have dropped it)"),
        NoBuffer(Error, "no-buffer", "out of buffers while splitting: the rest of the parcel dropped"),
    }
}

pub struct ParcelSplit<F>(std::marker::PhantomData<F>);

impl<F> Default for ParcelSplit<F> {
    fn default() -> Self {
        ParcelSplit(std::marker::PhantomData)
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
        _cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        use ParcelSplitCounter as C;
        let src = pool.get(bi);
        let s = F::check(src.bytes()).map_err(|_| C::NotParcel)?;
        let meta = src.meta;
        let check_each = meta.param & PARAM_HAS_BAD_SEGMENT != 0;
        // `parcelN-input` looked the destination up: a next hop needs no second lookup.
        let next = if meta.param & PARAM_NEXT_HOP != 0 { F::SPLIT_TO_REWRITE } else { F::TO_LOOKUP };
        counts.inc(C::Split);
        let hl = F::DATAGRAM_IP_LEN;
        // The parcel's headers, kept aside: the last datagram is made in the parcel's own
        // buffer, its headers written over the end of the segment before it.
        let mut head = [0u8; 64];
        head[..s.udp_at + 8].copy_from_slice(&src.bytes()[..s.udp_at + 8]);
        let head = &head[..s.udp_at + 8];
        for i in 0..s.nsegs {
            let range = s.segment(i);
            let udp_len = 8 + range.len();
            let p = pool.get(bi).bytes();
            let at = s.udp_at + 8 + 2 * i;
            let slot = u16::from_be_bytes([p[at], p[at + 1]]);
            if check_each && slot != 0 && slot != segment_checksum(&p[range.clone()]) {
                counts.inc(C::BadSegment);
                continue;
            }
            let d = if i + 1 == s.nsegs {
                let b = pool.get_mut(bi);
                if b.narrow(range.start - hl - 8, hl + udp_len).is_err() {
                    return Err(C::NotParcel);
                }
                bi
            } else {
                let Some(d) = pool.alloc(hl + udp_len) else { return Err(C::NoBuffer) };
                let Some((src, dst)) = pool.two_mut(bi, d) else {
                    pool.free(d);
                    return Err(C::NoBuffer);
                };
                if dst.set_len(hl + udp_len).is_err() {
                    pool.free(d);
                    return Err(C::NoBuffer);
                }
                dst.bytes_mut()[hl + 8..].copy_from_slice(&src.bytes()[range]);
                d
            };
            let dst = pool.get_mut(d);
            dst.meta.rx_if = meta.rx_if;
            dst.meta.adj = meta.adj;
            if finish_datagram::<F>(head, s.udp_at, i, slot, dst.bytes_mut()) {
                counts.inc(C::Summed);
            }
            out.push((d, next));
            counts.inc(C::Datagrams);
        }
        Ok(())
    }
}

/// Write datagram `i`'s IP and UDP headers into `b`, whose bytes after them already hold
/// the segment; `head` is the parcel's headers (UDP header at `udp_at`). The UDP checksum
/// comes from `slot`, or is summed when the slot is 0 (then true).
fn finish_datagram<F: ParcelFamily>(head: &[u8], udp_at: usize, i: usize, slot: u16, b: &mut [u8]) -> bool {
    let hl = F::DATAGRAM_IP_LEN;
    let udp_len = b.len() - hl;
    let pseudo = F::write_datagram_ip(head, i, udp_len, b);
    let u = &mut b[hl..];
    u[..4].copy_from_slice(&head[udp_at..udp_at + 4]);
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    let (sport, dport) = (u16::from_be_bytes([u[0], u[1]]), u16::from_be_bytes([u[2], u[3]]));
    let (sum, summed) = if slot != 0 {
        (datagram_checksum_from_slot(pseudo, sport, dport, udp_len as u16, slot), false)
    } else {
        u[6..8].fill(0);
        let mut c = pseudo;
        c.add_bytes(u);
        (
            match c.finish() {
                0 => 0xffff,
                v => v,
            },
            true,
        )
    };
    u[6..8].copy_from_slice(&sum.to_be_bytes());
    summed
}
