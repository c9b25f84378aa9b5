//! Held tasks: DOCA tasks that one owner keeps for many operations, each with its own
//! completion record, and submits again as they are. The runtime's other path (a slot per
//! operation, a task allocated or taken from the context's kept ones and re-initialised)
//! pays, per operation, for what a held task pays once: the slot's reservation and release,
//! the descriptors' lookup and release, the setters. [`Lanes`](crate::lanes::Lanes) (RDMA
//! and DMA) are built on it, and so are an RDMA connection's operation futures
//! ([`HeldOp`](super::HeldOp): one-record groups, whose operations point the task at new
//! buffers each time).
//!
//! DOCA allows it: in its completion callback a task belongs to the user again with every
//! parameter it was allocated with (buffers, connection, user data), and may be submitted
//! again; a destination's data length is reset first, since results are appended after a
//! destination's data. The price is DOCA's lifecycle, which this module carries:
//!
//! * **Records.** A [`HeldGroup`] (in an `Rc`, so it never moves) has one [`HeldRecord`] per
//!   task. The task's user data is the record's address tagged with [`HELD_TAG`], which
//!   [`completion_cb`](super::completion_cb) tells apart from a slot key (slot generations
//!   stay below bit 31) and hands to [`on_held_completion`]: the status (and the kind's
//!   results, [`DocaTask::on_complete`]) goes into the record, and the owner's waker, if it
//!   waits, is woken. No table, no generation, no lookup.
//! * **The context's lifecycle.** A context cannot stop while tasks are allocated. A group is
//!   registered with its context's record: when the context leaves RUNNING (a stop, a
//!   restart, an error), or is destroyed, the record gives back every held task that is not
//!   in flight ([`HeldGroup::give_back_idle`]), and a task that completes while its context
//!   does not keep tasks, or completes with an error, is freed by the callback. The owner
//!   allocates again at the record's next use (and the submit fails, with DOCA's error, if
//!   the context does not run).
//! * **Counting.** A held task counts among its context's outstanding tasks while in flight
//!   only, as a task kept for reuse does: an idle one will not be freed by a completion, so
//!   a future waiting for a free task must not count on it.
//! * **Abandoning.** An owner dropped while tasks are in flight calls
//!   [`HeldGroup::abandon`] with the memory those tasks may touch: the group keeps itself and
//!   that memory alive (a reference cycle) until its last completion, which frees the task
//!   and breaks the cycle. At shutdown, a group whose context never stopped is leaked with
//!   its context.
//!
//! Everything here runs on the executor's thread (the group is `!Send`), and no borrow is
//! held across a call into DOCA.

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::waiters::{keep_waker_in, KeptWaker};
use super::{DocaTask, TaskOutput, OUT_WORDS};
use crate::executor::context::CtxRecord;
use crate::executor::local::{with_current, Core};
use crate::mem::descriptors::TaskDescs;
use crate::sys;

/// The bit that marks a task's user data as a [`HeldRecord`]'s address rather than a slot
/// key. User-space addresses stay below it, and slot keys keep it clear (their generation is
/// 31 bits).
pub(crate) const HELD_TAG: u64 = 1 << 63;

/// Where a record is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum HeldState {
    /// No operation: its task (if it has one) is the owner's.
    Idle,
    /// Submitted: DOCA owns the task and writes the record at completion.
    InFlight,
    /// Completed (or refused at submission): the status waits for the owner.
    Done,
}

/// One held task and the record of its latest operation.
pub(crate) struct HeldRecord {
    /// The group, set once the group is in its `Rc` (it never moves afterwards).
    group: Cell<*const HeldGroup>,
    /// The task (a `*mut K::Task` of the group's kind), or null: not allocated yet, or given
    /// back.
    task: Cell<*mut c_void>,
    /// `task` as a `doca_task` (its `*_as_task`, which is a call into the provider), set with
    /// it; meaningful only while `task` is not null.
    base: Cell<*mut sys::doca_task>,
    state: Cell<HeldState>,
    status: Cell<sys::doca_error_t>,
    /// What [`DocaTask::on_complete`] copied out of the task. Written only by the callback,
    /// while no `&` to it exists; read by the owner once `Done`.
    out: UnsafeCell<TaskOutput>,
    /// The descriptors the record's current operation took for its task, given back by its
    /// completion (or by the owner, for an operation DOCA never had), but for the cache
    /// loans it parks for its next operation (`mem::descriptors`): an operation on a held
    /// task (`held_op`), whose buffers may change with each operation. Lanes keep theirs for
    /// their whole life and leave this empty.
    descs: TaskDescs,
}

