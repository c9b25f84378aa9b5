//! `sync_add_wait`: a ping-pong over one sync event. Side A adds 1 (the counter becomes
//! 2i+1) and waits for 2i+2; side B waits for 2i+1 and adds 1. One round trip is two
//! one-way signals; the reported latency is half of it.

use std::sync::mpsc;

use async_doca::sync_event::{Location, SyncEvent};
use async_doca::time::timeout;
use async_doca::{CpuSet, Device, Error, ErrorKind, Result};

use super::cpu::{joined, pin, runtime, two_cpus};
use super::peer::spawn_peer;
use super::raw::RawEvent;
use super::stats::{timed, timed_async, Report, Run, Samples};
use super::{Mode, Params, PEER_TIMEOUT};

pub(super) const TEST: &str = "sync_add_wait";

pub fn run(p: &Params) -> Result<Report> {
    match p.mode {
        Mode::Raw => raw_pingpong(p),
        Mode::Async => async_pingpong(p),
        #[cfg(feature = "tokio")]
        Mode::Tokio | Mode::TokioHandle => super::tokio::sync_pingpong(p),
        other => Err(other.unsupported(TEST)),
    }
}

/// The peer side started by `perf-peer` in a child process.
pub fn peer(p: &Params, blob: &[u8], cpu: usize) -> Result<()> {
    CpuSet::from_cpus([cpu])?.pin_current_thread()?;
    match p.mode {
        Mode::Raw => raw_side_b(&Device::open_default()?, blob, p.warmup + p.iters),
        Mode::Async => async_peer(p, blob, cpu),
        // The bridge modes measure side A only; their peer is the async side.
        #[cfg(feature = "tokio")]
        Mode::Tokio | Mode::TokioHandle => async_peer(p, blob, cpu),
        other => Err(other.unsupported(TEST)),
    }
}

fn raw_side_b(dev: &Device, blob: &[u8], rounds: u64) -> Result<()> {
    let mut ev = RawEvent::open(dev, blob)?;
    for i in 0..rounds {
        ev.wait_eq(2 * i + 1)?;
        ev.add(1)?;
    }
    Ok(())
}

fn raw_pingpong(p: &Params) -> Result<Report> {
    let (cpu_a, cpu_b) = two_cpus()?;
    let (warmup, iters, procs) = (p.warmup, p.iters, p.procs);
    let (blob_tx, blob_rx) = mpsc::channel::<Vec<u8>>();
    let side_b = if procs == 1 {
        Some(std::thread::spawn(move || -> Result<()> {
            pin(cpu_b)?;
            let blob = blob_rx.recv().map_err(|_| Error::new(ErrorKind::Other, "side A never exported"))?;
            raw_side_b(&Device::open_default()?, &blob, warmup + iters)
        }))
    } else {
        None
    };
    let params = *p;
    let side_a = std::thread::spawn(move || -> Result<(Samples, std::time::Duration)> {
        pin(cpu_a)?;
        let dev = Device::open_default()?;
        let (mut ev, blob) = RawEvent::create(&dev)?;
        let child = if procs == 2 {
            Some(spawn_peer(TEST, &params, &blob, cpu_b)?)
        } else {
            blob_tx.send(blob).map_err(|_| Error::new(ErrorKind::Other, "side B is gone"))?;
            None
        };
        let (samples, elapsed) = timed(warmup, iters, 2.0, |i| {
            ev.add(1)?;
            ev.wait_eq(2 * i + 2)
        })?;
        if let Some(c) = child {
            c.finish()?;
        }
        Ok((samples, elapsed))
    });
    let (samples, elapsed) = joined(side_a)?;
    if let Some(b) = side_b {
        joined(b)?;
    }
    Ok(Run { test: TEST, mode: "raw", size: 8, procs }.report(samples, 2 * iters, elapsed))
}

/// Side B of the async ping-pong: wait for the odd values, answer with the even ones.
pub(super) async fn async_side_b(blob: Vec<u8>, rounds: u64) -> Result<()> {
    let dev = Device::open_default()?;
    let ev = SyncEvent::open(&dev, &blob).await?;
    for i in 0..rounds {
        ev.wait_eq(2 * i + 1).await?;
        ev.add(1).await?;
    }
    Ok(())
}

fn async_pingpong(p: &Params) -> Result<Report> {
    let (cpu_a, cpu_b) = two_cpus()?;
    let (warmup, iters, procs) = (p.warmup, p.iters, p.procs);
    let cpus: Vec<usize> = if procs == 1 { vec![cpu_a, cpu_b] } else { vec![cpu_a] };
    let rt = runtime(&cpus, p.idle, p.park)?;
    let params = *p;
    let side_a = rt.spawn_on(cpu_a, move || async move {
        let dev = Device::open_default()?;
        let ev = SyncEvent::builder(&dev).publisher(Location::RemotePci).build().await?;
        let blob = ev.export()?;
        let (child, side_b) = if procs == 2 {
            (Some(spawn_peer(TEST, &params, &blob, cpu_b)?), None)
        } else {
            let handle = async_doca::executor::current_handle().expect("inside the runtime");
            (None, Some(handle.spawn_on(cpu_b, move || async_side_b(blob, warmup + iters))?))
        };
        let ev = &ev;
        let (samples, elapsed) = timed_async(warmup, iters, 2.0, |i| async move {
            ev.add(1).await?;
            timeout(PEER_TIMEOUT, ev.wait_eq(2 * i + 2)).await.map_err(Error::from)?.map(drop)
        })
        .await?;
        if let Some(b) = side_b {
            b.await??;
        }
        if let Some(c) = child {
            c.finish()?;
        }
        Ok::<_, Error>((samples, elapsed))
    })?;
    let (samples, elapsed) = rt.block_on(side_a)??;
    Ok(Run { test: TEST, mode: "async", size: 8, procs }.report(samples, 2 * iters, elapsed))
}

fn async_peer(p: &Params, blob: &[u8], cpu: usize) -> Result<()> {
    let rt = runtime(&[cpu], p.idle, p.park)?;
    let blob = blob.to_vec();
    let rounds = p.warmup + p.iters;
    let side_b = rt.spawn_on(cpu, move || async_side_b(blob, rounds))?;
    rt.block_on(side_b)?
}

/// `spawn`: spawn an empty local task and await its JoinHandle, timed in batches (one clock
/// read per batch, so the clock does not dominate a ~100 ns operation).
pub fn run_spawn(p: &Params) -> Result<Report> {
    const BATCH: u64 = 64;
    let (cpu, _) = two_cpus()?;
    let rt = runtime(&[cpu], p.idle, p.park)?;
    let batches = p.iters.div_ceil(BATCH).max(1);
    let warm = p.warmup.div_ceil(BATCH);
    let job = rt.spawn_on(cpu, move || async move {
        timed_async(warm, batches, BATCH as f64, |_| async {
            for _ in 0..BATCH {
                async_doca::spawn_local(async {}).await?;
            }
            Ok(())
        })
        .await
    })?;
    let (samples, elapsed) = rt.block_on(job)??;
    let mut r = Run { test: "spawn", mode: "async", size: 0, procs: 1 }.report(samples, batches * BATCH, elapsed);
    r.iters = batches * BATCH;
    Ok(r)
}
