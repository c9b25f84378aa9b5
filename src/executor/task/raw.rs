//! The task allocation: one future, its output, and the state that says when it runs.
//!
//! **Why not `async-task`.** Every wake and every run of an `async-task` task updates an atomic
//! state word: a wake by reference is a compare-and-swap, a run two more and the release of
//! the runnable's reference a fetch-and-subtract. Four read-modify-writes per trip, ~25 ns on
//! our machines, on every operation whose task parks (`docs/cost.md`, seventeenth session).
//! Our tasks are polled and dropped only on their executor's thread, so that thread keeps
//! the run state in a `Cell`; atomics remain only where another thread is involved.
//!
//! # Who touches what
//!
//! | field | kind | who |
//! | --- | --- | --- |
//! | `state` (`SCHEDULED`, `RUNNING`, `FINISHED`) | `Cell` | the owner thread only (the spawning thread before the task is published) |
//! | `refs` | atomic | anyone: see below |
//! | `notified` | atomic | set by a wake from another thread, cleared by the owner when it takes that runnable |
//! | `cancel` | atomic | set by [`RawHandle::cancel`] (any thread), read by the owner |
//! | `join` (`READY`, `HANDLE_GONE`, `STARTED`) and the output | atomic, and a cell guarded by it | the owner stores the output, then `READY`; the handle takes it after it saw `READY` |
//! | `awaiter` | mutex | the handle registers, the owner takes it when the task finishes |
//! | `local_refs` | `Cell` | the owner thread only: its local wakers ([`local_waker`]) |
//!
//! **References** (`refs`): the executor's, from the spawn until the task finishes; the
//! handle's; one per `Waker`; one per *counted* [`Runnable`]. The last one to go frees the
//! allocation, on whatever thread; by then the future is gone (it is dropped when the task
//! finishes, on the owner thread) and so is any output nobody took.
//!
//! **Local references** (`local_refs`): what the executor's completion slots keep instead of
//! a clone of the task's `Waker` when the operation's future parks on the owner thread
//! ([`local_waker`]). A clone and the wake by value that drops it are two atomic
//! read-modify-writes on every parked operation; a local reference is a `Cell` count, never
//! leaves the owner thread, and all of them together hold the executor's reference: a task
//! that finishes while local references remain leaves that reference to the last of them.
//!
//! **Runnables.** A wake on the owner thread sets `SCHEDULED` and queues an *uncounted*
//! runnable (no atomic): a scheduled task has not finished, so the executor's reference keeps
//! it alive while that runnable is queued, and it stays scheduled until that runnable runs or
//! is dropped. A wake from another thread sets `notified` and, if it was clear, queues a
//! *counted* runnable (it holds a reference) on the executor's injection queue; when the owner
//! takes it, it runs the task unless an uncounted runnable is queued already (then that one
//! will) or the task finished. So a task is finished only through its uncounted runnable or
//! while it has none, and no uncounted runnable ever points to a finished task.
//!
//! **Dropping a runnable cancels its task** (as `async-task`'s does): shutdown drops what is
//! queued. A counted runnable dropped while an uncounted one is queued only asks for the
//! cancellation, which the uncounted one carries out.

use std::cell::{Cell, UnsafeCell};
use std::future::Future;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use super::{panic_message, TaskMeta, TaskOutput};

const SCHEDULED: u8 = 1;
const RUNNING: u8 = 2;
const FINISHED: u8 = 4;
/// `state`: `STARTED` is set in `join` already.
const STARTED_NOTED: u8 = 8;

/// `join`: the task finished (its output, or none if it was cancelled, is stored).
const READY: u8 = 1;
/// `join`: the handle is gone; the owner drops an output nobody will take.
const HANDLE_GONE: u8 = 2;
/// `join`: the task was polled once, so its future may hold what only its owner thread may
/// drop (set once per task, at its first run).
const STARTED: u8 = 4;

/// What a task needs from its executor: where a runnable goes, and whether this thread is
/// the task's owner.
pub(crate) struct Hooks {
    /// Queues a runnable: an uncounted one only ever on the owner thread.
    pub(crate) schedule: fn(Runnable),
    /// Queues a runnable on the calling thread's executor, which the caller found to be the
    /// owner (`on_owner`): the wake on the owner thread, without looking the owner up again.
    pub(crate) schedule_local: fn(Runnable),
    /// Whether the calling thread is the executor of `meta` (false for a task without one).
    pub(crate) on_owner: fn(&TaskMeta) -> bool,
    /// Reports a panic contained here (a future's or an output's destructor, an awaiter's
    /// wake).
    pub(crate) report: fn(&str),
}

/// The operations that depend on the future's type.
struct Vtable {
    /// Runs the task once ([`Runnable::run`]: the runnable's pointer and whether it is
    /// counted); returns whether it was woken while it ran.
    run: unsafe fn(NonNull<Header>, bool) -> bool,
    /// Drops the future in place (a cancellation), if it is still there.
    drop_future: unsafe fn(NonNull<Header>),
    /// Drops the stored output, if any.
    drop_output: unsafe fn(NonNull<Header>),
    /// Frees the allocation.
    dealloc: unsafe fn(NonNull<Header>),
}

/// The start of every task allocation (see the module documentation for its fields).
#[repr(C)]
pub(crate) struct Header {
    vtable: &'static Vtable,
    hooks: &'static Hooks,
    refs: AtomicUsize,
    state: Cell<u8>,
    notified: AtomicBool,
    cancel: AtomicBool,
    join: AtomicU8,
    awaiter: Mutex<Option<Waker>>,
    local_refs: Cell<u32>,
    meta: TaskMeta,
}

/// The header and the output: the part of the allocation a handle (which knows the output's
/// type but not the future's) reads. The output is the future's, or the message of the panic
/// that ended it.
#[repr(C)]
struct WithOutput<T> {
    header: Header,
    output: UnsafeCell<Option<TaskOutput<T>>>,
}

/// The whole allocation.
#[repr(C)]
struct TaskAlloc<F: Future> {
    head: WithOutput<F::Output>,
    future: UnsafeCell<Option<F>>,
}

