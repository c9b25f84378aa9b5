//! The sync event as a ctx: its [`CtxOps`], its five task kinds and their entry points.
//!
//! * `get`, `notify_set`, `notify_add` do their work at submit (read, or update + wake) and
//!   complete at once; the callback is delivered by the next `doca_pe_progress`.
//! * `wait_eq` / `wait_neq` complete at submit if already satisfied; otherwise they join the
//!   handle's pending list, which the ctx progress hook scans. While the PE is *armed* (its
//!   owner is about to sleep) the handle's PE doorbell is registered in the event's waiter
//!   table so publishers ring it, and the value is re-checked after registering (no lost
//!   wake-up); a PE that keeps polling needs no doorbell, so publishers skip the ring. The
//!   doorbell is unregistered when no wait is pending. With the waiter table full (more
//!   than [`super::WAITER_SLOTS`] PEs sleeping on one event), a wait submitted while armed
//!   fails with `DOCA_ERROR_FULL`, and arming reports work so the PE keeps polling.
//! * `doca_ctx_stop` empties the pending list (the framework then flushes those tasks with
//!   [`crate::ctx::FLUSH_STATUS`]).
//!
//! The ctx starts synchronously (IDLE → RUNNING) and cannot be connected or started after
//! the event was started standalone (`DOCA_ERROR_BAD_STATE`).

use core::cell::Cell;
use core::ptr;
use core::sync::atomic::Ordering::SeqCst;

use super::{doca_sync_event, ev_ref, Mode};
use crate::ctx::{doca_ctx, CtxOps, StartMode};
use crate::ffi::{guard, guard_err, out};
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

/// The ctx-kind descriptor of sync events.
pub(crate) static SYNC_EVENT_CTX_OPS: CtxOps = CtxOps {
    name: "sync_event",
    can_connect: Some(se_can_connect),
    start: se_start,
    stop: se_stop,
    stopped: None,
    progress: Some(se_progress),
    has_work: Some(se_has_work),
    stop_via_progress: false,
};

/// The event embedding `ctx`.
///
/// # Safety
/// `ctx` must be the ctx of a sync event (true for every ctx with SYNC_EVENT_CTX_OPS).
unsafe fn event_of(ctx: &doca_ctx) -> &doca_sync_event {
    // SAFETY: sync events bind themselves as the owner of their ctx in `into_raw`.
    unsafe { ctx.owner::<doca_sync_event>() }
}

unsafe fn se_can_connect(ctx: &doca_ctx) -> Result<(), doca_error_t> {
    // SAFETY: called with a sync event ctx (ops contract).
    let e = unsafe { event_of(ctx) };
    match e.mode.get() {
        Mode::Standalone => Err(DOCA_ERROR_BAD_STATE),
        Mode::Unset | Mode::Ctx => {
            e.mode.set(Mode::Ctx);
            Ok(())
        }
    }
}

unsafe fn se_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: called with a sync event ctx (ops contract).
    let e = unsafe { event_of(ctx) };
    if e.mode.get() == Mode::Standalone {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    e.mode.set(Mode::Ctx);
    e.ensure_backing()?;
    Ok(StartMode::Sync)
}

unsafe fn se_stop(ctx: &doca_ctx) {
    // SAFETY: called with a sync event ctx (ops contract).
    let e = unsafe { event_of(ctx) };
    e.pending.borrow_mut().clear();
    e.unregister_waiter();
}

unsafe fn se_progress(ctx: &doca_ctx) -> bool {
    // SAFETY: called with a sync event ctx (ops contract).
    unsafe { event_of(ctx) }.scan_pending()
}

/// Called when the PE arms: the moment its waits start to need a doorbell (see
/// [`doca_sync_event::submit_wait`]).
unsafe fn se_has_work(ctx: &doca_ctx) -> bool {
    // SAFETY: called with a sync event ctx (ops contract).
    let e = unsafe { event_of(ctx) };
    let Some(b) = e.backing.get() else {
        return false;
    };
    if !e.pending.borrow().is_empty() && e.ensure_waiter_registered().is_err() {
        // The waiter table is full: stay readable so the owner keeps polling instead of
        // sleeping through an update nobody would ring for.
        return true;
    }
    // Registered first, read second (SeqCst on both sides): an update that raced with the
    // registration is seen here, one after it rings the doorbell.
    let v = b.counter().load(SeqCst);
    // SAFETY: the pending list only holds submitted wait tasks of this ctx.
    e.pending.borrow().iter().any(|&t| unsafe { wait_satisfied(&*t, v) })
}

