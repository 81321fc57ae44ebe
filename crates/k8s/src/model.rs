//! The controller's sans-IO core: the Services and EndpointSlices it has seen, what it
//! has applied to the load balancer, and the smallest list of typed API changes that
//! takes one from the other. An event touches one Service; its LB services are compared
//! name by name and backend by backend, so one endpoint changed is one backend request.
//! A change is recorded as applied only once the caller says it succeeded, so a refused
//! one is tried again at the next event or resync of that Service.

use crate::desired::{self, Settings};
use crate::objects::{Key, ObjectError, Service, Slice};
use lb::{BackendSpec, ServiceSpec};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// One typed API request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    DelService(String),
    AddService(ServiceSpec),
    /// Add a backend or replace the one with its address and port.
    SetBackend {
        service: String,
        backend: BackendSpec,
    },
    DelBackend {
        service: String,
        addr: IpAddr,
        port: u16,
    },
}

impl Change {
    /// The request that carries the change out.
    pub fn request(&self) -> control::api::Request {
        use control::api::Request;
        match self {
            Change::DelService(name) => Request::LbServiceDel { name: name.clone() },
            Change::AddService(spec) => Request::LbServiceAdd(spec.clone()),
            Change::SetBackend { service, backend } => {
                Request::LbBackendAdd(control::lb::BackendAdd { service: service.clone(), backend: *backend })
            }
            Change::DelBackend { service, addr, port } => {
                Request::LbBackendDel(control::lb::BackendRef { service: service.clone(), addr: *addr, port: *port })
            }
        }
    }
}

/// Everything but the backends: what, when it changes, replaces the LB service.
fn same_service(a: &ServiceSpec, b: &ServiceSpec) -> bool {
    (a.kind, a.vip, a.port, a.protocol, a.traffic_policy, a.affinity, a.table_size, a.forwarding, a.gue_port)
        == (b.kind, b.vip, b.port, b.protocol, b.traffic_policy, b.affinity, b.table_size, b.forwarding, b.gue_port)
        && lb::service::same_ranges(&a.source_ranges, &b.source_ranges)
}

/// The Service a managed LB service's name (`namespace/name:port`) is of.
fn key_of(name: &str) -> Option<Key> {
    let (ns, rest) = name.split_once('/').filter(|_| desired::is_managed(name))?;
    Some(Key::new(ns, rest.split(':').next().unwrap_or("")))
}

/// The changes that turn `current` into `desired` (both one Service's LB services):
/// deletions first (an address may pass from one name to another), then additions,
/// then backends.
pub fn diff(current: &BTreeMap<String, ServiceSpec>, desired: &BTreeMap<String, ServiceSpec>) -> Vec<Change> {
    let mut dels = Vec::new();
    let mut adds = Vec::new();
    let mut backends = Vec::new();
    for (name, cur) in current {
        match desired.get(name) {
            None => dels.push(Change::DelService(name.clone())),
            Some(want) if !same_service(cur, want) => {
                dels.push(Change::DelService(name.clone()));
                adds.push(Change::AddService(want.clone()));
            }
            Some(want) => {
                let key = |b: &BackendSpec| (b.addr, b.port);
                let have: BTreeMap<_, _> = cur.backends.iter().map(|b| (key(b), b)).collect();
                let will: BTreeMap<_, _> = want.backends.iter().map(|b| (key(b), b)).collect();
                for (&(addr, port), _) in have.iter().filter(|(k, _)| !will.contains_key(*k)) {
                    backends.push(Change::DelBackend { service: name.clone(), addr, port });
                }
                for (k, &b) in &will {
                    if have.get(k) != Some(&b) {
                        backends.push(Change::SetBackend { service: name.clone(), backend: *b });
                    }
                }
            }
        }
    }
    for (name, want) in desired {
        if !current.contains_key(name) {
            adds.push(Change::AddService(want.clone()));
        }
    }
    dels.into_iter().chain(adds).chain(backends).collect()
}

