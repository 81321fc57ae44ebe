//! Fragment reassembly for packets addressed to the gateway (above all a tunnel's outer
//! packets that a path fragmented), as a sans-IO table: fragments go in with their
//! offset, length and flags; a whole datagram's data comes out. The nodes
//! `ip4-reassembly` and `ip6-reassembly` parse the headers and build the packet.
//!
//! Every resource is bounded: the number of datagrams in progress, per source address
//! too, the bytes held, and the time a datagram may take. A flood of first fragments
//! fills the table to its cap and no further (each refusal is counted); it cannot grow
//! memory or evict datagrams that are completing. Overlapping fragments end their
//! datagram (RFC 5722 for IPv6; Linux does the same for IPv4); an exact duplicate is
//! dropped alone.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How much reassembly a worker may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassemblyLimits {
    /// Datagrams in progress.
    pub max_datagrams: usize,
    /// Datagrams in progress from one source address.
    pub max_per_source: usize,
    /// Bytes of fragment data held over all datagrams.
    pub max_bytes: usize,
    /// Time from a datagram's first fragment to its completion.
    pub timeout: Duration,
}

impl Default for ReassemblyLimits {
    fn default() -> Self {
        // Linux's defaults are 30 s (IPv4) / 60 s (IPv6) and 4 MiB per namespace; a
        // tunnel's fragments arrive back to back, so a shorter time frees state sooner.
        // A tunnel peer is one source sending many datagrams: it may hold a quarter of
        // the table (a vector's worth of datagrams in flight).
        ReassemblyLimits { max_datagrams: 1024, max_per_source: 256, max_bytes: 4 << 20, timeout: Duration::from_secs(3) }
    }
}

/// The most pieces one datagram may arrive in (a 64 KiB datagram in 256-byte pieces):
/// more is an attack on the reassembler, not a path's fragmentation.
const MAX_PIECES: usize = 256;
/// Time Exceeded messages waiting to be sent, at most.
const MAX_EXPIRED_QUOTES: usize = 16;
/// Finished datagrams' vectors kept for reuse: a vector's worth of datagrams, so a
/// steady flow of fragmented packets allocates nothing.
const SPARE: usize = 256;

/// A datagram's identity: source, destination, identification, and (IPv4) protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragKey<A> {
    pub src: A,
    pub dst: A,
    pub ident: u32,
    pub proto: u8,
}

/// One fragment, as the node parsed it.
#[derive(Debug, Clone, Copy)]
pub struct Fragment<'a> {
    /// Offset of `data` in the datagram's fragmentable part, in bytes.
    pub offset: usize,
    pub more: bool,
    pub data: &'a [u8],
    /// For the first fragment: the headers the whole datagram starts with.
    pub header: Option<&'a [u8]>,
    /// For the first fragment: its start as received, quoted in the ICMP Time Exceeded
    /// (fragment reassembly time exceeded) sent if the datagram times out.
    pub quote: Option<&'a [u8]>,
}

/// How much of a first fragment is kept for a Time Exceeded message: what fits an
/// IPv4 ICMP error in 576 bytes (RFC 1812 §4.3.2.3).
pub const QUOTE_LEN: usize = 576 - 28;

/// What inserting a fragment did.
#[derive(Debug, PartialEq, Eq)]
pub enum Insert {
    /// Kept; the datagram is not whole yet.
    Pending,
    /// The datagram is whole: its first fragment's headers and its data.
    Complete { header: Vec<u8>, data: Vec<u8> },
    /// The same piece again: the fragment dropped, the datagram kept.
    Duplicate,
    /// Overlaps another piece differently: the datagram dropped with it.
    Overlap,
    /// Lengths that disagree (a piece past the end, two different ends, a non-final
    /// piece not a multiple of 8, a datagram over the maximum): datagram dropped.
    Inconsistent,
    /// The table is at its cap of datagrams or bytes: the fragment refused.
    Full,
    /// This source is at its cap of datagrams: the fragment refused.
    SourceFull,
}

struct Datagram {
    header: Vec<u8>,
    data: Vec<u8>,
    quote: Vec<u8>,
    /// Received pieces as sorted, disjoint byte ranges, and their total.
    have: Vec<(usize, usize)>,
    received: usize,
    /// The datagram's data length, once the last fragment came.
    end: Option<usize>,
    deadline: Instant,
}

