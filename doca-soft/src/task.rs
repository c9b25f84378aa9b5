//! The generic task framework: task header, per-kind descriptors, fixed pools, submit,
//! completion and the `doca_task_*` entry points.
//!
//! # Model
//!
//! Every task type of every ctx kind (sync event now; RDMA and UROM later) is a `#[repr(C)]`
//! struct whose **first field is a [`doca_task`] header**, so the `*_as_doca_task` /
//! `*_as_task` conversions are pointer casts and a `doca_task *` can be cast back to the
//! specific type. A specific type implements the unsafe trait [`TaskType`], which names its
//! static [`TaskKind`] descriptor.
//!
//! * **Pools.** A ctx owns one [`Pool`] per configured task kind, created by
//!   [`configure`] (what `*_set_conf` calls) with exactly `num_tasks` slots. The slot array is
//!   allocated once and never moves while the ctx exists (tasks are handed out as raw
//!   pointers); reconfiguring with a different size retires the old array but keeps it
//!   allocated until the ctx is destroyed, so a stale task pointer still points at memory that
//!   says "free" instead of at freed memory.
//! * **States.** `Free` (in the pool) → `Allocated` (owned by the user) → `Submitted` (owned by
//!   the library; the kind is working on it) → `Completed` (result known, queued on the PE's
//!   completion queue) → back to `Allocated` when the PE delivers the callback (ownership
//!   returns to the user, who frees or re-submits it).
//! * **Completion.** A kind never calls user callbacks itself: it calls [`complete`], which
//!   stores the status and appends the task to its PE's FIFO completion queue. `doca_pe_progress`
//!   pops one task per call and calls the task's success or error callback with the address of
//!   the *specific* task (see [`RawCb`]). So no callback ever runs inside `doca_task_submit`.
//! * **Callbacks** are stored per task (copied from the pool's configuration at allocation).
//!   Kinds whose DOCA API sets callbacks per task (UROM worker commands, `get_workers_by_gid`)
//!   overwrite them with [`set_callbacks`].
//!
//! # Layer
//! The bottom of the core (task ← ctx ← pe, see "Layers of the core" in
//! `docs/soft-provider.md`): this module does not name the ctx or the PE. A pool and its tasks
//! reach their ctx through [`TaskOwner`], which the ctx implements, and the part of it that
//! every submit, completion and delivery works on through [`CtxTasks`], which this module
//! defines and the ctx embeds (with the PE's [`CompletionQueue`]); `doca_task::ctx` (the
//! concrete ctx, for kinds) and `doca_task_get_ctx` are defined in `ctx.rs`.
//!
//! # Errors (decisions documented here; see also `docs/soft-provider.md`)
//! * allocation while the ctx is not RUNNING → `DOCA_ERROR_BAD_STATE`;
//! * allocation of a kind never configured on this ctx → `DOCA_ERROR_NOT_SUPPORTED`;
//! * allocation beyond `num_tasks` → `DOCA_ERROR_NO_MEMORY` (back-pressure);
//! * `*_set_conf` with `num_tasks == 0` or a NULL callback → `DOCA_ERROR_INVALID_VALUE`; while
//!   the ctx is not IDLE → `DOCA_ERROR_NOT_PERMITTED` (as DOCA documents);
//! * submitting a task that is not allocated (free, or a pointer into retired pool memory) →
//!   `DOCA_ERROR_INVALID_VALUE`; one already submitted → `DOCA_ERROR_BAD_STATE`; on a ctx that
//!   is not RUNNING → `DOCA_ERROR_BAD_STATE`. A failed submit leaves the task with the user.
//! * `doca_task_free` of a submitted task or of a free task is a caller bug: it is ignored with
//!   an ERROR record in the SDK log and changes nothing.
//!
//! # Threads
//! Single-threaded, like DOCA: a task, its ctx and its PE are used from one thread. The types
//! use `Cell`/`RefCell` and are `!Sync`.

use core::any::Any;
use core::cell::{Cell, RefCell};
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use crate::ffi::{guard, guard_err, refused};
use crate::types::*;

