//! GTPv1-U (3GPP TS 29.281), UDP port 2152: the header, its optional fields and the
//! extension-header chain, with the PDU Session Container of TS 38.415.
//!
//! ```text
//!  0       1       2       3       4               8       10  11     12
//! +-+-+-+-+-------+-------+-------+---------------+-------+---+------+---------
//! |V=1|PT|0|E|S|PN| type  | length (after byte 8) | TEID  |seq|N-PDU |next ext| ext headers… payload
//! +---------------+-------+-------+---------------+-------+---+------+---------
//! ```
//! The 4 optional bytes are present when any of E, S, PN is set. Each extension header is
//! `| length (4-byte units) | content … | next extension header type |`.
//! The top two bits of an extension type say what a receiver that does not know it must
//! do (§5.2.1): 00/01 skip it, 10 it is for the endpoint (we are one), 11 required by all.

pub const PORT: u16 = 2152;
pub const HEADER_LEN: usize = 8;
/// Header plus the optional sequence / N-PDU / next-extension bytes.
pub const LONG_HEADER_LEN: usize = 12;

mod field {
    pub const FLAGS: usize = 0;
    pub const TYPE: usize = 1;
    pub const LENGTH: usize = 2;
    pub const TEID: usize = 4;
    pub const SEQ: usize = 8;
    pub const NPDU: usize = 10;
    pub const NEXT_EXT: usize = 11;
}

const FLAG_E: u8 = 0x04;
const FLAG_S: u8 = 0x02;
const FLAG_PN: u8 = 0x01;

/// A tunnel endpoint identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Teid(pub u32);

/// A QoS flow identifier: six bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Qfi(u8);

impl Qfi {
    pub const fn new(v: u8) -> Option<Qfi> {
        if v < 64 {
            Some(Qfi(v))
        } else {
            None
        }
    }
    pub const fn get(self) -> u8 {
        self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    EchoRequest,
    EchoResponse,
    ErrorIndication,
    SupportedExtensionHeadersNotification,
    EndMarker,
    GPdu,
    Unknown(u8),
}

impl From<u8> for MessageType {
    fn from(v: u8) -> Self {
        match v {
            1 => MessageType::EchoRequest,
            2 => MessageType::EchoResponse,
            26 => MessageType::ErrorIndication,
            31 => MessageType::SupportedExtensionHeadersNotification,
            254 => MessageType::EndMarker,
            255 => MessageType::GPdu,
            o => MessageType::Unknown(o),
        }
    }
}

impl From<MessageType> for u8 {
    fn from(v: MessageType) -> u8 {
        match v {
            MessageType::EchoRequest => 1,
            MessageType::EchoResponse => 2,
            MessageType::ErrorIndication => 26,
            MessageType::SupportedExtensionHeadersNotification => 31,
            MessageType::EndMarker => 254,
            MessageType::GPdu => 255,
            MessageType::Unknown(o) => o,
        }
    }
}

/// TS 29.281's names, lower case (`g-pdu`, `echo-request`); an unknown one `type <n>`.
impl core::fmt::Display for MessageType {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str(match self {
            MessageType::EchoRequest => "echo-request",
            MessageType::EchoResponse => "echo-response",
            MessageType::ErrorIndication => "error-indication",
            MessageType::SupportedExtensionHeadersNotification => "supported-extension-headers-notification",
            MessageType::EndMarker => "end-marker",
            MessageType::GPdu => "g-pdu",
            MessageType::Unknown(n) => return write!(f, "type {n}"),
        })
    }
}

