//! The PFCP message header (TS 29.244 §7.2.2).
//!
//! ```text
//!  octet 1                  2        3-4      [5-12 if S]  then      then
//! +-------+----+--+--+-+ +------+ +--------+ +----------+ +--------+ +--------------+
//! |version|spare|FO|MP|S| | type | | length | |   SEID   | | seq(3) | | prio<<4 / 0  |
//! +-------+----+--+--+-+ +------+ +--------+ +----------+ +--------+ +--------------+
//! ```
//! `length` counts the octets after the first four. Node messages have S = 0, session
//! messages S = 1 (the SEID is the receiver's). MP = 1 puts a 4-bit priority in the high
//! half of the octet after the sequence number. FO = 1 says another message follows in the
//! same datagram (bundling, not offered: we read the first and say so).

use crate::Error;

pub const VERSION: u8 = 1;
/// Header without the SEID (node messages).
pub const NODE_HEADER_LEN: usize = 8;
/// Header with the SEID (session messages).
pub const SESSION_HEADER_LEN: usize = 16;

const FLAG_FO: u8 = 0x04;
const FLAG_MP: u8 = 0x02;
const FLAG_S: u8 = 0x01;
/// The sequence number is 24 bits.
pub const MAX_SEQ: u32 = 0x00ff_ffff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    HeartbeatRequest,
    HeartbeatResponse,
    PfdManagementRequest,
    PfdManagementResponse,
    AssociationSetupRequest,
    AssociationSetupResponse,
    AssociationUpdateRequest,
    AssociationUpdateResponse,
    AssociationReleaseRequest,
    AssociationReleaseResponse,
    VersionNotSupportedResponse,
    NodeReportRequest,
    NodeReportResponse,
    SessionSetDeletionRequest,
    SessionSetDeletionResponse,
    SessionEstablishmentRequest,
    SessionEstablishmentResponse,
    SessionModificationRequest,
    SessionModificationResponse,
    SessionDeletionRequest,
    SessionDeletionResponse,
    SessionReportRequest,
    SessionReportResponse,
    Unknown(u8),
}

impl From<u8> for MessageType {
    fn from(v: u8) -> Self {
        use MessageType::*;
        match v {
            1 => HeartbeatRequest,
            2 => HeartbeatResponse,
            3 => PfdManagementRequest,
            4 => PfdManagementResponse,
            5 => AssociationSetupRequest,
            6 => AssociationSetupResponse,
            7 => AssociationUpdateRequest,
            8 => AssociationUpdateResponse,
            9 => AssociationReleaseRequest,
            10 => AssociationReleaseResponse,
            11 => VersionNotSupportedResponse,
            12 => NodeReportRequest,
            13 => NodeReportResponse,
            14 => SessionSetDeletionRequest,
            15 => SessionSetDeletionResponse,
            50 => SessionEstablishmentRequest,
            51 => SessionEstablishmentResponse,
            52 => SessionModificationRequest,
            53 => SessionModificationResponse,
            54 => SessionDeletionRequest,
            55 => SessionDeletionResponse,
            56 => SessionReportRequest,
            57 => SessionReportResponse,
            o => Unknown(o),
        }
    }
}

impl From<MessageType> for u8 {
    fn from(v: MessageType) -> u8 {
        use MessageType::*;
        match v {
            HeartbeatRequest => 1,
            HeartbeatResponse => 2,
            PfdManagementRequest => 3,
            PfdManagementResponse => 4,
            AssociationSetupRequest => 5,
            AssociationSetupResponse => 6,
            AssociationUpdateRequest => 7,
            AssociationUpdateResponse => 8,
            AssociationReleaseRequest => 9,
            AssociationReleaseResponse => 10,
            VersionNotSupportedResponse => 11,
            NodeReportRequest => 12,
            NodeReportResponse => 13,
            SessionSetDeletionRequest => 14,
            SessionSetDeletionResponse => 15,
            SessionEstablishmentRequest => 50,
            SessionEstablishmentResponse => 51,
            SessionModificationRequest => 52,
            SessionModificationResponse => 53,
            SessionDeletionRequest => 54,
            SessionDeletionResponse => 55,
            SessionReportRequest => 56,
            SessionReportResponse => 57,
            Unknown(o) => o,
        }
    }
}

impl MessageType {
    /// Node requests are odd (1, 3, … 13; 11 is Version Not Supported, a response),
    /// session requests even (50, 52, 54, 56).
    pub fn is_request(self) -> bool {
        let v = u8::from(self);
        if v >= 50 {
            v % 2 == 0
        } else {
            v % 2 == 1 && v != 11
        }
    }
    /// Session messages (50..=99) carry a SEID in their header.
    pub fn is_session(self) -> bool {
        (50..100).contains(&u8::from(self))
    }
}

/// A parsed header. `seid` is `Some` exactly when S = 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub msg_type: MessageType,
    pub seid: Option<u64>,
    /// 24 bits.
    pub seq: u32,
    /// Message priority (MP = 1), 4 bits.
    pub priority: Option<u8>,
    /// FO: another message follows in the same datagram.
    pub follow_on: bool,
}

