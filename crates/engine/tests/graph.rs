//! The engine with toy nodes: wiring is validated, drops are counted by reason, vectors
//! are capped at VECTOR_SIZE, traces follow packets, and no buffer leaks.

use engine::device::{Device, RxStatus, TxResult};
use engine::worker::{Context, Port, Worker};
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, GraphBuilder, GraphError, IfIndex, Node, Pool, Verdict};

struct Cx;
impl Context for Cx {}

next_nodes! { enum ParityNext { Out = "interface-output" } }
counters! {
    enum ParityCounter {
        Odd(Warn, "odd", "first byte odd"),
        Seen(Info, "seen", "packets seen"),
    }
}

/// Drops packets whose first byte is odd; sends the rest to interface 1.
struct Parity;
impl Node<Cx> for Parity {
    type Next = ParityNext;
    type Counter = ParityCounter;
    fn name(&self) -> &'static str {
        "parity"
    }
    fn process(&mut self, _: &mut Cx, c: &mut Counts<'_, ParityCounter>, b: &mut Buffer) -> Verdict<ParityNext, ParityCounter> {
        c.inc(ParityCounter::Seen);
        match b.bytes().first() {
            Some(x) if x % 2 == 0 => {
                b.meta.tx_if = IfIndex(1);
                Verdict::Next(ParityNext::Out)
            }
            _ => Verdict::Drop(ParityCounter::Odd),
        }
    }
}

next_nodes! { enum BadNext { Nowhere = "no-such-node" } }
struct Bad;
impl Node<Cx> for Bad {
    type Next = BadNext;
    type Counter = ParityCounter;
    fn name(&self) -> &'static str {
        "bad"
    }
    fn process(&mut self, _: &mut Cx, _: &mut Counts<'_, ParityCounter>, _: &mut Buffer) -> Verdict<BadNext, ParityCounter> {
        Verdict::Next(BadNext::Nowhere)
    }
}

/// Sends `total` one-byte packets 0, 1, 2, … then is exhausted.
struct Counter {
    sent: u32,
    total: u32,
}
impl Device for Counter {
    fn kind(&self) -> &'static str {
        "test"
    }
    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus {
        for _ in 0..max {
            if self.sent == self.total {
                return RxStatus::Exhausted;
            }
            let Some(b) = pool.alloc(1) else { break };
            pool.get_mut(b).write(&[self.sent as u8]).unwrap();
            out.push(b);
            self.sent += 1;
        }
        RxStatus::Open
    }
    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let n = bufs.len();
        pool.free_many(bufs);
        bufs.clear();
        TxResult { sent: n, sent_bytes: n, failed: 0 }
    }
}

struct Sink(std::sync::Arc<std::sync::atomic::AtomicUsize>);
impl Device for Sink {
    fn kind(&self) -> &'static str {
        "sink"
    }
    fn has_rx(&self) -> bool {
        false
    }
    fn rx(&mut self, _: &mut Pool, _: &mut Vec<BufIdx>, _: usize) -> RxStatus {
        RxStatus::Exhausted
    }
    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        self.0.fetch_add(bufs.len(), std::sync::atomic::Ordering::Relaxed);
        let n = bufs.len();
        pool.free_many(bufs);
        bufs.clear();
        TxResult { sent: n, sent_bytes: n, failed: 0 }
    }
}

#[test]
fn unknown_next_fails_at_build() {
    let mut g = GraphBuilder::<Cx>::new();
    g.add(Bad);
    match g.build() {
        Err(GraphError::UnknownNext { from, to }) => {
            assert_eq!(from, "bad");
            assert_eq!(to, "no-such-node");
        }
        _ => panic!("expected UnknownNext"),
    }
    let mut g = GraphBuilder::<Cx>::new();
    g.add(Parity);
    g.add(Parity);
    assert!(matches!(g.build(), Err(GraphError::DuplicateName(_))));
}

fn worker(total: u32) -> (Worker<Cx>, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    worker_with(total, "parity", |_| {})
}

/// A worker whose `total` counted packets (bytes 0, 1, …) go from `test-input` to the
/// node `first` of a graph of `parity` and what `add` puts in, and the packets its sink
/// (the even ones' interface) received.
fn worker_with(
    total: u32,
    first: &str,
    add: impl FnOnce(&mut GraphBuilder<Cx>),
) -> (Worker<Cx>, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let mut g = GraphBuilder::<Cx>::new();
    g.add(Parity);
    add(&mut g);
    let input = g.add_input("test-input", first);
    let graph = g.build().unwrap();
    let sunk = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ports = vec![
        Port::new(IfIndex(0), "src0".into(), Box::new(Counter { sent: 0, total }), Some(input)),
        Port::new(IfIndex(1), "sink0".into(), Box::new(Sink(sunk.clone())), None),
    ];
    (Worker::new(0, graph, Pool::new(1024, 1), ports, Cx), sunk)
}

