//! The GTP-U control-plane state and the one typed API that changes it: the config
//! loader, the CLI and the JSON API all create and delete tunnels through
//! [`GtpuState`]. Every change is validated whole before anything is applied.

use crate::tables::{GtpuTables, Techniques};
use crate::teid_table::{self, TeidKey, TeidTable};
use crate::tunnel::{DecapNext, Tunnel, TunnelSpec};
use ip::tables::{TunnelRef, UdpApp, UdpDemux, ADJ_MISS, MAX_INDEX};
use ip::tunnel_counters::WorkerCounters;
use ip::urpf::Urpf;
use ip::{Prefix, RouterState, StateError};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use wire::gtpu::Qfi;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GtpuError {
    #[error("local address {0} is not an address of any interface")]
    LocalNotOurs(IpAddr),
    #[error("local {local} and remote {remote} are of different address families")]
    FamilyMismatch { local: IpAddr, remote: IpAddr },
    #[error("remote {0} is one of the gateway's own addresses")]
    RemoteIsLocal(IpAddr),
    #[error("teid_in 0 is reserved for path management messages (TS 29.281 §5.1)")]
    ZeroTeid,
    #[error("teid_out 0: expected the peer's TEID, 1 to 4294967295 (G-PDUs with TEID 0 would be taken for path management)")]
    ZeroTeidOut,
    #[error("local {local} already has a tunnel with teid_in {teid} (gtpu_tunnel{id})")]
    Duplicate { local: IpAddr, teid: u32, id: u32 },
    /// Two specs of one `create_many` share a key; `first` is the earlier one's index.
    #[error("local {local} already has a tunnel with teid_in {teid} (entry {first} of the same request)")]
    DuplicateInBatch { local: IpAddr, teid: u32, first: usize },
    #[error("no tunnel gtpu_tunnel{0}")]
    NoSuchTunnel(u32),
    #[error("decap_next ethernet: no interface with index {0}")]
    NoSuchInterface(usize),
    #[error("ue {0}: {1}")]
    Ue(Prefix, StateError),
    #[error("more than {MAX_INDEX} tunnels")]
    TooMany,
}

/// What [`GtpuState::modify`] changes; `None` keeps the tunnel's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunnelChange {
    pub remote: Option<IpAddr>,
    pub teid_out: Option<u32>,
    pub qfi: Option<Qfi>,
    /// The reverse-path check of what it decapsulates.
    pub urpf: Option<Urpf>,
    /// The outer DSCP policy (`ip::outer::tos`): the next packet carries it.
    pub dscp: Option<crate::tunnel::Dscp>,
}

pub struct GtpuState {
    tables: GtpuTables,
    free: Vec<u32>,
    count: usize,
    /// Each worker's per-tunnel counters (reset when a tunnel id is freed).
    pub counters: WorkerCounters,
}

impl Default for GtpuState {
    fn default() -> Self {
        GtpuState::new(Techniques::default())
    }
}

