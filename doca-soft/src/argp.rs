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

// ---- the pure parser ----

/// One parameter's specification (what the setters fill in).
#[derive(Clone, Debug, Default)]
pub struct Spec {
    pub short: Option<String>,
    pub long: Option<String>,
    pub arguments: Option<String>,
    pub description: Option<String>,
    pub ty: doca_argp_type,
    pub mandatory: bool,
    pub cli_only: bool,
    pub multi: bool,
    pub singular: bool,
    pub inherited: bool,
    pub hidden: bool,
}

impl Spec {
    /// `-s, --long` as the usage and the messages name it.
    fn display(&self) -> String {
        match (&self.short, &self.long) {
            (Some(s), Some(l)) => format!("-{s}, --{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => "<unnamed>".into(),
        }
    }
}

/// A level of the command tree: the program itself or a sub-command.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub name: String,
    pub description: String,
    pub hidden: bool,
    /// The command's callback (unused for the program scope).
    pub cb: doca_argp_cmd_cb_t,
    /// Each parameter with its callback.
    pub params: Vec<(Spec, doca_argp_param_cb_t)>,
    pub cmds: Vec<Scope>,
}

/// A parsed value, as its callback will receive it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(String),
    Int(i32),
    Bool(bool),
    /// A JSON object, as text.
    Json(String),
}

/// What `doca_argp_start` does, in order.
#[derive(Clone, Debug)]
pub enum Action {
    /// `-h`: print the usage (of the innermost command given) and exit.
    Help,
    /// `-v`: run the version callback or print the version and exit.
    Version,
    /// `-l N`: the application log level.
    LogLevel(u32),
    /// `--sdk-log-level N`.
    SdkLogLevel(u32),
    /// Call a parameter's callback. `name` is for messages.
    Param { name: String, cb: doca_argp_param_cb_t, value: Value },
}

/// A successful parse.
#[derive(Debug, Default)]
pub struct Parsed {
    pub actions: Vec<Action>,
    /// The chosen command chain's callbacks, outermost first (the innermost runs).
    pub cmd_cbs: Vec<doca_argp_cmd_cb_t>,
    /// The DPDK part of a DPDK program's command line (`argv[0]` first).
    pub dpdk_args: Vec<String>,
}

/// A failed parse: DOCA's code and a message for the user.
#[derive(Debug, PartialEq)]
pub struct Fail {
    pub err: doca_error_t,
    pub msg: String,
}

fn fail<T>(err: doca_error_t, msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail { err, msg: msg.into() })
}

/// The built-in flags: (short, long, takes a value, description).
const BUILTINS: [(Option<&str>, &str, Option<&str>, &str); 5] = [
    (Some("h"), "help", None, "Print this help text and exit"),
    (Some("v"), "version", None, "Print the program's and the DOCA library's versions and exit"),
    (
        Some("l"),
        "log-level",
        Some("<level>"),
        "Application log level: 10 disable, 20 critical, 30 error, 40 warning, 50 info, 60 debug, 70 trace",
    ),
    (None, "sdk-log-level", Some("<level>"), "DOCA SDK log level, same numbers as --log-level"),
    (Some("j"), "json", Some("<path>"), "Read the flags from a JSON file (its keys are the long names)"),
];

/// Whether `name` (without dashes) is taken by a built-in flag.
pub fn is_builtin(name: &str) -> bool {
    BUILTINS.iter().any(|(s, l, _, _)| *s == Some(name) || *l == name)
}

fn parse_level(flag: &str, v: &str) -> Result<u32, Fail> {
    match v.trim().parse::<u32>() {
        Ok(n) if (DOCA_LOG_LEVEL_DISABLE..=DOCA_LOG_LEVEL_TRACE).contains(&n) && n % 10 == 0 => Ok(n),
        _ => fail(DOCA_ERROR_INVALID_VALUE, format!("{flag}: `{v}` is not a log level (10, 20, ... 70)")),
    }
}

fn parse_int(name: &str, v: &str) -> Result<i32, Fail> {
    let t = v.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let mag = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => digits.parse::<i64>(),
    };
    mag.ok()
        .filter(|_| !digits.starts_with(['+', '-']))
        .map(|m| if neg { -m } else { m })
        .and_then(|n| i32::try_from(n).ok())
        .map_or_else(|| fail(DOCA_ERROR_INVALID_VALUE, format!("{name}: `{v}` is not an integer")), Ok)
}

fn parse_bool_text(name: &str, v: &str) -> Result<bool, Fail> {
    match v {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => fail(DOCA_ERROR_INVALID_VALUE, format!("{name}: `{v}` is not true or false")),
    }
}

