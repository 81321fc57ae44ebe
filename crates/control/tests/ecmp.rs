//! ECMP routes through the front-ends: the config's `paths`, the CLI's repeated `via`,
//! the typed API, `show ip fib`, and a reload that changes a path's weight.

use control::api::Request;
use control::config::Config;
use control::dataplane::assemble;
use std::path::Path;

const IFS: &str =
    "[[interface]]\nname = \"pg0\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:01\"\naddresses = [\"198.18.0.1/24\", \"2001:db8::1/64\"]\n\
[[interface]]\nname = \"pg1\"\ntype = \"pg\"\nmac = \"02:00:00:00:00:02\"\naddresses = [\"198.18.1.1/24\", \"2001:db8:1::1/64\"]\n";

fn config(routes: &str) -> Config {
    Config::parse(&format!("{IFS}{routes}"), "gw.toml", Path::new(".")).unwrap()
}

#[test]
fn config_paths_make_an_ecmp_route_and_mistakes_name_the_path() {
    let cfg = config(
        "[[route]]\nprefix = \"198.19.0.0/16\"\npaths = [{ via = \"198.18.0.2\", weight = 3 }, { via = \"198.18.1.2\" }]\n\
         [[route]]\nprefix = \"2001:db8:100::/48\"\npaths = [{ via = \"2001:db8::2\" }, { via = \"2001:db8:1::2\", interface = \"pg1\" }]\n",
    );
    let mut a = assemble(&cfg).unwrap();
    let r = a.control.handle(&Request::ShowIpFibEntry { query: "198.19.7.7".into() });
    assert!(r.ok, "{:?}", r.error);
    let data = r.data;
    assert_eq!(data["kind"], "multipath");
    let paths: Vec<(String, String, u64)> = data["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["next_hop"].as_str().unwrap().into(), p["interface"].as_str().unwrap().into(), p["weight"].as_u64().unwrap()))
        .collect();
    assert_eq!(paths, [("198.18.0.2".into(), "pg0".into(), 3), ("198.18.1.2".into(), "pg1".into(), 1)]);
    // No neighbour known yet: both paths unresolved, neither skipped (they solicit).
    assert!(r.text.contains("weight 3") && r.text.contains("weight 1"), "{}", r.text);
    assert_eq!(data["paths"][0]["skipped"], false);
    assert_eq!(data["paths"][1]["resolved"], false);
    assert!(!r.text.contains("(skipped)"), "{}", r.text);
    // One next hop resolved: the other is skipped.
    a.control.state.add_static_neighbour("pg0", "198.18.0.2".parse().unwrap(), "02:aa:00:00:00:01".parse().unwrap()).unwrap();
    a.control.publish();
    let r = a.control.handle(&Request::ShowIpFibEntry { query: "198.19.7.7".into() });
    assert_eq!((r.data["paths"][0]["skipped"].as_bool(), r.data["paths"][1]["skipped"].as_bool()), (Some(false), Some(true)));
    assert!(r.text.contains("(skipped)"), "{}", r.text);
    assert_eq!(a.control.handle(&Request::ShowIpFibEntry { query: "2001:db8:100::1".into() }).data["paths"][1]["interface"], "pg1");

    for (routes, field, says) in [
        ("paths = [{ via = \"198.18.0.2\" }, { via = \"198.18.1.2\", weight = 0 }]", "route[0].paths[1].weight", "expected 1 to 255"),
        ("paths = [{ via = \"198.18.0.2\" }, { weight = 2 }]", "route[0].paths[1]", "expected `via`, `interface`"),
        ("via = \"198.18.0.2\"\npaths = [{ via = \"198.18.1.2\" }]", "route[0].paths", "not also `via`"),
        (
            "paths = [{ via = \"198.18.0.2\" }, { via = \"198.18.9.2\" }]",
            "route[0]",
            "path 1: next hop 198.18.9.2 is not on a connected subnet",
        ),
    ] {
        let cfg = config(&format!("[[route]]\nprefix = \"198.19.0.0/16\"\n{routes}\n"));
        let e = assemble(&cfg).err().expect("refused");
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(says), "{e}");
        assert_eq!(e.file, "gw.toml");
    }
    let e = Config::parse(
        &format!("{IFS}[[route]]\nprefix = \"198.19.0.0/16\"\npaths = [{{ via = \"198.18.0.2\", wieght = 2 }}]\n"),
        "gw.toml",
        Path::new("."),
    )
    .unwrap_err();
    assert!(e.to_string().contains("wieght"), "{e}");
}