impl<F: Future> TaskAlloc<F> {
    const VTABLE: Vtable = Vtable {
        run: Self::run,
        drop_future: Self::drop_future,
        drop_output: Self::drop_output,
        dealloc: Self::dealloc,
    };

    /// [`Runnable::run`], whole: the run state, the poll and the one `catch_unwind`, in one
    /// frame per run. (The state's bookkeeping was a frame of its own, the poll a second and
    /// the panic catch a third, inside the future's wrapper: `docs/cost.md`, twenty-eighth
    /// session.) The price is code: this function is compiled once per spawned future
    /// type, the bookkeeping with it; what is rare (a cancellation, a panic, the end of the
    /// task) stays out of line and shared.
    ///
    /// # Safety
    /// `ptr` is a queued runnable's task (`counted`: the runnable holds a reference of its
    /// own), a live `TaskAlloc<F>`, on its owner thread; the runnable is consumed.
    unsafe fn run(ptr: NonNull<Header>, counted: bool) -> bool {
        // SAFETY: a queued runnable's task is alive (its reference, or the task is scheduled).
        let h = unsafe { header(ptr) };
        if counted {
            // Acquire: what the remote waker did before its wake is visible to the poll.
            h.notified.swap(false, Ordering::AcqRel);
        }
        let st = h.state.get();
        let mut woken = false;
        // A counted runnable defers to an uncounted one that is queued (it will run the task),
        // and neither runs a finished task.
        if st & FINISHED == 0 && !(counted && st & SCHEDULED != 0) {
            if st & STARTED_NOTED == 0 {
                h.join.fetch_or(STARTED, Ordering::Release);
            }
            h.state.set(RUNNING | STARTED_NOTED);
            if h.cancel.load(Ordering::Acquire) {
                // SAFETY: not finished, owner thread, not being polled.
                unsafe { finish(ptr, true) };
            } else {
                // SAFETY: a live `TaskAlloc<F>` of its owner thread, not finished, not being
                // polled (a task is not run while it runs).
                if unsafe { Self::poll(ptr) } {
                    // SAFETY: as above; the future is gone already.
                    unsafe { finish(ptr, false) };
                } else {
                    let st = h.state.get() & !RUNNING;
                    h.state.set(st);
                    if st & SCHEDULED != 0 {
                        // Woken while it ran: the wake left the queueing to us.
                        (h.hooks.schedule_local)(Runnable { ptr, counted: false });
                        woken = true;
                    }
                }
            }
        }
        if counted {
            // SAFETY: this runnable's own reference, not used afterwards.
            unsafe { release(ptr) };
        }
        woken
    }

    /// Polls the future in place, catching its panic; when it is ready (or panicked), drops
    /// it and stores its output (or the panic's message). Returns whether it finished.
    ///
    /// # Safety
    /// As for [`run`](Self::run), and the task is running (not finished).
    #[inline(always)]
    unsafe fn poll(ptr: NonNull<Header>) -> bool {
        let t = ptr.cast::<TaskAlloc<F>>().as_ptr();
        // SAFETY: the caller's contract; only the owner thread touches the future, and not
        // re-entrantly (a task is not run while it runs).
        let slot = unsafe { &mut *(*t).future.get() };
        let waker = ManuallyDrop::new(waker(ptr));
        let mut cx = Context::from_waker(&waker);
        let polled = catch_unwind(AssertUnwindSafe(|| {
            // A task never polls its future once it was ready (it finished then); be
            // defensive anyway: no output, as for a cancelled task.
            let Some(fut) = slot.as_mut() else { return Some(None) };
            // SAFETY: the future is never moved: it stays in the allocation until dropped in
            // place.
            match unsafe { Pin::new_unchecked(fut) }.poll(&mut cx) {
                Poll::Ready(v) => {
                    // Dropped now, inside the catch: its destructor may panic.
                    *slot = None;
                    Some(Some(v))
                }
                Poll::Pending => None,
            }
        }));
        match polled {
            Ok(None) => false,
            Ok(Some(v)) => {
                if let Some(v) = v {
                    // SAFETY: `READY` is not set yet, so the handle does not read the output.
                    unsafe { *output(ptr) = Some(Ok(v)) };
                }
                true
            }
            Err(payload) => {
                // SAFETY: as above.
                unsafe { Self::panicked(ptr, payload) };
                true
            }
        }
    }

    /// The end of a task whose future panicked: the future, in an unknown state, is dropped
    /// (a second panic contained) and the panic's message stored as the output, which the
    /// handle reports as an error.
    ///
    /// # Safety
    /// As for [`poll`](Self::poll), whose catch this is.
    #[cold]
    #[inline(never)]
    unsafe fn panicked(ptr: NonNull<Header>, payload: Box<dyn std::any::Any + Send>) {
        let msg = panic_message(payload);
        // SAFETY: header of a live task.
        let h = unsafe { header(ptr) };
        // SAFETY: the caller's contract: owner thread, not being polled any more.
        contained(h, "a task's destructor panicked after the task panicked", || unsafe { Self::drop_future(ptr) });
        // SAFETY: `READY` is not set yet, so the handle does not read the output.
        unsafe { *output::<F::Output>(ptr) = Some(Err(msg)) };
    }

    /// # Safety
    /// `ptr` is the header of a live `TaskAlloc<F>`; the future is not being polled, and this
    /// thread may drop it (its owner's, or it never ran and is `Send`).
    unsafe fn drop_future(ptr: NonNull<Header>) {
        let t = ptr.cast::<TaskAlloc<F>>().as_ptr();
        // SAFETY: the caller's contract.
        unsafe { *(*t).future.get() = None };
    }

    /// # Safety
    /// `ptr` is the header of a live `TaskAlloc<F>` whose output nobody else reads now.
    unsafe fn drop_output(ptr: NonNull<Header>) {
        // SAFETY: the caller's contract.
        unsafe { *output::<F::Output>(ptr) = None };
    }

