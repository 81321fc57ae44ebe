//! Typed leaf IEs (TS 29.244 §8.2). Values that are plain numbers share one const-generic
//! newtype per width ([`U8Ie`], [`U16Ie`], [`U32Ie`]); flag octets share [`Flags`].
//! A value longer than its type needs is accepted (later releases extend IEs at the end,
//! §8.1.1); a shorter one is an `InvalidLength` naming the type.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::tlv::{at_least, Ie, Reader};
use crate::{Cause, Error};

/// IE type numbers (TS 29.244 Table 8.1.2-1) of the IEs vecgate reads or writes.
pub mod ty {
    pub const CREATE_PDR: u16 = 1;
    pub const PDI: u16 = 2;
    pub const CREATE_FAR: u16 = 3;
    pub const FORWARDING_PARAMETERS: u16 = 4;
    pub const CREATE_URR: u16 = 6;
    pub const CREATE_QER: u16 = 7;
    pub const CREATED_PDR: u16 = 8;
    pub const UPDATE_PDR: u16 = 9;
    pub const UPDATE_BAR_SRR: u16 = 12;
    pub const UPDATE_FAR: u16 = 10;
    pub const UPDATE_FORWARDING_PARAMETERS: u16 = 11;
    pub const UPDATE_URR: u16 = 13;
    pub const UPDATE_QER: u16 = 14;
    pub const REMOVE_PDR: u16 = 15;
    pub const REMOVE_FAR: u16 = 16;
    pub const REMOVE_URR: u16 = 17;
    pub const REMOVE_QER: u16 = 18;
    pub const CAUSE: u16 = 19;
    pub const SOURCE_INTERFACE: u16 = 20;
    pub const F_TEID: u16 = 21;
    pub const NETWORK_INSTANCE: u16 = 22;
    pub const SDF_FILTER: u16 = 23;
    pub const GATE_STATUS: u16 = 25;
    pub const MBR: u16 = 26;
    pub const GBR: u16 = 27;
    pub const PRECEDENCE: u16 = 29;
    pub const TRANSPORT_LEVEL_MARKING: u16 = 30;
    pub const VOLUME_THRESHOLD: u16 = 31;
    pub const TIME_THRESHOLD: u16 = 32;
    pub const REPORTING_TRIGGERS: u16 = 37;
    pub const REPORT_TYPE: u16 = 39;
    pub const OFFENDING_IE: u16 = 40;
    pub const DESTINATION_INTERFACE: u16 = 42;
    pub const UP_FUNCTION_FEATURES: u16 = 43;
    pub const APPLY_ACTION: u16 = 44;
    pub const DL_DATA_NOTIFICATION_DELAY: u16 = 46;
    pub const DL_BUFFERING_DURATION: u16 = 47;
    pub const DL_BUFFERING_SUGGESTED_PACKET_COUNT: u16 = 48;
    pub const PFCPSMREQ_FLAGS: u16 = 49;
    pub const PFCPSRRSP_FLAGS: u16 = 50;
    pub const PDR_ID: u16 = 56;
    pub const F_SEID: u16 = 57;
    pub const NODE_ID: u16 = 60;
    pub const MEASUREMENT_METHOD: u16 = 62;
    pub const USAGE_REPORT_TRIGGER: u16 = 63;
    pub const MEASUREMENT_PERIOD: u16 = 64;
    pub const VOLUME_MEASUREMENT: u16 = 66;
    pub const DURATION_MEASUREMENT: u16 = 67;
    pub const VOLUME_QUOTA: u16 = 73;
    pub const TIME_QUOTA: u16 = 74;
    pub const START_TIME: u16 = 75;
    pub const END_TIME: u16 = 76;
    pub const QUERY_URR: u16 = 77;
    pub const USAGE_REPORT_SMR: u16 = 78;
    pub const USAGE_REPORT_SDR: u16 = 79;
    pub const USAGE_REPORT_SRR: u16 = 80;
    pub const URR_ID: u16 = 81;
    pub const DOWNLINK_DATA_REPORT: u16 = 83;
    pub const OUTER_HEADER_CREATION: u16 = 84;
    pub const CREATE_BAR: u16 = 85;
    pub const UPDATE_BAR_SMR: u16 = 86;
    pub const REMOVE_BAR: u16 = 87;
    pub const BAR_ID: u16 = 88;
    pub const CP_FUNCTION_FEATURES: u16 = 89;
    pub const UE_IP_ADDRESS: u16 = 93;
    pub const OUTER_HEADER_REMOVAL: u16 = 95;
    pub const RECOVERY_TIME_STAMP: u16 = 96;
    pub const UR_SEQN: u16 = 104;
    pub const FAR_ID: u16 = 108;
    pub const QER_ID: u16 = 109;
    pub const PDN_TYPE: u16 = 113;
    pub const FAILED_RULE_ID: u16 = 114;
    pub const QFI: u16 = 124;
    pub const SUGGESTED_BUFFERING_PACKETS_COUNT: u16 = 140;
}

