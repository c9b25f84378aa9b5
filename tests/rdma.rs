//! RDMA as futures: every operation with its data checked, on one executor, across two
//! executors and across two processes; error kinds; futures dropped mid-flight; pipelining;
//! back-pressure.

use std::future::Future;
use std::time::Duration;

use async_doca::rdma::{
    AtomicFuture, Connection, LaneOp, Opcode, Pipeline, Rdma, RdmaBuilder, ReadFuture, RecvFuture, SendFuture,
    WriteFuture,
};
use async_doca::time::timeout;
use async_doca::{spawn_local, Access, Device, Error, ErrorKind, IdleMode, RemoteMemory, Result, Runtime};

mod common;

/// Every wait in these tests is bounded: a bug shows up as a failure, never as a hang.
const LIMIT: Duration = Duration::from_secs(30);

fn rt(cpus: &str) -> Runtime {
    Runtime::builder().cpus(cpus.parse().unwrap()).build().unwrap()
}

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(Error::from)
}

/// Two contexts on this executor, connected: (a, b, a's connection to b, b's to a).
async fn pair_with(a: RdmaBuilder, b: RdmaBuilder) -> Result<(Rdma, Rdma, Connection, Connection)> {
    let (a, b) = (a.build().await?, b.build().await?);
    let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
    let ab = pa.connect(&blob_b).await?;
    let ba = pb.connect(&blob_a).await?;
    Ok((a, b, ab, ba))
}

