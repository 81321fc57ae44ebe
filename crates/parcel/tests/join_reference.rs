//! `parcelN-join`'s chained parcel (headers and integrity block in a buffer of their own,
//! each segment left where it lies in its datagram's buffer) against the copying join:
//! the same bytes, whatever the runs' flows, sizes and counts, datagrams without a UDP
//! checksum or with a wrong one; and every buffer back in the pool exactly once (the
//! datagrams' with their parcel's), whatever the order the parcels are freed in, made
//! whole first or not. The copying join's parcels are also
//! checked on their own: a valid parcel, each slot matching its segment exactly where the
//! datagram's checksum was right. The same for a UDP GSO frame's parcels
//! (`gso::to_parcels`): chained, each parcel's segments one extent in the frame's buffer,
//! the frame held by every parcel and by its caller, freed in any order.

use crate::common;

use engine::{BufIdx, Pool};
use ip::nodes::family::{Ip4, Ip6};
use parcel::nodes::gso::{to_parcels, GsoFrame};
use parcel::nodes::join::join_run;
use parcel::nodes::ParcelFamily;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::parcel::{Parcel4, Parcel6};

/// What a datagram's UDP checksum field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sum {
    Right,
    /// 0: sent without one (the join sums the segment).
    None,
    /// The right one with these bits flipped (never 0 after).
    Wrong(u16),
}

/// One run of datagrams of one flow and one length, as the join's plan finds them.
#[derive(Debug, Clone)]
struct Run {
    addrs: (u32, u32),
    ports: (u16, u16),
    tos: u8,
    ttl: u8,
    ident: u16,
    payloads: Vec<Vec<u8>>,
    sums: Vec<Sum>,
    /// How far into its buffer each datagram starts, past the headroom.
    offsets: Vec<usize>,
}

fn sum_strategy() -> impl Strategy<Value = Sum> {
    prop_oneof![6 => Just(Sum::Right), 2 => Just(Sum::None), 2 => (1u16..).prop_map(Sum::Wrong)]
}

fn run_strategy() -> impl Strategy<Value = Run> {
    (1usize..=20, 1usize..=1400).prop_flat_map(|(n, len)| {
        (
            (any::<u32>(), any::<u32>()),
            (1u16.., 1u16..),
            any::<u8>(),
            2u8..=255,
            any::<u16>(),
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), len), n),
            proptest::collection::vec(sum_strategy(), n),
            proptest::collection::vec(0usize..200, n),
        )
            .prop_map(move |(addrs, ports, tos, ttl, ident, payloads, sums, offsets)| Run {
                addrs,
                ports,
                tos,
                ttl,
                ident,
                payloads,
                sums,
                offsets,
            })
    })
}

/// Datagram `i` of `run`, IPv4 or IPv6, its UDP checksum as the run says.
fn datagram(run: &Run, i: usize, v6: bool) -> Vec<u8> {
    datagram_of(run, i, v6, &run.payloads[i])
}

/// [`datagram`] with `payload` in place of the run's.
fn datagram_of(run: &Run, i: usize, v6: bool, payload: &[u8]) -> Vec<u8> {
    let v6addr = |a: u32| Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, (a >> 16) as u16, a as u16);
    let mut b = common::Datagram {
        v6,
        src4: Ipv4Addr::from(run.addrs.0),
        dst4: Ipv4Addr::from(run.addrs.1),
        src6: v6addr(run.addrs.0),
        dst6: v6addr(run.addrs.1),
        ports: run.ports,
        ttl: run.ttl,
        tos: run.tos,
        ident: run.ident.wrapping_add(i as u16),
        dont_frag: false,
        flow_label: 0x54321,
    }
    .build(payload);
    let hl = if v6 { 40 } else { 20 };
    let right = u16::from_be_bytes([b[hl + 6], b[hl + 7]]);
    let field = match run.sums[i] {
        Sum::Right => right,
        Sum::None => 0,
        Sum::Wrong(x) => match right ^ x {
            0 => right ^ 1,
            w => w,
        },
    };
    b[hl + 6..hl + 8].copy_from_slice(&field.to_be_bytes());
    b
}

/// The runs' datagrams in buffers of `pool`, each at its offset past the headroom.
fn load(pool: &mut Pool, runs: &[Run], v6: bool) -> Vec<Vec<BufIdx>> {
    runs.iter()
        .map(|run| {
            (0..run.payloads.len())
                .map(|i| {
                    let d = datagram(run, i, v6);
                    let b = pool.alloc(run.offsets[i] + d.len()).expect("a buffer a datagram");
                    let buf = pool.get_mut(b);
                    buf.write(&[vec![0xa5; run.offsets[i]], d].concat()).expect("fits");
                    buf.advance(run.offsets[i]).expect("in the packet");
                    b
                })
                .collect()
        })
        .collect()
}

