//! The SPD nodes, each pair one generic node over the family:
//!
//! ```text
//! ip4-lookup ─(tx interface has an SPD)→ ipsec4-output ─┬→ esp4-encrypt (PROTECT, SA id in meta.param)
//!                                                       ├→ ip4-rewrite  (BYPASS)
//!                                                       └→ error-drop   (DISCARD, no policy)
//! ip4-input ─(rx interface has an SPD)→ ipsec4-input ─┬→ ip4-lookup (BYPASS; ESP and ESP-in-UDP for the decrypt nodes)
//!                                                     └→ error-drop (plain packet of a PROTECT policy, DISCARD, no policy)
//! espN-decrypt ─(rx interface has an SPD)→ ipsec4-decrypted ─┬→ ip4-lookup (PROTECT by the SA it came through)
//!                (inner IPv4, SA index in meta.param)         └→ error-drop (policy-mismatch)
//! ```
//!
//! All look the flow up in the worker's flow cache, then in the classifier. All take
//! the IP header as validated by `ipN-input` or by the decrypt node (version, header
//! length, total length).

use crate::context::{decide_cached, HasSpd, Prepared};
use crate::flow_cache::{cache_spd, pack4_words, stamp, CacheKey, CacheView, Cached, FlowCache, Slot};
use crate::policy::{Action, Decision, FlowKey, SaId};
use crate::tables::{Classified, SpdTables};
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Enqueue, GraphBuilder, NextNodes, Node, Pool, Verdict, VECTOR_SIZE};
use ip::tables::Adjacency;
use wire::ipv6_ext::walk_chain;
use wire::IpProtocol;

/// The UDP port of ESP in UDP (RFC 3948).
pub const ESP_UDP_PORT: u16 = 4500;
const ESP: u8 = 50;

/// Add the SPD nodes to a graph (the IP nodes, and `esp4-encrypt` / `esp6-encrypt`,
/// must be there too).
pub fn register<Cx: HasSpd>(g: &mut GraphBuilder<Cx>) {
    g.add(IpsecOutput::<Ip4>::default());
    g.add(IpsecOutput::<Ip6>::default());
    g.add(IpsecInput::<Ip4>::default());
    g.add(IpsecInput::<Ip6>::default());
    g.add(IpsecDecrypted::<Ip4>::default());
    g.add(IpsecDecrypted::<Ip6>::default());
}

/// Why a packet's selector fields could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// Shorter than its headers say.
    Truncated,
    /// An IPv6 extension header chain that does not parse.
    BadExtension,
}

/// For traces: why no selector was read, in words.
impl core::fmt::Display for KeyError {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str(match self {
            KeyError::Truncated => "no selector: shorter than its headers say",
            KeyError::BadExtension => "no selector: an IPv6 extension header chain that does not parse",
        })
    }
}

/// What differs between the IPv4 and IPv6 SPD nodes.
pub trait SpdFamily: Send + 'static {
    type Addr: Classified;
    type OutputNext: NextNodes;
    type InputNext: NextNodes;
    const OUTPUT: &'static str;
    const INPUT: &'static str;
    const DECRYPTED: &'static str;
    const PROTECT: Self::OutputNext;
    const BYPASS: Self::OutputNext;
    const PASS: Self::InputNext;
    /// The packet's selector fields; `inbound` swaps local and remote (local is then
    /// the destination).
    fn flow_key(b: &[u8], inbound: bool) -> Result<FlowKey<Self::Addr>, KeyError>;
    /// The flow cache's key of an outbound packet: its [`SpdFamily::flow_key`] packed
    /// with the SPD field ([`cache_spd`]), as `ipsec4-output` needs it for every packet.
    #[inline(always)]
    fn outbound_cache_key(b: &[u8], spd_field: u16) -> Result<<Self::Addr as CacheKey>::Packed, KeyError> {
        Self::flow_key(b, false).map(|k| Self::Addr::pack(spd_field, &k))
    }
    /// A plain packet the inbound SPD lets through whatever its policies say, because
    /// the link needs it before any policy could (IPv6 neighbour discovery, as ARP is
    /// for IPv4: RFC 4301 §4.4.1 leaves such packets to the implementation).
    fn link_control(b: &[u8]) -> bool;
}

next_nodes! {
    pub enum Ipsec4OutputNext { Encrypt = "esp4-encrypt", Rewrite = "ip4-rewrite" }
}
next_nodes! {
    pub enum Ipsec6OutputNext { Encrypt = "esp6-encrypt", Rewrite = "ip6-rewrite" }
}
next_nodes! {
    pub enum Ipsec4InputNext { Lookup = "ip4-lookup" }
}
next_nodes! {
    pub enum Ipsec6InputNext { Lookup = "ip6-lookup" }
}

/// Ports for protocols that have them, read where the upper header starts; RFC 4301
/// §4.4.1.1 has non-initial fragments and portless protocols match only policies
/// whose port selectors are ANY: here they carry ports 0, so they also match ranges
/// that start at 0, as the policy's author then asked.
#[inline(always)]
fn ports(proto: u8, b: &[u8], at: usize) -> Result<(u16, u16), KeyError> {
    let w = ports_word(proto, b, at)?;
    Ok(((w >> 16) as u16, w as u16))
}

