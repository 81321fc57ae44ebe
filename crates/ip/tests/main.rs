//! The ip crate's integration tests as one binary, each file of this directory a module
//! (one link of the workspace instead of one a file; see crates/control/tests/main.rs).

mod bulk_load;
mod common;
mod multipath;
mod urpf;
