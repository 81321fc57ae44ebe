//! Topology-aware routing and the labels that hand objects to another proxy, against
//! kube-proxy v1.31's own cases (pkg/proxy/topology_test.go `CategorizeEndpoints`, feature
//! gates at their defaults): a Service and its slice as the API serves them → the LB
//! services the controller makes → the backends the LB then sends new connections to
//! (its own tables), which must be kube-proxy's cluster (or local) endpoints.

use k8s::model::Model;
use k8s::objects::{node_zone, selector, ProxyName, Service, Slice};
use k8s::Settings;
use kube::core::SelectorExt;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

fn service(v: serde_json::Value) -> Service {
    let o: k8s_openapi::api::core::v1::Service = serde_json::from_value(v).unwrap();
    Service::from_k8s(&o).unwrap().unwrap()
}

fn slice(v: serde_json::Value) -> Slice {
    let o: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(v).unwrap();
    Slice::from_k8s(&o).unwrap().unwrap()
}

/// One endpoint of the table: its address's last octet, its zone hints (`None`: no
/// `hints`), ready / serving / terminating, and whether it is on this node.
#[derive(Clone, Copy)]
struct Ep {
    host: u8,
    zones: Option<&'static [&'static str]>,
    ready: bool,
    serving: bool,
    terminating: bool,
    local: bool,
}

const fn ep(host: u8, zones: &'static [&'static str]) -> Ep {
    Ep { host, zones: Some(zones), ready: true, serving: true, terminating: false, local: false }
}

impl Ep {
    const fn unhinted(self) -> Ep {
        Ep { zones: None, ..self }
    }
    const fn unready(self) -> Ep {
        Ep { ready: false, serving: false, ..self }
    }
    const fn terminating(self) -> Ep {
        Ep { ready: false, serving: true, terminating: true, ..self }
    }
    const fn local(self) -> Ep {
        Ep { local: true, ..self }
    }
    fn json(&self) -> serde_json::Value {
        let mut e = json!({
            "addresses": [format!("198.19.1.{}", self.host)],
            "conditions": {"ready": self.ready, "serving": self.serving, "terminating": self.terminating},
            "nodeName": if self.local { "n1" } else { "n2" },
        });
        if let Some(z) = self.zones {
            e["hints"] = json!({"forZones": z.iter().map(|z| json!({"name": z})).collect::<Vec<_>>()});
        }
        e
    }
}

/// The Service `web` (NodePort: a cluster IP and a node port) with the policies given.
fn web(internal_local: bool, external_local: bool) -> serde_json::Value {
    let policy = |l: bool| if l { "Local" } else { "Cluster" };
    json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "NodePort", "clusterIP": "198.18.128.10", "clusterIPs": ["198.18.128.10"], "ipFamilies": ["IPv4"],
                 "internalTrafficPolicy": policy(internal_local), "externalTrafficPolicy": policy(external_local),
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080, "protocol": "TCP"}]}
    })
}

fn web_slice(endpoints: &[Ep]) -> serde_json::Value {
    json!({
        "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints.iter().map(Ep::json).collect::<Vec<_>>()
    })
}

/// What the LB makes of one LB service: the last octets of its backends that take new
/// connections (the LB's own tables, `eligible`).
fn takes_new(spec: &lb::ServiceSpec) -> BTreeSet<u8> {
    let mut st = lb::LbState::new();
    let id = st.add_service(spec.clone()).unwrap();
    let t = st.tables();
    let svc = t.v4.services[id as usize].as_ref().unwrap();
    svc.backends.iter().filter(|b| b.eligible).map(|b| b.addr[3]).collect()
}

/// By kind of LB service (`cluster_ip` / `node_port`): the last octets of every backend
/// given, and of those taking new connections.
fn program(svc: serde_json::Value, endpoints: &[Ep], zone: Option<&str>) -> BTreeMap<&'static str, (BTreeSet<u8>, BTreeSet<u8>)> {
    let settings = Settings { node: Some("n1".into()), zone: zone.map(str::to_string), table_size: 0 };
    let s = slice(web_slice(endpoints));
    let lb = k8s::desired::desired(&service(svc), [s].iter(), &settings);
    lb.values()
        .map(|spec| {
            let kind = match spec.kind {
                lb::ServiceType::ClusterIp => "cluster_ip",
                lb::ServiceType::NodePort => "node_port",
                lb::ServiceType::LoadBalancer => "load_balancer",
            };
            let given = spec.backends.iter().map(|b| if let std::net::IpAddr::V4(a) = b.addr { a.octets()[3] } else { 0 }).collect();
            (kind, (given, takes_new(spec)))
        })
        .collect()
}

