//! [`DocaCtx`]: ownership of one DOCA context (`doca_ctx`) on the current executor.
//!
//! A DOCA object that is driven by tasks (a sync event, an RDMA endpoint, a UROM worker)
//! exposes a `doca_ctx`. Wrapping it in a `DocaCtx` connects it to the progress engine of
//! the executor the caller runs on and registers it there:
//! * the ctx's user data is the key of a record in the executor's context registry, and the
//!   state-change callback (`ctx_state_cb`) wakes futures waiting for a state;
//! * task completions of the ctx find their futures through completion slots (see
//!   [`completion`](super::completion)), and free tasks wake back-pressure waiters here;
//! * the executor's shutdown stops every registered ctx, progresses until they are IDLE
//!   (flushing in-flight tasks, whose futures complete with the flush error) and destroys
//!   them before destroying its PE. A `DocaCtx` that outlives its executor (returned from
//!   `block_on`) then refuses every operation ([`ErrorKind::BadState`]) and its drop does
//!   nothing.
//!
//! A `DocaCtx` is `!Send`: a ctx, its PE and its tasks belong to one thread.
//!
//! Dropping a `DocaCtx` never blocks: an IDLE ctx is destroyed at once; otherwise it is
//! stopped and handed to the executor's retiring list, which destroys it once the flush is
//! over and it reports IDLE. When the drop happens inside a DOCA callback (for example a
//! buffer kept alive by an orphaned operation is released by its completion), even the stop
//! is deferred until progress returns.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll};

use super::completion::{
    AllocTask, BufTaskFuture, DocaTask, HeldGroup, TaskFuture, TaskSlot, Ticket, WaiterList, REUSE_KINDS,
};
use super::local::{current_rc, report, with_current, Core};
use super::slab::Slab;
use crate::error::{check, Error, ErrorKind, Result};
use crate::sys;

/// The state of a DOCA context (`enum doca_ctx_states`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtxState {
    /// Not started (or stopped): may be configured and destroyed.
    Idle,
    /// Starting asynchronously; becomes `Running` through progress.
    Starting,
    /// Accepting tasks.
    Running,
    /// Stopping: in-flight tasks are being flushed.
    Stopping,
    /// A value this crate does not know (from a newer library).
    Unknown(u32),
}

impl CtxState {
    fn from_raw(s: sys::doca_ctx_states) -> CtxState {
        match s {
            sys::DOCA_CTX_STATE_IDLE => CtxState::Idle,
            sys::DOCA_CTX_STATE_STARTING => CtxState::Starting,
            sys::DOCA_CTX_STATE_RUNNING => CtxState::Running,
            sys::DOCA_CTX_STATE_STOPPING => CtxState::Stopping,
            other => CtxState::Unknown(other),
        }
    }
}

type Destroy = Box<dyn FnOnce() -> sys::doca_error_t>;

/// A completed task kept for reuse (see [`DocaTask::REUSE`]): the task object and the
/// function that gives it back to DOCA.
struct Kept {
    task: *mut std::ffi::c_void,
    free: unsafe fn(*mut std::ffi::c_void),
}

/// # Safety
/// `task` is a live task of kind `K` that DOCA does not own; not used afterwards.
unsafe fn free_kept<K: DocaTask>(task: *mut std::ffi::c_void) {
    // SAFETY: forwarded (the caller's contract); the pointer was a `*mut K::Task`.
    unsafe { K::free(task.cast()) }
}

/// The executor's record of one ctx (shared by the registry and the `DocaCtx` handle).
pub(crate) struct CtxRecord {
    /// The record itself, for the rare step that must keep it ([`rc`](CtxRecord::rc)) when
    /// an operation only borrows it.
    this: Weak<CtxRecord>,
    name: &'static str,
    key: Cell<u64>,
    /// Its place in the executor's order of creation (see `Contexts::newest_first`).
    born: u64,
    ctx: *mut sys::doca_ctx,
    obj: *mut std::ffi::c_void,
    destroy: Cell<Option<Destroy>>,
    alive: Cell<bool>,
    stop_requested: Cell<bool>,
    /// Tasks allocated through the runtime on this ctx and not freed yet.
    outstanding: Cell<usize>,
    state_waiters: WaiterList,
    pub(crate) task_waiters: WaiterList,
    /// Tasks were submitted without DOCA's flush flag since the last flush: the doorbell is
    /// owed (see `Core::ring_doorbells`).
    unflushed: Cell<bool>,
    /// Completed tasks kept for reuse, per [`DocaTask::REUSE`] index. Only while `reusing`.
    kept: RefCell<[Vec<Kept>; REUSE_KINDS]>,
    /// The ctx is RUNNING (last state change) and no stop was requested: completed tasks
    /// may be kept. Cleared, and the kept tasks freed, when it leaves RUNNING.
    reusing: Cell<bool>,
    /// Groups of held tasks on this ctx (`completion::held`): their idle tasks are given
    /// back with the kept ones.
    held: RefCell<Vec<Weak<HeldGroup>>>,
    /// The kind's DOCA context stops by itself when a task fails (DMA), and the runtime
    /// starts it again (see [`DocaCtx::restart_after_errors`]).
    restarts_after_error: Cell<bool>,
    /// Such a stop is under way: from RUNNING → STOPPING without a stop of ours until the
    /// restart (or its failure). Operations that find the ctx not running meanwhile wait
    /// for it among the task waiters instead of failing.
    restart_pending: Cell<bool>,
    /// How many times a doorbell was rung (`doca_ctx_flush_tasks` called), for tests of
    /// doorbell batching.
    #[cfg(test)]
    pub(crate) doorbells: Cell<usize>,
}

impl CtxRecord {
    /// A counted handle to this record, from a borrow of it. A borrow proves that a handle
    /// exists (the registry's or a [`DocaCtx`]'s), so the upgrade cannot fail.
    pub(crate) fn rc(&self) -> Rc<CtxRecord> {
        self.this.upgrade().expect("a borrowed context record has a handle")
    }

