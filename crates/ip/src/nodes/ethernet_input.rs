//! `ethernet-input`: accept frames for this interface, dispatch by EtherType, strip L2.
//! A tunnel packet for one of our endpoints goes straight to its feature's input node
//! (`gtpuN-input`, `gueN-input`) when its IP header passes `ipN-input`'s fast-path checks
//! here ([`ip4_input::tunnel_endpoint`]): the tunnel's packets then take as many node
//! hops as forwarded ones, the tunnel node standing where `ipN-input` would. Such a
//! packet carries in `meta.param` the tag of the worker's tunnel hint it matched, or 0
//! ([`crate::hint`]).

use super::{ip4_input, ip6_input};
use crate::context::HasIp;
use crate::tables::UdpApp;
use engine::{counters, next_nodes, Buffer, Counts, Node, Verdict};
use wire::ethernet::{EthernetFrame, HEADER_LEN};
use wire::EtherType;

next_nodes! {
    pub enum EthernetInputNext {
        Ip4 = "ip4-input", Ip6 = "ip6-input", Arp = "arp-input",
        Gtpu4Input = "gtpu4-input", Gue4Input = "gue4-input", Gtpu6Input = "gtpu6-input", Gue6Input = "gue6-input",
    }
}

counters! {
    pub enum EthernetInputCounter {
        Truncated(Warn, "truncated", "frame shorter than an Ethernet header"),
        L2Mismatch(Warn, "l2-mismatch", "destination MAC neither ours, broadcast nor multicast"),
        UnknownEthertype(Warn, "unknown-ethertype", "EtherType is not IPv4, IPv6 or ARP"),
        VlanNoSubif(Warn, "vlan-no-subif", "VLAN-tagged frame and no sub-interface for its VLAN"),
        NoL3Interface(Error, "no-l3-interface", "received on an interface without L3 configuration"),
    }
}

pub struct EthernetInput;

impl<Cx: HasIp> Node<Cx> for EthernetInput {
    type Next = EthernetInputNext;
    type Counter = EthernetInputCounter;

    fn name(&self) -> &'static str {
        "ethernet-input"
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, _: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = cx.ip();
        use EthernetInputCounter as C;
        // Fast path: one bounds proof for the 14 header bytes, unicast to us, IPv4/IPv6.
        if let (Some(h), Some(ifl)) = (buf.bytes().first_chunk::<HEADER_LEN>(), cx.tables.interface(buf.meta.rx_if)) {
            if h[..6] == ifl.mac.0 {
                let v6 = match u16::from_be_bytes([h[12], h[13]]) {
                    0x0800 => Some(false),
                    0x86dd => Some(true),
                    _ => None,
                };
                if let Some(v6) = v6 {
                    let _ = buf.advance(HEADER_LEN);
                    let (udp, hints) = (&*cx.tables.udp, &cx.tunnel_hints);
                    let endpoint = if v6 {
                        ip6_input::tunnel_endpoint(udp, hints.v6.as_ref(), buf.bytes())
                    } else {
                        ip4_input::tunnel_endpoint(udp, hints.v4.as_ref(), buf.bytes())
                    };
                    // An interface with an SPD: every packet to its inbound policies, by
                    // way of `ipN-input` (the bypass would skip them).
                    let endpoint = endpoint.filter(|_| !cx.tables.has_spd(buf.meta.rx_if));
                    return Verdict::Next(match (endpoint, v6) {
                        (None, false) => EthernetInputNext::Ip4,
                        (None, true) => EthernetInputNext::Ip6,
                        (Some((app, len, hint_tag)), _) => {
                            buf.truncate(len);
                            // The tunnel node's argument: which hint the packet matched.
                            buf.meta.param = hint_tag;
                            match (app, v6) {
                                (UdpApp::Gtpu, false) => EthernetInputNext::Gtpu4Input,
                                (UdpApp::Gue, false) => EthernetInputNext::Gue4Input,
                                (UdpApp::Gtpu, true) => EthernetInputNext::Gtpu6Input,
                                (UdpApp::Gue, true) => EthernetInputNext::Gue6Input,
                                // Never bypassed: ESP in UDP takes the full path.
                                (UdpApp::Esp, false) => EthernetInputNext::Ip4,
                                (UdpApp::Esp, true) => EthernetInputNext::Ip6,
                            }
                        }
                    });
                }
            }
        }
        let Ok(f) = EthernetFrame::new_checked(buf.bytes()) else {
            return Verdict::Drop(C::Truncated);
        };
        let Some(ifl) = cx.tables.interface(buf.meta.rx_if) else {
            return Verdict::Drop(C::NoL3Interface);
        };
        let dst = f.dst_addr();
        if dst != ifl.mac && dst.is_unicast() {
            return Verdict::Drop(C::L2Mismatch);
        }
        let next = match f.ethertype() {
            EtherType::Ipv4 => EthernetInputNext::Ip4,
            EtherType::Ipv6 => EthernetInputNext::Ip6,
            EtherType::Arp => EthernetInputNext::Arp,
            EtherType::Vlan | EtherType::QinQ => return Verdict::Drop(C::VlanNoSubif),
            EtherType::Unknown(_) => return Verdict::Drop(C::UnknownEthertype),
        };
        // Cannot fail: new_checked proved HEADER_LEN bytes.
        let _ = buf.advance(HEADER_LEN);
        Verdict::Next(next)
    }

    fn trace(&self, buf: &Buffer) -> String {
        match EthernetFrame::new_checked(buf.bytes()) {
            Ok(f) => format!("{} -> {} type {:?} len {}", f.src_addr(), f.dst_addr(), f.ethertype(), buf.len()),
            Err(e) => format!("malformed: {e}"),
        }
    }
}
