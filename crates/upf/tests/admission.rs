//! The sans-IO PFCP core and the dataplane tables together, as `control::pfcp` drives them
//! but without sockets: the tables admit a session's rules before the core accepts them,
//! so the SMF is never told Request Accepted for a session that does not forward, and a
//! refused request changes neither side.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use pfcp::grouped::*;
use pfcp::header::Header;
use pfcp::ie::*;
use pfcp::message::*;
use pfcp::rules::SessionRules;
use pfcp::upf::{Action, Config, Upf};
use pfcp::{Cause, Message};
use upf::tables::UpfState;

const SMF_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 1);
const UPF_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
const GNB: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 10);
/// The UE IPv6 pool, a /48 handed out by /64 prefix.
const POOL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 0);

/// The core and the tables it installs into, with a simulated SMF.
struct Upf2 {
    core: Upf,
    tables: UpfState,
    now: Instant,
    seq: u32,
}

impl Upf2 {
    /// Room for `sessions` sessions and `rules` QERs and URRs.
    fn new(sessions: usize, rules: u32) -> Upf2 {
        let mut cfg = Config::new(NodeId::Ipv4(UPF_IP), 3_900_000_000);
        cfg.n3_ipv4 = Some(UPF_IP);
        cfg.ue_pool_v4 = Some((Ipv4Addr::new(198, 19, 7, 0), 24));
        cfg.ue_pool_v6 = Some((POOL6, 48));
        let mut tables = UpfState::new(sessions, rules, rules);
        tables.set_n3(Some(UPF_IP), None);
        let mut u = Upf2 { core: Upf::new(cfg), tables, now: Instant::now(), seq: 1 };
        let setup = AssociationRequest {
            node_id: NodeId::Ipv4(SMF_IP),
            recovery_time_stamp: Some(U32Ie(1)),
            up_function_features: None,
            cp_function_features: None,
        };
        let Message::AssociationSetupResponse(r) = u.request(None, Message::AssociationSetupRequest(setup)) else { panic!() };
        assert_eq!(r.cause.0, Cause::RequestAccepted);
        u
    }

    /// One request and its response; the actions it queued are applied to the tables as
    /// the control loop applies them, and every install must be taken.
    fn request(&mut self, seid: Option<u64>, m: Message) -> Message {
        self.seq += 1;
        let h = match seid {
            Some(s) => Header::session(m.msg_type(), s, self.seq),
            None => Header::node(m.msg_type(), self.seq),
        };
        let smf = SocketAddr::new(IpAddr::V4(SMF_IP), 8805);
        self.core.handle_with(self.now, smf, &m.to_bytes(&h), &mut self.tables);
        while let Some(a) = self.core.poll_action() {
            match a {
                Action::Install(rules) => {
                    if let Err(e) = self.tables.install_rules(&rules) {
                        panic!("session {:#x} accepted but not installed: {e}", rules.seid);
                    }
                }
                Action::Remove { seid } => assert!(self.tables.remove(seid)),
                Action::EndMarker { .. } | Action::DropBuffered { .. } => {}
            }
        }
        let t = self.core.poll_transmit().expect("a response");
        assert!(self.core.poll_transmit().is_none());
        Message::parse(&t.data).unwrap().1
    }

    fn establish(&mut self, r: SessionEstablishmentRequest) -> SessionEstablishmentResponse {
        match self.request(Some(0), Message::SessionEstablishmentRequest(r)) {
            Message::SessionEstablishmentResponse(r) => r,
            m => panic!("{m:?}"),
        }
    }

    fn modify(&mut self, seid: u64, r: SessionModificationRequest) -> SessionModificationResponse {
        match self.request(Some(seid), Message::SessionModificationRequest(r)) {
            Message::SessionModificationResponse(r) => r,
            m => panic!("{m:?}"),
        }
    }

    fn delete(&mut self, seid: u64) -> SessionDeletionResponse {
        match self.request(Some(seid), Message::SessionDeletionRequest) {
            Message::SessionDeletionResponse(r) => r,
            m => panic!("{m:?}"),
        }
    }