fn set(hosts: &[u8]) -> BTreeSet<u8> {
    hosts.iter().copied().collect()
}

const A: &[&str] = &["zone-a"];
const B: &[&str] = &["zone-b"];
const C: &[&str] = &["zone-c"];

/// kube-proxy's cases, each with the endpoints the cluster policy sends new connections
/// to (`clusterEndpoints`) and, for a Local policy, those it sends to (`localEndpoints`):
/// the LB must take new connections on exactly those, and hold every endpoint (those
/// hinted for other zones only marked `other_zone`, so that their connections stay).
#[test]
fn cluster_endpoints_follow_the_zone_hints_as_kube_proxy() {
    struct Case {
        name: &'static str,
        zone: Option<&'static str>,
        endpoints: Vec<Ep>,
        /// (policy Local for the cluster IP, for the node port)
        local: (bool, bool),
        cluster_ip: &'static [u8],
        node_port: &'static [u8],
    }
    let all = [ep(3, A), ep(4, B), ep(5, C), ep(6, A)];
    let cases = [
        Case {
            name: "normal endpoint filtering: every endpoint hinted, two for our zone",
            zone: Some("zone-a"),
            endpoints: all.to_vec(),
            local: (false, false),
            cluster_ip: &[3, 6],
            node_port: &[3, 6],
        },
        Case {
            name: "missing hints (one ready endpoint without any): no filtering",
            zone: Some("zone-a"),
            endpoints: vec![ep(3, A), ep(4, B), ep(5, C).unhinted(), ep(6, A)],
            local: (false, false),
            cluster_ip: &[3, 4, 5, 6],
            node_port: &[3, 4, 5, 6],
        },
        Case {
            name: "an unready endpoint without hints does not count",
            zone: Some("zone-a"),
            endpoints: vec![ep(3, A), ep(4, B), ep(5, C).unhinted().unready(), ep(6, A)],
            local: (false, false),
            cluster_ip: &[3, 6],
            node_port: &[3, 6],
        },
        Case { name: "empty node labels", zone: None, endpoints: vec![ep(3, A)], local: (false, false), cluster_ip: &[3], node_port: &[3] },
        Case {
            name: "empty zone label",
            zone: Some(""),
            endpoints: all.to_vec(),
            local: (false, false),
            cluster_ip: &[3, 4, 5, 6],
            node_port: &[3, 4, 5, 6],
        },
        Case {
            // A hint for the empty zone (which the API would not take) is not this
            // node's: a node without a zone filters nothing.
            name: "empty zone label, an endpoint hinted for the empty zone",
            zone: Some(""),
            endpoints: vec![ep(3, &[""]), ep(4, B)],
            local: (false, false),
            cluster_ip: &[3, 4],
            node_port: &[3, 4],
        },
        Case {
            name: "node in a zone no endpoint is hinted for: no filtering",
            zone: Some("zone-d"),
            endpoints: all.to_vec(),
            local: (false, false),
            cluster_ip: &[3, 4, 5, 6],
            node_port: &[3, 4, 5, 6],
        },
        Case {
            name: "unready endpoint of our zone: the ready one of it",
            zone: Some("zone-a"),
            endpoints: vec![ep(3, A), ep(4, B), ep(5, C), ep(6, A).unready()],
            local: (false, false),
            cluster_ip: &[3],
            node_port: &[3],
        },
        Case {
            name: "only unready endpoints in our zone (should not filter)",
            zone: Some("zone-a"),
            endpoints: vec![ep(3, A).unready(), ep(4, B), ep(5, C), ep(6, A).unready()],
            local: (false, false),
            cluster_ip: &[4, 5],
            node_port: &[4, 5],
        },
        Case {
            name: "multiple hints per endpoint: any endpoint with our zone",
            zone: Some("zone-c"),
            endpoints: vec![ep(3, &["zone-a", "zone-b", "zone-c"]), ep(4, &["zone-b", "zone-c"]), ep(5, &["zone-b", "zone-d"]), ep(6, C)],
            local: (false, false),
            cluster_ip: &[3, 4, 6],
            node_port: &[3, 4, 6],
        },
        Case {
            // No ready endpoint: no topology, the serving terminating ones of every zone.
            name: "terminating fallback ignores topology",
            zone: Some("zone-a"),
            endpoints: vec![ep(3, B).terminating(), ep(4, A).terminating(), ep(5, A).unready()],
            local: (false, false),
            cluster_ip: &[3, 4],
            node_port: &[3, 4],
        },
        Case {
            // The ready ones elsewhere, a terminating one here: only ready ones count.
            name: "a terminating endpoint of our zone does not make topology",
            zone: Some("zone-a"),
            endpoints: vec![ep(3, B), ep(4, C), ep(5, A).terminating()],
            local: (false, false),
            cluster_ip: &[3, 4],
            node_port: &[3, 4],
        },
        Case {
            name: "externalTrafficPolicy: Local, topology ignored for Local endpoints",
            zone: Some("zone-a"),
            endpoints: vec![ep(3, A).local(), ep(4, B).local(), ep(5, C), ep(6, A)],
            local: (false, true),
            cluster_ip: &[3, 6],
            node_port: &[3, 4],
        },
        Case {
            name: "internalTrafficPolicy: Local, topology ignored for Local endpoints",
            zone: Some("zone-a"),
            endpoints: vec![ep(3, A).local(), ep(4, B).local(), ep(5, C), ep(6, A)],
            local: (true, false),
            cluster_ip: &[3, 4],
            node_port: &[3, 6],
        },
        Case {
            // kube-proxy's "conflicting topology and localness require merging
            // allEndpoints": each policy's own set, in an LB service of its own.
            name: "eTP Local, iTP Cluster: a local endpoint of another zone serves the node port only",
            zone: Some("zone-a"),
            endpoints: vec![ep(0, A).local(), ep(1, B).local(), ep(2, A), ep(7, B)],
            local: (false, true),
            cluster_ip: &[0, 2],
            node_port: &[0, 1],
        },
        Case {
            name: "iTP Cluster, eTP Local, local endpoints terminating: the local serving one",
            zone: None,
            endpoints: vec![ep(0, A), ep(1, A).unready().local(), ep(2, A).terminating().local(), ep(3, A).terminating()],
            local: (false, true),
            cluster_ip: &[0],
            node_port: &[2],
        },
    ];
    for c in cases {
        let got = program(web(c.local.0, c.local.1), &c.endpoints, c.zone);
        // Every endpoint is given (those of other zones marked), so a connection made
        // before the hints moved keeps its backend.
        let every: BTreeSet<u8> = c.endpoints.iter().map(|e| e.host).collect();
        assert_eq!(got["cluster_ip"], (every.clone(), set(c.cluster_ip)), "{}: cluster IP", c.name);
        assert_eq!(got["node_port"], (every, set(c.node_port)), "{}: node port", c.name);
    }
}

