//! Tasks: the wrapper every spawned future runs in, the three ways to spawn, [`JoinHandle`].
//!
//! A task is one allocation holding the future and its output ([`raw`]: its states, who
//! touches what, and why it is ours rather than `async-task`'s). Its schedule function
//! ([`local::schedule`]) sends a `Runnable` to the owning executor: to the local run queue
//! when the waker fires on the owner's thread (no atomic on the way), to the injection queue
//! otherwise. Only the owning executor's thread pops its queues, so a task's future is polled
//! and dropped on that thread; that is what makes `!Send` futures (`spawn_local`, `spawn_on`)
//! sound.
//!
//! The first poll of a `spawn_local` task's [`JoinHandle`] may run the task on the spot
//! (`Core::run_inline`): when the task is queued (typically: spawned and not run yet) and
//! alone in the local queue, most such tasks finish on that run and the handle is ready
//! without an awaiter round trip.
//!
//! A task's run catches the panics of its future ([`raw`]), so that a panicking task completes
//! its `JoinHandle` with an error instead of killing the executor thread. Every future is
//! wrapped in [`Tracked`], which registers the task's waker with its executor the first time
//! it returns `Pending`, so that shutdown can bring back and drop every idle task (see
//! [`local`]).
//!
//! [`local`]: super::local
//! [`local::schedule`]: super::local::schedule

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::local::{self, with_current, Core, Shared};
use crate::error::{Error, ErrorKind, Result};

mod raw;

/// The output of a task as stored in its allocation ([`raw`]): the future's output, or the
/// message of the panic that ended it.
pub(crate) type TaskOutput<T> = std::result::Result<T, String>;

/// What every task carries in its allocation: the executor it belongs to (`None` only for a
/// task cancelled at spawn, which is never scheduled). The schedule function and the owner
/// check read it (see [`local::schedule`]).
pub(crate) struct TaskMeta {
    shared: Option<Arc<Shared>>,
}

impl TaskMeta {
    pub(crate) fn new(shared: Option<Arc<Shared>>) -> TaskMeta {
        TaskMeta { shared }
    }

    pub(crate) fn shared(&self) -> Option<&Arc<Shared>> {
        self.shared.as_ref()
    }

    pub(crate) fn owner(&self) -> Option<&Shared> {
        self.shared.as_deref()
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) use raw::is_local;
pub(crate) use raw::{local_waker, same_task, wake_local_into, Runnable};

/// What our tasks need from their executor (see [`raw::Hooks`]).
static HOOKS: raw::Hooks = raw::Hooks {
    schedule: local::schedule,
    schedule_local: local::schedule_local,
    on_owner: local::on_owner,
    report: local::report,
};

pin_project! {
    /// The wrapper of every task future: its registration with the executor for shutdown.
    /// (Panics are caught by the task's run, in the same frame as the poll: see `raw`.)
    pub(crate) struct Tracked<F> {
        #[pin]
        fut: F,
        exec: u64,
        // Key in the executor's task registry; 0 until the first `Pending`.
        key: u64,
    }

    impl<F> PinnedDrop for Tracked<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.key != 0 {
                let (exec, key) = (*this.exec, *this.key);
                with_current(|core| {
                    if core.shared.id == exec {
                        core.unregister_task(key);
                    }
                });
            }
        }
    }
}

impl<F> Tracked<F> {
    fn new(fut: F, exec: u64) -> Tracked<F> {
        Tracked { fut, exec, key: 0 }
    }
}

/// The message of a caught panic, for the task's handle.
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let msg = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(panic payload is not a string)".to_owned()
    };
    // A payload whose destructor panics must not escape either.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    msg
}

impl<F: Future> Future for Tracked<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let polled = this.fut.poll(cx);
        if polled.is_pending() && *this.key == 0 {
            *this.key = register(*this.exec, cx);
        }
        polled
    }
}

/// Registers the task of `cx` with its executor `exec` at its first `Pending` (once per task:
/// out of line); returns its key, 0 when not on that executor.
#[inline(never)]
fn register(exec: u64, cx: &Context<'_>) -> u64 {
    with_current(|core| (core.shared.id == exec).then(|| core.register_task(cx.waker().clone()))).flatten().unwrap_or(0)
}

