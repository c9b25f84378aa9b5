//! Collectives: `allreduce_lat`, `allgather_lat`, `bcast_lat`, `barrier_lat` and
//! `coll_overlap`, in modes `offload` (the domain's UROM workers run the collective,
//! [`Domain::allreduce`] and the others) and `host` (the host processes run the same
//! algorithms themselves over RDMA, [`HostComm`]).
//!
//! `procs` members (default 2 and 4; `--procs N` for others) are this process (rank 0, which
//! measures and reports) and `N - 1` `perf-peer` processes it starts; they meet at a Unix
//! socket (`UnixOob`, rank and size in the environment) and use a private UROM service with
//! the built-in plugins. Each member runs on a one-CPU runtime in adaptive idle mode whatever
//! `--idle` says (members that poll would starve the workers on a machine with fewer CPUs than
//! processes). Where the members and their workers run: see `placement`. Sizes are bytes of
//! f64 elements per member (the source of an allreduce or allgather, the broadcast buffer);
//! the latency is one collective, submission to completion, on rank 0.
//!
//! `coll_overlap` measures how much of a compute loop the host gets done while an allreduce
//! is in flight (the OSU non-blocking collectives method): `t_coll` is the median allreduce
//! alone, `t_comp` a compute loop calibrated to last about `t_coll`, `t_total` the median of
//! submit, compute, await (every round starts with a barrier); overlap =
//! `100 × (1 − (t_total − t_comp) / t_coll)`, clamped to 0..100 and reported as
//! `overlap_pct`. Only rank 0 computes (the others take part and wait) and it has the first
//! CPU to itself, so that on a machine with fewer CPUs than processes the computing host and
//! the "DPU" still have a CPU each; the figure is rank 0's. Offloaded, the workers progress the collective
//! while the host computes; host-only, the host's own executor runs it, and it waits for the
//! compute loop to yield.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_doca::coll::{Collectives, HostComm, ReduceOp, TypedBuf};
use async_doca::oob::{UnixOob, OOB_PATH_ENV, OOB_RANK_ENV, OOB_SIZE_ENV};
use async_doca::urom::{Domain, Service, Worker};
use async_doca::{Access, CpuSet, Device, Error, ErrorKind, Memory, Result};

use super::cpu::runtime;
use super::peer::{peer_command, PeerChild};
use super::stats::{timed_rounds, Report, Round, Run, Samples};
use super::urom::PerfDaemon;
use super::{IdleArg, Mode, Params, PEER_TIMEOUT};

/// The peers find the service here.
const SOCKET_ENV: &str = "ASYNC_DOCA_PERF_UROM_SOCKET";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    Allreduce,
    Allgather,
    Bcast,
    Barrier,
    Overlap,
}

impl Test {
    pub const ALL: [Test; 5] = [Test::Allreduce, Test::Allgather, Test::Bcast, Test::Barrier, Test::Overlap];

    pub fn name(self) -> &'static str {
        match self {
            Test::Allreduce => "allreduce_lat",
            Test::Allgather => "allgather_lat",
            Test::Bcast => "bcast_lat",
            Test::Barrier => "barrier_lat",
            Test::Overlap => "coll_overlap",
        }
    }
}

/// Rank 0: starts the service and the other members, measures, reports.
pub fn run(test: Test, p: &Params) -> Result<Report> {
    if p.procs == 0 {
        return Err(Error::new(ErrorKind::InvalidArgument, "collectives need at least one member"));
    }
    let daemon = PerfDaemon::start()?;
    let oob = daemon.dir().join("oob.sock");
    let mut peers = Vec::new();
    for rank in 1..p.procs {
        let mut cmd = peer_command(test.name(), p, 0)?;
        cmd.env(SOCKET_ENV, daemon.socket())
            .env(OOB_PATH_ENV, &oob)
            .env(OOB_RANK_ENV, rank.to_string())
            .env(OOB_SIZE_ENV, p.procs.to_string())
            .stdin(std::process::Stdio::null());
        peers.push(PeerChild::spawn(cmd)?);
    }
    let (samples, elapsed, overlap) = member(test, p, 0, daemon.socket(), &oob)?;
    for peer in peers {
        peer.finish()?;
    }
    let run = Run { test: test.name(), mode: p.mode.name(), size: p.size, procs: p.procs };
    let mut report = run.report(samples, p.iters, elapsed);
    report.overlap_pct = overlap;
    Ok(report)
}

/// Ranks 1..N (a `perf-peer` process): everything but the test comes from the environment.
pub fn peer(test: Test, p: &Params) -> Result<()> {
    let bad = |what: &str| Error::new(ErrorKind::InvalidArgument, format!("perf-peer: {what} is not set"));
    let socket = std::env::var_os(SOCKET_ENV).map(PathBuf::from).ok_or_else(|| bad(SOCKET_ENV))?;
    let oob = std::env::var_os(OOB_PATH_ENV).map(PathBuf::from).ok_or_else(|| bad(OOB_PATH_ENV))?;
    let rank = std::env::var(OOB_RANK_ENV).ok().and_then(|r| r.parse().ok()).ok_or_else(|| bad(OOB_RANK_ENV))?;
    let procs = std::env::var(OOB_SIZE_ENV).ok().and_then(|r| r.parse().ok()).ok_or_else(|| bad(OOB_SIZE_ENV))?;
    member(test, &Params { procs, ..*p }, rank, &socket, &oob).map(drop)
}

