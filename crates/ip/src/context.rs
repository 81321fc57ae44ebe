//! The per-worker context every IP node receives: the current tables, rate limiters,
//! and the queue of events for the control plane (learned neighbours).

use crate::hint::TunnelHints;
use crate::reassembly::{Reassembly, ReassemblyLimits};
use crate::tables::Tables;
use arc_swap::{ArcSwap, Cache};
use crossbeam_channel::Sender;
use engine::{clock, IfIndex};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use wire::EthernetAddress;

/// What the dataplane tells the control plane. Sent with `try_send`: a full queue
/// loses the event (counted by the node), never blocks a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpEvent {
    NeighbourLearned { if_index: IfIndex, ip: IpAddr, mac: EthernetAddress },
}

/// A token bucket on the TSC: `rate` tokens per second, up to `burst`.
pub struct TokenBucket {
    tokens: u64,
    burst: u64,
    cycles_per_token: u64,
    last: u64,
}

impl TokenBucket {
    pub fn new(rate_per_sec: u64, burst: u64) -> Self {
        let hz = clock::hz();
        TokenBucket { tokens: burst, burst, cycles_per_token: (hz / rate_per_sec.max(1)).max(1), last: clock::now() }
    }

    /// The bucket of one kind of reply to what others send (echo, ARP, neighbour
    /// advertisement, GTP-U signalling): `rate` per second, a burst of up to 100.
    pub fn reply_limit(rate_per_sec: u64) -> Self {
        TokenBucket::new(rate_per_sec, rate_per_sec.clamp(1, 100))
    }

    /// Take one token if there is one.
    pub fn take(&mut self) -> bool {
        self.take_at(clock::now())
    }

    fn take_at(&mut self, now: u64) -> bool {
        let earned = now.wrapping_sub(self.last) / self.cycles_per_token;
        if earned > 0 {
            let tokens = self.tokens.saturating_add(earned);
            if tokens >= self.burst {
                self.tokens = self.burst;
                self.last = now;
            } else {
                // The part of a token earned since keeps counting: moving `last` to
                // `now` would throw it away on every refill and give well under `rate`.
                self.tokens = tokens;
                self.last = self.last.wrapping_add(earned * self.cycles_per_token);
            }
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            false
        }
    }
}

/// Rate limits for packets the gateway originates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// ICMP/ICMPv6 errors per second per worker (RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)).
    pub icmp_errors_per_sec: u64,
    pub icmp_burst: u64,
    /// ARP requests / neighbour solicitations per second per worker.
    pub solicit_per_sec: u64,
    /// Replies to what anyone may send us (ICMP and ICMPv6 echo replies, ARP replies,
    /// neighbour advertisements) per second per worker, each kind its own bucket of up to
    /// 100: a spoofed flood of one kind neither reflects at full rate nor starves the
    /// others (a ping flood must not stop neighbour resolution).
    pub replies_per_sec: u64,
    /// Reassembly of fragments addressed to the gateway, per worker and family.
    pub reassembly: ReassemblyLimits,
    /// Packets held per unresolved neighbour while it is solicited (0: none, each such
    /// packet becomes the solicitation); at most [`crate::hold::HOLD_MAX`] per worker.
    pub neighbour_hold: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            icmp_errors_per_sec: 1000,
            icmp_burst: 100,
            solicit_per_sec: 100,
            replies_per_sec: 1000,
            reassembly: ReassemblyLimits::default(),
            neighbour_hold: crate::hold::HOLD_PER_NEIGHBOUR,
        }
    }
}

pub struct IpContext {
    cache: Cache<Arc<ArcSwap<Tables>>, Arc<Tables>>,
    pub tables: Arc<Tables>,
    pub events: Option<Sender<IpEvent>>,
    pub icmp4: TokenBucket,
    pub icmp6: TokenBucket,
    pub solicit: TokenBucket,
    /// `Limits::replies_per_sec`, one bucket per reply kind.
    pub echo4: TokenBucket,
    pub echo6: TokenBucket,
    pub arp_replies: TokenBucket,
    pub advertisements: TokenBucket,
    /// IPv4 identification for packets this worker originates.
    pub ident: u16,
    /// IPv6 Fragment header identification for packets this worker fragments; starts
    /// at a random value so that identifications are not predictable across restarts.
    pub ident6: u32,
    pub reassembly4: Reassembly<Ipv4Addr>,
    pub reassembly6: Reassembly<Ipv6Addr>,
    /// The outer headers of the tunnels decapsulated last, for `ethernet-input`.
    pub tunnel_hints: TunnelHints,
    /// Packets waiting for their next hop's MAC (`ip-glean`).
    pub hold: crate::hold::NeighbourHold,
}

