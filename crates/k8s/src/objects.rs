//! The parts of a Kubernetes Service and EndpointSlice the load balancer reads, checked
//! once when an object arrives: every address parsed, every port in range, every enum
//! value known. An object that does not pass is refused with an error naming it, the
//! field and what was expected (the controller logs it and keeps what it had).

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use lb::{Affinity, Protocol};
use std::net::IpAddr;

/// `namespace/name` of an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(namespace: &str, name: &str) -> Key {
        Key { namespace: namespace.into(), name: name.into() }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What is wrong with an object: `<kind> <namespace/name>: <field>: <what was expected>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {key}: {field}: {message}")]
pub struct ObjectError {
    pub kind: &'static str,
    pub key: Key,
    pub field: String,
    pub message: String,
}

/// How a Service is reached (`spec.type`); ExternalName services have no dataplane part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceKind {
    ClusterIp,
    NodePort,
    LoadBalancer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// The port's name (empty when the service has one unnamed port); EndpointSlice ports
    /// are matched to it by name.
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: Option<u16>,
}

/// A Service as the load balancer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub key: Key,
    pub kind: ServiceKind,
    /// `spec.clusterIPs` (or `spec.clusterIP`); empty for a headless service.
    pub cluster_ips: Vec<IpAddr>,
    /// `spec.ipFamilies`: the families NodePorts open on.
    pub ipv4: bool,
    pub ipv6: bool,
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs`: addresses from outside, served to every source.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` (but `ipMode: Proxy`'s) of a LoadBalancer
    /// Service: addresses from outside, served to `source_ranges` only when it has any.
    pub ingress_ips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges` as kube-proxy reads them (whitespace trimmed, IPv4
    /// fields with leading zeros decimal, host bits cleared; an unparsable one left out and
    /// reported in `unsupported`), both families: the ingress addresses of each family
    /// take that family's (none: every source, as kube-proxy).
    pub source_ranges: Vec<lb::service::SourceRange>,
    pub affinity: Affinity,
    /// `externalTrafficPolicy: Local`: traffic from outside goes to this node's endpoints
    /// only and keeps its source address.
    pub external_local: bool,
    /// `internalTrafficPolicy: Local`: ClusterIP traffic goes to this node's endpoints only.
    pub internal_local: bool,
    /// `spec.healthCheckNodePort` of a LoadBalancer Service with `externalTrafficPolicy:
    /// Local`: where the node answers the load balancer's health checks (kube-proxy's
    /// service health server; `health`).
    pub health_check_node_port: Option<u16>,
    /// The [`FORWARDING_ANNOTATION`]'s mode (NAT without it), and GUE's destination port
    /// ([`GUE_PORT_ANNOTATION`], 0 for the default).
    pub forwarding: lb::Forwarding,
    pub gue_port: u16,
    /// Fields the load balancer cannot honour, and what is served instead (the controller
    /// logs them at each event of the Service).
    pub unsupported: Vec<ObjectError>,
}

/// The annotation that asks for direct server return: `nat` (the default), `ipip`, `gre`
/// or `gue`, as a config file's `forwarding` (kube-router's `kube-router.io/service.dsr`
/// and Cilium's `service.cilium.io/forwarding-mode` are the same kind of switch). The
/// backends must take the encapsulated packets and hold the service address.
pub const FORWARDING_ANNOTATION: &str = "vecgate.io/forwarding";
/// With `gue` forwarding: the GUE destination port (the config's `gue_port`).
pub const GUE_PORT_ANNOTATION: &str = "vecgate.io/gue-port";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointConditions {
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The first of `addresses` (the only one consumers use, by the API's definition).
    pub addr: IpAddr,
    pub conditions: EndpointConditions,
    pub node_name: Option<String>,
    /// `hints.forZones[].name`: the zones the EndpointSlice controller hints the endpoint
    /// for (topology-aware routing, `desired`), sorted, each once; empty without hints.
    pub zones: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicePort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// An EndpointSlice of addressType IPv4 or IPv6, with the service it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub key: Key,
    /// The `kubernetes.io/service-name` label, in the slice's namespace.
    pub service: Key,
    pub ipv4: bool,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<Endpoint>,
}

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service or EndpointSlice with this label (whatever its value) is another proxy's:
/// kube-proxy leaves it alone, and so does the controller (unless given that proxy's name,
/// [`selector`]).
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";

/// The EndpointSlice controller's label on the slices of a headless Service, which no
/// proxy serves; kube-proxy skips objects carrying it, Services too.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// The Node label naming its zone, which endpoints' topology hints are for.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The name of the proxy the controller serves objects for (`--service-proxy-name`): a
/// label value (1 to 63 letters, digits, `-`, `_`, `.`, first and last a letter or digit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyName(String);

impl std::str::FromStr for ProxyName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let inner = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
        let b = s.as_bytes();
        let ok = (1..=63).contains(&b.len())
            && b.iter().all(|&c| inner(c))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric();
        match ok {
            true => Ok(ProxyName(s.to_string())),
            false => Err(format!(
                "{s:?}: expected a label value: 1 to 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
            )),
        }
    }
}

