#![no_main]
// The graph target's frames through the same gateway with services that keep the client's
// address, so forwarded packets pass the load balancer (see control::fuzz::graph::run_local).
libfuzzer_sys::fuzz_target!(|data: &[u8]| control::fuzz::graph::run_local(data));
