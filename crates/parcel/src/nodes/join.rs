//! `parcel4-join`: runs of consecutive UDP datagrams of one flow with equal lengths, in
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
//! Datagrams that join nothing leave for `ip4-rewrite` with the lookup done here, or
//! for `ip4-lookup` when the route is not a plain next hop.

use crate::context::HasParcel;
use engine::{counters, next_nodes, BufIdx, Counts, ExpandNode, Pool, VECTOR_SIZE};
use ip::tables::{Adjacency, Tables, MAX_INDEX};
use wire::checksum::pseudo_header_v4;
use wire::parcel::{self, Parcel4, Parcel4Repr, SegmentsRepr, UdpChecksumForm};

next_nodes! {
    pub enum Parcel4JoinNext { Rewrite = "ip4-rewrite", Lookup = "ip4-lookup" }
}

counters! {
    pub enum ParcelJoinCounter {
        Parcels(Info, "parcels-joined", "parcels made from runs of datagrams"),
        Datagrams(Info, "datagrams-joined", "datagrams that went into parcels"),
        Summed(Info, "segments-summed", "datagrams without a UDP checksum, whose segment was summed for its slot"),
        NoBuffer(Info, "no-large-buffer", "no large buffer for a parcel: its datagrams went on one by one"),
    }
}

/// What makes datagrams joinable: same addresses, ports, length, TOS and route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct JoinKey {
    addrs: [u8; 8],
    ports: [u8; 4],
    udp_len: u16,
    tos: u8,
    adj: u32,
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

pub struct Parcel4Join {
    bufs: Vec<BufIdx>,
    roles: Vec<Role>,
    pos: usize,
}

impl Default for Parcel4Join {
    fn default() -> Self {
        Parcel4Join { bufs: Vec::with_capacity(VECTOR_SIZE), roles: Vec::with_capacity(VECTOR_SIZE), pos: 0 }
    }
}

/// The datagram's route (set in `meta.adj`), whether that is a next hop, and, when it is
/// out of a parcel link and the datagram could be a segment, its key and the link's MTU.
fn classify(t: &Tables, b: &[u8]) -> (u32, bool, Option<(JoinKey, usize)>) {
    let Some(h) = b.first_chunk::<28>() else { return (0, false, None) };
    let adj = t.fib4.lookup(u32::from_be_bytes([h[16], h[17], h[18], h[19]]));
    let (fwd, link) = match (adj <= MAX_INDEX).then(|| t.adjacency(adj)) {
        Some(Adjacency::Rewrite { tx_if, mtu, .. } | Adjacency::Glean { tx_if, mtu }) => (true, t.takes_parcels(*tx_if).then_some(*mtu)),
        _ => (false, None),
    };
    let udp_len = u16::from_be_bytes([h[24], h[25]]);
    let candidate =
        h[0] == 0x45 && h[9] == 17 && h[6] & 0x3f == 0 && h[7] == 0 && h[8] > 1 && udp_len as usize == b.len() - 20 && udp_len > 8;
    let key = link.filter(|_| candidate).map(|mtu| {
        let mut addrs = [0u8; 8];
        addrs.copy_from_slice(&h[12..20]);
        (JoinKey { addrs, ports: [h[20], h[21], h[22], h[23]], udp_len, tos: h[1], adj }, mtu as usize)
    });
    (adj, fwd, key)
}

/// The parcel of `k` datagrams of segment length `l`.
const fn parcel_len(k: usize, l: usize) -> usize {
    parcel::IPV4_HEADER_LEN + 8 + k * (2 + l)
}

