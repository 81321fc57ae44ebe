//! `ip-punt`: a packet for one of our addresses that a daemon on the host answers
//! (`crate::punt`), sent whole to the host's stack by the host next hop's adjacency, which
//! the sending node put in `meta.adj`. Delivered, not forwarded: the TTL / hop limit stays.

use super::family::{send_originated, Ip4, Ip6};
use crate::context::HasIp;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};

next_nodes! {
    pub enum IpPuntNext { Output = "interface-output", Glean = "ip-glean" }
}

counters! {
    pub enum IpPuntCounter {
        Punted(Info, "punted", "packets for a daemon on the host sent to the host's stack"),
        ToGlean(Info, "host-unresolved", "the host next hop's MAC unknown: held by ip-glean while it is solicited"),
        NotIp(Error, "not-ip", "neither IPv4 nor IPv6 (the sending node should not send it)"),
    }
}

pub struct IpPunt;

impl<Cx: HasIp> Node<Cx> for IpPunt {
    type Next = IpPuntNext;
    type Counter = IpPuntCounter;

    fn name(&self) -> &'static str {
        "ip-punt"
    }

    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use IpPuntCounter as C;
        let t = &cx.ip().tables;
        let adj = buf.meta.adj;
        let sent = match buf.bytes().first().map(|b| b >> 4) {
            Some(4) => send_originated::<Ip4>(t, buf, adj),
            Some(6) => send_originated::<Ip6>(t, buf, adj),
            _ => return Verdict::Drop(C::NotIp),
        };
        if sent {
            counts.inc(C::Punted);
            Verdict::Next(IpPuntNext::Output)
        } else {
            // An `Incomplete` adjacency: ip-glean solicits its next hop and holds the
            // packet; released, it goes to the lookup, `ipN-local`, and here again.
            counts.inc(C::ToGlean);
            Verdict::Next(IpPuntNext::Glean)
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        super::trace_adj(buf.meta.adj)
    }
}
