//! A reload that changes only a UDP tunnel's GRE key changes the tunnel in place (the
//! path `set udp tunnel` takes): it keeps its id, routes, counters and GRE sequence,
//! where removing and adding it would start them again. So does one that changes only a
//! UDP or GTP-U tunnel's source check (`set interface … urpf`'s path).

use common::reload_file;
use control::api::Request;

use crate::common;

const CFG: &str = concat!(
    pg0_null0_config!(),
    gre_and_gtpu_tunnels_config!(),
    r#"
[[stream]]
name = "into-gre"
interface = "pg0"
size = 64
count = 1000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.1.1"
"#
);

/// A gateway loaded from `CFG` in a file of its own (so that it can reload it), its
/// generator's packets sent into the GRE tunnel.
fn run_from_file() -> (tempfile::TempDir, control::dataplane::Control) {
    let (dir, c, mut worker) = common::from_file(CFG);
    common::run_to_end(&mut worker);
    (dir, c)
}

#[test]
fn a_reload_changing_only_the_key_keeps_the_tunnel_and_its_counters() {
    let (dir, mut c) = run_from_file();
    let find = Request::FindUdpTunnels { remote: None, local: None, id: Some(0) };
    assert_eq!(c.handle(&find).data[0]["counters"]["tx_packets"], 1000);

    let r = reload_file(&dir, &mut c, &CFG.replace("key = 7", "key = 9"));
    assert!(r.ok, "{r:?}");
    assert_eq!(
        r.data["changes"],
        serde_json::json!([{ "action": "replaced", "object": "udp_tunnel", "name": "udp_tunnel0 (remote 198.18.1.2, key in place)" }])
    );
    let row = &c.handle(&find).data[0];
    assert_eq!((row["key"].as_u64(), &row["counters"]["tx_packets"]), (Some(9), &serde_json::json!(1000)), "{row}");
    let fib = c.handle(&Request::ShowIpFibEntry { query: "198.19.1.1".into() });
    assert!(fib.text.contains("udp_tunnel0"), "{}", fib.text);

    // Another change (the port) is still a replacement: a new tunnel, counted from zero.
    let r = reload_file(&dir, &mut c, &CFG.replace("key = 7", "key = 9\nport = 5000"));
    assert!(r.ok, "{r:?}");
    let row = &c.handle(&find).data[0];
    assert_eq!((row["port"].as_u64(), &row["counters"]["tx_packets"]), (Some(5000), &serde_json::json!(0)), "{row}");
}

#[test]
fn a_reload_changing_only_urpf_changes_tunnels_in_place() {
    let (dir, mut c) = run_from_file();
    let changed = CFG
        .replace("routes = [\"198.19.1.0/24\"]", "routes = [\"198.19.1.0/24\"]\nurpf = \"strict\"")
        .replace("ue = \"198.19.2.0/24\"", "ue = \"198.19.2.0/24\"\nurpf = \"loose\"");
    let r = reload_file(&dir, &mut c, &changed);
    assert!(r.ok, "{r:?}");
    assert_eq!(
        r.data["changes"],
        serde_json::json!([
            { "action": "replaced", "object": "gtpu_tunnel", "name": "gtpu_tunnel0 (teid-in 100, urpf in place)" },
            { "action": "replaced", "object": "udp_tunnel", "name": "udp_tunnel0 (remote 198.18.1.2, urpf in place)" },
        ])
    );
    let row = &c.handle(&Request::FindUdpTunnels { remote: None, local: None, id: Some(0) }).data[0];
    assert_eq!((row["urpf"].as_str(), &row["counters"]["tx_packets"]), (Some("strict"), &serde_json::json!(1000)), "{row}");
    let rows = c.handle(&Request::ShowGtpuTunnels { limit: None });
    assert!(rows.text.contains("gtpu_tunnel0") && rows.text.contains("urpf loose"), "{}", rows.text);
    let fib = c.handle(&Request::ShowIpFibEntry { query: "198.19.2.1".into() });
    assert!(fib.text.contains("gtpu_tunnel0"), "{}", fib.text);
}
