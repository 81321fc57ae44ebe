//! `CowVec`: an array split into fixed-size chunks shared through `Arc`, so a published
//! table and the control plane's next version share every chunk a change did not touch.
//! Changing one tunnel among a million copies one chunk (a few hundred KiB), not the
//! table, and the workers keep reading the old chunk until they pick up the new version.
//! Reading costs one extra load (the chunk pointer, from a small, hot array).

use std::sync::Arc;

/// Entries per chunk by default (a power of two so the split is a shift and a mask);
/// arrays of larger entries take fewer per chunk (`BITS`), so that a change copies a
/// chunk of about the same bytes.
pub const CHUNK_BITS: u32 = 10;

#[derive(Clone)]
pub struct CowVec<T: Clone, const BITS: u32 = CHUNK_BITS> {
    chunks: Vec<Arc<[T]>>,
    len: usize,
    fill: T,
}

impl<T: Clone, const BITS: u32> CowVec<T, BITS> {
    const CHUNK: usize = 1 << BITS;

    /// An array of `len` copies of `fill`.
    pub fn new(len: usize, fill: T) -> Self {
        let n = len.div_ceil(Self::CHUNK);
        let chunks = (0..n).map(|_| Arc::from(vec![fill.clone(); Self::CHUNK])).collect();
        CowVec { chunks, len, fill }
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
        let c = self.chunks.get_mut(i >> BITS)?;
        Arc::make_mut(c).get_mut(i & (Self::CHUNK - 1))
    }

    /// Grow to `len` entries (new ones are the fill value).
    pub fn resize(&mut self, len: usize) {
        while self.chunks.len() * Self::CHUNK < len {
            self.chunks.push(Arc::from(vec![self.fill.clone(); Self::CHUNK]));
        }
        self.len = self.len.max(len);
    }

    /// Bytes of entry storage (shared chunks counted in full).
    pub fn memory_bytes(&self) -> usize {
        self.chunks.len() * Self::CHUNK * std::mem::size_of::<T>()
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
}
