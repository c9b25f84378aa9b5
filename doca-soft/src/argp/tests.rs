//! The pure parser on every parameter type and flag form, JSON files, errors and the usage;
//! then the C entry points end to end (one test: the parser is process-global).

use super::*;
use std::sync::atomic::{AtomicI32, Ordering};

fn spec(short: Option<&str>, long: &str, ty: doca_argp_type) -> Spec {
    Spec {
        short: short.map(str::to_string),
        long: Some(long.to_string()),
        description: Some(format!("the {long}")),
        ty,
        ..Spec::default()
    }
}

fn program() -> Scope {
    let mut dev = spec(Some("d"), "device", DOCA_ARGP_TYPE_STRING);
    dev.mandatory = true;
    dev.arguments = Some("<IB device name>".into());
    let mut tag = spec(Some("t"), "tag", DOCA_ARGP_TYPE_STRING);
    tag.multi = true;
    let mut cfg = spec(None, "cfg", DOCA_ARGP_TYPE_JSON_OBJ);
    cfg.hidden = true;
    let mut only = spec(None, "only-cli", DOCA_ARGP_TYPE_INT);
    only.cli_only = true;
    let mut verbose = spec(Some("V"), "verbose", DOCA_ARGP_TYPE_BOOLEAN);
    verbose.inherited = true;
    let mut sub_flag = spec(Some("x"), "extra", DOCA_ARGP_TYPE_INT);
    sub_flag.mandatory = true;
    Scope {
        name: "prog".into(),
        params: vec![
            (dev, None),
            (spec(Some("nc"), "num-connections", DOCA_ARGP_TYPE_INT), None),
            (verbose, None),
            (tag, None),
            (cfg, None),
            (only, None),
        ],
        cmds: vec![Scope {
            name: "sub".into(),
            description: "a sub-command".into(),
            params: vec![(sub_flag, None)],
            ..Scope::default()
        }],
        ..Scope::default()
    }
}

fn args(list: &[&str]) -> Vec<String> {
    std::iter::once("prog").chain(list.iter().copied()).map(str::to_string).collect()
}

/// The (name, value) pairs of the parameter actions.
fn values(p: &Parsed) -> Vec<(String, Value)> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Param { name, value, .. } => Some((name.clone(), value.clone())),
            _ => None,
        })
        .collect()
}

fn err(list: &[&str]) -> Fail {
    parse(&program(), &args(list), false).unwrap_err()
}

