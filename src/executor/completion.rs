//! Completion slots: the bridge between DOCA task callbacks and futures.
//!
//! Every DOCA task the runtime submits carries, as its `doca_data` user data, the key of a
//! **slot** in its executor's slot table (`Slots`). The extern "C" callback
//! [`completion_cb`] (installed as both the success and the error callback of a task type)
//! runs inside `doca_pe_progress` on the executor's thread; it reads the status, lets the
//! task kind copy kind-specific results out of the task ([`TaskKind::on_complete`]), frees
//! the task, stores the status in the slot and wakes the future ([`TaskFuture`]).
//!
//! Ownership and lifetimes:
//! * The slot table belongs to one executor and is used only on its thread. Slots live in
//!   fixed-size chunks that are never moved or freed while the executor lives, so a slot's
//!   result area has a **stable address**: DOCA may write into it through raw pointers while
//!   the task is in flight (a sync event `get` writes `*ret_val_ptr`, `notify_add` the
//!   fetched value) — see [`TaskSlot::out_ptr`]. Slots are recycled through a free list, so
//!   steady-state operation allocates nothing.
//! * A key packs the slot index and a generation, so a late or duplicate callback for a
//!   recycled slot is detected instead of completing someone else's operation.
//! * DOCA has no per-task cancellation. Dropping a [`TaskFuture`] whose task is in flight
//!   marks its slot **orphaned**: the slot (its result area and any buffers handed over with
//!   [`TaskFuture::with_buffers`]) stays alive until the completion (or the flush of a
//!   stopping context) arrives; the callback then releases it. The only ways to end an
//!   in-flight task early are to drop its future (the result is discarded) or to stop its
//!   context (the task is flushed with an error).
//! * Back-pressure: when a task pool is exhausted (`*_alloc_init` returns NO_MEMORY) or the
//!   submit queue is full (`doca_task_submit` returns AGAIN or NO_MEMORY), the future waits
//!   (no spinning, no spurious error) until a task of the same context is freed — every
//!   completion wakes that context's waiters — and retries. If nothing of that context is
//!   outstanding, waiting could never end, so the error is returned instead.

use std::any::Any;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::ptr::NonNull;
use std::rc::Rc;
use std::task::{Context as TaskCx, Poll, Waker};

use super::context::CtxRecord;
use super::local::{report, with_current, Core};
use crate::error::{Error, ErrorKind, Result};
use crate::sys;
use crate::trace::OpSpan;

/// A `DEBUG` event: operation `op` waits for a task of its context to be freed (see the
/// module documentation on back-pressure).
#[cold]
fn back_pressure(op: &'static str, ctx: &CtxRecord, why: &'static str) {
    crate::trace::event!(debug, { op = op, ctx = ctx.name(), outstanding = ctx.outstanding() }, "back-pressure: {why}");
}

/// Number of 64-bit words in a slot's result area.
pub const OUT_WORDS: usize = 4;

/// The results of a completed task: the words of the slot's result area (what DOCA wrote
/// through [`TaskSlot::out_ptr`], and what [`TaskKind::on_complete`] copied out of the task).
pub type TaskOutput = [u64; OUT_WORDS];

const CHUNK: usize = 64;
const NONE: u32 = u32::MAX;

