//! `async-doca perf`: the project's perftest.
//!
//! Every test runs in `raw` mode (a C-style loop straight on doca-sys) and in `async` mode
//! (through the runtime) in the same invocation, so the ratio of the two is measured side
//! by side on the same machine at the same moment. Latency is half of a ping-pong round
//! trip, as perftest reports it. `procs` 1 runs both sides in one process (two threads or
//! two executors, on two CPUs); `procs` 2 runs the second side in a child process that this
//! command starts itself (`perf-peer`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_doca::{Error, ErrorKind, Result};
use clap::{Args, ValueEnum};

mod raw;
mod stats;
mod sync_event;

pub use stats::Report;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Raw,
    Async,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Raw => "raw",
            Mode::Async => "async",
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum IdleArg {
    /// Never sleep: the executor polls its progress engine continuously.
    Polling,
    /// Spin briefly, then sleep on the notification fd.
    Adaptive,
    /// Sleep on the notification fd as soon as there is nothing to do.
    Event,
}

#[derive(Args, Debug)]
pub struct PerfArgs {
    /// Print one JSON object per test instead of a table.
    #[arg(long)]
    json: bool,
    /// Tests to run (default: all). Repeat or separate with commas.
    #[arg(long = "test", value_delimiter = ',')]
    tests: Vec<String>,
    /// Modes to run (default: all).
    #[arg(long = "mode", value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Process counts to run (1, 2; default both).
    #[arg(long = "procs", value_delimiter = ',')]
    procs: Vec<u32>,
    /// Timed iterations per test.
    #[arg(long, default_value_t = 20_000)]
    iters: u64,
    /// Untimed iterations before timing starts.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// How async-mode executors wait for work.
    #[arg(long, value_enum, default_value_t = IdleArg::Polling)]
    idle: IdleArg,
    /// List the tests and exit.
    #[arg(long)]
    list: bool,
}

#[derive(Args, Debug)]
pub struct PeerArgs {
    #[arg(long)]
    test: String,
    #[arg(long, value_enum)]
    mode: Mode,
    /// Hex-encoded export blob of the parent's object.
    #[arg(long)]
    blob: String,
    #[arg(long)]
    iters: u64,
    #[arg(long)]
    warmup: u64,
    /// CPU to pin the peer to.
    #[arg(long)]
    cpu: usize,
    #[arg(long, value_enum, default_value_t = IdleArg::Polling)]
    idle: IdleArg,
}

/// What one test needs to know to run.
pub struct Params {
    pub mode: Mode,
    pub procs: u32,
    pub iters: u64,
    pub warmup: u64,
    pub idle: IdleArg,
}

/// How long any one side may wait for its peer before the run is declared failed: far
/// above any real latency, low enough that a dead peer never hangs the command.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(20);

struct TestDef {
    name: &'static str,
    modes: &'static [Mode],
    procs: &'static [u32],
    run: fn(&Params) -> Result<Report>,
    about: &'static str,
}

const TESTS: &[TestDef] = &[
    TestDef {
        name: "sync_add_wait",
        modes: &[Mode::Raw, Mode::Async],
        procs: &[1, 2],
        run: sync_event::run,
        about: "sync event ping-pong: one side adds, the other waits for the new value (half round trip)",
    },
    TestDef {
        name: "spawn",
        modes: &[Mode::Async],
        procs: &[1],
        run: sync_event::run_spawn,
        about: "spawn and join an empty local task",
    },
];

pub fn run(args: PerfArgs) -> Result<()> {
    if args.list {
        for t in TESTS {
            println!("{:<16} {}", t.name, t.about);
        }
        return Ok(());
    }
    for name in &args.tests {
        if !TESTS.iter().any(|t| t.name == name) {
            return Err(Error::new(ErrorKind::InvalidArgument, format!("unknown test {name:?} (see --list)")));
        }
    }
    let mut reports = Vec::new();
    for t in TESTS.iter().filter(|t| args.tests.is_empty() || args.tests.iter().any(|n| n == t.name)) {
        for &procs in t.procs.iter().filter(|p| args.procs.is_empty() || args.procs.contains(p)) {
            for &mode in t.modes.iter().filter(|m| args.modes.is_empty() || args.modes.contains(m)) {
                let params = Params { mode, procs, iters: args.iters, warmup: args.warmup, idle: args.idle };
                let report = (t.run)(&params)
                    .map_err(|e| e.context_prefix(&format!("{} {} procs={procs}", t.name, mode.name())))?;
                if args.json {
                    println!("{}", report.to_json());
                } else {
                    eprintln!("done: {} {} procs={}", report.test, report.mode, report.procs);
                }
                reports.push(report);
            }
        }
    }
    if !args.json {
        stats::print_table(&reports);
    }
    Ok(())
}

pub fn run_peer(args: PeerArgs) -> Result<()> {
    let blob = hex_decode(&args.blob)?;
    let params = Params { mode: args.mode, procs: 2, iters: args.iters, warmup: args.warmup, idle: args.idle };
    match args.test.as_str() {
        "sync_add_wait" => sync_event::peer(&params, &blob, args.cpu),
        other => Err(Error::new(ErrorKind::InvalidArgument, format!("perf-peer: unknown test {other:?}"))),
    }
}

/// The two CPUs the two sides run on: the first two of this process's affinity (or the
/// same one twice on a one-CPU machine).
pub fn two_cpus() -> Result<(usize, usize)> {
    let cpus = async_doca::CpuSet::current_affinity()?;
    let mut it = cpus.iter();
    let a = it.next().ok_or_else(|| Error::new(ErrorKind::NotFound, "no CPU in affinity"))?;
    Ok((a, it.next().unwrap_or(a)))
}

/// Starts the peer side of a two-process test as a child of this process.
pub fn spawn_peer(test: &str, p: &Params, blob: &[u8], cpu: usize) -> Result<PeerChild> {
    let exe = std::env::current_exe().map_err(|e| Error::os(e, "perf: find own executable"))?;
    let idle = match p.idle {
        IdleArg::Polling => "polling",
        IdleArg::Adaptive => "adaptive",
        IdleArg::Event => "event",
    };
    let child = Command::new(exe)
        .args(["perf-peer", "--test", test, "--mode", p.mode.name(), "--idle", idle])
        .args(["--blob", &hex_encode(blob), "--iters", &p.iters.to_string(), "--warmup", &p.warmup.to_string()])
        .args(["--cpu", &cpu.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| Error::os(e, "perf: start peer process"))?;
    Ok(PeerChild(Some(child)))
}

/// A peer process that is killed if the test fails before it is waited for.
pub struct PeerChild(Option<Child>);

impl PeerChild {
    /// Waits for the peer to exit (bounded by [`PEER_TIMEOUT`]) and checks it succeeded.
    pub fn finish(mut self) -> Result<()> {
        let mut child = self.0.take().expect("peer waited once");
        let deadline = Instant::now() + PEER_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(Error::new(ErrorKind::Other, format!("perf peer process failed: {status}")))
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::new(ErrorKind::TimedOut, "perf peer process did not exit"));
                }
                Err(e) => return Err(Error::os(e, "wait for perf peer")),
            }
        }
    }
}

impl Drop for PeerChild {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(s: &str) -> Result<Vec<u8>> {
    let bad = || Error::new(ErrorKind::InvalidArgument, "perf-peer: blob is not hex");
    if s.len() % 2 != 0 {
        return Err(bad());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
        .collect()
}
