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
//! both ways over a [`peer::Link`]: channels (procs 1) or the child's stdin/stdout (procs 2).
//! `perf --server [ADDR]` in one terminal and `perf --client ADDR` in another connect by
//! address instead, through RDMA connection management (`cm_link.rs`): the client measures
//! and prints, the server serves runs until killed, and the async sides' measured connection
//! is made by address as well. The soft provider connects processes of the same user on the
//! same host only, so the client and the server run on one machine (ADDR defaults to
//! 127.0.0.1:18515). Bandwidth tests take `--size` (default sweep 8 B, 4 KiB, 64 KiB, 1 MiB)
//! and add `mb_per_sec` to their JSON line; `memcpy_bw` is a reference row measured in the
//! same run.
//!
//! Every row reports p50, p90, p99, p99.9 and the maximum from an HDR histogram of its
//! samples (`stats.rs`), in the table (`output.rs`) and as JSON (`report.rs`, serde);
//! `--plot DIR` draws the runs as SVG (`plot.rs`).
//!
//! The collectives (`allreduce_lat`, `allgather_lat`, `bcast_lat`, `barrier_lat`,
//! `coll_overlap`; `coll.rs`) compare two modes of their own instead: `offload` (the UROM
//! workers of a domain run the collective) and `host` (the host processes run it), with
//! `--procs N` members.

use std::time::Duration;

use async_doca::{Error, ErrorKind, Result};
use clap::{Args, ValueEnum};

// The harness: one module per concept.
mod clock; // the stamps: the invariant TSC, or the monotonic clock
mod cm_link; // perf --server/--client: the control connection by address (RDMA CM)
mod cpu; // CPUs, pinned threads, runtimes
mod machine; // the machine's state without DOCA: the per-round reference (atomic ping-pong)
mod output; // the table, the ratio lines, JSON lines
mod peer; // the peer process of a two-process test and the blob link to it
mod plot; // `--plot DIR`: SVG pictures
mod progress; // the progress line on a terminal
mod report; // one measured row (serde)
mod rounds; // `--rounds N`: the plan measured N times, medians over the rounds
mod stats; // samples in an HDR histogram, timed loops

// The tests, per library: each module measures its operations in every mode it has.
#[cfg(feature = "tokio")]
mod bridge;
mod cm;
#[cfg(feature = "soft")]
mod coll;
mod comch;
mod comch_fast;
mod dma;
mod raw;
mod raw_comch;
mod raw_comch_fast;
mod raw_comch_kit;
mod raw_rdma;
mod rdma;
#[cfg(feature = "tokio")]
mod stream;
mod sync_event;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "tracing")]
mod trace;
mod ucx;
#[cfg(feature = "soft")]
mod urom;

use report::Report;
use rounds::Rounds;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Raw,
    Async,
    /// The async runtime through `rdma::Lanes` of one lane (fixed memory, the task held and
    /// submitted again): the latency of every point-to-point RDMA test.
    Lanes,
    /// Side A awaits from tokio, with the PE driven inside tokio (`async_doca::tokio::run_local`).
    #[cfg(feature = "tokio")]
    Tokio,
    /// Side A runs on a tokio thread, each iteration a job on an executor through
    /// `async_doca::tokio::Bridge`.
    #[cfg(feature = "tokio")]
    TokioHandle,
    /// Tokio's `TcpStream` over loopback (the reference of the `stream_*` tests).
    #[cfg(feature = "tokio")]
    Tcp,
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
            Mode::Lanes => "lanes",
            #[cfg(feature = "tokio")]
            Mode::Tokio => "tokio",
            #[cfg(feature = "tokio")]
            Mode::TokioHandle => "tokio-handle",
            #[cfg(feature = "tokio")]
            Mode::Tcp => "tcp",
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

