//! Software prefetch: ask the CPU to start loading a cache line the code will read soon,
//! so the misses of independent packets in a vector overlap instead of queueing. Used
//! only where a benchmark shows the gain (table lookups with more entries than cache).

/// Start loading the cache line holding `*r` into all cache levels.
#[inline(always)]
pub fn read<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        #[allow(unsafe_code)]
        // SAFETY: PREFETCHT0 is part of SSE, which every x86_64 CPU has; it is a hint that
        // never faults and never changes memory, and `r` is a valid reference anyway.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(r as *const T as *const i8)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
