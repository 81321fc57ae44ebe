//! A UDP GSO frame to a tunnel's port (a local sender's datagrams over a vnet-header
//! device, `UDP_SEGMENT`), each datagram a tunnel packet: every one is decapsulated,
//! none lost behind the first. `ipN-local` sends the frame to `ip-gso-segment` before
//! the tunnel's input node (`ethernet-input`'s bypass leaves it to that path), and each
//! datagram comes back to it alone. The tunnels: GTP-U over both families, GUE, ESP in
//! UDP to an inbound SA (decrypted, RFC 3948) and G-PDUs to a UPF session made over PFCP
//! (the uplink behind `gtpu4-input`, to N6). A whole worker runs here, fed the frame as
//! an af_packet socket with PACKET_VNET_HDR hands it over.

use common::{count_all as count, ACCESS0, CORE0};
use control::fuzz::graph::Harness;
use engine::{GsoKind, Pool};
use io::mem::RxFrame;
use io::vnet::{VnetHdr, F_NEEDS_CSUM, GSO_UDP_L4};

use crate::common;

/// Users on access0, tunnel peers on core0: a GTP-U tunnel over IPv4 and one over IPv6
/// (TEID 100 both), a GUE tunnel over IPv4 on port 6080, an inbound ESP SA in UDP
/// (RFC 3948, port 4500) from 198.18.1.4 (SPI 0x3000, AES-GCM-128). Inner packets go to
/// 198.18.0.2 / 2001:db8::2 on access0.
const CFG: &str = concat!(
    access0_core0_config!(dual_stack),
    r#"
[[neighbour]]
interface = "access0"
ip = "198.18.0.2"
mac = "02:00:00:00:01:02"

[[neighbour]]
interface = "access0"
ip = "2001:db8::2"
mac = "02:00:00:00:01:02"

[[neighbour]]
interface = "core0"
ip = "198.18.1.2"
mac = "02:00:00:00:02:02"

[[neighbour]]
interface = "core0"
ip = "198.18.1.3"
mac = "02:00:00:00:02:03"

[[neighbour]]
interface = "core0"
ip = "2001:db8:1::2"
mac = "02:00:00:00:02:12"

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 100
teid_out = 200
ue = "198.19.10.0/24"

[[gtpu_tunnel]]
local = "2001:db8:1::1"
remote = "2001:db8:1::2"
teid_in = 100
teid_out = 200
ue = "198.19.11.0/24"

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.3"
encap = "gue"
port = 6080

[[ipsec_sa]]
index = 0
spi = 0x3000
direction = "inbound"
algorithm = "aes-gcm-128"
enc_key = "0102030405060708090a0b0c0d0e0f1011121314"
local = "198.18.1.1"
remote = "198.18.1.4"
udp_encap = true
"#
);

fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Inner packet `i`: IPv4 UDP from a UE (198.19.10.5) to 198.18.0.2, `len` bytes, its
/// payload telling it apart from the others, with the TTL given.
fn inner(i: usize, len: usize, ttl: u8) -> Vec<u8> {
    inner_from([198, 19, 10, 5], i, len, ttl)
}

