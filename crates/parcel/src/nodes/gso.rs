//! Parcels and Linux UDP GSO frames: N segments of one flow behind one set of headers,
//! in two layouts. A host hands over (and takes back) a GSO frame through the virtio-net
//! header of an AF_PACKET socket (`engine::GsoKind::UdpL4`, the kernel's UDP_SEGMENT):
//!
//! ```text
//! GSO frame: IP (no options) | UDP (length: all of it; checksum: pseudo-header sum, partial) | segments of gso_size, the last one may be shorter
//! parcel:    IP + parcel option / jumbo option | UDP (length 0) | N slots | the same segments
//! ```
//!
//! - [`to_parcels`] (in `parcelN-join`): a GSO frame routed toward a parcel link becomes
//!   one parcel, or a few where the link's MTU or the segment bound asks, without being
//!   cut into datagrams first. The frame's checksum is partial (the sender left it to the
//!   device), so each segment is summed for its slot: the one read of the data. Toward a
//!   resolved next hop the parcels are chained (as `parcelN-join`'s runs): headers in a
//!   buffer of their own, the segments left in the frame's buffer, nothing copied.
//! - [`parcel_to_gso`] (in `parcelN-input`): a parcel routed toward a link that exchanges
//!   virtio-net headers becomes one GSO frame in place (the headers rewritten in front of
//!   the segments, nothing copied). The receiving kernel hands it whole to a UDP_GRO
//!   socket, or segments it for any other socket, computing each datagram's checksum
//!   from the bytes. Only verified parcels go this way (see `parcelN-input`): the slots
//!   are the last check of the segments' integrity before the kernel's fresh checksums.

use super::ParcelFamily;
use engine::{BufIdx, Buffer, GsoKind, Pool};
use wire::parcel::{self, SegmentsRepr};

/// The largest IP packet a GSO frame can be (its IP length field, IPv4 Total Length or
/// IPv6 Payload Length plus the header, is 16 bits).
pub const MAX_GSO_FRAME: usize = 65535;

/// A UDP GSO frame that can become parcels: `payload` bytes after the UDP header, in
/// segments of `seg_len` (more than one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsoFrame {
    pub seg_len: usize,
    pub payload: usize,
}

impl GsoFrame {
    /// The UDP GSO frame in `buf` (starting at its IP header): a plain UDP datagram's
    /// headers (`ParcelFamily::datagram_udp_len`; its hop limit is the join's concern),
    /// the partial checksum on the UDP header, and more than one segment.
    pub fn of<F: ParcelFamily>(buf: &Buffer) -> Option<GsoFrame> {
        let o = buf.meta.offload;
        let hl = F::DATAGRAM_IP_LEN;
        let l4 = (o.csum_start as usize).checked_sub(buf.offset())?;
        if o.gso != GsoKind::UdpL4 || l4 != hl || o.csum_offset != 6 {
            return None;
        }
        F::datagram_udp_len(buf.bytes())?;
        let payload = buf.len() - hl - 8;
        let seg_len = o.gso_size as usize;
        (seg_len > 0 && payload > seg_len).then_some(GsoFrame { seg_len, payload })
    }

    pub fn segments(&self) -> usize {
        self.payload.div_ceil(self.seg_len)
    }

    /// Segments per parcel toward a link of MTU `mtu`, at most `max_segments`: `None` when
    /// fewer than two fit (the frame goes on as it is).
    pub fn per_parcel<F: ParcelFamily>(&self, max_segments: usize, mtu: usize) -> Option<usize> {
        let room = mtu.min(parcel::MAX_JUMBO_LEN).checked_sub(F::PARCEL_HEADER_LEN + 8)?;
        let per = (room / (self.seg_len + 2)).min(max_segments).min(parcel::MAX_SEGMENTS).min(self.segments());
        (per >= 2 && self.seg_len <= u16::MAX as usize).then_some(per)
    }
}

