//! RDMA tests, perftest-style, between two connected RDMA contexts (side A, timed, and side
//! B, its peer), each with its own memory.
//!
//! * `write_lat`: ping-pong of writes: A writes iteration i's value into B's memory and polls
//!   its own memory until B wrote the same value back; B polls for i, then writes back. Half
//!   of the round trip is reported.
//! * `send_lat` / `write_imm_lat`: the same ping-pong with a send (or a write with immediate)
//!   answered by the peer once its receive completed. Half round trip. Each side posts its
//!   receive once its own send completed (in both modes; the soft provider keeps a message
//!   that arrives first in the ring until the receive is posted).
//! * `read_lat`, `fadd_lat`, `cswap_lat`: A alone issues one-sided operations; each is a
//!   round trip by itself, and its full completion time is reported (as perftest does).
//! * `write_bw`, `read_bw`, `send_bw`: A keeps a window of operations in flight (async:
//!   `rdma::Lanes` taken a batch at a time; B's receives for `send_bw` in receive lanes), over
//!   memory laid out alike in both modes (see [`slot`]); ops/s and MB/s over
//!   the run, p50/p99 of the per-operation completion latency (submit to completion).
//! * `memcpy_bw`: a reference row: `memcpy` of the same size in one thread, in the same run.
//!
//! The two sides exchange their connection and memory blobs over a [`Link`], and end with a
//! `done` each way (A's first, B's once it took everything): neither side stops its context
//! (which resets the connection) while the other still uses it.

use std::io::Write;
use std::time::{Duration, Instant};

use async_doca::executor::yield_now;
use async_doca::rdma::{Connection, LaneOp, Lanes, Rdma, Received};
use async_doca::{Access, Device, Error, ErrorKind, Memory, RemoteMemory, Result};

use super::clock::Stamp;
use super::cpu::{joined, runtime, two_cpus};
use super::peer::{spawn_linked_peer, timed_out, Link};
use super::stats::{timed, timed_async, timed_rounds, Recorder, Report, Round, Run, Samples};
use super::{Mode, Params, PEER_TIMEOUT};

/// Operations in flight in the bandwidth tests (fewer for large sizes, see [`window`]).
const BW_WINDOW: usize = 64;

/// Checks of a word a peer writes between two yields of the waiting task (see
/// `End::wait_word`): a few microseconds of spinning when the peer is slow.
const SPINS_PER_YIELD: u32 = 512;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Test {
    WriteLat,
    ReadLat,
    SendLat,
    WriteImmLat,
    FaddLat,
    CswapLat,
    WriteBw,
    ReadBw,
    SendBw,
}

// `Test::of` indexes `ALL` by discriminant.
const _: () = {
    let mut i = 0;
    while i < Test::ALL.len() {
        assert!(Test::ALL[i] as usize == i, "Test::ALL is in declaration order");
        i += 1;
    }
};

impl Test {
    pub const ALL: [Test; 9] = [
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
        Test::WriteImmLat,
        Test::FaddLat,
        Test::CswapLat,
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
    ];

    /// The test named by `T` in [`with_latency_test!`].
    const fn of(t: u8) -> Test {
        Test::ALL[t as usize]
    }

    pub fn name(self) -> &'static str {
        match self {
            Test::WriteLat => "write_lat",
            Test::ReadLat => "read_lat",
            Test::SendLat => "send_lat",
            Test::WriteImmLat => "write_imm_lat",
            Test::FaddLat => "fadd_lat",
            Test::CswapLat => "cswap_lat",
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
            Test::SendBw => "send_bw",
        }
    }

    pub fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw)
    }

    /// Ping-pong tests: B answers each of A's operations.
    pub fn is_pingpong(self) -> bool {
        matches!(self, Test::WriteLat | Test::SendLat | Test::WriteImmLat)
    }

    /// The payload size: atomics are always 8 bytes.
    fn size(self, p: &Params) -> usize {
        match self {
            Test::FaddLat | Test::CswapLat => 8,
            _ => p.size.max(8),
        }
    }
}

