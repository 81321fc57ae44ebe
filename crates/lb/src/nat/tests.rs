//! Translations checked by recomputing every checksum from scratch (the full RFC 1071
//! sum, not the incremental path under test).

use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The full transport checksum of a packet (IPv4 or IPv6 by its version) over its
/// pseudo-header: 0 when the packet is consistent.
fn l4_sum(pkt: &[u8], l4: usize, proto: u8) -> u16 {
    let len = pkt.len() - l4;
    let mut c = if pkt[0] >> 4 == 4 {
        let a = |at: usize| Ipv4Addr::from(<[u8; 4]>::try_from(&pkt[at..at + 4]).unwrap());
        checksum::pseudo_header_v4(a(12), a(16), proto, len as u16)
    } else {
        let a = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&pkt[at..at + 16]).unwrap());
        checksum::pseudo_header_v6(&a(8), &a(24), proto, len as u32)
    };
    c.add_bytes(&pkt[l4..]);
    c.finish()
}

fn l4_header(proto: u8, sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![];
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    if proto == TCP {
        h.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        h.extend_from_slice(&[0, 0]);
    }
    h.extend_from_slice(payload);
    h
}

fn fill_l4(pkt: &mut [u8], l4: usize, proto: u8) {
    let at = l4 + if proto == TCP { 16 } else { 6 };
    let c = l4_sum(pkt, l4, proto);
    let c = if proto == UDP && c == 0 { 0xffff } else { c };
    pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

fn v4_packet(proto: u8, k: &FlowKey<[u8; 4]>, flags: u8, payload: &[u8], options: usize) -> Vec<u8> {
    let body = l4_header(proto, k.sport, k.dport, flags, payload);
    let hl = 20 + options;
    let mut p = vec![0x40 | (hl / 4) as u8, 0];
    p.extend_from_slice(&((hl + body.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, proto, 0, 0]);
    p.extend_from_slice(&k.src);
    p.extend_from_slice(&k.dst);
    p.extend(std::iter::repeat(1u8).take(options)); // NOP options
    let c = checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&body);
    fill_l4(&mut p, hl, proto);
    p
}

fn v6_packet(proto: u8, k: &FlowKey<[u8; 16]>, flags: u8, payload: &[u8]) -> Vec<u8> {
    let body = l4_header(proto, k.sport, k.dport, flags, payload);
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(body.len() as u16).to_be_bytes());
    p.extend_from_slice(&[proto, 64]);
    p.extend_from_slice(&k.src);
    p.extend_from_slice(&k.dst);
    p.extend_from_slice(&body);
    fill_l4(&mut p, 40, proto);
    p
}

fn proto_strategy() -> impl Strategy<Value = u8> {
    prop_oneof![Just(TCP), Just(UDP)]
}

proptest! {
    #[test]
    fn ipv4_translation_keeps_every_checksum_valid(
        proto in proto_strategy(), src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16,
        to_src: [u8; 4], to_dst: [u8; 4], to_sport: u16, to_dport: u16,
        payload in proptest::collection::vec(any::<u8>(), 0..64), options in 0usize..3, flags: u8,
    ) {
        let k = FlowKey { src, dst, sport, dport, proto };
        let mut p = v4_packet(proto, &k, flags, &payload, options * 4);
        let read = flow::<V4>(&p).unwrap();
        let l4 = read.l4;
        prop_assert_eq!(read.key, k);
        prop_assert_eq!(read.flags, if proto == TCP { flags } else { 0 });
        let to = Rewrite { src: to_src, dst: to_dst, sport: to_sport, dport: to_dport };
        translate::<V4>(&mut p, &read, &to, false);
        prop_assert!(checksum::verify(&p[..l4]), "IPv4 header checksum");
        prop_assert_eq!(l4_sum(&p, l4, proto), 0, "transport checksum");
        let now = flow::<V4>(&p).unwrap().key;
        prop_assert_eq!(now, FlowKey { src: to_src, dst: to_dst, sport: to_sport, dport: to_dport, proto });
        prop_assert_eq!(&p[l4 + if proto == TCP { 20 } else { 8 }..], &payload[..]);
    }

    #[test]
    fn ipv6_translation_keeps_the_transport_checksum_valid(
        proto in proto_strategy(), src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16,
        to_src: [u8; 16], to_dst: [u8; 16], to_sport: u16, to_dport: u16,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let k = FlowKey { src, dst, sport, dport, proto };
        let mut p = v6_packet(proto, &k, 0x12, &payload);
        let read = flow::<V6>(&p).unwrap();
        let l4 = read.l4;
        prop_assert_eq!(read.key, k);
        let to = Rewrite { src: to_src, dst: to_dst, sport: to_sport, dport: to_dport };
        translate::<V6>(&mut p, &read, &to, false);
        prop_assert_eq!(l4_sum(&p, l4, proto), 0);
        // 0 means "no checksum" in UDP only (forbidden over IPv6); a TCP checksum may be 0.
        if proto == UDP {
            prop_assert_ne!(be16(&p, l4 + 6), 0, "a UDP checksum never becomes 0");
        }
        prop_assert_eq!(flow::<V6>(&p).unwrap().key, FlowKey { src: to_src, dst: to_dst, sport: to_sport, dport: to_dport, proto });
    }

    /// Any bytes: reading never panics, and translating what was read never does.
    #[test]
    fn arbitrary_bytes_are_refused_or_translated(mut p in proptest::collection::vec(any::<u8>(), 0..120), v6: bool) {
        if v6 {
            if let Ok(f) = flow::<V6>(&p) { translate::<V6>(&mut p, &f, &Rewrite::default(), false); }
            if let Ok(e) = icmp_error::<V6>(&p) { translate_icmp_error::<V6>(&mut p, &e, &Rewrite::default()); }
        } else {
            if let Ok(f) = flow::<V4>(&p) { translate::<V4>(&mut p, &f, &Rewrite::default(), false); }
            if let Ok(e) = icmp_error::<V4>(&p) { translate_icmp_error::<V4>(&mut p, &e, &Rewrite::default()); }
        }
    }
}

