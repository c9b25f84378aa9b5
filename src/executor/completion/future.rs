//! [`TaskFuture`]: one DOCA task as a future (allocate, submit, wait for the slot), and
//! [`BufTaskFuture`], the same owning the task's buffers.

use std::any::Any;
use std::ffi::c_void;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::submission::Submission;
use super::waiters::Ticket;
use super::{DocaTask, TaskOutput, OUT_WORDS};
use crate::error::{Error, ErrorKind, Result};
use crate::executor::context::CtxRecord;
use crate::executor::local::{Core, INLINE_PROGRESS};
use crate::mem::descriptors::TaskDescs;
use crate::sys;
use crate::trace::OpSpan;

/// What the allocation closure of [`DocaCtx::submit`](crate::executor::context::DocaCtx::submit)
/// gets: the user data to give the task and the slot's result area.
#[derive(Clone, Copy, Debug)]
pub struct TaskSlot {
    user_data: sys::doca_data,
    out: *mut u64,
    descs: *const TaskDescs,
    /// The task of a held record, to re-initialise rather than allocate (see
    /// [`held_task`](TaskSlot::held_task)); null for a slot.
    held: *mut c_void,
}

impl TaskSlot {
    /// A slot's view for an allocation: `out` its result area, `descs` its descriptor cells
    /// (both null for an operation that has no slot any more).
    pub(super) fn new(user_data: sys::doca_data, out: *mut u64, descs: *const TaskDescs) -> TaskSlot {
        TaskSlot { user_data, out, descs, held: std::ptr::null_mut() }
    }

    /// A held record's view for an allocation (see the `held_op` module): its user data and
    /// result area, the operation's descriptors, and the record's task (null when it has
    /// none yet), which the allocation re-initialises instead of allocating one.
    pub(super) fn held(
        user_data: sys::doca_data,
        out: *mut u64,
        descs: *const TaskDescs,
        task: *mut c_void,
    ) -> TaskSlot {
        TaskSlot { user_data, out, descs, held: task }
    }

    /// The held task the allocation must re-initialise (it already carries this view's user
    /// data), or null: allocate (or take a kept task). Only for the kind `K` the operation
    /// is of: a held record's task is of its group's kind.
    #[inline(always)]
    pub(crate) fn held_task<K: DocaTask>(&self) -> *mut K::Task {
        self.held.cast()
    }

    /// The `doca_data` to pass as the task's user data (`*_alloc_init(..., user_data, ...)`).
    #[inline]
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
    #[inline]
    pub fn out_ptr(&self, i: usize) -> *mut u64 {
        assert!(i < OUT_WORDS, "out_ptr({i}): the result area has {OUT_WORDS} words");
        // SAFETY: in bounds (checked); the area is `OUT_WORDS` u64s.
        unsafe { self.out.add(i) }
    }

    /// The descriptors of this task (its slot's, or its held record's), which the
    /// allocation takes with [`Descs`](crate::mem::descriptors::Descs): given back when the
    /// task is over (see `mem::descriptors`). The caller keeps the inventory and memory they
    /// come from alive until then (its kept buffers).
    #[inline(always)]
    pub(crate) fn descs(&self) -> &TaskDescs {
        // SAFETY: `descs` points into the slot (or the held record) of this operation, at a
        // stable address while its allocation runs. A `TaskSlot` is `Copy` and an implementor
        // of the public `AllocTask` may keep one, but this is `pub(crate)`: only the crate's
        // own allocations call it, from inside the allocation step. The descriptors are only
        // used through shared references (cells).
        unsafe { &*self.descs }
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
    /// Borrowed from the [`DocaCtx`](crate::executor::context::DocaCtx) for `'a` (which
    /// owns both): no reference count to touch per operation. Only
    /// [`submit_owned`](crate::executor::context::DocaCtx::submit_owned) makes a future that
    /// outlives the borrow, under its caller's promise to keep both alive.
    core: &'a Core,
    ctx: &'a CtxRecord,
    /// The operation's way to DOCA and its slot; `None` once the result was returned (or
    /// the operation failed) and the slot released.
    sub: Option<Submission<K>>,
    op: &'static str,
    alloc: Option<A>,
    ticket: Ticket,
    /// The operation's `TRACE` span (see [`crate::trace`]): disabled, a `None` test.
    span: OpSpan,
}

// No field is structurally pinned (the closure is only called through `&mut`), so the
// future can be moved freely between polls.
impl<K: DocaTask, A> Unpin for TaskFuture<'_, K, A> {}

impl<'a, K: DocaTask, A> TaskFuture<'a, K, A> {
    #[inline(always)]
    pub(crate) fn new(core: &'a Core, ctx: &'a CtxRecord, op: &'static str, alloc: A) -> Self {
        let sub = Some(Submission::reserve(core));
        let span = OpSpan::new(op, ctx.name(), ctx.id());
        TaskFuture { core, ctx, sub, op, alloc: Some(alloc), ticket: None, span }
    }

