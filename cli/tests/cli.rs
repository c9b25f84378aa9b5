//! The command line: `perf --json` prints one object per test with the documented keys, in
//! both modes and both process counts (parsed with serde_json); `--plot` writes well-formed
//! SVG pictures; `--server`/`--client` connect two processes by address; `info` names the
//! provider and the devices.

use std::process::Command;
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_async-doca");

/// Runs the CLI with a deadline, so a hang fails the test instead of stalling the suite.
fn run(args: &[&str]) -> (bool, String, String) {
    run_in(args, None)
}

/// `run` with `TMPDIR` set to `tmp` when given, so that what the run leaves in its temporary
/// directory can be told apart from what other tests, running at the same time, leave in theirs.
fn run_in(args: &[&str], tmp: Option<&std::path::Path>) -> (bool, String, String) {
    let mut cmd = Command::new(EXE);
    if let Some(tmp) = tmp {
        cmd.env("TMPDIR", tmp);
    }
    let mut child = cmd
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

/// The JSON objects of a perf run's stdout, one per line (each line must parse).
fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The value of `key` in a report as text (strings without quotes), like the table shows it.
fn field(v: &serde_json::Value, key: &str) -> String {
    match v.get(key).unwrap_or_else(|| panic!("{key} missing in {v}")) {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Checks the figures every measured row has: integer counts, positive latencies in rising
/// order (p50 <= p90 <= p99 <= p99.9 <= max), a positive rate.
fn check_figures(v: &serde_json::Value) {
    for key in ["size", "iters", "procs"] {
        assert!(v[key].is_u64(), "{key} is not an integer in {v}");
    }
    let mut last = 0.0;
    for key in ["p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"] {
        let x = v[key].as_f64().unwrap_or_else(|| panic!("{key} is not a number in {v}"));
        assert!(x > 0.0 && x >= last, "{key} = {x} out of order in {v}");
        last = x;
    }
    assert!(v["ops_per_sec"].as_f64().unwrap_or_else(|| panic!("no ops_per_sec in {v}")) > 0.0, "{v}");
}

#[test]
fn perf_json_has_every_key_for_both_modes_and_process_counts() {
    let (ok, stdout, stderr) =
        run(&["perf", "--json", "--test", "sync_add_wait,spawn", "--iters", "200", "--warmup", "20"]);
    assert!(ok, "perf failed: {stderr}");
    let mut seen = vec![];
    for line in &json_lines(&stdout) {
        check_figures(line);
        seen.push((field(line, "test"), field(line, "mode"), field(line, "procs")));
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

const RDMA_TESTS: [&str; 9] =
    ["write_lat", "read_lat", "send_lat", "write_imm_lat", "fadd_lat", "cswap_lat", "write_bw", "read_bw", "send_bw"];

/// The JSON lines of a perf run, checked as above: (test, mode, procs, size, has mb_per_sec).
fn checked_lines(stdout: &str) -> Vec<(String, String, String, String, bool)> {
    let mut seen = vec![];
    for line in &json_lines(stdout) {
        check_figures(line);
        let bw = line.get("mb_per_sec").is_some();
        if bw {
            assert!(line["mb_per_sec"].as_f64().unwrap() > 0.0, "{line}");
        }
        seen.push((field(line, "test"), field(line, "mode"), field(line, "procs"), field(line, "size"), bw));
    }
    seen
}

#[test]
fn perf_rdma_tests_in_both_modes_and_process_counts() {
    let tests = format!("{},memcpy_bw", RDMA_TESTS.join(","));
    let (ok, stdout, stderr) =
        run(&["perf", "--json", "--test", &tests, "--size", "8,4096", "--iters", "50", "--warmup", "5"]);
    assert!(ok, "perf failed: {stderr}");
    let seen = checked_lines(&stdout);
    for test in RDMA_TESTS {
        let sizes: &[&str] =
            if test.starts_with("fadd") || test.starts_with("cswap") { &["8"] } else { &["8", "4096"] };
        // The lanes run every latency test (each test's rounds are compiled apart).
        let modes: &[&str] = if test.ends_with("_bw") { &["raw", "async"] } else { &["raw", "async", "lanes"] };
        for mode in modes {
            for procs in ["1", "2"] {
                for size in sizes {
                    let line = seen.iter().find(|(t, m, p, s, _)| {
                        (t.as_str(), m.as_str(), p.as_str(), s.as_str()) == (test, *mode, procs, size)
                    });
                    let line =
                        line.unwrap_or_else(|| panic!("{test} {mode} procs {procs} size {size} missing:\n{stdout}"));
                    assert_eq!(line.4, test.ends_with("_bw"), "mb_per_sec only for bandwidth tests: {line:?}");
                }
            }
        }
    }
    for size in ["8", "4096"] {
        assert!(seen.iter().any(|(t, m, p, s, bw)| t == "memcpy_bw" && m == "raw" && p == "1" && s == size && *bw));
    }
}

/// `perf --server 127.0.0.1:0` listens (RDMA connection management) on a free port it names;
/// `perf --client ADDR` connects to it by address and measures the RDMA tests against it.
#[test]
fn perf_client_against_a_server() {
    use std::io::{BufRead, BufReader};
    let mut server = Command::new(EXE)
        .args(["perf", "--server", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the server");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stderr = server.stderr.take().unwrap();
    let _server = Kill(server);
    let mut first = String::new();
    let mut reader = BufReader::new(stderr);
    reader.read_line(&mut first).unwrap();
    // Keep draining the server's log, so its later lines do not hit a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    let addr = first.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(first.contains("listening on"), "{first}");
    let (ok, stdout, stderr) = run(&[
        "perf",
        "--json",
        "--client",
        &addr,
        "--test",
        "write_lat,send_bw,spawn",
        "--size",
        "64",
        "--iters",
        "50",
    ]);
    assert!(ok, "perf --client failed: {stderr}");
    let seen = checked_lines(&stdout);
    for test in ["write_lat", "send_bw"] {
        for mode in ["raw", "async"] {
            assert!(seen.iter().any(|(t, m, p, s, _)| t == test && m == mode && p == "2" && s == "64"), "{stdout}");
        }
    }
    assert!(!seen.iter().any(|(t, ..)| t == "spawn"), "a client runs only the RDMA tests: {stdout}");
}

/// `--plot DIR` writes a latency CDF per test, size and process count and a bandwidth picture
/// per bandwidth test, each a well-formed SVG document naming the modes in its legend; the
/// table still goes to stdout.
#[test]
fn perf_plot_writes_svg_pictures() {
    let dir = std::env::temp_dir().join(format!("async-doca-cli-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, stdout, stderr) = run(&[
        "perf",
        "--test",
        "write_lat,write_bw,memcpy_bw",
        "--mode",
        "raw,async",
        "--procs",
        "1",
        "--size",
        "8,4096",
        "--iters",
        "100",
        "--warmup",
        "10",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "perf failed: {stderr}");
    assert!(stdout.contains("p99.9") && stdout.contains("async / raw"), "{stdout}");
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let want = [
        "bw_write_bw_1p.svg",
        "lat_memcpy_bw_4096B_1p.svg",
        "lat_memcpy_bw_8B_1p.svg",
        "lat_write_bw_4096B_1p.svg",
        "lat_write_bw_8B_1p.svg",
        "lat_write_lat_4096B_1p.svg",
        "lat_write_lat_8B_1p.svg",
    ];
    assert_eq!(names, want, "{stderr}");
    for name in &names {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{name} is not well-formed: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{name}");
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).map(str::trim).collect();
        let modes: &[&str] = if name.contains("memcpy") { &["raw"] } else { &["raw", "async"] };
        for mode in modes {
            assert!(texts.contains(mode), "{name}: no legend entry {mode} in {texts:?}");
        }
        if name.starts_with("bw_") {
            assert!(texts.contains(&"memcpy"), "{name}: the memcpy reference line is missing");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `perf --rounds 3` measures the plan three times: JSON lines carry their round, and the
/// table says it shows medians and gives each ratio with its range over the rounds.
#[test]
fn perf_rounds_repeat_the_plan_and_summarise_it() {
    let args =
        ["perf", "--test", "write_lat", "--mode", "raw,async", "--procs", "1", "--iters", "100", "--warmup", "10"];
    let (ok, stdout, stderr) = run(&[&args[..], &["--json", "--rounds", "3"]].concat());
    assert!(ok, "perf failed: {stderr}");
    let lines = json_lines(&stdout);
    let mut seen: Vec<(u64, String)> = lines.iter().map(|v| (v["round"].as_u64().unwrap(), field(v, "mode"))).collect();
    seen.sort();
    let want: Vec<(u64, String)> = (1..=3).flat_map(|r| [(r, "async".to_owned()), (r, "raw".to_owned())]).collect();
    assert_eq!(seen, want, "one line per round and mode");
    let (ok, stdout, stderr) = run(&[&args[..], &["--rounds", "2"]].concat());
    assert!(ok, "perf failed: {stderr}");
    assert!(stdout.contains("medians over 2 rounds"), "{stdout}");
    let ranged = stdout.lines().any(|l| l.trim_start().starts_with("write_lat") && l.contains("x ["));
    assert!(ranged, "no ratio line with its range: {stdout}");
    // One round (the default) prints no round key and no ranges.
    let (ok, stdout, _) = run(&[&args[..], &["--json"]].concat());
    assert!(ok && json_lines(&stdout).iter().all(|v| v.get("round").is_none()), "{stdout}");
    let (_, zero, stderr) = run(&[&args[..], &["--rounds", "0"]].concat());
    assert!(zero.is_empty() && stderr.contains("rounds"), "--rounds 0 must be refused: {stderr}");
}

/// Every round first measures the machine reference (a bare atomic ping-pong): a line per
/// round on stderr with `--json`, and `ref_ns` (positive) on each of the round's JSON lines;
/// `--no-ref` leaves both out. No bound on the value: it is the machine's, not ours.
#[test]
fn perf_rounds_carry_a_machine_reference_unless_no_ref() {
    let args =
        ["perf", "--json", "--test", "write_lat", "--mode", "raw", "--procs", "1", "--iters", "100", "--warmup", "10"];
    let (ok, stdout, stderr) = run(&[&args[..], &["--rounds", "2"]].concat());
    assert!(ok, "perf failed: {stderr}");
    if stderr.contains("no machine reference (one CPU only") {
        println!("SKIPPED: one CPU, no reference");
        return;
    }
    for round in 1..=2 {
        let want = format!("round {round}: machine reference (atomic ping-pong CPU");
        assert!(stderr.contains(&want), "no reference line for round {round}: {stderr}");
    }
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 2, "{stdout}");
    for v in &lines {
        let r = v["ref_ns"].as_f64().unwrap_or_else(|| panic!("no ref_ns in {v}"));
        assert!(r > 0.0, "{v}");
    }
    let (ok, stdout, stderr) = run(&[&args[..], &["--no-ref"]].concat());
    assert!(ok, "perf failed: {stderr}");
    assert!(!stderr.contains("machine reference"), "{stderr}");
    assert!(json_lines(&stdout).iter().all(|v| v.get("ref_ns").is_none()), "{stdout}");
}

/// The whole plan, twice in one process (`--rounds 2`): every test and mode gives a line in
/// each round. A raw loop that keeps state on the calling thread (its callbacks count into
/// thread-locals) must start the second round from zero: `comch_lat`'s client once found
/// the first round's counts and stopped waiting for its echoes, and its server timed out.
#[test]
fn perf_runs_every_test_twice_in_one_process() {
    let args = ["perf", "--json", "--rounds", "2", "--procs", "1", "--size", "8", "--iters", "20", "--warmup", "2"];
    let (ok, stdout, stderr) = run(&args);
    assert!(ok, "perf failed: {stderr}");
    let mut rows: std::collections::BTreeMap<(String, String), Vec<u64>> = Default::default();
    for v in json_lines(&stdout) {
        rows.entry((field(&v, "test"), field(&v, "mode"))).or_default().push(v["round"].as_u64().unwrap());
    }
    for ((test, mode), mut rounds) in rows.clone() {
        rounds.sort_unstable();
        assert_eq!(rounds, [1, 2], "{test} {mode}: one line per round");
    }
    let (ok, list, _) = run(&["perf", "--list"]);
    assert!(ok);
    // Every test of the default plan ran (the traced variants run only when named; the UROM
    // command test needs two processes).
    for test in list.lines().filter_map(|l| l.split_whitespace().next()) {
        if test.ends_with("_traced") || test == "urom_cmd_lat" {
            continue;
        }
        assert!(rows.keys().any(|(t, _)| t == test), "{test} did not run: {stdout}");
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

#[test]
fn perf_urom_cmd_lat_and_collectives_in_every_mode() {
    // A temporary directory of this test's own: other tests run perf (and its private UROM
    // service) at the same time, and their directories must not count here.
    let tmp = std::env::temp_dir().join(format!("adc-urom-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let run = |args: &[&str]| run_in(args, Some(&tmp));
    let (ok, stdout, stderr) = run(&["perf", "--json", "--test", "urom_cmd_lat", "--iters", "100", "--warmup", "10"]);
    assert!(ok, "perf failed: {stderr}");
    let mut modes: Vec<String> = json_lines(&stdout)
        .iter()
        .map(|l| {
            assert_eq!(field(l, "test"), "urom_cmd_lat");
            check_figures(l);
            field(l, "mode")
        })
        .collect();
    modes.sort();
    assert_eq!(modes, ["async", "raw"], "{stdout}");

    // The collectives, in the same test because they use the same kind of private service
    // (the directory check below must not see another test's run in progress).
    let (ok, stdout, stderr) = run(&[
        "perf",
        "--json",
        "--test",
        "allreduce_lat,coll_overlap",
        "--procs",
        "3",
        "--size",
        "64",
        "--iters",
        "20",
        "--warmup",
        "5",
    ]);
    assert!(ok, "perf failed: {stderr}");
    let mut seen: Vec<(String, String)> = json_lines(&stdout)
        .iter()
        .map(|l| {
            assert_eq!((field(l, "procs").as_str(), field(l, "size").as_str()), ("3", "64"), "{l}");
            assert!(l["p50_ns"].as_f64().unwrap() > 0.0);
            let overlap = l.get("overlap_pct").is_some();
            assert_eq!(overlap, field(l, "test") == "coll_overlap", "{l}");
            (field(l, "test"), field(l, "mode"))
        })
        .collect();
    seen.sort();
    let want = [
        ("allreduce_lat", "host"),
        ("allreduce_lat", "offload"),
        ("coll_overlap", "host"),
        ("coll_overlap", "offload"),
    ];
    assert_eq!(seen, want.map(|(t, m)| (t.to_owned(), m.to_owned())), "{stdout}");
    // perf stops its private service and removes its directory.
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(left.is_empty(), "perf left {left:?} behind in its temporary directory");
}

#[test]
fn urom_service_rejects_bad_options() {
    for args in [
        &["urom-service", "--cpus", "9999"][..],
        &["urom-service", "--arm-cpus", "0"],
        &["urom-service", "--arm-cpus", "1025"],
        &["urom-service", "--log-level", "chatty"],
        &["urom-service", "--socket", "/nonexistent-dir/x/urom.sock"],
    ] {
        let (ok, stdout, stderr) = run(args);
        assert!(!ok, "{args:?} succeeded: {stdout}");
        assert!(stderr.contains("urom-service"), "{args:?}: no clear error: {stderr}");
        assert!(!stdout.contains("listening on"), "{args:?}");
    }
}

/// `perf --anchor ucx` runs UCX's benchmark beside ours and prints the ratios, or says it was
/// skipped when `ucx_perftest` is not installed (`scripts/setup.sh --ucx` installs it).
#[test]
fn perf_anchor_ucx_adds_ucx_rows_and_ratios_or_says_why_not() {
    let (ok, stdout, stderr) = run(&[
        "perf",
        "--anchor",
        "ucx",
        "--test",
        "write_lat,send_bw",
        "--mode",
        "raw",
        "--procs",
        "2",
        "--size",
        "8",
        "--iters",
        "300",
        "--warmup",
        "30",
    ]);
    assert!(ok, "perf failed: {stderr}");
    if stderr.contains("ucx_perftest` was not found") {
        println!("SKIPPED: no ucx_perftest here");
        return;
    }
    for test in ["write_lat", "send_bw"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(test) && l.split_whitespace().nth(1) == Some("ucx")),
            "no ucx row for {test}:\n{stdout}"
        );
    }
    assert!(stdout.contains("raw / ucx"), "no raw / ucx ratios:\n{stdout}");
    // A bandwidth test's latencies mean different things on the two sides: only its rate is
    // compared.
    let bw = stdout.lines().find(|l| l.trim_start().starts_with("send_bw") && l.contains("ops/s")).unwrap_or("");
    assert!(bw.contains("latencies not comparable") && !bw.contains(" p50 "), "send_bw ratio line: {bw:?}\n{stdout}");
}