/// The protocols whose header starts with ports (TCP, UDP, SCTP), by number: one load
/// a packet where three compares were.
const HAS_PORTS: [bool; 256] = {
    let mut t = [false; 256];
    t[6] = true;
    t[17] = true;
    t[132] = true;
    t
};

/// [`ports`] as one word: the source port in the high half.
#[inline(always)]
fn ports_word(proto: u8, b: &[u8], at: usize) -> Result<u32, KeyError> {
    if !HAS_PORTS[proto as usize] {
        return Ok(0);
    }
    // One bounds check (`at` is at most a header chain's length, far from overflowing).
    let p = b.get(at..at + 4).and_then(|p| p.first_chunk::<4>()).ok_or(KeyError::Truncated)?;
    Ok(u32::from_be_bytes(*p))
}

#[inline(always)]
fn orient<A: Copy>(src: A, dst: A, proto: u8, (sp, dp): (u16, u16), inbound: bool) -> FlowKey<A> {
    if inbound {
        FlowKey { local: dst, remote: src, proto, local_port: dp, remote_port: sp }
    } else {
        FlowKey { local: src, remote: dst, proto, local_port: sp, remote_port: dp }
    }
}

pub struct Ip4;
pub struct Ip6;

impl SpdFamily for Ip4 {
    type Addr = u32;
    type OutputNext = Ipsec4OutputNext;
    type InputNext = Ipsec4InputNext;
    const OUTPUT: &'static str = "ipsec4-output";
    const INPUT: &'static str = "ipsec4-input";
    const DECRYPTED: &'static str = "ipsec4-decrypted";
    const PROTECT: Ipsec4OutputNext = Ipsec4OutputNext::Encrypt;
    const BYPASS: Ipsec4OutputNext = Ipsec4OutputNext::Rewrite;
    const PASS: Ipsec4InputNext = Ipsec4InputNext::Lookup;

    #[inline(always)]
    fn flow_key(b: &[u8], inbound: bool) -> Result<FlowKey<u32>, KeyError> {
        let h = b.first_chunk::<20>().ok_or(KeyError::Truncated)?;
        let ihl = (h[0] & 0x0f) as usize * 4;
        let proto = h[9];
        let later_fragment = u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0;
        let p = if later_fragment { (0, 0) } else { ports(proto, b, ihl)? };
        let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        let dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
        Ok(orient(src, dst, proto, p, inbound))
    }

    /// Read as the header holds the words (addresses, ports), not field by field and
    /// packed again: ~10 instructions less a packet.
    #[inline(always)]
    fn outbound_cache_key(b: &[u8], spd_field: u16) -> Result<[u64; 2], KeyError> {
        let h = b.first_chunk::<20>().ok_or(KeyError::Truncated)?;
        let proto = h[9];
        let later_fragment = u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0;
        let ports = if later_fragment || !HAS_PORTS[proto as usize] {
            0
        } else {
            match b.get(20..24).and_then(|p| p.first_chunk::<4>()) {
                // A header without options (most): the ports are read at a fixed offset,
                // so their load does not wait for the header length's (a predicted
                // branch instead of a dependent address), and the slot's hash starts
                // one load earlier.
                Some(p) if h[0] == 0x45 => u32::from_be_bytes(*p),
                _ => ports_word(proto, b, (h[0] & 0x0f) as usize * 4)?,
            }
        };
        let addrs = u64::from_be_bytes([h[12], h[13], h[14], h[15], h[16], h[17], h[18], h[19]]);
        Ok(pack4_words(spd_field, addrs, proto, ports))
    }

    #[inline(always)]
    fn link_control(_: &[u8]) -> bool {
        false
    }
}

impl SpdFamily for Ip6 {
    type Addr = u128;
    type OutputNext = Ipsec6OutputNext;
    type InputNext = Ipsec6InputNext;
    const OUTPUT: &'static str = "ipsec6-output";
    const INPUT: &'static str = "ipsec6-input";
    const DECRYPTED: &'static str = "ipsec6-decrypted";
    const PROTECT: Ipsec6OutputNext = Ipsec6OutputNext::Encrypt;
    const BYPASS: Ipsec6OutputNext = Ipsec6OutputNext::Rewrite;
    const PASS: Ipsec6InputNext = Ipsec6InputNext::Lookup;

    #[inline(always)]
    fn flow_key(b: &[u8], inbound: bool) -> Result<FlowKey<u128>, KeyError> {
        let h = b.first_chunk::<40>().ok_or(KeyError::Truncated)?;
        let src = u128::from_be_bytes(h[8..24].try_into().unwrap_or_default());
        let dst = u128::from_be_bytes(h[24..40].try_into().unwrap_or_default());
        let nh = h[6];
        let (proto, p) = match IpProtocol::from(nh) {
            IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Frag | IpProtocol::Ipv6Opts => {
                let c = walk_chain(IpProtocol::from(nh), &b[40..]).map_err(|_| KeyError::BadExtension)?;
                match c.upper {
                    Some(up) => {
                        let proto = u8::from(up);
                        (proto, ports(proto, b, 40 + c.upper_offset)?)
                    }
                    // A later fragment: its protocol from the fragment header, no ports.
                    None => (c.fragment.map_or(0, |f| u8::from(f.next_header)), (0, 0)),
                }
            }
            _ => (nh, ports(nh, b, 40)?),
        };
        Ok(orient(src, dst, proto, p, inbound))
    }

