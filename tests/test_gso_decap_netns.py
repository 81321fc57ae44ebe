"""A Linux sender's UDP GSO frames of tunnel packets, decapsulated every one (issue: a
GSO frame to a tunnel's port yielded its first inner packet only). In network
namespaces over veth, vecgate's links af_packet interfaces with virtio-net headers:

  sender ──────────── vecgate ──────────── receiver
  198.18.20.2         .20.1 | 198.18.21.1  198.18.21.2
  UDP_SEGMENT sends         GTP-U and GUE   a UDP socket, port 9000; dumpcap
  of G-PDUs / GUE           tunnels from
  packets                   198.18.20.2

The same with ESP in UDP (RFC 3948, port 4500) to an inbound SA: the ESP packets are
built and encrypted by scapy (SecurityAssociation, AES-GCM-128 with a NAT-T UDP header)
and sent by the same kind of sender, each send() a GSO frame of ESP datagrams; every
inner packet must arrive decrypted (`esp4-decrypt` decrypted).

The sender's kernel hands each send() to the veth whole (the veth does UDP segmentation
offload), so vecgate's af_packet socket gets one GSO frame of several datagrams, each a
tunnel packet around an inner UDP packet to the receiver. Every inner packet must arrive,
intact: the receiver's socket reads each one's (frame, datagram) tag and its bytes, and a
capture on its link is read by scapy (the inner IPv4 header checksum recomputed) and
tshark (the GTP-U or GUE layer gone: plain UDP). vecgate's counters show the frames were
cut by its software GSO (`ip4-local` gso-to-segment) and each datagram decapsulated.

Run as a script, this file is the sender and the receiver (standard library only)."""
import json
import shutil
import signal
import socket
import struct
import sys
import time

FRAMES, SEGS, SIZE = 12, 6, 1000  # each send(): SEGS datagrams, the last SIZE // 2 bytes
RECV_PORT = 9000
SOL_UDP, UDP_SEGMENT = 17, 103


def checksum(b):
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def body(m, j, n):
    return struct.pack("!II", m, j) + bytes((m * 7 + j * 13 + k) & 0xFF for k in range(n - 8))


def inner(m, j, length):
    """IPv4 UDP from a UE (198.18.22.5) to the receiver, `length` bytes, tagged (m, j)."""
    udp = struct.pack("!HHHH", 5000 + m, RECV_PORT, length - 20, 0) + body(m, j, length - 28)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, length, m * 64 + j, 0x4000, 64, 17, 0,
                     socket.inet_aton("198.18.22.5"), socket.inet_aton("198.18.21.2"))
    return ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:] + udp


def datagram(kind, m, j, length):
    if kind == "gtpu":
        return struct.pack("!BBHI", 0x30, 0xFF, length - 8, 100) + inner(m, j, length - 8)
    return bytes([0, 4, 0, 0]) + inner(m, j, length - 4)  # GUE, version 0, IPv4 inside


