#![no_main]
// Frames through a whole worker, one dataplane kept across inputs (see control::fuzz::graph).
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzz::graph::run(data));
