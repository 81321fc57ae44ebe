"""Raw SCTP frames for tests/test_lb_sctp.py, run with `ip netns exec` (the kernels here
have no SCTP module: scapy builds and reads the packets, the namespaces' kernels only
answer ARP and neighbour solicitations).

  sniff IFACE         print READY once capturing, then on a line "stop" on stdin (or
                      after 60 s) one JSON line: the hex of every SCTP frame received
  send IFACE HEX...   send each Ethernet frame as given
"""
import json
import sys
import threading

from scapy.all import AsyncSniffer, sendp
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6


def is_sctp(p):
    return (IP in p and p[IP].proto == 132) or (IPv6 in p and p[IPv6].nh == 132)


def sniff(iface):
    ready = threading.Event()
    s = AsyncSniffer(iface=iface, lfilter=is_sctp, store=True, started_callback=ready.set)
    s.start()
    if not ready.wait(10):
        sys.exit("sniffer did not start")
    print("READY", flush=True)
    t = threading.Timer(60, lambda: sys.stdin.close())
    t.daemon = True
    t.start()
    try:
        sys.stdin.readline()
    except ValueError:
        pass
    frames = s.stop() or []
    print(json.dumps([bytes(p).hex() for p in frames]), flush=True)


def send(iface, frames):
    for h in frames:
        sendp(bytes.fromhex(h), iface=iface, verbose=False)


if __name__ == "__main__":
    if sys.argv[1] == "sniff":
        sniff(sys.argv[2])
    elif sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
