//! The forwarding nodes. Each file is one node: its next nodes, its counters, its
//! per-packet function and its trace line.

pub mod arp_input;
pub mod ethernet_input;
pub mod family;
pub mod glean;
pub mod gso_segment;
pub mod ip4_icmp_error;
pub mod ip4_input;
pub mod ip4_local;
pub mod ip4_rewrite;
pub mod ip6_icmp_error;
pub mod ip6_input;
pub mod ip6_local;
pub mod ip6_rewrite;
pub mod ip_fragment;
pub mod ip_lookup;
pub mod ip_punt;
pub mod ip_reassembly;
pub mod solicit;
pub mod source_check;
pub mod worker_handoff;

use crate::context::HasIp;
use engine::GraphBuilder;

/// Add every forwarding node to a graph.
pub fn register<Cx: HasIp>(g: &mut GraphBuilder<Cx>) {
    g.add_either_by_vector(
        ethernet_input::EthernetInput::<true>,
        ethernet_input::EthernetInput::<false>,
        ethernet_input::parcels_inlined::<Cx>,
    );
    g.add(arp_input::ArpInput);
    g.add(source_check::Ip4SourceCheck);
    g.add(source_check::Ip6SourceCheck);
    g.add(ip4_input::Ip4Input);
    g.add(ip_lookup::IpLookup::<family::Ip4>::default());
    g.add(ip4_rewrite::Ip4Rewrite);
    g.add(ip4_local::Ip4Local);
    g.add(ip4_icmp_error::Ip4IcmpError);
    g.add(ip6_input::Ip6Input);
    g.add(ip_lookup::IpLookup::<family::Ip6>::default());
    g.add(ip6_rewrite::Ip6Rewrite);
    g.add(ip6_local::Ip6Local);
    g.add(ip6_icmp_error::Ip6IcmpError);
    g.add(ip_punt::IpPunt);
    g.add(worker_handoff::IpResume);
    g.add_expand(gso_segment::GsoSegment);
    g.add_expand(ip_fragment::Ip4Fragment);
    g.add_expand(ip_fragment::Ip6Fragment);
    g.add_expand(ip_reassembly::Ip4Reassembly);
    g.add_expand(ip_reassembly::Ip6Reassembly);
    g.add_expand(glean::IpGlean);
    g.add_expand(glean::IpGleanRelease);
    g.add_input_drained(glean::GLEAN_INPUT, "ip-glean-release");
}

/// Whether the packet an ICMP too-big error quotes (`quote`: from its IP header on) may
/// be ESP the gateway sent: protocol ESP (over IPv6 perhaps behind a first fragment's
/// header), or UDP from a port an outbound SA sends ESP in UDP from (RFC 3948: 4500,
/// unless the SA names its own `udp_src_port`; [`crate::tables::UdpDemux::esp_source`]).
/// `espN-pmtu` checks the rest (`ipsec::pmtu`); other errors keep their way.
pub(crate) fn quotes_esp(quote: &[u8], v6: bool, udp: &crate::tables::UdpDemux) -> bool {
    let (mut proto, mut hl) = match v6 {
        false => (quote.get(9).copied(), quote.first().map_or(0, |b| (b & 0xf) as usize * 4)),
        true => (quote.get(6).copied(), 40),
    };
    if v6 && proto == Some(44) {
        // First fragment or not, the node reads it; offset 0 is the one with a SPI.
        (proto, hl) = (quote.get(40).copied(), 48);
    }
    match proto {
        Some(50) => true,
        Some(17) => quote.get(hl..hl + 2).is_some_and(|p| udp.esp_source(u16::from_be_bytes([p[0], p[1]]))),
        _ => false,
    }
}

/// What a node asks `ipN-fragment` for, carried in `Meta::param`: fragments of at most
/// `mtu` bytes; `originated` when we are the packet's source (an outer header we built),
/// which lets IPv4 fragmentation give it an identification and clear its DF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentRequest {
    pub mtu: u16,
    pub originated: bool,
}

impl FragmentRequest {
    pub const fn encode(self) -> u32 {
        self.mtu as u32 | (self.originated as u32) << 16
    }
    pub const fn decode(p: u32) -> Self {
        FragmentRequest { mtu: p as u16, originated: p & 1 << 16 != 0 }
    }
}

/// What a node asks `ipN-icmp-error` to send, carried in `Meta::param`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpRequest {
    pub msg_type: u8,
    pub code: u8,
    /// Next-hop MTU (IPv4 frag-needed, IPv6 packet-too-big) or pointer (IPv6
    /// parameter problem).
    pub value: u16,
}

