//! IP Encapsulating Security Payload (ESP, RFC 4303) and its UDP encapsulation for NAT
//! traversal (RFC 3948).
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |               Security Parameters Index (SPI)                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                      Sequence Number (low 32 bits)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    IV (per algorithm, 0..16 bytes)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+ ─┐
//! |                    Payload Data (the inner packet) ...        |  │ encrypted
//! +               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  │
//! |               |     Padding (0-255 bytes: 1, 2, 3, ...)       |  │
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  │
//! |                               |  Pad Length   | Next Header   |  │
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+ ─┘
//! |         Integrity Check Value (per algorithm, 0..16 bytes)    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The header view knows SPI and sequence number only: where the IV ends and the ICV
//! starts is a property of the SA's algorithm, so the view takes an [`EspLayout`] to
//! split the rest. The trailer is read from the decrypted bytes ([`EspTrailer`]) and
//! written before encryption ([`EspTrailer::emit`]).
//!
//! In UDP (RFC 3948, port 4500) a datagram is ESP unless its first four bytes are zero
//! (the non-ESP marker before an IKE message) or it is the single byte 0xff (a NAT
//! keep-alive): [`classify_udp`].

use crate::ip::IpProtocol;

pub const HEADER_LEN: usize = 8;
/// The UDP port of ESP in UDP and of IKE behind the non-ESP marker (RFC 3948).
pub const UDP_PORT: u16 = 4500;
/// Pad length and next header.
pub const TRAILER_LEN: usize = 2;
/// The non-ESP marker before an IKE message in UDP 4500: a zero SPI.
pub const NON_ESP_MARKER_LEN: usize = 4;
/// A NAT keep-alive (RFC 3948 §2.3): one byte.
pub const NAT_KEEPALIVE: u8 = 0xff;
/// The largest pad length (one byte).
pub const MAX_PAD: usize = 255;

mod field {
    pub const SPI: usize = 0;
    pub const SEQ: usize = 4;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EspError {
    #[error("ESP packet shorter than its header, IV, trailer and ICV")]
    Truncated,
    /// SPI 0 is reserved for local use and never on the wire (RFC 4303 §2.1); in UDP
    /// it is the non-ESP marker.
    #[error("ESP SPI 0")]
    ZeroSpi,
    /// SPIs 1 to 255 are reserved by IANA (RFC 4303 §2.1).
    #[error("ESP SPI in the IANA reserved range 1-255")]
    ReservedSpi,
    /// The encrypted part is not a whole number of the cipher's blocks (or of 4 bytes).
    #[error("ESP ciphertext length not a multiple of the block size")]
    Unaligned,
    #[error("ESP pad length longer than the decrypted payload")]
    PadTooLong,
    /// Padding bytes other than 1, 2, 3, ... (RFC 4303 §2.4's default contents).
    #[error("ESP padding bytes not 1, 2, 3, ...")]
    BadPadding,
    /// In UDP: 1 to 7 bytes that are neither a keep-alive nor a non-ESP marker.
    #[error("UDP-encapsulated datagram too short for ESP")]
    ShortUdpPayload,
}

/// Where an SA's algorithm puts the IV and ICV, and the alignment its ciphertext keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspLayout {
    /// Bytes of IV after the sequence number (8 for GCM and ChaCha20-Poly1305, 16 for
    /// CBC, 0 for NULL).
    pub iv_len: usize,
    /// Bytes of ICV at the end (16 for the AEADs and HMAC-SHA-256-128, 0 without
    /// integrity).
    pub icv_len: usize,
    /// The encrypted part is a multiple of this (16 for AES-CBC, else 4, RFC 4303 §2.4):
    /// a power of two, as every cipher's block is.
    pub align: usize,
}

impl EspLayout {
    /// Padding for a payload of `len` bytes: the least that makes payload, padding and
    /// trailer a multiple of the alignment. A mask, since the alignment is a power of
    /// two: the two divisions of `(a - (len + 2) % a) % a` by an alignment known only
    /// at run time were ~16 instructions of `esp4-encrypt` a packet.
    #[inline(always)]
    pub const fn pad_len(&self, len: usize) -> usize {
        debug_assert!(self.align.is_power_of_two());
        (len + TRAILER_LEN).wrapping_neg() & (self.align - 1)
    }

    /// Bytes ESP adds around a payload of `len` bytes: header, IV, padding, trailer, ICV.
    #[inline(always)]
    pub const fn overhead(&self, len: usize) -> usize {
        HEADER_LEN + self.iv_len + self.pad_len(len) + TRAILER_LEN + self.icv_len
    }

