//! The runtime's cost per RDMA operation, for instruction-level profiles: runs `N`
//! operations of one kind on a loopback connection (two contexts of one `block_on`
//! executor, event idle mode: no spinning thread) and prints the wall time per operation.
//!
//! ```text
//! cargo build --release --example op_cost
//! valgrind --tool=callgrind target/release/examples/op_cost write 100000
//! valgrind --tool=callgrind target/release/examples/op_cost write 0   # the fixed cost
//! ```
//! (instructions per operation = the difference of the two totals / N; `callgrind_annotate`
//! then shows where they go). Kinds: `write`, `read`, `fadd`, `pipeline` (writes, 64 in flight in
//! one task's `rdma::Pipeline`), `window` (the same writes in an `rdma::Window`), `lanes`
//! (the same writes through 64 `rdma::Lanes`, each holding its task), `batch` (the same
//! lanes taken a batch at a time, `Lanes::batch`; `batch_read` the same with reads), `lane` (one write at a
//! time through a single lane), `lane_fadd` (the same with a fetch-add), `lane_send` (one 8-byte
//! message at a time through a send lane into a receive lane posted again at once), `messages` (8-byte
//! sends through a `Window`, received through a `RecvWindow` with one `next` per message),
//! `comch` (8-byte Comch messages, one at a time), `fast` (8-byte messages over the Comch
//! fast path, `comch::fast`, two receives posted), `fast_lanes` (the same messages through a
//! send lane of `Producer::lanes` into a receive lane of `Consumer::recv_lanes` posted again at
//! once, as `lane_send`),
//! `spawned` (writes, 64 in flight as a task each), `write_woken` (writes awaited one at a time with a poll budget of one inline progress:
//! every other write is completed by the executor's turn and its task woken, the path every
//! operation takes on hardware; that path costs twice the average minus `write`; kept for the
//! figures that used it: `OP_COST_PARK=1 op_cost write` parks every write), `memcpy`
//! (DMA copies of 8 bytes between two local buffers, one at a time; the DMA context is
//! created after the clock starts, a fixed cost that `memcpy 0` includes too), `dma_in`
//! (DMA copies of 8 bytes from imported memory, 64 in flight in an `rdma::Pipeline`),
//! `dma_lanes` (the same copies through 64 `dma::Lanes`, a batch at a time), `sync` (a sync
//! event's `add` and a `wait_eq` for the value it reached: two operations per iteration, as
//! perf's `sync_add_wait`; the event is made after the clock starts), `event_add` (an add
//! to the peer's sync event through the connection, `Connection::remote_event`, one at a
//! time; the event is made after the clock starts), `yield` (one
//! `yield_now` per operation: a trip round the executor's loop), `spawned_yield` (the same in a
//! spawned task, woken through its waker and run from the run queue: what the task type's wake
//! and run add).
//!
//! With `OP_COST_SPAWNED=1` in the environment, any kind runs in a spawned task instead of
//! `block_on`'s main future. With `OP_COST_PARK=1`, the runtime is built without inline
//! progress (`Builder::inline_progress(false)`): every operation parks, and the executor's
//! turn completes it and wakes its future (`OP_COST_PARK=1 OP_COST_SPAWNED=1 op_cost write`:
//! the path of a user's task on hardware, every time).

use std::collections::VecDeque;
use std::time::Instant;

use async_doca::comch::fast::{Consumer, Producer};
use async_doca::comch::{Client, Connection, Server};
use async_doca::dma::{Dma, LaneOp as DmaLaneOp};
use async_doca::executor::yield_now;
use async_doca::rdma::{LaneOp, Pipeline, Rdma, RemoteEvent};
use async_doca::sync_event::{Location, SyncEvent};
use async_doca::{spawn_local, Access, Device, IdleMode, JoinHandle, Result, Runtime};

