//! Memory for large per-worker tables that are read at random (flow caches): backed by
//! 2 MiB pages where the kernel allows it, so that lookups spread over tens of
//! megabytes stop missing the TLB on nearly every packet (docs/PERFORMANCE.md, the SPD
//! flow cache).

use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

const HUGE_PAGE: usize = 2 << 20;

/// `n` copies of a value in memory of their own that starts on a 2 MiB boundary and
/// spans whole 2 MiB pages, asked to be backed by transparent huge pages: every byte of
/// a table of at least one huge page can be on huge pages, where advising the middle of
/// an ordinary allocation, placed where the allocator puts it, left 4 KiB pages at both
/// ends and, as `malloc` places tables of a few megabytes (the SPD classifier's 8 MiB
/// bucket table at 100,000 policies: on no huge page at all, `smaps`' `AnonHugePages`
/// 0 kB), sometimes none inside either (docs/PERFORMANCE.md, the SPD miss, ninth
/// session). The one way the project puts a table on huge pages (flow caches, the LB's
/// tables, the buffer pool's slab).
/// Tables smaller than a huge page are an ordinary allocation.
///
/// The values are `Copy`: nothing to drop, and a table is filled or cloned by copying.
pub struct HugeSlice<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes mapped for the values (a multiple of [`HUGE_PAGE`]), or 0 when they are an
    /// ordinary allocation (a `Box<[T]>`'s).
    mapped: usize,
}

// SAFETY: a `HugeSlice` owns its values as a `Box<[T]>` does (no other pointer to them
// exists; shared access goes through `&self`), so it may cross threads as a box can.
#[allow(unsafe_code)]
unsafe impl<T: Copy + Send> Send for HugeSlice<T> {}
// SAFETY: as for `Send`: `&HugeSlice` gives only `&[T]`.
#[allow(unsafe_code)]
unsafe impl<T: Copy + Sync> Sync for HugeSlice<T> {}

impl<T: Copy> HugeSlice<T> {
    /// `n` copies of `value`.
    pub fn new(n: usize, value: T) -> Self {
        let s = Self::uninit(n).unwrap_or_else(|| Self::boxed(vec![value; n].into_boxed_slice()));
        if s.mapped != 0 {
            for i in 0..n {
                #[allow(unsafe_code)]
                // SAFETY: `uninit` mapped room for `n` values from `ptr`, aligned for
                // `T` (a 2 MiB boundary), which only `s` refers to.
                unsafe {
                    s.ptr.as_ptr().add(i).write(value)
                };
            }
        }
        s
    }

    /// `n` values of all-zero bytes, written by nobody: a fresh anonymous mapping is
    /// zero already, so its pages cost neither time nor memory until first touched.
    /// For tables whose empty slot is all zeros (the LB's session tables, the buffer
    /// slab), sized for a million entries whether a gateway uses them or not: filled
    /// like `new`, they took seconds of start-up under memory pressure and their
    /// hundreds of megabytes at once (docs/PERFORMANCE.md, "Start-up and memory").
    pub fn zeroed(n: usize) -> Self
    where
        T: zerocopy::FromZeros,
    {
        // Under a huge page (or no mapping to be had): an ordinary allocation of zeros.
        Self::uninit(n).unwrap_or_else(|| Self::boxed(vec![T::new_zeroed(); n].into_boxed_slice()))
    }

    fn boxed(b: Box<[T]>) -> Self {
        let len = b.len();
        let ptr = NonNull::from(Box::leak(b)).cast::<T>();
        HugeSlice { ptr, len, mapped: 0 }
    }

