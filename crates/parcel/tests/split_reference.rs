//! `parcelN-split`'s fast path (one header template per parcel, identification and
//! header checksum patched, UDP checksum from the slot, the check folded into the copy)
//! against a reference split: every datagram built from scratch with `wire`'s IPv4, IPv6
//! and UDP reprs and summed in full.

use crate::common;

use engine::{BufIdx, GsoKind, IfIndex, Meta, Offload, Pool};
use ip::nodes::family::{Ip4, Ip6};
use parcel::nodes::split::{split_parcel, ChainTo, SplitError, Tally};
use parcel::nodes::ParcelFamily;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU32;
use wire::parcel::{Parcel4, Parcel4Repr, Parcel6, Parcel6Repr, SegmentsRepr, UdpChecksumForm};

const SRC4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const DST4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 5);

#[derive(Debug, Clone)]
struct Case {
    segments: Vec<Vec<u8>>,
    /// Slots left 0 (the sender computed none).
    zero_slots: Vec<bool>,
    /// A byte flipped after the slots were filled: (segment, offset).
    damage: Option<(usize, usize)>,
    ident: u16,
    ttl: u8,
    tos: u8,
    dont_frag: bool,
    ports: (u16, u16),
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=24, 1usize..=1400, 1usize..=1400, any::<u64>()).prop_flat_map(|(n, len, last, seed)| {
        let last = last.min(len);
        let segments: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let l = if i + 1 == n { last } else { len };
                (0..l).map(|j| (seed.wrapping_mul(i as u64 + 7).wrapping_add(j as u64 * 131) >> 13) as u8).collect()
            })
            .collect();
        (
            Just(segments),
            proptest::collection::vec(proptest::bool::weighted(0.2), n),
            proptest::option::weighted(0.4, (0..n, 0..len)),
            any::<u16>(),
            2u8..=255,
            any::<u8>(),
            any::<bool>(),
            (1u16.., 1u16..),
        )
            .prop_map(|(segments, zero_slots, damage, ident, ttl, tos, dont_frag, ports)| {
                let damage = damage.map(|(i, at)| (i, at % segments[i].len()));
                Case { segments, zero_slots, damage, ident, ttl, tos, dont_frag, ports }
            })
    })
}

fn segments_repr(c: &Case) -> SegmentsRepr {
    SegmentsRepr {
        src_port: c.ports.0,
        dst_port: c.ports.1,
        nsegs: c.segments.len() as u8,
        seg_len: c.segments[0].len() as u16,
        last_len: c.segments.last().map_or(0, |s| s.len()) as u16,
    }
}

/// Fill the segments and their slots, then zero the slots the case leaves 0 and apply
/// its damage (in `b`, the parcel whose UDP header is at `udp_at`).
fn fill_segments<const V6: bool>(b: &mut [u8], c: &Case) {
    let mut p = wire::parcel::Parcel::<&mut [u8], V6>::new_checked(b).expect("a valid parcel");
    for (i, s) in c.segments.iter().enumerate() {
        p.segment_mut(i).copy_from_slice(s);
    }
    p.fill_segment_checksums();
    let at = p.ip_header_len() + 8;
    let data_at = p.segment_offset(0);
    let seg_len = c.segments[0].len();
    for (i, &zero) in c.zero_slots.iter().enumerate() {
        if zero {
            b[at + 2 * i..at + 2 * i + 2].fill(0);
        }
    }
    if let Some((i, off)) = c.damage {
        b[data_at + i * seg_len + off] ^= 0x5a;
    }
}

fn parcel4(c: &Case) -> Vec<u8> {
    let repr = Parcel4Repr { src: SRC4, dst: DST4, ident: c.ident, ttl: c.ttl, dscp_ecn: c.tos, probe: None, segments: segments_repr(c) };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut b);
    if c.dont_frag {
        b[6] |= 0x40;
        b[10..12].fill(0);
        let sum = wire::checksum::checksum(&b[..28]);
        b[10..12].copy_from_slice(&sum.to_be_bytes());
    }
    fill_segments::<false>(&mut b, c);
    let mut p = Parcel4::new_checked(&mut b[..]).expect("a valid parcel");
    Parcel4Repr::fill_udp_checksum(&mut p, UdpChecksumForm::Prototype);
    b
}

fn parcel6(c: &Case) -> Vec<u8> {
    let repr =
        Parcel6Repr { src: SRC6, dst: DST6, hop_limit: c.ttl, traffic_class: c.tos, flow_label: 0x12345, segments: segments_repr(c) };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut b);
    fill_segments::<true>(&mut b, c);
    let mut p = Parcel6::new_checked(&mut b[..]).expect("a valid parcel");
    Parcel6Repr::fill_udp_checksum(&mut p);
    b
}

