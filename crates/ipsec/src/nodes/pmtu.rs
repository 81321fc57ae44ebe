//! `esp4-pmtu` / `esp6-pmtu`: an ICMP frag-needed or Packet Too Big addressed to the
//! gateway that quotes ESP (`ipN-local` sends it here, `meta.param` the ICMP message's
//! offset). When the quote names one of our outbound SAs ([`crate::pmtu`]), the SA's
//! path MTU is lowered to the reported one; the encrypt nodes size its packets by it.
//! Every message is consumed, counted by what became of it.

use super::EspOuter;
use crate::context::HasIpsec;
use crate::pmtu::{check_mtu, find_outbound, parse_v4, parse_v6, MtuError};
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

next_nodes! {
    pub enum EspPmtuNext { Drop = "error-drop" }
}

counters! {
    pub enum EspPmtuCounter {
        Learned(Info, "pmtu-learned", "frag-needed / packet-too-big about an outbound SA's ESP packet: the SA's path MTU set to the reported one (lowered, or its age renewed)"),
        NotOurSa(Warn, "not-our-sa", "the quote names no outbound SA (its source, destination, ports and SPI, to the SA's local address): forged or stale, ignored"),
        QuoteNotEsp(Info, "quote-not-esp", "the quote holds no ESP SPI (cut short, a later fragment, or IKE's non-ESP marker): ignored"),
        MtuOutOfRange(Warn, "mtu-out-of-range", "reported MTU below the family's least (576 IPv4, 1280 IPv6): ignored"),
        MtuNotLower(Info, "mtu-not-lower", "reported MTU not below the SA's link MTU or above the path MTU it learned: ignored (a learned one ages out instead)"),
    }
}

pub struct EspPmtu<O: EspOuter>(std::marker::PhantomData<O>);

impl<O: EspOuter> Default for EspPmtu<O> {
    fn default() -> Self {
        EspPmtu(std::marker::PhantomData)
    }
}

/// The node's name for outer family `O`.
pub const fn name(v6: bool) -> &'static str {
    if v6 {
        "esp6-pmtu"
    } else {
        "esp4-pmtu"
    }
}

impl<Cx: HasIpsec, O: EspOuter> Node<Cx> for EspPmtu<O> {
    type Next = EspPmtuNext;
    type Counter = EspPmtuCounter;

    fn name(&self) -> &'static str {
        name(O::IS_V6)
    }

    fn process(&mut self, cx: &mut Cx, _: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        use EspPmtuCounter as C;
        let b = buf.bytes();
        let icmp = b.get(buf.meta.param as usize..).unwrap_or(&[]);
        // The error's destination: an error about our packet goes to its source.
        let (quote, to) = match O::IS_V6 {
            false if b.len() >= 20 => (parse_v4(icmp), IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19]))),
            true if b.len() >= 40 => (parse_v6(icmp), IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[24..40]).expect("16 bytes")))),
            _ => return Verdict::Drop(C::QuoteNotEsp),
        };
        let Ok(q) = quote else {
            return Verdict::Drop(C::QuoteNotEsp);
        };
        let (ipc, x) = cx.split_ipsec();
        let Some((index, sa)) = find_outbound(&x.tables, &q, to).and_then(|i| Some((i, x.tables.outbound(i)?))) else {
            return Verdict::Drop(C::NotOurSa);
        };
        // A tunnel-mode SA leaves by its own adjacency; a transport-mode SA's packets by
        // their route (no one link to bound the report by).
        let link = if sa.plan.transport { None } else { ipc.tables.adjacency(x.tables.outer_adj(index)).mtu() };
        match check_mtu(q.mtu, O::IS_V6, link) {
            Err(MtuError::BelowMinimum { .. }) => Verdict::Drop(C::MtuOutOfRange),
            Err(MtuError::NotBelowLink { .. }) => Verdict::Drop(C::MtuNotLower),
            Ok(mtu) if sa.outbound.learn_path_mtu(mtu, crate::sa::clock_secs()) => Verdict::Drop(C::Learned),
            Ok(_) => Verdict::Drop(C::MtuNotLower),
        }
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("icmp at {} len {}", buf.meta.param, buf.len())
    }
}