#[test]
fn drops_are_counted_and_nothing_leaks() {
    let (mut w, sunk) = worker(1001);
    while !w.inputs_done() {
        w.poll_once();
    }
    w.poll_once();
    assert_eq!(w.pool.in_use(), 0, "every buffer returned to the pool");
    assert_eq!(sunk.load(std::sync::atomic::Ordering::Relaxed), 501);
    let snap = w.snapshot();
    let odd = snap.counters.iter().find(|c| c.node == "parity" && c.counter == "odd").unwrap();
    assert_eq!(odd.count, 500);
    let seen = snap.counters.iter().find(|c| c.counter == "seen").unwrap();
    assert_eq!(seen.count, 1001);
    let parity = snap.nodes.iter().find(|n| n.name == "parity").unwrap();
    assert_eq!(parity.runtime.packets, 1001);
    // 1001 packets in vectors of at most 256: at least 4 dispatches.
    assert!(parity.runtime.vectors >= 4);
    let drop = snap.nodes.iter().find(|n| n.name == "error-drop").unwrap();
    assert_eq!(drop.runtime.packets, 500);
    assert_eq!(snap.ports[0].counters.rx_packets, 1001);
    assert_eq!(snap.ports[1].counters.tx_packets, 501);
}

#[test]
fn trace_follows_the_next_n_packets() {
    let (mut w, _) = worker(10);
    assert!(w.graph.trace_add("parity", 3).is_err(), "only inputs can be traced");
    w.graph.trace_add("test-input", 3).unwrap();
    while !w.inputs_done() {
        w.poll_once();
    }
    let recs = w.graph.trace_records();
    let packets: std::collections::BTreeSet<u32> = recs.iter().map(|r| r.packet).collect();
    assert_eq!(packets.len(), 3);
    // Packet 2 carried byte 1: odd, dropped with its reason.
    let p2: Vec<_> = recs.iter().filter(|r| r.packet == 2).collect();
    assert!(p2.iter().any(|r| r.node == "parity" && r.verdict == "drop: odd"), "{p2:?}");
    assert!(p2.iter().any(|r| r.node == "error-drop" && r.text == "parity: odd"));
    let p1: Vec<_> = recs.iter().filter(|r| r.packet == 1).collect();
    assert!(p1.iter().any(|r| r.node == "parity" && r.verdict == "interface-output"));
}

next_nodes! { enum TripleNext { Parity = "parity" } }
counters! {
    enum TripleCounter {
        Refused(Warn, "refused", "first byte a multiple of 5"),
    }
}

/// Turns each packet into three copies (bytes b, b+2, b+4), keeping the input as the
/// first; refuses packets whose byte is a multiple of 5 (after pushing one copy).
struct Triple;
impl engine::ExpandNode<Cx> for Triple {
    type Next = TripleNext;
    type Counter = TripleCounter;
    fn name(&self) -> &'static str {
        "triple"
    }
    fn expand(
        &mut self,
        _: &mut Cx,
        _: &mut Counts<'_, TripleCounter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, TripleNext)>,
    ) -> Result<(), TripleCounter> {
        let v = pool.get(bi).bytes()[0];
        let c = pool.alloc(1).expect("buffers");
        pool.get_mut(c).write(&[v.wrapping_add(2)]).unwrap();
        out.push((c, TripleNext::Parity));
        if v % 5 == 0 {
            return Err(TripleCounter::Refused);
        }
        let d = pool.alloc(1).expect("buffers");
        pool.get_mut(d).write(&[v.wrapping_add(4)]).unwrap();
        out.push((d, TripleNext::Parity));
        out.push((bi, TripleNext::Parity));
        Ok(())
    }
}

#[test]
fn an_expanding_node_multiplies_packets_without_leaks() {
    let (mut w, sunk) = worker_with(100, "triple", |g| {
        g.add_expand(Triple);
    });
    while !w.inputs_done() {
        w.poll_once();
    }
    w.poll_once();
    assert_eq!(w.pool.in_use(), 0, "inputs reused or freed, refused ones dropped");
    let snap = w.snapshot();
    let refused = snap.counters.iter().find(|c| c.counter == "refused").unwrap();
    assert_eq!(refused.count, 20, "0, 5, 10, … 95");
    // 80 packets × 3 + 20 × 1 reach parity; all copies share their input's parity.
    let parity = snap.nodes.iter().find(|n| n.name == "parity").unwrap();
    assert_eq!(parity.runtime.packets, 80 * 3 + 20);
    // Even inputs: 40 × 3 (those not multiples of 5: 40) + even multiples of 5 (10) × 1.
    assert_eq!(sunk.load(std::sync::atomic::Ordering::Relaxed), 40 * 3 + 10);
}

counters! {
    enum FoursCounter {
        Refused(Warn, "refused", "a group whose number leaves 2 divided by 3"),
        MidRun(Error, "mid-run", "called on a packet inside a run it had taken"),
    }
}

