//! Test-only helpers: a minimal ctx kind ("dummy") that exercises the generic PE, ctx and task
//! machinery (sync or async start, tasks that complete at submit or are held until released),
//! plus recording callbacks and small fd utilities.
//!
//! This is the crate's one home for test helpers that several modules' tests share (the
//! workspace convention); a module's own helpers stay in its `tests` module. Sub-modules:
//! [`dev`] (devices to open), [`mem`] (a started mmap), [`fake_daemon`] (an in-process UROM
//! daemon for the host-side tests).

pub(crate) mod dev;
pub(crate) mod fake_daemon;
pub(crate) mod mem;

use core::cell::{Cell, RefCell};
use core::ptr;
use std::os::fd::RawFd;

use crate::ctx::{self, doca_ctx, CtxOps, StartMode};
use crate::pe::{doca_pe, doca_pe_create, doca_pe_destroy, doca_pe_get_notification_handle, doca_pe_progress};
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

/// The dummy ctx-kind object.
pub(crate) struct Dummy {
    ctx: doca_ctx,
    /// Start asynchronously (STARTING until `ready`).
    pub async_start: bool,
    /// For async starts: progress finishes the start once this is set.
    pub ready: Cell<bool>,
    /// For async starts: finish with a failure instead.
    pub fail_start: Cell<bool>,
    /// Submitted tasks are held (not completed) until `release_all`.
    pub hold: Cell<bool>,
    pending: RefCell<Vec<*const doca_task>>,
    /// Descriptors whose `doca_pe::fd_ready` the progress hook records, each call, into
    /// `probed` (what a ctx reading sockets asks before each read).
    pub probe: RefCell<Vec<std::os::fd::RawFd>>,
    pub probed: RefCell<Vec<bool>>,
    /// Asks with `doca_pe::fd_ready_within` and this freshness instead of `fd_ready`.
    pub probe_fresh: Cell<Option<std::time::Duration>>,
}

/// A dummy task: `fail` makes it complete with DOCA_ERROR_IO_FAILED.
#[repr(C)]
pub(crate) struct DummyTask {
    base: doca_task,
    pub fail: Cell<bool>,
}

static DUMMY_KIND: TaskKind = TaskKind::new::<DummyTask>("dummy.task", submit_dummy, None, None);

// SAFETY: #[repr(C)] with the header first; KIND built for this type.
unsafe impl TaskType for DummyTask {
    const KIND: &'static TaskKind = &DUMMY_KIND;
    fn with_header(base: doca_task) -> Self {
        DummyTask { base, fail: Cell::new(false) }
    }
}

static DUMMY_OPS: CtxOps = CtxOps {
    name: "dummy",
    can_connect: None,
    start: dummy_start,
    stop: dummy_stop,
    stopped: None,
    progress: Some(dummy_progress),
    has_work: Some(dummy_has_work),
    stop_via_progress: false,
};

unsafe fn me(ctx: &doca_ctx) -> &Dummy {
    // SAFETY: dummy ctxs bind their Dummy as owner in `create`.
    unsafe { ctx.owner::<Dummy>() }
}

unsafe fn dummy_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: ops contract.
    let d = unsafe { me(ctx) };
    Ok(if d.async_start { StartMode::Async } else { StartMode::Sync })
}

unsafe fn dummy_stop(ctx: &doca_ctx) {
    // SAFETY: ops contract.
    unsafe { me(ctx) }.pending.borrow_mut().clear();
}

unsafe fn dummy_progress(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let d = unsafe { me(ctx) };
    if let Some(pe) = ctx.pe() {
        let ask = |fd| match d.probe_fresh.get() {
            Some(fresh) => pe.fd_ready_within(fd, fresh),
            None => pe.fd_ready(fd),
        };
        let seen: Vec<bool> = d.probe.borrow().iter().map(|&fd| ask(fd)).collect();
        if !seen.is_empty() {
            *d.probed.borrow_mut() = seen;
        }
    }
    if ctx.state() == DOCA_CTX_STATE_STARTING && d.ready.get() {
        d.ready.set(false);
        if d.fail_start.get() {
            ctx::mark_start_failed(ctx);
        } else {
            ctx::mark_started(ctx);
        }
        return true;
    }
    false
}

unsafe fn dummy_has_work(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    ctx.state() == DOCA_CTX_STATE_STARTING && unsafe { me(ctx) }.ready.get()
}

unsafe fn submit_dummy(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: only dummy tasks use this hook.
    let d = unsafe { me(t.ctx()) };
    if d.hold.get() {
        d.pending.borrow_mut().push(t);
        return Ok(());
    }
    // SAFETY: kind is DummyTask.
    let fail = unsafe { t.downcast::<DummyTask>() }.fail.get();
    task::complete(t, if fail { DOCA_ERROR_IO_FAILED } else { DOCA_SUCCESS });
    Ok(())
}