fn json_object_text(name: &str, v: &str) -> Result<String, Fail> {
    match serde_json::from_str::<serde_json::Value>(v) {
        Ok(o @ serde_json::Value::Object(_)) => Ok(o.to_string()),
        _ => fail(DOCA_ERROR_INVALID_VALUE, format!("{name}: the value is not a JSON object")),
    }
}

/// Parser state while walking the arguments.
struct Walk<'a> {
    /// The chain of scopes entered (program first).
    chain: Vec<&'a Scope>,
    out: Parsed,
    /// Each parameter given, by (scope depth, index), with whether it came from JSON (a
    /// command-line value may override a JSON one: its callback runs later).
    seen: Vec<((usize, usize), bool)>,
    /// Whether a singular parameter was given, and how many user flags in all.
    singular: Option<String>,
    given: usize,
}

impl<'a> Walk<'a> {
    /// Finds a parameter by name: the current scope, then inherited ones of outer scopes.
    fn find(&self, long: bool, name: &str) -> Option<((usize, usize), &'a Spec, doca_argp_param_cb_t)> {
        let depth = self.chain.len() - 1;
        for (d, scope) in self.chain.iter().enumerate().rev() {
            for (i, (spec, cb)) in scope.params.iter().enumerate() {
                let hit = if long { spec.long.as_deref() == Some(name) } else { spec.short.as_deref() == Some(name) };
                if hit && (d == depth || spec.inherited) {
                    return Some(((d, i), spec, *cb));
                }
            }
        }
        None
    }

    fn record(
        &mut self,
        key: (usize, usize),
        spec: &Spec,
        cb: doca_argp_param_cb_t,
        value: Value,
        from_json: bool,
    ) -> Result<(), Fail> {
        let name = spec.display();
        if !spec.multi && self.seen.iter().any(|&(k, j)| k == key && j == from_json) {
            return fail(DOCA_ERROR_INVALID_VALUE, format!("{name} was given more than once"));
        }
        self.seen.push((key, from_json));
        if spec.singular {
            self.singular = Some(name.clone());
        }
        self.given += 1;
        self.out.actions.push(Action::Param { name, cb, value });
        Ok(())
    }

    /// Applies a JSON configuration file at this point of the command line.
    ///
    /// Two layouts are accepted: DOCA's sectioned one, `{"doca_general_flags": {"log-level":
    /// 60}, "doca_program_flags": {"device": "mlx5_0"}}` (`doca_dpdk_flags` is refused: no
    /// DPDK here), and a flat object of long names. `//` and `/* */` comments are allowed.
    fn json_file(&mut self, path: &str) -> Result<(), Fail> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => return fail(DOCA_ERROR_IO_FAILED, format!("cannot read the JSON file {path}: {e}")),
        };
        let obj = match serde_json::from_str::<serde_json::Value>(&strip_json_comments(&text)) {
            Ok(serde_json::Value::Object(o)) => o,
            Ok(_) => return fail(DOCA_ERROR_INVALID_VALUE, format!("{path}: the top level is not a JSON object")),
            Err(e) => return fail(DOCA_ERROR_INVALID_VALUE, format!("{path}: bad JSON: {e}")),
        };
        if !obj.keys().any(|k| SECTIONS.contains(&k.as_str())) {
            return self.json_flags(path, obj);
        }
        for (section, v) in obj {
            if !SECTIONS.contains(&section.as_str()) {
                return fail(DOCA_ERROR_NOT_SUPPORTED, format!("{path}: unknown section `{section}`"));
            }
            let serde_json::Value::Object(flags) = v else {
                return fail(DOCA_ERROR_INVALID_VALUE, format!("{path}: `{section}` is not a JSON object"));
            };
            match section.as_str() {
                "doca_general_flags" | "doca_program_flags" => self.json_flags(path, flags)?,
                "doca_dpdk_flags" => {
                    return fail(
                        DOCA_ERROR_NOT_SUPPORTED,
                        format!("{path}: `doca_dpdk_flags`: the soft provider has no DPDK; pass EAL flags before `--`"),
                    )
                }
                _ => return fail(DOCA_ERROR_NOT_SUPPORTED, format!("{path}: unknown section `{section}`")),
            }
        }
        Ok(())
    }

    /// Applies one object of `long-name: value` pairs.
    fn json_flags(&mut self, path: &str, flags: serde_json::Map<String, serde_json::Value>) -> Result<(), Fail> {
        for (key, v) in flags {
            match key.as_str() {
                "log-level" | "sdk-log-level" => {
                    let n = v.as_u64().map(|n| n.to_string()).or_else(|| v.as_str().map(str::to_string));
                    let n = parse_level(&key, n.as_deref().unwrap_or("?"))?;
                    self.out.actions.push(if key == "log-level" {
                        Action::LogLevel(n)
                    } else {
                        Action::SdkLogLevel(n)
                    });
                    continue;
                }
                "json" | "help" | "version" => {
                    return fail(DOCA_ERROR_INVALID_VALUE, format!("{path}: `{key}` is not allowed in a JSON file"))
                }
                _ => {}
            }
            let Some((k, spec, cb)) = self.find(true, &key) else {
                return fail(DOCA_ERROR_NOT_SUPPORTED, format!("{path}: unknown flag `{key}`"));
            };
            if spec.cli_only {
                return fail(DOCA_ERROR_INVALID_VALUE, format!("{path}: --{key} is only accepted on the command line"));
            }
            let items = match (spec.multi, v) {
                (true, serde_json::Value::Array(a)) => a,
                (_, v) => vec![v],
            };
            for item in items {
                let value = json_value(&key, spec.ty, item)?;
                self.record(k, spec, cb, value, true)?;
            }
        }
        Ok(())
    }
}

