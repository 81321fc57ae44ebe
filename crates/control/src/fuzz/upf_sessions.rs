//! The UPF sessions of the whole-graph target (`graph_upf.toml`'s `[pfcp]` serves them),
//! made over PFCP as an SMF makes them, so that fuzzed packets meet every UPF node with
//! rules in place.
//!
//! At harness setup an SMF on a loopback socket sends the UPF's PFCP socket an Association
//! Setup Request, then one Session Establishment Request per session, each encoded by the
//! `pfcp` crate. The control plane takes each datagram from the PFCP socket's reader
//! thread and hands it to [`Control::pfcp_datagram`], as the daemon's loop does: the
//! sans-IO core handles it, its actions are installed in the UPF tables and published,
//! and its response goes back over the socket. Each response must say Request accepted.
//! The F-TEIDs and UE addresses are given, never CHOOSE: the corpus seeds address them.

use crate::dataplane::Control;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use pfcp::grouped::{CreateBar, CreateFar, CreatePdr, CreateQer, CreateUrr, ForwardingParameters, Pdi};
use pfcp::ie::{
    apply_action, measurement_method, ohr, BitRate, FSeid, FTeid, Flags, GateStatus, Interface, InterfaceIe, NodeId, OuterHeaderCreation,
    OuterHeaderRemoval, Qfi, SdfFilter, U16Ie, U32Ie, U8Ie, UeIpAddress,
};
use pfcp::message::{AssociationRequest, SessionEstablishmentRequest};
use pfcp::{Cause, Header, Message};
use std::net::UdpSocket;
use std::time::Duration;

const N3: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const N3_6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
/// The SMF's Node ID and address: the sessions' CP node.
const SMF: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// How long a request may take to come through the socket thread, and its answer back.
const WAIT: Duration = Duration::from_secs(10);

/// A PDR counting into the session's QER 1 and URR 1.
fn pdr(id: u16, precedence: u32, far: u32, pdi: Pdi, removal: Option<u8>) -> CreatePdr {
    CreatePdr {
        pdr_id: U16Ie(id),
        precedence: Some(U32Ie(precedence)),
        pdi: Some(pdi),
        outer_header_removal: removal.map(|description| OuterHeaderRemoval { description, extension_deletion: None }),
        far_id: Some(U32Ie(far)),
        urr_ids: vec![U32Ie(1)],
        qer_ids: vec![U32Ie(1)],
    }
}

/// An uplink PDI: G-PDUs to `teid` on `n3` from `ue`.
fn uplink(teid: u32, n3: IpAddr, ue: IpAddr) -> Pdi {
    let (ipv4, ipv6) = split(n3);
    Pdi {
        source_interface: Some(InterfaceIe(Interface::Access)),
        f_teid: Some(FTeid::Assigned { teid, ipv4, ipv6 }),
        ue_ip_address: Some(ue_address(ue, false)),
        ..Default::default()
    }
}

/// Outer header removal of a G-PDU that came to `n3`.
fn removal(n3: IpAddr) -> u8 {
    if n3.is_ipv4() {
        ohr::GTPU_UDP_IPV4
    } else {
        ohr::GTPU_UDP_IPV6
    }
}

fn split(a: IpAddr) -> (Option<Ipv4Addr>, Option<Ipv6Addr>) {
    match a {
        IpAddr::V4(a) => (Some(a), None),
        IpAddr::V6(a) => (None, Some(a)),
    }
}

fn ue_address(ue: IpAddr, destination: bool) -> UeIpAddress {
    let (ipv4, ipv6) = split(ue);
    UeIpAddress { ipv4, ipv6, destination, ..Default::default() }
}

/// A FAR: `action` (forwarding toward `to`, in GTP-U to `outer` if given), its BAR.
fn far(id: u32, action: u64, to: Interface, outer: Option<(IpAddr, u32)>, bar: Option<u8>) -> CreateFar {
    let forwarding_parameters = (action & apply_action::FORW != 0).then(|| ForwardingParameters {
        destination_interface: Some(InterfaceIe(to)),
        outer_header_creation: outer.map(|(addr, teid)| {
            let (ipv4, ipv6) = split(addr);
            OuterHeaderCreation::gtpu(teid, ipv4, ipv6)
        }),
        ..Default::default()
    });
    CreateFar { far_id: U32Ie(id), apply_action: Flags(action), forwarding_parameters, bar_id: bar.map(U8Ie) }
}

