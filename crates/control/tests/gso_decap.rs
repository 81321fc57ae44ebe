//! A UDP GSO frame to a tunnel's port (a local sender's datagrams over a vnet-header
//! device, `UDP_SEGMENT`), each datagram a tunnel packet: every one is decapsulated,
//! none lost behind the first. `ipN-local` sends the frame to `ip-gso-segment` before
//! the tunnel's input node (`ethernet-input`'s bypass leaves it to that path), and each
//! datagram comes back to it alone. A whole worker runs here, fed the frame as an
//! af_packet socket with PACKET_VNET_HDR hands it over.

use control::fuzz::graph::Harness;
use engine::GsoKind;
use io::mem::RxFrame;
use io::vnet::{VnetHdr, F_NEEDS_CSUM, GSO_UDP_L4};

/// Users on access0, tunnel peers on core0: a GTP-U tunnel over IPv4 and one over IPv6
/// (TEID 100 both), a GUE tunnel over IPv4 on port 6080. Inner packets go to
/// 198.18.0.2 / 2001:db8::2 on access0.
const CFG: &str = r#"
[[interface]]
name = "access0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[[interface]]
name = "core0"
type = "pg"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

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
"#;

/// `node`'s `counter` in the worker.
fn count(h: &Harness, node: &str, counter: &str) -> u64 {
    h.worker.graph.counter_snapshots().into_iter().filter(|c| c.node == node && c.counter == counter).map(|c| c.count).sum()
}

const ACCESS: usize = 0;
const CORE: usize = 1;

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
    let mut p = vec![0x45, 0, 0, 0, 0, i as u8, 0, 0, ttl, 17, 0, 0, 198, 19, 10, 5, 198, 18, 0, 2];
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
    let mut p = inner(i, len, 63);
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// `frame` in by core0: every inner packet (lengths `lens`) out of access0, whole, in
/// order, none a GSO frame; the counters say it was cut and each datagram decapsulated.
fn every_datagram_decapsulated(frame: RxFrame, lens: &[usize], local: &str, input: &str) {
    let mut h = Harness::with_config(CFG);
    let out = h.frame(CORE, frame);
    let got: Vec<_> = out.iter().filter(|(port, _)| *port == ACCESS).collect();
    assert_eq!(got.len(), lens.len(), "{input}: one packet out per datagram: {out:?}");
    for (i, ((_, t), &len)) in got.iter().zip(lens).enumerate() {
        assert_eq!(t.gso, GsoKind::None, "{input}: packet {i}");
        assert_eq!(&t.bytes[..6], &[2, 0, 0, 0, 1, 2], "{input}: packet {i} to the user");
        assert_eq!(t.bytes[14..], forwarded(i, len)[..], "{input}: packet {i}");
    }
    assert_eq!(count(&h, local, "gso-to-segment"), 1, "{input}");
    assert_eq!(count(&h, "ip-gso-segment", "segments"), lens.len() as u64, "{input}");
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

/// A GSO frame of one datagram is a plain datagram: decapsulated where it is, by the
/// bypass, not copied by the segmenter.
#[test]
fn a_gso_frame_of_one_datagram_is_not_cut() {
    let mut h = Harness::with_config(CFG);
    let out = h.frame(CORE, gso_frame(false, "198.18.1.2", "198.18.1.1", 2152, &[gpdu(0, 300)]));
    let got: Vec<_> = out.iter().filter(|(port, _)| *port == ACCESS).collect();
    assert_eq!(got.len(), 1, "{out:?}");
    assert_eq!(got[0].1.bytes[14..], forwarded(0, 300)[..]);
    assert_eq!(count(&h, "ip4-local", "gso-to-segment"), 0);
    assert_eq!(count(&h, "ip-gso-segment", "segments"), 0);
    assert_eq!(count(&h, "gtpu4-input", "decapsulated"), 1);
}
