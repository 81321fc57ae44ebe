//! `af_packet`: a Linux packet socket bound to one host interface.
//!
//! Receive: a TPACKET_V3 ring mapped into our memory. The kernel fills blocks of many
//! frames and hands a block over when it is full or its retire timer (`retire_ms`)
//! fires; we copy each frame into a pool buffer and give the block back. Copying keeps
//! the ring small and buffers ours (frames are never held while the kernel wants the
//! block back). Transmit: one `sendmmsg` per vector, a chained packet (a head and its
//! extents) gathered from its pieces by iovecs.
//!
//! With `PACKET_VNET_HDR` every frame carries a virtio-net header both ways
//! ([`crate::vnet`]): a large GSO frame from a local TCP sender crosses the dataplane
//! whole and the kernel segments it on the way out; a partial checksum stays partial
//! until the transmitting kernel (or its NIC) computes it. That is also how a tunnel's
//! `offload` checksum mode reaches the kernel.
//!
//! Failures are counted per device (`show interfaces`): kernel ring drops, frames
//! truncated by the ring, a full transmit queue, the link down or the interface deleted
//! under us. None of them stops the worker.

use crate::gather;
use crate::linux::{self, Mapping, OpenError};
use crate::vnet::{complete_in_software, VnetHdr, VNET_HDR_LEN};
use engine::device::{Device, RxStatus, TxResult};
use engine::{BufIdx, Pool};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// How an `af_packet` interface is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// The host interface to bind to (a veth end, a NIC).
    pub host_if: String,
    /// Receive ring block size; a block must hold the largest frame (64 KiB GSO frames).
    pub block_size: usize,
    /// Receive ring blocks.
    pub blocks: usize,
    /// Milliseconds after which a partly filled block is handed over anyway (the latency
    /// floor of a TPACKET_V3 ring at low rates).
    pub retire_ms: u32,
    /// Exchange virtio-net headers (checksum and segmentation offload pass-through).
    pub vnet_hdr: bool,
    /// Send past the qdisc layer (as VPP does): lower cost, no traffic control.
    pub qdisc_bypass: bool,
    /// Receive ring layout: TPACKET_V3 (blocks of many frames; best throughput, but a
    /// frame waits up to `retire_ms` at low rates) or TPACKET_V2 (one slot per frame of
    /// `v2_frame_size` bytes, handed over at once: the low-latency choice; frames larger
    /// than a slot, such as GSO frames, are truncated and counted).
    pub ring: RingVersion,
    /// Slot size of a TPACKET_V2 ring (the largest frame it takes whole: by default a
    /// 64 KiB GSO frame with its headers).
    pub v2_frame_size: usize,
    /// Slots of a TPACKET_V2 ring.
    pub v2_slots: usize,
    /// Join a fanout group (one socket per worker on the same interface; the kernel
    /// spreads flows by hash). `None`: a single socket.
    pub fanout: Option<u16>,
}

