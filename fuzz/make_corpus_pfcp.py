"""Seed corpus for the `pfcp` fuzz target, built by scapy's PFCP layer (an independent
implementation): every node and session message vecgate handles, a session with uplink and
downlink PDRs, FARs, a QER and a URR, plus truncations and bit flips. The first file of each
message (seed-NNN with NNN a multiple of 6) is the message itself; crates/pfcp/tests/scapy.rs
checks that our parser reads back what scapy was asked to encode.
Run from this folder: python3 make_corpus_pfcp.py (the output is committed)."""
import random
from pathlib import Path

from scapy.all import raw
from scapy.contrib.pfcp import (
    PFCP, IE_ApplyAction, IE_CreateFAR, IE_CreatePDR, IE_CreateQER, IE_CreateURR, IE_DestinationInterface,
    IE_FAR_Id, IE_FSEID, IE_FTEID, IE_ForwardingParameters, IE_GateStatus, IE_MBR, IE_MeasurementMethod,
    IE_NetworkInstance, IE_NodeId, IE_OuterHeaderCreation, IE_OuterHeaderRemoval, IE_PDI, IE_PDR_Id,
    IE_Precedence, IE_QER_Id, IE_QFI, IE_RecoveryTimeStamp, IE_ReportType, IE_ReportingTriggers,
    IE_SDF_Filter, IE_SourceInterface, IE_UE_IP_Address, IE_URR_Id, IE_UR_SEQN, IE_UpdateFAR,
    IE_UpdateForwardingParameters, IE_UsageReport_SRR, IE_UsageReportTrigger, IE_VolumeMeasurement,
    IE_VolumeThreshold, IE_PFCPSMReqFlags, IE_RemovePDR, IE_Cause, IE_BAR_Id, IE_Create_BAR,
    IE_DownlinkDataNotificationDelay, IE_SuggestedBufferingPacketsCount, IE_Update_BAR_SMR, IE_Remove_BAR,
    IE_UpdateBAR_SRR, IE_DLBufferingDuration, IE_DLBufferingSuggestedPacketCount, IE_PFCPSRRspFlags,
    PFCPAssociationReleaseRequest, PFCPAssociationSetupRequest, PFCPHeartbeatRequest,
    PFCPSessionDeletionRequest, PFCPSessionEstablishmentRequest, PFCPSessionModificationRequest,
    PFCPSessionReportRequest, PFCPSessionReportResponse)