/// The controller's view: objects by key, slices by the Service they belong to, and the
/// LB services applied so far by name.
#[derive(Debug, Default)]
pub struct Model {
    settings: Settings,
    services: HashMap<Key, Service>,
    slices: HashMap<Key, Slice>,
    by_service: HashMap<Key, BTreeSet<Key>>,
    applied: BTreeMap<String, ServiceSpec>,
    /// [`control::lb::service_digest`] of applied LB services, by name, computed when a
    /// check first needs one ([`Model::drift`]) and dropped with every change to the
    /// service ([`Model::applied_mut`]), so a check computes none for those unchanged.
    digests: HashMap<String, String>,
}

impl Model {
    pub fn new(settings: Settings) -> Model {
        Model { settings, ..Model::default() }
    }

    /// LB services applied.
    pub fn applied(&self) -> &BTreeMap<String, ServiceSpec> {
        &self.applied
    }

    pub fn services(&self) -> usize {
        self.services.len()
    }

    /// This node's zone as last set ([`Model::set_zone`]).
    pub fn zone(&self) -> Option<&str> {
        self.settings.zone.as_deref()
    }

    /// Forget what was applied, before the gateway's LB services are adopted again (a
    /// gateway restarted under the controller holds only its config file's).
    pub fn forget_applied(&mut self) {
        self.applied.clear();
        self.digests.clear();
    }

    /// The applied LB services, to change the one named `name`: the one way they are
    /// changed (but [`Model::forget_applied`]), which drops its cached digest.
    fn applied_mut(&mut self, name: &str) -> &mut BTreeMap<String, ServiceSpec> {
        self.digests.remove(name);
        &mut self.applied
    }

    /// Take LB services found in the dataplane at start as applied (a restarted
    /// controller then changes only what differs).
    pub fn adopt(&mut self, spec: ServiceSpec) {
        self.applied_mut(&spec.name).insert(spec.name.clone(), spec);
    }

    fn applied_of(&self, key: &Key) -> BTreeMap<String, ServiceSpec> {
        let p = desired::prefix(key);
        self.applied.range(p.clone()..).take_while(|(n, _)| n.starts_with(&p)).map(|(n, s)| (n.clone(), s.clone())).collect()
    }

    fn desired_of(&self, key: &Key) -> BTreeMap<String, ServiceSpec> {
        let Some(svc) = self.services.get(key) else { return BTreeMap::new() };
        let slices = self.by_service.get(key).into_iter().flatten().filter_map(|k| self.slices.get(k));
        desired::desired(svc, slices, &self.settings)
    }

    /// The changes that bring the Service `key`'s LB services to what its objects say.
    pub fn plan(&self, key: &Key) -> Vec<Change> {
        diff(&self.applied_of(key), &self.desired_of(key))
    }

    /// The Service `key`'s health check (`None` unless it is a LoadBalancer with
    /// `externalTrafficPolicy: Local` and a `healthCheckNodePort`): its port and the
    /// number of its endpoints on this node that are ready, as kube-proxy counts them for
    /// the load balancer's checks: the addresses of every slice of the Service (each
    /// once, whatever its ports or slices), ready only (a terminating endpoint still
    /// serving does not count: a node with only those should be taken out of rotation).
    ///
    /// Counted per family, of the Service's families (`spec.ipFamilies`), and the larger
    /// count answered, never the sum: kube-proxy v1.31 runs one proxier per family, each
    /// with a health server counting its own family's endpoints, and the two race for
    /// the one port (the loser logs "Failed to start healthcheck", kubernetes#114702). A
    /// dual-stack pod (an address in each family) is so one endpoint, as kube-proxy
    /// answers; with local endpoints in one family only, kube-proxy's answer depends on
    /// which proxier bound first, and this is the answer of the one with endpoints (the
    /// node can serve the Service), as a single health server over both families would
    /// give (the fix #114702 proposes).
    pub fn health_check(&self, key: &Key) -> Option<crate::health::Check> {
        let svc = self.services.get(key)?;
        let port = svc.health_check_node_port?;
        let node = self.settings.node.as_deref();
        let slices = self.by_service.get(key).into_iter().flatten().filter_map(|k| self.slices.get(k));
        let local: BTreeSet<IpAddr> = slices
            .filter(|s| !s.ports.is_empty())
            .flat_map(|s| &s.endpoints)
            .filter(|e| e.conditions.ready && node.is_some() && e.node_name.as_deref() == node)
            .map(|e| e.addr)
            .collect();
        let in_family = |v6: bool| local.iter().filter(|a| a.is_ipv6() == v6).count();
        let families = [(svc.ipv4, false), (svc.ipv6, true)];
        let local_endpoints = families.iter().filter(|f| f.0).map(|f| in_family(f.1)).max().unwrap_or(0);
        Some(crate::health::Check { port, local_endpoints })
    }