/// A one-octet number IE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct U8Ie<const T: u16>(pub u8);
/// A two-octet number IE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct U16Ie<const T: u16>(pub u16);
/// A four-octet number IE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct U32Ie<const T: u16>(pub u32);

impl<const T: u16> Ie for U8Ie<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        Ok(Self(at_least::<1>(T, v)?[0]))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.push(self.0);
    }
}
impl<const T: u16> Ie for U16Ie<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        Ok(Self(u16::from_be_bytes(at_least(T, v)?)))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
    }
}
impl<const T: u16> Ie for U32Ie<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        Ok(Self(u32::from_be_bytes(at_least(T, v)?)))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
    }
}

pub type PdrId = U16Ie<{ ty::PDR_ID }>;
pub type FarId = U32Ie<{ ty::FAR_ID }>;
pub type QerId = U32Ie<{ ty::QER_ID }>;
pub type UrrId = U32Ie<{ ty::URR_ID }>;
pub type BarId = U8Ie<{ ty::BAR_ID }>;
pub type Precedence = U32Ie<{ ty::PRECEDENCE }>;
pub type OffendingIe = U16Ie<{ ty::OFFENDING_IE }>;
/// Seconds.
pub type TimeThreshold = U32Ie<{ ty::TIME_THRESHOLD }>;
/// Seconds.
pub type TimeQuota = U32Ie<{ ty::TIME_QUOTA }>;
/// Seconds.
pub type MeasurementPeriod = U32Ie<{ ty::MEASUREMENT_PERIOD }>;
/// Seconds.
pub type DurationMeasurement = U32Ie<{ ty::DURATION_MEASUREMENT }>;
pub type UrSeqn = U32Ie<{ ty::UR_SEQN }>;
/// NTP seconds (since 1900-01-01), as are Start Time and End Time.
pub type RecoveryTimeStamp = U32Ie<{ ty::RECOVERY_TIME_STAMP }>;
pub type StartTime = U32Ie<{ ty::START_TIME }>;
pub type EndTime = U32Ie<{ ty::END_TIME }>;
/// Downlink Data Notification Delay (§8.2.28): in units of 50 ms; 0 clears the delay.
pub type DlDataNotificationDelay = U8Ie<{ ty::DL_DATA_NOTIFICATION_DELAY }>;
/// Suggested Buffering Packets Count (§8.2.105): packets to hold at most while buffering.
pub type SuggestedBufferingPacketsCount = U8Ie<{ ty::SUGGESTED_BUFFERING_PACKETS_COUNT }>;
/// 1 IPv4, 2 IPv6, 3 IPv4v6, 4 non-IP, 5 Ethernet (low 3 bits).
pub type PdnType = U8Ie<{ ty::PDN_TYPE }>;

/// The Cause IE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CauseIe(pub Cause);

impl Ie for CauseIe {
    const TYPE: u16 = ty::CAUSE;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        Ok(CauseIe(at_least::<1>(ty::CAUSE, v)?[0].into()))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.push(self.0.into());
    }
}

/// Failed Rule ID (§8.2.80): the rule a Rule creation/modification failure is about, by its
/// kind (Rule ID Type, the low 5 bits of the first octet) and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailedRuleId {
    Pdr(u16),
    Far(u32),
    Qer(u32),
    Urr(u32),
    Bar(u8),
}

impl Ie for FailedRuleId {
    const TYPE: u16 = ty::FAILED_RULE_ID;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let t = ty::FAILED_RULE_ID;
        let kind = at_least::<1>(t, v)?[0] & 0x1f;
        let rest = &v[1..];
        Ok(match kind {
            0 => FailedRuleId::Pdr(u16::from_be_bytes(at_least(t, rest)?)),
            1 => FailedRuleId::Far(u32::from_be_bytes(at_least(t, rest)?)),
            2 => FailedRuleId::Qer(u32::from_be_bytes(at_least(t, rest)?)),
            3 => FailedRuleId::Urr(u32::from_be_bytes(at_least(t, rest)?)),
            4 => FailedRuleId::Bar(at_least::<1>(t, rest)?[0]),
            _ => return Err(Error::Incorrect(t)),
        })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        match *self {
            FailedRuleId::Pdr(id) => {
                out.push(0);
                out.extend_from_slice(&id.to_be_bytes());
            }
            FailedRuleId::Far(id) => {
                out.push(1);
                out.extend_from_slice(&id.to_be_bytes());
            }
            FailedRuleId::Qer(id) => {
                out.push(2);
                out.extend_from_slice(&id.to_be_bytes());
            }
            FailedRuleId::Urr(id) => {
                out.push(3);
                out.extend_from_slice(&id.to_be_bytes());
            }
            FailedRuleId::Bar(id) => out.extend_from_slice(&[4, id]),
        }
    }
}

