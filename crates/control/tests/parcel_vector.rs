//! `ethernet-input` forwards an untraced parcel whole itself when it is the common case
//! (`ip::parcel::forward_whole`), and `parcel4-input` / `parcel6-input` decide the other
//! parcels of an untraced vector in one loop (`run_vector`: every packet not forwarded
//! whole through `process`); a traced parcel goes to its input node and is decided by a
//! `process` call. Both ways must send every packet where the other does, with the same
//! bytes and the same counters (the parcels forwarded whole counted by whichever node
//! forwarded them): vectors that mix parcels forwarded whole (both families), parcels to
//! split, parcels to a GSO link, parcels whose TTL expires here, and parcels dropped by
//! name.

use crate::common;

use common::{count, counters, seed, traced_and_untraced_agree};
use control::fuzz::graph::Harness;
use io::mem::RxFrame;

/// Ethernet 14, then an IPv4 parcel header of 28 bytes.
const IP: usize = 14;

/// The IPv4 header's byte `at` set to `v` and its checksum made right again.
fn set4(frame: &mut [u8], at: usize, v: u8) {
    frame[IP + at] = v;
    frame[IP + 10..IP + 12].fill(0);
    let c = wire::checksum::checksum(&frame[IP..IP + 28]);
    frame[IP + 10..IP + 12].copy_from_slice(&c.to_be_bytes());
}

/// One vector's frames: per `k`, an IPv4 parcel forwarded whole (identification by `k`)
/// and an IPv6 one; every third a parcel to split and one to a GSO link; every fifth an
/// IPv4 parcel with TTL 1 (the rewrite's general path: an ICMP error); every seventh one
/// with a bad header checksum, every eleventh one with NSegs 0, every thirteenth one cut
/// short in its header.
fn vector(n: u8) -> Vec<(usize, RxFrame)> {
    let (p4, whole4) = seed("seed-parcel4-whole");
    let (p6, whole6) = seed("seed-parcel6");
    let (ps, split4) = seed("seed-parcel4-split");
    let (pg, gso4) = seed("seed-parcel4-to-gso");
    let mut out = Vec::new();
    for k in 0..n {
        let mut a = whole4.clone();
        set4(&mut a, 5, k);
        out.extend([(p4, a), (p6, whole6.clone())]);
        if k % 3 == 1 {
            out.extend([(ps, split4.clone()), (pg, gso4.clone())]);
        }
        if k % 5 == 2 {
            let mut t = whole4.clone();
            set4(&mut t, 8, 1);
            out.push((p4, t));
        }
        if k % 7 == 3 {
            let mut c = whole4.clone();
            c[IP + 10] ^= 0x5a;
            out.push((p4, c));
        }
        if k % 11 == 4 {
            let mut z = whole4.clone();
            set4(&mut z, 22, 0);
            out.push((p4, z));
        }
        if k % 13 == 6 {
            out.push((p4, whole4[..IP + 24].to_vec()));
        }
    }
    out.into_iter().map(|(port, bytes)| (port, RxFrame { bytes, vnet: None })).collect()
}

/// The parcel nodes' counters, with the parcels `ethernet-input` forwarded whole counted
/// as their input node counts them, and the two families' `parcels`, `segments` and
/// `forwarded-whole` together (`ethernet-input` counts both families in one).
fn parcel_view(h: &Harness) -> Vec<(String, String, u64)> {
    let mut v = std::collections::BTreeMap::new();
    for (node, counter, n) in counters(h, "") {
        let key = match (node.as_str(), counter.as_str()) {
            ("ethernet-input", "parcels-forwarded-whole") => {
                *v.entry(("parcelN-input".to_string(), "parcels".to_string())).or_insert(0) += n;
                ("parcelN-input", "forwarded-whole")
            }
            ("ethernet-input", "parcel-segments-forwarded-whole") => ("parcelN-input", "segments"),
            ("parcel4-input" | "parcel6-input", c @ ("parcels" | "segments" | "forwarded-whole")) => ("parcelN-input", c),
            (n, c) if n.starts_with("parcel") => (n, c),
            _ => continue,
        };
        *v.entry((key.0.to_string(), key.1.to_string())).or_insert(0) += n;
    }
    v.into_iter().map(|((n, c), k)| (n, c, k)).collect()
}

