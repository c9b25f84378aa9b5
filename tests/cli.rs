//! The command line: `perf --json` prints one object per test with the documented keys, in
//! both modes and both process counts; `info` names the provider and the devices.

use std::process::Command;
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_async-doca");

/// Runs the CLI with a deadline, so a hang fails the test instead of stalling the suite.
fn run(args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(EXE)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start async-doca");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("async-doca {args:?} did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value of `"key":` in a one-line JSON object of numbers and plain strings.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\":");
    let start = line.find(&pat).unwrap_or_else(|| panic!("{key} missing in {line}")) + pat.len();
    let rest = &line[start..];
    let end = rest.find([',', '}']).unwrap();
    rest[..end].trim_matches('"')
}

#[test]
fn perf_json_has_every_key_for_both_modes_and_process_counts() {
    let (ok, stdout, stderr) =
        run(&["perf", "--json", "--test", "sync_add_wait,spawn", "--iters", "200", "--warmup", "20"]);
    assert!(ok, "perf failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('{')).collect();
    let mut seen = vec![];
    for line in &lines {
        for key in ["size", "iters", "procs"] {
            field(line, key).parse::<u64>().unwrap_or_else(|_| panic!("{key} is not an integer in {line}"));
        }
        for key in ["p50_ns", "p99_ns", "ops_per_sec"] {
            let v: f64 = field(line, key).parse().unwrap_or_else(|_| panic!("{key} is not a number in {line}"));
            assert!(v > 0.0, "{key} is not positive in {line}");
        }
        assert!(field(line, "p99_ns").parse::<f64>().unwrap() >= field(line, "p50_ns").parse::<f64>().unwrap());
        seen.push((field(line, "test").to_owned(), field(line, "mode").to_owned(), field(line, "procs").to_owned()));
    }
    for want in [
        ("sync_add_wait", "raw", "1"),
        ("sync_add_wait", "async", "1"),
        ("sync_add_wait", "raw", "2"),
        ("sync_add_wait", "async", "2"),
        ("spawn", "async", "1"),
    ] {
        assert!(
            seen.iter().any(|(t, m, p)| (t.as_str(), m.as_str(), p.as_str()) == want),
            "{want:?} missing from:\n{stdout}"
        );
    }
}

#[test]
fn perf_rejects_an_unknown_test() {
    let (ok, _, stderr) = run(&["perf", "--test", "no_such_test"]);
    assert!(!ok);
    assert!(stderr.contains("unknown test"), "{stderr}");
}

#[test]
fn info_names_the_provider_and_a_device() {
    let (ok, stdout, stderr) = run(&["info"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("provider: doca-soft"), "{stdout}");
    assert!(stdout.contains("device 0: ibdev soft0"), "{stdout}");
}
