//! The per-worker UPF context: the tables version the worker holds, its usage cells (read
//! by the control plane), its MBR token buckets and its queue of events for the control
//! plane.

use crate::buffering::{self, HeldPackets};
use crate::tables::UpfTables;
use arc_swap::{ArcSwap, Cache};
use crossbeam_channel::Sender;
use ip::HasIp;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// What the UPF nodes tell the control plane (`try_send`; a full queue loses the event
/// and the node counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpfEvent {
    /// The first downlink packet held for a session (on this worker) whose FAR buffers and
    /// notifies (BUFF with NOCP): the SMF wants a Downlink Data Report.
    DownlinkData { seid: u64, pdr_id: u16 },
}

/// One slot's line on one worker: the counts of the URR with this slot and the token
/// bucket of the QER with this slot, side by side. The QER and URR allocators hand out
/// slots in the same order, so a session with one QER and one URR (as an SMF usually sets
/// them up) has both at one slot: a packet reads one line for its MBR and its usage
/// where two arrays cost two (docs/PERFORMANCE.md, the UPF section).
///
/// The URR half: `generation` tells a reused slot's counts from its previous owner's:
/// the worker restarts the counts when the rule's generation differs, the control plane
/// ignores a cell whose generation is not the rule's. The bucket half is the worker's
/// alone (atomics only because the line is shared with the control plane's reads).
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct UsageCell {
    generation: AtomicU32,
    bucket_generation: AtomicU32,
    ul_bytes: AtomicU64,
    dl_bytes: AtomicU64,
    ul_packets: AtomicU64,
    dl_packets: AtomicU64,
    /// Bytes × clock ticks per second, low and high words.
    bucket_scaled: [AtomicU64; 2],
    bucket_last: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<UsageCell>() == 64, "a slot's counts and bucket are one line");

/// Counts read from the cells.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub ul_bytes: u64,
    pub dl_bytes: u64,
    pub ul_packets: u64,
    pub dl_packets: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        self.ul_bytes += o.ul_bytes;
        self.dl_bytes += o.dl_bytes;
        self.ul_packets += o.ul_packets;
        self.dl_packets += o.dl_packets;
    }
}

/// A worker's URR counting cells and MBR buckets ([`UsageCell`]), indexed by URR and
/// QER slot. The worker is the only writer (plain load + store, no read-modify-write),
/// the control plane reads the counts; a fixed size (allocated once, so its alignment
/// costs no `memalign` holes) so the packet path never allocates.
pub struct UsageCells {
    cells: Box<[UsageCell]>,
}