    /// The context's kind, as given at creation (`"rdma"`, `"sync_event"`, ...).
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// An id for traces: the `doca_ctx` address (unique while the context lives).
    pub(crate) fn id(&self) -> usize {
        self.ctx as usize
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.alive.get()
    }

    /// The context's DOCA object (a `doca_rdma`, a `doca_dma`...), untyped, while it is
    /// alive (see [`DocaCtx::as_ptr`]): for layers that serve several kinds of context.
    pub(crate) fn obj(&self) -> Option<*mut std::ffi::c_void> {
        self.alive.get().then_some(self.obj)
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.get()
    }

    /// Whether a task's failure stopped the ctx and the runtime will start it again: an
    /// operation that DOCA refuses meanwhile (BAD_STATE: the ctx is not running) waits among
    /// the task waiters, which the restart wakes, instead of failing.
    pub(crate) fn restart_pending(&self) -> bool {
        self.restart_pending.get()
    }

    /// Starts again a ctx that a failed task stopped, now IDLE (from the executor's upkeep,
    /// outside progress). Returns false when it is not IDLE yet (still stopping).
    fn restart_after_error(&self) -> bool {
        match self.query_state() {
            Ok(CtxState::Idle) => {}
            Ok(CtxState::Stopping) => return false,
            // Running already (started by its owner), or destroyed.
            _ => {
                self.end_restart();
                return true;
            }
        }
        if self.stop_requested.get() {
            self.end_restart();
            return true;
        }
        // SAFETY: alive, IDLE ctx on its executor's thread, not inside progress (the caller).
        match unsafe { sys::doca_ctx_start(self.ctx) } {
            // RUNNING at once: the state callback ended the restart. STARTING: it will.
            sys::DOCA_SUCCESS | sys::DOCA_ERROR_IN_PROGRESS => {
                crate::trace::event!(debug, { ctx = self.name, ctx_id = self.id() }, "restarted after a failed task");
            }
            rc => {
                report(&format!(
                    "{}: restart after a failed task: {}",
                    self.name,
                    Error::from_doca(rc, "doca_ctx_start")
                ));
                self.end_restart();
            }
        }
        true
    }

    /// The restart is over (done or given up): operations waiting for it look again.
    fn end_restart(&self) {
        if self.restart_pending.replace(false) {
            self.task_waiters.wake_all();
        }
    }

    /// Notes a submit without the flush flag; returns whether the ctx must be put on the
    /// executor's doorbell list (it was not on it).
    pub(crate) fn owe_doorbell(&self) -> bool {
        !self.unflushed.replace(true)
    }

    /// Rings the doorbell if one is owed: `doca_ctx_flush_tasks` hands the tasks submitted
    /// without the flush flag to the engine. Only on a live ctx that is not IDLE: tasks are
    /// only accepted while it runs, the flush comes before any progress could stop it, and a
    /// stop rings first (`request_stop`).
    pub(crate) fn flush_doorbell(&self) {
        if self.unflushed.replace(false) && self.alive.get() {
            #[cfg(test)]
            self.doorbells.set(self.doorbells.get() + 1);
            // SAFETY: alive ctx (not destroyed) on its executor's thread, not IDLE (see above).
            unsafe { sys::doca_ctx_flush_tasks(self.ctx) };
        }
    }

    pub(crate) fn task_allocated(&self) {
        self.outstanding.set(self.outstanding.get() + 1);
    }

    /// A task of this ctx was freed: wake the futures waiting for one.
    #[inline]
    pub(crate) fn task_freed(&self) {
        self.count_freed();
        if self.task_waiters.has_waiters() {
            self.task_waiters.wake_waiting();
        }
    }

    /// [`task_freed`](CtxRecord::task_freed) without the wake-up: one task fewer
    /// outstanding, and a new epoch of the task waiters (the event happened, whether or not
    /// anyone waits; see `WaiterList::epoch`). The caller wakes the waiters.
    fn count_freed(&self) {
        self.outstanding.set(self.outstanding.get().saturating_sub(1));
        self.task_waiters.new_epoch();
    }

    /// A task of kind `K` of this ctx completed with `status` and is ours again (inside its
    /// completion callback): keeps it for reuse if the kind allows it, the task succeeded
    /// and the ctx is RUNNING; otherwise frees it. Then the task counts as freed.
    ///
    /// # Safety
    /// `task` is a live, completed task of kind `K` of this ctx, not used by the caller
    /// afterwards.
    pub(crate) unsafe fn task_over<K: DocaTask>(&self, task: *mut K::Task, status: sys::doca_error_t) {
        match K::REUSE {
            Some(i) if status == sys::DOCA_SUCCESS && self.reusing.get() && self.alive.get() => {
                self.kept.borrow_mut()[i].push(Kept { task: task.cast(), free: free_kept::<K> });
            }
            // SAFETY: the caller's contract.
            _ => unsafe { K::free(task) },
        }
    }

    /// How many completed tasks of kind `K` this ctx keeps for reuse (the tests' view).
    #[cfg(test)]
    pub(crate) fn kept_of<K: DocaTask>(&self) -> usize {
        K::REUSE.map_or(0, |i| self.kept.borrow()[i].len())
    }

    /// A kept task of kind `K`, now the caller's (counted as allocated when submitted, like a
    /// fresh one). Its fields are stale: re-initialise all of them before submitting it.
    pub(crate) fn take_kept<K: DocaTask>(&self) -> Option<*mut K::Task> {
        let i = K::REUSE?;
        if !self.reusing.get() {
            return None;
        }
        self.kept.borrow_mut()[i].pop().map(|k| k.task.cast())
    }

    /// Whether a completed task may be kept rather than freed: the ctx is RUNNING, no stop
    /// was requested, and it is not destroyed.
    #[inline(always)]
    pub(crate) fn keeps_tasks(&self) -> bool {
        self.reusing.get() && self.alive.get()
    }