/// Whether the wait task `t` is satisfied by value `v`.
///
/// # Safety
/// `t` must be a wait_eq or wait_neq task.
unsafe fn wait_satisfied(t: &doca_task, v: u64) -> bool {
    if t.is::<doca_sync_event_task_wait_eq>() {
        // SAFETY: kind checked just above.
        let w = unsafe { t.downcast::<doca_sync_event_task_wait_eq>() };
        v & w.mask.get() == w.wait_val.get()
    } else {
        // SAFETY: the only other kind in the pending list is wait_neq.
        let w = unsafe { t.downcast::<doca_sync_event_task_wait_neq>() };
        v & w.mask.get() != w.wait_val.get()
    }
}

impl doca_sync_event {
    /// Completes every satisfied pending wait (in submission order); unregisters the doorbell
    /// when none is left. Returns true if any completed.
    fn scan_pending(&self) -> bool {
        if self.pending.borrow().is_empty() {
            return false;
        }
        let Some(b) = self.backing.get() else {
            return false;
        };
        let v = b.counter().load(SeqCst);
        let mut did = false;
        self.pending.borrow_mut().retain(|&t| {
            // SAFETY: the pending list only holds submitted wait tasks of this ctx; they stay
            // valid until completed (which removes them here) or flushed (which clears the
            // list first).
            let t = unsafe { &*t };
            // SAFETY: as above, only wait tasks are pending.
            if unsafe { wait_satisfied(t, v) } {
                task::complete(t, DOCA_SUCCESS);
                did = true;
                false
            } else {
                true
            }
        });
        if self.pending.borrow().is_empty() {
            self.unregister_waiter();
        }
        did
    }

    /// Submit body of the wait kinds.
    fn submit_wait(&self, t: &doca_task) -> Result<(), doca_error_t> {
        let b = self.backing.get().ok_or(DOCA_ERROR_BAD_STATE)?;
        // SAFETY: `t` is a wait task (called only from the wait kinds' submit).
        if unsafe { wait_satisfied(t, b.counter().load(SeqCst)) } {
            task::complete(t, DOCA_SUCCESS);
            return Ok(());
        }
        // The PE's doorbell is registered with the publishers only while the PE is armed
        // (about to sleep): a PE that is polling sees updates by itself, and sparing the
        // publisher a doorbell ring per update is what keeps a polled ping-pong in the
        // sub-microsecond range. Arming registers through `se_has_work`; a wait submitted
        // while already armed (from a callback in the drain after the arm) registers here.
        let armed = self.ctx.pe().ok_or(DOCA_ERROR_BAD_STATE)?.is_armed();
        if armed {
            self.ensure_waiter_registered()?;
        }
        self.pending.borrow_mut().push(t as *const doca_task);
        if armed {
            // Registered first, re-checked second (SeqCst on both sides): a publisher that
            // updated before our registration was visible is seen by this check.
            self.scan_pending();
        }
        Ok(())
    }

    /// Registers this handle's PE doorbell in the event's waiter table, once.
    fn ensure_waiter_registered(&self) -> Result<(), doca_error_t> {
        if self.reg.get().is_none() {
            let b = self.backing.get().ok_or(DOCA_ERROR_BAD_STATE)?;
            let pe = self.ctx.pe().ok_or(DOCA_ERROR_BAD_STATE)?;
            let reg = b.shared().register(pe.doorbell_address())?;
            self.reg.set(Some(reg));
        }
        Ok(())
    }
}

/// The event of a task.
fn task_event(t: &doca_task) -> &doca_sync_event {
    // SAFETY: sync event task kinds only live in pools of sync event ctxs.
    unsafe { event_of(t.ctx()) }
}

// ---- task types ----

/// `struct doca_sync_event_task_get`.
#[repr(C)]
pub struct doca_sync_event_task_get {
    base: doca_task,
    pub(super) ret_val_ptr: Cell<*mut u64>,
}

/// `struct doca_sync_event_task_notify_set`.
#[repr(C)]
pub struct doca_sync_event_task_notify_set {
    base: doca_task,
    pub(super) set_val: Cell<u64>,
}

/// `struct doca_sync_event_task_notify_add`.
#[repr(C)]
pub struct doca_sync_event_task_notify_add {
    base: doca_task,
    pub(super) inc_val: Cell<u64>,
    pub(super) fetched_val_ptr: Cell<*mut u64>,
}

/// `struct doca_sync_event_task_wait_eq`.
#[repr(C)]
pub struct doca_sync_event_task_wait_eq {
    base: doca_task,
    pub(super) wait_val: Cell<u64>,
    pub(super) mask: Cell<u64>,
}

