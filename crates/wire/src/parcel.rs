//! IP parcels: one IP header, a UDP header, an integrity block of N segment checksums,
//! then N segments of equal length L (the last may be shorter).
//!
//! **IPv4, pinned from the only implementation** (the IETF 115 prototype's Linux 5.10.67
//! patches, the form its implementation report's capture shows):
//! ```text
//! IPv4 header, IHL 7     Total Length = L (the segment length, not the packet length)
//!   option 0x0b, len 6   [0x0b][6][NSegs: 8][Jumbo Length: 24][0][0]
//!                        Jumbo Length = the whole packet, IP header included
//!   (probe form: len 20, IHL 10: [0x0b][20][0xff][TTL][NSegs: 8 | length: 24][65536: 32]
//!    [nonce: 32][nonce: 32]; a receiver reads NSegs and length from bytes 4..8)
//! UDP header             Length = 0; Checksum over the header only (below)
//! integrity block        N × 16 bits: segment i's checksum over its own bytes, 0 sent as
//!                        0xffff; a zero slot means "not computed" (SO_NO_CHECK)
//! segments               N × L bytes, the last one 1..=L bytes
//! ```
//! The UDP checksum covers the pseudo-header (src, dst, 0, 17, L), the UDP header with
//! length and checksum 0, and the 32-bit word `NSegs << 24 | UDP length` (UDP length = 8 +
//! 2N + segment bytes). The prototype passes L byte-swapped into the pseudo-header (an
//! `htons` too many on x86), which is what the report's capture carries (0xc33f), so a
//! receiver accepts either form ([`UdpChecksumForm`]) and we send the prototype's.
//!
//! **IPv6** has no implementation to pin against. We use the layout of the IP parcels
//! draft of the IETF 115 period (draft-templin-intarea-parcels), mirroring the IPv4 option:
//! ```text
//! IPv6 header            Payload Length = L (non-zero: what tells a parcel from an
//!                        RFC 2675 jumbogram, whose Payload Length is 0); Next Header 0
//! hop-by-hop header, 8   [17][0][0xc2][4][NSegs: 8][Jumbo Length: 24]
//!                        the RFC 2675 Jumbo Payload option whose 32-bit length is split as
//!                        in the IPv4 option; the length counts as RFC 2675's does:
//!                        everything after the IPv6 header
//! UDP, integrity block and segments as for IPv4; the UDP checksum's pseudo-header is
//! RFC 8200's (src, dst, L as 32 bits, 17), in the plain form only.
//! ```

use crate::checksum::{self, Checksum};
use crate::ip::IpProtocol;
use core::net::{Ipv4Addr, Ipv6Addr};

/// IPv4 option type of the parcel (RFC 1063's obsolete "MTU Probe" number, reused).
pub const IPV4_OPTION: u8 = 0x0b;
/// Option length of the plain form (plus 2 bytes of padding to the 28-byte header).
pub const IPV4_OPTION_LEN: usize = 6;
/// Option length of the probe form (header 40 bytes).
pub const IPV4_PROBE_OPTION_LEN: usize = 20;
/// IPv4 header carrying the plain option.
pub const IPV4_HEADER_LEN: usize = 28;
/// IPv6 header plus the 8-byte hop-by-hop header with the jumbo option.
pub const IPV6_HEADER_LEN: usize = 48;
/// The RFC 2675 Jumbo Payload option type.
pub const IPV6_JUMBO_OPTION: u8 = 0xc2;
pub const UDP_HEADER_LEN: usize = 8;
/// NSegs is an 8-bit field.
pub const MAX_SEGMENTS: usize = 255;
/// The jumbo length is a 24-bit field.
pub const MAX_JUMBO_LEN: usize = (1 << 24) - 1;

/// Why bytes were refused as a parcel. Each variant maps to one drop counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParcelError {
    #[error("buffer shorter than the parcel's IP and UDP headers")]
    Truncated,
    #[error("IP version, header length or next header is not a UDP parcel's")]
    NotParcel,
    #[error("parcel option malformed (IPv4 option 0x0b length not 6 or 20, IPv6 jumbo option length not 4)")]
    BadOption,
    #[error("IPv4 header checksum mismatch")]
    BadHeaderChecksum,
    #[error("NSegs is 0")]
    NoSegments,
    #[error("segment length is 0")]
    NoSegmentLength,
    #[error("UDP length is not 0")]
    BadUdpLength,
    #[error("jumbo length leaves no room for the integrity block")]
    IntegrityTruncated,
    #[error("buffer shorter than the jumbo length: a segment is shorter than declared")]
    SegmentTruncated,
    #[error("jumbo length exceeds the headers plus NSegs × segment length")]
    LengthMismatch,
    #[error("segments end before the last one begins: a non-final segment is short")]
    ShortNonFinalSegment,
}

/// Which pseudo-header length the UDP checksum was computed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpChecksumForm {
    /// The segment length byte-swapped, as the prototype sends (IPv4 only).
    Prototype,
    /// The segment length as written.
    Plain,
}

/// The parsed layout, shared by both families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// Offset of the UDP header (the IP header, and for IPv6 the hop-by-hop header).
    udp_at: usize,
    nsegs: usize,
    seg_len: usize,
    /// Length of the whole packet.
    total_len: usize,
}

/// A checked view of a UDP parcel. `V6` selects the family; see [`Parcel4`], [`Parcel6`].
#[derive(Debug, Clone)]
pub struct Parcel<T: AsRef<[u8]>, const V6: bool> {
    buffer: T,
    layout: Layout,
}