/// Runs `$body` with `$T`, a `const T: u8`, naming the latency test `$test` (`Test::ALL[T]`),
/// or fails for a bandwidth test. The async sides' rounds take their test as a constant, so
/// each test compiles to a loop of its own with no branch on the test in it, as a user's loop
/// of one operation is (a branch on the test inside a round's future cost the lanes ~37
/// instructions a round, `fadd_lat` side A 956 → 919: docs/cost.md, "Seventeenth session").
macro_rules! with_latency_test {
    ($test:expr, $T:ident => $body:expr) => {
        with_latency_test!(@arms $test, $T, $body; WriteLat, ReadLat, SendLat, WriteImmLat, FaddLat, CswapLat)
    };
    (@arms $test:expr, $T:ident, $body:expr; $($latency:ident),*) => {
        match $test {
            $(Test::$latency => {
                const $T: u8 = Test::$latency as u8;
                $body
            })*
            t @ (Test::WriteBw | Test::ReadBw | Test::SendBw) => {
                Err(Error::new(ErrorKind::InvalidArgument, format!("perf: {} is not a latency test", t.name())))
            }
        }
    };
}

/// Operations in flight: [`BW_WINDOW`], fewer above 256 KiB (at most 16 MiB in flight).
pub fn window(test: Test, size: usize) -> usize {
    if test.is_bw() {
        BW_WINDOW.min((16 << 20) / size).max(2)
    } else {
        2
    }
}

/// The bytes one operation's buffer takes. Bandwidth tests lay their operations out one
/// after the other, as `rdma::Lanes` cut their memory (lane `k` at `k * size`), in both
/// modes, so that both touch the same cache lines (at 8 bytes, eight operations to a line;
/// measured against 64-byte slots for raw, the difference was within the noise). Latency
/// tests use two slots, each rounded up to 64 bytes (aligned atomics, the polled word alone
/// on its line).
pub fn slot(test: Test, size: usize) -> usize {
    if test.is_bw() {
        size
    } else {
        size.next_multiple_of(64)
    }
}

/// What the timed side measured.
pub struct Measured {
    pub samples: Samples,
    pub elapsed: Duration,
}

/// Turns a run of `test` into its report.
pub fn report(test: Test, p: &Params, m: Measured) -> Report {
    let mode = p.mode.name();
    let size = test.size(p);
    let run = Run { test: test.name(), mode, size, procs: p.procs };
    // A ping-pong moves two messages per round trip (as sync_add_wait counts them).
    let ops = if test.is_pingpong() { 2 * p.iters } else { p.iters };
    let r = run.report(m.samples, ops, m.elapsed);
    if test.is_bw() {
        r.with_bandwidth()
    } else {
        r
    }
}

/// Side A of a test (timed): pinned to the CPU given, talking to B over the link.
pub type SideA = fn(Test, &Params, usize, Link) -> Result<Measured>;
/// Side B of a test (the peer).
pub type SideB = fn(Test, &Params, usize, Link) -> Result<()>;

/// The two sides of `mode`.
fn sides(test: Test, mode: Mode) -> Result<(SideA, SideB)> {
    match mode {
        Mode::Raw => Ok((super::raw_rdma::side_a, super::raw_rdma::side_b)),
        Mode::Async => Ok((async_side_a, async_side_b)),
        // The same sides, their operations through `rdma::Lanes` (see `LaneEnd`).
        Mode::Lanes => Ok((async_side_a, async_side_b)),
        // The bridge measures side A; its peer is the async side.
        #[cfg(feature = "tokio")]
        Mode::Tokio => Ok((super::tokio::rdma_side_a, async_side_b)),
        #[cfg(feature = "tokio")]
        Mode::TokioHandle => Ok((super::tokio::rdma_handle_side_a, async_side_b)),
        other => Err(other.unsupported(test.name())),
    }
}

/// Runs side A here and side B on another thread (procs 1) or in a `perf-peer` child
/// (procs 2, linked over its stdin/stdout), and reports A's measurement.
pub fn run(test: Test, p: &Params) -> Result<Report> {
    let (cpu_a, cpu_b) = two_cpus()?;
    let (side_a, side_b) = sides(test, p.mode)?;
    let p = *p;
    // Side A always runs on a thread of its own: it pins itself, and the caller's thread
    // must stay unpinned (an async side blocks on it while its executor runs on cpu_a).
    let measured = if p.procs == 2 {
        let (child, link) = spawn_linked_peer(test.name(), &p, cpu_b)?;
        // On failure the child is killed when dropped; its own error went to stderr.
        let measured = joined(std::thread::spawn(move || side_a(test, &p, cpu_a, link)))?;
        child.finish()?;
        measured
    } else {
        let (link_a, link_b) = Link::pair();
        let b = std::thread::spawn(move || side_b(test, &p, cpu_b, link_b));
        let a = std::thread::spawn(move || side_a(test, &p, cpu_a, link_a));
        let measured = joined(a);
        let peer = joined(b);
        let measured = measured?;
        peer?;
        measured
    };
    Ok(report(test, &p, measured))
}

