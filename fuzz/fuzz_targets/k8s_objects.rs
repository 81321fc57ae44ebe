#![no_main]
// See k8s::fuzz.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    k8s::fuzz::run(data);
});
