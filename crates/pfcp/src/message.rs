//! PFCP messages (TS 29.244 §7.4 node messages, §7.5 session messages): the IEs each
//! carries, which are mandatory, and one [`Message`] enum over them.

use crate::grouped::*;
use crate::header::{Header, MessageType};
use crate::ie::*;
use crate::tlv::{emit_all, emit_opt, need, once, push, Ie, RawIe, Tlvs};
use crate::Error;

/// Walks a message body, handing each IE to `take`, which parses the ones it knows.
fn walk(body: &[u8], mut take: impl FnMut(RawIe) -> Result<(), Error>) -> Result<(), Error> {
    for raw in Tlvs::new(body) {
        take(raw?)?;
    }
    Ok(())
}

/// Heartbeat Request / Response (§7.4.2): the sender's Recovery Time Stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub recovery_time_stamp: RecoveryTimeStamp,
}

/// Association Setup Request (§7.4.4.1) and Association Update Request (§7.4.4.3: the
/// Recovery Time Stamp absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssociationRequest {
    pub node_id: NodeId,
    pub recovery_time_stamp: Option<RecoveryTimeStamp>,
    pub up_function_features: Option<UpFunctionFeatures>,
    pub cp_function_features: Option<CpFunctionFeatures>,
}

/// Association Setup / Update / Release Response (§7.4.4.2, .4, .6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssociationResponse {
    pub node_id: NodeId,
    pub cause: CauseIe,
    pub recovery_time_stamp: Option<RecoveryTimeStamp>,
    pub up_function_features: Option<UpFunctionFeatures>,
    pub cp_function_features: Option<CpFunctionFeatures>,
}

/// Association Release Request (§7.4.4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssociationReleaseRequest {
    pub node_id: NodeId,
}

/// Session Establishment Request (§7.5.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEstablishmentRequest {
    pub node_id: NodeId,
    pub cp_f_seid: FSeid,
    pub create_pdr: Vec<CreatePdr>,
    pub create_far: Vec<CreateFar>,
    pub create_urr: Vec<CreateUrr>,
    pub create_qer: Vec<CreateQer>,
    pub create_bar: Option<CreateBar>,
    pub pdn_type: Option<PdnType>,
}

/// Session Establishment Response (§7.5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEstablishmentResponse {
    pub node_id: NodeId,
    pub cause: CauseIe,
    pub offending_ie: Option<OffendingIe>,
    pub up_f_seid: Option<FSeid>,
    pub created_pdr: Vec<CreatedPdr>,
    /// With cause 73 (Rule creation/modification failure): the rule that failed.
    pub failed_rule_id: Option<FailedRuleId>,
}

/// Session Modification Request (§7.5.4).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionModificationRequest {
    pub cp_f_seid: Option<FSeid>,
    pub remove_pdr: Vec<RemovePdr>,
    pub remove_far: Vec<RemoveFar>,
    pub remove_urr: Vec<RemoveUrr>,
    pub remove_qer: Vec<RemoveQer>,
    pub create_pdr: Vec<CreatePdr>,
    pub create_far: Vec<CreateFar>,
    pub create_urr: Vec<CreateUrr>,
    pub create_qer: Vec<CreateQer>,
    pub update_pdr: Vec<UpdatePdr>,
    pub update_far: Vec<UpdateFar>,
    pub update_urr: Vec<UpdateUrr>,
    pub update_qer: Vec<UpdateQer>,
    pub query_urr: Vec<QueryUrr>,
    pub flags: Option<SmReqFlags>,
    pub remove_bar: Option<RemoveBar>,
    pub create_bar: Option<CreateBar>,
    pub update_bar: Option<UpdateBarSmr>,
}

/// Session Modification Response (§7.5.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionModificationResponse {
    pub cause: CauseIe,
    pub offending_ie: Option<OffendingIe>,
    pub created_pdr: Vec<CreatedPdr>,
    pub usage_report: Vec<UsageReportSmr>,
    /// With cause 73 (Rule creation/modification failure): the rule that failed.
    pub failed_rule_id: Option<FailedRuleId>,
}

/// Session Deletion Response (§7.5.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDeletionResponse {
    pub cause: CauseIe,
    pub offending_ie: Option<OffendingIe>,
    pub usage_report: Vec<UsageReportSdr>,
}

