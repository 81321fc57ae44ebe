//! Services and backends as the control plane states them (Kubernetes' Service and
//! EndpointSlice terms), validated before anything is built from them. Every error
//! names the field and what was expected.

use crate::maglev::{is_prime, MAX_TABLE_SIZE};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    /// SCTP (NGAP, Diameter …): associations balanced as TCP connections are, the
    /// CRC32c recomputed after translation (`nat`).
    Sctp,
}

impl Protocol {
    /// The IP protocol number.
    pub const fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub const fn from_number(n: u8) -> Option<Protocol> {
        match n {
            6 => Some(Protocol::Tcp),
            17 => Some(Protocol::Udp),
            132 => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The name the config and `show lb` use.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How clients reach the service (Kubernetes' Service `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceType {
    /// A virtual address inside the cluster: `vip:port`.
    ClusterIp,
    /// `port` on every local address of the node (the `vip` names the family only, and
    /// is not set: `node_port_family` says which).
    NodePort,
    /// An external address, announced elsewhere: `vip:port`.
    LoadBalancer,
}

/// Who answers traffic from outside (Kubernetes' `externalTrafficPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TrafficPolicy {
    /// Any backend; the source is translated to the node's address so replies come back
    /// through the node.
    #[default]
    Cluster,
    /// Local backends only, the client's address preserved.
    Local,
}

/// `sessionAffinity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Affinity {
    #[default]
    None,
    /// Every connection from one client address goes to one backend while the client
    /// was seen within `timeout_s` (Kubernetes' default: 10 800 s).
    ClientIp { timeout_s: u32 },
}

/// The default `sessionAffinityConfig.clientIP.timeoutSeconds`.
pub const DEFAULT_AFFINITY_TIMEOUT_S: u32 = 10_800;
/// Kubernetes' bound on the affinity timeout (one day).
pub const MAX_AFFINITY_TIMEOUT_S: u32 = 86_400;

/// How a client's packet reaches the chosen backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Forwarding {
    /// kube-proxy's: the destination translated to the backend (`lbN-nat`), replies
    /// translated back on their way through the node.
    #[default]
    Nat,
    /// Direct server return (Katran's, VPP lb's): the client's packet unchanged inside
    /// an outer IP header to the backend (IP-in-IP, protocol 4 or 41), which holds the
    /// service address itself and answers the client directly (`lbN-nat` encapsulates).
    Ipip,
    /// The same inside UDP and a GUE header (draft-ietf-intarea-gue, variant 0), the
    /// source port from the flow hash so the backend's NIC spreads flows by RSS.
    Gue,
    /// The same inside GRE (RFC 2784, protocol 47; VPP lb's `lb4-gre4`).
    Gre,
}

impl Forwarding {
    /// Encapsulated: the backend answers the client directly.
    pub const fn is_encap(self) -> bool {
        !matches!(self, Forwarding::Nat)
    }

    pub const fn name(self) -> &'static str {
        match self {
            Forwarding::Nat => "nat",
            Forwarding::Ipip => "ipip",
            Forwarding::Gue => "gue",
            Forwarding::Gre => "gre",
        }
    }
}

impl std::str::FromStr for Forwarding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "nat" => Ok(Forwarding::Nat),
            "ipip" => Ok(Forwarding::Ipip),
            "gue" => Ok(Forwarding::Gue),
            "gre" => Ok(Forwarding::Gre),
            _ => Err(format!("{s:?}: expected nat, ipip, gue or gre")),
        }
    }
}

/// The UDP port GUE-encapsulated services send to unless configured (the port
/// `udptun` uses for GUE; GUE has no IANA port).
pub const DEFAULT_GUE_PORT: u16 = 6080;

/// An EndpointSlice endpoint's conditions. `ready`: takes new connections.
/// `serving`: would, were it not terminating. `terminating`: going away; keeps its
/// connections, takes new ones only when the service has no ready backend (Kubernetes'
/// `ProxyTerminatingEndpoints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conditions {
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

