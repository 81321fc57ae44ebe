//! The user plane of a 5G UPF: PFCP sessions' rules as the workers read them, and the
//! nodes that apply them.
//!
//! ```text
//! gtpuN-input ─(G-PDU, TEID of no tunnel)→ upfN-uplink ─→ ip4-input / ip6-input (inner, N6)
//!                                                     └→ ip4-lookup / ip6-lookup (re-encapsulated, N9)
//! ipN-lookup ─(a UE pool route)→ upfN-downlink ─→ ip4-lookup / ip6-lookup (GTP-U toward the gNB)
//! ```
//! `upf4-uplink`/`upf6-uplink` are named for the outer (N3) family, `upf4-downlink`/
//! `upf6-downlink` for the UE's. A session never touches the FIB: one route per UE pool
//! sends downlink traffic to `upfN-downlink`, which finds the session by the UE address.
//!
//! Invariants:
//! - Tables ([`tables::UpfTables`]) are immutable once published. Sessions sit in a
//!   chunked copy-on-write array and the lookups are gtpu's copy-on-write TEID tables,
//!   so a session change copies a few chunks, never the whole table.
//! - A packet is matched against its session's PDRs for its direction in precedence
//!   order (the first match wins); what the matched PDR's QER, URR and FAR say is
//!   applied in that order. Every drop has its own counter ([`nodes::UpfCounter`]).
//! - A session whose first PDR of a direction matches every packet its key finds has that
//!   direction resolved ahead of the packets into a 64-byte [`tables::Record`] beside the
//!   session, built from the compiled rules on every install: the nodes read it instead
//!   of matching, with the same verdicts and counts (a differential property test in
//!   `tests/nodes.rs`); other sessions take the full match.
//! - Usage (URR volumes) is counted per worker in cells the control plane sums
//!   ([`context::UsageCells`]). The MBR is one token bucket per QER and direction that
//!   every worker takes from with a compare-and-swap, no lock ([`context::Policer`]): a
//!   QER gets its whole MBR however many workers its packets reach, one or several. A
//!   packet's cost divides by the MBR through a reciprocal made with the rules
//!   ([`mbr::Divisor`], exact: no division on the packet path).
#![forbid(unsafe_code)]

pub mod buffering;
pub mod context;
pub mod fuzz;
pub mod mbr;
pub mod nodes;
pub mod sdf;
pub mod session;
pub mod tables;

pub use context::{HasUpf, UpfContext, UpfEvent, UsageCells};
pub use tables::{Forward, OuterHeader, QerRef, Rule, Session, UeMatch, UpfTables, UrrRef};
