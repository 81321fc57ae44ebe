//! `ethernet-input`: accept frames for this interface, dispatch by EtherType, strip L2.
//! A tunnel packet for one of our endpoints goes straight to its feature's input node
//! (`gtpuN-input`, `gueN-input`) when its IP header passes `ipN-input`'s fast-path checks
//! here ([`ip4_input::tunnel_endpoint`]): the tunnel's packets then take as many node
//! hops as forwarded ones, the tunnel node standing where `ipN-input` would. Such a
//! packet carries in `meta.param` the tag of the worker's tunnel hint it matched, or 0
//! ([`crate::hint`]). A UDP GSO frame of several datagrams is not bypassed: `ipN-local`
//! sends it to `ip-gso-segment` before the tunnel node, which takes one datagram a buffer.
//! Every other IPv4/IPv6 packet whose header passes `ipN-input`'s fast path goes straight
//! on, trimmed to its IP length, while no link has an SPD or takes parcels (then
//! `ipN-input` would send it to the lookup too): the checks are the same functions
//! (`fast_path_len`). On a table the lookup walks a packet at a time, this node also
//! takes the lookup's common case itself (`ip_lookup::forwards_fast`, the same function):
//! a resolved next hop, the packet rewritten and sent to `interface-output` — a
//! forwarded packet passes two nodes. The rest goes to `ipN-lookup` with the FIB's
//! answer (`meta.looked_up`), as does every packet of a larger table (the lookup node
//! looks those up a vector at once) and every traced one (its trace then shows its
//! route). An IP parcel is forwarded whole here in its common case (its header passes,
//! routed to a link that takes parcels within its MTU, segments not read in transit:
//! [`crate::parcel::forward_whole`], as `parcelN-input` takes it; the node is added in two
//! forms, the forward inlined in the one for vectors with long frames, [`parcels_inlined`]);
//! any other goes straight to `parcelN-input`, which checks its header whole and names
//! what is wrong.
//! `ipN-input` sees the rest of what fails its fast path (errors with their counters,
//! options, hop-by-hop, multicast, the SPD).

use super::family::{Family, Ip4, Ip6};
use super::gso_segment::several_datagrams;
use super::ip_lookup::forwards_fast;
use super::{ip4_input, ip6_input};
use crate::context::HasIp;
use crate::parcel::{forward_whole, ParcelHeader, Whole};
use crate::tables::{Tables, TunnelRef, UdpApp};
use crate::tunnel_next;
use crate::urpf::Urpf;
use engine::{counters, next_nodes, BufIdx, Buffer, Counts, Node, Verdict};
use wire::ethernet::{EthernetFrame, HEADER_LEN};
use wire::EtherType;

next_nodes! {
    pub enum EthernetInputNext {
        Ip4 = "ip4-input", Ip6 = "ip6-input", Arp = "arp-input", Ip4Lookup = "ip4-lookup", Ip6Lookup = "ip6-lookup",
        // An interface with a reverse-path check (`crate::urpf`): every IP packet first.
        Ip4SourceCheck = "ip4-source-check", Ip6SourceCheck = "ip6-source-check",
        Output = "interface-output",
        // A route into a tunnel: the encap node, as `ipN-lookup` would send it.
        Gtpu4Encap = "gtpu4-encap", Gtpu6Encap = "gtpu6-encap", Gue4Encap = "gue4-encap", Gue6Encap = "gue6-encap",
        Lb4Nat = "lb4-nat", Lb6Nat = "lb6-nat", Esp4Encrypt = "esp4-encrypt", Esp6Encrypt = "esp6-encrypt",
        Upf4Downlink = "upf4-downlink", Upf6Downlink = "upf6-downlink",
        Gtpu4Input = "gtpu4-input", Gue4Input = "gue4-input", Gtpu6Input = "gtpu6-input", Gue6Input = "gue6-input",
        Parcel4Input = "parcel4-input", Parcel6Input = "parcel6-input",
        // A parcel forwarded whole whose rewrite needs the general path.
        Ip4Rewrite = "ip4-rewrite", Ip6Rewrite = "ip6-rewrite",
    }
}