/// An address in two slices (an endpoint moving between them) is one backend, with the
/// hints of the entry whose conditions are kept (the readier): here the ready one, hinted
/// for our zone, so it alone takes new connections (the other zone's marked).
#[test]
fn an_address_in_two_slices_keeps_the_hints_of_its_readier_entry() {
    let settings = Settings { node: Some("n1".into()), zone: Some("zone-a".into()), table_size: 0 };
    let mut second = web_slice(&[ep(3, A)]);
    second["metadata"]["name"] = json!("web-2");
    let slices = [slice(web_slice(&[ep(3, B).unready(), ep(4, B)])), slice(second)];
    let lb = k8s::desired::desired(&service(web(false, false)), slices.iter(), &settings);
    let cluster = &lb["default/web:http@198.18.128.10"];
    let given: Vec<(String, bool)> = cluster.backends.iter().map(|b| (b.addr.to_string(), b.other_zone)).collect();
    assert_eq!(given, [("198.19.1.3".to_string(), false), ("198.19.1.4".to_string(), true)]);
    assert!(cluster.backends[0].conditions.ready);
    assert_eq!(takes_new(cluster), set(&[3]));
}

/// The zone follows the Node: a change re-plans the Services with hinted endpoints (and no
/// other), each one's backends marked by single backend requests (never removed: their
/// connections stay); the same zone again, or a Service without hints, plans nothing.
#[test]
fn a_zone_change_replans_only_the_hinted_services() {
    let mut m = Model::new(Settings { node: Some("n1".into()), ..Settings::default() });
    let web_key = m.service_applied(service(web(false, false)));
    m.slice_applied(slice(web_slice(&[ep(3, A), ep(4, B)])));
    let mut plain = web(false, false);
    plain["metadata"]["name"] = json!("plain");
    plain["spec"]["clusterIP"] = json!("198.18.128.11");
    plain["spec"]["clusterIPs"] = json!(["198.18.128.11"]);
    plain["spec"]["ports"][0]["nodePort"] = json!(30081);
    let plain_key = m.service_applied(service(plain));
    let mut plain_slice = web_slice(&[ep(5, A).unhinted()]);
    plain_slice["metadata"] = json!({"name": "plain-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "plain"}});
    m.slice_applied(slice(plain_slice));
    for k in [&web_key, &plain_key] {
        for c in m.plan(k) {
            m.record(&c);
        }
    }
    // Per LB service of web: its backends, and how many are marked of another zone.
    let given = |m: &Model| {
        m.applied()
            .iter()
            .filter(|(n, _)| n.starts_with("default/web:"))
            .map(|(_, s)| (s.backends.len(), s.backends.iter().filter(|b| b.other_zone).count()))
            .collect::<Vec<_>>()
    };
    assert_eq!(given(&m), [(2, 0), (2, 0)], "no zone: every endpoint, none marked");

    let keys = m.set_zone(Some("zone-a".into()));
    assert_eq!(keys, BTreeSet::from([web_key.clone()]), "the hinted Service only");
    let plan = m.plan(&web_key);
    // 198.19.1.4 (zone-b) marked in the cluster IP's and the node port's LB services.
    assert_eq!(plan.len(), 2, "{plan:?}");
    assert!(
        plan.iter().all(
            |c| matches!(c, k8s::Change::SetBackend { backend, .. } if backend.addr.to_string() == "198.19.1.4" && backend.other_zone)
        ),
        "{plan:?}"
    );
    for c in plan {
        m.record(&c);
    }
    assert_eq!(given(&m), [(2, 1), (2, 1)]);
    assert!(m.set_zone(Some("zone-a".into())).is_empty(), "the same zone: nothing");

    // Zone label removed (or the Node deleted): every endpoint again.
    assert_eq!(m.set_zone(None), BTreeSet::from([web_key.clone()]));
    let plan = m.plan(&web_key);
    assert_eq!(plan.len(), 2, "{plan:?}");
    assert!(plan.iter().all(|c| matches!(c, k8s::Change::SetBackend { .. })), "{plan:?}");
    assert!(m.plan(&plain_key).is_empty());
}

/// The zone is the Node's `topology.kubernetes.io/zone` label, an empty one none; the
/// hints are read from `hints.forZones`, each zone once.
#[test]
fn zones_are_read_from_the_node_and_the_hints() {
    let node = |labels: serde_json::Value| {
        let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}})).unwrap();
        node_zone(&n)
    };
    assert_eq!(node(json!({"topology.kubernetes.io/zone": "zone-a"})), Some("zone-a".into()));
    assert_eq!(node(json!({"topology.kubernetes.io/zone": ""})), None);
    assert_eq!(node(json!({"topology.kubernetes.io/region": "r"})), None);
    assert_eq!(node(serde_json::Value::Null), None);

    let mut s = web_slice(&[ep(3, &["zone-b", "zone-a", "zone-b"]), ep(4, A).unhinted()]);
    s["endpoints"][1]["hints"] = json!({"forZones": []});
    let s = slice(s);
    assert_eq!(s.endpoints[0].zones, ["zone-a", "zone-b"]);
    assert!(s.endpoints[1].zones.is_empty(), "an empty forZones is no hint");
}