pub type Parcel4<T> = Parcel<T, false>;
pub type Parcel6<T> = Parcel<T, true>;

/// Quick test for the dispatch in `ip4-input`: an IPv4 header whose first option is the
/// parcel option (the prototype always puts it first). Needs at least 21 bytes to say yes.
#[inline(always)]
pub fn is_ipv4_parcel(b: &[u8]) -> bool {
    b.len() > 20 && b[0] & 0x0f > 5 && b[20] == IPV4_OPTION
}

/// Quick test for `ip6-input`: a hop-by-hop header whose first option is the jumbo option,
/// with a non-zero Payload Length (a parcel, not an RFC 2675 jumbogram).
#[inline(always)]
pub fn is_ipv6_parcel(b: &[u8]) -> bool {
    b.len() >= IPV6_HEADER_LEN && b[6] == 0 && (b[4] | b[5]) != 0 && b[42] == IPV6_JUMBO_OPTION
}

#[inline(always)]
fn parse_v4(b: &[u8]) -> Result<Layout, ParcelError> {
    if b.len() < IPV4_HEADER_LEN {
        return Err(ParcelError::Truncated);
    }
    let hl = (b[0] & 0x0f) as usize * 4;
    if b[0] >> 4 != 4 || b[9] != u8::from(IpProtocol::Udp) || !is_ipv4_parcel(b) {
        return Err(ParcelError::NotParcel);
    }
    if b.len() < hl + UDP_HEADER_LEN {
        return Err(ParcelError::Truncated);
    }
    let (nsegs, jumbo) = match (b[21] as usize, hl) {
        (IPV4_OPTION_LEN, IPV4_HEADER_LEN) => (b[22] as usize, crate::be32(b, 22) as usize & MAX_JUMBO_LEN),
        (IPV4_PROBE_OPTION_LEN, 40) => (b[24] as usize, crate::be32(b, 24) as usize & MAX_JUMBO_LEN),
        _ => return Err(ParcelError::BadOption),
    };
    // The two header sizes the option allows, each summed at its fixed size.
    let header_ok = if hl == IPV4_HEADER_LEN {
        b.first_chunk::<IPV4_HEADER_LEN>().is_some_and(checksum::verify_ipv4_header_words)
    } else {
        b.first_chunk::<40>().is_some_and(checksum::verify_ipv4_header_words)
    };
    if !header_ok {
        return Err(ParcelError::BadHeaderChecksum);
    }
    layout(b, hl, nsegs, crate::be16(b, 2) as usize, jumbo)
}

#[inline(always)]
fn parse_v6(b: &[u8]) -> Result<Layout, ParcelError> {
    if b.len() < IPV6_HEADER_LEN + UDP_HEADER_LEN {
        return Err(ParcelError::Truncated);
    }
    if b[0] >> 4 != 6 || b[40] != u8::from(IpProtocol::Udp) || !is_ipv6_parcel(b) {
        return Err(ParcelError::NotParcel);
    }
    if b[41] != 0 || b[43] != 4 {
        return Err(ParcelError::BadOption);
    }
    let jumbo = crate::be32(b, 44) as usize & MAX_JUMBO_LEN;
    // RFC 2675 counts after the IPv6 header; the layout counts the whole packet.
    layout(b, IPV6_HEADER_LEN, b[44] as usize, crate::be16(b, 4) as usize, 40 + jumbo)
}

/// The checks common to both families, in the order the error list reads.
#[inline(always)]
fn layout(b: &[u8], udp_at: usize, nsegs: usize, seg_len: usize, total_len: usize) -> Result<Layout, ParcelError> {
    if nsegs == 0 {
        return Err(ParcelError::NoSegments);
    }
    if seg_len == 0 {
        return Err(ParcelError::NoSegmentLength);
    }
    if crate::be16(b, udp_at + 4) != 0 {
        return Err(ParcelError::BadUdpLength);
    }
    let data_at = udp_at + UDP_HEADER_LEN + 2 * nsegs;
    if total_len < data_at || b.len() < data_at {
        return Err(ParcelError::IntegrityTruncated);
    }
    if b.len() < total_len {
        return Err(ParcelError::SegmentTruncated);
    }
    let data = total_len - data_at;
    if data > nsegs * seg_len {
        return Err(ParcelError::LengthMismatch);
    }
    if data <= (nsegs - 1) * seg_len {
        return Err(ParcelError::ShortNonFinalSegment);
    }
    Ok(Layout { udp_at, nsegs, seg_len, total_len })
}