/// Takes the packets 4g … 4g+3 (bytes) in one call, as a joining node takes a run:
/// group g ≡ 0 (mod 3) becomes one new packet (byte 2g; for even g a chained one, its
/// extents the group's four bytes, holding their buffers as `parcel4-join`'s parcels
/// do), g ≡ 1 goes on as its last packet (its byte made 0), g ≡ 2 is refused after
/// pushing nothing.
struct Fours;
impl engine::ExpandNode<Cx> for Fours {
    type Next = TripleNext;
    type Counter = FoursCounter;
    const TAKES_RUNS: bool = true;
    fn name(&self) -> &'static str {
        "fours"
    }
    fn expand(
        &mut self,
        cx: &mut Cx,
        c: &mut Counts<'_, FoursCounter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, TripleNext)>,
    ) -> Result<(), FoursCounter> {
        self.expand_run(cx, c, pool, &[bi], out).1.map(|_| ())
    }
    fn expand_run(
        &mut self,
        _: &mut Cx,
        c: &mut Counts<'_, FoursCounter>,
        pool: &mut Pool,
        input: &[BufIdx],
        out: &mut Vec<(BufIdx, TripleNext)>,
    ) -> (usize, Result<engine::Taken, FoursCounter>) {
        let first = pool.get(input[0]).bytes()[0];
        if first % 4 != 0 {
            c.inc(FoursCounter::MidRun);
        }
        let g = first / 4;
        let n = input.iter().take_while(|&&b| pool.get(b).bytes()[0] / 4 == g).count();
        match g % 3 {
            0 => {
                let d = pool.alloc(1).expect("buffers");
                pool.get_mut(d).write(&[2 * g]).unwrap();
                out.push((d, TripleNext::Parity));
                if g.is_multiple_of(2) {
                    pool.push_extents_taking(d, &input[..n], 0..1).unwrap();
                    return (n, Ok(engine::Taken::Held));
                }
            }
            1 => {
                let last = input[n - 1];
                pool.get_mut(last).write(&[0]).unwrap();
                out.push((last, TripleNext::Parity));
            }
            _ => return (n, Err(FoursCounter::Refused)),
        }
        (n, Ok(engine::Taken::Free))
    }
}

#[test]
fn an_expanding_node_takes_runs_whose_packets_are_freed_dropped_or_reused() {
    let (mut w, sunk) = worker_with(100, "fours", |g| {
        g.add_expand(Fours);
    });
    w.graph.trace_add("test-input", 6).unwrap();
    drain(&mut w);
    assert_eq!(w.pool.in_use(), 0, "taken packets freed once, reused ones sent, refused ones dropped");
    assert_eq!(count(&w, "fours", "mid-run"), 0, "each call starts a group: the dispatcher moved past what was taken");
    // Groups 2, 5, … 23 refused: 8 × 4 packets, each dropped under the counter.
    assert_eq!(count(&w, "fours", "refused"), 32);
    // Groups 0, 3, … 24 (9) as new packets and 1, 4, … 22 (8) as their last packet.
    assert_eq!(sunk.load(std::sync::atomic::Ordering::Relaxed), 17);
    let recs: Vec<_> = w.graph.trace_records().iter().filter(|r| r.node == "fours").collect();
    assert_eq!(recs.len(), 6, "every traced packet of a run has its record: {recs:?}");
    assert!(recs.iter().all(|r| r.verdict == "1 packets out of 4 taken"), "{recs:?}");
}

fn count(w: &Worker<Cx>, node: &str, counter: &str) -> u64 {
    w.snapshot().counters.iter().find(|c| c.node == node && c.counter == counter).map_or(0, |c| c.count)
}

/// Run until every receiving port is exhausted and the graph drained.
fn drain(w: &mut Worker<Cx>) {
    while !w.inputs_done() {
        w.poll_once();
    }
    w.poll_once();
}

#[test]
fn ports_come_and_go_between_vectors() {
    let mut g = GraphBuilder::<Cx>::new();
    g.add(Parity);
    g.add_input("test-input", "parity");
    let graph = g.build().unwrap();
    let input = graph.node_id("test-input").unwrap();
    let ports = vec![Port::new(IfIndex(0), "src0".into(), Box::new(Counter { sent: 0, total: 100 }), Some(input))];
    let mut w = Worker::new(0, graph, Pool::new(1024, 1), ports, Cx);
    // No interface 1 yet: the 50 even packets have nowhere to go.
    drain(&mut w);
    assert_eq!(count(&w, "interface-output", "no-device"), 50);

    // Interface 1 appears: a second source (interface 2) is now sent there.
    let sunk = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    w.add_port(IfIndex(1), "sink0".into(), Box::new(Sink(sunk.clone())), None).unwrap();
    w.add_port(IfIndex(2), "src1".into(), Box::new(Counter { sent: 0, total: 100 }), Some("test-input")).unwrap();
    drain(&mut w);
    assert_eq!(sunk.load(std::sync::atomic::Ordering::Relaxed), 50);
    assert_eq!(count(&w, "interface-output", "no-device"), 50, "nothing more lost");
    let snap = w.snapshot();
    let names: Vec<&str> = snap.ports.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["src0", "sink0", "src1"]);
    assert_eq!(snap.ports[2].counters.rx_packets, 100);

    // Indices in use, unknown inputs and unknown ports are refused, changing nothing.
    assert!(w.add_port(IfIndex(1), "again".into(), Box::new(Sink(sunk.clone())), None).is_err());
    assert!(w.add_port(IfIndex(3), "x".into(), Box::new(Sink(sunk.clone())), Some("no-such-input")).is_err());
    assert!(w.remove_port(IfIndex(7)).is_err());
    assert_eq!(w.ports.len(), 3);

    // Interface 1 goes: later packets for it are dropped by name, and no buffer leaks.
    w.remove_port(IfIndex(1)).unwrap();
    w.add_port(IfIndex(3), "src2".into(), Box::new(Counter { sent: 0, total: 100 }), Some("test-input")).unwrap();
    drain(&mut w);
    assert_eq!(sunk.load(std::sync::atomic::Ordering::Relaxed), 50);
    assert_eq!(count(&w, "interface-output", "no-device"), 100);
    assert_eq!(w.pool.in_use(), 0, "every buffer returned to the pool");
    let names: Vec<String> = w.snapshot().ports.iter().map(|p| p.name.clone()).collect();
    assert_eq!(names, ["src0", "src1", "src2"]);
}

