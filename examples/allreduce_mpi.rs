//! Every collective, offloaded to UROM workers and host-only, in a job started by `mpirun`.
//!
//! ```text
//! cargo build --release --features mpi --example allreduce_mpi
//! mpirun -n 4 target/release/examples/allreduce_mpi [--sizes 1,64,4096,65536] [--iters 10]
//! ```
//! (`scripts/mpi.sh` installs Open MPI, builds this and runs it with 4 ranks.)
//!
//! MPI is the bootstrap, as in NVIDIA's UROM samples: each rank is an MPI process, and the
//! out-of-band allgathers that start the UROM domain and the host-only communicator run over
//! MPI ([`MpiOob`]: `MPI_Iallgather` on a duplicate of `MPI_COMM_WORLD`). Rank 0 finds the UROM
//! service, or starts a private one with the sample plugins, and tells the others where it is
//! with an MPI broadcast. Then every rank starts a worker with the `worker_coll` plugin, a
//! domain with its registered memory, and a [`HostComm`] over RDMA, and runs, in both modes,
//! `--iters` rounds (default 10) of: allreduce (sum) at every size of `--sizes` (elements of
//! f64), then allgather, broadcast (the root moves every round), reduce-scatter (sum) at 1024
//! elements per rank, and barrier. Every element of every result is checked on every rank
//! against what it computes locally. Rank 0 prints its latencies (median and p99 per
//! collective and size, both modes). The ranks agree on the outcome with a final MPI
//! reduction: the job exits 0 only when every rank verified everything.
//!
//! MPI is initialized with `MPI_THREAD_SERIALIZED`: the bootstrap calls MPI from each rank's
//! executor thread while the main thread waits in `block_on`, never both at once.

use std::process::ExitCode;
use std::time::Duration;

use async_doca::coll::HostComm;
use async_doca::oob::MpiOob;
use async_doca::urom::{Domain, Worker};
use async_doca::{Access, CpuSet, Device, Error, ErrorKind, Result, Runtime};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Threading;

#[path = "common/coll.rs"]
mod coll;
#[path = "common/urom.rs"]
mod urom;
use coll::{one, Coll};
use urom::{median_p99, mismatch, step, us, ServiceAddr, UromService};

const NAME: &str = "allreduce_mpi";
const DEFAULT_SIZES: &[usize] = &[1, 64, 4096, 65_536];
/// Elements per rank of allgather, broadcast and reduce-scatter.
const BLOCK: usize = 1024;
/// The longest any one step may take, including waiting for the other ranks.
const LIMIT: Duration = Duration::from_secs(60);

#[derive(Clone)]
struct Settings {
    iters: usize,
    sizes: Vec<usize>,
}

/// Latencies of one collective at one size, per mode.
struct Row {
    coll: Coll,
    count: usize,
    offload: Vec<Duration>,
    host: Vec<Duration>,
}

fn main() -> ExitCode {
    // First thing: when started as the private service, run only that (no thread exists yet,
    // and MPI is not initialized: the service is no MPI process).
    if let Some(code) = urom::serve_if_asked(NAME) {
        return code;
    }
    let Some((universe, level)) = mpi::initialize_with_threading(Threading::Serialized) else {
        eprintln!("{NAME}: MPI was already initialized");
        return ExitCode::FAILURE;
    };
    if matches!(level, Threading::Single | Threading::Funneled) {
        eprintln!("{NAME}: this MPI library offers {level:?} threading only; the bootstrap needs Serialized");
        return ExitCode::FAILURE;
    }
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let outcome = job(&world);
    if let Err(e) = &outcome {
        eprintln!("{NAME} (rank {rank}): {e}");
    }
    // Every rank says whether it verified everything; the job succeeds only if all did.
    let mine = u32::from(outcome.is_ok());
    let mut all = 0u32;
    world.all_reduce_into(&mine, &mut all, SystemOperation::min());
    if rank == 0 && all == 1 {
        if let Ok(Some(rows)) = outcome {
            print_table(size, rows);
        }
    }
    // `universe` drops here: MPI_Finalize, after every MpiOob (inside the runtime) is gone.
    if all == 1 {
        ExitCode::SUCCESS
    } else {
        if rank == 0 {
            eprintln!("{NAME}: a rank failed (its message is above)");
        }
        ExitCode::FAILURE
    }
}

/// One rank's whole part; rank 0 gets its latencies back.
fn job(world: &SimpleCommunicator) -> Result<Option<Vec<Row>>> {
    let settings = parse_args()?;
    let rank = world.rank();
    // Declared before the runtime, so dropped after it: the private service outlives the
    // workers it runs.
    let service = if rank == 0 { Some(UromService::find_or_start(NAME)) } else { None };
    let addr = share_service(world, service.as_ref())?;
    if let Some(Ok(s)) = &service {
        println!("{NAME}: {} ranks; {}", world.size(), s.describe());
    }
    let rows = member(rank as u32, world.size() as u32, &settings, &addr)?;
    if let Some(s) = service {
        s?.stop()?;
    }
    Ok((rank == 0).then_some(rows))
}

