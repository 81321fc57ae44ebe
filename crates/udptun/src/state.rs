//! The control plane's UDP tunnels: validated specs by id, compiled into
//! [`UdpTunTables`]. Creating or deleting a tunnel changes this state and the router's
//! (routes into the tunnel); the caller publishes both.

use crate::tables::UdpTunTables;
use crate::tunnel::{GreSequence, Tunnel, UdpTunnelSpec};
use ip::outer::ChecksumMode;
use ip::state::RouterState;
use ip::tables::{TunnelRef, UdpApp, UdpDemux, ADJ_MISS};
use ip::tunnel_counters::WorkerCounters;
use ip::Prefix;
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UdpTunError {
    #[error("local {local} and remote {remote} are different address families")]
    FamilyMismatch { local: IpAddr, remote: IpAddr },
    #[error("local {0} is not one of the gateway's addresses")]
    LocalNotOurs(IpAddr),
    #[error("remote {0} is one of the gateway's own addresses")]
    RemoteIsLocal(IpAddr),
    #[error("port {0}: expected 1 to 65535, and not 2152 (GTP-U)")]
    BadPort(u16),
    #[error("source ports {0}-{1}: expected a range from 1 to 65535, low end first")]
    BadSourcePorts(u16, u16),
    #[error("a GRE key, checksum or sequence number is for GRE encapsulation only")]
    GreOptionWithoutGre,
    #[error("checksum offload is for IPv6 outer headers (over IPv4 a zero checksum is allowed)")]
    OffloadOverIpv4,
    #[error("udp_tunnel{id} already joins {local} and {remote} on port {port}")]
    Duplicate { local: IpAddr, remote: IpAddr, port: u16, id: u32 },
    #[error("no tunnel udp_tunnel{0}")]
    NoSuchTunnel(u32),
    #[error("route {0}: {1}")]
    Route(Prefix, String),
}

/// What `UdpTunState::modify` changes; `None` keeps the field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpTunnelChange {
    pub remote: Option<IpAddr>,
    pub port: Option<u16>,
    /// `Some(None)` removes the GRE key.
    pub gre_key: Option<Option<u32>>,
    /// The reverse-path check of what it decapsulates.
    pub urpf: Option<ip::urpf::Urpf>,
    /// The outer DSCP policy (`ip::outer::tos`): the next packet carries it.
    pub dscp: Option<ip::outer::tos::Dscp>,
}

#[derive(Debug, Default)]
pub struct UdpTunState {
    tunnels: Vec<Option<UdpTunnelSpec>>,
    /// Each tunnel's outer adjacency, as of the last `refresh_outer`.
    outer_adj: Vec<u32>,
    /// By tunnel id, for tunnels that send GRE sequence numbers: the counter every
    /// table version shares.
    gre_sequence: std::collections::HashMap<u32, GreSequence>,
    /// Each worker's per-tunnel counters (reset when a tunnel id is freed).
    pub counters: WorkerCounters,
}

impl UdpTunState {
    pub fn new() -> Self {
        UdpTunState::default()
    }

