//! `ip-gso-segment`: software segmentation of a GSO frame (a local sender's large TCP
//! or UDP frame that arrived whole over a vnet-header device) into packets of one
//! segment each, for paths the transmitting kernel cannot segment for us — above all
//! into a tunnel, where the segments must each be encapsulated. The packet starts at its
//! IP header; segments go back to `ipN-lookup`, which routes them like any packet.
//!
//! Each segment gets the original headers with its own lengths (and IPv4 ID and header
//! checksum; TCP sequence number and flags: FIN and PSH only on the last, CWR only on the
//! first) and a partial L4 checksum (the pseudo-header sum in the field), completed by
//! whoever sends it: the encapsulating node, or the transmitting device.
//!
//! Decapsulation needs it too: a UDP GSO frame to one of our tunnel ports (a local
//! sender's datagrams over a vnet-header device, each a G-PDU, a GUE packet or ESP) is
//! cut here before any tunnel node sees it ([`several_datagrams`], asked by `ipN-local`
//! where it hands UDP to the tunnel input nodes; `ethernet-input`'s bypass leaves GSO
//! frames to that path), since a tunnel node decapsulates one datagram a buffer.

use crate::context::HasIp;
use engine::{BufIdx, Buffer, Counts, ExpandNode, GsoKind, Pool};
use wire::checksum::{pseudo_header_v4, pseudo_header_v6};

engine::next_nodes! {
    pub enum GsoSegmentNext { Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup" }
}

engine::counters! {
    pub enum GsoSegmentCounter {
        Segmented(Info, "frames-segmented", "GSO frames cut into segments in software"),
        Segments(Info, "segments", "segments produced"),
        BadFrame(Warn, "bad-gso-frame", "GSO metadata inconsistent with the headers: dropped"),
        NoBuffer(Error, "no-buffer", "out of buffers while segmenting: the rest of the frame dropped"),
    }
}

pub struct GsoSegment;

/// Where the headers of a GSO frame end and what they are.
struct Layout {
    v6: bool,
    l4: usize,
    hdr_len: usize,
    tcp: bool,
}

fn layout(p: &[u8], l4: usize, gso: GsoKind) -> Option<Layout> {
    let v6 = match p.first()? >> 4 {
        4 => false,
        6 => true,
        _ => return None,
    };
    let min_l3 = if v6 { 40 } else { 20 };
    let (tcp, l4_len) = match gso {
        GsoKind::Tcp4 | GsoKind::Tcp6 => (true, wire::tcp::header_len_at(p, l4)?),
        GsoKind::UdpL4 => (false, 8),
        GsoKind::None => return None,
    };
    if l4 < min_l3 || (tcp && l4_len < 20) || l4 + l4_len > p.len() || (gso == GsoKind::Tcp4 && v6) || (gso == GsoKind::Tcp6 && !v6) {
        return None;
    }
    Some(Layout { v6, l4, hdr_len: l4 + l4_len, tcp })
}

impl<Cx: HasIp> ExpandNode<Cx> for GsoSegment {
    type Next = GsoSegmentNext;
    type Counter = GsoSegmentCounter;

    fn name(&self) -> &'static str {
        "ip-gso-segment"
    }

    fn expand(
        &mut self,
        _cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        counts.inc(GsoSegmentCounter::Segmented);
        let from = out.len();
        let r = segment(pool, bi, out);
        counts.add(GsoSegmentCounter::Segments, (out.len() - from) as u64);
        r
    }
}

/// Whether `buf`, a UDP datagram, is a UDP GSO frame of more than one datagram, which a
/// node that takes one datagram a buffer (a tunnel's decapsulation) must have cut first
/// ([`segment`]): its payload past the UDP header (found by its pending checksum, as
/// [`segment`] finds it) longer than one segment. A frame whose checksum start is not in
/// the packet is one too, so that the segmenter, not a tunnel node, judges it (and counts
/// it `bad-gso-frame`). A frame of one segment is a plain datagram (`Buffer::decapsulate`
/// drops its mark); a TCP GSO kind on a UDP datagram is no frame a kernel makes, and the
/// datagram is taken as one. One compare on a packet without GSO.
#[inline(always)]
pub fn several_datagrams(buf: &Buffer) -> bool {
    let o = &buf.meta.offload;
    if o.gso != GsoKind::UdpL4 {
        return false;
    }
    match (o.csum_start as usize).checked_sub(buf.offset()).filter(|_| o.has_partial_checksum()) {
        Some(l4) => buf.len().saturating_sub(l4 + 8) > o.gso_size as usize,
        None => true,
    }
}

