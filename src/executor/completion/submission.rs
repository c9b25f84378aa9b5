//! [`Submission`]: one operation's task on its way to DOCA and back through a completion slot,
//! the steps a [`TaskFuture`](super::TaskFuture) takes (its poll and its drop). Operations on
//! held tasks (`held_op`: an RDMA connection's futures, a window's lanes) take the same
//! steps on a held record instead of a slot, and share the allocation's waits
//! ([`poll_allocate`]).
//!
//! 1. **Reserve** a completion slot ([`Submission::reserve`]): its key is the task's user
//!    data, its result area has a stable address.
//! 2. **Allocate** the task with an [`AllocTask`] (a kept one re-initialised, or a fresh one).
//!    An exhausted pool while tasks of the context are outstanding waits for one of them to
//!    be freed (the context's task waiters); otherwise the error is returned.
//! 3. **Submit** it, with its doorbell when the caller progresses the PE right after, else
//!    with the doorbell deferred to the executor's next progress. A full queue waits as in
//!    step 2, keeping the allocated task.
//! 4. **Collect** the completion from the slot ([`SlotRef::poll_done`],
//!    [`SlotRef::take_output`]), or **abandon** it ([`SlotRef::abandon`]): a slot whose task
//!    is in flight becomes orphaned and keeps the operation's buffers until DOCA is done.

use std::any::Any;
use std::ptr::NonNull;
use std::task::{ready, Context, Poll};

use super::slots::{Slot, SlotState};
use super::waiters::{keep_waker_in, Ticket};
use super::{AllocTask, DocaTask, TaskOutput, TaskSlot};
use crate::error::{Error, Result};
use crate::executor::context::CtxRecord;
use crate::executor::local::Core;
use crate::sys;

/// A `DEBUG` event: operation `op` waits for a task of its context to be freed (see the
/// module documentation on back-pressure).
#[cold]
pub(super) fn back_pressure(op: &'static str, ctx: &CtxRecord, why: &'static str) {
    crate::trace::event!(debug, { op = op, ctx = ctx.name(), outstanding = ctx.outstanding() }, "back-pressure: {why}");
}

/// An allocation found a task pool of `ctx` spent: when the context gives back tasks it kept
/// idle (for reuse, or held by lanes; `CtxRecord::reclaim_idle` traces it), `allocate` tries
/// again; its result either way. Off the fast path: out of line, so that the inlined
/// submission stays as small as it was.
#[cold]
#[inline(never)]
pub(super) fn pool_spent<T>(
    ctx: &CtxRecord,
    allocate: impl FnOnce() -> std::result::Result<T, sys::doca_error_t>,
) -> std::result::Result<T, sys::doca_error_t> {
    if ctx.reclaim_idle() {
        allocate()
    } else {
        Err(sys::DOCA_ERROR_NO_MEMORY)
    }
}

/// Step 2's waits and failures, for a slot's operation and a held one alike: `allocate`
/// gives the task (allocated, kept or held; it gives back what it took when it fails); a
/// spent pool has the context give back its idle tasks and is tried again. `Ready(Ok)` with
/// the task; `Pending` while waiting for a task of `ctx` to be freed (the pool is spent and
/// tasks are outstanding) or for the context's restart (`ticket` is the operation's place
/// among the waiters); `Ready(Err)` naming `op` otherwise.
#[inline(always)]
pub(super) fn poll_allocate<T>(
    ctx: &CtxRecord,
    op: &'static str,
    ticket: &mut Ticket,
    cx: &mut Context<'_>,
    mut allocate: impl FnMut() -> std::result::Result<*mut T, sys::doca_error_t>,
) -> Poll<Result<*mut T>> {
    let err = |code, what: &str| Error::from_doca(code, format!("{op}: {what}"));
    let mut r = allocate();
    if r == Err(sys::DOCA_ERROR_NO_MEMORY) {
        r = pool_spent(ctx, allocate);
    }
    match r {
        Ok(task) if !task.is_null() => Poll::Ready(Ok(task)),
        Ok(_) => Poll::Ready(Err(err(sys::DOCA_ERROR_UNEXPECTED, "allocate: null task"))),
        Err(sys::DOCA_ERROR_NO_MEMORY) if ctx.outstanding() > 0 => {
            // Pool exhausted by tasks that will be freed: wait for one.
            back_pressure(op, ctx, "task pool exhausted");
            ctx.task_waiters.register(ticket, cx.waker());
            Poll::Pending
        }
        Err(sys::DOCA_ERROR_BAD_STATE) if ctx.restart_pending() => {
            // A failed task stopped the context, which restarts: wait for it.
            back_pressure(op, ctx, "context restarting after a failed task");
            ctx.task_waiters.register(ticket, cx.waker());
            Poll::Pending
        }
        Err(rc) => Poll::Ready(Err(err(rc, "allocate task"))),
    }
}

