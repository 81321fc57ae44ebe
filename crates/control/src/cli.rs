//! Text commands → typed requests (the `vecgate ctl` language, VPP-like).

use crate::api::Request;

pub const HELP: &str = "\
commands:
  show runtime                         per-node calls, vectors, packets, cycles/packet
  show instance                        this gateway process: pid, start time (changes on restart)
  show graph                           the node graph, each node's packet and drop rates since
                                       the last `show graph`
  show metrics                         every counter in the OpenMetrics text format (as GET /metrics),
                                       series sorted by their labels
  show errors [all]                    per-node counters (non-zero unless `all`)
  show trace                           records of traced packets
  trace add <input-node> <count>       trace the next <count> packets of an input (e.g. pg-input)
  trace clear
  show interfaces
  create interface <name> af_packet|tap|null [host-if <if>] [mac <mac>] [mtu <n>]
         [address <addr>/<len>]... [vnet-hdr on|off]
                                       add an interface to the running gateway
  delete interface <name>              says which routes went with it
  set interface <name> urpf strict|loose|off
                                       check the sources it receives (RFC 3704): strict, the
                                       route back leaves by it; loose, there is a route back
                                       (a tunnel too: gtpu_tunnelN, udp_tunnelN)
  show ip fib [limit <n>]              IPv4 and IPv6 routes, UE routes too (first 1000; limit 0: all)
  show ip fib <address>|<prefix>       the route an address takes (longest match), or a prefix's
  show neighbours
  ip route add <prefix> via <addr> [interface <name>]
  ip route add <prefix> interface <name>
  ip route add <prefix> blackhole
  ip route add <prefix> via <addr> [weight <n>] via <addr> [weight <n>]...
                                       ECMP: each flow on one path, flows spread by weight;
                                       refused if the prefix has another route
  ip route del <prefix>                a static route (a tunnel's, SA's or service's goes with it)
  ip route batch <file>                many changes in one request: lines of a route file
                                       (replacing static routes), `del <prefix>` lines delete
                                       (all or nothing)
  clear runtime                        zero runtime stats and counters
  create gtpu tunnel local <addr> remote <addr> teid-in <n> teid-out <n>
         [qfi <0-63>] [uplink] [sequence] [checksum zero|software|offload]
         [accept-zero-checksum] [src-port fixed|flow-hash] [ue <prefix>]
         [decap-next ip4|ip6|ip | decap-next ethernet <interface>]
         [mtu <n>] [fragment inner|outer] [mss-clamp] [urpf strict|loose]
         [dscp inherit|<0-63>]
  delete gtpu tunnel <gtpu_tunnelN>    says which routes went with it
  set gtpu tunnel <gtpu_tunnelN> [remote <addr>] [teid-out <n>] [qfi <0-63>]
         [dscp inherit|<0-63>]         change it in place (a handover, a new outer DSCP)
  create udp tunnel local <addr> remote <addr> encap gue|gre|direct [port <n>]
         [src-ports <min>-<max>] [key <n>] [gre-checksum] [gre-sequence]
         [checksum zero|software|offload]
         [accept-zero-checksum] [ttl <n>] [route <prefix>]...
         [mtu <n>] [fragment inner|outer] [mss-clamp] [urpf strict|loose]
         [dscp inherit|<0-63>]
  delete udp tunnel <udp_tunnelN>
  show udp tunnels
  set udp tunnel <udp_tunnelN> [remote <addr>] [port <n>] [key <n>|none] [dscp inherit|<0-63>]
                                       change it in place (one table change, no packet lost)
  show udp tunnel remote <addr> | local <addr> | id <n>   the tunnels to that peer, from that
                                       address, or with that id
  show gtpu tunnels [<limit>]
  show gtpu tunnel teid <n> | remote <addr> | ue <addr>   the tunnels with that TEID (in or out),
                                       peer, or UE route covering the address
  show pfcp associations | sessions     the SMFs associated (and the PFCP counters), the
                                       sessions they set up (`pfcp off` without [pfcp])
  lb service add <name> cluster_ip|node_port|load_balancer <vip> <port> tcp|udp|sctp
         [policy cluster|local] [affinity <seconds>] [table-size <prime>] [backend <addr>:<port>]...
         [forwarding nat|ipip|gue|gre] [gue-port <port>] [source-range <prefix>]...
                                       (source-range: load_balancer only; other sources dropped)
  lb service del <name>
  lb backend add <service> <addr> <port> [weight <n>] [other-zone]
  lb backend set <service> <addr> <port> [weight <n>] [ready|terminating|not-serving]
  lb backend del <service> <addr> <port>
  show lb services [<service>]
  show lb digests                      every service's digest (spec and backends), for
                                       programs: `--json` gives name → digest
  show lb backends [<service>]
  show lb sessions [service <name>] [limit <n>]
  ipsec sa add <index> spi <n> inbound|outbound [tunnel|transport] alg <algorithm> [enc-key <hex>]
         [integ-key <hex>] local <addr> remote <addr> [udp-encap] [esn] [no-anti-replay]
         [soft-packets|hard-packets|soft-bytes|hard-bytes <n>] [route <prefix>]... [urpf strict|loose]
         [mtu <n>] [fragment inner|outer] [mss-clamp] [dscp inherit|<0-63>]
  ipsec sa set <index> urpf strict|loose|off   check the sources an inbound SA decrypts
  ipsec sa set <index> dscp inherit|<0-63>     an outbound tunnel-mode SA's outer DSCP, in place
  ipsec sa set <index> [local <addr>] [remote <addr>] [udp-encap on|off] [udp-ports <src> <dst>]
                                       move an SA's endpoints in place (NAT rebinding, MOBIKE)
  ipsec sa del <index>
  show ipsec sa [<index>]              SAs (or one) and their counters, both ways (never their keys)
  pcap trace <interface> <file> [<count>]   capture received and sent frames (default 10000)
  pcap trace off <interface>
  pcap trace drop <file> [<count>] [node <name>] [error <counter>]
                                       capture dropped packets, each with its reason (pcapng;
                                       default 10000); `pcap trace drop off` stops it
  ipsec policy add spd <n> inbound|outbound [priority <n>] protect <sa>|bypass|discard
         [local <sel>] [remote <sel>] [protocol <p>] [local-ports <range>] [remote-ports <range>]
         (<sel>: any, a prefix or <addr>-<addr>; <range>: any, <port> or <lo>-<hi>)
  ipsec policy del <id>
  ipsec spd bind <spd> <interface> | ipsec spd unbind <interface>
  show ipsec spd                       policies in classification order, bindings, version
  show ipsec flow-cache                size, hits, revalidated, misses, stale, overwrites (all workers);
                                       flow cache off with [spd] flow_cache = 0
  punt port add tcp|udp <port> [owner <name>]
                                       hand one more port of the gateway's addresses to the
                                       host's stack through [punt]'s link (kept by reloads)
  punt port del tcp|udp <port> [owner <name>]
  show punt                            [punt]'s link and host, each port and where it came
                                       from (file, or api and its owner)
  reload [<file>]                      read the config file again and apply what changed
                                       (also on SIGHUP); a file with errors changes nothing";

/// `punt port add|del tcp|udp <port> [owner <name>]`.
fn punt_port(op: &str, rest: &[&str]) -> Result<Request, String> {
    let usage = || format!("expected: punt port {op} tcp|udp <port> [owner <name>]");
    let (protocol, port, owner) = match rest {
        [p, n] => (p, n, None),
        [p, n, "owner", o] => (p, n, Some(o.to_string())),
        _ => return Err(usage()),
    };
    let protocol = match *protocol {
        "tcp" => lb::Protocol::Tcp,
        "udp" => lb::Protocol::Udp,
        other => return Err(format!("protocol {other:?}: expected tcp or udp")),
    };
    let port = port_word("port", port)?;
    Ok(match op {
        "add" => Request::PuntPortAdd { protocol, port, owner },
        _ => Request::PuntPortDel { protocol, port, owner },
    })
}

pub fn parse(words: &[String]) -> Result<Request, String> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["show", "runtime" | "run"] => Ok(Request::ShowRuntime {}),
        ["show", "instance"] => Ok(Request::ShowInstance {}),
        ["show", "metrics"] => Ok(Request::Metrics {}),
        ["reload"] => Ok(Request::Reload { file: None }),
        ["reload", file] => Ok(Request::Reload { file: Some(file.to_string()) }),
        ["show", "graph"] => Ok(Request::ShowGraph {}),
        ["show", "errors" | "error"] => Ok(Request::ShowErrors { all: false }),
        ["show", "errors" | "error", "all"] => Ok(Request::ShowErrors { all: true }),
        ["show", "trace"] => Ok(Request::ShowTrace {}),
        ["trace", "add", node, count] => Ok(Request::TraceAdd {
            node: node.to_string(),
            count: count.parse().map_err(|_| format!("count {count:?}: expected a number"))?,
        }),
        ["trace", "clear"] | ["clear", "trace"] => Ok(Request::TraceClear {}),
        ["show", "interfaces" | "interface" | "int"] => Ok(Request::ShowInterfaces {}),
        ["set", "interface", interface, "urpf", mode] => Ok(Request::SetInterfaceUrpf {
            interface: interface.to_string(),
            mode: mode.parse().map_err(|e| format!("set interface {interface} urpf: {e}"))?,
        }),
        ["show", "ip" | "ip6", "fib"] => Ok(Request::ShowIpFib { limit: None }),
        ["show", "ip" | "ip6", "fib", "limit", n] => {
            Ok(Request::ShowIpFib { limit: Some(n.parse().map_err(|_| format!("limit {n:?}: expected a number (0: all)"))?) })
        }
        ["show", "ip" | "ip6", "fib", q] => Ok(Request::ShowIpFibEntry { query: q.to_string() }),
        ["show", "neighbours" | "neighbors"] | ["show", "ip", "neighbours" | "neighbors"] => Ok(Request::ShowNeighbours {}),
        ["ip", "route", "add", prefix, rest @ ..] if crate::fib::is_multipath_words(rest) => {
            crate::fib::multipath_add_request(prefix, rest)
        }
        ["ip", "route", "add", prefix, rest @ ..] => {
            let (via, interface, blackhole) = match rest {
                ["via", v] => (Some(v.to_string()), None, false),
                ["via", v, "interface" | "dev", i] => (Some(v.to_string()), Some(i.to_string()), false),
                ["interface" | "dev", i] => (None, Some(i.to_string()), false),
                ["blackhole"] => (None, None, true),
                _ => return Err("expected: ip route add <prefix> (via <addr> [interface <name>] | interface <name> | blackhole)".into()),
            };
            Ok(Request::IpRouteAdd { prefix: prefix.to_string(), via, interface, blackhole, paths: Vec::new() })
        }
        ["ip", "route", "del" | "delete", prefix] => Ok(Request::IpRouteDel { prefix: prefix.to_string() }),
        ["ip", "route", "batch", file] => crate::fib::batch_request(file),
        ["clear", "runtime" | "errors"] => Ok(Request::ClearRuntime {}),
        ["create", "interface", name, kind, rest @ ..] => crate::interfaces::parse_create(name, kind, rest),
        ["delete" | "del", "interface", name] => Ok(Request::DeleteInterface { name: name.to_string() }),
        ["create", "gtpu", "tunnel", rest @ ..] => gtpu_tunnel(rest).map(Request::CreateGtpuTunnel),
        ["delete" | "del", "gtpu", "tunnel", name] => Ok(Request::DeleteGtpuTunnel { name: name.to_string() }),
        ["show", "gtpu", "tunnels" | "tunnel"] => Ok(Request::ShowGtpuTunnels { limit: None }),
        ["set", "gtpu", "tunnel", name, rest @ ..] => crate::gtpu::parse_set(name, rest),
        ["show", "gtpu", "tunnels" | "tunnel", key @ ("teid" | "remote" | "ue"), value] => crate::gtpu::parse_find(key, value),
        ["create", "udp", "tunnel", rest @ ..] => udp_tunnel(rest).map(Request::CreateUdpTunnel),
        ["delete" | "del", "udp", "tunnel", name] => Ok(Request::DeleteUdpTunnel { name: name.to_string() }),
        ["show", "udp", "tunnels" | "tunnel"] => Ok(Request::ShowUdpTunnels {}),
        ["set", "udp", "tunnel", name, rest @ ..] => crate::udptun::parse_set(name, rest),
        ["show", "udp", "tunnels" | "tunnel", key @ ("remote" | "local" | "id"), value] => crate::udptun::parse_find(key, value),
        ["show", "pfcp", "associations" | "association"] => Ok(Request::ShowPfcpAssociations {}),
        ["show", "pfcp", "sessions" | "session"] => Ok(Request::ShowPfcpSessions { limit: None }),
        ["show", "lb", "services" | "service"] => Ok(Request::ShowLbServices { service: None }),
        ["show", "lb", "services" | "service", s] => Ok(Request::ShowLbServices { service: Some(s.to_string()) }),
        ["show", "lb", "digests" | "digest"] => Ok(Request::ShowLbDigests {}),
        ["show", "lb", "backends" | "backend"] => Ok(Request::ShowLbBackends { service: None }),
        ["show", "lb", "backends" | "backend", s] => Ok(Request::ShowLbBackends { service: Some(s.to_string()) }),
        ["show", "lb", "sessions" | "session", rest @ ..] => crate::lb::parse_show_sessions(rest),
        ["lb", rest @ ..] => crate::lb::parse_cli(rest),
        ["ipsec", "sa", "add", rest @ ..] => crate::ipsec::parse_sa_add(rest).map(Request::IpsecSaAdd),
        ["ipsec", "sa", "del" | "delete", index] => {
            Ok(Request::IpsecSaDel { index: index.parse().map_err(|_| format!("index {index:?}: expected a number"))? })
        }
        ["ipsec", "sa", "set", index, "urpf", mode] => Ok(Request::IpsecSaSet {
            index: index.parse().map_err(|_| format!("index {index:?}: expected a number"))?,
            urpf: Some(mode.parse().map_err(|e| format!("urpf {e}"))?),
            dscp: None,
        }),
        ["ipsec", "sa", "set", index, "dscp", d] => Ok(Request::IpsecSaSet {
            index: index.parse().map_err(|_| format!("index {index:?}: expected a number"))?,
            urpf: None,
            dscp: Some(d.parse().map_err(|e| format!("dscp {e}"))?),
        }),
        ["ipsec", "sa", "set", index, rest @ ..] => crate::ipsec::parse_sa_endpoints(index, rest).map(Request::IpsecSaUpdate),
        ["show", "ipsec", "sa" | "sas"] => Ok(Request::ShowIpsecSa { index: None }),
        ["show", "ipsec", "sa" | "sas", index] => {
            Ok(Request::ShowIpsecSa { index: Some(index.parse().map_err(|_| format!("index {index:?}: expected a number"))?) })
        }
        ["pcap", "trace", "drop", "off"] => Ok(Request::PcapTraceDropOff {}),
        ["pcap", "trace", "drop", file, rest @ ..] => parse_pcap_trace_drop(file, rest),
        ["pcap", "trace", "off", interface] => Ok(Request::PcapTraceOff { interface: interface.to_string() }),
        ["pcap", "trace", interface, file] => {
            Ok(Request::PcapTrace { interface: interface.to_string(), file: file.to_string(), count: None })
        }
        ["pcap", "trace", interface, file, count] => Ok(Request::PcapTrace {
            interface: interface.to_string(),
            file: file.to_string(),
            count: Some(count.parse().map_err(|_| format!("count {count:?}: expected a number"))?),
        }),
        ["show", "gtpu", "tunnels" | "tunnel", n] => {
            Ok(Request::ShowGtpuTunnels { limit: Some(n.parse().map_err(|_| format!("limit {n:?}: expected a number"))?) })
        }
        ["ipsec", "policy", "add", rest @ ..] => crate::spd::parse_policy(rest).map(Request::IpsecPolicyAdd),
        ["ipsec", "policy", "del" | "delete", id] => {
            Ok(Request::IpsecPolicyDel { id: id.parse().map_err(|_| format!("id {id:?}: expected a number"))? })
        }
        ["ipsec", "spd", "bind", spd, interface] => Ok(Request::IpsecSpdBind {
            spd: spd.parse().map_err(|_| format!("spd {spd:?}: expected a number"))?,
            interface: interface.to_string(),
        }),
        ["ipsec", "spd", "unbind", interface] => Ok(Request::IpsecSpdUnbind { interface: interface.to_string() }),
        ["show", "ipsec", "spd"] => Ok(Request::ShowIpsecSpd {}),
        ["show", "ipsec", "flow-cache"] => Ok(Request::ShowIpsecFlowCache {}),
        ["show", "punt"] => Ok(Request::ShowPunt {}),
        ["punt", "port", op @ ("add" | "del" | "delete"), rest @ ..] => punt_port(op, rest),
        _ => Err(unknown_command(&w)),
    }
}

