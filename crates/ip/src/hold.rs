//! Packets waiting for their next hop's MAC: a worker's bounded queue of buffers that
//! `ip-glean` holds while it solicits the next hop, released (to the lookup) when the
//! neighbour is learned, dropped when it does not answer in time. Linux holds a few packets
//! per unresolved neighbour (`unres_qlen`); VPP's glean drops them, so the first packet
//! to a new next hop — a ping, a TCP SYN, a tunnel's first G-PDU — was lost here too.
//!
//! No I/O and no clock of its own: a buffer is whatever names it (a pool's [`BufIdx`] in
//! the worker), time is a parameter (TSC ticks), so the rules are tested without a pool
//! or a graph.

use engine::{BufIdx, IfIndex};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Packets a worker holds at most, over all its neighbours: a bound on the buffers a
/// flood toward unanswered addresses can tie up.
pub const HOLD_MAX: usize = 256;

/// Packets held per neighbour unless configured (`[dataplane] neighbour_hold`): Linux's
/// number for IPv6 and its old one for IPv4.
pub const HOLD_PER_NEIGHBOUR: usize = 3;

/// How long a packet waits for its neighbour, in seconds: Linux's three probes a second
/// apart.
pub const HOLD_SECONDS: u64 = 3;

/// One held packet and whom it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held<B = BufIdx> {
    pub if_index: IfIndex,
    pub target: IpAddr,
    pub buf: B,
    /// When it was held (the caller's ticks).
    pub since: u64,
}

/// A neighbour packets wait for: how many, and since when the oldest (ticks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub if_index: IfIndex,
    pub target: IpAddr,
    pub packets: usize,
    pub since: u64,
}

/// Why a packet was not held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotHeld {
    /// Holding is off (`neighbour_hold = 0`).
    Off,
    /// Its neighbour already has its share waiting.
    NeighbourFull,
    /// The worker holds [`HOLD_MAX`] packets.
    Full,
}

/// A worker's held packets, oldest first.
#[derive(Debug)]
pub struct NeighbourHold<B = BufIdx> {
    held: VecDeque<Held<B>>,
    per_neighbour: usize,
    /// Ticks a packet may wait.
    timeout: u64,
    /// The tables generation the held packets were last checked against
    /// ([`NeighbourHold::tables_changed`]).
    checked: u64,
    /// How many packets are held, for the control plane ([`NeighbourHold::gauge`]).
    gauge: Arc<AtomicUsize>,
}

impl<B: Copy> NeighbourHold<B> {
    /// Up to `per_neighbour` packets per neighbour (0: none held), each for `timeout` ticks.
    pub fn new(per_neighbour: usize, timeout: u64) -> Self {
        NeighbourHold { held: VecDeque::new(), per_neighbour, timeout, checked: 0, gauge: Arc::default() }
    }

