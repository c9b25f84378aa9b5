//! [`TaskFuture`]: one DOCA task as a future (allocate, submit, wait for the slot), and
//! [`BufTaskFuture`], the same owning the task's buffers.

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::slots::{HeldDesc, Slot, SlotState};
use super::waiters::Ticket;
use super::{DocaTask, TaskOutput, OUT_WORDS};
use crate::error::{Error, ErrorKind, Result};
use crate::executor::context::CtxRecord;
use crate::executor::local::Core;
use crate::sys;
use crate::trace::OpSpan;

/// A `DEBUG` event: operation `op` waits for a task of its context to be freed (see the
/// module documentation on back-pressure).
#[cold]
fn back_pressure(op: &'static str, ctx: &CtxRecord, why: &'static str) {
    crate::trace::event!(debug, { op = op, ctx = ctx.name(), outstanding = ctx.outstanding() }, "back-pressure: {why}");
}

/// What the allocation closure of [`DocaCtx::submit`](crate::executor::context::DocaCtx::submit)
/// gets: the user data to give the task and the slot's result area.
#[derive(Clone, Copy, Debug)]
pub struct TaskSlot {
    user_data: sys::doca_data,
    out: *mut u64,
    descs: *const [Cell<HeldDesc>; 2],
}

impl TaskSlot {
    /// The `doca_data` to pass as the task's user data (`*_alloc_init(..., user_data, ...)`).
    pub fn user_data(&self) -> sys::doca_data {
        self.user_data
    }

    /// A pointer to word `i` (< [`OUT_WORDS`]) of the slot's result area, for DOCA to write
    /// (`ret_val_ptr`, `fetched_val_ptr`). Stable and valid until the operation's future
    /// completes or, if the future is dropped, until DOCA completes the task. The word ends
    /// up in the future's [`TaskOutput`].
    ///
    /// # Panics
    /// If `i >= OUT_WORDS`.
    pub fn out_ptr(&self, i: usize) -> *mut u64 {
        assert!(i < OUT_WORDS, "out_ptr({i}): the result area has {OUT_WORDS} words");
        // SAFETY: in bounds (checked); the area is `OUT_WORDS` u64s.
        unsafe { self.out.add(i) }
    }

    /// Hands descriptor `buf` (taken from an inventory for this task, `i` < 2) to the slot,
    /// which gives it back when the task is over (see `Slot::descs`). The caller keeps the
    /// inventory alive until the operation's slot is released (its kept buffers).
    pub(crate) fn hold_desc(&self, i: usize, buf: *mut sys::doca_buf) {
        self.hold(i, HeldDesc::Owned(buf));
    }

    /// Records that descriptor `i` (< 2) of this task is lent by a cache whose "lent" flag
    /// is `lent`: the slot clears the flag when the task is over (see `Slot::descs`). The
    /// caller keeps the cache alive until the operation's slot is released (its kept
    /// buffers hold the memory the cache belongs to).
    pub(crate) fn hold_lent(&self, i: usize, lent: *const Cell<bool>) {
        self.hold(i, HeldDesc::Lent(lent));
    }

    fn hold(&self, i: usize, d: HeldDesc) {
        assert!(i < 2, "hold_desc({i}): a task holds at most two descriptors");
        // SAFETY: `descs` points into the slot of this operation, which is reserved (and at a
        // stable address) while its allocation closure runs. A `TaskSlot` is `Copy` and an
        // implementor of the public `AllocTask` may keep one, but this is `pub(crate)`: only
        // the crate's own allocations call it, from inside the allocation step. Slots are
        // only used through shared references (cells).
        let cell = unsafe { &(*self.descs)[i] };
        debug_assert!(matches!(cell.get(), HeldDesc::None), "descriptor {i} taken twice");
        cell.set(d);
    }
}