/// "unknown command", with the commands of `HELP` nearest to what was typed.
fn unknown_command(w: &[&str]) -> String {
    let typed = w.iter().take(3).copied().collect::<Vec<_>>().join(" ");
    let mut scored: Vec<(usize, &str)> = HELP
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| {
            let cmd = l.trim().split("  ").next().unwrap_or("").trim();
            // Compare as many words as were typed (up to three): the command's fixed part.
            let head: Vec<&str> =
                cmd.split_whitespace().take_while(|x| !x.starts_with(['<', '[', '('])).take(w.len().clamp(1, 3)).collect();
            (edit_distance(&typed, &head.join(" ")), cmd)
        })
        .collect();
    scored.sort_by_key(|s| s.0);
    let best = scored.first().map_or(usize::MAX, |s| s.0);
    let near: Vec<&str> = scored.iter().filter(|s| s.0 == best && best <= (typed.len() / 3).max(1)).map(|s| s.1).take(3).collect();
    match near.as_slice() {
        [] => format!("unknown command {:?} (`vecgate ctl help` lists the commands)", w.join(" ")),
        _ => format!("unknown command {:?}; did you mean: {}? (`vecgate ctl help` lists the commands)", w.join(" "), near.join(" | ")),
    }
}

/// Levenshtein distance over characters, for suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = if ca == b[j] { prev } else { 1 + prev.min(row[j]).min(row[j + 1]) };
            prev = cur;
        }
    }
    row[b.len()]
}