    /// # Safety
    /// `ptr` came from `spawn` with this `F`, and its last reference was just released.
    unsafe fn dealloc(ptr: NonNull<Header>) {
        // SAFETY: the caller's contract: the box `spawn` leaked, freed once.
        drop(unsafe { Box::from_raw(ptr.cast::<TaskAlloc<F>>().as_ptr()) });
    }
}

/// The output slot of the task `ptr`, whose output is a `T`.
///
/// # Safety
/// `ptr` is a live task whose output type is `T`, and the caller may touch the output now:
/// the owner before `READY`, the handle after it saw `READY`, or whoever drops it then.
unsafe fn output<'a, T>(ptr: NonNull<Header>) -> &'a mut Option<TaskOutput<T>> {
    // SAFETY: the caller's contract; `WithOutput<T>` starts every such allocation.
    unsafe { &mut *(*ptr.cast::<WithOutput<T>>().as_ptr()).output.get() }
}

/// The header of `ptr`.
///
/// # Safety
/// `ptr` points to a live task allocation.
unsafe fn header<'a>(ptr: NonNull<Header>) -> &'a Header {
    // SAFETY: the caller's contract.
    unsafe { ptr.as_ref() }
}

/// Drops one reference; the last one frees the allocation.
///
/// # Safety
/// The caller owns one reference of the live task `ptr` and does not use it afterwards.
unsafe fn release(ptr: NonNull<Header>) {
    // SAFETY: the caller's reference keeps the task alive until here.
    let h = unsafe { header(ptr) };
    // AcqRel: every other reference's uses happen before the free. (An acquire fence after
    // a release decrement, as `Arc` does, is as correct, but ThreadSanitizer does not model
    // fences and reports the free as a race.)
    if h.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: the last reference: nobody can reach the task any more.
        unsafe { (h.vtable.dealloc)(ptr) };
    }
}

/// Takes one more reference.
///
/// # Safety
/// The caller holds a reference of the live task `ptr`.
unsafe fn retain(ptr: NonNull<Header>) {
    // SAFETY: the caller's reference.
    let h = unsafe { header(ptr) };
    // Relaxed, as `Arc::clone`: the new reference is made from one the caller holds.
    if h.refs.fetch_add(1, Ordering::Relaxed) > isize::MAX as usize {
        std::process::abort();
    }
}

/// Runs `f`, reporting a panic instead of unwinding.
fn contained(h: &Header, what: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        (h.hooks.report)(what);
    }
}

/// Allocates a task running `fut` for the executor of `meta`: two references (the executor's
/// and the handle's), not scheduled. The caller queues its first runnable
/// ([`first_runnable`](Spawned::first_runnable)) or cancels it.
///
/// A panic of `fut`'s `poll` (or of its drop when it is ready) ends the task: its output is
/// then the panic's message.
///
/// # Safety
/// If `F` (or its output) is not `Send`, the task is spawned on its owner thread, and its
/// runnables are only ever run or dropped there (`hooks.schedule` routes them so).
pub(crate) unsafe fn spawn<F>(fut: F, meta: TaskMeta, hooks: &'static Hooks) -> Spawned<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let task = Box::new(TaskAlloc {
        head: WithOutput {
            header: Header {
                vtable: &TaskAlloc::<F>::VTABLE,
                hooks,
                refs: AtomicUsize::new(2),
                state: Cell::new(0),
                notified: AtomicBool::new(false),
                cancel: AtomicBool::new(false),
                join: AtomicU8::new(0),
                awaiter: Mutex::new(None),
                local_refs: Cell::new(0),
                meta,
            },
            output: UnsafeCell::new(None),
        },
        future: UnsafeCell::new(Some(fut)),
    });
    let ptr = NonNull::from(Box::leak(task)).cast::<Header>();
    Spawned { ptr, _out: PhantomData }
}

/// A task just allocated by [`spawn`]: its handle, and its first runnable to queue. Dropping
/// it without taking the handle would leak the task.
#[must_use = "take the handle, or the task leaks"]
pub(crate) struct Spawned<T> {
    ptr: NonNull<Header>,
    _out: PhantomData<T>,
}

impl<T> Spawned<T> {
    /// The runnable that runs the task the first time, queued by the caller: uncounted (and
    /// the task marked scheduled) when queued on the owner thread, counted otherwise.
    pub(crate) fn first_runnable(&self, on_owner: bool) -> Runnable {
        // SAFETY: the task is alive (the executor's reference) and not published yet, so
        // this thread is the only one touching it.
        let h = unsafe { header(self.ptr) };
        if on_owner {
            h.state.set(SCHEDULED);
            Runnable { ptr: self.ptr, counted: false }
        } else {
            h.notified.store(true, Ordering::Relaxed);
            // SAFETY: the handle's reference (in `self`) keeps the task alive.
            unsafe { retain(self.ptr) };
            Runnable { ptr: self.ptr, counted: true }
        }
    }

    /// The handle, holding the handle's reference.
    pub(crate) fn handle(self) -> RawHandle<T> {
        RawHandle { ptr: Some(self.ptr), _out: PhantomData }
    }
}

/// Ends the task on the owner thread: drops the future if it was cancelled, publishes the
/// output (or its absence), wakes the handle's awaiter, and drops the executor's reference.
///
/// # Safety
/// `ptr` is a live task that has not finished, on its owner thread (or a task that never ran,
/// whose executor is gone); its future is not being polled.
unsafe fn finish(ptr: NonNull<Header>, cancelled: bool) {
    // SAFETY: not finished, so the executor's reference keeps it alive until the end here.
    let h = unsafe { header(ptr) };
    if cancelled {
        // SAFETY: the caller's contract.
        contained(h, "a task's destructor panicked while the task was cancelled", || unsafe {
            (h.vtable.drop_future)(ptr)
        });
    }
    h.state.set(FINISHED);
    // Release: the output stored before is visible to the handle that sees `READY`.
    let prev = h.join.fetch_or(READY, Ordering::AcqRel);
    if prev & HANDLE_GONE != 0 {
        // Nobody will take the output: drop it here, on the owner thread.
        // SAFETY: the handle is gone, so nobody else reads the output.
        contained(h, "a task's output panicked when dropped", || unsafe { (h.vtable.drop_output)(ptr) });
    } else {
        let awaiter = h.awaiter.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = awaiter {
            contained(h, "a task handle's waker panicked", || w.wake());
        }
    }
    // The executor's reference, which a finished task no longer holds, unless local
    // references remain: then the last of them releases it (`drop_local`). A task
    // finished off its owner thread never ran, so it has no waker and no local reference.
    if h.local_refs.get() == 0 {
        // SAFETY: the executor's reference, not used afterwards.
        unsafe { release(ptr) };
    }
}