/// When the raw RDMA bandwidth loop (side A) rings the doorbell of the operations it
/// submitted again without one (`doca_task_submit_ex` without the flush flag).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum RawDoorbell {
    /// At every wait for a completion: with a full window, one doorbell per operation.
    #[default]
    Wait,
    /// Only when the operation awaited is not done, and then every completion the PE has is
    /// delivered: one doorbell per batch of operations, the policy of `rdma::Lanes` (the
    /// async side of the same tests).
    Batch,
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
#[command(after_help = REF_HELP)]
pub struct PerfArgs {
    /// Print one JSON object per line per test instead of a table (keys: test, mode, size,
    /// iters, procs, p50_ns, p90_ns, p99_ns, p999_ns, max_ns, mean_ns (of the fastest 99%),
    /// ops_per_sec; mb_per_sec for bandwidth tests, overlap_pct for coll_overlap; round with
    /// --rounds; ref_ns, the round's machine reference, unless --no-ref).
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
    /// Async modes: operations never progress the PE from their own poll
    /// (`Builder::inline_progress(false)`), so every operation's task parks and the
    /// executor's loop completes it and wakes it: the path of an operation whose completion
    /// is not there at once, as on hardware. Without it, doca-soft's operations complete
    /// inside the poll that submitted them.
    #[arg(long)]
    park: bool,
    /// When the raw bandwidth loops ring their doorbells. `batch` is the lanes' policy, for
    /// comparing the runtime with a raw loop that batches the same way (on doca-soft a burst
    /// of large copies is slower than the same copies one by one: docs/cost.md, sixteenth
    /// session).
    #[arg(long, value_enum, default_value_t = RawDoorbell::Wait)]
    raw_doorbell: RawDoorbell,
    /// List the tests and exit.
    #[arg(long)]
    list: bool,
    /// Also write SVG pictures of the run into DIR (created if needed): a latency CDF per
    /// test, size and process count with one curve per mode (raw, async, tokio ...), and
    /// MB/s by payload size for the bandwidth tests.
    #[arg(long, value_name = "DIR")]
    plot: Option<std::path::PathBuf>,
    /// Run the peer side of the RDMA tests for `--client`s, until killed: listen on ADDR
    /// (default 127.0.0.1:18515; port 0 picks a free one, printed as `listening on ADDR`)
    /// through RDMA connection management. The soft provider connects processes of the same
    /// user on the same host only, so both ends run on this machine.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:18515")]
    server: Option<String>,
    /// Run the RDMA tests against a `perf --server` at ADDR (host:port, this host), connected
    /// by address through RDMA connection management: the server side is the peer, this
    /// side measures (procs 2). Other tests are skipped.
    #[arg(long, value_name = "ADDR", conflicts_with = "server")]
    client: Option<String>,
    /// Measure the whole plan N times, one round after another, and print per point the
    /// medians over the rounds, with each ratio taken within a round and shown as its median
    /// and range (see `rounds.rs`: on a shared machine one run can land in a bad minute).
    /// With `--json`, every round's lines, each with its `round`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Also run a reference implementation's benchmark for the tests that have a counterpart,
    /// in the same run, and print the ratios (`ucx`: `ucx_perftest` from Debian's ucx-utils;
    /// skipped with a message when it is not installed).
    #[arg(long, value_enum)]
    anchor: Option<Anchor>,
    /// Skip the machine reference measured before every round (a bare atomic ping-pong
    /// between the tests' two CPUs, a few ms; see the note below).
    #[arg(long)]
    no_ref: bool,
}

