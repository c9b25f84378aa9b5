//! The `raw` mode: the same work as the async tests, written the way a C program drives
//! DOCA: allocate a task, submit it, call `doca_pe_progress` until its callback ran. This is
//! the baseline the runtime is measured against, so it does nothing the C samples would not.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::time::Instant;

use async_doca::sys;
use async_doca::{Device, Error, ErrorKind, Result};

use super::PEER_TIMEOUT;

/// A DOCA status as a `Result`, naming the call (shared by the raw modes).
pub(super) fn ok(code: sys::doca_error_t, what: &'static str) -> Result<()> {
    if code == sys::DOCA_SUCCESS {
        Ok(())
    } else {
        Err(Error::from_doca(code, what))
    }
}

/// Zeroed page-aligned memory a peer can reach (shared memory on the soft provider).
pub(super) struct Shared {
    pub(super) ptr: *mut u8,
    #[cfg(not(feature = "soft"))]
    layout: std::alloc::Layout,
}

impl Shared {
    pub(super) fn new(len: usize) -> Result<Shared> {
        #[cfg(feature = "soft")]
        {
            let mut p = ptr::null_mut();
            // SAFETY: valid out-pointer; freed once in Drop.
            ok(unsafe { sys::doca_soft_alloc_shared(len, &mut p) }, "doca_soft_alloc_shared")?;
            Ok(Shared { ptr: p.cast() })
        }
        #[cfg(not(feature = "soft"))]
        {
            let layout = std::alloc::Layout::from_size_align(len, 4096)
                .map_err(|_| Error::new(ErrorKind::InvalidArgument, "perf: bad allocation size"))?;
            // SAFETY: non-zero size (len >= 64 here); freed once in Drop with the same layout.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            if ptr.is_null() {
                return Err(Error::new(ErrorKind::ResourceExhausted, "perf: out of memory"));
            }
            Ok(Shared { ptr, layout })
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once, after the mmaps over it are destroyed.
        #[cfg(feature = "soft")]
        unsafe {
            sys::doca_soft_free_shared(self.ptr.cast());
        }
        // SAFETY: as above.
        #[cfg(not(feature = "soft"))]
        unsafe {
            std::alloc::dealloc(self.ptr, self.layout)
        }
    }
}

/// Where a callback reports a completion: the task's user data points here.
///
/// The fields are `Cell`s because the callback writes them through that raw pointer while
/// the loop reads them: a plain `&mut Done` held by the loop would promise the compiler that
/// nothing else writes, and it would hoist the read out of the loop.
#[derive(Default)]
pub(super) struct Done {
    pub(super) finished: Cell<bool>,
    pub(super) status: Cell<i32>,
    /// Set when the loop submits its completed tasks again (DOCA's task reuse, as the async
    /// modes do): the callback keeps a successful task in `kept` instead of freeing it.
    pub(super) keep: Cell<bool>,
    pub(super) kept: Cell<Option<std::ptr::NonNull<sys::doca_task>>>,
    /// The kept task as its own type (`doca_rdma_task_write_imm` ...), for the setters of
    /// the values that change from one operation to the next. DOCA converts a typed task to
    /// a `doca_task` (`*_as_task`) but not back, so the callback keeps both.
    pub(super) kept_typed: Cell<*mut c_void>,
}

impl Done {
    /// A `Done` whose callback keeps its task for the next operation.
    pub(super) fn keeping() -> Done {
        Done { keep: Cell::new(true), ..Done::default() }
    }

    /// Stops keeping, and frees the task kept, if any: before the ctx is stopped (an
    /// allocated task keeps it from reaching IDLE).
    ///
    /// # Safety
    /// On the thread of the task's ctx, which is alive.
    pub(super) unsafe fn free_kept(&self) {
        self.keep.set(false);
        if let Some(t) = self.kept.take() {
            // SAFETY: a completed task its callback kept, not submitted since (it is only
            // taken out to be submitted), of a live ctx on this thread (the contract).
            unsafe { sys::doca_task_free(t.as_ptr()) };
        }
    }
}

/// A completion callback of one task kind: records the status in the operation's [`Done`]
/// (the task's user data) and keeps a successful task for the next operation when the
/// `Done` asks for it (freed otherwise). The callback of every raw loop's task kinds.
macro_rules! done_cb {
    ($name:ident, $task:ty, $as_task:path) => {
        unsafe extern "C" fn $name(task: *mut $task, ud: sys::doca_data, _ctx: sys::doca_data) {
            // SAFETY: the task is ours again inside its callback; user data points at a
            // `Done` of the loop that submitted it, which outlives every task (the loop
            // waits for each callback, and frees its kept tasks and stops its ctx, flushing
            // what is in flight, before the `Done`s go).
            unsafe {
                let t = $as_task(task);
                let done = &*(ud.ptr as *const $crate::perf::raw::Done);
                let status = sys::doca_task_get_status(t);
                done.status.set(status.0);
                done.finished.set(true);
                if done.keep.get() && status == sys::DOCA_SUCCESS {
                    done.kept.set(std::ptr::NonNull::new(t));
                    done.kept_typed.set(task.cast());
                } else {
                    sys::doca_task_free(t);
                }
            }
        }
    };
}
pub(super) use done_cb;