impl std::fmt::Display for ProxyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The label selector of the Service and EndpointSlice watches: kube-proxy's
/// (`!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`), or with
/// `proxy` the objects labelled with that proxy's name only. An object relabelled out of
/// the selection is deleted for the watch (the API server says so), into it added.
pub fn selector(proxy: Option<&ProxyName>) -> kube::core::Selector {
    use kube::core::Expression;
    let owner = match proxy {
        None => Expression::DoesNotExist(SERVICE_PROXY_NAME_LABEL.into()),
        Some(p) => Expression::Equal(SERVICE_PROXY_NAME_LABEL.into(), p.0.clone()),
    };
    [owner, Expression::DoesNotExist(HEADLESS_LABEL.into())].into_iter().collect()
}

/// This node's zone as kube-proxy reads it from its Node: the [`ZONE_LABEL`], `None` when
/// absent or empty.
pub fn node_zone(n: &core::Node) -> Option<String> {
    n.metadata.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)).filter(|z| !z.is_empty()).cloned()
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    Key::new(meta.namespace.as_deref().unwrap_or("default"), meta.name.as_deref().unwrap_or(""))
}

/// Dotted-quad IPv4 with leading zeros in a field (`198.018.001.010`), read in decimal.
fn legacy_ipv4(s: &str) -> Option<IpAddr> {
    let mut octets = [0u8; 4];
    let mut fields = s.split('.');
    for o in &mut octets {
        let f = fields.next().filter(|f| !f.is_empty() && f.bytes().all(|c| c.is_ascii_digit()))?;
        *o = f.parse().ok()?;
    }
    fields.next().is_none().then_some(IpAddr::from(octets))
}

/// A DNS label as Kubernetes checks names (RFC 1123: lowercase letters, digits and `-`,
/// a letter or digit at each end, at most 63), with a letter first too when `letter_first`
/// (RFC 1035, a Service's name). The LB names the controller makes (`namespace/name:port@…`)
/// are read back by these characters: no `/`, `:` or `@` inside a part.
fn dns_label(s: &str, letter_first: bool) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
    let end = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(inner)
        && end(&b[0])
        && end(&b[b.len() - 1])
        && (!letter_first || b[0].is_ascii_lowercase())
}

struct Checker {
    kind: &'static str,
    key: Key,
}

impl Checker {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> ObjectError {
        ObjectError { kind: self.kind, key: self.key.clone(), field: field.into(), message: message.into() }
    }

    /// The object's namespace and name as the API server takes them (a namespace is an
    /// RFC 1123 label; a Service's name an RFC 1035 label, `service_name`; other objects'
    /// names are not read into LB names, so any is taken).
    fn names(&self, service_name: bool) -> Result<(), ObjectError> {
        if !dns_label(&self.key.namespace, false) {
            return Err(self.err("metadata.namespace", format!("{:?}: expected an RFC 1123 label", self.key.namespace)));
        }
        if service_name && !dns_label(&self.key.name, true) {
            return Err(self.err("metadata.name", format!("{:?}: expected an RFC 1035 label", self.key.name)));
        }
        Ok(())
    }

    /// An address as Kubernetes reads it (kube-proxy's `ParseIPSloppy`): IPv4 fields with
    /// leading zeros, which the API server still accepts (with a warning), are decimal.
    fn ip(&self, field: impl Into<String>, s: &str) -> Result<IpAddr, ObjectError> {
        s.parse().ok().or_else(|| legacy_ipv4(s)).ok_or_else(|| self.err(field, format!("{s:?}: expected an IPv4 or IPv6 address")))
    }