/// A kind of DOCA task (one per task type: sync event get, RDMA write, ...).
///
/// # Safety
/// `as_task` must return the `doca_task` of the given task object, and `free` must give the
/// task back to DOCA (the default calls `doca_task_free`; UROM command tasks use their own
/// release function). [`completion_cb`] relies on both.
///
/// ```
/// use async_doca::executor::completion::TaskKind;
/// use async_doca::sys;
///
/// /// `doca_sync_event_task_get`: the counter value is written to the result area by DOCA.
/// pub struct Get;
/// // SAFETY: the conversion is the task type's own; sync event tasks are freed with
/// // doca_task_free (the default).
/// unsafe impl TaskKind for Get {
///     type Task = sys::doca_sync_event_task_get;
///     unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
///         // SAFETY: forwarded; the caller passes a live task.
///         unsafe { sys::doca_sync_event_task_get_as_doca_task(task) }
///     }
/// }
/// ```
pub unsafe trait TaskKind: 'static {
    /// The task object type (for example `doca_sync_event_task_get`).
    type Task;

    /// `doca_*_as_task` of this type.
    ///
    /// # Safety
    /// `task` is a live task of this kind.
    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task;

    /// Reads kind-specific results out of the task before it is freed (for example the
    /// length, opcode and immediate data of an RDMA receive) into `out`. Called for every
    /// completion, successful or not (`status`). The default does nothing.
    ///
    /// # Safety
    /// `task` is the live, completed task.
    unsafe fn on_complete(task: *mut Self::Task, status: sys::doca_error_t, out: &mut TaskOutput) {
        let _ = (task, status, out);
    }

    /// Gives the task back to DOCA. The default is `doca_task_free`.
    ///
    /// # Safety
    /// `task` is a live task of this kind that DOCA does not own (not submitted, or
    /// completed), and it is not used afterwards.
    unsafe fn free(task: *mut Self::Task) {
        // SAFETY: the caller passes a live task it owns; `as_task` is correct by the trait's
        // contract.
        unsafe { sys::doca_task_free(Self::as_task(task)) }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SlotState {
    Free,
    /// Reserved by a future; its task is not submitted (yet).
    Reserved,
    /// The task is submitted; DOCA owns it and may write the result area.
    InFlight,
    /// Completed; the future has not taken the result yet.
    Done,
    /// The future was dropped while the task was in flight; released at completion.
    Orphaned,
}

struct Slot {
    generation: Cell<u32>,
    state: Cell<SlotState>,
    status: Cell<sys::doca_error_t>,
    /// Written by DOCA through raw pointers while in flight; read only once `Done`.
    out: UnsafeCell<TaskOutput>,
    waker: Cell<Option<Waker>>,
    keepalive: Cell<Option<Box<dyn Any>>>,
    next_free: Cell<u32>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            generation: Cell::new(1),
            state: Cell::new(SlotState::Free),
            status: Cell::new(sys::DOCA_SUCCESS),
            out: UnsafeCell::new([0; OUT_WORDS]),
            waker: Cell::new(None),
            keepalive: Cell::new(None),
            next_free: Cell::new(NONE),
        }
    }

    fn out_ptr(&self) -> *mut u64 {
        self.out.get().cast::<u64>()
    }
}

type Chunk = [Slot; CHUNK];

/// The slot table of one executor (see the module documentation).
pub(crate) struct Slots {
    /// Chunks from `Box::into_raw`: never moved, freed in `Drop` (unless leaked).
    chunks: RefCell<Vec<NonNull<Chunk>>>,
    free_head: Cell<u32>,
    in_use: Cell<usize>,
    /// Set when slots were leaked at shutdown: DOCA may still write them, so the chunks must
    /// never be freed.
    leaked: Cell<bool>,
    /// While set (inline progress inside a task's poll, see `Core::progress_inline`), the
    /// buffers kept by released orphaned slots are not dropped but moved to `deferred`:
    /// their destructors are user code, which must not run in the middle of another task's
    /// poll. The loop drops them after its next drain ([`Slots::drop_deferred`]).
    defer: Cell<bool>,
    deferred: RefCell<Vec<Box<dyn Any>>>,
}

/// See [`Slots::defer_drops`].
pub(crate) struct DeferDrops<'a> {
    slots: &'a Slots,
    prev: bool,
}

impl Drop for DeferDrops<'_> {
    fn drop(&mut self) {
        self.slots.defer.set(self.prev);
    }
}

fn slot_key(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(index)
}

