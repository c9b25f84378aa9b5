//! `doca_version_runtime`: which DOCA API this library implements.
//!
//! DOCA pairs it with `doca_version()`, a `static inline` in `doca_version.h` that returns the
//! version of the headers a program was compiled with; a program prints both to show what it
//! was built against and what it runs on. libdoca_soft implements the DOCA 3.0.0058 API, so
//! both say "3.0.0058" for a program built with this project's headers.

use core::ffi::c_char;

use crate::ffi::guard;
use crate::types::DOCA_VERSION_STRING;

/// The DOCA version this library implements, as a static NUL-terminated string. Never NULL.
#[no_mangle]
pub unsafe extern "C" fn doca_version_runtime() -> *const c_char {
    guard(DOCA_VERSION_STRING.as_ptr(), || DOCA_VERSION_STRING.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::*;

    #[test]
    fn runtime_version_is_the_implemented_api() {
        // SAFETY: no arguments; the result is a static C string.
        let v = unsafe { core::ffi::CStr::from_ptr(doca_version_runtime()) };
        assert_eq!(v.to_str().unwrap(), "3.0.0058");
    }

    #[test]
    fn version_encodings_match_the_documented_values() {
        assert_eq!(DOCA_VERSION_EXACT, 0x0300_003A);
        assert_eq!(DOCA_VERSION_OFFICIAL, 0x0300_E290);
        assert_eq!(UROM_PLUGIN_DOCA_API_VERSION, DOCA_VERSION_EXACT);
    }
}
