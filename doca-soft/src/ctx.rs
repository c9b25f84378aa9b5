//! Contexts: the state machine shared by every ctx kind, and the `doca_ctx_*` entry points.
//!
//! # Model
//!
//! A [`doca_ctx`] is embedded in each ctx-kind object (the sync event now; RDMA, UROM
//! service/worker/domain later). The kind gives it a static [`CtxOps`] descriptor and, once the
//! object has its final address (after `Box::into_raw`), binds the owner pointer with
//! [`doca_ctx::bind_owner`] so hooks can get back to the object ([`doca_ctx::owner`]). The
//! kind's `*_as_ctx` returns a pointer to the embedded field; its `*_destroy` calls
//! [`doca_ctx::teardown`] first (refused unless the ctx is IDLE) and then frees the object.
//!
//! ```text
//!            doca_ctx_start (sync kind)                        doca_ctx_stop, nothing allocated
//!   IDLE ──────────────────────────────────────▶ RUNNING ─────────────────────────────▶ IDLE
//!    │  doca_ctx_start (async kind):                ▲  │ doca_ctx_stop with tasks allocated:
//!    │  returns IN_PROGRESS                         │  │ returns IN_PROGRESS, submitted tasks
//!    ▼                                              │  ▼ are flushed (FLUSH_STATUS)
//!  STARTING ── kind calls mark_started; the ────────┘ STOPPING ── last task freed; reported
//!              PE reports it from progress                        from progress ──▶ IDLE
//! ```
//!
//! * Transitions caused directly by `doca_ctx_start` / `doca_ctx_stop` (IDLE→RUNNING,
//!   IDLE→STARTING, RUNNING→IDLE, RUNNING→STOPPING, STARTING→STOPPING…) call the state-change
//!   callback synchronously, as the last thing the call does. Asynchronous transitions
//!   (STARTING→RUNNING, STARTING→IDLE on a failed start, STOPPING→IDLE) are delivered by
//!   `doca_pe_progress` (one per call, counted as progress).
//! * `doca_ctx_stop` first lets the kind drop its own references to submitted tasks
//!   ([`CtxOps::stop`]), then completes every submitted task with [`FLUSH_STATUS`]; their
//!   error callbacks run from progress. The ctx stays STOPPING until **every** task of the ctx
//!   is freed (allocated-but-unsubmitted ones too: "all tasks must be freed before a ctx can
//!   stop"). A stopped ctx can be reconfigured and started again.
//! * A kind whose task errors stop the ctx (DMA) calls [`mark_failed`]: progress reports
//!   RUNNING→STOPPING and flushes as `doca_ctx_stop` would, then IDLE once every task is freed.
//! * The ctx user data is passed to every task callback and to the state-change callback.
//!
//! # Layer
//! The middle of the core (task ← ctx ← pe, see "Layers of the core" in
//! `docs/soft-provider.md`): a ctx uses the task module (it owns the pools and implements
//! [`TaskOwner`] for them) and reaches its PE only through [`PeLink`], which the PE
//! implements. `doca_ctx::pe`, the concrete PE for kinds, is defined in `pe.rs`.
//!
//! # Ownership
//! The kind owns the object (and so the ctx). The ctx owns its task pools; they are freed
//! with it, which is why a ctx may only be destroyed IDLE (no task can be referenced then).
//! The PE only holds pointers to its connected ctxs; `teardown` removes the ctx from it.
//!
//! # Threads
//! Single-threaded, like DOCA: a ctx is used on the thread of its PE.

use core::any::Any;
use core::cell::{Cell, RefCell};
use core::ffi::c_void;
use core::ptr::{self, NonNull};

use crate::ffi::{guard, guard_err, out};
use crate::task::{doca_task, task_ref, CompletionQueue, CtxTasks, Pool, PoolBox, TaskKind, TaskOwner};
use crate::types::*;

/// `"CTX!"`: marks a live ctx.
const CTX_MAGIC: u32 = 0x4354_5821;

