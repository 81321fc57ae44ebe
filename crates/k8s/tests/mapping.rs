//! The sans-IO controller without a server: Services and EndpointSlices as the API
//! serves them (JSON) → LB services → the typed changes an event causes.

use k8s::model::{diff, Change, Listed, Model};
use k8s::objects::{Key, Service, Slice};
use k8s::Settings;
use lb::{Affinity, BackendSpec, Conditions, Protocol, ServiceSpec, ServiceType, TrafficPolicy};
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

fn service(v: serde_json::Value) -> Service {
    let o: k8s_openapi::api::core::v1::Service = serde_json::from_value(v).unwrap();
    Service::from_k8s(&o).unwrap().unwrap()
}

fn slice(v: serde_json::Value) -> Slice {
    let o: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(v).unwrap();
    Slice::from_k8s(&o).unwrap().unwrap()
}

fn web() -> serde_json::Value {
    json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "ClusterIP", "clusterIP": "198.18.128.10", "clusterIPs": ["198.18.128.10"], "ipFamilies": ["IPv4"],
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                           {"name": "dns", "port": 53, "targetPort": 8053, "protocol": "UDP"}]}
    })
}

fn endpoint(addr: &str, ready: bool, terminating: bool, node: &str) -> serde_json::Value {
    json!({"addresses": [addr], "conditions": {"ready": ready, "serving": true, "terminating": terminating}, "nodeName": node})
}

fn web_slice(name: &str, endpoints: Vec<serde_json::Value>) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 8053, "protocol": "UDP"}],
        "endpoints": endpoints
    })
}

fn settings() -> Settings {
    Settings { node: Some("n1".into()), ..Settings::default() }
}

/// A model with web and its slice, everything planned applied.
fn synced(endpoints: Vec<serde_json::Value>) -> (Model, Key) {
    let mut m = Model::new(settings());
    let key = m.service_applied(service(web()));
    m.slice_applied(slice(web_slice("web-1", endpoints)));
    for c in m.plan(&key) {
        m.record(&c);
    }
    assert!(m.plan(&key).is_empty(), "applied everything");
    (m, key)
}

fn addr(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_cluster_ip_service_is_one_lb_service_per_port_with_the_slice_port_of_its_name() {
    let (m, _) = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]);
    let names: Vec<&String> = m.applied().keys().collect();
    assert_eq!(names, ["default/web:dns@198.18.128.10", "default/web:http@198.18.128.10"]);
    let http = &m.applied()["default/web:http@198.18.128.10"];
    assert_eq!((http.kind, http.vip, http.port, http.protocol), (ServiceType::ClusterIp, addr("198.18.128.10"), 80, Protocol::Tcp));
    assert_eq!(http.traffic_policy, TrafficPolicy::Cluster);
    let b: Vec<(std::net::IpAddr, u16, bool)> = http.backends.iter().map(|b| (b.addr, b.port, b.local)).collect();
    assert_eq!(b, [(addr("198.19.1.10"), 8080, true), (addr("198.19.2.10"), 8080, false)]);
    let dns = &m.applied()["default/web:dns@198.18.128.10"];
    assert_eq!((dns.port, dns.protocol, dns.backends[0].port), (53, Protocol::Udp, 8053));
    for s in m.applied().values() {
        s.validate().unwrap();
    }
}

#[test]
fn one_endpoint_removed_is_one_backend_request_per_port() {
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]);
    let keys = m.slice_applied(slice(web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1")])));
    assert_eq!(keys, [key.clone()]);
    let plan = m.plan(&key);
    assert_eq!(
        plan,
        [
            Change::DelBackend { service: "default/web:dns@198.18.128.10".into(), addr: addr("198.19.2.10"), port: 8053 },
            Change::DelBackend { service: "default/web:http@198.18.128.10".into(), addr: addr("198.19.2.10"), port: 8080 },
        ]
    );
}

#[test]
fn a_terminating_endpoint_is_one_backend_set_with_its_conditions() {
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]);
    m.slice_applied(slice(web_slice(
        "web-1",
        vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", false, true, "n2")],
    )));
    let plan = m.plan(&key);
    assert_eq!(plan.len(), 2);
    for c in &plan {
        let Change::SetBackend { backend, .. } = c else { panic!("{c:?}") };
        assert_eq!(backend.addr, addr("198.19.2.10"));
        assert_eq!(backend.conditions, Conditions { ready: false, serving: true, terminating: true });
    }
}

#[test]
fn a_ready_endpoint_takes_new_connections_even_while_terminating() {
    // publishNotReadyAddresses: the EndpointSlice controller keeps a terminating pod
    // ready, and kube-proxy sends it new connections as any ready endpoint.
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]);
    m.slice_applied(slice(web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, true, "n2")])));
    assert_eq!(m.plan(&key), []);
}

#[test]
fn an_endpoint_moving_between_slices_changes_nothing() {
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]);
    // The new slice first lists it (both slices have it for a moment), then the old one drops it.
    m.slice_applied(slice(web_slice("web-2", vec![endpoint("198.19.2.10", true, false, "n2")])));
    assert_eq!(m.plan(&key), []);
    m.slice_applied(slice(web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1")])));
    assert_eq!(m.plan(&key), []);
    // Listed twice with different conditions, the readier wins.
    m.slice_applied(slice(web_slice(
        "web-1",
        vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", false, true, "n2")],
    )));
    assert_eq!(m.plan(&key), []);
}

#[test]
fn a_service_port_change_replaces_only_that_lb_service() {
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1")]);
    let mut v = web();
    v["spec"]["ports"][0]["port"] = json!(81);
    m.service_applied(service(v));
    let plan = m.plan(&key);
    assert_eq!(plan.len(), 2, "{plan:?}");
    assert_eq!(plan[0], Change::DelService("default/web:http@198.18.128.10".into()));
    let Change::AddService(s) = &plan[1] else { panic!() };
    assert_eq!((s.port, s.backends.len()), (81, 1));
}

#[test]
fn deleting_the_service_deletes_its_lb_services_and_nothing_else() {
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1")]);
    let mut other = web();
    other["metadata"]["name"] = json!("web-other");
    other["spec"]["clusterIP"] = json!("198.18.128.11");
    other["spec"]["clusterIPs"] = json!(["198.18.128.11"]);
    let k2 = m.service_applied(service(other));
    for c in m.plan(&k2) {
        m.record(&c);
    }
    m.service_deleted(&key);
    let plan = m.plan(&key);
    assert_eq!(
        plan,
        [Change::DelService("default/web:dns@198.18.128.10".into()), Change::DelService("default/web:http@198.18.128.10".into())]
    );
    assert!(m.plan(&k2).is_empty());
}

#[test]
fn node_port_and_load_balancer_services_map_every_address_with_the_external_policy() {
    let v = json!({
        "metadata": {"name": "shop", "namespace": "prod"},
        "spec": {"type": "LoadBalancer", "clusterIP": "198.18.128.20", "clusterIPs": ["198.18.128.20", "2001:db8:128::20"],
                 "ipFamilies": ["IPv4", "IPv6"], "externalTrafficPolicy": "Local", "sessionAffinity": "ClientIP",
                 "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                 "ports": [{"port": 443, "nodePort": 30443, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.18.200.1"}]}}
    });
    let svc = service(v);
    let slices = [
        slice(json!({"metadata": {"name": "shop-a", "namespace": "prod", "labels": {"kubernetes.io/service-name": "shop"}},
                     "addressType": "IPv4", "ports": [{"port": 8443, "protocol": "TCP"}],
                     "endpoints": [{"addresses": ["198.19.1.5"], "nodeName": "n1"}, {"addresses": ["198.19.2.5"], "nodeName": "n2"}]})),
        slice(json!({"metadata": {"name": "shop-b", "namespace": "prod", "labels": {"kubernetes.io/service-name": "shop"}},
                     "addressType": "IPv6", "ports": [{"port": 8443, "protocol": "TCP"}],
                     "endpoints": [{"addresses": ["2001:db8:19:1::5"], "nodeName": "n1"}]})),
    ];
    let d = k8s::desired::desired(&svc, slices.iter(), &settings());
    let got: Vec<(&str, ServiceType, String, u16, TrafficPolicy, usize)> =
        d.iter().map(|(n, s)| (n.as_str(), s.kind, s.vip.to_string(), s.port, s.traffic_policy, s.backends.len())).collect();
    assert_eq!(
        got,
        [
            ("prod/shop:443@198.18.128.20", ServiceType::ClusterIp, "198.18.128.20".into(), 443, TrafficPolicy::Cluster, 2),
            ("prod/shop:443@198.18.200.1", ServiceType::LoadBalancer, "198.18.200.1".into(), 443, TrafficPolicy::Local, 2),
            ("prod/shop:443@2001:db8:128::20", ServiceType::ClusterIp, "2001:db8:128::20".into(), 443, TrafficPolicy::Cluster, 1),
            ("prod/shop:443@nodeport4", ServiceType::NodePort, "0.0.0.0".into(), 30443, TrafficPolicy::Local, 2),
            ("prod/shop:443@nodeport6", ServiceType::NodePort, "::".into(), 30443, TrafficPolicy::Local, 1),
        ]
    );
    for s in d.values() {
        assert_eq!(s.affinity, Affinity::ClientIp { timeout_s: 600 });
        s.validate().unwrap();
    }
    // Local policy: the LB sends outside traffic to local backends only (its `local` flag).
    let lb = &d["prod/shop:443@198.18.200.1"];
    assert_eq!(lb.backends.iter().filter(|b| b.local).map(|b| b.addr).collect::<Vec<_>>(), [addr("198.19.1.5")]);
}

