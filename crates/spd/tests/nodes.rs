//! The SPD nodes in a graph with the IP nodes: where each packet goes (by the packets
//! each next node received and the SA ids a stand-in `esp4-encrypt` saw), which counter
//! counts each drop, and that a policy change reaches every cached flow from the next
//! vector while flows it does not touch keep their decision and lose nothing.
//!
//! `esp4-encrypt` / `esp6-encrypt` here are test stand-ins recording `meta.param`; the
//! real nodes come with the ESP crate.

use arc_swap::ArcSwap;
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Graph, GraphBuilder, IfIndex, Node, NodeId, Pool, Verdict};
use ip::state::{InterfaceSpec, RouteTarget, RouterState};
use ip::{HasIp, IfAddr, IpContext, Prefix};
use spd::policy::{ActionKind, Direction, PolicySpec};
use spd::{HasSpd, SpdContext, SpdState};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use wire::EthernetAddress;

struct Cx {
    ip: IpContext,
    spd: SpdContext,
}

impl engine::worker::Context for Cx {
    fn refresh(&mut self) {
        self.ip.refresh();
        self.spd.refresh();
    }
}
impl HasIp for Cx {
    fn ip(&mut self) -> &mut IpContext {
        &mut self.ip
    }
}
impl HasSpd for Cx {
    fn split_spd(&mut self) -> (&mut IpContext, &mut SpdContext) {
        (&mut self.ip, &mut self.spd)
    }
}

next_nodes! { enum StandInNext { Drop = "error-drop" } }
counters! { enum StandInCounter { Seen(Info, "seen", "packets the stand-in took") } }

/// Records (SA id, source address's last byte, destination port) of what it is given.
struct StandInEncrypt {
    name: &'static str,
    seen: Arc<Mutex<Vec<(u32, u32)>>>,
}

impl Node<Cx> for StandInEncrypt {
    type Next = StandInNext;
    type Counter = StandInCounter;
    fn name(&self) -> &'static str {
        self.name
    }
    fn process(&mut self, _: &mut Cx, c: &mut Counts<'_, StandInCounter>, buf: &mut Buffer) -> Verdict<StandInNext, StandInCounter> {
        c.inc(StandInCounter::Seen);
        self.seen.lock().unwrap().push((buf.meta.param, flow_id(buf.bytes())));
        Verdict::Next(StandInNext::Drop)
    }
}

/// The flow number a test packet carries (its UDP source port and last source byte).
fn flow_id(b: &[u8]) -> u32 {
    if b[0] >> 4 == 4 {
        u16::from_be_bytes([b[20], b[21]]) as u32 | (b[15] as u32) << 16
    } else {
        u16::from_be_bytes([b[40], b[41]]) as u32 | (b[23] as u32) << 16
    }
}

const OUT_IF: IfIndex = IfIndex(1);
const IN_IF: IfIndex = IfIndex(0);

struct Rig {
    graph: Graph<Cx>,
    pool: Pool,
    cx: Cx,
    router: RouterState,
    spd: SpdState,
    seen4: Arc<Mutex<Vec<(u32, u32)>>>,
    seen6: Arc<Mutex<Vec<(u32, u32)>>>,
    out4: NodeId,
    out6: NodeId,
    in4: NodeId,
}

fn mac(n: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, n])
}

