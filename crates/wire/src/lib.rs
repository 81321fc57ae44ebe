//! Zero-copy views over packet bytes, and parsed representations that emit them.
//!
//! Every protocol module follows one shape (after smoltcp's `wire`):
//! - a view `Foo<T: AsRef<[u8]>>` whose only public constructor for untrusted bytes is
//!   `Foo::new_checked`, which proves that every fixed field the getters read is in bounds
//!   and that the header's own length fields are consistent with the buffer;
//! - a `FooRepr` with `parse(&view)`, `emit(&mut view)` and `buffer_len()`;
//! - a small `Copy` error enum that says *why* the bytes were refused; nodes map each
//!   variant one-to-one to a named drop counter.
//!
//! Invariants: nothing on the packet path here allocates, does I/O, or panics on any
//! input (the `fuzz` module is test support and may allocate and assert). Getters
//! on a view built by `new_checked` index within the checked range; `new_unchecked` is
//! for buffers this process just emitted or sized itself.
//!
//! Byte order: all multi-byte fields are big-endian on the wire; getters return host
//! values.
// `unsafe` is denied except for the one measured hot spot: calling the AVX2 build of the
// checksum loop after runtime feature detection (see `checksum.rs`).
#![deny(unsafe_code)]

pub mod arp;
pub mod checksum;
pub mod esp;
pub mod ethernet;
pub mod fuzz;
pub mod gre;
pub mod gtpu;
pub mod gue;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6_ext;
pub mod parcel;
pub mod sctp;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use ethernet::{EtherType, EthernetAddress};
pub use ip::IpProtocol;

/// Read a big-endian u16 at `at`. Callers have checked the range.
#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Read a big-endian u32 at `at`. Callers have checked the range.
#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline(always)]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