/// [`inner`] from `src`.
fn inner_from(src: [u8; 4], i: usize, len: usize, ttl: u8) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 0, 0, i as u8, 0, 0, ttl, 17, 0, 0, src[0], src[1], src[2], src[3], 198, 18, 0, 2];
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p.extend_from_slice(&[0x30, 0x39, 0x23, 0x28]);
    p.extend_from_slice(&((len - 20) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no UDP checksum
    p.extend((0..len - 28).map(|k| (i * 31 + k * 7) as u8));
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// A GTP-U G-PDU (TEID 100) of inner packet `i`.
fn gpdu(i: usize, len: usize) -> Vec<u8> {
    let mut d = vec![0x30, 0xff];
    d.extend_from_slice(&(len as u16).to_be_bytes());
    d.extend_from_slice(&100u32.to_be_bytes());
    d.extend(inner(i, len, 64));
    d
}

/// A GUE data packet (version 0, no options, IPv4 inside) of inner packet `i`.
fn gue(i: usize, len: usize) -> Vec<u8> {
    let mut d = vec![0, 4, 0, 0];
    d.extend(inner(i, len, 64));
    d
}

/// The frame a vnet-header device hands over for a `UDP_SEGMENT` send of `datagrams`
/// (each but the last `gso_size` bytes) from `src` to our `dst` port `port`: one UDP
/// header over them all, lengths of the whole, the checksum left partial.
fn gso_frame(v6: bool, src: &str, dst: &str, port: u16, datagrams: &[Vec<u8>]) -> RxFrame {
    let gso_size = datagrams[0].len();
    assert!(datagrams.iter().rev().skip(1).all(|d| d.len() == gso_size) && datagrams.last().unwrap().len() <= gso_size);
    let payload: Vec<u8> = datagrams.concat();
    let udp_len = 8 + payload.len();
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 2, 2];
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[17, 64]);
        f.extend_from_slice(&src.parse::<std::net::Ipv6Addr>().unwrap().octets());
        f.extend_from_slice(&dst.parse::<std::net::Ipv6Addr>().unwrap().octets());
    } else {
        let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0];
        ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        ip.extend_from_slice(&src.parse::<std::net::Ipv4Addr>().unwrap().octets());
        ip.extend_from_slice(&dst.parse::<std::net::Ipv4Addr>().unwrap().octets());
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend(ip);
    }
    let l4 = f.len();
    f.extend_from_slice(&[0x08, 0x68]);
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    // The pseudo-header sum a sender leaves partial: the segmenter writes each
    // segment's own, and the tunnel nodes trust a partial checksum.
    f.extend_from_slice(&[0x12, 0x34]);
    f.extend(payload);
    let vnet = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_UDP_L4,
        hdr_len: (l4 + 8) as u16,
        gso_size: gso_size as u16,
        csum_start: l4 as u16,
        csum_offset: 6,
    };
    RxFrame { bytes: f, vnet: Some(vnet) }
}

/// Inner packet `i` as it leaves by access0: the TTL one less, the checksum updated.
fn forwarded(i: usize, len: usize) -> Vec<u8> {
    forwarded_from([198, 19, 10, 5], i, len)
}

