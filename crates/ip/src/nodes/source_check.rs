//! `ip4-source-check` / `ip6-source-check`: the reverse-path check (`crate::urpf`) of
//! packets received on an interface that has one, between `ethernet-input` and
//! `ipN-input`. The source is looked up in the FIB; a packet whose source fails is
//! dropped under the reason, the rest go on to `ipN-input` (which validates the header:
//! a packet too short to have a source goes there unchecked, to be dropped by name).

use crate::context::HasIp;
use crate::urpf::{check_source, Arrival, SourceFault};
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};

next_nodes! {
    pub enum Ip4SourceCheckNext { Input = "ip4-input" }
}
next_nodes! {
    pub enum Ip6SourceCheckNext { Input = "ip6-input" }
}

counters! {
    pub enum SourceCheckCounter {
        NoRoute(Warn, "no-route", "uRPF: no route back to the source (or a blackhole)"),
        WrongInterface(Warn, "wrong-interface", "strict uRPF: the route back to the source leaves by another interface"),
        OwnAddress(Warn, "own-address", "uRPF: the source is one of the gateway's own addresses"),
    }
}

fn counter(f: SourceFault) -> SourceCheckCounter {
    match f {
        SourceFault::NoRoute => SourceCheckCounter::NoRoute,
        SourceFault::WrongInterface => SourceCheckCounter::WrongInterface,
        SourceFault::OwnAddress => SourceCheckCounter::OwnAddress,
    }
}

/// The check of the packet's source against the interface it came in on.
#[inline(always)]
fn source_ok(cx: &crate::context::IpContext, buf: &Buffer, v6: bool) -> Result<(), SourceFault> {
    let t = &cx.tables;
    let mode = t.interface(buf.meta.rx_if).map_or(Default::default(), |l| l.urpf);
    check_source(t, buf.bytes(), v6, Arrival::Link(buf.meta.rx_if), mode)
}

pub struct Ip4SourceCheck;

impl<Cx: HasIp> Node<Cx> for Ip4SourceCheck {
    type Next = Ip4SourceCheckNext;
    type Counter = SourceCheckCounter;

    fn name(&self) -> &'static str {
        "ip4-source-check"
    }

    fn process(&mut self, cx: &mut Cx, _: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        match source_ok(cx.ip(), buf, false) {
            Ok(()) => Verdict::Next(Ip4SourceCheckNext::Input),
            Err(f) => Verdict::Drop(counter(f)),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip4(buf.bytes())
    }
}

pub struct Ip6SourceCheck;

impl<Cx: HasIp> Node<Cx> for Ip6SourceCheck {
    type Next = Ip6SourceCheckNext;
    type Counter = SourceCheckCounter;

    fn name(&self) -> &'static str {
        "ip6-source-check"
    }

    fn process(&mut self, cx: &mut Cx, _: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        match source_ok(cx.ip(), buf, true) {
            Ok(()) => Verdict::Next(Ip6SourceCheckNext::Input),
            Err(f) => Verdict::Drop(counter(f)),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip6(buf.bytes())
    }
}
