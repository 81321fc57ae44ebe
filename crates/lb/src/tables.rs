//! The tables the LB nodes read, built by [`crate::state::LbState`] and published whole
//! (an `ArcSwap` the workers poll between vectors). Each service's table is its own
//! `Arc`, so a change to one service's backends builds that service's Maglev table and
//! copies pointers for the rest.

use crate::encap::Outer;
use crate::family::{Family, V4, V6};
use crate::service::Conditions;
use engine::hash::WordHashBuilder;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backend<F: Family> {
    pub addr: F::Addr,
    pub port: u16,
    pub conditions: Conditions,
    /// In the service's Maglev table: takes new connections.
    pub eligible: bool,
    /// Encapsulated services: the adjacency the backend's outer packets leave by,
    /// resolved on the control plane ([`crate::LbState::resolve_outers`]); `ADJ_MISS`
    /// when `ipN-lookup` must decide (and for NAT).
    pub adj: u32,
}

#[derive(Debug, Clone)]
pub struct ServiceTable<F: Family> {
    pub id: u32,
    /// Unique to this build of the service (never reused, never 0): a session checked
    /// against it needs no new check while the service keeps it.
    pub gen: u32,
    /// A NodePort service (on any of the node's addresses).
    pub node_port: bool,
    pub port: u16,
    pub proto: u8,
    /// Translate the client's source to the node's address (`externalTrafficPolicy:
    /// Cluster`) so replies come back through the node.
    pub snat: bool,
    /// ClientIP affinity timeout; 0 without affinity.
    pub affinity_ms: u64,
    /// `Local` policy, and the backends that would take new flows are all on other nodes:
    /// a new flow is dropped, not refused, as kube-proxy does (the service has endpoints,
    /// this node is not one of them; whatever sent here should send elsewhere).
    pub drop_without_backend: bool,
    /// Every backend of the service, in any condition (a session names one by index).
    pub backends: Vec<Backend<F>>,
    /// Maglev: slot → index in `backends`; empty when no backend takes new flows.
    pub maglev: Vec<u32>,
    /// NAT, or the encapsulation of a direct-server-return service (`lbN-nat`).
    pub forwarding: crate::service::Forwarding,
    /// Encapsulated services: their outer headers' shape, in [`FamilyTables::shapes`]
    /// (0 for NAT, unused).
    pub shape: u16,
    /// A `load_balancer` service's `source_ranges`: the sources a new connection may
    /// come from, as a prefix set (a check costs a binary search of the merged ranges,
    /// not a scan of the list: cloud allowlists hold hundreds); `None`: every source.
    /// Read by a new connection only (a session hit reads none of it: a change of
    /// ranges is a new generation, so every session of the service is checked again by
    /// the full path).
    pub sources: Option<ip::PrefixSet>,
}

impl<F: Family> ServiceTable<F> {
    /// The backend a new flow of hash `h` goes to.
    #[inline(always)]
    pub fn pick(&self, h: u32) -> Option<u32> {
        if self.maglev.is_empty() {
            return None;
        }
        Some(self.maglev[engine::hash::reduce(h, self.maglev.len() as u32) as usize])
    }
}

/// One family's services.
#[derive(Debug)]
pub struct FamilyTables<F: Family> {
    /// By service id; `None` for ids of the other family or deleted.
    pub services: Vec<Option<Arc<ServiceTable<F>>>>,
    /// By service id: the service's [`ServiceTable::gen`], 0 for none. Apart from the
    /// services so that a session hit reads one word of a dense array, not a service.
    pub gens: Vec<u32>,
    /// The outer headers' shapes of encapsulated services, by [`ServiceTable::shape`]:
    /// a few, shared by every service and backend (interned by [`crate::LbState`]), so
    /// they stay in the L1 cache however many services packets go round.
    pub shapes: Vec<Outer>,
    /// ClusterIP and LoadBalancer services: (address, port, protocol) → service id.
    pub vips: HashMap<(F::Addr, u16, u8), u32, WordHashBuilder>,
    /// NodePort services: (port, protocol) → service id, on any local address.
    pub node_ports: HashMap<(u16, u8), u32, WordHashBuilder>,
    /// The node's address that `Cluster`-policy services translate sources to; without
    /// one, those services keep the client's address.
    pub snat: Option<F::Addr>,
    /// Backends of `Local`-policy services: forwarded packets from these may be replies
    /// to translate (others pass without a session lookup).
    pub reply_sources: Arc<std::collections::HashSet<F::Addr, WordHashBuilder>>,
    /// Backends of every NAT service: packets from these are steered to the worker of
    /// their destination, the connection's client ([`crate::steer`]).
    pub nat_backends: Arc<std::collections::HashSet<F::Addr, WordHashBuilder>>,
    /// The ports of every service (destination ports a client's packet may have) and
    /// of every NAT backend (source ports a reply may have): [`crate::steer`] passes
    /// by a packet that has neither with two bit tests.
    pub service_ports: PortSet,
    pub backend_ports: PortSet,
}