/// A reserved completion slot of the current executor: its key (the task's user data) and
/// its address. Owned: whoever holds it releases it exactly once ([`take_output`],
/// [`release`], [`abandon`], which consume it), unless it is forgotten at shutdown.
///
/// [`take_output`]: SlotRef::take_output
/// [`release`]: SlotRef::release
/// [`abandon`]: SlotRef::abandon
#[derive(Debug)]
pub(crate) struct SlotRef {
    key: u64,
    slot: NonNull<Slot>,
}

impl SlotRef {
    /// The slot. Valid until this handle is consumed.
    #[inline(always)]
    pub(super) fn get(&self) -> &Slot {
        // SAFETY: `slot` came from `Slots::reserve` of the current executor's table, which
        // outlives every operation of the executor (operations hold the core, or borrow
        // something that does) and never moves or frees a chunk while alive; the slot is
        // ours until this handle is consumed. Slots are only used through shared references.
        unsafe { self.slot.as_ref() }
    }

    /// The key: the user data its task carries.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// What an allocation sees of the slot.
    #[inline(always)]
    pub(crate) fn task_slot(&self) -> TaskSlot {
        let slot = self.get();
        TaskSlot::new(sys::doca_data::from_u64(self.key), slot.out_ptr(), &slot.descs)
    }

    /// Whether the task's completion arrived.
    #[inline(always)]
    pub(crate) fn is_done(&self) -> bool {
        self.get().state.get() == SlotState::Done
    }

    /// Whether DOCA owns the task (submitted, not completed).
    pub(crate) fn in_flight(&self) -> bool {
        self.get().state.get() == SlotState::InFlight
    }

    /// Ready once the completion arrived; otherwise the completion will wake `cx`'s waker
    /// (replacing the one a previous poll left, unless it wakes the same task).
    /// `core` is the slot's executor.
    #[inline(always)]
    pub(crate) fn poll_done(&self, core: &Core, cx: &mut Context<'_>) -> Poll<()> {
        let slot = self.get();
        if slot.state.get() == SlotState::Done {
            return Poll::Ready(());
        }
        keep_waker_in(core, &slot.waker, cx.waker());
        Poll::Pending
    }

    /// The completed task's result (`op` names the operation in an error), releasing the
    /// slot. Only once [`is_done`](SlotRef::is_done).
    #[inline(always)]
    pub(crate) fn take_output(self, core: &Core, op: &'static str) -> Result<TaskOutput> {
        debug_assert!(self.get().state.get() == SlotState::Done);
        // SAFETY: `Done`: DOCA no longer writes the area.
        let out = unsafe { *self.get().out.get() };
        self.take_status(core, op).map(|()| out)
    }

