use super::*;
use crate::family::V4;
use crate::service::{Affinity, BackendSpec, Conditions, Protocol, ServiceSpec, ServiceType, TrafficPolicy};
use crate::state::LbState;
use crate::tables::LbTables;
use std::sync::Arc;
use wire::sctp::ChunkSet as C;

const VIP: [u8; 4] = [198, 18, 128, 10];
const NODE: [u8; 4] = [198, 18, 0, 2];
const BACKENDS: [&str; 3] = ["198.19.1.10", "198.19.2.10", "198.19.3.10"];

fn spec(proto: Protocol, policy: TrafficPolicy, affinity: Affinity) -> ServiceSpec {
    ServiceSpec {
        name: "default/web".into(),
        kind: ServiceType::ClusterIp,
        vip: "198.18.128.10".parse().unwrap(),
        port: 80,
        protocol: proto,
        backends: BACKENDS.iter().map(|a| BackendSpec::new(a.parse().unwrap(), 8080)).collect(),
        traffic_policy: policy,
        affinity,
        table_size: 0,
        forwarding: crate::service::Forwarding::Nat,
        gue_port: 0,
        source_ranges: Vec::new(),
    }
}

fn state(s: ServiceSpec) -> LbState {
    let mut st = LbState::new();
    st.set_snat(Some("198.18.0.2".parse().unwrap())).unwrap();
    st.add_service(s).unwrap();
    st
}

fn client(i: u16) -> FlowKey<[u8; 4]> {
    FlowKey { src: [198, 18, 1 + (i >> 8) as u8, i as u8], dst: VIP, sport: 10_000 + i, dport: 80, proto: 6 }
}

struct Run {
    t: Arc<LbTables>,
    lb: Balancer<V4>,
}

impl Run {
    fn new(st: &LbState) -> Self {
        Run { t: st.tables(), lb: Balancer::new(Limits { sessions: 4096, affinity: 1024 }, Timeouts::default()) }
    }
    fn fwd(&mut self, k: &FlowKey<[u8; 4]>, flags: u8, now: u64) -> Result<(Rewrite<[u8; 4]>, Outcome), LbDrop> {
        let svc = Arc::clone(self.t.v4.lookup(&k.dst, k.dport, k.proto, false).unwrap());
        self.lb.forward(&self.t.v4, &svc, k, flags, now)
    }
    fn backend_of(&mut self, k: &FlowKey<[u8; 4]>, flags: u8, now: u64) -> [u8; 4] {
        self.fwd(k, flags, now).unwrap().0.dst
    }
}