/// What the task framework needs from the ctx that owns a task's pool: its state, its pools,
/// its allocation count and its [`CtxTasks`] (what submits, completions and deliveries
/// work on).
///
/// Tasks are the bottom layer of the provider's core (task ← ctx ← pe): this module does not
/// name `doca_ctx`. The ctx implements this trait (in `ctx.rs`), and every pool and task header
/// points at its ctx through it. Kinds get the concrete ctx back with `doca_task::ctx`, which
/// `ctx.rs` defines.
///
/// # Safety
/// Only `doca_ctx` implements this trait: `doca_task::ctx` turns a task's owner back into the
/// `doca_ctx` it is.
pub unsafe trait TaskOwner: Any {
    /// The ctx state (tasks are configured while IDLE, allocated and submitted while RUNNING).
    fn state(&self) -> doca_ctx_states;
    /// The ctx's submit and delivery counters, held tasks and completion queue. Task headers
    /// keep its address (it lives as long as the ctx, at a fixed place in it).
    fn tasks(&self) -> &CtxTasks;
    /// The pool of `kind` on this ctx, if configured.
    fn pool_for(&self, kind: &'static TaskKind) -> Option<&Pool>;
    /// The pool to allocate a `kind` task from: `DOCA_ERROR_BAD_STATE` unless the ctx is
    /// RUNNING, `None` if the kind was never configured (one call per allocation where there
    /// were two).
    fn pool_to_alloc(&self, kind: &'static TaskKind) -> Result<Option<&Pool>, doca_error_t>;
    /// Installs `pool` (replacing a pool of the same kind, kept alive until the ctx goes).
    fn install_pool(&self, pool: PoolBox) -> &Pool;
    /// Calls `f` on every pool of this ctx.
    fn for_each_pool(&self, f: &mut dyn FnMut(&Pool));
    /// Counts a task allocated from this ctx.
    fn task_allocated(&self);
    /// Counts a task freed (the last one lets a STOPPING ctx reach IDLE).
    fn task_freed(&self);
    /// Tells the ctx's PE, which is armed, that progress has work (a completion was queued or
    /// a task held): its notification handle becomes readable.
    fn notify_pe(&self);
}

/// The part of a ctx that every submit, completion and delivery works on, kept here in the
/// task layer: the ctx embeds one ([`TaskOwner::tasks`]) and every task header points at it,
/// so those paths reach their counters, the held tasks and the PE's completion queue without
/// a call through [`TaskOwner`] (an operation made five: start a submit, look for held tasks,
/// queue the completion, and the PE's enqueue behind it, count the delivery).
///
/// The ctx keeps `running` equal to "the ctx is RUNNING" (it sets it with every state
/// change) and connects the completion queue when it is connected to its PE.
pub struct CtxTasks {
    /// Whether the ctx is RUNNING (the only state in which tasks are submitted).
    running: Cell<bool>,
    /// Tasks submitted and not yet delivered.
    inflight: Cell<usize>,
    /// The last submission sequence number (flush order).
    seq: Cell<u64>,
    /// Tasks submitted without `DOCA_TASK_SUBMIT_FLAG_FLUSH`, in submission order: accepted
    /// (state Submitted) but not yet handed to the kind. See [`CtxTasks::flush_held`].
    /// A FIFO linked through the task headers (`held_next`): a runtime that defers every
    /// doorbell holds and flushes one task per operation, and the list then costs two
    /// pointer stores each way, with no allocation, borrow flag or drain.
    held: TaskQueue,
    /// The ctx user data, passed to every task callback.
    user_data: Cell<doca_data>,
    /// The completion queue of the ctx's PE; NULL until the ctx is connected to one.
    cq: Cell<*const CompletionQueue>,
}

impl CtxTasks {
    pub(crate) const fn new() -> CtxTasks {
        CtxTasks {
            running: Cell::new(false),
            inflight: Cell::new(0),
            seq: Cell::new(0),
            held: TaskQueue::new(),
            user_data: Cell::new(doca_data::from_u64(0)),
            cq: Cell::new(ptr::null()),
        }
    }

    /// Records whether the ctx is RUNNING (the ctx calls this with every state change).
    pub(crate) fn set_running(&self, running: bool) {
        self.running.set(running);
    }

    /// The ctx user data.
    #[inline]
    pub(crate) fn user_data(&self) -> doca_data {
        self.user_data.get()
    }

    pub(crate) fn set_user_data(&self, user_data: doca_data) {
        self.user_data.set(user_data);
    }

    /// Tasks submitted and not yet delivered.
    pub(crate) fn inflight(&self) -> usize {
        self.inflight.get()
    }

    /// Connects the completion queue of the ctx's PE (the PE outlives its connected ctxs:
    /// `doca_pe_destroy` refuses while any is connected), or forgets it with `None` (the ctx
    /// is torn down).
    pub(crate) fn set_completion_queue(&self, cq: Option<&CompletionQueue>) {
        self.cq.set(cq.map_or(ptr::null(), ptr::from_ref));
    }

    /// Starts a submit: `DOCA_ERROR_BAD_STATE` unless RUNNING, else counts one more task in
    /// flight and returns its submission sequence number (flush order).
    #[inline]
    fn begin_submit(&self) -> Result<u64, doca_error_t> {
        if !self.running.get() {
            return Err(refused(DOCA_ERROR_BAD_STATE));
        }
        let s = self.seq.get().wrapping_add(1);
        self.seq.set(s);
        self.inflight.set(self.inflight.get() + 1);
        Ok(s)
    }

    // The PE keeps no count of its own: it sums its ctxs' counts when asked
    // (`doca_pe_get_num_inflight_tasks`), so a submit and a delivery update one counter.
    #[inline]
    fn inflight_sub(&self, n: usize) {
        self.inflight.set(self.inflight.get().saturating_sub(n));
    }

    /// Holds a task submitted without FLUSH (already in state Submitted and counted in flight)
    /// until the next flush: a flushed submit, `doca_ctx_flush_tasks` or a progress of the PE.
    #[inline]
    fn hold(&self, task: &doca_task) {
        // SAFETY: a live task of this ctx's pools, Submitted and not held yet; held tasks stay
        // allocated while Submitted, and stop empties the list before completing them.
        unsafe { self.held.push(task, doca_task::held_next) };
        // An armed PE must wake up to push it (progress flushes held tasks).
        if self.pe_armed() {
            task.owner().notify_pe();
        }
    }

    /// Whether the ctx's PE is armed (only then does it need telling about new work).
    #[inline]
    fn pe_armed(&self) -> bool {
        // SAFETY: NULL or the queue of the PE the ctx is connected to, which outlives it
        // (see `set_completion_queue`).
        unsafe { self.cq.get().as_ref() }.is_some_and(|cq| cq.armed.get())
    }

    /// Whether any task is held.
    #[inline]
    pub(crate) fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// Forgets the held tasks (stop flushes them with every other submitted task).
    pub(crate) fn forget_held(&self) {
        self.held.clear();
    }

    /// Hands every held task to its kind, in submission order (the deferred doorbell). A task
    /// the kind refuses completes with the refusal's status through its error callback: its
    /// submit already succeeded, so the caller learns it from the completion, as from a work
    /// request that fails on hardware. Returns true if any task was held.
    #[inline]
    pub(crate) fn flush_held(&self) -> bool {
        if self.held.is_empty() {
            return false;
        }
        self.push_held_list()
    }

    /// [`flush_held`](CtxTasks::flush_held) for a flushed submit: the list walk out of line,
    /// so that the check such a submit makes (usually: nothing held) needs no frame.
    /// `doca_ctx_flush_tasks`, which usually has work, keeps it inline.
    #[inline]
    fn flush_held_for_submit(&self) -> bool {
        if self.held.is_empty() {
            return false;
        }
        self.push_held_list_out_of_line()
    }

    #[inline(never)]
    fn push_held_list_out_of_line(&self) -> bool {
        self.push_held_list()
    }

    /// The body of [`flush_held`](CtxTasks::flush_held) once there is a held task.
    #[inline(always)]
    fn push_held_list(&self) -> bool {
        // The whole list is taken first: a kind's submit never holds tasks, but the list is
        // consistent (empty) whatever it calls.
        let mut t = self.held.take_all();
        while !t.is_null() {
            // SAFETY: held tasks are live tasks of this ctx's pools in state Submitted (stop
            // empties the list before flushing submitted tasks). The link is read before the
            // task goes to its kind, which may complete it at once.
            let task = unsafe { &*t };
            t = task.held_next().get();
            push_held(task);
        }
        true
    }

    /// Queues a completed task on the ctx's PE (and tells the PE if it is armed).
    #[inline(always)]
    fn enqueue_completion(&self, task: &doca_task) {
        // SAFETY: as in `pe_armed`.
        let Some(cq) = (unsafe { self.cq.get().as_ref() }) else {
            completion_without_pe();
            return;
        };
        // SAFETY: a live completed task, queued once (its state is Completed until delivery
        // pops it); queued tasks stay live (their ctx cannot be destroyed while they are
        // allocated). The queue keeps `raw()`, the pointer with the whole slot's provenance.
        unsafe { cq.queue.push(task.raw(), doca_task::next) };
        if cq.armed.get() {
            task.owner().notify_pe();
        }
    }

    /// Counts a delivered task out of flight and returns the ctx user data for its callback.
    #[inline]
    fn delivered(&self) -> doca_data {
        self.inflight_sub(1);
        self.user_data.get()
    }
}

/// The diagnostic of a completion on a ctx without a PE (never: tasks are allocated only on
/// a RUNNING ctx, which is connected), out of line.
#[cold]
#[inline(never)]
fn completion_without_pe() {
    crate::sdk_internal_error!("completion on a ctx without a PE");
}

/// A PE's completion queue: completed tasks waiting for delivery, linked through
/// the task headers, and whether the PE is armed (then a new completion must wake it).
/// Owned by the PE (the layer above); each connected ctx's [`CtxTasks`] points at it.
pub struct CompletionQueue {
    queue: TaskQueue,
    /// Whether the PE is armed (between `doca_pe_request_notification` and
    /// `doca_pe_clear_notification`); the PE keeps it.
    armed: Cell<bool>,
}

impl CompletionQueue {
    pub(crate) const fn new() -> CompletionQueue {
        CompletionQueue { queue: TaskQueue::new(), armed: Cell::new(false) }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Removes the oldest completed task.
    #[inline]
    pub(crate) fn pop(&self) -> Option<*const doca_task> {
        self.queue.pop(doca_task::next)
    }

    /// Whether the PE is armed.
    #[inline]
    pub(crate) fn armed(&self) -> bool {
        self.armed.get()
    }

    pub(crate) fn set_armed(&self, armed: bool) {
        self.armed.set(armed);
    }
}

/// `"TASK"`: marks a live task header (checked on every entry point).
const TASK_MAGIC: u32 = 0x5441_534b;

/// A completion callback with its argument types erased ([`erase_cb`]). Never called through
/// this type: delivery calls it as a [`TypedCb<doca_task>`](TypedCb) with the address of the
/// whole task, which calls the [`TypedCb<T>`](TypedCb) it was made from correctly: `*mut T`
/// and `*mut doca_task` are ABI-compatible (pointers to sized types; see "ABI compatibility"
/// in the documentation of `fn`), and a `T`'s header is at its address (`#[repr(C)]`, header
/// first: [`TaskType`]).
pub type RawCb = unsafe extern "C" fn();

/// Where a task is in its life. See the module docs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum TaskState {
    Free = 0,
    Allocated = 1,
    Submitted = 2,
    Completed = 3,
}

/// How the task was submitted (`doca_task_submit` or `doca_task_try_submit`).
///
/// In DOCA, `try_submit` validates the task's fields and `submit` does not. Here every
/// submit validates (a malformed task never crashes the provider); kinds with finite queues
/// may return `DOCA_ERROR_AGAIN` in both modes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SubmitMode {
    Submit,
    TrySubmit,
    /// A task held by `doca_task_submit_ex` without FLUSH, now pushed by a flush: the kind's
    /// [`TaskKind::admit`] hook accepted it at submit time (and reserved its queue place).
    Held,
}

/// The static descriptor of one task kind (one per specific task type).
///
/// Build it with [`TaskKind::new`] in a `static`, and name it from the type's
/// [`TaskType::KIND`].
pub struct TaskKind {
    /// For diagnostics ("sync_event.wait_eq").
    pub name: &'static str,
    /// Starts the work of a task that passed the generic checks (it is in state `Submitted`,
    /// its ctx is RUNNING). The kind either completes it at once with [`complete`] (the
    /// callback still runs later, from progress) or keeps it and completes it later (from its
    /// ctx progress hook). An `Err` fails the submit: the framework puts the task back to
    /// `Allocated` and returns the error to the caller; the kind must then keep no reference.
    pub submit: unsafe fn(task: &doca_task, mode: SubmitMode) -> Result<(), doca_error_t>,
    /// Optional: called by `doca_task_free` before the slot returns to the pool (release
    /// references the task holds, e.g. buffers).
    pub release: Option<unsafe fn(task: &doca_task)>,
    /// Optional: called for each task flushed by `doca_ctx_stop`, just before it completes
    /// with [`crate::ctx::FLUSH_STATUS`] (e.g. to reset result fields).
    pub flush: Option<unsafe fn(task: &doca_task)>,
    /// Optional: called by `doca_task_submit_ex` without FLUSH, before the task is held.
    /// DOCA posts the work request at submit and defers only the doorbell, so what a submit
    /// refuses for lack of room (a full send or receive queue: `DOCA_ERROR_NO_MEMORY`, the
    /// caller's back-pressure) must be refused then, not turned into a failed completion at
    /// the flush. The hook checks the room and reserves it; the flush then calls `submit`
    /// with [`SubmitMode::Held`], which takes the reservation back. An `Err` fails the submit
    /// as `submit` does.
    pub admit: Option<AdmitFn>,
}

/// A [`TaskKind::admit`] hook: checks and reserves the room a submit needs.
pub type AdmitFn = unsafe fn(task: &doca_task) -> Result<(), doca_error_t>;

impl TaskKind {
    /// The descriptor of the task type `T` (whose `KIND` it is to be).
    pub const fn new<T: TaskType>(
        name: &'static str,
        submit: unsafe fn(&doca_task, SubmitMode) -> Result<(), doca_error_t>,
        release: Option<unsafe fn(&doca_task)>,
        flush: Option<unsafe fn(&doca_task)>,
    ) -> TaskKind {
        TaskKind { name, submit, release, flush, admit: None }
    }

