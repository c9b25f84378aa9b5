//! `doca_error_get_name` / `doca_error_get_descr`: static, NUL-terminated text for status
//! codes.
//!
//! Both functions return pointers to `'static` C strings owned by this library: the caller
//! never frees them and they stay valid for the life of the process. A code this build does
//! not know (a value from a newer DOCA, or garbage) gets a fixed "unrecognized" string, never
//! NULL, so `printf("%s", doca_error_get_name(e))` is always safe.
//!
//! The descriptions are written for this project (not copied from NVIDIA's headers).

use core::ffi::{c_char, CStr};

use crate::ffi::guard;
use crate::types::*;

/// Name returned for a code outside the known table. A `static`, not a `const`: every
/// unknown code gets the same pointer (a `const` is copied at each use, and only an optimiser's
/// merging made the copies share an address; under AddressSanitizer they did not).
pub static UNKNOWN_NAME: &CStr = c"DOCA_ERROR_UNRECOGNIZED_CODE";
/// Description returned for a code outside the known table (a `static`, as above).
pub static UNKNOWN_DESCR: &CStr = c"Status code not known to this build of the DOCA provider";

/// Symbolic names, indexed by code. Must stay in step with `DOCA_ERROR_NAMES` in types.rs
/// (a unit test checks that).
static NAMES: [&CStr; 31] = [
    c"DOCA_SUCCESS",
    c"DOCA_ERROR_UNKNOWN",
    c"DOCA_ERROR_NOT_PERMITTED",
    c"DOCA_ERROR_IN_USE",
    c"DOCA_ERROR_NOT_SUPPORTED",
    c"DOCA_ERROR_AGAIN",
    c"DOCA_ERROR_INVALID_VALUE",
    c"DOCA_ERROR_NO_MEMORY",
    c"DOCA_ERROR_INITIALIZATION",
    c"DOCA_ERROR_TIME_OUT",
    c"DOCA_ERROR_SHUTDOWN",
    c"DOCA_ERROR_CONNECTION_RESET",
    c"DOCA_ERROR_CONNECTION_ABORTED",
    c"DOCA_ERROR_CONNECTION_INPROGRESS",
    c"DOCA_ERROR_NOT_CONNECTED",
    c"DOCA_ERROR_NO_LOCK",
    c"DOCA_ERROR_NOT_FOUND",
    c"DOCA_ERROR_IO_FAILED",
    c"DOCA_ERROR_BAD_STATE",
    c"DOCA_ERROR_UNSUPPORTED_VERSION",
    c"DOCA_ERROR_OPERATING_SYSTEM",
    c"DOCA_ERROR_DRIVER",
    c"DOCA_ERROR_UNEXPECTED",
    c"DOCA_ERROR_ALREADY_EXIST",
    c"DOCA_ERROR_FULL",
    c"DOCA_ERROR_EMPTY",
    c"DOCA_ERROR_IN_PROGRESS",
    c"DOCA_ERROR_TOO_BIG",
    c"DOCA_ERROR_AUTHENTICATION",
    c"DOCA_ERROR_BAD_CONFIG",
    c"DOCA_ERROR_SKIPPED",
];

/// One-line descriptions, indexed by code (our own wording).
static DESCRS: [&CStr; 31] = [
    c"The call succeeded",
    c"An error occurred that fits no other category",
    c"The caller is not allowed to perform this operation",
    c"The object is still in use by another object or operation",
    c"This operation or configuration is not supported here",
    c"The resource is busy for now; retry the operation later",
    c"An argument is missing, out of range or malformed",
    c"Out of memory, or a fixed pool (such as a task pool) is exhausted",
    c"Setting up a resource failed",
    c"The operation did not finish in the allowed time",
    c"The object is shutting down or has shut down; the operation was cancelled",
    c"The peer reset the connection",
    c"The connection was aborted",
    c"The connection is still being established",
    c"The object is not connected",
    c"A required lock could not be taken",
    c"The requested item does not exist",
    c"An input/output operation failed",
    c"The object is not in a state that allows this operation",
    c"The data has a format version this build cannot handle",
    c"A system call failed",
    c"The device driver reported a failure",
    c"An internal inconsistency was detected",
    c"The item already exists",
    c"The container is full",
    c"The container is empty",
    c"The operation has started and will finish asynchronously",
    c"The value or request is larger than allowed",
    c"Authentication failed",
    c"The configuration is invalid",
    c"The operation was skipped",
];

fn lookup(table: &'static [&'static CStr; 31], err: doca_error_t, unknown: &'static CStr) -> &'static CStr {
    usize::try_from(err.0).ok().and_then(|i| table.get(i).copied()).unwrap_or(unknown)
}

/// The symbolic name of `error` (`"DOCA_ERROR_NO_MEMORY"`). Never NULL.
#[no_mangle]
pub unsafe extern "C" fn doca_error_get_name(error: doca_error_t) -> *const c_char {
    guard(UNKNOWN_NAME.as_ptr(), || lookup(&NAMES, error, UNKNOWN_NAME).as_ptr())
}

/// A one-line human-readable description of `error`. Never NULL.
#[no_mangle]
pub unsafe extern "C" fn doca_error_get_descr(error: doca_error_t) -> *const c_char {
    guard(UNKNOWN_DESCR.as_ptr(), || lookup(&DESCRS, error, UNKNOWN_DESCR).as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> String {
        assert!(!p.is_null());
        // SAFETY: both functions return pointers to 'static NUL-terminated strings.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
    }

    #[test]
    fn names_match_the_shared_table() {
        for (i, want) in DOCA_ERROR_NAMES.iter().enumerate() {
            let e = doca_error_t(i as i32);
            // SAFETY: plain value argument; returns a static string.
            assert_eq!(s(unsafe { doca_error_get_name(e) }), *want);
            // SAFETY: as above.
            let d = s(unsafe { doca_error_get_descr(e) });
            assert!(!d.is_empty());
        }
    }

    #[test]
    fn unknown_codes_get_a_fixed_string() {
        for v in [-1, 31, 1000, i32::MIN, i32::MAX] {
            // SAFETY: plain value argument; returns a static string.
            let n = unsafe { doca_error_get_name(doca_error_t(v)) };
            assert_eq!(n, UNKNOWN_NAME.as_ptr());
            // SAFETY: as above.
            let d = unsafe { doca_error_get_descr(doca_error_t(v)) };
            assert_eq!(d, UNKNOWN_DESCR.as_ptr());
        }
    }
}
