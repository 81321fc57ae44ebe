//! Bodies of the fuzz targets, one per parser. They live here (not in `fuzz/`) so that
//! the stable test suite replays the committed corpus through exactly the code
//! cargo-fuzz runs. Each checks an invariant beyond "does not panic": whatever parses
//! must emit back to bytes that parse to the same representation.

use crate::*;

pub fn ethernet(data: &[u8]) {
    if let Ok(f) = ethernet::EthernetFrame::new_checked(data) {
        let r = ethernet::EthernetRepr::parse(&f).unwrap();
        let b = r.to_bytes();
        assert_eq!(b[..], data[..ethernet::HEADER_LEN]);
        if let EtherType::Vlan | EtherType::QinQ = r.ethertype {
            if let Ok(t) = vlan::VlanTag::new_checked(f.payload()) {
                let _ = vlan::VlanRepr::parse(&t);
            }
        }
    }
}

pub fn arp(data: &[u8]) {
    if let Ok(p) = arp::ArpPacket::new_checked(data) {
        let r = arp::ArpRepr::parse(&p).unwrap();
        let mut b = [0u8; arp::PACKET_LEN];
        r.emit(&mut b);
        assert_eq!(b[..], data[..arp::PACKET_LEN]);
    }
}

pub fn ipv4(data: &[u8]) {
    let Ok(p) = ipv4::Ipv4Packet::new_checked(data) else {
        return;
    };
    assert!(p.header_len() <= p.total_len() && p.total_len() <= data.len());
    let _ = p.payload();
    if let Ok(r) = ipv4::Ipv4Repr::parse(&p) {
        let mut b = vec![0u8; r.buffer_len() + r.payload_len];
        r.emit(&mut ipv4::Ipv4Packet::new_unchecked(&mut b[..]));
        let q = ipv4::Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(ipv4::Ipv4Repr::parse(&q).unwrap(), r);
    }
}

pub fn ipv6(data: &[u8]) {
    let Ok(p) = ipv6::Ipv6Packet::new_checked(data) else {
        return;
    };
    let payload = p.payload();
    let _ = ipv6_ext::walk_chain(p.next_header(), payload).map(|info| {
        assert!(info.upper_offset <= payload.len());
    });
    if let Ok(r) = ipv6::Ipv6Repr::parse(&p) {
        let mut b = vec![0u8; r.buffer_len() + r.payload_len];
        r.emit(&mut ipv6::Ipv6Packet::new_unchecked(&mut b[..]));
        assert_eq!(ipv6::Ipv6Repr::parse(&ipv6::Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
    }
}

pub fn icmpv4(data: &[u8]) {
    let Ok(p) = icmpv4::Icmpv4Packet::new_checked(data) else {
        return;
    };
    if let Ok(r) = icmpv4::Icmpv4Repr::parse(&p) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        // Byte-identical except the checksum, where one's complement has two zeros
        // (0x0000 and 0xffff both verify); ours must verify too.
        assert_eq!(b[..2], data[..2]);
        assert_eq!(b[4..], data[4..]);
        assert!(icmpv4::Icmpv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
    }
}

pub fn icmpv6(data: &[u8]) {
    let src: core::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
    let dst: core::net::Ipv6Addr = "2001:db8::2".parse().unwrap();
    let Ok(p) = icmpv6::Icmpv6Packet::new_checked(data) else {
        return;
    };
    if let Ok(r) = icmpv6::Icmpv6Repr::parse(&p, &src, &dst, 255) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b, &src, &dst);
        let q = icmpv6::Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(icmpv6::Icmpv6Repr::parse(&q, &src, &dst, 255).unwrap(), r);
    }
}

pub fn udp(data: &[u8]) {
    let Ok(p) = udp::UdpPacket::new_checked(data) else {
        return;
    };
    assert!(p.len() <= data.len());
    let r = udp::UdpRepr::parse(&p).unwrap();
    let mut b = vec![0u8; p.len()];
    b[udp::HEADER_LEN..].copy_from_slice(p.payload());
    let mut q = udp::UdpPacket::new_unchecked(&mut b[..]);
    r.emit(&mut q, p.payload().len());
    q.fill_checksum_v4([198, 18, 0, 1].into(), [198, 18, 0, 2].into());
    let q = udp::UdpPacket::new_checked(&b[..]).unwrap();
    assert!(q.verify_checksum_v4([198, 18, 0, 1].into(), [198, 18, 0, 2].into()));
}