/// The datagrams a split must make, from scratch: one per undamaged segment (a damaged
/// segment with a zero slot cannot be told from a good one and goes on, summed).
fn reference(c: &Case, v6: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, seg) in c.segments.iter().enumerate() {
        let mut seg = seg.clone();
        if let Some((d, off)) = c.damage {
            if d == i {
                if !c.zero_slots[i] {
                    continue;
                }
                seg[off] ^= 0x5a;
            }
        }
        let b = common::Datagram {
            v6,
            src4: SRC4,
            dst4: DST4,
            src6: SRC6,
            dst6: DST6,
            ports: c.ports,
            ttl: c.ttl,
            tos: c.tos,
            ident: c.ident.wrapping_add(i as u16),
            dont_frag: c.dont_frag,
            flow_label: 0x12345,
        }
        .build(&seg);
        out.push(b);
    }
    out
}

fn split<F: ParcelFamily>(parcel: &[u8], check: bool) -> (Vec<Vec<u8>>, Tally, usize) {
    let mut pool = Pool::with_classes(64, 8, 2);
    let bi = pool.alloc(parcel.len()).expect("a large buffer");
    pool.get_mut(bi).write(parcel).expect("fits");
    let mut got: Vec<BufIdx> = Vec::new();
    let mut tally = Tally::default();
    split_parcel::<F>(&mut pool, bi, check, None, &mut tally, |d, _| got.push(d)).expect("split");
    let bytes = got.iter().map(|&d| pool.get(d).bytes().to_vec()).collect();
    if !got.contains(&bi) {
        pool.free(bi);
    }
    pool.free_many(&got);
    (bytes, tally, pool.in_use())
}

/// The chained split: each datagram read as its head's bytes then its extent's, then
/// made one buffer (`Pool::linearize`, as the dispatcher does), the two compared; the
/// parcel and the datagrams freed in an order `seed` picks (the parcel first, last or
/// in between, some datagrams linearized, some freed chained, some in one `free_many`).
/// Returns the datagrams, the tally and the buffers left in use.
fn split_chained<F: ParcelFamily>(parcel: &[u8], check: bool, seed: u64) -> (Vec<Vec<u8>>, Tally, usize) {
    let mut pool = Pool::with_classes(64, 8, 2);
    let bi = pool.alloc(parcel.len()).expect("a large buffer");
    pool.get_mut(bi).write(parcel).expect("fits");
    let mut got: Vec<BufIdx> = Vec::new();
    let mut tally = Tally::default();
    let l2_len = wire::ethernet::HEADER_LEN;
    split_parcel::<F>(&mut pool, bi, check, Some(ChainTo { mtu: usize::MAX, l2_len }), &mut tally, |d, _| got.push(d)).expect("split");
    assert!(!got.contains(&bi), "a chained split never reuses the parcel's buffer");
    let mut bytes = Vec::new();
    for (k, &d) in got.iter().enumerate() {
        // Room for the link header right in front, which then starts a line: the
        // rewrite's header and the datagram's share it.
        let h = pool.get(d);
        assert!(h.headroom() >= l2_len);
        assert_eq!((h.bytes().as_ptr() as usize - l2_len) % engine::mem::LINE, 0, "datagram {k}'s link header starts a line");
        let pieces = [pool.get(d).bytes(), &pool.extent_bytes(d)].concat();
        assert_eq!(pool.extent_len(d), pool.extent_bytes(d).len());
        if (seed >> (k % 64)) & 1 == 1 {
            pool.linearize(d);
            assert_eq!(pool.extent_len(d), 0);
            assert_eq!(pool.get(d).bytes(), &pieces[..], "datagram {k} the same once linearized");
        }
        bytes.push(pieces);
    }
    // Free in the seed's order; the parcel's buffer at a place of its own.
    let mut order = got.clone();
    let n = order.len();
    for i in (1..n).rev() {
        order.swap(i, (seed.wrapping_mul(i as u64 + 11) >> 7) as usize % (i + 1));
    }
    let parcel_at = (seed >> 3) as usize % (n + 1);
    order.insert(parcel_at, bi);
    let batch = (seed >> 17) as usize % (order.len() + 1);
    let in_use_before = pool.in_use();
    for &b in &order[..batch] {
        pool.free(b);
    }
    // The parcel's buffer stays in use while any datagram still points into it.
    let chained_left = order[batch..].iter().any(|&b| b != bi && pool.extent_len(b) != 0);
    if chained_left {
        assert!(pool.in_use() > 0 && pool.has_chains());
    }
    pool.free_many(&order[batch..]);
    assert!(in_use_before >= pool.in_use());
    assert!(!pool.has_chains(), "every extent let go");
    let in_use = pool.in_use();
    // Each buffer on a free list exactly once: all of them allocate, each index once.
    assert_eq!(common::allocate_each_once(&mut pool), 64 + 8 + 2);
    (bytes, tally, in_use)
}

