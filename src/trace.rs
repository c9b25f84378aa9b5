//! What async-doca tells a [`tracing`](https://docs.rs/tracing) subscriber (feature `tracing`,
//! on by default), and the crate-internal helpers that say it.
//!
//! # What is traced, at which level
//!
//! | level | what | name / fields |
//! | --- | --- | --- |
//! | `TRACE` | one **span per DOCA operation**, from the first poll of its future to its drop: every RDMA operation, sync-event operation, DMA memcpy, Comch send and UROM command | span `doca.op`: `op` (`"rdma.write"`), `ctx` (the context kind), `ctx_id`, `conn` (RDMA connection id, when the operation has one), `size` (bytes), and once it finished `status` (`"ok"` or `"error"`) with, on error, `code` (DOCA's code name) and `kind` |
//! | `DEBUG` | an operation failed (inside its span) | `error` |
//! | `DEBUG` | back-pressure: an operation waits for a free task or for room in the submit queue | `op`, `ctx`, `outstanding` |
//! | `DEBUG` | a context changed state (DOCA's state-change callback) | `ctx`, `ctx_id`, `from`, `to` |
//! | `DEBUG` | a context is asked to stop: its tasks in flight are flushed | `ctx`, `ctx_id`, `outstanding` |
//! | `INFO` | RDMA connections: connected, accepted, rejected, closed by the peer | `conn`, `peer` |
//! | `INFO` | DROM: the runtime follows a new CPU mask | `mask` |
//! | `INFO` | UROM workers: spawned, running, stopped | `worker` |
//! | `WARN` | problems nobody can be given as an `Err`: failures in drop paths and callbacks, resources leaked at shutdown because DOCA may still use them, contained panics | message |
//! | any | the soft provider's SDK log (`DOCA_LOG` records of the provider itself), when the runtime links doca-soft | target `doca_soft`, `file`, `line` |
//!
//! Every `WARN` problem is also counted, and the last few kept, with or without a
//! subscriber or the feature: [`problems`].
//!
//! Targets are the module paths (`async_doca::rdma`, `async_doca::executor::context`, ...),
//! so `RUST_LOG=async_doca=debug` or `RUST_LOG=async_doca::rdma=trace` select them.
//!
//! # Cost
//! A disabled span or event costs one relaxed atomic load (tracing's global level filter)
//! and a compare: with no subscriber installed, or one that filters out `TRACE`, the
//! per-operation span is never built. `docs/tracing.md` has the measurement. Without the
//! feature, every span and event compiles to nothing and the `WARN` problems go to stderr,
//! one line each.
//!
//! # The soft provider's log
//! [`route_provider_log`] (called when a runtime is built) hands doca-soft's SDK records to
//! tracing under the target `doca_soft`; DOCA's C log API (`doca_log_backend_*`) is not
//! touched, C programs see their backends as before. The provider only formats records up to
//! its global SDK level (`doca_log_level_set_global_sdk_limit`, default INFO).

/// An event at `$lvl` with structured fields, or nothing without the feature. The fields come
/// first, in braces, then the message (a format string and its arguments):
/// `event!(debug, { ctx = name, to = trace::dbg(&state) }, "context state changed")`.
/// Field values must be tracing values (integers, `bool`, `&str`); wrap anything else in
/// [`dbg()`] or [`disp`]. Without the feature the values are only borrowed (no warning about
/// unused variables, no code).
macro_rules! event {
    ($lvl:ident, { $($k:ident = $v:expr),* $(,)? }, $($msg:tt)+) => {{
        #[cfg(feature = "tracing")]
        {
            ::tracing::$lvl!($($k = $v,)* $($msg)+);
        }
        #[cfg(not(feature = "tracing"))]
        {
            $(let _ = &$v;)*
            let _ = || ::std::format!($($msg)+);
        }
    }};
}
pub(crate) use event;

