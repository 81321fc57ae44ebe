//! The UPF's published tables: sessions as the nodes read them, found by uplink TEID or
//! by UE address, and [`UpfState`], the control plane's copy that builds them.
//!
//! Per-change cost: a session lives in one slot of a chunked copy-on-write array and its
//! keys in gtpu's copy-on-write TEID tables ([`gtpu::teid_table::TeidTable`]), so
//! installing or removing one copies a few chunks of 1024 slots whatever the number of
//! sessions; publishing clones the chunk pointers (`benches` in `tests/scale.rs`).

use crate::mbr::{Divisor, Mbr};
use crate::sdf::SdfFilter;
use crate::session::{assign_slots, compile, slots_fit, CompileError, SessionSlots, SlotAllocator};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::num::NonZeroU32;
use engine::cow::CowVec;
use gtpu::teid_table::TeidTable;
use ip::outer::tos::Marking;
use std::sync::Arc;

/// Where a FAR sends a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// FORW: on, with a GTP-U header toward `OuterHeader` if set (toward the gNB, or a
    /// peer UPF on N9); without one the packet goes on as plain IP (N6).
    Forward(Option<OuterHeader>),
    /// DROP.
    Drop,
    /// BUFF: the packets are held until the FAR forwards ([`crate::buffering`]); the first
    /// one asks for a Downlink Data Report if the rule notifies.
    Buffer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OuterHeader {
    pub peer: IpAddr,
    /// The G-PDU header toward `peer` (its TEID and, with a QFI, a downlink PDU Session
    /// Container), built once when the session is compiled (`gtpu_header[..gtpu_len]`,
    /// its length field counting the extensions only): a packet copies it and adds its
    /// own length, as gtpuN-encap's precomputed rewrite does. The TEID and QFI are read
    /// back from it ([`OuterHeader::teid`], [`OuterHeader::qfi`]), so that the header is
    /// the one place they are kept.
    pub gtpu_header: [u8; GPDU_HEADER_MAX],
    pub gtpu_len: u8,
    /// The outer traffic class from the inner one: the inner byte whole, or with the
    /// DSCP bits the SMF's Transport Level Marking sets; the ECN field always the inner
    /// packet's (`ip::outer::tos`, as every tunnel's).
    pub marking: Marking,
}

/// The longest G-PDU header a FAR sends: 8 octets, the optional fields and a PDU Session
/// Container (TS 38.415) of one 4-octet unit.
pub const GPDU_HEADER_MAX: usize = 16;

impl OuterHeader {
    pub fn new(teid: u32, peer: IpAddr, qfi: Option<u8>) -> OuterHeader {
        let repr = gpdu_repr(teid, qfi, 0);
        let mut gtpu_header = [0u8; GPDU_HEADER_MAX];
        let len = repr.header_len();
        repr.emit(&mut gtpu_header[..len]);
        OuterHeader { peer, gtpu_header, gtpu_len: len as u8, marking: Marking::INHERIT }
    }

    /// With the SMF's Transport Level Marking (ToS / Traffic Class, mask): its DSCP bits
    /// only, as the ECN field stays the inner packet's (RFC 6040;
    /// [`Marking::transport_level`]).
    pub fn marked(self, marking: Option<(u8, u8)>) -> OuterHeader {
        let Some((tos, mask)) = marking else { return self };
        OuterHeader { marking: Marking::transport_level(tos, mask), ..self }
    }

    /// The outer traffic class for an inner packet whose own is `inner`.
    #[inline(always)]
    pub fn traffic_class(&self, inner: u8) -> u8 {
        self.marking.apply(inner)
    }

    pub fn teid(&self) -> u32 {
        let h = &self.gtpu_header;
        u32::from_be_bytes([h[4], h[5], h[6], h[7]])
    }

    /// The QFI of the PDU Session Container, if the header has one.
    pub fn qfi(&self) -> Option<u8> {
        use wire::gtpu::{GtpuPacket, GtpuRepr, PduSession};
        let p = GtpuPacket::new_checked(&self.gtpu_header[..self.gtpu_len as usize]).ok()?;
        match GtpuRepr::parse(&p).ok()?.pdu_session? {
            PduSession::Downlink { qfi, .. } | PduSession::Uplink { qfi } => Some(qfi.get()),
        }
    }
}