/// A port pointed at another input between vectors (a reload moving the punt link): what
/// it receives from then on enters there, its device and counters as they were; a
/// transmit-only port, or one this worker lacks, is left alone; an unknown input is
/// refused, changing nothing.
#[test]
fn a_port_is_pointed_at_another_input_between_vectors() {
    let mut g = GraphBuilder::<Cx>::new();
    g.add(Parity);
    g.add_input("test-input", "parity");
    g.add_input("punt-input", "parity");
    let graph = g.build().unwrap();
    let input = graph.node_id("test-input").unwrap();
    let sunk = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ports = vec![
        Port::new(IfIndex(0), "src0".into(), Box::new(Counter { sent: 0, total: 100 }), Some(input)),
        Port::new(IfIndex(1), "sink0".into(), Box::new(Sink(sunk.clone())), None),
    ];
    let mut w = Worker::new(0, graph, Pool::new(1024, 1), ports, Cx);
    assert_eq!(w.set_port_input(IfIndex(0), "punt-input"), Ok(true));
    assert!(w.set_port_input(IfIndex(0), "no-such-input").is_err());
    assert_eq!(w.set_port_input(IfIndex(1), "punt-input"), Ok(false), "transmit-only");
    assert_eq!(w.set_port_input(IfIndex(5), "punt-input"), Ok(false), "no such port here");
    drain(&mut w);
    let snap = w.snapshot();
    let packets = |name: &str| snap.nodes.iter().find(|n| n.name == name).map_or(0, |n| n.runtime.packets);
    assert_eq!((packets("test-input"), packets("punt-input")), (0, 100));
    assert_eq!(sunk.load(std::sync::atomic::Ordering::Relaxed), 50, "the even half sent on as before");
    assert_eq!(snap.ports[0].counters.rx_packets, 100);
}

next_nodes! { enum SplitNext { A = "rec-a", B = "rec-b", C = "rec-c" } }
counters! { enum RecCounter { Done(Info, "done", "packets recorded") } }

/// Sends a packet to `rec-a`, `rec-b` or `rec-c` by its first byte's top two bits.
struct Split;
impl Node<Cx> for Split {
    type Next = SplitNext;
    type Counter = RecCounter;
    fn name(&self) -> &'static str {
        "split"
    }
    fn process(&mut self, _: &mut Cx, _: &mut Counts<'_, RecCounter>, b: &mut Buffer) -> Verdict<SplitNext, RecCounter> {
        match b.bytes()[0] >> 6 {
            0 => Verdict::Next(SplitNext::A),
            1 => Verdict::Next(SplitNext::B),
            2 => Verdict::Next(SplitNext::C),
            _ => Verdict::Drop(RecCounter::Done),
        }
    }
}

type Log = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, u16)>>>;

/// Logs each packet's name tag and sequence number (bytes 1..3), then drops it.
struct Recorder(&'static str, Log);
impl Node<Cx> for Recorder {
    type Next = ParityNext;
    type Counter = RecCounter;
    fn name(&self) -> &'static str {
        self.0
    }
    fn process(&mut self, _: &mut Cx, _: &mut Counts<'_, RecCounter>, b: &mut Buffer) -> Verdict<ParityNext, RecCounter> {
        self.1.lock().unwrap().push((self.0, u16::from_be_bytes([b.bytes()[1], b.bytes()[2]])));
        Verdict::Drop(RecCounter::Done)
    }
}

/// `Split` as a node that runs its vectors (`Node::RUNS_VECTORS`) through the default
/// `run_vector`: its packets go through `Enqueue`, not the dispatcher's own loop.
struct SplitByVector;
impl Node<Cx> for SplitByVector {
    type Next = SplitNext;
    type Counter = RecCounter;
    const RUNS_VECTORS: bool = true;
    fn name(&self) -> &'static str {
        "split"
    }
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, RecCounter>, b: &mut Buffer) -> Verdict<SplitNext, RecCounter> {
        Split.process(cx, counts, b)
    }
}