async fn pair(dev: &Device) -> Result<(Rdma, Rdma, Connection, Connection)> {
    pair_with(Rdma::builder(dev).permissions(Access::RDMA_ALL), Rdma::builder(dev).permissions(Access::RDMA_ALL)).await
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn every_operation_on_one_executor() {
    rt("0").block_on(every_operation()).unwrap();
}

/// A runtime whose operations never progress the PE from their own poll: every operation
/// parks, and the executor's turn completes it and wakes its future, as on hardware.
fn parking_rt() -> Runtime {
    Runtime::builder().cpus("0".parse().unwrap()).idle(IdleMode::Event).inline_progress(false).build().unwrap()
}

/// How long a parked test may run: shorter than an operation's own bound (`LIMIT`), which
/// would hide a lost wake-up. The timer of `bounded` wakes the future, which then finds its
/// operation complete and goes on, so a lost wake-up showed only as a slow test; under this
/// bound the next operation's lost wake-up fails the test.
const WAKE_LIMIT: Duration = Duration::from_secs(10);

/// Runs `body` on a parking runtime, failing if a wake-up is lost (see [`WAKE_LIMIT`]).
fn run_parked(body: impl Future<Output = Result<()>>) {
    parking_rt()
        .block_on(async { timeout(WAKE_LIMIT, body).await.expect("a wake-up was lost: the test outlived its bound") })
        .unwrap();
}

/// Parked in the main future: the completions wake it through its kept main waker.
#[test]
fn every_operation_parked_in_the_main_future() {
    run_parked(every_operation());
}

/// Without inline progress, an operation's first poll returns `Pending` even where doca-soft
/// completes at once; polled again by its task, it keeps the task's waker instead.
#[test]
fn without_inline_progress_an_operation_parks_at_its_first_poll() {
    run_parked(async {
        let dev = Device::open_default()?;
        let (_a, _b, ab, _ba) = pair(&dev).await?;
        let target = dev.alloc(8, Access::RDMA_ALL)?;
        let remote = dev.import(&target.export_rdma()?)?;
        let mut src = dev.alloc(8, Access::LOCAL_READ_WRITE)?.slice(..8);
        src.write_u64(0, 7);
        let mut write = std::pin::pin!(ab.write(src, remote.slice(..8)));
        let first = write.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert!(first.is_pending(), "parked at its first poll");
        let (res, _) = bounded(write).await?;
        res?;
        assert_eq!(target.slice(..8).read_u64(0), 7);
        Ok::<_, Error>(())
    });
}

/// Parked in a spawned task: the completions wake it through a local waker of the task, and
/// a lane's through its group's.
#[test]
fn every_operation_and_a_lane_parked_in_a_task() {
    run_parked(async {
        spawn_local(async {
            every_operation().await?;
            let dev = Device::open_default()?;
            let (_a, _b, ab, _ba) = pair(&dev).await?;
            let target = dev.alloc(8, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            let mut lanes =
                ab.lanes(LaneOp::FetchAdd(remote.slice(..8)), dev.alloc(8, Access::LOCAL_READ_WRITE)?.slice(..8), 1)?;
            for i in 0..100u64 {
                bounded(lanes.lane()).await?.1.submit_fetch_add(1);
                let (res, lane) = bounded(lanes.next()).await?.expect("one submitted");
                res?;
                assert_eq!(lane.buf().read_u64(0), i, "the old value lands in the lane");
            }
            assert_eq!(target.slice(0..8).read_u64(0), 100);
            Ok::<_, Error>(())
        })
        .await?
    });
}

/// Every operation once, its data checked, between two contexts of this executor.
async fn every_operation() -> Result<()> {
    let dev = Device::open_default()?;
    let (a, b, ab, ba) = pair(&dev).await?;
    let target = dev.alloc(4096, Access::RDMA_ALL)?; // b's memory
    let remote = dev.import(&target.export_rdma()?)?;
    let local = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;

    // send / recv
    let rb = b.clone();
    let r = spawn_local(async move { rb.recv(dev_buf(4096)).await });
    let mut src = local.slice(0..100);
    src.write(0, &pattern(100, 1));
    let (res, src) = bounded(ab.send(src)).await?;
    res?;
    let (msg, buf) = bounded(r).await??;
    let msg = msg?;
    assert_eq!((msg.len, msg.opcode, msg.imm, msg.conn), (100, Opcode::Send, None, ba.id()));
    assert_eq!(buf.to_vec()[..100], pattern(100, 1)[..]);

    // send_imm
    let rb = b.clone();
    let r = spawn_local(async move { rb.recv(dev_buf(4096)).await });
    let (res, src) = bounded(ab.send_imm(src, 0xDEAD_BEEF)).await?;
    res?;
    let (msg, _) = bounded(r).await??;
    let msg = msg?;
    assert_eq!((msg.len, msg.opcode, msg.imm), (100, Opcode::SendImm, Some(0xDEAD_BEEF)));

    // write
    let (res, src) = bounded(ab.write(src, remote.slice(1000..1100))).await?;
    res?;
    assert_eq!(target.slice(1000..1100).to_vec(), pattern(100, 1));

    // write_imm: the data lands in the target, the immediate in a receive
    let mut src = src;
    src.write(0, &pattern(100, 2));
    let rb = b.clone();
    let r = spawn_local(async move { rb.recv(dev_buf(16)).await });
    let (res, src) = bounded(ab.write_imm(src, remote.slice(2000..2100), 7)).await?;
    res?;
    let (msg, _) = bounded(r).await??;
    let msg = msg?;
    assert_eq!((msg.opcode, msg.imm, msg.len), (Opcode::WriteImm, Some(7), 100));
    assert_eq!(target.slice(2000..2100).to_vec(), pattern(100, 2));

    // read
    target.slice(3000..3050).write(0, &pattern(50, 3));
    let (res, dst) = bounded(ab.read(remote.slice(3000..3050), local.slice(200..250))).await?;
    res?;
    assert_eq!(dst.to_vec(), pattern(50, 3));

    // atomics
    target.slice(0..8).write_u64(0, 40);
    let result = local.slice(512..520);
    let (old, result) = bounded(ab.fetch_add(remote.slice(0..8), 2, result)).await?;
    assert_eq!(old?, 40);
    let (old, result) = bounded(ab.compare_swap(remote.slice(0..8), 1, 99, result)).await?;
    assert_eq!(old?, 42, "a failed compare returns the current value");
    let (old, _) = bounded(ab.compare_swap(remote.slice(0..8), 42, 99, result)).await?;
    assert_eq!(old?, 42);
    assert_eq!(target.slice(0..8).read_u64(0), 99);

    // The other direction works too (b -> a), and an empty message.
    let a_mem = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
    let r = spawn_local(async move { a.recv(a_mem.slice(0..0)).await });
    let (res, _) = bounded(ba.send(target.slice(0..0))).await?;
    res?;
    let (msg, _) = bounded(r).await??;
    assert_eq!(msg?.len, 0);
    drop(src);
    Ok(())
}

/// A fresh receive buffer (registered memory of its own).
fn dev_buf(n: usize) -> async_doca::Buf {
    Device::open_default().unwrap().alloc(n, Access::LOCAL_READ_WRITE).unwrap().buf()
}

/// Waits for a blob from the other executor without blocking this one.
async fn recv_blob(rx: &std::sync::mpsc::Receiver<Vec<u8>>) -> Vec<u8> {
    for _ in 0..10_000 {
        if let Ok(v) = rx.try_recv() {
            return v;
        }
        async_doca::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("no blob from the other executor");
}

/// A context built by `builder` on this executor, connected to the other executor's through
/// their blobs (ours sent on `to`, theirs received from `from`).
async fn connect_across(
    builder: RdmaBuilder,
    to: &std::sync::mpsc::Sender<Vec<u8>>,
    from: &std::sync::mpsc::Receiver<Vec<u8>>,
) -> Result<(Rdma, Connection)> {
    let rdma = builder.build().await?;
    let (blob, pending) = rdma.export()?;
    to.send(blob).unwrap();
    let conn = pending.connect(&recv_blob(from).await).await?;
    Ok((rdma, conn))
}

#[test]
fn two_executors() {
    use std::sync::mpsc;
    let rt = rt("0-1");
    let (to_b, from_a) = mpsc::channel::<Vec<u8>>();
    let (to_a, from_b) = mpsc::channel::<Vec<u8>>();
    let a = rt
        .spawn_on(0, move || async move {
            let dev = Device::open_default()?;
            let (_rdma, conn) = connect_across(Rdma::builder(&dev), &to_b, &from_b).await?;
            let remote = dev.import(&recv_blob(&from_b).await)?;
            let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
            let mut src = mem.slice(0..4096);
            src.write(0, &pattern(4096, 9));
            let (res, src) = bounded(conn.write(src, remote.slice(..))).await?;
            res?;
            let (old, _) = bounded(conn.fetch_add(remote.slice(0..8), 1, mem.slice(0..8))).await?;
            let old = old?;
            let (res, _) = bounded(conn.send(src)).await?;
            res?;
            Ok::<_, Error>(old)
        })
        .unwrap();
    let b = rt
        .spawn_on(1, move || async move {
            let dev = Device::open_default()?;
            let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL);
            let (rdma, _conn) = connect_across(b, &to_a, &from_a).await?;
            let target = dev.alloc(4096, Access::RDMA_ALL)?;
            to_a.send(target.export_rdma()?).unwrap();
            let (msg, buf) = bounded(rdma.recv(dev.alloc(4096, Access::LOCAL_READ_WRITE)?.buf())).await?;
            assert_eq!(msg?.len, 4096);
            // The message is the source after the write, so its first word is the original;
            // the target's first word was incremented by the fetch_add.
            assert_eq!(buf.to_vec(), pattern(4096, 9));
            let mut expect = pattern(4096, 9);
            let w = u64::from_ne_bytes(expect[..8].try_into().unwrap()) + 1;
            expect[..8].copy_from_slice(&w.to_ne_bytes());
            assert_eq!(target.buf().to_vec(), expect);
            Ok::<_, Error>(w - 1)
        })
        .unwrap();
    let (old, seen) = rt.block_on(async { (a.await, b.await) });
    assert_eq!(old.unwrap().unwrap(), seen.unwrap().unwrap());
}

#[test]
fn polling_executors_ping_pong_through_futures_and_lanes() {
    // Polling workers wait for a message from inside the receiving poll
    // (`IdleMode::Polling`'s inline spin), where the message usually arrives; every message
    // must still come, in order, whether the spin caught it or the executor did.
    use async_doca::rdma::{LaneOp, Received};
    use async_doca::IdleMode;
    use std::sync::mpsc;
    const N: u64 = 2_000;
    let rt = Runtime::builder().cpus("0-1".parse().unwrap()).idle(IdleMode::Polling).build().unwrap();
    let (to_b, from_a) = mpsc::channel::<Vec<u8>>();
    let (to_a, from_b) = mpsc::channel::<Vec<u8>>();
    // A: futures. Sends i, waits for i back.
    let a = rt
        .spawn_on(0, move || async move {
            let dev = Device::open_default()?;
            let (rdma, conn) = connect_across(Rdma::builder(&dev), &to_b, &from_b).await?;
            let mem = dev.alloc(16, Access::LOCAL_READ_WRITE)?;
            let (mut out, mut back) = (mem.slice(0..8), mem.slice(8..16));
            for i in 0..N {
                out.write_u64(0, i);
                let (r, o) = bounded(conn.send(out)).await?;
                r?;
                out = o;
                let (msg, b) = bounded(rdma.recv(back)).await?;
                assert_eq!((msg?.len, b.read_u64(0)), (8, i), "answer {i}");
                back = b;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    // B: lanes of one. Receives i, sends it back.
    let b = rt
        .spawn_on(1, move || async move {
            let dev = Device::open_default()?;
            let (rdma, conn) = connect_across(Rdma::builder(&dev), &to_a, &from_a).await?;
            let mem = dev.alloc(16, Access::LOCAL_READ_WRITE)?;
            let mut posted = rdma.recv_lanes(mem.slice(0..8), 1)?;
            let mut sends = conn.lanes(LaneOp::Send, mem.slice(8..16), 1)?;
            posted.lane().await.1.submit();
            for i in 0..N {
                let (msg, lane) = bounded(posted.next()).await?.expect("one posted");
                let Received { len, .. } = msg?;
                let v = lane.buf().read_u64(0);
                assert_eq!((len, v), (8, i), "message {i}");
                lane.submit();
                let (_, mut out) = sends.lane().await;
                out.write_u64(0, v);
                out.submit();
                bounded(sends.next()).await?.expect("one sent").0?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    let (ra, rb) = rt.block_on(async { (a.await, b.await) });
    ra.unwrap().unwrap();
    rb.unwrap().unwrap();
}

#[test]
fn errors_name_the_operation_and_kind() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let local = dev.alloc(64, Access::LOCAL_READ_WRITE)?;

            // Checked before submitting: the context stays usable.
            let (_a, _b, ab, _ba) = pair(&dev).await?;
            let target = dev.alloc(64, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            assert_eq!(remote.try_slice(60..70).unwrap_err().kind(), ErrorKind::InvalidArgument);
            let (res, src) = ab.write(local.slice(0..16), remote.slice(0..8)).await;
            let e = res.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.context().starts_with("rdma.write"), "{e}");
            let (res, _) = ab.fetch_add(remote.slice(0..4), 1, src).await;
            assert_eq!(res.unwrap_err().kind(), ErrorKind::InvalidArgument);
            let (res, _) = ab.write(local.slice(0..8), remote.slice(0..8)).await;
            res?;

            // The peer's memory does not allow writes: PermissionDenied with DOCA's code.
            let ro = dev.alloc(64, Access::LOCAL_READ_WRITE | Access::RDMA_READ)?;
            let ro_remote = dev.import(&ro.export_rdma()?)?;
            let (res, _) = ab.write(local.slice(0..8), ro_remote.slice(0..8)).await;
            let e = res.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
            assert_eq!(e.code().unwrap().name(), Some("DOCA_ERROR_NOT_PERMITTED"));
            assert!(e.to_string().starts_with("rdma.write"), "{e}");
            assert_eq!(ro.buf().to_vec(), vec![0; 64], "memory untouched");
            // The context is in the error state now.
            let (res, _) = ab.write(local.slice(0..8), remote.slice(0..8)).await;
            assert_eq!(res.unwrap_err().kind(), ErrorKind::BadState);

            // The peer's context does not allow the access (default permissions).
            let (_a, _b, ab, _ba) =
                pair_with(Rdma::builder(&dev), Rdma::builder(&dev).permissions(Access::LOCAL_READ_WRITE)).await?;
            let (res, _) = ab.read(remote.slice(0..8), local.slice(0..8)).await;
            assert_eq!(res.unwrap_err().kind(), ErrorKind::PermissionDenied);

            // A misaligned atomic is an invalid argument of the provider; then recover with
            // a restart and fresh connections on both sides.
            let (a, b, ab, _ba) = pair(&dev).await?;
            let (res, _) = ab.fetch_add(remote.slice(1..9), 1, local.slice(0..8)).await;
            let e = res.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
            assert!(e.context().starts_with("rdma.fetch_add"), "{e}");
            a.restart().await?;
            b.restart().await?;
            let (res, _) = ab.write(local.slice(0..8), remote.slice(0..8)).await;
            assert_eq!(res.unwrap_err().kind(), ErrorKind::ConnectionLost, "old connections are closed");
            let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
            let ab = pa.connect(&blob_b).await?;
            let _ba = pb.connect(&blob_a).await?;
            let (old, _) = ab.fetch_add(remote.slice(8..16), 5, local.slice(0..8)).await;
            assert_eq!(old?, 0);

            // A peer that goes away: ConnectionLost.
            let (_a, b, ab, ba) = pair(&dev).await?;
            drop((b, ba));
            async_doca::time::sleep(Duration::from_millis(20)).await;
            let (res, _) = bounded(ab.send(local.slice(0..8))).await?;
            assert_eq!(res.unwrap_err().kind(), ErrorKind::ConnectionLost);

            // A bad blob.
            let rdma = Rdma::builder(&dev).build().await?;
            let (_, pending) = rdma.export()?;
            assert_eq!(pending.connect(&[0u8; 7]).await.unwrap_err().kind(), ErrorKind::InvalidArgument);
            Ok::<_, Error>(())
        })
        .unwrap();
}

#[test]
fn dropping_operations_mid_flight_is_harmless() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let (_a, b, ab, _ba) = pair(&dev).await?;

            // A send larger than the peer's ring (doca-soft's are 1 MiB at most) stays in
            // flight until the peer receives.
            const BIG: usize = (1 << 20) + 64 * 1024;
            let src_mem = dev.alloc(BIG, Access::LOCAL_READ_WRITE)?;
            src_mem.buf().write(0, &pattern(BIG, 5));
            let r = timeout(Duration::from_millis(50), ab.send(src_mem.buf())).await;
            assert!(r.is_err(), "the send cannot finish before the peer posts a receive");
            // Future and memory handle gone: the in-flight operation keeps the memory.
            drop(src_mem);
            let (msg, buf) = bounded(b.recv(dev.alloc(BIG, Access::LOCAL_READ_WRITE)?.buf())).await?;
            assert_eq!(msg?.len, BIG);
            assert!(buf.to_vec() == pattern(BIG, 5), "the dropped send streamed intact data");

            // A receive dropped while posted consumes the next message; later ones work.
            let r = timeout(Duration::from_millis(10), b.recv(dev_buf(64))).await;
            assert!(r.is_err());
            let m = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
            m.buf().write(0, b"lost....");
            let (res, first) = bounded(ab.send(m.buf())).await?;
            res?;
            let mut second = first;
            second.write(0, b"second..");
            let rb = b.clone();
            let r = spawn_local(async move { rb.recv(dev_buf(64)).await });
            let (res, _) = bounded(ab.send(second)).await?;
            res?;
            let (msg, buf) = bounded(r).await??;
            assert_eq!(msg?.len, 8);
            assert_eq!(&buf.to_vec()[..8], b"second..");

            // Many writes dropped before completing; later writes work.
            let target = dev.alloc(4096, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            let src = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
            for i in 0..100 {
                let f = ab.write(src.slice(i * 8..i * 8 + 8), remote.slice(i * 8..i * 8 + 8));
                drop(timeout(Duration::ZERO, f).await);
            }
            drop((src, remote));
            let src = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
            src.buf().write_u64(0, 77);
            let remote = dev.import(&target.export_rdma()?)?;
            let (res, _) = bounded(ab.write(src.buf(), remote.slice(0..8))).await?;
            res?;
            assert_eq!(target.slice(0..8).read_u64(0), 77);
            Ok::<_, Error>(())
        })
        .unwrap();
}

/// Runs `n` writes of 8 bytes at once, each its own task; checks every word and a checksum.
async fn pipelined_writes(conn: &Connection, dev: &Device, n: usize) -> Result<()> {
    let target = dev.alloc(n * 8, Access::RDMA_ALL)?;
    let remote = dev.import(&target.export_rdma()?)?;
    let src = dev.alloc(n * 8, Access::LOCAL_READ_WRITE)?;
    let value = |i: usize| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = src.slice(i * 8..i * 8 + 8);
        s.write_u64(0, value(i));
        let (conn, dst) = (conn.clone(), remote.slice(i * 8..i * 8 + 8));
        tasks.push(spawn_local(async move { conn.write(s, dst).await.0 }));
    }
    for t in tasks {
        bounded(t).await???;
    }
    let mut sum = 0u64;
    let mut expect = 0u64;
    let all = target.buf();
    for i in 0..n {
        let v = all.read_u64(i * 8);
        assert_eq!(v, value(i), "word {i}");
        sum = sum.wrapping_add(v);
        expect = expect.wrapping_add(value(i));
    }
    assert_eq!(sum, expect);
    Ok(())
}

#[test]
fn ten_thousand_pipelined_writes() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let (_a, _b, ab, _ba) = pair(&dev).await?;
            pipelined_writes(&ab, &dev, 10_000).await
        })
        .unwrap();
}

