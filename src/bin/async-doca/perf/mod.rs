//! `async-doca perf`: the project's perftest.
//!
//! Every test runs in `raw` mode (a C-style loop straight on doca-sys) and in `async` mode
//! (through the runtime) in the same invocation, so the ratio of the two is measured side
//! by side on the same machine at the same moment. Latency is half of a ping-pong round
//! trip, as perftest reports it. `procs` 1 runs both sides in one process (two threads or
//! two executors, on two CPUs); `procs` 2 runs the second side in a child process that this
//! command starts itself (`perf-peer`).
//!
//! The RDMA tests (`rdma.rs`, raw mode in `raw_rdma.rs`) exchange connection and memory blobs
//! both ways: over channels (procs 1), over the child's stdin/stdout (procs 2), or over TCP
//! with `perf --server [ADDR]` in one terminal and `perf --client ADDR` in another (the
//! client measures and prints; the server serves runs until killed). The soft provider
//! connects processes of the same user on the same host only, so the client and the server
//! run on one machine (ADDR defaults to 127.0.0.1:18515). Bandwidth tests take `--size`
//! (default sweep 8 B, 4 KiB, 64 KiB, 1 MiB) and add `mb_per_sec` to their JSON line;
//! `memcpy_bw` is a reference row measured in the same run.
//!
//! The collectives (`allreduce_lat`, `allgather_lat`, `bcast_lat`, `barrier_lat`,
//! `coll_overlap`; `coll.rs`) compare two modes of their own instead: `offload` (the UROM
//! workers of a domain run the collective) and `host` (the host processes run it), with
//! `--procs N` members.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_doca::{Error, ErrorKind, Result};
use clap::{Args, ValueEnum};

mod cm;
#[cfg(feature = "soft")]
mod coll;
mod comch;
mod dma;
mod raw;
mod raw_comch;
mod raw_rdma;
mod rdma;
mod stats;
mod sync_event;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "tracing")]
mod trace;
mod ucx;
#[cfg(feature = "soft")]
mod urom;

pub use stats::Report;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Raw,
    Async,
    /// Side A awaits from tokio, with the PE driven inside tokio (`async_doca::tokio::run_local`).
    #[cfg(feature = "tokio")]
    Tokio,
    /// Side A runs on a tokio thread, each iteration a job on an executor through
    /// `async_doca::tokio::Bridge`.
    #[cfg(feature = "tokio")]
    TokioHandle,
    /// Collectives run by the UROM workers of a domain.
    Offload,
    /// Collectives run by the host processes themselves (the baseline of `offload`).
    Host,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Raw => "raw",
            Mode::Async => "async",
            #[cfg(feature = "tokio")]
            Mode::Tokio => "tokio",
            #[cfg(feature = "tokio")]
            Mode::TokioHandle => "tokio-handle",
            Mode::Offload => "offload",
            Mode::Host => "host",
        }
    }

    /// The error for a test asked to run in a mode it does not have.
    fn unsupported(self, test: &str) -> Error {
        Error::new(ErrorKind::InvalidArgument, format!("{test} has no {} mode", self.name()))
    }
}