/// The top-level sections of DOCA's JSON configuration files.
const SECTIONS: [&str; 3] = ["doca_dpdk_flags", "doca_general_flags", "doca_program_flags"];

/// `text` with `//` line comments and `/* */` block comments (outside strings) blanked out,
/// so positions in serde_json's error messages still match the file.
pub fn strip_json_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let (mut i, mut in_str) = (0, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            out.push(c);
            if c == b'\\' && i + 1 < b.len() {
                out.push(b[i + 1]);
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
            i += 1;
        } else if c == b'"' {
            in_str = true;
            out.push(c);
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = b[i + 2..].windows(2).position(|w| w == b"*/").map_or(b.len(), |p| i + 2 + p + 2);
            out.extend(b[i..end].iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    // Only ASCII bytes outside strings were replaced (by ASCII), so this stays valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

fn json_value(key: &str, ty: doca_argp_type, v: serde_json::Value) -> Result<Value, Fail> {
    use serde_json::Value as J;
    let bad = || fail(DOCA_ERROR_INVALID_VALUE, format!("JSON key `{key}`: wrong value type"));
    match (ty, v) {
        (DOCA_ARGP_TYPE_STRING, J::String(s)) => Ok(Value::Str(s)),
        (DOCA_ARGP_TYPE_INT, J::Number(n)) => match n.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) => Ok(Value::Int(n)),
            None => bad(),
        },
        (DOCA_ARGP_TYPE_BOOLEAN, J::Bool(b)) => Ok(Value::Bool(b)),
        (DOCA_ARGP_TYPE_JSON_OBJ, o @ J::Object(_)) => Ok(Value::Json(o.to_string())),
        _ => bad(),
    }
}

/// Parses `args` (argv, program name first) against the program scope.
pub fn parse(program: &Scope, args: &[String], dpdk: bool) -> Result<Parsed, Fail> {
    let mut w = Walk { chain: vec![program], out: Parsed::default(), seen: Vec::new(), singular: None, given: 0 };
    let mut rest: &[String] = args.get(1..).unwrap_or(&[]);
    if dpdk {
        // DPDK programs: "prog [EAL flags] -- [DOCA flags]".
        let cut = rest.iter().position(|a| a == "--").unwrap_or(rest.len());
        w.out.dpdk_args = args.iter().take(1).chain(&rest[..cut]).cloned().collect();
        rest = rest.get(cut + 1..).unwrap_or(&[]);
    }
    let mut i = 0;
    while i < rest.len() {
        let tok = &rest[i];
        i += 1;
        let (long, body) = if let Some(b) = tok.strip_prefix("--") {
            (true, b)
        } else if let Some(b) = tok.strip_prefix('-').filter(|b| !b.is_empty()) {
            (false, b)
        } else {
            // A word: a sub-command of the current scope.
            let here = *w.chain.last().unwrap();
            match here.cmds.iter().find(|c| c.name == *tok) {
                Some(c) => {
                    w.chain.push(c);
                    w.out.cmd_cbs.push(c.cb);
                    continue;
                }
                None => return fail(DOCA_ERROR_INVALID_VALUE, format!("unexpected argument `{tok}`")),
            }
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let flag = if long { format!("--{name}") } else { format!("-{name}") };
        // The value of a flag that takes one: after '=' or the next argument.
        let take_value = |i: &mut usize| -> Result<String, Fail> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            match rest.get(*i) {
                Some(v) => {
                    *i += 1;
                    Ok(v.clone())
                }
                None => fail(DOCA_ERROR_INVALID_VALUE, format!("{flag} needs a value")),
            }
        };
        let builtin = BUILTINS.iter().find(|(s, l, _, _)| if long { *l == name } else { *s == Some(name) });
        if let Some((_, lname, _, _)) = builtin {
            match *lname {
                "help" => return Ok(Parsed { actions: vec![Action::Help], ..w.out }),
                "version" => return Ok(Parsed { actions: vec![Action::Version], ..w.out }),
                "log-level" => {
                    let v = take_value(&mut i)?;
                    w.out.actions.push(Action::LogLevel(parse_level(&flag, &v)?));
                }
                "sdk-log-level" => {
                    let v = take_value(&mut i)?;
                    w.out.actions.push(Action::SdkLogLevel(parse_level(&flag, &v)?));
                }
                _ => {
                    let path = take_value(&mut i)?;
                    w.json_file(&path)?;
                }
            }
            continue;
        }
        let Some((key, spec, cb)) = w.find(long, name) else {
            return fail(DOCA_ERROR_NOT_SUPPORTED, format!("unknown flag {flag}"));
        };
        let value = match spec.ty {
            DOCA_ARGP_TYPE_BOOLEAN => match &inline {
                Some(v) => Value::Bool(parse_bool_text(&flag, v)?),
                None => Value::Bool(true),
            },
            DOCA_ARGP_TYPE_INT => Value::Int(parse_int(&flag, &take_value(&mut i)?)?),
            DOCA_ARGP_TYPE_JSON_OBJ => Value::Json(json_object_text(&flag, &take_value(&mut i)?)?),
            _ => Value::Str(take_value(&mut i)?),
        };
        w.record(key, spec, cb, value, false)?;
    }
    // Mandatory parameters of every scope entered.
    for (d, scope) in w.chain.iter().enumerate() {
        for (idx, (spec, _)) in scope.params.iter().enumerate() {
            if spec.mandatory && !w.seen.iter().any(|(k, _)| *k == (d, idx)) {
                return fail(DOCA_ERROR_INVALID_VALUE, format!("missing mandatory flag {}", spec.display()));
            }
        }
    }
    if let Some(s) = &w.singular {
        if w.given > 1 {
            return fail(DOCA_ERROR_INVALID_VALUE, format!("{s} must be the only flag given"));
        }
    }
    Ok(w.out)
}

/// The usage text of `scope` (reached through `path`, the command names).
pub fn usage(program: &str, path: &[&Scope]) -> String {
    let scope = *path.last().unwrap();
    let names: Vec<&str> = path.iter().skip(1).map(|s| s.name.as_str()).collect();
    let mut s = format!("Usage: {program}");
    for n in &names {
        s.push(' ');
        s.push_str(n);
    }
    let visible_cmds: Vec<&Scope> = scope.cmds.iter().filter(|c| !c.hidden).collect();
    if !visible_cmds.is_empty() {
        s.push_str(" [Command]");
    }
    s.push_str(" [DOCA Flags] [Program Flags]\n");
    if !scope.description.is_empty() {
        s.push_str(&format!("\n{}\n", scope.description));
    }
    let line = |s: &mut String, left: String, desc: &str| {
        s.push_str(&format!("  {left:<42} {desc}\n"));
    };
    if !visible_cmds.is_empty() {
        s.push_str("\nCommands:\n");
        for c in visible_cmds {
            line(&mut s, c.name.clone(), &c.description);
        }
    }
    s.push_str("\nDOCA Flags:\n");
    for (short, long, arg, desc) in BUILTINS {
        let mut left = match short {
            Some(sh) => format!("-{sh}, --{long}"),
            None => format!("--{long}"),
        };
        if let Some(a) = arg {
            left.push(' ');
            left.push_str(a);
        }
        line(&mut s, left, desc);
    }
    let mut params: Vec<&Spec> = Vec::new();
    let depth = path.len() - 1;
    for (d, sc) in path.iter().enumerate() {
        params.extend(sc.params.iter().map(|(p, _)| p).filter(|p| !p.hidden && (d == depth || p.inherited)));
    }
    if !params.is_empty() {
        s.push_str("\nProgram Flags:\n");
        for p in params {
            let mut left = p.display();
            if let Some(a) = &p.arguments {
                left.push(' ');
                left.push_str(a);
            }
            let mut desc = p.description.clone().unwrap_or_default();
            if p.mandatory {
                desc.push_str(" (mandatory)");
            }
            line(&mut s, left, &desc);
        }
    }
    s
}

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
