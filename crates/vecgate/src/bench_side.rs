//! Inputs shared with another dataplane for side-by-side runs (`scripts/bench-vs-vpp.sh`):
//! a scenario's frames and its large route table written to files (`--export DIR`), and
//! read back from them (`--frames`, `--route-file`), so both dataplanes forward the same
//! packets, byte for byte, through the same table.

use anyhow::{anyhow, Context as _, Result};
use engine::device::{Device, RxStatus, TxResult};
use engine::{BufIdx, Pool};
use io::pg::{PacketGenerator, Pattern, StreamSpec};
use ip::{Prefix, RouteTarget};
use std::path::{Path, PathBuf};

/// `vecgate bench` options for side-by-side runs.
#[derive(Debug, Clone, Default)]
pub struct SideBySide {
    /// Write the scenario's frames (`frames.pcap`, one period of its generator) and, for
    /// the large-FIB scenarios, its routes (`routes.txt`) into this directory; no run.
    pub export: Option<PathBuf>,
    /// Send these frames (a pcap, replayed in order, over and over) instead of the
    /// scenario's generator.
    pub frames: Option<PathBuf>,
    /// The large-FIB scenarios: load this route file instead of drawing the routes.
    pub routes: Option<PathBuf>,
}

/// Frames after which a stream repeats itself: the least common multiple of its
/// modifiers' cycles (`None` if one is random).
pub fn period(s: &StreamSpec) -> Option<u64> {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    s.modifiers.iter().try_fold(1u64, |p, m| {
        let n = match &m.pattern {
            Pattern::Increment { count } => *count as u64,
            Pattern::List(l) => l.len() as u64,
            Pattern::Addresses(l) => l.len() as u64,
            Pattern::Random { .. } => return None,
        };
        Some(p / gcd(p, n.max(1)) * n.max(1))
    })
}

/// Write one period of `stream`'s frames, as the generator makes them, to `path`.
pub fn export_frames(stream: &StreamSpec, pool: &mut Pool, path: &Path) -> Result<u64> {
    let n = period(stream).ok_or_else(|| anyhow!("the scenario draws random values; its frames cannot be exported"))?;
    let mut spec = stream.clone();
    spec.count = Some(n);
    let mut g = PacketGenerator::new(&[spec]).map_err(|(_, e)| anyhow!(e))?;
    let mut w = pcap_writer(path)?;
    let mut bufs = Vec::new();
    let mut written = 0;
    while written < n {
        bufs.clear();
        if g.rx(pool, &mut bufs, engine::VECTOR_SIZE) == RxStatus::Exhausted && bufs.is_empty() {
            break;
        }
        for &b in &bufs {
            write_frame(&mut w, pool.get(b).bytes())?;
            written += 1;
        }
        pool.free_many(&bufs);
    }
    Ok(written)
}

/// Write the frames a scenario sends over and over in place of a generator's (an ESP
/// packet sealed once, a datagram's two fragments) to `path`, once each.
pub fn export_fixed<'a>(frames: impl IntoIterator<Item = &'a [u8]>, path: &Path) -> Result<u64> {
    let mut w = pcap_writer(path)?;
    let mut written = 0;
    for f in frames {
        write_frame(&mut w, f)?;
        written += 1;
    }
    Ok(written)
}

type Pcap = pcap_file::pcap::PcapWriter<std::io::BufWriter<std::fs::File>>;

fn pcap_writer(path: &Path) -> Result<Pcap> {
    let f = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(pcap_file::pcap::PcapWriter::new(std::io::BufWriter::new(f))?)
}

fn write_frame(w: &mut Pcap, bytes: &[u8]) -> Result<()> {
    w.write_packet(&pcap_file::pcap::PcapPacket::new(std::time::Duration::ZERO, bytes.len() as u32, bytes))?;
    Ok(())
}