#[test]
fn a_zero_ipv4_udp_checksum_stays_zero() {
    let k = FlowKey { src: [198, 18, 1, 1], dst: [198, 18, 128, 10], sport: 5000, dport: 53, proto: UDP };
    let mut p = v4_packet(UDP, &k, 0, b"query", 0);
    p[26..28].copy_from_slice(&[0, 0]);
    let read = flow::<V4>(&p).unwrap();
    translate::<V4>(&mut p, &read, &Rewrite { src: k.src, sport: 5000, dst: [198, 19, 1, 10], dport: 8053 }, false);
    assert_eq!(&p[26..28], &[0, 0]);
    assert!(checksum::verify(&p[..20]));
}

#[test]
fn malformed_packets_are_refused_by_name() {
    let k = FlowKey { src: [198, 18, 1, 1], dst: [198, 18, 128, 10], sport: 5000, dport: 80, proto: TCP };
    let p = v4_packet(TCP, &k, 0x02, b"", 0);
    assert_eq!(flow::<V4>(&p[..19]).unwrap_err(), NatError::Truncated);
    assert_eq!(flow::<V4>(&p[..39]).unwrap_err(), NatError::Truncated);
    let mut bad_ihl = p.clone();
    bad_ihl[0] = 0x44;
    assert_eq!(flow::<V4>(&bad_ihl).unwrap_err(), NatError::Truncated);
    let mut frag = p.clone();
    frag[6] = 0x20; // more fragments
    assert_eq!(flow::<V4>(&frag).unwrap_err(), NatError::Fragment);
    let mut icmp = p.clone();
    icmp[9] = ICMP4;
    assert_eq!(flow::<V4>(&icmp).unwrap_err(), NatError::Protocol);
    let k6 = FlowKey { src: [0x20; 16], dst: [0x21; 16], sport: 1, dport: 2, proto: UDP };
    let mut p6 = v6_packet(UDP, &k6, 0, b"x");
    p6[6] = 0; // hop-by-hop options
    assert_eq!(flow::<V6>(&p6).unwrap_err(), NatError::ExtensionHeaders);
}

/// `p` (an IPv6 packet without extension headers) with `exts` put between its fixed and
/// transport headers: (next-header value naming each, its bytes, whose first is set to
/// name the next).
fn with_extensions(p: &[u8], exts: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = p[..40].to_vec();
    let upper = p[6];
    for (i, (_, body)) in exts.iter().enumerate() {
        let mut b = body.clone();
        b[0] = exts.get(i + 1).map_or(upper, |e| e.0);
        out.extend_from_slice(&b);
    }
    out[6] = exts[0].0;
    out.extend_from_slice(&p[40..]);
    let len = (out.len() - 40) as u16;
    out[4..6].copy_from_slice(&len.to_be_bytes());
    out
}

/// An options header (Hop-by-Hop 0 or Destination Options 60) of `8 * (units + 1)` bytes:
/// one PadN option filling it.
fn options_header(units: u8) -> Vec<u8> {
    let len = 8 * (units as usize + 1);
    let mut h = vec![0, units, 1, (len - 4) as u8];
    h.resize(len, 0);
    h
}