/// Session Report Request (§7.5.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionReportRequest {
    pub report_type: ReportType,
    pub downlink_data_report: Option<DownlinkDataReport>,
    pub usage_report: Vec<UsageReportSrr>,
}

/// Session Report Response (§7.5.9): a Cause, and the SMF's buffering instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionReportResponse {
    pub cause: CauseIe,
    pub offending_ie: Option<OffendingIe>,
    pub update_bar: Option<UpdateBarSrr>,
    pub flags: Option<SrRspFlags>,
}

/// A message body, by type. Types vecgate neither sends nor handles are `Other` (the
/// UPF answers those requests it must, e.g. PFD Management, with a Cause).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    HeartbeatRequest(Heartbeat),
    HeartbeatResponse(Heartbeat),
    AssociationSetupRequest(AssociationRequest),
    AssociationSetupResponse(AssociationResponse),
    AssociationUpdateRequest(AssociationRequest),
    AssociationUpdateResponse(AssociationResponse),
    AssociationReleaseRequest(AssociationReleaseRequest),
    AssociationReleaseResponse(AssociationResponse),
    VersionNotSupportedResponse,
    SessionEstablishmentRequest(SessionEstablishmentRequest),
    SessionEstablishmentResponse(SessionEstablishmentResponse),
    SessionModificationRequest(SessionModificationRequest),
    SessionModificationResponse(SessionModificationResponse),
    SessionDeletionRequest,
    SessionDeletionResponse(SessionDeletionResponse),
    SessionReportRequest(SessionReportRequest),
    SessionReportResponse(SessionReportResponse),
    Other(MessageType),
}

impl Message {
    pub fn msg_type(&self) -> MessageType {
        use MessageType as T;
        match self {
            Message::HeartbeatRequest(_) => T::HeartbeatRequest,
            Message::HeartbeatResponse(_) => T::HeartbeatResponse,
            Message::AssociationSetupRequest(_) => T::AssociationSetupRequest,
            Message::AssociationSetupResponse(_) => T::AssociationSetupResponse,
            Message::AssociationUpdateRequest(_) => T::AssociationUpdateRequest,
            Message::AssociationUpdateResponse(_) => T::AssociationUpdateResponse,
            Message::AssociationReleaseRequest(_) => T::AssociationReleaseRequest,
            Message::AssociationReleaseResponse(_) => T::AssociationReleaseResponse,
            Message::VersionNotSupportedResponse => T::VersionNotSupportedResponse,
            Message::SessionEstablishmentRequest(_) => T::SessionEstablishmentRequest,
            Message::SessionEstablishmentResponse(_) => T::SessionEstablishmentResponse,
            Message::SessionModificationRequest(_) => T::SessionModificationRequest,
            Message::SessionModificationResponse(_) => T::SessionModificationResponse,
            Message::SessionDeletionRequest => T::SessionDeletionRequest,
            Message::SessionDeletionResponse(_) => T::SessionDeletionResponse,
            Message::SessionReportRequest(_) => T::SessionReportRequest,
            Message::SessionReportResponse(_) => T::SessionReportResponse,
            Message::Other(t) => *t,
        }
    }

    /// Parses a whole datagram: header, then the body its type calls for.
    pub fn parse(data: &[u8]) -> Result<(Header, Message), Error> {
        let (h, body) = Header::parse(data)?;
        Ok((h, Message::parse_body(h.msg_type, body)?))
    }

