//! IPv6 extension headers (RFC 8200 §4): hop-by-hop and destination options, routing,
//! fragment, and a bounded walk of the chain to the upper-layer header.
//!
//! Options header (hop-by-hop, destination options):
//! ```text
//! | Next Header | Hdr Ext Len | options ... (8 + 8 * Hdr Ext Len bytes in all)
//! ```
//! Routing header: `| Next Header | Hdr Ext Len | Routing Type | Segments Left | data |`
//! Fragment header: `| Next Header | 0 | Fragment Offset (13) |Res|M| Identification (32) |`

use crate::ip::IpProtocol;

pub const FRAGMENT_HEADER_LEN: usize = 8;
/// The most extension headers vecgate walks before giving up (bounds the work an
/// attacker can make a node do; RFC 8200 expects at most a handful).
pub const MAX_CHAIN: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ipv6ExtError {
    #[error("extension header runs past the packet")]
    Truncated,
    #[error("option length runs past its header")]
    BadOption,
    #[error("more than {MAX_CHAIN} extension headers")]
    ChainTooLong,
    #[error("hop-by-hop header not first")]
    HopByHopNotFirst,
}

/// A generic extension header: next header and total length in bytes.
#[derive(Debug, Clone)]
pub struct ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// Checks the first two bytes and that the whole header (8 * (len + 1)) fits.
    pub fn new_checked(buffer: T) -> Result<Self, Ipv6ExtError> {
        let b = buffer.as_ref();
        if b.len() < 8 {
            return Err(Ipv6ExtError::Truncated);
        }
        let len = (b[1] as usize + 1) * 8;
        if len > b.len() {
            return Err(Ipv6ExtError::Truncated);
        }
        Ok(ExtHeader { buffer })
    }
    pub fn next_header(&self) -> IpProtocol {
        self.buffer.as_ref()[0].into()
    }
    /// Total length in bytes.
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[1] as usize + 1) * 8
    }
    /// For options headers: the TLV area.
    pub fn options(&self) -> Ipv6Options<'_> {
        Ipv6Options { data: &self.buffer.as_ref()[2..self.header_len()], pos: 2 }
    }
    /// For a routing header: (routing type, segments left).
    pub fn routing(&self) -> (u8, u8) {
        let b = self.buffer.as_ref();
        (b[2], b[3])
    }
}

/// What to do with an unrecognised option (the top two bits of its type, §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionAction {
    Skip,
    Discard,
    DiscardSendIcmp,
    DiscardSendIcmpUnlessMulticast,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Option<'a> {
    pub kind: u8,
    pub data: &'a [u8],
    /// Offset of the type octet within the extension header, for ICMP
    /// parameter-problem pointers.
    pub offset: usize,
}

impl Ipv6Option<'_> {
    pub const PAD1: u8 = 0;
    pub const PADN: u8 = 1;
    pub const ROUTER_ALERT: u8 = 5;
    pub const JUMBO: u8 = 0xc2;

    pub fn action(&self) -> OptionAction {
        match self.kind >> 6 {
            0 => OptionAction::Skip,
            1 => OptionAction::Discard,
            2 => OptionAction::DiscardSendIcmp,
            _ => OptionAction::DiscardSendIcmpUnlessMulticast,
        }
    }
}

/// TLV options, padding skipped; an option running past the header yields one error.
pub struct Ipv6Options<'a> {
    data: &'a [u8],
    /// Offset of `data[0]` within the extension header.
    pos: usize,
}

impl<'a> Iterator for Ipv6Options<'a> {
    type Item = Result<Ipv6Option<'a>, Ipv6ExtError>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (&kind, rest) = self.data.split_first()?;
            if kind == Ipv6Option::PAD1 {
                self.data = rest;
                self.pos += 1;
                continue;
            }
            let Some(&len) = rest.first() else {
                self.data = &[];
                return Some(Err(Ipv6ExtError::BadOption));
            };
            let len = len as usize;
            if 2 + len > self.data.len() {
                self.data = &[];
                return Some(Err(Ipv6ExtError::BadOption));
            }
            let opt = Ipv6Option { kind, data: &self.data[2..2 + len], offset: self.pos };
            self.data = &self.data[2 + len..];
            self.pos += 2 + len;
            if kind == Ipv6Option::PADN {
                continue;
            }
            return Some(Ok(opt));
        }
    }
}

