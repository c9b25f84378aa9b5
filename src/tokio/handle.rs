//! The handle style: tokio tasks on any thread run jobs on an async-doca runtime's executors.
//!
//! A job is a `Send` closure; the executor it is sent to calls it and awaits the (possibly
//! `!Send`) future it returns, so DOCA objects are created, used and dropped on their owning
//! executor only. The job's output crosses back through its task's completion (the
//! [`JoinHandle`], a one-shot channel that wakes the tokio task).
//!
//! Back-pressure: a semaphore of `max_in_flight` permits; a job takes one before it is sent
//! and holds it until its future is gone: the permit travels with the output and the caller
//! gives it back when it has the result (so the semaphore's cache line stays on the
//! callers' side), and a cancelled job's task drops it with the future, on the executor. A
//! caller waits, in tokio, while the executors already have that many jobs. Cancellation: dropping
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
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::tokio::sync::{oneshot, Semaphore};

use crate::error::{Error, ErrorKind, Result};
use crate::executor::{Handle, JoinHandle};

/// The default of [`BridgeBuilder::max_in_flight`]: per executor.
pub const DEFAULT_IN_FLIGHT_PER_EXECUTOR: usize = 256;

/// The default of [`BridgeBuilder::spin`].
pub const DEFAULT_BRIDGE_SPIN: Duration = Duration::from_micros(10);

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
    spin: Duration,
    /// Whether watching pays off lately (see [`SpinCredit`]).
    credit: SpinCredit,
}

/// Configures a [`Bridge`].
#[derive(Debug)]
#[must_use = "call build() to get the bridge"]
pub struct BridgeBuilder {
    handle: Handle,
    max_in_flight: Option<usize>,
    spin: Duration,
}

impl BridgeBuilder {
    /// How many jobs may be in flight on the executors at once (at least 1); further callers
    /// wait for a job to end. Default: [`DEFAULT_IN_FLIGHT_PER_EXECUTOR`] per executor.
    pub fn max_in_flight(mut self, n: usize) -> BridgeBuilder {
        self.max_in_flight = Some(n.max(1));
        self
    }

    /// How long a caller watches its job after sending it before it lets its tokio task
    /// sleep (default [`DEFAULT_BRIDGE_SPIN`]; zero: never). Most DOCA jobs finish within a few
    /// microseconds; one that finishes while its caller still watches comes back without the
    /// two wake-ups (the tokio task going to sleep, the executor waking it: a `futex` or an
    /// `eventfd` and a thread switch each, several microseconds on any machine). The price is
    /// that the tokio worker thread runs nothing else for up to this long per job, so a
    /// tokio runtime sharing its CPUs with the executors (or one running many unrelated tasks)
    /// may want less.
    pub fn spin(mut self, spin: Duration) -> BridgeBuilder {
        self.spin = spin;
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
                spin: self.spin,
                credit: SpinCredit::new(),
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

/// Watches `h` for up to `spin` (see [`BridgeBuilder::spin`]): returns as soon as the task
/// finished (true), so that awaiting it then is ready at its first poll, and neither side
/// sleeps; false when `spin` ran out first. The handle is never polled here, so no waker is
/// registered and a job finishing in time wakes nobody.
fn watch<T>(h: &JoinHandle<T>, spin: Duration) -> bool {
    if spin.is_zero() {
        return false;
    }
    let mut start = None;
    loop {
        // The clock is read once per 64 looks: a look is one atomic load.
        for _ in 0..64 {
            if h.is_finished() {
                return true;
            }
            std::hint::spin_loop();
        }
        let now = Instant::now();
        if now.duration_since(*start.get_or_insert(now)) >= spin {
            return false;
        }
    }
}

/// Decides whether a caller watches its job (an adaptive spin, as adaptive mutexes do).
///
/// Watching only pays when the executor runs while the caller watches. When the caller's
/// thread shares its CPU with the executor (more busy threads than CPUs), the job cannot run
/// until the caller stops, so every watch would cost the whole [`BridgeBuilder::spin`] for
/// nothing. So a watch that ran out costs credit, one that caught its job earns it; without
/// credit callers stop watching, and one job in [`SpinCredit::PROBE_EVERY`] watches anyway to
/// find out whether things changed.
struct SpinCredit {
    credit: AtomicI32,
    jobs: AtomicU32,
}

impl SpinCredit {
    /// Credit at start, and the most a run of successes earns.
    const MAX: i32 = 8;
    /// What a watch that ran out costs.
    const MISS: i32 = 4;
    /// Without credit, one job in this many watches.
    const PROBE_EVERY: u32 = 64;

    fn new() -> SpinCredit {
        SpinCredit { credit: AtomicI32::new(Self::MAX), jobs: AtomicU32::new(0) }
    }

    fn should_watch(&self) -> bool {
        // Relaxed: a hint; a stale value only makes one watch more or less.
        self.credit.load(Ordering::Relaxed) > 0 || self.jobs.fetch_add(1, Ordering::Relaxed) % Self::PROBE_EVERY == 0
    }

    fn record(&self, finished: bool) {
        let c = self.credit.load(Ordering::Relaxed);
        let next = if finished { (c.max(0) + 1).min(Self::MAX) } else { c - Self::MISS };
        self.credit.store(next.max(-Self::MAX), Ordering::Relaxed);
    }
}

impl Bridge {
    /// A bridge with the default configuration.
    pub fn new(handle: Handle) -> Bridge {
        Bridge::builder(handle).build()
    }

    /// Configures a bridge to the runtime of `handle`.
    pub fn builder(handle: Handle) -> BridgeBuilder {
        BridgeBuilder { handle, max_in_flight: None, spin: DEFAULT_BRIDGE_SPIN }
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
                // The permit comes back with the output and is given back here, on the
                // caller's thread, so the semaphore's cache line stays with the callers: a
                // release on the executor moved it there and back on every job (two
                // cross-CPU transfers, ~200 ns each on the test VM). A job cancelled or
                // dropped on the executor drops its permit there, with its future.
                let out = fut.await;
                (out, permit)
            }
        })?;
        let mut guard = CancelOnDrop(Some(h));
        let h = guard.0.as_mut().expect("set above");
        if self.inner.credit.should_watch() {
            let finished = watch(h, self.inner.spin);
            self.inner.credit.record(finished);
        }
        let out = h.await;
        // Finished: nothing to cancel (dropping a finished handle is a no-op anyway).
        guard.0 = None;
        let (out, permit) = out?;
        drop(permit);
        out
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

#[cfg(test)]
mod tests {
    use super::SpinCredit;

    #[test]
    fn spin_credit_stops_watching_after_misses_and_probes_to_come_back() {
        let c = SpinCredit::new();
        assert!(c.should_watch(), "watches at start");
        // Two misses use up the starting credit: callers stop watching...
        c.record(false);
        c.record(false);
        let watched = (0..SpinCredit::PROBE_EVERY * 4).filter(|_| c.should_watch()).count();
        // ...except one probe in PROBE_EVERY jobs.
        assert_eq!(watched, 4);
        // Probes that catch their jobs earn the credit back.
        for _ in 0..SpinCredit::MAX * 2 {
            c.record(true);
        }
        assert!((0..10).all(|_| c.should_watch()));
    }
}
