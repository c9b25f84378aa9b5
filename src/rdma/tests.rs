//! The rules of the named operation futures (`ops.rs`) that the public API cannot observe:
//! nothing is submitted before the first poll, a future dropped unpolled gives every buffer
//! back, and a check that fails before submission resolves at the first poll. And the rules
//! of a [`Window`](super::Window): results in push order (failed checks included), waiting
//! instead of failing when the task pool is smaller than the window, and memory kept until
//! DOCA is done when a window or a push is dropped.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::{Connection, Rdma};
use crate::{Access, Device, ErrorKind, Memory, RemoteMemory, Result};

/// Two connected contexts on the current executor and 64 bytes on each side.
pub(in crate::rdma) struct Loopback {
    pub(in crate::rdma) a: Rdma,
    /// `a`'s connection to `b`.
    pub(in crate::rdma) ab: Connection,
    /// `b`'s memory ...
    pub(in crate::rdma) target: Memory,
    /// ... as `a` imported it.
    pub(in crate::rdma) remote: RemoteMemory,
    /// `a`'s memory.
    pub(in crate::rdma) local: Memory,
    /// What must outlive the test: `b` and its connection to `a`.
    pub(in crate::rdma) _b: (Rdma, Connection),
}

pub(in crate::rdma) async fn loopback() -> Result<Loopback> {
    let dev = Device::open_default()?;
    let (a, b, ab, ba) = crate::testkit::rdma_pair(&dev).await?;
    let target = dev.alloc(64, Access::RDMA_ALL)?;
    let remote = dev.import(&target.export_rdma()?)?;
    let local = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
    Ok(Loopback { a, ab, target, remote, local, _b: (b, ba) })
}

/// A [`Loopback`] whose `a` has a task pool of `max_tasks` per kind, with `bytes` of memory
/// on each side.
pub(in crate::rdma) async fn small_pool_loopback(max_tasks: u32, bytes: usize) -> Result<Loopback> {
    let dev = Device::open_default()?;
    let a = Rdma::builder(&dev).max_tasks(max_tasks).build().await?;
    let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
    let (ab, ba) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
    let target = dev.alloc(bytes, Access::RDMA_ALL)?;
    let remote = dev.import(&target.export_rdma()?)?;
    let local = dev.alloc(bytes, Access::LOCAL_READ_WRITE)?;
    Ok(Loopback { a, ab, target, remote, local, _b: (b, ba) })
}

