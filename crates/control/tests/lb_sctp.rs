//! SCTP services through the whole graph (the fuzz graph's gateway, services added
//! through the control API): an association's INIT to a ClusterIP service goes to the
//! backend Maglev picks for it, translated to the node's SNAT address with its CRC32c
//! computed again; the backend's answers come back as the service's; an ABORT ends
//! the session (a later INIT on the tuple is a new one); a packet whose CRC32c was
//! wrong on arrival is dropped by name (`sctp-bad-checksum`), and acts on nothing; a
//! multi-homed INIT and INIT ACK lose the addresses they list (`sctp-addresses-removed`)
//! and ASCONF among their Supported Extensions (`sctp-asconf-unlisted`), and an ASCONF
//! or ASCONF-ACK chunk is dropped both ways (`sctp-asconf-dropped`). IPv4 and IPv6; and
//! a direct-server-return (GRE) SCTP service, whose packets (an ASCONF too) go unchanged
//! inside the outer header.

use crate::common;

use common::{count_all as count, seed};
use control::api::Request;
use control::fuzz::graph::Harness;
use io::mem::RxFrame;
use lb::{BackendSpec, Family, ServiceSpec};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::ipv4::{Ipv4Packet, Ipv4Repr};
use wire::ipv6::{Ipv6Packet, Ipv6Repr};
use wire::sctp::{chunk_buffer_len, emit_chunk, ChunkType, SctpPacket, SctpRepr};
use wire::IpProtocol;

const PORT: u16 = 38412; // NGAP's
const SCTP: u8 = 132;

/// An Ethernet frame to the gateway's access0 (the header of a committed seed that
/// arrives there) holding an IPv4 or IPv6 SCTP packet with `chunks`, its CRC32c filled
/// (then spoilt if `bad_crc`).
fn sctp_frame(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, vtag: u32, chunks: &[(ChunkType, &[u8])], bad_crc: bool) -> RxFrame {
    let len = 12 + chunks.iter().map(|c| chunk_buffer_len(c.1.len())).sum::<usize>();
    let mut s = vec![0u8; len];
    let mut p = SctpPacket::new_unchecked(&mut s[..]);
    SctpRepr { src_port: sport, dst_port: dport, verification_tag: vtag }.emit(&mut p);
    let mut at = 0;
    for (t, v) in chunks {
        at += emit_chunk(&mut p.payload_mut()[at..], *t, 0, v).unwrap();
    }
    p.fill_checksum();
    if bad_crc {
        s[8] ^= 1;
    }
    ip_frame(src, dst, IpProtocol::Sctp, &s)
}

/// An ICMP error from `src` to `dst` quoting `quoted` (an IP packet): IPv4 frag needed
/// or ICMPv6 packet too big, MTU 1280, checksums filled; in by access0 as the others.
fn icmp_error_frame(src: IpAddr, dst: IpAddr, quoted: &[u8]) -> RxFrame {
    let mut icmp = match src {
        IpAddr::V4(_) => vec![3, 4, 0, 0, 0, 0, 0x05, 0x00],
        IpAddr::V6(_) => vec![2, 0, 0, 0, 0, 0, 0x05, 0x00],
    };
    icmp.extend_from_slice(quoted);
    match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => {
            let c = wire::checksum::checksum(&icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            ip_frame(src, dst, IpProtocol::Icmp, &icmp)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mut c = wire::checksum::pseudo_header_v6(&a, &b, 58, icmp.len() as u32);
            c.add_bytes(&icmp);
            let c = c.finish();
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            ip_frame(src, dst, IpProtocol::Icmpv6, &icmp)
        }
        _ => unreachable!("one family"),
    }
}

