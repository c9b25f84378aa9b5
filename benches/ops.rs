//! The cost of one DOCA operation, raw and through the runtime, side by side (criterion):
//! * `sync_add/raw`: the C-style loop straight on doca-sys: allocate a `notify_add` task,
//!   submit it, call `doca_pe_progress` until its callback ran;
//! * `sync_add/async`: `SyncEvent::add(1).await` in a loop on one executor (a `block_on`);
//! * `sync_add/async_spawned`: the same loop in a task on a worker (pinned, polling mode).
//!
//! * `rdma/{write,fadd,send}`: one RDMA operation at a time on a loopback connection (two
//!   contexts of one executor), `op.await` in a loop: submit → complete → resume;
//! * `rdma/write_window64_{spawned,pipeline}`: 8-byte writes with 64 in flight, as a task
//!   per operation (a window of `JoinHandle`s) or through one task's [`Pipeline`]: the
//!   per-operation cost of the message-rate path (time per operation);
//! * `rdma/write_window64`, `rdma/write_lanes64`: the same through an `rdma::Window` (any
//!   buffer per write) and through `rdma::Lanes` (fixed memory, each lane's task submitted
//!   again as it is);
//! * `rdma/write_lane1`: one write at a time through a single lane: the fixed-memory path's
//!   submit → complete → resume, against `rdma/write`;
//! * `rdma_parked/*`: `write`, `write_lane1`, `fadd` and `send` again, and a write loop in a
//!   task (`write_spawned`), on a runtime without inline progress: every operation parks and
//!   is resumed by the executor's loop (the hardware path when nothing spins for it).
//!
//! The soft provider completes an add at submit time (the callback comes with the next
//! progress), so nothing here waits for another thread: the difference between the two
//! modes is the runtime's own per-operation overhead. Timings cover only the loop
//! (`iter_custom`), not creating the event.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::time::{Duration, Instant};

use async_doca::rdma::{Connection, LaneOp, Pipeline, Rdma};
use async_doca::sync_event::SyncEvent;
use async_doca::{spawn_local, sys, Access, CpuSet, Device, IdleMode, Runtime};
use criterion::{criterion_group, criterion_main, Criterion};

/// A sync event on its own PE, driven the way a C program would.
struct RawEvent {
    pe: *mut sys::doca_pe,
    ev: *mut sys::doca_sync_event,
    _dev: Device,
}

unsafe extern "C" fn add_done(
    task: *mut sys::doca_sync_event_task_notify_add,
    ud: sys::doca_data,
    _ctx: sys::doca_data,
) {
    // SAFETY: the task is ours again inside its callback; the user data points at the
    // `Cell` of the loop that submitted it, which waits for it before going away.
    unsafe {
        (*(ud.ptr as *const Cell<bool>)).set(true);
        sys::doca_task_free(sys::doca_sync_event_task_notify_add_as_doca_task(task));
    }
}

impl RawEvent {
    fn new(dev: &Device) -> RawEvent {
        let mut me = RawEvent { pe: ptr::null_mut(), ev: ptr::null_mut(), _dev: dev.clone() };
        // SAFETY: plain DOCA setup on objects this struct owns (destroyed in Drop); every
        // pointer is fresh from DOCA or an out-pointer to a field.
        unsafe {
            assert_eq!(sys::doca_sync_event_create(&mut me.ev), sys::DOCA_SUCCESS);
            assert_eq!(sys::doca_sync_event_add_publisher_location_cpu(me.ev, dev.as_ptr()), sys::DOCA_SUCCESS);
            assert_eq!(sys::doca_sync_event_add_subscriber_location_cpu(me.ev, dev.as_ptr()), sys::DOCA_SUCCESS);
            assert_eq!(sys::doca_pe_create(&mut me.pe), sys::DOCA_SUCCESS);
            assert_eq!(
                sys::doca_sync_event_task_notify_add_set_conf(me.ev, Some(add_done), Some(add_done), 4),
                sys::DOCA_SUCCESS
            );
            let ctx = sys::doca_sync_event_as_ctx(me.ev);
            assert_eq!(sys::doca_pe_connect_ctx(me.pe, ctx), sys::DOCA_SUCCESS);
            assert_eq!(sys::doca_ctx_start(ctx), sys::DOCA_SUCCESS);
            let mut state = sys::DOCA_CTX_STATE_IDLE;
            while state != sys::DOCA_CTX_STATE_RUNNING {
                sys::doca_pe_progress(me.pe);
                assert_eq!(sys::doca_ctx_get_state(ctx, &mut state), sys::DOCA_SUCCESS);
            }
        }
        me
    }