/// The `vecgate.io/forwarding` annotation: direct server return for the Service's cluster,
/// external and ingress addresses where the backends take the packets on the service's
/// own port; its node ports, and a port whose endpoints listen elsewhere, translated as
/// without it. A value the balancer cannot take is reported and served with NAT, not
/// refused.
#[test]
fn the_forwarding_annotation_asks_for_direct_server_return_where_it_can_be() {
    let v = |notes: serde_json::Value| {
        json!({
            "metadata": {"name": "amf", "namespace": "core", "annotations": notes},
            "spec": {"type": "LoadBalancer", "clusterIP": "198.18.128.30", "clusterIPs": ["198.18.128.30"], "ipFamilies": ["IPv4"],
                     "ports": [{"name": "ngap", "port": 38412, "nodePort": 30412, "protocol": "SCTP"},
                               {"name": "sbi", "port": 80, "nodePort": 30080, "targetPort": 8080, "protocol": "TCP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.18.200.30"}]}}
        })
    };
    let slices = [slice(json!({"metadata": {"name": "amf-a", "namespace": "core", "labels": {"kubernetes.io/service-name": "amf"}},
                               "addressType": "IPv4",
                               "ports": [{"name": "ngap", "port": 38412, "protocol": "SCTP"}, {"name": "sbi", "port": 8080, "protocol": "TCP"}],
                               "endpoints": [{"addresses": ["198.19.1.5"], "nodeName": "n1"}, {"addresses": ["198.19.2.5"], "nodeName": "n2"}]}))];
    let modes = |svc: &Service| -> Vec<(String, lb::Forwarding, u16)> {
        let d = k8s::desired::desired(svc, slices.iter(), &settings());
        d.values().inspect(|s| s.validate().unwrap()).map(|s| (s.name.clone(), s.forwarding, s.gue_port)).collect()
    };
    let svc = service(v(json!({"vecgate.io/forwarding": "gue", "vecgate.io/gue-port": "5555"})));
    assert!(svc.unsupported.is_empty(), "{:?}", svc.unsupported);
    use lb::Forwarding::{Gre, Gue, Nat};
    assert_eq!(
        modes(&svc),
        [
            ("core/amf:ngap@198.18.128.30".into(), Gue, 5555),
            ("core/amf:ngap@198.18.200.30".into(), Gue, 5555),
            ("core/amf:ngap@nodeport4".into(), Nat, 0),
            ("core/amf:sbi@198.18.128.30".into(), Nat, 0),
            ("core/amf:sbi@198.18.200.30".into(), Nat, 0),
            ("core/amf:sbi@nodeport4".into(), Nat, 0),
        ]
    );
    let svc = service(v(json!({"vecgate.io/forwarding": " gre "})));
    assert_eq!(modes(&svc).iter().filter(|m| m.1 == Gre).count(), 2);
    // Without it, NAT everywhere; with a value it cannot take, NAT and a report naming it.
    assert!(modes(&service(v(json!({})))).iter().all(|m| m.1 == Nat));
    let svc = service(v(json!({"vecgate.io/forwarding": "dsr", "vecgate.io/gue-port": "99999"})));
    assert!(modes(&svc).iter().all(|m| m.1 == Nat && m.2 == 0));
    // The annotation put on: the two direct services replaced, nothing else.
    let (nat, gre) = (service(v(json!({}))), service(v(json!({"vecgate.io/forwarding": "gre"}))));
    let plan = diff(&k8s::desired::desired(&nat, slices.iter(), &settings()), &k8s::desired::desired(&gre, slices.iter(), &settings()));
    let replaced = |n: &str| {
        plan.contains(&Change::DelService(n.into()))
            && plan.iter().any(|c| matches!(c, Change::AddService(s) if s.name == n && s.forwarding == Gre))
    };
    assert!(replaced("core/amf:ngap@198.18.128.30") && replaced("core/amf:ngap@198.18.200.30"), "{plan:?}");
    assert_eq!(plan.len(), 4, "{plan:?}");
    let said: Vec<String> = svc.unsupported.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        said,
        [
            "service core/amf: metadata.annotations[\"vecgate.io/forwarding\"]: \"dsr\": expected nat, ipip, gre or gue; served with NAT",
            "service core/amf: metadata.annotations[\"vecgate.io/gue-port\"]: \"99999\": expected a UDP port 1 to 65535, with vecgate.io/forwarding: gue; ignored",
        ]
    );
}