impl<T: AsRef<[u8]>, const V6: bool> Parcel<T, V6> {
    /// Checks every length and count against the buffer (bytes past the jumbo length are
    /// allowed, as link padding). Does not check the UDP or segment checksums: those are
    /// separate, countable steps.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, ParcelError> {
        let layout = if V6 { parse_v6(buffer.as_ref())? } else { parse_v4(buffer.as_ref())? };
        Ok(Parcel { buffer, layout })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The IP header (with the IPv6 hop-by-hop header): the UDP header's offset.
    #[inline(always)]
    pub fn ip_header_len(&self) -> usize {
        self.layout.udp_at
    }
    #[inline(always)]
    pub fn segment_count(&self) -> usize {
        self.layout.nsegs
    }
    /// L: every segment's length but possibly the last's.
    #[inline(always)]
    pub fn segment_len(&self) -> usize {
        self.layout.seg_len
    }
    /// The whole packet, from the jumbo length.
    #[inline(always)]
    pub fn total_len(&self) -> usize {
        self.layout.total_len
    }
    #[inline(always)]
    pub fn last_segment_len(&self) -> usize {
        self.layout.total_len - self.data_at() - (self.layout.nsegs - 1) * self.layout.seg_len
    }
    /// The segment bytes' total: the UDP length the prototype writes into its checksum word.
    pub fn udp_len(&self) -> usize {
        self.layout.total_len - self.layout.udp_at
    }
    #[inline(always)]
    fn data_at(&self) -> usize {
        self.layout.udp_at + UDP_HEADER_LEN + 2 * self.layout.nsegs
    }
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), self.layout.udp_at)
    }
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), self.layout.udp_at + 2)
    }
    pub fn udp_checksum(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), self.layout.udp_at + 6)
    }
    /// Offset of segment `i`'s bytes in the buffer. `i < segment_count()`.
    #[inline(always)]
    pub fn segment_offset(&self, i: usize) -> usize {
        self.data_at() + i * self.layout.seg_len
    }
    /// Segment `i`'s bytes. Panics if `i >= segment_count()` (a caller bug, not input).
    #[inline]
    pub fn segment(&self, i: usize) -> &[u8] {
        assert!(i < self.layout.nsegs);
        let at = self.segment_offset(i);
        let end = if i + 1 == self.layout.nsegs { self.layout.total_len } else { at + self.layout.seg_len };
        &self.buffer.as_ref()[at..end]
    }
    /// Integrity-block slot `i`: 0 when the sender did not compute it.
    #[inline(always)]
    pub fn segment_checksum(&self, i: usize) -> u16 {
        assert!(i < self.layout.nsegs);
        crate::be16(self.buffer.as_ref(), self.layout.udp_at + UDP_HEADER_LEN + 2 * i)
    }
    /// True when slot `i` is 0 (not computed) or matches segment `i`'s bytes.
    pub fn verify_segment(&self, i: usize) -> bool {
        let slot = self.segment_checksum(i);
        slot == 0 || slot == segment_checksum(self.segment(i))
    }
    pub fn segments(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.layout.nsegs).map(move |i| self.segment(i))
    }
    /// The sum every UDP checksum form of this parcel shares: the UDP header with length
    /// and checksum 0 and the `NSegs << 24 | UDP length` word.
    fn udp_header_sum(&self) -> Checksum {
        udp_header_sum(self.src_port(), self.dst_port(), self.layout.nsegs, self.udp_len())
    }
}

/// [`Parcel::udp_header_sum`] from the fields: a parcel's headers are summed where they
/// are emitted, without parsing them back.
fn udp_header_sum(src_port: u16, dst_port: u16, nsegs: usize, udp_len: usize) -> Checksum {
    let mut c = Checksum::new();
    c.add_u16(src_port).add_u16(dst_port);
    c.add_u32(((nsegs as u32) << 24) | (udp_len as u32 & MAX_JUMBO_LEN as u32));
    c
}

/// The IPv4 parcel's UDP checksum in `form` (the `seg_len` field of the pseudo-header
/// byte-swapped in the prototype's form).
fn udp_checksum_v4(src: Ipv4Addr, dst: Ipv4Addr, seg_len: u16, header: Checksum, form: UdpChecksumForm) -> u16 {
    let l = if form == UdpChecksumForm::Prototype { seg_len.swap_bytes() } else { seg_len };
    let mut c = checksum::pseudo_header_v4(src, dst, IpProtocol::Udp.into(), l);
    c.add(header);
    udp_checksum_value(c)
}

/// `~sum(segment)` folded, 0 sent as 0xffff (0 in the slot means "not computed").
#[inline]
pub fn segment_checksum(segment: &[u8]) -> u16 {
    match checksum::checksum(segment) {
        0 => 0xffff,
        c => c,
    }
}

/// The checksum of one ordinary UDP datagram carrying a segment, from the segment's
/// integrity slot (a non-zero slot is the complement of the segment's sum) instead of
/// the segment's bytes: `pseudo` is the pseudo-header sum for UDP length `8 + segment`.
#[inline]
pub fn datagram_checksum_from_slot(pseudo: Checksum, src_port: u16, dst_port: u16, udp_len: u16, slot: u16) -> u16 {
    DatagramChecksums::new(pseudo, src_port, dst_port, udp_len).checksum(slot)
}

/// [`datagram_checksum_from_slot`] for many segments of one length in one flow (a
/// parcel's split): the pseudo-header, ports and length summed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramChecksums(u32);

impl DatagramChecksums {
    #[inline]
    pub fn new(pseudo: Checksum, src_port: u16, dst_port: u16, udp_len: u16) -> Self {
        DatagramChecksums(pseudo.fold() as u32 + src_port as u32 + dst_port as u32 + udp_len as u32)
    }
    /// The UDP checksum of the datagram carrying the segment whose slot is `slot`.
    #[inline(always)]
    pub fn checksum(self, slot: u16) -> u16 {
        complement_of_five_words(self.0 + !slot as u32)
    }
    /// The UDP checksum of the datagram carrying a segment whose sum is `segment` (a
    /// segment without a slot, summed as it was checked).
    #[inline(always)]
    pub fn of_sum(self, segment: Checksum) -> u16 {
        complement_of_five_words(self.0 + segment.fold() as u32)
    }
}

