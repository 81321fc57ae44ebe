//! `ip4-source-check` / `ip6-source-check`: the reverse-path check (`crate::urpf`) of
//! packets received on an interface that has one, between `ethernet-input` and
//! `ipN-input`. The source is looked up in the FIB; a packet whose source fails is
//! dropped under the reason, the rest go on to `ipN-input` (which validates the header:
//! a packet too short to have a source goes there unchecked, to be dropped by name).

use super::family::{Family, Ip4, Ip6};
use crate::context::HasIp;
use crate::urpf::{check, SourceFault};
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

/// The check of the packet's source, `Ok` for a packet too short to have one or a source
/// `exempt` says needs no route back.
#[inline(always)]
fn source_ok<F: Family>(cx: &crate::context::IpContext, buf: &Buffer, exempt: impl Fn(&[u8]) -> bool) -> Result<(), SourceFault> {
    let Some(src) = buf.bytes().get(F::SRC_AT..F::DST_AT) else {
        return Ok(());
    };
    if exempt(src) {
        return Ok(());
    }
    let t = &cx.tables;
    let mode = t.interface(buf.meta.rx_if).map_or(Default::default(), |l| l.urpf);
    check(t, F::fib(t).lookup(F::key(src)), buf.meta.rx_if, mode)
}

pub struct Ip4SourceCheck;

impl<Cx: HasIp> Node<Cx> for Ip4SourceCheck {
    type Next = Ip4SourceCheckNext;
    type Counter = SourceCheckCounter;

    fn name(&self) -> &'static str {
        "ip4-source-check"
    }

    fn process(&mut self, cx: &mut Cx, _: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        match source_ok::<Ip4>(cx.ip(), buf, |_| false) {
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
        // Link-local sources (neighbour discovery, routing protocols) and the unspecified
        // source of duplicate address detection have no route back and need none: they
        // never leave the link.
        let on_link = |s: &[u8]| {
            let a = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(s).unwrap_or_default());
            a.is_unicast_link_local() || a.is_unspecified()
        };
        match source_ok::<Ip6>(cx.ip(), buf, on_link) {
            Ok(()) => Verdict::Next(Ip6SourceCheckNext::Input),
            Err(f) => Verdict::Drop(counter(f)),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_ip6(buf.bytes())
    }
}
