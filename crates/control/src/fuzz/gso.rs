//! The `gso` target: the virtio-net header parser and the conversions between UDP GSO
//! frames and IP parcels (`parcel::nodes::gso`), the two ways a parcel meets Linux's
//! UDP_SEGMENT / UDP_GRO. An input is a frame as an af_packet socket hands it over: its
//! vnet header, then an IP packet (behind an Ethernet header the target adds, since the
//! header's offsets count from it). What it checks, beyond not panicking:
//! - the header emits back to the same bytes it parsed from, and the header made again
//!   from a buffer's metadata (`VnetHdr::for_buffer`) gives that metadata back;
//! - a GSO frame made into parcels (`to_parcels`): every parcel within the link's MTU and
//!   the segment bound, valid (layout, UDP header checksum, each segment against its
//!   slot), and together holding the frame's payload, segment for segment as the
//!   engine's own software GSO (`ip-gso-segment`) cuts it, when it can; the chained
//!   parcels (toward a resolved next hop) the copied ones' bytes;
//! - a valid parcel made into a GSO frame (`parcel_to_gso`): a frame `GsoFrame::of`
//!   takes back, whose segments (cut by the software GSO, checksums completed and
//!   verified) are the parcel's;
//! - no buffer is left held.
//!
//! Input format (what `fuzz/make_gso_corpus.py` writes): `[max segments u8][link MTU u16
//! BE][vnet header, 10 bytes, little-endian fields as on x86][IP packet]`.

use engine::{BufIdx, GsoKind, Pool};
use io::vnet::{VnetHdr, VNET_HDR_LEN};
use ip::nodes::family::{Ip4, Ip6};
use ip::nodes::gso_segment::{self, GsoSegmentNext};
use parcel::nodes::gso::{parcel_to_gso, to_parcels, GsoFrame};
use parcel::nodes::input::bad_segments;
use parcel::nodes::ParcelFamily;
use std::cell::RefCell;

/// Segments cut by the software GSO for the cross-check, at most (each takes a buffer).
const MAX_REFERENCE_SEGMENTS: usize = 64;

thread_local! {
    /// One pool for every input (making large buffers per input would be most of the time).
    static POOL: RefCell<Pool> = RefCell::new(Pool::with_classes(256, 16, 16));
}

/// Which conversion an input went through (for the corpus test: the seeds reach both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// A UDP GSO frame became parcels.
    GsoToParcels,
    /// A parcel became a UDP GSO frame.
    ParcelToGso,
    /// Neither: refused on the way (the header, the frame, the bounds, the buffers).
    Neither,
}

pub fn run(data: &[u8]) {
    exercise(data);
}

/// [`run`], saying which conversion the input took.
pub fn exercise(data: &[u8]) -> Taken {
    let Some((head, rest)) = data.split_first_chunk::<3>() else { return Taken::Neither };
    let Some((vnet, packet)) = rest.split_first_chunk::<VNET_HDR_LEN>() else { return Taken::Neither };
    let (max, mtu) = (head[0] as usize, u16::from_be_bytes([head[1], head[2]]) as usize);
    let hdr = VnetHdr::parse(vnet);
    assert_eq!(&hdr.emit(), vnet, "the vnet header emits back to its bytes");
    POOL.with(|pool| {
        let pool = &mut pool.borrow_mut();
        let taken = one_frame(pool, hdr, packet, max, mtu);
        assert_eq!(pool.in_use(), 0, "buffers held after the conversions");
        taken
    })
}

