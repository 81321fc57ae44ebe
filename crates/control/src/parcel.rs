//! The parcel feature's part of the configuration: which links take UDP GSO frames.

use crate::config::{Config, InterfaceKind};

/// Bit i: interface i exchanges virtio-net headers with its kernel (an af_packet
/// interface with `vnet_hdr`, the default), so a parcel toward it leaves as one UDP GSO
/// frame (`parcel::ParcelContext::gso_links`). Only the first 64 interfaces can have a bit.
pub fn gso_links(cfg: &Config) -> u64 {
    cfg.interfaces
        .iter()
        .take(64)
        .enumerate()
        .filter(|(_, ic)| ic.kind == InterfaceKind::AfPacket && ic.vnet_hdr.unwrap_or(true))
        .fold(0, |m, (i, _)| m | 1 << i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn af_packet_links_with_vnet_headers_take_gso() {
        let text = r#"
[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
[[interface]]
name = "b"
type = "af_packet"
host_if = "b1"
vnet_hdr = false
[[interface]]
name = "c"
type = "null"
[[interface]]
name = "d"
type = "af_packet"
host_if = "d1"
vnet_hdr = true
"#;
        let cfg = Config::parse(text, "test.toml", std::path::Path::new(".")).unwrap();
        assert_eq!(gso_links(&cfg), 0b1001);
    }
}
