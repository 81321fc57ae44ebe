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
//! ```

use crate::dataplane::route_target;
use ip::{Prefix, RouteTarget};

/// One route as a line of a route file (the inverse of [`parse_route_line`]).
pub fn route_line(p: &Prefix, t: &RouteTarget) -> String {
    match t {
        RouteTarget::Via { next_hop, interface: None } => format!("{p} via {next_hop}"),
        RouteTarget::Via { next_hop, interface: Some(i) } => format!("{p} via {next_hop} interface {i}"),
        RouteTarget::Interface(i) => format!("{p} interface {i}"),
        RouteTarget::Blackhole => format!("{p} blackhole"),
        RouteTarget::Tunnel(r) => format!("{p} interface {}", r.if_name()),
    }
}

/// Parse the words after `ip route add`: `<prefix> (via <addr> [interface <if>] |
/// interface <if> | blackhole)`. The error names the word that is wrong.
pub fn parse_route_words(words: &[&str]) -> Result<(Prefix, RouteTarget), String> {
    let Some((p, rest)) = words.split_first() else { return Err("expected a prefix".into()) };
    let prefix: Prefix = p.parse().map_err(|e| format!("prefix {p:?}: {e}"))?;
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
        let host = Prefix::covering(a, if a.is_ipv4() { 32 } else { 128 });
        return state.fib_match(&host, false).ok_or_else(|| format!("no route covers {a}"));
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
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            [] => {}
            ["del" | "delete", p] => del.push(p.to_string()),
            ["del" | "delete", ..] => return Err(format!("{file}:{}: expected del <prefix>", n + 1)),
            _ => {
                // Checked here too, so a typo names its line of the file.
                parse_route_words(&line.split_whitespace().collect::<Vec<_>>()).map_err(|e| format!("{file}:{}: {e}", n + 1))?;
                add.push(line.to_string());
            }
        }
    }
    Ok(crate::api::Request::IpRouteBatch { add, del })
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
    if let Err((i, e)) = c.state.add_routes(adds) {
        c.state.add_routes(saved).map_err(|(_, e)| format!("add[{i}] refused and the deletes could not be undone: {e}"))?;
        return Err(format!("add[{i}]: {e}"));
    }
    c.publish_routes();
    Ok(format!("{} routes added, {} deleted", add.len(), del.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
