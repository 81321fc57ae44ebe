//! Text commands → typed requests (the `vecgate ctl` language, VPP-like).

use crate::api::Request;

pub const HELP: &str = "\
commands:
  show runtime                         per-node calls, vectors, packets, cycles/packet
  show errors [all]                    per-node counters (non-zero unless `all`)
  show trace                           records of traced packets
  trace add <input-node> <count>       trace the next <count> packets of an input (e.g. pg-input)
  trace clear
  show interfaces
  show ip fib                          IPv4 and IPv6 routes with their adjacencies
  show neighbours
  ip route add <prefix> via <addr> [interface <name>]
  ip route add <prefix> interface <name>
  ip route add <prefix> blackhole
  ip route del <prefix>
  clear runtime                        zero runtime stats and counters";

pub fn parse(words: &[String]) -> Result<Request, String> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["show", "runtime" | "run"] => Ok(Request::ShowRuntime {}),
        ["show", "errors" | "error"] => Ok(Request::ShowErrors { all: false }),
        ["show", "errors" | "error", "all"] => Ok(Request::ShowErrors { all: true }),
        ["show", "trace"] => Ok(Request::ShowTrace {}),
        ["trace", "add", node, count] => Ok(Request::TraceAdd {
            node: node.to_string(),
            count: count.parse().map_err(|_| format!("count {count:?}: expected a number"))?,
        }),
        ["trace", "clear"] | ["clear", "trace"] => Ok(Request::TraceClear {}),
        ["show", "interfaces" | "interface" | "int"] => Ok(Request::ShowInterfaces {}),
        ["show", "ip" | "ip6", "fib"] => Ok(Request::ShowIpFib {}),
        ["show", "neighbours" | "neighbors"] | ["show", "ip", "neighbours" | "neighbors"] => Ok(Request::ShowNeighbours {}),
        ["ip", "route", "add", prefix, rest @ ..] => {
            let (via, interface, blackhole) = match rest {
                ["via", v] => (Some(v.to_string()), None, false),
                ["via", v, "interface" | "dev", i] => (Some(v.to_string()), Some(i.to_string()), false),
                ["interface" | "dev", i] => (None, Some(i.to_string()), false),
                ["blackhole"] => (None, None, true),
                _ => return Err("expected: ip route add <prefix> (via <addr> [interface <name>] | interface <name> | blackhole)".into()),
            };
            Ok(Request::IpRouteAdd { prefix: prefix.to_string(), via, interface, blackhole })
        }
        ["ip", "route", "del" | "delete", prefix] => Ok(Request::IpRouteDel { prefix: prefix.to_string() }),
        ["clear", "runtime" | "errors"] => Ok(Request::ClearRuntime {}),
        _ => Err(format!("unknown command {:?}\n{HELP}", w.join(" "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Request, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn commands() {
        assert_eq!(p("show runtime"), Ok(Request::ShowRuntime {}));
        assert_eq!(p("trace add pg-input 10"), Ok(Request::TraceAdd { node: "pg-input".into(), count: 10 }));
        assert_eq!(
            p("ip route add 198.19.0.0/16 via 198.18.2.2"),
            Ok(Request::IpRouteAdd { prefix: "198.19.0.0/16".into(), via: Some("198.18.2.2".into()), interface: None, blackhole: false })
        );
        assert!(p("ip route add 198.19.0.0/16 sideways").is_err());
        assert!(p("trace add pg-input many").is_err());
        assert!(p("make coffee").unwrap_err().contains("commands:"));
    }

    #[test]
    fn json_shape_is_stable() {
        let r: Request = serde_json::from_str(r#"{"op":"ip_route_add","prefix":"2001:db8:5::/48","via":"2001:db8:2::2"}"#).unwrap();
        assert_eq!(
            r,
            Request::IpRouteAdd { prefix: "2001:db8:5::/48".into(), via: Some("2001:db8:2::2".into()), interface: None, blackhole: false }
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"show_runtime","extra":1}"#).is_err());
    }
}
