//! One AF_XDP socket bound to one receive queue, with its own UMEM.
//!
//! The UMEM is split once, at open: the first half of its frames circulate between the
//! fill ring, the kernel and the receive ring; the second half between our free list,
//! the transmit ring and the completion ring. A frame is a [`Frame`] token (not `Copy`),
//! held in exactly one place at a time, so no frame is written while the kernel may
//! still read it. Each ring is as large as the frames of its half, so handing a frame
//! back can never find its ring full.

use super::ring::{MmapOffsets, Ring, Side, XdpDesc};
use crate::linux::{self, Mapping, OpenError};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// A UMEM frame's base address: whoever holds the token owns the frame.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Frame(u64);

/// How the socket is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// The driver reads and writes the UMEM directly.
    ZeroCopy,
    /// The kernel copies between its buffers and the UMEM (every driver; veth).
    Copy,
}

/// Counters the kernel keeps per socket (`struct xdp_statistics`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// `XDP_MAX_TX_SKB_BUDGET` (Linux 6.17): descriptors one copy-mode transmit call
/// processes (default 32). Older kernels refuse it; each call then sends 32.
const XDP_MAX_TX_SKB_BUDGET: i32 = 9;

pub(super) struct XskSocket {
    fd: OwnedFd,
    umem: Mapping,
    frame_size: u32,
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    /// Transmit frames that are ours to fill.
    free_tx: Vec<Frame>,
    pub queue: u32,
    pub mode: BindMode,
}

impl XskSocket {
    /// A socket on `queue` of the interface with `frames` UMEM frames of `frame_size`
    /// bytes (both powers of two). `mode` `None`: zero-copy where the driver has it,
    /// else copy.
    pub fn open(
        ifname: &str,
        ifindex: i32,
        queue: u32,
        frames: u32,
        frame_size: u32,
        mode: Option<BindMode>,
    ) -> Result<XskSocket, OpenError> {
        match mode {
            Some(m) => XskSocket::open_mode(ifname, ifindex, queue, frames, frame_size, m),
            None => XskSocket::open_mode(ifname, ifindex, queue, frames, frame_size, BindMode::ZeroCopy)
                .or_else(|_| XskSocket::open_mode(ifname, ifindex, queue, frames, frame_size, BindMode::Copy)),
        }
    }

