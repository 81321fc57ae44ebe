//! Builds the AES-GCM glue to Intel's IPsec Multi-Buffer library when its header is
//! installed (Debian: `libipsec-mb-dev`) and sets `cfg(vecgate_ipsec_mb)`; without it the
//! crate builds as before, AES-GCM on ring. `VECGATE_IPSEC_MB=off` builds without it even
//! where it is installed. Installing the library later needs this crate rebuilt
//! (`touch crates/ipsec/build.rs`): the probe is not rerun on every build.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(vecgate_ipsec_mb)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/ipsec_mb.c");
    println!("cargo::rerun-if-env-changed=VECGATE_IPSEC_MB");
    if std::env::var("VECGATE_IPSEC_MB").is_ok_and(|v| v == "off") {
        return;
    }
    // Compiling the glue is the probe: it includes the library's header.
    match cc::Build::new().file("src/ipsec_mb.c").cargo_warnings(false).try_compile("vg_ipsec_mb") {
        Ok(()) => {
            println!("cargo::rustc-link-lib=dylib=IPSec_MB");
            println!("cargo::rustc-cfg=vecgate_ipsec_mb");
        }
        Err(_) => println!("cargo::warning=intel-ipsec-mb not found (libipsec-mb-dev): AES-GCM uses ring"),
    }
}
