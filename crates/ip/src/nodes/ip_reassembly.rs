//! `ip4-reassembly` / `ip6-reassembly`: fragments addressed to the gateway (from
//! `ipN-local`), or to a load-balanced service (from `lbN-nat`, [`FOR_LB`]), are held in
//! the worker's bounded table (`crate::reassembly`) until their datagram is whole; the
//! datagram then goes back to the node it came from as one packet, marked
//! [`engine::Meta::refragment`] (fragmented again where a link needs it).
//!
//! IPv4: the first fragment's header with the whole length, no MF flag or offset, and a
//! new checksum. IPv6 (RFC 8200 §4.5; overlaps end the datagram, RFC 5722): the first
//! fragment's unfragmentable part, its last next-header field naming what the Fragment
//! header named; an atomic fragment (offset 0, no more) is delivered at once (RFC 6946).
//!
//! A datagram that times out after its first fragment came is answered with ICMP Time
//! Exceeded, code 1 (RFC 792, RFC 8200 §4.5), quoting that fragment; the table is swept
//! as fragments arrive, so the message goes when the next fragment does.

use super::IcmpRequest;
use crate::context::HasIp;
use crate::reassembly::{FragKey, Fragment, Insert, Reassembly};
use engine::{counters, next_nodes, BufIdx, Counts, ExpandNode, Pool};
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::ipv4::Ipv4Packet;
use wire::ipv6_ext::{skip_headers, FragmentRepr, FRAGMENT_HEADER_LEN};
use wire::IpProtocol;

next_nodes! {
    pub enum Ip4ReassemblyNext { Local = "ip4-local", IcmpError = "ip4-icmp-error", Lb4Nat = "lb4-nat" }
}

next_nodes! {
    pub enum Ip6ReassemblyNext { Local = "ip6-local", IcmpError = "ip6-icmp-error", Lb6Nat = "lb6-nat" }
}

/// `Meta::param` of a fragment `lbN-nat` sends here (one routed to a service address,
/// or of a reply it translates): the whole datagram goes back to `lbN-nat`, not to
/// `ipN-local`, which sends its fragments with `param` 0.
pub const FOR_LB: u32 = u32::MAX;

counters! {
    pub enum ReassemblyCounter {
        Fragments(Info, "fragments", "fragments received"),
        Reassembled(Info, "reassembled", "datagrams made whole"),
        Atomic(Info, "atomic", "IPv6 atomic fragments (offset 0, no more) delivered at once"),
        Duplicate(Info, "duplicate", "the same piece again: dropped alone"),
        Overlap(Warn, "overlap", "a piece overlapping another differently: the datagram dropped (RFC 5722)"),
        Inconsistent(Warn, "inconsistent", "lengths that disagree or exceed 65535 bytes: the datagram dropped"),
        TableFull(Warn, "table-full", "the table is at its cap of datagrams or bytes: fragment refused"),
        SourceFull(Warn, "source-full", "the source is at its cap of datagrams: fragment refused"),
        TimedOut(Warn, "timed-out", "datagrams dropped unfinished at the reassembly timeout"),
        TimeExceeded(Info, "time-exceeded", "ICMP time exceeded (reassembly) requested for a timed-out datagram whose first fragment came"),
        Malformed(Warn, "malformed", "not a readable fragment"),
        NoBuffer(Error, "no-buffer", "no buffer for the whole datagram: dropped"),
    }
}

use ReassemblyCounter as C;

/// What the table said about a fragment: for a whole datagram, a buffer holding it (with
/// the last fragment's metadata), its header yet to be fixed up by the family.
fn settle<A: Copy + Eq + std::hash::Hash>(
    table: &mut Reassembly<A>,
    counts: &mut Counts<'_, ReassemblyCounter>,
    pool: &mut Pool,
    bi: BufIdx,
    r: Insert,
) -> Result<Option<BufIdx>, ReassemblyCounter> {
    counts.add(C::TimedOut, std::mem::take(&mut table.timed_out));
    match r {
        Insert::Pending => Ok(None),
        Insert::Duplicate => Err(C::Duplicate),
        Insert::Overlap => Err(C::Overlap),
        Insert::Inconsistent => Err(C::Inconsistent),
        Insert::Full => Err(C::TableFull),
        Insert::SourceFull => Err(C::SourceFull),
        Insert::Complete { header, data } => {
            let d = whole(pool, bi, &header, &data);
            table.recycle(header, data);
            d.map(Some)
        }
    }
}

