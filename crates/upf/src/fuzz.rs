//! Body of the `upf_tables` fuzz target (`fuzz/fuzz_targets/upf_tables.rs`), here so the
//! stable test suite replays the committed corpus through the same code: a PFCP message
//! handed to the sans-IO UPF (with an association and a session already set up), and
//! whatever sessions it creates, changes or deletes compiled into the dataplane's tables
//! as the control plane does, the tables admitting each session before the core accepts
//! it. Invariants beyond "no panic": every install the core asks for is taken (what the
//! tables cannot hold was refused to the SMF), and an installed session is found by each of its TEIDs and UE
//! addresses, its records resolved from its rules as they are now.

use crate::tables::UpfState;
use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use pfcp::header::{Header, MessageType};
use pfcp::ie::NodeId;
use pfcp::message::{AssociationRequest, Message};
use pfcp::upf::{Action, Config, Upf};
use std::time::{Duration, Instant};

pub fn session_tables(data: &[u8]) {
    let smf = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 7, 1)), 8805);
    let n3 = Ipv4Addr::new(198, 18, 7, 2);
    let mut cfg = Config::new(NodeId::Ipv4(n3), 1);
    cfg.n3_ipv4 = Some(n3);
    cfg.n3_ipv6 = Some("2001:db8:7::2".parse().expect("an IPv6 address"));
    cfg.ue_pool_v4 = Some((Ipv4Addr::new(198, 19, 7, 0), 24));
    cfg.ue_pool_v6 = Some(("2001:db8:19::".parse().expect("an IPv6 address"), 48));
    let mut u = Upf::new(cfg);
    // Small tables, so that running out of room is exercised too.
    let mut state = UpfState::new(4, 8, 8);
    state.set_n3(Some(n3), None);
    let now = Instant::now();
    let setup = Message::AssociationSetupRequest(AssociationRequest {
        node_id: NodeId::Ipv4(Ipv4Addr::new(198, 18, 7, 1)),
        recovery_time_stamp: Some(pfcp::ie::U32Ie(1)),
        up_function_features: None,
        cp_function_features: None,
    });
    u.handle(now, smf, &setup.to_bytes(&Header::node(MessageType::AssociationSetupRequest, 1)));
    // The input as one message, then as a second one (a modification of what the first
    // set up, when it is one), then time passes (URR timers, heartbeats, the peer lost).
    u.handle_with(now, smf, data, &mut state);
    apply(&mut u, &mut state);
    u.handle_with(now + Duration::from_secs(1), smf, data, &mut state);
    apply(&mut u, &mut state);
    u.handle_timeout(now + Duration::from_secs(3600));
    apply(&mut u, &mut state);
    let t = state.build();
    assert!(t.sessions.len() <= 4);
}

/// Apply the core's actions to the tables as `control::pfcp` does, checking each install.
fn apply(u: &mut Upf, state: &mut UpfState) {
    while u.poll_transmit().is_some() {}
    while let Some(a) = u.poll_action() {
        match a {
            Action::Install(rules) => match state.install_rules(&rules) {
                Ok(_) => {
                    let s = state.session(rules.seid).expect("an installed session is there").clone();
                    let t = state.build();
                    let (records, _) = crate::tables::SessionRecords::of(&s);
                    assert_eq!(t.records(s.slot), &records, "the records are the session's");
                    for r in s.uplink.iter() {
                        if let Some(teid) = r.teid {
                            assert_eq!(t.by_teid(teid).map(|x| x.seid), Some(s.seid), "found by its TEID");
                        }
                    }
                    for a in state.ue_addresses(s.seid) {
                        let found = match a {
                            IpAddr::V4(a) => t.by_ue4(a),
                            IpAddr::V6(a) => t.by_ue6(&a),
                        };
                        assert_eq!(found.map(|x| x.seid), Some(s.seid), "found by its UE address {a}");
                    }
                }
                Err(e) => panic!("session {:#x} was accepted but the tables refuse it: {e}", rules.seid),
            },
            Action::Remove { seid } => {
                state.remove(seid);
                assert!(state.session(seid).is_none());
            }
            Action::EndMarker { .. } | Action::DropBuffered { .. } => {}
        }
    }
}
