//! Chained packets at transmit: a head buffer and its extents ([`engine::Pool`]), sent by
//! the kernel-facing devices in pieces (an iovec each, or copied piece by piece into a
//! frame) instead of copied into one buffer first.

use engine::{BufIdx, Offload, Pool};

/// Most iovecs the kernel takes in one message (`UIO_MAXIOV`).
pub const MAX_IOVECS: usize = libc::UIO_MAXIOV as usize;

/// The shortest mean extent a device sends as iovecs of their own: the kernel copies each
/// iovec on its own, and below this a chain of short pieces costs it more than one copy
/// into one buffer here. Measured over veth (docs/PERFORMANCE.md, "Chained parcels sent
/// by gather"): parcels of 1,252-byte extents were sent 5-8% slower gathered, of 1,972-
/// to 8,000-byte extents 10-30% faster.
pub const IOVEC_MIN_EXTENT: usize = 1536;

/// Make chained packet `b` one buffer where sending it in pieces would be wrong,
/// impossible or slower: it has more than `max_parts` pieces (its head included), its
/// extents are shorter than `min_extent` on average, or it has offload work left (a
/// checksum to complete, GSO headers to read), which the devices do over the head's bytes
/// as one slice (the parcel nodes chain no frame with offload work left: kept right
/// rather than fast). Nothing to do for a packet that is not chained.
#[inline]
pub fn flatten_if_needed(pool: &mut Pool, b: BufIdx, max_parts: usize, min_extent: usize) {
    let len = pool.extent_len(b);
    if len == 0 {
        return;
    }
    let extents = pool.extent_parts(b).count();
    if pool.get(b).meta.offload != Offload::default() || 1 + extents > max_parts || len < min_extent * extents {
        pool.linearize(b);
    }
}

/// Append packet `b`'s bytes to `iovs`: its head's, then an iovec per extent where it
/// lies (a packet that is not chained, `chains` false, is its head alone). The iovecs
/// point into the pool: valid while `b` and its extents' buffers are neither written nor
/// freed.
#[inline]
pub fn push_iovecs(pool: &Pool, b: BufIdx, chains: bool, iovs: &mut Vec<libc::iovec>) {
    let data = pool.get(b).bytes();
    iovs.push(libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() });
    if chains {
        for part in pool.extent_parts(b) {
            iovs.push(libc::iovec { iov_base: part.as_ptr() as *mut _, iov_len: part.len() });
        }
    }
}

/// The length of packet `b`: its head's bytes and its extents'.
#[inline]
pub fn packet_len(pool: &Pool, b: BufIdx) -> usize {
    pool.get(b).len() + pool.extent_len(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head of 20 bytes with extents of `lens` bytes, each in a buffer of its own.
    fn chain(pool: &mut Pool, lens: &[usize]) -> BufIdx {
        let head = pool.alloc_head(0, 20, lens.iter().sum()).expect("head");
        for (k, &l) in lens.iter().enumerate() {
            let src = pool.alloc(l).expect("source");
            pool.get_mut(src).write(&vec![k as u8; l]).expect("fits");
            pool.push_extent(head, src, 0..l).expect("extent");
            pool.free(src);
        }
        head
    }

    #[test]
    fn chains_are_flattened_only_when_they_must_be_or_are_cheaper_so() {
        let mut pool = Pool::with_classes(64, 8, 2);
        let cases: [(&[usize], usize, usize, bool); 6] = [
            // (extents, max parts, min mean extent, linearized)
            (&[2000, 2000, 2000], 4, 1536, false),
            (&[2000, 2000, 2000], 3, 1536, true),
            (&[2000, 1000, 1608], 4, 1536, false),
            (&[2000, 1000, 1607], 4, 1536, true),
            (&[64; 10], 11, 0, false),
            (&[64; 10], 11, 65, true),
        ];
        for (lens, max_parts, min_extent, flat) in cases {
            let b = chain(&mut pool, lens);
            let total: usize = lens.iter().sum();
            flatten_if_needed(&mut pool, b, max_parts, min_extent);
            assert_eq!(pool.extent_len(b) == 0, flat, "{lens:?} max {max_parts} min {min_extent}");
            assert_eq!(packet_len(&pool, b), 20 + total);
            pool.free(b);
            assert_eq!((pool.in_use(), pool.has_chains()), (0, false));
        }
        // Offload work left: made one buffer whatever its extents.
        let b = chain(&mut pool, &[4000, 4000]);
        pool.get_mut(b).meta.offload.gso = engine::GsoKind::UdpL4;
        flatten_if_needed(&mut pool, b, 8, 0);
        assert_eq!(pool.extent_len(b), 0);
        pool.free(b);
        // Not chained: nothing to do.
        let b = pool.alloc(100).expect("buffer");
        pool.get_mut(b).write(&[7; 100]).expect("fits");
        pool.get_mut(b).meta.offload.csum_start = 30;
        flatten_if_needed(&mut pool, b, 1, usize::MAX / 2);
        assert_eq!(packet_len(&pool, b), 100);
        pool.free(b);
    }
}
