//! The sans-IO UPF driven by a simulated SMF with virtual time: no sockets, no clock.

use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use pfcp::grouped::*;
use pfcp::header::{Header, MessageType};
use pfcp::ie::*;
use pfcp::message::*;
use pfcp::rules::GtpuEndpoint;
use pfcp::tlv::Ie;
use pfcp::upf::{Action, Config, Liveness, Upf, Usage};
use pfcp::{Cause, Message};

const SMF_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 1);
const UPF_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
const GNB: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 10);
const GNB2: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 11);

fn smf() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(SMF_IP), 8805)
}

struct Sim {
    upf: Upf,
    now: Instant,
    seq: u32,
}

impl Sim {
    fn new() -> Sim {
        let mut cfg = Config::new(NodeId::Ipv4(UPF_IP), 3_900_000_000);
        cfg.heartbeat_interval = Duration::from_secs(10);
        cfg.heartbeat_misses = 3;
        cfg.grace = Duration::from_secs(60);
        cfg.allowed_peers = vec![IpAddr::V4(SMF_IP)];
        cfg.n3_ipv4 = Some(UPF_IP);
        cfg.ue_pool_v4 = Some((Ipv4Addr::new(198, 19, 7, 0), 24));
        cfg.teid_worker_bits = 2;
        Sim { upf: Upf::new(cfg), now: Instant::now(), seq: 100 }
    }

    /// Sends a request from `from`; returns the one response.
    fn request_from(&mut self, from: SocketAddr, seid: Option<u64>, m: Message) -> (Header, Message) {
        self.seq += 1;
        let h = match seid {
            Some(s) => Header::session(m.msg_type(), s, self.seq),
            None => Header::node(m.msg_type(), self.seq),
        };
        self.upf.handle(self.now, from, &m.to_bytes(&h));
        let t = self.upf.poll_transmit().expect("a response");
        assert_eq!(t.dst, from);
        assert!(self.upf.poll_transmit().is_none());
        let (rh, rm) = Message::parse(&t.data).unwrap();
        assert_eq!(rh.seq, self.seq);
        (rh, rm)
    }
    fn request(&mut self, seid: Option<u64>, m: Message) -> (Header, Message) {
        self.request_from(smf(), seid, m)
    }

    fn associate(&mut self, rts: u32) -> AssociationResponse {
        let req = AssociationRequest {
            node_id: NodeId::Ipv4(SMF_IP),
            recovery_time_stamp: Some(U32Ie(rts)),
            up_function_features: None,
            cp_function_features: None,
        };
        match self.request(None, Message::AssociationSetupRequest(req)).1 {
            Message::AssociationSetupResponse(r) => r,
            m => panic!("{m:?}"),
        }
    }

    fn establish(&mut self, cp_seid: u64, r: SessionEstablishmentRequest) -> (Header, SessionEstablishmentResponse) {
        let _ = cp_seid;
        match self.request(Some(0), Message::SessionEstablishmentRequest(r)) {
            (h, Message::SessionEstablishmentResponse(r)) => (h, r),
            m => panic!("{m:?}"),
        }
    }

    fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.upf.poll_action()).collect()
    }

    fn advance(&mut self, secs: u64) -> Vec<(Header, Message)> {
        let end = self.now + Duration::from_secs(secs);
        let mut sent = Vec::new();
        while let Some(t) = self.upf.poll_timeout().filter(|t| *t <= end) {
            self.now = t.max(self.now);
            self.upf.handle_timeout(self.now);
            while let Some(tx) = self.upf.poll_transmit() {
                sent.push(Message::parse(&tx.data).unwrap());
            }
        }
        self.now = end;
        sent
    }
}

/// Uplink PDR on a chosen F-TEID, downlink PDR on a chosen UE address, FARs, QER, URR.
fn session_request(cp_seid: u64) -> SessionEstablishmentRequest {
    SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF_IP),
        cp_f_seid: FSeid { seid: cp_seid, ipv4: Some(SMF_IP), ipv6: None },
        create_pdr: vec![
            CreatePdr {
                pdr_id: U16Ie(1),
                precedence: Some(U32Ie(100)),
                pdi: Some(Pdi {
                    source_interface: Some(InterfaceIe(Interface::Access)),
                    f_teid: Some(FTeid::Choose { v4: true, v6: false, choose_id: Some(5) }),
                    ue_ip_address: Some(UeIpAddress { choose_v4: true, ..Default::default() }),
                    qfis: vec![Qfi(9)],
                    ..Default::default()
                }),
                outer_header_removal: Some(OuterHeaderRemoval { description: ohr::GTPU_UDP_IPV4, extension_deletion: None }),
                far_id: Some(U32Ie(1)),
                urr_ids: vec![U32Ie(1)],
                qer_ids: vec![U32Ie(1)],
            },
            CreatePdr {
                pdr_id: U16Ie(3),
                precedence: Some(U32Ie(50)),
                pdi: Some(Pdi {
                    source_interface: Some(InterfaceIe(Interface::Access)),
                    f_teid: Some(FTeid::Choose { v4: true, v6: false, choose_id: Some(5) }),
                    ..Default::default()
                }),
                outer_header_removal: None,
                far_id: Some(U32Ie(1)),
                urr_ids: vec![],
                qer_ids: vec![],
            },
            CreatePdr {
                pdr_id: U16Ie(2),
                precedence: Some(U32Ie(100)),
                pdi: Some(Pdi {
                    source_interface: Some(InterfaceIe(Interface::Core)),
                    ue_ip_address: Some(UeIpAddress { ipv4: Some(Ipv4Addr::new(198, 19, 8, 1)), destination: true, ..Default::default() }),
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
        create_urr: vec![CreateUrr {
            volume_threshold: Some(Volume { total: Some(1000), uplink: None, downlink: None }),
            volume_quota: Some(Volume { total: Some(5000), uplink: None, downlink: None }),
            ..CreateUrr::measuring(1, measurement_method::VOLUM, trigger::VOLTH | trigger::VOLQU)
        }],
        create_qer: vec![CreateQer {
            qer_id: U32Ie(1),
            gate_status: Some(GateStatus::default()),
            mbr: Some(BitRate { ul_kbps: 10_000, dl_kbps: 20_000 }),
            gbr: None,
            qfi: Some(Qfi(9)),
        }],
        create_bar: None,
        pdn_type: Some(U8Ie(1)),
    }
}

fn established(sim: &mut Sim, cp_seid: u64) -> (u64, SessionEstablishmentResponse) {
    let (h, r) = sim.establish(cp_seid, session_request(cp_seid));
    assert_eq!(h.seid, Some(cp_seid), "the response carries the SMF's SEID");
    assert_eq!(r.cause.0, Cause::RequestAccepted, "{r:?}");
    (r.up_f_seid.unwrap().seid, r)
}

#[test]
fn association_setup_update_release_are_answered() {
    let mut sim = Sim::new();
    let r = sim.associate(1);
    assert_eq!(r.cause.0, Cause::RequestAccepted);
    assert_eq!(r.node_id, NodeId::Ipv4(UPF_IP));
    assert_eq!(r.recovery_time_stamp, Some(U32Ie(3_900_000_000)));
    let f = r.up_function_features.unwrap();
    assert!(f.has(up_features::FTUP) && f.has(up_features::UEIP) && f.has(up_features::EMPU));
    assert!(f.has(up_features::DDND) && f.has(up_features::DLBD) && f.has(up_features::UDBC), "the BAR's parameters are applied");
    let upd = AssociationRequest {
        node_id: NodeId::Ipv4(SMF_IP),
        recovery_time_stamp: None,
        up_function_features: None,
        cp_function_features: None,
    };
    let Message::AssociationUpdateResponse(u) = sim.request(None, Message::AssociationUpdateRequest(upd)).1 else { panic!() };
    assert_eq!(u.cause.0, Cause::RequestAccepted);
    established(&mut sim, 7);
    sim.actions();
    let rel = AssociationReleaseRequest { node_id: NodeId::Ipv4(SMF_IP) };
    let Message::AssociationReleaseResponse(u) = sim.request(None, Message::AssociationReleaseRequest(rel.clone())).1 else { panic!() };
    assert_eq!(u.cause.0, Cause::RequestAccepted);
    assert!(matches!(sim.actions()[..], [Action::Remove { .. }]));
    assert_eq!(sim.upf.session_count(), 0);
    // A release naming another Node ID (pfcpsim sends 0.0.0.0) releases the sender's.
    sim.associate(1);
    let odd = AssociationReleaseRequest { node_id: NodeId::Ipv4(Ipv4Addr::UNSPECIFIED) };
    let Message::AssociationReleaseResponse(u) = sim.request(None, Message::AssociationReleaseRequest(odd)).1 else { panic!() };
    assert_eq!(u.cause.0, Cause::RequestAccepted);
    assert_eq!(sim.upf.associations().count(), 0);
    // Releasing again: answered, with the cause that says there is nothing to release.
    let Message::AssociationReleaseResponse(u) = sim.request(None, Message::AssociationReleaseRequest(rel)).1 else { panic!() };
    assert_eq!(u.cause.0, Cause::NoEstablishedAssociation);
}

#[test]
fn peers_outside_the_allow_list_are_not_heard() {
    let mut sim = Sim::new();
    let stranger = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 9, 9)), 8805);
    let hb = Message::HeartbeatRequest(Heartbeat { recovery_time_stamp: U32Ie(1) });
    sim.upf.handle(sim.now, stranger, &hb.to_bytes(&Header::node(MessageType::HeartbeatRequest, 1)));
    assert!(sim.upf.poll_transmit().is_none());
    assert_eq!(sim.upf.stats().unknown_peer, 1);
    let (_, m) = sim.request(None, hb);
    assert_eq!(m, Message::HeartbeatResponse(Heartbeat { recovery_time_stamp: U32Ie(3_900_000_000) }));
}

