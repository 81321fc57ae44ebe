//! What the load balancer should hold for one Kubernetes Service and its EndpointSlices:
//! a pure function, one LB service per (address, port, protocol) the Service is reached
//! at, as kube-proxy reads the same objects:
//!
//! - every port × every cluster IP: a `cluster_ip` service;
//! - NodePort and LoadBalancer types: every port's nodePort × every family of
//!   `spec.ipFamilies`: a `node_port` service;
//! - every port × every `status.loadBalancer.ingress[].ip` and `spec.externalIPs`
//!   address of a family the Service has a cluster IP of: a `load_balancer` service, an
//!   ingress address's with the `loadBalancerSourceRanges` of its family.
//!
//! Backends: the endpoints of the Service's slices of the address's family, at the slice
//! port with the service port's name and protocol; an address listed by two slices (as
//! while endpoints move between slices) once, its readiest conditions kept. What comes
//! out always passes the LB's validation: an endpoint or service address it would refuse
//! is left out alone, so one bad endpoint cannot block its service.
//! `externalTrafficPolicy` applies to node-port and external addresses,
//! `internalTrafficPolicy` to cluster IPs: with `Local`, every endpoint is given, marked
//! local or not, and the LB sends new connections to the local ones only, dropping them
//! (not refusing them) when only other nodes have endpoints, as kube-proxy does.
//!
//! Topology-aware routing, as kube-proxy 1.31 (`CategorizeEndpoints`): an LB service of
//! `Cluster` policy sends new connections only to the endpoints hinted for this node's
//! zone (`hints.forZones`) when the port's endpoints of its family allow it
//! ([`topology_zone`]: every ready one hinted, the node in a zone, and a ready one hinted
//! for it); otherwise, and always with `Local` (whose endpoints are this node's), to every
//! endpoint. The others are given marked `other_zone`: they take no new connection while
//! a ready one of this zone is there, and keep the ones they have (as conntrack keeps
//! kube-proxy's established flows when the hints move), so hints that change as the
//! EndpointSlice controller rebalances zones cut no connection.

use crate::objects::{EndpointConditions, Service, ServiceKind, ServicePort, Slice};
use lb::{BackendSpec, Conditions, ServiceSpec, ServiceType, TrafficPolicy};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What the controller adds to every mapping: the node it runs for and the Maglev size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// This node's name: endpoints whose `nodeName` it is are local.
    pub node: Option<String>,
    /// This node's zone: its Node's `topology.kubernetes.io/zone` label, which the
    /// controller follows (`Model::set_zone`; not an option); endpoints hinted for it take
    /// the cluster traffic when [`topology_zone`] says so.
    pub zone: Option<String>,
    /// Maglev table size of every service (0: the LB's default).
    pub table_size: u32,
}

impl Settings {
    /// Settings every LB service can be made with: a table size the LB would refuse
    /// would leave every Service unserved (each LB service invalid, so none made).
    pub fn validate(&self) -> Result<(), String> {
        lb::service::check_table_size(self.table_size).map_err(|_| {
            format!(
                "--table-size {}: expected 0 (sized by the backends) or a prime from 101 to {}",
                self.table_size,
                lb::maglev::MAX_TABLE_SIZE
            )
        })
    }
}

/// The LB name of one of a Service's addresses: `namespace/name:port@where`, with `where`
/// the address, or `nodeport4` / `nodeport6`. Kubernetes names contain no `:` or `@`, so
/// names of one Service share the prefix [`prefix`] and no other's.
pub fn lb_name(svc: &Service, port: &ServicePort, place: &str) -> String {
    let p = if port.name.is_empty() { port.port.to_string() } else { port.name.clone() };
    format!("{}{p}@{place}", prefix(&svc.key))
}

/// The start of every LB name of the Service `key`.
pub fn prefix(key: &crate::objects::Key) -> String {
    format!("{}/{}:", key.namespace, key.name)
}

/// Whether an LB service name is one the controller made (a config file's services are
/// left alone).
pub fn is_managed(name: &str) -> bool {
    let Some((obj, rest)) = name.split_once(':') else { return false };
    obj.split('/').count() == 2 && rest.contains('@')
}

/// How ready an endpoint is, for the one of two entries of an address that is kept.
fn readiness(c: EndpointConditions) -> (bool, bool, bool) {
    (c.ready, c.serving, !c.terminating)
}

/// The zone whose hinted endpoints alone take a Service port's cluster traffic, or `None`
/// for every endpoint: kube-proxy's `canUseTopology`. `endpoints`: each endpoint's
/// readiness and hinted zones. Only ready endpoints count: each must have a hint, the node
/// a (non-empty) zone, and one of them a hint for that zone; otherwise (one missing hint,
/// no zone, none for it) nothing is filtered.
pub fn topology_zone<'a>(endpoints: impl IntoIterator<Item = (bool, &'a [String])>, zone: Option<&'a str>) -> Option<&'a str> {
    let zone = zone.filter(|z| !z.is_empty())?;
    let mut hinted_here = false;
    for (_, zones) in endpoints.into_iter().filter(|(ready, _)| *ready) {
        if zones.is_empty() {
            return None;
        }
        hinted_here |= zones.iter().any(|z| z == zone);
    }
    hinted_here.then_some(zone)
}

/// One endpoint as a backend: its conditions, whether it is this node's, its zone hints.
struct Entry<'a> {
    conditions: EndpointConditions,
    local: bool,
    zones: &'a [String],
}