/// Polls `f` once, with a waker that does nothing.
pub(in crate::rdma) fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_future_dropped_before_its_first_poll_submits_nothing_and_keeps_nothing() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = loopback().await?;
            local.slice(0..8).write_u64(0, 0x5555);
            let handles = local.handles();
            let ctx = &a.inner.ctx;

            // Each operation kind: created (it holds its buffer), then dropped unpolled.
            let check = |what: &str, held: usize, mem: &Memory| {
                assert_eq!(ctx.outstanding_tasks(), 0, "{what}: nothing allocated before the first poll");
                assert_eq!(mem.handles(), held, "{what}: the buffers are held exactly while the future lives");
            };
            let f = ab.write(local.slice(0..8), remote.slice(0..8));
            check("write", handles + 1, &local);
            drop(f);
            check("write", handles, &local);
            let f = ab.write_imm(local.slice(0..8), remote.slice(8..16), 3);
            check("write_imm", handles + 1, &local);
            drop(f);
            let f = ab.read(remote.slice(16..24), local.slice(8..16));
            check("read", handles + 1, &local);
            drop(f);
            let f = ab.send(local.slice(0..8));
            check("send", handles + 1, &local);
            drop(f);
            let f = ab.send_imm(local.slice(0..8), 1);
            check("send_imm", handles + 1, &local);
            drop(f);
            let f = ab.fetch_add(remote.slice(24..32), 1, local.slice(16..24));
            check("fetch_add", handles + 1, &local);
            drop(f);
            let f = ab.compare_swap(remote.slice(24..32), 0, 9, local.slice(16..24));
            check("compare_swap", handles + 1, &local);
            drop(f);
            let f = a.recv(local.slice(32..64));
            check("recv", handles + 1, &local);
            drop(f);
            check("all", handles, &local);

            // Nothing reached the peer: the connection still works and the target is
            // untouched where the dropped operations aimed.
            let (r, _) = ab.write(local.slice(0..8), remote.slice(56..64)).await;
            r?;
            assert_eq!(target.slice(56..64).read_u64(0), 0x5555);
            assert!(target.slice(0..32).to_vec().iter().all(|&b| b == 0), "no dropped write or atomic ran");
            assert_eq!(local.slice(8..16).read_u64(0), 0, "the dropped read ran");
            assert_eq!(ctx.outstanding_tasks(), 0);
            check("after", handles, &local);
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_failed_check_resolves_at_the_first_poll_with_the_buffer() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = loopback().await?;
            let handles = local.handles();
            let ctx = &a.inner.ctx;

            let expect = |what: &str, p: Poll<(Result<()>, crate::Buf)>, len: usize| match p {
                Poll::Ready((Err(e), buf)) => {
                    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{what}: {e}");
                    assert!(e.to_string().contains(what), "{what}: the error names the operation: {e}");
                    assert_eq!(buf.len(), len, "{what}: the caller's buffer comes back");
                    assert_eq!(ctx.outstanding_tasks(), 0, "{what}: nothing submitted");
                }
                other => panic!("{what}: expected an error at once, got {:?}", other.map(|(r, _)| r)),
            };
            let mut f = ab.write(local.slice(0..16), remote.slice(0..8));
            expect("rdma.write", poll_once(&mut f), 16);
            drop(f);
            let mut f = ab.write_imm(local.slice(0..16), remote.slice(0..8), 1);
            expect("rdma.write_imm", poll_once(&mut f), 16);
            drop(f);
            let mut f = ab.read(remote.slice(0..8), local.slice(0..9));
            expect("rdma.read", poll_once(&mut f), 9);
            drop(f);
            let mut f = ab.fetch_add(remote.slice(0..8), 1, local.slice(0..4));
            let p = poll_once(&mut f).map(|(r, b)| (r.map(drop), b));
            expect("rdma.fetch_add", p, 4);
            drop(f);
            let mut f = ab.compare_swap(remote.slice(0..7), 0, 1, local.slice(0..8));
            let p = poll_once(&mut f).map(|(r, b)| (r.map(drop), b));
            expect("rdma.compare_swap", p, 8);
            drop(f);
            assert_eq!(local.handles(), handles, "every buffer given back");
            assert!(target.slice(..).to_vec().iter().all(|&b| b == 0));
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn an_operation_on_a_destroyed_context_fails_at_the_first_poll_with_the_buffer() {
    // The contexts belong to `block_on`'s executor and are destroyed when it returns.
    let Loopback { a, ab, remote, local, target: _target, _b } =
        crate::testkit::runtime().block_on(loopback()).unwrap();
    let handles = local.handles();
    let mut f = ab.write(local.slice(0..8), remote.slice(0..8));
    match poll_once(&mut f) {
        Poll::Ready((Err(e), buf)) => {
            assert_eq!(e.kind(), ErrorKind::BadState, "{e}");
            assert!(e.to_string().starts_with("rdma.write"), "{e}");
            assert_eq!(buf.len(), 8);
        }
        other => panic!("expected an error at once, got {:?}", other.map(|(r, _)| r)),
    }
    drop(f);
    let mut f = a.recv(local.slice(0..8));
    assert!(matches!(poll_once(&mut f), Poll::Ready((Err(ref e), _)) if e.kind() == ErrorKind::BadState));
    drop(f);
    assert_eq!(local.handles(), handles, "every buffer given back");
}

/// An operation submits with its doorbell when its poll may progress the PE inline, and
/// defers the doorbell otherwise (the poll's budget spent, see `Core::take_inline_progress`).
/// With a budget of 4 operations per poll, a pipeline of sends takes both paths in turn:
/// the messages must still arrive in submission order, each once.
#[test]
fn sends_submitted_with_and_without_their_doorbell_arrive_in_order() {
    use super::Pipeline;
    const N: u32 = 600;
    let rt = crate::Runtime::builder().cpus("0".parse().unwrap()).task_batch(4).build().unwrap();
    rt.block_on(async {
        let Loopback { ab, local, _b, .. } = loopback().await?;
        let b = &_b.0;
        let inbox = Device::open_default()?.alloc(32 * 8, Access::LOCAL_READ_WRITE)?;
        // Receives first, so that every message finds one posted.
        let mut recvs = Pipeline::new(32);
        for k in 0..32 {
            assert!(recvs.try_push(b.recv(inbox.slice(k * 8..k * 8 + 8))).is_ok());
        }
        let sender = async {
            let mut sends = Pipeline::new(16);
            for i in 0..N {
                let k = (i % 8) as usize;
                if let Some((r, _)) = sends.push(ab.send_imm(local.slice(k * 8..k * 8 + 8), i)).await {
                    r?;
                }
            }
            while let Some((r, _)) = sends.next().await {
                r?;
            }
            Ok::<_, crate::Error>(())
        };
        let receiver = async {
            for i in 0..N {
                let (r, buf) = recvs.next().await.expect("a receive is always posted");
                assert_eq!(r?.imm, Some(i), "message {i} out of order");
                if i + 32 < N {
                    assert!(recvs.try_push(b.recv(buf)).is_ok());
                }
            }
            Ok::<_, crate::Error>(())
        };
        let (s, r) = futures_lite::future::zip(sender, receiver).await;
        s.and(r)
    })
    .unwrap();
}

/// Completion slots in use on the current executor.
fn slots_in_use() -> usize {
    crate::executor::local::with_current(|core| core.slots.in_use()).expect("inside the runtime")
}