/// A fragment header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentRepr {
    pub next_header: IpProtocol,
    /// Offset in bytes (a multiple of 8).
    pub offset: u16,
    pub more: bool,
    pub ident: u32,
}

impl FragmentRepr {
    pub fn parse(b: &[u8]) -> Result<Self, Ipv6ExtError> {
        if b.len() < FRAGMENT_HEADER_LEN {
            return Err(Ipv6ExtError::Truncated);
        }
        let off = crate::be16(b, 2);
        Ok(FragmentRepr { next_header: b[0].into(), offset: off & 0xfff8, more: off & 1 != 0, ident: crate::be32(b, 4) })
    }
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.next_header.into();
        b[1] = 0;
        crate::put16(b, 2, (self.offset & 0xfff8) | self.more as u16);
        crate::put32(b, 4, self.ident);
    }
}

/// Skip the extension headers of `over` that follow the fixed header of the IPv6 packet
/// `b`: the offset of the first header that is not one of them, and the position of the
/// next-header field that names it (6, in the fixed header, when none was skipped).
/// `None` when a skipped header runs past the packet.
pub fn skip_headers(b: &[u8], over: &[IpProtocol]) -> Option<(usize, usize)> {
    let (mut off, mut nh_at) = (40, 6);
    while over.contains(&IpProtocol::from(*b.get(nh_at)?)) {
        let len = (*b.get(off + 1)? as usize + 1) * 8;
        nh_at = off;
        off += len;
    }
    (off <= b.len()).then_some((off, nh_at))
}

/// The result of walking an extension-header chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainInfo {
    /// The first header that is not a walked extension header.
    pub upper: Option<IpProtocol>,
    /// Offset of `upper`'s header from the start of the IPv6 payload.
    pub upper_offset: usize,
    pub hop_by_hop: bool,
    /// Jumbo payload length from the hop-by-hop jumbo option, if present.
    pub jumbo_len: Option<u32>,
    pub fragment: Option<FragmentRepr>,
    /// Routing type and segments left of the first routing header.
    pub routing: Option<(u8, u8)>,
    /// An option whose type says "discard" was found: (offset of the option's type
    /// octet from the start of the payload, action).
    pub unknown_option: Option<(usize, OptionAction)>,
}

fn is_extension(p: IpProtocol) -> bool {
    matches!(p, IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Frag | IpProtocol::Ipv6Opts)
}

/// Walk the chain starting with `first` over `payload` (the bytes after the fixed IPv6
/// header). Stops at the first non-extension header, at a non-first fragment (whose
/// upper header is not present), or with an error. Bounded by `MAX_CHAIN`.
pub fn walk_chain(first: IpProtocol, payload: &[u8]) -> Result<ChainInfo, Ipv6ExtError> {
    let mut info = ChainInfo::default();
    let mut nh = first;
    let mut off = 0usize;
    for i in 0..=MAX_CHAIN {
        if !is_extension(nh) {
            info.upper = Some(nh);
            info.upper_offset = off;
            return Ok(info);
        }
        if i == MAX_CHAIN {
            break;
        }
        let rest = payload.get(off..).ok_or(Ipv6ExtError::Truncated)?;
        match nh {
            IpProtocol::Ipv6Frag => {
                let f = FragmentRepr::parse(rest)?;
                info.fragment = Some(f);
                off += FRAGMENT_HEADER_LEN;
                nh = f.next_header;
                if f.offset != 0 {
                    // Later fragments carry no upper-layer header.
                    info.upper = None;
                    info.upper_offset = off;
                    return Ok(info);
                }
            }
            _ => {
                let h = ExtHeader::new_checked(rest)?;
                match nh {
                    IpProtocol::HopByHop => {
                        if i != 0 {
                            return Err(Ipv6ExtError::HopByHopNotFirst);
                        }
                        info.hop_by_hop = true;
                        scan_options(&h, off, &mut info)?;
                    }
                    IpProtocol::Ipv6Opts => scan_options(&h, off, &mut info)?,
                    _ => {
                        if info.routing.is_none() {
                            info.routing = Some(h.routing());
                        }
                    }
                }
                off += h.header_len();
                nh = h.next_header();
            }
        }
    }
    Err(Ipv6ExtError::ChainTooLong)
}