const BUFFERS: (usize, usize, usize) = (96, 4, 6);

/// The copying join's parcels, each run's datagrams freed as the dispatcher frees them;
/// and the segments summed.
fn copied<F: ParcelFamily>(runs: &[Run], v6: bool) -> (Vec<Vec<u8>>, u64) {
    let mut pool = Pool::with_classes(BUFFERS.0, BUFFERS.1, BUFFERS.2);
    let mut summed = 0;
    let mut out = Vec::new();
    for run in load(&mut pool, runs, v6) {
        let p = join_run::<F>(&mut pool, &run, None, &mut summed).expect("a buffer for the parcel");
        assert_eq!(pool.extent_len(p), 0);
        out.push(pool.get(p).bytes().to_vec());
        pool.free_many(&run);
        pool.free(p);
    }
    assert_eq!(pool.in_use(), 0);
    (out, summed)
}

/// The chained join's parcels (head bytes then extents', and once made whole for some),
/// freed in the order `seed` picks, their datagrams with them; the segments summed and
/// the buffers left in use, after checking that each buffer allocates exactly once.
fn chained<F: ParcelFamily>(runs: &[Run], v6: bool, seed: u64) -> (Vec<Vec<u8>>, u64, usize) {
    let mut pool = Pool::with_classes(BUFFERS.0, BUFFERS.1, BUFFERS.2);
    let l2_len = wire::ethernet::HEADER_LEN;
    let mut summed = 0;
    let mut out = Vec::new();
    let mut all = Vec::new();
    let mut datagrams = 0;
    for (r, run) in load(&mut pool, runs, v6).into_iter().enumerate() {
        let p = join_run::<F>(&mut pool, &run, Some(l2_len), &mut summed).expect("a buffer for the parcel");
        let h = pool.get(p);
        assert_eq!(h.len(), F::PARCEL_HEADER_LEN + 8 + 2 * run.len(), "the head holds the headers and the slots");
        assert!(h.headroom() >= l2_len);
        assert_eq!((h.bytes().as_ptr() as usize - l2_len) % engine::mem::LINE, 0, "the link header starts a line");
        assert_eq!(pool.extent_parts(p).count(), run.len(), "one extent a datagram");
        let whole = [pool.get(p).bytes(), &pool.extent_bytes(p)].concat();
        datagrams += run.len();
        assert_eq!(pool.extent_len(p), whole.len() - pool.get(p).len());
        if (seed >> (r % 64)) & 1 == 1 {
            // Made whole, the parcel lets its datagrams go.
            datagrams -= run.len();
            pool.linearize(p);
            assert_eq!(pool.extent_len(p), 0);
            assert_eq!(pool.get(p).bytes(), &whole[..], "parcel {r} the same once made whole");
        }
        out.push(whole);
        all.push(p);
    }
    // The parcels hold their datagrams (the caller frees none of them): each is still in
    // use until its parcel goes or is made whole.
    assert_eq!(pool.in_use(), all.len() + datagrams);
    // Free the parcels in the seed's order, some one by one, the rest in one call.
    let n = all.len();
    for i in (1..n).rev() {
        all.swap(i, (seed.wrapping_mul(i as u64 + 13) >> 9) as usize % (i + 1));
    }
    let batch = (seed >> 23) as usize % (n + 1);
    for &b in &all[..batch] {
        pool.free(b);
    }
    pool.free_many(&all[batch..]);
    assert!(!pool.has_chains(), "every extent let go");
    let in_use = pool.in_use();
    assert_eq!(common::allocate_each_once(&mut pool) + in_use, BUFFERS.0 + BUFFERS.1 + BUFFERS.2);
    (out, summed, in_use)
}

/// Check a copying join's parcel on its own: it parses, its UDP header checksum holds, its
/// segments are the payloads, and a slot matches its segment exactly where the datagram's
/// checksum was right or absent.
fn check_parcel(parcel: &[u8], run: &Run, v6: bool) {
    let (segs, slots): (Vec<Vec<u8>>, Vec<u16>) = if v6 {
        let p = Parcel6::new_checked(parcel).expect("a valid parcel");
        assert!(p.verify_udp_checksum().is_some());
        (p.segments().map(<[u8]>::to_vec).collect(), (0..p.segment_count()).map(|i| p.segment_checksum(i)).collect())
    } else {
        let p = Parcel4::new_checked(parcel).expect("a valid parcel");
        assert!(p.verify_udp_checksum().is_some());
        assert_eq!((p.ttl(), p.dscp_ecn(), p.ident()), (run.ttl, run.tos, run.ident));
        (p.segments().map(<[u8]>::to_vec).collect(), (0..p.segment_count()).map(|i| p.segment_checksum(i)).collect())
    };
    assert_eq!(segs, run.payloads);
    for (i, (seg, slot)) in segs.iter().zip(slots).enumerate() {
        let matches = wire::parcel::segment_checksum(seg) == slot;
        assert_eq!(matches, !matches!(run.sums[i], Sum::Wrong(_)), "segment {i}'s slot");
    }
}