    /// Our SEID of an accepted session.
    fn accepted(&mut self, r: SessionEstablishmentRequest) -> u64 {
        let resp = self.establish(r);
        assert_eq!(resp.cause.0, Cause::RequestAccepted, "{resp:?}");
        resp.up_f_seid.expect("an F-SEID").seid
    }

    /// Both sides' view of a session: the core's rules, and the installed session.
    fn snapshot(&self, seid: u64) -> (Option<SessionRules>, Option<upf::Session>) {
        (self.core.session(seid).cloned(), self.tables.session(seid).cloned())
    }

    /// The session the published tables find for an uplink TEID.
    fn seid_by_teid(&mut self, teid: u32) -> Option<u64> {
        self.tables.build().by_teid(teid).map(|s| s.seid)
    }
}

/// An uplink PDR on `teid` (SMF-assigned, or CHOOSE when `None`) and a downlink PDR to
/// `ue`, one QER and one URR.
fn session(cp_seid: u64, teid: Option<u32>, ue: Ipv4Addr) -> SessionEstablishmentRequest {
    let f_teid = match teid {
        Some(teid) => FTeid::Assigned { teid, ipv4: Some(UPF_IP), ipv6: None },
        None => FTeid::Choose { v4: true, v6: false, choose_id: None },
    };
    SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF_IP),
        cp_f_seid: FSeid { seid: cp_seid, ipv4: Some(SMF_IP), ipv6: None },
        create_pdr: vec![
            CreatePdr {
                pdr_id: U16Ie(1),
                precedence: Some(U32Ie(100)),
                pdi: Some(Pdi { source_interface: Some(InterfaceIe(Interface::Access)), f_teid: Some(f_teid), ..Default::default() }),
                outer_header_removal: Some(OuterHeaderRemoval { description: ohr::GTPU_UDP_IPV4, extension_deletion: None }),
                far_id: Some(U32Ie(1)),
                urr_ids: vec![U32Ie(1)],
                qer_ids: vec![U32Ie(1)],
            },
            CreatePdr {
                pdr_id: U16Ie(2),
                precedence: Some(U32Ie(100)),
                pdi: Some(Pdi {
                    source_interface: Some(InterfaceIe(Interface::Core)),
                    ue_ip_address: Some(UeIpAddress { ipv4: Some(ue), destination: true, ..Default::default() }),
                    ..Default::default()
                }),
                outer_header_removal: None,
                far_id: Some(U32Ie(2)),
                urr_ids: vec![U32Ie(1)],
                qer_ids: vec![U32Ie(1)],
            },
        ],
        create_far: vec![
            CreateFar::forward(1, Interface::Core, None),
            CreateFar::forward(2, Interface::Access, Some(OuterHeaderCreation::gtpu(0x200, Some(GNB), None))),
        ],
        create_urr: vec![CreateUrr::measuring(1, measurement_method::VOLUM, trigger::VOLTH)],
        create_qer: vec![qer(1)],
        create_bar: None,
        pdn_type: Some(U8Ie(1)),
    }
}

/// `session` with the downlink PDR's UE IP Address IE as given.
fn session_ue(cp_seid: u64, teid: u32, ue: UeIpAddress) -> SessionEstablishmentRequest {
    let mut r = session(cp_seid, Some(teid), Ipv4Addr::UNSPECIFIED);
    r.create_pdr[1].pdi.as_mut().unwrap().ue_ip_address = Some(UeIpAddress { destination: true, ..ue });
    r
}

/// The UE address (IPv4, IPv6) an establishment's CHOOSE was given.
fn chosen_ue(r: &SessionEstablishmentResponse) -> (Option<Ipv4Addr>, Option<Ipv6Addr>) {
    let ue = r.created_pdr.iter().find_map(|c| c.ue_ip_address).unwrap_or_else(|| panic!("no UE address chosen: {r:?}"));
    (ue.ipv4, ue.ipv6)
}

fn qer(id: u32) -> CreateQer {
    CreateQer { qer_id: U32Ie(id), gate_status: Some(GateStatus::default()), mbr: None, gbr: None, qfi: None }
}

fn ue(host: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 8, host)
}

fn sdf(text: &str) -> SdfFilter {
    SdfFilter { flow_description: Some(text.as_bytes().to_vec()), ..Default::default() }
}

