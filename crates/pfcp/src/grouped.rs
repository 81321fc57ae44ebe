//! Grouped IEs (TS 29.244 §7.5.2–§7.5.8): a value that is itself a sequence of IEs.
//! Each parses its children with [`crate::tlv::Tlvs`], keeps the first of a single IE,
//! collects repeatable ones, skips unknown ones, and names a missing mandatory child.

use crate::ie::*;
use crate::tlv::{emit_all, emit_opt, need, once, push, Ie, Tlvs};
use crate::Error;

/// PDI (§7.5.2.2): what a PDR matches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pdi {
    pub source_interface: Option<SourceInterface>,
    pub f_teid: Option<FTeid>,
    pub network_instance: Option<NetworkInstance>,
    pub ue_ip_address: Option<UeIpAddress>,
    pub sdf_filters: Vec<SdfFilter>,
    pub qfis: Vec<Qfi>,
}

impl Ie for Pdi {
    const TYPE: u16 = ty::PDI;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut p = Pdi::default();
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::SOURCE_INTERFACE => once(&mut p.source_interface, raw)?,
                ty::F_TEID => once(&mut p.f_teid, raw)?,
                ty::NETWORK_INSTANCE => once(&mut p.network_instance, raw)?,
                ty::UE_IP_ADDRESS => once(&mut p.ue_ip_address, raw)?,
                ty::SDF_FILTER => push(&mut p.sdf_filters, raw)?,
                ty::QFI => push(&mut p.qfis, raw)?,
                _ => {}
            }
        }
        need(p.source_interface)?;
        Ok(p)
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        emit_opt(&self.source_interface, out);
        emit_opt(&self.f_teid, out);
        emit_opt(&self.network_instance, out);
        emit_opt(&self.ue_ip_address, out);
        emit_all(&self.sdf_filters, out);
        emit_all(&self.qfis, out);
    }
}

/// Create PDR (§7.5.2.2) and, with every field but the id optional, Update PDR
/// (§7.5.4.2): the const parameter is the IE type, the content is the same shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdr<const T: u16> {
    pub pdr_id: PdrId,
    pub precedence: Option<Precedence>,
    pub pdi: Option<Pdi>,
    pub outer_header_removal: Option<OuterHeaderRemoval>,
    pub far_id: Option<FarId>,
    pub urr_ids: Vec<UrrId>,
    pub qer_ids: Vec<QerId>,
}
pub type CreatePdr = Pdr<{ ty::CREATE_PDR }>;
pub type UpdatePdr = Pdr<{ ty::UPDATE_PDR }>;

impl<const T: u16> Ie for Pdr<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let (mut pdr_id, mut precedence, mut pdi, mut ohr, mut far_id) = (None, None, None, None, None);
        let (mut urr_ids, mut qer_ids) = (Vec::new(), Vec::new());
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::PDR_ID => once(&mut pdr_id, raw)?,
                ty::PRECEDENCE => once(&mut precedence, raw)?,
                ty::PDI => once(&mut pdi, raw)?,
                ty::OUTER_HEADER_REMOVAL => once(&mut ohr, raw)?,
                ty::FAR_ID => once(&mut far_id, raw)?,
                ty::URR_ID => push(&mut urr_ids, raw)?,
                ty::QER_ID => push(&mut qer_ids, raw)?,
                _ => {}
            }
        }
        let pdr = Pdr { pdr_id: need(pdr_id)?, precedence, pdi, outer_header_removal: ohr, far_id, urr_ids, qer_ids };
        if T == ty::CREATE_PDR {
            need(pdr.precedence)?;
            need(pdr.pdi.clone())?;
        }
        Ok(pdr)
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.pdr_id.emit(out);
        emit_opt(&self.precedence, out);
        emit_opt(&self.pdi, out);
        emit_opt(&self.outer_header_removal, out);
        emit_opt(&self.far_id, out);
        emit_all(&self.urr_ids, out);
        emit_all(&self.qer_ids, out);
    }
}