SMF, UPF_N3, GNB, GNB2, UE = "198.18.7.1", "198.18.7.2", "198.18.7.10", "198.18.7.11", "198.19.7.1"
rnd = random.Random(21)
msgs = [
    PFCP(version=1, S=0, seq=1) / PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=3900000000)]),
    PFCP(version=1, S=0, seq=2) / PFCPAssociationSetupRequest(IE_list=[
        IE_NodeId(id_type=0, ipv4=SMF), IE_RecoveryTimeStamp(timestamp=3900000001)]),
    PFCP(version=1, S=1, seid=0, seq=3) / PFCPSessionEstablishmentRequest(IE_list=[
        IE_NodeId(id_type=0, ipv4=SMF),
        IE_FSEID(v4=1, seid=0x1111, ipv4=SMF),
        IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=1), IE_Precedence(precedence=255),
            IE_PDI(IE_list=[IE_SourceInterface(interface=0), IE_FTEID(V4=1, TEID=0x100, ipv4=UPF_N3),
                            IE_NetworkInstance(instance="internet"), IE_UE_IP_Address(V4=1, ipv4=UE),
                            IE_SDF_Filter(FD=1, flow_description="permit out ip from any to assigned"), IE_QFI(QFI=9)]),
            IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=1), IE_QER_Id(id=1), IE_URR_Id(id=1)]),
        IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=2), IE_Precedence(precedence=255),
            IE_PDI(IE_list=[IE_SourceInterface(interface=1), IE_UE_IP_Address(V4=1, SD=1, ipv4=UE)]),
            IE_FAR_Id(id=2), IE_QER_Id(id=1), IE_URR_Id(id=1)]),
        IE_CreateFAR(IE_list=[IE_FAR_Id(id=1), IE_ApplyAction(FORW=1),
                              IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface=1)])]),
        IE_CreateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(FORW=1),
                              IE_ForwardingParameters(IE_list=[
                                  IE_DestinationInterface(interface=0),
                                  IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x200, ipv4=GNB)])]),
        IE_CreateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(ul=0, dl=1), IE_MBR(ul=100000, dl=200000), IE_QFI(QFI=9)]),
        IE_CreateURR(IE_list=[IE_URR_Id(id=1), IE_MeasurementMethod(VOLUM=1), IE_ReportingTriggers(volume_threshold=1),
                              IE_VolumeThreshold(TOVOL=1, total=10_000_000)]),
    ]),
    PFCP(version=1, S=1, seid=0x2222, seq=4) / PFCPSessionModificationRequest(IE_list=[
        IE_RemovePDR(IE_list=[IE_PDR_Id(id=7)]),
        IE_UpdateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(FORW=1), IE_UpdateForwardingParameters(IE_list=[
            IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=0x300, ipv4=GNB2), IE_PFCPSMReqFlags(SNDEM=1)])])]),
    PFCP(version=1, S=1, seid=0x2222, seq=5) / PFCPSessionDeletionRequest(),
    PFCP(version=1, S=1, seid=0x1111, seq=6) / PFCPSessionReportRequest(IE_list=[
        IE_ReportType(USAR=1),
        IE_UsageReport_SRR(IE_list=[IE_URR_Id(id=1), IE_UR_SEQN(number=4), IE_UsageReportTrigger(VOLTH=1),
                                    IE_VolumeMeasurement(TOVOL=1, DLVOL=1, total=10_000_123, downlink=9_000_000)])]),
    PFCP(version=1, S=1, seid=0x1111, seq=6) / PFCPSessionReportResponse(IE_list=[IE_Cause(cause=1)]),
    PFCP(version=1, S=0, seq=7) / PFCPAssociationReleaseRequest(IE_list=[IE_NodeId(id_type=0, ipv4=SMF)]),
    # BAR: a buffering FAR naming BAR 3; an Update BAR and a Remove BAR; a report's answer
    # asking for extended buffering and DROBU.
    PFCP(version=1, S=1, seid=0, seq=8) / PFCPSessionEstablishmentRequest(IE_list=[
        IE_NodeId(id_type=0, ipv4=SMF),
        IE_FSEID(v4=1, seid=0x3333, ipv4=SMF),
        IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=2), IE_Precedence(precedence=255),
            IE_PDI(IE_list=[IE_SourceInterface(interface=1), IE_UE_IP_Address(V4=1, SD=1, ipv4=UE)]),
            IE_FAR_Id(id=2)]),
        IE_CreateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(BUFF=1, NOCP=1), IE_BAR_Id(id=3)]),
        IE_Create_BAR(IE_list=[IE_BAR_Id(id=3), IE_DownlinkDataNotificationDelay(delay=4),
                               IE_SuggestedBufferingPacketsCount(count=16)]),
    ]),
    PFCP(version=1, S=1, seid=0x2222, seq=9) / PFCPSessionModificationRequest(IE_list=[
        IE_Update_BAR_SMR(IE_list=[IE_BAR_Id(id=3), IE_DownlinkDataNotificationDelay(delay=0),
                                   IE_SuggestedBufferingPacketsCount(count=8)]),
        IE_Remove_BAR(IE_list=[IE_BAR_Id(id=5)])]),
    PFCP(version=1, S=1, seid=0x2222, seq=10) / PFCPSessionReportResponse(IE_list=[
        IE_Cause(cause=1),
        IE_UpdateBAR_SRR(IE_list=[IE_BAR_Id(id=3), IE_DLBufferingDuration(timer_unit=1, timer_value=5),
                                  IE_DLBufferingSuggestedPacketCount(count=300)]),
        IE_PFCPSRRspFlags(DROBU=1)]),
]
d = Path(__file__).parent / "corpus" / "pfcp"
d.mkdir(parents=True, exist_ok=True)
n = 0
for m in msgs:
    b = raw(m)
    variants = [b, b[: len(b) // 2], b[:5]]
    for _ in range(3):
        v = bytearray(b)
        v[rnd.randrange(len(v))] ^= 1 << rnd.randrange(8)
        variants.append(bytes(v))
    for v in variants:
        (d / f"seed-{n:03}").write_bytes(v)
        n += 1
print("pfcp corpus written:", n)