#[test]
fn a_window_returns_every_result_in_push_order_failed_checks_included() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, target, remote, local, _b, .. } = loopback().await?;
            let b = &_b.0;
            let handles = local.handles();
            let inbox = Device::open_default()?.alloc(16, Access::LOCAL_READ_WRITE)?;
            let recv = crate::spawn_local({
                let (b, buf) = (b.clone(), inbox.slice(0..16));
                async move { b.recv(buf).await.0 }
            });
            let mut w = ab.window(3);
            let mut results = Vec::new();
            let mut take = |r: Option<(Result<()>, crate::Buf)>| {
                if let Some((r, buf)) = r {
                    results.push((r.map_err(|e| e.kind()), buf.len()));
                }
            };
            for i in 0..4u64 {
                let mut src = local.slice(i as usize * 8..i as usize * 8 + 8);
                src.write_u64(0, 100 + i);
                take(w.write(src, remote.slice(i as usize * 8..i as usize * 8 + 8)).await);
            }
            // A source longer than its target fails its check, in its turn.
            take(w.write(local.slice(0..16), remote.slice(0..8)).await);
            target.slice(40..48).write_u64(0, 7);
            take(w.read(remote.slice(40..48), local.slice(48..56)).await);
            take(w.send_imm(local.slice(0..8), 9).await);
            while let Some(r) = w.next().await {
                take(Some(r));
            }
            let ok = Ok(());
            let want = [(ok, 8), (ok, 8), (ok, 8), (ok, 8), (Err(ErrorKind::InvalidArgument), 16), (ok, 8), (ok, 8)];
            assert_eq!(results, want, "one result per push, in push order");
            for i in 0..4 {
                assert_eq!(target.slice(i * 8..i * 8 + 8).read_u64(0), 100 + i as u64);
            }
            assert_eq!(local.slice(48..56).read_u64(0), 7, "the read landed");
            let msg = recv.await??;
            assert_eq!((msg.len, msg.imm), (8, Some(9)));
            assert_eq!(local.handles(), handles, "every buffer came back");
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_window_deeper_than_the_task_pool_waits_instead_of_failing() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = small_pool_loopback(4, 64 * 8).await?;
            let mut w = ab.window(16);
            let mut done = 0u64;
            for i in 0..300u64 {
                let k = (i % 64) as usize;
                let mut src = local.slice(k * 8..k * 8 + 8);
                src.write_u64(0, i);
                // The slot's earlier value must have landed before it is rewritten: the
                // window holds fewer than 64 operations.
                if let Some((r, _)) = w.write(src, remote.slice(k * 8..k * 8 + 8)).await {
                    r?;
                    done += 1;
                }
                assert!(a.inner.ctx.outstanding_tasks() <= 4, "never more tasks than the pool");
            }
            while let Some((r, _)) = w.next().await {
                r?;
                done += 1;
            }
            assert_eq!(done, 300);
            for k in 0..64u64 {
                let last = 300 - 1 - (300 - 1 - k) % 64;
                assert_eq!(target.slice(k as usize * 8..k as usize * 8 + 8).read_u64(0), last);
            }
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_full_window_rings_its_deferred_doorbells_once_per_batch() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = small_pool_loopback(64, 16 * 8).await?;
            let rec = a.inner.ctx.record();
            let (depth, n) = (16usize, 640u64);
            let mut w = ab.window(depth);
            let before = rec.doorbells.get();
            let mut done = 0u64;
            for i in 0..n {
                let k = (i % depth as u64) as usize;
                let mut src = local.slice(k * 8..k * 8 + 8);
                src.write_u64(0, i);
                if let Some((r, _)) = w.write(src, remote.slice(k * 8..k * 8 + 8)).await {
                    r?;
                    done += 1;
                }
            }
            while let Some((r, _)) = w.next().await {
                r?;
                done += 1;
            }
            assert_eq!(done, n);
            // A window that waits for its oldest result collects every completion there is,
            // so its next `depth` pushes find theirs done and defer their doorbells to one
            // flush. Stopping at the oldest result rang a doorbell every one or two pushes.
            let rung = rec.doorbells.get() - before;
            assert!(rung >= 1, "the deferred doorbells were rung");
            assert!(
                rung <= n as usize / depth + 2,
                "{rung} doorbells for {n} writes in a window of {depth}: not batched"
            );
            for k in 0..depth as u64 {
                assert_eq!(target.slice(k as usize * 8..k as usize * 8 + 8).read_u64(0), n - depth as u64 + k);
            }
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

