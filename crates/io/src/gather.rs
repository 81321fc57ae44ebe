//! Chained packets at transmit: a head buffer and its extents ([`engine::Pool`]), sent by
//! the kernel-facing devices in pieces (an iovec each, or copied piece by piece into a
//! frame) instead of copied into one buffer first.

use engine::{BufIdx, Offload, Pool};

/// Most iovecs the kernel takes in one message (`UIO_MAXIOV`).
pub const MAX_IOVECS: usize = libc::UIO_MAXIOV as usize;

/// Make chained packet `b` one buffer where sending it in pieces would be wrong or
/// impossible: it has more than `max_parts` pieces (its head included), or offload work
/// left (a checksum to complete, GSO headers to read), which the devices do over the
/// head's bytes as one slice. Neither arises from the parcel nodes (the join chains no
/// frame with offload work left); both are kept right rather than fast. Nothing to do
/// for a packet that is not chained.
#[inline]
pub fn flatten_if_needed(pool: &mut Pool, b: BufIdx, max_parts: usize) {
    if pool.extent_len(b) == 0 {
        return;
    }
    if pool.get(b).meta.offload != Offload::default() || 1 + pool.extent_parts(b).count() > max_parts {
        pool.linearize(b);
    }
}

/// The length of packet `b`: its head's bytes and its extents'.
#[inline]
pub fn packet_len(pool: &Pool, b: BufIdx) -> usize {
    pool.get(b).len() + pool.extent_len(b)
}
