//! IPsec ESP (RFC 4303) for vecgate: security associations, their algorithms and
//! sequence state, and the nodes that encrypt and decrypt tunnel-mode ESP over IPv4 and
//! IPv6 outer headers, optionally in UDP (RFC 3948).
//!
//! Invariants:
//! - keys are expanded once per SA ([`crypto::Transform`]); a packet is sealed and
//!   opened in place, without allocation;
//! - an outbound SA never reuses or wraps a sequence number ([`sa::Outbound`]), across
//!   workers and table versions;
//! - the anti-replay window moves only for packets whose ICV verified ([`replay`]).
//!
//! AES-GCM runs on Intel's IPsec Multi-Buffer library where the crate was built with it
//! (build.rs; `ipsec_mb`) and the CPU has AES-NI, on `ring` otherwise;
//! [`crypto::aes_gcm_backend`] names the one in use.
// `unsafe` only in the glue to intel-ipsec-mb's C API.
#![deny(unsafe_code)]

pub mod crypto;
#[cfg(vecgate_ipsec_mb)]
#[allow(unsafe_code)]
pub mod ipsec_mb;
pub mod pmtu;
pub mod replay;
pub mod sa;

pub use crypto::{Algorithm, Transform};
pub use sa::{Direction, Lifetime, Mode, Sa, SaSpec, UdpEncapPorts};
pub mod context;
pub mod nodes;
pub mod state;
pub mod tables;

pub use context::{HasIpsec, IpsecContext};
pub use state::{IpsecError, IpsecState};
pub use tables::IpsecTables;