#[test]
fn establishment_allocates_on_choose_and_installs_rules() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (seid, r) = established(&mut sim, 0x1111);
    assert_eq!(r.up_f_seid.unwrap().ipv4, Some(UPF_IP));
    // PDRs 1 and 3 share CHOOSE ID 5: one TEID for both; PDR 1 also got a UE address.
    assert_eq!(r.created_pdr.len(), 2);
    let c1 = r.created_pdr.iter().find(|c| c.pdr_id == U16Ie(1)).unwrap();
    let c3 = r.created_pdr.iter().find(|c| c.pdr_id == U16Ie(3)).unwrap();
    let Some(FTeid::Assigned { teid, ipv4: Some(a), ipv6: None }) = c1.f_teid else { panic!("{c1:?}") };
    assert_eq!(a, UPF_IP);
    assert_ne!(teid, 0);
    assert_eq!(c3.f_teid, c1.f_teid);
    let ue = c1.ue_ip_address.unwrap().ipv4.unwrap();
    assert_eq!(ue.octets()[..3], [198, 19, 7]);
    let acts = sim.actions();
    let [Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    assert_eq!(rules.seid, seid);
    let ul = &rules.pdrs[&1];
    assert_eq!(ul.local_f_teid, Some(GtpuEndpoint { teid, addr: IpAddr::V4(UPF_IP) }));
    assert_eq!((ul.ue_ipv4, ul.qfi, ul.outer_header_removal, ul.precedence), (Some(ue), Some(9), true, 100));
    let dl = &rules.pdrs[&2];
    assert!(dl.ue_is_destination);
    assert_eq!(rules.fars[&2].outer_header, Some(GtpuEndpoint { teid: 0x200, addr: IpAddr::V4(GNB) }));
    assert_eq!(rules.qers[&1].mbr_dl_kbps, Some(20_000));
    assert_eq!(rules.urrs[&1].volume_quota[0], Some(5000));
    // A second session: another SEID, TEID and address; TEIDs go round the 4 workers.
    let (seid2, r2) = established(&mut sim, 0x2222);
    assert_ne!(seid2, seid);
    let Some(FTeid::Assigned { teid: teid2, .. }) = r2.created_pdr[0].f_teid else { panic!() };
    assert_ne!(teid2 & 3, teid & 3, "consecutive sessions land on different workers");
    assert_ne!(r2.created_pdr[0].ue_ip_address.unwrap().ipv4, Some(ue));
}

#[test]
fn establishment_rejections_name_cause_and_ie_and_change_nothing() {
    let mut sim = Sim::new();
    // No association yet.
    let (_, r) = sim.establish(1, session_request(1));
    assert_eq!(r.cause.0, Cause::NoEstablishedAssociation);
    sim.associate(1);
    // A PDR pointing at a FAR that does not exist.
    let mut bad = session_request(2);
    bad.create_pdr[2].far_id = Some(U32Ie(99));
    let (h, r) = sim.establish(2, bad);
    assert_eq!(h.seid, Some(2));
    assert_eq!((r.cause.0, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(U16Ie(ty::FAR_ID))));
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Pdr(2)), "the PDR whose FAR is missing");
    assert!(r.up_f_seid.is_none());
    assert!(sim.actions().is_empty());
    assert_eq!(sim.upf.session_count(), 0);
    // What the rejected request allocated went back: the next session gets the same.
    let mut sim2 = Sim::new();
    sim2.associate(1);
    let (_, fresh) = established(&mut sim2, 3);
    let (_, after) = established(&mut sim, 3);
    assert_eq!(after.created_pdr, fresh.created_pdr);
    // A FAR that forwards without Forwarding Parameters.
    let mut bad = session_request(4);
    bad.create_far[0].forwarding_parameters = None;
    let (_, r) = sim.establish(4, bad);
    assert_eq!((r.cause.0, r.offending_ie), (Cause::ConditionalIeMissing, Some(U16Ie(ty::FORWARDING_PARAMETERS))));
    assert_eq!(r.failed_rule_id, None, "only with Rule creation/modification failure");
    // Each refusal counted where an operator sees it (show pfcp associations, the
    // metrics), what was accepted not.
    assert_eq!(sim.upf.stats().requests_refused, 3);
    assert!(sim.upf.stats().named().contains(&("requests-refused", 3)));
}

/// A PDI's Source Interface is mandatory (TS 29.244 Table 7.5.2.2-2): without it the PDR
/// was taken as from Access, and a spare value (§8.2.2: 5 to 15) as whatever it was;
/// refused with 66 / 69 naming it, nothing kept, in an establishment and an Update PDR.
/// 5G VN internal (a 5G VN group's local switching, not offered) gets 76: such a PDR was
/// taken as uplink or downlink and matched N3 or N6 traffic.
#[test]
fn a_pdi_without_a_known_source_interface_is_refused_by_name() {
    let mut sim = Sim::new();
    sim.associate(1);
    for (si, cause) in [
        (None, Cause::MandatoryIeMissing),
        (Some(InterfaceIe(Interface::Unknown(7))), Cause::MandatoryIeIncorrect),
        (Some(InterfaceIe(Interface::VnInternal)), Cause::ServiceNotSupported),
    ] {
        let mut r = session_request(2);
        r.create_pdr[2].pdi.as_mut().unwrap().source_interface = si;
        let (_, r) = sim.establish(2, r);
        assert_eq!((r.cause.0, r.offending_ie), (cause, Some(U16Ie(ty::SOURCE_INTERFACE))), "{r:?}");
        assert_eq!(sim.upf.session_count(), 0);
        assert!(sim.actions().is_empty());
    }
    let (seid, _) = established(&mut sim, 3);
    let rules = sim.upf.session(seid).unwrap().clone();
    sim.actions();
    let mut pdi = session_request(3).create_pdr[2].pdi.clone().unwrap();
    pdi.source_interface = None;
    let update = UpdatePdr {
        pdr_id: U16Ie(2),
        precedence: None,
        pdi: Some(pdi),
        outer_header_removal: None,
        far_id: None,
        urr_ids: vec![],
        qer_ids: vec![],
    };
    let m = SessionModificationRequest { update_pdr: vec![update], ..Default::default() };
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
    assert_eq!((r.cause.0, r.offending_ie), (Cause::MandatoryIeMissing, Some(U16Ie(ty::SOURCE_INTERFACE))), "{r:?}");
    assert_eq!(sim.upf.session(seid), Some(&rules));
}

/// A Create for a rule id the session already has (or the request created just before)
/// is refused with 73 naming the Create IE; nothing changes and nothing chosen leaks.
#[test]
fn a_create_for_an_id_the_session_has_is_refused() {
    let mut sim = Sim::new();
    sim.associate(1);
    // Establishment: PDR 1 twice (both on CHOOSE: two TEIDs for one PDR id).
    let mut dup = session_request(2);
    let again = CreatePdr { precedence: Some(U32Ie(5)), ..dup.create_pdr[0].clone() };
    dup.create_pdr.push(again);
    let (_, r) = sim.establish(2, dup);
    assert_eq!((r.cause.0, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(U16Ie(ty::CREATE_PDR))), "{r:?}");
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Pdr(1)));
    assert!(r.created_pdr.is_empty() && r.up_f_seid.is_none());
    assert_eq!(sim.upf.session_count(), 0);
    let (seid, _) = established(&mut sim, 3);
    let rules = sim.upf.session(seid).unwrap().clone();
    sim.actions();
    // Modification: a Create FAR, QER or URR for an id in use.
    let drop_far2 = CreateFar { far_id: U32Ie(2), apply_action: Flags(apply_action::DROP), forwarding_parameters: None, bar_id: None };
    let qer1 = CreateQer { qer_id: U32Ie(1), gate_status: Some(GateStatus::default()), mbr: None, gbr: None, qfi: None };
    let urr1 = CreateUrr::measuring(1, measurement_method::VOLUM, 0);
    for (m, ie, rule) in [
        (SessionModificationRequest { create_far: vec![drop_far2.clone()], ..Default::default() }, ty::CREATE_FAR, FailedRuleId::Far(2)),
        (SessionModificationRequest { create_qer: vec![qer1], ..Default::default() }, ty::CREATE_QER, FailedRuleId::Qer(1)),
        (SessionModificationRequest { create_urr: vec![urr1], ..Default::default() }, ty::CREATE_URR, FailedRuleId::Urr(1)),
    ] {
        let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
        assert_eq!((r.cause.0, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(U16Ie(ie))), "{r:?}");
        assert_eq!(r.failed_rule_id, Some(rule));
        assert_eq!(sim.upf.session(seid), Some(&rules), "unchanged");
        assert!(sim.actions().is_empty());
    }
    // Removed first in the same request (Remove, then Create), the id is free again.
    let m = SessionModificationRequest { remove_far: vec![Remove(U32Ie(2))], create_far: vec![drop_far2], ..Default::default() };
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
    assert_eq!(r.cause.0, Cause::RequestAccepted, "{r:?}");
}

