//! `comch_fast_lat`: a ping-pong over the Comch fast path (`comch::fast`) between a server and
//! a client on two executors (two CPUs) of one process. Each side has a consumer with two
//! buffers posted and a producer to the other side's consumer. Side A (the client) sends
//! `size` bytes and waits for the echo; side B (the server) echoes. Latency is half the
//! round trip.
//!
//! Both sides keep two buffers posted and post a buffer again only after their next send
//! went out, so that posting is never on the round trip: A sends message `i + 1` before it
//! posts the buffer echo `i` arrived in (echo `i + 1` goes to the other one), and B echoes
//! before it posts again. The `raw` mode is the same loop as a C program would write it
//! (`raw_comch_fast.rs`), in the same order.

use std::collections::VecDeque;

use async_doca::comch::fast::{Consumer, Producer, Received, RecvFuture};
use async_doca::comch::{Client, Connection, Server};
use async_doca::time::timeout;
use async_doca::{Access, Buf, Device, Error, ErrorKind, Memory, Result};
use futures_lite::future::poll_once;

use super::cpu::{runtime, two_cpus};
use super::stats::{timed_rounds, Report, Round, Run};
use super::{Mode, Params, PEER_TIMEOUT};

pub(super) const TEST: &str = "comch_fast_lat";
/// Buffers each side keeps posted.
const POSTED: usize = 2;

pub fn run(p: &Params) -> Result<Report> {
    if !matches!(p.mode, Mode::Async | Mode::Raw) {
        return Err(p.mode.unsupported(TEST));
    }
    if p.mode == Mode::Raw {
        return super::raw_comch_fast::run(p);
    }
    let (cpu_a, cpu_b) = two_cpus()?;
    let cpus: Vec<usize> = if cpu_a == cpu_b { vec![cpu_a] } else { vec![cpu_a, cpu_b] };
    let rt = runtime(&cpus, p.idle, p.park)?;
    let (warmup, iters, size) = (p.warmup, p.iters, p.size.max(1));
    let total = warmup + iters;
    let name = format!("perf-comch-fast-{}", std::process::id());
    let server_name = name.clone();
    let side_b = rt.spawn_on(cpu_b, move || async move {
        let dev = Device::open_default()?;
        let server = Server::builder(&dev, &server_name).build().await?;
        let conn = timeout(PEER_TIMEOUT, server.accept()).await.map_err(Error::from)??;
        let side = Side::new(&dev, &conn, size).await?;
        let mut end = side.end().await?;
        for i in 0..total {
            end.recv().await?;
            end.send().await?;
            end.post_again(i + 1 < total).await?;
        }
        Ok::<_, Error>(())
    })?;
    let side_a = rt.spawn_on(cpu_a, move || async move {
        let dev = Device::open_default()?;
        let conn = Client::builder(&dev, &name).connect().await?;
        let side = Side::new(&dev, &conn, size).await?;
        let mut end = side.end().await?;
        timed_rounds(warmup, iters, 2.0, &mut Pinger { end: &mut end, total }).await
    })?;
    // Both sides' outcomes: when side B fails, side A only waits out its timeout, so B's
    // error is the one that says what went wrong.
    let a = rt.block_on(side_a)?;
    let b = rt.block_on(side_b)?;
    b.map_err(|e| e.context_prefix("side B"))?;
    let (samples, elapsed) = a?;
    Ok(Run { test: TEST, mode: "async", size, procs: 1 }.report(samples, 2 * iters, elapsed))
}

/// One side's fast-path objects: its consumer over `POSTED` buffers of its memory, its
/// producer, the peer's consumer id, and the message it sends.
struct Side {
    inbox: Memory,
    consumer: Consumer,
    producer: Producer,
    peer: u32,
    /// The message's memory (the loop owns its one `Buf` between sends).
    outbox: Memory,
    size: usize,
}

impl Side {
    async fn new(dev: &Device, conn: &Connection, size: usize) -> Result<Side> {
        let inbox = dev.alloc(POSTED * size, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
        let consumer = Consumer::builder(conn, &inbox).tasks(POSTED as u32).build().await?;
        let producer = Producer::builder(conn).build().await?;
        let peer = timeout(PEER_TIMEOUT, conn.next_remote_consumer()).await.map_err(Error::from)??;
        let outbox = dev.alloc(size, Access::LOCAL_READ_WRITE)?;
        Ok(Side { inbox, consumer, producer, peer, outbox, size })
    }

    /// The loop's view, with every buffer posted.
    async fn end(&self) -> Result<End<'_>> {
        let mut end =
            End { side: self, posted: VecDeque::with_capacity(POSTED), free: None, msg: Some(self.outbox.buf()) };
        for k in 0..POSTED {
            end.free = Some(self.inbox.slice(k * self.size..(k + 1) * self.size));
            end.post_again(true).await?;
        }
        Ok(end)
    }
}

/// A side in its loop: the receives posted (oldest first), the buffer of the last message
/// received (posted again after the next send), the message buffer between sends.
struct End<'a> {
    side: &'a Side,
    posted: VecDeque<Posted<'a>>,
    free: Option<Buf>,
    msg: Option<Buf>,
}

/// A posted receive: still waiting, or already over when it was posted.
enum Posted<'a> {
    Waiting(RecvFuture<'a>),
    /// A receive over at its first poll: a producer was waiting for a buffer (the peer may
    /// send its first message before this side posted any), and the runtime's progress
    /// right after the post delivered the message at once.
    Over(Result<Received>, Buf),
}

impl End<'_> {
    /// Posts the free buffer again, unless no more message comes: a receive future polled
    /// once (its first poll posts), kept in posting order with what it resolved to if it
    /// is over already.
    async fn post_again(&mut self, more: bool) -> Result<()> {
        if !more {
            self.free = None;
            return Ok(());
        }
        if let Some(buf) = self.free.take() {
            let mut recv = self.side.consumer.recv(buf);
            let posted = match poll_once(&mut recv).await {
                Some((r, buf)) => Posted::Over(r, buf),
                None => Posted::Waiting(recv),
            };
            self.posted.push_back(posted);
        }
        Ok(())
    }

    /// The oldest posted receive's message; its buffer is left free.
    async fn recv(&mut self) -> Result<()> {
        if let Some(Posted::Waiting(oldest)) = self.posted.front_mut() {
            let (r, buf) = timeout(PEER_TIMEOUT, oldest).await.map_err(Error::from)?;
            self.posted[0] = Posted::Over(r, buf);
        }
        match self.posted.pop_front() {
            Some(Posted::Over(r, buf)) => {
                self.free = Some(buf);
                r.map(drop)
            }
            Some(Posted::Waiting(_)) => unreachable!("the oldest receive was waited for above"),
            None => Err(Error::new(ErrorKind::BadState, "nothing posted")),
        }
    }

    /// Sends the message to the peer's consumer.
    async fn send(&mut self) -> Result<()> {
        let msg = self.msg.take().expect("the message buffer is back after each send");
        let (r, msg) = self.side.producer.send(msg, self.side.peer, &[]).await;
        self.msg = Some(msg);
        r
    }
}

/// Side A's rounds: send, post the buffer of the previous echo, wait for this one.
struct Pinger<'e, 'a> {
    end: &'e mut End<'a>,
    total: u64,
}

impl Round for Pinger<'_, '_> {
    async fn round(&mut self, i: u64) -> Result<()> {
        self.end.send().await?;
        self.end.post_again(i + 1 < self.total).await?;
        self.end.recv().await
    }
}