#[test]
fn internal_traffic_policy_local_keeps_cluster_ip_traffic_on_the_node() {
    let mut v = web();
    v["spec"]["internalTrafficPolicy"] = json!("Local");
    let s = slice(web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]));
    let d = k8s::desired::desired(&service(v.clone()), [s].iter(), &settings());
    let ci = &d["default/web:http@198.18.128.10"];
    assert_eq!(ci.traffic_policy, TrafficPolicy::Local);
    assert_eq!(
        ci.backends.iter().map(|b| (b.addr, b.local)).collect::<Vec<_>>(),
        [(addr("198.19.1.10"), true), (addr("198.19.2.10"), false)]
    );
    let mut st = lb::state::LbState::new();
    st.add_service(ci.clone()).unwrap();
    let t = st.tables();
    let table = t.v4.service(0).unwrap();
    assert!(table.backends.iter().map(|b| b.eligible).eq([true, false]), "new connections to the local endpoint only");

    // Endpoints on other nodes only: kube-proxy drops what is sent to the cluster IP from
    // this node ("has no local endpoints"); the LB service is made, and drops it too.
    let s = slice(web_slice("web-1", vec![endpoint("198.19.2.10", true, false, "n2")]));
    let d = k8s::desired::desired(&service(v), [s].iter(), &settings());
    let ci = &d["default/web:http@198.18.128.10"];
    assert_eq!((ci.traffic_policy, ci.backends.len(), ci.backends[0].local), (TrafficPolicy::Local, 1, false));
    let mut st = lb::state::LbState::new();
    st.add_service(ci.clone()).unwrap();
    let t = st.tables();
    let table = t.v4.service(0).unwrap();
    assert!(table.maglev.is_empty() && table.drop_without_backend);
}

#[test]
fn headless_external_name_and_fqdn_make_nothing() {
    let mut v = web();
    v["spec"]["clusterIP"] = json!("None");
    v["spec"]["clusterIPs"] = json!(["None"]);
    assert!(k8s::desired::desired(&service(v), [].iter(), &settings()).is_empty());
    let ext: k8s_openapi::api::core::v1::Service =
        serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {"type": "ExternalName", "externalName": "example.org"}}))
            .unwrap();
    assert_eq!(Service::from_k8s(&ext).unwrap(), None);
    let fqdn: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "x", "labels": {"kubernetes.io/service-name": "x"}}, "addressType": "FQDN", "endpoints": []}))
    .unwrap();
    assert_eq!(Slice::from_k8s(&fqdn).unwrap(), None);
}