impl GtpuState {
    pub fn new(techniques: Techniques) -> Self {
        GtpuState {
            tables: GtpuTables { techniques, ..GtpuTables::default() },
            free: Vec::new(),
            count: 0,
            counters: WorkerCounters::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn techniques(&self) -> Techniques {
        self.tables.techniques
    }

    pub fn set_techniques(&mut self, t: Techniques) {
        self.tables.techniques = t;
    }

    pub fn tunnel(&self, id: u32) -> Option<&Tunnel> {
        self.tables.tunnel(id)
    }

    /// Live tunnels in id order.
    pub fn tunnels(&self) -> impl Iterator<Item = (u32, &Tunnel)> {
        (0..self.tables.tunnels.len() as u32).filter_map(|i| self.tables.tunnel(i).map(|t| (i, t)))
    }

    pub fn outer_adj(&self, id: u32) -> u32 {
        self.tables.outer_adj(id)
    }

    fn endpoint(&self, a: IpAddr) -> Option<u32> {
        match a {
            IpAddr::V4(v) => self.tables.endpoint4(v),
            IpAddr::V6(v) => self.tables.endpoint6(&v),
        }
    }

    fn endpoint_or_add(&mut self, a: IpAddr) -> u32 {
        if let Some(e) = self.endpoint(a) {
            return e;
        }
        match a {
            IpAddr::V4(v) => self.tables.endpoints4.push(v),
            IpAddr::V6(v) => self.tables.endpoints6.push(v),
        }
        self.endpoint(a).expect("just added")
    }

    /// The decap key of a spec, if its endpoint exists yet.
    fn decap_key(&self, local: IpAddr, teid: u32) -> Option<TeidKey> {
        self.endpoint(local).map(|e| teid_table::key(e, teid))
    }

    /// The tunnel with this local endpoint and incoming TEID.
    pub fn find(&self, local: IpAddr, teid_in: u32) -> Option<u32> {
        self.decap_key(local, teid_in).and_then(|k| self.tables.decap.get(k))
    }

    /// Check one spec against the router and the existing tunnels.
    pub fn validate(&self, router: &RouterState, spec: &TunnelSpec) -> Result<(), GtpuError> {
        Self::validate_peer(router, spec)?;
        if spec.teid_in == 0 {
            return Err(GtpuError::ZeroTeid);
        }
        if let Some(id) = self.find(spec.local, spec.teid_in) {
            return Err(GtpuError::Duplicate { local: spec.local, teid: spec.teid_in, id });
        }
        if let DecapNext::Ethernet(i) = spec.decap_next {
            if i.get() >= router.interfaces().len() {
                return Err(GtpuError::NoSuchInterface(i.get()));
            }
        }
        if let Some(ue) = spec.ue {
            router.validate_tunnel_route(&ue).map_err(|e| GtpuError::Ue(ue, e))?;
        }
        Ok(())
    }

    /// The checks on what a handover may change: the peer's address and TEID.
    fn validate_peer(router: &RouterState, spec: &TunnelSpec) -> Result<(), GtpuError> {
        let ours = |a: IpAddr| {
            router.interfaces().iter().any(|i| match a {
                IpAddr::V4(v) => i.has_ip4(v),
                IpAddr::V6(v) => i.has_ip6(&v),
            })
        };
        if spec.local.is_ipv4() != spec.remote.is_ipv4() {
            return Err(GtpuError::FamilyMismatch { local: spec.local, remote: spec.remote });
        }
        if !ours(spec.local) {
            return Err(GtpuError::LocalNotOurs(spec.local));
        }
        if ours(spec.remote) {
            return Err(GtpuError::RemoteIsLocal(spec.remote));
        }
        if spec.teid_out == 0 {
            return Err(GtpuError::ZeroTeidOut);
        }
        Ok(())
    }

    /// Change a tunnel in place, as a handover does (the peer's new address and TEID,
    /// the QFI), or its source check: it keeps its id, so its routes stay, and only its
    /// own slot, outer adjacency and (for the source check) decap entry's data change in
    /// the next published tables; other tunnels' packets never see a difference. Returns
    /// the spec before the change.
    pub fn modify(&mut self, router: &mut RouterState, id: u32, change: TunnelChange) -> Result<TunnelSpec, GtpuError> {
        let old = self.spec(router, id).ok_or(GtpuError::NoSuchTunnel(id))?;
        let mut new = old.clone();
        new.remote = change.remote.unwrap_or(old.remote);
        new.teid_out = change.teid_out.unwrap_or(old.teid_out);
        new.qfi = change.qfi.or(old.qfi);
        new.urpf = change.urpf.unwrap_or(old.urpf);
        new.dscp = change.dscp.unwrap_or(old.dscp);
        Self::validate_peer(router, &new)?;
        let t = Tunnel::build(&new);
        if t.decap_aux() != self.tables.tunnel(id).expect("live").decap_aux() {
            // The reverse-path check rides in the decap entry: that one slot changes.
            let k = self.decap_key(new.local, new.teid_in).expect("a live tunnel's endpoint");
            self.tables.decap.insert_entry(k, id, t.decap_aux());
        }
        *self.tables.tunnels.get_mut(id as usize).expect("live tunnel") = t;
        Arc::make_mut(&mut self.tables.outer_adj)[id as usize] = router.resolve_outer(new.remote);
        Ok(old)
    }

    /// Create one tunnel; returns its id (its interface is `gtpu_tunnel<id>`).
    pub fn create(&mut self, router: &mut RouterState, spec: TunnelSpec) -> Result<u32, GtpuError> {
        self.create_many(router, vec![spec]).map(|ids| ids[0]).map_err(|(_, e)| e)
    }

    /// Create many tunnels, all or nothing (the config loader's path). On error, the
    /// index of the offending spec.
    pub fn create_many(&mut self, router: &mut RouterState, specs: Vec<TunnelSpec>) -> Result<Vec<u32>, (usize, GtpuError)> {
        let mut keys = HashMap::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            self.validate(router, s).map_err(|e| (i, e))?;
            if let Some(first) = keys.insert((s.local, s.teid_in), i) {
                return Err((i, GtpuError::DuplicateInBatch { local: s.local, teid: s.teid_in, first }));
            }
        }
        drop(keys);
        // Ids: reuse freed ones first (the newest freed last), then append.
        let mut ids = Vec::with_capacity(specs.len());
        let mut next = self.tables.tunnels.len() as u32;
        let reuse = self.free.len().min(specs.len());
        let reused: Vec<u32> = self.free.split_off(self.free.len() - reuse);
        ids.extend(reused.iter().rev().copied());
        while ids.len() < specs.len() {
            if next > MAX_INDEX {
                self.free.extend(reused.iter().copied());
                return Err((ids.len(), GtpuError::TooMany));
            }
            ids.push(next);
            next += 1;
        }
        let routes: Vec<(Prefix, TunnelRef)> =
            specs.iter().zip(&ids).filter_map(|(s, &id)| s.ue.map(|p| (p, TunnelRef { kind: s.kind(), id }))).collect();
        if let Err((j, e)) = router.add_tunnel_routes(&routes) {
            self.free.extend(reused.iter().copied());
            let bad = routes[j].1.id;
            let i = ids.iter().position(|&x| x == bad).unwrap_or(0);
            return Err((i, GtpuError::Ue(routes[j].0, e)));
        }
        if next as usize > self.tables.tunnels.len() {
            self.tables.tunnels.resize(next as usize);
            Arc::make_mut(&mut self.tables.outer_adj).resize(next as usize, ADJ_MISS);
        }
        if self.tables.decap.len() + specs.len() > 2 * self.tables.decap.len().max(1) {
            // A bulk load: size the table once instead of growing it step by step.
            let mut t = TeidTable::with_capacity(self.tables.decap.len() + specs.len());
            let live: Vec<(u32, TeidKey, u32)> = self
                .tunnels()
                .map(|(id, tun)| (id, teid_table::key(self.endpoint(tun.local()).expect("endpoint"), tun.teid_in), tun.decap_aux()))
                .collect();
            for (id, k, aux) in live {
                t.insert_entry(k, id, aux);
            }
            self.tables.decap = t;
        }
        for (s, &id) in specs.iter().zip(&ids) {
            let e = self.endpoint_or_add(s.local);
            let t = Tunnel::build(s);
            self.tables.decap.insert_entry(teid_table::key(e, s.teid_in), id, t.decap_aux());
            *self.tables.tunnels.get_mut(id as usize).expect("resized above") = t;
            self.count += 1;
        }
        if specs.len() < 64 {
            for (s, &id) in specs.iter().zip(&ids) {
                let a = router.resolve_outer(s.remote);
                Arc::make_mut(&mut self.tables.outer_adj)[id as usize] = a;
            }
        } else {
            self.refresh_outer(router);
        }
        Ok(ids)
    }

    /// A tunnel's spec, its UE prefix included (from the router).
    pub fn spec(&self, router: &RouterState, id: u32) -> Option<TunnelSpec> {
        let mut s = self.tables.tunnel(id)?.spec();
        let t = TunnelRef { kind: s.kind(), id };
        s.ue = router.tunnel_routes_of(|r| r == t).first().map(|(p, _)| *p);
        Some(s)
    }

    /// Delete a tunnel, its UE route and every static route into it.
    pub fn delete(&mut self, router: &mut RouterState, id: u32) -> Result<TunnelSpec, GtpuError> {
        let t = self.tables.tunnel(id).ok_or(GtpuError::NoSuchTunnel(id))?;
        let mut spec = t.spec();
        if let Some(k) = self.decap_key(spec.local, spec.teid_in) {
            self.tables.decap.remove(k);
        }
        let r = TunnelRef { kind: spec.kind(), id };
        spec.ue = router.del_tunnel_routes_into(r).first().copied();
        router.del_routes_into(r);
        *self.tables.tunnels.get_mut(id as usize).expect("live tunnel") = Tunnel::default();
        Arc::make_mut(&mut self.tables.outer_adj)[id as usize] = ADJ_MISS;
        self.free.push(id);
        self.count -= 1;
        self.counters.reset(id);
        Ok(spec)
    }

    /// Re-resolve every tunnel's outer adjacency (after a route change).
    pub fn refresh_outer(&mut self, router: &mut RouterState) {
        let adj: Vec<u32> = (0..self.tables.tunnels.len() as u32)
            .map(|i| match self.tables.tunnel(i) {
                Some(t) => router.resolve_outer(t.remote()),
                None => ADJ_MISS,
            })
            .collect();
        self.tables.outer_adj = Arc::new(adj);
    }

    /// What the IP nodes need to know to hand GTP-U packets to us.
    pub fn udp_demux(&self) -> UdpDemux {
        let port = wire::gtpu::PORT;
        let mut d = UdpDemux::default();
        d.ports.push((port, UdpApp::Gtpu));
        if self.tables.techniques.skip_outer_lookup {
            d.bypass4 = self.tables.endpoints4.iter().map(|a| (*a, port, UdpApp::Gtpu)).collect();
            d.bypass6 = self.tables.endpoints6.iter().map(|a| (*a, port, UdpApp::Gtpu)).collect();
        }
        d
    }

    /// Hand G-PDUs for unknown TEIDs to the UPF's uplink node (see `GtpuTables::upf_uplink`).
    pub fn set_upf_uplink(&mut self, on: bool) {
        self.tables.upf_uplink = on;
    }

    /// A new version of the tables to publish (cheap: chunks are shared).
    pub fn build(&mut self) -> GtpuTables {
        self.tables.generation += 1;
        self.tables.count_tunnels = self.counters.enabled();
        self.tables.clone()
    }

    pub fn memory_bytes(&self) -> usize {
        self.tables.memory_bytes()
    }
}

/// A tunnel's outer route must end at an adjacency; a route into another tunnel is
/// left to the route lookup.
#[cfg(test)]
mod tests {
    use super::*;
    use ip::{IfAddr, InterfaceSpec};