impl Dummy {
    /// A new dummy object (leaked as a raw pointer, like a C object).
    pub fn create(async_start: bool) -> *mut Dummy {
        let raw = Box::into_raw(Box::new(Dummy {
            ctx: doca_ctx::new(&DUMMY_OPS),
            async_start,
            ready: Cell::new(false),
            fail_start: Cell::new(false),
            hold: Cell::new(false),
            pending: RefCell::new(Vec::new()),
            probe: RefCell::new(Vec::new()),
            probed: RefCell::new(Vec::new()),
            probe_fresh: Cell::new(None),
        }));
        // SAFETY: fresh allocation.
        unsafe { (*raw).ctx.bind_owner(raw) };
        raw
    }

    /// The ctx pointer (what `*_as_ctx` would return).
    pub fn ctx(p: *mut Dummy) -> *mut doca_ctx {
        // SAFETY: `p` is a live Dummy.
        unsafe { ptr::addr_of_mut!((*p).ctx) }
    }

    /// Destroys it (like a kind's `*_destroy`).
    pub fn destroy(p: *mut Dummy) -> Result<(), doca_error_t> {
        // SAFETY: `p` is a live Dummy.
        unsafe { &*p }.ctx.teardown()?;
        // SAFETY: from Box::into_raw; torn down, nothing references it.
        drop(unsafe { Box::from_raw(p) });
        Ok(())
    }

    /// Configures the dummy task pool.
    pub fn set_conf(p: *mut Dummy, n: u32) -> Result<(), doca_error_t> {
        // SAFETY: `p` is a live Dummy.
        task::set_conf::<DummyTask>(&unsafe { &*p }.ctx, Some(rec_ok), Some(rec_err), n)
    }

    /// Allocates a dummy task.
    pub fn alloc(p: *mut Dummy, ud: u64) -> Result<*mut doca_task, doca_error_t> {
        // SAFETY: `p` is a live Dummy.
        let t = task::alloc::<DummyTask>(&unsafe { &*p }.ctx, doca_data::from_u64(ud))?;
        Ok(t.as_ptr().cast())
    }

    /// The user data of the tasks the kind holds (handed to it by submit), in order.
    pub fn pending_uds(p: *mut Dummy) -> Vec<u64> {
        // SAFETY: `p` is a live Dummy; pending tasks are live tasks of its ctx.
        let d = unsafe { &*p };
        d.pending
            .borrow()
            .iter()
            // SAFETY: as above: pending tasks are live tasks of its ctx.
            .map(|&t| unsafe { &*t }.user_data_for_tests())
            .collect()
    }

    /// Completes every held task successfully.
    pub fn release_all(p: *mut Dummy) {
        // SAFETY: `p` is a live Dummy.
        let d = unsafe { &*p };
        let v: Vec<_> = d.pending.borrow_mut().drain(..).collect();
        for t in v {
            // SAFETY: held tasks are submitted tasks of this ctx.
            task::complete(unsafe { &*t }, DOCA_SUCCESS);
        }
    }

    /// The object.
    pub fn get<'a>(p: *mut Dummy) -> &'a Dummy {
        // SAFETY: `p` is a live Dummy.
        unsafe { &*p }
    }
}

/// Marks a dummy task to fail.
pub(crate) fn set_fail(t: *mut doca_task, fail: bool) {
    // SAFETY: `t` is a live dummy task.
    unsafe { &*t.cast::<DummyTask>() }.fail.set(fail);
}

// ---- recording callbacks (thread-local: tests run on separate threads) ----

/// A recorded task completion.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Done {
    pub task: usize,
    pub ok: bool,
    pub status: doca_error_t,
    pub ud: u64,
    pub ctx_ud: u64,
}

/// What a recording callback does with the task after recording it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Then {
    Keep,
    Free,
    /// Allocate and submit another task on the same dummy ctx (from inside the callback),
    /// then free this one.
    SubmitAnotherThenFree,
}

thread_local! {
    pub(crate) static DONE: RefCell<Vec<Done>> = const { RefCell::new(Vec::new()) };
    pub(crate) static THEN: Cell<Then> = const { Cell::new(Then::Keep) };
    pub(crate) static STATES: RefCell<Vec<(doca_ctx_states, doca_ctx_states)>> = const { RefCell::new(Vec::new()) };
    pub(crate) static NESTED_PROGRESS: Cell<Option<u8>> = const { Cell::new(None) };
    pub(crate) static PE_FOR_NESTED: Cell<*mut doca_pe> = const { Cell::new(ptr::null_mut()) };
}

