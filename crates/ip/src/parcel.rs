//! The whole-parcel forward, the common case of an IP parcel in transit: its header
//! checked (`wire::parcel`), its source unicast, its destination looked up, and the
//! parcel sent on whole to a next hop that takes parcels within its MTU. Shared by the
//! two nodes that take it: `ethernet-input` (a parcel forwarded whole passes two nodes,
//! as a forwarded packet does) and `parcelN-input` (the parcels that reach it: traced,
//! from another node, or not forwarded whole). Everything else about parcels (the
//! split, the join, GSO frames, the counters of what was refused) is the parcel crate's.

use crate::nodes::family::{rewrite_fast, Family, Ip4, Ip6};
use crate::tables::{Adjacency, Tables, MAX_INDEX};
use engine::{Buffer, IfIndex};
use wire::parcel::{Parcel4, Parcel6, ParcelError};

/// What a parcel node needs of a checked parcel, whatever its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub nsegs: usize,
    pub seg_len: usize,
    pub total_len: usize,
    /// Offset of segment 0.
    pub data_at: usize,
    /// Offset of the UDP header.
    pub udp_at: usize,
}

impl Shape {
    pub fn of<T: AsRef<[u8]>, const V6: bool>(p: &wire::parcel::Parcel<T, V6>) -> Shape {
        Shape {
            nsegs: p.segment_count(),
            seg_len: p.segment_len(),
            total_len: p.total_len(),
            data_at: p.segment_offset(0),
            udp_at: p.ip_header_len(),
        }
    }

    /// Segment `i`'s byte range.
    #[inline(always)]
    pub fn segment(&self, i: usize) -> core::ops::Range<usize> {
        let at = self.data_at + i * self.seg_len;
        at..(at + self.seg_len).min(self.total_len)
    }
}

/// The family's parcel header: its checks and its source test.
pub trait ParcelHeader: Family {
    /// Check the parcel's layout (`wire::parcel`'s checks).
    fn check(b: &[u8]) -> Result<Shape, ParcelError>;
    /// The source is multicast or broadcast (refused, as `ipN-input` refuses it).
    fn bad_source(b: &[u8]) -> bool;
}

impl ParcelHeader for Ip4 {
    #[inline(always)]
    fn check(b: &[u8]) -> Result<Shape, ParcelError> {
        Parcel4::new_checked(b).map(|p| Shape::of(&p))
    }
    #[inline(always)]
    fn bad_source(b: &[u8]) -> bool {
        b[12] >= 224 && b[12] < 240 || b[12..16] == [255; 4]
    }
}

impl ParcelHeader for Ip6 {
    #[inline(always)]
    fn check(b: &[u8]) -> Result<Shape, ParcelError> {
        Parcel6::new_checked(b).map(|p| Shape::of(&p))
    }
    #[inline(always)]
    fn bad_source(b: &[u8]) -> bool {
        b[8] == 0xff
    }
}

/// What [`forward_whole`] found.
pub enum Whole {
    /// Forwarded whole: its segment count, and whether it was rewritten for
    /// `interface-output` (else `ipN-rewrite`'s general path takes it).
    Forwarded { nsegs: usize, rewritten: bool },
    /// A parcel whose header passed, from a unicast source, looked up (its adjacency):
    /// not the common case; `parcelN-input` decides the rest.
    Looked(Shape, u32),
    /// Anything else: `parcelN-input` checks it again and names what is wrong.
    Refused,
}

/// The common case: a parcel whose header passes the checks, from a unicast source,
/// routed to a next hop that takes parcels (`parcels = true`, no SPD or caught replies
/// on it) within its MTU. The packet is trimmed to the parcel, its adjacency put in
/// `meta.adj`, and rewritten for `interface-output` when the rewrite's fast path takes
/// it. The caller makes sure no segment is to be read on the way (the in-transit check
/// off).
#[inline(always)]
pub fn forward_whole<F: ParcelHeader>(t: &Tables, buf: &mut Buffer) -> Whole {
    let b = buf.bytes();
    let Ok(s) = F::check(b) else { return Whole::Refused };
    if F::bad_source(b) {
        return Whole::Refused;
    }
    let adj = F::fib(t).lookup(F::key(&b[F::DST_AT..]));
    let hop = match next_hop(t, adj) {
        Some(hop) if takes_whole(t, &hop, s.total_len) => hop,
        _ => return Whole::Looked(s, adj),
    };
    buf.truncate(s.total_len);
    buf.meta.adj = adj;
    // The rewrite's fast path here, as the lookup takes it for a packet (`hop_fast`
    // compares IPv4's Total Length, a parcel's segment length); `false`: an expiring TTL
    // or an unresolved neighbour, for `ipN-rewrite`'s general path.
    Whole::Forwarded { nsegs: s.nsegs, rewritten: rewrite_fast::<F>(hop.adjacency, buf) }
}

/// The link a route sends to straight (resolved or not; no SPD, no caught replies on
/// it): its adjacency, interface and MTU.
pub struct Hop<'a> {
    pub adjacency: &'a Adjacency,
    pub tx_if: IfIndex,
    pub mtu: usize,
}

/// The [`Hop`] of route `adj`; `None` for any other route (a tunnel, a drop …).
#[inline(always)]
pub fn next_hop(t: &Tables, adj: u32) -> Option<Hop<'_>> {
    match (adj <= MAX_INDEX).then(|| t.adjacency(adj)) {
        Some(a @ (Adjacency::Rewrite { tx_if, mtu, .. } | Adjacency::Glean { tx_if, mtu })) if t.straight_to_rewrite(*tx_if) => {
            Some(Hop { adjacency: a, tx_if: *tx_if, mtu: *mtu as usize })
        }
        _ => None,
    }
}

/// The link `hop` takes a parcel of `total_len` bytes whole (`parcels = true`, within
/// its MTU).
#[inline(always)]
pub fn takes_whole(t: &Tables, hop: &Hop<'_>, total_len: usize) -> bool {
    t.takes_parcels(hop.tx_if) && total_len <= hop.mtu
}
