//! Bodies of the fuzz targets that reach past the wire parsers (the `fuzz/` crate's
//! `graph`, `config`, `api` and `gso` targets). They live here so the stable test suite replays
//! the committed corpus (`fuzz/corpus/<target>`) through exactly the code cargo-fuzz runs
//! (`crates/control/tests/fuzz_corpus.rs`). Each checks invariants, not only the absence
//! of a panic. Not on the product path.

pub mod api;
pub mod config;
pub mod graph;
pub mod gso;
pub mod upf_sessions;