/// Extension header types vecgate knows.
pub mod ext {
    pub const NONE: u8 = 0x00;
    pub const UDP_PORT: u8 = 0x40;
    pub const LONG_PDCP_PDU_NUMBER: u8 = 0x82;
    pub const PDU_SESSION_CONTAINER: u8 = 0x85;
    pub const PDCP_PDU_NUMBER: u8 = 0xc0;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GtpuError {
    #[error("shorter than the GTP-U header, its optional fields or its length field")]
    Truncated,
    #[error("version is not 1 or PT is not GTP (GTP' is not handled)")]
    BadVersion,
    #[error("extension header with length 0 or running past the message")]
    BadExtension,
    #[error("unknown extension header whose type says comprehension is required")]
    UnknownRequiredExtension,
    #[error("more than {MAX_EXTENSIONS} extension headers")]
    TooManyExtensions,
    #[error("PDU session container content is malformed")]
    BadPduSessionContainer,
}

/// The most extension headers walked (bounds the work per packet).
pub const MAX_EXTENSIONS: usize = 8;

#[derive(Debug, Clone)]
pub struct GtpuPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GtpuPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        GtpuPacket { buffer }
    }

    /// Checks version/PT, that the message (8 + length) fits the buffer and, when any of
    /// E/S/PN is set, that the 4 optional bytes are inside the length.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, GtpuError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(GtpuError::Truncated);
        }
        if b[field::FLAGS] >> 4 != 0x3 {
            return Err(GtpuError::BadVersion);
        }
        let len = crate::be16(b, field::LENGTH) as usize;
        if HEADER_LEN + len > b.len() {
            return Err(GtpuError::Truncated);
        }
        if b[field::FLAGS] & (FLAG_E | FLAG_S | FLAG_PN) != 0 && len < 4 {
            return Err(GtpuError::Truncated);
        }
        Ok(GtpuPacket { buffer })
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x07
    }
    fn has_optional(&self) -> bool {
        self.flags() != 0
    }
    pub fn msg_type(&self) -> MessageType {
        self.buffer.as_ref()[field::TYPE].into()
    }
    /// Bytes after the mandatory 8-byte header (optional fields, extensions, payload).
    pub fn length(&self) -> usize {
        crate::be16(self.buffer.as_ref(), field::LENGTH) as usize
    }
    #[inline(always)]
    pub fn teid(&self) -> Teid {
        Teid(crate::be32(self.buffer.as_ref(), field::TEID))
    }
    pub fn seq(&self) -> Option<u16> {
        (self.flags() & FLAG_S != 0).then(|| crate::be16(self.buffer.as_ref(), field::SEQ))
    }
    pub fn npdu(&self) -> Option<u8> {
        (self.flags() & FLAG_PN != 0).then(|| self.buffer.as_ref()[field::NPDU])
    }
    /// The first extension type, when E is set.
    pub fn next_extension(&self) -> u8 {
        if self.flags() & FLAG_E != 0 {
            self.buffer.as_ref()[field::NEXT_EXT]
        } else {
            ext::NONE
        }
    }

    /// Walk the extension headers; returns where the payload (T-PDU or IEs) starts and
    /// the extensions found.
    pub fn extensions(&self) -> Result<Extensions<'_>, GtpuError> {
        let b = &self.buffer.as_ref()[..HEADER_LEN + self.length()];
        let mut e = Extensions { items: [(0, 0, 0); MAX_EXTENSIONS], count: 0, payload_offset: HEADER_LEN, data: b };
        if !self.has_optional() {
            return Ok(e);
        }
        let mut off = LONG_HEADER_LEN;
        let mut next = self.next_extension();
        while next != ext::NONE {
            if e.count == MAX_EXTENSIONS {
                return Err(GtpuError::TooManyExtensions);
            }
            let units = *b.get(off).ok_or(GtpuError::BadExtension)? as usize;
            let len = units * 4;
            if units == 0 || off + len > b.len() {
                return Err(GtpuError::BadExtension);
            }
            e.items[e.count] = (next, off + 1, off + len - 1);
            e.count += 1;
            next = b[off + len - 1];
            off += len;
        }
        e.payload_offset = off;
        Ok(e)
    }

    /// The message body after the header, optional fields and extensions.
    pub fn payload(&self) -> Result<&[u8], GtpuError> {
        let off = self.extensions()?.payload_offset;
        Ok(&self.buffer.as_ref()[off..HEADER_LEN + self.length()])
    }
}

/// What a walk of the extension chain found: (type, content start, content end).
pub struct Extensions<'a> {
    items: [(u8, usize, usize); MAX_EXTENSIONS],
    count: usize,
    pub payload_offset: usize,
    data: &'a [u8],
}

