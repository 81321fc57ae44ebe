//! The UPF sessions of the whole-graph target (`graph.toml`'s `[pfcp]` describes them):
//! installed into the dataplane's tables as the PFCP control plane would after an SMF
//! set them up, so that fuzzed packets meet every UPF node with rules in place.

use crate::dataplane::Control;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use pfcp::ie::{apply_action, Interface, NodeId};
use pfcp::rules::{Bar, Far, GtpuEndpoint, Pdr, Qer, SessionRules, Urr};

const N3: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const N3_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);

fn pdr(id: u16, precedence: u32, far: u32) -> Pdr {
    Pdr {
        id,
        precedence,
        source: Interface::Access,
        local_f_teid: None,
        ue_ipv4: None,
        ue_ipv6: None,
        ue_is_destination: false,
        sdf_filters: vec![],
        qfi: None,
        outer_header_removal: false,
        far_id: Some(far),
        qer_ids: vec![1],
        urr_ids: vec![1],
    }
}

fn far(id: u32, action: u64, to: Option<(IpAddr, u32)>) -> Far {
    Far {
        id,
        action,
        destination: None,
        outer_header: to.map(|(addr, teid)| GtpuEndpoint { teid, addr }),
        network_instance: None,
        bar_id: None,
    }
}

/// A session: uplink on `teid` at `n3`, downlink to `ue` by `down`.
fn session(seid: u64, teid: u32, n3: IpAddr, ue: IpAddr, up: Far, down: Far) -> SessionRules {
    let mut r = SessionRules {
        seid,
        cp_node: NodeId::Ipv4(Ipv4Addr::LOCALHOST),
        pdrs: Default::default(),
        fars: Default::default(),
        qers: Default::default(),
        urrs: Default::default(),
        bar: None,
    };
    let mut u = pdr(1, 100, 1);
    u.local_f_teid = Some(GtpuEndpoint { teid, addr: n3 });
    u.outer_header_removal = up.outer_header.is_none();
    let mut d = pdr(2, 100, 2);
    d.source = Interface::Core;
    d.ue_is_destination = true;
    match ue {
        IpAddr::V4(a) => (u.ue_ipv4, d.ue_ipv4) = (Some(a), Some(a)),
        IpAddr::V6(a) => (u.ue_ipv6, d.ue_ipv6) = (Some(a), Some(a)),
    }
    r.pdrs.insert(1, u);
    r.pdrs.insert(2, d);
    r.fars.insert(1, Far { id: 1, ..up });
    r.fars.insert(2, Far { id: 2, ..down });
    let qer = Qer {
        id: 1,
        ul_open: true,
        dl_open: true,
        mbr_ul_kbps: Some(100_000),
        mbr_dl_kbps: Some(100_000),
        gbr_ul_kbps: Some(1_000),
        gbr_dl_kbps: None,
        qfi: Some(9),
    };
    r.qers.insert(1, qer);
    r.urrs.insert(1, Urr { id: 1, ..Default::default() });
    r
}

/// Install the sessions and publish them.
pub fn install(control: &mut Control) {
    let Some(p) = control.pfcp.as_mut() else { return };
    let gnb = IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2));
    let forw = |to| far(0, apply_action::FORW, to);
    let mut plain = session(1, 0x5000, IpAddr::V4(N3), IpAddr::V4(Ipv4Addr::new(198, 19, 50, 1)), forw(None), forw(Some((gnb, 0x6000))));
    // DNS from the UE dropped by an SDF filter ahead of the catch-all.
    let mut dns = pdr(3, 10, 3);
    dns.local_f_teid = Some(GtpuEndpoint { teid: 0x5000, addr: IpAddr::V4(N3) });
    dns.sdf_filters = vec![b"permit out 17 from any 53 to assigned".to_vec()];
    dns.outer_header_removal = true;
    plain.pdrs.insert(3, dns);
    plain.fars.insert(3, far(3, apply_action::DROP, None));
    let mut buffering = session(
        2,
        0x5001,
        IpAddr::V4(N3),
        IpAddr::V4(Ipv4Addr::new(198, 19, 50, 2)),
        forw(None),
        Far { bar_id: Some(1), ..far(0, apply_action::BUFF | apply_action::NOCP, None) },
    );
    // Its BAR holds at most 2 packets (`bar-limit` beyond).
    buffering.bar = Some(Bar { id: 1, ddn_delay: core::time::Duration::ZERO, suggested_packets: Some(2), extended: None });
    let v6 = session(
        3,
        0x5002,
        IpAddr::V6(N3_6),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x150, 1, 0, 0, 0, 1)),
        forw(None),
        forw(Some((IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2)), 0x6002))),
    );
    let n9 = session(
        4,
        0x5003,
        IpAddr::V4(N3),
        IpAddr::V4(Ipv4Addr::new(198, 19, 50, 4)),
        forw(Some((IpAddr::V4(Ipv4Addr::new(198, 18, 1, 3)), 0x7000))),
        forw(Some((gnb, 0x6004))),
    );
    for s in [plain, buffering, v6, n9] {
        p.tables.install_rules(&s).expect("the harness's UPF sessions install");
    }
    p.publish();
}
