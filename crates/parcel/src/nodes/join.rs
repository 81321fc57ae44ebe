//! `parcel4-join` / `parcel6-join`: runs of consecutive UDP datagrams of one flow with equal lengths, in
//! one vector, routed out of a link that takes parcels, become one parcel (the GRO of
//! parcels). A run is bounded by the context's segment count and by the link's MTU, and
//! never outlives its vector: `prepare` plans the whole vector, `expand` builds each
//! parcel while its datagrams are still there, and nothing is held for a later vector.
//!
//! Each segment's integrity slot is taken from its datagram's UDP checksum (the
//! pseudo-header and UDP header taken out of it), so segments are copied, not summed; a
//! datagram sent without a checksum has its segment summed. A datagram whose checksum
//! was wrong gives a slot its bytes do not match: the receiver finds that segment bad,
//! as it would have found the datagram.
//!
//! Datagrams that join nothing leave for `ipN-rewrite` with the lookup done here, or
//! for `ipN-lookup` when the route is not a plain next hop.

use super::ParcelFamily;
use crate::context::HasParcel;
use engine::{counters, BufIdx, Counts, ExpandNode, Pool, VECTOR_SIZE};
use ip::tables::{Adjacency, Tables, MAX_INDEX};
use wire::parcel::{self, SegmentsRepr};

counters! {
    pub enum ParcelJoinCounter {
        Parcels(Info, "parcels-joined", "parcels made from runs of datagrams"),
        Datagrams(Info, "datagrams-joined", "datagrams that went into parcels"),
        Summed(Info, "segments-summed", "datagrams without a UDP checksum, whose segment was summed for its slot"),
        NoBuffer(Info, "no-large-buffer", "no large buffer for a parcel: its datagrams went on one by one"),
    }
}

/// What makes datagrams joinable: the same header fields that a parcel carries once
/// (`ParcelFamily::flow_fields`: addresses, ports, traffic class), length and route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinKey {
    pub fields: [u8; 40],
    pub udp_len: u16,
    pub adj: u32,
}

/// One datagram's role in the vector's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// On its own, to `ip4-rewrite` (true: the route is a next hop) or `ip4-lookup`.
    Single(bool),
    /// First of a run of this many datagrams: builds the parcel.
    Head(u16),
    /// In a run after its head: already in the parcel.
    Member,
}

pub struct ParcelJoin<F> {
    bufs: Vec<BufIdx>,
    roles: Vec<Role>,
    pos: usize,
    _f: std::marker::PhantomData<F>,
}

impl<F> Default for ParcelJoin<F> {
    fn default() -> Self {
        ParcelJoin { bufs: Vec::with_capacity(VECTOR_SIZE), roles: Vec::with_capacity(VECTOR_SIZE), pos: 0, _f: std::marker::PhantomData }
    }
}

/// The datagram's route (set in `meta.adj`), whether that is a next hop, and, when it is
/// out of a parcel link and the datagram could be a segment, its key and the link's MTU.
fn classify<F: ParcelFamily>(t: &Tables, b: &[u8]) -> (u32, bool, Option<(JoinKey, usize)>) {
    if b.len() < F::DATAGRAM_IP_LEN + 8 {
        return (0, false, None);
    }
    let adj = F::fib(t).lookup(F::key(&b[F::DST_AT..]));
    let (fwd, link) = match (adj <= MAX_INDEX).then(|| t.adjacency(adj)) {
        Some(Adjacency::Rewrite { tx_if, mtu, .. } | Adjacency::Glean { tx_if, mtu }) => (true, t.takes_parcels(*tx_if).then_some(*mtu)),
        _ => (false, None),
    };
    let key = link.and_then(|mtu| {
        let udp_len = F::joinable_udp_len(b)?;
        Some((JoinKey { fields: F::flow_fields(b), udp_len, adj }, mtu as usize))
    });
    (adj, fwd, key)
}

impl<F: ParcelFamily> ParcelJoin<F> {
    fn plan(&mut self, t: &Tables, max_segments: usize, pool: &mut Pool, input: &[BufIdx]) {
        self.bufs.clear();
        self.bufs.extend_from_slice(input);
        self.roles.clear();
        self.pos = 0;
        let mut run: Option<(usize, JoinKey, usize)> = None;
        for (i, &bi) in input.iter().enumerate() {
            let buf = pool.get_mut(bi);
            let (adj, fwd, key) = classify::<F>(t, buf.bytes());
            buf.meta.adj = adj;
            self.roles.push(Role::Single(fwd));
            if let (Some((head, rk, mtu)), Some((k, _))) = (run, key) {
                let n = i - head + 1;
                if k == rk && n <= max_segments && F::PARCEL_HEADER_LEN + 8 + n * (k.udp_len as usize - 6) <= mtu.min(parcel::MAX_JUMBO_LEN)
                {
                    self.roles[head] = Role::Head(n as u16);
                    self.roles[i] = Role::Member;
                    continue;
                }
            }
            run = key.map(|(k, mtu)| (i, k, mtu));
        }
    }

