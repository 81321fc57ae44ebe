//! The `k8s_objects` fuzz target's committed corpus (`fuzz/corpus/k8s_objects`) replayed
//! through its body on the stable toolchain, and the seeds held to what they are for.

use std::path::Path;

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/k8s_objects");
    let mut all: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    all.sort();
    all
}

#[test]
fn k8s_objects_corpus_replays_cleanly() {
    let inputs = corpus();
    assert!(inputs.len() >= 5, "the seeds are there");
    for (name, data) in &inputs {
        let out = k8s::fuzz::run(data);
        // Every seed is a stream of events the body reads.
        if name.starts_with("seed-") {
            assert!(out.events >= 2, "{name}: {out:?}");
        }
    }
}

/// The seeds reach what they were written for: LB services planned from each kind of
/// Service, refusals by name, the health check of an `externalTrafficPolicy: Local`
/// LoadBalancer.
#[test]
fn k8s_objects_seeds_reach_the_mapping() {
    let inputs = corpus();
    let seed = |n: &str| {
        let (_, data) = inputs.iter().find(|(name, _)| name == &format!("seed-{n}")).unwrap_or_else(|| panic!("seed-{n}"));
        k8s::fuzz::run(data)
    };
    let cluster = seed("cluster-ip");
    assert_eq!((cluster.events, cluster.refused), (2, 0));
    assert!(cluster.changes >= 2, "two ports' LB services: {cluster:?}");
    let churn = seed("cluster-ip-churn");
    assert!(churn.changes > cluster.changes, "backends changed and the service deleted: {churn:?}");
    let lb = seed("load-balancer-dual-stack");
    assert_eq!((lb.refused, lb.health_checks), (0, 1), "{lb:?}");
    assert!(lb.changes >= 8, "cluster IPs, an external IP, ingress addresses, node ports of both families: {lb:?}");
    let zoned = seed("topology-hints");
    assert_eq!((zoned.events, zoned.refused), (7, 0));
    // The service (1); its three backends, no zone known yet (3); zone-a: zone-b's one
    // marked of another zone (1); zone-b: one unmarked, one marked (2); an endpoint
    // without hints turns topology off: it added, the marked one unmarked (2); the Node
    // gone, then zone-a again: nothing (0).
    assert_eq!(zoned.changes, 9, "{zoned:?}");
    // Annotated for GUE: the cluster IP of the port whose endpoints listen on it; a bad
    // annotation served with NAT, not refused.
    let direct = seed("direct-server-return");
    assert_eq!((direct.events, direct.refused, direct.direct), (3, 0, 1), "{direct:?}");
    let refused = seed("refused");
    assert_eq!(refused.refused, refused.events, "every object of it refused by name: {refused:?}");
}
