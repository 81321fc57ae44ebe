//! PFCP (3GPP TS 29.244, the N4/Sxb interface, UDP 8805): the codec and a sans-IO UPF core.
//!
//! - [`header`]: the message header (version, MP/S flags, SEID, sequence number, priority).
//! - [`tlv`]: the raw IE walk (type, length, optional enterprise id) shared by messages
//!   and grouped IEs; [`ie`] the typed leaf IEs; [`grouped`] the grouped ones (Create PDR,
//!   PDI, Forwarding Parameters, Usage Report, …); [`message`] the node and session
//!   messages.
//! - [`upf`]: associations, heartbeats and sessions as a state machine: datagrams and the
//!   time go in, datagrams and dataplane actions come out. No sockets, no clock.
//!
//! Invariants: parsing never panics on any input; every rejection is an [`Error`] that
//! names the Cause to answer with and the offending IE; unknown IEs are skipped (vendor
//! IEs included). Emitting what was parsed parses back to the same value (property tests in
//! `tests/roundtrip.rs`). This is control-plane code: it allocates freely.
#![forbid(unsafe_code)]

pub mod error;
pub mod fuzz;
pub mod grouped;
pub mod header;
pub mod ie;
pub mod message;
pub mod rules;
pub mod tlv;
pub mod upf;

pub use error::{Cause, Error};
pub use header::{Header, MessageType};
pub use message::Message;

/// The PFCP UDP port (TS 29.244 §4.2.1).
pub const PORT: u16 = 8805;
