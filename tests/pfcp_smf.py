"""A minimal SMF built on scapy's PFCP layer (scapy.contrib.pfcp, an independent
implementation of TS 29.244): it associates with a UPF, sets up sessions with an uplink
PDR (F-TEID CHOOSE) and a downlink PDR (UE address CHOOSE), modifies and deletes them,
answers the UPF's Heartbeat and Session Report Requests, and keeps every message it sent
and received for tshark.

As a script: `python3 tests/pfcp_smf.py [UPF_ADDR [PORT]]` associates with the UPF, creates
one session, prints what the UPF allocated, and leaves the session in place (the UPF keeps
it for its grace period once this SMF stops answering)."""
import socket
import sys
import time

from scapy.all import IP, UDP, Ether, raw, wrpcap
from scapy.contrib.pfcp import (
    PFCP, IE_ApplyAction, IE_CreateFAR, IE_CreatePDR, IE_CreateQER, IE_CreateURR, IE_DestinationInterface, IE_FAR_Id,
    IE_FSEID, IE_FTEID, IE_ForwardingParameters, IE_GateStatus, IE_MBR, IE_MeasurementMethod, IE_NodeId,
    IE_OuterHeaderCreation, IE_OuterHeaderRemoval, IE_PDI, IE_PDR_Id, IE_PFCPSMReqFlags, IE_Precedence, IE_QER_Id, IE_QFI,
    IE_RecoveryTimeStamp, IE_ReportingTriggers, IE_SourceInterface, IE_UE_IP_Address, IE_URR_Id, IE_UpdateFAR,
    IE_UpdateForwardingParameters, IE_VolumeThreshold, PFCPAssociationReleaseRequest, PFCPAssociationSetupRequest,
    PFCPAssociationUpdateRequest, PFCPHeartbeatResponse,
    PFCPHeartbeatRequest, PFCPSessionDeletionRequest, PFCPSessionEstablishmentRequest, PFCPSessionModificationRequest,
    IE_Cause, IE_UpdateQER, IE_VolumeQuota, PFCPSessionReportResponse, IE_MeasurementPeriod, IE_BAR_Id, IE_Create_BAR,
    IE_DownlinkDataNotificationDelay, IE_SuggestedBufferingPacketsCount, IE_UpdateBAR_SRR, IE_DLBufferingDuration,
    IE_DLBufferingSuggestedPacketCount, IE_Update_BAR_SMR)

HEARTBEAT_REQUEST = 1
SESSION_REPORT_REQUEST = 56

NTP_UNIX = 2208988800


def ies(msg):
    """The IEs of a parsed PFCP message, by class name (the first of each)."""
    out = {}
    for ie in msg.payload.IE_list:
        out.setdefault(type(ie).__name__, ie)
    return out


def all_ies(msg, name):
    return [ie for ie in msg.payload.IE_list if type(ie).__name__ == name]


