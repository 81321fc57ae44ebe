"""Backend and client for the load-balancer namespace tests, run with `ip netns exec`.
Every mode is bounded in count and time and prints one JSON line (clients) or READY
(servers, once listening).

  serve NAME PORT            answer each TCP connection (IPv4 or IPv6): read a first line; "who" gets
                             "NAME CLIENT-ADDR" back, "echo N" gets the N bytes that
                             follow sent back; stops after 120 s
  who HOST PORT COUNT        COUNT connections asking "who": the answers, in order
  echo HOST PORT BYTES [SOURCE [SECONDS]]
                             one connection (from the address SOURCE if given) echoing
                             BYTES of seeded data: what came back is what went (sha256
                             both ways; "bytes" what came within SECONDS, 60 unless
                             given, a stall ends it), and who answered
  uecho HOST PORT COUNT [SIZES]
                             COUNT UDP datagrams, each from a socket (and port) of its own connected
                             to HOST PORT (so only an answer from that address and port
                             is taken): how many came back intact, and which did not;
                             SIZES (bytes, comma-separated, taken in turn) makes them
                             that large, of seeded data
  userve NAME PORT...        echo each UDP datagram (IPv4 or IPv6) on the PORTs back
                             whole to its sender; stops when stdin closes (or after
                             120 s): each datagram's port, sender address and size
  usend HOST PORT BYTES SPORT
                             one UDP datagram of BYTES seeded bytes from port SPORT
                             to HOST PORT: its sha256
  urecv PORT SECONDS         the first UDP datagram (IPv4 or IPv6) to PORT within
                             SECONDS: its sender, sender port, size and sha256 (all
                             null if none came)
  tunnelserve LOCAL REMOTE PORT...
                             a backend behind a GUE tunnel from LOCAL to REMOTE (port
                             6080, no kernel module): each IPv4 UDP datagram inside to
                             one of the PORTs echoed back whole from where it went, in
                             GUE from an outer port of the flow's own; stops when stdin
                             closes (or after 120 s): each datagram's port, sender and
                             payload size
  tunnelecho TUNNEL LOCAL REMOTE INNER HOST PORT FLOWS [MTU]
                             a client behind a tunnel from LOCAL to REMOTE, TUNNEL
                             "gue" (RFC 8086's header, no kernel module; port 6080,
                             each flow from an outer port of its own), "esp" (ESP in
                             UDP on port 4500, test_ipsec's AES-GCM SAs) or
                             "gtpu:TEID:TEID" (a gNB's G-PDUs, port 2152, sent with the
                             first TEID, answers expected with the second): FLOWS UDP
                             flows from INNER (ports 20000 + i) to HOST PORT, two
                             datagrams each, built by scapy; the answers read on LOCAL
                             and dissected by scapy: how many came back inside the
                             tunnel from HOST PORT to the flow, datagram and checksums
                             intact, and what came otherwise; with MTU, a router's
                             frag-needed / packet too big (that MTU) about each flow's
                             second answer, from the first address of INNER's /24 or
                             /64, sent back inside the tunnel to HOST
"""
import hashlib
import json
import random
import select
import socket
import sys
import threading
import time

LIMIT = 120.0


def serve(name, port):
    # Both families on one socket: an IPv4 peer shows as ::ffff:a.b.c.d.
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    s.listen(256)
    s.settimeout(1.0)
    print("READY", flush=True)
    end = time.time() + LIMIT

    def one(c, peer):
        c.settimeout(20)
        f = c.makefile("rb")
        line = f.readline().decode().split()
        if line[:1] == ["who"]:
            c.sendall(f"{name} {peer[0].removeprefix('::ffff:')}\n".encode())
        elif line[:1] == ["echo"]:
            n = int(line[1])
            c.sendall(f"{name}\n".encode())
            while n > 0:
                b = f.read1(min(n, 1 << 16))
                if not b:
                    break
                c.sendall(b)
                n -= len(b)
        c.close()

    while time.time() < end:
        try:
            c, peer = s.accept()
        except socket.timeout:
            continue
        threading.Thread(target=one, args=(c, peer), daemon=True).start()


def who(host, port, count):
    answers = []
    for _ in range(count):
        c = socket.create_connection((host, port), timeout=10)
        c.sendall(b"who\n")
        answers.append(c.makefile("rb").readline().decode().strip())
        # The client sees the service address as its peer.
        answers[-1] += " " + c.getpeername()[0]
        c.close()
    print(json.dumps({"answers": answers}))


