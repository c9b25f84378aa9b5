//! `perf --anchor ucx`: UCX's own benchmark, `ucx_perftest`, run side by side with our tests in
//! the same invocation, so the soft provider's cost can be read against what a mature
//! shared-memory transport pays for the same operation on the same machine at the same moment.
//!
//! For each test that ran and has a UCX counterpart (the table below), a `ucx_perftest` server
//! and client run as two processes on this host, pinned to the two CPUs our two-process tests
//! use, over UCX's shared-memory transports (`UCX_TLS=shm,self`; the TCP port only carries
//! UCX's own setup). Their results become rows of mode `ucx` (procs 2), and the table prints
//! `raw / ucx` and `async / ucx`. For the bandwidth tests only the message rates compare:
//! `ucx_perftest` reports a bandwidth test's latency as the time per message (the inverse of
//! the rate), ours as each operation's completion latency with the window in flight, so those
//! ratio lines show ops/s alone.
//!
//! | our test | `ucx_perftest -t` | what both measure |
//! | --- | --- | --- |
//! | `write_lat` | `ucp_put_lat` | put ping-pong, half round trip |
//! | `send_lat` | `tag_lat` | two-sided ping-pong, half round trip |
//! | `read_lat` | `ucp_get` | one get, full round trip |
//! | `fadd_lat` | `ucp_fadd` | one fetch-add, full round trip |
//! | `cswap_lat` | `ucp_cswap` | one compare-and-swap, full round trip |
//! | `write_bw` | `ucp_put_bw` | message rate and bandwidth of puts |
//! | `send_bw` | `tag_bw` | message rate and bandwidth of sends |
//!
//! Without `ucx_perftest` (Debian's `ucx-utils`; `scripts/setup.sh --ucx` installs it) the
//! anchor is skipped with a message saying so; the rest of the run is unaffected.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_doca::{Error, ErrorKind, Result};

use super::cpu::two_cpus;
use super::report::Report;

/// The UCX benchmark's executable.
const PERFTEST: &str = "ucx_perftest";

/// How long one UCX run may take (client and server) before it is killed.
const UCX_LIMIT: Duration = Duration::from_secs(60);

/// Our test's UCX counterpart, if it has one.
pub fn counterpart(test: &str) -> Option<&'static str> {
    Some(match test {
        "write_lat" => "ucp_put_lat",
        "send_lat" => "tag_lat",
        "read_lat" => "ucp_get",
        "fadd_lat" => "ucp_fadd",
        "cswap_lat" => "ucp_cswap",
        "write_bw" => "ucp_put_bw",
        "send_bw" => "tag_bw",
        _ => return None,
    })
}

/// Whether `ucx_perftest` can be started here.
fn available() -> bool {
    Command::new(PERFTEST).arg("-h").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// The anchor rows for the tests in `reports` (one per test and size that has a counterpart),
/// or none, after saying why, when `ucx_perftest` is missing.
pub fn anchor(reports: &[Report], iters: Option<u64>, warmup: u64) -> Result<Vec<Report>> {
    if !available() {
        eprintln!(
            "perf --anchor ucx: `{PERFTEST}` was not found, so the UCX rows are skipped \
             (install Debian's ucx-utils, e.g. with scripts/setup.sh --ucx)"
        );
        return Ok(Vec::new());
    }
    let mut done: Vec<(&'static str, usize)> = Vec::new();
    let mut rows = Vec::new();
    for r in reports {
        let Some(ucx_test) = counterpart(r.test) else { continue };
        if done.contains(&(r.test, r.size)) {
            continue;
        }
        done.push((r.test, r.size));
        let n = iters.unwrap_or(r.iters).max(100);
        let p50 = run_pair(ucx_test, r.size, n, warmup, 50.0)
            .map_err(|e| e.context_prefix(&format!("perf --anchor ucx: {ucx_test}")))?;
        let p99 = run_pair(ucx_test, r.size, n, warmup, 99.0)
            .map_err(|e| e.context_prefix(&format!("perf --anchor ucx: {ucx_test}")))?;
        rows.push(Report {
            test: r.test,
            mode: "ucx",
            size: r.size,
            iters: n,
            procs: 2,
            p50_ns: p50.percentile_us * 1e3,
            p90_ns: None,
            p99_ns: p99.percentile_us * 1e3,
            p999_ns: None,
            max_ns: None,
            mean_ns: None,
            ops_per_sec: p50.msg_rate,
            // UCX reports MB/s in units of 2^20 bytes; ours are 10^6.
            mb_per_sec: r.mb_per_sec.map(|_| p50.bandwidth_mib * 1_048_576.0 / 1e6),
            overlap_pct: None,
            round: None,
            ref_ns: None,
            cdf: Vec::new(),
        });
    }
    Ok(rows)
}

/// What one `ucx_perftest -v` run printed on its final line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UcxResult {
    /// Latency at the requested percentile, microseconds.
    pub percentile_us: f64,
    /// Bandwidth over the whole run, MiB/s.
    pub bandwidth_mib: f64,
    /// Messages per second over the whole run.
    pub msg_rate: f64,
}

/// Parses the last CSV record of `ucx_perftest -v` output: `iterations, <rank>_percentile_lat,
/// avg_lat, overall_lat, avg_bw, overall_bw, avg_mr, overall_mr` (latencies in µs).
pub fn parse_csv(out: &str) -> Option<UcxResult> {
    let line = out
        .lines()
        .map(str::trim)
        .rev()
        .find(|l| l.split(',').count() >= 8 && l.starts_with(|c: char| c.is_ascii_digit()))?;
    let f: Vec<f64> = line.split(',').map(|x| x.trim().parse::<f64>()).collect::<std::result::Result<_, _>>().ok()?;
    Some(UcxResult { percentile_us: f[1], bandwidth_mib: f[5], msg_rate: f[7] })
}

/// A TCP port on loopback that was free a moment ago (for UCX's setup connection).
fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::os(e, "perf --anchor ucx: find a free port"))?;
    Ok(l.local_addr().map_err(|e| Error::os(e, "perf --anchor ucx: local address"))?.port())
}