/// An Ethernet frame to the gateway's access0 (the header of a committed seed that
/// arrives there) holding an IP packet from `src` to `dst` with `payload`, its header
/// emitted by the wire crate (IPv4's checksum filled).
fn ip_frame(src: IpAddr, dst: IpAddr, protocol: IpProtocol, payload: &[u8]) -> RxFrame {
    let (eth, mut l3) = match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let mut h = vec![0u8; 20];
            let repr = Ipv4Repr { src, dst, protocol, payload_len: payload.len(), ttl: 64, dscp: 0, ecn: 0, ident: 1, dont_frag: false };
            repr.emit(&mut Ipv4Packet::new_unchecked(&mut h[..]));
            (seed("seed-lb4-tcp").1[..14].to_vec(), h)
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let mut h = vec![0u8; 40];
            let repr =
                Ipv6Repr { src, dst, next_header: protocol, payload_len: payload.len(), hop_limit: 64, traffic_class: 0, flow_label: 0 };
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut h[..]));
            (seed("seed-lb6-udp").1[..14].to_vec(), h)
        }
        _ => unreachable!("one family"),
    };
    l3.extend_from_slice(payload);
    RxFrame { bytes: [eth, l3].concat(), vnet: None }
}

/// What left the gateway: (source, destination, its SCTP packet's bytes).
fn sent(f: &[u8]) -> (IpAddr, IpAddr, Vec<u8>) {
    let l3 = &f[14..];
    match l3[0] >> 4 {
        4 => {
            let p = wire::ipv4::Ipv4Packet::new_checked(l3).unwrap();
            assert_eq!(p.protocol(), wire::IpProtocol::Sctp);
            (p.src_addr().into(), p.dst_addr().into(), p.payload().to_vec())
        }
        _ => {
            let p = wire::ipv6::Ipv6Packet::new_checked(l3).unwrap();
            assert_eq!(p.next_header(), wire::IpProtocol::Sctp);
            (p.src_addr().into(), p.dst_addr().into(), p.payload().to_vec())
        }
    }
}

/// The backend Maglev picks for a client's flow to the service (the balancer's own
/// hash of the 5-tuple, the service's table), as an address.
fn maglev_pick(h: &Harness, client: IpAddr, sport: u16, vip: IpAddr) -> IpAddr {
    let t = h.control.lb.state.tables();
    match (client, vip) {
        (IpAddr::V4(c), IpAddr::V4(v)) => {
            let svc = t.v4.lookup(&v.octets(), PORT, SCTP, false).unwrap();
            let b = svc.pick(lb::V4::flow_hash(&c.octets(), &v.octets(), sport, PORT, SCTP)).unwrap();
            IpAddr::from(svc.backends[b as usize].addr)
        }
        (IpAddr::V6(c), IpAddr::V6(v)) => {
            let svc = t.v6.lookup(&v.octets(), PORT, SCTP, false).unwrap();
            let b = svc.pick(lb::V6::flow_hash(&c.octets(), &v.octets(), sport, PORT, SCTP)).unwrap();
            IpAddr::from(svc.backends[b as usize].addr)
        }
        _ => unreachable!(),
    }
}

const INIT: &[u8] = &[0x11, 0x22, 0x33, 0x44, 0, 1, 0, 0, 0, 2, 0, 2, 0, 0, 0, 1];

/// An INIT's or INIT ACK's value: fixed fields, then `params` (type, value), each
/// padded to 4 bytes but the last (RFC 9260 §3.2: the chunk length leaves its padding out).
fn init_value(params: &[(u16, &[u8])]) -> Vec<u8> {
    let mut v = INIT.to_vec();
    for (t, p) in params {
        v.resize((v.len() + 3) & !3, 0);
        v.extend_from_slice(&t.to_be_bytes());
        v.extend_from_slice(&((4 + p.len()) as u16).to_be_bytes());
        v.extend_from_slice(p);
    }
    v
}

/// A chunk's bytes on the wire, padding included.
fn chunk(t: ChunkType, value: &[u8]) -> Vec<u8> {
    let mut c = vec![0; chunk_buffer_len(value.len())];
    emit_chunk(&mut c, t, 0, value).unwrap();
    c
}