/// A reference to a task, queued to run it once; see the module documentation.
pub(crate) struct Runnable {
    ptr: NonNull<Header>,
    /// Whether it holds a reference of its own (queued by another thread).
    counted: bool,
}

// SAFETY: a runnable crosses threads only through the injection queue (counted: its own
// reference keeps the task alive, and the owner runs it) or, when that queue is closed, back
// to the thread that pushed it, which drops it: see `Drop`.
unsafe impl Send for Runnable {}

impl Runnable {
    /// The task's metadata (its executor).
    pub(crate) fn metadata(&self) -> &TaskMeta {
        // SAFETY: a runnable keeps its task alive (its reference, or the task is scheduled).
        &unsafe { header(self.ptr) }.meta
    }

    /// The task's address, by which a handle recognises its runnable.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Polls the task once, on its owner thread. Returns whether it was woken while it ran
    /// (and queued again).
    #[inline]
    pub(crate) fn run(self) -> bool {
        let this = ManuallyDrop::new(self);
        let (ptr, counted) = (this.ptr, this.counted);
        // SAFETY: a queued runnable's task is alive (see `metadata`); this is its owner
        // thread, and the runnable, consumed here, is handed over to the run.
        unsafe { (header(ptr).vtable.run)(ptr, counted) }
    }
}

impl Drop for Runnable {
    /// Cancels the task (see the module documentation).
    fn drop(&mut self) {
        let (ptr, counted) = (self.ptr, self.counted);
        // SAFETY: a queued runnable's task is alive.
        let h = unsafe { header(ptr) };
        // An uncounted runnable never leaves its owner thread. A counted one may come back to
        // the thread that pushed it, when the injection queue was closed.
        if counted && h.meta.owner().is_some() && !(h.hooks.on_owner)(&h.meta) {
            // A task that never ran holds only `Send` parts and its owner will never touch
            // it: cancel it here. One that ran was cancelled on its owner thread before the
            // queue closed, unless shutdown gave up on it and leaked it: then it stays leaked
            // (its future may be `!Send`).
            if h.join.load(Ordering::Acquire) & (READY | STARTED) == 0 {
                // SAFETY: a task that never ran and whose executor is gone.
                unsafe { finish(ptr, true) };
            }
        } else {
            if counted {
                h.notified.swap(false, Ordering::AcqRel);
            }
            let st = h.state.get();
            if st & FINISHED == 0 {
                if counted && st & SCHEDULED != 0 {
                    // The queued uncounted runnable carries the cancellation out.
                    h.cancel.store(true, Ordering::Release);
                } else {
                    // SAFETY: not finished, owner thread (or no executor), not being polled.
                    unsafe { finish(ptr, true) };
                }
            }
        }
        if counted {
            // SAFETY: this runnable's own reference.
            unsafe { release(ptr) };
        }
    }
}

/// A waker of the task `ptr`, without taking a reference (the caller's keeps it alive).
fn waker(ptr: NonNull<Header>) -> Waker {
    // SAFETY: the vtable's functions keep the `RawWaker` contract (see each).
    unsafe { Waker::from_raw(RawWaker::new(ptr.as_ptr().cast(), &WAKER_VTABLE)) }
}

static WAKER_VTABLE: RawWakerVTable = RawWakerVTable::new(clone_waker, wake, wake_by_ref, drop_waker);

/// A waker's data pointer as the task's header.
// Inlined: out of line it was a call (4 instructions and the caller's register saves) in the
// hot paths that keep or wake a task's waker.
#[inline(always)]
fn task_of(data: *const ()) -> NonNull<Header> {
    // SAFETY (of the callers): a waker's data pointer is a live task's header.
    NonNull::new(data.cast_mut().cast::<Header>()).expect("a task waker with a null pointer")
}

unsafe fn clone_waker(data: *const ()) -> RawWaker {
    // SAFETY: the waker being cloned holds a reference.
    unsafe { retain(task_of(data)) };
    RawWaker::new(data, &WAKER_VTABLE)
}

unsafe fn wake(data: *const ()) {
    // SAFETY: the waker's reference keeps the task alive through both calls.
    unsafe {
        wake_by_ref(data);
        drop_waker(data);
    }
}

unsafe fn wake_by_ref(data: *const ()) {
    let ptr = task_of(data);
    // SAFETY: the waker's reference keeps the task alive.
    let h = unsafe { header(ptr) };
    if (h.hooks.on_owner)(&h.meta) {
        // SAFETY: the waker's reference; this is the owner thread.
        unsafe { wake_on_owner(ptr) };
    } else {
        // A finished task needs no run (the check is only a shortcut: a wake that races the
        // finish queues a runnable that finds the task finished).
        if h.join.load(Ordering::Acquire) & READY != 0 {
            return;
        }
        // Release: what this thread did before the wake is visible to the owner's poll.
        if !h.notified.swap(true, Ordering::AcqRel) {
            // SAFETY: the waker's reference.
            unsafe { retain(ptr) };
            (h.hooks.schedule)(Runnable { ptr, counted: true });
        }
    }
}

/// Wakes the task `ptr` on its owner thread: marks it scheduled and queues its uncounted
/// runnable, unless it is scheduled or finished already, or running (then its run queues it).
///
/// # Safety
/// The caller holds a reference (counted or local) of the live task `ptr`, on its owner
/// thread.
#[inline]
unsafe fn wake_on_owner(ptr: NonNull<Header>) {
    // SAFETY: the caller's contract; `schedule_local` queues on this thread's executor, the
    // owner.
    unsafe { wake_on_owner_into(ptr, |r| (header(ptr).hooks.schedule_local)(r)) }
}