    /// The completed task's status only (`op` names the operation in an error), releasing
    /// the slot: [`take_output`](SlotRef::take_output) for an operation whose result area
    /// holds nothing (a write, a send), without copying it. Only once
    /// [`is_done`](SlotRef::is_done).
    #[inline(always)]
    pub(crate) fn take_status(self, core: &Core, op: &'static str) -> Result<()> {
        let status = self.get().status.get();
        debug_assert!(self.get().state.get() == SlotState::Done);
        self.release(core);
        if status == sys::DOCA_SUCCESS {
            Ok(())
        } else {
            Err(Error::from_doca(status, op))
        }
    }

    /// Returns the slot to the table. Only when DOCA does not own its task (never
    /// submitted, or completed).
    #[inline(always)]
    pub(crate) fn release(self, core: &Core) {
        core.slots.release_slot(self.key, self.get());
    }

    /// Gives the operation up: a task in flight leaves its slot orphaned, keeping `keep`
    /// (the memory DOCA may touch) until the completion callback releases it; otherwise the
    /// slot is released now and `keep` dropped after it.
    pub(crate) fn abandon(self, core: &Core, keep: Option<Box<dyn Any>>) {
        let slot = self.get();
        if slot.state.get() == SlotState::InFlight {
            slot.state.set(SlotState::Orphaned);
            drop(slot.waker.take());
            slot.keepalive.set(keep);
            return;
        }
        self.release(core);
        drop(keep);
    }
}

/// Where a [`Submission`] is.
enum Stage<T> {
    /// Not allocated yet (or waiting for a free task).
    Alloc,
    /// Allocated, not submitted (waiting for room in the submit queue).
    Submit(*mut T),
    /// Submitted: DOCA owns the task and the slot receives its completion.
    InFlight,
}

/// One operation of kind `K` from its reserved slot to DOCA (see the module documentation).
pub(crate) struct Submission<K: DocaTask> {
    slot: SlotRef,
    stage: Stage<K::Task>,
}

impl<K: DocaTask> Submission<K> {
    /// Reserves a slot of `core`'s table for a new operation.
    #[inline(always)]
    pub(crate) fn reserve(core: &Core) -> Submission<K> {
        let (key, slot) = core.slots.reserve_kind(K::REMOTE);
        Submission { slot: SlotRef { key, slot }, stage: Stage::Alloc }
    }

    /// The operation's slot.
    #[inline(always)]
    pub(crate) fn slot(&self) -> &SlotRef {
        &self.slot
    }

    /// Whether DOCA has the task (or had it: completed).
    #[inline(always)]
    pub(crate) fn submitted(&self) -> bool {
        matches!(self.stage, Stage::InFlight)
    }