/// The watches' label selector: kube-proxy's by default (neither label), exactly its
/// string; with a proxy name, the objects labelled with it (and still not headless ones).
#[test]
fn the_watches_select_as_kube_proxy_or_the_named_proxy() {
    let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>();
    let ours = selector(None);
    assert_eq!(ours.to_string(), "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless");
    let other = labels(&[("service.kubernetes.io/service-proxy-name", "other")]);
    let empty = labels(&[("service.kubernetes.io/service-proxy-name", "")]);
    let headless = labels(&[("service.kubernetes.io/headless", "")]);
    let plain = labels(&[("app", "web"), ("kubernetes.io/service-name", "web")]);
    assert!(ours.matches(&plain) && ours.matches(&BTreeMap::new()));
    assert!(!ours.matches(&other) && !ours.matches(&empty) && !ours.matches(&headless));

    let name: ProxyName = "other".parse().unwrap();
    let named = selector(Some(&name));
    assert_eq!(named.to_string(), "service.kubernetes.io/service-proxy-name=other,!service.kubernetes.io/headless");
    assert!(named.matches(&other));
    assert!(!named.matches(&plain) && !named.matches(&empty));
    let mut other_headless = other.clone();
    other_headless.extend(headless);
    assert!(!named.matches(&other_headless));
    assert!(!named.matches(&labels(&[("service.kubernetes.io/service-proxy-name", "another")])));

    for good in ["a", "vecgate", "my-proxy.v1_2", &"x".repeat(63)] {
        assert_eq!(good.parse::<ProxyName>().map(|n| n.to_string()), Ok(good.to_string()));
    }
    for bad in ["", "-a", "a-", "a b", "a,b", "a=b", "!a", &"x".repeat(64)] {
        let e = bad.parse::<ProxyName>().unwrap_err();
        assert!(e.contains("expected a label value"), "{bad:?}: {e}");
    }
}