    /// Registers a group of held tasks, whose idle tasks [`free_kept`](CtxRecord::free_kept)
    /// gives back with the kept ones.
    pub(crate) fn hold(&self, group: &Rc<HeldGroup>) {
        let mut held = self.held.borrow_mut();
        // Dropped groups are swept only when the list would grow: a connection's futures
        // make a group per operation in flight at once (thousands, under a deep pipeline),
        // and a sweep per registration made that quadratic.
        if held.len() == held.capacity() {
            held.retain(|g| g.strong_count() > 0);
        }
        held.push(Rc::downgrade(group));
    }

    /// Stops keeping tasks and gives every kept one, and every idle held one, back to DOCA:
    /// the ctx is leaving RUNNING (a stop cannot reach IDLE while tasks are allocated) or
    /// is destroyed.
    fn free_kept(&self) {
        self.reusing.set(false);
        self.free_idle_tasks();
    }

    /// An allocation found a task pool of this ctx spent: frees the tasks kept for reuse and
    /// the held tasks not in flight (they are a cache; their owners allocate again), so that
    /// it can succeed. Returns whether any task was freed (then the caller allocates again).
    pub(crate) fn reclaim_idle(&self) -> bool {
        let freed = self.free_idle_tasks();
        if freed > 0 {
            crate::trace::event!(
                debug,
                { ctx = self.name, ctx_id = self.id(), freed = freed },
                "task pool spent: kept and idle held tasks given back"
            );
        }
        freed > 0
    }

    /// Frees every kept task and every held task not in flight; returns how many.
    fn free_idle_tasks(&self) -> usize {
        let kept = std::mem::take(&mut *self.kept.borrow_mut());
        let mut n = 0;
        for k in kept.into_iter().flatten() {
            // SAFETY: a completed task of this ctx handed back by its callback and kept,
            // never submitted since (taken ones left the list); freed once, the list is
            // emptied above; `free` is the kind's own.
            unsafe { (k.free)(k.task) };
            n += 1;
        }
        // Upgraded first, freed outside the borrow (freeing calls into DOCA).
        let groups: Vec<Rc<HeldGroup>> = self.held.borrow().iter().filter_map(Weak::upgrade).collect();
        for g in groups {
            n += g.give_back_idle();
        }
        n
    }

    /// The refusal of `op` once the executor destroyed this context (at its shutdown, even
    /// while handles to it live on): the one wording of every such error.
    #[cold]
    pub(crate) fn destroyed(&self, op: &str) -> Error {
        Error::new(ErrorKind::BadState, format!("{op}: context destroyed (its executor shut down)"))
    }

    fn query_state(&self) -> Result<CtxState> {
        if !self.alive.get() {
            return Err(self.destroyed(self.name));
        }
        let mut s = sys::DOCA_CTX_STATE_IDLE;
        // SAFETY: the ctx is alive (not destroyed) and used on its executor's thread.
        check(unsafe { sys::doca_ctx_get_state(self.ctx, &mut s) }, "doca_ctx_get_state")?;
        Ok(CtxState::from_raw(s))
    }

    /// Asks the ctx to stop (once). `Ok` when it is stopped or stopping.
    fn request_stop(&self) -> Result<()> {
        if self.stop_requested.get() {
            return Ok(());
        }
        // Tasks waiting for their doorbell go to the engine first, to be flushed by the stop
        // like every other submitted task (never a flush of an IDLE ctx later).
        self.flush_doorbell();
        crate::trace::event!(
            debug,
            { ctx = self.name, ctx_id = self.id(), outstanding = self.outstanding.get() },
            "stopping the context: tasks in flight are flushed"
        );
        // Kept tasks are allocated: the stop could not reach IDLE with them.
        self.free_kept();
        // Set before the call: its state callback (RUNNING → STOPPING, from inside it) must
        // tell this stop from one that a failed task caused.
        self.stop_requested.set(true);
        // SAFETY: alive ctx on its executor's thread, not inside progress (callers check).
        let rc = unsafe { sys::doca_ctx_stop(self.ctx) };
        match rc {
            sys::DOCA_SUCCESS | sys::DOCA_ERROR_IN_PROGRESS => Ok(()),
            rc => {
                self.stop_requested.set(false);
                Err(Error::from_doca(rc, format!("{}: doca_ctx_stop", self.name)))
            }
        }
    }

    /// Destroys the object (the ctx must be IDLE), marks the record dead, wakes waiters.
    fn destroy_now(&self) {
        // Before the object (and with it the tasks' pools) goes.
        self.free_kept();
        self.alive.set(false);
        if let Some(destroy) = self.destroy.take() {
            match catch_unwind(AssertUnwindSafe(destroy)) {
                Ok(sys::DOCA_SUCCESS) => {}
                Ok(rc) => report(&format!("{}: destroy failed: {}", self.name, Error::from_doca(rc, "destroy"))),
                Err(_) => report(&format!("{}: destroy function panicked", self.name)),
            }
        }
        self.state_waiters.wake_all();
        self.task_waiters.wake_all();
    }
}

/// The registry of one executor's contexts (executor-thread only).
pub(crate) struct Contexts {
    slab: RefCell<Slab<Rc<CtxRecord>>>,
    retiring: RefCell<Vec<u64>>,
    /// Contexts a failed task stopped, to start again once IDLE.
    restarting: RefCell<Vec<u64>>,
    /// Whether `retiring` or `restarting` has an entry: the one look of every drain.
    upkeep: Cell<bool>,
    /// Contexts registered so far: the next one's `born`.
    births: Cell<u64>,
    /// How many contexts `slab` holds: whether the PE can have work is asked before every
    /// drain, and a count answers without the slab's borrow.
    live: Cell<usize>,
}