/// Forwarding Parameters (§7.5.2.3) and Update Forwarding Parameters (§7.5.4.3); the
/// latter may carry PFCPSMReq-Flags (SNDEM: send End Markers on the old path).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForwardingParams<const T: u16> {
    pub destination_interface: Option<DestinationInterface>,
    pub network_instance: Option<NetworkInstance>,
    pub outer_header_creation: Option<OuterHeaderCreation>,
    pub transport_level_marking: Option<TransportLevelMarking>,
    pub smreq_flags: Option<SmReqFlags>,
}
pub type ForwardingParameters = ForwardingParams<{ ty::FORWARDING_PARAMETERS }>;
pub type UpdateForwardingParameters = ForwardingParams<{ ty::UPDATE_FORWARDING_PARAMETERS }>;

impl<const T: u16> Ie for ForwardingParams<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut p = Self::default();
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::DESTINATION_INTERFACE => once(&mut p.destination_interface, raw)?,
                ty::NETWORK_INSTANCE => once(&mut p.network_instance, raw)?,
                ty::OUTER_HEADER_CREATION => once(&mut p.outer_header_creation, raw)?,
                ty::TRANSPORT_LEVEL_MARKING => once(&mut p.transport_level_marking, raw)?,
                ty::PFCPSMREQ_FLAGS if T == ty::UPDATE_FORWARDING_PARAMETERS => once(&mut p.smreq_flags, raw)?,
                _ => {}
            }
        }
        if T == ty::FORWARDING_PARAMETERS {
            need(p.destination_interface)?;
        }
        Ok(p)
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        emit_opt(&self.destination_interface, out);
        emit_opt(&self.network_instance, out);
        emit_opt(&self.outer_header_creation, out);
        emit_opt(&self.transport_level_marking, out);
        emit_opt(&self.smreq_flags, out);
    }
}

/// Create FAR (§7.5.2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateFar {
    pub far_id: FarId,
    pub apply_action: ApplyAction,
    pub forwarding_parameters: Option<ForwardingParameters>,
    pub bar_id: Option<BarId>,
}

impl CreateFar {
    /// A FAR that forwards to `to`, with `outer` (a GTP-U header toward a gNB or peer
    /// UPF) if given: the two FARs of a usual session, as an SMF sends them.
    pub fn forward(id: u32, to: Interface, outer: Option<OuterHeaderCreation>) -> CreateFar {
        CreateFar {
            far_id: U32Ie(id),
            apply_action: Flags(apply_action::FORW),
            forwarding_parameters: Some(ForwardingParameters {
                destination_interface: Some(InterfaceIe(to)),
                outer_header_creation: outer,
                ..Default::default()
            }),
            bar_id: None,
        }
    }
}

impl Ie for CreateFar {
    const TYPE: u16 = ty::CREATE_FAR;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let (mut far_id, mut apply_action, mut fp, mut bar_id) = (None, None, None, None);
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::FAR_ID => once(&mut far_id, raw)?,
                ty::APPLY_ACTION => once(&mut apply_action, raw)?,
                ty::FORWARDING_PARAMETERS => once(&mut fp, raw)?,
                ty::BAR_ID => once(&mut bar_id, raw)?,
                _ => {}
            }
        }
        Ok(CreateFar { far_id: need(far_id)?, apply_action: need(apply_action)?, forwarding_parameters: fp, bar_id })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.far_id.emit(out);
        self.apply_action.emit(out);
        emit_opt(&self.forwarding_parameters, out);
        emit_opt(&self.bar_id, out);
    }
}

/// Update FAR (§7.5.4.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateFar {
    pub far_id: FarId,
    pub apply_action: Option<ApplyAction>,
    pub update_forwarding_parameters: Option<UpdateForwardingParameters>,
    pub bar_id: Option<BarId>,
}

impl Ie for UpdateFar {
    const TYPE: u16 = ty::UPDATE_FAR;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let (mut far_id, mut apply_action, mut fp, mut bar_id) = (None, None, None, None);
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::FAR_ID => once(&mut far_id, raw)?,
                ty::APPLY_ACTION => once(&mut apply_action, raw)?,
                ty::UPDATE_FORWARDING_PARAMETERS => once(&mut fp, raw)?,
                ty::BAR_ID => once(&mut bar_id, raw)?,
                _ => {}
            }
        }
        Ok(UpdateFar { far_id: need(far_id)?, apply_action, update_forwarding_parameters: fp, bar_id })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.far_id.emit(out);
        emit_opt(&self.apply_action, out);
        emit_opt(&self.update_forwarding_parameters, out);
        emit_opt(&self.bar_id, out);
    }
}

