#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| upf::fuzz::session_tables(data));