/// An SCTP Service port (NGAP behind a ClusterIP and a NodePort) is an LB service as a
/// TCP or UDP one is, its backends at the slice port of its name and protocol: a TCP
/// slice port of the same name is not the SCTP port's (nor the other way round).
#[test]
fn an_sctp_port_is_an_lb_service_with_the_slice_port_of_its_protocol() {
    let svc = json!({
        "metadata": {"name": "amf", "namespace": "core"},
        "spec": {"type": "NodePort", "clusterIP": "198.18.128.20", "clusterIPs": ["198.18.128.20"], "ipFamilies": ["IPv4"],
                 "ports": [{"name": "ngap", "port": 38412, "targetPort": 38412, "protocol": "SCTP", "nodePort": 30412},
                           {"name": "sbi", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    });
    let sl = json!({
        "metadata": {"name": "amf-1", "namespace": "core", "labels": {"kubernetes.io/service-name": "amf"}},
        "addressType": "IPv4",
        "ports": [{"name": "ngap", "port": 38413, "protocol": "TCP"}, {"name": "ngap", "port": 38412, "protocol": "SCTP"},
                  {"name": "sbi", "port": 8080, "protocol": "TCP"}],
        "endpoints": [endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]
    });
    let d = k8s::desired::desired(&service(svc), [slice(sl)].iter(), &settings());
    let names: Vec<&String> = d.keys().collect();
    assert_eq!(names, ["core/amf:ngap@198.18.128.20", "core/amf:ngap@nodeport4", "core/amf:sbi@198.18.128.20"]);
    let ngap = &d["core/amf:ngap@198.18.128.20"];
    assert_eq!((ngap.kind, ngap.vip, ngap.port, ngap.protocol), (ServiceType::ClusterIp, addr("198.18.128.20"), 38412, Protocol::Sctp));
    let b: Vec<(std::net::IpAddr, u16)> = ngap.backends.iter().map(|b| (b.addr, b.port)).collect();
    assert_eq!(b, [(addr("198.19.1.10"), 38412), (addr("198.19.2.10"), 38412)], "the SCTP slice port, not the TCP one of the same name");
    let np = &d["core/amf:ngap@nodeport4"];
    assert_eq!((np.kind, np.port, np.protocol, np.backends[0].port), (ServiceType::NodePort, 30412, Protocol::Sctp, 38412));
    assert_eq!(d["core/amf:sbi@198.18.128.20"].protocol, Protocol::Tcp);
    for s in d.values() {
        s.validate().unwrap();
    }
    // Unset, a port is TCP (the API's default).
    let mut v = web();
    v["spec"]["ports"] = json!([{"port": 9}]);
    assert_eq!(service(v).ports[0].protocol, Protocol::Tcp);
}

#[test]
fn external_addresses_are_served_only_in_the_families_of_the_cluster_ips() {
    // As kube-proxy: an IPv4-only Service's IPv6 external IP makes nothing (an LB service
    // without backends would refuse whatever is sent there), nor does a headless
    // Service's external IP.
    let mut v = web();
    v["spec"]["externalIPs"] = json!(["198.18.140.1", "2001:db8:140::1"]);
    let s = slice(web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1")]));
    let d = k8s::desired::desired(&service(v.clone()), [s.clone()].iter(), &settings());
    let names: Vec<&String> = d.keys().collect();
    assert_eq!(
        names,
        [
            "default/web:dns@198.18.128.10",
            "default/web:dns@198.18.140.1",
            "default/web:http@198.18.128.10",
            "default/web:http@198.18.140.1"
        ]
    );
    v["spec"]["clusterIP"] = json!("None");
    v["spec"]["clusterIPs"] = json!(["None"]);
    assert!(k8s::desired::desired(&service(v), [s].iter(), &settings()).is_empty());
}

#[test]
fn an_ingress_address_in_proxy_mode_is_left_to_its_load_balancer() {
    // `ipMode: Proxy` (kube-proxy skips it): the load balancer sends to the nodes' own
    // addresses, so taking its address here would short-circuit it; `VIP` (the default) is served.
    let mut v = web();
    v["spec"]["type"] = json!("LoadBalancer");
    v["status"] = json!({"loadBalancer": {"ingress": [{"ip": "198.18.141.1", "ipMode": "Proxy"}, {"ip": "198.18.141.2", "ipMode": "VIP"},
                                                      {"ip": "198.18.141.3"}]}});
    let ips: Vec<String> = service(v).ingress_ips.iter().map(|a| a.to_string()).collect();
    assert_eq!(ips, ["198.18.141.2", "198.18.141.3"]);
}

/// `loadBalancerSourceRanges` as kube-proxy reads them: the ingress addresses' LB
/// services filter by the ranges of their own family (a family without ranges: every
/// source); external IPs, cluster IPs and node ports are not filtered. Ranges are read
/// sloppily (spaces trimmed, leading zeros decimal, host bits cleared); an empty one is
/// skipped silently, an unparsable one skipped and reported.
#[test]
fn load_balancer_source_ranges_filter_the_ingress_addresses_of_their_family() {
    let mut v = web();
    v["spec"]["type"] = json!("LoadBalancer");
    v["spec"]["clusterIPs"] = json!(["198.18.128.10", "2001:db8:128::10"]);
    v["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    v["spec"]["ports"] = json!([{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}]);
    v["spec"]["externalIPs"] = json!(["198.18.140.1"]);
    v["spec"]["loadBalancerSourceRanges"] =
        json!(["198.18.50.0/24", " 198.018.060.7/24 ", "", "not-a-cidr", "198.18.70.0/33", "2001:db8:50::/48"]);
    v["status"] = json!({"loadBalancer": {"ingress": [{"ip": "198.18.141.1"}, {"ip": "2001:db8:141::1"}, {"ip": "198.18.140.1"}]}});
    let svc = service(v.clone());
    let why: Vec<String> = svc.unsupported.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        why,
        [
            "service default/web: spec.loadBalancerSourceRanges[3]: \"not-a-cidr\": expected a CIDR such as 198.18.50.0/24; ignored, as kube-proxy ignores it",
            "service default/web: spec.loadBalancerSourceRanges[4]: \"198.18.70.0/33\": expected a CIDR such as 198.18.50.0/24; ignored, as kube-proxy ignores it",
        ]
    );
    let lb = k8s::desired::desired(&svc, std::iter::empty(), &settings());
    let ranges = |name: &str| -> Vec<String> { lb[name].source_ranges.iter().map(|r| r.to_string()).collect() };
    assert_eq!(ranges("default/web:http@198.18.141.1"), ["198.18.50.0/24", "198.18.60.0/24"]);
    assert_eq!(ranges("default/web:http@2001:db8:141::1"), ["2001:db8:50::/48"]);
    // Also an external IP: filtered (kube-proxy's firewall rule takes every packet to it).
    assert_eq!(ranges("default/web:http@198.18.140.1"), ["198.18.50.0/24", "198.18.60.0/24"]);
    for name in
        ["default/web:http@198.18.128.10", "default/web:http@2001:db8:128::10", "default/web:http@nodeport4", "default/web:http@nodeport6"]
    {
        assert!(lb[name].source_ranges.is_empty(), "{name}");
    }
    for s in lb.values() {
        s.validate().unwrap();
    }
    // IPv4 ranges only: the IPv6 ingress address takes every source, as kube-proxy's IPv6
    // rules have no firewall then.
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.18.50.0/24"]);
    let lb = k8s::desired::desired(&service(v.clone()), std::iter::empty(), &settings());
    assert_eq!(lb["default/web:http@198.18.141.1"].source_ranges.len(), 1);
    assert!(lb["default/web:http@2001:db8:141::1"].source_ranges.is_empty());
    // Another type: nothing filtered, nothing said.
    v["spec"]["type"] = json!("NodePort");
    let svc = service(v);
    assert!(svc.unsupported.is_empty() && svc.source_ranges.is_empty() && svc.ingress_ips.is_empty());
}

/// A change of a LoadBalancer Service's ranges replaces its ingress address's LB service
/// (the ranges are the service's, not a backend's); unchanged ranges change nothing.
#[test]
fn a_change_of_source_ranges_replaces_the_ingress_service() {
    let mut v = web();
    v["spec"]["type"] = json!("LoadBalancer");
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.18.0.0/28"]);
    v["status"] = json!({"loadBalancer": {"ingress": [{"ip": "198.18.141.1"}]}});
    let before = k8s::desired::desired(&service(v.clone()), std::iter::empty(), &settings());
    assert!(diff(&before, &before).is_empty());
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.18.0.64/26"]);
    let after = k8s::desired::desired(&service(v.clone()), std::iter::empty(), &settings());
    let plan = diff(&before, &after);
    let ingress = "default/web:http@198.18.141.1";
    assert!(plan.contains(&Change::DelService(ingress.into())), "{plan:?}");
    assert!(plan.contains(&Change::AddService(after[ingress].clone())), "{plan:?}");
    assert_eq!(plan.len(), 4, "the two ports' ingress services only: {plan:?}");
    // The same ranges in another order (as another writer of the gateway may list them):
    // one set, nothing to change.
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.18.0.0/28", "198.18.0.64/26"]);
    let two = k8s::desired::desired(&service(v.clone()), std::iter::empty(), &settings());
    v["spec"]["loadBalancerSourceRanges"] = json!(["198.18.0.64/26", "198.18.0.0/28"]);
    let swapped = k8s::desired::desired(&service(v), std::iter::empty(), &settings());
    assert_ne!(two[ingress].source_ranges, swapped[ingress].source_ranges);
    assert!(diff(&two, &swapped).is_empty(), "{:?}", diff(&two, &swapped));
}

fn local_lb_web(health_check_node_port: u16) -> serde_json::Value {
    let mut v = web();
    v["spec"]["type"] = json!("LoadBalancer");
    v["spec"]["externalTrafficPolicy"] = json!("Local");
    v["spec"]["healthCheckNodePort"] = json!(health_check_node_port);
    v
}

/// The health check of a LoadBalancer Service with externalTrafficPolicy Local, as
/// kube-proxy answers it: the number of this node's ready endpoints (each address once,
/// over every slice; a terminating one still serving does not count, nor another node's),
/// 200 with one or more, 503 without; none for other Services.
#[test]
fn a_health_check_node_port_answers_with_this_nodes_ready_endpoints() {
    use k8s::health::{service_answer, Check};
    let svc = service(local_lb_web(31500));
    assert!(svc.unsupported.is_empty(), "{:?}", svc.unsupported);
    assert_eq!(svc.health_check_node_port, Some(31500));
    let mut m = Model::new(settings());
    let key = m.service_applied(svc);
    assert_eq!(m.health_check(&key), Some(Check { port: 31500, local_endpoints: 0 }), "no slice yet");
    m.slice_applied(slice(web_slice(
        "web-1",
        vec![
            endpoint("198.19.1.10", true, false, "n1"),
            endpoint("198.19.2.10", true, false, "n2"),
            endpoint("198.19.3.10", false, true, "n1"),
        ],
    )));
    // The same address again in another slice, and a second local ready one.
    m.slice_applied(slice(web_slice(
        "web-2",
        vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.4.10", true, false, "n1")],
    )));
    let check = m.health_check(&key).unwrap();
    assert_eq!(check, Check { port: 31500, local_endpoints: 2 });
    let a = service_answer(&key, check.local_endpoints, true);
    assert_eq!(a.status, 200);
    let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(body, json!({"service": {"namespace": "default", "name": "web"}, "localEndpoints": 2, "serviceProxyHealthy": true}));

    // Local ones no longer ready (terminating, still serving), or moved to another node: 503.
    m.slice_applied(slice(web_slice(
        "web-1",
        vec![endpoint("198.19.1.10", false, true, "n1"), endpoint("198.19.2.10", true, false, "n2")],
    )));
    m.slice_applied(slice(web_slice("web-2", vec![endpoint("198.19.4.10", true, false, "n2")])));
    assert_eq!(m.health_check(&key), Some(Check { port: 31500, local_endpoints: 0 }));
    assert_eq!(service_answer(&key, 0, true).status, 503);
    // A local ready endpoint with the proxy unhealthy: 503 too.
    m.slice_applied(slice(web_slice("web-2", vec![endpoint("198.19.4.10", true, false, "n1")])));
    assert_eq!(m.health_check(&key).unwrap().local_endpoints, 1);
    assert_eq!(service_answer(&key, 1, false).status, 503);

    // Without --node-name nothing is local.
    let mut anon = Model::new(Settings::default());
    let k = anon.service_applied(service(local_lb_web(31500)));
    anon.slice_applied(slice(web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1")])));
    assert_eq!(anon.health_check(&k).unwrap().local_endpoints, 0);

    // kube-proxy serves the port only for LoadBalancer + Local: not for Cluster, nor a
    // NodePort Service (the API server would not give one either), nor a deleted Service.
    let mut cluster = local_lb_web(31500);
    cluster["spec"]["externalTrafficPolicy"] = json!("Cluster");
    let mut node_port = local_lb_web(31500);
    node_port["spec"]["type"] = json!("NodePort");
    for v in [cluster, node_port] {
        m.service_applied(service(v));
        assert_eq!(m.health_check(&key), None);
    }
    m.service_applied(service(local_lb_web(31600)));
    assert_eq!(m.health_check(&key), Some(Check { port: 31600, local_endpoints: 1 }), "the port changed");
    m.service_deleted(&key);
    assert_eq!(m.health_check(&key), None);
}

/// A dual-stack Service's health check counts each family's local ready endpoints and
/// answers the larger count, never their sum: kube-proxy v1.31's two proxiers each serve
/// the port with their own family's count (one of them holds it), so pods with an address
/// in each family are one endpoint each. Local endpoints in one family only: that
/// family's count (200), in either family. A family the Service does not have is not
/// counted (kube-proxy's proxier of that family does not see the Service).
#[test]
fn a_dual_stack_health_check_counts_one_family_not_both() {
    use k8s::health::{service_answer, Check};
    let mut v = local_lb_web(31700);
    v["spec"]["clusterIPs"] = json!(["198.18.128.10", "2001:db8:128::10"]);
    v["spec"]["ipFamilies"] = json!(["IPv4", "IPv6"]);
    v["spec"]["ipFamilyPolicy"] = json!("RequireDualStack");
    let svc = service(v);
    assert!(svc.ipv4 && svc.ipv6 && svc.unsupported.is_empty(), "{:?}", svc.unsupported);
    let mut m = Model::new(settings());
    let key = m.service_applied(svc);
    let v6_slice = |name: &str, endpoints: Vec<serde_json::Value>| {
        let mut s = web_slice(name, endpoints);
        s["addressType"] = json!("IPv6");
        s
    };
    // Two local pods and one elsewhere, each with an address in both families.
    let pods = [
        ("198.19.1.10", "2001:db8:19:1::10", "n1"),
        ("198.19.1.11", "2001:db8:19:1::11", "n1"),
        ("198.19.2.10", "2001:db8:19:2::10", "n2"),
    ];
    let v4s = |pods: &[(&str, &str, &str)]| pods.iter().map(|p| endpoint(p.0, true, false, p.2)).collect::<Vec<_>>();
    let v6s = |pods: &[(&str, &str, &str)]| pods.iter().map(|p| endpoint(p.1, true, false, p.2)).collect::<Vec<_>>();
    m.slice_applied(slice(web_slice("web-v4", v4s(&pods))));
    m.slice_applied(slice(v6_slice("web-v6", v6s(&pods))));
    assert_eq!(m.health_check(&key), Some(Check { port: 31700, local_endpoints: 2 }), "two pods, not four addresses");
    let body: serde_json::Value = serde_json::from_str(&service_answer(&key, 2, true).body).unwrap();
    assert_eq!(body["localEndpoints"], json!(2));

    // Local endpoints in one family only, either one: that family's count.
    m.slice_applied(slice(web_slice("web-v4", v4s(&pods[2..]))));
    assert_eq!(m.health_check(&key).unwrap().local_endpoints, 2, "IPv6 only");
    m.slice_applied(slice(web_slice("web-v4", v4s(&pods[..1]))));
    m.slice_applied(slice(v6_slice("web-v6", v6s(&pods[2..]))));
    let check = m.health_check(&key).unwrap();
    assert_eq!((check.local_endpoints, service_answer(&key, check.local_endpoints, true).status), (1, 200), "IPv4 only");
    // Uneven: the larger family's count.
    m.slice_applied(slice(v6_slice("web-v6", v6s(&pods))));
    assert_eq!(m.health_check(&key).unwrap().local_endpoints, 2);
    // Neither: 503.
    m.slice_applied(slice(web_slice("web-v4", v4s(&pods[2..]))));
    m.slice_applied(slice(v6_slice("web-v6", v6s(&pods[2..]))));
    let check = m.health_check(&key).unwrap();
    assert_eq!((check.local_endpoints, service_answer(&key, 0, true).status), (0, 503));

    // The Service back to IPv4 only: its IPv6 slice's local endpoints do not count.
    m.slice_applied(slice(v6_slice("web-v6", v6s(&pods))));
    assert_eq!(m.health_check(&key).unwrap().local_endpoints, 2);
    m.service_applied(service(local_lb_web(31700)));
    assert_eq!(m.health_check(&key).unwrap().local_endpoints, 0, "the Service has no IPv6 family");
}

#[test]
fn ipv4_with_leading_zeros_is_read_in_decimal_as_kubernetes_reads_it() {
    // The API server (v1.31) still accepts "198.018.140.010" with a warning and kube-proxy
    // serves 198.18.140.10; refusing it took the whole Service down.
    let mut v = web();
    v["spec"]["externalIPs"] = json!(["198.018.140.010"]);
    assert_eq!(service(v).external_ips, [addr("198.18.140.10")]);
    for bad in ["198.018.140.256", "198.18.140", "198.18.140.1.1", "198.+18.140.1", "198..140.1"] {
        let mut v = web();
        v["spec"]["externalIPs"] = json!([bad]);
        let o: k8s_openapi::api::core::v1::Service = serde_json::from_value(v).unwrap();
        assert!(Service::from_k8s(&o).is_err(), "{bad}");
    }
}

#[test]
fn bad_objects_are_refused_naming_object_field_and_expectation() {
    let cases = [
        (
            json!({"clusterIP": "198.18.128.10.1", "clusterIPs": ["198.18.128.10.1"]}),
            "service default/web: spec.clusterIPs[0]: \"198.18.128.10.1\": expected an IPv4 or IPv6 address",
        ),
        (json!({"ports": [{"port": 70000}]}), "service default/web: spec.ports[0].port: 70000: expected 1 to 65535"),
        (
            json!({"ports": [{"port": 80, "protocol": "ICMP"}]}),
            "service default/web: spec.ports[0].protocol: \"ICMP\": expected TCP, UDP or SCTP",
        ),
        (json!({"sessionAffinity": "Cookie"}), "service default/web: spec.sessionAffinity: \"Cookie\": expected None or ClientIP"),
        (
            json!({"externalTrafficPolicy": "Nearby"}),
            "service default/web: spec.externalTrafficPolicy: \"Nearby\": expected Cluster or Local",
        ),
        (
            json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}}}),
            "service default/web: spec.sessionAffinityConfig.clientIP.timeoutSeconds: 0: expected 1 to 86400",
        ),
    ];
    for (patch, want) in cases {
        let mut v = web();
        for (k, val) in patch.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
        let o: k8s_openapi::api::core::v1::Service = serde_json::from_value(v).unwrap();
        let e = Service::from_k8s(&o).unwrap_err().to_string();
        assert_eq!(e, want);
    }
    let mut s = web_slice("web-1", vec![endpoint("2001:db8::1", true, false, "n1")]);
    let o: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(s.clone()).unwrap();
    assert_eq!(
        Slice::from_k8s(&o).unwrap_err().to_string(),
        "endpointslice default/web-1: endpoints[0].addresses[0]: 2001:db8::1: expected an IPv4 address"
    );
    s["addressType"] = json!("IPX");
    let o: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(s).unwrap();
    assert_eq!(
        Slice::from_k8s(&o).unwrap_err().to_string(),
        "endpointslice default/web-1: addressType: \"IPX\": expected IPv4, IPv6 or FQDN"
    );
}

/// Names are the parts of the LB names the controller makes (`namespace/name:port@…`) and
/// reads back, so a name the API server would refuse is refused here too (a real API
/// server sends none: a buggy or hostile one must not make names that read as another
/// Service's or as no managed one).
#[test]
fn names_the_api_server_would_refuse_are_refused() {
    let with = |ns: &str, name: &str, port: &str| {
        let mut v = web();
        v["metadata"] = json!({"name": name, "namespace": ns});
        v["spec"]["ports"][0]["name"] = json!(port);
        let o: k8s_openapi::api::core::v1::Service = serde_json::from_value(v).unwrap();
        Service::from_k8s(&o).map(|s| s.is_some()).map_err(|e| e.to_string())
    };
    assert_eq!(with("default", "web", "http"), Ok(true));
    assert_eq!(with("kube-system", "a1-b", "h-2"), Ok(true));
    assert_eq!(with("0ns", "w", "8080"), Ok(true), "a namespace and a port name may start with a digit");
    for (ns, name, port, want) in [
        (
            "default",
            "web:http@198.18.0.1",
            "http",
            "service default/web:http@198.18.0.1: metadata.name: \"web:http@198.18.0.1\": expected an RFC 1035 label",
        ),
        ("default", "1web", "http", "service default/1web: metadata.name: \"1web\": expected an RFC 1035 label"),
        ("default", "Web", "http", "service default/Web: metadata.name: \"Web\": expected an RFC 1035 label"),
        ("default", "", "http", "service default/: metadata.name: \"\": expected an RFC 1035 label"),
        ("default/x", "web", "http", "service default/x/web: metadata.namespace: \"default/x\": expected an RFC 1123 label"),
        ("default", "web", "h:1", "service default/web: spec.ports[0].name: \"h:1\": expected an RFC 1123 label"),
        ("default", "web", "http-", "service default/web: spec.ports[0].name: \"http-\": expected an RFC 1123 label"),
        (
            "default",
            &"w".repeat(64),
            "http",
            &format!("service default/{0}: metadata.name: \"{0}\": expected an RFC 1035 label", "w".repeat(64)),
        ),
    ] {
        assert_eq!(with(ns, name, port), Err(want.to_string()));
    }
    let mut s = web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1")]);
    s["metadata"]["namespace"] = json!("de@fault");
    let o: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(s).unwrap();
    assert_eq!(
        Slice::from_k8s(&o).unwrap_err().to_string(),
        "endpointslice de@fault/web-1: metadata.namespace: \"de@fault\": expected an RFC 1123 label"
    );
}

#[test]
fn a_relist_applies_only_what_changed_while_the_watch_was_down() {
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]);
    // Relisted: web unchanged, its slice lost one endpoint; another service appeared.
    let mut other = web();
    other["metadata"]["name"] = json!("api");
    other["spec"]["clusterIP"] = json!("198.18.128.12");
    other["spec"]["clusterIPs"] = json!(["198.18.128.12"]);
    let keys = m.services_listed(Listed { objects: vec![service(web()), service(other)], ..Listed::default() });
    assert_eq!(keys.len(), 2);
    let keys2 = m.slices_listed(Listed {
        objects: vec![slice(web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1")]))],
        ..Listed::default()
    });
    assert!(keys2.contains(&key));
    let plan: Vec<Change> = keys.union(&keys2).flat_map(|k| m.plan(k)).collect();
    let dels = plan.iter().filter(|c| matches!(c, Change::DelBackend { .. })).count();
    let adds = plan.iter().filter(|c| matches!(c, Change::AddService(_))).count();
    assert_eq!((plan.len(), dels, adds), (4, 2, 2), "{plan:?}");
}

/// A Service or slice that does not parse in a relist keeps its last good state, as in a
/// watch event: its LB services are neither deleted nor changed.
#[test]
fn a_relisted_object_that_does_not_parse_keeps_its_last_good_state() {
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]);
    let applied = m.applied().clone();
    let mut bad = web();
    bad["spec"]["clusterIPs"] = json!(["198.18.128.999"]);
    let mut services = Listed::default();
    let parsed = Service::from_k8s(&serde_json::from_value(bad).unwrap());
    assert_eq!(parsed.as_ref().unwrap_err().field, "spec.clusterIPs[0]");
    services.add(parsed);
    let mut bad_slice = web_slice("web-1", vec![endpoint("198.19.1.10", true, false, "n1")]);
    bad_slice["endpoints"][0]["addresses"] = json!(["198.19.1.x"]);
    let mut slices = Listed::default();
    slices.add(Slice::from_k8s(&serde_json::from_value(bad_slice).unwrap()));
    assert_eq!((services.objects.len(), slices.objects.len()), (0, 0));
    let keys = m.services_listed(services);
    let keys2 = m.slices_listed(slices);
    assert!(keys.contains(&key) && keys2.contains(&key));
    assert_eq!(m.plan(&key), [], "nothing deleted or changed");
    assert_eq!(m.applied(), &applied);
    assert_eq!(m.services(), 1);

    // The Service gone from a later list (deleted meanwhile) is deleted.
    let keys = m.services_listed(Listed::default());
    assert!(m.plan(keys.first().unwrap()).iter().all(|c| matches!(c, Change::DelService(_))));
}