/// A QoS flow identifier (6 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Qfi(pub u8);

impl Ie for Qfi {
    const TYPE: u16 = ty::QFI;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        Ok(Qfi(at_least::<1>(ty::QFI, v)?[0] & 0x3f))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.push(self.0 & 0x3f);
    }
}

/// Flag octets, octet 5 in bits 0..8, octet 6 in bits 8..16 and so on (bit 1 of an octet,
/// the spec's least significant, is the low bit). Written with at least `MIN` octets and
/// as many more as the set bits need; octets past the eighth are ignored when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags<const T: u16, const MIN: usize>(pub u64);

impl<const T: u16, const MIN: usize> Flags<T, MIN> {
    pub const fn has(self, bit: u64) -> bool {
        self.0 & bit != 0
    }
}

impl<const T: u16, const MIN: usize> Ie for Flags<T, MIN> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        if v.len() < MIN.max(1) {
            return Err(Error::InvalidLength(T));
        }
        Ok(Self(v.iter().take(8).enumerate().fold(0, |acc, (i, &b)| acc | u64::from(b) << (8 * i))))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        let used = (64 - self.0.leading_zeros() as usize).div_ceil(8);
        for i in 0..used.max(MIN).max(1) {
            out.push((self.0 >> (8 * i)) as u8);
        }
    }
}

/// Apply Action (§8.2.26): octet 5 DROP FORW BUFF NOCP DUPL …
pub type ApplyAction = Flags<{ ty::APPLY_ACTION }, 1>;
pub mod apply_action {
    pub const DROP: u64 = 1 << 0;
    pub const FORW: u64 = 1 << 1;
    pub const BUFF: u64 = 1 << 2;
    pub const NOCP: u64 = 1 << 3;
    pub const DUPL: u64 = 1 << 4;
}

/// Reporting Triggers (§8.2.19).
pub type ReportingTriggers = Flags<{ ty::REPORTING_TRIGGERS }, 2>;
/// Usage Report Trigger (§8.2.41).
/// Two octets in Release 15, three since; both are read.
pub type UsageReportTrigger = Flags<{ ty::USAGE_REPORT_TRIGGER }, 2>;
/// Bits shared by Reporting Triggers and Usage Report Trigger in octet 5 (same
/// positions), and the quota bits of octet 6, which sit apart in the two IEs.
pub mod trigger {
    pub const PERIO: u64 = 1 << 0;
    pub const VOLTH: u64 = 1 << 1;
    pub const TIMTH: u64 = 1 << 2;
    pub const QUHTI: u64 = 1 << 3;
    pub const START: u64 = 1 << 4;
    pub const STOPT: u64 = 1 << 5;
    pub const DROTH: u64 = 1 << 6;
    /// Reporting Triggers: LIUSA; Usage Report Trigger: IMMER.
    pub const LIUSA_OR_IMMER: u64 = 1 << 7;
    pub const VOLQU: u64 = 1 << 8;
    pub const TIMQU: u64 = 1 << 9;
    /// Usage Report Trigger only: termination (session deleted).
    pub const TERMR: u64 = 1 << 11;
}

/// Measurement Method (§8.2.40): DURAT, VOLUM, EVENT.
pub type MeasurementMethod = Flags<{ ty::MEASUREMENT_METHOD }, 1>;
pub mod measurement_method {
    pub const DURAT: u64 = 1 << 0;
    pub const VOLUM: u64 = 1 << 1;
    pub const EVENT: u64 = 1 << 2;
}

/// Report Type (§8.2.21): DLDR, USAR, ERIR, UPIR.
pub type ReportType = Flags<{ ty::REPORT_TYPE }, 1>;
pub mod report_type {
    pub const DLDR: u64 = 1 << 0;
    pub const USAR: u64 = 1 << 1;
    pub const ERIR: u64 = 1 << 2;
    pub const UPIR: u64 = 1 << 3;
}

/// UP Function Features (§8.2.25), the features an UPF advertises.
pub type UpFunctionFeatures = Flags<{ ty::UP_FUNCTION_FEATURES }, 2>;
pub mod up_features {
    /// Octet 5 bit 2: the BAR's Downlink Data Notification Delay is applied.
    pub const DDND: u64 = 1 << 1;
    /// Octet 5 bit 3: the BAR's DL Buffering Duration (Session Report Response) is applied.
    pub const DLBD: u64 = 1 << 2;
    /// Octet 5 bit 5: F-TEID allocation and release in the UP function.
    pub const FTUP: u64 = 1 << 4;
    /// Octet 6 bit 1: sending End Marker packets.
    pub const EMPU: u64 = 1 << 8;
    /// Octet 6 bit 3: UL/DL Buffering Control (the BAR's Suggested Buffering Packets
    /// Count bounds what is held).
    pub const UDBC: u64 = 1 << 10;
    /// Octet 7 bit 3: UE IP address allocation.
    pub const UEIP: u64 = 1 << 18;
}