    fn router() -> RouterState {
        RouterState::new(vec![InterfaceSpec {
            name: "n3".into(),
            mac: "02:00:00:00:00:01".parse().unwrap(),
            mtu: 1500,
            addresses: vec!["198.18.1.1/24".parse::<IfAddr>().unwrap(), "2001:db8:1::1/64".parse::<IfAddr>().unwrap()],
        }])
        .unwrap()
    }

    #[test]
    fn the_ue_route_lives_in_the_router_and_goes_with_the_tunnel() {
        let mut r = router();
        let mut g = GtpuState::default();
        let mut s = TunnelSpec::new("198.18.1.1".parse().unwrap(), "198.18.1.2".parse().unwrap(), 5, 6);
        s.ue = Some("198.19.0.9/32".parse().unwrap());
        let id = g.create(&mut r, s.clone()).unwrap();
        assert_eq!(g.spec(&r, id), Some(s.clone()));
        assert_eq!(r.tunnel_route_count(), 1);
        assert_eq!(r.lookup("198.19.0.9".parse().unwrap()), TunnelRef { kind: ip::tables::TunnelKind::Gtpu4, id }.encode());
        // The same UE cannot go to a second tunnel while the first holds it.
        let mut dup = TunnelSpec::new("198.18.1.1".parse().unwrap(), "198.18.1.3".parse().unwrap(), 7, 8);
        dup.ue = s.ue;
        assert!(matches!(g.create(&mut r, dup.clone()), Err(GtpuError::Ue(..))));
        assert_eq!(g.delete(&mut r, id).unwrap(), s);
        assert_eq!(r.tunnel_route_count(), 0);
        assert_eq!(g.find(s.local, 5), None);
        // Freed: the UE and the id can be used again.
        assert_eq!(g.create(&mut r, dup).unwrap(), id);
        assert!(matches!(g.delete(&mut r, id + 1), Err(GtpuError::NoSuchTunnel(_))));
    }

