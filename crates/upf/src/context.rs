//! The per-worker UPF context: the tables version the worker holds, its usage cells (read
//! by the control plane), the MBR token buckets (shared by all workers) and its queue of
//! events for the control plane.

use crate::buffering::{self, HeldPackets};
use crate::mbr::Divisor;
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

/// One URR slot's counts on one worker, on a line of its own (no other worker's counts
/// beside them). `generation` tells a reused slot's counts from its previous owner's:
/// the worker restarts the counts when the rule's generation differs, the control plane
/// ignores a cell whose generation is not the rule's. The worker is the only writer
/// (atomics only because the control plane reads them).
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct UsageCell {
    generation: AtomicU32,
    ul_bytes: AtomicU64,
    dl_bytes: AtomicU64,
    ul_packets: AtomicU64,
    dl_packets: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<UsageCell>() == 64, "a slot's counts are one line");

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

/// A worker's URR counting cells ([`UsageCell`]), indexed by URR slot. The worker is the only writer (plain load + store, no read-modify-write),
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

/// One direction of one QER: its MBR token bucket, shared by every worker, on a line of
/// its own (a QER's uplink and downlink usually reach different workers). The bucket is
/// kept as GCRA's theoretical arrival time (ITU-T I.371): `tat` is when the bucket would
/// be full again, so it holds `(now + burst time − tat) × rate` bytes, at most the
/// burst. One word is the whole state, so a worker takes bytes with one compare-and-swap
/// and no lock; a dropped packet writes nothing.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct QerBucket {
    /// The QER's generation the bucket is for: another one restarts it full.
    generation: AtomicU32,
    /// Clock ticks; 0 (long past): full.
    tat: AtomicU64,
}

/// The QERs' MBR token buckets, one per QER slot and direction, shared by all workers:
/// each QER direction is policed at its whole MBR whichever workers its packets reach,
/// with no per-worker shares. The common case, a QER's direction carried by one worker,
/// keeps its line in that worker's cache; a QER spread over workers moves its line
/// between them on each passed packet.
pub struct Policer {
    buckets: Box<[QerBucket]>,
    hz: u64,
    /// [`BURST_MS`] in clock ticks.
    burst_ticks: u64,
    /// [`MIN_BURST`] × `hz`: divided by a rate, the ticks a low rate's bucket holds.
    min_burst_hz: u64,
}

impl Policer {
    /// Buckets for `qer_slots` QER slots (both directions each).
    pub fn new(qer_slots: usize) -> Arc<Policer> {
        let hz = engine::clock::hz().max(1);
        let buckets = (0..qer_slots.saturating_mul(2)).map(|_| QerBucket::default()).collect();
        Arc::new(Policer { buckets, hz, burst_ticks: hz * BURST_MS / 1000, min_burst_hz: MIN_BURST.saturating_mul(hz) })
    }