/// A refused modification changes nothing, the SMF's new F-SEID in it included: the
/// refusal and the UPF's later requests about the session carry the SEID still in force
/// (the SMF did not get the change it asked for); an accepted one takes it.
#[test]
fn a_refused_modification_keeps_the_smfs_f_seid() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (seid, _) = established(&mut sim, 0x11);
    let rules = sim.upf.session(seid).unwrap().clone();
    sim.actions();
    let moved = Some(FSeid { seid: 0x22, ipv4: Some(SMF_IP), ipv6: None });
    let bad = SessionModificationRequest {
        cp_f_seid: moved,
        update_far: vec![UpdateFar { far_id: U32Ie(99), apply_action: None, update_forwarding_parameters: None, bar_id: None }],
        ..Default::default()
    };
    let (h, m) = sim.request(Some(seid), Message::SessionModificationRequest(bad));
    let Message::SessionModificationResponse(r) = m else { panic!("{m:?}") };
    assert_eq!((r.cause.0, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(U16Ie(ty::UPDATE_FAR))), "{r:?}");
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Far(99)));
    assert_eq!(h.seid, Some(0x11), "the refusal goes to the SEID still in force");
    assert_eq!(sim.upf.session(seid), Some(&rules));
    assert!(sim.actions().is_empty());
    // A usage report about the session: to the SMF's SEID as it was.
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 700, dl_bytes: 700, ul_packets: 7, dl_packets: 7 });
    let report = sim.upf.poll_transmit().expect("a Session Report Request");
    let (h, m) = Message::parse(&report.data).unwrap();
    assert!(matches!(m, Message::SessionReportRequest(_)), "{m:?}");
    assert_eq!(h.seid, Some(0x11), "not the F-SEID of the refused modification");
    // Accepted, the new F-SEID is taken: its response and what follows carry it.
    let good = SessionModificationRequest { cp_f_seid: moved, ..Default::default() };
    let (h, m) = sim.request(Some(seid), Message::SessionModificationRequest(good));
    let Message::SessionModificationResponse(r) = m else { panic!("{m:?}") };
    assert_eq!(r.cause.0, Cause::RequestAccepted, "{r:?}");
    assert_eq!(h.seid, Some(0x22));
    let (h, m) = sim.request(Some(seid), Message::SessionDeletionRequest);
    assert!(matches!(m, Message::SessionDeletionResponse(ref d) if d.cause.0 == Cause::RequestAccepted), "{m:?}");
    assert_eq!(h.seid, Some(0x22));
}

#[test]
fn malformed_requests_are_answered_with_cause_and_offending_ie() {
    let mut sim = Sim::new();
    sim.associate(1);
    // A Session Establishment Request without its F-SEID.
    let mut b = Vec::new();
    let start = b.len();
    Header::session(MessageType::SessionEstablishmentRequest, 0, 9).emit(&mut b);
    NodeId::Ipv4(SMF_IP).emit(&mut b);
    Header::finish(&mut b, start);
    sim.upf.handle(sim.now, smf(), &b);
    let (h, m) = Message::parse(&sim.upf.poll_transmit().unwrap().data).unwrap();
    assert_eq!((h.msg_type, h.seq), (MessageType::SessionEstablishmentResponse, 9));
    let Message::SessionEstablishmentResponse(r) = m else { panic!() };
    assert_eq!((r.cause.0, r.offending_ie), (Cause::MandatoryIeMissing, Some(U16Ie(ty::F_SEID))));
    // An IE whose length runs past the message.
    let mut b = Vec::new();
    Header::node(MessageType::AssociationSetupRequest, 10).emit(&mut b);
    b.extend_from_slice(&[0, 60, 0, 40, 0, 198, 18, 7, 1]);
    Header::finish(&mut b, 0);
    sim.upf.handle(sim.now, smf(), &b);
    let Message::AssociationSetupResponse(r) = Message::parse(&sim.upf.poll_transmit().unwrap().data).unwrap().1 else { panic!() };
    assert_eq!(r.cause.0, Cause::InvalidLength);
    // Version 2: Version Not Supported, the sequence number echoed.
    let mut v2 =
        Message::HeartbeatRequest(Heartbeat { recovery_time_stamp: U32Ie(1) }).to_bytes(&Header::node(MessageType::HeartbeatRequest, 77));
    v2[0] = 0x40;
    sim.upf.handle(sim.now, smf(), &v2);
    let (h, m) = Message::parse(&sim.upf.poll_transmit().unwrap().data).unwrap();
    assert_eq!((h.seq, m), (77, Message::VersionNotSupportedResponse));
    // Garbage: nothing to answer, nothing broken.
    sim.upf.handle(sim.now, smf(), &[0x21, 0x32, 0, 1]);
    assert!(sim.upf.poll_transmit().is_none());
    // Unknown SEID.
    let (h, m) = sim.request(Some(0xdead), Message::SessionDeletionRequest);
    assert_eq!(h.seid, Some(0));
    let Message::SessionDeletionResponse(r) = m else { panic!() };
    assert_eq!(r.cause.0, Cause::SessionContextNotFound);
}

#[test]
fn a_repeated_request_gets_the_same_answer_and_runs_once() {
    let mut sim = Sim::new();
    sim.associate(1);
    let m = Message::SessionEstablishmentRequest(session_request(5));
    let b = m.to_bytes(&Header::session(MessageType::SessionEstablishmentRequest, 0, 4242));
    sim.upf.handle(sim.now, smf(), &b);
    let first = sim.upf.poll_transmit().unwrap();
    sim.upf.handle(sim.now, smf(), &b);
    let again = sim.upf.poll_transmit().unwrap();
    assert_eq!(first, again);
    assert_eq!(sim.upf.session_count(), 1);
    assert_eq!(sim.upf.stats().duplicate_requests, 1);
    assert!(matches!(sim.actions()[..], [Action::Install(_)]), "the repeat installed and removed nothing");
    // Forgotten after a while: the same sequence number is a new request then, an
    // establishment with the CP F-SEID of the session the first made, which it replaces.
    sim.advance(40);
    sim.upf.handle(sim.now, smf(), &b);
    let later = sim.upf.poll_transmit().unwrap();
    assert_ne!(later, first, "another session, under another UP SEID");
    assert_eq!(sim.upf.session_count(), 1);
    assert!(matches!(sim.actions()[..], [Action::Remove { .. }, Action::Install(_)]));
}

fn modify_cause(sim: &mut Sim, seid: u64) -> Cause {
    let m = SessionModificationRequest::default();
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
    r.cause.0
}

/// An establishment with the CP F-SEID of an existing session of the same SMF node (not
/// a repeat: a new sequence number) replaces it: the old session is deleted
/// (`Action::Remove` before the new `Action::Install`), the old UP SEID names no session
/// any more, and what the old one held is free — here the UE address the SMF assigned,
/// which another session could not take while it was held. Another CP SEID of the node,
/// or the same CP SEID at another address, is a session of its own; a refused
/// replacement still deletes the old session, which the SMF holds as gone.
#[test]
fn an_establishment_with_a_cp_f_seid_in_use_replaces_that_session() {
    let ue = Ipv4Addr::new(198, 19, 7, 200);
    let assigned = |cp_seid: u64| {
        let mut r = session_request(cp_seid);
        r.create_pdr[0].pdi.as_mut().unwrap().ue_ip_address = Some(UeIpAddress { ipv4: Some(ue), ..Default::default() });
        r
    };
    let accepted = |sim: &mut Sim, r: SessionEstablishmentRequest| {
        let (_, resp) = sim.establish(r.cp_f_seid.seid, r);
        (resp.cause.0 == Cause::RequestAccepted).then(|| resp.up_f_seid.unwrap().seid)
    };
    let mut sim = Sim::new();
    sim.associate(1);
    let old = accepted(&mut sim, assigned(0x77)).unwrap();
    assert_eq!(accepted(&mut sim, assigned(0x78)), None, "the UE address is held for the session");
    let other = accepted(&mut sim, session_request(0x78)).unwrap();
    let mut elsewhere = session_request(0x77);
    elsewhere.cp_f_seid.ipv4 = Some(Ipv4Addr::new(198, 18, 7, 99));
    let third = accepted(&mut sim, elsewhere).unwrap();
    sim.actions();
    assert_eq!(sim.upf.session_count(), 3);
    let new = accepted(&mut sim, assigned(0x77)).expect("the old session's UE address was freed first");
    assert_ne!(new, old);
    let acts = sim.actions();
    let [Action::Remove { seid }, Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    assert_eq!((*seid, rules.seid, rules.pdrs[&1].ue_ipv4), (old, new, Some(ue)));
    assert_eq!(sim.upf.session_count(), 3);
    assert!(sim.upf.session(old).is_none() && sim.upf.session(other).is_some() && sim.upf.session(third).is_some());
    assert_eq!((sim.upf.stats().sessions_replaced, sim.upf.stats().sessions_deleted), (1, 1));
    assert_eq!(modify_cause(&mut sim, old), Cause::SessionContextNotFound);
    assert_eq!(modify_cause(&mut sim, new), Cause::RequestAccepted);
    sim.actions();
    // A replacement the UPF refuses (a PDR naming a FAR it lacks) leaves no session under
    // that CP F-SEID.
    let mut bad = session_request(0x77);
    bad.create_pdr[0].far_id = Some(U32Ie(99));
    assert_eq!(accepted(&mut sim, bad), None);
    assert!(sim.upf.session(new).is_none());
    assert_eq!(sim.upf.session_count(), 2);
    assert!(matches!(sim.actions()[..], [Action::Remove { seid }] if seid == new));
}

/// A modification that gives a session a new CP F-SEID moves it: an establishment with
/// the new one replaces the session, one with the old one is a session of its own.
#[test]
fn a_cp_f_seid_moved_by_a_modification_is_the_one_replaced() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (old, _) = established(&mut sim, 0x77);
    let m = SessionModificationRequest { cp_f_seid: Some(FSeid { seid: 0x90, ipv4: Some(SMF_IP), ipv6: None }), ..Default::default() };
    let Message::SessionModificationResponse(r) = sim.request(Some(old), Message::SessionModificationRequest(m)).1 else { panic!() };
    assert_eq!(r.cause.0, Cause::RequestAccepted);
    let (beside, _) = established(&mut sim, 0x77);
    assert!(sim.upf.session(old).is_some() && sim.upf.session(beside).is_some(), "0x77 no longer names the first session");
    let (new, _) = established(&mut sim, 0x90);
    assert!(sim.upf.session(old).is_none() && sim.upf.session(new).is_some());
    assert_eq!((sim.upf.session_count(), sim.upf.stats().sessions_replaced), (2, 1));
}

