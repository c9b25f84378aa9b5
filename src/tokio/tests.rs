//! The tokio bridge, both styles: every RDMA operation and sync events with their data
//! checked, many tokio tasks at once on a multi-thread runtime, and cancellation (dropped
//! futures, `tokio::time::timeout`) leaving no task, completion slot or buffer behind.
//! Unit tests (not in `tests/`) so that they can look at the executor's slots and tasks.

use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::{poll_once, zip};

use super::{run_local, Bridge, Driver};
use crate::executor::local::with_current;
use crate::rdma::{Connection, Opcode, Rdma};
use crate::sync_event::SyncEvent;
use crate::{Access, Device, Error, ErrorKind, IdleMode, Memory, RemoteMemory, Result, Runtime};

/// Every wait here is bounded: a bug is a failure, never a hang.
const LIMIT: Duration = Duration::from_secs(20);

fn current_thread() -> ::tokio::runtime::Runtime {
    ::tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn multi_thread() -> ::tokio::runtime::Runtime {
    ::tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// An async-doca runtime that does not busy-poll (tests share two cores).
fn doca_runtime(cpus: &str) -> Runtime {
    Runtime::builder().cpus(cpus.parse().unwrap()).idle(IdleMode::Event).build().unwrap()
}

async fn bounded<T>(f: impl Future<Output = T>) -> Result<T> {
    ::tokio::time::timeout(LIMIT, f).await.map_err(|_| Error::new(ErrorKind::TimedOut, "test: no answer"))
}

/// Two connected contexts, a's local memory and b's target memory (imported by a).
struct Pair {
    a: Rdma,
    b: Rdma,
    ab: Connection,
    ba: Connection,
    local: Memory,
    target: Memory,
    remote: RemoteMemory,
}

const MEM: usize = 64 * 1024;

async fn pair() -> Result<Pair> {
    let dev = Device::open_default()?;
    let (a, b, ab, ba) = crate::testkit::rdma_pair(&dev).await?;
    let local = dev.alloc(MEM, Access::LOCAL_READ_WRITE)?;
    let target = dev.alloc(MEM, Access::RDMA_ALL)?;
    let remote = dev.import(&target.export_rdma()?)?;
    Ok(Pair { a, b, ab, ba, local, target, remote })
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n).map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8).collect()
}

fn expect(cond: bool, what: &str) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::Other, format!("test: {what}")))
    }
}

impl Pair {
    /// Writes a pattern into slot `k` (256 bytes) of b's memory and reads it back.
    async fn write_read(&self, k: usize, seed: u64) -> Result<()> {
        let range = k * 256..(k + 1) * 256;
        let data = pattern(256, seed);
        let mut src = self.local.slice(range.clone());
        src.write(0, &data);
        let (r, _) = self.ab.write(src, self.remote.slice(range.clone())).await;
        r?;
        expect(self.target.slice(range.clone()).to_vec() == data, "write landed")?;
        let mut dst = self.local.slice(range.clone());
        dst.fill(0);
        let (r, dst) = self.ab.read(self.remote.slice(range), dst).await;
        r?;
        expect(dst.to_vec() == data, "read returned the data")
    }

