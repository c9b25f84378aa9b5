//! Executor integration tests: spawning, joining, pinning, idle behaviour, timers, the PE
//! notification protocol, completion slots and contexts (through the soft provider's sync
//! event), shutdown. Every test is bounded in time and uses its own runtime, so they run in
//! parallel safely; the fd-leak check runs in a child process (other tests open fds).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use async_doca::executor::{current_cpu, yield_now};
use async_doca::ext::{completion_cb, DocaTask};
use async_doca::ext::{CtxState, DocaCtx};
use async_doca::sys;
use async_doca::time::{sleep, sleep_until, timeout};
use async_doca::{CpuSet, ErrorKind, IdleMode, Runtime};

// ---------------------------------------------------------------------------------------
// helpers

fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// CPU sets from `specs` that the process may use (the machine may have fewer CPUs).
fn usable(specs: &[&str]) -> Vec<CpuSet> {
    let mine = CpuSet::current_affinity().unwrap();
    specs.iter().map(|s| s.parse::<CpuSet>().unwrap()).filter(|s| s.is_subset(&mine)).collect()
}

fn first_cpu() -> usize {
    CpuSet::current_affinity().unwrap().iter().next().unwrap()
}

fn one_cpu_rt(idle: IdleMode) -> Runtime {
    let cpu: CpuSet = [first_cpu()].into_iter().collect();
    Runtime::builder().cpus(cpu).idle(idle).build().unwrap()
}

fn proc_task_file(tid: i32, file: &str) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/{file}")).unwrap()
}

/// utime + stime of a thread, in clock ticks.
fn cpu_ticks(tid: i32) -> u64 {
    let stat = proc_task_file(tid, "stat");
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime is field 14, stime 15.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A one-value "watch" channel for cross-thread wake tests: the sender publishes a counter
/// and wakes the registered waker.
#[derive(Default)]
struct Watch {
    inner: Mutex<(u64, Option<Waker>)>,
}

impl Watch {
    fn send(&self, v: u64) {
        let w = {
            let mut g = self.inner.lock().unwrap();
            g.0 = v;
            g.1.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    fn changed(&self, seen: u64) -> impl Future<Output = u64> + '_ {
        std::future::poll_fn(move |cx| {
            let mut g = self.inner.lock().unwrap();
            if g.0 != seen {
                return Poll::Ready(g.0);
            }
            g.1 = Some(cx.waker().clone());
            Poll::Pending
        })
    }
}

// ---------------------------------------------------------------------------------------
// a minimal sync-event layer over the executor's DocaCtx / completion API (what the
// sync_event module does, reduced to what the tests need)

macro_rules! kind {
    ($name:ident, $task:ident, $as_task:ident) => {
        struct $name;
        // SAFETY: `$as_task` is the task type's own conversion; the default free is
        // doca_task_free, correct for sync event tasks.
        unsafe impl DocaTask for $name {
            type Task = sys::$task;
            unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
                // SAFETY: forwarded; the caller passes a live task.
                unsafe { sys::$as_task(task) }
            }
        }
    };
}

kind!(Get, doca_sync_event_task_get, doca_sync_event_task_get_as_doca_task);
kind!(NotifySet, doca_sync_event_task_notify_set, doca_sync_event_task_notify_set_as_doca_task);
kind!(NotifyAdd, doca_sync_event_task_notify_add, doca_sync_event_task_notify_add_as_doca_task);
kind!(WaitEq, doca_sync_event_task_wait_eq, doca_sync_event_task_wait_eq_as_doca_task);

type Event = DocaCtx<sys::doca_sync_event>;

fn ok(rc: sys::doca_error_t, what: &'static str) -> async_doca::Result<()> {
    if rc == sys::DOCA_SUCCESS {
        Ok(())
    } else {
        Err(async_doca::Error::from_doca(rc, what))
    }
}

/// A ctx-mode sync event on the current executor, every task pool of size `pool`, not started.
fn event(pool: u32) -> async_doca::Result<Event> {
    let mut ev = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { sys::doca_sync_event_create(&mut ev) }, "create")?;
    // SAFETY: `ev` is live and ours; its ctx is IDLE and unconnected; destroy destroys it.
    let ctx = unsafe {
        DocaCtx::new("test_event", ev, sys::doca_sync_event_as_ctx(ev), |e| sys::doca_sync_event_destroy(e))
    }?;
    let e = ctx.as_ptr()?;
    // SAFETY: live IDLE event; the callbacks match the task types exactly.
    unsafe {
        ok(
            sys::doca_sync_event_task_get_set_conf(e, Some(completion_cb::<Get>), Some(completion_cb::<Get>), pool),
            "conf",
        )?;
        ok(
            sys::doca_sync_event_task_notify_set_set_conf(
                e,
                Some(completion_cb::<NotifySet>),
                Some(completion_cb::<NotifySet>),
                pool,
            ),
            "conf",
        )?;
        ok(
            sys::doca_sync_event_task_notify_add_set_conf(
                e,
                Some(completion_cb::<NotifyAdd>),
                Some(completion_cb::<NotifyAdd>),
                pool,
            ),
            "conf",
        )?;
        ok(
            sys::doca_sync_event_task_wait_eq_set_conf(
                e,
                Some(completion_cb::<WaitEq>),
                Some(completion_cb::<WaitEq>),
                pool,
            ),
            "conf",
        )?;
    }
    Ok(ctx)
}

fn alloc_result<T>(rc: sys::doca_error_t, t: *mut T) -> Result<*mut T, sys::doca_error_t> {
    if rc == sys::DOCA_SUCCESS {
        Ok(t)
    } else {
        Err(rc)
    }
}

async fn get(ctx: &Event) -> async_doca::Result<u64> {
    let e = ctx.as_ptr()?;
    let out = ctx
        .submit::<Get, _>("test.get", |slot| {
            let mut t = std::ptr::null_mut();
            // SAFETY: live event; out_ptr(0) stays valid until the task completes.
            alloc_result(
                unsafe { sys::doca_sync_event_task_get_alloc_init(e, slot.out_ptr(0), slot.user_data(), &mut t) },
                t,
            )
        })
        .await?;
    Ok(out[0])
}

