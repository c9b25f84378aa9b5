//! `doca_log.h`: log sources, application and SDK backends, level limits, and the SDK log
//! that doca-soft itself writes to.
//!
//! The model (DOCA 3.0's, see the header `doca_log.h`):
//!
//! * Levels are numbers, bigger = more verbose. A backend prints a record of level `L` when
//!   `upper <= L <= lower`. Application backends take their `lower` from the global lower
//!   limit (default INFO) and `upper` from the global upper limit (default CRIT) unless the
//!   limit was pinned (`*_strict`) or set on the backend. SDK backends use an SDK level
//!   (default: the global SDK limit, INFO) in place of `lower`.
//! * Application records (the C program's `DOCA_LOG_*`) reach only application backends;
//!   SDK records (this library's own messages, [`sdk_log!`](crate::sdk_log)) only SDK backends
//!   and the Rust hook ([`set_sdk_hook`]). With neither, SDK records are never even formatted.
//! * `doca_log()` is variadic in C; our header makes it a `static inline` that formats with
//!   `vsnprintf` and calls [`doca_soft_log_emit`] with the finished text.
//!
//! Backends are never destroyed (DOCA has no destroy call): they live in a global list until
//! the process exits. A buffer backend's handler runs with the log lock held; records it logs
//! itself (directly or through a failing DOCA call) are dropped instead of deadlocking. One mutex guards the list; records are rare enough for that, and the
//! hot "is anyone listening?" question for the SDK log is a single atomic load.

use core::ffi::{c_char, c_int};
use std::ffi::CString;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::types::*;

/// The source id doca-soft's own records carry, and its name.
const SDK_SOURCE_NAME: &str = "DOCA_SOFT";

extern "C" {
    // glibc's standard streams, for the standard backend: records then interleave correctly
    // with the program's own printf output (same FILE buffers).
    static stdout: *mut libc::FILE;
    static stderr: *mut libc::FILE;
}

/// Where a backend writes.
enum Sink {
    /// A C `FILE *` (fputs, then fflush so records are not lost on a crash).
    File(usize),
    /// A file descriptor (one `write` per record).
    Fd(c_int),
    /// The caller's buffer: the record is copied to its start, then `handler(buf)` runs.
    Buf { buf: usize, capacity: usize, handler: log_flush_callback },
    /// syslog(3), opened with the given identity.
    Syslog,
}

/// One backend. `doca_log_backend` is the opaque C name; C holds a pointer to a leaked box.
pub struct doca_log_backend {
    sdk: bool,
    sink: Sink,
    lower: u32,
    upper: u32,
    lower_pinned: bool,
    upper_pinned: bool,
}

impl doca_log_backend {
    fn accepts(&self, level: u32) -> bool {
        self.upper <= level && level <= self.lower && level > DOCA_LOG_LEVEL_DISABLE
    }
}

/// The backend pointers handed to C (leaked boxes, never freed) in creation order.
struct Backend(*mut doca_log_backend);
// SAFETY: a backend is only read or changed with the BACKENDS lock held; the pointer is never
// freed, so moving it between threads is sound.
unsafe impl Send for Backend {}

struct State {
    sources: Vec<Option<String>>,
    backends: Vec<Backend>,
    global_lower: u32,
    global_upper: u32,
    global_sdk: u32,
}

static STATE: Mutex<State> = Mutex::new(State {
    sources: Vec::new(),
    backends: Vec::new(),
    global_lower: DOCA_LOG_LEVEL_INFO,
    global_upper: DOCA_LOG_LEVEL_CRIT,
    global_sdk: DOCA_LOG_LEVEL_INFO,
});

/// The most verbose level any SDK backend or the hook would print (0: nobody listens).
static SDK_MOST_VERBOSE: AtomicU32 = AtomicU32::new(0);
/// The same for application backends (so `doca_log` skips formatting disabled levels).
static APP_MOST_VERBOSE: AtomicU32 = AtomicU32::new(0);

/// A Rust receiver of SDK records: `(level, source file, line, message)`.
pub type SdkHook = fn(level: u32, file: &str, line: u32, message: &str);
static HOOK: Mutex<Option<SdkHook>> = Mutex::new(None);

fn state() -> MutexGuard<'static, State> {
    // A panic while holding the lock left consistent data (every update is one assignment).
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Recomputes the two "most verbose" summaries after any change of backends or limits.
fn refresh(st: &State) {
    let (mut app, mut sdk) = (0, 0);
    for b in &st.backends {
        // SAFETY: backends are never freed; the lock is held.
        let b = unsafe { &*b.0 };
        if b.upper <= b.lower && b.lower > DOCA_LOG_LEVEL_DISABLE {
            let v = if b.sdk { &mut sdk } else { &mut app };
            *v = (*v).max(b.lower);
        }
    }
    if HOOK.lock().map(|h| h.is_some()).unwrap_or(false) {
        sdk = sdk.max(st.global_sdk);
    }
    APP_MOST_VERBOSE.store(app, Ordering::Relaxed);
    SDK_MOST_VERBOSE.store(sdk, Ordering::Relaxed);
}