impl Header {
    pub fn node(msg_type: MessageType, seq: u32) -> Header {
        Header { msg_type, seid: None, seq: seq & MAX_SEQ, priority: None, follow_on: false }
    }
    pub fn session(msg_type: MessageType, seid: u64, seq: u32) -> Header {
        Header { msg_type, seid: Some(seid), seq: seq & MAX_SEQ, priority: None, follow_on: false }
    }

    pub fn header_len(&self) -> usize {
        if self.seid.is_some() {
            SESSION_HEADER_LEN
        } else {
            NODE_HEADER_LEN
        }
    }

    /// Reads the header and returns it with the message body (the IEs), cut to the length
    /// field. The version is checked before anything else so that a peer speaking another
    /// version can be answered with Version Not Supported.
    pub fn parse(data: &[u8]) -> Result<(Header, &[u8]), Error> {
        if data.len() < 4 {
            return Err(Error::Truncated);
        }
        let version = data[0] >> 5;
        if version != VERSION {
            return Err(Error::Version(version));
        }
        let s = data[0] & FLAG_S != 0;
        let mp = data[0] & FLAG_MP != 0;
        let header_len = if s { SESSION_HEADER_LEN } else { NODE_HEADER_LEN };
        let total = 4 + usize::from(u16::from_be_bytes([data[2], data[3]]));
        if total < header_len || data.len() < total {
            return Err(Error::Truncated);
        }
        let mut at = 4;
        let seid = if s {
            at += 8;
            Some(u64::from_be_bytes(data[4..12].try_into().expect("8 bytes")))
        } else {
            None
        };
        let seq = u32::from_be_bytes([0, data[at], data[at + 1], data[at + 2]]);
        let priority = mp.then_some(data[at + 3] >> 4);
        let h = Header { msg_type: MessageType::from(data[1]), seid, seq, priority, follow_on: data[0] & FLAG_FO != 0 };
        Ok((h, &data[header_len..total]))
    }

    /// Appends the header with a zero length; [`Header::finish`] patches it once the
    /// body is written.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut flags = VERSION << 5;
        if self.follow_on {
            flags |= FLAG_FO;
        }
        if self.priority.is_some() {
            flags |= FLAG_MP;
        }
        if self.seid.is_some() {
            flags |= FLAG_S;
        }
        out.extend_from_slice(&[flags, self.msg_type.into(), 0, 0]);
        if let Some(seid) = self.seid {
            out.extend_from_slice(&seid.to_be_bytes());
        }
        out.extend_from_slice(&(self.seq & MAX_SEQ).to_be_bytes()[1..]);
        out.push(self.priority.map_or(0, |p| (p & 0x0f) << 4));
    }

    /// Writes the length of the message that starts at `start` in `out`.
    pub fn finish(out: &mut [u8], start: usize) {
        let len = u16::try_from(out.len() - start - 4).unwrap_or(u16::MAX);
        out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_header_with_priority_round_trips() {
        let h = Header { priority: Some(7), ..Header::session(MessageType::SessionReportRequest, 0x0102_0304_0506_0708, 0xabcdef) };
        let mut b = Vec::new();
        h.emit(&mut b);
        b.extend_from_slice(&[0, 19, 0, 1, 1]);
        Header::finish(&mut b, 0);
        assert_eq!(b[0], 0x23);
        assert_eq!(&b[2..4], &[0, 17]);
        let (p, body) = Header::parse(&b).unwrap();
        assert_eq!(p, h);
        assert_eq!(body, &[0, 19, 0, 1, 1]);
    }

    #[test]
    fn requests_and_responses_by_type() {
        use MessageType::*;
        for t in [
            HeartbeatRequest,
            AssociationSetupRequest,
            AssociationReleaseRequest,
            SessionEstablishmentRequest,
            SessionDeletionRequest,
            SessionReportRequest,
        ] {
            assert!(t.is_request(), "{t:?}");
        }
        for t in [HeartbeatResponse, VersionNotSupportedResponse, SessionEstablishmentResponse, SessionReportResponse] {
            assert!(!t.is_request(), "{t:?}");
        }
    }

    #[test]
    fn short_or_overlong_or_wrong_version_rejected() {
        let mut b = Vec::new();
        Header::node(MessageType::HeartbeatRequest, 1).emit(&mut b);
        Header::finish(&mut b, 0);
        assert!(Header::parse(&b).is_ok());
        for n in 0..b.len() {
            assert_eq!(Header::parse(&b[..n]), Err(Error::Truncated), "{n}");
        }
        let mut long = b.clone();
        long[3] = 9;
        assert_eq!(Header::parse(&long), Err(Error::Truncated));
        let mut v2 = b.clone();
        v2[0] = 0x40;
        assert_eq!(Header::parse(&v2), Err(Error::Version(2)));
        // S = 1 with only the node header's length.
        let mut s = b.clone();
        s[0] |= 1;
        assert_eq!(Header::parse(&s), Err(Error::Truncated));
    }
}