    /// Every Service key with objects or applied LB services (for a whole resync).
    pub fn keys(&self) -> BTreeSet<Key> {
        let mut keys: BTreeSet<Key> = self.services.keys().cloned().collect();
        keys.extend(self.applied.keys().filter_map(|n| key_of(n)));
        keys
    }

    /// The managed LB services whose applied state is not what the gateway holds
    /// (`held`: the digest of every LB service it has, by name, as `show lb digests` gives
    /// them): applied but gone (deleted by hand, `lb service del`), changed in any way — the
    /// service, or a backend added, removed, reweighted or its conditions changed — or
    /// there but never applied. Compares digests ([`control::lb::service_digest`] of what
    /// was applied, cached: computed only for services changed since the last check), so
    /// the backends are read only for what this names.
    pub fn drift(&mut self, held: &BTreeMap<String, String>) -> Vec<String> {
        let mut names = Vec::new();
        for (n, a) in self.applied.iter().filter(|(n, _)| desired::is_managed(n)) {
            if !self.digests.contains_key(n) {
                self.digests.insert(n.clone(), control::lb::service_digest(a));
            }
            if held.get(n) != self.digests.get(n) {
                names.push(n.clone());
            }
        }
        names.extend(held.keys().filter(|n| desired::is_managed(n) && !self.applied.contains_key(*n)).cloned());
        names.sort();
        names
    }

    /// Take the gateway's state of the LB service `name` as applied (`None`: it has no
    /// such service), after [`Model::drift`] named it; returns the Service key to plan,
    /// whose plan then restores what the Service says.
    pub fn readopt(&mut self, name: &str, held: Option<ServiceSpec>) -> Option<Key> {
        match held {
            Some(spec) => {
                self.applied_mut(name).insert(name.to_string(), spec);
            }
            None => {
                self.applied_mut(name).remove(name);
            }
        }
        key_of(name)
    }

    /// Record a change the load balancer accepted.
    pub fn record(&mut self, c: &Change) {
        match c {
            Change::DelService(n) => {
                self.applied_mut(n).remove(n);
            }
            Change::AddService(s) => {
                self.applied_mut(&s.name).insert(s.name.clone(), s.clone());
            }
            Change::SetBackend { service, backend } => {
                if let Some(s) = self.applied_mut(service).get_mut(service) {
                    match s.backends.iter_mut().find(|b| b.addr == backend.addr && b.port == backend.port) {
                        Some(b) => *b = *backend,
                        None => s.backends.push(*backend),
                    }
                    s.backends.sort_by_key(|b| (b.addr, b.port));
                }
            }
            Change::DelBackend { service, addr, port } => {
                if let Some(s) = self.applied_mut(service).get_mut(service) {
                    s.backends.retain(|b| !(b.addr == *addr && b.port == *port));
                }
            }
        }
    }

