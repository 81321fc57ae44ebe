//! TCP MSS clamping: lower the maximum segment size a SYN or SYN-ACK announces, so both
//! ends of a connection through a tunnel send segments that fit it without relying on
//! ICMP reaching them (which firewalls often drop). The checksum follows by RFC 1624.

use wire::checksum;

/// The MSS that fits an inner MTU: the MTU less the IP and TCP headers without options.
pub fn mss_for_mtu(mtu: usize, v6: bool) -> u16 {
    mtu.saturating_sub(if v6 { 60 } else { 40 }).min(u16::MAX as usize) as u16
}

/// If `p` (an IPv4 or IPv6 packet at its header) is a TCP SYN whose MSS option exceeds
/// the MSS for `mtu`, lower it and update the TCP checksum; true when changed.
/// `partial`: the checksum is left to the device (the field holds the pseudo-header sum,
/// which does not cover the option), so it stays as it is.
pub fn clamp_syn_mss(p: &mut [u8], mtu: usize, partial: bool) -> bool {
    let (v6, l4) = match p.first().map(|v| v >> 4) {
        Some(4) if p.len() >= 20 && p[9] == 6 && p[6] & 0x3f == 0 && p[7] == 0 => (false, (p[0] & 0x0f) as usize * 4),
        Some(6) if p.len() >= 40 && p[6] == 6 => (true, 40),
        _ => return false,
    };
    let Some(tcp) = p.get_mut(l4..) else { return false };
    if tcp.len() < 20 || tcp[13] & 0x02 == 0 {
        return false;
    }
    let doff = (tcp[12] >> 4) as usize * 4;
    if doff < 20 || doff > tcp.len() {
        return false;
    }
    let max = mss_for_mtu(mtu, v6);
    let mut i = 20;
    while i < doff {
        match tcp[i] {
            0 => return false,
            1 => i += 1,
            kind => {
                let Some(&len) = tcp.get(i + 1) else { return false };
                let len = len as usize;
                if len < 2 || i + len > doff {
                    return false;
                }
                if kind == 2 && len == 4 {
                    let old = u16::from_be_bytes([tcp[i + 2], tcp[i + 3]]);
                    if old <= max {
                        return false;
                    }
                    tcp[i + 2..i + 4].copy_from_slice(&max.to_be_bytes());
                    if !partial {
                        // A value at an odd offset straddles two checksum words: its
                        // bytes count swapped.
                        let (o, n) = if (i + 2) % 2 == 0 { (old, max) } else { (old.swap_bytes(), max.swap_bytes()) };
                        let c = checksum::update16(u16::from_be_bytes([tcp[16], tcp[17]]), o, n);
                        tcp[16..18].copy_from_slice(&c.to_be_bytes());
                    }
                    return true;
                }
                i += len;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// An IPv4 TCP SYN with the given options and a correct checksum.
    fn syn(opts: &[u8], flags: u8) -> Vec<u8> {
        let doff = 20 + opts.len();
        let mut p = vec![0u8; 20 + doff];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + doff) as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[198, 18, 0, 2]);
        p[16..20].copy_from_slice(&[198, 19, 0, 9]);
        let t = &mut p[20..];
        t[0..4].copy_from_slice(&[0x30, 0x39, 0x00, 0x50]);
        t[12] = ((doff / 4) as u8) << 4;
        t[13] = flags;
        t[20..].copy_from_slice(opts);
        let mut c = checksum::pseudo_header_v4(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 19, 0, 9), 6, doff as u16);
        c.add_bytes(&p[20..]);
        let v = c.finish();
        p[36..38].copy_from_slice(&v.to_be_bytes());
        p
    }

    fn tcp_ok(p: &[u8]) -> bool {
        let mut c = checksum::pseudo_header_v4(Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 19, 0, 9), 6, (p.len() - 20) as u16);
        c.add_bytes(&p[20..]);
        c.fold() == 0xffff
    }

    #[test]
    fn a_larger_mss_is_lowered_with_a_valid_checksum_at_either_alignment() {
        // MSS first (even offset), and after one NOP (odd offset).
        for opts in [&[2u8, 4, 0x05, 0xb4, 1, 1, 1, 0][..], &[1, 2, 4, 0x05, 0xb4, 1, 1, 0][..]] {
            for flags in [0x02, 0x12] {
                let mut p = syn(opts, flags);
                assert!(clamp_syn_mss(&mut p, 1400, false));
                let at = 40 + opts.iter().position(|&b| b == 2).unwrap();
                assert_eq!(u16::from_be_bytes([p[at + 2], p[at + 3]]), 1360);
                assert!(tcp_ok(&p), "{opts:?}");
            }
        }
    }

    #[test]
    fn smaller_mss_non_syn_and_odd_packets_are_left_alone() {
        let mut p = syn(&[2, 4, 0x04, 0x00], 0x02);
        let before = p.clone();
        assert!(!clamp_syn_mss(&mut p, 1400, false), "1024 is below the clamp");
        let mut ack = syn(&[2, 4, 0x05, 0xb4], 0x10);
        assert!(!clamp_syn_mss(&mut ack, 1400, false));
        let mut bad = syn(&[2, 9, 0x05, 0xb4], 0x02);
        assert!(!clamp_syn_mss(&mut bad, 1400, false), "option length past the header");
        let mut frag = syn(&[2, 4, 0x05, 0xb4], 0x02);
        frag[7] = 1;
        assert!(!clamp_syn_mss(&mut frag, 1400, false));
        assert_eq!(p, before);
        for n in 0..p.len() {
            clamp_syn_mss(&mut p.clone()[..n], 1400, false);
        }
    }

    #[test]
    fn a_partial_checksum_is_not_touched() {
        let mut p = syn(&[2, 4, 0x05, 0xb4], 0x02);
        let field = [p[36], p[37]];
        assert!(clamp_syn_mss(&mut p, 1400, true));
        assert_eq!([p[36], p[37]], field);
    }
}
