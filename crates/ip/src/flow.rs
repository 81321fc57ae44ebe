//! Flow keys for spreading packets: which words of a packet identify its flow, hashed
//! with `engine::hash`. Tunnel source ports (RSS/ECMP entropy) and the handoff between
//! workers both use them.

use engine::hash;

/// A hash of an IP packet's flow: addresses, protocol and, for unfragmented TCP, UDP and
/// SCTP, the ports. 0 for anything that is not IPv4 or IPv6.
#[inline(always)]
pub fn ip_flow_hash(b: &[u8]) -> u32 {
    match b.first().map(|v| v >> 4) {
        Some(4) => b.first_chunk::<20>().map_or(0, |h| ip4_flow_hash(h, b)),
        Some(6) => b.first_chunk::<40>().map_or(0, |h| ip6_flow_hash(h, b)),
        _ => 0,
    }
}

/// TCP, UDP and SCTP: the protocols whose first four bytes are the ports.
#[inline(always)]
fn ported(p: u8) -> bool {
    PORTED[p as usize]
}

/// [`ported`] as a table: one load, where three comparisons cost six instructions on
/// every encapsulated packet.
static PORTED: [bool; 256] = {
    let mut t = [false; 256];
    t[6] = true;
    t[17] = true;
    t[132] = true;
    t
};

/// The four port bytes at `at`, as one word (0 past the end).
#[inline(always)]
fn ports(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 4).map_or(0, |x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]) as u64)
}

/// [`ip_flow_hash`] of an IPv4 packet `b` whose first 20 bytes are `h` (for a caller
/// that has already looked at the version).
#[inline(always)]
pub fn ip4_flow_hash(h: &[u8; 20], b: &[u8]) -> u32 {
    ip4_hash(h, ports(b, ((h[0] & 0x0f) as usize) * 4))
}

/// [`ip_flow_hash`] of an IPv4 packet without options, from its header and the four
/// bytes after it (for a caller that holds them already: no bounds to check).
#[inline(always)]
pub fn ip4_flow_hash_plain(h: &[u8; 24]) -> u32 {
    let ports = u32::from_ne_bytes([h[20], h[21], h[22], h[23]]) as u64;
    // Never 0 by `else`: 20 of 24 bytes.
    h.first_chunk::<20>().map_or(0, |h| ip4_hash(h, ports))
}

/// The hash of an IPv4 header `h` whose (possible) ports word is `p`: used only for an
/// unfragmented TCP, UDP or SCTP packet, chosen without a branch.
#[inline(always)]
fn ip4_hash(h: &[u8; 20], p: u64) -> u32 {
    let whole = (h[6] & 0x3f) | h[7] == 0;
    // All ones where the ports count, else zero: no branch, no selects.
    let mask = ((ported(h[9]) & whole) as u64).wrapping_neg();
    let p = p & mask;
    let addrs = u64::from_ne_bytes([h[12], h[13], h[14], h[15], h[16], h[17], h[18], h[19]]);
    hash::flow_hash2(addrs, (h[9] as u64) << 32 | p)
}

/// [`ip_flow_hash`] of an IPv6 packet `b` whose first 40 bytes are `h`.
#[inline(always)]
pub fn ip6_flow_hash(h: &[u8; 40], b: &[u8]) -> u32 {
    let word = |i: usize| u64::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3], h[i + 4], h[i + 5], h[i + 6], h[i + 7]]);
    let p = if ported(h[6]) { ports(b, 40) } else { 0 };
    hash::flow_hash6([word(8), word(16)], [word(24), word(32)], (h[6] as u64) << 32 | p)
}

/// The GTP-U TEID of an IP packet carrying a G-PDU (UDP to port 2152, unfragmented,
/// no IPv6 extension headers), if it is one.
fn gtpu_teid(b: &[u8]) -> Option<u32> {
    let udp = match b.first()? >> 4 {
        4 => {
            let hl = ((b[0] & 0x0f) as usize) * 4;
            let frag = (b.get(6)? & 0x3f) != 0 || *b.get(7)? != 0;
            (*b.get(9)? == 17 && !frag).then_some(hl)?
        }
        6 => (*b.get(6)? == 17).then_some(40)?,
        _ => return None,
    };
    let h = b.get(udp..udp + 8 + 8)?;
    (u16::from_be_bytes([h[2], h[3]]) == wire::gtpu::PORT).then(|| u32::from_be_bytes([h[12], h[13], h[14], h[15]]))
}