fn ip(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

#[test]
fn a_connection_is_translated_both_ways() {
    let st = state(spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let k = client(1);
    let (there, o) = r.fwd(&k, TCP_SYN, 0).unwrap();
    assert_eq!(o, Outcome::New);
    assert!(BACKENDS.iter().any(|b| ip(b) == there.dst));
    assert_eq!((there.src, there.sport, there.dport), (k.src, k.sport, 8080), "Local keeps the client's address");
    // The backend's answer comes back as the service's.
    let reply = FlowKey { src: there.dst, dst: k.src, sport: 8080, dport: k.sport, proto: 6 };
    let back = r.lb.reverse(&reply, TCP_SYN | TCP_ACK, 1).unwrap();
    assert_eq!(back, Rewrite { src: VIP, sport: 80, dst: k.src, dport: k.sport });
    // Anything else is not ours.
    assert!(r.lb.reverse(&FlowKey { sport: 8081, ..reply }, TCP_ACK, 1).is_none());
    assert!(r.lb.reverse(&k, TCP_ACK, 1).is_none(), "a forward entry does not translate replies");
    assert_eq!(r.fwd(&k, TCP_ACK, 2).unwrap(), (there, Outcome::Hit));
    assert_eq!(r.lb.sessions.live(2), 2);
}

#[test]
fn a_backend_balanced_to_itself_is_translated_to_the_node() {
    let st = state(spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    // Backend clients of their own service: each one Maglev sends to itself comes from
    // the node (a distinct port), its reply to the node goes back as the service's; the
    // others keep their address.
    let (mut hairpins, mut kept) = (0, 0);
    for i in 0..60u16 {
        let src = ip(BACKENDS[i as usize % 3]);
        let k = FlowKey { src, sport: 20_000 + i, ..client(0) };
        let (there, _) = r.fwd(&k, TCP_SYN, 0).unwrap();
        if there.dst != src {
            assert_eq!((there.src, there.sport), (src, k.sport), "Local keeps another client's address");
            kept += 1;
            continue;
        }
        hairpins += 1;
        assert_eq!(there.src, NODE, "a hairpin comes from the node");
        let reply = FlowKey { src, sport: 8080, dst: NODE, dport: there.sport, proto: 6 };
        assert_eq!(r.lb.reverse(&reply, TCP_SYN | TCP_ACK, 1).unwrap(), Rewrite { src: VIP, sport: 80, dst: src, dport: k.sport });
        assert_eq!(r.fwd(&k, TCP_ACK, 2).unwrap(), (there, Outcome::Hit));
    }
    assert!(hairpins >= 5 && kept >= 20, "{hairpins} hairpins, {kept} kept");
    // Without a node address to translate to, nothing can be done: the address is kept.
    let mut st = LbState::new();
    st.add_service(spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::None)).unwrap();
    let mut r = Run::new(&st);
    let src = ip(BACKENDS[0]);
    let found = (0..60u16).map(|i| FlowKey { src, sport: 30_000 + i, ..client(0) }).find_map(|k| {
        let (there, _) = r.fwd(&k, TCP_SYN, 0).unwrap();
        (there.dst == src).then_some((there, k))
    });
    let (there, k) = found.expect("some connection lands on its own backend");
    assert_eq!((there.src, there.sport), (src, k.sport));
}

#[test]
fn cluster_policy_translates_the_source_to_the_node_with_distinct_ports() {
    let st = state(spec(Protocol::Udp, TrafficPolicy::Cluster, Affinity::None));
    let mut r = Run::new(&st);
    // Clients that share a source port and land on one backend get different node ports.
    let mut seen = std::collections::HashMap::new();
    for i in 0..200u16 {
        let k = FlowKey { sport: 5353, proto: 17, ..client(i) };
        let (there, _) = r.fwd(&k, 0, 0).unwrap();
        assert_eq!(there.src, NODE);
        assert!(seen.insert((there.dst, there.sport), k).is_none(), "node port reused toward one backend");
        let reply = FlowKey { src: there.dst, sport: 8080, dst: NODE, dport: there.sport, proto: 17 };
        assert_eq!(r.lb.reverse(&reply, 0, 1).unwrap(), Rewrite { src: VIP, sport: 80, dst: k.src, dport: 5353 });
    }
    assert!(seen.keys().filter(|(_, p)| *p == 5353).count() <= 3, "the client's port first, once per backend");
}

#[test]
fn tcp_states_set_the_timeouts() {
    let st = state(spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let to = Timeouts::default();
    let k = client(7);
    let (there, _) = r.fwd(&k, TCP_SYN, 1000).unwrap();
    let reply = FlowKey { src: there.dst, dst: k.src, sport: 8080, dport: k.sport, proto: 6 };
    let state_of = |r: &Run, now| r.lb.sessions.find(&Key::new(&k), now).map(|i| (r.lb.sessions.get(i).state, r.lb.sessions.expires(i)));
    assert_eq!(state_of(&r, 1000), Some((ConnState::SynSent, 1000 + to.tcp_syn_ms)));
    // Unanswered, it goes at the SYN timeout, both entries.
    assert!(state_of(&r, 1000 + to.tcp_syn_ms).is_none());
    assert!(r.lb.reverse(&reply, TCP_ACK, 1000 + to.tcp_syn_ms).is_none());

    let (there, _) = r.fwd(&k, TCP_SYN, 100_000).unwrap();
    let reply = FlowKey { src: there.dst, dst: k.src, sport: 8080, dport: k.sport, proto: 6 };
    r.lb.reverse(&reply, TCP_SYN | TCP_ACK, 100_001).unwrap();
    assert_eq!(state_of(&r, 100_001), Some((ConnState::Established, 100_001 + to.tcp_established_ms)));
    r.fwd(&k, TCP_ACK | TCP_FIN, 200_000).unwrap();
    assert_eq!(state_of(&r, 200_000), Some((ConnState::Closing, 200_000 + to.tcp_closing_ms)));
    // Closing does not go back to established on later packets; the expiry moves on
    // once it would move by a second (not on every packet).
    r.lb.reverse(&reply, TCP_ACK, 200_001).unwrap();
    assert_eq!(state_of(&r, 200_001), Some((ConnState::Closing, 200_000 + to.tcp_closing_ms)));
    r.lb.reverse(&reply, TCP_ACK, 201_000).unwrap();
    assert_eq!(state_of(&r, 201_000), Some((ConnState::Closing, 201_000 + to.tcp_closing_ms)));
    r.lb.reverse(&reply, TCP_RST, 200_002).unwrap();
    assert_eq!(state_of(&r, 200_002), Some((ConnState::Reset, 200_002 + to.tcp_reset_ms)));
    assert!(state_of(&r, 200_002 + to.tcp_reset_ms).is_none());
    // A new SYN on a reset tuple starts a new session rather than reviving the old one.
    r.fwd(&k, TCP_SYN, 300_000).unwrap();
    r.fwd(&k, TCP_RST, 300_001).unwrap();
    assert_eq!(r.fwd(&k, TCP_SYN, 300_002).unwrap().1, Outcome::New);
    assert_eq!(state_of(&r, 300_002).unwrap().0, ConnState::SynSent);
    assert_eq!(r.lb.sessions.live(300_002), 2, "the old pair is gone");
}

const SCTP: u8 = 132;

/// An SCTP association's state and expiry, by its client's key.
fn sctp_state(r: &Run, k: &FlowKey<[u8; 4]>, now: u64) -> Option<(ConnState, u64)> {
    r.lb.sessions.find(&Key::new(k), now).map(|i| (r.lb.sessions.get(i).state, r.lb.sessions.expires(i)))
}

/// An SCTP service's association through its handshake (INIT, INIT ACK, COOKIE ECHO,
/// COOKIE ACK) to established; its reply key.
fn sctp_established(r: &mut Run, k: &FlowKey<[u8; 4]>, now: u64) -> FlowKey<[u8; 4]> {
    let (there, o) = r.fwd(k, C::INIT, now).unwrap();
    assert_eq!(o, Outcome::New);
    let reply = FlowKey { src: there.dst, dst: k.src, sport: 8080, dport: k.sport, proto: SCTP };
    r.lb.reverse(&reply, C::INIT_ACK, now).unwrap();
    r.fwd(k, C::COOKIE_ECHO, now).unwrap();
    r.lb.reverse(&reply, C::COOKIE_ACK, now).unwrap();
    assert_eq!(sctp_state(r, k, now).unwrap().0, ConnState::SctpEstablished);
    reply
}

/// An SCTP association has its own states and timeouts, not TCP's: INIT (and the
/// backend's INIT ACK) cookie-wait, COOKIE ECHO cookie-echoed, the backend's COOKIE ACK
/// established (each with its timeout, on both entries); an idle established
/// association goes at `sctp_established_ms`, long before TCP's 24 h.
#[test]
fn sctp_associations_have_their_own_states_and_timeouts() {
    let st = state(spec(Protocol::Sctp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let to = Timeouts::default();
    assert_eq!((to.sctp_established_ms, to.sctp_cookie_wait_ms, to.sctp_closed_ms), (210_000, 3_000, 10_000));
    let k = FlowKey { proto: SCTP, ..client(9) };
    let (there, o) = r.fwd(&k, C::INIT, 1000).unwrap();
    assert_eq!(o, Outcome::New);
    assert_eq!(sctp_state(&r, &k, 1000), Some((ConnState::SctpCookieWait, 1000 + to.sctp_cookie_wait_ms)));
    let reply = FlowKey { src: there.dst, dst: k.src, sport: 8080, dport: k.sport, proto: SCTP };
    assert_eq!(r.lb.reverse(&reply, C::INIT_ACK, 1001), Some(Rewrite { src: VIP, sport: 80, dst: k.src, dport: k.sport }));
    assert_eq!(sctp_state(&r, &k, 1001).unwrap().0, ConnState::SctpCookieWait, "INIT ACK: still cookie-wait");
    r.fwd(&k, C::COOKIE_ECHO, 1002).unwrap();
    assert_eq!(sctp_state(&r, &k, 1002), Some((ConnState::SctpCookieEchoed, 1002 + to.sctp_cookie_echoed_ms)));
    r.lb.reverse(&reply, C::COOKIE_ACK, 1003).unwrap();
    assert_eq!(sctp_state(&r, &k, 1003), Some((ConnState::SctpEstablished, 1003 + to.sctp_established_ms)));
    let twin = r.lb.sessions.find(&Key::new(&reply), 1003).unwrap();
    assert_eq!(r.lb.sessions.expires(twin), 1003 + to.sctp_established_ms, "both entries");
    assert_eq!(r.fwd(&k, 0, 1004).unwrap(), (there, Outcome::Hit));
    // Idle: gone at its own timeout, both entries; the next packet is a new session.
    let end = 1003 + to.sctp_established_ms;
    assert!(sctp_state(&r, &k, end - 1).is_some());
    assert!(sctp_state(&r, &k, end).is_none());
    assert!(r.lb.reverse(&reply, 0, end).is_none());
    assert_eq!(r.fwd(&k, 0, end).unwrap().1, Outcome::New);
    // Picked up mid-stream (DATA, no session): established.
    assert_eq!(sctp_state(&r, &k, end), Some((ConnState::SctpEstablished, end + to.sctp_established_ms)));
}

/// Heartbeats (and their acks, no state bit: `wire::sctp::ChunkSet`) keep an idle
/// established association: each pushes its expiry on, so one heartbeat every 30 s
/// (RFC 9260's default interval) holds it for as long as they come.
#[test]
fn sctp_heartbeats_keep_an_idle_association() {
    let st = state(spec(Protocol::Sctp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let to = Timeouts::default();
    let k = FlowKey { proto: SCTP, ..client(12) };
    let reply = sctp_established(&mut r, &k, 0);
    let mut now = 0;
    for n in 0..20 {
        now += 30_000;
        // Each side heartbeats in turn; the other acks.
        if n % 2 == 0 {
            assert_eq!(r.fwd(&k, 0, now).unwrap().1, Outcome::Hit, "at {now}");
            r.lb.reverse(&reply, 0, now + 1).unwrap();
        } else {
            r.lb.reverse(&reply, 0, now).unwrap();
            assert_eq!(r.fwd(&k, 0, now + 1).unwrap().1, Outcome::Hit, "at {now}");
        }
    }
    assert!(now > 2 * to.sctp_established_ms);
    // (Written at `now`: `now + 1` moves it by less than its lag.)
    assert_eq!(sctp_state(&r, &k, now + 1), Some((ConnState::SctpEstablished, now + to.sctp_established_ms)));
}

/// An INIT the backend never answered (no INIT ACK, or no COOKIE ECHO after it) goes at
/// the short cookie-wait timeout, not TCP's SYN timeout; a COOKIE ECHO not acked at the
/// cookie-echoed one.
#[test]
fn an_unanswered_init_goes_at_the_cookie_wait_timeout() {
    let st = state(spec(Protocol::Sctp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let to = Timeouts { sctp_cookie_echoed_ms: 4_000, ..Timeouts::default() };
    r.lb = Balancer::new(Limits { sessions: 4096, affinity: 1024 }, to);
    let k = FlowKey { proto: SCTP, ..client(10) };
    let (there, _) = r.fwd(&k, C::INIT, 1000).unwrap();
    let reply = FlowKey { src: there.dst, dst: k.src, sport: 8080, dport: k.sport, proto: SCTP };
    // The client retransmits its INIT: still cookie-wait, no longer.
    r.fwd(&k, C::INIT, 2000).unwrap();
    assert_eq!(sctp_state(&r, &k, 2000), Some((ConnState::SctpCookieWait, 2000 + to.sctp_cookie_wait_ms)));
    assert!(sctp_state(&r, &k, 2000 + to.sctp_cookie_wait_ms - 1).is_some());
    assert!(sctp_state(&r, &k, 2000 + to.sctp_cookie_wait_ms).is_none());
    assert!(r.lb.reverse(&reply, C::INIT_ACK, 2000 + to.sctp_cookie_wait_ms).is_none(), "the reply entry too");
    assert_eq!(r.lb.sessions.live(2000 + to.sctp_cookie_wait_ms), 0);
    // INIT ACK, then no COOKIE ECHO: cookie-wait's timeout from the INIT ACK.
    r.fwd(&k, C::INIT, 10_000).unwrap();
    r.lb.reverse(&reply, C::INIT_ACK, 10_500).unwrap();
    assert_eq!(sctp_state(&r, &k, 10_500), Some((ConnState::SctpCookieWait, 10_500 + to.sctp_cookie_wait_ms)));
    assert!(sctp_state(&r, &k, 10_500 + to.sctp_cookie_wait_ms).is_none());
    // COOKIE ECHO, no COOKIE ACK: cookie-echoed's.
    r.fwd(&k, C::INIT, 20_000).unwrap();
    r.lb.reverse(&reply, C::INIT_ACK, 20_000).unwrap();
    r.fwd(&k, C::COOKIE_ECHO, 20_001).unwrap();
    assert_eq!(sctp_state(&r, &k, 20_001), Some((ConnState::SctpCookieEchoed, 20_001 + 4_000)));
    assert!(sctp_state(&r, &k, 24_000).is_some());
    assert!(sctp_state(&r, &k, 24_001).is_none());
}

/// ABORT (either way) and SHUTDOWN COMPLETE end an association: closed, gone at the
/// closed timeout; SHUTDOWN and SHUTDOWN ACK on the way have the short shutdown ones; a
/// later packet does not bring it back; an INIT on its tuple starts a new one.
#[test]
fn abort_and_shutdown_complete_end_an_association() {
    let st = state(spec(Protocol::Sctp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let to = Timeouts { sctp_shutdown_ms: 2_500, sctp_shutdown_ack_ms: 3_500, ..Timeouts::default() };
    r.lb = Balancer::new(Limits { sessions: 4096, affinity: 1024 }, to);
    let k = FlowKey { proto: SCTP, ..client(11) };
    // The client's ABORT.
    let reply = sctp_established(&mut r, &k, 1000);
    r.fwd(&k, C::ABORT, 2000).unwrap();
    assert_eq!(sctp_state(&r, &k, 2000), Some((ConnState::SctpClosed, 2000 + to.sctp_closed_ms)));
    // Nothing but an INIT brings it back to life (a retransmitted DATA, the peer's ABORT).
    r.lb.reverse(&reply, 0, 2001).unwrap();
    r.fwd(&k, C::COOKIE_ECHO, 2002).unwrap();
    assert_eq!(sctp_state(&r, &k, 2002).unwrap().0, ConnState::SctpClosed);
    assert!(sctp_state(&r, &k, 2002 + to.sctp_closed_ms).is_none());
    assert!(r.lb.reverse(&reply, 0, 2002 + to.sctp_closed_ms).is_none());
    // The backend's ABORT.
    let reply = sctp_established(&mut r, &k, 100_000);
    r.lb.reverse(&reply, C::ABORT, 100_001).unwrap();
    assert_eq!(sctp_state(&r, &k, 100_001), Some((ConnState::SctpClosed, 100_001 + to.sctp_closed_ms)));
    // A graceful end: SHUTDOWN, SHUTDOWN ACK, SHUTDOWN COMPLETE.
    let reply = sctp_established(&mut r, &k, 200_000);
    r.fwd(&k, C::SHUTDOWN, 200_001).unwrap();
    assert_eq!(sctp_state(&r, &k, 200_001), Some((ConnState::SctpShutdown, 200_001 + 2_500)));
    r.fwd(&k, 0, 200_002).unwrap();
    assert_eq!(sctp_state(&r, &k, 200_002).unwrap().0, ConnState::SctpShutdown, "DATA does not reopen it");
    r.lb.reverse(&reply, C::SHUTDOWN_ACK, 200_003).unwrap();
    assert_eq!(sctp_state(&r, &k, 200_003), Some((ConnState::SctpShutdownAck, 200_003 + 3_500)));
    r.fwd(&k, C::SHUTDOWN_COMPLETE, 200_004).unwrap();
    assert_eq!(sctp_state(&r, &k, 200_004), Some((ConnState::SctpClosed, 200_004 + to.sctp_closed_ms)));
    // An INIT on the ended association: a new session, not the old one revived.
    assert_eq!(r.fwd(&k, C::INIT, 200_005).unwrap().1, Outcome::New);
    assert_eq!(sctp_state(&r, &k, 200_005), Some((ConnState::SctpCookieWait, 200_005 + to.sctp_cookie_wait_ms)));
    assert_eq!(r.lb.sessions.live(200_005), 2, "the old pair is gone");
    // A shutdown left half-way (no SHUTDOWN COMPLETE) goes at its short timeout.
    let reply = sctp_established(&mut r, &k, 300_000);
    r.lb.reverse(&reply, C::SHUTDOWN, 300_001).unwrap();
    assert_eq!(sctp_state(&r, &k, 300_001).unwrap().0, ConnState::SctpShutdown);
    assert!(sctp_state(&r, &k, 300_001 + 2_500).is_none());
    // An ABORT with no session (picked up): closed, not established.
    r.fwd(&k, C::ABORT, 400_000).unwrap();
    assert_eq!(sctp_state(&r, &k, 400_000).unwrap().0, ConnState::SctpClosed);
}

/// Direct server return sees the client's chunks alone: its COOKIE ECHO establishes
/// (the backend's INIT ACK reached it), as TCP's first ACK; the rest as with NAT.
#[test]
fn direct_sctp_states() {
    use ConnState::*;
    for (from, ev, to) in [
        (SctpCookieWait, C::INIT, SctpCookieWait),
        (SctpCookieWait, 0, SctpCookieWait),
        (SctpCookieWait, C::COOKIE_ECHO, SctpEstablished),
        (SctpEstablished, 0, SctpEstablished),
        (SctpEstablished, C::COOKIE_ECHO, SctpEstablished),
        (SctpEstablished, C::SHUTDOWN, SctpShutdown),
        (SctpEstablished, C::SHUTDOWN_ACK, SctpShutdownAck),
        (SctpShutdown, 0, SctpShutdown),
        (SctpShutdown, C::SHUTDOWN_COMPLETE, SctpClosed),
        (SctpEstablished, C::ABORT, SctpClosed),
        (SctpClosed, C::COOKIE_ECHO, SctpClosed),
    ] {
        assert_eq!(next_state_sctp_direct(from, ev), to, "{from:?} + {ev:#x}");
    }
    // Through `direct`: INIT, COOKIE ECHO, idle until sctp_established_ms.
    let st = state(ServiceSpec { protocol: Protocol::Sctp, ..gre_spec() });
    let mut r = Run::new(&st);
    let to = Timeouts::default();
    let svc = Arc::clone(r.t.v4.service(0).unwrap());
    let k = FlowKey { proto: SCTP, ..client(13) };
    let (b, o) = r.lb.direct(&svc, &k, C::INIT, 0).unwrap();
    assert_eq!(o, Outcome::New);
    assert_eq!(sctp_state(&r, &k, 0), Some((SctpCookieWait, to.sctp_cookie_wait_ms)));
    assert_eq!(r.lb.direct(&svc, &k, C::COOKIE_ECHO, 5).unwrap(), (b, Outcome::Hit));
    assert_eq!(sctp_state(&r, &k, 5), Some((SctpEstablished, 5 + to.sctp_established_ms)));
    r.lb.direct(&svc, &k, C::ABORT, 6).unwrap();
    assert_eq!(sctp_state(&r, &k, 6), Some((SctpClosed, 6 + to.sctp_closed_ms)));
    assert_eq!(r.lb.direct(&svc, &k, C::INIT, 7).unwrap().1, Outcome::New, "an INIT after the end: a new one");
}

/// A multi-homed client's association through direct server return: after the INIT,
/// its session is keyed by the backend's verification tag, so a packet from another of
/// the client's addresses (a failover) reaches the backend that holds the association,
/// where its own 5-tuple would have Maglev pick another; the entry keeps the SCTP
/// states and the client's latest address, and survives the service's other changes.
#[test]
fn a_multihomed_sctp_association_keeps_its_backend_on_every_path() {
    use ConnState::*;
    let name = "default/web";
    let mut st = state(ServiceSpec { protocol: Protocol::Sctp, ..gre_spec() });
    let mut r = Run::new(&st);
    let to = Timeouts::default();
    let svc = Arc::clone(r.t.v4.service(0).unwrap());
    let h = |k: &FlowKey<[u8; 4]>| V4::flow_hash(&k.src, &k.dst, k.sport, k.dport, k.proto);
    // The client's first address, and a second one whose 5-tuple Maglev sends elsewhere.
    let first = FlowKey { proto: SCTP, dport: 80, ..client(20) };
    let other = |i: u16| FlowKey { src: [198, 18, 9, i as u8], ..first };
    let second = (1..200).map(other).find(|k| svc.pick(h(k)) != svc.pick(h(&first))).unwrap();
    let third = (1..200).map(other).find(|k| k.src != second.src && svc.pick(h(k)) != svc.pick(h(&first))).unwrap();
    const TAG: u32 = 0x5eed_0001;

    let (b, o, moved) = r.lb.direct_sctp(&svc, &first, 0, C::INIT, 0).unwrap();
    assert_eq!((Some(b), o, moved), (svc.pick(h(&first)), Outcome::New, false));
    // The COOKIE ECHO carries the tag: the INIT's entry becomes the association's.
    assert_eq!(r.lb.direct_sctp(&svc, &first, TAG, C::COOKIE_ECHO, 1).unwrap(), (b, Outcome::Hit, false));
    assert!(r.lb.sessions.find(&Key::new(&first), 1).is_none(), "the 5-tuple entry is gone");
    let assoc = association_key::<V4>(&first, TAG);
    assert_eq!(association_tag::<V4>(&assoc), Some(TAG));
    assert_eq!(association_tag::<V4>(&first), None);
    let entry = |r: &Run, now| r.lb.sessions.find(&Key::new(&assoc), now).map(|i| (*r.lb.sessions.get(i), r.lb.sessions.expires(i)));
    assert_eq!(entry(&r, 1).map(|(s, e)| (s.state, e)), Some((SctpEstablished, 1 + to.sctp_established_ms)));
    assert_eq!(r.lb.sessions.live(1), 1);

    // The failover: the second address's packets go where the first's went.
    assert_eq!(r.lb.direct_sctp(&svc, &second, TAG, 0, 2).unwrap(), (b, Outcome::Hit, true));
    assert_eq!(r.lb.direct_sctp(&svc, &second, TAG, 0, 3).unwrap(), (b, Outcome::Hit, false), "the same path again");
    assert_eq!(entry(&r, 3).unwrap().0.rewrite.src, second.src, "the entry names the latest path");
    let rows = crate::show::sessions(&r.lb, 0, 3, None, 10).0;
    assert_eq!((rows[0].protocol, rows[0].client, rows[0].vtag), (SCTP, std::net::IpAddr::from(second.src), Some(TAG)));
    assert_eq!(r.lb.sessions.live(3), 1, "one entry for both paths");

    // Another association from the second address (its own tag) goes by its own INIT.
    let (b2, ..) = r.lb.direct_sctp(&svc, &second, 0, C::INIT, 4).unwrap();
    assert_ne!(b2, b);
    assert_eq!(r.lb.direct_sctp(&svc, &second, TAG + 1, C::COOKIE_ECHO, 5).unwrap().0, b2);
    assert_eq!(r.lb.direct_sctp(&svc, &second, TAG, 0, 6).unwrap().0, b, "the first association's packets still go to its backend");

    // A backend added: Maglev's table changes, the association stays.
    st.set_backend(name, BackendSpec::new("198.19.4.10".parse().unwrap(), 80)).unwrap();
    r.t = st.tables();
    let svc = Arc::clone(r.t.v4.service(0).unwrap());
    assert_eq!(r.lb.direct_sctp(&svc, &third, TAG, 0, 7).unwrap(), (b, Outcome::Hit, true));
    // Its SHUTDOWN from any path moves the one entry's state.
    r.lb.direct_sctp(&svc, &first, TAG, C::SHUTDOWN, 8).unwrap();
    assert_eq!(entry(&r, 8).map(|(s, e)| (s.state, e)), Some((SctpShutdown, 8 + to.sctp_shutdown_ms)));
    r.lb.direct_sctp(&svc, &first, TAG, C::SHUTDOWN_COMPLETE, 9).unwrap();
    assert_eq!(entry(&r, 9).unwrap().0.state, SctpClosed);
    assert!(entry(&r, 9 + to.sctp_closed_ms).is_none(), "it ages as an association does");

    // Without the INIT's entry (it went to another worker, or the session was lost), the
    // tag's first packet takes the backend the INIT's 5-tuple picks, and keeps it.
    let mut other_worker = Run::new(&st);
    let picked = svc.pick(h(&first)).unwrap();
    assert_eq!(other_worker.lb.direct_sctp(&svc, &first, TAG + 2, C::COOKIE_ECHO, 10).unwrap(), (picked, Outcome::New, false));
    assert_eq!(other_worker.lb.direct_sctp(&svc, &third, TAG + 2, 0, 11).unwrap(), (picked, Outcome::Hit, true));

    // Its backend removed: the association is lost there, a backend chosen again.
    let gone = &svc.backends[picked as usize];
    st.del_backend(name, std::net::IpAddr::from(gone.addr), gone.port).unwrap();
    let t = st.tables();
    let svc = Arc::clone(t.v4.service(0).unwrap());
    let (again, o, _) = other_worker.lb.direct_sctp(&svc, &third, TAG + 2, 0, 12).unwrap();
    assert_eq!(o, Outcome::Rechosen);
    assert_ne!(svc.backends[again as usize].addr, gone.addr);
    assert_eq!(other_worker.lb.direct_sctp(&svc, &first, TAG + 2, 0, 13).unwrap().0, again);
}

#[test]
fn udp_sessions_age_when_idle() {
    let st = state(spec(Protocol::Udp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let to = Timeouts::default();
    let k = FlowKey { proto: 17, ..client(3) };
    let (there, _) = r.fwd(&k, 0, 0).unwrap();
    // Traffic keeps it; silence ends it.
    for t in (1..10).map(|n| n * (to.udp_ms - 1)) {
        assert_eq!(r.fwd(&k, 0, t).unwrap().1, Outcome::Hit, "at {t}");
    }
    let last = 9 * (to.udp_ms - 1);
    let reply = FlowKey { src: there.dst, dst: k.src, sport: 8080, dport: k.sport, proto: 17 };
    r.lb.reverse(&reply, 0, last).unwrap();
    let i = r.lb.sessions.find(&Key::new(&k), last).unwrap();
    assert_eq!((r.lb.sessions.get(i).state, r.lb.sessions.expires(i)), (ConnState::UdpReplied, last + to.udp_replied_ms));
    assert!(r.lb.sessions.find(&Key::new(&k), last + to.udp_replied_ms).is_none());
    assert_eq!(r.fwd(&k, 0, last + to.udp_replied_ms).unwrap().1, Outcome::New);
}

/// A packet of an unchanged state writes its entry's expiry only once the expiry would
/// move by its lag (a sixteenth of the timeout, at most a second): not one millisecond
/// before, and then to `now + timeout`; the same through the session hit and the full
/// path, for a timeout whose lag is the second (UDP, 30 s) and one whose lag is a
/// sixteenth (TCP reset, 10 s: 625 ms).
#[test]
fn an_expiry_is_written_when_it_moves_by_its_lag() {
    let to = Timeouts::default();
    for (proto, flags, timeout, lag) in [(17u8, 0u8, to.udp_ms, 1000u64), (6, TCP_RST, to.tcp_reset_ms, to.tcp_reset_ms / 16)] {
        for fast in [false, true] {
            let st = state(spec(if proto == 6 { Protocol::Tcp } else { Protocol::Udp }, TrafficPolicy::Local, Affinity::None));
            let mut r = Run::new(&st);
            let k = FlowKey { proto, ..client(5) };
            // The first two packets set the state (a TCP connection picked up by an RST
            // is established, then reset) and its expiry.
            r.fwd(&k, flags, 100).unwrap();
            r.fwd(&k, flags, 100).unwrap();
            let i = r.lb.sessions.find(&Key::new(&k), 100).unwrap();
            assert_eq!(r.lb.sessions.expires(i), 100 + timeout);
            let packet = |r: &mut Run, now: u64| {
                if fast {
                    let h = V4::flow_hash(&k.src, &k.dst, k.sport, k.dport, k.proto);
                    let at = r.lb.sessions.hashed(h);
                    assert!(matches!(r.lb.hit(&r.t.v4, at, &Key::new(&k), flags, false, now), Some(Hit::Forward(..))));
                } else {
                    assert_eq!(r.fwd(&k, flags, now).unwrap().1, Outcome::Hit);
                }
            };
            packet(&mut r, 100 + lag - 1);
            assert_eq!(r.lb.sessions.expires(i), 100 + timeout, "{proto} fast {fast}: one ms short of the lag");
            packet(&mut r, 100 + lag);
            assert_eq!(r.lb.sessions.expires(i), 100 + lag + timeout, "{proto} fast {fast}: at the lag");
        }
    }
}

/// Flows keep their backends when backends come and go; Maglev moves only new flows.
#[test]
fn established_flows_keep_their_backends_across_changes() {
    let mut st = state(spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let flows: Vec<_> = (0..300).map(client).collect();
    let before: Vec<_> = flows.iter().map(|k| r.backend_of(k, TCP_SYN, 0)).collect();
    st.set_backend("default/web", BackendSpec::new("198.19.4.10".parse().unwrap(), 8080)).unwrap();
    r.t = st.tables();
    let after: Vec<_> = flows.iter().map(|k| r.backend_of(k, TCP_ACK, 1)).collect();
    assert_eq!(before, after);
    // The same tuples as new connections elsewhere (fresh worker): some now go to the new backend.
    let mut fresh = Run::new(&st);
    let moved = flows.iter().filter(|k| fresh.backend_of(k, TCP_SYN, 1) == ip("198.19.4.10")).count();
    assert!(moved > 30 && moved < 120, "{moved}");
}

#[test]
fn terminating_backends_keep_their_flows_and_get_no_new_ones() {
    let mut st = state(spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let flows: Vec<_> = (0..300).map(client).collect();
    let before: Vec<_> = flows.iter().map(|k| r.backend_of(k, TCP_SYN, 0)).collect();
    let draining = ip(BACKENDS[1]);
    assert!(before.contains(&draining));
    st.update_backend(
        "default/web",
        BACKENDS[1].parse().unwrap(),
        8080,
        None,
        Some(Conditions { ready: false, serving: true, terminating: true }),
    )
    .unwrap();
    r.t = st.tables();
    for (k, b) in flows.iter().zip(&before) {
        assert_eq!(r.fwd(k, TCP_ACK, 1).unwrap(), (r.fwd(k, TCP_ACK, 1).unwrap().0, Outcome::Hit));
        assert_eq!(r.backend_of(k, TCP_ACK, 1), *b);
    }
    let new = (1000..1300).map(|i| r.backend_of(&client(i), TCP_SYN, 2)).collect::<Vec<_>>();
    assert!(!new.contains(&draining));
    assert!(new.contains(&ip(BACKENDS[0])) && new.contains(&ip(BACKENDS[2])));
    // Removed outright, its flows are chosen again (and counted as such).
    st.del_backend("default/web", BACKENDS[1].parse().unwrap(), 8080).unwrap();
    r.t = st.tables();
    let (k, _) = flows.iter().zip(&before).find(|(_, b)| **b == draining).unwrap();
    let (there, o) = r.fwd(k, TCP_ACK, 3).unwrap();
    assert_eq!(o, Outcome::Rechosen);
    assert_ne!(there.dst, draining);
}

#[test]
fn client_ip_affinity_holds_for_its_timeout() {
    let st = state(spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::ClientIp { timeout_s: 100 }));
    let mut r = Run::new(&st);
    let one = |port: u16| FlowKey { sport: port, ..client(9) };
    let first = r.backend_of(&one(1), TCP_SYN, 0);
    for p in 2..200 {
        let (there, o) = r.fwd(&one(p), TCP_SYN, p as u64 * 100).unwrap();
        assert_eq!((there.dst, o), (first, Outcome::NewAffine));
    }
    // Without affinity the same connections spread.
    let plain = state(spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::None));
    let mut p = Run::new(&plain);
    let spread: std::collections::HashSet<_> = (1..200).map(|port| p.backend_of(&one(port), TCP_SYN, 0)).collect();
    assert_eq!(spread.len(), 3);
    // Refreshed by each connection, it lapses 100 s after the last.
    let last = 199 * 100;
    let ak = ClientKey::<V4>(AffinityKey { client: one(1).src, service: 0 });
    assert!(r.lb.affinity.find(&ak, last + 99_999).is_some());
    assert!(r.lb.affinity.find(&ak, last + 100_000).is_none());
    let (_, o) = r.fwd(&one(500), TCP_SYN, last + 100_000).unwrap();
    assert_eq!(o, Outcome::New);
}

#[test]
fn a_full_table_is_counted_not_overrun() {
    let st = state(spec(Protocol::Udp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    r.lb = Balancer::new(Limits { sessions: 64, affinity: 8 }, Timeouts::default());
    let (mut ok, mut full) = (0, 0);
    for i in 0..200 {
        match r.fwd(&FlowKey { proto: 17, ..client(i) }, 0, 0) {
            Ok(_) => ok += 1,
            Err(LbDrop::SessionTableFull) => full += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(ok + full, 200);
    assert!(ok <= 32 && ok >= 16, "{ok}");
    assert_eq!(r.lb.sessions.live(0), 2 * ok);
    // Once they expire there is room again.
    assert_eq!(r.fwd(&FlowKey { proto: 17, ..client(1000) }, 0, Timeouts::default().udp_ms).unwrap().1, Outcome::New);
}

#[test]
fn no_backend_is_a_named_drop() {
    let mut s = spec(Protocol::Tcp, TrafficPolicy::Local, Affinity::None);
    s.backends.clear();
    let st = state(s);
    let mut r = Run::new(&st);
    assert_eq!(r.fwd(&client(1), TCP_SYN, 0), Err(LbDrop::NoBackend));
    assert_eq!(r.lb.sessions.live(0), 0);
}

#[test]
fn memory_per_session() {
    // Two entries per connection; reported in docs/PERFORMANCE.md. An IPv4 slot is one
    // cache line (a hit's one dependent miss), an IPv6 slot two; each with a 4-byte tag.
    assert_eq!(Table::<Key<V4>, Session<[u8; 4]>>::slot_size(), 64);
    assert_eq!(Table::<Key<V4>, Session<[u8; 4]>>::slot_bytes(), 68);
    assert_eq!(Table::<Key<crate::V6>, Session<[u8; 16]>>::slot_size(), 128);
}

/// The tables are made of zero bytes, not of default values written out: the two must
/// be the same entries, or a free slot would read as something a default never was.
#[test]
fn an_untouched_entry_is_the_default_one() {
    use zerocopy::FromZeros;
    assert_eq!(Session::<[u8; 4]>::new_zeroed(), Session::default());
    assert_eq!(Session::<[u8; 16]>::new_zeroed(), Session::default());
    assert_eq!(ConnState::new_zeroed(), ConnState::default());
    assert_eq!(Key::<V4>::new_zeroed().flow(), Key::<V4>::default().flow());
    assert_eq!(Key::<crate::V6>::new_zeroed().flow(), Key::<crate::V6>::default().flow());
    assert_eq!(AffinityEntry::<[u8; 16]>::new_zeroed(), AffinityEntry::default());
    // A million-entry table reads empty.
    let mut t: Table<Key<V4>, Session<[u8; 4]>> = Table::new(1 << 20);
    let key = Key::<V4>::new(&FlowKey { src: [198, 18, 0, 1], dst: [198, 18, 128, 0], sport: 1, dport: 80, proto: 6 });
    assert!(t.find(&key, 1).is_none());
    assert!(t.insert(key, Session::default(), 1, 1000).is_some());
    assert!(t.find(&key, 2).is_some());
}

/// A TCP service encapsulated in GRE (its backends on the service's port, as
/// encapsulation needs).
fn gre_spec() -> ServiceSpec {
    let mut s = spec(Protocol::Tcp, TrafficPolicy::Cluster, Affinity::None);
    s.forwarding = crate::service::Forwarding::Gre;
    s.backends.iter_mut().for_each(|b| b.port = 80);
    s
}

/// A direct-server-return service: one entry per connection, the backend kept while the
/// set changes, the TCP state from the client's packets alone.
#[test]
fn a_direct_connection_is_one_entry_and_sticks() {
    let mut st = state(gre_spec());
    let mut r = Run::new(&st);
    let svc = Arc::clone(r.t.v4.service(0).unwrap());
    assert!(r.t.v4.shape(svc.shape).is_some(), "an encapsulated service has its outer headers' shape");
    assert!(!svc.snat, "an encapsulated service translates nothing");
    let flows: Vec<_> = (0..200).map(client).collect();
    let chosen: Vec<u32> = flows
        .iter()
        .map(|k| r.lb.direct(&svc, k, TCP_SYN, 0).unwrap())
        .map(|(b, o)| {
            assert_eq!(o, Outcome::New);
            b
        })
        .collect();
    assert_eq!(r.lb.sessions.live(0), flows.len(), "no reply entries");
    // Every backend takes some (Maglev), and the choice is Maglev's.
    let h = |k: &FlowKey<[u8; 4]>| V4::flow_hash(&k.src, &k.dst, k.sport, k.dport, k.proto);
    assert!(flows.iter().zip(&chosen).all(|(k, &b)| svc.pick(h(k)) == Some(b)));
    assert!((0..3).all(|b| chosen.contains(&b)));
    // The handshake's ACK makes the connection established (no SYN-ACK is ever seen).
    let k = flows[0];
    assert_eq!(r.lb.direct(&svc, &k, TCP_ACK, 1).unwrap(), (chosen[0], Outcome::Hit));
    let i = r.lb.sessions.find(&Key::new(&k), 1).unwrap();
    assert_eq!(r.lb.sessions.get(i).state, ConnState::Established);
    assert_eq!(r.lb.sessions.expires(i), 1 + Timeouts::default().tcp_established_ms);
    // A backend added: established flows keep theirs.
    st.set_backend("default/web", BackendSpec::new("198.19.4.10".parse().unwrap(), 80)).unwrap();
    let t = st.tables();
    let svc2 = Arc::clone(t.v4.service(0).unwrap());
    assert!(flows.iter().zip(&chosen).all(|(k, &b)| r.lb.direct(&svc2, k, TCP_ACK, 2).unwrap() == (b, Outcome::Hit)));
    // A backend removed: its flows choose again, the others stay.
    st.del_backend("default/web", BACKENDS[1].parse().unwrap(), 80).unwrap();
    let t = st.tables();
    let svc3 = Arc::clone(t.v4.service(0).unwrap());
    for (k, &b) in flows.iter().zip(&chosen) {
        let (now, o) = r.lb.direct(&svc3, k, TCP_ACK, 3).unwrap();
        if b == 1 {
            assert_eq!(o, Outcome::Rechosen);
            assert!(svc3.backends[now as usize].addr != ip(BACKENDS[1]));
        } else {
            // Indices after the removed one move down by one.
            assert_eq!(svc3.backends[now as usize].addr, svc.backends[b as usize].addr);
            assert_eq!(o, Outcome::Hit);
        }
    }
}

/// A direct session carries its backend's adjacency: when resolution changes it, the
/// service's new generation sends the session's next packet through the full path,
/// which keeps the backend and takes the new adjacency; hits then carry it.
#[test]
fn a_direct_session_takes_its_backends_new_adjacency() {
    let mut st = state(gre_spec());
    st.resolve_changed(|_| 21);
    let mut r = Run::new(&st);
    let k = client(5);
    let at = |r: &Run| r.lb.sessions.hashed(V4::flow_hash(&k.src, &k.dst, k.sport, k.dport, k.proto));
    let svc = Arc::clone(r.t.v4.service(0).unwrap());
    let (b, _) = r.lb.direct(&svc, &k, TCP_SYN, 0).unwrap();
    let adj_of = |r: &mut Run, now| match r.lb.hit(&r.t.v4, at(r), &Key::new(&k), TCP_ACK, false, now) {
        Some(Hit::Direct { backend, adj, dst, .. }) => Some((backend, dst, adj)),
        _ => None,
    };
    let addr = svc.backends[b as usize].addr;
    assert_eq!(adj_of(&mut r, 1), Some((b, addr, 21)));
    assert!(st.resolve_outers(|_| 22));
    r.t = st.tables();
    assert_eq!(adj_of(&mut r, 2), None, "a new generation: the full path first");
    let svc = Arc::clone(r.t.v4.service(0).unwrap());
    assert_eq!(r.lb.direct(&svc, &k, TCP_ACK, 2).unwrap(), (b, Outcome::Hit));
    assert_eq!(adj_of(&mut r, 3), Some((b, addr, 22)));
}

/// An ICMP error about a direct-server-return backend's reply goes to the backend that
/// holds the connection, also where the backend set changed since and Maglev now picks
/// another; without a session, to Maglev's pick; and it makes or refreshes no entry.
/// A direct entry translates nothing (`peek`: no NAT translation of such an error).
#[test]
fn an_error_about_a_direct_reply_goes_to_the_connections_backend() {
    let mut st = state(gre_spec());
    let mut r = Run::new(&st);
    let svc = Arc::clone(r.t.v4.service(0).unwrap());
    let flows: Vec<_> = (0..200).map(client).collect();
    let chosen: Vec<_> = flows.iter().map(|k| svc.backends[r.lb.direct(&svc, k, TCP_SYN, 0).unwrap().0 as usize].addr).collect();
    st.set_backend("default/web", BackendSpec::new("198.19.4.10".parse().unwrap(), 80)).unwrap();
    let t = st.tables();
    let svc2 = Arc::clone(t.v4.service(0).unwrap());
    let h = |k: &FlowKey<[u8; 4]>| V4::flow_hash(&k.src, &k.dst, k.sport, k.dport, k.proto);
    let expiry: Vec<_> = flows.iter().map(|k| r.lb.sessions.expires(r.lb.sessions.find(&Key::new(k), 0).unwrap())).collect();
    let mut moved = 0;
    for (k, addr) in flows.iter().zip(&chosen) {
        let b = r.lb.direct_backend(&svc2, k, 1).unwrap();
        assert_eq!(svc2.backends[b as usize].addr, *addr, "the connection's backend, not the new pick");
        moved += usize::from(svc2.pick(h(k)) != Some(b));
        assert!(r.lb.peek(k, 1).is_none(), "a direct entry translates nothing");
    }
    assert!(moved > 0, "the added backend takes some flows' picks");
    let unknown: Vec<_> = (1000..1100).map(client).collect();
    for k in &unknown {
        assert_eq!(r.lb.direct_backend(&svc2, k, 1), svc2.pick(h(k)));
    }
    assert_eq!(r.lb.sessions.live(1), flows.len(), "no entry made");
    let after: Vec<_> = flows.iter().map(|k| r.lb.sessions.expires(r.lb.sessions.find(&Key::new(k), 1).unwrap())).collect();
    assert_eq!(after, expiry, "none refreshed");
    // A translated connection's entries still give their translation.
    let mut nat = Run::new(&state(spec(Protocol::Tcp, TrafficPolicy::Cluster, Affinity::None)));
    let k = client(7);
    let (rw, _) = nat.fwd(&k, TCP_SYN, 0).unwrap();
    assert_eq!(nat.lb.peek(&k, 0), Some(rw));
}

#[test]
fn direct_tcp_states() {
    use ConnState::*;
    for (from, flags, to) in [
        (SynSent, TCP_SYN, SynSent),
        (SynSent, TCP_ACK, Established),
        (SynSent, TCP_SYN | TCP_ACK, SynSent),
        (Established, TCP_ACK, Established),
        (Established, TCP_FIN | TCP_ACK, Closing),
        (Closing, TCP_ACK, Closing),
        (Established, TCP_RST, Reset),
        (Reset, TCP_ACK, Reset),
    ] {
        assert_eq!(next_state_direct(from, 6, flags), to, "{from:?} + {flags:#x}");
    }
    assert_eq!(next_state_direct(UdpNew, 17, 0), UdpNew);
}

/// What the node does with a client's or a reply's packet, as far as the balancer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Translated (a client's packet, with how its session went; or a reply).
    Nat(Rewrite<[u8; 4]>, Option<Outcome>),
    Direct {
        service: u32,
        backend: u32,
        outcome: Outcome,
    },
    NoService,
    Drop(LbDrop),
}

/// The node's full path (as before the fast path): a reply's entry for packets to the
/// node, else the service by address and its session (or a new one).
fn full_path(lb: &mut Balancer<V4>, t: &crate::tables::FamilyTables<V4>, k: &FlowKey<[u8; 4]>, flags: u8, local: bool, now: u64) -> Answer {
    if local {
        if let Some(rw) = lb.reverse(k, flags, now) {
            return Answer::Nat(rw, None);
        }
    }
    let Some(svc) = t.lookup(&k.dst, k.dport, k.proto, local).cloned() else {
        return Answer::NoService;
    };
    if svc.forwarding.is_encap() {
        return match lb.direct(&svc, k, flags, now) {
            Ok((backend, outcome)) => Answer::Direct { service: svc.id, backend, outcome },
            Err(e) => Answer::Drop(e),
        };
    }
    match lb.forward(t, &svc, k, flags, now) {
        Ok((rw, o)) => Answer::Nat(rw, Some(o)),
        Err(e) => Answer::Drop(e),
    }
}

/// The node's path now: [`Balancer::hit`] first, the full path when it declines. The
/// checksum changes a hit hands out must be those of the packet's own flow.
fn fast_path(lb: &mut Balancer<V4>, t: &crate::tables::FamilyTables<V4>, k: &FlowKey<[u8; 4]>, flags: u8, local: bool, now: u64) -> Answer {
    let h = V4::flow_hash(&k.src, &k.dst, k.sport, k.dport, k.proto);
    match lb.hit(t, lb.sessions.hashed(h), &Key::new(k), flags, local, now) {
        Some(Hit::Forward(rw, d)) => {
            assert_eq!(d, crate::nat::Deltas::new::<V4>(k, rw));
            Answer::Nat(*rw, Some(Outcome::Hit))
        }
        Some(Hit::Reply(rw, d)) => {
            assert_eq!(d, crate::nat::Deltas::new::<V4>(k, rw));
            Answer::Nat(*rw, None)
        }
        Some(Hit::Direct { service, backend, outer, dst, adj }) => {
            // The service's shape, the backend's address and adjacency, as the node's
            // full path looks them up.
            let svc = t.service(service).unwrap();
            assert!(t.shape(svc.shape).is_some_and(|o| std::ptr::eq(o, outer)));
            let b = &svc.backends[backend as usize];
            assert_eq!((dst, adj), (b.addr, b.adj));
            Answer::Direct { service, backend, outcome: Outcome::Hit }
        }
        None => full_path(lb, t, k, flags, local, now),
    }
}

/// Services of every kind the fast path distinguishes: NAT with the node's source (TCP
/// and UDP), NAT keeping the client's source, direct server return, and a NodePort.
fn mixed_services() -> Vec<ServiceSpec> {
    let mut v = Vec::new();
    for (i, (proto, policy, fwd, kind)) in [
        (Protocol::Tcp, TrafficPolicy::Cluster, crate::service::Forwarding::Nat, ServiceType::ClusterIp),
        (Protocol::Udp, TrafficPolicy::Cluster, crate::service::Forwarding::Nat, ServiceType::ClusterIp),
        (Protocol::Tcp, TrafficPolicy::Local, crate::service::Forwarding::Nat, ServiceType::ClusterIp),
        (Protocol::Tcp, TrafficPolicy::Cluster, crate::service::Forwarding::Gre, ServiceType::ClusterIp),
        (Protocol::Tcp, TrafficPolicy::Cluster, crate::service::Forwarding::Nat, ServiceType::NodePort),
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = spec(proto, policy, Affinity::None);
        s.name = format!("s{i}");
        s.kind = kind;
        s.forwarding = fwd;
        s.vip = if kind == ServiceType::NodePort { "0.0.0.0".parse().unwrap() } else { format!("198.18.128.{}", 10 + i).parse().unwrap() };
        s.port = if kind == ServiceType::NodePort { 30080 } else { 80 };
        if fwd.is_encap() {
            s.backends.iter_mut().for_each(|b| b.port = 80);
        }
        v.push(s);
    }
    v
}

/// Timeouts a reload might set: UDP's and established TCP's a tenth of the defaults.
fn shorter_timeouts() -> Timeouts {
    let d = Timeouts::default();
    Timeouts { udp_ms: d.udp_ms / 10, udp_replied_ms: d.udp_replied_ms / 10, tcp_established_ms: d.tcp_established_ms / 10, ..d }
}

/// Timeouts replaced (a reload's): a new session takes the new ones, an existing one
/// from its next packet, shorter or longer than its old expiry; an idle one keeps the
/// expiry its last packet set.
#[test]
fn replaced_timeouts_age_sessions_from_their_next_packet() {
    let st = state(spec(Protocol::Udp, TrafficPolicy::Local, Affinity::None));
    let mut r = Run::new(&st);
    let d = Timeouts::default();
    let expiry = |r: &Run, k: &FlowKey<[u8; 4]>, now| r.lb.sessions.find(&Key::new(k), now).map(|i| r.lb.sessions.expires(i));
    let (busy, idle) = (FlowKey { proto: 17, ..client(1) }, FlowKey { proto: 17, ..client(2) });
    r.fwd(&busy, 0, 0).unwrap();
    r.fwd(&idle, 0, 0).unwrap();
    assert_eq!(expiry(&r, &busy, 0), Some(d.udp_ms));

    let short = Timeouts { udp_ms: 5_000, ..d };
    r.lb.set_timeouts(short);
    // The next packet sets the new expiry, though the old one is further off.
    assert_eq!(r.fwd(&busy, 0, 1_000).unwrap().1, Outcome::Hit);
    assert_eq!(expiry(&r, &busy, 1_000), Some(1_000 + 5_000));
    assert!(expiry(&r, &busy, 6_000).is_none(), "aged by the new timeout");
    assert_eq!(expiry(&r, &idle, 6_000), Some(d.udp_ms), "an idle session keeps its expiry");
    // A new session takes the new timeout.
    let new = FlowKey { proto: 17, ..client(3) };
    r.fwd(&new, 0, 7_000).unwrap();
    assert_eq!(expiry(&r, &new, 7_000), Some(7_000 + 5_000));

    // Longer again: the next packet pushes the expiry out to it.
    r.lb.set_timeouts(d);
    assert_eq!(r.fwd(&new, 0, 8_000).unwrap().1, Outcome::Hit);
    assert_eq!(expiry(&r, &new, 8_000), Some(8_000 + d.udp_ms));
    assert!(expiry(&r, &new, 8_000 + d.udp_ms - 1).is_some());
}

/// One step of the differential run.
#[derive(Debug, Clone)]
enum Step {
    /// A client's packet: client, its port, service, TCP flags.
    Packet(u8, u8, usize, u8),
    /// The reply to a live connection (picked by index among the live ones), TCP flags.
    Reply(usize, u8),
    /// A backend of a service added, removed, draining, or back to ready.
    Backend(usize, u8, u8),
    /// A service deleted and added again (a new id may come, its sessions start over).
    Readd(usize),
    /// A service address added on the NodePort's port (then taken away again).
    Shadow(bool),
    /// Time passes (milliseconds).
    Wait(u32),
    /// A reload's timeouts: shorter ones (UDP's and TCP's established a tenth of the
    /// default) or the defaults again.
    Timeouts(bool),
}

fn step_strategy() -> impl Strategy<Value = Step> {
    let flags = prop_oneof![Just(0u8), Just(TCP_SYN), Just(TCP_SYN | TCP_ACK), Just(TCP_ACK), Just(TCP_FIN | TCP_ACK), Just(TCP_RST)];
    prop_oneof![
        8 => (0u8..4, 0u8..4, 0usize..6, flags.clone()).prop_map(|(c, p, s, f)| Step::Packet(c, p, s, f)),
        4 => (any::<usize>(), flags).prop_map(|(i, f)| Step::Reply(i, f)),
        1 => (0usize..5, 0u8..5, 0u8..4).prop_map(|(s, b, op)| Step::Backend(s, b, op)),
        1 => (0usize..5).prop_map(Step::Readd),
        1 => any::<bool>().prop_map(Step::Shadow),
        2 => prop_oneof![Just(10u32), Just(1_500), Just(40_000), Just(130_000)].prop_map(Step::Wait),
        1 => any::<bool>().prop_map(Step::Timeouts),
    ]
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The fast path answers every packet as the full path does and leaves the same
    /// sessions, through backend changes, service re-creation, NodePort shadowing, TCP
    /// state changes and expiry: two balancers side by side, one taking each path.
    #[test]
    fn the_fast_path_answers_as_the_full_path(steps in proptest::collection::vec(step_strategy(), 1..120)) {
        let specs = mixed_services();
        let mut st = LbState::new();
        st.set_snat(Some("198.18.0.2".parse().unwrap())).unwrap();
        for s in &specs {
            st.add_service(s.clone()).unwrap();
        }
        let mut t = st.tables();
        let limits = Limits { sessions: 256, affinity: 64 };
        let (mut full, mut fast) = (Balancer::<V4>::new(limits, Timeouts::default()), Balancer::<V4>::new(limits, Timeouts::default()));
        let mut now = 1u64;
        for step in steps {
            match step {
                Step::Packet(c, p, s, flags) => {
                    let (dst, dport, proto, local) = match s {
                        4 => (NODE, 30080, 6, true),
                        5 => (NODE, 80, 6, true),
                        _ => ([198, 18, 128, 10 + s as u8], 80, if s == 1 { 17 } else { 6 }, false),
                    };
                    let k = FlowKey { src: [198, 18, 1, c], dst, sport: 20_000 + p as u16, dport, proto };
                    let flags = if proto == 6 { flags } else { 0 };
                    let a = full_path(&mut full, &t.v4, &k, flags, local, now);
                    let b = fast_path(&mut fast, &t.v4, &k, flags, local, now);
                    prop_assert_eq!(a, b, "{:?}", k);
                }
                Step::Reply(i, flags) => {
                    let replies: Vec<FlowKey<[u8; 4]>> = full.sessions.iter_live(now).filter(|(_, _, s, _)| !s.is_forward()).map(|(_, k, _, _)| k.flow()).collect();
                    if replies.is_empty() {
                        continue;
                    }
                    let k = replies[i % replies.len()];
                    let flags = if k.proto == 6 { flags } else { 0 };
                    // Replies to the node come by ipN-local; a Local-policy connection's
                    // reply is addressed to the client (the forwarded path, not here).
                    let local = k.dst == NODE;
                    let a = full_path(&mut full, &t.v4, &k, flags, local, now);
                    let b = fast_path(&mut fast, &t.v4, &k, flags, local, now);
                    prop_assert_eq!(a, b, "reply {:?}", k);
                }
                Step::Backend(s, b, op) => {
                    let name = format!("s{s}");
                    let port = if specs[s].forwarding.is_encap() { 80 } else { 8080 };
                    let addr: std::net::IpAddr = format!("198.19.{}.10", 1 + b).parse().unwrap();
                    let draining = Conditions { ready: false, serving: true, terminating: true };
                    let _ = match op {
                        0 => st.set_backend(&name, BackendSpec::new(addr, port)),
                        1 => st.del_backend(&name, addr, port),
                        2 => st.update_backend(&name, addr, port, None, Some(draining)),
                        _ => st.update_backend(&name, addr, port, None, Some(Conditions::default())),
                    };
                    t = st.tables();
                }
                Step::Readd(s) => {
                    let name = format!("s{s}");
                    if let Ok(spec) = st.del_service(&name) {
                        st.add_service(spec).unwrap();
                    }
                    t = st.tables();
                }
                Step::Shadow(on) => {
                    let mut s = spec(Protocol::Tcp, TrafficPolicy::Cluster, Affinity::None);
                    s.name = "shadow".into();
                    s.vip = "198.18.0.2".parse().unwrap();
                    s.port = 30080;
                    s.backends = vec![BackendSpec::new("198.19.9.10".parse().unwrap(), 8080)];
                    let _ = if on { st.add_service(s).map(|_| ()) } else { st.del_service("shadow").map(|_| ()) };
                    t = st.tables();
                }
                Step::Wait(ms) => now += ms as u64,
                Step::Timeouts(short) => {
                    let to = if short { shorter_timeouts() } else { Timeouts::default() };
                    full.set_timeouts(to);
                    fast.set_timeouts(to);
                }
            }
        }
        let rows = |b: &Balancer<V4>| b.sessions.iter_live(now).map(|(i, k, s, e)| (i, *k, *s, e)).collect::<Vec<_>>();
        prop_assert_eq!(rows(&full), rows(&fast));
    }
}

/// A connection's packets after its first are decided by its session alone, until its
/// service changes: then once by the full path (which checks the backend is still
/// there), and by the session again after it.
#[test]
fn an_established_flow_is_a_fast_hit_until_its_service_changes() {
    let mut st = state(spec(Protocol::Tcp, TrafficPolicy::Cluster, Affinity::None));
    let mut r = Run::new(&st);
    let k = client(1);
    let h = |k: &FlowKey<[u8; 4]>| V4::flow_hash(&k.src, &k.dst, k.sport, k.dport, k.proto);
    assert_eq!(r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&k)), &Key::new(&k), TCP_SYN, false, 0), None, "a new flow");
    let (there, _) = r.fwd(&k, TCP_SYN, 0).unwrap();
    let d = crate::nat::Deltas::new::<V4>(&k, &there);
    assert_eq!(r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&k)), &Key::new(&k), TCP_ACK, false, 1), Some(Hit::Forward(&there, d)));
    assert_eq!(r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&k) ^ 1), &Key::new(&k), TCP_ACK, false, 1), None, "found by its hash only");
    // The reply, to the node: a hit when it came to the node, not when routed.
    let rk = FlowKey { src: there.dst, sport: there.dport, dst: there.src, dport: there.sport, proto: 6 };
    assert_eq!(r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&rk)), &Key::new(&rk), TCP_ACK, false, 1), None);
    let Some(Hit::Reply(&back, _)) = r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&rk)), &Key::new(&rk), TCP_SYN | TCP_ACK, true, 1) else {
        panic!("no reply hit")
    };
    assert_eq!((back.src, back.sport, back.dst, back.dport), (VIP, 80, k.src, k.sport));
    // Another backend added: the service's generation moved on.
    st.set_backend("default/web", BackendSpec::new("198.19.4.10".parse().unwrap(), 8080)).unwrap();
    r.t = st.tables();
    assert_eq!(r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&k)), &Key::new(&k), TCP_ACK, false, 2), None);
    assert_eq!(r.fwd(&k, TCP_ACK, 2).unwrap(), (there, Outcome::Hit));
    assert_eq!(r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&k)), &Key::new(&k), TCP_ACK, false, 3), Some(Hit::Forward(&there, d)));
    // A SYN on a closed connection starts over by the full path.
    assert!(r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&k)), &Key::new(&k), TCP_FIN | TCP_ACK, false, 4).is_some());
    assert_eq!(r.lb.hit(&r.t.v4, r.lb.sessions.hashed(h(&k)), &Key::new(&k), TCP_SYN, false, 5), None);
}

