"""Linux UDP GSO/GRO endpoints for the parcel namespace tests (standard library only).

  gso_peer.py send DST PORT MESSAGES SIZE GSO_SIZE   MESSAGES send()s of SIZE bytes with
                                                     UDP_SEGMENT=GSO_SIZE (0: plain
                                                     datagrams of SIZE bytes); JSON
  gso_peer.py recv ADDR PORT GRO SEGMENTS SECONDS    read until SEGMENTS segments came (or
                                                     SECONDS passed), UDP_GRO on if GRO=1;
                                                     prints READY, then JSON

  gso_peer.py blast DST PORT SIZE GSO_SIZE SECONDS   send()s of SIZE bytes in segments of
                                                     GSO_SIZE for SECONDS; JSON
  gso_peer.py sink ADDR PORT GRO SECONDS             count what arrives for SECONDS after
                                                     the first byte; prints READY, then JSON

Segment j of message m starts with (m, j) as two big-endian u32 and goes on with bytes
that depend on (m, j, position), so the receiver checks each one is intact and in order
without knowing the sender's data. A GRO read is cut into segments at its gro_size."""
import json
import select
import socket
import struct
import sys
import time

SOL_UDP, UDP_SEGMENT, UDP_GRO = 17, 103, 104


def segment(m, j, size):
    body = bytes((m * 7 + j * 13 + k) & 0xFF for k in range(size - 8))
    return struct.pack("!II", m, j) + body


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def send(dst, port, messages, size, gso_size):
    s = socket.socket(family(dst), socket.SOCK_DGRAM)
    if gso_size:
        s.setsockopt(SOL_UDP, UDP_SEGMENT, gso_size)
    s.connect((dst, port))
    seg = gso_size or size
    sent = 0
    for m in range(messages):
        data = b"".join(segment(m, j, min(seg, size - j * seg)) for j in range((size + seg - 1) // seg))
        sent += s.send(data)
        time.sleep(0.002)
    print(json.dumps({"messages": messages, "bytes": sent}))


def recv(addr, port, gro, want, seconds):
    u = socket.socket(family(addr), socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    if gro:
        u.setsockopt(SOL_UDP, UDP_GRO, 1)
    u.bind((addr, port))
    print("READY", flush=True)
    reads, segs, gro_sizes, bad = 0, [], set(), []
    end = time.time() + seconds
    while len(segs) < want and time.time() < end:
        r, _, _ = select.select([u], [], [], 0.2)
        if not r:
            continue
        d, anc, _, _ = u.recvmsg(1 << 17, socket.CMSG_SPACE(4))
        reads += 1
        gs = [struct.unpack("=H" if len(c[2]) == 2 else "=i", c[2])[0] for c in anc if c[0] == SOL_UDP and c[1] == UDP_GRO]
        step = gs[0] if gs else len(d)
        gro_sizes.add(step)
        for at in range(0, len(d), step):
            part = d[at:at + step]
            if len(part) < 8:
                bad.append(len(segs))
                continue
            m, j = struct.unpack("!II", part[:8])
            if part != segment(m, j, len(part)):
                bad.append(len(segs))
            segs.append([m, j, len(part)])
    print(json.dumps({"reads": reads, "segments": segs, "gro_sizes": sorted(gro_sizes), "damaged": bad}))


def blast(dst, port, size, gso_size, seconds):
    s = socket.socket(family(dst), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.setsockopt(SOL_UDP, UDP_SEGMENT, gso_size)
    s.connect((dst, port))
    data = b"".join(segment(0, j, min(gso_size, size - j * gso_size)) for j in range((size + gso_size - 1) // gso_size))
    sends, end = 0, time.time() + seconds
    while time.time() < end:
        for _ in range(64):
            try:
                s.send(data)
                sends += 1
            except (BlockingIOError, ConnectionRefusedError):
                pass
    print(json.dumps({"sends": sends, "bytes": sends * size}))


def sink(addr, port, gro, seconds):
    u = socket.socket(family(addr), socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    if gro:
        u.setsockopt(SOL_UDP, UDP_GRO, 1)
    u.bind((addr, port))
    print("READY", flush=True)
    r, _, _ = select.select([u], [], [], 20)
    if not r:
        print(json.dumps({"segments": 0, "bytes": 0, "seconds": 0}))
        return
    start = time.time()
    end, segs, nbytes = start + seconds, 0, 0
    u.settimeout(0.2)
    while time.time() < end:
        try:
            d, anc, _, _ = u.recvmsg(1 << 17, socket.CMSG_SPACE(4))
        except socket.timeout:
            continue
        gs = [struct.unpack("=H" if len(c[2]) == 2 else "=i", c[2])[0] for c in anc if c[0] == SOL_UDP and c[1] == UDP_GRO]
        segs += -(-len(d) // gs[0]) if gs else 1
        nbytes += len(d)
    print(json.dumps({"segments": segs, "bytes": nbytes, "seconds": time.time() - start}))


cmd, a = sys.argv[1], sys.argv[2:]
if cmd == "send":
    send(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]))
elif cmd == "recv":
    recv(a[0], int(a[1]), a[2] == "1", int(a[3]), float(a[4]))
elif cmd == "blast":
    blast(a[0], int(a[1]), int(a[2]), int(a[3]), float(a[4]))
elif cmd == "sink":
    sink(a[0], int(a[1]), a[2] == "1", float(a[3]))
else:
    sys.exit(__doc__)
