//! DSCP and ECN across a tunnel, for every tunnel alike.
//!
//! Entering a tunnel, the outer header takes the inner packet's traffic class byte whole:
//! its DSCP by RFC 2983's uniform model (what RFC 4301 §5.1.2.1 asks of IPsec tunnels)
//! and its ECN by RFC 6040's normal mode, so QoS classes and congestion marks are seen
//! by the routers between the tunnel's ends. Leaving one, RFC 6040 §4.2 combines the
//! outer ECN into the inner packet: a CE mark that a router on the outer path set
//! reaches the inner packet's receiver, and an outer CE over an inner packet that
//! cannot carry one is dropped, since forwarding it would lose the congestion signal.
//! The inner DSCP is left as the sender set it.
//!
//! A tunnel may instead send one DSCP of its own ([`Dscp::Fixed`]: RFC 2983's pipe
//! model, the inner marking kept for the far side while the outer path sees the
//! tunnel's class), and a UPF's FAR may set some DSCP bits (PFCP's Transport Level
//! Marking). Both are a [`Marking`]: the inner byte's bits to keep and the bits to add,
//! worked out once per tunnel, so encapsulation costs the same two operations whatever
//! the policy. The ECN field is always the inner packet's (RFC 6040's normal mode), so
//! congestion marks keep reaching the receiver under every model.

use wire::checksum;

/// The ECN field's code points (RFC 3168 §5).
pub const NOT_ECT: u8 = 0b00;
pub const ECT1: u8 = 0b01;
pub const ECT0: u8 = 0b10;
pub const CE: u8 = 0b11;

/// The DSCP (RFC 2474) a tunnel sends on its outer header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dscp {
    /// The inner packet's (RFC 2983's uniform model; the default).
    #[default]
    Inherit,
    /// This one, 0 to 63, whatever the inner packet's (the pipe model).
    Fixed(u8),
}

/// Why a DSCP setting was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DscpError(pub String);

impl std::fmt::Display for DscpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: expected \"inherit\" or a DSCP 0 to 63", self.0)
    }
}

impl std::error::Error for DscpError {}

impl Dscp {
    /// `Fixed(n)`, if `n` is a DSCP (6 bits).
    pub fn fixed(n: u64) -> Result<Dscp, DscpError> {
        match u8::try_from(n) {
            Ok(d) if d <= 63 => Ok(Dscp::Fixed(d)),
            _ => Err(DscpError(n.to_string())),
        }
    }
}

impl std::str::FromStr for Dscp {
    type Err = DscpError;
    fn from_str(s: &str) -> Result<Dscp, DscpError> {
        match s {
            "inherit" => Ok(Dscp::Inherit),
            _ => s.parse::<u64>().map_err(|_| DscpError(format!("{s:?}"))).and_then(Dscp::fixed),
        }
    }
}

impl std::fmt::Display for Dscp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dscp::Inherit => f.write_str("inherit"),
            Dscp::Fixed(d) => write!(f, "{d}"),
        }
    }
}