/// A restarted SMF at the same address and port numbers its requests from the start
/// again, within the time answers are remembered: they are new requests (a repeat is the
/// same message again), not repeats to be answered from the previous life.
#[test]
fn a_restarted_smf_reusing_sequence_numbers_is_heard_anew() {
    let mut sim = Sim::new();
    sim.seq = 0;
    sim.associate(1);
    let (old, _) = established(&mut sim, 5);
    sim.actions();
    sim.advance(2);
    sim.seq = 0;
    let r = sim.associate(2);
    assert_eq!(r.cause.0, Cause::RequestAccepted);
    assert_eq!(sim.upf.session_count(), 0, "the restart was seen: the old session is gone");
    assert!(matches!(sim.actions()[..], [Action::Remove { seid }] if seid == old));
    // The same establishment as before, with the same number: a session of its own.
    let (new, _) = established(&mut sim, 5);
    assert_ne!(new, old);
    assert_eq!(sim.upf.session_count(), 1);
    assert_eq!(sim.upf.stats().duplicate_requests, 0);
    // Without a restart, another message under a number already answered is new too.
    sim.seq -= 1;
    let Message::SessionDeletionResponse(d) = sim.request(Some(new), Message::SessionDeletionRequest).1 else {
        panic!("a deletion's answer, not the establishment's again")
    };
    assert_eq!(d.cause.0, Cause::RequestAccepted);
    assert_eq!(sim.upf.session_count(), 0);
}

/// Our requests go to PFCP's port on the SMF (TS 29.244 §4.2.2), whatever port it sends
/// its own from (an SMF may use another for its requests, Cisco's 8809); responses go
/// back to the request's port. Without `smf_port`, requests go where the SMF's
/// Association Setup came from.
#[test]
fn our_requests_go_to_port_8805_whatever_port_the_smf_sends_from() {
    let from = SocketAddr::new(IpAddr::V4(SMF_IP), 8809);
    for (smf_port, dst) in [(Some(8805), SocketAddr::new(IpAddr::V4(SMF_IP), 8805)), (None, from)] {
        let mut sim = Sim::new();
        sim.upf = Upf::new(Config { smf_port, ..sim.upf.config().clone() });
        let req = AssociationRequest {
            node_id: NodeId::Ipv4(SMF_IP),
            recovery_time_stamp: Some(U32Ie(1)),
            up_function_features: None,
            cp_function_features: None,
        };
        sim.request_from(from, None, Message::AssociationSetupRequest(req));
        let (h, r) = sim.request_from(from, Some(0), Message::SessionEstablishmentRequest(session_request(9)));
        assert_eq!(h.msg_type, MessageType::SessionEstablishmentResponse, "answered at {from}");
        let Message::SessionEstablishmentResponse(r) = r else { panic!() };
        let seid = r.up_f_seid.unwrap().seid;
        sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 700, dl_bytes: 700, ul_packets: 7, dl_packets: 7 });
        let report = sim.upf.poll_transmit().unwrap();
        assert_eq!(report.dst, dst, "the Session Report Request");
        sim.now += Duration::from_secs(10);
        sim.upf.handle_timeout(sim.now);
        let hb = std::iter::from_fn(|| sim.upf.poll_transmit())
            .find(|t| matches!(Message::parse(&t.data), Ok((_, Message::HeartbeatRequest(_)))))
            .expect("a Heartbeat Request");
        assert_eq!(hb.dst, dst, "the Heartbeat Request");
    }
}

#[test]
fn a_silent_peer_is_lost_but_its_sessions_outlive_it_for_the_grace_period() {
    let mut sim = Sim::new();
    sim.associate(1);
    established(&mut sim, 1);
    sim.actions();
    // Heartbeats every 10 s from t = 10 s; the intervals ending at 20, 30 and 40 s pass
    // without a word from the SMF: lost at t = 40 s.
    let sent = sim.advance(39);
    assert_eq!(sent.iter().filter(|(h, _)| h.msg_type == MessageType::HeartbeatRequest).count(), 3);
    assert_eq!(sim.upf.associations().next().unwrap().liveness, Liveness::Up);
    sim.advance(2);
    assert!(matches!(sim.upf.associations().next().unwrap().liveness, Liveness::Lost { .. }));
    // The grace period (60 s) is not over: the session stays, heartbeats go on.
    let sent = sim.advance(58);
    assert!(sent.iter().any(|(h, _)| h.msg_type == MessageType::HeartbeatRequest));
    assert_eq!(sim.upf.session_count(), 1);
    assert!(sim.actions().is_empty());
    sim.advance(2);
    assert_eq!(sim.upf.session_count(), 0);
    assert!(matches!(sim.actions()[..], [Action::Remove { .. }]));
    assert_eq!(sim.upf.associations().count(), 0);
    assert_eq!(sim.upf.stats().peers_lost, 1);
}

#[test]
fn a_peer_back_within_the_grace_period_keeps_everything() {
    let mut sim = Sim::new();
    sim.associate(1);
    established(&mut sim, 1);
    sim.actions();
    sim.advance(55);
    assert!(matches!(sim.upf.associations().next().unwrap().liveness, Liveness::Lost { .. }));
    // The SMF's own heartbeat, with the same Recovery Time Stamp, brings it back.
    sim.request(None, Message::HeartbeatRequest(Heartbeat { recovery_time_stamp: U32Ie(1) }));
    assert_eq!(sim.upf.associations().next().unwrap().liveness, Liveness::Up);
    // Answering our heartbeats from now on keeps it up well past the old grace deadline.
    for _ in 0..20 {
        for (h, m) in sim.advance(10) {
            if let Message::HeartbeatRequest(_) = m {
                let resp = Message::HeartbeatResponse(Heartbeat { recovery_time_stamp: U32Ie(1) });
                sim.upf.handle(sim.now, smf(), &resp.to_bytes(&Header::node(MessageType::HeartbeatResponse, h.seq)));
            }
        }
    }
    assert_eq!(sim.upf.session_count(), 1);
    assert_eq!(sim.upf.associations().next().unwrap().liveness, Liveness::Up);
    assert!(sim.actions().is_empty());
}

#[test]
fn a_peer_restart_deletes_its_sessions() {
    let mut sim = Sim::new();
    sim.associate(1);
    established(&mut sim, 1);
    // Setup again with the same Recovery Time Stamp: sessions kept.
    sim.associate(1);
    assert_eq!(sim.upf.session_count(), 1);
    // A heartbeat with a new stamp: the SMF restarted; its sessions go.
    sim.actions();
    sim.request(None, Message::HeartbeatRequest(Heartbeat { recovery_time_stamp: U32Ie(2) }));
    assert_eq!(sim.upf.session_count(), 0);
    assert!(matches!(sim.actions()[..], [Action::Remove { .. }]));
    // Setup after a restart (new stamp) also clears what was left.
    sim.associate(2);
    established(&mut sim, 1);
    sim.associate(3);
    assert_eq!(sim.upf.session_count(), 0);
}

