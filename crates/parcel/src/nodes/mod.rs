//! The parcel nodes, each one generic node over the address family:
//! `parcel4-input`/`parcel6-input` and `parcel4-split`/`parcel6-split`.

pub mod gso;
pub mod input;
pub mod join;
pub mod split;

use crate::context::HasParcel;
use engine::node::NextNodes;
use engine::GraphBuilder;
use ip::nodes::family::{Ip4, Ip6};
use wire::checksum::{pseudo_header_v4, pseudo_header_v6, Checksum};
use wire::parcel::{Parcel4, Parcel4Repr, Parcel6, Parcel6Repr, ParcelError, SegmentsRepr, UdpChecksumForm};

/// Add the parcel nodes to a graph (the IP nodes must be there too).
pub fn register<Cx: HasParcel>(g: &mut GraphBuilder<Cx>) {
    g.add(input::ParcelInput::<Ip4>::default());
    g.add(input::ParcelInput::<Ip6>::default());
    g.add_expand(split::ParcelSplit::<Ip4>::default());
    g.add_expand(split::ParcelSplit::<Ip6>::default());
    g.add_expand(join::ParcelJoin::<Ip4>::default());
    g.add_expand(join::ParcelJoin::<Ip6>::default());
}

engine::next_nodes! {
    pub enum Parcel4InputNext { Rewrite = "ip4-rewrite", Split = "parcel4-split", Lookup = "ip4-lookup", Output = "interface-output" }
}
engine::next_nodes! {
    pub enum Parcel6InputNext { Rewrite = "ip6-rewrite", Split = "parcel6-split", Lookup = "ip6-lookup", Output = "interface-output" }
}
engine::next_nodes! {
    pub enum Parcel4JoinNext { Rewrite = "ip4-rewrite", Lookup = "ip4-lookup", Output = "interface-output" }
}
engine::next_nodes! {
    pub enum Parcel6JoinNext { Rewrite = "ip6-rewrite", Lookup = "ip6-lookup", Output = "interface-output" }
}
engine::next_nodes! {
    pub enum Parcel4SplitNext { Lookup = "ip4-lookup", Rewrite = "ip4-rewrite", Output = "interface-output" }
}
engine::next_nodes! {
    pub enum Parcel6SplitNext { Lookup = "ip6-lookup", Rewrite = "ip6-rewrite", Output = "interface-output" }
}

pub use ip::parcel::Shape;

