//! Security associations: what an SA is (spec), its expanded keys, and its sequence
//! and lifetime state. Sans-IO: the packet path asks [`Outbound::next`] for a sequence
//! number (or reserves a vector's with [`Outbound::reserve`]) and [`Inbound`] to check and record one; time is not involved (lifetimes are
//! counted in packets and bytes).
//!
//! **Sharing between workers.** Packets enter a tunnel on whichever worker received
//! them, so the outbound counter is one `AtomicU64` per SA (a relaxed `fetch_add`:
//! numbers are unique, which is what GCM's nonce needs; their order on the wire across
//! workers is the receiver's window's business). The encrypt nodes reserve a vector's
//! numbers for an SA with one add ([`Outbound::reserve`]): two workers' packets of one
//! SA then reach the wire in blocks of at most a vector, as they did one number at a
//! time (each worker sends its vector in one burst). It lives outside the tables, so a
//! republished table version keeps counting where the last one stopped. Inbound, the
//! replay window is per worker: RSS hashes the outer addresses (and, for ESP in UDP,
//! the fixed ports), which are the same for every packet of an SA, so one SA's packets
//! all reach one worker.

use crate::crypto::{Algorithm, KeyError, Transform};
use crate::replay::{ReplayError, ReplayWindow};
use ip::outer::tos::Dscp;
use ip::outer::MtuPolicy;
use ip::urpf::Urpf;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Soft and hard limits in packets and bytes (0: none). Soft: counted and reported
/// (an IKE daemon would rekey); hard: the SA stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Lifetime {
    pub soft_packets: u64,
    pub hard_packets: u64,
    pub soft_bytes: u64,
    pub hard_bytes: u64,
}

/// Where an SA stands against its lifetime after a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Age {
    Fresh,
    /// This packet crossed a soft limit (reported once per limit).
    SoftReached,
    /// Past a hard limit: the packet is dropped.
    Expired,
}

impl Lifetime {
    /// The age after `packets` packets and `bytes` bytes, `len` of them this packet.
    #[inline(always)]
    pub fn age(&self, packets: u64, bytes: u64, len: u64) -> Age {
        let over = |limit: u64, v: u64| limit != 0 && v > limit;
        if over(self.hard_packets, packets) || over(self.hard_bytes, bytes) {
            return Age::Expired;
        }
        let crossed = |limit: u64, v: u64, step: u64| limit != 0 && v > limit && v - step <= limit;
        if crossed(self.soft_packets, packets, 1) || crossed(self.soft_bytes, bytes, len) {
            return Age::SoftReached;
        }
        Age::Fresh
    }

    pub fn checked(self) -> Result<Lifetime, (&'static str, String)> {
        for (name, soft, hard) in [("soft_packets", self.soft_packets, self.hard_packets), ("soft_bytes", self.soft_bytes, self.hard_bytes)]
        {
            if soft != 0 && hard != 0 && soft > hard {
                return Err((name, format!("{soft}: expected at most the hard limit {hard}")));
            }
        }
        Ok(self)
    }
}

/// Direction of an SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Inbound,
    Outbound,
}

/// UDP encapsulation ports (RFC 3948): source and destination, both 4500 by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UdpEncapPorts {
    pub src: u16,
    pub dst: u16,
}

impl Default for UdpEncapPorts {
    fn default() -> Self {
        UdpEncapPorts { src: wire::esp::UDP_PORT, dst: wire::esp::UDP_PORT }
    }
}

/// What an SA's ESP wraps (RFC 4303 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The whole packet, behind a new outer header between the SA's endpoints.
    #[default]
    Tunnel,
    /// The packet's payload: ESP goes between its own IP header and its upper layer,
    /// so the SA's endpoints are the packet's own source and destination.
    Transport,
}