    /// ICMPv6 router/neighbour solicitations and advertisements and redirects (types
    /// 133-137) right after the fixed header, with hop limit 255 as RFC 4861 requires.
    #[inline(always)]
    fn link_control(b: &[u8]) -> bool {
        b.len() > 40 && b[6] == 58 && b[7] == 255 && (133..=137).contains(&b[40])
    }
}

counters! {
    pub enum OutputCounter {
        PolicyDiscard(Info, "policy-discard", "matched a DISCARD policy"),
        NoPolicy(Warn, "no-policy", "matched no policy of the interface's SPD (RFC 4301: discarded)"),
        Truncated(Error, "truncated", "shorter than its IP and transport headers"),
        BadExtension(Warn, "bad-extension-header", "an IPv6 extension header chain that does not parse"),
    }
}

impl From<KeyError> for OutputCounter {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::Truncated => OutputCounter::Truncated,
            KeyError::BadExtension => OutputCounter::BadExtension,
        }
    }
}

type OutputVerdict<F> = Verdict<<F as SpdFamily>::OutputNext, OutputCounter>;

/// The interface of the adjacency the route lookup chose for a packet.
#[inline(always)]
fn tx_if(ip: &ip::IpContext, adj: u32) -> Option<engine::IfIndex> {
    match ip.tables.adjacency(adj) {
        Adjacency::Rewrite { tx_if, .. } | Adjacency::Glean { tx_if, .. } | Adjacency::Incomplete { tx_if, .. } => Some(*tx_if),
        _ => None,
    }
}

/// What `IpsecOutput::prepare` decided for one packet: the verdict `process` returns
/// and the `meta.param` it leaves (the SA's index for `espN-encrypt`).
#[derive(Clone, Copy)]
struct Decided<N: NextNodes> {
    verdict: Verdict<N, OutputCounter>,
    param: u32,
}

/// How many packets ahead of the one it decides `IpsecOutput::prepare` starts loading a
/// slot: enough slots in flight to overlap DRAM latency when the flows do not fit in
/// the CPU's caches (a million flows), and lines that have long arrived when they do
/// (docs/PERFORMANCE.md, "IPsec SPD hit: fewer instructions, slots loaded 16 packets
/// ahead").
const SLOT_AHEAD: usize = 16;

/// `ipsec4-output` / `ipsec6-output`: the outbound SPD of the interface the route
/// lookup chose.
///
/// The vector is decided in one software pipeline (`decide_vector`): packet `i`'s
/// interface, SPD and selector fields are read into the flow cache's key (two or five
/// words), hashed, and its slot starts loading, while packet `i - SLOT_AHEAD`'s slot,
/// loaded by now, is compared with its key and its version checked; only a miss
/// unpacks the key for the classifier. Packets are decided in arrival order, so a flow's
/// second packet in a vector finds what its first one put in the cache. An untraced
/// vector's packets go on from the pipeline itself (`run_vector`: no `process` call a
/// packet); a traced one's decisions wait in `decided` for `process`.
pub struct IpsecOutput<F: SpdFamily> {
    pipeline: Pipeline<F>,
    /// A traced vector's decisions by the packet's place in it, which `prepare` leaves in
    /// `meta.param` for `process`.
    decided: Box<[Decided<F::OutputNext>; VECTOR_SIZE]>,
}

/// `IpsecOutput`'s per-vector state. The arrays are inline, not boxed each: the
/// pipeline's loop then reaches them all from one register (the node's address, which
/// the dispatcher boxes), where four pointers were more than the loop's registers.
struct Pipeline<F: SpdFamily> {
    /// By the packet's place in the vector: what its first stage left for its second.
    staged: [Staged<F>; VECTOR_SIZE],
    /// A cache hit's verdict by its kind ([`Cached::kind_index`]): a hit becomes its
    /// verdict in one load, not through a [`Decision`].
    by_kind: [OutputVerdict<F>; Cached::KINDS],
}

/// What the pipeline's first stage leaves for a packet's second, in one array: the key
/// and the test of which it is share the packet's line and its index.
enum Staged<F: SpdFamily> {
    /// Its key and slot, to look up.
    Lookup(Prepared<F::Addr>),
    /// Decided as its headers were read (no SPD, or headers it could not read), handed
    /// on in its turn (arrival order).
    Early(Decided<F::OutputNext>),
}

impl<F: SpdFamily> Clone for Staged<F> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<F: SpdFamily> Copy for Staged<F> {}

impl<F: SpdFamily> Default for IpsecOutput<F> {
    fn default() -> Self {
        let bypass = Decided { verdict: Verdict::Next(F::BYPASS), param: 0 };
        IpsecOutput {
            pipeline: Pipeline {
                staged: [Staged::Early(bypass); VECTOR_SIZE],
                by_kind: std::array::from_fn(|k| decided::<F>(Cached::decision_of_kind(k)).verdict),
            },
            decided: Box::new([bypass; VECTOR_SIZE]),
        }
    }
}

