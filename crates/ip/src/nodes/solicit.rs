//! Neighbour solicitation frames (ARP requests, ICMPv6 NS), written over a buffer whose
//! packet could not be sent for want of the next hop's MAC. The packet itself is lost,
//! as in VPP's glean path; the next ones find the neighbour resolved.

use crate::tables::IfL3;
use engine::Buffer;
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::arp::{ArpOperation, ArpRepr};
use wire::ethernet::EthernetRepr;
use wire::icmpv6::Icmpv6Repr;
use wire::ipv6::{Ipv6Packet, Ipv6Repr};
use wire::{EtherType, EthernetAddress, IpProtocol};

/// Write a broadcast ARP request for `target`. False if the interface has no IPv4 address.
pub fn arp_request(buf: &mut Buffer, ifl: &IfL3, target: Ipv4Addr) -> bool {
    let Some(src) = ifl.ip4_source() else {
        return false;
    };
    let mut f = [0u8; 14 + 28];
    f[..14].copy_from_slice(&EthernetRepr { src: ifl.mac, dst: EthernetAddress::BROADCAST, ethertype: EtherType::Arp }.to_bytes());
    ArpRepr { operation: ArpOperation::Request, sender_hw: ifl.mac, sender_ip: src, target_hw: EthernetAddress([0; 6]), target_ip: target }
        .emit(&mut f[14..]);
    buf.write(&f).is_ok()
}

/// Write a neighbour solicitation for `target` to its solicited-node group.
pub fn neighbor_solicit(buf: &mut Buffer, ifl: &IfL3, target: Ipv6Addr) -> bool {
    let src = ifl.ip6_source();
    let dst = wire::ipv6::solicited_node(&target);
    let ns = Icmpv6Repr::NeighborSolicit { target, source_lladdr: Some(ifl.mac) };
    let n = ns.buffer_len();
    let mut f = [0u8; 14 + 40 + 32];
    f[..14]
        .copy_from_slice(&EthernetRepr { src: ifl.mac, dst: EthernetAddress::ipv6_multicast(&dst), ethertype: EtherType::Ipv6 }.to_bytes());
    Ipv6Repr { src, dst, next_header: IpProtocol::Icmpv6, payload_len: n, hop_limit: 255, traffic_class: 0, flow_label: 0 }
        .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..54]));
    ns.emit(&mut f[54..54 + n], &src, &dst);
    buf.write(&f[..54 + n]).is_ok()
}