/// The status of tasks flushed by `doca_ctx_stop`: `DOCA_ERROR_SHUTDOWN` ("shut down in
/// progress or completed").
///
/// NVIDIA's documentation says flushed tasks complete through their error callbacks but does
/// not name the code; hardware-backed contexts may report a transport error (for example
/// `DOCA_ERROR_IO_FAILED` for flushed work requests) instead. The runtime should therefore
/// treat any error status of a task completed while its ctx is STOPPING as "cancelled by
/// stop", and `DOCA_ERROR_SHUTDOWN` as that in any state.
pub const FLUSH_STATUS: doca_error_t = DOCA_ERROR_SHUTDOWN;

/// How a kind's start finished.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StartMode {
    /// Started: the ctx goes RUNNING at once.
    Sync,
    /// Starting: the ctx goes STARTING and `doca_ctx_start` returns `DOCA_ERROR_IN_PROGRESS`;
    /// the kind calls [`mark_started`] (or [`mark_start_failed`]) later, from its progress hook.
    Async,
}

/// A hook that may refuse an operation with a DOCA status.
pub type CtxCheck = unsafe fn(ctx: &doca_ctx) -> Result<(), doca_error_t>;

/// The static descriptor of a ctx kind: its hooks into the generic state machine and the PE.
pub struct CtxOps {
    /// For diagnostics.
    pub name: &'static str,
    /// Optional: may this ctx be connected to a PE now? (Called by `doca_pe_connect_ctx`
    /// after the generic checks; e.g. a sync event started standalone refuses with BAD_STATE.)
    pub can_connect: Option<CtxCheck>,
    /// Starts the kind (allocate resources, open connections). Called by `doca_ctx_start`
    /// when the ctx is IDLE and connected. An error leaves the ctx IDLE.
    pub start: unsafe fn(ctx: &doca_ctx) -> Result<StartMode, doca_error_t>,
    /// Called by `doca_ctx_stop` (from RUNNING or STARTING). The kind must forget every
    /// submitted task it holds (the framework flushes them right after) and stop producing
    /// completions; it may unregister fds and doorbells here.
    pub stop: unsafe fn(ctx: &doca_ctx),
    /// Optional: called when the ctx reaches IDLE (all tasks freed), before the state-change
    /// callback: release what `start` acquired.
    pub stopped: Option<unsafe fn(ctx: &doca_ctx)>,
    /// Optional: the progress hook, called by every `doca_pe_progress` for a ctx that is not
    /// IDLE. Completes ready tasks with [`crate::task::complete`], finishes an async start,
    /// polls rings. Returns true if it did anything. Must not call user callbacks.
    pub progress: Option<unsafe fn(ctx: &doca_ctx) -> bool>,
    /// Optional: is there work `progress` would do right now? Asked when the PE is armed
    /// (`doca_pe_request_notification`); true makes the notification handle readable at once.
    /// Kinds that register fds in [`crate::pe::FdMode::Drain`] mode must answer from the real
    /// state (the fd is drained when arming).
    pub has_work: Option<unsafe fn(ctx: &doca_ctx) -> bool>,
    /// Whether `doca_ctx_stop` always goes through STOPPING (returning `IN_PROGRESS`) and
    /// leaves the STOPPING → IDLE report to progress, even with no task allocated. The UROM
    /// worker: NVIDIA's samples stop it, then count `doca_pe_progress` results until IDLE and
    /// fail when none was 1. RDMA: NVIDIA's samples expect IN_PROGRESS from a stop inside a
    /// callback, and act on the STOPPING report.
    pub stop_via_progress: bool,
}

/// What a ctx needs from the PE it is connected to.
///
/// The PE is the layer above the ctx (it drives its connected ctxs), so the ctx does not name
/// `doca_pe`: `pe.rs` implements this trait for it and hands the ctx a link when it connects
/// (`doca_pe_connect_ctx`). Kinds that need the concrete PE (to register fds, for its
/// doorbell) use `doca_ctx::pe`, which `pe.rs` defines.
pub trait PeLink: Any {
    /// The PE's completion queue (the ctx's tasks queue their completions there directly,
    /// through [`CtxTasks`]).
    fn completions(&self) -> &CompletionQueue;
    /// Makes an armed PE's notification handle readable: progress has work.
    fn notify_work(&self);
    /// An asynchronous transition of a ctx of this PE may have become due: progress must look
    /// for one again, and an armed PE wakes up ([`PeLink::notify_work`]). The ctx layer calls
    /// it at every change that can make `doca_ctx::transition_due` true (a start finished
    /// or failed, a STOPPING ctx with no task left), so that while it has not been called
    /// since progress last found none due, progress need not walk its ctxs to look.
    fn transition_may_be_due(&self);
    /// A ctx of this PE was marked failed ([`mark_failed`]): progress must report its stop
    /// before it delivers any completion (and an armed PE wakes up).
    fn failure_may_be_due(&self);
    /// Forgets `ctx` (it is being destroyed).
    fn disconnect(&self, ctx: &doca_ctx);
}

