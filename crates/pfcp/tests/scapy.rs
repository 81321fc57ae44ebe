//! Messages encoded by scapy's PFCP layer (`fuzz/make_corpus_pfcp.py`, an independent
//! implementation) parse to the fields scapy was asked to encode, and the whole seed corpus
//! (those messages, their truncations and bit flips) replays through the fuzz target body.

use core::net::Ipv4Addr;

use pfcp::grouped::*;
use pfcp::header::MessageType;
use pfcp::ie::*;
use pfcp::message::*;
use pfcp::{Error, Message};

fn corpus() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/pfcp")
}
fn seed(n: usize) -> Vec<u8> {
    std::fs::read(corpus().join(format!("seed-{:03}", n * 6))).unwrap()
}

#[test]
fn corpus_replays_cleanly() {
    let mut parsed = 0;
    let entries: Vec<_> = std::fs::read_dir(corpus()).unwrap().collect();
    assert!(entries.len() >= 40);
    for e in entries {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        pfcp::fuzz::message(&data);
        pfcp::fuzz::upf(&data);
        parsed += usize::from(Message::parse(&data).is_ok());
    }
    assert!(parsed >= 8, "{parsed}");
    for fill in [0x00u8, 0xff, 0x20, 0x21] {
        for len in 0..64 {
            pfcp::fuzz::message(&vec![fill; len]);
            pfcp::fuzz::upf(&vec![fill; len]);
        }
    }
}

#[test]
fn scapy_node_messages() {
    let (h, m) = Message::parse(&seed(0)).unwrap();
    assert_eq!((h.msg_type, h.seid, h.seq), (MessageType::HeartbeatRequest, None, 1));
    assert_eq!(m, Message::HeartbeatRequest(Heartbeat { recovery_time_stamp: U32Ie(3_900_000_000) }));
    let (_, m) = Message::parse(&seed(1)).unwrap();
    let Message::AssociationSetupRequest(a) = m else { panic!("{m:?}") };
    assert_eq!(a.node_id, NodeId::Ipv4(Ipv4Addr::new(198, 18, 7, 1)));
    assert_eq!(a.recovery_time_stamp, Some(U32Ie(3_900_000_001)));
    let (h, m) = Message::parse(&seed(7)).unwrap();
    assert_eq!(h.seq, 7);
    assert_eq!(m, Message::AssociationReleaseRequest(AssociationReleaseRequest { node_id: NodeId::Ipv4(Ipv4Addr::new(198, 18, 7, 1)) }));
}

#[test]
fn scapy_session_establishment() {
    let (h, m) = Message::parse(&seed(2)).unwrap();
    assert_eq!((h.msg_type, h.seid, h.seq), (MessageType::SessionEstablishmentRequest, Some(0), 3));
    let Message::SessionEstablishmentRequest(s) = m else { panic!("{m:?}") };
    let smf = Ipv4Addr::new(198, 18, 7, 1);
    assert_eq!(s.cp_f_seid, FSeid { seid: 0x1111, ipv4: Some(smf), ipv6: None });
    assert_eq!(s.create_pdr.len(), 2);
    let ul = &s.create_pdr[0];
    assert_eq!((ul.pdr_id, ul.precedence, ul.far_id), (U16Ie(1), Some(U32Ie(255)), Some(U32Ie(1))));
    assert_eq!((ul.qer_ids.clone(), ul.urr_ids.clone()), (vec![U32Ie(1)], vec![U32Ie(1)]));
    assert_eq!(ul.outer_header_removal, Some(OuterHeaderRemoval { description: ohr::GTPU_UDP_IPV4, extension_deletion: None }));
    let pdi = ul.pdi.as_ref().unwrap();
    assert_eq!(pdi.source_interface, Some(InterfaceIe(Interface::Access)));
    assert_eq!(pdi.f_teid, Some(FTeid::Assigned { teid: 0x100, ipv4: Some(Ipv4Addr::new(198, 18, 7, 2)), ipv6: None }));
    // scapy writes the instance DNS-encoded (a length-prefixed label); it is kept as sent.
    assert_eq!(pdi.network_instance, Some(NetworkInstance(b"\x08internet".to_vec())));
    assert_eq!(pdi.ue_ip_address.unwrap().ipv4, Some(Ipv4Addr::new(198, 19, 7, 1)));
    assert!(!pdi.ue_ip_address.unwrap().destination);
    assert_eq!(pdi.sdf_filters[0].flow_description.as_deref(), Some(&b"permit out ip from any to assigned"[..]));
    assert_eq!(pdi.qfis, vec![Qfi(9)]);
    let dl = &s.create_pdr[1];
    let dpdi = dl.pdi.as_ref().unwrap();
    assert_eq!(dpdi.source_interface, Some(InterfaceIe(Interface::Core)));
    assert!(dpdi.ue_ip_address.unwrap().destination);
    let far = &s.create_far[1];
    assert!(far.apply_action.has(apply_action::FORW) && !far.apply_action.has(apply_action::DROP));
    let fp = far.forwarding_parameters.as_ref().unwrap();
    assert_eq!(fp.destination_interface, Some(InterfaceIe(Interface::Access)));
    assert_eq!(fp.outer_header_creation, Some(OuterHeaderCreation::gtpu(0x200, Some(Ipv4Addr::new(198, 18, 7, 10)), None)));
    let q = &s.create_qer[0];
    assert_eq!(q.gate_status, Some(GateStatus { ul_closed: false, dl_closed: true }));
    assert_eq!(q.mbr, Some(BitRate { ul_kbps: 100_000, dl_kbps: 200_000 }));
    assert_eq!(q.qfi, Some(Qfi(9)));
    let u = &s.create_urr[0];
    assert_eq!(u.measurement_method, Some(Flags(measurement_method::VOLUM)));
    assert!(u.reporting_triggers.unwrap().has(trigger::VOLTH));
    assert_eq!(u.volume_threshold, Some(Volume { total: Some(10_000_000), uplink: None, downlink: None }));
}

