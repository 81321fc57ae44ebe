//! IP parcels (the wire format: `wire::parcel`): one IP header, N UDP segments of one
//! flow, N segment checksums. This crate's nodes check them, forward them whole toward
//! links configured for them, split them into ordinary UDP datagrams elsewhere, and join
//! runs of datagrams of one flow into parcels toward links configured for them.
//!
//! ```text
//! ethernet-input ─(option 0x0b, header checked, routed to a parcel link within its MTU; untraced,
//!     segments not read in transit: `ip::parcel::forward_whole`)→ interface-output / ip4-rewrite
//! ethernet-input or ip4-input ─(option 0x0b, the rest)→ parcel4-input ─┬─(egress `parcels = true`, within its MTU)→ interface-output
//!     (rewritten in parcel4-input; an expiring TTL or an unresolved neighbour → ip4-rewrite)
//!                                          └─(otherwise)→ parcel4-split ─→ interface-output / ip4-rewrite / ip4-lookup (each segment;
//!                                                 toward a resolved next hop rewritten in the split, chained: headers + the segment in place)
//! ip4-input ─(UDP, when some link takes parcels)→ parcel4-join ─┬─(runs toward a parcel link's resolved next hop)→ interface-output
//!                                                               │     (a parcel rewritten in the join, chained: headers + each segment in its datagram)
//!                                                               ├─(runs toward a parcel link otherwise)→ ip4-rewrite (a parcel)
//!                                                               └─(the rest)→ ip4-rewrite / ip4-lookup
//! ethernet-input ─(HBH jumbo option, Payload Length ≠ 0; forwarded whole as IPv4's)→ interface-output / ip6-rewrite
//! ethernet-input or ip6-input ─(HBH jumbo option, Payload Length ≠ 0, the rest)→ parcel6-input → interface-output / ip6-rewrite / parcel6-split → interface-output / ip6-rewrite / ip6-lookup
//! parcelN-input ─(route into a UDP tunnel)→ ipN-lookup → gue4-encap / gue6-encap (outer family)
//!     ─┬─(fits the tunnel, or `fragment = "outer"`)→ the parcel whole in one outer packet, fragmented to the link
//!      └─(`fragment = "inner"`, or longer than one outer IP packet can be)→ ipN-fragment → parcelN-split
//! ip6-input ─(UDP, when some link takes parcels)→ parcel6-join → ip6-rewrite / ip6-lookup
//! ```
//!
//! **A bad segment drops the segment, never the parcel.** The drafts make each segment its
//! own unit of loss (the integrity block exists so that one damaged segment does not cost
//! the others). Headers that do not add up (`wire::parcel::ParcelError`) drop the parcel,
//! each under its own counter.
//!
//! **Per hop the headers are checked, the segments at the edge.** A router forwarding a
//! parcel whole checks its layout and IPv4 header checksum (as RFC 1812 has a router check
//! any header), not its segments nor the UDP header checksum: those are end to end, as a
//! forwarded datagram's UDP checksum is, and travel on unchanged for the receiver (the
//! prototype's receivers check both). Where a parcel is taken apart the chain would
//! break, so there (the dataplane's `verify_parcel_segments`, default on) `parcelN-split`
//! sums each segment in the pass that copies it and leaves out one that does not match
//! its slot (`bad-segment-dropped`), and the UDP header checksum is checked (its ports
//! and lengths go into every datagram's checksum: by `parcelN-input` when it chose the
//! split, by the split itself for a tunnel's inner parcel from `ipN-fragment`); before a
//! parcel leaves as a GSO frame (the kernel sums each datagram afresh, hiding damage)
//! `parcelN-input` checks every segment. The
//! strict mode, `verify_parcel_segments_in_transit`, reads every segment at every hop
//! (`bad-segment-checksum`; a parcel holding a bad one is split there and then). With
//! the check off, segments are never read: a split derives each datagram's checksum
//! from the slot, so a damaged segment becomes a datagram its receiver refuses, as if
//! the damage had happened on the next link.
//!
#![forbid(unsafe_code)]

pub mod context;
pub mod nodes;

pub use context::{HasParcel, ParcelContext};