/// One million 8-byte writes with exactly 1024 in flight (1024 tasks, each writing its
/// share one after the other with one reused buffer), then every word and a checksum.
#[test]
fn a_million_pipelined_writes_with_1024_in_flight() {
    const N: usize = 1 << 20;
    const WINDOW: usize = 1024;
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let wide = Rdma::builder(&dev).max_tasks(WINDOW as u32).send_queue_size(WINDOW as u32);
            let (_a, _b, ab, _ba) = pair_with(wide, Rdma::builder(&dev).permissions(Access::RDMA_ALL)).await?;
            let target = dev.alloc(N * 8, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            let src = dev.alloc(WINDOW * 8, Access::LOCAL_READ_WRITE)?;
            let value = |i: usize| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555;
            let workers: Vec<_> = (0..WINDOW)
                .map(|w| {
                    let (conn, remote) = (ab.clone(), remote.clone());
                    let mut buf = src.slice(w * 8..w * 8 + 8);
                    spawn_local(async move {
                        for i in (w..N).step_by(WINDOW) {
                            buf.write_u64(0, value(i));
                            let (res, back) = conn.write(buf, remote.slice(i * 8..i * 8 + 8)).await;
                            res?;
                            buf = back;
                        }
                        Ok::<_, Error>(())
                    })
                })
                .collect();
            // One deadline for the whole run: the first join waits for nearly all the work,
            // which takes seconds in a debug build on a loaded machine.
            let deadline = std::time::Instant::now() + Duration::from_secs(300);
            for w in workers {
                async_doca::time::timeout_at(deadline, w).await.map_err(Error::from)???;
            }
            let all = target.buf();
            let (mut sum, mut expect) = (0u64, 0u64);
            for i in 0..N {
                let v = all.read_u64(i * 8);
                assert_eq!(v, value(i), "word {i} lost or misplaced");
                sum = sum.wrapping_add(v);
                expect = expect.wrapping_add(value(i));
            }
            assert_eq!(sum, expect, "checksum");
            Ok::<_, Error>(())
        })
        .unwrap();
}