/// What a packet with decision `d` does next, and the `meta.param` it leaves.
#[inline(always)]
fn decided<F: SpdFamily>(d: Decision) -> Decided<F::OutputNext> {
    let (verdict, param) = match d {
        Decision::Act(Action::Protect(sa)) => (Verdict::Next(F::PROTECT), sa.0),
        Decision::Act(Action::Bypass) => (Verdict::Next(F::BYPASS), 0),
        Decision::Act(Action::Discard) => (Verdict::Drop(OutputCounter::PolicyDiscard), 0),
        Decision::NoMatch => (Verdict::Drop(OutputCounter::NoPolicy), 0),
    };
    Decided { verdict, param }
}

/// A packet the flow cache did not answer at once ([`CacheView::current`]): out of the
/// pipeline's loop, whose hits then keep their values in registers.
#[inline(never)]
fn decide_miss<A: Classified>(tables: &SpdTables, cache: &mut FlowCache<A>, p: &Prepared<A>) -> Decision {
    decide_cached(tables, cache, p)
}

/// Where `Pipeline::decide_vector` hands each packet's decision, in arrival order.
trait Decisions<N: NextNodes> {
    /// Packet `bi` (`buf`), the `j`th of the vector, decided `d`.
    fn put(&mut self, j: usize, bi: BufIdx, buf: &mut Buffer, d: Decided<N>);
    /// Whether [`Decisions::put_run`] may take a packet decided `verdict`: asked once a
    /// vector for each kind of cache hit, so that a hit's packet goes on after one test
    /// of its kind, not the tests of its verdict.
    #[inline(always)]
    fn runs(&self, _verdict: Verdict<N, OutputCounter>) -> bool {
        false
    }
    /// [`Decisions::put`] of a packet whose verdict [`Decisions::runs`].
    #[inline(always)]
    fn put_run(&mut self, j: usize, bi: BufIdx, buf: &mut Buffer, d: Decided<N>) {
        self.put(j, bi, buf, d);
    }
}

/// An untraced vector: each packet goes on at once, its SA's index in `meta.param`.
impl<N: NextNodes> Decisions<N> for Enqueue<'_, N, OutputCounter> {
    #[inline(always)]
    fn put(&mut self, _: usize, bi: BufIdx, buf: &mut Buffer, d: Decided<N>) {
        buf.meta.param = d.param;
        self.push(bi, buf, d.verdict);
    }

    #[inline(always)]
    fn runs(&self, verdict: Verdict<N, OutputCounter>) -> bool {
        Enqueue::runs(self, verdict)
    }

    #[inline(always)]
    fn put_run(&mut self, _: usize, bi: BufIdx, buf: &mut Buffer, d: Decided<N>) {
        buf.meta.param = d.param;
        self.push_run(bi);
    }
}

/// A traced vector: each decision kept for `process` (which runs after the packet's
/// trace line), the packet's place in `meta.param`.
struct ForProcess<'a, N: NextNodes>(&'a mut [Decided<N>; VECTOR_SIZE]);

impl<N: NextNodes> Decisions<N> for ForProcess<'_, N> {
    #[inline(always)]
    fn put(&mut self, j: usize, _: BufIdx, buf: &mut Buffer, d: Decided<N>) {
        self.0[j % VECTOR_SIZE] = d;
        buf.meta.param = j as u32;
    }
}

/// What `Pipeline::decide_vector` carries from packet to packet.
struct Walk {
    /// The last adjacency that has an SPD, and that SPD's key field: consecutive packets
    /// mostly share their route, so one compare a packet, no `Option` to test (as u64,
    /// so that before the first one no adjacency matches).
    fast_adj: u64,
    fast_field: u16,
    /// The cache's hits are counted once for the vector, not a packet: every packet
    /// with a key is a hit or a miss, so they are the vector's packets less the ones
    /// decided early and the misses, both counted on paths off the hits'.
    early: usize,
    misses: usize,
}

impl<F: SpdFamily> Pipeline<F> {
    /// The pipeline over `input` (at most a vector), with this family's flow cache or
    /// without one (`--no-flow-cache`: every packet classified), each decision handed
    /// to `out` in arrival order. Inlined into each case, so none tests per packet
    /// whether there is a cache or where decisions go.
    ///
    /// Three loops: the first `SLOT_AHEAD` packets' keys read, then each packet's key
    /// read with the decision of the one `SLOT_AHEAD` before it, then the last ones
    /// decided; so no packet tests which of the two stages it runs.
    #[inline(always)]
    fn decide_vector<D: Decisions<F::OutputNext>>(
        &mut self,
        ip: &ip::IpContext,
        tables: &SpdTables,
        mut cache: Option<&mut FlowCache<F::Addr>>,
        bufs: &mut [Buffer],
        input: &[BufIdx],
        out: &mut D,
    ) {
        let input = &input[..input.len().min(VECTOR_SIZE)];
        let n = input.len();
        let current = stamp(tables.version);
        let runs: [bool; Cached::KINDS] = std::array::from_fn(|k| out.runs(self.by_kind[k]));
        let mut walk = Walk { fast_adj: u64::MAX, fast_field: 0, early: 0, misses: 0 };
        // The cache as values the loops keep in registers; taken again after each miss
        // (which changes the cache).
        let mut view = cache.as_deref().map(FlowCache::view);
        let ahead = n.min(SLOT_AHEAD);
        for (i, bi) in input[..ahead].iter().enumerate() {
            self.read_key(i, &bufs[bi.get()], ip, tables, view, &mut walk);
        }
        for i in SLOT_AHEAD..n {
            self.read_key(i, &bufs[input[i].get()], ip, tables, view, &mut walk);
            let j = i - SLOT_AHEAD;
            if !self.decide_hit(j, input[j], bufs, view, current, &runs, out) {
                self.decide_looked_up(j, input[j], bufs, tables, cache.as_deref_mut(), &mut walk, out);
                view = cache.as_deref().map(FlowCache::view);
            }
        }
        let tail = n - ahead;
        for (k, &bi) in input[tail..].iter().enumerate() {
            let j = tail + k;
            if !self.decide_hit(j, bi, bufs, view, current, &runs, out) {
                self.decide_looked_up(j, bi, bufs, tables, cache.as_deref_mut(), &mut walk, out);
                view = cache.as_deref().map(FlowCache::view);
            }
        }
        if let Some(c) = cache {
            c.count_hits((n - walk.early - walk.misses) as u64);
        }
    }