#[test]
fn speculative_enqueue_keeps_every_packet_in_order_as_the_mix_changes() {
    speculative_enqueue_in_order(Split);
    speculative_enqueue_in_order(SplitByVector);
}

fn speculative_enqueue_in_order<N: Node<Cx, Next = SplitNext, Counter = RecCounter>>(split: N) {
    let log = Log::default();
    let mut g = GraphBuilder::<Cx>::new();
    g.add(split);
    for name in ["rec-a", "rec-b", "rec-c"] {
        g.add(Recorder(name, log.clone()));
    }
    let input = g.add_input("src", "split");
    let mut graph = g.build().unwrap();
    let mut pool = Pool::new(1024, 0);
    // Vectors of one kind, then mixed, then of another kind, with drops among them: the
    // speculated next node is right, then wrong, then changes.
    let kinds: Vec<u8> = (0..256u32)
        .map(|_| 0)
        .chain((0..256u32).map(|i| (i % 4) as u8))
        .chain((0..256u32).map(|i| if i % 50 == 7 { 2 } else { 1 }))
        .chain((0..256u32).map(|i| if i % 3 == 0 { 0 } else { 1 }))
        .collect();
    let mut sent: Vec<(&'static str, u16)> = Vec::new();
    for (v, chunk) in kinds.chunks(256).enumerate() {
        let mut bufs = Vec::new();
        for (i, &k) in chunk.iter().enumerate() {
            let seq = (v * 256 + i) as u16;
            let b = pool.alloc(3).unwrap();
            pool.get_mut(b).write(&[k << 6, (seq >> 8) as u8, seq as u8]).unwrap();
            bufs.push(b);
            if k < 3 {
                sent.push((["rec-a", "rec-b", "rec-c"][k as usize], seq));
            }
        }
        graph.inject(input, &mut pool, &bufs, 0);
        graph.run(&mut Cx, &mut pool);
    }
    let got = log.lock().unwrap().clone();
    for name in ["rec-a", "rec-b", "rec-c"] {
        let want: Vec<u16> = sent.iter().filter(|s| s.0 == name).map(|s| s.1).collect();
        let have: Vec<u16> = got.iter().filter(|s| s.0 == name).map(|s| s.1).collect();
        assert_eq!(have, want, "{name} got its packets in arrival order, each once");
    }
    assert_eq!(pool.in_use(), 0);
}

/// `Split`'s name and next nodes in a second form that sends every packet to `rec-b`.
struct AllToB;
impl Node<Cx> for AllToB {
    type Next = SplitNext;
    type Counter = RecCounter;
    fn name(&self) -> &'static str {
        "split"
    }
    fn process(&mut self, _: &mut Cx, _: &mut Counts<'_, RecCounter>, _: &mut Buffer) -> Verdict<SplitNext, RecCounter> {
        Verdict::Next(SplitNext::B)
    }
}

static USE_SPLIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

#[test]
fn a_node_in_two_forms_runs_the_one_chosen_for_each_vector() {
    let add = |g: &mut GraphBuilder<Cx>| {
        g.add_either(Split, AllToB, |_| USE_SPLIT.load(std::sync::atomic::Ordering::Relaxed));
    };
    second_of_three_vectors_takes_the_second_form(add, |v, _| {
        USE_SPLIT.store(v != 1, std::sync::atomic::Ordering::Relaxed);
        3
    });
}

/// `add_either_by_vector`: the chooser sees each vector's packets (here: a vector with
/// a packet longer than 3 bytes takes `AllToB`), and the whole vector takes one form.
#[test]
fn a_node_in_two_forms_runs_the_one_its_vector_chooses() {
    fn short_only(_: &mut Cx, bufs: &[Buffer], input: &[BufIdx]) -> bool {
        input.iter().all(|&bi| bufs[bi.get()].len() <= 3)
    }
    let add = |g: &mut GraphBuilder<Cx>| {
        g.add_either_by_vector(Split, AllToB, short_only);
    };
    second_of_three_vectors_takes_the_second_form(add, |v, i| if (v, i) == (1, 2) { 5 } else { 3 });
}