    /// The same kind with an [`admit`](TaskKind::admit) hook.
    pub const fn with_admit(mut self, admit: AdmitFn) -> TaskKind {
        self.admit = Some(admit);
        self
    }
}

/// The callback type of a task type `T` (all DOCA task callbacks have this shape).
pub type TypedCb<T> = unsafe extern "C" fn(task: *mut T, task_user_data: doca_data, ctx_user_data: doca_data);

/// Erases a typed callback for storage (see [`RawCb`] for how it is called).
pub fn erase_cb<T: TaskType>(cb: TypedCb<T>) -> RawCb {
    // SAFETY: all function pointers have the same size and representation; the result is only
    // ever called as a `TypedCb<doca_task>` with a `T`'s address (see `RawCb`).
    unsafe { core::mem::transmute::<TypedCb<T>, RawCb>(cb) }
}

/// A specific task type (`doca_sync_event_task_get`, later `doca_rdma_task_write`...).
///
/// # Safety
/// The implementing type must be `#[repr(C)]` with a [`doca_task`] as its **first field**,
/// and `KIND` must be a descriptor built with `TaskKind::new::<Self>`.
pub unsafe trait TaskType: Sized + 'static {
    /// This type's descriptor (a `static`).
    const KIND: &'static TaskKind;
    /// A value for a pool slot: `header` as the header, every other field at a neutral value
    /// (use `Cell`s for fields set at allocation).
    fn with_header(header: doca_task) -> Self;
}

