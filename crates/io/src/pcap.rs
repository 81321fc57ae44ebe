//! pcap files as an interface: the receive side reads a capture (each record becomes
//! one received frame, until the file ends), the transmit side appends every sent frame
//! to another capture. Together they run a whole graph offline (`vecgate pcap`).

use engine::device::{Device, DroppedAs, RxStatus, TxResult};
use engine::{BufIdx, Pool};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("{path} is not a pcap file: {source}")]
    Format { path: String, source: pcap_file::PcapError },
}

pub struct PcapDevice {
    reader: Option<PcapReader<File>>,
    writer: Option<PcapWriter<BufWriter<File>>>,
    /// Records that could not be read or did not fit a buffer.
    pub rx_errors: u64,
}

impl PcapDevice {
    /// Either side may be absent (a pcap interface that only captures, or only replays).
    pub fn open(input: Option<&Path>, output: Option<&Path>) -> Result<PcapDevice, PcapError> {
        let reader = match input {
            Some(p) => {
                let f = File::open(p).map_err(|e| PcapError::Open { path: p.display().to_string(), source: e })?;
                Some(PcapReader::new(f).map_err(|e| PcapError::Format { path: p.display().to_string(), source: e })?)
            }
            None => None,
        };
        let writer = match output {
            Some(p) => {
                let f = File::create(p).map_err(|e| PcapError::Open { path: p.display().to_string(), source: e })?;
                Some(PcapWriter::new(BufWriter::new(f)).map_err(|e| PcapError::Format { path: p.display().to_string(), source: e })?)
            }
            None => None,
        };
        Ok(PcapDevice { reader, writer, rx_errors: 0 })
    }
}

/// A capture's file and how many more records it takes: the file is flushed and closed
/// as the count runs out (a dropped writer flushes too). The workers that feed one
/// capture share it ([`Shared`]): one file however many there are.
struct Countdown<W> {
    writer: Option<W>,
    remaining: u64,
}

/// A capture shared by the workers: each record is written under the lock, with its
/// timestamp taken there, so the file's records are in time order. Captures are
/// bounded and off by default; the lock is what VPP's pcap trace takes too.
struct Shared<W>(Arc<Mutex<Countdown<W>>>);

impl<W> Clone for Shared<W> {
    fn clone(&self) -> Self {
        Shared(Arc::clone(&self.0))
    }
}

impl<W> Shared<W> {
    fn new(writer: W, remaining: u64) -> Shared<W> {
        Shared(Arc::new(Mutex::new(Countdown { writer: Some(writer), remaining })))
    }

    /// One record by `write` given the time (false: it failed), then `close` the writer if
    /// that was the last; false once the capture is done (for every worker).
    fn record(&self, write: impl FnOnce(&mut W, Duration) -> bool, close: impl FnOnce(W)) -> bool {
        let Ok(mut c) = self.0.lock() else { return false };
        let c = &mut *c;
        let Some(w) = c.writer.as_mut() else { return false };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        if c.remaining == 0 || !write(w, now) {
            return false;
        }
        c.remaining -= 1;
        if c.remaining == 0 {
            // Flushed as the capture ends, so the file is whole without waiting for a stop.
            if let Some(w) = c.writer.take() {
                close(w);
            }
            return false;
        }
        true
    }
}

/// A capture file of an interface's frames (`pcap trace`), up to `remaining` frames
/// received or sent by any worker; clone it for each worker.
#[derive(Clone)]
pub struct PcapCapture(Shared<PcapWriter<BufWriter<File>>>);

impl PcapCapture {
    pub fn create(path: &Path, count: u64) -> Result<PcapCapture, PcapError> {
        let f = File::create(path).map_err(|e| PcapError::Open { path: path.display().to_string(), source: e })?;
        let writer = PcapWriter::new(BufWriter::new(f)).map_err(|e| PcapError::Format { path: path.display().to_string(), source: e })?;
        Ok(PcapCapture(Shared::new(writer, count)))
    }
}

impl engine::device::FrameSink for PcapCapture {
    fn record(&mut self, frame: &[u8]) -> bool {
        self.0.record(
            |w, ts| w.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame)).is_ok(),
            |w| {
                let _ = std::io::Write::flush(&mut w.into_writer());
            },
        )
    }
}

/// A capture file of dropped packets for `pcap trace drop`: pcapng, since each record
/// carries why the packet was dropped (the packet's comment, which Wireshark and
/// tshark show as `frame.comment`) and records of two link types share the file (an
/// interface description each: Ethernet frames, and IP packets without a link header).
/// Up to `remaining` packets from any worker, then done; clone it for each worker.
#[derive(Clone)]
pub struct DropCapture(Shared<PcapNgWriter<BufWriter<File>>>);

/// The capture's interface ids, in the order their descriptions are written.
const DROPS_ETHERNET: u32 = 0;
const DROPS_IP: u32 = 1;

impl DropCapture {
    pub fn create(path: &Path, count: u64) -> Result<DropCapture, PcapError> {
        let name = || path.display().to_string();
        let f = File::create(path).map_err(|e| PcapError::Open { path: name(), source: e })?;
        let mut w = PcapNgWriter::new(BufWriter::new(f)).map_err(|e| PcapError::Format { path: name(), source: e })?;
        for (linktype, what) in [(DataLink::ETHERNET, "dropped Ethernet frames"), (DataLink::RAW, "dropped IP packets")] {
            let idb = InterfaceDescriptionBlock {
                linktype,
                snaplen: 0,
                options: vec![
                    InterfaceDescriptionOption::IfName(Cow::Borrowed("error-drop")),
                    InterfaceDescriptionOption::IfDescription(Cow::Borrowed(what)),
                    // Nanosecond timestamps, as the writer writes them.
                    InterfaceDescriptionOption::IfTsResol(9),
                ],
            };
            w.write_pcapng_block(idb).map_err(|e| PcapError::Format { path: name(), source: e })?;
        }
        Ok(DropCapture(Shared::new(w, count)))
    }
}