/// A problem that cannot be returned to anyone (a failure in `Drop`, in a DOCA callback, at
/// shutdown): a `WARN` event, or a line on stderr without the feature.
/// `report!("doca_mmap_stop failed: {:?}", code)`.
macro_rules! report {
    ($($msg:tt)+) => {{
        $crate::trace::record_problem(::std::format_args!($($msg)+));
        #[cfg(feature = "tracing")]
        {
            ::tracing::warn!($($msg)+);
        }
        #[cfg(not(feature = "tracing"))]
        {
            $crate::trace::stderr_line(::std::format_args!($($msg)+));
        }
    }};
}
pub(crate) use report;

/// How many problems have been reported since the process started (see [`problems`]).
static PROBLEMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The last [`RECENT_PROBLEMS`] of them, oldest first.
static RECENT: std::sync::Mutex<std::collections::VecDeque<String>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());
/// How many reported problems [`problems`] keeps the text of.
pub const RECENT_PROBLEMS: usize = 16;

/// Counts and keeps one reported problem (every `report!` comes here first). A rare path:
/// the message is formatted once more, and the lock is only taken here and in [`problems`].
pub(crate) fn record_problem(args: std::fmt::Arguments<'_>) {
    PROBLEMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // A poisoned lock still holds a usable queue: a panic cannot happen while it is held.
    let mut recent = RECENT.lock().unwrap_or_else(|p| p.into_inner());
    if recent.len() == RECENT_PROBLEMS {
        recent.pop_front();
    }
    recent.push_back(args.to_string());
}

/// The problems the runtime could not return to anyone (the `WARN` row of the table above:
/// failures in drop paths and callbacks, resources leaked at shutdown, contained panics),
/// whether or not a subscriber saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Problems {
    /// How many were reported since the process started.
    pub count: u64,
    /// The last [`RECENT_PROBLEMS`] messages, oldest first.
    pub recent: Vec<String>,
}

/// What the runtime has reported so far in this process: for a health check, and for a test
/// that waits on something to see what went wrong elsewhere meanwhile (a task leaked at
/// shutdown, a destructor that panicked), which no `Result` carries.
///
/// ```
/// let problems = async_doca::trace::problems();
/// for message in &problems.recent {
///     eprintln!("async-doca reported: {message}");
/// }
/// println!("{} problems reported since start", problems.count);
/// ```
pub fn problems() -> Problems {
    let recent = RECENT.lock().unwrap_or_else(|p| p.into_inner());
    Problems { count: PROBLEMS.load(std::sync::atomic::Ordering::Relaxed), recent: recent.iter().cloned().collect() }
}

/// One `async-doca: ...` line on stderr, never panicking (unlike `eprintln!` on a closed
/// stderr). Only without the feature: with it, problems are events.
#[cfg(not(feature = "tracing"))]
pub(crate) fn stderr_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "async-doca: {args}");
}

/// Records `value` with its `Debug` form (only formatted if a subscriber looks at it).
#[cfg(feature = "tracing")]
#[inline]
pub(crate) fn dbg<T: std::fmt::Debug>(value: T) -> tracing::field::DebugValue<T> {
    tracing::field::debug(value)
}

/// Without the feature, values are only borrowed by [`event!`]: this is the identity.
#[cfg(not(feature = "tracing"))]
#[inline]
pub(crate) fn dbg<T: std::fmt::Debug>(value: T) -> T {
    value
}

/// Records `value` with its `Display` form (only formatted if a subscriber looks at it).
#[cfg(feature = "tracing")]
#[inline]
pub(crate) fn disp<T: std::fmt::Display>(value: T) -> tracing::field::DisplayValue<T> {
    tracing::field::display(value)
}

/// Without the feature, values are only borrowed by [`event!`]: this is the identity.
#[cfg(not(feature = "tracing"))]
#[inline]
pub(crate) fn disp<T: std::fmt::Display>(value: T) -> T {
    value
}

/// The span of one DOCA operation (see the module documentation), carried by the operation's
/// future. Disabled (the common case: no subscriber, or `TRACE` filtered out) it is `None`:
/// one word in the future (a `tracing::Span` is five, and every future that contains an
/// operation's future would carry and move them), no destructor to run, and every method is a
/// test of that `None`. Enabled, the span is boxed: an allocation next to a subscriber that
/// records every operation is noise.
#[cfg(feature = "tracing")]
pub(crate) struct OpSpan(Option<Box<tracing::Span>>);

