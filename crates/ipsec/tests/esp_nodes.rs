//! The encrypt and decrypt steps of the ESP nodes against each other: every algorithm,
//! IPv4 and IPv6 outer and inner headers, with and without UDP encapsulation; and each
//! drop reason the decrypt node names (replay, bad ICV, wrong SPI, keep-alive, ...).
//! scapy and tshark check the same packets independently (tests/test_ipsec.py).

use arc_swap::ArcSwap;
use engine::{Buffer, Pool};
use ip::outer::{Ip4Outer, Ip6Outer};
use ipsec::nodes::decrypt::{decrypt, EspDecryptCounter as D, EspDecryptNext};
use ipsec::nodes::encrypt::{encrypt, encrypt_padded, encrypt_transport};
use ipsec::nodes::EspOuter;
use ipsec::{Algorithm, Direction, IpsecContext, IpsecState, Lifetime, Mode, SaSpec, UdpEncapPorts};
use std::net::IpAddr;
use std::sync::Arc;

const SPI: u32 = 0x1234;

fn spec(alg: Algorithm, dir: Direction, local: &str, remote: &str, udp: bool, esn: bool) -> SaSpec {
    SaSpec {
        spi: SPI,
        direction: dir,
        mode: Mode::Tunnel,
        alg,
        enc_key: (0..alg.enc_key_lens()[0] as u8).collect(),
        integ_key: (0..alg.integ_key_len() as u8).map(|i| i ^ 0x33).collect(),
        esn,
        anti_replay: true,
        lifetime: Lifetime::default(),
        local: local.parse().unwrap(),
        remote: remote.parse().unwrap(),
        udp_encap: udp.then(UdpEncapPorts::default),
        urpf: ip::urpf::Urpf::Off,
        mtu: Default::default(),
        dscp: Default::default(),
    }
}

/// Two ends: `a` sends with outbound SA 0, `b` receives with inbound SA 0 (same keys).
struct Pair {
    a: IpsecState,
    b: IpsecContext,
}

fn pair(alg: Algorithm, v6: bool, udp: bool, esn: bool) -> Pair {
    pair_in(Mode::Tunnel, alg, v6, udp, esn)
}

/// The two ends' addresses: `a` is the first, `b` the second.
fn ends(v6: bool) -> (&'static str, &'static str) {
    if v6 {
        ("2001:db8:1::1", "2001:db8:1::2")
    } else {
        ("198.18.1.1", "198.18.1.2")
    }
}

fn pair_in(mode: Mode, alg: Algorithm, v6: bool, udp: bool, esn: bool) -> Pair {
    let (x, y) = ends(v6);
    let mut a = IpsecState::new();
    a.add(0, SaSpec { mode, ..spec(alg, Direction::Outbound, x, y, udp, esn) }, [9; 16]).unwrap();
    let mut b = IpsecState::new();
    b.add(0, SaSpec { mode, ..spec(alg, Direction::Inbound, y, x, udp, esn) }, [9; 16]).unwrap();
    Pair { a, b: IpsecContext::new(Arc::new(ArcSwap::from_pointee(b.build()))) }
}

