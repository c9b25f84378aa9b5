//! Executor micro-benchmarks (criterion):
//! * `spawn_local_join`: spawn an empty `!Send` task on the local (`block_on`) executor and
//!   await its handle — the cost of one task life cycle with no cross-thread traffic;
//! * `spawn_join_cross_thread/*`: spawn an empty `Send` task on a worker from the `block_on`
//!   thread and await it — a remote push, a remote wake-up back, both directions of the
//!   park handshake (idle modes compared side by side);
//! * `yield_ping_pong`: two local tasks yielding to each other — the cost of one
//!   wake-reschedule-poll round on one executor, per yield.
//!
//! Timings cover only the loop inside one `block_on` (`iter_custom`), not executor creation.

use std::time::{Duration, Instant};

use async_doca::executor::yield_now;
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

criterion_group!(benches, spawn_local_join, spawn_join_cross_thread, yield_ping_pong);
criterion_main!(benches);