/// A word `command` does not take, named with the words it does.
pub(crate) fn unknown_word(command: &str, word: &str, words: &[&str]) -> String {
    format!("{command}: unknown word {word:?} ({})", words.join(", "))
}

/// The words `create udp tunnel` takes, for the error that names one it does not.
const UDP_TUNNEL_WORDS: &[&str] = &[
    "local",
    "remote",
    "encap",
    "port",
    "src-ports",
    "key",
    "checksum",
    "ttl",
    "route",
    "mtu",
    "fragment",
    "urpf",
    "dscp",
    "accept-zero-checksum",
    "mss-clamp",
    "gre-checksum",
    "gre-sequence",
];

fn udp_tunnel(w: &[&str]) -> Result<crate::udptun::UdpTunnelConfig, String> {
    let mut c = crate::udptun::UdpTunnelConfig {
        local: String::new(),
        remote: String::new(),
        encap: udptun::Encap::Gue,
        port: None,
        src_port_min: None,
        src_port_max: None,
        key: None,
        gre_checksum: false,
        gre_sequence: false,
        checksum: None,
        accept_zero_checksum: false,
        ttl: None,
        mtu: None,
        fragment: Default::default(),
        tcp_mss_clamp: false,
        urpf: Default::default(),
        dscp: Default::default(),
        routes: Vec::new(),
    };
    let mut encap = false;
    let mut i = 0;
    while i < w.len() {
        let flag = match w[i] {
            "accept-zero-checksum" => Some(&mut c.accept_zero_checksum),
            "mss-clamp" => Some(&mut c.tcp_mss_clamp),
            "gre-checksum" => Some(&mut c.gre_checksum),
            "gre-sequence" => Some(&mut c.gre_sequence),
            _ => None,
        };
        if let Some(f) = flag {
            *f = true;
            i += 1;
            continue;
        }
        if !UDP_TUNNEL_WORDS.contains(&w[i]) {
            return Err(unknown_word("create udp tunnel", w[i], UDP_TUNNEL_WORDS));
        }
        let v = w.get(i + 1).copied().ok_or_else(|| format!("{} needs a value", w[i]))?;
        let num = |k: &str| -> Result<u32, String> {
            match v.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16),
                None => v.parse(),
            }
            .map_err(|_| format!("{k} {v:?}: expected a number"))
        };
        match w[i] {
            "local" => c.local = v.to_string(),
            "remote" => c.remote = v.to_string(),
            "encap" => {
                c.encap = v.parse()?;
                encap = true;
            }
            "port" => c.port = Some(port_word("port", v)?),
            "src-ports" => {
                let (lo, hi) = v.split_once('-').ok_or_else(|| format!("src-ports {v:?}: expected <min>-<max>"))?;
                c.src_port_min = Some(lo.parse().map_err(|_| format!("src-ports {v:?}: expected <min>-<max>"))?);
                c.src_port_max = Some(hi.parse().map_err(|_| format!("src-ports {v:?}: expected <min>-<max>"))?);
            }
            "key" => c.key = Some(num("key")?),
            "checksum" => c.checksum = Some(v.parse().map_err(|e| format!("checksum {e}"))?),
            "ttl" => c.ttl = Some(v.parse().map_err(|_| format!("ttl {v:?}: expected 1 to 255"))?),
            "route" => c.routes.push(v.to_string()),
            "mtu" => c.mtu = Some(mtu_word(v)?),
            "fragment" => c.fragment = v.parse().map_err(|e| format!("fragment {e}"))?,
            "urpf" => c.urpf = v.parse().map_err(|e| format!("urpf {e}"))?,
            "dscp" => c.dscp = v.parse().map_err(|e| format!("dscp {e}"))?,
            o => return Err(unknown_word("create udp tunnel", o, UDP_TUNNEL_WORDS)),
        }
        i += 2;
    }
    if c.local.is_empty() || c.remote.is_empty() || !encap {
        return Err("create udp tunnel needs local <addr>, remote <addr> and encap gue|gre|direct".into());
    }
    Ok(c)
}