fn inner(v6: bool, len: usize) -> Vec<u8> {
    let mut p = if v6 {
        let mut h = vec![0x60, 0, 0, 0, 0, 0, 59, 64];
        h.extend_from_slice(&"2001:db8:9::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        h.extend_from_slice(&"2001:db8:9::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        h
    } else {
        vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 19, 0, 1, 198, 19, 0, 2]
    };
    let hl = p.len();
    p.extend((0..len.saturating_sub(hl)).map(|i| i as u8));
    let total = p.len() as u16;
    if v6 {
        p[4..6].copy_from_slice(&(total - 40).to_be_bytes());
    } else {
        p[2..4].copy_from_slice(&total.to_be_bytes());
        let c = wire::checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
    p
}

/// Run `f` on a buffer holding `bytes` (large when they need it), then free it.
fn with_buffer<R>(pool: &mut Pool, bytes: &[u8], f: impl FnOnce(&mut Buffer) -> R) -> R {
    let i = pool.alloc(bytes.len() + 64).unwrap();
    let b = pool.get_mut(i);
    b.write(bytes).unwrap();
    let r = f(b);
    pool.free(i);
    r
}

fn seal<O: EspOuter>(p: &Pair, pool: &mut Pool, plain: &[u8]) -> Vec<u8> {
    let sa = p.a.get(0).unwrap();
    let (seq, _) = sa.outbound.next(plain.len() as u64, sa.spec.esn, &sa.spec.lifetime).unwrap();
    with_buffer(pool, plain, |b| {
        encrypt::<O>(sa, seq, plain[0] >> 4 == 4, b).unwrap();
        b.bytes().to_vec()
    })
}

fn open<O: EspOuter>(p: &mut Pair, pool: &mut Pool, wire: &[u8]) -> Result<(EspDecryptNext, Vec<u8>), D> {
    with_buffer(pool, wire, |b| decrypt::<O>(&mut p.b, b).map(|(n, _, _)| (n, b.bytes().to_vec())))
}

fn round_trip<O: EspOuter>(alg: Algorithm, udp: bool, esn: bool) {
    let mut pool = Pool::new(8, 2);
    let mut p = pair(alg, O::IS_V6, udp, esn);
    for (inner_v6, len) in [(false, 20), (false, 77), (true, 40), (true, 1400), (false, 3000)] {
        let plain = inner(inner_v6, len);
        let w = seal::<O>(&p, &mut pool, &plain);
        let outer_proto = if O::IS_V6 { w[6] } else { w[9] };
        assert_eq!(outer_proto, if udp { 17 } else { 50 }, "{alg} udp {udp}");
        let (next, got) = open::<O>(&mut p, &mut pool, &w).unwrap_or_else(|e| panic!("{alg} v6 {} udp {udp}: {e:?}", O::IS_V6));
        assert_eq!(next, if inner_v6 { EspDecryptNext::Ip6Lookup } else { EspDecryptNext::Ip4Lookup });
        assert_eq!(got, plain, "{alg}");
        assert_eq!(open::<O>(&mut p, &mut pool, &w).unwrap_err(), D::Replay, "the same packet again");
    }
}

#[test]
fn every_algorithm_round_trips_over_both_families_with_and_without_udp() {
    for alg in Algorithm::ALL {
        for udp in [false, true] {
            round_trip::<Ip4Outer>(alg, udp, false);
            round_trip::<Ip6Outer>(alg, udp, true);
        }
    }
}

/// The encrypt node's block padding (`Algorithm::block_align`): AES-GCM's ciphertext in
/// whole AES blocks, which the receiving end opens like any other (the padding is the
/// sender's choice, RFC 4303 §2.4; the decrypt step checks its bytes are 1, 2, 3, ...).
#[test]
fn block_padded_gcm_fills_whole_blocks_and_opens() {
    for alg in [Algorithm::AesGcm128, Algorithm::AesGcm256] {
        assert_eq!(alg.block_align(), 16);
        let mut pool = Pool::new(8, 2);
        let mut p = pair(alg, false, false, false);
        for len in [20, 62, 64, 77, 1400] {
            let plain = inner(false, len);
            let sa = p.a.get(0).unwrap();
            let (seq, _) = sa.outbound.next(plain.len() as u64, false, &sa.spec.lifetime).unwrap();
            let w = with_buffer(&mut pool, &plain, |b| {
                let tc = ip::outer::tos::traffic_class(b.bytes());
                encrypt_padded::<Ip4Outer>(sa, seq, true, tc, 16, b).unwrap();
                b.bytes().to_vec()
            });
            // Outer header 20, ESP header 8, IV 8, ICV 16; the ciphertext between.
            let text = w.len() - 20 - 8 - 8 - 16;
            assert!(text % 16 == 0 && text >= len + 2 && text < len + 2 + 16, "{alg} {len}: {text} bytes of ciphertext");
            let (_, got) = open::<Ip4Outer>(&mut p, &mut pool, &w).unwrap_or_else(|e| panic!("{alg} {len}: {e:?}"));
            assert_eq!(got, plain, "{alg} {len}");
        }
    }
    assert_eq!(Algorithm::Chacha20Poly1305.block_align(), Algorithm::Chacha20Poly1305.layout().align);
}

/// A packet between the two ends themselves (transport mode's kind): `inner` with the
/// ends' addresses, an IPv4 one with `options` bytes of options (NOPs).
fn host_packet(v6: bool, len: usize, options: usize) -> Vec<u8> {
    let (x, y) = ends(v6);
    let mut p = inner(v6, len);
    if v6 {
        p[8..24].copy_from_slice(&x.parse::<std::net::Ipv6Addr>().unwrap().octets());
        p[24..40].copy_from_slice(&y.parse::<std::net::Ipv6Addr>().unwrap().octets());
        p[6] = 17;
        return p;
    }
    p.splice(20..20, std::iter::repeat_n(1u8, options));
    p[0] = 0x45 + (options / 4) as u8;
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[12..16].copy_from_slice(&x.parse::<std::net::Ipv4Addr>().unwrap().octets());
    p[16..20].copy_from_slice(&y.parse::<std::net::Ipv4Addr>().unwrap().octets());
    p[10..12].fill(0);
    let c = wire::checksum::checksum(&p[..20 + options]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn transport_mode_round_trips_with_the_packets_own_header() {
    let mut pool = Pool::new(8, 2);
    for alg in Algorithm::ALL {
        for (v6, udp) in [(false, false), (false, true), (true, false), (true, true)] {
            let mut p = pair_in(Mode::Transport, alg, v6, udp, false);
            for (len, options) in [(28, 0), (99, 0), (1400, 0), (60, 8)] {
                let plain = host_packet(v6, len, if v6 { 0 } else { options });
                let hl = if v6 { 40 } else { 20 + options };
                let sa = p.a.get(0).unwrap();
                let (seq, _) = sa.outbound.next(plain.len() as u64, false, &sa.spec.lifetime).unwrap();
                let w = with_buffer(&mut pool, &plain, |b| {
                    if v6 {
                        encrypt_transport::<Ip6Outer>(sa, seq, b).unwrap();
                    } else {
                        encrypt_transport::<Ip4Outer>(sa, seq, b).unwrap();
                    }
                    b.bytes().to_vec()
                });
                let what = format!("{alg} v6 {v6} udp {udp} len {len}");
                // The packet's own header, naming ESP (or UDP) and the new length.
                let l = alg.layout();
                let esp_len = 8 + l.iv_len + l.pad_len(plain.len() - hl) + (plain.len() - hl) + 2 + l.icv_len;
                assert_eq!(w.len(), hl + if udp { 8 } else { 0 } + esp_len, "{what}");
                if v6 {
                    assert_eq!((w[6], u16::from_be_bytes([w[4], w[5]]) as usize), (if udp { 17 } else { 50 }, w.len() - 40), "{what}");
                    assert_eq!(w[8..40], plain[8..40]);
                } else {
                    assert_eq!((w[9], u16::from_be_bytes([w[2], w[3]]) as usize), (if udp { 17 } else { 50 }, w.len()), "{what}");
                    assert_eq!(wire::checksum::checksum(&w[..hl]), 0, "{what}: header checksum");
                    assert_eq!(w[12..hl], plain[12..hl]);
                }
                let got = if v6 { open::<Ip6Outer>(&mut p, &mut pool, &w) } else { open::<Ip4Outer>(&mut p, &mut pool, &w) };
                let (next, got) = got.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                assert_eq!(next, if v6 { EspDecryptNext::Ip6Lookup } else { EspDecryptNext::Ip4Lookup });
                assert_eq!(got, plain, "{what}");
                let again = if v6 { open::<Ip6Outer>(&mut p, &mut pool, &w) } else { open::<Ip4Outer>(&mut p, &mut pool, &w) };
                assert_eq!(again.unwrap_err(), D::Replay, "{what}");
            }
            // Both ends count the same bytes of the same packets: each packet whole, its
            // own header too (as the encrypt node counts it), not the receiver its payload only.
            let (sent, taken) = (&p.a.get(0).unwrap().outbound, &p.b.inbound_counts()[0]);
            assert_eq!((taken.packets, taken.bytes), (sent.packets(), sent.bytes()), "{alg} v6 {v6} udp {udp}");
        }
    }
}

#[test]
fn transport_mode_refuses_what_it_cannot_place() {
    use ipsec::nodes::encrypt::EspEncryptCounter as E;
    let mut pool = Pool::new(8, 0);
    let p = pair_in(Mode::Transport, Algorithm::AesGcm128, true, false, false);
    let sa = p.a.get(0).unwrap();
    let mut hop_by_hop = host_packet(true, 80, 0);
    hop_by_hop[6] = 0;
    let r = with_buffer(&mut pool, &hop_by_hop, |b| encrypt_transport::<Ip6Outer>(sa, 1, b));
    assert_eq!(r, Err(E::TransportExtHeader));
    let r = with_buffer(&mut pool, &host_packet(false, 80, 0), |b| encrypt_transport::<Ip6Outer>(sa, 1, b));
    assert_eq!(r, Err(E::BadInner), "an IPv4 packet for an IPv6 SA");
}

#[test]
fn drops_are_named() {
    let mut pool = Pool::new(8, 0);
    let mut p = pair(Algorithm::AesGcm128, false, true, false);
    let plain = inner(false, 60);
    let w = seal::<Ip4Outer>(&p, &mut pool, &plain);
    // A flipped ciphertext bit: the ICV fails, and the window does not move.
    let mut bad = w.clone();
    let n = bad.len();
    bad[n - 20] ^= 4;
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &bad).unwrap_err(), D::BadIcv);
    assert!(open::<Ip4Outer>(&mut p, &mut pool, &w).is_ok(), "the genuine packet still gets in");
    // Another SPI.
    let mut other = seal::<Ip4Outer>(&p, &mut pool, &plain);
    other[28..32].copy_from_slice(&0x9999u32.to_be_bytes());
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &other).unwrap_err(), D::NoSa);
    // SPI 0 is the non-ESP marker in UDP; 1-255 are reserved.
    let mut marker = w.clone();
    marker[28..32].copy_from_slice(&[0, 0, 0, 0]);
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &marker).unwrap_err(), D::IkeNotHandled);
    let mut reserved = w.clone();
    reserved[28..32].copy_from_slice(&[0, 0, 0, 7]);
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &reserved).unwrap_err(), D::BadSpi);
    // A NAT keep-alive: IP, UDP, one byte 0xff.
    let mut ka = w[..29].to_vec();
    ka[28] = 0xff;
    ka[2..4].copy_from_slice(&29u16.to_be_bytes());
    ka[24..26].copy_from_slice(&9u16.to_be_bytes());
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &ka).unwrap_err(), D::NatKeepalive);
    // Cut short: by 30 bytes the ciphertext is no longer whole 4-byte words; by 32 it is,
    // and the ICV (now read from the ciphertext) fails.
    let fresh = seal::<Ip4Outer>(&p, &mut pool, &plain);
    let cut = |n: usize| {
        let mut c = fresh[..fresh.len() - n].to_vec();
        let ul = (c.len() - 20) as u16;
        c[24..26].copy_from_slice(&ul.to_be_bytes());
        c[2..4].copy_from_slice(&(ul + 20).to_be_bytes());
        c
    };
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &cut(30)).unwrap_err(), D::Unaligned);
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &cut(32)).unwrap_err(), D::BadIcv);
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &cut(w.len() - 20 - 8 - 8)).unwrap_err(), D::Truncated);
    // From another peer address: not this SA.
    let mut spoof = seal::<Ip4Outer>(&p, &mut pool, &plain);
    spoof[15] = 99;
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &spoof).unwrap_err(), D::NoSa);
}