/// A reference implementation measured beside our tests in the same run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Anchor {
    /// UCX's `ucx_perftest` over shared memory (see `perf/ucx.rs`).
    Ucx,
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
    /// Process counts to run (1, 2 for the point-to-point tests, default both; any count
    /// from 1 for the collectives, default 2 and 4).
    #[arg(long = "procs", value_delimiter = ',')]
    procs: Vec<u32>,
    /// Timed iterations per test (default: each test's own, scaled down for large sizes).
    #[arg(long)]
    iters: Option<u64>,
    /// Payload sizes in bytes for the tests that take one (default: 8 for latency tests,
    /// a sweep 8 B, 4 KiB, 64 KiB, 1 MiB for bandwidth tests).
    #[arg(long = "size", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Untimed iterations before timing starts.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// How async-mode executors wait for work.
    #[arg(long, value_enum, default_value_t = IdleArg::Polling)]
    idle: IdleArg,
    /// List the tests and exit.
    #[arg(long)]
    list: bool,
    /// Run the peer side of the RDMA tests for `--client`s, on ADDR (default
    /// 127.0.0.1:18515), until killed. The soft provider connects processes of the same
    /// user on the same host only, so both ends run on this machine.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:18515")]
    server: Option<String>,
    /// Run the RDMA tests against a `perf --server` at ADDR (host:port, this host): the
    /// server side is the peer, this side measures (procs 2). Other tests are skipped.
    #[arg(long, value_name = "ADDR", conflicts_with = "server")]
    client: Option<String>,
    /// Also run a reference implementation's benchmark for the tests that have a counterpart,
    /// in the same run, and print the ratios (`ucx`: `ucx_perftest` from Debian's ucx-utils;
    /// skipped with a message when it is not installed).
    #[arg(long, value_enum)]
    anchor: Option<Anchor>,
}

#[derive(Args, Debug)]
pub struct PeerArgs {
    #[arg(long)]
    test: String,
    #[arg(long, value_enum)]
    mode: Mode,
    /// Hex-encoded export blob of the parent's object (tests that exchange blobs over
    /// stdin/stdout take none).
    #[arg(long, default_value = "")]
    blob: String,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 8)]
    size: usize,
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
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub mode: Mode,
    pub procs: u32,
    /// Payload size in bytes (tests without one ignore it).
    pub size: usize,
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
    /// The sizes run by default; a test with one fixed size ignores `--size`.
    sizes: &'static [usize],
    /// Whether `--size` applies.
    sized: bool,
    /// Timed iterations at 8 bytes; larger sizes run fewer (see [`iters_for`]).
    iters: u64,
    run: fn(&Params) -> Result<Report>,
    about: &'static str,
}

/// The default size sweep of the bandwidth tests.
const BW_SIZES: &[usize] = &[8, 4096, 65_536, 1 << 20];
const RDMA_MODES: &[Mode] = &[Mode::Raw, Mode::Async];
/// The latency tests that also run through the tokio bridge (feature `tokio`, on by default).
#[cfg(feature = "tokio")]
const LAT_MODES: &[Mode] = &[Mode::Raw, Mode::Async, Mode::Tokio, Mode::TokioHandle];
#[cfg(not(feature = "tokio"))]
const LAT_MODES: &[Mode] = RDMA_MODES;
const RDMA_PROCS: &[u32] = &[1, 2];
#[cfg(feature = "soft")]
const COLL_MODES: &[Mode] = &[Mode::Offload, Mode::Host];
#[cfg(feature = "soft")]
const COLL_PROCS: &[u32] = &[2, 4];
/// Bytes per member: one element, and 64 KiB.
#[cfg(feature = "soft")]
const COLL_SIZES: &[usize] = &[8, 65_536];