/// Two SMF nodes at one address (different Node IDs, different ports): associations are
/// keyed by Node ID (TS 29.244 §6.2.6), and a new Recovery Time Stamp means that node
/// restarted: its sessions go, the other's stay. A heartbeat names no node: it is the
/// node's that sent it from its port (a response, the node our request went to); one
/// from neither node's port restarts neither. Each round is a fresh UPF, its tables laid
/// out anew (the restart went to either node by the order they were kept in).
#[test]
fn a_restart_of_one_of_two_smf_nodes_at_one_address_deletes_only_its_sessions() {
    let port = |p| SocketAddr::new(IpAddr::V4(SMF_IP), p);
    let (a, b) = (NodeId::Fqdn(b"\x05smf-a\x07example".to_vec()), NodeId::Fqdn(b"\x05smf-b\x07example".to_vec()));
    let hb = |rts| Message::HeartbeatRequest(Heartbeat { recovery_time_stamp: U32Ie(rts) });
    for _ in 0..16 {
        let mut sim = Sim::new();
        let mut seids = Vec::new();
        for (node, from, rts) in [(&a, port(8805), 1), (&b, port(8806), 7)] {
            let setup = AssociationRequest {
                node_id: node.clone(),
                recovery_time_stamp: Some(U32Ie(rts)),
                up_function_features: None,
                cp_function_features: None,
            };
            sim.request_from(from, None, Message::AssociationSetupRequest(setup));
            let req = SessionEstablishmentRequest { node_id: node.clone(), ..session_request(rts.into()) };
            let (_, Message::SessionEstablishmentResponse(r)) = sim.request_from(from, Some(0), Message::SessionEstablishmentRequest(req))
            else {
                panic!()
            };
            assert_eq!(r.cause.0, Cause::RequestAccepted, "{r:?}");
            seids.push(r.up_f_seid.unwrap().seid);
        }
        sim.actions();
        let (sa, sb) = (seids[0], seids[1]);
        // Node A's stamp unchanged, from A's port; node B's new one from B's port.
        sim.request_from(port(8805), None, hb(1));
        assert!(sim.actions().is_empty());
        sim.request_from(port(8806), None, hb(8));
        assert_eq!(sim.actions(), [Action::Remove { seid: sb }], "B restarted, not A");
        assert!(sim.upf.session(sa).is_some());
        assert_eq!(sim.upf.associations().map(|x| &x.node_id).collect::<Vec<_>>(), [&a]);
        // From neither port (A's stamp or not): nobody's restart.
        sim.now += Duration::from_secs(5);
        let setup = AssociationRequest {
            node_id: b.clone(),
            recovery_time_stamp: Some(U32Ie(8)),
            up_function_features: None,
            cp_function_features: None,
        };
        sim.request_from(port(8806), None, Message::AssociationSetupRequest(setup));
        let req = SessionEstablishmentRequest { node_id: b.clone(), ..session_request(9) };
        let (_, Message::SessionEstablishmentResponse(r)) =
            sim.request_from(port(8806), Some(0), Message::SessionEstablishmentRequest(req))
        else {
            panic!()
        };
        let sb = r.up_f_seid.unwrap().seid;
        sim.actions();
        sim.request_from(port(9999), None, hb(1));
        sim.request_from(port(9999), None, hb(3));
        assert!(sim.actions().is_empty(), "a heartbeat from neither node's port");
        // Our heartbeats go to PFCP's port on the address, which is A's: A's (due first, A
        // set up 5 s before B) is answered with A's stamp, B's with a new one.
        for rts in [1, 9] {
            sim.now += Duration::from_secs(5);
            sim.upf.handle_timeout(sim.now);
            let ours: Vec<_> = std::iter::from_fn(|| sim.upf.poll_transmit()).collect();
            assert_eq!(ours.len(), 1, "one Heartbeat Request");
            let (h, _) = Message::parse(&ours[0].data).unwrap();
            assert_eq!(ours[0].dst, port(8805));
            let resp = Message::HeartbeatResponse(Heartbeat { recovery_time_stamp: U32Ie(rts) });
            sim.upf.handle(sim.now, port(8805), &resp.to_bytes(&Header::node(MessageType::HeartbeatResponse, h.seq)));
        }
        assert_eq!(
            sim.actions(),
            [Action::Remove { seid: sb }],
            "B restarted again: the response to its heartbeat is its own, whatever port it came from"
        );
        assert!(sim.upf.session(sa).is_some());
    }
}

#[test]
fn handover_sends_end_markers_on_the_old_path() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (seid, _) = established(&mut sim, 0x77);
    sim.actions();
    let m = SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: U32Ie(2),
            apply_action: None,
            update_forwarding_parameters: Some(UpdateForwardingParameters {
                outer_header_creation: Some(OuterHeaderCreation::gtpu(0x300, Some(GNB2), None)),
                smreq_flags: Some(Flags(smreq_flags::SNDEM)),
                ..Default::default()
            }),
            bar_id: None,
        }],
        ..Default::default()
    };
    let (h, r) = sim.request(Some(seid), Message::SessionModificationRequest(m));
    assert_eq!(h.seid, Some(0x77));
    let Message::SessionModificationResponse(r) = r else { panic!() };
    assert_eq!(r.cause.0, Cause::RequestAccepted);
    let acts = sim.actions();
    let [Action::Install(rules), Action::EndMarker { seid: s, old }] = &acts[..] else { panic!("{acts:?}") };
    assert_eq!(*s, seid);
    assert_eq!(*old, GtpuEndpoint { teid: 0x200, addr: IpAddr::V4(GNB) });
    assert_eq!(rules.fars[&2].outer_header, Some(GtpuEndpoint { teid: 0x300, addr: IpAddr::V4(GNB2) }));
    // A rejected modification (unknown FAR) leaves the session as it was.
    let bad = SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: U32Ie(9),
            apply_action: Some(Flags(apply_action::DROP)),
            update_forwarding_parameters: None,
            bar_id: None,
        }],
        remove_pdr: vec![Remove(U16Ie(1))],
        ..Default::default()
    };
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(bad)).1 else { panic!() };
    assert_eq!((r.cause.0, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(U16Ie(ty::UPDATE_FAR))));
    assert!(sim.actions().is_empty());
    assert!(sim.upf.session(seid).unwrap().pdrs.contains_key(&1));
}

/// The SMF's Transport Level Marking (TS 29.244 §8.2.12) of a FAR's outer header comes
/// with the FAR from its Forwarding Parameters and changes with an Update FAR's.
#[test]
fn transport_level_marking_reaches_the_far_and_follows_an_update() {
    let mut sim = Sim::new();
    sim.associate(1);
    let mut req = session_request(0x78);
    let fp = req.create_far[1].forwarding_parameters.as_mut().unwrap();
    fp.transport_level_marking = Some(TransportLevelMarking { tos: 46 << 2, mask: 0xfc });
    let (_, r) = sim.establish(0x78, req);
    assert_eq!(r.cause.0, Cause::RequestAccepted, "{r:?}");
    let seid = r.up_f_seid.unwrap().seid;
    let acts = sim.actions();
    let Some(Action::Install(rules)) = acts.first() else { panic!("{acts:?}") };
    assert_eq!(rules.fars[&2].transport_marking, Some((46 << 2, 0xfc)));
    assert_eq!(rules.fars[&1].transport_marking, None);
    let m = SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: U32Ie(2),
            apply_action: None,
            update_forwarding_parameters: Some(UpdateForwardingParameters {
                transport_level_marking: Some(TransportLevelMarking { tos: 10 << 2, mask: 0xfc }),
                ..Default::default()
            }),
            bar_id: None,
        }],
        ..Default::default()
    };
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
    assert_eq!(r.cause.0, Cause::RequestAccepted);
    let acts = sim.actions();
    let Some(Action::Install(rules)) = acts.first() else { panic!("{acts:?}") };
    assert_eq!(rules.fars[&2].transport_marking, Some((10 << 2, 0xfc)));
    assert_eq!(rules.fars[&2].outer_header, Some(GtpuEndpoint { teid: 0x200, addr: IpAddr::V4(GNB) }), "the rest of the FAR kept");
}

#[test]
fn usage_thresholds_quotas_and_deletion_are_reported() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (seid, _) = established(&mut sim, 0x55);
    sim.actions();
    // Below the 1000-octet threshold: nothing.
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 400, dl_bytes: 500, ul_packets: 4, dl_packets: 5 });
    assert!(sim.upf.poll_transmit().is_none());
    // Over it: a Session Report Request to the SMF with the SMF's SEID.
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 600, dl_bytes: 600, ul_packets: 6, dl_packets: 6 });
    let t = sim.upf.poll_transmit().unwrap();
    assert_eq!(t.dst, smf());
    let (h, m) = Message::parse(&t.data).unwrap();
    assert_eq!(h.seid, Some(0x55));
    let Message::SessionReportRequest(r) = m else { panic!() };
    assert!(r.report_type.has(report_type::USAR));
    let ur = &r.usage_report[0];
    assert!(ur.trigger.has(trigger::VOLTH) && !ur.trigger.has(trigger::VOLQU));
    assert_eq!(ur.volume.unwrap().total, Some(1200));
    assert_eq!(ur.volume.unwrap().uplink_packets, Some(6));
    // Not answered: retransmitted after 3 s, up to 3 times, then given up.
    let sent = sim.advance(4);
    assert_eq!(sent.iter().filter(|(h2, _)| h2.seq == h.seq).count(), 1);
    let resp = Message::SessionReportResponse(SessionReportResponse {
        cause: CauseIe(Cause::RequestAccepted),
        offending_ie: None,
        update_bar: None,
        flags: None,
    });
    sim.upf.handle(sim.now, smf(), &resp.to_bytes(&Header::session(MessageType::SessionReportResponse, seid, h.seq)));
    let sent = sim.advance(9);
    assert!(sent.iter().all(|(h2, _)| h2.seq != h.seq), "answered: no more retransmissions");
    // Total 5000 reached: quota report, and the URR is marked exhausted in reinstalled rules.
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 2500, dl_bytes: 2600, ul_packets: 25, dl_packets: 26 });
    let Message::SessionReportRequest(r) = Message::parse(&sim.upf.poll_transmit().unwrap().data).unwrap().1 else { panic!() };
    assert!(r.usage_report[0].trigger.has(trigger::VOLQU), "{r:?}");
    let acts = sim.actions();
    let [Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    assert!(rules.urrs[&1].quota_exhausted);
    // Deletion: the final report with what was counted since the last one.
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 2500, dl_bytes: 2700, ul_packets: 25, dl_packets: 27 });
    let (_, m) = sim.request(Some(seid), Message::SessionDeletionRequest);
    let Message::SessionDeletionResponse(d) = m else { panic!() };
    assert_eq!(d.cause.0, Cause::RequestAccepted);
    let ur = &d.usage_report[0];
    assert!(ur.trigger.has(trigger::TERMR));
    assert_eq!(ur.volume.unwrap().downlink, Some(100));
    assert!(matches!(sim.actions()[..], [Action::Remove { seid: s }] if s == seid));
}