impl Default for Conditions {
    fn default() -> Self {
        Conditions { ready: true, serving: true, terminating: false }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    pub addr: IpAddr,
    pub port: u16,
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default)]
    pub conditions: Conditions,
    /// On this node (for `externalTrafficPolicy: Local`).
    #[serde(default = "default_local")]
    pub local: bool,
    /// Hinted for other zones than this node's (Kubernetes' topology-aware routing): while
    /// a ready backend of the service is not, new connections go to those only; its own
    /// connections stay, as a terminating backend's do. Omitted when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub other_zone: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn default_weight() -> u32 {
    1
}
fn default_local() -> bool {
    true
}

/// The largest backend weight (Maglev turns are taken in units of the largest weight;
/// a bound keeps the fill's rounds short).
pub const MAX_WEIGHT: u32 = 1000;

impl BackendSpec {
    pub fn new(addr: IpAddr, port: u16) -> Self {
        BackendSpec { addr, port, weight: 1, conditions: Conditions::default(), local: true, other_zone: false }
    }

    /// The backend's Maglev identity: its address and port (the same backend keeps its
    /// slots whatever else changes).
    pub fn maglev_id(&self) -> u64 {
        let a = match self.addr {
            IpAddr::V4(a) => u32::from(a) as u64,
            IpAddr::V6(a) => {
                let o = u128::from(a);
                (o as u64) ^ ((o >> 64) as u64).rotate_left(17)
            }
        };
        a.rotate_left(16) ^ self.port as u64
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// `namespace/name:port-name`, as the operator knows it; unique.
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ServiceType,
    /// ClusterIP or LoadBalancer address; for NodePort, the unspecified address of the
    /// family (`0.0.0.0` or `::`).
    pub vip: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    #[serde(default)]
    pub backends: Vec<BackendSpec>,
    #[serde(default)]
    pub traffic_policy: TrafficPolicy,
    #[serde(default)]
    pub affinity: Affinity,
    /// Maglev table size, prime; 0 for the default (grown to 100 slots per backend).
    #[serde(default)]
    pub table_size: u32,
    /// NAT (default) or an encapsulation to the backend (direct server return).
    #[serde(default)]
    pub forwarding: Forwarding,
    /// The UDP destination port of `forwarding = "gue"`; 0 for [`DEFAULT_GUE_PORT`].
    #[serde(default)]
    pub gue_port: u16,
    /// Kubernetes' `loadBalancerSourceRanges`: the sources a `load_balancer` service takes
    /// packets from, each a prefix of the `vip`'s family; empty (the default): every
    /// source. A packet from elsewhere is dropped (`source-not-allowed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_ranges: Vec<SourceRange>,
}

/// One of a service's `source_ranges`: a prefix with its host bits clear, written
/// `198.18.50.0/24` or `2001:db8:50::/48` (in the config, the API and `show lb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceRange(pub ip::Prefix);

impl SourceRange {
    /// The range of `len` bits that holds `addr`, host bits cleared (`len` beyond the
    /// family's is the family's).
    pub fn covering(addr: IpAddr, len: u8) -> SourceRange {
        SourceRange(ip::Prefix::covering(addr, len))
    }

    pub fn is_ipv4(&self) -> bool {
        self.0.network().is_ipv4()
    }

    /// `s` as a range, or what is wrong with it and what was expected (the config's,
    /// the API's and the CLI's words alike).
    pub fn parse_or_say(s: &str) -> Result<SourceRange, String> {
        s.parse().map_err(|e| format!("{s:?}: {e}: expected a prefix such as 198.18.50.0/24 or 2001:db8:50::/48"))
    }
}

impl std::str::FromStr for SourceRange {
    type Err = ip::prefix::PrefixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(SourceRange)
    }
}

