//! SCTP (RFC 9260): the common header every packet starts with, and its chunks walked
//! far enough to see the association's life (INIT, ABORT, SHUTDOWN …). vecgate does not
//! terminate SCTP; the load balancer translates its ports and recomputes its checksum.
//!
//! ```text
//!  0                   1                   2                   3
//! | Source Port Number            | Destination Port Number       |
//! | Verification Tag                                              |
//! | Checksum (CRC32c)                                             |
//! | Chunk Type | Chunk Flags | Chunk Length | Chunk Value … (padded to 4 bytes)
//! | …more chunks
//! ```
//! The checksum is CRC32c (the `crc32c` crate: the CPU's crc32 instruction where it
//! has one) over the whole SCTP packet with the
//! field zero; it covers no pseudo-header (the addresses are not in it). On the wire it
//! goes least significant byte first (RFC 9260 Appendix A): [`SctpPacket::checksum`]
//! returns the CRC value, not the field read big-endian.

pub const HEADER_LEN: usize = 12;
pub const CHUNK_HEADER_LEN: usize = 4;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const VTAG: usize = 4;
    pub const CHECKSUM: usize = 8;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SctpError {
    #[error("SCTP packet shorter than its common header, or a chunk past the packet's end")]
    Truncated,
    #[error("SCTP chunk length below the 4-byte chunk header")]
    BadChunkLength,
    #[error("SCTP CRC32c checksum mismatch")]
    BadChecksum,
}

/// Chunk types (RFC 9260 §3.2), those vecgate acts on named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkType {
    Data,
    Init,
    InitAck,
    Sack,
    Heartbeat,
    HeartbeatAck,
    Abort,
    Shutdown,
    ShutdownAck,
    Error,
    CookieEcho,
    CookieAck,
    ShutdownComplete,
    Unknown(u8),
}

impl From<u8> for ChunkType {
    fn from(v: u8) -> Self {
        match v {
            0 => ChunkType::Data,
            1 => ChunkType::Init,
            2 => ChunkType::InitAck,
            3 => ChunkType::Sack,
            4 => ChunkType::Heartbeat,
            5 => ChunkType::HeartbeatAck,
            6 => ChunkType::Abort,
            7 => ChunkType::Shutdown,
            8 => ChunkType::ShutdownAck,
            9 => ChunkType::Error,
            10 => ChunkType::CookieEcho,
            11 => ChunkType::CookieAck,
            14 => ChunkType::ShutdownComplete,
            o => ChunkType::Unknown(o),
        }
    }
}

impl From<ChunkType> for u8 {
    fn from(v: ChunkType) -> u8 {
        match v {
            ChunkType::Data => 0,
            ChunkType::Init => 1,
            ChunkType::InitAck => 2,
            ChunkType::Sack => 3,
            ChunkType::Heartbeat => 4,
            ChunkType::HeartbeatAck => 5,
            ChunkType::Abort => 6,
            ChunkType::Shutdown => 7,
            ChunkType::ShutdownAck => 8,
            ChunkType::Error => 9,
            ChunkType::CookieEcho => 10,
            ChunkType::CookieAck => 11,
            ChunkType::ShutdownComplete => 14,
            ChunkType::Unknown(o) => o,
        }
    }
}

/// The chunk types an association's life turns on, a bit each
/// ([`SctpPacket::chunk_set`]); any other chunk (DATA, SACK, HEARTBEAT …) has none.
/// One byte: the load balancer takes it as an SCTP packet's flags, where a TCP packet's
/// go, and its session states read these bits (`lb::session::next_state_sctp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkSet(pub u8);

impl ChunkSet {
    pub const INIT: u8 = 0x01;
    pub const INIT_ACK: u8 = 0x02;
    /// The handshake's third and fourth legs (the client has the INIT ACK; the server
    /// took the cookie).
    pub const COOKIE_ECHO: u8 = 0x04;
    pub const COOKIE_ACK: u8 = 0x08;
    pub const SHUTDOWN: u8 = 0x10;
    pub const SHUTDOWN_ACK: u8 = 0x20;
    pub const ABORT: u8 = 0x40;
    pub const SHUTDOWN_COMPLETE: u8 = 0x80;
    /// ABORT or SHUTDOWN COMPLETE: the association is over.
    pub const END: u8 = Self::ABORT | Self::SHUTDOWN_COMPLETE;