    /// The most ESP adds to any payload (the padding at its longest for the alignment).
    #[inline(always)]
    pub const fn max_overhead(&self) -> usize {
        HEADER_LEN + self.iv_len + self.align - 1 + TRAILER_LEN + self.icv_len
    }
}

/// A checked view of an ESP packet (from the SPI to the end of the ICV).
#[derive(Debug, Clone)]
pub struct EspPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EspPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        EspPacket { buffer }
    }

    /// Checks that the header is there and the SPI is one an SA may have (not 0, not
    /// 1-255). The rest depends on the SA: [`EspPacket::check_layout`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, EspError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(EspError::Truncated);
        }
        match crate::be32(b, field::SPI) {
            0 => Err(EspError::ZeroSpi),
            1..=255 => Err(EspError::ReservedSpi),
            _ => Ok(EspPacket { buffer }),
        }
    }

    /// Checks the packet against an SA's layout: room for IV, a trailer and the ICV, and
    /// an aligned encrypted part.
    #[inline]
    pub fn check_layout(&self, l: &EspLayout) -> Result<(), EspError> {
        let len = self.buffer.as_ref().len();
        let fixed = HEADER_LEN + l.iv_len + l.icv_len;
        if len < fixed + TRAILER_LEN {
            return Err(EspError::Truncated);
        }
        if (len - fixed) & (l.align - 1) != 0 {
            return Err(EspError::Unaligned);
        }
        Ok(())
    }

    #[inline(always)]
    pub fn spi(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), field::SPI)
    }

    /// The low 32 bits of the sequence number (the high 32 of an ESN are not sent).
    #[inline(always)]
    pub fn seq(&self) -> u32 {
        crate::be32(self.buffer.as_ref(), field::SEQ)
    }

    /// The IV (call [`EspPacket::check_layout`] first).
    pub fn iv(&self, l: &EspLayout) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + l.iv_len]
    }

    /// The encrypted part: payload, padding and trailer (after [`EspPacket::check_layout`]).
    pub fn ciphertext(&self, l: &EspLayout) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN + l.iv_len..b.len() - l.icv_len]
    }

    /// The ICV (after [`EspPacket::check_layout`]).
    pub fn icv(&self, l: &EspLayout) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[b.len() - l.icv_len..]
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EspPacket<T> {
    #[inline(always)]
    pub fn set_spi(&mut self, v: u32) {
        crate::put32(self.buffer.as_mut(), field::SPI, v)
    }
    #[inline(always)]
    pub fn set_seq(&mut self, v: u32) {
        crate::put32(self.buffer.as_mut(), field::SEQ, v)
    }
}

/// The ESP header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspRepr {
    pub spi: u32,
    /// Low 32 bits of the sequence number.
    pub seq: u32,
}

impl EspRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &EspPacket<T>) -> EspRepr {
        EspRepr { spi: p.spi(), seq: p.seq() }
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header into the first 8 bytes of `b`.
    #[inline(always)]
    pub fn emit(&self, b: &mut [u8]) {
        crate::put32(b, field::SPI, self.spi);
        crate::put32(b, field::SEQ, self.seq);
    }
}

/// The ESP trailer, read from the decrypted bytes (payload, padding, pad length, next
/// header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspTrailer {
    pub pad_len: u8,
    /// The payload's protocol: `IpIp` / `Ipv6` in tunnel mode, 59 (`Ipv6NoNxt`) for a
    /// dummy packet (RFC 4303 §2.6).
    pub next_header: IpProtocol,
}

impl EspTrailer {
    /// Read the trailer at the end of `plain` (the decrypted part) and check the
    /// padding's default contents. The payload is `plain[..EspTrailer::payload_len]`.
    #[inline]
    pub fn parse(plain: &[u8]) -> Result<EspTrailer, EspError> {
        let Some((rest, &[pad_len, nh])) = plain.split_last_chunk::<2>() else {
            return Err(EspError::Truncated);
        };
        let pad = pad_len as usize;
        if pad > rest.len() {
            return Err(EspError::PadTooLong);
        }
        let padding = &rest[rest.len() - pad..];
        if padding.iter().enumerate().any(|(i, &v)| v as usize != i + 1) {
            return Err(EspError::BadPadding);
        }
        Ok(EspTrailer { pad_len, next_header: IpProtocol::from(nh) })
    }

    /// The payload's length in a decrypted part of `plain_len` bytes.
    #[inline(always)]
    pub fn payload_len(&self, plain_len: usize) -> usize {
        plain_len - TRAILER_LEN - self.pad_len as usize
    }

