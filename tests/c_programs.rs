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

use common::cprog::{CProgram, Run};
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
    assert_eq!(run.all().matches("without a LID").count(), 1, "{}", run.all());

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

// ---- programs in the style of NVIDIA's samples: two processes, descriptors in files ----

/// The soft device as the samples' `-d` flag names it: by IB device name.
const IBDEV: &str = "soft0";

/// The soft device's PCI address (the other way the samples select a device).
fn pci_addr() -> String {
    async_doca::Device::list().unwrap()[0].pci_addr.clone()
}

/// Runs the two sides of a pair at once, each bounded by the harness's time limit.
fn run_pair(prog: &CProgram, a: &[&str], b: &[&str]) -> (Run, Run) {
    std::thread::scope(|s| {
        let ha = s.spawn(|| prog.run(a));
        let hb = s.spawn(|| prog.run(b));
        (ha.join().unwrap(), hb.join().unwrap())
    })
}

/// Every RDMA operation between a requester and a responder process (send, send with
/// immediate, write, write with immediate, read, fetch-add, compare-swap, and a last send),
/// each side checking what it received, read or found in its memory.
#[test]
fn rdma_pair_runs_every_operation_between_two_processes() {
    let Some(prog) = CProgram::build("tests/c/rdma_pair.c", &["doca-common", "doca-argp", "doca-rdma"]) else {
        return;
    };
    let dir = prog.file("descriptors");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let pci = pci_addr();
    let (resp, req) = run_pair(
        &prog,
        &["-d", IBDEV, "--role", "responder", "--dir", dir],
        &["-d", &pci, "--role", "requester", "--dir", dir],
    );
    resp.assert_success();
    req.assert_success();
    assert!(resp.all().contains("responder: every operation verified"), "{}", resp.all());
    assert!(req.all().contains("requester: every operation verified"), "{}", req.all());
}

/// The lost-message case: a sender with three connections stops its ctx (even rounds close it
/// through the samples' cleanup, the last round exits the process) the moment its three sends
/// completed; the receiver, re-posting one receive at a time, must get every message of every
/// one of 200 rounds.
#[test]
fn rdma_multi_conn_loses_no_completed_message_in_200_rounds() {
    let Some(prog) = CProgram::build("tests/c/rdma_multi_conn.c", &["doca-common", "doca-argp", "doca-rdma"]) else {
        return;
    };
    let dir = prog.file("descriptors");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let common = ["-d", IBDEV, "--dir", dir, "-nc", "3", "--rounds", "200"];
    let recv: Vec<&str> = common.iter().copied().chain(["--role", "receiver"]).collect();
    let send: Vec<&str> = common.iter().copied().chain(["--role", "sender", "--exit-last"]).collect();
    let (r, s) = run_pair(&prog, &recv, &send);
    s.assert_success();
    r.assert_success();
    assert!(r.all().contains("receiver: 200 rounds of 3 connections, every message delivered"), "{}", r.all());
    assert!(!r.all().contains("LOST MESSAGES"), "{}", r.all());
}

/// One PE, two sync-event contexts and an RDMA context, driven in event mode through the
/// notification handle in an epoll set.
#[test]
fn pe_events_drives_several_contexts_from_the_notification_handle() {
    let Some(prog) = CProgram::build("tests/c/pe_events.c", &["doca-common", "doca-argp", "doca-rdma"]) else {
        return;
    };
    let run = prog.run(&["-d", IBDEV]);
    run.assert_success();
    assert!(run.all().contains("wake-ups for 2 events and a message"), "{}", run.all());
}

/// DMA memcpy tasks driven by a progress engine the three ways NVIDIA's PE samples rely on:
/// polling a batch, `doca_ctx_stop` from a completion callback with copies in flight, and a
/// copy that fails in a batch (an empty source), which stops the DMA context by itself
/// (RUNNING -> STOPPING without a stop call, then IDLE once every task is freed) after every
/// submit of the batch succeeded. Before doca-soft stopped a DMA context on a failed copy,
/// `pe_task_error`'s final loop (progress until IDLE) would have spun forever.
#[test]
fn pe_dma_polls_stops_from_a_callback_and_stops_on_a_failed_copy() {
    let Some(prog) = CProgram::build("tests/c/pe_dma.c", &["doca-common", "doca-dma"]) else { return };
    for (mode, expect) in [
        ("polling", "pe_dma polling: 16 copies completed, 0 failed"),
        ("async-stop", "pe_dma async-stop:"),
        ("task-error", "pe_dma task-error: 3 copies completed, 14 failed"),
    ] {
        let run = prog.run(&[mode]);
        run.assert_success();
        assert!(run.all().contains(expect), "{mode}: {}", run.all());
    }
}

