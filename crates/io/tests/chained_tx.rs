//! Chained packets (a head buffer and its extents) sent by each kernel-facing device
//! without being made one buffer first: what arrives must be byte for byte the packet
//! the chain stands for, the byte counts the whole packet's, and every buffer of the
//! chain back in the pool once.
//!
//! af_packet, tap and af_xdp run in a network namespace of the test's own thread (with a
//! sysfs of it, as `ip netns exec` mounts), which goes away with the thread; they need
//! root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and say they are skipped without it.

use engine::device::Device;
use engine::{BufIdx, Pool};
use io::af_packet::{AfPacket, AfPacketConfig};
use io::af_xdp::{AfXdp, AfXdpConfig, XdpRedirect};
use io::pcap::PcapDevice;
use io::tap::Tap;
use std::process::Command;
use std::time::{Duration, Instant};

/// IEEE local experimental EtherType: no host stack takes these frames.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];
/// Bytes of the head: Ethernet header, a marker and the frame's tag.
const HEAD_LEN: usize = 14 + 5;

/// Payload piece `k` of the frame tagged `tag`: bytes that differ from every other
/// piece's, so a piece skipped, repeated or out of order shows.
fn piece(tag: u8, k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(tag).wrapping_add((k as u8).wrapping_mul(61))).collect()
}

/// A frame with a payload of `pieces` (their lengths): chained (the Ethernet header and
/// marker in the head, each piece an extent in a buffer of its own, between bytes that
/// are not the frame's) and the bytes it stands for.
fn chained_frame(pool: &mut Pool, tag: u8, pieces: &[usize]) -> (BufIdx, Vec<u8>) {
    let mut want = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
    want.extend_from_slice(&ETHERTYPE);
    want.extend_from_slice(b"vgch");
    want.push(tag);
    let total: usize = pieces.iter().sum();
    let head = pool.alloc_head(0, HEAD_LEN, total).expect("a head buffer");
    pool.get_mut(head).bytes_mut().copy_from_slice(&want);
    for (k, &len) in pieces.iter().enumerate() {
        let bytes = piece(tag, k, len);
        let mut src_bytes = vec![0xee; 7];
        src_bytes.extend_from_slice(&bytes);
        src_bytes.extend_from_slice(&[0xdd; 5]);
        let src = pool.alloc(src_bytes.len()).expect("a source buffer");
        pool.get_mut(src).write(&src_bytes).expect("fits");
        pool.push_extent(head, src, 7..7 + len).expect("an extent");
        // The chain holds the source now; its own holder lets go.
        pool.free(src);
        want.extend_from_slice(&bytes);
    }
    assert_eq!(pool.extent_len(head), total);
    (head, want)
}

/// Chained frames of several pieces each, and a linear one among them: long extents
/// (which every device sends in pieces), many short ones and a one-byte one (which
/// af_packet and tap make one buffer first, `gather::IOVEC_MIN_EXTENT`); all within an
/// AF_XDP frame, two over a regular buffer's size.
fn frames(pool: &mut Pool) -> (Vec<BufIdx>, Vec<Vec<u8>>) {
    let mut bufs = Vec::new();
    let mut want = Vec::new();
    for (tag, pieces) in [(1u8, &[1600usize, 1900][..]), (2, &[64; 40][..]), (4, &[1500, 1, 2000][..]), (5, &[2000, 2000][..])] {
        let (b, w) = chained_frame(pool, tag, pieces);
        bufs.push(b);
        want.push(w);
        if tag == 2 {
            let (b, w) = chained_frame(pool, 3, &[600]);
            pool.linearize(b);
            bufs.push(b);
            want.push(w);
        }
    }
    (bufs, want)
}

fn pool() -> Pool {
    Pool::with_classes(256, 16, 4)
}

/// Send `bufs` with `dev` and check what the call reports and that the pool is whole.
fn send(dev: &mut dyn Device, pool: &mut Pool, mut bufs: Vec<BufIdx>, want: &[Vec<u8>]) {
    assert!(dev.takes_chains(), "{} gathers chained packets", dev.kind());
    let r = dev.tx(pool, &mut bufs);
    assert_eq!((r.sent, r.failed), (want.len(), 0), "{}: all sent", dev.kind());
    assert_eq!(r.sent_bytes, want.iter().map(Vec::len).sum::<usize>(), "{}: the whole packets' bytes counted", dev.kind());
    assert!(bufs.is_empty());
    assert_eq!((pool.in_use(), pool.has_chains()), (0, false), "{}: every buffer of every chain back in the pool", dev.kind());
}

/// Receive on `dev` until `n` of our frames (by marker) came or a second passed.
fn receive(dev: &mut dyn Device, pool: &mut Pool, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut bufs = Vec::new();
    let until = Instant::now() + Duration::from_secs(2);
    while got.len() < n && Instant::now() < until {
        dev.rx(pool, &mut bufs, 64);
        for &b in &bufs {
            let f = pool.get(b).bytes();
            if f.len() >= HEAD_LEN && f[12..14] == ETHERTYPE && &f[14..18] == b"vgch" {
                got.push(f.to_vec());
            }
        }
        pool.free_many(&bufs);
        bufs.clear();
        std::thread::sleep(Duration::from_millis(1));
    }
    got.sort_by_key(|f| f[18]);
    got
}