const TESTS: &[TestDef] = &[
    TestDef {
        name: "sync_add_wait",
        modes: LAT_MODES,
        procs: &[1, 2],
        sizes: &[8],
        sized: false,
        iters: 20_000,
        run: sync_event::run,
        about: "sync event ping-pong: one side adds, the other waits for the new value (half round trip)",
    },
    TestDef {
        name: "spawn",
        modes: &[Mode::Async],
        procs: &[1],
        sizes: &[0],
        sized: false,
        iters: 20_000,
        run: sync_event::run_spawn,
        about: "spawn and join an empty local task",
    },
    TestDef {
        name: "write_lat",
        modes: LAT_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::WriteLat, p),
        about: "RDMA write ping-pong: each side writes into the other's memory and polls its own (half round trip)",
    },
    TestDef {
        name: "read_lat",
        modes: LAT_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::ReadLat, p),
        about: "RDMA read: completion latency of one read (a full round trip, as perftest reports it)",
    },
    TestDef {
        name: "send_lat",
        modes: LAT_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::SendLat, p),
        about: "send/recv ping-pong (half round trip)",
    },
    #[cfg(feature = "tracing")]
    TestDef {
        name: "write_lat_traced",
        modes: &[Mode::Async],
        procs: &[1],
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| trace::run(rdma::Test::WriteLat, p),
        about: "write_lat with every operation's tracing span recorded (row mode `traced`, compare async)",
    },
    #[cfg(feature = "tracing")]
    TestDef {
        name: "send_lat_traced",
        modes: &[Mode::Async],
        procs: &[1],
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| trace::run(rdma::Test::SendLat, p),
        about: "send_lat with every operation's tracing span recorded (row mode `traced`, compare async)",
    },
    TestDef {
        name: "write_imm_lat",
        modes: RDMA_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::WriteImmLat, p),
        about: "write-with-immediate ping-pong, answered when the receive completes (half round trip)",
    },
    TestDef {
        name: "fadd_lat",
        modes: RDMA_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: false,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::FaddLat, p),
        about: "atomic fetch-add: completion latency of one operation (full round trip)",
    },
    TestDef {
        name: "cswap_lat",
        modes: RDMA_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: false,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::CswapLat, p),
        about: "atomic compare-and-swap: completion latency of one operation (full round trip)",
    },
    TestDef {
        name: "write_bw",
        modes: RDMA_MODES,
        procs: RDMA_PROCS,
        sizes: BW_SIZES,
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::WriteBw, p),
        about: "RDMA writes, 64 in flight: ops/s, MB/s, per-operation completion latency",
    },
    TestDef {
        name: "read_bw",
        modes: RDMA_MODES,
        procs: RDMA_PROCS,
        sizes: BW_SIZES,
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::ReadBw, p),
        about: "RDMA reads, 64 in flight: ops/s, MB/s, per-operation completion latency",
    },
    TestDef {
        name: "send_bw",
        modes: RDMA_MODES,
        procs: RDMA_PROCS,
        sizes: BW_SIZES,
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::SendBw, p),
        about: "sends into receives kept posted, 64 in flight: ops/s, MB/s, per-operation latency",
    },
    #[cfg(feature = "soft")]
    TestDef {
        name: "urom_cmd_lat",
        modes: &[Mode::Raw, Mode::Async],
        procs: &[2],
        sizes: &[8],
        sized: false,
        iters: 5_000,
        run: urom::run,
        about: "UROM worker command round trip (worker_graph loopback, host -> worker process -> host)",
    },
    #[cfg(feature = "soft")]
    TestDef {
        name: "allreduce_lat",
        modes: COLL_MODES,
        procs: COLL_PROCS,
        sizes: COLL_SIZES,
        sized: true,
        iters: 2_000,
        run: |p| coll::run(coll::Test::Allreduce, p),
        about: "allreduce sum of f64 (size: bytes per member), offloaded to UROM workers or run by the hosts",
    },
    #[cfg(feature = "soft")]
    TestDef {
        name: "allgather_lat",
        modes: COLL_MODES,
        procs: COLL_PROCS,
        sizes: COLL_SIZES,
        sized: true,
        iters: 2_000,
        run: |p| coll::run(coll::Test::Allgather, p),
        about: "allgather (size: bytes each member contributes), offloaded or host-only",
    },
    #[cfg(feature = "soft")]
    TestDef {
        name: "bcast_lat",
        modes: COLL_MODES,
        procs: COLL_PROCS,
        sizes: COLL_SIZES,
        sized: true,
        iters: 2_000,
        run: |p| coll::run(coll::Test::Bcast, p),
        about: "broadcast from rank 0, offloaded or host-only",
    },
    #[cfg(feature = "soft")]
    TestDef {
        name: "barrier_lat",
        modes: COLL_MODES,
        procs: COLL_PROCS,
        sizes: &[0],
        sized: false,
        iters: 2_000,
        run: |p| coll::run(coll::Test::Barrier, p),
        about: "barrier, offloaded or host-only",
    },
    #[cfg(feature = "soft")]
    TestDef {
        name: "coll_overlap",
        modes: COLL_MODES,
        procs: COLL_PROCS,
        sizes: &[65_536],
        sized: true,
        iters: 200,
        run: |p| coll::run(coll::Test::Overlap, p),
        about: "share of a compute loop done while an allreduce is in flight (overlap_pct; OSU method)",
    },
    TestDef {
        name: "dma_lat",
        modes: RDMA_MODES,
        procs: &[1],
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| dma::run(dma::Test::Lat, p),
        about: "DMA memcpy from PCI-imported memory, one at a time: submit-to-completion latency",
    },
    TestDef {
        name: "dma_bw",
        modes: RDMA_MODES,
        procs: &[1],
        sizes: BW_SIZES,
        sized: true,
        iters: 20_000,
        run: |p| dma::run(dma::Test::Bw, p),
        about: "DMA memcpy from PCI-imported memory, 64 in flight: ops/s, MB/s (compare memcpy_bw)",
    },
    TestDef {
        name: "comch_lat",
        modes: RDMA_MODES,
        procs: &[1],
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: comch::run,
        about: "Comch message ping-pong, client and server on two executors: half the round trip",
    },
    TestDef {
        name: "cm_connect",
        modes: RDMA_MODES,
        procs: &[1],
        sizes: &[0],
        sized: false,
        iters: 1_000,
        run: cm::run_connect,
        about: "connection setup by address, many connections to one server (raw: until both established; async: connect, accept, disconnect)",
    },
    TestDef {
        name: "remote_event_add_lat",
        modes: RDMA_MODES,
        procs: &[1],
        sizes: &[8],
        sized: false,
        iters: 20_000,
        run: cm::run_remote_add,
        about: "remote-net sync event notify_add through an RDMA connection: completion latency (full round trip)",
    },
    TestDef {
        name: "memcpy_bw",
        modes: &[Mode::Raw],
        procs: &[1],
        sizes: BW_SIZES,
        sized: true,
        iters: 20_000,
        run: rdma::run_memcpy,
        about: "reference: memcpy of the same sizes in one thread (MB/s to compare the bw tests with)",
    },
];