/// `struct doca_ctx`: embedded in every ctx-kind object.
#[repr(C)]
pub struct doca_ctx {
    magic: u32,
    state: Cell<doca_ctx_states>,
    ops: &'static CtxOps,
    owner: Cell<*const c_void>,
    /// The PE this ctx is connected to (see [`PeLink`]); set once by `doca_pe_connect_ctx`,
    /// always to a `doca_pe` (`set_pe`'s contract).
    pe: Cell<Option<NonNull<dyn PeLink>>>,
    state_cb: Cell<doca_ctx_state_changed_callback_t>,
    /// An asynchronous transition waiting to be reported by progress.
    pending: Cell<Option<doca_ctx_states>>,
    pools: RefCell<Vec<PoolBox>>,
    /// The pool `pool_for` found last (NULL or one of `pools`): allocations on a ctx are
    /// mostly of one kind at a time, and this spares them the borrow and the search.
    last_pool: Cell<*const Pool>,
    retired: RefCell<Vec<PoolBox>>,
    allocated: Cell<usize>,
    /// The in-flight count, the held tasks (submitted without
    /// `DOCA_TASK_SUBMIT_FLAG_FLUSH`, see [`CtxTasks::flush_held`]), the user data and the
    /// PE's completion queue: what every submit and delivery works on, kept by the task
    /// layer (every task header points at it).
    tasks: CtxTasks,
    /// `doca_ctx_set_completion_vector` (the soft device has one vector, so only 0).
    comp_vector: Cell<u32>,
}

impl doca_ctx {
    /// A new IDLE, unconnected ctx of the kind described by `ops`.
    pub fn new(ops: &'static CtxOps) -> doca_ctx {
        doca_ctx {
            magic: CTX_MAGIC,
            state: Cell::new(DOCA_CTX_STATE_IDLE),
            ops,
            owner: Cell::new(ptr::null()),
            pe: Cell::new(None),
            state_cb: Cell::new(None),
            pending: Cell::new(None),
            pools: RefCell::new(Vec::new()),
            last_pool: Cell::new(ptr::null()),
            retired: RefCell::new(Vec::new()),
            allocated: Cell::new(0),
            tasks: CtxTasks::new(),
            comp_vector: Cell::new(0),
        }
    }

    /// Records the object that embeds this ctx (call once it has its final address).
    pub fn bind_owner<T>(&self, owner: *const T) {
        self.owner.set(owner.cast());
    }

    /// The embedding object.
    ///
    /// # Safety
    /// `T` must be the type passed to [`doca_ctx::bind_owner`], and the object must be alive
    /// (true for as long as the ctx is).
    pub unsafe fn owner<T>(&self) -> &T {
        debug_assert!(!self.owner.get().is_null());
        // SAFETY: per the contract, the owner pointer is a live `T` embedding this ctx.
        unsafe { &*self.owner.get().cast::<T>() }
    }

