//! `ip4-fragment` / `ip6-fragment`: cut a packet into fragments that fit the MTU a node
//! asked for (`Meta::param`, a [`FragmentRequest`]); fragments go back to `ipN-lookup`,
//! which routes each like the original.
//!
//! IPv4 (RFC 791 §3.2, RFC 1812 §5.2.4.3): a forwarded packet without DF that is larger
//! than its next hop's MTU, an inner packet without DF that is larger than its tunnel
//! (fragmented before encapsulation, so the far tunnel end reassembles nothing), or an
//! outer packet we built ourselves. Every fragment carries the original header with its
//! own length, offset, MF flag and header checksum; only the first keeps options whose
//! copy bit is clear. A fragment fragmented again keeps its offset base and its last
//! piece keeps its MF flag.
//!
//! IPv6 (RFC 8200 §4.5): source fragmentation only, of packets we originated such as a
//! tunnel's outer packet (routers do not fragment IPv6: forwarded packets get Packet Too
//! Big). Each fragment is the unfragmentable part (the fixed header, hop-by-hop and
//! routing headers), a Fragment header with this worker's next identification, and a
//! piece of the rest.

use super::family::{Family, Ip4, Ip6};
use super::FragmentRequest;
use crate::context::HasIp;
use engine::{counters, next_nodes, BufIdx, Counts, ExpandNode, GsoKind, Meta, Pool};
use wire::checksum;
use wire::ipv4::Ipv4Packet;
use wire::ipv6_ext::{skip_headers, FragmentRepr, FRAGMENT_HEADER_LEN};
use wire::IpProtocol;

next_nodes! {
    pub enum Ip4FragmentNext { Lookup = "ip4-lookup", Output = "interface-output", ParcelSplit = "parcel4-split" }
}

next_nodes! {
    pub enum Ip6FragmentNext { Lookup = "ip6-lookup", Output = "interface-output", ParcelSplit = "parcel6-split" }
}

counters! {
    pub enum FragmentCounter {
        Fragmented(Info, "packets-fragmented", "packets cut into fragments"),
        Fragments(Info, "fragments", "fragments produced"),
        Malformed(Warn, "malformed", "not a whole packet (header or length inconsistent), or an IPv6 packet already fragmented: dropped"),
        MtuTooSmall(Warn, "mtu-too-small", "the MTU leaves no room for 8 bytes of data after the headers: dropped"),
        GsoFrame(Warn, "gso-frame", "a GSO frame (segmented, not fragmented): dropped"),
        NoBuffer(Error, "no-buffer", "out of buffers: the packet dropped"),
        ParcelSplit(Info, "parcel-to-split", "an IP parcel (a tunnel's inner packet): split into its datagrams, not fragmented"),
    }
}

use FragmentCounter as C;

/// Before cutting: a GSO frame is refused, and a checksum left for the device is
/// completed (it cannot be once the data is split). The packet's metadata.
fn prepare(pool: &mut Pool, bi: BufIdx) -> Result<Meta, FragmentCounter> {
    let src = pool.get_mut(bi);
    if src.meta.offload.gso != GsoKind::None {
        return Err(C::GsoFrame);
    }
    if let Some((start, offset)) = src.take_partial_checksum() {
        checksum::complete_partial(src.bytes_mut(), start, offset);
    }
    let mut meta = src.meta;
    meta.offload = engine::Offload::default();
    Ok(meta)
}

/// A buffer for a later fragment of `len` bytes, with `meta`; `None` when out of buffers.
fn later_fragment(pool: &mut Pool, len: usize, meta: Meta) -> Option<BufIdx> {
    let d = pool.alloc(len)?;
    let b = pool.get_mut(d);
    if b.set_len(len).is_err() {
        pool.free(d);
        return None;
    }
    b.meta = meta;
    Some(d)
}

/// All or nothing: free the `made` later fragments already pushed (a datagram missing a
/// piece would only hold reassembly state at its destination).
fn abandon<N>(pool: &mut Pool, out: &mut Vec<(BufIdx, N)>, made: usize) -> FragmentCounter {
    let from = out.len() - made;
    out.drain(from..).for_each(|(f, _)| pool.free(f));
    C::NoBuffer
}

