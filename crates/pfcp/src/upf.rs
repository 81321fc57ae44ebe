//! The UPF side of N4 as a sans-IO state machine: [`Upf::handle`] takes a datagram, its
//! source and the time; [`Upf::handle_timeout`] the time; the UPF queues datagrams to send
//! ([`Upf::poll_transmit`]) and dataplane [`Action`]s ([`Upf::poll_action`]); it reads no
//! clock and owns no socket, so tests drive it with virtual time.
//!
//! What it does, and why where the spec leaves a choice:
//! - Associations (TS 29.244 §6.2.6): Setup, Update and Release are answered; only source
//!   addresses in the allow-list are heard (an empty list hears everyone). A Setup from a
//!   known Node ID with a new Recovery Time Stamp means the SMF restarted: its sessions
//!   are deleted (no session-retention flag is offered); with the same stamp they are kept.
//! - Liveness: a Heartbeat Request every `heartbeat_interval`; after `heartbeat_misses`
//!   intervals without any message from the peer (its own heartbeats count: pfcpsim answers
//!   none but sends its own) the peer is *lost*, and its sessions are kept for `grace` more
//!   (forwarding goes on: the dataplane never needed the SMF). A peer heard from again
//!   within the grace period is up again with nothing lost; after it, its sessions and the
//!   association are deleted. A heartbeat carrying a new Recovery Time Stamp is a restart:
//!   the peer's sessions are deleted at once. A heartbeat carries no Node ID: it is the
//!   association's whose peer sent it (address and port; a response, the one our request
//!   went to), else the only association at that address; two SMF nodes sharing an
//!   address each keep their own sessions whatever the other's stamp says.
//! - Sessions: Establishment allocates our SEID, and F-TEIDs / UE addresses where the SMF
//!   sets CHOOSE (TEIDs carry the worker in their low `teid_worker_bits` bits, so a NIC's
//!   RSS or flow rules can steer a worker's share; a TEID the SMF assigned, and a UE
//!   address (IPv6: /64 prefix) it assigned inside the UE pool, is held for its session,
//!   so CHOOSE skips it and another session cannot take it); every rule
//!   reference is checked before anything is installed, and a rejected request changes
//!   nothing but this: an establishment with the CP F-SEID of an existing session of the
//!   same SMF node (not a repeat) deletes that session first (§5.6.2: an F-SEID names
//!   one session, and is released only with it; what the UP function then does is
//!   this crate's reading, no clause says it). Modification applies
//!   Remove, Create, then Update IEs; an Update FAR with SNDEM and a new outer header asks
//!   for End Markers on the old path. Deletion answers with the final usage reports.
//! - Nothing is accepted that the dataplane cannot hold: before answering an Establishment
//!   or a Modification, the core asks the dataplane ([`Admission`], given to
//!   [`Upf::handle_with`]) whether it would take the session's new rules, and a refusal is
//!   answered with the Cause and Offending IE it names, the core keeping the session as it
//!   was (none, for an establishment). Every Rule creation/modification failure names the
//!   rule in a Failed Rule ID, as Tables 7.5.3.1-1 and 7.5.5.1-1 require. FARs that
//!   duplicate (DUPL) are refused with Service not supported: no UP Function Feature
//!   offers it.
//! - Requests repeated by the SMF (same peer and sequence number) get the same response
//!   again without being re-executed (§6.4). Our Session Report Requests are retransmitted
//!   `request_retries` times every `request_timeout`.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::grouped::*;
use crate::header::{Header, MessageType, MAX_SEQ};
use crate::ie::*;
use crate::message::*;
use crate::rules::{Bar, ExtendedBuffering, Far, GtpuEndpoint, IdMap, Pdr, Qer, SessionRules, Urr};
use crate::{Cause, Error};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub node_id: NodeId,
    /// Our Recovery Time Stamp (NTP seconds of our start).
    pub recovery_time_stamp: u32,
    pub heartbeat_interval: Duration,
    pub heartbeat_misses: u32,
    /// How long a lost peer's sessions are kept.
    pub grace: Duration,
    /// Source addresses heard; empty: any.
    pub allowed_peers: Vec<IpAddr>,
    /// Our N3 addresses, put in the F-TEIDs we allocate.
    pub n3_ipv4: Option<Ipv4Addr>,
    pub n3_ipv6: Option<Ipv6Addr>,
    /// UE address pools for CHOOSE: IPv4 hosts, IPv6 /64 prefixes.
    pub ue_pool_v4: Option<(Ipv4Addr, u8)>,
    pub ue_pool_v6: Option<(Ipv6Addr, u8)>,
    /// log2 of the number of workers the TEIDs are spread over.
    pub teid_worker_bits: u8,
    pub request_timeout: Duration,
    pub request_retries: u32,
    /// The port our requests (heartbeats, Session Report Requests) go to on an SMF:
    /// PFCP's own, 8805 (§4.2.2), whatever port the SMF sends its requests from; `None`:
    /// the port its Association Setup Request came from (two PFCP endpoints on one
    /// address, as a lab on loopback has).
    pub smf_port: Option<u16>,
}

impl Config {
    pub fn new(node_id: NodeId, recovery_time_stamp: u32) -> Config {
        Config {
            node_id,
            recovery_time_stamp,
            heartbeat_interval: Duration::from_secs(10),
            heartbeat_misses: 3,
            grace: Duration::from_secs(60),
            allowed_peers: Vec::new(),
            n3_ipv4: None,
            n3_ipv6: None,
            ue_pool_v4: None,
            ue_pool_v6: None,
            teid_worker_bits: 0,
            request_timeout: Duration::from_secs(3),
            request_retries: 3,
            smf_port: Some(crate::PORT),
        }
    }
}

/// A datagram to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub dst: SocketAddr,
    pub data: Vec<u8>,
}

/// What the dataplane must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Install or replace a session's rules. Packets buffered for the session are sent
    /// once a FAR that buffered them forwards.
    Install(SessionRules),
    /// Delete a session (its buffered packets too).
    Remove { seid: u64 },
    /// Send a GTP-U End Marker on the old path of a FAR whose outer header changed.
    EndMarker { seid: u64, old: GtpuEndpoint },
    /// Drop what is buffered for the session (PFCPSMReq-Flags DROBU).
    DropBuffered { seid: u64 },
}

/// Why the dataplane cannot take a session's rules: the Cause to answer with (TS 29.244
/// §8.2.1) and the IE to name as offending, if one is to blame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub cause: Cause,
    pub offending_ie: Option<u16>,
    /// With Rule creation/modification failure: the rule that cannot be created.
    pub failed_rule: Option<FailedRuleId>,
}

/// The dataplane as the core asks it before it accepts an establishment or a modification.
pub trait Admission {
    /// Would the dataplane take the [`Action::Install`] of `rules` that is queued when this
    /// returns `Ok`? The answer must hold for the dataplane as it will be when that Install
    /// is applied: the caller applies every queued action before the next request.
    fn admit(&mut self, rules: &SessionRules) -> Result<(), Refusal>;
}

/// Takes every session: the core on its own (its tests, the `pfcp_upf` fuzz target).
#[derive(Debug, Clone, Copy, Default)]
pub struct AdmitAll;