impl Parcel4Join {
    fn plan(&mut self, t: &Tables, max_segments: usize, pool: &mut Pool, input: &[BufIdx]) {
        self.bufs.clear();
        self.bufs.extend_from_slice(input);
        self.roles.clear();
        self.pos = 0;
        let mut run: Option<(usize, JoinKey, usize)> = None;
        for (i, &bi) in input.iter().enumerate() {
            let buf = pool.get_mut(bi);
            let (adj, fwd, key) = classify(t, buf.bytes());
            buf.meta.adj = adj;
            self.roles.push(Role::Single(fwd));
            if let (Some((head, rk, mtu)), Some((k, _))) = (run, key) {
                let n = i - head + 1;
                if k == rk && n <= max_segments && parcel_len(n, k.udp_len as usize - 8) <= mtu.min(parcel::MAX_JUMBO_LEN) {
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
        let first = pool.get(self.bufs[at]);
        let h: [u8; 28] = *first.bytes().first_chunk()?;
        let meta = first.meta;
        let l = u16::from_be_bytes([h[24], h[25]]) as usize - 8;
        let repr = Parcel4Repr {
            src: [h[12], h[13], h[14], h[15]].into(),
            dst: [h[16], h[17], h[18], h[19]].into(),
            ident: u16::from_be_bytes([h[4], h[5]]),
            ttl: h[8],
            dscp_ecn: h[1],
            probe: None,
            segments: SegmentsRepr {
                src_port: u16::from_be_bytes([h[20], h[21]]),
                dst_port: u16::from_be_bytes([h[22], h[23]]),
                nsegs: k as u8,
                seg_len: l as u16,
                last_len: l as u16,
            },
        };
        let d = pool.alloc(repr.buffer_len())?;
        if self.fill(pool, d, at, &repr, meta, counts).is_none() {
            pool.free(d);
            return None;
        }
        Some(d)
    }

    /// Write the parcel `repr` of the datagrams from `self.bufs[at]` into buffer `d`.
    fn fill(
        &self,
        pool: &mut Pool,
        d: BufIdx,
        at: usize,
        repr: &Parcel4Repr,
        meta: engine::Meta,
        counts: &mut Counts<'_, ParcelJoinCounter>,
    ) -> Option<()> {
        let (k, l) = (repr.segments.nsegs as usize, repr.segments.seg_len as usize);
        pool.get_mut(d).set_len(repr.buffer_len()).ok()?;
        repr.emit(pool.get_mut(d).bytes_mut());
        let pseudo = pseudo_header_v4(repr.src, repr.dst, 17, (8 + l) as u16);
        let data_at = parcel::IPV4_HEADER_LEN + 8 + 2 * k;
        for j in 0..k {
            let (src, dst) = pool.two_mut(self.bufs[at + j], d)?;
            let s = src.bytes();
            let seg = &s[28..28 + l];
            let sum = u16::from_be_bytes([s[26], s[27]]);
            let slot = if sum == 0 {
                counts.inc(ParcelJoinCounter::Summed);
                parcel::segment_checksum(seg)
            } else {
                parcel::slot_from_datagram_checksum(pseudo, repr.segments.src_port, repr.segments.dst_port, (8 + l) as u16, sum)
            };
            let b = dst.bytes_mut();
            b[data_at + j * l..data_at + (j + 1) * l].copy_from_slice(seg);
            let at_slot = parcel::IPV4_HEADER_LEN + 8 + 2 * j;
            b[at_slot..at_slot + 2].copy_from_slice(&slot.to_be_bytes());
        }
        let out = pool.get_mut(d);
        let mut p = Parcel4::new_checked(out.bytes_mut()).ok()?;
        Parcel4Repr::fill_udp_checksum(&mut p, UdpChecksumForm::Prototype);
        out.meta.adj = meta.adj;
        out.meta.rx_if = meta.rx_if;
        Some(())
    }
}

impl<Cx: HasParcel> ExpandNode<Cx> for Parcel4Join {
    type Next = Parcel4JoinNext;
    type Counter = ParcelJoinCounter;

    fn name(&self) -> &'static str {
        "parcel4-join"
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
            Role::Single(fwd) => out.push((bi, if fwd { Parcel4JoinNext::Rewrite } else { Parcel4JoinNext::Lookup })),
            Role::Member => {}
            Role::Head(k) => {
                let k = k as usize;
                match self.build(pool, at, k, counts) {
                    Some(d) => {
                        counts.inc(ParcelJoinCounter::Parcels);
                        counts.add(ParcelJoinCounter::Datagrams, k as u64);
                        out.push((d, Parcel4JoinNext::Rewrite));
                    }
                    None => {
                        counts.inc(ParcelJoinCounter::NoBuffer);
                        self.roles[at + 1..at + k].fill(Role::Single(true));
                        out.push((bi, Parcel4JoinNext::Rewrite));
                    }
                }
            }
        }
        Ok(())
    }
}
