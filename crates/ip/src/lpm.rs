//! Longest-prefix match: a poptrie (Asai & Ohara, SIGCOMM 2015) over IPv4 or IPv6 keys.
//!
//! Layout: a direct-indexed table on the top `DIRECT_BITS` bits, then nodes of 64
//! slots (6-bit strides). A node keeps two bitmaps instead of 64 pointers: `children`
//! marks slots that continue into a child node, `leaf_runs` marks slots where a new run
//! of equal leaf values starts. Children and leaves of a node are stored contiguously,
//! so the index of slot `v`'s child or leaf is a base plus a popcount. A node is 24
//! bytes; a route set of a million prefixes compiles to tens of MB and a lookup touches
//! one direct entry and one node per 6 bits past the direct table.
//!
//! The direct table is cut into chunks of plain-word slots and every direct slot's
//! longer routes form a subtrie of their own in an arena of pages (indices, not
//! pointers): a route change recompiles the one subtrie it touches into the arena's
//! open page and copies the slot's chunk, and the clone the workers hold keeps sharing
//! the rest (see [`Poptrie`]). Values are non-zero words (adjacency indices, tagged
//! tunnel and ECMP group references); 0 means no route.
//!
//! A slot whose longer routes are all at most `DIRECT_BITS + PLY_BITS` long (an IPv4 /16
//! holding /17s to /24s, the usual BGP shape) gets a **ply** instead of a subtrie: 256
//! values indexed by the key's next 8 bits, as VPP's mtrie 16-8-8, so its lookup is
//! chunk → slot → ply value, with no node to walk. Plies live in the same arena, in
//! pages of their own shape (see [`Poptrie::place`]), and change the same way.
//!
//! For IPv6 the same shape goes deeper: a slot whose routes fit in at most
//! [`LpmKey::MAX_PLIES`] plies gets a **ply trie**, plies of 8 bits whose entries are a
//! value or the offset of a child ply, below up to three 8-bit levels every route
//! shares (skipped, their bits kept beside the first ply). A /48 under 2001:db8::/32 is
//! then chunk → slot → two plies, a /64 four: one load a level, no popcount, where a
//! subtrie walks a node a 6 bits. A dense /16 (the hundreds of routes of a BGP table's)
//! passes the limit and keeps its subtrie, so memory and the update path stay as they
//! were there; a sparse one's change repaints its plies whole (at most 32 KiB).

use std::marker::PhantomData;
use std::sync::Arc;

pub const DIRECT_BITS: u8 = 16;
pub const STRIDE: u8 = 6;
/// Table size above which batched lookups pay (roughly the L2 cache).
const BATCH_ABOVE_BYTES: usize = 2 << 20;

/// An address usable as a trie key.
pub trait LpmKey: Copy + Ord + Eq + std::hash::Hash + Send + Sync + 'static + std::fmt::Debug {
    const BITS: u8;
    /// `width` bits of the key starting `depth` bits from the top, zero-padded past the
    /// end of the key.
    fn stride(self, depth: u8, width: u8) -> usize;
    /// The key with all bits after the first `len` cleared.
    fn masked(self, len: u8) -> Self;
    /// The key folded to 64 bits, for hashing.
    fn fold64(self) -> u64;
    /// The key as stored in a hash slot: a `u128` as two `u64`s, so a slot of key and
    /// value takes 24 bytes rather than the 32 that `u128`'s 16-byte alignment forces.
    type Packed: Copy + Eq + Default + Send + Sync + 'static;
    fn pack(self) -> Self::Packed;
    fn unpack(p: Self::Packed) -> Self;
    /// The key with every bit after the first `len` set: the last key of that prefix.
    fn last(self, len: u8) -> Self;
    /// The key shifted left by `n` (< `BITS`) bits, zeros coming in: a lookup walks the
    /// key by shifting it a stride at a time and reading its top bits, where
    /// [`LpmKey::stride`] would pay a variable (for `u128`, multi-word) shift per level.
    fn shl(self, n: u8) -> Self;
    /// The top `width` (1..=24) bits of the key.
    fn top(self, width: u8) -> usize;
    /// Most plies a direct slot's ply trie may take (see [`Poptrie`]): 1 for IPv4, whose
    /// /16s holding routes of at most /24 get one ply (VPP's 16-8) and the rest a
    /// subtrie; more for IPv6, whose sparse /16s' few long routes get a ply trie.
    const MAX_PLIES: usize;
    /// Most `PLY_BITS` levels a ply trie skips at its root (at most 3).
    const MAX_PLY_SKIP: u8;
}