pub fn run(args: PerfArgs) -> Result<()> {
    if args.list {
        for t in TESTS {
            println!("{:<16} {}", t.name, t.about);
        }
        return Ok(());
    }
    if let Some(addr) = &args.server {
        return rdma::serve(addr);
    }
    for name in &args.tests {
        if !TESTS.iter().any(|t| t.name == name) {
            return Err(Error::new(ErrorKind::InvalidArgument, format!("unknown test {name:?} (see --list)")));
        }
    }
    let mut reports = Vec::new();
    for t in TESTS.iter().filter(|t| args.tests.is_empty() || args.tests.iter().any(|n| n == t.name)) {
        let sizes = if t.sized && !args.sizes.is_empty() { &args.sizes[..] } else { t.sizes };
        for &size in sizes {
            let iters = args.iters.unwrap_or_else(|| iters_for(t.iters, size));
            let warmup = args.warmup.min(iters / 4).max(1);
            let rdma_test = rdma::Test::ALL.into_iter().find(|r| r.name() == t.name);
            let procs_list = if args.client.is_some() { &[2][..] } else { t.procs };
            if args.client.is_some() && rdma_test.is_none() {
                continue;
            }
            // The collectives take any member count; the other tests only the ones they know.
            let collective = t.modes.contains(&Mode::Offload);
            let procs_list = if collective && !args.procs.is_empty() { &args.procs[..] } else { procs_list };
            for &procs in procs_list.iter().filter(|p| args.procs.is_empty() || args.procs.contains(p)) {
                for &mode in t.modes.iter().filter(|m| args.modes.is_empty() || args.modes.contains(m)) {
                    let params = Params { mode, procs, size, iters, warmup, idle: args.idle };
                    let result = match (&args.client, rdma_test) {
                        (Some(addr), Some(test)) => rdma::run_client(addr, test, &params),
                        _ => (t.run)(&params),
                    };
                    let report = result.map_err(|e| {
                        e.context_prefix(&format!("{} {} size={size} procs={procs}", t.name, mode.name()))
                    })?;
                    if args.json {
                        println!("{}", report.to_json());
                    } else {
                        eprintln!("done: {} {} size={} procs={}", report.test, report.mode, report.size, report.procs);
                    }
                    reports.push(report);
                }
            }
        }
    }
    if args.anchor == Some(Anchor::Ucx) {
        for report in ucx::anchor(&reports, args.iters, args.warmup)? {
            if args.json {
                println!("{}", report.to_json());
            }
            reports.push(report);
        }
    }
    if !args.json {
        stats::print_table(&reports);
    }
    Ok(())
}

