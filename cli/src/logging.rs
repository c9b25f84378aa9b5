//! The command line's `tracing` subscriber: what the library, the soft provider and the UROM
//! daemon report goes to stderr (stdout stays for results: perf tables and JSON, the daemon's
//! `listening on` line).
//!
//! The filter is `--log-level` when given (a level, `error` .. `trace`, or any `RUST_LOG`
//! directive such as `async_doca::rdma=trace`), else `RUST_LOG`, else `warn`: problems only,
//! so measurements print nothing else unless asked.

use std::io::IsTerminal as _;
use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The installed filter, replaceable at run time (perf's traced rows widen it), and the
/// directives it was built from.
static FILTER: OnceLock<(reload::Handle<EnvFilter, Registry>, String)> = OnceLock::new();

/// Installs the subscriber for the whole process. `log_level` is the `--log-level` option;
/// `default` the filter without it and without `RUST_LOG`.
pub fn init(log_level: Option<&str>, default: &str) -> Result<(), String> {
    let spec = match log_level {
        Some(spec) => {
            // A bare word is a target name to EnvFilter; here it is meant as a level, so a
            // misspelt level is an error rather than a filter that shows nothing.
            let bare = !spec.contains(['=', ',', '[', ':']);
            const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
            if bare && !LEVELS.contains(&spec.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "unknown log level {spec:?} (off, error, warn, info, debug, trace, or RUST_LOG directives \
                     such as async_doca=debug)"
                ));
            }
            spec.to_owned()
        }
        None => std::env::var(EnvFilter::DEFAULT_ENV).ok().filter(|s| !s.trim().is_empty()).unwrap_or(default.into()),
    };
    let filter = EnvFilter::try_new(&spec).map_err(|e| format!("--log-level / RUST_LOG {spec:?}: {e}"))?;
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not in files and CI logs.
        .with_ansi(std::io::stderr().is_terminal());
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))?;
    let _ = FILTER.set((handle, spec));
    Ok(())
}

/// Runs `f` with `directive` added to the filter (for example `async_doca::trace=trace`,
/// every operation's span), then puts the filter back. Every thread sees the change: the
/// filter is the process's.
#[cfg(feature = "tracing")]
pub fn with_directive<R>(directive: &str, f: impl FnOnce() -> R) -> Result<R, String> {
    let (handle, spec) = FILTER.get().ok_or("no log subscriber installed")?;
    let wider = EnvFilter::try_new(format!("{spec},{directive}")).map_err(|e| format!("{directive:?}: {e}"))?;
    handle.reload(wider).map_err(|e| e.to_string())?;
    let r = f();
    let back = EnvFilter::try_new(spec).map_err(|e| e.to_string())?;
    handle.reload(back).map_err(|e| e.to_string())?;
    Ok(r)
}

/// The UROM daemon's own level (it has four). With the feature `tracing` its lines go to
/// the subscriber ([`daemon_sink`]): the daemon then formats what the subscriber's filter
/// may let through, its most verbose level. Without it, `--log-level` as one of the four
/// (default info).
#[cfg(feature = "soft")]
pub fn daemon_level(log_level: Option<&str>) -> async_doca::urom::daemon::LogLevel {
    use async_doca::urom::daemon::LogLevel;
    use tracing_subscriber::filter::LevelFilter;
    if cfg!(feature = "tracing") {
        let _ = log_level;
        return match LevelFilter::current() {
            LevelFilter::OFF | LevelFilter::ERROR => LogLevel::Error,
            LevelFilter::WARN => LogLevel::Warn,
            LevelFilter::INFO => LogLevel::Info,
            _ => LogLevel::Debug,
        };
    }
    match log_level.map(str::to_ascii_lowercase).as_deref() {
        Some("error") => LogLevel::Error,
        Some("warn" | "warning") => LogLevel::Warn,
        Some("debug" | "trace") => LogLevel::Debug,
        _ => LogLevel::Info,
    }
}

/// The UROM daemon's log lines as structured events (target `urom_service`, field `worker`
/// for a worker's lines), through the subscriber installed by [`init`]. Forked workers have
/// no other thread, so the subscriber's locks are free there. (Without the library's feature
/// `tracing` the daemon keeps writing its own lines to stderr.)
#[cfg(all(feature = "soft", feature = "tracing"))]
pub fn daemon_sink(level: async_doca::urom::daemon::LogLevel, worker: Option<u64>, message: std::fmt::Arguments<'_>) {
    use async_doca::urom::daemon::LogLevel;
    macro_rules! at {
        ($lvl:ident) => {
            match worker {
                Some(id) => tracing::$lvl!(target: "urom_service", worker = id, "{message}"),
                None => tracing::$lvl!(target: "urom_service", "{message}"),
            }
        };
    }
    match level {
        LogLevel::Error => at!(error),
        LogLevel::Warn => at!(warn),
        LogLevel::Info => at!(info),
        LogLevel::Debug => at!(debug),
    }
}
