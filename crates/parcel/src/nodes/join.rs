//! `parcel4-join` / `parcel6-join`: runs of consecutive UDP datagrams of one flow with equal lengths, in
//! one vector, routed out of a link that takes parcels, become one parcel (the GRO of
//! parcels). A run is bounded by the context's segment count and by the link's MTU, and
//! never outlives its vector: each call (`expand_run`) takes the datagrams at the head
//! of what is left of the vector, extends the run while they match and builds its
//! parcel at once, so nothing is held for a later vector, each datagram's header is
//! read while its segment is about to be copied, and the dispatcher's per-packet work
//! (the call, the output list, the free) is done once a run.
//!
//! Each segment's integrity slot is taken from its datagram's UDP checksum (the
//! pseudo-header and UDP header taken out of it), so segments are not summed; a
//! datagram sent without a checksum has its segment summed. A datagram whose checksum
//! was wrong gives a slot its bytes do not match: the receiver finds that segment bad,
//! as it would have found the datagram.
//!
//! **Chained parcels** (toward a resolved next hop): the parcel is a buffer of its
//! headers and integrity block plus one extent a datagram, its segment where it lies
//! (`Pool::push_extents_taking`: the parcel holds the datagrams' buffers, which the
//! dispatcher then leaves be, `engine::Taken::Held`), rewritten here and sent to
//! `interface-output`; no segment is copied. A UDP GSO frame's parcels are built the same
//! way, each its headers plus one extent, its segments where they lie in the frame's
//! buffer (`gso::to_parcels`, the frame held by each). The dispatcher and the worker make
//! it one buffer before any node, device or capture that does not take chains, so what
//! leaves is the copying join's bytes (`tests/join_reference.rs`). Elsewhere (a neighbour
//! to resolve) the join copies each segment into the parcel's buffer and sends it to
//! `ipN-rewrite` (`gso-frames-copied` counts the frames).
//!
//! Datagrams that join nothing leave for `ipN-rewrite` with the lookup done here, or
//! for `ipN-lookup` when the route is not a plain next hop or its interface has an
//! output feature (an SPD, LB reply translation: `Tables::straight_to_rewrite`).

use super::gso::{new_parcel, to_parcels, GsoFrame};
use super::ParcelFamily;
use crate::context::HasParcel;
use engine::{counters, BufIdx, Counts, ExpandNode, Pool, Taken};
use ip::nodes::family::rewrite_fast;
use ip::tables::{Adjacency, Tables, MAX_INDEX};
use wire::parcel::{self, SegmentsRepr};

counters! {
    pub enum ParcelJoinCounter {
        Parcels(Info, "parcels-joined", "parcels made from runs of datagrams"),
        Datagrams(Info, "datagrams-joined", "datagrams that went into parcels"),
        Summed(Info, "segments-summed", "datagrams without a UDP checksum, whose segment was summed for its slot"),
        NoBuffer(Info, "no-large-buffer", "no large buffer for a parcel: its datagrams went on one by one"),
        GsoFrames(Info, "gso-frames-joined", "UDP GSO frames from a local sender made into parcels (no datagrams cut first)"),
        GsoParcels(Info, "parcels-from-gso", "parcels made from UDP GSO frames"),
        GsoCopied(Info, "gso-frames-copied", "UDP GSO frames whose segments were copied into their parcels: the next hop not resolved, so no chain"),
        GsoPassed(Info, "gso-frames-passed", "UDP GSO frames toward a parcel link left whole: segments too large for two per parcel, or no large buffers"),
    }
}

/// What the datagrams at the head of a vector's rest become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// On its own, to `ip4-rewrite` (true: the route is a next hop) or `ip4-lookup`.
    Single(bool),
    /// First of a run of this many datagrams (the ones after it are taken with it):
    /// builds the parcel.
    Head(u16),
    /// In a run after its head: already in the parcel (only in the tests' listing).
    #[cfg(test)]
    Member,
    /// A UDP GSO frame toward a parcel link: made into parcels of this many segments.
    Gso(u16),
}

pub struct ParcelJoin<F: ParcelFamily> {
    /// The last route looked up in this vector (forgotten between vectors, whose
    /// tables may differ).
    last: Option<(F::Key, Route)>,
    /// The parcels one GSO frame becomes (kept to reuse its allocation).
    made: Vec<BufIdx>,
}

impl<F: ParcelFamily> Default for ParcelJoin<F> {
    fn default() -> Self {
        ParcelJoin { last: None, made: Vec::with_capacity(64) }
    }
}

