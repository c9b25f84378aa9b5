//! The one error type of async-doca.
//!
//! Every failure keeps what a user needs to act on it: the DOCA status code when the
//! failure came from DOCA (so a hardware owner can look it up), a [`ErrorKind`] that groups
//! codes by what the caller should do, and a short description of the operation that failed
//! (`"sync_event.wait_eq: submit"`). Errors are cheap to create (the context is a
//! `&'static str` unless a caller attaches a formatted detail).
//!
//! An error that wraps another one (an operating-system call's [`std::io::Error`], a
//! collective's [`coll_algorithms::Error`]) keeps it: [`std::error::Error::source`] returns it, so
//! error reporters (`anyhow`'s chain, `tracing`'s error fields) can walk down to the cause.
//! The wrapped error's text is also part of this error's message, so printing only the top
//! of the chain still tells the whole story.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::sys;

/// A DOCA status code, as returned by the C API. Unknown values (from a newer library) are
/// kept as they are.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DocaCode(pub sys::doca_error_t);

impl DocaCode {
    /// The raw integer value.
    pub fn raw(self) -> i32 {
        self.0 .0
    }

    /// The symbolic name, such as `DOCA_ERROR_NO_MEMORY`, or `None` for a code this crate does
    /// not know.
    pub fn name(self) -> Option<&'static str> {
        sys::doca_error_name(self.0)
    }
}

impl fmt::Debug for DocaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "DOCA_ERROR({})", self.raw()),
        }
    }
}

impl fmt::Display for DocaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What kind of failure an [`Error`] is: what a caller can do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument was rejected (bad blob, out-of-range access, wrong size).
    InvalidArgument,
    /// The access is not allowed (permissions, key mismatch, authentication).
    PermissionDenied,
    /// The object is in the wrong state for the call (not started, stopping, error state).
    BadState,
    /// The operation was cancelled because its context stopped (tasks flushed on stop, or
    /// the runtime shut down).
    Cancelled,
    /// The peer went away or the connection broke.
    ConnectionLost,
    /// A deadline passed.
    TimedOut,
    /// The provider or device does not support this.
    NotSupported,
    /// Something was not found (device, process, plugin).
    NotFound,
    /// Resources are exhausted where waiting would not help.
    ResourceExhausted,
    /// An operating-system call failed.
    Os,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// The kind a DOCA code belongs to.
    pub fn of(code: sys::doca_error_t) -> ErrorKind {
        use ErrorKind::*;
        match code {
            sys::DOCA_ERROR_INVALID_VALUE | sys::DOCA_ERROR_TOO_BIG | sys::DOCA_ERROR_BAD_CONFIG => InvalidArgument,
            sys::DOCA_ERROR_NOT_PERMITTED | sys::DOCA_ERROR_AUTHENTICATION => PermissionDenied,
            sys::DOCA_ERROR_BAD_STATE | sys::DOCA_ERROR_IN_USE | sys::DOCA_ERROR_ALREADY_EXIST => BadState,
            sys::DOCA_ERROR_SHUTDOWN => Cancelled,
            sys::DOCA_ERROR_CONNECTION_RESET
            | sys::DOCA_ERROR_CONNECTION_ABORTED
            | sys::DOCA_ERROR_NOT_CONNECTED
            | sys::DOCA_ERROR_CONNECTION_INPROGRESS => ConnectionLost,
            sys::DOCA_ERROR_TIME_OUT => TimedOut,
            sys::DOCA_ERROR_NOT_SUPPORTED | sys::DOCA_ERROR_UNSUPPORTED_VERSION => NotSupported,
            sys::DOCA_ERROR_NOT_FOUND => NotFound,
            sys::DOCA_ERROR_NO_MEMORY | sys::DOCA_ERROR_FULL => ResourceExhausted,
            sys::DOCA_ERROR_OPERATING_SYSTEM | sys::DOCA_ERROR_IO_FAILED => Os,
            _ => Other,
        }
    }
}