/// Move this thread into a network namespace of its own, with a sysfs showing it (the
/// backends find interfaces there). False (the test skipped) without the privileges.
fn own_netns() -> bool {
    // SAFETY: unshare only changes this thread's namespaces (the test harness runs each
    // test on a thread of its own, so no other test sees them).
    if unsafe { libc::unshare(libc::CLONE_NEWNET | libc::CLONE_NEWNS) } != 0 {
        eprintln!("skipped: no network namespace ({}); run as root", std::io::Error::last_os_error());
        return false;
    }
    // SAFETY: mount with NUL-terminated literals and null data, as mount(2) allows:
    // mounts made private to this namespace, then a sysfs of its network namespace.
    unsafe {
        assert_eq!(libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()), 0);
        assert_eq!(libc::mount(c"sysfs".as_ptr(), c"/sys".as_ptr(), c"sysfs".as_ptr(), 0, std::ptr::null()), 0);
    }
    true
}

fn ip(args: &str) {
    let st = Command::new("ip").args(args.split_whitespace()).status().expect("ip runs");
    assert!(st.success(), "ip {args}");
}

fn veth_pair() {
    ip("link add vc0 mtu 9000 type veth peer name vc1 mtu 9000");
    ip("link set vc0 up");
    ip("link set vc1 up");
}

fn receiver(ifname: &str) -> AfPacket {
    let mut cfg = AfPacketConfig::new(ifname);
    cfg.blocks = 8;
    AfPacket::open(cfg).expect("af_packet receiver")
}

#[test]
fn af_packet_sends_chained_packets_whole() {
    if !own_netns() {
        return;
    }
    veth_pair();
    let mut rx = receiver("vc1");
    let mut rx_pool = pool();
    for vnet_hdr in [true, false] {
        let mut cfg = AfPacketConfig::new("vc0");
        cfg.blocks = 8;
        cfg.vnet_hdr = vnet_hdr;
        let mut tx = AfPacket::open(cfg).expect("af_packet");
        let mut p = pool();
        let (bufs, want) = frames(&mut p);
        send(&mut tx, &mut p, bufs, &want);
        assert_eq!(receive(&mut rx, &mut rx_pool, want.len()), want, "vnet_hdr {vnet_hdr}");
    }
}

#[test]
fn af_packet_linearizes_a_chain_of_more_pieces_than_a_message_takes() {
    // (Short pieces too: made one buffer on either count.)
    if !own_netns() {
        return;
    }
    veth_pair();
    let mut rx = receiver("vc1");
    let mut rx_pool = pool();
    let mut tx = receiver("vc0");
    let mut p = Pool::with_classes(2048, 16, 4);
    // 1,100 pieces of 4 bytes: past UIO_MAXIOV iovecs for one message.
    let (b, want) = chained_frame(&mut p, 9, &[4; 1100]);
    send(&mut tx, &mut p, vec![b], std::slice::from_ref(&want));
    assert_eq!(receive(&mut rx, &mut rx_pool, 1), vec![want]);
}

#[test]
fn tap_sends_chained_packets_whole() {
    if !own_netns() {
        return;
    }
    let mut tap = Tap::open("vctap0").expect("tap");
    ip("link set vctap0 mtu 9000");
    // What the tap writes, the host receives on vctap0, where a packet socket sees it.
    let mut rx = receiver("vctap0");
    let mut rx_pool = pool();
    let mut p = pool();
    let (bufs, want) = frames(&mut p);
    send(&mut tap, &mut p, bufs, &want);
    assert_eq!(receive(&mut rx, &mut rx_pool, want.len()), want);
}

#[test]
fn af_xdp_copies_chained_packets_into_their_frames_whole() {
    if !own_netns() {
        return;
    }
    veth_pair();
    let mut rx = receiver("vc1");
    let mut rx_pool = pool();
    let program = XdpRedirect::attach("vc0", io::linux::if_index("vc0").expect("vc0"), 1, None).expect("xdp program");
    let mut xdp = AfXdp::open(&AfXdpConfig::new("vc0"), std::sync::Arc::new(program)).expect("af_xdp");
    let mut p = pool();
    let (bufs, want) = frames(&mut p);
    send(&mut xdp, &mut p, bufs, &want);
    assert_eq!(receive(&mut rx, &mut rx_pool, want.len()), want);
}

#[test]
fn pcap_writes_chained_packets_whole() {
    let path = std::env::temp_dir().join(format!("vecgate-chained-{}.pcap", std::process::id()));
    let mut dev = PcapDevice::open(None, Some(&path)).expect("pcap output");
    let mut p = pool();
    let (bufs, want) = frames(&mut p);
    send(&mut dev, &mut p, bufs, &want);
    dev.flush().expect("flushed");
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).expect("capture")).expect("a pcap file");
    let mut got = Vec::new();
    while let Some(pkt) = r.next_packet() {
        let pkt = pkt.expect("a whole record");
        assert_eq!(pkt.orig_len as usize, pkt.data.len());
        got.push(pkt.data.to_vec());
    }
    std::fs::remove_file(&path).ok();
    assert_eq!(got, want);
}
