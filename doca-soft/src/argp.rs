//! `doca_argp.h`: the parameter parser every DOCA sample program uses.
//!
//! Two layers:
//!
//! * a pure parser ([`Scope`], [`parse`]): parameter specifications and an argument vector in,
//!   a list of [`Action`]s (or an error code and a message) out. It reads the `-j/--json`
//!   file but calls nothing, so it is unit-tested directly;
//! * the C entry points: one global parser (`doca_argp_init` .. `doca_argp_destroy`) that owns
//!   the registered `doca_argp_param` / `doca_argp_cmd` objects, and `doca_argp_start`, which
//!   snapshots them, parses, then runs the actions: built-in flags, each parameter's callback
//!   in command-line order, the validation callback, the DPDK callback, the command callback.
//!
//! No lock is held while a callback runs: callbacks may call argp again (a version callback
//! calls `doca_argp_destroy` and exits).
//!
//! Decisions where DOCA's documentation is silent are listed in docs/soft-provider.md
//! ("argp"): `-h` prints the usage and exits 0, `-v` without a version callback prints the
//! version and exits 0, a non-repeatable flag given twice is INVALID_VALUE, a JSON_OBJ
//! callback receives the object's JSON text, JSON values are applied where `-j` stands.

use core::ffi::{c_char, c_int, c_void, CStr};
use std::ffi::CString;
use std::sync::{Mutex, MutexGuard};

use crate::ffi::{guard, guard_err, out};
use crate::types::*;

mod parse;

// The pure parser's API keeps its `crate::argp::NAME` path (it was one file before).
pub use parse::{is_builtin, parse, strip_json_comments, usage, Action, Fail, Parsed, Scope, Spec, Value};

// ---- the C objects and the global parser ----

/// `struct doca_argp_param`: a specification and its callback.
pub struct doca_argp_param {
    spec: Spec,
    cb: doca_argp_param_cb_t,
    registered: bool,
}

/// `struct doca_argp_cmd`: a sub-command; owns the parameters and commands registered to it.
pub struct doca_argp_cmd {
    name: Option<String>,
    description: Option<String>,
    cb: doca_argp_cmd_cb_t,
    hidden: bool,
    params: Vec<*mut doca_argp_param>,
    cmds: Vec<*mut doca_argp_cmd>,
    registered: bool,
}

/// The soft-provider line logger the header's trampoline registers.
pub type doca_soft_argp_line_logger_t = Option<unsafe extern "C" fn(level: u32, line: *const c_char)>;

struct Parser {
    name: Option<String>,
    /// `argv[0]` of the last `doca_argp_start`, for a later `doca_argp_usage`.
    argv0: Option<String>,
    config: usize,
    /// Registered parameters and commands (addresses of leaked boxes), owned until destroy.
    params: Vec<usize>,
    cmds: Vec<usize>,
    version_cb: doca_argp_param_cb_t,
    validation_cb: doca_argp_validation_cb_t,
    dpdk_cb: doca_argp_dpdk_cb_t,
    logger: doca_soft_argp_line_logger_t,
    log_level: Option<u32>,
    sdk_log_level: Option<u32>,
    /// The DPDK argv handed to the DPDK callback (kept until destroy).
    dpdk_argv: Vec<CString>,
    dpdk_ptrs: Vec<*mut c_char>,
}

// SAFETY: the raw pointers (DPDK argv) point into `dpdk_argv`, owned by the same struct and
// only touched with the PARSER lock held.
unsafe impl Send for Parser {}

static PARSER: Mutex<Option<Parser>> = Mutex::new(None);

fn parser() -> MutexGuard<'static, Option<Parser>> {
    PARSER.lock().unwrap_or_else(|e| e.into_inner())
}