async fn notify_set(ctx: &Event, v: u64) -> async_doca::Result<()> {
    let e = ctx.as_ptr()?;
    ctx.submit::<NotifySet, _>("test.notify_set", |slot| {
        let mut t = std::ptr::null_mut();
        // SAFETY: live event.
        alloc_result(unsafe { sys::doca_sync_event_task_notify_set_alloc_init(e, v, slot.user_data(), &mut t) }, t)
    })
    .await?;
    Ok(())
}

async fn notify_add(ctx: &Event, v: u64) -> async_doca::Result<u64> {
    let e = ctx.as_ptr()?;
    let out = ctx
        .submit::<NotifyAdd, _>("test.notify_add", |slot| {
            let mut t = std::ptr::null_mut();
            // SAFETY: live event; out_ptr(0) stays valid until the task completes.
            alloc_result(
                unsafe {
                    sys::doca_sync_event_task_notify_add_alloc_init(e, v, slot.out_ptr(0), slot.user_data(), &mut t)
                },
                t,
            )
        })
        .await?;
    Ok(out[0])
}

fn wait_eq(ctx: &Event, v: u64) -> impl Future<Output = async_doca::Result<[u64; 4]>> + Unpin + use<'_> {
    let e = ctx.as_ptr().unwrap();
    ctx.submit::<WaitEq, _>("test.wait_eq", move |slot| {
        let mut t = std::ptr::null_mut();
        // SAFETY: live event.
        alloc_result(
            unsafe { sys::doca_sync_event_task_wait_eq_alloc_init(e, v, u64::MAX, slot.user_data(), &mut t) },
            t,
        )
    })
}

// ---------------------------------------------------------------------------------------
// spawning and joining

#[test]
fn spawn_and_join_many() {
    let rt = Runtime::new().unwrap();
    let handles: Vec<_> = (0..1000u64).map(|i| rt.spawn(async move { i * 2 })).collect();
    let sum: u64 = rt.block_on(async {
        let mut s = 0;
        for h in handles {
            s += h.await.unwrap();
        }
        s
    });
    assert_eq!(sum, 999 * 1000);
}

// A local task awaited right after it was spawned may run inside the awaiting task's poll
// (when it is the only task queued). These tests pin down that this changes nothing a
// program can rely on: spawn order, panics, tasks that pend, nesting, fairness.

#[test]
fn awaiting_a_just_spawned_task_keeps_spawn_order() {
    let rt = Runtime::new().unwrap();
    let log = rt.block_on(async {
        let log = Rc::new(RefCell::new(Vec::new()));
        let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
        let a = async_doca::spawn_local(async move { l1.borrow_mut().push("a") });
        let b = async_doca::spawn_local(async move { l2.borrow_mut().push("b") });
        // `b` is not alone in the queue: `a` runs first, as spawned.
        b.await.unwrap();
        a.await.unwrap();
        // Alone in the queue: nothing else could have run before it anyway.
        let c = async_doca::spawn_local(async move { l3.borrow_mut().push("c") });
        log.borrow_mut().push("spawned c");
        c.await.unwrap();
        let v = log.borrow().clone();
        v
    });
    assert_eq!(log, ["a", "b", "spawned c", "c"]);
}

fn chain(n: u32) -> std::pin::Pin<Box<dyn Future<Output = u32>>> {
    Box::pin(async move {
        if n == 0 {
            0
        } else {
            async_doca::spawn_local(chain(n - 1)).await.unwrap() + 1
        }
    })
}

#[test]
fn tasks_run_at_their_join_behave_like_tasks() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let e = async_doca::spawn_local(async { panic!("inline boom") }).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Other);
        assert!(e.context().contains("inline boom"), "{e}");
        // Pending on its first run: the handle then waits for it as usual.
        let h = async_doca::spawn_local(async {
            yield_now().await;
            sleep(Duration::from_millis(1)).await;
            5
        });
        assert_eq!(h.await.unwrap(), 5);
        // A task that spawns and awaits its own task.
        let h = async_doca::spawn_local(async { async_doca::spawn_local(async { 7 }).await.unwrap() * 6 });
        assert_eq!(h.await.unwrap(), 42);
        // A long chain of tasks each awaiting the next: inline runs do not nest, so the
        // stack stays shallow.
        assert_eq!(async_doca::spawn_local(chain(20_000)).await.unwrap(), 20_000);
    });
}

#[test]
fn a_task_spawning_and_awaiting_in_a_loop_does_not_starve_the_executor() {
    // Each child is alone in the queue, so it runs inline; without the budget the spinner
    // would never go back to the loop, and neither the timer nor the remote wake-up below
    // would be seen before it gave up.
    const LIMIT: u64 = 20_000_000;
    for batch in [1, 4, 64] {
        let rt = Runtime::builder().task_batch(batch).build().unwrap();
        rt.block_on(async {
            let stop = Rc::new(std::cell::Cell::new(false));
            let s = stop.clone();
            let spinner = async_doca::spawn_local(async move {
                for i in 0..LIMIT {
                    async_doca::spawn_local(async {}).await.unwrap();
                    if s.get() {
                        return i;
                    }
                }
                LIMIT
            });
            // A timer...
            sleep(Duration::from_millis(2)).await;
            // ... and a wake-up from another thread.
            let watch = Arc::new(Watch::default());
            let w = watch.clone();
            let sender = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                w.send(1);
            });
            assert_eq!(watch.changed(0).await, 1);
            sender.join().unwrap();
            stop.set(true);
            assert!(spinner.await.unwrap() < LIMIT, "batch {batch}: the spinning task starved the executor");
        });
    }
}