/// A UDP GSO frame as a Linux sender hands it over a virtio-net header: one datagram's
/// headers (UDP length all of it, the checksum field the pseudo-header sum, partial) and
/// `payload` in segments of `gso_size`, `offset` bytes into its buffer past the headroom.
fn gso_frame(pool: &mut Pool, v6: bool, run: &Run, payload: &[u8], gso_size: usize, offset: usize) -> BufIdx {
    let hl = if v6 { 40 } else { 20 };
    let mut d = datagram_of(run, 0, v6, payload);
    let udp_len = (8 + payload.len()) as u16;
    let pseudo = if v6 {
        let a = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&d[at..at + 16]).unwrap());
        wire::checksum::pseudo_header_v6(&a(8), &a(24), 17, udp_len as u32)
    } else {
        wire::checksum::pseudo_header_v4(Ipv4Addr::from(run.addrs.0), Ipv4Addr::from(run.addrs.1), 17, udp_len)
    };
    d[hl + 6..hl + 8].copy_from_slice(&pseudo.fold().to_be_bytes());
    let b = pool.alloc(offset + d.len()).expect("a buffer for the frame");
    let buf = pool.get_mut(b);
    buf.write(&[vec![0xa5; offset], d].concat()).expect("fits");
    buf.advance(offset).expect("in the packet");
    buf.set_partial_checksum(hl, 6);
    buf.meta.offload.gso = engine::GsoKind::UdpL4;
    buf.meta.offload.gso_size = gso_size as u16;
    b
}

/// Enough for any frame's parcels: up to 32 of 2–16 KiB (medium), 3 over 16 KiB and the
/// frame (large).
const GSO_BUFFERS: (usize, usize, usize) = (128, 40, 8);

/// One GSO frame for the join: its flow (the run's headers; its payloads unused), data,
/// segment size, offset in its buffer, and the parcel link's bound and MTU.
#[derive(Debug, Clone)]
struct Frame {
    run: Run,
    data: Vec<u8>,
    gso_size: usize,
    offset: usize,
    max: usize,
    mtu: usize,
}

fn frame_strategy() -> impl Strategy<Value = Frame> {
    (1usize..=3000, 2usize..=40, 1usize..=3000).prop_flat_map(|(gso_size, n, last)| {
        // The frame at most 64 KiB (its IP length field).
        let n = n.min((65000 - 48) / gso_size).max(2);
        let len = (n - 1) * gso_size + last.min(gso_size);
        (run_strategy(), proptest::collection::vec(any::<u8>(), len), 0usize..200, 1usize..=40, 1500usize..=65535)
            .prop_map(move |(run, data, offset, max, mtu)| Frame { run, data, gso_size, offset, max, mtu })
    })
}

