//! The argp parser (`doca_argp_start`'s pure half) on generated programs and command lines:
//! the input builds a command tree (parameters of every type and flag combination, names that
//! collide with each other and with the built-in flags, sub-commands two levels deep) and an
//! argument vector made of tokens that mostly mean something to it — its flags in short and
//! long form, with a value inline, as the next argument or missing, well- and ill-formed
//! integers, booleans and JSON objects, sub-command names, `--`, and `-j FILE` with a JSON
//! configuration file (flat or sectioned, with comments, arrays, wrong types) written from the
//! input — mixed with raw strings.
//!
//! Checked, besides "never panics": a parse is deterministic; a success names only parameters
//! of the tree, each value of its parameter's type (a JSON value an object); `-h`/`-v` end the
//! parse alone; a log level is one of DOCA's; a failure carries DOCA's code for a bad
//! argument, an unknown flag or an unreadable file, and a message. The usage text of every
//! scope renders. Comment stripping keeps the length and the line breaks of the text.
#![no_main]

use std::collections::HashSet;
use std::sync::OnceLock;

use doca_soft::argp::{parse, strip_json_comments, usage, Action, Scope, Spec, Value};
use doca_soft::types::*;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const SHORTS: [&str; 6] = ["a", "b", "c", "h", "l", "x"];
const LONGS: [&str; 8] = ["alpha", "beta", "gamma", "log-level", "json", "device", "x", "sdk-log-level"];
const CMDS: [&str; 4] = ["run", "stop", "show", "x"];
const TYPES: [doca_argp_type; 5] = [
    DOCA_ARGP_TYPE_UNKNOWN,
    DOCA_ARGP_TYPE_STRING,
    DOCA_ARGP_TYPE_INT,
    DOCA_ARGP_TYPE_BOOLEAN,
    DOCA_ARGP_TYPE_JSON_OBJ,
];

/// The JSON file `-j` names: one per fuzzing process, rewritten for each input.
fn json_path() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("argp-fuzz-{}.json", std::process::id())).display().to_string()
    })
}

fn spec(u: &mut Unstructured) -> Result<Spec> {
    let short = if u.ratio(2, 3)? { Some(u.choose(&SHORTS)?.to_string()) } else { None };
    let long = if short.is_none() || u.ratio(2, 3)? { Some(u.choose(&LONGS)?.to_string()) } else { None };
    Ok(Spec {
        short,
        long,
        arguments: Some("<v>".into()),
        description: Some("a fuzzed parameter".into()),
        ty: *u.choose(&TYPES)?,
        mandatory: u.ratio(1, 6)?,
        cli_only: u.ratio(1, 6)?,
        multi: u.ratio(1, 4)?,
        singular: u.ratio(1, 10)?,
        inherited: u.ratio(1, 3)?,
        hidden: u.ratio(1, 8)?,
    })
}

fn scope(u: &mut Unstructured, name: &str, depth: u32) -> Result<Scope> {
    let mut s = Scope { name: name.into(), description: "fuzzed".into(), ..Scope::default() };
    for _ in 0..u.int_in_range(0..=4)? {
        s.params.push((spec(u)?, None));
    }
    if depth < 2 {
        for _ in 0..u.int_in_range(0..=2)? {
            let n = u.choose(&CMDS)?;
            s.cmds.push(scope(u, n, depth + 1)?);
        }
    }
    Ok(s)
}

/// Every spec of the tree.
fn all_specs(s: &Scope, out: &mut Vec<Spec>) {
    out.extend(s.params.iter().map(|(p, _)| p.clone()));
    for c in &s.cmds {
        all_specs(c, out);
    }
}