/// `struct doca_task`: the header at the start of every specific task.
#[repr(C)]
pub struct doca_task {
    magic: u32,
    index: u32,
    state: Cell<TaskState>,
    status: Cell<doca_error_t>,
    kind: &'static TaskKind,
    /// The ctx whose pool holds this task.
    owner: *const dyn TaskOwner,
    /// That ctx's [`CtxTasks`] (what submit, completion and delivery work on).
    tasks: *const CtxTasks,
    pool: *const Pool,
    /// This slot in the pool's array: what [`doca_task::raw`] returns (set once, when the
    /// pool is made).
    slot: *mut doca_task,
    user_data: Cell<doca_data>,
    ok_cb: Cell<Option<RawCb>>,
    err_cb: Cell<Option<RawCb>>,
    /// Link in the PE completion queue (only meaningful in state `Completed`).
    next: Cell<*const doca_task>,
    /// Link in the ctx's list of held tasks (only meaningful while held: `Submitted` by
    /// `doca_task_submit_ex` without FLUSH and not yet pushed).
    held_next: Cell<*const doca_task>,
    /// Submission sequence number (flush order).
    seq: Cell<u64>,
}

impl doca_task {
    fn new(
        kind: &'static TaskKind,
        owner: *const dyn TaskOwner,
        tasks: *const CtxTasks,
        pool: *const Pool,
        index: u32,
    ) -> doca_task {
        doca_task {
            magic: TASK_MAGIC,
            index,
            state: Cell::new(TaskState::Free),
            status: Cell::new(DOCA_SUCCESS),
            kind,
            owner,
            tasks,
            pool,
            slot: ptr::null_mut(),
            user_data: Cell::new(doca_data::from_u64(0)),
            ok_cb: Cell::new(None),
            err_cb: Cell::new(None),
            next: Cell::new(ptr::null()),
            held_next: Cell::new(ptr::null()),
            seq: Cell::new(0),
        }
    }

    /// The task's state.
    pub fn state(&self) -> TaskState {
        self.state.get()
    }

    /// The task's status (meaningful once completed).
    pub fn status(&self) -> doca_error_t {
        self.status.get()
    }

    /// The descriptor of the task's kind.
    pub fn kind(&self) -> &'static TaskKind {
        self.kind
    }

    /// The ctx the task belongs to, as the task layer knows it (alive as long as the task is
    /// reachable). Kinds want the concrete ctx: `doca_task::ctx`, defined in `ctx.rs`.
    pub fn owner(&self) -> &dyn TaskOwner {
        // SAFETY: pools belong to their ctx and are freed only with it, so a live header's
        // ctx pointer is valid.
        unsafe { &*self.owner }
    }

    /// The owning ctx's [`CtxTasks`].
    #[inline]
    fn tasks(&self) -> &CtxTasks {
        // SAFETY: the ctx's CtxTasks, which lives as long as the ctx (see `doca_task::owner`).
        unsafe { &*self.tasks }
    }

    /// The raw pointer to the owning ctx (see [`doca_task::owner`]).
    pub fn owner_ptr(&self) -> *const dyn TaskOwner {
        self.owner
    }

    /// The task as its specific type.
    ///
    /// # Safety
    /// `T::KIND` must be this task's kind (check with [`doca_task::is`]).
    pub unsafe fn downcast<T: TaskType>(&self) -> &T {
        debug_assert!(self.is::<T>());
        // SAFETY: `raw()` points at the whole slot (derived from the pool's allocation), and
        // the slot is a #[repr(C)] `T` whose first field is this header.
        unsafe { &*self.raw().cast::<T>() }
    }

    /// A pointer to the whole slot (header and specific fields), with the provenance of the
    /// pool's allocation. This is what is handed to C and to callbacks.
    // Kept in the header rather than computed from the pool (a load where there were four
    // and a multiplication): submit, completion and delivery use it.
    #[inline]
    pub fn raw(&self) -> *mut doca_task {
        if cfg!(debug_assertions) {
            // SAFETY: a live header's pool pointer is valid (pools live as long as their ctx),
            // and `index` is this slot's index in it.
            let computed = unsafe { (*self.pool).slot_ptr(self.index) };
            debug_assert!(ptr::eq(self.slot, computed));
        }
        self.slot
    }

    /// True when the task is a `T`.
    pub fn is<T: TaskType>(&self) -> bool {
        ptr::eq(self.kind, T::KIND)
    }

    #[cfg(test)]
    pub(crate) fn user_data_for_tests(&self) -> u64 {
        self.user_data.get().as_u64()
    }

    pub(crate) fn next(&self) -> &Cell<*const doca_task> {
        &self.next
    }

    pub(crate) fn held_next(&self) -> &Cell<*const doca_task> {
        &self.held_next
    }
}

/// The link cell of a task that a [`TaskQueue`] threads its tasks through.
pub(crate) type Link = fn(&doca_task) -> &Cell<*const doca_task>;

/// A FIFO of tasks linked through one of their own link cells ([`doca_task::next`] for the
/// PE's completion queue, [`doca_task::held_next`] for a ctx's held tasks): no allocation, no
/// borrow flag, two pointer stores to push and one load to pop.
///
/// Every task in a queue is live (allocated in a pool of its ctx) until it is popped, taken
/// with [`take_all`](TaskQueue::take_all) or the queue is cleared: the owners uphold that
/// (queued tasks stay allocated; a ctx clears its held list before a stop completes them).
pub(crate) struct TaskQueue {
    head: Cell<*const doca_task>,
    tail: Cell<*const doca_task>,
}

impl TaskQueue {
    pub(crate) const fn new() -> TaskQueue {
        TaskQueue { head: Cell::new(ptr::null()), tail: Cell::new(ptr::null()) }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.get().is_null()
    }

    /// Appends `t` through its `link`.
    ///
    /// # Safety
    /// `t` is a live task in no queue that uses `link`, and stays live while queued.
    #[inline]
    pub(crate) unsafe fn push(&self, t: *const doca_task, link: Link) {
        // SAFETY: the caller's contract.
        link(unsafe { &*t }).set(ptr::null());
        let tail = self.tail.get();
        if tail.is_null() {
            self.head.set(t);
        } else {
            // SAFETY: queued tasks are live (the type's invariant).
            link(unsafe { &*tail }).set(t);
        }
        self.tail.set(t);
    }

    /// Removes the first task.
    #[inline]
    pub(crate) fn pop(&self, link: Link) -> Option<*const doca_task> {
        let h = self.head.get();
        if h.is_null() {
            return None;
        }
        // SAFETY: queued tasks are live (the type's invariant).
        let next = link(unsafe { &*h }).get();
        self.head.set(next);
        if next.is_null() {
            self.tail.set(ptr::null());
        }
        Some(h)
    }

    /// Empties the queue and returns its first task (NULL if it was empty): the caller walks
    /// the chain through the same link, reading each task's link before handing the task on.
    #[inline]
    pub(crate) fn take_all(&self) -> *const doca_task {
        let h = self.head.replace(ptr::null());
        self.tail.set(ptr::null());
        h
    }

