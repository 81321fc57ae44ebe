//! The control plane's services: validated specs by id, each compiled into its own
//! [`ServiceTable`] when it changes. Every operation changes one service and its own
//! table only (one Maglev build), so a backend update costs the same with 10 000
//! services as with one; `tables()` hands out the current version to publish.

use crate::encap::{Outer, ShapeKey};
use crate::family::{Family, V4, V6};
use crate::maglev::{self, MaglevBackend};
use crate::service::{Affinity, BackendSpec, Conditions, ServiceSpec, ServiceType, SpecError, TrafficPolicy};
use crate::tables::{Backend, FamilyTables, LbTables, ServiceTable};
use ip::tables::ADJ_MISS;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LbError {
    #[error("service {0:?}: {1}")]
    Spec(String, SpecError),
    #[error("service {0:?}: name: already exists")]
    DuplicateName(String),
    #[error("service {0:?}: vip/port/protocol: {1} port {2}/{3} already belongs to service {4:?}")]
    DuplicateAddress(String, IpAddr, u16, crate::service::Protocol, String),
    #[error("service {0:?}: no such service")]
    NoSuchService(String),
    #[error("service {0:?}: backend {1} port {2}: no such backend")]
    NoSuchBackend(String, IpAddr, u16),
    #[error("snat: {0}: expected a unicast address")]
    Snat(IpAddr),
    #[error("service {0:?}: vip: {1} is lb.{2}, the source Cluster-policy connections are translated to (their replies come back to it): expected another address")]
    VipIsSnat(String, IpAddr, &'static str),
    #[error("service {0:?}: forwarding: {1} needs the node's {2} address (lb.{3}), the outer headers' source")]
    NoEncapSource(String, &'static str, &'static str, &'static str),
    #[error("service {0:?}: gue_port: {1}: every one of the {MAX_SHAPES} outer header shapes of its family is taken: expected a GUE port in use already")]
    Shapes(String, u16),
}

/// Outer header shapes a family can have ([`ServiceTable::shape`] is 16 bits): more than
/// the distinct (mode, GUE port) pairs a cluster would use.
const MAX_SHAPES: usize = 1 << 16;

#[derive(Debug, Default)]
pub struct LbState {
    specs: Vec<Option<ServiceSpec>>,
    by_name: HashMap<String, u32>,
    /// (address, port, protocol, node port) → service, for the duplicate check.
    by_address: HashMap<(IpAddr, u16, crate::service::Protocol, bool), u32>,
    /// Services per service address (NodePort services apart).
    on_vip: HashMap<IpAddr, usize>,
    tables: LbTables,
    /// Maglev tables built since start (each operation builds at most one).
    pub maglev_builds: u64,
    /// The last [`ServiceTable::gen`] handed out.
    last_gen: u32,
    /// Each service's first generation, by id: a session made with an earlier one
    /// belongs to a deleted service that had the id before ([`LbState::owns_session`]).
    first_gen: Vec<u32>,
    /// Encapsulated services' backends: the adjacency their outer packets leave by, as
    /// of the last [`LbState::resolve_outers`] (a backend not in it takes the lookup).
    outer_adj: HashMap<IpAddr, u32>,
    /// Encapsulated services rebuilt since the last resolution: their new backends wait
    /// for [`LbState::resolve_changed`].
    unresolved: Vec<u32>,
    /// The outer header shapes handed out, by family (IPv6?) and key: their index in the
    /// family's [`FamilyTables::shapes`]. Kept for the process's life (at most one per
    /// mode and GUE port).
    shape_ids: HashMap<(bool, ShapeKey), u16>,
    /// How many services name each NAT backend address, and each (IPv6?, backend port?,
    /// port): the steering sets ([`FamilyTables::nat_backends`], `service_ports`,
    /// `backend_ports`) change only when a count goes to or from zero, so an endpoint's
    /// change costs what that service holds, not what all of them do.
    backend_refs: HashMap<IpAddr, u32>,
    port_refs: HashMap<(bool, bool, u16), u32>,
    reply_refs: HashMap<IpAddr, u32>,
    /// Each service's digest as last computed ([`LbState::digests`]), by id: `None` until
    /// then and again from any change of the service on ([`LbState::spec_mut`]).
    digests: Vec<Option<u64>>,
    /// The function those digests are of (its address): another one passed forgets them.
    digest_fn: usize,
}

/// Which backends take new connections: the ready ones of this node's zone
/// (`other_zone` false: topology-aware routing); without any, the ready ones of every
/// zone; without any, the serving ones that are terminating (Kubernetes'
/// `ProxyTerminatingEndpoints`). With `Local` policy, only the node's own
/// (`externalTrafficPolicy: Local` on a node port or load balancer address,
/// `internalTrafficPolicy: Local` on a cluster IP).
fn eligible(spec: &ServiceSpec) -> Vec<bool> {
    let local_only = spec.traffic_policy == TrafficPolicy::Local;
    let candidate = |b: &BackendSpec| !local_only || b.local;
    for zone_only in [true, false] {
        let ready: Vec<bool> = spec.backends.iter().map(|b| candidate(b) && b.conditions.ready && !(zone_only && b.other_zone)).collect();
        if ready.iter().any(|&r| r) {
            return ready;
        }
    }
    spec.backends.iter().map(|b| candidate(b) && b.conditions.serving && b.conditions.terminating).collect()
}

/// `Local` policy with no backend of this node to take a new flow while one elsewhere
/// would: kube-proxy drops such a flow rather than refusing it.
fn drop_without_backend(spec: &ServiceSpec, eligible: &[bool]) -> bool {
    let local_only = spec.traffic_policy == TrafficPolicy::Local;
    let usable = |b: &BackendSpec| b.conditions.ready || (b.conditions.serving && b.conditions.terminating);
    local_only && !eligible.contains(&true) && spec.backends.iter().any(usable)
}

/// A family's node address (its outer header shapes' source) and its shapes.
fn shapes_of(t: &mut LbTables, v6: bool) -> (Option<IpAddr>, &mut Vec<Outer>) {
    match v6 {
        false => (t.v4.snat.map(|a| V4::to_ip(&a)), &mut t.v4.shapes),
        true => (t.v6.snat.map(|a| V6::to_ip(&a)), &mut t.v6.shapes),
    }
}

/// A service's allowed sources: its `source_ranges`, and, as kube-proxy does, its own
/// address when a range holds the node's address of its family (`node`, the SNAT
/// address): a node that holds the service address itself reaches it from that address.
/// `None` without ranges (every source).
fn sources(spec: &ServiceSpec, node: Option<IpAddr>) -> Option<ip::PrefixSet> {
    if spec.source_ranges.is_empty() {
        return None;
    }
    let ranges = spec.source_ranges.iter().map(|r| r.0);
    let from_node = node.is_some_and(|n| spec.source_ranges.iter().any(|r| r.0.contains(n)));
    let own = from_node.then(|| ip::Prefix::host(spec.vip));
    Some(ip::PrefixSet::new(spec.vip.is_ipv6(), ranges.chain(own)))
}

/// Service `id`'s table; `shape` its outer headers' (encapsulated services), `adj` the
/// resolved adjacencies of encapsulated backends, `node` the family's node address.
fn compile<F: Family>(
    id: u32,
    gen: u32,
    spec: &ServiceSpec,
    shape: u16,
    adj: &HashMap<IpAddr, u32>,
    node: Option<IpAddr>,
) -> ServiceTable<F> {
    let eligible = eligible(spec);
    let encap = spec.forwarding.is_encap();
    let backends: Vec<Backend<F>> = spec
        .backends
        .iter()
        .zip(&eligible)
        .map(|(b, &e)| Backend {
            addr: F::from_ip(b.addr).unwrap_or_default(),
            port: b.port,
            conditions: b.conditions,
            eligible: e,
            adj: if encap { adj.get(&b.addr).copied().unwrap_or(ADJ_MISS) } else { ADJ_MISS },
        })
        .collect();
    let weighted: Vec<MaglevBackend> = spec
        .backends
        .iter()
        .zip(&eligible)
        .map(|(b, &e)| MaglevBackend { id: b.maglev_id(), weight: if e { b.weight } else { 0 } })
        .collect();
    let size = maglev::table_size_for(spec.backends.len(), spec.table_size);
    ServiceTable {
        id,
        gen,
        node_port: spec.kind == ServiceType::NodePort,
        port: spec.port,
        proto: spec.protocol.number(),
        snat: spec.traffic_policy == TrafficPolicy::Cluster && !spec.forwarding.is_encap(),
        affinity_ms: match spec.affinity {
            Affinity::None => 0,
            Affinity::ClientIp { timeout_s } => timeout_s as u64 * 1000,
        },
        drop_without_backend: drop_without_backend(spec, &eligible),
        backends,
        maglev: maglev::build(&weighted, size),
        forwarding: spec.forwarding,
        shape,
        sources: sources(spec, node),
    }
}

/// What a service adds to the steering sets ([`crate::steer`]): its port (IPv6?, not a
/// backend's), and its NAT backends' addresses and ports.
/// And the backends whose replies come forwarded (a service that keeps the client's
/// address: [`FamilyTables::reply_sources`]).
struct SteeringKeys {
    ports: Vec<(bool, bool, u16)>,
    addrs: Vec<IpAddr>,
    replies: Vec<IpAddr>,
}

impl SteeringKeys {
    fn of(spec: &ServiceSpec, keeps_client: bool) -> SteeringKeys {
        let v6 = !spec.vip.is_ipv4();
        let nat: &[BackendSpec] = if spec.forwarding.is_encap() { &[] } else { &spec.backends };
        SteeringKeys {
            ports: std::iter::once((v6, false, spec.port)).chain(nat.iter().map(|b| (v6, true, b.port))).collect(),
            addrs: nat.iter().map(|b| b.addr).collect(),
            replies: if keeps_client { spec.backends.iter().map(|b| b.addr).collect() } else { Vec::new() },
        }
    }
}

/// Put `a` in or out of a shared set (copied first if a published table holds it).
fn set_member<A: std::hash::Hash + Eq + Clone>(
    set: &mut Arc<std::collections::HashSet<A, engine::hash::WordHashBuilder>>,
    a: A,
    present: bool,
) {
    let s = Arc::make_mut(set);
    if present {
        s.insert(a);
    } else {
        s.remove(&a);
    }
}

impl LbState {
    pub fn new() -> Self {
        LbState::default()
    }

    /// The current tables, to publish.
    pub fn tables(&self) -> Arc<LbTables> {
        Arc::new(self.tables.clone())
    }

    /// Whether some service keeps client addresses (its backends' replies come
    /// forwarded): the reply sources are counted ([`LbState::count_steering`]).
    pub fn has_local_policy(&self) -> bool {
        !self.reply_refs.is_empty()
    }

    /// Whether a service's connections keep the client's address: the `Local` policy, or
    /// `Cluster` with no SNAT address of its family to translate to.
    fn keeps_client(&self, s: &ServiceSpec) -> bool {
        let no_snat = if s.vip.is_ipv4() { self.tables.v4.snat.is_none() } else { self.tables.v6.snat.is_none() };
        s.traffic_policy == TrafficPolicy::Local || no_snat
    }

    /// Services on `addr` (any port and protocol), NodePort services apart.
    pub fn on_address(&self, addr: IpAddr) -> usize {
        self.on_vip.get(&addr).copied().unwrap_or(0)
    }

    /// The name of a node_port service on `port`/`protocol` (either family), if any.
    pub fn node_port_service(&self, port: u16, protocol: crate::service::Protocol) -> Option<&str> {
        let any = [IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)];
        let id = any.into_iter().find_map(|a| self.by_address.get(&(a, port, protocol, true)))?;
        self.specs[*id as usize].as_ref().map(|s| s.name.as_str())
    }

    pub fn services(&self) -> impl Iterator<Item = (u32, &ServiceSpec)> {
        self.specs.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i as u32, s)))
    }

    /// Service `id`'s slot, to change: every change of a service, its backends or the
    /// slot (added, deleted) comes through here, which forgets the service's digest.
    fn spec_mut(&mut self, id: u32) -> &mut Option<ServiceSpec> {
        if let Some(d) = self.digests.get_mut(id as usize) {
            *d = None;
        }
        &mut self.specs[id as usize]
    }

    /// Each service's name and `digest` of its spec (the control plane's one digest
    /// function, `control::lb::service_digest`'s), computed for a service only when it
    /// changed since the last call: a controller's periodic check of every service
    /// costs a hash each of those changed, not of all of them. A call with another
    /// function than the last one's computes every digest again.
    pub fn digests(&mut self, digest: fn(&ServiceSpec) -> u64) -> impl Iterator<Item = (&str, u64)> {
        // By address: a function whose address differs only costs a recomputation.
        if self.digest_fn != digest as usize {
            self.digests.clear();
            self.digest_fn = digest as usize;
        }
        self.digests.resize(self.specs.len(), None);
        for (spec, d) in self.specs.iter().zip(self.digests.iter_mut()) {
            if let (Some(s), true) = (spec, d.is_none()) {
                *d = Some(digest(s));
            }
        }
        self.specs.iter().zip(&self.digests).filter_map(|(s, d)| Some((s.as_ref()?.name.as_str(), (*d)?)))
    }

    pub fn service(&self, name: &str) -> Option<(u32, &ServiceSpec)> {
        let id = *self.by_name.get(name)?;
        self.specs[id as usize].as_ref().map(|s| (id, s))
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The session timeouts the tables carry to the workers ([`LbTables::timeouts`]).
    pub fn timeouts(&self) -> crate::session::Timeouts {
        self.tables.timeouts
    }

    /// Set the session timeouts, published with the next tables: a new session takes
    /// them, an existing one at its next packet ([`crate::session::Balancer::set_timeouts`]).
    pub fn set_timeouts(&mut self, timeouts: crate::session::Timeouts) {
        self.tables.timeouts = timeouts;
    }

    /// Set the address `Cluster`-policy services of its family translate sources to.
    /// The family's outer header shapes are made again from it, in their places.
    pub fn set_snat(&mut self, addr: Option<IpAddr>) -> Result<(), LbError> {
        let Some(src) = addr else { return Ok(()) };
        if src.is_unspecified() || src.is_multicast() || src.is_loopback() {
            return Err(LbError::Snat(src));
        }
        // Which services keep the client's address may change with it (their replies'
        // backends): counted out with the old address, in again with the new.
        let ids: Vec<u32> = self.services().map(|(id, _)| id).collect();
        for &id in &ids {
            self.count_steering(&self.steering_keys(id), false);
        }
        match src {
            IpAddr::V4(a) => self.tables.v4.snat = Some(a.octets()),
            IpAddr::V6(a) => self.tables.v6.snat = Some(a.octets()),
        }
        let v6 = src.is_ipv6();
        let shapes = shapes_of(&mut self.tables, v6).1;
        for (&(_, key), &i) in self.shape_ids.iter().filter(|((f, _), _)| *f == v6) {
            if let Some(o) = Outer::new(key, src) {
                shapes[i as usize] = o;
            }
        }
        for &id in &ids {
            self.count_steering(&self.steering_keys(id), true);
        }
        // Services with source ranges let their own address through by the node's
        // address (`sources`): built again with the new one.
        for id in ids {
            if self.specs[id as usize].as_ref().is_some_and(|s| !s.source_ranges.is_empty() && s.vip.is_ipv6() == v6) {
                self.rebuild(id);
            }
        }
        Ok(())
    }

    /// The index of `spec`'s outer header shape, made if new (0 for NAT); `None` when
    /// the family has every shape it can.
    fn intern_shape(&mut self, spec: &ServiceSpec) -> Option<u16> {
        let Some(key) = ShapeKey::of(spec) else { return Some(0) };
        let v6 = !spec.vip.is_ipv4();
        if let Some(&i) = self.shape_ids.get(&(v6, key)) {
            return Some(i);
        }
        let (src, shapes) = shapes_of(&mut self.tables, v6);
        if shapes.len() >= MAX_SHAPES {
            return None;
        }
        // Checked by `add_service`: an encapsulated service has a node address.
        let o = Outer::new(key, src?)?;
        let i = shapes.len() as u16;
        shapes.push(o);
        self.shape_ids.insert((v6, key), i);
        Some(i)
    }

    pub fn add_service(&mut self, spec: ServiceSpec) -> Result<u32, LbError> {
        self.add_service_at(spec, false)
    }

    /// Add a service; `vip_is_ours`: its address is one of the node's, whose packets come
    /// by `ipN-local` (as a node port's do) rather than by a route to the address.
    pub fn add_service_at(&mut self, spec: ServiceSpec, vip_is_ours: bool) -> Result<u32, LbError> {
        spec.validate().map_err(|e| LbError::Spec(spec.name.clone(), e))?;
        if self.by_name.contains_key(&spec.name) {
            return Err(LbError::DuplicateName(spec.name));
        }
        // The SNAT address routed to a service would take the replies of every translated
        // connection into the balancer as new connections to it. On the node's own
        // address (a node port's, or an external IP that is the node's) it is a port
        // like a node port: SNAT never uses a service's port there (`owns_snat_port`).
        let (snat, field) = if spec.vip.is_ipv4() {
            (self.tables.v4.snat.map(|a| V4::to_ip(&a)), "snat4")
        } else {
            (self.tables.v6.snat.map(|a| V6::to_ip(&a)), "snat6")
        };
        if spec.kind != ServiceType::NodePort && !vip_is_ours && snat == Some(spec.vip) {
            return Err(LbError::VipIsSnat(spec.name, spec.vip, field));
        }
        if spec.forwarding.is_encap() {
            let (has, family, field) = if spec.vip.is_ipv4() {
                (self.tables.v4.snat.is_some(), "IPv4", "snat4")
            } else {
                (self.tables.v6.snat.is_some(), "IPv6", "snat6")
            };
            if !has {
                return Err(LbError::NoEncapSource(spec.name, spec.forwarding.name(), family, field));
            }
        }
        let address = (spec.vip, spec.port, spec.protocol, spec.kind == ServiceType::NodePort);
        if let Some(other) = self.by_address.get(&address).and_then(|&id| self.specs[id as usize].as_ref()) {
            return Err(LbError::DuplicateAddress(spec.name.clone(), spec.vip, spec.port, spec.protocol, other.name.clone()));
        }
        if self.intern_shape(&spec).is_none() {
            let port = spec.gue_port();
            return Err(LbError::Shapes(spec.name, port));
        }
        let id = match self.specs.iter().position(Option::is_none) {
            Some(i) => i as u32,
            None => {
                self.specs.push(None);
                self.specs.len() as u32 - 1
            }
        };
        self.by_name.insert(spec.name.clone(), id);
        self.by_address.insert(address, id);
        if !address.3 {
            *self.on_vip.entry(address.0).or_default() += 1;
        }
        self.count_steering(&SteeringKeys::of(&spec, self.keeps_client(&spec)), true);
        *self.spec_mut(id) = Some(spec);
        self.index(id, true);
        self.rebuild(id);
        if self.first_gen.len() <= id as usize {
            self.first_gen.resize(id as usize + 1, 0);
        }
        self.first_gen[id as usize] = self.last_gen;
        Ok(id)
    }

    /// Whether a session made or last checked with generation `gen` for service `id`
    /// belongs to the service that has the id now: ids are reused after a deletion, and
    /// the deleted service's sessions live on until they expire (they translate nothing
    /// for it: its generation is gone). Generations only grow (a wrap after 2^32 builds
    /// aside), and a session is never older than its own service.
    pub fn owns_session(&self, id: u32, gen: u32) -> bool {
        self.first_gen(id).is_some_and(|g| gen >= g)
    }

    /// Service `id`'s first generation, while it exists.
    pub fn first_gen(&self, id: u32) -> Option<u32> {
        self.specs.get(id as usize)?.as_ref()?;
        self.first_gen.get(id as usize).copied()
    }

    pub fn del_service(&mut self, name: &str) -> Result<ServiceSpec, LbError> {
        let id = self.by_name.remove(name).ok_or_else(|| LbError::NoSuchService(name.into()))?;
        self.index(id, false);
        let keys = self.steering_keys(id);
        self.count_steering(&keys, false);
        let spec = self.spec_mut(id).take().expect("named services have specs");
        self.by_address.remove(&(spec.vip, spec.port, spec.protocol, spec.kind == ServiceType::NodePort));
        if spec.kind != ServiceType::NodePort {
            if let Some(n) = self.on_vip.get_mut(&spec.vip) {
                *n -= 1;
                if *n == 0 {
                    self.on_vip.remove(&spec.vip);
                }
            }
        }
        fn clear<F: Family>(t: &mut FamilyTables<F>, id: u32) {
            if let Some(s) = t.services.get_mut(id as usize) {
                *s = None;
                t.gens[id as usize] = 0;
            }
        }
        clear(&mut self.tables.v4, id);
        clear(&mut self.tables.v6, id);
        Ok(spec)
    }

    /// Add a backend, or replace the one with the same address and port.
    pub fn set_backend(&mut self, service: &str, b: BackendSpec) -> Result<(), LbError> {
        let (id, spec) = self.service(service).ok_or_else(|| LbError::NoSuchService(service.into()))?;
        let i = spec.backends.iter().position(|o| o.addr == b.addr && o.port == b.port).unwrap_or(spec.backends.len());
        spec.validate_backend(i, &b).map_err(|e| LbError::Spec(service.into(), e))?;
        let before = self.steering_keys(id);
        let spec = self.spec_mut(id).as_mut().expect("found above");
        if i == spec.backends.len() {
            spec.backends.push(b);
        } else {
            spec.backends[i] = b;
        }
        self.recount_steering(id, before);
        self.rebuild(id);
        Ok(())
    }

    /// Change a backend's weight and conditions.
    pub fn update_backend(
        &mut self,
        service: &str,
        addr: IpAddr,
        port: u16,
        weight: Option<u32>,
        conditions: Option<Conditions>,
    ) -> Result<(), LbError> {
        let (_, spec) = self.service(service).ok_or_else(|| LbError::NoSuchService(service.into()))?;
        let mut b =
            *spec.backends.iter().find(|o| o.addr == addr && o.port == port).ok_or(LbError::NoSuchBackend(service.into(), addr, port))?;
        b.weight = weight.unwrap_or(b.weight);
        b.conditions = conditions.unwrap_or(b.conditions);
        self.set_backend(service, b)
    }

    pub fn del_backend(&mut self, service: &str, addr: IpAddr, port: u16) -> Result<(), LbError> {
        let (id, spec) = self.service(service).ok_or_else(|| LbError::NoSuchService(service.into()))?;
        let i = spec.backends.iter().position(|o| o.addr == addr && o.port == port).ok_or(LbError::NoSuchBackend(
            service.into(),
            addr,
            port,
        ))?;
        let before = self.steering_keys(id);
        self.spec_mut(id).as_mut().expect("found above").backends.remove(i);
        self.recount_steering(id, before);
        self.rebuild(id);
        Ok(())
    }

    fn steering_keys(&self, id: u32) -> SteeringKeys {
        let spec = self.specs[id as usize].as_ref().expect("counted services have specs");
        SteeringKeys::of(spec, self.keeps_client(spec))
    }

    /// Count a service's steering keys in (`up`) or out of the steering sets.
    fn count_steering(&mut self, keys: &SteeringKeys, up: bool) {
        /// The count changed; whether it went to or from zero.
        fn step<K: std::hash::Hash + Eq + Copy>(refs: &mut HashMap<K, u32>, k: K, up: bool) -> bool {
            let n = refs.entry(k).or_default();
            *n = if up { *n + 1 } else { n.saturating_sub(1) };
            let edge = if up { *n == 1 } else { *n == 0 };
            if *n == 0 {
                refs.remove(&k);
            }
            edge
        }
        for &(v6, backend, port) in &keys.ports {
            if step(&mut self.port_refs, (v6, backend, port), up) {
                let (service_ports, backend_ports) = if v6 {
                    (&mut self.tables.v6.service_ports, &mut self.tables.v6.backend_ports)
                } else {
                    (&mut self.tables.v4.service_ports, &mut self.tables.v4.backend_ports)
                };
                if backend { backend_ports } else { service_ports }.set(port, up);
            }
        }
        for &a in &keys.addrs {
            if step(&mut self.backend_refs, a, up) {
                match a {
                    IpAddr::V4(a) => set_member(&mut self.tables.v4.nat_backends, a.octets(), up),
                    IpAddr::V6(a) => set_member(&mut self.tables.v6.nat_backends, a.octets(), up),
                }
            }
        }
        for &a in &keys.replies {
            if step(&mut self.reply_refs, a, up) {
                match a {
                    IpAddr::V4(a) => set_member(&mut self.tables.v4.reply_sources, a.octets(), up),
                    IpAddr::V6(a) => set_member(&mut self.tables.v6.reply_sources, a.octets(), up),
                }
            }
        }
    }

    /// Service `id` changed from keys `before`: the new ones counted in first, so what
    /// both name never goes through zero (and no published set is copied for it).
    fn recount_steering(&mut self, id: u32, before: SteeringKeys) {
        let after = self.steering_keys(id);
        self.count_steering(&after, true);
        self.count_steering(&before, false);
    }

    fn index(&mut self, id: u32, add: bool) {
        let spec = self.specs[id as usize].as_ref().expect("indexed services have specs");
        let (port, proto) = (spec.port, spec.protocol.number());
        fn at<F: Family>(t: &mut FamilyTables<F>, spec: &ServiceSpec, id: u32, port: u16, proto: u8, add: bool) -> Option<u32> {
            if spec.kind == ServiceType::NodePort {
                if add {
                    t.node_ports.insert((port, proto), id);
                } else {
                    t.node_ports.remove(&(port, proto));
                }
                return None;
            }
            if let Some(a) = F::from_ip(spec.vip) {
                if add {
                    t.vips.insert((a, port, proto), id);
                } else {
                    t.vips.remove(&(a, port, proto));
                }
            }
            t.node_ports.get(&(port, proto)).copied()
        }
        let shadowed = if spec.vip.is_ipv4() {
            at(&mut self.tables.v4, spec, id, port, proto, add)
        } else {
            at(&mut self.tables.v6, spec, id, port, proto, add)
        };
        // A service address on a NodePort service's port and protocol takes that port's
        // packets to one of the node's addresses from it (or gives them back): the
        // NodePort service gets a new generation, so its sessions are checked again.
        if let Some(np) = shadowed {
            self.rebuild(np);
        }
    }

    fn rebuild(&mut self, id: u32) {
        fn put<F: Family>(t: &mut FamilyTables<F>, id: u32, s: ServiceTable<F>) {
            if t.services.len() <= id as usize {
                t.services.resize(id as usize + 1, None);
                t.gens.resize(id as usize + 1, 0);
            }
            t.gens[id as usize] = s.gen;
            t.services[id as usize] = Some(Arc::new(s));
        }
        let gen = self.next_gen();
        let spec = self.specs[id as usize].as_ref().expect("rebuilt services have specs");
        let v6 = !spec.vip.is_ipv4();
        // Interned by `add_service` (a service's shape key never changes).
        let shape = ShapeKey::of(spec).and_then(|k| self.shape_ids.get(&(v6, k)).copied()).unwrap_or(0);
        if !v6 {
            let node = self.tables.v4.snat.map(|a| V4::to_ip(&a));
            put(&mut self.tables.v4, id, compile::<V4>(id, gen, spec, shape, &self.outer_adj, node));
        } else {
            let node = self.tables.v6.snat.map(|a| V6::to_ip(&a));
            put(&mut self.tables.v6, id, compile::<V6>(id, gen, spec, shape, &self.outer_adj, node));
        }
        self.maglev_builds += 1;
        if spec.forwarding.is_encap() {
            self.unresolved.push(id);
        }
    }

    /// Resolve every encapsulated backend to the adjacency its outer packets leave by
    /// (`resolve`: the router's answer, `ADJ_MISS` where the lookup must decide), so
    /// that `lbN-nat` sends them there without a second lookup (VPP's `lb4-gre4` does
    /// not look the outer header up either). Services whose answers changed get their
    /// backends' new adjacencies and a new generation: their sessions keep their
    /// backends and take the new adjacency (a session carries its own) from the full
    /// path on their next packet. True if any answer
    /// changed (the tables are then to publish). After route changes; service changes
    /// take [`LbState::resolve_changed`] (a new backend takes the lookup until then).
    pub fn resolve_outers(&mut self, mut resolve: impl FnMut(IpAddr) -> u32) -> bool {
        let mut adj = HashMap::new();
        for (_, s) in self.services().filter(|(_, s)| s.forwarding.is_encap()) {
            for b in &s.backends {
                adj.entry(b.addr).or_insert_with(|| resolve(b.addr));
            }
        }
        self.unresolved.clear();
        if adj == self.outer_adj {
            return false;
        }
        let old = std::mem::replace(&mut self.outer_adj, adj);
        let changed: Vec<u32> = self
            .services()
            .filter(|(_, s)| s.forwarding.is_encap() && s.backends.iter().any(|b| old.get(&b.addr) != self.outer_adj.get(&b.addr)))
            .map(|(id, _)| id)
            .collect();
        for id in changed {
            self.take_adjacencies(id);
        }
        true
    }

    /// [`LbState::resolve_outers`] for the services changed since resolution last ran,
    /// their backends not resolved yet only (routes have not changed since: the others'
    /// answers stand), so that a backend change costs its own service's resolution,
    /// not every service's. A service compiled before one of its backends was resolved
    /// takes the answers — also when another service of the same batch asked first
    /// (services sharing backends, added before one publish): an address resolved in
    /// this call is one every such service compiled without.
    pub fn resolve_changed(&mut self, mut resolve: impl FnMut(IpAddr) -> u32) {
        let mut fresh = std::collections::HashSet::new();
        for id in std::mem::take(&mut self.unresolved) {
            let Some(spec) = self.specs.get(id as usize).and_then(Option::as_ref) else { continue };
            let mut stale = false;
            for b in &spec.backends {
                if !self.outer_adj.contains_key(&b.addr) {
                    self.outer_adj.insert(b.addr, resolve(b.addr));
                    fresh.insert(b.addr);
                }
                stale |= fresh.contains(&b.addr);
            }
            if stale {
                self.take_adjacencies(id);
            }
        }
    }

    /// Service `id`'s backends' adjacencies again from the resolved ones, under a new
    /// generation (no Maglev build: its backends are the same).
    fn take_adjacencies(&mut self, id: u32) {
        fn set<F: Family>(t: &mut FamilyTables<F>, id: u32, gen: u32, adj: &HashMap<IpAddr, u32>) {
            if let Some(Some(s)) = t.services.get_mut(id as usize) {
                let s = Arc::make_mut(s);
                for b in &mut s.backends {
                    b.adj = adj.get(&F::to_ip(&b.addr)).copied().unwrap_or(ADJ_MISS);
                }
                s.gen = gen;
                t.gens[id as usize] = gen;
            }
        }
        let gen = self.next_gen();
        set(&mut self.tables.v4, id, gen, &self.outer_adj);
        set(&mut self.tables.v6, id, gen, &self.outer_adj);
    }

    /// A generation never handed out before: never 0 (no service); wraps to 1 after 4
    /// billion changes.
    fn next_gen(&mut self) -> u32 {
        self.last_gen = self.last_gen.checked_add(1).unwrap_or(1);
        self.last_gen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Protocol;

    pub(crate) fn spec(name: &str, vip: &str, port: u16, backends: &[&str]) -> ServiceSpec {
        ServiceSpec {
            name: name.into(),
            kind: ServiceType::ClusterIp,
            vip: vip.parse().unwrap(),
            port,
            protocol: Protocol::Tcp,
            backends: backends.iter().map(|a| BackendSpec::new(a.parse().unwrap(), 8080)).collect(),
            traffic_policy: TrafficPolicy::Cluster,
            affinity: Affinity::None,
            table_size: 0,
            forwarding: crate::service::Forwarding::Nat,
            gue_port: 0,
            source_ranges: Vec::new(),
        }
    }

    /// A load_balancer service's ranges in its table; its own address let through too
    /// while a range holds the node's (SNAT) address, as kube-proxy does (a node that
    /// holds the address reaches it from it), following the node's address when it
    /// changes; a service without ranges has no set (every source).
    #[test]
    fn source_ranges_and_the_node_s_address() {
        let mut st = LbState::new();
        st.set_snat(Some("198.18.1.1".parse().unwrap())).unwrap();
        let mut s = spec("lb", "198.18.131.20", 80, &["198.19.1.10"]);
        s.kind = ServiceType::LoadBalancer;
        s.source_ranges = vec!["198.18.50.0/24".parse().unwrap(), "198.18.1.0/24".parse().unwrap()];
        let id = st.add_service(s).unwrap();
        let open = st.add_service(spec("open", "198.18.131.21", 80, &["198.19.1.10"])).unwrap();
        let t = st.tables();
        let set = t.v4.service(id).unwrap().sources.clone().unwrap();
        assert!(set.contains_bytes(&[198, 18, 50, 9]) && set.contains_bytes(&[198, 18, 1, 7]) && !set.contains_bytes(&[198, 18, 51, 9]));
        assert!(set.contains_bytes(&[198, 18, 131, 20]), "a range holds the node's address: the service's own too");
        assert!(t.v4.service(open).unwrap().sources.is_none());
        let gen = t.v4.gen(id);
        st.set_snat(Some("198.18.2.1".parse().unwrap())).unwrap();
        let t = st.tables();
        let set = t.v4.service(id).unwrap().sources.clone().unwrap();
        assert!(!set.contains_bytes(&[198, 18, 131, 20]), "no range holds the node's new address");
        assert_ne!(t.v4.gen(id), gen, "built again: its sessions are checked again");
    }

    /// The steering sets follow the services: a backend two services share stays until
    /// both let it go, ports likewise; a backend's condition changes nothing; a DSR
    /// service's backends are not NAT backends.
    #[test]
    fn steering_sets_count_what_services_name() {
        let mut st = LbState::new();
        st.set_snat(Some("198.18.1.1".parse().unwrap())).unwrap();
        let be = |st: &LbState, a: &str| st.tables().v4.nat_backends.contains(&a.parse::<std::net::Ipv4Addr>().unwrap().octets());
        st.add_service(spec("a", "198.18.128.10", 80, &["198.19.1.10", "198.19.1.11"])).unwrap();
        st.add_service(spec("b", "198.18.128.11", 443, &["198.19.1.11"])).unwrap();
        let mut dsr = spec("c", "198.18.128.12", 8080, &["198.19.1.12"]);
        dsr.forwarding = crate::service::Forwarding::Gre;
        st.add_service(dsr).unwrap();
        let t = st.tables();
        assert!(be(&st, "198.19.1.10") && be(&st, "198.19.1.11") && !be(&st, "198.19.1.12"));
        assert!(t.v4.service_ports.contains(80) && t.v4.service_ports.contains(443) && t.v4.service_ports.contains(8080));
        assert!(t.v4.backend_ports.contains(8080) && !t.v4.backend_ports.contains(80) && !t.v6.service_ports.contains(80));
        let held = Arc::clone(&t.v4.nat_backends);
        st.update_backend("a", "198.19.1.10".parse().unwrap(), 8080, None, Some(Conditions { ready: false, ..Default::default() }))
            .unwrap();
        assert!(Arc::ptr_eq(&held, &st.tables().v4.nat_backends), "a condition changes no set");
        st.del_service("a").unwrap();
        assert!(!be(&st, "198.19.1.10") && be(&st, "198.19.1.11"), "still b's");
        assert!(!st.tables().v4.service_ports.contains(80) && st.tables().v4.backend_ports.contains(8080));
        assert!(held.contains(&[198, 19, 1, 10]), "a published version keeps its own");
        st.del_backend("b", "198.19.1.11".parse().unwrap(), 8080).unwrap();
        assert!(!be(&st, "198.19.1.11") && !st.tables().v4.backend_ports.contains(8080));
        st.del_service("b").unwrap();
        st.del_service("c").unwrap();
        assert!(st.tables().v4.nothing_to_steer() && st.backend_refs.is_empty() && st.port_refs.is_empty());
    }

    /// Backends whose replies come forwarded: those of services that keep the client's
    /// address (`Local`, or `Cluster` while its family has no SNAT address), counted like
    /// the steering sets, and counted again when the SNAT address is set.
    #[test]
    fn reply_sources_follow_the_services_that_keep_the_client() {
        let mut st = LbState::new();
        let reply = |st: &LbState, a: &str| st.tables().v4.reply_sources.contains(&a.parse::<std::net::Ipv4Addr>().unwrap().octets());
        let mut local = spec("local", "198.18.128.10", 80, &["198.19.1.10"]);
        local.traffic_policy = TrafficPolicy::Local;
        st.add_service(local).unwrap();
        st.add_service(spec("cluster", "198.18.128.11", 80, &["198.19.1.11"])).unwrap();
        assert!(reply(&st, "198.19.1.10") && reply(&st, "198.19.1.11"), "no SNAT address: both keep the client");
        assert!(st.has_local_policy());
        st.set_snat(Some("198.18.1.1".parse().unwrap())).unwrap();
        assert!(reply(&st, "198.19.1.10") && !reply(&st, "198.19.1.11"), "Cluster now translates to the node");
        let held = Arc::clone(&st.tables().v4.reply_sources);
        st.update_backend("local", "198.19.1.10".parse().unwrap(), 8080, Some(3), None).unwrap();
        assert!(Arc::ptr_eq(&held, &st.tables().v4.reply_sources), "a weight changes no set");
        st.set_backend("cluster", BackendSpec::new("198.19.1.12".parse().unwrap(), 8080)).unwrap();
        assert!(!reply(&st, "198.19.1.12"));
        st.del_service("local").unwrap();
        assert!(!reply(&st, "198.19.1.10") && !st.has_local_policy() && st.reply_refs.is_empty());
    }

    #[test]
    fn a_backend_change_rebuilds_only_its_service() {
        let mut st = LbState::new();
        for i in 0..100u32 {
            st.add_service(spec(
                &format!("s{i}"),
                &format!("198.18.{}.{}", 128 + i / 250, 1 + i % 250),
                80,
                &["198.19.1.10", "198.19.2.10"],
            ))
            .unwrap();
        }
        assert_eq!(st.maglev_builds, 100);
        let before = st.tables();
        st.set_backend("s7", BackendSpec::new("198.19.3.10".parse().unwrap(), 8080)).unwrap();
        assert_eq!(st.maglev_builds, 101);
        let after = st.tables();
        for id in 0..100 {
            let same = Arc::ptr_eq(before.v4.service(id).unwrap(), after.v4.service(id).unwrap());
            assert_eq!(same, id != 7, "service {id}");
        }
        assert_eq!(after.v4.service(7).unwrap().backends.len(), 3);
        assert_eq!(before.v4.service(7).unwrap().backends.len(), 2, "a published version never changes");
    }

    /// Encapsulated backends carry their resolved adjacency; a changed answer gives the
    /// service a new generation (its sessions carry the adjacency: they take the new
    /// one on their next packet), the same answers change nothing.
    #[test]
    fn encapsulated_backends_resolve_to_their_adjacency() {
        let mut st = LbState::new();
        st.set_snat(Some("198.18.1.1".parse().unwrap())).unwrap();
        // Encapsulation keeps the port: the backends listen on the service's.
        let mut gre = spec("gre", "198.18.128.10", 8080, &["198.19.1.10", "198.19.2.10"]);
        gre.forwarding = crate::service::Forwarding::Gre;
        st.add_service(gre).unwrap();
        st.add_service(spec("nat", "198.18.128.11", 80, &["198.19.3.10"])).unwrap();
        let adjs = |t: &LbTables| t.v4.service(0).unwrap().backends.iter().map(|b| b.adj).collect::<Vec<_>>();
        assert_eq!(adjs(&st.tables()), [ADJ_MISS, ADJ_MISS], "unresolved until resolved");
        let mut asked = Vec::new();
        let answer = |a: IpAddr, asked: &mut Vec<IpAddr>| {
            asked.push(a);
            if a == "198.19.1.10".parse::<IpAddr>().unwrap() {
                7
            } else {
                9
            }
        };
        assert!(st.resolve_outers(|a| answer(a, &mut asked)));
        assert_eq!(asked.len(), 2, "NAT services' backends are not resolved: {asked:?}");
        let gen = st.tables().v4.gen(0);
        assert_eq!(adjs(&st.tables()), [7, 9]);
        assert_eq!(st.tables().v4.service(0).unwrap().gen, gen);
        assert!(!st.resolve_outers(|a| answer(a, &mut Vec::new())), "the same answers change nothing");
        assert_eq!(st.tables().v4.gen(0), gen);
        let nat_gen = st.tables().v4.gen(1);
        assert!(st.resolve_outers(|_| 11));
        assert_eq!(adjs(&st.tables()), [11, 11]);
        assert_ne!(st.tables().v4.gen(0), gen, "new answers, a new generation");
        assert_eq!(st.tables().v4.gen(1), nat_gen, "the NAT service untouched");
        // A rebuilt service keeps the answers; a new backend takes the lookup until
        // resolved, alone (the others' answers stand until routes change).
        st.set_backend("gre", BackendSpec::new("198.19.4.10".parse().unwrap(), 8080)).unwrap();
        assert_eq!(adjs(&st.tables()), [11, 11, ADJ_MISS]);
        let rebuilt = st.tables().v4.gen(0);
        let mut asked = Vec::new();
        st.resolve_changed(|a| {
            asked.push(a);
            13
        });
        assert_eq!(asked, ["198.19.4.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(adjs(&st.tables()), [11, 11, 13]);
        assert_ne!(st.tables().v4.gen(0), rebuilt);
        assert_eq!(st.tables().v4.service(0).unwrap().gen, st.tables().v4.gen(0));
    }

    /// Outer header shapes: one a family per mode and GUE port, shared by the services
    /// that have it, kept in their places when the node's address changes (made again
    /// from it) and when services go.
    #[test]
    fn services_share_outer_header_shapes() {
        use crate::service::Forwarding;
        let mut st = LbState::new();
        st.set_snat(Some("198.18.1.1".parse().unwrap())).unwrap();
        st.set_snat(Some("2001:db8::1".parse().unwrap())).unwrap();
        let add = |st: &mut LbState, name: &str, vip: &str, backend: &str, f: Forwarding, gue_port: u16| {
            let mut s = spec(name, vip, 8080, &[backend]);
            s.forwarding = f;
            s.gue_port = gue_port;
            st.add_service(s).unwrap()
        };
        let shape = |st: &LbState, id: u32| st.tables().v4.service(id).map(|s| s.shape);
        let a = add(&mut st, "gre-a", "198.18.128.10", "198.19.1.10", Forwarding::Gre, 0);
        let b = add(&mut st, "gre-b", "198.18.128.11", "198.19.1.11", Forwarding::Gre, 0);
        let c = add(&mut st, "gue", "198.18.128.12", "198.19.1.12", Forwarding::Gue, 6080);
        let d = add(&mut st, "gue-default", "198.18.128.13", "198.19.1.13", Forwarding::Gue, 0);
        let e = add(&mut st, "gue-other", "198.18.128.14", "198.19.1.14", Forwarding::Gue, 7000);
        add(&mut st, "gre6", "2001:db8:80::1", "2001:db8:1::10", Forwarding::Gre, 0);
        assert_eq!(shape(&st, a), shape(&st, b));
        assert_eq!(shape(&st, c), shape(&st, d), "port 0 is the default GUE port, 6080");
        assert_ne!(shape(&st, c), shape(&st, e));
        assert_ne!(shape(&st, a), shape(&st, c));
        assert_eq!((st.tables().v4.shapes.len(), st.tables().v6.shapes.len()), (3, 1));
        let src = |st: &LbState, id: u32| st.tables().v4.shape(shape(st, id).unwrap()).unwrap().bytes()[12..16].to_vec();
        assert_eq!(src(&st, e), [198, 18, 1, 1]);
        st.set_snat(Some("198.18.1.2".parse().unwrap())).unwrap();
        assert_eq!((src(&st, a), src(&st, e)), (vec![198, 18, 1, 2], vec![198, 18, 1, 2]), "every IPv4 shape made again");
        assert_eq!(st.tables().v6.shapes[0].bytes()[8..24], "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        st.del_service("gre-a").unwrap();
        assert_eq!(shape(&st, b), Some(0));
        assert_eq!(st.tables().v4.shapes.len(), 3);
    }

    /// Services sharing backends, added before one resolution: every one of them gets
    /// the answers, not only the first to ask (the second used to keep `ADJ_MISS`, its
    /// outer packets sent through `ipN-lookup`).
    #[test]
    fn services_sharing_backends_all_resolve() {
        let mut st = LbState::new();
        st.set_snat(Some("198.18.1.1".parse().unwrap())).unwrap();
        for (i, backends) in
            [["198.19.1.10", "198.19.2.10"], ["198.19.2.10", "198.19.1.10"], ["198.19.1.10", "198.19.3.10"]].iter().enumerate()
        {
            let mut gre = spec(&format!("gre{i}"), &format!("198.18.128.{}", 10 + i), 8080, backends);
            gre.forwarding = crate::service::Forwarding::Gre;
            st.add_service(gre).unwrap();
        }
        let mut asked = Vec::new();
        st.resolve_changed(|a| {
            asked.push(a);
            match a.to_string().as_str() {
                "198.19.1.10" => 7,
                "198.19.2.10" => 8,
                _ => 9,
            }
        });
        assert_eq!(asked.len(), 3, "each address asked once: {asked:?}");
        let adjs = |id: u32| st.tables().v4.service(id).unwrap().backends.iter().map(|b| b.adj).collect::<Vec<_>>();
        assert_eq!([adjs(0), adjs(1), adjs(2)], [[7, 8], [8, 7], [7, 9]].map(Vec::from));
    }

    #[test]
    fn lookup_by_vip_and_node_port() {
        let mut st = LbState::new();
        st.add_service(spec("a", "198.18.128.10", 80, &["198.19.1.10"])).unwrap();
        let mut np = spec("np", "0.0.0.0", 30080, &["198.19.2.10"]);
        np.kind = ServiceType::NodePort;
        st.add_service(np).unwrap();
        st.add_service(spec("six", "2001:db8:80::10", 80, &["2001:db8:1::10"])).unwrap();
        let t = st.tables();
        assert_eq!(t.v4.lookup(&[198, 18, 128, 10], 80, 6, false).unwrap().id, 0);
        assert!(t.v4.lookup(&[198, 18, 128, 10], 80, 17, false).is_none());
        assert!(t.v4.lookup(&[198, 18, 128, 10], 81, 6, false).is_none());
        assert!(t.v4.lookup(&[198, 18, 0, 2], 30080, 6, false).is_none(), "a node port only on local addresses");
        assert_eq!(t.v4.lookup(&[198, 18, 0, 2], 30080, 6, true).unwrap().id, 1);
        let six: [u8; 16] = "2001:db8:80::10".parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert_eq!(t.v6.lookup(&six, 80, 6, false).unwrap().id, 2);
        st.del_service("a").unwrap();
        assert!(st.tables().v4.lookup(&[198, 18, 128, 10], 80, 6, false).is_none());
        // The id is reused.
        assert_eq!(st.add_service(spec("b", "198.18.128.11", 80, &[])).unwrap(), 0);
    }

    #[test]
    fn conditions_choose_who_takes_new_flows() {
        let mut st = LbState::new();
        st.add_service(spec("a", "198.18.128.10", 80, &["198.19.1.10", "198.19.2.10", "198.19.3.10"])).unwrap();
        let draining = Conditions { ready: false, serving: true, terminating: true };
        st.update_backend("a", "198.19.2.10".parse().unwrap(), 8080, None, Some(draining)).unwrap();
        let t = st.tables();
        let s = t.v4.service(0).unwrap();
        assert_eq!(s.backends.iter().map(|b| b.eligible).collect::<Vec<_>>(), [true, false, true]);
        assert!(s.maglev.iter().all(|&i| i != 1));
        // Every backend terminating: the serving ones take new flows rather than none.
        st.update_backend("a", "198.19.1.10".parse().unwrap(), 8080, None, Some(draining)).unwrap();
        st.update_backend(
            "a",
            "198.19.3.10".parse().unwrap(),
            8080,
            None,
            Some(Conditions { ready: false, serving: false, terminating: true }),
        )
        .unwrap();
        let t = st.tables();
        let s = t.v4.service(0).unwrap();
        assert_eq!(s.backends.iter().map(|b| b.eligible).collect::<Vec<_>>(), [true, true, false]);
        st.del_backend("a", "198.19.1.10".parse().unwrap(), 8080).unwrap();
        st.del_backend("a", "198.19.2.10".parse().unwrap(), 8080).unwrap();
        assert!(st.tables().v4.service(0).unwrap().maglev.is_empty());
    }

    #[test]
    fn local_policy_keeps_external_traffic_on_local_backends() {
        let mut st = LbState::new();
        let mut s = spec("lb", "198.18.200.1", 443, &["198.19.1.10", "198.19.2.10"]);
        s.kind = ServiceType::LoadBalancer;
        s.traffic_policy = TrafficPolicy::Local;
        s.backends[0].local = false;
        st.add_service(s).unwrap();
        let t = st.tables();
        let svc = t.v4.service(0).unwrap();
        assert!(!svc.snat);
        assert!(svc.maglev.iter().all(|&i| i == 1));
    }

    /// Topology-aware routing: backends hinted for other zones take no new connection
    /// while a ready one of this zone is there (whatever its weight), and do when none is;
    /// the terminating fallback comes only after every zone's ready ones.
    #[test]
    fn other_zone_backends_take_new_connections_only_without_a_ready_one_here() {
        let mut st = LbState::new();
        let mut s = spec("z", "198.18.128.30", 80, &["198.19.1.10", "198.19.2.10", "198.19.3.10"]);
        s.backends[0].other_zone = true;
        s.backends[1].other_zone = true;
        st.add_service(s.clone()).unwrap();
        let eligible = |st: &LbState| {
            st.tables().v4.service(st.service("z").unwrap().0).unwrap().backends.iter().map(|b| b.eligible).collect::<Vec<_>>()
        };
        assert_eq!(eligible(&st), [false, false, true]);
        assert!(st.tables().v4.service(0).unwrap().maglev.iter().all(|&i| i == 2), "every slot to this zone's backend");
        // This zone's backend terminating: every zone's ready ones, not the terminating one.
        s.backends[2].conditions = Conditions { ready: false, serving: true, terminating: true };
        st.del_service("z").unwrap();
        st.add_service(s.clone()).unwrap();
        assert_eq!(eligible(&st), [true, true, false]);
        // None ready anywhere: the serving terminating one.
        s.backends[0].conditions.ready = false;
        s.backends[1].conditions.ready = false;
        st.del_service("z").unwrap();
        st.add_service(s).unwrap();
        assert_eq!(eligible(&st), [false, false, true]);
    }

    /// `internalTrafficPolicy: Local`: a cluster IP's new connections go to this node's
    /// backends only, and with none of them (but some elsewhere) are dropped, as
    /// kube-proxy's "has no local endpoints" rule does, not refused.
    #[test]
    fn local_policy_keeps_cluster_ip_traffic_on_local_backends() {
        let mut st = LbState::new();
        let mut s = spec("ci", "198.18.128.20", 80, &["198.19.1.10", "198.19.2.10"]);
        s.traffic_policy = TrafficPolicy::Local;
        s.backends[0].local = false;
        st.add_service(s.clone()).unwrap();
        let svc = st.tables().v4.service(0).unwrap().clone();
        assert!(svc.maglev.iter().all(|&i| i == 1) && !svc.drop_without_backend);
        s.backends[1].local = false;
        st.del_service("ci").unwrap();
        st.add_service(s).unwrap();
        let id = st.service("ci").unwrap().0;
        let t = st.tables();
        let svc = t.v4.service(id).unwrap();
        assert!(svc.maglev.is_empty() && svc.drop_without_backend, "endpoints elsewhere only: dropped");
    }

    #[test]
    fn bad_requests_name_the_service_and_field() {
        let mut st = LbState::new();
        st.add_service(spec("a", "198.18.128.10", 80, &[])).unwrap();
        let e = st.add_service(spec("a", "198.18.128.11", 80, &[])).unwrap_err().to_string();
        assert_eq!(e, "service \"a\": name: already exists");
        let e = st.add_service(spec("b", "198.18.128.10", 80, &[])).unwrap_err().to_string();
        assert_eq!(e, "service \"b\": vip/port/protocol: 198.18.128.10 port 80/tcp already belongs to service \"a\"");
        let e =
            st.set_backend("a", BackendSpec { weight: 0, ..BackendSpec::new("198.19.1.1".parse().unwrap(), 1) }).unwrap_err().to_string();
        assert_eq!(e, "service \"a\": backends[0].weight: 0: expected 1 to 1000");
        let e = st.del_backend("a", "198.19.1.1".parse().unwrap(), 1).unwrap_err().to_string();
        assert_eq!(e, "service \"a\": backend 198.19.1.1 port 1: no such backend");
        assert_eq!(st.del_service("zz").unwrap_err().to_string(), "service \"zz\": no such service");
    }

    thread_local! {
        /// How many digests [`counted`] computed on this thread.
        static COMPUTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// A stand-in for the control plane's digest: any function of the whole spec does
    /// for the cache (std's hasher has fixed keys, so equal specs give equal values).
    fn counted(s: &ServiceSpec) -> u64 {
        use std::hash::{Hash, Hasher};
        COMPUTED.with(|n| n.set(n.get() + 1));
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{s:?}").hash(&mut h);
        h.finish()
    }

    fn computed() -> usize {
        COMPUTED.with(|n| n.replace(0))
    }

    /// Digests by service name, in service order.
    type Named = Vec<(String, u64)>;

    /// The cached digests, and those computed afresh from the specs, by name.
    fn cached_and_fresh(st: &mut LbState) -> (Named, Named) {
        let cached = st.digests(counted).map(|(n, d)| (n.to_string(), d)).collect();
        let fresh = st.services().map(|(_, s)| (s.name.clone(), counted(s))).collect();
        (cached, fresh)
    }

    /// Another digest function than the last call's is not answered from the cache.
    #[test]
    fn another_digest_function_computes_every_digest_again() {
        let mut st = LbState::new();
        st.add_service(spec("s1", "198.18.131.1", 80, &["198.19.1.1"])).unwrap();
        let first: Vec<u64> = st.digests(counted).map(|(_, d)| d).collect();
        fn zero(_: &ServiceSpec) -> u64 {
            0
        }
        assert_eq!(st.digests(zero).map(|(_, d)| d).collect::<Vec<_>>(), [0]);
        assert_eq!(st.digests(counted).map(|(_, d)| d).collect::<Vec<_>>(), first);
    }

    /// A digest is computed once per change of its service: the second look computes
    /// none, a backend's change only that service's, a deletion none, an addition its own.
    #[test]
    fn digests_are_computed_once_per_change() {
        let mut st = LbState::new();
        for i in 1..=3u8 {
            st.add_service(spec(&format!("s{i}"), &format!("198.18.131.{i}"), 80, &["198.19.1.1", "198.19.1.2"])).unwrap();
        }
        computed();
        assert_eq!(st.digests(counted).count(), 3);
        assert_eq!(computed(), 3);
        let before: Named = st.digests(counted).map(|(n, d)| (n.to_string(), d)).collect();
        assert_eq!(computed(), 0, "nothing changed: nothing computed");
        st.update_backend("s2", "198.19.1.1".parse().unwrap(), 8080, Some(7), None).unwrap();
        let after: Named = st.digests(counted).map(|(n, d)| (n.to_string(), d)).collect();
        assert_eq!(computed(), 1);
        assert_eq!((after[0] == before[0], after[1] == before[1], after[2] == before[2]), (true, false, true));
        st.del_service("s1").unwrap();
        assert_eq!(st.digests(counted).map(|(n, _)| n.to_string()).collect::<Vec<_>>(), ["s2", "s3"]);
        assert_eq!(computed(), 0);
        // The freed slot taken by another service: its own digest, not s1's.
        st.add_service(spec("s4", "198.18.131.4", 80, &["198.19.1.1", "198.19.1.2"])).unwrap();
        let (cached, fresh) = cached_and_fresh(&mut st);
        assert_eq!(cached, fresh);
        assert_eq!(computed(), 1 + 3, "s4's, then the fresh three");
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Add service i (port: a spec that differs from an earlier one of the name).
        Add(u8, u16),
        Del(u8),
        /// set_backend (service, backend, weight).
        Set(u8, u8, u32),
        /// update_backend (service, backend, weight, ready).
        Update(u8, u8, Option<u32>, Option<bool>),
        DelBackend(u8, u8),
        /// Look at the digests (a controller's check) between changes.
        Look,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..4u8, 80..83u16).prop_map(|(i, p)| Op::Add(i, p)),
            (0..4u8).prop_map(Op::Del),
            (0..4u8, 0..4u8, 0..4u32).prop_map(|(i, b, w)| Op::Set(i, b, w)),
            (0..4u8, 0..4u8, proptest::option::of(1..4u32), proptest::option::of(any::<bool>()))
                .prop_map(|(i, b, w, r)| Op::Update(i, b, w, r)),
            (0..4u8, 0..4u8).prop_map(|(i, b)| Op::DelBackend(i, b)),
            Just(Op::Look),
        ]
    }

    use proptest::prelude::*;

    proptest! {
        /// After any sequence of changes (each may be refused: a refused one changes
        /// nothing), the cached digests are those computed afresh from the specs.
        #[test]
        fn cached_digests_equal_fresh_ones(ops in proptest::collection::vec(op(), 1..60)) {
            let mut st = LbState::new();
            let name = |i: u8| format!("svc{i}");
            let backend = |b: u8| -> IpAddr { format!("198.19.1.{}", b + 1).parse().unwrap() };
            for op in ops {
                match op {
                    Op::Add(i, port) => {
                        let _ = st.add_service(spec(&name(i), &format!("198.18.131.{}", i + 1), port, &["198.19.1.1"]));
                    }
                    Op::Del(i) => {
                        let _ = st.del_service(&name(i));
                    }
                    Op::Set(i, b, w) => {
                        let _ = st.set_backend(&name(i), BackendSpec { weight: w, ..BackendSpec::new(backend(b), 8080) });
                    }
                    Op::Update(i, b, w, ready) => {
                        let conditions = ready.map(|ready| Conditions { ready, ..Conditions::default() });
                        let _ = st.update_backend(&name(i), backend(b), 8080, w, conditions);
                    }
                    Op::DelBackend(i, b) => {
                        let _ = st.del_backend(&name(i), backend(b), 8080);
                    }
                    Op::Look => {
                        let (cached, fresh) = cached_and_fresh(&mut st);
                        prop_assert_eq!(cached, fresh);
                    }
                }
            }
            let (cached, fresh) = cached_and_fresh(&mut st);
            prop_assert_eq!(cached, fresh);
        }
    }
}
