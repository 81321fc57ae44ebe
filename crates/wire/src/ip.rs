//! Numbers shared by IPv4 and IPv6: the protocol / next-header registry.

/// IANA "Assigned Internet Protocol Numbers", the values vecgate acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    HopByHop,
    Icmp,
    IpIp,
    Tcp,
    Udp,
    Ipv6,
    Ipv6Route,
    Ipv6Frag,
    Gre,
    Esp,
    Ah,
    Icmpv6,
    Ipv6NoNxt,
    Ipv6Opts,
    Sctp,
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    #[inline(always)]
    fn from(v: u8) -> Self {
        match v {
            0 => IpProtocol::HopByHop,
            1 => IpProtocol::Icmp,
            4 => IpProtocol::IpIp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            41 => IpProtocol::Ipv6,
            43 => IpProtocol::Ipv6Route,
            44 => IpProtocol::Ipv6Frag,
            47 => IpProtocol::Gre,
            50 => IpProtocol::Esp,
            51 => IpProtocol::Ah,
            58 => IpProtocol::Icmpv6,
            59 => IpProtocol::Ipv6NoNxt,
            60 => IpProtocol::Ipv6Opts,
            132 => IpProtocol::Sctp,
            o => IpProtocol::Unknown(o),
        }
    }
}

impl From<IpProtocol> for u8 {
    #[inline(always)]
    fn from(v: IpProtocol) -> u8 {
        match v {
            IpProtocol::HopByHop => 0,
            IpProtocol::Icmp => 1,
            IpProtocol::IpIp => 4,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Ipv6 => 41,
            IpProtocol::Ipv6Route => 43,
            IpProtocol::Ipv6Frag => 44,
            IpProtocol::Gre => 47,
            IpProtocol::Esp => 50,
            IpProtocol::Ah => 51,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Ipv6NoNxt => 59,
            IpProtocol::Ipv6Opts => 60,
            IpProtocol::Sctp => 132,
            IpProtocol::Unknown(o) => o,
        }
    }
}

impl core::fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        match self {
            IpProtocol::Unknown(n) => write!(f, "proto-{n}"),
            // The IANA keywords (tcpdump's words where it has one), never Rust's names.
            IpProtocol::HopByHop => f.write_str("hopopts"),
            IpProtocol::Icmp => f.write_str("icmp"),
            IpProtocol::IpIp => f.write_str("ipip"),
            IpProtocol::Tcp => f.write_str("tcp"),
            IpProtocol::Udp => f.write_str("udp"),
            IpProtocol::Ipv6 => f.write_str("ipv6"),
            IpProtocol::Ipv6Route => f.write_str("ipv6-route"),
            IpProtocol::Ipv6Frag => f.write_str("ipv6-frag"),
            IpProtocol::Gre => f.write_str("gre"),
            IpProtocol::Esp => f.write_str("esp"),
            IpProtocol::Ah => f.write_str("ah"),
            IpProtocol::Icmpv6 => f.write_str("icmp6"),
            IpProtocol::Ipv6NoNxt => f.write_str("ipv6-nonxt"),
            IpProtocol::Ipv6Opts => f.write_str("ipv6-opts"),
            IpProtocol::Sctp => f.write_str("sctp"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn protocols_print_as_words_never_as_rust_names() {
        let words: Vec<String> = [0u8, 4, 41, 43, 44, 47, 50, 51, 59, 60, 200].map(|n| IpProtocol::from(n).to_string()).to_vec();
        assert_eq!(
            words,
            ["hopopts", "ipip", "ipv6", "ipv6-route", "ipv6-frag", "gre", "esp", "ah", "ipv6-nonxt", "ipv6-opts", "proto-200"]
        );
    }

    #[test]
    fn every_byte_roundtrips() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(IpProtocol::from(v)), v);
        }
    }
}