    /// Huge-page-aligned memory for `n` values, not yet written; `None` for less than a
    /// huge page, or where the kernel does not map it (then an ordinary allocation).
    fn uninit(n: usize) -> Option<Self> {
        let bytes = n.checked_mul(std::mem::size_of::<T>())?;
        if bytes < HUGE_PAGE || std::mem::align_of::<T>() > HUGE_PAGE {
            return None;
        }
        let mapped = bytes.checked_next_multiple_of(HUGE_PAGE)?;
        // One huge page more than needed, so that a 2 MiB boundary lies inside with
        // `mapped` bytes after it; the rest is unmapped again.
        let total = NonZeroUsize::new(mapped.checked_add(HUGE_PAGE)?)?;
        use nix::sys::mman::{MapFlags, MmapAdvise, ProtFlags};
        #[allow(unsafe_code)]
        // SAFETY: a new private anonymous mapping at an address the kernel chooses
        // overlaps nothing that exists.
        let base =
            unsafe { nix::sys::mman::mmap_anonymous(None, total, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }
                .ok()?;
        let start = (base.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
        let (head, tail) = (start - base.as_ptr() as usize, total.get() - (start - base.as_ptr() as usize) - mapped);
        #[allow(unsafe_code)]
        // SAFETY: [base, start) and [start + mapped, base + total) are whole pages (the
        // mapping and `start` are page-aligned, `mapped` a multiple of pages) of the
        // mapping just made, which nothing refers to; failing leaves them mapped, unused.
        unsafe {
            if head != 0 {
                let _ = nix::sys::mman::munmap(base, head);
            }
            if let Some(end) = NonNull::new((start + mapped) as *mut c_void).filter(|_| tail != 0) {
                let _ = nix::sys::mman::munmap(end, tail);
            }
        }
        let ptr = NonNull::new(start as *mut T)?;
        #[allow(unsafe_code)]
        // SAFETY: [start, start + mapped) is the mapping's part just kept, not yet
        // touched; MADV_HUGEPAGE changes only how the kernel backs it, and may fail (then
        // ignored: 4 KiB pages).
        let _ = unsafe { nix::sys::mman::madvise(ptr.cast(), mapped, MmapAdvise::MADV_HUGEPAGE) };
        Some(HugeSlice { ptr, len: n, mapped })
    }

    /// Whether the values are on memory of their own aligned to a huge page (else an
    /// ordinary allocation: less than a huge page, or the kernel would not map it).
    pub fn is_huge_aligned(&self) -> bool {
        self.mapped != 0
    }
}

impl<T: Copy> std::ops::Deref for HugeSlice<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        #[allow(unsafe_code)]
        // SAFETY: `ptr` holds `len` values written by `new` or `clone`, owned by `self`.
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }
}

impl<T: Copy> std::ops::DerefMut for HugeSlice<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        #[allow(unsafe_code)]
        // SAFETY: as in `deref`, and `&mut self` is the only access to them.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }
}

impl<T: Copy> Clone for HugeSlice<T> {
    fn clone(&self) -> Self {
        match Self::uninit(self.len) {
            Some(s) => {
                #[allow(unsafe_code)]
                // SAFETY: `s` has room for `len` values (`uninit`), its own memory, which
                // cannot overlap `self`'s.
                unsafe {
                    std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), s.ptr.as_ptr(), self.len)
                };
                s
            }
            None => Self::boxed(self.to_vec().into_boxed_slice()),
        }
    }
}

impl<T: Copy> Drop for HugeSlice<T> {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: `mapped` bytes from `ptr` are the mapping `uninit` kept, or, when 0,
        // `ptr` and `len` are the box `boxed` leaked; either is freed once, here.
        unsafe {
            if self.mapped != 0 {
                let _ = nix::sys::mman::munmap(self.ptr.cast(), self.mapped);
            } else {
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)));
            }
        }
    }
}

impl<T: Copy> std::fmt::Debug for HugeSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HugeSlice({} values, {} bytes mapped)", self.len, self.mapped)
    }
}

/// A table of a power-of-two number of values (at least one), indexed by a hash: the
/// index is the hash's low bits, so it is always in range and a lookup needs no bounds
/// check (a flow cache's slot is read twice a packet, to prefetch and to compare: two
/// checks a packet otherwise, docs/PERFORMANCE.md "IPsec SPD hit: the verdict from the
/// slot"). On huge pages ([`HugeSlice`]) from 2 MiB up.
#[derive(Clone, Debug)]
pub struct MaskedTable<T: Copy> {
    values: HugeSlice<T>,
    /// `values.len() - 1`, the low bits an index keeps.
    mask: u32,
}