/// A table size the LB refuses would make every LB service invalid, so none would be
/// made: the controller refuses it at start, naming the option.
#[test]
fn a_table_size_the_lb_refuses_is_refused_at_start() {
    let bad = Settings { table_size: 1000, ..Settings::default() };
    assert_eq!(bad.validate().unwrap_err(), "--table-size 1000: expected 0 (sized by the backends) or a prime from 101 to 1048573");
    assert!(k8s::desired::desired(&service(web()), [].iter(), &bad).is_empty(), "what it would make of a Service");
    for n in [0, 101, 1009, 65521] {
        assert_eq!(Settings { table_size: n, ..Settings::default() }.validate(), Ok(()));
    }
}

#[test]
fn managed_names_are_told_from_config_names() {
    assert!(k8s::desired::is_managed("default/web:http@198.18.128.10"));
    assert!(k8s::desired::is_managed("prod/shop:443@nodeport6"));
    assert!(!k8s::desired::is_managed("web"));
    assert!(!k8s::desired::is_managed("web:http"));
}

/// The gateway's `show lb digests` of what the model applied (each LB service's
/// `control::lb::service_digest`), plus a config file's service the controller leaves alone.
fn held_as_applied(m: &Model) -> BTreeMap<String, String> {
    let mut held: BTreeMap<String, String> = m.applied().iter().map(|(n, s)| (n.clone(), digest(s))).collect();
    let config = ServiceSpec { name: "dns".into(), ..m.applied()["default/web:dns@198.18.128.10"].clone() };
    held.insert("dns".into(), digest(&config));
    held
}

