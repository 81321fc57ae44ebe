//! The configuration loader's target: any text is a configuration error naming the
//! file, a field and what was expected, or a valid dataplane; never a panic. A parsed
//! configuration is validated whole (`build_state`); it is assembled (pool, graph,
//! devices) when it opens nothing outside the process (only `pg` and `null`
//! interfaces: no files, sockets, TAP devices or XDP programs) and its pools are small
//! (the limits themselves are checked by `check_workers`, which this also reaches).

use crate::config::{Config, ConfigError, InterfaceKind};
use crate::dataplane::{assemble, build_state};
use std::path::Path;

/// The name errors must carry.
const SOURCE: &str = "fuzz.toml";

/// Buffers (regular and large) all workers of an assembled dataplane may hold together.
const MAX_POOL: usize = 1 << 14;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let cfg = match Config::parse(text, SOURCE, Path::new("/nonexistent")) {
        Ok(c) => c,
        Err(e) => return check_error(&e),
    };
    if let Err(e) = build_state(&cfg) {
        return check_error(&e);
    }
    let self_contained = cfg.interfaces.iter().all(|i| matches!(i.kind, InterfaceKind::Pg | InterfaceKind::Null));
    let dp = &cfg.dataplane;
    let small = dp.workers.saturating_mul(dp.buffers.saturating_add(dp.large_buffers.saturating_mul(128))) <= MAX_POOL;
    if !self_contained || !small {
        return;
    }
    match assemble(&cfg) {
        Ok(a) => {
            assert_eq!(a.workers.len(), dp.workers);
            for w in &a.workers {
                assert_eq!(w.pool.in_use(), 0, "a new worker holds no buffer");
                assert_eq!(w.ports.len(), cfg.interfaces.len());
            }
        }
        Err(e) => check_error(&e),
    }
}

/// An error says where (this file, a field) and what was expected.
fn check_error(errors: &ConfigError) {
    for e in errors.all() {
        assert_eq!(e.file, SOURCE, "{e}");
        assert!(!e.field.is_empty() && !e.message.is_empty(), "{e:?}");
    }
    assert!(errors.all().count() <= crate::config::MAX_ERRORS, "{errors}");
}