/// A modification that gives PDR `pdr_id` the PDI `pdi` and changes nothing else.
fn new_pdi(pdr_id: u16, pdi: Option<Pdi>) -> SessionModificationRequest {
    SessionModificationRequest {
        update_pdr: vec![UpdatePdr {
            pdr_id: U16Ie(pdr_id),
            precedence: None,
            pdi,
            outer_header_removal: None,
            far_id: None,
            urr_ids: vec![],
            qer_ids: vec![],
        }],
        ..Default::default()
    }
}

/// An uplink PDI: G-PDUs from the access side to the UPF's F-TEID `teid`.
fn uplink_at(teid: u32) -> Pdi {
    Pdi {
        source_interface: Some(InterfaceIe(Interface::Access)),
        f_teid: Some(FTeid::Assigned { teid, ipv4: Some(UPF_IP), ipv6: None }),
        ..Default::default()
    }
}

/// The cause and offending IE of a refusal.
fn refusal(cause: CauseIe, ie: Option<OffendingIe>) -> (Cause, Option<u16>) {
    (cause.0, ie.map(|i| i.0))
}

#[test]
fn a_session_beyond_max_sessions_is_refused_with_no_resources() {
    let mut u = Upf2::new(1, 8);
    let first = u.accepted(session(1, None, ue(1)));
    let r = u.establish(session(2, None, ue(2)));
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::NoResourcesAvailable, None));
    assert_eq!(r.failed_rule_id, None);
    assert!(r.up_f_seid.is_none() && r.created_pdr.is_empty());
    assert_eq!((u.core.session_count(), u.tables.len()), (1, 1), "the core keeps no session for a refused establishment");
    // The first session goes on, and once it is deleted there is room again.
    assert_eq!(u.delete(first).cause.0, Cause::RequestAccepted);
    u.accepted(session(3, None, ue(3)));
}

#[test]
fn qer_and_urr_slots_full_are_no_resources() {
    // Two QER and URR slots: the first session takes one of each, a second asking for two
    // QERs does not fit.
    let mut u = Upf2::new(8, 2);
    u.accepted(session(1, None, ue(1)));
    let mut two = session(2, None, ue(2));
    two.create_qer.push(qer(2));
    two.create_pdr[1].qer_ids = vec![U32Ie(2)];
    let r = u.establish(two);
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::NoResourcesAvailable, None));
    assert_eq!((u.core.session_count(), u.tables.len(), u.tables.slots_in_use()), (1, 1, (1, 1)));
}

#[test]
fn an_smf_assigned_teid_or_ue_address_of_another_session_is_refused() {
    let mut u = Upf2::new(8, 8);
    let first = u.accepted(session(1, Some(0x1234), ue(1)));
    let r = u.establish(session(2, Some(0x1234), ue(2)));
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::F_TEID)));
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Pdr(1)), "the PDR with the TEID");
    let r = u.establish(session(3, Some(0x1235), ue(1)));
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::UE_IP_ADDRESS)));
    assert_eq!((u.core.session_count(), u.tables.len()), (1, 1));
    assert_eq!(u.seid_by_teid(0x1234), Some(first), "the TEID still finds the first session");
    // A TEID shared by PDRs of one session is its own.
    let mut shared = session(4, Some(0x1236), ue(4));
    let mut ul2 = shared.create_pdr[0].clone();
    ul2.pdr_id = U16Ie(3);
    ul2.precedence = Some(U32Ie(50));
    shared.create_pdr.push(ul2);
    u.accepted(shared);
}

#[test]
fn an_sdf_filter_the_dataplane_cannot_compile_is_refused() {
    let mut u = Upf2::new(8, 8);
    let mut deny = session(1, None, ue(1));
    deny.create_pdr[1].pdi.as_mut().unwrap().sdf_filters = vec![sdf("deny out ip from any to assigned")];
    let r = u.establish(deny);
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::SDF_FILTER)));
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Pdr(2)), "the PDR with the filter");
    assert_eq!((u.core.session_count(), u.tables.len()), (0, 0));
    // What the refused request allocated (its chosen TEID) went back to the pool.
    let again = u.establish(session(2, None, ue(1)));
    assert_eq!(again.cause.0, Cause::RequestAccepted);
    let Some(FTeid::Assigned { teid, .. }) = again.created_pdr[0].f_teid else { panic!("{again:?}") };
    assert_eq!(teid, 1, "the refused session's TEID is reused");
}

