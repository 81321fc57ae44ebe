//! A session's rules as the dataplane needs them: the PFCP IEs resolved (CHOOSE replaced
//! by what the UPF allocated, absent optional values given their meaning). The sans-IO
//! core hands these out in [`crate::upf::Action::Install`]; the control plane maps them
//! onto the dataplane's tables.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use crate::ie::{apply_action, Interface, NodeId};

/// A local GTP-U endpoint a PDR matches (uplink) or a remote one a FAR sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GtpuEndpoint {
    pub teid: u32,
    pub addr: IpAddr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdr {
    pub id: u16,
    pub precedence: u32,
    pub source: Interface,
    /// Uplink: the local F-TEID packets arrive on.
    pub local_f_teid: Option<GtpuEndpoint>,
    /// The UE's address(es); `destination` = matched as the packet's destination (downlink).
    pub ue_ipv4: Option<Ipv4Addr>,
    pub ue_ipv6: Option<Ipv6Addr>,
    pub ue_is_destination: bool,
    /// IPFilterRule text of each SDF filter, as sent.
    pub sdf_filters: Vec<Vec<u8>>,
    pub qfi: Option<u8>,
    /// Remove the outer GTP-U/UDP/IP header (uplink).
    pub outer_header_removal: bool,
    pub far_id: Option<u32>,
    pub qer_ids: Vec<u32>,
    pub urr_ids: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Far {
    pub id: u32,
    /// Apply Action bits ([`apply_action`]).
    pub action: u64,
    pub destination: Option<Interface>,
    /// GTP-U outer header to add (toward the gNB or a peer UPF).
    pub outer_header: Option<GtpuEndpoint>,
    /// The SMF's Transport Level Marking for that outer header: (ToS / Traffic Class,
    /// mask), its DSCP bits used (the ECN field is the inner packet's, RFC 6040).
    pub transport_marking: Option<(u8, u8)>,
    pub network_instance: Option<Vec<u8>>,
    /// The session's BAR applies when this FAR buffers and names it.
    pub bar_id: Option<u8>,
}

impl Far {
    pub fn forwards(&self) -> bool {
        self.action & apply_action::FORW != 0
    }
    pub fn buffers(&self) -> bool {
        self.action & apply_action::BUFF != 0
    }
    pub fn drops(&self) -> bool {
        self.action & apply_action::DROP != 0
    }
}

/// A session's Buffering Action Rule (TS 29.244 §5.2.3): how the FARs that buffer and
/// name it hold downlink packets. One per session (a message carries one Create BAR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    pub id: u8,
    /// Downlink Data Notification Delay: the Downlink Data Report waits this long after
    /// the first buffered packet (a modification in between that stops the buffering
    /// cancels it). Zero: no delay.
    pub ddn_delay: Duration,
    /// Suggested Buffering Packets Count: hold at most this many of the session's
    /// packets; the rest are dropped.
    pub suggested_packets: Option<u8>,
    /// Extended buffering the SMF asked for in a Session Report Response.
    pub extended: Option<ExtendedBuffering>,
}

/// DL Buffering Duration and DL Buffering Suggested Packet Count from a Session Report
/// Response's Update BAR: until `until` (`None`: no end) no further Downlink Data Report is
/// sent and at most `packets` are held; then both are forgotten and what is held dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtendedBuffering {
    pub until: Option<Instant>,
    pub packets: Option<u16>,
}

