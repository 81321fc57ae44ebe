//! The SPD's control-plane state: policies by SPD, interface bindings, the version; it
//! builds and publishes [`SpdTables`]. Only the SPDs a change touched are rebuilt; the
//! others are shared with the previous version.

use crate::changes::Changes;
use crate::classifier::{linear, TupleSpace};
use crate::flow_cache::{cache_spd, publishable, stamp};
use crate::policy::{Decision, Direction, FlowKey, Policy, PolicyError, PolicyId, PolicySpec, Range, Rule, SpdAddr, SpdId};
use crate::tables::{Spd, SpdTables, NO_SPD};
use arc_swap::ArcSwap;
use engine::IfIndex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpdError {
    #[error("ipsec policy: {0}")]
    Policy(#[from] PolicyError),
    #[error("ipsec policy {0}: no such policy")]
    NoSuchPolicy(u32),
    #[error("field `spd`: got {0}, expected an SPD id from 0 to 32767")]
    BadSpd(u32),
    #[error("interface {0}: no SPD bound")]
    NotBound(u16),
}

pub struct SpdState {
    /// Each policy's SPD, for `del_policy`.
    spd_of: BTreeMap<PolicyId, SpdId>,
    /// The policies of each SPD, which a rebuild reads in one pass.
    by_spd: BTreeMap<SpdId, BTreeMap<PolicyId, Policy>>,
    bindings: BTreeMap<IfIndex, SpdId>,
    next_id: u32,
    built: Vec<Option<Arc<Spd>>>,
    dirty: BTreeSet<SpdId>,
    /// Policies added or deleted since the last publication, and whether anything else
    /// changed (a binding, an SA): what the next one records in `changes4` / `changes6`.
    touched: Vec<Policy>,
    touched_all: bool,
    changes4: Changes,
    changes6: Changes,
    version: u64,
    shared: Arc<ArcSwap<SpdTables>>,
}

impl Default for SpdState {
    fn default() -> Self {
        Self::new()
    }
}

impl SpdState {
    pub fn new() -> Self {
        SpdState {
            spd_of: BTreeMap::new(),
            by_spd: BTreeMap::new(),
            bindings: BTreeMap::new(),
            next_id: 1,
            built: Vec::new(),
            dirty: BTreeSet::new(),
            touched: Vec::new(),
            touched_all: false,
            changes4: Changes::default(),
            changes6: Changes::default(),
            version: 1,
            shared: Arc::new(ArcSwap::from_pointee(SpdTables { version: 1, ..Default::default() })),
        }
    }

    /// What workers load their tables from.
    pub fn shared(&self) -> Arc<ArcSwap<SpdTables>> {
        Arc::clone(&self.shared)
    }

    /// Start versions at `v` (tests of the wrap; forward only); takes effect at the next
    /// publication.
    pub fn set_version(&mut self, v: u64) {
        self.version = v.max(self.version);
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Validate and add a policy; it takes effect at the next [`SpdState::publish`].
    pub fn add_policy(&mut self, spec: &PolicySpec) -> Result<PolicyId, SpdError> {
        let id = PolicyId(self.next_id);
        let p = spec.build(id)?;
        self.next_id += 1;
        self.dirty.insert(p.spd);
        self.spd_of.insert(id, p.spd);
        self.touched.push(p.clone());
        self.by_spd.entry(p.spd).or_default().insert(id, p);
        Ok(id)
    }

    pub fn del_policy(&mut self, id: u32) -> Result<Policy, SpdError> {
        let spd = self.spd_of.remove(&PolicyId(id)).ok_or(SpdError::NoSuchPolicy(id))?;
        let p = self.by_spd.get_mut(&spd).and_then(|s| s.remove(&PolicyId(id))).ok_or(SpdError::NoSuchPolicy(id))?;
        self.dirty.insert(spd);
        self.touched.push(p.clone());
        Ok(p)
    }

    /// Bind SPD `spd` to an interface, for both directions (RFC 4301 §4.4.1: an SPD
    /// per interface holds its inbound and outbound policies).
    pub fn bind(&mut self, i: IfIndex, spd: u32) -> Result<(), SpdError> {
        let spd = u16::try_from(spd).ok().filter(|&s| s <= SpdId::MAX).ok_or(SpdError::BadSpd(spd))?;
        self.bindings.insert(i, SpdId(spd));
        self.dirty.insert(SpdId(spd));
        self.touched_all = true;
        Ok(())
    }

    pub fn unbind(&mut self, i: IfIndex) -> Result<SpdId, SpdError> {
        self.touched_all = true;
        self.bindings.remove(&i).ok_or(SpdError::NotBound(i.0))
    }

    pub fn binding(&self, i: IfIndex) -> Option<SpdId> {
        self.bindings.get(&i).copied()
    }

    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.by_spd.values().flat_map(|s| s.values())
    }

    pub fn policy(&self, id: u32) -> Option<&Policy> {
        let spd = self.spd_of.get(&PolicyId(id))?;
        self.by_spd.get(spd)?.get(&PolicyId(id))
    }

    pub fn bindings(&self) -> impl Iterator<Item = (IfIndex, SpdId)> + '_ {
        self.bindings.iter().map(|(i, s)| (*i, *s))
    }

    /// Every decision SPD `spd`'s outbound policies give the packets from `local` to
    /// `remote` of protocol `proto` to remote port `remote_port` whose local (source)
    /// port is in `local_ports`, each once, in port order of first appearance: one when
    /// no policy tells those ports apart. Worked out at the few ports where some policy's
    /// local port range starts or ends (between two of them the same policies match),
    /// not port by port. For the control plane (a tunnel's outer packets choose their
    /// source port per flow), not for packets.
    pub fn outbound_decisions(
        &self,
        spd: SpdId,
        local: std::net::IpAddr,
        remote: std::net::IpAddr,
        proto: u8,
        local_ports: Range<u16>,
        remote_port: u16,
    ) -> Vec<Decision> {
        let policies = || self.by_spd.get(&spd).into_iter().flat_map(|s| s.values()).filter(|p| p.direction == Direction::Outbound);
        match (local, remote) {
            (std::net::IpAddr::V4(l), std::net::IpAddr::V4(r)) => {
                let rules: Vec<_> = policies().filter_map(|p| p.v4).collect();
                let k = FlowKey { local: u32::from(l), remote: u32::from(r), proto, local_port: 0, remote_port };
                decisions_over_local_ports(&rules, k, local_ports)
            }
            (std::net::IpAddr::V6(l), std::net::IpAddr::V6(r)) => {
                let rules: Vec<_> = policies().filter_map(|p| p.v6).collect();
                let k = FlowKey { local: u128::from(l), remote: u128::from(r), proto, local_port: 0, remote_port };
                decisions_over_local_ports(&rules, k, local_ports)
            }
            _ => vec![Decision::NoMatch],
        }
    }

    fn build_spd(&self, spd: SpdId) -> Spd {
        let policies = || self.by_spd.get(&spd).into_iter().flat_map(|s| s.values());
        let rules4 = |d| policies().filter(|p| p.direction == d).filter_map(|p| p.v4).collect::<Vec<_>>();
        let rules6 = |d| policies().filter(|p| p.direction == d).filter_map(|p| p.v6).collect::<Vec<_>>();
        Spd {
            out4: TupleSpace::new(&rules4(Direction::Outbound)),
            out6: TupleSpace::new(&rules6(Direction::Outbound)),
            in4: TupleSpace::new(&rules4(Direction::Inbound)),
            in6: TupleSpace::new(&rules6(Direction::Inbound)),
        }
    }

    /// The next version number: every publication gets a new one, never one whose
    /// flow-cache stamp is 0.
    fn next_version(&mut self) -> u64 {
        self.version = self.version.wrapping_add(1);
        if !publishable(self.version) {
            self.version = self.version.wrapping_add(1);
        }
        self.version
    }

    /// Build the tables of the current state under a new version and publish them.
    /// Called after any policy or binding change, and by the SA code after any SA
    /// change ([`SpdState::sa_changed`]): either way every cached decision goes stale.
    pub fn publish(&mut self) -> Arc<SpdTables> {
        for spd in std::mem::take(&mut self.dirty) {
            let i = spd.0 as usize;
            if self.built.len() <= i {
                self.built.resize(i + 1, None);
            }
            self.built[i] = Some(Arc::new(self.build_spd(spd)));
        }
        let mut bound = Vec::new();
        for (i, s) in &self.bindings {
            if bound.len() <= i.get() {
                bound.resize(i.get() + 1, NO_SPD);
            }
            bound[i.get()] = s.0;
        }
        let version = self.next_version();
        self.record_changes(version);
        let t = Arc::new(SpdTables {
            version,
            spds: self.built.clone(),
            bound,
            changes4: self.changes4.clone(),
            changes6: self.changes6.clone(),
        });
        self.shared.store(Arc::clone(&t));
        t
    }

    /// Stamp what changed since the last publication with `version`'s stamp: the rule
    /// of each policy added or deleted, or everything. A new epoch of stamps starts the
    /// record afresh (the workers' caches are cleared then).
    fn record_changes(&mut self, version: u64) {
        if version >> 32 != self.shared.load().version >> 32 {
            self.changes4.reset();
            self.changes6.reset();
        }
        let s = stamp(version);
        if std::mem::take(&mut self.touched_all) {
            self.changes4.record_all(s);
            self.changes6.record_all(s);
        }
        for p in std::mem::take(&mut self.touched) {
            let spd = cache_spd(p.spd.0, p.direction == Direction::Inbound);
            if let Some(r) = &p.v4 {
                self.changes4.record(spd, r, s);
            }
            if let Some(r) = &p.v6 {
                self.changes6.record(spd, r, s);
            }
        }
    }

    /// An SA was added, changed or removed: decisions naming it may be wrong now.
    pub fn sa_changed(&mut self) -> Arc<SpdTables> {
        self.touched_all = true;
        self.publish()
    }
}

