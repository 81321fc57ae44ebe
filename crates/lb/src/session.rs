//! The per-worker session table and the balancer's decision for one packet, sans-IO:
//! a flow's 5-tuple, its TCP flags and the time in; the translation to apply (or a
//! named reason to drop) out.
//!
//! A connection is two entries, like conntrack's two tuples: the client's direction
//! (client → service, translated to node-or-client → backend) and the reply direction
//! (backend → node-or-client, translated to service → client). Each entry holds the
//! translation for packets that match its key and the slot of its twin; the two share
//! one state and expiry, written together. An established flow keeps its backend while
//! that backend is in the service in any condition (a terminating backend keeps its
//! flows), whatever the Maglev table now says.

use crate::family::Family;
use crate::nat::Deltas;
use crate::table::{Found, Hashed, SlotIdx, Table, TableKey};
use crate::tables::{FamilyTables, ServiceTable};
use ip::tables::ADJ_MISS;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A flow's 5-tuple as a packet carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct FlowKey<A> {
    pub src: A,
    pub dst: A,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
}

impl<A: Copy> FlowKey<A> {
    pub fn reversed(&self) -> Self {
        FlowKey { src: self.dst, dst: self.src, sport: self.dport, dport: self.sport, proto: self.proto }
    }
}

/// What a packet's addresses and ports become.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
pub struct Rewrite<A> {
    pub src: A,
    pub dst: A,
    pub sport: u16,
    pub dport: u16,
}

/// Where a connection is in its life: the timeout it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, zerocopy::FromZeros)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum ConnState {
    /// The client's SYN seen, no answer yet.
    #[default]
    SynSent,
    Established,
    /// A FIN seen in either direction.
    Closing,
    /// An RST seen.
    Reset,
    /// UDP, no reply yet.
    UdpNew,
    /// UDP, a reply seen.
    UdpReplied,
    /// SCTP (RFC 9260 §4; Linux conntrack's states), the client's INIT seen (and maybe
    /// the backend's INIT ACK), not its COOKIE ECHO.
    SctpCookieWait,
    /// SCTP, the client's COOKIE ECHO seen, not the backend's COOKIE ACK.
    SctpCookieEchoed,
    /// SCTP, the association up: the backend's COOKIE ACK seen (by direct server
    /// return, whose replies pass elsewhere: the client's COOKIE ECHO), or picked up
    /// mid-stream. Its heartbeats (every 30 s by default, RFC 9260 `HB.interval`) keep
    /// an idle one alive.
    SctpEstablished,
    /// SCTP, a SHUTDOWN seen (either way).
    SctpShutdown,
    /// SCTP, a SHUTDOWN ACK seen.
    SctpShutdownAck,
    /// SCTP, an ABORT or SHUTDOWN COMPLETE seen: the association is over (kept a while
    /// for their retransmissions; an INIT starts a new one).
    SctpClosed,
}

/// How many states there are (the timeouts' arrays are indexed by state).
const STATES: usize = ConnState::SctpClosed as usize + 1;

/// Timeouts by state, in milliseconds. Defaults from Linux conntrack's (UDP, SYN, FIN;
/// SCTP's all, as `nf_conntrack_proto_sctp` has them as of Linux 6.5: established 210 s,
/// the handshake's and shutdown's states 3 s, closed 10 s) and kube-proxy's
/// established-TCP setting (24 h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    pub tcp_syn_ms: u64,
    pub tcp_established_ms: u64,
    pub tcp_closing_ms: u64,
    pub tcp_reset_ms: u64,
    pub udp_ms: u64,
    pub udp_replied_ms: u64,
    pub sctp_cookie_wait_ms: u64,
    pub sctp_cookie_echoed_ms: u64,
    pub sctp_established_ms: u64,
    pub sctp_shutdown_ms: u64,
    pub sctp_shutdown_ack_ms: u64,
    pub sctp_closed_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_syn_ms: 60_000,
            tcp_established_ms: 86_400_000,
            tcp_closing_ms: 120_000,
            tcp_reset_ms: 10_000,
            udp_ms: 30_000,
            udp_replied_ms: 120_000,
            sctp_cookie_wait_ms: 3_000,
            sctp_cookie_echoed_ms: 3_000,
            sctp_established_ms: 210_000,
            sctp_shutdown_ms: 3_000,
            sctp_shutdown_ack_ms: 3_000,
            sctp_closed_ms: 10_000,
        }
    }
}

impl Timeouts {
    pub fn of(&self, s: ConnState) -> u64 {
        self.by_state()[s as usize]
    }