pub(crate) unsafe fn record(task: *mut doca_task, ok: bool, ud: doca_data, cud: doca_data) {
    // SAFETY: called by the PE with a live task.
    let status = unsafe { task::doca_task_get_status(task) };
    DONE.with(|d| d.borrow_mut().push(Done { task: task as usize, ok, status, ud: ud.as_u64(), ctx_ud: cud.as_u64() }));
    let pe = PE_FOR_NESTED.with(|p| p.get());
    if !pe.is_null() {
        // SAFETY: the test set a live PE.
        let r = unsafe { doca_pe_progress(pe) };
        NESTED_PROGRESS.with(|n| n.set(Some(r)));
    }
    match THEN.with(|t| t.get()) {
        Then::Keep => {}
        // SAFETY: ownership is ours inside the callback.
        Then::Free => unsafe { task::doca_task_free(task) },
        Then::SubmitAnotherThenFree => {
            // SAFETY: live task; its ctx is a dummy ctx.
            let ctx = unsafe { crate::ctx::doca_task_get_ctx(task) };
            // SAFETY: dummy ctxs are owned by a Dummy.
            let d = unsafe { (*ctx).owner::<Dummy>() } as *const Dummy as *mut Dummy;
            THEN.with(|t| t.set(Then::Free));
            let n = Dummy::alloc(d, ud.as_u64() + 1000).expect("alloc inside callback");
            // SAFETY: freshly allocated task.
            assert_eq!(unsafe { task::doca_task_submit(n) }, DOCA_SUCCESS);
            // SAFETY: ours to free.
            unsafe { task::doca_task_free(task) };
        }
    }
}

pub(crate) unsafe extern "C" fn rec_ok(task: *mut DummyTask, ud: doca_data, cud: doca_data) {
    // SAFETY: forwarded.
    unsafe { record(task.cast(), true, ud, cud) }
}

pub(crate) unsafe extern "C" fn rec_err(task: *mut DummyTask, ud: doca_data, cud: doca_data) {
    // SAFETY: forwarded.
    unsafe { record(task.cast(), false, ud, cud) }
}

/// A state-change callback that records (prev, next).
pub(crate) unsafe extern "C" fn rec_state(
    _ud: doca_data,
    _ctx: *mut doca_ctx,
    prev: doca_ctx_states,
    next: doca_ctx_states,
) {
    STATES.with(|s| s.borrow_mut().push((prev, next)));
}

/// Takes the recorded completions.
pub(crate) fn take_done() -> Vec<Done> {
    DONE.with(|d| core::mem::take(&mut *d.borrow_mut()))
}

/// Takes the recorded state changes.
pub(crate) fn take_states() -> Vec<(doca_ctx_states, doca_ctx_states)> {
    STATES.with(|s| core::mem::take(&mut *s.borrow_mut()))
}

/// Resets all thread-local recorders.
pub(crate) fn reset() {
    take_done();
    take_states();
    THEN.with(|t| t.set(Then::Keep));
    NESTED_PROGRESS.with(|n| n.set(None));
    PE_FOR_NESTED.with(|p| p.set(ptr::null_mut()));
}

/// Progress until 0 (bounded); returns the number of units of work.
pub(crate) fn drain(pe: *mut doca_pe) -> usize {
    let mut n = 0;
    // SAFETY: `pe` is live.
    while unsafe { doca_pe_progress(pe) } == 1 {
        n += 1;
        assert!(n < 1_000_000, "progress never returned 0");
    }
    n
}

/// A new PE.
pub(crate) fn new_pe() -> *mut doca_pe {
    let mut pe = ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { doca_pe_create(&mut pe) }, DOCA_SUCCESS);
    pe
}

/// Destroys a PE (asserting success).
pub(crate) fn destroy_pe(pe: *mut doca_pe) {
    // SAFETY: live PE without ctxs.
    assert_eq!(unsafe { doca_pe_destroy(pe) }, DOCA_SUCCESS);
}

/// The PE's notification fd.
pub(crate) fn pe_fd(pe: *mut doca_pe) -> RawFd {
    let mut h = -1;
    // SAFETY: live PE, valid out-pointer.
    let r = unsafe { doca_pe_get_notification_handle(pe, &mut h) };
    assert_eq!(r, DOCA_SUCCESS);
    h
}

/// `poll(fd, POLLIN)` with `timeout_ms`; true if readable.
pub(crate) fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    r == 1 && p.revents & libc::POLLIN != 0
}

pub(crate) mod rdma;
