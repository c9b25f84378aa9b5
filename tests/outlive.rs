//! Handles that outlive their executor.
//!
//! An executor destroys its DOCA contexts when it ends, even while handles to them live on: a
//! task that a foreign runtime keeps (tokio's `LocalSet` holding an `RdmaStream` after the
//! async-doca driver returned), a value returned out of `block_on`. Such a handle is inert:
//! its operations fail (`BadState`, or the operation's own error), its drop reaches nothing
//! DOCA has freed, and what it had in flight was completed by the context's stop.
//!
//! Each test builds one family's handles inside an async body, with operations in flight and
//! futures part-way, and suspends the body at a [`Handover`] point. Its first executor then
//! ends with the body suspended. The body either resumes under a second executor, where it
//! uses every handle and then drops them, or is dropped outside any executor. Under
//! AddressSanitizer (`scripts/sanitize.sh asan`) a handle that reaches a destroyed object
//! fails these tests; without it, a crash or a hang does.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_doca::coll::{HostComm, ReduceOp, TypedBuf};
use async_doca::dma::Dma;
use async_doca::oob::InProcessOob;
use async_doca::rdma::{LaneOp, Rdma, RdmaStream, RdmaStreamListener, RemoteEvent};
use async_doca::sync_event::{Location, SyncEvent};
use async_doca::time::timeout;
use async_doca::{comch, spawn_local, Access, Device, Error, ErrorKind, Result, Runtime};

mod common;

/// Every wait here is bounded: a handle that waits forever on a destroyed context fails.
const LIMIT: Duration = Duration::from_secs(20);

fn rt() -> Runtime {
    Runtime::builder().cpus("0".parse().unwrap()).build().unwrap()
}

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    match timeout(LIMIT, f).await {
        Ok(v) => v,
        // What the runtime reported meanwhile (a destructor that panicked while the first
        // executor cancelled a driver, a task leaked at its shutdown) is what explains a wait
        // that never ended; no `Result` carries it and tests have no subscriber.
        Err(_) => panic!(
            "a handle of a destroyed context waited past the limit; the runtime reported: {:?}",
            async_doca::trace::problems()
        ),
    }
}

/// Where a body stops while its first executor ends (see the module docs).
#[derive(Clone, Default)]
struct Handover(Rc<Cell<Phase>>);

#[derive(Clone, Copy, Default, PartialEq, Debug)]
enum Phase {
    #[default]
    Building,
    Suspended,
    Resumed,
}

impl Handover {
    /// Suspends the body until [`resume`](Handover::resume).
    async fn point(&self) {
        self.0.set(Phase::Suspended);
        poll_fn(|_| if self.0.get() == Phase::Resumed { Poll::Ready(()) } else { Poll::Pending }).await
    }

    fn resume(&self) {
        self.0.set(Phase::Resumed);
    }

