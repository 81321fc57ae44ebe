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
            // A bare word would parse as a target name: only levels stand alone.
            Some(l) if !l.contains(['=', ',']) && !LEVELS.contains(&l) => {
                return Err(anyhow!(
                    "{source}: log.level: {l:?}: expected one of {} or RUST_LOG directives like \"warn,control=debug\"",
                    LEVELS.join(", ")
                ))
            }
            Some(l) => EnvFilter::try_new(l).map_err(|e| {
                anyhow!("{source}: log.level: {l:?}: {e}; expected a level (error, warn, info, debug, trace) or RUST_LOG directives")
            })?,
            None => EnvFilter::new(default),
        },
    };
    // A second init (tests calling run twice in one process) keeps the first.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).with_target(false).try_init();
    Ok(())
}