pin_project! {
    /// A `spawn_on` task: the `Send` factory travels to the executor, which builds the
    /// (possibly `!Send`) future on its own thread at the first poll.
    #[project = SpawnOnProj]
    enum SpawnOn<Fac, Fut> {
        Factory { factory: Option<Fac> },
        Running { #[pin] fut: Fut },
    }
}

impl<Fac, Fut> Future for SpawnOn<Fac, Fut>
where
    Fac: FnOnce() -> Fut,
    Fut: Future,
{
    type Output = Fut::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Fut::Output> {
        if let SpawnOnProj::Factory { factory } = self.as_mut().project() {
            let f = factory.take().expect("spawn_on factory already used");
            self.set(SpawnOn::Running { fut: f() });
        }
        match self.project() {
            SpawnOnProj::Running { fut } => fut.poll(cx),
            SpawnOnProj::Factory { .. } => unreachable!("spawn_on future was just built"),
        }
    }
}

/// Spawns a `!Send` future on `core` (the calling thread's executor).
pub(crate) fn spawn_local_in<F>(core: &Core, fut: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let fut = Tracked::new(fut, core.shared.id);
    // SAFETY: a `!Send` future must be polled and dropped on the spawning thread. This is the
    // executor's thread (`core` is the current executor): the first runnable goes straight to
    // its local queue, and `schedule` routes every later one to this executor's queues, which
    // only this thread pops, to run or drop. The one exception, the `Notify::Closed` path of
    // `Shared::unpark`, drops a counted runnable on the pushing thread; `Runnable`'s `Drop`
    // then cancels the task only if it never ran (a task that ran may hold `!Send` state).
    let spawned = unsafe { raw::spawn(fut, TaskMeta::new(Some(core.shared.clone())), &HOOKS) };
    let runnable = spawned.first_runnable(true);
    let addr = runnable.addr();
    core.push_local(runnable);
    JoinHandle { task: Some(spawned.handle()), runnable: addr }
}

/// Spawns a `Send` future on the executor of `shared`, from any thread.
pub(crate) fn spawn_send<F>(shared: &Arc<Shared>, fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let fut = Tracked::new(fut, shared.id);
    let meta = TaskMeta::new(Some(shared.clone()));
    let on_owner = local::on_owner(&meta);
    // SAFETY: the future and its output are `Send`: no thread constraint.
    let spawned = unsafe { raw::spawn(fut, meta, &HOOKS) };
    local::schedule(spawned.first_runnable(on_owner));
    JoinHandle::new(spawned.handle())
}

/// Spawns `factory()` on the executor of `shared`, from any thread.
pub(crate) fn spawn_factory<Fac, Fut>(shared: &Arc<Shared>, factory: Fac) -> JoinHandle<Fut::Output>
where
    Fac: FnOnce() -> Fut + Send + 'static,
    Fut: Future + 'static,
    Fut::Output: Send + 'static,
{
    let fut = Tracked::new(SpawnOn::Factory { factory: Some(factory) }, shared.id);
    let meta = TaskMeta::new(Some(shared.clone()));
    let on_owner = local::on_owner(&meta);
    // SAFETY: the future is `!Send` only in its `Running` state. It leaves this thread in its
    // `Factory` state (which holds nothing but the `Send` factory) inside the runnable, and is
    // first polled, i.e. turned `Running`, on the executor of `shared`; from then on every
    // runnable of the task is routed to that executor's queues and run or dropped by its
    // thread (see `spawn_local_in` for the argument, including the closed-queue path, which
    // only ever cancels never-polled tasks, i.e. `Factory` states). The output is `Send`, as
    // the `JoinHandle` may be awaited anywhere; the schedule function and the metadata are
    // `Send + Sync`.
    let spawned = unsafe { raw::spawn(fut, meta, &HOOKS) };
    local::schedule(spawned.first_runnable(on_owner));
    JoinHandle::new(spawned.handle())
}

/// A handle whose task was cancelled before it ran (spawning into a closed runtime): the
/// future is dropped here, and the handle reports the cancellation.
pub(crate) fn cancelled<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    // SAFETY: `Send` future and output; the task has no executor, so it is cancelled at once.
    let spawned = unsafe { raw::spawn(fut, TaskMeta::new(None), &HOOKS) };
    // Dropping its first runnable cancels it, here.
    drop(spawned.first_runnable(true));
    JoinHandle::new(spawned.handle())
}