/// CP Function Features (§8.2.58); read and kept, nothing acted on.
pub type CpFunctionFeatures = Flags<{ ty::CP_FUNCTION_FEATURES }, 1>;

/// PFCPSRRsp-Flags (§8.2.32): DROBU (bit 1), the only one.
pub type SrRspFlags = Flags<{ ty::PFCPSRRSP_FLAGS }, 1>;
pub mod srrsp_flags {
    /// Drop what is buffered for the session.
    pub const DROBU: u64 = 1 << 0;
}

/// PFCPSMReq-Flags (§8.2.31): DROBU, SNDEM, QAURR.
pub type SmReqFlags = Flags<{ ty::PFCPSMREQ_FLAGS }, 1>;
pub mod smreq_flags {
    pub const DROBU: u64 = 1 << 0;
    /// Send End Marker packets on the old path.
    pub const SNDEM: u64 = 1 << 1;
    pub const QAURR: u64 = 1 << 2;
}

/// Source and Destination Interface (§8.2.2, §8.2.24): 4-bit interface value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Interface {
    Access,
    Core,
    SgiLanN6Lan,
    CpFunction,
    VnInternal,
    Unknown(u8),
}

impl From<u8> for Interface {
    fn from(v: u8) -> Interface {
        match v & 0x0f {
            0 => Interface::Access,
            1 => Interface::Core,
            2 => Interface::SgiLanN6Lan,
            3 => Interface::CpFunction,
            4 => Interface::VnInternal,
            o => Interface::Unknown(o),
        }
    }
}
impl From<Interface> for u8 {
    fn from(v: Interface) -> u8 {
        match v {
            Interface::Access => 0,
            Interface::Core => 1,
            Interface::SgiLanN6Lan => 2,
            Interface::CpFunction => 3,
            Interface::VnInternal => 4,
            Interface::Unknown(o) => o & 0x0f,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InterfaceIe<const T: u16>(pub Interface);
pub type SourceInterface = InterfaceIe<{ ty::SOURCE_INTERFACE }>;
pub type DestinationInterface = InterfaceIe<{ ty::DESTINATION_INTERFACE }>;

impl<const T: u16> Ie for InterfaceIe<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        Ok(Self(at_least::<1>(T, v)?[0].into()))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.push(self.0.into());
    }
}

/// Node ID (§8.2.38).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NodeId {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    /// DNS-encoded labels, kept as sent.
    Fqdn(Vec<u8>),
}

impl Ie for NodeId {
    const TYPE: u16 = ty::NODE_ID;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(ty::NODE_ID, v);
        match r.u8()? & 0x0f {
            0 => Ok(NodeId::Ipv4(r.ipv4()?)),
            1 => Ok(NodeId::Ipv6(r.ipv6()?)),
            2 if !r.rest().is_empty() => Ok(NodeId::Fqdn(r.rest().to_vec())),
            2 => Err(Error::InvalidLength(ty::NODE_ID)),
            _ => Err(Error::Incorrect(ty::NODE_ID)),
        }
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        match self {
            NodeId::Ipv4(a) => {
                out.push(0);
                out.extend_from_slice(&a.octets());
            }
            NodeId::Ipv6(a) => {
                out.push(1);
                out.extend_from_slice(&a.octets());
            }
            NodeId::Fqdn(n) => {
                out.push(2);
                out.extend_from_slice(n);
            }
        }
    }
}

/// F-SEID (§8.2.37): a SEID and the address of the node that chose it. Note the flag
/// order: V6 is bit 1, V4 bit 2 (the reverse of F-TEID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FSeid {
    pub seid: u64,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
}

impl Ie for FSeid {
    const TYPE: u16 = ty::F_SEID;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(ty::F_SEID, v);
        let flags = r.u8()?;
        let seid = r.u64()?;
        let ipv4 = if flags & 0x02 != 0 { Some(r.ipv4()?) } else { None };
        let ipv6 = if flags & 0x01 != 0 { Some(r.ipv6()?) } else { None };
        if ipv4.is_none() && ipv6.is_none() {
            return Err(Error::Incorrect(ty::F_SEID));
        }
        Ok(FSeid { seid, ipv4, ipv6 })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.ipv4.is_some()) << 1 | u8::from(self.ipv6.is_some()));
        out.extend_from_slice(&self.seid.to_be_bytes());
        if let Some(a) = self.ipv4 {
            out.extend_from_slice(&a.octets());
        }
        if let Some(a) = self.ipv6 {
            out.extend_from_slice(&a.octets());
        }
    }
}

