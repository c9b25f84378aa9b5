//! Logging (`doca_log.h`) and parameter parsing (`doca_argp.h`) through doca-sys, so a run on a
//! BlueField (`--features system`) checks the soft provider's decisions against NVIDIA's
//! libraries. Asserted: what the API notes state (defaults, level filtering, argp's callback
//! values, mandatory and unknown flags failing). Printed for comparison: the codes and texts
//! the notes leave open (`CONFORMANCE` lines).
//!
//! argp and the log levels are process-global, so each area is one test.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use super::kit::*;

fn pipe() -> (c_int, c_int) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) }, 0);
    (fds[0], fds[1])
}

fn drain_pipe(fd: c_int) -> String {
    let mut v = vec![0u8; 1 << 16];
    // SAFETY: `v` is writable for its length.
    let n = unsafe { libc::read(fd, v.as_mut_ptr().cast(), v.len()) };
    v.truncate(n.max(0) as usize);
    String::from_utf8_lossy(&v).into_owned()
}

#[test]
fn log_defaults_and_level_filtering() {
    // SAFETY: (whole test) the log API used as a C program would, with valid pointers; the
    // pipe's ends stay open until the backends are silenced (backends cannot be destroyed).
    unsafe {
        assert_eq!(doca_log_level_get_global_lower_limit(), DOCA_LOG_LEVEL_INFO, "default global lower limit");
        assert_eq!(doca_log_level_get_global_upper_limit(), DOCA_LOG_LEVEL_CRIT, "default global upper limit");
        assert_eq!(doca_log_level_get_global_sdk_limit(), DOCA_LOG_LEVEL_INFO, "default global SDK limit");

        let mut src = -1;
        ok(doca_log_register_source(c"CONFORMANCE::LOG".as_ptr(), &mut src));
        let (r, w) = pipe();
        let mut app = std::ptr::null_mut();
        ok(doca_log_backend_create_with_fd(w, &mut app));
        let (sr, sw) = pipe();
        let mut sdk = std::ptr::null_mut();
        ok(doca_log_backend_create_with_fd_sdk(sw, &mut sdk));
        ok(doca_log_backend_set_sdk_level(sdk, DOCA_LOG_LEVEL_WARNING));

        // Application records: INFO passes, DEBUG does not (lower limit INFO).
        emit(src, DOCA_LOG_LEVEL_INFO, "conformance-info-record");
        emit(src, DOCA_LOG_LEVEL_DEBUG, "conformance-debug-record");
        ok(doca_log_level_set_global_lower_limit(DOCA_LOG_LEVEL_DEBUG));
        assert_eq!(doca_log_level_get_global_lower_limit(), DOCA_LOG_LEVEL_DEBUG);
        emit(src, DOCA_LOG_LEVEL_DEBUG, "conformance-debug-after");
        ok(doca_log_level_set_global_lower_limit(DOCA_LOG_LEVEL_INFO));
        // The upper limit cuts the severe end.
        ok(doca_log_backend_set_level_upper_limit(app, DOCA_LOG_LEVEL_WARNING));
        emit(src, DOCA_LOG_LEVEL_ERROR, "conformance-error-cut");
        let text = drain_pipe(r);
        println!("CONFORMANCE log record layout: {}", text.lines().next().unwrap_or(""));
        assert!(text.contains("conformance-info-record"), "{text}");
        assert!(!text.contains("conformance-debug-record"), "{text}");
        assert!(text.contains("conformance-debug-after"), "{text}");
        assert!(!text.contains("conformance-error-cut"), "{text}");
        assert!(text.contains("CONFORMANCE::LOG"), "the record names its source: {text}");
        // Application records never reach SDK backends.
        assert!(!drain_pipe(sr).contains("conformance-"));

        // Silence both backends, then close the pipes.
        ok(doca_log_backend_set_level_lower_limit(app, DOCA_LOG_LEVEL_DISABLE));
        ok(doca_log_backend_set_level_lower_limit_strict(app));
        ok(doca_log_backend_set_sdk_level(sdk, DOCA_LOG_LEVEL_DISABLE));
        ok(doca_log_backend_set_level_lower_limit_strict(sdk));
        for fd in [r, w, sr, sw] {
            libc::close(fd);
        }
        ok(doca_log_unregister_source(src));
    }
}

/// One application record through the provider's logging entry point.
///
/// # Safety
/// `src` is a registered source.
#[cfg(feature = "soft")]
unsafe fn emit(src: c_int, level: u32, msg: &str) {
    let m = CString::new(msg).unwrap();
    // SAFETY: NUL-terminated strings; the soft provider's half of the header's `doca_log`.
    let r = unsafe { doca_soft_log_emit(level, src, c"conformance.rs".as_ptr(), 1, c"emit".as_ptr(), m.as_ptr()) };
    ok(r);
}

/// One application record through NVIDIA's variadic `doca_log`.
///
/// # Safety
/// `src` is a registered source.
#[cfg(not(feature = "soft"))]
unsafe fn emit(src: c_int, level: u32, msg: &str) {
    let m = CString::new(msg).unwrap();
    // SAFETY: a "%s" format with one NUL-terminated string argument.
    let r =
        unsafe { doca_log(level, src, c"conformance.rs".as_ptr(), 1, c"emit".as_ptr(), c"%s".as_ptr(), m.as_ptr()) };
    ok(r);
}

// ---- argp ----

static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
static CALLS: AtomicI32 = AtomicI32::new(0);