    /// The pipeline's first stage for packet `i` (`buf`): its key read and its slot
    /// loading, or its decision in `early` when it needs no lookup.
    #[inline(always)]
    fn read_key(
        &mut self,
        i: usize,
        buf: &Buffer,
        ip: &ip::IpContext,
        tables: &SpdTables,
        cache: Option<CacheView<'_, F::Addr>>,
        walk: &mut Walk,
    ) {
        let i = i % VECTOR_SIZE;
        let adj = buf.meta.adj;
        let field = if adj as u64 == walk.fast_adj {
            Some(walk.fast_field)
        } else {
            tx_if(ip, adj).and_then(|i| tables.spd_of(i)).map(|s| {
                walk.fast_adj = adj as u64;
                walk.fast_field = cache_spd(s.0, false);
                walk.fast_field
            })
        };
        // Each field stored from its register, not an enum built and copied.
        match field.map(|f| F::outbound_cache_key(buf.bytes(), f)) {
            None => {
                self.staged[i] = Staged::Early(Decided { verdict: Verdict::Next(F::BYPASS), param: 0 });
                walk.early += 1;
            }
            Some(Err(e)) => {
                self.staged[i] = Staged::Early(Decided { verdict: Verdict::Drop(e.into()), param: 0 });
                walk.early += 1;
            }
            Some(Ok(key)) => {
                let slot = match cache {
                    Some(c) => {
                        let slot = FlowCache::<F::Addr>::slot(&key);
                        c.prefetch(slot);
                        slot
                    }
                    None => Slot::default(),
                };
                self.staged[i] = Staged::Lookup(Prepared { key, slot });
            }
        }
    }

    /// The pipeline's second stage for packet `j` (`bi`), whose slot has had
    /// `SLOT_AHEAD` packets' time to load: its decision handed to `out` if it was decided
    /// early or its slot holds its flow's current decision (a hit whose kind `runs`
    /// goes on after that one test); false leaves it to
    /// [`Pipeline::decide_looked_up`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn decide_hit<D: Decisions<F::OutputNext>>(
        &self,
        j: usize,
        bi: BufIdx,
        bufs: &mut [Buffer],
        cache: Option<CacheView<'_, F::Addr>>,
        current: u32,
        runs: &[bool; Cached::KINDS],
        out: &mut D,
    ) -> bool {
        let j = j % VECTOR_SIZE;
        match &self.staged[j] {
            Staged::Lookup(p) => match cache.and_then(|c| c.current(p.slot, &p.key, current)) {
                Some(hit) => {
                    let k = hit.kind_index();
                    let d = Decided { verdict: self.by_kind[k], param: hit.sa };
                    let buf = &mut bufs[bi.get()];
                    if runs[k] {
                        out.put_run(j, bi, buf, d);
                    } else {
                        out.put(j, bi, buf, d);
                    }
                    true
                }
                None => false,
            },
            Staged::Early(d) => {
                out.put(j, bi, &mut bufs[bi.get()], *d);
                true
            }
        }
    }

    /// Packet `j` (`bi`) that [`Pipeline::decide_hit`] left: a cache miss (or no cache),
    /// decided by the classifier and handed to `out`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn decide_looked_up<D: Decisions<F::OutputNext>>(
        &self,
        j: usize,
        bi: BufIdx,
        bufs: &mut [Buffer],
        tables: &SpdTables,
        cache: Option<&mut FlowCache<F::Addr>>,
        walk: &mut Walk,
        out: &mut D,
    ) {
        let j = j % VECTOR_SIZE;
        let d = match &self.staged[j] {
            Staged::Lookup(p) => match cache {
                Some(c) => {
                    walk.misses += 1;
                    decided::<F>(decide_miss(tables, c, p))
                }
                None => decided::<F>(tables.classify_packed::<F::Addr>(&p.key)),
            },
            // Handed on by `decide_hit`, which never leaves one.
            Staged::Early(d) => *d,
        };
        out.put(j, bi, &mut bufs[bi.get()], d);
    }
}

