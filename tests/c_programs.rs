//! DOCA C programs of ours, built exactly as a program written for NVIDIA's SDK is built:
//! `cc prog.c $(pkg-config --cflags --libs doca-common doca-argp ...)` with strict warnings,
//! against the .pc files of `scripts/soft-pkgconfig.sh`, then run with arguments.
//!
//! To add a program: put it in `tests/c/`, make it exit 0 only after it verified what it
//! checks, and add a test here that calls [`CProgram::build`] with the DOCA packages it uses
//! and [`CProgram::run`] with its arguments (see `tests/common/cprog.rs`).
//!
//! * [`log_argp_parses_logs_and_reports_sdk_errors`]: `tests/c/log_argp.c` — DOCA_LOG_REGISTER,
//!   the standard, buffer and SDK backends, log levels from `-l`, argp with every parameter
//!   type, a mandatory and a repeatable flag, a JSON file, a validation callback, and the SDK
//!   log capturing doca-soft's reason for a NOT_SUPPORTED.
//! * [`log_argp_errors_and_help`]: the same program's failures (missing mandatory flag, unknown
//!   flag, bad value, refused by a callback or the validation) and `--help` / `--version`.

mod common;

use common::cprog::CProgram;
use std::process::Command;

fn prog_cmd(prog: &CProgram) -> Command {
    Command::new(&prog.exe)
}

const PACKAGES: [&str; 2] = ["doca-common", "doca-argp"];

#[test]
fn log_argp_parses_logs_and_reports_sdk_errors() {
    let Some(prog) = CProgram::build("tests/c/log_argp.c", &PACKAGES) else { return };
    assert!(prog.pkg_flags.iter().any(|f| f == "-ldoca_soft"), "{:?}", prog.pkg_flags);
    let json = prog.file("config.json");
    // DOCA's sectioned layout, with a comment, as DOCA applications' *_params.json files are.
    std::fs::write(
        &json,
        r#"{
    "doca_general_flags": { "sdk-log-level": 40 },
    // the program's own flags, by long name
    "doca_program_flags": { "name": "from-json", "tag": ["a", "b"], "count": 9, "settings": {"depth": 2} }
}"#,
    )
    .unwrap();
    let json = json.to_str().unwrap();
    // JSON first, then the command line, which overrides --count.
    let run = prog.run(&[
        "-j",
        json,
        "-d",
        "dev0",
        "--count=3",
        "-V",
        "-t",
        "c",
        "-l",
        "60",
        "--expect-name",
        "from-json",
        "--expect-count",
        "3",
        "--expect-tags",
        "3",
    ]);
    run.assert_success();
    assert!(
        run.stdout.contains("device=dev0 count=3 verbose=1 name=from-json tags=3 settings={\"depth\":2}"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("log_level=60 sdk_log_level=40"), "{}", run.stdout);
    assert!(run.stdout.lines().any(|l| l == "ok all"), "{}", run.stdout);
    // The standard backend: INFO and DEBUG (allowed by -l 60) on stdout, WARNING on stderr.
    assert!(run.stdout.contains("[INFO][LOG_ARGP::MAIN]") && run.stdout.contains("info record 1"), "{}", run.stdout);
    assert!(run.stdout.contains("[DBG][LOG_ARGP::MAIN]") && run.stdout.contains("debug record 2"), "{}", run.stdout);
    assert!(run.stderr.contains("[WARN][LOG_ARGP::MAIN]") && run.stderr.contains("x end"), "{}", run.stderr);
    assert!(!run.stdout.contains("[WARN]"), "{}", run.stdout);
    // SDK records reach only the SDK backend (a buffer the program prints itself).
    assert!(run.stdout.contains("sdk_log: [") && run.stdout.contains("[DOCA_SOFT]"), "{}", run.stdout);
    assert_eq!(run.all().matches("scatter/gather").count(), 1, "{}", run.all());

    // Default level INFO: no debug record.
    let run = prog.run(&["-d", "dev0", "--expect-tags", "0"]);
    run.assert_success();
    assert!(!run.stdout.contains("debug record"), "{}", run.stdout);
}

#[test]
fn log_argp_errors_and_help() {
    let Some(prog) = CProgram::build("tests/c/log_argp.c", &PACKAGES) else { return };
    let cases: [(&[&str], &str, &str); 6] = [
        (&[], "DOCA_ERROR_INVALID_VALUE", "missing mandatory flag -d, --device"),
        (&["-d", "x", "--bogus"], "DOCA_ERROR_NOT_SUPPORTED", "unknown flag --bogus"),
        (&["-d", "x", "-n", "many"], "DOCA_ERROR_INVALID_VALUE", "is not an integer"),
        (&["-d", "x", "-n", "-4"], "DOCA_ERROR_INVALID_VALUE", "count must be positive, got -4"),
        (&["-d", "bad-device"], "DOCA_ERROR_INVALID_VALUE", "refused by validation"),
        (&["-d", "x", "-j", "/nonexistent/doca.json"], "DOCA_ERROR_IO_FAILED", "cannot read the JSON file"),
    ];
    for (args, code, message) in cases {
        let run = prog.run(args);
        assert_eq!(run.code, Some(3), "{args:?}:\n{}", run.all());
        assert!(run.stdout.contains(&format!("argp_start: {code}")), "{args:?}:\n{}", run.all());
        // argp's messages go to the application log (standard backend: errors on stderr).
        assert!(run.stderr.contains(message), "{args:?}: no `{message}` in:\n{}", run.stderr);
        // Only the validation callback calls doca_argp_usage(), which prints and returns.
        assert_eq!(run.stdout.contains("Usage: log_argp"), args == ["-d", "bad-device"], "{args:?}:\n{}", run.stdout);
    }

    // With a logger callback, argp's messages go there (through the va_list trampoline of
    // our header) instead of the application log.
    let run = prog.run_with(prog_cmd(&prog).args(["-d", "x", "--bogus"]).env("LOG_ARGP_LOGGER", "1"));
    assert_eq!(run.code, Some(3), "{}", run.all());
    assert!(run.stdout.contains("argp-logger[30]: unknown flag --bogus"), "{}", run.all());
    assert!(!run.stderr.contains("unknown flag"), "{}", run.stderr);

    let run = prog.run(&["--help"]);
    run.assert_success();
    assert!(run.stdout.starts_with("Usage: log_argp [DOCA Flags] [Program Flags]"), "{}", run.stdout);
    for needle in [
        "DOCA Flags:",
        "-l, --log-level",
        "--sdk-log-level",
        "-j, --json",
        "Program Flags:",
        "-d, --device <device name>",
    ] {
        assert!(run.stdout.contains(needle), "no `{needle}` in:\n{}", run.stdout);
    }
    let run = prog.run(&["-v"]);
    run.assert_success();
    assert!(run.stdout.contains("DOCA SDK version"), "{}", run.stdout);
}