    /// A CIDR as kube-proxy reads one (`ParseCIDRSloppy`): the address as [`Checker::ip`]
    /// reads it, a decimal length within its family's, host bits cleared; `None` if it is
    /// not one.
    fn cidr(&self, s: &str) -> Option<lb::service::SourceRange> {
        let (a, len) = s.split_once('/')?;
        let addr: IpAddr = a.parse().ok().or_else(|| legacy_ipv4(a))?;
        // Digits only: `u8::from_str` also takes a leading `+`.
        let len: u8 = len.parse().ok().filter(|_| len.bytes().all(|b| b.is_ascii_digit()))?;
        (len <= ip::Prefix::max_len(addr)).then(|| lb::service::SourceRange::covering(addr, len))
    }

    fn port(&self, field: impl Into<String>, p: i32) -> Result<u16, ObjectError> {
        u16::try_from(p).ok().filter(|&p| p != 0).ok_or_else(|| self.err(field, format!("{p}: expected 1 to 65535")))
    }

    /// A port's protocol (TCP when unset, as the API defaults it).
    fn protocol(&self, field: impl Into<String>, p: Option<&str>) -> Result<Protocol, ObjectError> {
        match p.unwrap_or("TCP") {
            "TCP" => Ok(Protocol::Tcp),
            "UDP" => Ok(Protocol::Udp),
            "SCTP" => Ok(Protocol::Sctp),
            o => Err(self.err(field, format!("{o:?}: expected TCP, UDP or SCTP"))),
        }
    }
}