/// A tunnel's `mtu <n>` word (the range is checked with the rest of the tunnel).
fn mtu_word(v: &str) -> Result<u16, String> {
    v.parse().map_err(|_| format!("mtu {v:?}: expected a number of bytes"))
}

/// A port word (`port 2152`, `udp-ports 4500 4500`, a service's port), its key named on
/// error: every command words a bad port the same way. A port of 0 is refused, where it
/// is, with the rest of the object.
pub(crate) fn port_word(k: &str, v: &str) -> Result<u16, String> {
    v.parse().map_err(|_| format!("{k} {v:?}: expected a port, 1 to 65535"))
}

/// An address word (`remote 198.18.1.9`, a service's address), its key named on error.
pub(crate) fn address_word(k: &str, v: &str) -> Result<std::net::IpAddr, String> {
    v.parse().map_err(|_| format!("{k} {v:?}: expected an IPv4 or IPv6 address"))
}

/// A 32-bit number word such as a TEID (`256`, `0x100`), its key named on error.
pub(crate) fn u32_word(k: &str, v: &str) -> Result<u32, String> {
    let r = match v.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => format!("{k} {v}: out of range, expected 1 to 4294967295"),
        _ => format!("{k} {v:?}: expected a number (decimal, or hex with 0x)"),
    })
}