    /// Forgets every queued task.
    pub(crate) fn clear(&self) {
        self.take_all();
    }
}

/// Overrides the callbacks of an allocated task (for kinds whose DOCA API sets the callback
/// per task, like UROM worker commands).
pub fn set_callbacks<T: TaskType>(task: &T, ok_cb: Option<TypedCb<T>>, err_cb: Option<TypedCb<T>>) {
    let h = header(task);
    h.ok_cb.set(ok_cb.map(erase_cb::<T>));
    h.err_cb.set(err_cb.map(erase_cb::<T>));
}

/// The header of a specific task.
pub fn header<T: TaskType>(task: &T) -> &doca_task {
    // SAFETY: `TaskType` guarantees the header is the first field of the #[repr(C)] `T`.
    unsafe { &*(task as *const T).cast::<doca_task>() }
}

/// A fixed pool of tasks of one kind, owned by a ctx. Always used through a raw pointer
/// (it is referenced by every task header), never moved after creation.
pub struct Pool {
    kind: &'static TaskKind,
    ok_cb: Cell<Option<RawCb>>,
    err_cb: Cell<Option<RawCb>>,
    base: *mut u8,
    stride: usize,
    len: u32,
    free: RefCell<Vec<u32>>,
    drop_slots: unsafe fn(*mut u8, usize),
}

impl Pool {
    /// The kind of the tasks in this pool.
    pub fn kind(&self) -> &'static TaskKind {
        self.kind
    }

    /// The number of slots (`num_tasks`).
    pub fn capacity(&self) -> u32 {
        self.len
    }

    /// Slots currently not allocated.
    pub fn available(&self) -> usize {
        self.free.borrow().len()
    }

    /// A pointer to slot `i` (`i < capacity`), with the provenance of the whole array.
    fn slot_ptr(&self, i: u32) -> *mut doca_task {
        debug_assert!(i < self.len);
        // SAFETY: `base` is an array of `len` `T`s of size `stride`, alive as long as the pool;
        // `i < len` keeps the offset inside it.
        unsafe { self.base.add(i as usize * self.stride).cast::<doca_task>() }
    }

    /// The header of slot `i` (`i < capacity`).
    fn slot(&self, i: u32) -> &doca_task {
        // SAFETY: every slot starts with its header (TaskType contract) and lives as long as
        // the pool.
        unsafe { &*self.slot_ptr(i) }
    }

    /// Calls `f` on every slot's header.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&doca_task)) {
        for i in 0..self.len {
            f(self.slot(i));
        }
    }
}

unsafe fn drop_slots_of<T>(base: *mut u8, len: usize) {
    // SAFETY: `base/len` came from `Box::<[T]>::into_raw` in `PoolBox::new::<T>` and is
    // reconstructed exactly once, here.
    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(base.cast::<T>(), len)) });
}

/// Owner of a [`Pool`] allocation (`Box::into_raw`'d so task headers can point at it).
pub struct PoolBox(NonNull<Pool>);

impl PoolBox {
    fn new<T: TaskType>(owner: &dyn TaskOwner, num_tasks: u32) -> PoolBox {
        let tasks: *const CtxTasks = owner.tasks();
        let owner: *const dyn TaskOwner = owner;
        let pool = Box::into_raw(Box::new(Pool {
            kind: T::KIND,
            ok_cb: Cell::new(None),
            err_cb: Cell::new(None),
            base: ptr::null_mut(),
            stride: core::mem::size_of::<T>(),
            len: 0,
            free: RefCell::new(Vec::new()),
            drop_slots: drop_slots_of::<T>,
        }));
        let slots: Box<[T]> =
            (0..num_tasks).map(|i| T::with_header(doca_task::new(T::KIND, owner, tasks, pool, i))).collect();
        let base = Box::into_raw(slots).cast::<u8>();
        // SAFETY: `pool` was just allocated and is not shared yet (the headers only hold the
        // address); writing the remaining fields through it is exclusive.
        unsafe {
            (*pool).base = base;
            (*pool).len = num_tasks;
            // Pop from the end: hand out low indices first.
            (*pool).free = RefCell::new((0..num_tasks).rev().collect());
        }
        for i in 0..num_tasks {
            // SAFETY: `pool` is complete now, and no reference to the slots exists yet (they
            // were just moved into the array): each header's `slot` is written once, through
            // the pointer derived from the array (the whole slot's provenance).
            unsafe {
                let p = (*pool).slot_ptr(i);
                ptr::addr_of_mut!((*p).slot).write(p);
            }
        }
        // SAFETY: Box::into_raw never returns NULL.
        PoolBox(unsafe { NonNull::new_unchecked(pool) })
    }