/// One association's life through the graph: `client`, `vip`, `backends`, `snat` the
/// node's address toward the backends, `node` the family's lbN-nat.
fn association(client: IpAddr, vip: IpAddr, backends: [IpAddr; 2], snat: IpAddr, node: &str) {
    use ChunkType::*;
    let mut h = Harness::new();
    let mut spec = ServiceSpec::new("t/amf:ngap", lb::ServiceType::ClusterIp, vip, PORT, lb::Protocol::Sctp);
    spec.backends = backends.iter().map(|&a| BackendSpec::new(a, PORT)).collect();
    let r = h.control.handle(&Request::LbServiceAdd(spec));
    assert!(r.ok, "{r:?}");
    let one = |h: &mut Harness, f: RxFrame| {
        let out = h.frame(0, f);
        assert_eq!(out.len(), 1, "one frame out");
        sent(&out[0].1.bytes)
    };

    // INITs from many client ports: each to Maglev's pick, translated, CRC32c right,
    // the chunks and the verification tag as they were.
    let mut used = std::collections::HashSet::new();
    for sport in 40_000..40_032 {
        let f = sctp_frame(client, sport, vip, PORT, 0, &[(Init, INIT)], false);
        let chunks_in = f.bytes[f.bytes.len() - chunk_buffer_len(INIT.len())..].to_vec();
        let (src, dst, s) = one(&mut h, f);
        assert_eq!(dst, maglev_pick(&h, client, sport, vip), "port {sport}");
        assert_eq!(src, snat, "Cluster policy: from the node's address");
        used.insert(dst);
        let p = SctpPacket::new_checked(&s[..]).unwrap();
        assert_eq!((p.dst_port(), p.verification_tag()), (PORT, 0));
        assert!(p.verify_checksum(), "CRC32c after translation");
        assert_eq!(&s[12..], &chunks_in[..]);
    }
    assert_eq!(used.len(), 2, "Maglev spreads associations over both backends");
    assert_eq!(count(&h, node, "new-session"), 32);

    // The backend's INIT ACK comes back as the service's, to the client.
    let sport = 40_000;
    let f = sctp_frame(client, sport, vip, PORT, 0, &[(Init, INIT)], false);
    let (snat_src, backend, s) = one(&mut h, f);
    let snat_port = SctpPacket::new_checked(&s[..]).unwrap().src_port();
    let ack = sctp_frame(backend, PORT, snat_src, snat_port, 0x1122_3344, &[(InitAck, INIT), (Data, b"cookie")], false);
    let (src, dst, s) = one(&mut h, ack);
    assert_eq!((src, dst), (vip, client));
    let p = SctpPacket::new_checked(&s[..]).unwrap();
    assert_eq!((p.src_port(), p.dst_port(), p.verification_tag()), (PORT, sport, 0x1122_3344));
    assert!(p.verify_checksum(), "CRC32c of the translated reply");
    assert_eq!(count(&h, node, "reply-translated"), 1);

    // An ICMP error from the backend about the packet it got (frag needed / packet too
    // big) reaches the client about the packet the client sent: from the service's
    // address, the quote's addresses and ports the client's, its verification tag kept.
    let sent_init = sctp_frame(snat_src, snat_port, backend, PORT, 0, &[(Init, INIT)], false);
    let err = icmp_error_frame(backend, snat_src, &sent_init.bytes[14..]);
    let out = h.frame(0, err);
    assert_eq!(out.len(), 1);
    let o = &out[0].1.bytes[14..];
    let (src, dst, quote) = match o[0] >> 4 {
        4 => {
            let p = wire::ipv4::Ipv4Packet::new_checked(o).unwrap();
            assert_eq!(wire::checksum::checksum(p.payload()), 0, "ICMP checksum");
            (IpAddr::from(p.src_addr()), IpAddr::from(p.dst_addr()), p.payload()[8..].to_vec())
        }
        _ => {
            let p = wire::ipv6::Ipv6Packet::new_checked(o).unwrap();
            let mut c = wire::checksum::pseudo_header_v6(&p.src_addr(), &p.dst_addr(), 58, p.payload().len() as u32);
            c.add_bytes(p.payload());
            assert_eq!(c.finish(), 0, "ICMPv6 checksum");
            (IpAddr::from(p.src_addr()), IpAddr::from(p.dst_addr()), p.payload()[8..].to_vec())
        }
    };
    assert_eq!((src, dst), (vip, client));
    let ql4 = if quote[0] >> 4 == 4 { 20 } else { 40 };
    let q = SctpPacket::new_checked(&quote[ql4..]).unwrap();
    assert_eq!((q.src_port(), q.dst_port(), q.verification_tag()), (sport, PORT, 0));
    let (qs, qd) = match quote[0] >> 4 {
        4 => {
            let p = wire::ipv4::Ipv4Packet::new_unchecked(&quote[..]);
            (IpAddr::from(p.src_addr()), IpAddr::from(p.dst_addr()))
        }
        _ => {
            let p = wire::ipv6::Ipv6Packet::new_unchecked(&quote[..]);
            (IpAddr::from(p.src_addr()), IpAddr::from(p.dst_addr()))
        }
    };
    assert_eq!((qs, qd), (client, vip), "the quote is the client's packet");
    assert_eq!(count(&h, node, "icmp-translated"), 1);

    // A bad CRC32c: dropped by name, whatever the chunk; a bad ABORT ends nothing.
    let news = count(&h, node, "new-session");
    assert!(h.frame(0, sctp_frame(client, 50_000, vip, PORT, 0, &[(Init, INIT)], true)).is_empty());
    assert!(h.frame(0, sctp_frame(client, sport, vip, PORT, 0x5566_7788, &[(Abort, &[])], true)).is_empty());
    assert_eq!(count(&h, node, "sctp-bad-checksum"), 2);
    assert_eq!(count(&h, node, "new-session"), news, "no session for a corrupted INIT");
    let (_, dst, _) = one(&mut h, sctp_frame(client, sport, vip, PORT, 0, &[(Init, INIT)], false));
    assert_eq!(dst, backend);
    assert_eq!(count(&h, node, "new-session"), news, "the association lives on: its INIT is its session's");

    // ABORT (good): translated to the backend, and the session is over: the next INIT
    // on the tuple starts a new one.
    let (_, dst, s) = one(&mut h, sctp_frame(client, sport, vip, PORT, 0x5566_7788, &[(Abort, &[])], false));
    assert_eq!(dst, backend);
    assert!(SctpPacket::new_checked(&s[..]).unwrap().verify_checksum());
    one(&mut h, sctp_frame(client, sport, vip, PORT, 0, &[(Init, INIT)], false));
    assert_eq!(count(&h, node, "new-session"), news + 1, "ABORT ended the session");

    // A bad chunk length: dropped by name.
    let mut f = sctp_frame(client, 50_001, vip, PORT, 0, &[(Init, INIT)], false);
    let at = f.bytes.len() - chunk_buffer_len(INIT.len()) + 3;
    f.bytes[at] = 2;
    assert!(h.frame(0, f).is_empty());
    assert_eq!(count(&h, node, "sctp-bad-chunk"), 1);

    // A multi-homed client's INIT (two addresses among its parameters) reaches the
    // backend without the addresses, the other parameters as they were, the IP length
    // and CRC32c right; the backend's INIT ACK listing its own comes back without them
    // too (`sctp-addresses-removed`). A parameter past its chunk: dropped by name.
    let v6: &[u8] = &[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    let cookie: &[u8] = &[0xc0; 13];
    let one_whole = |h: &mut Harness, f: RxFrame| {
        let out = h.frame(0, f);
        assert_eq!(out.len(), 1, "one frame out");
        let (src, dst, s) = sent(&out[0].1.bytes);
        let ip_header = if src.is_ipv4() { 20 } else { 40 };
        assert_eq!(out[0].1.bytes.len(), 14 + ip_header + s.len(), "the IP length is the packet's");
        (src, dst, s)
    };
    let with = init_value(&[(12, &[0, 5, 0, 6]), (5, &[198, 18, 0, 7]), (0x8000, &[]), (6, v6), (0xc000, &[])]);
    let (snat_src, backend, s) = one_whole(&mut h, sctp_frame(client, 50_003, vip, PORT, 0, &[(Init, &with)], false));
    assert!(SctpPacket::new_checked(&s[..]).unwrap().verify_checksum());
    assert_eq!(s[12..], chunk(Init, &init_value(&[(12, &[0, 5, 0, 6]), (0x8000, &[]), (0xc000, &[])]))[..]);
    let snat_port = SctpPacket::new_checked(&s[..]).unwrap().src_port();
    let with = init_value(&[(6, v6), (7, cookie), (5, &[198, 18, 0, 8]), (11, b"b\0")]);
    let (src, dst, s) = one_whole(&mut h, sctp_frame(backend, PORT, snat_src, snat_port, 0x0102_0304, &[(InitAck, &with)], false));
    assert_eq!((src, dst), (vip, client));
    assert!(SctpPacket::new_checked(&s[..]).unwrap().verify_checksum());
    assert_eq!(s[12..], chunk(InitAck, &init_value(&[(7, cookie)]))[..]);
    assert_eq!(count(&h, node, "sctp-addresses-removed"), 2);
    let mut bad = with.clone();
    bad[16 + 3] = 200;
    assert!(h.frame(0, sctp_frame(client, 50_004, vip, PORT, 0, &[(Init, &bad)], false)).is_empty());
    assert_eq!(count(&h, node, "sctp-bad-parameter"), 1);

    // An INIT offering dynamic address reconfiguration (Supported Extensions: ASCONF,
    // ASCONF-ACK, FORWARD-TSN) reaches the backend offering FORWARD-TSN only, the
    // parameter 5 bytes long, padded, the parameters after it as they were; the
    // backend's INIT ACK offering ASCONF alone comes back without the parameter
    // (`sctp-asconf-unlisted`, once a packet). The AUTH Chunk List naming ASCONF stays.
    let chunk_list: (u16, &[u8]) = (0x8003, &[0xc1, 0x80]);
    let with = init_value(&[(0x8008, &[0xc1, 0x80, 0xc0]), chunk_list, (0xc000, &[])]);
    let (snat_src, backend, s) = one_whole(&mut h, sctp_frame(client, 50_005, vip, PORT, 0, &[(Init, &with)], false));
    assert!(SctpPacket::new_checked(&s[..]).unwrap().verify_checksum());
    assert_eq!(s[12..], chunk(Init, &init_value(&[(0x8008, &[0xc0]), chunk_list, (0xc000, &[])]))[..]);
    assert_eq!(s[12 + 20..12 + 28], [0x80, 0x08, 0, 5, 0xc0, 0, 0, 0]);
    let snat_port = SctpPacket::new_checked(&s[..]).unwrap().src_port();
    let with = init_value(&[(7, cookie), (0x8008, &[0x80, 0xc1])]);
    let (_, _, s) = one_whole(&mut h, sctp_frame(backend, PORT, snat_src, snat_port, 0x0a0b_0c0d, &[(InitAck, &with)], false));
    assert!(SctpPacket::new_checked(&s[..]).unwrap().verify_checksum());
    assert_eq!(s[12..], chunk(InitAck, &init_value(&[(7, cookie)]))[..]);
    assert_eq!(count(&h, node, "sctp-asconf-unlisted"), 2);
    assert_eq!(count(&h, node, "sctp-addresses-removed"), 2, "no address listed: not counted as one");

    // On that association, an ASCONF adding an address from the client and an
    // ASCONF-ACK from the backend (each after its AUTH chunk, as RFC 5061 requires):
    // dropped by name both ways, acting on nothing; its DATA goes on both ways.
    let auth = [[0, 0, 0, 1].as_slice(), &[0x11; 20]].concat();
    let asconf = [0, 0, 0, 9, 0, 5, 0, 8, 198, 18, 0, 2, 0xc0, 0x01, 0, 16, 0, 0, 0, 1, 0, 5, 0, 8, 198, 18, 0, 9];
    let asconf_ack = [0, 0, 0, 9, 0xc0, 0x05, 0, 8, 0, 0, 0, 1];
    let replies = count(&h, node, "reply-translated");
    assert!(h.frame(0, sctp_frame(client, 50_005, vip, PORT, 0x0a0b_0c0d, &[(Unknown(0x0f), &auth), (Asconf, &asconf)], false)).is_empty());
    let ack = sctp_frame(
        backend,
        PORT,
        snat_src,
        snat_port,
        0x0102_0304,
        &[(Unknown(0x0f), &auth), (AsconfAck, &asconf_ack), (Sack, &[0; 12])],
        false,
    );
    assert!(h.frame(0, ack).is_empty());
    assert_eq!(count(&h, node, "sctp-asconf-dropped"), 2);
    assert_eq!(count(&h, node, "reply-translated"), replies);
    let (_, dst, _) = one(&mut h, sctp_frame(client, 50_005, vip, PORT, 0x0a0b_0c0d, &[(Data, b"NGSetupRequest")], false));
    assert_eq!(dst, backend);
    let (src, dst, _) = one(&mut h, sctp_frame(backend, PORT, snat_src, snat_port, 0x0102_0304, &[(Sack, &[0; 12])], false));
    assert_eq!((src, dst), (vip, client));
    assert_eq!(count(&h, node, "sctp-asconf-dropped"), 2);

    // A local sender's INIT whose CRC32c was left to the device (a vnet header's partial
    // checksum at the SCTP checksum field, the field zero): computed by the balancer, and
    // no longer pending (the memory device completes a pending one as an Internet
    // checksum, as a device or ip4-fragment would).
    let mut f = sctp_frame(client, 50_002, vip, PORT, 0, &[(Init, INIT)], false);
    let l4 = 14 + if client.is_ipv4() { 20 } else { 40 };
    f.bytes[l4 + 8..l4 + 12].fill(0);
    f.vnet = Some(io::vnet::VnetHdr { flags: io::vnet::F_NEEDS_CSUM, csum_start: l4 as u16, csum_offset: 8, ..Default::default() });
    let news = count(&h, node, "new-session");
    let (_, _, s) = one(&mut h, f);
    assert!(SctpPacket::new_checked(&s[..]).unwrap().verify_checksum(), "the CRC32c the sender left, computed");
    assert_eq!(count(&h, node, "new-session"), news + 1);
}

#[test]
fn an_sctp_association_over_ipv4() {
    let b = |h| IpAddr::V4(Ipv4Addr::new(198, 19, 1, h));
    association(
        Ipv4Addr::new(198, 18, 0, 2).into(),
        Ipv4Addr::new(198, 18, 131, 50).into(),
        [b(10), b(11)],
        Ipv4Addr::new(198, 18, 1, 1).into(),
        "lb4-nat",
    );
}

#[test]
fn an_sctp_association_over_ipv6() {
    let b = |h| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x98, 0, 0, 0, 0, h));
    let a = |s: &str| s.parse::<IpAddr>().unwrap();
    association(a("2001:db8::2"), a("2001:db8:128::50"), [b(0x10), b(0x11)], a("2001:db8:1::1"), "lb6-nat");
}