    /// Steps 2 and 3 (see the module documentation): allocates the task with `alloc` and
    /// submits it. `Ready(Ok(inline))` once DOCA owns it; `inline` says the caller must now
    /// call [`Core::progress_inline`] (the task went with its doorbell because
    /// `may_progress` asked and [`Core::take_inline_progress`] agreed), otherwise the
    /// doorbell is deferred, unless `may_progress` asked and the operation is alone
    /// ([`Core::submit_would_be_alone`]). A [remote](DocaTask::REMOTE) kind's task goes
    /// with its doorbell whenever `may_progress` asked, and is never progressed inline.
    /// `Pending` while waiting for a free task or for room (`ticket` is the caller's place
    /// among the context's waiters). `Ready(Err)` when the operation failed: the caller
    /// releases the slot ([`into_slot`](Submission::into_slot)).
    #[inline(always)]
    // Each argument is borrowed from a different owner (the executor, the context, the
    // caller's future or window), so there is no struct to pass instead.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn poll_submit<A: AllocTask<K>>(
        &mut self,
        core: &Core,
        ctx: &CtxRecord,
        op: &'static str,
        alloc: &mut A,
        ticket: &mut Ticket,
        cx: &mut Context<'_>,
        may_progress: bool,
    ) -> Poll<Result<bool>> {
        let err = |code, what: &str| Error::from_doca(code, format!("{op}: {what}"));
        loop {
            match self.stage {
                Stage::InFlight => return Poll::Ready(Ok(false)),
                Stage::Alloc => {
                    if !ctx.is_alive() {
                        return Poll::Ready(Err(ctx.destroyed(op)));
                    }
                    let slot = &self.slot;
                    let allocate = || {
                        let r = alloc.alloc(&slot.task_slot());
                        if r.is_err() {
                            // Nothing allocated: give back the descriptors the allocation
                            // took before waiting, failing or trying again.
                            slot.get().release_descs();
                        }
                        r
                    };
                    let task = ready!(poll_allocate(ctx, op, ticket, cx, allocate))?;
                    ctx.task_allocated();
                    self.stage = Stage::Submit(task);
                }
                Stage::Submit(task) => {
                    // The slot is marked in flight before the call, so that a completion
                    // delivered from inside submit (DOCA delivers them from progress, but a
                    // provider that did otherwise) still finds it.
                    let slot = self.slot.get();
                    slot.state.set(SlotState::InFlight);
                    // A remote kind's answer is another processor's work, microseconds
                    // away: an inline progress cannot collect it (it cost an offloaded
                    // command ~1 200 instructions of looking at the PE). Its task still goes
                    // with its doorbell, so that the worker starts at once.
                    let (ring, inline) = if K::REMOTE {
                        (may_progress, false)
                    } else {
                        let inline = may_progress && core.take_inline_progress();
                        (inline, inline)
                    };
                    // An operation alone rings too, even when it parks (see
                    // `Core::submit_would_be_alone`).
                    let ring = ring || (may_progress && core.submit_would_be_alone());
                    // SAFETY: `task` is a live task of kind K of this ctx that we allocated
                    // and still own. A deferred doorbell is rung before the PE is next
                    // progressed.
                    let rc = unsafe {
                        if ring {
                            core.submit_now(K::as_task(task))
                        } else {
                            core.submit_deferred(ctx, K::as_task(task))
                        }
                    };
                    if rc == sys::DOCA_SUCCESS {
                        self.stage = Stage::InFlight;
                        return Poll::Ready(Ok(inline));
                    }
                    // Not submitted: the task is still ours, the slot is not in flight.
                    slot.state.set(SlotState::Reserved);
                    if matches!(rc, sys::DOCA_ERROR_AGAIN | sys::DOCA_ERROR_NO_MEMORY) && ctx.outstanding() > 1 {
                        // Queue full of other tasks that will complete: wait for one.
                        back_pressure(op, ctx, "submit queue full");
                        ctx.task_waiters.register(ticket, cx.waker());
                        return Poll::Pending;
                    }
                    // A failed submit leaves the task with us: free it.
                    // SAFETY: we own the unsubmitted task; not used afterwards.
                    unsafe { K::free(task) };
                    self.stage = Stage::Alloc;
                    ctx.task_freed();
                    if rc == sys::DOCA_ERROR_BAD_STATE && ctx.restart_pending() {
                        // Stopped by a failed task after the allocation (a kept task needs
                        // no call into DOCA): allocate again once it restarted, with the
                        // descriptors taken again too (DOCA never owned the task).
                        slot.release_descs();
                        back_pressure(op, ctx, "context restarting after a failed task");
                        ctx.task_waiters.register(ticket, cx.waker());
                        return Poll::Pending;
                    }
                    return Poll::Ready(Err(err(rc, "submit")));
                }
            }
        }
    }

    /// The slot, for collecting the completion of a submitted task, or for releasing the
    /// slot of an operation that failed. An allocated task that was never submitted is
    /// freed first (it may reference the memory the caller keeps).
    #[inline(always)]
    pub(crate) fn into_slot(self, ctx: &CtxRecord) -> SlotRef {
        if let Stage::Submit(task) = self.stage {
            // SAFETY: allocated, never submitted: still ours, and not used afterwards.
            unsafe { K::free(task) };
            ctx.task_freed();
        }
        self.slot
    }
}