/// [`SpdState::outbound_decisions`] over `rules`: `k` with every local port in `ports`.
fn decisions_over_local_ports<A: SpdAddr>(rules: &[Rule<A>], k: FlowKey<A>, ports: Range<u16>) -> Vec<Decision> {
    let mut at = vec![ports.lo];
    for r in rules {
        at.extend([Some(r.local_ports.lo), r.local_ports.hi.checked_add(1)].into_iter().flatten().filter(|&p| ports.contains(p)));
    }
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    for p in at {
        let d = linear(rules, &FlowKey { local_port: p, ..k }).map_or(Decision::NoMatch, |r| Decision::Act(r.action));
        if !out.contains(&d) {
            out.push(d);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Action, ActionKind, Decision, FlowKey, SaId};

    fn spec(spd: u16, dir: Direction, prio: u32, action: ActionKind, sa: Option<u32>, remote: &str) -> PolicySpec {
        PolicySpec {
            spd,
            direction: dir,
            priority: prio,
            action,
            sa,
            local: "any".into(),
            remote: remote.into(),
            protocol: "any".into(),
            local_ports: "any".into(),
            remote_ports: "any".into(),
        }
    }

    #[test]
    fn publish_bumps_the_version_and_shares_untouched_spds() {
        let mut s = SpdState::new();
        s.add_policy(&spec(1, Direction::Outbound, 10, ActionKind::Protect, Some(5), "198.19.0.0/16")).unwrap();
        s.add_policy(&spec(2, Direction::Outbound, 10, ActionKind::Bypass, None, "any")).unwrap();
        s.bind(IfIndex(3), 1).unwrap();
        let t1 = s.publish();
        let k = FlowKey { local: 0xc612_0001u32, remote: 0xc613_0001, proto: 17, local_port: 1, remote_port: 2 };
        assert_eq!(t1.spd_of(IfIndex(3)), Some(SpdId(1)));
        assert_eq!(t1.spd_of(IfIndex(2)), None);
        assert_eq!(t1.classify(SpdId(1), false, &k), Decision::Act(Action::Protect(SaId(5))));
        assert_eq!(t1.classify(SpdId(1), true, &k), Decision::NoMatch);
        let id = s.add_policy(&spec(1, Direction::Outbound, 20, ActionKind::Discard, None, "198.19.0.1-198.19.0.1")).unwrap();
        let t2 = s.publish();
        assert!(t2.version > t1.version);
        assert_eq!(t2.classify(SpdId(1), false, &k), Decision::Act(Action::Discard));
        // SPD 2 was not rebuilt.
        assert!(Arc::ptr_eq(t1.spds[2].as_ref().unwrap(), t2.spds[2].as_ref().unwrap()));
        s.del_policy(id.0).unwrap();
        let t3 = s.publish();
        assert_eq!(t3.classify(SpdId(1), false, &k), Decision::Act(Action::Protect(SaId(5))));
        assert_eq!(s.del_policy(id.0), Err(SpdError::NoSuchPolicy(id.0)));
        assert!(Arc::ptr_eq(&s.shared().load_full(), &t3));
    }

    #[test]
    fn versions_skip_stamp_zero() {
        let mut s = SpdState::new();
        s.set_version(u32::MAX as u64 - 1);
        let a = s.publish().version;
        let b = s.publish().version;
        assert_eq!(a, u32::MAX as u64);
        assert_eq!(b, (1u64 << 32) + 1);
    }

    #[test]
    fn check_inbound_wants_the_policy_sa() {
        let mut s = SpdState::new();
        s.add_policy(&spec(4, Direction::Inbound, 10, ActionKind::Protect, Some(9), "198.19.0.0/16")).unwrap();
        let t = s.publish();
        let k = FlowKey { local: 0xc612_0001u32, remote: 0xc613_0001, proto: 6, local_port: 80, remote_port: 999 };
        assert!(t.check_inbound(SpdId(4), SaId(9), &k));
        assert!(!t.check_inbound(SpdId(4), SaId(8), &k));
        assert!(!t.check_inbound(SpdId(4), SaId(9), &FlowKey { remote: 0xc614_0001, ..k }));
        assert!(!t.check_inbound(SpdId(5), SaId(9), &k));
    }

    #[test]
    fn outbound_decisions_tell_source_ports_apart_only_where_policies_do() {
        let mut s = SpdState::new();
        let mut protect = spec(1, Direction::Outbound, 10, ActionKind::Protect, Some(5), "198.19.0.0/16");
        protect.protocol = "udp".into();
        s.add_policy(&protect).unwrap();
        let mut tcp = spec(1, Direction::Outbound, 50, ActionKind::Protect, Some(6), "any");
        tcp.protocol = "tcp".into();
        s.add_policy(&tcp).unwrap();
        let mut some_ports = spec(1, Direction::Outbound, 20, ActionKind::Bypass, None, "any");
        some_ports.local_ports = "50000-50999".into();
        some_ports.protocol = "udp".into();
        s.add_policy(&some_ports).unwrap();
        let (l, r): (std::net::IpAddr, std::net::IpAddr) = ("198.18.0.1".parse().unwrap(), "198.19.0.1".parse().unwrap());
        let d = |s: &SpdState, proto, ports: Range<u16>, port| s.outbound_decisions(SpdId(1), l, r, proto, ports, port);
        let protect5 = Decision::Act(Action::Protect(SaId(5)));
        assert_eq!(d(&s, 17, Range { lo: 2152, hi: 2152 }, 2152), vec![protect5]);
        assert_eq!(d(&s, 17, Range { lo: 49152, hi: 65535 }, 6080), vec![protect5, Decision::Act(Action::Bypass)]);
        assert_eq!(d(&s, 17, Range { lo: 51000, hi: 65535 }, 6080), vec![protect5], "past the bypassed ports");
        assert_eq!(d(&s, 17, Range { lo: 50999, hi: 50999 }, 6080), vec![Decision::Act(Action::Bypass)]);
        assert_eq!(
            d(&s, 17, Range { lo: 50500, hi: 65535 }, 6080),
            vec![Decision::Act(Action::Bypass), protect5],
            "from inside the bypassed ports"
        );
        assert_eq!(d(&s, 6, Range { lo: 1, hi: 1 }, 80), vec![Decision::Act(Action::Protect(SaId(6)))]);
        assert_eq!(s.outbound_decisions(SpdId(2), l, r, 17, Range { lo: 1, hi: 9 }, 2152), vec![Decision::NoMatch]);
        // A bypass for the tunnel's destination port outranks the protect policy.
        let mut gtpu = spec(1, Direction::Outbound, 30, ActionKind::Bypass, None, "any");
        gtpu.remote_ports = "2152".into();
        gtpu.protocol = "udp".into();
        s.add_policy(&gtpu).unwrap();
        assert_eq!(d(&s, 17, Range { lo: 49152, hi: 65535 }, 2152), vec![Decision::Act(Action::Bypass)]);
        let v6 = |a: &str| a.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(
            s.outbound_decisions(SpdId(1), v6("2001:db8::1"), v6("2001:db8::2"), 17, Range { lo: 1, hi: 1 }, 9),
            vec![Decision::NoMatch]
        );
    }

    #[test]
    fn bad_requests_name_the_field() {
        let mut s = SpdState::new();
        let e = s.add_policy(&spec(1, Direction::Outbound, 1, ActionKind::Protect, None, "any")).unwrap_err();
        assert!(e.to_string().contains("`sa`"), "{e}");
        assert_eq!(s.bind(IfIndex(1), 70000), Err(SpdError::BadSpd(70000)));
        assert_eq!(s.unbind(IfIndex(1)), Err(SpdError::NotBound(1)));
    }
}
