//! A transmit-only device that frees what it is given (the benchmark sink).

use engine::device::{Device, RxStatus, TxResult};
use engine::{BufIdx, Pool};

#[derive(Default)]
pub struct NullSink;

impl Device for NullSink {
    fn kind(&self) -> &'static str {
        "null"
    }
    fn has_rx(&self) -> bool {
        false
    }
    fn rx(&mut self, _: &mut Pool, _: &mut Vec<BufIdx>, _: usize) -> RxStatus {
        RxStatus::Exhausted
    }
    /// Counts a chained packet's bytes from its extent's recorded length: nothing read.
    fn takes_chains(&self) -> bool {
        true
    }
    #[inline]
    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult {
        let mut bytes = pool.chained_bytes(bufs);
        for &b in bufs.iter() {
            bytes += pool.get(b).len();
        }
        let n = bufs.len();
        pool.free_many(bufs);
        bufs.clear();
        TxResult { sent: n, sent_bytes: bytes, failed: 0 }
    }
}
