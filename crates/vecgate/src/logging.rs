//! Structured logs (`tracing`) to standard error: state changes and start/stop, never
//! per packet. The filter is `RUST_LOG` when set, else the config's `[log] level`, else
//! `info` for `run` and `warn` for the other commands.

use anyhow::{anyhow, Result};
use tracing_subscriber::EnvFilter;

const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// Install the subscriber once; `configured` is the config's `[log] level`.
pub fn init(configured: Option<&str>, default: &str, source: &str) -> Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::try_new(&v).map_err(|e| anyhow!("RUST_LOG {v:?}: {e}"))?,
        _ => match configured {
            Some(l) => level_filter(l, source)?,
            None => EnvFilter::new(default),
        },
    };
    // A second init (tests calling run twice in one process) keeps the first.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).with_target(false).try_init();
    Ok(())
}

/// The filter of the config's `[log] level` (`vecgate check` asks too, so a level that
/// `run` refuses is not `ok`).
pub fn level_filter(level: &str, source: &str) -> Result<EnvFilter> {
    // A bare word would parse as a target name: only levels stand alone.
    if !level.contains(['=', ',']) && !LEVELS.contains(&level) {
        return Err(anyhow!(
            "{source}: log.level: {level:?}: expected one of {} or RUST_LOG directives like \"warn,control=debug\"",
            LEVELS.join(", ")
        ));
    }
    EnvFilter::try_new(level).map_err(|e| {
        anyhow!("{source}: log.level: {level:?}: {e}; expected a level (error, warn, info, debug, trace) or RUST_LOG directives")
    })
}