fn valid_level(level: u32) -> bool {
    (DOCA_LOG_LEVEL_DISABLE..=DOCA_LOG_LEVEL_TRACE).contains(&level)
}

fn level_name(level: u32) -> &'static str {
    match level {
        ..=20 => "CRIT",
        21..=30 => "ERR",
        31..=40 => "WARN",
        41..=50 => "INFO",
        51..=60 => "DBG",
        _ => "TRC",
    }
}

/// `[HH:MM:SS:micros][pid][DOCA][LEVEL][source][file:line][func] message`, newline-terminated.
fn format_record(level: u32, source: &str, file: &str, line: u32, func: &str, msg: &str) -> String {
    let mut tv = libc::timeval { tv_sec: 0, tv_usec: 0 };
    // SAFETY: libc::tm is plain data; all-zero is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both out-pointers are valid locals.
    unsafe {
        libc::gettimeofday(&mut tv, std::ptr::null_mut());
        libc::localtime_r(&tv.tv_sec, &mut tm);
    }
    let file = file.rsplit('/').next().unwrap_or(file);
    let mut s = String::with_capacity(64 + msg.len());
    let _ = write!(
        s,
        "[{:02}:{:02}:{:02}:{:06}][{}][DOCA][{}][{}][{}:{}][{}] {}",
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        tv.tv_usec,
        std::process::id(),
        level_name(level),
        source,
        file,
        line,
        func,
        msg.trim_end_matches('\n')
    );
    s.push('\n');
    s
}

thread_local! {
    /// Set while this thread writes a record: a buffer handler (C code) that logs, or calls
    /// something that logs, must not re-enter the locked state (its record is dropped).
    static IN_SINK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn in_sink() -> bool {
    IN_SINK.with(|f| f.get())
}

/// Writes one record to every backend of the given kind that accepts its level.
fn dispatch(st: &State, sdk: bool, level: u32, record: &str) {
    IN_SINK.with(|f| f.set(true));
    dispatch_inner(st, sdk, level, record);
    IN_SINK.with(|f| f.set(false));
}

fn dispatch_inner(st: &State, sdk: bool, level: u32, record: &str) {
    for b in &st.backends {
        // SAFETY: backends are never freed; the lock is held.
        let b = unsafe { &*b.0 };
        if b.sdk == sdk && b.accepts(level) {
            write_sink(&b.sink, level, record);
        }
    }
}

fn write_sink(sink: &Sink, level: u32, record: &str) {
    let c = CString::new(record.replace('\0', "")).unwrap_or_default();
    match *sink {
        Sink::File(f) => {
            // SAFETY: the FILE* was handed to us by the program, which keeps it open for the
            // backend's life (DOCA's contract); `c` is NUL-terminated.
            unsafe {
                libc::fputs(c.as_ptr(), f as *mut libc::FILE);
                libc::fflush(f as *mut libc::FILE);
            }
        }
        Sink::Fd(fd) => {
            let mut rest = record.as_bytes();
            while !rest.is_empty() {
                // SAFETY: `rest` is a valid readable slice.
                let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
                if n <= 0 {
                    if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    break;
                }
                rest = &rest[n as usize..];
            }
        }
        Sink::Buf { buf, capacity, handler } => {
            if capacity == 0 {
                return;
            }
            let bytes = c.as_bytes();
            let n = bytes.len().min(capacity - 1);
            // SAFETY: the program gave `buf` with room for `capacity` bytes for the backend's
            // life; we write at most `capacity` (n bytes plus the NUL).
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, n);
                *(buf as *mut u8).add(n) = 0;
                if let Some(h) = handler {
                    h(buf as *mut c_char);
                }
            }
        }
        Sink::Syslog => {
            let prio = match level {
                ..=20 => libc::LOG_CRIT,
                21..=30 => libc::LOG_ERR,
                31..=40 => libc::LOG_WARNING,
                41..=50 => libc::LOG_INFO,
                _ => libc::LOG_DEBUG,
            };
            // SAFETY: a constant "%s" format with one NUL-terminated string argument.
            unsafe { libc::syslog(prio, c"%s".as_ptr(), c.as_ptr()) };
        }
    }
}

// ---- the SDK log, for doca-soft's own messages ----

/// Whether an SDK record of `level` would reach anyone (one atomic load).
#[inline]
pub fn sdk_enabled(level: u32) -> bool {
    level <= SDK_MOST_VERBOSE.load(Ordering::Relaxed)
}