/// Datagrams the table timed out whose first fragment came: each quote becomes a packet
/// for `ipN-icmp-error` (Time Exceeded, code 1: fragment reassembly time exceeded), with
/// the current fragment's metadata for the interface to answer from.
fn report_expired<A, N: Copy>(
    table: &mut Reassembly<A>,
    counts: &mut Counts<'_, ReassemblyCounter>,
    pool: &mut Pool,
    bi: BufIdx,
    out: &mut Vec<(BufIdx, N)>,
    icmp_error: (N, IcmpRequest),
    set_len: fn(&mut [u8]),
) {
    let mut meta = pool.get(bi).meta;
    meta.offload = engine::Offload::default();
    meta.param = icmp_error.1.encode();
    for q in table.expired_quotes.drain(..) {
        let Some(d) = pool.alloc(q.len()) else { continue };
        let b = pool.get_mut(d);
        if b.write(&q).is_err() {
            pool.free(d);
            continue;
        }
        set_len(b.bytes_mut());
        b.meta = meta;
        counts.inc(C::TimeExceeded);
        out.push((d, icmp_error.0));
    }
}

/// A new buffer holding `header` then `data`, with `bi`'s metadata but no offload work.
fn whole(pool: &mut Pool, bi: BufIdx, header: &[u8], data: &[u8]) -> Result<BufIdx, ReassemblyCounter> {
    let len = header.len() + data.len();
    let d = pool.alloc(len).ok_or(C::NoBuffer)?;
    let meta = pool.get(bi).meta;
    let w = pool.get_mut(d);
    if w.set_len(len).is_err() {
        pool.free(d);
        return Err(C::NoBuffer);
    }
    let (h, rest) = w.bytes_mut().split_at_mut(header.len());
    h.copy_from_slice(header);
    rest.copy_from_slice(data);
    w.meta = meta;
    w.meta.offload = engine::Offload::default();
    w.meta.l4_checksum_ok = false;
    w.meta.refragment = true;
    Ok(d)
}

/// An IPv4 packet's total length set to what the buffer holds, the header checksum
/// recomputed: for a whole datagram, and for a quote (so the ICMP node reads what is
/// quoted as a packet).
fn set_total_len4(q: &mut [u8]) {
    let hl = (q[0] & 0x0f) as usize * 4;
    if q.len() < 20 || hl > q.len() {
        return;
    }
    let len = q.len() as u16;
    q[2..4].copy_from_slice(&len.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut q[..hl]).fill_checksum();
}

/// The same for an IPv6 packet's payload length.
fn set_payload_len6(q: &mut [u8]) {
    if q.len() >= 40 {
        let len = (q.len() - 40) as u16;
        q[4..6].copy_from_slice(&len.to_be_bytes());
    }
}

pub struct Ip4Reassembly;

impl<Cx: HasIp> ExpandNode<Cx> for Ip4Reassembly {
    type Next = Ip4ReassemblyNext;
    type Counter = ReassemblyCounter;

    fn name(&self) -> &'static str {
        "ip4-reassembly"
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        counts.inc(C::Fragments);
        let b = pool.get(bi).bytes();
        let Some(h) = b.first_chunk::<20>() else { return Err(C::Malformed) };
        let ihl = (h[0] & 0x0f) as usize * 4;
        let total = u16::from_be_bytes([h[2], h[3]]) as usize;
        if ihl < 20 || total < ihl || total > b.len() {
            return Err(C::Malformed);
        }
        let word = u16::from_be_bytes([h[6], h[7]]);
        let offset = (word & 0x1fff) as usize * 8;
        let key = FragKey {
            src: Ipv4Addr::new(h[12], h[13], h[14], h[15]),
            dst: Ipv4Addr::new(h[16], h[17], h[18], h[19]),
            ident: u16::from_be_bytes([h[4], h[5]]) as u32,
            proto: h[9],
        };
        let first = offset == 0;
        let f = Fragment {
            offset,
            more: word & 0x2000 != 0,
            data: &b[ihl..total],
            header: first.then(|| &b[..ihl]),
            quote: first.then(|| &b[..total]),
        };
        let table = &mut cx.ip().reassembly4;
        let r = table.insert(key, f, std::time::Instant::now());
        let time_exceeded = (Ip4ReassemblyNext::IcmpError, IcmpRequest::new(11, 1, 0));
        report_expired(table, counts, pool, bi, out, time_exceeded, set_total_len4);
        let Some(d) = settle(table, counts, pool, bi, r)? else { return Ok(()) };
        let p = pool.get_mut(d).bytes_mut();
        p[6] &= 0x40; // DF as the first fragment had it; no MF, offset 0
        p[7] = 0;
        set_total_len4(p);
        counts.inc(C::Reassembled);
        let to = if pool.get(d).meta.param == FOR_LB { Ip4ReassemblyNext::Lb4Nat } else { Ip4ReassemblyNext::Local };
        out.push((d, to));
        Ok(())
    }
}