#[test]
fn back_pressure_with_a_small_task_pool() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let small = Rdma::builder(&dev).max_tasks(2).send_queue_size(2).recv_tasks(2).descriptors(4);
            let (_a, _b, ab, _ba) = pair_with(small, Rdma::builder(&dev).permissions(Access::RDMA_ALL)).await?;
            pipelined_writes(&ab, &dev, 500).await?;
            // Atomics from many tasks at once through a pool of two.
            let counter = dev.alloc(8, Access::RDMA_ALL)?;
            let remote = dev.import(&counter.export_rdma()?)?;
            let results = dev.alloc(8 * 100, Access::LOCAL_READ_WRITE)?;
            let tasks: Vec<_> = (0..100)
                .map(|i| {
                    let (c, dst, res) = (ab.clone(), remote.slice(0..8), results.slice(i * 8..i * 8 + 8));
                    spawn_local(async move { c.fetch_add(dst, 1, res).await.0 })
                })
                .collect();
            let mut olds = Vec::new();
            for t in tasks {
                olds.push(bounded(t).await???);
            }
            olds.sort_unstable();
            assert_eq!(olds, (0..100).collect::<Vec<u64>>());
            assert_eq!(counter.buf().read_u64(0), 100);
            Ok::<_, Error>(())
        })
        .unwrap();
}

/// A [`Pipeline`] in one task through a pool of two tasks, a send queue of two and four
/// descriptors: operations that cannot be submitted at once wait in their lanes (polled
/// with a no-op waker) until they are retried; every one completes, results come back in
/// push order. A pipeline no deeper than the pool submits in push order too.
#[test]
fn pipeline_in_one_task_through_a_small_pool() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let small = Rdma::builder(&dev).max_tasks(2).send_queue_size(2).descriptors(4);
            let (_a, _b, ab, _ba) = pair_with(small, Rdma::builder(&dev).permissions(Access::RDMA_ALL)).await?;
            const N: usize = 2000;
            let target = dev.alloc(N * 8, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            let src = dev.alloc(N * 8, Access::LOCAL_READ_WRITE)?;
            let mut pipe = Pipeline::new(16);
            for i in 0..N {
                let mut s = src.slice(i * 8..i * 8 + 8);
                s.write_u64(0, i as u64 ^ 0xA5A5);
                if let Some((res, _)) = bounded(pipe.push(ab.write(s, remote.slice(i * 8..i * 8 + 8)))).await? {
                    res?;
                }
            }
            while let Some((res, _)) = bounded(pipe.next()).await? {
                res?;
            }
            for i in 0..N {
                assert_eq!(target.buf().read_u64(i * 8), i as u64 ^ 0xA5A5, "word {i}");
            }
            // Fetch-adds through the small pool: every old value once (back-pressured ones may
            // go out after later ones).
            let counter = dev.alloc(8, Access::RDMA_ALL)?;
            let rc = dev.import(&counter.export_rdma()?)?;
            let results = dev.alloc(8 * 64, Access::LOCAL_READ_WRITE)?;
            let mut pipe = Pipeline::new(8);
            let mut olds = Vec::new();
            for i in 0..500 {
                let res = results.slice(i % 64 * 8..i % 64 * 8 + 8);
                if let Some((old, _)) = bounded(pipe.push(ab.fetch_add(rc.slice(0..8), 1, res))).await? {
                    olds.push(old?);
                }
            }
            while let Some((old, _)) = bounded(pipe.next()).await? {
                olds.push(old?);
            }
            olds.sort_unstable();
            assert_eq!(olds, (0..500).collect::<Vec<u64>>());
            // As deep as the pool: nothing waits, each sees the count of those pushed before.
            let mut pipe = Pipeline::new(2);
            let mut olds = Vec::new();
            for i in 0..200 {
                let res = results.slice(i % 64 * 8..i % 64 * 8 + 8);
                if let Some((old, _)) = bounded(pipe.push(ab.fetch_add(rc.slice(0..8), 1, res))).await? {
                    olds.push(old?);
                }
            }
            while let Some((old, _)) = bounded(pipe.next()).await? {
                olds.push(old?);
            }
            assert_eq!(olds, (500..700).collect::<Vec<u64>>());
            Ok::<_, Error>(())
        })
        .unwrap();
}