/// Make the GSO frame `bi` (shape `g`) into parcels of `per` segments (the last parcel
/// takes the rest), appended to `made`. All or nothing: when a buffer is missing, the
/// ones taken are freed, `made` is left as it was and `None` returned (the frame is
/// still whole). The frame's buffer is left to the caller.
///
/// Copying (`chain_l2` None), each parcel is one buffer holding its segments. Chained
/// (`Some(l2_len)`, as [`join_run`](super::join::join_run)'s), each parcel is a buffer of
/// its headers and integrity block plus one extent, its segments where they lie in the
/// frame's buffer (`Pool::push_extent`): the frame is held by each parcel as well as by
/// the caller, and goes back to the pool when the last of them lets it go. Both make the
/// same bytes; each segment is summed for its slot either way (the frame's checksum is
/// partial, no sum of the data).
pub fn to_parcels<F: ParcelFamily>(
    pool: &mut Pool,
    bi: BufIdx,
    g: GsoFrame,
    per: usize,
    chain_l2: Option<usize>,
    made: &mut Vec<BufIdx>,
) -> Option<usize> {
    let hl = F::DATAGRAM_IP_LEN;
    let ph = F::PARCEL_HEADER_LEN;
    let src = pool.get(bi);
    let meta = src.meta;
    let mut head = [0u8; 48];
    head[..hl + 8].copy_from_slice(src.bytes().get(..hl + 8)?);
    let n = g.segments();
    let count = n.div_ceil(per);
    let from = made.len();
    for j in 0..count {
        let k = per.min(n - j * per);
        let last_len = if j + 1 == count { g.payload - (n - 1) * g.seg_len } else { g.seg_len };
        let segs = SegmentsRepr {
            src_port: u16::from_be_bytes([head[hl], head[hl + 1]]),
            dst_port: u16::from_be_bytes([head[hl + 2], head[hl + 3]]),
            nsegs: k as u8,
            seg_len: g.seg_len as u16,
            last_len: last_len as u16,
        };
        let mut parcel_head = head;
        // Each datagram the sender's kernel would have cut has the next identification
        // (RFC 6864 does not make them atomic); a parcel starts at its first segment's.
        F::advance_ident(&mut parcel_head, j * per);
        let Some(d) = new_parcel::<F>(pool, &parcel_head[..hl + 8], &segs, chain_l2) else { return abandon(pool, made, from) };
        made.push(d);
        let Some((src, dst)) = pool.two_mut(bi, d) else { return abandon(pool, made, from) };
        dst.meta.adj = meta.adj;
        dst.meta.rx_if = meta.rx_if;
        dst.meta.trace = meta.trace;
        let out = dst.bytes_mut();
        let s = src.bytes();
        let data = hl + 8 + j * per * g.seg_len..(hl + 8 + (j * per + k) * g.seg_len).min(s.len());
        let data_at = ph + 8 + 2 * k;
        for (i, seg) in s[data.clone()].chunks(g.seg_len).enumerate() {
            if chain_l2.is_none() {
                let to = data_at + i * g.seg_len;
                out[to..to + seg.len()].copy_from_slice(seg);
            }
            out[ph + 8 + 2 * i..ph + 10 + 2 * i].copy_from_slice(&parcel::segment_checksum(seg).to_be_bytes());
        }
        // Not refused: the frame is a plain packet (not chained) and the head's class holds
        // the parcel whole.
        if chain_l2.is_some() && pool.push_extent(d, bi, data).is_err() {
            return abandon(pool, made, from);
        }
    }
    Some(count)
}

/// A new parcel's buffer, its headers (for `segs`, from its first datagram's headers
/// `head`) and the room for its integrity block written: copying (`chain_l2` None), one
/// buffer of the whole parcel, the segments to be copied in after the slots; chained
/// (`Some(l2_len)`), a head of the headers and slots only, placed so that the `l2_len`
/// bytes of link header the rewrite puts in front start a line, from a class that holds
/// the whole parcel (`Pool::alloc_head`: it can always be made one buffer again), the
/// segments to follow as extents. None without a buffer.
#[inline(always)]
pub(crate) fn new_parcel<F: ParcelFamily>(pool: &mut Pool, head: &[u8], segs: &SegmentsRepr, chain_l2: Option<usize>) -> Option<BufIdx> {
    let ph = F::PARCEL_HEADER_LEN;
    let head_len = ph + 8 + 2 * segs.nsegs as usize;
    let len = ph + segs.udp_len();
    let d = match chain_l2 {
        Some(l2_len) => pool.alloc_head(l2_len, head_len, len - head_len)?,
        None => {
            let d = pool.alloc(len)?;
            if pool.get_mut(d).set_len(len).is_err() {
                pool.free(d);
                return None;
            }
            d
        }
    };
    F::emit_parcel_headers(head, segs, pool.get_mut(d).bytes_mut());
    Some(d)
}