/// What differs between IPv4 and IPv6 parcels for the nodes.
pub trait ParcelFamily: ip::parcel::ParcelHeader {
    const INPUT: &'static str;
    const SPLIT: &'static str;
    type InputNext: NextNodes;
    const TO_REWRITE: Self::InputNext;
    const TO_SPLIT: Self::InputNext;
    /// A parcel forwarded whole that this node rewrote itself (`ip::nodes::family::rewrite_fast`).
    const TO_OUTPUT: Self::InputNext;
    /// Where a parcel routed into a UDP tunnel goes whole: `ipN-lookup`, to the tunnel's
    /// encap node. Parcels of both families go whole: the tunnel
    /// sends each in one outer packet, fragmented to the link under its `fragment =
    /// "outer"` policy (the far end reassembles, RFC 2473's path), and has it split by
    /// `ipN-fragment` under `inner` or when it would not fit one outer IP packet
    /// (`ip::outer::encap_mtu`). Never Packet Too Big: a parcel's source cannot act on it.
    const TO_TUNNEL: Self::InputNext;
    type SplitNext: NextNodes;
    const TO_LOOKUP: Self::SplitNext;
    const SPLIT_TO_REWRITE: Self::SplitNext;
    /// A datagram the split rewrote itself (`ip::nodes::family::rewrite_fast`).
    const SPLIT_TO_OUTPUT: Self::SplitNext;
    /// The IP header of one datagram a split makes.
    const DATAGRAM_IP_LEN: usize;
    /// [`ip::parcel::ParcelHeader::check`], and whether the UDP checksum over the header matches (in
    /// either form the family has), from one parse.
    fn check_with_udp(b: &[u8]) -> Result<(Shape, bool), ParcelError>;
    const JOIN: &'static str;
    type JoinNext: NextNodes;
    const JOIN_TO_REWRITE: Self::JoinNext;
    const JOIN_TO_LOOKUP: Self::JoinNext;
    /// A parcel the join rewrote itself (`ip::nodes::family::rewrite_fast`).
    const JOIN_TO_OUTPUT: Self::JoinNext;
    /// The parcel's IP header (with the IPv6 hop-by-hop header) that a join emits.
    const PARCEL_HEADER_LEN: usize;
    /// A plain UDP datagram's headers (unfragmented, no options or extension headers,
    /// UDP length the packet's): its UDP length. The shape only, whatever its hop limit.
    fn datagram_udp_len(b: &[u8]) -> Option<u16>;
    /// Where the TTL or hop limit is in the IP header.
    const HOP_LIMIT_AT: usize;
    /// A datagram `parcelN-join` may take: a plain UDP datagram ([`Self::datagram_udp_len`])
    /// with hop limit left (one about to expire goes on alone, to get its own ICMP error).
    fn joinable_udp_len(b: &[u8]) -> Option<u16> {
        Self::datagram_udp_len(b).filter(|_| b[Self::HOP_LIMIT_AT] > 1)
    }
    /// Whether two datagrams (each long enough for [`Self::datagram_udp_len`]) agree in
    /// the header fields a joined parcel carries once for all its datagrams: addresses,
    /// ports, traffic class (and the IPv6 flow label). Compared in the packets, not
    /// copied into keys: a key assembled from narrow stores and compared in wide loads
    /// stalled store forwarding on every datagram of `parcelN-join`'s plan.
    fn same_flow(a: &[u8], b: &[u8]) -> bool;
    /// Write a parcel's headers for `segs` from its first datagram's headers `head`,
    /// with its UDP header checksum (which covers no segment data).
    fn emit_parcel_headers(head: &[u8], segs: &SegmentsRepr, out: &mut [u8]);
    /// Move the IPv4 identification in the datagram headers `head` on by `by` (the
    /// identification of the datagram `by` places further on in a GSO frame); IPv6
    /// datagrams have none.
    fn advance_ident(head: &mut [u8], by: usize);
    /// The pseudo-header sum of a datagram with headers `head` and UDP length `udp_len`.
    fn datagram_pseudo_header(head: &[u8], udp_len: u16) -> Checksum;
    /// Write datagram `i`'s IP header (for `udp_len` UDP bytes) into `out` from the
    /// parcel's header `parcel`; returns the pseudo-header sum of its UDP checksum.
    fn write_datagram_ip(parcel: &[u8], i: usize, udp_len: usize, out: &mut [u8]) -> Checksum;
    /// Make datagram 0's IP header in `out` (from `write_datagram_ip`) datagram `i`'s:
    /// the IPv4 identification moved on by `i`, the header checksum updated for it
    /// (RFC 1624); IPv6 datagrams have no per-datagram field.
    fn patch_datagram_ident(out: &mut [u8], i: usize);
}