/// `struct doca_sync_event_task_wait_neq`.
#[repr(C)]
pub struct doca_sync_event_task_wait_neq {
    base: doca_task,
    pub(super) wait_val: Cell<u64>,
    pub(super) mask: Cell<u64>,
}

static GET_KIND: TaskKind = TaskKind::new::<doca_sync_event_task_get>("sync_event.get", submit_get, None, None);
static NOTIFY_SET_KIND: TaskKind =
    TaskKind::new::<doca_sync_event_task_notify_set>("sync_event.notify_set", submit_notify_set, None, None);
static NOTIFY_ADD_KIND: TaskKind =
    TaskKind::new::<doca_sync_event_task_notify_add>("sync_event.notify_add", submit_notify_add, None, None);
static WAIT_EQ_KIND: TaskKind =
    TaskKind::new::<doca_sync_event_task_wait_eq>("sync_event.wait_eq", submit_wait_task, None, None);
static WAIT_NEQ_KIND: TaskKind =
    TaskKind::new::<doca_sync_event_task_wait_neq>("sync_event.wait_neq", submit_wait_task, None, None);

// SAFETY: #[repr(C)] with the doca_task header first; KIND is built for this type.
unsafe impl TaskType for doca_sync_event_task_get {
    const KIND: &'static TaskKind = &GET_KIND;
    fn with_header(base: doca_task) -> Self {
        Self { base, ret_val_ptr: Cell::new(ptr::null_mut()) }
    }
}

// SAFETY: as above.
unsafe impl TaskType for doca_sync_event_task_notify_set {
    const KIND: &'static TaskKind = &NOTIFY_SET_KIND;
    fn with_header(base: doca_task) -> Self {
        Self { base, set_val: Cell::new(0) }
    }
}

// SAFETY: as above.
unsafe impl TaskType for doca_sync_event_task_notify_add {
    const KIND: &'static TaskKind = &NOTIFY_ADD_KIND;
    fn with_header(base: doca_task) -> Self {
        Self { base, inc_val: Cell::new(0), fetched_val_ptr: Cell::new(ptr::null_mut()) }
    }
}

// SAFETY: as above.
unsafe impl TaskType for doca_sync_event_task_wait_eq {
    const KIND: &'static TaskKind = &WAIT_EQ_KIND;
    fn with_header(base: doca_task) -> Self {
        Self { base, wait_val: Cell::new(0), mask: Cell::new(0) }
    }
}

// SAFETY: as above.
unsafe impl TaskType for doca_sync_event_task_wait_neq {
    const KIND: &'static TaskKind = &WAIT_NEQ_KIND;
    fn with_header(base: doca_task) -> Self {
        Self { base, wait_val: Cell::new(0), mask: Cell::new(0) }
    }
}

unsafe fn submit_get(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    let e = task_event(t);
    let b = e.backing.get().ok_or(DOCA_ERROR_BAD_STATE)?;
    // SAFETY: this hook is only registered for the get kind.
    let g = unsafe { t.downcast::<doca_sync_event_task_get>() };
    let dst = g.ret_val_ptr.get();
    if dst.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let v = b.counter().load(SeqCst);
    // SAFETY: the caller gave this pointer at allocation and keeps it valid until the
    // completion (DOCA contract); unaligned writes are tolerated.
    unsafe { dst.write_unaligned(v) };
    task::complete(t, DOCA_SUCCESS);
    Ok(())
}

unsafe fn submit_notify_set(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    let e = task_event(t);
    let b = e.backing.get().ok_or(DOCA_ERROR_BAD_STATE)?;
    // SAFETY: this hook is only registered for the notify_set kind.
    let n = unsafe { t.downcast::<doca_sync_event_task_notify_set>() };
    doca_sync_event::publish_set(b, n.set_val.get());
    task::complete(t, DOCA_SUCCESS);
    Ok(())
}

unsafe fn submit_notify_add(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    let e = task_event(t);
    let b = e.backing.get().ok_or(DOCA_ERROR_BAD_STATE)?;
    // SAFETY: this hook is only registered for the notify_add kind.
    let n = unsafe { t.downcast::<doca_sync_event_task_notify_add>() };
    let dst = n.fetched_val_ptr.get();
    if dst.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let old = doca_sync_event::publish_add(b, n.inc_val.get());
    // SAFETY: as in submit_get.
    unsafe { dst.write_unaligned(old) };
    task::complete(t, DOCA_SUCCESS);
    Ok(())
}

unsafe fn submit_wait_task(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    task_event(t).submit_wait(t)
}

// ---- entry points ----