/// The G-PDU toward a peer with `teid` and, with `qfi`, a downlink PDU Session Container
/// (what [`OuterHeader::new`] precomputes, and the reference the tests compare it with).
pub fn gpdu_repr(teid: u32, qfi: Option<u8>, payload_len: usize) -> wire::gtpu::GtpuRepr {
    use wire::gtpu::{GtpuRepr, MessageType, PduSession, Qfi, Teid};
    GtpuRepr {
        msg_type: MessageType::GPdu,
        teid: Teid(teid),
        seq: None,
        npdu: None,
        pdu_session: qfi.and_then(Qfi::new).map(|qfi| PduSession::Downlink { qfi, rqi: false, ppi: None }),
        udp_port: None,
        pdcp_number: None,
        payload_len,
    }
}

/// A QER as one direction's rule sees it: its bucket (shared by the workers) and what it
/// says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QerRef {
    pub slot: u32,
    pub generation: u32,
    pub open: bool,
    /// The MBR for the whole QER, this direction (one bucket all workers take from:
    /// [`crate::context::Policer`]), with the reciprocal the bucket divides by; `None`:
    /// not policed.
    pub mbr: Option<Mbr>,
    /// The guaranteed rate, bytes per second: shown, not enforced (the RAN schedules
    /// the GFBR, TS 23.501 §5.7.2.5; the UPF polices the MFBR, which is at least it).
    pub gbr_bytes_per_sec: Option<u64>,
}

/// A URR's counting cell, and whether its quota is used up (then the rule forwards
/// nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrrRef {
    pub slot: u32,
    pub generation: u32,
    pub exhausted: bool,
}

/// A PDR resolved with its FAR, QERs and URRs, for one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub pdr_id: u16,
    pub precedence: u32,
    /// Uplink: the local TEID the PDR matches.
    pub teid: Option<u32>,
    pub qfi: Option<u8>,
    /// Any of them must match (none: every packet).
    pub sdf: Box<[SdfFilter]>,
    pub remove_outer: bool,
    pub forward: Forward,
    /// The FAR's NOCP: tell the SMF (Downlink Data Report) when the first packet is held.
    pub notify: bool,
    /// The session's BAR bounds what is held for it (Suggested Buffering Packets Count,
    /// or the extended buffering's count) when this rule buffers.
    pub hold_limit: Option<u16>,
    pub qers: Box<[QerRef]>,
    pub urrs: Box<[UrrRef]>,
    /// The UE addresses the PDR's PDI names, which the inner packet must carry: uplink,
    /// as its source (or destination, by the S/D bit); downlink, as its destination.
    pub ue: Option<UeMatch>,
}

/// The UE IP Address of an uplink PDR's PDI (TS 29.244 §5.2.1: a packet matches a PDR
/// when every match field of its PDI does): the inner packet's source (its destination
/// when the IE's S/D bit says so) is the IPv4 address, or in the IPv6 /64 the UE was
/// given (as the downlink finds UEs, [`ue6_key`]). So a UE cannot send from an address
/// that is not its own. 13 bytes of alignment 1, so that it fits in a [`Record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UeMatch {
    v6_prefix: [u8; 8],
    v4: [u8; 4],
    flags: u8,
}

impl UeMatch {
    const V4: u8 = 1;
    const V6: u8 = 2;
    const DESTINATION: u8 = 4;

    /// `None` when the PDI names no UE address (every packet matches).
    pub fn new(v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>, destination: bool) -> Option<UeMatch> {
        if v4.is_none() && v6.is_none() {
            return None;
        }
        let bit = |b: bool, v: u8| if b { v } else { 0 };
        Some(UeMatch {
            v6_prefix: v6.as_ref().map_or(0, ue6_key).to_be_bytes(),
            v4: v4.map_or([0; 4], |a| a.octets()),
            flags: bit(v4.is_some(), Self::V4) | bit(v6.is_some(), Self::V6) | bit(destination, Self::DESTINATION),
        })
    }

    /// The inner packet's address to compare is its destination (S/D set), not its source.
    #[inline(always)]
    pub fn on_destination(&self) -> bool {
        self.flags & Self::DESTINATION != 0
    }

