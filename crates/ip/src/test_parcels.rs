//! IP parcels for this crate's tests: `wire::parcel`'s reprs emitted, one builder a family.

use wire::parcel::{Parcel4Repr, Parcel6Repr, SegmentsRepr};

/// `nsegs` segments of `seg_len` bytes, UDP port 9000 to 9001.
fn segments(nsegs: u8, seg_len: u16) -> SegmentsRepr {
    SegmentsRepr { src_port: 9000, dst_port: 9001, nsegs, seg_len, last_len: seg_len }
}

/// An IPv4 parcel from 198.18.0.2 to 198.19.0.9 of `nsegs` segments of `seg_len` bytes.
pub(crate) fn parcel4(nsegs: u8, seg_len: u16) -> Vec<u8> {
    let r = Parcel4Repr {
        src: [198, 18, 0, 2].into(),
        dst: [198, 19, 0, 9].into(),
        ident: 1,
        ttl: 64,
        dscp_ecn: 0,
        probe: None,
        segments: segments(nsegs, seg_len),
    };
    let mut p = vec![0; r.buffer_len()];
    r.emit(&mut p);
    assert!(wire::parcel::Parcel4::new_checked(&p[..]).is_ok());
    p
}

/// An IPv6 parcel from 2001:db8:1::2 to 2001:db8:2::9 of `nsegs` segments of `seg_len` bytes.
pub(crate) fn parcel6(nsegs: u8, seg_len: u16) -> Vec<u8> {
    let r = Parcel6Repr {
        src: "2001:db8:1::2".parse().unwrap(),
        dst: "2001:db8:2::9".parse().unwrap(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        segments: segments(nsegs, seg_len),
    };
    let mut p = vec![0; r.buffer_len()];
    r.emit(&mut p);
    assert!(wire::parcel::Parcel6::new_checked(&p[..]).is_ok());
    p
}