impl Contexts {
    pub(crate) fn new() -> Contexts {
        Contexts {
            slab: RefCell::new(Slab::new()),
            retiring: RefCell::new(Vec::new()),
            restarting: RefCell::new(Vec::new()),
            upkeep: Cell::new(false),
            births: Cell::new(0),
            live: Cell::new(0),
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.live.get() == 0
    }

    pub(crate) fn len(&self) -> usize {
        self.live.get()
    }

    /// Registers `rec`; returns its key. With [`remove`](Contexts::remove), the only place
    /// that changes the slab, so that `live` stays its length.
    #[inline]
    fn insert(&self, rec: Rc<CtxRecord>) -> u64 {
        let key = self.slab.borrow_mut().insert(rec);
        self.live.set(self.live.get() + 1);
        debug_assert_eq!(self.live.get(), self.slab.borrow().len());
        key
    }

    fn get(&self, key: u64) -> Option<Rc<CtxRecord>> {
        self.slab.borrow().get(key).cloned()
    }

    fn all(&self) -> Vec<Rc<CtxRecord>> {
        let slab = self.slab.borrow();
        slab.keys().into_iter().filter_map(|k| slab.get(k).cloned()).collect()
    }

    /// Every ctx, the newest first: the order in which the shutdown stops and destroys
    /// them. An object that depends on another (a UROM worker on its service) is created
    /// after it, and DOCA refuses to destroy one still in use (`IN_USE`), so the creation
    /// order reversed is the order that works, as Rust drops locals. Handles dropped inside
    /// the executor retire in the order they are dropped; this matters for the contexts
    /// whose handles outlive it.
    fn newest_first(&self) -> Vec<Rc<CtxRecord>> {
        let mut all = self.all();
        all.sort_unstable_by_key(|r| std::cmp::Reverse(r.born));
        all
    }

    /// A completed task of kind `K` of the ctx `key` is ours again (its completion
    /// callback): kept for reuse or freed ([`CtxRecord::task_over`]); then `released` runs
    /// (the task's descriptors go back) and the ctx's waiters for a free task wake.
    ///
    /// # Safety
    /// `task` is a live, completed task of kind `K` of the ctx `key`, not used afterwards.
    #[inline]
    pub(crate) unsafe fn task_over<K: DocaTask>(
        &self,
        key: u64,
        task: *mut K::Task,
        status: sys::doca_error_t,
        released: impl FnOnce(),
    ) {
        // The record is borrowed in the slab, not cloned out of it (an `Rc` count up and down
        // per completion): nothing below runs code that could add or remove a context (the
        // provider's free and the descriptors' release call no callback). Only the waking of
        // waiters does (wakers are anyone's code), so in the rare case that futures wait for
        // a free task, the record is cloned and they are woken after the borrow.
        let to_wake = match self.slab.borrow().get(key) {
            Some(rec) => {
                // SAFETY: forwarded (the caller's contract).
                unsafe { rec.task_over::<K>(task, status) };
                released();
                rec.count_freed();
                rec.task_waiters.has_waiters().then(|| rec.clone())
            }
            None => {
                // SAFETY: forwarded; a ctx without a record keeps nothing.
                unsafe { K::free(task) };
                released();
                None
            }
        };
        if let Some(rec) = to_wake {
            rec.task_waiters.wake_waiting();
        }
    }

    /// A task of the ctx `key` was freed by a completion callback.
    pub(crate) fn task_freed(&self, key: u64) {
        if let Some(rec) = self.get(key) {
            rec.task_freed();
        }
    }

    fn remove(&self, key: u64) {
        let rec = self.slab.borrow_mut().remove(key);
        if rec.is_some() {
            self.live.set(self.live.get() - 1);
        }
        drop(rec);
    }

    /// Destroys the ctx and forgets it.
    fn destroy(&self, rec: &CtxRecord) {
        rec.destroy_now();
        self.remove(rec.key.get());
    }

    /// One retiring step for `rec`: stop it if needed, destroy it once IDLE. Returns
    /// whether it is gone. Never called inside progress.
    fn retire_step(&self, rec: &CtxRecord) -> bool {
        if !rec.alive.get() {
            self.remove(rec.key.get());
            return true;
        }
        let state = match rec.query_state() {
            Ok(s) => s,
            Err(e) => {
                report(&format!("retiring {}: {e}; destroying it", rec.name));
                self.destroy(rec);
                return true;
            }
        };
        match state {
            CtxState::Idle => {
                self.destroy(rec);
                true
            }
            CtxState::Stopping => false,
            _ => {
                if let Err(e) = rec.request_stop() {
                    // STARTING may refuse a stop: try again when it is RUNNING.
                    if state != CtxState::Starting {
                        report(&format!("retiring: {e}"));
                    }
                }
                if matches!(rec.query_state(), Ok(CtxState::Idle)) {
                    self.destroy(rec);
                    return true;
                }
                false
            }
        }
    }

    /// Retires `rec` (a dropped `DocaCtx`): now if possible, else on the retiring list.
    fn retire(&self, core: &Core, rec: &Rc<CtxRecord>) {
        if core.in_progress() || !self.retire_step(rec) {
            self.retiring.borrow_mut().push(rec.key.get());
            self.upkeep.set(true);
        }
    }

    /// Advances the retiring contexts and restarts the ones a failed task stopped. Called
    /// after every drain of the PE.
    #[inline]
    pub(crate) fn maintain(&self, core: &Core) {
        if core.in_progress() || !self.upkeep.get() {
            return;
        }
        self.upkeep_due();
    }

    /// The body of [`maintain`](Contexts::maintain) when there is upkeep (rare: out of line,
    /// so that the check at every progress of the loop needs no call).
    #[cold]
    fn upkeep_due(&self) {
        self.retire_due();
        let keys = std::mem::take(&mut *self.restarting.borrow_mut());
        for key in keys {
            if let Some(rec) = self.get(key) {
                if rec.restart_pending.get() && !rec.restart_after_error() {
                    self.restarting.borrow_mut().push(key);
                }
            }
        }
        self.upkeep.set(!self.retiring.borrow().is_empty() || !self.restarting.borrow().is_empty());
    }

    /// A failed task stopped `rec`, which restarts: once IDLE, the upkeep starts it again.
    fn restart_when_idle(&self, rec: &CtxRecord) {
        self.restarting.borrow_mut().push(rec.key.get());
        self.upkeep.set(true);
    }

    fn retire_due(&self) {
        let keys = std::mem::take(&mut *self.retiring.borrow_mut());
        for key in keys {
            if let Some(rec) = self.get(key) {
                if !self.retire_step(&rec) {
                    self.retiring.borrow_mut().push(key);
                }
            }
        }
    }

    /// Shutdown: asks every live ctx to stop.
    pub(crate) fn stop_all(&self, core: &Core) {
        let _ = core;
        for rec in self.newest_first() {
            if matches!(rec.query_state(), Ok(CtxState::Starting | CtxState::Running)) {
                if let Err(e) = rec.request_stop() {
                    report(&format!("shutdown: {e}"));
                }
            }
        }
    }

    /// Shutdown: whether every live ctx is IDLE.
    pub(crate) fn all_idle(&self) -> bool {
        self.all().iter().all(|rec| !rec.alive.get() || matches!(rec.query_state(), Ok(CtxState::Idle) | Err(_)))
    }

    /// Shutdown: destroys every IDLE ctx; the others are reported and leaked (destroying
    /// them, or the PE under them, is not safe). Returns how many were leaked.
    pub(crate) fn destroy_all(&self, core: &Core) -> usize {
        let _ = core;
        let mut leaked = 0;
        for rec in self.newest_first() {
            match rec.query_state() {
                Ok(CtxState::Idle) | Err(_) => self.destroy(&rec),
                Ok(s) => {
                    report(&format!("shutdown: {} is still {s:?}; leaking it", rec.name));
                    rec.alive.set(false);
                    // The ctx (and its pools) is leaked: so are its kept tasks.
                    rec.reusing.set(false);
                    drop(std::mem::take(&mut *rec.kept.borrow_mut()));
                    drop(rec.destroy.take());
                    self.remove(rec.key.get());
                    leaked += 1;
                }
            }
        }
        self.retiring.borrow_mut().clear();
        leaked
    }
}

/// The state-change callback installed on every registered ctx. Runs on the executor's
/// thread (inside progress, or inside `doca_ctx_start`/`doca_ctx_stop`).
unsafe extern "C" fn ctx_state_cb(
    user_data: sys::doca_data,
    _ctx: *mut sys::doca_ctx,
    prev_state: sys::doca_ctx_states,
    next_state: sys::doca_ctx_states,
) {
    let r = catch_unwind(AssertUnwindSafe(|| {
        with_current(|core| {
            // This may run inside doca_ctx_start/stop rather than progress: still a callback,
            // from which nothing may progress the PE (see `Core::progress_inline`).
            let _inside = core.enter_progress();
            if let Some(rec) = core.ctxs.get(user_data.as_u64()) {
                crate::trace::event!(
                    debug,
                    {
                        ctx = rec.name,
                        ctx_id = rec.id(),
                        from = crate::trace::dbg(CtxState::from_raw(prev_state)),
                        to = crate::trace::dbg(CtxState::from_raw(next_state)),
                    },
                    "context state changed"
                );
                // Completed tasks are kept only while RUNNING (entered here, also after a
                // restart); leaving it (a stop, or an error stopping the ctx by itself) gives
                // them back, so that the ctx can reach IDLE.
                if next_state == sys::DOCA_CTX_STATE_RUNNING {
                    rec.reusing.set(!rec.stop_requested.get());
                } else {
                    rec.free_kept();
                }
                // A kind that stops by itself when a task fails (DMA) is started again once
                // IDLE; meanwhile its operations wait for that instead of failing.
                match next_state {
                    sys::DOCA_CTX_STATE_STOPPING
                        if prev_state == sys::DOCA_CTX_STATE_RUNNING
                            && rec.restarts_after_error.get()
                            && !rec.stop_requested.get() =>
                    {
                        rec.restart_pending.set(true);
                        crate::trace::event!(
                            debug,
                            { ctx = rec.name, ctx_id = rec.id() },
                            "a failed task stopped the context: it restarts once idle"
                        );
                    }
                    sys::DOCA_CTX_STATE_IDLE if rec.restart_pending.get() => core.ctxs.restart_when_idle(&rec),
                    sys::DOCA_CTX_STATE_RUNNING => rec.end_restart(),
                    _ => {}
                }
                // Waiters re-read the state with doca_ctx_get_state; this only wakes them.
                rec.state_waiters.wake_all();
            }
        });
    }));
    if r.is_err() {
        report("a panic in a DOCA state-change callback was contained");
    }
}

/// Keeps a context's record and its executor core alive for an operation that outlives
/// the borrow of its [`DocaCtx`] (see [`DocaCtx::submit_owned`]).
pub(crate) struct CtxKeepAlive {
    core: Rc<Core>,
    rec: Rc<CtxRecord>,
}

impl fmt::Debug for CtxKeepAlive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CtxKeepAlive").field("ctx", &self.rec.name()).finish_non_exhaustive()
    }
}

