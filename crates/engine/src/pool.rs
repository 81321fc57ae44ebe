//! A worker's buffer pool: a fixed set of buffers allocated once, handed out by index.
//!
//! Three classes: regular buffers (`REGULAR_CAPACITY` bytes after the headroom), medium
//! ones (`MEDIUM_CAPACITY`) for jumbo frames and the datagrams of parcels with segments
//! over 2 KiB, and a smaller number of large ones (`LARGE_CAPACITY`) for jumbograms and
//! parcels. A packet takes the smallest class that holds it, or a larger one when that
//! class is empty. Free lists are LIFO so recently freed (cache-warm) buffers are
//! reused first. The medium class exists for the cache: a vector of 8000-byte datagrams
//! in 256 KiB buffers touches 256 buffers' worth of pages and TLB entries, in 16 KiB
//! ones a sixteenth of that (`vecgate bench parcel-split --segment-size 8000`).
//!
//! Every buffer's storage is cut from one slab, on huge pages where the kernel gives
//! them (VPP keeps its buffers the same way): each buffer starts a cache line and spans
//! an odd number of them, so the first lines of consecutive buffers — where every node
//! reads its packet's headers — fall in different sets of the caches instead of
//! crowding into a few, and the same physical layout is had by every run.
//!
//! **Chained packets.** A packet may be a head buffer plus *extents*: bytes of other
//! buffers of the pool that follow the head's bytes, in order (`parcel4-split` makes each
//! datagram its headers plus one extent, its segment where it lies in the parcel;
//! `parcel4-join` makes a parcel its headers plus one extent a datagram, each segment
//! where it lies in its datagram's buffer). An extent holds its buffer: a buffer goes
//! back to its free list when its last holder frees it (`refs`, counted only on buffers
//! extents point into). A head of one extent keeps it in `extents`; a head of several
//! keeps them in `more` (its `extents` entry then says `MANY` and their total length).
//! Whether any chained packet is live is one count (`chains_live`), read once a call: with
//! none (every path but the split's and the join's), `free` and `free_many` are what they
//! were, and the graph's dispatcher and the worker ask it once a vector before copying
//! chains into one buffer for a node or device that does not take them
//! ([`Pool::linearize_all`]).

use crate::buffer::{BufIdx, Buffer, Line, HEADROOM};
use crate::mem::LINE;

/// Bytes of another buffer that follow a head buffer's own: `len` bytes from `at` in
/// `buf`'s storage (an absolute position, as `Offload::csum_start`). `len` 0: none.
/// `buf` [`MANY`]: the head has several extents, in `Pool::more`, of `len` bytes in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Extent {
    buf: u32,
    at: u32,
    len: u32,
}

/// `Extent::buf` of a head with several extents (no buffer has this index: the pool's
/// indices are `u32`s below its length). Kept in the one-extent entry so that the split's
/// chains, one extent each, read the one table they read before.
const MANY: u32 = u32::MAX;

/// Why [`Pool::attach`] or [`Pool::alloc_chained`] refused an extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("the head already has an extent, or is the buffer it would point into")]
    Taken,
    #[error("the range is not inside the source packet")]
    OutOfRange,
    #[error("the head has no tailroom for the extent's bytes (it could not be copied in)")]
    NoTailroom,
    #[error("no free buffer for the head")]
    NoBuffer,
    #[error("the source is itself a chained packet (its bytes are not all in its buffer)")]
    ChainedSource,
}

/// Payload capacity of a regular buffer: a full Ethernet jumbo-less frame plus room.
pub const REGULAR_CAPACITY: usize = 2048;
/// Payload capacity of a medium buffer: a 9000-byte jumbo frame, or a parcel's datagram
/// with up to 16 KiB of segment, with room.
pub const MEDIUM_CAPACITY: usize = 16 * 1024 + 256;
/// Payload capacity of a large buffer: an IPv6 jumbogram or parcel up to 256 KiB.
pub const LARGE_CAPACITY: usize = 256 * 1024;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub regular_total: usize,
    pub regular_free: usize,
    pub large_total: usize,
    pub large_free: usize,
    pub medium_total: usize,
    pub medium_free: usize,
    /// Allocations refused because the class was empty.
    pub alloc_failures: u64,
    /// Chained packets whose head had lost the tailroom to take its extent's bytes
    /// (a node grew a chained head's tail; none do): sent without them.
    pub chain_copy_failures: u64,
}

