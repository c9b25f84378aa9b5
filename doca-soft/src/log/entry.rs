//! The `doca_log_*` C entry points: registering sources, creating backends (standard, file,
//! fd, buffer, syslog), level limits per backend and global, and the soft extensions
//! `doca_soft_log_enabled` / `doca_soft_log_emit` behind the C header's `doca_log()`. They
//! check their arguments and act on the model of `log.rs` (its state, backends and records).

use core::ffi::CStr;

use super::*;
use crate::ffi::{guard, guard_err, out};

/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn c_str<'a>(s: *const c_char) -> Option<&'a str> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    unsafe { CStr::from_ptr(s) }.to_str().ok()
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_register_source(source_name: *const c_char, source: *mut c_int) -> doca_error_t {
    guard_err(|| {
        // SAFETY: C passes a NUL-terminated name (or NULL, refused).
        let name = unsafe { c_str(source_name) }.ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if source.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut st = state();
        let id = st.sources.len();
        let id_c = c_int::try_from(id).map_err(|_| DOCA_ERROR_FULL)?;
        st.sources.push(Some(name.to_string()));
        // SAFETY: non-NULL checked; the caller gives a writable int.
        unsafe { out(source, id_c) }
    })
}

#[no_mangle]
pub extern "C" fn doca_log_unregister_source(source: c_int) -> doca_error_t {
    guard_err(|| {
        let mut st = state();
        let slot = usize::try_from(source).ok().and_then(|i| st.sources.get_mut(i)).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        slot.take().map(|_| ()).ok_or(DOCA_ERROR_NOT_FOUND)
    })
}

/// Adds a backend that follows the current globals, returning its C handle.
fn add_backend(sdk: bool, sink: Sink, lower: u32, upper: u32) -> *mut doca_log_backend {
    let mut st = state();
    let b =
        Box::into_raw(Box::new(doca_log_backend { sdk, sink, lower, upper, lower_pinned: false, upper_pinned: false }));
    st.backends.push(Backend(b));
    refresh(&st);
    b
}

fn new_backend(sdk: bool, sink: Sink, backend: *mut *mut doca_log_backend) -> Result<(), doca_error_t> {
    if backend.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let (lower, upper) = {
        let st = state();
        (if sdk { st.global_sdk } else { st.global_lower }, st.global_upper)
    };
    let b = add_backend(sdk, sink, lower, upper);
    // SAFETY: non-NULL checked; the caller gives a writable pointer.
    unsafe { out(backend, b) }
}

