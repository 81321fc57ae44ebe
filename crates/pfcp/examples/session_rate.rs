//! Sessions per second and memory per session of the sans-IO UPF core alone (no socket,
//! no dataplane): N Session Establishment Requests as pfcpsim sends them (2 PDRs, 2 FARs,
//! 1 QER, 1 URR, F-TEID and UE address chosen by the UPF), parsed, validated, answered.
//!
//! `cargo run --release -p vecgate-pfcp --example session_rate [N]` (default 100000).
//! Memory is the process's resident set before and after, from /proc/self/statm.

use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use pfcp::grouped::*;
use pfcp::header::{Header, MessageType};
use pfcp::ie::*;
use pfcp::message::*;
use pfcp::upf::{Config, Upf};
use pfcp::Message;

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 4096
}

fn request(cp_seid: u64) -> Message {
    let smf = Ipv4Addr::new(198, 18, 7, 1);
    Message::SessionEstablishmentRequest(SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(smf),
        cp_f_seid: FSeid { seid: cp_seid, ipv4: Some(smf), ipv6: None },
        create_pdr: vec![
            CreatePdr {
                pdr_id: U16Ie(1),
                precedence: Some(U32Ie(100)),
                pdi: Some(Pdi {
                    source_interface: Some(InterfaceIe(Interface::Access)),
                    f_teid: Some(FTeid::Choose { v4: true, v6: false, choose_id: None }),
                    ..Default::default()
                }),
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
                    ue_ip_address: Some(UeIpAddress { destination: true, choose_v4: true, ..Default::default() }),
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
            CreateFar::forward(
                2,
                Interface::Access,
                Some(OuterHeaderCreation::gtpu(cp_seid as u32, Some(Ipv4Addr::new(198, 18, 7, 10)), None)),
            ),
        ],
        create_urr: vec![CreateUrr {
            volume_threshold: Some(Volume { total: Some(10_000_000), uplink: None, downlink: None }),
            ..CreateUrr::measuring(1, measurement_method::VOLUM, trigger::VOLTH)
        }],
        create_qer: vec![CreateQer {
            qer_id: U32Ie(1),
            gate_status: Some(GateStatus::default()),
            mbr: Some(BitRate { ul_kbps: 100_000, dl_kbps: 200_000 }),
            gbr: None,
            qfi: Some(Qfi(9)),
        }],
        create_bar: None,
        pdn_type: None,
    })
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let smf = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 7, 1)), 8805);
    let mut cfg = Config::new(NodeId::Ipv4(Ipv4Addr::new(198, 18, 7, 2)), 1);
    cfg.n3_ipv4 = Some(Ipv4Addr::new(198, 18, 7, 2));
    cfg.ue_pool_v4 = Some((Ipv4Addr::new(198, 18, 0, 0), 15));
    let mut upf = Upf::new(cfg);
    let now = Instant::now();
    let setup = Message::AssociationSetupRequest(AssociationRequest {
        node_id: NodeId::Ipv4(Ipv4Addr::new(198, 18, 7, 1)),
        recovery_time_stamp: Some(U32Ie(1)),
        up_function_features: None,
        cp_function_features: None,
    });
    upf.handle(now, smf, &setup.to_bytes(&Header::node(MessageType::AssociationSetupRequest, 1)));
    let _ = upf.poll_transmit();
    // The requests are encoded before timing: the SMF's cost is not the UPF's.
    let reqs: Vec<Vec<u8>> = (0..n)
        .map(|i| request(i + 1).to_bytes(&Header::session(MessageType::SessionEstablishmentRequest, 0, (i as u32 % 0xff_fff0) + 2)))
        .collect();
    let before = rss_bytes();
    let t = Instant::now();
    let mut accepted = 0u64;
    for r in &reqs {
        upf.handle(now, smf, r);
        while let Some(tx) = upf.poll_transmit() {
            if let Ok((_, Message::SessionEstablishmentResponse(resp))) = Message::parse(&tx.data) {
                if resp.cause.0.is_accepted() {
                    accepted += 1;
                } else {
                    eprintln!("rejected: {:?} {:?}", resp.cause.0, resp.offending_ie);
                }
            }
        }
        while upf.poll_action().is_some() {}
    }
    let secs = t.elapsed().as_secs_f64();
    let after = rss_bytes();
    println!(
        "{n} establishments ({} bytes each): {accepted} accepted in {secs:.3} s = {:.0} sessions/s; resident memory +{} bytes = {:.0} bytes/session (incl. the UPF's remembered responses)",
        reqs[0].len(),
        n as f64 / secs,
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / n as f64
    );
    assert_eq!(accepted, n, "every establishment accepted");
    assert_eq!(upf.session_count() as u64, n);
}
