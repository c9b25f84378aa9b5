//! Allreduce offloaded to UROM workers, side by side with the host-only baseline.
//!
//! `--procs N` processes (default 4; this one is rank 0 and starts the others) each start a
//! UROM worker with the `worker_coll` plugin and form a UROM domain with their registered
//! memory (`UnixOob` rendezvous on a Unix socket), and also a host-only communicator
//! (`HostComm`: the same algorithms run by the processes themselves over RDMA). Then, for every
//! size of `--sizes` (elements of f64; default 1, 8, 64, 512, 4096, 32768, 262144), each
//! process runs `--iters` allreduce sums (default 20) in each mode, checks every element of
//! every result against the sum it computes locally, and rank 0 prints the median and p99
//! latency per size for both modes. Exits 0 only when every result on every process was
//! right and every process exited 0; every wait is bounded, so a dead process fails the run
//! instead of hanging it.
//!
//! The UROM service is the one running (`DOCA_UROM_SERVICE_FILE`, or `async-doca
//! urom-service` on its default socket); when there is none, rank 0 starts a private one with
//! the sample plugins built in and stops it at the end.
//!
//! ```text
//! cargo run --release --example allreduce [-- --procs 4 --sizes 1,1024,65536 --iters 20]
//! ```
//!
//! On this project's 2-core test machines, four processes and their four workers share two
//! CPUs: the figures say more about the scheduler than about the offload.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use async_doca::coll::HostComm;
use async_doca::oob::{UnixOob, OOB_PATH_ENV, OOB_RANK_ENV, OOB_SIZE_ENV};
use async_doca::urom::{Domain, Worker};
use async_doca::{Access, CpuSet, Device, Error, ErrorKind, Result, Runtime};

#[path = "common/coll.rs"]
mod coll;
#[path = "common/urom.rs"]
mod urom;
use coll::{one, Coll};
use urom::{median_p99, mismatch, step, us, Peer, ServiceAddr, UromService};

const NAME: &str = "allreduce";
/// Set in the other processes: the run's settings, `procs;iters;size,size,...`.
const SETTINGS_ENV: &str = "ASYNC_DOCA_ALLREDUCE_SETTINGS";
/// The service's socket, for the other processes; absent when DOCA finds it (service file).
const SOCKET_ENV: &str = "ASYNC_DOCA_ALLREDUCE_SOCKET";
/// The host-only communicator's rendezvous (the domain's is `OOB_PATH_ENV`).
const HOST_OOB_ENV: &str = "ASYNC_DOCA_ALLREDUCE_HOST_OOB";
const DEFAULT_SIZES: &[usize] = &[1, 8, 64, 512, 4096, 32_768, 262_144];
/// The longest any one step may take, including waiting for the other processes.
const LIMIT: Duration = Duration::from_secs(60);

#[derive(Clone)]
struct Settings {
    procs: u32,
    iters: usize,
    sizes: Vec<usize>,
}

impl Settings {
    fn encode(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(usize::to_string).collect();
        format!("{};{};{}", self.procs, self.iters, sizes.join(","))
    }

    fn decode(s: &str) -> Option<Settings> {
        let mut it = s.split(';');
        let procs = it.next()?.parse().ok()?;
        let iters = it.next()?.parse().ok()?;
        let sizes = it.next()?.split(',').map(|n| n.parse().ok()).collect::<Option<Vec<usize>>>()?;
        Some(Settings { procs, iters, sizes })
    }
}

/// Latencies of one size, per mode.
struct SizeResult {
    count: usize,
    offload: Vec<Duration>,
    host: Vec<Duration>,
}