    /// Whether `a` (the inner side [`UeMatch::on_destination`] names) is the UE's.
    #[inline(always)]
    pub fn admits(&self, a: IpAddr) -> bool {
        match a {
            IpAddr::V4(a) => self.flags & Self::V4 != 0 && a.octets() == self.v4,
            IpAddr::V6(a) => self.flags & Self::V6 != 0 && ue6_key(&a).to_be_bytes() == self.v6_prefix,
        }
    }

    /// Whether every packet `other` admits, this admits too (same side, and each
    /// address `other` names named here).
    pub fn covers(&self, other: &UeMatch) -> bool {
        let (v4, v6) = (other.flags & Self::V4 != 0, other.flags & Self::V6 != 0);
        (self.flags & Self::DESTINATION) == (other.flags & Self::DESTINATION)
            && (!v4 || (self.flags & Self::V4 != 0 && self.v4 == other.v4))
            && (!v6 || (self.flags & Self::V6 != 0 && self.v6_prefix == other.v6_prefix))
    }

    /// The addresses, for display: the IPv4 one and the IPv6 /64.
    pub fn addresses(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.flags & Self::V4 != 0 {
            v.push(Ipv4Addr::from(self.v4).to_string());
        }
        if self.flags & Self::V6 != 0 {
            v.push(format!("{}/64", Ipv6Addr::from((u64::from_be_bytes(self.v6_prefix) as u128) << 64)));
        }
        v
    }
}

/// What a [`Record`] carries beside its action: the outer header its FORW creates, or,
/// for an uplink PDR that names the UE's address, that address to check. An uplink PDR
/// with both (re-encapsulating on N9) is left to the full match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    Nothing,
    Outer(OuterHeader),
    Ue(UeMatch),
}

impl Carried {
    #[inline(always)]
    pub fn outer(&self) -> Option<&OuterHeader> {
        match self {
            Carried::Outer(o) => Some(o),
            _ => None,
        }
    }

    #[inline(always)]
    pub fn ue(&self) -> Option<&UeMatch> {
        match self {
            Carried::Ue(m) => Some(m),
            _ => None,
        }
    }
}

/// A session as the workers read it: its rules by direction, each list in precedence
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub seid: u64,
    /// The session's slot, which indexes its buffering queues.
    pub slot: u32,
    pub uplink: Box<[Rule]>,
    pub downlink: Box<[Rule]>,
}

/// The session-resolved record: what a packet found by a key of one direction (an uplink
/// TEID, a UE address) needs when its session's first PDR for that direction matches
/// every such packet — no SDF filter, no QFI or UE address to compare beyond the one kept
/// here, at most one QER and one URR — in one cache line beside its session's other
/// direction: the FAR's action with the QERs' gate and the URRs' quota already applied,
/// the QER bucket with this worker's share of the MBR, the URR cell, and the precomputed
/// outer header or the UE address ([`Carried`]).
/// A node reads the lookup table's slot, this line, and the bucket and cell, where the
/// full match follows the session pointer, the session, its rules and their QER and URR
/// slices first. Any other session (`action: None`) goes through the full match, and
/// a property test (`tests/nodes.rs`) holds the two to the same verdicts and counts.
///
/// 64 bytes, on a line of its own: [`RecordArray`] starts its chunks on a line boundary
/// without over-aligning them (an over-aligned chunk is glibc's `memalign`, which left a
/// hole at each session change: 16.8 KB resident per session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Record {
    /// FORW with outer header creation (toward the gNB, or a peer UPF on N9), or the UE
    /// address an uplink PDR matches (a packet without it goes through the full match).
    pub carried: Carried,
    /// `None`: not resolvable ahead of the packet, the full PDR match decides.
    pub action: Option<Action>,
    /// Uplink: the PDR's outer header removal.
    pub remove_outer: bool,
    /// Uplink: the QFI the PDR asks of a G-PDU (another goes through the full match).
    pub qfi: Option<u8>,
    pub usage: Option<UsageCellRef>,
    pub policer: Option<PolicerRef>,
}

const _: () = assert!(core::mem::size_of::<Record>() == 64, "a Record is a cache line's bytes");