/// A [`MaskedTable`] to read ([`MaskedTable::view`]).
#[derive(Clone, Copy, Debug)]
pub struct MaskedView<'a, T: Copy> {
    values: &'a [T],
    /// `values.len() - 1`.
    mask: u32,
}

impl<'a, T: Copy> MaskedView<'a, T> {
    /// The value `hash`'s low bits name.
    #[inline(always)]
    pub fn get(self, hash: u32) -> &'a T {
        let i = (hash & self.mask) as usize;
        debug_assert!(i < self.values.len());
        #[allow(unsafe_code)]
        // SAFETY: only `MaskedTable::view` makes a view, of a table that `new` made
        // exactly `mask + 1` long and whose length nothing changes afterwards, so
        // `hash & mask` is an index inside it.
        unsafe {
            self.values.get_unchecked(i)
        }
    }
}

/// A [`MaskedTable`]'s size that is not a power of two from 1 to 2^31.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotPowerOfTwo(pub usize);

impl<T: Copy> MaskedTable<T> {
    /// `n` copies of `value`, `n` a power of two up to 2^31.
    pub fn new(n: usize, value: T) -> Result<Self, NotPowerOfTwo> {
        let mask = Self::mask_for(n)?;
        Ok(MaskedTable { values: HugeSlice::new(n, value), mask })
    }

    /// `n` values of zero bytes, not written ([`HugeSlice::zeroed`]), `n` as for `new`.
    pub fn zeroed(n: usize) -> Result<Self, NotPowerOfTwo>
    where
        T: zerocopy::FromZeros,
    {
        let mask = Self::mask_for(n)?;
        Ok(MaskedTable { values: HugeSlice::zeroed(n), mask })
    }

    /// The index mask of a table of `n` values: `n` a power of two up to 2^31.
    fn mask_for(n: usize) -> Result<u32, NotPowerOfTwo> {
        if !n.is_power_of_two() || n > 1 << 31 {
            return Err(NotPowerOfTwo(n));
        }
        Ok((n - 1) as u32)
    }

    /// Every value set to `value`.
    pub fn fill(&mut self, value: T) {
        self.values.fill(value);
    }
}

impl<T: Copy> MaskedTable<T> {
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the table is on memory of its own aligned to a huge page
    /// ([`HugeSlice::is_huge_aligned`]).
    pub fn is_huge_aligned(&self) -> bool {
        self.values.is_huge_aligned()
    }

    /// Never: a table has at least one value.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The value `hash`'s low bits name.
    #[inline(always)]
    pub fn get(&self, hash: u32) -> &T {
        self.view().get(hash)
    }

    /// The table to read, as two values a loop can keep in registers (its values'
    /// address and the mask), where reads through `&self` load both again after
    /// every store the compiler cannot tell apart from the table.
    #[inline(always)]
    pub fn view(&self) -> MaskedView<'_, T> {
        MaskedView { values: &self.values, mask: self.mask }
    }

    /// [`MaskedTable::get`] to change.
    #[inline(always)]
    pub fn get_mut(&mut self, hash: u32) -> &mut T {
        let i = (hash & self.mask) as usize;
        debug_assert!(i < self.values.len());
        #[allow(unsafe_code)]
        // SAFETY: as in `get`.
        unsafe {
            self.values.get_unchecked_mut(i)
        }
    }
}

/// Bytes of a cache line.
pub const LINE: usize = 64;