def echo(host, port, n, source=None, seconds=60.0):
    data = random.Random(7).randbytes(n)
    c = socket.create_connection((host, port), timeout=20, source_address=(source, 0) if source else None)
    c.sendall(f"echo {n}\n".encode())
    got = bytearray()
    f = c.makefile("rb")
    name = f.readline().decode().strip()

    def send():
        for i in range(0, n, 1 << 16):
            c.sendall(data[i:i + (1 << 16)])

    t = threading.Thread(target=send, daemon=True)
    t.start()
    end = time.time() + seconds
    try:
        while len(got) < n and time.time() < end:
            # No read waits past the end: a stalled transfer reports what came.
            c.settimeout(max(0.1, min(20.0, end - time.time())))
            b = f.read1(1 << 16)
            if not b:
                break
            got += b
    except socket.timeout:
        pass
    c.close()
    print(json.dumps({"backend": name, "sent": hashlib.sha256(data).hexdigest(), "got": hashlib.sha256(got).hexdigest(), "bytes": len(got)}))


def uecho(host, port, count, sizes=None):
    answered, missing = 0, []
    # Every socket stays open until the end, so each has a source port of its own (a
    # closed one's port may come back for a later socket: the same flow, one session).
    held = []
    for i in range(count):
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        held.append(s)
        s.connect((host, port))
        s.settimeout(2)
        msg = f"datagram {i} ".encode() * 8
        if sizes:
            size = sizes[i % len(sizes)]
            msg = (msg + random.Random(i).randbytes(size))[:size]
        s.send(msg)
        try:
            intact = s.recv(65535) == msg
        except (socket.timeout, ConnectionRefusedError):
            intact = False
        answered += intact
        if not intact:
            missing.append(i)
    for s in held:
        s.close()
    print(json.dumps({"sent": count, "answered": answered, "missing": missing}))


def userve(name, ports):
    socks = []
    for port in ports:
        # Both families on one socket: an IPv4 peer shows as ::ffff:a.b.c.d.
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", port))
        socks.append(s)
    print("READY", flush=True)
    got, end = [], time.time() + LIMIT
    while (left := end - time.time()) > 0:
        ready, _, _ = select.select(socks + [sys.stdin], [], [], left)
        if sys.stdin in ready and not sys.stdin.read(1):
            break
        for s in ready:
            if s is not sys.stdin:
                b, peer = s.recvfrom(65535)
                s.sendto(b, peer)
                got.append([s.getsockname()[1], peer[0].removeprefix("::ffff:"), len(b)])
    print(json.dumps({"name": name, "got": got}), flush=True)


def usend(host, port, n, sport):
    data = random.Random(n).randbytes(n)
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("", sport))
    s.sendto(data, (host, port))
    print(json.dumps({"sha256": hashlib.sha256(data).hexdigest()}))