/// Owner of one DOCA context on the current executor. See the module documentation.
///
/// `T` is the object type that owns the ctx (for example `doca_sync_event`).
pub struct DocaCtx<T> {
    core: Rc<Core>,
    rec: Rc<CtxRecord>,
    _obj: PhantomData<*mut T>,
}

impl<T> DocaCtx<T> {
    /// Takes ownership of `obj`, whose ctx is `ctx`, and connects the ctx to the PE of the
    /// executor running on this thread. `destroy` destroys `obj` (and with it the ctx); it is
    /// called once, when the ctx is IDLE: on drop, at executor shutdown, or right here if
    /// registration fails.
    ///
    /// Configure task types (`*_set_conf`, with [`completion_cb`](super::completion::completion_cb))
    /// after this and before [`start`](DocaCtx::start).
    ///
    /// # Safety
    /// `obj` is a live DOCA object created on this thread that nothing else destroys, `ctx`
    /// is its ctx, IDLE and not connected to a PE; `destroy(obj)` destroys it.
    ///
    /// # Errors
    /// Outside an async-doca executor, on an executor that is shutting down, or when DOCA
    /// refuses the connection (`obj` is destroyed in every error case).
    pub unsafe fn new<D>(name: &'static str, obj: *mut T, ctx: *mut sys::doca_ctx, destroy: D) -> Result<DocaCtx<T>>
    where
        T: 'static,
        D: FnOnce(*mut T) -> sys::doca_error_t + 'static,
    {
        if obj.is_null() || ctx.is_null() {
            return Err(Error::new(ErrorKind::InvalidArgument, format!("{name}: null object or ctx")));
        }
        let fail = |e: Error, destroy: D| {
            let _ = destroy(obj);
            Err(e.context_prefix(name))
        };
        let Some(core) = current_rc() else {
            return fail(Error::new(ErrorKind::BadState, "must be created inside an async-doca executor"), destroy);
        };
        let pe = match core.pe_raw() {
            Some(pe) if !core.is_closing() => pe,
            _ => return fail(Error::new(ErrorKind::BadState, "the executor is shutting down"), destroy),
        };
        let rec = Rc::new_cyclic(|this| CtxRecord {
            this: this.clone(),
            name,
            key: Cell::new(0),
            born: core.ctxs.births.replace(core.ctxs.births.get() + 1),
            ctx,
            obj: obj.cast(),
            destroy: Cell::new(None),
            alive: Cell::new(true),
            stop_requested: Cell::new(false),
            outstanding: Cell::new(0),
            state_waiters: WaiterList::new(),
            task_waiters: WaiterList::new(),
            unflushed: Cell::new(false),
            kept: RefCell::new(Default::default()),
            reusing: Cell::new(false),
            held: RefCell::new(Vec::new()),
            restarts_after_error: Cell::new(false),
            restart_pending: Cell::new(false),
            #[cfg(test)]
            doorbells: Cell::new(0),
        });
        let key = core.ctxs.insert(rec.clone());
        rec.key.set(key);
        // SAFETY: `ctx` is a live, IDLE, unconnected ctx of this thread (caller); the
        // callback has the exact C signature and stays valid for the program's life.
        let configured = unsafe {
            check(sys::doca_ctx_set_user_data(ctx, sys::doca_data::from_u64(key)), "doca_ctx_set_user_data")
                .and_then(|()| {
                    check(sys::doca_ctx_set_state_changed_cb(ctx, Some(ctx_state_cb)), "doca_ctx_set_state_changed_cb")
                })
                .and_then(|()| check(sys::doca_pe_connect_ctx(pe, ctx), "doca_pe_connect_ctx"))
        };
        if let Err(e) = configured {
            rec.alive.set(false);
            core.ctxs.remove(key);
            return fail(e, destroy);
        }
        rec.destroy.set(Some(Box::new(move || destroy(obj))));
        Ok(DocaCtx { core, rec, _obj: PhantomData })
    }

    /// The executor this context belongs to (for layers that drive their operations'
    /// steps themselves: windows, lanes).
    pub(crate) fn core(&self) -> &Rc<Core> {
        &self.core
    }

    /// The executor's record of this context.
    pub(crate) fn record(&self) -> &Rc<CtxRecord> {
        &self.rec
    }

    /// The owned object, or an error once the executor destroyed it at shutdown.
    pub fn as_ptr(&self) -> Result<*mut T> {
        if self.rec.alive.get() {
            Ok(self.rec.obj.cast())
        } else {
            Err(self.dead())
        }
    }

    /// The raw ctx (same rules as [`as_ptr`](DocaCtx::as_ptr)).
    pub fn raw_ctx(&self) -> Result<*mut sys::doca_ctx> {
        if self.rec.alive.get() {
            Ok(self.rec.ctx)
        } else {
            Err(self.dead())
        }
    }

    /// The name given at creation (used in error messages).
    pub fn name(&self) -> &'static str {
        self.rec.name
    }

