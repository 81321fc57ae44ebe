#![no_main]
// See control::fuzz::config.
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzz::config::run(data));