/// Write routes as a route file (`control::fib`'s format).
pub fn export_routes(routes: &[(Prefix, RouteTarget)], path: &Path) -> Result<()> {
    let mut text = String::with_capacity(routes.len() * 32);
    for (p, t) in routes {
        text.push_str(&control::fib::route_line(p, t));
        text.push('\n');
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Read a route file.
pub fn load_routes(path: &Path) -> Result<Vec<(Prefix, RouteTarget)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    control::fib::parse_route_file(&text, &path.display().to_string()).map_err(|e| anyhow!(e))
}

/// Read a pcap's frames.
pub fn load_frames(path: &Path) -> Result<Vec<Vec<u8>>> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut r = pcap_file::pcap::PcapReader::new(f).with_context(|| format!("{} is not a pcap file", path.display()))?;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.with_context(|| format!("{}: record {}", path.display(), out.len()))?.data.into_owned());
    }
    if out.is_empty() {
        anyhow::bail!("{} holds no frames", path.display());
    }
    Ok(out)
}

/// A device that receives `frames` in order, over and over, `count` in all.
pub struct FrameCycle {
    frames: Vec<Vec<u8>>,
    next: usize,
    remaining: u64,
}

impl FrameCycle {
    pub fn new(frames: Vec<Vec<u8>>, count: u64) -> FrameCycle {
        FrameCycle { frames, next: 0, remaining: count }
    }
}

impl Device for FrameCycle {
    fn kind(&self) -> &'static str {
        "pg"
    }

    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        if self.remaining == 0 {
            return RxStatus::Exhausted;
        }
        let first = out.len();
        let got = pool.alloc_regular_many((max as u64).min(self.remaining) as usize, out);
        for &b in &out[first..first + got] {
            let buf = pool.get_mut(b);
            // Frames longer than a regular buffer were refused by `load_frames`' caller.
            let _ = buf.write(&self.frames[self.next]);
            buf.meta = engine::Meta::default();
            self.next = (self.next + 1) % self.frames.len();
        }
        self.remaining -= got as u64;
        RxStatus::Open
    }

    fn takes_chains(&self) -> bool {
        io::null::NullSink.takes_chains()
    }

    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        io::null::NullSink.tx(pool, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io::pg::{Field, L4Spec, ModifierSpec, PacketSpec};

    #[test]
    fn exported_frames_replay_as_the_generator_sends_them() {
        let spec = StreamSpec {
            name: "s".into(),
            packet: PacketSpec {
                src_mac: "02:fe:00:00:00:01".parse().unwrap(),
                dst_mac: "02:00:00:00:00:01".parse().unwrap(),
                src: "198.18.0.2".parse().unwrap(),
                dst: "198.19.0.1".parse().unwrap(),
                ttl: 64,
                l4: L4Spec::Udp { src_port: 1024, dst_port: 9 },
                frame_size: 64,
            },
            modifiers: vec![
                ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 4 } },
                ModifierSpec {
                    field: Field::DstAddr,
                    pattern: Pattern::Addresses(vec![
                        "198.19.0.7".parse().unwrap(),
                        "198.19.1.9".parse().unwrap(),
                        "198.19.3.1".parse().unwrap(),
                    ]),
                },
            ],
            count: None,
            rate_pps: None,
        };
        assert_eq!(period(&spec), Some(12));
        let mut pool = Pool::new(64, 0);
        let dir = std::env::temp_dir().join(format!("vecgate-side-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("frames.pcap");
        assert_eq!(export_frames(&spec, &mut pool, &path).unwrap(), 12);
        let frames = load_frames(&path).unwrap();
        // Twice round the period from the generator, and from the replaying device.
        let mut g = PacketGenerator::new(&[StreamSpec { count: Some(24), ..spec.clone() }]).unwrap();
        let mut cycle = FrameCycle::new(frames.clone(), 24);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        while g.rx(&mut pool, &mut a, 5) == RxStatus::Open && a.len() < 24 {}
        while cycle.rx(&mut pool, &mut b, 7) == RxStatus::Open {}
        assert_eq!((a.len(), b.len()), (24, 24));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(pool.get(*x).bytes(), pool.get(*y).bytes());
        }
        // The 12 frames differ from each other (ports and addresses both cycle).
        let distinct: std::collections::BTreeSet<&Vec<u8>> = frames.iter().collect();
        assert_eq!(distinct.len(), 12);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