/// Default timed iterations: `at_8` for small payloads, fewer for large ones (about 64 MiB
/// moved per run, at least 200 operations), so a default run stays short.
fn iters_for(at_8: u64, size: usize) -> u64 {
    let budget = (64 << 20) / size.max(8) as u64;
    at_8.min(budget).max(200)
}

pub fn run_peer(args: PeerArgs) -> Result<()> {
    let blob = hex_decode(&args.blob)?;
    let params =
        Params { mode: args.mode, procs: 2, size: args.size, iters: args.iters, warmup: args.warmup, idle: args.idle };
    if let Some(test) = rdma::Test::ALL.iter().find(|t| t.name() == args.test) {
        return rdma::peer(*test, &params, args.cpu);
    }
    #[cfg(feature = "soft")]
    if let Some(test) = coll::Test::ALL.iter().find(|t| t.name() == args.test) {
        return coll::peer(*test, &params);
    }
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

/// The `perf-peer` command line for `test` with the parameters of `p`.
pub fn peer_command(test: &str, p: &Params, cpu: usize) -> Result<Command> {
    let exe = std::env::current_exe().map_err(|e| Error::os(e, "perf: find own executable"))?;
    let idle = match p.idle {
        IdleArg::Polling => "polling",
        IdleArg::Adaptive => "adaptive",
        IdleArg::Event => "event",
    };
    let mut cmd = Command::new(exe);
    cmd.args(["perf-peer", "--test", test, "--mode", p.mode.name(), "--idle", idle])
        .args(["--iters", &p.iters.to_string(), "--warmup", &p.warmup.to_string()])
        .args(["--size", &p.size.to_string(), "--cpu", &cpu.to_string()]);
    Ok(cmd)
}

/// Starts the peer side of a two-process test as a child of this process.
pub fn spawn_peer(test: &str, p: &Params, blob: &[u8], cpu: usize) -> Result<PeerChild> {
    let child = peer_command(test, p, cpu)?
        .args(["--blob", &hex_encode(blob)])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| Error::os(e, "perf: start peer process"))?;
    Ok(PeerChild(Some(child)))
}

/// Starts the peer side as a child whose stdin and stdout are a [`rdma::Link`] to this
/// process (blobs go both ways).
pub fn spawn_linked_peer(test: &str, p: &Params, cpu: usize) -> Result<(PeerChild, rdma::Link)> {
    let mut child = peer_command(test, p, cpu)?
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Error::os(e, "perf: start peer process"))?;
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    let child = PeerChild(Some(child));
    match (stdin, stdout) {
        (Some(w), Some(r)) => Ok((child, rdma::Link::over(r, w))),
        _ => Err(Error::new(ErrorKind::Other, "perf: peer process without pipes")),
    }
}

/// A peer process that is killed if the test fails before it is waited for.
pub struct PeerChild(Option<Child>);

impl PeerChild {
    /// Starts `cmd` as a peer.
    // Only the collective tests (soft provider only) start peers this way.
    #[cfg_attr(not(feature = "soft"), allow(dead_code))]
    pub fn spawn(mut cmd: Command) -> Result<PeerChild> {
        cmd.spawn().map(|c| PeerChild(Some(c))).map_err(|e| Error::os(e, "perf: start peer process"))
    }

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
