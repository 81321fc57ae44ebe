//! Memory for large per-worker tables that are read at random (flow caches): backed by
//! 2 MiB pages where the kernel allows it, so that lookups spread over tens of
//! megabytes stop missing the TLB on nearly every packet (docs/PERFORMANCE.md, the SPD
//! flow cache).

use std::ffi::c_void;
use std::ptr::NonNull;

const PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;

/// `n` copies of `value` in one allocation that the kernel is asked to back with
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`, before any page is touched). Where
/// it cannot (THP off, not Linux), the table is the same, on ordinary pages.
pub fn huge_table<T: Clone>(n: usize, value: T) -> Box<[T]> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    let addr = v.as_ptr() as usize;
    let bytes = n * std::mem::size_of::<T>();
    // Whole pages inside the allocation only.
    let (start, end) = (addr.next_multiple_of(PAGE), (addr + bytes) & !(PAGE - 1));
    if end >= start + HUGE_PAGE {
        if let Some(p) = NonNull::new(start as *mut c_void) {
            #[allow(unsafe_code)]
            // SAFETY: [start, end) is whole pages inside `v`'s own allocation, which
            // nothing else refers to; MADV_HUGEPAGE changes only how the kernel backs the
            // pages, never their contents, and may fail (then ignored).
            let _ = unsafe { nix::sys::mman::madvise(p, end - start, nix::sys::mman::MmapAdvise::MADV_HUGEPAGE) };
        }
    }
    v.resize(n, value);
    v.into_boxed_slice()
}

/// A table of a power-of-two number of values (at least one), indexed by a hash: the
/// index is the hash's low bits, so it is always in range and a lookup needs no bounds
/// check (a flow cache's slot is read twice a packet, to prefetch and to compare: two
/// checks a packet otherwise, docs/PERFORMANCE.md "IPsec SPD hit: the verdict from the
/// slot"). Backed by [`huge_table`].
pub struct MaskedTable<T> {
    values: Box<[T]>,
    /// `values.len() - 1`, the low bits an index keeps.
    mask: u32,
}

/// A [`MaskedTable`]'s size that is not a power of two from 1 to 2^31.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotPowerOfTwo(pub usize);

impl<T: Clone> MaskedTable<T> {
    /// `n` copies of `value`, `n` a power of two up to 2^31.
    pub fn new(n: usize, value: T) -> Result<Self, NotPowerOfTwo> {
        if !n.is_power_of_two() || n > 1 << 31 {
            return Err(NotPowerOfTwo(n));
        }
        Ok(MaskedTable { values: huge_table(n, value), mask: (n - 1) as u32 })
    }

    /// Every value set to `value`.
    pub fn fill(&mut self, value: T) {
        self.values.fill(value);
    }
}

impl<T> MaskedTable<T> {
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Never: a table has at least one value.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The value `hash`'s low bits name.
    #[inline(always)]
    pub fn get(&self, hash: u32) -> &T {
        let i = (hash & self.mask) as usize;
        debug_assert!(i < self.values.len());
        #[allow(unsafe_code)]
        // SAFETY: `new` made `values` exactly `mask + 1` long and nothing changes its
        // length afterwards, so `hash & mask` is an index inside it.
        unsafe {
            self.values.get_unchecked(i)
        }
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
    fn a_huge_table_holds_its_values() {
        let t = super::huge_table(3 << 20, 7u32);
        assert_eq!(t.len(), 3 << 20);
        assert!(t.iter().all(|&x| x == 7));
        assert_eq!(super::huge_table(0, 1u8).len(), 0);
        assert_eq!(&*super::huge_table(5, [1u64; 2]), &[[1, 1]; 5]);
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