/// `len` values of `T` starting on a cache-line boundary, shared copy-on-write between
/// table versions (a clone shares them; [`SharedLines::get_mut`] copies them first if
/// another version holds them). With `T` a multiple of 64 bytes each value is whole
/// lines: a reader loads one line per 64-byte value, not two.
///
/// Why not `#[repr(align(64))]`: an over-aligned allocation is glibc's `memalign`, and
/// glibc did not reuse the freed chunks for the next copies, so each change of a
/// copy-on-write table left a chunk-sized hole (docs/PERFORMANCE.md, the UPF's
/// session-resolved record: 16.8 KB resident per session). Here the storage is an
/// ordinary allocation of 8-byte units, one line longer, and the values start at its
/// first line boundary.
#[derive(Clone)]
pub struct SharedLines<T: Copy> {
    units: std::sync::Arc<[std::mem::MaybeUninit<u64>]>,
    /// The unit at the first line boundary.
    first: usize,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Copy> SharedLines<T> {
    const UNITS: usize = {
        assert!(std::mem::size_of::<T>().is_multiple_of(8) && std::mem::align_of::<T>() <= LINE);
        std::mem::size_of::<T>() / 8
    };

    /// `len` copies of `fill`.
    pub fn new(len: usize, fill: T) -> Self {
        let mut s = Self::uninit(len);
        let base = s.base_mut();
        for i in 0..len {
            #[allow(unsafe_code)]
            // SAFETY: `base` is aligned for `T` (a line boundary, `align_of::<T>() <=
            // LINE`, and `size_of::<T>()` is a multiple of its alignment), and
            // `uninit` made room for `len` values after it in storage only `s` holds.
            unsafe {
                base.add(i).write(fill)
            };
        }
        s
    }

    /// Storage for `len` values, not yet written.
    fn uninit(len: usize) -> Self {
        let units: std::sync::Arc<[std::mem::MaybeUninit<u64>]> =
            std::iter::repeat_n(std::mem::MaybeUninit::uninit(), len * Self::UNITS + LINE / 8).collect();
        let first = (units.as_ptr() as usize).next_multiple_of(LINE) - units.as_ptr() as usize;
        SharedLines { units, first: first / 8, len, _t: std::marker::PhantomData }
    }

    fn base_mut(&mut self) -> *mut T {
        let first = self.first;
        let units = std::sync::Arc::get_mut(&mut self.units).expect("storage a copy holds alone");
        units[first..].as_mut_ptr().cast()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        #[allow(unsafe_code)]
        // SAFETY: i < len, so value i lies inside the storage (`uninit`); it was
        // written as a `T` by `new` or through `get_mut` (a copy copies every unit of
        // the values), and it is aligned for `T` (see `new`).
        unsafe {
            Some(&*self.units.as_ptr().add(self.first).cast::<T>().add(i))
        }
    }

    /// Value `i` to change, after copying the values if another version shares them.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        if std::sync::Arc::get_mut(&mut self.units).is_none() {
            let mut copy = Self::uninit(self.len);
            let n = self.len * Self::UNITS;
            let (from, to) = (self.first, copy.first);
            std::sync::Arc::get_mut(&mut copy.units).expect("a new copy")[to..to + n].copy_from_slice(&self.units[from..from + n]);
            *self = copy;
        }
        let base = self.base_mut();
        #[allow(unsafe_code)]
        // SAFETY: as in `get`, and the storage is this version's alone (`base_mut`), so
        // no other reference to value i exists while the returned one lives.
        unsafe {
            Some(&mut *base.add(i))
        }
    }

    /// Bytes allocated for the values (shared storage counted in full).
    pub fn memory_bytes(&self) -> usize {
        self.units.len() * 8
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_masked_table_keeps_a_hashs_low_bits() {
        let mut t = super::MaskedTable::new(8, 0u32).unwrap();
        for i in 0..8 {
            *t.get_mut(i) = i;
        }
        // Every hash lands on the value its low three bits name, however large.
        for h in [0u32, 5, 8, 13, 0xffff_fff9, u32::MAX] {
            assert_eq!(*t.get(h), h & 7);
        }
        assert_eq!(t.len(), 8);
        t.fill(3);
        assert_eq!(*t.get(6), 3);
        assert_eq!(*super::MaskedTable::new(1, 9u8).unwrap().get(u32::MAX), 9);
        for n in [0, 3, 1000, 1 << 32] {
            assert_eq!(super::MaskedTable::new(n, 0u8).err(), Some(super::NotPowerOfTwo(n)));
        }
    }

    #[test]
    fn a_huge_slice_of_a_huge_page_or_more_starts_on_one() {
        use super::{HugeSlice, HUGE_PAGE};
        // 3 MiB of values: on two whole huge pages of their own, the second half unused.
        let mut t = HugeSlice::new(3 << 18, [5u32; 1]);
        assert!(t.is_huge_aligned());
        assert_eq!(t.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(t.len(), 3 << 18);
        assert!(t.iter().all(|v| *v == [5]));
        t[(3 << 18) - 1] = [7];
        let c = t.clone();
        assert!(c.is_huge_aligned() && (c.as_ptr() as usize).is_multiple_of(HUGE_PAGE) && c.as_ptr() != t.as_ptr());
        t[0] = [1];
        assert_eq!((c[0], c[(3 << 18) - 1], t[0]), ([5], [7], [1]), "a clone is a copy");
        // Less than a huge page: an ordinary allocation, the same values.
        let small = HugeSlice::new(1000, 9u64);
        assert!(!small.is_huge_aligned());
        assert_eq!((small.len(), small.iter().sum::<u64>()), (1000, 9000));
        assert_eq!(&*small.clone(), &*small);
        assert!(HugeSlice::new(0, 1u8).is_empty());
    }

    /// The resident kilobytes of the mapping that holds `at`, by `/proc/self/smaps`.
    fn resident_kb(at: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-').filter(|_| !line.ends_with(':') && !first.ends_with(':')) {
                if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                    inside = (lo..hi).contains(&at);
                    continue;
                }
            }
            if inside && first == "Rss:" {
                return line.split_whitespace().nth(1).unwrap().parse().unwrap();
            }
        }
        panic!("no mapping holds {at:#x}")
    }

    #[test]
    fn a_zeroed_huge_slice_costs_nothing_until_touched() {
        use super::{HugeSlice, HUGE_PAGE};
        // 64 MiB of zero values: readable as zeros, none of it resident, where `new`
        // writes (and so makes resident) every page.
        let n = 8 << 20;
        let mut t = HugeSlice::<u64>::zeroed(n);
        assert!(t.is_huge_aligned() && t.len() == n);
        assert_eq!(resident_kb(t.as_ptr() as usize), 0);
        let filled = HugeSlice::new(n, 0u64);
        assert!(resident_kb(filled.as_ptr() as usize) >= 64 << 10);
        // Touching one value makes at most its huge page resident.
        t[n / 2] = 7;
        assert!(resident_kb(t.as_ptr() as usize) <= (HUGE_PAGE >> 10) as u64);
        assert_eq!((t[n / 2], t[0], t[n - 1]), (7, 0, 0));
        assert!(t.iter().all(|&v| v == 0 || v == 7));
        // Under a huge page: an ordinary allocation of zeros.
        let small = HugeSlice::<[u32; 4]>::zeroed(100);
        assert!(!small.is_huge_aligned() && small.iter().all(|v| *v == [0; 4]));
    }

    #[test]
    fn shared_lines_start_on_a_line_and_copy_on_write() {
        use super::{SharedLines, LINE};
        for _ in 0..8 {
            let mut a = SharedLines::new(5, [3u64; 8]);
            assert_eq!(a.get(0).unwrap() as *const _ as usize % LINE, 0);
            let published = a.clone();
            a.get_mut(4).unwrap()[0] = 9;
            assert_eq!(a.get(0).unwrap() as *const _ as usize % LINE, 0, "a copy is aligned too");
            assert_eq!((a.get(4).unwrap()[0], published.get(4).unwrap()[0], a.get(3), a.get(5)), (9, 3, Some(&[3; 8]), None));
            a.get_mut(1).unwrap()[7] = 1;
            assert_eq!((a.get(1).unwrap()[7], a.get(4).unwrap()[0], published.get(1).unwrap()[7]), (1, 9, 3));
            assert!(a.get_mut(5).is_none() && SharedLines::new(0, [0u64; 8]).is_empty());
        }
    }
}
