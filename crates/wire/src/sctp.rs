//! SCTP (RFC 9260): the common header every packet starts with, and its chunks walked
//! far enough to see the association's life (INIT, ABORT, SHUTDOWN …) and dynamic
//! address reconfiguration's chunks (ASCONF, RFC 5061), and an INIT's or INIT ACK's
//! parameters, to remove what multi-homing lists: its addresses, and ASCONF among its
//! supported extensions ([`remove_multihoming`]).
//! vecgate does not terminate SCTP; the load balancer translates its ports and
//! recomputes its checksum.
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
    #[error("SCTP INIT or INIT ACK chunk shorter than its 16 fixed bytes (initiate tag to initial TSN)")]
    ShortInit,
    #[error("SCTP INIT or INIT ACK parameter length below the 4-byte parameter header, or the parameter past its chunk")]
    BadParameterLength,
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
    /// Address Configuration Change (RFC 5061 §4.1.1): 0xC1.
    Asconf,
    /// Its acknowledgement (RFC 5061 §4.1.2): 0x80.
    AsconfAck,
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
            0xc1 => ChunkType::Asconf,
            0x80 => ChunkType::AsconfAck,
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
            ChunkType::Asconf => 0xc1,
            ChunkType::AsconfAck => 0x80,
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

/// What a walk of a packet's chunks saw ([`SctpPacket::chunk_summary`]): the chunks of
/// the association's life, and whether an ASCONF or ASCONF-ACK chunk is among them
/// (dynamic address reconfiguration, RFC 5061: addresses of the endpoints' own, which
/// a translation between them makes wrong, in a chunk it cannot rewrite, as AUTH signs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkSummary {
    pub set: ChunkSet,
    pub asconf: bool,
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
        self.chunk_summary().map(|s| s.set)
    }
    /// [`SctpPacket::chunk_set`], and whether the packet holds an ASCONF or ASCONF-ACK
    /// chunk, in one walk.
    pub fn chunk_summary(&self) -> Result<ChunkSummary, SctpError> {
        let (mut set, mut asconf) = (0, false);
        for c in self.chunks() {
            let t = c?.chunk_type;
            set |= ChunkSet::bit(t);
            asconf |= ASCONF_CHUNKS.contains(&u8::from(t));
        }
        Ok(ChunkSummary { set: ChunkSet(set), asconf })
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

/// An INIT's or INIT ACK's fixed fields before its parameters (RFC 9260 §3.3.2):
/// initiate tag, a_rwnd, outbound and inbound streams, initial TSN.
pub const INIT_FIXED_LEN: usize = 16;
pub const PARAM_HEADER_LEN: usize = 4;

/// The INIT and INIT ACK parameters that name an endpoint's addresses: IPv4 Address,
/// IPv6 Address, the deprecated Host Name Address (RFC 9260 §3.3.2.1), and Set Primary
/// Address (0xC004, RFC 5061 §4.2.4: one of the sender's addresses, for the peer to send
/// to; Linux reads it in an INIT too when its ASCONF is enabled).
pub const ADDRESS_PARAMS: [u16; 4] = [5, 6, 11, 0xc004];

/// The Supported Extensions parameter (RFC 5061 §4.2.7): the chunk types, a byte each,
/// of the extensions the sender supports.
pub const SUPPORTED_EXTENSIONS: u16 = 0x8008;

/// Dynamic address reconfiguration's chunk types, which an endpoint lists among its
/// Supported Extensions to offer it (RFC 5061 §4.2.7): ASCONF and ASCONF-ACK. The one
/// list of them, for those lists and for a packet's chunks ([`SctpPacket::chunk_summary`]).
pub const ASCONF_CHUNKS: [u8; 2] = [0xc1, 0x80];

/// Multi-homing's part of INIT and INIT ACK chunks ([`count_multihoming`]): their address
/// parameters ([`ADDRESS_PARAMS`]), and the ASCONF and ASCONF-ACK entries of their
/// Supported Extensions ([`ASCONF_CHUNKS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Multihoming {
    pub addresses: usize,
    pub asconf: usize,
}

impl Multihoming {
    pub fn is_none(&self) -> bool {
        self.addresses == 0 && self.asconf == 0
    }
}

/// What [`remove_multihoming`] did: the chunks' new length (from the first chunk's
/// start) and what went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultihomingRemoved {
    pub len: usize,
    pub removed: Multihoming,
}