/// `repr(C)`, the fields in the order a packet's allocation and free read them (the
/// regular class's list and bounds, whether chains are live) ahead of the chained
/// packets' tables, the counters and the slab: the compiler's own order moved with the
/// slab's type and `parcel4-join` read 2 % slower at the same instructions
/// (docs/PERFORMANCE.md, one huge-table concept).
#[repr(C)]
pub struct Pool {
    bufs: Vec<Buffer>,
    free_regular: Vec<BufIdx>,
    regular: usize,
    /// Chained packets live in the pool: 0 means no extent and no shared buffer.
    chains_live: u32,
    /// Indices `regular..medium_end` are medium buffers, the rest large.
    medium_end: usize,
    free_medium: Vec<BufIdx>,
    free_large: Vec<BufIdx>,
    /// Per buffer: its extent, if it is the head of a chained packet (`MANY`: of several).
    extents: Vec<Extent>,
    /// Per buffer: holders beyond the first (extents pointing into it); the last holder
    /// to free it returns it to its list.
    refs: Vec<u32>,
    /// Per buffer: the extents of a head of several, in order (empty otherwise; each
    /// keeps its allocation for the buffer's next use as such a head).
    more: Vec<Vec<Extent>>,
    alloc_failures: u64,
    chain_copy_failures: u64,
    /// The storage of every buffer in `bufs`, which point into it: unmapped in `Drop`,
    /// after them. Never read or written through this field after `with_classes` cut it
    /// up (the buffers' pointers are the only access): held for its drop.
    #[allow(dead_code)]
    slab: crate::mem::HugeSlice<Line>,
}

/// Lines a buffer of `capacity` bytes after the headroom uses.
fn lines_used(capacity: usize) -> usize {
    (HEADROOM + capacity).div_ceil(LINE)
}

/// Lines the slab gives such a buffer: those it uses, made an odd number (see the
/// module's note).
fn lines_given(capacity: usize) -> usize {
    lines_used(capacity) | 1
}

// SAFETY: the slab is owned by the pool alone (its buffers point into it and never
// leave the pool), so the pool moves between threads with everything it refers to.
#[allow(unsafe_code)]
unsafe impl Send for Pool {}

impl Drop for Pool {
    fn drop(&mut self) {
        // The buffers first, then the slab they point into (a field's drop, after this).
        self.bufs.clear();
    }
}

impl Pool {
    /// Regular and large buffers, no medium ones.
    pub fn new(regular: usize, large: usize) -> Pool {
        Pool::with_classes(regular, 0, large)
    }

    pub fn with_classes(regular: usize, medium: usize, large: usize) -> Pool {
        let classes = [(regular, REGULAR_CAPACITY), (medium, MEDIUM_CAPACITY), (large, LARGE_CAPACITY)];
        let total: usize = classes.iter().map(|&(n, capacity)| n * lines_given(capacity)).sum();
        // Its own 2 MiB-aligned mapping: the whole slab on huge pages, and the first
        // buffer at the same place in its page, run after run. Zero and untouched: a
        // buffer's pages are the kernel's to fault in when it is first used (the free
        // lists hand out the lowest first), not all of them at start-up.
        let mut slab = crate::mem::HugeSlice::<Line>::zeroed(total);
        let mut rest: &mut [Line] = &mut slab;
        let mut bufs = Vec::with_capacity(regular + medium + large);
        for (n, capacity) in classes {
            for _ in 0..n {
                let (mine, others) = std::mem::take(&mut rest).split_at_mut(lines_given(capacity));
                rest = others;
                // The buffer uses what its class holds; a line left over only spaces it.
                let mine = &mut mine[..lines_used(capacity)];
                #[allow(unsafe_code)]
                // SAFETY: each buffer gets lines of its own (split off the rest); the
                // slab's memory does not move when the pool (and the `HugeSlice` in it)
                // does, nothing reaches it but through the buffers, and it outlives them:
                // `Drop` clears them before the slab field is dropped (unmapped).
                bufs.push(unsafe { Buffer::over(mine) });
            }
        }
        // Reverse so the first allocations get the lowest indices.
        let ids = |from: usize, n: usize| (from as u32..(from + n) as u32).rev().map(BufIdx).collect();
        Pool {
            bufs,
            slab,
            regular,
            medium_end: regular + medium,
            free_regular: ids(0, regular),
            free_medium: ids(regular, medium),
            free_large: ids(regular + medium, large),
            alloc_failures: 0,
            extents: vec![Extent::default(); regular + medium + large],
            more: (0..regular + medium + large).map(|_| Vec::new()).collect(),
            refs: vec![0; regular + medium + large],
            chains_live: 0,
            chain_copy_failures: 0,
        }
    }

    /// A buffer that can hold `len` bytes after the headroom, reset and empty.
    #[inline]
    pub fn alloc(&mut self, len: usize) -> Option<BufIdx> {
        let i = self.take(len)?;
        self.bufs[i.get()].reset();
        Some(i)
    }