    /// Build the parcel of the `k` datagrams from `self.bufs[at]`; None without a buffer.
    fn build(&self, pool: &mut Pool, at: usize, k: usize, counts: &mut Counts<'_, ParcelJoinCounter>) -> Option<BufIdx> {
        let hl = F::DATAGRAM_IP_LEN;
        let first = pool.get(self.bufs[at]);
        let mut head = [0u8; 48];
        head[..hl + 8].copy_from_slice(first.bytes().get(..hl + 8)?);
        let meta = first.meta;
        let l = u16::from_be_bytes([head[hl + 4], head[hl + 5]]) as usize - 8;
        let segments = SegmentsRepr {
            src_port: u16::from_be_bytes([head[hl], head[hl + 1]]),
            dst_port: u16::from_be_bytes([head[hl + 2], head[hl + 3]]),
            nsegs: k as u8,
            seg_len: l as u16,
            last_len: l as u16,
        };
        let len = F::PARCEL_HEADER_LEN + segments.udp_len();
        let d = pool.alloc(len)?;
        if self.fill(pool, d, at, &head[..hl + 8], &segments, counts).is_none() {
            pool.free(d);
            return None;
        }
        let out = pool.get_mut(d);
        out.meta.adj = meta.adj;
        out.meta.rx_if = meta.rx_if;
        Some(d)
    }

    /// Write into buffer `d` the parcel of the datagrams from `self.bufs[at]`, whose
    /// first one's headers are `head`.
    fn fill(
        &self,
        pool: &mut Pool,
        d: BufIdx,
        at: usize,
        head: &[u8],
        segs: &SegmentsRepr,
        counts: &mut Counts<'_, ParcelJoinCounter>,
    ) -> Option<()> {
        let (k, l) = (segs.nsegs as usize, segs.seg_len as usize);
        let hl = F::DATAGRAM_IP_LEN;
        let ph = F::PARCEL_HEADER_LEN;
        pool.get_mut(d).set_len(ph + segs.udp_len()).ok()?;
        F::emit_parcel_headers(head, segs, pool.get_mut(d).bytes_mut());
        let pseudo = F::datagram_pseudo_header(head, (8 + l) as u16);
        let data_at = ph + 8 + 2 * k;
        for j in 0..k {
            let (src, dst) = pool.two_mut(self.bufs[at + j], d)?;
            let s = src.bytes();
            let seg = s.get(hl + 8..hl + 8 + l)?;
            let sum = u16::from_be_bytes([s[hl + 6], s[hl + 7]]);
            let slot = if sum == 0 {
                counts.inc(ParcelJoinCounter::Summed);
                parcel::segment_checksum(seg)
            } else {
                parcel::slot_from_datagram_checksum(pseudo, segs.src_port, segs.dst_port, (8 + l) as u16, sum)
            };
            let b = dst.bytes_mut();
            b[data_at + j * l..data_at + (j + 1) * l].copy_from_slice(seg);
            b[ph + 8 + 2 * j..ph + 10 + 2 * j].copy_from_slice(&slot.to_be_bytes());
        }
        F::fill_parcel_udp_checksum(pool.get_mut(d).bytes_mut())
    }
}

impl<Cx: HasParcel, F: ParcelFamily> ExpandNode<Cx> for ParcelJoin<F> {
    type Next = F::JoinNext;
    type Counter = ParcelJoinCounter;

    fn name(&self) -> &'static str {
        F::JOIN
    }

    fn prepare(&mut self, cx: &mut Cx, pool: &mut Pool, input: &[BufIdx]) {
        let (ipcx, pcx) = cx.split_parcel();
        let max = pcx.join_segments.clamp(1, parcel::MAX_SEGMENTS);
        self.plan(&ipcx.tables, max, pool, input);
    }

    fn expand(
        &mut self,
        _cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        let at = self.pos;
        self.pos += 1;
        // `expand` runs over the vector `prepare` planned, in order.
        let role = if self.bufs.get(at) == Some(&bi) { self.roles[at] } else { Role::Single(false) };
        match role {
            Role::Single(fwd) => out.push((bi, if fwd { F::JOIN_TO_REWRITE } else { F::JOIN_TO_LOOKUP })),
            Role::Member => {}
            Role::Head(k) => {
                let k = k as usize;
                match self.build(pool, at, k, counts) {
                    Some(d) => {
                        counts.inc(ParcelJoinCounter::Parcels);
                        counts.add(ParcelJoinCounter::Datagrams, k as u64);
                        out.push((d, F::JOIN_TO_REWRITE));
                    }
                    None => {
                        counts.inc(ParcelJoinCounter::NoBuffer);
                        self.roles[at + 1..at + k].fill(Role::Single(true));
                        out.push((bi, F::JOIN_TO_REWRITE));
                    }
                }
            }
        }
        Ok(())
    }
}