/// A PDR this dataplane could match nothing with — no local F-TEID (so not uplink), and
/// no UE address it receives packets for (not downlink: an Access or CP-function source
/// without S/D) — is refused with 73 naming the PDI, in an establishment (nothing kept,
/// the chosen TEID back in the pool) and in a modification (Create or Update PDR: the
/// session as it was). It was accepted with cause 1 and left out of the tables: the SMF
/// believed in a rule that never matched a packet.
#[test]
fn a_pdr_neither_uplink_nor_downlink_is_refused_not_left_out() {
    let mut u = Upf2::new(8, 8);
    let nowhere = |id: u16, source: Interface| CreatePdr {
        pdr_id: U16Ie(id),
        precedence: Some(U32Ie(10)),
        pdi: Some(Pdi {
            source_interface: Some(InterfaceIe(source)),
            ue_ip_address: Some(UeIpAddress { ipv4: Some(ue(1)), ..Default::default() }),
            ..Default::default()
        }),
        outer_header_removal: None,
        far_id: Some(U32Ie(1)),
        urr_ids: vec![],
        qer_ids: vec![],
    };
    for source in [Interface::Access, Interface::CpFunction] {
        let mut r = session(1, None, ue(1));
        r.create_pdr.push(nowhere(3, source));
        let r = u.establish(r);
        assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::PDI)), "{source:?}");
        assert_eq!(r.failed_rule_id, Some(FailedRuleId::Pdr(3)));
        assert!(r.up_f_seid.is_none() && r.created_pdr.is_empty());
        assert_eq!((u.core.session_count(), u.tables.len()), (0, 0));
    }
    let seid = u.accepted(session(2, None, ue(2)));
    let teid = u.core.session(seid).unwrap().pdrs.get(&1).unwrap().local_f_teid.unwrap().teid;
    assert_eq!(teid, 1, "the refused sessions' TEIDs went back");
    let before = u.snapshot(seid);
    let r = u.modify(seid, SessionModificationRequest { create_pdr: vec![nowhere(3, Interface::Access)], ..Default::default() });
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::PDI)));
    assert_eq!(u.snapshot(seid), before);
    // The uplink PDR's PDI replaced by one without its F-TEID.
    let update = new_pdi(1, nowhere(1, Interface::Access).pdi);
    let r = u.modify(seid, update);
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::PDI)));
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Pdr(1)));
    assert_eq!(u.snapshot(seid), before);
    assert_eq!(u.seid_by_teid(1), Some(seid), "still found by its TEID");
}

/// A FAR that sends in GTP-U to a peer of a family the UPF has no N3 address of (here an
/// IPv6 gNB, the UPF's N3 IPv4 only) is refused with 73 naming Outer Header Creation and
/// the FAR: it was accepted and every packet it forwarded dropped as `no-n3-address`.
#[test]
fn a_far_to_a_peer_of_a_family_without_an_n3_address_is_refused() {
    let mut u = Upf2::new(8, 8);
    let gnb6: Ipv6Addr = "2001:db8:7::10".parse().unwrap();
    let mut r = session(1, None, ue(1));
    r.create_far[1] = CreateFar::forward(2, Interface::Access, Some(OuterHeaderCreation::gtpu(0x200, None, Some(gnb6))));
    let r = u.establish(r);
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::OUTER_HEADER_CREATION)), "{r:?}");
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Far(2)));
    assert_eq!((u.core.session_count(), u.tables.len()), (0, 0));
    // A handover to it: refused, the session forwarding as before.
    let seid = u.accepted(session(2, None, ue(2)));
    let before = u.snapshot(seid);
    let handover = SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: U32Ie(2),
            apply_action: None,
            update_forwarding_parameters: Some(UpdateForwardingParameters {
                outer_header_creation: Some(OuterHeaderCreation::gtpu(0x300, None, Some(gnb6))),
                ..Default::default()
            }),
            bar_id: None,
        }],
        ..Default::default()
    };
    let r = u.modify(seid, handover);
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::OUTER_HEADER_CREATION)));
    assert_eq!(u.snapshot(seid), before);
}