#[test]
fn scapy_modification_deletion_report() {
    let (h, m) = Message::parse(&seed(3)).unwrap();
    assert_eq!(h.seid, Some(0x2222));
    let Message::SessionModificationRequest(s) = m else { panic!("{m:?}") };
    assert_eq!(s.remove_pdr, vec![Remove(U16Ie(7))]);
    let uf = &s.update_far[0];
    assert_eq!(uf.far_id, U32Ie(2));
    let ufp = uf.update_forwarding_parameters.as_ref().unwrap();
    assert_eq!(ufp.outer_header_creation.unwrap().teid, Some(0x300));
    assert!(ufp.smreq_flags.unwrap().has(smreq_flags::SNDEM));
    assert_eq!(Message::parse(&seed(4)).unwrap().1, Message::SessionDeletionRequest);
    let Message::SessionReportRequest(r) = Message::parse(&seed(5)).unwrap().1 else { panic!() };
    assert!(r.report_type.has(report_type::USAR));
    let ur = &r.usage_report[0];
    assert_eq!((ur.urr_id, ur.ur_seqn), (U32Ie(1), U32Ie(4)));
    assert!(ur.trigger.has(trigger::VOLTH));
    assert_eq!(ur.volume.unwrap().total, Some(10_000_123));
    assert_eq!(ur.volume.unwrap().downlink, Some(9_000_000));
    let Message::SessionReportResponse(c) = Message::parse(&seed(6)).unwrap().1 else { panic!() };
    assert!(c.cause.0.is_accepted());
}

#[test]
fn scapy_truncations_fail_typed() {
    for n in 0..8 {
        let full = seed(n);
        let half = std::fs::read(corpus().join(format!("seed-{:03}", n * 6 + 1))).unwrap();
        assert_eq!(half, full[..full.len() / 2]);
        assert_eq!(Message::parse(&half).unwrap_err(), Error::Truncated);
    }
}

#[test]
fn scapy_bar_ies() {
    let Message::SessionEstablishmentRequest(s) = Message::parse(&seed(8)).unwrap().1 else { panic!() };
    assert_eq!(s.create_far[0].bar_id, Some(U8Ie(3)));
    assert!(s.create_far[0].apply_action.has(apply_action::BUFF) && s.create_far[0].apply_action.has(apply_action::NOCP));
    assert_eq!(
        s.create_bar,
        Some(CreateBar { bar_id: U8Ie(3), dl_data_notification_delay: Some(U8Ie(4)), suggested_buffering_packets_count: Some(U8Ie(16)) })
    );
    let Message::SessionModificationRequest(m) = Message::parse(&seed(9)).unwrap().1 else { panic!() };
    assert_eq!(
        m.update_bar,
        Some(UpdateBarSmr { bar_id: U8Ie(3), dl_data_notification_delay: Some(U8Ie(0)), suggested_buffering_packets_count: Some(U8Ie(8)) })
    );
    assert_eq!(m.remove_bar, Some(Remove(U8Ie(5))));
    let Message::SessionReportResponse(r) = Message::parse(&seed(10)).unwrap().1 else { panic!() };
    assert!(r.cause.0.is_accepted());
    let u = r.update_bar.unwrap();
    assert_eq!(u.bar_id, U8Ie(3));
    assert_eq!(u.dl_buffering_duration, Some(DlBufferingDuration { unit: 1, value: 5 }));
    assert_eq!(u.dl_buffering_duration.unwrap().time(), BufferingTime::For(std::time::Duration::from_secs(300)));
    assert_eq!(u.dl_buffering_suggested_packet_count, Some(DlBufferingSuggestedPacketCount(300)));
    assert!(r.flags.unwrap().has(srrsp_flags::DROBU));
    // Our encoding of what scapy encoded is scapy's, byte for byte (past the header).
    let ours = Message::SessionReportResponse(r).to_bytes(&pfcp::header::Header::session(MessageType::SessionReportResponse, 0x2222, 10));
    assert_eq!(ours, seed(10));
}