impl std::fmt::Display for SourceRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for SourceRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SourceRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        SourceRange::parse_or_say(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// What is wrong with a service or backend, naming the field and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("name: expected a non-empty name of at most 253 characters")]
    Name,
    #[error("vip: {0} for a {1} service: expected {2}")]
    Vip(IpAddr, &'static str, &'static str),
    #[error("port: expected 1 to 65535")]
    Port,
    #[error("table_size: {0}: expected 0 (default) or a prime from 101 to {MAX_TABLE_SIZE}")]
    TableSize(u32),
    #[error("affinity.timeout_s: {0}: expected 1 to {MAX_AFFINITY_TIMEOUT_S}")]
    AffinityTimeout(u32),
    #[error("backends[{0}].addr: {1}: expected a unicast address of the service's family")]
    BackendAddr(usize, IpAddr),
    #[error("backends[{0}].port: expected 1 to 65535")]
    BackendPort(usize),
    #[error("backends[{0}].weight: {1}: expected 1 to {MAX_WEIGHT}")]
    BackendWeight(usize, u32),
    #[error("backends[{0}].conditions: ready and terminating together: expected a terminating backend not ready")]
    BackendConditions(usize),
    #[error("backends[{0}]: {1} port {2} is listed twice")]
    BackendDuplicate(usize, IpAddr, u16),
    #[error("forwarding: {0} for a node_port service: expected nat (an encapsulated packet keeps its destination, the node itself)")]
    EncapNodePort(&'static str),
    #[error("backends[{0}].port: {1}: expected the service's port {2} (forwarding {3} keeps the client's destination port)")]
    EncapBackendPort(usize, u16, u16, &'static str),
    #[error("gue_port: {0}: only with forwarding = \"gue\"")]
    GuePort(u16),
    #[error("source_ranges: on a {0} service: expected none (only a load_balancer service's address is filtered by source)")]
    SourceRangesKind(&'static str),
    #[error("source_ranges[{0}]: {1}: expected a prefix of the vip's family ({2})")]
    SourceRangeFamily(usize, ip::Prefix, &'static str),
}

fn unicast(a: IpAddr) -> bool {
    !(a.is_unspecified() || a.is_multicast() || a.is_loopback() || matches!(a, IpAddr::V4(v) if v.is_broadcast()))
}

/// A service's `table_size`: 0 (sized by the backends) or a prime in range.
pub fn check_table_size(n: u32) -> Result<(), SpecError> {
    if n != 0 && (n < 101 || n > MAX_TABLE_SIZE || !is_prime(n)) {
        return Err(SpecError::TableSize(n));
    }
    Ok(())
}

/// Whether two services' `source_ranges` are one set of ranges (a list's order and
/// repeats allow no other source).
pub fn same_ranges(a: &[SourceRange], b: &[SourceRange]) -> bool {
    let set = |r: &[SourceRange]| r.iter().copied().collect::<std::collections::BTreeSet<_>>();
    a == b || set(a) == set(b)
}

impl ServiceSpec {
    /// A service without backends, every other field at its default (what a file or a
    /// request that names only these gets): Cluster policy, no affinity, NAT, the default
    /// table size and GUE port, every source.
    pub fn new(name: impl Into<String>, kind: ServiceType, vip: IpAddr, port: u16, protocol: Protocol) -> ServiceSpec {
        ServiceSpec {
            name: name.into(),
            kind,
            vip,
            port,
            protocol,
            backends: Vec::new(),
            traffic_policy: TrafficPolicy::default(),
            affinity: Affinity::default(),
            table_size: 0,
            forwarding: Forwarding::default(),
            gue_port: 0,
            source_ranges: Vec::new(),
        }
    }

    /// Whether `other` is this service, its `source_ranges` taken as a set: a file or a
    /// request that lists them in another order changes nothing.
    pub fn same_as(&self, other: &ServiceSpec) -> bool {
        if self.source_ranges == other.source_ranges {
            return self == other;
        }
        let without = |s: &ServiceSpec| ServiceSpec { source_ranges: Vec::new(), ..s.clone() };
        same_ranges(&self.source_ranges, &other.source_ranges) && without(self) == without(other)
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.name.is_empty() || self.name.len() > 253 {
            return Err(SpecError::Name);
        }
        match self.kind {
            ServiceType::NodePort if !self.vip.is_unspecified() => {
                return Err(SpecError::Vip(self.vip, "node_port", "0.0.0.0 or :: (every local address of that family)"))
            }
            ServiceType::ClusterIp | ServiceType::LoadBalancer if !unicast(self.vip) => {
                return Err(SpecError::Vip(self.vip, "cluster_ip or load_balancer", "a unicast address"))
            }
            _ => {}
        }
        if self.port == 0 {
            return Err(SpecError::Port);
        }
        check_table_size(self.table_size)?;
        if let Affinity::ClientIp { timeout_s } = self.affinity {
            if timeout_s == 0 || timeout_s > MAX_AFFINITY_TIMEOUT_S {
                return Err(SpecError::AffinityTimeout(timeout_s));
            }
        }
        if self.forwarding.is_encap() && self.kind == ServiceType::NodePort {
            return Err(SpecError::EncapNodePort(self.forwarding.name()));
        }
        if self.gue_port != 0 && self.forwarding != Forwarding::Gue {
            return Err(SpecError::GuePort(self.gue_port));
        }
        if !self.source_ranges.is_empty() && self.kind != ServiceType::LoadBalancer {
            let kind = if self.kind == ServiceType::NodePort { "node_port" } else { "cluster_ip" };
            return Err(SpecError::SourceRangesKind(kind));
        }
        for (i, r) in self.source_ranges.iter().enumerate() {
            if r.0.network().is_ipv4() != self.vip.is_ipv4() {
                return Err(SpecError::SourceRangeFamily(i, r.0, if self.vip.is_ipv4() { "IPv4" } else { "IPv6" }));
            }
        }
        for (i, b) in self.backends.iter().enumerate() {
            self.validate_backend(i, b)?;
            if self.backends[..i].iter().any(|o| o.addr == b.addr && o.port == b.port) {
                return Err(SpecError::BackendDuplicate(i, b.addr, b.port));
            }
        }
        Ok(())
    }

    /// Check `b` as entry `i` of this service's backends.
    pub fn validate_backend(&self, i: usize, b: &BackendSpec) -> Result<(), SpecError> {
        b.validate(i, self.vip.is_ipv4())?;
        if self.forwarding.is_encap() && b.port != self.port {
            return Err(SpecError::EncapBackendPort(i, b.port, self.port, self.forwarding.name()));
        }
        Ok(())
    }

    /// The GUE destination port, default applied.
    pub fn gue_port(&self) -> u16 {
        if self.gue_port == 0 {
            DEFAULT_GUE_PORT
        } else {
            self.gue_port
        }
    }
}

impl BackendSpec {
    /// Check the backend as entry `i` of a service of the given family.
    pub fn validate(&self, i: usize, ipv4: bool) -> Result<(), SpecError> {
        if self.addr.is_ipv4() != ipv4 || !unicast(self.addr) {
            return Err(SpecError::BackendAddr(i, self.addr));
        }
        if self.port == 0 {
            return Err(SpecError::BackendPort(i));
        }
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return Err(SpecError::BackendWeight(i, self.weight));
        }
        if self.conditions.ready && self.conditions.terminating {
            return Err(SpecError::BackendConditions(i));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> ServiceSpec {
        ServiceSpec {
            name: "default/web:http".into(),
            kind: ServiceType::ClusterIp,
            vip: "198.18.128.10".parse().unwrap(),
            port: 80,
            protocol: Protocol::Tcp,
            backends: vec![BackendSpec::new("198.19.1.10".parse().unwrap(), 8080)],
            traffic_policy: TrafficPolicy::Cluster,
            affinity: Affinity::None,
            table_size: 0,
            forwarding: Forwarding::Nat,
            gue_port: 0,
            source_ranges: Vec::new(),
        }
    }

    #[test]
    fn source_ranges_compare_as_a_set() {
        let r = |v: &[&str]| v.iter().map(|p| p.parse().unwrap()).collect::<Vec<SourceRange>>();
        let with = |v: &[&str]| ServiceSpec { kind: ServiceType::LoadBalancer, source_ranges: r(v), ..svc() };
        let a = with(&["198.18.50.0/24", "198.18.51.0/24"]);
        assert!(a.same_as(&with(&["198.18.51.0/24", "198.18.50.0/24"])));
        assert!(a.same_as(&with(&["198.18.51.0/24", "198.18.50.0/24", "198.18.51.0/24"])));
        assert!(!a.same_as(&with(&["198.18.50.0/24"])));
        assert!(!a.same_as(&with(&["198.18.50.0/24", "198.18.51.0/25"])));
        assert!(!a.same_as(&with(&[])));
        // The rest of the spec still counts when the ranges are only reordered.
        let moved = ServiceSpec { port: 81, ..with(&["198.18.51.0/24", "198.18.50.0/24"]) };
        assert!(!a.same_as(&moved));
        assert!(a.same_as(&a.clone()) && !a.same_as(&ServiceSpec { port: 81, ..a.clone() }));
    }

    #[test]
    fn valid_services_pass() {
        svc().validate().unwrap();
        let mut s = svc();
        s.kind = ServiceType::NodePort;
        s.vip = "0.0.0.0".parse().unwrap();
        s.validate().unwrap();
        let mut s = svc();
        s.vip = "2001:db8::10".parse().unwrap();
        s.backends = vec![BackendSpec::new("2001:db8:1::10".parse().unwrap(), 8080)];
        s.affinity = Affinity::ClientIp { timeout_s: DEFAULT_AFFINITY_TIMEOUT_S };
        s.table_size = 65_537;
        s.validate().unwrap();
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(Box<dyn Fn(&mut ServiceSpec)>, &str)> = vec![
            (Box::new(|s| s.name.clear()), "name: expected"),
            (Box::new(|s| s.vip = "0.0.0.0".parse().unwrap()), "vip: 0.0.0.0 for a cluster_ip"),
            (Box::new(|s| s.kind = ServiceType::NodePort), "vip: 198.18.128.10 for a node_port service: expected 0.0.0.0 or ::"),
            (Box::new(|s| s.port = 0), "port: expected 1 to 65535"),
            (Box::new(|s| s.table_size = 1000), "table_size: 1000: expected 0 (default) or a prime"),
            (Box::new(|s| s.table_size = 97), "table_size: 97"),
            (Box::new(|s| s.affinity = Affinity::ClientIp { timeout_s: 0 }), "affinity.timeout_s: 0: expected 1 to 86400"),
            (Box::new(|s| s.backends[0].addr = "2001:db8::1".parse().unwrap()), "backends[0].addr: 2001:db8::1: expected a unicast"),
            (Box::new(|s| s.backends[0].port = 0), "backends[0].port"),
            (Box::new(|s| s.backends[0].weight = 0), "backends[0].weight: 0: expected 1 to 1000"),
            (Box::new(|s| s.backends[0].conditions.terminating = true), "backends[0].conditions: ready and terminating"),
            (Box::new(|s| s.backends.push(s.backends[0])), "backends[1]: 198.19.1.10 port 8080 is listed twice"),
            (
                Box::new(|s| s.forwarding = Forwarding::Gre),
                "backends[0].port: 8080: expected the service's port 80 (forwarding gre keeps the client's destination port)",
            ),
            (
                Box::new(|s| {
                    s.forwarding = Forwarding::Ipip;
                    s.kind = ServiceType::NodePort;
                    s.vip = "0.0.0.0".parse().unwrap();
                }),
                "forwarding: ipip for a node_port service: expected nat",
            ),
            (Box::new(|s| s.gue_port = 5555), "gue_port: 5555: only with forwarding = \"gue\""),
            (
                Box::new(|s| s.source_ranges = vec!["198.18.50.0/24".parse().unwrap()]),
                "source_ranges: on a cluster_ip service: expected none (only a load_balancer",
            ),
            (
                Box::new(|s| {
                    s.kind = ServiceType::LoadBalancer;
                    s.source_ranges = vec!["198.18.50.0/24".parse().unwrap(), "2001:db8:50::/48".parse().unwrap()];
                }),
                "source_ranges[1]: 2001:db8:50::/48: expected a prefix of the vip's family (IPv4)",
            ),
        ];
        for (change, want) in cases {
            let mut s = svc();
            change(&mut s);
            let e = s.validate().unwrap_err().to_string();
            assert!(e.starts_with(want), "{e:?} does not start with {want:?}");
        }
    }

    #[test]
    fn maglev_ids_differ_by_address_and_port() {
        let a = BackendSpec::new("198.19.1.10".parse().unwrap(), 8080);
        let b = BackendSpec::new("198.19.1.10".parse().unwrap(), 8081);
        let c = BackendSpec::new("198.19.1.11".parse().unwrap(), 8080);
        assert!(a.maglev_id() != b.maglev_id() && a.maglev_id() != c.maglev_id() && b.maglev_id() != c.maglev_id());
    }
}
