//! IPsec ESP SAs in the control plane: the one text form of an SA (the config file's
//! `[[ipsec_sa]]`, the JSON API's `ipsec_sa_add`, the CLI's `ipsec sa add`), its
//! conversion to an [`SaSpec`], routes into outbound SAs (`ipsec_tunnel<index>`), and the
//! rows `show ipsec sa` prints. Keys go in and never come back out.

use crate::config::{Config, ConfigError, Problems};
use ip::outer::tos::Dscp;
use ip::outer::{FragmentPolicy, MtuPolicy};
use ip::tables::{TunnelRef, UdpApp, UdpDemux, IPSEC_TUNNEL_IF_PREFIX};
use ip::urpf::Urpf;
use ip::{Prefix, RouteTarget, RouterState};
use ipsec::{Algorithm, Direction, IpsecState, Lifetime, Mode, SaSpec, UdpEncapPorts};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::IpAddr;

/// An SA as text: config, API and CLI all fill this in.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpsecSaConfig {
    /// The SA's index: outbound SA N is interface `ipsec_tunnelN`.
    pub index: u32,
    pub spi: u32,
    /// `inbound` or `outbound`.
    pub direction: Direction,
    /// `tunnel` (the default) or `transport`.
    #[serde(default)]
    pub mode: Mode,
    /// `null`, `null-sha256`, `aes-gcm-128`, `aes-gcm-256`, `chacha20-poly1305`,
    /// `aes-cbc-sha256`.
    pub algorithm: Algorithm,
    /// Hex; for the AEADs the key then the 4-byte salt (as IKEv2 derives it).
    #[serde(default)]
    pub enc_key: String,
    /// Hex (HMAC-SHA-256: 32 bytes).
    #[serde(default)]
    pub integ_key: String,
    /// Our tunnel endpoint and the peer's.
    pub local: String,
    pub remote: String,
    /// ESP in UDP (RFC 3948), ports 4500 unless given.
    #[serde(default)]
    pub udp_encap: bool,
    #[serde(default)]
    pub udp_src_port: Option<u16>,
    #[serde(default)]
    pub udp_dst_port: Option<u16>,
    /// 64-bit extended sequence numbers.
    #[serde(default)]
    pub esn: bool,
    /// Inbound: the anti-replay window (default on).
    #[serde(default = "default_anti_replay")]
    pub anti_replay: bool,
    #[serde(default)]
    pub lifetime: Lifetime,
    /// Routes into the SA's tunnel interface (outbound SAs).
    #[serde(default)]
    pub routes: Vec<String>,
    /// Inbound tunnel mode: `strict` or `loose` checks each decrypted packet's source
    /// (strict: its route back goes into an ESP tunnel to the same peer).
    #[serde(default)]
    pub urpf: Urpf,
    /// Outbound: the inner MTU cap, fragmentation policy and MSS clamping, as for GTP-U
    /// and UDP tunnels (a cap fits the SA to a path narrower than its link).
    #[serde(default)]
    pub mtu: Option<u16>,
    #[serde(default)]
    pub fragment: FragmentPolicy,
    #[serde(default)]
    pub tcp_mss_clamp: bool,
    /// Outbound tunnel mode: the outer DSCP, `"inherit"` (the inner packet's, the
    /// default) or 0 to 63 (the SA's own; RFC 4301 §5.1.2.1). ECN is the inner
    /// packet's either way (RFC 6040).
    #[serde(default)]
    pub dscp: Dscp,
}

impl std::fmt::Debug for IpsecSaConfig {
    /// Keys never appear in debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("IpsecSaConfig")
            .field("index", &self.index)
            .field("spi", &self.spi)
            .field("direction", &self.direction)
            .finish_non_exhaustive()
    }
}

fn default_anti_replay() -> bool {
    true
}

