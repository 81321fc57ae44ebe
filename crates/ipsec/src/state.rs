//! The control plane's IPsec state: SAs by index, built into [`IpsecTables`].

use crate::sa::{Direction, Mode, Sa, SaSpec, SaSpecError, UdpEncapPorts};
use crate::tables::IpsecTables;
use ip::tables::{TunnelKind, TunnelRef, ADJ_MISS};
use ip::RouterState;
use std::net::IpAddr;

/// Why an SA change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpsecError {
    #[error(transparent)]
    Spec(#[from] SaSpecError),
    #[error("index {0}: an SA with this index exists")]
    IndexTaken(u32),
    #[error("spi {spi:#x}: inbound SA {index} has this SPI")]
    SpiTaken { spi: u32, index: u32 },
    #[error("index {0}: no such SA")]
    NoSuchSa(u32),
    #[error("index {0}: expected at most {max}", max = ip::tables::MAX_INDEX)]
    IndexTooLarge(u32),
}

#[derive(Debug, Default)]
pub struct IpsecState {
    sas: Vec<Option<Sa>>,
    outer_adj: Vec<u32>,
}

/// Interfaces of outbound SAs are `ipsec_tunnel<index>`.
pub const IF_PREFIX: &str = "ipsec_tunnel";

impl IpsecState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add SA `index`. `iv_seed`: 16 random bytes for the CBC IV generator.
    pub fn add(&mut self, index: u32, spec: SaSpec, iv_seed: [u8; 16]) -> Result<(), IpsecError> {
        if index > ip::tables::MAX_INDEX {
            return Err(IpsecError::IndexTooLarge(index));
        }
        if self.get(index).is_some() {
            return Err(IpsecError::IndexTaken(index));
        }
        if spec.direction == Direction::Inbound {
            if let Some((i, _)) = self.iter().find(|(_, s)| s.spec.direction == Direction::Inbound && s.spec.spi == spec.spi) {
                return Err(IpsecError::SpiTaken { spi: spec.spi, index: i });
            }
        }
        let sa = Sa::new(spec, iv_seed)?;
        let i = index as usize;
        if self.sas.len() <= i {
            self.sas.resize_with(i + 1, || None);
        }
        self.sas[i] = Some(sa);
        Ok(())
    }

    pub fn del(&mut self, index: u32) -> Result<Sa, IpsecError> {
        self.sas.get_mut(index as usize).and_then(Option::take).ok_or(IpsecError::NoSuchSa(index))
    }

    /// Change SA `index`'s uRPF in place: its keys, counters and replay window stay
    /// (workers know an SA's state by its counters, which the changed SA shares).
    pub fn set_urpf(&mut self, index: u32, urpf: ip::urpf::Urpf) -> Result<(), IpsecError> {
        let sa = self.sas.get_mut(index as usize).and_then(Option::as_mut).ok_or(IpsecError::NoSuchSa(index))?;
        let spec = SaSpec { urpf, ..(*sa.spec).clone() };
        spec.check_urpf()?;
        sa.spec = std::sync::Arc::new(spec);
        Ok(())
    }

    /// Change SA `index`'s outer DSCP policy in place (RFC 4301 §5.1.2.1: the inner
    /// packet's, or the SA's own): its keys, sequence counter, counts and routes stay;
    /// the encrypt plan, which holds the marking, is rebuilt. Refused by field on an SA
    /// that writes no outer header (inbound, transport mode).
    pub fn set_dscp(&mut self, index: u32, dscp: ip::outer::tos::Dscp) -> Result<(), IpsecError> {
        let sa = self.sas.get_mut(index as usize).and_then(Option::as_mut).ok_or(IpsecError::NoSuchSa(index))?;
        let spec = SaSpec { dscp, ..(*sa.spec).clone() };
        spec.check_dscp()?;
        sa.plan = crate::nodes::encrypt::EncryptPlan::new(&spec);
        sa.spec = std::sync::Arc::new(spec);
        Ok(())
    }

    /// Move SA `index` to new endpoints in place — its outer addresses and its UDP
    /// encapsulation (a peer behind a NAT that rebound, or MOBIKE): its keys, SPI,
    /// sequence counter, replay window and counts stay (workers know an SA's state by
    /// its counters, which the moved SA shares), and so do its index and the routes
    /// into it. The outer header template and the encrypt plan are rebuilt. The
    /// address family stays.
    pub fn set_endpoints(&mut self, index: u32, local: IpAddr, remote: IpAddr, udp_encap: Option<UdpEncapPorts>) -> Result<(), IpsecError> {
        let sa = self.sas.get_mut(index as usize).and_then(Option::as_mut).ok_or(IpsecError::NoSuchSa(index))?;
        let err = |field, message| IpsecError::Spec(SaSpecError { field, message });
        let v4 = sa.spec.local.is_ipv4();
        if local.is_ipv4() != v4 {
            return Err(err("local", format!("{local}: expected the SA's address family (as {})", sa.spec.local)));
        }
        if remote.is_ipv4() != v4 {
            return Err(err("remote", format!("{remote}: expected the SA's address family (as {})", sa.spec.remote)));
        }
        if let Some(p) = udp_encap {
            for (field, port) in [("udp_src_port", p.src), ("udp_dst_port", p.dst)] {
                if port == 0 {
                    return Err(err(field, "0: expected 1 to 65535".into()));
                }
            }
        }
        let spec = SaSpec { local, remote, udp_encap, ..(*sa.spec).clone() };
        if (spec.local, spec.remote, spec.udp_encap) != (sa.spec.local, sa.spec.remote, sa.spec.udp_encap) {
            // Another path: what the old one's routers reported does not hold for it.
            sa.outbound.forget_path_mtu();
        }
        sa.outer_header = crate::nodes::outer_template(&spec);
        sa.plan = crate::nodes::encrypt::EncryptPlan::new(&spec);
        sa.spec = std::sync::Arc::new(spec);
        Ok(())
    }

    /// Give SA `index` the counters of `was`, the SA it replaced, when both are the same
    /// SA to the peer (direction, SPI, algorithm and keys; inbound, ESN too, which the
    /// replay window's kind follows): its sequence numbers go on, since an AEAD's nonce
    /// is its salt and the sequence number, so numbering again from 1 under the same key
    /// would repeat nonces (and the peer drop the packets as replays); an inbound SA
    /// keeps its replay window and counts (workers know its state by these counters), so
    /// its old packets cannot be replayed to it. True if it took them.
    pub fn keep_counters(&mut self, index: u32, was: &Sa) -> bool {
        let Some(sa) = self.sas.get_mut(index as usize).and_then(Option::as_mut) else { return false };
        let (a, b) = (&*sa.spec, &*was.spec);
        let same = a.direction == b.direction
            && a.spi == b.spi
            && a.alg == b.alg
            && a.enc_key == b.enc_key
            && a.integ_key == b.integ_key
            && (a.direction == Direction::Outbound || a.esn == b.esn);
        if same {
            sa.outbound = std::sync::Arc::clone(&was.outbound);
        }
        same
    }

    pub fn get(&self, index: u32) -> Option<&Sa> {
        self.sas.get(index as usize)?.as_ref()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &Sa)> {
        self.sas.iter().enumerate().filter_map(|(i, s)| Some((i as u32, s.as_ref()?)))
    }

    /// The FIB value of interface `ipsec_tunnel<index>`, if it names an outbound
    /// tunnel-mode SA (a transport-mode SA keeps the packet's own header: no route can
    /// lead into it).
    pub fn tunnel_by_name(&self, name: &str) -> Option<TunnelRef> {
        let index: u32 = name.strip_prefix(IF_PREFIX)?.parse().ok()?;
        let sa = self.get(index).filter(|s| s.spec.direction == Direction::Outbound && s.spec.mode == Mode::Tunnel)?;
        let kind = if sa.spec.local.is_ipv4() { TunnelKind::Esp4 } else { TunnelKind::Esp6 };
        Some(TunnelRef { kind, id: index })
    }

    /// Re-resolve each outbound SA's outer adjacency (after route changes).
    pub fn refresh_outer(&mut self, router: &mut RouterState) {
        self.outer_adj = self
            .sas
            .iter()
            .map(|s| match s {
                Some(sa) if sa.spec.direction == Direction::Outbound => router.resolve_outer(sa.spec.remote),
                _ => ADJ_MISS,
            })
            .collect();
    }

    pub fn outer_adj(&self, index: u32) -> u32 {
        self.outer_adj.get(index as usize).copied().unwrap_or(ADJ_MISS)
    }

    pub fn build(&self) -> IpsecTables {
        let inbound = self.iter().filter(|(_, s)| s.spec.direction == Direction::Inbound).map(|(i, s)| (s.spec.spi, i)).collect();
        let mut outbound_by_quote = std::collections::HashMap::new();
        for (i, s) in self.iter().filter(|(_, s)| s.spec.direction == Direction::Outbound) {
            outbound_by_quote.entry(crate::tables::QuoteKey::of(&s.spec)).or_insert(i);
        }
        let inbound_nonces = self.iter().any(|(_, s)| s.spec.direction == Direction::Inbound && s.transform.opens_with_nonce());
        IpsecTables { sas: self.sas.clone(), inbound, outer_adj: self.outer_adj.clone(), outbound_by_quote, inbound_nonces }
    }
}
