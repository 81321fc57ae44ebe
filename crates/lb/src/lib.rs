//! The service load balancer: kube-proxy's dataplane as graph nodes.
//!
//! - [`service`]: services (ClusterIP, NodePort, LoadBalancer; TCP, UDP and SCTP; IPv4
//!   and IPv6) and backends with EndpointSlice conditions, validated with errors that name
//!   the field;
//! - [`maglev`]: backend choice by Maglev consistent hashing, a pure function;
//! - [`state`] and [`tables`]: the control plane's services compiled into per-service
//!   tables, one rebuilt per change, published whole;
//! - [`table`] and [`session`]: the per-worker, bounded session table with
//!   protocol-aware ageing and ClientIP affinity, sans-IO (time is a parameter);
//! - [`nat`]: the address and port translation of a packet and of the packet an ICMP
//!   error quotes, checksums patched incrementally;
//! - [`encap`]: the outer headers (IP-in-IP, GRE, GUE) that carry a client's packet to
//!   the backend of a direct-server-return service.
#![forbid(unsafe_code)]

pub mod context;
pub mod encap;
pub mod family;
pub mod fuzz;
pub mod maglev;
pub mod nat;
pub mod nodes;
pub mod service;
pub mod session;
pub mod show;
pub mod state;
pub mod steer;
pub mod table;
pub mod tables;

pub use context::{HasLb, LbContext};
pub use family::{Family, V4, V6};
pub use service::{Affinity, BackendSpec, Conditions, Forwarding, Protocol, ServiceSpec, ServiceType, SpecError, TrafficPolicy};
pub use state::{LbError, LbState};
pub use tables::LbTables;