#[test]
fn dupl_is_refused_with_service_not_supported() {
    let mut u = Upf2::new(8, 8);
    let mut dupl = session(1, None, ue(1));
    dupl.create_far[0].apply_action = Flags(apply_action::FORW | apply_action::DUPL);
    let r = u.establish(dupl);
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::ServiceNotSupported, Some(ty::APPLY_ACTION)));
    assert_eq!(u.core.session_count(), 0);
    // Turned on by a modification: refused, the FAR forwards as before.
    let seid = u.accepted(session(2, None, ue(2)));
    let before = u.snapshot(seid);
    let m = SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: U32Ie(2),
            apply_action: Some(Flags(apply_action::FORW | apply_action::DUPL)),
            update_forwarding_parameters: None,
            bar_id: None,
        }],
        ..Default::default()
    };
    let r = u.modify(seid, m);
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::ServiceNotSupported, Some(ty::APPLY_ACTION)));
    assert_eq!(u.snapshot(seid), before);
}

#[test]
fn a_refused_modification_keeps_the_old_session_forwarding() {
    let mut u = Upf2::new(8, 2);
    let seid = u.accepted(session(1, Some(0x100), ue(1)));
    let other = u.accepted(session(2, Some(0x200), ue(2)));
    let before = u.snapshot(seid);
    assert!(before.0.is_some() && before.1.is_some());
    // Moving the uplink PDR to the other session's TEID.
    let steal = new_pdi(1, Some(uplink_at(0x200)));
    let r = u.modify(seid, steal);
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::F_TEID)));
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Pdr(1)));
    // A new downlink PDR with a filter that does not compile.
    let mut pdr = session(1, None, ue(1)).create_pdr[1].clone();
    pdr.pdr_id = U16Ie(5);
    pdr.pdi.as_mut().unwrap().sdf_filters = vec![sdf("permit out 17 from any to assigned 80 frag")];
    let r = u.modify(seid, SessionModificationRequest { create_pdr: vec![pdr], ..Default::default() });
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::SDF_FILTER)));
    // A QER more than the slots hold.
    let r = u.modify(seid, SessionModificationRequest { create_qer: vec![qer(7)], ..Default::default() });
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::NoResourcesAvailable, None));
    // Both sides as they were, both TEIDs where they were.
    assert_eq!(u.snapshot(seid), before);
    assert_eq!((u.seid_by_teid(0x100), u.seid_by_teid(0x200)), (Some(seid), Some(other)));
    // And a modification that fits is still taken.
    let fits = SessionModificationRequest {
        update_qer: vec![UpdateQer {
            qer_id: U32Ie(1),
            gate_status: None,
            mbr: Some(BitRate { ul_kbps: 8, dl_kbps: 8 }),
            gbr: None,
            qfi: None,
        }],
        ..Default::default()
    };
    assert_eq!(u.modify(seid, fits).cause.0, Cause::RequestAccepted);
    assert_ne!(u.snapshot(seid), before);
}

#[test]
fn choose_skips_teids_the_smf_assigned_and_a_freed_one_is_taken_again() {
    // The allocator's first TEID is 1: an SMF takes it first, a CHOOSE session then gets
    // another and is accepted.
    let mut u = Upf2::new(8, 8);
    let smf_owned = u.accepted(session(1, Some(1), ue(1)));
    let chosen = u.establish(session(2, None, ue(2)));
    assert_eq!(chosen.cause.0, Cause::RequestAccepted, "{chosen:?}");
    let Some(FTeid::Assigned { teid, .. }) = chosen.created_pdr[0].f_teid else { panic!("{chosen:?}") };
    assert_ne!(teid, 1);
    // Deleted, its TEID is another session's to assign.
    assert_eq!(u.delete(smf_owned).cause.0, Cause::RequestAccepted);
    let again = u.accepted(session(3, Some(1), ue(3)));
    assert_eq!(u.seid_by_teid(1), Some(again));
    // Moved by a modification to another TEID, the old one is free again.
    let moved = new_pdi(1, Some(uplink_at(0x777)));
    assert_eq!(u.modify(again, moved).cause.0, Cause::RequestAccepted);
    assert_eq!((u.seid_by_teid(1), u.seid_by_teid(0x777)), (None, Some(again)));
    u.accepted(session(4, Some(1), ue(4)));
}