/// Logs one SDK record (call through [`sdk_log!`](crate::sdk_log), which checks the level
/// before formatting).
pub fn sdk_emit(level: u32, file: &str, line: u32, func: &str, args: std::fmt::Arguments<'_>) {
    if in_sink() {
        return;
    }
    let msg = args.to_string();
    let hook = *HOOK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = hook {
        let limit = state().global_sdk;
        if level <= limit && level > DOCA_LOG_LEVEL_DISABLE {
            // Without the log lock, and marked as a sink: the hook (a tracing subscriber, say)
            // may itself call into the provider, whose records are then dropped instead of
            // deadlocking on the lock.
            IN_SINK.with(|f| f.set(true));
            h(level, file, line, &msg);
            IN_SINK.with(|f| f.set(false));
        }
    }
    let st = state();
    let record = format_record(level, SDK_SOURCE_NAME, file, line, func, &msg);
    dispatch(&st, true, level, &record);
}

/// Routes SDK records (levels up to the global SDK limit) to a Rust function as well, e.g.
/// into `tracing` (async-doca installs one when its feature `tracing` is on). `None` removes
/// the hook. C programs see no difference: their backends get every record as before.
pub fn set_sdk_hook(hook: Option<SdkHook>) {
    *HOOK.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    refresh(&state());
}

/// An internal error of doca-soft (a bug to report: a panic caught at the C boundary, an
/// impossible state): always one line on stderr, whatever the program's log setup, and a
/// CRIT record in the SDK log (so a Rust program's `tracing` stream has it too). Never
/// panics, unlike `eprintln!` on a closed stderr.
pub fn internal_error(file: &str, line: u32, func: &str, args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "doca-soft: internal error: {args}");
    if sdk_enabled(DOCA_LOG_LEVEL_CRIT) {
        sdk_emit(DOCA_LOG_LEVEL_CRIT, file, line, func, format_args!("internal error: {args}"));
    }
}

/// [`internal_error`] at the call site: `sdk_internal_error!("state {:?}", s)`.
#[macro_export]
macro_rules! sdk_internal_error {
    ($($arg:tt)+) => {
        $crate::log::internal_error(file!(), line!(), module_path!(), format_args!($($arg)+))
    };
}

/// Logs a doca-soft message to the SDK log: `sdk_log!(ERROR, "why {}", x)`. The level names
/// are DOCA's without the prefix (CRIT, ERROR, WARNING, INFO, DEBUG, TRACE). Nothing is
/// formatted unless an SDK backend or the hook would print the record.
#[macro_export]
macro_rules! sdk_log {
    ($level:ident, $($arg:tt)+) => {{
        let level = $crate::log::level!($level);
        if $crate::log::sdk_enabled(level) {
            $crate::log::sdk_emit(level, file!(), line!(), module_path!(), format_args!($($arg)+));
        }
    }};
}

/// `level!(ERROR)` = `DOCA_LOG_LEVEL_ERROR` (used by [`sdk_log!`](crate::sdk_log)).
#[doc(hidden)]
#[macro_export]
macro_rules! __doca_soft_level {
    (CRIT) => {
        $crate::types::DOCA_LOG_LEVEL_CRIT
    };
    (ERROR) => {
        $crate::types::DOCA_LOG_LEVEL_ERROR
    };
    (WARNING) => {
        $crate::types::DOCA_LOG_LEVEL_WARNING
    };
    (INFO) => {
        $crate::types::DOCA_LOG_LEVEL_INFO
    };
    (DEBUG) => {
        $crate::types::DOCA_LOG_LEVEL_DEBUG
    };
    (TRACE) => {
        $crate::types::DOCA_LOG_LEVEL_TRACE
    };
}
#[doc(hidden)]
pub use crate::__doca_soft_level as level;

/// Returns `err` after logging `why` at ERROR level to the SDK log; for the `Err(..)` arms of
/// entry points: `return Err(log::fail(DOCA_ERROR_NOT_SUPPORTED, format_args!(..)))` is long,
/// so most call sites use [`sdk_fail!`](crate::sdk_fail).
#[macro_export]
macro_rules! sdk_fail {
    ($err:expr, $($arg:tt)+) => {{
        $crate::sdk_log!(ERROR, $($arg)+);
        $err
    }};
}

/// Application records from Rust (argp's own messages), under a registered source name.
pub(crate) fn app_emit(level: u32, source: &str, message: &str) {
    if level > APP_MOST_VERBOSE.load(Ordering::Relaxed) || in_sink() {
        return;
    }
    let st = state();
    let record = format_record(level, source, "argp", 0, "doca_argp_start", message);
    dispatch(&st, false, level, &record);
}

// The `doca_log_*` C entry points (sources, backends, level limits) are in `log/entry.rs`, so
// this file reads as the model; re-exported here, their Rust path before the split.
mod entry;
pub use entry::*;

#[cfg(test)]
mod tests;