    /// The user data DOCA passes to this ctx's callbacks (`ctx_user_data`).
    pub fn user_data(&self) -> sys::doca_data {
        sys::doca_data::from_u64(self.rec.key.get())
    }

    /// Declares that this kind's DOCA context stops by itself when one of its tasks fails
    /// (DOCA's DMA does: the failed task and the ones in flight with it fail, the context goes
    /// STOPPING, then IDLE once every task is freed). The runtime then starts it again once
    /// IDLE, and operations refused meanwhile because it is not running wait for the restart
    /// instead of failing. Not for kinds whose restart loses state the user set up
    /// (connections).
    pub(crate) fn restart_after_errors(&self) {
        self.rec.restarts_after_error.set(true);
    }

    /// Tasks allocated through [`submit`](DocaCtx::submit) and not freed yet.
    pub fn outstanding_tasks(&self) -> usize {
        self.rec.outstanding.get()
    }

    fn dead(&self) -> Error {
        self.rec.destroyed(self.rec.name)
    }

    /// The current state (`doca_ctx_get_state`).
    pub fn state(&self) -> Result<CtxState> {
        self.rec.query_state()
    }

    /// Starts the ctx without waiting: `Ok` once `doca_ctx_start` accepted (the ctx is
    /// RUNNING, or STARTING and will be RUNNING through progress). Useful in synchronous
    /// constructors; [`start`](DocaCtx::start) also waits.
    pub fn begin_start(&self) -> Result<CtxState> {
        match self.state()? {
            s @ (CtxState::Running | CtxState::Starting) => Ok(s),
            CtxState::Idle => {
                self.rec.stop_requested.set(false);
                // SAFETY: alive, IDLE ctx on its executor's thread.
                let rc = unsafe { sys::doca_ctx_start(self.rec.ctx) };
                match rc {
                    sys::DOCA_SUCCESS | sys::DOCA_ERROR_IN_PROGRESS => self.state(),
                    rc => Err(Error::from_doca(rc, format!("{}: doca_ctx_start", self.rec.name))),
                }
            }
            s => Err(Error::new(ErrorKind::BadState, format!("{}: cannot start a ctx that is {s:?}", self.rec.name))),
        }
    }

    /// Starts the ctx and waits until it is RUNNING (at once, or through progress).
    pub async fn start(&self) -> Result<()> {
        self.begin_start()?;
        WaitState { ctx: self, target: Target::Running, ticket: None }.await
    }

