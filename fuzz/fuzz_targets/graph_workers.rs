#![no_main]
// The graph target's frames through two workers with handoff lanes between them (see
// control::fuzz::graph::run_workers).
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzz::graph::run_workers(data));
