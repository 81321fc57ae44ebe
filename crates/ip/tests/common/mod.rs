//! What the router's tests share: a router with two links.

use ip::state::RouterState;
use ip::{IfAddr, InterfaceSpec};

/// eth0 (198.18.1.1/24, 2001:db8:1::1/64) and eth1 (198.18.2.1/24, 2001:db8:2::1/64).
pub fn two_links() -> RouterState {
    let spec = |name: &str, mac: &str, addrs: &[&str]| InterfaceSpec {
        name: name.into(),
        mac: mac.parse().unwrap(),
        mtu: 1500,
        addresses: addrs.iter().map(|a| a.parse::<IfAddr>().unwrap()).collect(),
    };
    RouterState::new(vec![
        spec("eth0", "02:00:00:00:00:01", &["198.18.1.1/24", "2001:db8:1::1/64"]),
        spec("eth1", "02:00:00:00:00:02", &["198.18.2.1/24", "2001:db8:2::1/64"]),
    ])
    .unwrap()
}