    pub(crate) fn get(&self) -> &Pool {
        // SAFETY: the pool lives until this PoolBox is dropped.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for PoolBox {
    fn drop(&mut self) {
        // SAFETY: the pointer came from Box::into_raw in `new` and is freed once, here. The ctx
        // drops its pools only when it is destroyed (no task may be referenced any more).
        let pool = unsafe { Box::from_raw(self.0.as_ptr()) };
        if !pool.base.is_null() {
            // SAFETY: base/len are the slot array created in `new` for this pool's type.
            unsafe { (pool.drop_slots)(pool.base, pool.len as usize) };
        }
    }
}

/// What `*_set_conf` does: configure the pool of `T` on `ctx` with the given callbacks and
/// size. Only while the ctx is IDLE (`DOCA_ERROR_NOT_PERMITTED` otherwise). The DOCA entry
/// points require both callbacks ([`set_conf`]); kinds with per-task callbacks may pass
/// `None` and set them with [`set_callbacks`] before submit.
pub fn configure<T: TaskType>(
    ctx: &dyn TaskOwner,
    ok_cb: Option<TypedCb<T>>,
    err_cb: Option<TypedCb<T>>,
    num_tasks: u32,
) -> Result<(), doca_error_t> {
    if num_tasks == 0 {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    if ctx.state() != DOCA_CTX_STATE_IDLE {
        return Err(DOCA_ERROR_NOT_PERMITTED);
    }
    let pool = ctx.pool_for(T::KIND);
    let pool = match pool {
        Some(p) if p.capacity() == num_tasks => p,
        _ => ctx.install_pool(PoolBox::new::<T>(ctx, num_tasks)),
    };
    pool.ok_cb.set(ok_cb.map(erase_cb::<T>));
    pool.err_cb.set(err_cb.map(erase_cb::<T>));
    Ok(())
}

/// [`configure`] with DOCA's argument rules for `*_set_conf`: both callbacks non-NULL.
pub fn set_conf<T: TaskType>(
    ctx: &dyn TaskOwner,
    ok_cb: Option<TypedCb<T>>,
    err_cb: Option<TypedCb<T>>,
    num_tasks: u32,
) -> Result<(), doca_error_t> {
    if ok_cb.is_none() || err_cb.is_none() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    configure(ctx, ok_cb, err_cb, num_tasks)
}

/// Allocates a `T` from `ctx`'s pool. The caller (the kind's `*_alloc_init`) then fills the
/// specific fields and writes the pointer out.
#[inline]
pub fn alloc<T: TaskType>(ctx: &dyn TaskOwner, user_data: doca_data) -> Result<NonNull<T>, doca_error_t> {
    let Some(pool) = ctx.pool_to_alloc(T::KIND)? else {
        return Err(never_configured());
    };
    let i = pool.free.borrow_mut().pop().ok_or(DOCA_ERROR_NO_MEMORY)?;
    let h = pool.slot(i);
    debug_assert_eq!(h.state.get(), TaskState::Free);
    h.state.set(TaskState::Allocated);
    h.status.set(DOCA_SUCCESS);
    h.user_data.set(user_data);
    h.ok_cb.set(pool.ok_cb.get());
    h.err_cb.set(pool.err_cb.get());
    h.next.set(ptr::null());
    ctx.task_allocated();
    allocated_shard().fetch_add(1, Ordering::Relaxed);
    // SAFETY: the slot is a `T` (pool of T::KIND) with the header first; slot pointers are
    // never NULL.
    Ok(unsafe { NonNull::new_unchecked(pool.slot_ptr(i).cast::<T>()) })
}

/// The refusal of an allocation of a kind the ctx was never configured for (out of line:
/// [`alloc`] is inlined into every `*_allocate_init`).
#[cold]
#[inline(never)]
fn never_configured() -> doca_error_t {
    crate::sdk_fail!(
        DOCA_ERROR_NOT_SUPPORTED,
        "task allocation: this task kind was never configured on the context (call its *_set_conf before start)"
    )
}

/// Validates a task pointer from C: non-NULL, a live header.
///
/// # Safety
/// A non-NULL `task` must point to memory handed out by this provider (a task of a live ctx).
#[inline]
pub(crate) unsafe fn task_ref<'a>(task: *const doca_task) -> Result<&'a doca_task, doca_error_t> {
    // SAFETY: per the contract, non-NULL pointers are task headers of live ctxs.
    let t = unsafe { crate::ffi::obj(task) }?;
    if t.magic != TASK_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(t)
}

/// The generic checks of every submit, then the task is Submitted and counted in flight.
#[inline]
fn accept(task: &doca_task) -> Result<&CtxTasks, doca_error_t> {
    match task.state.get() {
        TaskState::Allocated => {}
        TaskState::Free => return Err(refused(DOCA_ERROR_INVALID_VALUE)),
        TaskState::Submitted | TaskState::Completed => return Err(refused(DOCA_ERROR_BAD_STATE)),
    }
    if task.ok_cb.get().is_none() || task.err_cb.get().is_none() {
        // Only possible for kinds with per-task callbacks that were never set. A ctx that is
        // not RUNNING is reported first, as it always was.
        return Err(if task.owner().state() != DOCA_CTX_STATE_RUNNING {
            DOCA_ERROR_BAD_STATE
        } else {
            DOCA_ERROR_INVALID_VALUE
        });
    }
    let tasks = task.tasks();
    let seq = tasks.begin_submit()?;
    task.state.set(TaskState::Submitted);
    task.status.set(DOCA_SUCCESS);
    task.seq.set(seq);
    Ok(tasks)
}

/// Every `doca_task_submit_ex` flag this provider knows.
const SUBMIT_FLAGS_ALL: u32 = DOCA_TASK_SUBMIT_FLAG_FLUSH | DOCA_TASK_SUBMIT_FLAG_OPTIMIZE_REPORTS;

/// `doca_task_submit_ex`: with `DOCA_TASK_SUBMIT_FLAG_FLUSH`, the ctx's held tasks and then
/// this one go to the kind now (as `doca_task_submit`); without it the task is accepted
/// (generic checks, then owned by the library) and held until the next flush: a flushed
/// submit, `doca_ctx_flush_tasks` or a progress of the PE. `OPTIMIZE_REPORTS` is a hint about
/// completion reporting that DOCA 3.0 does not define further; every completion is reported
/// individually here, so it changes nothing. Unknown flag bits: `DOCA_ERROR_INVALID_VALUE`.
#[inline]
pub fn submit_ex(task: &doca_task, flags: u32) -> Result<(), doca_error_t> {
    if flags & !SUBMIT_FLAGS_ALL != 0 {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    if flags & DOCA_TASK_SUBMIT_FLAG_FLUSH != 0 {
        return submit(task, SubmitMode::Submit);
    }
    let tasks = accept(task)?;
    if let Some(admit) = task.kind.admit {
        // SAFETY: the hook gets a task of its kind in state Submitted on a RUNNING ctx.
        if let Err(e) = unsafe { admit(task) } {
            // Refused at submit, as `submit` refuses: the task stays the caller's.
            task.state.set(TaskState::Allocated);
            tasks.inflight_sub(1);
            return Err(e);
        }
    }
    tasks.hold(task);
    Ok(())
}

/// Hands a held task (Submitted, counted in flight) to its kind; a refusal completes it
/// with the refusal's status (see [`CtxTasks::flush_held`]).
#[inline]
pub(crate) fn push_held(task: &doca_task) {
    if task.state.get() != TaskState::Submitted {
        return;
    }
    // SAFETY: the kind's submit hook gets a task of its kind in state Submitted on a RUNNING
    // ctx (held tasks exist only while RUNNING: stop forgets them).
    if let Err(e) = unsafe { (task.kind.submit)(task, SubmitMode::Held) } {
        complete(task, e);
    }
}

/// Submits an allocated task (`doca_task_submit`, `doca_task_try_submit`, and
/// `doca_task_submit_ex` with FLUSH): a flushed submit, so the ctx's held tasks go to their
/// kind first (submission order is kept).
// Always inlined: the entry points are its frame.
#[inline(always)]
pub fn submit(task: &doca_task, mode: SubmitMode) -> Result<(), doca_error_t> {
    let tasks = accept(task)?;
    tasks.flush_held_for_submit();
    submit_accepted(task, tasks, mode)
}

/// Submits a task the provider made for itself (an event carried as a task to the PE's
/// completion queue, as Comch and RDMA connection management do) without flushing the
/// user's held tasks: in DOCA an event is not a task and rings no doorbell. (These run from
/// the ctx's progress hook, after the progress pushed the held tasks anyway, see
/// `docs/soft-provider.md`; the point is that an internal event is not a user submit.)
pub(crate) fn submit_internal(task: &doca_task) -> Result<(), doca_error_t> {
    let tasks = accept(task)?;
    submit_accepted(task, tasks, SubmitMode::Submit)
}

/// The kind's submit of a task `accept` took for its ctx (whose `tasks` it returned).
#[inline]
fn submit_accepted(task: &doca_task, tasks: &CtxTasks, mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: the kind's submit hook is called with a task of its kind in state Submitted on
    // a RUNNING ctx, as its contract requires.
    let r = unsafe { (task.kind.submit)(task, mode) };
    if r.is_err() {
        // The kind kept no reference (its contract); ownership stays with the caller.
        debug_assert_eq!(task.state.get(), TaskState::Submitted);
        task.state.set(TaskState::Allocated);
        tasks.inflight_sub(1);
    }
    r
}

/// Completes a submitted task with `status`: the callback is delivered by a later
/// `doca_pe_progress` of the ctx's PE (never from inside this call).
pub fn complete(task: &doca_task, status: doca_error_t) {
    complete_inlined(task, status);
}

/// [`complete`], always inlined (the diagnostic stays out of line): for the RDMA engine,
/// which completes most operations in the submit that started them.
#[inline(always)]
pub(crate) fn complete_inlined(task: &doca_task, status: doca_error_t) {
    if task.state.get() != TaskState::Submitted {
        completing_unsubmitted(task);
        return;
    }
    task.status.set(status);
    task.state.set(TaskState::Completed);
    task.tasks().enqueue_completion(task);
}

/// The diagnostic of a [`complete`] of a task that is not submitted (a provider bug).
#[cold]
#[inline(never)]
fn completing_unsubmitted(task: &doca_task) {
    crate::sdk_internal_error!("completing a {} task that is not submitted ({:?})", task.kind.name, task.state.get());
}

/// Delivers a completed task popped from a PE's completion queue: ownership returns to the
/// user and the matching callback runs. Called only by `doca_pe_progress`.
///
/// # Safety
/// `task` must be a completed task just removed from the completion queue of its ctx's PE,
/// as the queue holds it: the [`doca_task::raw`] pointer, with the whole slot's provenance.
pub(crate) unsafe fn deliver(task: *const doca_task) {
    // SAFETY: per the contract, `task` is a live header (its ctx outlives queued tasks).
    let t = unsafe { &*task };
    debug_assert_eq!(t.state.get(), TaskState::Completed);
    t.state.set(TaskState::Allocated);
    t.next.set(ptr::null());
    let cud = t.tasks().delivered();
    let cb = if t.status.get() == DOCA_SUCCESS { t.ok_cb.get() } else { t.err_cb.get() };
    let ud = t.user_data.get();
    // The queue holds `raw()` pointers (see the PE's enqueue), so `task` already covers the
    // whole slot: no need to derive it again from the pool.
    let slot = task.cast_mut();
    match cb {
        Some(cb) => {
            // SAFETY: `cb` was erased from the kind's `TypedCb<T>` (erase_cb::<T>), which may be
            // called as a `TypedCb<doca_task>` with the `T`'s address (see `RawCb`).
            let f = unsafe { core::mem::transmute::<RawCb, TypedCb<doca_task>>(cb) };
            // SAFETY: `slot` is the address of the whole live `T` (the pool only hands out
            // `T`s for `T::KIND`); calling the user's callback is the point of delivery. The
            // callback may free, re-submit or allocate tasks; nothing here touches `t` or its
            // ctx afterwards.
            unsafe { f(slot, ud, cud) }
        }
        None => crate::sdk_log!(ERROR, "{} task completed without a callback; it stays allocated", t.kind.name),
    }
}

/// Flushes every submitted (not yet completed) task of `ctx`, oldest submission first:
/// each gets the kind's flush hook, then completes with `status`.
pub(crate) fn flush_submitted(ctx: &dyn TaskOwner, status: doca_error_t) {
    // Held tasks are Submitted too: they are flushed below with the others.
    ctx.tasks().forget_held();
    let mut pending: Vec<(u64, *const doca_task)> = Vec::new();
    ctx.for_each_pool(&mut |pool| {
        pool.for_each(|t| {
            if t.state.get() == TaskState::Submitted {
                pending.push((t.seq.get(), t as *const doca_task));
            }
        })
    });
    pending.sort_unstable_by_key(|&(seq, _)| seq);
    for (_, t) in pending {
        // SAFETY: pointers into the ctx's live pools, collected just above.
        let t = unsafe { &*t };
        if let Some(f) = t.kind.flush {
            // SAFETY: the hook is called with a submitted task of its own kind.
            unsafe { f(t) };
        }
        complete(t, status);
    }
}

/// Returns an allocated task to its pool (the body of `doca_task_free`).
fn free(task: &doca_task) {
    if task.state.get() != TaskState::Allocated {
        bad_free(task);
        return;
    }
    if let Some(f) = task.kind.release {
        // SAFETY: the hook is called with an allocated task of its own kind.
        unsafe { f(task) };
    }
    task.state.set(TaskState::Free);
    task.user_data.set(doca_data::from_u64(0));
    // SAFETY: a live header's pool pointer is valid (pools live as long as their ctx).
    let pool = unsafe { &*task.pool };
    pool.free.borrow_mut().push(task.index);
    allocated_shard().fetch_sub(1, Ordering::Relaxed);
    task.owner().task_freed();
}

/// The diagnostic of a `doca_task_free` of a task the user does not own (ignored), out of
/// line so that a free's fast path sets up no logging frame.
#[cold]
#[inline(never)]
fn bad_free(task: &doca_task) {
    if task.state.get() == TaskState::Free {
        crate::sdk_log!(
            ERROR,
            "doca_task_free: {} task {:p} is already free (double free ignored)",
            task.kind.name,
            task
        );
    } else {
        crate::sdk_log!(
            ERROR,
            "doca_task_free: {} task {:p} is in flight and owned by the library; \
             free it from its completion callback (ignored)",
            task.kind.name,
            task
        );
    }
}

/// Tasks allocated and not freed yet, over every ctx of every thread of the process: the
/// sum of the shards.
///
/// Only a counter a leak check reads (the chaos harness, after its contexts are gone, expects
/// 0): a task that is never freed keeps its pool slot, and its ctx can never stop. Relaxed,
/// because the value means something only once the threads that allocate are quiet.
///
/// Sharded because allocation and free are on the data path of every executor thread: one
/// process-wide counter put every thread's read-modify-write on the same cache line. A
/// thread always counts in the same shard (a shard may go negative when a task is freed on
/// another thread than the one that allocated it; the sum stays exact).
static ALLOCATED: [AllocShard; ALLOC_SHARDS] = [const { AllocShard(AtomicIsize::new(0)) }; ALLOC_SHARDS];
const ALLOC_SHARDS: usize = 16;

/// One shard of [`ALLOCATED`], alone on its cache line.
#[repr(align(128))]
struct AllocShard(AtomicIsize);

/// The shard of the calling thread (threads take shards in turn).
fn allocated_shard() -> &'static AtomicIsize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // Const-initialised (no lazy-initialisation state to check on every access, which a
        // task allocation and free each paid); `ALLOC_SHARDS` means "not taken yet".
        static SHARD: Cell<usize> = const { Cell::new(ALLOC_SHARDS) };
    }
    let mut s = SHARD.get();
    if s == ALLOC_SHARDS {
        s = NEXT.fetch_add(1, Ordering::Relaxed) % ALLOC_SHARDS;
        SHARD.set(s);
    }
    &ALLOCATED[s].0
}

/// Soft-provider extension (not part of NVIDIA's DOCA): the number of tasks of any kind that
/// are allocated and not freed, in the whole process (`DOCA_ERROR_INVALID_VALUE` for a NULL
/// out-pointer). A debugging query for leak checks.
#[no_mangle]
pub unsafe extern "C" fn doca_soft_get_num_allocated_tasks(num_tasks: *mut usize) -> doca_error_t {
    guard_err(|| {
        if num_tasks.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let n: isize = ALLOCATED.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        // SAFETY: non-NULL checked; the caller guarantees the out-pointer is writable.
        unsafe { crate::ffi::out(num_tasks, n.max(0) as usize) }
    })
}

// ---- entry points ----

#[no_mangle]
pub unsafe extern "C" fn doca_task_submit(task: *mut doca_task) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL task pointers come from this provider's pools (DOCA contract).
        let t = unsafe { task_ref(task) }?;
        submit(t, SubmitMode::Submit)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_task_submit_ex(task: *mut doca_task, flags: u32) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_task_submit.
        let t = unsafe { task_ref(task) }?;
        submit_ex(t, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_task_try_submit(task: *mut doca_task) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_task_submit.
        let t = unsafe { task_ref(task) }?;
        submit(t, SubmitMode::TrySubmit)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_task_free(task: *mut doca_task) {
    guard((), || {
        // SAFETY: as in doca_task_submit.
        match unsafe { task_ref(task) } {
            Ok(t) => free(t),
            Err(_) => {
                crate::sdk_log!(ERROR, "doca_task_free: invalid task pointer {task:p} (ignored)")
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_task_get_status(task: *const doca_task) -> doca_error_t {
    guard(DOCA_ERROR_UNEXPECTED, || {
        // SAFETY: as in doca_task_submit.
        match unsafe { task_ref(task) } {
            Ok(t) => t.status.get(),
            Err(e) => e,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_task_set_user_data(task: *mut doca_task, user_data: doca_data) {
    guard((), || {
        // SAFETY: as in doca_task_submit.
        if let Ok(t) = unsafe { task_ref(task) } {
            t.user_data.set(user_data);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_task_get_user_data(task: *const doca_task) -> doca_data {
    guard(doca_data::from_u64(0), || {
        // SAFETY: as in doca_task_submit.
        match unsafe { task_ref(task) } {
            Ok(t) => t.user_data.get(),
            Err(_) => doca_data::from_u64(0),
        }
    })
}

// ---- per-field accessors of specific task types (task re-use) ----

/// The task of type `T` behind a C pointer, if it is one.
///
/// # Safety
/// A non-NULL `task` must point to a task handed out by this provider (a task of a live ctx).
#[inline]
pub(crate) unsafe fn typed<'a, T: TaskType>(task: *const T) -> Option<&'a T> {
    // SAFETY: per the contract; task_ref checks NULL and the header's magic.
    let h = unsafe { task_ref(task.cast::<doca_task>()) }.ok()?;
    if !h.is::<T>() {
        return None;
    }
    // SAFETY: the kind was checked just above, so `task` is a `T` slot. The pointer itself is
    // the one `alloc` handed out, with the provenance of the whole slot: using it directly
    // spares the pool look-up of `downcast` (every setter and getter runs this).
    Some(unsafe { &*task })
}

/// The task of type `T` for a setter: only while the user owns it (allocated, not submitted).
///
/// # Safety
/// As [`typed`].
// Inlined with the diagnostics out of line: every setter of a re-used task runs this (three
// to five per RDMA operation), and the logging made it a call with a full frame each time.
#[inline]
pub(crate) unsafe fn owned<'a, T: TaskType>(task: *const T, setter: &'static str) -> Option<&'a T> {
    // SAFETY: forwarded contract.
    match unsafe { typed(task) } {
        Some(t) if header(t).state() == TaskState::Allocated => Some(t),
        found => {
            not_owned(task.cast(), found.is_some(), setter);
            None
        }
    }
}

/// The diagnostic of a setter refused by [`owned`].
///
/// `extern "C"` (which cannot unwind: a panic escaping it aborts) with its own guard, so
/// that a setter's body calls nothing that unwinds and its `ffi::guard` compiles to no
/// landing pad: the setter's fast path is then a few loads and compares, without a frame.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)] // called from Rust only, never exported
extern "C" fn not_owned(task: *const std::ffi::c_void, of_this_type: bool, setter: &'static str) {
    guard((), || {
        if of_this_type {
            crate::sdk_log!(
                ERROR,
                "{setter}: task {task:p} is owned by the library until its completion callback (ignored)"
            );
        } else {
            crate::sdk_log!(ERROR, "{setter}: {task:p} is not a task of this type (ignored)");
        }
    })
}

/// Defines the `doca_*_set_F` / `doca_*_get_F` pair of one field of one task type (the
/// re-use accessors; see `rdma/accessors.rs` for the rules): a setter (storing `$set_ty`
/// into the `Cell` field, converted with `as`) and a getter (returning `$get_ty`, `$default`
/// for an invalid task).
macro_rules! task_field {
    ($task:ty, $field:ident, $set:ident($set_ty:ty), $get:ident -> $get_ty:ty = $default:expr) => {
        #[no_mangle]
        #[allow(clippy::unnecessary_cast)] // `as _` is the identity for most fields
        pub unsafe extern "C" fn $set(task: *mut $task, value: $set_ty) {
            $crate::ffi::guard((), || {
                // SAFETY: non-NULL task pointers come from this provider (DOCA contract).
                if let Some(t) = unsafe { $crate::task::owned(task, stringify!($set)) } {
                    t.$field.set(value as _);
                }
            })
        }

        #[no_mangle]
        #[allow(clippy::unnecessary_cast)]
        pub unsafe extern "C" fn $get(task: *const $task) -> $get_ty {
            $crate::ffi::guard($default, || {
                // SAFETY: as in the setter.
                unsafe { $crate::task::typed(task) }.map_or($default, |t| t.$field.get() as $get_ty)
            })
        }
    };
}

pub(crate) use task_field;

#[cfg(test)]
mod tests;
