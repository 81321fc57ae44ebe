//! From a PFCP session's rules ([`pfcp::rules::SessionRules`], what the sans-IO core
//! accepted) to the dataplane's [`Session`]: PDRs split by direction and sorted by
//! precedence, each with its FAR, QERs and URRs resolved, SDF filters compiled, and the
//! QER and URR slots the workers count in.
//!
//! Direction: a PDR with a local F-TEID is uplink (it matches G-PDUs on that TEID); one
//! with a UE address that is the destination (S/D set, or a PDR from the Core / N6 side,
//! which can only be addressed to the UE — pfcpsim leaves S/D clear) is downlink. Any
//! other PDR could match nothing this dataplane receives: the session is refused
//! ([`CompileError::NoDirection`]) rather than accepted with the PDR left out.

use crate::mbr::Mbr;
use crate::sdf::{SdfError, SdfFilter};
use crate::tables::{Forward, OuterHeader, QerRef, Rule, Session, UeMatch, UrrRef};
use core::net::{Ipv4Addr, Ipv6Addr};
use pfcp::ie::Interface;
use pfcp::rules::{Pdr, SessionRules};

/// A QER's or URR's counting slot and the generation that tells it from the slot's
/// earlier owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRef {
    pub slot: u32,
    pub generation: u32,
}

/// Slots of one kind (QER buckets or URR cells), reused after release with a new
/// generation.
#[derive(Debug, Clone)]
pub struct SlotAllocator {
    free: Vec<u32>,
    next: u32,
    capacity: u32,
    generation: u32,
}

impl SlotAllocator {
    pub fn new(capacity: u32) -> SlotAllocator {
        SlotAllocator { free: Vec::new(), next: 0, capacity, generation: 0 }
    }

    pub fn alloc(&mut self) -> Option<SlotRef> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.next < self.capacity => {
                self.next += 1;
                self.next - 1
            }
            None => return None,
        };
        // Generation 0 is what an unused cell holds: never hand it out.
        self.generation = self.generation.wrapping_add(1).max(1);
        Some(SlotRef { slot, generation: self.generation })
    }

    pub fn release(&mut self, s: SlotRef) {
        self.free.push(s.slot);
    }

    pub fn in_use(&self) -> usize {
        self.next as usize - self.free.len()
    }

    /// Slots [`SlotAllocator::alloc`] can still hand out.
    pub fn available(&self) -> usize {
        (self.capacity - self.next) as usize + self.free.len()
    }
}

/// A session's QER and URR slots by rule id, kept across modifications so usage counts
/// and buckets carry on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionSlots {
    pub qers: Vec<(u32, SlotRef)>,
    pub urrs: Vec<(u32, SlotRef)>,
}

impl SessionSlots {
    pub fn urr(&self, id: u32) -> Option<SlotRef> {
        self.urrs.iter().find(|(i, _)| *i == id).map(|(_, s)| *s)
    }
    pub fn qer(&self, id: u32) -> Option<SlotRef> {
        self.qers.iter().find(|(i, _)| *i == id).map(|(_, s)| *s)
    }
}

/// Why a session's rules cannot be installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("PDR {pdr}: SDF filter {text:?}: {error}")]
    Sdf { pdr: u16, text: String, error: SdfError },
    #[error("no free {0} slot (raise [pfcp] max_{0}s)")]
    NoSlot(&'static str),
    #[error("PDR {0}: neither uplink (no local F-TEID) nor downlink (no UE IP Address as the destination, nor from the Core / N6 side)")]
    NoDirection(u16),
}

/// A compiled session and the UE addresses it is found by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    pub session: Session,
    pub ue4: Vec<Ipv4Addr>,
    pub ue6: Vec<Ipv6Addr>,
}

fn is_uplink(p: &Pdr) -> bool {
    p.local_f_teid.is_some()
}

fn is_downlink(p: &Pdr) -> bool {
    (p.ue_ipv4.is_some() || p.ue_ipv6.is_some()) && (p.ue_is_destination || matches!(p.source, Interface::Core | Interface::SgiLanN6Lan))
}

/// Would [`assign_slots`] find room for `r`? Rules already holding a slot keep it; the
/// others need a free one (slots of rules gone are released only after).
pub fn slots_fit(r: &SessionRules, slots: &SessionSlots, qa: &SlotAllocator, ua: &SlotAllocator) -> Result<(), CompileError> {
    if r.qers.keys().filter(|id| slots.qer(**id).is_none()).count() > qa.available() {
        return Err(CompileError::NoSlot("qer"));
    }
    if r.urrs.keys().filter(|id| slots.urr(**id).is_none()).count() > ua.available() {
        return Err(CompileError::NoSlot("urr"));
    }
    Ok(())
}