/// F-TEID (§8.2.3): either a TEID with its address(es), or CHOOSE: the UP function picks
/// one (for the families asked), the same one for every PDR with the same CHOOSE ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FTeid {
    Assigned { teid: u32, ipv4: Option<Ipv4Addr>, ipv6: Option<Ipv6Addr> },
    Choose { v4: bool, v6: bool, choose_id: Option<u8> },
}

const FTEID_V4: u8 = 0x01;
const FTEID_V6: u8 = 0x02;
const FTEID_CH: u8 = 0x04;
const FTEID_CHID: u8 = 0x08;

impl Ie for FTeid {
    const TYPE: u16 = ty::F_TEID;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(ty::F_TEID, v);
        let flags = r.u8()?;
        let (v4, v6) = (flags & FTEID_V4 != 0, flags & FTEID_V6 != 0);
        if flags & FTEID_CH != 0 {
            let choose_id = if flags & FTEID_CHID != 0 { Some(r.u8()?) } else { None };
            if !v4 && !v6 {
                return Err(Error::Incorrect(ty::F_TEID));
            }
            return Ok(FTeid::Choose { v4, v6, choose_id });
        }
        if flags & FTEID_CHID != 0 || (!v4 && !v6) {
            return Err(Error::Incorrect(ty::F_TEID));
        }
        let teid = r.u32()?;
        let ipv4 = if v4 { Some(r.ipv4()?) } else { None };
        let ipv6 = if v6 { Some(r.ipv6()?) } else { None };
        Ok(FTeid::Assigned { teid, ipv4, ipv6 })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        match *self {
            FTeid::Assigned { teid, ipv4, ipv6 } => {
                let flags = if ipv4.is_some() { FTEID_V4 } else { 0 } | if ipv6.is_some() { FTEID_V6 } else { 0 };
                out.push(flags);
                out.extend_from_slice(&teid.to_be_bytes());
                if let Some(a) = ipv4 {
                    out.extend_from_slice(&a.octets());
                }
                if let Some(a) = ipv6 {
                    out.extend_from_slice(&a.octets());
                }
            }
            FTeid::Choose { v4, v6, choose_id } => {
                let mut flags = FTEID_CH | if v4 { FTEID_V4 } else { 0 } | if v6 { FTEID_V6 } else { 0 };
                if choose_id.is_some() {
                    flags |= FTEID_CHID;
                }
                out.push(flags);
                if let Some(id) = choose_id {
                    out.push(id);
                }
            }
        }
    }
}

/// UE IP Address (§8.2.62). `destination` is the S/D bit (the address is the packet's
/// destination: downlink PDRs); CHV4/CHV6 ask the UP function to allocate, and then V4/V6
/// stay 0 (they say an address follows, which is how tshark reads the IE too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UeIpAddress {
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub destination: bool,
    pub choose_v4: bool,
    pub choose_v6: bool,
    pub v6_prefix_delegation_bits: Option<u8>,
    pub v6_prefix_len: Option<u8>,
}

impl Ie for UeIpAddress {
    const TYPE: u16 = ty::UE_IP_ADDRESS;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(ty::UE_IP_ADDRESS, v);
        let f = r.u8()?;
        let ipv4 = if f & 0x02 != 0 { Some(r.ipv4()?) } else { None };
        let ipv6 = if f & 0x01 != 0 { Some(r.ipv6()?) } else { None };
        let v6_prefix_delegation_bits = if f & 0x08 != 0 { Some(r.u8()?) } else { None };
        let v6_prefix_len = if f & 0x40 != 0 { Some(r.u8()?) } else { None };
        Ok(UeIpAddress {
            ipv4,
            ipv6,
            destination: f & 0x04 != 0,
            choose_v4: f & 0x10 != 0,
            choose_v6: f & 0x20 != 0,
            v6_prefix_delegation_bits,
            v6_prefix_len,
        })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        let bit = |b: bool, v: u8| if b { v } else { 0 };
        out.push(
            bit(self.ipv6.is_some(), 0x01)
                | bit(self.ipv4.is_some(), 0x02)
                | bit(self.destination, 0x04)
                | bit(self.v6_prefix_delegation_bits.is_some(), 0x08)
                | bit(self.choose_v4, 0x10)
                | bit(self.choose_v6, 0x20)
                | bit(self.v6_prefix_len.is_some(), 0x40),
        );
        if let Some(a) = self.ipv4 {
            out.extend_from_slice(&a.octets());
        }
        if let Some(a) = self.ipv6 {
            out.extend_from_slice(&a.octets());
        }
        out.extend(self.v6_prefix_delegation_bits);
        out.extend(self.v6_prefix_len);
    }
}