pub fn tcp(data: &[u8]) {
    let Ok(p) = tcp::TcpPacket::new_checked(data) else {
        return;
    };
    if let Ok(r) = tcp::TcpRepr::parse(&p) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut tcp::TcpPacket::new_unchecked(&mut b[..]));
        assert_eq!(tcp::TcpRepr::parse(&tcp::TcpPacket::new_checked(&b[..]).unwrap()).unwrap(), r);
    }
}

/// SCTP: whatever header and chunks parse emit back to a packet that parses to the same
/// header and chunks, and whose filled CRC32c verifies; a packet that verified as it came
/// is byte for byte what we emit when its padding was zero.
pub fn sctp(data: &[u8]) {
    let Ok(p) = sctp::SctpPacket::new_checked(data) else { return };
    let r = sctp::SctpRepr::parse(&p).unwrap();
    let Ok(chunks) = p.chunks().collect::<Result<Vec<_>, _>>() else {
        assert!(p.chunk_set().is_err());
        return;
    };
    let set = p.chunk_set().unwrap();
    let len = sctp::HEADER_LEN + chunks.iter().map(|c| sctp::chunk_buffer_len(c.value.len())).sum::<usize>();
    let mut b = vec![0u8; len];
    let mut q = sctp::SctpPacket::new_unchecked(&mut b[..]);
    r.emit(&mut q);
    let mut at = 0;
    for c in &chunks {
        at += sctp::emit_chunk(&mut q.payload_mut()[at..], c.chunk_type, c.flags, c.value).unwrap();
    }
    q.fill_checksum();
    let q = sctp::SctpPacket::new_checked(&b[..]).unwrap();
    assert!(q.verify_checksum());
    assert_eq!(sctp::SctpRepr::parse(&q).unwrap(), r);
    assert_eq!(q.chunks().collect::<Result<Vec<_>, _>>().unwrap(), chunks);
    assert_eq!(q.chunk_set().unwrap(), set);
    if p.verify_checksum() && b.len() == data.len() && b[sctp::HEADER_LEN..] == data[sctp::HEADER_LEN..] {
        assert_eq!(b[..], data[..]);
    }
    // Multi-homing removed from the INITs and INIT ACKs (the load balancer's NAT: their
    // addresses, ASCONF among their Supported Extensions): unchanged on an error; else
    // the same chunks in order, each well formed, none listing an address or ASCONF, and
    // the packet changed exactly when there was something to remove.
    let mut cut = data.to_vec();
    match sctp::remove_multihoming(&mut cut[sctp::HEADER_LEN..]) {
        Err(e) => {
            assert_eq!(cut, data);
            assert_eq!(sctp::count_multihoming(&data[sctp::HEADER_LEN..]), Err(e));
        }
        Ok(r) => {
            let cut = &cut[..sctp::HEADER_LEN + r.len];
            assert_eq!(sctp::count_multihoming(&cut[sctp::HEADER_LEN..]), Ok(sctp::Multihoming::default()));
            assert_eq!(sctp::count_multihoming(&data[sctp::HEADER_LEN..]), Ok(r.removed));
            let q = sctp::SctpPacket::new_checked(cut).unwrap();
            let after = q.chunks().collect::<Result<Vec<_>, _>>().unwrap();
            let types = |cs: &[sctp::Chunk<'_>]| cs.iter().map(|c| (c.chunk_type, c.flags)).collect::<Vec<_>>();
            assert_eq!(types(&after), types(&chunks));
            assert_eq!(r.removed.is_none(), cut == data);
        }
    }
}

pub fn gtpu(data: &[u8]) {
    let Ok(p) = gtpu::GtpuPacket::new_checked(data) else { return };
    if let Ok(r) = gtpu::GtpuRepr::parse(&p) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        let q = gtpu::GtpuPacket::new_checked(&b[..]).unwrap();
        let r2 = gtpu::GtpuRepr::parse(&q).unwrap();
        assert_eq!((r2.msg_type, r2.teid, r2.pdu_session, r2.payload_len), (r.msg_type, r.teid, r.pdu_session, r.payload_len));
    }
}

