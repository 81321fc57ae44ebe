//! PFCP sessions are established and deleted while traffic flows through other sessions,
//! and those lose nothing: a generator sends a fixed count of uplink G-PDUs and downlink
//! packets, spread over a few fixed sessions; between vectors an SMF establishes and
//! deletes thousands of other sessions. Every request goes to the PFCP socket and through
//! the socket loop's own entry (`Control::pfcp_datagram`: the sans-IO core, the install
//! into the UPF tables, the publish), and is answered on the socket. Every packet of the
//! fixed sessions is decapsulated or encapsulated and reaches the sink, each session's URR
//! counts exactly its share, the tables hold the fixed sessions only at the end, and no
//! buffer leaks.
use control::config::Config;
use control::dataplane::{assemble, Control};
use control::fuzz::upf_sessions::Smf;
use core::net::Ipv4Addr;
use engine::worker::Context;
use pfcp::grouped::*;
use pfcp::ie::*;
use pfcp::message::*;
use pfcp::{Cause, Message};
use std::collections::VecDeque;
use std::path::Path;

use crate::common;

const CFG: &str = concat!(
    // The gNB is the peer, 198.18.1.2.
    pg0_null0_config!(),
    r#"
# The data network, beyond the UE pool.
[[route]]
prefix = "198.19.128.0/17"
via = "198.18.1.3"

[[neighbour]]
interface = "null0"
ip = "198.18.1.3"
mac = "02:00:00:00:01:03"

[pfcp]
listen = "127.0.0.1:0"
n3 = "198.18.1.1"
ue_pool = "198.19.0.0/17"
max_sessions = 2048

# Uplink: G-PDUs on the fixed sessions' TEIDs 0xf00000-0xf00003, in turn.
[[stream]]
name = "uplink"
interface = "pg0"
size = 114
count = 500000
protocol = "gtpu"
src = "198.18.1.2"
dst = "198.18.1.1"
teid = 0xf00000
inner_src = "198.19.127.1"
inner_dst = "198.19.200.1"
[[stream.modify]]
field = "teid"
increment = 4

# Downlink: to the fixed sessions' UEs 198.19.127.1-4, in turn.
[[stream]]
name = "downlink"
interface = "pg0"
size = 64
count = 500000
protocol = "udp"
src = "198.19.200.1"
dst = "198.19.127.1"
[[stream.modify]]
field = "dst"
increment = 4
"#
);

/// Each stream's packets, and the fixed sessions they are spread over.
const PACKETS: u64 = 500_000;
const FIXED: u32 = 4;
/// Sessions established and deleted under the traffic, how many live at once at most,
/// and how many requests go between two vectors.
const CHURNED: u32 = 10_000;
const LIVE: usize = 1000;
const PER_VECTOR: u32 = 4;

const SMF_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;
const GNB: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
const N3: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);

/// A session established through the SMF; the UPF's SEID.
fn establish(smf: &mut Smf, control: &mut Control, r: SessionEstablishmentRequest) -> u64 {
    match smf.request(control, Some(0), Message::SessionEstablishmentRequest(r)) {
        Message::SessionEstablishmentResponse(r) if r.cause.0 == Cause::RequestAccepted => r.up_f_seid.unwrap().seid,
        m => panic!("{m:?}"),
    }
}

/// A session deleted through the SMF; its usage reports.
fn delete(smf: &mut Smf, control: &mut Control, seid: u64) -> Vec<UsageReportSdr> {
    match smf.request(control, Some(seid), Message::SessionDeletionRequest) {
        Message::SessionDeletionResponse(r) if r.cause.0 == Cause::RequestAccepted => r.usage_report,
        m => panic!("{m:?}"),
    }
}

/// Uplink on `f_teid` (the UPF chooses when `None`), downlink to `ue` (the UPF chooses when
/// `None`) toward the gNB's `gnb_teid`; a QER with the gate open and a volume URR on both.
fn session(cp_seid: u64, f_teid: Option<u32>, ue: Option<Ipv4Addr>, gnb_teid: u32) -> SessionEstablishmentRequest {
    let f_teid = match f_teid {
        Some(teid) => FTeid::Assigned { teid, ipv4: Some(N3), ipv6: None },
        None => FTeid::Choose { v4: true, v6: false, choose_id: None },
    };
    let ue = match ue {
        Some(a) => UeIpAddress { ipv4: Some(a), destination: true, ..Default::default() },
        None => UeIpAddress { choose_v4: true, destination: true, ..Default::default() },
    };
    let pdr = |id: u16, source, pdi: Pdi, ohr| CreatePdr {
        pdr_id: U16Ie(id),
        precedence: Some(U32Ie(100)),
        pdi: Some(Pdi { source_interface: Some(InterfaceIe(source)), ..pdi }),
        outer_header_removal: ohr,
        far_id: Some(U32Ie(u32::from(id))),
        urr_ids: vec![U32Ie(1)],
        qer_ids: vec![U32Ie(1)],
    };
    SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF_IP),
        cp_f_seid: FSeid { seid: cp_seid, ipv4: Some(SMF_IP), ipv6: None },
        create_pdr: vec![
            pdr(
                1,
                Interface::Access,
                Pdi { f_teid: Some(f_teid), ..Default::default() },
                Some(OuterHeaderRemoval { description: ohr::GTPU_UDP_IPV4, extension_deletion: None }),
            ),
            pdr(2, Interface::Core, Pdi { ue_ip_address: Some(ue), ..Default::default() }, None),
        ],
        create_far: vec![
            CreateFar::forward(1, Interface::Core, None),
            CreateFar::forward(2, Interface::Access, Some(OuterHeaderCreation::gtpu(gnb_teid, Some(GNB), None))),
        ],
        create_urr: vec![CreateUrr::measuring(1, measurement_method::VOLUM, 0)],
        create_qer: vec![CreateQer { qer_id: U32Ie(1), gate_status: Some(GateStatus::default()), mbr: None, gbr: None, qfi: None }],
        create_bar: None,
        pdn_type: Some(U8Ie(1)),
    }
}