counters! {
    pub enum EthernetInputCounter {
        Truncated(Warn, "truncated", "frame shorter than an Ethernet header"),
        L2Mismatch(Warn, "l2-mismatch", "destination MAC neither ours, broadcast nor multicast"),
        UnknownEthertype(Warn, "unknown-ethertype", "EtherType is not IPv4, IPv6 or ARP"),
        VlanNoSubif(Warn, "vlan-no-subif", "VLAN-tagged frame and no sub-interface for its VLAN"),
        NoL3Interface(Error, "no-l3-interface", "received on an interface without L3 configuration"),
        ParcelsWhole(Info, "parcels-forwarded-whole", "IP parcels forwarded whole from here (parcelN-input's common case; the rest go to it)"),
        ParcelSegments(Info, "parcel-segments-forwarded-whole", "segments in the parcels forwarded whole from here"),
    }
}

/// `PARCELS_INLINED`: the form for vectors with long frames ([`parcels_inlined`]), the
/// parcel forward inlined in its loop.
pub struct EthernetInput<const PARCELS_INLINED: bool = false>;

/// A packet that passes `ipN-input`'s fast-path checks ([`ip4_input::fast_path_len`],
/// [`ip6_input::fast_path_len`], the same functions), trimmed to its IP length as that
/// node trims it, and its next node, the lookup; `None` (the packet untouched) when
/// `direct` is false (some link has an SPD or takes parcels, which `ipN-input` decides
/// per interface) or the header needs `ipN-input`'s general path.
#[inline(always)]
fn straight_to_lookup(buf: &mut Buffer, v6: bool, direct: bool) -> Option<EthernetInputNext> {
    if !direct {
        return None;
    }
    let frame = buf.len();
    let (end, next) = if v6 {
        (ip6_input::fast_path_len(buf.bytes().first_chunk()?, frame)?, EthernetInputNext::Ip6Lookup)
    } else {
        (ip4_input::fast_path_len(buf.bytes().first_chunk()?, frame)?, EthernetInputNext::Ip4Lookup)
    };
    buf.truncate(end);
    Some(next)
}

/// Where a packet that `straight_to_lookup` left goes: `parcelN-input` for an IP parcel
/// (`wire::parcel::is_ipv4_parcel` / `is_ipv6_parcel`, the test `ipN-input` makes before
/// its general path; `parcelN-input` checks the whole header itself, the IPv4 header
/// checksum included), else `ipN-input`.
#[inline(always)]
fn parcel_or_ip_input(b: &[u8], v6: bool) -> EthernetInputNext {
    match v6 {
        true if wire::parcel::is_ipv6_parcel(b) => EthernetInputNext::Parcel6Input,
        true => EthernetInputNext::Ip6,
        false if wire::parcel::is_ipv4_parcel(b) => EthernetInputNext::Parcel4Input,
        false => EthernetInputNext::Ip4,
    }
}

/// An IP parcel (`to_input`, its input node, from [`parcel_or_ip_input`]) forwarded
/// whole here when it is the common case ([`crate::parcel::forward_whole`], the function
/// `parcelN-input` takes it by): a node hop fewer, as for a forwarded packet. Any other
/// parcel, and a traced one (its trace then shows its input node), goes to `to_input`
/// untouched, which decides the rest and names what is wrong. Inlined in the form for
/// vectors that carry long frames ([`parcels_inlined`]); out of line
/// ([`parcel_outlined`]) in the loop every other vector takes: inlined there, it cost
/// every packet of this node (`ip4-forward` 265.4 → 273.1 instructions a packet,
/// callgrind; out of line 268.7), for ~8 % on the parcel forward (docs/PERFORMANCE.md).
#[inline(always)]
fn parcel<F: ParcelHeader>(
    tables: &Tables,
    counts: &mut Counts<'_, EthernetInputCounter>,
    buf: &mut Buffer,
    to_input: EthernetInputNext,
    to_rewrite: EthernetInputNext,
) -> EthernetInputNext {
    if buf.meta.trace.is_some() {
        return to_input;
    }
    match forward_whole::<F>(tables, buf) {
        Whole::Forwarded { nsegs, rewritten } => {
            counts.inc(EthernetInputCounter::ParcelsWhole);
            counts.add(EthernetInputCounter::ParcelSegments, nsegs as u64);
            if rewritten {
                EthernetInputNext::Output
            } else {
                to_rewrite
            }
        }
        Whole::Looked(..) | Whole::Refused => to_input,
    }
}