    /// Each timeout with its name as the `[lb] timeouts` table spells it, in
    /// `ConnState`'s order (the config check names the field it refuses).
    pub fn named(&self) -> [(&'static str, u64); STATES] {
        [
            ("tcp_syn_ms", self.tcp_syn_ms),
            ("tcp_established_ms", self.tcp_established_ms),
            ("tcp_closing_ms", self.tcp_closing_ms),
            ("tcp_reset_ms", self.tcp_reset_ms),
            ("udp_ms", self.udp_ms),
            ("udp_replied_ms", self.udp_replied_ms),
            ("sctp_cookie_wait_ms", self.sctp_cookie_wait_ms),
            ("sctp_cookie_echoed_ms", self.sctp_cookie_echoed_ms),
            ("sctp_established_ms", self.sctp_established_ms),
            ("sctp_shutdown_ms", self.sctp_shutdown_ms),
            ("sctp_shutdown_ack_ms", self.sctp_shutdown_ack_ms),
            ("sctp_closed_ms", self.sctp_closed_ms),
        ]
    }

    /// The timeouts indexed by `ConnState as usize`: a session hit reads its state's
    /// from an array (the `match` of [`Timeouts::of`] was an indirect jump a packet).
    fn by_state(&self) -> [u64; STATES] {
        // In `ConnState`'s order (`each_state_has_its_own_timeout`).
        self.named().map(|(_, ms)| ms)
    }
}

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_ACK: u8 = 0x10;
use crate::nat::{SCTP, TCP};
// An SCTP packet's flags are its chunks' bits, as the parse gives them (`nat::sctp_flow`).
use wire::sctp::ChunkSet;

/// The next state of an SCTP association after a packet with chunks `ev` ([`ChunkSet`]
/// bits), from the client (`forward`) or from the backend; as Linux conntrack's SCTP
/// states (one shutdown state for SHUTDOWN either way, its two being alike), without
/// Linux's state for a secondary path's heartbeat (a NAT association has one path; a
/// direct one's paths share one entry, [`Balancer::direct_sctp`]).
/// Anything else (DATA, SACK, HEARTBEAT and its ACK …) keeps the state, and its expiry
/// is pushed on.
pub fn next_state_sctp(s: ConnState, ev: u8, forward: bool) -> ConnState {
    use ConnState::*;
    match s {
        _ if ev & ChunkSet::END != 0 => SctpClosed,
        SctpClosed => SctpClosed,
        _ if ev & ChunkSet::SHUTDOWN_ACK != 0 => SctpShutdownAck,
        SctpShutdownAck => SctpShutdownAck,
        _ if ev & ChunkSet::SHUTDOWN != 0 => SctpShutdown,
        SctpShutdown => SctpShutdown,
        SctpCookieWait if forward && ev & ChunkSet::COOKIE_ECHO != 0 => SctpCookieEchoed,
        SctpCookieWait | SctpCookieEchoed if !forward && ev & ChunkSet::COOKIE_ACK != 0 => SctpEstablished,
        other => other,
    }
}

/// [`next_state_sctp`] for direct server return, from the client's packets alone: its
/// COOKIE ECHO says it has the backend's INIT ACK (TCP's first ACK after the SYN).
pub fn next_state_sctp_direct(s: ConnState, ev: u8) -> ConnState {
    match next_state_sctp(s, ev, true) {
        ConnState::SctpCookieWait | ConnState::SctpCookieEchoed if ev & ChunkSet::COOKIE_ECHO != 0 => ConnState::SctpEstablished,
        next => next,
    }
}

/// The state a new connection of `proto` starts in, from its first packet's `flags`:
/// an INIT or a SYN starts a handshake; anything else was picked up mid-stream
/// (another worker's or a lost session: it is live).
fn first_state(proto: u8, flags: u8) -> ConnState {
    match proto {
        TCP if flags & TCP_SYN != 0 => ConnState::SynSent,
        TCP => ConnState::Established,
        SCTP => first_state_sctp(flags),
        _ => ConnState::UdpNew,
    }
}

#[cold]
fn first_state_sctp(ev: u8) -> ConnState {
    if ev & ChunkSet::INIT != 0 {
        ConnState::SctpCookieWait
    } else {
        next_state_sctp(ConnState::SctpEstablished, ev, true)
    }
}

/// The protocol number of an SCTP association's session key ([`association_key`]): 255,
/// reserved by IANA, so no packet's 5-tuple is such a key.
pub const SCTP_ASSOCIATION: u8 = 255;

/// The session key of the direct-server-return SCTP association whose client's packets
/// carry `vtag` ([`Balancer::direct_sctp`]): the service address and ports of `key` (a
/// packet of it), the tag where the client's address was, [`SCTP_ASSOCIATION`] for the
/// protocol.
pub fn association_key<F: Family>(key: &FlowKey<F::Addr>, vtag: u32) -> FlowKey<F::Addr> {
    FlowKey { src: tag_addr::<F>(vtag), dst: key.dst, sport: key.sport, dport: key.dport, proto: SCTP_ASSOCIATION }
}

/// `vtag` in an address of the family, its last four bytes (where [`association_key`]
/// keeps it, and `steer` hashes it as a client address).
pub fn tag_addr<F: Family>(vtag: u32) -> F::Addr {
    F::from_ip(Ipv4Addr::from(vtag).into()).or_else(|| F::from_ip(Ipv6Addr::from(vtag as u128).into())).unwrap_or_default()
}

/// The index in `svc` of the backend entry `s` holds, while `svc` (the same service)
/// still has it: at the entry's index, or where removals before it moved it.
fn held_backend<F: Family>(s: &Session<F::Addr>, svc: &ServiceTable<F>) -> Option<u32> {
    if s.service != svc.id {
        return None;
    }
    let here = |b: &crate::tables::Backend<F>| b.addr == s.rewrite.dst && b.port == s.rewrite.dport;
    if svc.backends.get(s.backend as usize).is_some_and(here) {
        return Some(s.backend);
    }
    svc.backends.iter().position(here).map(|b| b as u32)
}

/// Maglev's backend in `svc` for a new connection `key`.
fn maglev_pick<F: Family>(svc: &ServiceTable<F>, key: &FlowKey<F::Addr>) -> Option<u32> {
    svc.pick(F::flow_hash(&key.src, &key.dst, key.sport, key.dport, key.proto))
}

/// The verification tag of an association's key ([`association_key`]), or `None` for
/// a 5-tuple's.
pub fn association_tag<F: Family>(key: &FlowKey<F::Addr>) -> Option<u32> {
    let tag = key.src.as_ref().last_chunk::<4>()?;
    (key.proto == SCTP_ASSOCIATION).then(|| u32::from_be_bytes(*tag))
}

/// Whether a client's packet with `flags` starts a new connection on the tuple of one
/// in state `s` that has ended or is ending (a SYN after a FIN or an RST; an INIT after
/// a SHUTDOWN, an ABORT or a SHUTDOWN COMPLETE): a new session, its backend chosen again.
fn restarts(proto: u8, s: ConnState, flags: u8) -> bool {
    match proto {
        TCP => flags & (TCP_SYN | TCP_ACK) == TCP_SYN && matches!(s, ConnState::Closing | ConnState::Reset),
        SCTP => flags & ChunkSet::INIT != 0 && matches!(s, ConnState::SctpShutdown | ConnState::SctpShutdownAck | ConnState::SctpClosed),
        _ => false,
    }
}

/// The next state on the full path ([`Balancer::forward`], [`Balancer::reverse`]):
/// SCTP's own machine for an association, [`next_state`] for the rest. The session hit
/// never sees SCTP (`lbN-nat` sends it to the full path), so [`Balancer::hit`] calls
/// [`next_state`] alone.
#[inline]
fn next_state_full(s: ConnState, proto: u8, flags: u8, forward: bool) -> ConnState {
    if proto == SCTP {
        next_state_sctp(s, flags, forward)
    } else {
        next_state(s, proto, flags, forward)
    }
}

/// [`next_state_full`] for direct server return ([`Balancer::direct`]): SCTP's machine
/// for an association, [`next_state_direct`] for the rest.
#[inline]
fn next_state_direct_full(s: ConnState, proto: u8, flags: u8) -> ConnState {
    if proto == SCTP {
        next_state_sctp_direct(s, flags)
    } else {
        next_state_direct(s, proto, flags)
    }
}

/// The next state after a packet with `flags` (0 for UDP), from the client (`forward`)
/// or from the backend.
pub fn next_state(s: ConnState, proto: u8, flags: u8, forward: bool) -> ConnState {
    if proto != TCP {
        return if forward { s } else { ConnState::UdpReplied };
    }
    match s {
        _ if flags & TCP_RST != 0 => ConnState::Reset,
        ConnState::Reset => ConnState::Reset,
        _ if flags & TCP_FIN != 0 => ConnState::Closing,
        ConnState::Closing => ConnState::Closing,
        ConnState::SynSent if !forward && flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK => ConnState::Established,
        other => other,
    }
}

/// The next state of a direct-server-return connection (an encapsulated service), whose
/// replies go from the backend to the client without passing here: from the client's
/// packets alone, its first ACK after the SYN saying the handshake went through.
pub fn next_state_direct(s: ConnState, proto: u8, flags: u8) -> ConnState {
    if proto != TCP {
        return s;
    }
    match s {
        _ if flags & TCP_RST != 0 => ConnState::Reset,
        ConnState::Reset => ConnState::Reset,
        _ if flags & TCP_FIN != 0 => ConnState::Closing,
        ConnState::Closing => ConnState::Closing,
        ConnState::SynSent if flags & (TCP_SYN | TCP_ACK) == TCP_ACK => ConnState::Established,
        other => other,
    }
}

/// One direction of a connection: with its key and expiry one cache line for IPv4
/// (`memory_per_session`), and all a packet of an established flow needs, so that a
/// session hit reads nothing else ([`Balancer::hit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
pub struct Session<A> {
    pub rewrite: Rewrite<A>,
    pub service: u32,
    /// The backend's index in the service; `u32::MAX` on the reply direction's entry.
    pub backend: u32,
    pub twin: SlotIdx,
    /// The service's generation ([`ServiceTable::gen`]) when the entry was made or last
    /// checked against it: while the service still has it, the backend is still in it.
    pub gen: u32,
    /// A translated entry's checksum changes of `rewrite` on a packet of this entry's
    /// key, or a direct entry's backend adjacency.
    pub via: Via,
    pub state: ConnState,
    /// Made for a NodePort service (found only for packets that came by `ipN-local`).
    pub node_port: bool,
    /// A direct entry's outer headers' shape ([`ServiceTable::shape`]; 0 for NAT).
    pub shape: u16,
}

/// An entry's last word, by its kind: a translated entry's checksum changes
/// ([`Deltas`]), or a direct entry's (its own twin's) backend adjacency, the one its
/// outer packets leave by. One word for both: an IPv4 entry is one cache line with no
/// room for a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
pub struct Via([u16; 2]);

impl Via {
    pub fn nat(d: Deltas) -> Via {
        Via([d.addrs, d.all])
    }

