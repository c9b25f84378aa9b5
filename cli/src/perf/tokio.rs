//! The tokio bridge's latency (built with `--features tokio`): the timed side A of
//! `write_lat`, `read_lat`, `send_lat` and `sync_add_wait` awaits from tokio, its peer B is
//! the async side as in `async` mode, so `tokio / async` is the cost of the bridge.
//!
//! * `tokio`: side A's thread runs a current-thread tokio runtime and the whole test inside
//!   `async_doca::tokio::Driver` (the PE driven by tokio's reactor), with the same idle mode
//!   as the async executors.
//! * `tokio-handle`: side A's DOCA objects live on an async-doca executor (pinned to A's CPU)
//!   in a `Pinned` state; a current-thread tokio runtime on another thread runs each
//!   iteration as a job through `async_doca::tokio::Bridge` and times it from tokio: the
//!   job's trip to the executor and the result's trip back are in every sample.

use std::time::Duration;

use async_doca::sync_event::{Location, SyncEvent};
use async_doca::time::timeout;
use async_doca::tokio::{Bridge, Driver};
use async_doca::{Device, Error, ErrorKind, IdleMode, Result};

use super::cpu::{joined, pin, runtime, two_cpus};
use super::peer::spawn_peer;
use super::peer::Link;
use super::rdma::{async_a, LatencyA, Measured, Test};
use super::stats::{timed_async, Report, Run, Samples};
use super::sync_event::{async_side_b, TEST};
use super::{IdleArg, Mode, Params, PEER_TIMEOUT};

fn idle_mode(idle: IdleArg) -> IdleMode {
    match idle {
        IdleArg::Polling => IdleMode::Polling,
        IdleArg::Adaptive => IdleMode::default(),
        IdleArg::Event => IdleMode::Event,
    }
}

/// The current-thread tokio runtime side A's tokio thread runs (here and in `bridge.rs`).
pub(super) fn tokio_rt() -> Result<::tokio::runtime::Runtime> {
    ::tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::os(e, "perf: build the tokio runtime"))
}

/// `tokio` side A of an RDMA test: pinned to `cpu`, the async side A under the driver.
pub fn rdma_side_a(test: Test, p: &Params, cpu: usize, link: Link) -> Result<Measured> {
    pin(cpu)?;
    let p = *p;
    tokio_rt()?.block_on(Driver::new().idle(idle_mode(p.idle)).inline_progress(!p.park).run(async_a(test, p, link)))?
}

/// `tokio-handle` side A of an RDMA test: the connection on an executor of `cpu`, each
/// iteration a job sent from a tokio thread.
pub fn rdma_handle_side_a(test: Test, p: &Params, cpu: usize, link: Link) -> Result<Measured> {
    if test.is_bw() {
        return Err(Error::new(ErrorKind::NotSupported, "perf: tokio-handle runs latency tests only"));
    }
    let p = *p;
    let doca = runtime(&[cpu], p.idle, p.park)?;
    let bridge = Bridge::new(doca.handle());
    tokio_rt()?.block_on(async move {
        let a = bridge.pin(cpu, move || LatencyA::connect(test, p, link)).await?;
        let divisor = a.run(|a| async move { Ok(a.divisor()) }).await?;
        let a = &a;
        let (samples, elapsed) =
            timed_async(p.warmup, p.iters, divisor, |i| a.run(move |a| async move { a.ping(i).await })).await?;
        a.run(|a| async move { a.finish().await }).await?;
        Ok(Measured { samples, elapsed })
    })
}

/// One `sync_add_wait` iteration of side A: add 1, wait for B's answer.
async fn sync_step(ev: &SyncEvent, i: u64) -> Result<()> {
    ev.add(1).await?;
    timeout(PEER_TIMEOUT, ev.wait_eq(2 * i + 2)).await.map_err(Error::from)?
}

/// `sync_add_wait` in `tokio` or `tokio-handle` mode: side A as above, side B the async
/// side (an executor on the other CPU, or the peer process).
pub fn sync_pingpong(p: &Params) -> Result<Report> {
    let (cpu_a, cpu_b) = two_cpus()?;
    let p = *p;
    let rounds = p.warmup + p.iters;
    // Side B's executor (procs 1); the peer process brings its own (procs 2).
    let b_rt = if p.procs == 1 { Some(runtime(&[cpu_b], p.idle, p.park)?) } else { None };
    let start_b = move |blob: Vec<u8>| -> Result<SideB> {
        match &b_rt {
            Some(rt) => Ok(SideB::Exec(rt.spawn_on(cpu_b, move || async_side_b(blob, rounds))?, rt.handle())),
            None => Ok(SideB::Proc(spawn_peer(TEST, &p, &blob, cpu_b)?)),
        }
    };
    let (samples, elapsed) = match p.mode {
        Mode::TokioHandle => {
            let doca = runtime(&[cpu_a], p.idle, p.park)?;
            let bridge = Bridge::new(doca.handle());
            tokio_rt()?.block_on(async move {
                let ev = bridge
                    .pin(cpu_a, || async {
                        SyncEvent::builder(&Device::open_default()?).publisher(Location::RemotePci).build().await
                    })
                    .await?;
                let blob = ev.run(|ev| async move { ev.export() }).await?;
                let b = start_b(blob)?;
                let ev = &ev;
                let (samples, elapsed) =
                    timed_async(p.warmup, p.iters, 2.0, |i| ev.run(move |ev| async move { sync_step(&ev, i).await }))
                        .await?;
                b.finish()?;
                Ok::<_, Error>((samples, elapsed))
            })?
        }
        _ => joined(std::thread::spawn(move || -> Result<(Samples, Duration)> {
            pin(cpu_a)?;
            tokio_rt()?.block_on(Driver::new().idle(idle_mode(p.idle)).inline_progress(!p.park).run(async move {
                let ev = SyncEvent::builder(&Device::open_default()?).publisher(Location::RemotePci).build().await?;
                let b = start_b(ev.export()?)?;
                let ev = &ev;
                let (samples, elapsed) = timed_async(p.warmup, p.iters, 2.0, |i| sync_step(ev, i)).await?;
                b.finish()?;
                Ok((samples, elapsed))
            }))?
        }))?,
    };
    Ok(Run { test: TEST, mode: p.mode.name(), size: 8, procs: p.procs }.report(samples, 2 * p.iters, elapsed))
}

/// Side B of a `sync_add_wait` run through the bridge.
enum SideB {
    Exec(async_doca::JoinHandle<Result<()>>, async_doca::Handle),
    Proc(super::peer::PeerChild),
}

impl SideB {
    fn finish(self) -> Result<()> {
        match self {
            // Blocking is fine here: side A is done, and B ends on its own executor.
            SideB::Exec(h, handle) => std::thread::spawn(move || handle.block_on(h))
                .join()
                .unwrap_or_else(|_| Err(Error::new(ErrorKind::Other, "perf: side B panicked")))?,
            SideB::Proc(c) => c.finish(),
        }
    }
}