pub fn gue(data: &[u8]) {
    let Ok(p) = gue::GuePacket::new_checked(data) else { return };
    assert!(p.header_len() <= data.len());
    if let Ok(r) = gue::GueRepr::parse(&p) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        let q = gue::GuePacket::new_checked(&b[..]).unwrap();
        assert_eq!(gue::GueRepr::parse(&q).unwrap(), r);
    }
}

pub fn gre(data: &[u8]) {
    let Ok(p) = gre::GrePacket::new_checked(data) else { return };
    if let Ok(r) = gre::GreRepr::parse(&p) {
        let payload = p.payload();
        let mut b = vec![0u8; r.buffer_len() + payload.len()];
        r.emit(&mut b);
        b[r.buffer_len()..].copy_from_slice(payload);
        if r.checksum {
            gre::GreRepr::fill_checksum(&mut b);
        }
        let q = gre::GrePacket::new_checked(&b[..]).unwrap();
        assert_eq!(gre::GreRepr::parse(&q).unwrap(), r);
        assert_eq!(q.payload(), payload);
    }
}

pub fn parcel(data: &[u8]) {
    use parcel::*;
    if let Ok(p) = Parcel4::new_checked(data) {
        let _ = (p.verify_udp_checksum(), (0..p.segment_count()).all(|i| p.verify_segment(i)));
        let r = Parcel4Repr::parse(&p);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        let at = p.segment_offset(0);
        b[at..].copy_from_slice(&data[at..p.total_len()]);
        let q = Parcel4::new_checked(&b[..]).unwrap();
        assert_eq!(Parcel4Repr::parse(&q), r);
        assert!(q.segments().eq(p.segments()));
    }
    if let Ok(p) = Parcel6::new_checked(data) {
        let _ = (p.verify_udp_checksum(), (0..p.segment_count()).all(|i| p.verify_segment(i)));
        let r = Parcel6Repr::parse(&p);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        let at = p.segment_offset(0);
        b[at..].copy_from_slice(&data[at..p.total_len()]);
        let q = Parcel6::new_checked(&b[..]).unwrap();
        assert_eq!(Parcel6Repr::parse(&q), r);
        assert!(q.segments().eq(p.segments()));
    }
}

/// A UDP 4500 payload: classified, and ESP read under each algorithm's layout; the
/// header emits back to its bytes and a trailer that parses emits back to its bytes.
pub fn esp(data: &[u8]) {
    if esp::classify_udp(data) != Ok(esp::UdpEncap::Esp) {
        return;
    }
    let Ok(p) = esp::EspPacket::new_checked(data) else { return };
    let mut h = [0u8; esp::HEADER_LEN];
    esp::EspRepr::parse(&p).emit(&mut h);
    assert_eq!(h[..], data[..esp::HEADER_LEN]);
    for (iv_len, icv_len, align) in [(8, 16, 4), (16, 16, 16), (0, 0, 4), (0, 16, 4)] {
        let l = esp::EspLayout { iv_len, icv_len, align };
        if p.check_layout(&l).is_err() {
            continue;
        }
        let plain = p.ciphertext(&l);
        assert_eq!(plain.len() % align, 0);
        if let Ok(t) = esp::EspTrailer::parse(plain) {
            let tail = &plain[t.payload_len(plain.len())..];
            let mut b = vec![0u8; t.buffer_len()];
            t.emit(&mut b);
            assert_eq!(b[..], tail[..]);
        }
    }
}

/// Every target by name, for the corpus replay test and the fuzz crate.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("ethernet", ethernet),
    ("arp", arp),
    ("ipv4", ipv4),
    ("ipv6", ipv6),
    ("icmpv4", icmpv4),
    ("icmpv6", icmpv6),
    ("udp", udp),
    ("tcp", tcp),
    ("sctp", sctp),
    ("gtpu", gtpu),
    ("gue", gue),
    ("gre", gre),
    ("parcel", parcel),
    ("esp", esp),
];
