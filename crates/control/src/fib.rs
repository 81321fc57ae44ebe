//! Routes in bulk (issue 23): the route file format that `ip route add` of many prefixes,
//! `vecgate bench --routes` and `scripts/bench-vs-vpp.sh` share.
//!
//! One route per line, in the words of `ip route add` after the prefix:
//!
//! ```text
//! # comment
//! 198.19.0.0/16 via 198.18.1.2
//! 198.19.7.0/24 via 198.18.1.3 interface null0
//! 2001:db8:200::/40 interface null0
//! 198.19.9.0/24 blackhole
//! 198.19.8.0/24 via 198.18.1.2 weight 3 via 198.18.2.2 weight 1
//! 198.19.6.0/24 interface udp_tunnel0 interface udp_tunnel1
//! ```
//!
//! A route with several paths (`via …` or `interface …`, each with an optional
//! `weight`, 1 by default) is an ECMP route (`ip::multipath`): each flow takes one path,
//! the flows spread by weight.

use crate::dataplane::route_target;
use ip::state::Path;
use ip::{Prefix, RouteTarget};
use serde::{Deserialize, Serialize};

/// One path of an ECMP route as the config (`[[route]] paths = [{ via = "…", weight = 3 }]`)
/// and the API (`ip_route_add` with `paths`) give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutePath {
    pub via: Option<String>,
    pub interface: Option<String>,
    /// Default 1.
    pub weight: Option<u32>,
}

/// A route's target from its fields: `via`/`interface`/`blackhole`, or `paths`. `rename`
/// maps interface names (a reload renames tunnels). The error names the field after the
/// route (`.paths[1].via`, or `` for the route as a whole) and what was expected.
pub fn target_from_fields(
    via: Option<&str>,
    interface: Option<&str>,
    blackhole: bool,
    paths: &[RoutePath],
    rename: impl Fn(&str) -> String,
) -> Result<RouteTarget, (String, String)> {
    if paths.is_empty() {
        let interface = interface.map(&rename);
        return route_target(via, interface.as_deref(), blackhole).map_err(|m| (String::new(), m));
    }
    if via.is_some() || interface.is_some() || blackhole {
        return Err((".paths".into(), "a route with `paths` takes its next hops there, not also `via`, `interface` or `blackhole`".into()));
    }
    if paths.len() > ip::multipath::MAX_PATHS {
        return Err((".paths".into(), format!("{} paths: expected at most {}", paths.len(), ip::multipath::MAX_PATHS)));
    }
    let mut out = Vec::with_capacity(paths.len());
    for (i, p) in paths.iter().enumerate() {
        if p.weight.is_some_and(|w| !(1..=ip::multipath::MAX_WEIGHT).contains(&w)) {
            return Err((format!(".paths[{i}].weight"), format!("expected 1 to {}", ip::multipath::MAX_WEIGHT)));
        }
        let interface = p.interface.as_deref().map(&rename);
        let target = route_target(p.via.as_deref(), interface.as_deref(), false)
            .map_err(|m| (format!(".paths[{i}]"), m.replace("`blackhole = true`", "(a path is not a blackhole)")))?;
        out.push(Path { target, weight: p.weight.unwrap_or(1) });
    }
    Ok(multipath_target(out))
}

/// Several paths make a multipath route; one path is a plain route (its weight moot).
pub fn multipath_target(mut paths: Vec<Path>) -> RouteTarget {
    if paths.len() == 1 && (1..=ip::multipath::MAX_WEIGHT).contains(&paths[0].weight) {
        return paths.remove(0).target;
    }
    RouteTarget::Multipath(paths)
}

