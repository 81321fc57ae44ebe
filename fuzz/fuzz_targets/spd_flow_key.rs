#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| spd::nodes::fuzz_flow_key(data));