/// Without inline progress every operation parks; an operation future alone (nothing of
/// the executor in flight, no task waiting) goes with its doorbell, while futures behind it
/// in the same poll, and a window's batch, share one deferred doorbell
/// (`Core::submit_would_be_alone`).
#[test]
fn a_lone_parked_operation_rings_at_submit_and_a_batch_behind_it_defers() {
    crate::Runtime::builder()
        .cpus("0".parse().unwrap())
        .inline_progress(false)
        .build()
        .unwrap()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = small_pool_loopback(64, 16 * 8).await?;
            let rec = a.inner.ctx.record();
            let before = rec.doorbells.get();
            for i in 0..10u64 {
                let mut src = local.slice(0..8);
                src.write_u64(0, i);
                ab.write(src, remote.slice(0..8)).await.0?;
                assert_eq!(target.slice(0..8).read_u64(0), i);
            }
            assert_eq!(rec.doorbells.get(), before, "a lone operation's doorbell was deferred");
            // Three writes polled together (one poll of the zip submits all three): the first
            // alone goes with its doorbell, the two behind it share one.
            let (mut x, mut y, mut z) = (local.slice(0..8), local.slice(8..16), local.slice(16..24));
            x.write_u64(0, 20);
            y.write_u64(0, 21);
            z.write_u64(0, 22);
            let (rx, (ry, rz)) = futures_lite::future::zip(
                ab.write(x, remote.slice(0..8)),
                futures_lite::future::zip(ab.write(y, remote.slice(8..16)), ab.write(z, remote.slice(16..24))),
            )
            .await;
            rx.0?;
            ry.0?;
            rz.0?;
            for (k, v) in [20u64, 21, 22].into_iter().enumerate() {
                assert_eq!(target.slice(k * 8..k * 8 + 8).read_u64(0), v);
            }
            assert_eq!(rec.doorbells.get() - before, 1, "the writes behind the first share one doorbell");
            let before = rec.doorbells.get();
            // A window's sixteen writes, pushed in one poll, share one deferred doorbell.
            let mut w = ab.window(16);
            for k in 0..16usize {
                let mut src = local.slice(k * 8..k * 8 + 8);
                src.write_u64(0, 100 + k as u64);
                assert!(w.write(src, remote.slice(k * 8..k * 8 + 8)).await.is_none(), "a window with room");
            }
            while let Some((r, _)) = w.next().await {
                r?;
            }
            assert_eq!(rec.doorbells.get() - before, 1, "the window's batch shares one doorbell");
            for k in 0..16usize {
                assert_eq!(target.slice(k * 8..k * 8 + 8).read_u64(0), 100 + k as u64);
            }
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_dropped_window_or_push_keeps_the_memory_until_doca_is_done() {
    let rt = crate::Runtime::builder().cpus("0".parse().unwrap()).build().unwrap();
    rt.block_on(async {
        let Loopback { a, ab, target, remote, local, _b } = small_pool_loopback(2, 64).await?;
        local.slice(0..8).write_u64(0, 0xabc);
        let (handles, slots) = (local.handles(), slots_in_use());
        let outstanding = || a.inner.ctx.outstanding_tasks();

        let mut w = ab.window(4);
        for k in 0..2 {
            assert!(poll_once(&mut w.write(local.slice(0..8), remote.slice(k * 8..k * 8 + 8))).is_ready());
        }
        // The pool (2 tasks) is spent: the third push waits, and dropping it takes nothing
        // out of the window and gives its buffer back.
        let mut third = w.write(local.slice(0..8), remote.slice(16..24));
        assert!(poll_once(&mut third).is_pending());
        drop(third);
        assert_eq!((w.len(), local.handles(), outstanding()), (2, handles + 2, 2));
        assert_eq!(slots_in_use(), slots, "a window's operations run on held records, not slots");
        // Dropped with both writes in flight (submitted, doorbell not yet rung): their
        // records keep the buffers until the completions arrive.
        drop(w);
        assert_eq!(local.handles(), handles + 2, "in-flight memory is kept");
        until(|| a.inner.ctx.outstanding_tasks() == 0).await;
        assert_eq!((local.handles(), outstanding()), (handles, 0), "released once DOCA was done");
        assert_eq!(target.slice(0..16).to_vec(), [0xabc_u64.to_ne_bytes(), 0xabc_u64.to_ne_bytes()].concat());
        assert_eq!(target.slice(16..24).read_u64(0), 0, "the dropped push submitted nothing");
        Ok::<_, crate::Error>(())
    })
    .unwrap();
}

#[test]
fn a_dropped_receive_window_keeps_its_buffers_posted_until_the_context_flushes_them() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, local, _b, .. } = loopback().await?;
            let b = &_b.0;
            let inbox = Device::open_default()?.alloc(64, Access::LOCAL_READ_WRITE)?;
            let (handles, slots) = (inbox.handles(), slots_in_use());
            let mut posted = b.recv_window(4);
            for k in 0..4 {
                assert!(posted.recv(inbox.slice(k * 16..k * 16 + 16)).await.is_none());
            }
            // One message completes the oldest receive; the other three stay posted.
            local.slice(0..8).write_u64(0, 42);
            let (r, _) = ab.send_imm(local.slice(0..8), 5).await;
            r?;
            let (msg, buf) = posted.next().await.expect("four posted");
            assert_eq!((msg?.imm, buf.read_u64(0)), (Some(5), 42));
            drop(buf);
            drop(posted);
            assert_eq!(inbox.handles(), handles + 3, "posted receives keep their buffers");
            assert_eq!((b.inner.ctx.outstanding_tasks(), slots_in_use()), (3, slots));
            // A restart flushes them (their results are discarded): everything comes back.
            b.restart().await?;
            assert_eq!((inbox.handles(), b.inner.ctx.outstanding_tasks()), (handles, 0));
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_restart_under_a_window_ends_every_operation_and_gives_every_buffer_back() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = loopback().await?;
            let (handles, slots) = (local.handles(), slots_in_use());
            let mut w = ab.window(8);
            for k in 0..3 {
                assert!(w.write(local.slice(k * 8..k * 8 + 8), remote.slice(k * 8..k * 8 + 8)).await.is_none());
            }
            // The writes are submitted, their doorbell still owed: the stop rings it and
            // flushes what did not run (DOCA may also complete some before the stop).
            a.restart().await?;
            for k in 0..3 {
                let (r, buf) = w.next().await.expect("three pushed");
                let flushed = r.as_ref().err().map(|e| e.kind());
                assert!(
                    matches!(flushed, None | Some(ErrorKind::Cancelled | ErrorKind::ConnectionLost)),
                    "write {k}: {r:?}"
                );
                assert_eq!(buf.len(), 8);
            }
            // The connection did not survive the restart: a push fails in its turn.
            assert!(w.write(local.slice(0..8), remote.slice(0..8)).await.is_none());
            let (r, _) = w.next().await.expect("one pushed");
            let kind = r.expect_err("a closed connection").kind();
            assert!(matches!(kind, ErrorKind::ConnectionLost | ErrorKind::BadState), "{kind:?}");
            assert!(w.is_empty());
            drop(w);
            assert_eq!((local.handles(), slots_in_use(), a.inner.ctx.outstanding_tasks()), (handles, slots, 0));
            drop(target);
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

