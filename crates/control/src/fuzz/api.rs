//! The control API's target: lines of text, each a JSON request (a line starting with
//! `{`, as the control socket takes them) or a `vecgate ctl` command line, carried out
//! in turn against a dataplane whose worker runs on its own thread (a fresh one per
//! input, from the graph target's configuration, so every input starts from the same
//! tables). Checked: nothing panics; a request the CLI or JSON parser accepts
//! serializes and parses back to itself; every reply is ok or names its error and
//! serializes; after the requests the tables still publish and `show ip fib` and
//! `show runtime` answer; the stopped worker holds no buffer.
//!
//! Requests naming files (`pcap trace`, `pcap trace drop`) are skipped: an input must not write where it
//! likes.

use crate::api::Request;
use crate::config::Config;
use crate::dataplane::{assemble, spawn};
use engine::worker::WorkerCmd;

/// Requests per input.
pub const MAX_REQUESTS: usize = 32;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let cfg = Config::parse(super::graph::CONFIG, "fuzz/graph.toml", std::path::Path::new(".")).expect("valid");
    let (mut control, worker) = assemble(&cfg).expect("assembles").into_single();
    let handle = spawn(&mut control, worker, None, false);
    for line in text.lines().take(MAX_REQUESTS) {
        let req = if line.trim_start().starts_with('{') {
            // As the control socket reads a line (its field search on a bad one too).
            match crate::server::parse_request(line) {
                Ok(r) => r,
                Err(e) => {
                    assert!(e.starts_with("bad request: "), "{e}");
                    continue;
                }
            }
        } else {
            let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            match crate::cli::parse(&words) {
                Ok(r) => r,
                Err(e) => {
                    assert!(!e.is_empty(), "a CLI error says what was expected");
                    continue;
                }
            }
        };
        let json = serde_json::to_string(&req).expect("a request serializes");
        assert_eq!(serde_json::from_str::<Request>(&json).expect("and parses back"), req);
        if matches!(req, Request::PcapTrace { .. } | Request::PcapTraceDrop { .. } | Request::Reload { .. }) {
            continue;
        }
        let reply = control.handle(&req);
        assert_eq!(reply.ok, reply.error.is_none(), "{reply:?}");
        assert!(reply.error.as_ref().is_none_or(|e| !e.is_empty()), "an error says what went wrong");
        serde_json::to_string(&reply).expect("a reply serializes");
    }
    control.publish();
    for req in [Request::ShowIpFib { limit: None }, Request::ShowRuntime {}] {
        let reply = control.handle(&req);
        assert!(reply.ok, "{req:?} after the input: {reply:?}");
    }
    for w in &control.workers {
        let _ = w.send(WorkerCmd::Stop);
    }
    let worker = handle.join().expect("the worker thread did not panic");
    assert_eq!(worker.pool.in_use(), 0);
}