    /// The kind's descriptor.
    pub fn ops(&self) -> &'static CtxOps {
        self.ops
    }

    /// The current state.
    pub fn state(&self) -> doca_ctx_states {
        self.state.get()
    }

    /// The ctx user data.
    pub fn user_data(&self) -> doca_data {
        self.tasks.user_data()
    }

    /// The PE this ctx is connected to, if any, as the ctx layer knows it (the concrete PE is
    /// `doca_ctx::pe`, defined in `pe.rs`). The PE outlives its connected ctxs
    /// (`doca_pe_destroy` refuses while any is connected).
    pub fn pe_link(&self) -> Option<&dyn PeLink> {
        self.pe.get().map(|p| {
            // SAFETY: see above; the link is cleared when the ctx is torn down.
            unsafe { p.as_ref() }
        })
    }

    /// Tasks allocated from this ctx and not freed (in any state but Free).
    pub fn allocated_tasks(&self) -> usize {
        self.allocated.get()
    }

    /// Tasks submitted and not yet delivered.
    pub fn inflight_tasks(&self) -> usize {
        self.tasks.inflight()
    }

    /// Checks that the ctx may be destroyed and disconnects it from its PE. Call from the
    /// kind's `*_destroy` before freeing the object. Refused (`DOCA_ERROR_BAD_STATE`) unless
    /// the ctx is IDLE with no asynchronous transition pending and no task allocated.
    pub fn teardown(&self) -> Result<(), doca_error_t> {
        if self.state.get() != DOCA_CTX_STATE_IDLE || self.pending.get().is_some() || self.allocated.get() != 0 {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        if let Some(pe) = self.pe_link() {
            pe.disconnect(self);
        }
        self.pe.set(None);
        self.tasks.set_completion_queue(None);
        Ok(())
    }

    // ---- used by task.rs ----

    pub(crate) fn pool_for(&self, kind: &'static TaskKind) -> Option<&Pool> {
        let last = self.last_pool.get();
        // SAFETY: `last_pool` is NULL or a pool of `pools` (install_pool resets it when it
        // replaces one); pools live as long as the ctx (see below).
        if !last.is_null() && ptr::eq(unsafe { &*last }.kind(), kind) {
            // SAFETY: as just above.
            return Some(unsafe { &*last });
        }
        let pools = self.pools.borrow();
        let p = pools.iter().find(|p| ptr::eq(p.get().kind(), kind))?;
        let p: *const Pool = p.get();
        self.last_pool.set(p);
        // SAFETY: pools are heap allocations owned by this ctx and freed only when the ctx is
        // dropped (replaced ones are kept in `retired`), so the reference outlives the borrow.
        Some(unsafe { &*p })
    }

    pub(crate) fn install_pool(&self, pool: PoolBox) -> &Pool {
        let p: *const Pool = pool.get();
        // SAFETY: `p` is a pool kept alive by this ctx until it is dropped (see pool_for).
        let kind = unsafe { &*p }.kind();
        let mut pools = self.pools.borrow_mut();
        // The cached look-up may name the pool being replaced.
        self.last_pool.set(ptr::null());
        if let Some(i) = pools.iter().position(|q| ptr::eq(q.get().kind(), kind)) {
            let old = core::mem::replace(&mut pools[i], pool);
            self.retired.borrow_mut().push(old);
        } else {
            pools.push(pool);
        }
        // SAFETY: as above.
        unsafe { &*p }
    }

    pub(crate) fn for_each_pool(&self, mut f: impl FnMut(&Pool)) {
        let pools = self.pools.borrow();
        for p in pools.iter() {
            f(p.get());
        }
    }

    pub(crate) fn task_allocated(&self) {
        self.allocated.set(self.allocated.get() + 1);
    }

    pub(crate) fn task_freed(&self) {
        let n = self.allocated.get().saturating_sub(1);
        self.allocated.set(n);
        if n == 0 && self.state.get() == DOCA_CTX_STATE_STOPPING {
            // STOPPING → IDLE is now due; progress reports it.
            if let Some(pe) = self.pe_link() {
                pe.transition_may_be_due();
            }
        }
    }

    /// Hands every held task to its kind, in submission order (the deferred doorbell; see
    /// [`CtxTasks::flush_held`]). Returns true if any task was held.
    #[inline]
    pub(crate) fn flush_held(&self) -> bool {
        self.tasks.flush_held()
    }

    /// Whether any task is held.
    fn has_held(&self) -> bool {
        self.tasks.has_held()
    }

    // ---- used by pe.rs ----

    /// Connects the ctx to its PE (once, from `doca_pe_connect_ctx`).
    ///
    /// # Safety
    /// `pe` must point to a `crate::pe::doca_pe`: `doca_ctx::pe` (in `pe.rs`) reads the link
    /// as one without asking its type.
    pub(crate) unsafe fn set_pe(&self, pe: NonNull<dyn PeLink>) {
        self.pe.set(Some(pe));
        // SAFETY: the PE outlives its connected ctxs (`doca_pe_destroy` refuses while any is
        // connected, and teardown forgets the queue with the link).
        self.tasks.set_completion_queue(Some(unsafe { pe.as_ref() }.completions()));
    }

    /// Whether a failed task stops this ctx and progress has not reported it yet
    /// ([`mark_failed`]): the kind completes new tasks with [`FLUSH_STATUS`] meanwhile.
    pub fn failing(&self) -> bool {
        self.pending.get() == Some(DOCA_CTX_STATE_STOPPING)
    }

    /// True when an asynchronous transition is due (progress will report it). Every change
    /// that can make it true tells the PE ([`PeLink::transition_may_be_due`]).
    pub(crate) fn transition_due(&self) -> bool {
        self.pending.get().is_some() || (self.state.get() == DOCA_CTX_STATE_STOPPING && self.allocated.get() == 0)
    }

    /// Runs the kind's progress hook (not for IDLE ctxs).
    // Inlined into the PE's walk over its ctxs (an idle progress makes it per ctx).
    #[inline]
    pub(crate) fn run_progress_hook(&self) -> bool {
        if self.state.get() == DOCA_CTX_STATE_IDLE {
            return false;
        }
        let flushed = self.flush_held();
        let did = match self.ops.progress {
            // SAFETY: the hook is called with a ctx of its own kind.
            Some(f) => unsafe { f(self) },
            None => false,
        };
        flushed || did
    }

    /// Whether progress has work for this ctx now (transition due or the kind says so).
    pub(crate) fn has_work(&self) -> bool {
        if self.transition_due() || self.has_held() {
            return true;
        }
        if self.state.get() == DOCA_CTX_STATE_IDLE {
            return false;
        }
        match self.ops.has_work {
            // SAFETY: the hook is called with a ctx of its own kind.
            Some(f) => unsafe { f(self) },
            None => false,
        }
    }

    pub(crate) fn can_connect(&self) -> Result<(), doca_error_t> {
        match self.ops.can_connect {
            // SAFETY: the hook is called with a ctx of its own kind.
            Some(f) => unsafe { f(self) },
            None => Ok(()),
        }
    }
}