impl Slots {
    pub(crate) fn new() -> Slots {
        Slots {
            chunks: RefCell::new(Vec::new()),
            free_head: Cell::new(NONE),
            in_use: Cell::new(0),
            leaked: Cell::new(false),
            defer: Cell::new(false),
            deferred: RefCell::new(Vec::new()),
        }
    }

    /// Defers the drops of kept buffers until the guard is dropped and
    /// [`drop_deferred`](Slots::drop_deferred) runs (see `defer`).
    pub(crate) fn defer_drops(&self) -> DeferDrops<'_> {
        DeferDrops { slots: self, prev: self.defer.replace(true) }
    }

    /// Whether buffers wait for [`drop_deferred`](Slots::drop_deferred).
    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.borrow().is_empty()
    }

    /// Drops the buffers whose drop was deferred (see `defer`).
    pub(crate) fn drop_deferred(&self) {
        if self.defer.get() || self.deferred.borrow().is_empty() {
            return;
        }
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        // Outside the borrow: a destructor may release more slots.
        drop(deferred);
    }

    fn slot_at(&self, index: u32) -> Option<&Slot> {
        let chunk = *self.chunks.borrow().get(index as usize / CHUNK)?;
        // SAFETY: chunks are allocated by `grow` and freed only in `Drop`, so the pointer is
        // valid for the lifetime of `&self`; slots are only accessed through shared
        // references (all their fields are cells).
        Some(unsafe { &(*chunk.as_ptr())[index as usize % CHUNK] })
    }

    /// The slot of `key` if the key is current and the slot is in use.
    fn get(&self, key: u64) -> Option<&Slot> {
        let slot = self.slot_at((key & 0xffff_ffff) as u32)?;
        (slot.generation.get() == (key >> 32) as u32 && slot.state.get() != SlotState::Free).then_some(slot)
    }

    fn grow(&self) {
        let mut chunks = self.chunks.borrow_mut();
        let base = chunks.len() * CHUNK;
        assert!(base + CHUNK < NONE as usize, "completion slots: too many operations in flight");
        let chunk: Box<Chunk> = Box::new(std::array::from_fn(|_| Slot::new()));
        // Link the new slots into the free list, lowest index first.
        for (i, s) in chunk.iter().enumerate() {
            let next = if i + 1 < CHUNK { (base + i + 1) as u32 } else { self.free_head.get() };
            s.next_free.set(next);
        }
        self.free_head.set(base as u32);
        chunks.push(NonNull::from(Box::leak(chunk)));
    }

    /// Reserves a slot; returns its key and the slot. The pointer stays valid as long as the
    /// table (chunks are never moved or freed before it), and the slot stays the caller's
    /// until it releases it (only an orphaned slot is released by someone else: the
    /// completion callback).
    fn reserve(&self) -> (u64, NonNull<Slot>) {
        if self.free_head.get() == NONE {
            self.grow();
        }
        let index = self.free_head.get();
        let slot = self.slot_at(index).expect("free list points past the slot table");
        self.free_head.set(slot.next_free.get());
        slot.state.set(SlotState::Reserved);
        slot.status.set(sys::DOCA_SUCCESS);
        // SAFETY: the slot was free, so nobody (DOCA included) holds a pointer into it.
        unsafe { *slot.out.get() = [0; OUT_WORDS] };
        self.in_use.set(self.in_use.get() + 1);
        (slot_key(index, slot.generation.get()), NonNull::from(slot))
    }

    /// Returns a slot to the free list, dropping its waker and keep-alive afterwards.
    fn release(&self, key: u64) {
        if let Some(slot) = self.get(key) {
            self.release_slot(key, slot);
        }
    }

    /// [`release`](Slots::release) of a slot already looked up: `slot` is the live slot of
    /// `key`.
    fn release_slot(&self, key: u64, slot: &Slot) {
        debug_assert!(slot.generation.get() == (key >> 32) as u32 && slot.state.get() != SlotState::Free);
        let waker = slot.waker.take();
        let keep = slot.keepalive.take();
        slot.state.set(SlotState::Free);
        let next_gen = match slot.generation.get().wrapping_add(1) {
            0 => 1,
            g => g,
        };
        slot.generation.set(next_gen);
        let index = (key & 0xffff_ffff) as u32;
        slot.next_free.set(self.free_head.get());
        self.free_head.set(index);
        self.in_use.set(self.in_use.get() - 1);
        // Arbitrary destructors run last, when the table is consistent again.
        drop(waker);
        match keep {
            Some(k) if self.defer.get() => self.deferred.borrow_mut().push(k),
            keep => drop(keep),
        }
    }

    /// Leaks every slot whose task DOCA may still own (shutdown, contexts that never
    /// stopped); returns how many. Their memory is never freed afterwards.
    pub(crate) fn leak_pending(&self) -> usize {
        let mut n = 0;
        let total = self.chunks.borrow().len() * CHUNK;
        for i in 0..total {
            let Some(slot) = self.slot_at(i as u32) else {
                break;
            };
            if matches!(slot.state.get(), SlotState::InFlight | SlotState::Orphaned) {
                n += 1;
                if let Some(k) = slot.keepalive.take() {
                    std::mem::forget(k);
                }
            }
        }
        if n > 0 {
            self.leaked.set(true);
        }
        n
    }

    /// Slots in use (reserved, in flight, done or orphaned).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.in_use.get()
    }

    #[cfg(test)]
    pub(crate) fn reserve_for_test(&self) -> u64 {
        self.reserve().0
    }

    #[cfg(test)]
    pub(crate) fn release_for_test(&self, key: u64) {
        self.release(key);
    }

    #[cfg(test)]
    pub(crate) fn chunks_for_test(&self) -> usize {
        self.chunks.borrow().len()
    }

    #[cfg(test)]
    pub(crate) fn is_live_for_test(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    #[cfg(test)]
    pub(crate) fn out_ptr_for_test(&self, key: u64) -> *mut u64 {
        self.get(key).map_or(std::ptr::null_mut(), Slot::out_ptr)
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        if self.leaked.get() {
            return;
        }
        for chunk in self.chunks.get_mut().drain(..) {
            // SAFETY: every chunk came from `Box::leak` in `grow` and is freed once, here; no
            // slot is in flight (otherwise `leaked` would be set), so DOCA holds no pointer
            // into it.
            drop(unsafe { Box::from_raw(chunk.as_ptr()) });
        }
    }
}