/// One memcpy between buffer lists, the way NVIDIA's dma_local_copy sample builds them: the
/// sample's default (one source, one destination) must pass its list-length check, and longer
/// lists gather and scatter in order, with unequal segment boundaries on the two sides.
#[test]
fn dma_lists_copies_between_chained_buffers() {
    let Some(prog) = CProgram::build("tests/c/dma_lists.c", &["doca-common", "doca-dma"]) else { return };
    for (src, dst, size) in [("1", "1", "4096"), ("3", "5", "10007"), ("7", "2", "65536"), ("16", "16", "333")] {
        let run = prog.run(&[src, dst, size]);
        run.assert_success();
        let expect = format!("dma_lists: {src} source and {dst} destination buffers, {size} bytes copied in order");
        assert!(run.all().contains(&expect), "{src} {dst} {size}: {}", run.all());
    }
    // More elements than the capability allows: the program's own check, as in the sample.
    let run = prog.run(&["32", "1", "64"]);
    assert!(run.code != Some(0) && run.all().contains("exceed the list limit 32"), "{}", run.all());
}

/// The Comch fast path between two processes, as NVIDIA's comch_data_path_high_speed sample
/// uses it: the consumer of one side learns nothing but its posts, the producer of the other
/// finds the consumer through its new-consumer event and retries while AGAIN; then the roles
/// swap. Each side checks data, order, producer id and immediate bytes.
#[test]
fn comch_fast_path_between_two_processes() {
    let Some(prog) = CProgram::build("tests/c/comch_fast.c", &["doca-common", "doca-comch"]) else { return };
    let name = format!("comch-fast-{}", std::process::id());
    let args = |role: &'static str| -> Vec<String> {
        ["--role", role, "--name", &name, "-d", IBDEV, "-n", "8"].iter().map(|s| s.to_string()).collect()
    };
    let (server, client) = std::thread::scope(|s| {
        let srv = s.spawn(|| prog.run_with(Command::new(&prog.exe).args(args("server")).env("DOCA_SOFT_ROLE", "dpu")));
        let cli = s.spawn(|| prog.run_with(Command::new(&prog.exe).args(args("client"))));
        (srv.join().unwrap(), cli.join().unwrap())
    });
    server.assert_success();
    client.assert_success();
    for (run, role) in [(&server, "server"), (&client, "client")] {
        let expect = format!("comch_fast {role}: 8 messages received and 8 sent through the fast path");
        assert!(run.all().contains(&expect), "{role}:\n{}", run.all());
    }
}

/// A sync event exported by one process and opened by another, 100 rounds of set/wait
/// ping-pong through tasks in event mode.
#[test]
fn sync_event_pair_ping_pongs_across_processes() {
    let Some(prog) = CProgram::build("tests/c/sync_event_pair.c", &PACKAGES) else { return };
    let dir = prog.file("blob");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let (e, i) = run_pair(
        &prog,
        &["-d", IBDEV, "--role", "exporter", "--dir", dir, "--rounds", "100"],
        &["-d", IBDEV, "--role", "importer", "--dir", dir, "--rounds", "100"],
    );
    e.assert_success();
    i.assert_success();
    assert!(i.all().contains("importer: 100 rounds, final value 200"), "{}", i.all());
}

/// A UROM host program against a private soft UROM service (found through
/// DOCA_UROM_SERVICE_FILE, as on a BlueField host) whose plugin is the C plugin `c_loopback`,
/// built with UCX's list header where installed: a command, then a domain whose plugin runs
/// the four domain lookup helpers inside the worker.
#[test]
fn urom_host_drives_a_c_plugin_and_its_domain_lookups() {
    if let Some(run) = urom_host(&[], &[], &[]) {
        run.assert_success();
    }
}

/// NVIDIA's UROM samples require CPUs 0-7 in the service's cpuset (a BlueField's Arm cores)
/// and end without a worker otherwise. With `--arm-cpus 8` the soft service offers exactly
/// those on a machine of any size; the program checks the offer and runs its worker on them.
#[test]
fn urom_host_finds_a_dpus_eight_arm_cpus_on_any_machine() {
    let Some(run) = urom_host(&["--arm-cpus", "8"], &["--arm-cpus", "8"], &[]) else { return };
    run.assert_success();
    // Without the option the service offers this machine's CPUs: the program's check sees
    // the difference (unless this process happens to run on exactly CPUs 0-7).
    if async_doca::CpuSet::current_affinity().unwrap().to_string() != "0-7" {
        let run = urom_host(&[], &["--arm-cpus", "8"], &[]).unwrap();
        assert!(run.code != Some(0) && run.all().contains("expected exactly 0-7"), "{}", run.all());
    }
}

