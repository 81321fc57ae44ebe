//! `ip-glean`: packets whose next hop's MAC is unknown, from `ip4-rewrite` and
//! `ip6-rewrite`. The packet is held in its worker's [`crate::hold::NeighbourHold`] and an
//! ARP request or neighbour solicitation goes out in a buffer of its own (at most
//! `solicitations_per_sec`); when the control plane has learned the neighbour and published
//! it, it tells the workers (a frame at `ip-glean-input`) and `ip-glean-release` sends the
//! held packets to the lookup again, in the order they came. A packet the hold cannot
//! take (its neighbour's share waiting, the worker's cap, holding off) becomes the
//! solicitation itself, as before holding existed (VPP's glean does so with every packet).
//!
//! ```text
//! ipN-rewrite ─(next hop unresolved)─► ip-glean ─┬► interface-output (the solicitation)
//!                                                 └─ held … ─┐
//! control plane ─(neighbour learned)─► ip-glean-input ─► ip-glean-release ─► ipN-lookup
//!                                                                        ├► ipN-rewrite (held for a link
//!                                                                        │  with an SPD: past it already)
//!                                                                        └► error-drop (waited too long)
//! ```
//!
//! Held packets that waited [`crate::hold::HOLD_SECONDS`] are dropped (`hold-expired`)
//! when either node next runs; at the end of a run to completion (`vecgate pcap`) the
//! worker sends an empty frame to `ip-glean-input` and what is held is dropped as
//! `hold-flushed`. Both nodes count under the same counters (`show errors` lists each).

use super::family::{resolve, solicit, Family, Ip4, Ip6, Resolved};
use crate::context::{HasIp, IpContext};
use crate::hold::{Held, NotHeld};
use crate::tables::Tables;
use engine::{clock, counters, next_nodes, BufIdx, Counts, ExpandNode, Pool, Taken};
use std::net::IpAddr;

/// Where the control plane's "neighbours learned" frames enter (any frame; an empty one
/// ends the run: everything held is dropped).
pub const GLEAN_INPUT: &str = "ip-glean-input";

next_nodes! {
    pub enum GleanNext {
        Output = "interface-output", Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup",
        Ip4Rewrite = "ip4-rewrite", Ip6Rewrite = "ip6-rewrite",
        // Held packets dropped (counted by the node), by reason.
        Expired = "error-drop", Flushed = "error-drop",
    }
}

counters! {
    pub enum GleanCounter {
        Held(Info, "held", "packets held until their next hop's MAC is known"),
        Released(Info, "released", "held packets sent to the lookup again once their next hop was learned"),
        Expired(Warn, "hold-expired", "held packets dropped: their next hop did not answer within 3 s"),
        Flushed(Info, "hold-flushed", "held packets dropped at the end of a run to completion (pcap)"),
        HoldFull(Warn, "hold-full", "packets not held (their next hop's share or the worker's 256 waiting): sent as the solicitation, or dropped"),
        ArpSent(Info, "arp-request-sent", "ARP requests sent for next hops whose MAC is unknown"),
        NsSent(Info, "ns-sent", "neighbour solicitations sent for next hops whose MAC is unknown"),
        Added(Info, "solicitations-added", "of those, sent in a buffer of their own (for a held packet; the others replaced their packet)"),
        Unresolved(Warn, "neighbour-unresolved", "next hop MAC unknown, the packet not held and the solicitation rate-limited: dropped"),
        NoBuffer(Warn, "no-buffer", "no buffer for a held packet's solicitation (the next packet solicits)"),
        BadAdjacency(Error, "bad-adjacency", "adjacency is not a forwarding one"),
        Malformed(Error, "malformed", "not an IPv4 or IPv6 header"),
    }
}

use GleanCounter as C;

/// The family's side of the node: where a released packet goes again (the lookup) and
/// where one resolved meanwhile goes on (the rewrite), its solicitation's counter.
trait GleanFamily: Family<Addr: Into<IpAddr>> {
    const AGAIN: GleanNext;
    const ON: GleanNext;
    const SENT: GleanCounter;
}

impl GleanFamily for Ip4 {
    const AGAIN: GleanNext = GleanNext::Ip4Lookup;
    const ON: GleanNext = GleanNext::Ip4Rewrite;
    const SENT: GleanCounter = C::ArpSent;
}

impl GleanFamily for Ip6 {
    const AGAIN: GleanNext = GleanNext::Ip6Lookup;
    const ON: GleanNext = GleanNext::Ip6Rewrite;
    const SENT: GleanCounter = C::NsSent;
}

