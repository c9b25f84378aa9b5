//! Ping-pong between two host processes through their UROM workers: the async-doca version of
//! NVIDIA's `urom_ping_pong` sample.
//!
//! The program starts itself again as the second process (rank 1; its rank and the rest of
//! its setup travel in environment variables). Each process starts one `worker_sandbox`
//! worker on the same UROM service, with the id convention of DOCA's sample,
//! `task_id << 32 | rank` (the task id is the first process's pid). The two processes then
//! form a UROM domain, meeting at a Unix socket (`UnixOob`), through which the workers learn
//! each other's addresses. Then `--iters N` rounds (default 1000): rank 0's worker sends
//! "ping i" under tag 1 to rank 1's worker and receives "pong i" under tag 2; rank 1 does the
//! mirror. Every message is checked. Rank 0 prints the median and 99th percentile round trip
//! (a send and a receive command, host to worker to worker and back). The program exits 0
//! only if every round was verified and the second process exited 0. Every wait is bounded,
//! so a dead peer makes it fail instead of hang.
//!
//! The service is the one running (`DOCA_UROM_SERVICE_FILE`, or `async-doca urom-service` on
//! its default socket); when there is none the first process starts a private one, which both
//! processes use, and stops it at the end.
//!
//! ```text
//! cargo run --release --example urom_ping_pong [-- --iters N]
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use async_doca::oob::{UnixOob, OOB_PATH_ENV, OOB_RANK_ENV, OOB_SIZE_ENV};
use async_doca::urom::plugin::samples::sandbox;
use async_doca::urom::{Domain, Worker};
use async_doca::{CpuSet, Device, Error, ErrorKind, Result, Runtime};

#[path = "common/urom.rs"]
mod urom;
use urom::{median_p99, mismatch, step, us, Peer, ServiceAddr, UromService};

const NAME: &str = "urom_ping_pong";
/// Set in the second process only: the task id (the first process's pid).
const TASK_ENV: &str = "ASYNC_DOCA_PING_PONG_TASK";
/// The service's socket, for the second process; absent when DOCA finds it (service file).
const SOCKET_ENV: &str = "ASYNC_DOCA_PING_PONG_SOCKET";
/// The number of rounds, for the second process.
const ITERS_ENV: &str = "ASYNC_DOCA_PING_PONG_ITERS";
const DEFAULT_ITERS: u64 = 1000;
/// The longest any one step may take, including waiting for the other process.
const LIMIT: Duration = Duration::from_secs(10);
const PING_TAG: u64 = 1;
const PONG_TAG: u64 = 2;