done_cb!(add_done, sys::doca_sync_event_task_notify_add, sys::doca_sync_event_task_notify_add_as_doca_task);
done_cb!(wait_done, sys::doca_sync_event_task_wait_eq, sys::doca_sync_event_task_wait_eq_as_doca_task);

/// One side of a sync event in ctx mode on its own progress engine. Single-threaded, as
/// DOCA requires: created, used and destroyed on one thread.
pub struct RawEvent {
    pe: *mut sys::doca_pe,
    ev: *mut sys::doca_sync_event,
    /// The completions of the notify-add and the wait-eq, and the add's fetched value: boxed,
    /// as their kept tasks point at them from one operation to the next (each kind's task
    /// is reused, re-initialised with its setter, as the async mode's are).
    add: Box<(Done, Cell<u64>)>,
    wait: Box<Done>,
    _dev: Device,
}

impl RawEvent {
    /// The side of event `ev` (destroyed in Drop) before its start: no PE yet, and the
    /// completions of both kinds keeping their tasks.
    fn over(ev: *mut sys::doca_sync_event, dev: &Device) -> RawEvent {
        RawEvent {
            pe: ptr::null_mut(),
            ev,
            add: Box::new((Done::keeping(), Cell::new(0))),
            wait: Box::new(Done::keeping()),
            _dev: dev.clone(),
        }
    }

    /// Creates a new event (this side publishes to and subscribes from another process)
    /// and returns it with its export blob.
    pub fn create(dev: &Device) -> Result<(RawEvent, Vec<u8>)> {
        let mut ev = ptr::null_mut();
        // SAFETY: out-pointer valid; the event is destroyed in Drop (or below on error).
        ok(unsafe { sys::doca_sync_event_create(&mut ev) }, "sync_event_create")?;
        let mut me = RawEvent::over(ev, dev);
        // SAFETY: `ev` is a fresh event; dev is open for the life of `me`.
        unsafe {
            ok(sys::doca_sync_event_add_publisher_location_remote_pci(ev), "sync_event: publisher location")?;
            ok(sys::doca_sync_event_add_subscriber_location_cpu(ev, dev.as_ptr()), "sync_event: subscriber location")?;
        }
        me.start()?;
        let mut data = ptr::null();
        let mut len = 0usize;
        ok(
            // SAFETY: the event is started; out-pointers valid; the blob stays owned by the event.
            unsafe { sys::doca_sync_event_export_to_remote_pci(ev, dev.as_ptr(), &mut data, &mut len) },
            "sync_event: export",
        )?;
        // SAFETY: DOCA returned `len` readable bytes at `data`.
        let blob = unsafe { std::slice::from_raw_parts(data, len) }.to_vec();
        Ok((me, blob))
    }

    /// Opens the event another side exported.
    pub fn open(dev: &Device, blob: &[u8]) -> Result<RawEvent> {
        let mut ev = ptr::null_mut();
        ok(
            // SAFETY: blob is readable for its length; out-pointer valid.
            unsafe { sys::doca_sync_event_create_from_export(dev.as_ptr(), blob.as_ptr(), blob.len(), &mut ev) },
            "sync_event: create from export",
        )?;
        let mut me = RawEvent::over(ev, dev);
        me.start()?;
        Ok(me)
    }

    fn start(&mut self) -> Result<()> {
        // SAFETY: plain DOCA setup on objects this struct owns; every pointer is either
        // fresh from DOCA or an out-pointer to a local.
        unsafe {
            ok(sys::doca_pe_create(&mut self.pe), "pe_create")?;
            ok(
                sys::doca_sync_event_task_notify_add_set_conf(self.ev, Some(add_done), Some(add_done), 4),
                "notify_add set_conf",
            )?;
            ok(
                sys::doca_sync_event_task_wait_eq_set_conf(self.ev, Some(wait_done), Some(wait_done), 4),
                "wait_eq set_conf",
            )?;
            let ctx = sys::doca_sync_event_as_ctx(self.ev);
            ok(sys::doca_pe_connect_ctx(self.pe, ctx), "pe_connect_ctx")?;
            ok(sys::doca_ctx_start(ctx), "ctx_start")?;
            let mut state = sys::DOCA_CTX_STATE_IDLE;
            for _ in 0..1_000_000 {
                ok(sys::doca_ctx_get_state(ctx, &mut state), "ctx_get_state")?;
                if state == sys::DOCA_CTX_STATE_RUNNING {
                    return Ok(());
                }
                sys::doca_pe_progress(self.pe);
            }
        }
        Err(Error::new(ErrorKind::TimedOut, "sync_event ctx did not reach RUNNING"))
    }