/// A segment's integrity slot from the checksum `udp_checksum` of the ordinary UDP
/// datagram that carries it (non-zero: a datagram sent without one has no sum to take
/// apart): the segment's sum is what remains of the datagram's once the pseudo-header
/// (`pseudo`, for UDP length `udp_len`) and the UDP header are taken out.
#[inline]
pub fn slot_from_datagram_checksum(pseudo: Checksum, src_port: u16, dst_port: u16, udp_len: u16, udp_checksum: u16) -> u16 {
    DatagramSlots::new(pseudo, src_port, dst_port, udp_len).slot(udp_checksum)
}

/// [`slot_from_datagram_checksum`] for many datagrams of one flow and UDP length (a run
/// joined into a parcel): what they share, the pseudo-header, ports and length, summed
/// once, each datagram's checksum added to it.
#[derive(Debug, Clone, Copy)]
pub struct DatagramSlots(u32);

impl DatagramSlots {
    #[inline]
    pub fn new(pseudo: Checksum, src_port: u16, dst_port: u16, udp_len: u16) -> Self {
        DatagramSlots(!pseudo.fold() as u32 + !src_port as u32 + !dst_port as u32 + !udp_len as u32)
    }
    /// The slot of the segment of the datagram whose UDP checksum is `udp_checksum`.
    #[inline(always)]
    pub fn slot(self, udp_checksum: u16) -> u16 {
        complement_of_five_words(self.0 + !udp_checksum as u32)
    }
}

/// The complement of a sum of five 16-bit words, 0 given as 0xffff (a UDP checksum's and a
/// slot's rule): two end-around folds bring the sum to 16 bits (ones' complement addition
/// is the same in either byte order).
#[inline(always)]
fn complement_of_five_words(s: u32) -> u16 {
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    match !(s as u16) {
        0 => 0xffff,
        v => v,
    }
}

fn udp_checksum_value(c: Checksum) -> u16 {
    c.finish()
}

impl<T: AsRef<[u8]>> Parcel4<T> {
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    pub fn ident(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), 4)
    }
    pub fn is_probe(&self) -> bool {
        self.layout.udp_at == 40
    }
    /// The UDP checksum for one form, as the sender would write it.
    pub fn compute_udp_checksum(&self, form: UdpChecksumForm) -> u16 {
        udp_checksum_v4(self.src_addr(), self.dst_addr(), self.layout.seg_len as u16, self.udp_header_sum(), form)
    }
    /// The form the UDP checksum matches, or None for a bad checksum.
    pub fn verify_udp_checksum(&self) -> Option<UdpChecksumForm> {
        let c = self.udp_checksum();
        [UdpChecksumForm::Prototype, UdpChecksumForm::Plain].into_iter().find(|&f| self.compute_udp_checksum(f) == c)
    }
    /// The pseudo-header sum of the ordinary UDP datagram segment `i` becomes.
    pub fn datagram_pseudo_header(&self, udp_len: u16) -> Checksum {
        checksum::pseudo_header_v4(self.src_addr(), self.dst_addr(), IpProtocol::Udp.into(), udp_len)
    }
}

impl<T: AsRef<[u8]>> Parcel6<T> {
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[8..24]);
        a.into()
    }
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[24..40]);
        a.into()
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }
    pub fn compute_udp_checksum(&self) -> u16 {
        udp_checksum_v6(&self.src_addr(), &self.dst_addr(), self.layout.seg_len as u16, self.udp_header_sum())
    }
    pub fn verify_udp_checksum(&self) -> Option<UdpChecksumForm> {
        (self.compute_udp_checksum() == self.udp_checksum()).then_some(UdpChecksumForm::Plain)
    }
    pub fn datagram_pseudo_header(&self, udp_len: u16) -> Checksum {
        checksum::pseudo_header_v6(&self.src_addr(), &self.dst_addr(), IpProtocol::Udp.into(), udp_len as u32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>, const V6: bool> Parcel<T, V6> {
    /// Fills every integrity slot from its segment's bytes.
    pub fn fill_segment_checksums(&mut self) {
        for i in 0..self.layout.nsegs {
            let c = segment_checksum(self.segment(i));
            let at = self.layout.udp_at + UDP_HEADER_LEN + 2 * i;
            crate::put16(self.buffer.as_mut(), at, c);
        }
    }
    pub fn set_udp_checksum(&mut self, v: u16) {
        let at = self.layout.udp_at + 6;
        crate::put16(self.buffer.as_mut(), at, v);
    }
    /// Segment `i`'s bytes, writable.
    pub fn segment_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.layout.nsegs);
        let at = self.segment_offset(i);
        let end = if i + 1 == self.layout.nsegs { self.layout.total_len } else { at + self.layout.seg_len };
        &mut self.buffer.as_mut()[at..end]
    }
}

/// The transport part of a parcel, common to both families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentsRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub nsegs: u8,
    pub seg_len: u16,
    /// 1..=seg_len.
    pub last_len: u16,
}