// ---- operations on held tasks (`completion::held_op`) ----

/// How many idle held groups of kind `K` the connection keeps for its operation futures.
fn idle_held<K: crate::ext::DocaTask>(c: &Connection) -> usize {
    c.inner.pool.idle_of::<K>().0
}

/// How many of those still have their task.
fn idle_held_tasks<K: crate::ext::DocaTask>(c: &Connection) -> usize {
    c.inner.pool.idle_of::<K>().1
}

/// Writes of `n` 8-byte values, `base + k` into remote slot `k` from local slot `k`: futures,
/// not polled yet.
fn writes<'a>(
    ab: &'a Connection,
    local: &Memory,
    remote: &RemoteMemory,
    n: usize,
    base: u64,
) -> Vec<super::WriteFuture<'a>> {
    (0..n)
        .map(|k| {
            let mut src = local.slice(k * 8..k * 8 + 8);
            src.write_u64(0, base + k as u64);
            ab.write(src, remote.slice(k * 8..k * 8 + 8))
        })
        .collect()
}

/// Asserts that `target` holds the values [`writes`] wrote.
fn assert_landed(target: &Memory, n: usize, base: u64) {
    for k in 0..n {
        assert_eq!(target.slice(k * 8..k * 8 + 8).read_u64(0), base + k as u64, "slot {k} of a base {base} round");
    }
}

/// Yields until `cond` holds (at most 1000 times), then asserts it.
pub(in crate::rdma) async fn until(cond: impl Fn() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        crate::executor::yield_now().await;
    }
    assert!(cond(), "the condition did not come true");
}

/// Runs `ops` all in flight at once (a pipeline as deep as they are many); their results.
async fn all_at_once<F: Future + Unpin>(ops: Vec<F>) -> Vec<F::Output> {
    let n = ops.len();
    let mut p = super::Pipeline::new(n);
    for op in ops {
        assert!(p.try_push(op).is_ok(), "room for every operation");
    }
    let mut out = Vec::with_capacity(n);
    while let Some(r) = p.next().await {
        out.push(r);
    }
    out
}

/// A runtime whose operations do not progress the PE in their own poll: each first poll
/// submits and returns, the task in flight, as on hardware.
fn runtime_without_inline_progress() -> crate::Runtime {
    crate::Runtime::builder()
        .cpus("0".parse().unwrap())
        .idle(crate::IdleMode::Event)
        .inline_progress(false)
        .build()
        .unwrap()
}