/// Sets the state and reports the change to the user's callback. The callback runs last;
/// the ctx may be destroyed by it (e.g. on reaching IDLE), so callers must not touch the ctx
/// after this returns.
///
/// # Safety
/// `ctx` must be a live ctx.
unsafe fn change_state(ctx: *const doca_ctx, next: doca_ctx_states) {
    // SAFETY: per the contract.
    let c = unsafe { &*ctx };
    let prev = c.state.replace(next);
    c.tasks.set_running(next == DOCA_CTX_STATE_RUNNING);
    if next == DOCA_CTX_STATE_IDLE {
        if let Some(f) = c.ops.stopped {
            // SAFETY: the hook is called with a ctx of its own kind.
            unsafe { f(c) };
        }
    }
    let cb = c.state_cb.get();
    let ud = c.tasks.user_data();
    if let Some(cb) = cb {
        // SAFETY: calling the user's registered callback with the documented arguments.
        unsafe { cb(ud, ctx as *mut doca_ctx, prev, next) };
    }
}

// SAFETY: doca_ctx is the only TaskOwner (the trait's contract): `doca_task::ctx` below
// relies on it.
unsafe impl TaskOwner for doca_ctx {
    fn state(&self) -> doca_ctx_states {
        doca_ctx::state(self)
    }
    fn tasks(&self) -> &CtxTasks {
        &self.tasks
    }
    fn pool_for(&self, kind: &'static TaskKind) -> Option<&Pool> {
        doca_ctx::pool_for(self, kind)
    }
    fn pool_to_alloc(&self, kind: &'static TaskKind) -> Result<Option<&Pool>, doca_error_t> {
        if self.state.get() != DOCA_CTX_STATE_RUNNING {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        Ok(doca_ctx::pool_for(self, kind))
    }
    fn install_pool(&self, pool: PoolBox) -> &Pool {
        doca_ctx::install_pool(self, pool)
    }
    fn for_each_pool(&self, f: &mut dyn FnMut(&Pool)) {
        doca_ctx::for_each_pool(self, f)
    }
    fn task_allocated(&self) {
        doca_ctx::task_allocated(self)
    }
    fn task_freed(&self) {
        doca_ctx::task_freed(self)
    }
    fn notify_pe(&self) {
        if let Some(pe) = self.pe_link() {
            pe.notify_work();
        }
    }
}

/// A task's ctx. Defined here rather than in `task.rs` because the task layer knows its ctx
/// only as a [`TaskOwner`] (tasks are the layer below ctxs).
impl doca_task {
    /// The ctx the task belongs to (alive as long as the task is reachable).
    pub fn ctx(&self) -> &doca_ctx {
        let owner: &dyn Any = self.owner();
        debug_assert!(owner.is::<doca_ctx>());
        // SAFETY: doca_ctx is the only TaskOwner (the trait's contract), so the owner's data
        // pointer is a live doca_ctx (see `doca_task::owner`).
        unsafe { &*(owner as *const dyn Any).cast::<doca_ctx>() }
    }