fn main() -> ExitCode {
    // First thing: when started as the private service, run only that (no thread exists yet).
    if let Some(code) = urom::serve_if_asked(NAME) {
        return code;
    }
    let (side, result) = match std::env::var(SETTINGS_ENV) {
        Ok(s) => ("other rank", other(&s)),
        Err(_) => ("rank 0", first()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME} ({side}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> Error {
    Error::new(ErrorKind::InvalidArgument, format!("{why}; usage: {NAME} [--procs N] [--sizes A,B,..] [--iters K]"))
}

fn parse_args() -> Result<Settings> {
    let mut s = Settings { procs: 4, iters: 20, sizes: DEFAULT_SIZES.to_vec() };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| usage(&format!("{a} needs a value")));
        match a.as_str() {
            "--procs" => {
                let v = value()?;
                s.procs = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=64).contains(n))
                    .ok_or_else(|| usage(&format!("bad --procs {v:?}")))?;
            }
            "--iters" => {
                let v = value()?;
                s.iters = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| usage(&format!("bad --iters {v:?}")))?;
            }
            "--sizes" => {
                let v = value()?;
                s.sizes = v
                    .split(',')
                    .map(|n| n.parse().ok().filter(|n| *n > 0))
                    .collect::<Option<Vec<usize>>>()
                    .ok_or_else(|| usage(&format!("bad --sizes {v:?}")))?;
            }
            other => return Err(usage(&format!("unknown argument {other:?}"))),
        }
    }
    Ok(s)
}

/// Rank 0: finds or starts the service, starts the other ranks, runs its part, prints.
fn first() -> Result<()> {
    let settings = parse_args()?;
    // Declared before the peers, so dropped after them: on failure the peers are killed
    // first, then the private service stopped.
    let service = UromService::find_or_start(NAME)?;
    println!("{NAME}: {} processes; {}", settings.procs, service.describe());
    let domain_oob = service.dir().join("domain.sock");
    let host_oob = service.dir().join("host.sock");
    let exe = std::env::current_exe().map_err(|e| Error::os(e, "find this program's executable"))?;
    let mut peers = Vec::new();
    for rank in 1..settings.procs {
        let mut cmd = Command::new(&exe);
        cmd.env(SETTINGS_ENV, settings.encode())
            .env(OOB_PATH_ENV, &domain_oob)
            .env(OOB_RANK_ENV, rank.to_string())
            .env(OOB_SIZE_ENV, settings.procs.to_string())
            .env(HOST_OOB_ENV, &host_oob)
            .env_remove(SOCKET_ENV);
        if let Some(s) = service.socket() {
            cmd.env(SOCKET_ENV, s);
        }
        peers.push(Peer::spawn(cmd)?);
    }
    let results = match member(0, &settings, &service.addr(), &domain_oob, &host_oob) {
        Ok(r) => r,
        Err(e) => {
            // The cause is often on another process: say how those ended that have.
            let ended: Vec<String> = peers
                .iter_mut()
                .enumerate()
                .filter_map(|(i, p)| p.exited().map(|s| format!("rank {}: {s}", i + 1)))
                .collect();
            return Err(if ended.is_empty() { e } else { e.context_prefix(&format!("({})", ended.join("; "))) });
        }
    };
    for (i, p) in peers.iter_mut().enumerate() {
        p.finish(LIMIT).map_err(|e| e.context_prefix(&format!("rank {}", i + 1)))?;
    }
    service.stop()?;
    println!(
        "{:>9} {:>12} {:>12} {:>12} {:>12} {:>14}",
        "elements", "offload p50", "offload p99", "host p50", "host p99", "offload/host"
    );
    for mut r in results {
        let (op50, op99) = median_p99(&mut r.offload);
        let (hp50, hp99) = median_p99(&mut r.host);
        let ratio = op50.as_secs_f64() / hp50.as_secs_f64().max(1e-9);
        println!("{:>9} {:>12} {:>12} {:>12} {:>12} {:>13.2}x", r.count, us(op50), us(op99), us(hp50), us(hp99), ratio);
    }
    println!(
        "{NAME}: every result on every process verified ({} sizes × {} iterations × 2 modes)",
        settings.sizes.len(),
        settings.iters
    );
    Ok(())
}