impl SegmentsRepr {
    /// Bytes from the UDP header to the end of the last segment.
    pub const fn udp_len(&self) -> usize {
        UDP_HEADER_LEN + 2 * self.nsegs as usize + (self.nsegs as usize - 1) * self.seg_len as usize + self.last_len as usize
    }
    fn parse<T: AsRef<[u8]>, const V6: bool>(p: &Parcel<T, V6>) -> Self {
        SegmentsRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            nsegs: p.segment_count() as u8,
            seg_len: p.segment_len() as u16,
            last_len: p.last_segment_len() as u16,
        }
    }
    /// Writes the UDP header (length 0, checksum 0) and zeroes the integrity block.
    fn emit(&self, b: &mut [u8]) {
        crate::put16(b, 0, self.src_port);
        crate::put16(b, 2, self.dst_port);
        b[4..UDP_HEADER_LEN + 2 * self.nsegs as usize].fill(0);
    }
}

/// The probe form's extra fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeRepr {
    pub ttl: u8,
    pub nonces: [u32; 2],
}

/// An IPv4 parcel's headers. Emit writes the headers and a zeroed integrity block; the
/// caller puts the segments in place, then [`Parcel::fill_segment_checksums`] and
/// [`Parcel4Repr::fill_udp_checksum`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parcel4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ident: u16,
    pub ttl: u8,
    pub dscp_ecn: u8,
    pub probe: Option<ProbeRepr>,
    pub segments: SegmentsRepr,
}

impl Parcel4Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Parcel4<T>) -> Self {
        let b = p.buffer.as_ref();
        let probe = p.is_probe().then(|| ProbeRepr { ttl: b[23], nonces: [crate::be32(b, 32), crate::be32(b, 36)] });
        Parcel4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            ident: p.ident(),
            ttl: p.ttl(),
            dscp_ecn: p.dscp_ecn(),
            probe,
            segments: SegmentsRepr::parse(p),
        }
    }
    pub const fn header_len(&self) -> usize {
        if self.probe.is_some() {
            40
        } else {
            IPV4_HEADER_LEN
        }
    }
    /// The whole parcel's length (the jumbo length).
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.segments.udp_len()
    }
    /// Writes the IP and UDP headers and a zeroed integrity block into `b[..]`, which must
    /// hold `buffer_len()` bytes; the segment bytes are not touched.
    pub fn emit(&self, b: &mut [u8]) {
        let hl = self.header_len();
        let s = &self.segments;
        b[0] = 0x40 | (hl / 4) as u8;
        b[1] = self.dscp_ecn;
        crate::put16(b, 2, s.seg_len);
        crate::put16(b, 4, self.ident);
        crate::put16(b, 6, 0);
        b[8] = self.ttl;
        b[9] = IpProtocol::Udp.into();
        crate::put16(b, 10, 0);
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let word = ((s.nsegs as u32) << 24) | self.buffer_len() as u32;
        match self.probe {
            None => {
                b[20] = IPV4_OPTION;
                b[21] = IPV4_OPTION_LEN as u8;
                crate::put32(b, 22, word);
                crate::put16(b, 26, 0);
            }
            Some(p) => {
                b[20..24].copy_from_slice(&[IPV4_OPTION, IPV4_PROBE_OPTION_LEN as u8, 0xff, p.ttl]);
                crate::put32(b, 24, word);
                crate::put32(b, 28, 1 << 16);
                crate::put32(b, 32, p.nonces[0]);
                crate::put32(b, 36, p.nonces[1]);
            }
        }
        let c = checksum::checksum(&b[..hl]);
        crate::put16(b, 10, c);
        s.emit(&mut b[hl..]);
    }
    /// The UDP checksum in `form` of the parcel these headers describe (it covers no
    /// segment data, so it is known before the segments are in place).
    pub fn udp_checksum(&self, form: UdpChecksumForm) -> u16 {
        let s = &self.segments;
        let header = udp_header_sum(s.src_port, s.dst_port, s.nsegs as usize, s.udp_len());
        udp_checksum_v4(self.src, self.dst, s.seg_len, header, form)
    }
    /// Writes the UDP checksum in `form` into an emitted parcel.
    pub fn fill_udp_checksum<T: AsRef<[u8]> + AsMut<[u8]>>(p: &mut Parcel4<T>, form: UdpChecksumForm) {
        let c = p.compute_udp_checksum(form);
        p.set_udp_checksum(c);
    }
}

/// The IPv6 parcel's UDP checksum (one form).
fn udp_checksum_v6(src: &Ipv6Addr, dst: &Ipv6Addr, seg_len: u16, header: Checksum) -> u16 {
    let mut c = checksum::pseudo_header_v6(src, dst, IpProtocol::Udp.into(), seg_len as u32);
    c.add(header);
    udp_checksum_value(c)
}

/// An IPv6 parcel's headers; used as [`Parcel4Repr`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parcel6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub segments: SegmentsRepr,
}

