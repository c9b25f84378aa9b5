//! Conventions shared by every exported function: no panic crosses the C boundary, NULL
//! arguments are errors, and results are written only through checked out-pointers.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::types::*;

/// Runs the body of an `extern "C"` entry point. A panic inside is caught, reported once (an
/// internal error: stderr and the SDK log, see [`crate::log::internal_error`]), and turned
/// into `on_panic` (for functions returning `doca_error_t`, use
/// `DOCA_ERROR_UNEXPECTED`), so unwinding never crosses into C.
#[inline]
pub(crate) fn guard<T>(on_panic: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            report_panic(payload);
            on_panic
        }
    }
}

/// The report of a caught panic, out of line: inlined into every entry point, it made each
/// one save every callee-saved register on its fast path (the data path crosses about ten
/// entry points per operation).
#[cold]
#[inline(never)]
fn report_panic(payload: Box<dyn std::any::Any + Send>) {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    crate::sdk_internal_error!("panic caught at the C boundary: {msg}");
}

/// [`guard`] for entry points that return a `doca_error_t`; the body may use `?` on
/// `Result<(), doca_error_t>`.
#[inline]
pub(crate) fn guard_err(body: impl FnOnce() -> Result<(), doca_error_t>) -> doca_error_t {
    guard(DOCA_ERROR_UNEXPECTED, || match body() {
        Ok(()) => DOCA_SUCCESS,
        Err(e) => e,
    })
}

/// `code`, returned by a function the optimiser knows is not called on the fast path.
///
/// A check that refuses with `return Err(refused(CODE))` keeps the loading of its code on
/// the refusal's own path. With a plain `Err(CODE)`, the refusals of a run of inlined checks
/// meet in one return, and the code of each was loaded before its check, on the fast path
/// (about ten instructions per RDMA submit).
#[cold]
#[inline(never)]
pub(crate) fn refused(code: doca_error_t) -> doca_error_t {
    code
}

/// A reference to the object behind a C pointer, or INVALID_VALUE for NULL.
///
/// # Safety
/// A non-NULL `p` must point to a live object of type `T` created by this provider, with no
/// conflicting `&mut` alive (the C API is single-threaded per object).
#[inline]
pub(crate) unsafe fn obj<'a, T>(p: *const T) -> Result<&'a T, doca_error_t> {
    // SAFETY: non-NULL is checked; validity and aliasing are the caller's contract above.
    unsafe { p.as_ref() }.ok_or(DOCA_ERROR_INVALID_VALUE)
}

/// Writes `v` through an out-pointer, or INVALID_VALUE for NULL.
///
/// # Safety
/// A non-NULL `p` must be valid for a write of `T`.
#[inline]
pub(crate) unsafe fn out<T>(p: *mut T, v: T) -> Result<(), doca_error_t> {
    if p.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL is checked; writability is the caller's contract above.
    unsafe { p.write(v) };
    Ok(())
}