/// An SA as configured.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SaSpec {
    pub spi: u32,
    pub direction: Direction,
    #[serde(default)]
    pub mode: Mode,
    pub alg: Algorithm,
    /// For the AEADs the key then the 4-byte salt (RFC 4106 §8.1, RFC 7634 §4).
    #[serde(skip_serializing)]
    pub enc_key: Vec<u8>,
    #[serde(skip_serializing)]
    pub integ_key: Vec<u8>,
    pub esn: bool,
    /// Inbound: refuse replayed and too-old sequence numbers (RFC 4303 §3.4.3; the
    /// receiver may turn it off, as for a benchmark that resends one packet).
    pub anti_replay: bool,
    pub lifetime: Lifetime,
    /// Tunnel endpoints: our address and the peer's (the outer header's source and
    /// destination outbound; destination and source inbound). Same family.
    pub local: IpAddr,
    pub remote: IpAddr,
    pub udp_encap: Option<UdpEncapPorts>,
    /// Inbound tunnel mode: the reverse-path check of each decrypted packet's source
    /// (strict: its route back goes into an ESP tunnel to this SA's peer).
    #[serde(default)]
    pub urpf: Urpf,
    /// Outbound: the inner MTU cap, fragmentation policy and MSS clamping, as for every
    /// tunnel (`ip::outer`). A router's frag-needed about the SA's ESP is learned too
    /// ([`crate::pmtu`]); a cap still fits a path whose routers send none.
    #[serde(default)]
    pub mtu: MtuPolicy,
    /// Outbound tunnel mode: the outer header's DSCP, the inner packet's (the default)
    /// or the SA's own (RFC 4301 §5.1.2.1: copied from the inner header, or set per SA);
    /// the ECN field is the inner packet's either way (RFC 6040). `ip::outer::tos`.
    #[serde(default)]
    pub dscp: Dscp,
}

impl std::fmt::Debug for SaSpec {
    /// Keys never appear in debug output or logs.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("SaSpec")
            .field("spi", &format_args!("{:#x}", self.spi))
            .field("direction", &self.direction)
            .field("mode", &self.mode)
            .field("alg", &self.alg)
            .field("esn", &self.esn)
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("udp_encap", &self.udp_encap)
            .field("urpf", &self.urpf)
            .field("mtu", &self.mtu)
            .field("dscp", &self.dscp)
            .finish_non_exhaustive()
    }
}

/// Why an SA spec was refused: the field and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SaSpecError {
    pub field: &'static str,
    pub message: String,
}

impl SaSpec {
    /// The UDP port of the gateway's addresses this SA receives ESP in UDP on, if it
    /// does (an inbound SA with `udp_encap`).
    pub fn udp_receive_port(&self) -> Option<u16> {
        self.udp_encap.filter(|_| self.direction == Direction::Inbound).map(|p| p.dst)
    }

    /// Check everything but the keys' randomness; expand the keys.
    pub fn build(&self, iv_seed: [u8; 16]) -> Result<Transform, SaSpecError> {
        let err = |field, message| SaSpecError { field, message };
        if self.spi < 256 {
            return Err(err("spi", format!("{}: expected 256 or more (0-255 are reserved, RFC 4303 §2.1)", self.spi)));
        }
        if self.local.is_ipv4() != self.remote.is_ipv4() {
            return Err(err("remote", format!("{}: expected the same address family as local {}", self.remote, self.local)));
        }
        self.lifetime.checked().map_err(|(f, m)| err(f, m))?;
        self.check_urpf()?;
        self.check_dscp()?;
        if self.direction == Direction::Inbound && self.mtu != MtuPolicy::default() {
            let field = match self.mtu {
                MtuPolicy { mtu: 1.., .. } => "mtu",
                MtuPolicy { mss_clamp: true, .. } => "tcp_mss_clamp",
                _ => "fragment",
            };
            return Err(err(field, "expected on an outbound SA only: it shapes what enters the tunnel".into()));
        }
        Transform::new(self.alg, &self.enc_key, &self.integ_key, iv_seed).map_err(|e| match e {
            KeyError::EncKeyLen { .. } => err("enc_key", e.to_string()),
            KeyError::IntegKeyLen { .. } => err("integ_key", e.to_string()),
        })
    }

    /// uRPF is for inbound tunnel-mode SAs: outbound SAs receive nothing, and a
    /// transport-mode packet's source is the peer itself, which the SA's addresses pin.
    pub fn check_urpf(&self) -> Result<(), SaSpecError> {
        if self.urpf != Urpf::Off && (self.direction != Direction::Inbound || self.mode != Mode::Tunnel) {
            let message = format!("{}: expected off except on an inbound tunnel-mode SA", self.urpf);
            return Err(SaSpecError { field: "urpf", message });
        }
        Ok(())
    }

    /// A DSCP of the SA's own is for an outbound tunnel-mode SA, the one that writes an
    /// outer header: a transport-mode SA's packets keep their own header, whose DSCP is
    /// their sender's, and an inbound SA writes no header (its inner packets keep
    /// theirs, as RFC 4301 §5.1.2.1 has it by default).
    pub fn check_dscp(&self) -> Result<(), SaSpecError> {
        if self.dscp == Dscp::Inherit {
            return Ok(());
        }
        let why = match (self.direction, self.mode) {
            (Direction::Outbound, Mode::Tunnel) => return Ok(()),
            (Direction::Inbound, _) => "an inbound SA writes no outer header",
            (Direction::Outbound, Mode::Transport) => "a transport-mode SA's packets keep their own header and its DSCP",
        };
        let message = format!("{}: expected \"inherit\" except on an outbound tunnel-mode SA ({why})", self.dscp);
        Err(SaSpecError { field: "dscp", message })
    }

