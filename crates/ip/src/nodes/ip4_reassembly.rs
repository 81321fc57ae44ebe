//! `ip4-reassembly`: IPv4 fragments addressed to the gateway (from `ip4-local`) are
//! held in the worker's bounded table (`crate::reassembly`) until their datagram is
//! whole; the datagram then goes back to `ip4-local` as one packet, its header the
//! first fragment's with the whole length, no MF flag or offset, and a new checksum.

use crate::context::HasIp;
use crate::reassembly::{FragKey, Fragment, Insert};
use engine::{counters, next_nodes, BufIdx, Counts, ExpandNode, Pool};
use std::net::Ipv4Addr;

next_nodes! {
    pub enum Ip4ReassemblyNext { Local = "ip4-local" }
}

counters! {
    pub enum Ip4ReassemblyCounter {
        Fragments(Info, "fragments", "fragments received"),
        Reassembled(Info, "reassembled", "datagrams made whole"),
        Duplicate(Info, "duplicate", "the same piece again: dropped alone"),
        Overlap(Warn, "overlap", "a piece overlapping another differently: the datagram dropped"),
        Inconsistent(Warn, "inconsistent", "lengths that disagree or exceed 65535 bytes: the datagram dropped"),
        TableFull(Warn, "table-full", "the table is at its cap of datagrams or bytes: fragment refused"),
        SourceFull(Warn, "source-full", "the source is at its cap of datagrams: fragment refused"),
        TimedOut(Warn, "timed-out", "datagrams dropped unfinished at the reassembly timeout"),
        Malformed(Warn, "malformed", "not a readable IPv4 fragment"),
        NoBuffer(Error, "no-buffer", "no buffer for the whole datagram: dropped"),
    }
}

pub struct Ip4Reassembly;

impl<Cx: HasIp> ExpandNode<Cx> for Ip4Reassembly {
    type Next = Ip4ReassemblyNext;
    type Counter = Ip4ReassemblyCounter;

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
        use Ip4ReassemblyCounter as C;
        let table = &mut cx.ip().reassembly4;
        counts.inc(C::Fragments);
        let src = pool.get(bi);
        let b = src.bytes();
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
        let f = Fragment { offset, more: word & 0x2000 != 0, data: &b[ihl..total], header: (offset == 0).then(|| &b[..ihl]) };
        let r = table.insert(key, f, std::time::Instant::now());
        counts.add(C::TimedOut, std::mem::take(&mut table.timed_out));
        match r {
            Insert::Pending => Ok(()),
            Insert::Duplicate => Err(C::Duplicate),
            Insert::Overlap => Err(C::Overlap),
            Insert::Inconsistent => Err(C::Inconsistent),
            Insert::Full => Err(C::TableFull),
            Insert::SourceFull => Err(C::SourceFull),
            Insert::Complete { header, data } => {
                let len = header.len() + data.len();
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
                let hl = header.len();
                cx.ip().reassembly4.recycle(header, data);
                whole.meta = meta;
                whole.meta.offload = engine::Offload::default();
                whole.meta.l4_checksum_ok = false;
                let p = whole.bytes_mut();
                p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
                p[6] &= 0x40; // DF as the first fragment had it; no MF, offset 0
                p[7] = 0;
                p[10..12].copy_from_slice(&[0, 0]);
                let c = wire::checksum::checksum(&p[..hl]);
                p[10..12].copy_from_slice(&c.to_be_bytes());
                counts.inc(C::Reassembled);
                out.push((d, Ip4ReassemblyNext::Local));
                Ok(())
            }
        }
    }
}