/// The peer process of a two-process run (`perf-peer`): side B, linked to the parent over
/// stdin/stdout.
pub fn peer(test: Test, p: &Params, cpu: usize) -> Result<()> {
    let link = Link::over(std::io::stdin(), std::io::stdout());
    sides(test, p.mode)?.1(test, p, cpu, link)
}

/// The `--server` side: listens on `addr` through RDMA connection management (see
/// `cm_link`); each client run starts with a header frame naming the test and its
/// parameters, then side B runs over that connection's link. Runs until killed.
pub fn serve(addr: &str) -> Result<()> {
    let addr = resolve(addr)?;
    let (cpu_control, cpu) = two_cpus()?;
    // Port 0 asks for a free one: found as the kernel's choice for a TCP socket (the soft
    // provider's handshake runs over TCP on that port), then listened on by the RDMA context.
    let port = match addr.port() {
        0 => free_port(addr.ip())?,
        p => p,
    };
    let _ = BY_ADDRESS.set(Role::Server(addr.ip()));
    let (links_tx, links) = std::sync::mpsc::channel();
    super::cm_link::listen(port, cpu_control, links_tx)?;
    // The log never stops the server (its stderr may be a pipe nobody reads any more).
    let log = |msg: String| {
        let _ = writeln!(std::io::stderr(), "perf server: {msg}");
    };
    log(format!("listening on {}", std::net::SocketAddr::new(addr.ip(), port)));
    for (mut link, from) in links {
        let from = from.map_or_else(|| "a client".to_owned(), |a| a.to_string());
        let served = link.recv_blocking().and_then(|header| {
            let (test, p) = parse_header(&header)?;
            log(format!("{} {} size={} for {from}", test.name(), p.mode.name(), p.size));
            let (_, side_b) = sides(test, p.mode)?;
            joined(std::thread::spawn(move || side_b(test, &p, cpu, link)))
        });
        if let Err(e) = served {
            log(format!("run for {from} failed: {e}"));
        }
    }
    Err(Error::new(ErrorKind::ConnectionLost, "perf --server: the control context stopped"))
}

/// `host:port` (this host: 127.0.0.1, ::1, localhost) as a socket address.
fn resolve(addr: &str) -> Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|e| Error::os(e, &format!("perf: address {addr:?}")))?
        .next()
        .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, format!("perf: address {addr:?} resolves to nothing")))
}

/// The `--client ADDR` side of one run: connects to the server by address (RDMA connection
/// management, waiting up to [`PEER_TIMEOUT`] for it to listen), sends the header, runs side A.
pub fn run_client(addr: &str, test: Test, p: &Params) -> Result<Report> {
    let (cpu, cpu_control) = two_cpus()?;
    let addr = resolve(addr)?;
    let _ = BY_ADDRESS.set(Role::Client(addr.ip()));
    let mut link = super::cm_link::connect(addr, cpu_control)?;
    let p = Params { procs: 2, ..*p };
    let idle = clap::ValueEnum::to_possible_value(&p.idle).map(|v| v.get_name().to_owned()).unwrap_or_default();
    let park = if p.park { "park" } else { "inline" };
    let header = format!("{} {} {} {} {} {idle} {park}", test.name(), p.mode.name(), p.size, p.iters, p.warmup);
    link.send(header.as_bytes())?;
    let (side_a, _) = sides(test, p.mode)?;
    let measured = joined(std::thread::spawn(move || side_a(test, &p, cpu, link)))?;
    Ok(report(test, &p, measured))
}

fn parse_header(h: &[u8]) -> Result<(Test, Params)> {
    let bad = || Error::new(ErrorKind::InvalidArgument, "perf --server: bad run header");
    let h = std::str::from_utf8(h).map_err(|_| bad())?;
    let f: Vec<&str> = h.split(' ').collect();
    let [name, mode, size, iters, warmup, idle, park] = f[..] else { return Err(bad()) };
    let test = *Test::ALL.iter().find(|t| t.name() == name).ok_or_else(bad)?;
    let mode = match mode {
        "raw" => Mode::Raw,
        // The tokio bridge's side B is the async side, so a server built without the
        // `tokio` feature serves those runs too.
        "async" | "tokio" | "tokio-handle" => Mode::Async,
        "lanes" => Mode::Lanes,
        _ => return Err(bad()),
    };
    let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let p = Params {
        mode,
        procs: 2,
        size: num(size)? as usize,
        iters: num(iters)?,
        warmup: num(warmup)?,
        idle: <super::IdleArg as clap::ValueEnum>::from_str(idle, false).map_err(|_| bad())?,
        park: match park {
            "park" => true,
            "inline" => false,
            _ => return Err(bad()),
        },
        raw_doorbell: super::RawDoorbell::default(),
    };
    Ok((test, p))
}