macro_rules! task_entry_points {
    ($ty:ident, $cb:ident, $set_conf:ident, $as_task:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $set_conf(
            event: *mut doca_sync_event,
            ok_cb: $cb,
            err_cb: $cb,
            num_tasks: u32,
        ) -> doca_error_t {
            guard_err(|| {
                // SAFETY: non-NULL event pointers come from this provider (DOCA contract).
                let e = unsafe { ev_ref(event) }?;
                task::set_conf::<$ty>(&e.ctx, ok_cb, err_cb, num_tasks)
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $as_task(task: *mut $ty) -> *mut doca_task {
            // The header is the first field: a cast (NULL stays NULL).
            guard(ptr::null_mut(), || task.cast::<doca_task>())
        }
    };
}

task_entry_points!(
    doca_sync_event_task_get,
    doca_sync_event_task_get_completion_cb_t,
    doca_sync_event_task_get_set_conf,
    doca_sync_event_task_get_as_doca_task
);
task_entry_points!(
    doca_sync_event_task_notify_set,
    doca_sync_event_task_notify_set_completion_cb_t,
    doca_sync_event_task_notify_set_set_conf,
    doca_sync_event_task_notify_set_as_doca_task
);
task_entry_points!(
    doca_sync_event_task_notify_add,
    doca_sync_event_task_notify_add_completion_cb_t,
    doca_sync_event_task_notify_add_set_conf,
    doca_sync_event_task_notify_add_as_doca_task
);
task_entry_points!(
    doca_sync_event_task_wait_eq,
    doca_sync_event_task_wait_eq_completion_cb_t,
    doca_sync_event_task_wait_eq_set_conf,
    doca_sync_event_task_wait_eq_as_doca_task
);
task_entry_points!(
    doca_sync_event_task_wait_neq,
    doca_sync_event_task_wait_neq_completion_cb_t,
    doca_sync_event_task_wait_neq_set_conf,
    doca_sync_event_task_wait_neq_as_doca_task
);

/// Allocates a `T` on the event's ctx and writes it to `task`; `init` fills the fields.
///
/// # Safety
/// `event` NULL or a live event; `task` NULL or writable.
unsafe fn alloc_init<T: TaskType>(
    event: *mut doca_sync_event,
    user_data: doca_data,
    task: *mut *mut T,
    init: impl FnOnce(&T),
) -> Result<(), doca_error_t> {
    // SAFETY: per the contract.
    let e = unsafe { ev_ref(event) }?;
    if task.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let t = task::alloc::<T>(&e.ctx, user_data)?;
    // SAFETY: `t` is a freshly allocated slot of type T, alive while the ctx lives.
    init(unsafe { t.as_ref() });
    // SAFETY: non-NULL out-pointer, writable by the caller's contract.
    unsafe { out(task, t.as_ptr()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_task_get_alloc_init(
    event: *mut doca_sync_event,
    ret_val_ptr: *mut u64,
    user_data: doca_data,
    task: *mut *mut doca_sync_event_task_get,
) -> doca_error_t {
    guard_err(|| {
        if ret_val_ptr.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: forwarded contract.
        unsafe { alloc_init(event, user_data, task, |t: &doca_sync_event_task_get| t.ret_val_ptr.set(ret_val_ptr)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_task_notify_set_alloc_init(
    event: *mut doca_sync_event,
    set_val: u64,
    user_data: doca_data,
    task: *mut *mut doca_sync_event_task_notify_set,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { alloc_init(event, user_data, task, |t: &doca_sync_event_task_notify_set| t.set_val.set(set_val)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_task_notify_add_alloc_init(
    event: *mut doca_sync_event,
    inc_val: u64,
    fetched_val_ptr: *mut u64,
    user_data: doca_data,
    task: *mut *mut doca_sync_event_task_notify_add,
) -> doca_error_t {
    guard_err(|| {
        if fetched_val_ptr.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(event, user_data, task, |t: &doca_sync_event_task_notify_add| {
                t.inc_val.set(inc_val);
                t.fetched_val_ptr.set(fetched_val_ptr);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_task_wait_eq_alloc_init(
    event: *mut doca_sync_event,
    wait_val: u64,
    mask: u64,
    user_data: doca_data,
    task: *mut *mut doca_sync_event_task_wait_eq,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(event, user_data, task, |t: &doca_sync_event_task_wait_eq| {
                t.wait_val.set(wait_val);
                t.mask.set(mask);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_task_wait_neq_alloc_init(
    event: *mut doca_sync_event,
    wait_val: u64,
    mask: u64,
    user_data: doca_data,
    task: *mut *mut doca_sync_event_task_wait_neq,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(event, user_data, task, |t: &doca_sync_event_task_wait_neq| {
                t.wait_val.set(wait_val);
                t.mask.set(mask);
            })
        }
    })
}