/// The words `create gtpu tunnel` takes, for the error that names one it does not.
const GTPU_TUNNEL_WORDS: &[&str] = &[
    "local",
    "remote",
    "teid-in",
    "teid-out",
    "qfi",
    "ue",
    "mtu",
    "fragment",
    "urpf",
    "dscp",
    "checksum",
    "src-port",
    "decap-next",
    "mss-clamp",
    "uplink",
    "sequence",
    "accept-zero-checksum",
];

fn gtpu_tunnel(w: &[&str]) -> Result<crate::gtpu::GtpuTunnelConfig, String> {
    use crate::gtpu::{DecapNextName, GtpuTunnelConfig};
    let num = u32_word;
    // Both TEIDs are required words: the typed API refuses 0 for either, but a
    // missing word deserves its own message, not the one for a reserved value.
    for k in ["teid-in", "teid-out"] {
        if !w.contains(&k) {
            return Err(format!("{k} <n> is required"));
        }
    }
    let mut c = GtpuTunnelConfig {
        local: String::new(),
        remote: String::new(),
        teid_in: 0,
        teid_out: 0,
        qfi: None,
        pdu_direction: Default::default(),
        decap_next: DecapNextName::Ip4,
        decap_interface: None,
        sequence: false,
        checksum: None,
        accept_zero_checksum: false,
        src_port: Default::default(),
        ue: None,
        mtu: None,
        fragment: Default::default(),
        tcp_mss_clamp: false,
        urpf: Default::default(),
        dscp: Default::default(),
    };
    let mut i = 0;
    while i < w.len() {
        let v = w.get(i + 1).copied();
        let need = || v.ok_or_else(|| format!("{} needs a value", w[i]));
        match w[i] {
            "local" => c.local = need()?.to_string(),
            "remote" => c.remote = need()?.to_string(),
            "teid-in" => c.teid_in = num("teid-in", need()?)?,
            "teid-out" => c.teid_out = num("teid-out", need()?)?,
            "qfi" => c.qfi = Some(need()?.parse().map_err(|_| "qfi: expected 0 to 63".to_string())?),
            "ue" => c.ue = Some(need()?.to_string()),
            "mtu" => c.mtu = Some(mtu_word(need()?)?),
            "fragment" => c.fragment = need()?.parse().map_err(|e| format!("fragment {e}"))?,
            "urpf" => c.urpf = need()?.parse().map_err(|e| format!("urpf {e}"))?,
            "dscp" => c.dscp = need()?.parse().map_err(|e| format!("dscp {e}"))?,
            "mss-clamp" => {
                c.tcp_mss_clamp = true;
                i += 1;
                continue;
            }
            "checksum" => c.checksum = Some(need()?.parse().map_err(|e| format!("checksum {e}"))?),
            "src-port" => {
                c.src_port = match need()? {
                    "fixed" => gtpu::SrcPort::Fixed,
                    "flow-hash" => gtpu::SrcPort::FlowHash,
                    o => return Err(format!("src-port {o:?}: expected fixed or flow-hash")),
                }
            }
            "decap-next" => {
                c.decap_next = match need()? {
                    "ip4" => DecapNextName::Ip4,
                    "ip6" => DecapNextName::Ip6,
                    "ip" => DecapNextName::Ip,
                    "ethernet" => {
                        let iface = w.get(i + 2).ok_or("decap-next ethernet needs an interface")?;
                        c.decap_interface = Some(iface.to_string());
                        i += 1;
                        DecapNextName::Ethernet
                    }
                    o => return Err(format!("decap-next {o:?}: expected ip4, ip6, ip or ethernet <interface>")),
                }
            }
            "uplink" => {
                c.pdu_direction = gtpu::PduDirection::Uplink;
                i += 1;
                continue;
            }
            "sequence" => {
                c.sequence = true;
                i += 1;
                continue;
            }
            "accept-zero-checksum" => {
                c.accept_zero_checksum = true;
                i += 1;
                continue;
            }
            o => return Err(unknown_word("create gtpu tunnel", o, GTPU_TUNNEL_WORDS)),
        }
        i += 2;
    }
    if c.local.is_empty() || c.remote.is_empty() {
        return Err("create gtpu tunnel needs local <addr> and remote <addr>".into());
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Request, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    /// A bad port or address says which word it was and what was expected, the same way in
    /// every command (a service's port and address were quoted without their key).
    #[test]
    fn a_bad_port_or_address_is_named_by_its_key() {
        for (words, says) in [
            ("lb service add web cluster_ip 198.18.128.20 70000 tcp", "port \"70000\": expected a port, 1 to 65535"),
            ("lb service add web cluster_ip 198.18.128.20/32 80 tcp", "vip \"198.18.128.20/32\": expected an IPv4 or IPv6 address"),
            ("lb service add web cluster_ip 198.18.128.20 80 tcp gue-port x", "gue-port \"x\": expected a port, 1 to 65535"),
            (
                "lb service add web cluster_ip 198.18.128.20 80 tcp backend 198.19.1.1:99999",
                "backend port \"99999\": expected a port, 1 to 65535",
            ),
            (
                "lb service add web cluster_ip 198.18.128.20 80 tcp backend 198.19.1:80",
                "backend \"198.19.1\": expected an IPv4 or IPv6 address",
            ),
            ("lb backend add web 198.19.1.1 65536", "port \"65536\": expected a port, 1 to 65535"),
            ("lb backend del web 198.19.1.1/32 80", "address \"198.19.1.1/32\": expected an IPv4 or IPv6 address"),
            ("lb backend set web 198.19.1.1 -1 weight 2", "port \"-1\": expected a port, 1 to 65535"),
            ("punt port add udp 70000", "port \"70000\": expected a port, 1 to 65535"),
            ("create udp tunnel local 198.18.1.1 remote 198.18.1.9 encap gue port 70000", "port \"70000\": expected a port, 1 to 65535"),
            ("set udp tunnel udp_tunnel0 port 70000", "port \"70000\": expected a port, 1 to 65535"),
            ("ipsec sa set 1 udp-ports 70000 4500", "udp-ports \"70000\": expected a port, 1 to 65535"),
        ] {
            assert_eq!(p(words).unwrap_err(), says, "{words}");
        }
    }

    #[test]
    fn interfaces_are_created_and_deleted_by_words() {
        let Ok(Request::CreateInterface(ic)) =
            p("create interface up0 af_packet host-if veth3 mac 02:00:00:00:00:09 mtu 9000 address 198.18.7.1/24 address 2001:db8:7::1/64 vnet-hdr off")
        else {
            panic!("expected CreateInterface")
        };
        assert_eq!((ic.name.as_str(), ic.kind, ic.host_if.as_deref()), ("up0", crate::config::InterfaceKind::AfPacket, Some("veth3")));
        assert_eq!((ic.mac.as_deref(), ic.mtu, ic.vnet_hdr), (Some("02:00:00:00:00:09"), 9000, Some(false)));
        assert_eq!(ic.addresses, ["198.18.7.1/24", "2001:db8:7::1/64"]);
        let Ok(Request::CreateInterface(ic)) = p("create interface t0 tap host-if vgt0") else { panic!("expected CreateInterface") };
        assert_eq!((ic.kind, ic.mtu), (crate::config::InterfaceKind::Tap, 1500));
        assert_eq!(p("delete interface up0"), Ok(Request::DeleteInterface { name: "up0".into() }));
        assert!(p("create interface x pg").unwrap_err().contains("start-up"));
        assert!(p("create interface x af_packet mtu big").unwrap_err().contains("mtu"));
        assert!(p("create interface x af_packet vnet-hdr maybe").unwrap_err().contains("on or off"));
        assert!(p("create interface x af_packet colour red").unwrap_err().contains("colour"));
        assert!(p("create interface x af_packet host-if").unwrap_err().contains("needs a value"));
    }

    #[test]
    fn an_unknown_tunnel_or_sa_word_is_named_with_the_words_there_are() {
        let gtpu = "create gtpu tunnel local 198.18.0.1 remote 198.18.0.2 teid-in 1 teid-out 2";
        let udp = "create udp tunnel local 198.18.0.1 remote 198.18.0.2";
        let sa = "ipsec sa add 1 spi 5 inbound alg null local 198.18.0.1 remote 198.18.0.2";
        let cases = [
            ("create gtpu tunnel", gtpu, GTPU_TUNNEL_WORDS),
            ("create udp tunnel", udp, UDP_TUNNEL_WORDS),
            ("ipsec sa add", sa, crate::ipsec::SA_ADD_WORDS),
        ];
        for (what, line, words) in cases {
            let e = p(&format!("{line} colour red")).unwrap_err();
            // Last on the line too: named as unknown, not as wanting a value.
            assert_eq!(p(&format!("{line} colour")).unwrap_err(), e);
            assert_eq!(e, format!("{what}: unknown word \"colour\" ({})", words.join(", ")));
            // Every word listed is one it takes (whatever it then says of the value).
            for w in words {
                let e = p(&format!("{line} {w} x")).err().unwrap_or_default();
                assert!(!e.contains(&format!("unknown word {w:?}")), "{w}: {e}");
            }
        }
    }

    #[test]
    fn typos_get_the_nearest_commands() {
        let e = p("shwo runtime").unwrap_err();
        assert!(e.contains("did you mean: show runtime?"), "{e}");
        assert!(!e.contains("commands:\n"), "the whole help is not repeated: {e}");
        let e = p("ip rout add 198.19.0.0/16 blackhole").unwrap_err();
        assert!(e.contains("did you mean: ip route add"), "{e}");
        let e = p("frobnicate").unwrap_err();
        assert!(e.contains("unknown command") && !e.contains("did you mean"), "{e}");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn commands() {
        assert_eq!(p("show runtime"), Ok(Request::ShowRuntime {}));
        assert_eq!(p("show instance"), Ok(Request::ShowInstance {}));
        assert_eq!(p("trace add pg-input 10"), Ok(Request::TraceAdd { node: "pg-input".into(), count: 10 }));
        assert_eq!(
            p("ip route add 198.19.0.0/16 via 198.18.2.2"),
            Ok(Request::IpRouteAdd {
                prefix: "198.19.0.0/16".into(),
                via: Some("198.18.2.2".into()),
                interface: None,
                blackhole: false,
                paths: Vec::new()
            })
        );
        assert!(p("ip route add 198.19.0.0/16 sideways").is_err());
        assert!(p("trace add pg-input many").is_err());
        assert_eq!(p("show ipsec sa"), Ok(Request::ShowIpsecSa { index: None }));
        assert_eq!(p("show ipsec sa 1000"), Ok(Request::ShowIpsecSa { index: Some(1000) }));
        assert!(p("show ipsec sa first").unwrap_err().contains("index \"first\": expected a number"));
        let one: Request = serde_json::from_str(r#"{"op":"show_ipsec_sa","index":7}"#).unwrap();
        assert_eq!(
            (one, serde_json::from_str::<Request>(r#"{"op":"show_ipsec_sa"}"#).unwrap()),
            (Request::ShowIpsecSa { index: Some(7) }, Request::ShowIpsecSa { index: None })
        );
        assert_eq!(
            p("ipsec sa set 3 remote 198.18.0.9 udp-ports 4500 61000"),
            Ok(Request::IpsecSaUpdate(crate::ipsec::SaEndpoints {
                index: 3,
                remote: Some("198.18.0.9".into()),
                udp_src_port: Some(4500),
                udp_dst_port: Some(61000),
                ..Default::default()
            }))
        );
        assert_eq!(
            p("ipsec sa set 3 local 198.18.0.1 udp-encap off"),
            Ok(Request::IpsecSaUpdate(crate::ipsec::SaEndpoints {
                index: 3,
                local: Some("198.18.0.1".into()),
                udp_encap: Some(false),
                ..Default::default()
            }))
        );
        assert_eq!(p("ipsec sa set 3 urpf strict"), Ok(Request::IpsecSaSet { index: 3, urpf: Some(ip::urpf::Urpf::Strict), dscp: None }));
        let dscp = |d| Ok(Request::IpsecSaSet { index: 3, urpf: None, dscp: Some(d) });
        assert_eq!(p("ipsec sa set 3 dscp 46"), dscp(ip::outer::tos::Dscp::Fixed(46)));
        assert_eq!(p("ipsec sa set 3 dscp inherit"), dscp(ip::outer::tos::Dscp::Inherit));
        let e = p("ipsec sa set 3 dscp 64").unwrap_err();
        assert_eq!(e, "dscp 64: expected \"inherit\" or a DSCP 0 to 63");
        // The JSON form: either setting, or both; the old uRPF-only request still reads.
        let r: Request = serde_json::from_str(r#"{"op":"ipsec_sa_set","index":3,"urpf":"strict"}"#).unwrap();
        assert_eq!(r, Request::IpsecSaSet { index: 3, urpf: Some(ip::urpf::Urpf::Strict), dscp: None });
        let r: Request = serde_json::from_str(r#"{"op":"ipsec_sa_set","index":3,"dscp":"inherit"}"#).unwrap();
        assert_eq!(r, Request::IpsecSaSet { index: 3, urpf: None, dscp: Some(ip::outer::tos::Dscp::Inherit) });
        assert!(p("ipsec sa set 3").unwrap_err().contains("needs local, remote"));
        assert!(p("ipsec sa set 3 udp-ports 4500").unwrap_err().contains("udp-ports needs a value"));
        assert!(p("ipsec sa set 3 udp-encap maybe").unwrap_err().contains("expected on or off"));
        let j: Request = serde_json::from_str(r#"{"op":"ipsec_sa_update","index":3,"remote":"198.18.0.9","udp_dst_port":61000}"#).unwrap();
        assert_eq!(
            j,
            Request::IpsecSaUpdate(crate::ipsec::SaEndpoints {
                index: 3,
                remote: Some("198.18.0.9".into()),
                udp_dst_port: Some(61000),
                ..Default::default()
            })
        );
        assert!(p("make coffee").unwrap_err().contains("unknown command"));
    }

    #[test]
    fn gtpu_commands() {
        let Ok(Request::CreateGtpuTunnel(c)) =
            p("create gtpu tunnel local 198.18.1.1 remote 198.18.1.2 teid-in 0x10 teid-out 32 qfi 9 sequence ue 198.19.0.1/32")
        else {
            panic!("expected a create request")
        };
        assert_eq!((c.teid_in, c.teid_out, c.qfi, c.sequence), (16, 32, Some(9), true));
        assert_eq!(c.ue.as_deref(), Some("198.19.0.1/32"));
        assert!(p("create gtpu tunnel local 198.18.1.1 remote 198.18.1.2 teid-in x").is_err());
        assert!(p("create gtpu tunnel teid-in 1").is_err());
        let missing = p("create gtpu tunnel local 198.18.1.1 remote 198.18.1.2 teid-in 1").unwrap_err();
        assert!(missing.contains("teid-out <n> is required"), "{missing}");
        let missing = p("create gtpu tunnel local 198.18.1.1 remote 198.18.1.2 teid-out 1").unwrap_err();
        assert!(missing.contains("teid-in <n> is required"), "{missing}");
        let big = p("create gtpu tunnel local 198.18.1.1 remote 198.18.1.2 teid-in 4294967296 teid-out 1").unwrap_err();
        assert!(big.contains("out of range"), "{big}");
        assert_eq!(p("delete gtpu tunnel gtpu_tunnel3"), Ok(Request::DeleteGtpuTunnel { name: "gtpu_tunnel3".into() }));
        let set = p("set gtpu tunnel gtpu_tunnel3 remote 198.18.1.9 teid-out 0x100 qfi 5").unwrap();
        let want = Request::SetGtpuTunnel {
            name: "gtpu_tunnel3".into(),
            remote: Some("198.18.1.9".into()),
            teid_out: Some(256),
            qfi: Some(5),
            dscp: None,
        };
        assert_eq!(set, want);
        assert!(p("set gtpu tunnel gtpu_tunnel3").unwrap_err().contains("needs remote"));
        assert!(p("set gtpu tunnel gtpu_tunnel3 teid-in 5").unwrap_err().contains("cannot be changed in place"));
        assert!(p("set gtpu tunnel gtpu_tunnel3 teid-out").unwrap_err().contains("needs a value"));
        assert!(p("set gtpu tunnel gtpu_tunnel3 teid-out 4294967296").unwrap_err().contains("out of range"));
        let Ok(Request::SetGtpuTunnel { dscp, remote: None, teid_out: None, qfi: None, .. }) = p("set gtpu tunnel gtpu_tunnel3 dscp 46")
        else {
            panic!("a dscp-only set")
        };
        assert_eq!(dscp, Some(ip::outer::tos::Dscp::Fixed(46)));
        assert!(p("set gtpu tunnel gtpu_tunnel3 dscp ef").unwrap_err().ends_with("expected \"inherit\" or a DSCP 0 to 63"));
        let find = |teid, remote: Option<&str>, ue: Option<&str>| Request::FindGtpuTunnels {
            teid,
            remote: remote.map(Into::into),
            ue: ue.map(Into::into),
        };
        assert_eq!(p("show gtpu tunnel teid 256"), Ok(find(Some(256), None, None)));
        assert_eq!(p("show gtpu tunnels remote 198.18.1.2"), Ok(find(None, Some("198.18.1.2"), None)));
        assert_eq!(p("show gtpu tunnel ue 198.19.0.1"), Ok(find(None, None, Some("198.19.0.1"))));
        assert_eq!(p("show gtpu tunnels 5"), Ok(Request::ShowGtpuTunnels { limit: Some(5) }));
        let Ok(Request::CreateUdpTunnel(u)) =
            p("create udp tunnel local 198.18.1.1 remote 198.18.1.2 encap gre key 0x10 src-ports 1000-2000 route 198.19.0.0/16 route 198.20.0.0/16")
        else {
            panic!("udp tunnel")
        };
        assert_eq!((u.encap, u.key, u.src_port_min, u.src_port_max), (udptun::Encap::Gre, Some(16), Some(1000), Some(2000)));
        assert_eq!(u.routes.len(), 2);
        assert!(p("create udp tunnel local 198.18.1.1 remote 198.18.1.2").is_err(), "encap is required");
        assert!(p("create udp tunnel local 198.18.1.1 remote 198.18.1.2 encap vxlan").is_err());
        assert!(p("create udp tunnel local 198.18.1.1 remote 198.18.1.2 encap gue src-ports 5").is_err());
        // The JSON form is the config table's fields plus the op.
        let r: Request =
            serde_json::from_str(r#"{"op":"create_gtpu_tunnel","local":"2001:db8::1","remote":"2001:db8::2","teid_in":1,"teid_out":2,"checksum":"zero","accept_zero_checksum":true}"#)
                .unwrap();
        assert!(matches!(r, Request::CreateGtpuTunnel(ref c) if c.accept_zero_checksum && c.checksum == Some(gtpu::ChecksumMode::Zero)));
        assert!(serde_json::from_str::<Request>(
            r#"{"op":"create_gtpu_tunnel","local":"a","remote":"b","teid_in":1,"teid_out":2,"bogus":1}"#
        )
        .is_err());
    }

    /// `dscp inherit|<0-63>` on both tunnel kinds' create, in words and in JSON; any
    /// other value refused saying what is expected.
    #[test]
    fn tunnel_dscp_words() {
        use ip::outer::tos::Dscp;
        let gtpu = "create gtpu tunnel local 198.18.1.1 remote 198.18.1.2 teid-in 1 teid-out 2";
        let udp = "create udp tunnel local 198.18.1.1 remote 198.18.1.2 encap gue";
        for (w, want) in [("", Dscp::Inherit), (" dscp inherit", Dscp::Inherit), (" dscp 46", Dscp::Fixed(46)), (" dscp 0", Dscp::Fixed(0))]
        {
            let Ok(Request::CreateGtpuTunnel(g)) = p(&format!("{gtpu}{w}")) else { panic!("{w}") };
            assert_eq!(g.dscp, want, "{w}");
            let Ok(Request::CreateUdpTunnel(u)) = p(&format!("{udp}{w}")) else { panic!("{w}") };
            assert_eq!(u.dscp, want, "{w}");
        }
        for line in [gtpu, udp] {
            for bad in ["64", "ef", "-3"] {
                let e = p(&format!("{line} dscp {bad}")).unwrap_err();
                assert!(e.starts_with("dscp ") && e.ends_with("expected \"inherit\" or a DSCP 0 to 63"), "{e}");
            }
        }
        let r: Request =
            serde_json::from_str(r#"{"op":"create_udp_tunnel","local":"2001:db8::1","remote":"2001:db8::2","encap":"gre","dscp":10}"#)
                .unwrap();
        assert!(matches!(r, Request::CreateUdpTunnel(ref c) if c.dscp == Dscp::Fixed(10)), "{r:?}");
        let r: Request = serde_json::from_str(
            r#"{"op":"create_gtpu_tunnel","local":"2001:db8::1","remote":"2001:db8::2","teid_in":1,"teid_out":2,"dscp":"inherit"}"#,
        )
        .unwrap();
        assert!(matches!(r, Request::CreateGtpuTunnel(ref c) if c.dscp == Dscp::Inherit), "{r:?}");
        let e =
            serde_json::from_str::<Request>(r#"{"op":"create_udp_tunnel","local":"a","remote":"b","encap":"gue","dscp":99}"#).unwrap_err();
        assert!(e.to_string().contains("expected \"inherit\" or a DSCP 0 to 63"), "{e}");
    }

    #[test]
    fn json_shape_is_stable() {
        let r: Request = serde_json::from_str(r#"{"op":"ip_route_add","prefix":"2001:db8:5::/48","via":"2001:db8:2::2"}"#).unwrap();
        assert_eq!(
            r,
            Request::IpRouteAdd {
                prefix: "2001:db8:5::/48".into(),
                via: Some("2001:db8:2::2".into()),
                interface: None,
                blackhole: false,
                paths: Vec::new()
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"show_runtime","extra":1}"#).is_err());
    }
}

/// `pcap trace drop <file> [<count>] [node <name>] [error <counter>]`.
fn parse_pcap_trace_drop(file: &str, rest: &[&str]) -> Result<Request, String> {
    let (mut count, mut node, mut error) = (None, None, None);
    let mut words = rest.iter();
    while let Some(&w) = words.next() {
        match w {
            "node" | "error" => {
                let v = words.next().ok_or_else(|| format!("pcap trace drop: `{w}` needs a name"))?.to_string();
                *(if w == "node" { &mut node } else { &mut error }) = Some(v);
            }
            n if count.is_none() => {
                count = Some(
                    n.parse()
                        .map_err(|_| format!("pcap trace drop: {n:?}: expected a packet count, `node <name>` or `error <counter>`"))?,
                )
            }
            other => return Err(format!("pcap trace drop: unexpected {other:?}; expected `node <name>` or `error <counter>`")),
        }
    }
    Ok(Request::PcapTraceDrop { file: file.to_string(), count, node, error })
}