impl<F: SpdFamily> IpsecOutput<F> {
    /// [`Pipeline::decide_vector`] with the worker's tables and this family's cache.
    #[inline(always)]
    fn decide<Cx: HasSpd, D: Decisions<F::OutputNext>>(
        pipeline: &mut Pipeline<F>,
        cx: &mut Cx,
        pool: &mut Pool,
        input: &[BufIdx],
        out: &mut D,
    ) {
        let (ip, cx) = cx.split_spd();
        let bufs = pool.buffers_mut();
        match cx.tables_and_cache::<F::Addr>() {
            (tables, Some(cache)) => pipeline.decide_vector(ip, tables, Some(cache), bufs, input, out),
            (tables, None) => pipeline.decide_vector(ip, tables, None, bufs, input, out),
        }
    }
}

impl<Cx: HasSpd, F: SpdFamily> Node<Cx> for IpsecOutput<F> {
    type Next = F::OutputNext;
    type Counter = OutputCounter;

    fn name(&self) -> &'static str {
        F::OUTPUT
    }

    const RUNS_VECTORS: bool = true;

    /// The pipeline (above), its packets sent on as it decides them.
    fn run_vector(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx], out: &mut Enqueue<'_, Self::Next, Self::Counter>) {
        Self::decide(&mut self.pipeline, cx, pool, input, out);
    }

    /// The pipeline, for a traced vector: `process` hands out the decisions.
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        Self::decide(&mut self.pipeline, cx, pool, input, &mut ForProcess(&mut self.decided));
    }

    #[inline(always)]
    fn process(&mut self, _cx: &mut Cx, _counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        // `prepare` ran on this vector (the dispatcher runs it first) and left the
        // packet's place in it.
        let d = self.decided[buf.meta.param as usize % VECTOR_SIZE];
        buf.meta.param = d.param;
        d.verdict
    }

    fn trace(&self, buf: &Buffer) -> String {
        match F::flow_key(buf.bytes(), false) {
            Ok(k) => flow_text(&k),
            Err(e) => e.to_string(),
        }
    }
}

counters! {
    pub enum InputCounter {
        ProtectedPlain(Warn, "plain-on-protected-flow", "a plain packet of a flow a PROTECT policy says must arrive through an SA (RFC 4301 §5.2)"),
        PolicyDiscard(Info, "policy-discard", "matched a DISCARD policy"),
        NoPolicy(Warn, "no-policy", "matched no policy of the interface's SPD (RFC 4301: discarded)"),
        Truncated(Error, "truncated", "shorter than its IP and transport headers"),
        BadExtension(Warn, "bad-extension-header", "an IPv6 extension header chain that does not parse"),
    }
}

impl From<KeyError> for InputCounter {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::Truncated => InputCounter::Truncated,
            KeyError::BadExtension => InputCounter::BadExtension,
        }
    }
}

/// Whether an arriving packet (its inbound key: `local` is the destination) is ESP or
/// ESP in UDP for one of the gateway's own SAs: IP protocol 50, or UDP to port 4500 or
/// to a port an inbound SA takes ESP in UDP on, addressed to one of our addresses. Only
/// those skip the inbound policies (the decrypt nodes and `ipsecN-decrypted` check
/// them): ESP or UDP 4500 passing through to another host is plain traffic to the SPD
/// (RFC 4301 §5.2), which a BYPASS policy may let through, not a way around it.
#[inline(always)]
fn esp_for_us<A: Classified>(ip: &ip::Tables, key: &FlowKey<A>) -> bool {
    let esp = match key.proto {
        ESP => true,
        17 => key.local_port == ESP_UDP_PORT || ip.udp.port(key.local_port) == Some(ip::tables::UdpApp::Esp),
        _ => false,
    };
    esp && ip.is_local(key.local.ip())
}

/// `ipsec4-input` / `ipsec6-input`: plain packets arriving on an interface with an SPD
/// must match a BYPASS policy of its inbound side. ESP and ESP in UDP to our addresses
/// go on to the lookup (and so to the decrypt nodes, whose output `ipsecN-decrypted`
/// checks).
pub struct IpsecInput<F>(std::marker::PhantomData<F>);

impl<F> Default for IpsecInput<F> {
    fn default() -> Self {
        IpsecInput(std::marker::PhantomData)
    }
}

impl<Cx: HasSpd, F: SpdFamily> Node<Cx> for IpsecInput<F> {
    type Next = F::InputNext;
    type Counter = InputCounter;