/// `add` puts `Split` and `AllToB` in as one node's two forms; three vectors of four
/// packets, each packet `len(vector, i)` bytes long (also where a test switches the form),
/// all saying rec-a: the first and last vector reach rec-a, the second rec-b.
fn second_of_three_vectors_takes_the_second_form(add: impl FnOnce(&mut GraphBuilder<Cx>), len: impl Fn(usize, u16) -> usize) {
    let log = Log::default();
    let mut g = GraphBuilder::<Cx>::new();
    add(&mut g);
    for name in ["rec-a", "rec-b", "rec-c"] {
        g.add(Recorder(name, log.clone()));
    }
    let input = g.add_input("src", "split");
    let mut graph = g.build().unwrap();
    let mut pool = Pool::new(64, 0);
    for v in 0..3 {
        let bufs: Vec<BufIdx> = (0..4u16)
            .map(|i| {
                let seq = v as u16 * 4 + i;
                let mut bytes = vec![0, (seq >> 8) as u8, seq as u8];
                bytes.resize(len(v, i), 0);
                let b = pool.alloc(bytes.len()).unwrap();
                pool.get_mut(b).write(&bytes).unwrap();
                b
            })
            .collect();
        graph.inject(input, &mut pool, &bufs, 0);
        graph.run(&mut Cx, &mut pool);
    }
    let got = log.lock().unwrap().clone();
    let to = |name: &str| -> Vec<u16> { got.iter().filter(|s| s.0 == name).map(|s| s.1).collect() };
    assert_eq!(to("rec-a"), [0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(to("rec-b"), [4, 5, 6, 7]);
    assert_eq!(pool.in_use(), 0);
}

#[test]
#[should_panic(expected = "one name")]
fn the_two_forms_of_a_node_share_its_name() {
    GraphBuilder::<Cx>::new().add_either(Split, Parity2, |_| true);
}

/// A node named otherwise, with `Split`'s next nodes and counters.
struct Parity2;
impl Node<Cx> for Parity2 {
    type Next = SplitNext;
    type Counter = RecCounter;
    fn name(&self) -> &'static str {
        "other"
    }
    fn process(&mut self, _: &mut Cx, _: &mut Counts<'_, RecCounter>, _: &mut Buffer) -> Verdict<SplitNext, RecCounter> {
        Verdict::Next(SplitNext::A)
    }
}

// Chained packets: a head buffer and an extent in another buffer (`Pool::attach`).

type Seen = std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

next_nodes! { enum ChainNext { Taker = "taker", Looker = "looker" } }
counters! { enum ChainCounter { NoBuffer(Error, "no-buffer", "out of buffers"), Dropped(Warn, "dropped", "every fifth packet's second piece") } }

/// For packet x (one byte): a 100-byte buffer of x, x+1, …, and three chained packets
/// [x, k] + its bytes 30k..30k+30 (k = 0 to the non-taker `looker`, 1 and 2 to `taker`;
/// k = 2 in three extents); the 100-byte buffer freed at once (its extents hold it).
struct Chainer;
impl engine::ExpandNode<Cx> for Chainer {
    type Next = ChainNext;
    type Counter = ChainCounter;
    fn name(&self) -> &'static str {
        "chainer"
    }
    fn expand(
        &mut self,
        _: &mut Cx,
        _: &mut Counts<'_, ChainCounter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, ChainNext)>,
    ) -> Result<(), ChainCounter> {
        let x = pool.get(bi).bytes()[0];
        let src = pool.alloc(100).ok_or(ChainCounter::NoBuffer)?;
        let body: Vec<u8> = (0..100).map(|j| x.wrapping_add(j)).collect();
        pool.get_mut(src).write(&body).unwrap();
        for k in 0..3u8 {
            let Some(h) = pool.alloc(32) else {
                pool.free(src);
                return Err(ChainCounter::NoBuffer);
            };
            pool.get_mut(h).write(&[x, k]).unwrap();
            let at = 30 * k as usize;
            if k == 2 {
                // A head of several extents (as `parcel4-join` makes): the same bytes in
                // three pieces.
                for piece in [at..at + 7, at + 7..at + 8, at + 8..at + 30] {
                    pool.push_extent(h, src, piece).unwrap();
                }
            } else {
                pool.attach(h, src, at..at + 30).unwrap();
            }
            out.push((h, if k == 0 { ChainNext::Looker } else { ChainNext::Taker }));
        }
        pool.free(src);
        Ok(())
    }
}

/// The whole packet `chainer` made for head [x, k].
fn chained_whole(x: u8, k: u8) -> Vec<u8> {
    let mut v = vec![x, k];
    v.extend((0..30).map(|j| x.wrapping_add(30 * k + j)));
    v
}

next_nodes! { enum ToOutput { Out = "interface-output" } }

/// Takes chains: records the bytes it sees (the head only), drops every fifth packet's
/// piece 1, sends even packets to the sink that does not gather, odd ones to the one
/// that does.
struct Taker(Seen);
impl Node<Cx> for Taker {
    type Next = ToOutput;
    type Counter = ChainCounter;
    const TAKES_CHAINS: bool = true;
    fn name(&self) -> &'static str {
        "taker"
    }
    fn process(&mut self, _: &mut Cx, _: &mut Counts<'_, ChainCounter>, b: &mut Buffer) -> Verdict<ToOutput, ChainCounter> {
        self.0.lock().unwrap().push(b.bytes().to_vec());
        let (x, k) = (b.bytes()[0], b.bytes()[1]);
        if k == 1 && x % 5 == 0 {
            return Verdict::Drop(ChainCounter::Dropped);
        }
        b.meta.tx_if = IfIndex(if x % 2 == 0 { 1 } else { 2 });
        Verdict::Next(ToOutput::Out)
    }
}