impl AfPacketConfig {
    pub fn new(host_if: &str) -> AfPacketConfig {
        AfPacketConfig {
            host_if: host_if.to_string(),
            // At low rates the kernel hands over a block per `retire_ms` however little
            // it holds, so the ring rides out a stall of about `blocks` retire periods
            // whatever the block size: many blocks of the smallest size that still holds
            // a GSO frame (32 MiB; 32 blocks of 256 KiB lost packets in a 50 ms stall
            // at 2000 packets/s).
            block_size: 128 * 1024,
            blocks: 256,
            retire_ms: 1,
            vnet_hdr: true,
            qdisc_bypass: true,
            ring: RingVersion::V3,
            v2_frame_size: 69632,
            v2_slots: 512,
            fanout: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingVersion {
    V2,
    V3,
}

const FRAME_SIZE: usize = 2048;

device_counters! {
    kernel_drops = "rx-kernel-drops",
    kernel_freezes = "rx-ring-freezes",
    truncated = "rx-truncated",
    bad_vnet = "rx-bad-vnet-header",
    tx_ring_full = "tx-queue-full",
    tx_link_down = "tx-link-down",
    tx_other = "tx-error",
    tx_unsendable_offload = "tx-offload-unsendable",
    tx_software_checksum = "tx-software-checksum",
}

pub struct AfPacket {
    cfg: AfPacketConfig,
    fd: OwnedFd,
    ring: Mapping,
    /// Block being read, and where in it: packets left and the next packet's offset.
    block: usize,
    left: u32,
    next_off: usize,
    stats: Stats,
    link: linux::LinkWatch,
    /// sendmmsg scratch, kept between calls.
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    vnet_hdrs: Vec<[u8; VNET_HDR_LEN]>,
    /// The buffers of this call that can be sent (in `msgs` order).
    kept: Vec<BufIdx>,
    /// Per message: its first iovec in `iovs` and how many it has.
    iov_spans: Vec<(usize, usize)>,
}

// SAFETY: the raw pointers in the scratch vectors are rebuilt on every transmit and never
// outlive the call; the ring mapping is owned by this value alone.
unsafe impl Send for AfPacket {}

impl AfPacket {
    pub fn open(cfg: AfPacketConfig) -> Result<AfPacket, OpenError> {
        let ifname = cfg.host_if.as_str();
        let ifindex = linux::if_index(ifname)?;
        let proto = (libc::ETH_P_ALL as u16).to_be();
        let fd = linux::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto as i32).map_err(|source| OpenError::Sys {
            ifname: ifname.into(),
            what: "socket(AF_PACKET)",
            source,
        })?;
        let sys = |what: &'static str| move |source| OpenError::Sys { ifname: ifname.into(), what, source };
        let version = match cfg.ring {
            RingVersion::V2 => libc::tpacket_versions::TPACKET_V2,
            RingVersion::V3 => libc::tpacket_versions::TPACKET_V3,
        };
        linux::set_opt(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, &(version as i32)).map_err(sys("PACKET_VERSION"))?;
        if cfg.vnet_hdr {
            linux::set_opt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &1i32).map_err(sys("PACKET_VNET_HDR"))?;
        }
        if cfg.qdisc_bypass {
            linux::set_opt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32).map_err(sys("PACKET_QDISC_BYPASS"))?;
        }
        // A V2 ring is one slot per block.
        let (frame_size, block_size, blocks) = match cfg.ring {
            RingVersion::V2 => (cfg.v2_frame_size, cfg.v2_frame_size, cfg.v2_slots),
            RingVersion::V3 => (FRAME_SIZE, cfg.block_size, cfg.blocks),
        };
        // V3 blocks must hold a whole 64 KiB GSO frame; V2 slots are whole pages.
        let fits = match cfg.ring {
            RingVersion::V3 => block_size >= 65536 + 4096,
            RingVersion::V2 => frame_size % 4096 == 0,
        };
        if !fits || block_size % frame_size != 0 || blocks == 0 {
            return Err(OpenError::Sys {
                ifname: ifname.into(),
                what: "ring geometry",
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "v3 blocks must be multiples of 2048 above 68 KiB, v2 slots multiples of 4096",
                ),
            });
        }
        let req = libc::tpacket_req3 {
            tp_block_size: block_size as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: (block_size / frame_size * blocks) as u32,
            tp_retire_blk_tov: cfg.retire_ms.max(1),
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        // A V2 ring takes the first four fields only (struct tpacket_req).
        let r = match cfg.ring {
            RingVersion::V3 => linux::set_opt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req),
            RingVersion::V2 => linux::set_opt(
                &fd,
                libc::SOL_PACKET,
                libc::PACKET_RX_RING,
                &libc::tpacket_req {
                    tp_block_size: req.tp_block_size,
                    tp_block_nr: req.tp_block_nr,
                    tp_frame_size: req.tp_frame_size,
                    tp_frame_nr: req.tp_frame_nr,
                },
            ),
        };
        r.map_err(sys("PACKET_RX_RING"))?;
        let ring = Mapping::new(&fd, block_size * blocks).map_err(sys("mmap rx ring"))?;
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value before filling.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
        let r = unsafe {
            libc::bind(fd.as_raw_fd(), (&sll as *const libc::sockaddr_ll).cast(), std::mem::size_of::<libc::sockaddr_ll>() as u32)
        };
        if r < 0 {
            return Err(OpenError::sys(ifname, "bind"));
        }
        // Frames addressed to our configured MAC, not the host interface's, must arrive too.
        let mr = libc::packet_mreq { mr_ifindex: ifindex, mr_type: libc::PACKET_MR_PROMISC as u16, mr_alen: 0, mr_address: [0; 8] };
        linux::set_opt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mr).map_err(sys("PACKET_MR_PROMISC"))?;
        if let Some(group) = cfg.fanout {
            let arg = group as u32 | ((libc::PACKET_FANOUT_HASH as u32) << 16);
            linux::set_opt(&fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg).map_err(sys("PACKET_FANOUT"))?;
        }
        Ok(AfPacket {
            link: linux::LinkWatch::new(ifname),
            cfg,
            fd,
            ring,
            block: 0,
            left: 0,
            next_off: 0,
            stats: Stats::default(),
            msgs: Vec::new(),
            iovs: Vec::new(),
            vnet_hdrs: Vec::new(),
            kept: Vec::new(),
            iov_spans: Vec::new(),
        })
    }

    /// The block descriptor's status word, shared with the kernel.
    fn block_status(&self, block: usize) -> &AtomicU32 {
        // SAFETY: the ring is `blocks * block_size` bytes, page aligned, so every block
        // starts 4-byte aligned and its status word (offset 8 in tpacket_block_desc) is
        // inside the mapping, which lives as long as `self`. The kernel writes it
        // concurrently, hence an atomic.
        unsafe { AtomicU32::from_ptr(self.ring.ptr().add(block * self.cfg.block_size + 8).cast()) }
    }

    fn read_u32(&self, at: usize) -> u32 {
        debug_assert!(at + 4 <= self.ring.len());
        // SAFETY: callers pass offsets checked against the block bounds; unaligned read
        // because the layout is the kernel's.
        unsafe { self.ring.ptr().add(at).cast::<u32>().read_unaligned() }
    }

    fn read_u16(&self, at: usize) -> u16 {
        debug_assert!(at + 2 <= self.ring.len());
        // SAFETY: as in `read_u32`.
        unsafe { self.ring.ptr().add(at).cast::<u16>().read_unaligned() }
    }

    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        debug_assert!(at + len <= self.ring.len());
        // SAFETY: `at..at + len` was checked to lie within the current block, which the
        // kernel handed to us (TP_STATUS_USER) and does not write until we return it.
        unsafe { std::slice::from_raw_parts(self.ring.ptr().add(at), len) }
    }

    fn poll_kernel_stats(&mut self) {
        if let Ok(s) = linux::get_opt::<TpacketStatsV3>(&self.fd, libc::SOL_PACKET, libc::PACKET_STATISTICS) {
            // Reading resets the kernel's counters, so they accumulate here.
            self.stats.kernel_drops += s.tp_drops as u64;
            self.stats.kernel_freezes += s.tp_freeze_q_cnt as u64;
        }
    }

    fn check_link(&mut self) {
        if self.link.poll() {
            self.poll_kernel_stats();
        }
    }
}