    pub fn has(self, bits: u8) -> bool {
        self.0 & bits != 0
    }

    fn bit(t: ChunkType) -> u8 {
        match t {
            ChunkType::Init => Self::INIT,
            ChunkType::InitAck => Self::INIT_ACK,
            ChunkType::CookieEcho => Self::COOKIE_ECHO,
            ChunkType::CookieAck => Self::COOKIE_ACK,
            ChunkType::Shutdown => Self::SHUTDOWN,
            ChunkType::ShutdownAck => Self::SHUTDOWN_ACK,
            ChunkType::Abort => Self::ABORT,
            ChunkType::ShutdownComplete => Self::SHUTDOWN_COMPLETE,
            _ => 0,
        }
    }
}

/// One chunk: its type, flags and value (the bytes after the chunk header, up to the
/// chunk length, padding excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub chunk_type: ChunkType,
    pub flags: u8,
    pub value: &'a [u8],
}

/// The chunks of a packet in order; an error (then nothing more) where a chunk header
/// or length does not fit.
#[derive(Debug, Clone)]
pub struct Chunks<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Result<Chunk<'a>, SctpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = self.rest;
        let Some(h) = r.first_chunk::<CHUNK_HEADER_LEN>() else {
            self.rest = &[];
            return Some(Err(SctpError::Truncated));
        };
        let len = u16::from_be_bytes([h[2], h[3]]) as usize;
        if len < CHUNK_HEADER_LEN {
            self.rest = &[];
            return Some(Err(SctpError::BadChunkLength));
        }
        if len > r.len() {
            self.rest = &[];
            return Some(Err(SctpError::Truncated));
        }
        // Padding to four bytes follows; a last chunk without it is taken (its
        // receiver ignores padding).
        let next = (len + 3) & !3;
        self.rest = r.get(next..).unwrap_or(&[]);
        Some(Ok(Chunk { chunk_type: ChunkType::from(h[0]), flags: h[1], value: &r[CHUNK_HEADER_LEN..len] }))
    }
}

#[derive(Debug, Clone)]
pub struct SctpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SctpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        SctpPacket { buffer }
    }
    /// Checks that the common header is within the buffer; the chunks are checked as
    /// they are walked ([`SctpPacket::chunks`]). The packet is the whole buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, SctpError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(SctpError::Truncated);
        }
        Ok(SctpPacket { buffer })
    }
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        crate::be16(self.buffer.as_ref(), field::DST_PORT)
    }
    pub fn verification_tag(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), field::VTAG)
    }
    /// The CRC32c the packet carries (the field is least significant byte first).
    pub fn checksum(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_le_bytes([b[field::CHECKSUM], b[field::CHECKSUM + 1], b[field::CHECKSUM + 2], b[field::CHECKSUM + 3]])
    }
    /// The bytes after the common header: the chunks.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    pub fn chunks(&self) -> Chunks<'_> {
        Chunks { rest: self.payload() }
    }
    /// Which of the association's life's chunk types the packet holds; an error if a
    /// chunk does not fit. An SCTP packet with no chunk is `ChunkSet(0)`.
    pub fn chunk_set(&self) -> Result<ChunkSet, SctpError> {
        let mut set = 0;
        for c in self.chunks() {
            set |= ChunkSet::bit(c?.chunk_type);
        }
        Ok(ChunkSet(set))
    }
    /// The CRC32c of the packet as it should be: over every byte, the checksum field
    /// taken as zero.
    pub fn compute_checksum(&self) -> u32 {
        let b = self.buffer.as_ref();
        let c = crc32c::crc32c(&b[..field::CHECKSUM]);
        let c = crc32c::crc32c_append(c, &[0; 4]);
        crc32c::crc32c_append(c, &b[field::CHECKSUM + 4..])
    }
    pub fn verify_checksum(&self) -> bool {
        self.compute_checksum() == self.checksum()
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SctpPacket<T> {
    pub fn set_src_port(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::SRC_PORT, v)
    }
    pub fn set_dst_port(&mut self, v: u16) {
        crate::put16(self.buffer.as_mut(), field::DST_PORT, v)
    }
    pub fn set_verification_tag(&mut self, v: u32) {
        crate::put32(self.buffer.as_mut(), field::VTAG, v)
    }
    pub fn set_checksum(&mut self, v: u32) {
        self.buffer.as_mut()[field::CHECKSUM..field::CHECKSUM + 4].copy_from_slice(&v.to_le_bytes())
    }
    /// Compute the CRC32c over the packet as it is now and write it.
    pub fn fill_checksum(&mut self) {
        let c = self.compute_checksum();
        self.set_checksum(c);
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub verification_tag: u32,
}

impl SctpRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &SctpPacket<T>) -> Result<Self, SctpError> {
        Ok(SctpRepr { src_port: p.src_port(), dst_port: p.dst_port(), verification_tag: p.verification_tag() })
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write the common header, checksum zero; the caller puts the chunks in place
    /// and then fills the checksum ([`SctpPacket::fill_checksum`]).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut SctpPacket<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_verification_tag(self.verification_tag);
        p.set_checksum(0);
    }
}