/// The parameters of an INIT or INIT ACK chunk's value (from its first parameter to
/// the chunk length), as (offset in `params`, type, length without padding). A
/// parameter's padding is not in its length; the chunk length may leave out the last
/// parameter's (RFC 9260 §3.2), so a last parameter that ends within it is whole.
fn walk_params(params: &[u8], mut each: impl FnMut(usize, u16, usize)) -> Result<(), SctpError> {
    let mut at = 0;
    while at < params.len() {
        let h = params.get(at..at + PARAM_HEADER_LEN).ok_or(SctpError::BadParameterLength)?;
        let len = u16::from_be_bytes([h[2], h[3]]) as usize;
        if len < PARAM_HEADER_LEN || at + len > params.len() {
            return Err(SctpError::BadParameterLength);
        }
        each(at, u16::from_be_bytes([h[0], h[1]]), len);
        at = (at + ((len + 3) & !3)).min(params.len());
    }
    Ok(())
}

/// An INIT's or INIT ACK's parameters, or none for another chunk.
fn init_params<'a>(c: &Chunk<'a>) -> Result<Option<&'a [u8]>, SctpError> {
    match c.chunk_type {
        ChunkType::Init | ChunkType::InitAck => c.value.get(INIT_FIXED_LEN..).map(Some).ok_or(SctpError::ShortInit),
        _ => Ok(None),
    }
}

/// How many ASCONF and ASCONF-ACK entries a Supported Extensions list holds.
fn asconf_entries(list: &[u8]) -> usize {
    list.iter().filter(|t| ASCONF_CHUNKS.contains(t)).count()
}

/// Multi-homing's part ([`Multihoming`]) of the INIT and INIT ACK chunks of `chunks` (a
/// packet's bytes after its common header); an error if a chunk or an INIT's or INIT
/// ACK's parameter does not fit. A Supported Extensions list is any number of bytes,
/// each a chunk type: it has no form of its own to break.
pub fn count_multihoming(chunks: &[u8]) -> Result<Multihoming, SctpError> {
    let mut n = Multihoming::default();
    for c in (Chunks { rest: chunks }) {
        if let Some(params) = init_params(&c?)? {
            walk_params(params, |at, t, len| {
                if ADDRESS_PARAMS.contains(&t) {
                    n.addresses += 1;
                } else if t == SUPPORTED_EXTENSIONS {
                    n.asconf += asconf_entries(&params[at + PARAM_HEADER_LEN..at + len]);
                }
            })?;
        }
    }
    Ok(n)
}

