//! Which worker handles a packet of a load-balanced connection, in either direction.
//!
//! Sessions are per worker, so both directions of a NAT connection must reach the worker
//! that holds its session: the client's packets and the backend's replies, which carry
//! other addresses and ports (the reply of a `Cluster` connection goes to the node's
//! SNAT address and port). A flow hash of the 5-tuple, ours or the kernel's, sends the
//! two directions to different workers. So a connection's worker is its *client
//! endpoint's* (address, port, protocol) hash: a client's packet carries it as its
//! source, a reply from a backend as its destination, and a Cluster reply's destination
//! is the SNAT address and a port that the owning worker chose so that it hashes to
//! itself ([`owns_snat_port`]).
//!
//! [`owner`] gives the worker for packets the load balancer handles (to a service, from a
//! NAT backend, an ICMP error about either) and `None` for the rest, which keep the flow
//! hash (or the worker that received them). `worker-handoff` asks it for every frame a
//! worker spreads, and `session-handoff` for every frame a worker received itself when
//! there are several.

use crate::family::{Family, V4, V6};
use crate::nat::{Layout, SCTP, TCP, UDP};
use crate::session::{tag_addr, SCTP_ASSOCIATION};
use crate::tables::{FamilyTables, LbTables};
use std::net::IpAddr;

/// The worker of client endpoint `addr:port` among `workers`.
#[inline]
pub fn client_worker<F: Family>(addr: &F::Addr, port: u16, proto: u8, workers: u32) -> u32 {
    engine::hash::reduce(F::flow_hash(addr, &F::Addr::default(), port, 0, proto), workers)
}

/// Whether worker `me` of `workers` may use `port` on the SNAT address `node`: replies
/// to it come to `me`, and it is no service's port there (whose packets go by their
/// client: a NodePort, or a service on the node's own address).
#[inline]
pub fn owns_snat_port<F: Family>(t: &FamilyTables<F>, node: &F::Addr, port: u16, proto: u8, me: u32, workers: u32) -> bool {
    (workers <= 1 || client_worker::<F>(node, port, proto, workers) == me)
        && !t.node_ports.contains_key(&(port, proto))
        && !t.vips.contains_key(&(*node, port, proto))
}

/// The worker that must handle IP packet `l3` (`None`: the load balancer has no say);
/// `is_local` says whether an address is one of the node's (NodePort services).
#[inline]
pub fn owner(t: &LbTables, l3: &[u8], workers: u32, is_local: impl Fn(IpAddr) -> bool) -> Option<u32> {
    if t.v4.nothing_to_steer() && t.v6.nothing_to_steer() {
        return None;
    }
    match l3.first()? >> 4 {
        4 => family_owner::<V4>(&t.v4, l3, workers, is_local),
        6 => family_owner::<V6>(&t.v6, l3, workers, is_local),
        _ => None,
    }
}

#[inline]
fn family_owner<F: Layout>(t: &FamilyTables<F>, pkt: &[u8], workers: u32, is_local: impl Fn(IpAddr) -> bool) -> Option<u32> {
    if t.nothing_to_steer() {
        return None;
    }
    // Fragments and extension headers: the load balancer drops them.
    let (l4, proto) = F::l4(pkt).ok()?;
    let error = proto == F::ICMP;
    let (src, dst, sport, dport, proto) = if proto == TCP || proto == UDP || proto == SCTP {
        let p = pkt.get(l4..l4 + 4)?;
        let (sport, dport) = (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]));
        // Neither to a service's port nor from a backend's: not the load balancer's.
        if !t.service_ports.contains(dport) && !t.backend_ports.contains(sport) {
            return None;
        }
        (F::src(pkt), F::dst(pkt), sport, dport, proto)
    } else if error {
        // An error about a connection goes where the answer to the packet it quotes
        // would go (it travels against that packet).
        let q = crate::nat::icmp_error::<F>(pkt).ok()?.quoted;
        (q.dst, q.src, q.dport, q.sport, q.proto)
    } else {
        return None;
    };
    // A client's packet to a service: its source is the client.
    let service = t.vips.get(&(dst, dport, proto)).or_else(|| t.node_ports.get(&(dport, proto)).filter(|_| is_local(F::to_ip(&dst))));
    if let Some(&id) = service {
        // A direct-server-return SCTP association's packets after its INIT: by the
        // association's key (its verification tag), whichever address the client sends
        // from (`Balancer::direct_sctp`). Not an ICMP error about the association: its
        // quote carries the client's own tag, and the error goes to the backend the
        // 5-tuple picks (`Balancer::direct_backend`), on any worker.
        if proto == SCTP && !error {
            if let Some(w) = association_worker(t, pkt, l4, id, sport, workers) {
                return Some(w);
            }
        }
        return Some(client_worker::<F>(&src, sport, proto, workers));
    }
    // A backend's reply: its destination is the client, or the SNAT address and port.
    if t.nat_backends.contains(&src) {
        return Some(client_worker::<F>(&dst, dport, proto, workers));
    }
    None
}

/// The worker of a packet of a direct-server-return SCTP association (its service `id`,
/// its transport header at `l4`): that of its session key's tag and port
/// ([`crate::session::association_key`]), or
/// `None` for an INIT (tag 0) or a NAT service's packet, which go by their client.
#[cold]
fn association_worker<F: Layout>(t: &FamilyTables<F>, pkt: &[u8], l4: usize, id: u32, sport: u16, workers: u32) -> Option<u32> {
    let vtag = wire::sctp::SctpPacket::new_checked(pkt.get(l4..)?).ok()?.verification_tag();
    let direct = t.services.get(id as usize)?.as_ref()?.forwarding.is_encap();
    if vtag == 0 || !direct {
        return None;
    }
    Some(client_worker::<F>(&tag_addr::<F>(vtag), sport, SCTP_ASSOCIATION, workers))
}