// ---- async mode ----

/// How this process's async sides connect their measured RDMA connection when it runs as
/// `perf --server` or `perf --client`: by address too, through connection management, on a
/// port side B listens on for the run and names over the control link (the raw sides, on
/// doca-sys without the runtime, connect with export blobs carried over that link). Unset
/// in the other runs, whose sides trade export blobs.
static BY_ADDRESS: std::sync::OnceLock<Role> = std::sync::OnceLock::new();

#[derive(Debug)]
enum Role {
    /// The server: side B listens.
    Server(std::net::IpAddr),
    /// The client: side A connects to the server's address.
    Client(std::net::IpAddr),
}

impl Role {
    /// The run's connection on `rdma`: B listens on a free port of its address and sends the
    /// port; A receives it and connects there.
    async fn connect(&self, rdma: &Rdma, link: &mut Link) -> Result<Connection> {
        match *self {
            Role::Server(ip) => {
                let listener = rdma.listen(free_port(ip)?)?;
                link.send(&listener.port().to_le_bytes())?;
                async_doca::time::timeout(PEER_TIMEOUT, listener.accept()).await.map_err(Error::from)?
            }
            Role::Client(ip) => {
                let port = link.recv().await?;
                let port = <[u8; 2]>::try_from(&port[..])
                    .map_err(|_| Error::new(ErrorKind::InvalidArgument, "perf: bad port frame from the server"))?;
                let addr = std::net::SocketAddr::new(ip, u16::from_le_bytes(port));
                async_doca::time::timeout(PEER_TIMEOUT, rdma.connect(addr)).await.map_err(Error::from)?
            }
        }
    }
}

/// A port nobody listens on at `ip` now (the kernel's choice for a TCP socket, which the soft
/// provider's connection handshake also uses).
fn free_port(ip: std::net::IpAddr) -> Result<u16> {
    std::net::TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::os(e, "perf: find a free port"))
}

/// One side's context, connection and memory.
struct End {
    rdma: Rdma,
    conn: Connection,
    /// Sources, atomic results and receive buffers: one slot per operation in flight.
    local: Memory,
    /// What the peer writes, reads and updates.
    target: Memory,
    /// The peer's `target`.
    remote: RemoteMemory,
    size: usize,
    slot: usize,
}

impl End {
    async fn connect(test: Test, p: &Params, link: &mut Link) -> Result<End> {
        let dev = Device::open_default()?;
        let size = test.size(p);
        let (slot, window) = (slot(test, size), window(test, size));
        let rdma = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
        let local = dev.alloc(slot * window, Access::LOCAL_READ_WRITE)?;
        let target = dev.alloc(slot * window, Access::RDMA_ALL)?;
        if let Some(role) = BY_ADDRESS.get() {
            let conn = role.connect(&rdma, link).await?;
            link.send(&target.export_rdma()?)?;
            let remote = dev.import(&link.recv().await?)?;
            return Ok(End { rdma, conn, local, target, remote, size, slot });
        }
        let (blob, pending) = rdma.export()?;
        link.send(&blob)?;
        link.send(&target.export_rdma()?)?;
        let peer = link.recv().await?;
        let peer_mem = link.recv().await?;
        let conn = pending.connect(&peer).await?;
        let remote = dev.import(&peer_mem)?;
        Ok(End { rdma, conn, local, target, remote, size, slot })
    }

    /// The local buffer of slot `k`.
    fn buf(&self, k: usize) -> async_doca::Buf {
        self.local.slice(k * self.slot..k * self.slot + self.size)
    }

    /// The peer's memory of slot `k`.
    fn dst(&self, k: usize) -> async_doca::RemoteSlice {
        self.remote.slice(k * self.slot..k * self.slot + self.size)
    }

