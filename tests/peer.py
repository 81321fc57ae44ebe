"""A Linux-socket peer for the network-namespace tests, run inside a namespace with
`ip netns exec NS python3 peer.py ...`. Every mode is bounded in bytes, count and time,
and prints one JSON line with what it saw.

  tcp-recv PORT [--v6]               accept one connection, read to EOF: bytes, sha256,
                                     seconds, how it ended (eof, idle, deadline)
  tcp-send HOST PORT BYTES           send BYTES of seeded pseudo-random data: bytes, sha256,
                                     segments retransmitted
  udp-echo PORT COUNT [--v6] [--timeout S]   echo up to COUNT datagrams back to their
                                     sender, giving up after S idle seconds (default 20)
  udp-ping HOST PORT COUNT SIZE      send COUNT datagrams, count the echoes that match
"""
import hashlib
import json
import random
import select
import socket
import sys
import time

TIMEOUT = 20.0
# A whole transfer's bound: generous, since a host pause or a few retransmission
# timeouts must not end a transfer that is still progressing (TIMEOUT bounds idleness).
TRANSFER_LIMIT = 120.0
# The sender stops sooner, so that it reports (with its retransmissions) before the
# harness's 90 s limit on a peer, and the test can show the gateways' counters.
SEND_LIMIT = 75.0


def family(host_or_flag):
    return socket.AF_INET6 if ":" in host_or_flag or host_or_flag == "--v6" else socket.AF_INET


def tcp_recv(port, v6):
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if v6 else "0.0.0.0", port))
    s.listen(1)
    print("READY", flush=True)
    s.settimeout(TIMEOUT)
    c, _ = s.accept()
    c.settimeout(TIMEOUT)
    h = hashlib.sha256()
    n = 0
    start = time.time()
    deadline = start + TRANSFER_LIMIT
    ended = "deadline"
    try:
        while time.time() < deadline:
            b = c.recv(1 << 16)
            if not b:
                ended = "eof"
                break
            h.update(b)
            n += len(b)
    except socket.timeout:
        ended = "idle"
    print(json.dumps({"bytes": n, "sha256": h.hexdigest(), "seconds": round(time.time() - start, 2), "ended": ended}), flush=True)


def tcp_send(host, port, total):
    rng = random.Random(4242)
    s = socket.create_connection((host, port), timeout=TIMEOUT)
    h = hashlib.sha256()
    sent = 0
    chunk = 1 << 16
    error = None
    deadline = time.time() + SEND_LIMIT
    try:
        while sent < total:
            if time.time() > deadline:
                error = f"not done after {SEND_LIMIT} s"
                break
            b = rng.randbytes(min(chunk, total - sent))
            s.sendall(b)
            h.update(b)
            sent += len(b)
        if error is None:
            s.shutdown(socket.SHUT_WR)
            s.settimeout(TIMEOUT)
            while s.recv(4096):
                pass
    except OSError as e:  # reported, so the test can show the gateways' counters with it
        error = repr(e)
    print(json.dumps({"bytes": sent, "sha256": h.hexdigest(), "retransmits": total_retrans(s), "error": error}), flush=True)


def total_retrans(s):
    """Segments the sender's TCP retransmitted: struct tcp_info's tcpi_total_retrans
    (a u32 after 8 bytes of u8 fields and 23 u32 fields, linux/tcp.h)."""
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int.from_bytes(info[100:104], sys.byteorder)


def udp_echo(port, count, v6, timeout=TIMEOUT):
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("::" if v6 else "0.0.0.0", port))
    print("READY", flush=True)
    s.settimeout(timeout)
    n = 0
    try:
        while n < count:
            b, a = s.recvfrom(65535)
            s.sendto(b, a)
            n += 1
    except socket.timeout:
        pass
    print(json.dumps({"echoed": n}), flush=True)


def udp_ping(host, port, count, size):
    """Echoes are matched by their sequence number and full payload, so a late one still
    counts and a corrupt one never does."""
    s = socket.socket(family(host), socket.SOCK_DGRAM)

    def payload(i):
        return i.to_bytes(4, "big") + bytes((i + k) & 0xFF for k in range(size - 4))

    matched, corrupt = set(), 0

    def drain(until):
        nonlocal corrupt
        while True:
            left = until - time.time()
            if left <= 0:
                return
            s.settimeout(left)
            try:
                b, _ = s.recvfrom(65535)
            except socket.timeout:
                return
            i = int.from_bytes(b[:4], "big")
            if i < count and b == payload(i):
                matched.add(i)
            else:
                corrupt += 1

    for i in range(count):
        s.sendto(payload(i), (host, port))
        drain(time.time() + 0.01)
        if i in matched:
            continue
        drain(time.time() + 0.3)
    drain(time.time() + 1.0)
    print(json.dumps({"sent": count, "matched": len(matched), "corrupt": corrupt}), flush=True)


def udp_collect(port, limit):
    """Every datagram that arrives until stdin closes (the test closes it once its sender
    is done, so a slow sender loses nothing) or `limit` seconds pass: its source and
    payload."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    print("READY", flush=True)
    got, until, open_ = [], time.time() + limit, True
    while open_ and (left := until - time.time()) > 0:
        ready, _, _ = select.select([s, sys.stdin], [], [], left)
        if sys.stdin in ready and not sys.stdin.read(1):
            open_ = False
        if s in ready:
            b, (src, _) = s.recvfrom(65535)
            got.append([src, b.decode(errors="replace")])
    s.setblocking(False)
    while True:
        try:
            b, (src, _) = s.recvfrom(65535)
        except BlockingIOError:
            break
        got.append([src, b.decode(errors="replace")])
    print(json.dumps({"got": got}), flush=True)


def main(a):
    mode = a[0]
    if mode == "tcp-recv":
        tcp_recv(int(a[1]), "--v6" in a)
    elif mode == "tcp-send":
        tcp_send(a[1], int(a[2]), int(a[3]))
    elif mode == "udp-echo":
        wait = float(a[a.index("--timeout") + 1]) if "--timeout" in a else TIMEOUT
        udp_echo(int(a[1]), int(a[2]), "--v6" in a, wait)
    elif mode == "udp-collect":
        udp_collect(int(a[1]), float(a[2]))
    elif mode == "udp-ping":
        udp_ping(a[1], int(a[2]), int(a[3]), int(a[4]))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv[1:])