impl HeldRecord {
    /// The user data of this record's task: its address, tagged.
    #[inline(always)]
    pub(crate) fn user_data(&self) -> sys::doca_data {
        sys::doca_data::from_u64(std::ptr::from_ref(self) as usize as u64 | HELD_TAG)
    }

    /// The task (a `*mut K::Task` of the group's kind `K`, untyped), or null when it has
    /// none.
    #[inline(always)]
    pub(crate) fn task(&self) -> *mut c_void {
        self.task.get()
    }

    /// The state.
    #[inline(always)]
    pub(crate) fn state(&self) -> HeldState {
        self.state.get()
    }

    /// The result area, for DOCA to write through while the task is in flight (see
    /// [`TaskSlot::out_ptr`](super::TaskSlot::out_ptr)).
    #[inline(always)]
    pub(crate) fn out_ptr(&self) -> *mut u64 {
        self.out.get().cast()
    }

    /// The descriptors of the current operation.
    #[inline(always)]
    pub(crate) fn descs(&self) -> &TaskDescs {
        &self.descs
    }

    /// Gives the record the task `task` (a `*mut K::Task` of the group's kind, untyped), just
    /// allocated for it with its user data; `base` is its `doca_task` (`K::as_task`).
    ///
    /// # Safety
    /// `task` is a live task of the group's kind on its context, that nobody else owns, and
    /// `base` its `doca_task`; the record has none.
    pub(crate) unsafe fn set_task(&self, task: *mut c_void, base: *mut sys::doca_task) {
        debug_assert!(self.task.get().is_null());
        self.task.set(task);
        self.base.set(base);
    }

    /// Takes the done record's status; it is idle again, its result area readable
    /// ([`output`](HeldRecord::output)) until its next submit.
    #[inline(always)]
    pub(crate) fn take(&self) -> sys::doca_error_t {
        debug_assert!(self.state.get() == HeldState::Done);
        self.state.set(HeldState::Idle);
        self.status.get()
    }

    /// The result area, as the last completion left it. Only for an idle record: one in
    /// flight may be written by its callback.
    #[inline(always)]
    pub(crate) fn output(&self) -> TaskOutput {
        debug_assert!(self.state.get() == HeldState::Idle);
        // SAFETY: idle: DOCA does not own the task, and the callback (the only writer) runs
        // only for a task in flight.
        unsafe { *self.out.get() }
    }
}

/// The held tasks of one owner, all of one kind, on one context (see the module docs).
pub(crate) struct HeldGroup {
    ctx: Rc<CtxRecord>,
    records: Box<[HeldRecord]>,
    /// The kind's [`DocaTask::free`].
    free: unsafe fn(*mut c_void),
    in_flight: Cell<usize>,
    /// The owner's task, while it waits for a record to be done.
    waker: Cell<Option<KeptWaker>>,
    /// The owner left ([`abandon`](HeldGroup::abandon)): every task is freed at completion.
    abandoned: Cell<bool>,
    /// Set by [`abandon`](HeldGroup::abandon) while tasks are in flight: the memory they may
    /// touch, and the group itself (the cycle the last completion breaks).
    keep: Cell<Option<Abandoned>>,
    /// Whether the records hold their operations' descriptors ([`for_ops`](HeldGroup::for_ops)),
    /// which the completion gives back. Lanes keep theirs and skip the look (9 instructions
    /// per `op_cost lane_fadd`).
    op_descs: bool,
}

/// What an abandoned group keeps until its last completion: the memory its tasks may touch,
/// and itself.
type Abandoned = (Box<dyn Any>, Rc<HeldGroup>);

/// # Safety
/// `task` is a live task of kind `K` that DOCA does not own; not used afterwards.
unsafe fn free_held<K: DocaTask>(task: *mut c_void) {
    // SAFETY: forwarded (the caller's contract); the pointer was a `*mut K::Task`.
    unsafe { K::free(task.cast()) }
}

