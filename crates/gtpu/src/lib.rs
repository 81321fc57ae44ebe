//! GTP-U (3GPP TS 29.281) tunnel gateway for vecgate: the user plane of a 5G UPF or 4G
//! SGW-U on N3/N9/S1-U.
//!
//! ```text
//! ethernet-input ─(UDP 2152 to an endpoint)→ gtpu4-input ─→ ip4-lookup / ip6-lookup (inner)
//! ip4-local ─(UDP 2152)──────────────↗        └─→ ip4-lookup (echo response, error indication)
//! ip4-lookup ─(route into a tunnel)→ gtpu4-encap ─→ ip4-rewrite (the tunnel's adjacency)
//! ```
//! and the same for IPv6 outer headers (`gtpu6-*`). Tunnels are FIB interfaces
//! (`gtpu_tunnel<id>`): a route, or the tunnel's UE prefix, sends inner traffic into
//! them; the FIB value itself names the tunnel, so a million UE routes need no
//! adjacencies. Tables are built by [`state::GtpuState`] and published like the IP
//! tables; the dataplane tables share unchanged chunks between versions ([`cow`]).
#![forbid(unsafe_code)]

pub mod context;
pub mod messages;
pub mod nodes;
pub mod state;
pub mod tables;
pub mod teid_table;
pub mod tunnel;

pub use context::{GtpuContext, GtpuEvent, HasGtpu};
pub use state::{GtpuError, GtpuState, TunnelChange};
pub use tables::{GtpuTables, Techniques};
pub use tunnel::{ChecksumMode, DecapNext, Dscp, PduDirection, SrcPort, Tunnel, TunnelSpec};
