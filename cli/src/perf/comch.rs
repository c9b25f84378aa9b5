//! `comch_lat`: a message ping-pong over Comch between a server and a client on two
//! executors (two CPUs) of one process. Side A (the client) sends `size` bytes and waits for
//! the echo; side B (the server) echoes. Latency is half the round trip.
//!
//! The `raw` mode is the same ping-pong as a C program would write it (`raw_comch.rs`).

use async_doca::comch::{Client, Server};
use async_doca::time::timeout;
use async_doca::{Device, Error, ErrorKind, Result};

use super::cpu::runtime;
use super::cpu::two_cpus;
use super::stats::{timed_async, Report, Run};
use super::{Mode, Params, PEER_TIMEOUT};

pub(super) const TEST: &str = "comch_lat";

pub fn run(p: &Params) -> Result<Report> {
    if !matches!(p.mode, Mode::Async | Mode::Raw) {
        return Err(p.mode.unsupported(TEST));
    }
    // Checked here, not left to the server: a server that cannot start leaves the client
    // waiting for it, and the error the run reported was the client's time-out.
    let max = async_doca::comch::max_msg_size(&Device::open_default()?)?;
    if p.size > max as usize {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{TEST}: {} B messages exceed the device's Comch maximum of {max} B", p.size),
        ));
    }
    if p.mode == Mode::Raw {
        return super::raw_comch::run(p);
    }
    let (cpu_a, cpu_b) = two_cpus()?;
    let cpus: Vec<usize> = if cpu_a == cpu_b { vec![cpu_a] } else { vec![cpu_a, cpu_b] };
    let rt = runtime(&cpus, p.idle, p.park)?;
    let (warmup, iters, size) = (p.warmup, p.iters, p.size);
    let name = format!("perf-comch-{}", std::process::id());
    let server_name = name.clone();
    let side_b = rt.spawn_on(cpu_b, move || async move {
        let dev = Device::open_default()?;
        let server = Server::builder(&dev, &server_name).max_msg_size(size.max(1) as u32).build().await?;
        let conn = timeout(PEER_TIMEOUT, server.accept()).await.map_err(Error::from)??;
        for _ in 0..warmup + iters {
            let m = timeout(PEER_TIMEOUT, conn.recv())
                .await
                .map_err(Error::from)?
                .ok_or_else(|| Error::new(ErrorKind::ConnectionLost, "comch_lat: the client left"))?;
            conn.send(m).await?;
        }
        Ok::<_, Error>(())
    })?;
    let side_a = rt.spawn_on(cpu_a, move || async move {
        let dev = Device::open_default()?;
        let conn = Client::builder(&dev, &name).max_msg_size(size.max(1) as u32).connect().await?;
        let conn = &conn;
        let msg = vec![0x5au8; size];
        let r = timed_async(warmup, iters, 2.0, |_| {
            let m = msg.clone();
            async move {
                conn.send(m).await?;
                match timeout(PEER_TIMEOUT, conn.recv()).await.map_err(Error::from)? {
                    Some(_) => Ok(()),
                    None => Err(Error::new(ErrorKind::ConnectionLost, "comch_lat: the server left")),
                }
            }
        })
        .await?;
        Ok::<_, Error>(r)
    })?;
    let (samples, elapsed) = rt.block_on(side_a)??;
    rt.block_on(side_b)??;
    Ok(Run { test: TEST, mode: "async", size, procs: 1 }.report(samples, 2 * iters, elapsed))
}