/// Dropping a pipeline whose operations are in flight: they keep their memory until DOCA
/// is done (the peer's receives get intact data), and the context keeps working.
#[test]
fn dropping_a_pipeline_mid_flight_keeps_its_memory_alive() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let (_a, b, ab, _ba) = pair(&dev).await?;
            // Sends larger than the peer's ring (doca-soft's are 1 MiB at most) stay in flight
            // until the peer receives.
            const BIG: usize = (1 << 20) + 64 * 1024;
            let mems: Vec<_> = (0..3u8)
                .map(|k| {
                    let m = dev.alloc(BIG, Access::LOCAL_READ_WRITE)?;
                    m.buf().write(0, &pattern(BIG, 10 + k));
                    Ok::<_, Error>(m)
                })
                .collect::<Result<_>>()?;
            let mut pipe = Pipeline::new(4);
            for m in &mems {
                assert!(pipe.try_push(ab.send(m.buf())).is_ok());
            }
            let r = timeout(Duration::from_millis(20), pipe.next()).await;
            assert!(r.is_err(), "no send can finish before the peer posts a receive");
            drop(pipe);
            drop(mems);
            for k in 0..3u8 {
                let (msg, buf) = bounded(b.recv(dev.alloc(BIG, Access::LOCAL_READ_WRITE)?.buf())).await?;
                assert_eq!(msg?.len, BIG);
                assert!(buf.to_vec() == pattern(BIG, 10 + k), "dropped send {k} streamed intact data");
            }
            let m = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
            let rb = b.clone();
            let r = spawn_local(async move { rb.recv(dev_buf(8)).await });
            let (res, _) = bounded(ab.send(m.buf())).await?;
            res?;
            assert_eq!(bounded(r).await??.0?.len, 8);
            Ok::<_, Error>(())
        })
        .unwrap();
}

// Every operation future is a named type that is `Unpin` (it can be polled through
// `Pin::new` and stored anywhere) and `Debug`; a change that breaks either fails to compile.
const _: fn() = || {
    fn named<T: std::future::Future + Unpin + std::fmt::Debug>() {}
    named::<WriteFuture<'static>>();
    named::<ReadFuture<'static>>();
    named::<SendFuture<'static>>();
    named::<AtomicFuture<'static>>();
    named::<RecvFuture<'static>>();
};

/// A writer keeping its operations in a pipeline of a named future type, in a struct field.
struct Writer<'a> {
    conn: &'a Connection,
    remote: RemoteMemory,
    pipe: Pipeline<WriteFuture<'a>>,
}

impl Writer<'_> {
    /// Writes `value` at word `k` of the remote memory; returns a completed write's error.
    async fn put(&mut self, k: usize, value: u64, mut buf: async_doca::Buf) -> Result<()> {
        buf.write_u64(0, value);
        let op = self.conn.write(buf, self.remote.slice(k * 8..k * 8 + 8));
        match self.pipe.push(op).await {
            Some((r, _)) => r,
            None => Ok(()),
        }
    }

    async fn flush(&mut self) -> Result<()> {
        while let Some((r, _)) = self.pipe.next().await {
            r?;
        }
        Ok(())
    }
}

#[test]
fn a_pipeline_of_named_futures_in_a_struct() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let (_a, _b, ab, _ba) = pair(&dev).await?;
            let target = dev.alloc(64 * 8, Access::RDMA_ALL)?;
            let src = dev.alloc(64 * 8, Access::LOCAL_READ_WRITE)?;
            let mut w = Writer { conn: &ab, remote: dev.import(&target.export_rdma()?)?, pipe: Pipeline::new(8) };
            for i in 0..200usize {
                let k = i % 64;
                bounded(w.put(k, i as u64, src.slice(k * 8..k * 8 + 8))).await??;
            }
            bounded(w.flush()).await??;
            for k in 0..64 {
                let last = (0..200u64).rev().find(|i| *i as usize % 64 == k).unwrap();
                assert_eq!(target.slice(k * 8..k * 8 + 8).read_u64(0), last, "word {k}");
            }
            Ok::<_, Error>(())
        })
        .unwrap();
}

mod cross_process {
    use super::*;
    use crate::common::{hex, unhex, Reap};
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    const CONN_ENV: &str = "ASYNC_DOCA_TEST_RDMA_CONN";
    const MEM_ENV: &str = "ASYNC_DOCA_TEST_RDMA_MEM";
    const LEN: usize = 4096;

