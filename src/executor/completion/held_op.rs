//! [`HeldOp`]: one operation as a future on a held task of its owner, and [`HeldPool`], the
//! owner's idle held tasks. What an RDMA connection's `write`, `read`, `send` and atomics
//! return.
//!
//! A [`TaskFuture`](super::TaskFuture) reserves a completion slot per operation, re-initialises
//! a task its context kept (every field, its user data and connection included) or allocates
//! one, and at the completion finds the slot and the context by key and keeps the task on
//! the context again. An operation on a held task does none of that: its owner (a
//! connection) keeps, per task kind, one-record [`HeldGroup`]s whose task stays bound to the
//! record, its user data naming the record and its connection set. An operation takes an
//! idle group from the pool, points the task at its buffers with the kind's setters, submits
//! it, and the completion callback writes the record directly
//! ([`on_held_completion`](super::held)). The group goes back to the pool with its task when
//! the result is taken. `examples/op_cost`: a write 1 146 instructions through a slot,
//! see docs/cost.md for the held figure.
//!
//! The steps and waits are those of a slot's operation (`Submission`):
//!
//! | step | on a held task |
//! | --- | --- |
//! | reserve | an idle group of the kind from the pool (a new one when none is idle) |
//! | allocate | the group's task re-initialised by the request ([`AllocTask`], `TaskSlot::held`); without one (first use, given back by `reclaim_idle`, freed after a failure) a kept or fresh task |
//! | pool spent | the context's idle tasks reclaimed and the allocation retried; else wait for a task while others are outstanding; else the error |
//! | submit | with its doorbell when this poll progresses inline or the operation is alone, else deferred; a full queue waits (keeping the prepared task) |
//! | collect | status and result area from the record; the group back to the pool |
//! | drop in flight | the group is abandoned ([`HeldGroup::abandon`]) with the buffers and the pool's anchor: the completion gives back the descriptors, frees the task and then drops them |
//!
//! The descriptors of an operation are held by its record
//! ([`TaskDescs`](crate::mem::descriptors::TaskDescs)) and given back by
//! the completion, before the context's waiters are woken, as a slot's are, except the loans
//! of its memory's caches, which the record parks: its next operation on the same bytes
//! takes them again and leaves the task's buffers as they are (`mem::descriptors`).

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use super::held::{HeldGroup, HeldRecord, HeldState};
use super::submission::{back_pressure, poll_allocate};
use super::waiters::Ticket;
use super::{AllocTask, DocaTask, TaskOutput, TaskSlot, REUSE_KINDS};
use crate::error::{Error, ErrorKind, Result};
use crate::executor::context::CtxRecord;
use crate::executor::local::{Core, INLINE_PROGRESS};
use crate::sys;
use crate::trace::OpSpan;

/// How a [`HeldOp`] prepares its task: an [`AllocTask`] that also sees the buffers the
/// operation owns, so that the descriptors it points the task at are made from them at each
/// try rather than carried in the future (an RDMA request is then its target and operands
/// only). Every [`AllocTask`] closure is one (it ignores the buffers).
pub(crate) trait HeldRequest<K: DocaTask, B> {
    /// Re-initialises `slot`'s held task for the operation over `buffers` (or allocates
    /// one), as [`AllocTask::alloc`].
    fn prepare(&mut self, slot: &TaskSlot, buffers: &B) -> std::result::Result<*mut K::Task, sys::doca_error_t>;
}