/// The datagrams a worker is reassembling for one address family.
pub struct Reassembly<A> {
    // SipHash with a random key: identifications come from outside, and a table keyed by
    // them must not be steerable into one bucket.
    datagrams: HashMap<FragKey<A>, Datagram>,
    per_source: HashMap<A, usize>,
    bytes: usize,
    limits: ReassemblyLimits,
    /// The most data a datagram may have (65535 less the minimum header for IPv4).
    max_len: usize,
    next_sweep: Option<Instant>,
    /// Vectors of finished datagrams, reused by new ones.
    spare: Vec<(Vec<u8>, Vec<u8>, Vec<(usize, usize)>)>,
    /// Datagrams dropped unfinished at their deadline, for the node's counter.
    pub timed_out: u64,
    /// The quoted first fragments of datagrams that timed out, for the node to answer
    /// with ICMP Time Exceeded (code 1).
    pub expired_quotes: Vec<Vec<u8>>,
}

impl<A: Copy + Eq + Hash> Reassembly<A> {
    pub fn new(limits: ReassemblyLimits, max_len: usize) -> Self {
        Reassembly {
            datagrams: HashMap::new(),
            per_source: HashMap::new(),
            bytes: 0,
            limits,
            max_len,
            next_sweep: None,
            spare: Vec::new(),
            timed_out: 0,
            expired_quotes: Vec::new(),
        }
    }

    pub fn in_progress(&self) -> usize {
        self.datagrams.len()
    }

    pub fn bytes_held(&self) -> usize {
        self.bytes
    }