    /// The raw ctx pointer.
    pub fn ctx_ptr(&self) -> *mut doca_ctx {
        self.owner_ptr().cast::<doca_ctx>().cast_mut()
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_task_get_ctx(task: *const doca_task) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in doca_task_submit.
        match unsafe { task_ref(task) } {
            Ok(t) => t.ctx_ptr(),
            Err(_) => ptr::null_mut(),
        }
    })
}

/// Reports one due asynchronous transition of `ctx`, if any (from `doca_pe_progress`).
/// Returns true if one was reported. The ctx may have been destroyed by the callback when
/// this returns true.
///
/// # Safety
/// `ctx` must be a live ctx connected to the PE being progressed.
pub(crate) unsafe fn report_due_transition(ctx: *const doca_ctx) -> bool {
    // SAFETY: per the contract.
    let c = unsafe { &*ctx };
    let next = if let Some(next) = c.pending.take() {
        next
    } else if c.state.get() == DOCA_CTX_STATE_STOPPING && c.allocated.get() == 0 {
        DOCA_CTX_STATE_IDLE
    } else {
        return false;
    };
    if next == DOCA_CTX_STATE_STOPPING {
        // A failed task stops the ctx (`mark_failed`): what `doca_ctx_stop` does, reported
        // from progress. The PE keeps looking for transitions after a report, so the IDLE
        // that follows (now, with nothing allocated, or at the last free) is found.
        // SAFETY: the kind's stop hook is called with a RUNNING ctx of its kind.
        unsafe { (c.ops.stop)(c) };
        crate::task::flush_submitted(c, FLUSH_STATUS);
    }
    // SAFETY: live ctx (contract).
    unsafe { change_state(ctx, next) };
    true
}

/// For kinds whose task errors stop the ctx (DMA): a task of `ctx` failed. The next progress
/// reports RUNNING → STOPPING before it delivers any completion (the failed task's too, so
/// that its callback finds the ctx STOPPING), flushing what is still submitted; the ctx is
/// IDLE once every task is freed, as after `doca_ctx_stop`. Until that report the ctx stays
/// RUNNING and the kind completes every task submitted meanwhile with
/// [`FLUSH_STATUS`] (see [`doca_ctx::failing`]), so that a program that submits a batch and
/// learns of the failure only from progress sees every submit succeed, as on hardware where
/// the error is found after the submits.
///
/// NVIDIA's PE samples rely on it: `pe_task_error` submits 255 DMA copies, one of them with
/// an empty source, and then progresses until its state callback saw STOPPING → IDLE (a
/// provider whose ctx kept running after the error would make it loop forever), and
/// `pe_async_stop` notes that "DMA shall stop in case of error".
pub fn mark_failed(ctx: &doca_ctx) {
    if ctx.state.get() == DOCA_CTX_STATE_RUNNING && ctx.pending.get().is_none() {
        ctx.pending.set(Some(DOCA_CTX_STATE_STOPPING));
        if let Some(pe) = ctx.pe_link() {
            pe.failure_may_be_due();
        }
    }
}

/// For async kinds: the start finished; progress reports STARTING → RUNNING.
pub fn mark_started(ctx: &doca_ctx) {
    if ctx.state.get() == DOCA_CTX_STATE_STARTING {
        ctx.pending.set(Some(DOCA_CTX_STATE_RUNNING));
        if let Some(pe) = ctx.pe_link() {
            pe.transition_may_be_due();
        }
    }
}