impl<K, B, F> HeldRequest<K, B> for F
where
    K: DocaTask,
    F: FnMut(&TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t>,
{
    #[inline(always)]
    fn prepare(&mut self, slot: &TaskSlot, _: &B) -> std::result::Result<*mut K::Task, sys::doca_error_t> {
        self(slot)
    }
}

/// The idle held tasks of one owner (an RDMA connection) on one context: per task kind
/// (indexed by the kind's [`DocaTask::REUSE`]), the group given back last and a free list of
/// the others. A group is made the first time none is idle, so the pool grows to the
/// owner's largest number of operations of a kind in flight at once, and no further.
pub(crate) struct HeldPool {
    ctx: Rc<CtxRecord>,
    /// What an abandoned operation keeps alive besides its buffers: the inventory its
    /// descriptors come from.
    anchor: Rc<dyn Any>,
    kinds: [IdleGroups; REUSE_KINDS],
}

/// The idle groups of one kind. One operation at a time (a loop of `.await`s) takes and
/// gives back the same group through `last`, without the list.
#[derive(Default)]
struct IdleGroups {
    last: Cell<Option<Rc<HeldGroup>>>,
    more: RefCell<Vec<Rc<HeldGroup>>>,
}

impl HeldPool {
    /// An empty pool for operations on `ctx`; `anchor` (the inventory the operations'
    /// descriptors come from) is kept by an operation dropped in flight until its completion.
    pub(crate) fn new(ctx: &Rc<CtxRecord>, anchor: Rc<dyn Any>) -> HeldPool {
        HeldPool { ctx: ctx.clone(), anchor, kinds: std::array::from_fn(|_| IdleGroups::default()) }
    }

    /// Kind `K`'s idle groups.
    #[inline(always)]
    fn of<K: DocaTask>(&self) -> &IdleGroups {
        match K::REUSE {
            Some(i) => &self.kinds[i],
            None => panic!("an operation on a held task needs a kind with a REUSE index"),
        }
    }

    /// An idle group of kind `K` (its task re-initialised by the next operation), or a new
    /// one without a task.
    #[inline(always)]
    fn take<K: DocaTask>(&self) -> Rc<HeldGroup> {
        match self.of::<K>().last.take() {
            Some(g) => g,
            None => self.take_more::<K>(),
        }
    }

    #[cold]
    #[inline(never)]
    fn take_more<K: DocaTask>(&self) -> Rc<HeldGroup> {
        let idle = self.of::<K>().more.borrow_mut().pop();
        idle.unwrap_or_else(|| HeldGroup::for_ops::<K>(&self.ctx, 1))
    }

    /// Gives back group `g` of kind `K`, idle (its task, if any, DOCA does not own).
    #[inline(always)]
    fn give<K: DocaTask>(&self, g: Rc<HeldGroup>) {
        debug_assert!(g.state(0) == HeldState::Idle);
        let idle = self.of::<K>();
        if let Some(other) = idle.last.replace(Some(g)) {
            self.give_more(idle, other);
        }
    }

    #[cold]
    #[inline(never)]
    fn give_more(&self, idle: &IdleGroups, g: Rc<HeldGroup>) {
        idle.more.borrow_mut().push(g);
    }

    /// Gives back group `g` of kind `K` from an operation that ended without collecting a
    /// completion (it failed, or its future was dropped while not in flight): the descriptors
    /// a prepared task still holds go back first, before the memory they describe.
    fn give_unused<K: DocaTask>(&self, g: Rc<HeldGroup>) {
        g.first().descs().release();
        self.give::<K>(g);
    }

    /// Drops every idle group, giving their tasks back (see `HeldGroup`'s drop). The owner
    /// calls it before it goes, so that the tasks are freed while their connection exists.
    pub(crate) fn clear(&self) {
        for idle in &self.kinds {
            drop(idle.last.take());
            let more = std::mem::take(&mut *idle.more.borrow_mut());
            drop(more);
        }
    }

    /// Idle groups of kind `K`, and how many of them have a task (the tests' view).
    #[cfg(test)]
    pub(crate) fn idle_of<K: DocaTask>(&self) -> (usize, usize) {
        let idle = self.of::<K>();
        let last = idle.last.take();
        let more = idle.more.borrow();
        let groups = last.iter().chain(more.iter());
        let n = (groups.clone().count(), groups.filter(|g| !g.task(0).is_null()).count());
        drop(more);
        idle.last.set(last);
        n
    }
}

impl fmt::Debug for HeldPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut idle = 0;
        for k in &self.kinds {
            let last = k.last.take();
            idle += usize::from(last.is_some()) + k.more.borrow().len();
            k.last.set(last);
        }
        f.debug_struct("HeldPool").field("ctx", &self.ctx.name()).field("idle", &idle).finish()
    }
}

/// Where a [`HeldOp`] (or an operation on a window's record) is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stage {
    /// Nothing prepared: the group's task (if it has a group and the group a task) is not
    /// re-initialised for this operation yet, and no descriptor is held.
    Start,
    /// The task is re-initialised and its descriptors held; not submitted (waiting for room).
    Prepared,
    /// Submitted: DOCA owns the task (or completed it: the record says which).
    InFlight,
    /// The result was returned (or the operation failed); the group is back in the pool.
    Over,
}

