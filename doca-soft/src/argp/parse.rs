//! The pure argp parser: parameter specifications and an argument vector in, a list of
//! [`Action`]s (or an error code and a message) out.
//!
//! It reads the `-j/--json` file but calls nothing (no user callback, no global state), which
//! is why it is its own file: it is unit-tested directly, and `argp.rs` (the C objects and the
//! global parser) only turns its actions into callback calls.

use crate::types::*;

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
    pub(super) fn display(&self) -> String {
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
