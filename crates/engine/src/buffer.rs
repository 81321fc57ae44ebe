//! Packet buffers.
//!
//! A buffer is one contiguous byte area: `HEADROOM` bytes reserved in front so that
//! encapsulation prepends headers in place, then the packet, then tailroom. Packets
//! larger than a regular buffer (jumbograms, IP parcels, GSO frames from a vnet-header
//! device) are taken from the pool's *large* class, not chained: every parser and
//! checksum then sees one slice, and nodes never walk chains. The one exception is made
//! by the pool, not here: a head buffer with an extent in another buffer
//! (`Pool::attach`, `parcel4-split`'s datagrams), which only the nodes and devices that
//! say they take chains ever see; for every other one it is made one buffer first.

use crate::mem::LINE;
use core::num::NonZeroU32;
use core::ptr::NonNull;

/// Bytes reserved before the packet for prepending headers (≥ 128 by design; 256 fits
/// Ethernet + VLAN + IPv6 + UDP + GTP-U with extensions + ESP with room to spare).
pub const HEADROOM: usize = 256;

/// Index of a buffer in its worker's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufIdx(pub(crate) u32);

impl BufIdx {
    pub fn get(self) -> usize {
        self.0 as usize
    }
}

/// Index of an interface (software or device) in the dataplane's interface table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
pub struct IfIndex(pub u16);

impl IfIndex {
    pub fn get(self) -> usize {
        self.0 as usize
    }
}

/// Why a buffer was dropped: the node that dropped it and the index of its counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropReason {
    pub node: u16,
    pub counter: u16,
}

/// Per-packet metadata, carried from node to node. Named fields only; what a field
/// means is defined by the node that writes it and documented there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Interface the packet arrived on.
    pub rx_if: IfIndex,
    /// Interface to send on; set by a rewrite node before `interface-output`.
    pub tx_if: IfIndex,
    /// Result of the last lookup (an adjacency or tunnel index).
    pub adj: u32,
    /// `adj` already holds the FIB's answer for this packet's destination: a node that
    /// looked it up before sending the packet to the lookup node (`ethernet-input`'s fast
    /// path) says so, and the lookup node takes the answer (and clears this).
    pub looked_up: bool,
    /// A per-packet argument from one node to the next (e.g. an ICMP type, code and
    /// MTU for `ip4-icmp-error`); meaningless unless the sending node says so.
    pub param: u32,
    /// Hash of the flow, when a node computed one (0 = not computed).
    pub flow_hash: u32,
    /// Set when a node dropped the buffer.
    pub drop: Option<DropReason>,
    /// Set on packets selected by `trace add`.
    pub trace: Option<NonZeroU32>,
    /// The receiving device verified the L4 checksum (virtio-net DATA_VALID, AF_XDP RX
    /// metadata), so nodes need not recompute it.
    pub l4_checksum_ok: bool,
    /// Checksum and segmentation work left for the transmitting device (virtio-net
    /// header semantics); default: none.
    pub offload: Offload,
    /// A datagram the gateway reassembled on its way through (`ipN-reassembly` for the
    /// load balancer): its sender fragmented it, so it is fragmented again where a link
    /// needs it, IPv6 included (as Linux does after conntrack's defragmentation), not
    /// answered with Packet Too Big, which the sender could not act on.
    pub refragment: bool,
}

/// Segmentation a GSO frame still needs: what kind, in segments of `Offload::gso_size`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GsoKind {
    #[default]
    None,
    Tcp4,
    Tcp6,
    /// UDP segmentation (USO): each segment a UDP datagram of its own.
    UdpL4,
}

/// Work a packet carries for the device that sends it, as the Linux kernel hands it over
/// a vnet header: a partial L4 checksum (the checksum field holds the pseudo-header sum;
/// the device sums from `csum_start` to the end and stores the result at
/// `csum_start + csum_offset`) and TCP/UDP segmentation of a large frame.
///
/// `csum_start` is an absolute position in the buffer's storage, not relative to the
/// packet start, so it stays right while nodes prepend and strip headers in front of
/// it; 0 means no checksum is pending (no L4 header can start inside the headroom's first
/// byte). Any node that moves or rewrites the bytes after it must finish the checksum
/// first (`Buffer::take_partial_checksum` and the wire library's `complete_partial`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    pub csum_start: u16,
    pub csum_offset: u16,
    pub gso: GsoKind,
    /// Payload bytes per segment (the MSS for TCP); 0 unless `gso` is set.
    pub gso_size: u16,
}