/// The completion callback of every task of kind `K`: pass `Some(completion_cb::<K>)` as
/// both the success and the error callback of the task type's `*_set_conf` (the function
/// pointer type matches `*_completion_cb_t` exactly, no cast needed).
///
/// It runs inside `doca_pe_progress` on the executor's thread: it reads the status, calls
/// [`TaskKind::on_complete`], frees the task ([`TaskKind::free`]), stores the status in the
/// slot named by `task_user_data` and wakes the future, or releases the slot if the future
/// was dropped. It wakes futures waiting for a free task of the same context (named by
/// `ctx_user_data`). It never unwinds into C.
///
/// # Safety
/// Only DOCA calls it, for a task submitted through [`TaskFuture`] (so `task_user_data` is a
/// slot key and `ctx_user_data` the key set by [`Context`](super::context::Context)).
pub unsafe extern "C" fn completion_cb<K: TaskKind>(
    task: *mut K::Task,
    task_user_data: sys::doca_data,
    ctx_user_data: sys::doca_data,
) {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: DOCA passes the live, completed task of this kind, owned by us again.
        unsafe { on_completion::<K>(task, task_user_data.as_u64(), ctx_user_data.as_u64()) }
    }));
    if r.is_err() {
        report("a panic in a DOCA completion callback was contained");
    }
}