impl IcmpRequest {
    pub const fn new(msg_type: u8, code: u8, value: u16) -> Self {
        IcmpRequest { msg_type, code, value }
    }
    pub const fn encode(self) -> u32 {
        ((self.msg_type as u32) << 24) | ((self.code as u32) << 16) | self.value as u32
    }
    pub const fn decode(p: u32) -> Self {
        IcmpRequest { msg_type: (p >> 24) as u8, code: (p >> 16) as u8, value: p as u16 }
    }
}

/// Short address summary for trace lines.
/// The size of the largest packet `buf` puts on the wire, for the MTU check: its length,
/// or for a GSO frame (left whole for the transmitting kernel to segment) the headers
/// plus one segment's payload.
pub fn wire_segment_len(buf: &engine::Buffer, len: usize) -> usize {
    let o = buf.meta.offload;
    if o.gso == engine::GsoKind::None {
        return len;
    }
    let Some(l4) = (o.csum_start as usize).checked_sub(buf.offset()) else { return len };
    let l4_len = match o.gso {
        engine::GsoKind::UdpL4 => 8,
        _ => wire::tcp::header_len_at(buf.bytes(), l4).unwrap_or(20),
    };
    (l4 + l4_len + o.gso_size as usize).min(len)
}

/// `ipN-input`'s fast-path checks for a packet a node hands on without the hop through
/// `ipN-input` (a tunnel's inner packet, IPv4 when `v4`): its IP length when it passes,
/// `None` when it needs `ipN-input`'s full checks and counters.
#[inline(always)]
pub fn input_fast_path_len(b: &[u8], v4: bool) -> Option<usize> {
    if v4 {
        ip4_input::fast_path_len(b.first_chunk()?, b.len())
    } else {
        ip6_input::fast_path_len(b.first_chunk()?, b.len())
    }
}

/// Where a FIB value leads, in words for traces: a tunnel by its interface name rather
/// than its encoded value (`gtpu_tunnel0`, not 268435456).
pub(crate) fn trace_adj(adj: u32) -> String {
    match crate::tables::TunnelRef::decode(adj) {
        Some(t) => format!("into {}", t.if_name()),
        None if adj == crate::tables::ADJ_MISS => "no adjacency".into(),
        None if adj == crate::tables::ADJ_LOCAL => "local".into(),
        None => format!("adjacency {adj}"),
    }
}

pub(crate) fn trace_ip4(b: &[u8]) -> String {
    match wire::ipv4::Ipv4Packet::new_checked(b) {
        Ok(p) => format!("{} -> {} {} ttl {} len {}", p.src_addr(), p.dst_addr(), p.protocol(), p.ttl(), p.total_len()),
        Err(e) => format!("malformed IPv4: {e}"),
    }
}

pub(crate) fn trace_ip6(b: &[u8]) -> String {
    match wire::ipv6::Ipv6Packet::new_checked(b) {
        Ok(p) => format!("{} -> {} {} hlim {} plen {}", p.src_addr(), p.dst_addr(), p.next_header(), p.hop_limit(), p.payload_len()),
        Err(e) => format!("malformed IPv6: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 (or IPv6) header quoting protocol `proto` and 4 bytes after it: ports
    /// `sport` -> `dport` for UDP.
    fn quote(v6: bool, proto: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut q = if v6 { vec![0x60, 0, 0, 0, 0, 0, proto, 64] } else { vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto] };
        q.resize(if v6 { 40 } else { 20 }, 0);
        q.extend_from_slice(&sport.to_be_bytes());
        q.extend_from_slice(&dport.to_be_bytes());
        q
    }

    /// ESP in UDP is recognised by the port our outbound SAs send it from, which need not
    /// be a port ESP in UDP arrives on.
    #[test]
    fn an_error_quoting_esp_in_udp_is_known_by_the_sas_source_port() {
        let mut d = crate::tables::UdpDemux::default();
        d.ports.push((4500, crate::tables::UdpApp::Esp));
        d.esp_sources.push(4501);
        for v6 in [false, true] {
            assert!(quotes_esp(&quote(v6, 17, 4501, 4600), v6, &d), "from the SA's own source port");
            assert!(!quotes_esp(&quote(v6, 17, 4500, 4500), v6, &d), "from the receive port: no SA sends from it");
            assert!(!quotes_esp(&quote(v6, 17, 4600, 4501), v6, &d), "to the port, not from it");
            assert!(quotes_esp(&quote(v6, 50, 0, 0), v6, &d), "ESP");
            assert!(!quotes_esp(&quote(v6, 6, 4501, 4600), v6, &d), "TCP");
        }
        assert!(!quotes_esp(&quote(false, 17, 4501, 4600)[..21], false, &d), "cut short");
    }
}