/// `Timeouts::of` reads an array in `ConnState`'s order: each state gets its own field
/// (distinct values, so a state read at another's index fails).
#[test]
fn each_state_has_its_own_timeout() {
    use ConnState::*;
    let to = Timeouts {
        tcp_syn_ms: 1,
        tcp_established_ms: 2,
        tcp_closing_ms: 3,
        tcp_reset_ms: 4,
        udp_ms: 5,
        udp_replied_ms: 6,
        sctp_cookie_wait_ms: 7,
        sctp_cookie_echoed_ms: 8,
        sctp_established_ms: 9,
        sctp_shutdown_ms: 10,
        sctp_shutdown_ack_ms: 11,
        sctp_closed_ms: 12,
    };
    let got = [
        SynSent,
        Established,
        Closing,
        Reset,
        UdpNew,
        UdpReplied,
        SctpCookieWait,
        SctpCookieEchoed,
        SctpEstablished,
        SctpShutdown,
        SctpShutdownAck,
        SctpClosed,
    ]
    .map(|s| to.of(s));
    assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    // (That each name is its field's: control's `each_timeout_is_checked_by_its_name`.)
}

/// The session key's compare (written out, not derived) sees every field: a key that
/// differs from another in any one field is another key.
#[test]
fn a_key_differs_in_any_field() {
    let k = FlowKey { src: [198, 18, 1, 7], dst: [198, 18, 128, 10], sport: 40_000, dport: 80, proto: 6 };
    assert_eq!(Key::<V4>::new(&k), Key::<V4>::new(&k));
    let changed = [
        FlowKey { src: [198, 18, 1, 8], ..k },
        FlowKey { dst: [198, 18, 128, 11], ..k },
        FlowKey { sport: 40_001, ..k },
        FlowKey { dport: 81, ..k },
        FlowKey { proto: 17, ..k },
    ];
    for c in changed {
        assert_ne!(Key::<V4>::new(&k), Key::<V4>::new(&c), "{c:?}");
    }
}

