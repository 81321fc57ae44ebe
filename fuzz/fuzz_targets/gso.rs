#![no_main]
// A vnet header and a frame: UDP GSO frames to parcels and parcels to GSO frames (see control::fuzz::gso).
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzz::gso::run(data));
