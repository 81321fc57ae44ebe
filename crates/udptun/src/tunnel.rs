//! A UDP tunnel as configured ([`UdpTunnelSpec`]) and as the dataplane reads it
//! ([`Tunnel`]: the outer headers precomputed, with the offsets a packet patches).

use ip::outer::tos::{Dscp, Marking};
use ip::outer::{ChecksumMode, Ip4Outer, Ip6Outer, MtuPolicy, OuterFamily};
use ip::tables::TunnelKind;
use ip::urpf::Urpf;
use std::net::IpAddr;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use wire::checksum::Checksum;

/// How the inner packet is carried after the UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encap {
    /// A GUE variant 0 header naming the inner protocol (4 for IPv4, 41 for IPv6).
    Gue,
    /// A GRE header naming the inner EtherType (RFC 8086), with the tunnel's key if set.
    Gre,
    /// Nothing: the inner IPv4 or IPv6 packet itself (GUE variant 1, fou `ipproto 4/41`).
    Direct,
}

impl Encap {
    /// The port a tunnel of this kind uses unless configured (IANA: GUE 6080,
    /// GRE-in-UDP 4754); direct encapsulation has none.
    pub fn default_port(self) -> Option<u16> {
        match self {
            Encap::Gue => Some(6080),
            Encap::Gre => Some(wire::gre::UDP_PORT),
            Encap::Direct => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Encap::Gue => "gue",
            Encap::Gre => "gre",
            Encap::Direct => "direct",
        }
    }
}

impl std::str::FromStr for Encap {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "gue" => Ok(Encap::Gue),
            "gre" => Ok(Encap::Gre),
            "direct" => Ok(Encap::Direct),
            _ => Err(format!("{s:?}: expected gue, gre or direct")),
        }
    }
}

/// A tunnel as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpTunnelSpec {
    /// Our endpoint: one of the gateway's interface addresses.
    pub local: IpAddr,
    pub remote: IpAddr,
    pub encap: Encap,
    /// The UDP port packets are sent to, and the port we receive the tunnel's packets on
    /// (as Linux pairs `encap-dport` with `fou add port`).
    pub port: u16,
    /// Source ports: a hash of the inner flow spread over this range (inclusive).
    pub src_port_min: u16,
    pub src_port_max: u16,
    /// GRE key sent and required on receive (GRE encapsulation only).
    pub gre_key: Option<u32>,
    /// Send a GRE checksum (RFC 2784) over the GRE header and the inner packet. Received
    /// packets are taken with or without one; one present is verified.
    pub gre_checksum: bool,
    /// Send GRE sequence numbers (RFC 2890), one counter per tunnel shared by the
    /// workers. Received packets are taken with or without them, in any order.
    pub gre_sequence: bool,
    pub checksum: ChecksumMode,
    /// Accept zero-checksum packets over IPv6 (RFC 6936); IPv4 always accepts them.
    pub accept_zero_checksum: bool,
    /// Outer TTL / hop limit.
    pub ttl: u8,
    pub mtu: MtuPolicy,
    /// The reverse-path check of the inner packets it takes out (`ip::urpf`; strict:
    /// the route back to their source goes into this tunnel).
    pub urpf: Urpf,
    /// The outer DSCP: the inner packet's, or a fixed one (`ip::outer::tos`).
    pub dscp: Dscp,
}

impl UdpTunnelSpec {
    /// A tunnel with the defaults: the encapsulation's port, source ports from the
    /// dynamic range, zero checksum over IPv4 and software over IPv6, TTL 64.
    pub fn new(local: IpAddr, remote: IpAddr, encap: Encap, port: u16) -> UdpTunnelSpec {
        UdpTunnelSpec {
            local,
            remote,
            encap,
            port,
            src_port_min: 49152,
            src_port_max: 65535,
            gre_key: None,
            gre_checksum: false,
            gre_sequence: false,
            checksum: if local.is_ipv6() { ChecksumMode::Software } else { ChecksumMode::Zero },
            accept_zero_checksum: false,
            ttl: 64,
            mtu: MtuPolicy::default(),
            urpf: Urpf::Off,
            dscp: Dscp::Inherit,
        }
    }

    pub fn kind(&self) -> TunnelKind {
        if self.local.is_ipv6() {
            TunnelKind::Gue6
        } else {
            TunnelKind::Gue4
        }
    }
}

/// The longest outer header: IPv6 (40), UDP (8), GRE with a checksum, a key and a
/// sequence number (16).
pub const MAX_REWRITE: usize = 64;

/// The longest outer header of a [`Tunnel::plain`] one, which has no GRE checksum or
/// sequence number: IPv6 (40), UDP (8), GRE with a key (8).
pub const MAX_PLAIN_REWRITE: usize = 56;

/// A tunnel's GRE sequence number counter: the next number to send.
pub type GreSequence = Arc<AtomicU32>;