    /// A buffer that can hold `len` bytes after the headroom, as it was left.
    #[inline(always)]
    fn take(&mut self, len: usize) -> Option<BufIdx> {
        let list = if len <= REGULAR_CAPACITY {
            &mut self.free_regular
        } else if len <= MEDIUM_CAPACITY && !self.free_medium.is_empty() {
            &mut self.free_medium
        } else {
            &mut self.free_large
        };
        match list.pop() {
            Some(i) => Some(i),
            None => {
                self.alloc_failures += 1;
                None
            }
        }
    }

    /// Up to `n` regular buffers appended to `out` (not reset: the caller writes them
    /// whole with `Buffer::write` or resets them). Returns how many were allocated.
    #[inline]
    pub fn alloc_regular_many(&mut self, n: usize, out: &mut Vec<BufIdx>) -> usize {
        let take = n.min(self.free_regular.len());
        if take < n {
            self.alloc_failures += 1;
        }
        let from = self.free_regular.len() - take;
        out.extend(self.free_regular.drain(from..));
        take
    }

    #[inline]
    pub fn free(&mut self, i: BufIdx) {
        if self.chains_live != 0 {
            return self.free_one_chained(i);
        }
        self.push_free(i)
    }

    #[inline]
    fn push_free(&mut self, i: BufIdx) {
        if i.get() < self.regular {
            self.free_regular.push(i)
        } else if i.get() < self.medium_end {
            self.free_medium.push(i)
        } else {
            self.free_large.push(i)
        }
    }

    #[inline]
    pub fn free_many(&mut self, bufs: &[BufIdx]) {
        if self.chains_live != 0 {
            return self.free_many_chained(bufs);
        }
        // A vector of regular buffers (nearly always) joins its free list in one copy:
        // pushed one by one, each push stores and reloads the list's length.
        let highest = bufs.iter().fold(0, |m, b| m.max(b.get()));
        if highest < self.regular {
            self.free_regular.extend_from_slice(bufs);
            return;
        }
        for &i in bufs {
            self.push_free(i)
        }
    }

    #[inline(never)]
    fn free_one_chained(&mut self, i: BufIdx) {
        self.free_chained(i)
    }

    /// `free_many` while extents are live (a vector of chained datagrams sent): their
    /// extents let go, then the heads, which no extent points into, in `free_many`'s
    /// one copy.
    ///
    /// A parcel's datagrams come in a run, their extents all into its buffer: the run's
    /// holds are let go in one step (one count changed a run, not a chain of
    /// read-modify-writes of one count a datagram), and the live count once a call.
    #[inline(never)]
    fn free_many_chained(&mut self, bufs: &[BufIdx]) {
        let mut shared = false;
        let mut let_go = 0;
        let mut run = (0, 0);
        for &i in bufs {
            let e = std::mem::take(&mut self.extents[i.get()]);
            if e.len != 0 {
                let_go += 1;
                if e.buf == MANY {
                    self.release_more(i);
                } else if e.buf == run.0 {
                    run.1 += 1;
                } else {
                    self.release_many(run);
                    run = (e.buf, 1);
                }
            }
            // A head some extent still points into (a parcel freed with its datagrams).
            shared |= self.refs[i.get()] != 0;
        }
        self.release_many(run);
        self.chains_live -= let_go;
        if shared || self.chains_live != 0 {
            bufs.iter().for_each(|&i| self.release(i));
        } else {
            self.free_many(bufs);
        }
    }

    /// `free` while extents are live: the head's extents let go, then the buffer itself.
    #[inline]
    fn free_chained(&mut self, i: BufIdx) {
        let e = std::mem::take(&mut self.extents[i.get()]);
        if e.len != 0 {
            self.chains_live -= 1;
            self.release_extents(i, e);
        }
        self.release(i);
    }

    /// The holds of head `i`'s several extents let go (its `extents` entry already
    /// cleared by the caller), the list emptied for its next use.
    fn release_more(&mut self, i: BufIdx) {
        let mut parts = std::mem::take(&mut self.more[i.get()]);
        for e in &parts {
            self.release(BufIdx(e.buf));
        }
        parts.clear();
        self.more[i.get()] = parts;
    }

    /// `n` holders of buffer `buf` let go (`run`: `(buf, n)`, nothing when `n` is 0): back
    /// to its list if they were the last.
    #[inline]
    fn release_many(&mut self, (buf, n): (u32, u32)) {
        if n == 0 {
            return;
        }
        let r = &mut self.refs[buf as usize];
        if *r >= n {
            *r -= n;
        } else {
            *r = 0;
            self.push_free(BufIdx(buf));
        }
    }

    /// One holder of `i` lets go: back to its list if it was the last.
    #[inline]
    fn release(&mut self, i: BufIdx) {
        match &mut self.refs[i.get()] {
            0 => self.push_free(i),
            r => *r -= 1,
        }
    }