/// A set of ports, as a bitmap (8 KiB, shared by table versions).
#[derive(Clone)]
pub struct PortSet(Arc<[u64; 1024]>);

impl Default for PortSet {
    fn default() -> Self {
        PortSet(Arc::new([0; 1024]))
    }
}

impl std::fmt::Debug for PortSet {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "PortSet({} ports)", self.0.iter().map(|w| w.count_ones()).sum::<u32>())
    }
}

impl PortSet {
    /// Put `p` in or out (the bitmap copied first if a published table holds it).
    pub fn set(&mut self, p: u16, present: bool) {
        let w = &mut Arc::make_mut(&mut self.0)[p as usize >> 6];
        if present {
            *w |= 1 << (p & 63);
        } else {
            *w &= !(1 << (p & 63));
        }
    }

    #[inline(always)]
    pub fn contains(&self, p: u16) -> bool {
        self.0[p as usize >> 6] >> (p & 63) & 1 != 0
    }
}

impl<F: Family> Clone for FamilyTables<F> {
    fn clone(&self) -> Self {
        FamilyTables {
            services: self.services.clone(),
            gens: self.gens.clone(),
            shapes: self.shapes.clone(),
            vips: self.vips.clone(),
            node_ports: self.node_ports.clone(),
            snat: self.snat,
            reply_sources: self.reply_sources.clone(),
            nat_backends: self.nat_backends.clone(),
            service_ports: self.service_ports.clone(),
            backend_ports: self.backend_ports.clone(),
        }
    }
}

impl<F: Family> Default for FamilyTables<F> {
    fn default() -> Self {
        FamilyTables {
            services: Vec::new(),
            gens: Vec::new(),
            shapes: Vec::new(),
            vips: HashMap::default(),
            node_ports: HashMap::default(),
            snat: None,
            reply_sources: Default::default(),
            nat_backends: Default::default(),
            service_ports: PortSet::default(),
            backend_ports: PortSet::default(),
        }
    }
}

impl<F: Family> FamilyTables<F> {
    /// No service and no NAT backend of this family: [`crate::steer`] has nothing to do.
    #[inline]
    pub fn nothing_to_steer(&self) -> bool {
        self.vips.is_empty() && self.node_ports.is_empty() && self.nat_backends.is_empty()
    }

    /// The service a packet to `dst:port` belongs to; NodePort services only when `dst`
    /// is one of the node's addresses (`local`).
    #[inline]
    pub fn lookup(&self, dst: &F::Addr, port: u16, proto: u8, local: bool) -> Option<&Arc<ServiceTable<F>>> {
        let id = match self.vips.get(&(*dst, port, proto)) {
            Some(&id) => id,
            None if local => *self.node_ports.get(&(port, proto))?,
            None => return None,
        };
        self.service(id)
    }

    /// Outer headers' shape `i` (encapsulated services' [`ServiceTable::shape`]).
    #[inline(always)]
    pub fn shape(&self, i: u16) -> Option<&Outer> {
        self.shapes.get(i as usize)
    }

    /// The generation of service `id` (0 for none).
    #[inline(always)]
    pub fn gen(&self, id: u32) -> u32 {
        self.gens.get(id as usize).copied().unwrap_or(0)
    }

    #[inline(always)]
    pub fn service(&self, id: u32) -> Option<&Arc<ServiceTable<F>>> {
        self.services.get(id as usize).and_then(Option::as_ref)
    }
}

#[derive(Debug, Clone, Default)]
pub struct LbTables {
    pub v4: FamilyTables<V4>,
    pub v6: FamilyTables<V6>,
    /// The session timeouts (`[lb] timeouts`), published with the services so that a
    /// reload's reach every worker's balancers with the next version
    /// ([`crate::LbContext::refresh`]).
    pub timeouts: crate::session::Timeouts,
}

/// A family's part of the tables, for code generic over the family.
pub trait FamilyOf<F: Family> {
    fn family(&self) -> &FamilyTables<F>;
}

impl FamilyOf<V4> for LbTables {
    fn family(&self) -> &FamilyTables<V4> {
        &self.v4
    }
}

impl FamilyOf<V6> for LbTables {
    fn family(&self) -> &FamilyTables<V6> {
        &self.v6
    }
}
