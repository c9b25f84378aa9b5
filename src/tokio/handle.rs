//! The handle style: tokio tasks on any thread run jobs on an async-doca runtime's executors.
//!
//! A job is a `Send` closure; the executor it is sent to calls it and awaits the (possibly
//! `!Send`) future it returns, so DOCA objects are created, used and dropped on their owning
//! executor only. The job's output crosses back through its task's completion (the
//! [`JoinHandle`], a one-shot channel that wakes the tokio task).
//!
//! Back-pressure: a semaphore of `max_in_flight` permits; a job takes one before it is sent
//! and its task gives it back when its future is gone (finished or cancelled), so a caller
//! waits, in tokio, while the executors already have that many jobs. Cancellation: dropping
//! the awaiting future cancels the job's task; the executor drops the job's future on its
//! own thread, and DOCA operations in flight follow the usual rule (their memory stays
//! alive in the completion slot until DOCA is done with it).
//!
//! [`Pinned`] keeps a `!Send` state (connections, registered memory) on one executor: a
//! holder task owns it (so the executor's shutdown drops it in order, on its thread), and
//! jobs find it through a thread-local table of weak references.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ::tokio::sync::{oneshot, Semaphore};

use crate::error::{Error, ErrorKind, Result};
use crate::executor::{Handle, JoinHandle};

/// The default of [`BridgeBuilder::max_in_flight`]: per executor.
pub const DEFAULT_IN_FLIGHT_PER_EXECUTOR: usize = 256;

/// A `Send + Sync + Clone` handle through which tokio tasks run work on an async-doca
/// runtime (see the [module documentation](crate::tokio)).
///
/// ```
/// use async_doca::{sync_event::SyncEvent, tokio::Bridge, Device, Runtime};
///
/// let rt = Runtime::builder().cpus("0".parse()?).build()?;
/// let bridge = Bridge::new(rt.handle());
/// let tokio_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
/// let v = tokio_rt.block_on(async move {
///     // From any tokio worker thread: the closure runs on the executor of CPU 0.
///     bridge
///         .run_on(0, || async {
///             let dev = Device::open_default()?;
///             let ev = SyncEvent::builder(&dev).build().await?;
///             ev.add(5).await?;
///             ev.get().await
///         })
///         .await
/// })?;
/// assert_eq!(v, 5);
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

struct Inner {
    handle: Handle,
    cpus: Vec<usize>,
    permits: Arc<Semaphore>,
    max: usize,
    next: AtomicUsize,
}

/// Configures a [`Bridge`].
#[derive(Debug)]
#[must_use = "call build() to get the bridge"]
pub struct BridgeBuilder {
    handle: Handle,
    max_in_flight: Option<usize>,
}

impl BridgeBuilder {
    /// How many jobs may be in flight on the executors at once (at least 1); further callers
    /// wait for a job to end. Default: [`DEFAULT_IN_FLIGHT_PER_EXECUTOR`] per executor.
    pub fn max_in_flight(mut self, n: usize) -> BridgeBuilder {
        self.max_in_flight = Some(n.max(1));
        self
    }

    /// The bridge.
    pub fn build(self) -> Bridge {
        let cpus: Vec<usize> = self.handle.cpus().iter().collect();
        let max = self.max_in_flight.unwrap_or(DEFAULT_IN_FLIGHT_PER_EXECUTOR * cpus.len().max(1));
        Bridge {
            inner: Arc::new(Inner {
                handle: self.handle,
                cpus,
                permits: Arc::new(Semaphore::new(max)),
                max,
                next: AtomicUsize::new(0),
            }),
        }
    }
}

/// Cancels the task of a job whose awaiting future is dropped before the job ended.
struct CancelOnDrop<T>(Option<JoinHandle<T>>);

impl<T> Drop for CancelOnDrop<T> {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.cancel();
        }
    }
}

impl Bridge {
    /// A bridge with the default configuration.
    pub fn new(handle: Handle) -> Bridge {
        Bridge::builder(handle).build()
    }

    /// Configures a bridge to the runtime of `handle`.
    pub fn builder(handle: Handle) -> BridgeBuilder {
        BridgeBuilder { handle, max_in_flight: None }
    }

    /// The runtime this bridge sends work to.
    pub fn handle(&self) -> &Handle {
        &self.inner.handle
    }

    /// See [`BridgeBuilder::max_in_flight`].
    pub fn max_in_flight(&self) -> usize {
        self.inner.max
    }

    /// Jobs in flight now (their tasks not yet ended).
    pub fn in_flight(&self) -> usize {
        self.inner.max - self.inner.permits.available_permits()
    }

    /// Runs `job` on one of the runtime's executors (round-robin) and returns its output.
    /// See [`run_on`](Bridge::run_on).
    pub async fn run<Job, Fut, T>(&self, job: Job) -> Result<T>
    where
        Job: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + 'static,
        T: Send + 'static,
    {
        let cpus = &self.inner.cpus;
        if cpus.is_empty() {
            return Err(Error::new(ErrorKind::BadState, "tokio::Bridge: the runtime has no executor"));
        }
        let cpu = cpus[self.inner.next.fetch_add(1, Ordering::Relaxed) % cpus.len()];
        self.run_on(cpu, job).await
    }