impl Offload {
    pub fn has_partial_checksum(&self) -> bool {
        self.csum_start != 0
    }
}

/// Not enough headroom (prepend) or data (advance) for the requested change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    #[error("not enough headroom to prepend")]
    NoHeadroom,
    #[error("not enough data to advance past")]
    Short,
    #[error("packet larger than the buffer")]
    TooLarge,
}

/// Buffer storage comes in cache lines, aligned to them, so a frame written at the
/// standard headroom starts a line: its Ethernet, IP and transport headers then share
/// one line (two for IPv6 with a tunnel header) in every buffer. Byte storage from the
/// allocator is only 16-byte aligned, which put the first line's boundary inside the
/// headers of three buffers in four and made each node touch two lines a packet there.
/// The pool cuts every buffer's storage from one slab of these (`Pool::with_classes`).
#[repr(C, align(64))]
#[derive(Clone, Copy, zerocopy::FromZeros)]
pub(crate) struct Line(pub(crate) [u8; LINE]);

/// One packet buffer. `start..end` is the packet within its storage (`data`'s bytes).
///
/// Invariant: `start <= end <= storage().len()`. Every method that moves `start` or `end`
/// checks the move against it, so reading the packet ([`Buffer::bytes`], the read every
/// node makes, often several times per packet) need not check it again.
pub struct Buffer {
    /// This buffer's storage, `size` bytes from a line boundary, in its pool's slab.
    data: NonNull<u8>,
    size: u32,
    start: u32,
    end: u32,
    pub meta: Meta,
}

// One line in the pool's array of buffers.
const _: () = assert!(std::mem::size_of::<Buffer>() <= LINE);

// SAFETY: a buffer is reached only through the pool that owns its storage (the slab is
// freed with the pool, and no buffer leaves it), and the pool moves between threads whole.
#[allow(unsafe_code)]
unsafe impl Send for Buffer {}

impl Buffer {
    /// A buffer over `lines` of storage that nothing else uses and that outlives it.
    ///
    /// # Safety
    /// `lines` must stay valid, and be used by nothing but this buffer, for as long as
    /// the buffer exists (the pool's slab, freed after its buffers).
    #[allow(unsafe_code)]
    pub(crate) unsafe fn over(lines: &mut [Line]) -> Buffer {
        let size = lines.len() * LINE;
        assert!(size >= HEADROOM && size <= u32::MAX as usize);
        Buffer {
            size: size as u32,
            data: NonNull::from(lines).cast::<u8>(),
            start: HEADROOM as u32,
            end: HEADROOM as u32,
            meta: Meta::default(),
        }
    }

    /// The whole storage as bytes.
    #[inline(always)]
    pub(crate) fn storage(&self) -> &[u8] {
        #[allow(unsafe_code)]
        // SAFETY: `data` is `size` initialised bytes (whole `Line`s: arrays of `u8`, no
        // padding) that only this buffer uses and that outlive it (`Buffer::over`); the
        // borrow of `self` stands for the borrow of them.
        unsafe {
            std::slice::from_raw_parts(self.data.as_ptr(), self.size as usize)
        }
    }

    #[inline(always)]
    fn storage_mut(&mut self) -> &mut [u8] {
        #[allow(unsafe_code)]
        // SAFETY: as in `storage`; `&mut self` is the only way to them.
        unsafe {
            std::slice::from_raw_parts_mut(self.data.as_ptr(), self.size as usize)
        }
    }

    /// Reset to empty with full headroom and fresh metadata.
    #[inline]
    pub fn reset(&mut self) {
        self.start = HEADROOM as u32;
        self.end = HEADROOM as u32;
        self.meta = Meta::default();
    }