/// [`parcel`] out of line, for the form of vectors without long frames.
#[inline(never)]
fn parcel_outlined<F: ParcelHeader>(
    tables: &Tables,
    counts: &mut Counts<'_, EthernetInputCounter>,
    buf: &mut Buffer,
    to_input: EthernetInputNext,
    to_rewrite: EthernetInputNext,
) -> EthernetInputNext {
    parcel::<F>(tables, counts, buf, to_input, to_rewrite)
}

/// The longest frame that is not an IP parcel in the common case (a full 1500-byte
/// packet and its Ethernet header): a vector with a longer one among those
/// [`parcels_inlined`] samples takes the form with the parcel forward inlined. Only a
/// choice of code: a jumbo frame there, or a parcel in the other form, is decided the same.
const LONGEST_PLAIN_FRAME: usize = 1514;

/// The lookup's share for a packet `straight_to_lookup` passed, while the table is one
/// the lookup node walks a packet at a time (a larger one it looks up a vector at once,
/// so such packets go to it untouched): the FIB's answer, and where it is the lookup's
/// common case the node the lookup would send the packet to — `interface-output` with
/// the packet rewritten ([`forwards_fast`]), or a single route's tunnel encap node with
/// the tunnel in `meta.param` — a node hop further on. Otherwise (`None`) the answer goes
/// to `ipN-lookup` in `meta.adj` (`meta.looked_up`), which decides the rest without a
/// second walk. A traced packet goes to the lookup untouched, so that its trace shows the
/// route it took.
#[inline(always)]
fn route<F: Family>(tables: &Tables, buf: &mut Buffer) -> Option<EthernetInputNext> {
    let fib = F::fib(tables);
    if buf.meta.trace.is_some() || fib.prefers_batch() {
        return None;
    }
    let adj = fib.lookup(F::key(buf.bytes().get(F::DST_AT..F::HEADER_LEN)?));
    buf.meta.adj = adj;
    if forwards_fast::<F>(tables, adj, buf) {
        return Some(EthernetInputNext::Output);
    }
    if let Some(t) = TunnelRef::decode(adj) {
        // Unless the balancer sees it first (`ipN-lookup` sends it there).
        if !tables.lb_sees_tunnel(t) {
            buf.meta.param = t.id;
            return Some(tunnel_next!(EthernetInputNext, t.kind));
        }
    }
    buf.meta.looked_up = true;
    None
}

impl<Cx: HasIp, const PARCELS_INLINED: bool> Node<Cx> for EthernetInput<PARCELS_INLINED> {
    type Next = EthernetInputNext;
    type Counter = EthernetInputCounter;
    const RECEIVES: engine::Receives = engine::Receives::Ethernet;

