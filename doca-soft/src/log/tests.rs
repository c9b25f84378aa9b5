//! Unit tests of `log.rs` (moved out of line: longer than the workspace's ~150-line limit for
//! inline test modules).

use super::*;
use core::ffi::CStr;
use std::sync::atomic::AtomicUsize;

// The log state is process-global: these tests use SDK records through a pipe backend
// and check only what they added, so they do not disturb each other.

fn pipe() -> (c_int, c_int) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) }, 0);
    (fds[0], fds[1])
}

fn drain(fd: c_int) -> String {
    let mut v = vec![0u8; 65536];
    // SAFETY: `v` is writable for its length.
    let n = unsafe { libc::read(fd, v.as_mut_ptr().cast(), v.len()) };
    v.truncate(n.max(0) as usize);
    String::from_utf8(v).unwrap()
}

#[test]
fn sdk_records_reach_sdk_backends_by_level() {
    let (r, w) = pipe();
    let mut b = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { doca_log_backend_create_with_fd_sdk(w, &mut b) }, DOCA_SUCCESS);
    // SAFETY: `b` is ours.
    assert_eq!(unsafe { doca_log_backend_set_sdk_level(b, DOCA_LOG_LEVEL_WARNING) }, DOCA_SUCCESS);
    // SAFETY: `b` is ours.
    unsafe { doca_log_backend_set_level_lower_limit_strict(b) };
    crate::sdk_log!(ERROR, "unique-sdk-marker {}", 42);
    crate::sdk_log!(INFO, "too-verbose-marker");
    let text = drain(r);
    assert!(text.contains("[DOCA][ERR][DOCA_SOFT]") && text.contains("unique-sdk-marker 42"), "{text}");
    assert!(!text.contains("too-verbose-marker"), "{text}");
    // SDK backends take no application lower limit.
    // SAFETY: `b` is ours.
    assert_eq!(unsafe { doca_log_backend_set_level_lower_limit(b, DOCA_LOG_LEVEL_INFO) }, DOCA_ERROR_INVALID_VALUE);
    // Silence the backend before closing its fd (backends cannot be destroyed, and the fd
    // number may be reused by another test); the lock orders this before any later write.
    // SAFETY: `b` is ours.
    assert_eq!(unsafe { doca_log_backend_set_sdk_level(b, DOCA_LOG_LEVEL_DISABLE) }, DOCA_SUCCESS);
    // SAFETY: closing our own pipe ends.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
}

#[test]
fn sources_and_application_records() {
    let mut src = -1;
    // SAFETY: valid name and out-pointer.
    assert_eq!(unsafe { doca_log_register_source(c"TEST::APP".as_ptr(), &mut src) }, DOCA_SUCCESS);
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    static mut BUF: [c_char; 64] = [0; 64];
    unsafe extern "C" fn flushed(buf: *mut c_char) {
        // SAFETY: the backend hands us its NUL-terminated buffer.
        let s = unsafe { CStr::from_ptr(buf) }.to_string_lossy().into_owned();
        assert!(s.len() <= 63);
        if s.contains("TEST::APP") {
            CALLS.fetch_add(1, Ordering::SeqCst);
        }
    }
    let mut b = std::ptr::null_mut();
    // SAFETY: a static buffer that outlives the backend's use in this test.
    let rc = unsafe { doca_log_backend_create_with_buf(std::ptr::addr_of_mut!(BUF).cast(), 64, Some(flushed), &mut b) };
    assert_eq!(rc, DOCA_SUCCESS);
    assert_eq!(doca_soft_log_enabled(DOCA_LOG_LEVEL_INFO), 1);
    // SAFETY: NUL-terminated strings.
    let emit =
        |lvl| unsafe { doca_soft_log_emit(lvl, src, c"x.c".as_ptr(), 1, c"f".as_ptr(), c"a long message".as_ptr()) };
    assert_eq!(emit(DOCA_LOG_LEVEL_ERROR), DOCA_SUCCESS);
    assert_eq!(emit(DOCA_LOG_LEVEL_DEBUG), DOCA_SUCCESS); // filtered: lower limit INFO
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    // SAFETY: `b` is ours.
    assert_eq!(unsafe { doca_log_backend_set_level_upper_limit(b, DOCA_LOG_LEVEL_WARNING) }, DOCA_SUCCESS);
    assert_eq!(emit(DOCA_LOG_LEVEL_ERROR), DOCA_SUCCESS); // filtered: more severe than WARNING
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    assert_eq!(doca_log_unregister_source(src), DOCA_SUCCESS);
    assert_eq!(emit(DOCA_LOG_LEVEL_WARNING), DOCA_ERROR_INVALID_VALUE);
    assert_eq!(doca_log_unregister_source(src), DOCA_ERROR_NOT_FOUND);
    // Quiet the backend for the other tests (its buffer is static, so it stays valid).
    // SAFETY: `b` is a live backend of ours.
    unsafe {
        assert_eq!(doca_log_backend_set_level_upper_limit(b, DOCA_LOG_LEVEL_TRACE), DOCA_SUCCESS);
        assert_eq!(doca_log_backend_set_level_lower_limit(b, DOCA_LOG_LEVEL_DISABLE), DOCA_SUCCESS);
        doca_log_backend_set_level_lower_limit_strict(b)
    };
}