    /// Runs `body` under a first executor up to its handover point, then ends that executor
    /// with the body suspended; the body is returned, to be resumed or dropped.
    fn build<F: Future<Output = Result<()>>>(&self, body: F) -> Pin<Box<F>> {
        let mut body = Box::pin(body);
        rt().block_on(poll_fn(|cx| {
            if let Poll::Ready(r) = body.as_mut().poll(cx) {
                panic!("the body ended before its handover point: {r:?}");
            }
            if self.0.get() == Phase::Suspended {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }));
        body
    }
}

/// Waits (without blocking the executor) until all `n` members arrived: a member whose
/// executor ends resets its connections, which would fail a collective another member is
/// still finishing before its handover point.
async fn meet(arrived: &AtomicUsize, n: usize) {
    arrived.fetch_add(1, Ordering::SeqCst);
    bounded(async {
        while arrived.load(Ordering::SeqCst) < n {
            async_doca::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
}

/// Runs `body` to its handover point under a first executor, which then ends, and the rest
/// of it under a second one.
fn resumed<F: Future<Output = Result<()>>>(body: impl FnOnce(Handover) -> F) {
    let h = Handover::default();
    let body = h.build(body(h.clone()));
    h.resume();
    rt().block_on(body).unwrap();
}

/// Runs `body` to its handover point under a first executor, which then ends, and drops it
/// outside any executor.
fn dropped<F: Future<Output = Result<()>>>(body: impl FnOnce(Handover) -> F) {
    let h = Handover::default();
    drop(h.build(body(h.clone())));
}

/// Polls `f` once, with a waker that does nothing (what a part-way future is left at).
fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

fn expect_err<T: std::fmt::Debug>(what: &str, r: Result<T>) -> Error {
    match r {
        Ok(v) => panic!("{what}: succeeded on a destroyed context ({v:?})"),
        Err(e) => e,
    }
}

/// Every RDMA handle: contexts, connections made with blobs, registrations, lanes with
/// operations in flight, a window, a posted receive and a write polled part-way.
async fn rdma_body(h: Handover) -> Result<()> {
    let dev = Device::open_default()?;
    let a = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
    let ab = pa.connect(&blob_b).await?;
    let ba = pb.connect(&blob_a).await?;
    let mem = dev.alloc(1 << 16, Access::LOCAL_READ_WRITE | Access::RDMA_ALL)?;
    let target = dev.alloc(1 << 16, Access::RDMA_ALL)?;
    let remote = dev.import(&target.export_rdma()?)?;

    let mut lanes = ab.lanes(LaneOp::Write(remote.slice(0..512)), mem.slice(0..512), 8)?;
    for _ in 0..8 {
        let (prev, lane) = lanes.lane().await;
        assert!(prev.is_none(), "eight idle lanes");
        lane.submit();
    }
    let mut window = ab.window(4);
    for k in 0..4 {
        let at = 512 + k * 8;
        assert!(window.write(mem.slice(at..at + 8), remote.slice(at..at + 8)).await.is_none());
    }
    // A receive posted and never answered; a write polled once.
    let mut recv = pin!(b.recv(target.slice(1024..2048)));
    assert!(poll_once(recv.as_mut()).is_pending(), "nothing was sent");
    let mut write = pin!(ab.write(mem.slice(4096..4104), remote.slice(4096..4104)));
    let write_done = poll_once(write.as_mut()).is_ready();
    // b's event, driven by a through the connection.
    let ev = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
    let remote_ev = RemoteEvent::open(&dev, &ev.export()?)?;
    let (r, _) = ab.remote_event(&remote_ev).add(1, mem.slice(8192..8200)).await;
    assert_eq!(r?, 0);

    h.point().await;

    // Under a second executor: every operation fails, nothing waits forever.
    let (r, _) = bounded(ab.write(mem.slice(0..8), remote.slice(0..8))).await;
    assert_eq!(expect_err("write", r).kind(), ErrorKind::BadState);
    let (r, _) = bounded(ba.send(target.slice(0..8))).await;
    assert_eq!(expect_err("send", r).kind(), ErrorKind::BadState);
    let (r, _) = bounded(b.recv(target.slice(0..64))).await;
    assert_eq!(expect_err("recv", r.map(|m| m.len)).kind(), ErrorKind::BadState);
    let (r, _) = bounded(ab.fetch_add(remote.slice(8..16), 1, mem.slice(8..16))).await;
    expect_err("fetch_add", r);
    // What was in flight was completed by the first executor's stop: flushed, or done.
    while let Some((r, _)) = bounded(lanes.next()).await {
        if let Err(e) = r {
            assert_eq!(e.kind(), ErrorKind::Cancelled, "a lane in flight at the stop: {e}");
        }
    }
    let (prev, lane) = bounded(lanes.lane()).await;
    assert!(prev.is_none());
    lane.submit();
    let (r, _) = bounded(lanes.next()).await.expect("one submitted");
    expect_err("a lane submitted again", r);
    while let Some((r, _)) = bounded(window.next()).await {
        if let Err(e) = r {
            assert_eq!(e.kind(), ErrorKind::Cancelled, "a window write in flight at the stop: {e}");
        }
    }
    let (r, _) = bounded(recv.as_mut()).await;
    assert_eq!(expect_err("the posted receive", r.map(|m| m.len)).kind(), ErrorKind::Cancelled);
    if !write_done {
        let (r, _) = bounded(write.as_mut()).await;
        if let Err(e) = r {
            assert_eq!(e.kind(), ErrorKind::Cancelled, "the write in flight at the stop: {e}");
        }
    }
    expect_err("export", a.export().map(|(blob, _)| blob));
    // A connection ends with its context, also one made with blobs.
    bounded(ab.closed()).await;
    assert_eq!(expect_err("restart", bounded(a.restart()).await).kind(), ErrorKind::BadState);
    let (r, _) = bounded(ab.remote_event(&remote_ev).add(1, mem.slice(8192..8200))).await;
    assert_eq!(expect_err("a remote event's add", r).kind(), ErrorKind::BadState);
    expect_err("the event's own add", bounded(ev.add(1)).await);
    Ok(())
}

#[test]
fn rdma_handles_resumed_under_another_executor() {
    resumed(rdma_body);
}

#[test]
fn rdma_handles_dropped_outside_any_executor() {
    dropped(rdma_body);
}

/// Sync events and DMA: a wait parked on an event, a copy polled part-way.
async fn event_and_dma_body(h: Handover) -> Result<()> {
    let dev = Device::open_default()?;
    let ev = SyncEvent::builder(&dev).build().await?;
    ev.add(1).await?;
    let mut wait = pin!(ev.wait_eq(5));
    assert!(poll_once(wait.as_mut()).is_pending(), "the event is 1");
    let dma = Dma::builder(&dev).build().await?;
    let mem = dev.alloc(1 << 16, Access::LOCAL_READ_WRITE)?;
    let mut copy = pin!(dma.memcpy(mem.slice(0..4096), mem.slice(4096..8192)));
    let copy_done = poll_once(copy.as_mut()).is_ready();

    h.point().await;

    expect_err("add", bounded(ev.add(1)).await);
    expect_err("get", bounded(ev.get()).await);
    expect_err("the parked wait", bounded(wait.as_mut()).await);
    if !copy_done {
        let (r, _, _) = bounded(copy.as_mut()).await;
        if let Err(e) = r {
            assert_eq!(e.kind(), ErrorKind::Cancelled, "the copy in flight at the stop: {e}");
        }
    }
    let (r, _, _) = bounded(dma.memcpy(mem.slice(0..8), mem.slice(8..16))).await;
    expect_err("memcpy", r);
    Ok(())
}

#[test]
fn events_and_dma_resumed_under_another_executor() {
    resumed(event_and_dma_body);
}

#[test]
fn events_and_dma_dropped_outside_any_executor() {
    dropped(event_and_dma_body);
}

/// Connections made by address and the byte streams over them, a listener and a request
/// left unanswered.
async fn stream_body(h: Handover) -> Result<()> {
    let dev = Device::open_default()?;
    let mut bound = None;
    for _ in 0..20 {
        // A free port (bound, then released; retried on the rare race).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if let Ok(l) = RdmaStreamListener::bind(&dev, port, 4).await {
            bound = Some(l);
            break;
        }
    }
    let listener = bound.expect("a free port");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], listener.port()));
    let client = spawn_local({
        let dev = dev.clone();
        async move { RdmaStream::connect(&dev, addr).await }
    });
    let server = bounded(listener.accept()).await?;
    let client = bounded(client).await??;
    let mut buf = [0u8; 5];
    bounded(async {
        poll_fn(|cx| client.poll_write_bytes(cx, b"hello")).await?;
        poll_fn(|cx| client.poll_flush_bytes(cx)).await?;
        let mut got = 0;
        while got < 5 {
            got += poll_fn(|cx| server.poll_read_bytes(cx, &mut buf[got..])).await?;
        }
        std::io::Result::Ok(())
    })
    .await?;
    assert_eq!(&buf, b"hello");
    // A server reading (parked) when the executor ends.
    let mut more = [0u8; 8];
    let mut read = pin!(poll_fn(|cx| server.poll_read_bytes(cx, &mut more)));
    assert!(poll_once(read.as_mut()).is_pending(), "nothing more was written");