/// Forwarding toward `to`, in GTP-U to `outer` if given.
fn forw(to: Interface, outer: Option<(IpAddr, u32)>) -> CreateFar {
    far(0, apply_action::FORW, to, outer, None)
}

/// A session: uplink on `teid` at `n3` (FAR 1), downlink to `ue` (FAR 2); one QER with
/// MBR, GBR and QFI 9, one volume URR, on both PDRs.
fn session(cp_seid: u64, teid: u32, n3: IpAddr, ue: IpAddr, up: CreateFar, down: CreateFar) -> SessionEstablishmentRequest {
    // The uplink decapsulates unless its FAR re-encapsulates (N9).
    let up_removal = up.forwarding_parameters.as_ref().is_none_or(|f| f.outer_header_creation.is_none()).then(|| removal(n3));
    let down_pdi =
        Pdi { source_interface: Some(InterfaceIe(Interface::Core)), ue_ip_address: Some(ue_address(ue, true)), ..Default::default() };
    SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF),
        cp_f_seid: FSeid { seid: cp_seid, ipv4: Some(SMF), ipv6: None },
        create_pdr: vec![pdr(1, 100, 1, uplink(teid, n3, ue), up_removal), pdr(2, 100, 2, down_pdi, None)],
        create_far: vec![CreateFar { far_id: U32Ie(1), ..up }, CreateFar { far_id: U32Ie(2), ..down }],
        create_urr: vec![CreateUrr::measuring(1, measurement_method::VOLUM, 0)],
        create_qer: vec![CreateQer {
            qer_id: U32Ie(1),
            gate_status: Some(GateStatus::default()),
            mbr: Some(BitRate { ul_kbps: 100_000, dl_kbps: 100_000 }),
            // The GBR IE carries both directions: none guaranteed downlink.
            gbr: Some(BitRate { ul_kbps: 1_000, dl_kbps: 0 }),
            qfi: Some(Qfi(9)),
        }],
        create_bar: None,
        pdn_type: Some(U8Ie(if ue.is_ipv4() { 1 } else { 2 })),
    }
}

/// The four sessions' Session Establishment Requests.
pub fn requests() -> Vec<SessionEstablishmentRequest> {
    use Interface::{Access, Core};
    let gnb = IpAddr::V4(Ipv4Addr::new(198, 18, 1, 2));
    let n3 = IpAddr::V4(N3);
    let mut plain = session(1, 0x5000, n3, IpAddr::V4(Ipv4Addr::new(198, 19, 50, 1)), forw(Core, None), forw(Access, Some((gnb, 0x6000))));
    // DNS from the UE dropped by an SDF filter ahead of the catch-all.
    let dns = Pdi {
        source_interface: Some(InterfaceIe(Access)),
        f_teid: Some(FTeid::Assigned { teid: 0x5000, ipv4: Some(N3), ipv6: None }),
        sdf_filters: vec![SdfFilter { flow_description: Some(b"permit out 17 from any 53 to assigned".to_vec()), ..Default::default() }],
        ..Default::default()
    };
    plain.create_pdr.push(pdr(3, 10, 3, dns, Some(removal(n3))));
    plain.create_far.push(far(3, apply_action::DROP, Core, None, None));
    let mut buffering = session(
        2,
        0x5001,
        n3,
        IpAddr::V4(Ipv4Addr::new(198, 19, 50, 2)),
        forw(Core, None),
        far(0, apply_action::BUFF | apply_action::NOCP, Access, None, Some(1)),
    );
    // Its BAR holds at most 2 packets (`bar-limit` beyond).
    buffering.create_bar =
        Some(CreateBar { bar_id: U8Ie(1), dl_data_notification_delay: None, suggested_buffering_packets_count: Some(U8Ie(2)) });
    let v6 = session(
        3,
        0x5002,
        IpAddr::V6(N3_6),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x150, 1, 0, 0, 0, 1)),
        forw(Core, None),
        forw(Access, Some((IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2)), 0x6002))),
    );
    let n9 = session(
        4,
        0x5003,
        n3,
        IpAddr::V4(Ipv4Addr::new(198, 19, 50, 4)),
        forw(Core, Some((IpAddr::V4(Ipv4Addr::new(198, 18, 1, 3)), 0x7000))),
        forw(Access, Some((gnb, 0x6004))),
    );
    vec![plain, buffering, v6, n9]
}