/// A 5-tuple whose fields differ from another's in few places (the same addresses or
/// ports drawn from small sets), so that equal keys and near misses both come up.
fn near_key<A: std::fmt::Debug + Clone>(addr: impl Strategy<Value = A> + Clone) -> impl Strategy<Value = FlowKey<A>> {
    (
        addr.clone(),
        addr,
        prop_oneof![Just(80u16), Just(0x5000), any::<u16>()],
        prop_oneof![Just(80u16), Just(0x0050)],
        prop_oneof![Just(6u8), Just(17), any::<u8>()],
    )
        .prop_map(|(src, dst, sport, dport, proto)| FlowKey { src, dst, sport, dport, proto })
}

proptest! {
    /// The session key's words (compared XORed and ORed, a word at a time) are equal
    /// exactly when the 5-tuples are, give the 5-tuple back, and hash as the flow hash
    /// of its fields (the hash Maglev and the table were built on).
    #[test]
    fn packed_keys_compare_as_their_fields(
        a in near_key(prop_oneof![Just([198u8, 18, 0, 1]), Just([1, 198, 18, 0]), any::<[u8; 4]>()]),
        b in near_key(prop_oneof![Just([198u8, 18, 0, 1]), Just([1, 198, 18, 0]), any::<[u8; 4]>()]),
        a6 in near_key(prop_oneof![Just([0x20u8; 16]), Just({ let mut x = [0x20u8; 16]; x[15] = 1; x }), any::<[u8; 16]>()]),
        b6 in near_key(prop_oneof![Just([0x20u8; 16]), Just({ let mut x = [0x20u8; 16]; x[15] = 1; x }), any::<[u8; 16]>()]),
    ) {
        prop_assert_eq!(Key::<V4>::new(&a) == Key::<V4>::new(&b), a == b);
        prop_assert_eq!(Key::<crate::V6>::new(&a6) == Key::<crate::V6>::new(&b6), a6 == b6);
        prop_assert_eq!(Key::<V4>::new(&a).flow(), a);
        prop_assert_eq!(Key::<crate::V6>::new(&a6).flow(), a6);
        prop_assert_eq!(Key::<V4>::new(&a).proto(), a.proto);
        prop_assert_eq!(Key::<crate::V6>::new(&a6).proto(), a6.proto);
        prop_assert_eq!(Key::<V4>::new(&a).hash(), V4::flow_hash(&a.src, &a.dst, a.sport, a.dport, a.proto));
        prop_assert_eq!(Key::<crate::V6>::new(&a6).hash(), crate::V6::flow_hash(&a6.src, &a6.dst, a6.sport, a6.dport, a6.proto));
    }
}

