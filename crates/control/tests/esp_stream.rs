//! `protocol = "esp"` streams: the generator sends what an inbound SA's peer would, sealed
//! with the SA's keys, and the dataplane decrypts every packet of it; a stream that could
//! not be decrypted (the replay window, another SA's addresses, modifiers) is refused at
//! load, naming the stream's field.

use control::config::Config;
use control::dataplane::assemble;
use std::path::Path;

const BASE: &str = r#"
[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:03"
addresses = ["198.18.2.1/24"]

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.2.2"

[[neighbour]]
interface = "null0"
ip = "198.18.2.2"
mac = "02:00:00:00:02:02"

[[ipsec_sa]]
index = 2
spi = 0x2001
direction = "inbound"
algorithm = "aes-gcm-128"
enc_key = "202122232425262728292a2b2c2d2e2f30313233"
local = "198.18.1.1"
remote = "198.18.1.5"
anti_replay = false

[[ipsec_sa]]
index = 3
spi = 0x3001
direction = "inbound"
algorithm = "chacha20-poly1305"
enc_key = "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263"
local = "2001:db8:1::1"
remote = "2001:db8:1::5"
udp_encap = true
udp_src_port = 4501
anti_replay = false
"#;

fn stream(sa: u32, src: &str, dst: &str, inner_src: &str, inner_dst: &str, extra: &str) -> String {
    format!(
        "[[stream]]\nname = \"esp{sa}\"\ninterface = \"pg0\"\nsize = 100\ncount = 40\nprotocol = \"esp\"\nsa = {sa}\nsrc = \"{src}\"\ndst = \"{dst}\"\ninner_src = \"{inner_src}\"\ninner_dst = \"{inner_dst}\"\n{extra}"
    )
}

fn error_of(text: &str) -> String {
    let cfg = Config::parse(text, "gw.toml", Path::new(".")).expect("parses");
    match assemble(&cfg) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_packet_of_an_esp_stream_is_decrypted_and_forwarded() {
    // IPv4 ESP (AES-GCM) carrying IPv4, and IPv6 ESP in UDP (ChaCha20-Poly1305) carrying IPv4.
    let text = format!(
        "{BASE}{}{}",
        stream(2, "198.18.1.5", "198.18.1.1", "198.19.160.1", "198.19.5.1", ""),
        stream(3, "2001:db8:1::5", "2001:db8:1::1", "198.19.161.1", "198.19.5.2", ""),
    );
    let cfg = Config::parse(&text, "gw.toml", Path::new(".")).expect("parses");
    let (_control, mut w) = assemble(&cfg).expect("assembles").into_single();
    while !w.inputs_done() {
        w.poll_once();
    }
    w.poll_once();
    let s = w.snapshot();
    let count = |node: &str, counter: &str| s.counters.iter().find(|e| e.node == node && e.counter == counter).map_or(0, |e| e.count);
    assert_eq!(count("esp4-decrypt", "decrypted"), 40, "{:?}", s.counters);
    assert_eq!(count("esp6-decrypt", "decrypted"), 40, "{:?}", s.counters);
    // Nothing else counted by the decrypt nodes (no bad-icv, no replay, no drop).
    let other: Vec<_> = s.counters.iter().filter(|e| e.node.starts_with("esp") && e.counter != "decrypted" && e.count > 0).collect();
    assert!(other.is_empty(), "{other:?}");
    let null0 = s.ports.iter().find(|p| p.name == "null0").expect("null0");
    assert_eq!(null0.counters.tx_packets, 80, "every inner packet routed out of null0");
}

#[test]
fn esp_streams_that_could_not_be_decrypted_are_refused_by_field() {
    let cases = [
        // Anti-replay on: every packet after the first would be a replay.
        (
            BASE.replacen("anti_replay = false", "anti_replay = true", 1),
            stream(2, "198.18.1.5", "198.18.1.1", "198.19.160.1", "198.19.5.1", ""),
            "stream[0].sa",
            "anti_replay",
        ),
        (BASE.into(), stream(7, "198.18.1.5", "198.18.1.1", "198.19.160.1", "198.19.5.1", ""), "stream[0].sa", "inbound"),
        (BASE.into(), stream(2, "198.18.1.6", "198.18.1.1", "198.19.160.1", "198.19.5.1", ""), "stream[0].src", "remote"),
        (BASE.into(), stream(2, "198.18.1.5", "198.18.1.2", "198.19.160.1", "198.19.5.1", ""), "stream[0].dst", "local"),
        (
            BASE.into(),
            stream(2, "198.18.1.5", "198.18.1.1", "198.19.160.1", "198.19.5.1", "[[stream.modify]]\nfield = \"src-port\"\nincrement = 4\n"),
            "stream[0].modify",
            "modifiers",
        ),
        (
            BASE.into(),
            stream(2, "198.18.1.5", "198.18.1.1", "198.19.160.1", "198.19.5.1", "").replace("sa = 2\n", ""),
            "stream[0].protocol",
            "`sa`",
        ),
        (
            BASE.into(),
            stream(2, "198.18.1.5", "198.18.1.1", "198.19.160.1", "198.19.5.1", "")
                .replace("protocol = \"esp\"", "protocol = \"udp\"")
                .replace("inner_src = \"198.19.160.1\"\ninner_dst = \"198.19.5.1\"\n", ""),
            "stream[0].sa",
            "esp",
        ),
    ];
    for (base, s, field, word) in cases {
        let e = error_of(&format!("{base}{s}"));
        assert!(e.contains(field) && e.contains(word), "expected {field} / {word}: {e}");
    }
}