fn scan_options<T: AsRef<[u8]>>(h: &ExtHeader<T>, base: usize, info: &mut ChainInfo) -> Result<(), Ipv6ExtError> {
    for o in h.options() {
        let o = o?;
        match o.kind {
            Ipv6Option::ROUTER_ALERT => {}
            Ipv6Option::JUMBO if o.data.len() == 4 => {
                info.jumbo_len = Some(u32::from_be_bytes([o.data[0], o.data[1], o.data[2], o.data[3]]));
            }
            _ => {
                let action = o.action();
                if action != OptionAction::Skip && info.unknown_option.is_none() {
                    info.unknown_option = Some((base + o.offset, action));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_hbh_dest_frag_to_udp() {
        let mut p = vec![0u8; 40];
        // HBH: next = dest opts (60), len 0, PadN(4 bytes of pad)
        p[0] = 60;
        p[1] = 0;
        p[2] = 1;
        p[3] = 4;
        // Dest opts: next = fragment (44), len 0, unknown option 0x87 (discard+icmp), len 4
        p[8] = 44;
        p[9] = 0;
        p[10] = 0x87;
        p[11] = 4;
        // Fragment header, first fragment, next = UDP
        FragmentRepr { next_header: IpProtocol::Udp, offset: 0, more: true, ident: 9 }.emit(&mut p[16..24]);
        let info = walk_chain(IpProtocol::HopByHop, &p).unwrap();
        assert_eq!(info.upper, Some(IpProtocol::Udp));
        assert_eq!(info.upper_offset, 24);
        assert!(info.hop_by_hop);
        assert_eq!(info.fragment.unwrap().ident, 9);
        assert_eq!(info.unknown_option, Some((10, OptionAction::DiscardSendIcmp)));
    }

    #[test]
    fn errors_are_typed() {
        // Header length claims 16 bytes, only 8 present.
        let p = [17u8, 1, 0, 0, 0, 0, 0, 0];
        assert_eq!(walk_chain(IpProtocol::Ipv6Opts, &p), Err(Ipv6ExtError::Truncated));
        // Option length runs past the header.
        let q = [17u8, 0, 0x22, 9, 0, 0, 0, 0];
        assert_eq!(walk_chain(IpProtocol::Ipv6Opts, &q), Err(Ipv6ExtError::BadOption));
        // Hop-by-hop in second place.
        let r = [0u8, 0, 1, 4, 0, 0, 0, 0, 17, 0, 1, 4, 0, 0, 0, 0];
        assert_eq!(walk_chain(IpProtocol::Ipv6Opts, &r), Err(Ipv6ExtError::HopByHopNotFirst));
        // A loop of destination-options headers is cut off.
        let mut s = vec![0u8; 8 * 12];
        for i in 0..12 {
            s[i * 8] = 60;
            s[i * 8 + 2] = 1;
            s[i * 8 + 3] = 4;
        }
        assert_eq!(walk_chain(IpProtocol::Ipv6Opts, &s), Err(Ipv6ExtError::ChainTooLong));
    }

    proptest::proptest! {
        #[test]
        fn fragment_roundtrip(nh: u8, off in 0u16..8192, more: bool, ident: u32) {
            let r = FragmentRepr { next_header: nh.into(), offset: off << 3, more, ident };
            let mut b = [0u8; FRAGMENT_HEADER_LEN];
            r.emit(&mut b);
            proptest::prop_assert_eq!(FragmentRepr::parse(&b).unwrap(), r);
        }

        #[test]
        fn walk_never_panics(first: u8, data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96)) {
            if let Ok(info) = walk_chain(first.into(), &data) {
                proptest::prop_assert!(info.upper_offset <= data.len());
            }
        }
    }

    #[test]
    fn later_fragment_has_no_upper() {
        let mut p = [0u8; 16];
        FragmentRepr { next_header: IpProtocol::Udp, offset: 1448, more: false, ident: 1 }.emit(&mut p);
        let info = walk_chain(IpProtocol::Ipv6Frag, &p).unwrap();
        assert_eq!(info.upper, None);
        assert_eq!(info.fragment.unwrap().offset, 1448);
    }
}