class Smf:
    def __init__(self, upf, port=8805, local="127.0.0.1"):
        self.upf = (upf, port)
        self.local = local
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((local, 0))
        self.sock.settimeout(3)
        self.seq = 0
        self.rts = int(time.time()) + NTP_UNIX
        self.log = []  # (bytes, src, dst) of every message, for tshark
        self.reports = []  # Session Report Requests from the UPF, each answered
        self.heartbeats = []  # Heartbeat Requests from the UPF, each answered
        self.report_answer = []  # IEs besides the Cause in our Session Report Responses

    def send_raw(self, data):
        self.log.append((data, (self.local, self.sock.getsockname()[1]), self.upf))
        self.sock.sendto(data, self.upf)

    def recv(self):
        data, src = self.sock.recvfrom(65536)
        self.log.append((data, src, (self.local, self.sock.getsockname()[1])))
        return PFCP(data)

    def request(self, body, seid=None):
        self.seq += 1
        hdr = PFCP(version=1, S=1, seid=seid, seq=self.seq) if seid is not None else PFCP(version=1, S=0, seq=self.seq)
        self.send_raw(raw(hdr / body))
        while True:
            r = self.recv()
            # The UPF's own requests have sequence numbers of its own: answered, not taken
            # for the response.
            if not self.answer_upf_request(r) and r.seq == self.seq:
                return r

    def answer_upf_request(self, r):
        """Answer and keep a request the UPF sent (Session Report, Heartbeat); False for
        anything else."""
        if r.message_type == SESSION_REPORT_REQUEST:
            self.answer_report(r)
        elif r.message_type == HEARTBEAT_REQUEST:
            self.heartbeats.append(r)
            body = PFCPHeartbeatResponse(IE_list=[IE_RecoveryTimeStamp(timestamp=self.rts)])
            self.send_raw(raw(PFCP(version=1, S=0, seq=r.seq) / body))
        else:
            return False
        return True

    def answer_report(self, r):
        """Accept a Session Report Request (its header carries our SEID) and keep it."""
        self.reports.append(r)
        body = PFCPSessionReportResponse(IE_list=[IE_Cause(cause=1)] + self.report_answer)
        self.send_raw(raw(PFCP(version=1, S=1, seid=r.seid, seq=r.seq) / body))

    def wait_report(self, timeout=5.0):
        """The next Session Report Request (answered), or None after `timeout` seconds."""
        return self.wait_upf_request(self.reports, timeout)

    def wait_heartbeat(self, timeout=5.0):
        """The next Heartbeat Request from the UPF (answered), or None after `timeout` seconds."""
        return self.wait_upf_request(self.heartbeats, timeout)

    def wait_upf_request(self, kept, timeout):
        """The oldest of the UPF's requests in `kept` (one of the lists above), or None
        when none came within `timeout` seconds; other requests of the UPF are answered
        meanwhile."""
        end = time.time() + timeout
        while not kept and time.time() < end:
            try:
                r = self.recv()
            except socket.timeout:
                continue
            self.answer_upf_request(r)
        return kept.pop(0) if kept else None

    def node_id(self):
        return IE_NodeId(id_type=0, ipv4=self.local)

    def associate(self):
        return self.request(PFCPAssociationSetupRequest(IE_list=[self.node_id(), IE_RecoveryTimeStamp(timestamp=self.rts)]))

    def heartbeat(self):
        return self.request(PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=self.rts)]))

    def update_association(self):
        return self.request(PFCPAssociationUpdateRequest(IE_list=[self.node_id()]))

    def release(self):
        return self.request(PFCPAssociationReleaseRequest(IE_list=[self.node_id()]))

    def establish(self, cp_seid, gnb, gnb_teid, ue=None, qfi=9, quota=None, buffer=False, period=None, bar=None, ue6=None,
                  n9=None):
        """Uplink PDR 1 on a chosen F-TEID; downlink PDR 2 to the UE (chosen unless `ue`);
        with `ue6` (a dual-stack UE: IPv6 address given), the uplink PDR names both
        addresses and downlink PDR 3 (precedence 200, after PDR 2) names the IPv6 one, with
        FAR 3 toward the gNB on TEID `gnb_teid` + 1;
        with `quota`, URR 1 has a total volume quota of that many bytes; with `buffer`, the
        downlink FAR buffers and notifies (BUFF + NOCP: a UE in idle mode); with `period`, URR 1
        also measures time and asks for a periodic report every `period` seconds; with `bar`
        ({"delay": units of 50 ms, "count": packets}), BAR 1 is created and the buffering FAR
        names it; with `n9` ((address, TEID) of a peer UPF), the uplink FAR sends the UE's
        packets on in GTP-U to it instead of to the data network in the clear."""
        return self.request(self.establish_request(cp_seid, gnb, gnb_teid, ue, qfi, quota, buffer, period, bar, ue6, n9), seid=0)

    def establish_request(self, cp_seid, gnb, gnb_teid, ue=None, qfi=9, quota=None, buffer=False, period=None, bar=None, ue6=None,
                          n9=None):
        ue_ie = IE_UE_IP_Address(V4=1, SD=1, ipv4=ue) if ue else None
        ue_up = [IE_UE_IP_Address(V4=1, ipv4=ue, V6=1, ipv6=ue6) if ue6 else IE_UE_IP_Address(V4=1, ipv4=ue)] if ue else []
        ies_ = [
            self.node_id(),
            IE_FSEID(v4=1, seid=cp_seid, ipv4=self.local),
            IE_CreatePDR(IE_list=[
                IE_PDR_Id(id=1), IE_Precedence(precedence=100),
                IE_PDI(IE_list=[IE_SourceInterface(interface=0), IE_FTEID(V4=1, CH=1, CHID=1, choose_id=1)]
                       + ue_up),
                IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=1), IE_QER_Id(id=1), IE_URR_Id(id=1)]),
            IE_CreatePDR(IE_list=[
                IE_PDR_Id(id=2), IE_Precedence(precedence=100),
                IE_PDI(IE_list=[IE_SourceInterface(interface=1), ue_ie if ue_ie else choose_ue_dst()]),
                IE_FAR_Id(id=2), IE_QER_Id(id=1), IE_URR_Id(id=1)]),
            IE_CreateFAR(IE_list=[IE_FAR_Id(id=1), IE_ApplyAction(FORW=1),
                                  IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface=1)]
                                                          + ([IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=n9[1], ipv4=n9[0])]
                                                             if n9 else []))]),
            IE_CreateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(BUFF=1, NOCP=1)] + ([IE_BAR_Id(id=1)] if bar else []))
            if buffer else
            IE_CreateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(FORW=1),
                                  IE_ForwardingParameters(IE_list=[
                                      IE_DestinationInterface(interface=0),
                                      IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=gnb_teid, ipv4=gnb)])]),
            IE_CreateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(ul=0, dl=0), IE_MBR(ul=100000, dl=200000), IE_QFI(QFI=qfi)]),
            IE_CreateURR(IE_list=[IE_URR_Id(id=1), IE_MeasurementMethod(VOLUM=1, DURAT=1 if period else 0),
                                  IE_ReportingTriggers(volume_threshold=1, volume_quota=1 if quota else 0,
                                                       periodic_reporting=1 if period else 0),
                                  IE_VolumeThreshold(TOVOL=1, total=10_000_000)]
                         + ([IE_VolumeQuota(TOVOL=1, total=quota)] if quota else [])
                         + ([IE_MeasurementPeriod(period=period)] if period else [])),
        ]
        if ue6:
            ies_ += [
                IE_CreatePDR(IE_list=[
                    IE_PDR_Id(id=3), IE_Precedence(precedence=200),
                    IE_PDI(IE_list=[IE_SourceInterface(interface=1), IE_UE_IP_Address(V6=1, SD=1, ipv6=ue6)]),
                    IE_FAR_Id(id=3), IE_QER_Id(id=1), IE_URR_Id(id=1)]),
                IE_CreateFAR(IE_list=[IE_FAR_Id(id=3), IE_ApplyAction(FORW=1),
                                      IE_ForwardingParameters(IE_list=[
                                          IE_DestinationInterface(interface=0),
                                          IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=gnb_teid + 1, ipv4=gnb)])]),
            ]
        if bar:
            ies_.append(IE_Create_BAR(IE_list=[IE_BAR_Id(id=1), IE_DownlinkDataNotificationDelay(delay=bar["delay"]),
                                               IE_SuggestedBufferingPacketsCount(count=bar["count"])]))
        return PFCPSessionEstablishmentRequest(IE_list=ies_)

    def update_bar(self, up_seid, count):
        """BAR 1's Suggested Buffering Packets Count."""
        return self.request(PFCPSessionModificationRequest(IE_list=[
            IE_Update_BAR_SMR(IE_list=[IE_BAR_Id(id=1), IE_SuggestedBufferingPacketsCount(count=count)])]), seid=up_seid)

    def extend_buffering(self, unit, value, count):
        """Answer the next reports with an Update BAR asking for extended buffering: DL
        Buffering Duration (timer unit and value) and DL Buffering Suggested Packet Count."""
        self.report_answer = [IE_UpdateBAR_SRR(IE_list=[
            IE_BAR_Id(id=1), IE_DLBufferingDuration(timer_unit=unit, timer_value=value),
            IE_DLBufferingSuggestedPacketCount(count=count)])]

    def handover(self, up_seid, gnb, gnb_teid):
        """Downlink FAR to a new gNB, asking for End Markers on the old path."""
        return self.request(PFCPSessionModificationRequest(IE_list=[
            IE_UpdateFAR(IE_list=[IE_FAR_Id(id=2), IE_UpdateForwardingParameters(IE_list=[
                IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=gnb_teid, ipv4=gnb), IE_PFCPSMReqFlags(SNDEM=1)])])]), seid=up_seid)

    def forward(self, up_seid, gnb, gnb_teid):
        """The UE is reachable again (service request): the downlink FAR forwards to the
        gNB's new F-TEID instead of buffering."""
        return self.request(PFCPSessionModificationRequest(IE_list=[
            IE_UpdateFAR(IE_list=[IE_FAR_Id(id=2), IE_ApplyAction(FORW=1), IE_UpdateForwardingParameters(IE_list=[
                IE_DestinationInterface(interface=0), IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=gnb_teid, ipv4=gnb)])])]),
            seid=up_seid)

    def update_qer(self, up_seid, ul_open=True, dl_open=True, mbr_ul=100000, mbr_dl=200000):
        """QER 1's gates (open/closed per direction) and MBR (kbit/s)."""
        return self.request(PFCPSessionModificationRequest(IE_list=[
            IE_UpdateQER(IE_list=[IE_QER_Id(id=1), IE_GateStatus(ul=0 if ul_open else 1, dl=0 if dl_open else 1),
                                  IE_MBR(ul=mbr_ul, dl=mbr_dl)])]), seid=up_seid)

    def delete(self, up_seid):
        return self.request(PFCPSessionDeletionRequest(), seid=up_seid)

    def write_pcap(self, path):
        pkts = [Ether() / IP(src=s[0], dst=d[0]) / UDP(sport=s[1], dport=d[1]) / data for data, s, d in self.log]
        wrpcap(str(path), pkts)