fn one_frame(pool: &mut Pool, hdr: VnetHdr, packet: &[u8], max: usize, mtu: usize) -> Taken {
    let v6 = packet.first().is_some_and(|v| v >> 4 == 6);
    let mut frame = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    if v6 {
        frame[12..14].copy_from_slice(&[0x86, 0xdd]);
    }
    frame.extend_from_slice(packet);
    let Some(bi) = pool.alloc(frame.len()) else { return Taken::Neither };
    if pool.get_mut(bi).write(&frame).is_err() || hdr.apply_to(pool.get_mut(bi)).is_err() {
        pool.free(bi);
        return Taken::Neither;
    }
    let buf = pool.get(bi);
    let o = buf.meta.offload;
    if o.has_partial_checksum() {
        let start = o.csum_start as usize - buf.offset();
        assert!(start + o.csum_offset as usize + 2 <= buf.len(), "a partial checksum inside the frame");
    }
    // The header the transmit side would write gives the same work back.
    if let Some(again) = VnetHdr::for_buffer(buf) {
        if let Some(copy) = pool.alloc(frame.len()) {
            pool.get_mut(copy).write(&frame).expect("same size as the frame");
            again.apply_to(pool.get_mut(copy)).expect("a header made from metadata applies");
            assert_eq!(pool.get(copy).meta.offload, pool.get(bi).meta.offload, "vnet header round trip ({hdr:?} -> {again:?})");
            pool.free(copy);
        }
    }
    // As `ethernet-input` hands it on.
    pool.get_mut(bi).advance(14).expect("the frame has its Ethernet header");
    if v6 {
        conversions::<Ip6>(pool, bi, max, mtu)
    } else {
        conversions::<Ip4>(pool, bi, max, mtu)
    }
}

/// The conversion the frame `bi` takes, if any, checked; `bi` is freed.
fn conversions<F: ParcelFamily>(pool: &mut Pool, bi: BufIdx, max: usize, mtu: usize) -> Taken {
    match GsoFrame::of::<F>(pool.get(bi)) {
        Some(g) => gso_to_parcels::<F>(pool, bi, g, max, mtu),
        None => parcel_to_frame::<F>(pool, bi),
    }
}

fn gso_to_parcels<F: ParcelFamily>(pool: &mut Pool, bi: BufIdx, g: GsoFrame, max: usize, mtu: usize) -> Taken {
    let payload = pool.get(bi).bytes()[F::DATAGRAM_IP_LEN + 8..].to_vec();
    assert_eq!(payload.len(), g.payload);
    let Some(per) = g.per_parcel::<F>(max, mtu) else {
        pool.free(bi);
        return Taken::Neither;
    };
    assert!((2..=max.min(255)).contains(&per), "{per} segments per parcel, bound {max}");
    let mut made = Vec::new();
    let Some(n) = to_parcels::<F>(pool, bi, g, per, None, &mut made) else {
        // Out of buffers: nothing made.
        assert!(made.is_empty());
        pool.free(bi);
        return Taken::Neither;
    };
    assert_eq!(n, made.len());
    let mut segments = Vec::new();
    for &d in &made {
        let p = pool.get(d).bytes();
        assert!(p.len() <= mtu, "a parcel of {} bytes over the MTU {mtu}", p.len());
        let (s, udp_ok) = F::check_with_udp(p).unwrap_or_else(|e| panic!("a parcel made from a GSO frame does not parse: {e}"));
        assert!(udp_ok, "parcel UDP header checksum");
        assert_eq!(bad_segments(p, &s), 0, "a slot does not match its segment");
        assert!(s.nsegs <= per && s.seg_len == g.seg_len);
        segments.extend((0..s.nsegs).map(|i| p[s.segment(i)].to_vec()));
    }
    // Chained (toward a resolved next hop), the same bytes; the frame held by each.
    let mut chained = Vec::new();
    if to_parcels::<F>(pool, bi, g, per, Some(wire::ethernet::HEADER_LEN), &mut chained).is_some() {
        for (&c, &d) in chained.iter().zip(&made) {
            assert_eq!(
                [pool.get(c).bytes(), &pool.extent_bytes(c)].concat(),
                pool.get(d).bytes(),
                "a chained parcel is not the copied one"
            );
        }
        pool.free_many(&chained);
    }
    pool.free_many(&made);
    let want: Vec<Vec<u8>> = payload.chunks(g.seg_len).map(<[u8]>::to_vec).collect();
    assert_eq!(segments, want, "the parcels hold the frame's segments");
    if g.segments() <= MAX_REFERENCE_SEGMENTS {
        if let Some(reference) = software_segments(pool, bi) {
            assert_eq!(reference, want, "the software GSO cuts the same segments");
        }
    } else {
        pool.free(bi);
    }
    Taken::GsoToParcels
}

