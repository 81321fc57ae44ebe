//! The test rig of the SPD nodes, shared by the graph tests and the node benchmark: a
//! graph with the IP nodes, the SPD nodes and stand-ins for `esp4-encrypt` /
//! `esp6-encrypt` (and the tunnel nodes the IP nodes name), which record the SA id
//! in `meta.param` and drop. Test and bench code only: the product never has them.
#![allow(dead_code)]

use arc_swap::ArcSwap;
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Graph, GraphBuilder, IfIndex, Node, NodeId, Pool, Verdict};
use ip::state::{InterfaceSpec, RouteTarget, RouterState};
use ip::{HasIp, IfAddr, IpContext, Prefix};
use spd::policy::{ActionKind, Direction, PolicySpec};
use spd::{HasSpd, SpdContext, SpdState};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use wire::EthernetAddress;

pub struct Cx {
    pub ip: IpContext,
    pub spd: SpdContext,
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
pub fn flow_id(b: &[u8]) -> u32 {
    if b[0] >> 4 == 4 {
        u16::from_be_bytes([b[20], b[21]]) as u32 | (b[15] as u32) << 16
    } else {
        u16::from_be_bytes([b[40], b[41]]) as u32 | (b[23] as u32) << 16
    }
}

pub const OUT_IF: IfIndex = IfIndex(1);
pub const IN_IF: IfIndex = IfIndex(0);

pub struct Rig {
    pub graph: Graph<Cx>,
    pub pool: Pool,
    pub cx: Cx,
    pub router: RouterState,
    pub spd: SpdState,
    pub seen4: Arc<Mutex<Vec<(u32, u32)>>>,
    pub seen6: Arc<Mutex<Vec<(u32, u32)>>>,
    pub out4: NodeId,
    pub out6: NodeId,
    pub in4: NodeId,
    /// `ip4-input` / `ip6-input`, ahead of the inbound SPD.
    pub ip4: NodeId,
    pub ip6: NodeId,
    /// `ipsec4-decrypted` / `ipsec6-decrypted`, as the decrypt nodes send to them.
    pub dec4: NodeId,
    pub dec6: NodeId,
    ip_tables: Arc<ArcSwap<ip::Tables>>,
}

fn mac(n: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, n])
}

impl Rig {
    pub fn new(flow_cache: Option<usize>) -> Rig {
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
        let cx = Cx {
            // No packets held for unresolved next hops: the tests hand packets adjacencies
            // of their choosing, which a held packet's fresh lookup would not keep.
            ip: IpContext::new(Arc::clone(&ip_tables), None, ip::Limits { neighbour_hold: 0, ..Default::default() }),
            spd: SpdContext::new(spd.shared(), flow_cache).unwrap(),
        };
        let seen4 = Arc::new(Mutex::new(Vec::new()));
        let seen6 = Arc::new(Mutex::new(Vec::new()));
        // The IP nodes name the tunnel features' nodes; sinks stand in for those.
        let mut sinks: Vec<&'static str> = Vec::new();
        let (graph, [out4, out6, in4, ip4, ip6, dec4, dec6]) = loop {
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
            let ip4 = g.add_input("test-ip4", "ip4-input");
            let ip6 = g.add_input("test-ip6", "ip6-input");
            let dec4 = g.add_input("test-dec4", "ipsec4-decrypted");
            let dec6 = g.add_input("test-dec6", "ipsec6-decrypted");
            match g.build() {
                Ok(graph) => break (graph, [out4, out6, in4, ip4, ip6, dec4, dec6]),
                Err(engine::GraphError::UnknownNext { to, .. }) if !to.starts_with("ipsec") => sinks.push(Box::leak(to.into_boxed_str())),
                Err(e) => panic!("{e}"),
            }
        };
        Rig { graph, pool: Pool::new(8192, 4), cx, router, spd, seen4, seen6, out4, out6, in4, ip4, ip6, dec4, dec6, ip_tables }
    }

    pub fn policy(&mut self, dir: Direction, prio: u32, action: ActionKind, sa: Option<u32>, remote: &str, ports: &str) -> u32 {
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

    /// Publish the SPD tables, and the IP tables with the bound interfaces' bits (as
    /// the control plane does on a binding change).
    pub fn publish(&mut self) {
        self.spd.publish();
        let links = self.spd.bindings().fold(0u64, |m, (i, _)| m | 1 << i.0);
        self.router.set_spd_links(links);
        self.ip_tables.store(Arc::new(self.router.build()));
        engine::worker::Context::refresh(&mut self.cx);
    }

    /// Send one vector of UDP packets `(source host, source port, destination, dst port)`
    /// into `input`.
    pub fn send(&mut self, input: NodeId, pkts: &[(u8, u16, IpAddr, u16)]) {
        let pkts: Vec<Vec<u8>> = pkts.iter().map(|&(host, sport, dst, dport)| udp_packet(host, sport, dst, dport)).collect();
        self.send_bytes(input, &pkts, 0);
    }

    /// Send packets as they are, with `meta.param` = `param` (the SA index a decrypt
    /// node hands on).
    pub fn send_bytes(&mut self, input: NodeId, pkts: &[Vec<u8>], param: u32) {
        let adjs: Vec<u32> = pkts
            .iter()
            .map(|p| {
                self.router.lookup(if p[0] >> 4 == 4 {
                    IpAddr::from(<[u8; 4]>::try_from(&p[16..20]).unwrap())
                } else {
                    IpAddr::from(<[u8; 16]>::try_from(&p[24..40]).unwrap())
                })
            })
            .collect();
        self.send_packets(input, pkts, &adjs, param);
    }

    /// Send packets as they are, each with its adjacency (`meta.adj`) given, not looked up.
    pub fn send_with_adjacencies(&mut self, input: NodeId, pkts: &[Vec<u8>], adjs: &[u32]) {
        self.send_packets(input, pkts, adjs, 0);
    }

    fn send_packets(&mut self, input: NodeId, pkts: &[Vec<u8>], adjs: &[u32], param: u32) {
        for (vector, adjs) in pkts.chunks(engine::VECTOR_SIZE).zip(adjs.chunks(engine::VECTOR_SIZE)) {
            let mut bufs: Vec<BufIdx> = Vec::new();
            for (p, &adj) in vector.iter().zip(adjs) {
                let b = self.pool.alloc(128).unwrap();
                let buf = self.pool.get_mut(b);
                buf.write(p).unwrap();
                buf.meta.rx_if = IN_IF;
                buf.meta.param = param;
                buf.meta.adj = adj;
                bufs.push(b);
            }
            self.graph.inject(input, &mut self.pool, &bufs, 0);
            self.graph.run(&mut self.cx, &mut self.pool);
        }
    }

    pub fn packets(&self, node: &str) -> u64 {
        self.graph.node_snapshots().iter().find(|s| s.name == node).map_or(0, |s| s.runtime.packets)
    }

    pub fn counter(&self, node: &str, name: &str) -> u64 {
        self.graph.counter_snapshots().iter().find(|c| c.node == node && c.counter == name).map_or(0, |c| c.count)
    }

    pub fn reset(&mut self) {
        self.graph.clear_runtime();
        self.graph.clear_counters();
        self.seen4.lock().unwrap().clear();
        self.seen6.lock().unwrap().clear();
    }
}

pub fn udp_packet(host: u8, sport: u16, dst: IpAddr, dport: u16) -> Vec<u8> {
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
            p[10..12].copy_from_slice(&sum.to_be_bytes());
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