impl HeldGroup {
    /// A group of `n` records for tasks of kind `K` on the context `ctx`, registered with
    /// it (so that it gives idle tasks back when the context leaves RUNNING). No task is
    /// allocated yet.
    pub(crate) fn new<K: DocaTask>(ctx: &Rc<CtxRecord>, n: usize) -> Rc<HeldGroup> {
        Self::with::<K>(ctx, n, false)
    }

    /// A group of `n` records whose operations each take their own descriptors (held by
    /// the record, given back by the completion, or parked for the next operation): the
    /// group of an operation future ([`HeldOp`](super::HeldOp), one record), or of a
    /// window's lanes of one kind (`rdma::window`, a record per lane). Otherwise as
    /// [`new`](HeldGroup::new).
    pub(crate) fn for_ops<K: DocaTask>(ctx: &Rc<CtxRecord>, n: usize) -> Rc<HeldGroup> {
        Self::with::<K>(ctx, n, true)
    }

    fn with<K: DocaTask>(ctx: &Rc<CtxRecord>, n: usize, op_descs: bool) -> Rc<HeldGroup> {
        // `first` relies on it.
        assert!(n > 0, "a held group has at least one record");
        let records = (0..n)
            .map(|_| HeldRecord {
                group: Cell::new(std::ptr::null()),
                task: Cell::new(std::ptr::null_mut()),
                base: Cell::new(std::ptr::null_mut()),
                state: Cell::new(HeldState::Idle),
                status: Cell::new(sys::DOCA_SUCCESS),
                out: UnsafeCell::new([0; OUT_WORDS]),
                // An operation's cache loans stay with the record for its next operation.
                descs: if op_descs { TaskDescs::parking() } else { TaskDescs::new() },
            })
            .collect();
        let group = Rc::new(HeldGroup {
            ctx: ctx.clone(),
            records,
            free: free_held::<K>,
            in_flight: Cell::new(0),
            waker: Cell::new(None),
            abandoned: Cell::new(false),
            keep: Cell::new(None),
            op_descs,
        });
        let me: *const HeldGroup = Rc::as_ptr(&group);
        for r in group.records.iter() {
            r.group.set(me);
        }
        ctx.hold(&group);
        group
    }

    /// The context.
    pub(crate) fn ctx(&self) -> &Rc<CtxRecord> {
        &self.ctx
    }