/// Record a datagram cut into `n` fragments.
fn count(counts: &mut Counts<'_, FragmentCounter>, n: usize) {
    counts.inc(C::Fragmented);
    counts.add(C::Fragments, n as u64);
}

pub struct Ip4Fragment;

impl<Cx: HasIp> ExpandNode<Cx> for Ip4Fragment {
    type Next = Ip4FragmentNext;
    type Counter = FragmentCounter;

    fn name(&self) -> &'static str {
        "ip4-fragment"
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        // A parcel's Total Length is its segment length: cutting it into fragments would
        // break it. Its own way to get smaller is splitting into datagrams (`meta.param`
        // 0 there: route each one, trust the slots `parcel4-input` checked).
        if wire::parcel::is_ipv4_parcel(pool.get(bi).bytes()) {
            pool.get_mut(bi).meta.param = 0;
            counts.inc(C::ParcelSplit);
            out.push((bi, Ip4FragmentNext::ParcelSplit));
            return Ok(());
        }
        let req = FragmentRequest::decode(pool.get(bi).meta.param);
        let ident = if req.originated {
            let cx = cx.ip();
            cx.ident = cx.ident.wrapping_add(1);
            Some(cx.ident)
        } else {
            None
        };
        count(counts, fragment4(pool, bi, req.mtu as usize, ident, out)?);
        if req.originated {
            send_originated::<Ip4, _>(&cx.ip().tables, pool, out, Ip4FragmentNext::Output);
        }
        Ok(())
    }
}

/// The fragments of a packet we built (a tunnel's outer packet) leave by its adjacency
/// as the whole packet would have, with the TTL we gave it; any that cannot (a neighbour
/// to solicit) take the lookup.
fn send_originated<F: Family, N: Copy>(t: &crate::Tables, pool: &mut Pool, out: &mut [(BufIdx, N)], output: N) {
    for (b, next) in out.iter_mut() {
        let buf = pool.get_mut(*b);
        let adj = buf.meta.adj;
        if super::family::send_originated::<F>(t, buf, adj) {
            *next = output;
        }
    }
}

/// The options of `opts` that every fragment carries (copy bit set), padded to words.
fn copied_options(opts: &[u8], out: &mut [u8; 40]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < opts.len() {
        let kind = opts[i];
        match kind {
            0 => break,
            1 => i += 1,
            _ => {
                let Some(&len) = opts.get(i + 1) else { break };
                let len = len as usize;
                if len < 2 || i + len > opts.len() {
                    break;
                }
                if kind & 0x80 != 0 {
                    out[n..n + len].copy_from_slice(&opts[i..i + len]);
                    n += len;
                }
                i += len;
            }
        }
    }
    let padded = n.div_ceil(4) * 4;
    out[n..padded].fill(0); // end-of-options
    padded
}