/// Network Instance (§8.2.4): an octet string (often a DNS-encoded APN/DNN).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NetworkInstance(pub Vec<u8>);

impl Ie for NetworkInstance {
    const TYPE: u16 = ty::NETWORK_INSTANCE;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        Ok(NetworkInstance(v.to_vec()))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
}

/// SDF Filter (§8.2.5). The flow description is IPFilterRule text (RFC 6733 §4.3.1), e.g.
/// `permit out udp from 198.19.0.0/16 to assigned 80-88`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SdfFilter {
    pub flow_description: Option<Vec<u8>>,
    pub tos_traffic_class: Option<u16>,
    pub spi: Option<u32>,
    /// 20 bits.
    pub flow_label: Option<u32>,
    pub filter_id: Option<u32>,
}

impl Ie for SdfFilter {
    const TYPE: u16 = ty::SDF_FILTER;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(ty::SDF_FILTER, v);
        let f = r.u8()?;
        r.u8()?; // spare
        let flow_description = if f & 0x01 != 0 {
            let n = r.u16()?;
            Some(r.slice(n.into())?.to_vec())
        } else {
            None
        };
        let tos_traffic_class = if f & 0x02 != 0 { Some(r.u16()?) } else { None };
        let spi = if f & 0x04 != 0 { Some(r.u32()?) } else { None };
        let flow_label = if f & 0x08 != 0 {
            let b = r.bytes::<3>()?;
            Some(u32::from_be_bytes([0, b[0] & 0x0f, b[1], b[2]]))
        } else {
            None
        };
        let filter_id = if f & 0x10 != 0 { Some(r.u32()?) } else { None };
        Ok(SdfFilter { flow_description, tos_traffic_class, spi, flow_label, filter_id })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        let bit = |b: bool, v: u8| if b { v } else { 0 };
        out.push(
            bit(self.flow_description.is_some(), 0x01)
                | bit(self.tos_traffic_class.is_some(), 0x02)
                | bit(self.spi.is_some(), 0x04)
                | bit(self.flow_label.is_some(), 0x08)
                | bit(self.filter_id.is_some(), 0x10),
        );
        out.push(0);
        if let Some(fd) = &self.flow_description {
            out.extend_from_slice(&u16::try_from(fd.len()).unwrap_or(u16::MAX).to_be_bytes());
            out.extend_from_slice(&fd[..fd.len().min(usize::from(u16::MAX))]);
        }
        if let Some(t) = self.tos_traffic_class {
            out.extend_from_slice(&t.to_be_bytes());
        }
        if let Some(s) = self.spi {
            out.extend_from_slice(&s.to_be_bytes());
        }
        if let Some(l) = self.flow_label {
            out.extend_from_slice(&(l & 0x000f_ffff).to_be_bytes()[1..]);
        }
        if let Some(id) = self.filter_id {
            out.extend_from_slice(&id.to_be_bytes());
        }
    }
}

/// Gate Status (§8.2.7): UL gate in bits 3-4, DL gate in bits 1-2; 0 open, 1 closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GateStatus {
    pub ul_closed: bool,
    pub dl_closed: bool,
}

impl Ie for GateStatus {
    const TYPE: u16 = ty::GATE_STATUS;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let b = at_least::<1>(ty::GATE_STATUS, v)?[0];
        let (ul, dl) = ((b >> 2) & 3, b & 3);
        if ul > 1 || dl > 1 {
            return Err(Error::Incorrect(ty::GATE_STATUS));
        }
        Ok(GateStatus { ul_closed: ul == 1, dl_closed: dl == 1 })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.ul_closed) << 2 | u8::from(self.dl_closed));
    }
}

/// MBR and GBR (§8.2.8, §8.2.9): uplink then downlink, 40 bits each, in kbit/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BitRate<const T: u16> {
    pub ul_kbps: u64,
    pub dl_kbps: u64,
}
pub type Mbr = BitRate<{ ty::MBR }>;
pub type Gbr = BitRate<{ ty::GBR }>;

pub const MAX_BIT_RATE_KBPS: u64 = (1 << 40) - 1;

impl<const T: u16> Ie for BitRate<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let b = at_least::<10>(T, v)?;
        let u40 = |s: &[u8]| s.iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
        Ok(Self { ul_kbps: u40(&b[..5]), dl_kbps: u40(&b[5..]) })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.ul_kbps & MAX_BIT_RATE_KBPS).to_be_bytes()[3..]);
        out.extend_from_slice(&(self.dl_kbps & MAX_BIT_RATE_KBPS).to_be_bytes()[3..]);
    }
}

/// Volume Threshold, Volume Quota (§8.2.13, §8.2.50): octets, total / uplink / downlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Volume<const T: u16> {
    pub total: Option<u64>,
    pub uplink: Option<u64>,
    pub downlink: Option<u64>,
}
pub type VolumeThreshold = Volume<{ ty::VOLUME_THRESHOLD }>;
pub type VolumeQuota = Volume<{ ty::VOLUME_QUOTA }>;

