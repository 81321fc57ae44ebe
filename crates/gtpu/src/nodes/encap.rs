//! `gtpu4-encap` / `gtpu6-encap`: put an inner packet into its tunnel. The IP lookup
//! sent it here with the tunnel id in `meta.param`; the node prepends the tunnel's
//! precomputed outer header, patches the lengths (IPv4 header checksum incrementally),
//! the sequence number and source port where configured, and the UDP checksum by the
//! tunnel's mode, then goes straight to `ipN-rewrite` with the tunnel's outer
//! adjacency (or through `ipN-lookup` when that technique is off or unresolved).

use super::{udp_checksum, Outer};
use crate::context::HasGtpu;
use crate::tunnel::{ChecksumMode, SrcPort, Tunnel, MAX_REWRITE};
use engine::{counters, hash, next_nodes, BufIdx, Buffer, Counts, Node, Pool, Verdict, VECTOR_SIZE};
use ip::nodes::IcmpRequest;
use ip::tables::Adjacency;
use wire::checksum;

next_nodes! {
    pub enum GtpuEncapNext {
        Ip4Rewrite = "ip4-rewrite", Ip4Lookup = "ip4-lookup",
        Ip6Rewrite = "ip6-rewrite", Ip6Lookup = "ip6-lookup",
        Ip4IcmpError = "ip4-icmp-error", Ip6IcmpError = "ip6-icmp-error",
    }
}

counters! {
    pub enum GtpuEncapCounter {
        Encapsulated(Info, "encapsulated", "packets encapsulated"),
        OffloadFallback(Info, "checksum-offload-fallback", "checksum mode offload, device cannot: computed in software"),
        NoTunnel(Error, "no-tunnel", "route names a tunnel that does not exist (deleted while the packet was in flight)"),
        NoHeadroom(Error, "no-headroom", "not enough headroom for the outer headers"),
        TooBig(Warn, "too-big", "encapsulated packet longer than an IP packet can be"),
        InnerTtlExpired(Info, "inner-ttl-expired", "inner TTL or hop limit would reach 0 (ICMP time exceeded requested)"),
        BadInner(Warn, "bad-inner", "inner packet is not IPv4 or IPv6"),
    }
}

pub struct GtpuEncap<O: Outer>(std::marker::PhantomData<O>);

impl<O: Outer> Default for GtpuEncap<O> {
    fn default() -> Self {
        GtpuEncap(std::marker::PhantomData)
    }
}

/// A hash of the inner flow: addresses, protocol and (unfragmented TCP/UDP/SCTP) ports.
#[inline(always)]
pub fn inner_flow_hash(b: &[u8]) -> u32 {
    let w = |i: usize| b.get(i..i + 4).map_or(0, |x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]));
    let ported = |p: u8| p == 6 || p == 17 || p == 132;
    match b.first().map(|v| v >> 4) {
        Some(4) if b.len() >= 20 => {
            let hl = ((b[0] & 0x0f) as usize) * 4;
            let frag = (b[6] & 0x3f) != 0 || b[7] != 0;
            let ports = if ported(b[9]) && !frag { w(hl) } else { 0 };
            hash::hash_words(0, &[w(12), w(16), b[9] as u32, ports])
        }
        Some(6) if b.len() >= 40 => {
            let ports = if ported(b[6]) { w(40) } else { 0 };
            hash::hash_words(0, &[w(8), w(12), w(16), w(20), w(24), w(28), w(32), w(36), b[6] as u32, ports])
        }
        _ => 0,
    }
}

impl<O: Outer> GtpuEncap<O> {
    const REWRITE: GtpuEncapNext = if O::IS_V6 { GtpuEncapNext::Ip6Rewrite } else { GtpuEncapNext::Ip4Rewrite };
    const LOOKUP: GtpuEncapNext = if O::IS_V6 { GtpuEncapNext::Ip6Lookup } else { GtpuEncapNext::Ip4Lookup };