    /// Runs `job` on the executor of `cpu`: waits for a permit (back-pressure), sends the
    /// closure there, which builds its future on the executor's thread (it may create and
    /// own DOCA objects), and returns the future's output. Errors: the job's own, a panic
    /// of the job (`ErrorKind::Other`), no executor on `cpu` (`InvalidArgument`), the
    /// runtime shut down (`Cancelled`). Dropping the returned future cancels the job.
    pub async fn run_on<Job, Fut, T>(&self, cpu: usize, job: Job) -> Result<T>
    where
        Job: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + 'static,
        T: Send + 'static,
    {
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::new(ErrorKind::BadState, "tokio::Bridge: closed"))?;
        let h = self.inner.handle.spawn_on(cpu, move || {
            let fut = job();
            async move {
                // Given back when the task's future is gone: finished, or cancelled and
                // dropped on the executor.
                let _permit = permit;
                fut.await
            }
        })?;
        let mut guard = CancelOnDrop(Some(h));
        let out = guard.0.as_mut().expect("set above").await;
        // Finished: nothing to cancel (dropping a finished handle is a no-op anyway).
        guard.0 = None;
        out?
    }

    /// Creates a state on the executor of `cpu` with `init` (run there) and returns a
    /// `Send + Sync + Clone` handle to it. The state stays on that executor until the last
    /// handle is dropped (then it is dropped there) or the runtime shuts down.
    ///
    /// ```
    /// use async_doca::{sync_event::SyncEvent, tokio::Bridge, Device, Runtime};
    ///
    /// let rt = Runtime::builder().cpus("0".parse()?).build()?;
    /// let bridge = Bridge::new(rt.handle());
    /// let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// tokio_rt.block_on(async move {
    ///     let ev = bridge
    ///         .pin(0, || async { SyncEvent::builder(&Device::open_default()?).build().await })
    ///         .await?;
    ///     for _ in 0..3 {
    ///         ev.run(|ev| async move { ev.add(1).await }).await?;
    ///     }
    ///     assert_eq!(ev.run(|ev| async move { ev.get().await }).await?, 3);
    ///     Ok::<_, async_doca::Error>(())
    /// })?;
    /// # Ok::<(), async_doca::Error>(())
    /// ```
    pub async fn pin<S, Init, Fut>(&self, cpu: usize, init: Init) -> Result<Pinned<S>>
    where
        S: 'static,
        Init: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<S>> + 'static,
    {
        static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        let (ready_tx, ready_rx) = oneshot::channel::<Result<()>>();
        let (release_tx, release_rx) = oneshot::channel::<()>();
        self.inner
            .handle
            .spawn_on(cpu, move || async move {
                let state = match init().await {
                    Ok(s) => Rc::new(s),
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let weak: Weak<dyn Any> = Rc::downgrade(&state) as Weak<dyn Any>;
                STATES.with(|m| m.borrow_mut().insert(key, weak));
                // Removes the entry however this task ends (released, or cancelled by the
                // executor's shutdown).
                struct Unregister(u64);
                impl Drop for Unregister {
                    fn drop(&mut self) {
                        let _ = STATES.try_with(|m| m.borrow_mut().remove(&self.0));
                    }
                }
                let _unregister = Unregister(key);
                if ready_tx.send(Ok(())).is_ok() {
                    // Until every `Pinned` is gone (the sender is dropped with the last).
                    let _ = release_rx.await;
                }
                drop(state);
            })?
            .detach();
        match ready_rx.await {
            Ok(Ok(())) => Ok(Pinned {
                inner: Arc::new(PinnedInner { bridge: self.clone(), cpu, key, _release: release_tx }),
                _state: PhantomData,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::new(ErrorKind::Cancelled, "tokio::Bridge::pin: the executor shut down")),
        }
    }
}

impl fmt::Debug for Bridge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bridge")
            .field("cpus", &self.inner.cpus)
            .field("max_in_flight", &self.inner.max)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

thread_local! {
    /// The pinned states of this executor, by key. Weak: the holder task owns each one.
    static STATES: RefCell<HashMap<u64, Weak<dyn Any>>> = RefCell::new(HashMap::new());
}

/// A `Send + Sync + Clone` handle to a state of type `S` that lives on one executor (see
/// [`Bridge::pin`]). Jobs run there with an `Rc<S>`.
pub struct Pinned<S: 'static> {
    inner: Arc<PinnedInner>,
    _state: PhantomData<fn() -> S>,
}

struct PinnedInner {
    bridge: Bridge,
    cpu: usize,
    key: u64,
    /// Dropped with the last handle: tells the holder task to drop the state.
    _release: oneshot::Sender<()>,
}

impl<S: 'static> Clone for Pinned<S> {
    fn clone(&self) -> Self {
        Pinned { inner: self.inner.clone(), _state: PhantomData }
    }
}

impl<S: 'static> fmt::Debug for Pinned<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pinned").field("cpu", &self.inner.cpu).field("key", &self.inner.key).finish()
    }
}

impl<S: 'static> Pinned<S> {
    /// The CPU of the executor that holds the state.
    pub fn cpu(&self) -> usize {
        self.inner.cpu
    }

    /// Runs `job` with the state on its executor (as [`Bridge::run_on`]: back-pressure,
    /// errors, cancellation on drop).
    pub async fn run<Job, Fut, T>(&self, job: Job) -> Result<T>
    where
        Job: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + 'static,
        T: Send + 'static,
    {
        let key = self.inner.key;
        self.inner
            .bridge
            .run_on(self.inner.cpu, move || async move {
                let state = STATES
                    .with(|m| m.borrow().get(&key).and_then(Weak::upgrade))
                    .and_then(|s| s.downcast::<S>().ok())
                    .ok_or_else(|| Error::new(ErrorKind::Cancelled, "tokio::Pinned: the state is gone"))?;
                job(state).await
            })
            .await
    }
}