    #[test]
    fn validation_names_the_problem() {
        let mut r = router();
        let mut g = GtpuState::default();
        let v4 = |l: &str, rem: &str, t| TunnelSpec::new(l.parse().unwrap(), rem.parse().unwrap(), t, 1);
        assert_eq!(g.create(&mut r, v4("198.18.9.9", "198.18.1.2", 1)), Err(GtpuError::LocalNotOurs("198.18.9.9".parse().unwrap())));
        assert!(matches!(g.create(&mut r, v4("198.18.1.1", "2001:db8::2", 1)), Err(GtpuError::FamilyMismatch { .. })));
        assert_eq!(g.create(&mut r, v4("198.18.1.1", "198.18.1.1", 1)), Err(GtpuError::RemoteIsLocal("198.18.1.1".parse().unwrap())));
        assert_eq!(g.create(&mut r, v4("198.18.1.1", "198.18.1.2", 0)), Err(GtpuError::ZeroTeid));
        let mut no_out = v4("198.18.1.1", "198.18.1.2", 1);
        no_out.teid_out = 0;
        assert_eq!(g.create(&mut r, no_out), Err(GtpuError::ZeroTeidOut));
        // A batch is all or nothing: a duplicate inside it creates none.
        let batch = vec![v4("198.18.1.1", "198.18.1.2", 3), v4("198.18.1.1", "198.18.1.4", 3)];
        assert!(matches!(g.create_many(&mut r, batch), Err((1, GtpuError::DuplicateInBatch { first: 0, .. }))));
        assert!(g.is_empty());
    }