/// A split short of buffers: `regular` regular buffers for the datagrams (the parcel in
/// the one large buffer), chained (`chain`) or copying, unchecked. Returns the datagrams
/// made (each read whole, chained ones as head then extent), the split's result and
/// tally, after the datagrams and the parcel are freed in an order `seed` picks and every
/// buffer was allocated once (the pool whole again).
fn split_short<F: ParcelFamily>(parcel: &[u8], chain: bool, regular: usize, seed: u64) -> (Vec<Vec<u8>>, Result<(), SplitError>, Tally) {
    let mut pool = Pool::with_classes(regular, 0, 1);
    // The large buffer for the parcel however short it is: the regular ones are the
    // datagrams'.
    let bi = pool.alloc(parcel.len().max(engine::pool::REGULAR_CAPACITY + 1)).expect("the large buffer");
    pool.get_mut(bi).write(parcel).expect("fits");
    let mut got: Vec<BufIdx> = Vec::new();
    let mut tally = Tally::default();
    let chain_to = chain.then_some(ChainTo { mtu: usize::MAX, l2_len: wire::ethernet::HEADER_LEN });
    let r = split_parcel::<F>(&mut pool, bi, false, chain_to, &mut tally, |d, _| got.push(d));
    let bytes = got.iter().map(|&d| [pool.get(d).bytes(), &pool.extent_bytes(d)].concat()).collect();
    // The caller frees the parcel's buffer unless it became the last datagram.
    let mut order = got.clone();
    if !got.contains(&bi) {
        order.push(bi);
    }
    for i in (1..order.len()).rev() {
        order.swap(i, (seed.wrapping_mul(i as u64 + 5) >> 9) as usize % (i + 1));
    }
    let half = order.len() / 2;
    for &b in &order[..half] {
        pool.free(b);
    }
    pool.free_many(&order[half..]);
    assert!(!pool.has_chains(), "every extent let go");
    assert_eq!(pool.in_use(), 0, "every buffer back");
    assert_eq!(common::allocate_each_once(&mut pool), regular + 1);
    (bytes, r, tally)
}