/// Without the feature: nothing at all.
#[cfg(not(feature = "tracing"))]
pub(crate) struct OpSpan;

/// The guard of an entered [`OpSpan`] (exits the span when dropped).
#[cfg(feature = "tracing")]
pub(crate) type Entered<'a> = Option<tracing::span::Entered<'a>>;

/// Without the feature: nothing.
#[cfg(not(feature = "tracing"))]
pub(crate) type Entered<'a> = std::marker::PhantomData<&'a ()>;

impl OpSpan {
    /// The span of operation `op` on a context of kind `ctx` (its address is `ctx_id`).
    #[inline]
    pub(crate) fn new(op: &'static str, ctx: &'static str, ctx_id: usize) -> OpSpan {
        #[cfg(feature = "tracing")]
        {
            use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
            // The first test of `trace_span!`, kept inline; the span itself is built out of
            // line, so the operation's hot code stays small when nobody traces.
            if tracing::Level::TRACE <= STATIC_MAX_LEVEL && tracing::Level::TRACE <= LevelFilter::current() {
                OpSpan(op_span(op, ctx, ctx_id))
            } else {
                OpSpan(None)
            }
        }
        #[cfg(not(feature = "tracing"))]
        {
            let _ = (op, ctx, ctx_id);
            OpSpan
        }
    }

    /// Names the connection (its id, [`ConnId`](crate::rdma::ConnId)'s value) and the size in
    /// bytes of the operation.
    #[inline]
    pub(crate) fn set_target(&self, conn: Option<usize>, size: usize) {
        #[cfg(feature = "tracing")]
        if let Some(s) = &self.0 {
            if let Some(c) = conn {
                s.record("conn", c);
            }
            s.record("size", size);
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (conn, size);
    }

    /// Whether a subscriber records this span: a disabled one has nothing to enter, record
    /// or finish, and the poll of its operation skips it altogether.
    #[inline(always)]
    pub(crate) fn is_recorded(&self) -> bool {
        #[cfg(feature = "tracing")]
        {
            self.0.is_some()
        }
        #[cfg(not(feature = "tracing"))]
        {
            false
        }
    }

    /// Moves the span out, leaving a disabled one.
    #[inline]
    pub(crate) fn take(&mut self) -> OpSpan {
        #[cfg(feature = "tracing")]
        {
            OpSpan(self.0.take())
        }
        #[cfg(not(feature = "tracing"))]
        {
            OpSpan
        }
    }

    /// Enters the span for the duration of a poll, so that what happens inside (back-pressure,
    /// the failure event) is attributed to the operation.
    #[inline]
    pub(crate) fn enter(&self) -> Entered<'_> {
        #[cfg(feature = "tracing")]
        {
            self.0.as_ref().map(|s| s.enter())
        }
        #[cfg(not(feature = "tracing"))]
        {
            std::marker::PhantomData
        }
    }

    /// Polls an operation inside its span: `poll` on `op`, whose span `span` picks out, which
    /// records how it ended. The span is taken out for the poll (polling needs `op` mutably,
    /// the entered span borrows it) and put back. For a recorded span
    /// ([`is_recorded`](OpSpan::is_recorded)): the untraced poll is the caller's, which keeps
    /// it inline (through this function's closure it went out of line). The one traced poll
    /// of every operation future that has a span.
    #[inline(always)]
    pub(crate) fn poll_within<S, T>(
        op: &mut S,
        span: fn(&mut S) -> &mut OpSpan,
        poll: impl FnOnce(&mut S) -> std::task::Poll<crate::Result<T>>,
    ) -> std::task::Poll<crate::Result<T>> {
        let s = span(op).take();
        let r = {
            let _entered = s.enter();
            poll(op)
        };
        if let std::task::Poll::Ready(r) = &r {
            s.finish(r);
        }
        *span(op) = s;
        r
    }

    /// Records how the operation ended: `status`, and on failure DOCA's code, the kind and a
    /// `DEBUG` event carrying the error.
    #[inline]
    pub(crate) fn finish<T>(&self, r: &crate::Result<T>) {
        #[cfg(feature = "tracing")]
        if let Some(s) = &self.0 {
            finish_slow(s, r);
        }
        #[cfg(not(feature = "tracing"))]
        let _ = r;
    }
}

