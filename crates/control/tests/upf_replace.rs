//! A PFCP Session Establishment Request with the CP F-SEID of a live session replaces it
//! all the way into the dataplane: through the PFCP socket and the control loop's entry
//! (`Control::pfcp_datagram`), the old session's TEID, UE address and rules leave the UPF
//! tables the workers read, and the new session's take their place, one session in all.

use control::config::Config;
use control::dataplane::{assemble, Control};
use control::fuzz::upf_sessions::{requests, Smf};
use core::net::Ipv4Addr;
use engine::worker::Context;
use pfcp::ie::FTeid;
use pfcp::message::SessionEstablishmentRequest;
use pfcp::{Cause, Message};
use std::path::Path;

const CFG: &str = r#"
[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24"]

[pfcp]
listen = "127.0.0.1:0"
n3 = "198.18.1.1"
ue_pool = "198.19.0.0/16"
"#;

fn establish(smf: &mut Smf, control: &mut Control, r: SessionEstablishmentRequest) -> u64 {
    match smf.request(control, Some(0), Message::SessionEstablishmentRequest(r)) {
        Message::SessionEstablishmentResponse(r) if r.cause.0 == Cause::RequestAccepted => r.up_f_seid.unwrap().seid,
        m => panic!("{m:?}"),
    }
}

/// The uplink TEID and UE address `r` assigns.
fn keys(r: &SessionEstablishmentRequest) -> (u32, Ipv4Addr) {
    let pdi = r.create_pdr[0].pdi.as_ref().unwrap();
    let Some(FTeid::Assigned { teid, .. }) = pdi.f_teid else { panic!("{pdi:?}") };
    (teid, pdi.ue_ip_address.unwrap().ipv4.unwrap())
}

#[test]
fn a_replaced_session_leaves_the_upf_tables() {
    let cfg = Config::parse(CFG, "test.toml", Path::new(".")).unwrap();
    let (mut control, mut worker) = assemble(&cfg).unwrap().into_single();
    let mut smf = Smf::associate(&mut control).expect("[pfcp] is configured");
    // The plain session (uplink TEID 0x5000, UE 198.19.50.1), then the same CP F-SEID
    // with another TEID and UE address.
    let old_req = requests().remove(0);
    let mut new_req = old_req.clone();
    for p in &mut new_req.create_pdr {
        let pdi = p.pdi.as_mut().unwrap();
        if let Some(FTeid::Assigned { teid, .. }) = &mut pdi.f_teid {
            *teid = 0x5001;
        }
        if let Some(ue) = &mut pdi.ue_ip_address {
            ue.ipv4 = Some(Ipv4Addr::new(198, 19, 50, 9));
        }
    }
    assert_eq!(new_req.cp_f_seid, old_req.cp_f_seid);
    let ((old_teid, old_ue), (new_teid, new_ue)) = (keys(&old_req), keys(&new_req));

    let old = establish(&mut smf, &mut control, old_req);
    worker.cx.refresh();
    let t = &worker.cx.upf.tables;
    assert!(t.by_teid.get(u64::from(old_teid)).is_some() && t.by_ue4(old_ue).is_some_and(|s| s.seid == old));

    let new = establish(&mut smf, &mut control, new_req);
    assert_ne!(new, old);
    worker.cx.refresh();
    let p = control.pfcp.as_ref().unwrap();
    assert_eq!((p.upf.session_count(), p.tables.len()), (1, 1), "one session, in the core and the tables");
    assert!(p.tables.session(old).is_none() && p.tables.session(new).is_some());
    let t = &worker.cx.upf.tables;
    assert_eq!(t.by_teid.get(u64::from(old_teid)), None, "the old TEID is gone from what the workers read");
    assert!(t.by_ue4(old_ue).is_none(), "the old UE address too");
    assert!(t.by_ue4(new_ue).is_some_and(|s| s.seid == new));
    let slot = t.by_teid.get(u64::from(new_teid)).expect("the new TEID");
    assert_eq!(t.session(slot).map(|s| s.seid), Some(new));
    assert_eq!((t.by_teid.len(), t.by_ue4.len()), (1, 1));
}