fn digest(s: &ServiceSpec) -> String {
    control::lb::service_digest(s)
}

/// The periodic check against the gateway: a managed LB service deleted by hand
/// (`lb service del`) is named, and once taken as gone its Service's plan adds it back
/// whole; one whose backends were deleted, reweighted, drained or moved to another port
/// by hand is named, read back, and its plan sets them back (one backend request each);
/// one changed by hand is replaced; one made by hand under a managed name that no Service
/// wants is deleted; nothing else is touched, and the config file's service is never
/// named.
#[test]
fn lb_services_changed_by_hand_are_found_and_restored_from_their_services() {
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]);
    let (http, dns) = ("default/web:http@198.18.128.10", "default/web:dns@198.18.128.10");
    let mut held = held_as_applied(&m);
    assert!(m.drift(&held).is_empty(), "the gateway holds what was applied");

    // `lb service del default/web:http@…`.
    let want = m.applied()[http].clone();
    held.remove(http);
    assert_eq!(m.drift(&held), [http]);
    assert_eq!(m.readopt(http, None), Some(key.clone()));
    assert_eq!(m.plan(&key), [Change::AddService(want.clone())]);
    for c in m.plan(&key) {
        m.record(&c);
    }
    let held = held_as_applied(&m);
    assert!(m.drift(&held).is_empty(), "restored");

    // One of dns's backends deleted (`lb backend del`), reweighted or drained (`lb backend
    // set … weight 7 | terminating`), or moved to another port: named, and the read-back
    // service's plan sets the slice's backend back.
    let applied = m.applied()[dns].clone();
    type ByHand = (&'static str, fn(&mut ServiceSpec));
    let by_hand: [ByHand; 4] = [
        ("deleted", |s| {
            s.backends.remove(1);
        }),
        ("reweighted", |s| s.backends[1].weight = 7),
        ("drained", |s| s.backends[1].conditions = Conditions { ready: false, serving: true, terminating: true }),
        ("moved", |s| s.backends[1].port = 9090),
    ];
    for (what, change) in by_hand {
        let mut now = applied.clone();
        change(&mut now);
        let mut held = held_as_applied(&m);
        held.insert(dns.into(), digest(&now));
        assert_eq!(m.drift(&held), [dns], "{what}");
        let mut m = synced(vec![endpoint("198.19.1.10", true, false, "n1"), endpoint("198.19.2.10", true, false, "n2")]).0;
        m.readopt(dns, Some(now.clone()));
        let mut plan = vec![Change::SetBackend { service: dns.into(), backend: applied.backends[1] }];
        if what == "moved" {
            plan.insert(0, Change::DelBackend { service: dns.into(), addr: now.backends[1].addr, port: 9090 });
        }
        assert_eq!(m.plan(&key), plan, "{what}");
    }

    // The service changed by hand (another table size): replaced.
    let (mut m, key) = synced(vec![endpoint("198.19.1.10", true, false, "n1")]);
    let mut held = held_as_applied(&m);
    let changed = ServiceSpec { table_size: 65537, ..m.applied()[http].clone() };
    held.insert(http.into(), digest(&changed));
    assert_eq!(m.drift(&held), [http]);
    let want = m.applied()[http].clone();
    m.readopt(http, Some(changed));
    assert_eq!(m.plan(&key), [Change::DelService(http.into()), Change::AddService(want)]);

    // Made by hand under a managed name of a Service that does not exist: deleted.
    let (mut m, _) = synced(vec![endpoint("198.19.1.10", true, false, "n1")]);
    let mut held = held_as_applied(&m);
    let stray = "default/gone:http@198.18.128.99";
    let made = ServiceSpec { name: stray.into(), backends: Vec::new(), ..m.applied()[http].clone() };
    held.insert(stray.into(), digest(&made));
    assert_eq!(m.drift(&held), [stray]);
    let stray_key = m.readopt(stray, Some(made)).unwrap();
    assert_eq!(stray_key, Key::new("default", "gone"));
    assert_eq!(m.plan(&stray_key), [Change::DelService(stray.into())]);
}

