//! `vecgate bench parcel-forward | parcel-split | parcel-join`: IP parcels through the
//! graph on one core, as `bench.rs` runs its scenarios, with `--segment-size` and
//! `--segments`. The report adds `segments_per_sec` beside `mpps` (packets in: parcels,
//! or datagrams for `parcel-join`).
//!
//! `parcel-forward` gets full vectors (256 parcels, as a loaded receiver hands them over,
//! and as `ip4-forward`'s 256 packets, the rate it is compared with); for the split and
//! the join a vector carries about 256 segments (256 / N parcels, or whole runs of N
//! datagrams), so that they make or take one vector's worth; `--per-vector` sets the
//! count (`--per-vector 16`: the forward as measured before 2026-12-03). Frames come from the pool's
//! large buffers where they do not fit a regular one (the packet generator only fills
//! regular buffers, hence the replay device here).
//!
//! `--family ip6`: IPv6 parcels (the Jumbo Payload option; `parcel6-input`, `parcel6-split`)
//! or, for `parcel-join`, IPv6 datagrams joined by `parcel6-join`. `parcel-join` takes
//! `--gso` too (the datagrams arrive as UDP GSO frames of N segments, as a local sender
//! hands them over through a virtio-net header: the frame's checksum partial, its segment
//! size in the offload metadata).

use anyhow::{bail, Result};
use control::config::Config;
use control::dataplane::assemble;
use engine::device::{Device, RxStatus, TxResult};
use engine::{BufIdx, Pool};
use serde::Serialize;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use wire::parcel::{Parcel4, Parcel4Repr, Parcel6, Parcel6Repr, SegmentsRepr, UdpChecksumForm};

pub const SCENARIOS: &[&str] = &["parcel-forward", "parcel-split", "parcel-join"];

/// `null0` takes parcels (`parcels = true`, MTU 65535) except for `parcel-split`; the
/// IPv6 addresses, neighbour and route are those of `parcel-join --family ip6`.
fn config(parcel_link: bool) -> String {
    let link = if parcel_link { "mtu = 65535\nparcels = true" } else { "mtu = 9000" };
    format!(
        r#"
[dataplane]
buffers = 4096
medium_buffers = 2048
large_buffers = 700

[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:02"
{link}
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[neighbour]]
interface = "null0"
ip = "198.18.1.2"
mac = "02:00:00:00:01:02"

[[neighbour]]
interface = "null0"
ip = "2001:db8:1::2"
mac = "02:00:00:00:01:02"

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"

[[route]]
prefix = "2001:db8:100::/48"
via = "2001:db8:1::2"
"#
    )
}

const SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const DST: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const DST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
const ETH: [u8; 14] = [2, 0, 0, 0, 0, 1, 2, 0xfe, 0, 0, 0, 1, 8, 0];
const ETH6: [u8; 14] = [2, 0, 0, 0, 0, 1, 2, 0xfe, 0, 0, 0, 1, 0x86, 0xdd];

fn payload(len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + salt * 7) as u8).collect()
}

/// An Ethernet frame holding a parcel of `n` segments of `size` bytes, IPv4 or IPv6 (`v6`).
fn parcel_frame(size: usize, n: usize, v6: bool) -> Result<Vec<u8>> {
    let segments = SegmentsRepr { src_port: 40000, dst_port: 9, nsegs: n as u8, seg_len: size as u16, last_len: size as u16 };
    let r4 = Parcel4Repr { src: SRC, dst: DST, ident: 1, ttl: 64, dscp_ecn: 0, probe: None, segments };
    let r6 = Parcel6Repr { src: SRC6, dst: DST6, hop_limit: 64, traffic_class: 0, flow_label: 0, segments };
    let mut f = if v6 { ETH6.to_vec() } else { ETH.to_vec() };
    f.resize(14 + if v6 { r6.buffer_len() } else { r4.buffer_len() }, 0);
    if v6 {
        r6.emit(&mut f[14..]);
    } else {
        r4.emit(&mut f[14..]);
    }
    // The segments end the parcel, one after another.
    let data_at = f.len() - n * size;
    for (i, seg) in f[data_at..].chunks_exact_mut(size).enumerate() {
        seg.copy_from_slice(&payload(size, i));
    }
    let bad = |e: wire::parcel::ParcelError| anyhow::anyhow!("bench parcel: {e}");
    if v6 {
        let mut p = Parcel6::new_checked(&mut f[14..]).map_err(bad)?;
        p.fill_segment_checksums();
        Parcel6Repr::fill_udp_checksum(&mut p);
    } else {
        let mut p = Parcel4::new_checked(&mut f[14..]).map_err(bad)?;
        p.fill_segment_checksums();
        Parcel4Repr::fill_udp_checksum(&mut p, UdpChecksumForm::Prototype);
    }
    Ok(f)
}

