//! `af_xdp`: AF_XDP sockets on a host interface, one per receive queue this worker owns.
//!
//! vecgate loads a small XDP program on the interface ([`program`]) that redirects each
//! receive queue's frames to the socket registered for that queue; the kernel stack
//! sees none of them. Each socket has its own UMEM and four rings ([`socket`],
//! [`ring`]); zero-copy binding is tried first and copy mode used where the driver has
//! no zero-copy support (veth). Frames are copied between the UMEM and pool buffers, as
//! the af_packet backend does, so a UMEM frame goes back to the kernel as soon as it is
//! read and pool buffers stay ours.
//!
//! AF_XDP carries no offload metadata here: a partial checksum is completed in software
//! before transmit, and a GSO frame (which cannot arrive from XDP) is refused and
//! counted. Failures are counted per device (`show interfaces`): the kernel's per-socket
//! statistics (drops for a full receive ring or an empty fill ring, invalid
//! descriptors), transmit frames we had no room for, link down, the interface deleted.

mod program;
mod ring;
mod socket;

pub use program::{XdpMode, XdpRedirect};
pub use socket::BindMode;

use crate::gather;
use crate::linux::{self, OpenError};
use crate::vnet::complete_in_software;
use engine::device::{Device, RxStatus, TxResult};
use engine::{BufIdx, Pool};
use socket::XskSocket;
use std::sync::Arc;

/// How one worker's `af_xdp` device is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfXdpConfig {
    pub host_if: String,
    /// The receive queues this device owns (one socket each).
    pub queues: Vec<u32>,
    /// UMEM frames per socket (a power of two): half for receive, half for transmit.
    pub frames: u32,
    /// UMEM frame size (2048 or 4096): the largest frame that can be sent.
    pub frame_size: u32,
    /// Zero-copy or copy; `None`: zero-copy where the driver allows.
    pub bind: Option<BindMode>,
}

impl AfXdpConfig {
    pub fn new(host_if: &str) -> AfXdpConfig {
        AfXdpConfig { host_if: host_if.to_string(), queues: vec![0], frames: 4096, frame_size: 4096, bind: None }
    }
}

device_counters! {
    rx_bad_descriptor = "rx-bad-descriptor",
    tx_no_frame = "tx-queue-full",
    tx_too_big = "tx-too-big",
    tx_gso = "tx-gso-unsupported",
    tx_software_checksum = "tx-software-checksum",
    tx_link_down = "tx-link-down",
    tx_other = "tx-error",
}

pub struct AfXdp {
    sockets: Vec<XskSocket>,
    /// Keeps the program attached while any worker's device is open.
    program: Arc<XdpRedirect>,
    next_rx: usize,
    link: linux::LinkWatch,
    stats: Stats,
    /// Per-call scratch: the buffers of this transmit that fit a frame.
    sendable: Vec<BufIdx>,
}

impl AfXdp {
    /// Open a socket per configured queue and register it with the interface's program
    /// (attached once per interface by the caller and shared by every worker).
    pub fn open(cfg: &AfXdpConfig, program: Arc<XdpRedirect>) -> Result<AfXdp, OpenError> {
        let ifname = cfg.host_if.as_str();
        let ifindex = linux::if_index(ifname)?;
        let mut sockets = Vec::with_capacity(cfg.queues.len());
        for &q in &cfg.queues {
            if q >= program.queues() {
                return Err(OpenError::Sys {
                    ifname: ifname.into(),
                    what: "AF_XDP queue",
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("queue {q}: the interface has {} receive queues", program.queues()),
                    ),
                });
            }
            let s = XskSocket::open(ifname, ifindex, q, cfg.frames, cfg.frame_size, cfg.bind)?;
            program.register(q, s.fd()).map_err(|source| OpenError::Sys {
                ifname: ifname.into(),
                what: "bpf(BPF_MAP_UPDATE_ELEM xskmap)",
                source,
            })?;
            sockets.push(s);
        }
        Ok(AfXdp { sockets, program, next_rx: 0, link: linux::LinkWatch::new(ifname), stats: Stats::default(), sendable: Vec::new() })
    }

    /// How the first socket is bound and where the program runs ("copy, native"), for
    /// `show interfaces`.
    pub fn describe(&self) -> String {
        let bind = match self.sockets.first().map(|s| s.mode) {
            Some(BindMode::ZeroCopy) => "zero-copy",
            _ => "copy",
        };
        format!("{bind}, {} XDP", self.program.mode().name())
    }
}

impl Drop for AfXdp {
    fn drop(&mut self) {
        for s in &self.sockets {
            self.program.unregister(s.queue);
        }
    }
}