impl<const T: u16> Ie for Volume<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(T, v);
        let f = r.u8()?;
        let mut next = |bit: u8| if f & bit != 0 { r.u64().map(Some) } else { Ok(None) };
        Ok(Self { total: next(1)?, uplink: next(2)?, downlink: next(4)? })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        let vals = [self.total, self.uplink, self.downlink];
        out.push(vals.iter().enumerate().fold(0, |f, (i, v)| f | u8::from(v.is_some()) << i));
        for v in vals.into_iter().flatten() {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// Volume Measurement (§8.2.44): octets and (with TONOP/ULNOP/DLNOP) packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VolumeMeasurement {
    pub total: Option<u64>,
    pub uplink: Option<u64>,
    pub downlink: Option<u64>,
    pub total_packets: Option<u64>,
    pub uplink_packets: Option<u64>,
    pub downlink_packets: Option<u64>,
}

impl Ie for VolumeMeasurement {
    const TYPE: u16 = ty::VOLUME_MEASUREMENT;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(ty::VOLUME_MEASUREMENT, v);
        let f = r.u8()?;
        let mut next = |bit: u8| if f & bit != 0 { r.u64().map(Some) } else { Ok(None) };
        Ok(VolumeMeasurement {
            total: next(0x01)?,
            uplink: next(0x02)?,
            downlink: next(0x04)?,
            total_packets: next(0x08)?,
            uplink_packets: next(0x10)?,
            downlink_packets: next(0x20)?,
        })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        let vals = [self.total, self.uplink, self.downlink, self.total_packets, self.uplink_packets, self.downlink_packets];
        out.push(vals.iter().enumerate().fold(0, |f, (i, v)| f | u8::from(v.is_some()) << i));
        for v in vals.into_iter().flatten() {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// Transport Level Marking (§8.2.12): the ToS / Traffic Class the SMF wants on the outer
/// header of what a FAR sends in GTP-U (the DSCP of the QoS flow's transport class),
/// with the mask of the bits it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TransportLevelMarking {
    pub tos: u8,
    pub mask: u8,
}

impl Ie for TransportLevelMarking {
    const TYPE: u16 = ty::TRANSPORT_LEVEL_MARKING;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let [tos, mask] = Reader::new(ty::TRANSPORT_LEVEL_MARKING, v).bytes::<2>()?;
        Ok(TransportLevelMarking { tos, mask })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.tos, self.mask]);
    }
}

/// Outer Header Creation (§8.2.56): the description bits say which fields follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OuterHeaderCreation {
    /// Octet 5 in the low byte, octet 6 in the high byte (see [`ohc`]).
    pub description: u16,
    pub teid: Option<u32>,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub port: Option<u16>,
    pub c_tag: Option<[u8; 3]>,
    pub s_tag: Option<[u8; 3]>,
}

pub mod ohc {
    pub const GTPU_UDP_IPV4: u16 = 1 << 0;
    pub const GTPU_UDP_IPV6: u16 = 1 << 1;
    pub const UDP_IPV4: u16 = 1 << 2;
    pub const UDP_IPV6: u16 = 1 << 3;
    pub const IPV4: u16 = 1 << 4;
    pub const IPV6: u16 = 1 << 5;
    pub const C_TAG: u16 = 1 << 6;
    pub const S_TAG: u16 = 1 << 7;
    pub const TEID: u16 = GTPU_UDP_IPV4 | GTPU_UDP_IPV6;
    pub const V4: u16 = GTPU_UDP_IPV4 | UDP_IPV4 | IPV4;
    pub const V6: u16 = GTPU_UDP_IPV6 | UDP_IPV6 | IPV6;
    pub const PORT: u16 = UDP_IPV4 | UDP_IPV6;
}

impl OuterHeaderCreation {
    /// GTP-U toward `ipv4`/`ipv6` with `teid`: what a FAR toward a gNB carries.
    pub fn gtpu(teid: u32, ipv4: Option<Ipv4Addr>, ipv6: Option<Ipv6Addr>) -> OuterHeaderCreation {
        let description = if ipv4.is_some() { ohc::GTPU_UDP_IPV4 } else { 0 } | if ipv6.is_some() { ohc::GTPU_UDP_IPV6 } else { 0 };
        OuterHeaderCreation { description, teid: Some(teid), ipv4, ipv6, ..Default::default() }
    }
}

