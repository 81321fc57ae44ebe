//! `ip6-reassembly`: IPv6 fragments addressed to the gateway (from `ip6-local`) are
//! held in the worker's bounded table (`crate::reassembly`) until their datagram is
//! whole (RFC 8200 §4.5; overlaps end the datagram, RFC 5722); the datagram then goes
//! back to `ip6-local` as one packet: the first fragment's unfragmentable part, its
//! last next-header field naming what the Fragment header named, and the data.
//! An atomic fragment (offset 0, no more) is delivered at once (RFC 6946).

use crate::context::HasIp;
use crate::reassembly::{FragKey, Fragment, Insert};
use engine::{counters, next_nodes, BufIdx, Counts, ExpandNode, Pool};
use std::net::Ipv6Addr;
use wire::ipv6_ext::{FragmentRepr, FRAGMENT_HEADER_LEN};
use wire::IpProtocol;

next_nodes! {
    pub enum Ip6ReassemblyNext { Local = "ip6-local" }
}

counters! {
    pub enum Ip6ReassemblyCounter {
        Fragments(Info, "fragments", "fragments received"),
        Reassembled(Info, "reassembled", "datagrams made whole"),
        Atomic(Info, "atomic", "atomic fragments (offset 0, no more) delivered at once"),
        Duplicate(Info, "duplicate", "the same piece again: dropped alone"),
        Overlap(Warn, "overlap", "a piece overlapping another differently: the datagram dropped (RFC 5722)"),
        Inconsistent(Warn, "inconsistent", "lengths that disagree or exceed 65535 bytes: the datagram dropped"),
        TableFull(Warn, "table-full", "the table is at its cap of datagrams or bytes: fragment refused"),
        SourceFull(Warn, "source-full", "the source is at its cap of datagrams: fragment refused"),
        TimedOut(Warn, "timed-out", "datagrams dropped unfinished at the reassembly timeout"),
        Malformed(Warn, "malformed", "not a readable IPv6 fragment"),
        NoBuffer(Error, "no-buffer", "no buffer for the whole datagram: dropped"),
    }
}

pub struct Ip6Reassembly;

/// Where the Fragment header is, and the next-header field that names it.
fn fragment_header_at(b: &[u8]) -> Option<(usize, usize)> {
    let mut nh_at = 6;
    let mut off = 40;
    loop {
        match IpProtocol::from(*b.get(nh_at)?) {
            IpProtocol::Ipv6Frag => return (off + FRAGMENT_HEADER_LEN <= b.len()).then_some((off, nh_at)),
            IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Opts => {
                let len = (*b.get(off + 1)? as usize + 1) * 8;
                nh_at = off;
                off += len;
            }
            _ => return None,
        }
    }
}

impl<Cx: HasIp> ExpandNode<Cx> for Ip6Reassembly {
    type Next = Ip6ReassemblyNext;
    type Counter = Ip6ReassemblyCounter;

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
        use Ip6ReassemblyCounter as C;
        let table = &mut cx.ip().reassembly6;
        counts.inc(C::Fragments);
        let b = pool.get(bi).bytes();
        if b.len() < 40 {
            return Err(C::Malformed);
        }
        let end = 40 + u16::from_be_bytes([b[4], b[5]]) as usize;
        let b = b.get(..end).ok_or(C::Malformed)?;
        let (fo, nh_at) = fragment_header_at(b).ok_or(C::Malformed)?;
        let fr = FragmentRepr::parse(&b[fo..]).map_err(|_| C::Malformed)?;
        let data = &b[fo + FRAGMENT_HEADER_LEN..];
        // The whole datagram's headers: the unfragmentable part, naming what follows.
        let mut header = [0u8; 512];
        let header = if fr.offset == 0 {
            let h = header.get_mut(..fo).ok_or(C::Malformed)?;
            h.copy_from_slice(&b[..fo]);
            h[nh_at] = fr.next_header.into();
            Some(&*h)
        } else {
            None
        };
        let atomic = fr.offset == 0 && !fr.more;
        let r = if atomic {
            counts.inc(C::Atomic);
            Insert::Complete { header: header.unwrap_or_default().to_vec(), data: data.to_vec() }
        } else {
            let key = FragKey {
                src: Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).map_err(|_| C::Malformed)?),
                dst: Ipv6Addr::from(<[u8; 16]>::try_from(&b[24..40]).map_err(|_| C::Malformed)?),
                ident: fr.ident,
                proto: 0,
            };
            let f = Fragment { offset: fr.offset as usize, more: fr.more, data, header };
            let r = table.insert(key, f, std::time::Instant::now());
            counts.add(C::TimedOut, std::mem::take(&mut table.timed_out));
            r
        };
        match r {
            Insert::Pending => Ok(()),
            Insert::Duplicate => Err(C::Duplicate),
            Insert::Overlap => Err(C::Overlap),
            Insert::Inconsistent => Err(C::Inconsistent),
            Insert::Full => Err(C::TableFull),
            Insert::SourceFull => Err(C::SourceFull),
            Insert::Complete { header, data } => {
                let len = header.len() + data.len();
                if len - 40 > u16::MAX as usize {
                    return Err(C::Inconsistent);
                }
                let Some(d) = pool.alloc(len) else { return Err(C::NoBuffer) };
                let meta = pool.get(bi).meta;
                let whole = pool.get_mut(d);
                if whole.set_len(len).is_err() {
                    pool.free(d);
                    return Err(C::NoBuffer);
                }
                let (h, rest) = whole.bytes_mut().split_at_mut(header.len());
                h.copy_from_slice(&header);
                rest.copy_from_slice(&data);
                cx.ip().reassembly6.recycle(header, data);
                whole.meta = meta;
                whole.meta.offload = engine::Offload::default();
                whole.meta.l4_checksum_ok = false;
                whole.bytes_mut()[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
                if !atomic {
                    counts.inc(C::Reassembled);
                }
                out.push((d, Ip6ReassemblyNext::Local));
                Ok(())
            }
        }
    }
}