    /// Tasks in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.get()
    }

    /// Record `i`. An owner that works on one record for a while (an operation future)
    /// takes it once and uses its methods: each index into the group is a bounds check (18
    /// instructions per `op_cost write` of a held future, 16 per lane).
    #[inline(always)]
    pub(crate) fn record(&self, i: usize) -> &HeldRecord {
        &self.records[i]
    }

    /// Record 0, the one record of an operation future's group: [`record`](HeldGroup::record)
    /// without its bounds check (7 instructions per `op_cost write`).
    #[inline(always)]
    pub(crate) fn first(&self) -> &HeldRecord {
        // SAFETY: a group has at least one record (asserted at its making).
        unsafe { self.records.get_unchecked(0) }
    }

    /// The user data of record `i`'s task.
    #[inline(always)]
    pub(crate) fn user_data(&self, i: usize) -> sys::doca_data {
        self.records[i].user_data()
    }

    /// Record `i`'s task (see [`HeldRecord::task`]).
    #[inline(always)]
    pub(crate) fn task(&self, i: usize) -> *mut c_void {
        self.records[i].task()
    }

    /// Record `i`'s state.
    #[inline(always)]
    pub(crate) fn state(&self, i: usize) -> HeldState {
        self.records[i].state()
    }

    /// Gives record `i` a task (see [`HeldRecord::set_task`]).
    ///
    /// # Safety
    /// As for [`HeldRecord::set_task`].
    pub(crate) unsafe fn set_task(&self, i: usize, task: *mut c_void, base: *mut sys::doca_task) {
        // SAFETY: forwarded (the caller's contract).
        unsafe { self.records[i].set_task(task, base) }
    }

    /// A record other than `i` whose task is not in flight (the owner's to give away), if
    /// any: first among `prefer`, then any.
    pub(crate) fn idle_task(&self, i: usize, prefer: &[u32]) -> Option<usize> {
        let spare = |j: usize| {
            j != i && !self.records[j].task.get().is_null() && self.records[j].state.get() != HeldState::InFlight
        };
        prefer.iter().map(|&j| j as usize).find(|&j| spare(j)).or_else(|| (0..self.records.len()).find(|&j| spare(j)))
    }

    /// Moves record `from`'s task (not in flight) to record `to` (which has none), with
    /// `to`'s user data. The caller re-points the task's buffers with the kind's setters.
    pub(crate) fn move_task(&self, from: usize, to: usize) {
        let (f, t) = (&self.records[from], &self.records[to]);
        debug_assert!(f.state.get() != HeldState::InFlight && t.task.get().is_null());
        let task = f.task.replace(std::ptr::null_mut());
        // SAFETY: a live task of the group that DOCA does not own (not in flight); only its
        // user data changes.
        unsafe { sys::doca_task_set_user_data(f.base.get(), self.user_data(to)) };
        t.task.set(task);
        t.base.set(f.base.get());
    }

    /// Submits record `r`'s task: with its doorbell when `doorbell` is set
    /// (`Core::submit_now`), else with the doorbell deferred to the executor's next progress
    /// (`Core::submit_deferred`). On success the record is in flight; otherwise the task is
    /// still the owner's and the record idle, and DOCA's code is returned.
    ///
    /// # Safety
    /// `r` is one of this group's records ([`record`](HeldGroup::record)), idle, with a task
    /// (of the group's kind) re-initialised as its next operation needs.
    #[inline(always)]
    pub(crate) unsafe fn submit(&self, core: &Core, r: &HeldRecord, doorbell: bool) -> sys::doca_error_t {
        debug_assert!(std::ptr::eq(r.group.get(), self), "a record of this group");
        debug_assert!(r.state.get() == HeldState::Idle && !r.task.get().is_null());
        // In flight before the call: a provider that completed inside submit would find it.
        r.state.set(HeldState::InFlight);
        // SAFETY: a live task of this context, owned by the caller (the contract); `base`
        // was set with it.
        let rc = unsafe {
            let task = r.base.get();
            if doorbell {
                core.submit_now(task)
            } else {
                core.submit_deferred(&self.ctx, task)
            }
        };
        if rc == sys::DOCA_SUCCESS {
            self.in_flight.set(self.in_flight.get() + 1);
            self.ctx.task_allocated();
        } else {
            r.state.set(HeldState::Idle);
        }
        rc
    }

    /// Marks idle record `i` done with `status`, an operation that failed before DOCA had
    /// it: its result comes in its turn like any other.
    pub(crate) fn refuse(&self, i: usize, status: sys::doca_error_t) {
        let r = &self.records[i];
        debug_assert!(r.state.get() == HeldState::Idle);
        r.status.set(status);
        r.state.set(HeldState::Done);
    }

    /// Ready once record `r` of this group is done; otherwise its completion wakes `cx`'s
    /// task. `core` is the group's executor, which polls it (see `keep_waker_in`).
    #[inline(always)]
    pub(crate) fn poll_done(&self, core: &Core, r: &HeldRecord, cx: &mut Context<'_>) -> Poll<()> {
        debug_assert!(std::ptr::eq(r.group.get(), self), "a record of this group");
        if r.state.get() == HeldState::Done {
            return Poll::Ready(());
        }
        keep_waker_in(core, &self.waker, cx.waker());
        Poll::Pending
    }

    /// Takes done record `i`'s status (see [`HeldRecord::take`]).
    #[inline(always)]
    pub(crate) fn take(&self, i: usize) -> sys::doca_error_t {
        self.records[i].take()
    }

    /// Record `i`'s result area (see [`HeldRecord::output`]).
    #[inline(always)]
    pub(crate) fn output(&self, i: usize) -> TaskOutput {
        self.records[i].output()
    }

    /// Frees every task that is not in flight (DOCA does not own it): the context leaves
    /// RUNNING, its pool is spent (`CtxRecord::reclaim_idle`), or the owner goes. A record
    /// without a task allocates again at its next use.
    /// Returns how many it freed.
    pub(crate) fn give_back_idle(&self) -> usize {
        self.records.iter().filter(|r| self.give_back_task(r)).count()
    }

    /// Frees record `r`'s task (one of this group's records) if it has one that is not in
    /// flight; whether it did. The record allocates again at its next use.
    pub(crate) fn give_back_task(&self, r: &HeldRecord) -> bool {
        debug_assert!(std::ptr::eq(r.group.get(), self), "a record of this group");
        let task = r.task.get();
        if task.is_null() || r.state.get() == HeldState::InFlight {
            return false;
        }
        r.task.set(std::ptr::null_mut());
        if self.ctx.is_alive() {
            // SAFETY: a task of the group's kind that DOCA does not own (not in flight),
            // taken out of its record above, so freed once. A destroyed context freed its
            // pools: then there is nothing to give back (see `CtxRecord::free_kept`, which
            // runs before a destroy).
            unsafe { (self.free)(task) };
        }
        true
    }

    /// The owner goes: idle tasks are given back now; while tasks are in flight, the group
    /// keeps itself and `keep` (the memory they may touch, and their descriptors) alive
    /// until the last of them completes. Otherwise `keep` is dropped here, after the tasks
    /// are freed.
    pub(crate) fn abandon(self: Rc<Self>, keep: Box<dyn Any>) {
        drop(self.waker.take());
        self.abandoned.set(true);
        let _ = self.give_back_idle();
        if self.in_flight.get() == 0 {
            drop(keep);
            return;
        }
        let me = self.clone();
        self.keep.set(Some((keep, me)));
    }
}