fn main() -> ExitCode {
    // First thing: when started as the private service, run only that (no thread exists yet).
    if let Some(code) = urom::serve_if_asked(NAME) {
        return code;
    }
    let (side, result) = match std::env::var(TASK_ENV) {
        Ok(task) => ("rank 1", second(&task).map(|()| None)),
        Err(_) => ("rank 0", first().map(Some)),
    };
    match result {
        Ok(line) => {
            if let Some(line) = line {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{NAME} ({side}): {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> Error {
    Error::new(ErrorKind::InvalidArgument, format!("{why}; usage: {NAME} [--iters N]"))
}

fn parse_iters() -> Result<u64> {
    let mut args = std::env::args().skip(1);
    let mut iters = DEFAULT_ITERS;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iters" => {
                let n = args.next().ok_or_else(|| usage("--iters needs a number"))?;
                iters = n.parse().ok().filter(|n| *n > 0).ok_or_else(|| usage(&format!("bad --iters {n:?}")))?;
            }
            other => return Err(usage(&format!("unknown argument {other:?}"))),
        }
    }
    Ok(iters)
}

/// Rank 0: finds or starts the service, starts rank 1, plays its part, checks rank 1's exit.
fn first() -> Result<String> {
    let iters = parse_iters()?;
    // Declared before the peer, so dropped after it: on failure the peer is killed first,
    // then the private service stopped.
    let service = UromService::find_or_start(NAME)?;
    println!("{NAME}: {}", service.describe());
    let task_id = u64::from(std::process::id());
    let oob = service.dir().join("oob.sock");

    let exe = std::env::current_exe().map_err(|e| Error::os(e, "find this program's executable"))?;
    let mut cmd = Command::new(exe);
    cmd.env(TASK_ENV, task_id.to_string())
        .env(ITERS_ENV, iters.to_string())
        .env(OOB_PATH_ENV, &oob)
        .env(OOB_RANK_ENV, "1")
        .env(OOB_SIZE_ENV, "2")
        .env_remove(SOCKET_ENV);
    if let Some(s) = service.socket() {
        cmd.env(SOCKET_ENV, s);
    }
    let mut peer = Peer::spawn(cmd)?;

    let rtts = match member(0, task_id, iters, &service.addr(), &oob) {
        Ok(r) => r,
        Err(e) => {
            // The cause is often on the other side: say how it ended, if it has.
            return Err(match peer.exited() {
                Some(status) => e.context_prefix(&format!("the peer process ended ({status})")),
                None => e,
            });
        }
    };
    peer.finish(LIMIT)?;
    service.stop()?;
    let mut sorted = rtts;
    let (median, p99) = median_p99(&mut sorted);
    let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
    Ok(format!(
        "{NAME}: {iters} rounds verified; round trip median {} p99 {} (min {}, max {})",
        us(median),
        us(p99),
        us(min),
        us(max)
    ))
}

/// Rank 1: everything it needs comes from the environment rank 0 set.
fn second(task: &str) -> Result<()> {
    let bad = |what: &str| Error::new(ErrorKind::InvalidArgument, format!("{what} (set by rank 0)"));
    let task_id: u64 = task.parse().map_err(|_| bad(&format!("{TASK_ENV} is not a number")))?;
    let iters: u64 = std::env::var(ITERS_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| bad(&format!("{ITERS_ENV} is not set to a number")))?;
    let rank: u32 = std::env::var(OOB_RANK_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|r| *r == 1)
        .ok_or_else(|| bad(&format!("{OOB_RANK_ENV} is not 1")))?;
    let oob =
        std::env::var_os(OOB_PATH_ENV).map(PathBuf::from).ok_or_else(|| bad(&format!("{OOB_PATH_ENV} is not set")))?;
    let addr = ServiceAddr { socket: std::env::var_os(SOCKET_ENV).map(PathBuf::from) };
    member(rank, task_id, iters, &addr, &oob).map(drop)
}

/// One process's part, on a one-CPU runtime: returns the round-trip times (rank 0).
fn member(rank: u32, task_id: u64, iters: u64, addr: &ServiceAddr, oob: &Path) -> Result<Vec<Duration>> {
    let cpus: Vec<usize> = CpuSet::current_affinity()?.iter().collect();
    let cpu = *cpus.get(rank as usize % cpus.len().max(1)).ok_or_else(|| mismatch("the process may run on no CPU"))?;
    let rt = Runtime::builder().cpus(CpuSet::from_cpus([cpu])?).build()?;
    rt.block_on(async {
        let dev = Device::open_default()?;
        let svc = addr.connect(&dev).await?;
        let plugin = svc.plugin(sandbox::PLUGIN_NAME)?.id;
        let me = (task_id << 32) | u64::from(rank);
        let other = (task_id << 32) | u64::from(1 - rank);
        let worker = step("start the worker", LIMIT, Worker::builder(&svc).id(me).plugin_ids(plugin).start()).await?;

        // Blocks until both processes are at the rendezvous (bounded by LIMIT); nothing else
        // runs on this executor meanwhile.
        let rendezvous = UnixOob::connect(oob, rank, 2, LIMIT)
            .map_err(|e| e.context_prefix("meet the other process (is it alive?)"))?;
        let domain = step("start the domain", LIMIT, Domain::builder(rendezvous).worker(&worker).start()).await?;

        // The sandbox context of a command is its tag: the notification echoes it.
        let send = |tag: u64, data: Vec<u8>| sandbox::Cmd::send(tag, other, tag, data).encode();
        let recv = |tag: u64| sandbox::Cmd::recv(tag, tag).encode();
        let command = |what: String, payload: Vec<u8>| {
            let worker = worker.clone();
            async move {
                let reply = step(&what, LIMIT, worker.command(plugin, &payload)).await?;
                sandbox::Notif::decode(&reply).map_err(|e| mismatch(format!("{what}: bad notification: {e}")))
            }
        };
        let mut rtts = Vec::with_capacity(if rank == 0 { iters as usize } else { 0 });
        for i in 0..iters {
            let ping = format!("ping {i}").into_bytes();
            let pong = format!("pong {i}").into_bytes();
            let (out_tag, out, in_tag, expected) =
                if rank == 0 { (PING_TAG, ping, PONG_TAG, pong) } else { (PONG_TAG, pong, PING_TAG, ping) };
            let started = Instant::now();
            if rank == 1 {
                expect(command(format!("receive round {i}"), recv(in_tag)).await?, in_tag, &expected, i)?;
            }
            match command(format!("send round {i}"), send(out_tag, out)).await? {
                sandbox::Notif::TagSend { context, status: sandbox::ucs::OK } if context == out_tag => {}
                other => return Err(mismatch(format!("send round {i}: answered {other:?}"))),
            }
            if rank == 0 {
                expect(command(format!("receive round {i}"), recv(in_tag)).await?, in_tag, &expected, i)?;
                rtts.push(started.elapsed());
            }
        }
        step("stop the domain", LIMIT, domain.stop()).await?;
        step("stop the worker", LIMIT, worker.stop()).await?;
        Ok(rtts)
    })
}

/// Checks that a receive got `expected` under `tag`.
fn expect(n: sandbox::Notif, tag: u64, expected: &[u8], round: u64) -> Result<()> {
    match n {
        sandbox::Notif::TagRecv { sender_tag, data, .. } if sender_tag == tag && data == expected => Ok(()),
        other => Err(mismatch(format!(
            "round {round}: expected {:?} under tag {tag}, received {other:?}",
            String::from_utf8_lossy(expected)
        ))),
    }
}
