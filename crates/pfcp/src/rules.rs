//! A session's rules as the dataplane needs them: the PFCP IEs resolved (CHOOSE replaced
//! by what the UPF allocated, absent optional values given their meaning). The sans-IO
//! core hands these out in [`crate::upf::Action::Install`]; the control plane maps them
//! onto the dataplane's tables.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::collections::BTreeMap;

use crate::ie::{apply_action, Interface, NodeId};

/// A local GTP-U endpoint a PDR matches (uplink) or a remote one a FAR sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GtpuEndpoint {
    pub teid: u32,
    pub addr: IpAddr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdr {
    pub id: u16,
    pub precedence: u32,
    pub source: Interface,
    /// Uplink: the local F-TEID packets arrive on.
    pub local_f_teid: Option<GtpuEndpoint>,
    /// The UE's address(es); `destination` = matched as the packet's destination (downlink).
    pub ue_ipv4: Option<Ipv4Addr>,
    pub ue_ipv6: Option<Ipv6Addr>,
    pub ue_is_destination: bool,
    /// IPFilterRule text of each SDF filter, as sent.
    pub sdf_filters: Vec<Vec<u8>>,
    pub qfi: Option<u8>,
    /// Remove the outer GTP-U/UDP/IP header (uplink).
    pub outer_header_removal: bool,
    pub far_id: Option<u32>,
    pub qer_ids: Vec<u32>,
    pub urr_ids: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Far {
    pub id: u32,
    /// Apply Action bits ([`apply_action`]).
    pub action: u64,
    pub destination: Option<Interface>,
    /// GTP-U outer header to add (toward the gNB or a peer UPF).
    pub outer_header: Option<GtpuEndpoint>,
    pub network_instance: Option<Vec<u8>>,
}

impl Far {
    pub fn forwards(&self) -> bool {
        self.action & apply_action::FORW != 0
    }
    pub fn buffers(&self) -> bool {
        self.action & apply_action::BUFF != 0
    }
    pub fn drops(&self) -> bool {
        self.action & apply_action::DROP != 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qer {
    pub id: u32,
    pub ul_open: bool,
    pub dl_open: bool,
    /// kbit/s; `None`: not policed.
    pub mbr_ul_kbps: Option<u64>,
    pub mbr_dl_kbps: Option<u64>,
    pub gbr_ul_kbps: Option<u64>,
    pub gbr_dl_kbps: Option<u64>,
    pub qfi: Option<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Urr {
    pub id: u32,
    pub measurement_method: u64,
    pub reporting_triggers: u64,
    /// Seconds.
    pub measurement_period: Option<u32>,
    /// Octets (total / uplink / downlink).
    pub volume_threshold: [Option<u64>; 3],
    pub volume_quota: [Option<u64>; 3],
    /// Seconds.
    pub time_threshold: Option<u32>,
    pub time_quota: Option<u32>,
    /// The volume quota is used up: the PDRs counting into this URR stop forwarding until
    /// the SMF grants more.
    pub quota_exhausted: bool,
}

/// Everything the dataplane needs for one session. Rules are keyed by their PFCP ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRules {
    /// Our SEID (the one the SMF puts in its headers).
    pub seid: u64,
    pub cp_node: NodeId,
    pub pdrs: BTreeMap<u16, Pdr>,
    pub fars: BTreeMap<u32, Far>,
    pub qers: BTreeMap<u32, Qer>,
    pub urrs: BTreeMap<u32, Urr>,
}
