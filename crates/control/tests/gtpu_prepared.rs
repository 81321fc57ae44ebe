//! `gtpuN-input` on a TEID table over 1 MiB, where `prepare` looks a vector's G-PDUs up
//! ahead and hands `process` each one's tunnel and decap data in `meta` (the path no other
//! test takes: their tables are small): a TCP SYN out of a tunnel without MSS clamping
//! leaves with its MSS as it came, one out of a tunnel with it has its MSS lowered. Before
//! session 55 the prepared mark was the decap data's MSS-clamping bit (every prepared
//! packet took the clamping path, which the tunnel's own policy then refused). Also (on a
//! small table, the other path): a G-PDU that came from a vnet-header device as a UDP GSO
//! frame leaves decapsulated without the outer packet's GSO mark.

use control::fuzz::graph::Harness;
use std::net::{IpAddr, Ipv4Addr};
use wire::ipv4::Ipv4Packet;
use wire::tcp::TcpPacket;

const UE: Ipv4Addr = Ipv4Addr::new(198, 19, 10, 5);
const HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// A G-PDU from `peer` to TEID `teid` carrying a TCP SYN from the UE with MSS 9000 (more
/// than any tunnel here carries, so a clamp would show).
fn syn_gpdu(h: &Harness, teid: u32, peer: Ipv4Addr) -> io::mem::RxFrame {
    let mut tcp = vec![0u8; 24];
    let mut t = TcpPacket::new_unchecked(&mut tcp[..]);
    t.set_ports(40000, 80);
    t.set_seq_ack(1, 0);
    t.set_header_len_flags(24, wire::tcp::TcpFlags(wire::tcp::TcpFlags::SYN));
    t.set_window(65535);
    tcp[20..24].copy_from_slice(&[2, 4, 0x23, 0x28]);
    TcpPacket::new_unchecked(&mut tcp[..]).fill_checksum_v4(UE, HOST);
    let inner = ip4(UE, HOST, 6, &tcp);
    let mut g = vec![0x30, 0xff];
    g.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    g.extend_from_slice(&teid.to_be_bytes());
    g.extend_from_slice(&inner);
    let mut udp = vec![0x08, 0x68, 0x08, 0x68];
    udp.extend_from_slice(&((8 + g.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&g);
    let core0 = h.worker.ports.iter().position(|p| p.name == "core0").unwrap();
    let mac = h.control.state.interfaces()[core0].mac;
    let mut f = mac.0.to_vec();
    f.extend_from_slice(&[2, 0, 0, 0, 2, 2, 0x08, 0x00]);
    f.extend_from_slice(&ip4(peer, Ipv4Addr::new(198, 18, 1, 1), 17, &udp));
    io::mem::RxFrame { bytes: f, vnet: None }
}

fn ip4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0];
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    let len = p.len() as u16;
    let mut ip = Ipv4Packet::new_unchecked(&mut p[..]);
    ip.set_total_len(len);
    ip.fill_checksum();
    p
}

/// The MSS of the SYN that left, and `gtpu4-input`'s `mss-clamped` count.
fn mss_out(h: &mut Harness, f: io::mem::RxFrame) -> u16 {
    let core0 = h.worker.ports.iter().position(|p| p.name == "core0").unwrap();
    let out = h.frame(core0, f);
    assert_eq!(out.len(), 1, "{out:?}");
    let ip = Ipv4Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (UE, HOST));
    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    assert!(t.verify_checksum_v4(UE, HOST));
    t.mss().unwrap().unwrap()
}

fn clamped(h: &Harness) -> u64 {
    h.worker.graph.counter_snapshots().iter().filter(|c| c.node == "gtpu4-input" && c.counter == "mss-clamped").map(|c| c.count).sum()
}

#[test]
fn prepared_syns_are_clamped_only_where_the_tunnel_says() {
    let mut h = Harness::with_workers(1);
    let (local, peer): (IpAddr, Ipv4Addr) = ("198.18.1.1".parse().unwrap(), Ipv4Addr::new(198, 18, 1, 2));
    // A plain tunnel that clamps (a 1300-byte MTU), and enough others to pass 1 MiB.
    let mut clamp = gtpu::TunnelSpec::new(local, IpAddr::V4(peer), 7_000_000, 7_000_001);
    clamp.mtu.mtu = 1300;
    clamp.mtu.mss_clamp = true;
    let mut specs = vec![clamp];
    specs.extend((0..100_000u32).map(|i| gtpu::TunnelSpec::new(local, IpAddr::V4(peer), 8_000_000 + i, 9_000_000 + i)));
    let c = &mut h.control;
    c.gtpu.create_many(&mut c.state, specs).unwrap();
    c.publish();
    engine::worker::Context::refresh(&mut h.worker.cx);
    let t = &h.worker.cx.gtpu.tables;
    assert!(t.decap.memory_bytes() >= gtpu::tables::LARGE_TABLE_BYTES && t.techniques.batch_lookup, "{} bytes", t.decap.memory_bytes());
    // Tunnel 100 (graph.toml: UE 198.19.10.0/24, no clamping).
    let f = syn_gpdu(&h, 100, peer);
    assert_eq!(mss_out(&mut h, f), 9000);
    assert_eq!(clamped(&h), 0);
    // The clamping tunnel: 1300 - 20 - 20.
    let f = syn_gpdu(&h, 7_000_000, peer);
    assert_eq!(mss_out(&mut h, f), 1260);
    assert_eq!(clamped(&h), 1);
}

/// The outer packet's offload marks stay with the outer packet: a G-PDU received with a
/// vnet header asking for UDP segmentation of its outer datagram (gso_size 1000, the
/// outer UDP checksum pending, DATA_VALID) leaves, decapsulated, as one plain packet:
/// no GSO asked of the sending device, its own TCP checksum intact.
#[test]
fn a_decapsulated_packet_leaves_without_the_outer_gso_mark() {
    use io::vnet::{VnetHdr, F_DATA_VALID, F_NEEDS_CSUM, GSO_UDP_L4};
    let mut h = Harness::with_workers(1);
    let mut f = syn_gpdu(&h, 100, Ipv4Addr::new(198, 18, 1, 2));
    // Ethernet 14 + outer IPv4 20: the outer UDP header, its checksum field 6 bytes in.
    f.vnet = Some(VnetHdr {
        flags: F_NEEDS_CSUM | F_DATA_VALID,
        gso_type: GSO_UDP_L4,
        hdr_len: 0,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 6,
    });
    let core0 = h.worker.ports.iter().position(|p| p.name == "core0").unwrap();
    let out = h.frame(core0, f);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].1.gso, out[0].1.gso_size), (engine::GsoKind::None, 0), "the outer datagram's GSO stayed with it");
    let ip = Ipv4Packet::new_checked(&out[0].1.bytes[14..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (UE, HOST));
    assert!(TcpPacket::new_checked(ip.payload()).unwrap().verify_checksum_v4(UE, HOST));
}