    /// Polls our `target` until the peer wrote `v` into its first word: tightly, as the raw
    /// loop does, giving the executor a turn every [`SPINS_PER_YIELD`] checks. The peer's
    /// write lands in our memory without anything of ours to progress, so only the detection
    /// is at stake: a yield per check (an executor turn and a PE progress, 569 instructions,
    /// 42–73 ns in `op_cost yield`) made it that coarse, on each side of a round trip, where
    /// the raw loop's check is a load (docs/cost.md, "Sixteenth session").
    async fn wait_word(&self, v: u64) -> Result<()> {
        let word = self.target.slice(0..8);
        // The deadline is set at the first look at the clock, as in the raw loop.
        let mut deadline = None;
        let mut spins = 0u32;
        while word.read_u64(0) != v {
            spins = spins.wrapping_add(1);
            if spins % SPINS_PER_YIELD != 0 {
                std::hint::spin_loop();
                continue;
            }
            if spins % (64 * SPINS_PER_YIELD) == 0
                && Instant::now() > *deadline.get_or_insert_with(|| Instant::now() + PEER_TIMEOUT)
            {
                return Err(timed_out());
            }
            yield_now().await;
        }
        Ok(())
    }

    /// Receives one message (into slot 1) and checks it is the expected one.
    async fn recv(&self, v: u64) -> Result<()> {
        let (msg, _) = self.rdma.recv(self.buf(1)).await;
        check_message(msg, v)
    }

    /// Side A's operation of latency iteration `i` (for ping-pongs: until the answer came),
    /// for the test `T` (see [`with_latency_test!`]).
    async fn ping<const T: u8>(&self, i: u64) -> Result<()> {
        let v = i + 1;
        match const { Test::of(T) } {
            Test::WriteLat => {
                let mut src = self.buf(0);
                src.write_u64(0, v);
                self.conn.write(src, self.dst(0)).await.0?;
                self.wait_word(v).await
            }
            Test::SendLat => {
                self.conn.send(self.buf(0)).await.0?;
                self.recv(v).await
            }
            Test::WriteImmLat => {
                self.conn.write_imm(self.buf(0), self.dst(0), v as u32).await.0?;
                self.recv(v).await
            }
            Test::ReadLat => self.conn.read(self.dst(0), self.buf(0)).await.0,
            Test::FaddLat => check(self.conn.fetch_add(self.remote.slice(0..8), 1, self.buf(0)).await.0?, i),
            Test::CswapLat => check(self.conn.compare_swap(self.remote.slice(0..8), i, v, self.buf(0)).await.0?, i),
            Test::WriteBw | Test::ReadBw | Test::SendBw => unreachable!("bandwidth tests stream"),
        }
    }

    /// Side B's answer to iteration `i` of a ping-pong.
    async fn pong<const T: u8>(&self, i: u64) -> Result<()> {
        let v = i + 1;
        match const { Test::of(T) } {
            Test::WriteLat => {
                self.wait_word(v).await?;
                let mut src = self.buf(0);
                src.write_u64(0, v);
                self.conn.write(src, self.dst(0)).await.0
            }
            Test::SendLat => {
                self.recv(v).await?;
                self.conn.send(self.buf(0)).await.0
            }
            Test::WriteImmLat => {
                self.recv(v).await?;
                self.conn.write_imm(self.buf(0), self.dst(0), v as u32).await.0
            }
            _ => unreachable!("not a ping-pong"),
        }
    }