/// Rank 0 broadcasts where the service is (its socket path; empty: the service file names
/// it), or that it could not find or start one.
fn share_service(world: &SimpleCommunicator, service: Option<&Result<UromService>>) -> Result<ServiceAddr> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    const FAILED: u64 = u64::MAX;
    let root = world.process_at_rank(0);
    let mut path: Vec<u8> = Vec::new();
    let mut len = FAILED;
    if let Some(Ok(s)) = service {
        path = s.socket().map(|p| p.as_os_str().as_bytes().to_vec()).unwrap_or_default();
        len = path.len() as u64;
    }
    root.broadcast_into(&mut len);
    if len == FAILED {
        return Err(match service {
            Some(Err(e)) => e.clone(),
            _ => Error::new(ErrorKind::NotFound, "rank 0 found no UROM service and could not start one"),
        });
    }
    path.resize(len as usize, 0);
    root.broadcast_into(&mut path[..]);
    let socket = (!path.is_empty()).then(|| std::path::PathBuf::from(std::ffi::OsString::from_vec(path)));
    Ok(ServiceAddr { socket })
}

fn usage(why: &str) -> Error {
    Error::new(ErrorKind::InvalidArgument, format!("{why}; usage: {NAME} [--sizes A,B,..] [--iters K]"))
}

fn parse_args() -> Result<Settings> {
    let mut s = Settings { iters: 10, sizes: DEFAULT_SIZES.to_vec() };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| usage(&format!("{a} needs a value")));
        match a.as_str() {
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

/// One rank's part, on a one-CPU runtime: returns its latencies.
fn member(rank: u32, size: u32, s: &Settings, addr: &ServiceAddr) -> Result<Vec<Row>> {
    let cpus: Vec<usize> = CpuSet::current_affinity()?.iter().collect();
    let cpu = *cpus.get(rank as usize % cpus.len().max(1)).ok_or_else(|| mismatch("the process may run on no CPU"))?;
    let rt = Runtime::builder().cpus(CpuSet::from_cpus([cpu])?).build()?;
    // Sources and destinations: the largest allreduce, or a full allgather / reduce-scatter.
    let max = s.sizes.iter().copied().max().unwrap_or(1).max(BLOCK * size as usize);
    let (s, addr) = (s.clone(), addr.clone());
    let job = rt.spawn_on(cpu, move || async move {
        let s = &s;
        let dev = Device::open_default()?;
        let svc = addr.connect(&dev).await?;
        let worker = step("start the worker", LIMIT, Worker::builder(&svc).plugin("worker_coll").start()).await?;
        // The workers read sources and write destinations remotely.
        let access = Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE;
        let mem = dev.alloc(2 * max * 8, access)?;
        // The bootstraps: MPI on this executor thread (MPI_Comm_dup, then MPI_Iallgather
        // tested from the progress engine).
        let oob = MpiOob::new(&SimpleCommunicator::world())?;
        let domain =
            step("start the domain", LIMIT, Domain::builder(oob).worker(&worker).buffer(&mem).timeout(LIMIT).start())
                .await?;
        let oob = MpiOob::new(&SimpleCommunicator::world())?;
        let comm = step("build the host communicator", LIMIT, HostComm::builder(&dev, oob).build()).await?;

        let mut plan: Vec<(Coll, usize)> = s.sizes.iter().map(|&n| (Coll::Allreduce, n)).collect();
        plan.extend([(Coll::Allgather, BLOCK), (Coll::Broadcast, BLOCK), (Coll::ReduceScatter, BLOCK)]);
        plan.push((Coll::Barrier, 0));
        let mut rows = Vec::new();
        for (coll, count) in plan {
            let mut row = Row { coll, count, offload: Vec::new(), host: Vec::new() };
            for offload in [true, false] {
                for iter in 0..s.iters {
                    let took = if offload {
                        one(&domain, coll, &mem, max, rank, size, count, iter).await
                    } else {
                        one(&comm, coll, &mem, max, rank, size, count, iter).await
                    };
                    let took = took.map_err(|e| {
                        let mode = if offload { "offloaded" } else { "host-only" };
                        e.context_prefix(&format!("{mode} {} of {count} elements, round {iter}", coll.name()))
                    })?;
                    if offload { &mut row.offload } else { &mut row.host }.push(took);
                }
            }
            rows.push(row);
        }
        step("close the host communicator", LIMIT, comm.close()).await?;
        step("stop the domain", LIMIT, domain.stop()).await?;
        step("stop the worker", LIMIT, worker.stop()).await?;
        Ok::<_, Error>(rows)
    })?;
    rt.block_on(job)?
}

fn print_table(size: i32, rows: Vec<Row>) {
    println!("{NAME}: rank 0's latencies over {size} ranks (every result verified on every rank)");
    println!(
        "{:<15} {:>9} {:>12} {:>12} {:>12} {:>12} {:>13}",
        "collective", "elements", "offload p50", "offload p99", "host p50", "host p99", "offload/host"
    );
    for mut r in rows {
        let (op50, op99) = median_p99(&mut r.offload);
        let (hp50, hp99) = median_p99(&mut r.host);
        let ratio = op50.as_secs_f64() / hp50.as_secs_f64().max(1e-9);
        let count = if r.coll == Coll::Barrier { "-".to_string() } else { r.count.to_string() };
        println!(
            "{:<15} {:>9} {:>12} {:>12} {:>12} {:>12} {:>12.2}x",
            r.coll.name(),
            count,
            us(op50),
            us(op99),
            us(hp50),
            us(hp99),
            ratio
        );
    }
}