proptest! {
    /// Hop-by-Hop and Destination Options headers before the transport header: the flow
    /// read past them, translated with every checksum valid, the headers carried as
    /// they were.
    #[test]
    fn ipv6_options_headers_are_carried_through_the_translation(
        proto in proto_strategy(), hbh in proptest::option::of(0u8..4), dst_opts in proptest::collection::vec(0u8..4, 0..3),
        sport: u16, dport: u16, to_src: [u8; 16], to_dst: [u8; 16], to_sport: u16, to_dport: u16,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let k = FlowKey { src: [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2], dst: [0x20; 16], sport, dport, proto };
        let exts: Vec<(u8, Vec<u8>)> =
            hbh.map(|u| (0, options_header(u))).into_iter().chain(dst_opts.iter().map(|&u| (60, options_header(u)))).collect();
        prop_assume!(!exts.is_empty());
        let plain = v6_packet(proto, &k, 0x12, &payload);
        let mut p = with_extensions(&plain, &exts);
        let ext_len: usize = exts.iter().map(|e| e.1.len()).sum();
        let headers = p[40..40 + ext_len].to_vec();
        // The transport checksum does not cover extension headers: the plain packet's holds.
        let read = flow::<V6>(&p).unwrap();
        prop_assert_eq!(read.l4, 40 + ext_len);
        prop_assert_eq!(read.key, k);
        prop_assert_eq!(l4_sum(&p, read.l4, proto), 0);
        let to = Rewrite { src: to_src, dst: to_dst, sport: to_sport, dport: to_dport };
        translate::<V6>(&mut p, &read, &to, false);
        prop_assert_eq!(l4_sum(&p, read.l4, proto), 0);
        prop_assert_eq!(&p[40..40 + ext_len], &headers[..]);
        prop_assert_eq!(flow::<V6>(&p).unwrap().key, FlowKey { src: to_src, dst: to_dst, sport: to_sport, dport: to_dport, proto });
    }
}

#[test]
fn ipv6_extension_headers_not_translated_are_refused_by_name() {
    let k = FlowKey { src: [0x20; 16], dst: [0x21; 16], sport: 5000, dport: 53, proto: UDP };
    let p = v6_packet(UDP, &k, 0, b"query");
    let hbh = || (0u8, options_header(0));
    // A Fragment header behind Hop-by-Hop: a fragment (reassembled first), not refused.
    let frag = (44u8, vec![0, 0, 0, 1, 0, 0, 0, 7]);
    assert_eq!(flow::<V6>(&with_extensions(&p, &[hbh(), frag])).unwrap_err(), NatError::Fragment);
    // A Routing header (segments left 0 or not), AH, ESP: refused wherever they are.
    for routing in [vec![0, 0, 4, 0, 0, 0, 0, 0], vec![0, 2, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]] {
        assert_eq!(flow::<V6>(&with_extensions(&p, &[hbh(), (43, routing.clone())])).unwrap_err(), NatError::ExtensionHeaders);
        assert_eq!(flow::<V6>(&with_extensions(&p, &[(43, routing)])).unwrap_err(), NatError::ExtensionHeaders);
    }
    let ah = (51u8, vec![0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
    assert_eq!(flow::<V6>(&with_extensions(&p, &[hbh(), ah])).unwrap_err(), NatError::ExtensionHeaders);
    let mut esp = with_extensions(&p, &[hbh()]);
    esp[40] = 50;
    assert_eq!(flow::<V6>(&esp).unwrap_err(), NatError::ExtensionHeaders);
    // The longest chain taken, one more unit refused.
    let longest = [(0u8, options_header(12)), (60, options_header(12))];
    assert_eq!(longest.iter().map(|e| e.1.len()).sum::<usize>(), MAX_EXTENSION_BYTES - 7);
    assert_eq!(flow::<V6>(&with_extensions(&p, &longest)).unwrap().l4, 40 + 208);
    let over = [(0u8, options_header(12)), (60, options_header(13))];
    assert_eq!(flow::<V6>(&with_extensions(&p, &over)).unwrap_err(), NatError::ExtensionHeaders);
    // A header running past the packet.
    let mut cut = with_extensions(&p, &[hbh()]);
    cut[41] = 9;
    assert_eq!(flow::<V6>(&cut).unwrap_err(), NatError::ExtensionHeaders);
}

/// Found by the graph fuzz target: a UDP datagram whose length field is 0 went to a
/// backend translated, a malformed datagram from the node's address. A length below 8 or
/// past the packet is refused; one that leaves bytes after the datagram is not.
#[test]
fn a_udp_length_below_8_or_past_the_packet_is_refused() {
    let k = FlowKey { src: [198, 18, 0, 2], dst: [198, 18, 128, 10], sport: 5000, dport: 53, proto: UDP };
    let k6 = FlowKey { src: [0x20; 16], dst: [0x21; 16], sport: 5000, dport: 53, proto: UDP };
    let (p4, p6) = (v4_packet(UDP, &k, 0, b"query", 0), v6_packet(UDP, &k6, 0, b"query"));
    assert!(flow::<V4>(&p4).is_ok() && flow::<V6>(&p6).is_ok());
    for (len, ok) in [(0u16, false), (7, false), (8, true), (13, true), (14, false), (0xffff, false)] {
        let (mut q4, mut q6) = (p4.clone(), p6.clone());
        q4[24..26].copy_from_slice(&len.to_be_bytes());
        q6[44..46].copy_from_slice(&len.to_be_bytes());
        for r in [flow::<V4>(&q4).map(|_| ()), flow::<V6>(&q6).map(|_| ())] {
            assert_eq!(r, if ok { Ok(()) } else { Err(NatError::BadUdpLength) }, "length {len}");
        }
    }
}

/// A router between the balancer and the backend says "fragmentation needed" about a
/// translated packet (node → backend); the client must get it about its own packet
/// (client → VIP), from the router, with every checksum right.
#[test]
fn an_icmp_error_about_a_translated_flow_reaches_the_client_in_its_terms() {
    let client = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 40_000, dport: 80, proto: TCP };
    let (node, node_port, backend) = ([198, 18, 0, 2], 41_000, [198, 19, 1, 10]);
    let sent = FlowKey { src: node, dst: backend, sport: node_port, dport: 8080, proto: TCP };
    let quoted = v4_packet(TCP, &sent, 0x10, &[0xab; 100], 0);
    let router = [198, 19, 0, 1];
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, ICMP4, 0, 0];
    p.extend_from_slice(&router);
    p.extend_from_slice(&node);
    p.extend_from_slice(&[3, 4, 0, 0, 0, 0, 0x05, 0x00]); // frag needed, MTU 1280
    p.extend_from_slice(&quoted[..20 + 28]); // the header and 28 bytes of TCP
    let len = p.len() as u16;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    let c = checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let c = checksum::checksum(&p[20..]);
    p[22..24].copy_from_slice(&c.to_be_bytes());

    let e = icmp_error::<V4>(&p).unwrap();
    assert_eq!(e.quoted, sent);
    // The reply direction's entry, keyed by the quoted flow reversed.
    let reply_rw = Rewrite { src: client.dst, sport: client.dport, dst: client.src, dport: client.sport };
    translate_icmp_error::<V4>(&mut p, &e, &reply_rw);

    assert_eq!(&p[12..16], &router, "the router stays the sender");
    assert_eq!(&p[16..20], &client.src);
    assert!(checksum::verify(&p[..20]));
    assert!(checksum::verify(&p[20..]), "ICMP checksum");
    assert_eq!((&p[20..22], &p[24..28]), (&[3u8, 4][..], &[0u8, 0, 5, 0][..]), "type, code and MTU unchanged");
    let inner = &p[28..];
    assert!(checksum::verify(&inner[..20]), "quoted IP header checksum");
    let back = icmp_error::<V4>(&p).unwrap().quoted;
    assert_eq!(back, client, "the quote is the client's own packet");
    // The quoted TCP checksum is what the client's packet would have carried: patch the
    // original back through the forward translation and compare.
    let mut as_client = quoted.clone();
    translate::<V4>(
        &mut as_client,
        &Flow { key: sent, flags: 0, l4: 20 },
        &Rewrite { src: client.src, sport: client.sport, dst: client.dst, dport: client.dport },
        false,
    );
    assert_eq!(&inner[..48], &as_client[..48]);
}