/// # Safety
/// `task` is a live completed task of kind `K` that we own.
unsafe fn on_completion<K: TaskKind>(task: *mut K::Task, key: u64, ctx_key: u64) {
    // SAFETY: live task (caller).
    let status = unsafe { sys::doca_task_get_status(K::as_task(task)) };
    let handled = with_current(|core| {
        match core.slots.get(key) {
            Some(slot) if matches!(slot.state.get(), SlotState::InFlight | SlotState::Orphaned) => {
                // SAFETY: the task completed, so DOCA no longer writes the result area; this
                // thread is the only other user and holds no other reference to it now.
                unsafe { K::on_complete(task, status, &mut *slot.out.get()) };
                // SAFETY: we own the completed task; it is not used after this.
                unsafe { K::free(task) };
                core.ctxs.task_freed(ctx_key);
                if slot.state.get() == SlotState::Orphaned {
                    core.slots.release(key);
                } else {
                    slot.status.set(status);
                    slot.state.set(SlotState::Done);
                    if let Some(w) = slot.waker.take() {
                        w.wake();
                    }
                }
            }
            _ => {
                report(&format!("completion for an unknown or stale slot {key:#x}; task freed"));
                // SAFETY: as above.
                unsafe { K::free(task) };
                core.ctxs.task_freed(ctx_key);
            }
        }
    });
    if handled.is_none() {
        // Progress was called outside the runtime (by hand, on a runtime PE): there is no
        // slot table to complete. Free the task so that the context can still stop.
        report("completion callback outside an async-doca executor; task freed, result lost");
        // SAFETY: as above.
        unsafe { K::free(task) };
    }
}

/// What the allocation closure of [`Context::submit`](super::context::Context::submit)
/// gets: the user data to give the task and the slot's result area.
#[derive(Clone, Copy, Debug)]
pub struct TaskSlot {
    user_data: sys::doca_data,
    out: *mut u64,
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
}

/// Waiters on a context event (task freed, state changed). Each future keeps a ticket so
/// that re-polling replaces its waker instead of queueing duplicates; every wake-up drains
/// the list and opens a new epoch.
pub(crate) struct WaiterList {
    epoch: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

/// A future's place in a [`WaiterList`].
pub(crate) type Ticket = Option<(u64, usize)>;

impl WaiterList {
    pub(crate) fn new() -> WaiterList {
        WaiterList { epoch: Cell::new(0), wakers: RefCell::new(Vec::new()) }
    }

    pub(crate) fn register(&self, ticket: &mut Ticket, waker: &Waker) {
        let mut wakers = self.wakers.borrow_mut();
        if let Some((epoch, i)) = *ticket {
            if epoch == self.epoch.get() {
                if let Some(w) = wakers.get_mut(i) {
                    if !w.will_wake(waker) {
                        w.clone_from(waker);
                    }
                    return;
                }
            }
        }
        *ticket = Some((self.epoch.get(), wakers.len()));
        wakers.push(waker.clone());
    }

    pub(crate) fn wake_all(&self) {
        // A new epoch even when nobody waits: `TaskFreed` compares epochs to see events.
        self.epoch.set(self.epoch.get().wrapping_add(1));
        if self.wakers.borrow().is_empty() {
            // The common case (every completion calls this): nothing to take or wake.
            return;
        }
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for w in wakers {
            w.wake();
        }
    }

