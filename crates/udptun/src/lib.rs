//! UDP tunnels: packets of any IP version carried in UDP, so that devices on the path
//! hash the outer 5-tuple for ECMP and RSS (the source port is a hash of the inner
//! flow). Three encapsulations, each interoperable with Linux's `fou`:
//!
//! - **GUE** (draft-ietf-intarea-gue): a variant 0 header naming the inner protocol
//!   (`ip fou add port P gue` with an `ipip`/`sit` link using `encap gue`);
//! - **GRE-in-UDP** (RFC 8086): a GRE header naming the inner EtherType, with an
//!   optional key (`ip fou add port P ipproto 47` with a `gre` link using `encap fou`);
//! - **direct**: the inner IPv4 or IPv6 packet right after UDP (GUE variant 1, or
//!   `ip fou add port P ipproto 4`).
//!
//! ```text
//! ethernet-input ─(UDP to a tunnel endpoint and port)→ gue4-input ─→ ip4-lookup / ip6-lookup (inner)
//! ip4-local ─(UDP to a tunnel port)──────────────────↗
//! ip4-lookup ─(route into udp_tunnelN)→ gue4-encap ─→ ip4-lookup (outer)
//! ```
//! and the same over IPv6 outer headers (`gue6-*`). Tunnels are FIB interfaces
//! (`udp_tunnel<id>`); tables are built by [`state::UdpTunState`] and published like
//! the IP tables.
#![forbid(unsafe_code)]

pub mod context;
pub mod nodes;
pub mod state;
pub mod tables;
pub mod tunnel;

pub use context::{HasUdpTun, UdpTunContext, UdpTunEvent};
pub use ip::outer::tos::Dscp;
pub use state::{UdpTunError, UdpTunState, UdpTunnelChange};
pub use tables::UdpTunTables;
pub use tunnel::{Encap, Tunnel, UdpTunnelSpec};
