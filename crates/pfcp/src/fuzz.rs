//! Body of the `pfcp` fuzz target (`fuzz/fuzz_targets/pfcp.rs`), here so the stable test
//! suite replays the committed corpus through the same code. Invariant beyond "no panic":
//! whatever parses emits to bytes that parse to the same message.

use crate::{Header, Message};

pub fn message(data: &[u8]) {
    let Ok((h, m)) = Message::parse(data) else {
        return;
    };
    let bytes = m.to_bytes(&h);
    let (h2, m2) = Message::parse(&bytes).expect("emitted message parses");
    assert_eq!(h2, Header { msg_type: h.msg_type, ..h });
    assert_eq!(m2, m);
}

/// The same input handed to a UPF with an association and a session: nothing panics, and
/// every datagram the UPF sends back parses.
pub fn upf(data: &[u8]) {
    use crate::ie::NodeId;
    use crate::upf::{Config, Upf};
    use core::net::{IpAddr, Ipv4Addr, SocketAddr};
    let smf = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 7, 1)), 8805);
    let mut cfg = Config::new(NodeId::Ipv4(Ipv4Addr::new(198, 18, 7, 2)), 1);
    cfg.n3_ipv4 = Some(Ipv4Addr::new(198, 18, 7, 2));
    cfg.ue_pool_v4 = Some((Ipv4Addr::new(198, 19, 7, 0), 24));
    let mut u = Upf::new(cfg);
    let now = std::time::Instant::now();
    let setup = crate::message::Message::AssociationSetupRequest(crate::message::AssociationRequest {
        node_id: NodeId::Ipv4(Ipv4Addr::new(198, 18, 7, 1)),
        recovery_time_stamp: Some(crate::ie::U32Ie(1)),
        up_function_features: None,
        cp_function_features: None,
    });
    u.handle(now, smf, &setup.to_bytes(&Header::node(crate::MessageType::AssociationSetupRequest, 1)));
    u.handle(now, smf, data);
    u.handle_timeout(now + std::time::Duration::from_secs(3600));
    while let Some(t) = u.poll_transmit() {
        Message::parse(&t.data).expect("what the UPF sends parses");
    }
    while u.poll_action().is_some() {}
}