    /// A handover: the tunnel keeps its id, UE route and decap entry; its peer and TEID
    /// change, its neighbour tunnel does not; what a new tunnel may not have, a changed
    /// one may not either.
    #[test]
    fn modify_changes_the_peer_in_place() {
        let mut r = router();
        let mut g = GtpuState::default();
        let mut s = TunnelSpec::new("198.18.1.1".parse().unwrap(), "198.18.1.2".parse().unwrap(), 5, 6);
        s.ue = Some("198.19.0.9/32".parse().unwrap());
        let id = g.create(&mut r, s.clone()).unwrap();
        let other = g.create(&mut r, TunnelSpec::new(s.local, "198.18.1.3".parse().unwrap(), 7, 8)).unwrap();
        let other_before = g.spec(&r, other);
        let qfi = Qfi::new(9);
        let change = TunnelChange { remote: Some("198.18.1.4".parse().unwrap()), teid_out: Some(0x99), qfi, urpf: None, dscp: None };
        assert_eq!(g.modify(&mut r, id, change).unwrap(), s);
        let now = g.spec(&r, id).unwrap();
        assert_eq!((now.remote, now.teid_out, now.qfi), ("198.18.1.4".parse().unwrap(), 0x99, qfi));
        assert_eq!((now.local, now.teid_in, now.ue), (s.local, s.teid_in, s.ue));
        assert_eq!(g.find(s.local, 5), Some(id));
        assert_eq!(r.lookup("198.19.0.9".parse().unwrap()), TunnelRef { kind: ip::tables::TunnelKind::Gtpu4, id }.encode());
        assert_eq!(g.spec(&r, other), other_before);
        assert_eq!(g.len(), 2);
        // The outer adjacency is the new peer's.
        assert_eq!(g.outer_adj(id), r.resolve_outer("198.18.1.4".parse().unwrap()));
        // Refused changes leave the tunnel as it was.
        for (bad, e) in [
            (TunnelChange { teid_out: Some(0), ..Default::default() }, GtpuError::ZeroTeidOut),
            (
                TunnelChange { remote: Some("198.18.1.1".parse().unwrap()), ..Default::default() },
                GtpuError::RemoteIsLocal("198.18.1.1".parse().unwrap()),
            ),
        ] {
            assert_eq!(g.modify(&mut r, id, bad), Err(e));
            assert_eq!(g.spec(&r, id).unwrap(), now);
        }
        let v6 = TunnelChange { remote: Some("2001:db8:1::2".parse().unwrap()), ..Default::default() };
        assert!(matches!(g.modify(&mut r, id, v6), Err(GtpuError::FamilyMismatch { .. })));
        assert_eq!(g.modify(&mut r, 77, TunnelChange::default()), Err(GtpuError::NoSuchTunnel(77)));
        // The outer DSCP policy alone: the tunnel's marking follows, the rest stays.
        let fixed = crate::tunnel::Dscp::Fixed(46);
        g.modify(&mut r, id, TunnelChange { dscp: Some(fixed), ..Default::default() }).unwrap();
        assert_eq!(g.spec(&r, id).unwrap(), TunnelSpec { dscp: fixed, ..now.clone() });
        assert_eq!(g.tunnel(id).unwrap().marking, ip::outer::tos::Marking::of(fixed));
        assert_eq!(g.find(s.local, 5), Some(id));
    }
}
