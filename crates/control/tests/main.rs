//! The control crate's integration tests, one binary: each file of this directory is a
//! module of it. One binary links the workspace once (with the release profile's LTO a
//! test binary takes ~45 s to link on 2 cores; a binary a file took half of CI's time).
//! A file added here must be named below: `every_test_file_is_a_module` fails otherwise
//! (it checks every crate that lists its test files so).

#[macro_use]
mod common;

mod amplification;
mod config_feature_errors;
mod config_validation;
mod dscp_in_place;
mod ecmp;
mod esp_stream;
mod forward_fast_path;
mod fuzz_corpus;
mod fuzz_gso;
mod fuzz_upf;
mod gso_decap;
mod gtpu_handover;
mod gtpu_prepared;
mod interface_delete;
mod ipsec_sa_update;
mod lb_digest;
mod lb_digest_timing;
mod lb_encap_spd;
mod lb_other_zone;
mod lb_sctp;
mod lb_source_ranges;
mod lb_vector;
mod lb_workers;
mod neighbour_hold;
mod parcel_vector;
mod publish_under_traffic;
mod punt_ports;
mod punt_tunnel_ports;
mod reload_keeps_routes;
mod reload_lb;
mod reload_pfcp;
mod reload_punt;
mod reload_udp_tunnel;
mod route_rules;
mod trace_by_packet;
mod tunnel_churn;
mod tunnel_counters_switch;
mod tunnel_hint;
mod tunnel_urpf;
mod udp_tunnel_modify;
mod upf_churn;
mod upf_replace;

/// With `autotests = false` a test file its crate's tests/main.rs forgets would never be
/// built or run: every crate of the workspace that lists its test files is checked here.
#[test]
fn every_test_file_is_a_module() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    let mut missing = Vec::new();
    for krate in std::fs::read_dir(&crates).expect("the crates directory") {
        let dir = krate.expect("a directory entry").path();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        if !manifest.contains("\nautotests = false\n") {
            continue;
        }
        let tests = dir.join("tests");
        let main = std::fs::read_to_string(tests.join("main.rs"))
            .unwrap_or_else(|e| panic!("{}: autotests = false but no tests/main.rs: {e}", dir.display()));
        for entry in std::fs::read_dir(&tests).expect("a tests directory") {
            let name = entry.expect("a directory entry").file_name().into_string().expect("a UTF-8 name");
            if let Some(stem) = name.strip_suffix(".rs") {
                if stem != "main" && !main.contains(&format!("\nmod {stem};\n")) {
                    missing.push(tests.join(name));
                }
            }
        }
        checked += 1;
    }
    assert!(checked >= 7, "only {checked} crates list their test files: is the path right?");
    assert!(missing.is_empty(), "not modules of their tests/main.rs, so never run: {missing:?}");
}
