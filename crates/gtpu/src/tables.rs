//! What the GTP-U nodes read: tunnels by id, the decap table, our endpoint addresses,
//! each tunnel's outer adjacency, and which fast-path techniques are on. Built by
//! [`crate::state::GtpuState`], published whole through an `ArcSwap` like the IP tables.

use crate::teid_table::TeidTable;
use crate::tunnel::Tunnel;
use engine::cow::CowVec;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The six fast-path techniques of the Intel/VPP GTP-U deck. Each can be turned off so
/// its gain can be measured (`docs/PERFORMANCE.md`); all are on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Techniques {
    /// Remember the last decap key and its tunnel; consecutive packets of one tunnel
    /// skip the table.
    pub lookup_cache: bool,
    /// Send decapsulated packets straight to `ipN-lookup` after a minimal check of the
    /// inner header, instead of through a second `ipN-input`.
    pub skip_inner_input: bool,
    /// `ethernet-input` sends UDP to our endpoints' GTP-U port straight to
    /// `gtpuN-input`, skipping `ipN-input`, the route lookup and `ipN-local`.
    pub skip_outer_lookup: bool,
    /// The tunnel holds its resolved outer adjacency; encap goes straight to
    /// `ipN-rewrite` instead of a second route lookup.
    pub encap_adjacency: bool,
    /// Look up the whole vector's keys in one loop before dispatching (multi-packet
    /// loop), so independent table reads overlap.
    pub batch_lookup: bool,
    /// Prefetch each packet's table slot (decap) or tunnel entry (encap) for the whole
    /// vector before the first one is read.
    pub prefetch: bool,
    /// Software outer UDP checksum from the headers alone when the inner packet's own
    /// checksum vouches for its payload (Linux's "local checksum offload"): a valid
    /// TCP/UDP/ICMPv6 segment sums to the complement of its pseudo-header, so the
    /// payload bytes need not be read again. Not one of the deck's six; ours.
    pub checksum_from_inner: bool,
}

impl Default for Techniques {
    fn default() -> Self {
        Techniques::all(true)
    }
}

impl Techniques {
    pub const NAMES: [&'static str; 7] =
        ["lookup_cache", "skip_inner_input", "skip_outer_lookup", "encap_adjacency", "batch_lookup", "prefetch", "checksum_from_inner"];

    pub fn all(on: bool) -> Self {
        Techniques {
            lookup_cache: on,
            skip_inner_input: on,
            skip_outer_lookup: on,
            encap_adjacency: on,
            batch_lookup: on,
            prefetch: on,
            checksum_from_inner: on,
        }
    }

    /// Turn one technique on or off by name; false if there is no such technique.
    pub fn set(&mut self, name: &str, on: bool) -> bool {
        let f = match name {
            "lookup_cache" => &mut self.lookup_cache,
            "skip_inner_input" => &mut self.skip_inner_input,
            "skip_outer_lookup" => &mut self.skip_outer_lookup,
            "encap_adjacency" => &mut self.encap_adjacency,
            "batch_lookup" => &mut self.batch_lookup,
            "prefetch" => &mut self.prefetch,
            "checksum_from_inner" => &mut self.checksum_from_inner,
            _ => return false,
        };
        *f = on;
        true
    }
}

/// Tables at least this large get the batched lookup and prefetching (when those
/// techniques are on): below it they stay in cache and the extra pass only costs.
pub const LARGE_TABLE_BYTES: usize = 1 << 20;

/// Bit set in the endpoint part of a decap key for IPv6 endpoints.
pub const V6_ENDPOINT: u32 = 1 << 31;

#[derive(Clone, Default)]
pub struct GtpuTables {
    pub generation: u64,
    pub tunnels: CowVec<Tunnel>,
    pub decap: TeidTable,
    /// Our GTP-U endpoint addresses; the index is the endpoint part of a decap key.
    pub endpoints4: Vec<Ipv4Addr>,
    pub endpoints6: Vec<Ipv6Addr>,
    /// Each tunnel's outer adjacency (an IP adjacency index), refreshed on route changes.
    pub outer_adj: Arc<Vec<u32>>,
    pub techniques: Techniques,
    /// G-PDUs for a TEID with no tunnel go to `upfN-uplink` (a UPF's sessions live in its
    /// own tables) instead of an Error Indication.
    pub upf_uplink: bool,
    /// The nodes count packets and bytes per tunnel (`[metrics] tunnel_counters`).
    pub count_tunnels: bool,
}

impl GtpuTables {
    #[inline(always)]
    pub fn endpoint4(&self, a: Ipv4Addr) -> Option<u32> {
        self.endpoints4.iter().position(|x| *x == a).map(|i| i as u32)
    }

    #[inline(always)]
    pub fn endpoint6(&self, a: &Ipv6Addr) -> Option<u32> {
        self.endpoints6.iter().position(|x| x == a).map(|i| i as u32 | V6_ENDPOINT)
    }

    #[inline(always)]
    pub fn tunnel(&self, id: u32) -> Option<&Tunnel> {
        self.tunnels.get(id as usize).filter(|t| t.live)
    }

    #[inline(always)]
    pub fn outer_adj(&self, id: u32) -> u32 {
        self.outer_adj.get(id as usize).copied().unwrap_or(ip::tables::ADJ_MISS)
    }

    /// Bytes of the dataplane tables.
    pub fn memory_bytes(&self) -> usize {
        self.tunnels.memory_bytes() + self.decap.memory_bytes() + self.outer_adj.len() * 4
    }
}