#[test]
fn spawn_local_runs_not_send_futures_on_the_block_on_thread() {
    let rt = Runtime::new().unwrap();
    let me = std::thread::current().id();
    let log = Rc::new(RefCell::new(Vec::new()));
    let l2 = log.clone();
    rt.block_on(async move {
        let mut hs = Vec::new();
        for i in 0..10 {
            let l = l2.clone();
            hs.push(async_doca::spawn_local(async move {
                assert_eq!(std::thread::current().id(), me);
                yield_now().await;
                l.borrow_mut().push(i);
            }));
        }
        for h in hs {
            h.await.unwrap();
        }
        assert_eq!(current_cpu(), None, "block_on executors are not pinned workers");
    });
    assert_eq!(log.borrow().len(), 10);
}

#[test]
fn block_on_with_not_send_future_and_nested_spawns() {
    let rt = Runtime::new().unwrap();
    let v = rt.block_on(async {
        let rc = Rc::new(RefCell::new(1));
        sleep(Duration::from_millis(1)).await;
        *rc.borrow_mut() += 1;
        // `spawn` from inside block_on goes to the workers.
        let w = async_doca::spawn(async { current_cpu() }).await.unwrap();
        assert!(w.is_some());
        let r = *rc.borrow();
        r
    });
    assert_eq!(v, 2);
}

#[test]
fn spawn_on_runs_on_that_cpu() {
    let rt = Runtime::new().unwrap();
    for cpu in rt.cpus().iter() {
        let h = rt
            .spawn_on(cpu, move || async move {
                let local = Rc::new(cpu); // !Send state across an await
                yield_now().await;
                sleep(Duration::from_millis(1)).await;
                // SAFETY: sched_getcpu has no preconditions.
                (*local, current_cpu(), unsafe { libc::sched_getcpu() } as usize)
            })
            .unwrap();
        let (c, cur, actual) = rt.block_on(h).unwrap();
        assert_eq!((c, cur, actual), (cpu, Some(cpu), cpu));
    }
    let bad = rt.spawn_on(4000, || async {}).unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn handle_spawns_from_other_threads() {
    let rt = Runtime::new().unwrap();
    let handle = rt.handle();
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let h = handle.clone();
            std::thread::spawn(move || h.spawn(async move { i + 1 }))
        })
        .collect();
    let total: i32 = hs.into_iter().map(|t| rt.block_on(t.join().unwrap()).unwrap()).sum();
    assert_eq!(total, 10);
}

#[test]
fn dropping_a_join_handle_detaches() {
    let rt = one_cpu_rt(IdleMode::Event);
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    drop(rt.spawn(async move {
        sleep(Duration::from_millis(5)).await;
        f.store(true, Ordering::SeqCst);
    }));
    assert!(wait_until(Duration::from_secs(5), || flag.load(Ordering::SeqCst)), "detached task did not finish");
}

#[test]
fn cancel_drops_the_future_on_its_executor() {
    let rt = one_cpu_rt(IdleMode::Event);
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let (d, s) = (dropped.clone(), started.clone());
    let h = rt.spawn(async move {
        let _guard = DropFlag(d);
        s.store(true, Ordering::SeqCst);
        sleep(Duration::from_secs(3600)).await;
    });
    assert!(wait_until(Duration::from_secs(5), || started.load(Ordering::SeqCst)));
    assert!(!h.is_finished());
    h.cancel();
    assert!(wait_until(Duration::from_secs(5), || dropped.load(Ordering::SeqCst)), "cancelled future not dropped");
}

#[test]
fn panics_are_reported_and_the_executor_survives() {
    let rt = one_cpu_rt(IdleMode::Event);
    let cpu = rt.cpus().iter().next().unwrap();
    let e = rt.block_on(rt.spawn(async { panic!("boom-7d1e") })).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Other);
    assert!(e.context().contains("boom-7d1e"), "{e}");
    // The same worker still runs tasks.
    let h = rt.spawn_on(cpu, || async { current_cpu() }).unwrap();
    assert_eq!(rt.block_on(h).unwrap(), Some(cpu));
    // And a panic in a local task is contained too.
    let local = rt.block_on(async { async_doca::spawn_local(async { panic!("local-9f2") }).await });
    assert!(local.unwrap_err().context().contains("local-9f2"));
}

#[test]
fn spawning_after_shutdown_is_cancelled() {
    let rt = one_cpu_rt(IdleMode::Event);
    let handle = rt.handle();
    rt.shutdown();
    let e = futures_lite::future::block_on(handle.spawn(async { 1 })).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled);
}

#[test]
fn shutdown_cancels_pending_tasks() {
    let rt = one_cpu_rt(IdleMode::Event);
    let dropped = Arc::new(AtomicBool::new(false));
    // Made outside the task: the flag is set when the future is dropped, whether the
    // executor polled it before the shutdown or not (under load it may not have).
    let g = DropFlag(dropped.clone());
    let h = rt.spawn(async move {
        let _g = g;
        sleep(Duration::from_secs(3600)).await;
    });
    // Let it start and park on its timer (likely, not needed).
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    rt.shutdown();
    // Not the hour of the timer (a loaded machine may take a while, never that long).
    assert!(t.elapsed() < Duration::from_secs(30));
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(futures_lite::future::block_on(h).unwrap_err().kind(), ErrorKind::Cancelled);
}

#[test]
fn every_idle_mode_runs_tasks() {
    for idle in [IdleMode::Event, IdleMode::Polling, IdleMode::Adaptive(Duration::from_micros(50))] {
        let rt = Runtime::builder().idle(idle).task_batch(3).build().unwrap();
        let hs: Vec<_> = (0..100)
            .map(|i| {
                rt.spawn(async move {
                    sleep(Duration::from_micros(100)).await;
                    i
                })
            })
            .collect();
        let s: i32 = rt.block_on(async {
            let mut s = 0;
            for h in hs {
                s += h.await.unwrap();
            }
            s
        });
        assert_eq!(s, 4950, "{idle:?}");
        rt.shutdown();
    }
}