    /// Make `head` a chained packet: its bytes followed by `range` of `src`'s packet
    /// bytes, which stay where they are (`src` held until `head` is freed). The head
    /// must have the tailroom to take them, so that [`Pool::linearize`] never fails.
    #[inline]
    pub fn attach(&mut self, head: BufIdx, src: BufIdx, range: core::ops::Range<usize>) -> Result<(), ChainError> {
        if head == src || self.extents[head.get()].len != 0 || self.extents[src.get()].len != 0 {
            return Err(ChainError::Taken);
        }
        let s = &self.bufs[src.get()];
        if range.start > range.end || range.end > s.len() {
            return Err(ChainError::OutOfRange);
        }
        if range.is_empty() {
            return Ok(());
        }
        if self.bufs[head.get()].tailroom() < range.len() {
            return Err(ChainError::NoTailroom);
        }
        let at = (s.offset() + range.start) as u32;
        self.extents[head.get()] = Extent { buf: src.0, at, len: range.len() as u32 };
        self.refs[src.get()] += 1;
        self.chains_live += 1;
        Ok(())
    }

    /// A new chained packet in one step (what [`Pool::alloc`], `set_len` and
    /// [`Pool::attach`] make, with `attach`'s checks on the head left out: a fresh head
    /// has no extent and is not `src`): a buffer whose packet is `head_len` bytes from
    /// `at` past the headroom (contents unspecified), then `range` of `src`'s packet
    /// bytes where they lie. The buffer's class holds `at + head_len + range.len()`
    /// bytes, so the packet can always be made one buffer again. One call a datagram for
    /// `parcelN-split`. Always inlined: called from the split of both families, LLVM
    /// otherwise makes it a call (+28 instructions a datagram measured).
    #[inline(always)]
    pub fn alloc_chained(&mut self, src: BufIdx, range: core::ops::Range<usize>, at: usize, head_len: usize) -> Result<BufIdx, ChainError> {
        if self.extents[src.get()].len != 0 {
            return Err(ChainError::Taken);
        }
        let s = &self.bufs[src.get()];
        if range.start > range.end || range.end > s.len() {
            return Err(ChainError::OutOfRange);
        }
        let ext_at = (s.offset() + range.start) as u32;
        let Some(head) = self.take(at + head_len + range.len()) else { return Err(ChainError::NoBuffer) };
        if self.bufs[head.get()].reset_to(HEADROOM + at, head_len).is_err() {
            // Not reached: the class holds the whole packet.
            self.push_free(head);
            return Err(ChainError::NoTailroom);
        }
        if !range.is_empty() {
            self.extents[head.get()] = Extent { buf: src.0, at: ext_at, len: range.len() as u32 };
            self.refs[src.get()] += 1;
            self.chains_live += 1;
        }
        Ok(head)
    }

    /// A buffer for a packet of several extents (a parcel joined from datagrams whose
    /// segments stay where they lie): its own `head_len` bytes from `at` past the
    /// headroom (contents unspecified), no extent yet, from a class that holds
    /// `at + head_len + extents_len` bytes, so that the packet can always be made one
    /// buffer again once [`Pool::push_extent`] added up to `extents_len` bytes.
    #[inline]
    pub fn alloc_head(&mut self, at: usize, head_len: usize, extents_len: usize) -> Option<BufIdx> {
        let head = self.take(at + head_len + extents_len)?;
        if self.bufs[head.get()].reset_to(HEADROOM + at, head_len).is_err() {
            // Not reached: the class holds the whole packet.
            self.push_free(head);
            return None;
        }
        Some(head)
    }

    /// Make `range` of `src`'s packet bytes, where they lie, follow what `head`'s packet
    /// has so far (its own bytes, then the extents added before), holding `src` until
    /// `head` is freed or made whole. `src` must hold its packet's bytes itself (not be
    /// chained) and `head` must have the tailroom for all its extents' bytes, so that
    /// [`Pool::linearize`] never fails. An empty range adds nothing.
    #[inline]
    pub fn push_extent(&mut self, head: BufIdx, src: BufIdx, range: core::ops::Range<usize>) -> Result<(), ChainError> {
        let e = self.extents[head.get()];
        // A buffer extents point into is no head (and, chained, never becomes a source).
        if head == src || (e.len == 0 && self.refs[head.get()] != 0) {
            return Err(ChainError::Taken);
        }
        if self.extents[src.get()].len != 0 {
            return Err(ChainError::ChainedSource);
        }
        let s = &self.bufs[src.get()];
        if range.start > range.end || range.end > s.len() {
            return Err(ChainError::OutOfRange);
        }
        if range.is_empty() {
            return Ok(());
        }
        let new = Extent { buf: src.0, at: (s.offset() + range.start) as u32, len: range.len() as u32 };
        if self.bufs[head.get()].tailroom() < e.len as usize + range.len() {
            return Err(ChainError::NoTailroom);
        }
        self.extents[head.get()] = match e.len {
            0 => {
                self.chains_live += 1;
                new
            }
            _ => {
                let more = &mut self.more[head.get()];
                if e.buf != MANY {
                    more.push(e);
                }
                more.push(new);
                Extent { buf: MANY, at: 0, len: e.len + new.len }
            }
        };
        self.refs[src.get()] += 1;
        Ok(())
    }