    h.point().await;

    // A write may only buffer (as a socket's does); the flush that must send it fails.
    let written = bounded(poll_fn(|cx| client.poll_write_bytes(cx, b"late"))).await;
    let flushed = bounded(poll_fn(|cx| client.poll_flush_bytes(cx))).await;
    assert!(written.is_err() || flushed.is_err(), "a stream of a destroyed context sent {written:?}");
    // Nothing was received before the end: the parked read fails.
    assert!(bounded(read.as_mut()).await.is_err(), "a read of a stream whose context is gone");
    assert!(bounded(listener.accept()).await.is_err());
    Ok(())
}

#[test]
fn streams_resumed_under_another_executor() {
    resumed(stream_body);
}

#[test]
fn streams_dropped_outside_any_executor() {
    dropped(stream_body);
}

/// Comch: a server, a client and the server's side of their connection, a receive parked.
async fn comch_body(h: Handover, name: String) -> Result<()> {
    let dev = Device::open_default()?;
    let server = comch::Server::builder(&dev, &name).max_msg_size(256).build().await?;
    let client = spawn_local({
        let (dev, name) = (dev.clone(), name.clone());
        async move { comch::Client::builder(&dev, &name).connect().await }
    });
    let at_server = bounded(server.accept()).await?;
    let client = bounded(client).await??;
    client.send(b"one".to_vec()).await?;
    assert_eq!(bounded(at_server.recv()).await.as_deref(), Some(&b"one"[..]));
    let mut recv = pin!(client.recv());
    assert!(poll_once(recv.as_mut()).is_pending(), "nothing was sent");

    h.point().await;

    expect_err("send", bounded(client.send(b"late".to_vec())).await);
    expect_err("send from the server", bounded(at_server.send(b"late".to_vec())).await);
    assert_eq!(bounded(recv.as_mut()).await, None, "the stream of a destroyed connection ends");
    // (A client's disconnect is refused in any case: only the server's says something.)
    assert_eq!(expect_err("the server's disconnect", at_server.disconnect()).kind(), ErrorKind::BadState);
    assert_eq!(expect_err("accept", bounded(server.accept()).await.map(drop)).kind(), ErrorKind::BadState);
    Ok(())
}