fn spec_strategy() -> impl Strategy<Value = BTreeMap<String, ServiceSpec>> {
    let backend = (1u8..6, prop_oneof![Just(8080u16), Just(8081)], 1u32..3, any::<bool>()).prop_map(|(h, port, weight, term)| {
        let mut b = BackendSpec::new(std::net::IpAddr::from([198, 19, 1, h]), port);
        b.weight = weight;
        if term {
            b.conditions = Conditions { ready: false, serving: true, terminating: true };
        }
        b
    });
    let svc = (0u8..4, prop_oneof![Just(80u16), Just(81)], proptest::collection::vec(backend, 0..6)).prop_map(|(i, port, bs)| {
        let mut backends: BTreeMap<_, BackendSpec> = BTreeMap::new();
        for b in bs {
            backends.insert((b.addr, b.port), b);
        }
        ServiceSpec {
            name: format!("default/web:p{i}@198.18.128.{i}"),
            kind: ServiceType::ClusterIp,
            vip: std::net::IpAddr::from([198, 18, 128, i + 1]),
            port,
            protocol: Protocol::Tcp,
            backends: backends.into_values().collect(),
            traffic_policy: TrafficPolicy::Cluster,
            affinity: Affinity::None,
            table_size: 0,
            forwarding: lb::Forwarding::Nat,
            gue_port: 0,
            source_ranges: Vec::new(),
        }
    });
    proptest::collection::vec(svc, 0..4).prop_map(|v| v.into_iter().map(|s| (s.name.clone(), s)).collect())
}

proptest! {
    /// Applying the diff to the current state gives the desired one, and the diff is no
    /// larger than one request per changed backend or service.
    #[test]
    fn diff_applied_reaches_desired(cur in spec_strategy(), want in spec_strategy()) {
        let mut m = Model::new(settings());
        for s in cur.values() {
            m.adopt(s.clone());
        }
        let plan = diff(&cur, &want);
        for c in &plan {
            m.record(c);
        }
        prop_assert_eq!(m.applied(), &want);
        let mut bound = 0;
        for (n, w) in &want {
            match cur.get(n) {
                None => bound += 1,
                Some(c) if (c.vip, c.port) != (w.vip, w.port) => bound += 2,
                Some(c) => {
                    let key = |b: &BackendSpec| (b.addr, b.port);
                    bound += c.backends.iter().filter(|b| !w.backends.iter().any(|x| key(x) == key(b))).count();
                    bound += w.backends.iter().filter(|b| !c.backends.contains(b)).count();
                }
            }
        }
        bound += cur.keys().filter(|n| !want.contains_key(*n)).count();
        prop_assert!(plan.len() <= bound, "{} > {}", plan.len(), bound);
        prop_assert!(diff(&want, &want).is_empty());
    }
}