/// Give every QER and URR of `r` a slot (keeping those `slots` already has), and release
/// the slots of rules gone. On error nothing is allocated or released.
pub fn assign_slots(
    r: &SessionRules,
    slots: &mut SessionSlots,
    qa: &mut SlotAllocator,
    ua: &mut SlotAllocator,
) -> Result<(), CompileError> {
    let mut new = SessionSlots::default();
    let mut fresh_q = Vec::new();
    let mut fresh_u = Vec::new();
    let undo = |fq: &[SlotRef], fu: &[SlotRef], qa: &mut SlotAllocator, ua: &mut SlotAllocator| {
        fq.iter().for_each(|s| qa.release(*s));
        fu.iter().for_each(|s| ua.release(*s));
    };
    for id in r.qers.keys() {
        let s = match slots.qer(*id) {
            Some(s) => s,
            None => match qa.alloc() {
                Some(s) => {
                    fresh_q.push(s);
                    s
                }
                None => {
                    undo(&fresh_q, &fresh_u, qa, ua);
                    return Err(CompileError::NoSlot("qer"));
                }
            },
        };
        new.qers.push((*id, s));
    }
    for id in r.urrs.keys() {
        let s = match slots.urr(*id) {
            Some(s) => s,
            None => match ua.alloc() {
                Some(s) => {
                    fresh_u.push(s);
                    s
                }
                None => {
                    undo(&fresh_q, &fresh_u, qa, ua);
                    return Err(CompileError::NoSlot("urr"));
                }
            },
        };
        new.urrs.push((*id, s));
    }
    for (id, s) in &slots.qers {
        if new.qer(*id).is_none() {
            qa.release(*s);
        }
    }
    for (id, s) in &slots.urrs {
        if new.urr(*id).is_none() {
            ua.release(*s);
        }
    }
    *slots = new;
    Ok(())
}

/// Compile a session's rules with its slots (from [`assign_slots`]).
pub fn compile(r: &SessionRules, slots: &SessionSlots) -> Result<Compiled, CompileError> {
    let mut uplink = Vec::new();
    let mut downlink = Vec::new();
    let mut ue4 = Vec::new();
    let mut ue6 = Vec::new();
    for p in r.pdrs.values() {
        let up = is_uplink(p);
        if !up && !is_downlink(p) {
            return Err(CompileError::NoDirection(p.id));
        }
        let rule = rule(r, p, slots, up)?;
        if up {
            uplink.push(rule);
        } else {
            ue4.extend(p.ue_ipv4.filter(|a| !ue4.contains(a)));
            ue6.extend(p.ue_ipv6.filter(|a| !ue6.contains(a)));
            downlink.push(rule);
        }
    }
    // Precedence: lower values first; equal ones by PDR id so the order is stable.
    uplink.sort_by_key(|r: &Rule| (r.precedence, r.pdr_id));
    downlink.sort_by_key(|r: &Rule| (r.precedence, r.pdr_id));
    let session = Session { seid: r.seid, slot: 0, uplink: uplink.into(), downlink: downlink.into() };
    Ok(Compiled { session, ue4, ue6 })
}

fn rule(r: &SessionRules, p: &Pdr, slots: &SessionSlots, uplink: bool) -> Result<Rule, CompileError> {
    let sdf = p
        .sdf_filters
        .iter()
        .map(|t| {
            let text = String::from_utf8_lossy(t);
            SdfFilter::parse(&text).map_err(|error| CompileError::Sdf { pdr: p.id, text: text.into_owned(), error })
        })
        .collect::<Result<Box<[_]>, _>>()?;
    let qers: Box<[QerRef]> = p
        .qer_ids
        .iter()
        .filter_map(|id| Some((r.qers.get(id)?, slots.qer(*id)?)))
        .map(|(q, s)| QerRef {
            slot: s.slot,
            generation: s.generation,
            open: if uplink { q.ul_open } else { q.dl_open },
            // kbit/s (TS 29.244 §8.2.8: kilobits of 1000 bits) to bytes/s, with the
            // reciprocal the policer divides by (made here, not per packet).
            mbr: if uplink { q.mbr_ul_kbps } else { q.mbr_dl_kbps }.map(|k| Mbr::new(k.saturating_mul(125))),
            gbr_bytes_per_sec: if uplink { q.gbr_ul_kbps } else { q.gbr_dl_kbps }.map(|k| k.saturating_mul(125)),
        })
        .collect();
    let urrs: Box<[UrrRef]> = p
        .urr_ids
        .iter()
        .filter_map(|id| Some((r.urrs.get(id)?, slots.urr(*id)?)))
        .map(|(u, s)| UrrRef { slot: s.slot, generation: s.generation, exhausted: u.quota_exhausted })
        .collect();
    let qfi = p.qer_ids.iter().filter_map(|id| r.qers.get(id)).find_map(|q| q.qfi).or(p.qfi);
    let forward = match p.far_id.and_then(|id| r.fars.get(&id)) {
        Some(f) if f.drops() => Forward::Drop,
        Some(f) if f.buffers() => Forward::Buffer,
        Some(f) if f.forwards() => {
            Forward::Forward(f.outer_header.map(|e| OuterHeader::new(e.teid, e.addr, qfi).marked(f.transport_marking)))
        }
        // No FAR, or NOCP alone: nothing forwards (the core refuses DUPL).
        _ => Forward::Drop,
    };
    Ok(Rule {
        pdr_id: p.id,
        precedence: p.precedence,
        teid: if uplink { p.local_f_teid.map(|e| e.teid) } else { None },
        qfi: if uplink { p.qfi } else { None },
        sdf,
        remove_outer: p.outer_header_removal,
        forward,
        notify: p.far_id.and_then(|id| r.fars.get(&id)).is_some_and(|f| f.action & pfcp::ie::apply_action::NOCP != 0),
        hold_limit: p.far_id.and_then(|id| r.bar_of(id)).and_then(|b| b.hold_limit()),
        qers,
        urrs,
        // Downlink: the UE is the destination whatever the S/D bit says (the PDR is one
        // because it names the UE with the core as its source, or S/D set).
        ue: UeMatch::new(p.ue_ipv4, p.ue_ipv6, p.ue_is_destination || !uplink),
    })
}