fn value_text(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=9)? {
        0 => u.arbitrary::<i64>()?.to_string(),
        1 => format!("{:#x}", u.arbitrary::<u32>()?),
        2 => (*u.choose(&["true", "false", "1", "0", "yes", "TRUE", ""])?).to_string(),
        3 => (*u.choose(&["{\"a\":1}", "{}", "[1]", "{\"x\":{\"y\":[true,null]}}", "{", "null"])?).to_string(),
        4 => (*u.choose(&["10", "20", "60", "70", "75", "5", "-10", " 30 "])?).to_string(),
        5 => (*u.choose(&["-", "--", "-0x10", "+7", "--1", "0X7fffffff", "2147483648", "-2147483648"])?).to_string(),
        _ => u.arbitrary::<String>()?,
    })
}

fn json_value(u: &mut Unstructured, depth: u32) -> Result<String> {
    Ok(match u.int_in_range(0..=6)? {
        0 => u.arbitrary::<i64>()?.to_string(),
        1 => (*u.choose(&["true", "false", "null", "1.5", "60"])?).to_string(),
        2 => serde_json_string(&u.arbitrary::<String>()?),
        3 if depth < 3 => {
            let n = u.int_in_range(0..=3)?;
            let items: Vec<String> = (0..n).map(|_| json_value(u, depth + 1)).collect::<Result<_>>()?;
            format!("[{}]", items.join(","))
        }
        4 if depth < 3 => json_object(u, depth + 1)?,
        _ => format!("\"{}\"", u.choose(&LONGS)?),
    })
}

fn serde_json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_object(u: &mut Unstructured, depth: u32) -> Result<String> {
    let n = u.int_in_range(0..=4)?;
    let mut fields = Vec::new();
    for _ in 0..n {
        let key = match u.int_in_range(0..=3)? {
            0 => u.choose(&["doca_general_flags", "doca_program_flags", "doca_dpdk_flags", "help"])?.to_string(),
            1 => u.arbitrary::<String>()?,
            _ => u.choose(&LONGS)?.to_string(),
        };
        let comment = if u.ratio(1, 5)? { "/* c */" } else { "" };
        fields.push(format!("{}{comment}:{}", serde_json_string(&key), json_value(u, depth)?));
    }
    Ok(format!("{{{}}}", fields.join(",")))
}

/// The JSON configuration file: sectioned or flat, with comments, or raw bytes.
fn json_file(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=5)? {
        0 => u.arbitrary::<String>()?,
        1 => {
            let general = json_object(u, 1)?;
            let program = json_object(u, 1)?;
            format!(
                "// sectioned\n{{\"doca_general_flags\": {general},\n/* flags */ \"doca_program_flags\": {program}}}"
            )
        }
        _ => json_object(u, 0)?,
    })
}

fn args(u: &mut Unstructured, specs: &[Spec]) -> Result<Vec<String>> {
    let mut a = vec!["prog".to_string()];
    for _ in 0..u.int_in_range(0..=12)? {
        match u.int_in_range(0..=9)? {
            0..=3 if !specs.is_empty() => {
                let s = u.choose(specs)?;
                let flag = match (&s.short, &s.long) {
                    (Some(sh), Some(l)) => {
                        if u.arbitrary()? {
                            format!("-{sh}")
                        } else {
                            format!("--{l}")
                        }
                    }
                    (Some(sh), None) => format!("-{sh}"),
                    (None, Some(l)) => format!("--{l}"),
                    (None, None) => "-".into(),
                };
                match u.int_in_range(0..=2)? {
                    0 => a.push(format!("{flag}={}", value_text(u)?)),
                    1 => {
                        a.push(flag);
                        a.push(value_text(u)?);
                    }
                    _ => a.push(flag),
                }
            }
            4 => a.push(u.choose(&CMDS)?.to_string()),
            5 => {
                let b = *u.choose(&["-h", "--help", "-v", "--version", "-l", "--log-level", "--sdk-log-level"])?;
                a.push(b.to_string());
                if u.arbitrary()? {
                    a.push(value_text(u)?);
                }
            }
            6 => {
                a.push(if u.arbitrary()? { "-j".into() } else { "--json".into() });
                a.push(if u.ratio(7, 8)? { json_path().to_string() } else { "/nonexistent/argp.json".into() });
            }
            7 => a.push((*u.choose(&["--", "-", "--=", "-=x", "---x", "--x=", "-ab"])?).to_string()),
            _ => a.push(value_text(u)?),
        }
    }
    Ok(a)
}

