//! The body of the `lb_nat` fuzz target, here so the stable test suite replays the
//! committed corpus (`fuzz/corpus/lb_nat`) through the code cargo-fuzz runs. Beyond "no
//! panic" it checks: whatever [`nat::flow`] reads, [`nat::translate`] turns into a packet
//! that reads as the translation asked for, with an IPv4 header checksum that still
//! verifies if it did; the same for an SCTP packet ([`nat::sctp_flow`]), with a CRC32c
//! that verifies (computed again); an ICMP error about a flow
//! stays readable once translated, and its quote reads as asked for.

use crate::family::{V4, V6};
use crate::nat::{self, Layout};
use crate::session::Rewrite;

fn rewrite<F: Layout>(seed: &[u8]) -> Rewrite<F::Addr>
where
    F::Addr: AsMut<[u8]>,
{
    let mut r = Rewrite::<F::Addr>::default();
    let mut bytes = seed.iter().rev().copied().cycle();
    for b in r.src.as_mut().iter_mut().chain(r.dst.as_mut().iter_mut()) {
        *b = bytes.next().unwrap_or(0);
    }
    r.sport = u16::from_be_bytes([bytes.next().unwrap_or(1), bytes.next().unwrap_or(2)]);
    r.dport = u16::from_be_bytes([bytes.next().unwrap_or(3), bytes.next().unwrap_or(4)]);
    r
}

fn one<F: Layout>(data: &[u8])
where
    F::Addr: AsMut<[u8]>,
{
    let to = rewrite::<F>(data);
    let mut p = data.to_vec();
    if let Ok(read) = nat::flow::<F>(&p) {
        let (key, l4) = (read.key, read.l4);
        let header_ok = p[0] >> 4 == 4 && wire::checksum::verify(&p[..l4]);
        nat::translate::<F>(&mut p, &read, &to, false);
        let after = nat::flow::<F>(&p).expect("a translated packet reads");
        let now = after.key;
        assert_eq!((now.src, now.dst, now.sport, now.dport, now.proto), (to.src, to.dst, to.sport, to.dport, key.proto));
        assert_eq!(after.l4, l4);
        if header_ok {
            assert!(wire::checksum::verify(&p[..l4]), "the IPv4 header checksum was patched");
        }
    }
    let mut p = data.to_vec();
    if let Ok(read) = nat::sctp_flow::<F>(&p) {
        let (key, l4) = (read.key, read.l4);
        let header_ok = p[0] >> 4 == 4 && wire::checksum::verify(&p[..l4]);
        nat::translate::<F>(&mut p, &read, &to, false);
        let after = nat::sctp_flow::<F>(&p).expect("a translated SCTP packet reads");
        let now = after.key;
        assert_eq!((now.src, now.dst, now.sport, now.dport, now.proto), (to.src, to.dst, to.sport, to.dport, key.proto));
        assert_eq!((after.l4, after.flags), (l4, read.flags));
        assert!(nat::sctp_checksum(&p, &after).is_ok(), "the CRC32c computed again");
        if header_ok {
            assert!(wire::checksum::verify(&p[..l4]), "the IPv4 header checksum was patched");
        }
    }
    let mut p = data.to_vec();
    if let Ok(e) = nat::icmp_error::<F>(&p) {
        nat::translate_icmp_error::<F>(&mut p, &e, &to);
        let after = nat::icmp_error::<F>(&p).expect("a translated ICMP error reads");
        assert_eq!((after.quoted.src, after.quoted.sport, after.quoted.dst, after.quoted.dport), (to.dst, to.dport, to.src, to.sport));
    }
}

/// The `lb_nat` target: the bytes as an IPv4 and as an IPv6 packet.
pub fn nat(data: &[u8]) {
    one::<V4>(data);
    one::<V6>(data);
}