#[test]
fn every_type_in_short_long_and_equals_forms() {
    let p = parse(
        &program(),
        &args(&["-d", "mlx5_0", "-nc", "0x10", "--verbose", "--tag=a", "-t", "b", "--cfg", r#"{"k": [1]}"#]),
        false,
    )
    .unwrap();
    assert_eq!(
        values(&p),
        vec![
            ("-d, --device".into(), Value::Str("mlx5_0".into())),
            ("-nc, --num-connections".into(), Value::Int(16)),
            ("-V, --verbose".into(), Value::Bool(true)),
            ("-t, --tag".into(), Value::Str("a".into())),
            ("-t, --tag".into(), Value::Str("b".into())),
            ("--cfg".into(), Value::Json(r#"{"k":[1]}"#.into())),
        ]
    );
    let p = parse(&program(), &args(&["--device=x", "--num-connections", "-7", "-V=false"]), false).unwrap();
    assert_eq!(values(&p)[1].1, Value::Int(-7));
    assert_eq!(values(&p)[2].1, Value::Bool(false));
}

#[test]
fn errors_are_doca_codes() {
    assert_eq!(err(&[]).err, DOCA_ERROR_INVALID_VALUE); // missing mandatory --device
    assert!(err(&[]).msg.contains("missing mandatory flag -d, --device"));
    assert_eq!(err(&["-d", "x", "--nope"]).err, DOCA_ERROR_NOT_SUPPORTED);
    assert_eq!(err(&["-d", "x", "-nc", "12ab"]).err, DOCA_ERROR_INVALID_VALUE);
    assert_eq!(err(&["-d", "x", "-nc", "99999999999"]).err, DOCA_ERROR_INVALID_VALUE);
    assert_eq!(err(&["-d"]).err, DOCA_ERROR_INVALID_VALUE); // no value
    assert_eq!(err(&["-d", "x", "-d", "y"]).err, DOCA_ERROR_INVALID_VALUE); // not repeatable
    assert_eq!(err(&["-d", "x", "stray"]).err, DOCA_ERROR_INVALID_VALUE);
    assert_eq!(err(&["-d", "x", "--cfg", "[1]"]).err, DOCA_ERROR_INVALID_VALUE);
    assert_eq!(err(&["-d", "x", "-l", "55"]).err, DOCA_ERROR_INVALID_VALUE);
}

#[test]
fn builtins() {
    let p = parse(&program(), &args(&["-d", "x", "-l", "60", "--sdk-log-level=30"]), false).unwrap();
    assert!(matches!(p.actions[1], Action::LogLevel(60)));
    assert!(matches!(p.actions[2], Action::SdkLogLevel(30)));
    // Help and version win over missing mandatory flags.
    assert!(matches!(parse(&program(), &args(&["--help"]), false).unwrap().actions[..], [Action::Help]));
    assert!(matches!(parse(&program(), &args(&["-v"]), false).unwrap().actions[..], [Action::Version]));
}

#[test]
fn commands_and_inherited_flags() {
    let p = parse(&program(), &args(&["-d", "x", "sub", "-x", "3", "-V"]), false).unwrap();
    assert_eq!(p.cmd_cbs.len(), 1);
    assert_eq!(values(&p)[1].1, Value::Int(3));
    assert_eq!(values(&p)[2].1, Value::Bool(true));
    // The command's mandatory flag, and a non-inherited flag after the command.
    assert_eq!(err(&["-d", "x", "sub"]).err, DOCA_ERROR_INVALID_VALUE);
    assert_eq!(err(&["-d", "x", "sub", "-x", "1", "-nc", "2"]).err, DOCA_ERROR_NOT_SUPPORTED);
}

#[test]
fn dpdk_split_and_singular() {
    let p = parse(&program(), &args(&["-a", "00:00.0", "--", "-d", "x"]), true).unwrap();
    assert_eq!(p.dpdk_args, vec!["prog", "-a", "00:00.0"]);
    assert_eq!(values(&p).len(), 1);
    let mut prog = program();
    prog.params[1].0.singular = true;
    prog.params[0].0.mandatory = false;
    assert!(parse(&prog, &args(&["-nc", "1"]), false).is_ok());
    assert_eq!(parse(&prog, &args(&["-nc", "1", "-V"]), false).unwrap_err().err, DOCA_ERROR_INVALID_VALUE);
}

/// A JSON file in the temp dir, removed on drop.
struct TempJson(std::path::PathBuf);
impl TempJson {
    fn new(tag: &str, text: &str) -> Self {
        let p = std::env::temp_dir().join(format!("doca-soft-argp-{}-{tag}.json", std::process::id()));
        std::fs::write(&p, text).unwrap();
        TempJson(p)
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}
impl Drop for TempJson {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn json_configuration() {
    let f = TempJson::new(
        "ok",
        r#"{"device": "mlx5_1", "num-connections": 4, "verbose": true, "tag": ["p", "q"], "cfg": {"a": 1}, "log-level": 70}"#,
    );
    // The command line may override a JSON value (its callback runs later). JSON keys are
    // applied in key order (serde_json's map is sorted).
    let p = parse(&program(), &args(&["--json", f.path(), "-nc", "5"]), false).unwrap();
    let v = values(&p);
    let names: Vec<&str> = v.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "--cfg",
            "-d, --device",
            "-nc, --num-connections",
            "-t, --tag",
            "-t, --tag",
            "-V, --verbose",
            "-nc, --num-connections"
        ]
    );
    assert_eq!(v[0].1, Value::Json(r#"{"a":1}"#.into()));
    assert_eq!(v[1].1, Value::Str("mlx5_1".into()));
    assert_eq!(v[2].1, Value::Int(4));
    assert_eq!((v[3].1.clone(), v[4].1.clone()), (Value::Str("p".into()), Value::Str("q".into())));
    assert_eq!(v[5].1, Value::Bool(true));
    assert_eq!(v[6].1, Value::Int(5));
    assert!(p.actions.iter().any(|a| matches!(a, Action::LogLevel(70))));
    let p = parse(&program(), &args(&["-j", f.path()]), false).unwrap();
    assert_eq!(values(&p).len(), 6);
    // The same file twice repeats every flag.
    assert_eq!(err(&["-j", f.path(), "-j", f.path()]).err, DOCA_ERROR_INVALID_VALUE);

    let cases = [
        ("unknown", r#"{"device": "x", "bogus": 1}"#, DOCA_ERROR_NOT_SUPPORTED),
        ("wrongtype", r#"{"device": 3}"#, DOCA_ERROR_INVALID_VALUE),
        ("clionly", r#"{"device": "x", "only-cli": 1}"#, DOCA_ERROR_INVALID_VALUE),
        ("malformed", r#"{"device": "#, DOCA_ERROR_INVALID_VALUE),
        ("notobject", r#"["device"]"#, DOCA_ERROR_INVALID_VALUE),
    ];
    for (tag, text, code) in cases {
        let f = TempJson::new(tag, text);
        assert_eq!(err(&["-j", f.path()]).err, code, "{tag}");
    }
    assert_eq!(err(&["-j", "/nonexistent/doca-soft-argp.json"]).err, DOCA_ERROR_IO_FAILED);
}

#[test]
fn json_sections_and_comments() {
    let f = TempJson::new(
        "sections",
        r#"{
            // DOCA's layout: general flags and program flags in their own sections
            "doca_general_flags": { "log-level": 60, "sdk-log-level": 40 },
            /* a block
               comment */
            "doca_program_flags": { "device": "mlx5_0 // not a comment", "num-connections": 2 }
        }"#,
    );
    let p = parse(&program(), &args(&["-j", f.path()]), false).unwrap();
    assert!(p.actions.iter().any(|a| matches!(a, Action::LogLevel(60))));
    assert!(p.actions.iter().any(|a| matches!(a, Action::SdkLogLevel(40))));
    let v = values(&p);
    assert_eq!(v[0].1, Value::Str("mlx5_0 // not a comment".into()));
    assert_eq!(v[1].1, Value::Int(2));
    for (tag, text, code) in [
        (
            "dpdk",
            r#"{"doca_dpdk_flags": {"core-list": "0-3"}, "doca_program_flags": {"device": "x"}}"#,
            DOCA_ERROR_NOT_SUPPORTED,
        ),
        ("mixed", r#"{"doca_program_flags": {"device": "x"}, "device": "y"}"#, DOCA_ERROR_NOT_SUPPORTED),
        ("notobj", r#"{"doca_program_flags": ["device"]}"#, DOCA_ERROR_INVALID_VALUE),
    ] {
        let f = TempJson::new(tag, text);
        assert_eq!(err(&["-j", f.path()]).err, code, "{tag}");
    }
    assert_eq!(strip_json_comments("{\"a\\\"//\": 1} // x"), "{\"a\\\"//\": 1}     ");
}

#[test]
fn usage_lists_both_groups() {
    let prog = program();
    let u = usage("prog", &[&prog]);
    assert!(u.starts_with("Usage: prog [Command] [DOCA Flags] [Program Flags]\n"), "{u}");
    for needle in ["DOCA Flags:", "-h, --help", "-l, --log-level <level>", "--sdk-log-level", "-j, --json <path>"] {
        assert!(u.contains(needle), "{needle} in {u}");
    }
    assert!(u.contains("-d, --device <IB device name>") && u.contains("the device (mandatory)"), "{u}");
    assert!(!u.contains("--cfg"), "hidden flags are not listed: {u}");
    assert!(u.contains("Commands:") && u.contains("sub"), "{u}");
    let sub = &prog.cmds[0];
    let u = usage("prog", &[&prog, sub]);
    assert!(u.starts_with("Usage: prog sub [DOCA Flags]"), "{u}");
    assert!(u.contains("-x, --extra") && u.contains("-V, --verbose") && !u.contains("--device"), "{u}");
}

// ---- the C entry points ----

static LAST_INT: AtomicI32 = AtomicI32::new(0);
static VALIDATED: AtomicI32 = AtomicI32::new(0);
static COMMAND_RAN: AtomicI32 = AtomicI32::new(0);

unsafe extern "C" fn command_cb(_config: *mut c_void) -> doca_error_t {
    COMMAND_RAN.fetch_add(1, Ordering::SeqCst);
    DOCA_SUCCESS
}

unsafe extern "C" fn int_cb(v: *mut c_void, config: *mut c_void) -> doca_error_t {
    // SAFETY: argp passes an int * for INT parameters; config is the AtomicI32 given to init.
    let n = unsafe { *(v as *const c_int) };
    if n < 0 {
        return DOCA_ERROR_INVALID_VALUE;
    }
    LAST_INT.store(n, Ordering::SeqCst);
    // SAFETY: the config given to doca_argp_init below.
    unsafe { &*(config as *const AtomicI32) }.fetch_add(1, Ordering::SeqCst);
    DOCA_SUCCESS
}

unsafe extern "C" fn validate(_config: *mut c_void) -> doca_error_t {
    VALIDATED.fetch_add(1, Ordering::SeqCst);
    DOCA_SUCCESS
}

#[test]
fn c_entry_points() {
    let calls = AtomicI32::new(0);
    let cfg = &calls as *const AtomicI32 as *mut c_void;
    assert_eq!(doca_argp_destroy(), DOCA_ERROR_BAD_STATE);
    let mut p = std::ptr::null_mut();
    // SAFETY: (this block) the C API used as a C program would, with valid pointers.
    unsafe {
        assert_eq!(doca_argp_param_create(&mut p), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_argp_init(c"t".as_ptr(), cfg), DOCA_SUCCESS);
        assert_eq!(doca_argp_init(c"t".as_ptr(), cfg), DOCA_ERROR_BAD_STATE);

        // Missing fields: INITIALIZATION, and the parameter now belongs to argp.
        assert_eq!(doca_argp_param_create(&mut p), DOCA_SUCCESS);
        doca_argp_param_set_long_name(p, c"count".as_ptr());
        assert_eq!(doca_argp_register_param(p), DOCA_ERROR_INITIALIZATION);
        assert_eq!(doca_argp_register_param(p), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_argp_param_destroy(p), DOCA_ERROR_BAD_STATE);

        // A reserved name.
        assert_eq!(doca_argp_param_create(&mut p), DOCA_SUCCESS);
        doca_argp_param_set_short_name(p, c"j".as_ptr());
        doca_argp_param_set_description(p, c"clash".as_ptr());
        doca_argp_param_set_callback(p, Some(int_cb));
        doca_argp_param_set_type(p, DOCA_ARGP_TYPE_INT);
        assert_eq!(doca_argp_register_param(p), DOCA_ERROR_INVALID_VALUE);

        // An unregistered parameter can be destroyed.
        assert_eq!(doca_argp_param_create(&mut p), DOCA_SUCCESS);
        assert_eq!(doca_argp_param_destroy(p), DOCA_SUCCESS);

        assert_eq!(doca_argp_param_create(&mut p), DOCA_SUCCESS);
        doca_argp_param_set_short_name(p, c"c".as_ptr());
        doca_argp_param_set_long_name(p, c"count".as_ptr());
        doca_argp_param_set_description(p, c"how many".as_ptr());
        doca_argp_param_set_callback(p, Some(int_cb));
        doca_argp_param_set_type(p, DOCA_ARGP_TYPE_INT);
        doca_argp_param_set_mandatory(p);
        assert_eq!(doca_argp_register_param(p), DOCA_SUCCESS);
        assert_eq!(doca_argp_register_validation_callback(Some(validate)), DOCA_SUCCESS);

        let run = |list: &[&CStr]| {
            let mut v: Vec<*mut c_char> = list.iter().map(|s| s.as_ptr() as *mut c_char).collect();
            doca_argp_start(v.len() as c_int, v.as_mut_ptr())
        };
        assert_eq!(run(&[c"t", c"--count", c"7", c"--sdk-log-level", c"60"]), DOCA_SUCCESS);
        assert_eq!(LAST_INT.load(Ordering::SeqCst), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(VALIDATED.load(Ordering::SeqCst), 1);
        let mut lvl = 0;
        assert_eq!(doca_argp_get_sdk_log_level(&mut lvl), DOCA_SUCCESS);
        assert_eq!(lvl, 60);
        crate::log::doca_log_level_set_global_sdk_limit(DOCA_LOG_LEVEL_INFO);
        // The callback refuses a negative value: start fails with its code.
        assert_eq!(run(&[c"t", c"-c", c"-1"]), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(run(&[c"t"]), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(run(&[c"t", c"-c", c"1", c"--what"]), DOCA_ERROR_NOT_SUPPORTED);

        // A sub-command with a flag of its own: its callback runs after the flags'.
        let mut cmd = std::ptr::null_mut();
        assert_eq!(doca_argp_cmd_create(&mut cmd), DOCA_SUCCESS);
        doca_argp_cmd_set_name(cmd, c"go".as_ptr());
        let mut q = std::ptr::null_mut();
        assert_eq!(doca_argp_param_create(&mut q), DOCA_SUCCESS);
        doca_argp_param_set_long_name(q, c"depth".as_ptr());
        doca_argp_param_set_description(q, c"how deep".as_ptr());
        doca_argp_param_set_callback(q, Some(int_cb));
        doca_argp_param_set_type(q, DOCA_ARGP_TYPE_INT);
        assert_eq!(doca_argp_cmd_register_param(cmd, q), DOCA_SUCCESS);
        // No description yet: INITIALIZATION (and the command now belongs to argp).
        assert_eq!(doca_argp_register_cmd(cmd), DOCA_ERROR_INITIALIZATION);
        assert_eq!(doca_argp_cmd_destroy(cmd), DOCA_ERROR_BAD_STATE);
        let mut cmd2 = std::ptr::null_mut();
        assert_eq!(doca_argp_cmd_create(&mut cmd2), DOCA_SUCCESS);
        doca_argp_cmd_set_name(cmd2, c"go2".as_ptr());
        doca_argp_cmd_set_description(cmd2, c"go somewhere".as_ptr());
        doca_argp_cmd_set_callback(cmd2, Some(command_cb));
        let mut q2 = std::ptr::null_mut();
        assert_eq!(doca_argp_param_create(&mut q2), DOCA_SUCCESS);
        doca_argp_param_set_long_name(q2, c"depth".as_ptr());
        doca_argp_param_set_description(q2, c"how deep".as_ptr());
        doca_argp_param_set_callback(q2, Some(int_cb));
        doca_argp_param_set_type(q2, DOCA_ARGP_TYPE_INT);
        assert_eq!(doca_argp_cmd_register_param(cmd2, q2), DOCA_SUCCESS);
        assert_eq!(doca_argp_register_cmd(cmd2), DOCA_SUCCESS);
        assert_eq!(run(&[c"t", c"-c", c"2", c"go2", c"--depth", c"11"]), DOCA_SUCCESS);
        assert_eq!(LAST_INT.load(Ordering::SeqCst), 11);
        assert_eq!(COMMAND_RAN.load(Ordering::SeqCst), 1);
        // The command's flag is unknown outside it.
        assert_eq!(run(&[c"t", c"-c", c"2", c"--depth", c"11"]), DOCA_ERROR_NOT_SUPPORTED);
        // An unregistered command can be destroyed, with what was registered to it.
        let mut cmd3 = std::ptr::null_mut();
        assert_eq!(doca_argp_cmd_create(&mut cmd3), DOCA_SUCCESS);
        assert_eq!(doca_argp_cmd_destroy(cmd3), DOCA_SUCCESS);
        assert_eq!(doca_argp_destroy(), DOCA_SUCCESS);
        assert_eq!(doca_argp_destroy(), DOCA_ERROR_BAD_STATE);
    }
}