    fn open_mode(ifname: &str, ifindex: i32, queue: u32, frames: u32, frame_size: u32, mode: BindMode) -> Result<XskSocket, OpenError> {
        let sys = |what: &'static str| move |source| OpenError::Sys { ifname: ifname.into(), what, source };
        if !frames.is_power_of_two() || frames < 64 || !frame_size.is_power_of_two() || !(2048..=4096).contains(&frame_size) {
            return Err(sys("AF_XDP UMEM geometry")(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frames must be a power of two from 64, frame size 2048 or 4096",
            )));
        }
        let fd = linux::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0).map_err(sys("socket(AF_XDP)"))?;
        let umem = Mapping::anonymous(frames as usize * frame_size as usize).map_err(sys("mmap UMEM"))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr() as u64,
            len: umem.len() as u64,
            chunk_size: frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        linux::set_opt(&fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg).map_err(sys("XDP_UMEM_REG"))?;
        let half = frames / 2;
        for opt in [libc::XDP_UMEM_FILL_RING, libc::XDP_UMEM_COMPLETION_RING, libc::XDP_RX_RING, libc::XDP_TX_RING] {
            linux::set_opt(&fd, libc::SOL_XDP, opt, &half).map_err(sys("AF_XDP ring size"))?;
        }
        let off: MmapOffsets = linux::get_opt(&fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS).map_err(sys("XDP_MMAP_OFFSETS"))?;
        let mut fill = Ring::map(&fd, &off.fill, half, libc::XDP_UMEM_PGOFF_FILL_RING, Side::Producer).map_err(sys("mmap fill ring"))?;
        let completion = Ring::map(&fd, &off.completion, half, libc::XDP_UMEM_PGOFF_COMPLETION_RING, Side::Consumer)
            .map_err(sys("mmap completion ring"))?;
        let rx = Ring::map(&fd, &off.rx, half, libc::XDP_PGOFF_RX_RING as u64, Side::Consumer).map_err(sys("mmap rx ring"))?;
        let tx = Ring::map(&fd, &off.tx, half, libc::XDP_PGOFF_TX_RING as u64, Side::Producer).map_err(sys("mmap tx ring"))?;
        // Receive frames go to the kernel before the bind, so the first packet finds one.
        let granted = fill.free(half);
        debug_assert_eq!(granted, half);
        for k in 0..granted {
            fill.write(k, k as u64 * frame_size as u64);
        }
        fill.submit(granted);
        let free_tx = (half..frames).rev().map(|k| Frame(k as u64 * frame_size as u64)).collect();
        let _ = linux::set_opt(&fd, libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &256u32);
        let flags = libc::XDP_USE_NEED_WAKEUP
            | match mode {
                BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
                BindMode::Copy => libc::XDP_COPY,
            };
        let sxdp = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex as u32,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // A queue released by a socket closed in the last second can still be busy.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        loop {
            // SAFETY: `sxdp` is a valid sockaddr_xdp and the length passed is its size.
            let r = unsafe {
                libc::bind(fd.as_raw_fd(), (&sxdp as *const libc::sockaddr_xdp).cast(), std::mem::size_of::<libc::sockaddr_xdp>() as u32)
            };
            if r == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) || std::time::Instant::now() > deadline {
                return Err(OpenError::Sys {
                    ifname: ifname.into(),
                    what: match mode {
                        BindMode::ZeroCopy => "bind AF_XDP zero-copy",
                        BindMode::Copy => "bind AF_XDP copy mode",
                    },
                    source: e,
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Ok(XskSocket { fd, umem, frame_size, fill, completion, rx, tx, free_tx, queue, mode })
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// The UMEM bytes of a descriptor, or `None` if it points outside the UMEM (which
    /// only a kernel bug could cause; counted, never trusted).
    fn frame_bytes(&self, d: &XdpDesc) -> Option<&[u8]> {
        let start = d.addr as usize;
        let end = start.checked_add(d.len as usize)?;
        if end > self.umem.len() {
            return None;
        }
        // SAFETY: `start..end` lies inside the UMEM; the kernel handed this frame to us
        // on the receive ring and does not touch it until it is back on the fill ring.
        Some(unsafe { std::slice::from_raw_parts(self.umem.ptr().add(start), d.len as usize) })
    }

    fn frame_base(&self, addr: u64) -> Frame {
        Frame(addr - addr % self.frame_size as u64)
    }

    /// Receive up to `max` frames: `take` is handed each frame's bytes (or `None` for a
    /// descriptor outside the UMEM) and returns false to stop (out of buffers), leaving
    /// that frame in the ring. Every consumed frame goes straight back to the fill ring.
    pub fn recv(&mut self, max: u32, mut take: impl FnMut(Option<&[u8]>) -> bool) -> u32 {
        let n = self.rx.available(max);
        if n == 0 {
            self.wake_fill();
            return 0;
        }
        // The fill ring holds every receive frame, so it always has room for these.
        let room = self.fill.free(n);
        let mut done = 0;
        while done < room {
            let d = self.rx.read(done);
            if !take(self.frame_bytes(&d)) {
                break;
            }
            let Frame(base) = self.frame_base(d.addr);
            self.fill.write(done, base);
            done += 1;
        }
        self.rx.release(done);
        self.fill.submit(done);
        self.wake_fill();
        done
    }

    /// In zero-copy mode the driver may stop when the fill ring ran dry and wait for a
    /// syscall once it is refilled.
    fn wake_fill(&self) {
        if self.fill.needs_wakeup() {
            // SAFETY: a zero-length receive with no buffer: only a wake-up for the kernel.
            unsafe {
                libc::recvfrom(self.fd.as_raw_fd(), std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut())
            };
        }
    }

    /// Take back the frames the kernel finished sending.
    fn reclaim(&mut self) {
        let n = self.completion.available(self.completion.size());
        for i in 0..n {
            let addr = self.completion.read(i);
            let f = self.frame_base(addr);
            self.free_tx.push(f);
        }
        self.completion.release(n);
    }

    /// Queue up to `count` frames for transmit: `fill(k, frame)` writes the `k`th into a
    /// free UMEM frame and returns its length (at most the frame's); returns how many were
    /// queued (the rest found no free frame or no ring room). The caller kicks.
    pub fn send(&mut self, count: u32, mut fill: impl FnMut(usize, &mut [u8]) -> usize) -> u32 {
        self.reclaim();
        let room = self.tx.free(count).min(self.free_tx.len() as u32);
        let mut k = 0;
        while k < room {
            let Some(Frame(addr)) = self.free_tx.pop() else { break };
            // SAFETY: `addr` is a frame base we own (free list), `frame_size` bytes inside
            // the UMEM; the kernel reads it only once its descriptor is submitted below,
            // and nothing else refers to it meanwhile.
            let frame = unsafe { std::slice::from_raw_parts_mut(self.umem.ptr().add(addr as usize), self.frame_size as usize) };
            let len = fill(k as usize, frame);
            debug_assert!(len <= self.frame_size as usize, "callers check the size");
            self.tx.write(k, XdpDesc { addr, len: len as u32, options: 0 });
            k += 1;
        }
        self.tx.submit(k);
        k
    }

    /// Tell the kernel to transmit what is queued. In copy mode each call sends a
    /// budget of descriptors and returns EAGAIN while more remain, so it repeats (a
    /// bounded number of times). Returns the error that stopped it, if it was not EAGAIN.
    pub fn kick(&mut self, queued: u32) -> Option<io::Error> {
        if self.mode == BindMode::ZeroCopy && !self.tx.needs_wakeup() {
            return None;
        }
        let rounds = queued / 32 + 2;
        for _ in 0..rounds {
            // SAFETY: a zero-length send with no buffer: only a wake-up for the kernel.
            let r = unsafe { libc::sendto(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
            if r >= 0 {
                return None;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EBUSY) => continue,
                _ => return Some(e),
            }
        }
        None
    }

    pub fn statistics(&self) -> XdpStatistics {
        linux::get_opt(&self.fd, libc::SOL_XDP, libc::XDP_STATISTICS).unwrap_or_default()
    }
}
