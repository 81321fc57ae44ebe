//! A GTP-U tunnel: what the operator configures ([`TunnelSpec`]) and what the dataplane
//! reads ([`Tunnel`]: the precomputed outer IP/UDP/GTP-U header and the per-packet
//! choices, in about 100 bytes so a million tunnels fit in a hundred megabytes). The UE
//! prefix is not in the entry: it is a route, and the router holds it.

use crate::nodes::{Ip4Outer, Ip6Outer, OuterFamily};
use engine::IfIndex;
pub use ip::outer::tos::Dscp;
use ip::outer::tos::Marking;
pub use ip::outer::{ChecksumMode, MtuPolicy};
use ip::tables::TunnelKind;
use ip::urpf::Urpf;
use ip::Prefix;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::checksum::{self, Checksum};
use wire::gtpu::{GtpuRepr, MessageType, PduSession, Qfi, Teid};

/// The UDP source port of encapsulated packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SrcPort {
    /// Always 2152.
    #[default]
    Fixed,
    /// A hash of the inner flow in 49152..=65535, so RSS and ECMP spread one tunnel's
    /// flows (TS 29.281 §4.4.2.0 leaves the source port to the sender).
    FlowHash,
}

impl SrcPort {
    /// The flow-hash ports' base: the hash's low 14 bits go below it.
    pub const FLOW_HASH_BASE: u16 = 0xc000;

    /// The flow-hash source port of an inner flow whose hash is `hash`.
    #[inline(always)]
    pub const fn flow_hash_port(hash: u32) -> u16 {
        SrcPort::FLOW_HASH_BASE | (hash as u16 & !SrcPort::FLOW_HASH_BASE)
    }

    /// The lowest and highest source port the tunnel's packets leave from (what an SPD
    /// sees of them).
    pub const fn range(self) -> (u16, u16) {
        match self {
            SrcPort::Fixed => (wire::gtpu::PORT, wire::gtpu::PORT),
            SrcPort::FlowHash => (SrcPort::FLOW_HASH_BASE, u16::MAX),
        }
    }
}

/// What a decapsulated packet is and where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecapNext {
    /// Inner IPv4, routed.
    #[default]
    Ip4,
    /// Inner IPv6, routed.
    Ip6,
    /// Inner IPv4 or IPv6 (an IPv4v6 PDU session), by the version field.
    Ip,
    /// Inner Ethernet frame (an Ethernet PDU session on N6), sent as-is out of this
    /// interface.
    Ethernet(IfIndex),
}

/// The PDU Session Container a tunnel adds on encap (TS 38.415).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PduDirection {
    /// DL PDU SESSION INFORMATION: the UPF towards the gNB (N3) — the default.
    #[default]
    Downlink,
    /// UL PDU SESSION INFORMATION: the gNB towards the UPF.
    Uplink,
}

/// A tunnel as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelSpec {
    /// Our endpoint: one of the gateway's interface addresses.
    pub local: IpAddr,
    pub remote: IpAddr,
    /// TEID the peer puts on packets to us (decap key with `local`).
    pub teid_in: u32,
    /// TEID we put on packets to the peer.
    pub teid_out: u32,
    /// Add a PDU Session Container with this QFI on encap.
    pub qfi: Option<Qfi>,
    pub pdu_direction: PduDirection,
    pub decap_next: DecapNext,
    /// Put a sequence number on G-PDUs (TS 29.281 §5.1: optional for G-PDUs).
    pub sequence: bool,
    pub checksum: ChecksumMode,
    /// Accept zero-checksum packets over IPv6 (RFC 6936); IPv4 always accepts.
    pub accept_zero_checksum: bool,
    pub src_port: SrcPort,
    /// Downlink route: inner packets to this prefix (the UE address) enter the tunnel.
    pub ue: Option<Prefix>,
    pub mtu: MtuPolicy,
    /// The reverse-path check of the inner packets it takes out (`ip::urpf`; strict:
    /// the route back to their source goes into this tunnel).
    pub urpf: Urpf,
    /// The outer DSCP: the inner packet's, or a fixed one (`ip::outer::tos`).
    pub dscp: Dscp,
}