/// Runs one `ucx_perftest` server and client pair and parses the client's result.
fn run_pair(test: &str, size: usize, iters: u64, warmup: u64, rank: f64) -> Result<UcxResult> {
    let (cpu_a, cpu_b) = two_cpus()?;
    let port = free_port()?.to_string();
    let ucx = |cmd: &mut Command| {
        cmd.env("UCX_TLS", "shm,self").stdin(Stdio::null());
    };
    let mut server = Command::new(PERFTEST);
    server.args(["-p", &port, "-c", &cpu_b.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
    ucx(&mut server);
    let mut server = Killed(server.spawn().map_err(|e| Error::os(e, "start the ucx_perftest server"))?);
    let deadline = Instant::now() + UCX_LIMIT;
    // The server needs a moment to listen: a client refused at once is retried.
    loop {
        let mut client = Command::new(PERFTEST);
        client
            .args(["127.0.0.1", "-p", &port, "-t", test, "-s", &size.to_string()])
            .args(["-n", &iters.to_string(), "-w", &warmup.to_string(), "-R", &rank.to_string()])
            .args(["-c", &cpu_a.to_string(), "-v"]);
        ucx(&mut client);
        let out = bounded_output(client, deadline)?;
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            let _ = server.0.wait();
            return parse_csv(&text).ok_or_else(|| {
                Error::new(ErrorKind::Other, format!("no result line in ucx_perftest's output:\n{text}"))
            });
        }
        if Instant::now() >= deadline || server.0.try_wait().ok().flatten().is_some() {
            return Err(Error::new(
                ErrorKind::Other,
                format!("ucx_perftest failed ({}):\n{text}{}", out.status, String::from_utf8_lossy(&out.stderr)),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `cmd` to completion, killing it at `deadline`.
fn bounded_output(mut cmd: Command, deadline: Instant) -> Result<std::process::Output> {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::os(e, "start the ucx_perftest client"))?;
    let pid = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        if Instant::now() >= deadline {
            // SAFETY: kill(2) on our own child's pid; at worst the pid is already reaped and
            // the call fails harmlessly with ESRCH.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    waiter
        .join()
        .map_err(|_| Error::new(ErrorKind::Other, "ucx_perftest waiter panicked"))?
        .map_err(|e| Error::os(e, "wait for ucx_perftest"))
}

/// A child process killed and reaped when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_final_csv_record() {
        let out = "+----+\n| header |\niterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n\
                   \x20 20000,0.050,0.049,0.049,157.13,157.13,20595649,20595649\n";
        let r = parse_csv(out).unwrap();
        assert_eq!(r, UcxResult { percentile_us: 0.05, bandwidth_mib: 157.13, msg_rate: 20595649.0 });
        assert_eq!(parse_csv("no numbers here\n"), None);
        assert_eq!(parse_csv("1,2,3\n"), None, "too few fields");
    }

    #[test]
    fn counterparts_cover_the_point_to_point_tests() {
        for t in ["write_lat", "send_lat", "read_lat", "fadd_lat", "cswap_lat", "write_bw", "send_bw"] {
            assert!(counterpart(t).is_some(), "{t}");
        }
        assert_eq!(counterpart("sync_add_wait"), None);
    }
}
