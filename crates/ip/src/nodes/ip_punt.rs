//! `ip-punt`: a packet for one of our addresses that a daemon on the host answers
//! (`crate::punt`), sent whole to the host's stack by the host next hop's adjacency, which
//! the sending node put in `meta.adj`. Delivered, not forwarded: the TTL / hop limit stays.

use super::family::{send_originated, send_own, Family, Ip4, Ip6};
use crate::context::HasIp;
use crate::tables::Tables;
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

next_nodes! {
    pub enum IpPuntInjectNext { Output = "interface-output", EthernetInput = "ethernet-input" }
}

next_nodes! {
    pub enum IpPuntInjectHandoffNext { Output = "interface-output", WorkerHandoff = "worker-handoff", SessionHandoff = "session-handoff" }
}

counters! {
    pub enum IpPuntInjectCounter {
        Injected(Info, "injected", "the host's own packets (from one of the gateway's addresses) sent as the gateway's: TTL kept"),
    }
}

/// `ip-punt-inject`: the first node of the punt link. A packet the host's stack sends
/// from one of the gateway's addresses (its daemons' replies and sessions) is the
/// gateway's own: sent by its route with the TTL / hop limit the host gave it, as the
/// gateway's own packets are (an eBGP session's TTL of 1, GTSM's 255 arrive as sent).
/// Anything else (ARP, neighbour discovery, traffic the host routes through the gateway,
/// a route that is not a plain next hop, a packet too big for the route's MTU) goes the
/// way of the link's other packets: [`PassOn`] says where.
pub struct IpPuntInject<P>(pub P);

/// Where `ip-punt-inject` sends what it does not inject: the link kind's first node.
/// Its own next-node set for each, since a graph has the handoff nodes only with
/// several workers.
pub trait PassOn: Send + 'static {
    type Next: engine::node::NextNodes;
    const OUTPUT: Self::Next;
    fn next(&self) -> Self::Next;
}

/// One worker: `ethernet-input`.
pub struct Alone;

/// Several workers: `worker-handoff` (`spread`: a device one worker reads) or
/// `session-handoff`.
pub struct Handoff {
    pub spread: bool,
}

impl PassOn for Alone {
    type Next = IpPuntInjectNext;
    const OUTPUT: IpPuntInjectNext = IpPuntInjectNext::Output;
    fn next(&self) -> IpPuntInjectNext {
        IpPuntInjectNext::EthernetInput
    }
}

impl PassOn for Handoff {
    type Next = IpPuntInjectHandoffNext;
    const OUTPUT: IpPuntInjectHandoffNext = IpPuntInjectHandoffNext::Output;
    fn next(&self) -> IpPuntInjectHandoffNext {
        if self.spread {
            IpPuntInjectHandoffNext::WorkerHandoff
        } else {
            IpPuntInjectHandoffNext::SessionHandoff
        }
    }
}

impl<Cx: HasIp, P: PassOn> Node<Cx> for IpPuntInject<P> {
    type Next = P::Next;
    type Counter = IpPuntInjectCounter;

    fn name(&self) -> &'static str {
        "ip-punt-inject"
    }

    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let t = &cx.ip().tables;
        let sent = match buf.bytes().get(12..14) {
            Some([0x08, 0x00]) => inject::<Ip4>(t, buf, |ip| wire::ipv4::Ipv4Packet::new_checked(ip).is_ok_and(|p| p.verify_checksum())),
            Some([0x86, 0xdd]) => inject::<Ip6>(t, buf, |ip| wire::ipv6::Ipv6Packet::new_checked(ip).is_ok()),
            _ => false,
        };
        if sent {
            counts.inc(IpPuntInjectCounter::Injected);
            return Verdict::Next(P::OUTPUT);
        }
        Verdict::Next(self.0.next())
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("len {}", buf.len())
    }
}

/// Send an Ethernet frame from the host whose IP source is one of ours by its
/// destination's route, if that route names a next hop the packet fits; true when the
/// buffer now holds the frame for `interface-output`, false (the frame untouched) if not.
fn inject<F: Family<Addr: Into<std::net::IpAddr>>>(t: &Tables, buf: &mut Buffer, well_formed: fn(&[u8]) -> bool) -> bool {
    let ip = &buf.bytes()[14..];
    let Some(src) = ip.get(F::SRC_AT..F::DST_AT) else { return false };
    if !t.is_local(F::addr(F::key(src)).into()) || !well_formed(ip) {
        return false;
    }
    if buf.advance(14).is_err() {
        return false;
    }
    if !send_own::<F>(t, buf, false) {
        // Not a plain next hop, or too big (the rewrite's general path fragments or
        // refuses it): as a received packet. The host's own packets are sent as they
        // came, past the links' output features, as before this shared helper.
        let _ = buf.prepend(14);
        return false;
    }
    true
}
