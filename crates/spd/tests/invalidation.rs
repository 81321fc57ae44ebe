//! The flow cache under policy changes against the uncached answer: random policies
//! added and deleted in two SPDs and both directions, bindings and SA changes, each
//! published (or several at once), interleaved with lookups of keys drawn from a small
//! space so that policies and keys overlap often, through a cache small enough for flows
//! to collide. Every decision the worker's cache gives must be the classifier's for the
//! tables the worker holds: a decision kept across a change (revalidated) included.

use arc_swap::ArcSwap;
use engine::IfIndex;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use spd::policy::{ActionKind, Direction, PolicySpec};
use spd::{FlowKey, SpdContext, SpdId, SpdState};
use std::sync::Arc;

#[derive(Debug, Clone)]
enum Step {
    Add(PolicySpec),
    /// Delete the n-th present policy (modulo their number).
    Del(usize),
    Bind(u16),
    SaChanged,
    Publish,
    /// Look keys of the case's pool up, by index (each twice: the second hits).
    Lookup(Vec<usize>),
}

fn range(base: u32, v: u32, kind: u8) -> String {
    let a = |x: u32| std::net::Ipv4Addr::from(base + x).to_string();
    match kind {
        0 => "any".into(),
        1 => format!("{}/32", a(v)),
        2 => format!("{}/30", a(v & !3)),
        _ => format!("{}-{}", a(v), a(v + 5)),
    }
}

fn ports(p: u16, kind: u8) -> String {
    match kind {
        0 => "any".into(),
        1 => p.to_string(),
        _ => format!("{p}-{}", p + 3),
    }
}

fn spec() -> impl Strategy<Value = PolicySpec> {
    (0u16..2, any::<bool>(), 0u32..4, 0u8..3, (0u32..16, 0u8..4), (0u32..16, 0u8..4), 0u8..3, (0u16..8, 0u8..3), (0u16..8, 0u8..3))
        .prop_map(|(spd, inbound, priority, action, (l, lk), (r, rk), proto, (lp, lpk), (rp, rpk))| PolicySpec {
            spd,
            direction: if inbound { Direction::Inbound } else { Direction::Outbound },
            priority,
            action: [ActionKind::Protect, ActionKind::Bypass, ActionKind::Discard][action as usize],
            sa: (action == 0).then_some(priority),
            local: range(0xc612_0000, l, lk),
            remote: range(0xc613_0000, r, rk),
            protocol: ["any", "udp", "tcp"][proto as usize].into(),
            local_ports: ports(1000 + lp, lpk),
            remote_ports: ports(1000 + rp, rpk),
        })
}

fn key() -> impl Strategy<Value = (u16, bool, FlowKey<u32>)> {
    (0u16..3, any::<bool>(), 0u32..20, 0u32..20, prop_oneof![Just(6u8), Just(17u8)], 0u16..12, 0u16..12).prop_map(
        |(spd, inbound, l, r, proto, lp, rp)| {
            (
                spd,
                inbound,
                FlowKey { local: 0xc612_0000 + l, remote: 0xc613_0000 + r, proto, local_port: 1000 + lp, remote_port: 1000 + rp },
            )
        },
    )
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => spec().prop_map(Step::Add),
        2 => any::<usize>().prop_map(Step::Del),
        // Rarer: they make every cached decision stale.
        1 => (0u16..2).prop_map(Step::Bind),
        1 => Just(Step::SaChanged),
        3 => Just(Step::Publish),
        6 => proptest::collection::vec(any::<usize>(), 1..30).prop_map(Step::Lookup),
    ]
}

/// A case's keys: few, so that later lookups meet the entries of earlier ones.
fn pool() -> impl Strategy<Value = Vec<(u16, bool, FlowKey<u32>)>> {
    proptest::collection::vec(key(), 1..40)
}

fn check(steps: &[Step], pool: &[(u16, bool, FlowKey<u32>)], cache: usize) -> Result<(u64, u64), TestCaseError> {
    let mut state = SpdState::new();
    state.bind(IfIndex(1), 0).unwrap();
    let shared: Arc<ArcSwap<spd::SpdTables>> = state.shared();
    state.publish();
    let mut cx = SpdContext::new(shared, Some(cache)).unwrap();
    cx.refresh();
    let mut present = Vec::new();
    for s in steps {
        match s {
            // Ports with any protocol are refused (and must change nothing).
            Step::Add(p) => present.extend(state.add_policy(p).ok().map(|id| id.0)),
            Step::Del(n) if !present.is_empty() => {
                let id = present.remove(n % present.len());
                state.del_policy(id).unwrap();
            }
            Step::Del(_) => {}
            Step::Bind(spd) => state.bind(IfIndex(2), *spd as u32).unwrap(),
            Step::SaChanged => {
                state.sa_changed();
            }
            Step::Publish => {
                state.publish();
            }
            Step::Lookup(keys) => {
                // The worker takes up what was published only now: it may skip versions.
                cx.refresh();
                for _ in 0..2 {
                    for (spd, inbound, k) in keys.iter().map(|i| &pool[i % pool.len()]) {
                        let want = cx.tables.classify(SpdId(*spd), *inbound, k);
                        let got = cx.decide(SpdId(*spd), *inbound, k);
                        prop_assert_eq!(got, want, "spd {} inbound {} key {:?} version {}", spd, inbound, k, cx.tables.version);
                    }
                }
            }
        }
    }
    let c = cx.flows4.as_ref().unwrap().stats;
    Ok((c.revalidated, c.stale))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn cached_decisions_are_the_classifiers_across_changes(steps in proptest::collection::vec(step(), 1..80), pool in pool()) {
        check(&steps, &pool, 4096)?;
        // And with flows colliding with others.
        check(&steps, &pool, 8)?;
    }
}

/// The property above is not vacuous: a run of the same shape keeps decisions across
/// changes (revalidations) and also finds changed ones (stale entries).
#[test]
fn the_property_sees_both_outcomes() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut revalidated, mut stale) = (0, 0);
    for _ in 0..50 {
        let steps = proptest::collection::vec(step(), 40..80).new_tree(&mut runner).unwrap().current();
        let pool = pool().new_tree(&mut runner).unwrap().current();
        let (r, s) = check(&steps, &pool, 4096).unwrap();
        revalidated += r;
        stale += s;
    }
    assert!(revalidated > 100 && stale > 10, "revalidated {revalidated} stale {stale}");
}