/// The backend itself answers a UDP packet with port unreachable (Local policy, no
/// source translation): the client sees it from the VIP, about its packet to the VIP.
#[test]
fn an_icmpv6_error_from_the_backend_comes_from_the_vip() {
    let a = |s: &str| s.parse::<Ipv6Addr>().unwrap().octets();
    let client = FlowKey { src: a("2001:db8:1::7"), dst: a("2001:db8:80::10"), sport: 5353, dport: 53, proto: UDP };
    let backend = a("2001:db8:2::10");
    let sent = FlowKey { src: client.src, dst: backend, sport: 5353, dport: 8053, proto: UDP };
    let quoted = v6_packet(UDP, &sent, 0, b"query");
    let mut p = vec![0x60, 0, 0, 0, 0, 0, ICMP6, 64];
    p.extend_from_slice(&backend);
    p.extend_from_slice(&client.src);
    p.extend_from_slice(&[1, 4, 0, 0, 0, 0, 0, 0]);
    p.extend_from_slice(&quoted);
    let plen = (p.len() - 40) as u16;
    p[4..6].copy_from_slice(&plen.to_be_bytes());
    let e = icmp_error::<V6>(&p).unwrap();
    assert_eq!(e.quoted, sent);
    let reply_rw = Rewrite { src: client.dst, sport: client.dport, dst: client.src, dport: client.sport };
    translate_icmp_error::<V6>(&mut p, &e, &reply_rw);
    assert_eq!(&p[8..24], &client.dst, "from the VIP, not the backend");
    assert_eq!(&p[24..40], &client.src);
    assert_eq!(l4_sum(&p, 40, ICMP6), 0, "ICMPv6 checksum over the new addresses");
    let inner = &p[48..];
    assert_eq!(flow::<V6>(inner).unwrap().key, client);
    assert_eq!(l4_sum(inner, 40, UDP), 0, "quoted UDP checksum");
}

/// A partial checksum (offloaded): after translation and completion over the packet as
/// it now is, the checksum is right.
#[test]
fn a_partial_checksum_follows_the_addresses_only() {
    for proto in [TCP, UDP] {
        let k = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 40_000, dport: 80, proto };
        let mut p = v4_packet(proto, &k, 0x10, b"partial payload", 0);
        let at = 20 + if proto == TCP { 16 } else { 6 };
        // What a sender leaves for the device: the pseudo-header sum, not complemented.
        let len = (p.len() - 20) as u16;
        let pseudo = checksum::pseudo_header_v4(Ipv4Addr::from(k.src), Ipv4Addr::from(k.dst), proto, len).fold();
        p[at..at + 2].copy_from_slice(&pseudo.to_be_bytes());
        let to = Rewrite { src: [198, 18, 0, 2], sport: 41_000, dst: [198, 19, 1, 10], dport: 8080 };
        translate::<V4>(&mut p, &Flow { key: k, flags: 0x10, l4: 20 }, &to, true);
        let want = checksum::pseudo_header_v4(Ipv4Addr::from(to.src), Ipv4Addr::from(to.dst), proto, len).fold();
        assert_eq!(be16(&p, at), want, "proto {proto}");
        assert!(checksum::complete_partial(&mut p, 20, at - 20));
        assert_eq!(l4_sum(&p, 20, proto), 0, "proto {proto}");
    }
}