/// A tunnel as the dataplane reads it.
#[derive(Debug, Clone)]
pub struct Tunnel {
    /// The outer headers, right-aligned: the last `rewrite_len` bytes.
    pub rewrite: [u8; MAX_REWRITE],
    pub rewrite_len: u8,
    /// Where UDP starts within the outer headers (20 or 40).
    pub udp_at: u8,
    pub encap: Encap,
    pub checksum: ChecksumMode,
    pub accept_zero_checksum: bool,
    /// The outer traffic class from the inner one (the tunnel's DSCP policy); the
    /// template's own byte is 0.
    pub marking: Marking,
    /// The UDP pseudo-header sum without the length.
    pub pseudo: Checksum,
    /// The outer IPv4 header's ones'-complement sum with a zero total length, folded
    /// (not complemented): the checksum of a packet of length `n` is `!(sum + n)`
    /// folded, without reading the template's field back.
    pub ip_sum: u32,
    pub src_port_min: u16,
    /// Ports in the source range.
    pub src_port_span: u32,
    pub gre_key: Option<u32>,
    /// Fill the GRE checksum field (at `udp_at + 8 + 4`) per packet.
    pub gre_checksum: bool,
    /// The counter the GRE sequence numbers come from, and where the field is within
    /// the GRE header.
    pub gre_sequence: Option<(GreSequence, u8)>,
    pub mtu: MtuPolicy,
    /// Encap may take its fast path: a zero outer checksum, no GRE checksum or
    /// sequence number, no MTU cap or MSS clamping to apply, so a packet that fits the
    /// link needs only the template.
    pub plain: bool,
    pub urpf: Urpf,
}

impl Tunnel {
    /// The tunnel `s` compiled, with a GRE sequence counter of its own if it sends
    /// sequence numbers (see [`Tunnel::counting_on`]).
    pub fn new(s: &UdpTunnelSpec) -> Tunnel {
        let mut hdr = [0u8; MAX_REWRITE];
        let (ip_len, pseudo) = match (s.local, s.remote) {
            (IpAddr::V4(l), IpAddr::V4(r)) => (Ip4Outer::emit_header(l, r, 0, &mut hdr), Ip4Outer::pseudo(&l, &r)),
            (IpAddr::V6(l), IpAddr::V6(r)) => (Ip6Outer::emit_header(l, r, 0, &mut hdr), Ip6Outer::pseudo(&l, &r)),
            _ => unreachable!("families checked by UdpTunState::validate"),
        };
        // TTL / hop limit as configured. The IPv4 header checksum is computed with a
        // zero total length, which encap adds incrementally.
        if ip_len == 20 {
            hdr[8] = s.ttl;
            hdr[2..4].copy_from_slice(&[0, 0]);
            hdr[10..12].copy_from_slice(&[0, 0]);
            let c = wire::checksum::checksum(&hdr[..20]);
            hdr[10..12].copy_from_slice(&c.to_be_bytes());
        } else {
            hdr[7] = s.ttl;
        }
        let u = ip_len;
        hdr[u..u + 2].copy_from_slice(&s.src_port_min.to_be_bytes());
        hdr[u + 2..u + 4].copy_from_slice(&s.port.to_be_bytes());
        let e = u + 8;
        let gre = wire::gre::GreRepr { protocol: 0x0800, checksum: s.gre_checksum, key: s.gre_key, sequence: s.gre_sequence.then_some(0) };
        let encap_len = match s.encap {
            Encap::Gue => {
                wire::gue::GueRepr::data(wire::IpProtocol::IpIp).emit(&mut hdr[e..]);
                wire::gue::BASE_LEN
            }
            Encap::Gre => {
                gre.emit(&mut hdr[e..]);
                gre.buffer_len()
            }
            Encap::Direct => 0,
        };
        let len = e + encap_len;
        // The sequence number is the GRE header's last field.
        let gre_sequence = (s.encap == Encap::Gre && s.gre_sequence).then(|| (GreSequence::default(), (encap_len - 4) as u8));
        let gre_checksum = s.encap == Encap::Gre && s.gre_checksum;
        let mut rewrite = [0u8; MAX_REWRITE];
        rewrite[MAX_REWRITE - len..].copy_from_slice(&hdr[..len]);
        Tunnel {
            rewrite,
            rewrite_len: len as u8,
            udp_at: u as u8,
            encap: s.encap,
            checksum: s.checksum,
            accept_zero_checksum: s.accept_zero_checksum,
            marking: Marking::of(s.dscp),
            pseudo,
            ip_sum: if ip_len == 20 { !u16::from_be_bytes([hdr[10], hdr[11]]) as u32 } else { 0 },
            src_port_min: s.src_port_min,
            src_port_span: s.src_port_max as u32 - s.src_port_min as u32 + 1,
            gre_key: s.gre_key,
            gre_checksum,
            plain: s.checksum == ChecksumMode::Zero
                && s.mtu.mtu == 0
                && !s.mtu.mss_clamp
                && !gre_checksum
                && gre_sequence.is_none()
                && len <= MAX_PLAIN_REWRITE,
            gre_sequence,
            mtu: s.mtu,
            urpf: s.urpf,
        }
    }

    /// The same tunnel taking its GRE sequence numbers from `counter`: the control
    /// plane keeps one per tunnel across table rebuilds, so a republished table does
    /// not start the numbers again (a receiver checking the order would drop them).
    pub fn counting_on(mut self, counter: &GreSequence) -> Tunnel {
        if let Some((c, _)) = &mut self.gre_sequence {
            *c = counter.clone();
        }
        self
    }

    /// The source port for an inner flow hash.
    #[inline(always)]
    pub fn src_port(&self, flow_hash: u32) -> u16 {
        src_port(self.src_port_min, self.src_port_span, flow_hash)
    }
}

/// The source port for an inner flow hash in the range of `span` ports from `min`.
#[inline(always)]
pub fn src_port(min: u16, span: u32, flow_hash: u32) -> u16 {
    (min as u32 + engine::hash::reduce(flow_hash, span)) as u16
}
