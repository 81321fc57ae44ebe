//! An in-memory device for tests and fuzzing: frames the caller queues are received, and
//! frames the worker sends are handed back to the caller, completed as a wire would carry
//! them. No configuration names it; harnesses put it in a worker's port in place of the
//! device a config opened (see `control::fuzz::graph`). Not on the product path: it
//! allocates a `Vec` per frame sent.

use crate::vnet::{complete_in_software, VnetHdr};
use engine::device::{Device, RxStatus, TxResult};
use engine::{BufIdx, GsoKind, Pool};
use std::sync::mpsc::{channel, Receiver, Sender};

/// A frame to receive, with the virtio-net header a kernel would have put before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxFrame {
    pub bytes: Vec<u8>,
    pub vnet: Option<VnetHdr>,
}

/// A frame the worker sent, its pending checksum completed in software.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxFrame {
    pub bytes: Vec<u8>,
    /// Segmentation still asked of the device (a GSO frame may exceed the MTU whole).
    pub gso: GsoKind,
    pub gso_size: u16,
}

// Frames refused before reaching the graph: no buffer, or a vnet header that cannot be
// carried.
device_counters! { no_buffer = "no-buffer", bad_vnet_hdr = "bad-vnet-hdr" }

pub struct MemDevice {
    rx: Receiver<RxFrame>,
    tx: Sender<TxFrame>,
    stats: Stats,
}

/// The caller's end: queue frames to receive, take the frames sent.
pub struct MemHandle {
    pub rx: Sender<RxFrame>,
    pub tx: Receiver<TxFrame>,
}

/// A device and the handle that feeds it.
pub fn mem_device() -> (MemDevice, MemHandle) {
    let (rx_in, rx_out) = channel();
    let (tx_in, tx_out) = channel();
    (MemDevice { rx: rx_out, tx: tx_in, stats: Stats::default() }, MemHandle { rx: rx_in, tx: tx_out })
}

impl Device for MemDevice {
    fn kind(&self) -> &'static str {
        "mem"
    }

    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        let mut taken = 0;
        while taken < max {
            let Ok(f) = self.rx.try_recv() else { break };
            taken += 1;
            let Some(b) = pool.alloc(f.bytes.len()) else {
                self.stats.no_buffer += 1;
                continue;
            };
            let buf = pool.get_mut(b);
            let written = buf.write(&f.bytes).is_ok();
            if !written || f.vnet.is_some_and(|h| h.apply_to(buf).is_err()) {
                if written {
                    self.stats.bad_vnet_hdr += 1;
                } else {
                    self.stats.no_buffer += 1;
                }
                pool.free(b);
                continue;
            }
            out.push(b);
        }
        RxStatus::Open
    }

    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let mut r = TxResult::default();
        for &b in bufs.iter() {
            let buf = pool.get_mut(b);
            let offload = buf.meta.offload;
            complete_in_software(buf);
            r.sent_bytes += buf.len();
            // A caller that went away is a sink.
            let _ = self.tx.send(TxFrame { bytes: buf.bytes().to_vec(), gso: offload.gso, gso_size: offload.gso_size });
        }
        r.sent = bufs.len();
        pool.free_many(bufs);
        bufs.clear();
        r
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.stats.list()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_in_and_out() {
        let (mut dev, h) = mem_device();
        let mut pool = Pool::new(4, 0);
        h.rx.send(RxFrame { bytes: vec![1, 2, 3], vnet: None }).unwrap();
        // A checksum start past the frame's end is refused by name.
        let bad = VnetHdr { flags: crate::vnet::F_NEEDS_CSUM, csum_start: 10, ..Default::default() };
        h.rx.send(RxFrame { bytes: vec![4; 8], vnet: Some(bad) }).unwrap();
        let mut out = Vec::new();
        assert_eq!(dev.rx(&mut pool, &mut out, 8), RxStatus::Open);
        assert_eq!(out.len(), 1);
        assert_eq!(pool.get(out[0]).bytes(), &[1, 2, 3]);
        assert_eq!(dev.counters(), vec![("no-buffer", 0), ("bad-vnet-hdr", 1)]);
        let r = dev.tx(&mut pool, &mut out);
        assert_eq!((r.sent, r.sent_bytes), (1, 3));
        assert_eq!(h.tx.try_recv().unwrap().bytes, vec![1, 2, 3]);
        assert_eq!(pool.in_use(), 0);
    }
}