/// What a record does with its packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// FORW: police, count, send on (with the outer header, if any).
    Forward,
    /// BUFF: held until the FAR forwards (downlink; the uplink drops it, as its full
    /// path does).
    Buffer,
    /// Dropped before any counting, for this reason.
    Stop(Stop),
}

/// Why a record drops every packet it takes (each is a `upfN-*` counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    FarDrop,
    /// A downlink FORW without an outer header.
    NoOuterHeader,
    QuotaExhausted,
    GateClosed,
}

/// A QER's bucket (this direction's) and the MBR it polices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicerRef {
    pub slot: u32,
    pub generation: NonZeroU32,
    /// The QER's MBR for this direction, as the bucket divides by it ([`Mbr::divisor`]).
    pub rate: Divisor,
}

/// A URR's usage cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageCellRef {
    pub slot: u32,
    pub generation: NonZeroU32,
}

impl Record {
    pub const UNRESOLVED: Record =
        Record { action: None, remove_outer: false, qfi: None, carried: Carried::Nothing, usage: None, policer: None };

    /// The record of one direction's rules (in precedence order); uplink, also the TEID it is for (the first rule's). The first rule decides when
    /// it matches every packet its key finds (and, uplink, carries the record's QFI);
    /// what it then does is what the nodes' full path would do, in the same order: the
    /// FAR's DROP or BUFF, a downlink FORW without an outer header, a used-up quota, a
    /// closed gate, then the MBR and counting.
    pub fn resolve(rules: &[Rule], uplink: bool) -> (Record, Option<u32>) {
        let Some(r) = rules.first() else { return (Record::UNRESOLVED, None) };
        if !r.sdf.is_empty() || r.qers.len() > 1 || r.urrs.len() > 1 || (uplink && r.teid.is_none()) {
            return (Record::UNRESOLVED, None);
        }
        // Downlink packets find the session by any UE address its PDRs name; the record
        // takes them all only when its PDR names each of those addresses (one PDR for
        // the IPv4 UE and another for the IPv6 one: the full match picks by family).
        if !uplink && rules.iter().any(|o| matches!((r.ue, o.ue), (Some(m), Some(n)) if !m.covers(&n))) {
            return (Record::UNRESOLVED, None);
        }
        let q = r.qers.first();
        let u = r.urrs.first();
        let policer = match q.and_then(|q| Some((q, q.mbr?))) {
            Some((q, mbr)) => match NonZeroU32::new(q.generation) {
                Some(generation) => Some(PolicerRef { slot: q.slot, generation, rate: mbr.divisor() }),
                None => return (Record::UNRESOLVED, None),
            },
            None => None,
        };
        let usage = match u {
            Some(u) => match NonZeroU32::new(u.generation) {
                Some(generation) => Some(UsageCellRef { slot: u.slot, generation }),
                None => return (Record::UNRESOLVED, None),
            },
            None => None,
        };
        let (action, outer) = match r.forward {
            Forward::Drop => (Action::Stop(Stop::FarDrop), None),
            Forward::Buffer => (Action::Buffer, None),
            Forward::Forward(None) if !uplink => (Action::Stop(Stop::NoOuterHeader), None),
            Forward::Forward(_) if u.is_some_and(|u| u.exhausted) => (Action::Stop(Stop::QuotaExhausted), None),
            Forward::Forward(_) if q.is_some_and(|q| !q.open) => (Action::Stop(Stop::GateClosed), None),
            Forward::Forward(o) => (Action::Forward, o),
        };
        let carried = match (outer, r.ue.filter(|_| uplink)) {
            (Some(_), Some(_)) => return (Record::UNRESOLVED, None),
            (Some(o), None) => Carried::Outer(o),
            (None, Some(m)) => Carried::Ue(m),
            (None, None) => Carried::Nothing,
        };
        let record = Record {
            action: Some(action),
            remove_outer: uplink && r.remove_outer,
            qfi: if uplink { r.qfi } else { None },
            carried,
            usage,
            policer,
        };
        (record, if uplink { r.teid } else { None })
    }
}

/// A session's two records, indexed like the sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRecords {
    pub uplink: Record,
    pub downlink: Record,
}

impl SessionRecords {
    pub const UNRESOLVED: SessionRecords = SessionRecords { uplink: Record::UNRESOLVED, downlink: Record::UNRESOLVED };