/// `struct tpacket_stats_v3`.
#[derive(Default)]
#[repr(C)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

impl Device for AfPacket {
    fn kind(&self) -> &'static str {
        "af_packet"
    }

    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        let taken = match self.cfg.ring {
            RingVersion::V3 => self.rx_v3(pool, out, max),
            RingVersion::V2 => self.rx_v2(pool, out, max),
        };
        if taken == 0 {
            self.check_link();
        }
        RxStatus::Open
    }

    /// A chained packet leaves as its head and an iovec per extent (no copy), unless its
    /// extents are short ([`gather::IOVEC_MIN_EXTENT`]).
    fn takes_chains(&self) -> bool {
        true
    }

    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        self.tx_batch(pool, bufs)
    }

    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Some(self.fd.as_fd())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.stats.list();
        c.push(("link-down-events", self.link.down_events));
        c.push(("interface-gone", self.link.gone));
        c
    }
}

/// What became of one ring frame.
enum Frame {
    Taken(BufIdx),
    Skipped,
    /// No buffer: leave it in the ring and stop for now.
    NoBuffer,
}

impl AfPacket {
    /// Copy one frame (its bytes at `at`, `snaplen` of `len`, the vnet header just before
    /// it) into a pool buffer.
    fn take_frame(&mut self, pool: &mut Pool, at: usize, snaplen: usize, len: usize, status: u32) -> Frame {
        if snaplen < len || (self.cfg.vnet_hdr && at < VNET_HDR_LEN) {
            self.stats.truncated += 1;
            return Frame::Skipped;
        }
        let Some(b) = pool.alloc(snaplen) else { return Frame::NoBuffer };
        let frame = self.bytes(at, snaplen);
        if pool.get_mut(b).write(frame).is_err() {
            pool.free(b);
            self.stats.truncated += 1;
            return Frame::Skipped;
        }
        if self.cfg.vnet_hdr {
            let vh = VnetHdr::parse(self.bytes(at - VNET_HDR_LEN, VNET_HDR_LEN).try_into().expect("10 bytes"));
            if vh.apply_to(pool.get_mut(b)).is_err() {
                self.stats.bad_vnet += 1;
                pool.free(b);
                return Frame::Skipped;
            }
        } else if status & libc::TP_STATUS_CSUM_VALID != 0 {
            pool.get_mut(b).meta.l4_checksum_ok = true;
        }
        Frame::Taken(b)
    }

