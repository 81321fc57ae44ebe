//! The SPD nodes in a graph with the IP nodes: where each packet goes (by the packets
//! each next node received and the SA ids a stand-in `esp4-encrypt` saw), which counter
//! counts each drop, and that a policy change reaches every cached flow from the next
//! vector while flows it does not touch keep their decision and lose nothing.
//!
//! `esp4-encrypt` / `esp6-encrypt` here are test stand-ins recording `meta.param`; the
//! real nodes come with the ESP crate.

use crate::common;

use common::*;
use spd::policy::{ActionKind, Direction, PolicySpec};
use std::net::IpAddr;

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
        engine::worker::Context::refresh(&mut r.cx);
        let (size, g4, g6) = r.cx.spd.gauges().read();
        match &r.cx.spd.flows4 {
            Some(c) => {
                assert_eq!((c.stats.hits, c.stats.misses), (5, 5));
                assert_eq!((size, g4, g6.hits, g6.misses), (1 << 10, c.stats, 2, 2));
            }
            None => assert!(cache.is_none() && size == 0),
        }
    }
}

/// A whole vector whose decision changes every few flows, each flow's two packets in a
/// row: `ipsec4-output` compares a slot some packets after it started loading it, so
/// every packet must still get its own decision, in order, the last packets of the
/// vector too, and a flow's second packet must find the entry its first one just wrote.
#[test]
fn a_full_vector_gets_each_packets_own_decision_in_order() {
    let mut r = Rig::new(Some(1 << 12));
    r.policy(Direction::Outbound, 100, ActionKind::Protect, Some(7), "198.19.0.0/24", "4088-4127");
    r.policy(Direction::Outbound, 100, ActionKind::Protect, Some(8), "198.19.0.0/24", "4048-4087");
    r.policy(Direction::Outbound, 90, ActionKind::Discard, None, "198.19.0.0/24", "4028-4047");
    r.policy(Direction::Outbound, 80, ActionKind::Bypass, None, "198.19.0.0/24", "any");
    r.spd.bind(OUT_IF, 1).unwrap();
    r.publish();
    // Packet k is flow k / 2: source port 1000 + flow, destination port 4000 + flow; the
    // vector's last packets are protected (not what a decision left unwritten reads).
    let pkts: Vec<_> = (0..engine::VECTOR_SIZE as u16).map(|k| (1, 1000 + k / 2, v4("198.19.0.5"), 4000 + k / 2)).collect();
    let protected: Vec<(u32, u32)> = (0..engine::VECTOR_SIZE as u32)
        .map(|k| k / 2)
        .filter(|&f| f >= 48)
        .map(|f| (if f >= 88 { 7 } else { 8 }, (1000 + f) | 1 << 16))
        .collect();
    // The third round traced: its decisions wait for `process`, where the first two's
    // went on from the pipeline (`run_vector`).
    for round in 0..3 {
        r.reset();
        if round == 2 {
            r.graph.trace_add("test-out4", 1).unwrap();
        }
        r.send(r.out4, &pkts);
        assert_eq!(*r.seen4.lock().unwrap(), protected, "round {round}");
        assert_eq!(r.counter("ipsec4-output", "policy-discard"), 40, "round {round}");
        assert_eq!(r.packets("ip4-rewrite"), 56, "round {round}");
    }
    assert_eq!(r.graph.trace_records().iter().filter(|t| t.node == "ipsec4-output").count(), 1);
    let c = r.cx.spd.flows4.as_ref().unwrap();
    // First vector: each flow misses once and hits once; then all hits.
    assert_eq!((c.stats.misses, c.stats.hits), (128, 128 + 2 * 256));
}

