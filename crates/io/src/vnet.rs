//! The virtio-net header that packet sockets (`PACKET_VNET_HDR`) and TAP devices
//! (`IFF_VNET_HDR`) put in front of every frame: how the kernel hands over, and takes
//! back, a frame whose L4 checksum is still to be computed or that is one large GSO
//! frame standing for many segments. Its fields map one to one onto the engine's
//! [`Offload`] metadata, so a frame crosses the dataplane with that work still pending
//! and the transmitting kernel does it (or nobody does, when the frame stays local).
//!
//! Layout (struct virtio_net_hdr, host byte order on Linux): flags u8, gso_type u8,
//! hdr_len u16, gso_size u16, csum_start u16, csum_offset u16 — 10 bytes.

use engine::{Buffer, GsoKind};
use wire::ethernet::EthernetFrame;
use wire::ipv4::Ipv4Packet;
use wire::vlan::VlanTag;
use wire::EtherType;

pub const VNET_HDR_LEN: usize = 10;

/// `flags`: the checksum from `csum_start` to the end is still to be computed.
pub const F_NEEDS_CSUM: u8 = 1;
/// `flags`: the receiving side already validated the checksum.
pub const F_DATA_VALID: u8 = 2;

pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP: u8 = 3;
pub const GSO_TCPV6: u8 = 4;
/// UDP segmentation (USO). Debian's 6.1 headers lack the name; the value is fixed.
pub const GSO_UDP_L4: u8 = 5;
pub const GSO_ECN: u8 = 0x80;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

/// Why a received vnet header cannot be carried into the dataplane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VnetError {
    #[error("GSO type {0:#x} is not supported (UFO or unknown)")]
    UnsupportedGso(u8),
    #[error("checksum start/offset outside the frame")]
    BadChecksumOffsets,
    #[error("GSO frame without a partial checksum")]
    GsoWithoutChecksum,
    #[error("checksum start inside the IP header")]
    ChecksumInIpHeader,
}

/// Where an Ethernet frame's IPv4 or IPv6 header ends (after up to two VLAN tags), or
/// `None` for other frames and frames too short to say.
fn ip_header_end(frame: &[u8]) -> Option<usize> {
    let mut ethertype = EthernetFrame::new_checked(frame).ok()?.ethertype();
    let mut at = wire::ethernet::HEADER_LEN;
    for _ in 0..2 {
        if !matches!(ethertype, EtherType::Vlan | EtherType::QinQ) {
            break;
        }
        ethertype = VlanTag::new_checked(frame.get(at..)?).ok()?.ethertype();
        at += wire::vlan::TAG_LEN;
    }
    match ethertype {
        // An IHL below 5 is no header ipN-input takes; 20 bytes are still header.
        EtherType::Ipv4 => Some(at + Ipv4Packet::new_unchecked(frame.get(at..).filter(|p| !p.is_empty())?).header_len().max(20)),
        EtherType::Ipv6 => Some(at + wire::ipv6::HEADER_LEN),
        _ => None,
    }
}

impl VnetHdr {
    pub fn parse(b: &[u8; VNET_HDR_LEN]) -> VnetHdr {
        let w = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        VnetHdr { flags: b[0], gso_type: b[1], hdr_len: w(2), gso_size: w(4), csum_start: w(6), csum_offset: w(8) }
    }