    /// The number of packets held, as the worker last changed it: the control plane
    /// reads it to know whether the worker's hold needs a look (expiry) while no packet
    /// reaches `ip-glean`.
    pub fn gauge(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.gauge)
    }

    fn changed(&self) {
        self.gauge.store(self.held.len(), Ordering::Relaxed);
    }

    /// Whether the tables `generation` differs from the one this was last asked about (and
    /// remember it): held packets can only become sendable with new tables, so a flood
    /// toward unanswered addresses does not make every packet look at every held one.
    pub fn tables_changed(&mut self, generation: u64) -> bool {
        std::mem::replace(&mut self.checked, generation) != generation
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Hold `buf` until `target` on `if_index` is known; on success, whether it is the
    /// first packet waiting for that neighbour.
    pub fn hold(&mut self, if_index: IfIndex, target: IpAddr, buf: B, now: u64) -> Result<bool, NotHeld> {
        if self.per_neighbour == 0 {
            return Err(NotHeld::Off);
        }
        let waiting = self.held.iter().filter(|h| h.if_index == if_index && h.target == target).count();
        if waiting >= self.per_neighbour {
            return Err(NotHeld::NeighbourFull);
        }
        if self.held.len() >= HOLD_MAX {
            return Err(NotHeld::Full);
        }
        self.held.push_back(Held { if_index, target, buf, since: now });
        self.changed();
        Ok(waiting == 0)
    }

    /// Take the packets that waited `timeout` or longer at `now` into `out`, oldest first.
    pub fn expire(&mut self, now: u64, out: &mut Vec<Held<B>>) {
        while let Some(h) = self.held.front().filter(|h| now.saturating_sub(h.since) >= self.timeout) {
            out.push(*h);
            self.held.pop_front();
        }
        self.changed();
    }

    /// Take the packets `resolved` says can go now into `out`, in the order they came;
    /// the others keep waiting.
    pub fn take_resolved(&mut self, mut resolved: impl FnMut(&Held<B>) -> bool, out: &mut Vec<Held<B>>) {
        let before = out.len();
        self.held.retain(|h| {
            let go = resolved(h);
            if go {
                out.push(*h);
            }
            !go
        });
        debug_assert!(out[before..].windows(2).all(|w| w[0].since <= w[1].since));
        self.changed();
    }

    /// The neighbours packets wait for (`show neighbours`' incomplete ones): each with how
    /// many packets wait and since when the oldest, in the order they were first held.
    pub fn waiting(&self) -> Vec<Waiting> {
        let mut v: Vec<Waiting> = Vec::new();
        for h in &self.held {
            match v.iter_mut().find(|w| w.if_index == h.if_index && w.target == h.target) {
                Some(w) => w.packets += 1,
                None => v.push(Waiting { if_index: h.if_index, target: h.target, packets: 1, since: h.since }),
            }
        }
        v
    }

    /// Take every held packet into `out`, oldest first (the run is ending).
    pub fn take_all(&mut self, out: &mut Vec<Held<B>>) {
        out.extend(self.held.drain(..));
        self.changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 1, 50));
    const B: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x50));

    fn ifx(i: u16) -> IfIndex {
        IfIndex(i)
    }

    type Buf = u32;
    #[allow(non_snake_case)]
    fn Buf(i: u32) -> Buf {
        i
    }

    #[test]
    fn a_neighbour_holds_its_share_and_the_worker_its_cap() {
        let mut h = NeighbourHold::<Buf>::new(3, 100);
        assert_eq!(h.hold(ifx(1), A, Buf(0), 0), Ok(true));
        assert_eq!(h.hold(ifx(1), A, Buf(1), 1), Ok(false));
        assert_eq!(h.hold(ifx(1), A, Buf(2), 2), Ok(false));
        assert_eq!(h.hold(ifx(1), A, Buf(3), 3), Err(NotHeld::NeighbourFull));
        // The same address on another interface, and another address, are other neighbours.
        assert_eq!(h.hold(ifx(2), A, Buf(4), 3), Ok(true));
        assert_eq!(h.hold(ifx(1), B, Buf(5), 3), Ok(true));
        assert_eq!(h.len(), 5);
        assert_eq!(h.gauge().load(Ordering::Relaxed), 5, "the control plane's view follows");
        let w = |i, target, packets, since| Waiting { if_index: ifx(i), target, packets, since };
        assert_eq!(h.waiting(), [w(1, A, 3, 0), w(2, A, 1, 3), w(1, B, 1, 3)], "per neighbour, its oldest packet's time");
        let mut big = NeighbourHold::<Buf>::new(HOLD_MAX + 1, 100);
        for i in 0..HOLD_MAX as u32 {
            assert!(big.hold(ifx(1), A, Buf(i), 0).is_ok());
        }
        assert_eq!(big.hold(ifx(1), B, Buf(999), 0), Err(NotHeld::Full));
        assert_eq!(NeighbourHold::<Buf>::new(0, 100).hold(ifx(1), A, Buf(0), 0), Err(NotHeld::Off));
    }

    #[test]
    fn a_tables_version_is_news_once() {
        let mut h = NeighbourHold::<Buf>::new(3, 100);
        assert!(h.tables_changed(7));
        assert!(!h.tables_changed(7));
        assert!(h.tables_changed(8));
        assert!(!h.tables_changed(8));
    }

    #[test]
    fn packets_go_in_order_when_resolved_and_expire_oldest_first() {
        let mut h = NeighbourHold::<Buf>::new(3, 100);
        for (i, (t, at)) in [(A, 0), (B, 10), (A, 20), (B, 30)].into_iter().enumerate() {
            h.hold(ifx(1), t, Buf(i as u32), at).unwrap();
        }
        let mut out = Vec::new();
        h.take_resolved(|w| w.target == A, &mut out);
        assert_eq!(out.iter().map(|w| w.buf).collect::<Vec<_>>(), [Buf(0), Buf(2)]);
        assert_eq!(h.len(), 2);
        // A's share is free again.
        assert_eq!(h.hold(ifx(1), A, Buf(9), 40), Ok(true));
        out.clear();
        h.expire(109, &mut out);
        assert!(out.is_empty(), "none has waited 100 ticks");
        h.expire(130, &mut out);
        assert_eq!(out.iter().map(|w| w.buf).collect::<Vec<_>>(), [Buf(1), Buf(3)]);
        out.clear();
        assert_eq!(h.gauge().load(Ordering::Relaxed), 1);
        h.take_all(&mut out);
        assert_eq!(out.iter().map(|w| (w.target, w.buf)).collect::<Vec<_>>(), [(A, Buf(9))]);
        assert!(h.is_empty());
        assert_eq!(h.gauge().load(Ordering::Relaxed), 0);
    }
}