#[test]
fn a_report_never_answered_is_retransmitted_then_given_up_and_counted() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (seid, _) = established(&mut sim, 0x56);
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 700, dl_bytes: 700, ul_packets: 7, dl_packets: 7 });
    let (h, _) = Message::parse(&sim.upf.poll_transmit().unwrap().data).unwrap();
    assert_eq!(sim.upf.stats().report_timeouts, 0);
    let sent = sim.advance(20);
    assert_eq!(sent.iter().filter(|(h2, _)| h2.seq == h.seq).count(), 3, "request_retries retransmissions");
    assert_eq!(sim.upf.stats().report_timeouts, 1, "the lost report is counted: {:?}", sim.upf.stats());
    assert!(sim.advance(20).iter().all(|(h2, _)| h2.seq != h.seq), "then no more");
}

#[test]
fn a_removed_urr_reports_its_last_usage_in_the_modification_response() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (seid, _) = established(&mut sim, 0x57);
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 300, dl_bytes: 400, ul_packets: 3, dl_packets: 4 });
    // The PDRs count into a new URR 2 and URR 1 goes: what URR 1 counted is reported now,
    // or never.
    let to_urr2 = |id| UpdatePdr {
        pdr_id: U16Ie(id),
        precedence: None,
        pdi: None,
        outer_header_removal: None,
        far_id: None,
        urr_ids: vec![U32Ie(2)],
        qer_ids: vec![],
    };
    let m = SessionModificationRequest {
        create_urr: vec![CreateUrr::measuring(2, measurement_method::VOLUM, trigger::VOLTH)],
        update_pdr: vec![to_urr2(1), to_urr2(2)],
        remove_urr: vec![Remove(U32Ie(1))],
        ..Default::default()
    };
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
    assert_eq!(r.cause.0, Cause::RequestAccepted, "{r:?}");
    let [ur] = &r.usage_report[..] else { panic!("one report, for URR 1: {r:?}") };
    assert_eq!(ur.urr_id, U32Ie(1));
    assert!(ur.trigger.has(trigger::TERMR), "{ur:?}");
    let v = ur.volume.unwrap();
    assert_eq!((v.uplink, v.downlink, v.total, v.total_packets), (Some(300), Some(400), Some(700), Some(7)));
    // The deletion reports URR 2 alone.
    let Message::SessionDeletionResponse(d) = sim.request(Some(seid), Message::SessionDeletionRequest).1 else { panic!() };
    assert_eq!(d.usage_report.iter().map(|u| u.urr_id.0).collect::<Vec<_>>(), vec![2]);
}

/// Query URR (TS 29.244 §5.2.2.3.2): the URR's usage since its last report comes in the
/// response (trigger IMMER), and counts start again from there. A query of a URR the
/// session lacks is refused with 73 naming Query URR and the URR, nothing reported or
/// reset: it was accepted with no report, as if the URR had counted nothing.
#[test]
fn query_urr_reports_the_usage_and_a_query_of_no_urr_is_refused() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (seid, _) = established(&mut sim, 1);
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 300, dl_bytes: 200, ul_packets: 3, dl_packets: 2 });
    let query = |id| SessionModificationRequest { query_urr: vec![Remove(U32Ie(id))], ..Default::default() };
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(query(9))).1 else {
        panic!()
    };
    assert_eq!((r.cause.0, r.offending_ie), (Cause::RuleCreationModificationFailure, Some(U16Ie(ty::QUERY_URR))), "{r:?}");
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Urr(9)));
    assert!(r.usage_report.is_empty());
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(query(1))).1 else {
        panic!()
    };
    assert_eq!(r.cause.0, Cause::RequestAccepted, "{r:?}");
    let [report] = &r.usage_report[..] else { panic!("{r:?}") };
    assert_eq!((report.urr_id.0, report.trigger.0), (1, trigger::LIUSA_OR_IMMER));
    let v = report.volume.unwrap();
    assert_eq!((v.total, v.uplink, v.downlink), (Some(500), Some(300), Some(200)), "all of it: the refused query reset nothing");
}

#[test]
fn one_downlink_data_report_per_buffering_episode() {
    let mut sim = Sim::new();
    sim.associate(1);
    let (seid, _) = established(&mut sim, 0x66);
    sim.upf.downlink_data(sim.now, seid, 2);
    let Message::SessionReportRequest(r) = Message::parse(&sim.upf.poll_transmit().unwrap().data).unwrap().1 else { panic!() };
    assert!(r.report_type.has(report_type::DLDR));
    assert_eq!(r.downlink_data_report.unwrap().pdr_ids, vec![U16Ie(2)]);
    sim.upf.downlink_data(sim.now, seid, 2);
    assert!(sim.upf.poll_transmit().is_none());
    // After a modification, the next buffered packet is reported again.
    sim.request(Some(seid), Message::SessionModificationRequest(SessionModificationRequest::default()));
    sim.upf.downlink_data(sim.now, seid, 2);
    assert!(sim.upf.poll_transmit().is_some());
}

/// A session whose one URR is `urr` (the session of [`session_request`] otherwise).
fn established_with_urr(sim: &mut Sim, cp_seid: u64, urr: CreateUrr) -> u64 {
    let mut r = session_request(cp_seid);
    r.create_urr = vec![urr];
    let (h, resp) = sim.establish(cp_seid, r);
    assert_eq!((h.seid, resp.cause.0), (Some(cp_seid), Cause::RequestAccepted), "{resp:?}");
    sim.actions();
    resp.up_f_seid.unwrap().seid
}

fn time_urr(triggers: u64) -> CreateUrr {
    CreateUrr::measuring(1, measurement_method::DURAT | measurement_method::VOLUM, triggers)
}

/// Advance the virtual time by `secs` as an SMF that answers every Session Report
/// Request and heartbeat would; returns the usage reports received.
fn reports_over(sim: &mut Sim, secs: u64) -> Vec<UsageReportSrr> {
    let end = sim.now + Duration::from_secs(secs);
    let mut out = Vec::new();
    loop {
        while let Some(tx) = sim.upf.poll_transmit() {
            let (h, m) = Message::parse(&tx.data).unwrap();
            let answer = match m {
                Message::SessionReportRequest(r) => {
                    assert!(r.report_type.has(report_type::USAR), "{r:?}");
                    out.extend(r.usage_report);
                    let resp =
                        SessionReportResponse { cause: CauseIe(Cause::RequestAccepted), offending_ie: None, update_bar: None, flags: None };
                    Message::SessionReportResponse(resp).to_bytes(&Header::session(MessageType::SessionReportResponse, 0, h.seq))
                }
                Message::HeartbeatRequest(_) => Message::HeartbeatResponse(Heartbeat { recovery_time_stamp: U32Ie(1) })
                    .to_bytes(&Header::node(MessageType::HeartbeatResponse, h.seq)),
                m => panic!("{m:?}"),
            };
            sim.upf.handle(sim.now, smf(), &answer);
        }
        match sim.upf.poll_timeout().filter(|t| *t <= end) {
            Some(t) => {
                sim.now = t.max(sim.now);
                sim.upf.handle_timeout(sim.now);
            }
            None => break,
        }
    }
    sim.now = end;
    out
}

fn traffic(ul: u64) -> Usage {
    Usage { ul_bytes: ul, dl_bytes: 0, ul_packets: ul / 100, dl_packets: 0 }
}