    /// A session's records, and the TEID its uplink record is for.
    pub fn of(s: &Session) -> (SessionRecords, Option<u32>) {
        let (uplink, teid) = Record::resolve(&s.uplink, true);
        let (downlink, _) = Record::resolve(&s.downlink, false);
        (SessionRecords { uplink, downlink }, teid)
    }
}

/// Records per chunk: 128 of 128 bytes, the 16 KiB a TEID table chunk has, so that a
/// session change copies as little.
const RECORD_CHUNK_BITS: u32 = 7;

/// Each session's records by slot, chunks starting on a line boundary so that each
/// [`Record`] is one line (new entries unresolved).
pub type RecordArray = CowVec<SessionRecords, RECORD_CHUNK_BITS, engine::mem::SharedLines<SessionRecords>>;

/// A version of the UPF tables.
#[derive(Clone)]
pub struct UpfTables {
    pub generation: u64,
    pub sessions: CowVec<Option<Arc<Session>>>,
    /// Each session's records, by the session's slot.
    pub records: RecordArray,
    /// Local TEID → session slot; the aux word is 1 for the TEID the session's uplink
    /// record is for.
    pub by_teid: TeidTable,
    /// UE IPv4 address → session slot.
    pub by_ue4: TeidTable,
    /// UE IPv6 /64 (the address's high 64 bits) → session slot.
    pub by_ue6: TeidTable,
    /// Our N3 addresses: the outer source of what we encapsulate.
    pub n3_v4: Option<Ipv4Addr>,
    pub n3_v6: Option<Ipv6Addr>,
}

impl Default for UpfTables {
    fn default() -> Self {
        UpfTables {
            generation: 0,
            sessions: CowVec::new(0, None),
            records: RecordArray::new(0, SessionRecords::UNRESOLVED),
            by_teid: TeidTable::default(),
            by_ue4: TeidTable::default(),
            by_ue6: TeidTable::default(),
            n3_v4: None,
            n3_v6: None,
        }
    }
}

impl UpfTables {
    #[inline(always)]
    pub fn session(&self, slot: u32) -> Option<&Session> {
        self.sessions.get(slot as usize).and_then(|s| s.as_deref())
    }

    #[inline(always)]
    pub fn by_teid(&self, teid: u32) -> Option<&Session> {
        self.session(self.by_teid.get(teid as u64)?)
    }

    #[inline(always)]
    pub fn by_ue4(&self, a: Ipv4Addr) -> Option<&Session> {
        self.session(self.by_ue4.get(u32::from(a) as u64)?)
    }

    #[inline(always)]
    pub fn by_ue6(&self, a: &Ipv6Addr) -> Option<&Session> {
        self.session(self.by_ue6.get(ue6_key(a))?)
    }

    /// A session's records (every slot has them: a free one's are unresolved).
    #[inline(always)]
    pub fn records(&self, slot: u32) -> &SessionRecords {
        self.records.get(slot as usize).unwrap_or(&SessionRecords::UNRESOLVED)
    }

    pub fn memory_bytes(&self) -> usize {
        self.by_teid.memory_bytes()
            + self.by_ue4.memory_bytes()
            + self.by_ue6.memory_bytes()
            + self.sessions.memory_bytes()
            + self.records.memory_bytes()
    }
}

/// UEs get /64s (TS 23.501 §5.8.2.2.2): the key is the prefix.
#[inline(always)]
pub fn ue6_key(a: &Ipv6Addr) -> u64 {
    (u128::from(*a) >> 64) as u64
}

/// The keys a session is found by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionKeys {
    pub teids: Vec<u32>,
    pub ue4: Vec<Ipv4Addr>,
    pub ue6: Vec<Ipv6Addr>,
}

impl SessionKeys {
    pub fn of(s: &Session) -> SessionKeys {
        let mut k = SessionKeys::default();
        for r in s.uplink.iter() {
            if let Some(t) = r.teid {
                if !k.teids.contains(&t) {
                    k.teids.push(t);
                }
            }
        }
        k
    }
}