/// Fragment the IPv4 packet `bi` for `mtu`, pushing the fragments (the input buffer
/// reused for the first) to `out`; returns how many. `ident`: a fresh identification
/// for a packet we originated (its DF is then cleared: we are its source).
pub fn fragment4(
    pool: &mut Pool,
    bi: BufIdx,
    mtu: usize,
    ident: Option<u16>,
    out: &mut Vec<(BufIdx, Ip4FragmentNext)>,
) -> Result<usize, FragmentCounter> {
    let meta = prepare(pool, bi)?;
    let b = pool.get(bi).bytes();
    let Some(h) = b.first_chunk::<20>() else { return Err(C::Malformed) };
    let ihl = (h[0] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([h[2], h[3]]) as usize;
    if h[0] >> 4 != 4 || ihl < 20 || total < ihl || total > b.len() {
        return Err(C::Malformed);
    }
    let flags_off = u16::from_be_bytes([h[6], h[7]]);
    let base = (flags_off & 0x1fff) as usize * 8;
    let last_more = flags_off & 0x2000 != 0;
    let mut later_opts = [0u8; 40];
    let later_opts_len = copied_options(&b[20..ihl], &mut later_opts);
    // Data per fragment: a multiple of 8 that fits after the longest header.
    if mtu < ihl + 8 {
        return Err(C::MtuTooSmall);
    }
    let first_data = (mtu - ihl) & !7;
    let later_hl = 20 + later_opts_len;
    let later_data = (mtu - later_hl) & !7;
    let data_len = total - ihl;
    let mut count = 1;
    let mut at = first_data;
    // Later fragments first, copied out of the original before it is cut down.
    while at < data_len {
        let chunk = later_data.min(data_len - at);
        let len = later_hl + chunk;
        let Some((d, (s, dst))) = later_fragment(pool, len, meta).and_then(|d| Some((d, pool.two_mut(bi, d)?))) else {
            return Err(abandon(pool, out, count - 1));
        };
        let s = s.bytes();
        let f = dst.bytes_mut();
        f[..20].copy_from_slice(&s[..20]);
        f[20..later_hl].copy_from_slice(&later_opts[..later_opts_len]);
        f[later_hl..].copy_from_slice(&s[ihl + at..ihl + at + chunk]);
        let more = at + chunk < data_len || last_more;
        finish_header(f, later_hl, len, base + at, more, ident);
        out.push((d, Ip4FragmentNext::Lookup));
        count += 1;
        at += chunk;
    }
    let src = pool.get_mut(bi);
    let first_len = ihl + first_data.min(data_len);
    src.truncate(first_len);
    let more = first_data < data_len || last_more;
    finish_header(src.bytes_mut(), ihl, first_len, base, more, ident);
    // The first fragment goes first: it holds the upper-layer header.
    out.insert(out.len() + 1 - count, (bi, Ip4FragmentNext::Lookup));
    Ok(count)
}

/// A fragment's header: its lengths, offset and MF flag, identification and checksum.
fn finish_header(f: &mut [u8], hl: usize, len: usize, offset: usize, more: bool, ident: Option<u16>) {
    f[0] = 0x40 | (hl / 4) as u8;
    f[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    let keep_df = if ident.is_some() { 0 } else { f[6] & 0x40 };
    let word = ((offset / 8) as u16) | if more { 0x2000 } else { 0 };
    f[6..8].copy_from_slice(&word.to_be_bytes());
    f[6] |= keep_df;
    if let Some(id) = ident {
        f[4..6].copy_from_slice(&id.to_be_bytes());
    }
    Ipv4Packet::new_unchecked(&mut f[..hl]).fill_checksum();
}

pub struct Ip6Fragment;

impl<Cx: HasIp> ExpandNode<Cx> for Ip6Fragment {
    type Next = Ip6FragmentNext;
    type Counter = FragmentCounter;

    fn name(&self) -> &'static str {
        "ip6-fragment"
    }

    fn expand(
        &mut self,
        cx: &mut Cx,
        counts: &mut Counts<'_, Self::Counter>,
        pool: &mut Pool,
        bi: BufIdx,
        out: &mut Vec<(BufIdx, Self::Next)>,
    ) -> Result<(), Self::Counter> {
        // As in `ip4-fragment`: a parcel (a tunnel's inner packet) is split, not cut.
        if wire::parcel::is_ipv6_parcel(pool.get(bi).bytes()) {
            pool.get_mut(bi).meta.param = 0;
            counts.inc(C::ParcelSplit);
            out.push((bi, Ip6FragmentNext::ParcelSplit));
            return Ok(());
        }
        let req = FragmentRequest::decode(pool.get(bi).meta.param);
        let cx = cx.ip();
        cx.ident6 = cx.ident6.wrapping_add(1);
        count(counts, fragment6(pool, bi, req.mtu as usize, cx.ident6, out)?);
        if req.originated {
            send_originated::<Ip6, _>(&cx.tables, pool, out, Ip6FragmentNext::Output);
        }
        Ok(())
    }
}

/// The unfragmentable part's length and where its last next-header field is.
fn unfragmentable(b: &[u8]) -> Option<(usize, usize)> {
    let (off, nh_at) = skip_headers(b, &[IpProtocol::HopByHop, IpProtocol::Ipv6Route])?;
    (IpProtocol::from(b[nh_at]) != IpProtocol::Ipv6Frag).then_some((off, nh_at))
}

/// Fragment the IPv6 packet `bi` for `mtu` under identification `ident`, pushing the
/// fragments (the input buffer reused for the first) to `out`; returns how many.
pub fn fragment6(
    pool: &mut Pool,
    bi: BufIdx,
    mtu: usize,
    ident: u32,
    out: &mut Vec<(BufIdx, Ip6FragmentNext)>,
) -> Result<usize, FragmentCounter> {
    let meta = prepare(pool, bi)?;
    let b = pool.get(bi).bytes();
    if b.len() < 40 || b[0] >> 4 != 6 || 40 + u16::from_be_bytes([b[4], b[5]]) as usize != b.len() {
        return Err(C::Malformed);
    }
    let (unfrag, nh_at) = unfragmentable(b).ok_or(C::Malformed)?;
    let next_header = IpProtocol::from(b[nh_at]);
    let hl = unfrag + FRAGMENT_HEADER_LEN;
    if mtu < hl + 8 {
        return Err(C::MtuTooSmall);
    }
    let piece = (mtu - hl) & !7;
    let data_len = b.len() - unfrag;
    let mut count = 1;
    let mut at = piece;
    while at < data_len {
        let chunk = piece.min(data_len - at);
        let len = hl + chunk;
        let Some((d, (s, dst))) = later_fragment(pool, len, meta).and_then(|d| Some((d, pool.two_mut(bi, d)?))) else {
            return Err(abandon(pool, out, count - 1));
        };
        let s = s.bytes();
        let f = dst.bytes_mut();
        f[..unfrag].copy_from_slice(&s[..unfrag]);
        f[hl..].copy_from_slice(&s[unfrag + at..unfrag + at + chunk]);
        finish(f, unfrag, nh_at, FragmentRepr { next_header, offset: at as u16, more: at + chunk < data_len, ident });
        out.push((d, Ip6FragmentNext::Lookup));
        count += 1;
        at += chunk;
    }
    // The first fragment in place: the unfragmentable part moves 8 bytes forward to make
    // room for the Fragment header, and the rest is cut off.
    let src = pool.get_mut(bi);
    let first = piece.min(data_len);
    if src.prepend(FRAGMENT_HEADER_LEN).is_err() {
        return Err(abandon(pool, out, count - 1));
    }
    let f = src.bytes_mut();
    f.copy_within(FRAGMENT_HEADER_LEN..FRAGMENT_HEADER_LEN + unfrag, 0);
    src.truncate(hl + first);
    finish(src.bytes_mut(), unfrag, nh_at, FragmentRepr { next_header, offset: 0, more: first < data_len, ident });
    out.insert(out.len() + 1 - count, (bi, Ip6FragmentNext::Lookup));
    Ok(count)
}

fn finish(f: &mut [u8], unfrag: usize, nh_at: usize, r: FragmentRepr) {
    let plen = (f.len() - 40) as u16;
    f[4..6].copy_from_slice(&plen.to_be_bytes());
    f[nh_at] = IpProtocol::Ipv6Frag.into();
    r.emit(&mut f[unfrag..unfrag + FRAGMENT_HEADER_LEN]);
}

#[cfg(test)]
mod tests {
    mod v4 {
        use super::super::*;

        fn packet(pool: &mut Pool, opts: &[u8], data_len: usize, flags_off: u16) -> BufIdx {
            let ihl = 20 + opts.len();
            let total = ihl + data_len;
            let mut p = vec![0u8; total];
            p[0] = 0x40 | (ihl / 4) as u8;
            p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
            p[6..8].copy_from_slice(&flags_off.to_be_bytes());
            p[8] = 64;
            p[9] = 17;
            p[12..16].copy_from_slice(&[198, 18, 0, 2]);
            p[16..20].copy_from_slice(&[198, 19, 0, 9]);
            p[20..ihl].copy_from_slice(opts);
            for (i, b) in p[ihl..].iter_mut().enumerate() {
                *b = i as u8;
            }
            let c = checksum::checksum(&p[..ihl]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            let bi = pool.alloc(total).unwrap();
            pool.get_mut(bi).write(&p).unwrap();
            bi
        }

        /// Reassemble by offset and check every header on the way.
        fn rebuild(pool: &Pool, out: &[(BufIdx, Ip4FragmentNext)], mtu: usize) -> (Vec<u8>, Vec<(usize, bool, usize)>) {
            let mut data = Vec::new();
            let mut shape = Vec::new();
            for (bi, _) in out {
                let f = pool.get(*bi).bytes();
                let hl = (f[0] & 0x0f) as usize * 4;
                assert!(f.len() <= mtu && u16::from_be_bytes([f[2], f[3]]) as usize == f.len());
                assert!(checksum::verify(&f[..hl]), "header checksum");
                let word = u16::from_be_bytes([f[6], f[7]]);
                let off = (word & 0x1fff) as usize * 8;
                assert_eq!(off, data.len(), "fragments in order, back to back");
                data.extend_from_slice(&f[hl..]);
                shape.push((hl, word & 0x2000 != 0, f.len()));
            }
            (data, shape)
        }

        #[test]
        fn fragments_fit_carry_the_data_and_only_copied_options_repeat() {
            let mut pool = Pool::new(16, 1);
            // A copied option (type 0x83, loose source route shape) and a non-copied one
            // (record route, 7) take 12 bytes with padding.
            let opts = [0x07, 4, 0, 0, 0x83, 4, 9, 9, 1, 1, 0, 0];
            let bi = packet(&mut pool, &opts, 3000, 0);
            let mut out = Vec::new();
            let n = fragment4(&mut pool, bi, 1400, None, &mut out).unwrap();
            assert_eq!(n, out.len());
            assert_eq!(out[0].0, bi, "the original buffer is the first fragment");
            let (data, shape) = rebuild(&pool, &out, 1400);
            assert_eq!(data, (0..3000).map(|i| i as u8).collect::<Vec<_>>());
            assert_eq!(shape[0].0, 32);
            assert!(shape[1..].iter().all(|s| s.0 == 24), "{shape:?}");
            let more: Vec<bool> = shape.iter().map(|s| s.1).collect();
            assert_eq!(more, [true, true, false]);
            let later = pool.get(out[1].0).bytes();
            assert_eq!(&later[20..24], &[0x83, 4, 9, 9]);
            assert_eq!(u16::from_be_bytes([later[4], later[5]]), 0x1234, "identification kept");
        }

        #[test]
        fn a_fragment_refragmented_keeps_its_base_and_more_flag() {
            let mut pool = Pool::new(16, 0);
            // Offset 1480 bytes (185 words), MF set.
            let bi = packet(&mut pool, &[], 1000, 0x2000 | 185);
            let mut out = Vec::new();
            fragment4(&mut pool, bi, 600, None, &mut out).unwrap();
            let words: Vec<u16> = out.iter().map(|(b, _)| pool.get(*b).bytes()).map(|f| u16::from_be_bytes([f[6], f[7]])).collect();
            assert_eq!(words, [0x2000 | 185, 0x2000 | (185 + 72)], "576 + 424 bytes");
        }

        #[test]
        fn our_own_packets_get_a_fresh_identification_and_no_df() {
            let mut pool = Pool::new(16, 0);
            let bi = packet(&mut pool, &[], 2000, 0x4000);
            let mut out = Vec::new();
            fragment4(&mut pool, bi, 1500, Some(77), &mut out).unwrap();
            for (b, _) in &out {
                let f = pool.get(*b).bytes();
                assert_eq!(u16::from_be_bytes([f[4], f[5]]), 77);
                assert_eq!(f[6] & 0x40, 0);
            }
        }

        #[test]
        fn inconsistent_packets_and_tiny_mtus_are_refused() {
            let mut pool = Pool::new(16, 0);
            let bi = packet(&mut pool, &[], 100, 0);
            pool.get_mut(bi).bytes_mut()[2..4].copy_from_slice(&500u16.to_be_bytes());
            assert_eq!(fragment4(&mut pool, bi, 60, None, &mut Vec::new()), Err(FragmentCounter::Malformed));
            let bi = packet(&mut pool, &[], 100, 0);
            assert_eq!(fragment4(&mut pool, bi, 27, None, &mut Vec::new()), Err(FragmentCounter::MtuTooSmall));
            let bi = pool.alloc(10).unwrap();
            pool.get_mut(bi).write(&[0x45; 10]).unwrap();
            assert_eq!(fragment4(&mut pool, bi, 1500, None, &mut Vec::new()), Err(FragmentCounter::Malformed));
        }
    }

    mod v6 {
        use super::super::*;

        fn packet(pool: &mut Pool, hop_by_hop: bool, data_len: usize) -> BufIdx {
            let ext = if hop_by_hop { 8 } else { 0 };
            let mut p = vec![0u8; 40 + ext + data_len];
            p[0] = 0x60;
            p[4..6].copy_from_slice(&((ext + data_len) as u16).to_be_bytes());
            p[6] = if hop_by_hop { 0 } else { 17 };
            p[7] = 64;
            p[8..10].copy_from_slice(&[0x20, 0x01]);
            if hop_by_hop {
                p[40] = 17;
                p[42] = 1; // PadN over the rest of the 8 bytes
                p[43] = 4;
            }
            for (i, b) in p[40 + ext..].iter_mut().enumerate() {
                *b = (i * 7) as u8;
            }
            let bi = pool.alloc(p.len()).unwrap();
            pool.get_mut(bi).write(&p).unwrap();
            bi
        }

        #[test]
        fn fragments_carry_the_unfragmentable_part_and_the_data_in_order() {
            for hbh in [false, true] {
                let mut pool = Pool::new(16, 1);
                let bi = packet(&mut pool, hbh, 3000);
                let original = pool.get(bi).bytes().to_vec();
                let unfrag = if hbh { 48 } else { 40 };
                let mut out = Vec::new();
                let n = fragment6(&mut pool, bi, 1280, 0xabcd, &mut out).unwrap();
                assert_eq!((n, out[0].0), (3, bi));
                let mut data = Vec::new();
                for (k, (b, _)) in out.iter().enumerate() {
                    let f = pool.get(*b).bytes();
                    assert!(f.len() <= 1280);
                    assert_eq!(u16::from_be_bytes([f[4], f[5]]) as usize, f.len() - 40);
                    assert_eq!(&f[8..40], &original[8..40]);
                    if hbh {
                        assert_eq!((f[6], f[40]), (0, 44));
                    } else {
                        assert_eq!(f[6], 44);
                    }
                    let r = FragmentRepr::parse(&f[unfrag..]).unwrap();
                    assert_eq!((r.next_header, r.ident, r.offset as usize, r.more), (IpProtocol::Udp, 0xabcd, data.len(), k + 1 < n));
                    data.extend_from_slice(&f[unfrag + 8..]);
                }
                assert_eq!(data, original[unfrag..]);
            }
        }

        #[test]
        fn fragments_and_bad_packets_are_refused() {
            let mut pool = Pool::new(16, 0);
            let bi = packet(&mut pool, false, 100);
            pool.get_mut(bi).bytes_mut()[6] = 44;
            assert_eq!(fragment6(&mut pool, bi, 1280, 1, &mut Vec::new()), Err(FragmentCounter::Malformed));
            let bi = packet(&mut pool, false, 100);
            pool.get_mut(bi).bytes_mut()[5] = 7;
            assert_eq!(fragment6(&mut pool, bi, 1280, 1, &mut Vec::new()), Err(FragmentCounter::Malformed));
            let bi = packet(&mut pool, false, 100);
            assert_eq!(fragment6(&mut pool, bi, 50, 1, &mut Vec::new()), Err(FragmentCounter::MtuTooSmall));
        }
    }
}