#[no_mangle]
pub extern "C" fn doca_log_backend_create_standard() -> doca_error_t {
    guard_err(|| {
        let (lower, upper) = {
            let st = state();
            (st.global_lower, st.global_upper)
        };
        // SAFETY: reading glibc's stream pointers, initialised before main.
        let (out_f, err_f) = unsafe { (stdout as usize, stderr as usize) };
        // stdout: INFO and more verbose; its severe end is pinned at INFO.
        let o = add_backend(false, Sink::File(out_f), lower, DOCA_LOG_LEVEL_INFO);
        // stderr: WARNING and more severe; its verbose end is pinned at WARNING.
        let e = add_backend(false, Sink::File(err_f), DOCA_LOG_LEVEL_WARNING, upper);
        let st = state();
        // SAFETY: just created, never freed; the lock is held.
        unsafe {
            (*o).upper_pinned = true;
            (*e).lower_pinned = true;
        }
        refresh(&st);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_create_with_file(
    fptr: *mut libc::FILE,
    backend: *mut *mut doca_log_backend,
) -> doca_error_t {
    guard_err(|| file_backend(false, fptr, backend))
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_create_with_file_sdk(
    fptr: *mut libc::FILE,
    backend: *mut *mut doca_log_backend,
) -> doca_error_t {
    guard_err(|| file_backend(true, fptr, backend))
}

fn file_backend(sdk: bool, fptr: *mut libc::FILE, backend: *mut *mut doca_log_backend) -> Result<(), doca_error_t> {
    if fptr.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    new_backend(sdk, Sink::File(fptr as usize), backend)
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_create_with_fd(
    fd: c_int,
    backend: *mut *mut doca_log_backend,
) -> doca_error_t {
    guard_err(|| fd_backend(false, fd, backend))
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_create_with_fd_sdk(
    fd: c_int,
    backend: *mut *mut doca_log_backend,
) -> doca_error_t {
    guard_err(|| fd_backend(true, fd, backend))
}

fn fd_backend(sdk: bool, fd: c_int, backend: *mut *mut doca_log_backend) -> Result<(), doca_error_t> {
    if fd < 0 {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    new_backend(sdk, Sink::Fd(fd), backend)
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_create_with_buf(
    buf: *mut c_char,
    capacity: usize,
    handler: log_flush_callback,
    backend: *mut *mut doca_log_backend,
) -> doca_error_t {
    guard_err(|| buf_backend(false, buf, capacity, handler, backend))
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_create_with_buf_sdk(
    buf: *mut c_char,
    capacity: usize,
    handler: log_flush_callback,
    backend: *mut *mut doca_log_backend,
) -> doca_error_t {
    guard_err(|| buf_backend(true, buf, capacity, handler, backend))
}

fn buf_backend(
    sdk: bool,
    buf: *mut c_char,
    capacity: usize,
    handler: log_flush_callback,
    backend: *mut *mut doca_log_backend,
) -> Result<(), doca_error_t> {
    if buf.is_null() || capacity == 0 || handler.is_none() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    new_backend(sdk, Sink::Buf { buf: buf as usize, capacity, handler }, backend)
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_create_with_syslog(
    name: *const c_char,
    backend: *mut *mut doca_log_backend,
) -> doca_error_t {
    // SAFETY: forwarded; `name` is NULL or NUL-terminated.
    guard_err(|| unsafe { syslog_backend(false, name, backend) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_create_with_syslog_sdk(
    name: *const c_char,
    backend: *mut *mut doca_log_backend,
) -> doca_error_t {
    // SAFETY: forwarded; `name` is NULL or NUL-terminated.
    guard_err(|| unsafe { syslog_backend(true, name, backend) })
}

/// # Safety
/// `name` is NULL or NUL-terminated.
unsafe fn syslog_backend(
    sdk: bool,
    name: *const c_char,
    backend: *mut *mut doca_log_backend,
) -> Result<(), doca_error_t> {
    // SAFETY: per this function's contract.
    let name = unsafe { c_str(name) }.ok_or(DOCA_ERROR_INVALID_VALUE)?;
    if backend.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // openlog keeps the identity pointer: leak it for the life of the process (one per backend).
    let ident = CString::new(name).map_err(|_| DOCA_ERROR_INVALID_VALUE)?.into_raw();
    // SAFETY: `ident` is a NUL-terminated string that is never freed.
    unsafe { libc::openlog(ident, libc::LOG_PID, libc::LOG_USER) };
    new_backend(sdk, Sink::Syslog, backend)
}

/// Changes one backend under the lock.
///
/// # Safety
/// `backend` is NULL or a handle from one of the constructors above.
unsafe fn with_backend(
    backend: *mut doca_log_backend,
    f: impl FnOnce(&mut doca_log_backend) -> Result<(), doca_error_t>,
) -> Result<(), doca_error_t> {
    if backend.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let st = state();
    if !st.backends.iter().any(|b| b.0 == backend) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: a live backend of ours (checked above), changed only with the lock held.
    let r = f(unsafe { &mut *backend });
    refresh(&st);
    r
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_set_level_lower_limit(
    backend: *mut doca_log_backend,
    level: u32,
) -> doca_error_t {
    // SAFETY: forwarded handle.
    guard_err(|| unsafe {
        with_backend(backend, |b| {
            if !valid_level(level) || b.sdk {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            b.lower = level;
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_set_level_upper_limit(
    backend: *mut doca_log_backend,
    upper_limit: u32,
) -> doca_error_t {
    // SAFETY: forwarded handle.
    guard_err(|| unsafe {
        with_backend(backend, |b| {
            if !valid_level(upper_limit) {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            b.upper = upper_limit;
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_set_level_lower_limit_strict(backend: *mut doca_log_backend) -> doca_error_t {
    // SAFETY: forwarded handle.
    guard_err(|| unsafe {
        with_backend(backend, |b| {
            b.lower_pinned = true;
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_set_level_upper_limit_strict(backend: *mut doca_log_backend) -> doca_error_t {
    // SAFETY: forwarded handle.
    guard_err(|| unsafe {
        with_backend(backend, |b| {
            b.upper_pinned = true;
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_log_backend_set_sdk_level(backend: *mut doca_log_backend, level: u32) -> doca_error_t {
    // SAFETY: forwarded handle.
    guard_err(|| unsafe {
        with_backend(backend, |b| {
            if !valid_level(level) || !b.sdk {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            b.lower = level;
            Ok(())
        })
    })
}

/// Sets a global limit and every unpinned backend limit of the matching kind.
fn set_global(level: u32, which: fn(&mut State) -> &mut u32, apply: impl Fn(&mut doca_log_backend)) -> doca_error_t {
    guard_err(|| {
        if !valid_level(level) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut st = state();
        *which(&mut st) = level;
        for b in &st.backends {
            // SAFETY: backends are never freed; the lock is held.
            apply(unsafe { &mut *b.0 });
        }
        refresh(&st);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn doca_log_level_set_global_lower_limit(level: u32) -> doca_error_t {
    set_global(
        level,
        |s| &mut s.global_lower,
        |b| {
            if !b.sdk && !b.lower_pinned {
                b.lower = level;
            }
        },
    )
}

#[no_mangle]
pub extern "C" fn doca_log_level_set_global_upper_limit(upper_limit: u32) -> doca_error_t {
    set_global(
        upper_limit,
        |s| &mut s.global_upper,
        |b| {
            if !b.upper_pinned {
                b.upper = upper_limit;
            }
        },
    )
}

#[no_mangle]
pub extern "C" fn doca_log_level_set_global_sdk_limit(level: u32) -> doca_error_t {
    set_global(
        level,
        |s| &mut s.global_sdk,
        |b| {
            if b.sdk && !b.lower_pinned {
                b.lower = level;
            }
        },
    )
}

#[no_mangle]
pub extern "C" fn doca_log_level_get_global_lower_limit() -> u32 {
    guard(DOCA_LOG_LEVEL_INFO, || state().global_lower)
}

#[no_mangle]
pub extern "C" fn doca_log_level_get_global_upper_limit() -> u32 {
    guard(DOCA_LOG_LEVEL_CRIT, || state().global_upper)
}

#[no_mangle]
pub extern "C" fn doca_log_level_get_global_sdk_limit() -> u32 {
    guard(DOCA_LOG_LEVEL_INFO, || state().global_sdk)
}

/// Soft-provider detail behind the header's `static inline doca_log`: whether an application
/// backend would print a record of `level`.
#[no_mangle]
pub extern "C" fn doca_soft_log_enabled(level: u32) -> c_int {
    c_int::from(level > DOCA_LOG_LEVEL_DISABLE && level <= APP_MOST_VERBOSE.load(Ordering::Relaxed))
}

/// Soft-provider detail behind the header's `static inline doca_log`: logs one formatted
/// application record. INVALID_VALUE for an unknown or unregistered source or a level outside
/// CRIT..TRACE.
#[no_mangle]
pub unsafe extern "C" fn doca_soft_log_emit(
    level: u32,
    source: c_int,
    fname: *const c_char,
    line: c_int,
    func: *const c_char,
    message: *const c_char,
) -> doca_error_t {
    guard_err(|| {
        if !(DOCA_LOG_LEVEL_CRIT..=DOCA_LOG_LEVEL_TRACE).contains(&level) || message.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if in_sink() {
            // Logged from inside a buffer handler: dropped rather than deadlocking.
            return Ok(());
        }
        // SAFETY: C passes NUL-terminated strings (__FILE__, __func__, the formatted text).
        let (file, func, msg) = unsafe {
            (
                c_str(fname).unwrap_or("?"),
                c_str(func).unwrap_or("?"),
                CStr::from_ptr(message).to_string_lossy().into_owned(),
            )
        };
        let st = state();
        let name = usize::try_from(source)
            .ok()
            .and_then(|i| st.sources.get(i))
            .and_then(|s| s.as_deref())
            .ok_or(DOCA_ERROR_INVALID_VALUE)?;
        let record = format_record(level, name, file, u32::try_from(line).unwrap_or(0), func, &msg);
        dispatch(&st, false, level, &record);
        Ok(())
    })
}
