//! The time-stamp counter: per-node cycle accounting like VPP's `show runtime`.

/// Read the TSC (or a monotonic nanosecond clock where there is none).
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        #[allow(unsafe_code)]
        // SAFETY: RDTSC has no preconditions on x86_64; it only reads a counter.
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// TSC ticks per second, measured once against the monotonic clock (20 ms).
pub fn hz() -> u64 {
    use std::sync::OnceLock;
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        let t0 = std::time::Instant::now();
        let c0 = now();
        while t0.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let c1 = now();
        let ns = t0.elapsed().as_nanos() as u64;
        ((c1 - c0) as u128 * 1_000_000_000 / ns.max(1) as u128) as u64
    })
}