    /// The parent writes, reads and adds into the child's memory, then sends "go"; the child
    /// checks, does the same into the parent's memory, and sends "done".
    #[test]
    fn rdma_across_two_processes() {
        let rt = rt("0");
        let mut child = Reap(None);
        // Kept open until the child exits (closing it early would break the child's output).
        let mut out: Option<BufReader<std::process::ChildStdout>> = None;
        rt.block_on(async {
            let dev = Device::open_default()?;
            let rdma = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
            let mem = dev.alloc(LEN, Access::RDMA_ALL)?;
            mem.buf().write(0, &pattern(LEN, 40));
            let (blob, pending) = rdma.export()?;
            let mut c = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "cross_process::child_side", "--ignored", "--nocapture", "--test-threads=1"])
                .env(CONN_ENV, hex(&blob))
                .env(MEM_ENV, hex(&mem.export_rdma()?))
                .stdin(Stdio::null())
                // The child's blobs come on its stdout; its test summary stays out of ours.
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let out = out.insert(BufReader::new(c.stdout.take().unwrap()));
            child.0 = Some(c);
            // A blocking read, bounded by the child's own timeouts (it exits on failure).
            let mut line = String::new();
            let (conn_blob, mem_blob) = loop {
                line.clear();
                assert!(out.read_line(&mut line).unwrap() > 0, "the child exited before sending its blobs");
                // libtest may have printed "test child_side ... " on the same line.
                if let Some(at) = line.find("RDMA-CHILD ") {
                    let rest = line[at + "RDMA-CHILD ".len()..].trim();
                    let (c, m) = rest.split_once(' ').unwrap();
                    break (unhex(c), unhex(m));
                }
            };
            let conn = pending.connect(&conn_blob).await?;
            let remote = dev.import(&mem_blob)?;
            let local = dev.alloc(LEN, Access::LOCAL_READ_WRITE)?;

            let mut src = local.slice(8..LEN);
            src.write(0, &pattern(LEN - 8, 1));
            let (res, _) = bounded(conn.write(src, remote.slice(8..LEN))).await?;
            res?;
            let (res, back) = bounded(conn.read(remote.slice(8..LEN), local.slice(8..LEN))).await?;
            res?;
            assert_eq!(back.to_vec(), pattern(LEN - 8, 1));
            let (old, _) = bounded(conn.fetch_add(remote.slice(0..8), 10, local.slice(0..8))).await?;
            assert_eq!(old?, 0);
            let rdone = spawn_local({
                let rdma = rdma.clone();
                let buf = local.slice(0..64);
                async move { rdma.recv(buf).await }
            });
            let mut go = dev.alloc(2, Access::LOCAL_READ_WRITE)?.buf();
            go.write(0, b"go");
            let (res, _) = bounded(conn.send(go)).await?;
            res?;
            let (msg, buf) = bounded(rdone).await??;
            let msg = msg?;
            assert_eq!((msg.opcode, msg.imm), (Opcode::SendImm, Some(42)));
            assert_eq!(&buf.to_vec()[..msg.len], b"done");
            // The child wrote our memory and added to our first word.
            let mut expect = pattern(LEN, 40);
            expect[8..].copy_from_slice(&pattern(LEN - 8, 2));
            let w = u64::from_ne_bytes(expect[..8].try_into().unwrap()) + 5;
            expect[..8].copy_from_slice(&w.to_ne_bytes());
            assert!(mem.buf().to_vec() == expect, "the child's writes and fetch_add landed");
            Ok::<_, Error>(())
        })
        .unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(out.as_mut().unwrap(), &mut rest).unwrap();
        let status = child.0.take().unwrap().wait().unwrap();
        assert!(status.success(), "child failed: {status}\n{rest}");
    }

    /// The other process of `rdma_across_two_processes`; run only by that test.
    #[test]
    #[ignore = "started by rdma_across_two_processes as its peer process"]
    fn child_side() {
        let conn_blob = unhex(&std::env::var(CONN_ENV).expect("started by the parent test"));
        let mem_blob = unhex(&std::env::var(MEM_ENV).expect("started by the parent test"));
        rt("0")
            .block_on(async {
                let dev = Device::open_default()?;
                let rdma = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
                let mem = dev.alloc(LEN, Access::RDMA_ALL)?;
                let (blob, pending) = rdma.export()?;
                let conn = pending.connect(&conn_blob).await?;
                let remote = dev.import(&mem_blob)?;
                println!("RDMA-CHILD {} {}", hex(&blob), hex(&mem.export_rdma()?));

                let local = dev.alloc(LEN, Access::LOCAL_READ_WRITE)?;
                let (msg, buf) = bounded(rdma.recv(local.slice(0..64))).await?;
                let msg = msg?;
                assert_eq!(&buf.to_vec()[..msg.len], b"go");
                // The parent's write and fetch_add are visible (they completed before "go").
                assert_eq!(mem.slice(8..LEN).to_vec(), pattern(LEN - 8, 1));
                assert_eq!(mem.buf().read_u64(0), 10);

                let mut src = local.slice(8..LEN);
                src.write(0, &pattern(LEN - 8, 2));
                let (res, _) = bounded(conn.write(src, remote.slice(8..LEN))).await?;
                res?;
                let (res, back) = bounded(conn.read(remote.slice(0..LEN), local.slice(0..LEN))).await?;
                res?;
                assert_eq!(back.to_vec()[8..], pattern(LEN - 8, 2)[..]);
                let (old, _) = bounded(conn.fetch_add(remote.slice(0..8), 5, local.slice(0..8))).await?;
                let mut first = [0u8; 8];
                first.copy_from_slice(&pattern(8, 40));
                assert_eq!(old?, u64::from_ne_bytes(first));
                let mut done = local.slice(100..104);
                done.write(0, b"done");
                let (res, _) = bounded(conn.send_imm(done, 42)).await?;
                res?;
                Ok::<_, Error>(())
            })
            .unwrap();
    }
}

/// Listens on a free port (bound then released; retried on the rare race).
fn listen_free(r: &Rdma) -> async_doca::rdma::Listener {
    for _ in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if let Ok(l) = r.listen(port) {
            return l;
        }
    }
    panic!("no free port");
}

/// Connection management as futures: a server accepts 4 clients concurrently (by IPv4 and
/// IPv6), each gets the private data and echoes a message; a rejected client and a client
/// of a closed port fail with ConnectionLost; a disconnect completes the peer's `closed()`
/// and fails its later sends with ConnectionLost, while the server keeps serving.
#[test]
fn connect_by_address_accept_reject_disconnect() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let server = Rdma::builder(&dev).max_connections(8).build().await?;
            let listener = listen_free(&server);
            let port = listener.port();
            let mut clients = Vec::new();
            for i in 0..4u8 {
                let c = Rdma::builder(&dev).build().await?;
                let addr: std::net::SocketAddr =
                    if i % 2 == 0 { ([127, 0, 0, 1], port).into() } else { "[::1]:0".parse().unwrap() };
                let addr = std::net::SocketAddr::new(addr.ip(), port);
                clients.push(spawn_local(async move {
                    let conn = c.connect(addr).await?;
                    assert_eq!(conn.private_data(), b"hi");
                    let mem = conn_mem(&c, 64);
                    let mut src = mem.slice(0..4);
                    src.write(0, &[b'c', b'l', b'i', b'0' + i]);
                    let (r, _) = conn.send(src).await;
                    r?;
                    let (r, buf) = c.recv(mem.slice(8..16)).await;
                    assert_eq!(r?.len, 4);
                    assert_eq!(buf.to_vec()[..4], [b'C', b'L', b'I', b'0' + i]);
                    Ok::<_, Error>((c, conn))
                }));
            }
            let mut at_server = Vec::new();
            for _ in 0..4 {
                let req = bounded(listener.request()).await??;
                assert!(req.peer_addr().is_some());
                at_server.push(spawn_local(req.accept(b"hi")));
            }
            let mut conns = Vec::new();
            for a in at_server {
                conns.push(bounded(a).await???);
            }
            let mem = conn_mem(&server, 4096);
            for k in 0..4 {
                let (r, buf) = bounded(server.recv(mem.slice(64 * k..64 * k + 64))).await?;
                let got = r?;
                let mut reply = buf.to_vec()[..4].to_vec();
                reply.make_ascii_uppercase();
                let conn = conns.iter().find(|c| c.id() == got.conn).unwrap();
                let mut out = mem.slice(1024 + 64 * k..1024 + 64 * k + 4);
                out.write(0, &reply);
                let (r, _) = conn.send(out).await;
                r?;
            }
            let mut kept = Vec::new();
            for c in clients {
                kept.push(bounded(c).await???);
            }
            // A rejection and a closed port.
            let reject = spawn_local({
                let c = Rdma::builder(&dev).build().await?;
                async move { c.connect(([127, 0, 0, 1], port).into()).await }
            });
            bounded(listener.request()).await??.reject()?;
            assert_eq!(bounded(reject).await??.unwrap_err().kind(), ErrorKind::ConnectionLost);
            let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let c = Rdma::builder(&dev).build().await?;
            let e = bounded(c.connect(([127, 0, 0, 1], closed_port).into())).await?.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConnectionLost);
            // A client disconnects: the server's connection closes, its sends fail.
            let (_c0, conn0) = &kept[0];
            conn0.disconnect()?;
            let peer = conns.iter().find(|c| c.peer_addr().is_some()).unwrap().clone();
            let closed = futures_closed(&conns).await;
            let (r, _) = closed.send(mem.slice(0..4)).await;
            assert_eq!(r.unwrap_err().kind(), ErrorKind::ConnectionLost);
            drop(peer);
            Ok::<(), Error>(())
        })
        .unwrap();
}

