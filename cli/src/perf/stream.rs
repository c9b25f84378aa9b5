//! Byte streams: `RdmaStream` (mode `async`) next to tokio's `TcpStream` over loopback
//! (mode `tcp`), measured in the same run by the same code (both through tokio's
//! `AsyncRead`/`AsyncWrite`), so `async / tcp` compares the transports, not two benchmarks.
//!
//! * `stream_bw`: side A writes `iters` writes of `size` bytes and shuts down; side B reads
//!   to EOF and answers one byte. A sample is one write; the run ends with B's answer, so
//!   the rate counts delivered bytes, not buffered ones.
//! * `stream_lat`: ping-pong of `size` bytes (A writes, B reads them all and writes them
//!   back); a sample is half the round trip.
//!
//! `procs` 1: the two sides run on two CPUs of one process (two async-doca executors, or two
//! threads with a current-thread tokio runtime each). The soft provider's RDMA and TCP
//! loopback both stay inside this host, so the figures compare software paths: on a
//! BlueField host `async` goes over the NIC.

use std::time::Duration;

use async_doca::rdma::{RdmaStream, RdmaStreamListener};
use async_doca::time::timeout;
use async_doca::{Device, Error, ErrorKind, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::clock::Stamp;
use super::cpu::{joined, pin, runtime, two_cpus};
use super::stats::{Report, Run, Samples};
use super::{Mode, Params, PEER_TIMEOUT};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Test {
    Bw,
    Lat,
}

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::Bw => "stream_bw",
            Test::Lat => "stream_lat",
        }
    }
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::os(e, what)
}

/// Side A: the timed side. Returns the samples, the timed duration and the operations.
async fn side_a<S: AsyncRead + AsyncWrite + Unpin>(test: Test, p: Params, mut s: S) -> Result<Report> {
    let size = p.size.max(1);
    let mut buf = vec![0x5au8; size];
    // The loop of `stats::timed_async`, written out: its step closure cannot lend the
    // stream to the future it returns.
    let divisor = if test == Test::Lat { 2.0 } else { 1.0 };
    let mut samples = Samples::default();
    let mut start = Stamp::now();
    for i in 0..p.warmup + p.iters {
        if i == p.warmup {
            start = Stamp::now();
        }
        let t0 = Stamp::now();
        s.write_all(&buf).await.map_err(io("perf: stream write"))?;
        if test == Test::Lat {
            s.read_exact(&mut buf).await.map_err(io("perf: stream read"))?;
        }
        if i >= p.warmup {
            samples.push_ns(t0.elapsed_ns() / divisor);
        }
    }
    // Bandwidth counts delivered bytes: the run ends when B has read everything (shutdown,
    // then B's one-byte answer).
    s.shutdown().await.map_err(io("perf: stream shutdown"))?;
    if test == Test::Bw {
        let mut ack = [0u8; 1];
        s.read_exact(&mut ack).await.map_err(io("perf: stream ack"))?;
    }
    let mut elapsed = start.elapsed();
    if elapsed.is_zero() {
        elapsed = Duration::from_nanos(1);
    }
    let mode = if p.mode == Mode::Async { "async" } else { "tcp" };
    let r = Run { test: test.name(), mode, size, procs: 1 }.report(samples, p.iters, elapsed);
    Ok(if test == Test::Bw { r.with_bandwidth() } else { r })
}

/// Side B: sink (bw) or echo (lat) until EOF.
async fn side_b<S: AsyncRead + AsyncWrite + Unpin>(test: Test, p: Params, mut s: S) -> Result<()> {
    let mut buf = vec![0u8; p.size.max(1).max(64 * 1024)];
    match test {
        Test::Bw => {
            while s.read(&mut buf).await.map_err(io("perf: stream read"))? > 0 {}
            s.write_all(&[1]).await.map_err(io("perf: stream ack"))?;
            s.flush().await.map_err(io("perf: stream flush"))?;
        }
        Test::Lat => {
            let msg = &mut buf[..p.size.max(1)];
            loop {
                match s.read_exact(msg).await {
                    Ok(_) => s.write_all(msg).await.map_err(io("perf: stream write"))?,
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(io("perf: stream read")(e)),
                }
            }
        }
    }
    s.shutdown().await.map_err(io("perf: stream shutdown"))
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("perf: find a free port"))?;
    Ok(l.local_addr().map_err(io("perf: find a free port"))?.port())
}

pub fn run(test: Test, p: &Params) -> Result<Report> {
    if p.procs != 1 {
        return Err(Error::new(ErrorKind::InvalidArgument, format!("{} runs with procs 1", test.name())));
    }
    match p.mode {
        Mode::Async => run_rdma(test, *p),
        Mode::Tcp => run_tcp(test, *p),
        other => Err(other.unsupported(test.name())),
    }
}

fn run_rdma(test: Test, p: Params) -> Result<Report> {
    let (a, b) = two_cpus()?;
    let cpus: Vec<usize> = if a == b { vec![a] } else { vec![a, b] };
    let rt = runtime(&cpus, p.idle, p.park)?;
    // The server binds first (retrying on the rare race for a port), then tells the client.
    let (tx, rx) = std::sync::mpsc::channel::<u16>();
    let server = rt.spawn_on(b, move || async move {
        let dev = Device::open_default()?;
        let mut bound = None;
        for _ in 0..20 {
            if let Ok(l) = RdmaStreamListener::bind(&dev, free_port()?, 1).await {
                bound = Some(l);
                break;
            }
        }
        let l = bound.ok_or_else(|| Error::new(ErrorKind::ResourceExhausted, "perf: no free port"))?;
        let _ = tx.send(l.port());
        let s = timeout(PEER_TIMEOUT, l.accept()).await??;
        side_b(test, p, s).await
    })?;
    let client = rt.spawn_on(a, move || async move {
        let port = rx.recv_timeout(PEER_TIMEOUT).map_err(|_| Error::new(ErrorKind::TimedOut, "perf: server port"))?;
        let dev = Device::open_default()?;
        let s = RdmaStream::connect(&dev, ([127, 0, 0, 1], port).into()).await?;
        side_a(test, p, s).await
    })?;
    // Both sides' results, the server's error first: a failing B makes A fail too.
    let (report, served) = (rt.block_on(client)?, rt.block_on(server)?);
    served.map_err(|e| e.context_prefix("side B"))?;
    report
}

fn run_tcp(test: Test, p: Params) -> Result<Report> {
    let (a, b) = two_cpus()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("perf: tcp listen"))?;
    let addr = listener.local_addr().map_err(io("perf: tcp listen"))?;
    listener.set_nonblocking(true).map_err(io("perf: tcp listen"))?;
    let server = std::thread::spawn(move || -> Result<()> {
        pin(b)?;
        tokio_rt()?.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).map_err(io("perf: tcp listen"))?;
            let (s, _) = l.accept().await.map_err(io("perf: tcp accept"))?;
            s.set_nodelay(true).map_err(io("perf: tcp nodelay"))?;
            side_b(test, p, s).await
        })
    });
    let client = std::thread::spawn(move || -> Result<Report> {
        pin(a)?;
        tokio_rt()?.block_on(async move {
            let s = tokio::net::TcpStream::connect(addr).await.map_err(io("perf: tcp connect"))?;
            s.set_nodelay(true).map_err(io("perf: tcp nodelay"))?;
            side_a(test, p, s).await
        })
    });
    let report = joined(client)?;
    joined(server)?;
    Ok(report)
}

fn tokio_rt() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io("perf: build the tokio runtime"))
}
