#![no_main]
// See control::fuzz::api.
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzz::api::run(data));