/// A route as `parcelN-join` needs it: the adjacency, whether it is a next hop, and the
/// MTU of its interface when that takes parcels.
type Route = (u32, bool, Option<u16>);

/// The route to `key`, looked up once for consecutive datagrams to one destination (a
/// run to join is one flow, so one lookup serves it): `last` holds the previous one.
#[inline]
fn route<F: ParcelFamily>(t: &Tables, key: F::Key, last: &mut Option<(F::Key, Route)>) -> Route {
    if let Some((k, r)) = *last {
        if k == key {
            return r;
        }
    }
    let adj = F::fib(t).lookup(key);
    let r = match (adj <= MAX_INDEX).then(|| t.adjacency(adj)) {
        Some(Adjacency::Rewrite { tx_if, mtu, .. } | Adjacency::Glean { tx_if, mtu }) if t.straight_to_rewrite(*tx_if) => {
            (adj, true, t.takes_parcels(*tx_if).then_some(*mtu))
        }
        _ => (adj, false, None),
    };
    *last = Some((key, r));
    r
}

/// The datagram's route (set in `meta.adj`), whether that is a next hop, and, when it is
/// out of a parcel link and the datagram could be a segment, its UDP length and the
/// link's MTU.
fn classify<F: ParcelFamily>(t: &Tables, b: &[u8], last: &mut Option<(F::Key, Route)>) -> (u32, bool, Option<(u16, usize)>) {
    if b.len() < F::DATAGRAM_IP_LEN + 8 {
        return (0, false, None);
    }
    let (adj, fwd, link) = route::<F>(t, F::key(&b[F::DST_AT..]), last);
    let seg = link.and_then(|mtu| Some((F::joinable_udp_len(b)?, mtu as usize)));
    (adj, fwd, seg)
}

impl<F: ParcelFamily> ParcelJoin<F> {
    /// The role of `input[0]` (its route set in `meta.adj`): a run takes the datagrams
    /// after it while they are of its flow, length and route, within `max_segments`
    /// and the parcel link's MTU.
    fn next_run(&mut self, t: &Tables, max_segments: usize, pool: &mut Pool, input: &[BufIdx]) -> Role {
        let buf = pool.get_mut(input[0]);
        let (adj, fwd, seg) = classify::<F>(t, buf.bytes(), &mut self.last);
        buf.meta.adj = adj;
        // A local sender's frame with work left for the device (a partial checksum,
        // a GSO frame) is not a finished datagram: its checksum field is no sum to
        // take a slot from, and its length is not one segment's. A UDP GSO frame
        // toward a parcel link is a parcel in another layout, made one on its own.
        if buf.meta.offload != engine::Offload::default() {
            let per = seg.zip(GsoFrame::of::<F>(buf)).and_then(|((_, mtu), g)| g.per_parcel::<F>(max_segments, mtu));
            return per.map_or(Role::Single(fwd), |n| Role::Gso(n as u16));
        }
        let Some((udp_len, mtu)) = seg else { return Role::Single(fwd) };
        let head = pool.get(input[0]).bytes();
        let room = mtu.min(parcel::MAX_JUMBO_LEN);
        let mut n = 1;
        for &bi in &input[1..max_segments.min(input.len())] {
            let b = pool.get(bi);
            // Same flow means the same destination, so the same route as the head.
            if b.meta.offload != engine::Offload::default()
                || F::joinable_udp_len(b.bytes()) != Some(udp_len)
                || F::PARCEL_HEADER_LEN + 8 + (n + 1) * (udp_len as usize - 6) > room
                || !F::same_flow(head, b.bytes())
            {
                break;
            }
            n += 1;
        }
        if n == 1 {
            Role::Single(fwd)
        } else {
            Role::Head(n as u16)
        }
    }
}