/// The words of one route's paths: `via <addr> [interface <if>] [weight <n>]` or
/// `interface <if> [weight <n>]`, repeated. The error names the word that is wrong.
pub fn parse_paths(words: &[&str]) -> Result<Vec<RoutePath>, String> {
    let mut out: Vec<RoutePath> = Vec::new();
    let mut rest = words;
    while !rest.is_empty() {
        let (path, tail) = match rest {
            ["via", a, "interface" | "dev", i, tail @ ..] => {
                (RoutePath { via: Some(a.to_string()), interface: Some(i.to_string()), weight: None }, tail)
            }
            ["via", a, tail @ ..] => (RoutePath { via: Some(a.to_string()), interface: None, weight: None }, tail),
            ["interface" | "dev", i, tail @ ..] => (RoutePath { via: None, interface: Some(i.to_string()), weight: None }, tail),
            _ => {
                return Err(format!(
                    "expected via <addr> [interface <name>] [weight <n>] or interface <name> [weight <n>], not {:?}",
                    rest.join(" ")
                ))
            }
        };
        let (weight, tail) = match tail {
            ["weight", w, tail @ ..] => (
                Some(w.parse::<u32>().map_err(|_| format!("weight {w:?}: expected a number from 1 to {}", ip::multipath::MAX_WEIGHT))?),
                tail,
            ),
            _ => (None, tail),
        };
        out.push(RoutePath { weight, ..path });
        rest = tail;
    }
    Ok(out)
}

/// Whether `ip route add`'s words after the prefix are more than one plain target
/// (several paths, or a weight), which takes the `paths` form of the request.
pub fn is_multipath_words(rest: &[&str]) -> bool {
    rest.iter().filter(|w| **w == "via").count() > 1
        || rest.iter().filter(|w| **w == "interface" || **w == "dev").count() > 1 && !rest.contains(&"via")
        || rest.contains(&"weight")
}

/// `ip route add <prefix> via A [weight n] via B [weight m] …` as a request.
pub fn multipath_add_request(prefix: &str, rest: &[&str]) -> Result<crate::api::Request, String> {
    Ok(crate::api::Request::IpRouteAdd {
        prefix: prefix.to_string(),
        via: None,
        interface: None,
        blackhole: false,
        paths: parse_paths(rest)?,
    })
}

/// How often the control plane reads the links of the interfaces multipath routes
/// leave by (a sysfs read each).
const LINK_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// When the links were last read.
#[derive(Debug)]
pub struct LinkPoll {
    next: std::time::Instant,
}

impl Default for LinkPoll {
    fn default() -> Self {
        LinkPoll { next: std::time::Instant::now() }
    }
}

/// While some route has several paths: read the host links of kernel-backed interfaces
/// (af_packet, af_xdp, tap) and mark those down, so their paths are skipped until the
/// link is back. Returns whether anything changed (the caller publishes).
pub fn poll_links(c: &mut crate::dataplane::Control) -> bool {
    let now = std::time::Instant::now();
    if !c.state.has_multipath() || now < c.link_poll.next {
        return false;
    }
    c.link_poll.next = now + LINK_POLL;
    let mut changed = false;
    for (i, ic) in c.applied.interfaces.iter().enumerate() {
        let Some(host) = ic.host_if.as_deref() else { continue };
        let Ok(idx) = c.state.if_index(&ic.name) else { continue };
        debug_assert_eq!(idx.get(), i);
        changed |= c.state.set_link_down(idx, !io::linux::link_up(host));
    }
    changed
}

/// One route as a line of a route file (the inverse of [`parse_route_line`]).
pub fn route_line(p: &Prefix, t: &RouteTarget) -> String {
    match t {
        RouteTarget::Multipath(paths) => {
            let words: Vec<String> = paths.iter().map(|x| format!("{} weight {}", path_words(&x.target), x.weight)).collect();
            format!("{p} {}", words.join(" "))
        }
        RouteTarget::Via { next_hop, interface: None } => format!("{p} via {next_hop}"),
        RouteTarget::Via { next_hop, interface: Some(i) } => format!("{p} via {next_hop} interface {i}"),
        RouteTarget::Interface(i) => format!("{p} interface {i}"),
        RouteTarget::Blackhole => format!("{p} blackhole"),
        RouteTarget::Tunnel(r) => format!("{p} interface {}", r.if_name()),
    }
}

/// A path's words (`via A [interface I]`, `interface I`).
fn path_words(t: &RouteTarget) -> String {
    let line = route_line(&Prefix::covering(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0), t);
    line.split_once(' ').map_or(line.clone(), |(_, w)| w.to_string())
}