/// A held packet can go to the lookup again: a fresh lookup finds its next hop resolved
/// (looked up afresh: the adjacency the packet carries is an index into the tables it was
/// held under). Where the lookup alone does not name one next hop (a multipath route, a
/// tunnel), the packet's own adjacency decides, and one gone from the tables sends it to
/// the lookup too.
fn resolved(tables: &Tables, pool: &Pool, h: &Held) -> bool {
    fn of<F: Family>(tables: &Tables, pool: &Pool, h: &Held) -> bool {
        let b = pool.get(h.buf);
        let Some(dst) = b.bytes().get(F::DST_AT..F::HEADER_LEN) else { return true };
        let to = F::addr(F::key(dst));
        match resolve::<F>(tables, F::fib(tables).lookup(F::key(dst)), to) {
            Resolved::Send { .. } => true,
            Resolved::Solicit { .. } => false,
            Resolved::Bad => !matches!(resolve::<F>(tables, b.meta.adj, to), Resolved::Solicit { .. }),
        }
    }
    match h.target {
        IpAddr::V4(_) => of::<Ip4>(tables, pool, h),
        IpAddr::V6(_) => of::<Ip6>(tables, pool, h),
    }
}

/// Drop what waited too long (counted, through `error-drop`), and send what can go now
/// to the lookup, in the order it came (to the lookup, not the rewrite: the tables that
/// resolved it may have moved its adjacency). What can go is looked for when `always`
/// (the control plane said a neighbour was learned) or the tables changed since the last
/// look.
fn settle_held(
    ip: &mut IpContext,
    counts: &mut Counts<'_, GleanCounter>,
    pool: &mut Pool,
    always: bool,
    out: &mut Vec<(BufIdx, GleanNext)>,
) {
    if ip.hold.is_empty() {
        return;
    }
    let mut done = Vec::new();
    ip.hold.expire(clock::now(), &mut done);
    counts.add(C::Expired, done.len() as u64);
    out.extend(done.drain(..).map(|h| (h.buf, GleanNext::Expired)));
    let changed = ip.hold.tables_changed(ip.tables.generation);
    if !(always || changed) {
        return;
    }
    let IpContext { hold, tables, .. } = ip;
    hold.take_resolved(|h| resolved(tables, pool, h), &mut done);
    counts.add(C::Released, done.len() as u64);
    out.extend(done.iter().map(|h| (h.buf, released_to(tables, pool.get_mut(h.buf), h))));
}

/// Where a released packet goes: to its lookup, which finds its next hop afresh. But a
/// packet held on its way out of a link with an SPD bound had passed the link's outbound
/// policies already (or is one they never see: a tunnel's outer packet, the ESP an SA
/// made of a PROTECT flow), so while its fresh route still leaves by that link it goes
/// to the rewrite with that route, not through the SPD again, where an SA's ESP found
/// no policy and was dropped.
fn released_to(tables: &Tables, buf: &mut engine::Buffer, h: &Held) -> GleanNext {
    fn past_spd<F: GleanFamily>(tables: &Tables, buf: &mut engine::Buffer, h: &Held) -> GleanNext {
        let Some(dst) = buf.bytes().get(F::DST_AT..F::HEADER_LEN) else { return F::AGAIN };
        let key = F::key(dst);
        let adj = F::fib(tables).lookup(key);
        match resolve::<F>(tables, adj, F::addr(key)) {
            Resolved::Send { tx_if, .. } if tx_if == h.if_index => {
                buf.meta.adj = adj;
                F::ON
            }
            _ => F::AGAIN,
        }
    }
    match h.target {
        _ if !tables.has_spd(h.if_index) => lookup_of(h),
        IpAddr::V4(_) => past_spd::<Ip4>(tables, buf, h),
        IpAddr::V6(_) => past_spd::<Ip6>(tables, buf, h),
    }
}

/// Why a held packet sent to `error-drop` was dropped (both glean nodes).
fn dropped_as(next: GleanNext) -> Option<GleanCounter> {
    match next {
        GleanNext::Expired => Some(C::Expired),
        GleanNext::Flushed => Some(C::Flushed),
        _ => None,
    }
}

fn lookup_of(h: &Held) -> GleanNext {
    match h.target {
        IpAddr::V4(_) => Ip4::AGAIN,
        IpAddr::V6(_) => Ip6::AGAIN,
    }
}

pub struct IpGlean;

