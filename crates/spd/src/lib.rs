//! The IPsec security policy database (RFC 4301 §4.4.1): which packets a gateway
//! protects, lets through in the clear, or discards, decided per flow.
//!
//! - [`policy`]: policies (priority, selectors, action) and their validated builder.
//! - [`classifier`]: the miss path, a tuple-space search whose cost follows the number
//!   of distinct selector shapes, not the number of policies; it returns exactly what a
//!   priority-ordered linear scan returns ([`classifier::linear`], property-tested).
//! - [`flow_cache`]: a fixed-size, per-worker cache of decisions that overwrites on
//!   collision and is invalidated in O(1) by the version stamped in each entry.
//! - [`changes`]: which classes of keys each policy change touched, so that an entry
//!   stamped before a change that cannot match it is used (and restamped), not re-decided.
//! - [`tables`] / [`state`]: SPDs and interface bindings, built on the control plane and
//!   published whole (ArcSwap), each publication a new version.
//! - [`nodes`]: `ipsec4-output` / `ipsec6-output` (the outbound SPD as an output feature),
//!   `ipsec4-input` / `ipsec6-input` (the inbound SPD for plain packets) and
//!   `ipsec4-decrypted` / `ipsec6-decrypted` (the inbound SPD for decrypted ones).
//!
//! Wiring into the dataplane, all by the IP tables' `spd_links` mask (set by the control
//! plane from [`SpdState::bindings`]: one load and one predictable branch for every
//! packet while no SPD is bound anywhere):
//! - `ip4-lookup` / `ip6-lookup` send a packet whose adjacency leaves by an interface
//!   with an SPD to `ipsecN-output`; PROTECT goes on to the ESP crate's `espN-encrypt`
//!   with the SA index in `meta.param`.
//! - `ip4-input` / `ip6-input` send every packet that arrived on an interface with an
//!   SPD to `ipsecN-input` (and `ethernet-input` then skips its tunnel-endpoint
//!   shortcut): plain packets must match BYPASS; ESP and ESP in UDP go on to the lookup
//!   and the decrypt nodes.
//! - `espN-decrypt` sends what it opened from such an interface to `ipsecN-decrypted`
//!   with the inbound SA's index in `meta.param`: it must match PROTECT with that SA.
//!
//! Not covered: IP parcels (`parcelN-input`) and IPv6 multicast go on without the
//! inbound SPD; IPv6 neighbour discovery passes it (see [`nodes::SpdFamily::link_control`]).
//!
//! Invariants: a cached decision is used only while the version it was stamped with is
//! the version of the tables the worker holds, or an older one that no rule added or
//! deleted since can match (so its decision is the current policy set's), so no packet is
//! ever matched against a policy set other than the current one; nodes never allocate, lock or panic per packet.
#![forbid(unsafe_code)]

pub mod changes;
pub mod classifier;
pub mod context;
pub mod flow_cache;
pub mod nodes;
pub mod policy;
pub mod state;
pub mod tables;

pub use changes::Changes;
pub use classifier::TupleSpace;
pub use context::{HasSpd, SpdContext};
pub use flow_cache::{FlowCache, FlowCacheStats};
pub use policy::{Action, Decision, Direction, FlowKey, Policy, PolicyError, PolicyId, PolicySpec, Rule, SaId, SpdAddr, SpdId};
pub use state::{SpdError, SpdState};
pub use tables::SpdTables;