impl Drop for HeldGroup {
    fn drop(&mut self) {
        // An owner gives its tasks back before it lets the group go (`abandon`); this is for
        // a group dropped otherwise, with nothing in flight (an in-flight task holds the
        // group alive through `keep`, or was leaked at shutdown with it).
        let _ = self.give_back_idle();
    }
}

/// The completion of a held task (`key` is its tagged user data), called by
/// [`completion_cb`](super::completion_cb).
///
/// # Safety
/// `task` is the live, completed task of kind `K` whose user data is `key`, set by
/// [`HeldGroup::user_data`] for a record of a live group (a group with a task in flight is
/// alive: its owner holds it, or it holds itself, see [`HeldGroup::abandon`]).
// Inlined into `completion_cb`: one frame per completion instead of two (15 instructions of
// a held write's ~620, `examples/op_cost lanes`).
#[inline(always)]
pub(super) unsafe fn on_held_completion<K: DocaTask>(task: *mut K::Task, key: u64, status: sys::doca_error_t) {
    // SAFETY: the caller's contract: a record of a live group, which never moves.
    let rec = unsafe { &*((key & !HELD_TAG) as *const HeldRecord) };
    // SAFETY: set at the group's creation, and the group is alive.
    let group = unsafe { &*rec.group.get() };
    // SAFETY: the task completed, so DOCA no longer writes the area; the owner reads it only
    // once the record is done, which it is not yet.
    unsafe { K::on_complete(task, status, &mut *rec.out.get()) };
    // DOCA is done with the task's descriptors: back before the context's waiters (for a
    // task, or a descriptor) are woken below, except the cache loans the record parks for
    // its next operation (all of them when its owner left). The owner keeps their memory and
    // inventory until its operation is collected or, abandoned, until the end of this call.
    let abandoning = group.abandoned.get();
    if group.op_descs {
        if abandoning {
            rec.descs.release();
        } else {
            rec.descs.release_unparked();
        }
    }
    rec.status.set(status);
    rec.state.set(HeldState::Done);
    group.in_flight.set(group.in_flight.get() - 1);
    with_current(Core::task_delivered);
    let ctx = &group.ctx;
    if status != sys::DOCA_SUCCESS || !ctx.keeps_tasks() || abandoning {
        // A failed task (its context is in the error state), a context that is stopping,
        // or an owner that left: give it back.
        rec.task.set(std::ptr::null_mut());
        // SAFETY: our completed task of kind K, taken out of its record, not used after.
        unsafe { K::free(task) };
    }
    // One task fewer outstanding, whether kept or freed; futures waiting for a task or for
    // room in the queue may go on.
    ctx.task_freed();
    if let Some(w) = group.waker.take() {
        w.wake();
    }
    if abandoning && group.in_flight.get() == 0 {
        if let Some((keep, me)) = group.keep.take() {
            // The buffers' destructors wait for the end of an inline progress, as an
            // orphaned slot's do (`Slots::drop_or_defer`); outside the runtime nothing is
            // polling, and the closure's drop drops them.
            let _ = with_current(|core| core.slots.drop_or_defer(keep));
            // Last: this may free the group, which `rec` and `group` point into; neither is
            // used afterwards.
            drop(me);
        }
    }
}