impl<'a> Extensions<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (u8, &'a [u8])> + '_ {
        let d = self.data;
        self.items[..self.count].iter().map(move |&(t, s, e)| (t, &d[s..e]))
    }
}

/// What a receiving endpoint does with an extension type it does not implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownExtension {
    Skip,
    /// "Comprehension required" (10 for endpoints, 11 for everyone): the message cannot be
    /// handled; the spec answers with a Supported Extension Headers Notification.
    Reject,
}

pub fn unknown_extension_action(ext_type: u8) -> UnknownExtension {
    if ext_type & 0x80 != 0 {
        UnknownExtension::Reject
    } else {
        UnknownExtension::Skip
    }
}

/// PDU Session Container direction and content (TS 38.415 §5.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PduSession {
    /// DL PDU SESSION INFORMATION (PDU type 0): QFI, RQI, optional PPI.
    Downlink { qfi: Qfi, rqi: bool, ppi: Option<u8> },
    /// UL PDU SESSION INFORMATION (PDU type 1): QFI.
    Uplink { qfi: Qfi },
}

impl PduSession {
    /// Parse the container's content (between its length byte and next-type byte).
    pub fn parse(c: &[u8]) -> Result<PduSession, GtpuError> {
        if c.len() < 2 {
            return Err(GtpuError::BadPduSessionContainer);
        }
        let qfi = Qfi(c[1] & 0x3f);
        match c[0] >> 4 {
            0 => {
                let ppp = c[1] & 0x80 != 0;
                let ppi = if ppp { Some(c.get(2).ok_or(GtpuError::BadPduSessionContainer)? >> 5) } else { None };
                Ok(PduSession::Downlink { qfi, rqi: c[1] & 0x40 != 0, ppi })
            }
            1 => Ok(PduSession::Uplink { qfi }),
            _ => Err(GtpuError::BadPduSessionContainer),
        }
    }

    /// Content bytes, padded so that 1 (length) + content + 1 (next type) is a multiple
    /// of 4.
    fn content(&self) -> ([u8; 6], usize) {
        let mut c = [0u8; 6];
        match *self {
            PduSession::Downlink { qfi, rqi, ppi } => {
                c[0] = 0;
                c[1] = ((ppi.is_some() as u8) << 7) | ((rqi as u8) << 6) | qfi.0;
                if let Some(p) = ppi {
                    c[2] = (p & 7) << 5;
                    (c, 6)
                } else {
                    (c, 2)
                }
            }
            PduSession::Uplink { qfi } => {
                c[0] = 1 << 4;
                c[1] = qfi.0;
                (c, 2)
            }
        }
    }
}

/// A parsed GTP-U header with the extensions vecgate acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GtpuRepr {
    pub msg_type: MessageType,
    pub teid: Teid,
    pub seq: Option<u16>,
    pub npdu: Option<u8>,
    pub pdu_session: Option<PduSession>,
    pub udp_port: Option<u16>,
    pub pdcp_number: Option<u16>,
    /// Bytes after the header and extensions.
    pub payload_len: usize,
}

impl GtpuRepr {
    /// Parse, applying the comprehension rules to unknown extensions.
    pub fn parse<T: AsRef<[u8]>>(p: &GtpuPacket<T>) -> Result<GtpuRepr, GtpuError> {
        let exts = p.extensions()?;
        let mut r = GtpuRepr {
            msg_type: p.msg_type(),
            teid: p.teid(),
            seq: p.seq(),
            npdu: p.npdu(),
            pdu_session: None,
            udp_port: None,
            pdcp_number: None,
            payload_len: HEADER_LEN + p.length() - exts.payload_offset,
        };
        for (t, c) in exts.iter() {
            match t {
                ext::PDU_SESSION_CONTAINER => r.pdu_session = Some(PduSession::parse(c)?),
                ext::UDP_PORT if c.len() >= 2 => r.udp_port = Some(u16::from_be_bytes([c[0], c[1]])),
                ext::PDCP_PDU_NUMBER if c.len() >= 2 => r.pdcp_number = Some(u16::from_be_bytes([c[0], c[1]])),
                // Known (3 octets: an 18-bit number), used at handover by the RAN; vecgate
                // forwards G-PDUs whatever their PDCP numbers, so it only checks the size.
                ext::LONG_PDCP_PDU_NUMBER if c.len() >= 3 => {}
                ext::UDP_PORT | ext::PDCP_PDU_NUMBER | ext::LONG_PDCP_PDU_NUMBER => return Err(GtpuError::BadExtension),
                other => {
                    if unknown_extension_action(other) == UnknownExtension::Reject {
                        return Err(GtpuError::UnknownRequiredExtension);
                    }
                }
            }
        }
        Ok(r)
    }