    pub fn direct(adj: u32) -> Via {
        Via([adj as u16, (adj >> 16) as u16])
    }

    #[inline(always)]
    pub fn deltas(self) -> Deltas {
        Deltas { addrs: self.0[0], all: self.0[1] }
    }

    #[inline(always)]
    pub fn adj(self) -> u32 {
        self.0[0] as u32 | (self.0[1] as u32) << 16
    }
}

impl<A> Session<A> {
    pub fn is_forward(&self) -> bool {
        self.backend != u32::MAX
    }
}

/// The client-affinity key: client address and service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
pub struct AffinityKey<A> {
    pub client: A,
    pub service: u32,
}

/// The backend an affine client goes to, checked against the service on use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
pub struct AffinityEntry<A> {
    pub backend: u32,
    pub addr: A,
    pub port: u16,
}

/// A session table key: a flow's 5-tuple as the family's whole words
/// ([`Family::Words`]), so that a lookup compares it in place a word at a time and
/// `lbN-nat` keeps it, as read once from the packet, in the record its `prepare` writes.
#[derive(Debug, Clone, Copy, Default, zerocopy::FromZeros)]
pub struct Key<F: Family>(F::Words);

impl<F: Family> Key<F> {
    #[inline(always)]
    pub fn new(k: &FlowKey<F::Addr>) -> Self {
        Key(F::words(&k.src, &k.dst, k.sport, k.dport, k.proto))
    }