/// An IPv4 TCP header and ports for `crate::steer::owner`.
fn l3(k: &FlowKey<[u8; 4]>) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 24, 0, 0, 0, 0, 64, k.proto, 0, 0];
    p.extend_from_slice(&k.src);
    p.extend_from_slice(&k.dst);
    p.extend_from_slice(&k.sport.to_be_bytes());
    p.extend_from_slice(&k.dport.to_be_bytes());
    p
}

/// An ICMP error (destination unreachable, fragmentation needed) from `from` to `to`
/// quoting a packet of flow `q`.
fn icmp_error(from: [u8; 4], to: [u8; 4], q: &FlowKey<[u8; 4]>) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 56, 0, 0, 0, 0, 64, 1, 0, 0];
    p.extend_from_slice(&from);
    p.extend_from_slice(&to);
    p.extend_from_slice(&[3, 4, 0, 0, 0, 0, 5, 0x78]);
    p.extend_from_slice(&l3(q));
    p.extend_from_slice(&[0; 4]);
    p
}

/// With several workers, a connection's client packets and its backend's replies are
/// steered to one worker, the one whose session holds it, with SNAT (the reply to the
/// node's address and a port that worker chose) and without (the reply to the client);
/// no two workers hand out the same SNAT port; packets of nobody's service are not
/// steered.
#[test]
fn both_directions_steer_to_the_worker_with_the_session() {
    for policy in [TrafficPolicy::Cluster, TrafficPolicy::Local] {
        for workers in [2u32, 3, 4] {
            let st = state(spec(Protocol::Tcp, policy, Affinity::None));
            let t = st.tables();
            let mut runs: Vec<Run> = (0..workers)
                .map(|k| {
                    let mut r = Run::new(&st);
                    r.lb.set_worker(k, workers);
                    r
                })
                .collect();
            let mut given = std::collections::HashSet::new();
            let mut on = vec![0; workers as usize];
            for i in 0..300 {
                let k = client(i);
                let w = crate::steer::owner(&t, &l3(&k), workers, |_| false).expect("a client's packet to a service");
                on[w as usize] += 1;
                let (rw, _) = runs[w as usize].fwd(&k, TCP_SYN, 0).unwrap();
                let there = FlowKey { src: rw.src, sport: rw.sport, dst: rw.dst, dport: rw.dport, proto: 6 };
                let reply = there.reversed();
                assert_eq!(crate::steer::owner(&t, &l3(&reply), workers, |_| false), Some(w), "{policy:?}, {workers} workers, client {i}");
                assert!(runs[w as usize].lb.reverse(&reply, TCP_SYN | TCP_ACK, 0).is_some(), "the session is there");
                // ICMP errors about either direction: from a router toward the backend
                // (quoting the translated packet) and toward the client (quoting the
                // translated reply).
                let back = k.reversed();
                for (to, q) in [(rw.src, &there), (k.src, &back)] {
                    assert_eq!(crate::steer::owner(&t, &icmp_error(ip("198.18.9.9"), to, q), workers, |_| false), Some(w), "{q:?}");
                }
                if policy == TrafficPolicy::Cluster {
                    assert_eq!(rw.src, NODE);
                    assert!(given.insert((rw.dst, rw.sport)), "SNAT port {} given twice", rw.sport);
                }
            }
            assert!(on.iter().all(|&n| n > 300 / workers as usize / 2), "spread: {on:?}");
            // Not the load balancer's: from and to elsewhere.
            let other = FlowKey { src: ip("198.18.5.5"), sport: 1000, dst: ip("198.18.6.6"), dport: 80, proto: 6 };
            assert_eq!(crate::steer::owner(&t, &l3(&other), workers, |_| false), None);
        }
    }
}