/// Packets decided as their headers are read (no SPD on their route, too short to
/// read) among packets the flow cache decides, in one vector: the pipeline hands each
/// on in its turn with its own decision (every fifth bypassed, every fifth dropped as
/// truncated, the rest protected with their own flow's SA).
#[test]
fn packets_decided_early_among_looked_up_ones_get_their_own_decisions() {
    let mut r = Rig::new(Some(1 << 12));
    r.policy(Direction::Outbound, 100, ActionKind::Protect, Some(7), "198.19.0.0/24", "any");
    r.spd.bind(OUT_IF, 1).unwrap();
    r.publish();
    let mut pkts = Vec::new();
    let mut adjs = Vec::new();
    let mut protected = Vec::new();
    let unbound = r.router.lookup(v4("198.18.0.9"));
    let bound = r.router.lookup(v4("198.19.0.5"));
    for k in 0..engine::VECTOR_SIZE as u16 {
        let mut p = common::udp_packet(1, 1000 + k, v4("198.19.0.5"), 4000);
        match k % 5 {
            // Bypassed for want of an SPD (the route's interface has none).
            1 => adjs.push(unbound),
            // Too short for its ports.
            3 => {
                p.truncate(22);
                adjs.push(bound)
            }
            _ => {
                adjs.push(bound);
                protected.push((7, (1000 + k as u32) | 1 << 16));
            }
        }
        pkts.push(p);
    }
    for round in 0..2 {
        r.reset();
        r.send_with_adjacencies(r.out4, &pkts, &adjs);
        assert_eq!(*r.seen4.lock().unwrap(), protected, "round {round}");
        assert_eq!(r.packets("ip4-rewrite"), 51, "round {round}");
        assert_eq!(r.counter("ipsec4-output", "truncated"), 51, "round {round}");
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
    // ESP in UDP from a protected peer to the gateway goes on to the lookup (and the
    // decrypt node).
    r.reset();
    r.send(r.in4, &[(5, 4500, v4("198.18.0.1"), 4500)]);
    assert_eq!((r.packets("ipsec4-input"), r.packets("ip4-local")), (1, 1));
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
    // Each send followed a publication, so every hit was a revalidation; only flows to
    // port 4003 (the changed policies' port) can have gone stale, and the others kept
    // their decisions (short of the ones other flows overwrote).
    let c = r.cx.spd.flows4.as_ref().unwrap().stats;
    let moved = flows.iter().filter(|f| f.3 == 4003).count() as u64;
    let kept = flows.len() as u64 - moved;
    assert_eq!(c.hits, c.revalidated, "{c:?}");
    assert!(c.stale > 0 && c.stale <= 3 * moved, "only the changed port's flows went stale: {c:?}");
    // Every lookup of the three sends after the first was a revalidation, a stale miss
    // or a miss on a slot another flow took: the other flows lost only the last kind.
    let evicted = c.misses - c.stale - flows.len() as u64;
    assert!(c.revalidated >= 3 * kept - evicted, "the other flows kept their decisions: {c:?}");
    // Without a change the same flows come from the cache.
    r.send(r.out4, &flows);
    r.send(r.out4, &flows);
    let d = r.cx.spd.flows4.as_ref().unwrap().stats;
    assert!(d.hits >= flows.len() as u64 - d.overwrites, "{d:?}");
}

/// Packets arriving on an interface with an SPD go from `ip4-input` / `ip6-input` to the
/// inbound SPD; unbound, straight to the lookup (the node is not visited).
#[test]
fn ip_input_hands_arrivals_on_a_bound_interface_to_the_inbound_spd() {
    let mut r = Rig::new(Some(256));
    r.policy(Direction::Inbound, 10, ActionKind::Bypass, None, "198.18.0.0/24", "any");
    r.policy(Direction::Inbound, 20, ActionKind::Discard, None, "198.18.0.5/32", "any");
    r.policy(Direction::Inbound, 10, ActionKind::Bypass, None, "2001:db8::/64", "any");
    r.publish();
    let v4_pkts = [(1, 1, v4("198.19.0.5"), 80), (5, 1, v4("198.19.0.5"), 80)];
    r.send(r.ip4, &v4_pkts);
    assert_eq!((r.packets("ipsec4-input"), r.packets("ip4-lookup")), (0, 2), "no SPD bound yet");
    r.spd.bind(IN_IF, 1).unwrap();
    r.publish();
    for round in 0..2 {
        r.reset();
        r.send(r.ip4, &v4_pkts);
        r.send(r.ip6, &[(1, 1, v4("2001:db8:2::9"), 80)]);
        assert_eq!(r.packets("ipsec4-input"), 2, "round {round}");
        assert_eq!(r.counter("ipsec4-input", "policy-discard"), 1);
        assert_eq!(r.packets("ip4-lookup"), 1);
        assert_eq!((r.packets("ipsec6-input"), r.packets("ip6-lookup")), (1, 1));
    }
    let c = r.cx.spd.flows4.as_ref().unwrap().stats;
    assert_eq!((c.hits, c.misses), (2, 2), "the second round from the flow cache");
    // Unbound again: not visited, nothing dropped.
    r.spd.unbind(IN_IF).unwrap();
    r.publish();
    r.reset();
    r.send(r.ip4, &v4_pkts);
    assert_eq!((r.packets("ipsec4-input"), r.packets("ip4-lookup")), (0, 2));
}

/// An ICMPv6 packet from `2001:db8::5` to the gateway's `2001:db8:1::1`.
fn icmp6(ty: u8, hop_limit: u8) -> Vec<u8> {
    let mut p = vec![0u8; 40 + 24];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&24u16.to_be_bytes());
    p[6] = 58;
    p[7] = hop_limit;
    p[8..24].copy_from_slice(&"2001:db8::5".parse::<std::net::Ipv6Addr>().unwrap().octets());
    p[24..40].copy_from_slice(&"2001:db8:1::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    p[40] = ty;
    p
}

#[test]
fn neighbour_discovery_passes_the_inbound_spd_and_other_icmp6_does_not() {
    let mut r = Rig::new(Some(256));
    r.policy(Direction::Inbound, 10, ActionKind::Bypass, None, "2001:db8:5::/64", "any");
    r.spd.bind(IN_IF, 1).unwrap();
    r.publish();
    // A neighbour solicitation and advertisement, an echo request, an NS with a hop
    // limit a router forwarded (not link-local traffic, so held to the policies).
    r.send_bytes(r.ip6, &[icmp6(135, 255), icmp6(136, 255), icmp6(128, 64), icmp6(135, 64)], 0);
    assert_eq!(r.packets("ipsec6-input"), 4);
    assert_eq!(r.counter("ipsec6-input", "no-policy"), 2);
    assert_eq!(r.packets("ip6-lookup"), 2);
}

/// What `esp4-decrypt` opened (SA index in `meta.param`) must be what the inbound policy
/// sends through that SA: another SA's flow, a BYPASS flow or a flow of no policy is a
/// mismatch, whether decided by the classifier or taken from the flow cache.
#[test]
fn decrypted_packets_must_match_the_policy_of_their_sa() {
    for cache in [Some(1 << 10), None] {
        let mut r = Rig::new(cache);
        r.policy(Direction::Inbound, 100, ActionKind::Protect, Some(3), "198.18.0.0-198.18.0.9", "any");
        r.policy(Direction::Inbound, 100, ActionKind::Protect, Some(4), "198.18.0.10-198.18.0.19", "any");
        r.policy(Direction::Inbound, 50, ActionKind::Bypass, None, "198.18.0.0/24", "any");
        r.policy(Direction::Inbound, 100, ActionKind::Protect, Some(3), "2001:db8::/120", "any");
        r.spd.bind(IN_IF, 1).unwrap();
        r.publish();
        let pkts: Vec<Vec<u8>> = [5u8, 15, 30, 9].iter().map(|&h| udp_packet(h, 1, v4("198.19.0.5"), 80)).collect();
        for round in 0..2 {
            r.reset();
            r.send_bytes(r.dec4, &pkts, 3);
            assert_eq!(r.packets("ip4-lookup"), 2, "cache {cache:?} round {round}: hosts 5 and 9 came through SA 3");
            assert_eq!(r.counter("ipsec4-decrypted", "policy-mismatch"), 2);
            r.send_bytes(r.dec4, &pkts[1..2], 4);
            assert_eq!(r.packets("ip4-lookup"), 3, "host 15 through its own SA 4");
            r.send_bytes(r.dec6, &[udp_packet(7, 1, v4("2001:db8:2::9"), 80)], 3);
            r.send_bytes(r.dec6, &[udp_packet(7, 1, v4("2001:db8:2::9"), 80)], 4);
            assert_eq!(r.packets("ip6-lookup"), 1);
            assert_eq!(r.counter("ipsec6-decrypted", "policy-mismatch"), 1);
        }
        if let Some(c) = &r.cx.spd.flows4 {
            // Host 15 is one flow whichever SA it came through: the SA is compared with
            // the cached decision, not part of the key.
            assert_eq!((c.stats.hits, c.stats.misses), (6, 4));
        }
        // A truncated inner packet is dropped by name.
        r.reset();
        r.send_bytes(r.dec4, &[pkts[0][..22].to_vec()], 3);
        assert_eq!(r.counter("ipsec4-decrypted", "truncated"), 1);
        // Unbound since the decrypt node looked: nothing to hold the packet to.
        r.spd.unbind(IN_IF).unwrap();
        r.publish();
        r.reset();
        r.send_bytes(r.dec4, &pkts, 3);
        assert_eq!(r.packets("ip4-lookup"), 4);
    }
}

/// Only ESP for the gateway's own SAs skips the inbound policies: raw ESP and UDP to
/// port 4500 (or to a port an inbound SA takes ESP in UDP on) addressed to one of our
/// addresses. The same packets addressed to a host behind the gateway are plain traffic
/// to the SPD: of a PROTECT flow they are dropped (they were forwarded in the clear),
/// and a BYPASS policy for protocol esp lets transit ESP through.
#[test]
fn only_esp_addressed_to_the_gateway_skips_the_inbound_policies() {
    let mut r = Rig::new(Some(256));
    r.policy(Direction::Inbound, 100, ActionKind::Protect, Some(3), "198.18.0.0-198.18.0.9", "any");
    r.spd.bind(IN_IF, 1).unwrap();
    r.publish();
    let esp = |host: u8, dst: &str| {
        let mut p = udp_packet(host, 0x1234, v4(dst), 0x5678);
        p[9] = 50;
        p
    };
    let to_us = [udp_packet(5, 4500, v4("198.18.0.1"), 4500), esp(5, "198.18.0.1"), esp(5, "198.18.1.1")];
    let transit = [udp_packet(5, 4500, v4("198.19.0.5"), 4500), esp(5, "198.19.0.5"), udp_packet(6, 1, v4("198.19.0.5"), 4500)];
    r.send_bytes(r.in4, &to_us, 0);
    assert_eq!(r.packets("ip4-local"), 3, "ESP and ESP in UDP to our addresses pass");
    r.reset();
    r.send_bytes(r.in4, &transit, 0);
    assert_eq!(r.counter("ipsec4-input", "plain-on-protected-flow"), 3, "transit ESP is a plain packet of its flow");
    assert_eq!(r.packets("ip4-lookup"), 0);
    // Transit ESP by a BYPASS policy for it.
    let bypass = PolicySpec {
        spd: 1,
        direction: Direction::Inbound,
        priority: 200,
        action: ActionKind::Bypass,
        sa: None,
        local: "any".into(),
        remote: "any".into(),
        protocol: "esp".into(),
        local_ports: "any".into(),
        remote_ports: "any".into(),
    };
    r.spd.add_policy(&bypass).unwrap();
    r.publish();
    r.reset();
    r.send_bytes(r.in4, &transit, 0);
    assert_eq!(r.packets("ip4-lookup"), 1, "the transit ESP");
    assert_eq!(r.counter("ipsec4-input", "plain-on-protected-flow"), 2);
}