/// `"inherit"` or the number, as the config file and the API write it.
impl serde::Serialize for Dscp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Dscp::Inherit => s.serialize_str("inherit"),
            Dscp::Fixed(d) => s.serialize_u8(*d),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Dscp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dscp, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Dscp;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("\"inherit\" or a DSCP 0 to 63")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Dscp, E> {
                Dscp::fixed(n).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Dscp, E> {
                u64::try_from(n).map_err(|_| E::custom(DscpError(n.to_string()))).and_then(|n| self.visit_u64(n))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Dscp, E> {
                s.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Worked examples of the two models, as (policy, inner traffic class, outer traffic
/// class): the tunnels' encap tests check the headers they write against these, each
/// case written out here once rather than in every tunnel's test.
pub const DSCP_POLICY_EXAMPLES: [(Dscp, u8, u8); 6] = [
    (Dscp::Inherit, 10 << 2 | ECT0, 10 << 2 | ECT0),
    (Dscp::Inherit, 46 << 2 | CE, 46 << 2 | CE),
    (Dscp::Fixed(46), 10 << 2 | ECT0, 46 << 2 | ECT0),
    (Dscp::Fixed(46), 63 << 2 | CE, 46 << 2 | CE),
    (Dscp::Fixed(0), 63 << 2 | ECT1, ECT1),
    (Dscp::Fixed(63), NOT_ECT, 63 << 2),
];

/// What a tunnel does to the inner traffic class byte to make the outer one: keeps the
/// bits of `keep` and sets those of `set` (never ECN bits: `keep` has both, `set`
/// neither). Built once per tunnel, applied per packet in two operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marking {
    pub keep: u8,
    pub set: u8,
}

impl Default for Marking {
    fn default() -> Self {
        Marking::INHERIT
    }
}

impl Marking {
    /// The inner byte whole (the uniform model).
    pub const INHERIT: Marking = Marking { keep: 0xff, set: 0 };

    /// A tunnel's DSCP policy.
    pub const fn of(d: Dscp) -> Marking {
        match d {
            Dscp::Inherit => Marking::INHERIT,
            Dscp::Fixed(d) => Marking { keep: CE, set: (d & 0x3f) << 2 },
        }
    }

    /// PFCP's Transport Level Marking (TS 29.244 §8.2.12: ToS / Traffic Class and its
    /// mask): the DSCP bits of the mask set to the value's. A mask of 0 (some SMFs send
    /// the value alone) is taken as the whole DSCP: a marking that set no bit would not
    /// have been sent.
    pub const fn transport_level(tos: u8, mask: u8) -> Marking {
        let m = if mask == 0 { 0xfc } else { mask & 0xfc };
        Marking { keep: !m, set: tos & m }
    }

    /// The outer traffic class for an inner packet whose own is `inner`.
    #[inline(always)]
    pub const fn apply(self, inner: u8) -> u8 {
        (inner & self.keep) | self.set
    }

    /// The policy this marking came from by [`Marking::of`] (a partial one, which only
    /// a Transport Level Marking makes, reads as its DSCP).
    pub const fn dscp(self) -> Dscp {
        if self.keep == 0xff {
            Dscp::Inherit
        } else {
            Dscp::Fixed(self.set >> 2)
        }
    }
}

/// The traffic class byte (DSCP << 2 | ECN) of the IPv4 or IPv6 header at the start of
/// `b`; 0 for anything else (an Ethernet frame in an Ethernet PDU session).
#[inline(always)]
pub fn traffic_class(b: &[u8]) -> u8 {
    match b.first_chunk::<2>() {
        Some(&[v, t]) if v >> 4 == 4 => t,
        Some(&[v, t]) if v >> 4 == 6 => (v << 4) | (t >> 4),
        _ => 0,
    }
}

/// The ECN field of the IPv4 (`v6` false) or IPv6 header at the start of `b`, its family
/// known: what a decapsulating node reads of the outer header before stripping it.
#[inline(always)]
pub fn ecn(b: &[u8], v6: bool) -> u8 {
    match b.get(1) {
        Some(t) if v6 => (t >> 4) & CE,
        Some(t) => t & CE,
        None => NOT_ECT,
    }
}

/// Set the traffic class of the IPv6 header at the start of `h` (version and flow label
/// kept).
#[inline(always)]
pub fn set_ipv6_traffic_class(h: &mut [u8], tc: u8) {
    if let Some(w) = h.first_chunk_mut::<2>() {
        w[0] = (w[0] & 0xf0) | (tc >> 4);
        w[1] = (w[1] & 0x0f) | (tc << 4);
    }
}

/// Set the TOS byte of the IPv4 header at the start of `h`, its checksum patched.
#[inline(always)]
pub fn set_ipv4_tos(h: &mut [u8], tos: u8) {
    if let Some(w) = h.first_chunk_mut::<12>() {
        let old = u16::from_be_bytes([w[0], w[1]]);
        w[1] = tos;
        let c = checksum::update16(u16::from_be_bytes([w[10], w[11]]), old, u16::from_be_bytes([w[0], tos]));
        w[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// Set the traffic class of the IPv4 (checksum patched) or IPv6 header at the start of
/// `h`; nothing for anything else.
#[inline(always)]
pub fn set_traffic_class(h: &mut [u8], tc: u8) {
    match h.first().map(|v| v >> 4) {
        Some(4) => set_ipv4_tos(h, tc),
        Some(6) => set_ipv6_traffic_class(h, tc),
        _ => {}
    }
}

/// What decapsulation did to the inner packet's ECN field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcnDecap {
    /// Left as it was (the common case: the outer field was Not-ECT or ECT(0), or said
    /// nothing new).
    Unchanged,
    /// The outer header's CE (or ECT(1)) copied in.
    Marked,
    /// The outer header is CE and the inner packet is Not-ECT: to be dropped.
    Drop,
}

/// RFC 6040 §4.2: combine `outer_ecn` (the outer header's ECN field, as read before it
/// was stripped) into the inner IPv4 or IPv6 packet `buf` now holds.
#[inline(always)]
pub fn decap_ecn(outer_ecn: u8, buf: &mut engine::Buffer) -> EcnDecap {
    // Not-ECT and ECT(0) outer fields change nothing in the table: one test of one bit,
    // before the buffer's bytes are even asked for.
    if outer_ecn & ECT1 == 0 {
        return EcnDecap::Unchanged;
    }
    combine_ecn(outer_ecn, buf.bytes_mut())
}

/// [`decap_ecn`]'s table for the inner packet at the start of `inner`, any outer field.
#[cold]
#[inline(never)]
pub fn combine_ecn(outer_ecn: u8, inner: &mut [u8]) -> EcnDecap {
    let outer = outer_ecn & CE;
    if !matches!(inner.first().map(|v| v >> 4), Some(4 | 6)) {
        return EcnDecap::Unchanged;
    }
    let tc = traffic_class(inner);
    let ecn = match (outer, tc & CE) {
        (CE, NOT_ECT) => return EcnDecap::Drop,
        (CE, CE) | (ECT1, ECT1 | CE | NOT_ECT) => return EcnDecap::Unchanged,
        (CE, _) => CE,
        (ECT1, ECT0) => ECT1,
        _ => return EcnDecap::Unchanged,
    };
    set_traffic_class(inner, (tc & !CE) | ecn);
    EcnDecap::Marked
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ipv4(tos: u8) -> Vec<u8> {
        let mut h = vec![0x45, tos, 0, 20, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 19, 0, 2];
        let c = checksum::checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    fn ipv6(tc: u8, flow: u32) -> Vec<u8> {
        let mut h = vec![0u8; 40];
        h[..4].copy_from_slice(&((6u32 << 28) | ((tc as u32) << 20) | (flow & 0xfffff)).to_be_bytes());
        h[6] = 17;
        h[7] = 64;
        h
    }

    /// RFC 6040 §4.2, Figure 4, row by row: the inner field (rows) under each outer
    /// field (columns: Not-ECT, ECT(0), ECT(1), CE); `None` is drop.
    const TABLE: [[Option<u8>; 4]; 4] = [
        // inner Not-ECT
        [Some(NOT_ECT), Some(NOT_ECT), Some(NOT_ECT), None],
        // inner ECT(0)
        [Some(ECT0), Some(ECT0), Some(ECT1), Some(CE)],
        // inner ECT(1)
        [Some(ECT1), Some(ECT1), Some(ECT1), Some(CE)],
        // inner CE
        [Some(CE), Some(CE), Some(CE), Some(CE)],
    ];
    const ORDER: [u8; 4] = [NOT_ECT, ECT0, ECT1, CE];

    #[test]
    fn decapsulation_follows_rfc_6040_table_over_both_families() {
        for (row, &inner) in ORDER.iter().enumerate() {
            for (col, &outer) in ORDER.iter().enumerate() {
                let want = TABLE[row][col];
                for dscp in [0u8, 46, 63] {
                    let tc = dscp << 2 | inner;
                    let mut p4 = ipv4(tc);
                    let mut p6 = ipv6(tc, 0xabcde);
                    let r4 = combine_ecn(outer, &mut p4);
                    let r6 = combine_ecn(outer, &mut p6);
                    assert_eq!(r4, r6);
                    match want {
                        None => assert_eq!(r4, EcnDecap::Drop, "inner {inner} outer {outer}"),
                        Some(e) => {
                            assert_ne!(r4, EcnDecap::Drop);
                            assert_eq!(r4 == EcnDecap::Marked, e != inner, "inner {inner} outer {outer}");
                            assert_eq!(p4[1], dscp << 2 | e, "inner {inner} outer {outer}");
                            assert!(checksum::verify(&p4), "IPv4 header checksum after the mark");
                            assert_eq!(traffic_class(&p6), dscp << 2 | e);
                            assert_eq!(u32::from_be_bytes([p6[0], p6[1], p6[2], p6[3]]) & 0xf00f_ffff, 0x6000_0000 | 0xabcde);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn not_ip_is_left_alone() {
        let mut eth = vec![0x02u8; 60];
        assert_eq!(combine_ecn(CE, &mut eth), EcnDecap::Unchanged);
        assert_eq!(eth, vec![0x02u8; 60]);
        assert_eq!(combine_ecn(CE, &mut []), EcnDecap::Unchanged);
        assert_eq!(traffic_class(&[0x45]), 0);
    }

    #[test]
    fn dscp_policy_reads_and_writes() {
        assert_eq!("inherit".parse(), Ok(Dscp::Inherit));
        assert_eq!("46".parse(), Ok(Dscp::Fixed(46)));
        assert_eq!("0".parse(), Ok(Dscp::Fixed(0)));
        assert_eq!("63".parse(), Ok(Dscp::Fixed(63)));
        for bad in ["64", "-1", "ef", "", "Inherit", "256"] {
            let e = bad.parse::<Dscp>().unwrap_err().to_string();
            assert!(e.ends_with("expected \"inherit\" or a DSCP 0 to 63"), "{bad}: {e}");
        }
        assert_eq!(Dscp::fixed(300).unwrap_err().to_string(), "300: expected \"inherit\" or a DSCP 0 to 63");
        for d in [Dscp::Inherit, Dscp::Fixed(0), Dscp::Fixed(46), Dscp::Fixed(63)] {
            assert_eq!(d.to_string().parse(), Ok(d));
            assert_eq!(Marking::of(d).dscp(), d);
        }
    }

    #[test]
    fn markings_keep_ecn_and_set_dscp() {
        for (d, inner, outer) in DSCP_POLICY_EXAMPLES {
            assert_eq!(Marking::of(d).apply(inner), outer, "{d:?} inner {inner:#x}");
        }
        for inner in 0..=255u8 {
            assert_eq!(Marking::INHERIT.apply(inner), inner);
            assert_eq!(Marking::of(Dscp::Inherit).apply(inner), inner);
            for d in [0u8, 10, 46, 63] {
                assert_eq!(Marking::of(Dscp::Fixed(d)).apply(inner), d << 2 | (inner & CE), "inner {inner:#x} dscp {d}");
            }
            // A Transport Level Marking of the whole DSCP (mask 0xfc, or 0: the value
            // alone), and of some of its bits.
            assert_eq!(Marking::transport_level(46 << 2, 0xfc).apply(inner), 46 << 2 | (inner & CE));
            assert_eq!(Marking::transport_level(46 << 2 | 3, 0).apply(inner), 46 << 2 | (inner & CE));
            assert_eq!(Marking::transport_level(0xe0, 0xe3).apply(inner), 0xe0 | (inner & 0x1f));
        }
    }

    proptest! {
        #[test]
        fn traffic_class_round_trips(tc in any::<u8>(), flow in any::<u32>(), tos in any::<u8>()) {
            let mut p6 = ipv6(0, flow);
            set_traffic_class(&mut p6, tc);
            prop_assert_eq!(traffic_class(&p6), tc);
            prop_assert_eq!(p6[0] >> 4, 6);
            prop_assert_eq!(u32::from_be_bytes([p6[0], p6[1], p6[2], p6[3]]) & 0xfffff, flow & 0xfffff);
            let mut p4 = ipv4(tos);
            set_traffic_class(&mut p4, tc);
            prop_assert_eq!(traffic_class(&p4), tc);
            prop_assert!(checksum::verify(&p4));
        }
    }
}