    /// TPACKET_V2: a status word per fixed-size slot.
    fn rx_v2(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> usize {
        let fs = self.cfg.v2_frame_size;
        let slots = self.ring.len() / fs;
        let mut taken = 0;
        while taken < max {
            let h = self.block * fs;
            // SAFETY: `h` is a slot start inside the mapping (slot < slots), 16-aligned;
            // tp_status is its first word and the kernel writes it concurrently.
            let st = unsafe { AtomicU32::from_ptr(self.ring.ptr().add(h).cast()) };
            let status = st.load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            let len = self.read_u32(h + 4) as usize;
            let snaplen = self.read_u32(h + 8) as usize;
            let mac = self.read_u16(h + 12) as usize;
            let got = if mac + snaplen > fs {
                self.stats.truncated += 1;
                Frame::Skipped
            } else {
                self.take_frame(pool, h + mac, snaplen, len, status)
            };
            match got {
                Frame::NoBuffer => break,
                Frame::Taken(b) => {
                    out.push(b);
                    taken += 1;
                }
                Frame::Skipped => {}
            }
            st.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.block = (self.block + 1) % slots;
        }
        taken
    }

    /// TPACKET_V3: blocks of frames, handed over a block at a time.
    fn rx_v3(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> usize {
        let bs = self.cfg.block_size;
        let mut taken = 0;
        while taken < max {
            let base = self.block * bs;
            if self.left == 0 {
                if self.block_status(self.block).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                    break;
                }
                self.left = self.read_u32(base + 12);
                self.next_off = self.read_u32(base + 16) as usize;
                if self.left == 0 {
                    self.block_status(self.block).store(libc::TP_STATUS_KERNEL, Ordering::Release);
                    self.block = (self.block + 1) % self.cfg.blocks;
                    continue;
                }
            }
            // One frame: tpacket3_hdr at next_off, the frame at next_off + tp_mac.
            let h = base + self.next_off;
            if self.next_off + 48 > bs {
                // A corrupt offset cannot come from the kernel; give the block back.
                self.left = 1;
            } else {
                let next = self.read_u32(h) as usize;
                let snaplen = self.read_u32(h + 12) as usize;
                let len = self.read_u32(h + 16) as usize;
                let status = self.read_u32(h + 20);
                let mac = self.read_u16(h + 24) as usize;
                if self.next_off + mac + snaplen > bs {
                    self.stats.truncated += 1;
                } else {
                    match self.take_frame(pool, h + mac, snaplen, len, status) {
                        // Out of buffers: leave the frame in the ring for the next poll.
                        Frame::NoBuffer => break,
                        Frame::Taken(b) => {
                            out.push(b);
                            taken += 1;
                        }
                        Frame::Skipped => {}
                    }
                }
                self.next_off += next;
            }
            self.left -= 1;
            if self.left == 0 {
                self.block_status(self.block).store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.block = (self.block + 1) % self.cfg.blocks;
            }
        }
        taken
    }

    fn tx_batch(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let n = bufs.len();
        self.msgs.clear();
        self.iovs.clear();
        self.vnet_hdrs.clear();
        self.kept.clear();
        self.iov_spans.clear();
        let mut result = TxResult::default();
        let chains = pool.has_chains();
        let per = if self.cfg.vnet_hdr { 2 } else { 1 };
        // Headers first, all of them: the iovecs point into `vnet_hdrs`, which must not
        // grow once they do.
        for &b in bufs.iter() {
            if chains {
                gather::flatten_if_needed(pool, b, gather::MAX_IOVECS - (per - 1), gather::IOVEC_MIN_EXTENT);
            }
            let buf = pool.get_mut(b);
            if self.cfg.vnet_hdr {
                match VnetHdr::for_buffer(buf) {
                    Some(h) => self.vnet_hdrs.push(h.emit()),
                    None => {
                        self.stats.tx_unsendable_offload += 1;
                        continue;
                    }
                }
            } else if buf.meta.offload.has_partial_checksum() {
                complete_in_software(buf);
                self.stats.tx_software_checksum += 1;
            }
            self.kept.push(b);
        }
        for (k, &b) in self.kept.iter().enumerate() {
            let first = self.iovs.len();
            if self.cfg.vnet_hdr {
                self.iovs.push(libc::iovec { iov_base: self.vnet_hdrs[k].as_ptr() as *mut _, iov_len: VNET_HDR_LEN });
            }
            gather::push_iovecs(pool, b, chains, &mut self.iovs);
            self.iov_spans.push((first, self.iovs.len() - first));
        }
        for &(first, count) in &self.iov_spans {
            // SAFETY: msghdr is plain data; zero is valid before the fields are set.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_iov = self.iovs[first..].as_mut_ptr();
            h.msg_iovlen = count;
            self.msgs.push(libc::mmsghdr { msg_hdr: h, msg_len: 0 });
        }
        let mut done = 0;
        while done < self.msgs.len() {
            let todo = &mut self.msgs[done..];
            // SAFETY: every msghdr points at iovecs in `self.iovs`, which point at
            // `self.vnet_hdrs` and at pool buffers (heads and the buffers their extents
            // lie in); none of them move or are freed until this loop ends.
            let r = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), todo.as_mut_ptr(), todo.len() as u32, libc::MSG_DONTWAIT) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                let left = (self.msgs.len() - done) as u64;
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) => self.stats.tx_ring_full += left,
                    Some(libc::ENETDOWN) | Some(libc::ENXIO) | Some(libc::ENODEV) => self.stats.tx_link_down += left,
                    _ => self.stats.tx_other += left,
                }
                break;
            }
            if r == 0 {
                break;
            }
            for &b in &self.kept[done..done + r as usize] {
                result.sent_bytes += gather::packet_len(pool, b);
            }
            done += r as usize;
        }
        result.sent = done;
        result.failed = n - done;
        pool.free_many(bufs);
        bufs.clear();
        result
    }
}
