//! The `upf_tables` fuzz target's body over the committed PFCP corpus (the seeds scapy
//! encoded and what earlier campaigns grew): no input panics the session → tables
//! compiler or breaks its invariants (`upf::fuzz`).

#[test]
fn pfcp_corpus_through_the_tables_compiler() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/pfcp");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        upf::fuzz::session_tables(&std::fs::read(&p).unwrap());
        n += 1;
    }
    assert!(n > 100, "the corpus is there: {n} inputs in {}", dir.display());
}
