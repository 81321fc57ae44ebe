//! Replays the committed corpus of the `spd_flow_key` fuzz target (scapy seeds,
//! `fuzz/make_spd_corpus.py`, and what the campaign grew) through the same body cargo-fuzz
//! runs, on stable Rust.

#[test]
fn corpus_replays_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/spd_flow_key");
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).collect();
    assert!(entries.len() >= 16, "the scapy seeds are there");
    for e in entries {
        spd::nodes::fuzz_flow_key(&std::fs::read(e.unwrap().path()).unwrap());
    }
}

/// Every seed truncated at every length: the selector reader meets each header cut short.
#[test]
fn every_truncation_of_the_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/spd_flow_key");
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with("seed-") {
            let data = std::fs::read(p).unwrap();
            for n in 0..data.len() {
                spd::nodes::fuzz_flow_key(&data[..n]);
            }
        }
    }
}
