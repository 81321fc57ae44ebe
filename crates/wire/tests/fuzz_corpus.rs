//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`) through the same target
//! bodies cargo-fuzz runs, on stable Rust, so every seed keeps passing its invariants.

#[test]
fn corpus_replays_cleanly() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut total = 0;
    for (name, target) in wire::fuzz::TARGETS {
        let dir = root.join(name);
        let entries: Vec<_> = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).collect();
        assert!(!entries.is_empty(), "no seeds for {name}");
        for e in entries {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            target(&data);
            total += 1;
        }
    }
    assert!(total >= 8);
}

#[test]
fn targets_survive_every_short_input() {
    // Every length up to 64 of a few byte patterns: the truncation edges.
    for (_, target) in wire::fuzz::TARGETS {
        for fill in [0x00u8, 0xff, 0x45, 0x60] {
            for len in 0..64 {
                target(&vec![fill; len]);
            }
        }
    }
}