impl Service {
    /// The Service's dataplane part; `None` for ExternalName services.
    pub fn from_k8s(s: &core::Service) -> Result<Option<Service>, ObjectError> {
        let c = Checker { kind: "service", key: key_of(&s.metadata) };
        c.names(true)?;
        let Some(spec) = &s.spec else { return Err(c.err("spec", "expected a spec")) };
        let kind = match spec.type_.as_deref().unwrap_or("ClusterIP") {
            "ClusterIP" => ServiceKind::ClusterIp,
            "NodePort" => ServiceKind::NodePort,
            "LoadBalancer" => ServiceKind::LoadBalancer,
            "ExternalName" => return Ok(None),
            o => return Err(c.err("spec.type", format!("{o:?}: expected ClusterIP, NodePort, LoadBalancer or ExternalName"))),
        };
        let mut cluster_ips = Vec::new();
        match (&spec.cluster_ips, &spec.cluster_ip) {
            (Some(ips), _) if !ips.is_empty() => {
                for (i, a) in ips.iter().enumerate().filter(|(_, a)| *a != "None") {
                    cluster_ips.push(c.ip(format!("spec.clusterIPs[{i}]"), a)?);
                }
            }
            (_, Some(a)) if a != "None" && !a.is_empty() => cluster_ips.push(c.ip("spec.clusterIP", a)?),
            _ => {}
        }
        let families = spec.ip_families.clone().unwrap_or_default();
        let (mut ipv4, mut ipv6) = (families.iter().any(|f| f == "IPv4"), families.iter().any(|f| f == "IPv6"));
        if families.is_empty() {
            ipv4 = cluster_ips.iter().any(IpAddr::is_ipv4);
            ipv6 = cluster_ips.iter().any(IpAddr::is_ipv6);
        }
        let mut ports = Vec::new();
        for (i, p) in spec.ports.iter().flatten().enumerate() {
            let protocol = c.protocol(format!("spec.ports[{i}].protocol"), p.protocol.as_deref())?;
            let node_port = match p.node_port {
                Some(n) if kind != ServiceKind::ClusterIp && n != 0 => Some(c.port(format!("spec.ports[{i}].nodePort"), n)?),
                _ => None,
            };
            let name = p.name.clone().unwrap_or_default();
            if !name.is_empty() && !dns_label(&name, false) {
                return Err(c.err(format!("spec.ports[{i}].name"), format!("{name:?}: expected an RFC 1123 label")));
            }
            ports.push(ServicePort { name, protocol, port: c.port(format!("spec.ports[{i}].port"), p.port)?, node_port });
        }
        let mut external_ips = Vec::new();
        for (i, a) in spec.external_ips.iter().flatten().enumerate() {
            external_ips.push(c.ip(format!("spec.externalIPs[{i}]"), a)?);
        }
        let mut unsupported = Vec::new();
        // kube-proxy drops what other sources send to the ingress addresses (its firewall
        // rules); the LB services of those addresses get the ranges (`source_ranges`).
        // External IPs and node ports are not filtered, by kube-proxy either.
        let mut source_ranges = Vec::new();
        let mut ingress_ips = Vec::new();
        if kind == ServiceKind::LoadBalancer {
            for (i, r) in spec.load_balancer_source_ranges.iter().flatten().enumerate() {
                match c.cidr(r.trim()) {
                    Some(p) => source_ranges.push(p),
                    // kube-proxy skips an empty one silently, and logs and skips one it
                    // cannot parse (the API server refuses them on new Services).
                    None if r.trim().is_empty() => {}
                    None => unsupported.push(c.err(
                        format!("spec.loadBalancerSourceRanges[{i}]"),
                        format!("{r:?}: expected a CIDR such as 198.18.50.0/24; ignored, as kube-proxy ignores it"),
                    )),
                }
            }
            let ingress = s.status.as_ref().and_then(|st| st.load_balancer.as_ref()).and_then(|l| l.ingress.as_ref());
            for (i, g) in ingress.into_iter().flatten().enumerate() {
                // `ipMode: Proxy`: the load balancer itself carries the traffic on to the
                // nodes, addressed to them; kube-proxy leaves such an address alone.
                if g.ip_mode.as_deref() == Some("Proxy") {
                    continue;
                }
                if let Some(a) = &g.ip {
                    ingress_ips.push(c.ip(format!("status.loadBalancer.ingress[{i}].ip"), a)?);
                }
            }
        }
        let affinity = match spec.session_affinity.as_deref().unwrap_or("None") {
            "None" => Affinity::None,
            "ClientIP" => {
                let t = spec.session_affinity_config.as_ref().and_then(|a| a.client_ip.as_ref()).and_then(|a| a.timeout_seconds);
                let timeout_s = match t {
                    None => lb::service::DEFAULT_AFFINITY_TIMEOUT_S,
                    Some(t) if t >= 1 && t as u32 <= lb::service::MAX_AFFINITY_TIMEOUT_S => t as u32,
                    Some(t) => {
                        return Err(c.err(
                            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                            format!("{t}: expected 1 to {}", lb::service::MAX_AFFINITY_TIMEOUT_S),
                        ))
                    }
                };
                Affinity::ClientIp { timeout_s }
            }
            o => return Err(c.err("spec.sessionAffinity", format!("{o:?}: expected None or ClientIP"))),
        };
        let policy = |field: &str, v: Option<&str>| match v.unwrap_or("Cluster") {
            "Cluster" => Ok(false),
            "Local" => Ok(true),
            o => Err(c.err(field, format!("{o:?}: expected Cluster or Local"))),
        };
        let external_local = policy("spec.externalTrafficPolicy", spec.external_traffic_policy.as_deref())?;
        // The load balancer's health checks of this node arrive there (HTTP: healthy while
        // the node has a ready endpoint of the Service); kube-proxy reads it only then.
        let health_check_node_port = match spec.health_check_node_port {
            Some(p) if p != 0 && kind == ServiceKind::LoadBalancer && external_local => Some(c.port("spec.healthCheckNodePort", p)?),
            _ => None,
        };
        let (forwarding, gue_port) = forwarding(&c, s.metadata.annotations.as_ref(), &mut unsupported);
        Ok(Some(Service {
            forwarding,
            gue_port,
            external_local,
            internal_local: policy("spec.internalTrafficPolicy", spec.internal_traffic_policy.as_deref())?,
            health_check_node_port,
            key: c.key,
            kind,
            cluster_ips,
            ipv4,
            ipv6,
            ports,
            external_ips,
            ingress_ips,
            source_ranges,
            affinity,
            unsupported,
        }))
    }
}