    /// Bytes the outer headers add before ESP: IP (in tunnel mode), and UDP when
    /// encapsulated.
    pub fn outer_len(&self) -> usize {
        let ip = match (self.mode, self.local.is_ipv4()) {
            (Mode::Transport, _) => 0,
            (Mode::Tunnel, true) => 20,
            (Mode::Tunnel, false) => 40,
        };
        ip + if self.udp_encap.is_some() { 8 } else { 0 }
    }
}

/// Why an outbound SA gives no sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqError {
    /// The counter reached its end (2^32 - 1 without ESN, RFC 4303 §3.3.3): the SA must
    /// be replaced, never wrapped.
    Overflow,
    /// A hard lifetime passed.
    Expired,
}

/// The outbound counters of an SA, shared by every worker and every table version.
#[derive(Debug, Default)]
pub struct Outbound {
    /// The last sequence number handed out (a refused packet takes one too, so the
    /// lifetime's limits keep refusing every later packet).
    seq: AtomicU64,
    /// The bytes of every packet that took a sequence number.
    bytes: AtomicU64,
    /// Of those, the packets refused (hard lifetime, the counter's end) and their bytes:
    /// counted on the refusal's path only, so the packet path keeps its two atomics, and
    /// taken off what [`Outbound::packets`] and [`Outbound::bytes`] report as sent.
    refused: AtomicU64,
    refused_bytes: AtomicU64,
    /// Numbers a vector reserved ([`Outbound::reserve`]) for packets that went elsewhere
    /// before taking one (an ICMP error, the other family's node): gaps on the wire, not
    /// packets sent.
    skipped: AtomicU64,
    /// The path MTU a router reported about this SA's ESP packets ([`crate::pmtu`]),
    /// with when: `seconds << 16 | mtu`, 0 for none. One word, so a worker never reads
    /// one report's MTU with another's time; the encrypt nodes load it once per SA per
    /// vector, the ICMP path stores it.
    path_mtu: AtomicU64,
}

/// Sequence numbers reserved for a vector's packets of one SA ([`Outbound::reserve`]):
/// the next one, how many are left, and the bytes counted against the SA's lifetime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    next: u64,
    /// Numbers left to hand out (none past the 64-bit counter's end).
    left: u64,
    /// The SA's byte count when reserved.
    bytes_before: u64,
    /// Bytes of the packets given numbers since (refused ones too: their refusal takes
    /// them off again, as on the one-number path).
    bytes: u64,
}

impl Reserved {
    /// Numbers not handed out yet.
    pub fn left(&self) -> u64 {
        self.left
    }
}

/// How long a learned path MTU holds (RFC 1191 §6.3 suggests 10 minutes): after that
/// the SA sends at its link MTU again, so a path that grew back is found (a router's
/// next report lowers it again at once).
pub const PATH_MTU_AGE_SECS: u64 = 600;

/// A path MTU an SA learned and how long ago.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LearnedMtu {
    pub mtu: u16,
    pub age_secs: u64,
}

/// Seconds on the dataplane's clock (the time-stamp counter): what a learned path
/// MTU's age is counted in.
#[inline]
pub fn clock_secs() -> u64 {
    engine::clock::now() / engine::clock::hz().max(1)
}

impl Outbound {
    /// Start after `seq` (a test, or a restored SA).
    pub fn starting_after(seq: u64) -> Self {
        Outbound { seq: AtomicU64::new(seq), ..Default::default() }
    }