    /// Add a fragment of datagram `key` arriving at `now`.
    pub fn insert(&mut self, key: FragKey<A>, f: Fragment<'_>, now: Instant) -> Insert {
        self.sweep(now);
        let end = f.offset + f.data.len();
        if f.data.is_empty() || end > self.max_len || (f.more && f.data.len() % 8 != 0) {
            self.remove(&key);
            return Insert::Inconsistent;
        }
        // One hash for finding or starting the datagram (the key is SipHashed).
        let (count, bytes) = (self.datagrams.len(), self.bytes);
        let d = match self.datagrams.entry(key) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                if count >= self.limits.max_datagrams || bytes + end > self.limits.max_bytes {
                    return Insert::Full;
                }
                let n = self.per_source.entry(key.src).or_default();
                if *n >= self.limits.max_per_source {
                    return Insert::SourceFull;
                }
                *n += 1;
                let (mut header, mut data, mut have) = self.spare.pop().unwrap_or_default();
                header.clear();
                data.clear();
                have.clear();
                v.insert(Datagram { header, data, quote: Vec::new(), have, received: 0, end: None, deadline: now + self.limits.timeout })
            }
        };
        if d.have.len() >= MAX_PIECES {
            self.remove(&key);
            return Insert::Inconsistent;
        }
        // Where the piece goes among the sorted ranges, and whether it collides.
        let at = d.have.partition_point(|r| r.1 <= f.offset);
        if let Some(&(s, e)) = d.have.get(at) {
            if s < end {
                // The same bytes again, with the same last-or-not flag.
                let same_flags = f.more != (d.end == Some(end));
                if (s, e) == (f.offset, end) && same_flags {
                    return Insert::Duplicate;
                }
                self.remove(&key);
                return Insert::Overlap;
            }
        }
        let known_end = d.end.or(d.have.last().map(|r| r.1));
        let consistent =
            if f.more { d.end.is_none_or(|x| end <= x) } else { d.end.is_none_or(|x| x == end) && known_end.is_none_or(|x| x <= end) };
        if !consistent {
            self.remove(&key);
            return Insert::Inconsistent;
        }
        let grow = end.saturating_sub(d.data.len());
        if grow > 0 {
            if self.bytes + grow > self.limits.max_bytes {
                self.remove(&key);
                return Insert::Full;
            }
            d.data.resize(end, 0);
            self.bytes += grow;
        }
        d.data[f.offset..end].copy_from_slice(f.data);
        if !f.more {
            d.end = Some(end);
        }
        if let Some(h) = f.header {
            d.header.clear();
            d.header.extend_from_slice(h);
        }
        if let Some(q) = f.quote {
            d.quote = q[..q.len().min(QUOTE_LEN)].to_vec();
        }
        // Pieces are kept as they came (not merged), so a repeat is told from an overlap.
        d.have.insert(at, (f.offset, end));
        d.received += f.data.len();
        // Disjoint pieces adding up to the whole length cover it.
        let whole = d.end == Some(d.received) && !d.header.is_empty();
        if !whole {
            return Insert::Pending;
        }
        let d = self.remove(&key).expect("present");
        self.keep_spare(Vec::new(), Vec::new(), d.have);
        Insert::Complete { header: d.header, data: d.data }
    }

    /// Give back a completed datagram's vectors once copied out, so the next datagram
    /// reuses their memory instead of allocating (a few are kept; their bytes are
    /// bounded by the datagram size).
    pub fn recycle(&mut self, header: Vec<u8>, data: Vec<u8>) {
        self.keep_spare(header, data, Vec::new());
    }

    fn keep_spare(&mut self, header: Vec<u8>, data: Vec<u8>, have: Vec<(usize, usize)>) {
        let n = self.spare.len();
        match self.spare.last_mut() {
            // Pair one datagram's vectors back up: its ranges came back first.
            Some(last) if last.0.capacity() == 0 && last.1.capacity() == 0 && header.capacity() + data.capacity() > 0 => {
                last.0 = header;
                last.1 = data;
            }
            _ if n < SPARE => self.spare.push((header, data, have)),
            _ => {}
        }
    }

    fn remove(&mut self, key: &FragKey<A>) -> Option<Datagram> {
        let d = self.datagrams.remove(key)?;
        self.bytes -= d.data.len();
        if let Some(n) = self.per_source.get_mut(&key.src) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&key.src);
            }
        }
        Some(d)
    }

    /// Drop datagrams past their deadline; at most every tenth of the timeout, so the
    /// walk over the table is amortised over many fragments.
    pub fn sweep(&mut self, now: Instant) {
        if self.next_sweep.is_some_and(|t| now < t) || self.datagrams.is_empty() {
            return;
        }
        self.next_sweep = Some(now + self.limits.timeout / 10);
        let expired: Vec<FragKey<A>> = self.datagrams.iter().filter(|(_, d)| d.deadline <= now).map(|(k, _)| *k).collect();
        for k in expired {
            if let Some(d) = self.remove(&k) {
                // RFC 792 / RFC 8200 §4.5: the source hears of it if its first fragment
                // came (a bounded backlog; the ICMP node rate-limits what is sent).
                if !d.quote.is_empty() && self.expired_quotes.len() < MAX_EXPIRED_QUOTES {
                    self.expired_quotes.push(d.quote);
                }
            }
            self.timed_out += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(ident: u32) -> FragKey<u32> {
        FragKey { src: 1, dst: 2, ident, proto: 17 }
    }

    fn piece(data: &[u8], from: usize, to: usize) -> Fragment<'_> {
        Fragment {
            offset: from,
            more: to < data.len(),
            data: &data[from..to],
            header: (from == 0).then_some(&b"HDR"[..]),
            quote: (from == 0).then_some(&b"QUOTE"[..]),
        }
    }

    #[test]
    fn in_order_and_out_of_order_pieces_complete_once() {
        let data: Vec<u8> = (0..40).collect();
        let now = Instant::now();
        for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
            let mut r = Reassembly::new(ReassemblyLimits::default(), 65515);
            let cuts = [(0, 16), (16, 32), (32, 40)];
            let mut results = Vec::new();
            for i in order {
                results.push(r.insert(key(7), piece(&data, cuts[i].0, cuts[i].1), now));
            }
            assert_eq!(results[..2], [Insert::Pending, Insert::Pending]);
            assert_eq!(results[2], Insert::Complete { header: b"HDR".to_vec(), data: data.clone() });
            assert_eq!((r.in_progress(), r.bytes_held()), (0, 0));
        }
    }

    #[test]
    fn duplicates_are_dropped_alone_and_overlaps_end_the_datagram() {
        let data: Vec<u8> = (0..40).collect();
        let now = Instant::now();
        let mut r = Reassembly::new(ReassemblyLimits::default(), 65515);
        assert_eq!(r.insert(key(1), piece(&data, 0, 16), now), Insert::Pending);
        assert_eq!(r.insert(key(1), piece(&data, 0, 16), now), Insert::Duplicate);
        assert_eq!(r.insert(key(1), piece(&data, 8, 24), now), Insert::Overlap);
        assert_eq!(r.in_progress(), 0, "the whole datagram went");
        // A later piece alone is not the whole datagram.
        assert_eq!(r.insert(key(1), piece(&data, 16, 40), now), Insert::Pending);
        assert_eq!(r.insert(key(1), piece(&data, 24, 40), now), Insert::Overlap);
    }

    #[test]
    fn inconsistent_lengths_end_the_datagram() {
        let data: Vec<u8> = (0..64).collect();
        let now = Instant::now();
        let mut r = Reassembly::new(ReassemblyLimits::default(), 65515);
        // Two different ends.
        assert_eq!(r.insert(key(1), piece(&data[..40], 32, 40), now), Insert::Pending);
        assert_eq!(
            r.insert(key(1), Fragment { offset: 40, more: false, data: &data[40..48], header: None, quote: None }, now),
            Insert::Inconsistent
        );
        // A piece past the known end.
        assert_eq!(r.insert(key(2), piece(&data[..40], 32, 40), now), Insert::Pending);
        assert_eq!(
            r.insert(key(2), Fragment { offset: 40, more: true, data: &data[40..48], header: None, quote: None }, now),
            Insert::Inconsistent
        );
        // A non-final piece that is not a multiple of 8, and a datagram over the maximum.
        assert_eq!(
            r.insert(key(3), Fragment { offset: 0, more: true, data: &data[..12], header: Some(b"H"), quote: None }, now),
            Insert::Inconsistent
        );
        let mut small = Reassembly::new(ReassemblyLimits::default(), 32);
        assert_eq!(small.insert(key(4), piece(&data[..40], 32, 40), now), Insert::Inconsistent);
        assert_eq!(r.in_progress() + small.in_progress(), 0);
    }

    #[test]
    fn missing_pieces_time_out_and_free_their_state() {
        let data: Vec<u8> = (0..40).collect();
        let now = Instant::now();
        let limits = ReassemblyLimits { timeout: Duration::from_millis(100), ..ReassemblyLimits::default() };
        let mut r = Reassembly::new(limits, 65515);
        assert_eq!(r.insert(key(1), piece(&data, 0, 16), now), Insert::Pending);
        assert_eq!(r.insert(key(2), piece(&data, 16, 40), now), Insert::Pending);
        r.sweep(now + Duration::from_millis(150));
        assert_eq!((r.in_progress(), r.bytes_held(), r.timed_out), (0, 0, 2));
        // Only the datagram whose first fragment came is reported.
        assert_eq!(r.expired_quotes, [b"QUOTE".to_vec()]);
        // The late piece starts a new datagram rather than completing the old one.
        assert_eq!(r.insert(key(1), piece(&data, 16, 40), now + Duration::from_millis(160)), Insert::Pending);
    }

    #[test]
    fn a_flood_of_first_fragments_stops_at_the_caps() {
        let data = [0u8; 1024];
        let now = Instant::now();
        let limits = ReassemblyLimits { max_datagrams: 100, max_per_source: 10, max_bytes: 1 << 20, timeout: Duration::from_secs(3) };
        let mut r = Reassembly::new(limits, 65515);
        let mut refused = (0, 0);
        for src in 0..50u32 {
            for ident in 0..20 {
                match r.insert(FragKey { src, dst: 9, ident, proto: 17 }, piece(&data, 0, 512), now) {
                    Insert::Pending => {}
                    Insert::Full => refused.0 += 1,
                    Insert::SourceFull => refused.1 += 1,
                    other => panic!("{other:?}"),
                }
            }
        }
        assert_eq!(r.in_progress(), 100);
        // Sources 0–8 reach their cap of 10 (10 refusals each); the table fills during
        // source 9, whose remaining attempts and every later source's find it full.
        assert_eq!(refused, (50 * 20 - 100 - 9 * 10, 9 * 10));
        assert!(r.bytes_held() <= 100 * 512);
        // Byte cap: a table allowed 2 KiB takes four half-KiB first pieces.
        let mut tight = Reassembly::new(ReassemblyLimits { max_bytes: 2048, ..limits }, 65515);
        let kept = (0..10).filter(|&i| tight.insert(key(i), piece(&data, 0, 512), now) == Insert::Pending).count();
        assert_eq!(kept, 4);
    }

    proptest! {
        /// Any cut of a datagram into 8-byte-aligned pieces, delivered in any order with
        /// any duplicates, completes with the original data and nothing else.
        #[test]
        fn any_order_with_duplicates_completes_with_the_data(
            len in 1usize..3000,
            cuts in proptest::collection::vec(1usize..400, 1..10),
            order in any::<u64>(),
            dups in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let data: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
            let mut bounds = vec![0];
            for c in cuts {
                let next = bounds.last().unwrap() + c * 8;
                if next >= len { break; }
                bounds.push(next);
            }
            bounds.push(len);
            let mut pieces: Vec<(usize, usize)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
            for d in &dups {
                let p = pieces[d.index(pieces.len())];
                pieces.push(p);
            }
            let mut rng = order;
            for i in (1..pieces.len()).rev() {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                pieces.swap(i, (rng >> 33) as usize % (i + 1));
            }
            let mut r = Reassembly::new(ReassemblyLimits::default(), 65515);
            let now = Instant::now();
            let mut complete = 0;
            for (from, to) in pieces {
                match r.insert(key(3), piece(&data, from, to), now) {
                    Insert::Complete { data: got, .. } => { complete += 1; prop_assert_eq!(&got, &data); }
                    Insert::Pending | Insert::Duplicate => {}
                    other => prop_assert!(false, "{:?}", other),
                }
            }
            prop_assert!(complete >= 1);
        }
    }
}
