#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::fuzz::sctp(data));