    /// [`new`](TaskFuture::new), [`traced`](TaskFuture::traced) and
    /// [`with_buffers`](TaskFuture::with_buffers) in one: the future built in one struct
    /// expression, in place in the caller's frame. Chained, each step returned the future
    /// by value and the caller copied it (200-odd bytes) at every step.
    #[inline(always)]
    pub(crate) fn with_buffers_traced<B: 'static>(
        core: &'a Core,
        ctx: &'a CtxRecord,
        op: &'static str,
        alloc: A,
        conn: Option<usize>,
        size: usize,
        buffers: B,
    ) -> BufTaskFuture<'a, K, A, B> {
        let sub = Some(Submission::reserve(core));
        let span = OpSpan::new(op, ctx.name(), ctx.id());
        span.set_target(conn, size);
        BufTaskFuture {
            inner: TaskFuture { core, ctx, sub, op, alloc: Some(alloc), ticket: None, span },
            buffers: Some(buffers),
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

    fn task_slot(&self) -> TaskSlot {
        match &self.sub {
            Some(s) => s.slot().task_slot(),
            None => TaskSlot::new(sys::doca_data::from_u64(0), std::ptr::null_mut(), std::ptr::null()),
        }
    }

    /// The user data this operation's task carries (its slot key).
    pub fn user_data(&self) -> sys::doca_data {
        self.task_slot().user_data()
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

    /// Ends a failed operation: releases its slot (freeing an allocated, unsubmitted task);
    /// returns the error.
    #[cold]
    fn fail(&mut self, e: Error) -> Error {
        if let Some(sub) = self.sub.take() {
            sub.into_slot(self.ctx).release(self.core);
        }
        self.alloc = None;
        e
    }

    /// Whether DOCA owns the task right now (submitted and not completed).
    fn in_flight(&self) -> bool {
        self.sub.as_ref().is_some_and(|s| s.submitted() && s.slot().in_flight())
    }

    /// Gives up the operation (the future is being dropped). In flight: the slot becomes
    /// orphaned and keeps `keep` alive until the completion. Otherwise everything is
    /// released now, an allocated but unsubmitted task first (before `keep`, which may hold
    /// memory the task references).
    #[inline]
    fn abandon(&mut self, keep: Option<Box<dyn Any>>) {
        match self.sub.take() {
            Some(sub) => sub.into_slot(self.ctx).abandon(self.core, keep),
            None => drop(keep),
        }
    }
}

impl<K, A> TaskFuture<'_, K, A>
where
    K: DocaTask,
    A: AllocTask<K>,
{
    /// [`poll_op`](Self::poll_op) inside the operation's span ([`OpSpan::poll_within`]):
    /// the one poll of both [`TaskFuture`] and [`BufTaskFuture`].
    #[inline(always)]
    fn poll_spanned(&mut self, cx: &mut Context<'_>) -> Poll<Result<TaskOutput>> {
        if !self.span.is_recorded() {
            // Nobody traces (the common case): the poll itself. (Left to `poll_within`, the
            // closure went out of line: +89 instructions per `op_cost sync`.)
            return self.poll_op(cx);
        }
        OpSpan::poll_within(self, |f| &mut f.span, |f| f.poll_op(cx))
    }

    /// The operation's steps (see [`Submission`]) and the collection of its result.
    #[inline(always)]
    fn poll_op(&mut self, cx: &mut Context<'_>) -> Poll<Result<TaskOutput>> {
        match self.poll_completion(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                let sub = self.sub.take().expect("a completed operation has its slot");
                Poll::Ready(sub.into_slot(self.ctx).take_output(self.core, self.op))
            }
        }
    }

    /// The operation's steps up to its completion: `Ready(Ok(()))` once the completion is in
    /// the slot (which [`poll_op`](Self::poll_op) then reads and releases), `Ready(Err)` when
    /// the operation failed (its slot released). Out of line, it returns one word: returning
    /// the result area (a 40-byte `Result<TaskOutput>`) went through memory, stored here and
    /// loaded back by the caller at once, and an operation whose result area holds nothing
    /// (a write, a send) copied it for nothing.
    fn poll_completion(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let Some(sub) = self.sub.as_mut() else {
            return Poll::Ready(Err(Error::new(
                ErrorKind::BadState,
                format!("{}: operation future polled after completion", self.op),
            )));
        };
        let submitted_now = !sub.submitted();
        if submitted_now {
            let alloc = self.alloc.as_mut().expect("allocation present until submitted");
            // The fast path: many tasks complete at once (the completion is queued at
            // submit and delivered by the next progress); when this poll may progress the
            // PE, it collects the completion now rather than return Pending and be woken
            // and polled again, and then the doorbell is rung with the submit. Otherwise
            // the doorbell is deferred to the next progress, which rings all the turn's
            // doorbells at once.
            match sub.poll_submit(self.core, self.ctx, self.op, alloc, &mut self.ticket, cx, true) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(self.fail(e))),
                Poll::Ready(Ok(inline)) => {
                    self.alloc = None;
                    if inline {
                        // The slot's waker is not set yet, so the callback wakes nobody.
                        let slot = sub.slot();
                        self.core.progress_inline(INLINE_PROGRESS, || slot.is_done());
                    }
                }
            }
        }
        let slot = sub.slot();
        // Still in flight: wait here if the executor would only spin for it (before the
        // waker is registered, so that the completion wakes nobody; see `Core::spin_inline`).
        // A receive or a wait (`DocaTask::POSTED_AHEAD`) only where the executor's earlier
        // spins for such waits did not run out: its task may be about to send what
        // completes it, or poll it among others (`join!`, `select!`).
        let done = || slot.is_done();
        let waited = !done() && self.core.spin_inline_for(K::REMOTE, K::POSTED_AHEAD, submitted_now, done);
        if !waited && slot.poll_done(self.core, cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

impl<K, A> Future for TaskFuture<'_, K, A>
where
    K: DocaTask,
    A: AllocTask<K>,
{
    type Output = Result<TaskOutput>;

    // Always inlined into the caller's `.await`, like `BufTaskFuture`'s.
    #[inline(always)]
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
        let stage = match &self.sub {
            None => "finished",
            Some(s) if s.submitted() => "submitted",
            Some(_) => "not submitted",
        };
        let slot = self.sub.as_ref().map(|s| s.slot().key());
        f.debug_struct("TaskFuture").field("op", &self.op).field("slot", &slot).field("stage", &stage).finish()
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
        self.inner.sub.as_ref().is_none_or(Submission::submitted)
    }
}

impl<K, A, B> Future for BufTaskFuture<'_, K, A, B>
where
    K: DocaTask,
    A: AllocTask<K>,
    B: 'static,
{
    type Output = (Result<TaskOutput>, B);

    // Always inlined into the caller's `.await`: out of line, its output (the result area and
    // the buffers, 96 bytes for a write) came back through memory, stored here and loaded back
    // by the caller at once, wider than it was stored, which stalls the loads (docs/cost.md,
    // "Fifteenth session"). The out-of-line part is `poll_completion`, which returns a word.
    #[inline(always)]
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
    // Inlined into the drop glue: a future that is over has no buffers, and the call with
    // its register saves to learn that cost every operation 8 instructions (`op_cost`).
    #[inline]
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