/// An Ethernet frame holding one UDP datagram of `size` payload bytes, IPv4 or IPv6
/// (`v6`). With `gso` (a UDP GSO frame, its segments of `gso` bytes) the UDP checksum
/// field holds the pseudo-header sum only, left for the device as a sender's kernel
/// leaves it.
fn datagram_frame(size: usize, v6: bool, gso: Option<usize>) -> Vec<u8> {
    let hl = if v6 { 40 } else { 20 };
    let mut f = if v6 { ETH6.to_vec() } else { ETH.to_vec() };
    f.resize(14 + hl + 8 + size, 0);
    if v6 {
        let ip = wire::ipv6::Ipv6Repr {
            src: SRC6,
            dst: DST6,
            next_header: wire::IpProtocol::Udp,
            payload_len: 8 + size,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        };
        ip.emit(&mut wire::ipv6::Ipv6Packet::new_unchecked(&mut f[14..54]));
    } else {
        let ip = wire::ipv4::Ipv4Repr {
            src: SRC,
            dst: DST,
            protocol: wire::IpProtocol::Udp,
            payload_len: 8 + size,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            ident: 1,
            dont_frag: false,
        };
        ip.emit(&mut wire::ipv4::Ipv4Packet::new_unchecked(&mut f[14..34]));
    }
    let data = 14 + hl + 8;
    for (i, chunk) in f[data..].chunks_mut(gso.unwrap_or(size).max(1)).enumerate() {
        chunk.copy_from_slice(&payload(chunk.len(), i));
    }
    let mut u = wire::udp::UdpPacket::new_unchecked(&mut f[14 + hl..]);
    wire::udp::UdpRepr { src_port: 40000, dst_port: 9 }.emit(&mut u, size);
    let udp_len = 8 + size;
    match (gso, v6) {
        (Some(_), false) => {
            let sum = wire::checksum::pseudo_header_v4(SRC, DST, 17, udp_len as u16).fold();
            f[14 + hl + 6..14 + hl + 8].copy_from_slice(&sum.to_be_bytes());
        }
        (Some(_), true) => {
            let sum = wire::checksum::pseudo_header_v6(&SRC6, &DST6, 17, udp_len as u32).fold();
            f[14 + hl + 6..14 + hl + 8].copy_from_slice(&sum.to_be_bytes());
        }
        (None, false) => u.fill_checksum_v4(SRC, DST),
        (None, true) => u.fill_checksum_v6(&SRC6, &DST6),
    }
    f
}

/// Replays one frame `remaining` times, at most `per_vector` a poll, in buffers of the
/// class its length needs.
struct Replay {
    frame: Vec<u8>,
    /// A UDP GSO frame's offload metadata, as a virtio-net header gives it: where its UDP
    /// header is in the frame, the segment size.
    gso: Option<(usize, u16)>,
    per_vector: usize,
    remaining: u64,
}