impl Rig {
    fn new(flow_cache: Option<usize>) -> Rig {
        let ifs = vec![
            InterfaceSpec { name: "in0".into(), mac: mac(1), mtu: 1500, addresses: vec!["198.18.0.1/24".parse::<IfAddr>().unwrap()] },
            InterfaceSpec {
                name: "out0".into(),
                mac: mac(2),
                mtu: 1500,
                addresses: vec!["198.18.1.1/24".parse::<IfAddr>().unwrap(), "2001:db8:1::1/64".parse::<IfAddr>().unwrap()],
            },
        ];
        let mut router = RouterState::new(ifs).unwrap();
        let hop4: IpAddr = "198.18.1.2".parse().unwrap();
        let hop6: IpAddr = "2001:db8:1::2".parse().unwrap();
        router.add_route("198.19.0.0/16".parse::<Prefix>().unwrap(), RouteTarget::Via { next_hop: hop4, interface: None }).unwrap();
        router.add_route("2001:db8:2::/48".parse::<Prefix>().unwrap(), RouteTarget::Via { next_hop: hop6, interface: None }).unwrap();
        router.set_neighbour(OUT_IF, hop4, mac(9), true);
        router.set_neighbour(OUT_IF, hop6, mac(9), true);
        let ip_tables = Arc::new(ArcSwap::from_pointee(router.build()));
        let spd = SpdState::new();
        let cx = Cx { ip: IpContext::new(ip_tables, None, ip::Limits::default()), spd: SpdContext::new(spd.shared(), flow_cache).unwrap() };
        let seen4 = Arc::new(Mutex::new(Vec::new()));
        let seen6 = Arc::new(Mutex::new(Vec::new()));
        // The IP nodes name the tunnel features' nodes; sinks stand in for those.
        let mut sinks: Vec<&'static str> = Vec::new();
        let (graph, out4, out6, in4) = loop {
            let mut g = GraphBuilder::new();
            ip::nodes::register(&mut g);
            spd::nodes::register(&mut g);
            g.add(StandInEncrypt { name: "esp4-encrypt", seen: Arc::clone(&seen4) });
            g.add(StandInEncrypt { name: "esp6-encrypt", seen: Arc::clone(&seen6) });
            for &name in &sinks {
                g.add(StandInEncrypt { name, seen: Arc::new(Mutex::new(Vec::new())) });
            }
            let out4 = g.add_input("test-out4", "ipsec4-output");
            let out6 = g.add_input("test-out6", "ipsec6-output");
            let in4 = g.add_input("test-in4", "ipsec4-input");
            match g.build() {
                Ok(graph) => break (graph, out4, out6, in4),
                Err(engine::GraphError::UnknownNext { to, .. }) if !to.starts_with("ipsec") => sinks.push(Box::leak(to.into_boxed_str())),
                Err(e) => panic!("{e}"),
            }
        };
        Rig { graph, pool: Pool::new(8192, 4), cx, router, spd, seen4, seen6, out4, out6, in4 }
    }

    fn policy(&mut self, dir: Direction, prio: u32, action: ActionKind, sa: Option<u32>, remote: &str, ports: &str) -> u32 {
        let spec = PolicySpec {
            spd: 1,
            direction: dir,
            priority: prio,
            action,
            sa,
            local: "any".into(),
            remote: remote.into(),
            protocol: if ports == "any" { "any".into() } else { "udp".into() },
            local_ports: "any".into(),
            remote_ports: ports.into(),
        };
        self.spd.add_policy(&spec).unwrap().0
    }

    fn publish(&mut self) {
        self.spd.publish();
        engine::worker::Context::refresh(&mut self.cx);
    }

    /// Send one vector of UDP packets `(source host, source port, destination, dst port)`
    /// into `input`.
    fn send(&mut self, input: NodeId, pkts: &[(u8, u16, IpAddr, u16)]) {
        for vector in pkts.chunks(engine::VECTOR_SIZE) {
            let mut bufs: Vec<BufIdx> = Vec::new();
            for &(host, sport, dst, dport) in vector {
                let b = self.pool.alloc(128).unwrap();
                let buf = self.pool.get_mut(b);
                buf.write(&udp_packet(host, sport, dst, dport)).unwrap();
                buf.meta.rx_if = IN_IF;
                buf.meta.adj = self.router.lookup(dst);
                bufs.push(b);
            }
            self.graph.inject(input, &mut self.pool, &bufs, 0);
            self.graph.run(&mut self.cx, &mut self.pool);
        }
    }

    fn packets(&self, node: &str) -> u64 {
        self.graph.node_snapshots().iter().find(|s| s.name == node).map_or(0, |s| s.runtime.packets)
    }

    fn counter(&self, node: &str, name: &str) -> u64 {
        self.graph.counter_snapshots().iter().find(|c| c.node == node && c.counter == name).map_or(0, |c| c.count)
    }

    fn reset(&mut self) {
        self.graph.clear_runtime();
        self.graph.clear_counters();
        self.seen4.lock().unwrap().clear();
        self.seen6.lock().unwrap().clear();
    }
}

