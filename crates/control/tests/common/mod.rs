//! What the tests of the nodes that run their vectors share: committed fuzz seeds as
//! frames, a node family's counters, and the check that a vector decided in one loop
//! goes where the same vector traced (a `process` call a packet) goes.

use control::fuzz::graph::{decode, Harness};
use io::mem::RxFrame;
use std::path::Path;

/// The first frame of a committed fuzz seed (fuzz/make_graph_corpus.py): its port and bytes.
pub fn seed(name: &str) -> (usize, Vec<u8>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/graph").join(name);
    let (port, f) = decode(&std::fs::read(&path).unwrap()).remove(0);
    (port, f.bytes)
}

/// The non-zero counters of the nodes whose names start with `prefix`, sorted.
pub fn counters(h: &Harness, prefix: &str) -> Vec<(String, String, u64)> {
    let mut c: Vec<_> = h
        .worker
        .graph
        .counter_snapshots()
        .into_iter()
        .filter(|c| c.node.starts_with(prefix) && c.count > 0)
        .map(|c| (c.node.to_string(), c.counter.to_string(), c.count))
        .collect();
    c.sort();
    c
}

/// The count of `node`'s `counter` in `c` ([`counters`]), 0 when absent.
pub fn count(c: &[(String, String, u64)], node: &str, counter: &str) -> u64 {
    c.iter().find(|(n, k, _)| n == node && k == counter).map_or(0, |e| e.2)
}

/// `frames` through `untraced` and, every packet traced (so `node` sees them by
/// `process`), through `traced`: the same frames must leave by the same ports, byte
/// for byte, and the counters `view` gives of each must agree.
pub fn traced_and_untraced_agree(
    untraced: &mut Harness,
    traced: &mut Harness,
    frames: Vec<(usize, RxFrame)>,
    node: &str,
    view: impl Fn(&Harness) -> Vec<(String, String, u64)>,
    round: usize,
) {
    traced.worker.graph.trace_add("pg-input", 10_000).unwrap();
    // Compared as sets: packets that take different paths through the graph leave in
    // the order of its nodes (a parcel forwarded whole by `ethernet-input` untraced
    // reaches `interface-output` a node earlier than traced), the order on each path kept.
    let sorted = |mut f: Vec<(usize, io::mem::TxFrame)>| {
        f.sort_by(|x, y| (x.0, &x.1.bytes).cmp(&(y.0, &y.1.bytes)));
        f
    };
    let a = sorted(untraced.frames(frames.clone()));
    let b = sorted(traced.frames(frames));
    assert!(traced.worker.graph.trace_records().iter().any(|t| t.node == node), "round {round}: traced");
    traced.worker.graph.trace_clear();
    assert_eq!(a.len(), b.len(), "round {round}: frames sent");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "round {round}: frame {i}");
    }
    assert_eq!(view(untraced), view(traced), "round {round}");
}
