//! GTP-U path-management messages the gateway sends and reads (TS 29.281 §7), as pure
//! functions over bytes: no buffers, no sockets, testable against scapy on their own.

use std::net::IpAddr;
use wire::gtpu::{GtpuRepr, MessageType, Teid};

/// Information element types (TS 29.281 §8).
pub mod ie {
    /// Recovery: TV, one byte (the restart counter; GTP-U sets it to 0, §8.2).
    pub const RECOVERY: u8 = 14;
    /// Tunnel Endpoint Identifier Data I: TV, four bytes.
    pub const TEID_DATA_I: u8 = 16;
    /// GTP-U Peer Address: TLV, an IPv4 or IPv6 address.
    pub const PEER_ADDRESS: u8 = 133;
    /// Extension Header Type List: type, count, then the types.
    pub const EXTENSION_HEADER_TYPE_LIST: u8 = 141;
}

/// The extension header types vecgate understands, for the Supported Extension Headers
/// Notification.
pub const SUPPORTED_EXTENSIONS: [u8; 4] = [
    wire::gtpu::ext::UDP_PORT,
    wire::gtpu::ext::LONG_PDCP_PDU_NUMBER,
    wire::gtpu::ext::PDU_SESSION_CONTAINER,
    wire::gtpu::ext::PDCP_PDU_NUMBER,
];

/// The longest message built here.
pub const MAX_MESSAGE: usize = 64;

fn emit(repr: GtpuRepr, ies: &[u8], out: &mut [u8; MAX_MESSAGE]) -> usize {
    let hl = repr.header_len();
    repr.emit(&mut out[..hl]);
    out[hl..hl + ies.len()].copy_from_slice(ies);
    hl + ies.len()
}

fn signalling(msg_type: MessageType, seq: u16, udp_port: Option<u16>, payload_len: usize) -> GtpuRepr {
    // §5.1: S is 1 for Echo, Error Indication and the Notification; the TEID is 0.
    GtpuRepr { msg_type, teid: Teid(0), seq: Some(seq), npdu: None, pdu_session: None, udp_port, pdcp_number: None, payload_len }
}

/// Echo Response to an Echo Request with sequence number `seq` (§7.2.2).
pub fn echo_response(seq: u16, out: &mut [u8; MAX_MESSAGE]) -> usize {
    let ies = [ie::RECOVERY, 0];
    emit(signalling(MessageType::EchoResponse, seq, None, ies.len()), &ies, out)
}

/// Error Indication for a G-PDU with `teid` that reached our address `ours` from UDP
/// source port `src_port` (§7.3.1; the UDP Port extension carries that port, §5.2.2.1).
pub fn error_indication(teid: u32, ours: IpAddr, src_port: u16, out: &mut [u8; MAX_MESSAGE]) -> usize {
    let mut ies = [0u8; 5 + 3 + 16];
    ies[0] = ie::TEID_DATA_I;
    ies[1..5].copy_from_slice(&teid.to_be_bytes());
    ies[5] = ie::PEER_ADDRESS;
    let n = match ours {
        IpAddr::V4(a) => {
            ies[8..12].copy_from_slice(&a.octets());
            4
        }
        IpAddr::V6(a) => {
            ies[8..24].copy_from_slice(&a.octets());
            16
        }
    };
    ies[6..8].copy_from_slice(&(n as u16).to_be_bytes());
    let len = 8 + n;
    emit(signalling(MessageType::ErrorIndication, 0, Some(src_port), len), &ies[..len], out)
}

/// Supported Extension Headers Notification (§7.2.3), sent when a peer's packet had an
/// extension header we do not understand and must (comprehension required).
pub fn supported_extensions(seq: u16, out: &mut [u8; MAX_MESSAGE]) -> usize {
    let mut ies = [0u8; 2 + SUPPORTED_EXTENSIONS.len()];
    ies[0] = ie::EXTENSION_HEADER_TYPE_LIST;
    ies[1] = SUPPORTED_EXTENSIONS.len() as u8;
    ies[2..].copy_from_slice(&SUPPORTED_EXTENSIONS);
    emit(signalling(MessageType::SupportedExtensionHeadersNotification, seq, None, ies.len()), &ies, out)
}

/// The TEID and peer address of a received Error Indication's IEs.
pub fn parse_error_indication(ies: &[u8]) -> Option<(u32, IpAddr)> {
    let mut teid = None;
    let mut peer = None;
    let mut i = 0;
    while i < ies.len() {
        match ies[i] {
            ie::TEID_DATA_I => {
                let v = ies.get(i + 1..i + 5)?;
                teid = Some(u32::from_be_bytes([v[0], v[1], v[2], v[3]]));
                i += 5;
            }
            ie::RECOVERY => i += 2,
            t if t >= 128 => {
                let l = ies.get(i + 1..i + 3)?;
                let n = u16::from_be_bytes([l[0], l[1]]) as usize;
                let v = ies.get(i + 3..i + 3 + n)?;
                if t == ie::PEER_ADDRESS {
                    peer = match n {
                        4 => Some(IpAddr::from(<[u8; 4]>::try_from(v).ok()?)),
                        16 => Some(IpAddr::from(<[u8; 16]>::try_from(v).ok()?)),
                        _ => return None,
                    };
                }
                i += 3 + n;
            }
            _ => return None,
        }
    }
    Some((teid?, peer?))
}

/// The Recovery IE of an Echo Response, if present.
pub fn parse_recovery(ies: &[u8]) -> Option<u8> {
    match ies {
        [ie::RECOVERY, v, ..] => Some(*v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::gtpu::GtpuPacket;

    #[test]
    fn error_indication_round_trips() {
        let mut out = [0u8; MAX_MESSAGE];
        let ours: IpAddr = "2001:db8::1".parse().unwrap();
        let n = error_indication(0xdead_beef, ours, 40000, &mut out);
        let p = GtpuPacket::new_checked(&out[..n]).unwrap();
        let r = GtpuRepr::parse(&p).unwrap();
        assert_eq!(r.msg_type, MessageType::ErrorIndication);
        assert_eq!(r.teid, Teid(0));
        assert_eq!(r.udp_port, Some(40000));
        let ies = &out[n - r.payload_len..n];
        assert_eq!(parse_error_indication(ies), Some((0xdead_beef, ours)));
    }

    #[test]
    fn echo_response_carries_seq_and_recovery() {
        let mut out = [0u8; MAX_MESSAGE];
        let n = echo_response(77, &mut out);
        let p = GtpuPacket::new_checked(&out[..n]).unwrap();
        assert_eq!(p.seq(), Some(77));
        assert_eq!(p.msg_type(), MessageType::EchoResponse);
        assert_eq!(parse_recovery(&out[12..n]), Some(0));
    }

    #[test]
    fn truncated_ies_are_rejected() {
        assert_eq!(parse_error_indication(&[ie::TEID_DATA_I, 1, 2]), None);
        assert_eq!(parse_error_indication(&[ie::PEER_ADDRESS, 0, 4, 1]), None);
        assert_eq!(parse_error_indication(&[7]), None);
    }
}
