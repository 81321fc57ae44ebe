//! The UPF scenarios of `vecgate bench`: `upf4-uplink` (G-PDUs on N sessions' TEIDs,
//! decapsulated by PDR) and `upf4-downlink` (packets to N sessions' UEs, encapsulated by
//! FAR), each session as an SMF sets one up: 2 PDRs, 2 FARs, a QER (gate open, an MBR high
//! enough never to drop, so the policer runs) and a URR. Compare with `gtpu4-decap` /
//! `gtpu4-encap` with as many tunnels: the difference is the cost of PDR matching, QER
//! and URR per packet. The sessions are installed as PFCP's control plane installs them
//! (compiled, one table publish per session), which gives sessions per second and memory
//! per session of the dataplane tables. `--inner ip6` gives every session an IPv6 UE
//! (/64), so the downlink reaches past the 32 768 IPv4 UEs; `--session-rules` leaves the
//! QER, the URR or both out, which splits the per-packet cost.

use anyhow::{anyhow, bail, Result};
use io::pg::{Field, L4Spec, ModifierSpec, PacketSpec, Pattern};
use pfcp::ie::{apply_action, Interface, NodeId};
use pfcp::rules::{Far, GtpuEndpoint, Pdr, Qer, SessionRules, Urr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

const N3: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
const GNB: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
/// IPv4 UEs (the first 32 768 sessions), then IPv6 /64s.
const UE4_BASE: u32 = 0xc612_8000; // 198.18.128.0/17
const UE4_MAX: u32 = 32_768;
const UE6_BASE: u128 = 0x2001_0db8_1000_0000 << 64; // 2001:db8:1000::/36

/// The `[pfcp]` section the UPF scenarios add to the bench configuration.
pub(crate) fn config_section(sessions: u32) -> String {
    format!(
        "\n[pfcp]\nlisten = \"127.0.0.1:0\"\nn3 = \"{N3}\"\nue_pool = \"198.18.128.0/17\"\nue_pool6 = \"2001:db8:1000::/36\"\nmax_sessions = {}\n",
        sessions.max(1)
    )
}

/// Session `i`'s UE: IPv4 for the first [`UE4_MAX`] (unless `inner6`), then IPv6.
/// The inner source of the uplink scenario's G-PDUs.
const UPLINK_INNER_SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 128, 0);

fn ue(i: u32, inner6: bool) -> IpAddr {
    if i < UE4_MAX && !inner6 {
        IpAddr::V4(Ipv4Addr::from(UE4_BASE + i))
    } else {
        IpAddr::V6(Ipv6Addr::from(UE6_BASE + ((i as u128) << 64)))
    }
}

/// Which rules each session has beside its PDRs and FARs (`--session-rules`): the
/// differences between them split the UPF's per-packet cost into QER and URR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionRuleSet {
    pub qer: bool,
    pub urr: bool,
}

impl SessionRuleSet {
    pub(crate) const ALL: SessionRuleSet = SessionRuleSet { qer: true, urr: true };

    pub(crate) fn parse(s: &str) -> Result<SessionRuleSet> {
        Ok(match s {
            "all" => SessionRuleSet::ALL,
            "no-qer" => SessionRuleSet { qer: false, urr: true },
            "no-urr" => SessionRuleSet { qer: true, urr: false },
            "pdr-far" => SessionRuleSet { qer: false, urr: false },
            _ => bail!("--session-rules {s:?}: expected all, no-qer, no-urr or pdr-far"),
        })
    }
}

/// Session `i`: uplink on TEID i+1, downlink to UE `ue(i, inner6)` toward the gNB on
/// TEID 0x8000_0000 | (i+1).
pub(crate) fn session(i: u32, inner6: bool, rules: SessionRuleSet) -> SessionRules {
    let mut r = SessionRules {
        seid: i as u64 + 1,
        cp_node: NodeId::Ipv4(Ipv4Addr::LOCALHOST),
        pdrs: Default::default(),
        fars: Default::default(),
        qers: Default::default(),
        urrs: Default::default(),
        bar: None,
    };
    let pdr = |id: u16, far: u32| Pdr {
        id,
        precedence: 100,
        source: Interface::Access,
        local_f_teid: None,
        ue_ipv4: None,
        ue_ipv6: None,
        ue_is_destination: false,
        sdf_filters: vec![],
        qfi: None,
        outer_header_removal: false,
        far_id: Some(far),
        qer_ids: if rules.qer { vec![1] } else { vec![] },
        urr_ids: if rules.urr { vec![1] } else { vec![] },
    };
    let mut up = pdr(1, 1);
    up.local_f_teid = Some(GtpuEndpoint { teid: i + 1, addr: IpAddr::V4(N3) });
    up.outer_header_removal = true;
    // As an SMF's uplink PDI does, it names the UE's address, so every G-PDU's inner
    // source is checked; the address the generator sends from (one for every session:
    // it varies the TEID, not the inner source).
    up.ue_ipv4 = Some(UPLINK_INNER_SRC);
    let mut down = pdr(2, 2);
    down.source = Interface::Core;
    down.ue_is_destination = true;
    match ue(i, inner6) {
        IpAddr::V4(a) => down.ue_ipv4 = Some(a),
        IpAddr::V6(a) => down.ue_ipv6 = Some(a),
    }
    r.pdrs.insert(1, up);
    r.pdrs.insert(2, down);
    r.fars.insert(
        1,
        Far {
            id: 1,
            action: apply_action::FORW,
            destination: Some(Interface::Core),
            outer_header: None,
            transport_marking: None,
            network_instance: None,
            bar_id: None,
        },
    );
    let out = GtpuEndpoint { teid: 0x8000_0000 | (i + 1), addr: IpAddr::V4(GNB) };
    r.fars.insert(
        2,
        Far {
            id: 2,
            action: apply_action::FORW,
            destination: Some(Interface::Access),
            outer_header: Some(out),
            transport_marking: None,
            network_instance: None,
            bar_id: None,
        },
    );
    let mbr = Some(10_000_000); // 10 Gbit/s
    if rules.qer {
        r.qers.insert(
            1,
            Qer {
                id: 1,
                ul_open: true,
                dl_open: true,
                mbr_ul_kbps: mbr,
                mbr_dl_kbps: mbr,
                gbr_ul_kbps: None,
                gbr_dl_kbps: None,
                qfi: Some(9),
            },
        );
    }
    if rules.urr {
        r.urrs.insert(1, Urr { id: 1, measurement_method: 2, ..Default::default() });
    }
    r
}