/// The error type of every fallible async-doca call.
///
/// ```
/// use async_doca::{Error, ErrorKind};
/// let e = Error::from_doca(async_doca::sys::DOCA_ERROR_NO_MEMORY, "rdma.write: allocate task");
/// assert_eq!(e.kind(), ErrorKind::ResourceExhausted);
/// assert_eq!(e.code().unwrap().name(), Some("DOCA_ERROR_NO_MEMORY"));
/// assert_eq!(e.to_string(), "rdma.write: allocate task: DOCA_ERROR_NO_MEMORY");
/// ```
///
/// One pointer wide, like [`std::io::Error`]: what it says lives in a box, so that a
/// `Result<()>` is one word and a `Result<T>` barely more than a `T`. Every operation's
/// result moves through several layers of futures on the success path, where an error is
/// never built; a 56-byte error made each of those moves copy 56 bytes.
#[derive(Clone)]
pub struct Error(Box<Repr>);

// What the boxing is for: results on the success path move one word of error.
const _: () = assert!(std::mem::size_of::<Error>() == 8 && std::mem::size_of::<Result<()>>() == 8);

#[derive(Clone)]
struct Repr {
    kind: ErrorKind,
    code: Option<DocaCode>,
    context: Cow<'static, str>,
    /// The error this one wraps (shared, so that `Error` stays `Clone`).
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// An error returned by DOCA while doing `context`.
    pub fn from_doca(code: sys::doca_error_t, context: impl Into<Cow<'static, str>>) -> Error {
        Error::build(ErrorKind::of(code), Some(DocaCode(code)), context.into(), None)
    }

    /// An error found by async-doca itself, with no DOCA code.
    pub fn new(kind: ErrorKind, context: impl Into<Cow<'static, str>>) -> Error {
        Error::build(kind, None, context.into(), None)
    }