#[test]
fn a_connection_keeps_one_held_task_per_operation_in_flight_and_uses_no_slot() {
    runtime_without_inline_progress()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = loopback().await?;
            let (ctx, slots) = (&a.inner.ctx, slots_in_use());
            for i in 0..10u64 {
                let mut src = local.slice(0..8);
                src.write_u64(0, i);
                let (r, _) = ab.write(src, remote.slice(0..8)).await;
                r?;
                assert_eq!(target.slice(0..8).read_u64(0), i);
                assert_eq!(slots_in_use(), slots, "an operation on a held task takes no slot");
            }
            assert_eq!(idle_held::<super::Write>(&ab), 1, "a loop of writes runs on one task");
            assert_eq!(ctx.outstanding_tasks(), 0, "an idle held task is not outstanding");

            // Eight at once need eight tasks; the next eight find them idle.
            for round in 0..2u64 {
                for (r, _) in all_at_once(writes(&ab, &local, &remote, 8, round * 100)).await {
                    r?;
                }
                assert_landed(&target, 8, round * 100);
                assert_eq!(idle_held::<super::Write>(&ab), 8, "round {round}");
            }

            // Each kind has tasks of its own.
            let (old, _) = ab.fetch_add(remote.slice(0..8), 1, local.slice(8..16)).await;
            assert_eq!(old?, 100);
            assert_eq!((idle_held::<super::FetchAdd>(&ab), idle_held::<super::Write>(&ab)), (1, 8));
            assert_eq!(slots_in_use(), slots);
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn more_operations_in_flight_than_the_task_pool_wait_instead_of_failing() {
    runtime_without_inline_progress()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = small_pool_loopback(4, 64 * 8).await?;
            for (r, _) in all_at_once(writes(&ab, &local, &remote, 16, 1)).await {
                r?;
            }
            assert_landed(&target, 16, 1);
            // Every operation took a group at its first poll, with or without a task; all are
            // kept, with at most the pool's 4 tasks among them.
            assert_eq!(idle_held::<super::Write>(&ab), 16, "a group per operation in flight");
            assert!(idle_held_tasks::<super::Write>(&ab) <= 4, "never more tasks than the pool");
            assert_eq!(a.inner.ctx.outstanding_tasks(), 0);
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn an_operation_dropped_in_flight_keeps_its_buffers_until_doca_is_done() {
    runtime_without_inline_progress()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = loopback().await?;
            local.slice(0..8).write_u64(0, 0xfeed);
            let handles = local.handles();
            let mut f = ab.write(local.slice(0..8), remote.slice(8..16));
            assert!(poll_once(&mut f).is_pending(), "in flight after its first poll");
            assert_eq!(a.inner.ctx.outstanding_tasks(), 1);
            drop(f);
            assert_eq!(local.handles(), handles + 1, "in-flight memory is kept");
            assert_eq!(idle_held::<super::Write>(&ab), 0, "an abandoned task is not reused");
            until(|| a.inner.ctx.outstanding_tasks() == 0).await;
            assert_eq!(a.inner.ctx.outstanding_tasks(), 0, "the completion arrived");
            assert_eq!(local.handles(), handles, "released once DOCA was done");
            assert_eq!(target.slice(8..16).read_u64(0), 0xfeed, "the dropped write still ran");

            // Dropped after it completed but before it was collected: its task goes back.
            let mut f = ab.write(local.slice(0..8), remote.slice(16..24));
            assert!(poll_once(&mut f).is_pending());
            until(|| a.inner.ctx.outstanding_tasks() == 0).await;
            drop(f);
            assert_eq!(idle_held::<super::Write>(&ab), 1);
            assert_eq!(local.handles(), handles);
            let (r, _) = ab.write(local.slice(0..8), remote.slice(24..32)).await;
            r?;
            assert_eq!(target.slice(16..32).to_vec(), [0xfeed_u64.to_ne_bytes(); 2].concat());
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_restart_gives_the_connections_idle_held_tasks_back() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { a, ab, target: _target, remote, local, _b } = loopback().await?;
            let (r, _) = ab.write(local.slice(0..8), remote.slice(0..8)).await;
            r?;
            assert_eq!((idle_held::<super::Write>(&ab), idle_held_tasks::<super::Write>(&ab)), (1, 1));
            // The stop gives every idle task back (it could not reach IDLE otherwise); the
            // group stays, without a task.
            a.restart().await?;
            assert_eq!((idle_held::<super::Write>(&ab), idle_held_tasks::<super::Write>(&ab)), (1, 0));
            // The connection did not survive the restart: the operation fails, and gives its
            // buffer back.
            let (r, buf) = ab.write(local.slice(0..8), remote.slice(0..8)).await;
            let kind = r.expect_err("a closed connection").kind();
            assert!(matches!(kind, ErrorKind::ConnectionLost | ErrorKind::BadState), "{kind:?}");
            assert_eq!(buf.len(), 8);
            drop(ab);
            assert_eq!(a.inner.ctx.outstanding_tasks(), 0);
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn writes_waiting_for_room_and_for_tasks_at_once_all_land() {
    // A send queue of 2 and a pool of 4 tasks under 32 writes in flight: writes wait for room
    // with a prepared task, and the allocations that find the pool spent take those idle
    // prepared tasks back (`reclaim_idle`), so the waiting writes prepare again.
    runtime_without_inline_progress()
        .block_on(async {
            let dev = Device::open_default()?;
            let a = Rdma::builder(&dev).max_tasks(4).send_queue_size(2).build().await?;
            let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
            let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
            let (ab, _ba) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
            let target = dev.alloc(32 * 8, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            let local = dev.alloc(32 * 8, Access::LOCAL_READ_WRITE)?;
            for round in 0..3u64 {
                for (r, _) in all_at_once(writes(&ab, &local, &remote, 32, round * 1000)).await {
                    r?;
                }
                assert_landed(&target, 32, round * 1000);
                assert_eq!(a.inner.ctx.outstanding_tasks(), 0);
            }
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

// ---- descriptors parked with a held task (`mem::descriptors`) ----

/// How many descriptors of `mem`'s and `remote`'s caches a held task parks.
fn parked(mem: &Memory, remote: &RemoteMemory) -> (usize, usize) {
    (mem.desc_cache().parked(), remote.slice(..).desc_cache().parked())
}

#[test]
fn a_held_task_keeps_its_descriptors_for_the_same_bytes_and_is_re_pointed_for_others() {
    runtime_without_inline_progress()
        .block_on(async {
            let Loopback { a: _a, ab, target, remote, local, _b } = loopback().await?;
            for i in 0..4u64 {
                let mut src = local.slice(0..8);
                src.write_u64(0, i);
                let (r, _) = ab.write(src, remote.slice(0..8)).await;
                r?;
                assert_eq!(target.slice(0..8).read_u64(0), i);
                // One descriptor each side, parked with the connection's one write task.
                assert_eq!(parked(&local, &remote), (1, 1), "write {i}");
            }
            // Other bytes on either side, then the first ones again: each write lands where
            // it was aimed, so the task was pointed at its new descriptors every time.
            let steps =
                [(8..16, 16..24, 7u64), (8..16, 0..8, 8), (0..8, 0..8, 9), (16..24, 32..40, 10), (0..8, 32..40, 11)];
            for (from, to, v) in steps {
                let mut src = local.slice(from.clone());
                src.write_u64(0, v);
                let (r, _) = ab.write(src, remote.slice(to.clone())).await;
                r?;
                assert_eq!(target.slice(to.clone()).read_u64(0), v, "{from:?} -> {to:?}");
                assert_eq!(parked(&local, &remote), (1, 1), "the old descriptors went back ({from:?} -> {to:?})");
            }
            assert_eq!(target.slice(16..24).read_u64(0), 7);
            assert_eq!(target.slice(0..8).read_u64(0), 9);
            // A read's destination is written by DOCA: parked, it is emptied for each read.
            for (at, v) in [(48..56, 21u64), (48..56, 22), (56..64, 23)] {
                target.slice(at.clone()).write_u64(0, v);
                let (r, back) = ab.read(remote.slice(at.clone()), local.slice(40..48)).await;
                r?;
                assert_eq!(back.read_u64(0), v, "read {at:?}");
            }
            // The read task parks its own pair.
            assert_eq!(parked(&local, &remote), (2, 2));
            drop(ab);
            assert_eq!(parked(&local, &remote), (0, 0), "a connection that goes gives its parked descriptors back");
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn memory_dropped_while_a_held_task_parks_its_descriptor_goes_cleanly_and_is_not_reused() {
    runtime_without_inline_progress()
        .block_on(async {
            let Loopback { a: _a, ab, target, remote: _remote, local: _local, _b } = loopback().await?;
            let dev = Device::open_default()?;
            let failures = crate::mem::descriptors::DESTROY_FAILURES.with(std::cell::Cell::get);
            for i in 0..8u64 {
                // A registration and an import made for one write each, and dropped in the
                // reverse order of their making: the allocator then gives the next ones the
                // same places, so each write's caches are at the addresses of the previous
                // write's, whose descriptors are still parked (seen with glibc's allocator).
                // A cache that goes takes its parked entries back from the record, which must
                // then point its task at the new memory's descriptors.
                let blob = target.export_rdma()?;
                let src_mem = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
                let remote = dev.import(&blob)?;
                let at = (i as usize % 4) * 8;
                let mut src = src_mem.slice(0..8);
                src.write_u64(0, 100 + i);
                let (r, back) = ab.write(src, remote.slice(at..at + 8)).await;
                r?;
                assert_eq!(target.slice(at..at + 8).read_u64(0), 100 + i, "write {i}");
                assert_eq!(parked(&src_mem, &remote), (1, 1), "parked, write {i}");
                drop((back, blob));
                drop(remote);
                drop(src_mem);
            }
            assert_eq!(
                crate::mem::descriptors::DESTROY_FAILURES.with(std::cell::Cell::get),
                failures,
                "an mmap was destroyed with descriptors left"
            );
            drop(ab);
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_window_cycling_over_the_same_slices_keeps_each_lanes_descriptors() {
    runtime_without_inline_progress()
        .block_on(async {
            let Loopback { a: _a, ab, target, remote, local, _b } = loopback().await?;
            let slice = |k: usize| k * 8..k * 8 + 8;
            let mut w = ab.window(4);
            // Lane k on slice k, three times over: each lane's record parks its two
            // descriptors and finds them again.
            for round in 0..3u64 {
                for k in 0..4 {
                    let mut src = local.slice(slice(k));
                    src.write_u64(0, round * 10 + k as u64);
                    if let Some((r, _)) = w.write(src, remote.slice(slice(k))).await {
                        r?;
                    }
                }
                assert_eq!(parked(&local, &remote), (4, 4), "round {round}");
            }
            while let Some((r, _)) = w.next().await {
                r?;
            }
            for k in 0..4 {
                assert_eq!(target.slice(slice(k)).read_u64(0), 20 + k as u64);
            }
            // Other slices for every lane: each operation lands where it was aimed.
            for n in 0..8usize {
                let k = (n + 1) % 8;
                let mut src = local.slice(slice(k));
                src.write_u64(0, 100 + n as u64);
                if let Some((r, _)) = w.write(src, remote.slice(slice(k))).await {
                    r?;
                }
            }
            while let Some((r, _)) = w.next().await {
                r?;
            }
            for n in 0..8usize {
                assert_eq!(target.slice(slice((n + 1) % 8)).read_u64(0), 100 + n as u64, "write {n}");
            }
            assert_eq!(parked(&local, &remote), (4, 4), "a lane parks the descriptors of its last operation");
            drop(w);
            assert_eq!(parked(&local, &remote), (0, 0), "a window that goes gives its parked descriptors back");
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_push_into_a_full_window_that_waits_and_is_dropped_loses_no_result() {
    runtime_without_inline_progress()
        .block_on(async {
            let dev = Device::open_default()?;
            let a = Rdma::builder(&dev).send_queue_size(1).build().await?;
            let b = Rdma::builder(&dev).build().await?;
            let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
            let (ab, _ba) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
            let out = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
            let inbox = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
            let mut posted = b.recv_window(4);
            assert!(posted.recv(inbox.slice(0..8)).await.is_none());
            let mut w = ab.window(2);
            // The first send meets the posted receive; the second waits for one, holding the
            // send queue's one entry.
            assert!(w.send_imm(out.slice(0..8), 1).await.is_none());
            assert!(w.send_imm(out.slice(8..16), 2).await.is_none());
            let (first, _) = posted.next().await.expect("posted");
            assert_eq!(first?.imm, Some(1));
            until(|| w.is_full() && a.inner.ctx.outstanding_tasks() == 1).await;
            // Full: the push takes the first send's result out of its lane, then waits for
            // room in the queue. Dropped, it must leave that result in the window.
            let mut third = w.send_imm(out.slice(16..24), 3);
            let polled = poll_once(&mut third);
            assert!(polled.is_pending(), "waits for room in the send queue");
            drop(third);
            assert_eq!(w.len(), 2, "nothing left the window");
            assert!(posted.recv(inbox.slice(8..16)).await.is_none());
            let imms: Vec<_> =
                [w.next().await, w.next().await].into_iter().map(|r| r.map(|(r, b)| (r.is_ok(), b.len()))).collect();
            assert_eq!(imms, [Some((true, 8)), Some((true, 8))], "both results, oldest first");
            assert!(w.next().await.is_none());
            let (second, _) = posted.next().await.expect("posted");
            assert_eq!(second?.imm, Some(2), "the dropped push sent nothing");
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

/// A receive posted ahead (polled once, then the send its answer needs) with the peer on
/// the same executor: the posting poll's spin runs out, since the peer waits for that send,
/// so the executor backs off spinning in the polls that post; the awaits (later polls) keep
/// their own rule, and every round trip completes with the right message.
#[test]
fn a_receive_posted_ahead_teaches_its_executor_not_to_spin_where_it_posts() {
    use crate::executor::local::with_current;
    use crate::IdleMode;
    const ROUNDS: u64 = 16;
    let rt = crate::Runtime::builder().cpus("0".parse().unwrap()).idle(IdleMode::Polling).build().unwrap();
    // On the worker: a `block_on` executor never spins in a task's poll.
    let on_worker = rt.spawn_on(0, || async {
        let dev = Device::open_default()?;
        let (a, b, ab, ba) = crate::testkit::rdma_pair(&dev).await?;
        let (ma, mb) = (dev.alloc(16, Access::LOCAL_READ_WRITE)?, dev.alloc(16, Access::LOCAL_READ_WRITE)?);
        let peer = crate::spawn_local(async move {
            for i in 0..ROUNDS {
                let (r, got) = b.recv(mb.slice(0..8)).await;
                r?;
                assert_eq!(got.read_u64(0), i);
                let mut answer = mb.slice(8..16);
                answer.write_u64(0, i + 100);
                ba.send(answer).await.0?;
            }
            Ok::<_, crate::Error>(())
        });
        for i in 0..ROUNDS {
            let mut recv = a.recv(ma.slice(0..8));
            assert!(poll_once(&mut recv).is_pending(), "round {i}: the answer needs the send below");
            let mut request = ma.slice(8..16);
            request.write_u64(0, i);
            ab.send(request).await.0?;
            let (r, got) = recv.await;
            r?;
            assert_eq!(got.read_u64(0), i + 100);
        }
        peer.await??;
        let (posting, later) =
            with_current(|core| (core.posted_ahead_backoff(true), core.posted_ahead_backoff(false))).unwrap();
        assert!(posting >= 2, "the posting polls' spins ran out and grew the backoff: {posting}");
        assert_eq!(later, 0, "the awaits found the peer runnable or caught the answer: {later}");
        Ok::<_, crate::Error>(())
    });
    rt.block_on(on_worker.unwrap()).unwrap().unwrap();
}