#[test]
fn cli_and_api_add_ecmp_routes() {
    let mut a = assemble(&config("")).unwrap();
    let req = control::cli::parse(
        &["ip", "route", "add", "198.19.0.0/16", "via", "198.18.0.2", "weight", "2", "via", "198.18.1.2"].map(String::from),
    )
    .unwrap();
    let r = a.control.handle(&req);
    assert!(r.ok, "{:?}", r.error);
    let row = a.control.handle(&Request::ShowIpFibEntry { query: "198.19.0.0/16".into() }).data;
    assert_eq!(row["paths"][0]["weight"], 2);
    assert_eq!(row["paths"][1]["weight"], 1);
    // The typed API, as JSON.
    let req: Request = serde_json::from_str(
        r#"{"op":"ip_route_add","prefix":"2001:db8:5::/48","paths":[{"via":"2001:db8::2","weight":5},{"via":"2001:db8:1::2","weight":1}]}"#,
    )
    .unwrap();
    assert!(a.control.handle(&req).ok);
    let row = a.control.handle(&Request::ShowIpFibEntry { query: "2001:db8:5::9".into() }).data;
    assert_eq!(row["paths"][0]["weight"], 5);
    let bad: Request =
        serde_json::from_str(r#"{"op":"ip_route_add","prefix":"2001:db8:6::/48","paths":[{"via":"2001:db8::2","weight":300}]}"#).unwrap();
    let r = a.control.handle(&bad);
    assert_eq!(r.error.as_deref(), Some("ip_route_add.paths[0].weight: expected 1 to 255"));
    // The listing shows a line per path.
    let all = a.control.handle(&Request::ShowIpFib { limit: None });
    assert_eq!(all.text.matches("  path").count(), 4, "{}", all.text);
}

#[test]
fn reload_changes_a_weight_and_leaves_the_rest() {
    let dir = std::env::temp_dir().join(format!("vecgate-ecmp-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gw.toml");
    let route = |w: u32| {
        format!(
            "{IFS}[[route]]\nprefix = \"198.19.0.0/16\"\npaths = [{{ via = \"198.18.0.2\", weight = {w} }}, {{ via = \"198.18.1.2\" }}]\n\
             [[route]]\nprefix = \"198.20.0.0/16\"\npaths = [{{ via = \"198.18.0.2\" }}, {{ via = \"198.18.1.2\" }}]\n"
        )
    };
    std::fs::write(&file, route(3)).unwrap();
    let mut a = assemble(&Config::load(&file).unwrap()).unwrap();
    let reload = |a: &mut control::dataplane::Assembly| {
        let r = a.control.handle(&Request::Reload { file: Some(file.to_string_lossy().into()) });
        assert!(r.ok, "{:?}", r.error);
        r.data["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| format!("{} {}", c["action"].as_str().unwrap(), c["name"].as_str().unwrap()))
            .collect::<Vec<_>>()
    };
    assert_eq!(reload(&mut a), Vec::<String>::new(), "the same file changes nothing");
    std::fs::write(&file, route(5)).unwrap();
    assert_eq!(reload(&mut a), ["replaced 198.19.0.0/16 via 198.18.0.2 weight 5 via 198.18.1.2 weight 1"]);
    assert_eq!(a.control.handle(&Request::ShowIpFibEntry { query: "198.19.0.1".into() }).data["paths"][0]["weight"], 5);
    std::fs::remove_dir_all(&dir).unwrap();
}