    fn name(&self) -> &'static str {
        F::INPUT
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, _counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let (ip, cx) = cx.split_spd();
        let Some(spd) = cx.tables.spd_of(buf.meta.rx_if) else { return Verdict::Next(F::PASS) };
        let key = match F::flow_key(buf.bytes(), true) {
            Ok(k) => k,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if F::link_control(buf.bytes()) || esp_for_us(&ip.tables, &key) {
            return Verdict::Next(F::PASS);
        }
        match cx.decide(spd, true, &key) {
            Decision::Act(Action::Bypass) => Verdict::Next(F::PASS),
            Decision::Act(Action::Protect(_)) => Verdict::Drop(InputCounter::ProtectedPlain),
            Decision::Act(Action::Discard) => Verdict::Drop(InputCounter::PolicyDiscard),
            Decision::NoMatch => Verdict::Drop(InputCounter::NoPolicy),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        match F::flow_key(buf.bytes(), true) {
            Ok(k) => flow_text(&k),
            Err(e) => e.to_string(),
        }
    }
}

counters! {
    pub enum DecryptedCounter {
        PolicyMismatch(Warn, "policy-mismatch", "decrypted packet that no inbound PROTECT policy for the SA it came through selects (RFC 4301 §5.2 step 4)"),
        Truncated(Error, "truncated", "shorter than its IP and transport headers"),
        BadExtension(Warn, "bad-extension-header", "an IPv6 extension header chain that does not parse"),
    }
}

impl From<KeyError> for DecryptedCounter {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::Truncated => DecryptedCounter::Truncated,
            KeyError::BadExtension => DecryptedCounter::BadExtension,
        }
    }
}

/// `ipsec4-decrypted` / `ipsec6-decrypted`: a packet the ESP decrypt nodes opened, with
/// the inbound SA's index in `meta.param`, that arrived on an interface with an SPD. Its
/// inbound policy must be PROTECT with that very SA: a peer may send through an SA only
/// the traffic the policy negotiated for it, not whatever it likes.
pub struct IpsecDecrypted<F>(std::marker::PhantomData<F>);

impl<F> Default for IpsecDecrypted<F> {
    fn default() -> Self {
        IpsecDecrypted(std::marker::PhantomData)
    }
}

impl<Cx: HasSpd, F: SpdFamily> Node<Cx> for IpsecDecrypted<F> {
    type Next = F::InputNext;
    type Counter = DecryptedCounter;

    fn name(&self) -> &'static str {
        F::DECRYPTED
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, _counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let (_, cx) = cx.split_spd();
        // Unbound since the decrypt node looked: no policy to hold the packet to.
        let Some(spd) = cx.tables.spd_of(buf.meta.rx_if) else { return Verdict::Next(F::PASS) };
        let key = match F::flow_key(buf.bytes(), true) {
            Ok(k) => k,
            Err(e) => return Verdict::Drop(e.into()),
        };
        if cx.check_inbound(spd, SaId(buf.meta.param), &key) {
            Verdict::Next(F::PASS)
        } else {
            Verdict::Drop(DecryptedCounter::PolicyMismatch)
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        match F::flow_key(buf.bytes(), true) {
            Ok(k) => format!("{} sa {}", flow_text(&k), buf.meta.param),
            Err(e) => e.to_string(),
        }
    }
}

/// The fuzz body of the selector reader (`fuzz/fuzz_targets/spd_flow_key.rs`, and the
/// property test below): any bytes give a key or a typed error, never a panic; an IPv4
/// key's ports are the ones where the header says its transport header is, and the
/// inbound key is the outbound one seen from the other side.
pub fn fuzz_flow_key(b: &[u8]) {
    let out4 = Ip4::flow_key(b, false);
    let in4 = Ip4::flow_key(b, true);
    assert_eq!(
        out4.map(|k| (k.remote, k.local, k.remote_port, k.local_port)),
        in4.map(|k| (k.local, k.remote, k.local_port, k.remote_port))
    );
    if let Ok(k) = out4 {
        let ihl = (b[0] & 0x0f) as usize * 4;
        if u16::from_be_bytes([b[6], b[7]]) & 0x1fff == 0 && matches!(b[9], 6 | 17 | 132) {
            assert_eq!(
                (k.local_port, k.remote_port),
                (u16::from_be_bytes([b[ihl], b[ihl + 1]]), u16::from_be_bytes([b[ihl + 2], b[ihl + 3]]))
            );
        }
    }
    // The outbound cache key read straight from the header is the packed flow key.
    for field in [0, 3, 0xffff] {
        assert_eq!(Ip4::outbound_cache_key(b, field), out4.map(|k| u32::pack(field, &k)));
    }
    let out6 = Ip6::flow_key(b, false);
    let in6 = Ip6::flow_key(b, true);
    assert_eq!(out6.map(|k| (k.remote, k.local, k.proto)), in6.map(|k| (k.local, k.remote, k.proto)));
}