/// Remove multi-homing's part ([`Multihoming`]) of every INIT and INIT ACK chunk of
/// `chunks` (a packet's bytes after its common header), in place: the address
/// parameters go, and ASCONF and ASCONF-ACK go from a Supported Extensions list (the
/// list's other chunk types kept in order; a list left empty goes whole, as a sender
/// supporting no extension sends none). The other parameters and chunks move up, in
/// order and byte for byte, each INIT's length is cut to its last parameter's end (RFC
/// 9260 §3.2: the last parameter's padding not counted) and its padding zeroed, a
/// shortened list's parameter length is its new one and its padding zeroed; the bytes
/// past the returned length are left over.
///
/// An INIT without addresses makes its receiver take the packet's source address as
/// the peer's only one (§5.1.2), which a NAT between the two needs; without ASCONF
/// among its peer's extensions an endpoint sends none (RFC 5061 §4.2.7), so it does not
/// add or move addresses later. Nothing is changed when there is nothing to remove or
/// something does not fit (an error: [`count_multihoming`]'s).
pub fn remove_multihoming(chunks: &mut [u8]) -> Result<MultihomingRemoved, SctpError> {
    let removed = count_multihoming(chunks)?;
    if removed.is_none() {
        return Ok(MultihomingRemoved { len: chunks.len(), removed });
    }
    // Checked above: every chunk and parameter fits. Read ahead of write throughout.
    let (mut r, mut w) = (0, 0);
    while r < chunks.len() {
        let len = u16::from_be_bytes([chunks[r + 2], chunks[r + 3]]) as usize;
        let padded = ((len + 3) & !3).min(chunks.len() - r);
        let t = ChunkType::from(chunks[r]);
        if !matches!(t, ChunkType::Init | ChunkType::InitAck) {
            chunks.copy_within(r..r + padded, w);
            (r, w) = (r + padded, w + padded);
            continue;
        }
        let start = w;
        let fixed = CHUNK_HEADER_LEN + INIT_FIXED_LEN;
        chunks.copy_within(r..r + fixed, w);
        // The chunk's end so far (its length from `start`), and `w` that end padded.
        let mut end = w + fixed;
        w = end;
        let (mut at, params_end) = (r + fixed, r + len);
        while at < params_end {
            let ptype = u16::from_be_bytes([chunks[at], chunks[at + 1]]);
            let plen = u16::from_be_bytes([chunks[at + 2], chunks[at + 3]]) as usize;
            let kept = if ADDRESS_PARAMS.contains(&ptype) {
                0
            } else if ptype == SUPPORTED_EXTENSIONS && asconf_entries(&chunks[at + PARAM_HEADER_LEN..at + plen]) > 0 {
                // The list without ASCONF's two, byte by byte: each write is at or
                // before the byte it reads.
                chunks.copy_within(at..at + PARAM_HEADER_LEN, w);
                let mut n = PARAM_HEADER_LEN;
                for i in at + PARAM_HEADER_LEN..at + plen {
                    if !ASCONF_CHUNKS.contains(&chunks[i]) {
                        chunks[w + n] = chunks[i];
                        n += 1;
                    }
                }
                chunks[w + 2..w + 4].copy_from_slice(&(n as u16).to_be_bytes());
                if n == PARAM_HEADER_LEN {
                    0
                } else {
                    n
                }
            } else {
                chunks.copy_within(at..at + plen, w);
                plen
            };
            if kept > 0 {
                end = w + kept;
                // Within what is read already: `w` was at most `at`.
                w = (w + ((kept + 3) & !3)).min(chunks.len());
                chunks[end..w].fill(0);
            }
            at = (at + ((plen + 3) & !3)).min(params_end);
        }
        let new_len = (end - start) as u16;
        chunks[start + 2..start + 4].copy_from_slice(&new_len.to_be_bytes());
        r += padded;
    }
    Ok(MultihomingRemoved { len: w, removed })
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

    /// ASCONF (0xC1) and ASCONF-ACK (0x80) are seen wherever they are among a packet's
    /// chunks, the association's chunks' bits alongside; no other chunk type counts.
    #[test]
    fn chunk_summary_sees_asconf() {
        let packet = |types: &[u8]| {
            let mut b = vec![0u8; HEADER_LEN];
            for &t in types {
                b.extend_from_slice(&[t, 0, 0, 8, 0, 0, 0, 1]);
            }
            b
        };
        for (types, asconf, set) in [
            (&[0xc1][..], true, 0),
            (&[0x0f, 0x80], true, 0),
            (&[0, 0x0f, 0xc1, 3], true, 0),
            (&[1, 0xc1], true, ChunkSet::INIT),
            (&[0, 3, 0xc0, 0x82, 0x81, 0xc2, 0x40], false, 0),
            (&[6], false, ChunkSet::ABORT),
        ] {
            let b = packet(types);
            let p = SctpPacket::new_checked(&b[..]).unwrap();
            assert_eq!(p.chunk_summary(), Ok(ChunkSummary { set: ChunkSet(set), asconf }), "{types:x?}");
        }
        assert_eq!((ChunkType::from(0xc1), u8::from(ChunkType::AsconfAck)), (ChunkType::Asconf, 0x80));
        let mut b = packet(&[0xc1]);
        b[15] = 200;
        assert_eq!(SctpPacket::new_checked(&b[..]).unwrap().chunk_summary(), Err(SctpError::Truncated));
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

    /// An INIT or INIT ACK chunk (16 fixed bytes of 0x11, then `params` as (type,
    /// value), each padded with zeros), its length counting the last parameter's padding
    /// or not (`last_padded`), itself padded.
    fn init_chunk(t: ChunkType, params: &[(u16, &[u8])], last_padded: bool) -> Vec<u8> {
        let mut c = vec![u8::from(t), 0, 0, 0];
        c.extend_from_slice(&[0x11; INIT_FIXED_LEN]);
        for (pt, v) in params {
            c.extend_from_slice(&pt.to_be_bytes());
            c.extend_from_slice(&((PARAM_HEADER_LEN + v.len()) as u16).to_be_bytes());
            c.extend_from_slice(v);
            c.resize((c.len() + 3) & !3, 0);
        }
        let unpadded = params.last().map_or(c.len(), |(_, v)| c.len() - (((v.len() + 3) & !3) - v.len()));
        let len = if last_padded { c.len() } else { unpadded };
        c[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        c
    }

    const SUPPORTED_ADDRESS_TYPES: u16 = 12;
    const ECN: u16 = 0x8000;
    const STATE_COOKIE: u16 = 7;
    const IPV4: u16 = 5;
    const IPV6: u16 = 6;
    const HOST_NAME: u16 = 11;
    const SET_PRIMARY: u16 = 0xc004;
    const FORWARD_TSN: u8 = 0xc0;
    const AUTH: u8 = 0x0f;
    const RECONFIG: u8 = 0x82;

    fn addresses(n: usize) -> Multihoming {
        Multihoming { addresses: n, asconf: 0 }
    }

    /// ASCONF and ASCONF-ACK go from a Supported Extensions list wherever they stand in
    /// it, the other chunk types kept in order; the parameter's length is its new one
    /// (odd or not), its padding zeroed, the parameters after it moved up byte for
    /// byte, the chunk's length its last parameter's end; an INIT ACK the same.
    #[test]
    fn asconf_extensions_removed() {
        let cookie = [0xc0u8; 9];
        for t in [ChunkType::Init, ChunkType::InitAck] {
            for last_padded in [false, true] {
                // [ASCONF, ASCONF-ACK, FORWARD-TSN] → [FORWARD-TSN]: 7 bytes to 5.
                let all: [(u16, &[u8]); 3] =
                    [(SUPPORTED_ADDRESS_TYPES, &[0, 5]), (SUPPORTED_EXTENSIONS, &[0xc1, 0x80, FORWARD_TSN]), (STATE_COOKIE, &cookie)];
                let mut b = init_chunk(t, &all, last_padded);
                let r = remove_multihoming(&mut b).unwrap();
                let want = init_chunk(t, &[all[0], (SUPPORTED_EXTENSIONS, &[FORWARD_TSN]), all[2]], false);
                assert_eq!(r, MultihomingRemoved { len: want.len(), removed: Multihoming { addresses: 0, asconf: 2 } });
                assert_eq!(&b[..r.len], &want[..], "{t:?} last_padded {last_padded}");
                assert_eq!(b[28..36], [0x80, 0x08, 0, 5, FORWARD_TSN, 0, 0, 0], "length 5, padding zeroed");
                assert_eq!(count_multihoming(&b[..r.len]), Ok(Multihoming::default()));
            }
        }
        // Between others, with an address: both go in one pass; [AUTH, ASCONF-ACK,
        // RE-CONFIG, ASCONF, FORWARD-TSN] (5 bytes, padded to 8) → 3 bytes, padded to 4.
        let ext = [AUTH, 0x80, RECONFIG, 0xc1, FORWARD_TSN];
        let mut b = init_chunk(ChunkType::Init, &[(IPV4, &[198, 18, 0, 9]), (SUPPORTED_EXTENSIONS, &ext), (ECN, &[])], false);
        let r = remove_multihoming(&mut b).unwrap();
        assert_eq!(r.removed, Multihoming { addresses: 1, asconf: 2 });
        assert_eq!(
            &b[..r.len],
            &init_chunk(ChunkType::Init, &[(SUPPORTED_EXTENSIONS, &[AUTH, RECONFIG, FORWARD_TSN]), (ECN, &[])], false)[..]
        );
        // The last parameter, shortened: the chunk ends at its new end, unpadded.
        let mut b = init_chunk(ChunkType::InitAck, &[(STATE_COOKIE, &cookie), (SUPPORTED_EXTENSIONS, &[FORWARD_TSN, 0xc1])], false);
        let r = remove_multihoming(&mut b).unwrap();
        assert_eq!(u16::from_be_bytes([b[2], b[3]]) as usize, 20 + 16 + 5);
        assert_eq!(r.len, 20 + 16 + 8);
        assert_eq!(b[r.len - 4..r.len], [FORWARD_TSN, 0, 0, 0]);
    }

    /// A list of ASCONF and ASCONF-ACK only goes whole (a sender supporting no extension
    /// sends none); a list without them, an empty one, or none at all: nothing changes.
    #[test]
    fn asconf_extensions_at_the_ends() {
        let mut b = init_chunk(ChunkType::Init, &[(ECN, &[]), (SUPPORTED_EXTENSIONS, &[0x80, 0xc1]), (STATE_COOKIE, &[7; 3])], true);
        let r = remove_multihoming(&mut b).unwrap();
        assert_eq!(r.removed, Multihoming { addresses: 0, asconf: 2 });
        assert_eq!(&b[..r.len], &init_chunk(ChunkType::Init, &[(ECN, &[]), (STATE_COOKIE, &[7; 3])], false)[..]);
        let mut b = init_chunk(ChunkType::Init, &[(SUPPORTED_EXTENSIONS, &[0xc1])], false);
        let r = remove_multihoming(&mut b).unwrap();
        assert_eq!(&b[..r.len], &init_chunk(ChunkType::Init, &[], false)[..]);
        for params in [
            &[(SUPPORTED_EXTENSIONS, &[FORWARD_TSN, AUTH, RECONFIG][..]), (ECN, &[])][..],
            &[(SUPPORTED_EXTENSIONS, &[][..])],
            &[(ECN, &[][..]), (STATE_COOKIE, &[0xc1, 0x80])],
        ] {
            let orig = init_chunk(ChunkType::InitAck, params, false);
            let mut b = orig.clone();
            assert_eq!(remove_multihoming(&mut b), Ok(MultihomingRemoved { len: orig.len(), removed: Multihoming::default() }));
            assert_eq!(b, orig);
        }
        // The AUTH parameters stay byte for byte, ASCONF in the Chunk List (0x8003) too:
        // they make the association's key (RFC 4895 §6.1).
        let chunk_list: (u16, &[u8]) = (0x8003, &[0xc1, 0x80]);
        let mut b = init_chunk(
            ChunkType::Init,
            &[(0x8002, &[0x5a; 32]), chunk_list, (0x8004, &[0, 1]), (SUPPORTED_EXTENSIONS, &[0xc1, 0x80, AUTH])],
            false,
        );
        let r = remove_multihoming(&mut b).unwrap();
        assert_eq!(
            &b[..r.len],
            &init_chunk(ChunkType::Init, &[(0x8002, &[0x5a; 32]), chunk_list, (0x8004, &[0, 1]), (SUPPORTED_EXTENSIONS, &[AUTH])], false)[..]
        );
        // Another chunk's bytes are not read: a DATA chunk whose value looks like a list.
        let mut b = vec![0, 0, 0, 9, 0x80, 0x08, 0, 5, 0xc1, 0, 0, 0];
        assert_eq!(remove_multihoming(&mut b), Ok(MultihomingRemoved { len: 12, removed: Multihoming::default() }));
    }

    /// A Supported Extensions parameter whose length is below its header or runs past
    /// its chunk: the parameter list's error, the bytes unchanged.
    #[test]
    fn malformed_supported_extensions() {
        let good = init_chunk(ChunkType::Init, &[(SUPPORTED_EXTENSIONS, &[0xc1, 0x80, FORWARD_TSN])], false);
        for (len, e) in [(3u8, SctpError::BadParameterLength), (0, SctpError::BadParameterLength), (8, SctpError::BadParameterLength)] {
            let mut b = good.clone();
            b[23] = len;
            let before = b.clone();
            assert_eq!(count_multihoming(&b), Err(e), "length {len}");
            assert_eq!(remove_multihoming(&mut b), Err(e), "length {len}");
            assert_eq!(b, before);
        }
    }

    /// Set Primary Address in an INIT names one of the sender's addresses: it goes as
    /// the other address parameters do.
    #[test]
    fn set_primary_removed() {
        let set_primary = [0, 0, 0, 1, 0, 5, 0, 8, 198, 18, 0, 9];
        let mut b = init_chunk(ChunkType::Init, &[(SET_PRIMARY, &set_primary), (ECN, &[])], false);
        let r = remove_multihoming(&mut b).unwrap();
        assert_eq!(r.removed, addresses(1));
        assert_eq!(&b[..r.len], &init_chunk(ChunkType::Init, &[(ECN, &[])], false)[..]);
    }

    /// The address parameters go, wherever they are among the others; the others stay in
    /// order byte for byte, the chunk's length is its last kept parameter's end, and a
    /// chunk after the INIT ACK moves up whole.
    #[test]
    fn address_params_removed() {
        let v6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
        let cookie = [0xc0u8; 13];
        for t in [ChunkType::Init, ChunkType::InitAck] {
            for last_padded in [false, true] {
                let all: [(u16, &[u8]); 7] = [
                    (IPV4, &[198, 18, 1, 7]),
                    (SUPPORTED_ADDRESS_TYPES, &[0, 5, 0, 6, 0, 11][..]),
                    (IPV6, &v6),
                    (ECN, &[]),
                    (STATE_COOKIE, &cookie),
                    (HOST_NAME, b"peer\0"),
                    (IPV4, &[198, 18, 1, 8]),
                ];
                let kept: Vec<_> = all.iter().copied().filter(|p| !ADDRESS_PARAMS.contains(&p.0)).collect();
                let mut b = init_chunk(t, &all, last_padded);
                let abort = [6u8, 0, 0, 4];
                b.extend_from_slice(&abort);
                assert_eq!(count_multihoming(&b).map(|m| m.addresses), Ok(4));
                let r = remove_multihoming(&mut b).unwrap();
                let mut want = init_chunk(t, &kept, false);
                want.extend_from_slice(&abort);
                assert_eq!(r, MultihomingRemoved { len: want.len(), removed: addresses(4) });
                assert_eq!(&b[..r.len], &want[..], "{t:?} last_padded {last_padded}");
                // 13 bytes of cookie: the chunk ends 3 bytes short of its padding.
                assert_eq!(u16::from_be_bytes([b[2], b[3]]) as usize, 20 + 12 + 4 + 17);
                assert_eq!(count_multihoming(&b[..r.len]).map(|m| m.addresses), Ok(0));
            }
        }
    }

    /// Only address parameters, or the last one an address: the chunk ends where the
    /// last kept parameter does (its padding zeroed); none at all: nothing changes.
    #[test]
    fn address_params_removed_at_the_ends() {
        let mut b = init_chunk(ChunkType::Init, &[(IPV4, &[198, 18, 0, 1]), (IPV6, &[0x20; 16])], false);
        let r = remove_multihoming(&mut b).unwrap();
        assert_eq!(r, MultihomingRemoved { len: 20, removed: addresses(2) });
        assert_eq!(b[..20], init_chunk(ChunkType::Init, &[], false)[..]);
        let mut b = init_chunk(ChunkType::Init, &[(SUPPORTED_ADDRESS_TYPES, &[0, 5]), (HOST_NAME, &[0x61; 9])], false);
        b[26..28].fill(0xee); // the kept parameter's padding: zeroed where it moves
        let r = remove_multihoming(&mut b).unwrap();
        assert_eq!(r, MultihomingRemoved { len: 28, removed: addresses(1) });
        assert_eq!(b[..28], init_chunk(ChunkType::Init, &[(SUPPORTED_ADDRESS_TYPES, &[0, 5])], false)[..]);
        assert_eq!(u16::from_be_bytes([b[2], b[3]]), 26);
        let orig = init_chunk(ChunkType::InitAck, &[(STATE_COOKIE, &[1; 7]), (ECN, &[])], false);
        let mut b = orig.clone();
        assert_eq!(remove_multihoming(&mut b), Ok(MultihomingRemoved { len: orig.len(), removed: addresses(0) }));
        assert_eq!(b, orig);
        // Other chunks' parameters are not read: an ERROR chunk's cause of type 5.
        let mut b = vec![9, 0, 0, 8, 0, 5, 0, 4];
        assert_eq!(remove_multihoming(&mut b), Ok(MultihomingRemoved { len: 8, removed: addresses(0) }));
    }

    /// A parameter length below 4 or past the chunk, a parameter header cut short, an
    /// INIT shorter than its fixed fields: an error, the bytes unchanged.
    #[test]
    fn malformed_params() {
        let good = init_chunk(ChunkType::Init, &[(IPV4, &[198, 18, 0, 1]), (ECN, &[])], false);
        let cases: [(fn(&mut Vec<u8>), SctpError); 5] = [
            (|b| b[23] = 3, SctpError::BadParameterLength),
            (|b| b[23] = 13, SctpError::BadParameterLength),
            (|b| b[31] = 5, SctpError::BadParameterLength),
            // Two bytes past the last parameter, within the chunk length.
            (
                |b| {
                    b.extend_from_slice(&[0, 0]);
                    b[3] += 2;
                },
                SctpError::BadParameterLength,
            ),
            (
                |b| {
                    b.truncate(19);
                    b[3] = 19;
                },
                SctpError::ShortInit,
            ),
        ];
        for (i, (spoil, e)) in cases.into_iter().enumerate() {
            let mut b = good.clone();
            spoil(&mut b);
            let before = b.clone();
            assert_eq!(count_multihoming(&b).map(|m| m.addresses), Err(e), "case {i}");
            assert_eq!(remove_multihoming(&mut b), Err(e), "case {i}");
            assert_eq!(b, before, "case {i}");
        }
        // A bad chunk is the chunk walk's error.
        let mut b = good.clone();
        b[3] = 200;
        assert_eq!(remove_multihoming(&mut b), Err(SctpError::Truncated));
    }

    proptest! {
        /// Whatever the bytes, the removal never panics; on success the chunks walk
        /// whole within the new length, no address parameter nor ASCONF entry left,
        /// each INIT's length consistent with its parameters; on an error nothing changed.
        #[test]
        fn any_bytes_remove(mut b in proptest::collection::vec(any::<u8>(), 0..160), init in any::<bool>(), types in proptest::collection::vec(prop::sample::select(vec![5u16, 6, 11, 12, 7, 0xc004, SUPPORTED_EXTENSIONS]), 8)) {
            // Nudge toward INITs with multi-homing's parameters, which random bytes
            // seldom are.
            if init && b.len() >= 24 {
                b[0] = 1;
                b[20..22].copy_from_slice(&types[0].to_be_bytes());
            }
            let before = b.clone();
            match remove_multihoming(&mut b) {
                Ok(r) => {
                    prop_assert!(r.len <= before.len());
                    prop_assert_eq!(count_multihoming(&b[..r.len]), Ok(Multihoming::default()));
                    prop_assert_eq!(count_multihoming(&before), Ok(r.removed));
                    prop_assert_eq!(r.removed.is_none(), b == before);
                    prop_assert!(before.len() - r.len >= 4 * r.removed.addresses);
                }
                Err(e) => {
                    prop_assert_eq!(Err(e), count_multihoming(&before));
                    prop_assert_eq!(&b, &before);
                }
            }
        }

        /// Any list of parameters: what is left is the list without the addresses, and
        /// without ASCONF and ASCONF-ACK in a Supported Extensions list (a list left
        /// empty gone).
        #[test]
        fn any_params_remove(params in proptest::collection::vec((prop::sample::select(vec![5u16, 6, 11, 12, 7, 0x8000, 0xc000, 0xc004, SUPPORTED_EXTENSIONS]), proptest::collection::vec(prop::sample::select(vec![0xc1u8, 0x80, 0xc0, 0x0f, 0x82, 0x40, 0]), 0..21)), 0..7), last_padded: bool, ack: bool) {
            let t = if ack { ChunkType::InitAck } else { ChunkType::Init };
            let all: Vec<(u16, &[u8])> = params.iter().map(|(t, v)| (*t, &v[..])).collect();
            let lists: Vec<Vec<u8>> = all.iter().map(|(_, v)| v.iter().copied().filter(|c| !ASCONF_CHUNKS.contains(c)).collect()).collect();
            let mut kept: Vec<(u16, &[u8])> = Vec::new();
            let mut want = Multihoming::default();
            for (i, &(pt, v)) in all.iter().enumerate() {
                if ADDRESS_PARAMS.contains(&pt) {
                    want.addresses += 1;
                } else if pt == SUPPORTED_EXTENSIONS && lists[i].len() < v.len() {
                    want.asconf += v.len() - lists[i].len();
                    if !lists[i].is_empty() {
                        kept.push((pt, &lists[i]));
                    }
                } else {
                    kept.push((pt, v));
                }
            }
            let mut b = init_chunk(t, &all, last_padded);
            let r = remove_multihoming(&mut b).unwrap();
            prop_assert_eq!(r.removed, want);
            if !want.is_none() {
                prop_assert_eq!(&b[..r.len], &init_chunk(t, &kept, false)[..]);
            }
        }
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