/// Does not take chains: records what it sees, to the sink that does not gather.
struct Looker(Seen);
impl Node<Cx> for Looker {
    type Next = ToOutput;
    type Counter = ChainCounter;
    fn name(&self) -> &'static str {
        "looker"
    }
    fn process(&mut self, _: &mut Cx, _: &mut Counts<'_, ChainCounter>, b: &mut Buffer) -> Verdict<ToOutput, ChainCounter> {
        self.0.lock().unwrap().push(b.bytes().to_vec());
        b.meta.tx_if = IfIndex(1);
        Verdict::Next(ToOutput::Out)
    }
}

/// A transmit device that records each packet as its head's bytes and its extent's
/// (`gather`: it takes chains) or as the one buffer it must be.
struct ChainRecorder {
    gather: bool,
    seen: Seen,
    chained: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}
impl Device for ChainRecorder {
    fn kind(&self) -> &'static str {
        "recorder"
    }
    fn has_rx(&self) -> bool {
        false
    }
    fn rx(&mut self, _: &mut Pool, _: &mut Vec<BufIdx>, _: usize) -> RxStatus {
        RxStatus::Exhausted
    }
    fn takes_chains(&self) -> bool {
        self.gather
    }
    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        for &b in bufs.iter() {
            if pool.extent_len(b) != 0 {
                self.chained.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            self.seen.lock().unwrap().push([pool.get(b).bytes(), &pool.extent_bytes(b)].concat());
        }
        let n = bufs.len();
        pool.free_many(bufs);
        bufs.clear();
        TxResult { sent: n, sent_bytes: n, failed: 0 }
    }
}

struct Capture(Seen);
impl engine::device::FrameSink for Capture {
    fn record(&mut self, frame: &[u8]) -> bool {
        self.0.lock().unwrap().push(frame.to_vec());
        true
    }
}