#[test]
fn the_rust_hook_receives_sdk_records() {
    use std::sync::Mutex as M;
    static SEEN: M<Vec<(u32, String)>> = M::new(Vec::new());
    fn hook(level: u32, _file: &str, _line: u32, msg: &str) {
        if msg.starts_with("hook-marker") {
            SEEN.lock().unwrap().push((level, msg.to_string()));
        }
    }
    set_sdk_hook(Some(hook));
    assert!(sdk_enabled(DOCA_LOG_LEVEL_ERROR));
    crate::sdk_log!(WARNING, "hook-marker {}", 1);
    crate::sdk_log!(TRACE, "hook-marker too verbose"); // above the global SDK limit (INFO)
    assert_eq!(crate::sdk_fail!(DOCA_ERROR_NOT_SUPPORTED, "hook-marker {}", 2), DOCA_ERROR_NOT_SUPPORTED);
    set_sdk_hook(None);
    crate::sdk_log!(ERROR, "hook-marker after removal");
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            (DOCA_LOG_LEVEL_WARNING, "hook-marker 1".to_string()),
            (DOCA_LOG_LEVEL_ERROR, "hook-marker 2".to_string())
        ]
    );
}

#[test]
fn a_handler_that_logs_does_not_deadlock() {
    static mut BUF: [c_char; 256] = [0; 256];
    static SRC: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
    unsafe extern "C" fn handler(_buf: *mut c_char) {
        // SAFETY: NUL-terminated strings; this re-entry is dropped, not deadlocked.
        let r = unsafe {
            doca_soft_log_emit(
                DOCA_LOG_LEVEL_CRIT,
                SRC.load(Ordering::SeqCst),
                c"h.c".as_ptr(),
                1,
                c"h".as_ptr(),
                c"from the handler".as_ptr(),
            )
        };
        assert_eq!(r, DOCA_SUCCESS);
        crate::sdk_log!(CRIT, "from the handler, SDK side");
    }
    let mut src = -1;
    // SAFETY: valid name and out-pointer.
    assert_eq!(unsafe { doca_log_register_source(c"TEST::REENTRY".as_ptr(), &mut src) }, DOCA_SUCCESS);
    SRC.store(src, Ordering::SeqCst);
    let mut b = std::ptr::null_mut();
    // SAFETY: a static buffer that outlives the backend.
    let rc =
        unsafe { doca_log_backend_create_with_buf(std::ptr::addr_of_mut!(BUF).cast(), 256, Some(handler), &mut b) };
    assert_eq!(rc, DOCA_SUCCESS);
    // SAFETY: `b` is ours; only this test's CRIT records pass it.
    unsafe {
        doca_log_backend_set_level_lower_limit(b, DOCA_LOG_LEVEL_CRIT);
        doca_log_backend_set_level_lower_limit_strict(b);
    }
    // SAFETY: NUL-terminated strings.
    let r =
        unsafe { doca_soft_log_emit(DOCA_LOG_LEVEL_CRIT, src, c"t.c".as_ptr(), 1, c"t".as_ptr(), c"outer".as_ptr()) };
    assert_eq!(r, DOCA_SUCCESS);
    // SAFETY: `b` is ours.
    unsafe { doca_log_backend_set_level_lower_limit(b, DOCA_LOG_LEVEL_DISABLE) };
}

#[test]
fn level_arguments_are_checked() {
    assert_eq!(doca_log_level_set_global_lower_limit(5), DOCA_ERROR_INVALID_VALUE);
    assert_eq!(doca_log_level_set_global_sdk_limit(71), DOCA_ERROR_INVALID_VALUE);
    assert_eq!(doca_log_level_get_global_upper_limit(), DOCA_LOG_LEVEL_CRIT);
    let mut b = std::ptr::null_mut();
    // SAFETY: invalid arguments are refused before use.
    unsafe {
        assert_eq!(doca_log_backend_create_with_fd(-1, &mut b), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_log_backend_create_with_file(std::ptr::null_mut(), &mut b), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_log_backend_set_sdk_level(std::ptr::null_mut(), 30), DOCA_ERROR_INVALID_VALUE);
    }
}