#[test]
fn periodic_reports_come_each_measurement_period_with_duration_and_times() {
    let mut sim = Sim::new();
    sim.associate(1); // the first time the UPF was given: its Recovery Time Stamp's time
    let rts = sim.upf.config().recovery_time_stamp;
    let mut u = time_urr(trigger::PERIO);
    u.measurement_period = Some(U32Ie(10));
    let seid = established_with_urr(&mut sim, 0x71, u);
    let created = rts; // established at the UPF's first time
    assert!(reports_over(&mut sim, 4).is_empty());
    sim.upf.usage(sim.now, seid, 1, traffic(300)); // first traffic at 4 s
    let r = reports_over(&mut sim, 7); // to 11 s: the report at 10 s
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].trigger.has(trigger::PERIO) && !r[0].trigger.has(trigger::TIMTH));
    assert_eq!(r[0].volume.unwrap().uplink, Some(300));
    assert_eq!(r[0].duration, Some(U32Ie(6)), "traffic time: from the first traffic");
    assert_eq!((r[0].start_time, r[0].end_time), (Some(U32Ie(created)), Some(U32Ie(rts + 10))), "the window: from creation");
    sim.upf.usage(sim.now, seid, 1, traffic(500));
    // Three more periods: 20, 30, 40 s; the second and third with no new traffic.
    let r = reports_over(&mut sim, 30);
    assert_eq!(
        r.iter().map(|r| (r.volume.unwrap().uplink.unwrap(), r.duration.unwrap().0)).collect::<Vec<_>>(),
        [(200, 10), (0, 10), (0, 10)]
    );
    assert_eq!(r.iter().map(|r| r.ur_seqn.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(r[2].end_time, Some(U32Ie(rts + 40)));
    assert!(r.windows(2).all(|w| w[1].start_time.map(|t| t.0) == w[0].end_time.map(|t| t.0)), "the windows tile the time");
    // A deleted session's timer comes to nothing.
    sim.request(Some(seid), Message::SessionDeletionRequest);
    assert!(reports_over(&mut sim, 30).is_empty());
    assert!(sim.upf.poll_timeout().is_none_or(|t| t > sim.now), "no timer left due");
}

#[test]
fn a_period_without_traffic_reports_no_time() {
    let mut sim = Sim::new();
    sim.associate(1);
    let mut u = time_urr(trigger::PERIO);
    u.measurement_period = Some(U32Ie(5));
    established_with_urr(&mut sim, 0x74, u);
    let r = reports_over(&mut sim, 11);
    assert_eq!(r.iter().map(|r| (r.duration, r.volume.unwrap().total)).collect::<Vec<_>>(), [(Some(U32Ie(0)), Some(0)); 2]);
}

#[test]
fn a_time_threshold_reports_after_that_much_traffic_time() {
    let mut sim = Sim::new();
    sim.associate(1);
    let mut u = time_urr(trigger::TIMTH);
    u.time_threshold = Some(U32Ie(30));
    let seid = established_with_urr(&mut sim, 0x72, u);
    assert!(reports_over(&mut sim, 100).is_empty(), "no traffic: no time counted");
    sim.upf.usage(sim.now, seid, 1, traffic(100));
    assert!(reports_over(&mut sim, 29).is_empty());
    let r = reports_over(&mut sim, 2);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].trigger.has(trigger::TIMTH));
    assert_eq!(r[0].duration, Some(U32Ie(30)));
    // Measured again from the report: the next one 30 s later.
    assert!(reports_over(&mut sim, 28).is_empty());
    assert_eq!(reports_over(&mut sim, 2).len(), 1);
}

#[test]
fn a_time_quota_used_up_stops_the_traffic_until_a_new_one() {
    let mut sim = Sim::new();
    sim.associate(1);
    let mut u = time_urr(trigger::TIMQU);
    u.time_quota = Some(U32Ie(20));
    let seid = established_with_urr(&mut sim, 0x73, u);
    reports_over(&mut sim, 50);
    sim.upf.usage(sim.now, seid, 1, traffic(100)); // the quota starts being used
    assert!(reports_over(&mut sim, 19).is_empty());
    assert!(sim.actions().is_empty());
    let r = reports_over(&mut sim, 2);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].trigger.has(trigger::TIMQU));
    assert_eq!(r[0].duration, Some(U32Ie(20)));
    let acts = sim.actions();
    let [Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    assert!(rules.urrs[&1].quota_exhausted, "the PDRs counting into it stop");
    assert!(reports_over(&mut sim, 100).is_empty(), "reported once");
    // A new time quota of 5 s: traffic flows again, and stops 5 s later.
    let upd = SessionModificationRequest {
        update_urr: vec![UpdateUrr {
            urr_id: U32Ie(1),
            measurement_method: None,
            reporting_triggers: None,
            measurement_period: None,
            volume_threshold: None,
            volume_quota: None,
            time_threshold: None,
            time_quota: Some(U32Ie(5)),
        }],
        ..Default::default()
    };
    let (_, m) = sim.request(Some(seid), Message::SessionModificationRequest(upd));
    assert!(matches!(m, Message::SessionModificationResponse(ref r) if r.cause.0 == Cause::RequestAccepted), "{m:?}");
    let acts = sim.actions();
    let [Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    assert!(!rules.urrs[&1].quota_exhausted);
    assert!(reports_over(&mut sim, 4).is_empty());
    let r = reports_over(&mut sim, 2);
    assert!(r.len() == 1 && r[0].trigger.has(trigger::TIMQU), "{r:?}");
    assert!(matches!(&sim.actions()[..], [Action::Install(rules)] if rules.urrs[&1].quota_exhausted));
}

// ---- BAR: buffering instructions ----

/// The session of [`session_request`] with its downlink FAR buffering (BUFF + NOCP) under
/// BAR 3: a Downlink Data Notification Delay of `delay_50ms` × 50 ms, at most `count`
/// packets held.
fn established_buffering(sim: &mut Sim, cp_seid: u64, delay_50ms: u8, count: Option<u8>) -> u64 {
    let mut r = session_request(cp_seid);
    r.create_far[1].apply_action = Flags(apply_action::BUFF | apply_action::NOCP);
    r.create_far[1].bar_id = Some(U8Ie(3));
    r.create_bar = Some(CreateBar {
        bar_id: U8Ie(3),
        dl_data_notification_delay: Some(U8Ie(delay_50ms)),
        suggested_buffering_packets_count: count.map(U8Ie),
    });
    let (_, resp) = sim.establish(cp_seid, r);
    assert_eq!(resp.cause.0, Cause::RequestAccepted, "{resp:?}");
    resp.up_f_seid.unwrap().seid
}

/// Runs the timers up to `d` from now; the messages sent meanwhile.
fn run_for(sim: &mut Sim, d: Duration) -> Vec<Message> {
    let end = sim.now + d;
    let mut sent = Vec::new();
    while let Some(t) = sim.upf.poll_timeout().filter(|t| *t <= end) {
        sim.now = t.max(sim.now);
        sim.upf.handle_timeout(sim.now);
        while let Some(tx) = sim.upf.poll_transmit() {
            sent.push(Message::parse(&tx.data).unwrap().1);
        }
    }
    sim.now = end;
    sent
}

fn dldr_count(sent: &[Message]) -> usize {
    sent.iter().filter(|m| matches!(m, Message::SessionReportRequest(r) if r.report_type.has(report_type::DLDR))).count()
}

fn far_to_forward(far: u32) -> SessionModificationRequest {
    SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: U32Ie(far),
            apply_action: Some(Flags(apply_action::FORW)),
            update_forwarding_parameters: None,
            bar_id: None,
        }],
        ..Default::default()
    }
}