impl Ie for OuterHeaderCreation {
    const TYPE: u16 = ty::OUTER_HEADER_CREATION;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(ty::OUTER_HEADER_CREATION, v);
        let d = r.bytes::<2>()?;
        let description = u16::from(d[0]) | u16::from(d[1]) << 8;
        let has = |m: u16| description & m != 0;
        let teid = if has(ohc::TEID) { Some(r.u32()?) } else { None };
        let ipv4 = if has(ohc::V4) { Some(r.ipv4()?) } else { None };
        let ipv6 = if has(ohc::V6) { Some(r.ipv6()?) } else { None };
        let port = if has(ohc::PORT) { Some(r.u16()?) } else { None };
        let c_tag = if has(ohc::C_TAG) { Some(r.bytes::<3>()?) } else { None };
        let s_tag = if has(ohc::S_TAG) { Some(r.bytes::<3>()?) } else { None };
        Ok(OuterHeaderCreation { description, teid, ipv4, ipv6, port, c_tag, s_tag })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.description as u8, (self.description >> 8) as u8]);
        if let Some(t) = self.teid {
            out.extend_from_slice(&t.to_be_bytes());
        }
        if let Some(a) = self.ipv4 {
            out.extend_from_slice(&a.octets());
        }
        if let Some(a) = self.ipv6 {
            out.extend_from_slice(&a.octets());
        }
        if let Some(p) = self.port {
            out.extend_from_slice(&p.to_be_bytes());
        }
        for t in [self.c_tag, self.s_tag].into_iter().flatten() {
            out.extend_from_slice(&t);
        }
    }
}

/// Outer Header Removal (§8.2.64): 0 GTP-U/UDP/IPv4, 1 GTP-U/UDP/IPv6, 2 UDP/IPv4,
/// 3 UDP/IPv6, 4 IPv4, 5 IPv6, 6 GTP-U/UDP/IP, 7 VLAN S-TAG, 8 S-TAG and C-TAG; an optional
/// octet of GTP-U extension headers to delete (bit 1: PDU Session Container).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OuterHeaderRemoval {
    pub description: u8,
    pub extension_deletion: Option<u8>,
}

pub mod ohr {
    pub const GTPU_UDP_IPV4: u8 = 0;
    pub const GTPU_UDP_IPV6: u8 = 1;
    pub const GTPU_UDP_IP: u8 = 6;
}

impl Ie for OuterHeaderRemoval {
    const TYPE: u16 = ty::OUTER_HEADER_REMOVAL;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let d = at_least::<1>(ty::OUTER_HEADER_REMOVAL, v)?[0];
        Ok(OuterHeaderRemoval { description: d, extension_deletion: v.get(1).copied() })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.push(self.description);
        out.extend(self.extension_deletion);
    }
}

/// DL Buffering Duration (§8.2.29): a GPRS-timer-like octet, unit in bits 6-8, value in
/// bits 1-5. Units 5 and 6 are read as minutes (the spec says so for this version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DlBufferingDuration {
    /// 0: 2 s, 1: 1 min, 2: 10 min, 3: 1 h, 4: 10 h, 7: infinite; others as 1 min.
    pub unit: u8,
    /// 5 bits.
    pub value: u8,
}

/// What a [`DlBufferingDuration`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferingTime {
    /// Unit and value all zero: the timer is stopped (no extended buffering).
    Stopped,
    Infinite,
    For(core::time::Duration),
}

impl DlBufferingDuration {
    pub fn time(self) -> BufferingTime {
        let v = u64::from(self.value & 0x1f);
        let unit_secs = match self.unit & 7 {
            0 if v == 0 => return BufferingTime::Stopped,
            7 => return BufferingTime::Infinite,
            0 => 2,
            2 => 600,
            3 => 3600,
            4 => 36_000,
            _ => 60,
        };
        BufferingTime::For(core::time::Duration::from_secs(v * unit_secs))
    }
}

impl Ie for DlBufferingDuration {
    const TYPE: u16 = ty::DL_BUFFERING_DURATION;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let b = at_least::<1>(ty::DL_BUFFERING_DURATION, v)?[0];
        Ok(DlBufferingDuration { unit: b >> 5, value: b & 0x1f })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        out.push((self.unit & 7) << 5 | (self.value & 0x1f));
    }
}

/// DL Buffering Suggested Packet Count (§8.2.30): one or two octets, as the length says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DlBufferingSuggestedPacketCount(pub u16);

impl Ie for DlBufferingSuggestedPacketCount {
    const TYPE: u16 = ty::DL_BUFFERING_SUGGESTED_PACKET_COUNT;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        match *v {
            [n] => Ok(Self(n.into())),
            [a, b] => Ok(Self(u16::from_be_bytes([a, b]))),
            _ => Err(Error::InvalidLength(ty::DL_BUFFERING_SUGGESTED_PACKET_COUNT)),
        }
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        match u8::try_from(self.0) {
            Ok(n) => out.push(n),
            Err(_) => out.extend_from_slice(&self.0.to_be_bytes()),
        }
    }
}