    pub fn len(&self) -> usize {
        self.tunnels.iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tunnel `id`'s outer headers in bytes and the adjacency its outer packets leave by.
    pub fn outer(&self, id: u32) -> Option<(usize, u32)> {
        let s = self.spec(id)?;
        Some((Tunnel::new(s).rewrite_len as usize, self.outer_adj.get(id as usize).copied().unwrap_or(ADJ_MISS)))
    }

    pub fn spec(&self, id: u32) -> Option<&UdpTunnelSpec> {
        self.tunnels.get(id as usize).and_then(Option::as_ref)
    }

    pub fn tunnels(&self) -> impl Iterator<Item = (u32, &UdpTunnelSpec)> {
        self.tunnels.iter().enumerate().filter_map(|(i, t)| t.as_ref().map(|t| (i as u32, t)))
    }

    /// The tunnel with these endpoints and port.
    pub fn find(&self, local: IpAddr, remote: IpAddr, port: u16) -> Option<u32> {
        self.tunnels().find(|(_, t)| t.local == local && t.remote == remote && t.port == port).map(|(i, _)| i)
    }

    pub fn validate(&self, router: &RouterState, s: &UdpTunnelSpec) -> Result<(), UdpTunError> {
        self.validate_as(router, s, None)
    }

    /// `validate` for tunnel `this` (none: a new one), which may keep its own endpoints.
    fn validate_as(&self, router: &RouterState, s: &UdpTunnelSpec, this: Option<u32>) -> Result<(), UdpTunError> {
        let ours = |a: IpAddr| {
            router.interfaces().iter().any(|i| match a {
                IpAddr::V4(v) => i.has_ip4(v),
                IpAddr::V6(v) => i.has_ip6(&v),
            })
        };
        if s.local.is_ipv4() != s.remote.is_ipv4() {
            return Err(UdpTunError::FamilyMismatch { local: s.local, remote: s.remote });
        }
        if !ours(s.local) {
            return Err(UdpTunError::LocalNotOurs(s.local));
        }
        if ours(s.remote) {
            return Err(UdpTunError::RemoteIsLocal(s.remote));
        }
        if s.port == 0 || s.port == wire::gtpu::PORT {
            return Err(UdpTunError::BadPort(s.port));
        }
        if s.src_port_min == 0 || s.src_port_min > s.src_port_max {
            return Err(UdpTunError::BadSourcePorts(s.src_port_min, s.src_port_max));
        }
        if (s.gre_key.is_some() || s.gre_checksum || s.gre_sequence) && s.encap != crate::Encap::Gre {
            return Err(UdpTunError::GreOptionWithoutGre);
        }
        if s.checksum == ChecksumMode::Offload && s.local.is_ipv4() {
            return Err(UdpTunError::OffloadOverIpv4);
        }
        if let Some(id) = self.find(s.local, s.remote, s.port).filter(|&id| Some(id) != this) {
            return Err(UdpTunError::Duplicate { local: s.local, remote: s.remote, port: s.port, id });
        }
        Ok(())
    }

    /// Create a tunnel with routes into it; returns its id (the lowest free one).
    pub fn create(&mut self, router: &mut RouterState, spec: UdpTunnelSpec, routes: &[Prefix]) -> Result<u32, UdpTunError> {
        self.validate(router, &spec)?;
        let id = self.tunnels.iter().position(Option::is_none).unwrap_or(self.tunnels.len()) as u32;
        let t = TunnelRef { kind: spec.kind(), id };
        // Static routes into the tunnel (a handful, unlike GTP-U's million UE routes):
        // `show ip fib` lists them; they are the tunnel's, so they go only with it.
        let rs: Vec<(Prefix, TunnelRef)> = routes.iter().map(|p| (*p, t)).collect();
        router.add_owned_routes(&rs).map_err(|(i, e)| UdpTunError::Route(routes[i], e.to_string()))?;
        if spec.gre_sequence {
            self.gre_sequence.insert(id, GreSequence::default());
        }
        if id as usize == self.tunnels.len() {
            self.tunnels.push(Some(spec));
        } else {
            self.tunnels[id as usize] = Some(spec);
        }
        Ok(id)
    }

    /// Change tunnel `id` in place (a new peer, port or GRE key): it keeps its id, so the
    /// routes into it, its counters and its GRE sequence stay, and the next published
    /// tables carry the new outer header and receive key in one step — no packet routed
    /// into it sees the tunnel missing. Returns the spec before the change.
    pub fn modify(&mut self, router: &mut RouterState, id: u32, change: UdpTunnelChange) -> Result<UdpTunnelSpec, UdpTunError> {
        let old = self.spec(id).ok_or(UdpTunError::NoSuchTunnel(id))?.clone();
        let mut new = old.clone();
        new.remote = change.remote.unwrap_or(old.remote);
        new.port = change.port.unwrap_or(old.port);
        new.gre_key = change.gre_key.unwrap_or(old.gre_key);
        new.urpf = change.urpf.unwrap_or(old.urpf);
        new.dscp = change.dscp.unwrap_or(old.dscp);
        self.validate_as(router, &new, Some(id))?;
        self.set_in_place(router, id, new);
        Ok(old)
    }

    /// Replace tunnel `id` by `spec` whole, under the same id (a reload's change beyond
    /// what `modify` changes): its name and every route into it stay, where a delete
    /// and a create would drop the routes and might take a lower free id. It starts
    /// again as a new tunnel would: counters from zero, a new GRE sequence. `spec` keeps
    /// the local address's family (the FIB entries of the routes name it; a reload
    /// replaces a tunnel with the same endpoints only). Returns the spec before.
    pub fn replace(&mut self, router: &mut RouterState, id: u32, spec: UdpTunnelSpec) -> Result<UdpTunnelSpec, UdpTunError> {
        let old = self.spec(id).ok_or(UdpTunError::NoSuchTunnel(id))?.clone();
        debug_assert_eq!(spec.kind(), old.kind(), "a replaced tunnel keeps its family");
        self.validate_as(router, &spec, Some(id))?;
        self.gre_sequence.remove(&id);
        if spec.gre_sequence {
            self.gre_sequence.insert(id, GreSequence::default());
        }
        self.counters.reset(id);
        self.set_in_place(router, id, spec);
        Ok(old)
    }

    /// Put `spec` at `id` with its outer hop resolved (`modify` and `replace`).
    fn set_in_place(&mut self, router: &mut RouterState, id: u32, spec: UdpTunnelSpec) {
        let adj = router.resolve_outer(spec.remote);
        self.tunnels[id as usize] = Some(spec);
        if self.outer_adj.len() <= id as usize {
            self.outer_adj.resize(id as usize + 1, ADJ_MISS);
        }
        self.outer_adj[id as usize] = adj;
    }

    /// Delete a tunnel and every route into it.
    pub fn delete(&mut self, router: &mut RouterState, id: u32) -> Result<UdpTunnelSpec, UdpTunError> {
        let spec = self.tunnels.get_mut(id as usize).and_then(Option::take).ok_or(UdpTunError::NoSuchTunnel(id))?;
        self.gre_sequence.remove(&id);
        self.counters.reset(id);
        let r = TunnelRef { kind: spec.kind(), id };
        router.del_tunnel_routes_into(r);
        router.del_routes_into(r);
        while self.tunnels.last().is_some_and(Option::is_none) {
            self.tunnels.pop();
        }
        Ok(spec)
    }

    /// Re-resolve every tunnel's outer adjacency (after any route or tunnel change). A
    /// remote routed into a tunnel gets `ADJ_MISS`: its packets take the lookup.
    pub fn refresh_outer(&mut self, router: &mut RouterState) {
        self.outer_adj = self.tunnels.iter().map(|t| t.as_ref().map_or(ADJ_MISS, |s| router.resolve_outer(s.remote))).collect();
    }

    /// Add the tunnels to the router's local UDP demux: the ports they receive on, and
    /// the (our address, port) pairs `ethernet-input` hands straight to the tunnel input,
    /// skipping `ipN-input`, the route lookup and `ipN-local`.
    pub fn add_to_demux(&self, d: &mut UdpDemux) {
        for (_, t) in self.tunnels() {
            let port = (t.port, UdpApp::Gue);
            if !d.ports.contains(&port) {
                d.ports.push(port);
            }
            match t.local {
                IpAddr::V4(a) if !d.bypass4.contains(&(a, t.port, UdpApp::Gue)) => d.bypass4.push((a, t.port, UdpApp::Gue)),
                IpAddr::V6(a) if !d.bypass6.contains(&(a, t.port, UdpApp::Gue)) => d.bypass6.push((a, t.port, UdpApp::Gue)),
                _ => {}
            }
        }
    }

    pub fn build(&self) -> UdpTunTables {
        let mut t = UdpTunTables {
            tunnels: (self.tunnels.iter().enumerate())
                .map(|(id, s)| {
                    let t = Tunnel::new(s.as_ref()?);
                    Some(match self.gre_sequence.get(&(id as u32)) {
                        Some(c) => t.counting_on(c),
                        None => t,
                    })
                })
                .collect(),
            outer_adj: self.outer_adj.clone(),
            count_tunnels: self.counters.enabled(),
            ..Default::default()
        };
        for (id, s) in self.tunnels() {
            match (s.local, s.remote) {
                (IpAddr::V4(l), IpAddr::V4(r)) => {
                    t.decap4.insert((l, r, s.port), id);
                }
                (IpAddr::V6(l), IpAddr::V6(r)) => {
                    t.decap6.insert((l, r, s.port), id);
                }
                _ => {}
            }
        }
        t
    }
}