def lengths():
    return [SIZE] * (SEGS - 1) + [SIZE // 2]


def send_file(path, dst, port):
    """Send the datagrams in `path` (JSON: frames of hex datagrams), one send() a frame,
    from and to `port`, in segments of each frame's first datagram's length."""
    frames = [[bytes.fromhex(d) for d in f] for f in json.load(open(path))]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    s.connect((dst, port))
    sent = 0
    for f in frames:
        s.setsockopt(SOL_UDP, UDP_SEGMENT, len(f[0]))
        sent += s.send(b"".join(f))
        time.sleep(0.005)
    print(json.dumps({"bytes": sent}))


def send(kind, dst, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(SOL_UDP, UDP_SEGMENT, SIZE)
    s.connect((dst, port))
    sent = 0
    for m in range(FRAMES):
        sent += s.send(b"".join(datagram(kind, m, j, n) for j, n in enumerate(lengths())))
        time.sleep(0.005)
    print(json.dumps({"bytes": sent}))


def recv(seconds):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    u.bind(("198.18.21.2", RECV_PORT))
    print("READY", flush=True)
    got, bad = [], []
    end = time.time() + seconds
    while len(got) < FRAMES * SEGS and time.time() < end:
        u.settimeout(max(0.01, end - time.time()))
        try:
            d = u.recv(65536)
        except socket.timeout:
            break
        m, j = struct.unpack("!II", d[:8])
        (got if d == body(m, j, len(d)) else bad).append([m, j, len(d)])
    print(json.dumps({"got": got, "bad": bad}))


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "send-file":
        send_file(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        recv(float(sys.argv[2]))
    sys.exit(0)

import pytest  # noqa: E402  (the script above runs without it)

from netns import Vecgate, result  # noqa: E402

# The inbound SA's AES-GCM-128 key and salt (RFC 4106).
GCM_KEY = "0102030405060708090a0b0c0d0e0f1011121314"

CONFIG = """
[[interface]]
name = "core"
type = "af_packet"
host_if = "g0"
mac = "02:00:00:00:14:01"
addresses = ["198.18.20.1/24"]

[[interface]]
name = "user"
type = "af_packet"
host_if = "g1"
mac = "02:00:00:00:15:01"
addresses = ["198.18.21.1/24"]

# The receiver known beforehand: a GSO frame's datagrams all come at once, more than
# the 3 packets a neighbour being resolved holds.
[[neighbour]]
interface = "user"
ip = "198.18.21.2"
mac = "02:00:00:00:16:02"

[[gtpu_tunnel]]
local = "198.18.20.1"
remote = "198.18.20.2"
teid_in = 100
teid_out = 200
decap_next = "ip"

[[udp_tunnel]]
local = "198.18.20.1"
remote = "198.18.20.2"
encap = "gue"
port = 6080

[[ipsec_sa]]
index = 0
spi = 0x3000
direction = "inbound"
algorithm = "aes-gcm-128"
enc_key = "%s"
local = "198.18.20.1"
remote = "198.18.20.2"
udp_encap = true
""" % GCM_KEY


def host(lab, ns, ifname, addr, gw):
    lab.run(ns, "ip", "addr", "add", addr, "dev", ifname)
    lab.run(ns, "ip", "route", "add", "default", "via", gw)


def capture(lab, ns, ifname, path):
    p = lab.spawn(ns, "dumpcap", "-q", "-i", ifname, "-s", "0", "-w", str(path))
    deadline = time.time() + 10
    while not (path.exists() and path.stat().st_size >= 24) and time.time() < deadline:
        time.sleep(0.1)
    return p


def through_vecgate(lab, vecgate, tmp_path, sender):
    """vecgate between the sender and the receiver; `sender` (its arguments to this file
    as a script) sends from the sender's namespace. The receiver's report, vecgate's
    counters and the capture on the receiver's link."""
    if shutil.which("dumpcap") is None or shutil.which("tshark") is None:
        pytest.fail("dumpcap / tshark are not installed (scripts/test.sh installs tshark)")
    s, g, r = lab.ns("s"), lab.dataplane_ns("g"), lab.ns("r")
    lab.veth(s, "s0", g, "g0")
    lab.veth(g, "g1", r, "r0")
    host(lab, s, "s0", "198.18.20.2/24", "198.18.20.1")
    lab.run(r, "ip", "link", "set", "r0", "address", "02:00:00:00:16:02")
    host(lab, r, "r0", "198.18.21.2/24", "198.18.21.1")
    features = lab.run(s, "ethtool", "-k", "s0").stdout
    assert "tx-udp-segmentation: on" in features, features
    vg = Vecgate(lab, vecgate, g, CONFIG, tmp_path)
    pcap = tmp_path / "r0.pcap"
    cap = capture(lab, r, "r0", pcap)
    rx = lab.spawn(r, sys.executable, __file__, "recv", "40")
    assert rx.stdout.readline().strip() == "READY"
    sent = json.loads(lab.run(s, sys.executable, __file__, *sender).stdout)
    got = result(rx, timeout=60)
    time.sleep(0.5)
    cap.send_signal(signal.SIGTERM)
    cap.wait(10)
    return sent, got, vg.errors(), r, pcap


def every_inner_packet_arrived(lab, r, pcap, got, errors, want, tunnel):
    """The receiver read the inner packets `want` ((frame, datagram, UDP payload length)
    tags), each whole; vecgate cut every frame; the capture on the receiver's link has
    them, as scapy and tshark read it, none of the `tunnel` protocols left."""
    from scapy.all import IP, UDP, raw, rdpcap

    assert got["bad"] == []
    assert sorted(got["got"]) == want, f"{len(got['got'])} of {len(want)} inner packets"
    assert errors.get(("ip4-local", "gso-to-segment")) == FRAMES, errors
    assert errors.get(("ip-gso-segment", "segments")) == FRAMES * SEGS, errors

    # The capture, by scapy: each inner packet whole, its IPv4 header checksum right.
    inner_pkts = [p for p in rdpcap(str(pcap)) if UDP in p and p[UDP].dport == RECV_PORT]
    assert len(inner_pkts) == FRAMES * SEGS
    tags = []
    for p in inner_pkts:
        ip = p[IP]
        again = IP(raw(ip))
        again.chksum = None
        assert IP(raw(again)).chksum == ip.chksum, ip.summary()
        assert (ip.src, ip.dst, ip.ttl) == ("198.18.22.5", "198.18.21.2", 63)
        m, j = struct.unpack("!II", bytes(p[UDP].payload)[:8])
        assert bytes(p[UDP].payload) == body(m, j, len(p[UDP].payload))
        tags.append([m, j, len(p[UDP].payload)])
    assert sorted(tags) == want
    # And by tshark: plain IPv4/UDP on the receiver's link, no tunnel layer left.
    t = lab.run(r, "tshark", "-r", str(pcap), "-Y", f"udp.dstport == {RECV_PORT}", "-T", "fields", "-e", "frame.protocols")
    protos = t.stdout.split()
    assert len(protos) == FRAMES * SEGS, len(protos)
    assert all(p.startswith("eth:ethertype:ip:udp") and not any(t in p for t in tunnel) for p in protos), set(protos)


@pytest.mark.parametrize("kind,port,node", [("gtpu", 2152, "gtpu4-input"), ("gue", 6080, "gue4-input")])
def test_every_datagram_of_a_linux_gso_frame_is_decapsulated(lab, vecgate, tmp_path, kind, port, node):
    sent, got, errors, r, pcap = through_vecgate(lab, vecgate, tmp_path, ["send", kind, "198.18.20.1", str(port)])
    assert sent["bytes"] == FRAMES * sum(lengths())
    want = [[m, j, n - (8 if kind == "gtpu" else 4) - 28] for m in range(FRAMES) for j, n in enumerate(lengths())]
    every_inner_packet_arrived(lab, r, pcap, got, errors, want, ("gtp", "gue"))
    assert errors.get((node, "decapsulated")) == FRAMES * SEGS, errors


def test_every_esp_packet_of_a_linux_gso_frame_is_decrypted(lab, vecgate, tmp_path):
    """ESP in UDP from 4500 to 4500, each send() a GSO frame of SEGS ESP packets (equal
    lengths but the last, as the inner packets), sealed by scapy with the SA's key,
    sequence numbers 1 on."""
    from scapy.all import IP, UDP, raw
    from scapy.layers.ipsec import ESP, SecurityAssociation

    peer = SecurityAssociation(ESP, spi=0x3000, crypt_algo="AES-GCM", crypt_key=bytes.fromhex(GCM_KEY),
                               tunnel_header=IP(src="198.18.20.2", dst="198.18.20.1"),
                               nat_t_header=UDP(sport=4500, dport=4500))
    # Inner packets as long as the GTP-U test's: the ESP lengths follow them.
    frames, seq = [], 1
    for m in range(FRAMES):
        f = []
        for j, n in enumerate(lengths()):
            e = peer.encrypt(IP(inner(m, j, n - 8)), seq_num=seq)
            seq += 1
            assert (e[UDP].sport, e[UDP].dport, e[ESP].spi) == (4500, 4500, 0x3000)
            f.append(raw(e[UDP].payload).hex())
        assert len({len(d) for d in f[:-1]}) == 1 and len(f[-1]) < len(f[0]), "equal ESP lengths but the last"
        frames.append(f)
    path = tmp_path / "esp.json"
    path.write_text(json.dumps(frames))
    sent, got, errors, r, pcap = through_vecgate(lab, vecgate, tmp_path, ["send-file", str(path), "198.18.20.1", "4500"])
    assert sent["bytes"] == sum(len(d) // 2 for f in frames for d in f)
    want = [[m, j, n - 8 - 28] for m in range(FRAMES) for j, n in enumerate(lengths())]
    every_inner_packet_arrived(lab, r, pcap, got, errors, want, ("esp", "udpencap"))
    assert errors.get(("esp4-decrypt", "decrypted")) == FRAMES * SEGS, errors