/// A `Local` service keeps the client's address: its backend's replies come forwarded
/// to the client and are translated there (`lbN-nat`'s forwarded path). An ASCONF-ACK
/// among them is dropped as on the SNAT path; a reply after it still goes.
#[test]
fn an_asconf_in_a_local_associations_reply_is_dropped() {
    use ChunkType::*;
    let mut h = Harness::new();
    let vip = IpAddr::V4(Ipv4Addr::new(198, 18, 131, 52));
    let client = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
    let mut spec = ServiceSpec::new("t/amf-local:ngap", lb::ServiceType::ClusterIp, vip, PORT, lb::Protocol::Sctp);
    spec.traffic_policy = lb::TrafficPolicy::Local;
    spec.backends =
        [30, 31].iter().map(|&b| BackendSpec { local: true, ..BackendSpec::new(Ipv4Addr::new(198, 19, 1, b).into(), PORT) }).collect();
    let r = h.control.handle(&Request::LbServiceAdd(spec));
    assert!(r.ok, "{r:?}");
    let out = h.frame(0, sctp_frame(client, 40_000, vip, PORT, 0, &[(Init, INIT)], false));
    assert_eq!(out.len(), 1);
    let (src, backend, _) = sent(&out[0].1.bytes);
    assert_eq!(src, client, "Local: the client's address kept");
    let reply = |chunks: &[(ChunkType, &[u8])]| sctp_frame(backend, PORT, client, 40_000, 0x0102_0304, chunks, false);
    let auth = [[0, 0, 0, 1].as_slice(), &[0x11; 20]].concat();
    assert!(h.frame(0, reply(&[(Unknown(0x0f), &auth), (AsconfAck, &[0, 0, 0, 9, 0xc0, 0x05, 0, 8, 0, 0, 0, 1])])).is_empty());
    assert_eq!(count(&h, "lb4-nat", "sctp-asconf-dropped"), 1);
    assert_eq!(count(&h, "lb4-nat", "reply-translated"), 0);
    let out = h.frame(0, reply(&[(Sack, &[0; 12])]));
    assert_eq!(out.len(), 1);
    assert_eq!(sent(&out[0].1.bytes).0, vip, "the reply as the service's");
    assert_eq!(count(&h, "lb4-nat", "reply-translated"), 1);
}

