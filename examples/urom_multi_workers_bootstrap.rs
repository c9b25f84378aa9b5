//! Several UROM workers of one application, driven from several threads: the async-doca
//! version of NVIDIA's `urom_multi_workers_bootstrap` sample.
//!
//! Four threads each build their own one-CPU runtime (CPU `rank % ncpus` of the process's
//! affinity), open their own connection to the UROM service and start one `worker_graph`
//! worker with the id convention of DOCA's sample, `task_id << 32 | rank` (the task id is this
//! process's pid). The workers form two groups by id parity: even ids in one group, odd ids
//! in the other (the group id also carries the task id, so that two runs sharing one service
//! do not see each other's workers). Each thread sends a few `Loopback` commands and checks
//! that every value comes back. All threads then meet at a barrier, ask the service which
//! workers its group holds (`workers_by_gid`) and check that it is exactly the two expected
//! ids; they meet again and stop their workers. The program exits 0 only if every check
//! passed, and prints the ids, groups and command round-trip times.
//!
//! The service is the one running (`DOCA_UROM_SERVICE_FILE`, or `async-doca urom-service` on
//! its default socket); when there is none the example starts a private one for its own run
//! and stops it at the end.
//!
//! ```text
//! cargo run --release --example urom_multi_workers_bootstrap
//! ```

use std::cell::Cell;
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use async_doca::urom::plugin::samples::graph;
use async_doca::urom::Worker;
use async_doca::{CpuSet, Device, Error, ErrorKind, Result, Runtime};

#[path = "common/urom.rs"]
mod urom;
use urom::{mismatch, step, us, ServiceAddr, UromService};

const NAME: &str = "urom_multi_workers_bootstrap";
/// Worker contexts, one per thread.
const WORKERS: u32 = 4;
/// Loopback commands per worker.
const COMMANDS: u64 = 8;
/// The longest any one step may take: a dead service or worker makes the example fail.
const LIMIT: Duration = Duration::from_secs(10);
/// How many times the threads meet.
const MEETINGS: u32 = 2;