/// `vector(n)` with the first frame of each port padded past a full 1500-byte packet's
/// frame (Ethernet padding after the parcel, trimmed where the parcel is read): the
/// vector then takes `ethernet-input`'s form with the parcel forward inlined
/// (`ethernet_input::parcels_inlined` samples the first frame), where `vector(n)` takes
/// the other.
fn long_vector(n: u8) -> Vec<(usize, RxFrame)> {
    let mut v = vector(n);
    let mut padded = std::collections::HashSet::new();
    for (port, f) in &mut v {
        if padded.insert(*port) {
            f.bytes.resize(1600, 0);
        }
    }
    v
}

/// In both of `ethernet-input`'s forms: out of line (`vector`), inlined (`long_vector`).
#[test]
fn a_vector_run_in_one_loop_goes_where_the_traced_one_goes() {
    for frames in [vector, long_vector] {
        let mut untraced = Harness::new();
        let mut traced = Harness::new();
        for round in 0..2 {
            traced_and_untraced_agree(&mut untraced, &mut traced, frames(30), "parcel4-input", parcel_view, round);
        }
        // Per round: 30 whole IPv4 parcels and 6 with TTL 1 (whole too, then the rewrite's
        // general path), 30 IPv6 ones: untraced, `ethernet-input` forwards them all;
        // traced, each its input node.
        let u = counters(&untraced, "");
        assert_eq!(count(&u, "ethernet-input", "parcels-forwarded-whole"), 2 * (36 + 30), "{u:?}");
        assert_eq!(count(&u, "parcel4-input", "forwarded-whole") + count(&u, "parcel6-input", "forwarded-whole"), 0, "{u:?}");
        let c = counters(&traced, "");
        let count = |node: &str, counter: &str| count(&c, node, counter);
        assert_eq!(count("ethernet-input", "parcels-forwarded-whole"), 0, "{c:?}");
        assert_eq!(count("parcel4-input", "forwarded-whole"), 2 * 36, "{c:?}");
        assert_eq!(count("parcel6-input", "forwarded-whole"), 2 * 30, "{c:?}");
        assert_eq!(count("parcel4-input", "bad-header-checksum"), 2 * 4, "{c:?}");
        assert_eq!(count("parcel4-input", "no-segments"), 2 * 3, "{c:?}");
        assert_eq!(count("parcel4-input", "truncated"), 2 * 2, "{c:?}");
        assert!(count("parcel4-input", "to-split") >= 2 * 10, "{c:?}");
        // Every parcel that was not dropped counted once, with its segments.
        assert_eq!(count("parcel4-input", "parcels"), 2 * (36 + 10 + 10), "{c:?}");
    }
}

/// With segments read at every hop (`verify_parcel_segments_in_transit`), no parcel goes
/// on unread: `ethernet-input` forwards none, each is checked by its input node.
#[test]
fn the_strict_mode_leaves_every_parcel_to_its_input_node() {
    let mut h = Harness::new();
    h.worker.cx.parcel.verify_in_transit = true;
    assert!(h.worker.cx.parcel.verify_segments);
    h.frames(vector(30));
    let c = counters(&h, "");
    assert_eq!(count(&c, "ethernet-input", "parcels-forwarded-whole"), 0, "{c:?}");
    assert_eq!(count(&c, "parcel4-input", "forwarded-whole"), 36, "{c:?}");
    assert_eq!(count(&c, "parcel6-input", "forwarded-whole"), 30, "{c:?}");
}