// ---------------------------------------------------------------------------------------
// cross-thread wake-ups

#[test]
fn cross_thread_wakes_are_never_lost_ping_pong() {
    // Event mode: the executor goes to sleep between messages, so nearly every message
    // takes the sleeping path of the handshake.
    let rt = one_cpu_rt(IdleMode::Event);
    const N: u64 = 100_000;
    let watch = Arc::new(Watch::default());
    let (ack_tx, ack_rx) = mpsc::channel();
    let w = watch.clone();
    let task = rt.spawn(async move {
        let mut seen = 0;
        while seen < N {
            seen = w.changed(seen).await;
            ack_tx.send(seen).unwrap();
        }
        seen
    });
    for i in 1..=N {
        watch.send(i);
        let got = ack_rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("wake-up {i} lost"));
        assert_eq!(got, i);
    }
    assert_eq!(rt.block_on(task).unwrap(), N);
}

#[test]
fn cross_thread_wake_flood_from_several_threads() {
    let rt = one_cpu_rt(IdleMode::Adaptive(Duration::from_micros(2)));
    const THREADS: u64 = 4;
    const PER: u64 = 25_000;
    struct Counter {
        n: AtomicU64,
        waker: Mutex<Option<Waker>>,
    }
    let c = Arc::new(Counter { n: AtomicU64::new(0), waker: Mutex::new(None) });
    let c2 = c.clone();
    let polls = Arc::new(AtomicUsize::new(0));
    let p2 = polls.clone();
    let task = rt.spawn(std::future::poll_fn(move |cx: &mut Context<'_>| {
        p2.fetch_add(1, Ordering::Relaxed);
        *c2.waker.lock().unwrap() = Some(cx.waker().clone());
        if c2.n.load(Ordering::SeqCst) == THREADS * PER {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }));
    // Start flooding only once the task has parked (registered its waker with n == 0), so
    // that the flood races with the executor instead of finishing before its first poll.
    assert!(wait_until(Duration::from_secs(5), || polls.load(Ordering::Relaxed) >= 1));
    let senders: Vec<_> = (0..THREADS)
        .map(|_| {
            let c = c.clone();
            std::thread::spawn(move || {
                for _ in 0..PER {
                    c.n.fetch_add(1, Ordering::SeqCst);
                    let w = c.waker.lock().unwrap().clone();
                    if let Some(w) = w {
                        w.wake();
                    }
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let done = rt.block_on(timeout(Duration::from_secs(10), task));
    assert!(matches!(done, Ok(Ok(()))), "the last wake-up was lost: {done:?}");
    assert!(polls.load(Ordering::Relaxed) >= 2, "the task was never woken");
}

// ---------------------------------------------------------------------------------------
// timers

#[test]
fn timers_fire_in_deadline_order() {
    let rt = Runtime::new().unwrap();
    let order = rt.block_on(async {
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut hs = Vec::new();
        // Deadlines from one instant: a task first polled late (a preempted executor) must
        // not move its own deadline past a later one's.
        let t0 = Instant::now();
        for ms in [30u64, 10, 20, 0, 25, 5] {
            let l = log.clone();
            hs.push(async_doca::spawn_local(async move {
                sleep_until(t0 + Duration::from_millis(ms)).await;
                l.borrow_mut().push(ms);
            }));
        }
        for h in hs {
            h.await.unwrap();
        }
        let v = log.borrow().clone();
        v
    });
    assert_eq!(order, [0, 5, 10, 20, 25, 30]);
}

#[test]
fn sleep_waits_at_least_its_duration() {
    let rt = one_cpu_rt(IdleMode::Event);
    let h = rt.spawn(async {
        let t = Instant::now();
        sleep(Duration::from_millis(15)).await;
        t.elapsed()
    });
    let took = rt.block_on(h).unwrap();
    assert!(took >= Duration::from_millis(15) && took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn timeout_ordering() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let late = timeout(Duration::from_millis(10), sleep(Duration::from_millis(200))).await;
        assert!(late.is_err());
        let e: async_doca::Error = late.unwrap_err().into();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        let early = timeout(Duration::from_millis(200), async {
            sleep(Duration::from_millis(10)).await;
            5
        })
        .await;
        assert_eq!(early, Ok(5));
        // A ready future wins even with a zero timeout.
        assert_eq!(timeout(Duration::ZERO, async { 1 }).await, Ok(1));
    });
}

#[test]
fn a_timeout_counts_from_the_first_pending_poll_and_costs_nothing_when_ready() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let mut cx = Context::from_waker(Waker::noop());
        // Ready at its first poll: no deadline was ever taken (no clock read, no timer).
        let mut ready = std::pin::pin!(timeout(Duration::from_secs(5), async { 3 }));
        assert_eq!(ready.as_mut().poll(&mut cx), Poll::Ready(Ok(3)));
        assert_eq!(ready.deadline(), None);

        // Pending: the limit starts at that poll, not when the timeout was made.
        let limit = Duration::from_millis(50);
        let mut pending = std::pin::pin!(timeout(limit, std::future::pending::<()>()));
        std::thread::sleep(Duration::from_millis(30));
        let polled = Instant::now();
        assert!(pending.as_mut().poll(&mut cx).is_pending());
        let deadline = pending.deadline().expect("a deadline once pending");
        assert!(deadline >= polled + limit, "{:?} early", (polled + limit) - deadline);
        assert!(pending.await.is_err(), "the limit still ends it");
    });
}

/// A long limit takes its start from the kernel's coarse clock (cheaper to read): it must
/// still never end early, measured with the precise clock around it.
#[test]
fn a_long_timeout_from_the_coarse_clock_never_ends_early() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let limit = Duration::from_millis(450);
        let before = Instant::now();
        let t = timeout(limit, std::future::pending::<()>());
        assert!(t.await.is_err());
        let took = before.elapsed();
        assert!(took >= limit, "ended {:?} early", limit - took);
        let now = Instant::now();
        let hour = sleep(Duration::from_secs(3600));
        assert!(hour.deadline() >= now + Duration::from_secs(3600));
    });
}