/// A decrypted packet carries none of the marks the receiving device put on the ESP
/// packet (`decrypt`'s `plaintext`), in either mode, with and without UDP: not its word
/// that it verified the L4 checksum (the outer UDP's), not GSO, not a partial checksum,
/// whether it lay in the stripped headers (the outer UDP's) or inside the ciphertext.
#[test]
fn a_decrypted_packet_keeps_none_of_the_outer_packets_marks() {
    use engine::{GsoKind, Offload};
    let mut pool = Pool::new(8, 2);
    for alg in Algorithm::ALL {
        for mode in [Mode::Tunnel, Mode::Transport] {
            for (v6, udp) in [(false, false), (false, true), (true, false), (true, true)] {
                let mut p = pair_in(mode, alg, v6, udp, false);
                let plain = if mode == Mode::Tunnel { inner(!v6, 120) } else { host_packet(v6, 120, 0) };
                let hl = if v6 { 40 } else { 20 };
                // The outer UDP's checksum pending, or one a bad vnet header put inside
                // the ciphertext; both as a local sender's GSO frame says.
                for pending in [hl, hl + 24] {
                    let sa = p.a.get(0).unwrap();
                    let (seq, _) = sa.outbound.next(plain.len() as u64, false, &sa.spec.lifetime).unwrap();
                    let w = with_buffer(&mut pool, &plain, |b| {
                        match (mode, v6) {
                            (Mode::Tunnel, false) => encrypt::<Ip4Outer>(sa, seq, plain[0] >> 4 == 4, b).unwrap(),
                            (Mode::Tunnel, true) => encrypt::<Ip6Outer>(sa, seq, plain[0] >> 4 == 4, b).unwrap(),
                            (Mode::Transport, false) => encrypt_transport::<Ip4Outer>(sa, seq, b).unwrap(),
                            (Mode::Transport, true) => encrypt_transport::<Ip6Outer>(sa, seq, b).unwrap(),
                        };
                        b.bytes().to_vec()
                    });
                    let what = format!("{alg} {mode:?} v6 {v6} udp {udp} pending at {pending}");
                    let (next, got, marks) = with_buffer(&mut pool, &w, |b| {
                        b.meta.l4_checksum_ok = true;
                        b.meta.offload = Offload { gso: GsoKind::UdpL4, gso_size: 1000, ..Default::default() };
                        b.set_partial_checksum(pending, 6);
                        let r = if v6 { decrypt::<Ip6Outer>(&mut p.b, b) } else { decrypt::<Ip4Outer>(&mut p.b, b) };
                        let (next, _, _) = r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                        (next, b.bytes().to_vec(), (b.meta.l4_checksum_ok, b.meta.offload))
                    });
                    assert_eq!(got, plain, "{what}");
                    assert_eq!(next == EspDecryptNext::Ip6Lookup, plain[0] >> 4 == 6, "{what}");
                    assert_eq!(marks, (false, Offload::default()), "{what}");
                }
            }
        }
    }
}

#[test]
fn packets_far_behind_the_window_are_too_old() {
    let mut pool = Pool::new(8, 0);
    let mut p = pair(Algorithm::Chacha20Poly1305, true, false, false);
    let plain = inner(true, 80);
    let first = seal::<Ip6Outer>(&p, &mut pool, &plain);
    let mut last = Vec::new();
    for _ in 0..1100 {
        last = seal::<Ip6Outer>(&p, &mut pool, &plain);
    }
    assert!(open::<Ip6Outer>(&mut p, &mut pool, &last).is_ok());
    assert_eq!(open::<Ip6Outer>(&mut p, &mut pool, &first).unwrap_err(), D::TooOld);
}

#[test]
fn without_anti_replay_a_resent_packet_is_taken() {
    let mut pool = Pool::new(8, 0);
    let mut p = pair(Algorithm::AesGcm128, false, false, false);
    let mut b = IpsecState::new();
    let s = SaSpec { anti_replay: false, ..spec(Algorithm::AesGcm128, Direction::Inbound, "198.18.1.2", "198.18.1.1", false, false) };
    b.add(0, s, [0; 16]).unwrap();
    p.b = IpsecContext::new(Arc::new(ArcSwap::from_pointee(b.build())));
    let w = seal::<Ip4Outer>(&p, &mut pool, &inner(false, 50));
    for _ in 0..3 {
        assert!(open::<Ip4Outer>(&mut p, &mut pool, &w).is_ok());
    }
    let mut bad = w.clone();
    bad[40] ^= 1;
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &bad).unwrap_err(), D::BadIcv, "the ICV still holds");
}

#[test]
fn hard_lifetime_stops_the_inbound_sa() {
    let mut pool = Pool::new(8, 0);
    let mut p = pair(Algorithm::NullSha256, false, false, false);
    let mut b = IpsecState::new();
    let s = SaSpec {
        lifetime: Lifetime { hard_packets: 2, ..Default::default() },
        ..spec(Algorithm::NullSha256, Direction::Inbound, "198.18.1.2", "198.18.1.1", false, false)
    };
    b.add(0, s, [0; 16]).unwrap();
    p.b = IpsecContext::new(Arc::new(ArcSwap::from_pointee(b.build())));
    let plain = inner(false, 40);
    let ws: Vec<_> = (0..3).map(|_| seal::<Ip4Outer>(&p, &mut pool, &plain)).collect();
    assert!(open::<Ip4Outer>(&mut p, &mut pool, &ws[0]).is_ok());
    assert!(open::<Ip4Outer>(&mut p, &mut pool, &ws[1]).is_ok());
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &ws[2]).unwrap_err(), D::LifetimeExpired);
}

#[test]
fn outer_header_is_what_the_sa_says() {
    let mut pool = Pool::new(8, 0);
    let p = pair(Algorithm::AesGcm256, false, true, false);
    let w = seal::<Ip4Outer>(&p, &mut pool, &inner(false, 100));
    let ip = wire::ipv4::Ipv4Packet::new_checked(&w[..]).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(IpAddr::V4(ip.src_addr()), "198.18.1.1".parse::<IpAddr>().unwrap());
    assert_eq!(IpAddr::V4(ip.dst_addr()), "198.18.1.2".parse::<IpAddr>().unwrap());
    assert_eq!(ip.total_len(), w.len());
    assert_eq!(&w[20..24], &[0x11, 0x94, 0x11, 0x94], "UDP 4500 -> 4500");
    assert_eq!(u16::from_be_bytes([w[24], w[25]]) as usize, w.len() - 20);
    assert_eq!(u32::from_be_bytes(w[28..32].try_into().unwrap()), SPI);
    assert_eq!(u32::from_be_bytes(w[32..36].try_into().unwrap()), 1, "the first sequence number is 1");
    // 100 bytes of payload + 2 of trailer, padded to 4: 104; + 8 header + 8 IV + 16 ICV.
    assert_eq!(w.len(), 20 + 8 + 8 + 8 + 104 + 16);
}

