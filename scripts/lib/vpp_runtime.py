"""VPP's `show runtime` read back, for the scripts that run VPP beside vecgate
(scripts/bench-vs-vpp.sh, scripts/bench-ipsec-vs-vpp.sh)."""


def vpp_runtime(fn):
    """Per node: clocks per packet and packets, from `show runtime`."""
    nodes = {}
    for line in open(fn):
        p = line.split()
        if len(p) >= 7 and p[-5].isdigit() and p[-4].isdigit() and p[-3].isdigit() and int(p[-4]) > 0:
            nodes[p[0]] = (float(p[-2]), int(p[-4]))
    return nodes