    /// The sequence number for a packet of `len` bytes, and the SA's age.
    #[inline(always)]
    pub fn next(&self, len: u64, esn: bool, life: &Lifetime) -> Result<(u64, Age), SeqError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let last = if esn { u64::MAX } else { u32::MAX as u64 };
        if seq > last || seq == 0 {
            return Err(self.past_the_end(seq, len));
        }
        let bytes = self.bytes.fetch_add(len, Ordering::Relaxed) + len;
        match life.age(seq, bytes, len) {
            Age::Expired => Err(self.refuse(len, SeqError::Expired)),
            age => Ok((seq, age)),
        }
    }

    /// A number past the counter's end (`seq`): every later packet is refused too.
    #[cold]
    fn past_the_end(&self, seq: u64, len: u64) -> SeqError {
        if seq == 0 {
            // With ESN the counter itself wrapped: it stays at the end (the last number
            // was sent, so this refusal is the only one not in the count).
            self.seq.store(u64::MAX, Ordering::Relaxed);
            return SeqError::Overflow;
        }
        self.bytes.fetch_add(len, Ordering::Relaxed);
        self.refuse(len, SeqError::Overflow)
    }

    #[cold]
    fn refuse(&self, len: u64, why: SeqError) -> SeqError {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.refused_bytes.fetch_add(len, Ordering::Relaxed);
        why
    }

    /// Reserve the next `n` (at least 1) sequence numbers for one vector's packets of
    /// this SA with one atomic add: a locked add a packet cost ~17 TSC cycles on the Xeon
    /// and held the stores around it back (docs/PERFORMANCE.md, "esp4-encrypt: sequence
    /// numbers a vector at a time"). The numbers are handed out by [`Outbound::take`];
    /// [`Outbound::settle`] ends the reservation.
    #[inline]
    pub fn reserve(&self, n: u64) -> Reserved {
        let n = n.max(1);
        let old = self.seq.fetch_add(n, Ordering::Relaxed);
        if old.checked_add(n).is_none() {
            // With ESN the counter wrapped: it stays at its end, as in `past_the_end`
            // (the numbers past it are refused by `take`).
            self.seq.store(u64::MAX, Ordering::Relaxed);
        }
        // Only the numbers up to the counter's end are handed out.
        let left = n.min(u64::MAX - old);
        Reserved { next: old.wrapping_add(1), left, bytes_before: self.bytes.load(Ordering::Relaxed), bytes: 0 }
    }

    /// The next reserved sequence number, for a packet of `len` bytes, and the SA's age
    /// (its bytes: the count when reserved and this reservation's since; a worker does
    /// not see another's bytes of the same vector time, so with several workers on one
    /// SA a hard byte limit can be passed by at most a vector's bytes each). Asks for
    /// one more number with an atomic add of its own if the reservation ran out.
    #[inline(always)]
    pub fn take(&self, r: &mut Reserved, len: u64, esn: bool, life: &Lifetime) -> Result<(u64, Age), SeqError> {
        if r.left == 0 {
            self.settle(r);
            *r = self.reserve(1);
            if r.left == 0 {
                // Past the 64-bit counter's end: as in `past_the_end`, not in the counts.
                return Err(SeqError::Overflow);
            }
        }
        let seq = r.next;
        r.next = seq.wrapping_add(1);
        r.left -= 1;
        r.bytes += len;
        if !esn && seq > u32::MAX as u64 {
            return Err(self.refuse(len, SeqError::Overflow));
        }
        match life.age(seq, r.bytes_before + r.bytes, len) {
            Age::Expired => Err(self.refuse(len, SeqError::Expired)),
            age => Ok((seq, age)),
        }
    }

    /// End reservation `r`: its bytes join the SA's count, the numbers it did not hand
    /// out are counted skipped. `r` is empty after.
    #[inline]
    pub fn settle(&self, r: &mut Reserved) {
        if r.bytes != 0 {
            self.bytes.fetch_add(r.bytes, Ordering::Relaxed);
        }
        if r.left != 0 {
            self.skipped.fetch_add(r.left, Ordering::Relaxed);
        }
        *r = Reserved::default();
    }

    /// Packets sent (sealed with a sequence number): refused ones are not, nor numbers a
    /// reservation skipped.
    pub fn packets(&self) -> u64 {
        self.seq
            .load(Ordering::Relaxed)
            .saturating_sub(self.refused.load(Ordering::Relaxed))
            .saturating_sub(self.skipped.load(Ordering::Relaxed))
    }

    /// Bytes sent (the inner packets', as the lifetime counts them).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed).saturating_sub(self.refused_bytes.load(Ordering::Relaxed))
    }

    /// Take `mtu` as the SA's path MTU at time `now` (seconds, [`clock_secs`]) unless it
    /// is above the one learned and still young (RFC 1191 §6.3: increases are not
    /// believed; the value ages out instead). A report of the same or a lower MTU
    /// renews the age. True if taken.
    pub fn learn_path_mtu(&self, mtu: u16, now: u64) -> bool {
        let new = now << 16 | mtu as u64;
        let mut cur = self.path_mtu.load(Ordering::Relaxed);
        loop {
            if Self::live(cur, now).is_some_and(|m| mtu > m) {
                return false;
            }
            match self.path_mtu.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
    }

    /// The learned path MTU of word `v` if it is younger than [`PATH_MTU_AGE_SECS`].
    #[inline(always)]
    fn live(v: u64, now: u64) -> Option<u16> {
        let (mtu, at) = (v as u16, v >> 16);
        (mtu != 0 && now.saturating_sub(at) < PATH_MTU_AGE_SECS).then_some(mtu)
    }

    /// The path MTU in force: learned, and not aged out. The clock is read only when
    /// there is one (most SAs never learn any).
    #[inline(always)]
    pub fn path_mtu(&self) -> Option<u16> {
        match self.path_mtu.load(Ordering::Relaxed) {
            0 => None,
            v => Self::live(v, clock_secs()),
        }
    }

    /// [`Outbound::path_mtu`] at time `now`, with its age (for `show ipsec sa`).
    pub fn learned_mtu(&self, now: u64) -> Option<LearnedMtu> {
        let v = self.path_mtu.load(Ordering::Relaxed);
        Self::live(v, now).map(|mtu| LearnedMtu { mtu, age_secs: now.saturating_sub(v >> 16) })
    }

    /// Forget the learned path MTU (the SA moved to other endpoints: another path).
    pub fn forget_path_mtu(&self) {
        self.path_mtu.store(0, Ordering::Relaxed);
    }

    /// Whether the SA refuses every packet from now on: it refused one for a hard
    /// lifetime, or its sequence numbers ran out.
    pub fn expired(&self) -> bool {
        self.refused.load(Ordering::Relaxed) != 0 || self.seq.load(Ordering::Relaxed) == u64::MAX
    }
}

