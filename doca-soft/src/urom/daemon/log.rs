//! Leveled logging to stderr, every line prefixed `urom-service:`, or to a [`LogSink`] the
//! program installs (`async-doca urom-service` turns every line into a structured `tracing`
//! event with the level, the worker id and the message).
//!
//! Lines are formatted into one buffer and written with a single `write(2)` straight to fd 2,
//! not through `std::io::stderr()`: a forked worker must not depend on a lock another thread of
//! the parent might have held at `fork`, and one `write` per line keeps the lines of the daemon
//! and its workers from interleaving mid-line.

use std::fmt;
use std::str::FromStr;

/// How much the daemon says. Each level includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
}

impl LogLevel {
    fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LogLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "error" => Ok(LogLevel::Error),
            "warn" | "warning" => Ok(LogLevel::Warn),
            "info" => Ok(LogLevel::Info),
            "debug" => Ok(LogLevel::Debug),
            _ => Err(format!("unknown log level {s:?} (error, warn, info, debug)")),
        }
    }
}

/// Receives the daemon's log lines instead of stderr: `(level, worker id or None for the
/// daemon itself, message)`. It runs on the daemon's thread and in forked workers (which have
/// no other thread), so it must not wait for another thread.
pub type LogSink = fn(level: LogLevel, worker: Option<u64>, message: fmt::Arguments<'_>);

/// A logger: the level, who is speaking (the daemon, or worker `id`), and where lines go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Log {
    pub level: LogLevel,
    pub worker: Option<u64>,
    pub sink: Option<LogSink>,
}

impl Log {
    pub fn enabled(&self, level: LogLevel) -> bool {
        level <= self.level
    }

    pub fn write(&self, level: LogLevel, args: fmt::Arguments<'_>) {
        if !self.enabled(level) {
            return;
        }
        if let Some(sink) = self.sink {
            sink(level, self.worker, args);
            return;
        }
        let line = match self.worker {
            Some(id) => format!("urom-service: worker {id:#x}: {level}: {args}\n"),
            None => format!("urom-service: {level}: {args}\n"),
        };
        let mut rest = line.as_bytes();
        while !rest.is_empty() {
            // SAFETY: `rest` is a live byte slice; fd 2 is only read by the kernel here.
            let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
            if n <= 0 {
                // EINTR retries; anything else (stderr closed) drops the line: logging must
                // never take the daemon down.
                if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            rest = &rest[n as usize..];
        }
    }
}

macro_rules! log_at {
    ($log:expr, $lvl:ident, $($arg:tt)*) => {
        $log.write($crate::urom::daemon::LogLevel::$lvl, format_args!($($arg)*))
    };
}
pub(crate) use log_at;