/// Builds the span of [`OpSpan::new`] (out of line: only when `TRACE` may be recorded).
#[cfg(feature = "tracing")]
#[cold]
#[inline(never)]
fn op_span(op: &'static str, ctx: &'static str, ctx_id: usize) -> Option<Box<tracing::Span>> {
    use tracing::field::Empty;
    let span = tracing::trace_span!(
        "doca.op",
        op,
        ctx,
        ctx_id,
        conn = Empty,
        size = Empty,
        status = Empty,
        code = Empty,
        kind = Empty
    );
    (!span.is_none()).then(|| Box::new(span))
}

/// [`OpSpan::finish`] of a recorded span.
#[cfg(feature = "tracing")]
#[cold]
fn finish_slow<T>(span: &tracing::Span, r: &crate::Result<T>) {
    match r {
        Ok(_) => {
            span.record("status", "ok");
        }
        Err(e) => {
            span.record("status", "error");
            if let Some(c) = e.code() {
                span.record("code", tracing::field::display(c));
            }
            span.record("kind", tracing::field::debug(e.kind()));
            tracing::debug!(parent: span, error = %e, "operation failed");
        }
    }
}

/// Routes the soft provider's SDK log into tracing (once per process; later calls do
/// nothing). Called by [`Builder::build`](crate::Builder::build), so that every program using
/// the runtime sees provider errors in its tracing stream. Without the soft provider (NVIDIA's
/// libraries log through their own backends) it does nothing.
pub fn route_provider_log() {
    #[cfg(all(feature = "tracing", feature = "soft"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| doca_soft::log::set_sdk_hook(Some(provider_record)));
    }
}

/// doca-soft's SDK hook: one record as one tracing event at the matching level. DOCA's levels
/// are numbers (bigger = more verbose): CRIT 20, ERROR 30, WARNING 40, INFO 50, DEBUG 60,
/// TRACE 70.
#[cfg(all(feature = "tracing", feature = "soft"))]
fn provider_record(level: u32, file: &str, line: u32, message: &str) {
    match level {
        ..=30 => tracing::error!(target: "doca_soft", file, line, "{message}"),
        31..=40 => tracing::warn!(target: "doca_soft", file, line, "{message}"),
        41..=50 => tracing::info!(target: "doca_soft", file, line, "{message}"),
        51..=60 => tracing::debug!(target: "doca_soft", file, line, "{message}"),
        _ => tracing::trace!(target: "doca_soft", file, line, "{message}"),
    }
}

#[cfg(test)]
mod problem_tests {
    #[test]
    fn a_reported_problem_is_counted_and_kept_without_a_subscriber() {
        let before = super::problems().count;
        for i in 0..super::RECENT_PROBLEMS + 2 {
            report!("problem_tests: problem {i}");
        }
        let after = super::problems();
        assert!(after.count >= before + super::RECENT_PROBLEMS as u64 + 2, "{} after {before}", after.count);
        assert_eq!(after.recent.len(), super::RECENT_PROBLEMS, "only the last ones are kept");
        // Other tests of this binary may report meanwhile: ours are the newest of our own.
        let last = super::RECENT_PROBLEMS + 1;
        assert!(after.recent.iter().any(|m| *m == format!("problem_tests: problem {last}")), "{:?}", after.recent);
        assert!(!after.recent.iter().any(|m| m == "problem_tests: problem 0"), "the oldest was dropped");
    }
}

#[cfg(all(test, feature = "tracing"))]
mod tests {
    use super::*;

    #[test]
    fn a_span_without_subscriber_is_disabled() {
        // No subscriber in this thread: nothing is built, every call is a no-op.
        let s = OpSpan::new("test.op", "test", 1);
        assert!(!s.is_recorded());
        assert_eq!(std::mem::size_of::<OpSpan>(), std::mem::size_of::<usize>());
        s.set_target(Some(7), 64);
        let _g = s.enter();
        s.finish::<()>(&Err(crate::Error::from_doca(crate::sys::DOCA_ERROR_IO_FAILED, "x")));
    }
}