/// Why an inbound packet is refused by the SA's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundError {
    Replay(ReplayError),
    Expired,
}

/// An inbound SA's state on one worker: replay window and lifetime counts.
#[derive(Debug, Clone)]
pub struct Inbound {
    pub window: ReplayWindow,
    pub packets: u64,
    pub bytes: u64,
    /// A packet was refused for a hard lifetime. The counts alone cannot say so: the
    /// packet that would pass the byte limit is refused uncounted, so they may stop
    /// short of it.
    pub expired: bool,
}

impl Inbound {
    pub fn new(esn: bool) -> Self {
        Inbound { window: ReplayWindow::new(esn), packets: 0, bytes: 0, expired: false }
    }

    /// After the ICV verified: record the number (when `anti_replay`) and count the
    /// packet against the lifetime.
    #[inline(always)]
    pub fn accept(&mut self, seq: u64, len: u64, life: &Lifetime, anti_replay: bool) -> Result<Age, InboundError> {
        let age = life.age(self.packets + 1, self.bytes + len, len);
        // Once expired, every packet is refused: a smaller one would fit under the byte
        // limit the refused one passed, but a hard lifetime ends the SA (RFC 4301 §4.4.2.1).
        if age == Age::Expired || self.expired {
            self.expired = true;
            return Err(InboundError::Expired);
        }
        if anti_replay {
            self.window.accept(seq).map_err(InboundError::Replay)?;
        }
        self.packets += 1;
        self.bytes += len;
        Ok(age)
    }
}

/// An SA in the published tables: its spec (without the keys' bytes mattering to
/// the packet path), its expanded keys and its shared outbound state. Cloning shares
/// the keys and the counters.
#[derive(Debug, Clone)]
pub struct Sa {
    pub spec: Arc<SaSpec>,
    pub transform: Arc<Transform>,
    pub outbound: Arc<Outbound>,
    /// Tunnel mode: the outer IP header for an empty payload
    /// ([`crate::nodes::outer_template`]).
    pub outer_header: [u8; crate::nodes::OUTER_TEMPLATE_LEN],
    /// The encrypt nodes' constants for this SA, from its spec.
    pub plan: crate::nodes::encrypt::EncryptPlan,
}

impl Sa {
    pub fn new(spec: SaSpec, iv_seed: [u8; 16]) -> Result<Sa, SaSpecError> {
        let transform = spec.build(iv_seed)?;
        let outer_header = crate::nodes::outer_template(&spec);
        let plan = crate::nodes::encrypt::EncryptPlan::new(&spec);
        Ok(Sa { spec: Arc::new(spec), transform: Arc::new(transform), outbound: Arc::new(Outbound::default()), outer_header, plan })
    }
}