/// Parse the words after `ip route add`: `<prefix> (via <addr> [interface <if>] |
/// interface <if> | blackhole)`. The error names the word that is wrong.
pub fn parse_route_words(words: &[&str]) -> Result<(Prefix, RouteTarget), String> {
    let Some((p, rest)) = words.split_first() else { return Err("expected a prefix".into()) };
    let prefix: Prefix = p.parse().map_err(|e| format!("prefix {p:?}: {e}"))?;
    if is_multipath_words(rest) {
        let paths = parse_paths(rest).map_err(|e| format!("after {p}: {e}"))?;
        let t = target_from_fields(None, None, false, &paths, str::to_string)
            .map_err(|(f, m)| format!("after {p}: {}: {m}", f.trim_start_matches('.')))?;
        return Ok((prefix, t));
    }
    let (via, interface, blackhole) = match rest {
        ["via", a] => (Some(*a), None, false),
        ["via", a, "interface", i] => (Some(*a), Some(*i), false),
        ["interface", i] => (None, Some(*i), false),
        ["blackhole"] => (None, None, true),
        _ => {
            return Err(format!(
                "after {p}: expected via <addr> [interface <name>], interface <name> or blackhole, not {:?}",
                rest.join(" ")
            ))
        }
    };
    Ok((prefix, route_target(via, interface, blackhole)?))
}

/// Parse a route file's text; `name` is the file's name for errors (`routes.txt:7: …`).
pub fn parse_route_file(text: &str, name: &str) -> Result<Vec<(Prefix, RouteTarget)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        out.push(parse_route_words(&words).map_err(|e| format!("{name}:{}: {e}", n + 1))?);
    }
    Ok(out)
}

/// `show ip fib <address>`: the longest match; `show ip fib <prefix>`: exactly that
/// prefix. An error says which and that there is none.
pub fn fib_entry(state: &mut ip::RouterState, query: &str) -> Result<ip::state::FibEntry, String> {
    if let Ok(a) = query.parse::<std::net::IpAddr>() {
        return state.fib_match(&Prefix::host(a), false).ok_or_else(|| format!("no route covers {a}"));
    }
    let p: Prefix = query.parse().map_err(|e| format!("{query:?}: expected an address or a prefix ({e})"))?;
    state.fib_match(&p, true).ok_or_else(|| format!("no route for exactly {p}"))
}

/// The largest batch file `ip route batch` reads (about four million routes).
pub const MAX_BATCH_FILE_BYTES: u64 = 256 << 20;

/// A batch file (`ip route batch <file>`): route-file lines add, `del <prefix>` lines
/// delete. Read on the client; the gateway gets one request.
pub fn batch_request(file: &str) -> Result<crate::api::Request, String> {
    // A regular file of bounded size: not a device or a pipe that never ends.
    let meta = std::fs::metadata(file).map_err(|e| format!("{file}: {e}"))?;
    if !meta.is_file() || meta.len() > MAX_BATCH_FILE_BYTES {
        return Err(format!("{file}: expected a regular file of at most {MAX_BATCH_FILE_BYTES} bytes"));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let (mut add, mut del) = (Vec::new(), Vec::new());
    for (n, line, is_del) in batch_lines(&text) {
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            [_, p] if is_del => del.push(p.to_string()),
            _ if is_del => return Err(format!("{file}:{n}: expected del <prefix>")),
            ref words => {
                // Checked here too, so a typo names its line of the file.
                parse_route_words(words).map_err(|e| format!("{file}:{n}: {e}"))?;
                add.push(line.to_string());
            }
        }
    }
    Ok(crate::api::Request::IpRouteBatch { add, del })
}

/// A batch file's lines that say something: (line number from 1, the line without its
/// comment, whether it deletes).
fn batch_lines(text: &str) -> impl Iterator<Item = (usize, &str, bool)> {
    text.lines().enumerate().filter_map(|(n, line)| {
        let line = line.split('#').next().unwrap_or("").trim();
        let is_del = matches!(line.split_whitespace().next(), Some("del" | "delete"));
        (!line.is_empty()).then_some((n + 1, line, is_del))
    })
}