    /// Parses the IEs of a message of type `t`.
    pub fn parse_body(t: MessageType, body: &[u8]) -> Result<Message, Error> {
        use MessageType as T;
        Ok(match t {
            T::HeartbeatRequest => Message::HeartbeatRequest(parse_heartbeat(body)?),
            T::HeartbeatResponse => Message::HeartbeatResponse(parse_heartbeat(body)?),
            T::AssociationSetupRequest => {
                let r = parse_association_request(body)?;
                need(r.recovery_time_stamp)?;
                Message::AssociationSetupRequest(r)
            }
            T::AssociationUpdateRequest => Message::AssociationUpdateRequest(parse_association_request(body)?),
            T::AssociationSetupResponse => {
                let r = parse_association_response(body)?;
                need(r.recovery_time_stamp)?;
                Message::AssociationSetupResponse(r)
            }
            T::AssociationUpdateResponse => Message::AssociationUpdateResponse(parse_association_response(body)?),
            T::AssociationReleaseResponse => Message::AssociationReleaseResponse(parse_association_response(body)?),
            T::AssociationReleaseRequest => {
                let mut node_id = None;
                walk(body, |raw| if raw.ty == ty::NODE_ID { once(&mut node_id, raw) } else { Ok(()) })?;
                Message::AssociationReleaseRequest(AssociationReleaseRequest { node_id: need(node_id)? })
            }
            T::VersionNotSupportedResponse => Message::VersionNotSupportedResponse,
            T::SessionEstablishmentRequest => Message::SessionEstablishmentRequest(parse_establishment_request(body)?),
            T::SessionEstablishmentResponse => {
                let (mut node_id, mut cause, mut off, mut fseid, mut created, mut failed) = (None, None, None, None, Vec::new(), None);
                walk(body, |raw| match raw.ty {
                    ty::NODE_ID => once(&mut node_id, raw),
                    ty::CAUSE => once(&mut cause, raw),
                    ty::OFFENDING_IE => once(&mut off, raw),
                    ty::F_SEID => once(&mut fseid, raw),
                    ty::CREATED_PDR => push(&mut created, raw),
                    ty::FAILED_RULE_ID => once(&mut failed, raw),
                    _ => Ok(()),
                })?;
                Message::SessionEstablishmentResponse(SessionEstablishmentResponse {
                    node_id: need(node_id)?,
                    cause: need(cause)?,
                    offending_ie: off,
                    up_f_seid: fseid,
                    created_pdr: created,
                    failed_rule_id: failed,
                })
            }
            T::SessionModificationRequest => Message::SessionModificationRequest(parse_modification_request(body)?),
            T::SessionModificationResponse => {
                let (mut cause, mut off, mut created, mut reports, mut failed) = (None, None, Vec::new(), Vec::new(), None);
                walk(body, |raw| match raw.ty {
                    ty::CAUSE => once(&mut cause, raw),
                    ty::OFFENDING_IE => once(&mut off, raw),
                    ty::CREATED_PDR => push(&mut created, raw),
                    ty::USAGE_REPORT_SMR => push(&mut reports, raw),
                    ty::FAILED_RULE_ID => once(&mut failed, raw),
                    _ => Ok(()),
                })?;
                Message::SessionModificationResponse(SessionModificationResponse {
                    cause: need(cause)?,
                    offending_ie: off,
                    created_pdr: created,
                    usage_report: reports,
                    failed_rule_id: failed,
                })
            }
            T::SessionDeletionRequest => {
                // No IE is mandatory; a malformed one is still an error.
                walk(body, |_| Ok(()))?;
                Message::SessionDeletionRequest
            }
            T::SessionDeletionResponse => {
                let (mut cause, mut off, mut reports) = (None, None, Vec::new());
                walk(body, |raw| match raw.ty {
                    ty::CAUSE => once(&mut cause, raw),
                    ty::OFFENDING_IE => once(&mut off, raw),
                    ty::USAGE_REPORT_SDR => push(&mut reports, raw),
                    _ => Ok(()),
                })?;
                Message::SessionDeletionResponse(SessionDeletionResponse { cause: need(cause)?, offending_ie: off, usage_report: reports })
            }
            T::SessionReportRequest => {
                let (mut rt, mut dldr, mut reports) = (None, None, Vec::new());
                walk(body, |raw| match raw.ty {
                    ty::REPORT_TYPE => once(&mut rt, raw),
                    ty::DOWNLINK_DATA_REPORT => once(&mut dldr, raw),
                    ty::USAGE_REPORT_SRR => push(&mut reports, raw),
                    _ => Ok(()),
                })?;
                Message::SessionReportRequest(SessionReportRequest {
                    report_type: need(rt)?,
                    downlink_data_report: dldr,
                    usage_report: reports,
                })
            }
            T::SessionReportResponse => {
                let (mut cause, mut off, mut update_bar, mut flags) = (None, None, None, None);
                walk(body, |raw| match raw.ty {
                    ty::CAUSE => once(&mut cause, raw),
                    ty::OFFENDING_IE => once(&mut off, raw),
                    ty::UPDATE_BAR_SRR => once(&mut update_bar, raw),
                    ty::PFCPSRRSP_FLAGS => once(&mut flags, raw),
                    _ => Ok(()),
                })?;
                Message::SessionReportResponse(SessionReportResponse { cause: need(cause)?, offending_ie: off, update_bar, flags })
            }
            other => Message::Other(other),
        })
    }