/// The collectives of one mode, behind one shape.
enum Group {
    Offload { domain: Domain, worker: Worker },
    Host(HostComm),
}

/// The CPU of member `rank`'s host side and the CPUs of the workers.
///
/// * Host-only: rank `r` on the `r % n`-th CPU of the affinity.
/// * Offloaded with no more CPUs than members (a 2-core machine): rank `r` and its worker on
///   the `r % n`-th CPU. The worker runs while its host waits for it, so neither waits for
///   a CPU the other holds; left to the scheduler, a worker often ran on the other rank's CPU,
///   and every answer then woke a host across CPUs, often from idle (offloaded 8 B
///   allreduce, 2 members, p50 of 3 alternations: 15.3–29.9 µs, against 13.6–16.7 µs).
/// * Offloaded with more CPUs than members: the last CPU plays the DPU (the workers run
///   there) and each host has a CPU of its own (on a BlueField the workers have the DPU's
///   own cores).
/// * `coll_overlap`, in both modes: only rank 0 computes, and it gets the first CPU to itself;
///   the other members (which only take part in the collectives) share the others, and so do
///   the workers. A member that had to wait for the computing rank's CPU before it could even
///   submit its part would make the collective look serialised behind the compute loop.
fn placement(test: Test, mode: Mode, procs: u32, rank: u32) -> Result<(usize, CpuSet)> {
    let cpus: Vec<usize> = CpuSet::current_affinity()?.iter().collect();
    let n = cpus.len();
    if n == 0 {
        return Err(Error::new(ErrorKind::NotFound, "perf: this process may run on no CPU"));
    }
    let r = rank as usize;
    let (host, workers) = if test == Test::Overlap && n >= 2 {
        let host = if r == 0 { cpus[0] } else { cpus[1 + (r - 1) % (n - 1)] };
        (host, cpus[1..].to_vec())
    } else if mode == Mode::Offload && n > procs as usize {
        (cpus[r % (n - 1)], vec![cpus[n - 1]])
    } else if mode == Mode::Offload {
        (cpus[r % n], vec![cpus[r % n]])
    } else {
        (cpus[r % n], cpus.clone())
    };
    Ok((host, CpuSet::from_cpus(workers)?))
}

/// One member's run: returns rank 0's samples (others' are discarded), the timed run's
/// length and, for `coll_overlap`, the overlap.
fn member(test: Test, p: &Params, rank: u32, socket: &Path, oob: &Path) -> Result<(Samples, Duration, Option<f64>)> {
    let (cpu, worker_cpus) = placement(test, p.mode, p.procs, rank)?;
    let rt = runtime(&[cpu], IdleArg::Adaptive, false)?;
    let p = *p;
    let socket = socket.to_path_buf();
    let oob = oob.to_path_buf();
    let job = rt.spawn_on(cpu, move || async move {
        let dev = Device::open_default()?;
        let elems = (p.size / 8).max(1);
        let size = p.procs as usize;
        let access = Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE;
        // src: elems; dst: size × elems (room for an allgather).
        let mem = dev.alloc(8 * elems * (size + 1), access)?;
        let group = match p.mode {
            Mode::Offload => {
                let svc = Service::builder(&dev).socket_path(&socket).connect().await?;
                let worker = Worker::builder(&svc).plugin("worker_coll").cpuset(worker_cpus).start().await?;
                let rendezvous = UnixOob::connect(&oob, rank, p.procs, PEER_TIMEOUT)?;
                let domain =
                    Domain::builder(rendezvous).worker(&worker).buffer(&mem).timeout(PEER_TIMEOUT).start().await?;
                Group::Offload { domain, worker }
            }
            Mode::Host => {
                let rendezvous = UnixOob::connect(&oob, rank, p.procs, PEER_TIMEOUT)?;
                Group::Host(HostComm::builder(&dev, rendezvous).setup_timeout(PEER_TIMEOUT).build().await?)
            }
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("collectives have no {} mode", other.name()),
                ))
            }
        };
        let mut bufs = Bufs::new(&mem, elems, size, rank)?;
        let out = match &group {
            Group::Offload { domain, .. } => measure(test, domain, &mut bufs, &p, rank).await,
            Group::Host(comm) => measure(test, comm, &mut bufs, &p, rank).await,
        };
        let closed = match group {
            Group::Offload { domain, worker } => {
                let r = domain.stop().await;
                r.and(worker.stop().await)
            }
            Group::Host(comm) => comm.close().await,
        };
        let out = out?;
        closed?;
        Ok::<_, Error>(out)
    })?;
    rt.block_on(job)?
}