/// Join the datagrams `run` (a run the plan found: plain UDP datagrams of one flow and one
/// UDP length, with hop limit left) into one parcel; None without a buffer for it (the
/// datagrams untouched). Each segment's integrity slot comes from its datagram's UDP
/// checksum, or from summing the segment when the datagram has none (counted in
/// `summed`).
///
/// Copying (`chain_l2` None), the parcel is one buffer holding every segment. Chained
/// (`Some(l2_len)`: toward a resolved next hop whose rewrite puts `l2_len` bytes in
/// front), the parcel's buffer holds its headers and integrity block, placed so that the
/// link header starts a line, and each segment stays where it lies in its datagram's
/// buffer, an extent of the parcel (`Pool::push_extents_taking`): the parcel then holds
/// the datagrams, which the caller must not free (they go back to the pool with it).
/// Both make the same bytes.
pub fn join_run<F: ParcelFamily>(pool: &mut Pool, run: &[BufIdx], chain_l2: Option<usize>, summed: &mut u64) -> Option<BufIdx> {
    let hl = F::DATAGRAM_IP_LEN;
    let ph = F::PARCEL_HEADER_LEN;
    let first = pool.get(*run.first()?);
    let mut head = [0u8; 48];
    head[..hl + 8].copy_from_slice(first.bytes().get(..hl + 8)?);
    let meta = first.meta;
    let udp_len = u16::from_be_bytes([head[hl + 4], head[hl + 5]]);
    let l = (udp_len as usize).checked_sub(8).filter(|&l| l > 0)?;
    let k = run.len();
    let segments = SegmentsRepr {
        src_port: u16::from_be_bytes([head[hl], head[hl + 1]]),
        dst_port: u16::from_be_bytes([head[hl + 2], head[hl + 3]]),
        nsegs: u8::try_from(k).ok()?,
        seg_len: l as u16,
        last_len: l as u16,
    };
    let head_len = ph + 8 + 2 * k;
    let d = new_parcel::<F>(pool, &head[..hl + 8], &segments, chain_l2)?;
    let slots =
        parcel::DatagramSlots::new(F::datagram_pseudo_header(&head[..hl + 8], udp_len), segments.src_port, segments.dst_port, udp_len);
    let seg = hl + 8..hl + 8 + l;
    for (j, &bi) in run.iter().enumerate() {
        let Some((src, dst)) = pool.two_mut(bi, d) else {
            pool.free(d);
            return None;
        };
        let Some(s) = src.bytes().get(..seg.end) else {
            pool.free(d);
            return None;
        };
        let sum = u16::from_be_bytes([s[hl + 6], s[hl + 7]]);
        let slot = if sum == 0 {
            *summed += 1;
            parcel::segment_checksum(&s[seg.clone()])
        } else {
            slots.slot(sum)
        };
        let b = dst.bytes_mut();
        b[ph + 8 + 2 * j..ph + 10 + 2 * j].copy_from_slice(&slot.to_be_bytes());
        if chain_l2.is_none() {
            b[head_len + j * l..head_len + (j + 1) * l].copy_from_slice(&s[seg.clone()]);
        }
    }
    // Not refused: the run's datagrams are plain packets of this length, the head's class
    // holds them all.
    if chain_l2.is_some() && pool.push_extents_taking(d, run, seg).is_err() {
        pool.free(d);
        return None;
    }
    let out = pool.get_mut(d);
    out.meta.adj = meta.adj;
    out.meta.rx_if = meta.rx_if;
    Some(d)
}

/// A parcel toward `adj` is chained when the next hop is resolved: `Some` of the link
/// header the rewrite puts in front (the head is placed so that it starts a line). A
/// neighbour to resolve: `None`, the copy.
#[inline(always)]
fn chain_toward(adj: &Adjacency) -> Option<usize> {
    match adj {
        Adjacency::Rewrite { rewrite, .. } => Some(rewrite.len()),
        _ => None,
    }
}

/// Where a parcel just made goes: a chained one the rewrite's fast path takes (it fits
/// the link's MTU, its TTL is above 1) is rewritten here and goes to `interface-output`,
/// which takes chains; any other to `ipN-rewrite` (made whole first by the dispatcher
/// when chained).
#[inline(always)]
fn parcel_next<F: ParcelFamily>(adj: &Adjacency, chain_l2: Option<usize>, parcel: &mut engine::Buffer) -> F::JoinNext {
    if chain_l2.is_some() && rewrite_fast::<F>(adj, parcel) {
        F::JOIN_TO_OUTPUT
    } else {
        F::JOIN_TO_REWRITE
    }
}

impl<Cx: HasParcel, F: ParcelFamily> ExpandNode<Cx> for ParcelJoin<F> {
    type Next = F::JoinNext;
    type Counter = ParcelJoinCounter;
    const TAKES_RUNS: bool = true;

