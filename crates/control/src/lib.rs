//! The control plane: never on the packet path.
//!
//! - [`config`]: the TOML configuration, validated whole (file, field and expectation
//!   named in every error) before anything is built;
//! - [`dataplane`]: turns a configuration into router state, published tables and a
//!   worker (graph + devices);
//! - [`api`]: the one typed API (`Request` → `Reply`) that the CLI, the JSON socket and
//!   the config loader all go through;
//! - [`server`]: the Unix-socket server (root-only) speaking line-delimited JSON;
//! - [`format`]: the text tables `show …` prints;
//! - [`metrics`]: the Prometheus (OpenMetrics) endpoint.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod config;
pub mod dataplane;
pub mod fib;
pub mod format;
pub mod fuzz;
pub mod graph_view;
pub mod gtpu;
pub mod interfaces;
pub mod ipsec;
pub mod lb;
pub mod metrics;
pub mod parcel;
pub mod pfcp;
pub mod punt;
pub mod reload;
pub mod server;
pub mod spd;
pub mod udptun;
pub mod validate;

/// The gateway `vecgate run` starts with no configuration file.
pub const DEFAULT_CONFIG: &str = include_str!("../../../docs/examples/default-gateway.toml");