/// [`wake_on_owner`], the runnable going to `queue`.
///
/// # Safety
/// As for [`wake_on_owner`]; `queue` puts the uncounted runnable in the task's executor's
/// local queue (on this thread).
#[inline(always)]
unsafe fn wake_on_owner_into(ptr: NonNull<Header>, queue: impl FnOnce(Runnable)) {
    // SAFETY: the caller's reference.
    let h = unsafe { header(ptr) };
    let st = h.state.get();
    if st & (SCHEDULED | FINISHED) != 0 {
        return;
    }
    h.state.set(st | SCHEDULED);
    if st & RUNNING == 0 {
        queue(Runnable { ptr, counted: false });
    }
}

/// Wakes `kept`, consuming it, when it is a local waker ([`local_waker`]) whose task `owns`
/// says is the caller's executor's: the task's runnable goes straight to `queue`, without the
/// waker's vtable, the hooks' indirect call and their look-up of the executor (the caller has
/// it at hand: a completion callback). Any other waker, or a local one of another executor's
/// task, is handed back, unwoken, for the caller to wake.
///
/// # Safety
/// `kept` is on the thread it was made on (as every local waker is: `local_waker`'s
/// contract); `queue` puts the uncounted runnable in the local queue of the executor that
/// `owns` accepted, which runs on this thread.
#[inline(always)]
pub(crate) unsafe fn wake_local_into(
    kept: Waker,
    owns: impl FnOnce(&TaskMeta) -> bool,
    queue: impl FnOnce(Runnable),
) -> Option<Waker> {
    if !ptr::eq(kept.vtable(), &LOCAL_VTABLE) {
        return Some(kept);
    }
    let ptr = task_of(kept.data());
    // SAFETY: the local reference `kept` holds keeps the task alive.
    if !owns(&unsafe { header(ptr) }.meta) {
        return Some(kept);
    }
    // Its local reference is released below, once the wake is done.
    let kept = ManuallyDrop::new(kept);
    // SAFETY: the local reference keeps the task alive; a local waker is on its task's owner
    // thread, and `queue` goes to that owner's queue (the caller's contract, which `owns`
    // checked).
    unsafe {
        wake_on_owner_into(ptr, queue);
        drop_local(kept.data());
    }
    None
}

unsafe fn drop_waker(data: *const ()) {
    // SAFETY: the waker's own reference, not used afterwards.
    unsafe { release(task_of(data)) };
}

/// A *local* waker of the task `waker` wakes, if `waker` is a waker of one of our tasks and
/// `owns` says this thread runs its executor: its reference is counted in the task's
/// `local_refs`, a `Cell`, not in `refs` (see the module documentation). `None` otherwise
/// (another kind of waker, a task of another executor, a finished task): then the caller
/// clones `waker`.
///
/// `owns(meta)`: whether the calling thread runs the executor of the task whose metadata it
/// is given, and that executor is the current one (the one a wake by the local waker's
/// vtable queues on: `schedule_local`). The caller asks its executor, which it has at hand
/// (`Core::owns_here`), rather than the hooks' `on_owner`, an indirect call that looks the
/// current executor up.
///
/// It is a `Waker` (so that keeping one costs what keeping a clone did: two words, and a
/// wake or drop through its vtable), but not an ordinary one: its count is a `Cell`.
///
/// # Safety
/// The returned waker stays on this thread: it is woken, dropped or cloned only here (its
/// clone is an ordinary waker, with a counted reference). `owns` says true only as above.
#[inline]
pub(crate) unsafe fn local_waker(waker: &Waker, owns: impl FnOnce(&TaskMeta) -> bool) -> Option<Waker> {
    if !ptr::eq(waker.vtable(), &WAKER_VTABLE) {
        return None;
    }
    let ptr = task_of(waker.data());
    // SAFETY: `waker` holds a reference to the task.
    let h = unsafe { header(ptr) };
    // Not finished: a finished task needs no wake, and counting it would miss the
    // executor's reference, released already. (No poll hands out a finished task's waker,
    // but a waker kept from earlier may be passed around by hand.)
    if !owns(&h.meta) || h.state.get() & FINISHED != 0 {
        return None;
    }
    // No overflow: each local reference lives in a completion slot or a held group, and
    // 2^32 of either would take hundreds of GiB.
    h.local_refs.set(h.local_refs.get() + 1);
    // SAFETY: `LOCAL_VTABLE`'s functions keep the `RawWaker` contract on this thread, which
    // the caller's contract guarantees.
    Some(unsafe { Waker::from_raw(RawWaker::new(waker.data(), &LOCAL_VTABLE)) })
}

/// Whether `kept`, a waker made by [`local_waker`], wakes the same task as `waker`.
#[inline]
pub(crate) fn same_task(kept: &Waker, waker: &Waker) -> bool {
    ptr::eq(kept.vtable(), &LOCAL_VTABLE)
        && ptr::eq(waker.vtable(), &WAKER_VTABLE)
        && ptr::eq(kept.data(), waker.data())
}

/// Whether `kept` was made by [`local_waker`].
#[cfg(test)]
pub(crate) fn is_local(kept: &Waker) -> bool {
    ptr::eq(kept.vtable(), &LOCAL_VTABLE)
}

/// The vtable of [`local_waker`]'s wakers. Only ever called on the task's owner thread
/// (`local_waker`'s contract).
static LOCAL_VTABLE: RawWakerVTable = RawWakerVTable::new(clone_local, wake_local, wake_by_ref_local, drop_local);

unsafe fn clone_local(data: *const ()) -> RawWaker {
    // A clone is an ordinary waker: it may go anywhere.
    // SAFETY: the local reference being cloned keeps the task alive.
    unsafe { retain(task_of(data)) };
    RawWaker::new(data, &WAKER_VTABLE)
}

unsafe fn wake_local(data: *const ()) {
    // SAFETY: the local reference keeps the task alive through both calls; owner thread.
    unsafe {
        wake_by_ref_local(data);
        drop_local(data);
    }
}