/// The outer traffic class under an SA's DSCP policy (RFC 4301 §5.1.2.1: the inner
/// packet's, or the SA's own) over both outer and inner families: the policy's worked
/// examples (`ip::outer::tos::DSCP_POLICY_EXAMPLES`; the ECN field the inner one's,
/// RFC 6040), the IPv4 header checksum right, the IPv6 version and flow label kept; the
/// peer opens the packet to the inner one byte for byte (its traffic class too). A
/// policy changed in place (`IpsecState::set_dscp`) marks the next packet, the sequence
/// numbers going on.
#[test]
fn outer_dscp_by_the_sa_policy() {
    use ip::outer::tos;
    let mut pool = Pool::new(8, 0);
    for v6 in [false, true] {
        let (x, y) = ends(v6);
        for (policy, inner_tc, want) in tos::DSCP_POLICY_EXAMPLES {
            for inner_v6 in [false, true] {
                let mut p = pair(Algorithm::AesGcm128, v6, false, false);
                let mut plain = inner(inner_v6, 60);
                tos::set_traffic_class(&mut plain, inner_tc);
                let what = format!("{policy} over {x}, inner v6 {inner_v6} tc {inner_tc:#x}");
                let seal_any =
                    |p: &Pair, pool: &mut Pool| if v6 { seal::<Ip6Outer>(p, pool, &plain) } else { seal::<Ip4Outer>(p, pool, &plain) };
                // Made with the policy, and changed to it in place from inherit: the same.
                let mut made = IpsecState::new();
                let with_policy = SaSpec { dscp: policy, ..spec(Algorithm::AesGcm128, Direction::Outbound, x, y, false, false) };
                made.add(0, with_policy, [9; 16]).unwrap();
                let none = IpsecContext::new(Arc::new(ArcSwap::from_pointee(IpsecState::new().build())));
                assert_eq!(tos::traffic_class(&seal_any(&Pair { a: made, b: none }, &mut pool)), want, "{what}: made so");
                let before = seal_any(&p, &mut pool);
                assert_eq!(tos::traffic_class(&before), inner_tc, "{what}: inherit first");
                p.a.set_dscp(0, policy).unwrap();
                let w = seal_any(&p, &mut pool);
                assert_eq!(tos::traffic_class(&w), want, "{what}");
                if v6 {
                    assert_eq!(u32::from_be_bytes(w[..4].try_into().unwrap()) & 0xf00f_ffff, 0x6000_0000, "{what}");
                    assert_eq!(u32::from_be_bytes(w[44..48].try_into().unwrap()), 2, "{what}: the sequence numbers go on");
                } else {
                    assert!(wire::ipv4::Ipv4Packet::new_checked(&w[..]).unwrap().verify_checksum(), "{what}");
                    assert_eq!(u32::from_be_bytes(w[24..28].try_into().unwrap()), 2, "{what}: the sequence numbers go on");
                }
                let got = if v6 { open::<Ip6Outer>(&mut p, &mut pool, &w) } else { open::<Ip4Outer>(&mut p, &mut pool, &w) };
                assert_eq!(got.map(|(_, g)| g), Ok(plain.clone()), "{what}");
            }
        }
    }
}

/// A peer behind a NAT that rebound (or MOBIKE) moves both ends' SAs in place
/// (`IpsecState::set_endpoints`): the outbound SA's packets leave with the new outer
/// addresses and UDP ports and its sequence numbers go on; the inbound SA keeps its
/// replay window and counts (the worker knows it by its counters, the same `Arc`) and
/// takes the peer's packets from its new address only.
#[test]
fn moved_sas_keep_their_sequence_numbers_and_replay_window() {
    let mut pool = Pool::new(8, 0);
    let (x, y) = ends(false);
    let alg = Algorithm::AesGcm128;
    let mut a = IpsecState::new();
    a.add(0, spec(alg, Direction::Outbound, x, y, true, false), [9; 16]).unwrap();
    let mut b = IpsecState::new();
    b.add(0, spec(alg, Direction::Inbound, y, x, true, false), [9; 16]).unwrap();
    let shared = Arc::new(ArcSwap::from_pointee(b.build()));
    let mut p = Pair { a, b: IpsecContext::new(Arc::clone(&shared)) };
    let plain = inner(false, 100);
    let before: Vec<_> = (0..3).map(|_| seal::<Ip4Outer>(&p, &mut pool, &plain)).collect();
    for w in &before[..2] {
        open::<Ip4Outer>(&mut p, &mut pool, w).unwrap();
    }
    let (out_id, in_id) = (Arc::clone(&p.a.get(0).unwrap().outbound), Arc::clone(&b.get(0).unwrap().outbound));

    // The sender now shows up as 198.18.1.9 and is reached at UDP port 61000 (its NAT's
    // new mapping); both ends' SAs follow.
    let moved: IpAddr = "198.18.1.9".parse().unwrap();
    p.a.set_endpoints(0, moved, y.parse().unwrap(), Some(UdpEncapPorts { src: 4500, dst: 61000 })).unwrap();
    b.set_endpoints(0, y.parse().unwrap(), moved, Some(UdpEncapPorts::default())).unwrap();
    shared.store(Arc::new(b.build()));
    assert!(p.b.refresh());
    assert!(Arc::ptr_eq(&out_id, &p.a.get(0).unwrap().outbound) && Arc::ptr_eq(&in_id, &b.get(0).unwrap().outbound));

    let w = seal::<Ip4Outer>(&p, &mut pool, &plain);
    let ip = wire::ipv4::Ipv4Packet::new_checked(&w[..]).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!((IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr())), (moved, y.parse().unwrap()));
    assert_eq!(&w[20..24], &[0x11, 0x94, 0xee, 0x48], "UDP 4500 -> 61000");
    assert_eq!(u32::from_be_bytes(w[32..36].try_into().unwrap()), 4, "the sequence numbers go on");
    assert_eq!(p.a.get(0).unwrap().outbound.packets(), 4);
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &w).map(|(_, got)| got), Ok(plain.clone()));
    // From the old address: no SA any more.
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &before[2]).unwrap_err(), D::NoSa);
    // An old packet from the new address: the window remembers it.
    let mut replayed = before[1].clone();
    replayed[12..16].copy_from_slice(&[198, 18, 1, 9]);
    replayed[10..12].fill(0);
    let c = wire::checksum::checksum(&replayed[..20]);
    replayed[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(open::<Ip4Outer>(&mut p, &mut pool, &replayed).unwrap_err(), D::Replay);
    let counts = p.b.inbound_counts();
    assert_eq!(counts.len(), 1);
    assert!(Arc::ptr_eq(&counts[0].id, &in_id));
    assert_eq!(counts[0].packets, 3, "the counts before the move and after it");

    // The family stays; a port of 0 and an unknown index are refused by name.
    let field = |r: Result<(), ipsec::state::IpsecError>| match r.unwrap_err() {
        ipsec::state::IpsecError::Spec(e) => e.field.to_string(),
        e => e.to_string(),
    };
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    assert_eq!(field(p.a.set_endpoints(0, v6, y.parse().unwrap(), None)), "local");
    assert_eq!(field(p.a.set_endpoints(0, moved, v6, None)), "remote");
    assert_eq!(field(p.a.set_endpoints(0, moved, moved, Some(UdpEncapPorts { src: 0, dst: 4500 }))), "udp_src_port");
    assert_eq!(field(p.a.set_endpoints(7, moved, moved, None)), "index 7: no such SA");
    // Off UDP: plain ESP again, the template rebuilt (protocol 50, checksum right).
    p.a.set_endpoints(0, moved, y.parse().unwrap(), None).unwrap();
    let w = seal::<Ip4Outer>(&p, &mut pool, &plain);
    let ip = wire::ipv4::Ipv4Packet::new_checked(&w[..]).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!((w[9], u32::from_be_bytes(w[24..28].try_into().unwrap())), (50, 5));
}