impl TunnelSpec {
    /// A plain tunnel: G-PDUs without options, checksum as VPP does it (zero over IPv4,
    /// software over IPv6).
    pub fn new(local: IpAddr, remote: IpAddr, teid_in: u32, teid_out: u32) -> TunnelSpec {
        TunnelSpec {
            local,
            remote,
            teid_in,
            teid_out,
            qfi: None,
            pdu_direction: PduDirection::Downlink,
            decap_next: DecapNext::Ip4,
            sequence: false,
            checksum: if local.is_ipv6() { ChecksumMode::Software } else { ChecksumMode::Zero },
            accept_zero_checksum: false,
            src_port: SrcPort::Fixed,
            ue: None,
            mtu: MtuPolicy::default(),
            urpf: Urpf::Off,
            dscp: Dscp::Inherit,
        }
    }

    pub fn is_v6(&self) -> bool {
        self.local.is_ipv6()
    }

    /// Which encap node (and FIB tunnel kind) the outer family means.
    pub fn kind(&self) -> TunnelKind {
        if self.is_v6() {
            TunnelKind::Gtpu6
        } else {
            TunnelKind::Gtpu4
        }
    }
}

/// The longest rewrite: IPv6 (40) + UDP (8) + GTP-U with optional fields (12) + a PDU
/// Session Container with PPI (8).
pub const MAX_REWRITE: usize = 68;
/// Offset of the GTP-U header's optional fields in a tunnel without a container.
const UDP_LEN: usize = 8;

/// A tunnel as the dataplane reads it. `repr(C)` keeps the fields encap reads (the
/// rewrite, its lengths and modes, the pseudo-header sum) in the first 96 bytes, in the
/// order written, so two prefetches cover them.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Tunnel {
    /// Outer IP + UDP + GTP-U (+ extension) header with every length zero and the IPv4
    /// header checksum computed for that zero length, right-aligned: the header is the
    /// last `rewrite_len` bytes. Encap copies all `MAX_REWRITE` bytes into the headroom
    /// (a fixed-size copy the compiler inlines as a few vector moves, where a
    /// variable-length one is a `memcpy` call) and then starts the packet at the header.
    pub rewrite: [u8; MAX_REWRITE],
    pub rewrite_len: u8,
    /// Offset of the UDP header in `rewrite` (the outer IP header length).
    pub udp_at: u8,
    /// The outer traffic class from the inner one (the tunnel's DSCP policy); the
    /// template's own byte is 0.
    pub marking: Marking,
    pub live: bool,
    pub v6: bool,
    pub sequence: bool,
    pub checksum: ChecksumMode,
    pub accept_zero_checksum: bool,
    pub src_port: SrcPort,
    pub pdu_direction: PduDirection,
    pub qfi: u8,
    pub decap_next: DecapNext,
    pub teid_in: u32,
    /// The UDP pseudo-header sum of the addresses and protocol (lengths added per packet).
    pub pseudo: Checksum,
    pub mtu: MtuPolicy,
    pub urpf: Urpf,
}

impl Default for Tunnel {
    fn default() -> Self {
        Tunnel {
            rewrite: [0; MAX_REWRITE],
            rewrite_len: 0,
            udp_at: 0,
            marking: Marking::INHERIT,
            live: false,
            v6: false,
            sequence: false,
            checksum: ChecksumMode::Zero,
            accept_zero_checksum: false,
            src_port: SrcPort::Fixed,
            pdu_direction: PduDirection::Downlink,
            qfi: 0,
            decap_next: DecapNext::Ip4,
            teid_in: 0,
            pseudo: Checksum::new(),
            mtu: MtuPolicy::default(),
            urpf: Urpf::Off,
        }
    }
}