/// A server that answers requests from tasks of its own (not at once) meets clients that
/// left after their request: accepting such a request fails with ConnectionLost (not a bad
/// state: it is the peer's doing, found by chaos_links), rejecting it succeeds (the client
/// did not connect, which is what the rejection asked for), and the listener serves the next
/// client.
#[test]
fn answering_a_request_whose_client_left() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let server = Rdma::builder(&dev).max_connections(8).build().await?;
            let listener = listen_free(&server);
            let port = listener.port();
            for answer_with_accept in [true, false, true] {
                let client = Rdma::builder(&dev).build().await?;
                let connecting = spawn_local(async move {
                    let r = client.connect(([127, 0, 0, 1], port).into()).await;
                    drop(r);
                });
                let req = bounded(listener.request()).await??;
                // The client goes: its context and sockets with it.
                connecting.cancel();
                // Let the server's provider see the handshake end before the answer.
                async_doca::time::sleep(Duration::from_millis(100)).await;
                if answer_with_accept {
                    let e = bounded(req.accept(b"late")).await?.unwrap_err();
                    assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
                } else {
                    req.reject()?;
                }
            }
            // Still serving.
            let client = Rdma::builder(&dev).build().await?;
            let c =
                spawn_local(async move { client.connect(([127, 0, 0, 1], port).into()).await.map(|c| (client, c)) });
            let conn = bounded(bounded(listener.request()).await??.accept(b"ok")).await??;
            let (_client, cconn) = bounded(c).await???;
            assert_eq!(cconn.private_data(), b"ok");
            drop(conn);
            Ok::<(), Error>(())
        })
        .unwrap();
}

fn conn_mem(r: &Rdma, n: usize) -> async_doca::Memory {
    r.device().alloc(n, Access::LOCAL_READ_WRITE).unwrap()
}

/// The first of `conns` whose peer disconnects.
async fn futures_closed(conns: &[Connection]) -> Connection {
    loop {
        for c in conns {
            if timeout(Duration::from_millis(10), c.closed()).await.is_ok() {
                return c.clone();
            }
        }
    }
}

/// Completed tasks are kept per context and kind and re-initialised for the next operation
/// of that kind: nothing of an earlier operation (buffer, length, target, connection,
/// immediate, operands, user data) may leak into a later one. Every kind alternates sizes,
/// targets and connections; every result is checked. Then a failed operation, and a stop
/// of the context holding kept tasks (it must reach IDLE: kept tasks are freed first).
#[test]
fn reused_tasks_carry_nothing_stale() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let a = Rdma::builder(&dev).max_connections(2).build().await?;
            let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
            let c = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
            let ((a1, pa1), (a2, pa2)) = (a.export()?, a.export()?);
            let ((bb, pb), (cb, pc)) = (b.export()?, c.export()?);
            let ab = pa1.connect(&bb).await?;
            let ac = pa2.connect(&cb).await?;
            let ba = pb.connect(&a1).await?;
            let ca = pc.connect(&a2).await?;
            let targets = [dev.alloc(4096, Access::RDMA_ALL)?, dev.alloc(4096, Access::RDMA_ALL)?];
            let remotes = [dev.import(&targets[0].export_rdma()?)?, dev.import(&targets[1].export_rdma()?)?];
            let local = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
            let conns = [(&ab, &b, ba.id()), (&ac, &c, ca.id())];

            for i in 0..40usize {
                let (conn, peer, peer_id) = conns[i % 2];
                let t = i % 2;
                let len = [8, 1000, 1, 4096, 300][i % 5];
                let at = [0, 64, 8][i % 3];
                let len_at = len.min(4096 - at);
                let seed = i as u8;

                // write, to alternating targets, sizes and offsets
                let mut src = local.slice(0..len_at);
                src.write(0, &pattern(len_at, seed));
                let (res, _) = bounded(conn.write(src, remotes[t].slice(at..at + len_at))).await?;
                res?;
                assert_eq!(targets[t].slice(at..at + len_at).to_vec(), pattern(len_at, seed), "write {i}");

                // write_imm: data and a fresh immediate each time
                let mut src = local.slice(0..len_at);
                src.write(0, &pattern(len_at, seed ^ 0x55));
                let rp = peer.clone();
                let r = spawn_local(async move { rp.recv(dev_buf(16)).await });
                let (res, _) = bounded(conn.write_imm(src, remotes[t].slice(at..at + len_at), 1000 + i as u32)).await?;
                res?;
                let (msg, _) = bounded(r).await??;
                let msg = msg?;
                assert_eq!((msg.opcode, msg.imm, msg.conn), (Opcode::WriteImm, Some(1000 + i as u32), peer_id), "{i}");
                assert_eq!(targets[t].slice(at..at + len_at).to_vec(), pattern(len_at, seed ^ 0x55), "write_imm {i}");

                // send and send_imm: the message length is the new source's, not an old one
                for imm in [None, Some(7 * i as u32)] {
                    let mut src = local.slice(0..len);
                    src.write(0, &pattern(len, seed.wrapping_add(3)));
                    let rp = peer.clone();
                    let r = spawn_local(async move { rp.recv(dev_buf(4096)).await });
                    let (res, _) = match imm {
                        None => bounded(conn.send(src)).await?,
                        Some(v) => bounded(conn.send_imm(src, v)).await?,
                    };
                    res?;
                    let (msg, buf) = bounded(r).await??;
                    let msg = msg?;
                    assert_eq!((msg.len, msg.imm, msg.conn), (len, imm, peer_id), "send {i}");
                    assert_eq!(buf.to_vec()[..len], pattern(len, seed.wrapping_add(3))[..], "send {i}");
                }

                // read back what write_imm placed, into a zeroed destination of this length
                let mut dst = local.slice(0..len_at);
                dst.write(0, &vec![0; len_at]);
                let (res, dst) = bounded(conn.read(remotes[t].slice(at..at + len_at), dst)).await?;
                res?;
                assert_eq!(dst.to_vec(), pattern(len_at, seed ^ 0x55), "read {i}");

                // atomics: alternating targets, operands and result buffers
                let word = 8 * (i % 4);
                targets[t].slice(word..word + 8).write_u64(0, 100 * i as u64);
                let result = local.slice(512 + word..520 + word);
                let (old, result) =
                    bounded(conn.fetch_add(remotes[t].slice(word..word + 8), i as u64 + 1, result)).await?;
                assert_eq!(old?, 100 * i as u64, "fetch_add {i}");
                assert_eq!(targets[t].slice(word..word + 8).read_u64(0), 100 * i as u64 + i as u64 + 1);
                let now = 101 * i as u64 + 1;
                let (old, _) = bounded(conn.compare_swap(remotes[t].slice(word..word + 8), now + 1, 5, result)).await?;
                assert_eq!(old?, now, "a failed compare_swap {i}");
                let result = local.slice(1024..1032);
                let (old, _) =
                    bounded(conn.compare_swap(remotes[t].slice(word..word + 8), now, 9 + i as u64, result)).await?;
                assert_eq!(old?, now, "compare_swap {i}");
                assert_eq!(targets[t].slice(word..word + 8).read_u64(0), 9 + i as u64);
            }

            // The context holds kept tasks of every kind: stopping it still reaches IDLE.
            drop((ab, ac, ba, ca));
            bounded(a.restart()).await??;

            // Started again, it keeps tasks again: writes on a new connection land, and a
            // failed one (memory without remote write access) is not kept.
            let d = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
            let ((a3, pa3), (db, pd)) = (a.export()?, d.export()?);
            let ad = pa3.connect(&db).await?;
            let _da = pd.connect(&a3).await?;
            for i in 0..3u64 {
                let mut src = local.slice(0..8);
                src.write_u64(0, 4242 + i);
                let (res, _) = bounded(ad.write(src, remotes[1].slice(0..8))).await?;
                res?;
                assert_eq!(targets[1].slice(0..8).read_u64(0), 4242 + i);
            }
            let ro = dev.alloc(64, Access::LOCAL_READ_WRITE | Access::RDMA_READ)?;
            let ro_remote = dev.import(&ro.export_rdma()?)?;
            let (res, _) = bounded(ad.write(local.slice(0..8), ro_remote.slice(0..8))).await?;
            assert!(res.is_err(), "a write into read-only memory fails");
            Ok::<_, Error>(())
        })
        .unwrap();
}