impl IpContext {
    pub fn new(shared: Arc<ArcSwap<Tables>>, events: Option<Sender<IpEvent>>, limits: Limits) -> Self {
        let tables = shared.load_full();
        IpContext {
            cache: Cache::new(shared),
            tables,
            events,
            icmp4: TokenBucket::new(limits.icmp_errors_per_sec, limits.icmp_burst),
            icmp6: TokenBucket::new(limits.icmp_errors_per_sec, limits.icmp_burst),
            solicit: TokenBucket::new(limits.solicit_per_sec, limits.solicit_per_sec.clamp(1, 10)),
            echo4: TokenBucket::reply_limit(limits.replies_per_sec),
            echo6: TokenBucket::reply_limit(limits.replies_per_sec),
            arp_replies: TokenBucket::reply_limit(limits.replies_per_sec),
            advertisements: TokenBucket::reply_limit(limits.replies_per_sec),
            ident: 0,
            ident6: {
                use std::hash::BuildHasher;
                std::collections::hash_map::RandomState::new().hash_one(0u8) as u32
            },
            reassembly4: Reassembly::new(limits.reassembly, u16::MAX as usize - 20),
            reassembly6: Reassembly::new(limits.reassembly, u16::MAX as usize),
            tunnel_hints: TunnelHints::default(),
            hold: crate::hold::NeighbourHold::new(limits.neighbour_hold, crate::hold::HOLD_SECONDS * clock::hz()),
        }
    }

    /// Report a neighbour; false if the queue was full.
    pub fn learn(&self, if_index: IfIndex, ip: IpAddr, mac: EthernetAddress) -> bool {
        match &self.events {
            Some(tx) => tx.try_send(IpEvent::NeighbourLearned { if_index, ip, mac }).is_ok(),
            None => true,
        }
    }
}

impl engine::worker::Context for IpContext {
    #[inline]
    fn refresh(&mut self) {
        let t = self.cache.load();
        if !Arc::ptr_eq(t, &self.tables) {
            self.tables = Arc::clone(t);
            // A hint's endpoint may be gone from the new tables.
            self.tunnel_hints.forget();
        }
    }
}

/// A worker context that holds an [`IpContext`]. The IP nodes are generic over it, so a
/// dataplane that adds features (GTP-U, GUE, …) composes one context holding each
/// feature's part, and every node reaches the part it reads.
pub trait HasIp: engine::worker::Context + Send + 'static {
    fn ip(&mut self) -> &mut IpContext;
    /// `ethernet-input` may forward an IP parcel whole itself ([`crate::parcel`]): the
    /// parcel nodes are configured not to read segments in transit. Without parcel
    /// settings (the default), parcels go to `parcelN-input` as they come.
    #[inline(always)]
    fn parcels_whole_at_input(&self) -> bool {
        false
    }
}

impl HasIp for IpContext {
    #[inline(always)]
    fn ip(&mut self) -> &mut IpContext {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::TokenBucket;

    /// A bucket of 1000 a second asked a little more often than that grants 1000 a
    /// second, not the ~600 it gave while each refill dropped the fraction of a token
    /// earned since.
    #[test]
    fn a_bucket_keeps_the_fraction_of_a_token_between_refills() {
        let cpt = 2_600_000u64; // 2.6 GHz at 1000 a second
        let mut b = TokenBucket { tokens: 0, burst: 100, cycles_per_token: cpt, last: 0 };
        // 11,000 asks over 10 s (1100 a second, evenly spaced).
        let granted = (1..=11_000u64).filter(|i| b.take_at(i * 10 * 1000 * cpt / 11_000)).count();
        assert!((9_990..=10_000).contains(&granted), "{granted} granted in 10 s at 1000 a second");
    }

    /// Idle time fills the bucket to its burst and no further.
    #[test]
    fn a_bucket_fills_to_its_burst() {
        let cpt = 1000u64;
        let mut b = TokenBucket { tokens: 0, burst: 5, cycles_per_token: cpt, last: 0 };
        let now = 1_000_000;
        let granted = (0..20).filter(|_| b.take_at(now)).count();
        assert_eq!(granted, 5);
        assert!(!b.take_at(now + cpt - 1));
        assert!(b.take_at(now + cpt));
    }
}
