//! `tap`: a TAP device vecgate creates, so the host's own network stack is a neighbour
//! on a link. Frames cross with a virtio-net header (`IFF_VNET_HDR`): the offloads we
//! accept are negotiated (`TUNSETOFFLOAD`: checksum, TSO4/6, and USO where the kernel has
//! it), so the host's TSO frames and partial checksums reach the dataplane whole, exactly
//! as over af_packet ([`crate::vnet`]). The device lives as long as vecgate holds it:
//! it disappears with the descriptor (on exit, SIGTERM included).

use crate::gather;
use crate::linux::{self, OpenError};
use crate::vnet::{VnetHdr, VNET_HDR_LEN};
use engine::device::{Device, RxStatus, TxResult};
use engine::{BufIdx, Pool};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// USO offloads: Debian 6.1 headers lack them; the values are fixed.
const TUN_F_USO4: u32 = 0x20;
const TUN_F_USO6: u32 = 0x40;
/// The largest frame read: a 64 KiB GSO frame with its Ethernet header.
const MAX_FRAME: usize = 65536 + 14;

#[derive(Debug, Default, Clone)]
struct Stats {
    rx_bad_vnet: u64,
    rx_too_large: u64,
    rx_no_buffer: u64,
    tx_queue_full: u64,
    tx_error: u64,
    tx_unsendable: u64,
}

pub struct Tap {
    fd: OwnedFd,
    name: String,
    /// Offloads the kernel agreed to hand us.
    pub offloads: u32,
    scratch: Vec<u8>,
    /// `writev` scratch, kept between calls (its pointers never outlive one).
    iovs: Vec<libc::iovec>,
    stats: Stats,
}

// SAFETY: `iovs` holds raw pointers only during a transmit call, emptied before it
// returns; everything else is owned.
unsafe impl Send for Tap {}

#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tap {
    /// Creates (or attaches to) TAP device `name` and sets it up.
    pub fn open(name: &str) -> Result<Tap, OpenError> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(OpenError::Sys {
                ifname: name.into(),
                what: "interface name",
                source: io::Error::new(io::ErrorKind::InvalidInput, "1 to 15 bytes"),
            });
        }
        // SAFETY: a NUL-terminated literal path; the result is checked.
        let raw = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(OpenError::sys(name, "open /dev/net/tun"));
        }
        // SAFETY: `raw` was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req =
            IfReqFlags { name: [0; libc::IFNAMSIZ], flags: (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as i16, _pad: [0; 22] };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes an ifreq; `req` has its layout and size.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
            return Err(OpenError::sys(name, "TUNSETIFF"));
        }
        let base = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
        let mut offloads = base | TUN_F_USO4 | TUN_F_USO6;
        // SAFETY: TUNSETOFFLOAD takes its argument by value.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, offloads as libc::c_ulong) } < 0 {
            offloads = base;
            // SAFETY: as above; kernels without USO refuse the first request.
            if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, offloads as libc::c_ulong) } < 0 {
                return Err(OpenError::sys(name, "TUNSETOFFLOAD"));
            }
        }
        set_up(name)?;
        Ok(Tap {
            fd,
            name: name.to_string(),
            offloads,
            scratch: vec![0; VNET_HDR_LEN + MAX_FRAME],
            iovs: Vec::new(),
            stats: Stats::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Sets the interface administratively up (SIOCSIFFLAGS on a throwaway socket).
fn set_up(name: &str) -> Result<(), OpenError> {
    let s = linux::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0).map_err(|source| OpenError::Sys {
        ifname: name.into(),
        what: "socket for SIOCSIFFLAGS",
        source,
    })?;
    let mut req = IfReqFlags { name: [0; libc::IFNAMSIZ], flags: 0, _pad: [0; 22] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: SIOCGIFFLAGS fills the flags of an ifreq; `req` has its layout.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(OpenError::sys(name, "SIOCGIFFLAGS"));
    }
    req.flags |= libc::IFF_UP as i16;
    // SAFETY: as above, writing the flags back.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(OpenError::sys(name, "SIOCSIFFLAGS"));
    }
    Ok(())
}

impl Device for Tap {
    fn kind(&self) -> &'static str {
        "tap"
    }

    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        for _ in 0..max {
            // SAFETY: reading into our own scratch buffer of the length passed.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), self.scratch.as_mut_ptr().cast(), self.scratch.len()) };
            if n <= 0 {
                break; // EAGAIN: nothing more now (errors show as silence too; link state is the kernel's)
            }
            let n = n as usize;
            if n < VNET_HDR_LEN + 14 {
                self.stats.rx_bad_vnet += 1;
                continue;
            }
            let frame = &self.scratch[VNET_HDR_LEN..n];
            let Some(b) = pool.alloc(frame.len()) else {
                self.stats.rx_no_buffer += 1;
                break;
            };
            if pool.get_mut(b).write(frame).is_err() {
                pool.free(b);
                self.stats.rx_too_large += 1;
                continue;
            }
            let vh = VnetHdr::parse(self.scratch[..VNET_HDR_LEN].try_into().expect("10 bytes"));
            if vh.apply_to(pool.get_mut(b)).is_err() {
                pool.free(b);
                self.stats.rx_bad_vnet += 1;
                continue;
            }
            out.push(b);
        }
        RxStatus::Open
    }

    /// A chained packet leaves in one `writev`: the header, its head and an iovec per
    /// extent (no copy), unless its extents are short ([`gather::IOVEC_MIN_EXTENT`]).
    fn takes_chains(&self) -> bool {
        true
    }

    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let mut r = TxResult::default();
        let chains = pool.has_chains();
        for &b in bufs.iter() {
            if chains {
                gather::flatten_if_needed(pool, b, gather::MAX_IOVECS - 1, gather::IOVEC_MIN_EXTENT);
            }
            let buf = pool.get(b);
            let Some(h) = VnetHdr::for_buffer(buf) else {
                self.stats.tx_unsendable += 1;
                r.failed += 1;
                continue;
            };
            let h = h.emit();
            self.iovs.clear();
            self.iovs.push(libc::iovec { iov_base: h.as_ptr() as *mut _, iov_len: VNET_HDR_LEN });
            gather::push_iovecs(pool, b, chains, &mut self.iovs);
            // SAFETY: every iovec points at live memory of the length given (the header
            // on this stack, the head and its extents' buffers in the pool), unchanged
            // for the duration of the call; there are at most `MAX_IOVECS`.
            let w = unsafe { libc::writev(self.fd.as_raw_fd(), self.iovs.as_ptr(), self.iovs.len() as i32) };
            if w < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => self.stats.tx_queue_full += 1,
                    _ => self.stats.tx_error += 1,
                }
                r.failed += 1;
            } else {
                r.sent += 1;
                r.sent_bytes += gather::packet_len(pool, b);
            }
        }
        self.iovs.clear();
        pool.free_many(bufs);
        bufs.clear();
        r
    }

    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        vec![
            ("rx-bad-vnet-header", s.rx_bad_vnet),
            ("rx-too-large", s.rx_too_large),
            ("rx-no-buffer", s.rx_no_buffer),
            ("tx-queue-full", s.tx_queue_full),
            ("tx-error", s.tx_error),
            ("tx-offload-unsendable", s.tx_unsendable),
        ]
    }
}