impl Device for AfXdp {
    fn kind(&self) -> &'static str {
        "af_xdp"
    }

    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        let mut taken = 0;
        let n = self.sockets.len();
        // Round-robin start, so no queue starves another when vectors fill up.
        for k in 0..n {
            if taken >= max {
                break;
            }
            let i = (self.next_rx + k) % n;
            let stats = &mut self.stats;
            let got = self.sockets[i].recv((max - taken) as u32, |bytes| {
                let Some(bytes) = bytes else {
                    stats.rx_bad_descriptor += 1;
                    return true;
                };
                let Some(b) = pool.alloc(bytes.len()) else { return false };
                if pool.get_mut(b).write(bytes).is_err() {
                    pool.free(b);
                    stats.rx_bad_descriptor += 1;
                    return true;
                }
                out.push(b);
                true
            });
            taken += got as usize;
        }
        self.next_rx = (self.next_rx + 1) % n.max(1);
        if taken == 0 {
            self.link.poll();
        }
        RxStatus::Open
    }

    /// A chained packet is copied piece by piece into its UMEM frame (which must hold it
    /// contiguous): one copy, as a linear packet takes, instead of two.
    fn takes_chains(&self) -> bool {
        true
    }

    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let n = bufs.len();
        let mut result = TxResult::default();
        let Some(sock) = self.sockets.first_mut() else {
            pool.free_many(bufs);
            bufs.clear();
            result.failed = n;
            return result;
        };
        let frame_size = sock.frame_size() as usize;
        let chains = pool.has_chains();
        self.sendable.clear();
        for &b in bufs.iter() {
            if chains {
                gather::flatten_if_needed(pool, b, usize::MAX, 0);
            }
            let len = gather::packet_len(pool, b);
            let buf = pool.get_mut(b);
            if buf.meta.offload.gso != engine::GsoKind::None {
                self.stats.tx_gso += 1;
                continue;
            }
            if len > frame_size {
                self.stats.tx_too_big += 1;
                continue;
            }
            if buf.meta.offload.has_partial_checksum() {
                complete_in_software(buf);
                self.stats.tx_software_checksum += 1;
            }
            self.sendable.push(b);
        }
        let sendable = &self.sendable;
        let pool_ref = &*pool;
        // A chained packet's head and extents are copied one after the other straight
        // into its frame (the one copy a frame takes anyway).
        let queued = sock.send(sendable.len() as u32, |k, frame| {
            let b = sendable[k];
            let head = pool_ref.get(b).bytes();
            frame[..head.len()].copy_from_slice(head);
            let mut at = head.len();
            for part in pool_ref.extent_parts(b) {
                frame[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            at
        }) as usize;
        self.stats.tx_no_frame += (self.sendable.len() - queued) as u64;
        for &b in &self.sendable[..queued] {
            result.sent_bytes += gather::packet_len(pool, b);
        }
        if let Some(e) = sock.kick(queued as u32) {
            // Queued descriptors stay in the ring and leave with the next kick; the error
            // is what the link says now.
            match e.raw_os_error() {
                Some(libc::ENETDOWN) | Some(libc::ENXIO) | Some(libc::ENODEV) => self.stats.tx_link_down += 1,
                _ => self.stats.tx_other += 1,
            }
        }
        result.sent = queued;
        result.failed = n - queued;
        pool.free_many(bufs);
        bufs.clear();
        result
    }

    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        // An idle worker sleeps on its first queue; with several queues a frame on
        // another one waits for the poll timeout (1 ms) at most.
        self.sockets.first().map(|s| s.fd().as_fd())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.stats.list();
        let mut k = socket::XdpStatistics::default();
        for s in &self.sockets {
            let t = s.statistics();
            k.rx_dropped += t.rx_dropped;
            k.rx_invalid_descs += t.rx_invalid_descs;
            k.tx_invalid_descs += t.tx_invalid_descs;
            k.rx_ring_full += t.rx_ring_full;
            k.rx_fill_ring_empty_descs += t.rx_fill_ring_empty_descs;
            k.tx_ring_empty_descs += t.tx_ring_empty_descs;
        }
        c.extend([
            ("rx-kernel-drops", k.rx_dropped),
            ("rx-ring-full", k.rx_ring_full),
            ("rx-fill-ring-empty", k.rx_fill_ring_empty_descs),
            ("rx-invalid-descriptors", k.rx_invalid_descs),
            ("tx-invalid-descriptors", k.tx_invalid_descs),
            ("link-down-events", self.link.down_events),
            ("interface-gone", self.link.gone),
        ]);
        c
    }
}