/// What the UPF scenarios report beside the packet figures.
#[derive(serde::Serialize)]
pub(crate) struct UpfReport {
    pub sessions: u32,
    /// Seconds to install every session, each followed by a table publish.
    pub install_seconds: f64,
    pub sessions_per_sec: f64,
    /// The UPF tables' own arrays, and the process's resident memory growth while
    /// installing (the sessions' rules included).
    pub table_bytes: usize,
    pub rss_growth_bytes: u64,
    pub bytes_per_session: f64,
}

/// Install `n` sessions and build the scenario's packet.
pub(crate) fn setup(
    scenario: &str,
    o: &crate::bench::GtpuOptions,
    control: &mut control::dataplane::Control,
    json: bool,
) -> Result<(PacketSpec, Vec<ModifierSpec>, UpfReport)> {
    let (n, inner_size) = (o.tunnels.max(1), o.inner_size);
    let rules = SessionRuleSet::parse(&o.session_rules)?;
    let inner6 = match o.inner.as_str() {
        "ip4" => false,
        "ip6" => true,
        other => bail!("--inner {other:?}: expected ip4 or ip6"),
    };
    let downlink = scenario.ends_with("downlink");
    if downlink && n > UE4_MAX && !inner6 {
        bail!("upf4-downlink: {n} sessions do not fit the IPv4 UE range (198.18.128.0/17, {UE4_MAX} addresses); use --inner ip6");
    }
    if !(28..=8000).contains(&inner_size) {
        bail!("--inner-size {inner_size}: expected 28 to 8000 bytes");
    }
    let p = control.pfcp.as_mut().ok_or_else(|| anyhow!("the UPF scenario's [pfcp] section is missing"))?;
    let rss0 = crate::bench::rss_bytes();
    let t0 = Instant::now();
    for i in 0..n {
        p.tables.install_rules(&session(i, inner6, rules)).map_err(|e| anyhow!("session {i}: {e}"))?;
        p.publish();
    }
    let install_seconds = t0.elapsed().as_secs_f64();
    let rss_growth_bytes = crate::bench::rss_bytes().saturating_sub(rss0);
    let report = UpfReport {
        sessions: n,
        install_seconds,
        sessions_per_sec: n as f64 / install_seconds,
        table_bytes: p.tables.memory_bytes(),
        rss_growth_bytes,
        bytes_per_session: rss_growth_bytes as f64 / n as f64,
    };
    if !json {
        eprintln!(
            "installed {n} sessions in {install_seconds:.2} s ({:.0}/s, a publish each); resident +{:.1} MB ({:.0} bytes/session)",
            report.sessions_per_sec,
            rss_growth_bytes as f64 / 1e6,
            report.bytes_per_session
        );
    }
    let mut modifiers = Vec::new();
    let packet = if downlink {
        if n > 1 && inner6 {
            // Each IPv6 UE is a /64 of its own, past the low 32 bits a random offset
            // rewrites: whole addresses, drawn at random among the sessions.
            let mut rng = crate::bench::Rng(0x5eed_0_5e55_1045);
            let dsts = (0..65_536).map(|_| ue((rng.next() % n as u64) as u32, true)).collect();
            modifiers.push(ModifierSpec { field: Field::DstAddr, pattern: Pattern::Addresses(dsts) });
        } else if n > 1 {
            modifiers.push(ModifierSpec { field: Field::DstAddr, pattern: Pattern::Random { count: n } });
        }
        modifiers.push(ModifierSpec { field: Field::SrcPort, pattern: Pattern::Increment { count: 256 } });
        PacketSpec {
            src_mac: "02:fe:00:00:00:01".parse()?,
            dst_mac: "02:00:00:00:00:01".parse()?,
            src: if inner6 { "2001:db8::2".parse()? } else { "198.18.0.2".parse()? },
            dst: ue(0, inner6),
            ttl: 64,
            l4: L4Spec::Udp { src_port: 1024, dst_port: 9 },
            frame_size: 14 + inner_size,
        }
    } else {
        if n > 1 {
            modifiers.push(ModifierSpec { field: Field::Teid, pattern: Pattern::Random { count: n } });
        }
        PacketSpec {
            src_mac: "02:fe:00:00:00:01".parse()?,
            dst_mac: "02:00:00:00:00:01".parse()?,
            src: IpAddr::V4(GNB),
            dst: IpAddr::V4(N3),
            ttl: 64,
            l4: L4Spec::Gtpu { teid: 1, inner_src: IpAddr::V4(UPLINK_INNER_SRC), inner_dst: "198.19.0.1".parse()?, checksum: false },
            frame_size: 14 + 20 + 16 + inner_size,
        }
    };
    Ok((packet, modifiers, report))
}