    pub fn emit(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// Move this header's work into the metadata of `buf`, which holds the frame it came
    /// with (starting at the Ethernet header).
    pub fn apply_to(&self, buf: &mut Buffer) -> Result<(), VnetError> {
        let gso = match self.gso_type & !GSO_ECN {
            GSO_NONE => GsoKind::None,
            GSO_TCPV4 => GsoKind::Tcp4,
            GSO_TCPV6 => GsoKind::Tcp6,
            GSO_UDP_L4 => GsoKind::UdpL4,
            t => return Err(VnetError::UnsupportedGso(t)),
        };
        if self.flags & F_NEEDS_CSUM != 0 {
            if self.csum_start as usize + self.csum_offset as usize + 2 > buf.len() {
                return Err(VnetError::BadChecksumOffsets);
            }
            // An L4 checksum starts after the IP header: one pending inside it would be
            // written over the header's own fields when completed (found by the graph
            // fuzz target: a TTL and protocol overwritten, the IPv4 checksum then wrong).
            if ip_header_end(buf.bytes()).is_some_and(|end| (self.csum_start as usize) < end) {
                return Err(VnetError::ChecksumInIpHeader);
            }
            buf.set_partial_checksum(self.csum_start as usize, self.csum_offset as usize);
        } else if gso != GsoKind::None {
            return Err(VnetError::GsoWithoutChecksum);
        }
        if self.flags & F_DATA_VALID != 0 {
            buf.meta.l4_checksum_ok = true;
        }
        buf.meta.offload.gso = gso;
        buf.meta.offload.gso_size = if gso == GsoKind::None { 0 } else { self.gso_size };
        Ok(())
    }

    /// The header to send `buf` (starting at its Ethernet header) with: the checksum and
    /// segmentation its metadata still asks for. A pending checksum that no longer lies
    /// in the frame is dropped from the header (`None` returned only for GSO frames whose
    /// headers cannot be found; the caller sends those without offload or drops them).
    pub fn for_buffer(buf: &Buffer) -> Option<VnetHdr> {
        let o = buf.meta.offload;
        let mut h = VnetHdr::default();
        // A checksum pending in headers a node has since stripped (a decapsulated
        // tunnel's outer UDP) went with them.
        let pending = (o.csum_start as usize).checked_sub(buf.offset()).filter(|_| o.has_partial_checksum());
        // One beyond the frame's end is stale too (a node cut the packet short).
        if let Some(start) = pending.filter(|s| s + o.csum_offset as usize + 2 <= buf.len()) {
            h.flags = F_NEEDS_CSUM;
            h.csum_start = start as u16;
            h.csum_offset = o.csum_offset;
        }
        if o.gso != GsoKind::None {
            if h.flags & F_NEEDS_CSUM == 0 {
                return None;
            }
            let l4 = h.csum_start as usize;
            let l4_len = match o.gso {
                GsoKind::UdpL4 => 8,
                _ => wire::tcp::header_len_at(buf.bytes(), l4)?,
            };
            h.gso_type = match o.gso {
                GsoKind::Tcp4 => GSO_TCPV4,
                GsoKind::Tcp6 => GSO_TCPV6,
                GsoKind::UdpL4 => GSO_UDP_L4,
                GsoKind::None => GSO_NONE,
            };
            h.hdr_len = (l4 + l4_len) as u16;
            h.gso_size = o.gso_size;
        }
        Some(h)
    }
}

/// Does in software what a frame's metadata asks of a device that cannot: completes a
/// pending partial checksum. Devices without offload (pcap files, the generator's sink)
/// call it before writing a frame out, so what leaves is a correct packet.
pub fn complete_in_software(buf: &mut Buffer) {
    if let Some((start, offset)) = buf.take_partial_checksum() {
        wire::checksum::complete_partial(buf.bytes_mut(), start, offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::Pool;

    #[test]
    fn header_round_trips_through_metadata() {
        let mut pool = Pool::new(1, 0);
        let b = pool.alloc(100).unwrap();
        let buf = pool.get_mut(b);
        // Ethernet + IPv4 + a TCP header with data offset 5 (20 bytes), then payload.
        let mut frame = vec![0u8; 14 + 20 + 20 + 40];
        frame[14 + 20 + 12] = 5 << 4;
        buf.write(&frame).unwrap();
        let h = VnetHdr { flags: F_NEEDS_CSUM, gso_type: GSO_TCPV4, hdr_len: 54, gso_size: 20, csum_start: 34, csum_offset: 16 };
        assert_eq!(VnetHdr::parse(&h.emit()), h);
        h.apply_to(buf).unwrap();
        assert_eq!(buf.meta.offload.gso, GsoKind::Tcp4);
        // Strip the Ethernet header and put a different one back: the offsets follow.
        buf.advance(14).unwrap();
        buf.prepend(14).unwrap();
        assert_eq!(VnetHdr::for_buffer(buf), Some(h));
        // Encapsulating in front moves csum_start by the added bytes.
        buf.prepend(36).unwrap();
        assert_eq!(VnetHdr::for_buffer(buf).unwrap().csum_start, 70);
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut pool = Pool::new(1, 0);
        let b = pool.alloc(100).unwrap();
        let buf = pool.get_mut(b);
        buf.write(&[0u8; 60]).unwrap();
        let ufo = VnetHdr { flags: F_NEEDS_CSUM, gso_type: GSO_UDP, csum_start: 34, csum_offset: 6, ..Default::default() };
        assert_eq!(ufo.apply_to(buf), Err(VnetError::UnsupportedGso(GSO_UDP)));
        let beyond = VnetHdr { flags: F_NEEDS_CSUM, csum_start: 58, csum_offset: 6, ..Default::default() };
        assert_eq!(beyond.apply_to(buf), Err(VnetError::BadChecksumOffsets));
        let gso_no_csum = VnetHdr { gso_type: GSO_TCPV6, gso_size: 1000, ..Default::default() };
        assert_eq!(gso_no_csum.apply_to(buf), Err(VnetError::GsoWithoutChecksum));
    }

    /// A pending checksum must start past the IP header (IPv4 with options, IPv6, behind
    /// a VLAN tag): one inside it would overwrite the header's fields.
    #[test]
    fn a_checksum_inside_the_ip_header_is_refused() {
        let mut pool = Pool::new(4, 0);
        let frame = |tags: usize, ethertype: u16, first: u8| {
            let mut f = vec![0u8; 14 + 4 * tags + 80];
            for t in 0..tags {
                f[12 + 4 * t..14 + 4 * t].copy_from_slice(&0x8100u16.to_be_bytes());
            }
            f[12 + 4 * tags..14 + 4 * tags].copy_from_slice(&ethertype.to_be_bytes());
            f[14 + 4 * tags] = first;
            f
        };
        // (frame, the first csum_start allowed)
        for (f, l4) in
            [(frame(0, 0x0800, 0x45), 34), (frame(0, 0x0800, 0x47), 42), (frame(1, 0x0800, 0x45), 38), (frame(0, 0x86dd, 0x60), 54)]
        {
            let b = pool.alloc(f.len()).unwrap();
            let buf = pool.get_mut(b);
            buf.write(&f).unwrap();
            for start in [16, 22, l4 - 1] {
                let h = VnetHdr { flags: F_NEEDS_CSUM, csum_start: start as u16, csum_offset: 6, ..Default::default() };
                assert_eq!(h.apply_to(buf), Err(VnetError::ChecksumInIpHeader), "csum_start {start}");
            }
            let h = VnetHdr { flags: F_NEEDS_CSUM, csum_start: l4 as u16, csum_offset: 6, ..Default::default() };
            assert_eq!(h.apply_to(buf), Ok(()), "csum_start {l4}");
            pool.free(b);
        }
    }
}
