//! Ports punted at run time (`punt_port_add` / `punt_port_del`) through the whole graph
//! (the fuzz graph's gateway, whose `[punt]` link is `narrow0` with the host at
//! 198.18.2.2 / 2001:db8:2::2): a TCP SYN to the gateway's address on a port added
//! through the API reaches the host through the punt link, whole (TTL as it arrived);
//! before the port is added and after it is deleted the gateway answers the SYN itself
//! exactly as before. `show punt` says where each port came from.

use crate::common;

use common::{count_all as count, seed_frames as seed, tcp4};
use control::api::Request;
use control::fuzz::graph::Harness;
use std::net::Ipv4Addr;
use wire::ipv4::Ipv4Packet;
use wire::tcp::TcpPacket;

const SYN: u8 = 0x02;
/// narrow0, the punt link, is the graph's third interface.
const PUNT_LINK: usize = 2;

fn add(port: u16, owner: &str) -> Request {
    Request::PuntPortAdd { protocol: lb::Protocol::Tcp, port, owner: Some(owner.into()) }
}

/// The destination of the one frame sent, if it is an ICMP destination unreachable out
/// of the interface the SYN came in by (how this gateway answers TCP to a port of its
/// own that nothing serves).
fn unreachable_to_client(out: &[(usize, io::mem::TxFrame)]) -> Option<Ipv4Addr> {
    let [(0, f)] = out else { return None };
    let ip = Ipv4Packet::new_checked(&f.bytes[14..]).ok()?;
    (ip.protocol() == wire::IpProtocol::Icmp && ip.payload().first() == Some(&3)).then(|| ip.dst_addr())
}

#[test]
fn a_syn_to_an_added_port_reaches_the_host_and_is_answered_by_the_gateway_once_deleted() {
    let mut h = Harness::new();
    let (client, ours) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 1));
    let template = seed("lb4-tcp")[0].clone();
    let syn = tcp4(&template, client, 40001, ours, 30123, Some(SYN));
    let ttl = Ipv4Packet::new_checked(&syn.bytes[14..]).unwrap().ttl();

    let before = h.frame(0, syn.clone());
    assert!(before.iter().all(|(port, _)| *port != PUNT_LINK), "not punted before it is added: {before:?}");
    assert_eq!(unreachable_to_client(&before), Some(client), "the gateway answers it itself: {before:?}");
    let punted_before = count(&h, "ip-punt", "punted");

    let r = h.control.handle(&add(30123, "k8s"));
    assert!(r.ok, "{r:?}");
    let out = h.frame(0, syn.clone());
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, f) = &out[0];
    assert_eq!(*port, PUNT_LINK, "out of the punt link");
    assert_eq!(f.bytes[..6], [0x02, 0, 0, 0, 0x03, 0x02], "to the host's MAC");
    let ip = Ipv4Packet::new_checked(&f.bytes[14..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr(), ip.ttl()), (client, ours, ttl), "whole, delivered not forwarded");
    assert_eq!(TcpPacket::new_checked(ip.payload()).unwrap().dst_port(), 30123);
    assert_eq!(count(&h, "ip-punt", "punted"), punted_before + 1);
    // Another port of ours is still the gateway's.
    let other = h.frame(0, tcp4(&template, client, 40001, ours, 30124, Some(SYN)));
    assert!(other.iter().all(|(port, _)| *port != PUNT_LINK), "{other:?}");

    let show = h.control.handle(&Request::ShowPunt {});
    let row = show.data["ports"].as_array().unwrap().iter().find(|r| r["port"] == 30123).cloned().unwrap();
    assert_eq!((row["protocol"].as_str(), row["file"].as_bool(), row["owner"].as_str()), (Some("tcp"), Some(false), Some("k8s")));
    assert!(show.text.contains("tcp/30123    api (owner k8s)") && show.text.contains("tcp/179      file"), "{}", show.text);

    let r = h.control.handle(&Request::PuntPortDel { protocol: lb::Protocol::Tcp, port: 30123, owner: Some("k8s".into()) });
    assert!(r.ok, "{r:?}");
    let after = h.frame(0, syn);
    assert_eq!(unreachable_to_client(&after), Some(client), "answered by the gateway as before it was added: {after:?}");
    assert_eq!(count(&h, "ip-punt", "punted"), punted_before + 1, "nothing more punted");
}