/// # Safety
/// `s` is NULL or NUL-terminated.
unsafe fn c_string(s: *const c_char) -> Option<String> {
    // SAFETY: per the contract.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// Frees a parameter box.
///
/// # Safety
/// `p` came from `doca_argp_param_create` and is freed once.
unsafe fn free_param(p: *mut doca_argp_param) {
    // SAFETY: per the contract.
    drop(unsafe { Box::from_raw(p) });
}

/// Frees a command box and everything registered to it.
///
/// # Safety
/// `c` came from `doca_argp_cmd_create` and is freed once.
unsafe fn free_cmd(c: *mut doca_argp_cmd) {
    // SAFETY: per the contract; children were transferred to `c` and are freed only here.
    unsafe {
        let c = Box::from_raw(c);
        for p in c.params {
            free_param(p);
        }
        for sub in c.cmds {
            free_cmd(sub);
        }
    }
}

/// The tree of scopes, snapshotted from the registered objects.
///
/// # Safety
/// Every pointer in `params`/`cmds` is a live registered object.
unsafe fn snapshot(name: &str, params: &[*mut doca_argp_param], cmds: &[*mut doca_argp_cmd]) -> Scope {
    let mut s = Scope { name: name.into(), ..Scope::default() };
    for &p in params {
        // SAFETY: per the contract.
        let p = unsafe { &*p };
        s.params.push((p.spec.clone(), p.cb));
    }
    for &c in cmds {
        // SAFETY: per the contract (children of a registered command are registered to it).
        let c = unsafe { &*c };
        // SAFETY: as above.
        let mut sub = unsafe { snapshot(c.name.as_deref().unwrap_or(""), &c.params, &c.cmds) };
        sub.description = c.description.clone().unwrap_or_default();
        sub.hidden = c.hidden;
        sub.cb = c.cb;
        s.cmds.push(sub);
    }
    s
}

/// Says one of argp's own messages: through the registered logger, else the application log.
fn say(logger: doca_soft_argp_line_logger_t, level: u32, msg: &str) {
    match logger {
        Some(f) => {
            let c = CString::new(msg.replace('\0', "")).unwrap_or_default();
            // SAFETY: the C trampoline of doca_argp.h; `c` is NUL-terminated and lives
            // during the call.
            unsafe { f(level, c.as_ptr()) };
        }
        None => crate::log::app_emit(level, "ARGP", msg),
    }
}

/// Writes text to the C program's stdout stream (so it interleaves with printf).
fn c_print(text: &str) {
    extern "C" {
        static stdout: *mut libc::FILE;
    }
    let c = CString::new(text.replace('\0', "")).unwrap_or_default();
    // SAFETY: glibc's stdout stream; `c` is NUL-terminated.
    unsafe {
        libc::fputs(c.as_ptr(), stdout);
        libc::fflush(stdout);
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_init(program_name: *const c_char, program_config: *mut c_void) -> doca_error_t {
    guard_err(|| {
        let mut g = parser();
        if g.is_some() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        *g = Some(Parser {
            // SAFETY: NULL or NUL-terminated, per the C contract.
            name: unsafe { c_string(program_name) },
            argv0: None,
            config: program_config as usize,
            params: Vec::new(),
            cmds: Vec::new(),
            version_cb: None,
            validation_cb: None,
            dpdk_cb: None,
            logger: None,
            log_level: None,
            sdk_log_level: None,
            dpdk_argv: Vec::new(),
            dpdk_ptrs: Vec::new(),
        });
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn doca_argp_destroy() -> doca_error_t {
    guard_err(|| {
        let p = parser().take().ok_or(DOCA_ERROR_BAD_STATE)?;
        // SAFETY: the registered objects are owned by the parser and freed only here.
        unsafe {
            for a in p.params {
                free_param(a as *mut doca_argp_param);
            }
            for c in p.cmds {
                free_cmd(c as *mut doca_argp_cmd);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_param_create(param: *mut *mut doca_argp_param) -> doca_error_t {
    guard_err(|| {
        if param.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if parser().is_none() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        let p = Box::into_raw(Box::new(doca_argp_param { spec: Spec::default(), cb: None, registered: false }));
        // SAFETY: non-NULL checked.
        unsafe { out(param, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_param_destroy(param: *mut doca_argp_param) -> doca_error_t {
    guard_err(|| {
        // SAFETY: a parameter of ours or NULL (refused).
        let p = unsafe { param.as_ref() }.ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if p.registered {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        // SAFETY: unregistered, so the caller still owns it; freed once.
        unsafe { free_param(param) };
        Ok(())
    })
}

/// Applies a setter to a parameter (NULL is ignored: the setters return nothing).
///
/// # Safety
/// `param` is NULL or a live parameter of ours.
unsafe fn set_param(param: *mut doca_argp_param, f: impl FnOnce(&mut doca_argp_param)) {
    guard((), || {
        // SAFETY: per the contract; the C API is single-threaded per object.
        if let Some(p) = unsafe { param.as_mut() } {
            f(p);
        }
    })
}

macro_rules! string_setter {
    ($fn:ident, $field:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $fn(param: *mut doca_argp_param, value: *const c_char) {
            // SAFETY: `param` per the C contract; `value` NULL or NUL-terminated.
            unsafe { set_param(param, |p| p.spec.$field = c_string(value)) }
        }
    };
}
string_setter!(doca_argp_param_set_short_name, short);
string_setter!(doca_argp_param_set_long_name, long);
string_setter!(doca_argp_param_set_arguments, arguments);
string_setter!(doca_argp_param_set_description, description);

macro_rules! flag_setter {
    ($fn:ident, $field:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $fn(param: *mut doca_argp_param) {
            // SAFETY: `param` per the C contract.
            unsafe { set_param(param, |p| p.spec.$field = true) }
        }
    };
}
flag_setter!(doca_argp_param_set_mandatory, mandatory);
flag_setter!(doca_argp_param_set_cli_only, cli_only);
flag_setter!(doca_argp_param_set_multiplicity, multi);
flag_setter!(doca_argp_param_set_singular, singular);
flag_setter!(doca_argp_param_set_inherited, inherited);
flag_setter!(doca_argp_param_set_hidden, hidden);

#[no_mangle]
pub unsafe extern "C" fn doca_argp_param_set_callback(param: *mut doca_argp_param, callback: doca_argp_param_cb_t) {
    // SAFETY: `param` per the C contract.
    unsafe { set_param(param, |p| p.cb = callback) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_param_set_type(param: *mut doca_argp_param, ty: doca_argp_type) {
    // SAFETY: `param` per the C contract.
    unsafe { set_param(param, |p| p.spec.ty = ty) }
}

/// The checks of a registration, shared by the program and commands. Takes ownership in all
/// cases (the caller stores the pointer even on failure).
fn check_param(p: &mut doca_argp_param, taken: &[Spec]) -> Result<(), doca_error_t> {
    if p.registered {
        return Err(crate::sdk_fail!(DOCA_ERROR_BAD_STATE, "argp: parameter {} registered twice", p.spec.display()));
    }
    p.registered = true;
    let s = &p.spec;
    let typed = (DOCA_ARGP_TYPE_STRING..=DOCA_ARGP_TYPE_JSON_OBJ).contains(&s.ty);
    if (s.short.is_none() && s.long.is_none()) || s.description.is_none() || p.cb.is_none() || !typed {
        return Err(crate::sdk_fail!(
            DOCA_ERROR_INITIALIZATION,
            "argp: parameter {} needs a name, a description, a callback and a type",
            s.display()
        ));
    }
    for n in s.short.iter().chain(&s.long) {
        let clash = is_builtin(n)
            || n.is_empty()
            || n.starts_with('-')
            || n.contains('=')
            || taken.iter().any(|t| t.short.as_deref() == Some(n) || t.long.as_deref() == Some(n));
        if clash {
            return Err(crate::sdk_fail!(DOCA_ERROR_INVALID_VALUE, "argp: flag name `{n}` is reserved or taken"));
        }
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_register_param(input_param: *mut doca_argp_param) -> doca_error_t {
    guard_err(|| {
        if input_param.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut g = parser();
        let st = g.as_mut().ok_or(DOCA_ERROR_BAD_STATE)?;
        // SAFETY: the caller hands over a live parameter; registration transfers it to us.
        let p = unsafe { &mut *input_param };
        let was = p.registered;
        let taken: Vec<Spec> = st
            .params
            .iter()
            // SAFETY: registered parameters live until destroy.
            .map(|&a| unsafe { &*(a as *const doca_argp_param) })
            .filter(|q| registered_ok_param(q))
            .map(|q| q.spec.clone())
            .collect();
        let r = check_param(p, &taken);
        if !was {
            st.params.push(input_param as usize);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_cmd_create(cmd: *mut *mut doca_argp_cmd) -> doca_error_t {
    guard_err(|| {
        if cmd.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if parser().is_none() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        let c = Box::into_raw(Box::new(doca_argp_cmd {
            name: None,
            description: None,
            cb: None,
            hidden: false,
            params: Vec::new(),
            cmds: Vec::new(),
            registered: false,
        }));
        // SAFETY: non-NULL checked.
        unsafe { out(cmd, c) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_cmd_destroy(cmd: *mut doca_argp_cmd) -> doca_error_t {
    guard_err(|| {
        // SAFETY: a command of ours or NULL (refused).
        let c = unsafe { cmd.as_ref() }.ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if c.registered {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        // SAFETY: unregistered, so still the caller's; freed once with its children.
        unsafe { free_cmd(cmd) };
        Ok(())
    })
}

/// # Safety
/// `cmd` is NULL or a live command of ours.
unsafe fn set_cmd(cmd: *mut doca_argp_cmd, f: impl FnOnce(&mut doca_argp_cmd)) {
    guard((), || {
        // SAFETY: per the contract.
        if let Some(c) = unsafe { cmd.as_mut() } {
            f(c);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_cmd_set_name(cmd: *mut doca_argp_cmd, name: *const c_char) {
    // SAFETY: per the C contract.
    unsafe { set_cmd(cmd, |c| c.name = c_string(name)) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_cmd_set_description(cmd: *mut doca_argp_cmd, description: *const c_char) {
    // SAFETY: per the C contract.
    unsafe { set_cmd(cmd, |c| c.description = c_string(description)) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_cmd_set_callback(cmd: *mut doca_argp_cmd, callback: doca_argp_cmd_cb_t) {
    // SAFETY: per the C contract.
    unsafe { set_cmd(cmd, |c| c.cb = callback) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_cmd_set_hidden(cmd: *mut doca_argp_cmd) {
    // SAFETY: per the C contract.
    unsafe { set_cmd(cmd, |c| c.hidden = true) }
}

/// Registration checks of a command (it must have a name and a description).
fn check_cmd(c: &mut doca_argp_cmd, taken: &[String]) -> Result<(), doca_error_t> {
    if c.registered {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    c.registered = true;
    match (&c.name, &c.description) {
        (Some(n), Some(_)) if !n.is_empty() && !n.starts_with('-') => {
            if taken.contains(n) {
                return Err(crate::sdk_fail!(DOCA_ERROR_INVALID_VALUE, "argp: command `{n}` registered twice"));
            }
            Ok(())
        }
        _ => Err(crate::sdk_fail!(DOCA_ERROR_INITIALIZATION, "argp: a command needs a name and a description")),
    }
}

/// # Safety
/// `cmds` holds live commands.
unsafe fn cmd_names(cmds: &[*mut doca_argp_cmd]) -> Vec<String> {
    // SAFETY: per the contract.
    cmds.iter().filter_map(|&c| unsafe { &*c }.name.clone()).collect()
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_register_cmd(input_cmd: *mut doca_argp_cmd) -> doca_error_t {
    guard_err(|| {
        if input_cmd.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut g = parser();
        let st = g.as_mut().ok_or(DOCA_ERROR_BAD_STATE)?;
        let ptrs: Vec<*mut doca_argp_cmd> = st.cmds.iter().map(|&c| c as *mut doca_argp_cmd).collect();
        // SAFETY: registered commands are live; the input is the caller's live command.
        let (taken, c) = unsafe { (cmd_names(&ptrs), &mut *input_cmd) };
        let was = c.registered;
        let r = check_cmd(c, &taken);
        if !was {
            st.cmds.push(input_cmd as usize);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_cmd_register_param(
    cmd: *mut doca_argp_cmd,
    input_param: *mut doca_argp_param,
) -> doca_error_t {
    guard_err(|| {
        if cmd.is_null() || input_param.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: live objects of ours, per the C contract.
        let (c, p) = unsafe { (&mut *cmd, &mut *input_param) };
        let was = p.registered;
        // SAFETY: the command's parameters are live (it owns them).
        let taken: Vec<Spec> = c
            .params
            .iter()
            .map(|&q| unsafe { &*q })
            .filter(|q| registered_ok_param(q))
            .map(|q| q.spec.clone())
            .collect();
        let r = check_param(p, &taken);
        if !was {
            c.params.push(input_param);
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_cmd_register_cmd(
    cmd: *mut doca_argp_cmd,
    input_cmd: *mut doca_argp_cmd,
) -> doca_error_t {
    guard_err(|| {
        if cmd.is_null() || input_cmd.is_null() || cmd == input_cmd {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: distinct live commands of ours, per the C contract.
        let (c, sub) = unsafe { (&mut *cmd, &mut *input_cmd) };
        // SAFETY: the command's children are live.
        let taken = unsafe { cmd_names(&c.cmds) };
        let was = sub.registered;
        let r = check_cmd(sub, &taken);
        if !was {
            c.cmds.push(input_cmd);
        }
        r
    })
}

/// Sets one callback slot of the parser.
fn set_parser(f: impl FnOnce(&mut Parser)) -> doca_error_t {
    guard_err(|| {
        let mut g = parser();
        f(g.as_mut().ok_or(DOCA_ERROR_BAD_STATE)?);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn doca_argp_register_version_callback(callback: doca_argp_param_cb_t) -> doca_error_t {
    if callback.is_none() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    set_parser(|p| p.version_cb = callback)
}

#[no_mangle]
pub extern "C" fn doca_argp_register_validation_callback(callback: doca_argp_validation_cb_t) -> doca_error_t {
    if callback.is_none() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    set_parser(|p| p.validation_cb = callback)
}

#[no_mangle]
pub extern "C" fn doca_argp_set_dpdk_program(callback: doca_argp_dpdk_cb_t) {
    // Returns nothing in DOCA's API: before init there is nothing to mark.
    let _ = set_parser(|p| p.dpdk_cb = callback);
}

/// Soft-provider detail behind the header's `static inline doca_argp_register_logger_callback`.
#[no_mangle]
pub extern "C" fn doca_soft_argp_set_line_logger(logger: doca_soft_argp_line_logger_t) -> doca_error_t {
    if logger.is_none() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    set_parser(|p| p.logger = logger)
}

#[no_mangle]
pub extern "C" fn doca_argp_disable_logger_callback() -> doca_error_t {
    set_parser(|p| p.logger = None)
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_get_log_level(log_level: *mut c_int) -> doca_error_t {
    guard_err(|| {
        let given = parser().as_ref().ok_or(DOCA_ERROR_BAD_STATE)?.log_level;
        let v = given.unwrap_or_else(|| crate::log::doca_log_level_get_global_lower_limit());
        // SAFETY: NULL is refused by `out`; otherwise a writable int per the C contract.
        unsafe { out(log_level, v as c_int) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_get_sdk_log_level(log_level: *mut c_int) -> doca_error_t {
    guard_err(|| {
        let given = parser().as_ref().ok_or(DOCA_ERROR_BAD_STATE)?.sdk_log_level;
        let v = given.unwrap_or_else(|| crate::log::doca_log_level_get_global_sdk_limit());
        // SAFETY: NULL is refused by `out`; otherwise a writable int per the C contract.
        unsafe { out(log_level, v as c_int) }
    })
}

/// The program name for the usage: init's name, else `argv[0]`'s last path component.
fn program_name(p: &Parser, argv0: Option<&str>) -> String {
    p.name
        .clone()
        .or_else(|| argv0.or(p.argv0.as_deref()).map(|a| a.rsplit('/').next().unwrap_or(a).to_string()))
        .unwrap_or_else(|| "program".into())
}

/// The snapshot `doca_argp_start` and `doca_argp_usage` work from.
fn snapshot_now(argv0: Option<&str>) -> Result<(Scope, String), doca_error_t> {
    let g = parser();
    let p = g.as_ref().ok_or(DOCA_ERROR_BAD_STATE)?;
    let name = program_name(p, argv0);
    let params: Vec<*mut doca_argp_param> = p.params.iter().map(|&a| a as *mut doca_argp_param).collect();
    let cmds: Vec<*mut doca_argp_cmd> = p.cmds.iter().map(|&a| a as *mut doca_argp_cmd).collect();
    // Only successfully registered objects take part.
    // SAFETY: registered objects are live until destroy, which needs this lock.
    let (params, cmds): (Vec<_>, Vec<_>) = unsafe {
        (
            params.into_iter().filter(|&q| registered_ok_param(&*q)).collect(),
            cmds.into_iter().filter(|&c| (*c).name.is_some() && (*c).description.is_some()).collect(),
        )
    };
    // SAFETY: as above.
    let scope = unsafe { snapshot(&name, &params, &cmds) };
    Ok((scope, name))
}

fn registered_ok_param(p: &doca_argp_param) -> bool {
    let s = &p.spec;
    (s.short.is_some() || s.long.is_some())
        && s.description.is_some()
        && p.cb.is_some()
        && (DOCA_ARGP_TYPE_STRING..=DOCA_ARGP_TYPE_JSON_OBJ).contains(&s.ty)
}

#[no_mangle]
pub extern "C" fn doca_argp_usage() {
    let text = guard(None, || snapshot_now(None).ok().map(|(scope, name)| usage(&name, &[&scope])));
    // It returns: DOCA 3.x samples call it from their own checks and then clean up
    // (`doca_argp_usage(); doca_argp_destroy(); return ...`).
    if let Some(t) = text {
        c_print(&t);
    }
}

/// Calls a parameter callback with its value laid out as DOCA passes it.
///
/// # Safety
/// `cb` is the program's callback; `config` its config pointer.
unsafe fn call_param(cb: doca_argp_param_cb_t, value: &Value, config: *mut c_void) -> doca_error_t {
    let Some(f) = cb else { return DOCA_ERROR_INVALID_VALUE };
    // SAFETY: (all arms) the pointee lives on this stack frame for the whole call, with the
    // type DOCA documents for the parameter's type; callbacks copy what they keep.
    unsafe {
        match value {
            Value::Str(s) | Value::Json(s) => {
                let c = CString::new(s.replace('\0', "")).unwrap_or_default();
                let mut bytes = c.into_bytes_with_nul();
                f(bytes.as_mut_ptr().cast(), config)
            }
            Value::Int(n) => {
                let mut n: c_int = *n;
                f((&mut n as *mut c_int).cast(), config)
            }
            Value::Bool(b) => {
                let mut b: bool = *b;
                f((&mut b as *mut bool).cast(), config)
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_argp_start(argc: c_int, argv: *mut *mut c_char) -> doca_error_t {
    guard_err(|| {
        let n = usize::try_from(argc).map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
        if n > 0 && argv.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let args: Vec<String> = (0..n)
            // SAFETY: argv has argc entries, each NULL or NUL-terminated (C's main contract).
            .map(|i| unsafe { c_string(*argv.add(i)) }.unwrap_or_default())
            .collect();
        let (scope, name) = snapshot_now(args.first().map(String::as_str))?;
        let (config, logger, version_cb, validation_cb, dpdk_cb) = {
            let mut g = parser();
            let p = g.as_mut().ok_or(DOCA_ERROR_BAD_STATE)?;
            p.argv0 = args.first().cloned();
            (p.config as *mut c_void, p.logger, p.version_cb, p.validation_cb, p.dpdk_cb)
        };
        let parsed = match parse(&scope, &args, dpdk_cb.is_some()) {
            Ok(p) => p,
            Err(f) => {
                say(logger, DOCA_LOG_LEVEL_ERROR, &f.msg);
                say(logger, DOCA_LOG_LEVEL_ERROR, &format!("run `{name} --help` for the flags"));
                return Err(f.err);
            }
        };
        for action in &parsed.actions {
            match action {
                Action::Help => {
                    // The usage of the innermost command given.
                    let mut path = vec![&scope];
                    for word in args.iter().skip(1) {
                        if let Some(c) = path.last().unwrap().cmds.iter().find(|c| c.name == *word) {
                            path.push(c);
                        }
                    }
                    c_print(&usage(&name, &path));
                    let _ = doca_argp_destroy();
                    // SAFETY: exit runs the program's atexit handlers and flushes its streams.
                    unsafe { libc::exit(libc::EXIT_SUCCESS) };
                }
                Action::Version => match version_cb {
                    Some(f) => {
                        // SAFETY: the program's callback with its config; the param is unused (NULL).
                        let r = unsafe { f(std::ptr::null_mut(), config) };
                        if r != DOCA_SUCCESS {
                            return Err(r);
                        }
                    }
                    None => {
                        c_print(&format!(
                            "{name}\nDOCA SDK version: 3.0 (doca-soft {}, the async-doca software provider)\n",
                            env!("CARGO_PKG_VERSION")
                        ));
                        let _ = doca_argp_destroy();
                        // SAFETY: as for --help.
                        unsafe { libc::exit(libc::EXIT_SUCCESS) };
                    }
                },
                Action::LogLevel(l) => {
                    crate::log::doca_log_level_set_global_lower_limit(*l);
                    if let Some(p) = parser().as_mut() {
                        p.log_level = Some(*l);
                    }
                }
                Action::SdkLogLevel(l) => {
                    crate::log::doca_log_level_set_global_sdk_limit(*l);
                    if let Some(p) = parser().as_mut() {
                        p.sdk_log_level = Some(*l);
                    }
                }
                Action::Param { name: pname, cb, value } => {
                    // SAFETY: the program's callback and config.
                    let r = unsafe { call_param(*cb, value, config) };
                    if r != DOCA_SUCCESS {
                        say(logger, DOCA_LOG_LEVEL_ERROR, &format!("{pname}: the value was refused"));
                        return Err(r);
                    }
                }
            }
        }
        if let Some(f) = validation_cb {
            // SAFETY: the program's callback and config.
            let r = unsafe { f(config) };
            if r != DOCA_SUCCESS {
                say(logger, DOCA_LOG_LEVEL_ERROR, "the program's validation of its flags failed");
                return Err(r);
            }
        }
        if let Some(f) = dpdk_cb {
            let (argc, argv) = {
                let mut g = parser();
                let p = g.as_mut().ok_or(DOCA_ERROR_BAD_STATE)?;
                p.dpdk_argv =
                    parsed.dpdk_args.iter().map(|a| CString::new(a.replace('\0', "")).unwrap_or_default()).collect();
                p.dpdk_ptrs = p.dpdk_argv.iter().map(|c| c.as_ptr() as *mut c_char).collect();
                p.dpdk_ptrs.push(std::ptr::null_mut());
                (p.dpdk_argv.len() as c_int, p.dpdk_ptrs.as_mut_ptr())
            };
            // SAFETY: argv points into the parser, alive until destroy (DOCA: freed by destroy).
            let r = unsafe { f(argc, argv) };
            if r != DOCA_SUCCESS {
                return Err(r);
            }
        }
        if let Some(Some(f)) = parsed.cmd_cbs.last() {
            // SAFETY: the program's command callback and config.
            let r = unsafe { f(config) };
            if r != DOCA_SUCCESS {
                return Err(r);
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests;