def urecv(port, seconds):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    s.settimeout(seconds)
    print("READY", flush=True)
    try:
        b, peer = s.recvfrom(65535)
        print(json.dumps({"from": peer[0].removeprefix("::ffff:"), "port": peer[1], "bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()}))
    except socket.timeout:
        print(json.dumps({"from": None, "port": None, "bytes": None, "sha256": None}))


def tunnelecho(tunnel, local, remote, inner, host, port, flows, mtu=None):
    import ipaddress

    from scapy.all import ICMP, IP, UDP, ICMPv6PacketTooBig, IPv6, raw
    from scapy.contrib.gtp import GTP_U_Header

    v6 = ":" in host
    if tunnel == "gue":
        # RFC 8086: version 0, no flags or options, the inner protocol.
        outer_port, gue = 6080, bytes([0, 41 if v6 else 4, 0, 0])
        wrap, unwrap = (lambda p: gue + raw(p)), (lambda b: (b[:4] == gue, b[4:]))
    elif tunnel == "esp":
        # ESP in UDP (RFC 3948), AES-GCM-128: test_ipsec's inbound SA (seed 2) to seal,
        # its outbound one (seed 1) to open what comes back, both scapy's.
        from scapy.all import UDP as U
        from scapy.layers.ipsec import ESP
        from test_ipsec import IN_SPI, OUT_SPI, scapy_sa
        outer_port = 4500
        seal = scapy_sa("aes-gcm-128", 4, True, IN_SPI, 2, local, remote)
        # Each run's sequence numbers above the last run's (the gateway's replay window
        # lives on): milliseconds of the system's monotonic clock.
        seal.seq_num = int(time.monotonic() * 1000) + 1
        opener = scapy_sa("aes-gcm-128", 4, True, OUT_SPI, 1, remote, local)

        def wrap(p):
            return raw(seal.encrypt(p)[U].payload)

        def unwrap(b):
            try:
                return (True, raw(opener.decrypt(IP(src=remote, dst=local) / U(sport=4500, dport=4500) / ESP(b))))
            except Exception as e:  # a packet it cannot open: reported as what came
                return (repr(e), b"")
    else:
        _, up, down = tunnel.split(":")
        outer_port = 2152

        def wrap(p):
            return raw(GTP_U_Header(teid=int(up, 0)) / p)

        def unwrap(b):
            # Past any extension header (the UPF's PDU session container), as scapy reads it.
            g = GTP_U_Header(b)
            inner = g.getlayer(IPv6 if v6 else IP)
            return (g.gtp_type == 255 and g.teid == int(down, 0), raw(inner) if inner else b"")
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((local, outer_port))
    rx.settimeout(2)
    answered, missing, wrong, errors = 0, [], [], 0
    # A router on the client's side of the tunnel: the first address of the client's /64
    # or /24.
    router = str(next(ipaddress.ip_interface(f"{inner}/{64 if v6 else 24}").network.hosts()))
    for i in range(flows):
        # GUE: each flow from an outer port of its own, as a GUE sender spreads its flows;
        # GTP-U from 2152 (as a gNB sends), ESP in UDP from 4500 (as a NAT-T peer): one
        # outer flow for all.
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if tunnel == "gue" else rx
        if tx is not rx:
            tx.bind((local, 40000 + i))
        for k in range(2):
            msg = f"flow {i} datagram {k} ".encode() * 4
            packet = (IPv6(src=inner, dst=host) if v6 else IP(src=inner, dst=host)) / UDP(sport=20000 + i, dport=port) / msg
            tx.sendto(wrap(packet), (remote, outer_port))
            try:
                header_ok, b = unwrap(rx.recv(65535))
            except socket.timeout:
                missing.append([i, k])
                continue
            p = IPv6(b) if v6 else IP(b)
            if UDP not in p:
                wrong.append([i, k, header_ok, p.summary()])
                continue
            # The checksums scapy computes for the packet as it came.
            again = p.copy()
            del again[UDP].chksum
            if not v6:
                del again[IP].chksum
            seen = [header_ok, p.src, p[UDP].sport, p.dst, p[UDP].dport, bytes(p[UDP].payload) == msg, raw(again) == raw(p)]
            if seen == [True, host, port, inner, 20000 + i, True, True]:
                answered += 1
                if mtu and k == 1:
                    # The answer did not fit the router's next link: it tells the answer's
                    # source, the service, inside the tunnel.
                    error = (IPv6(src=router, dst=host) / ICMPv6PacketTooBig(mtu=mtu) if v6
                             else IP(src=router, dst=host) / ICMP(type=3, code=4, nexthopmtu=mtu)) / raw(p)
                    tx.sendto(wrap(error), (remote, outer_port))
                    errors += 1
            else:
                wrong.append([i, k, *seen])
        if tx is not rx:
            tx.close()
    print(json.dumps({"sent": 2 * flows, "answered": answered, "missing": missing, "wrong": wrong, "errors": errors}))

def tunnelserve(local, remote, ports):
    from scapy.all import IP, UDP, raw

    # A backend behind a GUE tunnel (RFC 8086's header over a plain UDP socket): each
    # IPv4 UDP datagram to one of PORTS sent back whole to its sender, from the address
    # and port it came to, in GUE from an outer source port of the flow's own (the
    # entropy a GUE sender gives, so a receiver's RSS spreads the flows).
    gue = bytes([0, 4, 0, 0])
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((local, 6080))
    print("READY", flush=True)
    got, senders, end = [], {}, time.time() + LIMIT
    while (left := end - time.time()) > 0:
        ready, _, _ = select.select([rx, sys.stdin], [], [], left)
        if sys.stdin in ready and not sys.stdin.read(1):
            break
        if rx not in ready:
            continue
        b = rx.recv(65535)
        if b[:4] != gue:
            continue
        p = IP(b[4:])
        if UDP not in p or p[UDP].dport not in ports:
            continue
        flow = (p.src, p[UDP].sport, p[UDP].dport)
        if flow not in senders:
            senders[flow] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            senders[flow].bind((local, 40000 + len(senders)))
        answer = IP(src=p.dst, dst=p.src) / UDP(sport=p[UDP].dport, dport=p[UDP].sport) / bytes(p[UDP].payload)
        senders[flow].sendto(gue + raw(answer), (remote, 6080))
        got.append([p[UDP].dport, p.src, len(p[UDP].payload)])
    print(json.dumps({"got": got}), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif mode == "who":
        who(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "echo":
        echo(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6], *map(float, sys.argv[6:7]))
    elif mode == "uecho":
        uecho(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), [int(x) for x in sys.argv[5].split(",")] if sys.argv[5:] else None)
    elif mode == "userve":
        userve(sys.argv[2], [int(x) for x in sys.argv[3:]])
    elif mode == "usend":
        usend(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "urecv":
        urecv(int(sys.argv[2]), float(sys.argv[3]))
    elif mode == "tunnelserve":
        tunnelserve(sys.argv[2], sys.argv[3], [int(x) for x in sys.argv[4:]])
    elif mode == "tunnelecho":
        tunnelecho(*sys.argv[2:7], int(sys.argv[7]), int(sys.argv[8]), *map(int, sys.argv[9:10]))