    /// The 5-tuple the key is of.
    pub fn flow(&self) -> FlowKey<F::Addr> {
        let (src, dst, sport, dport, proto) = F::unwords(&self.0);
        FlowKey { src, dst, sport, dport, proto }
    }

    #[inline(always)]
    pub fn proto(&self) -> u8 {
        F::words_proto(&self.0)
    }
}

/// Every word compared, without an early exit: one branch on the whole key (derived
/// field by field, it was five compare-and-branch pairs a packet, callgrind).
impl<F: Family> PartialEq for Key<F> {
    #[inline(always)]
    fn eq(&self, o: &Self) -> bool {
        F::words_eq(&self.0, &o.0)
    }
}

impl<F: Family> Eq for Key<F> {}

impl<F: Family> TableKey for Key<F> {
    #[inline(always)]
    fn hash(&self) -> u32 {
        F::words_hash(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, zerocopy::FromZeros)]
pub struct ClientKey<F: Family>(pub AffinityKey<F::Addr>);

impl<F: Family> TableKey for ClientKey<F> {
    #[inline(always)]
    fn hash(&self) -> u32 {
        let k = &self.0;
        F::flow_hash(&k.client, &k.client, (k.service >> 16) as u16, k.service as u16, 0)
    }
}

/// Why a packet to a service was not translated (each a node counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbDrop {
    /// The service has no backend that takes new connections.
    NoBackend,
    /// The session table had no room for a new connection.
    SessionTableFull,
    /// Every source port tried for the node's address was taken toward that backend.
    SnatPortsExhausted,
    /// The reply direction of the new connection is an existing connection's.
    ReplyTupleInUse,
}

/// A packet that its session alone decides ([`Balancer::hit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit<'t, A> {
    /// A client's packet of a translated connection: its translation where the session
    /// holds it. (Handed over by value, the translation was rebuilt on the node's stack
    /// in pieces and read back whole: a failed store forward a packet.)
    Forward(&'t Rewrite<A>, Deltas),
    /// A reply of a translated connection (addressed to the node).
    Reply(&'t Rewrite<A>, Deltas),
    /// A client's packet of a direct-server-return connection: the service's id, the
    /// backend's index in it, the service's outer headers' shape, and from the session
    /// the backend's address (the outer destination) and adjacency, so that the
    /// encapsulation reads nothing a backend or a service of its own.
    Direct { service: u32, backend: u32, outer: &'t crate::encap::Outer, dst: A, adj: u32 },
}

/// What happened to the session on the way (counted by the node as information).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An existing session's translation.
    Hit,
    /// A new session, its backend from Maglev.
    New,
    /// A new session, its backend from the client's affinity entry.
    NewAffine,
    /// A session whose backend left the service: a new backend chosen.
    Rechosen,
}

/// Bounds of a worker's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Session entries (two per connection).
    pub sessions: usize,
    pub affinity: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { sessions: 1 << 20, affinity: 1 << 16 }
    }
}

/// A state's timeout and the most a session's expiry may lag behind it (a sixteenth of
/// the timeout, at most a second: [`Balancer::touch`]), side by side: a hit's test
/// whether to write reads one pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Age {
    timeout: u64,
    lag: u64,
}

impl Age {
    fn of(timeouts: &Timeouts) -> [Age; STATES] {
        timeouts.by_state().map(|timeout| Age { timeout, lag: (timeout / 16).min(1000) })
    }
}

/// Tries at a free source port for the node's address before giving up.
const SNAT_PORT_TRIES: u32 = 8;