/// With several workers, a direct-server-return SCTP association's packets after the
/// INIT go to one worker, whichever of the client's addresses they come from (by the
/// verification tag, as its session is keyed: `Balancer::direct_sctp`); the INIT and a
/// NAT service's packets by their client.
#[test]
fn a_multihomed_sctp_association_steers_to_one_worker() {
    let sctp = |k: &FlowKey<[u8; 4]>, vtag: u32| {
        let mut p = l3(k);
        p[3] = 32;
        p.extend_from_slice(&vtag.to_be_bytes());
        p.extend_from_slice(&[0; 4]);
        p
    };
    for forwarding in [crate::service::Forwarding::Gre, crate::service::Forwarding::Nat] {
        let st = state(ServiceSpec { protocol: Protocol::Sctp, forwarding, ..gre_spec() });
        let t = st.tables();
        for workers in [2u32, 3, 4] {
            let mut apart = 0;
            for i in 0..100u16 {
                let first = FlowKey { proto: SCTP, dport: 80, ..client(i) };
                let second = FlowKey { src: [198, 18, 9, i as u8], ..first };
                let by_client = |k: &FlowKey<[u8; 4]>| crate::steer::client_worker::<V4>(&k.src, k.sport, SCTP, workers);
                let owner = |k: &FlowKey<[u8; 4]>, tag| crate::steer::owner(&t, &sctp(k, tag), workers, |_| false);
                assert_eq!(owner(&first, 0), Some(by_client(&first)), "the INIT by its client");
                let tag = 0x1000 + i as u32;
                if forwarding.is_encap() {
                    assert_eq!(owner(&first, tag), owner(&second, tag), "one worker for both paths");
                    let k = association_key::<V4>(&first, tag);
                    assert_eq!(owner(&first, tag), Some(crate::steer::client_worker::<V4>(&k.src, k.sport, k.proto, workers)));
                    // A router's error about the backend's reply (to the service address):
                    // by the client, not by the ICMP header read as a tag.
                    let reply = first.reversed();
                    let error = icmp_error([198, 18, 0, 254], reply.src, &reply);
                    assert_eq!(crate::steer::owner(&t, &error, workers, |_| false), Some(by_client(&first)));
                } else {
                    assert_eq!(owner(&second, tag), Some(by_client(&second)), "NAT: by the client");
                }
                apart += usize::from(by_client(&first) != by_client(&second));
            }
            assert!(apart > 0, "some address pairs hash to different workers by their client");
        }
    }
}