/// An SCTP packet (common header and `chunks`, as (type, value)) with its CRC32c, in
/// IPv4 (`k.src`/`k.dst` four bytes) or IPv6.
fn sctp_packet<A: AsRef<[u8]>>(k: &FlowKey<A>, vtag: u32, chunks: &[(wire::sctp::ChunkType, &[u8])]) -> Vec<u8> {
    use wire::sctp::{chunk_buffer_len, emit_chunk, SctpPacket, SctpRepr, HEADER_LEN};
    let len = HEADER_LEN + chunks.iter().map(|c| chunk_buffer_len(c.1.len())).sum::<usize>();
    let mut body = vec![0u8; len];
    let mut s = SctpPacket::new_unchecked(&mut body[..]);
    SctpRepr { src_port: k.sport, dst_port: k.dport, verification_tag: vtag }.emit(&mut s);
    let mut at = 0;
    for (t, v) in chunks {
        at += emit_chunk(&mut s.payload_mut()[at..], *t, 0, v).unwrap();
    }
    s.fill_checksum();
    let (src, dst) = (k.src.as_ref(), k.dst.as_ref());
    let mut p = if src.len() == 4 {
        let mut p = vec![0x45, 0];
        p.extend_from_slice(&((20 + len) as u16).to_be_bytes());
        p.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, SCTP, 0, 0]);
        p.extend_from_slice(src);
        p.extend_from_slice(dst);
        let c = checksum::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    } else {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(len as u16).to_be_bytes());
        p.extend_from_slice(&[SCTP, 64]);
        p.extend_from_slice(src);
        p.extend_from_slice(dst);
        p
    };
    p.extend_from_slice(&body);
    p
}

fn sctp_ok(pkt: &[u8], l4: usize) -> bool {
    wire::sctp::SctpPacket::new_checked(&pkt[l4..]).unwrap().verify_checksum()
}

proptest! {
    /// SCTP leaves the TCP/UDP reading by its own error; read as SCTP, translated, the
    /// packet reads as the translation says, its CRC32c right again (computed from
    /// scratch by the wire view), the IPv4 header's checksum too, the chunks untouched.
    #[test]
    fn sctp_translation_recomputes_the_crc(
        v6: bool, src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, vtag: u32,
        to_src: [u8; 16], to_dst: [u8; 16], to_sport: u16, to_dport: u16,
        data in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        use wire::sctp::ChunkType::*;
        let chunks: [(wire::sctp::ChunkType, &[u8]); 2] = [(Sack, &[0; 12]), (Data, &data)];
        if v6 {
            let k = FlowKey { src, dst, sport, dport, proto: SCTP };
            let mut p = sctp_packet(&k, vtag, &chunks);
            prop_assert_eq!(flow::<V6>(&p).unwrap_err(), NatError::Sctp);
            let f = sctp_flow::<V6>(&p).unwrap();
            prop_assert_eq!((f.key, f.l4, f.flags), (k, 40, 0));
            prop_assert_eq!(sctp_checksum(&p, &f), Ok(()));
            let to = Rewrite { src: to_src, dst: to_dst, sport: to_sport, dport: to_dport };
            translate::<V6>(&mut p, &f, &to, false);
            let g = sctp_flow::<V6>(&p).unwrap();
            prop_assert_eq!(g.key, FlowKey { src: to_src, dst: to_dst, sport: to_sport, dport: to_dport, proto: SCTP });
            prop_assert!(sctp_ok(&p, 40));
            prop_assert_eq!(&p[48..], &sctp_packet(&g.key, vtag, &chunks)[48..]);
        } else {
            let a = |b: [u8; 16]| <[u8; 4]>::try_from(&b[..4]).unwrap();
            let k = FlowKey { src: a(src), dst: a(dst), sport, dport, proto: SCTP };
            let mut p = sctp_packet(&k, vtag, &chunks);
            prop_assert_eq!(flow::<V4>(&p).unwrap_err(), NatError::Sctp);
            let f = sctp_flow::<V4>(&p).unwrap();
            let to = Rewrite { src: a(to_src), dst: a(to_dst), sport: to_sport, dport: to_dport };
            translate::<V4>(&mut p, &f, &to, false);
            prop_assert_eq!(sctp_flow::<V4>(&p).unwrap().key, FlowKey { src: to.src, dst: to.dst, sport: to_sport, dport: to_dport, proto: SCTP });
            prop_assert!(sctp_ok(&p, 20));
            prop_assert_eq!(checksum::checksum(&p[..20]), 0, "IPv4 header checksum");
        }
    }
}