    fn name(&self) -> &'static str {
        "ethernet-input"
    }

    #[inline(always)]
    fn process(&mut self, wcx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let cx = wcx.ip();
        use EthernetInputCounter as C;
        // Fast path: one bounds proof for the 14 header bytes, unicast to us, IPv4/IPv6.
        if let (Some(h), Some(ifl)) = (buf.bytes().first_chunk::<HEADER_LEN>(), cx.tables.interface(buf.meta.rx_if)) {
            // A link that checks sources (`crate::urpf`) takes the general path below,
            // which sends its IP packets to the check.
            if h[..6] == ifl.mac.0 && ifl.urpf == Urpf::Off {
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
                    // way of `ipN-input` (the bypass would skip them). A UDP GSO frame of
                    // several datagrams too: `ipN-local` has it cut first (a tunnel node
                    // takes one datagram a buffer; `gso_segment::several_datagrams`).
                    let endpoint = endpoint.filter(|_| !cx.tables.has_spd(buf.meta.rx_if) && !several_datagrams(buf));
                    return Verdict::Next(match (endpoint, v6) {
                        // What `ipN-input`'s fast path would send to the lookup goes
                        // there now (see the module's note); the rest takes `ipN-input`.
                        // No link with an SPD or taking parcels: `ipN-input` would send every
                        // packet passing its fast path to the lookup.
                        (None, v6) => match straight_to_lookup(buf, v6, (cx.tables.spd_links | cx.tables.parcel_links) == 0) {
                            Some(next) => {
                                let routed = if v6 { route::<Ip6>(&cx.tables, buf) } else { route::<Ip4>(&cx.tables, buf) };
                                routed.unwrap_or(next)
                            }
                            // An IP parcel goes where `ipN-input` sends it (its header fails
                            // that node's fast path, so it would take the same test there):
                            // a node hop fewer for a parcel (the parcel settings read for
                            // parcels only; in the inlined form, read by its chooser once
                            // for the vector).
                            None => match parcel_or_ip_input(buf.bytes(), v6) {
                                to_input @ (EthernetInputNext::Parcel4Input | EthernetInputNext::Parcel6Input)
                                    if PARCELS_INLINED || wcx.parcels_whole_at_input() =>
                                {
                                    let t = &wcx.ip().tables;
                                    match (v6, PARCELS_INLINED) {
                                        (false, true) => parcel::<Ip4>(t, counts, buf, to_input, EthernetInputNext::Ip4Rewrite),
                                        (true, true) => parcel::<Ip6>(t, counts, buf, to_input, EthernetInputNext::Ip6Rewrite),
                                        (false, false) => parcel_outlined::<Ip4>(t, counts, buf, to_input, EthernetInputNext::Ip4Rewrite),
                                        (true, false) => parcel_outlined::<Ip6>(t, counts, buf, to_input, EthernetInputNext::Ip6Rewrite),
                                    }
                                }
                                next => next,
                            },
                        },
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
        let urpf = ifl.urpf != Urpf::Off;
        let next = match f.ethertype() {
            EtherType::Ipv4 if urpf => EthernetInputNext::Ip4SourceCheck,
            EtherType::Ipv6 if urpf => EthernetInputNext::Ip6SourceCheck,
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
            Ok(f) => format!("{} -> {} type {} len {}", f.src_addr(), f.dst_addr(), f.ethertype(), buf.len()),
            Err(e) => format!("malformed: {e}"),
        }
    }
}

/// Which form of `ethernet-input` a vector takes (`engine::GraphBuilder::add_either_by_vector`):
/// the one with the parcel forward inlined when the vector's first, middle or last frame
/// is longer than [`LONGEST_PLAIN_FRAME`], where some link takes parcels and they may go
/// on unread. A sample, not a scan: a scan of every length cost the parcel join 12
/// instructions a datagram; a parcel the sample misses takes the other form, out of
/// line, to the same decision.
pub fn parcels_inlined<Cx: HasIp>(wcx: &mut Cx, bufs: &[Buffer], input: &[BufIdx]) -> bool {
    let long = |i: usize| input.get(i).and_then(|&bi| bufs.get(bi.get())).is_some_and(|b| b.len() > LONGEST_PLAIN_FRAME);
    wcx.ip().tables.parcel_links != 0
        && wcx.parcels_whole_at_input()
        && (long(0) || long(input.len() / 2) || long(input.len().wrapping_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::pool::Pool;

    /// A UDP packet from 198.18.0.2 to 198.19.0.1 (checksummed IPv4 header), `pad` bytes
    /// of Ethernet padding after its 48 bytes.
    fn ip4(pad: usize) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 48, 0, 1, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 2, 198, 19, 0, 1];
        p.resize(48 + pad, 0);
        let c = wire::checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// UDP from 2001:db8:2::2 to `dst`, 16 bytes of payload, then `pad`.
    fn ip6(dst: [u8; 16], pad: usize) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 16, 17, 64];
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        p.extend_from_slice(&dst);
        p.resize(56 + pad, 0);
        p
    }

    /// `straight_to_lookup` on a buffer holding `p`: the next node and the bytes left.
    fn run(p: &[u8], v6: bool, direct: bool) -> (Option<EthernetInputNext>, usize) {
        let mut pool = Pool::new(4, 0);
        let b = pool.alloc(p.len()).unwrap();
        let buf = pool.get_mut(b);
        buf.write(p).unwrap();
        (straight_to_lookup(buf, v6, direct), buf.len())
    }

    const DST6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

    #[test]
    fn packets_passing_ip_inputs_fast_path_go_to_the_lookup_trimmed() {
        assert_eq!(run(&ip4(12), false, true), (Some(EthernetInputNext::Ip4Lookup), 48), "padding trimmed");
        assert_eq!(run(&ip6(DST6, 8), true, true), (Some(EthernetInputNext::Ip6Lookup), 56), "padding trimmed");
    }

    /// A worker context whose parcels may go on unread (the parcel settings' default).
    struct Unread(crate::context::IpContext);
    impl engine::worker::Context for Unread {}
    impl HasIp for Unread {
        fn ip(&mut self) -> &mut crate::context::IpContext {
            &mut self.0
        }
        fn parcels_whole_at_input(&self) -> bool {
            true
        }
    }

    /// A node's trace line of a buffer holding `bytes`.
    fn trace_of<N: Node<Unread>>(node: &N, bytes: &[u8]) -> String {
        let mut pool = Pool::new(4, 0);
        let b = pool.alloc(bytes.len()).unwrap();
        pool.get_mut(b).write(bytes).unwrap();
        node.trace(pool.get_mut(b))
    }

    /// Trace lines say what tcpdump says: an EtherType's number and name, an ARP
    /// request's and reply's words; never a Rust enum's name (`type Ipv6`, `Request`).
    #[test]
    fn traces_print_ethertypes_and_arp_as_tcpdump_does() {
        let frame = |ethertype: u16, payload: &[u8]| {
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
            f.extend_from_slice(&ethertype.to_be_bytes());
            f.extend_from_slice(payload);
            f
        };
        let macs = "02:00:00:00:00:02 -> 02:00:00:00:00:01";
        for (ethertype, payload, says) in [
            (0x86dd, ip6(DST6, 0), "type 0x86dd (IPv6) len 70"),
            (0x0800, ip4(0), "type 0x0800 (IPv4) len 62"),
            (0x0806, vec![0; 28], "type 0x0806 (ARP) len 42"),
            (0x88cc, vec![0; 46], "type 0x88cc len 60"),
        ] {
            assert_eq!(trace_of(&EthernetInput::<false>, &frame(ethertype, &payload)), format!("{macs} {says}"));
        }
        use wire::arp::{ArpOperation, ArpRepr};
        let arp = |operation| {
            let r = ArpRepr {
                operation,
                sender_hw: "02:00:00:00:00:02".parse().unwrap(),
                sender_ip: "198.18.0.2".parse().unwrap(),
                target_hw: "00:00:00:00:00:00".parse().unwrap(),
                target_ip: "198.18.0.1".parse().unwrap(),
            };
            let mut b = [0u8; 28];
            r.emit(&mut b);
            trace_of(&crate::nodes::arp_input::ArpInput, &b)
        };
        assert_eq!(arp(ArpOperation::Request), "request who-has 198.18.0.1 tell 198.18.0.2 (02:00:00:00:00:02)");
        assert_eq!(arp(ArpOperation::Reply), "reply 198.18.0.2 is-at 02:00:00:00:00:02 to 198.18.0.1");
        assert_eq!(arp(ArpOperation::Unknown(9)), "operation 9 from 198.18.0.2 (02:00:00:00:00:02) about 198.18.0.1");
    }

    /// The form with the parcel forward inlined is taken by a vector with a sampled frame
    /// longer than a full 1500-byte packet's, only where some link takes parcels and
    /// they may go on unread.
    #[test]
    fn vectors_with_long_frames_take_the_form_with_the_parcel_forward_inlined() {
        let mut pool = Pool::new(8, 0);
        let frames: Vec<engine::BufIdx> = [1514, 64, 1515, 64, 64]
            .iter()
            .map(|&n| {
                let b = pool.alloc(n).unwrap();
                pool.get_mut(b).write(&vec![0; n]).unwrap();
                b
            })
            .collect();
        let context = |parcel_links: u64| {
            let t = Tables { parcel_links, ..Tables::empty() };
            crate::context::IpContext::new(std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(t)), None, Default::default())
        };
        let (short, long) = (&frames[..2], &frames[1..3]);
        assert!(!parcels_inlined(&mut Unread(context(0)), pool.buffers(), long), "no link takes parcels");
        let mut cx = Unread(context(1 << 1));
        assert!(parcels_inlined(&mut cx, pool.buffers(), long));
        assert!(!parcels_inlined(&mut cx, pool.buffers(), short), "1514 bytes is a plain frame's length");
        assert!(!parcels_inlined(&mut context(1 << 1), pool.buffers(), long), "parcels read in transit");
        // First, middle and last sampled: a long frame elsewhere is not seen.
        assert!(parcels_inlined(&mut cx, pool.buffers(), &frames[2..]), "first");
        assert!(parcels_inlined(&mut cx, pool.buffers(), &frames[..]), "middle");
        assert!(!parcels_inlined(&mut cx, pool.buffers(), &frames[1..]), "second of four");
    }

    #[test]
    fn parcels_go_straight_to_their_input_node() {
        let (p4, p6) = (crate::test_parcels::parcel4(4, 100), crate::test_parcels::parcel6(4, 100));
        // Whatever the links: a parcel never passes `ipN-input`'s fast path.
        for direct in [false, true] {
            assert_eq!(run(&p4, false, direct), (None, p4.len()));
            assert_eq!(run(&p6, true, direct), (None, p6.len()));
        }
        assert_eq!(parcel_or_ip_input(&p4, false), EthernetInputNext::Parcel4Input);
        assert_eq!(parcel_or_ip_input(&p6, true), EthernetInputNext::Parcel6Input);
        // Other options, another hop-by-hop option, a plain packet: `ipN-input`.
        let mut other_option = p4.clone();
        other_option[20] = 0x94;
        assert_eq!(parcel_or_ip_input(&other_option, false), EthernetInputNext::Ip4);
        let mut jumbogram = p6.clone();
        jumbogram[4..6].fill(0);
        assert_eq!(parcel_or_ip_input(&jumbogram, true), EthernetInputNext::Ip6);
        assert_eq!(parcel_or_ip_input(&ip4(0), false), EthernetInputNext::Ip4);
        assert_eq!(parcel_or_ip_input(&ip6(DST6, 0), true), EthernetInputNext::Ip6);
    }

    #[test]
    fn everything_else_is_left_to_ip_input_untouched() {
        // Some link has an SPD or takes parcels: `ipN-input` decides per interface.
        assert_eq!(run(&ip4(12), false, false), (None, 60));
        assert_eq!(run(&ip6(DST6, 8), true, false), (None, 64));
        // Errors keep their counters in `ip4-input`.
        let mut bad_sum = ip4(0);
        bad_sum[8] = 63;
        assert_eq!(run(&bad_sum, false, true), (None, 48), "bad checksum");
        assert_eq!(run(&ip4(0)[..40], false, true), (None, 40), "total length past the frame");
        let mut martian = ip4(0);
        martian[12] = 127;
        let c = wire::checksum::checksum(&{
            let mut z = martian[..20].to_vec();
            z[10..12].fill(0);
            z
        });
        martian[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(run(&martian, false, true), (None, 48), "source on network 127");
        assert_eq!(run(&ip4(0)[..12], false, true), (None, 12), "header cut short");
        // IPv6: multicast to `ip6-local`, hop-by-hop options, a payload past the frame.
        let mut multicast = DST6;
        multicast[0] = 0xff;
        assert_eq!(run(&ip6(multicast, 0), true, true), (None, 56), "multicast destination");
        let mut hop_by_hop = ip6(DST6, 0);
        hop_by_hop[6] = 0;
        assert_eq!(run(&hop_by_hop, true, true), (None, 56), "hop-by-hop header");
        assert_eq!(run(&ip6(DST6, 0)[..50], true, true), (None, 50), "payload past the frame");
    }
}