pub struct Ip6Reassembly;

/// Where the Fragment header is, and the next-header field that names it.
fn fragment_header_at(b: &[u8]) -> Option<(usize, usize)> {
    let (off, nh_at) = skip_headers(b, &[IpProtocol::HopByHop, IpProtocol::Ipv6Route, IpProtocol::Ipv6Opts])?;
    (IpProtocol::from(b[nh_at]) == IpProtocol::Ipv6Frag && off + FRAGMENT_HEADER_LEN <= b.len()).then_some((off, nh_at))
}

impl<Cx: HasIp> ExpandNode<Cx> for Ip6Reassembly {
    type Next = Ip6ReassemblyNext;
    type Counter = ReassemblyCounter;

    fn name(&self) -> &'static str {
        "ip6-reassembly"
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        counts.inc(C::Fragments);
        let b = pool.get(bi).bytes();
        if b.len() < 40 {
            return Err(C::Malformed);
        }
        let end = 40 + u16::from_be_bytes([b[4], b[5]]) as usize;
        let b = b.get(..end).ok_or(C::Malformed)?;
        let (fo, nh_at) = fragment_header_at(b).ok_or(C::Malformed)?;
        let fr = FragmentRepr::parse(&b[fo..]).map_err(|_| C::Malformed)?;
        // The whole datagram's headers: the unfragmentable part, naming what follows.
        let mut unfrag = [0u8; 512];
        let header = match (fr.offset, unfrag.get_mut(..fo)) {
            (0, Some(h)) => {
                h.copy_from_slice(&b[..fo]);
                h[nh_at] = fr.next_header.into();
                Some(&*h)
            }
            (0, None) => return Err(C::Malformed),
            _ => None,
        };
        let data = &b[fo + FRAGMENT_HEADER_LEN..];
        let d = if fr.offset == 0 && !fr.more {
            counts.inc(C::Atomic);
            let (header, data) = (header.unwrap_or_default().to_vec(), data.to_vec());
            whole(pool, bi, &header, &data)?
        } else {
            let key = FragKey {
                src: Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).map_err(|_| C::Malformed)?),
                dst: Ipv6Addr::from(<[u8; 16]>::try_from(&b[24..40]).map_err(|_| C::Malformed)?),
                ident: fr.ident,
                proto: 0,
            };
            let quote = (fr.offset == 0).then_some(b);
            let f = Fragment { offset: fr.offset as usize, more: fr.more, data, header, quote };
            let table = &mut cx.ip().reassembly6;
            let r = table.insert(key, f, std::time::Instant::now());
            let time_exceeded = (Ip6ReassemblyNext::IcmpError, IcmpRequest::new(3, 1, 0));
            report_expired(table, counts, pool, bi, out, time_exceeded, set_payload_len6);
            let Some(d) = settle(table, counts, pool, bi, r)? else { return Ok(()) };
            counts.inc(C::Reassembled);
            d
        };
        let p = pool.get_mut(d).bytes_mut();
        let len = p.len();
        if len - 40 > u16::MAX as usize {
            pool.free(d);
            return Err(C::Inconsistent);
        }
        set_payload_len6(p);
        let to = if pool.get(d).meta.param == FOR_LB { Ip6ReassemblyNext::Lb6Nat } else { Ip6ReassemblyNext::Local };
        out.push((d, to));
        Ok(())
    }
}