    /// Side A of a bandwidth test: `total` operations, `window` of them in flight in one
    /// task through [`rdma::Lanes`](async_doca::rdma::Lanes) taken a batch at a time (the
    /// path a user takes for message rate on fixed memory: each lane keeps its task and
    /// submits it again, one wait and one doorbell per batch; the raw loop keeps its tasks
    /// too, and rings once per wait); each sample is one
    /// operation's submit-to-result time. The lanes are contiguous (lane `k` at `k * size`),
    /// and so are the raw loop's slots (see [`slot`]).
    async fn stream(&self, test: Test, p: &Params) -> Result<Measured> {
        let depth = window(test, self.size);
        let (local, remote) = (self.local.slice(0..depth * self.size), self.remote.slice(0..depth * self.size));
        let op = match test {
            Test::WriteBw => LaneOp::Write(remote),
            Test::ReadBw => LaneOp::Read(remote),
            Test::SendBw => LaneOp::Send,
            _ => unreachable!("not a bandwidth test"),
        };
        let mut lanes = self.conn.lanes(op, local, depth)?;
        let total = p.warmup + p.iters;
        let mut samples = Recorder::new(1.0, p.iters);
        // Each lane's submit stamp and whether it is timed, kept by lane as the raw loop
        // keeps its slots': a result comes back with its own lane.
        let mut stamps = vec![(Stamp::now(), false); depth];
        let mut start = Stamp::now();
        let mut i = 0;
        while i < total {
            let mut batch = lanes.batch().await;
            while let Some((oldest, lane)) = batch.lane() {
                if i == p.warmup {
                    start = Stamp::now();
                }
                let k = lane.index();
                if let Some(r) = oldest {
                    r?;
                    if stamps[k].1 {
                        samples.push(stamps[k].0.ticks_to_now());
                    }
                }
                stamps[k] = (Stamp::now(), i >= p.warmup);
                lane.submit();
                i += 1;
                if i == total {
                    break;
                }
            }
        }
        while let Some((r, lane)) = lanes.next().await {
            r?;
            let (t0, timed) = stamps[lane.index()];
            if timed {
                samples.push(t0.ticks_to_now());
            }
        }
        Ok(Measured { samples: samples.into_samples(), elapsed: start.elapsed() })
    }

    /// Side B of `send_bw`: keeps `window` receives posted (one task, receive
    /// [`rdma::Lanes`](async_doca::rdma::Lanes) taken a batch at a time) until `total`
    /// arrived.
    async fn sink(&self, total: u64) -> Result<()> {
        let depth = window(Test::SendBw, self.size);
        let mut posted = self.rdma.recv_lanes(self.local.slice(0..depth * self.size), depth)?;
        let (mut submitted, mut received) = (0, 0);
        while received < total {
            // Idle lanes (at first) and the receives done so far, posted again until `total`.
            let mut batch = posted.batch().await;
            while let Some((prev, lane)) = batch.lane() {
                if let Some(r) = prev {
                    r?;
                    received += 1;
                }
                if submitted < total {
                    lane.submit();
                    submitted += 1;
                }
            }
        }
        Ok(())
    }
}

/// A received message: its immediate, when it has one, is iteration `v`'s.
fn check_message(msg: Result<Received>, v: u64) -> Result<()> {
    match msg?.imm {
        Some(imm) => check(u64::from(imm), v),
        None => Ok(()),
    }
}

/// An atomic's old value (or an immediate) against the expected one.
pub fn check(got: u64, want: u64) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::Other, format!("perf: peer value {got}, expected {want}")))
    }
}

/// Side A of a latency test cut into its steps, for a driver that runs each iteration as
/// a job of its own (the tokio bridge's handle).
#[cfg(feature = "tokio")]
pub struct LatencyA {
    test: Test,
    end: End,
    link: std::cell::RefCell<Option<Link>>,
}

#[cfg(feature = "tokio")]
impl LatencyA {
    pub async fn connect(test: Test, p: Params, mut link: Link) -> Result<LatencyA> {
        let end = End::connect(test, &p, &mut link).await?;
        Ok(LatencyA { test, end, link: std::cell::RefCell::new(Some(link)) })
    }

    /// Iteration `i` (for ping-pongs: until the answer came).
    pub async fn ping(&self, i: u64) -> Result<()> {
        with_latency_test!(self.test, T => self.end.ping::<T>(i).await)
    }

    /// What a sample is divided by: 2 for a ping-pong (half round trip), else 1.
    pub fn divisor(&self) -> f64 {
        if self.test.is_pingpong() {
            2.0
        } else {
            1.0
        }
    }

    /// Tells B it is done and waits for its answer.
    pub async fn finish(&self) -> Result<()> {
        let mut link =
            self.link.borrow_mut().take().ok_or_else(|| Error::new(ErrorKind::Other, "perf: finished twice"))?;
        link.send(b"done")?;
        link.recv().await.map(drop)
    }
}

/// Side A, async: connect, run the iterations, tell B it is done.
pub(super) async fn async_a(test: Test, p: Params, mut link: Link) -> Result<Measured> {
    let end = End::connect(test, &p, &mut link).await?;
    // Half the round trip of a ping-pong; a one-sided read or atomic is a round trip by
    // itself and its whole completion latency is reported (as perftest does).
    let divisor = if test.is_pingpong() { 2.0 } else { 1.0 };
    let measured = if test.is_bw() {
        end.stream(test, &p).await?
    } else if p.mode == Mode::Lanes {
        lanes_a(&end, test, &p, divisor).await?
    } else {
        let end = &end;
        let (samples, elapsed) = with_latency_test!(test, T => {
            timed_async(p.warmup, p.iters, divisor, |i| end.ping::<T>(i)).await
        })?;
        Measured { samples, elapsed }
    };
    link.send(b"done")?;
    link.recv().await?;
    Ok(measured)
}