/// A Service's forwarding mode and GUE port from its annotations; a value the load
/// balancer cannot take is reported in `unsupported` and served as without it (NAT; the
/// default GUE port), not refused: the Service stays reachable.
fn forwarding(
    c: &Checker,
    notes: Option<&std::collections::BTreeMap<String, String>>,
    unsupported: &mut Vec<ObjectError>,
) -> (lb::Forwarding, u16) {
    let note = |k: &str| notes.and_then(|n| n.get(k)).map(|v| v.trim()).filter(|v| !v.is_empty());
    let field = |k: &str| format!("metadata.annotations[{k:?}]");
    let forwarding = match note(FORWARDING_ANNOTATION).map(|v| (v, v.parse::<lb::Forwarding>())) {
        None => lb::Forwarding::Nat,
        Some((_, Ok(f))) => f,
        Some((v, Err(_))) => {
            unsupported.push(c.err(field(FORWARDING_ANNOTATION), format!("{v:?}: expected nat, ipip, gre or gue; served with NAT")));
            lb::Forwarding::Nat
        }
    };
    let gue_port = match note(GUE_PORT_ANNOTATION) {
        None => 0,
        Some(v) => match v.parse::<u16>() {
            Ok(p) if p != 0 && forwarding == lb::Forwarding::Gue => p,
            _ => {
                let why = format!("{v:?}: expected a UDP port 1 to 65535, with {FORWARDING_ANNOTATION}: gue; ignored");
                unsupported.push(c.err(field(GUE_PORT_ANNOTATION), why));
                0
            }
        },
    };
    (forwarding, gue_port)
}

impl Slice {
    /// The slice's dataplane part; `None` for FQDN slices and slices without the
    /// service-name label (nothing routes to them).
    pub fn from_k8s(s: &discovery::EndpointSlice) -> Result<Option<Slice>, ObjectError> {
        let c = Checker { kind: "endpointslice", key: key_of(&s.metadata) };
        c.names(false)?;
        let ipv4 = match s.address_type.as_str() {
            "IPv4" => true,
            "IPv6" => false,
            "FQDN" => return Ok(None),
            o => return Err(c.err("addressType", format!("{o:?}: expected IPv4, IPv6 or FQDN"))),
        };
        let Some(service) = s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) else { return Ok(None) };
        let mut ports = Vec::new();
        for (i, p) in s.ports.iter().flatten().enumerate() {
            let protocol = c.protocol(format!("ports[{i}].protocol"), p.protocol.as_deref())?;
            // A port without a number means "all ports", which only headless services use.
            let Some(port) = p.port else { continue };
            ports.push(SlicePort { name: p.name.clone().unwrap_or_default(), protocol, port: c.port(format!("ports[{i}].port"), port)? });
        }
        let mut endpoints = Vec::new();
        for (i, e) in s.endpoints.iter().enumerate() {
            let Some(a) = e.addresses.first() else { return Err(c.err(format!("endpoints[{i}].addresses"), "expected an address")) };
            let addr = c.ip(format!("endpoints[{i}].addresses[0]"), a)?;
            if addr.is_ipv4() != ipv4 {
                return Err(c.err(format!("endpoints[{i}].addresses[0]"), format!("{addr}: expected an {} address", s.address_type)));
            }
            // The API's reading of unset conditions: ready unless said otherwise, serving
            // as ready, not terminating.
            let k = e.conditions.clone().unwrap_or_default();
            let ready = k.ready.unwrap_or(true);
            let terminating = k.terminating.unwrap_or(false);
            // A ready endpoint takes new connections even while terminating, as kube-proxy
            // reads it (the EndpointSlice controller says so for a Service with
            // publishNotReadyAddresses); the LB holds a terminating backend not ready, so it
            // is given as ready only.
            let conditions = EndpointConditions { ready, serving: k.serving.unwrap_or(ready), terminating: terminating && !ready };
            let hints = e.hints.as_ref().and_then(|h| h.for_zones.as_ref());
            let mut zones: Vec<String> = hints.into_iter().flatten().map(|z| z.name.clone()).collect();
            zones.sort();
            zones.dedup();
            endpoints.push(Endpoint { addr, conditions, node_name: e.node_name.clone(), zones });
        }
        Ok(Some(Slice { service: Key::new(&c.key.namespace, service), key: c.key, ipv4, ports, endpoints }))
    }
}