fn any_addr() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u8..4, any::<u8>()).prop_map(|(a, b)| format!("198.19.{a}.{b}")),
        Just("127.0.0.1".to_string()),
        Just("0.0.0.0".to_string()),
        Just("224.0.0.1".to_string()),
        Just("255.255.255.255".to_string()),
        Just("2001:db8::5".to_string()),
        Just("::1".to_string()),
        Just("not-an-address".to_string()),
    ]
}

proptest! {
    /// Whatever the objects say, the mapping does not panic, and every LB service it
    /// makes is one the LB accepts (no request is refused for the controller's mistakes).
    #[test]
    fn any_objects_map_to_specs_the_lb_accepts(
        vip in any_addr(),
        ports in proptest::collection::vec((0i32..70000, prop_oneof![Just("TCP"), Just("UDP"), Just("SCTP"), Just("X")], prop_oneof![Just(""), Just("a")], proptest::option::of(0i32..70000)), 0..3),
        kind in prop_oneof![Just("ClusterIP"), Just("NodePort"), Just("LoadBalancer"), Just("ExternalName"), Just("Other")],
        ingress in proptest::collection::vec(any_addr(), 0..2),
        eps in proptest::collection::vec((any_addr(), proptest::option::of(any::<bool>()), proptest::option::of(any::<bool>()), proptest::option::of(any::<bool>())), 0..5),
        slice_ports in proptest::collection::vec((proptest::option::of(0i32..70000), prop_oneof![Just("TCP"), Just("UDP")], prop_oneof![Just(""), Just("a")]), 0..3),
        family in prop_oneof![Just("IPv4"), Just("IPv6"), Just("FQDN")],
    ) {
        let svc = json!({
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"type": kind, "clusterIP": vip, "clusterIPs": [vip], "externalIPs": ingress,
                     "ports": ports.iter().map(|(p, proto, name, np)| json!({"port": p, "protocol": proto, "name": name, "nodePort": np})).collect::<Vec<_>>()},
            "status": {"loadBalancer": {"ingress": ingress.iter().map(|a| json!({"ip": a})).collect::<Vec<_>>()}}
        });
        let sl = json!({
            "metadata": {"name": "s-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "s"}},
            "addressType": family,
            "ports": slice_ports.iter().map(|(p, proto, name)| json!({"port": p, "protocol": proto, "name": name})).collect::<Vec<_>>(),
            "endpoints": eps.iter().map(|(a, r, s, t)| json!({"addresses": [a], "conditions": {"ready": r, "serving": s, "terminating": t}})).collect::<Vec<_>>()
        });
        let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(svc).unwrap();
        let sl: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(sl).unwrap();
        let (Ok(Some(svc)), slice) = (Service::from_k8s(&svc), Slice::from_k8s(&sl)) else { return Ok(()) };
        let slices: Vec<Slice> = slice.ok().flatten().into_iter().collect();
        let mut m = Model::new(settings());
        let key = m.service_applied(svc.clone());
        for s in &slices {
            m.slice_applied(s.clone());
        }
        for c in m.plan(&key) {
            if let Change::AddService(s) = &c {
                prop_assert!(s.validate().is_ok(), "{:?}: {:?}", s, s.validate());
            }
            m.record(&c);
        }
        prop_assert!(m.plan(&key).is_empty());
    }
}

proptest! {
    /// The digest the model caches for each applied LB service is always
    /// `control::lb::service_digest` of its spec as it is now: after every kind of change
    /// (adopted, added, deleted, a backend set or reweighted or drained, a backend deleted,
    /// read back or found gone, everything forgotten), with a check between each two that
    /// fills the cache, a gateway holding exactly what was applied has no drift.
    #[test]
    fn the_cached_digest_is_that_of_the_spec_after_every_change(
        steps in proptest::collection::vec((0u8..8, spec_strategy(), 0u8..4, 1u32..4), 1..24)
    ) {
        let mut m = Model::new(settings());
        for (i, (op, specs, pick, w)) in steps.into_iter().enumerate() {
            let name = format!("default/web:p{pick}@198.18.128.{pick}");
            let spec = specs.values().next().cloned().map(|s| ServiceSpec { name: name.clone(), ..s });
            let first = m.applied().get(&name).and_then(|s| s.backends.first().copied());
            match op {
                0 => spec.into_iter().for_each(|s| m.adopt(s)),
                1 => spec.into_iter().for_each(|s| m.record(&Change::AddService(s))),
                2 => m.record(&Change::DelService(name.clone())),
                3 => {
                    // Reweighted, drained or ready again, or a new backend.
                    let backend = match first {
                        Some(mut b) => {
                            b.weight = w;
                            b.conditions.terminating = !b.conditions.terminating;
                            b.conditions.ready = !b.conditions.terminating;
                            b
                        }
                        None => BackendSpec::new(std::net::IpAddr::from([198, 19, 9, pick]), 8080),
                    };
                    m.record(&Change::SetBackend { service: name.clone(), backend });
                }
                4 => {
                    if let Some(b) = first {
                        m.record(&Change::DelBackend { service: name.clone(), addr: b.addr, port: b.port });
                    }
                }
                5 => {
                    m.readopt(&name, spec);
                }
                6 => {
                    m.readopt(&name, None);
                }
                _ => m.forget_applied(),
            }
            let held: BTreeMap<String, String> = m.applied().iter().map(|(n, s)| (n.clone(), digest(s))).collect();
            prop_assert_eq!(m.drift(&held), Vec::<String>::new(), "step {} (op {})", i, op);
        }
    }
}

/// One check's digest comparison at 10 000 LB services of 10 backends each (the scale of
/// tests/k8s/scale.py): `Model::drift` over a gateway holding what was applied, the first
/// time (every digest computed) and then (cached). Timing only:
/// `cargo test --release -p vecgate-k8s --test integration -- --ignored --nocapture mapping::drift_time`.
#[test]
#[ignore]
fn drift_time_at_10000_services() {
    let mut m = Model::new(settings());
    for i in 0..10_000u32 {
        let [_, _, a, b] = (0xc612_0000u32 + i).to_be_bytes();
        let backends = (1..=10u8).map(|h| BackendSpec::new(std::net::IpAddr::from([198, 19, a, h]), 8080)).collect();
        m.adopt(ServiceSpec {
            name: format!("ns{}/svc{i}:http@198.18.{a}.{b}", i % 10),
            kind: ServiceType::ClusterIp,
            vip: std::net::IpAddr::from([198, 18, a, b]),
            port: 80,
            protocol: Protocol::Tcp,
            backends,
            traffic_policy: TrafficPolicy::Cluster,
            affinity: Affinity::None,
            table_size: 0,
            forwarding: lb::Forwarding::Nat,
            gue_port: 0,
            source_ranges: Vec::new(),
        });
    }
    let held: BTreeMap<String, String> = m.applied().iter().map(|(n, s)| (n.clone(), digest(s))).collect();
    let mut us = Vec::new();
    for _ in 0..21 {
        let t0 = std::time::Instant::now();
        assert!(m.drift(&held).is_empty());
        us.push(t0.elapsed().as_micros());
    }
    let first = us.remove(0);
    us.sort_unstable();
    println!("drift at 10 000 services: first {first} us, then median {} us, max {} us", us[us.len() / 2], us[us.len() - 1]);
}