impl Device for Replay {
    fn kind(&self) -> &'static str {
        "pg"
    }
    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        let n = (self.per_vector.min(max) as u64).min(self.remaining);
        for _ in 0..n {
            let Some(b) = pool.alloc(self.frame.len()) else { break };
            let buf = pool.get_mut(b);
            let _ = buf.write(&self.frame);
            if let Some((l4, gso_size)) = self.gso {
                buf.set_partial_checksum(l4, 6);
                buf.meta.offload.gso = engine::GsoKind::UdpL4;
                buf.meta.offload.gso_size = gso_size;
            }
            out.push(b);
            self.remaining -= 1;
        }
        if self.remaining == 0 {
            RxStatus::Exhausted
        } else {
            RxStatus::Open
        }
    }
    /// Frees what it is given unread.
    fn takes_chains(&self) -> bool {
        true
    }
    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let n = bufs.len();
        pool.free_many(bufs);
        bufs.clear();
        TxResult { sent: n, sent_bytes: 0, failed: 0 }
    }
}

#[derive(Serialize)]
struct Report {
    scenario: String,
    segment_size: usize,
    segments: usize,
    /// `verify_parcel_segments`: segments checked against their slots where a parcel is
    /// split (or made a GSO frame).
    verify_segments: bool,
    /// `verify_parcel_segments_in_transit`: and at every hop, forwarded whole too.
    verify_in_transit: bool,
    /// Frames the replay device hands the graph a vector (`--per-vector`).
    per_vector: usize,
    /// Packets in: parcels, or datagrams for `parcel-join`.
    packets: u64,
    delivered: u64,
    mpps: f64,
    segments_per_sec: f64,
    /// Segment payload bits per second.
    gbps: f64,
    cycles_per_packet: f64,
    cycles_per_segment: f64,
    /// The nodes' median vectors' cycles per packet in, summed (steal and other pauses
    /// of a shared machine move it less), and per segment.
    median_cycles_per_packet: f64,
    median_cycles_per_segment: f64,
    cpu: String,
    tsc_hz: u64,
    nodes: Vec<crate::bench::NodeRow>,
}