    /// Stops the ctx and waits until it is IDLE. In-flight tasks are flushed: their futures
    /// complete with the flush error. A stopped ctx can be started again.
    pub async fn stop(&self) -> Result<()> {
        match self.state()? {
            CtxState::Idle => return Ok(()),
            CtxState::Stopping => {}
            _ => {
                self.rec.stop_requested.set(false);
                self.rec.request_stop()?;
            }
        }
        WaitState { ctx: self, target: Target::Idle, ticket: None }.await
    }

    /// Submits one task of kind `K` and returns its future (see [`TaskFuture`]).
    ///
    /// `alloc` allocates and initializes the task (`*_alloc_init`), giving it
    /// `slot.user_data()` and, where DOCA writes a result through a pointer,
    /// `slot.out_ptr(i)`. It returns the task or DOCA's error; it is called again after a
    /// NO_MEMORY once a task of this ctx has been freed (back-pressure).
    ///
    /// ```no_run
    /// # use async_doca::ext::{DocaCtx, DocaTask};
    /// # use async_doca::sys;
    /// # struct Get;
    /// # unsafe impl DocaTask for Get {
    /// #     type Task = sys::doca_sync_event_task_get;
    /// #     unsafe fn as_task(t: *mut Self::Task) -> *mut sys::doca_task {
    /// #         unsafe { sys::doca_sync_event_task_get_as_doca_task(t) }
    /// #     }
    /// # }
    /// # async fn get(ctx: &DocaCtx<sys::doca_sync_event>) -> async_doca::Result<u64> {
    /// let ev = ctx.as_ptr()?;
    /// let out = ctx
    ///     .submit::<Get, _>("sync_event.get", |slot| {
    ///         let mut task = std::ptr::null_mut();
    ///         // SAFETY: live event; out_ptr stays valid until the task completes.
    ///         let rc = unsafe {
    ///             sys::doca_sync_event_task_get_alloc_init(ev, slot.out_ptr(0), slot.user_data(), &mut task)
    ///         };
    ///         if rc == sys::DOCA_SUCCESS { Ok(task) } else { Err(rc) }
    ///     })
    ///     .await?;
    /// Ok(out[0])
    /// # }
    /// ```
    // Inlined so the future is built in place in the caller's (see
    // `TaskFuture::with_buffers_traced`): out of line, it returned the future through memory
    // (`op_cost sync`: ~85 instructions an operation).
    #[inline(always)]
    pub fn submit<K, A>(&self, op: &'static str, alloc: A) -> TaskFuture<'_, K, A>
    where
        K: DocaTask,
        A: FnMut(&TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t>,
    {
        TaskFuture::new(&self.core, &self.rec, op, alloc)
    }

    /// [`submit`](DocaCtx::submit) with any [`AllocTask`], not only a closure: a named
    /// request type makes the future's type nameable (`TaskFuture<'_, K, MyRequest>`), so a
    /// wrapper can return it (or wrap it in a named future of its own) instead of an opaque
    /// `impl Future`. Same contract as `submit`'s closure.
    // Inlined so the future is built in place in the caller's (see
    // `TaskFuture::with_buffers_traced`).
    #[inline(always)]
    pub fn submit_with<K, A>(&self, op: &'static str, alloc: A) -> TaskFuture<'_, K, A>
    where
        K: DocaTask,
        A: AllocTask<K>,
    {
        TaskFuture::new(&self.core, &self.rec, op, alloc)
    }

    /// [`submit_with`](DocaCtx::submit_with), [`traced`](TaskFuture::traced) and
    /// [`with_buffers`](TaskFuture::with_buffers) in one, the way the crate's own operations
    /// build their futures: in place (see [`TaskFuture::with_buffers_traced`]).
    #[inline(always)]
    pub(crate) fn submit_keeping<K, A, B>(
        &self,
        op: &'static str,
        alloc: A,
        conn: Option<usize>,
        size: usize,
        buffers: B,
    ) -> BufTaskFuture<'_, K, A, B>
    where
        K: DocaTask,
        A: AllocTask<K>,
        B: 'static,
    {
        TaskFuture::with_buffers_traced(&self.core, &self.rec, op, alloc, conn, size, buffers)
    }

    /// A counted handle to the context's record and its executor, for an operation that
    /// outlives this borrow of the context (see [`submit_owned`](DocaCtx::submit_owned)).
    pub(crate) fn keep_alive(&self) -> CtxKeepAlive {
        CtxKeepAlive { core: self.core.clone(), rec: self.rec.clone() }
    }

    /// [`submit`](DocaCtx::submit) for an operation that may outlive this borrow of the
    /// context: the future borrows the context's record and executor core from `keep`
    /// instead. It never touches the DOCA object once the context is destroyed (the
    /// allocation stage checks that it is alive, and a context is stopped, which completes
    /// every task in flight, before it is destroyed), so `alloc` must only not capture
    /// anything it could outlive.
    ///
    /// # Safety
    /// `keep` is this context's ([`keep_alive`](DocaCtx::keep_alive)), and the caller keeps
    /// it alive until the future is dropped (the future borrows the record and the core
    /// `keep` counts, so some such handle must outlive it): store both in one struct, the
    /// future's field declared first so that it is dropped first.
    #[inline(always)]
    pub(crate) unsafe fn submit_owned<K, A>(
        &self,
        keep: &CtxKeepAlive,
        op: &'static str,
        alloc: A,
    ) -> TaskFuture<'static, K, A>
    where
        K: DocaTask,
        A: FnMut(&TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t> + 'static,
    {
        debug_assert!(
            Rc::ptr_eq(&keep.rec, &self.rec) && Rc::ptr_eq(&keep.core, &self.core),
            "another context's keep-alive"
        );
        // SAFETY: both point into reference-counted allocations `keep` holds, which do not
        // move when `keep` does; the caller keeps `keep` until the future is dropped, so the
        // references are valid for the future's whole life, which is all that `'static`
        // claims here (the future hands out nothing that borrows them).
        let (core, rec): (&'static Core, &'static CtxRecord) =
            unsafe { (&*Rc::as_ptr(&keep.core), &*Rc::as_ptr(&keep.rec)) };
        TaskFuture::new(core, rec, op, alloc)
    }

    /// The allocation step of an operation of a kind that keeps its completed tasks
    /// ([`DocaTask::REUSE`]): a task of kind `K` this context kept, re-initialised by
    /// `reinit` and given `slot`'s user data, or else a fresh one from `fresh` (the kind's
    /// `*_alloc_init`, writing its out-pointer). Whatever can fail besides the allocation
    /// (descriptors) is taken before this call, so a kept task, once taken, is always used.
    ///
    /// # Safety
    /// `reinit` sets every parameter of a task of kind `K` with the kind's setters (a kept
    /// task carries its previous operation's, buffers included); `fresh` allocates a task of
    /// kind `K` on this context with `slot`'s user data.
    #[inline(always)]
    pub(crate) unsafe fn reuse_or_alloc<K: DocaTask>(
        &self,
        slot: &TaskSlot,
        reinit: impl FnOnce(*mut K::Task),
        fresh: impl FnOnce(&mut *mut K::Task) -> sys::doca_error_t,
    ) -> std::result::Result<*mut K::Task, sys::doca_error_t> {
        match self.rec.take_kept::<K>() {
            Some(task) => {
                reinit(task);
                // SAFETY: a kept task of kind K of this ctx, ours (completed, not submitted);
                // its user data is the last field to set, `reinit` set the others.
                unsafe { sys::doca_task_set_user_data(K::as_task(task), slot.user_data()) };
                Ok(task)
            }
            None => {
                let mut task = std::ptr::null_mut();
                crate::error::allocated(fresh(&mut task), task)
            }
        }
    }

    /// [`reuse_or_alloc`](DocaCtx::reuse_or_alloc) for a request that may run on a held task
    /// (`completion::held_op`). A task's parameters come in three sets: its buffers (`bufs`),
    /// its operands (`operands`: an immediate, an addend) and those bound to its owner
    /// (`owner`: the connection). The held record's own task, which `slot` names, already
    /// has the last and its user data: it gets its operands, and its buffers only when
    /// `repoint` (they are not those it points at since its previous operation, see
    /// `Descs::changed`). A kept task gets all three, and `fresh` allocates one as in
    /// `reuse_or_alloc`. A separate entry, so that the requests that never run on a held task
    /// do not pay the look.
    ///
    /// # Safety
    /// As for [`reuse_or_alloc`](DocaCtx::reuse_or_alloc), `bufs`, `operands` and `owner`
    /// together setting every parameter of the task; `repoint` is false only when the held
    /// task points at this operation's buffers already.
    #[inline(always)]
    pub(crate) unsafe fn reuse_held_or_alloc<K: DocaTask>(
        &self,
        slot: &TaskSlot,
        repoint: bool,
        bufs: impl Fn(*mut K::Task),
        operands: impl Fn(*mut K::Task),
        owner: impl FnOnce(*mut K::Task),
        fresh: impl FnOnce(&mut *mut K::Task) -> sys::doca_error_t,
    ) -> std::result::Result<*mut K::Task, sys::doca_error_t> {
        let held = slot.held_task::<K>();
        if !held.is_null() {
            if repoint {
                bufs(held);
            }
            operands(held);
            return Ok(held);
        }
        let reinit = |k| {
            bufs(k);
            operands(k);
            owner(k);
        };
        // SAFETY: forwarded (the caller's contract); `reinit` sets every parameter.
        unsafe { self.reuse_or_alloc::<K>(slot, reinit, fresh) }
    }

    /// Resolves when a task of this ctx is freed (a completion, or an abandoned operation).
    /// For layers with their own allocation loop; [`submit`](DocaCtx::submit) already waits.
    pub fn task_freed(&self) -> TaskFreed<'_> {
        TaskFreed { rec: &self.rec, epoch: self.rec.task_waiters.epoch(), ticket: None }
    }
}

impl<T> Drop for DocaCtx<T> {
    fn drop(&mut self) {
        if !self.rec.alive.get() {
            return;
        }
        self.core.ctxs.retire(&self.core, &self.rec);
    }
}

impl<T> fmt::Debug for DocaCtx<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.rec.alive.get() { self.state().ok() } else { None };
        f.debug_struct("DocaCtx")
            .field("name", &self.rec.name)
            .field("alive", &self.rec.alive.get())
            .field("state", &state)
            .field("outstanding_tasks", &self.rec.outstanding.get())
            .finish()
    }
}

#[derive(Clone, Copy)]
enum Target {
    Running,
    Idle,
}

struct WaitState<'a, T> {
    ctx: &'a DocaCtx<T>,
    target: Target,
    ticket: Ticket,
}

