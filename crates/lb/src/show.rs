//! `show lb sessions`: a worker's live connections as rows, read between vectors (the
//! control plane asks each worker; nothing here runs on the packet path). A scan of the
//! whole table, so the listing is bounded by the caller's limit and the total counted.

use crate::family::Family;
use crate::nat::SCTP;
use crate::session::{association_tag, Balancer, ConnState};
use serde::Serialize;
use std::net::IpAddr;

/// One connection: the client's direction of it, as the client sent it and as it left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionRow {
    pub worker: usize,
    /// The service's id (`show lb services`).
    pub service: u32,
    pub protocol: u8,
    pub client: IpAddr,
    pub client_port: u16,
    /// The service address and port the client sent to.
    pub vip: IpAddr,
    pub vip_port: u16,
    pub backend: IpAddr,
    pub backend_port: u16,
    /// The source the backend sees (the node's address with `Cluster`, else the client).
    pub source: IpAddr,
    pub source_port: u16,
    pub state: ConnState,
    pub expires_in_ms: u64,
    /// The service generation the session was made or last checked with
    /// (`LbState::owns_session`: whether `service` still names its service).
    pub gen: u32,
    /// A direct-server-return SCTP association's verification tag, which its session
    /// is keyed by (`client` is then the address of its latest packet: a multi-homed
    /// client's paths share the session).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vtag: Option<u32>,
}

/// Up to `limit` connections of `b` at `now`, and how many there are in all: with
/// `service` (an id and its first generation), only that service's, not those a deleted
/// service with the same id left behind.
pub fn sessions<F: Family>(
    b: &Balancer<F>,
    worker: usize,
    now: u64,
    service: Option<(u32, u32)>,
    limit: usize,
) -> (Vec<SessionRow>, usize) {
    let mut rows = Vec::new();
    let mut total = 0;
    for (_, k, s, expires) in b.sessions.iter_live(now) {
        if !s.is_forward() || service.is_some_and(|(id, first)| id != s.service || s.gen < first) {
            continue;
        }
        total += 1;
        if rows.len() < limit {
            let k = k.flow();
            let vtag = association_tag::<F>(&k);
            // An association's key holds its tag where the client was; its entry, the
            // client's latest address and port.
            let (protocol, client, client_port) = match vtag {
                Some(_) => (SCTP, s.rewrite.src, s.rewrite.sport),
                None => (k.proto, k.src, k.sport),
            };
            rows.push(SessionRow {
                worker,
                service: s.service,
                protocol,
                client: F::to_ip(&client),
                client_port,
                vip: F::to_ip(&k.dst),
                vip_port: k.dport,
                backend: F::to_ip(&s.rewrite.dst),
                backend_port: s.rewrite.dport,
                source: F::to_ip(&s.rewrite.src),
                source_port: s.rewrite.sport,
                state: s.state,
                expires_in_ms: expires - now,
                gen: s.gen,
                vtag,
            });
        }
    }
    (rows, total)
}
