//! `ip6-fragment`: source fragmentation (RFC 8200 §4.5) of an IPv6 packet we
//! originated, such as a tunnel's outer packet that is larger than the path: routers do
//! not fragment IPv6, so forwarded packets never come here (they get Packet Too Big).
//! The size comes in `Meta::param` (a [`FragmentRequest`]). Each fragment is the
//! unfragmentable part (the fixed header, hop-by-hop and routing headers), a Fragment
//! header with this worker's next identification, and a piece of the rest; fragments go
//! back to `ip6-lookup`.

use super::FragmentRequest;
use crate::context::HasIp;
use engine::{counters, next_nodes, BufIdx, Counts, ExpandNode, GsoKind, Pool};
use wire::checksum;
use wire::ipv6_ext::{FragmentRepr, FRAGMENT_HEADER_LEN};
use wire::IpProtocol;

next_nodes! {
    pub enum Ip6FragmentNext { Lookup = "ip6-lookup" }
}

counters! {
    pub enum Ip6FragmentCounter {
        Fragmented(Info, "packets-fragmented", "packets cut into fragments"),
        Fragments(Info, "fragments", "fragments produced"),
        Malformed(Warn, "malformed", "not a whole IPv6 packet, or already a fragment: dropped"),
        MtuTooSmall(Warn, "mtu-too-small", "the MTU leaves no room for 8 bytes of data after the headers: dropped"),
        GsoFrame(Warn, "gso-frame", "a GSO frame (segmented, not fragmented): dropped"),
        NoBuffer(Error, "no-buffer", "out of buffers: the packet dropped"),
    }
}

pub struct Ip6Fragment;

impl<Cx: HasIp> ExpandNode<Cx> for Ip6Fragment {
    type Next = Ip6FragmentNext;
    type Counter = Ip6FragmentCounter;

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
        let req = FragmentRequest::decode(pool.get(bi).meta.param);
        let cx = cx.ip();
        cx.ident6 = cx.ident6.wrapping_add(1);
        let n = fragment(pool, bi, req.mtu as usize, cx.ident6, out)?;
        counts.inc(Ip6FragmentCounter::Fragmented);
        counts.add(Ip6FragmentCounter::Fragments, n as u64);
        Ok(())
    }
}

/// The unfragmentable part's length and where its last next-header field is.
fn unfragmentable(b: &[u8]) -> Option<(usize, usize)> {
    let mut nh_at = 6;
    let mut off = 40;
    loop {
        match IpProtocol::from(*b.get(nh_at)?) {
            IpProtocol::HopByHop | IpProtocol::Ipv6Route => {
                let len = (*b.get(off + 1)? as usize + 1) * 8;
                nh_at = off;
                off += len;
            }
            IpProtocol::Ipv6Frag => return None,
            _ => return (off <= b.len()).then_some((off, nh_at)),
        }
    }
}

/// Fragment the IPv6 packet `bi` for `mtu` under identification `ident`, pushing the
/// fragments (the input buffer reused for the first) to `out`; returns how many.
pub fn fragment(
    pool: &mut Pool,
    bi: BufIdx,
    mtu: usize,
    ident: u32,
    out: &mut Vec<(BufIdx, Ip6FragmentNext)>,
) -> Result<usize, Ip6FragmentCounter> {
    use Ip6FragmentCounter as C;
    let src = pool.get_mut(bi);
    if src.meta.offload.gso != GsoKind::None {
        return Err(C::GsoFrame);
    }
    if let Some((start, offset)) = src.take_partial_checksum() {
        checksum::complete_partial(src.bytes_mut(), start, offset);
    }
    let b = src.bytes();
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
    let meta = src.meta;
    let mut count = 1;
    let mut at = piece;
    while at < data_len {
        let chunk = piece.min(data_len - at);
        let len = hl + chunk;
        let d = pool.alloc(len);
        let Some((s, dst)) = d.and_then(|d| pool.two_mut(bi, d)).and_then(|(s, dst)| dst.set_len(len).is_ok().then_some((s, dst))) else {
            d.into_iter().chain(out.drain(out.len() + 1 - count..).map(|(f, _)| f)).for_each(|f| pool.free(f));
            return Err(C::NoBuffer);
        };
        let s = s.bytes();
        let f = dst.bytes_mut();
        f[..unfrag].copy_from_slice(&s[..unfrag]);
        f[hl..].copy_from_slice(&s[unfrag + at..unfrag + at + chunk]);
        finish(f, unfrag, nh_at, FragmentRepr { next_header, offset: at as u16, more: at + chunk < data_len, ident });
        dst.meta = meta;
        dst.meta.offload = engine::Offload::default();
        out.push((d.expect("allocated"), Ip6FragmentNext::Lookup));
        count += 1;
        at += chunk;
    }
    // The first fragment in place: the unfragmentable part moves 8 bytes forward to make
    // room for the Fragment header, and the rest is cut off.
    let src = pool.get_mut(bi);
    let first = piece.min(data_len);
    if src.prepend(FRAGMENT_HEADER_LEN).is_err() {
        out.drain(out.len() + 1 - count..).for_each(|(f, _)| pool.free(f));
        return Err(C::NoBuffer);
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
    use super::*;

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
            let n = fragment(&mut pool, bi, 1280, 0xabcd, &mut out).unwrap();
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
        assert_eq!(fragment(&mut pool, bi, 1280, 1, &mut Vec::new()), Err(Ip6FragmentCounter::Malformed));
        let bi = packet(&mut pool, false, 100);
        pool.get_mut(bi).bytes_mut()[5] = 7;
        assert_eq!(fragment(&mut pool, bi, 1280, 1, &mut Vec::new()), Err(Ip6FragmentCounter::Malformed));
        let bi = packet(&mut pool, false, 100);
        assert_eq!(fragment(&mut pool, bi, 50, 1, &mut Vec::new()), Err(Ip6FragmentCounter::MtuTooSmall));
    }
}