impl ParcelFamily for Ip4 {
    const INPUT: &'static str = "parcel4-input";
    const SPLIT: &'static str = "parcel4-split";
    type InputNext = Parcel4InputNext;
    const TO_REWRITE: Parcel4InputNext = Parcel4InputNext::Rewrite;
    const TO_SPLIT: Parcel4InputNext = Parcel4InputNext::Split;
    const TO_OUTPUT: Parcel4InputNext = Parcel4InputNext::Output;
    const TO_TUNNEL: Parcel4InputNext = Parcel4InputNext::Lookup;
    type SplitNext = Parcel4SplitNext;
    const TO_LOOKUP: Parcel4SplitNext = Parcel4SplitNext::Lookup;
    const SPLIT_TO_REWRITE: Parcel4SplitNext = Parcel4SplitNext::Rewrite;
    const SPLIT_TO_OUTPUT: Parcel4SplitNext = Parcel4SplitNext::Output;
    const DATAGRAM_IP_LEN: usize = 20;
    const JOIN: &'static str = "parcel4-join";
    type JoinNext = Parcel4JoinNext;
    const JOIN_TO_REWRITE: Parcel4JoinNext = Parcel4JoinNext::Rewrite;
    const JOIN_TO_LOOKUP: Parcel4JoinNext = Parcel4JoinNext::Lookup;
    const JOIN_TO_OUTPUT: Parcel4JoinNext = Parcel4JoinNext::Output;
    const PARCEL_HEADER_LEN: usize = wire::parcel::IPV4_HEADER_LEN;
    const HOP_LIMIT_AT: usize = 8;
    fn datagram_udp_len(b: &[u8]) -> Option<u16> {
        let h = b.first_chunk::<28>()?;
        let udp_len = u16::from_be_bytes([h[24], h[25]]);
        (h[0] == 0x45 && h[9] == 17 && h[6] & 0x3f == 0 && h[7] == 0 && udp_len as usize == b.len() - 20 && udp_len > 8).then_some(udp_len)
    }
    fn same_flow(a: &[u8], b: &[u8]) -> bool {
        a[12..24] == b[12..24] && a[1] == b[1]
    }
    #[inline]
    fn emit_parcel_headers(head: &[u8], segs: &SegmentsRepr, out: &mut [u8]) {
        let r = Parcel4Repr {
            src: [head[12], head[13], head[14], head[15]].into(),
            dst: [head[16], head[17], head[18], head[19]].into(),
            ident: u16::from_be_bytes([head[4], head[5]]),
            ttl: head[8],
            dscp_ecn: head[1],
            probe: None,
            segments: *segs,
        };
        r.emit(out);
        // The prototype's form: the only implementation's receivers check that one.
        let at = Self::PARCEL_HEADER_LEN + 6;
        out[at..at + 2].copy_from_slice(&r.udp_checksum(UdpChecksumForm::Prototype).to_be_bytes());
    }
    fn advance_ident(head: &mut [u8], by: usize) {
        let ident = u16::from_be_bytes([head[4], head[5]]).wrapping_add(by as u16);
        head[4..6].copy_from_slice(&ident.to_be_bytes());
    }
    fn datagram_pseudo_header(head: &[u8], udp_len: u16) -> Checksum {
        pseudo_header_v4([head[12], head[13], head[14], head[15]].into(), [head[16], head[17], head[18], head[19]].into(), 17, udp_len)
    }
    fn check_with_udp(b: &[u8]) -> Result<(Shape, bool), ParcelError> {
        Parcel4::new_checked(b).map(|p| (Shape::of(&p), p.verify_udp_checksum().is_some()))
    }
    #[inline]
    fn write_datagram_ip(parcel: &[u8], i: usize, udp_len: usize, out: &mut [u8]) -> Checksum {
        let total = (20 + udp_len) as u16;
        // Each datagram its own identification (RFC 6864: they are not atomic unless DF).
        let ident = u16::from_be_bytes([parcel[4], parcel[5]]).wrapping_add(i as u16);
        out[0] = 0x45;
        out[1] = parcel[1];
        out[2..4].copy_from_slice(&total.to_be_bytes());
        out[4..6].copy_from_slice(&ident.to_be_bytes());
        out[6] = parcel[6] & 0x40;
        out[7] = 0;
        out[8] = parcel[8];
        out[9] = 17;
        out[10..12].fill(0);
        out[12..20].copy_from_slice(&parcel[12..20]);
        let c = wire::checksum::checksum(&out[..20]);
        out[10..12].copy_from_slice(&c.to_be_bytes());
        let mut p = Checksum::new();
        p.add_bytes(&parcel[12..20]).add_u16(17).add_u16(udp_len as u16);
        p
    }
    #[inline]
    fn patch_datagram_ident(out: &mut [u8], i: usize) {
        if i == 0 {
            return;
        }
        let old = u16::from_be_bytes([out[4], out[5]]);
        let new = old.wrapping_add(i as u16);
        let sum = wire::checksum::update16(u16::from_be_bytes([out[10], out[11]]), old, new);
        out[4..6].copy_from_slice(&new.to_be_bytes());
        out[10..12].copy_from_slice(&sum.to_be_bytes());
    }
}