/// Direct server return carries SCTP as it carries TCP and UDP (the encapsulation does
/// not look past the ports): an association's packets (an ASCONF too) go unchanged, CRC32c and all,
/// inside GRE to the backend Maglev picks, the later ones by the session.
#[test]
fn an_sctp_association_by_direct_server_return() {
    use ChunkType::*;
    let mut h = Harness::new();
    let vip = IpAddr::V4(Ipv4Addr::new(198, 18, 131, 51));
    let client = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
    let mut spec = ServiceSpec::new("t/amf-dsr:ngap", lb::ServiceType::LoadBalancer, vip, PORT, lb::Protocol::Sctp);
    spec.forwarding = lb::Forwarding::Gre;
    spec.backends = [20, 21].iter().map(|&b| BackendSpec::new(Ipv4Addr::new(198, 19, 1, b).into(), PORT)).collect();
    let r = h.control.handle(&Request::LbServiceAdd(spec));
    assert!(r.ok, "{r:?}");
    for sport in [40_000, 40_001, 40_002, 40_003] {
        let want = match maglev_pick(&h, client, sport, vip) {
            IpAddr::V4(a) => a,
            _ => unreachable!(),
        };
        // An ASCONF too: the backend meets the client without a translation between.
        let asconf: &[u8] = &[0, 0, 0, 9, 0, 5, 0, 8, 198, 18, 0, 2, 0xc0, 0x01, 0, 16, 0, 0, 0, 1, 0, 5, 0, 8, 198, 18, 0, 9];
        for (tag, chunks) in [
            (0, &[(Init, INIT)][..]),
            (0x5566_7788, &[(CookieEcho, &b"cookie!!"[..]), (Data, &b"NGSetupRequest"[..])][..]),
            (0x5566_7788, &[(Unknown(0x0f), &[0u8; 24][..]), (Asconf, asconf)][..]),
        ] {
            let f = sctp_frame(client, sport, vip, PORT, tag, chunks, false);
            let inner = f.bytes[14..].to_vec();
            let out = h.frame(0, f);
            assert_eq!(out.len(), 1);
            let o = wire::ipv4::Ipv4Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
            assert_eq!((o.protocol(), o.dst_addr()), (wire::IpProtocol::Gre, want), "port {sport}");
            // GRE's 4-byte header, then the client's packet as it came.
            assert_eq!(&o.payload()[4..], &inner[..], "unchanged inside");
        }
    }
    assert_eq!(count(&h, "lb4-nat", "new-session"), 4);
    assert_eq!(count(&h, "lb4-nat", "encapsulated"), 12);
    assert_eq!(count(&h, "lb4-nat", "sctp-asconf-dropped"), 0);
}