mod fuzzed {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes after a valid outer header (our SPI or not, any length, raw or in UDP)
        /// are dropped by name or decrypted; nothing panics, and only a packet sealed with
        /// the SA's keys gets through.
        #[test]
        fn decrypt_never_panics_on_arbitrary_esp(body in proptest::collection::vec(any::<u8>(), 0..200), ours: bool, udp: bool,
                                                 alg in proptest::sample::select(Algorithm::ALL.to_vec())) {
            let mut pool = Pool::new(4, 0);
            let mut p = pair(alg, false, udp, false);
            let mut esp = body.clone();
            if ours && esp.len() >= 4 {
                esp[..4].copy_from_slice(&SPI.to_be_bytes());
            }
            let l4 = if udp { 8 } else { 0 };
            let mut w = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, if udp { 17 } else { 50 }, 0, 0, 198, 18, 1, 2, 198, 18, 1, 1];
            let total = (20 + l4 + esp.len()) as u16;
            w[2..4].copy_from_slice(&total.to_be_bytes());
            let c = wire::checksum::checksum(&w);
            w[10..12].copy_from_slice(&c.to_be_bytes());
            if udp {
                w.extend_from_slice(&[0x11, 0x94, 0x11, 0x94]);
                w.extend_from_slice(&((8 + esp.len()) as u16).to_be_bytes());
                w.extend_from_slice(&[0, 0]);
            }
            w.extend_from_slice(&esp);
            let r = open::<Ip4Outer>(&mut p, &mut pool, &w);
            if alg != Algorithm::Null {
                // Random bytes do not carry a valid ICV (2^-128).
                prop_assert!(r.is_err(), "{:?}", r);
            }
        }
    }
}

/// The worker context of the graph test below.
struct Cx {
    ip: ip::IpContext,
    ipsec: IpsecContext,
}
impl engine::worker::Context for Cx {
    fn refresh(&mut self) {
        self.ip.refresh();
        self.ipsec.refresh();
    }
}
impl ip::HasIp for Cx {
    fn ip(&mut self) -> &mut ip::IpContext {
        &mut self.ip
    }
}
impl ipsec::HasIpsec for Cx {
    fn split_ipsec(&mut self) -> (&mut ip::IpContext, &mut IpsecContext) {
        (&mut self.ip, &mut self.ipsec)
    }
}

engine::next_nodes! { enum SinkNext { Drop = "error-drop" } }
engine::counters! { enum SinkCounter { Seen(Info, "seen", "packets the sink took") } }

/// What a [`Sink`] keeps of the packets it is given: each one's bytes.
type Seen = Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// Stands in for a node the encrypt nodes send to: counts what it is given (and keeps
/// it, with a [`Seen`]), then drops it.
struct Sink(&'static str, Option<Seen>);
impl engine::Node<Cx> for Sink {
    type Next = SinkNext;
    type Counter = SinkCounter;
    fn name(&self) -> &'static str {
        self.0
    }
    fn process(&mut self, _: &mut Cx, c: &mut engine::Counts<'_, SinkCounter>, b: &mut Buffer) -> engine::Verdict<SinkNext, SinkCounter> {
        c.inc(SinkCounter::Seen);
        if let Some(seen) = &self.1 {
            seen.lock().unwrap().push(b.bytes().to_vec());
        }
        engine::Verdict::Next(SinkNext::Drop)
    }
}

/// A router with one link, out0 at 198.18.1.1/24 (the SAs' local address).
fn one_link_router() -> ip::state::RouterState {
    let out0 = ip::state::InterfaceSpec {
        name: "out0".into(),
        mac: wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
        mtu: 1500,
        addresses: vec!["198.18.1.1/24".parse().unwrap()],
    };
    ip::state::RouterState::new(vec![out0]).unwrap()
}

/// A worker's context over `router`'s and `state`'s tables (published, so a test can
/// publish changed ones).
fn context(
    router: &mut ip::state::RouterState,
    state: &mut IpsecState,
) -> (Cx, Arc<ArcSwap<ip::tables::Tables>>, Arc<ArcSwap<ipsec::IpsecTables>>) {
    state.refresh_outer(router);
    let ip_tables = Arc::new(ArcSwap::from_pointee(router.build()));
    let ipsec_tables = Arc::new(ArcSwap::from_pointee(state.build()));
    let cx = Cx {
        ip: ip::IpContext::new(Arc::clone(&ip_tables), None, ip::Limits::default()),
        ipsec: IpsecContext::new(Arc::clone(&ipsec_tables)),
    };
    (cx, ip_tables, ipsec_tables)
}

/// The ESP nodes with an input into `node` and a [`Sink`] for every node they send to.
fn esp_graph(node: &str) -> (engine::Graph<Cx>, engine::NodeId) {
    esp_graph_keeping(node, None)
}