struct ChainRig {
    w: Worker<Cx>,
    taker: Seen,
    looker: Seen,
    plain: Seen,
    plain_chained: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    gather: Seen,
    gather_chained: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

fn chain_rig(total: u32) -> ChainRig {
    let seen = || Seen::default();
    let (taker, looker, plain, gather) = (seen(), seen(), seen(), seen());
    let (plain_chained, gather_chained) = (Default::default(), std::sync::Arc::<std::sync::atomic::AtomicUsize>::default());
    let mut g = GraphBuilder::<Cx>::new();
    g.add_expand(Chainer);
    g.add(Taker(taker.clone()));
    g.add(Looker(looker.clone()));
    let input = g.add_input("test-input", "chainer");
    let ports = vec![
        Port::new(IfIndex(0), "src0".into(), Box::new(Counter { sent: 0, total }), Some(input)),
        Port::new(
            IfIndex(1),
            "plain0".into(),
            Box::new(ChainRecorder { gather: false, seen: plain.clone(), chained: std::sync::Arc::clone(&plain_chained) }),
            None,
        ),
        Port::new(
            IfIndex(2),
            "gather0".into(),
            Box::new(ChainRecorder { gather: true, seen: gather.clone(), chained: gather_chained.clone() }),
            None,
        ),
    ];
    // A vector's 256 packets hold 5 buffers each at the most.
    let w = Worker::new(0, g.build().unwrap(), Pool::new(2048, 1), ports, Cx);
    ChainRig { w, taker, looker, plain, plain_chained, gather, gather_chained }
}

#[test]
fn chained_packets_reach_only_nodes_and_devices_that_take_them() {
    let total = 300u32;
    let mut r = chain_rig(total);
    drain(&mut r.w);
    assert_eq!(r.w.pool.stats().alloc_failures, 0);
    assert_eq!(r.w.pool.in_use(), 0, "every head and every shared buffer back, once");
    assert!(!r.w.pool.has_chains());
    assert_eq!(r.w.pool.stats().chain_copy_failures, 0);
    let xs = || (0..total).map(|x| x as u8);
    // The taker saw heads alone; the looker whole packets.
    let taker = r.taker.lock().unwrap().clone();
    assert_eq!(taker.len(), 2 * total as usize);
    assert!(taker.iter().all(|h| h.len() == 2), "the taker got the chains as they are");
    let looker = r.looker.lock().unwrap().clone();
    assert_eq!(looker, xs().map(|x| chained_whole(x, 0)).collect::<Vec<_>>(), "made whole for the node that does not take chains");
    // The device that does not gather got one buffer a packet, the one that does the
    // chains; both sent the whole packets.
    let dropped = xs().filter(|x| x % 5 == 0 && x % 2 == 1).count();
    let plain = r.plain.lock().unwrap().clone();
    let gather = r.gather.lock().unwrap().clone();
    assert_eq!(r.plain_chained.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(r.gather_chained.load(std::sync::atomic::Ordering::Relaxed), gather.len());
    assert_eq!(gather.len(), 2 * (total as usize / 2) - dropped);
    for p in plain.iter().chain(&gather) {
        assert_eq!(p, &chained_whole(p[0], p[1]));
    }
    assert_eq!(count(&r.w, "taker", "dropped"), xs().filter(|x| x % 5 == 0).count() as u64);
}

#[test]
fn chained_packets_go_whole_to_captures_and_traces() {
    // A trace is decided a vector: the first (traced) vector's packets are made whole
    // before every node, the second's (300 - 256, none traced) are not.
    let mut r = chain_rig(300);
    let frames = Seen::default();
    r.w.ports[2].capture = Some(Box::new(Capture(frames.clone())));
    r.w.graph.trace_add("test-input", 4).unwrap();
    drain(&mut r.w);
    assert_eq!(r.w.pool.in_use(), 0);
    // Traced packets' pieces reach the taker whole (a trace reads the packet).
    let taker = r.taker.lock().unwrap().clone();
    assert!(taker[..2 * 256].iter().all(|h| h.len() == 32) && taker[2 * 256..].iter().all(|h| h.len() == 2));
    assert_eq!(r.gather_chained.load(std::sync::atomic::Ordering::Relaxed), 0, "a captured port gets them whole");
    let frames = frames.lock().unwrap().clone();
    assert!(!frames.is_empty());
    assert!(frames.iter().all(|f| f == &chained_whole(f[0], f[1])));
}

/// A capture of drops in memory: (bytes, link, reason) a record, until `room` is used.
struct Drops {
    got: std::sync::Arc<std::sync::Mutex<Vec<(Vec<u8>, engine::device::DroppedAs, String)>>>,
    room: usize,
}
impl engine::device::DropSink for Drops {
    fn record(&mut self, packet: &[u8], link: engine::device::DroppedAs, reason: &str) -> bool {
        let mut g = self.got.lock().unwrap();
        g.push((packet.to_vec(), link, reason.to_string()));
        g.len() < self.room
    }
}

type Captured = std::sync::Arc<std::sync::Mutex<Vec<(Vec<u8>, engine::device::DroppedAs, String)>>>;

fn capture_drops(w: &mut Worker<Cx>, room: usize, filter: engine::DropFilter) -> Result<Captured, GraphError> {
    let got = Captured::default();
    w.graph.set_drop_capture(Some(Box::new(Drops { got: got.clone(), room })), &filter)?;
    Ok(got)
}

#[test]
fn dropped_packets_are_captured_with_their_reasons_until_the_sink_is_done() {
    use engine::device::DroppedAs;
    let (mut w, _) = worker(20);
    let got = capture_drops(&mut w, 4, engine::DropFilter::default()).unwrap();
    assert!(w.graph.capturing_drops());
    drain(&mut w);
    // The odd packets 1, 3, 5, 7, then the sink was done and the capture ended.
    let got = got.lock().unwrap();
    assert_eq!(got.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), vec![vec![1], vec![3], vec![5], vec![7]]);
    assert!(got.iter().all(|r| r.1 == DroppedAs::Ip && r.2 == "parity: odd, received on src0"), "{got:?}");
    assert!(!w.graph.capturing_drops());
    assert_eq!(w.pool.in_use(), 0);
}

#[test]
fn a_drop_capture_takes_the_node_and_counter_it_names() {
    let filter = |node: Option<&str>, counter: Option<&str>| engine::DropFilter {
        node: node.map(str::to_string),
        counter: counter.map(str::to_string),
    };
    for (f, want) in [(filter(Some("parity"), None), 10), (filter(None, Some("odd")), 10), (filter(Some("parity"), Some("odd")), 10)] {
        let (mut w, _) = worker(20);
        let got = capture_drops(&mut w, usize::MAX, f.clone()).unwrap();
        drain(&mut w);
        assert_eq!(got.lock().unwrap().len(), want, "{f:?}");
    }
    // A counter the node lacks (`seen` is not a drop, but it is the node's: taken, and
    // never matches), a node or counter the graph lacks: refused by name.
    let (mut w, _) = worker(20);
    let got = capture_drops(&mut w, usize::MAX, filter(Some("parity"), Some("seen"))).unwrap();
    drain(&mut w);
    assert!(got.lock().unwrap().is_empty());
    let (mut w, _) = worker(20);
    let e = capture_drops(&mut w, 1, filter(Some("nosuch"), None)).unwrap_err();
    assert!(e.to_string().contains("nosuch"), "{e}");
    let e = capture_drops(&mut w, 1, filter(Some("parity"), Some("even"))).unwrap_err();
    assert!(e.to_string().contains("\"even\"") && e.to_string().contains("parity"), "{e}");
    let e = capture_drops(&mut w, 1, filter(None, Some("even"))).unwrap_err();
    assert!(e.to_string().contains("any node"), "{e}");
    assert!(!w.graph.capturing_drops(), "a refused filter starts nothing");
    // Stopping.
    capture_drops(&mut w, 1, filter(None, None)).unwrap();
    w.graph.set_drop_capture(None, &engine::DropFilter::default()).unwrap();
    assert!(!w.graph.capturing_drops());
}