/// A worker's sessions of one family and the decisions over them.
pub struct Balancer<F: Family> {
    pub sessions: Table<Key<F>, Session<F::Addr>>,
    pub affinity: Table<ClientKey<F>, AffinityEntry<F::Addr>>,
    /// By state: its timeout and how far behind it an expiry may lag ([`Age`]).
    age_of: [Age; STATES],
    /// This worker and how many there are: SNAT ports are the ones whose replies are
    /// steered here ([`crate::steer`]).
    me: u32,
    workers: u32,
}

impl<F: Family> Balancer<F> {
    pub fn new(limits: Limits, timeouts: Timeouts) -> Self {
        let age_of = Age::of(&timeouts);
        Balancer { sessions: Table::new(limits.sessions), affinity: Table::new(limits.affinity), age_of, me: 0, workers: 1 }
    }

    /// New timeouts (a reload's, from the published tables: [`crate::LbContext`]). A
    /// new session takes them; an existing one at its next packet
    /// ([`Balancer::touch`]), whose expiry is then its state's new timeout from now
    /// (sooner than the old expiry, too). Until then an idle session keeps the expiry its
    /// last packet set.
    pub fn set_timeouts(&mut self, timeouts: Timeouts) {
        self.age_of = Age::of(&timeouts);
    }

    /// Worker `me` of `workers` (the default: the only one).
    pub fn set_worker(&mut self, me: u32, workers: u32) {
        assert!(me < workers, "worker {me} of {workers}");
        (self.me, self.workers) = (me, workers);
    }

    /// This worker and how many there are ([`Balancer::set_worker`]).
    pub fn worker(&self) -> (u32, u32) {
        (self.me, self.workers)
    }

    /// A packet `key` from a client to `svc` (found by the caller in `t`): the
    /// translation to apply.
    #[inline]
    pub fn forward(
        &mut self,
        t: &FamilyTables<F>,
        svc: &ServiceTable<F>,
        key: &FlowKey<F::Addr>,
        flags: u8,
        now: u64,
    ) -> Result<(Rewrite<F::Addr>, Outcome), LbDrop> {
        let mut outcome = Outcome::New;
        if let Some(i) = self.sessions.find(&Key::new(key), now) {
            let s = *self.sessions.get(i);
            let restart = restarts(key.proto, s.state, flags);
            // (`s.twin != i`: not a direct connection's entry, its service's id reused.)
            let kept = s.twin != i && self.kept(i, &s, svc);
            if kept && !restart {
                self.touch(i, s.twin, s.state, next_state_full(s.state, key.proto, flags, true), now, self.sessions.expires(i));
                return Ok((s.rewrite, Outcome::Hit));
            }
            // A new connection on an old tuple, or one whose backend is gone: start over.
            self.sessions.remove(s.twin);
            self.sessions.remove(i);
            if !kept {
                outcome = Outcome::Rechosen;
            }
        }
        let (b, affine) = self.choose(svc, key, now)?;
        let backend = &svc.backends[b as usize];
        // A backend balanced to itself (hairpin) is translated to the node whatever the
        // policy, as kube-proxy masquerades it: from its own address the packet would be
        // a martian to its kernel, and its reply would never come back through here.
        let hairpin = backend.addr == key.src;
        let (src, sport) = match (svc.snat || hairpin, t.snat) {
            (true, Some(node)) => (node, self.snat_port(t, key, &backend.addr, backend.port, &node, now)?),
            _ => (key.src, key.sport),
        };
        let there = Rewrite { src, sport, dst: backend.addr, dport: backend.port };
        let back = Rewrite { src: key.dst, sport: key.dport, dst: key.src, dport: key.sport };
        let reply_key = FlowKey { src: there.dst, sport: there.dport, dst: there.src, dport: there.sport, proto: key.proto };
        if self.sessions.find(&Key::new(&reply_key), now).is_some() {
            return Err(LbDrop::ReplyTupleInUse);
        }
        let state = first_state(key.proto, flags);
        let expires = now + self.age_of[state as usize].timeout;
        if !self.sessions.has_room(&Key::new(key), now) {
            return Err(LbDrop::SessionTableFull);
        }
        let (gen, node_port) = (svc.gen, svc.node_port);
        let via = Via::nat(Deltas::new::<F>(key, &there));
        let fwd = Session { rewrite: there, service: svc.id, backend: b, twin: 0, gen, via, state, node_port, shape: 0 };
        let i = self.sessions.insert(Key::new(key), fwd, now, expires).ok_or(LbDrop::SessionTableFull)?;
        let via = Via::nat(Deltas::new::<F>(&reply_key, &back));
        let rev = Session { rewrite: back, service: svc.id, backend: u32::MAX, twin: i, gen, via, state, node_port, shape: 0 };
        let Some(j) = self.sessions.insert(Key::new(&reply_key), rev, now, expires) else {
            self.sessions.remove(i);
            return Err(LbDrop::SessionTableFull);
        };
        self.sessions.get_mut(i).twin = j;
        Ok((there, if affine { Outcome::NewAffine } else { outcome }))
    }