/// [`esp_graph`] with the sink of node `keep.0` keeping what it is given.
fn esp_graph_keeping(node: &str, keep: Option<(&'static str, Seen)>) -> (engine::Graph<Cx>, engine::NodeId) {
    let mut sinks: Vec<&'static str> = keep.iter().map(|k| k.0).collect();
    loop {
        let mut g = engine::GraphBuilder::new();
        ipsec::nodes::register(&mut g);
        for &name in &sinks {
            g.add(Sink(name, keep.as_ref().filter(|k| k.0 == name).map(|k| Arc::clone(&k.1))));
        }
        let input = g.add_input("test-input", node);
        match g.build() {
            Ok(graph) => return (graph, input),
            Err(engine::GraphError::UnknownNext { to, .. }) => sinks.push(Box::leak(to.into_boxed_str())),
            Err(e) => panic!("{e}"),
        }
    }
}

/// `esp4-encrypt` keeps the last SA's outer adjacency and link MTU for the next packets
/// of that SA in a vector. Two tunnel SAs leave by links of different MTUs; 1,300-byte
/// inner packets with DF fit the 1,500-byte link's tunnel and not the 1,280-byte one's.
/// Interleaved in one vector each packet gets its own SA's MTU; after SA 0's peer is
/// routed over the smaller link, the next vector (starting with SA 0, as the last one
/// ended) sees the new MTU at once.
#[test]
fn each_packet_gets_its_own_sas_outer_link_and_a_route_change_shows_in_the_next_vector() {
    use ip::state::{InterfaceSpec, RouterState};
    use ip::{Prefix, RouteTarget};
    let link = |name: &str, n: u8, mtu: u16, addr: &str| InterfaceSpec {
        name: name.into(),
        mac: wire::EthernetAddress([2, 0, 0, 0, 0, n]),
        mtu,
        addresses: vec![addr.parse().unwrap()],
    };
    let mut router = RouterState::new(vec![link("out0", 1, 1500, "198.18.1.1/24"), link("out1", 2, 1280, "198.18.2.1/24")]).unwrap();
    let mut state = IpsecState::new();
    let out = Direction::Outbound;
    state.add(0, SaSpec { spi: 0x1000, ..spec(Algorithm::AesGcm128, out, "198.18.1.1", "198.18.1.2", false, false) }, [9; 16]).unwrap();
    state.add(1, SaSpec { spi: 0x1001, ..spec(Algorithm::AesGcm128, out, "198.18.2.1", "198.18.2.2", false, false) }, [9; 16]).unwrap();
    let (mut cx, ip_tables, ipsec_tables) = context(&mut router, &mut state);
    let (mut graph, input) = esp_graph("esp4-encrypt");
    let mut pool = Pool::new(64, 4);
    let mut send = |cx: &mut Cx, sas: &[u32]| {
        let bufs: Vec<engine::BufIdx> = sas
            .iter()
            .map(|&sa| {
                let b = pool.alloc(1400).unwrap();
                pool.get_mut(b).write(&inner(false, 1300)).unwrap();
                pool.get_mut(b).meta.param = sa;
                b
            })
            .collect();
        graph.inject(input, &mut pool, &bufs, 0);
        graph.run(cx, &mut pool);
        let count =
            |name: &str| graph.counter_snapshots().iter().find(|c| c.node == "esp4-encrypt" && c.counter == name).map_or(0, |c| c.count);
        (count("encrypted"), count("inner-too-big"))
    };
    assert_eq!(send(&mut cx, &[0, 1, 0, 0, 1, 1, 0, 1, 0]), (5, 4), "SA 0 over the 1,500-byte link, SA 1 over the 1,280-byte one");
    router
        .add_route(
            "198.18.1.2/32".parse::<Prefix>().unwrap(),
            RouteTarget::Via { next_hop: "198.18.2.2".parse().unwrap(), interface: None },
        )
        .unwrap();
    state.refresh_outer(&mut router);
    ip_tables.store(Arc::new(router.build()));
    ipsec_tables.store(Arc::new(state.build()));
    engine::worker::Context::refresh(&mut cx);
    assert_eq!(send(&mut cx, &[0, 1, 0]), (5, 7), "both SAs over the 1,280-byte link now");
}

/// uRPF on an inbound SA, through `esp4-decrypt`: a decrypted packet's source passes
/// strict when its route back goes into an ESP tunnel to the same peer (the SA's own
/// pair, or a second outbound SA to that peer, as during a rekey), not into a tunnel to
/// another peer nor out of a link; loose passes any route but a blackhole; the gateway's
/// own addresses never pass. Changing the mode in place keeps the replay window.
#[test]
fn urpf_on_an_inbound_sa_checks_what_it_decrypts() {
    use ip::state::{InterfaceSpec, RouterState};
    use ip::urpf::Urpf;
    use ip::{Prefix, RouteTarget};
    let link = |name: &str, n: u8, addrs: &[&str]| InterfaceSpec {
        name: name.into(),
        mac: wire::EthernetAddress([2, 0, 0, 0, 0, n]),
        mtu: 1500,
        addresses: addrs.iter().map(|a| a.parse().unwrap()).collect(),
    };
    let mut router = RouterState::new(vec![
        link("out0", 1, &["198.18.1.1/24", "2001:db8:1::1/64"]),
        link("out1", 2, &["198.18.2.1/24", "2001:db8:2::1/64"]),
    ])
    .unwrap();
    let alg = Algorithm::AesGcm128;
    let (out, inb) = (Direction::Outbound, Direction::Inbound);
    let mut state = IpsecState::new();
    state.add(0, SaSpec { spi: 0x1000, ..spec(alg, out, "198.18.1.1", "198.18.1.2", false, false) }, [9; 16]).unwrap();
    state.add(1, SaSpec { spi: 0x2000, urpf: Urpf::Strict, ..spec(alg, inb, "198.18.1.1", "198.18.1.2", false, false) }, [9; 16]).unwrap();
    state.add(2, SaSpec { spi: 0x1002, ..spec(alg, out, "198.18.1.1", "198.18.1.2", false, false) }, [9; 16]).unwrap();
    state.add(3, SaSpec { spi: 0x1003, ..spec(alg, out, "198.18.1.1", "198.18.1.3", false, false) }, [9; 16]).unwrap();
    let into = |n: u32| RouteTarget::Tunnel(state.tunnel_by_name(&format!("ipsec_tunnel{n}")).unwrap());
    for (p, t) in [
        ("198.19.60.0/24", into(0)),
        ("2001:db8:160::/48", into(0)),
        ("198.19.61.0/24", into(2)),
        ("198.19.62.0/24", into(3)),
        ("198.19.63.0/24", RouteTarget::Blackhole),
    ] {
        router.add_route(p.parse::<Prefix>().unwrap(), t).unwrap();
    }
    let (mut cx, _ip_tables, ipsec_tables) = context(&mut router, &mut state);
    // The peer's end of inbound SA 1: the same keys, sealing what the peer sends.
    let mut peer = IpsecState::new();
    peer.add(0, SaSpec { spi: 0x2000, ..spec(alg, out, "198.18.1.2", "198.18.1.1", false, false) }, [9; 16]).unwrap();
    let peer = Pair { a: peer, b: IpsecContext::new(Arc::new(ArcSwap::from_pointee(IpsecState::new().build()))) };
    let (mut graph, input) = esp_graph("esp4-decrypt");
    let mut pool = Pool::new(64, 4);
    let from = |src: &str| {
        let v6 = src.contains(':');
        let mut p = inner(v6, 100);
        match src.parse::<IpAddr>().unwrap() {
            IpAddr::V4(a) => {
                p[12..16].copy_from_slice(&a.octets());
                p[10..12].fill(0);
                let c = wire::checksum::checksum(&p[..20]);
                p[10..12].copy_from_slice(&c.to_be_bytes());
            }
            IpAddr::V6(a) => p[8..24].copy_from_slice(&a.octets()),
        }
        p
    };
    // Each packet alone: the one counter of esp4-decrypt or the sink that moved.
    let mut send = |cx: &mut Cx, pool: &mut Pool, wire: &[u8]| -> String {
        let before = graph.counter_snapshots();
        let b = pool.alloc(wire.len() + 64).unwrap();
        pool.get_mut(b).write(wire).unwrap();
        graph.inject(input, pool, &[b], 0);
        graph.run(cx, pool);
        let moved: Vec<String> = graph
            .counter_snapshots()
            .iter()
            .filter(|c| {
                c.counter != "decrypted"
                    && before.iter().find(|b| b.node == c.node && b.counter == c.counter).map_or(0, |b| b.count) < c.count
            })
            .map(|c| if c.counter == "seen" { c.node.to_string() } else { c.counter.to_string() })
            .collect();
        moved.join(",")
    };
    let lookup = |v6: bool| if v6 { "ip6-lookup" } else { "ip4-lookup" };
    // (source, strict, loose)
    let cases = [
        ("198.19.60.7", "", ""),                                   // into the SA's pair, ipsec_tunnel0
        ("2001:db8:160::7", "", ""),                               // the same, IPv6
        ("198.19.61.7", "", ""),                                   // into SA 2, the same peer
        ("198.19.62.7", "urpf-wrong-tunnel", ""),                  // into a tunnel to another peer
        ("198.18.2.9", "urpf-wrong-tunnel", ""),                   // out of a link
        ("2001:db8:2::9", "urpf-wrong-tunnel", ""),                // out of a link, IPv6
        ("198.19.63.7", "urpf-no-route", "urpf-no-route"),         // a blackhole
        ("198.20.0.1", "urpf-no-route", "urpf-no-route"),          // no route at all
        ("198.18.1.1", "urpf-own-address", "urpf-own-address"),    // the gateway's
        ("2001:db8:2::1", "urpf-own-address", "urpf-own-address"), // the gateway's, IPv6
        ("fe80::7", "", ""),                                       // link-local: not checked
    ];
    let mut first = None;
    for mode in [Urpf::Strict, Urpf::Loose, Urpf::Off] {
        state.set_urpf(1, mode).unwrap();
        ipsec_tables.store(Arc::new(state.build()));
        engine::worker::Context::refresh(&mut cx);
        for (src, strict, loose) in cases {
            let want = match mode {
                Urpf::Strict => strict,
                Urpf::Loose => loose,
                Urpf::Off => "",
            };
            let want = if want.is_empty() { lookup(src.contains(':')) } else { want };
            let w = seal::<Ip4Outer>(&peer, &mut pool, &from(src));
            first.get_or_insert_with(|| w.clone());
            assert_eq!(send(&mut cx, &mut pool, &w), want, "{src}, {mode}");
        }
    }
    // The replay window went through both changes: the very first packet is a replay.
    assert_eq!(send(&mut cx, &mut pool, first.as_ref().unwrap()), "replay");
    assert_eq!(state.get(1).unwrap().spec.urpf, Urpf::Off);
    // uRPF is for inbound tunnel-mode SAs.
    assert_eq!(state.set_urpf(0, Urpf::Loose).unwrap_err().to_string(), "urpf: loose: expected off except on an inbound tunnel-mode SA");
    let transport = SaSpec { mode: Mode::Transport, urpf: Urpf::Strict, ..spec(alg, inb, "198.18.1.1", "198.18.1.2", false, false) };
    assert_eq!(transport.build([0; 16]).unwrap_err().field, "urpf");
}

/// Tunnel mode: a sender may put TFC padding after the inner packet (RFC 4303 §2.7; the
/// inner header gives its length): the receiver hands on the inner packet alone. An
/// inner header that claims more than the payload holds is still `bad-inner`.
#[test]
fn tfc_padding_after_the_inner_packet_is_taken_off() {
    let mut pool = Pool::new(8, 2);
    for v6 in [false, true] {
        let mut p = pair(Algorithm::AesGcm128, v6, false, false);
        for inner_v6 in [false, true] {
            let plain = inner(inner_v6, 100);
            let mut padded = plain.clone();
            padded.extend_from_slice(&[0; 37]);
            let got = if v6 {
                let w = seal::<Ip6Outer>(&p, &mut pool, &padded);
                open::<Ip6Outer>(&mut p, &mut pool, &w)
            } else {
                let w = seal::<Ip4Outer>(&p, &mut pool, &padded);
                open::<Ip4Outer>(&mut p, &mut pool, &w)
            };
            assert_eq!(got.map(|(_, b)| b), Ok(plain.clone()), "outer v6 {v6} inner v6 {inner_v6}");
            // The inner header claims more than was sealed.
            let mut short = plain.clone();
            short.truncate(90);
            let w = seal::<Ip4Outer>(&pair(Algorithm::AesGcm128, false, false, false), &mut pool, &short);
            let mut q = pair(Algorithm::AesGcm128, false, false, false);
            assert_eq!(open::<Ip4Outer>(&mut q, &mut pool, &w).unwrap_err(), D::BadInner);
        }
    }
}

/// `esp4-encrypt` reserves a vector's sequence numbers per SA with one atomic add
/// (`VectorSeqs`, up to four SAs a vector; further SAs take one number at a time). Six
/// SAs interleaved in each vector, four of SA 2's ten packets with an inner TTL of 1
/// (dropped for an ICMP error before they take a number): on the wire every SA's numbers
/// rise by one within a vector, the next vector goes on after the numbers the last one
/// reserved (SA 2's skip those of its expired packets), and each SA reports as sent
/// exactly the packets and bytes it sealed.
#[test]
fn a_vectors_sequence_numbers_are_reserved_per_sa_and_nothing_is_miscounted() {
    let mut router = one_link_router();
    let mut state = IpsecState::new();
    for i in 0..6u32 {
        let remote = format!("198.18.1.{}", 10 + i);
        let s = SaSpec { spi: 0x1000 + i, ..spec(Algorithm::AesGcm128, Direction::Outbound, "198.18.1.1", &remote, false, false) };
        state.add(i, s, [9; 16]).unwrap();
    }
    let (mut cx, _ip_tables, _ipsec_tables) = context(&mut router, &mut state);
    let seen: Seen = Default::default();
    let (mut graph, input) = esp_graph_keeping("esp4-encrypt", Some(("ip4-rewrite", Arc::clone(&seen))));
    let mut pool = Pool::new(512, 4);
    // Per SA: the numbers seen on the wire, the packets and bytes sent.
    let mut wire: Vec<Vec<u32>> = vec![Vec::new(); 6];
    let mut sent = [(0u64, 0u64); 6];
    for vector in 0..3 {
        let mut bufs = Vec::new();
        for k in 0..60u32 {
            let sa = k % 6;
            let len = 100 + 7 * k as usize + vector;
            let mut p = inner(false, len);
            let expired = sa == 2 && k % 18 == 2;
            if expired {
                p[8] = 1;
                let c = wire::checksum::checksum(&{
                    let mut h = p[..20].to_vec();
                    h[10..12].copy_from_slice(&[0, 0]);
                    h
                });
                p[10..12].copy_from_slice(&c.to_be_bytes());
            } else {
                sent[sa as usize].0 += 1;
                sent[sa as usize].1 += len as u64;
            }
            let b = pool.alloc(len + 256).unwrap();
            pool.get_mut(b).write(&p).unwrap();
            pool.get_mut(b).meta.param = sa;
            bufs.push(b);
        }
        graph.inject(input, &mut pool, &bufs, 0);
        graph.run(&mut cx, &mut pool);
        for w in seen.lock().unwrap().drain(..) {
            let spi = u32::from_be_bytes(w[20..24].try_into().unwrap());
            wire[(spi - 0x1000) as usize].push(u32::from_be_bytes(w[24..28].try_into().unwrap()));
        }
        for (sa, nums) in wire.iter().enumerate() {
            // Ten packets an SA a vector; SA 2's expired ones (k = 2, 20, 38, 56) take
            // none, and the numbers reserved for them are skipped.
            let expect: Vec<u32> = match sa {
                2 => (0..=vector as u32).flat_map(|v| v * 10 + 1..=v * 10 + 6).collect(),
                _ => (1..=10 * (vector as u32 + 1)).collect(),
            };
            assert_eq!(nums, &expect, "SA {sa} after vector {vector}");
        }
    }
    let tables = _ipsec_tables.load();
    for (sa, &(packets, bytes)) in sent.iter().enumerate() {
        let o = &tables.outbound(sa as u32).unwrap().outbound;
        assert_eq!((o.packets(), o.bytes()), (packets, bytes), "SA {sa}");
    }
    let count =
        |name: &str| graph.counter_snapshots().iter().find(|c| c.node == "esp4-encrypt" && c.counter == name).map_or(0, |c| c.count);
    assert_eq!((count("encrypted"), count("inner-ttl-expired")), (168, 12));
}

/// `esp4-decrypt` writes a vector's nonces before it opens any of its packets (the
/// library's masked load of a nonce stored just before waits for the store;
/// docs/PERFORMANCE.md, session 72). Packets of three inbound SAs interleaved in one
/// vector (AES-GCM-128 and -256, each with its own salt, and ChaCha20-Poly1305, whose
/// nonce is not written ahead), one with its IV changed after sealing, and one whose SPI
/// names no SA: each sealed packet opens to its plaintext, in order, under its own SA's
/// nonce; the changed one fails its ICV, the unknown one has no SA.
#[test]
fn a_vector_of_several_sas_opens_each_packet_under_its_own_nonce() {
    let mut router = one_link_router();
    let sas = [(0x3000, Algorithm::AesGcm128), (0x3001, Algorithm::AesGcm256), (0x3002, Algorithm::Chacha20Poly1305)];
    let (mut peer, mut state) = (IpsecState::new(), IpsecState::new());
    for (i, &(spi, alg)) in sas.iter().enumerate() {
        let (out, inb) = (Direction::Outbound, Direction::Inbound);
        peer.add(i as u32, SaSpec { spi, ..spec(alg, out, "198.18.1.2", "198.18.1.1", false, false) }, [i as u8; 16]).unwrap();
        state.add(i as u32, SaSpec { spi, ..spec(alg, inb, "198.18.1.1", "198.18.1.2", false, false) }, [9; 16]).unwrap();
    }
    // Written ahead where AES-GCM runs on intel-ipsec-mb (else no cipher reads one).
    assert_eq!(state.build().inbound_nonces, ipsec::crypto::aes_gcm_backend().starts_with("intel-ipsec-mb"));
    let (mut cx, _ip_tables, _ipsec_tables) = context(&mut router, &mut state);
    let seen: Seen = Default::default();
    let (mut graph, input) = esp_graph_keeping("esp4-decrypt", Some(("ip4-lookup", Arc::clone(&seen))));
    let mut pool = Pool::new(64, 4);
    let order = [0usize, 0, 1, 2, 0, 1, 1, 2, 0, 0, 1];
    let mut plains = Vec::new();
    let mut bufs = Vec::new();
    for (n, &s) in order.iter().enumerate() {
        let sa = peer.get(s as u32).unwrap();
        let (seq, _) = sa.outbound.next(100, false, &sa.spec.lifetime).unwrap();
        // Each packet its own length, so each plaintext is told apart.
        let plain = inner(false, 60 + n);
        let b = pool.alloc(1400).unwrap();
        pool.get_mut(b).write(&plain).unwrap();
        encrypt::<Ip4Outer>(sa, seq, true, pool.get_mut(b)).unwrap();
        plains.push(plain);
        bufs.push(b);
    }
    // One more of SA 0's, its IV changed after sealing; one to an SPI with no SA.
    let sa = peer.get(0).unwrap();
    for (spi, iv_flip) in [(None, 0x01u8), (Some(0x3999u32), 0)] {
        let (seq, _) = sa.outbound.next(100, false, &sa.spec.lifetime).unwrap();
        let b = pool.alloc(1400).unwrap();
        pool.get_mut(b).write(&inner(false, 80)).unwrap();
        encrypt::<Ip4Outer>(sa, seq, true, pool.get_mut(b)).unwrap();
        let esp = &mut pool.get_mut(b).bytes_mut()[20..];
        esp[8 + 7] ^= iv_flip;
        if let Some(spi) = spi {
            esp[..4].copy_from_slice(&spi.to_be_bytes());
        }
        bufs.insert(3, b);
    }
    graph.inject(input, &mut pool, &bufs, 0);
    graph.run(&mut cx, &mut pool);
    let count =
        |name: &str| graph.counter_snapshots().iter().find(|c| c.node == "esp4-decrypt" && c.counter == name).map_or(0, |c| c.count);
    let all: Vec<_> =
        graph.counter_snapshots().iter().filter(|c| c.count > 0).map(|c| (c.node.to_string(), c.counter.to_string(), c.count)).collect();
    assert_eq!((count("decrypted"), count("bad-icv"), count("no-sa")), (order.len() as u64, 1, 1), "{all:?}");
    assert_eq!(*seen.lock().unwrap(), plains, "each packet's plaintext, in order");
}

/// `esp4-decrypt` looks an SPI up once for a run of its packets and keeps the SA's index
/// for the rest of the vector (docs/PERFORMANCE.md, session 78), never past it: a vector
/// of SA 0's packets, then SA 0 deleted and another SPI's SA put at its index, then a
/// vector with the old SPI again and the new one's. The old SPI's packet is `no-sa`
/// (taken from the index, it would open under the new SA and fail its ICV) and the new
/// one's opens.
#[test]
fn an_spi_looked_up_in_one_vector_is_looked_up_again_in_the_next() {
    let mut router = one_link_router();
    let (old, new) = (0x4000u32, 0x4001u32);
    let alg = Algorithm::AesGcm128;
    let (out, inb) = (Direction::Outbound, Direction::Inbound);
    let (mut peer, mut state) = (IpsecState::new(), IpsecState::new());
    for (i, spi) in [(0u32, old), (1, new)] {
        peer.add(i, SaSpec { spi, ..spec(alg, out, "198.18.1.2", "198.18.1.1", false, false) }, [i as u8; 16]).unwrap();
    }
    state.add(0, SaSpec { spi: old, ..spec(alg, inb, "198.18.1.1", "198.18.1.2", false, false) }, [9; 16]).unwrap();
    let (mut cx, _ip_tables, ipsec_tables) = context(&mut router, &mut state);
    let (mut graph, input) = esp_graph_keeping("esp4-decrypt", None);
    let mut pool = Pool::new(64, 4);
    let mut sealed = |pool: &mut Pool, peer_index: u32| {
        let sa = peer.get(peer_index).unwrap();
        let (seq, _) = sa.outbound.next(100, false, &sa.spec.lifetime).unwrap();
        let b = pool.alloc(1400).unwrap();
        pool.get_mut(b).write(&inner(false, 100)).unwrap();
        encrypt::<Ip4Outer>(sa, seq, true, pool.get_mut(b)).unwrap();
        b
    };
    let mut run = |graph: &mut engine::Graph<Cx>, cx: &mut Cx, pool: &mut Pool, bufs: &[engine::BufIdx]| {
        graph.inject(input, pool, bufs, 0);
        graph.run(cx, pool);
        let count =
            |name: &str| graph.counter_snapshots().iter().find(|c| c.node == "esp4-decrypt" && c.counter == name).map_or(0, |c| c.count);
        (count("decrypted"), count("no-sa"), count("bad-icv"))
    };
    let first: Vec<_> = (0..3).map(|_| sealed(&mut pool, 0)).collect();
    assert_eq!(run(&mut graph, &mut cx, &mut pool, &first), (3, 0, 0));
    state.del(0).unwrap();
    state.add(0, SaSpec { spi: new, ..spec(alg, inb, "198.18.1.1", "198.18.1.2", false, false) }, [9; 16]).unwrap();
    ipsec_tables.store(Arc::new(state.build()));
    engine::worker::Context::refresh(&mut cx);
    let second = [sealed(&mut pool, 0), sealed(&mut pool, 1)];
    assert_eq!(run(&mut graph, &mut cx, &mut pool, &second), (4, 1, 0), "the old SPI's packet has no SA now, the new one's opens");
}