/// The frame's parcels, copied (`chain_l2` None) or chained, as bytes (chained ones made
/// whole when `seed` says so), every one checked against `Pool`'s view; then the frame
/// and the parcels freed in the order `seed` picks and each buffer allocated exactly once.
/// None when the frame is not made into parcels (fewer than two segments a parcel).
fn gso_parcels<F: ParcelFamily>(f: &Frame, v6: bool, chain_l2: Option<usize>, seed: u64) -> Option<Vec<Vec<u8>>> {
    let mut pool = Pool::with_classes(GSO_BUFFERS.0, GSO_BUFFERS.1, GSO_BUFFERS.2);
    let b = gso_frame(&mut pool, v6, &f.run, &f.data, f.gso_size, f.offset);
    let g = GsoFrame::of::<F>(pool.get(b)).expect("a GSO frame");
    let per = g.per_parcel::<F>(f.max, f.mtu)?;
    let mut made = Vec::new();
    let count = to_parcels::<F>(&mut pool, b, g, per, chain_l2, &mut made).expect("buffers for the parcels");
    assert_eq!(count, made.len());
    assert_eq!(count, g.segments().div_ceil(per));
    let mut out = Vec::new();
    for (j, &p) in made.iter().enumerate() {
        let k = per.min(g.segments() - j * per);
        let h = pool.get(p);
        match chain_l2 {
            Some(l2_len) => {
                assert_eq!(h.len(), F::PARCEL_HEADER_LEN + 8 + 2 * k, "the head holds the headers and the slots");
                assert!(h.headroom() >= l2_len);
                assert_eq!((h.bytes().as_ptr() as usize - l2_len) % engine::mem::LINE, 0, "the link header starts a line");
                assert_eq!(pool.extent_parts(p).count(), 1, "one extent a parcel");
            }
            None => assert_eq!(pool.extent_len(p), 0),
        }
        let whole = [pool.get(p).bytes(), &pool.extent_bytes(p)].concat();
        assert!(whole.len() <= f.mtu.min(wire::parcel::MAX_JUMBO_LEN), "parcel {j} over the MTU");
        if chain_l2.is_some() && (seed >> (j % 64)) & 1 == 1 {
            pool.linearize(p);
            assert_eq!(pool.extent_len(p), 0);
            assert_eq!(pool.get(p).bytes(), &whole[..], "parcel {j} the same once made whole");
        }
        out.push(whole);
    }
    // The caller's hold on the frame let go somewhere among the parcels' (the dispatcher
    // frees it after the call; the parcels go later, in any order).
    let mut all = made.clone();
    let n = all.len();
    for i in (1..n).rev() {
        all.swap(i, (seed.wrapping_mul(i as u64 + 13) >> 9) as usize % (i + 1));
    }
    let frame_at = (seed >> 17) as usize % (n + 1);
    all.insert(frame_at, b);
    let batch = (seed >> 23) as usize % (all.len() + 1);
    for &x in &all[..batch] {
        pool.free(x);
    }
    pool.free_many(&all[batch..]);
    assert!(!pool.has_chains(), "every extent let go");
    assert_eq!(pool.in_use(), 0, "every buffer back");
    assert_eq!(common::allocate_each_once(&mut pool), GSO_BUFFERS.0 + GSO_BUFFERS.1 + GSO_BUFFERS.2);
    Some(out)
}

/// Check a GSO frame's copied parcels on their own: each parses, its UDP header checksum
/// holds, each slot matches its segment, the IPv4 identification is its first segment's,
/// and together their segments are the frame's data in segments of its size.
fn check_gso_parcels(parcels: &[Vec<u8>], f: &Frame, v6: bool) {
    let mut segs: Vec<Vec<u8>> = Vec::new();
    for p in parcels {
        let (s, slots): (Vec<Vec<u8>>, Vec<u16>) = if v6 {
            let p = Parcel6::new_checked(&p[..]).expect("a valid parcel");
            assert!(p.verify_udp_checksum().is_some());
            (p.segments().map(<[u8]>::to_vec).collect(), (0..p.segment_count()).map(|i| p.segment_checksum(i)).collect())
        } else {
            let p = Parcel4::new_checked(&p[..]).expect("a valid parcel");
            assert!(p.verify_udp_checksum().is_some());
            assert_eq!(p.ident(), f.run.ident.wrapping_add(segs.len() as u16));
            (p.segments().map(<[u8]>::to_vec).collect(), (0..p.segment_count()).map(|i| p.segment_checksum(i)).collect())
        };
        for (seg, slot) in s.iter().zip(slots) {
            assert_eq!(wire::parcel::segment_checksum(seg), slot);
        }
        segs.extend(s);
    }
    let want: Vec<Vec<u8>> = f.data.chunks(f.gso_size).map(<[u8]>::to_vec).collect();
    assert_eq!(segs, want);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn chained_join_makes_the_copying_joins_parcels(runs in proptest::collection::vec(run_strategy(), 1..=4), seed in any::<u64>()) {
        let none = runs.iter().flat_map(|r| &r.sums).filter(|&&s| s == Sum::None).count() as u64;
        for v6 in [false, true] {
            let ((want, summed_copy), (got, summed_chain, in_use)) = if v6 {
                (copied::<Ip6>(&runs, v6), chained::<Ip6>(&runs, v6, seed))
            } else {
                (copied::<Ip4>(&runs, v6), chained::<Ip4>(&runs, v6, seed))
            };
            for (parcel, run) in want.iter().zip(&runs) {
                check_parcel(parcel, run, v6);
            }
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(summed_copy, none);
            prop_assert_eq!(summed_chain, none);
            prop_assert_eq!(in_use, 0, "every buffer back");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn chained_gso_frames_make_the_copying_parcels(f in frame_strategy(), seed in any::<u64>()) {
        let l2_len = wire::ethernet::HEADER_LEN;
        for v6 in [false, true] {
            let (want, got) = if v6 {
                (gso_parcels::<Ip6>(&f, v6, None, seed), gso_parcels::<Ip6>(&f, v6, Some(l2_len), seed))
            } else {
                (gso_parcels::<Ip4>(&f, v6, None, seed), gso_parcels::<Ip4>(&f, v6, Some(l2_len), seed))
            };
            prop_assert_eq!(&got, &want);
            if let Some(want) = want {
                check_gso_parcels(&want, &f, v6);
            }
        }
    }
}