/// The chunks an association's life turns on, each read as its bit for the session
/// table; a bad CRC32c, a bad chunk length and a cut chunk refused by name.
#[test]
fn sctp_chunks_and_refusals() {
    use crate::session::*;
    use wire::sctp::ChunkSet as C;
    use wire::sctp::ChunkType::*;
    let k = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 38_412, dport: 38_412, proto: SCTP };
    for (chunks, flags) in [
        (vec![(Init, &[0u8; 16][..])], C::INIT),
        (vec![(InitAck, &[0u8; 16][..])], C::INIT_ACK),
        (vec![(CookieEcho, &[1u8; 8][..]), (Data, &[2u8; 20][..])], C::COOKIE_ECHO),
        (vec![(CookieAck, &[][..]), (Sack, &[0u8; 12][..])], C::COOKIE_ACK),
        (vec![(Data, &[2u8; 20][..]), (Sack, &[0u8; 12][..]), (Heartbeat, &[0u8; 8][..]), (HeartbeatAck, &[0u8; 8][..])], 0),
        (vec![(Sack, &[0u8; 12][..]), (Abort, &[][..])], C::ABORT),
        (vec![(Shutdown, &[0u8; 4][..])], C::SHUTDOWN),
        (vec![(ShutdownAck, &[][..])], C::SHUTDOWN_ACK),
        (vec![(ShutdownComplete, &[][..])], C::SHUTDOWN_COMPLETE),
        (vec![(Sack, &[0u8; 12][..]), (Shutdown, &[0u8; 4][..]), (ShutdownAck, &[][..])], C::SHUTDOWN | C::SHUTDOWN_ACK),
    ] {
        let p = sctp_packet(&k, 7, &chunks);
        assert_eq!(sctp_flow::<V4>(&p).unwrap().flags, flags, "{chunks:?}");
    }
    let good = sctp_packet(&k, 7, &[(Abort, &[])]);
    let f = sctp_flow::<V4>(&good).unwrap();
    assert_eq!(sctp_checksum(&good, &f), Ok(()));
    let mut bad = good.clone();
    bad[20 + 12] ^= 0x40; // the chunk type: ABORT read as something else, CRC wrong
    assert_eq!(sctp_checksum(&bad, &sctp_flow::<V4>(&bad).unwrap()), Err(NatError::SctpChecksum));
    let mut short = good.clone();
    short[20 + 15] = 3; // chunk length below 4
    assert_eq!(sctp_flow::<V4>(&short).unwrap_err(), NatError::BadSctpChunk);
    // Past the packet, or a chunk header cut short: a bad chunk too (`sctp-bad-chunk`,
    // as documented; they were counted `truncated`, which the graph seeds showed).
    short[20 + 15] = 200;
    assert_eq!(sctp_flow::<V4>(&short).unwrap_err(), NatError::BadSctpChunk);
    short[20 + 15] = 5; // one byte past the packet's end
    assert_eq!(sctp_flow::<V4>(&short).unwrap_err(), NatError::BadSctpChunk);
    short[20 + 15] = 4; // exactly to the end: good
    assert!(sctp_flow::<V4>(&short).is_ok());
    let mut cut = sctp_packet(&k, 7, &[(Abort, &[]), (Abort, &[])]);
    let len = 20 + 12 + 4 + 2;
    cut.truncate(len);
    cut[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    cut[10..12].fill(0);
    let c = checksum::checksum(&cut[..20]);
    cut[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(sctp_flow::<V4>(&cut).unwrap_err(), NatError::BadSctpChunk, "a second chunk's header cut short");
    // Shorter than the common header: truncated.
    assert_eq!(sctp_flow::<V4>(&good[..20 + 11]).unwrap_err(), NatError::Truncated);
    // Not SCTP.
    let udp = v4_packet(UDP, &FlowKey { proto: UDP, ..k }, 0, b"x", 0);
    assert_eq!(sctp_flow::<V4>(&udp).unwrap_err(), NatError::Protocol);
}

/// An ICMP error quoting an SCTP packet is translated as one about TCP or UDP (the
/// ports are at the same place); the quoted verification tag (what SCTP checks an
/// error by) and CRC32c stay as they were.
#[test]
fn icmp_error_about_sctp_is_translated() {
    use wire::sctp::ChunkType::*;
    let client = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 40_000, dport: 38_412, proto: SCTP };
    let backend = [198, 19, 1, 10];
    let sent = FlowKey { src: [198, 18, 0, 2], dst: backend, sport: 41_000, dport: 38_412, proto: SCTP };
    let quoted = sctp_packet(&sent, 0xdead_beef, &[(Data, &[9u8; 40][..])]);
    let crc = quoted[28..32].to_vec();
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, ICMP4, 0, 0];
    p.extend_from_slice(&[198, 19, 9, 9]);
    p.extend_from_slice(&sent.src);
    p.extend_from_slice(&[3, 4, 0, 0, 0, 0, 0x05, 0xdc]);
    p.extend_from_slice(&quoted[..20 + 32]);
    let len = p.len() as u16;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    let e = icmp_error::<V4>(&p).unwrap();
    assert_eq!(e.quoted, sent);
    let reply_rw = Rewrite { src: client.dst, sport: client.dport, dst: client.src, dport: client.sport };
    translate_icmp_error::<V4>(&mut p, &e, &reply_rw);
    assert_eq!(&p[16..20], &client.src);
    assert_eq!(checksum::checksum(&p[20..]), 0, "ICMP checksum");
    let inner = &p[28..];
    assert_eq!(sctp_flow::<V4>(inner).map(|f| f.key), Err(NatError::Truncated), "a quote, cut short");
    assert_eq!((be16(inner, 20), be16(inner, 22)), (client.sport, client.dport));
    assert_eq!(&inner[12..16], &client.src);
    assert_eq!(&inner[16..20], &client.dst);
    assert_eq!(&inner[24..28], &0xdead_beef_u32.to_be_bytes(), "verification tag untouched");
    assert_eq!(&inner[28..32], &crc[..], "CRC32c untouched");
    assert_eq!(checksum::checksum(&inner[..20]), 0, "quoted IPv4 header checksum");
}