    /// [`Pool::push_extent`] for a run of sources, the same non-empty `range` of each
    /// one's packet bytes, in order, and **the head takes over the caller's hold on each
    /// source**: the caller frees none of them (each must be a distinct packet it holds
    /// once); they go back to the pool with the head, or when it is made whole. One call
    /// a parcel for `parcel4-join`, whose dispatcher then leaves the run's datagrams be
    /// (`engine::Taken::Held`): no hold counted up a datagram and back down when the
    /// dispatcher frees it. On `Err` nothing changed.
    #[inline]
    pub fn push_extents_taking(&mut self, head: BufIdx, srcs: &[BufIdx], range: core::ops::Range<usize>) -> Result<(), ChainError> {
        let e = self.extents[head.get()];
        if e.len == 0 && self.refs[head.get()] != 0 {
            return Err(ChainError::Taken);
        }
        if range.is_empty() {
            // No extent would hold the sources.
            return Err(ChainError::OutOfRange);
        }
        if srcs.is_empty() {
            return Ok(());
        }
        let len = range.len();
        let total = e.len as usize + srcs.len() * len;
        if self.bufs[head.get()].tailroom() < total {
            return Err(ChainError::NoTailroom);
        }
        for &s in srcs {
            if s == head {
                return Err(ChainError::Taken);
            }
            if self.extents[s.get()].len != 0 {
                return Err(ChainError::ChainedSource);
            }
            if range.end > self.bufs[s.get()].len() {
                return Err(ChainError::OutOfRange);
            }
        }
        debug_assert!(srcs.iter().enumerate().all(|(i, s)| !srcs[..i].contains(s)), "a source taken twice");
        let more = &mut self.more[head.get()];
        match (e.len, e.buf) {
            (0, _) => self.chains_live += 1,
            (_, MANY) => {}
            _ => more.push(e),
        }
        let bufs = &self.bufs;
        more.extend(srcs.iter().map(|&s| Extent { buf: s.0, at: (bufs[s.get()].offset() + range.start) as u32, len: len as u32 }));
        self.extents[head.get()] = Extent { buf: MANY, at: 0, len: total as u32 };
        Ok(())
    }

    /// Whether any chained packet is live (one load: asked once a vector).
    #[inline(always)]
    pub fn has_chains(&self) -> bool {
        self.chains_live != 0
    }

    /// Bytes `b` carries beyond its head buffer (0 unless it is chained).
    #[inline]
    pub fn extent_len(&self, b: BufIdx) -> usize {
        self.extents[b.get()].len as usize
    }

    /// `b`'s extents, in order (none unless it is chained).
    fn extents_of(&self, b: BufIdx) -> &[Extent] {
        let e = &self.extents[b.get()];
        match (e.len, e.buf) {
            (0, _) => &[],
            (_, MANY) => &self.more[b.get()],
            _ => core::slice::from_ref(e),
        }
    }