impl Parcel6Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Parcel6<T>) -> Self {
        let b = p.buffer.as_ref();
        let w = crate::be32(b, 0);
        Parcel6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            hop_limit: p.hop_limit(),
            traffic_class: (w >> 20) as u8,
            flow_label: w & 0x000f_ffff,
            segments: SegmentsRepr::parse(p),
        }
    }
    pub const fn buffer_len(&self) -> usize {
        IPV6_HEADER_LEN + self.segments.udp_len()
    }
    pub fn emit(&self, b: &mut [u8]) {
        let s = &self.segments;
        crate::put32(b, 0, (6 << 28) | ((self.traffic_class as u32) << 20) | (self.flow_label & 0x000f_ffff));
        crate::put16(b, 4, s.seg_len);
        b[6] = 0;
        b[7] = self.hop_limit;
        b[8..24].copy_from_slice(&self.src.octets());
        b[24..40].copy_from_slice(&self.dst.octets());
        b[40..44].copy_from_slice(&[IpProtocol::Udp.into(), 0, IPV6_JUMBO_OPTION, 4]);
        crate::put32(b, 44, ((s.nsegs as u32) << 24) | (self.buffer_len() - 40) as u32);
        s.emit(&mut b[IPV6_HEADER_LEN..]);
    }
    /// As [`Parcel4Repr::udp_checksum`].
    pub fn udp_checksum(&self) -> u16 {
        let s = &self.segments;
        udp_checksum_v6(&self.src, &self.dst, s.seg_len, udp_header_sum(s.src_port, s.dst_port, s.nsegs as usize, s.udp_len()))
    }
    pub fn fill_udp_checksum<T: AsRef<[u8]> + AsMut<[u8]>>(p: &mut Parcel6<T>) {
        let c = p.compute_udp_checksum();
        p.set_udp_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_datagram_checksum_of_a_segment_sum_is_the_whole_datagrams() {
        // The datagram's UDP checksum over pseudo-header, header and segment, computed in
        // full, against the one made from the shared sum and the segment's sum.
        let (src, dst) = (core::net::Ipv4Addr::new(198, 18, 0, 1), core::net::Ipv4Addr::new(198, 19, 0, 2));
        for (len, fill) in [(1u16, 0xffu8), (2, 0), (1279, 0x5a), (1280, 0xa5), (64, 0xff)] {
            let seg: Vec<u8> = (0..len).map(|i| fill ^ (i as u8).wrapping_mul(37)).collect();
            let udp_len = 8 + len;
            let pseudo = checksum::pseudo_header_v4(src, dst, 17, udp_len);
            let mut full = pseudo;
            full.add_u16(4000).add_u16(2152).add_u16(udp_len).add_bytes(&seg);
            let want = match full.finish() {
                0 => 0xffff,
                v => v,
            };
            let got = DatagramChecksums::new(pseudo, 4000, 2152, udp_len).of_sum(*Checksum::new().add_bytes(&seg));
            assert_eq!(got, want, "segment of {len} bytes");
        }
    }

    use super::*;
    use proptest::prelude::*;

    /// The report's capture: rows 0x0000..0x0043 (headers and integrity block), then the
    /// first bytes of segment 1 (zeros follow to 3999 bytes). Addresses are the report's
    /// private ones; the test substitutes ours below.
    const SEED_HEAD: &str = "4700 0f9f acbc 0000 4011 2603 c0a8 0001 c0a8 0002 0b06 1000 fa34 0000 b018 6219 \
        0000 c33f 1957 cead b88e a26f 8c50 c1e5 a250 833b 6426 c510 a5fb 86e6 6751 c83b a926 81cd";
    const SEED_SEG1: &str = "0014 0200 0100 9f17 0681 1011 1901 1401 1401 0000 82d7 8ce7 4001 822c 0005 1009 \
        6970 6e00 3230 2e30 0014 0101 0001 09bd 8440 7465 7374 2e2e 2e00 0000";

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn seed_parcel(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
        let r = Parcel4Repr {
            src,
            dst,
            ident: 0xacbc,
            ttl: 64,
            dscp_ecn: 0,
            probe: None,
            segments: SegmentsRepr { src_port: 45080, dst_port: 25113, nsegs: 16, seg_len: 3999, last_len: 3999 },
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        let seg1 = hex(SEED_SEG1);
        b[68..68 + seg1.len()].copy_from_slice(&seg1);
        let mut p = Parcel4::new_checked(&mut b[..]).unwrap();
        p.fill_segment_checksums();
        Parcel4Repr::fill_udp_checksum(&mut p, UdpChecksumForm::Prototype);
        b
    }

    #[test]
    fn report_capture_with_its_own_addresses_reproduces_its_bytes() {
        // The arithmetic check: with the capture's addresses every header byte, the UDP
        // checksum's quirk (0xc33f) and segment 1's checksum (0x1957) come out the same.
        let b = seed_parcel(Ipv4Addr::new(192, 168, 0, 1), Ipv4Addr::new(192, 168, 0, 2));
        let seed = hex(SEED_HEAD);
        assert_eq!(b.len(), 64052);
        assert_eq!(b[..38], seed[..38]);
        let p = Parcel4::new_checked(&b[..]).unwrap();
        assert_eq!(p.verify_udp_checksum(), Some(UdpChecksumForm::Prototype));
        assert_eq!(p.compute_udp_checksum(UdpChecksumForm::Plain), 0x52b0);
    }

    #[test]
    fn report_capture_as_a_vector_with_our_addresses() {
        let (src, dst) = (Ipv4Addr::new(198, 18, 6, 1), Ipv4Addr::new(198, 18, 6, 2));
        let b = seed_parcel(src, dst);
        let p = Parcel4::new_checked(&b[..]).unwrap();
        assert_eq!((p.segment_count(), p.segment_len(), p.total_len(), p.last_segment_len()), (16, 3999, 64052, 3999));
        assert_eq!(p.ip_header_len(), 28);
        assert_eq!((p.src_port(), p.dst_port()), (45080, 25113));
        assert_eq!((p.src_addr(), p.dst_addr()), (src, dst));
        assert!(checksum::verify(&b[..28]));
        assert_eq!(p.verify_udp_checksum(), Some(UdpChecksumForm::Prototype));
        // Segment checksums depend only on segment bytes: segment 1's capture value stands
        // (the capture does not show segments 2..16; ours are zeros, whose sum is 0).
        assert_eq!(p.segment_checksum(0), crate::be16(&hex(SEED_HEAD), 36));
        assert!((1..16).all(|i| p.segment_checksum(i) == 0xffff));
        assert!((0..16).all(|i| p.verify_segment(i)));
        assert_eq!(p.segment(0)[..4], [0x00, 0x14, 0x02, 0x00]);
        assert_eq!(p.segments().map(<[u8]>::len).sum::<usize>(), 16 * 3999);
    }

    #[test]
    fn every_inconsistency_has_its_error() {
        let good = seed_parcel(Ipv4Addr::new(198, 18, 6, 1), Ipv4Addr::new(198, 18, 6, 2));
        let refix = |b: &mut Vec<u8>| {
            b[10..12].fill(0);
            let c = checksum::checksum(&b[..28]);
            b[10..12].copy_from_slice(&c.to_be_bytes());
        };
        let case = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            refix(&mut b);
            Parcel4::new_checked(&b[..]).unwrap_err()
        };
        let set_jumbo = |b: &mut Vec<u8>, j: usize| b[23..26].copy_from_slice(&(j as u32).to_be_bytes()[1..]);
        assert_eq!(case(&|b| b[22] = 0), ParcelError::NoSegments);
        assert_eq!(case(&|b| b[2..4].fill(0)), ParcelError::NoSegmentLength);
        assert_eq!(case(&|b| b[21] = 4), ParcelError::BadOption);
        assert_eq!(case(&|b| b[33] = 8), ParcelError::BadUdpLength);
        assert_eq!(case(&|b| b[9] = 6), ParcelError::NotParcel);
        assert_eq!(case(&|b| set_jumbo(b, 28 + 8 + 31)), ParcelError::IntegrityTruncated);
        assert_eq!(case(&|b| b.truncate(60)), ParcelError::IntegrityTruncated);
        assert_eq!(case(&|b| b.truncate(64051)), ParcelError::SegmentTruncated);
        assert_eq!(
            case(&|b| {
                b.push(0);
                set_jumbo(b, 64053)
            }),
            ParcelError::LengthMismatch
        );
        // 16 segments of 3999 declared, but the bytes end inside segment 15.
        assert_eq!(case(&|b| set_jumbo(b, 64052 - 3999)), ParcelError::ShortNonFinalSegment);
        assert_eq!(case(&|b| b[22] = 17), ParcelError::ShortNonFinalSegment);
        let mut b = good.clone();
        b[8] = 1;
        assert_eq!(Parcel4::new_checked(&b[..]).unwrap_err(), ParcelError::BadHeaderChecksum);
        assert_eq!(Parcel4::new_checked(&good[..27]).unwrap_err(), ParcelError::Truncated);
        // A short *final* segment is fine; a bad segment is found by its slot.
        let mut b = good.clone();
        set_jumbo(&mut b, 64052 - 1000);
        b.truncate(64052 - 1000);
        b[64052 - 1001] = 0x5a; // segment 16's bytes no longer match its slot
        refix(&mut b);
        let p = Parcel4::new_checked(&b[..]).unwrap();
        assert_eq!(p.last_segment_len(), 2999);
        assert!(!p.verify_segment(15));
        assert!(p.verify_segment(14));
    }

    #[test]
    fn ipv6_inconsistencies() {
        let r = Parcel6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 7,
            segments: SegmentsRepr { src_port: 1, dst_port: 2, nsegs: 3, seg_len: 100, last_len: 50 },
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        assert!(is_ipv6_parcel(&b));
        let p = Parcel6::new_checked(&b[..]).unwrap();
        assert_eq!((p.segment_count(), p.last_segment_len(), p.total_len()), (3, 50, 48 + 8 + 6 + 250));
        // RFC 2675's count: everything after the 40-byte IPv6 header.
        assert_eq!(crate::be32(&b, 44) & 0xffffff, 8 + 8 + 6 + 250);
        let case = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut c = b.clone();
            f(&mut c);
            Parcel6::new_checked(&c[..]).unwrap_err()
        };
        assert_eq!(case(&|c| c[44] = 0), ParcelError::NoSegments);
        assert_eq!(case(&|c| c[43] = 6), ParcelError::BadOption);
        assert_eq!(case(&|c| c.truncate(200)), ParcelError::SegmentTruncated);
        assert_eq!(case(&|c| c[44] = 4), ParcelError::ShortNonFinalSegment);
        assert_eq!(case(&|c| c[44] = 2), ParcelError::LengthMismatch);
        assert_eq!(case(&|c| c[4..6].fill(0)), ParcelError::NotParcel);
    }

    fn segs_strategy() -> impl Strategy<Value = (SegmentsRepr, Vec<u8>)> {
        (1u8..=8, 1u16..300, any::<u16>(), any::<u16>(), any::<u64>()).prop_flat_map(|(n, l, sp, dp, seed)| {
            (1..=l).prop_map(move |last| {
                let r = SegmentsRepr { src_port: sp, dst_port: dp, nsegs: n, seg_len: l, last_len: last };
                let len = (n as usize - 1) * l as usize + last as usize;
                let bytes = (0..len).map(|i| (seed.rotate_left(i as u32 % 64) ^ i as u64) as u8).collect();
                (r, bytes)
            })
        })
    }

    proptest! {
        #[test]
        fn ipv4_emit_parse_roundtrip((segs, data) in segs_strategy(), src: u32, dst: u32, ident: u16, ttl: u8, probe: bool, nonce: u32, quirk: bool) {
            let r = Parcel4Repr {
                src: src.into(), dst: dst.into(), ident, ttl, dscp_ecn: 0,
                probe: probe.then_some(ProbeRepr { ttl, nonces: [nonce, !nonce] }), segments: segs,
            };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            let hl = r.header_len() + 8 + 2 * segs.nsegs as usize;
            b[hl..].copy_from_slice(&data);
            let form = if quirk { UdpChecksumForm::Prototype } else { UdpChecksumForm::Plain };
            let mut p = Parcel4::new_checked(&mut b[..]).unwrap();
            p.fill_segment_checksums();
            Parcel4Repr::fill_udp_checksum(&mut p, form);
            let p = Parcel4::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Parcel4Repr::parse(&p), r);
            // The headers' own sum, before anything is parsed back, is the same.
            prop_assert_eq!(r.udp_checksum(form), p.udp_checksum());
            // Both forms coincide when L's two bytes are equal.
            let l = segs.seg_len;
            if l.swap_bytes() != l {
                prop_assert_eq!(p.verify_udp_checksum(), Some(form));
            }
            let joined: Vec<u8> = p.segments().flatten().copied().collect();
            prop_assert_eq!(joined, data);
            for i in 0..p.segment_count() {
                prop_assert!(p.verify_segment(i));
                // The ordinary datagram's checksum from the slot equals a full computation.
                let seg = p.segment(i);
                let ulen = (8 + seg.len()) as u16;
                let fast = datagram_checksum_from_slot(p.datagram_pseudo_header(ulen), p.src_port(), p.dst_port(), ulen, p.segment_checksum(i));
                let mut d = vec![0u8; ulen as usize];
                d[8..].copy_from_slice(seg);
                let mut u = crate::udp::UdpPacket::new_unchecked(&mut d[..]);
                crate::udp::UdpRepr { src_port: p.src_port(), dst_port: p.dst_port() }.emit(&mut u, seg.len());
                u.fill_checksum_v4(p.src_addr(), p.dst_addr());
                prop_assert_eq!(fast, u.checksum());
                // And back: the slot from the datagram's checksum.
                let back = slot_from_datagram_checksum(p.datagram_pseudo_header(ulen), p.src_port(), p.dst_port(), ulen, u.checksum());
                prop_assert_eq!(back, p.segment_checksum(i));
            }
        }

        #[test]
        fn ipv6_emit_parse_roundtrip((segs, data) in segs_strategy(), src: u128, dst: u128, hl: u8, tc: u8, fl in 0u32..1 << 20) {
            let r = Parcel6Repr { src: src.into(), dst: dst.into(), hop_limit: hl, traffic_class: tc, flow_label: fl, segments: segs };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            let at = IPV6_HEADER_LEN + 8 + 2 * segs.nsegs as usize;
            b[at..].copy_from_slice(&data);
            let mut p = Parcel6::new_checked(&mut b[..]).unwrap();
            p.fill_segment_checksums();
            Parcel6Repr::fill_udp_checksum(&mut p);
            let p = Parcel6::new_checked(&b[..]).unwrap();
            prop_assert_eq!(Parcel6Repr::parse(&p), r);
            prop_assert_eq!(r.udp_checksum(), p.udp_checksum());
            prop_assert_eq!(p.verify_udp_checksum(), Some(UdpChecksumForm::Plain));
            for i in 0..p.segment_count() {
                let seg = p.segment(i);
                let ulen = (8 + seg.len()) as u16;
                let fast = datagram_checksum_from_slot(p.datagram_pseudo_header(ulen), p.src_port(), p.dst_port(), ulen, p.segment_checksum(i));
                let mut d = vec![0u8; ulen as usize];
                d[8..].copy_from_slice(seg);
                let mut u = crate::udp::UdpPacket::new_unchecked(&mut d[..]);
                crate::udp::UdpRepr { src_port: p.src_port(), dst_port: p.dst_port() }.emit(&mut u, seg.len());
                u.fill_checksum_v6(&p.src_addr(), &p.dst_addr());
                prop_assert_eq!(fast, u.checksum());
                let back = slot_from_datagram_checksum(p.datagram_pseudo_header(ulen), p.src_port(), p.dst_port(), ulen, u.checksum());
                prop_assert_eq!(back, p.segment_checksum(i));
            }
        }

        #[test]
        fn slots_of_a_run_match_the_sum_taken_apart_word_by_word(pseudo: u64, sp: u16, dp: u16, len: u16, sums in proptest::collection::vec(1u16.., 1..16)) {
            let mut p = Checksum::new();
            p.add_u32(pseudo as u32).add_u32((pseudo >> 32) as u32);
            let slots = DatagramSlots::new(p, sp, dp, len);
            for sum in sums {
                // The definition: every word complemented into one sum, folded, complemented.
                let mut c = Checksum::new();
                c.add_u16(!sum).add_u16(!p.fold()).add_u16(!sp).add_u16(!dp).add_u16(!len);
                let want = match !c.fold() { 0 => 0xffff, v => v };
                prop_assert_eq!(slots.slot(sum), want);
            }
        }

        #[test]
        fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            crate::fuzz::parcel(&data);
        }
    }
}
