//! `vecgate trafgen`: a traffic generator and analyser for measuring a device under test
//! from the outside, as the checksum draft's tester did. It sends UDP packets of a fixed
//! size at a fixed rate (or as fast as it can) out of one interface and receives them on
//! another, after the device has routed or encapsulated them. Every packet ends in a
//! 20-byte trailer — magic, sequence number, send time — that survives any headers the
//! device puts in front, so loss, duplicates and latency are measured per packet.
//!
//! Both sides are af_packet interfaces (the same backend as the dataplane, a V2 ring by
//! default so a received frame is seen at once). The send time is taken just before the
//! batch is handed to the kernel, the receive time when the frame is read from the ring:
//! latency is therefore store-and-forward through both veths and the device.

use anyhow::{anyhow, bail, Context, Result};
use engine::device::Device;
use engine::{BufIdx, Pool};
use io::af_packet::{AfPacket, AfPacketConfig, RingVersion};
use io::af_xdp::{AfXdp, AfXdpConfig, XdpRedirect};
use io::pg::{L4Spec, PacketGenerator, PacketSpec, StreamSpec};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::EthernetAddress;

const MAGIC: [u8; 4] = *b"VGTG";
const TRAILER: usize = 20;
/// Packets handed to the kernel per send call at most.
const BATCH: usize = 64;

