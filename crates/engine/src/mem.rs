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

#[cfg(test)]
mod tests {
    #[test]
    fn a_huge_table_holds_its_values() {
        let t = super::huge_table(3 << 20, 7u32);
        assert_eq!(t.len(), 3 << 20);
        assert!(t.iter().all(|&x| x == 7));
        assert_eq!(super::huge_table(0, 1u8).len(), 0);
        assert_eq!(&*super::huge_table(5, [1u64; 2]), &[[1, 1]; 5]);
    }
}
