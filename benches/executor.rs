//! Executor micro-benchmarks (criterion):
//! * `spawn_local_join`: spawn an empty `!Send` task on the local (`block_on`) executor and
//!   await its handle — the cost of one task life cycle with no cross-thread traffic;
//! * `spawn_join_cross_thread/*`: spawn an empty `Send` task on a worker from the `block_on`
//!   thread and await it — a remote push, a remote wake-up back, both directions of the
//!   park handshake (idle modes compared side by side);
//! * `yield_ping_pong`: two local tasks yielding to each other — the cost of one
//!   wake-reschedule-poll round on one executor, per yield.
//!
//! * `timeout_armed/*`: a [`timeout`](async_doca::time::timeout) around a future that is
//!   pending at its first poll (as every operation is on hardware) and ready at its second:
//!   the timer is armed and cancelled once per iteration. `long_5s` takes its start from the
//!   coarse clock, `short_100ms` from `Instant::now()` (under 100 coarse ticks): their
//!   difference is the clock read the coarse clock saves.
//!
//! * `floor/*`: the same spawn + join of an empty task on a minimal single-threaded executor
//!   built straight on `async-task` (a thread-local `VecDeque` of runnables, nothing else):
//!   the floor this runtime's `spawn_local_join` is compared with. `awaited` awaits the
//!   handle from another task, as `spawn_local_join` does; `direct` runs the runnable and
//!   takes the output with no awaiting task (allocation + run + join + free only).
//!
//! Timings cover only the loop inside one `block_on` (`iter_custom`), not executor creation.

use std::time::{Duration, Instant};

use async_doca::executor::yield_now;
use async_doca::time::timeout;
use async_doca::{spawn, spawn_local, CpuSet, IdleMode, Runtime};
use criterion::{criterion_group, criterion_main, Criterion};

fn runtime(idle: IdleMode) -> Runtime {
    // One worker, on a CPU other than the bench thread's when there is one.
    let mine = CpuSet::current_affinity().expect("affinity");
    let cpu = mine.iter().last().expect("at least one CPU");
    Runtime::builder().cpus([cpu].into_iter().collect()).idle(idle).build().expect("runtime")
}

fn spawn_local_join(c: &mut Criterion) {
    let rt = runtime(IdleMode::default());
    c.bench_function("spawn_local_join", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                let start = Instant::now();
                for _ in 0..iters {
                    spawn_local(async {}).await.expect("join");
                }
                start.elapsed()
            })
        })
    });
}

fn spawn_join_cross_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("spawn_join_cross_thread");
    for (name, idle) in [
        ("polling", IdleMode::Polling),
        ("adaptive_5us", IdleMode::default()),
        ("adaptive_50us", IdleMode::Adaptive(Duration::from_micros(50))),
        ("event", IdleMode::Event),
    ] {
        let rt = runtime(idle);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        spawn(async {}).await.expect("join");
                    }
                    start.elapsed()
                })
            })
        });
        rt.shutdown();
    }
    g.finish();
}

fn yield_ping_pong(c: &mut Criterion) {
    let rt = runtime(IdleMode::default());
    c.bench_function("yield_ping_pong (per yield)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async move {
                // Two tasks alternate: each yield hands the executor to the other one.
                let half = iters.div_ceil(2);
                let start = Instant::now();
                let a = spawn_local(async move {
                    for _ in 0..half {
                        yield_now().await;
                    }
                });
                let b = spawn_local(async move {
                    for _ in 0..half {
                        yield_now().await;
                    }
                });
                a.await.expect("join");
                b.await.expect("join");
                start.elapsed()
            })
        })
    });
}

/// Pending at its first poll (it wakes itself), ready at its second.
struct PendingOnce(bool);

impl std::future::Future for PendingOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}

fn timeout_armed(c: &mut Criterion) {
    let rt = runtime(IdleMode::Polling);
    let mut g = c.benchmark_group("timeout_armed");
    for (name, limit) in [("long_5s", Duration::from_secs(5)), ("short_100ms", Duration::from_millis(100))] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        timeout(limit, PendingOnce(false)).await.expect("ready before its limit");
                    }
                    start.elapsed()
                })
            })
        });
    }
    g.finish();
}

/// A minimal executor on `async-task`: the floor of a spawn + run + join.
mod floor {
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};

    use async_task::{Runnable, Task};

    thread_local! {
        static QUEUE: RefCell<VecDeque<Runnable>> = RefCell::new(VecDeque::with_capacity(256));
    }

    fn spawn<F: Future + 'static>(fut: F) -> Task<F::Output> {
        // The queue is thread-local and every runnable is run on this thread (below), which
        // is what `spawn_unchecked` requires of a `!Send` future. (`spawn_local` would add a
        // thread-id check to every poll.)
        let schedule = |r: Runnable| QUEUE.with(|q| q.borrow_mut().push_back(r));
        // SAFETY: see above; the future and the schedule closure are 'static.
        let (runnable, task) = unsafe { async_task::spawn_unchecked(fut, schedule) };
        runnable.schedule();
        task
    }

    fn run_all() {
        while let Some(r) = QUEUE.with(|q| q.borrow_mut().pop_front()) {
            r.run();
        }
    }

    /// `iters` spawn + await of an empty task, awaited from a task.
    pub fn awaited(iters: u64) -> Duration {
        let main = spawn(async move {
            let start = Instant::now();
            for _ in 0..iters {
                spawn(async {}).await;
            }
            start.elapsed()
        });
        run_all();
        let mut main = pin!(main);
        match main.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(d) => d,
            Poll::Pending => unreachable!("the main task ran to completion"),
        }
    }

    /// `iters` spawn + run + join of an empty task, without an awaiting task.
    pub fn direct(iters: u64) -> Duration {
        let mut cx = Context::from_waker(Waker::noop());
        let start = Instant::now();
        for _ in 0..iters {
            let mut t = spawn(async {});
            run_all();
            assert!(pin!(&mut t).poll(&mut cx).is_ready());
        }
        start.elapsed()
    }
}

fn async_task_floor(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    g.bench_function("awaited", |b| b.iter_custom(floor::awaited));
    g.bench_function("direct", |b| b.iter_custom(floor::direct));
    g.finish();
}

criterion_group!(benches, spawn_local_join, spawn_join_cross_thread, yield_ping_pong, timeout_armed, async_task_floor);
criterion_main!(benches);