/// Create QER (§7.5.2.5; Gate Status mandatory) and Update QER (§7.5.4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qer<const T: u16> {
    pub qer_id: QerId,
    pub gate_status: Option<GateStatus>,
    pub mbr: Option<Mbr>,
    pub gbr: Option<Gbr>,
    pub qfi: Option<Qfi>,
}
pub type CreateQer = Qer<{ ty::CREATE_QER }>;
pub type UpdateQer = Qer<{ ty::UPDATE_QER }>;

impl<const T: u16> Ie for Qer<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let (mut qer_id, mut gate_status, mut mbr, mut gbr, mut qfi) = (None, None, None, None, None);
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::QER_ID => once(&mut qer_id, raw)?,
                ty::GATE_STATUS => once(&mut gate_status, raw)?,
                ty::MBR => once(&mut mbr, raw)?,
                ty::GBR => once(&mut gbr, raw)?,
                ty::QFI => once(&mut qfi, raw)?,
                _ => {}
            }
        }
        if T == ty::CREATE_QER {
            need(gate_status)?;
        }
        Ok(Qer { qer_id: need(qer_id)?, gate_status, mbr, gbr, qfi })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.qer_id.emit(out);
        emit_opt(&self.gate_status, out);
        emit_opt(&self.mbr, out);
        emit_opt(&self.gbr, out);
        emit_opt(&self.qfi, out);
    }
}

/// Create URR (§7.5.2.4; Measurement Method and Reporting Triggers mandatory) and
/// Update URR (§7.5.4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Urr<const T: u16> {
    pub urr_id: UrrId,
    pub measurement_method: Option<MeasurementMethod>,
    pub reporting_triggers: Option<ReportingTriggers>,
    pub measurement_period: Option<MeasurementPeriod>,
    pub volume_threshold: Option<VolumeThreshold>,
    pub volume_quota: Option<VolumeQuota>,
    pub time_threshold: Option<TimeThreshold>,
    pub time_quota: Option<TimeQuota>,
}
pub type CreateUrr = Urr<{ ty::CREATE_URR }>;
pub type UpdateUrr = Urr<{ ty::UPDATE_URR }>;

impl CreateUrr {
    /// A URR measuring `method` and reporting on `triggers` (`measurement_method::*`,
    /// `trigger::*` bits), with no period, threshold or quota: what the others add.
    pub fn measuring(id: u32, method: u64, triggers: u64) -> CreateUrr {
        Urr {
            urr_id: U32Ie(id),
            measurement_method: Some(Flags(method)),
            reporting_triggers: Some(Flags(triggers)),
            measurement_period: None,
            volume_threshold: None,
            volume_quota: None,
            time_threshold: None,
            time_quota: None,
        }
    }
}

impl<const T: u16> Ie for Urr<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut urr_id = None;
        let mut u = Urr::<T> {
            urr_id: U32Ie(0),
            measurement_method: None,
            reporting_triggers: None,
            measurement_period: None,
            volume_threshold: None,
            volume_quota: None,
            time_threshold: None,
            time_quota: None,
        };
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::URR_ID => once(&mut urr_id, raw)?,
                ty::MEASUREMENT_METHOD => once(&mut u.measurement_method, raw)?,
                ty::REPORTING_TRIGGERS => once(&mut u.reporting_triggers, raw)?,
                ty::MEASUREMENT_PERIOD => once(&mut u.measurement_period, raw)?,
                ty::VOLUME_THRESHOLD => once(&mut u.volume_threshold, raw)?,
                ty::VOLUME_QUOTA => once(&mut u.volume_quota, raw)?,
                ty::TIME_THRESHOLD => once(&mut u.time_threshold, raw)?,
                ty::TIME_QUOTA => once(&mut u.time_quota, raw)?,
                _ => {}
            }
        }
        u.urr_id = need(urr_id)?;
        if T == ty::CREATE_URR {
            need(u.measurement_method)?;
            need(u.reporting_triggers)?;
        }
        Ok(u)
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.urr_id.emit(out);
        emit_opt(&self.measurement_method, out);
        emit_opt(&self.reporting_triggers, out);
        emit_opt(&self.measurement_period, out);
        emit_opt(&self.volume_threshold, out);
        emit_opt(&self.volume_quota, out);
        emit_opt(&self.time_threshold, out);
        emit_opt(&self.time_quota, out);
    }
}