impl ParcelFamily for Ip6 {
    const INPUT: &'static str = "parcel6-input";
    const SPLIT: &'static str = "parcel6-split";
    type InputNext = Parcel6InputNext;
    const TO_REWRITE: Parcel6InputNext = Parcel6InputNext::Rewrite;
    const TO_SPLIT: Parcel6InputNext = Parcel6InputNext::Split;
    const TO_OUTPUT: Parcel6InputNext = Parcel6InputNext::Output;
    const TO_TUNNEL: Parcel6InputNext = Parcel6InputNext::Lookup;
    type SplitNext = Parcel6SplitNext;
    const TO_LOOKUP: Parcel6SplitNext = Parcel6SplitNext::Lookup;
    const SPLIT_TO_REWRITE: Parcel6SplitNext = Parcel6SplitNext::Rewrite;
    const SPLIT_TO_OUTPUT: Parcel6SplitNext = Parcel6SplitNext::Output;
    const DATAGRAM_IP_LEN: usize = 40;
    const JOIN: &'static str = "parcel6-join";
    type JoinNext = Parcel6JoinNext;
    const JOIN_TO_REWRITE: Parcel6JoinNext = Parcel6JoinNext::Rewrite;
    const JOIN_TO_LOOKUP: Parcel6JoinNext = Parcel6JoinNext::Lookup;
    const JOIN_TO_OUTPUT: Parcel6JoinNext = Parcel6JoinNext::Output;
    const PARCEL_HEADER_LEN: usize = wire::parcel::IPV6_HEADER_LEN;
    const HOP_LIMIT_AT: usize = 7;
    fn datagram_udp_len(b: &[u8]) -> Option<u16> {
        let h = b.first_chunk::<48>()?;
        let (pl, udp_len) = (u16::from_be_bytes([h[4], h[5]]), u16::from_be_bytes([h[44], h[45]]));
        (h[0] >> 4 == 6 && h[6] == 17 && pl as usize == b.len() - 40 && udp_len == pl && udp_len > 8).then_some(udp_len)
    }
    fn same_flow(a: &[u8], b: &[u8]) -> bool {
        a[8..44] == b[8..44] && a[..4] == b[..4]
    }
    #[inline]
    fn emit_parcel_headers(head: &[u8], segs: &SegmentsRepr, out: &mut [u8]) {
        let w = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let r = Parcel6Repr {
            src: <[u8; 16]>::try_from(&head[8..24]).map_or(std::net::Ipv6Addr::UNSPECIFIED, Into::into),
            dst: <[u8; 16]>::try_from(&head[24..40]).map_or(std::net::Ipv6Addr::UNSPECIFIED, Into::into),
            hop_limit: head[7],
            traffic_class: (w >> 20) as u8,
            flow_label: w & 0x000f_ffff,
            segments: *segs,
        };
        r.emit(out);
        let at = Self::PARCEL_HEADER_LEN + 6;
        out[at..at + 2].copy_from_slice(&r.udp_checksum().to_be_bytes());
    }
    fn advance_ident(_head: &mut [u8], _by: usize) {}
    fn datagram_pseudo_header(head: &[u8], udp_len: u16) -> Checksum {
        let a = |at: usize| <[u8; 16]>::try_from(&head[at..at + 16]).map_or(std::net::Ipv6Addr::UNSPECIFIED, Into::into);
        pseudo_header_v6(&a(8), &a(24), 17, udp_len as u32)
    }
    fn check_with_udp(b: &[u8]) -> Result<(Shape, bool), ParcelError> {
        Parcel6::new_checked(b).map(|p| (Shape::of(&p), p.verify_udp_checksum().is_some()))
    }
    #[inline]
    fn write_datagram_ip(parcel: &[u8], _i: usize, udp_len: usize, out: &mut [u8]) -> Checksum {
        out[..4].copy_from_slice(&parcel[..4]);
        out[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        out[6] = 17;
        out[7] = parcel[7];
        out[8..40].copy_from_slice(&parcel[8..40]);
        let mut p = Checksum::new();
        p.add_bytes(&parcel[8..40]).add_u32(udp_len as u32).add_u32(17);
        p
    }
    #[inline]
    fn patch_datagram_ident(_out: &mut [u8], _i: usize) {}
}
