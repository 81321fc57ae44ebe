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
}

#[derive(Default)]
pub struct TraceLog {
    /// Remaining packets to mark, per input node id.
    armed: Vec<(usize, u32)>,
    next_id: u32,
    pub(crate) records: Vec<TraceRecord>,
    /// True while anything is armed or any traced packet may still be in the graph.
    pub(crate) active: bool,
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

    pub(crate) fn push(&mut self, r: TraceRecord) {
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