#[test]
fn session_churn_loses_no_packets_of_other_sessions() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut control, mut worker) = assemble(&cfg).unwrap().into_single();
    let mut smf = Smf::associate(&mut control).expect("[pfcp] is configured");
    let fixed: Vec<u64> = (0..FIXED)
        .map(|k| {
            establish(
                &mut smf,
                &mut control,
                session(u64::from(k) + 1, Some(0xf00000 + k), Some(Ipv4Addr::new(198, 19, 127, 1 + k as u8)), 0x100 + k),
            )
        })
        .collect();

    let (mut established, mut deleted) = (0u32, 0u32);
    let mut live: VecDeque<u64> = VecDeque::new();
    let mut polls = 0u32;
    let mut churn_done_at = None;
    let mut most_installed = 0;
    while !worker.inputs_done() {
        worker.poll_once();
        polls += 1;
        for _ in 0..PER_VECTOR {
            if established < CHURNED {
                established += 1;
                live.push_back(establish(&mut smf, &mut control, session(1000 + u64::from(established), None, None, 0x1000 + established)));
            }
            if live.len() > LIVE || (established == CHURNED && !live.is_empty()) {
                delete(&mut smf, &mut control, live.pop_front().unwrap());
                deleted += 1;
            }
        }
        most_installed = most_installed.max(control.pfcp.as_ref().unwrap().tables.len());
        if churn_done_at.is_none() && deleted == CHURNED {
            churn_done_at = Some(polls);
        }
    }
    worker.poll_once();
    worker.cx.refresh();
    let churn_done_at = churn_done_at.expect("every churned session established and deleted while the traffic ran");
    assert!(churn_done_at < polls, "the churn ended at vector {churn_done_at} of {polls}, under traffic");
    assert_eq!(most_installed, FIXED as usize + LIVE, "the tables grew to the churned sessions live at once");

    let s = worker.snapshot();
    let count = |node: &str, c: &str| s.counters.iter().find(|x| x.node == node && x.counter == c).map_or(0, |x| x.count);
    let sink = s.ports.iter().find(|p| p.name == "null0").unwrap();
    assert_eq!(
        sink.counters.tx_packets,
        2 * PACKETS,
        "every packet of the fixed sessions delivered while {CHURNED} sessions came and went"
    );
    assert_eq!(count("upf4-uplink", "forwarded"), PACKETS);
    assert_eq!(count("upf4-downlink", "forwarded"), PACKETS);
    assert_eq!(count("upf4-downlink", "encapsulated"), PACKETS);
    common::assert_no_drops(&s);
    assert_eq!(worker.pool.in_use(), 0, "no buffer leaked");

    // The tables hold the fixed sessions again, in the control plane and as published.
    let p = control.pfcp.as_ref().unwrap();
    assert_eq!((p.upf.session_count(), p.tables.len()), (FIXED as usize, FIXED as usize));
    assert_eq!(p.tables.slots_in_use(), (FIXED as usize, FIXED as usize), "QER and URR slots");
    let t = &worker.cx.upf.tables;
    let published = (0..t.sessions.len() as u32).filter(|k| t.session(*k).is_some()).count();
    assert_eq!((published, t.by_teid.len(), t.by_ue4.len()), (FIXED as usize, FIXED as usize, FIXED as usize));

    // Each fixed session's URR counted exactly its share of either stream.
    for seid in fixed {
        let reports = delete(&mut smf, &mut control, seid);
        let v = reports.first().and_then(|r| r.volume).expect("a final usage report");
        assert_eq!((v.uplink_packets, v.downlink_packets), (Some(PACKETS / 4), Some(PACKETS / 4)), "session {seid:#x}");
    }
    let p = control.pfcp.as_ref().unwrap();
    assert_eq!((p.upf.session_count(), p.tables.len(), p.tables.slots_in_use()), (0, 0, (0, 0)));
}