    fn extensions(&self) -> ([(u8, [u8; 6], usize); 3], usize) {
        let mut v = [(0u8, [0u8; 6], 0usize); 3];
        let mut n = 0;
        if let Some(ps) = self.pdu_session {
            let (c, l) = ps.content();
            v[n] = (ext::PDU_SESSION_CONTAINER, c, l);
            n += 1;
        }
        if let Some(port) = self.udp_port {
            let mut c = [0u8; 6];
            c[..2].copy_from_slice(&port.to_be_bytes());
            v[n] = (ext::UDP_PORT, c, 2);
            n += 1;
        }
        if let Some(num) = self.pdcp_number {
            let mut c = [0u8; 6];
            c[..2].copy_from_slice(&num.to_be_bytes());
            v[n] = (ext::PDCP_PDU_NUMBER, c, 2);
            n += 1;
        }
        (v, n)
    }

    fn has_optional(&self) -> bool {
        self.seq.is_some() || self.npdu.is_some() || self.pdu_session.is_some() || self.udp_port.is_some() || self.pdcp_number.is_some()
    }

    /// Header, optional fields and extensions, without the payload.
    pub fn header_len(&self) -> usize {
        if !self.has_optional() {
            return HEADER_LEN;
        }
        let (v, n) = self.extensions();
        LONG_HEADER_LEN + v[..n].iter().map(|e| e.2 + 2).sum::<usize>()
    }

    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len
    }

    /// Emit the header and extensions into `buf[..header_len()]`; the payload follows.
    pub fn emit(&self, buf: &mut [u8]) {
        let hl = self.header_len();
        let (v, n) = self.extensions();
        let flags = 0x30
            | if n > 0 { FLAG_E } else { 0 }
            | if self.seq.is_some() { FLAG_S } else { 0 }
            | if self.npdu.is_some() { FLAG_PN } else { 0 };
        buf[field::FLAGS] = flags;
        buf[field::TYPE] = self.msg_type.into();
        crate::put16(buf, field::LENGTH, (hl - HEADER_LEN + self.payload_len) as u16);
        crate::put32(buf, field::TEID, self.teid.0);
        if hl == HEADER_LEN {
            return;
        }
        crate::put16(buf, field::SEQ, self.seq.unwrap_or(0));
        buf[field::NPDU] = self.npdu.unwrap_or(0);
        buf[field::NEXT_EXT] = if n > 0 { v[0].0 } else { ext::NONE };
        let mut off = LONG_HEADER_LEN;
        for i in 0..n {
            let (_, c, l) = v[i];
            let total = l + 2;
            buf[off] = (total / 4) as u8;
            buf[off + 1..off + 1 + l].copy_from_slice(&c[..l]);
            buf[off + total - 1] = if i + 1 < n { v[i + 1].0 } else { ext::NONE };
            off += total;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn message_types_print_as_the_spec_names_them() {
        let shown: Vec<String> = [1u8, 2, 26, 31, 254, 255, 77].map(|t| MessageType::from(t).to_string()).to_vec();
        let want = [
            "echo-request",
            "echo-response",
            "error-indication",
            "supported-extension-headers-notification",
            "end-marker",
            "g-pdu",
            "type 77",
        ];
        assert_eq!(shown, want);
    }

    fn arb_session() -> impl Strategy<Value = Option<PduSession>> {
        prop_oneof![
            Just(None),
            (0u8..64, any::<bool>(), proptest::option::of(0u8..8)).prop_map(|(q, rqi, ppi)| Some(PduSession::Downlink {
                qfi: Qfi(q),
                rqi,
                ppi
            })),
            (0u8..64).prop_map(|q| Some(PduSession::Uplink { qfi: Qfi(q) })),
        ]
    }

    proptest! {
        #[test]
        fn roundtrip(t: u8, teid: u32, seq: Option<u16>, npdu: Option<u8>, ps in arb_session(), port: Option<u16>, pdcp: Option<u16>, payload in 0usize..64) {
            let r = GtpuRepr { msg_type: t.into(), teid: Teid(teid), seq, npdu, pdu_session: ps, udp_port: port, pdcp_number: pdcp, payload_len: payload };
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b);
            let p = GtpuPacket::new_checked(&b[..]).unwrap();
            let mut want = r;
            // Without S or PN the optional fields are present but not meaningful.
            if r.header_len() > HEADER_LEN {
                want.seq = seq;
                want.npdu = npdu;
            }
            prop_assert_eq!(GtpuRepr::parse(&p).unwrap(), want);
            prop_assert_eq!(p.payload().unwrap().len(), payload);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(p) = GtpuPacket::new_checked(&data[..]) {
                let _ = GtpuRepr::parse(&p);
                let _ = p.payload();
            }
        }
    }

    #[test]
    fn malformed_and_comprehension() {
        let r = GtpuRepr {
            msg_type: MessageType::GPdu,
            teid: Teid(7),
            seq: None,
            npdu: None,
            pdu_session: Some(PduSession::Uplink { qfi: Qfi(9) }),
            udp_port: None,
            pdcp_number: None,
            payload_len: 4,
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        assert_eq!(b[0], 0x34);
        assert_eq!(GtpuPacket::new_checked(&b[..7]).unwrap_err(), GtpuError::Truncated);
        let mut v = b.clone();
        v[0] = 0x54;
        assert_eq!(GtpuPacket::new_checked(&v[..]).unwrap_err(), GtpuError::BadVersion);
        let mut z = b.clone();
        z[12] = 0; // extension length 0
        assert_eq!(GtpuRepr::parse(&GtpuPacket::new_checked(&z[..]).unwrap()).unwrap_err(), GtpuError::BadExtension);
        // Unknown extension types: 0x0x/0x4x skipped, 0x8x/0xCx (not known) rejected.
        let mut skip = b.clone();
        skip[11] = 0x03;
        assert!(GtpuRepr::parse(&GtpuPacket::new_checked(&skip[..]).unwrap()).is_ok());
        // Long PDCP PDU Number (0x82) has bit 8 set but is known: a well-formed one (8
        // octets) is accepted, a short one is malformed rather than unknown.
        let mut short_pdcp = b.clone();
        short_pdcp[11] = 0x82;
        assert_eq!(GtpuRepr::parse(&GtpuPacket::new_checked(&short_pdcp[..]).unwrap()).unwrap_err(), GtpuError::BadExtension);
        let long_pdcp = [0x34, 255, 0, 16, 0, 0, 0, 7, 0, 0, 0, 0x82, 2, 0x01, 0x02, 0x03, 0, 0, 0, 0, 0x45, 0, 0, 0];
        let r = GtpuRepr::parse(&GtpuPacket::new_checked(&long_pdcp[..]).unwrap()).unwrap();
        assert_eq!((r.teid, r.payload_len), (Teid(7), 4));
        let mut req = b.clone();
        req[11] = 0x8f;
        assert_eq!(GtpuRepr::parse(&GtpuPacket::new_checked(&req[..]).unwrap()).unwrap_err(), GtpuError::UnknownRequiredExtension);
        let mut long = b.clone();
        long[3] = 200;
        assert_eq!(GtpuPacket::new_checked(&long[..]).unwrap_err(), GtpuError::Truncated);
        assert!(Qfi::new(64).is_none());
    }
}