#[test]
fn a_sleep_first_polled_after_its_deadline_completes() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        for ms in [0, 1, 3] {
            let s = sleep(Duration::from_millis(ms));
            // Not polled until well after its deadline.
            std::thread::sleep(Duration::from_millis(5));
            timeout(Duration::from_secs(10), s).await.expect("a late-polled sleep never fired");
        }
    });
}

#[test]
fn timers_fire_while_the_executor_is_busy() {
    // A task that always yields keeps every turn busy; the executor must still look at its
    // timers (every few turns), so the sleep ends long before the spinner gives up.
    const LIMIT: u64 = 50_000_000;
    let rt = Runtime::builder().task_batch(1).build().unwrap();
    rt.block_on(async {
        let stop = Rc::new(std::cell::Cell::new(false));
        let s = stop.clone();
        let spinner = async_doca::spawn_local(async move {
            for i in 0..LIMIT {
                if s.get() {
                    return i;
                }
                yield_now().await;
            }
            LIMIT
        });
        sleep(Duration::from_millis(5)).await;
        stop.set(true);
        assert!(spinner.await.unwrap() < LIMIT, "the sleep only fired once the executor was idle");
    });
}

#[test]
fn dropped_sleeps_do_not_wake_anyone() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        for _ in 0..1000 {
            let s = sleep(Duration::from_secs(60));
            // Register it, then drop it.
            let _ = timeout(Duration::ZERO, s).await;
        }
        sleep(Duration::from_millis(1)).await;
    });
}

// ---------------------------------------------------------------------------------------
// threads: pinning and idleness

#[test]
fn workers_are_pinned_to_exactly_their_cpu() {
    for set in usable(&["0", "1", "0-1"]) {
        let rt = Runtime::builder().cpus(set).build().unwrap();
        let workers = rt.workers();
        assert_eq!(workers.len(), set.len());
        for w in workers {
            let status = proc_task_file(w.tid, "status");
            let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
            assert_eq!(allowed, w.cpu.to_string(), "worker {w:?} of {set}");
            assert_eq!(proc_task_file(w.tid, "comm").trim(), format!("async-doca-cpu{}", w.cpu));
        }
        // Every thread of this process named async-doca-cpuN is pinned to exactly N (this
        // covers the threads of runtimes of other tests too).
        for entry in std::fs::read_dir("/proc/self/task").unwrap() {
            let tid: i32 = entry.unwrap().file_name().to_str().unwrap().parse().unwrap();
            let Ok(comm) = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")) else {
                continue;
            };
            if let Some(n) = comm.trim().strip_prefix("async-doca-cpu") {
                // A worker is named at its spawn and pins itself right after: a runtime that
                // a parallel test is building may show one in between for a moment.
                let deadline = Instant::now() + Duration::from_secs(10);
                while let Ok(status) = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")) {
                    let allowed =
                        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
                    if allowed == n {
                        break;
                    }
                    assert!(Instant::now() < deadline, "thread {tid} named {} runs on {allowed}", comm.trim());
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        rt.shutdown();
    }
}

#[test]
fn building_on_a_cpu_outside_the_affinity_fails() {
    let mine = CpuSet::current_affinity().unwrap();
    let outside = (0..async_doca::executor::MAX_CPUS).find(|c| !mine.contains(*c)).unwrap();
    let set: CpuSet = [outside].into_iter().collect();
    assert!(Runtime::builder().cpus(set).build().is_err());
    assert!(Runtime::builder().cpus(CpuSet::new()).build().is_err());
}

#[test]
fn idle_executors_sleep() {
    for idle in [IdleMode::Event, IdleMode::default()] {
        let rt = Runtime::builder().idle(idle).build().unwrap();
        // Give the workers something to do first, so that they went through a full turn.
        rt.block_on(async {
            for _ in 0..10 {
                async_doca::spawn(async { sleep(Duration::from_millis(1)).await }).await.unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(30));
        let tids: Vec<i32> = rt.workers().iter().map(|w| w.tid).collect();
        let before: Vec<u64> = tids.iter().map(|&t| cpu_ticks(t)).collect();
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(300));
        let elapsed = t.elapsed();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        for (i, &tid) in tids.iter().enumerate() {
            let used = (cpu_ticks(tid) - before[i]) as f64 / hz;
            assert!(
                used < elapsed.as_secs_f64() * 0.10,
                "{idle:?}: idle worker {tid} used {used:.3}s of CPU in {elapsed:?}"
            );
        }
        rt.shutdown();
    }
}

// ---------------------------------------------------------------------------------------
// the PE notification protocol (raw doca-sys, what the executor loop relies on)

fn readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) == 1 && p.revents & libc::POLLIN != 0 }
}

static RAW_DONE: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn raw_set_cb(
    task: *mut sys::doca_sync_event_task_notify_set,
    _ud: sys::doca_data,
    _cud: sys::doca_data,
) {
    RAW_DONE.fetch_add(1, Ordering::SeqCst);
    // SAFETY: completed task, ours again.
    unsafe { sys::doca_task_free(sys::doca_sync_event_task_notify_set_as_doca_task(task)) };
}