    /// Progresses until `done` is reported. Bounded: after [`PEER_TIMEOUT`] the ctx is
    /// stopped, which flushes the task through its callback, so `done` (on the caller's
    /// stack) is never written after this returns.
    fn run(&self, done: &Done) -> Result<()> {
        let mut spins = 0u32;
        let mut deadline = None;
        while !done.finished.get() {
            // SAFETY: the PE is ours and used on this thread only.
            unsafe { sys::doca_pe_progress(self.pe) };
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 {
                let d = *deadline.get_or_insert_with(|| Instant::now() + PEER_TIMEOUT);
                if Instant::now() > d {
                    // SAFETY: stopping our own ctx; its in-flight task is flushed through the
                    // callback during the progress calls below.
                    unsafe { sys::doca_ctx_stop(sys::doca_sync_event_as_ctx(self.ev)) };
                    while !done.finished.get() {
                        // SAFETY: as above.
                        unsafe { sys::doca_pe_progress(self.pe) };
                    }
                    return Err(Error::new(ErrorKind::TimedOut, "raw sync event: peer did not answer"));
                }
            }
        }
        ok(sys::doca_error_t(done.status.get()), "raw task")
    }

    /// Adds `n` to the counter and waits for the completion.
    pub fn add(&mut self, n: u64) -> Result<()> {
        let (done, fetched) = &*self.add;
        self.submit_and_run(
            done,
            // SAFETY: the add's kept task, a notify-add of this event.
            |t| unsafe { sys::doca_sync_event_task_notify_add_set_inc_val(t.cast(), n) },
            |ud| {
                let mut task = ptr::null_mut();
                // SAFETY: `fetched` (and the `Done` of `ud`) are boxed in `self` and outlive
                // the task, kept or not (Drop frees a kept task first); valid out-pointer.
                let rc = unsafe {
                    sys::doca_sync_event_task_notify_add_alloc_init(self.ev, n, fetched.as_ptr(), ud, &mut task)
                };
                ok(rc, "notify_add alloc")?;
                // SAFETY: the task just allocated.
                Ok(unsafe { sys::doca_sync_event_task_notify_add_as_doca_task(task) })
            },
            "notify_add submit",
        )
    }

    /// Waits until the counter equals `v`.
    pub fn wait_eq(&mut self, v: u64) -> Result<()> {
        self.submit_and_run(
            &self.wait,
            // SAFETY: the wait's kept task, a wait-eq of this event.
            |t| unsafe { sys::doca_sync_event_task_wait_eq_set_wait_val(t.cast(), v) },
            |ud| {
                let mut task = ptr::null_mut();
                // SAFETY: the `Done` of `ud` is boxed in `self` and outlives the task; valid
                // out-pointer.
                let rc = unsafe { sys::doca_sync_event_task_wait_eq_alloc_init(self.ev, v, u64::MAX, ud, &mut task) };
                ok(rc, "wait_eq alloc")?;
                // SAFETY: the task just allocated.
                Ok(unsafe { sys::doca_sync_event_task_wait_eq_as_doca_task(task) })
            },
            "wait_eq submit",
        )
    }

    /// Submits the operation that reports to `done` and waits for its completion: its kept
    /// task, re-initialised by `reinit` (given the task as its own type), or a fresh one
    /// from `alloc` (given the user data that points at `done`).
    fn submit_and_run(
        &self,
        done: &Done,
        reinit: impl FnOnce(*mut c_void),
        alloc: impl FnOnce(sys::doca_data) -> Result<*mut sys::doca_task>,
        what: &'static str,
    ) -> Result<()> {
        done.finished.set(false);
        let task = match done.kept.take() {
            Some(t) => {
                reinit(done.kept_typed.get());
                t.as_ptr()
            }
            None => alloc(sys::doca_data { ptr: (done as *const Done).cast_mut().cast::<c_void>() })?,
        };
        // SAFETY: a task of this event, allocated and not submitted (kept by its callback,
        // or fresh); `run` returns only after its callback.
        ok(unsafe { sys::doca_task_submit(task) }, what)?;
        self.run(done)
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: no task is in flight (every call above waits for its callback); the kept
        // ones are freed first (an allocated task keeps the ctx from stopping), so the ctx
        // stops at once; then the event goes before the PE it is connected to.
        unsafe {
            self.add.0.free_kept();
            self.wait.free_kept();
            if !self.pe.is_null() {
                let ctx = sys::doca_sync_event_as_ctx(self.ev);
                sys::doca_ctx_stop(ctx);
                for _ in 0..1000 {
                    if sys::doca_pe_progress(self.pe) == 0 {
                        break;
                    }
                }
            }
            sys::doca_sync_event_destroy(self.ev);
            if !self.pe.is_null() {
                sys::doca_pe_destroy(self.pe);
            }
        }
    }
}
