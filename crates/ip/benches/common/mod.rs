//! What the crate's benches share (each bench is its own crate: `mod common;`).

/// A xorshift64* generator: reproducible inputs without a dependency, the same in
/// every run so that runs compare.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