/// [`forwarded`] for [`inner_from`]`(src, ..)`.
fn forwarded_from(src: [u8; 4], i: usize, len: usize) -> Vec<u8> {
    let mut p = inner_from(src, i, len, 63);
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// `frame` in by core0 of `h`: the packets `want` out of access0 (to the user, the DN
/// host), whole, in order, none a GSO frame; `local` sent the frame to the segmenter,
/// which cut it into one datagram per packet.
fn every_inner_packet_forwarded(h: &mut Harness, frame: RxFrame, want: &[Vec<u8>], local: &str, what: &str) {
    let out = h.frame(CORE0, frame);
    let got: Vec<_> = out.iter().filter(|(port, _)| *port == ACCESS0).collect();
    assert_eq!(got.len(), want.len(), "{what}: one packet out per datagram: {out:?}");
    for (i, ((_, t), want)) in got.iter().zip(want).enumerate() {
        assert_eq!(t.gso, GsoKind::None, "{what}: packet {i}");
        assert_eq!(&t.bytes[..6], &[2, 0, 0, 0, 1, 2], "{what}: packet {i} to the user");
        assert_eq!(t.bytes[14..], want[..], "{what}: packet {i}");
    }
    assert_eq!(count(h, local, "gso-to-segment"), 1, "{what}");
    assert_eq!(count(h, "ip-gso-segment", "segments"), want.len() as u64, "{what}");
}

/// `frame` in by core0: every inner packet (lengths `lens`) out of access0, whole, in
/// order, none a GSO frame; the counters say it was cut and each datagram decapsulated.
fn every_datagram_decapsulated(frame: RxFrame, lens: &[usize], local: &str, input: &str) {
    let mut h = Harness::with_config(CFG);
    let want: Vec<_> = lens.iter().enumerate().map(|(i, &len)| forwarded(i, len)).collect();
    every_inner_packet_forwarded(&mut h, frame, &want, local, input);
    assert_eq!(count(&h, input, "decapsulated"), lens.len() as u64, "{input}");
}

#[test]
fn every_g_pdu_of_a_gso_frame_is_decapsulated() {
    let lens = [300, 300, 300, 300, 120];
    let d: Vec<_> = lens.iter().enumerate().map(|(i, &l)| gpdu(i, l)).collect();
    every_datagram_decapsulated(gso_frame(false, "198.18.1.2", "198.18.1.1", 2152, &d), &lens, "ip4-local", "gtpu4-input");
}

#[test]
fn every_g_pdu_of_an_ipv6_gso_frame_is_decapsulated() {
    let lens = [200, 200, 200];
    let d: Vec<_> = lens.iter().enumerate().map(|(i, &l)| gpdu(i, l)).collect();
    every_datagram_decapsulated(gso_frame(true, "2001:db8:1::2", "2001:db8:1::1", 2152, &d), &lens, "ip6-local", "gtpu6-input");
}

#[test]
fn every_gue_packet_of_a_gso_frame_is_decapsulated() {
    let lens = [400, 400, 400, 64];
    let d: Vec<_> = lens.iter().enumerate().map(|(i, &l)| gue(i, l)).collect();
    every_datagram_decapsulated(gso_frame(false, "198.18.1.3", "198.18.1.1", 6080, &d), &lens, "ip4-local", "gue4-input");
}

/// The ESP packets (tunnel mode, in UDP) of the inner packets of lengths `lens` from the
/// peer of CFG's inbound SA, sealed by an outbound SA with its keys (sequence numbers 1
/// on): each datagram the UDP payload, from the ESP header on.
fn esp_datagrams(lens: &[usize]) -> Vec<Vec<u8>> {
    use ipsec::{Algorithm, Direction, IpsecState, Lifetime, Mode, SaSpec, UdpEncapPorts};
    let spec = SaSpec {
        spi: 0x3000,
        direction: Direction::Outbound,
        mode: Mode::Tunnel,
        alg: Algorithm::AesGcm128,
        enc_key: (1..=20).collect(),
        integ_key: Vec::new(),
        esn: false,
        anti_replay: true,
        lifetime: Lifetime::default(),
        local: "198.18.1.4".parse().unwrap(),
        remote: "198.18.1.1".parse().unwrap(),
        udp_encap: Some(UdpEncapPorts::default()),
        urpf: ip::urpf::Urpf::Off,
        mtu: Default::default(),
        dscp: Default::default(),
    };
    let mut peer = IpsecState::new();
    peer.add(0, spec, [7; 16]).unwrap();
    let sa = peer.get(0).unwrap();
    let mut pool = Pool::new(4, 1);
    let mut out = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let plain = inner(i, len, 64);
        let (seq, _) = sa.outbound.next(len as u64, false, &sa.spec.lifetime).unwrap();
        let b = pool.alloc(len + 64).unwrap();
        pool.get_mut(b).write(&plain).unwrap();
        ipsec::nodes::encrypt::encrypt::<ip::outer::Ip4Outer>(sa, seq, true, pool.get_mut(b)).unwrap();
        let w = pool.get(b).bytes().to_vec();
        pool.free(b);
        // IPv4, UDP 4500 > 4500, then the SPI.
        assert_eq!((w[9], &w[20..24], &w[28..32]), (17, &[0x11, 0x94, 0x11, 0x94][..], &0x3000u32.to_be_bytes()[..]));
        out.push(w[28..].to_vec());
    }
    out
}