/// The SMF's end of N4, for tests driving a dataplane's PFCP socket (its `[pfcp]`) from
/// the thread that runs its control plane.
pub struct Smf {
    socket: UdpSocket,
    upf: SocketAddr,
    seq: u32,
}

impl Smf {
    /// An SMF on a loopback socket, associated with `control`'s UPF (Association Setup
    /// accepted); `None` without `[pfcp]`.
    pub fn associate(control: &mut Control) -> Option<Smf> {
        let upf = control.pfcp.as_ref().and_then(|p| p.local_addr())?;
        let socket = UdpSocket::bind((SMF, 0)).expect("a loopback socket for the SMF");
        socket.set_read_timeout(Some(WAIT)).expect("a read timeout");
        let mut smf = Smf { socket, upf, seq: 0 };
        let setup = AssociationRequest {
            node_id: NodeId::Ipv4(SMF),
            recovery_time_stamp: Some(U32Ie(3_900_000_000)),
            up_function_features: None,
            cp_function_features: None,
        };
        match smf.request(control, None, Message::AssociationSetupRequest(setup)) {
            Message::AssociationSetupResponse(r) => assert_eq!(r.cause.0, Cause::RequestAccepted, "association setup: {r:?}"),
            m => panic!("association setup answered with {m:?}"),
        }
        Some(smf)
    }

    /// Sends `m` to the UPF's PFCP socket, has the control plane handle what its reader
    /// thread received as the daemon's loop does, and returns the UPF's answer.
    pub fn request(&mut self, control: &mut Control, seid: Option<u64>, m: Message) -> Message {
        self.seq += 1;
        let h = match seid {
            Some(s) => Header::session(m.msg_type(), s, self.seq),
            None => Header::node(m.msg_type(), self.seq),
        };
        self.socket.send_to(&m.to_bytes(&h), self.upf).expect("the SMF sends to the PFCP socket");
        let rx = control.pfcp.as_ref().expect("PFCP is configured").rx.clone();
        let datagram = rx.recv_timeout(WAIT).expect("the PFCP socket's reader hands the request on");
        control.pfcp_datagram(datagram);
        let mut buf = vec![0u8; 65_536];
        let (n, from) = self.socket.recv_from(&mut buf).expect("the UPF answers");
        assert_eq!(from, self.upf, "the answer comes from the PFCP socket");
        let (rh, rm) = Message::parse(&buf[..n]).expect("the UPF's answer parses");
        assert_eq!(rh.seq, self.seq, "the answer carries the request's sequence number");
        rm
    }
}

/// Make the sessions over PFCP (see the module's description); each must be accepted.
pub fn install(control: &mut Control) {
    let Some(mut smf) = Smf::associate(control) else { return };
    for r in requests() {
        let cp_seid = r.cp_f_seid.seid;
        match smf.request(control, Some(0), Message::SessionEstablishmentRequest(r)) {
            Message::SessionEstablishmentResponse(r) => {
                assert_eq!(r.cause.0, Cause::RequestAccepted, "session {cp_seid}: {r:?}")
            }
            m => panic!("session {cp_seid} answered with {m:?}"),
        }
    }
    let p = control.pfcp.as_ref().expect("PFCP is configured");
    assert!(p.recent.is_empty(), "every session installed in the dataplane: {:?}", p.recent);
    assert_eq!(p.tables.len(), 4, "the four sessions are in the UPF tables");
}