fn main() -> ExitCode {
    // First thing: when started as the private service, run only that (no thread exists yet).
    if let Some(code) = urom::serve_if_asked(NAME) {
        return code;
    }
    let service = match UromService::find_or_start(NAME) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{NAME}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{NAME}: {}", service.describe());
    let result = run(&service);
    let stopped = service.stop();
    match result.and_then(|reports| stopped.map(|()| reports)) {
        Ok(reports) => {
            print_summary(&reports);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{NAME}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What one thread saw.
struct Report {
    rank: u32,
    cpu: usize,
    id: u64,
    gid: u32,
    group: Vec<u64>,
    rtts: Vec<Duration>,
}

fn run(service: &UromService) -> Result<Vec<Report>> {
    let cpus: Vec<usize> = CpuSet::current_affinity()?.iter().collect();
    if cpus.is_empty() {
        return Err(Error::new(ErrorKind::InvalidArgument, "the process may run on no CPU"));
    }
    let task_id = u64::from(std::process::id());
    let barrier = Arc::new(Barrier::new(WORKERS as usize));
    let mut threads = Vec::new();
    for rank in 0..WORKERS {
        let cpu = cpus[rank as usize % cpus.len()];
        let addr = service.addr();
        // Made here so that a thread that fails before its work starts still attends (drop).
        let meetings = Meetings { barrier: barrier.clone(), attended: Cell::new(0) };
        let thread = std::thread::Builder::new()
            .name(format!("urom-rank{rank}"))
            .spawn(move || -> Result<Report> {
                // The work runs on the runtime's worker thread, pinned to `cpu`; this thread
                // only waits for it.
                let rt = Runtime::builder().cpus(CpuSet::from_cpus([cpu])?).build()?;
                let job = rt.spawn_on(cpu, move || member(rank, cpu, task_id, addr, meetings))?;
                rt.block_on(job)?
            })
            // Threads already started would wait at the barrier for ever: returning ends the
            // process, and them with it.
            .map_err(|e| Error::os(e, "start a thread"))?;
        threads.push(thread);
    }
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for (rank, t) in threads.into_iter().enumerate() {
        match t.join() {
            Ok(Ok(r)) => reports.push(r),
            // The message without the kind, which the combined error adds once.
            Ok(Err(e)) if e.code().is_none() => failures.push(format!("rank {rank}: {}", e.context())),
            Ok(Err(e)) => failures.push(format!("rank {rank}: {e}")),
            Err(_) => failures.push(format!("rank {rank}: the thread panicked")),
        }
    }
    if failures.is_empty() {
        Ok(reports)
    } else {
        Err(Error::new(
            ErrorKind::Other,
            format!("{} of {WORKERS} threads failed:\n  {}", failures.len(), failures.join("\n  ")),
        ))
    }
}

/// The group of worker `id`: its parity, tagged with the task id so that concurrent runs on a
/// shared service keep apart (pids fit in 22 bits, so the shift loses nothing).
fn group_of(task_id: u64, id: u64) -> u32 {
    ((task_id << 1) | (id & 1)) as u32
}

fn worker_id(task_id: u64, rank: u32) -> u64 {
    (task_id << 32) | u64::from(rank)
}

/// The barrier meetings of one thread. Dropping it (an early return on failure) attends the
/// meetings it did not attend yet, so a failing thread never leaves the others waiting.
struct Meetings {
    barrier: Arc<Barrier>,
    attended: Cell<u32>,
}

impl Meetings {
    fn meet(&self) {
        self.barrier.wait();
        self.attended.set(self.attended.get() + 1);
    }
}

impl Drop for Meetings {
    fn drop(&mut self) {
        while self.attended.get() < MEETINGS {
            self.meet();
        }
    }
}

/// One thread's worker: start, loopbacks, meet, check the group, meet, stop.
async fn member(rank: u32, cpu: usize, task_id: u64, addr: ServiceAddr, meetings: Meetings) -> Result<Report> {
    let id = worker_id(task_id, rank);
    let gid = group_of(task_id, id);

    let dev = Device::open_default()?;
    let svc = addr.connect(&dev).await?;
    let plugin = svc.plugin(graph::PLUGIN_NAME)?.id;
    let worker =
        step("start the worker", LIMIT, Worker::builder(&svc).id(id).gid(gid).plugin_ids(plugin).start()).await?;
    if worker.id() != id || worker.gid() != gid {
        return Err(mismatch(format!("asked for worker {id:#x} in group {gid}, got {worker:?}")));
    }
    let mut rtts = Vec::new();
    for i in 0..COMMANDS {
        // A value no other worker or command uses, so a mixed-up answer shows.
        let value = id ^ (i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let started = Instant::now();
        let reply =
            step(&format!("loopback {i}"), LIMIT, worker.command(plugin, &graph::Cmd::Loopback { value }.encode()))
                .await?;
        rtts.push(started.elapsed());
        match graph::Notif::decode(&reply) {
            Ok(graph::Notif::Loopback { value: got }) if got == value => {}
            other => return Err(mismatch(format!("loopback {i} of {value:#x} answered {other:?}"))),
        }
    }

    // Every worker is up: the groups are complete.
    meetings.meet();
    let mut group = step("workers_by_gid", LIMIT, svc.workers_by_gid(gid)).await?;
    group.sort_unstable();
    let mut expected: Vec<u64> = (0..WORKERS).map(|r| worker_id(task_id, r)).filter(|w| w & 1 == id & 1).collect();
    expected.sort_unstable();
    if group != expected {
        return Err(mismatch(format!(
            "group {gid} holds workers {}, expected {}",
            hex_ids(&group),
            hex_ids(&expected)
        )));
    }

    // Every thread checked its group before any worker goes away.
    meetings.meet();
    step("stop the worker", LIMIT, worker.stop()).await?;
    Ok(Report { rank, cpu, id, gid, group, rtts })
}

/// `[0x1, 0x2]`.
fn hex_ids(ids: &[u64]) -> String {
    let ids: Vec<String> = ids.iter().map(|w| format!("{w:#x}")).collect();
    format!("[{}]", ids.join(", "))
}

fn print_summary(reports: &[Report]) {
    println!("{NAME}: {WORKERS} workers of task {}, {COMMANDS} loopbacks each, all verified", std::process::id());
    for r in reports {
        let mut rtts = r.rtts.clone();
        let (median, _) = urom::median_p99(&mut rtts);
        let (min, max) = (rtts.first().copied().unwrap_or_default(), rtts.last().copied().unwrap_or_default());
        let parity = if r.id & 1 == 0 { "even" } else { "odd" };
        println!(
            "  rank {} (cpu {}): worker {:#x}, group {} ({parity}) = {}; round trip min {} median {} max {}",
            r.rank,
            r.cpu,
            r.id,
            r.gid,
            hex_ids(&r.group),
            us(min),
            us(median),
            us(max)
        );
    }
}