/// A local IKE daemon's peer (or any ESP-in-UDP sender on a host) sends its ESP packets
/// with `UDP_SEGMENT`: every one is decrypted, none lost behind the first.
#[test]
fn every_esp_packet_of_a_gso_frame_is_decrypted() {
    let lens = [300, 300, 300, 300, 90];
    let d = esp_datagrams(&lens);
    assert!(d[..4].iter().all(|e| e.len() == d[0].len()) && d[4].len() < d[0].len(), "equal ESP lengths but the last");
    let mut h = Harness::with_config(CFG);
    let want: Vec<_> = lens.iter().enumerate().map(|(i, &len)| forwarded(i, len)).collect();
    every_inner_packet_forwarded(&mut h, gso_frame(false, "198.18.1.4", "198.18.1.1", 4500, &d), &want, "ip4-local", "esp4-decrypt");
    assert_eq!(count(&h, "esp4-decrypt", "decrypted"), lens.len() as u64);
    // The SA took each (its replay window and counts, as `show ipsec sa` sums them).
    let taken: Vec<_> = h.worker.cx.ipsec.inbound_counts().into_iter().map(|c| (c.index, c.packets, c.bytes)).collect();
    assert_eq!(taken, [(0, lens.len() as u64, lens.iter().sum::<usize>() as u64)]);
}

/// A G-PDU (TEID `teid`) of `inner`.
fn g_pdu(teid: u32, inner: &[u8]) -> Vec<u8> {
    let mut d = vec![0x30, 0xff];
    d.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    d.extend_from_slice(&teid.to_be_bytes());
    d.extend_from_slice(inner);
    d
}

/// A gNB's uplink G-PDUs to a UPF session (made over PFCP: the whole-graph harness's
/// sessions, `control::fuzz::upf_sessions`), sent with `UDP_SEGMENT`: every inner packet
/// leaves to N6, and the session's rules count each.
#[test]
fn every_upf_uplink_g_pdu_of_a_gso_frame_reaches_n6() {
    // Session 1: uplink TEID 0x5000 on N3 198.18.1.1, UE 198.19.50.1, its gNB 198.18.1.2;
    // N6 toward the DN host 198.18.0.2 on access0.
    const UE: [u8; 4] = [198, 19, 50, 1];
    let lens = [250, 250, 250, 250, 250, 100];
    let d: Vec<_> = lens.iter().enumerate().map(|(i, &l)| g_pdu(0x5000, &inner_from(UE, i, l, 64))).collect();
    let mut h = Harness::new();
    let usage = |h: &Harness| {
        let p = h.control.pfcp.as_ref().expect("the harness's UPF");
        let mut u = upf::context::Usage::default();
        for s in p.upf.sessions() {
            for &(_, slot) in p.tables.urr_slots(s.seid) {
                u += h.worker.cx.upf.usage.read(slot.slot, slot.generation);
            }
        }
        u
    };
    assert_eq!(usage(&h), upf::context::Usage::default());
    let want: Vec<_> = lens.iter().enumerate().map(|(i, &len)| forwarded_from(UE, i, len)).collect();
    every_inner_packet_forwarded(&mut h, gso_frame(false, "198.18.1.2", "198.18.1.1", 2152, &d), &want, "ip4-local", "upf4-uplink");
    assert_eq!(count(&h, "upf4-uplink", "forwarded"), lens.len() as u64);
    let u = usage(&h);
    assert_eq!((u.ul_packets, u.dl_packets), (lens.len() as u64, 0), "{u:?}");
    assert_eq!(u.ul_bytes, lens.iter().sum::<usize>() as u64, "the inner packets' bytes: {u:?}");
}

/// A GSO frame of one datagram is a plain datagram: decapsulated where it is, by the
/// bypass, not copied by the segmenter.
#[test]
fn a_gso_frame_of_one_datagram_is_not_cut() {
    let mut h = Harness::with_config(CFG);
    let out = h.frame(CORE0, gso_frame(false, "198.18.1.2", "198.18.1.1", 2152, &[gpdu(0, 300)]));
    let got: Vec<_> = out.iter().filter(|(port, _)| *port == ACCESS0).collect();
    assert_eq!(got.len(), 1, "{out:?}");
    assert_eq!(got[0].1.bytes[14..], forwarded(0, 300)[..]);
    assert_eq!(count(&h, "ip4-local", "gso-to-segment"), 0);
    assert_eq!(count(&h, "ip-gso-segment", "segments"), 0);
    assert_eq!(count(&h, "gtpu4-input", "decapsulated"), 1);
}