    /// A packet `key` from a client to an encapsulated service `svc` (direct server
    /// return: nothing translated, replies never pass here): the index in `svc` of the
    /// backend it goes to. A connection is one entry (its own twin); sessions, affinity
    /// and Maglev as with NAT.
    #[inline]
    pub fn direct(&mut self, svc: &ServiceTable<F>, key: &FlowKey<F::Addr>, flags: u8, now: u64) -> Result<(u32, Outcome), LbDrop> {
        let mut outcome = Outcome::New;
        if let Some(i) = self.sessions.find(&Key::new(key), now) {
            let s = *self.sessions.get(i);
            let restart = restarts(key.proto, s.state, flags);
            let kept = s.twin == i && self.kept(i, &s, svc);
            if kept && !restart {
                return Ok((self.keep_direct(i, &s, svc, key.proto, flags, now).backend, Outcome::Hit));
            }
            // A NAT connection's entry (its service's id reused) goes with its twin.
            self.sessions.remove(s.twin);
            self.sessions.remove(i);
            if !kept {
                outcome = Outcome::Rechosen;
            }
        }
        let (b, affine) = self.choose(svc, key, now)?;
        let backend = &svc.backends[b as usize];
        let state = first_state(key.proto, flags);
        let rewrite = Rewrite { src: key.src, sport: key.sport, dst: backend.addr, dport: backend.port };
        let entry = Session {
            rewrite,
            service: svc.id,
            backend: b,
            twin: 0,
            gen: svc.gen,
            via: Via::direct(backend.adj),
            state,
            node_port: svc.node_port,
            shape: svc.shape,
        };
        let i =
            self.sessions.insert(Key::new(key), entry, now, now + self.age_of[state as usize].timeout).ok_or(LbDrop::SessionTableFull)?;
        self.sessions.get_mut(i).twin = i;
        Ok((b, if affine { Outcome::NewAffine } else { outcome }))
    }

    /// [`Balancer::direct`] for an SCTP packet, `vtag` its verification tag. A
    /// multi-homed client sends from any of its addresses (after a failover, from
    /// another), and only the backend that holds the association can take its packets.
    /// After the INIT (tag 0) every packet of the client's carries the backend's tag, the
    /// same on every path: the association's entry is keyed by it ([`association_key`])
    /// from its first such packet (the COOKIE ECHO), which takes the backend the INIT's
    /// 5-tuple entry holds (or, without one, the one the INIT's 5-tuple picks: another
    /// worker's INIT, a session lost), and that entry is then the association's. The
    /// INIT itself and any packet with tag 0 go by their 5-tuple, as any flow's (an ABORT
    /// or SHUTDOWN COMPLETE with the T bit carries the client's own tag: it finds no
    /// association and goes where its 5-tuple would). The backend, the outcome, and
    /// whether the packet came from another address or port than the association's
    /// previous one (a path change; the entry keeps the latest in `rewrite`).
    pub fn direct_sctp(
        &mut self,
        svc: &ServiceTable<F>,
        key: &FlowKey<F::Addr>,
        vtag: u32,
        flags: u8,
        now: u64,
    ) -> Result<(u32, Outcome, bool), LbDrop> {
        if vtag == 0 || flags & ChunkSet::INIT != 0 {
            return self.direct(svc, key, flags, now).map(|(b, o)| (b, o, false));
        }
        let assoc = Key::<F>::new(&association_key::<F>(key, vtag));
        let mut lost = false;
        if let Some(i) = self.sessions.find(&assoc, now) {
            let s = *self.sessions.get(i);
            if s.twin == i && self.kept(i, &s, svc) {
                let moved = s.rewrite.src != key.src || s.rewrite.sport != key.sport;
                let e = self.keep_direct(i, &s, svc, SCTP, flags, now);
                (e.rewrite.src, e.rewrite.sport) = (key.src, key.sport);
                return Ok((e.backend, Outcome::Hit, moved));
            }
            // Its backend left the service (or the id is another service's now): the
            // association is lost there; its packets go where a new one's would.
            self.sessions.remove(i);
            lost = true;
        }
        let (b, mut outcome) = self.direct(svc, key, flags, now)?;
        if lost && outcome == Outcome::New {
            outcome = Outcome::Rechosen;
        }
        // The INIT's entry (or the one just made) becomes the association's. Without room
        // for it the 5-tuple entry stays: the association's first path still works.
        if let Some(i) = self.sessions.find(&Key::new(key), now) {
            let (entry, expires) = (*self.sessions.get(i), self.sessions.expires(i));
            if let Some(j) = self.sessions.insert(assoc, entry, now, expires) {
                self.sessions.get_mut(j).twin = j;
                self.sessions.remove(i);
            }
        }
        Ok((b, outcome, false))
    }

    /// A direct entry `i` (`s`, kept in `svc`) after a client's packet of `proto` with
    /// `flags`: its state and expiry moved on, and the backend's adjacency and the outer
    /// headers' shape as `svc` has them now (checked against a new generation, they may
    /// be new).
    fn keep_direct(
        &mut self,
        i: SlotIdx,
        s: &Session<F::Addr>,
        svc: &ServiceTable<F>,
        proto: u8,
        flags: u8,
        now: u64,
    ) -> &mut Session<F::Addr> {
        self.touch(i, i, s.state, next_state_direct_full(s.state, proto, flags), now, self.sessions.expires(i));
        let e = self.sessions.get_mut(i);
        e.via = Via::direct(svc.backends.get(e.backend as usize).map_or(ADJ_MISS, |b| b.adj));
        e.shape = svc.shape;
        e
    }