    /// This node's zone (its Node's `topology.kubernetes.io/zone` label; `None`: no
    /// label, or no Node) set; returns the Services to plan: those with an endpoint hinted
    /// for some zone, the only ones whose backends can follow the zone
    /// ([`desired::topology_zone`]). Their plans change only those whose backends do.
    pub fn set_zone(&mut self, zone: Option<String>) -> BTreeSet<Key> {
        if self.settings.zone == zone {
            return BTreeSet::new();
        }
        self.settings.zone = zone;
        let hinted = |slices: &BTreeSet<Key>| {
            slices.iter().filter_map(|k| self.slices.get(k)).any(|s| s.endpoints.iter().any(|e| !e.zones.is_empty()))
        };
        self.by_service.iter().filter(|(k, slices)| self.services.contains_key(*k) && hinted(slices)).map(|(k, _)| k.clone()).collect()
    }

    /// A Service added or changed; returns the key to plan.
    pub fn service_applied(&mut self, svc: Service) -> Key {
        let key = svc.key.clone();
        self.services.insert(key.clone(), svc);
        key
    }

    pub fn service_deleted(&mut self, key: &Key) -> Key {
        self.services.remove(key);
        key.clone()
    }

    /// A slice added or changed; returns the Service keys to plan (two when the slice
    /// moved from one Service to another).
    pub fn slice_applied(&mut self, slice: Slice) -> Vec<Key> {
        let mut keys = self.slice_deleted(&slice.key.clone());
        self.by_service.entry(slice.service.clone()).or_default().insert(slice.key.clone());
        if !keys.contains(&slice.service) {
            keys.push(slice.service.clone());
        }
        self.slices.insert(slice.key.clone(), slice);
        keys
    }

    pub fn slice_deleted(&mut self, key: &Key) -> Vec<Key> {
        let Some(old) = self.slices.remove(key) else { return Vec::new() };
        if let Some(set) = self.by_service.get_mut(&old.service) {
            set.remove(key);
            if set.is_empty() {
                self.by_service.remove(&old.service);
            }
        }
        vec![old.service]
    }

    /// After a (re)list of Services: the listed ones replace what was known, but one
    /// listed that did not parse keeps its last good state, as a watch event that does not
    /// parse does. Returns every key to plan.
    pub fn services_listed(&mut self, listed: Listed<Service>) -> BTreeSet<Key> {
        let mut keys: BTreeSet<Key> = self.services.keys().cloned().collect();
        let mut old = std::mem::take(&mut self.services);
        self.services = listed.objects.into_iter().map(|s| (s.key.clone(), s)).collect();
        for k in &listed.unreadable {
            if let Some(s) = old.remove(k) {
                self.services.insert(k.clone(), s);
            }
        }
        keys.extend(self.services.keys().cloned());
        keys
    }

    /// After a (re)list of slices, the same.
    pub fn slices_listed(&mut self, listed: Listed<Slice>) -> BTreeSet<Key> {
        let mut keys: BTreeSet<Key> = self.by_service.keys().cloned().collect();
        let mut old = std::mem::take(&mut self.slices);
        self.by_service.clear();
        let kept = listed.unreadable.iter().filter_map(|k| old.remove(k));
        for s in listed.objects.into_iter().chain(kept) {
            keys.insert(s.service.clone());
            self.slice_applied(s);
        }
        keys
    }
}

/// The objects of one kind a (re)list gave, as parsed: those read, and the keys of those
/// that did not parse (each logged where it was read), whose last good state is kept.
#[derive(Debug)]
pub struct Listed<T> {
    pub objects: Vec<T>,
    pub unreadable: BTreeSet<Key>,
}

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Listed { objects: Vec::new(), unreadable: BTreeSet::new() }
    }
}

impl<T> Listed<T> {
    /// One listed object as parsed: `None` is an object with no dataplane part (an
    /// ExternalName Service, an FQDN slice), taken as absent.
    pub fn add(&mut self, parsed: Result<Option<T>, ObjectError>) {
        match parsed {
            Ok(Some(o)) => self.objects.push(o),
            Ok(None) => {}
            Err(e) => {
                self.unreadable.insert(e.key);
            }
        }
    }
}
