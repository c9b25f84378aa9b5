//! DROM with real processes: runtimes in child processes follow the masks that a third
//! process (the `async-doca taskset` CLI) sets; synchronous queries time out against a
//! process that does not poll; pending changes refuse a second one; steal and return;
//! killed processes free their CPUs; a launched child adopts its reservation; many
//! processes changing the registry at once keep every CPU owned at most once.
//!
//! The children are this test binary re-executed (`child_entry`, ignored by default) in the
//! role named by `DROM_TEST_ROLE`. Every test uses its own registry key and removes it.
//! The machine may have only two CPUs: masks are `0`, `1` and `0-1`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_doca::drom::{Flags, Options, Registry};
use async_doca::{CpuSet, Runtime};

/// The `async-doca` command line (crate `cli/`), whose `taskset` these tests drive.
fn cli() -> &'static std::path::Path {
    common::cli::exe()
}
const WAIT: Duration = Duration::from_secs(20);

/// A registry key of the test's own, removed at the end.
struct Key(String);

impl Key {
    fn new(name: &str) -> Key {
        static N: AtomicUsize = AtomicUsize::new(0);
        Key(format!("it-{}-{}-{name}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        let _ = Registry::remove(&self.0);
    }
}

/// The registry of `key`, once a child created it.
fn attach_when_ready(key: &str) -> Registry {
    let deadline = Instant::now() + WAIT;
    loop {
        match Registry::attach(key) {
            Ok(r) => return r,
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

/// Whether the machine has CPUs 0 and 1 (every test here needs two).
fn two_cpus() -> bool {
    let ok = CpuSet::current_affinity().map(|c| c.contains(0) && c.contains(1)).unwrap_or(false);
    if !ok {
        eprintln!("skipped: needs CPUs 0 and 1");
    }
    ok
}

/// A child process speaking lines on stdin/stdout; killed and reaped on drop.
struct Proc {
    child: common::Reap,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn start(mut cmd: Command) -> Proc {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start a child");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { child: common::Reap(Some(child)), stdin, lines }
    }

    /// The rest of the first line that has the word `prefix`.
    fn expect(&self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    // libtest may print "test child_entry ... " in front of the first line.
                    let tag = format!("{prefix} ");
                    if let Some(at) = l.find(&tag) {
                        return l[at + tag.len()..].trim().to_owned();
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("child did not print {prefix:?} in time"),
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!("child exited without printing {prefix:?}"),
            }
        }
    }

    fn send(&mut self, line: &str) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{line}").unwrap();
        s.flush().unwrap();
    }

    /// Closes stdin (the children's signal to finish) and waits for the exit status.
    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let mut c = self.child.0.take().unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!("child did not exit in time");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pid(&self) -> u32 {
        self.child.0.as_ref().unwrap().id()
    }

    fn kill(mut self) {
        let mut c = self.child.0.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

/// This test binary, re-executed in `role`.
fn child_cmd(role: &str, key: &str, cpus: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    child_args(&mut c, role, key, cpus);
    c
}

fn child_args(c: &mut Command, role: &str, key: &str, cpus: &str) {
    c.args(["--exact", "child_entry", "--ignored", "--nocapture", "--test-threads=1"])
        .env("DROM_TEST_ROLE", role)
        .env("DROM_TEST_KEY", key)
        .env("DROM_TEST_CPUS", cpus)
        .env_remove(async_doca::drom::ENV_RESERVATION);
}

/// `async-doca taskset --key KEY ARGS…`: (success, stdout, stderr).
fn taskset(key: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(cli()).args(["taskset", "--key", key]).args(args).output().expect("run async-doca taskset");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every thread of `pid`: (name, Cpus_allowed_list).
fn threads(pid: i32) -> Vec<(String, CpuSet)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for e in dir.flatten() {
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else { continue };
        let get = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_owned());
        if let (Some(name), Some(list)) = (get("Name:"), get("Cpus_allowed_list:")) {
            out.push((name, list.parse().unwrap()));
        }
    }
    out
}

/// Waits until every thread of `pid` runs inside `mask` and each CPU of `mask` has an
/// executor pinned to exactly it; returns the threads.
fn follows(pid: i32, mask: &CpuSet) -> Vec<(String, CpuSet)> {
    let deadline = Instant::now() + WAIT;
    loop {
        let ts = threads(pid);
        let inside = ts.iter().all(|(_, m)| m.is_subset(mask));
        let homes = mask
            .iter()
            .all(|c| ts.iter().any(|(n, m)| n == &format!("async-doca-cpu{c}") && *m == set(&c.to_string())));
        if inside && homes && !ts.is_empty() {
            return ts;
        }
        assert!(Instant::now() < deadline, "pid {pid} did not follow {mask}: {ts:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The entry point of the child processes (run only when re-executed).
#[test]
#[ignore = "run by the other tests in a child process"]
fn child_entry() {
    let role = std::env::var("DROM_TEST_ROLE").expect("DROM_TEST_ROLE");
    let key = std::env::var("DROM_TEST_KEY").unwrap();
    let cpus = std::env::var("DROM_TEST_CPUS").unwrap();
    match role.as_str() {
        "runtime" => child_runtime(&key, &cpus),
        "idle" => {
            let reg = Registry::open(&key).unwrap();
            let me = reg.register(&set(&cpus), Flags::NONE).unwrap();
            println!("READY {}", me.pid());
            wait_stdin_eof();
            drop(me);
        }
        "churn" => child_churn(&key),
        other => panic!("unknown role {other}"),
    }
}

fn wait_stdin_eof() {
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        line.clear();
    }
}

/// A runtime in the registry; answers `where` with the CPUs its `spawn` work ran on.
fn child_runtime(key: &str, cpus: &str) {
    let rt = Runtime::builder()
        .cpus(set(cpus))
        .drom(Options::new(key).check_interval(Duration::from_millis(20)))
        .build()
        .unwrap();
    println!("READY {} {}", std::process::id(), rt.cpus());
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        if line.trim() == "where" {
            let handles: Vec<_> = (0..16).map(|_| rt.spawn(async { async_doca::executor::current_cpu() })).collect();
            let ran: CpuSet = rt.block_on(async {
                let mut s = CpuSet::new();
                for h in handles {
                    s.insert(h.await.unwrap().unwrap()).unwrap();
                }
                s
            });
            println!("WHERE {} {ran}", rt.cpus());
        }
        line.clear();
    }
    rt.shutdown();
    println!("DONE");
}

/// Many random operations on the registry, checking after each that no CPU is owned twice.
fn child_churn(key: &str) {
    let reg = Registry::open(key).unwrap().sync_timeout(Duration::from_millis(20));
    let masks = [set("0"), set("1"), set("0-1")];
    let mut seed = (std::process::id() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut rnd = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut me = None;
    let mut done = 0;
    for _ in 0..150 {
        let flags = if rnd(2) == 0 { Flags::STEAL_CPUS } else { Flags::NONE };
        match rnd(4) {
            0 => {
                if me.is_none() {
                    me = reg.register(&masks[rnd(3)], flags).ok();
                } else {
                    me = None;
                }
            }
            1 => {
                let pids = reg.pids().unwrap();
                if !pids.is_empty() {
                    let _ = reg.set_mask(pids[rnd(pids.len())], &masks[rnd(3)], flags);
                }
            }
            2 => {
                if let Some(m) = &me {
                    if let Ok(Some(mask)) = m.poll() {
                        let _ = m.applied(&mask);
                    }
                }
            }
            _ => {
                let pids = reg.pids().unwrap();
                if !pids.is_empty() {
                    let _ = reg.recover_stolen(pids[rnd(pids.len())]);
                }
            }
        }
        let procs = reg.processes().unwrap();
        let mut seen = CpuSet::new();
        for p in &procs {
            assert!(p.mask.intersection(&seen).is_empty(), "CPU owned twice: {procs:?}");
            assert!(!p.mask.is_empty(), "a process without CPUs: {procs:?}");
            seen = seen.union(&p.mask);
        }
        done += 1;
    }
    drop(me);
    println!("CHURN-OK {done}");
}

#[test]
fn a_launcher_moves_a_cpu_both_follow_and_it_comes_back() {
    if !two_cpus() {
        return;
    }
    let k = Key::new("move");
    // A owns both CPUs.
    let mut a = Proc::start(child_cmd("runtime", &k.0, "0-1"));
    let a_pid: i32 = a.expect("READY").split_whitespace().next().unwrap().parse().unwrap();
    follows(a_pid, &set("0-1"));
    // A third process launches B on CPU 1, stolen from A: A must follow to CPU 0.
    let mut launch = Command::new(cli());
    launch
        .args(["taskset", "--key", &k.0, "-c", "1", "--steal", "--return-stolen", "--"])
        .arg(std::env::current_exe().unwrap());
    child_args(&mut launch, "runtime", &k.0, "0-1");
    let b = Proc::start(launch);
    let ready = b.expect("READY");
    let mut it = ready.split_whitespace();
    let b_pid: i32 = it.next().unwrap().parse().unwrap();
    assert_eq!(it.next(), Some("1"), "B adopted its reservation (CPU 1), not the CPUs it asked for");
    let reg = Registry::attach(&k.0).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(reg.path()).unwrap().permissions().mode() & 0o777, 0o600, "private registry file");
    assert_eq!(reg.get_mask(b_pid, Flags::NONE).unwrap(), set("1"));
    assert_eq!(reg.get_mask(a_pid, Flags::SYNC_QUERY).unwrap(), set("0"));
    follows(b_pid, &set("1"));
    let a_threads = follows(a_pid, &set("0"));
    // A's executor of CPU 1 is displaced (runs on CPU 0 now), not gone.
    assert!(a_threads.iter().any(|(n, m)| n == "async-doca-cpu1" && *m == set("0")), "{a_threads:?}");
    // Its spawn work now runs only on CPU 0.
    a.send("where");
    assert_eq!(a.expect("WHERE"), "0 0");
    // B's last CPU cannot be stolen (PERM).
    let (ok, _, err) = taskset(&k.0, &["-p", &a_pid.to_string(), "-c", "0-1", "--steal"]);
    assert!(!ok && err.contains("none left"), "{err}");
    let (ok, list, _) = taskset(&k.0, &["--list"]);
    assert!(ok);
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == [&a_pid.to_string(), "0", "0", "1", "running"]),
        "{list}"
    );
    // B exits; the launcher finalizes it and returns the stolen CPU to A, which grows back.
    assert!(b.finish().success());
    follows(a_pid, &set("0-1"));
    assert_eq!(reg.pids().unwrap(), [a_pid]);
    assert_eq!(reg.get_mask(a_pid, Flags::SYNC_QUERY).unwrap(), set("0-1"));
    a.send("where");
    assert_eq!(a.expect("WHERE").split_whitespace().next(), Some("0-1"));
    assert!(a.finish().success());
    assert!(reg.pids().unwrap().is_empty(), "A unregistered on shutdown");
}

#[test]
fn a_third_process_moves_cpus_between_two_runtimes() {
    if !two_cpus() {
        return;
    }
    let k = Key::new("swap");
    let a = Proc::start(child_cmd("runtime", &k.0, "0-1"));
    let a_pid: i32 = a.expect("READY").split_whitespace().next().unwrap().parse().unwrap();
    // A gives up CPU 1 (set by a third process, synchronously), then B registers on it.
    let (ok, _, err) = taskset(&k.0, &["-p", &a_pid.to_string(), "-c", "0", "--sync"]);
    assert!(ok, "{err}");
    follows(a_pid, &set("0"));
    let b = Proc::start(child_cmd("runtime", &k.0, "1"));
    let b_pid: i32 = b.expect("READY").split_whitespace().next().unwrap().parse().unwrap();
    follows(b_pid, &set("1"));
    // The third process moves CPU 0 to B... which A cannot give (its last): PERM. It moves
    // A to CPU 1 instead, in two steps that each keep every CPU owned once.
    let (ok, _, _) = taskset(&k.0, &["-p", &b_pid.to_string(), "-c", "0-1", "--steal"]);
    assert!(!ok);
    let (ok, _, err) = taskset(&k.0, &["-p", &b_pid.to_string(), "-c", "0", "--steal", "--sync"]);
    assert!(!ok && err.contains("none left"), "{err}");
    let reg = Registry::attach(&k.0).unwrap();
    assert_eq!(reg.get_mask(a_pid, Flags::NONE).unwrap(), set("0"));
    assert_eq!(reg.get_mask(b_pid, Flags::NONE).unwrap(), set("1"));
    // B finishes; the third process gives A CPU 1 and takes CPU 0 away: A moves over.
    assert!(b.finish().success());
    let (ok, _, err) = taskset(&k.0, &["-p", &a_pid.to_string(), "-c", "1", "--sync"]);
    assert!(ok, "{err}");
    let ts = follows(a_pid, &set("1"));
    assert!(ts.iter().any(|(n, m)| n == "async-doca-cpu0" && *m == set("1")), "displaced executor: {ts:?}");
    assert!(a.finish().success());
}

#[test]
fn sync_query_times_out_and_a_pending_change_refuses_another() {
    if !two_cpus() {
        return;
    }
    let k = Key::new("sync");
    let idle = Proc::start(child_cmd("idle", &k.0, "0"));
    let pid = idle.expect("READY");
    let t0 = Instant::now();
    let (ok, _, err) = taskset(&k.0, &["-p", &pid, "-c", "0-1", "--sync", "--timeout-ms", "200"]);
    assert!(!ok && err.contains("did not apply"), "{err}");
    assert!(t0.elapsed() >= Duration::from_millis(200));
    let (ok, _, err) = taskset(&k.0, &["-p", &pid, "-c", "1"]);
    assert!(!ok && err.contains("pending change"), "{err}");
    let (ok, list, _) = taskset(&k.0, &["--list"]);
    assert!(ok && list.lines().any(|l| l.starts_with(&pid) && l.ends_with("pending")), "{list}");
    assert!(idle.finish().success());
}

#[test]
fn a_killed_process_frees_its_cpus() {
    if !two_cpus() {
        return;
    }
    let k = Key::new("kill");
    let idle = Proc::start(child_cmd("idle", &k.0, "0-1"));
    let pid: i32 = idle.expect("READY").parse().unwrap();
    let reg = Registry::attach(&k.0).unwrap();
    assert_eq!(reg.pids().unwrap(), [pid]);
    assert!(reg.free_cpus().unwrap().is_empty());
    assert!(reg.register(&set("0"), Flags::NONE).is_err(), "owned by the child");
    idle.kill();
    assert!(reg.pids().unwrap().is_empty());
    assert_eq!(reg.free_cpus().unwrap(), set("0-1"));
    let me = reg.register(&set("0-1"), Flags::NONE).unwrap();
    drop(me);
}

#[test]
fn concurrent_changes_keep_every_cpu_owned_once() {
    if !two_cpus() {
        return;
    }
    let k = Key::new("churn");
    // One process that dies holding a CPU while the others work.
    let victim = Proc::start(child_cmd("idle", &k.0, "1"));
    let _ = victim.expect("READY");
    let procs: Vec<Proc> = (0..4).map(|_| Proc::start(child_cmd("churn", &k.0, ""))).collect();
    std::thread::sleep(Duration::from_millis(20));
    victim.kill();
    for p in procs {
        assert_eq!(p.expect("CHURN-OK"), "150");
        assert!(p.finish().success());
    }
    let reg = Registry::attach(&k.0).unwrap();
    assert!(reg.pids().unwrap().is_empty(), "every churner unregistered or was reaped");
    assert_eq!(reg.free_cpus().unwrap(), set("0-1"));
}

#[test]
fn a_runtime_in_this_process_grows_and_shrinks() {
    if !two_cpus() {
        return;
    }
    let k = Key::new("inproc");
    let rt = Runtime::builder()
        .cpus(set("0"))
        .drom(Options::new(&k.0).check_interval(Duration::from_millis(20)))
        .build()
        .unwrap();
    let me = std::process::id() as i32;
    let reg = Registry::attach(&k.0).unwrap();
    // A task on the executor of CPU 0 that owns a DOCA object (a sync event on that
    // executor's PE) and uses it before and after the executor is displaced.
    let (tx, rx) = mpsc::channel::<()>();
    let keeper = rt
        .spawn_on(0, move || async move {
            let dev = async_doca::Device::open_default()?;
            let ev = async_doca::sync_event::SyncEvent::builder(&dev).build().await?;
            ev.add(1).await?;
            while rx.try_recv().is_err() {
                async_doca::time::sleep(Duration::from_millis(2)).await;
            }
            // Displaced now: the event still completes, on the remaining CPU.
            ev.add(1).await?;
            let seen = ev.wait_gt(1).await?;
            // SAFETY: sched_getcpu has no preconditions.
            let ran_on = unsafe { libc::sched_getcpu() };
            Ok::<_, async_doca::Error>((seen, ran_on, async_doca::executor::current_cpu()))
        })
        .unwrap();
    reg.set_mask(me, &set("0-1"), Flags::SYNC_QUERY).unwrap();
    assert_eq!(rt.cpus(), set("0-1"));
    let w1 = rt.workers().into_iter().find(|w| w.cpu == 1).expect("an executor started on CPU 1");
    assert!(w1.active);
    assert_eq!(CpuSet::affinity_of(w1.tid).unwrap(), set("1"));
    // Spawned work reaches the new executor.
    let ran: Vec<usize> = rt.block_on(async {
        let hs: Vec<_> =
            (0..8).map(|_| async_doca::spawn(async { async_doca::executor::current_cpu().unwrap() })).collect();
        let mut v = Vec::new();
        for h in hs {
            v.push(h.await.unwrap());
        }
        v
    });
    assert!(ran.contains(&1) && ran.contains(&0), "{ran:?}");
    // Shrink to CPU 1: the executor of CPU 0 is displaced onto CPU 1 and keeps its task.
    reg.set_mask(me, &set("1"), Flags::SYNC_QUERY).unwrap();
    assert_eq!(rt.cpus(), set("1"));
    let w0 = rt.workers().into_iter().find(|w| w.cpu == 0).unwrap();
    assert!(!w0.active);
    assert_eq!(CpuSet::affinity_of(w0.tid).unwrap(), set("1"));
    let ran: Vec<usize> = rt.block_on(async {
        let hs: Vec<_> =
            (0..8).map(|_| async_doca::spawn(async { async_doca::executor::current_cpu().unwrap() })).collect();
        let mut v = Vec::new();
        for h in hs {
            v.push(h.await.unwrap());
        }
        v
    });
    assert!(ran.iter().all(|&c| c == 1), "{ran:?}");
    tx.send(()).unwrap();
    let (seen, ran_on, home) = rt.block_on(keeper).unwrap().unwrap();
    assert_eq!((seen, ran_on, home), (2, 1, Some(0)), "the displaced executor kept its sync event");
    // Back home.
    reg.set_mask(me, &set("0-1"), Flags::SYNC_QUERY).unwrap();
    assert_eq!(CpuSet::affinity_of(w0.tid).unwrap(), set("0"));
    rt.shutdown();
    assert!(reg.pids().unwrap().is_empty());
}

/// A UROM service with `--drom-key` and one worker on `worker_cpus`; runs `check` with the
/// worker's pid, then stops everything. The soft provider's own daemon (`--drom-key` is its
/// option), so these tests exist only with the `soft` provider.
#[cfg(feature = "soft")]
fn with_urom_worker(service_cpus: &str, worker_cpus: &str, check: impl FnOnce(&Key, u32)) {
    use async_doca::urom::{Service, Worker};
    let k = Key::new("urom");
    let d = common::urom::Daemon::start(&[
        "--builtin-samples",
        "--log-level",
        "warn",
        "--cpus",
        service_cpus,
        "--drom-key",
        &k.0,
    ]);
    // A plain runtime (not in the registry) for the host side.
    let rt = Runtime::builder().cpus(set("0")).build().unwrap();
    rt.block_on(async {
        let dev = async_doca::Device::open_default()?;
        let svc = async_doca::time::timeout(WAIT, Service::builder(&dev).socket_path(&d.socket).connect()).await??;
        let w = async_doca::time::timeout(
            WAIT,
            Worker::builder(&svc).plugin("worker_graph").cpuset(set(worker_cpus)).start(),
        )
        .await??;
        let pid = d.wait_workers(1)[0];
        check(&k, pid);
        drop(w);
        Ok::<(), async_doca::Error>(())
    })
    .unwrap();
    d.stop();
    // The reaped worker left the registry.
    assert!(Registry::attach(&k.0).unwrap().pids().unwrap().is_empty());
}

#[cfg(feature = "soft")]
#[test]
fn urom_workers_are_listed_and_moved_by_taskset() {
    if !two_cpus() {
        return;
    }
    with_urom_worker("0-1", "1", |k, pid| {
        let (ok, list, err) = taskset(&k.0, &["--list"]);
        assert!(ok, "{err}");
        assert!(list.lines().any(|l| l.split_whitespace().take(2).eq([pid.to_string().as_str(), "1"])), "{list}");
        let (ok, _, err) = taskset(&k.0, &["-p", &pid.to_string(), "-c", "0", "--sync"]);
        assert!(ok, "{err}");
        assert_eq!(common::urom::cpus_allowed(pid), "0");
    });
}

#[cfg(feature = "soft")]
#[test]
fn urom_workers_never_leave_the_service_cpus() {
    if !two_cpus() {
        return;
    }
    with_urom_worker("1", "1", |k, pid| {
        // CPU 0 is outside the service: the worker keeps to CPU 1 (the change is recorded).
        let (ok, _, err) = taskset(&k.0, &["-p", &pid.to_string(), "-c", "0-1", "--sync"]);
        assert!(ok, "{err}");
        assert_eq!(common::urom::cpus_allowed(pid), "1");
        let (ok, _, err) = taskset(&k.0, &["-p", &pid.to_string(), "-c", "0", "--sync"]);
        assert!(ok, "{err}");
        assert_eq!(common::urom::cpus_allowed(pid), "1");
    });
}

#[test]
fn taskset_reports_usage_errors_and_missing_registries() {
    let k = Key::new("cli");
    let (ok, _, err) = taskset(&k.0, &["--list"]);
    assert!(!ok && err.contains("no registry"), "{err}");
    let (ok, _, err) = taskset(&k.0, &[]);
    assert!(!ok && err.contains("nothing to do"), "{err}");
    let (ok, _, err) = taskset(&k.0, &["-c", "0", "-p", "1", "--", "true"]);
    assert!(!ok && err.contains("exclude"), "{err}");
    let (ok, _, err) = taskset(&k.0, &["-p", "1", "-c", "zero"]);
    assert!(!ok && err.contains("bad CPU list"), "{err}");
    // A launched program's exit code is passed through, and its reservation is gone after.
    let (ok, _, err) = taskset(&k.0, &["-c", "0", "--", "sh", "-c", "exit 7"]);
    assert!(!ok, "{err}");
    let st =
        Command::new(cli()).args(["taskset", "--key", &k.0, "-c", "0", "--", "sh", "-c", "exit 7"]).status().unwrap();
    assert_eq!(st.code(), Some(7));
    let reg = Registry::attach(&k.0).unwrap();
    assert!(reg.processes().unwrap().is_empty());
}

#[test]
fn a_launched_program_that_knows_nothing_of_drom_is_moved_by_its_launcher() {
    if !two_cpus() {
        return;
    }
    let k = Key::new("plain");
    let launcher = Proc::start({
        let mut c = Command::new(cli());
        c.args(["taskset", "--key", &k.0, "-c", "1", "--", "sleep", "30"]);
        c
    });
    let reg = attach_when_ready(&k.0);
    // The launcher binds the reservation to its child's pid.
    let deadline = Instant::now() + WAIT;
    let pid = loop {
        let ps = reg.processes().unwrap();
        if let Some(p) = ps.iter().find(|p| p.pid != 0) {
            assert_eq!(p.reserved_by, Some(launcher.pid() as i32));
            break p.pid;
        }
        assert!(Instant::now() < deadline, "no bound reservation: {ps:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(common::urom::cpus_allowed(pid as u32), "1");
    assert_eq!(reg.pids().unwrap(), [pid]);
    let (ok, _, err) = taskset(&k.0, &["-p", &pid.to_string(), "-c", "0", "--sync"]);
    assert!(ok, "{err}");
    assert_eq!(common::urom::cpus_allowed(pid as u32), "0");
    // The program ends (killed): the launcher passes the status on and cleans up.
    // SAFETY: kill(2) on the sleep process this test started (through the launcher).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let st = launcher.finish();
    assert_eq!(st.code(), Some(128 + libc::SIGKILL));
    assert!(reg.processes().unwrap().is_empty());
}