    // Out of line and cold: the box's allocation stays off the paths that only may fail.
    #[cold]
    #[inline(never)]
    fn build(
        kind: ErrorKind,
        code: Option<DocaCode>,
        context: Cow<'static, str>,
        source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Error {
        Error(Box::new(Repr { kind, code, context, source }))
    }

    /// An error caused by `source`, which [`source()`](std::error::Error::source) returns.
    /// `context` should already say what `source` says (see the module documentation).
    ///
    /// ```
    /// use async_doca::{Error, ErrorKind};
    /// use std::error::Error as _;
    /// let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
    /// let e = Error::with_source(ErrorKind::ConnectionLost, format!("oob.send: {io}"), io);
    /// let cause = e.source().unwrap().downcast_ref::<std::io::Error>().unwrap();
    /// assert_eq!(cause.kind(), std::io::ErrorKind::BrokenPipe);
    /// ```
    pub fn with_source(
        kind: ErrorKind,
        context: impl Into<Cow<'static, str>>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::build(kind, None, context.into(), Some(Arc::new(source)))
    }

    /// An operating-system error, keeping the OS message and the [`std::io::Error`] itself
    /// (as [`source()`](std::error::Error::source)). A peer that went away is
    /// [`ErrorKind::ConnectionLost`], whichever side noticed it first: a read meets the end of
    /// the stream or a reset, a write a broken pipe (also aborted and not connected
    /// sockets). Anything else is [`ErrorKind::Os`].
    ///
    /// ```
    /// use async_doca::{Error, ErrorKind};
    /// use std::io::ErrorKind as Io;
    /// assert_eq!(Error::os(Io::BrokenPipe.into(), "oob: write").kind(), ErrorKind::ConnectionLost);
    /// assert_eq!(Error::os(Io::UnexpectedEof.into(), "oob: read").kind(), ErrorKind::ConnectionLost);
    /// assert_eq!(Error::os(Io::AddrInUse.into(), "oob: bind").kind(), ErrorKind::Os);
    /// ```
    pub fn os(err: std::io::Error, context: &str) -> Error {
        Error::with_source(os_kind(&err), format!("{context}: {err}"), err)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The DOCA status code, when DOCA reported the failure.
    pub fn code(&self) -> Option<DocaCode> {
        self.0.code
    }

    /// What was being done.
    pub fn context(&self) -> &str {
        &self.0.context
    }

    /// The same error with more context in front (`"outer: inner"`).
    #[must_use]
    pub fn context_prefix(mut self, outer: &str) -> Error {
        self.0.context = format!("{outer}: {}", self.0.context).into();
        self
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.0.kind);
        if let Some(c) = self.0.code {
            d.field("code", &c);
        }
        d.field("context", &self.0.context);
        if let Some(s) = &self.0.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.code {
            Some(c) => write!(f, "{}: {c}", self.0.context),
            None => write!(f, "{} ({:?})", self.0.context, self.0.kind),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source.as_deref().map(|s| s as &(dyn std::error::Error + 'static))
    }
}

impl From<std::io::Error> for Error {
    /// An operating-system error with no more context than its own message, of the kind
    /// [`Error::os`] gives it.
    fn from(err: std::io::Error) -> Error {
        Error::with_source(os_kind(&err), err.to_string(), err)
    }
}

/// The kind of an operating-system error (see [`Error::os`]): one home for "the peer is gone",
/// so that every socket path of the runtime reports it alike.
fn os_kind(err: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as Io;
    match err.kind() {
        Io::BrokenPipe | Io::ConnectionReset | Io::ConnectionAborted | Io::NotConnected | Io::UnexpectedEof => {
            ErrorKind::ConnectionLost
        }
        _ => ErrorKind::Os,
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns a DOCA status into a `Result`, naming what was being done.
#[inline]
pub(crate) fn check(code: sys::doca_error_t, context: &'static str) -> Result<()> {
    if code == sys::DOCA_SUCCESS {
        Ok(())
    } else {
        Err(Error::from_doca(code, context))
    }
}

/// The tail of every `*_alloc_init` call: the task DOCA allocated, or its error, in the form
/// [`DocaCtx::submit`](crate::ext::DocaCtx::submit) expects from its allocation closure.
#[inline]
pub(crate) fn allocated<T>(rc: sys::doca_error_t, task: *mut T) -> std::result::Result<*mut T, sys::doca_error_t> {
    if rc == sys::DOCA_SUCCESS {
        Ok(task)
    } else {
        Err(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_codes_are_kept() {
        let e = Error::from_doca(sys::doca_error_t(4242), "x");
        assert_eq!(e.kind(), ErrorKind::Other);
        assert_eq!(e.code().unwrap().raw(), 4242);
        assert_eq!(e.to_string(), "x: DOCA_ERROR(4242)");
    }

    #[test]
    fn wrapped_errors_are_the_source() {
        use std::error::Error as _;
        let e = Error::os(std::io::Error::from_raw_os_error(libc::ENOENT), "drom: open");
        assert_eq!(e.kind(), ErrorKind::Os);
        let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("the io::Error is kept");
        assert_eq!(io.raw_os_error(), Some(libc::ENOENT));
        assert!(e.to_string().starts_with("drom: open: "), "{e}");
        // Clones share the cause; DOCA errors and plain ones have none.
        assert!(e.clone().source().is_some());
        assert!(Error::from_doca(sys::DOCA_ERROR_IO_FAILED, "x").source().is_none());
        assert!(Error::new(ErrorKind::Other, "x").source().is_none());
        // A chain: an error wrapping an async-doca error wrapping an io::Error.
        let outer = Error::with_source(ErrorKind::Other, format!("outer: {e}"), e);
        let mid = outer.source().unwrap().downcast_ref::<Error>().unwrap();
        assert!(mid.source().unwrap().is::<std::io::Error>());
    }

    #[test]
    fn kinds_group_codes() {
        assert_eq!(ErrorKind::of(sys::DOCA_ERROR_SHUTDOWN), ErrorKind::Cancelled);
        assert_eq!(ErrorKind::of(sys::DOCA_ERROR_CONNECTION_RESET), ErrorKind::ConnectionLost);
        assert_eq!(ErrorKind::of(sys::DOCA_ERROR_NOT_PERMITTED), ErrorKind::PermissionDenied);
        assert!(check(sys::DOCA_SUCCESS, "ok").is_ok());
        let e = check(sys::DOCA_ERROR_BAD_STATE, "ctx.start").unwrap_err().context_prefix("sync_event");
        assert_eq!(e.context(), "sync_event: ctx.start");
        assert_eq!(e.kind(), ErrorKind::BadState);
    }
}