/// An INIT's or INIT ACK's value: its 16 fixed bytes, then `params` (type, value), each
/// padded to 4 bytes.
fn init_value(params: &[(u16, &[u8])]) -> Vec<u8> {
    let mut v = vec![0x5a; wire::sctp::INIT_FIXED_LEN];
    for (t, p) in params {
        v.extend_from_slice(&t.to_be_bytes());
        v.extend_from_slice(&((4 + p.len()) as u16).to_be_bytes());
        v.extend_from_slice(p);
        v.resize((v.len() + 3) & !3, 0);
    }
    v
}

/// A multi-homed client's INIT (IPv4 and IPv6) and a backend's INIT ACK, each listing
/// two addresses among other parameters, translated: no address parameter left, the
/// others in order byte for byte, the chunk, IP and SCTP lengths and the IPv4 header's
/// checksum right, the CRC32c good; a packet listing none is left as long as it was.
#[test]
fn sctp_init_translated_without_its_addresses() {
    use wire::sctp::ChunkType::{self, *};
    const SUPPORTED_ADDRESS_TYPES: u16 = 12;
    const ECN: u16 = 0x8000;
    const FORWARD_TSN: u16 = 0xc000;
    const STATE_COOKIE: u16 = 7;
    let v6a = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11];
    let v6b = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12];
    let cookie: Vec<u8> = (0..37).collect();
    let init_params: [(u16, &[u8]); 5] =
        [(SUPPORTED_ADDRESS_TYPES, &[0, 5, 0, 6]), (5, &[198, 18, 1, 7]), (ECN, &[]), (6, &v6a), (FORWARD_TSN, &[])];
    let ack_params: [(u16, &[u8]); 5] = [(STATE_COOKIE, &cookie), (6, &v6b), (ECN, &[]), (5, &[198, 18, 2, 9]), (11, b"backend\0")];
    let check = |p: &[u8], l4: usize, t: ChunkType, kept: &[(u16, &[u8])], v6: bool| {
        let s = wire::sctp::SctpPacket::new_checked(&p[l4..]).unwrap();
        assert!(s.verify_checksum());
        let c: Vec<_> = s.chunks().map(|c| c.unwrap()).collect();
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].chunk_type, c[0].value), (t, &init_value(kept)[..]), "{t:?}: the other parameters byte for byte");
        let ip_len = if v6 { 40 + be16(p, 4) as usize } else { be16(p, 2) as usize };
        assert_eq!(ip_len, p.len());
        assert_eq!(wire::sctp::count_multihoming(s.payload()), Ok(wire::sctp::Multihoming::default()));
    };
    for (t, params, removed) in [(Init, &init_params, 2), (InitAck, &ack_params, 3)] {
        let kept: Vec<(u16, &[u8])> = params.iter().copied().filter(|p| ![5, 6, 11].contains(&p.0)).collect();
        let value = init_value(params);
        // IPv6.
        let k =
            FlowKey { src: [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], dst: v6a, sport: 38_412, dport: 38_412, proto: SCTP };
        let mut p = sctp_packet(&k, 0, &[(t, &value)]);
        let f = sctp_flow::<V6>(&p).unwrap();
        let (len, n) = remove_sctp_multihoming::<V6>(&mut p, &f).unwrap();
        assert_eq!((n.addresses, p.len() - len), (removed, value.len() - init_value(&kept).len()));
        p.truncate(len);
        let to = Rewrite { src: v6b, dst: k.src, sport: 40_000, dport: 38_412 };
        translate::<V6>(&mut p, &f, &to, false);
        check(&p, 40, t, &kept, true);
        // IPv4.
        let k = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 38_412, dport: 38_412, proto: SCTP };
        let mut p = sctp_packet(&k, 0, &[(t, &value)]);
        let f = sctp_flow::<V4>(&p).unwrap();
        let (len, _) = remove_sctp_multihoming::<V4>(&mut p, &f).unwrap();
        p.truncate(len);
        translate::<V4>(&mut p, &f, &Rewrite { src: [198, 18, 0, 1], dst: [198, 18, 2, 9], sport: 40_000, dport: 38_412 }, false);
        check(&p, 20, t, &kept, false);
        assert_eq!(checksum::checksum(&p[..20]), 0, "IPv4 header checksum");
        // Nothing to remove: nothing changes.
        let mut q = sctp_packet(&k, 0, &[(t, &init_value(&kept))]);
        let before = q.clone();
        let f = sctp_flow::<V4>(&q).unwrap();
        assert_eq!(remove_sctp_multihoming::<V4>(&mut q, &f), None);
        assert_eq!(q, before);
    }
    // Not an INIT: not read, even where its bytes would look like address parameters.
    let k = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 1, dport: 2, proto: SCTP };
    let mut p = sctp_packet(&k, 0, &[(Data, &init_value(&init_params))]);
    let f = sctp_flow::<V4>(&p).unwrap();
    assert_eq!(remove_sctp_multihoming::<V4>(&mut p, &f), None);
    // A parameter past its chunk: refused when read, before a session is made.
    let mut v = init_value(&init_params);
    v[16 + 3] = 200;
    assert_eq!(sctp_flow::<V4>(&sctp_packet(&k, 0, &[(Init, &v)])).unwrap_err(), NatError::BadSctpParameter);
    let mut v = init_value(&init_params);
    v.truncate(12);
    assert_eq!(sctp_flow::<V4>(&sctp_packet(&k, 0, &[(InitAck, &v)])).unwrap_err(), NatError::BadSctpParameter);
}