    /// Appends the whole message (header with `header`'s SEID, sequence and priority, the
    /// type from the body).
    pub fn emit(&self, header: &Header, out: &mut Vec<u8>) {
        let start = out.len();
        Header { msg_type: self.msg_type(), ..*header }.emit(out);
        self.emit_body(out);
        Header::finish(out, start);
    }

    pub fn to_bytes(&self, header: &Header) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        self.emit(header, &mut v);
        v
    }

    fn emit_body(&self, out: &mut Vec<u8>) {
        match self {
            Message::HeartbeatRequest(m) | Message::HeartbeatResponse(m) => m.recovery_time_stamp.emit(out),
            Message::AssociationSetupRequest(m) | Message::AssociationUpdateRequest(m) => {
                m.node_id.emit(out);
                emit_opt(&m.recovery_time_stamp, out);
                emit_opt(&m.up_function_features, out);
                emit_opt(&m.cp_function_features, out);
            }
            Message::AssociationSetupResponse(m) | Message::AssociationUpdateResponse(m) | Message::AssociationReleaseResponse(m) => {
                m.node_id.emit(out);
                m.cause.emit(out);
                emit_opt(&m.recovery_time_stamp, out);
                emit_opt(&m.up_function_features, out);
                emit_opt(&m.cp_function_features, out);
            }
            Message::AssociationReleaseRequest(m) => m.node_id.emit(out),
            Message::VersionNotSupportedResponse | Message::SessionDeletionRequest | Message::Other(_) => {}
            Message::SessionEstablishmentRequest(m) => {
                m.node_id.emit(out);
                m.cp_f_seid.emit(out);
                emit_all(&m.create_pdr, out);
                emit_all(&m.create_far, out);
                emit_all(&m.create_urr, out);
                emit_all(&m.create_qer, out);
                emit_opt(&m.create_bar, out);
                emit_opt(&m.pdn_type, out);
            }
            Message::SessionEstablishmentResponse(m) => {
                m.node_id.emit(out);
                m.cause.emit(out);
                emit_opt(&m.offending_ie, out);
                emit_opt(&m.up_f_seid, out);
                emit_all(&m.created_pdr, out);
                emit_opt(&m.failed_rule_id, out);
            }
            Message::SessionModificationRequest(m) => {
                emit_opt(&m.cp_f_seid, out);
                emit_all(&m.remove_pdr, out);
                emit_all(&m.remove_far, out);
                emit_all(&m.remove_urr, out);
                emit_all(&m.remove_qer, out);
                emit_all(&m.create_pdr, out);
                emit_all(&m.create_far, out);
                emit_all(&m.create_urr, out);
                emit_all(&m.create_qer, out);
                emit_all(&m.update_pdr, out);
                emit_all(&m.update_far, out);
                emit_all(&m.update_urr, out);
                emit_all(&m.update_qer, out);
                emit_all(&m.query_urr, out);
                emit_opt(&m.flags, out);
                emit_opt(&m.remove_bar, out);
                emit_opt(&m.create_bar, out);
                emit_opt(&m.update_bar, out);
            }
            Message::SessionModificationResponse(m) => {
                m.cause.emit(out);
                emit_opt(&m.offending_ie, out);
                emit_all(&m.created_pdr, out);
                emit_all(&m.usage_report, out);
                emit_opt(&m.failed_rule_id, out);
            }
            Message::SessionDeletionResponse(m) => {
                m.cause.emit(out);
                emit_opt(&m.offending_ie, out);
                emit_all(&m.usage_report, out);
            }
            Message::SessionReportRequest(m) => {
                m.report_type.emit(out);
                emit_opt(&m.downlink_data_report, out);
                emit_all(&m.usage_report, out);
            }
            Message::SessionReportResponse(m) => {
                m.cause.emit(out);
                emit_opt(&m.offending_ie, out);
                emit_opt(&m.update_bar, out);
                emit_opt(&m.flags, out);
            }
        }
    }
}

fn parse_heartbeat(body: &[u8]) -> Result<Heartbeat, Error> {
    let mut rts = None;
    walk(body, |raw| if raw.ty == ty::RECOVERY_TIME_STAMP { once(&mut rts, raw) } else { Ok(()) })?;
    Ok(Heartbeat { recovery_time_stamp: need(rts)? })
}