/// Side B, async: answer the ping-pong (or take the sends), then wait for A's `done`.
async fn async_b(test: Test, p: Params, mut link: Link) -> Result<()> {
    let end = End::connect(test, &p, &mut link).await?;
    let total = p.warmup + p.iters;
    if test.is_pingpong() && p.mode == Mode::Lanes {
        lanes_b(&end, test, total).await?;
    } else if test.is_pingpong() {
        with_latency_test!(test, T => {
            for i in 0..total {
                end.pong::<T>(i).await?;
            }
            Ok(())
        })?;
    } else if test == Test::SendBw {
        end.sink(total).await?;
    }
    link.recv().await?;
    link.send(b"done")
}

fn async_side_a(test: Test, p: &Params, cpu: usize, link: Link) -> Result<Measured> {
    let (rt, p) = (runtime(&[cpu], p.idle, p.park)?, *p);
    let h = rt.spawn_on(cpu, move || async_a(test, p, link))?;
    rt.block_on(h)?
}

fn async_side_b(test: Test, p: &Params, cpu: usize, link: Link) -> Result<()> {
    let (rt, p) = (runtime(&[cpu], p.idle, p.park)?, *p);
    let h = rt.spawn_on(cpu, move || async_b(test, p, link))?;
    rt.block_on(h)?
}

/// The test's operation of round `i` through `end`'s lane, to its result: the lane's first 8
/// bytes after it (an atomic's old value). Used in [`LaneEnd`]'s methods, whose `Self::TEST`
/// is the test.
///
/// Each test sets what the raw loop sets (`raw_rdma::Side::submit`): a write's payload word
/// the peer waits for, an immediate, an atomic's operands; nothing else is written per round.
/// Between the submit and the wait it posts the receive lane again if a message was taken
/// from it. The peer cannot answer before the operation reached it, so the receive is posted
/// in time, and a side that answers a message pays for the post after its answer left, not
/// between the message and the answer (the raw loop posts before it waits; posting right
/// after the receive put a submit on the critical path of every half round trip).
///
/// A macro rather than an `async fn`: a round's steps then run in the timed loop's own state
/// machine, as in a user's loop around a lane, where a nested `async fn`'s poll stayed out of
/// line (docs/cost.md, "Seventeenth session").
macro_rules! lane_op {
    ($end:expr, $i:expr) => {{
        let (i, end) = ($i, &mut *$end);
        let v = i + 1;
        let (_, mut lane) = end.op.lane().await;
        match Self::TEST {
            Test::WriteLat => {
                lane.write_u64(0, v);
                lane.submit();
            }
            Test::WriteImmLat => lane.submit_imm(v as u32),
            Test::FaddLat => lane.submit_fetch_add(1),
            Test::CswapLat => lane.submit_compare_swap(i, v),
            _ => lane.submit(),
        }
        if let (true, Some(posted)) = (Self::RECEIVES, &mut end.recv) {
            if posted.is_empty() {
                posted.lane().await.1.submit();
            }
        }
        let (r, lane) = end.op.next().await.expect("one submitted");
        r.map(|()| lane.buf().read_u64(0))
    }};
}

/// The next message through `end`'s receive lane, checked against `v` when it has an
/// immediate. Its lane is left idle: [`lane_op!`] posts it again once the next operation is
/// on its way. A macro as [`lane_op!`] is.
macro_rules! lane_recv {
    ($end:expr, $v:expr) => {{
        let posted = $end.recv.as_mut().expect("receive lanes for this test");
        let (msg, _lane) = posted.next().await.expect("one posted");
        check_message(msg, $v)
    }};
}

/// Side A of a latency test through lanes: the timed rounds of [`LaneEnd`] for `test`.
async fn lanes_a(end: &End, test: Test, p: &Params, divisor: f64) -> Result<Measured> {
    with_latency_test!(test, T => {
        let mut lanes = LaneEnd::<T>::new(end).await?;
        let (samples, elapsed) = timed_rounds(p.warmup, p.iters, divisor, &mut lanes).await?;
        Ok(Measured { samples, elapsed })
    })
}