unsafe fn wake_by_ref_local(data: *const ()) {
    // SAFETY: the local reference keeps the task alive; owner thread.
    unsafe { wake_on_owner(task_of(data)) };
}

unsafe fn drop_local(data: *const ()) {
    let ptr = task_of(data);
    // SAFETY: the local reference keeps the task alive; owner thread.
    let h = unsafe { header(ptr) };
    let n = h.local_refs.get() - 1;
    h.local_refs.set(n);
    if n == 0 && h.state.get() & FINISHED != 0 {
        // SAFETY: the executor's reference, left by `finish` to the last local one.
        unsafe { release(ptr) };
    }
}

/// The handle's reference to a task, and its side of the output's hand-over.
pub(crate) struct RawHandle<T> {
    /// `None` once the output was taken (the reference is released then).
    ptr: Option<NonNull<Header>>,
    _out: PhantomData<T>,
}

// SAFETY: the handle touches only the atomics, the awaiter's mutex and, after `READY`, the
// output, which it moves out: sound from any thread when `T` may move between threads.
unsafe impl<T: Send> Send for RawHandle<T> {}
// SAFETY: `&RawHandle` only reads `join` (`is_finished`).
unsafe impl<T: Send> Sync for RawHandle<T> {}
// The handle never holds its output in place (it moves it out of the task).
impl<T> Unpin for RawHandle<T> {}

impl<T> RawHandle<T> {
    /// The output once the task finished (`Ready(None)` if it was cancelled; `Err` holds the
    /// message of the panic that ended it); `Pending` while it runs, after registering `cx`'s
    /// waker. Polled again after it was ready: `Ready(None)`.
    pub(crate) fn poll_output(&mut self, cx: &mut Context<'_>) -> Poll<Option<TaskOutput<T>>> {
        let Some(ptr) = self.ptr else { return Poll::Ready(None) };
        // SAFETY: the handle's reference keeps the task alive.
        let h = unsafe { header(ptr) };
        if h.join.load(Ordering::Acquire) & READY == 0 {
            *h.awaiter.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
            // The owner sets `READY` before it takes the awaiter: it either finds the waker
            // just stored, or finished before this look (see `finish`).
            if h.join.load(Ordering::Acquire) & READY == 0 {
                return Poll::Pending;
            }
        }
        // SAFETY: `READY` was seen (Acquire): the owner stored the output before and never
        // touches it again while the handle lives.
        let out = unsafe { output::<T>(ptr) }.take();
        self.ptr = None;
        // SAFETY: the handle's reference, not used afterwards; the awaiter is not needed.
        unsafe { release(ptr) };
        Poll::Ready(out)
    }

    /// Whether the task finished (or was cancelled).
    pub(crate) fn is_finished(&self) -> bool {
        // SAFETY: the handle's reference keeps the task alive.
        self.ptr.is_none_or(|p| unsafe { header(p) }.join.load(Ordering::Acquire) & READY != 0)
    }

    /// Asks for the task's cancellation: its future is dropped on its owner thread at its
    /// next run, which this schedules.
    pub(crate) fn cancel(&self) {
        if let Some(ptr) = self.ptr {
            // SAFETY: the handle's reference keeps the task alive.
            let h = unsafe { header(ptr) };
            h.cancel.store(true, Ordering::Release);
            // SAFETY: the handle's reference keeps the task alive through the wake.
            unsafe { wake_by_ref(ptr.as_ptr().cast()) };
        }
    }
}

impl<T> Drop for RawHandle<T> {
    /// Detaches the task: it runs on; an output it stores, or stored, is dropped.
    fn drop(&mut self) {
        let Some(ptr) = self.ptr.take() else { return };
        // SAFETY: the handle's reference keeps the task alive.
        let h = unsafe { header(ptr) };
        let prev = h.join.fetch_or(HANDLE_GONE, Ordering::AcqRel);
        if prev & READY != 0 {
            // The owner stored the output before it saw `HANDLE_GONE`: drop it here.
            // SAFETY: `READY` seen, and the owner no longer touches the output.
            contained(h, "a task's output panicked when dropped", || unsafe { (h.vtable.drop_output)(ptr) });
        }
        // SAFETY: the handle's reference, not used afterwards.
        unsafe { release(ptr) };
    }
}

#[cfg(test)]
mod tests {
    //! The task's state machine alone, with hooks of its own: the test's thread is the owner
    //! (its queue a thread-local), other threads' wakes land in `REMOTE`. Pure Rust, so Miri
    //! and ThreadSanitizer run these too (`scripts/sanitize.sh`).
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use super::*;

    thread_local! {
        static OWNER: Cell<bool> = const { Cell::new(false) };
        static LOCAL: RefCell<VecDeque<Runnable>> = const { RefCell::new(VecDeque::new()) };
    }
    /// Runnables queued from other threads. The tests that use it hold `SERIAL`.
    static REMOTE: Mutex<Vec<Runnable>> = Mutex::new(Vec::new());
    static SERIAL: Mutex<()> = Mutex::new(());

    fn schedule(r: Runnable) {
        if OWNER.with(Cell::get) {
            LOCAL.with(|q| q.borrow_mut().push_back(r));
        } else {
            REMOTE.lock().unwrap().push(r);
        }
    }

    fn on_owner(_: &TaskMeta) -> bool {
        OWNER.with(Cell::get)
    }

    fn report(msg: &str) {
        panic!("unexpected report: {msg}");
    }

    static TEST_HOOKS: Hooks = Hooks { schedule, schedule_local: schedule, on_owner, report };