    /// [`Buffer::reset`], the packet then `len` bytes from `start` in the storage
    /// (contents unspecified): a fresh buffer placed in one step.
    #[inline(always)]
    pub(crate) fn reset_to(&mut self, start: usize, len: usize) -> Result<(), BufferError> {
        if start + len > self.size as usize {
            return Err(BufferError::TooLarge);
        }
        self.start = start as u32;
        self.end = (start + len) as u32;
        self.meta = Meta::default();
        Ok(())
    }

    /// The packet bytes.
    #[inline(always)]
    pub fn bytes(&self) -> &[u8] {
        debug_assert!(self.start <= self.end && self.end as usize <= self.storage().len());
        #[allow(unsafe_code)]
        // SAFETY: `start <= end <= storage().len()` is this type's invariant (the fields are
        // private and every method that moves them checks the move), so the range is in
        // bounds. Measured: 4-5 instructions less per call on every node's packet read
        // (docs/PERFORMANCE.md, "The per-packet toll").
        unsafe {
            self.storage().get_unchecked(self.start as usize..self.end as usize)
        }
    }

    #[inline(always)]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        debug_assert!(self.start <= self.end && self.end as usize <= self.storage().len());
        #[allow(unsafe_code)]
        // SAFETY: as in `bytes`.
        unsafe {
            let (start, end) = (self.start as usize, self.end as usize);
            self.storage_mut().get_unchecked_mut(start..end)
        }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn headroom(&self) -> usize {
        self.start as usize
    }

    pub fn tailroom(&self) -> usize {
        self.storage().len() - self.end as usize
    }

    /// Largest packet this buffer can hold starting at the standard headroom.
    pub fn capacity(&self) -> usize {
        self.storage().len() - HEADROOM
    }

    /// Drop `n` bytes from the front (e.g. past a header that was consumed).
    #[inline(always)]
    pub fn advance(&mut self, n: usize) -> Result<(), BufferError> {
        if n > self.len() {
            return Err(BufferError::Short);
        }
        self.start += n as u32;
        self.forget_stripped_checksum();
        Ok(())
    }