/// `tests/c/urom_host.c` with `args` against a private service started with `daemon_args`,
/// its C plugin compiled with `plugin_cflags` besides its own; `None` where no C compiler or
/// plugin build is available.
fn urom_host(daemon_args: &[&str], args: &[&str], plugin_cflags: &[&str]) -> Option<Run> {
    let build =
        |_: &CProgram, dir: &std::path::Path| doca_urom_plugin::testing::build_c_plugin_with(dir, plugin_cflags);
    urom_host_with(daemon_args, args, build).map(|(run, _daemon)| run)
}

/// [`urom_host`] with the plugin built by `build_plugin` (given the host program, whose
/// pkg-config flags it may use, and the plugin directory); also the service, still running.
fn urom_host_with(
    daemon_args: &[&str],
    args: &[&str],
    build_plugin: impl FnOnce(&CProgram, &std::path::Path) -> Option<std::path::PathBuf>,
) -> Option<(Run, common::urom::Daemon)> {
    let prog = CProgram::build("tests/c/urom_host.c", &["doca-common", "doca-argp", "doca-urom"])?;
    let plugins = prog.file("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let _so = build_plugin(&prog, &plugins)?;
    let mut all_daemon_args = vec!["--plugin-path", plugins.to_str().unwrap()];
    all_daemon_args.extend_from_slice(daemon_args);
    let daemon = common::urom::Daemon::start(&all_daemon_args);
    let service_file = prog.file("urom.conf");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    std::fs::write(&service_file, format!("{host} dpu {} {} {IBDEV}\n", daemon.socket.display(), pci_addr())).unwrap();
    let run = prog.run_with(
        std::process::Command::new(&prog.exe)
            .args(["-d", IBDEV, "--plugin", "c_loopback"])
            .args(args)
            .env("DOCA_UROM_SERVICE_FILE", &service_file),
    );
    if run.code == Some(0) {
        assert!(run.all().contains("command and domain lookups verified through c_loopback"), "{}", run.all());
    }
    Some((run, daemon))
}

/// NVIDIA's plugins log with DOCA_LOG and are linked to the DOCA library, whose copy in the
/// worker is not the service's own here (the service links doca-soft statically): the lines
/// of a plugin built that way must still reach the service's output, as NVIDIA's worker
/// logs them.
#[test]
fn a_plugins_doca_log_lines_reach_the_services_output() {
    let build = |prog: &CProgram, dir: &std::path::Path| {
        let so = dir.join("libc_loopback.so");
        let o = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-DC_LOOPBACK_DOCA_LOG"])
            .arg(doca_urom_plugin::testing::c_plugin_source())
            .arg("-o")
            .arg(&so)
            .args(&prog.pkg_flags)
            .output()
            .expect("cc");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Some(so)
    };
    let Some((run, daemon)) = urom_host_with(&[], &[], build) else { return };
    run.assert_success();
    if let Err(lines) = daemon.stdout_line("c_loopback opened") {
        panic!("the plugin's DOCA_LOG line never reached the service's output:\n{}", lines.join("\n"));
    }
}

/// Where `scripts/setup.sh --ucx-new` put a UCX of at least 1.15 (`ASYNC_DOCA_UCX_PREFIX`
/// names another), if it did.
fn new_ucx_prefix() -> Option<std::path::PathBuf> {
    let p = std::env::var_os("ASYNC_DOCA_UCX_PREFIX")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".deps/ucx"));
    p.join("include/ucp/api/ucp_version.h").exists().then_some(p)
}

/// NVIDIA's UROM plugins need UCX 1.15 or later; Debian 12 has 1.13, so `scripts/setup.sh
/// --ucx-new` installs a newer one beside the project. Where it did: a program built against
/// it finds API 1.15 or later at compile and run time and opens a UCP context and worker with
/// the plugins' features, and our C plugin, built with its `<ucs/datastruct/list.h>`, serves a
/// UROM host. Skipped (and said so) without it.
#[test]
fn ucx_from_setup_is_new_enough_for_nvidias_plugins() {
    let Some(prefix) = new_ucx_prefix() else {
        eprintln!("skipped: no UCX >= 1.15 (scripts/setup.sh --ucx-new installs one in .deps/ucx)");
        return;
    };
    let dir = common::urom::TempDir::new("ucx-new");
    let exe = dir.path().join("ucx_new");
    let (inc, lib) = (prefix.join("include"), prefix.join("lib"));
    let built = Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "tests/c/ucx_new.c", "-o"])
        .arg(&exe)
        .arg("-isystem")
        .arg(&inc)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lucp", "-lucs"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cc");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let out = Command::new(&exe).env("UCX_TLS", "self,tcp,sm").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("worker address"), "{text}");
    if let Some(run) = urom_host(&[], &[], &["-isystem", inc.to_str().unwrap()]) {
        run.assert_success();
    }
}