/// What an operation dropped in flight leaves to its group until the completion: the pool's
/// anchor (the inventory of its descriptors) and its buffers. The completion gives the
/// descriptors back before it drops this.
type Abandoned<B> = (Rc<dyn Any>, Option<B>);

/// One operation of kind `K` on a held task of `pool`'s owner, with request `A` and the
/// caller's buffers `B` (see the module documentation): resolves to `(result, buffers)`.
///
/// Lazy: nothing is taken, allocated or submitted before the first poll. It borrows the pool
/// and the executor (their owner outlives it). Dropped in flight, it leaves its buffers to
/// its group until DOCA is done with them; the task is not cancelled.
#[must_use = "a DOCA operation does nothing unless awaited; once submitted, dropping it discards the result but cannot cancel the task"]
pub struct HeldOp<'a, K: DocaTask, A, B: 'static> {
    core: &'a Core,
    pool: &'a HeldPool,
    /// The group taken from the pool at the first poll; `None` before and once over.
    group: Option<Rc<HeldGroup>>,
    stage: Stage,
    op: &'static str,
    alloc: A,
    ticket: Ticket,
    span: OpSpan,
    buffers: Option<B>,
    _kind: PhantomData<K>,
}

// No field is structurally pinned: the request is only called through `&mut`, and nothing
// points into the future (the descriptors are held by the record).
impl<K: DocaTask, A, B: 'static> Unpin for HeldOp<'_, K, A, B> {}

impl<'a, K: DocaTask, A, B: 'static> HeldOp<'a, K, A, B> {
    /// The operation `op` of kind `K` on `pool` (of `core`'s executor), allocating with
    /// `alloc` and owning `buffers`; `conn` and `size` name its connection and bytes in its
    /// span. Inlined so the future is built where the caller keeps it.
    #[inline(always)]
    pub(crate) fn new(
        core: &'a Core,
        pool: &'a HeldPool,
        op: &'static str,
        alloc: A,
        conn: Option<usize>,
        size: usize,
        buffers: B,
    ) -> Self {
        let span = OpSpan::new(op, pool.ctx.name(), pool.ctx.id());
        span.set_target(conn, size);
        HeldOp {
            core,
            pool,
            group: None,
            stage: Stage::Start,
            op,
            alloc,
            ticket: None,
            span,
            buffers: Some(buffers),
            _kind: PhantomData,
        }
    }

    /// Ends a failed operation: its descriptors given back, its group (with its task, if any:
    /// DOCA never had it this time) back to the pool. Returns the error.
    #[cold]
    fn fail(&mut self, e: Error) -> Error {
        self.stage = Stage::Over;
        if let Some(g) = self.group.take() {
            self.pool.give_unused::<K>(g);
        }
        e
    }
}

/// Prepares held record `rec`'s task for an operation `op` of kind `K` on `ctx`: `alloc`
/// re-initialises the task the record has, or allocates one (a kept or fresh task, which the
/// record then keeps). `Ready(Ok)` once prepared, `Pending` while waiting for a task
/// (`ticket` is the operation's place among the context's waiters), `Ready(Err)` on failure
/// (see `submission::poll_allocate`).
#[inline(always)]
fn poll_prepare<K: DocaTask, A: AllocTask<K>>(
    rec: &HeldRecord,
    ctx: &CtxRecord,
    op: &'static str,
    alloc: &mut A,
    ticket: &mut Ticket,
    cx: &mut Context<'_>,
) -> Poll<Result<()>> {
    // The view is made at each try: a retry after `pool_spent` may find the record's task
    // given back by `reclaim_idle`.
    let allocate = || {
        let slot = TaskSlot::held(rec.user_data(), rec.out_ptr(), rec.descs(), rec.task());
        let r = alloc.alloc(&slot);
        if r.is_err() {
            // Nothing prepared: give back the descriptors the allocation took before
            // waiting, failing or trying again.
            rec.descs().release();
        }
        r
    };
    let task = ready!(poll_allocate(ctx, op, ticket, cx, allocate))?;
    if rec.task().is_null() {
        // SAFETY: a task of kind K on the group's context, just allocated (or a kept one
        // re-initialised) with the record's user data, nobody else's; the record has none.
        unsafe { rec.set_task(task.cast(), K::as_task(task)) };
    }
    Poll::Ready(Ok(()))
}

