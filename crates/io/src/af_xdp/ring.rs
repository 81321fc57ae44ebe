//! The single-producer, single-consumer rings an AF_XDP socket shares with the kernel.
//!
//! Each ring is a power-of-two array of descriptors plus a producer and a consumer
//! index, free-running `u32`s. One side owns each index: we produce into the fill and
//! transmit rings and consume from the receive and completion rings. Our own index is
//! kept locally and published with a release store after the descriptors are written
//! (or read); the other side's index is re-read (acquire) only when the cached copy says
//! the ring is full or empty, which keeps the shared cache lines quiet.

use crate::linux::Mapping;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// `struct xdp_ring_offset`: where a ring's parts lie in its mapping.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct MmapOffsets {
    pub rx: RingOffset,
    pub tx: RingOffset,
    pub fill: RingOffset,
    pub completion: RingOffset,
}

/// `struct xdp_desc`: a frame in the UMEM (receive and transmit rings).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

pub(super) struct Ring<T: Copy> {
    /// Held for its lifetime: the pointers below point into it.
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    mask: u32,
    /// Our index (the producer's on rings we fill, the consumer's on rings we drain).
    local: u32,
    /// The kernel's index as last read.
    cached: u32,
}

// SAFETY: the mapping is owned by the ring and moves with it; the kernel is the only
// other party and synchronises through the atomic indices.
unsafe impl<T: Copy> Send for Ring<T> {}

/// Which side of the ring we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Producer,
    Consumer,
}

impl<T: Copy> Ring<T> {
    /// Map a ring of `size` entries (a power of two, already set with setsockopt) at the
    /// socket's page offset `pgoff`.
    pub fn map(fd: &OwnedFd, off: &RingOffset, size: u32, pgoff: u64, side: Side) -> std::io::Result<Ring<T>> {
        assert!(size.is_power_of_two());
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = Mapping::at(fd, len, pgoff)?;
        for o in [off.producer, off.consumer, off.flags] {
            if o as usize + 4 > len || !o.is_multiple_of(4) {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "AF_XDP ring offsets outside the mapping"));
            }
        }
        if !off.desc.is_multiple_of(std::mem::align_of::<T>() as u64) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "AF_XDP ring descriptors misaligned"));
        }
        // SAFETY: every offset was checked to lie inside the mapping with the alignment
        // of its type; the mapping lives as long as the ring.
        let (producer, consumer, flags, desc) = unsafe {
            let base = map.ptr();
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.flags as usize) as *const AtomicU32,
                base.add(off.desc as usize) as *mut T,
            )
        };
        let mut ring = Ring { _map: map, producer, consumer, flags, desc, mask: size - 1, local: 0, cached: 0 };
        match side {
            Side::Producer => {
                ring.local = ring.producer().load(Ordering::Relaxed);
                ring.cached = ring.consumer().load(Ordering::Acquire);
            }
            Side::Consumer => {
                ring.local = ring.consumer().load(Ordering::Relaxed);
                ring.cached = ring.producer().load(Ordering::Acquire);
            }
        }
        Ok(ring)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: checked in `map`; the pointee lives in our mapping.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Whether the kernel asks for a syscall to make progress (`XDP_USE_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer side: how many entries (up to `want`) can be written now.
    pub fn free(&mut self, want: u32) -> u32 {
        let mut free = self.size() - self.local.wrapping_sub(self.cached);
        if free < want {
            self.cached = self.consumer().load(Ordering::Acquire);
            free = self.size() - self.local.wrapping_sub(self.cached);
        }
        free.min(want)
    }

    /// Producer side: write entry `i` past our index (`i` < what `free` granted).
    pub fn write(&mut self, i: u32, value: T) {
        let slot = (self.local.wrapping_add(i) & self.mask) as usize;
        // SAFETY: `slot` <= mask, inside the descriptor array; the kernel does not read
        // this slot until `submit` publishes it.
        unsafe { self.desc.add(slot).write(value) }
    }

    /// Producer side: publish `n` written entries.
    pub fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.producer().store(self.local, Ordering::Release);
    }

    /// Consumer side: how many entries (up to `want`) wait to be read.
    pub fn available(&mut self, want: u32) -> u32 {
        let mut avail = self.cached.wrapping_sub(self.local);
        if avail < want {
            self.cached = self.producer().load(Ordering::Acquire);
            avail = self.cached.wrapping_sub(self.local);
        }
        avail.min(want)
    }

    /// Consumer side: entry `i` past our index (`i` < what `available` granted).
    pub fn read(&self, i: u32) -> T {
        let slot = (self.local.wrapping_add(i) & self.mask) as usize;
        // SAFETY: `slot` <= mask; the kernel published this entry (acquire in
        // `available`) and does not rewrite it until `release` hands it back.
        unsafe { self.desc.add(slot).read() }
    }

    /// Consumer side: hand `n` read entries back.
    pub fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.consumer().store(self.local, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring over plain memory, with the test playing the kernel's side.
    fn ring(size: u32, side: Side) -> Ring<u64> {
        // A memfd stands in for the socket: the same mapping code, no kernel ring.
        let name = c"vecgate-ring-test";
        // SAFETY: plain syscall; the descriptor is checked and then owned.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: `fd` is new and owned by nobody else.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let off = RingOffset { producer: 0, consumer: 64, flags: 128, desc: 192 };
        let len = 192 + size as i64 * 8;
        // SAFETY: plain syscall on our own descriptor.
        assert_eq!(unsafe { libc::ftruncate(std::os::fd::AsRawFd::as_raw_fd(&fd), len) }, 0);
        let r = Ring::map(&fd, &off, size, 0, side).unwrap();
        assert_eq!(r._map.len(), len as usize);
        r
    }

    #[test]
    fn producer_stops_when_full_and_resumes_when_consumed() {
        let mut r = ring(8, Side::Producer);
        assert_eq!(r.free(16), 8);
        for i in 0..8 {
            r.write(i, 100 + i as u64);
        }
        r.submit(8);
        assert_eq!(r.producer().load(Ordering::Relaxed), 8);
        assert_eq!(r.free(1), 0, "a full ring has no room");
        // The "kernel" consumes three.
        r.consumer().store(3, Ordering::Release);
        assert_eq!(r.free(8), 3);
        r.write(0, 7);
        r.submit(1);
        // Slot 8 & 7 = 0 was rewritten.
        // SAFETY: test reads the descriptor array directly.
        assert_eq!(unsafe { r.desc.read() }, 7);
    }

    #[test]
    fn consumer_sees_only_published_entries_across_wraparound() {
        let mut r = ring(4, Side::Consumer);
        assert_eq!(r.available(4), 0);
        // The "kernel" publishes entries at indices near u32::MAX to test wrapping.
        r.local = u32::MAX - 1;
        r.cached = u32::MAX - 1;
        r.consumer().store(u32::MAX - 1, Ordering::Relaxed);
        for (k, idx) in [u32::MAX - 1, u32::MAX, 0, 1].into_iter().enumerate() {
            // SAFETY: test writes the descriptor array directly.
            unsafe { r.desc.add((idx & 3) as usize).write(k as u64) };
        }
        r.producer().store(1u32.wrapping_add(1), Ordering::Release);
        assert_eq!(r.available(8), 4);
        let got: Vec<u64> = (0..4).map(|i| r.read(i)).collect();
        assert_eq!(got, vec![0, 1, 2, 3]);
        r.release(4);
        assert_eq!(r.consumer().load(Ordering::Relaxed), 2);
        assert_eq!(r.available(1), 0);
    }
}