impl<T> Future for WaitState<'_, T> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let rec = &this.ctx.rec;
        let state = match this.ctx.state() {
            Ok(s) => s,
            Err(e) => return Poll::Ready(Err(e)),
        };
        match (this.target, state) {
            (Target::Running, CtxState::Running) | (Target::Idle, CtxState::Idle) => Poll::Ready(Ok(())),
            (Target::Running, CtxState::Idle) => Poll::Ready(Err(Error::new(
                ErrorKind::BadState,
                format!("{}: start failed (the context went back to IDLE)", rec.name),
            ))),
            (Target::Running, CtxState::Stopping) => {
                Poll::Ready(Err(Error::new(ErrorKind::BadState, format!("{}: stopped while starting", rec.name))))
            }
            _ => {
                rec.state_waiters.register(&mut this.ticket, cx.waker());
                Poll::Pending
            }
        }
    }
}

/// The future of [`DocaCtx::task_freed`].
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct TaskFreed<'a> {
    rec: &'a CtxRecord,
    epoch: u64,
    ticket: Ticket,
}

impl Future for TaskFreed<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.rec.task_waiters.epoch() != this.epoch || !this.rec.alive.get() {
            return Poll::Ready(());
        }
        this.rec.task_waiters.register(&mut this.ticket, cx.waker());
        Poll::Pending
    }
}

impl fmt::Debug for TaskFreed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskFreed").field("ctx", &self.rec.name).finish()
    }
}