/// The gateway names a batch's refused line `add[i]` or `del[i]` (it gets lists, not
/// the file): on the client, that becomes the line of `file` it came from.
pub fn batch_error_in_file(file: &str, error: &str) -> Option<String> {
    let (is_del, rest) = match error.split_once('[')? {
        ("add", rest) => (false, rest),
        ("del", rest) => (true, rest),
        _ => return None,
    };
    let (i, rest) = rest.split_once("]: ")?;
    let i: usize = i.parse().ok()?;
    let text = std::fs::read_to_string(file).ok()?;
    let (n, _, _) = batch_lines(&text).filter(|l| l.2 == is_del).nth(i)?;
    Some(format!("{file}:{n}: {rest}"))
}

/// Apply a batch: every line checked first (an error names `add[i]` or `del[i]`), then
/// the deletes and the adds, published once.
pub fn route_batch(c: &mut crate::dataplane::Control, add: &[String], del: &[String]) -> Result<String, String> {
    let mut adds = Vec::with_capacity(add.len());
    for (i, line) in add.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (p, t) = parse_route_words(&words).map_err(|e| format!("add[{i}]: {e}"))?;
        let t = crate::ipsec::resolve_target(&c.ipsec, t).map_err(|e| format!("add[{i}]: {e}"))?;
        let t = crate::dataplane::resolve_target(&c.gtpu, &c.udptun, &c.state, t).map_err(|e| format!("add[{i}]: {e}"))?;
        adds.push((p, t));
    }
    let mut dels = Vec::with_capacity(del.len());
    for (i, p) in del.iter().enumerate() {
        dels.push(p.parse::<Prefix>().map_err(|e| format!("del[{i}]: prefix {p:?}: {e}"))?);
    }
    // All or nothing: a refused add puts the deleted routes back.
    let saved: Vec<(Prefix, RouteTarget)> = dels.iter().filter_map(|p| c.state.route(p).map(|t| (*p, t.clone()))).collect();
    c.state.del_routes(&dels).map_err(|(i, e)| format!("del[{i}]: {e}"))?;
    // Unlike one `ip route add`, a batch line replaces a static route already there: a
    // route feed's update of a prefix is its new path (and no gap, no delete line). The
    // reply counts them, so nothing is replaced silently.
    let replaced = adds.iter().filter(|(p, t)| c.state.route(p).is_some_and(|o| o != t)).count();
    if let Err((i, e)) = c.state.add_routes(adds) {
        c.state.add_routes(saved).map_err(|(_, e)| format!("add[{i}] refused and the deletes could not be undone: {e}"))?;
        return Err(format!("add[{i}]: {e}"));
    }
    c.publish_routes();
    let replaced = if replaced > 0 { format!(" ({replaced} of them replaced a route)") } else { String::new() };
    Ok(format!("{} routes added{replaced}, {} deleted", add.len(), del.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_batch_line_is_named_by_its_line_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("feed.txt");
        let text = "# feed\n198.19.1.0/24 blackhole\ndel 198.19.2.0/24\n\n198.19.3.0/24 blackhole # x\ndelete 198.19.4.0/24\n";
        std::fs::write(&file, text).unwrap();
        let f = file.to_str().unwrap();
        match batch_request(f).unwrap() {
            crate::api::Request::IpRouteBatch { add, del } => {
                assert_eq!((add.len(), del.len()), (2, 2));
                assert_eq!(add[1], "198.19.3.0/24 blackhole");
            }
            other => panic!("{other:?}"),
        }
        let at = |e: &str| batch_error_in_file(f, e);
        assert_eq!(at("add[0]: no"), Some(format!("{f}:2: no")));
        assert_eq!(at("add[1]: 198.19.3.0/24 is an address of pg0"), Some(format!("{f}:5: 198.19.3.0/24 is an address of pg0")));
        assert_eq!(at("del[1]: it goes with the SA"), Some(format!("{f}:6: it goes with the SA")));
        assert_eq!(at("del[2]: past the end"), None);
        assert_eq!(at("routes[0]: not a batch's"), None);
        let e = batch_request(&format!("{f}x")).unwrap_err();
        assert!(e.starts_with(&format!("{f}x: ")), "{e}");
        std::fs::write(&file, "198.19.1.0/24 blackhole\ndel\n").unwrap();
        assert_eq!(batch_request(f).unwrap_err(), format!("{f}:2: expected del <prefix>"));
    }

    #[test]
    fn route_file_round_trip_and_errors() {
        let text = "# a table\n198.19.0.0/16 via 198.18.1.2\n\n2001:db8:200::/40 interface null0  # attached\n198.19.9.0/24 blackhole\n198.19.7.0/24 via 198.18.1.3 interface null0\n";
        let routes = parse_route_file(text, "t.txt").unwrap();
        assert_eq!(routes.len(), 4);
        assert_eq!(routes[0].1, RouteTarget::Via { next_hop: "198.18.1.2".parse().unwrap(), interface: None });
        assert_eq!(routes[1].1, RouteTarget::Interface("null0".into()));
        assert_eq!(routes[2].1, RouteTarget::Blackhole);
        let again: Vec<String> = routes.iter().map(|(p, t)| route_line(p, t)).collect();
        assert_eq!(parse_route_file(&again.join("\n"), "again").unwrap(), routes);
        let e = parse_route_file("198.19.0.0/16 via 198.18.1.2\n198.19.0.0/33 via 198.18.1.2\n", "r.txt").unwrap_err();
        assert!(e.starts_with("r.txt:2: prefix \"198.19.0.0/33\""), "{e}");
        let e = parse_route_file("198.19.0.0/16 sideways\n", "r.txt").unwrap_err();
        assert!(e.contains("r.txt:1: after 198.19.0.0/16: expected via"), "{e}");
        let e = parse_route_file("198.19.0.0/16 via nowhere\n", "r.txt").unwrap_err();
        assert!(e.contains("via \"nowhere\""), "{e}");
    }

    #[test]
    fn multipath_lines_round_trip_and_name_their_mistakes() {
        let text = "198.19.8.0/24 via 198.18.1.2 weight 3 via 198.18.2.2\n198.19.6.0/24 interface udp_tunnel0 interface udp_tunnel1 weight 2\n2001:db8:5::/48 via 2001:db8:1::2 interface eth0 via 2001:db8:2::2 weight 7\n";
        let routes = parse_route_file(text, "m.txt").unwrap();
        let via = |a: &str, i: Option<&str>, weight| Path {
            target: RouteTarget::Via { next_hop: a.parse().unwrap(), interface: i.map(str::to_string) },
            weight,
        };
        assert_eq!(routes[0].1, RouteTarget::Multipath(vec![via("198.18.1.2", None, 3), via("198.18.2.2", None, 1)]));
        assert_eq!(
            routes[1].1,
            RouteTarget::Multipath(vec![
                Path { target: RouteTarget::Interface("udp_tunnel0".into()), weight: 1 },
                Path { target: RouteTarget::Interface("udp_tunnel1".into()), weight: 2 }
            ])
        );
        assert_eq!(routes[2].1, RouteTarget::Multipath(vec![via("2001:db8:1::2", Some("eth0"), 1), via("2001:db8:2::2", None, 7)]));
        let again: Vec<String> = routes.iter().map(|(p, t)| route_line(p, t)).collect();
        assert_eq!(parse_route_file(&again.join("\n"), "again").unwrap(), routes);
        // One path with a weight is a plain route.
        let one = parse_route_file("198.19.0.0/16 via 198.18.1.2 weight 4\n", "m.txt").unwrap();
        assert_eq!(one[0].1, RouteTarget::Via { next_hop: "198.18.1.2".parse().unwrap(), interface: None });
        let e = parse_route_file("198.19.0.0/16 via 198.18.1.2 weight 0 via 198.18.2.2\n", "m.txt").unwrap_err();
        assert_eq!(e, "m.txt:1: after 198.19.0.0/16: paths[0].weight: expected 1 to 255");
        let e = parse_route_file("198.19.0.0/16 via 198.18.1.2 weight x via 198.18.2.2\n", "m.txt").unwrap_err();
        assert!(e.contains("weight \"x\": expected a number"), "{e}");
        let e = parse_route_file("198.19.0.0/16 via 198.18.1.2 via 198.18.2.2 blackhole\n", "m.txt").unwrap_err();
        assert!(e.contains("not \"blackhole\""), "{e}");
    }
}