/// Descriptors are kept per registration and lent again to the next operation on the same
/// bytes (`mem::descriptors`): what one task left in a descriptor must not leak into the
/// next. A receive leaves a short payload, a read a full one, and the same bytes then serve
/// as a source, a destination and an atomic's result.
#[test]
fn descriptors_lent_again_carry_nothing_stale() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let (a, b, ab, ba) = pair(&dev).await?;
            let target = dev.alloc(4096, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            let local = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
            let peer = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
            for round in 0..3u8 {
                // A 3-byte message into these 64 bytes: the receive's payload is 3 bytes.
                let r = spawn_local({
                    let (b, buf) = (b.clone(), peer.slice(0..64));
                    async move { b.recv(buf).await }
                });
                let mut msg = local.slice(100..103);
                msg.write(0, b"abc");
                bounded(ab.send(msg)).await?.0?;
                let (got, _) = bounded(r).await??;
                assert_eq!(got?.len, 3, "round {round}");
                // The same 64 bytes as a source: all 64 go, not the 3 of the receive.
                let mut all = peer.slice(0..64);
                all.write(0, &pattern(64, round));
                let r = spawn_local({
                    let buf = local.slice(0..4096);
                    let a = a.clone();
                    async move { a.recv(buf).await }
                });
                bounded(ba.send(all)).await?.0?;
                let (got, buf) = bounded(r).await??;
                assert_eq!(got?.len, 64, "a source lent after a receive is whole again (round {round})");
                assert_eq!(buf.to_vec()[..64], pattern(64, round)[..]);

                // Read twice into the same bytes: the second read starts from an empty payload.
                for k in 0..2u8 {
                    target.slice(0..64).write(0, &pattern(64, round ^ k ^ 0x40));
                    let (res, dst) = bounded(ab.read(remote.slice(0..64), local.slice(1024..1088))).await?;
                    res?;
                    assert_eq!(dst.to_vec(), pattern(64, round ^ k ^ 0x40), "read {k} of round {round}");
                }
                // Those bytes as a write's source, then as an atomic's result (first 8).
                let (res, _) = bounded(ab.write(local.slice(1024..1088), remote.slice(2048..2112))).await?;
                res?;
                assert_eq!(target.slice(2048..2112).to_vec(), pattern(64, round ^ 1 ^ 0x40));
                target.slice(8..16).write_u64(0, 10 * round as u64);
                let (old, res) = bounded(ab.fetch_add(remote.slice(8..16), 1, local.slice(1024..1032))).await?;
                assert_eq!((old?, res.read_u64(0)), (10 * round as u64, 10 * round as u64));
            }
            Ok::<_, Error>(())
        })
        .unwrap();
}

/// Operations on the same bytes in flight together each get a descriptor of their own (a
/// cache entry each while their set has one, then from the context's inventory), and more
/// distinct slices than the cache holds evict each other without harm.
#[test]
fn the_same_bytes_in_flight_together_and_more_slices_than_the_cache() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let (_a, _b, ab, _ba) = pair(&dev).await?;
            let target = dev.alloc(1 << 16, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            let local = dev.alloc(1 << 16, Access::LOCAL_READ_WRITE)?;
            local.slice(0..8).write_u64(0, 0xfeed);
            let mut pipe = Pipeline::new(16);
            for k in 0..16 {
                // Sixteen writes from the same 8 bytes at once.
                if let Some((res, _)) = pipe.push(ab.write(local.slice(0..8), remote.slice(k * 8..k * 8 + 8))).await {
                    res?;
                }
            }
            while let Some((res, _)) = pipe.next().await {
                res?;
            }
            for k in 0..16 {
                assert_eq!(target.slice(k * 8..k * 8 + 8).read_u64(0), 0xfeed, "write {k}");
            }
            // 300 distinct slices (the cache holds 128 per registration), 64 in flight, twice.
            let mut pipe = Pipeline::new(64);
            for pass in 0..2u64 {
                for k in 0..300usize {
                    let mut src = local.slice(64 + k * 16..64 + k * 16 + 16);
                    src.write_u64(0, pass * 1000 + k as u64);
                    src.write_u64(8, !(pass * 1000 + k as u64));
                    let dst = remote.slice(8192 + k * 16..8192 + k * 16 + 16);
                    if let Some((res, _)) = pipe.push(ab.write(src, dst)).await {
                        res?;
                    }
                }
                while let Some((res, _)) = pipe.next().await {
                    res?;
                }
                for k in 0..300usize {
                    let t = target.slice(8192 + k * 16..8192 + k * 16 + 16);
                    assert_eq!((t.read_u64(0), t.read_u64(8)), (pass * 1000 + k as u64, !(pass * 1000 + k as u64)));
                }
            }
            Ok::<_, Error>(())
        })
        .unwrap();
}
