//! The cost of one DOCA operation, raw and through the runtime, side by side (criterion):
//! * `sync_add/raw`: the C-style loop straight on doca-sys: allocate a `notify_add` task,
//!   submit it, call `doca_pe_progress` until its callback ran;
//! * `sync_add/async`: `SyncEvent::add(1).await` in a loop on one executor (a `block_on`);
//! * `sync_add/async_spawned`: the same loop in a task on a worker (pinned, polling mode).
//!
//! The soft provider completes an add at submit time (the callback comes with the next
//! progress), so nothing here waits for another thread: the difference between the two
//! modes is the runtime's own per-operation overhead. Timings cover only the loop
//! (`iter_custom`), not creating the event.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::time::{Duration, Instant};

use async_doca::sync_event::SyncEvent;
use async_doca::{sys, CpuSet, Device, IdleMode, Runtime};
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

criterion_group!(benches, sync_add);
criterion_main!(benches);