impl IpGlean {
    /// One packet; `may_hold`: the caller leaves a held buffer be (`expand_run`).
    fn one<F: GleanFamily>(
        ip: &mut IpContext,
        counts: &mut Counts<'_, C>,
        pool: &mut Pool,
        bi: BufIdx,
        may_hold: bool,
        out: &mut Vec<(BufIdx, GleanNext)>,
    ) -> Result<Taken, C> {
        let b = pool.get(bi);
        let dst = b.bytes().get(F::DST_AT..F::HEADER_LEN).ok_or(C::Malformed)?;
        let (tx_if, target) = match resolve::<F>(&ip.tables, b.meta.adj, F::addr(F::key(dst))) {
            Resolved::Solicit { tx_if, target } => (tx_if, target),
            // Learned since `ipN-rewrite` looked (a newer tables version).
            Resolved::Send { .. } => {
                out.push((bi, F::ON));
                return Ok(Taken::Free);
            }
            Resolved::Bad => return Err(C::BadAdjacency),
        };
        let held = if may_hold { ip.hold.hold(tx_if, target.into(), bi, clock::now()) } else { Err(NotHeld::Off) };
        match held {
            Ok(_) => {
                counts.inc(C::Held);
                match pool.alloc(0) {
                    Some(s) => {
                        if solicit::<F>(ip, pool.get_mut(s), tx_if, target) {
                            counts.inc(F::SENT);
                            counts.inc(C::Added);
                            out.push((s, GleanNext::Output));
                        } else {
                            pool.free(s);
                        }
                    }
                    None => counts.inc(C::NoBuffer),
                }
                // The hold has the buffer now: the dispatcher leaves it be.
                Ok(Taken::Held)
            }
            Err(why) => {
                if why != NotHeld::Off {
                    counts.inc(C::HoldFull);
                }
                // The packet becomes the solicitation.
                if !solicit::<F>(ip, pool.get_mut(bi), tx_if, target) {
                    return Err(C::Unresolved);
                }
                counts.inc(F::SENT);
                out.push((bi, GleanNext::Output));
                Ok(Taken::Free)
            }
        }
    }
}

impl<Cx: HasIp> ExpandNode<Cx> for IpGlean {
    type Next = GleanNext;
    type Counter = GleanCounter;

    fn name(&self) -> &'static str {
        "ip-glean"
    }

    fn dropped_as(next: GleanNext) -> Option<C> {
        dropped_as(next)
    }

    // One packet a call, but only `expand_run` may answer `Taken::Held`.
    const TAKES_RUNS: bool = true;

    /// Not called by the dispatcher (`TAKES_RUNS`); holds nothing.
    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, C>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, GleanNext)>,
    ) -> Result<(), C> {
        Self::glean(cx.ip(), counts, pool, bi, false, out).map(|_| ())
    }

    fn expand_run(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, C>,
        pool: &mut Pool,
        input: &[BufIdx],
        out: &mut Vec<(BufIdx, GleanNext)>,
    ) -> (usize, Result<Taken, C>) {
        (1, Self::glean(cx.ip(), counts, pool, input[0], true, out))
    }
}

impl IpGlean {
    fn glean(
        ip: &mut IpContext,
        counts: &mut Counts<'_, C>,
        pool: &mut Pool,
        bi: BufIdx,
        may_hold: bool,
        out: &mut Vec<(BufIdx, GleanNext)>,
    ) -> Result<Taken, C> {
        settle_held(ip, counts, pool, false, out);
        match pool.get(bi).bytes().first().map(|v| v >> 4) {
            Some(4) => Self::one::<Ip4>(ip, counts, pool, bi, may_hold, out),
            Some(6) => Self::one::<Ip6>(ip, counts, pool, bi, may_hold, out),
            _ => Err(C::Malformed),
        }
    }
}

/// `ip-glean-release`: a frame from the control plane after it published learned
/// neighbours sends on what is held for them; an empty frame (the end of a run) drops
/// everything held. The frame itself is freed.
pub struct IpGleanRelease;

impl<Cx: HasIp> ExpandNode<Cx> for IpGleanRelease {
    type Next = GleanNext;
    type Counter = GleanCounter;

    fn name(&self) -> &'static str {
        "ip-glean-release"
    }

    fn dropped_as(next: GleanNext) -> Option<C> {
        dropped_as(next)
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, C>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, GleanNext)>,
    ) -> Result<(), C> {
        let ip = cx.ip();
        if pool.get(bi).is_empty() {
            let mut all = Vec::new();
            ip.hold.take_all(&mut all);
            counts.add(C::Flushed, all.len() as u64);
            out.extend(all.iter().map(|h| (h.buf, GleanNext::Flushed)));
        } else {
            settle_held(ip, counts, pool, true, out);
        }
        Ok(())
    }
}