/// A Comch server and one client of it on this executor: (server, its side, the client's).
async fn comch_pair(dev: &Device, tag: &str) -> Result<(Server, Connection, Connection)> {
    let name = format!("op-cost-{tag}-{}", std::process::id());
    let server = Server::builder(dev, &name).build().await?;
    let client = spawn_local({
        let (dev, name) = (dev.clone(), name.clone());
        async move { Client::builder(&dev, &name).connect().await }
    });
    let dpu = server.accept().await?;
    let host = client.await??;
    Ok((server, dpu, host))
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "write".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let mut builder = Runtime::builder().cpus("0".parse()?).idle(IdleMode::Event);
    if kind == "write_woken" {
        // One inline progress per poll: every other write finds its budget spent, returns
        // `Pending` and is completed by the executor's turn, as every operation is on hardware,
        // where the completion comes microseconds after the submit.
        builder = builder.task_batch(1);
    }
    if std::env::var_os("OP_COST_PARK").is_some() {
        builder = builder.inline_progress(false);
    }
    let rt = builder.build()?;
    let body = async move {
        let dev = Device::open_default()?;
        let a = Rdma::builder(&dev).build().await?;
        let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
        let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
        let ab = pa.connect(&blob_b).await?;
        let _ba = pb.connect(&blob_a).await?;
        let target = dev.alloc(64 * 8, Access::RDMA_ALL)?;
        let remote = dev.import(&target.export_rdma()?)?;
        let local = dev.alloc(64 * 8, Access::LOCAL_READ_WRITE)?;
        let start = Instant::now();
        match kind.as_str() {
            "write" | "write_woken" => {
                let mut buf = local.slice(0..8);
                for _ in 0..n {
                    let (r, back) = ab.write(buf, remote.slice(0..8)).await;
                    r?;
                    buf = back;
                }
            }
            "event_add" => {
                let ev = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
                let remote_ev = RemoteEvent::open(&dev, &ev.export()?)?;
                let ops = ab.remote_event(&remote_ev);
                let mut buf = local.slice(0..8);
                for _ in 0..n {
                    let (r, back) = ops.add(1, buf).await;
                    r?;
                    buf = back;
                }
            }
            "read" => {
                let mut buf = local.slice(0..8);
                for _ in 0..n {
                    let (r, back) = ab.read(remote.slice(0..8), buf).await;
                    r?;
                    buf = back;
                }
            }
            "fadd" => {
                let mut buf = local.slice(0..8);
                for _ in 0..n {
                    let (r, back) = ab.fetch_add(remote.slice(0..8), 1, buf).await;
                    r?;
                    buf = back;
                }
            }
            "pipeline" => {
                let mut pipe = Pipeline::new(64);
                for i in 0..n {
                    let k = i % 64;
                    let op = ab.write(local.slice(k * 8..k * 8 + 8), remote.slice(k * 8..k * 8 + 8));
                    if let Some((r, _)) = pipe.push(op).await {
                        r?;
                    }
                }
                while let Some((r, _)) = pipe.next().await {
                    r?;
                }
            }
            "window" => {
                let mut window = ab.window(64);
                for i in 0..n {
                    let k = i % 64;
                    if let Some((r, _)) =
                        window.write(local.slice(k * 8..k * 8 + 8), remote.slice(k * 8..k * 8 + 8)).await
                    {
                        r?;
                    }
                }
                while let Some((r, _)) = window.next().await {
                    r?;
                }
            }
            "messages" => {
                // 8-byte messages from a to b: sent through a window, received through a
                // receive window, one `next` per message and its buffer posted again.
                let inbox = dev.alloc(64 * 8, Access::LOCAL_READ_WRITE)?;
                let mut posted = b.recv_window(64);
                for k in 0..64 {
                    assert!(posted.recv(inbox.slice(k * 8..k * 8 + 8)).await.is_none());
                }
                let mut sends = ab.window(64);
                for _ in 0..n {
                    if let Some((r, _)) = sends.send(local.slice(0..8)).await {
                        r?;
                    }
                    let (msg, buf) = posted.next().await.expect("64 posted");
                    msg?;
                    assert!(posted.recv(buf).await.is_none(), "a lane was free");
                }
                while let Some((r, _)) = sends.next().await {
                    r?;
                }
            }
            "lanes" => {
                let mut lanes = ab.lanes(LaneOp::Write(remote.slice(..64 * 8)), local.slice(..64 * 8), 64)?;
                for _ in 0..n {
                    let (prev, lane) = lanes.lane().await;
                    if let Some(r) = prev {
                        r?;
                    }
                    lane.submit();
                }
                while let Some((r, _)) = lanes.next().await {
                    r?;
                }
            }
            "batch" | "batch_read" => {
                // The same writes (or reads), the lanes taken a batch at a time (`Lanes::batch`).
                let op = if kind == "batch" { LaneOp::Write } else { LaneOp::Read };
                let mut lanes = ab.lanes(op(remote.slice(..64 * 8)), local.slice(..64 * 8), 64)?;
                let mut sent = 0;
                while sent < n {
                    let mut batch = lanes.batch().await;
                    while let Some((prev, lane)) = batch.lane() {
                        if let Some(r) = prev {
                            r?;
                        }
                        lane.submit();
                        sent += 1;
                        if sent == n {
                            break;
                        }
                    }
                }
                while let Some((r, _)) = lanes.next().await {
                    r?;
                }
            }
            "lane" => {
                // One write at a time through one lane: the fixed-memory path's latency.
                let mut lanes = ab.lanes(LaneOp::Write(remote.slice(..8)), local.slice(..8), 1)?;
                for _ in 0..n {
                    lanes.lane().await.1.submit();
                    lanes.next().await.expect("one submitted").0?;
                }
            }
            "lane_fadd" => {
                // The same through a fetch-add lane (its old value read back from the lane).
                let mut lanes = ab.lanes(LaneOp::FetchAdd(remote.slice(..8)), local.slice(..8), 1)?;
                for _ in 0..n {
                    lanes.lane().await.1.submit_fetch_add(1);
                    lanes.next().await.expect("one submitted").0?;
                }
            }
            "lane_send" => {
                // One 8-byte message at a time from a to b through a send lane, received by a
                // receive lane that is posted again at once (perf's `send_lat` in mode `lanes`,
                // one side).
                let inbox = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
                let mut posted = b.recv_lanes(inbox.slice(..8), 1)?;
                posted.lane().await.1.submit();
                let mut lanes = ab.lanes(LaneOp::Send, local.slice(..8), 1)?;
                for _ in 0..n {
                    lanes.lane().await.1.submit();
                    lanes.next().await.expect("one submitted").0?;
                    let (msg, lane) = posted.next().await.expect("one posted");
                    lane.submit();
                    msg?;
                }
            }
            "spawned" => {
                let mut window: VecDeque<JoinHandle<Result<()>>> = VecDeque::with_capacity(64);
                for i in 0..n {
                    if window.len() == 64 {
                        window.pop_front().expect("full").await??;
                    }
                    let (conn, k) = (ab.clone(), i % 64);
                    let (src, dst) = (local.slice(k * 8..k * 8 + 8), remote.slice(k * 8..k * 8 + 8));
                    window.push_back(spawn_local(async move { conn.write(src, dst).await.0 }));
                }
                for h in window {
                    h.await??;
                }
            }
            "dma_in" | "dma_lanes" => {
                // DMA copies of 8 bytes from imported (PCI-exported) memory, 64 in flight:
                // through an `rdma::Pipeline` of copy futures (`dma_in`), or through 64
                // `dma::Lanes` taken a batch at a time (`dma_lanes`). The context and the
                // import are made after the clock starts, a fixed cost `N = 0` includes too.
                let dma = Dma::builder(&dev).build().await?;
                let host = dev.alloc(64 * 8, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
                let imported = dev.import(&host.export_pci()?)?;
                if kind == "dma_in" {
                    let mut pipe = Pipeline::new(64);
                    for i in 0..n {
                        if pipe.is_full() {
                            if let Some((r, _, _)) = pipe.next().await {
                                r?;
                            }
                        }
                        let k = i % 64;
                        let copy = dma.memcpy(imported.slice(k * 8..k * 8 + 8), local.slice(k * 8..k * 8 + 8));
                        assert!(pipe.try_push(copy).is_ok(), "a lane is free");
                    }
                    while let Some((r, _, _)) = pipe.next().await {
                        r?;
                    }
                } else {
                    let op = DmaLaneOp::CopyIn(imported.slice(..64 * 8));
                    let mut lanes = dma.lanes(op, local.slice(..64 * 8), 64)?;
                    let mut left = n;
                    while left > 0 {
                        let mut batch = lanes.batch().await;
                        while let Some((prev, lane)) = batch.lane() {
                            if let Some(r) = prev {
                                r?;
                            }
                            lane.submit();
                            left -= 1;
                            if left == 0 {
                                break;
                            }
                        }
                    }
                    while let Some((r, _)) = lanes.next().await {
                        r?;
                    }
                }
            }
            "memcpy" => {
                let dma = Dma::builder(&dev).build().await?;
                let (mut src, mut dst) = (local.slice(0..8), local.slice(8..16));
                for _ in 0..n {
                    let (r, s, d) = dma.memcpy(src, dst).await;
                    r?;
                    (src, dst) = (s, d);
                }
            }
            "sync" => {
                // A counter's add and a wait for the value it reached: the two operations
                // of perf's `sync_add_wait` per iteration, on a local event (both complete
                // at the first progress).
                let ev = SyncEvent::builder(&dev).build().await?;
                for i in 0..n as u64 {
                    ev.add(1).await?;
                    ev.wait_eq(i + 1).await?;
                }
            }
            "comch" => {
                // 8-byte Comch messages, one at a time, client to server (`comch::Connection`'s
                // send and recv: the control path, a DATA record on the connection's socket).
                let (_server, dpu, host) = comch_pair(&dev, "comch").await?;
                for i in 0..n {
                    host.send((i as u64).to_ne_bytes()).await?;
                    let got = dpu.recv().await.expect("the client stays");
                    assert_eq!(got.len(), 8);
                }
            }
            "fast" => {
                // 8-byte messages over the Comch fast path (`comch::fast`), one at a time: a
                // send from the server's producer into the client's consumer, which keeps two
                // receives posted and posts each buffer again once its message was taken.
                let (_server, dpu, host) = comch_pair(&dev, "fast").await?;
                let inbox = dev.alloc(2 * 8, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
                let consumer = Consumer::builder(&host, &inbox).tasks(2).build().await?;
                let producer = Producer::builder(&dpu).build().await?;
                let id = dpu.next_remote_consumer().await?;
                let mut posted = VecDeque::new();
                for k in 0..2 {
                    let mut r = consumer.recv(inbox.slice(k * 8..k * 8 + 8));
                    assert!(futures_lite::future::poll_once(&mut r).await.is_none(), "nothing sent yet");
                    posted.push_back(r);
                }
                let mut msg = local.slice(0..8);
                for _ in 0..n {
                    let (r, back) = producer.send(msg, id, &[]).await;
                    r?;
                    msg = back;
                    let (got, buf) = posted.pop_front().expect("two posted").await;
                    got?;
                    let mut again = consumer.recv(buf);
                    assert!(futures_lite::future::poll_once(&mut again).await.is_none(), "nothing sent yet");
                    posted.push_back(again);
                }
            }
            "fast_lanes" => {
                // The same 8-byte messages through lanes (`Producer::lanes`,
                // `Consumer::recv_lanes`), one at a time: a send lane into a receive lane that
                // is posted again at once (as `lane_send` is for RDMA).
                let (_server, dpu, host) = comch_pair(&dev, "fast_lanes").await?;
                let inbox = dev.alloc(8, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
                let consumer = Consumer::builder(&host, &inbox).tasks(1).build().await?;
                let producer = Producer::builder(&dpu).tasks(1).build().await?;
                let id = dpu.next_remote_consumer().await?;
                let mut posted = consumer.recv_lanes(inbox.slice(..8), 1)?;
                posted.lane().await.1.submit();
                let mut lanes = producer.lanes(local.slice(..8), 1, id)?;
                for _ in 0..n {
                    lanes.lane().await.1.submit();
                    lanes.next().await.expect("one submitted").0?;
                    let (msg, lane) = posted.next().await.expect("one posted");
                    lane.submit();
                    msg?;
                }
            }
            "yield" => {
                // One trip round the executor's loop per iteration (wake, run queue, a turn
                // with its PE drain, the poll): what a task that polls memory for a peer's
                // write pays per look, as perf's write_lat does.
                for _ in 0..n {
                    yield_now().await;
                }
            }
            "spawned_yield" => {
                // The same in a spawned task: each trip wakes the task through its waker and
                // runs it from the run queue.
                spawn_local(async move {
                    for _ in 0..n {
                        yield_now().await;
                    }
                })
                .await?;
            }
            other => {
                panic!("unknown kind {other} (write, write_woken, read, fadd, pipeline, window, messages, lanes, batch, lane, spawned, memcpy, comch, fast, fast_lanes, yield, spawned_yield)")
            }
        }
        Ok::<_, async_doca::Error>(start.elapsed() / n.max(1) as u32)
    };
    // With `OP_COST_SPAWNED` set, the loop runs in a spawned task instead of `block_on`'s main
    // future: its wakes go through the task's waker and run queue, as a user's tasks do;
    // `block_on` wakes its main future with a thread-local flag.
    let per_op = if std::env::var_os("OP_COST_SPAWNED").is_some() {
        rt.block_on(async move { spawn_local(body).await? })?
    } else {
        rt.block_on(body)?
    };
    println!("{n} operations, {per_op:?} per operation");
    Ok(())
}