/// Refused installs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallError {
    #[error("TEID {0:#x} belongs to another session")]
    TeidInUse(u32),
    #[error("UE address {0} belongs to another session")]
    UeInUse(IpAddr),
    #[error("PDR {pdr}: its FAR sends in GTP-U to {peer}, and there is no N3 address of that family to send from ([pfcp] n3 / n3_ipv6)")]
    NoN3Address { pdr: u16, peer: IpAddr },
    #[error("no free session slot (all {0} in use)")]
    Full(usize),
    #[error("{0}")]
    Compile(#[from] CompileError),
}

impl InstallError {
    /// What the SMF is told (TS 29.244 §8.2.1). Full tables are No resources available,
    /// which blames no IE. A rule that cannot be built as asked (an SDF filter form we do
    /// not compile, a TEID or UE address another session holds) is Rule creation/
    /// modification failure naming that IE: the IE is well formed, so not Mandatory IE
    /// incorrect, and this UPF cannot take it; the PDR of `rules` it is in is the Failed
    /// Rule ID.
    pub fn refusal(&self, rules: &pfcp::rules::SessionRules) -> pfcp::upf::Refusal {
        use pfcp::ie::{ty, FailedRuleId};
        use pfcp::Cause;
        let pdr = |f: &dyn Fn(&pfcp::rules::Pdr) -> bool| rules.pdrs.values().find(|p| f(p)).map(|p| FailedRuleId::Pdr(p.id));
        let failed_rule = match *self {
            InstallError::TeidInUse(t) => pdr(&|p| p.local_f_teid.is_some_and(|e| e.teid == t)),
            InstallError::UeInUse(IpAddr::V4(a)) => pdr(&|p| p.ue_ipv4 == Some(a)),
            InstallError::UeInUse(IpAddr::V6(a)) => pdr(&|p| p.ue_ipv6.is_some_and(|u| ue6_key(&u) == ue6_key(&a))),
            InstallError::Compile(CompileError::Sdf { pdr, .. } | CompileError::NoDirection(pdr)) => Some(FailedRuleId::Pdr(pdr)),
            InstallError::NoN3Address { pdr, .. } => rules.pdrs.get(&pdr).and_then(|p| p.far_id).map(FailedRuleId::Far),
            InstallError::Full(_) | InstallError::Compile(CompileError::NoSlot(_)) => None,
        };
        let (cause, ie) = match self {
            InstallError::TeidInUse(_) => (Cause::RuleCreationModificationFailure, Some(ty::F_TEID)),
            InstallError::UeInUse(_) => (Cause::RuleCreationModificationFailure, Some(ty::UE_IP_ADDRESS)),
            // Every packet the FAR forwards would be dropped (`no-n3-address`).
            InstallError::NoN3Address { .. } => (Cause::RuleCreationModificationFailure, Some(ty::OUTER_HEADER_CREATION)),
            InstallError::Compile(CompileError::Sdf { .. }) => (Cause::RuleCreationModificationFailure, Some(ty::SDF_FILTER)),
            // A PDI this dataplane cannot match on (no F-TEID, no UE address it receives
            // packets for): the PDR cannot be created as asked.
            InstallError::Compile(CompileError::NoDirection(_)) => (Cause::RuleCreationModificationFailure, Some(ty::PDI)),
            InstallError::Full(_) | InstallError::Compile(CompileError::NoSlot(_)) => (Cause::NoResourcesAvailable, None),
        };
        pfcp::upf::Refusal { cause, offending_ie: ie, failed_rule }
    }
}

/// The core asks the tables it will install into: [`UpfState::check_rules`].
impl pfcp::upf::Admission for UpfState {
    fn admit(&mut self, rules: &pfcp::rules::SessionRules) -> Result<(), pfcp::upf::Refusal> {
        self.check_rules(rules).map_err(|e| e.refusal(rules))
    }
}

/// The control plane's side: the next version of the tables, slots by SEID, and the
/// keys each session holds.
pub struct UpfState {
    tables: UpfTables,
    slot_of: std::collections::HashMap<u64, (u32, SessionKeys)>,
    free: Vec<u32>,
    max_sessions: usize,
    /// QER and URR slots by SEID.
    rule_slots: std::collections::HashMap<u64, SessionSlots>,
    qer_slots: SlotAllocator,
    urr_slots: SlotAllocator,
}