/// Create BAR (§7.5.2.6) and Update BAR in a Session Modification Request (§7.5.4.11):
/// the buffering instructions of the session's FARs that buffer and name this BAR. One
/// shape; only the BAR ID is mandatory in either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar<const T: u16> {
    pub bar_id: BarId,
    pub dl_data_notification_delay: Option<DlDataNotificationDelay>,
    pub suggested_buffering_packets_count: Option<SuggestedBufferingPacketsCount>,
}
pub type CreateBar = Bar<{ ty::CREATE_BAR }>;
pub type UpdateBarSmr = Bar<{ ty::UPDATE_BAR_SMR }>;

impl<const T: u16> Ie for Bar<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let (mut bar_id, mut delay, mut count) = (None, None, None);
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::BAR_ID => once(&mut bar_id, raw)?,
                ty::DL_DATA_NOTIFICATION_DELAY => once(&mut delay, raw)?,
                ty::SUGGESTED_BUFFERING_PACKETS_COUNT => once(&mut count, raw)?,
                _ => {}
            }
        }
        Ok(Bar { bar_id: need(bar_id)?, dl_data_notification_delay: delay, suggested_buffering_packets_count: count })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.bar_id.emit(out);
        emit_opt(&self.dl_data_notification_delay, out);
        emit_opt(&self.suggested_buffering_packets_count, out);
    }
}

/// Update BAR in a Session Report Response (§7.5.9.2): the SMF's answer to a Downlink
/// Data Report may ask for extended buffering (DL Buffering Duration, with a packet
/// count for it) besides the fields of an Update BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateBarSrr {
    pub bar_id: BarId,
    pub dl_data_notification_delay: Option<DlDataNotificationDelay>,
    pub dl_buffering_duration: Option<DlBufferingDuration>,
    pub dl_buffering_suggested_packet_count: Option<DlBufferingSuggestedPacketCount>,
    pub suggested_buffering_packets_count: Option<SuggestedBufferingPacketsCount>,
}

impl Ie for UpdateBarSrr {
    const TYPE: u16 = ty::UPDATE_BAR_SRR;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let (mut bar_id, mut delay, mut duration, mut dl_count, mut count) = (None, None, None, None, None);
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::BAR_ID => once(&mut bar_id, raw)?,
                ty::DL_DATA_NOTIFICATION_DELAY => once(&mut delay, raw)?,
                ty::DL_BUFFERING_DURATION => once(&mut duration, raw)?,
                ty::DL_BUFFERING_SUGGESTED_PACKET_COUNT => once(&mut dl_count, raw)?,
                ty::SUGGESTED_BUFFERING_PACKETS_COUNT => once(&mut count, raw)?,
                _ => {}
            }
        }
        Ok(UpdateBarSrr {
            bar_id: need(bar_id)?,
            dl_data_notification_delay: delay,
            dl_buffering_duration: duration,
            dl_buffering_suggested_packet_count: dl_count,
            suggested_buffering_packets_count: count,
        })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.bar_id.emit(out);
        emit_opt(&self.dl_data_notification_delay, out);
        emit_opt(&self.dl_buffering_duration, out);
        emit_opt(&self.dl_buffering_suggested_packet_count, out);
        emit_opt(&self.suggested_buffering_packets_count, out);
    }
}

/// Remove PDR / FAR / QER / URR (§7.5.4.6–§7.5.4.9): just the rule id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remove<const T: u16, Id: Ie>(pub Id);
pub type RemovePdr = Remove<{ ty::REMOVE_PDR }, PdrId>;
pub type RemoveFar = Remove<{ ty::REMOVE_FAR }, FarId>;
pub type RemoveQer = Remove<{ ty::REMOVE_QER }, QerId>;
pub type RemoveUrr = Remove<{ ty::REMOVE_URR }, UrrId>;
pub type RemoveBar = Remove<{ ty::REMOVE_BAR }, BarId>;
/// Query URR (§7.5.4.10) has the same shape.
pub type QueryUrr = Remove<{ ty::QUERY_URR }, UrrId>;

