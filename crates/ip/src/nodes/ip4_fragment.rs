//! `ip4-fragment`: cut an IPv4 packet into fragments that fit the MTU a node asked for
//! (`Meta::param`, a [`FragmentRequest`]): a forwarded packet without DF that is larger
//! than its next hop's MTU, an inner packet without DF that is larger than its tunnel
//! (fragmented before encapsulation, so the far tunnel end reassembles nothing), or an
//! outer packet we built ourselves. Fragments go back to `ip4-lookup`, which routes
//! each like the original (RFC 791 §3.2, RFC 1812 §5.2.4.3).
//!
//! Every fragment carries the original header with its own length, offset, MF flag and
//! header checksum; only the first keeps options whose copy bit is clear. A fragment
//! being fragmented again keeps its offset base and its last piece keeps its MF flag.

use super::FragmentRequest;
use crate::context::HasIp;
use engine::{counters, next_nodes, BufIdx, Counts, ExpandNode, GsoKind, Pool};
use wire::checksum;

next_nodes! {
    pub enum Ip4FragmentNext { Lookup = "ip4-lookup" }
}

counters! {
    pub enum Ip4FragmentCounter {
        Fragmented(Info, "packets-fragmented", "packets cut into fragments"),
        Fragments(Info, "fragments", "fragments produced"),
        Malformed(Warn, "malformed", "not a whole IPv4 packet (header or length inconsistent): dropped"),
        MtuTooSmall(Warn, "mtu-too-small", "the MTU leaves no room for 8 bytes of data after the header: dropped"),
        GsoFrame(Warn, "gso-frame", "a GSO frame (segmented, not fragmented): dropped"),
        NoBuffer(Error, "no-buffer", "out of buffers: the packet dropped"),
    }
}

pub struct Ip4Fragment;

impl<Cx: HasIp> ExpandNode<Cx> for Ip4Fragment {
    type Next = Ip4FragmentNext;
    type Counter = Ip4FragmentCounter;

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
        let req = FragmentRequest::decode(pool.get(bi).meta.param);
        let ident = if req.originated {
            let cx = cx.ip();
            cx.ident = cx.ident.wrapping_add(1);
            Some(cx.ident)
        } else {
            None
        };
        let n = fragment(pool, bi, req.mtu as usize, ident, out)?;
        counts.inc(Ip4FragmentCounter::Fragmented);
        counts.add(Ip4FragmentCounter::Fragments, n as u64);
        Ok(())
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
pub fn fragment(
    pool: &mut Pool,
    bi: BufIdx,
    mtu: usize,
    ident: Option<u16>,
    out: &mut Vec<(BufIdx, Ip4FragmentNext)>,
) -> Result<usize, Ip4FragmentCounter> {
    use Ip4FragmentCounter as C;
    let src = pool.get_mut(bi);
    if src.meta.offload.gso != GsoKind::None {
        return Err(C::GsoFrame);
    }
    // A checksum left for the device cannot be completed once the data is split.
    if let Some((start, offset)) = src.take_partial_checksum() {
        checksum::complete_partial(src.bytes_mut(), start, offset);
    }
    let b = src.bytes();
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
    let meta = src.meta;
    let mut count = 1;
    let mut at = first_data;
    // Later fragments first, copied out of the original before it is cut down.
    while at < data_len {
        let chunk = later_data.min(data_len - at);
        let len = later_hl + chunk;
        let d = pool.alloc(len);
        let Some((s, dst)) = d.and_then(|d| pool.two_mut(bi, d)).and_then(|(s, dst)| dst.set_len(len).is_ok().then_some((s, dst))) else {
            // All or nothing: a datagram missing a piece would only hold reassembly state.
            d.into_iter().chain(out.drain(out.len() + 1 - count..).map(|(f, _)| f)).for_each(|f| pool.free(f));
            return Err(C::NoBuffer);
        };
        let s = s.bytes();
        let f = dst.bytes_mut();
        f[..20].copy_from_slice(&s[..20]);
        f[20..later_hl].copy_from_slice(&later_opts[..later_opts_len]);
        f[later_hl..].copy_from_slice(&s[ihl + at..ihl + at + chunk]);
        let more = at + chunk < data_len || last_more;
        finish_header(f, later_hl, len, base + at, more, ident);
        dst.meta = meta;
        dst.meta.offload = engine::Offload::default();
        out.push((d.expect("allocated"), Ip4FragmentNext::Lookup));
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
    f[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&f[..hl]);
    f[10..12].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let n = fragment(&mut pool, bi, 1400, None, &mut out).unwrap();
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
        fragment(&mut pool, bi, 600, None, &mut out).unwrap();
        let words: Vec<u16> = out.iter().map(|(b, _)| pool.get(*b).bytes()).map(|f| u16::from_be_bytes([f[6], f[7]])).collect();
        assert_eq!(words, [0x2000 | 185, 0x2000 | (185 + 72)], "576 + 424 bytes");
    }

    #[test]
    fn our_own_packets_get_a_fresh_identification_and_no_df() {
        let mut pool = Pool::new(16, 0);
        let bi = packet(&mut pool, &[], 2000, 0x4000);
        let mut out = Vec::new();
        fragment(&mut pool, bi, 1500, Some(77), &mut out).unwrap();
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
        assert_eq!(fragment(&mut pool, bi, 60, None, &mut Vec::new()), Err(Ip4FragmentCounter::Malformed));
        let bi = packet(&mut pool, &[], 100, 0);
        assert_eq!(fragment(&mut pool, bi, 27, None, &mut Vec::new()), Err(Ip4FragmentCounter::MtuTooSmall));
        let bi = pool.alloc(10).unwrap();
        pool.get_mut(bi).write(&[0x45; 10]).unwrap();
        assert_eq!(fragment(&mut pool, bi, 1500, None, &mut Vec::new()), Err(Ip4FragmentCounter::Malformed));
    }
}