    /// Prepend and patch the outer headers; the buffer then starts at the outer IP header.
    #[inline(always)]
    fn encap(
        t: &Tunnel,
        seq: Option<&mut u16>,
        buf: &mut Buffer,
        counts: &mut Counts<'_, GtpuEncapCounter>,
    ) -> Result<(), GtpuEncapCounter> {
        let inner_len = buf.len();
        let port = match t.src_port {
            SrcPort::Fixed => None,
            SrcPort::FlowHash => Some(0xc000 | (inner_flow_hash(buf.bytes()) as u16 & 0x3fff)),
        };
        let rl = t.rewrite_len as usize;
        let ua = t.udp_at as usize;
        let total = rl + inner_len;
        let ip_payload = total - ua;
        if ip_payload > u16::MAX as usize || (!O::IS_V6 && total > u16::MAX as usize) {
            return Err(GtpuEncapCounter::TooBig);
        }
        // Copy the whole right-aligned template (fixed size), then start at its header.
        let room = buf.prepend(MAX_REWRITE).map_err(|_| GtpuEncapCounter::NoHeadroom)?;
        room.copy_from_slice(&t.rewrite);
        if buf.advance(MAX_REWRITE - rl).is_err() {
            return Err(GtpuEncapCounter::NoHeadroom);
        }
        let Some(h) = buf.bytes_mut().get_mut(..rl) else { return Err(GtpuEncapCounter::NoHeadroom) };
        if O::IS_V6 {
            h[4..6].copy_from_slice(&(ip_payload as u16).to_be_bytes());
        } else {
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            let c = checksum::update16(u16::from_be_bytes([h[10], h[11]]), 0, total as u16);
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
        // UDP length, then the GTP-U length (everything after its first 8 bytes).
        h[ua + 4..ua + 6].copy_from_slice(&(ip_payload as u16).to_be_bytes());
        h[ua + 10..ua + 12].copy_from_slice(&((ip_payload - 16) as u16).to_be_bytes());
        if let Some(s) = seq {
            h[ua + 16..ua + 18].copy_from_slice(&s.to_be_bytes());
            *s = s.wrapping_add(1);
        }
        if let Some(p) = port {
            h[ua..ua + 2].copy_from_slice(&p.to_be_bytes());
        }
        match t.checksum {
            ChecksumMode::Zero => {}
            ChecksumMode::Software | ChecksumMode::Offload => {
                if t.checksum == ChecksumMode::Offload {
                    // No device here offloads yet (pcap, pg, null); AF_PACKET/TAP with a
                    // vnet header will take it from the buffer metadata.
                    counts.inc(GtpuEncapCounter::OffloadFallback);
                }
                let seg = &mut buf.bytes_mut()[ua..];
                let c = udp_checksum(t.pseudo, seg);
                seg[6..8].copy_from_slice(&c.to_be_bytes());
            }
        }
        Ok(())
    }
}

impl<Cx: HasGtpu, O: Outer> Node<Cx> for GtpuEncap<O> {
    type Next = GtpuEncapNext;
    type Counter = GtpuEncapCounter;

    fn name(&self) -> &'static str {
        O::ENCAP
    }

    /// With `prefetch`: start loading every packet's tunnel entry before the first is
    /// encapsulated (a million tunnels do not fit in cache).
    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        let (_, g) = cx.split();
        let t = &*g.tables;
        if !t.techniques.prefetch || t.tunnels.memory_bytes() < crate::tables::LARGE_TABLE_BYTES {
            return;
        }
        for &b in &input[..input.len().min(VECTOR_SIZE)] {
            let id = pool.get(b).meta.param as usize;
            if let Some(tun) = t.tunnels.get(id) {
                engine::prefetch::read(tun);
                engine::prefetch::read(&tun.pseudo);
            }
            if let Some(a) = t.outer_adj.get(id) {
                engine::prefetch::read(a);
            }
        }
    }

    #[inline(always)]
    fn process(&mut self, cx: &mut Cx, counts: &mut Counts<'_, Self::Counter>, buf: &mut Buffer) -> Verdict<Self::Next, Self::Counter> {
        let (ipc, g) = cx.split();
        let id = buf.meta.param;
        let Some(t) = g.tables.tunnel(id) else {
            return Verdict::Drop(GtpuEncapCounter::NoTunnel);
        };
        // Entering the tunnel is a routing hop for the inner packet (as ipN-rewrite does
        // for any other interface): TTL / hop limit down by one, ICMP when it runs out.
        let b = buf.bytes_mut();
        match b.first().map(|v| v >> 4) {
            Some(4) if b.len() >= 20 => {
                if b[8] <= 1 {
                    counts.inc(GtpuEncapCounter::InnerTtlExpired);
                    buf.meta.param = IcmpRequest::new(11, 0, 0).encode();
                    return Verdict::Next(GtpuEncapNext::Ip4IcmpError);
                }
                wire::ipv4::Ipv4Packet::new_unchecked(&mut b[..20]).decrement_ttl();
            }
            Some(6) if b.len() >= 40 => {
                if b[7] <= 1 {
                    counts.inc(GtpuEncapCounter::InnerTtlExpired);
                    buf.meta.param = IcmpRequest::new(3, 0, 0).encode();
                    return Verdict::Next(GtpuEncapNext::Ip6IcmpError);
                }
                b[7] -= 1;
            }
            _ => return Verdict::Drop(GtpuEncapCounter::BadInner),
        }
        let seq = if t.sequence { g.seq.get_mut(id as usize) } else { None };
        if let Err(c) = Self::encap(t, seq, buf, counts) {
            return Verdict::Drop(c);
        }
        counts.inc(GtpuEncapCounter::Encapsulated);
        let adj = g.tables.outer_adj(id);
        buf.meta.adj = adj;
        if g.tables.techniques.encap_adjacency
            && matches!(ipc.tables.adjacency(adj), Adjacency::Rewrite { .. } | Adjacency::Glean { .. } | Adjacency::Incomplete { .. })
        {
            return Verdict::Next(Self::REWRITE);
        }
        Verdict::Next(Self::LOOKUP)
    }

    fn trace(&self, buf: &Buffer) -> String {
        format!("tunnel gtpu_tunnel{} inner len {}", buf.meta.param, buf.len())
    }
}