fn comch_name(tag: &str) -> String {
    format!("outlive-{tag}-{}", std::process::id())
}

#[test]
fn comch_resumed_under_another_executor() {
    resumed(|h| comch_body(h, comch_name("resumed")));
}

#[test]
fn comch_dropped_outside_any_executor() {
    dropped(|h| comch_body(h, comch_name("dropped")));
}

/// Host collectives: a communicator of two in-process members, a collective in flight.
async fn coll_body(h: Handover, oob: InProcessOob, arrived: Arc<AtomicUsize>) -> Result<()> {
    let dev = Device::open_default()?;
    let comm = bounded(HostComm::builder(&dev, oob).build()).await?;
    let src = TypedBuf::<u64>::alloc(&dev, 4, Access::LOCAL_READ_WRITE)?;
    let mut dst = TypedBuf::<u64>::alloc(&dev, 4, Access::LOCAL_READ_WRITE)?;
    bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await?;
    let mut pending_dst = TypedBuf::<u64>::alloc(&dev, 4, Access::LOCAL_READ_WRITE)?;
    let mut in_flight = pin!(comm.allreduce(&src, &mut pending_dst, ReduceOp::Sum));
    let in_flight_done = poll_once(in_flight.as_mut()).is_ready();
    meet(&arrived, 2).await;

    h.point().await;

    if !in_flight_done {
        // The other member may have finished it before the executors ended; if not, it ends.
        let _ = bounded(in_flight.as_mut()).await;
    }
    expect_err("an allreduce", bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await);
    expect_err("a barrier", bounded(comm.barrier()).await);
    Ok(())
}

/// Runs `body` on the two members of an in-process group, a thread and executors each;
/// `resume` says what happens after the handover (see [`resumed`] and [`dropped`]).
fn two_members<F, B>(resume: bool, body: B)
where
    F: Future<Output = Result<()>>,
    B: Fn(Handover, InProcessOob, Arc<AtomicUsize>) -> F + Clone + Send + 'static,
{
    let arrived = Arc::new(AtomicUsize::new(0));
    let members: Vec<_> = InProcessOob::group(2)
        .into_iter()
        .map(|oob| {
            let (arrived, body) = (arrived.clone(), body.clone());
            std::thread::spawn(move || {
                let run = |h| body(h, oob, arrived);
                if resume {
                    resumed(run);
                } else {
                    dropped(run);
                }
            })
        })
        .collect();
    for m in members {
        m.join().expect("a member panicked");
    }
}

#[test]
fn host_collectives_resumed_under_another_executor() {
    two_members(true, coll_body);
}