    /// Keep the `len` bytes from `at` on: a header stripped and the packet cut to the
    /// length it gives, in one step (a decapsulated packet). [`Buffer::advance`] then
    /// [`Buffer::truncate`], with `Short` if the bytes are not all there.
    #[inline(always)]
    pub fn narrow(&mut self, at: usize, len: usize) -> Result<(), BufferError> {
        if at.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(BufferError::Short);
        }
        self.start += at as u32;
        self.end = self.start + len as u32;
        self.forget_stripped_checksum();
        Ok(())
    }

    /// A new packet made of the `len` bytes from `at` on, in the buffer of one that is done
    /// with (a parcel's last datagram, cut from the parcel in place): [`Buffer::narrow`]'s
    /// cut, with fresh metadata as [`Buffer::reset`] gives, so that the new packet starts
    /// as one in a buffer just allocated would: none of the old packet's node arguments,
    /// marks, device checks or offload work (which described it, not the new one). `Short`
    /// if the bytes are not all there; nothing changes then.
    #[inline(always)]
    pub fn narrow_to_new(&mut self, at: usize, len: usize) -> Result<(), BufferError> {
        if at.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(BufferError::Short);
        }
        self.reset_to(self.start as usize + at, len)
    }

    /// A tunnel's inner packet: the `len` bytes from `at` on ([`Buffer::narrow`]), with the
    /// metadata that described the outer packet dropped, so that nothing later checks,
    /// completes or segments the inner packet as if it were the outer one: the device's
    /// word that it verified the L4 checksum (the outer UDP's: virtio's DATA_VALID
    /// vouches for the outermost only), a partial checksum in the stripped headers or
    /// past the inner packet's end, and GSO (no device hands over a tunnel GSO kind, so a
    /// GSO mark on an encapsulated packet segments the outer datagram; the inner packet
    /// is one packet). A partial checksum inside the inner packet (a local sender's,
    /// under the outer header) stays: it is the inner packet's own. An outer datagram
    /// reassembled here does not make its inner packet one to fragment again
    /// ([`Meta::refragment`]). Every decapsulating node strips through this.
    #[inline(always)]
    pub fn decapsulate(&mut self, at: usize, len: usize) -> Result<(), BufferError> {
        self.narrow(at, len)?;
        self.meta.l4_checksum_ok = false;
        self.meta.refragment = false;
        let o = &mut self.meta.offload;
        o.gso = GsoKind::None;
        o.gso_size = 0;
        if o.csum_start as u32 + o.csum_offset as u32 + 2 > self.end {
            o.csum_start = 0;
            o.csum_offset = 0;
        }
        Ok(())
    }

    /// A checksum pending in headers stripped (a tunnel's outer UDP) goes with them, so
    /// no later prepend can bring its stale position back into the packet.
    #[inline(always)]
    fn forget_stripped_checksum(&mut self) {
        if (self.meta.offload.csum_start as u32) < self.start && self.meta.offload.csum_start != 0 {
            self.meta.offload.csum_start = 0;
            self.meta.offload.csum_offset = 0;
        }
    }

    /// Grow the packet by `n` bytes at the front and return them for writing.
    #[inline(always)]
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufferError> {
        self.extend_front(n)?;
        let s = self.start as usize;
        Ok(&mut self.storage_mut()[s..s + n])
    }

    /// Grow the packet by the `n` bytes in front of it, already written (through
    /// [`Buffer::front_window`]).
    #[inline(always)]
    pub fn extend_front(&mut self, n: usize) -> Result<(), BufferError> {
        if n > self.start as usize {
            return Err(BufferError::NoHeadroom);
        }
        self.start -= n as u32;
        Ok(())
    }

    /// `N` bytes as one array, from `back` bytes in front of the packet (headroom, for
    /// headers about to go on) into the packet: a node that rewrites the front of a
    /// packet at fixed offsets proves all its bounds with this one check. `None` if the
    /// headroom is short of `back` bytes or the packet of `N - back`. The packet itself
    /// does not change: [`Buffer::extend_front`] then takes in the bytes written in front.
    #[inline(always)]
    pub fn front_window<const N: usize>(&mut self, back: usize) -> Option<&mut [u8; N]> {
        let from = (self.start as usize).checked_sub(back)?;
        if from + N > self.end as usize {
            return None;
        }
        self.storage_mut().get_mut(from..from + N)?.try_into().ok()
    }

    /// Cut the packet to `len` bytes (e.g. to drop Ethernet padding).
    #[inline(always)]
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.end = self.start + len as u32;
        }
    }

    /// Set the packet length, growing into tailroom (contents of new bytes unspecified).
    #[inline(always)]
    pub fn set_len(&mut self, len: usize) -> Result<(), BufferError> {
        if self.start as usize + len > self.storage().len() {
            return Err(BufferError::TooLarge);
        }
        self.end = self.start + len as u32;
        Ok(())
    }

    /// Replace the contents with `bytes` at the standard headroom (a new packet: offload
    /// work pending on the old contents is dropped).
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), BufferError> {
        if bytes.len() > self.capacity() {
            return Err(BufferError::TooLarge);
        }
        self.meta.offload = Offload::default();
        self.start = HEADROOM as u32;
        self.end = (HEADROOM + bytes.len()) as u32;
        self.storage_mut()[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// The packet's start as an absolute position in the buffer's storage (the frame of
    /// reference of `Offload::csum_start`).
    #[inline(always)]
    pub fn offset(&self) -> usize {
        self.start as usize
    }

    /// A pending partial checksum as (start, offset) relative to the packet start, and
    /// clears it from the metadata: the caller completes it. `None` if there is none or
    /// it no longer lies inside the packet (a node cut the packet in front of it).
    pub fn take_partial_checksum(&mut self) -> Option<(usize, usize)> {
        let o = self.meta.offload;
        if !o.has_partial_checksum() {
            return None;
        }
        self.meta.offload.csum_start = 0;
        self.meta.offload.csum_offset = 0;
        let start = (o.csum_start as usize).checked_sub(self.start as usize)?;
        (start + o.csum_offset as usize + 2 <= self.len()).then_some((start, o.csum_offset as usize))
    }

    /// Marks a partial checksum at `start` (relative to the packet start) with its field
    /// `offset` bytes further on.
    pub fn set_partial_checksum(&mut self, start: usize, offset: usize) {
        self.meta.offload.csum_start = (self.start as usize + start) as u16;
        self.meta.offload.csum_offset = offset as u16;
    }

    /// The `n` bytes just before the packet start (e.g. an Ethernet header a node
    /// advanced past), if the buffer has them.
    pub fn preceding(&self, n: usize) -> Option<&[u8]> {
        let s = self.start as usize;
        s.checked_sub(n).map(|from| &self.storage()[from..s])
    }

    /// The packet with the `n` bytes before it, if the buffer has them.
    pub fn with_preceding(&self, n: usize) -> Option<&[u8]> {
        let s = self.start as usize;
        s.checked_sub(n).map(|from| &self.storage()[from..self.end as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer of `capacity` bytes over storage of its own (leaked: tests only).
    fn buffer(capacity: usize) -> Buffer {
        let lines = vec![Line([0; LINE]); (HEADROOM + capacity).div_ceil(LINE)].leak();
        #[allow(unsafe_code)]
        // SAFETY: leaked storage lives forever and only this buffer has it.
        unsafe {
            Buffer::over(lines)
        }
    }

    #[test]
    fn prepend_advance_truncate() {
        let mut b = buffer(2048);
        b.write(&[1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(b.headroom(), HEADROOM);
        b.advance(2).unwrap();
        assert_eq!(b.bytes(), &[3, 4, 5, 6]);
        b.prepend(4).unwrap().copy_from_slice(&[9, 9, 9, 9]);
        assert_eq!(b.bytes(), &[9, 9, 9, 9, 3, 4, 5, 6]);
        b.truncate(5);
        assert_eq!(b.len(), 5);
        assert_eq!(b.advance(6), Err(BufferError::Short));
        assert_eq!(b.prepend(HEADROOM), Err(BufferError::NoHeadroom));
        assert_eq!(b.write(&vec![0u8; 2049]), Err(BufferError::TooLarge));
        b.advance(3).unwrap();
        assert_eq!(b.preceding(3), Some(&[9, 9, 9][..]));
        assert_eq!(b.bytes(), &[9, 3]);
    }

    #[test]
    fn narrow_strips_and_cuts_in_one_step() {
        let mut b = buffer(64);
        b.write(&[1, 2, 3, 4, 5, 6]).unwrap();
        b.set_partial_checksum(1, 2);
        b.narrow(2, 3).unwrap();
        assert_eq!(b.bytes(), &[3, 4, 5]);
        // The checksum pending in the stripped bytes went with them.
        assert_eq!(b.take_partial_checksum(), None);
        assert_eq!(b.narrow(1, 3), Err(BufferError::Short));
        assert_eq!(b.narrow(usize::MAX, 2), Err(BufferError::Short));
        assert_eq!(b.bytes(), &[3, 4, 5]);
        b.narrow(3, 0).unwrap();
        assert!(b.is_empty());
    }

    /// A new packet cut from an old one in place is what a fresh buffer holding those bytes
    /// would be: the bytes narrowed, every metadata field back to its default.
    #[test]
    fn narrow_to_new_starts_a_new_packet() {
        let mut b = buffer(2048);
        let packet: Vec<u8> = (0..100).collect();
        b.write(&packet).unwrap();
        b.meta = Meta {
            rx_if: IfIndex(3),
            tx_if: IfIndex(4),
            adj: 5,
            looked_up: true,
            param: 6,
            flow_hash: 7,
            drop: Some(DropReason { node: 8, counter: 9 }),
            trace: NonZeroU32::new(10),
            l4_checksum_ok: true,
            offload: Offload { csum_start: (HEADROOM + 60) as u16, csum_offset: 6, gso: GsoKind::UdpL4, gso_size: 1400 },
            refragment: true,
        };
        b.narrow_to_new(36, 40).unwrap();
        assert_eq!(b.bytes(), &packet[36..76]);
        assert_eq!(b.meta, Meta::default());
        assert_eq!(b.narrow_to_new(1, 40), Err(BufferError::Short));
        assert_eq!(b.narrow_to_new(usize::MAX, 2), Err(BufferError::Short));
        assert_eq!(b.bytes(), &packet[36..76]);
    }

    /// Decapsulation keeps only the inner packet's own offload work: the outer packet's
    /// GSO, its device-verified checksum and a partial checksum in the stripped headers
    /// or past the inner end go; a partial checksum inside the inner packet stays.
    #[test]
    fn decapsulate_drops_what_described_the_outer_packet() {
        let outer = Offload { csum_start: 0, csum_offset: 6, gso: GsoKind::UdpL4, gso_size: 1400 };
        let mut b = buffer(2048);
        let packet: Vec<u8> = (0..100).collect();
        // The outer UDP's partial checksum (at 20), UDP GSO, the device's DATA_VALID.
        b.write(&packet).unwrap();
        b.meta.offload = Offload { csum_start: (HEADROOM + 20) as u16, ..outer };
        b.meta.l4_checksum_ok = true;
        // An outer datagram reassembled here: its inner packet is not one to cut again.
        b.meta.refragment = true;
        b.decapsulate(36, 40).unwrap();
        assert_eq!(b.bytes(), &packet[36..76]);
        assert_eq!(b.meta.offload, Offload::default());
        assert!(!b.meta.l4_checksum_ok && !b.meta.refragment);
        // A partial checksum inside the inner packet (its UDP at 36 + 20) is its own.
        b.write(&packet).unwrap();
        b.meta.offload = Offload { csum_start: (HEADROOM + 56) as u16, ..outer };
        b.decapsulate(36, 40).unwrap();
        assert_eq!(b.meta.offload, Offload { csum_start: (HEADROOM + 56) as u16, csum_offset: 6, ..Default::default() });
        assert_eq!(b.take_partial_checksum(), Some((20, 6)));
        // One whose field lies past the inner packet's end cannot be completed: dropped.
        b.write(&packet).unwrap();
        b.meta.offload = Offload { csum_start: (HEADROOM + 70) as u16, ..outer };
        b.decapsulate(36, 40).unwrap();
        assert_eq!(b.meta.offload, Offload::default());
        // Short: refused, the buffer as it was.
        b.write(&packet).unwrap();
        b.meta.offload = outer;
        assert_eq!(b.decapsulate(36, 65), Err(BufferError::Short));
        assert_eq!((b.len(), b.meta.offload), (100, outer));
    }

    #[test]
    fn front_window_spans_headroom_and_packet() {
        let mut b = buffer(64);
        b.write(&[1, 2, 3, 4]).unwrap();
        let w = b.front_window::<6>(2).unwrap();
        assert_eq!(&w[2..], &[1, 2, 3, 4]);
        w[..2].copy_from_slice(&[7, 8]);
        // Nothing joins the packet until it is prepended.
        assert_eq!(b.bytes(), &[1, 2, 3, 4]);
        b.extend_front(2).unwrap();
        assert_eq!(b.bytes(), &[7, 8, 1, 2, 3, 4]);

        // Past the packet's end, or more headroom than there is: refused.
        assert!(b.front_window::<9>(2).is_none());
        assert!(b.front_window::<4>(HEADROOM - 1).is_none());
        assert!(b.front_window::<4>(HEADROOM - 2).is_some());
        // Taking in more than the headroom is refused.
        assert!(b.extend_front(HEADROOM - 2).is_ok());
        assert!(b.extend_front(1).is_err());
        assert_eq!(b.headroom(), 0);
    }

    #[test]
    fn meta_is_small() {
        // Metadata travels with every packet through every node: keep it in one cache line.
        assert!(core::mem::size_of::<Meta>() <= 40, "{}", core::mem::size_of::<Meta>());
    }
}