pub struct TrafgenArgs {
    pub tx_if: String,
    pub rx_if: String,
    pub size: usize,
    /// Packets per second; 0: as fast as possible.
    pub rate: u64,
    pub duration: f64,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_mac: Option<EthernetAddress>,
    pub dst_mac: EthernetAddress,
    pub src_port: u16,
    pub dst_port: u16,
    pub rx_ring: RingVersion,
    /// Send and receive through AF_XDP sockets (vecgate's XDP program on both
    /// interfaces) instead of packet sockets.
    pub af_xdp: bool,
    pub json: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub size: usize,
    pub offered_pps: u64,
    pub duration_s: f64,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_percent: f64,
    pub duplicates: u64,
    pub corrupt: u64,
    pub tx_pps: f64,
    pub rx_pps: f64,
    pub rx_mbps: f64,
    pub latency_ns: Option<Latency>,
    /// Frames the sending kernel refused (full queue).
    pub tx_failed: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Latency {
    pub avg: u64,
    pub min: u64,
    pub max: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Writes the trailer and fixes the UDP checksum (the template's covered other bytes).
fn stamp(frame: &mut [u8], seq: u64, t_ns: u64) {
    let n = frame.len();
    frame[n - TRAILER..n - 16].copy_from_slice(&MAGIC);
    frame[n - 16..n - 8].copy_from_slice(&seq.to_be_bytes());
    frame[n - 8..].copy_from_slice(&t_ns.to_be_bytes());
    udp_checksum(frame);
}

/// Recomputes the UDP checksum of the frame (Ethernet, IPv4 or IPv6 without options or
/// extension headers, UDP — the generator's own template).
fn udp_checksum(frame: &mut [u8]) {
    use wire::ipv4::Ipv4Packet;
    use wire::ipv6::Ipv6Packet;
    use wire::udp::UdpPacket;
    let ip = &mut frame[14..];
    if ip[0] >> 4 == 4 {
        let (src, dst) = {
            let p = Ipv4Packet::new_unchecked(&ip[..]);
            (p.src_addr(), p.dst_addr())
        };
        if let Ok(mut u) = UdpPacket::new_checked(&mut ip[20..]) {
            u.fill_checksum_v4(src, dst);
        }
    } else {
        let (src, dst) = {
            let p = Ipv6Packet::new_unchecked(&ip[..]);
            (p.src_addr(), p.dst_addr())
        };
        if let Ok(mut u) = UdpPacket::new_checked(&mut ip[40..]) {
            u.fill_checksum_v6(&src, &dst);
        }
    }
}

/// What a received frame's trailer says: (sequence, send time), if it is ours.
fn trailer(frame: &[u8]) -> Option<(u64, u64)> {
    let n = frame.len();
    if n < TRAILER || frame[n - TRAILER..n - 16] != MAGIC {
        return None;
    }
    let seq = u64::from_be_bytes(frame[n - 16..n - 8].try_into().ok()?);
    let t = u64::from_be_bytes(frame[n - 8..].try_into().ok()?);
    Some((seq, t))
}

fn open(ifname: &str, ring: RingVersion, af_xdp: bool) -> Result<Box<dyn Device>> {
    if af_xdp {
        let ifindex = io::linux::if_index(ifname).with_context(|| format!("opening {ifname}"))?;
        let queues = io::linux::rx_queues(ifname).max(1) as u32;
        let prog = XdpRedirect::attach(ifname, ifindex, queues, None).with_context(|| format!("opening {ifname}"))?;
        let mut c = AfXdpConfig::new(ifname);
        c.queues = (0..queues).collect();
        return Ok(Box::new(AfXdp::open(&c, Arc::new(prog)).with_context(|| format!("opening {ifname}"))?));
    }
    let mut c = AfPacketConfig::new(ifname);
    c.ring = ring;
    // It sends and receives no GSO frames: many small slots absorb bursts better.
    c.v2_frame_size = 4096;
    c.v2_slots = 4096;
    // The generator's own frames carry complete checksums; what it receives may carry
    // partial ones (a device's offload), which the analyser does not need.
    Ok(Box::new(AfPacket::open(c).with_context(|| format!("opening {ifname}"))?))
}

pub fn run(a: &TrafgenArgs) -> Result<Report> {
    if a.size < 64 || a.size > 9000 {
        bail!("--size {}: expected 64 to 9000 bytes (Ethernet frame, FCS excluded)", a.size);
    }
    if a.duration <= 0.0 || a.duration > 600.0 {
        bail!("--duration {}: expected more than 0 and at most 600 seconds", a.duration);
    }
    let src_mac = match a.src_mac {
        Some(m) => m,
        None => EthernetAddress(io::linux::mac(&a.tx_if).ok_or_else(|| anyhow!("{}: no MAC to send from (give --src-mac)", a.tx_if))?),
    };
    let spec = StreamSpec {
        name: "trafgen".into(),
        packet: PacketSpec {
            src_mac,
            dst_mac: a.dst_mac,
            src: a.src,
            dst: a.dst,
            ttl: 64,
            l4: L4Spec::Udp { src_port: a.src_port, dst_port: a.dst_port },
            frame_size: a.size,
        },
        modifiers: Vec::new(),
        count: None,
        rate_pps: None,
    };
    let min = if a.src.is_ipv4() { 14 + 20 + 8 } else { 14 + 40 + 8 } + TRAILER;
    if a.size < min {
        bail!("--size {}: at least {min} bytes hold the headers and the 20-byte trailer", a.size);
    }
    let mut gen = PacketGenerator::new(std::slice::from_ref(&spec)).map_err(|(_, e)| anyhow!("template: {e}"))?;
    let mut tx = open(&a.tx_if, RingVersion::V3, a.af_xdp)?;
    let mut rx = if a.rx_if == a.tx_if { None } else { Some(open(&a.rx_if, a.rx_ring, a.af_xdp)?) };
    let mut pool = Pool::new(4096, 64);
    let total_due = if a.rate == 0 { u64::MAX } else { (a.rate as f64 * a.duration) as u64 };
    let mut seen = vec![0u8; if a.rate == 0 { 1 << 20 } else { total_due as usize + 1 }];
    let mut lat: Vec<u64> = Vec::with_capacity(seen.len().min(1 << 24));
    let (mut sent, mut received, mut dups, mut corrupt, mut rx_bytes, mut tx_failed) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut bufs: Vec<BufIdx> = Vec::with_capacity(BATCH);
    let mut rbufs: Vec<BufIdx> = Vec::with_capacity(256);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(a.duration);
    let capacity = seen.len() as u64;
    let mut poll_rx =
        |pool: &mut Pool, rx: &mut Option<Box<dyn Device>>, tx: &mut Box<dyn Device>, rbufs: &mut Vec<BufIdx>| -> (usize, u64) {
            rbufs.clear();
            match rx.as_mut() {
                Some(r) => r.rx(pool, rbufs, 256),
                None => tx.rx(pool, rbufs, 256),
            };
            let now = t0.elapsed().as_nanos() as u64;
            for &b in rbufs.iter() {
                let f = pool.get(b).bytes();
                match trailer(f) {
                    Some((seq, t)) if (seq as usize) < seen.len() && t <= now => {
                        if seen[seq as usize] != 0 {
                            dups += 1;
                        } else {
                            seen[seq as usize] = 1;
                            received += 1;
                            rx_bytes += f.len() as u64;
                            lat.push(now - t);
                        }
                    }
                    Some(_) => corrupt += 1,
                    None => {}
                }
            }
            pool.free_many(rbufs);
            // Frames taken now, and good packets received so far.
            (rbufs.len(), received)
        };
    let mut tx_end = t0;
    loop {
        let now = Instant::now();
        if now >= end || sent >= total_due {
            break;
        }
        let due = if a.rate == 0 { sent + BATCH as u64 } else { ((now - t0).as_secs_f64() * a.rate as f64) as u64 + 1 };
        let want = due.saturating_sub(sent).min(BATCH as u64).min(total_due - sent).min(capacity - sent) as usize;
        if want > 0 {
            bufs.clear();
            let _ = gen.rx(&mut pool, &mut bufs, want);
            let t = t0.elapsed().as_nanos() as u64;
            for (k, &b) in bufs.iter().enumerate() {
                stamp(pool.get_mut(b).bytes_mut(), sent + k as u64, t);
            }
            let n = bufs.len() as u64;
            let r = tx.tx(&mut pool, &mut bufs);
            tx_failed += r.failed as u64;
            sent += n;
            tx_end = Instant::now();
            if sent >= capacity {
                break;
            }
        }
        poll_rx(&mut pool, &mut rx, &mut tx, &mut rbufs);
    }
    // Drain: until every packet sent is back, or nothing has arrived for 1 s (a device
    // under test that was not scheduled for a while still delivers what it holds), at
    // most 5 s.
    let drain_end = Instant::now() + Duration::from_secs(5);
    let mut quiet_since = Instant::now();
    while Instant::now() < drain_end {
        let (got, so_far) = poll_rx(&mut pool, &mut rx, &mut tx, &mut rbufs);
        if so_far >= sent {
            break;
        }
        if got > 0 {
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() > Duration::from_secs(1) {
            break;
        }
    }
    let elapsed = (tx_end - t0).as_secs_f64().max(1e-9);
    lat.sort_unstable();
    let latency = (!lat.is_empty()).then(|| Latency {
        avg: lat.iter().sum::<u64>() / lat.len() as u64,
        min: lat[0],
        max: lat[lat.len() - 1],
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        p999: percentile(&lat, 0.999),
    });
    let lost = sent.saturating_sub(received);
    Ok(Report {
        size: a.size,
        offered_pps: a.rate,
        duration_s: elapsed,
        sent,
        received,
        lost,
        loss_percent: if sent == 0 { 0.0 } else { lost as f64 * 100.0 / sent as f64 },
        duplicates: dups,
        corrupt,
        tx_pps: sent as f64 / elapsed,
        rx_pps: received as f64 / elapsed,
        rx_mbps: rx_bytes as f64 * 8.0 / elapsed / 1e6,
        latency_ns: latency,
        tx_failed,
    })
}

pub fn print(r: &Report) {
    println!(
        "size {} B, offered {} pps, {:.2} s",
        r.size,
        if r.offered_pps == 0 { "max".into() } else { r.offered_pps.to_string() },
        r.duration_s
    );
    println!(
        "sent {}  received {}  lost {} ({:.3} %)  duplicates {}  corrupt {}  tx refused {}",
        r.sent, r.received, r.lost, r.loss_percent, r.duplicates, r.corrupt, r.tx_failed
    );
    println!("tx {:.0} pps  rx {:.0} pps  rx {:.1} Mbit/s", r.tx_pps, r.rx_pps, r.rx_mbps);
    match &r.latency_ns {
        Some(l) => {
            println!("+-----------------+-----------------+-----------------+-----------------+-----------------+-----------------+");
            println!("| Avg latency(ns) | Min latency(ns) | Max latency(ns) |     p50 (ns)    |     p99 (ns)    |    p99.9 (ns)   |");
            println!("+-----------------+-----------------+-----------------+-----------------+-----------------+-----------------+");
            println!("| {:>15} | {:>15} | {:>15} | {:>15} | {:>15} | {:>15} |", l.avg, l.min, l.max, l.p50, l.p99, l.p999);
            println!("+-----------------+-----------------+-----------------+-----------------+-----------------+-----------------+");
        }
        None => println!("no packets received: no latency"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_round_trips_and_checksum_stays_valid() {
        let spec = StreamSpec {
            name: "t".into(),
            packet: PacketSpec {
                src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
                dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: "2001:db8::2".parse().unwrap(),
                dst: "2001:db8:1::2".parse().unwrap(),
                ttl: 64,
                l4: L4Spec::Udp { src_port: 1, dst_port: 2 },
                frame_size: 200,
            },
            modifiers: Vec::new(),
            count: None,
            rate_pps: None,
        };
        let mut g = PacketGenerator::new(std::slice::from_ref(&spec)).unwrap();
        let mut pool = Pool::new(4, 0);
        let mut v = Vec::new();
        g.rx(&mut pool, &mut v, 1);
        let f = pool.get_mut(v[0]).bytes_mut();
        stamp(f, 77, 123_456);
        assert_eq!(trailer(f), Some((77, 123_456)));
        let p = wire::ipv6::Ipv6Packet::new_checked(&f[14..]).unwrap();
        let ph = wire::checksum::pseudo_header_v6(&p.src_addr(), &p.dst_addr(), 17, (f.len() - 54) as u32);
        assert_eq!(wire::checksum::Checksum::new().add(ph).add_bytes(&f[54..]).fold(), 0xffff);
        // Headers in front (a tunnel) do not hide it; a short or foreign frame is not ours.
        let mut wrapped = vec![0u8; 56];
        wrapped.extend_from_slice(f);
        assert_eq!(trailer(&wrapped), Some((77, 123_456)));
        assert_eq!(trailer(&f[..f.len() - 1]), None);
    }
}
