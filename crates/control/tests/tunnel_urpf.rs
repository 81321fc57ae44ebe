//! The reverse-path check on tunnels (`urpf` on `[[gtpu_tunnel]]` and `[[udp_tunnel]]`,
//! `set interface <tunnel> urpf …`): generators send G-PDUs and GUE packets whose inner
//! sources are the tunnel's own, another tunnel's, the far side of a link, the
//! gateway's, and nobody's. A strict tunnel passes only the first; a loose one anything
//! with a route back; each drop is counted under its reason in the decap node, and
//! every packet is either sent or counted. Switched off through the typed API, the
//! same packets all pass.

use control::api::Request;
use control::config::Config;
use control::dataplane::assemble;
use engine::stats::Snapshot;
use engine::worker::Context;
use std::path::Path;

const N: u64 = 300;

fn config() -> String {
    let mut c = String::from(concat!(
        pg0_null0_config!(),
        r#"
[[neighbour]]
interface = "null0"
ip = "198.18.1.3"
mac = "02:00:00:00:01:03"

# The data network, by a link.
[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 7
teid_out = 8
ue = "198.18.200.0/24"
urpf = "strict"

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.3"
teid_in = 9
teid_out = 10
ue = "198.18.201.0/24"
urpf = "loose"

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
routes = ["198.18.210.0/24"]
urpf = "strict"
"#
    ));
    // (protocol, teid, inner source)
    let streams = [
        ("gtpu", 7, "198.18.200.1"), // strict, its own: passes
        ("gtpu", 7, "198.18.201.1"), // strict, the other tunnel's: wrong tunnel
        ("gtpu", 7, "198.19.5.5"),   // strict, by a link: wrong tunnel
        ("gtpu", 7, "198.18.1.1"),   // the gateway's own
        ("gtpu", 9, "198.19.5.5"),   // loose, a route back: passes
        ("gtpu", 9, "198.18.250.1"), // loose, no route back
        ("gue", 0, "198.18.210.1"),  // strict, its own: passes
        ("gue", 0, "198.18.200.1"),  // strict, a GTP-U tunnel's: wrong tunnel
    ];
    for (i, (proto, teid, inner)) in streams.iter().enumerate() {
        let extra = match *proto {
            "gtpu" => format!("teid = {teid}\n"),
            _ => "dst_port = 6080\n".into(),
        };
        c += &format!(
            "\n[[stream]]\nname = \"s{i}\"\ninterface = \"pg0\"\nsize = 120\ncount = {N}\nprotocol = \"{proto}\"\n\
             src = \"198.18.1.2\"\ndst = \"198.18.1.1\"\ninner_src = \"{inner}\"\ninner_dst = \"198.19.0.1\"\n{extra}"
        );
    }
    c
}

fn counter(s: &Snapshot, node: &str, name: &str) -> u64 {
    s.counters.iter().find(|c| c.node == node && c.counter == name).map_or(0, |c| c.count)
}

fn run(worker: &mut engine::worker::Worker<impl Context>) -> Snapshot {
    while !worker.inputs_done() {
        worker.poll_once();
    }
    worker.poll_once();
    worker.snapshot()
}

#[test]
fn tunnels_check_the_sources_they_take_out() {
    let cfg = Config::parse(&config(), "test.toml", Path::new(".")).unwrap();
    let (mut control, mut worker) = assemble(&cfg).unwrap().into_single();
    let s = run(&mut worker);
    let sent = s.ports.iter().find(|p| p.name == "null0").unwrap().counters.tx_packets;
    assert_eq!(sent, 3 * N, "the tunnel's own source twice, a routable one on the loose tunnel");
    assert_eq!(counter(&s, "gtpu4-input", "urpf-wrong-tunnel"), 2 * N);
    assert_eq!(counter(&s, "gtpu4-input", "urpf-own-address"), N);
    assert_eq!(counter(&s, "gtpu4-input", "urpf-no-route"), N);
    assert_eq!(counter(&s, "gue4-input", "urpf-wrong-tunnel"), N);
    assert_eq!(counter(&s, "gtpu4-input", "decapsulated") + counter(&s, "gue4-input", "decapsulated"), 8 * N);
    assert_eq!(worker.pool.in_use(), 0);

    // What `show gtpu tunnels` and `show udp tunnels` say.
    let shown = control.handle(&Request::ShowGtpuTunnels { limit: None });
    assert!(shown.text.contains("urpf strict") && shown.text.contains("urpf loose"), "{}", shown.text);
    let shown = control.handle(&Request::ShowUdpTunnels {});
    assert!(shown.text.contains("urpf strict"), "{}", shown.text);

    // Off, through the API as `set interface … urpf off` on a gateway of the same
    // configuration before its generators run: the same packets all pass.
    let (mut control, mut worker) = assemble(&cfg).unwrap().into_single();
    for name in ["gtpu_tunnel0", "gtpu_tunnel1", "udp_tunnel0"] {
        let r = control.handle(&Request::SetInterfaceUrpf { interface: name.into(), mode: ip::urpf::Urpf::Off });
        assert!(r.ok, "{name}: {}", r.text);
    }
    let r = control.handle(&Request::SetInterfaceUrpf { interface: "gtpu_tunnel9".into(), mode: ip::urpf::Urpf::Strict });
    assert!(!r.ok && r.text.contains("gtpu_tunnel9"), "{}", r.text);
    assert!(!control.handle(&Request::ShowGtpuTunnels { limit: None }).text.contains("urpf"));
    let s = run(&mut worker);
    assert_eq!(s.ports.iter().find(|p| p.name == "null0").unwrap().counters.tx_packets, 8 * N);
    assert!(s.counters.iter().all(|c| !c.counter.starts_with("urpf") || c.count == 0));
}
