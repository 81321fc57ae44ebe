//! The load balancer's Kubernetes controller (`vecgate k8s`): watches Services and
//! EndpointSlices and programs a running gateway through its typed API, the smallest
//! change per event.
//!
//! - [`objects`]: the parts of a Service and an EndpointSlice the LB reads, checked once
//!   (an object that does not pass is refused by name and field);
//! - [`desired`]: one Service and its slices → the LB services it makes (a pure function);
//! - [`model`]: the sans-IO core: objects seen, LB services applied, and the diff between
//!   them as typed requests (one endpoint changed = one backend request);
//! - [`controller`]: the watchers and the socket around the model;
//! - [`health`]: the node's health checks answered as kube-proxy answers them (each
//!   `healthCheckNodePort`, and `/healthz` on 10256);
//! - [`fuzz`]: the `k8s_objects` fuzz target's body (watch events → requests);
//! - [`punt`]: `--punt-health-ports`, the health check ports punted to this host by the
//!   gateway while their listeners are open.
#![forbid(unsafe_code)]

pub mod controller;
pub mod desired;
pub mod fuzz;
pub mod health;
pub mod model;
pub mod objects;
pub mod punt;

pub use controller::{Options, Stats};
pub use desired::Settings;
pub use model::{Change, Model};
