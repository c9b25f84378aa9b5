//! `sync_add_wait`: a ping-pong over one sync event. Side A adds 1 (the counter becomes
//! 2i+1) and waits for 2i+2; side B waits for 2i+1 and adds 1. One round trip is two
//! one-way signals; the reported latency is half of it.

use std::sync::mpsc;
use std::time::Instant;

use async_doca::{CpuSet, Device, Error, ErrorKind, Result};

use super::raw::RawEvent;
use super::stats::{Report, Run, Samples};
use super::{spawn_peer, two_cpus, Mode, Params};

const TEST: &str = "sync_add_wait";

pub fn run(p: &Params) -> Result<Report> {
    match p.mode {
        Mode::Raw => raw_pingpong(p),
        Mode::Async => async_pingpong(p),
    }
}

/// The peer side started by `perf-peer` in a child process.
pub fn peer(p: &Params, blob: &[u8], cpu: usize) -> Result<()> {
    CpuSet::from_cpus([cpu])?.pin_current_thread()?;
    match p.mode {
        Mode::Raw => raw_side_b(&Device::open_default()?, blob, p.warmup + p.iters),
        Mode::Async => async_peer(p, blob, cpu),
    }
}

fn pin(cpu: usize) -> Result<()> {
    CpuSet::from_cpus([cpu])?.pin_current_thread()
}

fn joined<T>(h: std::thread::JoinHandle<Result<T>>) -> Result<T> {
    h.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Other, "perf thread panicked")))
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
    let params = Params { mode: Mode::Raw, procs, iters, warmup, idle: p.idle };
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
        let mut samples = Samples::with_capacity(iters as usize);
        let mut start = Instant::now();
        for i in 0..warmup + iters {
            if i == warmup {
                start = Instant::now();
            }
            let t0 = Instant::now();
            ev.add(1)?;
            ev.wait_eq(2 * i + 2)?;
            if i >= warmup {
                samples.push(t0.elapsed(), 2.0);
            }
        }
        let elapsed = start.elapsed();
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