    /// Every operation once, each checked.
    async fn every_op(&self, seed: u64) -> Result<()> {
        self.write_read(1, seed).await?;

        // send / recv (the receive is posted first: `zip` polls it first).
        let data = pattern(100, seed + 1);
        let mut src = self.local.slice(4096..4196);
        src.write(0, &data);
        let ((got, rbuf), (sent, _)) = zip(self.b.recv(self.target.slice(8192..8292)), self.ab.send(src)).await;
        sent?;
        let got = got?;
        expect(got.len == 100 && got.opcode == Opcode::Send && got.imm.is_none(), "send received")?;
        expect(rbuf.to_vec() == data, "send data")?;

        // send_imm, answered the other way (b to a).
        let ((got, _), (sent, _)) =
            zip(self.a.recv(self.local.slice(12288..12388)), self.ba.send_imm(self.target.slice(0..16), 77)).await;
        sent?;
        let got = got?;
        expect(got.opcode == Opcode::SendImm && got.imm == Some(77) && got.len == 16, "send_imm received")?;

        // write_imm: the data lands in the target, the receive reports the immediate.
        let data = pattern(64, seed + 2);
        let mut src = self.local.slice(16384..16448);
        src.write(0, &data);
        let ((got, _), (wrote, _)) = zip(
            self.b.recv(self.target.slice(20480..20544)),
            self.ab.write_imm(src, self.remote.slice(24576..24640), 0xfeed),
        )
        .await;
        wrote?;
        let got = got?;
        expect(got.opcode == Opcode::WriteImm && got.imm == Some(0xfeed), "write_imm received")?;
        expect(self.target.slice(24576..24640).to_vec() == data, "write_imm data")?;

        // Atomics on an 8-byte word of b's memory.
        self.target.slice(32768..32776).write_u64(0, 10);
        let (old, res) = self.ab.fetch_add(self.remote.slice(32768..32776), 5, self.local.slice(32768..32776)).await;
        expect(old? == 10, "fetch_add old value")?;
        let (old, _) = self.ab.compare_swap(self.remote.slice(32768..32776), 15, seed, res).await;
        expect(old? == 15, "compare_swap old value")?;
        expect(self.target.slice(32768..32776).read_u64(0) == seed, "compare_swap swapped")
    }
}

/// A sync event and a second handle on it: add, wait, get, set.
async fn sync_events() -> Result<()> {
    let dev = Device::open_default()?;
    let ev = SyncEvent::builder(&dev).build().await?;
    let peer = SyncEvent::open(&dev, &ev.export()?).await?;
    let (seen, before) = zip(peer.wait_gt(0), ev.add(3)).await;
    expect(before? == 0 && seen? == 3, "add woke the waiter")?;
    ev.set(40).await?;
    peer.wait_eq(40).await?;
    expect(peer.get().await? == 40, "get after set")
}