/// The note under `perf --help` on the machine reference.
const REF_HELP: &str = "Machine reference: before each round, perf bounces an atomic counter between two \
threads pinned to the tests' two CPUs (no DOCA; 20 000 round trips, a few ms) and prints its p50 \
round trip (`round N: machine reference ...`; `ref_ns` in --json lines). Some machines (this project's \
VM) switch between a fast and a slow state within a minute, and every raw latency follows: compare \
rounds, and builds, taken at a similar reference. --no-ref skips it.";

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
    #[arg(long)]
    park: bool,
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
    /// Async executors without inline progress (`--park`).
    pub park: bool,
    /// The raw bandwidth loop's doorbells (side A; the peer keeps the default).
    pub raw_doorbell: RawDoorbell,
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
/// The RDMA latency tests that also run through `rdma::Lanes` (mode `lanes`).
const LANE_MODES: &[Mode] = &[Mode::Raw, Mode::Async, Mode::Lanes];
/// The same, for the tests that also run through the tokio bridge.
#[cfg(feature = "tokio")]
const LANE_LAT_MODES: &[Mode] = &[Mode::Raw, Mode::Async, Mode::Lanes, Mode::Tokio, Mode::TokioHandle];
#[cfg(not(feature = "tokio"))]
const LANE_LAT_MODES: &[Mode] = LANE_MODES;
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
    #[cfg(feature = "tokio")]
    TestDef {
        name: "bridge_lat",
        modes: &[Mode::Raw, Mode::Async, Mode::TokioHandle],
        procs: &[1],
        sizes: &[0],
        sized: false,
        iters: 20_000,
        run: bridge::run,
        about: "an empty job to the executor of the other CPU and back (whole round trip): atomics (raw), executor to executor (async), tokio::Bridge (tokio-handle)",
    },
    TestDef {
        name: "write_lat",
        modes: LANE_LAT_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::WriteLat, p),
        about: "RDMA write ping-pong: each side writes into the other's memory and polls its own (half round trip)",
    },
    TestDef {
        name: "read_lat",
        modes: LANE_LAT_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::ReadLat, p),
        about: "RDMA read: completion latency of one read (a full round trip, as perftest reports it)",
    },
    TestDef {
        name: "send_lat",
        modes: LANE_LAT_MODES,
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
        modes: LANE_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::WriteImmLat, p),
        about: "write-with-immediate ping-pong, answered when the receive completes (half round trip)",
    },
    TestDef {
        name: "fadd_lat",
        modes: LANE_MODES,
        procs: RDMA_PROCS,
        sizes: &[8],
        sized: false,
        iters: 20_000,
        run: |p| rdma::run(rdma::Test::FaddLat, p),
        about: "atomic fetch-add: completion latency of one operation (full round trip)",
    },
    TestDef {
        name: "cswap_lat",
        modes: LANE_MODES,
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
        iters: 200_000,
        run: |p| rdma::run(rdma::Test::WriteBw, p),
        about: "RDMA writes, 64 in flight: ops/s, MB/s, per-operation completion latency",
    },
    TestDef {
        name: "read_bw",
        modes: RDMA_MODES,
        procs: RDMA_PROCS,
        sizes: BW_SIZES,
        sized: true,
        iters: 200_000,
        run: |p| rdma::run(rdma::Test::ReadBw, p),
        about: "RDMA reads, 64 in flight: ops/s, MB/s, per-operation completion latency",
    },
    TestDef {
        name: "send_bw",
        modes: RDMA_MODES,
        procs: RDMA_PROCS,
        sizes: BW_SIZES,
        sized: true,
        iters: 200_000,
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
        name: "comch_fast_lat",
        modes: RDMA_MODES,
        procs: &[1],
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: comch_fast::run,
        about: "Comch fast-path ping-pong (consumer and producer on each side, two buffers posted), client and server on two executors: half the round trip",
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
    #[cfg(feature = "tokio")]
    TestDef {
        name: "stream_bw",
        modes: &[Mode::Async, Mode::Tcp],
        procs: &[1],
        sizes: &[65_536, 1 << 20],
        sized: true,
        iters: 20_000,
        run: |p| stream::run(stream::Test::Bw, p),
        about: "byte stream throughput: rdma::RdmaStream (async) next to tokio's TcpStream over loopback (tcp)",
    },
    #[cfg(feature = "tokio")]
    TestDef {
        name: "stream_lat",
        modes: &[Mode::Async, Mode::Tcp],
        procs: &[1],
        sizes: &[8],
        sized: true,
        iters: 20_000,
        run: |p| stream::run(stream::Test::Lat, p),
        about: "byte stream ping-pong (half round trip): RdmaStream (async) next to TcpStream (tcp)",
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
            println!("{:<20} {}", t.name, t.about);
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
    clock::init();
    let plan = plan(&args);
    let progress = progress::Progress::new(plan.len() * args.rounds as usize);
    let mut rounds = Rounds::default();
    for round in 1..=args.rounds {
        rounds.begin();
        let tag = if args.rounds > 1 { Some(round) } else { None };
        // Measured right before the round's tests, so that a round taken in the machine's
        // slow state can be told from a regression (see `machine.rs`).
        let ref_ns = if args.no_ref { None } else { reference(round, args.json, &progress) };
        for (t, params) in &plan {
            let Params { mode, size, procs, .. } = *params;
            progress.start(format!("{} {} size={size} procs={procs}", t.name, mode.name()));
            let rdma_test = rdma::Test::ALL.into_iter().find(|r| r.name() == t.name);
            let result = match (&args.client, rdma_test) {
                (Some(addr), Some(test)) => rdma::run_client(addr, test, params),
                _ => (t.run)(params),
            };
            let report = result
                .map_err(|e| e.context_prefix(&format!("{} {} size={size} procs={procs}", t.name, mode.name())))?;
            let report = Report { round: tag, ref_ns, ..report };
            if args.json {
                output::print_json(&report);
            }
            progress.done();
            rounds.push(report);
        }
        if args.anchor == Some(Anchor::Ucx) {
            for report in ucx::anchor(rounds.current(), args.iters, args.warmup)? {
                let report = Report { round: tag, ref_ns, ..report };
                if args.json {
                    output::print_json(&report);
                }
                rounds.push(report);
            }
        }
    }
    progress.finish();
    let reports = rounds.medians();
    if !args.json {
        output::print_table(&reports, &rounds);
        if args.raw_doorbell == RawDoorbell::Batch {
            println!("\nraw bandwidth loops: one doorbell per batch (--raw-doorbell batch)");
        }
        println!("\nstamps: {}", clock::describe());
    }
    if let Some(dir) = &args.plot {
        let files = plot::write(dir, &reports)?;
        // On stderr: stdout stays the table or the JSON lines.
        eprintln!("perf: {} picture(s) written to {}", files.len(), dir.display());
    }
    Ok(())
}

/// Measures round `round`'s machine reference and prints it: on stdout above the table, on
/// stderr with `--json` (whose stdout is JSON lines only). A reference that cannot be
/// measured (one CPU, a CPU held by another job for seconds) is reported and left out; the
/// round's tests still run.
fn reference(round: u32, json: bool, progress: &progress::Progress) -> Option<f64> {
    let measured = machine::reference();
    let line = match &measured {
        Ok(r) => format!(
            "round {round}: machine reference (atomic ping-pong CPU{}<->CPU{}) p50 {:.0} ns",
            r.cpu_a, r.cpu_b, r.p50_ns
        ),
        Err(e) => format!("round {round}: no machine reference ({e})"),
    };
    progress.suspend(|| if json { eprintln!("{line}") } else { println!("{line}") });
    measured.ok().map(|r| r.p50_ns)
}

/// Every run the arguments ask for, in order: each test, size, process count and mode.
fn plan(args: &PerfArgs) -> Vec<(&'static TestDef, Params)> {
    let mut runs = Vec::new();
    for t in TESTS.iter().filter(|t| args.tests.is_empty() || args.tests.iter().any(|n| n == t.name)) {
        let is_rdma = rdma::Test::ALL.iter().any(|r| r.name() == t.name);
        // A client runs only the RDMA tests, against the server's process.
        if args.client.is_some() && !is_rdma {
            continue;
        }
        let sizes = if t.sized && !args.sizes.is_empty() { &args.sizes[..] } else { t.sizes };
        let procs_list = if args.client.is_some() { &[2][..] } else { t.procs };
        // The collectives take any member count; the other tests only the ones they know.
        let collective = t.modes.contains(&Mode::Offload);
        let procs_list = if collective && !args.procs.is_empty() { &args.procs[..] } else { procs_list };
        for &size in sizes {
            let iters = args.iters.unwrap_or_else(|| iters_for(t.iters, size));
            let warmup = args.warmup.min(iters / 4).max(1);
            for &procs in procs_list.iter().filter(|p| args.procs.is_empty() || args.procs.contains(p)) {
                for &mode in t.modes.iter().filter(|m| args.modes.is_empty() || args.modes.contains(m)) {
                    runs.push((
                        t,
                        Params {
                            mode,
                            procs,
                            size,
                            iters,
                            warmup,
                            idle: args.idle,
                            park: args.park,
                            raw_doorbell: args.raw_doorbell,
                        },
                    ));
                }
            }
        }
    }
    runs
}

/// Default timed iterations: `at_8` for small payloads, fewer for large ones (about 256 MiB
/// moved per run, at least 200 operations), so a default run stays short.
///
/// A bandwidth run must still last tens of milliseconds: one of a few milliseconds (20 000
/// operations at 8 B, 16 384 at 4 KiB, when the budget was 20 000 and 64 MiB) measured the
/// machine's hiccups more than the runtime: async/raw ops/s 0.60–0.97 over five rounds of
/// one build at 8 B. At 200 000 and 256 MiB the per-row medians are steadier (0.79–0.98 at
/// 8 B over four runs of the same code, most of them 0.88 or more), though the rounds of
/// one run still spread ~0.3 (`docs/cost.md`, eleventh session).
fn iters_for(at_8: u64, size: usize) -> u64 {
    let budget = (256 << 20) / size.max(8) as u64;
    at_8.min(budget).max(200)
}

pub fn run_peer(args: PeerArgs) -> Result<()> {
    clock::init();
    let blob = peer::hex_decode(&args.blob)?;
    let params = Params {
        mode: args.mode,
        procs: 2,
        size: args.size,
        iters: args.iters,
        warmup: args.warmup,
        idle: args.idle,
        park: args.park,
        raw_doorbell: RawDoorbell::default(),
    };
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