def choose_ue_dst():
    """UE IP Address with S/D (destination) and CHV4: the UPF picks the UE's IPv4 address.
    scapy 2.8 has no CHV4 field, so the IE is written out: type 93, length 1, flags
    S/D | CHV4 (V4 stays 0: it says an address follows, as tshark reads it too)."""
    from scapy.contrib.pfcp import IE_NotImplemented
    return IE_NotImplemented(ietype=93, length=1, data=bytes([0x04 | 0x10]))


def session_rate(smf, n, window=32):
    """Establishes n sessions (CHOOSE F-TEID and UE address), `window` requests in flight;
    returns (accepted, seconds). The requests are encoded before the clock starts (scapy is
    slow): one request, its CP SEID and sequence number patched per copy."""
    body = raw(PFCP(version=1, S=1, seid=0, seq=1) / smf.establish_request(0, "198.18.7.10", 0x200))
    at = body.index(bytes([0, 57, 0, 13, 2]))  # the F-SEID IE: type, length, flags, then the SEID
    reqs = []
    for i in range(n):
        b = bytearray(body)
        b[at + 5:at + 13] = (0x10000 + i).to_bytes(8, "big")
        b[12:15] = ((smf.seq + 1 + i) & 0xffffff).to_bytes(3, "big")
        reqs.append(bytes(b))
    smf.seq += n
    t, sent, answered, accepted = time.time(), 0, 0, 0
    while answered < n:
        while sent - answered < window and sent < n:
            smf.sock.sendto(reqs[sent], smf.upf)
            sent += 1
        data, _ = smf.sock.recvfrom(65536)
        answered += 1
        c = data.find(bytes([0, 19, 0, 1]), 16)  # the Cause IE
        accepted += c > 0 and data[c + 4] == 1
    return accepted, time.time() - t