#[test]
fn a_bar_is_installed_with_its_far_and_bounds_what_is_held() {
    let mut sim = Sim::new();
    sim.associate(1);
    let seid = established_buffering(&mut sim, 0x90, 0, Some(5));
    let acts = sim.actions();
    let [Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    let bar = rules.bar.unwrap();
    assert_eq!((bar.id, bar.ddn_delay, bar.suggested_packets), (3, Duration::ZERO, Some(5)));
    assert_eq!(rules.bar_of(2).map(|b| b.hold_limit()), Some(Some(5)), "FAR 2 buffers under BAR 3");
    assert!(rules.bar_of(1).is_none(), "FAR 1 forwards and names no BAR");
    // Update BAR in a modification: a new count, and a delay.
    let m = SessionModificationRequest {
        update_bar: Some(UpdateBarSmr {
            bar_id: U8Ie(3),
            dl_data_notification_delay: Some(U8Ie(2)),
            suggested_buffering_packets_count: Some(U8Ie(9)),
        }),
        ..Default::default()
    };
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
    assert_eq!(r.cause.0, Cause::RequestAccepted);
    let acts = sim.actions();
    let [Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    assert_eq!(rules.bar.map(|b| (b.ddn_delay, b.hold_limit())), Some((Duration::from_millis(100), Some(9))));
    // No delay (0): the first buffered packet is reported at once.
    let m = SessionModificationRequest {
        update_bar: Some(UpdateBarSmr {
            bar_id: U8Ie(3),
            dl_data_notification_delay: Some(U8Ie(0)),
            suggested_buffering_packets_count: None,
        }),
        ..Default::default()
    };
    sim.request(Some(seid), Message::SessionModificationRequest(m));
    sim.upf.downlink_data(sim.now, seid, 2);
    assert!(sim.upf.poll_transmit().is_some());
}

#[test]
fn bar_references_are_checked_and_a_rejection_changes_nothing() {
    let mut sim = Sim::new();
    sim.associate(1);
    // A FAR naming a BAR the session lacks.
    let mut r = session_request(0x91);
    r.create_far[1].bar_id = Some(U8Ie(4));
    let (_, resp) = sim.establish(0x91, r);
    assert_eq!((resp.cause.0, resp.offending_ie), (Cause::RuleCreationModificationFailure, Some(U16Ie(ty::BAR_ID))));
    let seid = established_buffering(&mut sim, 0x92, 0, None);
    sim.actions();
    let bad = |m: SessionModificationRequest, sim: &mut Sim| {
        let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
        assert!(sim.actions().is_empty());
        assert_eq!(sim.upf.session(seid).unwrap().bar.map(|b| b.id), Some(3));
        (r.cause.0, r.offending_ie.map(|o| o.0))
    };
    let fail = Cause::RuleCreationModificationFailure;
    let upd = UpdateBarSmr { bar_id: U8Ie(7), dl_data_notification_delay: None, suggested_buffering_packets_count: None };
    assert_eq!(bad(SessionModificationRequest { update_bar: Some(upd), ..Default::default() }, &mut sim), (fail, Some(ty::UPDATE_BAR_SMR)));
    assert_eq!(
        bad(SessionModificationRequest { remove_bar: Some(Remove(U8Ie(7))), ..Default::default() }, &mut sim),
        (fail, Some(ty::REMOVE_BAR))
    );
    // FAR 2 still names BAR 3: removing it alone leaves a dangling reference.
    assert_eq!(
        bad(SessionModificationRequest { remove_bar: Some(Remove(U8Ie(3))), ..Default::default() }, &mut sim),
        (fail, Some(ty::BAR_ID))
    );
    let second = CreateBar { bar_id: U8Ie(5), dl_data_notification_delay: None, suggested_buffering_packets_count: None };
    assert_eq!(bad(SessionModificationRequest { create_bar: Some(second), ..Default::default() }, &mut sim), (fail, Some(ty::CREATE_BAR)));
    // Remove and re-create in one request is accepted.
    let m = SessionModificationRequest {
        remove_bar: Some(Remove(U8Ie(3))),
        create_bar: Some(CreateBar { bar_id: U8Ie(3), ..second }),
        ..Default::default()
    };
    let Message::SessionModificationResponse(r) = sim.request(Some(seid), Message::SessionModificationRequest(m)).1 else { panic!() };
    assert_eq!(r.cause.0, Cause::RequestAccepted);
}

#[test]
fn the_notification_delay_holds_the_report_back_and_a_forwarding_far_cancels_it() {
    let mut sim = Sim::new();
    sim.associate(1);
    // 4 × 50 ms.
    let seid = established_buffering(&mut sim, 0x93, 4, None);
    sim.upf.downlink_data(sim.now, seid, 2);
    assert!(sim.upf.poll_transmit().is_none(), "delayed");
    assert_eq!(dldr_count(&run_for(&mut sim, Duration::from_millis(150))), 0);
    sim.upf.downlink_data(sim.now, seid, 2);
    let sent = run_for(&mut sim, Duration::from_millis(60));
    assert_eq!(dldr_count(&sent), 1, "200 ms after the first packet: {sent:?}");
    assert_eq!(dldr_count(&run_for(&mut sim, Duration::from_secs(1))), 0, "once");
    // Another episode: the SMF makes the FAR forward within the delay; no report.
    let m = SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: U32Ie(2),
            apply_action: Some(Flags(apply_action::BUFF | apply_action::NOCP)),
            update_forwarding_parameters: None,
            bar_id: None,
        }],
        ..Default::default()
    };
    sim.request(Some(seid), Message::SessionModificationRequest(m));
    sim.upf.downlink_data(sim.now, seid, 2);
    run_for(&mut sim, Duration::from_millis(100));
    sim.request(Some(seid), Message::SessionModificationRequest(far_to_forward(2)));
    assert_eq!(dldr_count(&run_for(&mut sim, Duration::from_secs(1))), 0, "cancelled by the forwarding FAR");
    // A modification that keeps the FAR buffering keeps the delayed report.
    sim.request(
        Some(seid),
        Message::SessionModificationRequest(SessionModificationRequest {
            update_far: vec![UpdateFar {
                far_id: U32Ie(2),
                apply_action: Some(Flags(apply_action::BUFF | apply_action::NOCP)),
                update_forwarding_parameters: None,
                bar_id: None,
            }],
            ..Default::default()
        }),
    );
    sim.upf.downlink_data(sim.now, seid, 2);
    sim.request(Some(seid), Message::SessionModificationRequest(SessionModificationRequest::default()));
    assert_eq!(dldr_count(&run_for(&mut sim, Duration::from_millis(250))), 1);
}

#[test]
fn a_report_response_extends_buffering_for_its_duration_then_drops_what_is_held() {
    let mut sim = Sim::new();
    sim.associate(1);
    let seid = established_buffering(&mut sim, 0x94, 0, Some(4));
    sim.actions();
    sim.upf.downlink_data(sim.now, seid, 2);
    let tx = sim.upf.poll_transmit().unwrap();
    let (h, Message::SessionReportRequest(_)) = Message::parse(&tx.data).unwrap() else { panic!() };
    // The SMF: buffer for 3 × 2 s, up to 300 packets.
    let resp = SessionReportResponse {
        cause: CauseIe(Cause::RequestAccepted),
        offending_ie: None,
        update_bar: Some(UpdateBarSrr {
            bar_id: U8Ie(3),
            dl_data_notification_delay: None,
            dl_buffering_duration: Some(DlBufferingDuration { unit: 0, value: 3 }),
            dl_buffering_suggested_packet_count: Some(DlBufferingSuggestedPacketCount(300)),
            suggested_buffering_packets_count: None,
        }),
        flags: None,
    };
    let answer = Message::SessionReportResponse(resp.clone()).to_bytes(&Header::session(MessageType::SessionReportResponse, seid, h.seq));
    sim.upf.handle(sim.now, smf(), &answer);
    let acts = sim.actions();
    let [Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    assert_eq!(rules.bar_of(2).unwrap().hold_limit(), Some(300), "the extended count replaces the suggested one meanwhile");
    // A modification that keeps buffering: still no new report while extended.
    sim.request(Some(seid), Message::SessionModificationRequest(SessionModificationRequest::default()));
    sim.actions();
    sim.upf.downlink_data(sim.now, seid, 2);
    assert!(sim.upf.poll_transmit().is_none(), "no report during extended buffering");
    assert!(run_for(&mut sim, Duration::from_secs(5)).is_empty());
    assert!(sim.actions().is_empty());
    // 6 s: the extended buffering ends; what is held goes, the count is the BAR's again.
    run_for(&mut sim, Duration::from_secs(2));
    let acts = sim.actions();
    let [Action::DropBuffered { seid: s }, Action::Install(rules)] = &acts[..] else { panic!("{acts:?}") };
    assert_eq!(*s, seid);
    assert_eq!(rules.bar_of(2).unwrap().hold_limit(), Some(4));
    sim.upf.downlink_data(sim.now, seid, 2);
    let tx = sim.upf.poll_transmit().expect("reported again");
    // DROBU in a response drops what is held; an Update BAR for another BAR is ignored.
    let (h, _) = Message::parse(&tx.data).unwrap();
    let mut other = resp;
    other.update_bar.as_mut().unwrap().bar_id = U8Ie(8);
    other.flags = Some(Flags(srrsp_flags::DROBU));
    sim.upf.handle(
        sim.now,
        smf(),
        &Message::SessionReportResponse(other).to_bytes(&Header::session(MessageType::SessionReportResponse, seid, h.seq)),
    );
    let acts = sim.actions();
    assert!(matches!(&acts[..], [Action::DropBuffered { seid: s }] if *s == seid), "{acts:?}");
    // An infinite duration has no end; a stopped one ends it at once.
    let inf = |unit, value| SessionReportResponse {
        cause: CauseIe(Cause::RequestAccepted),
        offending_ie: None,
        update_bar: Some(UpdateBarSrr {
            bar_id: U8Ie(3),
            dl_data_notification_delay: None,
            dl_buffering_duration: Some(DlBufferingDuration { unit, value }),
            dl_buffering_suggested_packet_count: None,
            suggested_buffering_packets_count: None,
        }),
        flags: None,
    };
    // A new episode, answered by an SMF that echoes its own SEID in the header (the
    // response is matched to our request by its sequence number): no end.
    sim.request(Some(seid), Message::SessionModificationRequest(SessionModificationRequest::default()));
    sim.upf.downlink_data(sim.now, seid, 2);
    let (h, _) = Message::parse(&sim.upf.poll_transmit().expect("reported").data).unwrap();
    assert_eq!(h.seid, Some(0x94));
    let answer = |r: SessionReportResponse, seid: u64, seq: u32| {
        Message::SessionReportResponse(r).to_bytes(&Header::session(MessageType::SessionReportResponse, seid, seq))
    };
    sim.upf.handle(sim.now, smf(), &answer(inf(7, 0), 0x94, h.seq));
    assert!(sim.upf.session(seid).unwrap().bar.unwrap().extended.is_some_and(|e| e.until.is_none()));
    // A stray response (no request of ours has its sequence number) changes nothing.
    sim.upf.handle(sim.now, smf(), &answer(inf(0, 0), seid, h.seq));
    assert!(sim.upf.session(seid).unwrap().bar.unwrap().extended.is_some());
    // A stopped timer (unit and value zero), in the answer to a usage report, ends it.
    sim.upf.usage(sim.now, seid, 1, Usage { ul_bytes: 2000, dl_bytes: 0, ul_packets: 2, dl_packets: 0 });
    let (h, _) = Message::parse(&sim.upf.poll_transmit().expect("a usage report").data).unwrap();
    sim.upf.handle(sim.now, smf(), &answer(inf(0, 0), seid, h.seq));
    assert!(sim.upf.session(seid).unwrap().bar.unwrap().extended.is_none());
}