fn check(program: &Scope, specs: &[Spec], args: &[String], dpdk: bool) {
    let r = parse(program, args, dpdk);
    let again = parse(program, args, dpdk);
    assert_eq!(format!("{r:?}"), format!("{again:?}"), "a parse is deterministic: {args:?}");
    match r {
        Ok(p) => {
            let names: HashSet<String> = specs
                .iter()
                .map(|s| match (&s.short, &s.long) {
                    (Some(a), Some(b)) => format!("-{a}, --{b}"),
                    (Some(a), None) => format!("-{a}"),
                    (None, Some(b)) => format!("--{b}"),
                    (None, None) => "<unnamed>".into(),
                })
                .collect();
            if p.actions.iter().any(|a| matches!(a, Action::Help | Action::Version)) {
                assert_eq!(p.actions.len(), 1, "-h and -v end the parse alone: {args:?} {p:?}");
            }
            for a in &p.actions {
                match a {
                    Action::LogLevel(n) | Action::SdkLogLevel(n) => {
                        assert!((10..=70).contains(n) && n % 10 == 0, "log level {n} from {args:?}")
                    }
                    Action::Param { name, value, .. } => {
                        assert!(names.contains(name), "a parameter {name} that is not in the tree: {args:?}");
                        let ty_ok = specs.iter().any(|s| {
                            matches!(
                                (s.ty, value),
                                (DOCA_ARGP_TYPE_INT, Value::Int(_))
                                    | (DOCA_ARGP_TYPE_BOOLEAN, Value::Bool(_))
                                    | (DOCA_ARGP_TYPE_JSON_OBJ, Value::Json(_))
                                    | (DOCA_ARGP_TYPE_STRING | DOCA_ARGP_TYPE_UNKNOWN, Value::Str(_))
                            )
                        });
                        assert!(ty_ok, "{name} got {value:?}, of no type it has: {args:?}");
                        if let Value::Json(t) = value {
                            let v: serde_json::Value = serde_json::from_str(t).expect("a JSON value is valid JSON");
                            assert!(v.is_object(), "a JSON value is an object: {t}");
                        }
                    }
                    Action::Help | Action::Version => {}
                }
            }
            if dpdk {
                assert_eq!(p.dpdk_args.first().map(String::as_str), Some("prog"), "argv[0] heads the DPDK part");
            }
        }
        Err(f) => {
            assert!(
                [DOCA_ERROR_INVALID_VALUE, DOCA_ERROR_NOT_SUPPORTED, DOCA_ERROR_IO_FAILED].contains(&f.err),
                "failure code {:?} for {args:?}: {}",
                f.err,
                f.msg
            );
            assert!(!f.msg.is_empty());
        }
    }
}

/// The usage of every scope, by its path of commands.
fn usages(path: &mut Vec<&Scope>) {
    let text = usage("prog", path);
    assert!(text.starts_with("Usage: prog"), "{text}");
    let here = *path.last().unwrap();
    for c in &here.cmds {
        path.push(c);
        usages(path);
        path.pop();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(program) = scope(&mut u, "prog", 0) else { return };
    let Ok(file) = json_file(&mut u) else { return };
    let mut specs = Vec::new();
    all_specs(&program, &mut specs);
    let Ok(argv) = args(&mut u, &specs) else { return };
    let dpdk = u.arbitrary::<bool>().unwrap_or(false);

    let stripped = strip_json_comments(&file);
    assert_eq!(stripped.len(), file.len(), "comment stripping keeps the length");
    assert!(
        stripped.bytes().zip(file.bytes()).all(|(s, f)| (s == b'\n') == (f == b'\n')),
        "comment stripping keeps the line breaks"
    );
    std::fs::write(json_path(), &file).expect("write the JSON file");

    check(&program, &specs, &argv, dpdk);
    usages(&mut vec![&program]);
});