    /// QER slots held.
    pub fn len(&self) -> usize {
        self.buckets.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    #[inline(always)]
    fn bucket(&self, slot: u32, uplink: bool) -> Option<&QerBucket> {
        self.buckets.get((slot as usize).wrapping_mul(2) | usize::from(!uplink))
    }

    /// Start loading a slot's bucket (the prefetch pass of the UPF nodes).
    #[inline(always)]
    pub fn prefetch(&self, slot: u32, uplink: bool) {
        if let Some(b) = self.bucket(slot, uplink) {
            engine::prefetch::read(b);
        }
    }

    /// The ticks `bytes` take at the rate `rate` divides by, rounded up (never above the
    /// MBR): `⌈bytes × hz / rate⌉`, exactly. `None` past [`Divisor`]'s exact range (a
    /// packet of more than 65 535 bytes below a 68 GHz clock), which the caller refuses.
    #[inline(always)]
    fn cost(&self, rate: Divisor, bytes: u64) -> Option<u64> {
        rate.div_ceil(bytes.checked_mul(self.hz)?)
    }

    /// The burst as ticks of the rate: [`BURST_MS`] of it, or the ticks [`MIN_BURST`]
    /// bytes take where that is more (rates below 30 000 bytes/s). Only a packet that the
    /// [`BURST_MS`] bucket refuses asks for it. Past [`Divisor`]'s range (a clock above
    /// 1.5 THz) the smaller one: stricter, never above the MBR.
    #[cold]
    #[inline(never)]
    fn tolerance(&self, rate: Divisor) -> u64 {
        rate.div_floor(self.min_burst_hz).unwrap_or(0).max(self.burst_ticks)
    }

    /// Take `bytes` from the bucket of a QER's direction at `now` (clock ticks); false:
    /// over the MBR. `rate`: the QER's MBR for that direction ([`Mbr::divisor`], made with
    /// the rules: the cost is a multiplication, not a division). A bucket starts full for
    /// a new generation and holds [`BURST_MS`] of the rate (at least [`MIN_BURST`] bytes).
    ///
    /// [`Mbr::divisor`]: crate::mbr::Mbr::divisor
    #[inline]
    pub fn police(&self, slot: u32, generation: u32, uplink: bool, rate: Divisor, bytes: u64, now: u64) -> bool {
        let Some(b) = self.bucket(slot, uplink) else { return true };
        let seen = b.generation.load(Relaxed);
        // A slot's new QER restarts the bucket. Whoever claims it resets it: a packet
        // another worker passed in between may go uncharged, once per QER. (Any other
        // generation claims it, not only a newer one: generations wrap, and a worker
        // still on the previous tables for a moment costs at most a refill.)
        if seen != generation && b.generation.compare_exchange(seen, generation, Relaxed, Relaxed).is_ok() {
            b.tat.store(0, Relaxed);
        }
        let Some(cost) = self.cost(rate, bytes) else { return false };
        let mut tat = b.tat.load(Relaxed);
        loop {
            let next = tat.max(now) + cost;
            // The burst is at least BURST_MS: only what that refuses needs the low rates'
            // larger one.
            if next > now + self.burst_ticks && next > now + self.tolerance(rate) {
                return false;
            }
            match b.tat.compare_exchange_weak(tat, next, Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }
}

/// Error Indications a second per worker unless configured (`[gtpu] replies_per_sec`).
pub const DEFAULT_REPLIES_PER_SEC: u64 = 100;

pub struct UpfContext {
    cache: Cache<Arc<ArcSwap<UpfTables>>, Arc<UpfTables>>,
    pub tables: Arc<UpfTables>,
    pub usage: Arc<UsageCells>,
    pub policer: Arc<Policer>,
    pub events: Option<Sender<UpfEvent>>,
    /// Downlink packets held for sessions whose FAR buffers.
    pub held: HeldPackets,
    /// Error Indications sent for G-PDUs to TEIDs no session has (the `[gtpu]` reply
    /// rate: they replace gtpu-input's own when the UPF takes the unknown TEIDs).
    pub replies: ip::context::TokenBucket,
}

impl UpfContext {
    /// `policer`: the QER buckets every worker shares (the control plane allocates QER
    /// slots below its length).
    pub fn new(shared: Arc<ArcSwap<UpfTables>>, usage: Arc<UsageCells>, policer: Arc<Policer>, events: Option<Sender<UpfEvent>>) -> Self {
        let tables = shared.load_full();
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
/// A worker context with both the IP and the UPF parts; the downlink needs both at once
/// (the N3 route's MTU and the session's rules).
pub trait HasUpf: HasIp {
    fn split_upf(&mut self) -> (&mut ip::IpContext, &mut UpfContext);

    #[inline(always)]
    fn upf(&mut self) -> &mut UpfContext {
        self.split_upf().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mbr::Mbr;
    use proptest::prelude::*;

    fn mbr(bytes_per_sec: u64) -> Divisor {
        Mbr::new(bytes_per_sec).divisor()
    }

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

    /// Workers' contexts sharing one set of QER buckets, as the control plane makes them.
    fn workers(n: usize, qer_slots: usize) -> Vec<UpfContext> {
        let tables = Arc::new(ArcSwap::from_pointee(UpfTables::default()));
        let policer = Policer::new(qer_slots);
        (0..n).map(|_| UpfContext::new(tables.clone(), UsageCells::new(1), policer.clone(), None)).collect()
    }

    /// Virtual time: 1000-byte packets offered at `offered` bytes/s for two simulated
    /// seconds to slot 0's downlink, packet `k` on worker `on(k)`; the bytes each worker
    /// passed in the second second (the first holds the full bucket's burst).
    fn passed_in_second_second(cx: &[UpfContext], rate: u64, offered: u64, on: impl Fn(u64) -> usize) -> Vec<u64> {
        let hz = engine::clock::hz();
        let n = 2 * offered / 1000;
        let mut passed = vec![0; cx.len()];
        for k in 0..n {
            let now = k * 2 * hz / n;
            let w = on(k);
            if cx[w].policer.police(0, 1, false, mbr(rate), 1000, now) && now >= hz {
                passed[w] += 1000;
            }
        }
        passed
    }

    fn within_5_percent(got: u64, want: u64) -> bool {
        got.abs_diff(want) * 20 <= want
    }

    /// Virtual time, two and four workers: a QER whose packets all reach one worker gets
    /// its whole MBR there (within 5 % over a second), and one whose packets two workers
    /// share gets the MBR between them; whatever the offered rate above it.
    #[test]
    fn a_qer_gets_its_whole_mbr_on_one_worker_or_split_over_two() {
        let rate = 1_000_000u64; // 8 Mbit/s
        for w in [2, 4] {
            for offered in [2 * rate, 5 * rate] {
                let cx = workers(w, 1);
                let one = passed_in_second_second(&cx, rate, offered, |_| w - 1);
                assert!(within_5_percent(one.iter().sum(), rate), "{w} workers, one carries it: {one:?}");
                let cx = workers(w, 1);
                let split = passed_in_second_second(&cx, rate, offered, |k| (k % 2) as usize);
                assert!(within_5_percent(split.iter().sum(), rate), "{w} workers, two share it: {split:?}");
            }
        }
    }

    /// Virtual time, four workers: a GBR QER whose traffic all reaches one worker gets its
    /// guaranteed rate there, being policed at its whole MBR (which is at least the GBR),
    /// like a QER without a GBR; the GBR does not raise what passes.
    #[test]
    fn a_gbr_flow_on_one_worker_gets_its_guarantee() {
        let (mbr, gbr) = (4_000_000u64, 2_500_000u64);
        let cx = workers(4, 1);
        let passed: u64 = passed_in_second_second(&cx, mbr, 5_000_000, |_| 2).iter().sum();
        assert!(passed >= gbr && within_5_percent(passed, mbr), "{passed}");
    }

    /// Threads as workers, each offering the MBR over the same 20 simulated seconds to
    /// one QER direction: the compare-and-swap loses no take, so together they pass the
    /// MBR and the full bucket's burst, no more.
    #[test]
    fn workers_racing_on_one_bucket_pass_no_more_than_the_mbr() {
        let (rate, seconds) = (1_250_000u64, 20);
        let cx = workers(4, 1);
        let hz = engine::clock::hz();
        let n = seconds * rate / 1000;
        let start = std::sync::Barrier::new(cx.len());
        let passed: u64 = std::thread::scope(|s| {
            let threads: Vec<_> = cx
                .iter()
                .map(|c| {
                    let (p, start) = (&*c.policer, &start);
                    s.spawn(move || {
                        start.wait();
                        (0..n).filter(|k| p.police(0, 1, true, mbr(rate), 1000, k * seconds * hz / n)).count() as u64 * 1000
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        let burst = (rate * BURST_MS / 1000).max(MIN_BURST);
        assert!(passed <= seconds * rate + burst + 4000, "{passed}");
        assert!(passed >= seconds * rate - 4000, "{passed}");
    }

    /// Virtual time, one worker: over one simulated second of back-to-back offers, what
    /// passes is the rate plus at most the initial burst; a QER's two directions and a
    /// slot's successive QERs have buckets of their own.
    #[test]
    fn bucket_passes_the_rate_over_a_second() {
        let c = Policer::new(2);
        let hz = c.hz;
        let rate = 1_250_000u64; // 10 Mbit/s
        let mut passed = 0u64;
        let step = hz / 20_000; // 20 000 offers per second of 1000 bytes: 20 MB/s offered
        for i in 0..20_000u64 {
            if c.police(0, 1, true, mbr(rate), 1000, i * step) {
                passed += 1000;
            }
        }
        let burst = (rate * BURST_MS / 1000).max(MIN_BURST);
        assert!(passed <= rate + burst + 1000, "{passed}");
        assert!(passed >= rate - 1000, "{passed}");
        assert!(!c.police(0, 1, true, mbr(rate), 1000, 20_000 * step), "the uplink bucket is empty");
        assert!(c.police(0, 1, false, mbr(rate), 1000, 20_000 * step), "the downlink's is full");
        assert!(c.police(1, 1, true, mbr(rate), 1000, 20_000 * step), "another slot's is full");
        // A new generation starts with a full bucket.
        assert!(c.police(0, 2, true, mbr(rate), burst * 9 / 10, 20_000 * step));
        // A slot past the buckets is not policed.
        assert!(c.police(5, 1, true, mbr(1), 1_000_000, 0));
    }

    /// A low rate's bucket holds MIN_BURST bytes, not BURST_MS of the rate; an MBR of 0
    /// passes that much and then nothing.
    #[test]
    fn low_rates_hold_the_minimum_burst() {
        let c = Policer::new(1);
        assert!(c.police(0, 1, true, mbr(1000), MIN_BURST, 0));
        assert!(!c.police(0, 1, true, mbr(1000), 1, 0));
        assert!(c.police(0, 1, false, mbr(0), MIN_BURST / 2, 0));
        assert!(!c.police(0, 1, false, mbr(0), MIN_BURST, 0));
    }

    /// The policer as it was before its divisor: GCRA with 64-bit divisions, one bucket.
    struct DividingBucket {
        tat: u64,
    }

    impl DividingBucket {
        fn police(&mut self, hz: u64, rate: u64, bytes: u64, now: u64) -> bool {
            let rate = rate.max(1);
            let cost = (bytes * hz).div_ceil(rate);
            let burst_ticks = hz * BURST_MS / 1000;
            let tolerance = if rate as u128 * BURST_MS as u128 >= (MIN_BURST * 1000) as u128 { burst_ticks } else { MIN_BURST * hz / rate };
            let next = self.tat.max(now) + cost;
            if next > now + tolerance {
                return false;
            }
            self.tat = next;
            true
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The policer with its divisor passes and refuses exactly the packets the
        /// division-based bucket does: any MBR a PFCP QER can carry (kbit/s up to 2^40,
        /// × 125, and 0), packet sizes 0..=65 535, arrivals from back to back to seconds
        /// apart, low rates (where the minimum burst decides) as often as high ones.
        #[test]
        fn verdicts_are_the_division_based_ones(
            kbps in prop_oneof![0u64..300, 0u64..=1 << 40],
            offers in proptest::collection::vec((0u64..=65_535, prop_oneof![0u64..1000, 0u64..1 << 32]), 1..200),
        ) {
            let p = Policer::new(1);
            let rate = kbps * 125;
            let mut model = DividingBucket { tat: 0 };
            let mut now = 1u64 << 40;
            for (k, &(bytes, gap)) in offers.iter().enumerate() {
                now += gap;
                let want = model.police(p.hz, rate, bytes, now);
                prop_assert_eq!(p.police(0, 1, true, mbr(rate), bytes, now), want, "offer {} ({} bytes at {})", k, bytes, now);
            }
        }
    }
}