    /// Write padding (1, 2, 3, ...) and the trailer at the start of `b`, which holds at
    /// least `pad_len + 2` bytes. Bytes of `b` after the trailer may be written too
    /// (within its first 16): the encrypt nodes pass the ICV's room there, which sealing
    /// overwrites.
    #[inline(always)]
    pub fn emit(&self, b: &mut [u8]) {
        /// The default padding's bytes (RFC 4303 §2.4), for one 16-byte store.
        const PADDING: [u8; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
        let pad = self.pad_len as usize;
        match b.first_chunk_mut::<16>() {
            // Block padding (up to 15 bytes) was a byte loop of ~3 instructions a byte.
            Some(head) if pad <= 16 => *head = PADDING,
            _ => {
                for (i, v) in b[..pad].iter_mut().enumerate() {
                    *v = (i + 1) as u8;
                }
            }
        }
        b[pad] = self.pad_len;
        b[pad + 1] = u8::from(self.next_header);
    }

    pub const fn buffer_len(&self) -> usize {
        self.pad_len as usize + TRAILER_LEN
    }
}

/// What a UDP datagram to port 4500 carries (RFC 3948 §2.2, §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpEncap {
    /// ESP from the first byte.
    Esp,
    /// An IKE message after the 4-byte non-ESP marker.
    Ike,
    /// A NAT keep-alive: nothing to deliver.
    Keepalive,
}

