"""`vecgate k8s --punt-health-ports`: the controller punts its own health check ports on
a gateway that owns the node's address, so a load balancer's checks reach it.

  ns C (the load balancer's checker)   ns G (vecgate)                       API namespace (the host's stack)
  a0 198.18.0.2/24            ─veth─   a1 198.18.0.1/24 (af_packet)
                                       tap "host" 198.18.250.1/30  ─tap─    vg-host 198.18.250.2/30
                                       [punt] host4 198.18.250.2            lo: 198.18.0.1/32 (the gateway's address)
                                                                            kube-apiserver, vecgate k8s

The gateway's [punt] lists no port of its own: the controller adds the proxy health
server's port and the Service's healthCheckNodePort (owner k8s) as their listeners open,
removes a previous run's port after its initial sync, and the Service's port once the
Service is deleted. C's HTTP GETs to the gateway's address on those ports get the
controller's answers through the tap. A restarted gateway gets the controller's ports
back within moments of answering."""
import time

from netns import Vecgate
from test_lb_k8s import BACKENDS, api, apply, controller, endpoint, endpoint_slice, http_get, kubectl, service, wait_for  # noqa: F401

HC_PORT = 32111          # the Service's healthCheckNodePort
HEALTHZ = 10266          # the proxy health server's port (--healthz-bind-address)
STALE = 31999            # a previous run's port, owner k8s

CONFIG = """[dataplane]

[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "host"
type = "tap"
host_if = "vg-host"
mac = "02:00:00:00:00:0b"
addresses = ["198.18.250.1/30"]

[lb]
snat4 = "198.18.0.1"

[punt]
interface = "host"
host4 = "198.18.250.2"
"""


def punt_ports(gw):
    """The punted TCP ports: port -> (the file's, owner)."""
    return {p["port"]: (p["file"], p.get("owner")) for p in gw.ctl("show", "punt")["data"]["ports"] if p["protocol"] == "tcp"}


def test_the_controller_punts_its_health_ports(api, lab, vecgate, tmp_path):
    api_ns, w = api
    c, g = lab.ns("c"), lab.dataplane_ns("gw")
    lab.veth(c, "a0", g, "a1")
    lab.run(c, "ip", "addr", "add", "198.18.0.2/24", "dev", "a0")
    gw = Vecgate(lab, vecgate, g, CONFIG, tmp_path, split_dataplane=True)
    # The tap's kernel side is the host's stack: the API namespace, holding the gateway's
    # address and routing C's subnet back through the tap from it.
    lab.run(g, "ip", "link", "set", "vg-host", "netns", api_ns)
    lab.run(api_ns, "ip", "link", "set", "vg-host", "up")
    lab.run(api_ns, "ip", "addr", "add", "198.18.250.2/30", "dev", "vg-host")
    lab.run(api_ns, "ip", "addr", "add", "198.18.0.1/32", "dev", "lo")
    lab.run(api_ns, "ip", "route", "add", "198.18.0.0/24", "via", "198.18.250.1", "src", "198.18.0.1")
    lab.run(api_ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.250.1", check=False)
    lab.run(c, "ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.0.1", check=False)

    # A previous run's port, and one of another owner the controller leaves alone.
    gw.ctl("punt", "port", "add", "tcp", str(STALE), "owner", "k8s")
    gw.ctl("punt", "port", "add", "tcp", "8022", "owner", "ops")
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    tcp80 = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    hc = service("hc", "198.18.128.71", tcp80, type="LoadBalancer", externalTrafficPolicy="Local",
                 healthCheckNodePort=HC_PORT, allocateLoadBalancerNodePorts=False)
    apply(api_ns, w, [hc, endpoint_slice("hc-1", "hc", http, [endpoint(BACKENDS[0])])])
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path, extra=(
        "--punt-health-ports", "--health-check-bind-address", "198.18.0.1", "--healthz-bind-address", f"198.18.0.1:{HEALTHZ}"))
    try:
        want = {HC_PORT: (False, "k8s"), HEALTHZ: (False, "k8s"), 8022: (False, "ops")}
        wait_for("the health ports punted, the stale one gone", lambda: punt_ports(gw) == want, timeout=30)
        assert "tcp/32111    api (owner k8s)" in gw.ctl("show", "punt", json_out=False)
        # C's checks reach the controller through the gateway's address.
        status, body, _ = wait_for("the Service's check through the tap", lambda: http_get(c, "198.18.0.1", HC_PORT), timeout=30)
        assert (status, body["localEndpoints"], body["service"]) == (200, 1, {"namespace": "default", "name": "hc"}), body
        status, body, _ = http_get(c, "198.18.0.1", HEALTHZ, "/healthz")
        assert status == 200 and body["nodeEligible"] is True, body
        assert gw.errors().get(("ip-punt", "punted"), 0) >= 2, gw.errors()

        # The gateway restarted from its file, which forgets the ports added at run time:
        # the controller's are back as soon as it answers (the controller's idle control
        # connection ended with the old one), well before the 5 s check; the other
        # owner's port is not the controller's to restore.
        # First the controller's own 5 s check is made to pass just now: a port of its
        # deleted by hand is put back by that check, and the restart follows at once, so
        # that the next check is seconds away.
        gw.ctl("punt", "port", "del", "tcp", str(HEALTHZ), "owner", "k8s")
        wait_for("the deleted port put back", lambda: HEALTHZ in punt_ports(gw), timeout=10)
        gw.restart()
        t0 = time.time()
        want = {HC_PORT: (False, "k8s"), HEALTHZ: (False, "k8s")}
        wait_for("the health ports punted again", lambda: punt_ports(gw) == want, timeout=30)
        took = time.time() - t0
        print(f"health ports punted again {took:.2f} s after the restarted gateway answered")
        assert took < 2.5, f"{took:.2f} s after the restart"
        assert "gateway gone" in log.read_text()

        # The Service deleted: its listener closes, its port is punted no more.
        kubectl(api_ns, w, "delete", "service", "hc")
        want.pop(HC_PORT)
        wait_for("the Service's port unpunted", lambda: punt_ports(gw) == want, timeout=30)
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
        kubectl(api_ns, w, "delete", "service", "hc", "--ignore-not-found")
        kubectl(api_ns, w, "delete", "endpointslice", "hc-1", "--ignore-not-found")
        lab.run(api_ns, "ip", "route", "del", "198.18.0.0/24", check=False)
        lab.run(api_ns, "ip", "addr", "del", "198.18.0.1/32", "dev", "lo", check=False)
    text = log.read_text()
    assert "health check port punted" in text and "health check port no longer punted" in text, text
    assert "punt request refused" not in text and "cannot be bound" not in text, text
    assert gw.stop()[0] == 0