/// An owned permission to await a spawned task's output.
///
/// `JoinHandle<T>` is a future resolving to `Result<T>`:
/// * `Ok(value)` when the task finished;
/// * `Err` of kind [`ErrorKind::Other`] when the task panicked (the panic is caught on the
///   executor, which keeps running; the message is in the error's context);
/// * `Err` of kind [`ErrorKind::Cancelled`] when the task was dropped before finishing
///   (its executor shut down).
///
/// Awaiting the handle of a [`spawn_local`](crate::spawn_local) task for the first time,
/// while the task is the only one queued on its executor (the usual case right after
/// spawning it), runs the task at once, inside the awaiting poll, instead of going round the executor's
/// loop: it is the next task the executor would have run anyway. Such runs count against
/// the executor's task batch, never nest, and never happen inside DOCA progress.
///
/// Dropping a `JoinHandle` **detaches** the task: it keeps running to completion and its
/// output is dropped. That is why this type is not `#[must_use]`. To stop the task, call
/// [`cancel`](JoinHandle::cancel).
///
/// ```
/// use async_doca::{ErrorKind, Runtime};
///
/// let rt = Runtime::new()?;
/// let answer = rt.block_on(async {
///     let h = async_doca::spawn_local(async { 6 * 7 });
///     h.await
/// })?;
/// assert_eq!(answer, 42);
///
/// // Panics are reported, not propagated. (`spawn_local` must run inside the executor,
/// // hence the `async` block around it.)
/// let err = rt.block_on(async { async_doca::spawn_local(async { panic!("boom") }).await }).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Other);
/// assert!(err.context().contains("boom"));
/// # Ok::<(), async_doca::Error>(())
/// ```
pub struct JoinHandle<T> {
    task: Option<raw::RawHandle<T>>,
    /// For a `spawn_local` task whose handle was not polled yet: the address of the task,
    /// by which the first poll recognizes the task's runnable in the local queue (see
    /// `poll`; the handle keeps the task allocated, so no other task has this address). 0
    /// otherwise. An address, not a pointer: the handle stays `Send` when `T` is.
    runnable: usize,
}

impl<T> JoinHandle<T> {
    fn new(task: raw::RawHandle<T>) -> JoinHandle<T> {
        JoinHandle { task: Some(task), runnable: 0 }
    }

    /// Cancels the task. Its future is dropped on its own executor's thread, the next time
    /// that executor takes the task from its queues (this queues it if it is idle; a running
    /// task is queued again after its current poll), without being polled again. DOCA work it
    /// started follows the rules of the future that owns it (dropping a DOCA operation
    /// future keeps memory the provider may write alive until the completion arrives).
    pub fn cancel(mut self) {
        if let Some(t) = self.task.take() {
            t.cancel();
        }
    }

    /// Lets the task run to completion on its own; its output is dropped. Same as dropping
    /// the handle, spelled out.
    pub fn detach(mut self) {
        // Dropping the raw handle detaches.
        drop(self.task.take());
    }

    /// Whether the task has finished (its output is ready, or it was cancelled).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        if self.runnable != 0 {
            // The first poll of the handle of a local task: if the task is queued (typically
            // not run yet) and is the only task queued on this executor (so the next one it
            // would run), run it right here, as `run_inline` explains. Most such tasks finish on that first run, and
            // the handle is then ready without registering itself with the task, being woken
            // by it and polled again.
            let id = std::mem::take(&mut self.runnable);
            with_current(|core| core.run_inline(id));
        }
        let Some(task) = self.task.as_mut() else {
            return Poll::Ready(Err(Error::new(ErrorKind::Cancelled, "task handle already used")));
        };
        match task.poll_output(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(out) => {
                self.task = None;
                Poll::Ready(match out {
                    Some(Ok(v)) => Ok(v),
                    Some(Err(msg)) => Err(Error::new(ErrorKind::Other, format!("task panicked: {msg}"))),
                    None => Err(Error::new(
                        ErrorKind::Cancelled,
                        "task cancelled before it finished (its executor shut down)",
                    )),
                })
            }
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle").field("finished", &self.is_finished()).finish()
    }
}
