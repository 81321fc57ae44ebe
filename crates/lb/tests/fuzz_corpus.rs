//! Replays the committed `lb_nat` fuzz corpus (`fuzz/corpus/lb_nat/*`, packets scapy
//! built: `fuzz/make_lb_corpus.py`) through the target body cargo-fuzz runs, and every
//! short input of a few fills (the truncation edges).

#[test]
fn corpus_replays_cleanly() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/lb_nat");
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).collect();
    assert!(entries.len() >= 6, "seeds missing in {}", dir.display());
    for e in entries {
        lb::fuzz::nat(&std::fs::read(e.unwrap().path()).unwrap());
    }
}

#[test]
fn short_inputs_are_survived() {
    for fill in [0x00u8, 0xff, 0x45, 0x60, 0x06, 0x11] {
        for len in 0..100 {
            lb::fuzz::nat(&vec![fill; len]);
        }
    }
}