/// Cut the GSO frame `bi` into segments, pushed to `out` with their next node; the input
/// buffer is left to the caller. On error, the segments already pushed stand.
pub fn segment(pool: &mut Pool, bi: BufIdx, out: &mut Vec<(BufIdx, GsoSegmentNext)>) -> Result<(), GsoSegmentCounter> {
    use GsoSegmentCounter as C;
    let src = pool.get(bi);
    let meta = src.meta;
    let o = meta.offload;
    let l4 = (o.csum_start as usize).checked_sub(src.offset()).ok_or(C::BadFrame)?;
    let lay = layout(src.bytes(), l4, o.gso).ok_or(C::BadFrame)?;
    let mss = o.gso_size as usize;
    let total = src.len();
    if mss == 0 || total <= lay.hdr_len {
        return Err(C::BadFrame);
    }
    let next = if lay.v6 { GsoSegmentNext::Ip6Lookup } else { GsoSegmentNext::Ip4Lookup };
    let payload = total - lay.hdr_len;
    let n = payload.div_ceil(mss);
    for i in 0..n {
        let from = lay.hdr_len + i * mss;
        let chunk = mss.min(total - from);
        let seg_len = lay.hdr_len + chunk;
        let Some(d) = pool.alloc(seg_len) else { return Err(C::NoBuffer) };
        let Some((src, dst)) = pool.two_mut(bi, d) else {
            pool.free(d);
            return Err(C::NoBuffer);
        };
        let s = src.bytes();
        if dst.set_len(seg_len).is_err() {
            pool.free(d);
            return Err(C::NoBuffer);
        }
        let b = dst.bytes_mut();
        b[..lay.hdr_len].copy_from_slice(&s[..lay.hdr_len]);
        b[lay.hdr_len..].copy_from_slice(&s[from..from + chunk]);
        let l4_len = seg_len - lay.l4;
        let proto = if lay.tcp { 6 } else { 17 };
        let pseudo = if lay.v6 {
            b[4..6].copy_from_slice(&((seg_len - 40) as u16).to_be_bytes());
            let sa = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).expect("16 bytes"));
            let da = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&b[24..40]).expect("16 bytes"));
            pseudo_header_v6(&sa, &da, proto, l4_len as u32)
        } else {
            b[2..4].copy_from_slice(&(seg_len as u16).to_be_bytes());
            let id = u16::from_be_bytes([b[4], b[5]]).wrapping_add(i as u16);
            b[4..6].copy_from_slice(&id.to_be_bytes());
            b[10..12].copy_from_slice(&[0, 0]);
            let ihl = (b[0] & 0x0f) as usize * 4;
            let c = wire::checksum::checksum(&b[..ihl.min(lay.l4)]);
            b[10..12].copy_from_slice(&c.to_be_bytes());
            let sa = std::net::Ipv4Addr::new(b[12], b[13], b[14], b[15]);
            let da = std::net::Ipv4Addr::new(b[16], b[17], b[18], b[19]);
            pseudo_header_v4(sa, da, proto, l4_len as u16)
        };
        let t = &mut b[lay.l4..];
        let field = if lay.tcp {
            let seq = u32::from_be_bytes([t[4], t[5], t[6], t[7]]).wrapping_add((i * mss) as u32);
            t[4..8].copy_from_slice(&seq.to_be_bytes());
            if i + 1 < n {
                t[13] &= !(0x01 | 0x08); // FIN, PSH: the last segment's
            }
            if i > 0 {
                t[13] &= !0x80; // CWR: the first segment's
            }
            16
        } else {
            t[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            6
        };
        t[field..field + 2].copy_from_slice(&pseudo.fold().to_be_bytes());
        dst.meta = meta;
        dst.meta.offload = engine::Offload::default();
        dst.set_partial_checksum(lay.l4, field);
        out.push((d, next));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::Offload;
    use wire::checksum::{complete_partial, verify, Checksum};

    /// A GSO frame of `payload` bytes after IPv4/IPv6 + TCP/UDP headers, as a local
    /// sender hands it over: lengths of the whole, a partial L4 checksum.
    fn frame(pool: &mut Pool, v6: bool, tcp: bool, payload: usize, mss: u16) -> BufIdx {
        let l3 = if v6 { 40 } else { 20 };
        let l4h = if tcp { 20 } else { 8 };
        let total = l3 + l4h + payload;
        let mut p = vec![0u8; total];
        let proto = if tcp { 6 } else { 17 };
        if v6 {
            p[0] = 0x60;
            p[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
            p[6] = proto;
            p[7] = 64;
            p[8..24].copy_from_slice(&"2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
            p[24..40].copy_from_slice(&"2001:db8:1::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        } else {
            p[0] = 0x45;
            p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
            p[8] = 64;
            p[9] = proto;
            p[12..16].copy_from_slice(&[198, 18, 0, 2]);
            p[16..20].copy_from_slice(&[198, 18, 1, 2]);
        }
        let t = &mut p[l3..];
        t[0..4].copy_from_slice(&[0x30, 0x39, 0x1b, 0x58]);
        if tcp {
            t[4..8].copy_from_slice(&1000u32.to_be_bytes());
            t[12] = 5 << 4;
            t[13] = 0x80 | 0x18 | 0x01; // CWR, PSH, ACK, FIN
        } else {
            t[4..6].copy_from_slice(&((total - l3) as u16).to_be_bytes());
        }
        for (i, b) in p[l3 + l4h..].iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let b = pool.alloc(total).unwrap();
        let buf = pool.get_mut(b);
        buf.write(&p).unwrap();
        let gso = match (v6, tcp) {
            (false, true) => GsoKind::Tcp4,
            (true, true) => GsoKind::Tcp6,
            _ => GsoKind::UdpL4,
        };
        buf.meta.offload = Offload { gso, gso_size: mss, ..Default::default() };
        buf.set_partial_checksum(l3, if tcp { 16 } else { 6 });
        b
    }

    fn pseudo_ok(seg: &[u8], v6: bool, proto: u8) -> bool {
        let l3 = if v6 { 40 } else { 20 };
        let ph = if v6 {
            let s = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&seg[8..24]).unwrap());
            let d = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&seg[24..40]).unwrap());
            pseudo_header_v6(&s, &d, proto, (seg.len() - l3) as u32)
        } else {
            let s = std::net::Ipv4Addr::new(seg[12], seg[13], seg[14], seg[15]);
            let d = std::net::Ipv4Addr::new(seg[16], seg[17], seg[18], seg[19]);
            pseudo_header_v4(s, d, proto, (seg.len() - l3) as u16)
        };
        Checksum::new().add(ph).add_bytes(&seg[l3..]).fold() == 0xffff
    }

    #[test]
    fn segments_are_whole_packets_with_their_own_headers() {
        for (v6, tcp) in [(false, true), (true, true), (false, false), (true, false)] {
            let mut pool = Pool::new(16, 1);
            let b = frame(&mut pool, v6, tcp, 2500, 1000);
            let mut out = Vec::new();
            segment(&mut pool, b, &mut out).unwrap();
            assert_eq!(out.len(), 3, "v6 {v6} tcp {tcp}");
            let l3 = if v6 { 40 } else { 20 };
            let l4h = if tcp { 20 } else { 8 };
            let mut payload = Vec::new();
            for (i, &(s, next)) in out.iter().enumerate() {
                assert_eq!(next, if v6 { GsoSegmentNext::Ip6Lookup } else { GsoSegmentNext::Ip4Lookup });
                let buf = pool.get_mut(s);
                assert_eq!(buf.meta.offload.gso, GsoKind::None);
                let (start, off) = buf.take_partial_checksum().expect("segments carry a partial checksum");
                assert_eq!(start, l3);
                assert!(complete_partial(buf.bytes_mut(), start, off));
                let p = buf.bytes();
                let want = l3 + l4h + if i < 2 { 1000 } else { 500 };
                assert_eq!(p.len(), want);
                assert!(pseudo_ok(p, v6, if tcp { 6 } else { 17 }), "L4 checksum of segment {i}");
                if v6 {
                    assert_eq!(u16::from_be_bytes([p[4], p[5]]) as usize, want - 40);
                } else {
                    assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, want);
                    assert_eq!(u16::from_be_bytes([p[4], p[5]]), 0x1234 + i as u16);
                    assert!(verify(&p[..20]));
                }
                let t = &p[l3..];
                if tcp {
                    assert_eq!(u32::from_be_bytes([t[4], t[5], t[6], t[7]]), 1000 + 1000 * i as u32);
                    assert_eq!(t[13] & 0x80 != 0, i == 0, "CWR on the first only");
                    assert_eq!(t[13] & 0x09 != 0, i == 2, "FIN and PSH on the last only");
                    assert_eq!(t[13] & 0x10, 0x10, "ACK on all");
                } else {
                    assert_eq!(u16::from_be_bytes([t[4], t[5]]) as usize, want - l3);
                }
                payload.extend_from_slice(&p[l3 + l4h..]);
            }
            assert!(payload.iter().enumerate().all(|(i, &b)| b == (i * 7) as u8), "payload reassembles in order");
        }
    }

    #[test]
    fn inconsistent_metadata_is_refused() {
        let mut pool = Pool::new(8, 3);
        let b = frame(&mut pool, false, true, 2500, 1000);
        pool.get_mut(b).meta.offload.gso = GsoKind::Tcp6; // says IPv6, is IPv4
        assert_eq!(segment(&mut pool, b, &mut Vec::new()), Err(GsoSegmentCounter::BadFrame));
        let b = frame(&mut pool, false, true, 2500, 0);
        assert_eq!(segment(&mut pool, b, &mut Vec::new()), Err(GsoSegmentCounter::BadFrame));
        let b = frame(&mut pool, true, true, 2500, 100); // 25 segments, 8 buffers
        let mut out = Vec::new();
        assert_eq!(segment(&mut pool, b, &mut out), Err(GsoSegmentCounter::NoBuffer));
        assert!(!out.is_empty());
    }

    /// What `ipN-local` and `ethernet-input` ask before a tunnel node sees a UDP datagram:
    /// a UDP GSO frame of more than one segment, or one whose headers cannot be found
    /// (for the segmenter to refuse and count); not a packet without GSO, not a frame of
    /// one segment, not a TCP kind.
    #[test]
    fn several_datagrams_is_a_udp_frame_of_more_than_one_segment() {
        let mut pool = Pool::new(4, 4);
        let mut several = |v6: bool, tcp: bool, payload: usize, edit: &dyn Fn(&mut Offload)| {
            let b = frame(&mut pool, v6, tcp, payload, 1000);
            edit(&mut pool.get_mut(b).meta.offload);
            let r = several_datagrams(pool.get(b));
            pool.free(b);
            r
        };
        for v6 in [false, true] {
            assert!(several(v6, false, 2500, &|_| {}), "v6 {v6}: three segments");
            assert!(!several(v6, false, 1000, &|_| {}), "v6 {v6}: one whole segment");
            assert!(several(v6, false, 1001, &|_| {}), "v6 {v6}: a segment and a byte");
            assert!(several(v6, false, 2500, &|o| o.csum_start = 0), "v6 {v6}: headers not found, to the segmenter");
            assert!(!several(v6, false, 2500, &|o| *o = Offload::default()), "v6 {v6}: no GSO");
            assert!(!several(v6, true, 2500, &|_| {}), "v6 {v6}: TCP");
        }
    }
}