    /// Whether the connection of entry `i` (`s`) keeps its backend in `svc`: the same
    /// service and the backend still in it. Where removals before it moved the backend's
    /// index, the entry is brought up to date (rare: a scan of the backends).
    #[inline]
    fn kept(&mut self, i: SlotIdx, s: &Session<F::Addr>, svc: &ServiceTable<F>) -> bool {
        let Some(b) = held_backend(s, svc) else { return false };
        let e = self.sessions.get_mut(i);
        e.backend = b;
        e.gen = svc.gen;
        true
    }

    /// The fast path of every established flow's packet: its entry found from `at`
    /// (the key's hash and home slot, from the node's `prepare`), and the answer when the entry alone
    /// decides it: a client's packet whose service still has the generation the entry
    /// was checked against (so its backend is still there, and the service is still
    /// the one its address names), or a reply to the node (`local`). The entry is
    /// refreshed as by [`Balancer::forward`], [`Balancer::direct`] or
    /// [`Balancer::reverse`]. `None`: the full path decides (a new flow, a changed
    /// service, a restarted TCP connection), exactly as before; never a different
    /// answer (`the_fast_path_answers_as_the_full_path`). Inlined into the node: as a
    /// call of its own it spilled the key and the entry's fields (perf).
    #[inline(always)]
    pub fn hit<'t>(
        &'t mut self,
        t: &'t FamilyTables<F>,
        at: Hashed,
        key: &Key<F>,
        flags: u8,
        local: bool,
        now: u64,
    ) -> Option<Hit<'t, F::Addr>> {
        // Read in place, not copied out: a hit needs a few of the entry's fields.
        let Found { at: i, val: s, expires } = self.sessions.find_at(at, key, now)?;
        let proto = key.proto();
        let (twin, state) = (s.twin, s.state);
        if !s.is_forward() {
            if !local {
                return None;
            }
            let d = s.via.deltas();
            self.touch(i, twin, state, next_state(state, proto, flags, false), now, expires);
            return Some(Hit::Reply(&self.sessions.get(i).rewrite, d));
        }
        // The state first: it is rarely closing, so one test of the packet's.
        let restart = matches!(state, ConnState::Closing | ConnState::Reset) && proto == TCP && flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
        if restart || t.gen(s.service) != s.gen || (s.node_port && !local) {
            return None;
        }
        if twin == i {
            // Without outer headers (never expected) the full path counts it.
            let outer = t.shape(s.shape)?;
            let hit = Hit::Direct { service: s.service, backend: s.backend, outer, dst: s.rewrite.dst, adj: s.via.adj() };
            self.touch(i, twin, state, next_state_direct(state, proto, flags), now, expires);
            return Some(hit);
        }
        let d = s.via.deltas();
        self.touch(i, twin, state, next_state(state, proto, flags, true), now, expires);
        Some(Hit::Forward(&self.sessions.get(i).rewrite, d))
    }

    /// The connection whose client's direction is `key`, if any, removed (both its
    /// entries): a client no longer allowed by its service's source ranges loses it, so
    /// that neither its packets nor the backend's replies pass by it. Not a hit's work:
    /// the full path calls it on such a client's packet.
    pub fn forget(&mut self, key: &FlowKey<F::Addr>, now: u64) {
        let Some(i) = self.sessions.find(&Key::new(key), now) else { return };
        let s = *self.sessions.get(i);
        if s.is_forward() {
            self.sessions.remove(s.twin);
            self.sessions.remove(i);
        }
    }

    /// A packet that may be a reply of a translated connection: its translation. An SCTP
    /// association's reply takes SCTP's states ([`next_state_full`]).
    #[inline]
    pub fn reverse(&mut self, key: &FlowKey<F::Addr>, flags: u8, now: u64) -> Option<Rewrite<F::Addr>> {
        let i = self.sessions.find(&Key::new(key), now)?;
        let s = *self.sessions.get(i);
        if s.is_forward() {
            return None;
        }
        self.touch(i, s.twin, s.state, next_state_full(s.state, key.proto, flags, false), now, self.sessions.expires(i));
        Some(s.rewrite)
    }

    /// Whether `key` is a reply of a translated connection (one [`Balancer::reverse`]
    /// would translate), without refreshing it: for a packet `lbN-nat` drops unread.
    pub fn is_reply(&self, key: &FlowKey<F::Addr>, now: u64) -> bool {
        self.sessions.find(&Key::new(key), now).is_some_and(|i| !self.sessions.get(i).is_forward())
    }

    /// The translation of the translated connection's entry whose key is `key`,
    /// whichever its direction (for the packet an ICMP error quotes); `None` for a
    /// direct entry (its own twin), which translates nothing. Does not refresh the session.
    pub fn peek(&self, key: &FlowKey<F::Addr>, now: u64) -> Option<Rewrite<F::Addr>> {
        let i = self.sessions.find(&Key::new(key), now)?;
        let s = self.sessions.get(i);
        (s.twin != i).then_some(s.rewrite)
    }

    /// The backend in `svc`, a direct-server-return service, of client connection `key`
    /// for a packet about it that is not its own (an ICMP error about a backend's
    /// direct reply): the one its entry holds; without one (another worker's, aged out,
    /// an SCTP association keyed by its tag) the one its next packet would get from the
    /// client's affinity or Maglev. Reads only: an error makes and refreshes no session.
    pub fn direct_backend(&self, svc: &ServiceTable<F>, key: &FlowKey<F::Addr>, now: u64) -> Option<u32> {
        if let Some(i) = self.sessions.find(&Key::new(key), now) {
            let s = self.sessions.get(i);
            if let Some(b) = held_backend(s, svc).filter(|_| s.twin == i) {
                return Some(b);
            }
        }
        if let Some((_, Some(b))) = self.affinity_of(svc, key.src, now) {
            return Some(b);
        }
        maglev_pick(svc, key)
    }

    /// A packet of the connection: its state, and its expiry pushed on. The expiry is
    /// written only when it moves by a sixteenth of the timeout (at most a second), so
    /// a flow's packets mostly only read the table (the twin's slot is another cache
    /// line); an idle connection goes that much early at most. An expiry beyond
    /// `now + timeout` (set by a longer timeout before a reload) is written too, down to
    /// it. `expires`: entry `i`'s expiry as its lookup read it. (`expires` in
    /// `(now + timeout - lag, now + timeout]` is `now + timeout - expires < lag` with
    /// the subtraction wrapping: an expiry beyond wraps to a large number.)
    #[inline(always)]
    fn touch(&mut self, i: SlotIdx, twin: SlotIdx, was: ConnState, state: ConnState, now: u64, expires: u64) {
        let age = self.age_of[state as usize];
        if state == was && (now + age.timeout).wrapping_sub(expires) < age.lag {
            return;
        }
        self.renew(i, twin, state, now + age.timeout);
    }

    /// Both entries of a connection: their state and expiry (out of line: most of a
    /// flow's packets change neither).
    #[inline(never)]
    fn renew(&mut self, i: SlotIdx, twin: SlotIdx, state: ConnState, expires: u64) {
        for k in [i, twin] {
            self.sessions.get_mut(k).state = state;
            self.sessions.set_expires(k, expires);
        }
    }

    /// The backend for a new connection: the client's affinity entry if the service has
    /// affinity and the entry's backend still takes new connections, else Maglev.
    fn choose(&mut self, svc: &ServiceTable<F>, key: &FlowKey<F::Addr>, now: u64) -> Result<(u32, bool), LbDrop> {
        match self.affinity_of(svc, key.src, now) {
            Some((i, Some(b))) => {
                self.affinity.set_expires(i, now + svc.affinity_ms);
                return Ok((b, true));
            }
            Some((i, None)) => self.affinity.remove(i),
            None => {}
        }
        let b = maglev_pick(svc, key).ok_or(LbDrop::NoBackend)?;
        if svc.affinity_ms != 0 {
            let be = &svc.backends[b as usize];
            let ak = ClientKey(AffinityKey { client: key.src, service: svc.id });
            // A full affinity table costs stickiness, not the connection.
            let _ = self.affinity.insert(ak, AffinityEntry { backend: b, addr: be.addr, port: be.port }, now, now + svc.affinity_ms);
        }
        Ok((b, false))
    }

    /// `client`'s affinity entry for `svc` (a service with affinity): its slot, and its
    /// backend while `svc` still has it taking new connections (`None`: a stale entry).
    fn affinity_of(&self, svc: &ServiceTable<F>, client: F::Addr, now: u64) -> Option<(SlotIdx, Option<u32>)> {
        if svc.affinity_ms == 0 {
            return None;
        }
        let i = self.affinity.find(&ClientKey(AffinityKey { client, service: svc.id }), now)?;
        let e = self.affinity.get(i);
        let live = svc.backends.get(e.backend as usize).is_some_and(|b| b.eligible && b.addr == e.addr && b.port == e.port);
        Some((i, live.then_some(e.backend)))
    }

    /// A source port on the node's address whose reply tuple from the backend is free
    /// and whose replies are steered to this worker (one port in `workers` is; so each
    /// worker has its own ports and no two pick the same one): the client's own port
    /// first, then ports from the flow hash.
    fn snat_port(
        &self,
        t: &FamilyTables<F>,
        key: &FlowKey<F::Addr>,
        baddr: &F::Addr,
        bport: u16,
        node: &F::Addr,
        now: u64,
    ) -> Result<u16, LbDrop> {
        let h = F::flow_hash(&key.src, &key.dst, key.sport, key.dport, key.proto);
        (0..SNAT_PORT_TRIES * self.workers)
            .map(|n| if n == 0 { key.sport } else { 1024 + engine::hash::reduce(engine::hash::mix(h, n), 65536 - 1024) as u16 })
            .filter(|&p| crate::steer::owns_snat_port(t, node, p, key.proto, self.me, self.workers))
            .take(SNAT_PORT_TRIES as usize)
            .find(|&p| {
                self.sessions.find(&Key::new(&FlowKey { src: *baddr, sport: bport, dst: *node, dport: p, proto: key.proto }), now).is_none()
            })
            .ok_or(LbDrop::SnatPortsExhausted)
    }
}

#[cfg(test)]
mod tests;