/// Ranks 1..N: everything comes from the environment rank 0 set.
fn other(settings: &str) -> Result<()> {
    let bad = |what: &str| Error::new(ErrorKind::InvalidArgument, format!("{what} (set by rank 0)"));
    let settings = Settings::decode(settings).ok_or_else(|| bad(&format!("{SETTINGS_ENV} is malformed")))?;
    let rank: u32 = std::env::var(OOB_RANK_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|r| (1..settings.procs).contains(r))
        .ok_or_else(|| bad(&format!("{OOB_RANK_ENV} is not a rank")))?;
    let path = |var: &str| std::env::var_os(var).map(PathBuf::from).ok_or_else(|| bad(&format!("{var} is not set")));
    let addr = ServiceAddr { socket: std::env::var_os(SOCKET_ENV).map(PathBuf::from) };
    member(rank, &settings, &addr, &path(OOB_PATH_ENV)?, &path(HOST_OOB_ENV)?).map(drop)
}

/// One process's part, on a one-CPU runtime: returns the latencies per size.
fn member(rank: u32, s: &Settings, addr: &ServiceAddr, domain_oob: &Path, host_oob: &Path) -> Result<Vec<SizeResult>> {
    let cpus: Vec<usize> = CpuSet::current_affinity()?.iter().collect();
    let cpu = *cpus.get(rank as usize % cpus.len().max(1)).ok_or_else(|| mismatch("the process may run on no CPU"))?;
    let rt = Runtime::builder().cpus(CpuSet::from_cpus([cpu])?).build()?;
    let max = s.sizes.iter().copied().max().unwrap_or(1);
    let (s, addr, domain_oob, host_oob) = (s.clone(), addr.clone(), domain_oob.to_owned(), host_oob.to_owned());
    // On the executor pinned to `cpu` rather than in block_on's (unpinned, never spinning)
    // thread: latency-critical loops belong on a worker (see `Runtime::block_on`).
    let job = rt.spawn_on(cpu, move || async move {
        let (s, domain_oob, host_oob) = (&s, &domain_oob, &host_oob);
        let dev = Device::open_default()?;
        let svc = addr.connect(&dev).await?;
        let worker = step("start the worker", LIMIT, Worker::builder(&svc).plugin("worker_coll").start()).await?;
        // Sources and destinations of both modes: the workers read and write them remotely.
        let access = Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE;
        let mem = dev.alloc(2 * max * 8, access)?;
        // Both rendezvous block until every process arrived (bounded by LIMIT).
        let oob =
            UnixOob::connect(domain_oob, rank, s.procs, LIMIT).map_err(|e| e.context_prefix("meet the others"))?;
        let domain =
            step("start the domain", LIMIT, Domain::builder(oob).worker(&worker).buffer(&mem).timeout(LIMIT).start())
                .await?;
        let oob = UnixOob::connect(host_oob, rank, s.procs, LIMIT).map_err(|e| e.context_prefix("meet the others"))?;
        let comm = step("build the host communicator", LIMIT, HostComm::builder(&dev, oob).build()).await?;

        let mut results = Vec::new();
        for &count in &s.sizes {
            let mut r = SizeResult { count, offload: Vec::new(), host: Vec::new() };
            for offload in [true, false] {
                for iter in 0..s.iters {
                    let times = if offload { &mut r.offload } else { &mut r.host };
                    let took = if offload {
                        one(&domain, Coll::Allreduce, &mem, max, rank, s.procs, count, iter).await
                    } else {
                        one(&comm, Coll::Allreduce, &mem, max, rank, s.procs, count, iter).await
                    };
                    let took = took.map_err(|e| {
                        let mode = if offload { "offloaded" } else { "host-only" };
                        e.context_prefix(&format!("{mode} allreduce of {count} elements, iteration {iter}"))
                    })?;
                    times.push(took);
                }
            }
            results.push(r);
        }
        step("close the host communicator", LIMIT, comm.close()).await?;
        step("stop the domain", LIMIT, domain.stop()).await?;
        step("stop the worker", LIMIT, worker.stop()).await?;
        Ok::<_, Error>(results)
    })?;
    rt.block_on(job)?
}