/// The length a chunk with a `value_len`-byte value takes, padding included.
pub const fn chunk_buffer_len(value_len: usize) -> usize {
    (CHUNK_HEADER_LEN + value_len + 3) & !3
}

/// Write a chunk at the start of `b` (at least [`chunk_buffer_len`] bytes), padding
/// zeroed; returns the bytes written. `None` if `b` is too short or the value too long
/// for the 16-bit length.
pub fn emit_chunk(b: &mut [u8], chunk_type: ChunkType, flags: u8, value: &[u8]) -> Option<usize> {
    let len = CHUNK_HEADER_LEN + value.len();
    let total = chunk_buffer_len(value.len());
    let len16 = u16::try_from(len).ok()?;
    let out = b.get_mut(..total)?;
    out[0] = chunk_type.into();
    out[1] = flags;
    out[2..4].copy_from_slice(&len16.to_be_bytes());
    out[CHUNK_HEADER_LEN..len].copy_from_slice(value);
    out[len..].fill(0);
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chunk_type() -> impl Strategy<Value = ChunkType> {
        any::<u8>().prop_map(ChunkType::from)
    }

    proptest! {
        #[test]
        fn roundtrip_chunks_and_checksum(
            sp: u16, dp: u16, vtag: u32,
            chunks in proptest::collection::vec((chunk_type(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40)), 0..6),
            flip in any::<prop::sample::Index>(), bit in 0u8..8,
        ) {
            let r = SctpRepr { src_port: sp, dst_port: dp, verification_tag: vtag };
            let len = HEADER_LEN + chunks.iter().map(|c| chunk_buffer_len(c.2.len())).sum::<usize>();
            let mut b = vec![0xa5u8; len];
            let mut p = SctpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut p);
            let mut at = 0;
            for (t, f, v) in &chunks {
                at += emit_chunk(&mut p.payload_mut()[at..], *t, *f, v).unwrap();
            }
            p.fill_checksum();
            let p = SctpPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(SctpRepr::parse(&p).unwrap(), r);
            prop_assert!(p.verify_checksum());
            let got: Vec<_> = p.chunks().map(|c| c.unwrap()).map(|c| (c.chunk_type, c.flags, c.value.to_vec())).collect();
            prop_assert_eq!(&got, &chunks);
            let want = chunks.iter().fold(0, |s, c| s | ChunkSet::bit(c.0));
            prop_assert_eq!(p.chunk_set().unwrap(), ChunkSet(want));
            // Any one bit flipped anywhere (the checksum field too) is seen.
            let i = flip.index(b.len());
            b[i] ^= 1 << bit;
            prop_assert!(!SctpPacket::new_checked(&b[..]).unwrap().verify_checksum());
        }

        /// Whatever the bytes, the walk ends, never panics, and what it yields lies
        /// within the packet.
        #[test]
        fn any_bytes_walk(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(p) = SctpPacket::new_checked(&b[..]) {
                let mut n = 0;
                for c in p.chunks() {
                    n += 1;
                    if let Ok(c) = c {
                        prop_assert!(c.value.len() + CHUNK_HEADER_LEN <= b.len() - HEADER_LEN);
                    }
                }
                prop_assert!(n <= (b.len() - HEADER_LEN) / CHUNK_HEADER_LEN + 1);
            }
        }
    }

    /// Each chunk type an association's life turns on has its own bit (the load
    /// balancer's SCTP states read them), the byte's eight; the rest have none.
    #[test]
    fn chunk_set_bits() {
        use ChunkType::*;
        let types = [Init, InitAck, CookieEcho, CookieAck, Shutdown, ShutdownAck, Abort, ShutdownComplete];
        let bits = types.map(ChunkSet::bit);
        for (i, b) in bits.iter().enumerate() {
            assert_eq!(b.count_ones(), 1, "{:?}", types[i]);
            assert!(bits[..i].iter().all(|o| o != b), "{:?} shares a bit", types[i]);
        }
        assert_eq!(bits[6..], [ChunkSet::ABORT, ChunkSet::SHUTDOWN_COMPLETE]);
        assert_eq!(ChunkSet::END, ChunkSet::ABORT | ChunkSet::SHUTDOWN_COMPLETE);
        for t in [Data, Sack, Heartbeat, HeartbeatAck, Error, Unknown(200)] {
            assert_eq!(ChunkSet::bit(t), 0, "{t:?}");
        }
    }

    #[test]
    fn malformed() {
        assert_eq!(SctpPacket::new_checked(&[0u8; 11][..]).unwrap_err(), SctpError::Truncated);
        let mut b = [0u8; 24];
        // A chunk length below its header.
        b[12] = 1;
        b[15] = 3;
        let p = SctpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.chunk_set(), Err(SctpError::BadChunkLength));
        // A chunk past the packet's end.
        let mut b = [0u8; 24];
        b[12] = 6;
        b[15] = 13;
        assert_eq!(SctpPacket::new_checked(&b[..]).unwrap().chunk_set(), Err(SctpError::Truncated));
        // Exactly to the end: an ABORT.
        b[15] = 12;
        assert_eq!(SctpPacket::new_checked(&b[..]).unwrap().chunk_set(), Ok(ChunkSet(ChunkSet::ABORT)));
        // A chunk header cut short after a good chunk.
        let mut b = [0u8; 18];
        b[12] = 14;
        b[15] = 4;
        b[16] = 7;
        assert_eq!(SctpPacket::new_checked(&b[..]).unwrap().chunk_set(), Err(SctpError::Truncated));
        // No chunk at all.
        assert_eq!(SctpPacket::new_checked(&[0u8; 12][..]).unwrap().chunk_set(), Ok(ChunkSet(0)));
        // A last chunk without its padding is taken.
        let mut b = [0u8; 12 + 5];
        b[12] = 7;
        b[15] = 5;
        let p = SctpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.chunk_set(), Ok(ChunkSet(ChunkSet::SHUTDOWN)));
        assert_eq!(p.chunks().next().unwrap().unwrap().value, &[0]);
    }

    /// An INIT's checksum bytes as scapy (`scapy.layers.sctp`, an independent
    /// implementation) writes them for the same packet: fa ce a3 44.
    #[test]
    fn checksum_byte_order() {
        let mut b = [0u8; 12 + 20];
        let mut p = SctpPacket::new_unchecked(&mut b[..]);
        SctpRepr { src_port: 38412, dst_port: 38412, verification_tag: 0 }.emit(&mut p);
        emit_chunk(p.payload_mut(), ChunkType::Init, 0, &[0x11, 0x22, 0x33, 0x44, 0, 0, 0x10, 0, 0, 1, 0, 1, 0, 0, 0, 1]).unwrap();
        p.fill_checksum();
        assert_eq!(b[8..12], [0xfa, 0xce, 0xa3, 0x44]);
        let p = SctpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.checksum(), 0x44a3_cefa);
        assert!(p.verify_checksum());
    }
}