def volumes(msg, name):
    """(uplink, downlink, total, trigger flags) of each usage report `name` in a message."""
    out = []
    for r in all_ies(msg, name):
        i = {type(ie).__name__: ie for ie in r.IE_list}
        v = i.get("IE_VolumeMeasurement")
        t = i.get("IE_UsageReportTrigger")
        trig = [f for f in ("VOLTH", "VOLQU", "TERMR", "PERIO", "TIMTH", "TIMQU") if t is not None and getattr(t, f)]
        out.append({"uplink": v.uplink, "downlink": v.downlink, "total": v.total, "triggers": trig})
    return out


def times(msg, name):
    """(duration, start time, end time) of each usage report `name` in a message (None where
    absent)."""
    out = []
    for r in all_ies(msg, name):
        i = {type(ie).__name__: ie for ie in r.IE_list}
        d, st, en = i.get("IE_DurationMeasurement"), i.get("IE_StartTime"), i.get("IE_EndTime")
        out.append({"duration": d.duration if d else None, "start": st.timestamp if st else None,
                    "end": en.timestamp if en else None})
    return out


def serve(upf, port):
    """An SMF driven over stdin/stdout, one JSON request and one JSON answer a line, so a
    test can interleave session changes with traffic while one association lives."""
    import json
    smf = Smf(upf, port)
    for line in sys.stdin:
        q = json.loads(line)
        op, a = q["op"], q.get("args", {})
        if op == "associate":
            i = ies(smf.associate())
            f = i.get("IE_UPFunctionFeatures")
            out = {"cause": i["IE_Cause"].cause,
                   "features": [n for n in ("FTUP", "EMPU", "DDND", "DLBD", "UDBC", "BUCP") if f is not None and getattr(f, n)]}
        elif op == "establish":
            r = smf.establish(a["cp_seid"], a["gnb"], a["gnb_teid"], ue=a.get("ue"), quota=a.get("quota"),
                              buffer=a.get("buffer", False), period=a.get("period"), bar=a.get("bar"),
                              ue6=a.get("ue6"), n9=a.get("n9"))
            i = ies(r)
            out = {"cause": i["IE_Cause"].cause, "seid": i["IE_FSEID"].seid, "ue": a.get("ue")}
            for c in all_ies(r, "IE_CreatedPDR"):
                for ie in c.IE_list:
                    if type(ie).__name__ == "IE_FTEID":
                        out["teid"] = ie.TEID
                    if type(ie).__name__ == "IE_UE_IP_Address":
                        out["ue"] = ie.ipv4
        elif op == "update_qer":
            out = {"cause": ies(smf.update_qer(a["seid"], a["ul_open"], a["dl_open"], a["mbr_ul"], a["mbr_dl"]))["IE_Cause"].cause}
        elif op == "update_bar":
            out = {"cause": ies(smf.update_bar(a["seid"], a["count"]))["IE_Cause"].cause}
        elif op == "extend_buffering":
            smf.extend_buffering(a["unit"], a["value"], a["count"])
            out = {}
        elif op == "forward":
            out = {"cause": ies(smf.forward(a["seid"], a["gnb"], a["gnb_teid"]))["IE_Cause"].cause}
        elif op == "handover":
            out = {"cause": ies(smf.handover(a["seid"], a["gnb"], a["gnb_teid"]))["IE_Cause"].cause}
        elif op == "wait_report":
            r = smf.wait_report(a.get("timeout", 5.0))
            out = None if r is None else {"report_type": [f for f in ("DLDR", "USAR") if getattr(ies(r)["IE_ReportType"], f)],
                                          "usage": volumes(r, "IE_UsageReport_SRR"),
                                          "times": times(r, "IE_UsageReport_SRR"),
                                          "at": time.time(),
                                          "dl_pdrs": [ie.id for d in all_ies(r, "IE_DownlinkDataReport")
                                                      for ie in d.IE_list if type(ie).__name__ == "IE_PDR_Id"]}
        elif op == "delete":
            r = smf.delete(a["seid"])
            out = {"cause": ies(r)["IE_Cause"].cause, "usage": volumes(r, "IE_UsageReport_SDR")}
        elif op == "pcap":
            smf.write_pcap(a["path"])
            out = {"messages": len(smf.log)}
        else:
            out = {"error": f"unknown op {op}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    upf = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 8805
    smf = Smf(upf, port)
    if len(sys.argv) > 3:  # a rate measurement: N sessions
        smf.associate()
        ok, secs = session_rate(smf, int(sys.argv[3]))
        print(f"{ok} of {sys.argv[3]} sessions accepted in {secs:.2f} s: {ok / secs:.0f} sessions/s")
        sys.exit(0)
    r = smf.associate()
    print("association:", ies(r)["IE_Cause"].cause)
    r = smf.establish(0x1001, "198.18.7.10", 0x200)
    i = ies(r)
    print("session: cause", i["IE_Cause"].cause, "UPF SEID", hex(i["IE_FSEID"].seid))
    for c in all_ies(r, "IE_CreatedPDR"):
        for ie in c.IE_list:
            if type(ie).__name__ == "IE_FTEID":
                print(f"  uplink F-TEID chosen by the UPF: TEID {ie.TEID:#x} at {ie.ipv4}")
            if type(ie).__name__ == "IE_UE_IP_Address":
                print(f"  UE address chosen by the UPF: {ie.ipv4}")