impl UpfState {
    /// Room for `max_sessions` sessions, `max_qers` QERs and `max_urrs` URRs (what the
    /// workers' buckets and usage cells hold).
    pub fn new(max_sessions: usize, max_qers: u32, max_urrs: u32) -> UpfState {
        UpfState {
            tables: UpfTables::default(),
            slot_of: Default::default(),
            free: Vec::new(),
            max_sessions,
            rule_slots: Default::default(),
            qer_slots: SlotAllocator::new(max_qers),
            urr_slots: SlotAllocator::new(max_urrs),
        }
    }

    /// Install (or replace) a PFCP session's rules: compiled, with QER/URR slots kept
    /// across modifications. A refused change leaves the installed session as it was.
    pub fn install_rules(&mut self, r: &pfcp::rules::SessionRules) -> Result<(), InstallError> {
        // Everything that can refuse first, so that once slots are assigned nothing fails.
        self.check_rules(r)?;
        let mut slots = self.rule_slots.get(&r.seid).cloned().unwrap_or_default();
        assign_slots(r, &mut slots, &mut self.qer_slots, &mut self.urr_slots)?;
        let c = compile(r, &slots)?;
        self.install(c.session, c.ue4, c.ue6)?;
        self.rule_slots.insert(r.seid, slots);
        Ok(())
    }

    /// Would [`UpfState::install_rules`] take `r` now? Each PDR is uplink or downlink, its
    /// SDF filters compile, its keys are free or its own, and there is a session slot (if
    /// new) and a slot for each QER and URR that has none yet. Nothing changes.
    pub fn check_rules(&self, r: &pfcp::rules::SessionRules) -> Result<(), InstallError> {
        let probe = compile(r, &SessionSlots::default())?;
        self.check(&probe.session, &probe.ue4, &probe.ue6)?;
        let held = self.rule_slots.get(&r.seid);
        slots_fit(r, held.unwrap_or(&SessionSlots::default()), &self.qer_slots, &self.urr_slots)?;
        Ok(())
    }

    /// The UE addresses a session is found by (IPv6: the /64 of the address given).
    pub fn ue_addresses(&self, seid: u64) -> Vec<IpAddr> {
        self.slot_of
            .get(&seid)
            .map_or(vec![], |(_, k)| k.ue4.iter().map(|a| IpAddr::V4(*a)).chain(k.ue6.iter().map(|a| IpAddr::V6(*a))).collect())
    }

    /// The URR slots of a session, by URR id.
    pub fn urr_slots(&self, seid: u64) -> &[(u32, crate::session::SlotRef)] {
        self.rule_slots.get(&seid).map_or(&[], |s| &s.urrs)
    }

    /// QER and URR slots in use.
    pub fn slots_in_use(&self) -> (usize, usize) {
        (self.qer_slots.in_use(), self.urr_slots.in_use())
    }

    pub fn set_n3(&mut self, v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) {
        self.tables.n3_v4 = v4;
        self.tables.n3_v6 = v6;
    }

    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    pub fn slot(&self, seid: u64) -> Option<u32> {
        self.slot_of.get(&seid).map(|(s, _)| *s)
    }

    /// Install or replace a session (`session.slot` is assigned here). A key held by
    /// another session refuses the whole change.
    pub fn install(&mut self, mut session: Session, ue4: Vec<Ipv4Addr>, ue6: Vec<Ipv6Addr>) -> Result<u32, InstallError> {
        self.check(&session, &ue4, &ue6)?;
        let mut keys = SessionKeys::of(&session);
        keys.ue4 = ue4;
        keys.ue6 = ue6;
        let own = self.slot_of.get(&session.seid).map(|(s, _)| *s);
        let slot = match own {
            Some(s) => {
                self.unkey(session.seid);
                s
            }
            None => match self.free.pop() {
                Some(s) => s,
                None if self.tables.sessions.len() < self.max_sessions => {
                    let s = self.tables.sessions.len() as u32;
                    self.tables.sessions.resize(s as usize + 1);
                    self.tables.records.resize(s as usize + 1);
                    s
                }
                None => return Err(InstallError::Full(self.max_sessions)),
            },
        };
        session.slot = slot;
        let (records, record_teid) = SessionRecords::of(&session);
        for &t in &keys.teids {
            self.tables.by_teid.insert_entry(t as u64, slot, u32::from(Some(t) == record_teid));
        }
        for a in &keys.ue4 {
            self.tables.by_ue4.insert(u32::from(*a) as u64, slot);
        }
        for a in &keys.ue6 {
            self.tables.by_ue6.insert(ue6_key(a), slot);
        }
        let seid = session.seid;
        if let Some(s) = self.tables.sessions.get_mut(slot as usize) {
            *s = Some(Arc::new(session));
        }
        if let Some(r) = self.tables.records.get_mut(slot as usize) {
            *r = records;
        }
        self.slot_of.insert(seid, (slot, keys));
        Ok(slot)
    }