    fn add(&mut self, n: u64) -> u64 {
        let done = Cell::new(false);
        let mut fetched = 0u64;
        let mut task = ptr::null_mut();
        let ud = sys::doca_data { ptr: (&done as *const Cell<bool>).cast_mut().cast::<c_void>() };
        // SAFETY: `done` and `fetched` outlive the task: the loop returns only after the
        // callback, the last time DOCA touches either.
        unsafe {
            let rc = sys::doca_sync_event_task_notify_add_alloc_init(self.ev, n, &mut fetched, ud, &mut task);
            assert_eq!(rc, sys::DOCA_SUCCESS);
            assert_eq!(
                sys::doca_task_submit(sys::doca_sync_event_task_notify_add_as_doca_task(task)),
                sys::DOCA_SUCCESS
            );
            while !done.get() {
                sys::doca_pe_progress(self.pe);
            }
        }
        fetched
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: nothing is in flight (every add waits for its callback): the ctx stops at
        // once, and the event goes before the PE it is connected to.
        unsafe {
            sys::doca_ctx_stop(sys::doca_sync_event_as_ctx(self.ev));
            while sys::doca_pe_progress(self.pe) != 0 {}
            sys::doca_sync_event_destroy(self.ev);
            sys::doca_pe_destroy(self.pe);
        }
    }
}

fn sync_add(c: &mut Criterion) {
    let dev = Device::open_default().expect("soft device");
    let mine = CpuSet::current_affinity().expect("affinity");
    let cpu = mine.iter().last().expect("at least one CPU");
    let rt = Runtime::builder().cpus([cpu].into_iter().collect()).idle(IdleMode::Polling).build().expect("runtime");
    let mut g = c.benchmark_group("sync_add");
    g.bench_function("raw", |b| {
        let mut ev = RawEvent::new(&dev);
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                std::hint::black_box(ev.add(1));
            }
            start.elapsed()
        })
    });
    g.bench_function("async", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let dev = Device::open_default().expect("soft device");
                let ev = SyncEvent::builder(&dev).build().await.expect("event");
                let start = Instant::now();
                for _ in 0..iters {
                    std::hint::black_box(ev.add(1).await.expect("add"));
                }
                start.elapsed()
            })
        })
    });
    g.bench_function("async_spawned", |b| {
        b.iter_custom(|iters| {
            let job = rt
                .spawn_on(cpu, move || async move {
                    let dev = Device::open_default().expect("soft device");
                    let ev = SyncEvent::builder(&dev).build().await.expect("event");
                    let start = Instant::now();
                    for _ in 0..iters {
                        std::hint::black_box(ev.add(1).await.expect("add"));
                    }
                    start.elapsed()
                })
                .expect("spawn_on");
            rt.block_on(job).unwrap_or(Duration::ZERO)
        })
    });
    g.finish();
}

/// Two connected contexts on the current executor; b's side allows everything.
async fn loopback(dev: &Device) -> (Rdma, Rdma, Connection) {
    let a = Rdma::builder(dev).build().await.expect("rdma a");
    let b = Rdma::builder(dev).permissions(Access::RDMA_ALL).build().await.expect("rdma b");
    let ((blob_a, pa), (blob_b, pb)) = (a.export().expect("export"), b.export().expect("export"));
    let ab = pa.connect(&blob_b).await.expect("connect");
    let _ba = pb.connect(&blob_a).await.expect("connect");
    (a, b, ab)
}

/// A runtime on the last CPU of this thread's affinity, polling when idle; `inline_progress`
/// as given (see `rdma_parked`).
fn bench_runtime(inline_progress: bool) -> Runtime {
    let mine = CpuSet::current_affinity().expect("affinity");
    let cpu = mine.iter().last().expect("at least one CPU");
    Runtime::builder()
        .cpus([cpu].into_iter().collect())
        .idle(IdleMode::Polling)
        .inline_progress(inline_progress)
        .build()
        .expect("runtime")
}

fn rdma(c: &mut Criterion) {
    let rt = bench_runtime(true);
    let mut g = c.benchmark_group("rdma");
    for which in [
        "write",
        "write_lane1",
        "fadd",
        "send",
        "write_window64_spawned",
        "write_window64_pipeline",
        "write_window64",
        "write_lanes64",
    ] {
        g.bench_function(which, |b| b.iter_custom(|iters| run_rdma(&rt, iters, which)));
    }
    g.finish();
}

/// The same operations on a runtime without inline progress: every operation parks (its
/// future returns `Pending`, the loop's drain delivers the completion and wakes it, it is
/// polled again), the path every operation takes on hardware that the executor does not
/// spin for. `write_spawned` is `write` in a task rather than in `block_on`'s future.
fn rdma_parked(c: &mut Criterion) {
    let rt = bench_runtime(false);
    let mut g = c.benchmark_group("rdma_parked");
    for which in ["write", "write_spawned", "write_lane1", "fadd", "send"] {
        g.bench_function(which, |b| b.iter_custom(|iters| run_rdma(&rt, iters, which)));
    }
    g.finish();
}

