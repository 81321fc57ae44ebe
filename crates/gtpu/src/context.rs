//! The per-worker GTP-U context: the tables version the worker holds, the last-TEID
//! cache, sequence numbers, the rate limiter for the messages we originate, and the
//! queue of path-management events for the control plane.

use crate::tables::GtpuTables;
use crate::teid_table::TeidKey;
use arc_swap::{ArcSwap, Cache};
use crossbeam_channel::Sender;
use ip::context::TokenBucket;
use ip::{HasIp, IpContext};
use std::net::IpAddr;
use std::sync::Arc;

/// What the GTP-U nodes tell the control plane (sent with `try_send`; a full queue
/// loses the event and the node counts it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GtpuEvent {
    /// A peer told us it has no context for a TEID we sent to (TS 29.281 §7.3.1).
    ErrorIndication { peer: IpAddr, teid: u32 },
    /// A peer answered an echo request; `recovery` is its restart counter.
    EchoResponse { peer: IpAddr, recovery: Option<u8> },
}

impl std::fmt::Display for GtpuEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GtpuEvent::ErrorIndication { peer, teid } => write!(f, "error indication from {peer} for teid {teid:#x}"),
            GtpuEvent::EchoResponse { peer, recovery: Some(r) } => write!(f, "echo response from {peer}, recovery {r}"),
            GtpuEvent::EchoResponse { peer, recovery: None } => write!(f, "echo response from {peer}"),
        }
    }
}

pub struct GtpuContext {
    cache: Cache<Arc<ArcSwap<GtpuTables>>, Arc<GtpuTables>>,
    pub tables: Arc<GtpuTables>,
    /// The last decap key looked up, its tunnel and decap data (reset with every new
    /// table version).
    pub last: Option<(TeidKey, u32, u32)>,
    /// Next sequence number per tunnel, for tunnels that send them.
    pub seq: Vec<u16>,
    /// Error Indications and Supported Extension Headers Notifications we send.
    pub replies: TokenBucket,
    /// Echo Responses we send (their own bucket at the same rate: a flood of G-PDUs to
    /// unknown TEIDs must not make path management fail).
    pub echo_replies: TokenBucket,
    pub events: Option<Sender<GtpuEvent>>,
    /// Per-tunnel packets and bytes, read by the control plane while the worker runs.
    pub counters: ip::tunnel_counters::TunnelCounterWriter,
}

impl GtpuContext {
    pub fn new(shared: Arc<ArcSwap<GtpuTables>>, events: Option<Sender<GtpuEvent>>, replies_per_sec: u64) -> Self {
        let tables = shared.load_full();
        let seq = vec![0; tables.tunnels.len()];
        let mut counters = ip::tunnel_counters::TunnelCounterWriter::new(ip::tunnel_counters::TunnelCounters::new());
        counters.follow(tables.tunnels.len(), tables.count_tunnels);
        GtpuContext {
            counters,
            cache: Cache::new(shared),
            tables,
            last: None,
            seq,
            replies: TokenBucket::reply_limit(replies_per_sec),
            echo_replies: TokenBucket::reply_limit(replies_per_sec),
            events,
        }
    }

    /// Pick up a newly published table version.
    #[inline]
    pub fn refresh(&mut self) {
        let t = self.cache.load();
        if !Arc::ptr_eq(t, &self.tables) {
            self.tables = Arc::clone(t);
            self.last = None;
            if self.seq.len() < self.tables.tunnels.len() {
                self.seq.resize(self.tables.tunnels.len(), 0);
            }
            self.counters.follow(self.tables.tunnels.len(), self.tables.count_tunnels);
        }
    }

    pub fn report(&self, ev: GtpuEvent) -> bool {
        match &self.events {
            Some(tx) => tx.try_send(ev).is_ok(),
            None => true,
        }
    }
}

/// A worker context with both the IP and the GTP-U parts; the GTP-U nodes need both at
/// once (an encap reads its tunnel and the outer adjacency).
pub trait HasGtpu: HasIp {
    fn split(&mut self) -> (&mut IpContext, &mut GtpuContext);
}