/// How an operation allocates (or re-initialises) its task: what [`TaskFuture`] calls at its
/// first poll, and again after each wait for a free task (back-pressure), until it returns
/// a task or fails.
///
/// Every `FnMut(&TaskSlot) -> Result<*mut K::Task, doca_error_t>` closure is one (the
/// allocation closure of [`DocaCtx::submit`](crate::executor::context::DocaCtx::submit)).
/// A named type implementing it gives the operation's future a name: the crate's RDMA
/// operations return named futures (for example
/// [`rdma::WriteFuture`](crate::rdma::WriteFuture)) whose request structs implement this
/// trait, where a closure would make the future's type unnameable.
///
/// `alloc` gives the task the slot's [`user_data`](TaskSlot::user_data) (and, if DOCA
/// writes results through a pointer, the slot's [`out_ptr`](TaskSlot::out_ptr)) and returns
/// it, not submitted; an error returns DOCA's code: `DOCA_ERROR_NO_MEMORY` while tasks of
/// the context are outstanding means "wait for a free task and call again".
pub trait AllocTask<K: DocaTask> {
    /// Allocates the task of the operation of `slot` (see the trait documentation).
    ///
    /// # Errors
    /// DOCA's code when no task could be allocated.
    fn alloc(&mut self, slot: &TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t>;
}

impl<K, F> AllocTask<K> for F
where
    K: DocaTask,
    F: FnMut(&TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t>,
{
    #[inline(always)]
    fn alloc(&mut self, slot: &TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t> {
        self(slot)
    }
}

enum Stage<T> {
    /// Not allocated yet (or waiting for a free task).
    Alloc,
    /// Allocated, not submitted (waiting for room in the submit queue).
    Submit(*mut T),
    /// Submitted; the slot says whether it completed.
    InFlight,
    /// The result was returned (or the future was abandoned).
    Finished,
}

/// The future of one DOCA task: allocate (waiting for a free task if the pool is
/// exhausted), submit (waiting for room if the queue is full), then wait for the completion
/// callback. Created by [`DocaCtx::submit`](crate::executor::context::DocaCtx::submit); resolves to the
/// slot's result area, or to an [`Error`] carrying DOCA's status and the operation's name.
///
/// The future is lazy: nothing is allocated or submitted before the first poll. It borrows
/// its context, so the context outlives it. Dropping it after submission does not cancel the
/// task (DOCA has no per-task cancel): the result is discarded when it arrives, and memory
/// the provider may write stays alive until then (see the module documentation).
#[must_use = "a DOCA operation does nothing unless awaited; once submitted, dropping it discards the result but cannot cancel the task"]
pub struct TaskFuture<'a, K: DocaTask, A> {
    core: Rc<Core>,
    ctx: Rc<CtxRecord>,
    /// The key of the operation's slot (its task's user data) ...
    slot: u64,
    /// ... and the slot itself, ours until `finish` or `abandon` release it (see
    /// `Slots::reserve`); `core` keeps the table alive.
    slot_ref: NonNull<Slot>,
    op: &'static str,
    stage: Stage<K::Task>,
    alloc: Option<A>,
    ticket: Ticket,
    /// The operation's `TRACE` span (see [`crate::trace`]): disabled, a `None` test.
    span: OpSpan,
    _ctx: PhantomData<&'a ()>,
}

// No field is structurally pinned (the closure is only called through `&mut`), so the
// future can be moved freely between polls.
impl<K: DocaTask, A> Unpin for TaskFuture<'_, K, A> {}

impl<'a, K: DocaTask, A> TaskFuture<'a, K, A> {
    #[inline(always)]
    pub(crate) fn new(core: Rc<Core>, ctx: Rc<CtxRecord>, op: &'static str, alloc: A) -> Self {
        let (slot, slot_ref) = core.slots.reserve();
        let span = OpSpan::new(op, ctx.name(), ctx.id());
        TaskFuture {
            core,
            ctx,
            slot,
            slot_ref,
            op,
            stage: Stage::Alloc,
            alloc: Some(alloc),
            ticket: None,
            span,
            _ctx: PhantomData,
        }
    }

    /// Names, in the operation's span, the connection it runs on (`conn`, an RDMA
    /// connection id) and its size in bytes.
    // Inlined so the future is built in place: a call returning it by value costs a copy of
    // the whole future (allocation closure included) per operation.
    #[inline(always)]
    pub fn traced(self, conn: Option<usize>, size: usize) -> Self {
        self.span.set_target(conn, size);
        self
    }

    /// The operation's slot. Only called before the slot is released (every stage but
    /// `Finished`).
    fn slot(&self) -> &Slot {
        debug_assert!(!matches!(self.stage, Stage::Finished));
        // SAFETY: `slot_ref` came from `Slots::reserve` of `self.core`'s table, which `core`
        // keeps alive and which never moves or frees a chunk while alive; the slot is ours
        // until `finish` or `abandon` releases it, and both leave the `Finished` stage, in
        // which this is not called. Slots are only used through shared references.
        unsafe { self.slot_ref.as_ref() }
    }

    fn task_slot(&self) -> TaskSlot {
        let (out, descs) = match self.stage {
            Stage::Finished => (std::ptr::null_mut(), std::ptr::null()),
            _ => (self.slot().out_ptr(), &self.slot().descs as *const _),
        };
        TaskSlot { user_data: sys::doca_data::from_u64(self.slot), out, descs }
    }

    /// The user data this operation's task carries (its slot key).
    pub fn user_data(&self) -> sys::doca_data {
        sys::doca_data::from_u64(self.slot)
    }

    /// See [`TaskSlot::out_ptr`].
    pub fn out_ptr(&self, i: usize) -> *mut u64 {
        self.task_slot().out_ptr(i)
    }

    /// Hands `buffers` (memory the task reads or writes) to the operation: they stay alive
    /// while DOCA may touch them, even if the future is dropped mid-flight, and are given
    /// back with the result.
    #[inline(always)]
    pub fn with_buffers<B: 'static>(self, buffers: B) -> BufTaskFuture<'a, K, A, B> {
        BufTaskFuture { inner: self, buffers: Some(buffers) }
    }

    fn finish(&mut self, r: Result<TaskOutput>) -> Poll<Result<TaskOutput>> {
        if !matches!(self.stage, Stage::Finished) {
            self.core.slots.release_slot(self.slot, self.slot());
        }
        self.stage = Stage::Finished;
        self.alloc = None;
        Poll::Ready(r)
    }

    fn err(&self, code: sys::doca_error_t, what: &str) -> Error {
        Error::from_doca(code, format!("{}: {what}", self.op))
    }

    /// Whether DOCA owns the task right now (submitted and not completed).
    fn in_flight(&self) -> bool {
        matches!(self.stage, Stage::InFlight) && self.slot().state.get() == SlotState::InFlight
    }

    /// Gives up the operation (the future is being dropped). In flight: the slot becomes
    /// orphaned and keeps `keep` alive until the completion. Otherwise everything is
    /// released now, an allocated but unsubmitted task first (before `keep`, which may hold
    /// memory the task references).
    fn abandon(&mut self, keep: Option<Box<dyn Any>>) {
        if matches!(self.stage, Stage::Finished) {
            drop(keep);
            return;
        }
        // SAFETY: as in `slot` (not `Finished`); the reference is not used after the slot
        // is released or handed to the callback (orphaned).
        let slot = unsafe { self.slot_ref.as_ref() };
        match std::mem::replace(&mut self.stage, Stage::Finished) {
            Stage::Finished => {}
            Stage::Alloc => self.core.slots.release_slot(self.slot, slot),
            Stage::Submit(task) => {
                // SAFETY: allocated, never submitted: still ours, and not used afterwards.
                unsafe { K::free(task) };
                self.ctx.task_freed();
                self.core.slots.release_slot(self.slot, slot);
            }
            Stage::InFlight => {
                if slot.state.get() == SlotState::InFlight {
                    slot.state.set(SlotState::Orphaned);
                    drop(slot.waker.take());
                    slot.keepalive.set(keep);
                    return;
                }
                // Completed but not polled: DOCA is done with everything.
                self.core.slots.release_slot(self.slot, slot);
            }
        }
        drop(keep);
    }
}

impl<K, A> TaskFuture<'_, K, A>
where
    K: DocaTask,
    A: AllocTask<K>,
{
    /// [`poll_op`](Self::poll_op) inside the operation's span, which records how it ended:
    /// the one poll of both [`TaskFuture`] and [`BufTaskFuture`]. The span is taken out of
    /// the future for the poll (polling needs the future mutably, the entered span borrows
    /// it) and put back: untraced, that moves a `None` (one word) each way. One call of
    /// `poll_op`, so that it is inlined into each future's `poll`.
    #[inline(always)]
    fn poll_spanned(&mut self, cx: &mut Context<'_>) -> Poll<Result<TaskOutput>> {
        if !self.span.is_recorded() {
            // Nobody traces (the common case): no span to move out, enter and put back.
            return self.poll_op(cx);
        }
        let span = self.span.take();
        let r = {
            let _entered = span.enter();
            self.poll_op(cx)
        };
        if let Poll::Ready(r) = &r {
            span.finish(r);
        }
        self.span = span;
        r
    }

    fn poll_op(&mut self, cx: &mut Context<'_>) -> Poll<Result<TaskOutput>> {
        loop {
            match self.stage {
                Stage::Finished => {
                    return Poll::Ready(Err(Error::new(
                        ErrorKind::BadState,
                        format!("{}: operation future polled after completion", self.op),
                    )))
                }
                Stage::Alloc => {
                    if !self.ctx.is_alive() {
                        let e = Error::new(ErrorKind::BadState, format!("{}: context destroyed", self.op));
                        return self.finish(Err(e));
                    }
                    let slot = self.task_slot();
                    let alloc = self.alloc.as_mut().expect("allocation closure present until allocated");
                    let r = alloc.alloc(&slot);
                    if r.is_err() {
                        // Nothing allocated: give back the descriptors the closure took
                        // before waiting or failing.
                        self.slot().release_descs();
                    }
                    match r {
                        Ok(task) if !task.is_null() => {
                            self.ctx.task_allocated();
                            self.alloc = None;
                            self.stage = Stage::Submit(task);
                        }
                        Ok(_) => {
                            let e = self.err(sys::DOCA_ERROR_UNEXPECTED, "allocate: null task");
                            return self.finish(Err(e));
                        }
                        Err(sys::DOCA_ERROR_NO_MEMORY) if self.ctx.outstanding() > 0 => {
                            // Pool exhausted by tasks that will be freed: wait for one.
                            back_pressure(self.op, &self.ctx, "task pool exhausted");
                            self.ctx.task_waiters.register(&mut self.ticket, cx.waker());
                            return Poll::Pending;
                        }
                        Err(rc) => {
                            let e = self.err(rc, "allocate task");
                            return self.finish(Err(e));
                        }
                    }
                }
                Stage::Submit(task) => {
                    // The slot is marked in flight before the call, so that a completion
                    // delivered from inside submit (DOCA delivers them from progress, but a
                    // provider that did otherwise) still finds it.
                    self.slot().state.set(SlotState::InFlight);
                    // The fast path: many tasks complete at once (the completion is queued
                    // at submit and delivered by the next progress); when this poll may
                    // progress the PE, it collects the completion now rather than return
                    // Pending and be woken and polled again, and then the doorbell is rung
                    // with the submit. Otherwise the doorbell is deferred to the next
                    // progress, which rings all the turn's doorbells at once.
                    let inline = self.core.take_inline_progress();
                    // SAFETY: `task` is a live task of kind K of this ctx that we allocated and
                    // still own. A deferred doorbell is rung before the PE is next progressed.
                    let rc = unsafe {
                        if inline {
                            self.core.submit_now(K::as_task(task))
                        } else {
                            self.core.submit_deferred(&self.ctx, K::as_task(task))
                        }
                    };
                    match rc {
                        sys::DOCA_SUCCESS => {
                            // DOCA owns the task now; the slot receives its completion.
                            self.stage = Stage::InFlight;
                            if inline {
                                // The slot's waker is not set yet, so the callback wakes
                                // nobody. Either way the InFlight stage below decides.
                                let slot = self.slot();
                                self.core.progress_inline(|| slot.state.get() == SlotState::Done);
                            }
                        }
                        rc => {
                            // Not submitted: the task is still ours, the slot is not in flight.
                            self.slot().state.set(SlotState::Reserved);
                            if matches!(rc, sys::DOCA_ERROR_AGAIN | sys::DOCA_ERROR_NO_MEMORY)
                                && self.ctx.outstanding() > 1
                            {
                                // Queue full of other tasks that will complete: wait for one.
                                back_pressure(self.op, &self.ctx, "submit queue full");
                                self.ctx.task_waiters.register(&mut self.ticket, cx.waker());
                                return Poll::Pending;
                            }
                            // A failed submit leaves the task with us: free it.
                            // SAFETY: we own the unsubmitted task; not used afterwards.
                            unsafe { K::free(task) };
                            // The task is gone, the slot is still ours (released by `finish`).
                            self.stage = Stage::Alloc;
                            self.ctx.task_freed();
                            let e = self.err(rc, "submit");
                            return self.finish(Err(e));
                        }
                    }
                }
                Stage::InFlight => {
                    let slot = self.slot();
                    if slot.state.get() == SlotState::Done {
                        let status = slot.status.get();
                        // SAFETY: `Done`: DOCA no longer writes the area.
                        let out = unsafe { *slot.out.get() };
                        let r =
                            if status == sys::DOCA_SUCCESS { Ok(out) } else { Err(Error::from_doca(status, self.op)) };
                        return self.finish(r);
                    }
                    let stale = slot.waker.take();
                    match stale {
                        Some(w) if w.will_wake(cx.waker()) => slot.waker.set(Some(w)),
                        _ => slot.waker.set(Some(cx.waker().clone())),
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<K, A> Future for TaskFuture<'_, K, A>
where
    K: DocaTask,
    A: AllocTask<K>,
{
    type Output = Result<TaskOutput>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<TaskOutput>> {
        self.get_mut().poll_spanned(cx)
    }
}

impl<K: DocaTask, A> Drop for TaskFuture<'_, K, A> {
    fn drop(&mut self) {
        self.abandon(None);
    }
}

impl<K: DocaTask, A> fmt::Debug for TaskFuture<'_, K, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match self.stage {
            Stage::Alloc => "alloc",
            Stage::Submit(_) => "submit",
            Stage::InFlight => "in flight",
            Stage::Finished => "finished",
        };
        f.debug_struct("TaskFuture").field("op", &self.op).field("slot", &self.slot).field("stage", &stage).finish()
    }
}

/// A [`TaskFuture`] that owns the buffers of its task (see [`TaskFuture::with_buffers`]);
/// resolves to `(result, buffers)`, the pattern of completion-based I/O.
#[must_use = "a DOCA operation does nothing unless awaited; once submitted, dropping it discards the result but cannot cancel the task"]
pub struct BufTaskFuture<'a, K: DocaTask, A, B: 'static> {
    inner: TaskFuture<'a, K, A>,
    buffers: Option<B>,
}

impl<K: DocaTask, A, B: 'static> Unpin for BufTaskFuture<'_, K, A, B> {}

impl<K: DocaTask, A, B: 'static> BufTaskFuture<'_, K, A, B> {
    /// Whether the task has been handed to DOCA (or the operation is over): from then on its
    /// place in the context's submission order is fixed. Layers that must submit several
    /// operations in a given order poll each until this holds before creating the next.
    pub(crate) fn submitted(&self) -> bool {
        matches!(self.inner.stage, Stage::InFlight | Stage::Finished)
    }
}

impl<K, A, B> Future for BufTaskFuture<'_, K, A, B>
where
    K: DocaTask,
    A: AllocTask<K>,
    B: 'static,
{
    type Output = (Result<TaskOutput>, B);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.inner.poll_spanned(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                let b = this.buffers.take().expect("BufTaskFuture polled after completion");
                Poll::Ready((r, b))
            }
        }
    }
}

impl<K: DocaTask, A, B: 'static> Drop for BufTaskFuture<'_, K, A, B> {
    fn drop(&mut self) {
        let Some(b) = self.buffers.take() else { return };
        if self.inner.in_flight() {
            // DOCA may still touch the buffers: the slot keeps them until the completion.
            self.inner.abandon(Some(Box::new(b)));
        } else {
            // Frees an unsubmitted task before the memory it references.
            self.inner.abandon(None);
            drop(b);
        }
    }
}

impl<K: DocaTask, A, B: 'static> fmt::Debug for BufTaskFuture<'_, K, A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufTaskFuture").field("inner", &self.inner).finish_non_exhaustive()
    }
}