/// The backends of `port` in the slices of one family (`ipv4`), sorted by address and
/// port, so that equal sets compare equal; with `Cluster` policy, those of other zones
/// than this node's marked `other_zone` when the topology hints say so ([`topology_zone`]).
fn backends<'a>(
    port: &ServicePort,
    ipv4: bool,
    slices: impl Iterator<Item = &'a Slice>,
    settings: &Settings,
    policy: TrafficPolicy,
) -> Vec<BackendSpec> {
    let mut by_addr: BTreeMap<(IpAddr, u16), Entry<'a>> = BTreeMap::new();
    for s in slices.filter(|s| s.ipv4 == ipv4) {
        let Some(sp) = s.ports.iter().find(|p| p.name == port.name && p.protocol == port.protocol) else { continue };
        for e in &s.endpoints {
            let local = settings.node.as_deref().is_some_and(|n| e.node_name.as_deref() == Some(n));
            by_addr
                .entry((e.addr, sp.port))
                .and_modify(|x| {
                    if readiness(e.conditions) > readiness(x.conditions) {
                        (x.conditions, x.zones) = (e.conditions, &e.zones);
                    }
                    x.local |= local;
                })
                .or_insert(Entry { conditions: e.conditions, local, zones: &e.zones });
        }
    }
    let zone = match policy {
        TrafficPolicy::Cluster => topology_zone(by_addr.values().map(|x| (x.conditions.ready, x.zones)), settings.zone.as_deref()),
        TrafficPolicy::Local => None,
    };
    by_addr
        .into_iter()
        .map(|((addr, port), x)| BackendSpec {
            addr,
            port,
            weight: 1,
            conditions: Conditions { ready: x.conditions.ready, serving: x.conditions.serving, terminating: x.conditions.terminating },
            local: x.local,
            other_zone: zone.is_some_and(|z| !x.zones.iter().any(|h| h == z)),
        })
        // An address the LB cannot send to (loopback, unspecified, multicast) would make
        // it refuse the whole service: that endpoint alone is left out.
        .filter(|b| b.validate(0, ipv4).is_ok())
        .collect()
}

/// Every LB service `svc` and its slices make, by name.
pub fn desired<'a>(svc: &Service, slices: impl Iterator<Item = &'a Slice> + Clone, settings: &Settings) -> BTreeMap<String, ServiceSpec> {
    let mut out = BTreeMap::new();
    let policy = |local: bool| if local { TrafficPolicy::Local } else { TrafficPolicy::Cluster };
    let (external_policy, internal_policy) = (policy(svc.external_local), policy(svc.internal_local));
    for port in &svc.ports {
        let mut add =
            |place: String, kind: ServiceType, vip: IpAddr, port_no: u16, policy: TrafficPolicy, ranges: &[lb::service::SourceRange]| {
                let backends = backends(port, vip.is_ipv4(), slices.clone(), settings, policy);
                // Direct server return carries the client's packet unchanged: only where
                // the backends take it on the service's own port, and never to a node
                // port (the packet's port is the node's). Elsewhere the Service's
                // addresses are translated as without the annotation.
                let direct = svc.forwarding.is_encap() && kind != ServiceType::NodePort && backends.iter().all(|b| b.port == port_no);
                let forwarding = if direct { svc.forwarding } else { lb::Forwarding::Nat };
                let spec = ServiceSpec {
                    name: lb_name(svc, port, &place),
                    kind,
                    vip,
                    port: port_no,
                    protocol: port.protocol,
                    backends,
                    traffic_policy: policy,
                    affinity: svc.affinity,
                    table_size: settings.table_size,
                    forwarding,
                    gue_port: if forwarding == lb::Forwarding::Gue { svc.gue_port } else { 0 },
                    source_ranges: ranges.iter().filter(|r| r.is_ipv4() == vip.is_ipv4()).copied().collect(),
                };
                // A service address the LB cannot serve (a loopback external IP, …) makes nothing.
                if spec.validate().is_ok() {
                    out.entry(spec.name.clone()).or_insert(spec);
                }
            };
        for &ip in &svc.cluster_ips {
            add(ip.to_string(), ServiceType::ClusterIp, ip, port.port, internal_policy, &[]);
        }
        if let (Some(np), true) = (port.node_port, svc.kind != ServiceKind::ClusterIp) {
            if svc.ipv4 {
                add("nodeport4".into(), ServiceType::NodePort, Ipv4Addr::UNSPECIFIED.into(), np, external_policy, &[]);
            }
            if svc.ipv6 {
                add("nodeport6".into(), ServiceType::NodePort, Ipv6Addr::UNSPECIFIED.into(), np, external_policy, &[]);
            }
        }
        // kube-proxy serves a Service in a family only where it has a cluster IP of that
        // family: an external address of another family, or of a headless Service, makes
        // nothing (not a service without backends refusing whatever is sent there).
        // The ingress addresses first, with the source ranges of their family (none of it:
        // every source, as kube-proxy): an address also among the external IPs is
        // filtered, as kube-proxy's firewall rule for it filters every packet to it.
        let has_cluster_ip = |ip: &&IpAddr| svc.cluster_ips.iter().any(|c| c.is_ipv4() == ip.is_ipv4());
        for &ip in svc.ingress_ips.iter().filter(has_cluster_ip) {
            add(ip.to_string(), ServiceType::LoadBalancer, ip, port.port, external_policy, &svc.source_ranges);
        }
        for &ip in svc.external_ips.iter().filter(has_cluster_ip) {
            add(ip.to_string(), ServiceType::LoadBalancer, ip, port.port, external_policy, &[]);
        }
    }
    out
}