/// Direct server return of a packet whose CRC32c its sender left to the device (a local
/// Linux sender's, by a vnet header's partial checksum; the field zero): the backend
/// gets the packet inside the tunnel and checks the CRC32c itself, so the balancer
/// computes it before the outer headers go on, and leaves nothing pending (a device,
/// or the outer UDP checksum of GUE over IPv6, would complete a pending one as an
/// Internet checksum inside the CRC32c). The inner packet is the client's with its
/// CRC32c right; GUE's outer UDP checksum covers it as it is. GRE over IPv4 and GUE
/// over IPv6, every packet of the association (a new session and session hits alike).
fn direct_with_crc_left(client: IpAddr, vip: IpAddr, backends: [IpAddr; 2], forwarding: lb::Forwarding, node: &str) {
    use ChunkType::*;
    let mut h = Harness::new();
    let mut spec = ServiceSpec::new("t/amf-dsr:ngap", lb::ServiceType::LoadBalancer, vip, PORT, lb::Protocol::Sctp);
    spec.forwarding = forwarding;
    spec.backends = backends.iter().map(|&a| BackendSpec::new(a, PORT)).collect();
    let r = h.control.handle(&Request::LbServiceAdd(spec));
    assert!(r.ok, "{r:?}");
    let l4 = 14 + if client.is_ipv4() { 20 } else { 40 };
    for sport in [40_000, 40_001] {
        let want = maglev_pick(&h, client, sport, vip);
        for (tag, chunks) in [
            (0, &[(Init, INIT)][..]),
            (0x5566_7788, &[(CookieEcho, &b"cookie!!"[..]), (Data, &b"NGSetupRequest"[..])][..]),
            (0x5566_7788, &[(Heartbeat, &b"hb-info!"[..])][..]),
        ] {
            let mut f = sctp_frame(client, sport, vip, PORT, tag, chunks, false);
            // The client's packet as it should arrive: with its CRC32c.
            let whole = f.bytes[14..].to_vec();
            f.bytes[l4 + 8..l4 + 12].fill(0);
            f.vnet = Some(io::vnet::VnetHdr { flags: io::vnet::F_NEEDS_CSUM, csum_start: l4 as u16, csum_offset: 8, ..Default::default() });
            let out = h.frame(0, f);
            assert_eq!(out.len(), 1, "port {sport}, {chunks:?}");
            let o = &out[0].1.bytes[14..];
            let (dst, inner) = match (o[0] >> 4, forwarding) {
                (4, lb::Forwarding::Gre) => {
                    let p = Ipv4Packet::new_checked(o).unwrap();
                    assert_eq!(p.protocol(), IpProtocol::Gre);
                    (IpAddr::from(p.dst_addr()), p.payload()[4..].to_vec())
                }
                (6, lb::Forwarding::Gue) => {
                    let p = Ipv6Packet::new_checked(o).unwrap();
                    assert_eq!(p.next_header(), IpProtocol::Udp);
                    let u = p.payload();
                    assert_eq!(u16::from_be_bytes([u[2], u[3]]), 6080, "GUE's port");
                    let mut c = wire::checksum::pseudo_header_v6(&p.src_addr(), &p.dst_addr(), 17, u.len() as u32);
                    c.add_bytes(u);
                    assert_eq!(c.finish(), 0, "the outer UDP checksum, over the inner packet as sent");
                    (IpAddr::from(p.dst_addr()), u[8 + 4..].to_vec())
                }
                other => unreachable!("{other:?}"),
            };
            assert_eq!(dst, want, "to Maglev's backend, port {sport}");
            let ql4 = if client.is_ipv4() { 20 } else { 40 };
            assert!(SctpPacket::new_checked(&inner[ql4..]).unwrap().verify_checksum(), "the CRC32c inside the tunnel, {chunks:?}");
            assert_eq!(inner, whole, "the client's packet, its CRC32c computed, nothing else changed");
        }
    }
    assert_eq!(count(&h, node, "new-session"), 2);
    assert_eq!(count(&h, node, "encapsulated"), 6);
    assert_eq!(count(&h, node, "sctp-bad-checksum"), 0);
}

#[test]
fn direct_server_return_computes_a_crc32c_left_to_the_device() {
    let b4 = |h| IpAddr::V4(Ipv4Addr::new(198, 19, 1, h));
    direct_with_crc_left(
        Ipv4Addr::new(198, 18, 0, 2).into(),
        Ipv4Addr::new(198, 18, 131, 51).into(),
        [b4(20), b4(21)],
        lb::Forwarding::Gre,
        "lb4-nat",
    );
    let b6 = |h| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x98, 0, 0, 0, 0, h));
    let a = |s: &str| s.parse::<IpAddr>().unwrap();
    direct_with_crc_left(a("2001:db8::2"), a("2001:db8:128::51"), [b6(0x20), b6(0x21)], lb::Forwarding::Gue, "lb6-nat");
}