impl Tunnel {
    /// Precompute the tunnel's rewrite. The caller validated `spec` (same address family
    /// on both ends).
    pub fn build(spec: &TunnelSpec) -> Tunnel {
        let gtp = GtpuRepr {
            msg_type: MessageType::GPdu,
            teid: Teid(spec.teid_out),
            seq: spec.sequence.then_some(0),
            npdu: None,
            pdu_session: spec.qfi.map(|qfi| match spec.pdu_direction {
                PduDirection::Downlink => PduSession::Downlink { qfi, rqi: false, ppi: None },
                PduDirection::Uplink => PduSession::Uplink { qfi },
            }),
            udp_port: None,
            pdcp_number: None,
            payload_len: 0,
        };
        let mut t = Tunnel {
            live: true,
            v6: spec.is_v6(),
            sequence: spec.sequence,
            checksum: spec.checksum,
            accept_zero_checksum: spec.accept_zero_checksum || !spec.is_v6(),
            src_port: spec.src_port,
            pdu_direction: spec.pdu_direction,
            qfi: spec.qfi.map_or(0, |q| q.get()),
            decap_next: spec.decap_next,
            teid_in: spec.teid_in,
            mtu: spec.mtu,
            urpf: spec.urpf,
            marking: Marking::of(spec.dscp),
            ..Tunnel::default()
        };
        // The same outer header as every packet we originate (`Outer::emit_header`),
        // with its length left at zero for the encap node to add.
        let ip_len = match (spec.local, spec.remote) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                let n = Ip4Outer::emit_header(src, dst, 0, &mut t.rewrite);
                // Total length 0 in the template: the encap node adds the real one to
                // the checksum incrementally.
                t.rewrite[2..4].copy_from_slice(&[0, 0]);
                t.rewrite[10..12].copy_from_slice(&[0, 0]);
                let c = checksum::checksum(&t.rewrite[..n]);
                t.rewrite[10..12].copy_from_slice(&c.to_be_bytes());
                t.pseudo = Ip4Outer::pseudo(&src, &dst);
                n
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                t.pseudo = Ip6Outer::pseudo(&src, &dst);
                Ip6Outer::emit_header(src, dst, 0, &mut t.rewrite)
            }
            _ => 0,
        };
        let u = &mut t.rewrite[ip_len..ip_len + UDP_LEN];
        u[0..2].copy_from_slice(&wire::gtpu::PORT.to_be_bytes());
        u[2..4].copy_from_slice(&wire::gtpu::PORT.to_be_bytes());
        let gl = gtp.header_len();
        gtp.emit(&mut t.rewrite[ip_len + UDP_LEN..ip_len + UDP_LEN + gl]);
        t.udp_at = ip_len as u8;
        let rl = ip_len + UDP_LEN + gl;
        t.rewrite_len = rl as u8;
        t.rewrite.copy_within(0..rl, MAX_REWRITE - rl);
        t.rewrite[..MAX_REWRITE - rl].fill(0);
        t
    }

    /// The outer header (the meaningful end of `rewrite`).
    pub fn header(&self) -> &[u8] {
        &self.rewrite[MAX_REWRITE - self.rewrite_len as usize..]
    }

    /// What decap needs, packed into the TEID table slot next to the tunnel id: the
    /// decap-next kind (bits 0–1), accept-zero-checksum (bit 2), MSS clamping (bit 3),
    /// the reverse-path check (bits 4–5), and for Ethernet the outgoing interface (bits
    /// 16–31). Bits 6–15 stay clear ([`Tunnel::AUX_FREE`]): a node may mark the word there.
    pub fn decap_aux(&self) -> u32 {
        let (kind, tx) = match self.decap_next {
            DecapNext::Ip4 => (0, 0),
            DecapNext::Ip6 => (1, 0),
            DecapNext::Ip => (2, 0),
            DecapNext::Ethernet(i) => (3, i.get() as u32),
        };
        let urpf = match self.urpf {
            Urpf::Off => 0,
            Urpf::Loose => 1,
            Urpf::Strict => 2,
        };
        kind | (self.accept_zero_checksum as u32) << 2 | (self.mtu.mss_clamp as u32) << 3 | urpf << 4 | tx << 16
    }

    /// The bits [`Tunnel::decap_aux`] never sets.
    pub const AUX_FREE: u32 = 0xffc0;
    /// The bits that ask decap for more: MSS clamping, the reverse-path check.
    pub const AUX_MORE: u32 = 0x38;

    /// From [`Tunnel::decap_aux`]: does the tunnel clamp the MSS of SYNs leaving it?
    #[inline(always)]
    pub fn aux_mss_clamp(aux: u32) -> bool {
        aux & 8 != 0
    }

    /// From [`Tunnel::decap_aux`]: the check of the inner packets' sources.
    #[inline(always)]
    pub fn aux_urpf(aux: u32) -> Urpf {
        match (aux >> 4) & 3 {
            0 => Urpf::Off,
            1 => Urpf::Loose,
            _ => Urpf::Strict,
        }
    }

    /// Inverse of [`Tunnel::decap_aux`].
    #[inline(always)]
    pub fn decode_aux(aux: u32) -> (DecapNext, bool) {
        let next = match aux & 3 {
            0 => DecapNext::Ip4,
            1 => DecapNext::Ip6,
            2 => DecapNext::Ip,
            _ => DecapNext::Ethernet(IfIndex((aux >> 16) as u16)),
        };
        (next, aux & 4 != 0)
    }

    pub fn kind(&self) -> TunnelKind {
        if self.v6 {
            TunnelKind::Gtpu6
        } else {
            TunnelKind::Gtpu4
        }
    }

    /// The GTP-U header length of encapsulated packets.
    pub fn gtp_len(&self) -> usize {
        self.rewrite_len as usize - self.udp_at as usize - UDP_LEN
    }

    pub fn local(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&self.header()[8..24]).unwrap_or([0; 16])))
        } else {
            let h = self.header();
            IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15]))
        }
    }

    pub fn remote(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&self.header()[24..40]).unwrap_or([0; 16])))
        } else {
            let h = self.header();
            IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19]))
        }
    }

    pub fn teid_out(&self) -> u32 {
        let g = self.udp_at as usize + UDP_LEN + 4;
        let h = self.header();
        u32::from_be_bytes([h[g], h[g + 1], h[g + 2], h[g + 3]])
    }

    /// The spec this tunnel was built from, without its UE prefix (the router keeps
    /// that: `GtpuState::spec` adds it back).
    pub fn spec(&self) -> TunnelSpec {
        TunnelSpec {
            local: self.local(),
            remote: self.remote(),
            teid_in: self.teid_in,
            teid_out: self.teid_out(),
            // A container makes the GTP-U header longer than the 12 bytes of the
            // optional fields alone.
            qfi: Qfi::new(self.qfi).filter(|_| self.gtp_len() > 12),
            pdu_direction: self.pdu_direction,
            decap_next: self.decap_next,
            sequence: self.sequence,
            checksum: self.checksum,
            accept_zero_checksum: self.accept_zero_checksum && self.v6,
            src_port: self.src_port,
            ue: None,
            mtu: self.mtu,
            urpf: self.urpf,
            dscp: self.marking.dscp(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_round_trips_through_the_dataplane_entry() {
        let mut s = TunnelSpec::new("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap(), 100, 200);
        s.qfi = Qfi::new(9);
        s.sequence = true;
        let t = Tunnel::build(&s);
        assert_eq!(t.spec(), s);
        assert_eq!(t.rewrite_len, 20 + 8 + 12 + 4);
        let mut s6 = TunnelSpec::new("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap(), 1, 2);
        s6.accept_zero_checksum = true;
        let t6 = Tunnel::build(&s6);
        assert_eq!(t6.rewrite_len, 40 + 8 + 8);
        assert_eq!(t6.spec(), s6);
    }

    #[test]
    fn decap_aux_round_trips() {
        let mut s = TunnelSpec::new("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap(), 1, 2);
        for next in [DecapNext::Ip4, DecapNext::Ip6, DecapNext::Ip, DecapNext::Ethernet(IfIndex(0xffff))] {
            for zero in [false, true] {
                for (clamp, urpf) in [(false, Urpf::Off), (true, Urpf::Loose), (false, Urpf::Strict), (true, Urpf::Off)] {
                    s.decap_next = next;
                    s.accept_zero_checksum = zero;
                    s.mtu.mss_clamp = clamp;
                    s.urpf = urpf;
                    let aux = Tunnel::build(&s).decap_aux();
                    assert_eq!(Tunnel::decode_aux(aux), (next, zero));
                    assert_eq!((Tunnel::aux_mss_clamp(aux), Tunnel::aux_urpf(aux)), (clamp, urpf));
                    assert_eq!(aux & Tunnel::AUX_MORE != 0, clamp || urpf != Urpf::Off);
                    assert_eq!(aux & Tunnel::AUX_FREE, 0, "{aux:#x} sets a bit decap nodes mark");
                }
            }
        }
    }

    #[test]
    fn entry_stays_compact() {
        // A million of them must fit the memory budget (docs/PERFORMANCE.md).
        assert!(std::mem::size_of::<Tunnel>() <= 128, "{}", std::mem::size_of::<Tunnel>());
    }

    #[test]
    fn ipv4_template_checksum_is_valid_for_length_zero() {
        let t = Tunnel::build(&TunnelSpec::new("198.18.0.1".parse().unwrap(), "198.18.1.1".parse().unwrap(), 1, 2));
        assert!(checksum::verify(&t.header()[..20]));
    }
}
