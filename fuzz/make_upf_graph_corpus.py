"""Seeds for the whole-graph fuzz target's UPF (crates/control/src/fuzz/graph.toml's
[pfcp] and control::fuzz::upf_sessions), built by scapy: G-PDUs from the gNB on core0
to each session's uplink TEID (IPv4 and IPv6 outer, with and without a PDU Session
Container, one the SDF filter drops, one re-encapsulated on N9), packets from the data
network on access0 to each session's UE (forwarded, buffered, IPv6), a G-PDU for a
TEID of no session, and malformed input on a session's TEID (a GTP-U length past the
datagram, Echo Request, End Marker, inner packets not IP or cut short). Same record format as make_graph_corpus.py. Run from this folder:
python3 make_upf_graph_corpus.py (output committed)."""
import struct
from pathlib import Path

from scapy.all import IP, UDP, Ether, IPv6, Raw, raw
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer

# As in make_graph_corpus.py (not imported: it writes its seeds when loaded).
ACCESS, CORE, HOLD = 0, 1, 8
MAC = {ACCESS: "02:00:00:00:00:01", CORE: "02:00:00:00:00:02"}
US4, US6 = "198.18.1.1", "2001:db8:1::1"


def eth(port, pkt):
    return Ether(src="02:00:00:00:09:09", dst=MAC[port]) / pkt


def rec(port, frame, hold=False):
    b = raw(frame)
    return struct.pack("!BH", port | (HOLD if hold else 0), len(b)) + b


def payload(n):
    return Raw(bytes(i % 251 for i in range(n)))

OUT = Path(__file__).resolve().parent / "corpus" / "graph"
GNB4, GNB6, DN4, DN6 = "198.18.1.2", "2001:db8:1::2", "198.18.0.2", "2001:db8::2"
UE1, UE2, UE6, UE4N9 = "198.19.50.1", "198.19.50.2", "2001:db8:150:1::1", "198.19.50.4"


def gpdu4(teid, inner, qfi=None):
    # gtp_type is given: scapy guesses it from the payload, and takes what is not IP for
    # another message.
    g = GTP_U_Header(teid=teid, gtp_type=255)
    if qfi is not None:
        g = GTP_U_Header(teid=teid, gtp_type=255, E=1, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=qfi)
    return eth(CORE, IP(src=GNB4, dst=US4) / UDP(sport=2152, dport=2152) / g / inner)


def gpdu6(teid, inner):
    return eth(CORE, IPv6(src=GNB6, dst=US6) / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=teid, gtp_type=255) / inner)


SEEDS = {
    "upf-uplink4": [rec(CORE, gpdu4(0x5000, IP(src=UE1, dst=DN4) / UDP(sport=4000, dport=80) / payload(64)))],
    "upf-uplink4-qfi": [rec(CORE, gpdu4(0x5000, IP(src=UE1, dst=DN4) / UDP(sport=4000, dport=80) / payload(64), qfi=9))],
    "upf-uplink4-sdf-drop": [rec(CORE, gpdu4(0x5000, IP(src=UE1, dst=DN4) / UDP(sport=53, dport=53) / payload(20)))],
    "upf-uplink6": [rec(CORE, gpdu6(0x5002, IPv6(src=UE6, dst=DN6) / UDP(sport=4000, dport=80) / payload(64)))],
    "upf-n9": [rec(CORE, gpdu4(0x5003, IP(src=UE4N9, dst=DN4) / UDP(sport=4000, dport=80) / payload(64)))],
    "upf-no-session": [rec(CORE, gpdu4(0x5fff, IP(src=UE1, dst=DN4) / UDP() / payload(8)))],
    "upf-downlink4": [rec(ACCESS, eth(ACCESS, IP(src=DN4, dst=UE1) / UDP(sport=80, dport=4000) / payload(64)))],
    "upf-downlink6": [rec(ACCESS, eth(ACCESS, IPv6(src=DN6, dst=UE6) / UDP(sport=80, dport=4000) / payload(64)))],
    # Malformed on a session's TEID: each dropped by name (fuzz_upf.rs says which node's).
    "upf-gtp-length-past-udp": [rec(CORE, eth(CORE, IP(src=GNB4, dst=US4) / UDP(sport=2152, dport=2152)
                                             / GTP_U_Header(teid=0x5000, length=200) / IP(src=UE1, dst=DN4) / UDP() / payload(8)))],
    "upf-echo-request-on-session": [rec(CORE, eth(CORE, IP(src=GNB4, dst=US4) / UDP(sport=2152, dport=2152)
                                                 / GTP_U_Header(teid=0x5000, gtp_type=1, S=1, seq=7)))],
    "upf-end-marker-on-session": [rec(CORE, eth(CORE, IP(src=GNB4, dst=US4) / UDP(sport=2152, dport=2152)
                                               / GTP_U_Header(teid=0x5000, gtp_type=254)))],
    "upf-bad-inner4": [rec(CORE, gpdu4(0x5000, Raw(bytes(40))))],
    "upf-bad-inner6": [rec(CORE, gpdu6(0x5002, Raw(bytes([0x02]) * 60)))],
    "upf-inner-truncated": [rec(CORE, gpdu4(0x5000, Raw(raw(IP(src=UE1, dst=DN4) / UDP())[:12])))],
    # Three in one vector for the buffering session: held, in order.
    "upf-buffer": [rec(ACCESS, eth(ACCESS, IP(src=DN4, dst=UE2) / UDP(sport=80, dport=4000) / Raw(bytes([n]) * 30)), hold=n < 2)
                   for n in range(3)],
}

if __name__ == "__main__":
    for name, records in SEEDS.items():
        (OUT / f"seed-{name}").write_bytes(b"".join(records))
    print(f"{len(SEEDS)} seeds in {OUT}")
