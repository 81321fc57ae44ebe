//! Packet trace: `trace add <input-node> N` marks the next N packets entering through
//! that input; every node they pass records one line. Free when off: the dispatcher only
//! takes the traced path while some trace is armed or a traced packet is in flight.

use core::num::NonZeroU32;
use serde::Serialize;

/// Records kept before the oldest are discarded.
pub const MAX_RECORDS: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceRecord {
    /// Which traced packet (1-based, in arrival order).
    pub packet: u32,
    pub node: &'static str,
    /// What the node saw.
    pub text: String,
    /// Where the packet went next (a node name or `drop: <counter>`).
    pub verdict: String,
    /// When the node saw it: wall-clock nanoseconds since the Unix epoch (the start of
    /// the dispatch round; one reading per round, taken only while tracing).
    pub time_ns: u64,
}

#[derive(Default)]
pub struct TraceLog {
    /// Remaining packets to mark, per input node id.
    armed: Vec<(usize, u32)>,
    next_id: u32,
    pub(crate) records: Vec<TraceRecord>,
    /// True while anything is armed or any traced packet may still be in the graph.
    pub(crate) active: bool,
    /// The time records of this dispatch round carry (`TraceRecord::time_ns`).
    pub(crate) now_ns: u64,
    /// Interface names by index, so records say `pg0`, not an index.
    pub(crate) if_names: Vec<String>,
}

impl TraceLog {
    pub fn arm(&mut self, input_node: usize, count: u32) {
        if let Some(e) = self.armed.iter_mut().find(|(n, _)| *n == input_node) {
            e.1 += count;
        } else {
            self.armed.push((input_node, count));
        }
        self.active = count > 0 || self.active;
    }

    /// Called for each packet entering through `input_node`.
    #[inline]
    pub(crate) fn mark(&mut self, input_node: usize) -> Option<NonZeroU32> {
        let e = self.armed.iter_mut().find(|(n, c)| *n == input_node && *c > 0)?;
        e.1 -= 1;
        self.next_id += 1;
        NonZeroU32::new(self.next_id)
    }

    pub(crate) fn armed_any(&self) -> bool {
        self.armed.iter().any(|(_, c)| *c > 0)
    }

    /// Read the clock for the records of the round about to run.
    pub(crate) fn stamp(&mut self) {
        self.now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    }

    /// The name of interface `i`, or its index if it has none.
    pub(crate) fn if_name(&self, i: usize) -> String {
        self.if_names.get(i).cloned().unwrap_or_else(|| format!("if{i}"))
    }

    pub(crate) fn push(&mut self, mut r: TraceRecord) {
        r.time_ns = self.now_ns;
        if self.records.len() >= MAX_RECORDS {
            self.records.remove(0);
        }
        self.records.push(r);
    }

    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    pub fn clear(&mut self) {
        self.armed.clear();
        self.records.clear();
        self.next_id = 0;
        self.active = false;
    }
}