impl<const T: u16, Id: Ie> Ie for Remove<T, Id> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut id = None;
        for raw in Tlvs::new(v) {
            let raw = raw?;
            if raw.ty == Id::TYPE {
                once(&mut id, raw)?;
            }
        }
        Ok(Remove(need(id)?))
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.0.emit(out);
    }
}

/// Created PDR (§7.5.3.2): the F-TEID / UE address the UP function chose for a PDR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedPdr {
    pub pdr_id: PdrId,
    pub f_teid: Option<FTeid>,
    pub ue_ip_address: Option<UeIpAddress>,
}

impl Ie for CreatedPdr {
    const TYPE: u16 = ty::CREATED_PDR;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let (mut pdr_id, mut f_teid, mut ue_ip_address) = (None, None, None);
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::PDR_ID => once(&mut pdr_id, raw)?,
                ty::F_TEID => once(&mut f_teid, raw)?,
                ty::UE_IP_ADDRESS => once(&mut ue_ip_address, raw)?,
                _ => {}
            }
        }
        Ok(CreatedPdr { pdr_id: need(pdr_id)?, f_teid, ue_ip_address })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.pdr_id.emit(out);
        emit_opt(&self.f_teid, out);
        emit_opt(&self.ue_ip_address, out);
    }
}

/// Usage Report (§7.5.5.2, §7.5.7.2, §7.5.8.3): one shape, three IE types (in a
/// Modification Response, a Deletion Response, a Report Request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageReport<const T: u16> {
    pub urr_id: UrrId,
    pub ur_seqn: UrSeqn,
    pub trigger: UsageReportTrigger,
    pub start_time: Option<StartTime>,
    pub end_time: Option<EndTime>,
    pub volume: Option<VolumeMeasurement>,
    pub duration: Option<DurationMeasurement>,
}
pub type UsageReportSmr = UsageReport<{ ty::USAGE_REPORT_SMR }>;
pub type UsageReportSdr = UsageReport<{ ty::USAGE_REPORT_SDR }>;
pub type UsageReportSrr = UsageReport<{ ty::USAGE_REPORT_SRR }>;

impl<const T: u16> Ie for UsageReport<T> {
    const TYPE: u16 = T;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let (mut urr_id, mut seqn, mut trigger, mut start, mut end, mut volume, mut duration) = (None, None, None, None, None, None, None);
        for raw in Tlvs::new(v) {
            let raw = raw?;
            match raw.ty {
                ty::URR_ID => once(&mut urr_id, raw)?,
                ty::UR_SEQN => once(&mut seqn, raw)?,
                ty::USAGE_REPORT_TRIGGER => once(&mut trigger, raw)?,
                ty::START_TIME => once(&mut start, raw)?,
                ty::END_TIME => once(&mut end, raw)?,
                ty::VOLUME_MEASUREMENT => once(&mut volume, raw)?,
                ty::DURATION_MEASUREMENT => once(&mut duration, raw)?,
                _ => {}
            }
        }
        Ok(UsageReport {
            urr_id: need(urr_id)?,
            ur_seqn: need(seqn)?,
            trigger: need(trigger)?,
            start_time: start,
            end_time: end,
            volume,
            duration,
        })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        self.urr_id.emit(out);
        self.ur_seqn.emit(out);
        self.trigger.emit(out);
        emit_opt(&self.start_time, out);
        emit_opt(&self.end_time, out);
        emit_opt(&self.volume, out);
        emit_opt(&self.duration, out);
    }
}

/// Downlink Data Report (§7.5.8.2): the PDR(s) whose traffic is being buffered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownlinkDataReport {
    pub pdr_ids: Vec<PdrId>,
}

impl Ie for DownlinkDataReport {
    const TYPE: u16 = ty::DOWNLINK_DATA_REPORT;
    fn parse(v: &[u8]) -> Result<Self, Error> {
        let mut pdr_ids = Vec::new();
        for raw in Tlvs::new(v) {
            let raw = raw?;
            if raw.ty == ty::PDR_ID {
                push(&mut pdr_ids, raw)?;
            }
        }
        if pdr_ids.is_empty() {
            return Err(Error::MandatoryMissing(ty::PDR_ID));
        }
        Ok(DownlinkDataReport { pdr_ids })
    }
    fn emit_value(&self, out: &mut Vec<u8>) {
        emit_all(&self.pdr_ids, out);
    }
}