impl LpmKey for u32 {
    const BITS: u8 = 32;
    const MAX_PLIES: usize = 1;
    const MAX_PLY_SKIP: u8 = 0;
    type Packed = u32;
    #[inline(always)]
    fn pack(self) -> u32 {
        self
    }
    #[inline(always)]
    fn unpack(p: u32) -> u32 {
        p
    }
    fn last(self, len: u8) -> u32 {
        self | u32::MAX.checked_shr(len as u32).unwrap_or(0)
    }
    #[inline(always)]
    fn shl(self, n: u8) -> u32 {
        self << n
    }
    #[inline(always)]
    fn top(self, width: u8) -> usize {
        (self >> (32 - width)) as usize
    }
    #[inline(always)]
    fn fold64(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn stride(self, depth: u8, width: u8) -> usize {
        ((((self as u64) << 32) << depth) >> (64 - width)) as usize
    }
    #[inline(always)]
    fn masked(self, len: u8) -> Self {
        if len == 0 {
            0
        } else {
            self & (u32::MAX << (32 - len))
        }
    }
}

impl LpmKey for u128 {
    const BITS: u8 = 128;
    /// 32 KiB at most per /16; the bench's small table (2001::/16 with /40s, /48s, /64s
    /// and the gateway's own /128s) takes 25.
    const MAX_PLIES: usize = 32;
    const MAX_PLY_SKIP: u8 = 3;
    type Packed = [u64; 2];
    #[inline(always)]
    fn pack(self) -> [u64; 2] {
        [(self >> 64) as u64, self as u64]
    }
    #[inline(always)]
    fn unpack(p: [u64; 2]) -> u128 {
        (p[0] as u128) << 64 | p[1] as u128
    }
    fn last(self, len: u8) -> u128 {
        self | u128::MAX.checked_shr(len as u32).unwrap_or(0)
    }
    #[inline(always)]
    fn shl(self, n: u8) -> u128 {
        self << n
    }
    #[inline(always)]
    fn top(self, width: u8) -> usize {
        // Only the high word: one shift, not a 128-bit one.
        (((self >> 64) as u64) >> (64 - width)) as usize
    }
    #[inline(always)]
    fn fold64(self) -> u64 {
        (self as u64) ^ ((self >> 64) as u64).rotate_left(31)
    }
    #[inline(always)]
    fn stride(self, depth: u8, width: u8) -> usize {
        ((self << depth) >> (128 - width)) as usize
    }
    #[inline(always)]
    fn masked(self, len: u8) -> Self {
        if len == 0 {
            0
        } else {
            self & (u128::MAX << (128 - len))
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PNode {
    children: u64,
    leaf_runs: u64,
    child_base: u32,
    leaf_base: u32,
}

/// Key bits a ply resolves below the direct table.
pub const PLY_BITS: u8 = 8;
const PLY: usize = 1 << PLY_BITS;
/// Plies per ply page: a ply page is leaves (the plies, each trie of them after its
/// path word) and one header node per trie, so plies do not fill the node array of a
/// subtrie page. (Tests use small pages.)
const PLY_PAGE_PLIES: usize = if cfg!(test) { 8 } else { 48 };
const PLY_PAGE_LEAVES: usize = PLY_PAGE_PLIES * (PLY + 1);
/// Ply entries from this one up continue into a child ply (IPv6's ply tries): the entry
/// minus `PLY_CHILD` is where the child starts, counted from the trie's first ply. A
/// value uses every bit (an ECMP group is tag 15 in the top four), so a slot with a
/// route valued this high keeps a subtrie (see [`ply_trie_skip`]); group ids would have
/// to pass 2^28 − 2^16 for that to happen.
const PLY_CHILD: u32 = 0xffff_0000;
const _: () = assert!(<u128 as LpmKey>::MAX_PLIES * PLY <= (u32::MAX - PLY_CHILD) as usize);

/// Slots of the direct table per chunk: a change copies one chunk (3 KiB of plain words,
/// no reference counts), not the table.
const CHUNK: usize = 256;
const CHUNKS: usize = (1 << DIRECT_BITS) / CHUNK;
/// Nodes and leaves per arena page. A page is what the arena copies on write (the open
/// page, once per publication at most); a subtrie larger than a page gets a page of
/// its own size.
/// (Tests use small pages, so that pages fill, thin out and are reclaimed.)
const PAGE_NODES: usize = if cfg!(test) { 48 } else { 4096 };
const PAGE_LEAVES: usize = 3 * PAGE_NODES;
/// Dropped pages kept for reuse (about 9 MB).
const MAX_SPARE_PAGES: usize = 64;

/// One direct-table slot, plain words: the value of the longest route of at most
/// `DIRECT_BITS` bits covering it, and where the subtrie of the longer routes inside it
/// lies in the arena (page 0: none). The subtrie's leaves are 0 where none of its routes
/// matches: the slot's value applies there.
#[derive(Clone, Copy, Default)]
struct Slot {
    value: u32,
    page: u32,
    /// The subtrie's root node in its page (the node before it is the subtrie's header)
    /// in the low `ROOT_BITS`, and above them the subtrie's first levels skipped (path
    /// compression at its root): when all its routes share the `STRIDE` bits of the
    /// first levels and are longer, those levels are nodes of one child whose other
    /// slots all say "no route", so the subtrie starts below them and a key must match
    /// their bits, or the slot's value applies. `(bits << 2 | levels) << ROOT_BITS |
    /// root`. (A /48 under a /16 in which every route is inside one /34, as
    /// 2001:db8::/32 makes it, walks five levels, not eight.) Packed so that a slot stays
    /// 12 bytes: a route change copies its chunk, and the arena's reclaim scans them.
    root: u32,
}

/// Bits of `Slot::root` holding the root's index: a root is at most `PAGE_NODES - 1`
/// into a shared page, and 1 in a page of its own.
const ROOT_BITS: u32 = 12;
const _: () = assert!(PAGE_NODES <= 1 << ROOT_BITS);
/// At most this many levels skipped: their bits and count fill `Slot::root` above
/// `ROOT_BITS`.
const MAX_SKIP_LEVELS: u8 = 3;
/// A slot whose page holds a ply trie, not a subtrie: `Slot::root` is `((leaf_base << 2
/// | skip) << 3 | PLY_TAG) << ROOT_BITS | root`, `leaf_base` the first ply's first value
/// in its page's leaves, `skip` the `PLY_BITS` levels its root skips (their bits are the
/// leaf before `leaf_base`). A skip field never has these low three bits (no levels
/// skipped means no bits either).
const PLY_TAG: u32 = 4;
const _: () = assert!(PLY_PAGE_LEAVES < 1 << (32 - ROOT_BITS - 5));

impl Slot {
    #[inline(always)]
    fn root(&self) -> u32 {
        self.root & ((1 << ROOT_BITS) - 1)
    }
    /// The skipped levels' (count, bits); count 0: none.
    #[inline(always)]
    fn skip(&self) -> (u8, usize) {
        let s = self.root >> ROOT_BITS;
        ((s & 3) as u8, (s >> 2) as usize)
    }
    /// Where the slot's first ply starts in its page's leaves and the levels its root
    /// skips, if its page holds a ply trie.
    #[inline(always)]
    fn ply(&self) -> Option<(u32, u8)> {
        let s = self.root >> ROOT_BITS;
        (s & 7 == PLY_TAG).then_some((s >> 5, (s >> 3 & 3) as u8))
    }
}

/// What a page holds: bump-allocated up to `nodes`/`leaves`, of which `live` nodes
/// (headers included) and `live_leaves` leaves belong to subtries some slot still
/// points to.
#[derive(Clone, Copy, Default)]
struct PageUse {
    nodes: u32,
    leaves: u32,
    live: u32,
    live_leaves: u32,
}

/// A longest-prefix-match table, immutable once published, changed by copy-on-write:
/// the direct table is 256 chunks of plain-word slots behind `Arc`s, and each slot's
/// longer routes are a subtrie in an arena of pages (node and leaf indices, no
/// pointers). A route change compiles one subtrie — the routes sharing its first
/// `DIRECT_BITS` bits — into the open page, points the slot at it and counts the old
/// one dead; so what a change copies is bounded (one chunk and the open page, each at
/// most once per publication), while a published clone keeps sharing everything else.
/// A page nobody points into is dropped; a page mostly dead has its live subtries moved
/// to the open page first. Workers holding an older clone keep its pages alive
/// through the `Arc`s: the arena's reclamation is the last holder dropping its clone.
pub struct Poptrie<K: LpmKey> {
    /// A fixed-size array: the chunk index of a `DIRECT_BITS`-bit slot number is in
    /// range by its type, so lookups pay no bounds check on it.
    chunks: Box<[Arc<[Slot; CHUNK]>; CHUNKS]>,
    /// Page i's nodes and leaves; page 0 is empty and never used ("no subtrie").
    nodes: Vec<Arc<[PNode]>>,
    leaves: Vec<Arc<[u32]>>,
    pages: Vec<PageUse>,
    /// Pages dropped, whose index a new page takes.
    free_pages: Vec<u32>,
    /// The page new subtries go to (0: none yet).
    open: u32,
    /// The page new plies go to (0: none yet).
    open_ply: u32,
    routes: usize,
    /// Bytes of the arena's pages (kept, so that `prefers_batch`, asked once a vector,
    /// does not walk the pages).
    arena_bytes: usize,
    /// Compilation scratch, empty between changes.
    scratch: SubBuilder,
    /// Per page, the slots whose subtries were placed in it (some may have moved on
    /// since): a reclaim moves those still there without scanning the direct table.
    /// The control plane's alone (a clone has none, and would scan).
    owners: Vec<Vec<u32>>,
    /// Dropped pages of the standard size, for new pages once no published clone
    /// holds them any more (no allocation, no page faults): the control plane's alone.
    spare: Vec<(Arc<[PNode]>, Arc<[u32]>)>,
    _k: PhantomData<K>,
}

/// What the workers get: the lookup structure, sharing every chunk and page; not the
/// control plane's scratch and spare pages (a clone holding those would keep them
/// from being reused).
impl<K: LpmKey> Clone for Poptrie<K> {
    fn clone(&self) -> Self {
        Poptrie {
            chunks: self.chunks.clone(),
            nodes: self.nodes.clone(),
            leaves: self.leaves.clone(),
            pages: self.pages.clone(),
            free_pages: self.free_pages.clone(),
            open: self.open,
            open_ply: self.open_ply,
            routes: self.routes,
            arena_bytes: self.arena_bytes,
            scratch: SubBuilder::default(),
            owners: Vec::new(),
            spare: Vec::new(),
            _k: PhantomData,
        }
    }
}

/// One route for compilation: a masked key, its length, its value (non-zero).
pub type Route<K> = (K, u8, u32);

impl<K: LpmKey> Poptrie<K> {
    /// An empty table (every lookup misses).
    pub fn empty() -> Self {
        let chunk: Arc<[Slot; CHUNK]> = Arc::new([Slot::default(); CHUNK]);
        Poptrie {
            chunks: Box::new(std::array::from_fn(|_| chunk.clone())),
            nodes: vec![Arc::from(Vec::new())],
            leaves: vec![Arc::from(Vec::new())],
            pages: vec![PageUse::default()],
            free_pages: Vec::new(),
            open: 0,
            open_ply: 0,
            routes: 0,
            arena_bytes: 0,
            scratch: SubBuilder::default(),
            owners: vec![Vec::new()],
            spare: Vec::new(),
            _k: PhantomData,
        }
    }

    /// Compile `routes`, which must be sorted by (key, length) with unique pairs and
    /// masked keys (as a `BTreeMap<(K, u8), u32>` iterates).
    pub fn build(routes: &[Route<K>]) -> Self {
        debug_assert!(routes.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
        let mut t = Self::empty();
        t.routes = routes.len();
        // Short routes paint the slots, shortest first so longer ones win.
        let mut short: Vec<&Route<K>> = routes.iter().filter(|r| r.1 <= DIRECT_BITS).collect();
        short.sort_by_key(|r| r.1);
        for &&(k, len, v) in &short {
            let start = k.stride(0, DIRECT_BITS);
            t.set_slot_values(start, 1usize << (DIRECT_BITS - len), v);
        }
        // Long routes, grouped by their direct slot (contiguous in key order).
        let long: Vec<Route<K>> = routes.iter().copied().filter(|r| r.1 > DIRECT_BITS).collect();
        let mut i = 0;
        while i < long.len() {
            let slot = long[i].0.stride(0, DIRECT_BITS);
            let mut j = i;
            while j < long.len() && long[j].0.stride(0, DIRECT_BITS) == slot {
                j += 1;
            }
            t.set_slot_routes(slot, &long[i..j]);
            i = j;
        }
        t
    }

    /// Set the short-route value of `count` slots from `first`.
    pub fn set_slot_values(&mut self, first: usize, count: usize, v: u32) {
        let mut s = first;
        while s < first + count {
            let chunk = Arc::make_mut(&mut self.chunks[s / CHUNK]);
            let end = (first + count).min((s / CHUNK + 1) * CHUNK);
            for slot in &mut chunk[s % CHUNK..s % CHUNK + (end - s)] {
                slot.value = v;
            }
            s = end;
        }
    }

    /// The short-route value of a slot.
    pub fn slot_value(&self, slot: usize) -> u32 {
        self.chunks[slot / CHUNK][slot % CHUNK].value
    }

    fn slot_mut(&mut self, slot: usize) -> &mut Slot {
        &mut Arc::make_mut(&mut self.chunks[slot / CHUNK])[slot % CHUNK]
    }

    /// Recompile slot `slot`'s subtrie from `routes`: every route longer than
    /// `DIRECT_BITS` inside the slot, sorted by (key, length), none if empty.
    pub fn set_slot_routes(&mut self, slot: usize, routes: &[Route<K>]) {
        self.update_slot_routes(slot, routes, None);
    }

    /// As [`Poptrie::set_slot_routes`], knowing which prefixes (`changed`: added,
    /// removed or given another value) make `routes` differ from what the slot's subtrie
    /// was compiled from: only the nodes those prefixes overlap are compiled again (the
    /// path from the root to each change, and the nodes under a changed prefix), every
    /// other node's subtree is copied from the current subtrie as it is. A change then
    /// costs a path of nodes and a copy of the subtrie, not the compilation of all of it
    /// (an IPv6 /16 of a BGP table holds hundreds of nodes).
    pub fn update_slot_routes(&mut self, slot: usize, routes: &[Route<K>], changed: Option<&[(K, u8)]>) {
        debug_assert!(routes.iter().all(|r| r.1 > DIRECT_BITS && r.0.stride(0, DIRECT_BITS) == slot));
        let current = self.chunks[slot / CHUNK][slot % CHUNK];
        let (page, root) = if routes.is_empty() {
            (0, 0)
        } else if let Some(skip) = ply_trie_skip(routes) {
            // A ply trie, painted whole (it is at most `K::MAX_PLIES` KiB): the skipped
            // levels' bits, then the plies.
            let mut b = std::mem::take(&mut self.scratch);
            b.leaves.clear();
            b.leaves.push(if skip == 0 { 0 } else { routes[0].0.shl(DIRECT_BITS).top(skip * PLY_BITS) as u32 });
            b.build_ply(routes, DIRECT_BITS + skip * PLY_BITS, 0);
            let (page, root) = self.place(&[], &b.leaves);
            b.leaves.clear();
            self.scratch = b;
            self.note_owner(page, slot);
            (page, self.ply_root(page, root, skip))
        } else {
            let levels = skip_levels(routes, STRIDE, MAX_SKIP_LEVELS);
            let depth = DIRECT_BITS + levels * STRIDE;
            let skip = if levels == 0 { 0 } else { (routes[0].0.shl(DIRECT_BITS).top(levels * STRIDE) as u32) << 2 | levels as u32 };
            let mut b = std::mem::take(&mut self.scratch);
            b.nodes.push(PNode::default());
            match changed {
                // The same root (the same levels skipped): the old subtrie is the base.
                Some(changed) if current.page != 0 && current.root >> ROOT_BITS == skip => {
                    self.extract(current.page, current.root(), &mut b.old_nodes, &mut b.old_leaves);
                    let ends = (b.old_nodes.len() as u32, b.old_leaves.len() as u32);
                    b.rebuild_node(0, routes, depth, 0, 0, ends, changed);
                }
                _ => b.build_node(0, routes, depth, 0),
            }
            let (page, root) = self.place(&b.nodes, &b.leaves);
            b.nodes.clear();
            b.leaves.clear();
            self.scratch = b;
            self.note_owner(page, slot);
            assert!(root < 1 << ROOT_BITS, "subtrie root {root} past a page's first {} nodes", 1 << ROOT_BITS);
            (page, root | skip << ROOT_BITS)
        };
        // The slot first, then the old subtrie released: a page reclaimed on the way
        // moves only what slots point to.
        let s = self.slot_mut(slot);
        let old = (s.page, s.root());
        (s.page, s.root) = (page, root);
        if old.0 != 0 {
            self.release(old.0, old.1);
        }
    }

    /// The root word of a slot pointing at the ply trie placed at (`page`, `root`),
    /// whose root skips `skip` levels.
    fn ply_root(&self, page: u32, root: u32, skip: u8) -> u32 {
        // Its first ply follows its path word.
        let leaf_base = self.nodes[page as usize][root as usize - 1].leaf_base + 1;
        debug_assert!(leaf_base < 1 << (32 - ROOT_BITS - 5) && skip <= 3);
        ((leaf_base << 2 | skip as u32) << 3 | PLY_TAG) << ROOT_BITS | root
    }

    /// Record that `slot`'s subtrie was placed in `page` (for the page's reclaim).
    fn note_owner(&mut self, page: u32, slot: usize) {
        if let Some(o) = self.owners.get_mut(page as usize) {
            o.push(slot as u32);
        }
    }

    /// The subtrie at (`page`, `root`) as compiled (indices from 0, root first) into
    /// `nodes` and `leaves`.
    fn extract(&self, page: u32, root: u32, nodes: &mut Vec<PNode>, leaves: &mut Vec<u32>) {
        let (p, root) = (page as usize, root as usize);
        let h = self.nodes[p][root - 1];
        let n = h.children as usize - 1;
        nodes.clear();
        nodes.extend(self.nodes[p][root..root + n].iter().map(|x| PNode {
            child_base: x.child_base - root as u32,
            leaf_base: x.leaf_base - h.leaf_base,
            ..*x
        }));
        leaves.clear();
        leaves.extend_from_slice(&self.leaves[p][h.leaf_base as usize..(h.leaf_base as u64 + h.leaf_runs) as usize]);
    }

    /// Copy a compiled subtrie (indices from 0, root first) into the arena; returns its
    /// (page, root). Small subtries go to the open page, a larger one to a page of its own.
    /// A ply trie (no nodes; its path word and plies as leaves) goes to the open ply page: plies and subtries are
    /// kept apart so that each kind of page fills both its arrays.
    fn place(&mut self, nodes: &[PNode], leaves: &[u32]) -> (u32, u32) {
        let need = nodes.len() + 1; // with its header
        let ply = nodes.is_empty();
        debug_assert!(!ply || (leaves.len() > PLY && (leaves.len() - 1).is_multiple_of(PLY)));
        let shape = if ply { (PLY_PAGE_PLIES, PLY_PAGE_LEAVES) } else { (PAGE_NODES, PAGE_LEAVES) };
        let page = if need > shape.0 || leaves.len() > shape.1 {
            self.new_page(need.max(PAGE_NODES), leaves.len().max(PAGE_LEAVES))
        } else {
            let open = if ply { self.open_ply } else { self.open };
            if !self.fits(open, need, leaves.len()) {
                let fresh = self.new_page(shape.0, shape.1);
                self.set_open(ply, fresh);
                if open != 0 {
                    self.reclaim(open);
                }
                // Reclaiming the page just closed moved its live subtries into the new
                // one, and may have left too little room; then one more fresh page, with
                // nothing moved into it. (Closing and reclaiming again could move the
                // same subtries from page to page for ever.)
                let open = if ply { self.open_ply } else { self.open };
                if !self.fits(open, need, leaves.len()) {
                    let fresh = self.new_page(shape.0, shape.1);
                    self.set_open(ply, fresh);
                }
            }
            if ply {
                self.open_ply
            } else {
                self.open
            }
        };
        let p = page as usize;
        let use_ = &mut self.pages[p];
        let (base, lbase) = (use_.nodes, use_.leaves);
        use_.nodes += need as u32;
        use_.leaves += leaves.len() as u32;
        use_.live += need as u32;
        use_.live_leaves += leaves.len() as u32;
        let (root, shift) = (base + 1, base + 1);
        let dst = Arc::make_mut(&mut self.nodes[p]);
        dst[base as usize] = PNode { children: need as u64, leaf_runs: leaves.len() as u64, child_base: base, leaf_base: lbase };
        for (d, n) in dst[root as usize..root as usize + nodes.len()].iter_mut().zip(nodes) {
            *d = PNode { child_base: n.child_base + shift, leaf_base: n.leaf_base + lbase, ..*n };
        }
        Arc::make_mut(&mut self.leaves[p])[lbase as usize..lbase as usize + leaves.len()].copy_from_slice(leaves);
        (page, root)
    }

    fn set_open(&mut self, ply: bool, page: u32) {
        if ply {
            self.open_ply = page;
        } else {
            self.open = page;
        }
    }

    fn fits(&self, page: u32, nodes: usize, leaves: usize) -> bool {
        let p = page as usize;
        p != 0
            && self.pages[p].nodes as usize + nodes <= self.nodes[p].len()
            && self.pages[p].leaves as usize + leaves <= self.leaves[p].len()
    }

    /// A page of `nodes` nodes and `leaves` leaves: a spare one of that shape if no
    /// published clone holds it any more, else a new one.
    fn new_page(&mut self, nodes: usize, leaves: usize) -> u32 {
        let reusable = self
            .spare
            .iter_mut()
            .position(|(n, l)| n.len() == nodes && l.len() == leaves && Arc::get_mut(n).is_some() && Arc::get_mut(l).is_some());
        let (n, l) = match reusable {
            // What the page held before is never read: lookups read only what a slot
            // points to, and `place` writes every node and leaf it hands out.
            Some(i) => self.spare.swap_remove(i),
            None => (std::iter::repeat_n(PNode::default(), nodes).collect(), std::iter::repeat_n(0, leaves).collect()),
        };
        self.arena_bytes += n.len() * std::mem::size_of::<PNode>() + l.len() * 4;
        match self.free_pages.pop() {
            Some(i) => {
                self.nodes[i as usize] = n;
                self.leaves[i as usize] = l;
                self.pages[i as usize] = PageUse::default();
                if let Some(o) = self.owners.get_mut(i as usize) {
                    o.clear();
                }
                i
            }
            None => {
                self.nodes.push(n);
                self.leaves.push(l);
                self.pages.push(PageUse::default());
                if self.owners.len() + 1 == self.pages.len() {
                    self.owners.push(Vec::new());
                }
                (self.pages.len() - 1) as u32
            }
        }
    }

    /// The subtrie at (`page`, `root`) is no longer pointed to.
    fn release(&mut self, page: u32, root: u32) {
        let header = self.nodes[page as usize][root as usize - 1];
        self.pages[page as usize].live -= header.children as u32;
        self.pages[page as usize].live_leaves -= header.leaf_runs as u32;
        if page != self.open && page != self.open_ply {
            self.reclaim(page);
        }
    }

    /// Drop a page nobody points into; move the live subtries out of one mostly dead
    /// (under a quarter of it), then drop it. Never the open page. (Under half kept the
    /// arena within ~2x its live subtries, but each move scans the direct table, and
    /// the churn test ran more than 20 minutes: a list of owning slots per page would
    /// allow it.)
    fn reclaim(&mut self, page: u32) {
        let p = page as usize;
        let use_ = self.pages[p];
        // Both counts: a page of few nodes with many leaf runs each is not mostly dead,
        // and moving it would fill the next page as much.
        if use_.live as usize * 4 >= self.nodes[p].len() || use_.live_leaves as usize * 4 >= self.leaves[p].len() {
            return;
        }
        let owners = self.owners.get_mut(p).map(std::mem::take);
        if use_.live > 0 {
            // The slots pointing into the page: those placed there that still point
            // there (a slot placed there twice is listed twice, and moved once); a
            // published clone keeps no lists, and would scan the direct table (768 KB).
            let mut moving: Vec<u32> = match owners {
                Some(mut o) => {
                    o.retain(|&s| self.chunks[s as usize / CHUNK][s as usize % CHUNK].page == page);
                    o.sort_unstable();
                    o.dedup();
                    o
                }
                None => {
                    (0..(CHUNKS * CHUNK) as u32).filter(|&s| self.chunks[s as usize / CHUNK][s as usize % CHUNK].page == page).collect()
                }
            };
            let mut nodes = std::mem::take(&mut self.scratch.old_nodes);
            let mut leaves = std::mem::take(&mut self.scratch.old_leaves);
            for &s in &moving {
                let s = s as usize;
                let old = self.chunks[s / CHUNK][s % CHUNK];
                self.extract(page, old.root(), &mut nodes, &mut leaves);
                let (np, nr) = self.place(&nodes, &leaves);
                self.note_owner(np, s);
                let ply = old.ply().map(|(_, skip)| self.ply_root(np, nr, skip));
                let slot = self.slot_mut(s);
                slot.page = np;
                slot.root = match ply {
                    // A ply's values moved: its root word says where they start.
                    Some(root) => root,
                    // The skipped levels stay: they belong to the subtrie moved whole.
                    None => slot.root & !((1 << ROOT_BITS) - 1) | nr,
                };
            }
            moving.clear();
            (self.scratch.old_nodes, self.scratch.old_leaves) = (nodes, leaves);
        }
        let n = std::mem::replace(&mut self.nodes[p], Arc::from(Vec::new()));
        let l = std::mem::replace(&mut self.leaves[p], Arc::from(Vec::new()));
        self.arena_bytes -= n.len() * std::mem::size_of::<PNode>() + l.len() * 4;
        let standard = (n.len(), l.len()) == (PAGE_NODES, PAGE_LEAVES) || (n.len(), l.len()) == (PLY_PAGE_PLIES, PLY_PAGE_LEAVES);
        if standard && self.spare.len() < MAX_SPARE_PAGES {
            self.spare.push((n, l));
        }
        self.pages[p] = PageUse::default();
        self.free_pages.push(page);
    }

    /// Record the number of routes (for `route_count`) after incremental changes.
    pub fn set_route_count(&mut self, n: usize) {
        self.routes = n;
    }

    #[inline(always)]
    fn slot(&self, key: K) -> &Slot {
        let s = key.top(DIRECT_BITS);
        &self.chunks[s / CHUNK][s % CHUNK]
    }

    /// The node `at` of page `page`.
    ///
    /// # Safety
    /// `page` and `at` must come from a direct slot (its page and root) or from a node of
    /// the same subtrie (its child base plus the rank of a child bit): `place` copies
    /// every subtrie whole into one page, and the compiler (`SubBuilder`) gives every
    /// child bit of a node a node and every leaf run a leaf, so those indices are in
    /// the page. A clone holds every page its slots point into (`Arc`s).
    #[inline(always)]
    unsafe fn node(&self, page: u32, at: u32) -> &PNode {
        if cfg!(any(test, debug_assertions)) {
            assert!((at as usize) < self.nodes[page as usize].len(), "node {at} of page {page}");
        }
        // SAFETY: the caller's contract above: both indices are in range.
        unsafe { self.nodes.get_unchecked(page as usize).get_unchecked(at as usize) }
    }

    /// The leaf of `node` (of page `page`) for stride value `v`, which is not a child.
    ///
    /// # Safety
    /// As [`Poptrie::node`]: `node` is a node of a subtrie in `page`, so its leaf base
    /// plus the rank of the leaf run holding `v` (every non-child slot lies in a run;
    /// slot 0, when not a child, starts one) is a leaf of the same page.
    #[inline(always)]
    unsafe fn leaf(&self, page: u32, node: &PNode, v: usize) -> u32 {
        let i = node.leaf_base + (node.leaf_runs & (u64::MAX >> (63 - v))).count_ones() - 1;
        if cfg!(any(test, debug_assertions)) {
            assert!((i as usize) < self.leaves[page as usize].len(), "leaf {i} of page {page}");
        }
        // SAFETY: the caller's contract above.
        unsafe { *self.leaves.get_unchecked(page as usize).get_unchecked(i as usize) }
    }

    /// Value `at` of page `page`'s leaves.
    ///
    /// # Safety
    /// `at` is a ply trie's leaf base (from its slot) minus one (its path word), or
    /// that base plus a child offset from one of its entries plus a value of `PLY_BITS`
    /// bits: `place` copies a trie's path word and plies whole into one page, and
    /// `SubBuilder::build_ply` gives every child offset a whole ply.
    #[inline(always)]
    unsafe fn ply_value(&self, page: u32, at: usize) -> u32 {
        if cfg!(any(test, debug_assertions)) {
            assert!(at < self.leaves[page as usize].len(), "ply value {at} of page {page}");
        }
        // SAFETY: the caller's contract above.
        unsafe { *self.leaves.get_unchecked(page as usize).get_unchecked(at) }
    }

    /// The value of the longest prefix covering `key`, or 0.
    ///
    /// The walk shifts the key a stride at a time and reads its top bits (no variable
    /// shift per level), and indexes the arena unchecked: the structure guarantees the
    /// indices (see [`Poptrie::node`]). Loads from the key to the value: the chunk, the
    /// slot, then per level the page's node array (cached) and the node, and the leaf;
    /// for a ply, the page's leaf array (cached) and the value.
    #[inline(always)]
    pub fn lookup(&self, key: K) -> u32 {
        let slot = self.slot(key);
        if slot.page == 0 {
            return slot.value;
        }
        let page = slot.page;
        if let Some((base, skip)) = slot.ply() {
            return self.ply_lookup(slot.value, page, base, skip, key);
        }
        let mut at = slot.root();
        let mut k = key.shl(DIRECT_BITS);
        let (levels, path) = slot.skip();
        if levels != 0 {
            if k.top(levels * STRIDE) != path {
                return slot.value;
            }
            k = k.shl(levels * STRIDE);
        }
        loop {
            // SAFETY: `at` is the slot's root or a child index of the node before it.
            let node = unsafe { self.node(page, at) };
            let v = k.top(STRIDE);
            k = k.shl(STRIDE);
            if node.children & (1u64 << v) != 0 {
                at = node.child_base + (node.children & (u64::MAX >> (63 - v))).count_ones() - 1;
            } else {
                // SAFETY: `node` is in `page` and `v` is not one of its children.
                let leaf = unsafe { self.leaf(page, node, v) };
                return if leaf == 0 { slot.value } else { leaf };
            }
        }
    }

    /// The value for `key` in the ply trie at `base` of page `page` whose root skips
    /// `skip` levels, or `value` (its slot's) where the trie says 0. One load per ply,
    /// no popcount; for IPv4 (one ply, no skip) the skip and child tests compile away.
    #[inline(always)]
    fn ply_lookup(&self, value: u32, page: u32, base: u32, skip: u8, key: K) -> u32 {
        let mut k = key.shl(DIRECT_BITS);
        if K::MAX_PLY_SKIP != 0 && skip != 0 {
            let width = skip * PLY_BITS;
            // SAFETY: the trie's path word, just before its first ply.
            if k.top(width) as u32 != unsafe { self.ply_value(page, base as usize - 1) } {
                return value;
            }
            k = k.shl(width);
        }
        // SAFETY: the first ply's base plus `PLY_BITS` bits of the key.
        let mut v = unsafe { self.ply_value(page, base as usize + k.top(PLY_BITS)) };
        while K::MAX_PLIES > 1 && v >= PLY_CHILD {
            k = k.shl(PLY_BITS);
            // SAFETY: the base plus a child offset from the trie plus `PLY_BITS` bits.
            v = unsafe { self.ply_value(page, (base + (v - PLY_CHILD)) as usize + k.top(PLY_BITS)) };
        }
        if v == 0 {
            value
        } else {
            v
        }
    }

    /// Look up a batch: the direct slot for every key first, then each node level for
    /// every key still walking, so independent cache misses overlap (measured in
    /// `benches/fib.rs`: the gain is large once the table outgrows the caches).
    #[inline]
    pub fn lookup_batch(&self, keys: &[K], out: &mut [u32]) {
        let n = keys.len().min(out.len());
        for (k, o) in keys[..n].chunks(64).zip(out[..n].chunks_mut(64)) {
            self.lookup_batch64(k, o);
        }
    }

    #[inline]
    fn lookup_batch64(&self, keys: &[K], out: &mut [u32]) {
        // Per key: the page of the subtrie it walks (0: done), its node there, its
        // slot's value, and the key's bits past those walked.
        let mut walk: [(u32, u32, u32); 64] = [(0, 0, 0); 64];
        let mut rest: [K; 64] = [keys.first().copied().unwrap_or_else(|| K::unpack(Default::default())); 64];
        let n = keys.len().min(64).min(out.len());
        let mut pending = false;
        for i in 0..n {
            let slot = *self.slot(keys[i]);
            out[i] = slot.value;
            let mut k = keys[i].shl(DIRECT_BITS);
            let mut page = slot.page;
            let (levels, path) = slot.skip();
            if let (true, Some((base, skip))) = (page != 0, slot.ply()) {
                out[i] = self.ply_lookup(slot.value, page, base, skip, keys[i]);
                page = 0;
            } else if levels != 0 {
                if k.top(levels * STRIDE) != path {
                    page = 0;
                }
                k = k.shl(levels * STRIDE);
            }
            walk[i] = (page, slot.root(), slot.value);
            rest[i] = k;
            pending |= page != 0;
        }
        while pending {
            pending = false;
            for i in 0..n {
                let (page, at, value) = walk[i];
                if page == 0 {
                    continue;
                }
                // SAFETY: `at` is the slot's root or a child index of the node before it.
                let node = unsafe { self.node(page, at) };
                let v = rest[i].top(STRIDE);
                rest[i] = rest[i].shl(STRIDE);
                if node.children & (1u64 << v) != 0 {
                    walk[i].1 = node.child_base + (node.children & (u64::MAX >> (63 - v))).count_ones() - 1;
                    pending = true;
                } else {
                    // SAFETY: `node` is in `page` and `v` is not one of its children.
                    let leaf = unsafe { self.leaf(page, node, v) };
                    out[i] = if leaf == 0 { value } else { leaf };
                    walk[i].0 = 0;
                }
            }
        }
    }

    /// Whether `lookup_batch` beats one-at-a-time lookups for this table: only once the
    /// structure outgrows the caches (criterion `fib` bench: batched is 1.4× faster for
    /// IPv4 and 1.8× for IPv6 at 1M prefixes, and ~1.2× slower on a small, cached table).
    pub fn prefers_batch(&self) -> bool {
        self.memory_bytes() > BATCH_ABOVE_BYTES
    }

    pub fn route_count(&self) -> usize {
        self.routes
    }

    /// Bytes of lookup structure (direct chunks, arena pages).
    pub fn memory_bytes(&self) -> usize {
        #[cfg(any(test, debug_assertions))]
        assert_eq!(
            self.arena_bytes,
            self.nodes.iter().map(|n| n.len() * std::mem::size_of::<PNode>()).sum::<usize>()
                + self.leaves.iter().map(|l| l.len() * 4).sum::<usize>()
        );
        CHUNKS * (CHUNK * std::mem::size_of::<Slot>() + 16) + self.arena_bytes
    }

    /// Nodes of live subtries (their headers not counted).
    pub fn node_count(&self) -> usize {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .filter(|s| s.page != 0)
            .map(|s| self.nodes[s.page as usize][s.root() as usize - 1].children as usize - 1)
            .sum()
    }

    /// Check the arena's bookkeeping against the slots (tests): every page's live count
    /// is the size of the subtries pointed into it, and no page is dropped that is.
    #[cfg(test)]
    pub(crate) fn check_arena(&self) {
        let _ = self.memory_bytes(); // its debug check of the kept arena size
        let mut live = vec![(0u32, 0u32); self.pages.len()];
        for s in self.chunks.iter().flat_map(|c| c.iter()).filter(|s| s.page != 0) {
            let header = self.nodes[s.page as usize][s.root() as usize - 1];
            if let Some((base, _)) = s.ply() {
                assert_eq!((base, header.children), (header.leaf_base + 1, 1), "ply trie of page {}", s.page);
                assert_eq!(header.leaf_runs % PLY as u64, 1, "ply trie of page {}", s.page);
            }
            live[s.page as usize].0 += header.children as u32;
            live[s.page as usize].1 += header.leaf_runs as u32;
        }
        for (i, (l, u)) in live.iter().zip(&self.pages).enumerate() {
            assert_eq!(*l, (u.live, u.live_leaves), "page {i}");
            assert!(u.live <= u.nodes && u.nodes as usize <= self.nodes[i].len());
            assert!(u.live_leaves <= u.leaves && u.leaves as usize <= self.leaves[i].len());
        }
        // The control plane's copy lists, per page, every slot pointing into it.
        if self.owners.len() == self.pages.len() {
            for (s, slot) in self.chunks.iter().flat_map(|c| c.iter()).enumerate().filter(|(_, s)| s.page != 0) {
                assert!(self.owners[slot.page as usize].contains(&(s as u32)), "slot {s} not among page {}'s owners", slot.page);
            }
        }
    }

    /// Slot `slot`'s subtrie as compiled (nodes, leaves; empty if none), for tests.
    #[cfg(test)]
    fn subtrie_of(&self, slot: usize) -> (Vec<PNode>, Vec<u32>, u32) {
        let s = self.chunks[slot / CHUNK][slot % CHUNK];
        let (mut n, mut l) = (Vec::new(), Vec::new());
        if s.page != 0 {
            self.extract(s.page, s.root(), &mut n, &mut l);
        }
        // A ply's root word says where it lies, which differs between two arenas.
        (n, l, if let Some((_, skip)) = s.ply() { (skip as u32) << 3 | PLY_TAG } else { s.root >> ROOT_BITS })
    }
}

/// How many levels of `width` bits below the direct table (at most `max`) a subtrie or
/// ply trie of `routes` (sorted, longer than `DIRECT_BITS`, one direct slot's) can skip:
/// those whose bits every route shares and is longer than.
fn skip_levels<K: LpmKey>(routes: &[Route<K>], width: u8, max: u8) -> u8 {
    let (first, last) = (routes[0].0, routes[routes.len() - 1].0);
    let mut levels = 0;
    // Sorted keys: the first and the last share a bit only if all keys do.
    while levels < max && first.shl(DIRECT_BITS).top((levels + 1) * width) == last.shl(DIRECT_BITS).top((levels + 1) * width) {
        levels += 1;
    }
    if levels == 0 {
        // A dense /16's usual answer, without a pass over its routes (every change
        // into it asks, for its ply trie and for its subtrie).
        return 0;
    }
    let shortest = routes.iter().map(|r| r.1).min().unwrap_or(DIRECT_BITS);
    while levels > 0 && shortest <= DIRECT_BITS + levels * width {
        levels -= 1;
    }
    levels
}

/// The levels a ply trie of `routes` (sorted, longer than `DIRECT_BITS`, one direct
/// slot's) skips at its root, if it takes at most `K::MAX_PLIES` plies and no value
/// reads as a child (`PLY_CHILD`); else (`None`) the slot gets a subtrie. Stops counting
/// past the limit, so a dense /16 pays for a few of its routes, not all.
fn ply_trie_skip<K: LpmKey>(routes: &[Route<K>]) -> Option<u8> {
    let skip = skip_levels(routes, PLY_BITS, K::MAX_PLY_SKIP);
    let root = DIRECT_BITS + skip * PLY_BITS;
    // Per level below the root, the last prefix that took a ply there: in (key,
    // length) order a level's prefixes come sorted, so a prefix other than the last is
    // a new ply.
    let mut last: [Option<K>; 16] = [None; 16];
    let mut plies = 1;
    for &(k, len, v) in routes {
        if K::MAX_PLIES > 1 && v >= PLY_CHILD {
            return None;
        }
        let (mut level, mut depth) = (0, root + PLY_BITS);
        while depth < len {
            let p = k.masked(depth);
            if last[level] != Some(p) {
                last[level] = Some(p);
                plies += 1;
                if plies > K::MAX_PLIES {
                    return None;
                }
            }
            (level, depth) = (level + 1, depth + PLY_BITS);
        }
    }
    Some(skip)
}

#[derive(Clone, Default)]
struct SubBuilder {
    nodes: Vec<PNode>,
    leaves: Vec<u32>,
    /// The subtrie being updated, as compiled (see `rebuild_node`).
    old_nodes: Vec<PNode>,
    old_leaves: Vec<u32>,
}

impl SubBuilder {
    /// Fill node `idx` covering bits `depth..depth+STRIDE` from `routes` (sorted by
    /// (key, length), all sharing the node's prefix), inheriting `default` — which
    /// already holds what routes of at most `depth` bits among them give. Allocates
    /// nothing but the nodes and leaves it appends.
    fn build_node<K: LpmKey>(&mut self, idx: usize, routes: &[Route<K>], depth: u8, default: u32) {
        let slots = self.compile_node(idx, routes, depth, default);
        let end = depth + STRIDE;
        // One child per slot with longer routes, in slot order (= key order): the
        // routes of a slot are contiguous; those painted here come along and the child
        // skips them.
        let base = self.nodes[idx].child_base as usize;
        for (n, (s, child)) in ChildRoutes::new(routes, depth, STRIDE).enumerate() {
            self.build_node(base + n, child, end, slots[s]);
        }
    }

    /// As `build_node`, with `old` the node at the same place in the subtrie before
    /// (in `old_nodes`, its descendants ending at `old_ends`: nodes, leaves) and
    /// `changed` the prefixes by which the routes differ: a child no changed prefix
    /// overlaps has the same routes and the same inherited value as before, so its
    /// subtree is copied from the old one; the others are compiled again.
    ///
    /// The layout both keep (which the copy relies on): a node's leaves, then its
    /// children's block, then each child's subtree in slot order, so a subtree's nodes
    /// and leaves are contiguous and end where the next sibling's begin.
    #[allow(clippy::too_many_arguments)]
    fn rebuild_node<K: LpmKey>(
        &mut self,
        idx: usize,
        routes: &[Route<K>],
        depth: u8,
        default: u32,
        old: usize,
        old_ends: (u32, u32),
        changed: &[(K, u8)],
    ) {
        let slots = self.compile_node(idx, routes, depth, default);
        let end = depth + STRIDE;
        let o = self.old_nodes[old];
        let old_count = o.children.count_ones();
        let base = self.nodes[idx].child_base as usize;
        for (n, (s, child)) in ChildRoutes::new(routes, depth, STRIDE).enumerate() {
            let n = base + n;
            if o.children & (1 << s) == 0 {
                self.build_node(n, child, end, slots[s]);
            } else {
                let rank = (o.children & (u64::MAX >> (63 - s))).count_ones() - 1;
                let oc = (o.child_base + rank) as usize;
                let ends = if rank + 1 < old_count {
                    let next = self.old_nodes[oc + 1];
                    (next.child_base, next.leaf_base)
                } else {
                    old_ends
                };
                let key = child[0].0;
                let touched = changed.iter().any(|&(ck, cl)| {
                    let m = cl.min(end);
                    ck.masked(m) == key.masked(m)
                });
                if touched {
                    self.rebuild_node(n, child, end, slots[s], oc, ends, changed);
                } else {
                    self.copy_subtree(n, oc, ends);
                }
            }
        }
    }

    /// Node `idx` becomes old node `old` with its whole subtree (descendants ending at
    /// `ends`), appended and its indices moved to where they land.
    fn copy_subtree(&mut self, idx: usize, old: usize, ends: (u32, u32)) {
        let c = self.old_nodes[old];
        let nd = (self.nodes.len() as u32).wrapping_sub(c.child_base);
        let ld = (self.leaves.len() as u32).wrapping_sub(c.leaf_base);
        let moved = |x: &PNode| PNode { child_base: x.child_base.wrapping_add(nd), leaf_base: x.leaf_base.wrapping_add(ld), ..*x };
        self.leaves.extend_from_slice(&self.old_leaves[c.leaf_base as usize..ends.1 as usize]);
        self.nodes.extend(self.old_nodes[c.child_base as usize..ends.0 as usize].iter().map(moved));
        self.nodes[idx] = moved(&c);
    }

    /// A ply of a ply trie, for bits `depth..depth + PLY_BITS` of `routes` (sorted by
    /// (key, length), all sharing its prefix), appended to `leaves`, inheriting
    /// `default` (what routes of at most `depth` bits among them give), then its
    /// children's plies; returns where it starts. Painted in (key, length) order, each
    /// entry ends as its longest match (a route comes after those covering it); an entry
    /// with longer routes below it becomes `PLY_CHILD` plus where its child starts,
    /// counted from the trie's first ply (`leaves[1]`, after the path word).
    fn build_ply<K: LpmKey>(&mut self, routes: &[Route<K>], depth: u8, default: u32) -> usize {
        let at = self.leaves.len();
        self.leaves.resize(at + PLY, default);
        let end = depth + PLY_BITS;
        for &(k, len, v) in routes {
            if len > depth && len <= end {
                let start = at + k.stride(depth, PLY_BITS);
                self.leaves[start..start + (1usize << (end - len))].fill(v);
            }
        }
        for (s, child) in ChildRoutes::new(routes, depth, PLY_BITS) {
            let c = self.build_ply(child, end, self.leaves[at + s]);
            self.leaves[at + s] = PLY_CHILD + (c - 1) as u32;
        }
        at
    }

    /// Node `idx`'s own part: its slots painted from `routes`, its leaves appended and
    /// its children's block reserved. Returns the slots' values (what each child inherits).
    fn compile_node<K: LpmKey>(&mut self, idx: usize, routes: &[Route<K>], depth: u8, default: u32) -> [u32; 64] {
        let end = depth + STRIDE;
        let mut slots = [default; 64];
        // In (key, length) order every route comes after the routes covering it, so
        // painting in that order leaves each slot its longest match.
        let mut children = 0u64;
        for &(k, len, v) in routes {
            if len <= depth {
                continue;
            }
            let start = k.stride(depth, STRIDE);
            if len <= end {
                slots[start..start + (1usize << (end - len))].fill(v);
            } else {
                children |= 1 << start;
            }
        }
        let leaf_base = self.leaves.len() as u32;
        let mut leaf_runs = 0u64;
        let mut prev: Option<u32> = None;
        for (v, &val) in slots.iter().enumerate() {
            if children & (1 << v) != 0 {
                continue;
            }
            if prev != Some(val) {
                leaf_runs |= 1 << v;
                self.leaves.push(val);
                prev = Some(val);
            }
        }
        let child_base = self.nodes.len() as u32;
        self.nodes.resize(self.nodes.len() + children.count_ones() as usize, PNode::default());
        self.nodes[idx] = PNode { children, leaf_runs, child_base, leaf_base };
        slots
    }
}

/// The children of a node at `depth` over `routes` (sorted, sharing its prefix): per
/// slot with longer routes, in slot order, (slot, the routes inside that slot, the
/// longer ones with the shorter ones painted here among them, which the child skips).
struct ChildRoutes<'a, K: LpmKey> {
    routes: &'a [Route<K>],
    depth: u8,
    /// The node's bits: `STRIDE`, or `PLY_BITS` for a ply.
    width: u8,
    i: usize,
}

impl<'a, K: LpmKey> ChildRoutes<'a, K> {
    fn new(routes: &'a [Route<K>], depth: u8, width: u8) -> Self {
        ChildRoutes { routes, depth, width, i: 0 }
    }
}

impl<'a, K: LpmKey> Iterator for ChildRoutes<'a, K> {
    type Item = (usize, &'a [Route<K>]);
    fn next(&mut self) -> Option<Self::Item> {
        let (routes, end) = (self.routes, self.depth + self.width);
        while self.i < routes.len() {
            let (k, len, _) = routes[self.i];
            if len <= end {
                self.i += 1;
                continue;
            }
            let s = k.stride(self.depth, self.width);
            let mut j = self.i;
            while j < routes.len() && routes[j].0.stride(self.depth, self.width) == s {
                j += 1;
            }
            let child = &routes[self.i..j];
            self.i = j;
            return Some((s, child));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn naive<K: LpmKey>(routes: &BTreeMap<(K, u8), u32>, key: K) -> u32 {
        routes.iter().filter(|((p, l), _)| key.masked(*l) == *p).max_by_key(|((_, l), _)| *l).map_or(0, |(_, v)| *v)
    }

    fn compile<K: LpmKey>(m: &BTreeMap<(K, u8), u32>) -> Poptrie<K> {
        let v: Vec<Route<K>> = m.iter().map(|(&(k, l), &v)| (k, l, v)).collect();
        Poptrie::build(&v)
    }

    #[test]
    fn v4_basics() {
        let mut m = BTreeMap::new();
        let p = |a: [u8; 4]| u32::from_be_bytes(a);
        m.insert((0u32, 0u8), 1);
        m.insert((p([198, 18, 0, 0]), 15), 2);
        m.insert((p([198, 18, 0, 0]), 24), 3);
        m.insert((p([198, 18, 0, 128]), 25), 4);
        m.insert((p([198, 18, 0, 129]), 32), 5);
        m.insert((p([198, 19, 255, 0]), 24), 6);
        let t = compile(&m);
        assert_eq!(t.lookup(p([8, 8, 8, 8])), 1);
        assert_eq!(t.lookup(p([198, 18, 1, 1])), 2);
        assert_eq!(t.lookup(p([198, 18, 0, 1])), 3);
        assert_eq!(t.lookup(p([198, 18, 0, 130])), 4);
        assert_eq!(t.lookup(p([198, 18, 0, 129])), 5);
        assert_eq!(t.lookup(p([198, 19, 255, 9])), 6);
        assert_eq!(t.lookup(p([198, 19, 254, 9])), 2);
        let empty = Poptrie::<u32>::empty();
        assert_eq!(empty.lookup(p([1, 2, 3, 4])), 0);
    }

    #[test]
    fn v6_deep_prefixes() {
        let mut m = BTreeMap::new();
        let a = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().unwrap());
        m.insert((a("2001:db8::"), 32), 1);
        m.insert((a("2001:db8:1::"), 48), 2);
        m.insert((a("2001:db8:1:2::"), 64), 3);
        m.insert((a("2001:db8:1:2::7"), 128), 4);
        let t = compile(&m);
        assert_eq!(t.lookup(a("2001:db8:ffff::1")), 1);
        assert_eq!(t.lookup(a("2001:db8:1:3::1")), 2);
        assert_eq!(t.lookup(a("2001:db8:1:2::8")), 3);
        assert_eq!(t.lookup(a("2001:db8:1:2::7")), 4);
        assert_eq!(t.lookup(a("2001:db9::")), 0);
        let keys = [a("2001:db8:ffff::1"), a("2001:db8:1:2::7"), a("2001:db9::"), a("2001:db8:1:3::1")];
        let mut out = [0u32; 4];
        t.lookup_batch(&keys, &mut out);
        assert_eq!(out, [1, 4, 0, 2]);
    }

    /// A slot's subtrie rewritten again and again: the arena reuses its pages (it does not
    /// grow with the number of changes), moves what is left in a thinned-out page, and a
    /// clone taken before keeps answering as it did.
    #[test]
    fn rewrites_reuse_arena_pages() {
        let p = |a: [u8; 4]| u32::from_be_bytes(a);
        let mut t = Poptrie::<u32>::empty();
        // Neighbours that stay: their subtries share pages with the rewritten ones.
        for s in 0..8u32 {
            let slot = (0xc612 + 2 * s) as usize;
            t.set_slot_routes(slot, &[((slot as u32) << 16 | 0x0100, 24, 100 + s)]);
        }
        let before = t.clone();
        let slot = p([198, 19, 0, 0]) as usize >> 16;
        for i in 0..2000u32 {
            let n = 1 + i % 40;
            let routes: Vec<Route<u32>> = (0..n).map(|j| (p([198, 19, j as u8, 0]), 24, 1 + (i + j) % 7)).collect();
            t.set_slot_routes(slot, &routes);
            t.check_arena();
            for j in 0..n {
                assert_eq!(t.lookup(p([198, 19, j as u8, 9])), 1 + (i + j) % 7);
            }
            assert_eq!(t.lookup(p([198, 19, 200, 1])), 0);
            for s in 0..8u32 {
                assert_eq!(t.lookup((0xc612 + 2 * s) << 16 | 0x0105), 100 + s);
            }
        }
        assert!(t.pages.len() < 12, "{} pages after 2000 rewrites", t.pages.len());
        assert_eq!(before.lookup(p([198, 19, 0, 9])), 0);
        t.set_slot_routes(slot, &[]);
        t.check_arena();
        assert_eq!(t.lookup(p([198, 19, 0, 9])), 0);
    }

    /// Subtries of one node and a leaf run per stride value fill a page's leaves long
    /// before its nodes: such a page is not "mostly dead" (it was moved from page to
    /// page for ever when only nodes counted, and CI hung in the IPv6 update test), and
    /// placing another subtrie after a reclaim ends in a fresh page at worst.
    #[test]
    fn pages_full_of_leaf_runs_are_not_moved_for_ever() {
        let mut t = Poptrie::<u32>::empty();
        // 64 /22s with alternating values and a /25 in the last (so a subtrie, not a
        // ply): the root node with 63 leaf runs and one small child.
        let leafy = |slot: u32, v: u32| -> Vec<Route<u32>> {
            let mut r: Vec<Route<u32>> = (0..64u32).map(|i| (slot << 16 | i << 10, 22, v + i % 2)).collect();
            r.push((slot << 16 | 63 << 10 | 0x80, 25, v + 7));
            r
        };
        let mut m = BTreeMap::new();
        for round in 0..6u32 {
            for s in 0..5u32 {
                let slot = 0xc612 + s;
                let routes = leafy(slot, 10 * (round + 1) + s);
                t.set_slot_routes(slot as usize, &routes);
                t.check_arena();
                m.retain(|&(k, _): &(u32, u8), _| k >> 16 != slot);
                m.extend(routes.iter().map(|&(k, l, v)| ((k, l), v)));
                for &(k, l) in m.keys() {
                    assert_eq!(t.lookup(k), naive(&m, k));
                    assert_eq!(t.lookup(k.last(l)), naive(&m, k.last(l)));
                }
            }
        }
        assert!(t.pages.len() < 16, "{} pages for five subtries", t.pages.len());
    }

    /// A slot's subtrie updated change by change (only the nodes the changed prefixes
    /// overlap compiled again, the rest copied) is node for node and leaf for leaf the
    /// subtrie compiled from scratch from the same routes, and answers as the reference;
    /// for dense /32s, deep prefixes, changes that cover others, and deletes back to empty.
    fn check_updates<K: LpmKey>(slot: usize, ops: &[(K, u8, u32)], batch: usize) -> Result<(), TestCaseError> {
        let mut t = Poptrie::<K>::empty();
        let mut m: BTreeMap<(K, u8), u32> = BTreeMap::new();
        for chunk in ops.chunks(batch.max(1)) {
            let mut changed = Vec::new();
            for &(k, l, v) in chunk {
                let k = k.masked(l);
                if v == 0 {
                    m.remove(&(k, l));
                } else {
                    m.insert((k, l), v);
                }
                changed.push((k, l));
            }
            let routes: Vec<Route<K>> = m.iter().map(|(&(k, l), &v)| (k, l, v)).collect();
            t.update_slot_routes(slot, &routes, Some(&changed));
            t.check_arena();
            let mut fresh = Poptrie::<K>::empty();
            fresh.set_slot_routes(slot, &routes);
            prop_assert!(t.subtrie_of(slot) == fresh.subtrie_of(slot), "updated subtrie differs from a fresh compile");
            for (&(k, l), _) in &m {
                prop_assert_eq!(t.lookup(k), naive(&m, k));
                prop_assert_eq!(t.lookup(k.last(l)), naive(&m, k.last(l)));
            }
        }
        // Deletes back to empty.
        let keys: Vec<(K, u8)> = m.keys().copied().collect();
        for (k, l) in keys {
            m.remove(&(k, l));
            let routes: Vec<Route<K>> = m.iter().map(|(&(k, l), &v)| (k, l, v)).collect();
            t.update_slot_routes(slot, &routes, Some(&[(k, l)]));
            t.check_arena();
            prop_assert_eq!(t.lookup(k), naive(&m, k));
        }
        prop_assert_eq!(t.node_count(), 0);
        Ok(())
    }

    /// A /16 crossing between the ply and the subtrie shapes as a route longer than /24
    /// comes and goes inside it, beside /16s that stay plies: lookups (one at a time and
    /// batched) match the reference after every change, the arena's accounting holds,
    /// and a clone taken before each change keeps answering as it did.
    #[test]
    fn slots_cross_between_ply_and_subtrie() {
        let p = |a: [u8; 4]| u32::from_be_bytes(a);
        let mut t = Poptrie::<u32>::empty();
        let mut long: BTreeMap<(u32, u8), u32> = BTreeMap::new();
        // Neighbours: plies sharing pages with the changing slot's.
        for s in 0..6u32 {
            long.insert(((0xc612 + s) << 16 | 0x0100, 24), 100 + s);
            long.insert(((0xc612 + s) << 16, 17), 200 + s);
        }
        let apply = |t: &mut Poptrie<u32>, long: &BTreeMap<(u32, u8), u32>, slot: usize| {
            let routes: Vec<Route<u32>> =
                long.iter().filter(|(&(k, _), _)| k as usize >> 16 == slot).map(|(&(k, l), &v)| (k, l, v)).collect();
            t.set_slot_routes(slot, &routes);
        };
        for s in 0..6 {
            apply(&mut t, &long, 0xc612 + s);
        }
        t.set_slot_values(0xc613, 1, 9); // a /16 route under slot 0xc613's ply
        let slot = 0xc613usize;
        assert!(t.slot(p([198, 19, 0, 0])).ply().is_some());
        let mut probes: Vec<u32> = Vec::new();
        for s in 0..6u32 {
            for b in [0u32, 1, 2, 127, 128, 129, 255] {
                probes.extend([(0xc612 + s) << 16 | b << 8, (0xc612 + s) << 16 | b << 8 | 0x81, (0xc612 + s) << 16 | b << 8 | 0xff]);
            }
        }
        let reference = |long: &BTreeMap<(u32, u8), u32>, k: u32| {
            let v = naive(long, k);
            if v == 0 && k >> 16 == 0xc613 {
                9
            } else {
                v
            }
        };
        let changes: [(u32, u8, u32); 8] = [
            (p([198, 19, 1, 128]), 25, 7), // a subtrie now
            (p([198, 19, 2, 0]), 23, 8),   // still one
            (p([198, 19, 1, 129]), 32, 6),
            (p([198, 19, 1, 128]), 25, 0), // the /32 keeps it a subtrie
            (p([198, 19, 1, 129]), 32, 0), // a ply again
            (p([198, 19, 255, 255]), 32, 5),
            (p([198, 19, 255, 255]), 32, 0),
            (p([198, 19, 0, 0]), 24, 3),
        ];
        for round in 0..3 {
            for &(k, l, v) in &changes {
                let before = t.clone();
                let answers: Vec<u32> = probes.iter().map(|&k| before.lookup(k)).collect();
                if v == 0 {
                    long.remove(&(k, l));
                } else {
                    long.insert((k, l), v + round);
                }
                apply(&mut t, &long, slot);
                t.check_arena();
                let has_long = long.keys().any(|&(k, l)| k >> 16 == slot as u32 && l > 24);
                assert_eq!(t.slot(p([198, 19, 0, 0])).ply().is_some(), !has_long);
                let mut out = vec![0; probes.len()];
                t.lookup_batch(&probes, &mut out);
                for (i, &k) in probes.iter().enumerate() {
                    assert_eq!(t.lookup(k), reference(&long, k), "key {k:#x}");
                    assert_eq!(out[i], reference(&long, k), "batched, key {k:#x}");
                    assert_eq!(before.lookup(k), answers[i], "the clone, key {k:#x}");
                }
            }
        }
        assert!(t.pages.len() < 12, "{} pages", t.pages.len());
    }

    fn a6(s: &str) -> u128 {
        u128::from(s.parse::<std::net::Ipv6Addr>().unwrap())
    }

    /// The bench's small IPv6 table with host routes in five /64s, too many plies for a
    /// ply trie: every route of slot 2001::/16 lies in 2001:db8::/34 and is longer, so
    /// its subtrie skips three levels; keys leaving those bits at any bit get the slot's
    /// value (the /16 route), the rest the walk's.
    #[test]
    fn skipped_levels_v6() {
        let a = a6;
        let mut m = BTreeMap::new();
        m.insert((a("2001::"), 16), 9);
        m.insert((a("2001:db8:100::"), 48), 2);
        m.insert((a("2001:db8:100:1::"), 64), 3);
        m.insert((a("2001:db8:200::"), 40), 4);
        m.insert((a("2001:db8:101::"), 48), 5);
        for i in 2..7 {
            m.insert((a(&format!("2001:db8:100:{i}::1")), 128), 6);
        }
        let t = compile(&m);
        assert!(t.slot(a("2001::")).ply().is_none());
        assert_eq!(t.slot(a("2001::")).skip().0, 3);
        let key = a("2001:db8:100::1");
        let mut probes: Vec<u128> = (16..128).map(|bit| key ^ (1u128 << (127 - bit))).collect();
        probes.push(key);
        let mut out = vec![0; probes.len()];
        t.lookup_batch(&probes, &mut out);
        for (i, &k) in probes.iter().enumerate() {
            assert_eq!(t.lookup(k), naive(&m, k), "key {k:#x}");
            assert_eq!(out[i], naive(&m, k), "batched, key {k:#x}");
        }
        assert_eq!(t.lookup(key), 2);
        assert_eq!(t.lookup(a("2001:db9::1")), 9);
    }

    /// Plies an IPv6 slot's routes take as a ply trie, counted apart from the code under
    /// test: the root ply below the 8-bit levels every route shares and is longer than
    /// (at most three), then one ply per distinct prefix at each 8-bit boundary some
    /// route is longer than.
    fn reference_plies(routes: &[Route<u128>]) -> usize {
        let mut root = DIRECT_BITS as u32;
        while root < DIRECT_BITS as u32 + 24
            && routes.iter().all(|r| r.1 as u32 > root + 8 && r.0 >> (120 - root) == routes[0].0 >> (120 - root))
        {
            root += 8;
        }
        let mut plies = std::collections::BTreeSet::new();
        for r in routes {
            let mut d = root + 8;
            while d < r.1 as u32 {
                plies.insert((d, r.0 >> (128 - d)));
                d += 8;
            }
        }
        1 + plies.len()
    }

    /// The bench's small IPv6 trie (ip6-forward: the gateway's own /128s, its
    /// interfaces' /64s, a /40, /48s and a /64 under one, all in 2001:db8::/32) is a ply
    /// trie skipping two levels; every key one bit away from each route's first and last
    /// address, and from the bench's destination, answers as the reference, one at a time
    /// and batched.
    #[test]
    fn ply_trie_v6_bench_table() {
        let a = a6;
        let mut m = BTreeMap::new();
        m.insert((a("2001::"), 16), 9);
        for (p, l, v) in [
            ("2001:db8::", 64, 10),
            ("2001:db8::1", 128, 1),
            ("2001:db8:1::", 64, 11),
            ("2001:db8:1::1", 128, 1),
            ("2001:db8:100::", 48, 2),
            ("2001:db8:100:1::", 64, 3),
            ("2001:db8:200::", 40, 4),
            ("2001:db8:101::", 48, 5),
        ] {
            m.insert((a(p), l), v);
        }
        let t = compile(&m);
        let slot = t.slot(a("2001::"));
        let long: Vec<Route<u128>> = m.iter().filter(|e| e.0 .1 > 16).map(|(&(k, l), &v)| (k, l, v)).collect();
        assert_eq!(reference_plies(&long), 25);
        assert_eq!(slot.ply().map(|p| p.1), Some(2));
        assert_eq!(t.subtrie_of(0x2001).1.len(), 1 + 25 * PLY);
        t.check_arena();
        let mut probes = vec![a("2001:db8:100::1"), a("2001:db9::1"), a("2001:db8:300::1")];
        for &(k, l) in m.keys() {
            probes.extend([k, k.last(l)]);
        }
        let flipped: Vec<u128> = probes.iter().flat_map(|&k| (16..128).map(move |bit| k ^ (1u128 << (127 - bit)))).collect();
        probes.extend(flipped);
        let mut out = vec![0; probes.len()];
        t.lookup_batch(&probes, &mut out);
        for (i, &k) in probes.iter().enumerate() {
            assert_eq!(t.lookup(k), naive(&m, k), "key {k:#x}");
            assert_eq!(out[i], naive(&m, k), "batched, key {k:#x}");
        }
        assert_eq!(t.lookup(a("2001:db8:100::1")), 2);
    }

    /// Values use every bit (ECMP groups are tag 15 in the top four): a slot whose routes
    /// would fit a ply trie but hold a value in the child range keeps a subtrie, one with
    /// values just below it gets the ply trie; both answer as the reference.
    #[test]
    fn v6_values_in_the_child_range_keep_a_subtrie() {
        let a = a6;
        for (high, ply) in [(PLY_CHILD - 1, true), (PLY_CHILD, false), (u32::MAX, false)] {
            let mut m = BTreeMap::new();
            m.insert((a("2001:db8:100::"), 48), 0xf000_0001);
            m.insert((a("2001:db8:100:1::"), 64), high);
            m.insert((a("2001:db8:200::"), 40), 4);
            let t = compile(&m);
            assert_eq!(t.slot(a("2001::")).ply().is_some(), ply, "value {high:#x}");
            for k in [a("2001:db8:100::1"), a("2001:db8:100:1::1"), a("2001:db8:200::1"), a("2001:db8:300::1")] {
                assert_eq!(t.lookup(k), naive(&m, k), "key {k:#x}, value {high:#x}");
            }
        }
    }

    /// An IPv6 /16 crossing between a ply trie and a subtrie as host routes in new /64s
    /// come (each adds plies) and go, beside a /16 that stays a ply trie: the shape
    /// changes exactly when the reference count of plies passes the limit, the updated
    /// slot equals a fresh compile, lookups (one at a time and batched) match the
    /// reference after every change, the arena's accounting holds, and a clone taken
    /// before each change keeps answering as it did.
    #[test]
    fn v6_slots_cross_between_ply_trie_and_subtrie() {
        let a = a6;
        let mut t = Poptrie::<u128>::empty();
        let mut m: BTreeMap<(u128, u8), u32> = BTreeMap::new();
        for (p, l, v) in [("2001:db8:100::", 48, 2), ("2001:db8:100:1::", 64, 3), ("2001:db8:200::", 40, 4), ("2400:cb00:2::", 48, 7)] {
            m.insert((a(p), l), v);
        }
        let apply = |t: &mut Poptrie<u128>, m: &BTreeMap<(u128, u8), u32>, slot: usize, changed: (u128, u8)| {
            let routes: Vec<Route<u128>> = m.iter().filter(|e| e.0 .0 >> 112 == slot as u128).map(|(&(k, l), &v)| (k, l, v)).collect();
            t.update_slot_routes(slot, &routes, Some(&[changed]));
            let mut fresh = Poptrie::<u128>::empty();
            fresh.set_slot_routes(slot, &routes);
            assert!(t.subtrie_of(slot) == fresh.subtrie_of(slot), "slot {slot:#x} differs from a fresh compile");
            routes
        };
        for (k, l) in m.clone().into_keys() {
            apply(&mut t, &m, (k >> 112) as usize, (k, l));
        }
        let hosts: Vec<(u128, u8)> = (2..9).map(|i| (a(&format!("2001:db8:100:{i}::5")), 128)).collect();
        let (mut was_ply, mut crossings) = (true, 0);
        let ops = hosts.iter().map(|&h| (h, 8)).chain(hosts.iter().rev().map(|&h| (h, 0)));
        for ((k, l), v) in ops {
            let before = t.clone();
            let old = m.clone();
            if v == 0 {
                m.remove(&(k, l));
            } else {
                m.insert((k, l), v);
            }
            let routes = apply(&mut t, &m, 0x2001, (k, l));
            t.check_arena();
            let is_ply = t.slot(a("2001::")).ply().is_some();
            assert_eq!(is_ply, reference_plies(&routes) <= <u128 as LpmKey>::MAX_PLIES, "{} routes", routes.len());
            crossings += (is_ply != was_ply) as u32;
            was_ply = is_ply;
            assert!(t.slot(a("2400:cb00::")).ply().is_some());
            let mut probes = vec![a("2001:db8:100::1"), a("2400:cb00:2::1"), a("2400:cb00:3::1")];
            for &(k, l) in m.keys().chain(old.keys()) {
                probes.extend([k, k.last(l), k ^ 1, k ^ (1 << 64), k ^ (1 << 100)]);
            }
            let mut out = vec![0; probes.len()];
            t.lookup_batch(&probes, &mut out);
            for (i, &k) in probes.iter().enumerate() {
                assert_eq!(t.lookup(k), naive(&m, k), "key {k:#x}");
                assert_eq!(out[i], naive(&m, k), "batched, key {k:#x}");
                assert_eq!(before.lookup(k), naive(&old, k), "the clone before, key {k:#x}");
            }
        }
        assert_eq!(crossings, 2, "to a subtrie and back");
        assert!(was_ply);
    }

    /// Routes nested under one longer prefix, so subtries skip levels: lookups, one at a
    /// time and batched, match the reference for keys that leave the shared bits at
    /// every position.
    fn check_shared<K: LpmKey>(m: &BTreeMap<(K, u8), u32>, mut probes: Vec<K>, flip: impl Fn(K, u8) -> K) -> Result<(), TestCaseError> {
        let t = compile(m);
        for &(k, l) in m.keys() {
            probes.push(k);
            probes.push(k.last(l));
            for bit in 0..K::BITS {
                probes.push(flip(k, bit));
            }
        }
        let mut out = vec![0; probes.len()];
        t.lookup_batch(&probes, &mut out);
        for (i, &k) in probes.iter().enumerate() {
            prop_assert_eq!(t.lookup(k), naive(m, k), "key {:?}", k);
            prop_assert_eq!(out[i], naive(m, k), "batched, key {:?}", k);
        }
        Ok(())
    }

    fn arb_routes_v4() -> impl Strategy<Value = BTreeMap<(u32, u8), u32>> {
        // Keys concentrated in a few /8s so prefixes nest and collide.
        proptest::collection::vec((0u32..4, any::<u32>(), 0u8..=32, 1u32..1000), 0..200).prop_map(|v| {
            v.into_iter()
                .map(|(hi, lo, len, val)| {
                    let k = (hi << 30) | (lo >> 2);
                    ((k.masked(len), len), val)
                })
                .collect()
        })
    }

    fn arb_routes_v6() -> impl Strategy<Value = BTreeMap<(u128, u8), u32>> {
        proptest::collection::vec((0u128..4, any::<u128>(), 0u8..=128, 1u32..1000), 0..200).prop_map(|v| {
            v.into_iter()
                .map(|(hi, lo, len, val)| {
                    let k = (hi << 126) | (lo >> 2);
                    ((k.masked(len), len), val)
                })
                .collect()
        })
    }

    proptest! {
        // Each case compiles and checks the arena after every batch (a scan of the
        // direct table): fewer cases than the default keep a debug run in tens of seconds.
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// IPv6 changes in slot 2001::/16, in 2001:db8::/32 and three more dense /32s
        /// beside it, lengths from /17 to /128 (so subtries skip levels and stop
        /// skipping), one change at a time and in batches.
        #[test]
        fn v6_updates_match_fresh_compile(raw in proptest::collection::vec((0u128..4, any::<u128>(), prop::sample::select(vec![17u8, 24, 30, 32, 33, 36, 40, 44, 47, 48, 48, 48, 52, 56, 64, 96, 127, 128]), prop::sample::select(vec![0u32, 1, 2, 3, 7])), 1..120), batch in 1usize..6) {
            let ops: Vec<(u128, u8, u32)> = raw.into_iter().map(|(d, lo, l, v)| ([0x2001_0db8u128, 0x2001_0db9, 0x2001_0dba, 0x2001_ff00][d as usize] << 96 | lo >> 32, l, v)).collect();
            check_updates(0x2001, &ops, batch)?;
        }

        /// The same for IPv4: changes in 198.18.0.0/16, some dense /24s, /17 to /32.
        #[test]
        fn v4_updates_match_fresh_compile(raw in proptest::collection::vec((0u32..4, any::<u32>(), prop::sample::select(vec![17u8, 18, 20, 22, 23, 24, 24, 25, 28, 30, 32]), prop::sample::select(vec![0u32, 1, 2, 3, 7])), 1..120), batch in 1usize..6) {
            let ops: Vec<(u32, u8, u32)> = raw.into_iter().map(|(d, lo, l, v)| (0xc612_0000 | d << 8 | (lo & 0xff) | if l < 24 { lo & 0xff00 } else { 0 }, l, v)).collect();
            check_updates(0xc612, &ops, batch)?;
        }
    }

    /// IPv4 changes over four /16s, mostly /17–/24 (plies) with now and then a longer
    /// route that turns its /16 into a subtrie until it goes: after every batch every
    /// route's first and last address answers as the reference, the arena's accounting
    /// holds, and each changed slot is what a fresh compile of its routes makes.
    fn check_ply_churn<K: LpmKey>(
        ops: &[(K, u8, u32)],
        batch: usize,
        is_ply: impl Fn(&[Route<K>]) -> bool,
        flips: impl Fn(K) -> [K; 2],
    ) -> Result<(), TestCaseError> {
        let mut t = Poptrie::<K>::empty();
        let mut m: BTreeMap<(K, u8), u32> = BTreeMap::new();
        for chunk in ops.chunks(batch.max(1)) {
            let mut touched: Vec<usize> = Vec::new();
            for &(k, l, v) in chunk {
                let k = k.masked(l);
                if v == 0 {
                    m.remove(&(k, l));
                } else {
                    m.insert((k, l), v);
                }
                touched.push(k.top(DIRECT_BITS));
            }
            touched.sort_unstable();
            touched.dedup();
            for &slot in &touched {
                let routes: Vec<Route<K>> =
                    m.iter().filter(|(&(k, _), _)| k.top(DIRECT_BITS) == slot).map(|(&(k, l), &v)| (k, l, v)).collect();
                t.set_slot_routes(slot, &routes);
                let mut fresh = Poptrie::<K>::empty();
                fresh.set_slot_routes(slot, &routes);
                prop_assert!(t.subtrie_of(slot) == fresh.subtrie_of(slot), "slot {:#x} differs from a fresh compile", slot);
                prop_assert_eq!(t.chunks[slot / CHUNK][slot % CHUNK].ply().is_some(), !routes.is_empty() && is_ply(&routes));
            }
            t.check_arena();
            for &(k, l) in m.keys() {
                prop_assert_eq!(t.lookup(k), naive(&m, k));
                prop_assert_eq!(t.lookup(k.last(l)), naive(&m, k.last(l)));
            }
            let probes: Vec<K> = m.keys().flat_map(|&(k, l)| [k, k.last(l)].into_iter().chain(flips(k))).collect();
            let mut out = vec![0; probes.len()];
            t.lookup_batch(&probes, &mut out);
            for (i, &k) in probes.iter().enumerate() {
                prop_assert_eq!(out[i], naive(&m, k), "batched, key {:?}", k);
                prop_assert_eq!(t.lookup(k), naive(&m, k), "key {:?}", k);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn ply_churn_matches_reference(raw in proptest::collection::vec((0u32..4, any::<u32>(), prop::sample::select(vec![17u8, 20, 22, 23, 24, 24, 24, 24, 24, 25, 28, 32]), prop::sample::select(vec![0u32, 0, 1, 2, 3, 7])), 1..200), batch in 1usize..6) {
            let ops: Vec<(u32, u8, u32)> = raw.into_iter().map(|(d, lo, l, v)| ((0xc612 + d) << 16 | (lo & 0x0f81), l, v)).collect();
            check_ply_churn(&ops, batch, |r| r.iter().all(|r| r.1 <= 24), |k| [k ^ 0x80, k ^ 0x8000])?;
        }

        /// IPv6 /16s crossing between ply tries and subtries: routes clustered on a few
        /// bits (so they share plies and skipped levels, and deep ones pass the limit).
        #[test]
        fn v6_ply_churn_matches_reference(raw in proptest::collection::vec((0u128..3, any::<u128>(), prop::sample::select(vec![17u8, 24, 31, 32, 33, 40, 47, 48, 48, 56, 64, 64, 72, 100, 128]), prop::sample::select(vec![0u32, 0, 1, 2, 3, 7])), 1..160), batch in 1usize..6) {
            let bits = [31, 39, 47, 55, 63, 100, 127].iter().fold(0u128, |m, b| m | 1 << (127 - b));
            let ops: Vec<(u128, u8, u32)> = raw.into_iter().map(|(d, lo, l, v)| ((0x2001 + d) << 112 | 0x0db8 << 96 | (lo & bits), l, v)).collect();
            check_ply_churn(&ops, batch, |r| reference_plies(r) <= <u128 as LpmKey>::MAX_PLIES, |k| [k ^ 1 << 64, k ^ 1 << 88])?;
        }
    }

    proptest! {
        #[test]
        fn v4_matches_naive(m in arb_routes_v4(), keys in proptest::collection::vec(any::<u32>(), 64)) {
            let t = compile(&m);
            let mut probes: Vec<u32> = keys.iter().map(|k| (k & 0xc000_0000) | (k >> 2) ).collect();
            // Also probe each route's own first and last address.
            for &(k, l) in m.keys() { probes.push(k); probes.push(k | if l == 32 { 0 } else { u32::MAX >> l }); }
            let mut out = vec![0u32; probes.len()];
            t.lookup_batch(&probes, &mut out);
            for (i, &k) in probes.iter().enumerate() {
                prop_assert_eq!(t.lookup(k), naive(&m, k), "key {:#x}", k);
                prop_assert_eq!(out[i], naive(&m, k));
            }
        }

        #[test]
        fn v4_shared_prefix_matches_naive(base in any::<u32>(), shared in 16u8..=30, routes in proptest::collection::vec((any::<u32>(), 0u8..=32, 1u32..1000), 1..40)) {
            let base = base.masked(shared);
            let m: BTreeMap<(u32, u8), u32> = routes.into_iter().map(|(lo, len, v)| {
                // Mostly inside the shared prefix and longer; a few short ones over it.
                let len = if len < 8 { len } else { len.max(shared + 1).min(32) };
                ((base | (lo >> shared)).masked(len), len, v)
            }).map(|(k, l, v)| ((k, l), v)).collect();
            check_shared(&m, vec![base, base.last(shared)], |k, bit| k ^ (1u32 << (31 - bit)))?;
        }

        #[test]
        fn v6_shared_prefix_matches_naive(base in any::<u128>(), shared in 16u8..=60, routes in proptest::collection::vec((any::<u128>(), 0u8..=128, 1u32..1000), 1..40)) {
            let base = base.masked(shared);
            let m: BTreeMap<(u128, u8), u32> = routes.into_iter().map(|(lo, len, v)| {
                let len = if len < 12 { len } else { len.max(shared + 1).min(128) };
                ((base | (lo >> shared)).masked(len), len, v)
            }).map(|(k, l, v)| ((k, l), v)).collect();
            check_shared(&m, vec![base, base.last(shared)], |k, bit| k ^ (1u128 << (127 - bit)))?;
        }

        #[test]
        fn v6_matches_naive(m in arb_routes_v6(), keys in proptest::collection::vec(any::<u128>(), 64)) {
            let t = compile(&m);
            let mut probes: Vec<u128> = keys.iter().map(|k| (k & (3u128 << 126)) | (k >> 2)).collect();
            for &(k, l) in m.keys() { probes.push(k); probes.push(k | if l == 128 { 0 } else { u128::MAX >> l }); }
            for &k in &probes {
                prop_assert_eq!(t.lookup(k), naive(&m, k), "key {:#x}", k);
            }
        }
    }
}
