//! IPv4/IPv6 forwarding for vecgate: the FIB (a poptrie), adjacencies and neighbours,
//! the control-plane state that builds them, and the graph nodes that use them:
//!
//! ```text
//! <dev>-input → ethernet-input ─┬→ ip4-input → ip4-lookup ─┬→ interface-output
//!                               │                          ├→ ip4-rewrite → interface-output
//!                               │                          ├→ ip4-local (echo, ICMP unreachable)
//!                               │                          └→ ip4-icmp-error → ip4-lookup
//!                               ├→ ip6-input → ip6-lookup → interface-output / ip6-rewrite / ip6-local (echo, ND) / ip6-icmp-error
//!                               ├→ arp-input (reply for own addresses, learn)
//!                               ├→ parcel4-input / parcel6-input (IP parcels, `crates/parcel`)
//!                               └→ gtpuN-input / gueN-input (UDP to a tunnel endpoint, the header
//!                                  checked as ipN-input would: `UdpDemux`; the packets of the
//!                                  tunnel decapsulated last known by one template: `hint`)
//! ```
//!
//! A packet whose header passes `ipN-input`'s fast path goes from `ethernet-input` straight
//! to `ipN-lookup` while no link has an SPD or takes parcels (`ipN-input` would send it
//! there too); an IP parcel goes to `parcelN-input` (the test `ipN-input` would make);
//! `ipN-input` takes the rest. The lookup rewrites a packet whose route
//! resolves to a next hop itself (`nodes::family::rewrite_fast`, the same code as
//! `ipN-rewrite`'s fast path) and sends it to `interface-output`; `ipN-rewrite` takes what
//! needs its general path (an expiring TTL, a packet too big, a neighbour to solicit).
//! So a forwarded packet visits `ethernet-input`, `ipN-lookup` and `interface-output`
//! (docs/PERFORMANCE.md, "Two hops fewer for a forwarded packet").
//!
//! Nodes never lock or allocate per packet; they read the `Tables` version their worker
//! holds and report learned neighbours through a bounded queue.
#![deny(unsafe_code)]

pub mod context;
pub mod fib;
pub mod flow;
pub mod hint;
pub mod hold;
// The lookup walks the arena unchecked (each block says why the index is in range).
#[allow(unsafe_code)]
pub mod lpm;
pub mod mss;
pub mod multipath;
pub mod nodes;
pub mod outer;
pub mod parcel;
pub mod prefix;
pub mod prefix_set;
pub mod punt;
pub mod reassembly;
pub mod state;
pub mod tables;
#[cfg(test)]
mod test_parcels;
pub mod tunnel_counters;
pub mod urpf;

pub use context::{HasIp, IpContext, IpEvent, Limits};
pub use prefix::{IfAddr, Prefix};
pub use prefix_set::PrefixSet;
pub use state::{InterfaceSpec, RouteTarget, RouterState, StateError};
pub use tables::Tables;