    /// The current epoch (changes at every `wake_all`).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.get()
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
/// callback. Created by [`Context::submit`](super::context::Context::submit); resolves to the
/// slot's result area, or to an [`Error`] carrying DOCA's status and the operation's name.
///
/// The future is lazy: nothing is allocated or submitted before the first poll. It borrows
/// its context, so the context outlives it. Dropping it after submission does not cancel the
/// task (DOCA has no per-task cancel): the result is discarded when it arrives, and memory
/// the provider may write stays alive until then (see the module documentation).
#[must_use = "a DOCA operation does nothing unless awaited; once submitted, dropping it discards the result but cannot cancel the task"]
pub struct TaskFuture<'a, K: TaskKind, A> {
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
impl<K: TaskKind, A> Unpin for TaskFuture<'_, K, A> {}

impl<'a, K: TaskKind, A> TaskFuture<'a, K, A> {
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
        let out = match self.stage {
            Stage::Finished => std::ptr::null_mut(),
            _ => self.slot().out_ptr(),
        };
        TaskSlot { user_data: sys::doca_data::from_u64(self.slot), out }
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
    K: TaskKind,
    A: FnMut(&TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t>,
{
    fn poll_op(&mut self, cx: &mut TaskCx<'_>) -> Poll<Result<TaskOutput>> {
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
                    match alloc(&slot) {
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
                    // SAFETY: `task` is a live task of kind K that we allocated and still own.
                    let rc = unsafe { sys::doca_task_submit(K::as_task(task)) };
                    match rc {
                        sys::DOCA_SUCCESS => {
                            // DOCA owns the task now; the slot receives its completion.
                            self.stage = Stage::InFlight;
                            // The fast path: many tasks complete at once (the completion is
                            // queued at submit and delivered by the next progress); collect it
                            // now rather than return Pending and be woken and polled again.
                            // The slot's waker is not set yet, so the callback wakes nobody.
                            // Either way the InFlight stage below decides.
                            let slot = self.slot();
                            self.core.progress_inline(|| slot.state.get() == SlotState::Done);
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
    K: TaskKind,
    A: FnMut(&TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t>,
{
    type Output = Result<TaskOutput>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<Result<TaskOutput>> {
        let this = self.get_mut();
        // The span is entered while the operation is polled (taken out of the future for
        // that, since polling needs the future mutably; untraced, that moves a `None`). One
        // call of `poll_op`, so that it is inlined here as before.
        let span = this.span.take();
        let r = {
            let _entered = span.enter();
            this.poll_op(cx)
        };
        if let Poll::Ready(r) = &r {
            span.finish(r);
        }
        this.span = span;
        r
    }
}

impl<K: TaskKind, A> Drop for TaskFuture<'_, K, A> {
    fn drop(&mut self) {
        self.abandon(None);
    }
}

impl<K: TaskKind, A> fmt::Debug for TaskFuture<'_, K, A> {
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
pub struct BufTaskFuture<'a, K: TaskKind, A, B: 'static> {
    inner: TaskFuture<'a, K, A>,
    buffers: Option<B>,
}

impl<K: TaskKind, A, B: 'static> Unpin for BufTaskFuture<'_, K, A, B> {}

impl<K: TaskKind, A, B: 'static> BufTaskFuture<'_, K, A, B> {
    /// Whether the task has been handed to DOCA (or the operation is over): from then on its
    /// place in the context's submission order is fixed. Layers that must submit several
    /// operations in a given order poll each until this holds before creating the next.
    pub(crate) fn submitted(&self) -> bool {
        matches!(self.inner.stage, Stage::InFlight | Stage::Finished)
    }
}

impl<K, A, B> Future for BufTaskFuture<'_, K, A, B>
where
    K: TaskKind,
    A: FnMut(&TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t>,
    B: 'static,
{
    type Output = (Result<TaskOutput>, B);

    fn poll(self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // As in `TaskFuture::poll`.
        let span = this.inner.span.take();
        let r = {
            let _entered = span.enter();
            this.inner.poll_op(cx)
        };
        if let Poll::Ready(r) = &r {
            span.finish(r);
        }
        this.inner.span = span;
        match r {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                let b = this.buffers.take().expect("BufTaskFuture polled after completion");
                Poll::Ready((r, b))
            }
        }
    }
}

impl<K: TaskKind, A, B: 'static> Drop for BufTaskFuture<'_, K, A, B> {
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

impl<K: TaskKind, A, B: 'static> fmt::Debug for BufTaskFuture<'_, K, A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufTaskFuture").field("inner", &self.inner).finish_non_exhaustive()
    }
}