/// Side B of a ping-pong through lanes: `total` answers of [`LaneEnd`] for `test`.
async fn lanes_b(end: &End, test: Test, total: u64) -> Result<()> {
    with_latency_test!(test, T => {
        let mut lanes = LaneEnd::<T>::new(end).await?;
        for i in 0..total {
            lanes.pong(i).await?;
        }
        Ok(())
    })
}

/// One side of a latency test through `rdma::Lanes` of one lane each (mode `lanes`): the
/// same memory as the async side's futures, each operation's task held and submitted again.
///
/// The test is a constant (`T`, a [`Test`] as `u8`), so each test's rounds compile to a loop
/// of their own, without a branch on the test, as a user's loop around a lane is. Side A's
/// rounds are its [`Round`]s: the timed loop borrows the lanes mutably for each round.
struct LaneEnd<'a, const T: u8> {
    end: &'a End,
    /// The operation of the test, over slot 0 (and the peer's slot 0).
    op: Lanes<'a>,
    /// A receive posted into slot 1 (`send_lat`, `write_imm_lat`). Posted again after the
    /// next operation's submit (see [`lane_op!`]), as the raw loop posts its receive off the
    /// reply's path.
    recv: Option<Lanes<'a, Received>>,
}

impl<'a, const T: u8> LaneEnd<'a, T> {
    const TEST: Test = Test::of(T);
    /// Whether the test answers with messages (a receive lane).
    const RECEIVES: bool = matches!(Self::TEST, Test::SendLat | Test::WriteImmLat);

    async fn new(end: &'a End) -> Result<LaneEnd<'a, T>> {
        let op = match Self::TEST {
            Test::WriteLat => LaneOp::Write(end.dst(0)),
            Test::WriteImmLat => LaneOp::WriteImm(end.dst(0)),
            Test::ReadLat => LaneOp::Read(end.dst(0)),
            Test::SendLat => LaneOp::Send,
            Test::FaddLat => LaneOp::FetchAdd(end.remote.slice(0..8)),
            Test::CswapLat => LaneOp::CompareSwap(end.remote.slice(0..8)),
            test => return Err(Mode::Lanes.unsupported(test.name())),
        };
        let op = end.conn.lanes(op, end.buf(0), 1)?;
        let recv = if Self::RECEIVES {
            let mut posted = end.rdma.recv_lanes(end.buf(1), 1)?;
            posted.lane().await.1.submit();
            Some(posted)
        } else {
            None
        };
        Ok(LaneEnd { end, op, recv })
    }

    /// Side A's round `i`: the operation, then what answers it.
    async fn ping(&mut self, i: u64) -> Result<()> {
        let v = i + 1;
        let old = lane_op!(self, i)?;
        match Self::TEST {
            Test::WriteLat => self.end.wait_word(v).await,
            Test::SendLat | Test::WriteImmLat => lane_recv!(self, v),
            Test::FaddLat | Test::CswapLat => check(old, i),
            _ => Ok(()),
        }
    }

    /// Side B's answer to round `i` of a ping-pong: what A sent, then the operation.
    async fn pong(&mut self, i: u64) -> Result<()> {
        match Self::TEST {
            Test::WriteLat => self.end.wait_word(i + 1).await?,
            _ => lane_recv!(self, i + 1)?,
        }
        lane_op!(self, i).map(drop)
    }
}

impl<const T: u8> Round for LaneEnd<'_, T> {
    fn round(&mut self, i: u64) -> impl std::future::Future<Output = Result<()>> {
        self.ping(i)
    }
}

/// `memcpy_bw`: copies of `size` bytes between two buffers, timed in batches.
pub fn run_memcpy(p: &Params) -> Result<Report> {
    let size = p.size.max(1);
    let batch = (65_536 / size).clamp(1, 64) as u64;
    let src = vec![0x5au8; size];
    let mut dst = vec![0u8; size];
    let batches = p.iters.div_ceil(batch).max(1);
    let warm = p.warmup.div_ceil(batch);
    // One sample per batch, divided by the batch size.
    let (samples, elapsed) = timed(warm, batches, batch as f64, |_| {
        for _ in 0..batch {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        Ok(())
    })?;
    let mut r = Run { test: "memcpy_bw", mode: "raw", size, procs: 1 }.report(samples, batches * batch, elapsed);
    r.iters = batches * batch;
    Ok(r.with_bandwidth())
}