/// The flow hash of an Ethernet frame for spreading it across workers: a GTP-U packet
/// by its TEID (a tunnel's packets stay together and in order on one worker, whatever
/// they carry), any other IP packet by its 5-tuple, anything else (ARP, …) by 0.
/// One 802.1Q tag is looked through.
pub fn frame_flow_hash(f: &[u8]) -> u32 {
    match frame_ip(f) {
        Some(ip) => match gtpu_teid(ip) {
            Some(teid) => hash::hash_words(0x6770_7475, &[teid]),
            None => ip_flow_hash(ip),
        },
        None => 0,
    }
}

/// The IP packet of an Ethernet frame (IPv4 or IPv6, one 802.1Q tag looked through),
/// possibly truncated; `None` for other frames.
#[inline]
pub fn frame_ip(f: &[u8]) -> Option<&[u8]> {
    let (ethertype, l3) = match f.get(12..14) {
        Some([0x81, 0x00]) => (f.get(16..18), 18),
        t => (t, 14),
    };
    match ethertype {
        Some([0x08, 0x00]) | Some([0x86, 0xdd]) => Some(&f[l3.min(f.len())..]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 2, 198, 18, 1, 2];
        ip.extend_from_slice(&src_port.to_be_bytes());
        ip.extend_from_slice(&dst_port.to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0, 0]);
        ip.extend_from_slice(payload);
        f.extend_from_slice(&ip);
        f
    }

    #[test]
    fn gtpu_packets_hash_by_teid_only_and_others_by_five_tuple() {
        let gpdu = |teid: u32, inner_port: u8| {
            let mut g = vec![0x30, 0xff, 0, 8];
            g.extend_from_slice(&teid.to_be_bytes());
            g.extend_from_slice(&[0x45, 0, 0, 0, inner_port]);
            g
        };
        // Same TEID, different outer source port and inner contents: same worker.
        assert_eq!(frame_flow_hash(&udp4(1000, 2152, &gpdu(7, 1))), frame_flow_hash(&udp4(2000, 2152, &gpdu(7, 2))));
        assert_ne!(frame_flow_hash(&udp4(1000, 2152, &gpdu(7, 1))), frame_flow_hash(&udp4(1000, 2152, &gpdu(8, 1))));
        // Not GTP-U: the source port matters.
        assert_ne!(frame_flow_hash(&udp4(1000, 53, b"x")), frame_flow_hash(&udp4(1001, 53, b"x")));
        // A VLAN tag is looked through.
        let plain = udp4(1000, 53, b"x");
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(frame_flow_hash(&tagged), frame_flow_hash(&plain));
        // Truncated and non-IP frames do not panic.
        for n in 0..plain.len() {
            let _ = frame_flow_hash(&plain[..n]);
        }
        assert_eq!(frame_flow_hash(&[0u8; 60]), 0);
    }

    /// The fixed-header hash is the general one, for any header without options and
    /// any protocol, fragment field and ports.
    #[test]
    fn plain_ipv4_hash_is_the_general_hash() {
        let mut h = [0u8; 24];
        h[0] = 0x45;
        h[12..20].copy_from_slice(&[198, 18, 0, 2, 198, 19, 7, 1]);
        for proto in [0u8, 1, 6, 17, 47, 132, 255] {
            for frag in [[0u8, 0], [0x40, 0], [0x20, 0], [0, 1], [0x01, 0]] {
                for ports in [[0u8, 0, 0, 0], [0x13, 0x88, 0, 53], [0xff; 4]] {
                    h[9] = proto;
                    h[6..8].copy_from_slice(&frag);
                    h[20..].copy_from_slice(&ports);
                    assert_eq!(ip4_flow_hash_plain(&h), ip_flow_hash(&h), "{proto} {frag:?} {ports:?}");
                }
            }
        }
        // The ports count only where there are ports: not for ICMP, nor in a fragment.
        let with = |proto: u8, frag: u8, p: u8| {
            let mut x = h;
            (x[9], x[6], x[21]) = (proto, frag, p);
            ip4_flow_hash_plain(&x)
        };
        assert_ne!(with(17, 0x40, 1), with(17, 0x40, 2));
        assert_eq!(with(1, 0x40, 1), with(1, 0x40, 2));
        assert_eq!(with(17, 0x20, 1), with(17, 0x20, 2));
    }

    #[test]
    fn ten_thousand_flows_spread_evenly_over_workers() {
        for workers in [2usize, 3, 4] {
            let mut n = vec![0u32; workers];
            for port in 0..10_000u16 {
                n[hash::reduce(frame_flow_hash(&udp4(10_000 + port, 53, b"")), workers as u32) as usize] += 1;
            }
            let mean = 10_000 / workers as u32;
            assert!(n.iter().all(|&c| c.abs_diff(mean) * 10 < mean), "{n:?}");
        }
    }
}
