//! I/O backends behind `engine::device::Device`.
//!
//! - [`af_packet`]: a Linux packet socket (TPACKET_V3 receive ring, batched transmit,
//!   virtio-net headers for checksum and segmentation offload).
//! - [`tap`]: a TAP device with virtio-net headers, the host stack as a neighbour.
//! - [`pg`]: the packet generator; [`pcap`]: pcap files as an interface's receive and
//!   transmit sides; [`null`]: a sink; [`mem`]: frames from and to memory (tests, fuzzing).
//! - [`gather`]: when a chained packet (a head and its extents) is sent from its pieces
//!   and when it is made one buffer first; af_packet, tap, af_xdp and pcap take chains.
//!
//! Backends move bytes; they hold no protocol logic (the generator builds its template
//! packets once, at configuration time, with the wire library's emitters). `unsafe` lives
//! only in the kernel-facing backends ([`linux`], [`af_packet`], [`tap`]), each block with a
//! `SAFETY` note.
#![deny(unsafe_op_in_unsafe_fn)]

/// A backend's named counters: a `Stats` struct of `u64` fields and the list
/// `Device::counters` reports, each field under its displayed name.
macro_rules! device_counters {
    ($($field:ident = $name:literal),+ $(,)?) => {
        #[derive(Debug, Default, Clone)]
        struct Stats { $($field: u64),+ }
        impl Stats {
            fn list(&self) -> Vec<(&'static str, u64)> { vec![$(($name, self.$field)),+] }
        }
    };
}

pub mod af_packet;
pub mod af_xdp;
pub mod gather;
pub mod linux;
pub mod mem;
pub mod null;
pub mod pcap;
pub mod pg;
pub mod tap;
pub mod vnet;