/// The SA the crate's tests start from: outbound, tunnel mode, NULL, no keys, no
/// lifetime, ESP in UDP with `udp`; a test changes what it is about.
#[cfg(test)]
pub(crate) fn test_spec(local: IpAddr, remote: IpAddr, udp: bool) -> SaSpec {
    SaSpec {
        spi: 0x1000,
        direction: Direction::Outbound,
        mode: Mode::Tunnel,
        alg: crate::crypto::Algorithm::Null,
        enc_key: vec![],
        integ_key: vec![],
        esn: false,
        anti_replay: false,
        lifetime: Lifetime::default(),
        local,
        remote,
        udp_encap: udp.then(UdpEncapPorts::default),
        urpf: ip::urpf::Urpf::Off,
        mtu: Default::default(),
        dscp: Dscp::Inherit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_soft_once_then_hard() {
        let l = Lifetime { soft_packets: 2, hard_packets: 3, ..Default::default() };
        let o = Outbound::default();
        let ages: Vec<_> = (0..5).map(|_| o.next(100, false, &l)).collect();
        assert_eq!(
            ages,
            vec![Ok((1, Age::Fresh)), Ok((2, Age::Fresh)), Ok((3, Age::SoftReached)), Err(SeqError::Expired), Err(SeqError::Expired)]
        );
        let b = Lifetime { soft_bytes: 250, hard_bytes: 400, ..Default::default() };
        let o = Outbound::default();
        let ages: Vec<_> = (0..5).map(|_| o.next(100, false, &b).map(|x| x.1)).collect();
        assert_eq!(ages, vec![Ok(Age::Fresh), Ok(Age::Fresh), Ok(Age::SoftReached), Ok(Age::Fresh), Err(SeqError::Expired)]);
    }

    /// What an SA reports as sent leaves out the packets its lifetime or counter
    /// refused (they were dropped), and once it refused one it refuses every later one,
    /// a smaller packet that would fit under the byte limit too.
    #[test]
    fn refused_packets_are_not_counted_as_sent() {
        let l = Lifetime { hard_packets: 3, ..Default::default() };
        let o = Outbound::default();
        let sent = (0..5).filter(|_| o.next(100, false, &l).is_ok()).count();
        assert_eq!((sent, o.packets(), o.bytes(), o.expired()), (3, 3, 300, true));
        let b = Lifetime { hard_bytes: 250, ..Default::default() };
        let o = Outbound::default();
        assert!(o.next(100, false, &b).is_ok() && o.next(100, false, &b).is_ok());
        assert!(!o.expired());
        assert_eq!(o.next(100, false, &b), Err(SeqError::Expired));
        assert_eq!(o.next(10, false, &b), Err(SeqError::Expired), "stopped for good");
        assert_eq!((o.packets(), o.bytes(), o.expired()), (2, 200, true));
        // Past the counter's end (no ESN): the numbers sent, not the attempts.
        let o = Outbound::starting_after(u32::MAX as u64 - 2);
        let n = (0..5).filter(|_| o.next(10, false, &Lifetime::default()).is_ok()).count();
        assert_eq!((n, o.packets(), o.bytes(), o.expired()), (2, u32::MAX as u64, 20, true));
        // Inbound: refused for the byte limit, then a smaller packet: refused too.
        let mut i = Inbound::new(false);
        assert_eq!(i.accept(1, 200, &b, true), Ok(Age::Fresh));
        assert_eq!(i.accept(2, 100, &b, true), Err(InboundError::Expired));
        assert_eq!(i.accept(3, 10, &b, true), Err(InboundError::Expired));
        assert_eq!((i.packets, i.bytes), (1, 200));
    }

    #[test]
    fn the_counter_stops_at_its_end_and_never_wraps() {
        let l = Lifetime::default();
        let o = Outbound::starting_after(u32::MAX as u64 - 1);
        assert_eq!(o.next(1, false, &l), Ok((u32::MAX as u64, Age::Fresh)));
        assert_eq!(o.next(1, false, &l), Err(SeqError::Overflow));
        assert_eq!(o.next(1, false, &l), Err(SeqError::Overflow), "and stays stopped");
        // With ESN the same number moves on to the next 2^32 epoch.
        let o = Outbound::starting_after(u32::MAX as u64);
        assert_eq!(o.next(1, true, &l), Ok((1 << 32, Age::Fresh)));
        let o = Outbound::starting_after(u64::MAX - 1);
        assert_eq!(o.next(1, true, &l), Ok((u64::MAX, Age::Fresh)));
        assert_eq!(o.next(1, true, &l), Err(SeqError::Overflow));
        assert_eq!(o.next(1, true, &l), Err(SeqError::Overflow));
    }

    #[test]
    fn workers_never_share_a_sequence_number() {
        let o = Arc::new(Outbound::default());
        let l = Lifetime::default();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let o = Arc::clone(&o);
                std::thread::spawn(move || (0..10_000).map(|_| o.next(64, false, &l).unwrap().0).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, (1..=40_000).collect::<Vec<_>>());
        assert_eq!(o.bytes(), 40_000 * 64);
    }

    /// Numbers reserved a vector at a time (`reserve`, `take`, `settle`) are the same as
    /// one at a time: unique across workers, lifetimes counted over every worker's
    /// settled bytes, and what a reservation did not hand out is neither sent nor lost
    /// (the next reservation starts after it).
    #[test]
    fn reserved_numbers_are_unique_counted_and_skipped() {
        let l = Lifetime::default();
        let o = Outbound::default();
        let mut r = o.reserve(4);
        assert_eq!(o.take(&mut r, 10, false, &l), Ok((1, Age::Fresh)));
        assert_eq!(o.take(&mut r, 20, false, &l), Ok((2, Age::Fresh)));
        assert_eq!((r.left(), o.bytes()), (2, 0), "the bytes join the count when settled");
        o.settle(&mut r);
        assert_eq!((r.left(), o.packets(), o.bytes()), (0, 2, 30));
        // One at a time after: after the skipped 3 and 4.
        assert_eq!(o.next(5, false, &l), Ok((5, Age::Fresh)));
        // A spent reservation takes one more number by itself.
        let mut r = o.reserve(1);
        assert_eq!(o.take(&mut r, 1, false, &l), Ok((6, Age::Fresh)));
        assert_eq!(o.take(&mut r, 1, false, &l), Ok((7, Age::Fresh)));
        o.settle(&mut r);
        assert_eq!((o.packets(), o.bytes()), (5, 37));

        // Lifetimes: soft once, then hard, over the bytes settled before and taken since.
        let b = Lifetime { soft_bytes: 250, hard_bytes: 400, ..Default::default() };
        let o = Outbound::default();
        let mut r = o.reserve(2);
        assert!(o.take(&mut r, 100, false, &b).is_ok() && o.take(&mut r, 100, false, &b).is_ok());
        o.settle(&mut r);
        let mut r = o.reserve(3);
        let ages: Vec<_> = (0..3).map(|_| o.take(&mut r, 100, false, &b).map(|x| x.1)).collect();
        assert_eq!(ages, vec![Ok(Age::SoftReached), Ok(Age::Fresh), Err(SeqError::Expired)]);
        o.settle(&mut r);
        assert_eq!((o.packets(), o.bytes(), o.expired()), (4, 400, true));
        let p = Lifetime { hard_packets: 3, ..Default::default() };
        let o = Outbound::default();
        let mut r = o.reserve(5);
        let ok = (0..5).filter(|_| o.take(&mut r, 10, false, &p).is_ok()).count();
        o.settle(&mut r);
        assert_eq!((ok, o.packets(), o.bytes()), (3, 3, 30));

        // The counter's end: without ESN at 2^32 - 1, refused after; with ESN at 2^64 - 1.
        let o = Outbound::starting_after(u32::MAX as u64 - 2);
        let mut r = o.reserve(4);
        let got: Vec<_> = (0..4).map(|_| o.take(&mut r, 10, false, &l).map(|x| x.0)).collect();
        let end = u32::MAX as u64;
        assert_eq!(got, vec![Ok(end - 1), Ok(end), Err(SeqError::Overflow), Err(SeqError::Overflow)]);
        o.settle(&mut r);
        assert_eq!((o.packets(), o.bytes(), o.expired()), (end, 20, true));
        let o = Outbound::starting_after(u64::MAX - 1);
        let mut r = o.reserve(3);
        let got: Vec<_> = (0..3).map(|_| o.take(&mut r, 10, true, &l).map(|x| x.0)).collect();
        assert_eq!(got, vec![Ok(u64::MAX), Err(SeqError::Overflow), Err(SeqError::Overflow)]);
        o.settle(&mut r);
        assert!(o.expired());
        assert_eq!(o.next(1, true, &l), Err(SeqError::Overflow), "and stays stopped");

        // Workers reserving blocks of varying size never share a number.
        let o = Arc::new(Outbound::default());
        let handles: Vec<_> = (0..4u64)
            .map(|w| {
                let o = Arc::clone(&o);
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for v in 0..2_000u64 {
                        let mut r = o.reserve(1 + (v + w) % 7);
                        for _ in 0..(v + w) % 7 {
                            got.push(o.take(&mut r, 64, false, &l).unwrap().0);
                        }
                        o.settle(&mut r);
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let n = all.len() as u64;
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len() as u64, n, "no number twice");
        assert_eq!((o.packets(), o.bytes()), (n, n * 64));
    }

    #[test]
    fn inbound_counts_only_what_it_accepts() {
        let l = Lifetime { hard_packets: 2, ..Default::default() };
        let mut i = Inbound::new(false);
        assert_eq!(i.accept(1, 10, &l, true), Ok(Age::Fresh));
        assert_eq!(i.accept(1, 10, &l, true), Err(InboundError::Replay(ReplayError::Replayed)));
        assert_eq!(i.accept(2, 10, &l, true), Ok(Age::Fresh));
        assert!(!i.expired);
        assert_eq!(i.accept(3, 10, &l, true), Err(InboundError::Expired));
        assert_eq!((i.packets, i.bytes, i.expired), (2, 20, true));
        // A byte limit: the packet that would pass it is refused uncounted, so the
        // count stays short of the limit, and the flag tells.
        let l = Lifetime { hard_bytes: 25, ..Default::default() };
        let mut k = Inbound::new(false);
        assert_eq!(k.accept(1, 20, &l, true), Ok(Age::Fresh));
        assert_eq!(k.accept(2, 20, &l, true), Err(InboundError::Expired));
        assert_eq!((k.bytes, k.expired), (20, true));
        // Without anti-replay the same number is taken again.
        let mut j = Inbound::new(false);
        assert_eq!(j.accept(1, 10, &Lifetime::default(), false), Ok(Age::Fresh));
        assert_eq!(j.accept(1, 10, &Lifetime::default(), false), Ok(Age::Fresh));
    }

    fn spec() -> SaSpec {
        SaSpec {
            spi: 0x1000,
            direction: Direction::Outbound,
            mode: Mode::Tunnel,
            alg: Algorithm::AesGcm128,
            enc_key: vec![7; 20],
            integ_key: vec![],
            esn: false,
            anti_replay: true,
            lifetime: Lifetime::default(),
            local: "198.18.1.1".parse().unwrap(),
            remote: "198.18.1.2".parse().unwrap(),
            udp_encap: None,
            urpf: Urpf::Off,
            mtu: MtuPolicy::default(),
            dscp: Dscp::Inherit,
        }
    }

    #[test]
    fn bad_specs_name_their_field() {
        assert!(Sa::new(spec(), [0; 16]).is_ok());
        let field = |s: SaSpec| Sa::new(s, [0; 16]).unwrap_err().field;
        assert_eq!(field(SaSpec { spi: 255, ..spec() }), "spi");
        assert_eq!(field(SaSpec { remote: "2001:db8::1".parse().unwrap(), ..spec() }), "remote");
        assert_eq!(field(SaSpec { enc_key: vec![1; 16], ..spec() }), "enc_key");
        assert_eq!(field(SaSpec { alg: Algorithm::AesCbcSha256, enc_key: vec![1; 16], ..spec() }), "integ_key");
        assert_eq!(field(SaSpec { lifetime: Lifetime { soft_bytes: 9, hard_bytes: 8, ..Default::default() }, ..spec() }), "soft_bytes");
        let capped = MtuPolicy { mtu: 1400, ..Default::default() };
        assert!(Sa::new(SaSpec { mtu: capped, ..spec() }, [0; 16]).is_ok());
        assert_eq!(field(SaSpec { direction: Direction::Inbound, mtu: capped, ..spec() }), "mtu");
    }

    /// A DSCP of the SA's own only where the SA writes an outer header (outbound tunnel
    /// mode); "inherit" everywhere; the error names the field and says why.
    #[test]
    fn an_own_dscp_only_on_an_outbound_tunnel_sa() {
        let fixed = Dscp::Fixed(46);
        assert!(Sa::new(SaSpec { dscp: fixed, ..spec() }, [0; 16]).is_ok());
        for (direction, mode) in
            [(Direction::Outbound, Mode::Transport), (Direction::Inbound, Mode::Tunnel), (Direction::Inbound, Mode::Transport)]
        {
            assert!(Sa::new(SaSpec { direction, mode, ..spec() }, [0; 16]).is_ok(), "inherit is every SA's");
            let e = Sa::new(SaSpec { direction, mode, dscp: fixed, ..spec() }, [0; 16]).unwrap_err();
            assert_eq!(e.field, "dscp", "{direction:?} {mode:?}");
            assert!(e.message.starts_with("46: expected \"inherit\" except on an outbound tunnel-mode SA"), "{e}");
        }
        let e = SaSpec { mode: Mode::Transport, dscp: fixed, ..spec() }.check_dscp().unwrap_err();
        assert!(e.message.contains("keep their own header"), "{e}");
    }

    #[test]
    fn keys_never_printed() {
        let s = SaSpec { enc_key: vec![0xab; 20], ..spec() };
        let d = format!("{s:?} {:?}", Sa::new(s.clone(), [0; 16]).unwrap());
        assert!(!d.contains("171") && !d.contains("ab, ab") && !d.to_lowercase().contains("abab"), "{d}");
        let j = serde_json::to_string(&s).unwrap();
        assert!(!j.contains("enc_key") && !j.contains("171"), "{j}");
    }
}