/// An INIT offering dynamic address reconfiguration (Supported Extensions: ASCONF,
/// ASCONF-ACK, FORWARD-TSN), translated: it offers FORWARD-TSN only, the parameter's
/// length 5 and its padding zeroed, the IP length and CRC32c right; ASCONF in the AUTH
/// Chunk List stays (the association's key is made of it, RFC 4895 §6.1).
#[test]
fn sctp_init_translated_without_asconf() {
    use wire::sctp::ChunkType::*;
    let chunk_list: (u16, &[u8]) = (0x8003, &[0xc1, 0x80]);
    let k = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 38_412, dport: 38_412, proto: SCTP };
    let value = init_value(&[(0x8008, &[0xc1, 0x80, 0xc0]), chunk_list, (0x8000, &[])]);
    let mut p = sctp_packet(&k, 0, &[(Init, &value)]);
    let f = sctp_flow::<V4>(&p).unwrap();
    let (len, removed) = remove_sctp_multihoming::<V4>(&mut p, &f).unwrap();
    assert_eq!(removed, wire::sctp::Multihoming { addresses: 0, asconf: 2 });
    p.truncate(len);
    translate::<V4>(&mut p, &f, &Rewrite { src: [198, 18, 0, 1], dst: [198, 18, 2, 9], sport: 40_000, dport: 38_412 }, false);
    let s = wire::sctp::SctpPacket::new_checked(&p[20..]).unwrap();
    assert!(s.verify_checksum());
    assert_eq!(be16(&p, 2) as usize, p.len());
    assert_eq!(checksum::checksum(&p[..20]), 0, "IPv4 header checksum");
    let c = s.chunks().next().unwrap().unwrap();
    // The chunk length leaves the last parameter's padding out, as `init_value` pads it.
    let want = init_value(&[(0x8008, &[0xc0]), chunk_list, (0x8000, &[])]);
    assert_eq!(c.value, &want[..]);
    assert_eq!(c.value[16..24], [0x80, 0x08, 0, 5, 0xc0, 0, 0, 0]);
    assert_eq!(wire::sctp::count_multihoming(s.payload()), Ok(wire::sctp::Multihoming::default()));
}

/// An ASCONF or ASCONF-ACK chunk anywhere among a packet's chunks is seen as it is read
/// (what `lbN-nat` drops on a translated association), no other chunk; the flow and its
/// chunk bits the same as without it.
#[test]
fn sctp_read_sees_asconf() {
    use wire::sctp::ChunkType::*;
    let k = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 38_412, dport: 38_412, proto: SCTP };
    let auth = [0u8; 24];
    for (chunks, asconf) in [
        (&[(Unknown(0x0f), &auth[..]), (Asconf, &[0, 0, 0, 1, 0, 5, 0, 8, 198, 18, 0, 2][..])][..], true),
        (&[(Unknown(0x0f), &auth[..]), (AsconfAck, &[0, 0, 0, 1][..]), (Sack, &[0; 12][..])][..], true),
        (&[(Data, &[1; 20][..]), (Unknown(0x0f), &auth[..]), (Unknown(0xc0), &[0; 8][..])][..], false),
    ] {
        let p = sctp_packet(&k, 9, chunks);
        let r = sctp_read::<V4>(&p).unwrap();
        assert_eq!(r.asconf, asconf, "{chunks:?}");
        assert_eq!(r.flow, sctp_flow::<V4>(&p).unwrap());
        assert_eq!(r.flow.flags, 0);
    }
}