    /// Makes this thread the owner; returns the guard of the remote queue.
    fn owner() -> std::sync::MutexGuard<'static, ()> {
        let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        OWNER.with(|o| o.set(true));
        REMOTE.lock().unwrap().clear();
        guard
    }

    fn local() -> Option<Runnable> {
        LOCAL.with(|q| q.borrow_mut().pop_front())
    }

    fn local_len() -> usize {
        LOCAL.with(|q| q.borrow().len())
    }

    fn remote() -> Vec<Runnable> {
        std::mem::take(&mut *REMOTE.lock().unwrap())
    }

    /// Counts its drops.
    struct Tracker(Arc<AtomicUsize>);
    impl Drop for Tracker {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Pending until `ready` is set, handing out its waker and counting its polls.
    struct Gate {
        ready: Arc<AtomicBool>,
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<Waker>>>,
        _drops: Tracker,
    }

    impl Future for Gate {
        type Output = Tracker;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Tracker> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                Poll::Ready(Tracker(self._drops.0.clone()))
            } else {
                *self.waker.lock().unwrap() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    struct Probe {
        ready: Arc<AtomicBool>,
        polls: Arc<AtomicUsize>,
        waker: Arc<Mutex<Option<Waker>>>,
        /// Drops of the future and of its output (the output shares the counter).
        drops: Arc<AtomicUsize>,
    }

    impl Probe {
        fn new() -> (Probe, Gate) {
            let p =
                Probe { ready: Arc::default(), polls: Arc::default(), waker: Arc::default(), drops: Arc::default() };
            let g = Gate {
                ready: p.ready.clone(),
                polls: p.polls.clone(),
                waker: p.waker.clone(),
                _drops: Tracker(p.drops.clone()),
            };
            (p, g)
        }

        fn polls(&self) -> usize {
            self.polls.load(Ordering::SeqCst)
        }

        fn drops(&self) -> usize {
            self.drops.load(Ordering::SeqCst)
        }

        fn waker(&self) -> Waker {
            self.waker.lock().unwrap().clone().expect("polled once")
        }
    }

    fn spawn_gate(g: Gate) -> (Runnable, RawHandle<Tracker>) {
        // SAFETY: spawned and run on this (the owner) thread.
        let s = unsafe { spawn(g, TaskMeta::new(None), &TEST_HOOKS) };
        (s.first_runnable(true), s.handle())
    }

    fn poll_handle<T>(h: &mut RawHandle<T>) -> Poll<Option<TaskOutput<T>>> {
        h.poll_output(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_task_runs_to_its_output_and_frees_itself() {
        let _g = owner();
        let (p, g) = Probe::new();
        let (r, mut h) = spawn_gate(g);
        assert!(!r.run());
        assert_eq!(p.polls(), 1);
        assert!(poll_handle(&mut h).is_pending());
        p.ready.store(true, Ordering::SeqCst);
        p.waker().wake();
        let r = local().expect("woken on the owner: queued locally");
        assert!(!r.run());
        assert_eq!(p.drops(), 1, "the future is dropped when it finishes");
        assert!(h.is_finished());
        let out = poll_handle(&mut h);
        assert!(matches!(out, Poll::Ready(Some(_))));
        drop(out);
        assert_eq!(p.drops(), 2, "and the output once taken");
        // The waker clone the future kept is the last reference (Miri checks the free).
        drop(p);
    }

    #[test]
    fn wakes_on_the_owner_queue_one_run() {
        let _g = owner();
        let (p, g) = Probe::new();
        let (r, mut h) = spawn_gate(g);
        r.run();
        let w = p.waker();
        w.wake_by_ref();
        w.wake_by_ref();
        assert_eq!(local_len(), 1, "one run queued for two wakes");
        p.ready.store(true, Ordering::SeqCst);
        local().unwrap().run();
        assert_eq!(p.polls(), 2);
        w.wake();
        assert_eq!(local_len(), 0, "a finished task is not queued");
        assert!(matches!(poll_handle(&mut h), Poll::Ready(Some(_))));
    }

    /// Wakes itself at its first poll (as `yield_now` does), ready at its second.
    struct YieldOnce(bool);

    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if std::mem::replace(&mut self.0, true) {
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    #[test]
    fn a_wake_while_running_queues_the_task_after_its_poll() {
        let _g = owner();
        // SAFETY: spawned and run on this (the owner) thread.
        let s = unsafe { spawn(YieldOnce(false), TaskMeta::new(None), &TEST_HOOKS) };
        let r = s.first_runnable(true);
        let mut h = s.handle();
        assert!(r.run(), "woken during its poll");
        assert_eq!(local_len(), 1);
        assert!(!local().unwrap().run());
        assert!(matches!(poll_handle(&mut h), Poll::Ready(Some(Ok(())))));
    }

    /// Panics at its first poll.
    struct Panics(#[allow(dead_code)] Tracker);

    impl Future for Panics {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            panic!("boom-4c1")
        }
    }

    #[test]
    fn a_panicking_task_finishes_with_its_message_and_its_future_dropped() {
        let _g = owner();
        let drops = Arc::new(AtomicUsize::new(0));
        // SAFETY: spawned and run on this (the owner) thread.
        let s = unsafe { spawn(Panics(Tracker(drops.clone())), TaskMeta::new(None), &TEST_HOOKS) };
        let r = s.first_runnable(true);
        let mut h = s.handle();
        assert!(!r.run(), "the panic is caught by the run");
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the future is dropped when it panics");
        assert!(h.is_finished());
        match poll_handle(&mut h) {
            Poll::Ready(Some(Err(msg))) => assert!(msg.contains("boom-4c1"), "{msg}"),
            _ => panic!("the handle reports the panic"),
        }
    }

    #[test]
    fn a_remote_wake_queues_a_counted_run_which_defers_to_a_queued_local_one() {
        let _g = owner();
        let (p, g) = Probe::new();
        let (r, mut h) = spawn_gate(g);
        r.run();
        let w = p.waker();
        std::thread::spawn(move || {
            w.wake_by_ref();
            w.wake_by_ref();
            w.wake();
        })
        .join()
        .unwrap();
        let mut counted = remote();
        assert_eq!(counted.len(), 1, "one counted run for three remote wakes");
        // A local wake meanwhile: the counted run defers to it.
        p.waker().wake_by_ref();
        counted.pop().unwrap().run();
        assert_eq!(p.polls(), 1, "the counted run deferred to the queued local one");
        local().unwrap().run();
        assert_eq!(p.polls(), 2);
        // A remote wake alone runs the task.
        p.ready.store(true, Ordering::SeqCst);
        let w = p.waker();
        std::thread::spawn(move || w.wake()).join().unwrap();
        remote().pop().unwrap().run();
        assert_eq!(p.polls(), 3);
        assert!(matches!(poll_handle(&mut h), Poll::Ready(Some(_))));
    }

    #[test]
    fn a_cancel_from_another_thread_drops_the_future_on_the_owner() {
        let _g = owner();
        let (p, g) = Probe::new();
        let (r, h) = spawn_gate(g);
        r.run();
        let h = std::thread::spawn(move || {
            h.cancel();
            h
        })
        .join()
        .unwrap();
        assert_eq!(p.drops(), 0, "not dropped on the cancelling thread");
        remote().pop().expect("the cancel woke the task").run();
        assert_eq!(p.drops(), 1);
        assert_eq!(p.polls(), 1, "cancelled without another poll");
        let mut h = h;
        assert!(matches!(poll_handle(&mut h), Poll::Ready(None)));
    }

    #[test]
    fn a_detached_task_drops_its_output_when_it_finishes() {
        let _g = owner();
        let (p, g) = Probe::new();
        let (r, h) = spawn_gate(g);
        r.run();
        drop(h);
        p.ready.store(true, Ordering::SeqCst);
        p.waker().wake();
        local().unwrap().run();
        assert_eq!(p.drops(), 2, "the future, then the output nobody will take");
    }

    #[test]
    fn dropping_a_runnable_cancels_its_task() {
        let _g = owner();
        let (p, g) = Probe::new();
        let (r, mut h) = spawn_gate(g);
        drop(r);
        assert_eq!((p.polls(), p.drops()), (0, 1));
        assert!(h.is_finished());
        assert!(matches!(poll_handle(&mut h), Poll::Ready(None)));
    }

    #[test]
    fn a_dropped_counted_runnable_leaves_the_cancel_to_the_queued_local_one() {
        let _g = owner();
        let (p, g) = Probe::new();
        let (r, mut h) = spawn_gate(g);
        r.run();
        let w = p.waker();
        std::thread::spawn(move || w.wake()).join().unwrap();
        p.waker().wake_by_ref();
        drop(remote().pop().unwrap());
        assert_eq!(p.drops(), 0, "the local run is still queued and points to the task");
        local().unwrap().run();
        assert_eq!((p.polls(), p.drops()), (1, 1), "cancelled by the local run, not polled");
        assert!(matches!(poll_handle(&mut h), Poll::Ready(None)));
    }

    /// What a completion slot keeps of each poll's waker: a local reference (and a counted
    /// clone, to look at from another thread). Ready at its `polls`-th poll.
    struct KeepsLocal {
        polls: usize,
        kept: Kept,
    }

    /// Each poll's local reference, and the last poll's waker.
    type Kept = Rc<RefCell<(Vec<Waker>, Option<Waker>)>>;

    impl Future for KeepsLocal {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let mut kept = self.kept.borrow_mut();
            // SAFETY: the local wakers stay on this (the owner) thread.
            kept.0.push(unsafe { local_waker(cx.waker(), on_owner) }.expect("our task, on its owner thread"));
            kept.1 = Some(cx.waker().clone());
            drop(kept);
            self.polls -= 1;
            if self.polls == 0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    fn spawn_keeps_local(polls: usize) -> (Runnable, RawHandle<()>, Kept) {
        let kept = Rc::default();
        // SAFETY: spawned and run on this (the owner) thread.
        let s = unsafe { spawn(KeepsLocal { polls, kept: Rc::clone(&kept) }, TaskMeta::new(None), &TEST_HOOKS) };
        (s.first_runnable(true), s.handle(), kept)
    }

    #[test]
    fn a_local_reference_wakes_its_task_and_outlives_its_finish() {
        let _g = owner();
        // SAFETY: (all `local_waker` calls here) the local wakers stay on this thread.
        assert!(unsafe { local_waker(Waker::noop(), on_owner) }.is_none(), "not one of our tasks");
        let (r, mut h, kept) = spawn_keeps_local(2);
        assert!(!r.run());
        let first = kept.borrow_mut().0.pop().unwrap();
        let waker = kept.borrow_mut().1.take().unwrap();
        assert!(is_local(&first) && same_task(&first, &waker) && !same_task(&first, Waker::noop()));
        let off_owner = std::thread::spawn(move || {
            // SAFETY: off the owner thread it makes none.
            let none = unsafe { local_waker(&waker, on_owner) }.is_none();
            (none, waker)
        });
        let (none, waker) = off_owner.join().unwrap();
        assert!(none, "no local reference off the owner thread");
        first.wake();
        assert_eq!(local_len(), 1, "woken by the local reference: queued locally");
        // The second poll keeps another local reference, and the task finishes.
        assert!(!local().unwrap().run());
        assert!(matches!(poll_handle(&mut h), Poll::Ready(Some(Ok(())))));
        drop(h);
        // SAFETY: a finished task has none to send anywhere.
        assert!(unsafe { local_waker(&waker, on_owner) }.is_none(), "a finished task has none");
        drop(waker);
        // Only the local reference keeps the allocation now: its wake does nothing, and its
        // drop frees the task (Miri checks both the use and the free).
        let last = kept.borrow_mut().0.pop().unwrap();
        last.wake();
        assert_eq!(local_len(), 0, "a finished task is not queued");
    }

    #[test]
    fn a_task_cancelled_while_a_local_reference_remains_is_freed_by_it() {
        let _g = owner();
        let (r, mut h, kept) = spawn_keeps_local(2);
        assert!(!r.run());
        kept.borrow_mut().1 = None;
        h.cancel();
        local().expect("the cancel wakes the task").run();
        assert!(matches!(poll_handle(&mut h), Poll::Ready(None)));
        drop(h);
        // The future (and its `Rc`) is gone; the local reference holds the allocation.
        assert_eq!(Rc::strong_count(&kept), 1);
        let local_ref = kept.borrow_mut().0.pop().unwrap();
        drop(local_ref);
    }
}