impl Bar {
    /// How many packets of the session may be held now (`None`: no bound of the BAR's).
    pub fn hold_limit(&self) -> Option<u16> {
        self.extended.and_then(|e| e.packets).or(self.suggested_packets.map(u16::from))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qer {
    pub id: u32,
    pub ul_open: bool,
    pub dl_open: bool,
    /// kbit/s; `None`: not policed.
    pub mbr_ul_kbps: Option<u64>,
    pub mbr_dl_kbps: Option<u64>,
    pub gbr_ul_kbps: Option<u64>,
    pub gbr_dl_kbps: Option<u64>,
    pub qfi: Option<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Urr {
    pub id: u32,
    pub measurement_method: u64,
    pub reporting_triggers: u64,
    /// Seconds.
    pub measurement_period: Option<u32>,
    /// Octets (total / uplink / downlink).
    pub volume_threshold: [Option<u64>; 3],
    pub volume_quota: [Option<u64>; 3],
    /// Seconds.
    pub time_threshold: Option<u32>,
    pub time_quota: Option<u32>,
    /// The volume quota is used up: the PDRs counting into this URR stop forwarding until
    /// the SMF grants more.
    pub quota_exhausted: bool,
}

/// Everything the dataplane needs for one session. Rules are keyed by their PFCP ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRules {
    /// Our SEID (the one the SMF puts in its headers).
    pub seid: u64,
    pub cp_node: NodeId,
    pub pdrs: IdMap<u16, Pdr>,
    pub fars: IdMap<u32, Far>,
    pub qers: IdMap<u32, Qer>,
    pub urrs: IdMap<u32, Urr>,
    pub bar: Option<Bar>,
}

impl SessionRules {
    /// The BAR that applies to FAR `far_id` when it buffers: the session's, if the FAR
    /// names it.
    pub fn bar_of(&self, far_id: u32) -> Option<&Bar> {
        let far = self.fars.get(&far_id)?;
        self.bar.as_ref().filter(|b| far.buffers() && far.bar_id == Some(b.id))
    }
}

/// Rules by id: a vector sorted by id. A session has a handful of each rule kind, where a
/// `BTreeMap` would allocate a node for eleven (`examples/session_rate.rs` measures
/// memory per session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for IdMap<K, V> {
    fn default() -> Self {
        IdMap(Vec::new())
    }
}

impl<K: Ord + Copy, V> IdMap<K, V> {
    pub fn new() -> Self {
        IdMap(Vec::new())
    }
    fn find(&self, k: &K) -> Result<usize, usize> {
        self.0.binary_search_by(|(x, _)| x.cmp(k))
    }
    pub fn get(&self, k: &K) -> Option<&V> {
        self.find(k).ok().map(|i| &self.0[i].1)
    }
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.find(k).ok().map(|i| &mut self.0[i].1)
    }
    pub fn contains_key(&self, k: &K) -> bool {
        self.find(k).is_ok()
    }
    /// Inserts or replaces; returns the value replaced.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, v)),
            Err(i) => {
                self.0.insert(i, (k, v));
                None
            }
        }
    }
    pub fn remove(&mut self, k: &K) -> Option<V> {
        self.find(k).ok().map(|i| self.0.remove(i).1)
    }
    /// The value for `k`, inserted as `V::default()` if absent.
    pub fn get_or_default(&mut self, k: K) -> &mut V
    where
        V: Default,
    {
        let i = match self.find(&k) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (k, V::default()));
                i
            }
        };
        &mut self.0[i].1
    }
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Ord + Copy, V> std::ops::Index<&K> for IdMap<K, V> {
    type Output = V;
    fn index(&self, k: &K) -> &V {
        self.get(k).expect("IdMap: no entry for this id")
    }
}

#[cfg(test)]
mod tests {
    use super::IdMap;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// The same operations on an IdMap and a BTreeMap leave the same contents.
        #[test]
        fn behaves_like_a_btreemap(ops in proptest::collection::vec((any::<bool>(), 0u8..16, any::<u32>()), 0..64)) {
            let (mut a, mut b) = (IdMap::new(), BTreeMap::new());
            for (ins, k, v) in ops {
                if ins {
                    prop_assert_eq!(a.insert(k, v), b.insert(k, v));
                } else {
                    prop_assert_eq!(a.remove(&k), b.remove(&k));
                }
                prop_assert_eq!(a.len(), b.len());
            }
            prop_assert!(a.keys().copied().eq(b.keys().copied()));
            prop_assert!(a.values().copied().eq(b.values().copied()));
            for k in 0..16 {
                prop_assert_eq!(a.get(&k), b.get(&k));
            }
        }
    }
}
