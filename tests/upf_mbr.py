"""MBR accuracy of the UPF's downlink policing, measured (not a test: the figure goes to
docs/PERFORMANCE.md). The lab of tests/test_pfcp_netns.py (gNB ⇄ vecgate ⇄ data network,
scapy's SMF); one session whose QER gets a downlink MBR; the data network host offers
twice the MBR for a few seconds; the gNB counts the G-PDU bytes that arrive in each whole
second. Prints one JSON line: the MBR, what was offered, the inner bytes per second of
each 1 s window after the first, and their deviation from the MBR. WORKERS: vecgate's
worker threads (af_packet hashes each flow to one); FLOWS: the sender spreads its packets
round robin over that many UDP source ports, so that with several workers the session's
downlink reaches several of them.

    sudo VECGATE_BIN=target/release/vecgate python3 tests/upf_mbr.py [MBR_KBPS [SECONDS [WORKERS [FLOWS]]]]
"""
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conftest import BIN  # noqa: E402
from netns import Lab  # noqa: E402
from test_pfcp_netns import DN, GNB, py, upf_lab  # noqa: E402

# Counts what arrives at the gNB: (seconds since the first packet, inner bytes) per G-PDU.
RECV = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 2152))
s.settimeout(1.0)
print("READY", flush=True)
got, t0, end = [], None, time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        d, _ = s.recvfrom(65536)
    except socket.timeout:
        continue
    now = time.time()
    t0 = t0 or now
    if d[1] == 255:
        got.append((now - t0, len(d) - 8 - (4 + 4 * d[12] if d[0] & 0x07 else 0)))
print(json.dumps(got))
"""

# Offers argv[2] bytes/s of 1000-byte IPv4 packets (972 bytes of UDP payload) for argv[3] s,
# from argv[4] source ports in turn.
SEND = f"""
import socket, sys, time
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(int(sys.argv[4]))]
for k, s in enumerate(socks):
    s.bind(("{DN}", 7200 + k))
rate, secs = float(sys.argv[2]), float(sys.argv[3])
gap, t, end, n = 1000 / rate, time.time(), time.time() + secs, 0
while t < end:
    socks[n % len(socks)].sendto(bytes(972), (sys.argv[1], 7300))
    n += 1
    t += gap
    while time.time() < t:
        pass
print(n)
"""


def main():
    mbr_kbps = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    flows = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    lab = Lab()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            gnb, upf, dn, v, smf = upf_lab(lab, BIN, Path(tmp), workers)
            s = smf("establish", cp_seid=0x71, gnb=GNB, gnb_teid=0x200)
            assert smf("update_qer", seid=s["seid"], ul_open=True, dl_open=True, mbr_ul=100000, mbr_dl=mbr_kbps)["cause"] == 1
            r = lab.spawn(gnb, sys.executable, "-c", RECV, GNB, str(seconds + 2))
            assert r.stdout.readline().strip() == "READY"
            mbr_bytes = mbr_kbps * 125
            sent = int(py(lab, dn, SEND, s["ue"], 2 * mbr_bytes, seconds, flows, timeout=seconds + 30))
            got = json.loads(r.communicate(timeout=seconds + 30)[0].strip().splitlines()[-1])
            windows = [sum(b for t, b in got if w <= t < w + 1) for w in range(1, int(seconds) - 1)]
            dev = [round(100 * (w - mbr_bytes) / mbr_bytes, 2) for w in windows]
            print(json.dumps({"workers": workers, "flows": flows, "mbr_bytes_per_sec": mbr_bytes, "offered_bytes_per_sec": 2 * mbr_bytes, "sent": sent, "received": len(got),
                              "window_bytes": windows, "deviation_percent": dev,
                              "mbr_exceeded": v.errors().get(("upf4-downlink", "mbr-exceeded"), 0),
                              "worker_rx": v.ctl("show", "runtime")["data"]["worker_rx"]}))
    finally:
        lab.close()


if __name__ == "__main__":
    main()