/// A field-named error, for config messages (`ipsec_sa[3].enc_key: …`).
pub type FieldError = (&'static str, String);

fn hex(field: &'static str, s: &str) -> Result<Vec<u8>, FieldError> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    // The value is a key: say what is wrong with it without repeating it.
    if let Some(at) = s.bytes().position(|b| !b.is_ascii_hexdigit()) {
        return Err((field, format!("character {} is not a hex digit: expected hex digits only (0-9, a-f)", at + 1)));
    }
    if !s.len().is_multiple_of(2) {
        return Err((field, format!("expected an even number of hex digits ({} characters given)", s.len())));
    }
    Ok((0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex checked")).collect())
}

impl IpsecSaConfig {
    pub fn to_spec(&self) -> Result<(SaSpec, Vec<Prefix>), FieldError> {
        let addr =
            |field: &'static str, s: &str| s.parse::<IpAddr>().map_err(|_| (field, format!("{s:?}: expected an IPv4 or IPv6 address")));
        let (local, remote) = (addr("local", &self.local)?, addr("remote", &self.remote)?);
        if !self.udp_encap && (self.udp_src_port.is_some() || self.udp_dst_port.is_some()) {
            return Err(("udp_encap", "UDP ports are given: expected udp_encap = true".into()));
        }
        let d = UdpEncapPorts::default();
        let udp_encap =
            self.udp_encap.then(|| UdpEncapPorts { src: self.udp_src_port.unwrap_or(d.src), dst: self.udp_dst_port.unwrap_or(d.dst) });
        if udp_encap.is_some_and(|p| p.src == 0 || p.dst == 0) {
            return Err(("udp_dst_port", "expected 1 to 65535".into()));
        }
        if self.direction == Direction::Inbound && !self.routes.is_empty() {
            return Err(("routes", "routes go into outbound SAs".into()));
        }
        if self.mode == Mode::Transport && !self.routes.is_empty() {
            return Err(("routes", "a transport-mode SA protects what an SPD policy selects: expected no routes".into()));
        }
        let spec = SaSpec {
            spi: self.spi,
            direction: self.direction,
            mode: self.mode,
            alg: self.algorithm,
            enc_key: hex("enc_key", &self.enc_key)?,
            integ_key: hex("integ_key", &self.integ_key)?,
            esn: self.esn,
            anti_replay: self.anti_replay,
            lifetime: self.lifetime,
            local,
            remote,
            udp_encap,
            urpf: self.urpf,
            mtu: MtuPolicy::checked(self.mtu, self.fragment, self.tcp_mss_clamp)?,
            dscp: self.dscp,
        };
        let routes = self
            .routes
            .iter()
            .map(|r| r.parse::<Prefix>().map_err(|e| ("routes", format!("{r:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((spec, routes))
    }

    /// The ESP packet this inbound tunnel-mode SA's peer sends first, carrying the IP
    /// packet `inner` (sequence number 1), sealed with the SA's keys by the dataplane's
    /// own encryption: the SA mirrored (outbound, endpoints swapped). For
    /// packet generators (`protocol = "esp"` streams, `vecgate bench esp4-decrypt`).
    pub fn peer_packet(&self, inner: &[u8]) -> Result<Vec<u8>, FieldError> {
        if self.direction != Direction::Inbound || self.mode != Mode::Tunnel {
            return Err(("direction", "expected an inbound tunnel-mode SA (what its peer sends is generated)".into()));
        }
        let inner_v4 = match inner.first().map(|b| b >> 4) {
            Some(4) => true,
            Some(6) => false,
            _ => return Err(("inner", "expected an IPv4 or IPv6 packet".into())),
        };
        let mut peer = self.clone();
        peer.direction = Direction::Outbound;
        // Endpoints are each end's own (`local` is the sender of an outbound SA's
        // packets); the UDP ports are the packets' already, as an inbound SA gives them.
        std::mem::swap(&mut peer.local, &mut peer.remote);
        // uRPF is an inbound SA's only (refused on an outbound one).
        peer.urpf = Urpf::default();
        let (spec, _) = peer.to_spec()?;
        let v4 = spec.local.is_ipv4();
        let sa = ipsec::Sa::new(spec, [7; 16]).map_err(|e| ("enc_key", e.to_string()))?;
        let (seq, _) = sa.outbound.next(inner.len() as u64, sa.spec.esn, &sa.spec.lifetime).map_err(|e| ("spi", format!("{e:?}")))?;
        let mut pool = engine::Pool::new(1, 0);
        let bi = pool.alloc(inner.len()).ok_or(("inner", "no buffer for the packet".to_string()))?;
        let buf = pool.get_mut(bi);
        buf.write(inner).map_err(|e| ("inner", format!("{e:?}")))?;
        let sealed = if v4 {
            ipsec::nodes::encrypt::encrypt::<ip::outer::Ip4Outer>(&sa, seq, inner_v4, buf)
        } else {
            ipsec::nodes::encrypt::encrypt::<ip::outer::Ip6Outer>(&sa, seq, inner_v4, buf)
        };
        sealed.map_err(|c| ("inner", format!("{c:?}")))?;
        Ok(buf.bytes().to_vec())
    }
}

/// The words `ipsec sa add` takes, for the error that names one it does not.
pub(crate) const SA_ADD_WORDS: &[&str] = &[
    "spi",
    "inbound",
    "outbound",
    "alg",
    "enc-key",
    "integ-key",
    "local",
    "remote",
    "transport",
    "tunnel",
    "udp-encap",
    "esn",
    "no-anti-replay",
    "route",
    "urpf",
    "soft-packets",
    "hard-packets",
    "soft-bytes",
    "hard-bytes",
    "mtu",
    "fragment",
    "mss-clamp",
    "dscp",
];

/// `ipsec sa add <index> spi <n> inbound|outbound alg <a> [enc-key <hex>] ...`: the CLI's
/// words after `add`.
pub fn parse_sa_add(w: &[&str]) -> Result<IpsecSaConfig, String> {
    let index = w.first().ok_or("expected: ipsec sa add <index> spi <n> inbound|outbound alg <algorithm> ...")?;
    let mut c = IpsecSaConfig {
        index: index.parse().map_err(|_| format!("index {index:?}: expected a number"))?,
        spi: 0,
        direction: Direction::Outbound,
        mode: Mode::Tunnel,
        algorithm: Algorithm::Null,
        enc_key: String::new(),
        integ_key: String::new(),
        local: String::new(),
        remote: String::new(),
        udp_encap: false,
        udp_src_port: None,
        udp_dst_port: None,
        esn: false,
        anti_replay: true,
        lifetime: Lifetime::default(),
        routes: Vec::new(),
        urpf: Urpf::Off,
        mtu: None,
        fragment: FragmentPolicy::default(),
        tcp_mss_clamp: false,
        dscp: Dscp::Inherit,
    };
    let (mut spi, mut alg) = (false, false);
    let mut i = 1;
    while i < w.len() {
        match w[i] {
            "inbound" => c.direction = Direction::Inbound,
            "outbound" => c.direction = Direction::Outbound,
            "transport" => c.mode = Mode::Transport,
            "tunnel" => c.mode = Mode::Tunnel,
            "udp-encap" => c.udp_encap = true,
            "esn" => c.esn = true,
            "no-anti-replay" => c.anti_replay = false,
            "mss-clamp" => c.tcp_mss_clamp = true,
            key => {
                if !SA_ADD_WORDS.contains(&key) && key != "algorithm" {
                    return Err(crate::cli::unknown_word("ipsec sa add", key, SA_ADD_WORDS));
                }
                let v = *w.get(i + 1).ok_or_else(|| format!("{key} needs a value"))?;
                let num = |k: &str| -> Result<u64, String> {
                    match v.strip_prefix("0x") {
                        Some(h) => u64::from_str_radix(h, 16),
                        None => v.parse(),
                    }
                    .map_err(|_| format!("{k} {v:?}: expected a number"))
                };
                match key {
                    "spi" => {
                        c.spi = u32::try_from(num("spi")?).map_err(|_| format!("spi {v:?}: expected a 32-bit number"))?;
                        spi = true;
                    }
                    "alg" | "algorithm" => {
                        c.algorithm = v.parse()?;
                        alg = true;
                    }
                    "enc-key" => c.enc_key = v.to_string(),
                    "integ-key" => c.integ_key = v.to_string(),
                    "local" => c.local = v.to_string(),
                    "remote" => c.remote = v.to_string(),
                    "route" => c.routes.push(v.to_string()),
                    "urpf" => c.urpf = v.parse().map_err(|e| format!("urpf {e}"))?,
                    "soft-packets" => c.lifetime.soft_packets = num(key)?,
                    "hard-packets" => c.lifetime.hard_packets = num(key)?,
                    "soft-bytes" => c.lifetime.soft_bytes = num(key)?,
                    "hard-bytes" => c.lifetime.hard_bytes = num(key)?,
                    "mtu" => c.mtu = Some(u16::try_from(num(key)?).map_err(|_| format!("mtu {v:?}: expected a number of bytes"))?),
                    "fragment" => c.fragment = v.parse().map_err(|e| format!("fragment {e}"))?,
                    "dscp" => c.dscp = v.parse().map_err(|e| format!("dscp {e}"))?,
                    _ => return Err(crate::cli::unknown_word("ipsec sa add", key, SA_ADD_WORDS)),
                }
                i += 1;
            }
        }
        i += 1;
    }
    if !spi || !alg {
        return Err("ipsec sa add needs spi <n> and alg <algorithm>".into());
    }
    Ok(c)
}

/// 16 random bytes for an SA's CBC IV generator (once per SA, not per packet).
fn iv_seed() -> Result<[u8; 16], String> {
    let mut s = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut s)
        .map_err(|_| "no random numbers from the system".to_string())?;
    Ok(s)
}

/// An SA's `local` must be one of the gateway's addresses.
fn check_local(router: &RouterState, local: IpAddr) -> Result<(), String> {
    let ours = router.interfaces().iter().any(|i| match local {
        IpAddr::V4(v) => i.has_ip4(v),
        IpAddr::V6(v) => i.has_ip6(&v),
    });
    match ours {
        true => Ok(()),
        false => Err(format!("local: {local} is not an address of this gateway")),
    }
}

/// Add an SA and its routes (into `ipsec_tunnel<index>`); its local address must be
/// one of ours.
/// `port_free` refuses a UDP port the SA would receive on that something else needs
/// (given the router state as it is): its error is the reply's whole, field and all.
pub fn add(
    x: &mut IpsecState,
    router: &mut RouterState,
    c: &IpsecSaConfig,
    port_free: impl Fn(&RouterState, u16) -> Result<(), String>,
) -> Result<String, String> {
    let (spec, routes) = c.to_spec().map_err(|(f, m)| format!("{f}: {m}"))?;
    check_local(router, spec.local)?;
    spec.udp_receive_port().map_or(Ok(()), |p| port_free(router, p))?;
    x.add(c.index, spec, iv_seed()?).map_err(|e| e.to_string())?;
    let name = format!("{IPSEC_TUNNEL_IF_PREFIX}{}", c.index);
    if let Some(t) = x.tunnel_by_name(&name) {
        // The SA's own routes, all or none: refused over any route there (as a tunnel's
        // are), and deleted only with the SA.
        let owned: Vec<(Prefix, TunnelRef)> = routes.into_iter().map(|p| (p, t)).collect();
        if let Err((i, e)) = router.add_owned_routes(&owned) {
            let _ = x.del(c.index);
            return Err(format!("routes[{i}]: {e}"));
        }
    }
    Ok(name)
}

/// `ipsec_sa_update`: SA `index`'s endpoints as asked, each field that is not given
/// as it is (`udp_encap` on without ports: the ports it had, or 4500).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaEndpoints {
    pub index: u32,
    #[serde(default)]
    pub local: Option<String>,
    #[serde(default)]
    pub remote: Option<String>,
    #[serde(default)]
    pub udp_encap: Option<bool>,
    #[serde(default)]
    pub udp_src_port: Option<u16>,
    #[serde(default)]
    pub udp_dst_port: Option<u16>,
}

/// `ipsec sa set <index> [local <addr>] [remote <addr>] [udp-encap on|off]
/// [udp-ports <src> <dst>]`: the CLI's words after the index.
pub fn parse_sa_endpoints(index: &str, w: &[&str]) -> Result<SaEndpoints, String> {
    let mut e = SaEndpoints { index: index.parse().map_err(|_| format!("index {index:?}: expected a number"))?, ..Default::default() };
    let mut i = 0;
    while i < w.len() {
        let v = |n: usize| w.get(i + n).copied().ok_or_else(|| format!("{} needs a value", w[i]));
        match w[i] {
            "local" => e.local = Some(v(1)?.to_string()),
            "remote" => e.remote = Some(v(1)?.to_string()),
            "udp-encap" => {
                e.udp_encap = Some(match v(1)? {
                    "on" => true,
                    "off" => false,
                    o => return Err(format!("udp-encap {o:?}: expected on or off")),
                })
            }
            "udp-ports" => {
                e.udp_src_port = Some(crate::cli::port_word("udp-ports", v(1)?)?);
                e.udp_dst_port = Some(crate::cli::port_word("udp-ports", v(2)?)?);
                i += 1;
            }
            o => return Err(format!("unknown word {o:?} in ipsec sa set (local, remote, udp-encap, udp-ports, urpf or dscp)")),
        }
        i += 2;
    }
    if e == (SaEndpoints { index: e.index, ..Default::default() }) {
        return Err("ipsec sa set needs local, remote, udp-encap or udp-ports".into());
    }
    Ok(e)
}

/// Move SA `index` to new endpoints in place (a peer behind a NAT that rebound, or
/// MOBIKE): keys, SPI, counters, replay window, index and routes stay. Returns what it
/// is now, for the reply.
/// `port_free` as for [`add`].
pub fn update(
    x: &mut IpsecState,
    router: &RouterState,
    e: &SaEndpoints,
    port_free: impl Fn(&RouterState, u16) -> Result<(), String>,
) -> Result<String, String> {
    let sa = x.get(e.index).ok_or_else(|| format!("index {}: no such SA", e.index))?;
    let old = (*sa.spec).clone();
    let addr = |field: &str, s: &Option<String>, was: IpAddr| match s {
        None => Ok(was),
        Some(s) => s.parse::<IpAddr>().map_err(|_| format!("{field}: {s:?}: expected an IPv4 or IPv6 address")),
    };
    let (local, remote) = (addr("local", &e.local, old.local)?, addr("remote", &e.remote, old.remote)?);
    let ports_given = e.udp_src_port.is_some() || e.udp_dst_port.is_some();
    let on = e.udp_encap.unwrap_or(old.udp_encap.is_some() || ports_given);
    if !on && ports_given {
        return Err("udp_encap: UDP ports are given: expected udp_encap on".into());
    }
    let was = old.udp_encap.unwrap_or_default();
    let udp_encap = on.then(|| UdpEncapPorts { src: e.udp_src_port.unwrap_or(was.src), dst: e.udp_dst_port.unwrap_or(was.dst) });
    if local != old.local {
        check_local(router, local)?;
    }
    let receives = SaSpec { udp_encap, ..old.clone() }.udp_receive_port();
    if receives != old.udp_receive_port() {
        receives.map_or(Ok(()), |p| port_free(router, p))?;
    }
    x.set_endpoints(e.index, local, remote, udp_encap).map_err(|e| e.to_string())?;
    let udp = udp_encap.map_or("no UDP".to_string(), |p| format!("UDP {}>{}", p.src, p.dst));
    Ok(format!("{local} -> {remote} {udp}"))
}

/// Delete SA `index` and the routes into its tunnel.
pub fn del(x: &mut IpsecState, router: &mut RouterState, index: u32) -> Result<(), String> {
    if let Some(t) = x.tunnel_by_name(&format!("{IPSEC_TUNNEL_IF_PREFIX}{index}")) {
        router.del_routes_into(t);
    }
    x.del(index).map(|_| ()).map_err(|e| e.to_string())
}

/// Each `[[ipsec_sa]]` on its own — fields, keys, lifetime, index and inbound SPI each
/// once — with every entry's error recorded: what needs no interface is checked with the
/// core sections, so one run reports all of them.
pub fn check_entries(cfg: &Config, problems: &mut Problems) {
    let mut indexes = HashMap::new();
    let mut inbound_spis = HashMap::new();
    for (i, c) in cfg.ipsec_sas.iter().enumerate() {
        let field = |f: &str| format!("ipsec_sa[{i}].{f}");
        // Indexes and SPIs are taken even by an entry with other errors, so a repeat of
        // it is reported too.
        let first_index = indexes.insert(c.index, i);
        let first_spi = if c.direction == Direction::Inbound { inbound_spis.insert(c.spi, i) } else { None };
        let r = c.to_spec().map_err(|(f, m)| cfg.err(field(f), m)).and_then(|(spec, _)| {
            // The spec's own checks, so their errors name the field.
            spec.build([0; 16]).map_err(|e| cfg.err(field(e.field), e.message))?;
            if c.index > ip::tables::MAX_INDEX {
                return Err(cfg.err(field("index"), format!("{}: expected 0 to {}", c.index, ip::tables::MAX_INDEX)));
            }
            if let Some(first) = first_index {
                return Err(cfg.err(field("index"), format!("{} is already ipsec_sa[{first}]'s index: expected each index once", c.index)));
            }
            if let Some(first) = first_spi {
                let why = format!("{:#x} is already inbound ipsec_sa[{first}]'s SPI: expected each inbound SPI once", c.spi);
                return Err(cfg.err(field("spi"), why));
            }
            Ok(())
        });
        problems.take(r);
    }
}

/// The config's `[[ipsec_sa]]` tables, after the router's own routes; every entry's
/// error reported.
pub fn build_state(cfg: &Config, router: &mut RouterState) -> Result<IpsecState, ConfigError> {
    let mut problems = Problems::default();
    check_entries(cfg, &mut problems);
    problems.check()?;
    let mut x = IpsecState::new();
    for (i, c) in cfg.ipsec_sas.iter().enumerate() {
        // `add` names the field first (`local: …`, `routes[1]: …`).
        // Node ports come after: `[[lb_service]]` is checked against the SAs' ports.
        let r = add(&mut x, router, c, |_, _| Ok(())).map_err(|m| match m.split_once(": ").filter(|(f, _)| !f.contains(' ')) {
            Some((f, rest)) => cfg.err(format!("ipsec_sa[{i}].{f}"), rest),
            None => cfg.err(format!("ipsec_sa[{i}]"), m),
        });
        problems.take(r);
    }
    problems.check()?;
    x.refresh_outer(router);
    Ok(x)
}

/// A tunnel's outer packets as its encap node emits them: UDP from `local` to `remote`,
/// to port `port`, from a source port in `src_ports` (one, or a range chosen per flow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct OuterFlow {
    pub local: IpAddr,
    pub remote: IpAddr,
    pub port: u16,
    pub src_ports: (u16, u16),
}

/// Which tunnels' outer packets the outbound transport-mode SAs protect, on which links,
/// and what each adds to them: for each such SA, each tunnel `outers` names between its
/// addresses and each link with an SPD bound, that SPD's answer for the tunnel's outer
/// packets (UDP, the tunnel's ports). Only PROTECT by that very SA counts: a policy
/// that selects other protocols or ports, a bypass or discard policy, or another SA
/// leaves the link's MTU whole. A tunnel choosing its source port per flow (GUE, GTP-U
/// `src_port = "flow_hash"`) sends packets the policies may tell apart by that port;
/// then the SA counts when it protects any of them (conservative: those bypassed get
/// an inner MTU lower than they need, and are left whole rather than fragmented before
/// the SPD, which is never wrong for those it protects). Worked out when the tables are
/// published, so a packet only compares its header with the entries there are (none
/// without transport-mode SAs and SPD bindings: then the tunnels are not even read).
pub fn tunnel_esp(x: &IpsecState, spd: &spd::SpdState, outers: impl FnOnce() -> Vec<OuterFlow>) -> Vec<ip::tables::TunnelEsp> {
    let transport: Vec<_> =
        x.iter().filter(|(_, sa)| sa.spec.direction == Direction::Outbound && sa.spec.mode == Mode::Transport).collect();
    let links: Vec<_> = spd.bindings().filter(|(i, _)| i.0 < 64).collect();
    if transport.is_empty() || links.is_empty() {
        return Vec::new();
    }
    let mut outers = outers();
    outers.sort_unstable();
    outers.dedup();
    const UDP: u8 = 17;
    let mut esp = Vec::new();
    for (index, sa) in transport {
        let protect = spd::Decision::Act(spd::Action::Protect(spd::SaId(index)));
        for o in outers.iter().filter(|o| o.local == sa.spec.local && o.remote == sa.spec.remote) {
            let ports = spd::policy::Range { lo: o.src_ports.0, hi: o.src_ports.1 };
            let on = links
                .iter()
                .filter(|(_, s)| spd.outbound_decisions(*s, o.local, o.remote, UDP, ports, o.port).contains(&protect))
                .fold(0u64, |m, (i, _)| m | 1 << i.0);
            if on != 0 {
                esp.push(ip::tables::TunnelEsp::new(o.local, o.remote, o.port, on, sa.plan.overhead as u16, sa.spec.mtu.mtu));
            }
        }
    }
    esp
}

/// ESP in UDP arrives on port 4500 when any SA uses it (an inbound SA's `udp_dst_port`
/// otherwise); our outbound ESP in UDP leaves from 4500 (an outbound SA's `udp_src_port`),
/// the port ICMP errors about it quote (`UdpDemux::esp_sources`).
pub fn add_to_demux(x: &IpsecState, d: &mut UdpDemux) {
    let mut sources: Vec<u16> =
        x.iter().filter(|(_, s)| s.spec.direction == Direction::Outbound).filter_map(|(_, s)| s.spec.udp_encap.map(|p| p.src)).collect();
    sources.sort_unstable();
    sources.dedup();
    d.esp_sources = sources;
    let mut ports: Vec<u16> = x.iter().filter_map(|(_, s)| s.spec.udp_receive_port()).collect();
    ports.sort_unstable();
    ports.dedup();
    for p in ports {
        if !d.ports.iter().any(|(q, _)| *q == p) {
            d.ports.push((p, UdpApp::Esp));
        }
    }
}

/// A route target naming `ipsec_tunnelN` becomes a route into outbound SA N.
pub fn resolve_target(x: &IpsecState, t: RouteTarget) -> Result<RouteTarget, String> {
    match t {
        RouteTarget::Multipath(paths) => Ok(RouteTarget::Multipath(
            paths.into_iter().map(|p| Ok(ip::state::Path { target: resolve_target(x, p.target)?, ..p })).collect::<Result<_, String>>()?,
        )),
        RouteTarget::Interface(name) if name.starts_with(IPSEC_TUNNEL_IF_PREFIX) => {
            x.tunnel_by_name(&name).map(RouteTarget::Tunnel).ok_or_else(|| format!("no outbound tunnel-mode SA named {name:?}"))
        }
        other => Ok(other),
    }
}

/// One row of `show ipsec sa` (no keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SaRow {
    pub index: u32,
    pub name: Option<String>,
    pub spi: u32,
    pub direction: Direction,
    pub mode: Mode,
    pub algorithm: Algorithm,
    pub local: IpAddr,
    pub remote: IpAddr,
    pub udp_encap: Option<UdpEncapPorts>,
    pub esn: bool,
    pub anti_replay: bool,
    pub lifetime: Lifetime,
    pub urpf: Urpf,
    /// The inner MTU cap (0: none), fragmentation policy and MSS clamping.
    pub mtu: MtuPolicy,
    /// `"inherit"` or the SA's own outer DSCP.
    pub dscp: Dscp,
    /// Packets and bytes sent (outbound) or taken (inbound: decrypted and accepted,
    /// payload bytes), all workers.
    pub packets: u64,
    pub bytes: u64,
    /// The SA refuses every packet: a hard lifetime passed (on some worker, inbound)
    /// or its sequence numbers ran out. What an IKE daemon replaces it on.
    pub expired: bool,
    /// Outbound: the path MTU a router reported about the SA's ESP (frag-needed or
    /// Packet Too Big) and its age in seconds, until it ages out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_mtu: Option<ipsec::sa::LearnedMtu>,
}

pub fn rows(x: &IpsecState) -> Vec<SaRow> {
    let now = ipsec::sa::clock_secs();
    x.iter()
        .map(|(i, s)| {
            let p = &s.spec;
            let out = p.direction == Direction::Outbound;
            SaRow {
                index: i,
                // A transport SA is no interface: SPD policies select its packets.
                name: (out && p.mode == Mode::Tunnel).then(|| TunnelRef { kind: ip::tables::TunnelKind::Esp4, id: i }.if_name()),
                spi: p.spi,
                direction: p.direction,
                mode: p.mode,
                algorithm: p.alg,
                local: p.local,
                remote: p.remote,
                udp_encap: p.udp_encap,
                esn: p.esn,
                anti_replay: p.anti_replay,
                lifetime: p.lifetime,
                urpf: p.urpf,
                mtu: p.mtu,
                dscp: p.dscp,
                packets: if out { s.outbound.packets() } else { 0 },
                bytes: if out { s.outbound.bytes() } else { 0 },
                expired: out && s.outbound.expired(),
                path_mtu: if out { s.outbound.learned_mtu(now) } else { None },
            }
        })
        .collect()
}

/// The workers' inbound counts (`IpsecContext::inbound_counts`) into the inbound rows:
/// each count belongs to the SA it names by identity, not to a later one at its index.
pub fn add_inbound_counts(x: &IpsecState, rows: &mut [SaRow], taken: &[ipsec::context::InboundCount]) {
    for t in taken {
        let same = x.get(t.index).is_some_and(|s| std::sync::Arc::ptr_eq(&s.outbound, &t.id));
        if let Some(r) = rows.iter_mut().find(|r| r.index == t.index && r.direction == Direction::Inbound).filter(|_| same) {
            r.packets += t.packets;
            r.bytes += t.bytes;
            r.expired |= t.expired;
        }
    }
}

/// An SA's MTU settings as `show ipsec sa` appends them (none when it has none).
fn mtu_words(m: &MtuPolicy) -> String {
    let mut w = String::new();
    if m.mtu != 0 {
        w += &format!(" mtu {}", m.mtu);
    }
    if m.fragment == FragmentPolicy::Outer {
        w += " fragment outer";
    }
    if m.mss_clamp {
        w += " mss-clamp";
    }
    w
}

pub fn format_rows(rows: &[SaRow]) -> String {
    let mut s = format!(
        "{:<6} {:<15} {:<10} {:<9} {:<18} {:<22} {:<22} {:<10} {:>10} {:>12}\n",
        "index", "interface", "spi", "dir", "algorithm", "local", "remote", "udp", "packets", "bytes"
    );
    for r in rows {
        let udp = r.udp_encap.map_or("-".to_string(), |p| format!("{}>{}", p.src, p.dst));
        let dir = match r.direction {
            Direction::Inbound => "inbound",
            Direction::Outbound => "outbound",
        };
        s += &format!(
            "{:<6} {:<15} {:<10} {:<9} {:<18} {:<22} {:<22} {:<10} {:>10} {:>12}{}{}\n",
            r.index,
            r.name.as_deref().unwrap_or(if r.mode == Mode::Transport { "(transport)" } else { "-" }),
            format!("{:#x}", r.spi),
            dir,
            r.algorithm.name(),
            r.local,
            r.remote,
            udp,
            r.packets,
            r.bytes,
            crate::format::urpf_words(r.urpf)
                + &mtu_words(&r.mtu)
                + &crate::gtpu::dscp_words(r.dscp)
                + &r.path_mtu.map_or(String::new(), |l| format!(" path-mtu {} age {}s", l.mtu, l.age_secs)),
            if r.expired { "  expired" } else { "" }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa() -> IpsecSaConfig {
        IpsecSaConfig {
            index: 0,
            spi: 0x100,
            direction: Direction::Outbound,
            mode: Mode::Tunnel,
            algorithm: Algorithm::AesGcm128,
            enc_key: "0102030405060708090a0b0c0d0e0f1011121314".into(),
            integ_key: String::new(),
            local: "198.18.1.1".into(),
            remote: "198.18.1.2".into(),
            udp_encap: false,
            udp_src_port: None,
            udp_dst_port: None,
            esn: false,
            anti_replay: true,
            lifetime: Lifetime::default(),
            routes: vec!["198.19.4.0/24".into()],
            urpf: Urpf::Off,
            mtu: None,
            fragment: FragmentPolicy::default(),
            tcp_mss_clamp: false,
            dscp: Dscp::Inherit,
        }
    }

    /// A key that is not hex says so (and where), not that its length is odd; one of odd
    /// length says that; neither repeats the key.
    #[test]
    fn a_bad_key_says_what_is_wrong_with_it() {
        let says = |k: &str| IpsecSaConfig { enc_key: k.into(), ..sa() }.to_spec().unwrap_err();
        let key = "0102030405060708090a0b0c0d0e0f10111213zz";
        assert_eq!(says(key), ("enc_key", "character 39 is not a hex digit: expected hex digits only (0-9, a-f)".into()));
        assert_eq!(says("0x010"), ("enc_key", "expected an even number of hex digits (3 characters given)".into()));
        assert!(!says(key).1.contains("zz"));
    }

    #[test]
    fn text_fields_checked_by_name() {
        assert!(sa().to_spec().is_ok());
        let field = |c: IpsecSaConfig| c.to_spec().unwrap_err().0;
        assert_eq!(field(IpsecSaConfig { enc_key: "xyz".into(), ..sa() }), "enc_key");
        assert_eq!(field(IpsecSaConfig { local: "nowhere".into(), ..sa() }), "local");
        assert_eq!(field(IpsecSaConfig { udp_dst_port: Some(4501), ..sa() }), "udp_encap");
        assert_eq!(field(IpsecSaConfig { direction: Direction::Inbound, ..sa() }), "routes");
        assert_eq!(field(IpsecSaConfig { routes: vec!["198.19.0.0/40".into()], ..sa() }), "routes");
        assert_eq!(field(IpsecSaConfig { mode: Mode::Transport, ..sa() }), "routes");
    }

    #[test]
    fn cli_words_fill_the_same_fields() {
        let w = "0 spi 0x100 outbound alg aes-gcm-128 enc-key 0102030405060708090a0b0c0d0e0f1011121314 local 198.18.1.1 remote 198.18.1.2 route 198.19.4.0/24";
        let c = parse_sa_add(&w.split(' ').collect::<Vec<_>>()).unwrap();
        assert_eq!(c, sa());
        let e = parse_sa_add(&["1", "spi", "300"]).unwrap_err();
        assert!(e.contains("alg"), "{e}");
        let e = parse_sa_add(&["1", "spi", "300", "alg", "des"]).unwrap_err();
        assert!(e.contains("aes-gcm-128"), "{e}");
        let w = "2 spi 0x200 outbound transport alg aes-gcm-128 local 198.18.1.1 remote 198.18.1.2";
        assert_eq!(parse_sa_add(&w.split(' ').collect::<Vec<_>>()).unwrap().mode, Mode::Transport);
        // The MTU words, as a tunnel's: into the spec's policy, shown back.
        let w = "3 spi 0x300 outbound alg null local 198.18.1.1 remote 198.18.1.2 mtu 1400 fragment outer mss-clamp";
        let (spec, _) = parse_sa_add(&w.split(' ').collect::<Vec<_>>()).unwrap().to_spec().unwrap();
        assert_eq!(spec.mtu, MtuPolicy { mtu: 1400, fragment: FragmentPolicy::Outer, mss_clamp: true });
        let mut x = IpsecState::new();
        x.add(3, spec, [0; 16]).unwrap();
        assert!(format_rows(&rows(&x)).contains(" mtu 1400 fragment outer mss-clamp"), "{}", format_rows(&rows(&x)));
        let e = parse_sa_add(&"4 spi 5 outbound alg null local 198.18.1.1 remote 198.18.1.2 mtu 100".split(' ').collect::<Vec<_>>());
        assert_eq!(e.unwrap().to_spec().unwrap_err().0, "mtu");
    }

    /// A transport SA's bytes count on a tunnel's outer packets only where the link's SPD
    /// PROTECTs those very packets by it: not for a policy of another protocol, not past a
    /// bypass of the tunnel's port, not for another SA, not on a link without the SPD;
    /// some of a tunnel's per-flow source ports protected counts (conservative).
    #[test]
    fn tunnel_esp_counts_an_sa_only_where_the_spd_protects_the_tunnel_by_it() {
        use spd::{policy::ActionKind, Direction as D, PolicySpec, SpdState};
        let mut x = IpsecState::new();
        let transport = |spi, local: &str| IpsecSaConfig { spi, mode: Mode::Transport, routes: Vec::new(), local: local.into(), ..sa() };
        x.add(6, transport(0x600, "198.18.1.1").to_spec().unwrap().0, [0; 16]).unwrap();
        x.add(7, transport(0x700, "198.18.1.1").to_spec().unwrap().0, [0; 16]).unwrap();
        x.add(8, transport(0x800, "198.18.1.9").to_spec().unwrap().0, [0; 16]).unwrap();
        let overhead = x.get(6).unwrap().plan.overhead as u16;
        let (l, r): (IpAddr, IpAddr) = ("198.18.1.1".parse().unwrap(), "198.18.1.2".parse().unwrap());
        let gtpu = OuterFlow { local: l, remote: r, port: 2152, src_ports: (2152, 2152) };
        let gue = OuterFlow { local: l, remote: r, port: 6080, src_ports: (49152, 65535) };
        let policy = |prio, action, sa: Option<u32>, proto: &str, local_ports: &str, remote_ports: &str| PolicySpec {
            spd: 1,
            direction: D::Outbound,
            priority: prio,
            action,
            sa,
            local: "any".into(),
            remote: "198.18.1.2".into(),
            protocol: proto.into(),
            local_ports: local_ports.into(),
            remote_ports: remote_ports.into(),
        };
        let esp = |policies: &[PolicySpec], bind: &[u16]| {
            let mut s = SpdState::new();
            for p in policies {
                s.add_policy(p).unwrap();
            }
            for &i in bind {
                s.bind(engine::IfIndex(i), 1).unwrap();
            }
            let mut e = tunnel_esp(&x, &s, || vec![gue, gtpu, gtpu]);
            e.sort_by_key(|e| e.port);
            e.iter().map(|e| (e.port, e.links, e.overhead)).collect::<Vec<_>>()
        };
        let protect_udp = policy(10, ActionKind::Protect, Some(6), "udp", "any", "any");
        assert_eq!(esp(std::slice::from_ref(&protect_udp), &[1, 3]), vec![(2152, 0b1010, overhead), (6080, 0b1010, overhead)]);
        assert_eq!(esp(std::slice::from_ref(&protect_udp), &[]), vec![], "no link has the SPD");
        let tcp_only = policy(10, ActionKind::Protect, Some(6), "tcp", "any", "any");
        assert_eq!(esp(&[tcp_only], &[1]), vec![], "the policy selects TCP only");
        let bypass_gtpu = policy(20, ActionKind::Bypass, None, "udp", "any", "2152");
        assert_eq!(esp(&[protect_udp.clone(), bypass_gtpu], &[1]), vec![(6080, 0b10, overhead)]);
        let other_sa = policy(10, ActionKind::Protect, Some(7), "udp", "any", "2152");
        assert_eq!(esp(&[other_sa], &[1]).iter().map(|e| e.0).collect::<Vec<_>>(), vec![2152], "SA 7's own entry");
        let some_ports = policy(20, ActionKind::Bypass, None, "udp", "50000-50999", "any");
        assert_eq!(esp(&[protect_udp.clone(), some_ports], &[1]), vec![(2152, 0b10, overhead), (6080, 0b10, overhead)]);
        let all_gue_ports = policy(20, ActionKind::Bypass, None, "udp", "49152-65535", "any");
        assert_eq!(esp(&[protect_udp, all_gue_ports], &[1]), vec![(2152, 0b10, overhead)]);
    }

    /// ICMP errors about ESP in UDP are known by the port outbound SAs send from; ESP in
    /// UDP is taken on the ports inbound SAs receive on.
    #[test]
    fn the_demux_knows_our_esp_in_udp_source_ports_apart_from_the_receive_ports() {
        let mut x = IpsecState::new();
        let out = IpsecSaConfig { udp_encap: true, udp_src_port: Some(4501), udp_dst_port: Some(4600), ..sa() };
        let inb = IpsecSaConfig { spi: 0x101, direction: Direction::Inbound, routes: Vec::new(), udp_encap: true, ..sa() };
        let plain = IpsecSaConfig { spi: 0x102, ..sa() };
        x.add(0, out.to_spec().unwrap().0, [0; 16]).unwrap();
        x.add(1, inb.to_spec().unwrap().0, [0; 16]).unwrap();
        x.add(2, plain.to_spec().unwrap().0, [0; 16]).unwrap();
        let mut d = UdpDemux::default();
        add_to_demux(&x, &mut d);
        assert_eq!(d.esp_sources, vec![4501]);
        assert_eq!(d.ports, vec![(4500, UdpApp::Esp)]);
        assert!(d.esp_source(4501) && !d.esp_source(4500) && !d.esp_source(4600));
    }

    #[test]
    fn a_transport_sa_is_no_tunnel_interface() {
        let mut x = IpsecState::new();
        let (spec, _) = IpsecSaConfig { mode: Mode::Transport, routes: Vec::new(), ..sa() }.to_spec().unwrap();
        x.add(3, spec, [0; 16]).unwrap();
        let r = rows(&x);
        assert_eq!((r[0].mode, r[0].name.as_deref()), (Mode::Transport, None));
        assert!(format_rows(&r).contains("(transport)"));
        assert_eq!(x.tunnel_by_name("ipsec_tunnel3"), None, "no route can lead into it");
    }

    #[test]
    fn an_sa_past_its_hard_lifetime_shows_expired() {
        let mut x = IpsecState::new();
        let lifetime = Lifetime { hard_packets: 2, ..Default::default() };
        let (out, _) = IpsecSaConfig { lifetime, ..sa() }.to_spec().unwrap();
        let (inb, _) = IpsecSaConfig { spi: 0x101, direction: Direction::Inbound, routes: Vec::new(), ..sa() }.to_spec().unwrap();
        x.add(0, out, [0; 16]).unwrap();
        x.add(1, inb, [0; 16]).unwrap();
        let expired = |x: &IpsecState, taken: &[ipsec::context::InboundCount]| {
            let mut r = rows(x);
            add_inbound_counts(x, &mut r, taken);
            (r[0].expired, r[1].expired, format_rows(&r).matches("expired").count())
        };
        let o = std::sync::Arc::clone(&x.get(0).unwrap().outbound);
        for _ in 0..2 {
            o.next(64, false, &lifetime).unwrap();
        }
        assert_eq!(expired(&x, &[]), (false, false, 0), "at the limit, nothing refused yet");
        assert!(o.next(64, false, &lifetime).is_err());
        assert_eq!(expired(&x, &[]), (true, false, 1));
        // Inbound: any worker's refusal; a count of an SA replaced at the index is not its.
        let id = std::sync::Arc::clone(&x.get(1).unwrap().outbound);
        let count = |expired, id| ipsec::context::InboundCount { index: 1, id, packets: 5, bytes: 320, expired };
        assert_eq!(expired(&x, &[count(false, id.clone()), count(true, id.clone())]), (true, true, 2));
        assert_eq!(expired(&x, &[count(true, std::sync::Arc::default())]), (true, false, 1));
    }

    /// A learned path MTU shows with its age on the outbound SA's row (text and API),
    /// none before one is learned or on an inbound SA; the keys never do.
    #[test]
    fn a_learned_path_mtu_shows_with_its_age() {
        let mut x = IpsecState::new();
        let (out, _) = sa().to_spec().unwrap();
        let (inb, _) = IpsecSaConfig { spi: 0x101, direction: Direction::Inbound, routes: Vec::new(), ..sa() }.to_spec().unwrap();
        x.add(0, out, [0; 16]).unwrap();
        x.add(1, inb, [0; 16]).unwrap();
        assert!(rows(&x).iter().all(|r| r.path_mtu.is_none()));
        assert!(!format_rows(&rows(&x)).contains("path-mtu"));
        let now = ipsec::sa::clock_secs();
        assert!(x.get(0).unwrap().outbound.learn_path_mtu(1300, now.saturating_sub(5)));
        let r = rows(&x);
        let learned = r[0].path_mtu.expect("learned");
        assert_eq!(learned.mtu, 1300);
        assert!(learned.age_secs >= 5 && learned.age_secs < ipsec::sa::PATH_MTU_AGE_SECS, "{learned:?}");
        assert_eq!(r[1].path_mtu, None);
        let text = format_rows(&r);
        assert!(text.contains(&format!(" path-mtu 1300 age {}s", learned.age_secs)), "{text}");
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"path_mtu\":{\"mtu\":1300,\"age_secs\":"), "{json}");
        assert!(!json.contains("0102030405") && !text.contains("0102030405"));
    }

    #[test]
    fn a_bad_key_is_described_not_repeated() {
        let e = IpsecSaConfig { enc_key: "0102zz".into(), ..sa() }.to_spec().unwrap_err();
        assert!(!e.1.contains("0102zz"), "{}", e.1);
        let rows_text = format!("{:?}", sa());
        assert!(!rows_text.contains("0102030405"), "{rows_text}");
    }
}