/// Operations that hold memory (completion slots in use, and DOCA tasks in flight: an
/// operation on a held task takes no slot) and async-doca tasks registered on the current
/// executor.
fn leftovers() -> (usize, usize) {
    with_current(|c| (c.slots.in_use() + c.tasks_in_flight(), c.registered_tasks())).expect("inside an executor")
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn driver_runs_every_operation_from_the_main_future_and_local_tasks() {
    let rt = current_thread();
    let local = ::tokio::task::LocalSet::new();
    local
        .block_on(
            &rt,
            run_local(async {
                let p = Rc::new(pair().await?);
                p.every_op(1).await?;
                sync_events().await?;
                // The same from tokio tasks on this thread, several at once.
                let tasks: Vec<_> = (0..4u64)
                    .map(|i| {
                        let p = p.clone();
                        ::tokio::task::spawn_local(async move {
                            p.write_read(8 + i as usize, i).await?;
                            sync_events().await
                        })
                    })
                    .collect();
                for t in tasks {
                    bounded(t).await?.expect("task ran")?;
                }
                p.every_op(2).await?;
                // async-doca's own spawn and timers work under the driver too.
                let q = p.clone();
                crate::spawn_local(async move { q.write_read(20, 9).await }).await??;
                crate::time::sleep(Duration::from_millis(2)).await;
                Ok::<_, Error>(())
            }),
        )
        .unwrap()
        .unwrap();
}

/// Without inline progress every operation parks, and the driver's turns complete them:
/// the main future's, a parked task's (run again in the turn whose drain woke it) and
/// several at once. A lost wake-up fails through `bounded`.
#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn driver_without_inline_progress_completes_every_parked_operation() {
    let rt = current_thread();
    let out = rt.block_on(Driver::new().inline_progress(false).run(async {
        let p = Rc::new(pair().await?);
        bounded(p.every_op(1)).await??;
        bounded(sync_events()).await??;
        let tasks: Vec<_> = (0..3u64)
            .map(|t| {
                let p = p.clone();
                crate::spawn_local(async move {
                    for i in 0..50u64 {
                        p.write_read(8 + t as usize, t * 100 + i).await?;
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for t in tasks {
            bounded(t).await???;
        }
        Ok::<_, Error>(())
    }));
    out.unwrap().unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn driver_in_every_idle_mode() {
    for idle in [IdleMode::Event, IdleMode::Polling, IdleMode::default()] {
        let rt = current_thread();
        let out = rt.block_on(Driver::new().idle(idle).run(async {
            let p = pair().await?;
            for i in 0..20 {
                p.write_read(i % 8, i as u64).await?;
            }
            // A wait that completes only later, by a tokio timer elsewhere on the thread: the
            // driver must sleep and wake on the PE fd.
            let dev = Device::open_default()?;
            let ev = SyncEvent::builder(&dev).build().await?;
            let peer = SyncEvent::open(&dev, &ev.export()?).await?;
            let (seen, added) = zip(bounded(peer.wait_gt(0)), async {
                ::tokio::time::sleep(Duration::from_millis(5)).await;
                ev.add(1).await
            })
            .await;
            expect(seen?? == 1 && added? == 0, "late add")?;
            // async-doca timers registered while the driver is idle wake it (through the
            // timer, not through work), and do not fire early.
            let t0 = Instant::now();
            bounded(crate::time::sleep(Duration::from_millis(3))).await?;
            expect(t0.elapsed() >= Duration::from_millis(3), "slept long enough")?;
            let r = bounded(crate::time::timeout(Duration::from_millis(2), peer.wait_gt(1))).await?;
            expect(r.is_err(), "async-doca timeout fired")
        }));
        out.unwrap().unwrap_or_else(|e| panic!("{idle:?}: {e}"));
    }
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn driver_on_a_local_set_of_a_multi_thread_runtime_with_many_tasks() {
    let rt = multi_thread();
    let local = ::tokio::task::LocalSet::new();
    local
        .block_on(
            &rt,
            run_local(async {
                let p = Rc::new(pair().await?);
                let tasks: Vec<_> = (0..64u64)
                    .map(|i| {
                        let p = p.clone();
                        ::tokio::task::spawn_local(async move {
                            for r in 0..10 {
                                p.write_read(i as usize % 200, i * 1000 + r).await?;
                            }
                            Ok::<_, Error>(())
                        })
                    })
                    .collect();
                for t in tasks {
                    bounded(t).await?.expect("task ran")?;
                }
                // Meanwhile tokio's own multi-thread tasks keep running.
                let n = rt_spawned_sum().await;
                expect(n == 4950, "multi-thread tasks ran")
            }),
        )
        .unwrap()
        .unwrap();
}

async fn rt_spawned_sum() -> u64 {
    let hs: Vec<_> = (0..100u64).map(|i| ::tokio::spawn(async move { i })).collect();
    let mut sum = 0;
    for h in hs {
        sum += h.await.unwrap();
    }
    sum
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn driver_cancellation_leaves_no_slot_or_task_behind() {
    let rt = current_thread();
    let local = ::tokio::task::LocalSet::new();
    local
        .block_on(
            &rt,
            run_local(async {
                let p = pair().await?;
                // A receive that never completes, under tokio's timeout.
                let r = ::tokio::time::timeout(Duration::from_millis(10), p.b.recv(p.target.slice(0..64))).await;
                expect(r.is_err(), "the receive timed out")?;
                // A wait in a tokio task that is aborted.
                let dev = Device::open_default()?;
                let ev = Rc::new(SyncEvent::builder(&dev).build().await?);
                let e = ev.clone();
                let t = ::tokio::task::spawn_local(async move { e.wait_gt(100).await });
                ::tokio::time::sleep(Duration::from_millis(2)).await;
                t.abort();
                expect(bounded(t).await?.unwrap_err().is_cancelled(), "aborted")?;
                // A dropped write future after its first poll.
                let mut w = Box::pin(p.ab.write(p.local.slice(0..64), p.remote.slice(0..64)));
                let _ = poll_once(w.as_mut()).await;
                drop(w);
                // The orphaned receive stays posted, keeping its buffer, until its context
                // stops.
                let (held, _) = leftovers();
                expect(held >= 1, "the orphaned receive is still posted")?;
                drop(p);
                drop(ev);
                let deadline = Instant::now() + LIMIT;
                while leftovers() != (0, 0) {
                    expect(Instant::now() < deadline, "slots and tasks released")?;
                    ::tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Ok::<_, Error>(())
            }),
        )
        .unwrap()
        .unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn dropping_run_local_mid_flight_shuts_its_executor_down() {
    let rt = current_thread();
    let t0 = Instant::now();
    // The whole driver future under tokio's timeout, while a receive is in flight and an
    // async-doca task waits: dropping it drops the user future, then stops the contexts
    // (flushing the receive) and destroys the PE, on this thread, bounded.
    let driven = run_local(async {
        let p = pair().await.unwrap();
        crate::spawn_local(crate::time::sleep(Duration::from_secs(3600))).detach();
        let _ = p.b.recv(p.target.slice(0..64)).await;
        unreachable!("nothing is ever sent");
    });
    let r = rt.block_on(async { ::tokio::time::timeout(Duration::from_millis(20), driven).await });
    assert!(r.is_err(), "timed out");
    assert!(t0.elapsed() < LIMIT, "the shutdown is bounded");
    assert!(!crate::executor::local::in_executor(), "the thread is no executor any more");
    // And the thread can drive again.
    let v = rt.block_on(run_local(async { pair().await.map(|_| 5) })).unwrap().unwrap();
    assert_eq!(v, 5);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn run_local_refuses_to_nest_and_reports_it() {
    let rt = current_thread();
    let out = rt.block_on(run_local(async { run_local(async {}).await }));
    assert_eq!(out.unwrap().unwrap_err().kind(), ErrorKind::BadState);
    // The thread is free again afterwards.
    assert_eq!(rt.block_on(run_local(async { 3 })).unwrap(), 3);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn handle_runs_every_operation_from_many_tokio_tasks() {
    let doca = doca_runtime("0-1");
    let bridge = Bridge::builder(doca.handle()).max_in_flight(8).build();
    let rt = multi_thread();
    rt.block_on(async {
        let pairs = [bridge.pin(0, pair).await?, bridge.pin(1, pair).await?];
        for (i, p) in pairs.iter().enumerate() {
            p.run(move |p| async move { p.every_op(i as u64).await }).await?;
        }
        bridge.run(sync_events).await?;
        // 64 tokio tasks, on both tokio workers, each with 10 jobs on the executors; at most
        // 8 jobs in flight at a time (back-pressure), every result checked.
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                let (p, bridge, peak) = (pairs[i as usize % 2].clone(), bridge.clone(), peak.clone());
                ::tokio::spawn(async move {
                    for r in 0..10 {
                        let k = (i as usize / 2) % 200;
                        p.run(move |p| async move { p.write_read(k, i * 100 + r).await }).await?;
                        peak.fetch_max(bridge.in_flight(), Ordering::Relaxed);
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for t in tasks {
            bounded(t).await?.expect("task ran")?;
        }
        expect(peak.load(Ordering::Relaxed) <= 8, "never more than max_in_flight jobs")?;
        expect(bridge.in_flight() == 0, "every permit back")?;
        Ok::<_, Error>(())
    })
    .unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn handle_back_pressure_bounds_the_jobs_running_on_the_executors() {
    let doca = doca_runtime("0-1");
    let bridge = Bridge::builder(doca.handle()).max_in_flight(4).build();
    let rt = multi_thread();
    let (running, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    rt.block_on(async {
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let (bridge, running, peak) = (bridge.clone(), running.clone(), peak.clone());
                ::tokio::spawn(async move {
                    bridge
                        .run(move || async move {
                            // Counted on the executor, while the job runs there.
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            crate::time::sleep(Duration::from_millis(2)).await;
                            running.fetch_sub(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .await
                })
            })
            .collect();
        for t in tasks {
            bounded(t).await.unwrap().unwrap().unwrap();
        }
    });
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "{peak} jobs ran at once with max_in_flight 4");
    assert!(peak >= 2, "jobs did run concurrently ({peak})");
    assert_eq!(bridge.in_flight(), 0);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn handle_propagates_errors_and_panics() {
    let doca = doca_runtime("0");
    let bridge = Bridge::new(doca.handle());
    let rt = current_thread();
    rt.block_on(async {
        let e = bridge.run(|| async { Err::<(), _>(Error::new(ErrorKind::NotFound, "job failed")) }).await;
        assert_eq!(e.unwrap_err().kind(), ErrorKind::NotFound);
        let e: Result<()> = bridge.run(|| async { panic!("job panicked") }).await;
        assert!(e.unwrap_err().context().contains("job panicked"));
        let e = bridge.run_on(7, || async { Ok(()) }).await;
        assert_eq!(e.unwrap_err().kind(), ErrorKind::InvalidArgument);
        let e = bridge.pin(0, || async { Err::<(), _>(Error::new(ErrorKind::BadState, "init failed")) }).await;
        assert_eq!(e.unwrap_err().kind(), ErrorKind::BadState);
        // A DOCA error from the executor: a read outside the remote range.
        let p = bridge.pin(0, pair).await.unwrap();
        let e = p.run(|p| async move { p.ab.read(p.remote.slice(0..8), p.local.slice(0..16)).await.0 }).await;
        assert!(e.is_err());
    });
    drop(bridge);
    // After the runtime shut down, jobs report cancellation.
    let bridge = Bridge::new(doca.handle());
    doca.shutdown();
    let e = rt.block_on(bridge.run(|| async { Ok(()) }));
    assert_eq!(e.unwrap_err().kind(), ErrorKind::Cancelled);
}

/// Raises its flag when dropped (on the executor).
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn handle_cancellation_leaves_no_task_or_buffer_behind() {
    let doca = doca_runtime("0");
    let bridge = Bridge::new(doca.handle());
    let rt = multi_thread();
    rt.block_on(async {
        let p = bridge.pin(0, pair).await?;
        let (gone_a, gone_b) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        // 1. tokio::time::timeout around a job whose receive never completes, once the job
        // runs (a loaded executor may not have started it within the timeout; the flag is
        // raised in the poll that posts the receive, and a cancellation is handled on the
        // executor after that poll).
        let flag = DropFlag(gone_a.clone());
        let posted = Arc::new(AtomicBool::new(false));
        let mark = posted.clone();
        let mut job = Box::pin(p.run(move |p| async move {
            let _flag = flag;
            let recv = p.b.recv(p.target.slice(0..64));
            mark.store(true, Ordering::SeqCst);
            recv.await.0.map(drop)
        }));
        let deadline = Instant::now() + LIMIT;
        while !posted.load(Ordering::SeqCst) {
            expect(poll_once(job.as_mut()).await.is_none(), "the receive never completes")?;
            expect(Instant::now() < deadline, "the job started")?;
            ::tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let r = ::tokio::time::timeout(Duration::from_millis(20), job).await;
        expect(r.is_err(), "timed out")?;
        // 2. A job future dropped after its first poll.
        let flag = DropFlag(gone_b.clone());
        let mut job = Box::pin(p.run(move |p| async move {
            let _flag = flag;
            p.b.recv(p.target.slice(64..128)).await.0.map(drop)
        }));
        let _ = poll_once(job.as_mut()).await;
        drop(job);
        let deadline = Instant::now() + LIMIT;
        while !(gone_a.load(Ordering::SeqCst) && gone_b.load(Ordering::SeqCst) && bridge.in_flight() == 0) {
            expect(Instant::now() < deadline, "cancelled jobs dropped on their executor")?;
            ::tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The first receive is still posted (DOCA has no per-task cancel; the second job may
        // have been cancelled before it ran): it keeps its buffer until the context stops,
        // which dropping the last `Pinned` does.
        let (held, _) = bridge.run_on(0, || async { Ok(leftovers()) }).await?;
        expect(held >= 1, "the orphaned receive is still posted")?;
        drop(p);
        loop {
            // Only this job's own task is left.
            let left = bridge.run_on(0, || async { Ok(leftovers()) }).await?;
            if left == (0, 1) || left == (0, 0) {
                break;
            }
            expect(Instant::now() < deadline, "state, slots and buffers released")?;
            ::tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}