impl engine::device::DropSink for DropCapture {
    fn record(&mut self, packet: &[u8], link: DroppedAs, reason: &str) -> bool {
        self.0.record(
            |w, timestamp| {
                let block = EnhancedPacketBlock {
                    interface_id: match link {
                        DroppedAs::Ethernet => DROPS_ETHERNET,
                        DroppedAs::Ip => DROPS_IP,
                    },
                    timestamp,
                    original_len: packet.len() as u32,
                    data: Cow::Borrowed(packet),
                    options: vec![EnhancedPacketOption::Comment(Cow::Borrowed(reason))],
                };
                w.write_pcapng_block(block).is_ok()
            },
            |w| {
                let _ = std::io::Write::flush(&mut w.into_inner());
            },
        )
    }
}

impl Device for PcapDevice {
    fn kind(&self) -> &'static str {
        "pcap"
    }

    fn has_rx(&self) -> bool {
        self.reader.is_some()
    }

    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        let Some(r) = self.reader.as_mut() else {
            return RxStatus::Exhausted;
        };
        for _ in 0..max {
            match r.next_packet() {
                None => return RxStatus::Exhausted,
                Some(Err(_)) => {
                    // A damaged record ends the file: its length can't be trusted.
                    self.rx_errors += 1;
                    return RxStatus::Exhausted;
                }
                Some(Ok(pkt)) => {
                    let Some(b) = pool.alloc(pkt.data.len()) else {
                        self.rx_errors += 1;
                        continue;
                    };
                    if pool.get_mut(b).write(&pkt.data).is_err() {
                        pool.free(b);
                        self.rx_errors += 1;
                        continue;
                    }
                    out.push(b);
                }
            }
        }
        RxStatus::Open
    }

    /// A chained packet is made one buffer here, for its record: a file gains nothing
    /// from gathering, and the record stays the capture crate's to write.
    fn takes_chains(&self) -> bool {
        true
    }

    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let mut r = TxResult::default();
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        pool.linearize_all(bufs);
        for &b in bufs.iter() {
            // A file is no NIC: a checksum left for the device is computed here.
            crate::vnet::complete_in_software(pool.get_mut(b));
            let data = pool.get(b).bytes();
            match self.writer.as_mut() {
                Some(w) => match w.write_packet(&PcapPacket::new(ts, data.len() as u32, data)) {
                    Ok(_) => {
                        r.sent += 1;
                        r.sent_bytes += data.len();
                    }
                    Err(_) => r.failed += 1,
                },
                None => {
                    // Receive-only pcap interface: transmit is a sink.
                    r.sent += 1;
                    r.sent_bytes += data.len();
                }
            }
        }
        pool.free_many(bufs);
        bufs.clear();
        r
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if let Some(w) = self.writer.take() {
            let mut inner = w.into_writer();
            std::io::Write::flush(&mut inner)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::device::DropSink;
    use pcap_file::pcapng::{Block, PcapNgReader};

    /// Two workers feed one capture of drops: the file holds exactly `count` records
    /// from both, in time order, each whole with its reason, and once the count is
    /// reached both workers are told the capture is done.
    #[test]
    fn workers_share_one_capture_of_drops_up_to_its_count() {
        let path = std::env::temp_dir().join(format!("vecgate-drops-{}.pcapng", std::process::id()));
        let capture = DropCapture::create(&path, 100).unwrap();
        let workers: Vec<_> = (0..2)
            .map(|k| {
                let mut sink = capture.clone();
                std::thread::spawn(move || {
                    let mut taken = 0;
                    for n in 0..80u8 {
                        let packet = [0x45, k, n];
                        if !sink.record(&packet, DroppedAs::Ip, &format!("ip4-input: bad-length, received on w{k}")) {
                            return (taken, false);
                        }
                        taken += 1;
                    }
                    (taken, true)
                })
            })
            .collect();
        drop(capture);
        let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        // One worker's 100th record ends the capture: that call says done, as do any after.
        assert_eq!(results.iter().map(|(taken, _)| taken).sum::<u32>(), 99, "{results:?}");
        assert!(results.iter().any(|(_, open)| !open), "{results:?}");

        let mut r = PcapNgReader::new(File::open(&path).unwrap()).unwrap();
        let (mut idbs, mut records, mut last) = (0, Vec::new(), Duration::ZERO);
        while let Some(block) = r.next_block() {
            match block.unwrap() {
                Block::InterfaceDescription(_) => idbs += 1,
                Block::EnhancedPacket(p) => {
                    assert!(p.timestamp >= last, "records in time order");
                    last = p.timestamp;
                    assert_eq!((p.interface_id, p.data.len()), (DROPS_IP, 3));
                    let Some(EnhancedPacketOption::Comment(c)) = p.options.first() else { panic!("no comment: {p:?}") };
                    assert_eq!(c.as_ref(), format!("ip4-input: bad-length, received on w{}", p.data[1]));
                    records.push((p.data[1], p.data[2]));
                }
                other => panic!("unexpected block {other:?}"),
            }
        }
        std::fs::remove_file(&path).unwrap();
        assert_eq!((idbs, records.len()), (2, 100));
        for k in 0..2 {
            let mine: Vec<u8> = records.iter().filter(|(w, _)| *w == k).map(|(_, n)| *n).collect();
            assert!(!mine.is_empty() && mine.windows(2).all(|w| w[0] + 1 == w[1]), "worker {k}'s records in its order: {mine:?}");
        }
    }
}