/// A flow key in a trace: `udp local 198.18.0.2 port 1024 remote 198.19.1.1 port 4000`.
fn flow_text<A: Classified>(k: &FlowKey<A>) -> String {
    let proto = match k.proto {
        1 => "icmp".to_string(),
        6 => "tcp".into(),
        17 => "udp".into(),
        50 => "esp".into(),
        58 => "icmpv6".into(),
        132 => "sctp".into(),
        p => format!("protocol {p}"),
    };
    let ports = HAS_PORTS[k.proto as usize];
    let at = |a: A, p: u16| if ports { format!("{} port {p}", a.ip()) } else { a.ip().to_string() };
    format!("{proto} local {} remote {}", at(k.local, k.local_port), at(k.remote, k.remote_port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A trace of a packet whose selector cannot be read says why in words, not
    /// `Truncated` or `BadExtension`.
    #[test]
    fn unreadable_selectors_are_traced_in_words() {
        let e = Ip4::flow_key(&[0x45, 0, 0], false).unwrap_err();
        assert_eq!(e.to_string(), "no selector: shorter than its headers say");
        let ext = KeyError::BadExtension.to_string();
        assert_eq!(ext, "no selector: an IPv6 extension header chain that does not parse");
    }

    proptest! {
        #[test]
        fn any_bytes_give_a_key_or_an_error(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            fuzz_flow_key(&b);
        }

        /// Mostly well-formed IPv4/IPv6 heads, so the checks past the errors run too.
        #[test]
        fn plausible_heads_give_their_ports(mut b in proptest::collection::vec(any::<u8>(), 40..120), v6 in any::<bool>(), proto in prop_oneof![Just(6u8), Just(17), Just(132), Just(1)]) {
            if v6 {
                b[0] = 0x60;
                b[6] = proto;
            } else {
                b[0] = 0x45;
                b[9] = proto;
                // Half of them first fragments, whose ports are read.
                b[6] &= 0xe0 | (b[8] & 1);
                b[7] &= b[8] & 1;
            }
            fuzz_flow_key(&b);
        }
    }

    #[test]
    fn keys_of_ipv4_packets() {
        let mut p = [0u8; 28];
        p[0] = 0x45;
        p[9] = 17;
        p[12..16].copy_from_slice(&[198, 18, 0, 1]);
        p[16..20].copy_from_slice(&[198, 19, 0, 2]);
        p[20..24].copy_from_slice(&[0x04, 0xd2, 0x11, 0x94]);
        let k = Ip4::flow_key(&p, false).unwrap();
        assert_eq!(k, FlowKey { local: 0xc612_0001, remote: 0xc613_0002, proto: 17, local_port: 1234, remote_port: 4500 });
        assert_eq!(Ip4::outbound_cache_key(&p, 5), Ok(u32::pack(5, &k)));
        let k = Ip4::flow_key(&p, true).unwrap();
        assert_eq!(k, FlowKey { local: 0xc613_0002, remote: 0xc612_0001, proto: 17, local_port: 4500, remote_port: 1234 });
        assert_eq!(Ip4::flow_key(&p[..22], false), Err(KeyError::Truncated));
        // A later fragment: no ports read, none needed.
        p[7] = 1;
        assert_eq!(Ip4::flow_key(&p[..20], false).unwrap().local_port, 0);
        // No ports for ICMP.
        p[7] = 0;
        p[9] = 1;
        assert_eq!(Ip4::flow_key(&p[..20], false).unwrap().remote_port, 0);
        assert_eq!(Ip4::outbound_cache_key(&p[..20], 5), Ok(u32::pack(5, &Ip4::flow_key(&p[..20], false).unwrap())));
    }

    /// The cache key reads a header without options' ports at their fixed offset, and
    /// anything else where the header length says (`outbound_cache_key`'s fast case
    /// must not be taken for a header with options).
    #[test]
    fn cache_keys_of_ipv4_headers_with_and_without_options() {
        let mut p = [0u8; 28];
        p[0] = 0x46; // one word of options, then the UDP header
        p[9] = 17;
        p[12..16].copy_from_slice(&[198, 18, 0, 1]);
        p[16..20].copy_from_slice(&[198, 19, 0, 2]);
        p[20..24].copy_from_slice(&[1, 0, 0, 0]); // the options: not ports
        p[24..28].copy_from_slice(&[0x04, 0xd2, 0x11, 0x94]);
        let key = Ip4::outbound_cache_key(&p, 3).unwrap();
        assert_eq!(
            u32::unpack(&key).1,
            FlowKey { local: 0xc612_0001, remote: 0xc613_0002, proto: 17, local_port: 1234, remote_port: 4500 }
        );
        assert_eq!(Ip4::outbound_cache_key(&p[..26], 3), Err(KeyError::Truncated));
        // Without options, the same ports four bytes earlier.
        p[0] = 0x45;
        p.copy_within(24..28, 20);
        assert_eq!(Ip4::outbound_cache_key(&p[..24], 3), Ok(key));
        assert_eq!(Ip4::outbound_cache_key(&p[..23], 3), Err(KeyError::Truncated));
        // A header of options only up to its own length, and no ports protocol: a key.
        p[9] = 1;
        assert_eq!(u32::unpack(&Ip4::outbound_cache_key(&p[..20], 3).unwrap()).1.local_port, 0);
    }

    #[test]
    fn keys_of_ipv6_packets_past_extension_headers() {
        let mut p = [0u8; 40 + 8 + 4];
        p[0] = 0x60;
        p[6] = 60; // destination options
        p[8..24].copy_from_slice(&"2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        p[24..40].copy_from_slice(&"2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
        p[40] = 6; // then TCP
        p[42] = 1; // PadN of 4
        p[43] = 4;
        p[48..52].copy_from_slice(&[0, 80, 1, 0]);
        let k = Ip6::flow_key(&p, false).unwrap();
        assert_eq!((k.proto, k.local_port, k.remote_port), (6, 80, 256));
        assert_eq!(k.local, 0x2001_0db8u128 << 96 | 1);
        assert_eq!(Ip6::flow_key(&p[..50], false), Err(KeyError::Truncated));
        p[41] = 9; // the options header now runs past the packet
        assert_eq!(Ip6::flow_key(&p, false), Err(KeyError::BadExtension));
    }
}