struct Bufs {
    src: TypedBuf<f64>,
    dst: TypedBuf<f64>,
    gathered: TypedBuf<f64>,
}

impl Bufs {
    fn new(mem: &Memory, elems: usize, size: usize, rank: u32) -> Result<Bufs> {
        let mut src = TypedBuf::new(mem, 0..elems)?;
        src.write_from(&vec![f64::from(rank); elems])?;
        Ok(Bufs {
            src,
            dst: TypedBuf::new(mem, elems..2 * elems)?,
            gathered: TypedBuf::new(mem, elems..elems + size * elems)?,
        })
    }
}

async fn measure(
    test: Test,
    c: &impl Collectives,
    b: &mut Bufs,
    p: &Params,
    rank: u32,
) -> Result<(Samples, Duration, Option<f64>)> {
    match test {
        Test::Overlap => overlap(c, b, p, rank).await,
        _ => latency(test, c, b, p).await,
    }
}

/// One collective of `test`, awaited (bounded by [`PEER_TIMEOUT`]).
async fn once(test: Test, c: &impl Collectives, b: &mut Bufs) -> Result<()> {
    let Bufs { src, dst, gathered } = b;
    match test {
        Test::Allreduce | Test::Overlap => bounded(c.allreduce(src, dst, ReduceOp::Sum)).await,
        Test::Allgather => bounded(c.allgather(src, gathered)).await,
        Test::Bcast => bounded(c.broadcast(0, dst)).await,
        Test::Barrier => bounded(c.barrier()).await,
    }
}

async fn bounded(fut: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    async_doca::time::timeout(PEER_TIMEOUT, fut)
        .await
        .map_err(|_| Error::new(ErrorKind::TimedOut, "perf: a collective took too long"))?
}

async fn latency(
    test: Test,
    c: &impl Collectives,
    b: &mut Bufs,
    p: &Params,
) -> Result<(Samples, Duration, Option<f64>)> {
    let (samples, elapsed) = timed_rounds(p.warmup, p.iters, 1.0, &mut Rounds { test, c, b }).await?;
    Ok((samples, elapsed, None))
}

/// The collectives of a latency test as the rounds of the timed loop, which lends them the
/// buffers mutably.
struct Rounds<'a, C> {
    test: Test,
    c: &'a C,
    b: &'a mut Bufs,
}

impl<C: Collectives> Round for Rounds<'_, C> {
    fn round(&mut self, _: u64) -> impl std::future::Future<Output = Result<()>> {
        once(self.test, self.c, self.b)
    }
}

/// A fixed amount of work that never yields to the executor: `units` rounds of an LCG.
fn compute(units: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..units {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407));
    }
    x
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

async fn overlap(
    c: &impl Collectives,
    b: &mut Bufs,
    p: &Params,
    rank: u32,
) -> Result<(Samples, Duration, Option<f64>)> {
    // t_coll: the allreduce alone.
    for _ in 0..p.warmup {
        once(Test::Overlap, c, b).await?;
    }
    let rounds = p.iters.max(3) as usize;
    let mut alone = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t0 = Instant::now();
        once(Test::Overlap, c, b).await?;
        alone.push(t0.elapsed());
    }
    let t_coll = median(&mut alone);
    // A compute loop of about t_coll: time a probe, scale. Only rank 0 computes and measures;
    // the others take part in the collectives and wait, so that the computing host has a CPU
    // to itself even on a machine with fewer CPUs than processes (the figure is rank 0's).
    let units = if rank == 0 {
        let probe = 1_000_000u64;
        let t0 = Instant::now();
        black_box(compute(probe));
        let per_unit = t0.elapsed().as_secs_f64() / probe as f64;
        ((t_coll.as_secs_f64() / per_unit.max(1e-12)) as u64).max(1)
    } else {
        0
    };
    let mut comp = Vec::with_capacity(rounds);
    let mut total = Vec::with_capacity(rounds);
    let mut samples = Samples::default();
    let start = Instant::now();
    for _ in 0..rounds {
        let t0 = Instant::now();
        black_box(compute(units));
        comp.push(t0.elapsed());
        // Every round starts together on all members (a barrier), so that waiting for a
        // member that is late is not counted as lost overlap.
        bounded(c.barrier()).await?;
        // Submitted when called; the compute loop runs while the collective is in flight.
        let t0 = Instant::now();
        let Bufs { src, dst, .. } = &mut *b;
        let fut = c.allreduce(src, dst, ReduceOp::Sum);
        black_box(compute(units));
        bounded(fut).await?;
        let d = t0.elapsed();
        samples.push_ns(d.as_nanos() as f64);
        total.push(d);
    }
    let elapsed = start.elapsed();
    let (t_comp, t_total) = (median(&mut comp), median(&mut total));
    let pct = 100.0 * (1.0 - (t_total.as_secs_f64() - t_comp.as_secs_f64()) / t_coll.as_secs_f64().max(1e-12));
    Ok((samples, elapsed, Some(pct.clamp(0.0, 100.0))))
}