/// Give back the parcels made so far (from `made[from]` on).
fn abandon(pool: &mut Pool, made: &mut Vec<BufIdx>, from: usize) -> Option<usize> {
    pool.free_many(&made[from..]);
    made.truncate(from);
    None
}

/// Make the checked parcel in `buf` (shape `s`) one UDP GSO frame in place: the
/// datagram's IP and UDP headers written over the parcel's integrity block, right in
/// front of the segments, with the UDP checksum left partial for the kernel. False (the
/// buffer untouched) when the parcel has one segment or the frame would exceed 64 KiB.
pub fn parcel_to_gso<F: ParcelFamily>(buf: &mut Buffer, s: &super::Shape) -> bool {
    let hl = F::DATAGRAM_IP_LEN;
    let udp_len = 8 + s.total_len - s.data_at;
    if s.nsegs < 2 || hl + udp_len > MAX_GSO_FRAME || s.udp_at + 8 > 64 {
        return false;
    }
    let mut head = [0u8; 64];
    head[..s.udp_at + 8].copy_from_slice(&buf.bytes()[..s.udp_at + 8]);
    if buf.narrow(s.data_at - hl - 8, hl + udp_len).is_err() {
        return false;
    }
    let b = buf.bytes_mut();
    let pseudo = F::write_datagram_ip(&head, 0, udp_len, b);
    b[hl..hl + 4].copy_from_slice(&head[s.udp_at..s.udp_at + 4]);
    b[hl + 4..hl + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    b[hl + 6..hl + 8].copy_from_slice(&pseudo.fold().to_be_bytes());
    buf.set_partial_checksum(hl, 6);
    buf.meta.offload.gso = GsoKind::UdpL4;
    buf.meta.offload.gso_size = s.seg_len as u16;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::Shape;
    use ip::nodes::family::{Ip4, Ip6};
    use ip::nodes::gso_segment::{self, GsoSegmentNext};
    use ip::parcel::ParcelHeader;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use wire::checksum::{complete_partial, pseudo_header_v4, pseudo_header_v6};
    use wire::parcel::{Parcel4, Parcel4Repr, Parcel6, Parcel6Repr, UdpChecksumForm};
    use wire::udp::UdpPacket;

    const SRC4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
    const DST4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 9);
    const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
    const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 9);

    /// Test data: byte j of segment i.
    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|j| (j as u8).wrapping_mul(31).wrapping_add(seed ^ (j >> 8) as u8)).collect()
    }

    /// A UDP GSO frame as a Linux sender hands it over a vnet header: IPv4 (`v6` false)
    /// or IPv6, UDP length all of it, the pseudo-header sum in the checksum field.
    fn gso_frame(pool: &mut Pool, v6: bool, data: &[u8], gso_size: u16) -> BufIdx {
        let udp_len = 8 + data.len();
        let mut f = if v6 {
            let mut h = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
            h[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            h.extend_from_slice(&SRC6.octets());
            h.extend_from_slice(&DST6.octets());
            h
        } else {
            let mut h = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0];
            h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            h.extend_from_slice(&SRC4.octets());
            h.extend_from_slice(&DST4.octets());
            let c = wire::checksum::checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h
        };
        let pseudo = if v6 { pseudo_header_v6(&SRC6, &DST6, 17, udp_len as u32) } else { pseudo_header_v4(SRC4, DST4, 17, udp_len as u16) };
        f.extend_from_slice(&40000u16.to_be_bytes());
        f.extend_from_slice(&9000u16.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&pseudo.fold().to_be_bytes());
        f.extend_from_slice(data);
        let b = pool.alloc(f.len()).unwrap();
        let buf = pool.get_mut(b);
        buf.write(&f).unwrap();
        buf.set_partial_checksum(if v6 { 40 } else { 20 }, 6);
        buf.meta.offload.gso = GsoKind::UdpL4;
        buf.meta.offload.gso_size = gso_size;
        b
    }

    /// A parcel of `data` in segments of `seg_len` (our emitter, checked by the wire tests).
    fn parcel(pool: &mut Pool, v6: bool, data: &[u8], seg_len: usize) -> BufIdx {
        let n = data.len().div_ceil(seg_len);
        let segments = SegmentsRepr {
            src_port: 40000,
            dst_port: 9000,
            nsegs: n as u8,
            seg_len: seg_len as u16,
            last_len: (data.len() - (n - 1) * seg_len) as u16,
        };
        let mut b = if v6 {
            let r = Parcel6Repr { src: SRC6, dst: DST6, hop_limit: 64, traffic_class: 0, flow_label: 7, segments };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            b
        } else {
            let r = Parcel4Repr { src: SRC4, dst: DST4, ident: 0x1234, ttl: 64, dscp_ecn: 0, probe: None, segments };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            b
        };
        let at = b.len() - data.len();
        b[at..].copy_from_slice(data);
        if v6 {
            let mut p = Parcel6::new_checked(&mut b[..]).unwrap();
            p.fill_segment_checksums();
            Parcel6Repr::fill_udp_checksum(&mut p);
        } else {
            let mut p = Parcel4::new_checked(&mut b[..]).unwrap();
            p.fill_segment_checksums();
            Parcel4Repr::fill_udp_checksum(&mut p, UdpChecksumForm::Prototype);
        }
        let d = pool.alloc(b.len()).unwrap();
        pool.get_mut(d).write(&b).unwrap();
        d
    }

    /// What a parcel holds: (src port, dst port, segments), every check passed (layout,
    /// UDP header checksum, each segment against its slot).
    fn read_parcel<F: ParcelFamily>(b: &[u8]) -> (u16, u16, Vec<Vec<u8>>) {
        let (s, udp_ok): (Shape, bool) = F::check_with_udp(b).expect("a valid parcel");
        assert!(udp_ok, "parcel UDP header checksum");
        assert_eq!(super::super::input::bad_segments(b, &s), 0, "a segment does not match its slot");
        let h = F::PARCEL_HEADER_LEN;
        let ports = (u16::from_be_bytes([b[h], b[h + 1]]), u16::from_be_bytes([b[h + 2], b[h + 3]]));
        (ports.0, ports.1, (0..s.nsegs).map(|i| b[s.segment(i)].to_vec()).collect())
    }

    /// The datagrams the engine's own software GSO (`ip-gso-segment`) cuts the frame `b`
    /// into, checksums completed as a device would: (IPv4 identification or 0, the UDP
    /// payload), each datagram's IP and UDP checksums verified.
    fn software_segments(pool: &mut Pool, b: BufIdx, v6: bool) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        gso_segment::segment(pool, b, &mut out).expect("segments");
        out.iter()
            .map(|&(d, next)| {
                assert_eq!(next, if v6 { GsoSegmentNext::Ip6Lookup } else { GsoSegmentNext::Ip4Lookup });
                let buf = pool.get_mut(d);
                let (start, offset) = buf.take_partial_checksum().expect("a partial checksum");
                assert!(complete_partial(buf.bytes_mut(), start, offset));
                let p = buf.bytes();
                let hl = if v6 { 40 } else { 20 };
                let udp = UdpPacket::new_checked(&p[hl..]).unwrap();
                let ok = if v6 {
                    let a = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&p[at..at + 16]).unwrap());
                    udp.verify_checksum_v6(&a(8), &a(24))
                } else {
                    assert!(wire::checksum::verify(&p[..20]), "IPv4 header checksum");
                    udp.verify_checksum_v4(SRC4, DST4)
                };
                assert!(ok, "datagram UDP checksum");
                (if v6 { 0 } else { u16::from_be_bytes([p[4], p[5]]) }, udp.payload().to_vec())
            })
            .collect()
    }

    fn parcel_to_gso_reference<F: ParcelFamily>(v6: bool, data: &[u8], seg_len: usize) {
        let mut pool = Pool::new(64, 32);
        let b = parcel(&mut pool, v6, data, seg_len);
        let s = F::check(pool.get(b).bytes()).unwrap();
        if F::DATAGRAM_IP_LEN + 8 + data.len() > MAX_GSO_FRAME {
            // No IP length field holds it: the parcel stays as it is (to be split).
            assert!(!parcel_to_gso::<F>(pool.get_mut(b), &s));
            assert_eq!(F::check(pool.get(b).bytes()), Ok(s));
            return;
        }
        assert!(parcel_to_gso::<F>(pool.get_mut(b), &s));
        let o = pool.get(b).meta.offload;
        assert_eq!((o.gso, o.gso_size as usize), (GsoKind::UdpL4, seg_len));
        let got = software_segments(&mut pool, b, v6);
        let want: Vec<_> = data.chunks(seg_len).collect();
        assert_eq!(got.len(), want.len());
        for (i, (ident, seg)) in got.iter().enumerate() {
            assert_eq!(seg, want[i], "segment {i}");
            if !v6 {
                assert_eq!(*ident, 0x1234u16.wrapping_add(i as u16), "segment {i}'s identification");
            }
        }
    }

    fn gso_to_parcels<F: ParcelFamily>(v6: bool, data: &[u8], gso_size: usize, max: usize, mtu: usize) {
        // Parcels under 2 KiB take regular buffers: up to 12 of them (24 segments, 2 each).
        let mut pool = Pool::new(32, 300);
        let b = gso_frame(&mut pool, v6, data, gso_size as u16);
        let g = GsoFrame::of::<F>(pool.get(b)).expect("a GSO frame");
        let Some(per) = g.per_parcel::<F>(max, mtu) else {
            // Fewer than two segments fit: the frame is left as it is.
            assert!(F::PARCEL_HEADER_LEN + 8 + 2 * (gso_size + 2) > mtu || max < 2);
            return;
        };
        let mut made = Vec::new();
        let n = to_parcels::<F>(&mut pool, b, g, per, None, &mut made).expect("buffers");
        assert_eq!(n, made.len());
        // Chained, the same parcels: each its headers plus one extent in the frame.
        let mut chained = Vec::new();
        assert_eq!(to_parcels::<F>(&mut pool, b, g, per, Some(14), &mut chained), Some(n));
        for (&c, &d) in chained.iter().zip(&made) {
            assert_eq!(pool.extent_parts(c).count(), 1);
            assert_eq!([pool.get(c).bytes(), &pool.extent_bytes(c)].concat(), pool.get(d).bytes());
        }
        pool.free_many(&chained);
        let mut segs = Vec::new();
        for (j, &d) in made.iter().enumerate() {
            let p = pool.get(d).bytes();
            assert!(p.len() <= mtu, "parcel {j}: {} bytes over the MTU {mtu}", p.len());
            let (sp, dp, s) = read_parcel::<F>(p);
            assert_eq!((sp, dp), (40000, 9000));
            assert!(s.len() <= per && s.len() <= max);
            if !v6 {
                assert_eq!(u16::from_be_bytes([p[4], p[5]]), 0x1234u16.wrapping_add(segs.len() as u16));
            }
            segs.extend(s);
        }
        let want: Vec<_> = data.chunks(gso_size).map(<[u8]>::to_vec).collect();
        assert_eq!(segs, want);
    }

    #[test]
    fn a_parcel_becomes_the_gso_frame_of_its_datagrams() {
        parcel_to_gso_reference::<Ip4>(false, &payload(16 * 3999, 1), 3999);
        parcel_to_gso_reference::<Ip6>(true, &payload(5 * 1000 + 321, 2), 1000);
    }

    #[test]
    fn a_gso_frame_becomes_parcels_within_the_mtu_and_the_bound() {
        // The lab's Linux send: 10500 bytes in segments of 1000, toward MTU 9000 (8 + 3).
        gso_to_parcels::<Ip4>(false, &payload(10500, 3), 1000, 32, 9000);
        gso_to_parcels::<Ip6>(true, &payload(10500, 4), 1000, 32, 9000);
        gso_to_parcels::<Ip4>(false, &payload(64000, 5), 1000, 16, 65535);
    }

    #[test]
    fn one_segment_frames_and_oversized_parcels_stay_as_they_are() {
        let mut pool = Pool::new(8, 8);
        let b = gso_frame(&mut pool, false, &payload(900, 0), 1000);
        assert_eq!(GsoFrame::of::<Ip4>(pool.get(b)), None);
        let g = GsoFrame { seg_len: 5000, payload: 20000 };
        assert_eq!(g.per_parcel::<Ip4>(32, 9000), None);
        assert_eq!(g.per_parcel::<Ip4>(1, 65535), None);
        // A parcel of one segment is one datagram, not a GSO frame.
        let p = parcel(&mut pool, false, &payload(700, 0), 1000);
        let s = Ip4::check(pool.get(p).bytes()).unwrap();
        assert!(!parcel_to_gso::<Ip4>(pool.get_mut(p), &s));
        assert_eq!(pool.get(p).meta.offload.gso, GsoKind::None);
    }

    #[test]
    fn out_of_buffers_leaves_the_frame_whole() {
        let mut pool = Pool::new(4, 1);
        let b = gso_frame(&mut pool, false, &payload(10000, 0), 1000);
        // Two parcels needed, one large buffer left: none made, nothing held.
        let g = GsoFrame::of::<Ip4>(pool.get(b)).unwrap();
        let mut made = Vec::new();
        assert_eq!(to_parcels::<Ip4>(&mut pool, b, g, 5, None, &mut made), None);
        assert!(made.is_empty());
        assert_eq!(pool.stats().large_free, 0, "the frame holds the only large buffer");
    }

    #[test]
    fn out_of_buffers_chained_lets_the_frame_go_as_it_was() {
        // Two chained parcels of 5000 bytes need two heads of their class; one is there:
        // the first parcel made and given back, its hold on the frame with it.
        let mut pool = Pool::new(4, 2);
        let b = gso_frame(&mut pool, false, &payload(10000, 0), 1000);
        let g = GsoFrame::of::<Ip4>(pool.get(b)).unwrap();
        let earlier = pool.alloc(10).unwrap();
        let mut made = vec![earlier];
        assert_eq!(to_parcels::<Ip4>(&mut pool, b, g, 5, Some(14), &mut made), None);
        assert_eq!(made, [earlier], "what was in `made` before is left");
        assert!(!pool.has_chains());
        assert_eq!(pool.in_use(), 2);
        pool.free(earlier);
        // The frame is whole and held once: freed once, every buffer is free.
        assert_eq!(GsoFrame::of::<Ip4>(pool.get(b)), Some(g));
        pool.free(b);
        assert_eq!(pool.in_use(), 0);
        assert_eq!((pool.stats().large_free, pool.stats().regular_free), (2, 4));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn parcels_and_gso_frames_carry_the_same_segments(v6: bool, seg_len in 1usize..3000, n in 2usize..24, last in 1usize..3000, max in 1usize..40, mtu in 1500usize..70000, seed: u8) {
            let len = (n - 1) * seg_len + last.min(seg_len);
            let data = payload(len, seed);
            // A GSO frame is at most 64 KiB (its IP length field); a parcel may be more.
            let frame_fits = len + 48 <= MAX_GSO_FRAME;
            if v6 {
                parcel_to_gso_reference::<Ip6>(true, &data, seg_len);
                if frame_fits {
                    gso_to_parcels::<Ip6>(true, &data, seg_len, max, mtu);
                }
            } else {
                parcel_to_gso_reference::<Ip4>(false, &data, seg_len);
                if frame_fits {
                    gso_to_parcels::<Ip4>(false, &data, seg_len, max, mtu);
                }
            }
        }
    }
}
