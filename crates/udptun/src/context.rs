//! The per-worker UDP tunnel context: the tables version the worker holds and the queue
//! of control messages for the control plane.

use crate::tables::UdpTunTables;
use arc_swap::{ArcSwap, Cache};
use crossbeam_channel::Sender;
use ip::{HasIp, IpContext};
use std::net::IpAddr;
use std::sync::Arc;

/// What the tunnel nodes tell the control plane (sent with `try_send`; a full queue
/// loses the event and the node counts it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum UdpTunEvent {
    /// A GUE control message (C bit) arrived on a tunnel: its type and length.
    Control { tunnel: u32, peer: IpAddr, ctype: u8, len: usize },
}

impl std::fmt::Display for UdpTunEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UdpTunEvent::Control { tunnel, peer, ctype, len } => {
                write!(f, "GUE control message type {ctype} ({len} bytes) from {peer} on {}{tunnel}", ip::tables::UDP_TUNNEL_IF_PREFIX)
            }
        }
    }
}

pub struct UdpTunContext {
    cache: Cache<Arc<ArcSwap<UdpTunTables>>, Arc<UdpTunTables>>,
    pub tables: Arc<UdpTunTables>,
    pub events: Option<Sender<UdpTunEvent>>,
    /// Per-tunnel packets and bytes, read by the control plane while the worker runs.
    pub counters: ip::tunnel_counters::TunnelCounterWriter,
}

impl UdpTunContext {
    pub fn new(shared: Arc<ArcSwap<UdpTunTables>>, events: Option<Sender<UdpTunEvent>>) -> Self {
        let tables = shared.load_full();
        let mut counters = ip::tunnel_counters::TunnelCounterWriter::new(ip::tunnel_counters::TunnelCounters::new());
        counters.follow(tables.tunnels.len(), tables.count_tunnels);
        UdpTunContext { cache: Cache::new(shared), tables, events, counters }
    }

    /// Pick up a newly published table version; true if there was one (the worker's
    /// tunnel hints, built from the old one, must then go: [`ip::hint`]).
    #[inline]
    pub fn refresh(&mut self) -> bool {
        let t = self.cache.load();
        if Arc::ptr_eq(t, &self.tables) {
            return false;
        }
        self.tables = Arc::clone(t);
        self.counters.follow(self.tables.tunnels.len(), self.tables.count_tunnels);
        true
    }

    pub fn report(&self, ev: UdpTunEvent) -> bool {
        match &self.events {
            Some(tx) => tx.try_send(ev).is_ok(),
            None => true,
        }
    }
}

/// A worker context with the IP and the UDP tunnel parts.
pub trait HasUdpTun: HasIp {
    fn split_udptun(&mut self) -> (&mut IpContext, &mut UdpTunContext);
}