fn udp_packet(host: u8, sport: u16, dst: IpAddr, dport: u16) -> Vec<u8> {
    match dst {
        IpAddr::V4(d) => {
            let mut p = vec![0u8; 28];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&28u16.to_be_bytes());
            p[8] = 64;
            p[9] = 17;
            p[12..16].copy_from_slice(&[198, 18, 0, host]);
            p[16..20].copy_from_slice(&d.octets());
            let sum = wire::checksum::checksum(&p[..20]);
            p[10..12].copy_from_slice(&(!sum).to_be_bytes());
            p[20..22].copy_from_slice(&sport.to_be_bytes());
            p[22..24].copy_from_slice(&dport.to_be_bytes());
            p[24..26].copy_from_slice(&8u16.to_be_bytes());
            p
        }
        IpAddr::V6(d) => {
            let mut p = vec![0u8; 48];
            p[0] = 0x60;
            p[4..6].copy_from_slice(&8u16.to_be_bytes());
            p[6] = 17;
            p[7] = 64;
            let mut s = "2001:db8::".parse::<std::net::Ipv6Addr>().unwrap().octets();
            s[15] = host;
            p[8..24].copy_from_slice(&s);
            p[24..40].copy_from_slice(&d.octets());
            p[40..42].copy_from_slice(&sport.to_be_bytes());
            p[42..44].copy_from_slice(&dport.to_be_bytes());
            p[44..46].copy_from_slice(&8u16.to_be_bytes());
            p
        }
    }
}

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn outbound_protect_bypass_discard_and_no_policy() {
    for cache in [Some(1 << 10), None] {
        let mut r = Rig::new(cache);
        r.policy(Direction::Outbound, 100, ActionKind::Protect, Some(7), "198.19.0.0/24", "4000-4999");
        r.policy(Direction::Outbound, 90, ActionKind::Discard, None, "198.19.0.0/24", "any");
        r.policy(Direction::Outbound, 10, ActionKind::Bypass, None, "198.19.1.0-198.19.1.127", "any");
        r.policy(Direction::Outbound, 100, ActionKind::Protect, Some(8), "2001:db8:2::/64", "any");
        r.spd.bind(OUT_IF, 1).unwrap();
        r.publish();
        // Twice: the second round comes from the flow cache where there is one.
        for round in 0..2 {
            r.reset();
            r.send(
                r.out4,
                &[
                    (1, 1, v4("198.19.0.5"), 4500),   // protect, SA 7
                    (2, 2, v4("198.19.0.5"), 5000),   // discard (ports outside the protect range)
                    (3, 3, v4("198.19.1.9"), 53),     // bypass
                    (4, 4, v4("198.19.1.200"), 53),   // no policy
                    (5, 5, v4("198.19.0.255"), 4999), // protect, SA 7
                ],
            );
            r.send(r.out6, &[(6, 6, v4("2001:db8:2::9"), 1), (7, 7, v4("2001:db8:2:1::9"), 1)]);
            assert_eq!(*r.seen4.lock().unwrap(), vec![(7, 1 | 1 << 16), (7, 5 | 5 << 16)], "round {round}");
            assert_eq!(*r.seen6.lock().unwrap(), vec![(8, 6 | 6 << 16)]);
            assert_eq!(r.packets("ip4-rewrite"), 1);
            assert_eq!(r.counter("ipsec4-output", "policy-discard"), 1);
            assert_eq!(r.counter("ipsec4-output", "no-policy"), 1);
            assert_eq!(r.counter("ipsec6-output", "no-policy"), 1);
            assert_eq!(r.packets("ip6-rewrite"), 0);
        }
        match &r.cx.spd.flows4 {
            Some(c) => assert_eq!((c.stats.hits, c.stats.misses), (5, 5)),
            None => assert!(cache.is_none()),
        }
    }
}

#[test]
fn an_interface_without_an_spd_bypasses() {
    let mut r = Rig::new(Some(64));
    r.policy(Direction::Outbound, 1, ActionKind::Discard, None, "any", "any");
    r.publish();
    r.send(r.out4, &[(1, 1, v4("198.19.0.5"), 1)]);
    assert_eq!(r.packets("ip4-rewrite"), 1);
    r.spd.bind(OUT_IF, 1).unwrap();
    r.publish();
    r.send(r.out4, &[(1, 1, v4("198.19.0.5"), 1)]);
    assert_eq!(r.counter("ipsec4-output", "policy-discard"), 1);
}

#[test]
fn truncated_packets_are_dropped_by_name() {
    let mut r = Rig::new(Some(64));
    r.policy(Direction::Outbound, 1, ActionKind::Bypass, None, "any", "any");
    r.spd.bind(OUT_IF, 1).unwrap();
    r.publish();
    let b = r.pool.alloc(64).unwrap();
    let mut p = udp_packet(1, 1, v4("198.19.0.5"), 2);
    p.truncate(22);
    r.pool.get_mut(b).write(&p).unwrap();
    r.pool.get_mut(b).meta.adj = r.router.lookup(v4("198.19.0.5"));
    r.graph.inject(r.out4, &mut r.pool, &[b], 0);
    r.graph.run(&mut r.cx, &mut r.pool);
    assert_eq!(r.counter("ipsec4-output", "truncated"), 1);
}