    fn name(&self) -> &'static str {
        F::JOIN
    }

    fn prepare(&mut self, _cx: &mut Cx, _pool: &mut Pool, _input: &[BufIdx]) {
        self.last = None;
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        self.expand_run(cx, counts, pool, &[bi], out).1.map(|_| ())
    }

    fn expand_run(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        input: &[BufIdx],
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> (usize, Result<Taken, Self::Counter>) {
        let (ipcx, pcx) = cx.split_parcel();
        let max = pcx.join_segments.clamp(1, parcel::MAX_SEGMENTS);
        let bi = input[0];
        match self.next_run(&ipcx.tables, max, pool, input) {
            Role::Single(fwd) => out.push((bi, if fwd { F::JOIN_TO_REWRITE } else { F::JOIN_TO_LOOKUP })),
            #[cfg(test)]
            Role::Member => {}
            Role::Gso(per) => {
                // As a run's parcel: chained and rewritten here toward a resolved next hop
                // (the frame's segments where they lie), copied elsewhere.
                let adj = ipcx.tables.adjacency(pool.get(bi).meta.adj);
                let chain_l2 = chain_toward(adj);
                let g = GsoFrame::of::<F>(pool.get(bi));
                self.made.clear();
                match g.and_then(|g| to_parcels::<F>(pool, bi, g, per as usize, chain_l2, &mut self.made)) {
                    Some(n) => {
                        counts.inc(ParcelJoinCounter::GsoFrames);
                        counts.add(ParcelJoinCounter::GsoParcels, n as u64);
                        if chain_l2.is_none() {
                            counts.inc(ParcelJoinCounter::GsoCopied);
                        }
                        out.extend(self.made.iter().map(|&d| (d, parcel_next::<F>(adj, chain_l2, pool.get_mut(d)))));
                    }
                    None => {
                        counts.inc(ParcelJoinCounter::GsoPassed);
                        out.push((bi, F::JOIN_TO_REWRITE));
                    }
                }
            }
            Role::Head(k) => {
                let run = &input[..k as usize];
                // Chained toward a resolved next hop (`chain_toward`), sent on by
                // `parcel_next`.
                let adj = ipcx.tables.adjacency(pool.get(bi).meta.adj);
                let chain_l2 = chain_toward(adj);
                let mut summed = 0;
                let made = join_run::<F>(pool, run, chain_l2, &mut summed);
                counts.add(ParcelJoinCounter::Summed, summed);
                match made {
                    Some(d) => {
                        counts.inc(ParcelJoinCounter::Parcels);
                        counts.add(ParcelJoinCounter::Datagrams, run.len() as u64);
                        out.push((d, parcel_next::<F>(adj, chain_l2, pool.get_mut(d))));
                        if chain_l2.is_some() {
                            // The parcel holds the run's datagrams: its extents.
                            return (run.len(), Ok(Taken::Held));
                        }
                    }
                    None => {
                        // Each goes on by itself, on the head's route (one flow, one
                        // destination).
                        counts.inc(ParcelJoinCounter::NoBuffer);
                        let adj = pool.get(bi).meta.adj;
                        for &b in run {
                            pool.get_mut(b).meta.adj = adj;
                            out.push((b, F::JOIN_TO_REWRITE));
                        }
                    }
                }
                return (run.len(), Ok(Taken::Free));
            }
        }
        (1, Ok(Taken::Free))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ip::nodes::family::Ip4;
    use ip::{InterfaceSpec, RouteTarget, RouterState};

    /// eth0 (index 0) ordinary, eth1 (index 1) takes parcels with MTU `mtu`; 198.19.0.0/16
    /// via a neighbour on eth1, 198.20.0.0/16 via one on eth0.
    fn tables(mtu: u16) -> Tables {
        let spec = |name: &str, mac: u8, addr: &str, mtu| InterfaceSpec {
            name: name.into(),
            mac: wire::EthernetAddress([2, 0, 0, 0, 0, mac]),
            mtu,
            addresses: vec![addr.parse().unwrap()],
        };
        let mut s = RouterState::new(vec![spec("eth0", 1, "198.18.0.1/24", 1500), spec("eth1", 2, "198.18.1.1/24", mtu)]).unwrap();
        s.set_parcel_links(0b10);
        for (p, via, ifname) in [("198.19.0.0/16", "198.18.1.2", "eth1"), ("198.20.0.0/16", "198.18.0.2", "eth0")] {
            s.add_route(p.parse().unwrap(), RouteTarget::Via { next_hop: via.parse().unwrap(), interface: None }).unwrap();
            s.add_static_neighbour(ifname, via.parse().unwrap(), wire::EthernetAddress([2, 0, 0, 0, 1, 2])).unwrap();
        }
        s.build()
    }

    /// A UDP datagram from 198.18.0.2 to `dst` port `dport`, `len` payload bytes.
    fn datagram(dst: [u8; 4], dport: u16, len: usize) -> Vec<u8> {
        let mut b = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0, 198, 18, 0, 2, dst[0], dst[1], dst[2], dst[3], 0x9c, 0x40];
        b.extend_from_slice(&dport.to_be_bytes());
        b.extend_from_slice(&((8 + len) as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        b.resize(28 + len, 0x5a);
        b[2..4].copy_from_slice(&((28 + len) as u16).to_be_bytes());
        b
    }

    fn plan(t: &Tables, max: usize, packets: &[Vec<u8>], gso_at: Option<usize>) -> Vec<Role> {
        plan_with(t, max, packets, gso_at, false)
    }

    fn plan_with(t: &Tables, max: usize, packets: &[Vec<u8>], gso_at: Option<usize>, gso_frames: bool) -> Vec<Role> {
        let mut pool = Pool::new(64, 8);
        let input: Vec<BufIdx> = packets
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let b = pool.alloc(p.len()).unwrap();
                pool.get_mut(b).write(p).unwrap();
                if gso_at == Some(i) {
                    pool.get_mut(b).meta.offload.gso = engine::GsoKind::UdpL4;
                }
                if gso_frames && p.len() > 1028 {
                    // A local sender's UDP GSO frame: segments of 1000, checksum partial.
                    let buf = pool.get_mut(b);
                    buf.meta.offload.gso = engine::GsoKind::UdpL4;
                    buf.meta.offload.gso_size = 1000;
                    buf.set_partial_checksum(20, 6);
                }
                b
            })
            .collect();
        // The roles as the dispatcher meets them: a run's head, then what it took.
        let mut j = ParcelJoin::<Ip4>::default();
        let mut roles = Vec::new();
        let mut at = 0;
        while at < input.len() {
            let role = j.next_run(t, max, &mut pool, &input[at..]);
            roles.push(role);
            at += 1;
            if let Role::Head(k) = role {
                roles.extend((1..k).map(|_| Role::Member));
                at += k as usize - 1;
            }
        }
        roles
    }

    #[test]
    fn runs_of_one_flow_toward_a_parcel_link_and_nothing_else() {
        use Role::*;
        let t = tables(9000);
        let to_parcel = |port| datagram([198, 19, 0, 9], port, 1000);
        let p = [to_parcel(9), to_parcel(9), to_parcel(9), to_parcel(8), to_parcel(8), datagram([198, 20, 0, 9], 9, 1000), to_parcel(8)];
        assert_eq!(plan(&t, 32, &p, None), [Head(3), Member, Member, Head(2), Member, Single(true), Single(true)]);
        // The segment bound, and the MTU: 9000 holds 8 segments of 1000 (28 + 8 + 8 x 1002).
        let ten: Vec<_> = (0..10).map(|_| to_parcel(9)).collect();
        assert_eq!(plan(&t, 4, &ten, None), [Head(4), Member, Member, Member, Head(4), Member, Member, Member, Head(2), Member]);
        assert_eq!(plan(&t, 32, &ten, None)[..9], [Head(8), Member, Member, Member, Member, Member, Member, Member, Head(2)]);
        // Different lengths, and a frame with offload work left, end runs.
        let mixed = [to_parcel(9), datagram([198, 19, 0, 9], 9, 999), to_parcel(9), to_parcel(9), to_parcel(9)];
        assert_eq!(plan(&t, 32, &mixed, Some(3)), [Single(true), Single(true), Single(true), Single(true), Single(true)]);
        // Another source address or traffic class: another flow.
        let mut other_src = to_parcel(9);
        other_src[15] = 3;
        let mut other_tos = to_parcel(9);
        other_tos[1] = 0x20;
        let p = [to_parcel(9), other_src, to_parcel(9), other_tos, to_parcel(9)];
        assert_eq!(plan(&t, 32, &p, None), [Single(true); 5]);
        // No route: to ipN-lookup (for its ICMP).
        assert_eq!(plan(&t, 32, &[datagram([198, 18, 5, 1], 9, 100)], None), [Single(false)]);
    }

    #[test]
    fn gso_frames_toward_a_parcel_link_become_parcels_on_their_own() {
        use Role::*;
        let t = tables(9000);
        let to_parcel = |len| datagram([198, 19, 0, 9], 9, len);
        // 10500 bytes in segments of 1000 toward MTU 9000: parcels of 8; a datagram
        // of the flow beside it joins nothing; toward an ordinary link it stays a frame.
        let p = [to_parcel(1000), to_parcel(10500), to_parcel(1000), datagram([198, 20, 0, 9], 9, 10500)];
        assert_eq!(plan_with(&t, 32, &p, None, true), [Single(true), Gso(8), Single(true), Single(true)]);
        assert_eq!(plan_with(&t, 4, &p[1..2], None, true), [Gso(4)]);
        // Segments too large for two per parcel: left whole.
        assert_eq!(plan_with(&tables(2000), 32, &p[1..2], None, true), [Single(true)]);
    }
}
