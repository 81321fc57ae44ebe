//! `parcel4-split` / `parcel6-split`: a parcel into ordinary UDP datagrams, one per
//! segment, each to `ipN-lookup`. A datagram's UDP checksum comes from its segment's
//! integrity slot (the complement of the segment's sum), so the segment bytes are only
//! copied, never summed again; a zero slot (the sender computed none) is summed here.

use super::input::PARAM_HAS_BAD_SEGMENT;
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
        counts.inc(C::Split);
        let hl = F::DATAGRAM_IP_LEN;
        for i in 0..s.nsegs {
            let range = s.segment(i);
            let seg_len = range.len();
            let udp_len = 8 + seg_len;
            let Some(d) = pool.alloc(hl + udp_len) else { return Err(C::NoBuffer) };
            let Some((src, dst)) = pool.two_mut(bi, d) else {
                pool.free(d);
                return Err(C::NoBuffer);
            };
            let p = src.bytes();
            let at = s.udp_at + 8 + 2 * i;
            let slot = u16::from_be_bytes([p[at], p[at + 1]]);
            if check_each && slot != 0 && slot != segment_checksum(&p[range.clone()]) {
                pool.free(d);
                counts.inc(C::BadSegment);
                continue;
            }
            if dst.set_len(hl + udp_len).is_err() {
                pool.free(d);
                return Err(C::NoBuffer);
            }
            dst.meta.rx_if = meta.rx_if;
            let b = dst.bytes_mut();
            let pseudo = F::write_datagram_ip(p, i, udp_len, b);
            let u = &mut b[hl..];
            u[..4].copy_from_slice(&p[s.udp_at..s.udp_at + 4]);
            u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            u[8..].copy_from_slice(&p[range]);
            let (sport, dport) = (u16::from_be_bytes([u[0], u[1]]), u16::from_be_bytes([u[2], u[3]]));
            let sum = if slot != 0 {
                datagram_checksum_from_slot(pseudo, sport, dport, udp_len as u16, slot)
            } else {
                counts.inc(C::Summed);
                u[6..8].fill(0);
                let mut c = pseudo;
                c.add_bytes(u);
                match c.finish() {
                    0 => 0xffff,
                    v => v,
                }
            };
            u[6..8].copy_from_slice(&sum.to_be_bytes());
            out.push((d, F::TO_LOOKUP));
            counts.inc(C::Datagrams);
        }
        Ok(())
    }
}