#[test]
fn inbound_plain_packets_of_protected_flows_are_dropped() {
    let mut r = Rig::new(Some(256));
    // Inbound: local is the destination, remote the source (198.18.0.x).
    r.policy(Direction::Inbound, 100, ActionKind::Protect, Some(3), "198.18.0.0-198.18.0.9", "any");
    r.policy(Direction::Inbound, 50, ActionKind::Bypass, None, "198.18.0.0/24", "any");
    r.policy(Direction::Inbound, 60, ActionKind::Discard, None, "198.18.0.200/32", "any");
    r.spd.bind(IN_IF, 1).unwrap();
    r.publish();
    r.send(r.in4, &[(5, 1, v4("198.19.0.5"), 80), (20, 1, v4("198.19.0.5"), 80), (200, 1, v4("198.19.0.5"), 80)]);
    assert_eq!(r.counter("ipsec4-input", "plain-on-protected-flow"), 1);
    assert_eq!(r.counter("ipsec4-input", "policy-discard"), 1);
    assert_eq!(r.packets("ip4-lookup"), 1);
    // ESP in UDP from a protected peer goes on to the lookup (and the decrypt node).
    r.reset();
    r.send(r.in4, &[(5, 4500, v4("198.19.0.5"), 4500)]);
    assert_eq!(r.packets("ip4-lookup"), 1);
    // After decryption the inner packet must match its SA's policy.
    let key = spd::FlowKey { local: 0xc613_0005u32, remote: 0xc612_0005, proto: 17, local_port: 80, remote_port: 1 };
    assert!(r.cx.spd.check_inbound(spd::SpdId(1), spd::SaId(3), &key));
    assert!(!r.cx.spd.check_inbound(spd::SpdId(1), spd::SaId(4), &key));
    assert!(!r.cx.spd.check_inbound(spd::SpdId(1), spd::SaId(3), &spd::FlowKey { remote: 0xc612_0014, ..key }));
}

/// Many cached flows, a policy change, the next vector: the flows the new policy covers
/// follow it, every other flow keeps its decision, and nothing is lost.
#[test]
fn a_policy_change_reaches_cached_flows_from_the_next_vector() {
    let mut r = Rig::new(Some(1 << 16));
    r.policy(Direction::Outbound, 10, ActionKind::Protect, Some(1), "198.19.0.0/16", "any");
    r.spd.bind(OUT_IF, 1).unwrap();
    r.publish();
    let flows: Vec<(u8, u16, IpAddr, u16)> =
        (0..20_000u32).map(|i| ((i % 200) as u8 + 1, (i / 200) as u16 + 1, v4("198.19.0.5"), 4000 + (i % 7) as u16)).collect();
    r.send(r.out4, &flows);
    assert_eq!(r.seen4.lock().unwrap().len(), flows.len());
    for step in 0..3u32 {
        // Flows to port 4003 move to SA 100 + step; the policy of the step before goes.
        let id = r.policy(Direction::Outbound, 20, ActionKind::Protect, Some(100 + step), "198.19.0.5/32", "4003");
        r.publish();
        r.reset();
        r.send(r.out4, &flows);
        let seen = r.seen4.lock().unwrap().clone();
        assert_eq!(seen.len(), flows.len(), "step {step}: every flow still protected");
        for ((sa, _), f) in seen.iter().zip(&flows) {
            let want = if f.3 == 4003 { 100 + step } else { 1 };
            assert_eq!(*sa, want, "step {step} flow {f:?}");
        }
        r.spd.del_policy(id).unwrap();
        r.publish();
    }
    let c = r.cx.spd.flows4.as_ref().unwrap().stats;
    assert!(c.stale > 0 && c.hits == 0, "every publication made every flow stale: {c:?}");
    // Without a change the same flows come from the cache.
    r.send(r.out4, &flows);
    r.send(r.out4, &flows);
    let d = r.cx.spd.flows4.as_ref().unwrap().stats;
    assert!(d.hits >= flows.len() as u64 - d.overwrites, "{d:?}");
}