impl UsageCells {
    pub fn new(slots: usize) -> Arc<UsageCells> {
        Arc::new(UsageCells { cells: (0..slots).map(|_| UsageCell::default()).collect() })
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Count one packet of `bytes` (the worker's side).
    #[inline(always)]
    pub fn count(&self, slot: u32, generation: u32, uplink: bool, bytes: u64) {
        let Some(c) = self.cells.get(slot as usize) else { return };
        if c.generation.load(Relaxed) != generation {
            for a in [&c.ul_bytes, &c.dl_bytes, &c.ul_packets, &c.dl_packets] {
                a.store(0, Relaxed);
            }
            c.generation.store(generation, Relaxed);
        }
        let (b, p) = if uplink { (&c.ul_bytes, &c.ul_packets) } else { (&c.dl_bytes, &c.dl_packets) };
        b.store(b.load(Relaxed) + bytes, Relaxed);
        p.store(p.load(Relaxed) + 1, Relaxed);
    }

    /// Start loading a slot's cell (the prefetch pass of the UPF nodes).
    #[inline(always)]
    pub fn prefetch(&self, slot: u32) {
        if let Some(c) = self.cells.get(slot as usize) {
            engine::prefetch::read(c);
        }
    }

    /// The counts of a slot for this generation (the control plane's side).
    pub fn read(&self, slot: u32, generation: u32) -> Usage {
        match self.cells.get(slot as usize) {
            Some(c) if c.generation.load(Relaxed) == generation => Usage {
                ul_bytes: c.ul_bytes.load(Relaxed),
                dl_bytes: c.dl_bytes.load(Relaxed),
                ul_packets: c.ul_packets.load(Relaxed),
                dl_packets: c.dl_packets.load(Relaxed),
            },
            _ => Usage::default(),
        }
    }
}

/// A bucket holds this long's worth of the rate: long enough that a sender's scheduling
/// gaps and catch-up bursts do not cost it its rate (10 ms passed a third of the MBR from
/// a Python sender on a loaded machine, docs/PERFORMANCE.md), short enough that a
/// second's volume stays within a tenth of the MBR even from a full bucket.
pub const BURST_MS: u64 = 100;
/// …and at least this many bytes (two full-sized packets).
pub const MIN_BURST: u64 = 3000;

/// What one of `workers` workers polices a QER's MBR at: its share of the MBR, but never
/// less than the GBR (up to the MBR). A UPF does not make a guarantee happen — the
/// GFBR is the RAN's to schedule (TS 23.501 §5.7.2.5) and the UPF enforces the MFBR —
/// but with per-worker shares a GBR flow whose packets all reach one worker would get
/// only `MBR / workers`, below its guarantee; so each share is at least the GBR. The
/// cost: a GBR QER's traffic spread over several workers may pass up to
/// `workers × GBR` in all (still at most `workers × MBR / workers` per worker).
#[inline]
pub fn mbr_share(mbr: u64, gbr: Option<u64>, workers: u32) -> u64 {
    let share = mbr / workers.max(1) as u64;
    share.max(gbr.unwrap_or(0).min(mbr)).max(1)
}

/// A worker's MBR token buckets, indexed by QER slot: the bucket halves of its usage
/// cells' lines ([`UsageCell`]), or lines of its own.
pub struct Policer {
    lines: Arc<UsageCells>,
    hz: u64,
}

impl Policer {
    pub fn new(slots: usize) -> Policer {
        Policer::sharing(UsageCells::new(slots))
    }

    /// Buckets in the lines of `cells` (the worker's own).
    pub fn sharing(cells: Arc<UsageCells>) -> Policer {
        Policer { lines: cells, hz: engine::clock::hz().max(1) }
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Start loading a slot's bucket (the prefetch pass of the UPF nodes).
    #[inline(always)]
    pub fn prefetch(&self, slot: u32) {
        self.lines.prefetch(slot);
    }

    /// Take `bytes` from a QER's bucket at `now` (clock ticks); false: over the MBR.
    /// `rate`: this worker's share, bytes per second. A bucket starts full for a new
    /// generation; it holds bytes scaled by the clock rate, so refills are exact integer
    /// arithmetic at any rate.
    #[inline]
    pub fn police(&mut self, slot: u32, generation: u32, rate: u64, bytes: u64, now: u64) -> bool {
        let hz = self.hz as u128;
        let Some(b) = self.lines.cells.get(slot as usize) else { return true };
        let burst = ((rate * BURST_MS / 1000).max(MIN_BURST)) as u128 * hz;
        let [lo, hi] = &b.bucket_scaled;
        let (mut scaled, last) = if b.bucket_generation.load(Relaxed) != generation {
            b.bucket_generation.store(generation, Relaxed);
            (burst, now)
        } else {
            ((hi.load(Relaxed) as u128) << 64 | lo.load(Relaxed) as u128, b.bucket_last.load(Relaxed))
        };
        let elapsed = now.saturating_sub(last) as u128;
        scaled = (scaled + elapsed * rate as u128).min(burst);
        let need = bytes as u128 * hz;
        let pass = scaled >= need;
        if pass {
            scaled -= need;
        }
        lo.store(scaled as u64, Relaxed);
        hi.store((scaled >> 64) as u64, Relaxed);
        b.bucket_last.store(now, Relaxed);
        pass
    }
}

/// Error Indications a second per worker unless configured (`[gtpu] replies_per_sec`).
pub const DEFAULT_REPLIES_PER_SEC: u64 = 100;

pub struct UpfContext {
    cache: Cache<Arc<ArcSwap<UpfTables>>, Arc<UpfTables>>,
    pub tables: Arc<UpfTables>,
    pub usage: Arc<UsageCells>,
    pub policer: Policer,
    pub events: Option<Sender<UpfEvent>>,
    /// Downlink packets held for sessions whose FAR buffers.
    pub held: HeldPackets,
    /// Error Indications sent for G-PDUs to TEIDs no session has (the `[gtpu]` reply
    /// rate: they replace gtpu-input's own when the UPF takes the unknown TEIDs).
    pub replies: ip::context::TokenBucket,
}

impl UpfContext {
    /// `qer_slots`: how many QER buckets this worker keeps (the control plane allocates
    /// QER slots below it): in the lines of `usage` when it has as many.
    pub fn new(shared: Arc<ArcSwap<UpfTables>>, usage: Arc<UsageCells>, qer_slots: usize, events: Option<Sender<UpfEvent>>) -> Self {
        let tables = shared.load_full();
        let policer = if usage.len() >= qer_slots { Policer::sharing(Arc::clone(&usage)) } else { Policer::new(qer_slots) };
        UpfContext {
            cache: Cache::new(shared),
            tables,
            usage,
            policer,
            events,
            held: HeldPackets::new(buffering::DEFAULT_CAPACITY, buffering::DEFAULT_PER_SESSION),
            replies: ip::context::TokenBucket::reply_limit(DEFAULT_REPLIES_PER_SEC),
        }
    }

    /// Send at most `per_sec` Error Indications a second from this worker.
    pub fn with_replies(mut self, per_sec: u64) -> Self {
        self.replies = ip::context::TokenBucket::reply_limit(per_sec);
        self
    }

    /// Hold up to `capacity` buffered packets on this worker, `per_session` of one session,
    /// keeping `gauge` at the count held.
    pub fn with_buffering(mut self, capacity: usize, per_session: usize, gauge: Arc<AtomicU64>) -> Self {
        self.held = HeldPackets::new(capacity, per_session).reporting_to(gauge);
        self
    }

    /// Pick up a newly published table version.
    #[inline]
    pub fn refresh(&mut self) {
        let t = self.cache.load();
        if !Arc::ptr_eq(t, &self.tables) {
            self.tables = Arc::clone(t);
        }
    }

    pub fn report(&self, ev: UpfEvent) -> bool {
        match &self.events {
            Some(tx) => tx.try_send(ev).is_ok(),
            None => true,
        }
    }
}

/// A worker context with the UPF part (the IP nodes run in the same graph).
pub trait HasUpf: HasIp {
    fn upf(&mut self) -> &mut UpfContext;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_restarts_for_a_new_generation_and_is_read_only_for_its_own() {
        let u = UsageCells::new(2);
        u.count(1, 7, true, 100);
        u.count(1, 7, false, 40);
        u.count(1, 7, true, 1);
        assert_eq!(u.read(1, 7), Usage { ul_bytes: 101, dl_bytes: 40, ul_packets: 2, dl_packets: 1 });
        assert_eq!(u.read(1, 8), Usage::default(), "another generation's counts");
        u.count(1, 8, false, 5);
        assert_eq!(u.read(1, 8), Usage { ul_bytes: 0, dl_bytes: 5, ul_packets: 0, dl_packets: 1 });
        u.count(9, 1, true, 5); // past the cells: ignored, no panic
    }

    /// A slot's counts and its bucket share a line: neither disturbs the other, whatever
    /// the generations.
    #[test]
    fn a_slots_bucket_and_counts_keep_apart() {
        let u = UsageCells::new(2);
        let mut p = Policer::sharing(Arc::clone(&u));
        u.count(1, 3, true, 100);
        assert!(p.police(1, 3, 1_000_000, 1000, 0), "a new bucket is full: 100 ms of the rate");
        u.count(1, 3, false, 7);
        assert_eq!(u.read(1, 3), Usage { ul_bytes: 100, dl_bytes: 7, ul_packets: 1, dl_packets: 1 });
        assert!(p.police(1, 3, 1_000_000, 99_000, 0));
        u.count(1, 4, true, 5);
        assert!(!p.police(1, 3, 1_000_000, 1, 0), "the counts' new generation left the bucket empty");
        assert_eq!(u.read(1, 4), Usage { ul_bytes: 5, dl_bytes: 0, ul_packets: 1, dl_packets: 0 });
        assert_eq!(u.read(0, 3), Usage::default());
    }

    /// Virtual time, four workers: a GBR QER whose traffic all reaches one worker gets its
    /// guaranteed rate there (over one simulated second), where the plain share would
    /// give a quarter of the MBR; a non-GBR QER gets the quarter.
    #[test]
    fn a_gbr_flow_on_one_worker_gets_its_guarantee() {
        let (mbr, gbr) = (4_000_000u64, 2_500_000u64);
        assert_eq!(mbr_share(mbr, None, 4), 1_000_000);
        assert_eq!(mbr_share(mbr, Some(gbr), 4), gbr);
        assert_eq!(mbr_share(mbr, Some(9_000_000), 4), mbr, "a GBR above the MBR is capped by it");
        assert_eq!(mbr_share(mbr, Some(gbr), 1), mbr);
        for (g, want_min, want_max) in [(Some(gbr), gbr, gbr + 400_000), (None, 1_000_000, 1_000_000 + 200_000)] {
            let mut c = Policer::new(1);
            let hz = c.hz;
            let share = mbr_share(mbr, g, 4);
            let step = hz / 5000; // 5000 offers of 1000 bytes: 5 MB/s offered
            let passed: u64 = (0..5000u64).filter(|i| c.police(0, 1, share, 1000, i * step)).count() as u64 * 1000;
            assert!(passed >= want_min - 1000 && passed <= want_max, "{g:?}: {passed}");
        }
    }

    /// Virtual time: over one simulated second of back-to-back offers, what passes is
    /// the rate plus at most the initial burst.
    #[test]
    fn bucket_passes_the_rate_over_a_second() {
        let mut c = Policer::new(2);
        let hz = c.hz;
        let rate = 1_250_000u64; // 10 Mbit/s
        let mut passed = 0u64;
        let step = hz / 20_000; // 20 000 offers per second of 1000 bytes: 20 MB/s offered
        for i in 0..20_000u64 {
            if c.police(0, 1, rate, 1000, i * step) {
                passed += 1000;
            }
        }
        let burst = (rate * BURST_MS / 1000).max(MIN_BURST);
        assert!(passed <= rate + burst + 1000, "{passed}");
        assert!(passed >= rate - 1000, "{passed}");
        // A new generation starts with a full bucket.
        assert!(c.police(0, 2, rate, 1000, 20_000 * step));
        // A slot past the buckets is not policed.
        assert!(c.police(5, 1, 1, 1_000_000, 0));
    }
}