unsafe extern "C" fn str_cb(v: *mut c_void, _cfg: *mut c_void) -> doca_error_t {
    // SAFETY: argp passes a NUL-terminated `char *` for STRING parameters.
    let s = unsafe { CStr::from_ptr(v as *const c_char) }.to_string_lossy().into_owned();
    SEEN.lock().unwrap().push(format!("str {s}"));
    DOCA_SUCCESS
}

unsafe extern "C" fn int_cb(v: *mut c_void, _cfg: *mut c_void) -> doca_error_t {
    // SAFETY: argp passes an `int *` for INT parameters.
    let n = unsafe { *(v as *const c_int) };
    SEEN.lock().unwrap().push(format!("int {n}"));
    if n < 0 {
        DOCA_ERROR_INVALID_VALUE
    } else {
        DOCA_SUCCESS
    }
}

unsafe extern "C" fn bool_cb(v: *mut c_void, cfg: *mut c_void) -> doca_error_t {
    // SAFETY: argp passes a `bool *` for BOOLEAN parameters; cfg is the AtomicI32 of init.
    let b = unsafe { *(v as *const bool) };
    SEEN.lock().unwrap().push(format!("bool {b}"));
    // SAFETY: the program config given to doca_argp_init below.
    unsafe { &*(cfg as *const AtomicI32) }.fetch_add(1, Ordering::SeqCst);
    DOCA_SUCCESS
}

unsafe fn param(short: &CStr, long: &CStr, ty: doca_argp_type, cb: doca_argp_param_cb_t, mandatory: bool) {
    let mut p = std::ptr::null_mut();
    // SAFETY: argp is initialised; the setters take the fresh parameter.
    unsafe {
        ok(doca_argp_param_create(&mut p));
        doca_argp_param_set_short_name(p, short.as_ptr());
        doca_argp_param_set_long_name(p, long.as_ptr());
        doca_argp_param_set_description(p, c"conformance parameter".as_ptr());
        doca_argp_param_set_callback(p, cb);
        doca_argp_param_set_type(p, ty);
        if mandatory {
            doca_argp_param_set_mandatory(p);
        }
        ok(doca_argp_register_param(p));
    }
}

fn start(args: &[&str]) -> doca_error_t {
    let owned: Vec<CString> = args.iter().map(|a| CString::new(*a).unwrap()).collect();
    let mut ptrs: Vec<*mut c_char> = owned.iter().map(|c| c.as_ptr() as *mut c_char).collect();
    ptrs.push(std::ptr::null_mut());
    // SAFETY: argc entries of NUL-terminated strings, NULL-terminated like C's argv.
    unsafe { doca_argp_start(owned.len() as c_int, ptrs.as_mut_ptr()) }
}

fn take() -> Vec<String> {
    std::mem::take(&mut *SEEN.lock().unwrap())
}

#[test]
fn argp_parses_types_json_and_refuses_bad_input() {
    let cfg = &CALLS as *const AtomicI32 as *mut c_void;
    // SAFETY: (whole test) the argp API used as a C program would.
    unsafe {
        ok(doca_argp_init(c"conformance".as_ptr(), cfg));
        let mut p = std::ptr::null_mut();
        ok(doca_argp_param_create(&mut p));
        doca_argp_param_set_long_name(p, c"incomplete".as_ptr());
        let r = doca_argp_register_param(p);
        println!("CONFORMANCE argp register of an incomplete param: {}", name(r));
        assert_eq!(r, DOCA_ERROR_INITIALIZATION, "the notes: missing fields give INITIALIZATION");

        param(c"d", c"device", DOCA_ARGP_TYPE_STRING, Some(str_cb), true);
        param(c"nc", c"num-connections", DOCA_ARGP_TYPE_INT, Some(int_cb), false);
        param(c"b", c"flag", DOCA_ARGP_TYPE_BOOLEAN, Some(bool_cb), false);

        ok(start(&["conformance", "-d", "mlx5_0", "-nc", "3", "--flag"]));
        assert_eq!(take(), ["str mlx5_0", "int 3", "bool true"]);
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);

        // DOCA's sectioned JSON file (keys are long names).
        let path = std::env::temp_dir().join(format!("conformance-argp-{}.json", std::process::id()));
        std::fs::write(&path, r#"{"doca_program_flags": {"device": "from-json", "num-connections": 5}}"#).unwrap();
        let r = start(&["conformance", "-j", path.to_str().unwrap()]);
        let _ = std::fs::remove_file(&path);
        println!("CONFORMANCE argp sectioned JSON: {} {:?}", name(r), SEEN.lock().unwrap());
        ok(r);
        let mut got = take();
        got.sort();
        assert_eq!(got, ["int 5", "str from-json"]);

        for (args, what) in [
            (&["conformance"][..], "missing mandatory flag"),
            (&["conformance", "-d", "x", "--no-such-flag"][..], "unknown flag"),
            (&["conformance", "-d", "x", "-nc", "seven"][..], "INT value that is not a number"),
            (&["conformance", "-d", "x", "-nc", "-1"][..], "value refused by the callback"),
        ] {
            let r = start(args);
            println!("CONFORMANCE argp {what}: {}", name(r));
            assert_ne!(r, DOCA_SUCCESS, "{what} must fail the parse");
            take();
        }
        let mut level = 0;
        ok(doca_argp_get_log_level(&mut level));
        assert_eq!(level as u32, doca_log_level_get_global_lower_limit());
        ok(doca_argp_destroy());
    }
}