#[allow(clippy::too_many_arguments)]
pub fn bench(
    scenario: &str,
    packets: u64,
    json: bool,
    core: usize,
    segment_size: usize,
    segments: usize,
    verify: bool,
    in_transit: bool,
    family: &str,
    gso: bool,
    per_vector: Option<usize>,
) -> Result<()> {
    let v6 = match family {
        "ip4" => false,
        "ip6" => true,
        f => bail!("--family {f}: expected ip4 or ip6"),
    };
    if !SCENARIOS.contains(&scenario) {
        bail!("unknown scenario {scenario:?}; expected one of {}", SCENARIOS.join(", "));
    }
    if !(1..=255).contains(&segments) || !(1..=9000).contains(&segment_size) {
        bail!("--segments {segments} --segment-size {segment_size}: expected 1 to 255 segments of 1 to 9000 bytes");
    }
    let join = scenario == "parcel-join";
    if gso && !join {
        bail!("--gso is parcel-join's option");
    }
    if gso && (segments < 2 || segments * segment_size + 48 > 65535) {
        bail!("--gso --segments {segments} --segment-size {segment_size}: a GSO frame holds 2 or more segments in at most 64 KiB");
    }
    let cfg = Config::parse(&config(scenario != "parcel-split"), "(bench scenario)", Path::new("."))?;
    let (_control, mut worker) = assemble(&cfg)?.into_single();
    worker.cx.parcel.verify_segments = verify;
    worker.cx.parcel.verify_in_transit = in_transit;
    if per_vector.is_some_and(|n| !(1..=engine::VECTOR_SIZE).contains(&n)) {
        bail!("--per-vector: expected 1 to {} frames", engine::VECTOR_SIZE);
    }
    // A vector of 256 segments where a node makes or takes datagrams (the split's output,
    // the join's input fill one vector); a full vector of parcels forwarded whole.
    let segments_vector = (engine::VECTOR_SIZE / segments).max(1);
    let gso_meta = gso.then(|| (14 + if v6 { 40 } else { 20 }, segment_size as u16));
    let (frame, default_vector) = if gso {
        worker.cx.parcel.join_segments = segments;
        (datagram_frame(segment_size * segments, v6, Some(segment_size)), segments_vector)
    } else if join {
        worker.cx.parcel.join_segments = segments;
        (datagram_frame(segment_size, v6, None), segments_vector * segments)
    } else if scenario == "parcel-forward" {
        (parcel_frame(segment_size, segments, v6)?, engine::VECTOR_SIZE)
    } else {
        (parcel_frame(segment_size, segments, v6)?, segments_vector)
    };
    let per_vector = per_vector.unwrap_or(default_vector);
    let round = |n: u64| n.div_ceil(per_vector as u64) * per_vector as u64;
    let (warmup, packets) = (round((packets / 10).max(per_vector as u64 * 4)), round(packets));
    worker.ports[0].device = Box::new(Replay { frame, gso: gso_meta, per_vector, remaining: warmup + packets });
    engine::worker::Context::refresh(&mut worker.cx);
    let (s, secs, _) = crate::bench::measure(&mut worker, core, warmup);
    let input = s.nodes.iter().find(|n| n.name == "pg-input").map(|n| n.runtime.packets).unwrap_or(0);
    let graph_cycles: u64 = s.nodes.iter().filter(|n| n.kind != "input").map(|n| n.runtime.cycles).sum();
    // A node's median is per packet it saw: scale to packets in (split and join change
    // the count between nodes).
    let median: f64 = s
        .nodes
        .iter()
        .filter(|n| n.kind != "input")
        .filter_map(|n| n.vector_median.map(|m| m * n.runtime.packets as f64 / input.max(1) as f64))
        .sum();
    let delivered = s.ports.iter().find(|p| p.name == "null0").map(|p| p.counters.tx_packets).unwrap_or(0);
    let segs_in = if join && !gso { input } else { input * segments as u64 };
    let report = Report {
        scenario: scenario.into(),
        segment_size,
        segments,
        verify_segments: verify,
        verify_in_transit: verify && in_transit,
        per_vector,
        packets: input,
        delivered,
        mpps: input as f64 / secs / 1e6,
        segments_per_sec: segs_in as f64 / secs,
        gbps: segs_in as f64 * segment_size as f64 * 8.0 / secs / 1e9,
        cycles_per_packet: graph_cycles as f64 / input.max(1) as f64,
        cycles_per_segment: graph_cycles as f64 / segs_in.max(1) as f64,
        median_cycles_per_packet: median,
        median_cycles_per_segment: median * input as f64 / segs_in.max(1) as f64,
        cpu: crate::bench::cpu_model(),
        tsc_hz: s.tsc_hz,
        nodes: crate::bench::node_rows(&s),
    };
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", control::format::runtime(&s));
        println!(
            "{}: {} x {} B, {} a vector, {} packets in, {} delivered, {:.3} Mpps, {:.2} M segments/s, {:.2} Gbit/s, {:.0} cycles/packet, {:.1} cycles/segment, median {:.1} cycles/segment ({})",
            report.scenario,
            segments,
            segment_size,
            per_vector,
            input,
            delivered,
            report.mpps,
            report.segments_per_sec / 1e6,
            report.gbps,
            report.cycles_per_packet,
            report.cycles_per_segment,
            report.median_cycles_per_segment,
            report.cpu
        );
    }
    // Forward: a parcel out per parcel in; split: a datagram per segment; join: every
    // datagram in some packet out (runs end at the vector, the MTU and the bound).
    let expected = match scenario {
        "parcel-forward" => Some(input),
        "parcel-split" => Some(segs_in),
        _ => None,
    };
    if expected.is_some_and(|e| e != delivered) || delivered == 0 {
        bail!("{delivered} packets reached the sink from {input} in ({scenario}): the scenario is broken");
    }
    Ok(())
}