/// Tell ESP, IKE and keep-alives apart in a UDP-encapsulated datagram's payload.
#[inline]
pub fn classify_udp(payload: &[u8]) -> Result<UdpEncap, EspError> {
    match payload {
        [NAT_KEEPALIVE] => Ok(UdpEncap::Keepalive),
        [0, 0, 0, 0, ..] => Ok(UdpEncap::Ike),
        p if p.len() < HEADER_LEN => Err(EspError::ShortUdpPayload),
        _ => Ok(UdpEncap::Esp),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GCM: EspLayout = EspLayout { iv_len: 8, icv_len: 16, align: 4 };
    const CBC: EspLayout = EspLayout { iv_len: 16, icv_len: 16, align: 16 };

    #[test]
    fn header_fields_read_and_written() {
        let mut b = [0u8; 8];
        EspRepr { spi: 0x1234_5678, seq: 0xdead_beef }.emit(&mut b);
        assert_eq!(b, [0x12, 0x34, 0x56, 0x78, 0xde, 0xad, 0xbe, 0xef]);
        let p = EspPacket::new_checked(&b[..]).unwrap();
        assert_eq!((p.spi(), p.seq()), (0x1234_5678, 0xdead_beef));
    }

    #[test]
    fn reserved_and_short_headers_refused() {
        assert_eq!(EspPacket::new_checked(&[1u8; 7][..]).unwrap_err(), EspError::Truncated);
        assert_eq!(EspPacket::new_checked(&[0u8; 8][..]).unwrap_err(), EspError::ZeroSpi);
        assert_eq!(EspPacket::new_checked(&[0, 0, 0, 255, 0, 0, 0, 1][..]).unwrap_err(), EspError::ReservedSpi);
        assert!(EspPacket::new_checked(&[0, 0, 1, 0, 0, 0, 0, 1][..]).is_ok());
    }

    #[test]
    fn layout_checks_length_and_alignment() {
        let mut b = vec![0u8; 8 + 16 + 32 + 16];
        b[2] = 0x80;
        let p = EspPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.check_layout(&CBC), Ok(()));
        assert_eq!(p.ciphertext(&CBC).len(), 32);
        let p = EspPacket::new_checked(&b[..b.len() - 1]).unwrap();
        assert_eq!(p.check_layout(&CBC), Err(EspError::Unaligned));
        let p = EspPacket::new_checked(&b[..8 + 8 + 16 + 1]).unwrap();
        assert_eq!(p.check_layout(&GCM), Err(EspError::Truncated));
    }

    /// The mask against the plain formula, for every power-of-two alignment up to 256.
    #[test]
    fn padding_mask_equals_the_division() {
        for shift in 0..=8 {
            let align = 1usize << shift;
            let l = EspLayout { iv_len: 0, icv_len: 0, align };
            for len in 0..4 * 256 + 3 {
                assert_eq!(l.pad_len(len), (align - (len + TRAILER_LEN) % align) % align, "align {align} len {len}");
            }
        }
    }

    /// The trailer as written, with and without room after it, for every padding length:
    /// padding 1, 2, 3, ..., pad length, next header.
    #[test]
    fn trailer_written_for_every_padding_length() {
        for pad in 0..=255usize {
            for room in [0, 1, 13, 16, 20] {
                let t = EspTrailer { pad_len: pad as u8, next_header: IpProtocol::IpIp };
                let mut b = vec![0xee; pad + 2 + room];
                t.emit(&mut b);
                let want: Vec<u8> = (1..=pad).map(|i| i as u8).chain([pad as u8, 4]).collect();
                assert_eq!(&b[..pad + 2], &want[..], "pad {pad} room {room}");
                assert_eq!(EspTrailer::parse(&b[..pad + 2]), Ok(t));
                // Nothing past the trailer, or past the one 16-byte store where there is room for it.
                let untouched = if b.len() < 16 { pad + 2 } else { (pad + 2).max(16) };
                assert!(b[untouched..].iter().all(|&x| x == 0xee), "pad {pad} room {room}: written past {untouched}");
            }
        }
    }

    #[test]
    fn padding_is_the_least_that_aligns() {
        assert_eq!(GCM.pad_len(2), 0);
        assert_eq!(GCM.pad_len(3), 3);
        assert_eq!(CBC.pad_len(14), 0);
        assert_eq!(CBC.pad_len(15), 15);
        assert_eq!(GCM.overhead(84), 8 + 8 + 2 + 2 + 16);
    }

    #[test]
    fn trailer_errors_are_typed() {
        assert_eq!(EspTrailer::parse(&[4]), Err(EspError::Truncated));
        assert_eq!(EspTrailer::parse(&[1, 2, 3, 4]), Err(EspError::PadTooLong));
        assert_eq!(EspTrailer::parse(&[9, 1, 3, 2, 4]), Err(EspError::BadPadding));
        let t = EspTrailer::parse(&[0x45, 1, 2, 2, 4]).unwrap();
        assert_eq!((t.pad_len, t.next_header, t.payload_len(5)), (2, IpProtocol::IpIp, 1));
    }

    #[test]
    fn udp_payloads_classified() {
        assert_eq!(classify_udp(&[0xff]), Ok(UdpEncap::Keepalive));
        assert_eq!(classify_udp(&[0, 0, 0, 0, 0x21]), Ok(UdpEncap::Ike));
        assert_eq!(classify_udp(&[0, 0, 0, 0]), Ok(UdpEncap::Ike));
        assert_eq!(classify_udp(&[0, 0, 1, 0, 0]), Err(EspError::ShortUdpPayload));
        assert_eq!(classify_udp(&[]), Err(EspError::ShortUdpPayload));
        assert_eq!(classify_udp(&[0xfe]), Err(EspError::ShortUdpPayload));
        assert_eq!(classify_udp(&[0, 0, 1, 0, 0, 0, 0, 1]), Ok(UdpEncap::Esp));
    }

    proptest! {
        #[test]
        fn header_and_trailer_round_trip(spi in 256u32.., seq: u32, payload in proptest::collection::vec(any::<u8>(), 0..300),
                                         nh: u8, cbc: bool) {
            let l = if cbc { CBC } else { GCM };
            let pad = l.pad_len(payload.len());
            let t = EspTrailer { pad_len: pad as u8, next_header: IpProtocol::from(nh) };
            let mut b = vec![0u8; HEADER_LEN + l.iv_len];
            EspRepr { spi, seq }.emit(&mut b);
            b.extend_from_slice(&payload);
            let at = b.len();
            b.resize(at + t.buffer_len(), 0);
            t.emit(&mut b[at..]);
            b.resize(b.len() + l.icv_len, 0);
            prop_assert_eq!(b.len(), payload.len() + l.overhead(payload.len()));
            let p = EspPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!(EspRepr::parse(&p), EspRepr { spi, seq });
            prop_assert_eq!(p.check_layout(&l), Ok(()));
            let plain = p.ciphertext(&l);
            prop_assert_eq!(plain.len() % l.align, 0);
            let back = EspTrailer::parse(plain).unwrap();
            prop_assert_eq!(back, t);
            prop_assert_eq!(&plain[..back.payload_len(plain.len())], &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = classify_udp(&b);
            let _ = EspTrailer::parse(&b);
            if let Ok(p) = EspPacket::new_checked(&b[..]) {
                for l in [GCM, CBC, EspLayout { iv_len: 0, icv_len: 0, align: 4 }] {
                    if p.check_layout(&l).is_ok() {
                        let _ = EspTrailer::parse(p.ciphertext(&l));
                        prop_assert_eq!(p.icv(&l).len(), l.icv_len);
                    }
                }
            }
        }
    }
}