/// Prepares record `rec` of `group` (on context `ctx`, alive) for an operation `op` of kind
/// `K` with request `alloc`, unless `stage` says it is prepared, and submits it; `stage`
/// follows (`Start`, `Prepared`, `InFlight`). `Ready(Ok(inline))` once DOCA has it
/// (`inline`: the caller must progress the PE now); `Pending` while waiting for a task or for
/// room (`ticket` is the caller's place among the context's waiters); `Ready(Err)` on
/// failure, the record's descriptors given back. `may_progress` as for
/// `Submission::poll_submit`: false (a window), the doorbell is always deferred.
///
/// What [`HeldOp`] and a window's lanes (`rdma::window`) do to submit.
#[inline(always)]
// Each argument is borrowed from a different owner (the executor, the context, the group,
// the caller's future or window), so there is no struct to pass instead.
#[allow(clippy::too_many_arguments)]
pub(crate) fn poll_submit_record<K: DocaTask, A: AllocTask<K>>(
    core: &Core,
    ctx: &CtxRecord,
    group: &HeldGroup,
    rec: &HeldRecord,
    stage: &mut Stage,
    op: &'static str,
    alloc: &mut A,
    ticket: &mut Ticket,
    cx: &mut Context<'_>,
    may_progress: bool,
) -> Poll<Result<bool>> {
    if *stage == Stage::Prepared && rec.task().is_null() {
        // Given back (`reclaim_idle`) while this operation waited for room: prepare
        // again, descriptors included.
        rec.descs().release();
        *stage = Stage::Start;
    }
    if *stage == Stage::Start {
        ready!(poll_prepare::<K, A>(rec, ctx, op, alloc, ticket, cx))?;
        *stage = Stage::Prepared;
    }
    // A remote kind's answer is another processor's work: never progressed inline, always
    // rung when it may be (see `Submission::poll_submit`).
    let inline = may_progress && !K::REMOTE && core.take_inline_progress();
    let ring = inline || (may_progress && (K::REMOTE || core.submit_would_be_alone()));
    // SAFETY: the record is idle and has a task of the group's kind (checked above),
    // re-initialised for this operation by the request.
    match unsafe { group.submit(core, rec, ring) } {
        sys::DOCA_SUCCESS => {
            *stage = Stage::InFlight;
            Poll::Ready(Ok(inline))
        }
        // The queue is full of tasks that will complete: wait for one, keeping the
        // prepared task.
        sys::DOCA_ERROR_AGAIN | sys::DOCA_ERROR_NO_MEMORY if ctx.outstanding() > 0 => {
            back_pressure(op, ctx, "submit queue full");
            ctx.task_waiters.register(ticket, cx.waker());
            Poll::Pending
        }
        sys::DOCA_ERROR_BAD_STATE if ctx.restart_pending() => {
            // Stopped by a failed task: prepare again once the context restarted.
            rec.descs().release();
            group.give_back_task(rec);
            *stage = Stage::Start;
            back_pressure(op, ctx, "context restarting after a failed task");
            ctx.task_waiters.register(ticket, cx.waker());
            Poll::Pending
        }
        rc => {
            // Refused: the task is still ours, and is given back rather than kept (a
            // refusal may leave it in a state DOCA did not expect).
            rec.descs().release();
            group.give_back_task(rec);
            *stage = Stage::Start;
            Poll::Ready(Err(Error::from_doca(rc, format!("{op}: submit"))))
        }
    }
}