    /// The bytes of `b`'s extents, in order (none unless it is chained).
    pub fn extent_parts(&self, b: BufIdx) -> impl Iterator<Item = &[u8]> + '_ {
        self.extents_of(b).iter().map(|e| &self.bufs[e.buf as usize].storage()[e.at as usize..(e.at + e.len) as usize])
    }

    /// The bytes of `b`'s extents, one after the other (empty unless it is chained).
    pub fn extent_bytes(&self, b: BufIdx) -> Vec<u8> {
        self.extent_parts(b).flatten().copied().collect()
    }

    /// The bytes of packets `bufs` beyond their heads (a device counting bytes sent).
    #[inline]
    pub fn chained_bytes(&self, bufs: &[BufIdx]) -> usize {
        if self.chains_live == 0 {
            return 0;
        }
        bufs.iter().map(|&b| self.extent_len(b)).sum()
    }

    /// Copy `b`'s extents (if any) after its head's bytes, making it one buffer again.
    pub fn linearize(&mut self, b: BufIdx) {
        let e = self.extents[b.get()];
        if e.len == 0 {
            return;
        }
        if e.buf == MANY {
            let parts = std::mem::take(&mut self.more[b.get()]);
            for &p in &parts {
                self.copy_extent(b, p);
            }
            self.more[b.get()] = parts;
        } else {
            self.copy_extent(b, e);
        }
        self.extents[b.get()] = Extent::default();
        self.chains_live -= 1;
        self.release_extents(b, e);
    }

    /// Append extent `e`'s bytes to head `b`'s packet.
    fn copy_extent(&mut self, b: BufIdx, e: Extent) {
        let len = e.len as usize;
        // Two distinct buffers: an extent never points into its own head.
        match self.bufs.get_disjoint_mut([b.get(), e.buf as usize]) {
            Ok([head, src]) => {
                let end = head.len();
                if head.set_len(end + len).is_ok() {
                    head.bytes_mut()[end..].copy_from_slice(&src.storage()[e.at as usize..e.at as usize + len]);
                } else {
                    self.chain_copy_failures += 1;
                }
            }
            Err(_) => self.chain_copy_failures += 1,
        }
    }

    /// Let go head `b`'s holds for its extent entry `e` (taken out of `extents` already).
    fn release_extents(&mut self, b: BufIdx, e: Extent) {
        if e.buf == MANY {
            self.release_more(b);
        } else {
            self.release(BufIdx(e.buf));
        }
    }

    /// [`Pool::linearize`] every chained packet of `bufs`: before a node, device or
    /// capture that does not take chains. Nothing to do (one load) while none is live.
    #[inline]
    pub fn linearize_all(&mut self, bufs: &[BufIdx]) {
        if self.chains_live == 0 {
            return;
        }
        for &b in bufs {
            if self.extents[b.get()].len != 0 {
                self.linearize(b);
            }
        }
    }

    #[inline(always)]
    pub fn get(&self, i: BufIdx) -> &Buffer {
        &self.bufs[i.get()]
    }

    #[inline(always)]
    pub fn get_mut(&mut self, i: BufIdx) -> &mut Buffer {
        &mut self.bufs[i.get()]
    }

    /// Every buffer, indexed by `BufIdx::get`: a loop over many indices takes the slice
    /// once, so its base and length stay local instead of being reloaded from the pool
    /// after each store into a buffer.
    #[inline(always)]
    pub fn buffers_mut(&mut self) -> &mut [Buffer] {
        &mut self.bufs
    }

    /// [`Pool::buffers_mut`] for reading.
    #[inline(always)]
    pub fn buffers(&self) -> &[Buffer] {
        &self.bufs
    }

    /// Two distinct buffers at once (e.g. to copy from one into the other); `None` if
    /// the indices are equal or out of range.
    #[inline]
    pub fn two_mut(&mut self, a: BufIdx, b: BufIdx) -> Option<(&mut Buffer, &mut Buffer)> {
        let [x, y] = self.bufs.get_disjoint_mut([a.get(), b.get()]).ok()?;
        Some((x, y))
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            regular_total: self.regular,
            regular_free: self.free_regular.len(),
            large_total: self.bufs.len() - self.medium_end,
            large_free: self.free_large.len(),
            medium_total: self.medium_end - self.regular,
            medium_free: self.free_medium.len(),
            alloc_failures: self.alloc_failures,
            chain_copy_failures: self.chain_copy_failures,
        }
    }

    /// Buffers currently handed out (a leak check for tests: zero when idle).
    pub fn in_use(&self) -> usize {
        self.bufs.len() - self.free_regular.len() - self.free_medium.len() - self.free_large.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_buffer_starts_a_line_of_its_own_with_the_capacity_of_its_class() {
        let mut p = Pool::with_classes(8, 2, 2);
        let mut starts = Vec::new();
        for (len, capacity) in [(60, REGULAR_CAPACITY), (9000, MEDIUM_CAPACITY), (70_000, LARGE_CAPACITY)] {
            for _ in 0..2 {
                let i = p.alloc(len).unwrap();
                let b = p.get_mut(i);
                b.write(&[0x45; 60]).unwrap();
                assert_eq!(b.bytes().as_ptr() as usize % LINE, 0);
                assert_eq!(b.capacity(), capacity);
                starts.push(b.bytes().as_ptr() as usize - HEADROOM);
            }
        }
        // No two buffers overlap, and consecutive ones are an odd number of lines apart
        // (their first lines in different cache sets).
        starts.sort();
        for w in starts.windows(2) {
            let lines = (w[1] - w[0]) / LINE;
            assert!(lines * LINE == w[1] - w[0] && lines % 2 == 1, "{lines} lines apart");
        }
    }

    /// A slab of 2 MiB or more is a mapping of its own on a 2 MiB boundary (all of it
    /// can be on huge pages) and the first buffer starts it; a smaller one is an
    /// ordinary allocation, its buffers as usable.
    #[test]
    fn a_large_slab_starts_a_huge_page_with_the_first_buffer() {
        let mut p = Pool::new(2048, 4);
        assert!(p.slab.is_huge_aligned());
        let i = p.alloc(60).unwrap();
        p.get_mut(i).write(&[1; 60]).unwrap();
        let first = p.get(i).bytes().as_ptr() as usize - HEADROOM;
        assert_eq!((first, first % (2 << 20)), (p.slab.as_ptr() as usize, 0));
        p.free(i);
        let mut small = Pool::new(4, 0);
        assert!(!small.slab.is_huge_aligned());
        let j = small.alloc(60).unwrap();
        small.get_mut(j).write(&[2; 60]).unwrap();
        assert_eq!(small.get(j).bytes(), &[2; 60]);
    }

    #[test]
    fn classes_and_exhaustion() {
        let mut p = Pool::new(2, 1);
        let a = p.alloc(100).unwrap();
        let b = p.alloc(2048).unwrap();
        assert!(p.alloc(64).is_none());
        let big = p.alloc(70_000).unwrap();
        assert!(p.get(big).capacity() >= 70_000);
        assert!(p.alloc(70_000).is_none());
        assert_eq!(p.stats().alloc_failures, 2);
        assert_eq!(p.in_use(), 3);
        p.free(a);
        p.free(b);
        p.free(big);
        assert_eq!(p.in_use(), 0);
        let mut v = Vec::new();
        assert_eq!(p.alloc_regular_many(5, &mut v), 2);
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn medium_class_first_then_large() {
        let mut p = Pool::with_classes(1, 1, 1);
        let m = p.alloc(9000).unwrap();
        assert_eq!(p.get(m).capacity(), MEDIUM_CAPACITY);
        // The medium class empty: a large buffer rather than a failure.
        let l = p.alloc(9000).unwrap();
        assert_eq!(p.get(l).capacity(), LARGE_CAPACITY);
        assert!(p.alloc(9000).is_none());
        assert_eq!((p.stats().medium_total, p.stats().medium_free, p.stats().large_free), (1, 0, 0));
        p.free(m);
        p.free(l);
        assert_eq!((p.stats().medium_free, p.stats().large_free, p.in_use()), (1, 1, 0));
        // Larger than a medium buffer: large only.
        let big = p.alloc(MEDIUM_CAPACITY + 1).unwrap();
        assert_eq!(p.get(big).capacity(), LARGE_CAPACITY);
        assert_eq!(p.stats().medium_free, 1);
    }

    #[test]
    fn alloc_chained_places_the_head_and_holds_the_source_until_its_last_holder_goes() {
        let mut p = Pool::with_classes(2, 0, 1);
        let src = p.alloc(4000).unwrap();
        p.get_mut(src).write(&(0..4000u32).map(|i| i as u8).collect::<Vec<_>>()).unwrap();
        let head = p.alloc_chained(src, 100..1380, 14, 28).unwrap();
        let h = p.get(head);
        assert_eq!((h.offset(), h.len(), h.capacity()), (HEADROOM + 14, 28, REGULAR_CAPACITY));
        assert_eq!(h.meta, crate::Meta::default());
        assert_eq!(p.extent_bytes(head), &p.get(src).bytes()[100..1380]);
        assert!(h.tailroom() >= 1280, "room to be made whole");
        // The source's own checks: out of its packet, or itself chained.
        assert_eq!(p.alloc_chained(src, 3000..4001, 0, 28), Err(ChainError::OutOfRange));
        assert_eq!(p.alloc_chained(head, 0..10, 0, 28), Err(ChainError::Taken));
        // Too big for a regular head with the large class empty: no buffer, nothing held.
        assert_eq!(p.alloc_chained(src, 0..3000, 14, 28), Err(ChainError::NoBuffer));
        assert_eq!(p.in_use(), 2);
        p.free(src);
        assert_eq!(p.in_use(), 2, "the head still holds the source");
        p.linearize(head);
        assert_eq!(&p.get(head).bytes()[28..], &(100..1380u32).map(|i| i as u8).collect::<Vec<_>>()[..]);
        assert_eq!(p.in_use(), 1);
        p.free(head);
        assert!(!p.has_chains());
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn a_head_of_several_extents_reads_them_in_order_and_holds_each_source_until_it_goes() {
        let mut p = Pool::with_classes(6, 0, 1);
        let srcs: Vec<BufIdx> = (0..3u8)
            .map(|k| {
                let s = p.alloc(300).unwrap();
                p.get_mut(s).write(&(0..300u32).map(|i| (i as u8).wrapping_mul(3).wrapping_add(k)).collect::<Vec<_>>()).unwrap();
                s
            })
            .collect();
        let want = |head: &[u8]| -> Vec<u8> {
            let mut v = head.to_vec();
            for (k, r) in [(0, 10..110), (1, 0..300), (2, 299..300)] {
                v.extend(r.map(|i: u32| (i as u8).wrapping_mul(3).wrapping_add(k)));
            }
            v
        };
        let make = |p: &mut Pool, srcs: &[BufIdx]| {
            let h = p.alloc_head(14, 40, 401).unwrap();
            // 14 + 40 + 401 bytes: a regular buffer holds the whole packet.
            assert_eq!((p.get(h).offset(), p.get(h).len(), p.get(h).capacity()), (HEADROOM + 14, 40, REGULAR_CAPACITY));
            p.get_mut(h).bytes_mut().fill(0xee);
            for (k, r) in [(0, 10..110), (1, 0..300), (2, 299..300), (2, 5..5)] {
                p.push_extent(h, srcs[k], r).unwrap();
            }
            h
        };
        let h = make(&mut p, &srcs);
        assert_eq!(p.extent_len(h), 401);
        assert_eq!(p.extent_parts(h).map(<[u8]>::len).collect::<Vec<_>>(), [100, 300, 1]);
        assert_eq!([p.get(h).bytes(), &p.extent_bytes(h)].concat(), want(&[0xee; 40]));
        assert_eq!(p.chained_bytes(&[h, srcs[0]]), 401);
        // Refused: a chained source, the head itself, a range out of the source, more
        // bytes than the head's class holds; nothing changed by any of them.
        let one = p.alloc(10).unwrap();
        p.get_mut(one).set_len(REGULAR_CAPACITY - 8).unwrap();
        assert_eq!(p.push_extent(one, h, 0..10), Err(ChainError::ChainedSource));
        assert_eq!(p.push_extent(h, h, 0..10), Err(ChainError::Taken));
        assert_eq!(p.push_extent(h, srcs[0], 0..301), Err(ChainError::OutOfRange));
        assert_eq!(p.push_extent(one, srcs[0], 0..300), Err(ChainError::NoTailroom));
        // A source is no head to add to (its bytes are pointed into).
        assert_eq!(p.push_extent(srcs[0], one, 0..0), Err(ChainError::Taken));
        p.free(one);
        assert_eq!(p.extent_len(h), 401);
        // The sources' own holders let go first: the head keeps them.
        p.free_many(&srcs);
        assert_eq!(p.in_use(), 4, "the head and the three sources it holds");
        p.linearize(h);
        assert_eq!(p.get(h).bytes(), &want(&[0xee; 40])[..]);
        assert_eq!((p.extent_len(h), p.in_use(), p.has_chains()), (0, 1, false));
        p.free(h);
        assert_eq!(p.in_use(), 0);
        // Freed chained, the head before its sources, then in one `free_many` with them:
        // every buffer back once.
        let srcs: Vec<BufIdx> = (0..3).map(|_| p.alloc(300).unwrap()).collect();
        for s in &srcs {
            p.get_mut(*s).set_len(300).unwrap();
        }
        for round in 0..2 {
            let h = make(&mut p, &srcs);
            if round == 0 {
                p.free(h);
                assert_eq!(p.in_use(), 3);
            } else {
                p.free_many(&[srcs[1], h, srcs[0]]);
                assert_eq!(p.in_use(), 1);
                assert!(!p.has_chains());
                p.free(srcs[2]);
                assert_eq!(p.in_use(), 0);
            }
        }
        let mut seen = std::collections::HashSet::new();
        while let Some(b) = p.alloc(100).or_else(|| p.alloc(70_000)) {
            assert!(seen.insert(b), "{b:?} handed out twice");
        }
        assert_eq!(seen.len(), 7);
    }

    #[test]
    fn freeing_many_returns_each_buffer_to_its_class() {
        let mut p = Pool::with_classes(3, 1, 1);
        let regular: Vec<BufIdx> = (0..3).map(|_| p.alloc(100).unwrap()).collect();
        let m = p.alloc(9000).unwrap();
        let l = p.alloc(9000).unwrap();
        // All regular: the one-copy path.
        p.free_many(&regular);
        assert_eq!((p.stats().regular_free, p.stats().medium_free, p.stats().large_free), (3, 0, 0));
        // Mixed: each to its own list, whatever its place in the vector.
        let a = p.alloc(100).unwrap();
        p.free_many(&[l, a, m]);
        assert_eq!((p.stats().regular_free, p.stats().medium_free, p.stats().large_free, p.in_use()), (3, 1, 1, 0));
        let (m2, l2) = (p.alloc(9000).unwrap(), p.alloc(9000).unwrap());
        assert_eq!((p.get(m2).capacity(), p.get(l2).capacity()), (MEDIUM_CAPACITY, LARGE_CAPACITY));
    }
}
