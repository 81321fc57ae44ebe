//! The k8s crate's integration tests as one binary, each file of this directory a module
//! (one link of the workspace instead of one a file; see crates/control/tests/main.rs).

mod fuzz_corpus;
mod mapping;
mod topology;