impl<K: DocaTask, A: HeldRequest<K, B>, B: 'static> HeldOp<'_, K, A, B> {
    /// Takes a group, prepares its task and submits it. `Ready(Ok(inline))` once DOCA has
    /// it (`inline`: this poll must progress the PE now, see `Submission::poll_submit`);
    /// `Pending` while waiting for a task or for room; `Ready(Err)` on failure.
    #[inline(always)]
    fn poll_submit(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool>> {
        let HeldOp { core, pool, group, stage, op, alloc, ticket, buffers, .. } = self;
        let (core, pool, op) = (*core, *pool, *op);
        let ctx = &*pool.ctx;
        if !ctx.is_alive() {
            return Poll::Ready(Err(ctx.destroyed(op)));
        }
        let group = &**group.get_or_insert_with(|| pool.take::<K>());
        let buffers = buffers.as_ref().expect("an operation owns its buffers until it is over");
        let mut prepare = |slot: &TaskSlot| alloc.prepare(slot, buffers);
        poll_submit_record::<K, _>(core, ctx, group, group.first(), stage, op, &mut prepare, ticket, cx, true)
    }

    /// The operation's steps up to its completion: `Ready(Ok(()))` once the record is done,
    /// `Ready(Err)` when the operation failed (its group given back). Out of line, returning
    /// one word (as `TaskFuture::poll_completion`).
    fn poll_completion(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let submitted_now = match self.stage {
            Stage::InFlight => false,
            Stage::Over => {
                return Poll::Ready(Err(Error::new(
                    ErrorKind::BadState,
                    format!("{}: operation future polled after completion", self.op),
                )))
            }
            Stage::Start | Stage::Prepared => match self.poll_submit(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(self.fail(e))),
                Poll::Ready(Ok(inline)) => {
                    if inline {
                        let rec = self.group.as_deref().expect("a submitted operation has its group").first();
                        // The group's waker is not set yet, so the callback wakes nobody.
                        self.core.progress_inline(INLINE_PROGRESS, || rec.state() == HeldState::Done);
                    }
                    true
                }
            },
        };
        let group = self.group.as_deref().expect("a submitted operation has its group");
        let rec = group.first();
        let done = || rec.state() == HeldState::Done;
        // As a slot's operation (see `TaskFuture::poll_completion`): wait here if the
        // executor would only spin for it (a posted-ahead kind as its spins taught it).
        let waited = !done() && self.core.spin_inline_for(K::REMOTE, K::POSTED_AHEAD, submitted_now, done);
        if !waited && group.poll_done(self.core, rec, cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }

    /// The completion's status and result area; the group goes back to the pool.
    #[inline(always)]
    fn take_result(&mut self) -> Result<TaskOutput> {
        let group = self.group.take().expect("a completed operation has its group");
        let rec = group.first();
        let status = rec.take();
        let out = rec.output();
        self.stage = Stage::Over;
        self.pool.give::<K>(group);
        if status == sys::DOCA_SUCCESS {
            Ok(out)
        } else {
            Err(Error::from_doca(status, self.op))
        }
    }

    /// [`poll_op`](Self::poll_op) inside the operation's span.
    #[cold]
    #[inline(never)]
    fn poll_traced(&mut self, cx: &mut Context<'_>) -> Poll<Result<TaskOutput>> {
        OpSpan::poll_within(self, |f| &mut f.span, |f| f.poll_op(cx))
    }

    #[inline(always)]
    fn poll_op(&mut self, cx: &mut Context<'_>) -> Poll<Result<TaskOutput>> {
        match self.poll_completion(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => Poll::Ready(self.take_result()),
        }
    }
}

impl<K: DocaTask, A: HeldRequest<K, B>, B: 'static> Future for HeldOp<'_, K, A, B> {
    type Output = (Result<TaskOutput>, B);

    // Always inlined into the caller's `.await`, as `BufTaskFuture`'s poll (its output comes
    // back in registers, not through memory).
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let r = if this.span.is_recorded() {
            ready!(this.poll_traced(cx))
        } else {
            // Nobody traces (the common case): the poll itself, inlined here.
            ready!(this.poll_op(cx))
        };
        let b = this.buffers.take().expect("HeldOp polled after completion");
        Poll::Ready((r, b))
    }
}

impl<K: DocaTask, A, B: 'static> Drop for HeldOp<'_, K, A, B> {
    #[inline]
    fn drop(&mut self) {
        // Nothing taken (never polled) or over: only the buffers, if any, to drop.
        let Some(group) = self.group.take() else { return };
        let buffers = self.buffers.take();
        let rec = group.first();
        match rec.state() {
            HeldState::InFlight => {
                // DOCA may still touch the buffers: the group keeps them (and the inventory
                // of their descriptors) until its completion, which then frees the task.
                let keep: Abandoned<B> = (self.pool.anchor.clone(), buffers);
                group.abandon(Box::new(keep));
            }
            state => {
                if state == HeldState::Done {
                    let _ = rec.take();
                }
                // Prepared and never submitted, or completed and not collected: the task stays
                // for the next operation.
                self.pool.give_unused::<K>(group);
                drop(buffers);
            }
        }
    }
}

impl<K: DocaTask, A, B: 'static> fmt::Debug for HeldOp<'_, K, A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldOp").field("op", &self.op).field("stage", &self.stage).finish_non_exhaustive()
    }
}