/// For async kinds: the start failed; progress reports STARTING → IDLE.
pub fn mark_start_failed(ctx: &doca_ctx) {
    if ctx.state.get() == DOCA_CTX_STATE_STARTING {
        ctx.pending.set(Some(DOCA_CTX_STATE_IDLE));
        if let Some(pe) = ctx.pe_link() {
            pe.transition_may_be_due();
        }
    }
}

/// Validates a ctx pointer from C.
///
/// # Safety
/// A non-NULL `ctx` must point to a ctx embedded in a live object of this provider.
pub(crate) unsafe fn ctx_ref<'a>(ctx: *const doca_ctx) -> Result<&'a doca_ctx, doca_error_t> {
    // SAFETY: per the contract.
    let c = unsafe { crate::ffi::obj(ctx) }?;
    if c.magic != CTX_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(c)
}

// ---- entry points ----

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_start(ctx: *mut doca_ctx) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL ctx pointers come from `*_as_ctx` of live objects (DOCA contract).
        let c = unsafe { ctx_ref(ctx) }?;
        if c.state.get() != DOCA_CTX_STATE_IDLE || c.pending.get().is_some() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        if c.pe.get().is_none() {
            return Err(DOCA_ERROR_NOT_CONNECTED);
        }
        // SAFETY: the kind's start hook is called with an IDLE, connected ctx of its kind.
        let mode = unsafe { (c.ops.start)(c) }?;
        match mode {
            StartMode::Sync => {
                // SAFETY: live ctx; nothing touches it after the callback.
                unsafe { change_state(ctx, DOCA_CTX_STATE_RUNNING) };
                Ok(())
            }
            StartMode::Async => {
                // SAFETY: as above.
                unsafe { change_state(ctx, DOCA_CTX_STATE_STARTING) };
                Err(DOCA_ERROR_IN_PROGRESS)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_stop(ctx: *mut doca_ctx) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_ctx_start.
        let c = unsafe { ctx_ref(ctx) }?;
        match c.state.get() {
            // Stopping a stopped ctx is a no-op that succeeds, without a state callback:
            // DOCA's documented errors for stop do not include BAD_STATE, and NVIDIA's
            // samples stop a ctx that their state callback already saw reach IDLE.
            DOCA_CTX_STATE_IDLE => return Ok(()),
            DOCA_CTX_STATE_STOPPING => return Err(DOCA_ERROR_IN_PROGRESS),
            _ => {}
        }
        if c.pe.get().is_none() {
            return Err(DOCA_ERROR_NOT_CONNECTED);
        }
        c.pending.set(None);
        // SAFETY: the kind's stop hook is called with a RUNNING/STARTING ctx of its kind.
        unsafe { (c.ops.stop)(c) };
        if c.allocated.get() == 0 && !c.ops.stop_via_progress {
            // SAFETY: live ctx; nothing touches it after the callback.
            unsafe { change_state(ctx, DOCA_CTX_STATE_IDLE) };
            Ok(())
        } else {
            crate::task::flush_submitted(c, FLUSH_STATUS);
            // SAFETY: as above.
            unsafe { change_state(ctx, DOCA_CTX_STATE_STOPPING) };
            if c.allocated.get() == 0 {
                // Nothing to wait for: the IDLE report is due at the next progress (and an
                // armed PE's notification handle must say so).
                if let Some(pe) = c.pe_link() {
                    pe.transition_may_be_due();
                }
            }
            Err(DOCA_ERROR_IN_PROGRESS)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_get_state(ctx: *const doca_ctx, state: *mut doca_ctx_states) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_ctx_start.
        let c = unsafe { ctx_ref(ctx) }?;
        // SAFETY: non-NULL out-pointers are writable (caller contract); NULL is rejected.
        unsafe { out(state, c.state.get()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_set_state_changed_cb(
    ctx: *mut doca_ctx,
    cb: doca_ctx_state_changed_callback_t,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_ctx_start.
        let c = unsafe { ctx_ref(ctx) }?;
        if cb.is_none() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        c.state_cb.set(cb);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_set_user_data(ctx: *mut doca_ctx, user_data: doca_data) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_ctx_start.
        let c = unsafe { ctx_ref(ctx) }?;
        c.tasks.set_user_data(user_data);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_get_user_data(ctx: *const doca_ctx, user_data: *mut doca_data) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_ctx_start.
        let c = unsafe { ctx_ref(ctx) }?;
        // SAFETY: as in doca_ctx_get_state.
        unsafe { out(user_data, c.tasks.user_data()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_get_num_inflight_tasks(
    ctx: *const doca_ctx,
    num_inflight_tasks: *mut usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_ctx_start.
        let c = unsafe { ctx_ref(ctx) }?;
        // SAFETY: as in doca_ctx_get_state.
        unsafe { out(num_inflight_tasks, c.tasks.inflight()) }
    })
}

/// Completion vectors of the soft device: one. Every completion of a PE is reported through
/// that PE's single notification handle, so there is nothing to choose between.
pub const NUM_COMPLETION_VECTORS: u32 = 1;

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_flush_tasks(ctx: *mut doca_ctx) {
    crate::ffi::guard((), || {
        // SAFETY: as in doca_ctx_start.
        match unsafe { ctx_ref(ctx) } {
            Ok(c) if c.state.get() == DOCA_CTX_STATE_IDLE => {
                crate::sdk_log!(ERROR, "doca_ctx_flush_tasks: ctx {ctx:p} is IDLE (ignored)")
            }
            Ok(c) => {
                c.flush_held();
            }
            Err(_) => crate::sdk_log!(ERROR, "doca_ctx_flush_tasks: invalid ctx pointer {ctx:p} (ignored)"),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_set_completion_vector(ctx: *mut doca_ctx, comp_vector: u32) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_ctx_start.
        let c = unsafe { ctx_ref(ctx) }?;
        if c.state.get() != DOCA_CTX_STATE_IDLE {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        if comp_vector >= NUM_COMPLETION_VECTORS {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        c.comp_vector.set(comp_vector);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_cap_get_num_completion_vectors(
    devinfo: *const crate::dev::doca_devinfo,
    num_comp_vectors: *mut u32,
) -> doca_error_t {
    guard_err(|| {
        crate::dev::devinfo_ref(devinfo)?;
        // SAFETY: as in doca_ctx_get_state.
        unsafe { out(num_comp_vectors, NUM_COMPLETION_VECTORS) }
    })
}

/// `struct doca_gpu` (opaque; the soft provider has no GPU, so none exists).
#[repr(C)]
pub struct doca_gpu {
    _opaque: [u8; 0],
}

/// `struct doca_dpa` (opaque; the soft provider has no DPA, so none exists).
#[repr(C)]
pub struct doca_dpa {
    _opaque: [u8; 0],
}

/// The checks shared by the two datapath setters: a valid IDLE ctx and a device argument.
///
/// # Safety
/// As [`ctx_ref`].
unsafe fn datapath_checks(ctx: *mut doca_ctx, dev_is_null: bool) -> Result<(), doca_error_t> {
    // SAFETY: forwarded contract.
    let c = unsafe { ctx_ref(ctx) }?;
    if dev_is_null {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    if c.state.get() != DOCA_CTX_STATE_IDLE {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_set_datapath_on_gpu(ctx: *mut doca_ctx, gpu_dev: *mut doca_gpu) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { datapath_checks(ctx, gpu_dev.is_null()) }?;
        // NOT_SUPPORTED, reason: the soft provider has no GPU; every data path runs on the CPU
        // thread that calls doca_pe_progress.
        Err(crate::sdk_fail!(DOCA_ERROR_NOT_SUPPORTED, "doca_ctx_set_datapath_on_gpu: the soft provider has no GPU"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_ctx_set_datapath_on_dpa(ctx: *mut doca_ctx, dpa_dev: *mut doca_dpa) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { datapath_checks(ctx, dpa_dev.is_null()) }?;
        // NOT_SUPPORTED, reason: the soft provider has no DPA; every data path runs on the CPU
        // thread that calls doca_pe_progress.
        Err(crate::sdk_fail!(DOCA_ERROR_NOT_SUPPORTED, "doca_ctx_set_datapath_on_dpa: the soft provider has no DPA"))
    })
}

#[cfg(test)]
mod tests;