fn parcel_to_frame<F: ParcelFamily>(pool: &mut Pool, bi: BufIdx) -> Taken {
    let b = pool.get(bi).bytes();
    let Ok((s, true)) = F::check_with_udp(b) else {
        pool.free(bi);
        return Taken::Neither;
    };
    if bad_segments(b, &s) != 0 {
        pool.free(bi);
        return Taken::Neither;
    }
    let segments: Vec<Vec<u8>> = (0..s.nsegs).map(|i| b[s.segment(i)].to_vec()).collect();
    let buf = pool.get_mut(bi);
    buf.truncate(s.total_len);
    if !parcel_to_gso::<F>(buf, &s) {
        assert!(s.nsegs < 2 || F::DATAGRAM_IP_LEN + 8 + (s.total_len - s.data_at) > parcel::nodes::gso::MAX_GSO_FRAME);
        pool.free(bi);
        return Taken::Neither;
    }
    let g = GsoFrame::of::<F>(pool.get(bi)).expect("a parcel made into a GSO frame is one");
    assert_eq!((g.seg_len, g.segments()), (s.seg_len, s.nsegs));
    assert_eq!(pool.get(bi).bytes()[F::DATAGRAM_IP_LEN + 8..], segments.concat()[..]);
    if s.nsegs <= MAX_REFERENCE_SEGMENTS {
        if let Some(reference) = software_segments(pool, bi) {
            assert_eq!(reference, segments, "the kernel's cut (our software GSO) gives the parcel's segments");
        }
    } else {
        pool.free(bi);
    }
    Taken::ParcelToGso
}

/// The UDP payloads of the datagrams the software GSO cuts frame `bi` into, each one's
/// checksums completed and verified; `None` when it has no buffers (all freed either way).
fn software_segments(pool: &mut Pool, bi: BufIdx) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let cut = gso_segment::segment(pool, bi, &mut out);
    pool.free(bi);
    if cut.is_err() {
        pool.free_many(&out.iter().map(|&(d, _)| d).collect::<Vec<_>>());
        return None;
    }
    let mut payloads = Vec::new();
    for &(d, next) in &out {
        let buf = pool.get_mut(d);
        let v6 = next == GsoSegmentNext::Ip6Lookup;
        let (start, offset) = buf.take_partial_checksum().expect("software GSO leaves each datagram's checksum partial");
        assert!(wire::checksum::complete_partial(buf.bytes_mut(), start, offset));
        let p = buf.bytes();
        let hl = if v6 { 40 } else { 20 };
        let udp = wire::udp::UdpPacket::new_checked(&p[hl..]).expect("a datagram's UDP header");
        let ok = if v6 {
            let a = |at: usize| std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&p[at..at + 16]).expect("16 bytes"));
            udp.verify_checksum_v6(&a(8), &a(24))
        } else {
            assert!(wire::checksum::verify(&p[..20]), "a datagram's IPv4 header checksum");
            udp.verify_checksum_v4([p[12], p[13], p[14], p[15]].into(), [p[16], p[17], p[18], p[19]].into())
        };
        assert!(ok, "a datagram's UDP checksum");
        assert_eq!(buf.meta.offload.gso, GsoKind::None);
        payloads.push(udp.payload().to_vec());
    }
    pool.free_many(&out.iter().map(|&(d, _)| d).collect::<Vec<_>>());
    Some(payloads)
}