impl Admission for AdmitAll {
    fn admit(&mut self, _: &SessionRules) -> Result<(), Refusal> {
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Up,
    Lost { since: Instant },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Association {
    pub node_id: NodeId,
    pub peer: SocketAddr,
    pub recovery_time_stamp: u32,
    pub liveness: Liveness,
    /// Heartbeat intervals passed without hearing from the peer.
    pub misses: u32,
    next_heartbeat: Instant,
    heard_since_heartbeat: bool,
    /// The sequence number of our last Heartbeat Request to it: its response names the
    /// association even when another SMF node shares the peer's address.
    heartbeat_seq: Option<u32>,
}

/// Cumulative counts the dataplane measured for one URR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub ul_bytes: u64,
    pub dl_bytes: u64,
    pub ul_packets: u64,
    pub dl_packets: u64,
}

impl Usage {
    fn volume(&self) -> [u64; 3] {
        [self.ul_bytes + self.dl_bytes, self.ul_bytes, self.dl_bytes]
    }
}

#[derive(Debug, Clone, Default)]
struct UrrState {
    latest: Usage,
    /// Counts at the last report: thresholds are measured from here.
    reported: Usage,
    /// Counts when the current quota was granted: the quota is measured from here.
    quota_base: Usage,
    seqn: u32,
    /// Start of the time measured for the next report: the URR's first traffic, then
    /// each report (time is measured continuously once traffic started: no Inactivity
    /// Detection Time is offered).
    start: Option<Instant>,
    /// Start of the next report's window (its Start Time): the URR's creation, then each
    /// report.
    window: Option<Instant>,
    quota_exhausted: bool,
    /// The next periodic report (PERIO with a Measurement Period), counted from the URR's
    /// creation.
    next_period: Option<Instant>,
    /// When the time quota started being used: the first traffic after it was granted.
    time_quota_start: Option<Instant>,
    /// The timer armed in [`Upf::urr_timers`] for this URR.
    deadline: Option<Instant>,
}

#[derive(Debug, Clone)]
struct Session {
    rules: SessionRules,
    cp_f_seid: FSeid,
    urr: IdMap<u32, UrrState>,
    allocated: Vec<Allocation>,
    /// A Downlink Data Report was sent (or is due) and no modification followed yet.
    dl_reported: bool,
    /// A Downlink Data Report delayed by the BAR: when it is due, for which PDR.
    ddn_pending: Option<(Instant, u16)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allocation {
    Teid(u32),
    /// A TEID the SMF assigned: held from CHOOSE, and from other sessions, while the
    /// session has it.
    SmfTeid(u32),
    /// UE addresses by their index in the pool (IPv6: of the /64 prefix).
    Ipv4(u32),
    Ipv6(u64),
    /// A UE address (IPv6: /64 prefix) inside the pool the SMF assigned: held from CHOOSE,
    /// and from other sessions, while the session has it.
    SmfIpv4(u32),
    SmfIpv6(u64),
}

impl Allocation {
    fn is_teid(self, teid: u32) -> bool {
        matches!(self, Allocation::Teid(t) | Allocation::SmfTeid(t) if t == teid)
    }
}

#[derive(Debug)]
struct Pending {
    dst: SocketAddr,
    data: Vec<u8>,
    next: Instant,
    tries_left: u32,
    /// Our SEID of the session a Session Report Request is about.
    seid: Option<u64>,
}

/// Message and session counts (`show pfcp associations`, `vecgate_pfcp_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub rx: u64,
    pub tx: u64,
    pub malformed: u64,
    pub unknown_peer: u64,
    pub unknown_type: u64,
    pub duplicate_requests: u64,
    /// Requests answered with a Cause other than Request accepted (a session or change the
    /// SMF asked for and did not get; malformed requests that could be answered too).
    pub requests_refused: u64,
    pub retransmissions: u64,
    /// Session Report Requests given up after `request_retries` unanswered retransmissions.
    pub report_timeouts: u64,
    pub sessions_established: u64,
    pub sessions_deleted: u64,
    /// Sessions deleted because an establishment came with their CP F-SEID (counted in
    /// `sessions_deleted` too).
    pub sessions_replaced: u64,
    pub peers_lost: u64,
}

impl Stats {
    /// Each count with its name, for `show pfcp associations` and the metrics.
    pub fn named(&self) -> [(&'static str, u64); 13] {
        [
            ("received", self.rx),
            ("sent", self.tx),
            ("malformed", self.malformed),
            ("unknown-peer", self.unknown_peer),
            ("unknown-type", self.unknown_type),
            ("duplicate-requests", self.duplicate_requests),
            ("requests-refused", self.requests_refused),
            ("retransmissions", self.retransmissions),
            ("report-timeouts", self.report_timeouts),
            ("sessions-established", self.sessions_established),
            ("sessions-deleted", self.sessions_deleted),
            ("sessions-replaced", self.sessions_replaced),
            ("peers-lost", self.peers_lost),
        ]
    }
}

/// Why a request is refused: the Cause and the IE to name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reject {
    cause: Cause,
    ie: Option<u16>,
    /// The rule a Rule creation/modification failure is about (Failed Rule ID).
    rule: Option<FailedRuleId>,
}

impl From<Error> for Reject {
    fn from(e: Error) -> Reject {
        Reject { cause: e.cause(), ie: e.offending_ie(), rule: None }
    }
}

impl From<Refusal> for Reject {
    fn from(r: Refusal) -> Reject {
        Reject { cause: r.cause, ie: r.offending_ie, rule: r.failed_rule }
    }
}

fn reject(cause: Cause, ie: u16) -> Reject {
    Reject { cause, ie: Some(ie), rule: None }
}

/// Rule creation/modification failure of `rule`, blaming `ie` (the Failed Rule ID the
/// response must then carry, TS 29.244 Tables 7.5.3.1-1 and 7.5.5.1-1).
fn rule_failure(ie: u16, rule: FailedRuleId) -> Reject {
    Reject { cause: Cause::RuleCreationModificationFailure, ie: Some(ie), rule: Some(rule) }
}

/// How long answered requests are remembered to spot repeats: longer than any SMF's
/// T1 × N1.
const RESPONSE_MEMORY: Duration = Duration::from_secs(30);

struct Answered {
    request_digest: u64,
    at: Instant,
    response: Vec<u8>,
}

/// A request's bytes, hashed: a retransmission is the same message again (§6.4), while a
/// restarted SMF numbers its new requests from the start again.
fn digest(data: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

pub struct Upf {
    cfg: Config,
    associations: HashMap<NodeId, Association>,
    sessions: HashMap<u64, Session>,
    /// Our SEIDs of the sessions by their SMF node and CP SEID: an establishment finds a
    /// session whose CP F-SEID it reuses without a walk over every session.
    by_cp_seid: HashMap<(NodeId, u64), Vec<u64>>,
    next_seid: u64,
    next_seq: u32,
    teids_used: HashSet<u32>,
    teids_free: Vec<u32>,
    next_teid: u32,
    /// UE pool indices in use, chosen or SMF-assigned. An index is below `*_next` and
    /// either in use or in `*_free`, or not reached yet by `*_next` (and then in use only
    /// if an SMF assigned it; the allocator steps over it).
    ipv4_used: HashSet<u32>,
    ipv4_free: Vec<u32>,
    ipv4_next: u32,
    ipv6_used: HashSet<u64>,
    ipv6_free: Vec<u64>,
    ipv6_next: u64,
    pending: HashMap<u32, Pending>,
    /// Our responses by the request's sender and sequence number, with a digest of the
    /// request and when it was answered: only the same request again is a repeat.
    answered: HashMap<(SocketAddr, u32), Answered>,
    answered_order: VecDeque<(Instant, (SocketAddr, u32))>,
    /// The digest of the request being handled, for `respond`.
    request_digest: u64,
    transmits: VecDeque<Transmit>,
    actions: VecDeque<Action>,
    stats: Stats,
    /// Time-based URR deadlines (periodic reports, time thresholds and quotas) by time,
    /// with the session and URR: an entry whose URR has another deadline now is stale
    /// and skipped when it comes up.
    urr_timers: BTreeSet<(Instant, u64, u32)>,
    /// Buffering deadlines by time and session: a delayed Downlink Data Report due, or
    /// extended buffering ending. Stale entries are skipped like the URR timers'.
    bar_timers: BTreeSet<(Instant, u64)>,
    /// The time of our Recovery Time Stamp: the first time we were given, which the
    /// Start Time / End Time of usage reports count from.
    epoch: Option<Instant>,
}

impl Upf {
    pub fn new(cfg: Config) -> Upf {
        Upf {
            cfg,
            associations: HashMap::new(),
            sessions: HashMap::new(),
            by_cp_seid: HashMap::new(),
            next_seid: 1,
            next_seq: 1,
            teids_used: HashSet::new(),
            teids_free: Vec::new(),
            next_teid: 1,
            ipv4_used: HashSet::new(),
            ipv4_free: Vec::new(),
            ipv4_next: 1,
            ipv6_used: HashSet::new(),
            ipv6_free: Vec::new(),
            ipv6_next: 1,
            pending: HashMap::new(),
            answered: HashMap::new(),
            answered_order: VecDeque::new(),
            request_digest: 0,
            transmits: VecDeque::new(),
            actions: VecDeque::new(),
            stats: Stats::default(),
            urr_timers: BTreeSet::new(),
            bar_timers: BTreeSet::new(),
            epoch: None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }
    pub fn associations(&self) -> impl Iterator<Item = &Association> {
        self.associations.values()
    }
    pub fn sessions(&self) -> impl Iterator<Item = &SessionRules> {
        self.sessions.values().map(|s| &s.rules)
    }
    pub fn session(&self, seid: u64) -> Option<&SessionRules> {
        self.sessions.get(&seid).map(|s| &s.rules)
    }
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next time [`Upf::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let hb = self.associations.values().map(|a| match a.liveness {
            Liveness::Up => a.next_heartbeat,
            Liveness::Lost { since } => a.next_heartbeat.min(since + self.cfg.grace),
        });
        let retx = self.pending.values().map(|p| p.next);
        let forget = self.answered_order.front().map(|(t, _)| *t + RESPONSE_MEMORY);
        let urr = self.urr_timers.first().map(|(t, _, _)| *t);
        let bar = self.bar_timers.first().map(|(t, _)| *t);
        hb.chain(retx).chain(forget).chain(urr).chain(bar).min()
    }

    /// One datagram from `from`, every session taken as asked ([`AdmitAll`]).
    pub fn handle(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        self.handle_with(now, from, data, &mut AdmitAll)
    }

    /// One datagram from `from`; establishments and modifications are accepted only if
    /// `dp` admits their rules.
    pub fn handle_with(&mut self, now: Instant, from: SocketAddr, data: &[u8], dp: &mut dyn Admission) {
        self.epoch.get_or_insert(now);
        if !self.cfg.allowed_peers.is_empty() && !self.cfg.allowed_peers.contains(&from.ip()) {
            self.stats.unknown_peer += 1;
            return;
        }
        self.stats.rx += 1;
        let (header, body) = match Header::parse(data) {
            Ok(v) => v,
            Err(Error::Version(_)) => {
                self.stats.malformed += 1;
                // §7.4.4.7: answered with Version Not Supported, the request's sequence
                // number echoed when it can be read.
                let seq = data.get(4..7).map_or(0, |s| u32::from_be_bytes([0, s[0], s[1], s[2]]));
                self.send(from, Header::node(MessageType::VersionNotSupportedResponse, seq), &Message::VersionNotSupportedResponse);
                return;
            }
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        self.heard_from(from, now);
        if header.msg_type.is_request() {
            self.request_digest = digest(data);
            if let Some(a) = self.answered.get(&(from, header.seq)).filter(|a| a.request_digest == self.request_digest) {
                self.stats.duplicate_requests += 1;
                self.stats.tx += 1;
                self.transmits.push_back(Transmit { dst: from, data: a.response.clone() });
                return;
            }
        }
        match Message::parse_body(header.msg_type, body) {
            Ok(m) => self.dispatch(now, from, header, m, dp),
            Err(e) => {
                self.stats.malformed += 1;
                self.answer_malformed(now, from, header, e);
            }
        }
    }

    fn dispatch(&mut self, now: Instant, from: SocketAddr, h: Header, m: Message, dp: &mut dyn Admission) {
        match m {
            Message::HeartbeatRequest(hb) => {
                let node = self.peer_node(from);
                self.check_restart(from, node, hb.recovery_time_stamp.0);
                let resp = Message::HeartbeatResponse(Heartbeat { recovery_time_stamp: U32Ie(self.cfg.recovery_time_stamp) });
                self.respond(now, from, Header::node(MessageType::HeartbeatResponse, h.seq), &resp);
            }
            Message::HeartbeatResponse(hb) => {
                // The association our request went to (several SMF nodes may share an
                // address, and answer from PFCP's port whatever port they asked from).
                let node = self
                    .associations
                    .values()
                    .find(|a| a.heartbeat_seq == Some(h.seq) && a.peer.ip() == from.ip())
                    .map(|a| a.node_id.clone())
                    .or_else(|| self.peer_node(from));
                self.check_restart(from, node, hb.recovery_time_stamp.0);
            }
            Message::AssociationSetupRequest(r) => self.association_setup(now, from, h, r),
            Message::AssociationUpdateRequest(r) => {
                let known = self.associations.contains_key(&r.node_id);
                let cause = if known { Cause::RequestAccepted } else { Cause::NoEstablishedAssociation };
                let resp = Message::AssociationUpdateResponse(self.association_response(cause, false));
                self.respond(now, from, Header::node(MessageType::AssociationUpdateResponse, h.seq), &resp);
            }
            Message::AssociationReleaseRequest(r) => {
                // By Node ID, else the association of the sender: pfcpsim names itself
                // 0.0.0.0 in its release.
                let node = Some(r.node_id).filter(|n| self.associations.contains_key(n)).or_else(|| self.peer_node(from));
                let cause = if let Some(node) = node {
                    self.associations.remove(&node);
                    self.delete_sessions_of(&node);
                    Cause::RequestAccepted
                } else {
                    Cause::NoEstablishedAssociation
                };
                let resp = Message::AssociationReleaseResponse(self.association_response(cause, false));
                self.respond(now, from, Header::node(MessageType::AssociationReleaseResponse, h.seq), &resp);
            }
            Message::SessionEstablishmentRequest(r) => self.establish(now, from, h, r, dp),
            Message::SessionModificationRequest(r) => self.modify(now, from, h, r, dp),
            Message::SessionDeletionRequest => self.delete(now, from, h),
            Message::SessionReportResponse(r) => {
                // The session is the one our request was about (SMFs differ in the SEID
                // they put in the header: ours, or their own echoed).
                let about = self.pending.remove(&h.seq).and_then(|p| p.seid);
                if r.cause.0 == Cause::SessionContextNotFound {
                    // The SMF no longer knows the session: nobody will ever delete it.
                    if let Some(seid) = about.or(h.seid).filter(|s| self.sessions.contains_key(s)) {
                        self.remove_session(seid);
                    }
                } else if let Some(seid) = about.filter(|s| self.owned_by(*s, from)) {
                    self.report_answered(now, seid, &r);
                }
            }
            Message::AssociationSetupResponse(_)
            | Message::AssociationUpdateResponse(_)
            | Message::AssociationReleaseResponse(_)
            | Message::VersionNotSupportedResponse
            | Message::SessionEstablishmentResponse(_)
            | Message::SessionModificationResponse(_)
            | Message::SessionDeletionResponse(_)
            | Message::SessionReportRequest(_)
            | Message::Other(_) => {
                // Nothing a UPF asked for, or a type it does not serve: discarded (§7.3).
                self.stats.unknown_type += 1;
            }
        }
    }

    /// A request whose IEs could not be used: the response of its type with the Cause and
    /// Offending IE the error names. Heartbeats have no Cause to carry: not answered.
    fn answer_malformed(&mut self, now: Instant, from: SocketAddr, h: Header, e: Error) {
        let offending_ie = e.offending_ie().map(U16Ie);
        let cause = CauseIe(e.cause());
        let node_id = self.cfg.node_id.clone();
        let cp_seid = h.seid.and_then(|s| self.sessions.get(&s)).map_or(0, |s| s.cp_f_seid.seid);
        let (t, m) = match h.msg_type {
            MessageType::AssociationSetupRequest => (
                MessageType::AssociationSetupResponse,
                Message::AssociationSetupResponse(AssociationResponse {
                    recovery_time_stamp: Some(U32Ie(self.cfg.recovery_time_stamp)),
                    ..self.association_response(e.cause(), false)
                }),
            ),
            MessageType::AssociationUpdateRequest => {
                (MessageType::AssociationUpdateResponse, Message::AssociationUpdateResponse(self.association_response(e.cause(), false)))
            }
            MessageType::AssociationReleaseRequest => {
                (MessageType::AssociationReleaseResponse, Message::AssociationReleaseResponse(self.association_response(e.cause(), false)))
            }
            MessageType::SessionEstablishmentRequest => (
                MessageType::SessionEstablishmentResponse,
                Message::SessionEstablishmentResponse(SessionEstablishmentResponse {
                    node_id,
                    cause,
                    offending_ie,
                    up_f_seid: None,
                    created_pdr: vec![],
                    failed_rule_id: None,
                }),
            ),
            MessageType::SessionModificationRequest => (
                MessageType::SessionModificationResponse,
                Message::SessionModificationResponse(SessionModificationResponse {
                    cause,
                    offending_ie,
                    created_pdr: vec![],
                    usage_report: vec![],
                    failed_rule_id: None,
                }),
            ),
            MessageType::SessionDeletionRequest => (
                MessageType::SessionDeletionResponse,
                Message::SessionDeletionResponse(SessionDeletionResponse { cause, offending_ie, usage_report: vec![] }),
            ),
            _ => return,
        };
        let header = if t.is_session() { Header::session(t, cp_seid, h.seq) } else { Header::node(t, h.seq) };
        self.respond(now, from, header, &m);
    }

    fn association_response(&self, cause: Cause, setup: bool) -> AssociationResponse {
        AssociationResponse {
            node_id: self.cfg.node_id.clone(),
            cause: CauseIe(cause),
            recovery_time_stamp: setup.then_some(U32Ie(self.cfg.recovery_time_stamp)),
            up_function_features: setup.then_some(self.up_function_features()),
            cp_function_features: None,
        }
    }

    /// Advertise what is implemented: F-TEID allocation when we have an N3 address, UE
    /// address allocation when there is a pool, End Markers.
    pub fn up_function_features(&self) -> UpFunctionFeatures {
        // Buffering is always offered, and with it the BAR: the notification delay, the
        // extended buffering duration and the packet counts (downlink is all we hold).
        let mut f = up_features::EMPU | up_features::DDND | up_features::DLBD | up_features::UDBC;
        if self.cfg.n3_ipv4.is_some() || self.cfg.n3_ipv6.is_some() {
            f |= up_features::FTUP;
        }
        if self.cfg.ue_pool_v4.is_some() || self.cfg.ue_pool_v6.is_some() {
            f |= up_features::UEIP;
        }
        Flags(f)
    }

    fn association_setup(&mut self, now: Instant, from: SocketAddr, h: Header, r: AssociationRequest) {
        let rts = r.recovery_time_stamp.map_or(0, |t| t.0);
        if let Some(old) = self.associations.get(&r.node_id) {
            if old.recovery_time_stamp != rts {
                self.delete_sessions_of(&r.node_id);
            }
        }
        // A setup that is not a repeat starts the peer's requests anew (a restarted SMF
        // numbers them from the start again), even after its association was released.
        self.forget_answers_to(from);
        self.associations.insert(
            r.node_id.clone(),
            Association {
                node_id: r.node_id,
                peer: from,
                recovery_time_stamp: rts,
                liveness: Liveness::Up,
                misses: 0,
                next_heartbeat: now + self.cfg.heartbeat_interval,
                heard_since_heartbeat: true,
                heartbeat_seq: None,
            },
        );
        let resp = Message::AssociationSetupResponse(self.association_response(Cause::RequestAccepted, true));
        self.respond(now, from, Header::node(MessageType::AssociationSetupResponse, h.seq), &resp);
    }

    /// The association a message from `from` belongs to, where a message without a Node
    /// ID can tell (heartbeats, a release naming no node we know): the one set up from
    /// that address and port, else the only one at that address. Associations are keyed
    /// by Node ID (TS 29.244 §6.2.6), and two SMF nodes may share an address: then a
    /// message from neither one's port is nobody's in particular.
    fn peer_node(&self, from: SocketAddr) -> Option<NodeId> {
        sole(self.associations.values().filter(|a| a.peer == from))
            .or_else(|| sole(self.associations.values().filter(|a| a.peer.ip() == from.ip())))
    }

    /// Any valid message from a peer shows it is alive: its association's peer, or, when
    /// the address is shared and the port tells none, every association at the address
    /// (a host that answers is not taken for lost).
    fn heard_from(&mut self, from: SocketAddr, _now: Instant) {
        let node = self.peer_node(from);
        for a in self.associations.values_mut() {
            if node.as_ref().map_or(a.peer.ip() == from.ip(), |n| *n == a.node_id) {
                a.heard_since_heartbeat = true;
                a.misses = 0;
                a.liveness = Liveness::Up;
            }
        }
    }

    /// A heartbeat of `node` with a Recovery Time Stamp other than the one its association
    /// was set up with: that SMF node restarted and lost its sessions, so we drop ours
    /// (TS 23.007), and only its own: another node at the same address keeps its sessions.
    fn check_restart(&mut self, from: SocketAddr, node: Option<NodeId>, rts: u32) {
        let Some(a) = node.and_then(|n| self.associations.get(&n)) else {
            return;
        };
        if a.recovery_time_stamp != rts {
            let (node, peer) = (a.node_id.clone(), a.peer);
            self.associations.remove(&node);
            self.delete_sessions_of(&node);
            self.forget_answers_to(peer);
            self.forget_answers_to(from);
        }
    }

    /// A restarted peer's requests are new whatever their sequence numbers: what we
    /// answered its previous life (at that address and port) is not theirs to get again.
    fn forget_answers_to(&mut self, from: SocketAddr) {
        self.answered.retain(|(peer, _), _| *peer != from);
    }

    fn delete_sessions_of(&mut self, node: &NodeId) {
        let seids: Vec<u64> = self.sessions.iter().filter(|(_, s)| &s.rules.cp_node == node).map(|(k, _)| *k).collect();
        for seid in seids {
            self.remove_session(seid);
        }
    }

    fn remove_session(&mut self, seid: u64) {
        if let Some(s) = self.sessions.remove(&seid) {
            self.unindex_cp_seid(&s, seid);
            self.release(&s.allocated);
            self.actions.push_back(Action::Remove { seid });
            self.stats.sessions_deleted += 1;
        }
    }

    /// Heartbeats, lost peers, grace periods, retransmissions.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.epoch.get_or_insert(now);
        while let Some(&(t, seid, urr)) = self.urr_timers.first() {
            if t > now {
                break;
            }
            self.urr_timers.pop_first();
            self.urr_timer(now, t, seid, urr);
        }
        while let Some(&(t, seid)) = self.bar_timers.first() {
            if t > now {
                break;
            }
            self.bar_timers.pop_first();
            self.bar_timer(now, t, seid);
        }
        let mut expired = Vec::new();
        let mut heartbeats = Vec::new();
        for a in self.associations.values_mut() {
            if let Liveness::Lost { since } = a.liveness {
                if now >= since + self.cfg.grace {
                    expired.push(a.node_id.clone());
                    continue;
                }
            }
            if now >= a.next_heartbeat {
                if !a.heard_since_heartbeat {
                    a.misses += 1;
                    if a.misses >= self.cfg.heartbeat_misses && a.liveness == Liveness::Up {
                        a.liveness = Liveness::Lost { since: now };
                        self.stats.peers_lost += 1;
                    }
                }
                a.heard_since_heartbeat = false;
                a.next_heartbeat = now + self.cfg.heartbeat_interval;
                heartbeats.push((a.node_id.clone(), request_dst(self.cfg.smf_port, a.peer)));
            }
        }
        for node in expired {
            self.associations.remove(&node);
            self.delete_sessions_of(&node);
        }
        for (node, peer) in heartbeats {
            let seq = self.seq();
            if let Some(a) = self.associations.get_mut(&node) {
                a.heartbeat_seq = Some(seq);
            }
            let m = Message::HeartbeatRequest(Heartbeat { recovery_time_stamp: U32Ie(self.cfg.recovery_time_stamp) });
            self.send(peer, Header::node(MessageType::HeartbeatRequest, seq), &m);
        }
        let mut resend = Vec::new();
        let mut given_up = 0;
        self.pending.retain(|_, p| {
            if now < p.next {
                return true;
            }
            if p.tries_left == 0 {
                // The SMF never answered: the report is lost to it, counted (not silent).
                given_up += 1;
                return false;
            }
            p.tries_left -= 1;
            p.next = now + self.cfg.request_timeout;
            resend.push(Transmit { dst: p.dst, data: p.data.clone() });
            true
        });
        self.stats.report_timeouts += given_up;
        self.stats.retransmissions += resend.len() as u64;
        self.stats.tx += resend.len() as u64;
        self.transmits.extend(resend);
        while let Some(&(t, key)) = self.answered_order.front() {
            if now < t + RESPONSE_MEMORY {
                break;
            }
            self.answered_order.pop_front();
            // Unless answered again since (a new request with the same number).
            if self.answered.get(&key).is_some_and(|a| a.at == t) {
                self.answered.remove(&key);
            }
        }
    }

    fn seq(&mut self) -> u32 {
        let s = self.next_seq;
        self.next_seq = if s >= MAX_SEQ { 1 } else { s + 1 };
        s
    }

    fn send(&mut self, dst: SocketAddr, h: Header, m: &Message) -> Vec<u8> {
        let data = m.to_bytes(&h);
        self.stats.tx += 1;
        self.transmits.push_back(Transmit { dst, data: data.clone() });
        data
    }

    /// Sends a response and remembers it for a repeated request.
    fn respond(&mut self, now: Instant, dst: SocketAddr, h: Header, m: &Message) {
        let cause = match m {
            Message::AssociationSetupResponse(r) | Message::AssociationUpdateResponse(r) | Message::AssociationReleaseResponse(r) => {
                Some(r.cause.0)
            }
            Message::SessionEstablishmentResponse(r) => Some(r.cause.0),
            Message::SessionModificationResponse(r) => Some(r.cause.0),
            Message::SessionDeletionResponse(r) => Some(r.cause.0),
            _ => None,
        };
        if cause.is_some_and(|c| c != Cause::RequestAccepted) {
            self.stats.requests_refused += 1;
        }
        let data = self.send(dst, h, m);
        self.answered.insert((dst, h.seq), Answered { request_digest: self.request_digest, at: now, response: data });
        self.answered_order.push_back((now, (dst, h.seq)));
    }

    /// Sends a request we expect an answer to, retransmitted until one comes.
    fn request(&mut self, now: Instant, dst: SocketAddr, h: Header, m: &Message, seid: Option<u64>) {
        let data = self.send(dst, h, m);
        let p = Pending { dst, data, next: now + self.cfg.request_timeout, tries_left: self.cfg.request_retries, seid };
        self.pending.insert(h.seq, p);
    }

    // ---- sessions ----

    fn establish(&mut self, now: Instant, from: SocketAddr, h: Header, r: SessionEstablishmentRequest, dp: &mut dyn Admission) {
        let cp_seid = r.cp_f_seid.seid;
        let associated = self.associations.get(&r.node_id).is_some_and(|a| a.peer.ip() == from.ip());
        let result = if associated {
            // A CP F-SEID names one session of its SMF node: TS 29.244 §5.6.2 (Session
            // Endpoint Identifier Handling) says the SEID uniquely identifies a PFCP
            // session at an IP address of a PFCP entity, and that an F-SEID is released
            // after its PFCP session is released. So an establishment with one an existing
            // session of the node has is not a repeat (a repeat, the same message under
            // the same sequence number, was answered from `answered` before reaching
            // here) but the SMF starting that session afresh, having released the old one
            // on its side. What the UP function then does is not specified in the text
            // found: §5.6.2 says only the above, and §6.3.2.3 (UP function behaviour on
            // an establishment, Rel-16) has it store the rules or refuse them, with no
            // word on a CP F-SEID in use; some UPFs refuse such a request. Ours follows the
            // SMF: the old session is deleted, its rules, F-TEIDs and UE addresses with
            // it (no usage report: the SMF would match it to no session), before the new
            // one is built. It stays deleted if the new request is refused.
            if let Some(old) = self.session_of_cp_f_seid(&r.node_id, &r.cp_f_seid) {
                self.remove_session(old);
                self.stats.sessions_replaced += 1;
            }
            self.build_session(&r, dp)
        } else {
            Err(Reject { cause: Cause::NoEstablishedAssociation, ie: None, rule: None })
        };
        let resp = match result {
            Ok((mut session, created)) => {
                let seid = session.rules.seid;
                let up_f_seid = FSeid { seid, ipv4: self.local_ipv4(from), ipv6: self.local_ipv6(from) };
                arm_urrs(&mut self.urr_timers, now, seid, &mut session);
                self.actions.push_back(Action::Install(session.rules.clone()));
                self.index_cp_seid(&session, seid);
                self.sessions.insert(seid, session);
                self.stats.sessions_established += 1;
                SessionEstablishmentResponse {
                    node_id: self.cfg.node_id.clone(),
                    cause: CauseIe(Cause::RequestAccepted),
                    offending_ie: None,
                    up_f_seid: Some(up_f_seid),
                    created_pdr: created,
                    failed_rule_id: None,
                }
            }
            Err(rej) => SessionEstablishmentResponse {
                node_id: self.cfg.node_id.clone(),
                cause: CauseIe(rej.cause),
                offending_ie: rej.ie.map(U16Ie),
                up_f_seid: None,
                created_pdr: vec![],
                failed_rule_id: rej.rule,
            },
        };
        let header = Header::session(MessageType::SessionEstablishmentResponse, cp_seid, h.seq);
        self.respond(now, from, header, &Message::SessionEstablishmentResponse(resp));
    }

    /// Our SEID of the session of SMF node `node` whose CP F-SEID is `f`: the same SEID at
    /// an address of the same family.
    fn session_of_cp_f_seid(&self, node: &NodeId, f: &FSeid) -> Option<u64> {
        let same = |a: &FSeid| a.seid == f.seid && ((a.ipv4.is_some() && a.ipv4 == f.ipv4) || (a.ipv6.is_some() && a.ipv6 == f.ipv6));
        let seids = self.by_cp_seid.get(&(node.clone(), f.seid))?;
        seids.iter().copied().find(|seid| self.sessions.get(seid).is_some_and(|s| s.rules.cp_node == *node && same(&s.cp_f_seid)))
    }

    /// Session `seid` (`s`) under its SMF node and CP SEID in `by_cp_seid`.
    fn index_cp_seid(&mut self, s: &Session, seid: u64) {
        self.by_cp_seid.entry((s.rules.cp_node.clone(), s.cp_f_seid.seid)).or_default().push(seid);
    }

    /// Session `seid` (`s`) out of `by_cp_seid`.
    fn unindex_cp_seid(&mut self, s: &Session, seid: u64) {
        let key = (s.rules.cp_node.clone(), s.cp_f_seid.seid);
        if let Some(v) = self.by_cp_seid.get_mut(&key) {
            v.retain(|&x| x != seid);
            if v.is_empty() {
                self.by_cp_seid.remove(&key);
            }
        }
    }

    /// The F-SEID address: ours in the family the SMF spoke to us in.
    fn local_ipv4(&self, from: SocketAddr) -> Option<Ipv4Addr> {
        match (&self.cfg.node_id, from.ip()) {
            (NodeId::Ipv4(a), IpAddr::V4(_)) => Some(*a),
            (_, IpAddr::V4(_)) => Some(self.cfg.n3_ipv4.unwrap_or(Ipv4Addr::UNSPECIFIED)),
            _ => None,
        }
    }
    fn local_ipv6(&self, from: SocketAddr) -> Option<Ipv6Addr> {
        match (&self.cfg.node_id, from.ip()) {
            (NodeId::Ipv6(a), IpAddr::V6(_)) => Some(*a),
            (_, IpAddr::V6(_)) => Some(self.cfg.n3_ipv6.unwrap_or(Ipv6Addr::UNSPECIFIED)),
            _ => None,
        }
    }

    fn build_session(&mut self, r: &SessionEstablishmentRequest, dp: &mut dyn Admission) -> Result<(Session, Vec<CreatedPdr>), Reject> {
        let seid = self.new_seid();
        let mut s = Session {
            rules: SessionRules {
                seid,
                cp_node: r.node_id.clone(),
                pdrs: IdMap::new(),
                fars: IdMap::new(),
                qers: IdMap::new(),
                urrs: IdMap::new(),
                bar: None,
            },
            cp_f_seid: r.cp_f_seid,
            urr: IdMap::new(),
            allocated: Vec::new(),
            dl_reported: false,
            ddn_pending: None,
        };
        let mut created = Vec::new();
        s.rules.bar = r.create_bar.as_ref().map(bar_from);
        let res = self.apply_creates(&mut s, &r.create_pdr, &r.create_far, &r.create_qer, &r.create_urr, &mut created);
        let res = res.and_then(|()| check_references(&s.rules)).and_then(|()| dp.admit(&s.rules).map_err(Reject::from));
        if let Err(e) = res {
            self.release(&s.allocated);
            return Err(e);
        }
        Ok((s, created))
    }

    fn new_seid(&mut self) -> u64 {
        loop {
            let seid = self.next_seid;
            self.next_seid = self.next_seid.wrapping_add(1).max(1);
            if !self.sessions.contains_key(&seid) {
                return seid;
            }
        }
    }

    fn apply_creates(
        &mut self,
        s: &mut Session,
        pdrs: &[CreatePdr],
        fars: &[CreateFar],
        qers: &[CreateQer],
        urrs: &[CreateUrr],
        created: &mut Vec<CreatedPdr>,
    ) -> Result<(), Reject> {
        // A Create for an id the session has (before, or earlier in the request) is the
        // SMF's error, refused as the second BAR is: replacing the rule would change it
        // without an Update, and a second PDR on CHOOSE would be answered twice.
        let taken = |there: bool, ie, rule| if there { Err(rule_failure(ie, rule)) } else { Ok(()) };
        for f in fars {
            taken(s.rules.fars.contains_key(&f.far_id.0), ty::CREATE_FAR, FailedRuleId::Far(f.far_id.0))?;
            let far = far_from(f.far_id.0, f.apply_action, f.forwarding_parameters.as_ref(), f.bar_id)?;
            s.rules.fars.insert(far.id, far);
        }
        for q in qers {
            taken(s.rules.qers.contains_key(&q.qer_id.0), ty::CREATE_QER, FailedRuleId::Qer(q.qer_id.0))?;
            let mut qer = Qer {
                id: q.qer_id.0,
                ul_open: true,
                dl_open: true,
                mbr_ul_kbps: None,
                mbr_dl_kbps: None,
                gbr_ul_kbps: None,
                gbr_dl_kbps: None,
                qfi: None,
            };
            update_qer(&mut qer, q);
            s.rules.qers.insert(qer.id, qer);
        }
        for u in urrs {
            taken(s.rules.urrs.contains_key(&u.urr_id.0), ty::CREATE_URR, FailedRuleId::Urr(u.urr_id.0))?;
            let mut urr = Urr { id: u.urr_id.0, ..Default::default() };
            update_urr(&mut urr, u);
            s.rules.urrs.insert(urr.id, urr);
            s.urr.insert(urr.id, UrrState::default());
        }
        let mut chosen: HashMap<u8, GtpuEndpoint> = HashMap::new();
        for p in pdrs {
            taken(s.rules.pdrs.contains_key(&p.pdr_id.0), ty::CREATE_PDR, FailedRuleId::Pdr(p.pdr_id.0))?;
            let pdi = p.pdi.as_ref().ok_or(reject(Cause::MandatoryIeMissing, ty::PDI))?;
            let mut pdr = Pdr {
                id: p.pdr_id.0,
                precedence: p.precedence.map_or(0, |v| v.0),
                source: Interface::Access,
                local_f_teid: None,
                ue_ipv4: None,
                ue_ipv6: None,
                ue_is_destination: false,
                sdf_filters: vec![],
                qfi: None,
                outer_header_removal: false,
                far_id: None,
                qer_ids: vec![],
                urr_ids: vec![],
            };
            let c = self.apply_pdi(s, &mut pdr, pdi, &mut chosen)?;
            apply_pdr_fields(&mut pdr, p);
            if c.f_teid.is_some() || c.ue_ip_address.is_some() {
                created.push(c);
            }
            s.rules.pdrs.insert(pdr.id, pdr);
        }
        Ok(())
    }

    /// Resolves a PDI into `pdr`, allocating on CHOOSE; returns what was allocated.
    fn apply_pdi(
        &mut self,
        s: &mut Session,
        pdr: &mut Pdr,
        pdi: &Pdi,
        chosen: &mut HashMap<u8, GtpuEndpoint>,
    ) -> Result<CreatedPdr, Reject> {
        let mut created = CreatedPdr { pdr_id: U16Ie(pdr.id), f_teid: None, ue_ip_address: None };
        // Source Interface is mandatory in a PDI (Table 7.5.2.2-2), and one of the values
        // TS 29.244 §8.2.2 defines: without it, or with a spare one, what the PDR matches
        // is not known. 5G VN internal (packets a 5G VN group's UEs send each other, §5.29)
        // is a service this UPF does not offer: such a PDR would match N3 or N6 traffic.
        pdr.source = match pdi.source_interface.ok_or(reject(Cause::MandatoryIeMissing, ty::SOURCE_INTERFACE))?.0 {
            Interface::Unknown(_) => return Err(reject(Cause::MandatoryIeIncorrect, ty::SOURCE_INTERFACE)),
            Interface::VnInternal => return Err(reject(Cause::ServiceNotSupported, ty::SOURCE_INTERFACE)),
            i => i,
        };
        pdr.local_f_teid = match pdi.f_teid {
            None => None,
            Some(FTeid::Assigned { teid, ipv4, ipv6 }) => {
                let addr = ipv4.map(IpAddr::V4).or(ipv6.map(IpAddr::V6)).ok_or(reject(Cause::MandatoryIeIncorrect, ty::F_TEID))?;
                self.hold_smf_teid(s, teid).map_err(|e| Reject { rule: Some(FailedRuleId::Pdr(pdr.id)), ..e })?;
                Some(GtpuEndpoint { teid, addr })
            }
            Some(FTeid::Choose { v4, v6, choose_id }) => {
                let ep = match choose_id.and_then(|id| chosen.get(&id)) {
                    Some(ep) => *ep,
                    None => {
                        let addr = match (v4, v6, self.cfg.n3_ipv4, self.cfg.n3_ipv6) {
                            (true, _, Some(a), _) => IpAddr::V4(a),
                            (_, true, _, Some(a)) => IpAddr::V6(a),
                            _ => return Err(reject(Cause::InvalidFTeidAllocationOption, ty::F_TEID)),
                        };
                        let teid = self.alloc_teid().ok_or(reject(Cause::NoResourcesAvailable, ty::F_TEID))?;
                        s.allocated.push(Allocation::Teid(teid));
                        let ep = GtpuEndpoint { teid, addr };
                        if let Some(id) = choose_id {
                            chosen.insert(id, ep);
                        }
                        ep
                    }
                };
                let (ipv4, ipv6) = match ep.addr {
                    IpAddr::V4(a) => (Some(a), None),
                    IpAddr::V6(a) => (None, Some(a)),
                };
                created.f_teid = Some(FTeid::Assigned { teid: ep.teid, ipv4, ipv6 });
                Some(ep)
            }
        };
        if let Some(ue) = pdi.ue_ip_address {
            pdr.ue_is_destination = ue.destination;
            pdr.ue_ipv4 = ue.ipv4;
            pdr.ue_ipv6 = ue.ipv6;
            if let Some(a) = ue.ipv4.filter(|_| !ue.choose_v4) {
                self.hold_smf_ipv4(s, a).map_err(|e| Reject { rule: Some(FailedRuleId::Pdr(pdr.id)), ..e })?;
            }
            if let Some(a) = ue.ipv6.filter(|_| !ue.choose_v6) {
                self.hold_smf_ipv6(s, a).map_err(|e| Reject { rule: Some(FailedRuleId::Pdr(pdr.id)), ..e })?;
            }
            let mut alloc = UeIpAddress { destination: ue.destination, ..Default::default() };
            if ue.choose_v4 {
                let (a, i) = self.alloc_ipv4().ok_or(reject(Cause::AllDynamicAddressesOccupied, ty::UE_IP_ADDRESS))?;
                s.allocated.push(Allocation::Ipv4(i));
                pdr.ue_ipv4 = Some(a);
                alloc.ipv4 = Some(a);
            }
            if ue.choose_v6 {
                let (a, i) = self.alloc_ipv6().ok_or(reject(Cause::AllDynamicAddressesOccupied, ty::UE_IP_ADDRESS))?;
                s.allocated.push(Allocation::Ipv6(i));
                pdr.ue_ipv6 = Some(a);
                alloc.ipv6 = Some(a);
            }
            if ue.choose_v4 || ue.choose_v6 {
                created.ue_ip_address = Some(alloc);
            }
        }
        pdr.sdf_filters = pdi.sdf_filters.iter().filter_map(|f| f.flow_description.clone()).collect();
        pdr.qfi = pdi.qfis.first().map(|q| q.0);
        Ok(created)
    }

    /// An SMF-assigned TEID for session `s`: its own already, or free (then CHOOSE skips
    /// it). One another session holds is refused like a rule that cannot be created.
    fn hold_smf_teid(&mut self, s: &mut Session, teid: u32) -> Result<(), Reject> {
        if s.allocated.iter().any(|a| a.is_teid(teid)) {
            return Ok(());
        }
        if !self.teids_used.insert(teid) {
            return Err(reject(Cause::RuleCreationModificationFailure, ty::F_TEID));
        }
        s.allocated.push(Allocation::SmfTeid(teid));
        Ok(())
    }

    /// An SMF-assigned UE IPv4 address for session `s`: outside the pool it is not ours to
    /// hold; inside, it must be the session's own already, or free (then CHOOSE skips it).
    /// One another session has is refused as the dataplane's admission refuses it.
    fn hold_smf_ipv4(&mut self, s: &mut Session, a: Ipv4Addr) -> Result<(), Reject> {
        let Some(i) = self.ipv4_index(a) else { return Ok(()) };
        if s.allocated.iter().any(|x| matches!(*x, Allocation::Ipv4(j) | Allocation::SmfIpv4(j) if j == i)) {
            return Ok(());
        }
        if !self.ipv4_used.insert(i) {
            return Err(reject(Cause::RuleCreationModificationFailure, ty::UE_IP_ADDRESS));
        }
        if i < self.ipv4_next {
            // Passed by the allocator and not in use: it is in the free list.
            if let Some(k) = self.ipv4_free.iter().position(|&f| f == i) {
                self.ipv4_free.remove(k);
            }
        }
        s.allocated.push(Allocation::SmfIpv4(i));
        Ok(())
    }

    /// As `hold_smf_ipv4`, for the /64 prefix of an SMF-assigned UE IPv6 address.
    fn hold_smf_ipv6(&mut self, s: &mut Session, a: Ipv6Addr) -> Result<(), Reject> {
        let Some(i) = self.ipv6_index(a) else { return Ok(()) };
        if s.allocated.iter().any(|x| matches!(*x, Allocation::Ipv6(j) | Allocation::SmfIpv6(j) if j == i)) {
            return Ok(());
        }
        if !self.ipv6_used.insert(i) {
            return Err(reject(Cause::RuleCreationModificationFailure, ty::UE_IP_ADDRESS));
        }
        if i < self.ipv6_next {
            if let Some(k) = self.ipv6_free.iter().position(|&f| f == i) {
                self.ipv6_free.remove(k);
            }
        }
        s.allocated.push(Allocation::SmfIpv6(i));
        Ok(())
    }

    /// The pool index of `a` if `alloc_ipv4` could hand it out.
    fn ipv4_index(&self, a: Ipv4Addr) -> Option<u32> {
        let (base, len) = self.cfg.ue_pool_v4?;
        let m = mask32(len);
        if u32::from(a) & m != u32::from(base) & m {
            return None;
        }
        let i = u32::from(a) & !m;
        let size = 1u64 << (32 - u32::from(len.min(32)));
        (i >= 1 && u64::from(i) + 1 < size).then_some(i)
    }

    /// The pool index of the /64 prefix of `a` if `alloc_ipv6` could hand it out.
    fn ipv6_index(&self, a: Ipv6Addr) -> Option<u64> {
        let (base, len) = self.cfg.ue_pool_v6?;
        let net = ipv6_pool_net(base, len);
        if u128::from(a) & ipv6_mask(len) != net {
            return None;
        }
        let bits = 64u32.saturating_sub(u32::from(len.min(64)));
        let i = ((u128::from(a) >> 64) as u64) & if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        (i >= 1).then_some(i)
    }

    /// TEIDs: `(n << teid_worker_bits) | worker`, the worker taken in turn, 0 never used;
    /// released ones are reused first (the table stays dense).
    fn alloc_teid(&mut self) -> Option<u32> {
        // A released TEID an SMF has assigned since is skipped (and not handed out again).
        while let Some(t) = self.teids_free.pop() {
            if self.teids_used.insert(t) {
                return Some(t);
            }
        }
        let bits = u32::from(self.cfg.teid_worker_bits.min(16));
        for _ in 0..u32::MAX >> 8 {
            let n = self.next_teid;
            self.next_teid = self.next_teid.wrapping_add(1).max(1);
            let workers = 1u32 << bits;
            let teid = ((n / workers) << bits) | (n % workers);
            if teid != 0 && self.teids_used.insert(teid) {
                return Some(teid);
            }
        }
        None
    }

    fn alloc_ipv4(&mut self) -> Option<(Ipv4Addr, u32)> {
        let (base, len) = self.cfg.ue_pool_v4?;
        let size = 1u64 << (32 - u32::from(len.min(32)));
        let i = loop {
            match self.ipv4_free.pop() {
                Some(i) => break i,
                // Host 0 (the network) and the last host are left out; one an SMF holds
                // is stepped over (freed, it goes to the free list).
                None if u64::from(self.ipv4_next) + 1 < size => {
                    self.ipv4_next += 1;
                    if !self.ipv4_used.contains(&(self.ipv4_next - 1)) {
                        break self.ipv4_next - 1;
                    }
                }
                None => return None,
            }
        };
        self.ipv4_used.insert(i);
        Some((Ipv4Addr::from(u32::from(base) & mask32(len) | i), i))
    }

    fn alloc_ipv6(&mut self) -> Option<(Ipv6Addr, u64)> {
        let (base, len) = self.cfg.ue_pool_v6?;
        let bits = 64u32.saturating_sub(u32::from(len.min(64)));
        let size = if bits >= 64 { u64::MAX } else { 1u64 << bits };
        let i = loop {
            match self.ipv6_free.pop() {
                Some(i) => break i,
                None if self.ipv6_next < size => {
                    self.ipv6_next += 1;
                    if !self.ipv6_used.contains(&(self.ipv6_next - 1)) {
                        break self.ipv6_next - 1;
                    }
                }
                None => return None,
            }
        };
        self.ipv6_used.insert(i);
        Some((Ipv6Addr::from(ipv6_pool_net(base, len) | u128::from(i) << 64), i))
    }

    fn release(&mut self, allocs: &[Allocation]) {
        for a in allocs {
            match *a {
                Allocation::Teid(t) => {
                    if self.teids_used.remove(&t) {
                        self.teids_free.push(t);
                    }
                }
                Allocation::SmfTeid(t) => {
                    self.teids_used.remove(&t);
                }
                Allocation::Ipv4(i) => {
                    if self.ipv4_used.remove(&i) {
                        self.ipv4_free.push(i);
                    }
                }
                Allocation::Ipv6(i) => {
                    if self.ipv6_used.remove(&i) {
                        self.ipv6_free.push(i);
                    }
                }
                // Not reached by the allocator yet, it is found there in time.
                Allocation::SmfIpv4(i) => {
                    if self.ipv4_used.remove(&i) && i < self.ipv4_next {
                        self.ipv4_free.push(i);
                    }
                }
                Allocation::SmfIpv6(i) => {
                    if self.ipv6_used.remove(&i) && i < self.ipv6_next {
                        self.ipv6_free.push(i);
                    }
                }
            }
        }
    }

    fn find_session(&self, from: SocketAddr, h: &Header) -> Option<u64> {
        let seid = h.seid?;
        self.owned_by(seid, from).then_some(seid)
    }

    /// Session `seid` exists and belongs to the SMF at `from`: only it may change it.
    fn owned_by(&self, seid: u64, from: SocketAddr) -> bool {
        let Some(s) = self.sessions.get(&seid) else { return false };
        self.associations.get(&s.rules.cp_node).is_some_and(|peer| peer.peer.ip() == from.ip())
    }

    fn modify(&mut self, now: Instant, from: SocketAddr, h: Header, r: SessionModificationRequest, dp: &mut dyn Admission) {
        let Some(seid) = self.find_session(from, &h) else {
            let resp = SessionModificationResponse {
                cause: CauseIe(Cause::SessionContextNotFound),
                offending_ie: None,
                created_pdr: vec![],
                usage_report: vec![],
                failed_rule_id: None,
            };
            let header = Header::session(MessageType::SessionModificationResponse, 0, h.seq);
            return self.respond(now, from, header, &Message::SessionModificationResponse(resp));
        };
        let mut s = self.sessions.remove(&seid).expect("found above");
        let mut before = s.clone();
        let mut created = Vec::new();
        let mut end_markers = Vec::new();
        let res = self
            .apply_modification(now, &mut s, &r, &mut created, &mut end_markers)
            .and_then(|()| check_references(&s.rules))
            .and_then(|()| dp.admit(&s.rules).map_err(Reject::from));
        let resp = match res {
            Ok(()) => {
                // A removed URR's usage since its last report goes in the response
                // (Table 7.5.5.1-1, TERMR: the URR terminated): nothing could ask for it later.
                let mut reports: Vec<UsageReportSmr> =
                    r.remove_urr.iter().filter_map(|u| self.usage_report(&mut before, now, u.0 .0, trigger::TERMR)).collect();
                reports.extend(r.query_urr.iter().filter_map(|q| self.usage_report(&mut s, now, q.0 .0, trigger::LIUSA_OR_IMMER)));
                let freed: Vec<Allocation> = before.allocated.iter().filter(|a| !s.allocated.contains(a)).copied().collect();
                self.release(&freed);
                if r.flags.is_some_and(|f| f.has(smreq_flags::DROBU)) {
                    self.actions.push_back(Action::DropBuffered { seid });
                }
                self.buffering_modified(seid, &mut s);
                arm_urrs(&mut self.urr_timers, now, seid, &mut s);
                self.actions.push_back(Action::Install(s.rules.clone()));
                self.actions.extend(end_markers.into_iter().map(|old| Action::EndMarker { seid, old }));
                // The SMF's new F-SEID is part of the modification: taken only with it.
                if let Some(cp) = r.cp_f_seid {
                    self.unindex_cp_seid(&s, seid);
                    s.cp_f_seid = cp;
                    self.index_cp_seid(&s, seid);
                }
                SessionModificationResponse {
                    cause: CauseIe(Cause::RequestAccepted),
                    offending_ie: None,
                    created_pdr: created,
                    usage_report: reports,
                    failed_rule_id: None,
                }
            }
            Err(rej) => {
                let new: Vec<Allocation> = s.allocated.iter().filter(|a| !before.allocated.contains(a)).copied().collect();
                self.release(&new);
                s = before;
                SessionModificationResponse {
                    cause: CauseIe(rej.cause),
                    offending_ie: rej.ie.map(U16Ie),
                    created_pdr: vec![],
                    usage_report: vec![],
                    failed_rule_id: rej.rule,
                }
            }
        };
        // A refused modification changes nothing, the SMF's F-SEID included: the refusal
        // goes to the SEID still in force.
        let cp_seid = s.cp_f_seid.seid;
        self.sessions.insert(seid, s);
        let header = Header::session(MessageType::SessionModificationResponse, cp_seid, h.seq);
        self.respond(now, from, header, &Message::SessionModificationResponse(resp));
    }

    fn apply_modification(
        &mut self,
        now: Instant,
        s: &mut Session,
        r: &SessionModificationRequest,
        created: &mut Vec<CreatedPdr>,
        end_markers: &mut Vec<GtpuEndpoint>,
    ) -> Result<(), Reject> {
        for p in &r.remove_pdr {
            let pdr = s.rules.pdrs.remove(&p.0 .0).ok_or(rule_failure(ty::REMOVE_PDR, FailedRuleId::Pdr(p.0 .0)))?;
            // A TEID the UPF chose goes back to the pool with the PDR that used it, unless
            // another PDR (same CHOOSE ID) still uses it.
            if let Some(ep) = pdr.local_f_teid {
                let still_used = s.rules.pdrs.values().any(|o| o.local_f_teid == Some(ep));
                if !still_used {
                    s.allocated.retain(|a| *a != Allocation::Teid(ep.teid));
                }
            }
        }
        for f in &r.remove_far {
            s.rules.fars.remove(&f.0 .0).ok_or(rule_failure(ty::REMOVE_FAR, FailedRuleId::Far(f.0 .0)))?;
        }
        for q in &r.remove_qer {
            s.rules.qers.remove(&q.0 .0).ok_or(rule_failure(ty::REMOVE_QER, FailedRuleId::Qer(q.0 .0)))?;
        }
        for u in &r.remove_urr {
            s.rules.urrs.remove(&u.0 .0).ok_or(rule_failure(ty::REMOVE_URR, FailedRuleId::Urr(u.0 .0)))?;
            s.urr.remove(&u.0 .0);
        }
        if let Some(b) = r.remove_bar {
            s.rules.bar.take().filter(|bar| bar.id == b.0 .0).ok_or(rule_failure(ty::REMOVE_BAR, FailedRuleId::Bar(b.0 .0)))?;
        }
        if let Some(b) = &r.create_bar {
            if s.rules.bar.is_some() {
                // One BAR a session: a second is an error, not a replacement.
                return Err(rule_failure(ty::CREATE_BAR, FailedRuleId::Bar(b.bar_id.0)));
            }
            s.rules.bar = Some(bar_from(b));
        }
        if let Some(b) = &r.update_bar {
            let bar = s
                .rules
                .bar
                .as_mut()
                .filter(|bar| bar.id == b.bar_id.0)
                .ok_or(rule_failure(ty::UPDATE_BAR_SMR, FailedRuleId::Bar(b.bar_id.0)))?;
            if let Some(d) = b.dl_data_notification_delay {
                bar.ddn_delay = ddn_delay(d);
            }
            if let Some(c) = b.suggested_buffering_packets_count {
                bar.suggested_packets = Some(c.0);
            }
        }
        self.apply_creates(s, &r.create_pdr, &r.create_far, &r.create_qer, &r.create_urr, created)?;
        for u in &r.update_pdr {
            let mut pdr = s.rules.pdrs.get(&u.pdr_id.0).cloned().ok_or(rule_failure(ty::UPDATE_PDR, FailedRuleId::Pdr(u.pdr_id.0)))?;
            if let Some(pdi) = &u.pdi {
                let c = self.apply_pdi(s, &mut pdr, pdi, &mut HashMap::new())?;
                if c.f_teid.is_some() || c.ue_ip_address.is_some() {
                    created.push(c);
                }
            }
            apply_pdr_fields(&mut pdr, u);
            s.rules.pdrs.insert(pdr.id, pdr);
        }
        for u in &r.update_far {
            let far = s.rules.fars.get_mut(&u.far_id.0).ok_or(rule_failure(ty::UPDATE_FAR, FailedRuleId::Far(u.far_id.0)))?;
            if let Some(a) = u.apply_action {
                far.action = supported_action(a)?;
            }
            if let Some(b) = u.bar_id {
                far.bar_id = Some(b.0);
            }
            if let Some(fp) = &u.update_forwarding_parameters {
                if let Some(d) = fp.destination_interface {
                    far.destination = Some(d.0);
                }
                if let Some(ni) = &fp.network_instance {
                    far.network_instance = Some(ni.0.clone());
                }
                if let Some(m) = fp.transport_level_marking {
                    far.transport_marking = Some((m.tos, m.mask));
                }
                if let Some(ohc) = &fp.outer_header_creation {
                    let new = gtpu_endpoint(ohc)?;
                    let sndem = fp.smreq_flags.is_some_and(|f| f.has(smreq_flags::SNDEM));
                    if let (true, Some(old)) = (sndem, far.outer_header) {
                        if old != new {
                            end_markers.push(old);
                        }
                    }
                    far.outer_header = Some(new);
                }
            }
        }
        for u in &r.update_qer {
            let qer = s.rules.qers.get_mut(&u.qer_id.0).ok_or(rule_failure(ty::UPDATE_QER, FailedRuleId::Qer(u.qer_id.0)))?;
            update_qer(qer, u);
        }
        for u in &r.update_urr {
            let urr = s.rules.urrs.get_mut(&u.urr_id.0).ok_or(rule_failure(ty::UPDATE_URR, FailedRuleId::Urr(u.urr_id.0)))?;
            update_urr(urr, u);
            if let Some(st) = s.urr.get_mut(&u.urr_id.0) {
                // A new quota re-opens the gate it closed; a time quota is used from now
                // on if traffic started, else from the first traffic.
                if u.volume_quota.is_some() || u.time_quota.is_some() {
                    st.quota_exhausted = false;
                    st.quota_base = st.latest;
                    st.time_quota_start = st.start.map(|_| now);
                }
                if u.measurement_period.is_some() {
                    st.next_period = None;
                }
            }
        }
        // A Query URR names a URR of the session (or one this request removes: reported as it
        // goes); one of no URR was answered Request accepted with no report, as if unused.
        for q in &r.query_urr {
            let id = q.0 .0;
            if !s.rules.urrs.contains_key(&id) && !r.remove_urr.iter().any(|u| u.0 .0 == id) {
                return Err(rule_failure(ty::QUERY_URR, FailedRuleId::Urr(id)));
            }
        }
        // SMF-assigned TEIDs and UE addresses no PDR has any more are let go (checked at
        // the end, so that a PDR removed and one created with its TEID or address in the
        // same request keep it).
        let rules = &s.rules;
        let (v4, v6) = (|a| self.ipv4_index(a), |a| self.ipv6_index(a));
        s.allocated.retain(|a| match *a {
            Allocation::SmfTeid(t) => rules.pdrs.values().any(|p| p.local_f_teid.is_some_and(|e| e.teid == t)),
            Allocation::SmfIpv4(i) => rules.pdrs.values().any(|p| p.ue_ipv4.and_then(v4) == Some(i)),
            Allocation::SmfIpv6(i) => rules.pdrs.values().any(|p| p.ue_ipv6.and_then(v6) == Some(i)),
            _ => true,
        });
        Ok(())
    }

    fn delete(&mut self, now: Instant, from: SocketAddr, h: Header) {
        let Some(seid) = self.find_session(from, &h) else {
            let resp = SessionDeletionResponse { cause: CauseIe(Cause::SessionContextNotFound), offending_ie: None, usage_report: vec![] };
            let header = Header::session(MessageType::SessionDeletionResponse, 0, h.seq);
            return self.respond(now, from, header, &Message::SessionDeletionResponse(resp));
        };
        let mut s = self.sessions.remove(&seid).expect("found above");
        self.unindex_cp_seid(&s, seid);
        let ids: Vec<u32> = s.rules.urrs.keys().copied().collect();
        let reports: Vec<UsageReportSdr> = ids.into_iter().filter_map(|id| self.usage_report(&mut s, now, id, trigger::TERMR)).collect();
        self.release(&s.allocated);
        self.actions.push_back(Action::Remove { seid });
        self.stats.sessions_deleted += 1;
        let resp = SessionDeletionResponse { cause: CauseIe(Cause::RequestAccepted), offending_ie: None, usage_report: reports };
        let header = Header::session(MessageType::SessionDeletionResponse, s.cp_f_seid.seid, h.seq);
        self.respond(now, from, header, &Message::SessionDeletionResponse(resp));
    }

    /// A usage report for `urr_id` with counts since the last one.
    fn usage_report<const T: u16>(&self, s: &mut Session, now: Instant, urr_id: u32, trig: u64) -> Option<UsageReport<T>> {
        let st = s.urr.get_mut(&urr_id)?;
        let (cur, base) = (st.latest, st.reported);
        let seqn = st.seqn;
        st.seqn = st.seqn.wrapping_add(1);
        st.reported = cur;
        let duration = st.start.map(|t| now.saturating_duration_since(t).as_secs() as u32).or(st.window.map(|_| 0));
        let start_time = st.window.or(st.start).map(|t| U32Ie(self.ntp(t)));
        st.start = st.start.map(|_| now);
        st.window = Some(now);
        Some(UsageReport {
            urr_id: U32Ie(urr_id),
            ur_seqn: U32Ie(seqn),
            trigger: Flags(trig),
            start_time,
            end_time: start_time.map(|_| U32Ie(self.ntp(now))),
            volume: Some(VolumeMeasurement {
                total: Some(cur.volume()[0] - base.volume()[0]),
                uplink: Some(cur.ul_bytes - base.ul_bytes),
                downlink: Some(cur.dl_bytes - base.dl_bytes),
                total_packets: Some(cur.ul_packets + cur.dl_packets - base.ul_packets - base.dl_packets),
                uplink_packets: Some(cur.ul_packets - base.ul_packets),
                downlink_packets: Some(cur.dl_packets - base.dl_packets),
            }),
            duration: duration.map(U32Ie),
        })
    }

    /// `t` as NTP seconds (the Start Time / End Time of usage reports, §8.2.52): our
    /// Recovery Time Stamp plus the time since the first time we were given.
    fn ntp(&self, t: Instant) -> u32 {
        let since = self.epoch.map_or(0, |e| t.saturating_duration_since(e).as_secs());
        self.cfg.recovery_time_stamp.wrapping_add(since as u32)
    }

    /// A time-based URR's timer came up at `t`: a periodic report, a time threshold
    /// reached, or a time quota used up (then its PDRs stop, as for a volume quota).
    fn urr_timer(&mut self, now: Instant, t: Instant, seid: u64, urr_id: u32) {
        let Some(mut s) = self.sessions.remove(&seid) else { return };
        let (Some(urr), Some(st)) = (s.rules.urrs.get(&urr_id).copied(), s.urr.get_mut(&urr_id)) else {
            self.sessions.insert(seid, s);
            return;
        };
        if st.deadline != Some(t) {
            // Re-armed since: stale.
            self.sessions.insert(seid, s);
            return;
        }
        st.deadline = None;
        let mut trig = 0;
        if let (true, Some(next), Some(p)) = (urr.reporting_triggers & trigger::PERIO != 0, st.next_period, period(&urr)) {
            if next <= now {
                trig |= trigger::PERIO;
                // The next period from the one due (missed ones are not made up).
                let mut n = next + p;
                while n <= now {
                    n += p;
                }
                st.next_period = Some(n);
            }
        }
        if let (true, Some(th), Some(start)) = (urr.reporting_triggers & trigger::TIMTH != 0, urr.time_threshold, st.start) {
            if start + Duration::from_secs(th.into()) <= now {
                trig |= trigger::TIMTH;
            }
        }
        let quota_hit = match (urr.time_quota, st.time_quota_start) {
            (Some(q), Some(qs)) => !st.quota_exhausted && qs + Duration::from_secs(q.into()) <= now,
            _ => false,
        };
        if quota_hit {
            st.quota_exhausted = true;
            trig |= trigger::TIMQU;
            if let Some(u) = s.rules.urrs.get_mut(&urr_id) {
                u.quota_exhausted = true;
            }
            self.actions.push_back(Action::Install(s.rules.clone()));
        }
        if trig != 0 {
            let report = self.usage_report::<{ ty::USAGE_REPORT_SRR }>(&mut s, now, urr_id, trig);
            let m = SessionReportRequest {
                report_type: Flags(report_type::USAR),
                downlink_data_report: None,
                usage_report: report.into_iter().collect(),
            };
            self.report(now, &s, m);
        }
        arm_urrs(&mut self.urr_timers, now, seid, &mut s);
        self.sessions.insert(seid, s);
    }

    /// The dataplane's cumulative counts for a URR. Crossing a volume threshold sends a
    /// Session Report Request; exhausting a volume quota also marks the URR exhausted in
    /// the session's rules (its PDRs stop forwarding) and reinstalls them.
    pub fn usage(&mut self, now: Instant, seid: u64, urr_id: u32, usage: Usage) {
        let Some(mut s) = self.sessions.remove(&seid) else {
            return;
        };
        let Some(urr) = s.rules.urrs.get(&urr_id).copied() else {
            self.sessions.insert(seid, s);
            return;
        };
        let st = s.urr.get_or_default(urr_id);
        st.start.get_or_insert(now);
        if urr.time_quota.is_some() && st.time_quota_start.is_none() && !st.quota_exhausted {
            st.time_quota_start = Some(now);
        }
        st.latest = usage;
        let over = |limits: [Option<u64>; 3], base: Usage| {
            limits.iter().zip(sub3(usage.volume(), base.volume())).any(|(l, v)| l.is_some_and(|l| v >= l))
        };
        // A quota stops traffic whatever the triggers say; VOLQU only governs reporting, and
        // a quota reached is always worth telling the SMF.
        let quota_hit = !st.quota_exhausted && over(urr.volume_quota, st.quota_base);
        let threshold_hit = urr.reporting_triggers & trigger::VOLTH != 0 && over(urr.volume_threshold, st.reported);
        let mut trig = 0;
        if quota_hit {
            st.quota_exhausted = true;
            trig |= trigger::VOLQU;
        }
        if threshold_hit {
            trig |= trigger::VOLTH;
        }
        if trig != 0 {
            let report = self.usage_report::<{ ty::USAGE_REPORT_SRR }>(&mut s, now, urr_id, trig);
            if quota_hit {
                if let Some(u) = s.rules.urrs.get_mut(&urr_id) {
                    u.quota_exhausted = true;
                }
                self.actions.push_back(Action::Install(s.rules.clone()));
            }
            let m = SessionReportRequest {
                report_type: Flags(report_type::USAR),
                downlink_data_report: None,
                usage_report: report.into_iter().collect(),
            };
            self.report(now, &s, m);
        }
        arm_urrs(&mut self.urr_timers, now, seid, &mut s);
        self.sessions.insert(seid, s);
    }

    /// The dataplane buffered the first downlink packet for `pdr_id`: one Downlink Data
    /// Report until the session is next modified.
    ///
    /// With a BAR that has a Downlink Data Notification Delay the report waits that long
    /// (a modification in between that stops the buffering cancels it); during extended
    /// buffering none is sent (the SMF knows already).
    pub fn downlink_data(&mut self, now: Instant, seid: u64, pdr_id: u16) {
        let Some(mut s) = self.sessions.remove(&seid) else {
            return;
        };
        let bar = s.rules.pdrs.get(&pdr_id).and_then(|p| p.far_id).and_then(|f| s.rules.bar_of(f)).copied();
        if !s.dl_reported && !bar.is_some_and(|b| b.extended.is_some()) {
            s.dl_reported = true;
            match bar.map(|b| b.ddn_delay).filter(|d| !d.is_zero()) {
                Some(delay) => {
                    s.ddn_pending = Some((now + delay, pdr_id));
                    self.bar_timers.insert((now + delay, seid));
                }
                None => self.downlink_data_report(now, &s, pdr_id),
            }
        }
        self.sessions.insert(seid, s);
    }

    fn downlink_data_report(&mut self, now: Instant, s: &Session, pdr_id: u16) {
        let m = SessionReportRequest {
            report_type: Flags(report_type::DLDR),
            downlink_data_report: Some(DownlinkDataReport { pdr_ids: vec![U16Ie(pdr_id)] }),
            usage_report: vec![],
        };
        self.report(now, s, m);
    }

    /// A modification was applied: a delayed Downlink Data Report stands only while its
    /// PDR still buffers under the BAR; extended buffering ends when no FAR buffers under
    /// the BAR any more. The next buffered packet may be reported again.
    fn buffering_modified(&mut self, seid: u64, s: &mut Session) {
        let rules = &s.rules;
        let buffers = |pdr: u16| rules.pdrs.get(&pdr).and_then(|p| p.far_id).and_then(|f| rules.bar_of(f)).is_some();
        if let Some((due, pdr)) = s.ddn_pending {
            if !buffers(pdr) {
                self.bar_timers.remove(&(due, seid));
                s.ddn_pending = None;
            }
        }
        let any_buffers = rules.fars.values().any(|f| rules.bar_of(f.id).is_some());
        if let Some(bar) = s.rules.bar.as_mut().filter(|_| !any_buffers) {
            if let Some(ExtendedBuffering { until: Some(t), .. }) = bar.extended.take() {
                self.bar_timers.remove(&(t, seid));
            }
        }
        s.dl_reported = s.ddn_pending.is_some();
    }

    /// The SMF answered a report of ours: its Update BAR (a new delay or count, extended
    /// buffering) and DROBU apply to the session.
    fn report_answered(&mut self, now: Instant, seid: u64, r: &SessionReportResponse) {
        let Some(s) = self.sessions.get_mut(&seid) else { return };
        if r.flags.is_some_and(|f| f.has(srrsp_flags::DROBU)) {
            self.actions.push_back(Action::DropBuffered { seid });
        }
        let Some(u) = r.update_bar else { return };
        // A response cannot be refused: an Update BAR for a BAR the session lacks is
        // ignored.
        let Some(bar) = s.rules.bar.as_mut().filter(|b| b.id == u.bar_id.0) else { return };
        if let Some(d) = u.dl_data_notification_delay {
            bar.ddn_delay = ddn_delay(d);
        }
        if let Some(c) = u.suggested_buffering_packets_count {
            bar.suggested_packets = Some(c.0);
        }
        if let Some(d) = u.dl_buffering_duration {
            if let Some(ExtendedBuffering { until: Some(t), .. }) = bar.extended.take() {
                self.bar_timers.remove(&(t, seid));
            }
            let packets = u.dl_buffering_suggested_packet_count.map(|c| c.0);
            bar.extended = match d.time() {
                BufferingTime::Stopped => None,
                BufferingTime::Infinite => Some(ExtendedBuffering { until: None, packets }),
                BufferingTime::For(d) => {
                    self.bar_timers.insert((now + d, seid));
                    Some(ExtendedBuffering { until: Some(now + d), packets })
                }
            };
        } else if let (Some(e), Some(c)) = (bar.extended.as_mut(), u.dl_buffering_suggested_packet_count) {
            e.packets = Some(c.0);
        }
        self.actions.push_back(Action::Install(s.rules.clone()));
    }

    /// A BAR deadline came: send the delayed Downlink Data Report, or end extended
    /// buffering (what is held is dropped, the parameters forgotten, and the next
    /// buffered packet reported again).
    fn bar_timer(&mut self, now: Instant, t: Instant, seid: u64) {
        let Some(mut s) = self.sessions.remove(&seid) else { return };
        if let Some((_, pdr)) = s.ddn_pending.filter(|(due, _)| *due == t) {
            s.ddn_pending = None;
            self.downlink_data_report(now, &s, pdr);
        }
        if let Some(bar) = s.rules.bar.as_mut() {
            if bar.extended.is_some_and(|e| e.until == Some(t)) {
                bar.extended = None;
                s.dl_reported = false;
                self.actions.push_back(Action::DropBuffered { seid });
                self.actions.push_back(Action::Install(s.rules.clone()));
            }
        }
        self.sessions.insert(seid, s);
    }

    fn report(&mut self, now: Instant, s: &Session, m: SessionReportRequest) {
        let Some(peer) = self.associations.get(&s.rules.cp_node).map(|a| request_dst(self.cfg.smf_port, a.peer)) else {
            return;
        };
        let seq = self.seq();
        self.request(
            now,
            peer,
            Header::session(MessageType::SessionReportRequest, s.cp_f_seid.seid, seq),
            &Message::SessionReportRequest(m),
            Some(s.rules.seid),
        );
    }
}

/// The Node ID of the one association `it` yields; none when it yields none or several.
fn sole<'a>(mut it: impl Iterator<Item = &'a Association>) -> Option<NodeId> {
    match (it.next(), it.next()) {
        (Some(a), None) => Some(a.node_id.clone()),
        _ => None,
    }
}

/// Where a request of ours to the SMF heard from `peer` goes: its address, PFCP's port
/// (or, without `smf_port`, the port it sent from).
fn request_dst(smf_port: Option<u16>, peer: SocketAddr) -> SocketAddr {
    smf_port.map_or(peer, |port| SocketAddr::new(peer.ip(), port))
}

/// A URR's Measurement Period, if it has a usable one.
fn period(u: &Urr) -> Option<Duration> {
    u.measurement_period.filter(|p| *p > 0).map(|p| Duration::from_secs(p.into()))
}

/// When each of the session's URRs next needs the clock: its next periodic report, its
/// time threshold, its time quota running out. Timers already armed for that time stay.
fn arm_urrs(timers: &mut BTreeSet<(Instant, u64, u32)>, now: Instant, seid: u64, s: &mut Session) {
    for urr in s.rules.urrs.values() {
        let st = s.urr.get_or_default(urr.id);
        st.window.get_or_insert(now);
        let perio = urr.reporting_triggers & trigger::PERIO != 0;
        st.next_period = match (perio, period(urr)) {
            (true, Some(p)) => Some(st.next_period.unwrap_or(now + p)),
            _ => None,
        };
        let mut due = st.next_period;
        let mut sooner = |t: Option<Instant>| {
            if let Some(t) = t {
                due = Some(due.map_or(t, |d| d.min(t)));
            }
        };
        if urr.reporting_triggers & trigger::TIMTH != 0 {
            sooner(urr.time_threshold.zip(st.start).map(|(th, s)| s + Duration::from_secs(th.into())));
        }
        if !st.quota_exhausted {
            sooner(urr.time_quota.zip(st.time_quota_start).map(|(q, s)| s + Duration::from_secs(q.into())));
        }
        if due != st.deadline {
            if let Some(old) = st.deadline {
                timers.remove(&(old, seid, urr.id));
            }
            st.deadline = due;
            if let Some(d) = due {
                timers.insert((d, seid, urr.id));
            }
        }
    }
}

fn sub3(a: [u64; 3], b: [u64; 3]) -> [u64; 3] {
    [a[0].saturating_sub(b[0]), a[1].saturating_sub(b[1]), a[2].saturating_sub(b[2])]
}

/// The UE IPv6 pool's network: its prefix (at most 64 bits long) with the rest zero.
fn ipv6_pool_net(base: Ipv6Addr, len: u8) -> u128 {
    u128::from(base) & !((1u128 << 64) - 1) & ipv6_mask(len)
}

/// The mask of a prefix `len` bits long, at most 64.
fn ipv6_mask(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len.min(64))).unwrap_or(0)
}

fn mask32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

/// A GTP-U outer header for a FAR; other encapsulations are not offered.
fn gtpu_endpoint(ohc: &OuterHeaderCreation) -> Result<GtpuEndpoint, Reject> {
    let teid = ohc.teid.ok_or(reject(Cause::ServiceNotSupported, ty::OUTER_HEADER_CREATION))?;
    let addr =
        ohc.ipv4.map(IpAddr::V4).or(ohc.ipv6.map(IpAddr::V6)).ok_or(reject(Cause::MandatoryIeIncorrect, ty::OUTER_HEADER_CREATION))?;
    Ok(GtpuEndpoint { teid, addr })
}

/// Downlink Data Notification Delay: units of 50 ms.
fn ddn_delay(d: DlDataNotificationDelay) -> Duration {
    Duration::from_millis(50 * u64::from(d.0))
}

fn bar_from(b: &CreateBar) -> Bar {
    Bar {
        id: b.bar_id.0,
        ddn_delay: b.dl_data_notification_delay.map_or(Duration::ZERO, ddn_delay),
        suggested_packets: b.suggested_buffering_packets_count.map(|c| c.0),
        extended: None,
    }
}

/// Apply Action bits we carry out. DUPL is refused rather than ignored: the SMF would
/// believe packets are duplicated that are not (no UP Function Feature offers it).
fn supported_action(a: ApplyAction) -> Result<u64, Reject> {
    if a.has(apply_action::DUPL) {
        return Err(reject(Cause::ServiceNotSupported, ty::APPLY_ACTION));
    }
    Ok(a.0)
}

fn far_from(id: u32, action: ApplyAction, fp: Option<&ForwardingParameters>, bar_id: Option<BarId>) -> Result<Far, Reject> {
    let action_bits = supported_action(action)?;
    let outer_header = fp.and_then(|f| f.outer_header_creation.as_ref()).map(gtpu_endpoint).transpose()?;
    if action.has(apply_action::FORW) && fp.is_none() {
        return Err(reject(Cause::ConditionalIeMissing, ty::FORWARDING_PARAMETERS));
    }
    Ok(Far {
        id,
        action: action_bits,
        destination: fp.and_then(|f| f.destination_interface).map(|d| d.0),
        outer_header,
        transport_marking: fp.and_then(|f| f.transport_level_marking).map(|m| (m.tos, m.mask)),
        network_instance: fp.and_then(|f| f.network_instance.as_ref()).map(|n| n.0.clone()),
        bar_id: bar_id.map(|b| b.0),
    })
}

fn apply_pdr_fields<const T: u16>(pdr: &mut Pdr, p: &crate::grouped::Pdr<T>) {
    if let Some(prec) = p.precedence {
        pdr.precedence = prec.0;
    }
    if let Some(o) = p.outer_header_removal {
        pdr.outer_header_removal = matches!(o.description, ohr::GTPU_UDP_IPV4 | ohr::GTPU_UDP_IPV6 | ohr::GTPU_UDP_IP);
    }
    if let Some(f) = p.far_id {
        pdr.far_id = Some(f.0);
    }
    if !p.qer_ids.is_empty() {
        pdr.qer_ids = p.qer_ids.iter().map(|q| q.0).collect();
    }
    if !p.urr_ids.is_empty() {
        pdr.urr_ids = p.urr_ids.iter().map(|u| u.0).collect();
    }
}

fn update_qer<const T: u16>(qer: &mut Qer, q: &crate::grouped::Qer<T>) {
    if let Some(g) = q.gate_status {
        qer.ul_open = !g.ul_closed;
        qer.dl_open = !g.dl_closed;
    }
    if let Some(m) = q.mbr {
        (qer.mbr_ul_kbps, qer.mbr_dl_kbps) = (Some(m.ul_kbps), Some(m.dl_kbps));
    }
    if let Some(g) = q.gbr {
        (qer.gbr_ul_kbps, qer.gbr_dl_kbps) = (Some(g.ul_kbps), Some(g.dl_kbps));
    }
    if let Some(f) = q.qfi {
        qer.qfi = Some(f.0);
    }
}

fn update_urr<const T: u16>(urr: &mut Urr, u: &crate::grouped::Urr<T>) {
    if let Some(m) = u.measurement_method {
        urr.measurement_method = m.0;
    }
    if let Some(r) = u.reporting_triggers {
        urr.reporting_triggers = r.0;
    }
    if let Some(p) = u.measurement_period {
        urr.measurement_period = Some(p.0);
    }
    if let Some(v) = u.volume_threshold {
        urr.volume_threshold = [v.total, v.uplink, v.downlink];
    }
    if let Some(v) = u.volume_quota {
        urr.volume_quota = [v.total, v.uplink, v.downlink];
        urr.quota_exhausted = false;
    }
    if let Some(t) = u.time_threshold {
        urr.time_threshold = Some(t.0);
    }
    if let Some(t) = u.time_quota {
        urr.time_quota = Some(t.0);
        urr.quota_exhausted = false;
    }
}

/// Every PDR's FAR, QERs and URRs exist; a PDR needs a FAR (TS 29.244 Table 7.5.2.2-1:
/// FAR ID is conditional on not activating predefined rules, which we do not offer).
fn check_references(r: &SessionRules) -> Result<(), Reject> {
    // A FAR's BAR ID names the session's BAR.
    if let Some(f) = r.fars.values().find(|f| f.bar_id.is_some_and(|id| r.bar.map(|b| b.id) != Some(id))) {
        return Err(rule_failure(ty::BAR_ID, FailedRuleId::Far(f.id)));
    }
    for p in r.pdrs.values() {
        let far = p.far_id.ok_or(reject(Cause::ConditionalIeMissing, ty::FAR_ID))?;
        if !r.fars.contains_key(&far) {
            return Err(rule_failure(ty::FAR_ID, FailedRuleId::Pdr(p.id)));
        }
        if p.qer_ids.iter().any(|q| !r.qers.contains_key(q)) {
            return Err(rule_failure(ty::QER_ID, FailedRuleId::Pdr(p.id)));
        }
        if p.urr_ids.iter().any(|u| !r.urrs.contains_key(u)) {
            return Err(rule_failure(ty::URR_ID, FailedRuleId::Pdr(p.id)));
        }
    }
    Ok(())
}