#[test]
fn pe_notification_fd_protocol() {
    // SAFETY: the standard DOCA call sequence on objects created here, on this thread.
    unsafe {
        let mut pe = std::ptr::null_mut();
        assert_eq!(sys::doca_pe_create(&mut pe), sys::DOCA_SUCCESS);
        let mut fd = -1;
        assert_eq!(sys::doca_pe_get_notification_handle(pe, &mut fd), sys::DOCA_SUCCESS);
        let mut ev = std::ptr::null_mut();
        assert_eq!(sys::doca_sync_event_create(&mut ev), sys::DOCA_SUCCESS);
        let ctx = sys::doca_sync_event_as_ctx(ev);
        assert_eq!(
            sys::doca_sync_event_task_notify_set_set_conf(ev, Some(raw_set_cb), Some(raw_set_cb), 4),
            sys::DOCA_SUCCESS
        );
        assert_eq!(sys::doca_pe_connect_ctx(pe, ctx), sys::DOCA_SUCCESS);
        assert_eq!(sys::doca_ctx_start(ctx), sys::DOCA_SUCCESS);
        while sys::doca_pe_progress(pe) != 0 {}

        // No work: armed, drained, not readable.
        assert_eq!(sys::doca_pe_request_notification(pe), sys::DOCA_SUCCESS);
        assert_eq!(sys::doca_pe_progress(pe), 0);
        assert!(!readable(fd, 0), "idle PE readable");

        // Work arrives while armed: readable.
        let mut t = std::ptr::null_mut();
        assert_eq!(
            sys::doca_sync_event_task_notify_set_alloc_init(ev, 7, sys::doca_data::from_u64(1), &mut t),
            sys::DOCA_SUCCESS
        );
        assert_eq!(sys::doca_task_submit(sys::doca_sync_event_task_notify_set_as_doca_task(t)), sys::DOCA_SUCCESS);
        assert!(readable(fd, 1000), "work did not make the PE fd readable");
        assert_eq!(sys::doca_pe_clear_notification(pe, fd), sys::DOCA_SUCCESS);
        let before = RAW_DONE.load(Ordering::SeqCst);
        while sys::doca_pe_progress(pe) != 0 {}
        assert_eq!(RAW_DONE.load(Ordering::SeqCst), before + 1, "callback runs inside progress");

        // Drained and re-armed: quiet again.
        assert_eq!(sys::doca_pe_request_notification(pe), sys::DOCA_SUCCESS);
        assert_eq!(sys::doca_pe_progress(pe), 0);
        assert!(!readable(fd, 0));
        assert_eq!(sys::doca_pe_clear_notification(pe, fd), sys::DOCA_SUCCESS);

        assert_eq!(sys::doca_ctx_stop(ctx), sys::DOCA_SUCCESS);
        while sys::doca_pe_progress(pe) != 0 {}
        assert_eq!(sys::doca_sync_event_destroy(ev), sys::DOCA_SUCCESS);
        assert_eq!(sys::doca_pe_destroy(pe), sys::DOCA_SUCCESS);
    }
}

// ---------------------------------------------------------------------------------------
// completion slots and contexts (soft sync event)

#[test]
fn tasks_complete_through_slots() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let ev = event(4)?;
        assert_eq!(ev.state()?, CtxState::Idle);
        ev.start().await?;
        assert_eq!(ev.state()?, CtxState::Running);
        notify_set(&ev, 10).await?;
        assert_eq!(notify_add(&ev, 5).await?, 10, "fetched value written through out_ptr");
        assert_eq!(get(&ev).await?, 15, "get writes through out_ptr");
        // Many sequential operations recycle slots.
        for i in 0..1000 {
            assert_eq!(notify_add(&ev, 1).await?, 15 + i);
        }
        assert_eq!(ev.outstanding_tasks(), 0);
        ev.stop().await?;
        assert_eq!(ev.state()?, CtxState::Idle);
        Ok::<(), async_doca::Error>(())
    })
    .unwrap();
}

#[test]
fn a_wait_completes_when_another_task_publishes() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let ev = Rc::new(event(4)?);
        ev.start().await?;
        let e2 = ev.clone();
        let waiter = async_doca::spawn_local(async move { wait_eq(&e2, 3).await.map(|_| ()) });
        sleep(Duration::from_millis(5)).await;
        assert!(!waiter.is_finished());
        notify_set(&ev, 3).await?;
        timeout(Duration::from_secs(5), waiter).await.expect("wait not woken")??;
        Ok::<(), async_doca::Error>(())
    })
    .unwrap();
}

#[test]
fn back_pressure_waits_for_free_tasks() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        // Pools of 2 tasks, 64 concurrent operations: most of them meet NO_MEMORY.
        let ev = Rc::new(event(2)?);
        ev.start().await?;
        let hs: Vec<_> = (0..64)
            .map(|_| {
                let e = ev.clone();
                async_doca::spawn_local(async move { notify_add(&e, 1).await })
            })
            .collect();
        let mut fetched = Vec::new();
        for h in hs {
            fetched.push(h.await??);
        }
        fetched.sort_unstable();
        assert_eq!(fetched, (0..64).collect::<Vec<u64>>(), "every add ran exactly once");
        assert_eq!(get(&ev).await?, 64);

        // A pool of 2 waits: the third wait has no task until one of the first two ends.
        let ws: Vec<_> = (1..=3u64)
            .map(|v| {
                let e = ev.clone();
                async_doca::spawn_local(async move { wait_eq(&e, 100 + v).await.map(|_| v) })
            })
            .collect();
        sleep(Duration::from_millis(5)).await;
        assert!(ws.iter().all(|w| !w.is_finished()));
        for v in 1..=3u64 {
            // notify_set needs a task of its own pool (separate from wait_eq's).
            notify_set(&ev, 100 + v).await?;
            sleep(Duration::from_millis(2)).await;
        }
        for (i, w) in ws.into_iter().enumerate() {
            assert_eq!(timeout(Duration::from_secs(5), w).await.expect("waiter stuck")??, i as u64 + 1);
        }
        Ok::<(), async_doca::Error>(())
    })
    .unwrap();
}

#[test]
fn no_memory_without_outstanding_tasks_is_an_error() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        // Pool of 0: NO_MEMORY can never clear, so it must not wait forever.
        let ev = event(0);
        let Ok(ev) = ev else { return }; // a provider may refuse a zero pool at set_conf
        ev.start().await.unwrap();
        let e = timeout(Duration::from_secs(5), notify_add(&ev, 1)).await.expect("waited forever").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted, "{e}");
    });
}