/// Runs `iters` operations of kind `which` on a fresh loopback pair on `rt`; the time of the
/// loop alone.
fn run_rdma(rt: &Runtime, iters: u64, which: &'static str) -> Duration {
    rt.block_on(async move {
        let dev = Device::open_default().expect("soft device");
        let (_a, b, ab) = loopback(&dev).await;
        let target = dev.alloc(64 * 8, Access::RDMA_ALL).expect("alloc");
        let remote = dev.import(&target.export_rdma().expect("export")).expect("import");
        let local = dev.alloc(64 * 8, Access::LOCAL_READ_WRITE).expect("alloc");
        let (mut buf, mut rbuf) = (local.slice(0..8), local.slice(8..16));
        let start = Instant::now();
        match which {
            "write" => {
                for _ in 0..iters {
                    let (r, back) = ab.write(buf, remote.slice(0..8)).await;
                    r.expect("write");
                    buf = back;
                }
            }
            "write_spawned" => {
                let conn = ab.clone();
                let dst = remote.slice(0..8);
                spawn_local(async move {
                    for _ in 0..iters {
                        let (r, back) = conn.write(buf, dst.clone()).await;
                        r.expect("write");
                        buf = back;
                    }
                })
                .await
                .expect("join");
            }
            "fadd" => {
                for _ in 0..iters {
                    let (r, back) = ab.fetch_add(remote.slice(0..8), 1, buf).await;
                    std::hint::black_box(r.expect("fetch_add"));
                    buf = back;
                }
            }
            "send" => {
                for _ in 0..iters {
                    // The receive is polled first, so it is posted before the send.
                    let ((m, rb), (r, sb)) = futures_lite::future::zip(b.recv(rbuf), ab.send(buf)).await;
                    m.expect("recv");
                    r.expect("send");
                    (buf, rbuf) = (sb, rb);
                }
            }
            "write_window64_spawned" => {
                let mut window: std::collections::VecDeque<async_doca::JoinHandle<async_doca::Result<()>>> =
                    std::collections::VecDeque::with_capacity(64);
                for i in 0..iters as usize {
                    if window.len() == 64 {
                        let h = window.pop_front().expect("full");
                        h.await.expect("join").expect("write");
                    }
                    let (conn, k) = (ab.clone(), i % 64);
                    let (src, dst) = (local.slice(k * 8..k * 8 + 8), remote.slice(k * 8..k * 8 + 8));
                    window.push_back(spawn_local(async move { conn.write(src, dst).await.0 }));
                }
                for h in window {
                    h.await.expect("join").expect("write");
                }
            }
            "write_window64_pipeline" => {
                let mut pipe = Pipeline::new(64);
                for i in 0..iters as usize {
                    let k = i % 64;
                    let op = ab.write(local.slice(k * 8..k * 8 + 8), remote.slice(k * 8..k * 8 + 8));
                    if let Some((r, _)) = pipe.push(op).await {
                        r.expect("write");
                    }
                }
                while let Some((r, _)) = pipe.next().await {
                    r.expect("write");
                }
            }
            "write_window64" => {
                let mut window = ab.window(64);
                for i in 0..iters as usize {
                    let k = i % 64;
                    if let Some((r, _)) =
                        window.write(local.slice(k * 8..k * 8 + 8), remote.slice(k * 8..k * 8 + 8)).await
                    {
                        r.expect("write");
                    }
                }
                while let Some((r, _)) = window.next().await {
                    r.expect("write");
                }
            }
            "write_lanes64" => {
                let mut lanes =
                    ab.lanes(LaneOp::Write(remote.slice(..64 * 8)), local.slice(..64 * 8), 64).expect("lanes");
                for _ in 0..iters {
                    let (prev, lane) = lanes.lane().await;
                    if let Some(r) = prev {
                        r.expect("write");
                    }
                    lane.submit();
                }
                while let Some((r, _)) = lanes.next().await {
                    r.expect("write");
                }
            }
            "write_lane1" => {
                let mut lanes = ab.lanes(LaneOp::Write(remote.slice(..8)), local.slice(..8), 1).expect("lanes");
                for _ in 0..iters {
                    lanes.lane().await.1.submit();
                    lanes.next().await.expect("one submitted").0.expect("write");
                }
            }
            other => unreachable!("{other}"),
        }
        start.elapsed()
    })
}

criterion_group!(benches, sync_add, rdma, rdma_parked);
criterion_main!(benches);