    /// Would [`UpfState::install`] take this session? Its keys must be free or its own,
    /// and a new session needs a slot.
    fn check(&self, session: &Session, ue4: &[Ipv4Addr], ue6: &[Ipv6Addr]) -> Result<(), InstallError> {
        let own = self.slot_of.get(&session.seid).map(|(s, _)| *s);
        let taken = |v: Option<u32>| v.is_some() && v != own;
        for t in SessionKeys::of(session).teids {
            if taken(self.tables.by_teid.get(t as u64)) {
                return Err(InstallError::TeidInUse(t));
            }
        }
        for a in ue4 {
            if taken(self.tables.by_ue4.get(u32::from(*a) as u64)) {
                return Err(InstallError::UeInUse(IpAddr::V4(*a)));
            }
        }
        for a in ue6 {
            if taken(self.tables.by_ue6.get(ue6_key(a))) {
                return Err(InstallError::UeInUse(IpAddr::V6(*a)));
            }
        }
        for r in session.uplink.iter().chain(session.downlink.iter()) {
            if let Forward::Forward(Some(o)) = &r.forward {
                let ours = match o.peer {
                    IpAddr::V4(_) => self.tables.n3_v4.is_some(),
                    IpAddr::V6(_) => self.tables.n3_v6.is_some(),
                };
                if !ours {
                    return Err(InstallError::NoN3Address { pdr: r.pdr_id, peer: o.peer });
                }
            }
        }
        if own.is_none() && self.free.is_empty() && self.tables.sessions.len() >= self.max_sessions {
            return Err(InstallError::Full(self.max_sessions));
        }
        Ok(())
    }

    /// Forget a session's keys (its slot stays assigned).
    fn unkey(&mut self, seid: u64) {
        let Some((_, keys)) = self.slot_of.get(&seid) else { return };
        for &t in &keys.teids {
            self.tables.by_teid.remove(t as u64);
        }
        for a in &keys.ue4 {
            self.tables.by_ue4.remove(u32::from(*a) as u64);
        }
        for a in &keys.ue6 {
            self.tables.by_ue6.remove(ue6_key(a));
        }
    }

    /// Remove a session; its slots are reused by later ones.
    pub fn remove(&mut self, seid: u64) -> bool {
        if let Some(mut slots) = self.rule_slots.remove(&seid) {
            assign_slots(&empty_like(seid), &mut slots, &mut self.qer_slots, &mut self.urr_slots).ok();
        }
        self.unkey(seid);
        let Some((slot, _)) = self.slot_of.remove(&seid) else { return false };
        if let Some(s) = self.tables.sessions.get_mut(slot as usize) {
            *s = None;
        }
        if let Some(r) = self.tables.records.get_mut(slot as usize) {
            *r = SessionRecords::UNRESOLVED;
        }
        self.free.push(slot);
        true
    }

    /// The current session for a SEID, as installed.
    pub fn session(&self, seid: u64) -> Option<&Session> {
        self.tables.session(self.slot(seid)?)
    }

    /// A version to publish (cheap: chunks are shared).
    pub fn build(&mut self) -> UpfTables {
        self.tables.generation += 1;
        self.tables.clone()
    }

    pub fn memory_bytes(&self) -> usize {
        self.tables.memory_bytes()
    }
}

/// A session with no rules: assigning its slots releases every slot held.
fn empty_like(seid: u64) -> pfcp::rules::SessionRules {
    pfcp::rules::SessionRules {
        seid,
        cp_node: pfcp::ie::NodeId::Ipv4(Ipv4Addr::UNSPECIFIED),
        pdrs: Default::default(),
        fars: Default::default(),
        qers: Default::default(),
        urrs: Default::default(),
        bar: None,
    }
}