fn parse_association_request(body: &[u8]) -> Result<AssociationRequest, Error> {
    let (mut node_id, mut rts, mut up, mut cp) = (None, None, None, None);
    walk(body, |raw| match raw.ty {
        ty::NODE_ID => once(&mut node_id, raw),
        ty::RECOVERY_TIME_STAMP => once(&mut rts, raw),
        ty::UP_FUNCTION_FEATURES => once(&mut up, raw),
        ty::CP_FUNCTION_FEATURES => once(&mut cp, raw),
        _ => Ok(()),
    })?;
    Ok(AssociationRequest { node_id: need(node_id)?, recovery_time_stamp: rts, up_function_features: up, cp_function_features: cp })
}

fn parse_association_response(body: &[u8]) -> Result<AssociationResponse, Error> {
    let (mut node_id, mut cause, mut rts, mut up, mut cp) = (None, None, None, None, None);
    walk(body, |raw| match raw.ty {
        ty::NODE_ID => once(&mut node_id, raw),
        ty::CAUSE => once(&mut cause, raw),
        ty::RECOVERY_TIME_STAMP => once(&mut rts, raw),
        ty::UP_FUNCTION_FEATURES => once(&mut up, raw),
        ty::CP_FUNCTION_FEATURES => once(&mut cp, raw),
        _ => Ok(()),
    })?;
    Ok(AssociationResponse {
        node_id: need(node_id)?,
        cause: need(cause)?,
        recovery_time_stamp: rts,
        up_function_features: up,
        cp_function_features: cp,
    })
}

fn parse_establishment_request(body: &[u8]) -> Result<SessionEstablishmentRequest, Error> {
    let (mut node_id, mut fseid, mut pdn_type, mut bar) = (None, None, None, None);
    let (mut pdrs, mut fars, mut urrs, mut qers) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    walk(body, |raw| match raw.ty {
        ty::NODE_ID => once(&mut node_id, raw),
        ty::F_SEID => once(&mut fseid, raw),
        ty::CREATE_PDR => push(&mut pdrs, raw),
        ty::CREATE_FAR => push(&mut fars, raw),
        ty::CREATE_URR => push(&mut urrs, raw),
        ty::CREATE_QER => push(&mut qers, raw),
        ty::PDN_TYPE => once(&mut pdn_type, raw),
        ty::CREATE_BAR => once(&mut bar, raw),
        _ => Ok(()),
    })?;
    let node_id = need(node_id)?;
    let cp_f_seid = need(fseid)?;
    if pdrs.is_empty() {
        return Err(Error::MandatoryMissing(ty::CREATE_PDR));
    }
    if fars.is_empty() {
        return Err(Error::MandatoryMissing(ty::CREATE_FAR));
    }
    Ok(SessionEstablishmentRequest {
        node_id,
        cp_f_seid,
        create_pdr: pdrs,
        create_far: fars,
        create_urr: urrs,
        create_qer: qers,
        create_bar: bar,
        pdn_type,
    })
}

fn parse_modification_request(body: &[u8]) -> Result<SessionModificationRequest, Error> {
    let mut m = SessionModificationRequest::default();
    walk(body, |raw| match raw.ty {
        ty::F_SEID => once(&mut m.cp_f_seid, raw),
        ty::REMOVE_PDR => push(&mut m.remove_pdr, raw),
        ty::REMOVE_FAR => push(&mut m.remove_far, raw),
        ty::REMOVE_URR => push(&mut m.remove_urr, raw),
        ty::REMOVE_QER => push(&mut m.remove_qer, raw),
        ty::CREATE_PDR => push(&mut m.create_pdr, raw),
        ty::CREATE_FAR => push(&mut m.create_far, raw),
        ty::CREATE_URR => push(&mut m.create_urr, raw),
        ty::CREATE_QER => push(&mut m.create_qer, raw),
        ty::UPDATE_PDR => push(&mut m.update_pdr, raw),
        ty::UPDATE_FAR => push(&mut m.update_far, raw),
        ty::UPDATE_URR => push(&mut m.update_urr, raw),
        ty::UPDATE_QER => push(&mut m.update_qer, raw),
        ty::QUERY_URR => push(&mut m.query_urr, raw),
        ty::PFCPSMREQ_FLAGS => once(&mut m.flags, raw),
        ty::REMOVE_BAR => once(&mut m.remove_bar, raw),
        ty::CREATE_BAR => once(&mut m.create_bar, raw),
        ty::UPDATE_BAR_SMR => once(&mut m.update_bar, raw),
        _ => Ok(()),
    })?;
    Ok(m)
}