#[test]
fn stop_flushes_in_flight_tasks() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let ev = Rc::new(event(4)?);
        ev.start().await?;
        let e2 = ev.clone();
        let waiter = async_doca::spawn_local(async move { wait_eq(&e2, 999).await });
        sleep(Duration::from_millis(2)).await;
        ev.stop().await?;
        let r = timeout(Duration::from_secs(5), waiter).await.expect("flush did not complete the wait")?;
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
        assert!(e.context().contains("test.wait_eq"));
        // A stopped ctx starts again.
        ev.start().await?;
        notify_set(&ev, 1).await?;
        assert_eq!(get(&ev).await?, 1);
        Ok::<(), async_doca::Error>(())
    })
    .unwrap();
}

#[test]
fn dropping_an_in_flight_operation_keeps_its_buffers_until_completion() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let ev = event(4)?;
        ev.start().await?;
        let released = Arc::new(AtomicBool::new(false));
        let mut fut = Box::pin(wait_eq_buffers(&ev, 77, DropFlag(released.clone())));
        // Poll it into flight, then drop it.
        assert!(timeout(Duration::from_millis(5), fut.as_mut()).await.is_err());
        drop(fut);
        assert!(!released.load(Ordering::SeqCst), "buffers freed while DOCA may use them");
        // The completion (here: the flush of stop) releases the orphaned slot.
        ev.stop().await?;
        assert!(released.load(Ordering::SeqCst), "orphaned slot not released at completion");
        // Completed normally: the buffers come back with the result.
        ev.start().await?;
        let flag = Arc::new(AtomicBool::new(false));
        let w = wait_eq_buffers(&ev, 5, DropFlag(flag.clone()));
        notify_set(&ev, 5).await?;
        let (r, bufs) = w.await;
        r?;
        assert!(!flag.load(Ordering::SeqCst));
        drop(bufs);
        assert!(flag.load(Ordering::SeqCst));
        Ok::<(), async_doca::Error>(())
    })
    .unwrap();
}

fn wait_eq_buffers<B: 'static>(
    ctx: &Event,
    v: u64,
    bufs: B,
) -> impl Future<Output = (async_doca::Result<[u64; 4]>, B)> + use<'_, B> {
    let e = ctx.as_ptr().unwrap();
    ctx.submit::<WaitEq, _>("test.wait_eq", move |slot| {
        let mut t = std::ptr::null_mut();
        // SAFETY: live event.
        alloc_result(
            unsafe { sys::doca_sync_event_task_wait_eq_alloc_init(e, v, u64::MAX, slot.user_data(), &mut t) },
            t,
        )
    })
    .with_buffers(bufs)
}

fn get_buffers<B: 'static>(
    ctx: &Event,
    bufs: B,
) -> impl Future<Output = (async_doca::Result<[u64; 4]>, B)> + use<'_, B> {
    let e = ctx.as_ptr().unwrap();
    ctx.submit::<Get, _>("test.get", move |slot| {
        let mut t = std::ptr::null_mut();
        // SAFETY: live event; out_ptr(0) stays valid until the task completes.
        alloc_result(
            unsafe { sys::doca_sync_event_task_get_alloc_init(e, slot.out_ptr(0), slot.user_data(), &mut t) },
            t,
        )
    })
    .with_buffers(bufs)
}

#[test]
fn buffers_released_inside_another_operations_poll_are_dropped_by_the_loop() {
    // An operation's first poll may progress the PE inline, delivering other completions
    // too. If one of them releases an orphaned slot, the buffers it kept (user code in their
    // destructors) must not be dropped in the middle of that poll, but by the loop.
    // Batch 2: the block_on future may complete two operations inline per poll.
    let rt = Runtime::builder().task_batch(2).build().unwrap();
    rt.block_on(async {
        let ev = Rc::new(event(4)?);
        ev.start().await?;
        // Spend the poll's inline budget on two waits that cannot complete...
        let mut w1 = wait_eq(&ev, 1000);
        let mut w2 = wait_eq(&ev, 1001);
        assert!(futures_lite::future::poll_once(&mut w1).await.is_none());
        assert!(futures_lite::future::poll_once(&mut w2).await.is_none());
        // ...so that this get stays in flight (its completion queued); drop it.
        let released = Arc::new(AtomicBool::new(false));
        let mut g = Box::pin(get_buffers(&ev, DropFlag(released.clone())));
        assert!(futures_lite::future::poll_once(g.as_mut()).await.is_none());
        drop(g);
        assert!(!released.load(Ordering::SeqCst));
        // The task's add progresses inline: the get's completion comes first.
        let (e2, r2) = (ev.clone(), released.clone());
        let t = async_doca::spawn_local(async move {
            let v = notify_add(&e2, 1).await?;
            Ok::<_, async_doca::Error>((v, r2.load(Ordering::SeqCst)))
        });
        let (v, dropped_inside) = t.await??;
        assert_eq!(v, 0);
        assert!(!dropped_inside, "kept buffers dropped inside another task's poll");
        assert!(released.load(Ordering::SeqCst), "kept buffers not dropped after the completion");
        drop((w1, w2));
        Ok::<(), async_doca::Error>(())
    })
    .unwrap();
}

#[test]
fn dropping_a_context_with_a_task_in_flight_is_harmless() {
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let ev = event(4).unwrap();
        ev.start().await.unwrap();
        let mut w = wait_eq(&ev, 12345);
        assert!(timeout(Duration::from_millis(5), &mut w).await.is_err());
        drop(w);
        drop(ev);
        // The retiring ctx is stopped, flushed and destroyed by the executor meanwhile.
        sleep(Duration::from_millis(10)).await;
        // The executor is healthy: a new event works.
        let ev = event(4).unwrap();
        ev.start().await.unwrap();
        notify_set(&ev, 4).await.unwrap();
        assert_eq!(get(&ev).await.unwrap(), 4);
    });
    rt.shutdown();
}

