//! The one interface every I/O backend implements: receive into pool buffers, transmit
//! (and free) pool buffers. Protocol logic never lives behind it.

use crate::buffer::BufIdx;
use crate::pool::Pool;

/// What a receive call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxStatus {
    /// Packets may keep coming (live device or generator with more to send).
    Open,
    /// The source is finished (pcap file read, generator count reached); never polled
    /// again.
    Exhausted,
}

/// Result of a transmit call: the device took `sent`; it freed all buffers either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxResult {
    pub sent: usize,
    pub sent_bytes: usize,
    /// Buffers the device could not send (counted as `tx_errors`).
    pub failed: usize,
}

/// Where a capture of an interface's frames goes (`pcap trace`): every frame the
/// interface receives and sends, as the wire carries them, until the sink is done.
pub trait FrameSink: Send {
    /// Record one frame; false once the sink is done (its count reached, a write failed).
    fn record(&mut self, frame: &[u8]) -> bool;
}

/// What a dropped packet is recorded as (`pcap trace drop`): its link layer, which the
/// dropping node's place in the graph decides ([`crate::Receives`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DroppedAs {
    Ethernet,
    /// An IPv4 or IPv6 packet without a link-layer header.
    Ip,
}

/// Where a capture of dropped packets goes (`pcap trace drop`): each with why it was
/// dropped (`"<node>: <counter>"`) and where it came from, until the sink is done.
pub trait DropSink: Send {
    /// Record one dropped packet; false once the sink is done.
    fn record(&mut self, packet: &[u8], link: DroppedAs, reason: &str) -> bool;
}

pub trait Device: Send {
    /// Backend kind: names the input node (`<kind>-input`) and shows in `show interfaces`.
    fn kind(&self) -> &'static str;

    /// Whether this device ever receives (a null sink does not).
    fn has_rx(&self) -> bool {
        true
    }

    /// Append up to `max` received packets to `out`, in buffers from `pool`.
    fn rx(&mut self, pool: &mut Pool, out: &mut Vec<BufIdx>, max: usize) -> RxStatus;

    /// Whether `tx` sends chained packets (a head buffer and its extent,
    /// [`Pool::attach`]) as they are, gathering the pieces or not reading the bytes at
    /// all; the worker copies a chained packet into one buffer for any other device.
    fn takes_chains(&self) -> bool {
        false
    }

    /// Send and free every buffer in `bufs` (left empty).
    fn tx(&mut self, pool: &mut Pool, bufs: &mut Vec<BufIdx>) -> TxResult;

    /// Whether the worker calls [`Self::end_of_loop`] at the end of every loop.
    fn each_loop(&self) -> bool {
        false
    }

    /// The end of a worker loop, whether or not anything was sent: a device that holds
    /// packets for a later send ([`crate::handoff::HandoffTx`]) sends them once it can.
    fn end_of_loop(&mut self) {}

    /// A descriptor that polls readable when packets wait (a kernel-backed device), so an
    /// idle worker can sleep in `poll` and wake the moment one arrives. `None`: the worker
    /// naps instead (generators, files).
    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// The device's own named counters (kernel drops, ring-full events, link state
    /// changes, …) for `show interfaces`; cumulative since the device opened.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Write out anything buffered (called at shutdown).
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
