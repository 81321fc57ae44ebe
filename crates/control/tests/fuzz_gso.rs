//! Replays the `gso` fuzz target's corpus (`fuzz/corpus/gso`: seeds scapy and
//! tests/parcelpkt.py built, `fuzz/make_gso_corpus.py`, and what campaigns added) through
//! the body cargo-fuzz runs (`control::fuzz::gso`), on stable Rust.

use control::fuzz::gso::{exercise, Taken};
use std::path::Path;

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/gso");
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).map(|e| e.unwrap().path()).collect();
    files.sort();
    files.into_iter().map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())).collect()
}

#[test]
fn gso_corpus_replays_cleanly() {
    let inputs = corpus();
    assert!(inputs.len() >= 13, "the scapy seeds are there");
    for (name, data) in &inputs {
        eprintln!("{name}");
        exercise(data);
    }
}

/// Each seed takes the way it was written for (if the seeds and the code drift apart,
/// fuzzing starts from nowhere).
#[test]
fn gso_seeds_take_their_conversions() {
    let want = |name: &str| match name {
        n if n.ends_with("-to-parcels") || n.contains("parcels-of") || n.contains("bound-") => Taken::GsoToParcels,
        n if n.ends_with("-to-gso") || n.ends_with("short-last") => Taken::ParcelToGso,
        _ => Taken::Neither,
    };
    for (name, data) in corpus().iter().filter(|(n, _)| n.starts_with("seed-")) {
        assert_eq!(exercise(data), want(name), "{name}");
    }
}