/// The metadata of each datagram of a split, copying or chained, of `parcel` in a buffer
/// whose every metadata field is set (a partial checksum inside the last segment, which
/// the parcel's buffer keeps when narrowed to the last datagram); and the parcel's.
fn split_meta<F: ParcelFamily>(parcel: &[u8], check: bool, chain: bool) -> (Vec<Meta>, Meta) {
    let mut pool = Pool::with_classes(64, 8, 2);
    let bi = pool.alloc(parcel.len()).expect("a large buffer");
    let b = pool.get_mut(bi);
    b.write(parcel).expect("fits");
    let end = b.offset() + parcel.len();
    let meta = Meta {
        rx_if: IfIndex(3),
        tx_if: IfIndex(4),
        adj: 5,
        looked_up: true,
        param: 0x7,
        flow_hash: 0x1234_5678,
        drop: Some(engine::buffer::DropReason { node: 1, counter: 2 }),
        trace: NonZeroU32::new(9),
        l4_checksum_ok: true,
        offload: Offload { csum_start: (end - 8) as u16, csum_offset: 6, gso: GsoKind::UdpL4, gso_size: 1000 },
        refragment: true,
    };
    b.meta = meta;
    let mut got: Vec<BufIdx> = Vec::new();
    let mut tally = Tally::default();
    let chain_to = chain.then_some(ChainTo { mtu: usize::MAX, l2_len: wire::ethernet::HEADER_LEN });
    split_parcel::<F>(&mut pool, bi, check, chain_to, &mut tally, |d, _| got.push(d)).expect("split");
    let metas = got.iter().map(|&d| pool.get(d).meta).collect();
    if !got.contains(&bi) {
        pool.free(bi);
    }
    pool.free_many(&got);
    assert_eq!(pool.in_use(), 0);
    (metas, meta)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every datagram of a split, the last (in the parcel's own buffer when copying) as
    /// the others, has a new packet's metadata with the parcel's receiving interface,
    /// next hop and trace mark: none of the parcel's node argument, flow hash, device
    /// check or offload work (its GSO and partial checksum), which described the parcel.
    #[test]
    fn every_datagram_has_a_new_packets_metadata(c in case(), check in any::<bool>(), chain in any::<bool>()) {
        for v6 in [false, true] {
            let (metas, parcel) = if v6 { split_meta::<Ip6>(&parcel6(&c), check, chain) } else { split_meta::<Ip4>(&parcel4(&c), check, chain) };
            let want = Meta { rx_if: parcel.rx_if, adj: parcel.adj, trace: parcel.trace, ..Meta::default() };
            for (i, m) in metas.iter().enumerate() {
                prop_assert_eq!(m, &want, "v6 {} chain {} datagram {} of {}", v6, chain, i, metas.len());
            }
        }
    }

    /// The chained split makes, byte for byte, the copying split's datagrams (and so
    /// the reference's), with the same tally, checked or not, IPv4 and IPv6; and the pool
    /// gets every buffer back whatever the order they are freed in.
    #[test]
    fn chained_split_makes_the_copying_splits_datagrams(c in case(), check in any::<bool>(), seed in any::<u64>()) {
        for v6 in [false, true] {
            let (parcel, copied, chained) = if v6 {
                let p = parcel6(&c);
                let (a, b) = (split::<Ip6>(&p, check), split_chained::<Ip6>(&p, check, seed));
                (p, a, b)
            } else {
                let p = parcel4(&c);
                let (a, b) = (split::<Ip4>(&p, check), split_chained::<Ip4>(&p, check, seed));
                (p, a, b)
            };
            prop_assert!(!parcel.is_empty());
            prop_assert_eq!(&chained.0, &copied.0);
            prop_assert_eq!(chained.1, copied.1);
            prop_assert_eq!(chained.2, 0, "every buffer back");
        }
    }

    /// Out of buffers, IPv4 and IPv6, chained or copying: the split stops with
    /// `NoBuffer` at the first datagram it has no buffer for, the datagrams made before
    /// it are the full split's first ones byte for byte, and the pool gets every buffer
    /// back, the parcel's included, whatever the order they are freed in.
    #[test]
    fn a_split_short_of_buffers_stops_and_gives_every_buffer_back(c in case(), chain in any::<bool>(), short in 0usize..=24, seed in any::<u64>()) {
        let n = c.segments.len();
        for v6 in [false, true] {
            let (p, full) = if v6 { let p = parcel6(&c); let f = split::<Ip6>(&p, false); (p, f) } else { let p = parcel4(&c); let f = split::<Ip4>(&p, false); (p, f) };
            let regular = short.min(n);
            let (got, r, tally) = if v6 { split_short::<Ip6>(&p, chain, regular, seed) } else { split_short::<Ip4>(&p, chain, regular, seed) };
            // Copying, the last datagram takes the parcel's own buffer.
            let made = if chain { regular.min(n) } else if regular + 1 >= n { n } else { regular };
            prop_assert_eq!(r, if made == n { Ok(()) } else { Err(SplitError::NoBuffer) }, "v6 {} chain {} regular {} of {}", v6, chain, regular, n);
            prop_assert_eq!(got.len(), made);
            prop_assert_eq!(tally.datagrams as usize, made);
            prop_assert_eq!(&got[..], &full.0[..made]);
        }
    }

    #[test]
    fn ipv4_split_matches_the_reference(c in case()) {
        let (got, tally, in_use) = split::<Ip4>(&parcel4(&c), true);
        let want = reference(&c, false);
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(tally.datagrams as usize, want.len());
        prop_assert_eq!(tally.bad as usize, c.segments.len() - want.len());
        prop_assert_eq!(tally.summed as usize, c.zero_slots.iter().filter(|&&z| z).count());
        prop_assert_eq!(in_use, 0, "every buffer accounted for");
    }

    #[test]
    fn ipv6_split_matches_the_reference(c in case()) {
        let (got, tally, _) = split::<Ip6>(&parcel6(&c), true);
        let want = reference(&c, true);
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(tally.bad as usize, c.segments.len() - want.len());
    }

    /// Unchecked, every segment becomes a datagram: the intact ones exactly the
    /// reference's, a damaged one with its slot's checksum, which no longer adds up.
    #[test]
    fn unchecked_split_carries_the_slot_on(c in case()) {
        let (got, tally, _) = split::<Ip4>(&parcel4(&c), false);
        prop_assert_eq!(got.len(), c.segments.len());
        prop_assert_eq!(tally.bad, 0);
        let intact = reference(&Case { damage: None, ..c.clone() }, false);
        for (i, d) in got.iter().enumerate() {
            let damaged = c.damage.is_some_and(|(j, _)| j == i);
            let ok = wire::checksum::Checksum::new()
                .add(wire::checksum::pseudo_header_v4(SRC4, DST4, 17, (d.len() - 20) as u16))
                .add_bytes(&d[20..])
                .fold()
                == 0xffff;
            prop_assert_eq!(ok, !damaged || c.zero_slots[i], "datagram {} checksum", i);
            if !damaged {
                prop_assert_eq!(d, &intact[i]);
            }
        }
    }
}