#[test]
fn contexts_left_running_are_stopped_at_shutdown() {
    let rt = one_cpu_rt(IdleMode::Event);
    let cpu = rt.cpus().iter().next().unwrap();
    let (tx, rx) = mpsc::channel();
    // A task on a worker owns a running ctx with a wait nobody will satisfy.
    let h = rt
        .spawn_on(cpu, move || async move {
            let ev = event(4).unwrap();
            ev.start().await.unwrap();
            tx.send(()).unwrap();
            wait_eq(&ev, 1 << 40).await
        })
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    let t = Instant::now();
    rt.shutdown();
    assert!(t.elapsed() < Duration::from_secs(3), "shutdown took {:?}", t.elapsed());
    assert_eq!(futures_lite::future::block_on(h).unwrap_err().kind(), ErrorKind::Cancelled);
}

#[test]
fn a_context_that_outlives_its_executor_refuses_operations() {
    let rt = Runtime::new().unwrap();
    let ev = rt.block_on(async {
        let ev = event(4).unwrap();
        ev.start().await.unwrap();
        ev
    });
    // The block_on executor shut down: the ctx was stopped and destroyed with it.
    assert_eq!(ev.as_ptr().unwrap_err().kind(), ErrorKind::BadState);
    assert_eq!(ev.state().unwrap_err().kind(), ErrorKind::BadState);
    drop(ev);
}

#[test]
fn contexts_need_an_executor() {
    let mut ev = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { sys::doca_sync_event_create(&mut ev) }, sys::DOCA_SUCCESS);
    let destroyed = Rc::new(RefCell::new(false));
    let d = destroyed.clone();
    // SAFETY: live event and its ctx; the destroy closure destroys it.
    let r = unsafe {
        DocaCtx::new("outside", ev, sys::doca_sync_event_as_ctx(ev), move |e| {
            *d.borrow_mut() = true;
            sys::doca_sync_event_destroy(e)
        })
    };
    assert_eq!(r.unwrap_err().kind(), ErrorKind::BadState);
    assert!(*destroyed.borrow(), "the object is destroyed on failure");
}

// ---------------------------------------------------------------------------------------
// shutdown leaks nothing (child process: other tests open and close fds concurrently)

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn exercise_everything_once() {
    let rt = Runtime::builder().idle(IdleMode::Event).build().unwrap();
    let cpu = rt.cpus().iter().next().unwrap();
    rt.block_on(async {
        let ev = event(4).unwrap();
        ev.start().await.unwrap();
        notify_set(&ev, 1).await.unwrap();
        // An operation dropped in flight, then its ctx dropped while retiring.
        let mut w = wait_eq(&ev, 99);
        assert!(timeout(Duration::from_millis(2), &mut w).await.is_err());
        drop(w);
        drop(ev);
        // A ctx left running when block_on returns.
        let ev2 = event(4).unwrap();
        ev2.start().await.unwrap();
        async_doca::spawn_local(async move {
            let _ = wait_eq_buffers(&ev2, 5, vec![0u8; 64]).await;
        })
        .detach();
        sleep(Duration::from_millis(2)).await;
    });
    // A worker with a running ctx and an in-flight wait at shutdown.
    let (tx, rx) = mpsc::channel();
    let _h = rt
        .spawn_on(cpu, move || async move {
            let ev = event(4).unwrap();
            ev.start().await.unwrap();
            tx.send(()).unwrap();
            wait_eq(&ev, 1 << 50).await
        })
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let handle = rt.handle();
    rt.shutdown();
    drop(handle);
}

#[test]
fn fd_child_entry() {
    if std::env::var_os("ASYNC_DOCA_EXEC_FD_CHILD").is_none() {
        return; // only meaningful in the child process started by shutdown_leaks_no_fds
    }
    exercise_everything_once(); // warm-up: lazily created process-wide state
    let before = fd_count();
    for _ in 0..3 {
        exercise_everything_once();
    }
    let after = fd_count();
    assert_eq!(before, after, "fds leaked across runtime lifecycles");
    println!("FD-CHILD-OK {before} {after}");
}

#[test]
fn shutdown_leaks_no_fds() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fd_child_entry", "--nocapture", "--test-threads=1"])
        .env("ASYNC_DOCA_EXEC_FD_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("FD-CHILD-OK"), "child failed:\n{stdout}\n{stderr}");
    // Nothing was reported as leaked or failed during the shutdowns.
    assert!(!stderr.contains("async-doca:"), "the runtime reported problems:\n{stderr}");
}

// ---------------------------------------------------------------------------------------
// misc

#[test]
fn join_handle_and_runtime_are_debug_and_thread_safe() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Runtime>();
    send_sync::<async_doca::Handle>();
    send_sync::<async_doca::time::Sleep>();
    let rt = Runtime::new().unwrap();
    let h = rt.spawn(async {});
    assert!(format!("{h:?}").contains("JoinHandle"));
    assert!(format!("{rt:?}").contains("Runtime"));
    rt.block_on(h).unwrap();
}

#[test]
fn a_local_queue_is_fair_under_batch_limits() {
    // Two tasks yielding to each other interleave: neither monopolises the executor.
    let rt = Runtime::builder().task_batch(1).build().unwrap();
    let log = rt.block_on(async {
        let log = Rc::new(RefCell::new(VecDeque::new()));
        let mk = |id: u8, l: Rc<RefCell<VecDeque<u8>>>| async move {
            for _ in 0..5 {
                l.borrow_mut().push_back(id);
                yield_now().await;
            }
        };
        let a = async_doca::spawn_local(mk(1, log.clone()));
        let b = async_doca::spawn_local(mk(2, log.clone()));
        a.await.unwrap();
        b.await.unwrap();
        let v: Vec<u8> = log.borrow().iter().copied().collect();
        v
    });
    assert_eq!(log, [1, 2, 1, 2, 1, 2, 1, 2, 1, 2]);
}
