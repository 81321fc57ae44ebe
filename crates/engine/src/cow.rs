//! `CowVec`: an array split into fixed-size chunks shared through `Arc`, so a published
//! table and the control plane's next version share every chunk a change did not touch.
//! Changing one tunnel among a million copies one chunk (a few hundred KiB), not the
//! table, and the workers keep reading the old chunk until they pick up the new version.
//! Reading costs one extra load (the chunk pointer, from a small, hot array).
//!
//! A chunk is stored as [`ChunkStore`] says: a plain `Arc<[T]>` (the default), or
//! [`SharedLines`] when each value must start on a cache line (the UPF's records).

use crate::mem::SharedLines;
use std::sync::Arc;

/// Entries per chunk by default (a power of two so the split is a shift and a mask);
/// arrays of larger entries take fewer per chunk (`BITS`), so that a change copies a
/// chunk of about the same bytes.
pub const CHUNK_BITS: u32 = 10;

/// Storage of one chunk, shared between versions and copied on the first change.
pub trait ChunkStore<T>: Clone {
    /// `n` copies of `fill`.
    fn filled(n: usize, fill: &T) -> Self;
    fn get(&self, i: usize) -> Option<&T>;
    /// Entry `i` to change, after copying the chunk if another version shares it.
    fn get_mut(&mut self, i: usize) -> Option<&mut T>;
    fn memory_bytes(&self) -> usize;
}

impl<T: Clone> ChunkStore<T> for Arc<[T]> {
    fn filled(n: usize, fill: &T) -> Self {
        Arc::from(vec![fill.clone(); n])
    }

    #[inline(always)]
    fn get(&self, i: usize) -> Option<&T> {
        <[T]>::get(self, i)
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        Arc::make_mut(self).get_mut(i)
    }

    fn memory_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }
}

impl<T: Copy> ChunkStore<T> for SharedLines<T> {
    fn filled(n: usize, fill: &T) -> Self {
        SharedLines::new(n, *fill)
    }

    #[inline(always)]
    fn get(&self, i: usize) -> Option<&T> {
        SharedLines::get(self, i)
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        SharedLines::get_mut(self, i)
    }

    fn memory_bytes(&self) -> usize {
        SharedLines::memory_bytes(self)
    }
}

#[derive(Clone)]
pub struct CowVec<T: Clone, const BITS: u32 = CHUNK_BITS, C: ChunkStore<T> = Arc<[T]>> {
    chunks: Vec<C>,
    len: usize,
    fill: T,
}

/// Empty, filling with `T::default()` when grown.
impl<T: Clone + Default, const BITS: u32, C: ChunkStore<T>> Default for CowVec<T, BITS, C> {
    fn default() -> Self {
        CowVec::new(0, T::default())
    }
}

impl<T: Clone, const BITS: u32, C: ChunkStore<T>> CowVec<T, BITS, C> {
    const CHUNK: usize = 1 << BITS;

    /// An array of `len` copies of `fill`.
    pub fn new(len: usize, fill: T) -> Self {
        let mut a = CowVec { chunks: Vec::new(), len: 0, fill };
        a.resize(len);
        a
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        self.chunks.get(i >> BITS).and_then(|c| c.get(i & (Self::CHUNK - 1)))
    }

    /// Mutable access to entry `i`, copying its chunk first if a published version
    /// shares it.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        self.chunks.get_mut(i >> BITS)?.get_mut(i & (Self::CHUNK - 1))
    }

    /// Grow to `len` entries (new ones are the fill value).
    pub fn resize(&mut self, len: usize) {
        while self.chunks.len() * Self::CHUNK < len {
            self.chunks.push(C::filled(Self::CHUNK, &self.fill));
        }
        self.len = self.len.max(len);
    }

    /// Bytes of entry storage (shared chunks counted in full).
    pub fn memory_bytes(&self) -> usize {
        self.chunks.iter().map(C::memory_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_copy_only_the_touched_chunk() {
        let mut a = CowVec::<u32>::new(5000, 0u32);
        let published = a.clone();
        *a.get_mut(4500).unwrap() = 7;
        assert_eq!(published.get(4500), Some(&0));
        assert_eq!(a.get(4500), Some(&7));
        // Chunks 0..4 are still shared, chunk 4 is not.
        for c in 0..4 {
            assert!(Arc::ptr_eq(&a.chunks[c], &published.chunks[c]));
        }
        assert!(!Arc::ptr_eq(&a.chunks[4], &published.chunks[4]));
        assert_eq!(a.get(5000), None);
        a.resize(9000);
        assert_eq!(a.get(8999), Some(&0));
    }

    #[test]
    fn smaller_chunks_split_the_same_way() {
        let mut a = CowVec::<u64, 4>::new(40, 0);
        assert_eq!(a.chunks.len(), 3);
        let published = a.clone();
        *a.get_mut(17).unwrap() = 5;
        assert_eq!((a.get(17), published.get(17), a.get(16), a.get(40)), (Some(&5), Some(&0), Some(&0), None));
        assert!(Arc::ptr_eq(&a.chunks[0], &published.chunks[0]) && Arc::ptr_eq(&a.chunks[2], &published.chunks[2]));
        assert!(!Arc::ptr_eq(&a.chunks[1], &published.chunks[1]));
        assert_eq!(a.memory_bytes(), 3 * 16 * 8);
    }

    #[test]
    fn line_chunks_start_each_value_on_a_line() {
        let mut a = CowVec::<[u64; 8], 2, SharedLines<[u64; 8]>>::new(10, [1; 8]);
        let published = a.clone();
        a.get_mut(9).unwrap()[3] = 4;
        for i in 0..10 {
            assert_eq!(a.get(i).unwrap() as *const _ as usize % crate::mem::LINE, 0);
        }
        assert_eq!((a.get(9).unwrap()[3], published.get(9).unwrap()[3], a.get(10)), (4, 1, None));
        assert_eq!(a.chunks.len(), 3);
    }
}
