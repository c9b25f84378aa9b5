//! `bridge_lat`: what a job costs to hand to an executor on another CPU and get back, with
//! no DOCA work in it, so the hand-off is all that is timed (issue 14's aim 5: the tokio
//! handle's "cross-thread hand-off and wake, both directions").
//!
//! The `tokio-handle` rows of the RDMA and sync-event tests cannot show that cost on a
//! two-CPU machine: side A's executor and side B both poll, so the tokio thread has no CPU
//! of its own and every job waits for the scheduler. Here the two ends are the only busy
//! threads, one per CPU:
//!
//! * `raw`: the floor. A thread on CPU B spins on an atomic counter and echoes it; a thread
//!   on CPU A bumps it and spins for the echo. Two cache-line transfers, nothing else.
//! * `async`: a task on CPU A's executor spawns an empty job on CPU B's executor and
//!   awaits its [`JoinHandle`](async_doca::JoinHandle): the runtime's own cross-executor
//!   hand-off (remote spawn, run, completion, remote wake).
//! * `tokio-handle`: a current-thread tokio runtime on CPU A runs an empty job on CPU B's
//!   executor through [`Bridge::run_on`]: the tokio handle users call.
//!
//! Each sample is one whole round trip (not halved): the aim is stated per job.

use async_doca::tokio::Bridge;
use async_doca::{Error, Result};

use super::cpu::{joined, pin, runtime, two_cpus};
use super::machine::{ping_pong, GiveUp};
use super::stats::{timed_async, Report, Run, Samples};
use super::tokio::tokio_rt;
use super::{Mode, Params};

const TEST: &str = "bridge_lat";

pub fn run(p: &Params) -> Result<Report> {
    let (cpu_a, cpu_b) = two_cpus()?;
    let (samples, elapsed) = match p.mode {
        Mode::Raw => raw(p, cpu_a, cpu_b)?,
        Mode::Async => {
            let rt = runtime(&[cpu_a, cpu_b], p.idle, p.park)?;
            let handle = rt.handle();
            let (warmup, iters) = (p.warmup, p.iters);
            let job = rt.spawn_on(cpu_a, move || async move {
                timed_async(warmup, iters, 1.0, |_| {
                    let spawned = handle.spawn_on(cpu_b, || async { Ok::<_, Error>(()) });
                    async move { spawned?.await? }
                })
                .await
            })?;
            rt.block_on(job)??
        }
        Mode::TokioHandle => {
            let rt = runtime(&[cpu_b], p.idle, p.park)?;
            let bridge = Bridge::new(rt.handle());
            let (warmup, iters) = (p.warmup, p.iters);
            joined(std::thread::spawn(move || {
                pin(cpu_a)?;
                tokio_rt()?.block_on(timed_async(warmup, iters, 1.0, |_| bridge.run_on(cpu_b, || async { Ok(()) })))
            }))?
        }
        other => return Err(other.unsupported(TEST)),
    };
    Ok(Run { test: TEST, mode: p.mode.name(), size: 0, procs: 1 }.report(samples, p.iters, elapsed))
}

/// The floor: an atomic counter bounced between two spinning threads (the machine's
/// reference, run for this test's iterations; see `machine.rs`).
fn raw(p: &Params, cpu_a: usize, cpu_b: usize) -> Result<(Samples, std::time::Duration)> {
    ping_pong(cpu_a, cpu_b, p.warmup, p.iters, GiveUp::Trip(super::PEER_TIMEOUT))
}