#[test]
fn choose_skips_ue_addresses_the_smf_assigned_in_the_pool_and_a_freed_one_is_taken_again() {
    // The pool's first address is 198.19.7.1: an SMF assigns it first, a CHOOSE session
    // then gets another and is accepted.
    let first = Ipv4Addr::new(198, 19, 7, 1);
    let choose4 = UeIpAddress { choose_v4: true, ..Default::default() };
    let mut u = Upf2::new(8, 8);
    let smf_owned = u.accepted(session_ue(1, 0x101, UeIpAddress { ipv4: Some(first), ..Default::default() }));
    let chosen = u.establish(session_ue(2, 0x102, choose4));
    assert_eq!(chosen.cause.0, Cause::RequestAccepted, "{chosen:?}");
    let (a, _) = chosen_ue(&chosen);
    assert!(a.is_some_and(|a| a != first), "{a:?}");
    // Another session assigning it is refused as the dataplane refuses it.
    let r = u.establish(session_ue(3, 0x103, UeIpAddress { ipv4: Some(first), ..Default::default() }));
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::UE_IP_ADDRESS)));
    // Deleted, its address is CHOOSE's again.
    assert_eq!(u.delete(smf_owned).cause.0, Cause::RequestAccepted);
    let again = u.establish(session_ue(4, 0x104, choose4));
    assert_eq!(chosen_ue(&again).0, Some(first), "{again:?}");
    // Moved by a modification to another address, the old one is free again.
    let held = Ipv4Addr::new(198, 19, 7, 9);
    let owner = u.accepted(session_ue(5, 0x105, UeIpAddress { ipv4: Some(held), ..Default::default() }));
    let mut pdi = session_ue(5, 0x105, UeIpAddress { ipv4: Some(ue(5)), ..Default::default() }).create_pdr[1].pdi.clone();
    let moved = new_pdi(2, pdi.take());
    assert_eq!(u.modify(owner, moved).cause.0, Cause::RequestAccepted);
    u.accepted(session_ue(6, 0x106, UeIpAddress { ipv4: Some(held), ..Default::default() }));
}

#[test]
fn choose_skips_ue_ipv6_prefixes_the_smf_assigned_in_the_pool_and_a_freed_one_is_taken_again() {
    // The pool's first /64 is 2001:db8:7:1::/64: an SMF assigns an address in it, a CHOOSE
    // session then gets another prefix and is accepted.
    let first = Ipv6Addr::new(0x2001, 0xdb8, 7, 1, 0, 0, 0, 0x55);
    let choose6 = UeIpAddress { choose_v6: true, ..Default::default() };
    let mut u = Upf2::new(8, 8);
    let smf_owned = u.accepted(session_ue(1, 0x101, UeIpAddress { ipv6: Some(first), ..Default::default() }));
    let chosen = u.establish(session_ue(2, 0x102, choose6));
    assert_eq!(chosen.cause.0, Cause::RequestAccepted, "{chosen:?}");
    let (_, a) = chosen_ue(&chosen);
    assert!(a.is_some_and(|a| a.segments()[..4] != first.segments()[..4]), "{a:?}");
    // Another session assigning an address of that prefix is refused.
    let other = Ipv6Addr::new(0x2001, 0xdb8, 7, 1, 0, 0, 0, 0x66);
    let r = u.establish(session_ue(3, 0x103, UeIpAddress { ipv6: Some(other), ..Default::default() }));
    assert_eq!(refusal(r.cause, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(ty::UE_IP_ADDRESS)));
    // Deleted, its prefix is CHOOSE's again.
    assert_eq!(u.delete(smf_owned).cause.0, Cause::RequestAccepted);
    let again = u.establish(session_ue(4, 0x104, choose6));
    assert_eq!(chosen_ue(&again).1, Some(Ipv6Addr::new(0x2001, 0xdb8, 7, 1, 0, 0, 0, 0)), "{again:?}");
}