#[test]
fn host_collectives_dropped_outside_any_executor() {
    two_members(false, coll_body);
}

/// The UROM families, against the soft provider's own daemon (what the `system` build does
/// not have: this part is type-checked and run with the `soft` feature only).
#[cfg(feature = "soft")]
mod urom {
    use super::*;
    use async_doca::urom::{Domain, Service, Worker};
    use common::urom::Daemon;
    use doca_urom_plugin::samples::graph;

    /// UROM: a service connection, a worker and a command in flight.
    async fn urom_body(h: Handover, socket: std::path::PathBuf) -> Result<()> {
        let dev = Device::open_default()?;
        let svc = bounded(Service::builder(&dev).socket_path(&socket).connect()).await?;
        let id = svc.plugin(graph::PLUGIN_NAME)?.id;
        let worker = bounded(Worker::builder(&svc).plugin_ids(id).start()).await?;
        let cmd = graph::Cmd::Loopback { value: 7 }.encode();
        bounded(worker.command(id, &cmd)).await?;
        let mut in_flight = pin!(worker.command(id, &cmd));
        let in_flight_done = poll_once(in_flight.as_mut()).is_ready();

        h.point().await;

        expect_err("a command", bounded(worker.command(id, &cmd)).await);
        if !in_flight_done {
            // Answered before the stop, or ended by it: either way it ends.
            let _ = bounded(in_flight.as_mut()).await;
        }
        expect_err("a second worker", bounded(Worker::builder(&svc).plugin_ids(id).start()).await.map(|_| ()));
        Ok(())
    }

    /// A daemon offering the sample plugins compiled into it (no shared object to load, so the
    /// test also runs in the sanitizer builds).
    fn urom_daemon() -> Daemon {
        Daemon::start(&["--builtin-samples", "--log-level", "warn"])
    }

    #[test]
    fn urom_resumed_under_another_executor() {
        let d = urom_daemon();
        resumed(|h| urom_body(h, d.socket.clone()));
        d.stop();
    }

    #[test]
    fn urom_dropped_outside_any_executor() {
        let d = urom_daemon();
        dropped(|h| urom_body(h, d.socket.clone()));
        d.stop();
    }

    /// UROM domains: two members whose workers run collectives, one collective in flight.
    async fn domain_body(
        h: Handover,
        socket: std::path::PathBuf,
        oob: InProcessOob,
        arrived: Arc<AtomicUsize>,
    ) -> Result<()> {
        let dev = Device::open_default()?;
        let svc = bounded(Service::builder(&dev).socket_path(&socket).connect()).await?;
        let worker = bounded(Worker::builder(&svc).plugin("worker_coll").start()).await?;
        let mem = dev.alloc(1 << 12, Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE)?;
        let domain = bounded(Domain::builder(oob).worker(&worker).buffer(&mem).timeout(LIMIT).start()).await?;
        let src = TypedBuf::<u64>::new(&mem, 0..4)?;
        let mut dst = TypedBuf::<u64>::new(&mem, 4..8)?;
        bounded(domain.allreduce(&src, &mut dst, ReduceOp::Sum)).await?;
        let mut pending_dst = TypedBuf::<u64>::new(&mem, 8..12)?;
        let mut in_flight = pin!(domain.allreduce(&src, &mut pending_dst, ReduceOp::Sum));
        let in_flight_done = poll_once(in_flight.as_mut()).is_ready();
        meet(&arrived, 2).await;

        h.point().await;

        if !in_flight_done {
            let _ = bounded(in_flight.as_mut()).await;
        }
        expect_err("an allreduce", bounded(domain.allreduce(&src, &mut dst, ReduceOp::Sum)).await);
        expect_err("a barrier", bounded(domain.barrier()).await);
        expect_err("stop", bounded(domain.stop()).await);
        Ok(())
    }

    /// Runs `domain_body` on two members against one daemon.
    fn domain_members(resume: bool) {
        let d = urom_daemon();
        let socket = d.socket.clone();
        two_members(resume, move |h, oob, arrived| domain_body(h, socket.clone(), oob, arrived));
        d.stop();
    }

    #[test]
    fn domains_resumed_under_another_executor() {
        domain_members(true);
    }

    #[test]
    fn domains_dropped_outside_any_executor() {
        domain_members(false);
    }
}
