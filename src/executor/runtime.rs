//! [`Runtime`], its [`Builder`] and [`Handle`]: the set of pinned executor threads.
//!
//! A runtime owns one worker thread per CPU of its [`CpuSet`], named `async-doca-cpuN` and
//! pinned to exactly CPU N. Each worker creates its executor (PE, poll, queues) on its own
//! thread and runs it until shutdown. [`Runtime::block_on`] runs a future on the *calling*
//! thread inside a temporary executor of its own (same loop, own PE, not pinned), so the
//! future may be `!Send` and may create DOCA objects; tasks it spawns with
//! [`spawn_local`](crate::spawn_local) run there and are cancelled when `block_on` returns.
//!
//! Dropping or [shutting down](Runtime::shutdown) the runtime stops every worker: each
//! cancels its tasks, stops and destroys its contexts and its PE, then the threads are
//! joined. [`Handle`]s outlive the runtime harmlessly: what they spawn afterwards is
//! cancelled at once.

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::Duration;

use super::cpuset::CpuSet;
use super::local::{self, Config, Core, Enter, Shared, ShutdownGuard};
use super::task::{self, JoinHandle};
use crate::error::{Error, ErrorKind, Result};

/// The default spin budget of [`IdleMode::Adaptive`].
pub const DEFAULT_SPIN: Duration = Duration::from_micros(5);

/// The default number of tasks an executor runs before it looks at the PE again.
pub const DEFAULT_TASK_BATCH: usize = 64;

/// What an executor does when it has nothing to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleMode {
    /// Sleep at once in `epoll` on the PE notification fd, timers and remote wake-ups.
    /// Lowest CPU use; each wake-up costs a syscall or two.
    Event,
    /// Never sleep: keep polling the PE, the queues and the timers (100% of its CPU).
    /// Lowest latency.
    Polling,
    /// Poll for the given budget, then sleep as in [`Event`](IdleMode::Event). The default
    /// ([`DEFAULT_SPIN`]).
    Adaptive(Duration),
}

impl Default for IdleMode {
    fn default() -> IdleMode {
        IdleMode::Adaptive(DEFAULT_SPIN)
    }
}

/// Configures and builds a [`Runtime`].
///
/// ```
/// use std::time::Duration;
/// use async_doca::{IdleMode, Runtime};
///
/// let rt = Runtime::builder()
///     .cpus("0".parse()?)                 // one worker, pinned to CPU 0
///     .idle(IdleMode::Adaptive(Duration::from_micros(20)))
///     .task_batch(32)
///     .build()?;
/// assert_eq!(rt.cpus().to_string(), "0");
/// let v = rt.spawn(async { 1 + 1 });
/// assert_eq!(rt.block_on(v)?, 2);
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Builder {
    cpus: Option<CpuSet>,
    idle: IdleMode,
    task_batch: Option<usize>,
}

impl Builder {
    /// A builder with the defaults: one worker per CPU of the process's current affinity,
    /// [`IdleMode::default`], [`DEFAULT_TASK_BATCH`].
    pub fn new() -> Builder {
        Builder::default()
    }

    /// The CPUs to run workers on, one pinned worker per CPU. They must be allowed by the
    /// process's affinity, or [`build`](Builder::build) fails.
    pub fn cpus(mut self, cpus: CpuSet) -> Builder {
        self.cpus = Some(cpus);
        self
    }

    /// What executors do when idle (workers and `block_on` executors alike).
    pub fn idle(mut self, mode: IdleMode) -> Builder {
        self.idle = mode;
        self
    }

    /// How many tasks an executor runs in a row before it drains its PE again (at least 1).
    /// Smaller values favour DOCA completion latency, larger ones task throughput.
    pub fn task_batch(mut self, n: usize) -> Builder {
        self.task_batch = Some(n.max(1));
        self
    }

    /// Starts the workers. Fails if the CPU set is empty, a CPU cannot be pinned to, or an
    /// executor cannot create its PE or poll; workers already started are stopped again.
    pub fn build(self) -> Result<Runtime> {
        let cpus = match self.cpus {
            Some(c) => c,
            None => CpuSet::current_affinity()?,
        };
        if cpus.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArgument, "runtime: empty CPU set"));
        }
        let config = Config { idle: self.idle, task_batch: self.task_batch.unwrap_or(DEFAULT_TASK_BATCH) };
        let inner = Arc::new(RtInner {
            cpus,
            config,
            workers: OnceLock::new(),
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        });
        let mut rt = Runtime { inner: inner.clone(), threads: Vec::new() };
        let mut workers = Vec::with_capacity(cpus.len());
        let mut failure = None;
        for cpu in cpus.iter() {
            let (tx, rx) = mpsc::sync_channel(1);
            let rt_inner = inner.clone();
            let spawned = thread::Builder::new()
                .name(format!("async-doca-cpu{cpu}"))
                .spawn(move || worker_main(cpu, config, rt_inner, tx));
            let join = match spawned {
                Ok(j) => j,
                Err(e) => {
                    failure = Some(Error::os(e, &format!("spawn the executor thread for CPU {cpu}")));
                    break;
                }
            };
            match rx.recv() {
                Ok(Ok(shared)) => {
                    rt.threads.push(join);
                    workers.push(Worker { cpu, shared });
                }
                Ok(Err(e)) => {
                    let _ = join.join();
                    failure = Some(e.context_prefix(&format!("executor on CPU {cpu}")));
                    break;
                }
                Err(_) => {
                    let _ = join.join();
                    failure = Some(Error::new(ErrorKind::Other, format!("executor on CPU {cpu} died while starting")));
                    break;
                }
            }
        }
        // Set even on failure so that shutdown reaches the workers that did start.
        let _ = inner.workers.set(workers);
        match failure {
            None => Ok(rt),
            Some(e) => {
                rt.shutdown_inner();
                Err(e)
            }
        }
    }
}

fn worker_main(cpu: usize, config: Config, rt: Arc<RtInner>, ready: mpsc::SyncSender<Result<Arc<Shared>>>) {
    let started = CpuSet::from_cpus([cpu])
        .and_then(|set| set.pin_current_thread())
        .and_then(|()| Core::new(Some(cpu), config, Some(Handle { inner: rt })));
    let core = match started {
        Ok(core) => Rc::new(core),
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    if ready.send(Ok(core.shared.clone())).is_err() {
        // The builder is gone: nothing will ever ask us to stop.
        return;
    }
    let enter = Enter::new(&core);
    let _shutdown = ShutdownGuard(enter.core());
    // A worker's main future never finishes: the loop returns when shutdown is requested.
    let _ = core.block_on(pin!(std::future::pending::<()>()));
}

struct Worker {
    cpu: usize,
    shared: Arc<Shared>,
}

struct RtInner {
    cpus: CpuSet,
    config: Config,
    workers: OnceLock<Vec<Worker>>,
    next: AtomicUsize,
    closed: AtomicBool,
}

impl RtInner {
    fn workers(&self) -> &[Worker] {
        self.workers.get().map(Vec::as_slice).unwrap_or(&[])
    }
}

/// A set of executor threads, one pinned to each CPU of a [`CpuSet`], each driving its own
/// DOCA progress engine.
///
/// `Runtime` is `Send + Sync`; [`handle`](Runtime::handle) gives a cheap clonable handle for
/// spawning from other threads. Dropping the runtime is the same as
/// [`shutdown`](Runtime::shutdown).
///
/// ```
/// use async_doca::Runtime;
///
/// let rt = Runtime::builder().cpus("0".parse()?).build()?;
///
/// // `block_on` runs a (possibly !Send) future on this thread.
/// let local = std::rc::Rc::new(5);
/// let v = rt.block_on(async move { *local + 1 });
/// assert_eq!(v, 6);
///
/// // `spawn` runs a Send future on a worker; `spawn_on` builds a !Send one on a given CPU.
/// let a = rt.spawn(async { 2 });
/// let b = rt.spawn_on(0, || async {
///     let rc = std::rc::Rc::new(3);
///     async_doca::time::sleep(std::time::Duration::from_millis(1)).await;
///     (*rc, async_doca::executor::current_cpu())
/// })?;
/// let (a, b) = rt.block_on(async { (a.await, b.await) });
/// let (b, cpu) = b?;
/// assert_eq!((a?, b, cpu), (2, 3, Some(0)));
/// rt.shutdown();
/// # Ok::<(), async_doca::Error>(())
/// ```
pub struct Runtime {
    inner: Arc<RtInner>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Runtime {
    /// A [`Builder`].
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// A runtime with the defaults of [`Builder::new`].
    pub fn new() -> Result<Runtime> {
        Builder::new().build()
    }

    /// A handle for spawning from anywhere (clonable, `Send + Sync`).
    pub fn handle(&self) -> Handle {
        Handle { inner: self.inner.clone() }
    }

    /// The CPUs of the workers.
    pub fn cpus(&self) -> CpuSet {
        self.inner.cpus
    }

    /// The worker threads: their CPU and kernel thread id (for inspection, such as checking
    /// or changing affinities).
    pub fn workers(&self) -> Vec<WorkerInfo> {
        self.handle().workers()
    }

    /// See [`Handle::spawn`].
    pub fn spawn<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle_ref().spawn(fut)
    }

    /// See [`Handle::spawn_on`].
    pub fn spawn_on<Fac, Fut>(&self, cpu: usize, factory: Fac) -> Result<JoinHandle<Fut::Output>>
    where
        Fac: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        self.handle_ref().spawn_on(cpu, factory)
    }

    /// See [`Handle::block_on`].
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.handle_ref().block_on(fut)
    }

    /// Stops every worker (cancelling its tasks, stopping and destroying its contexts and
    /// PE) and joins the threads. Problems that cannot be returned (a context that never
    /// stopped) are reported on stderr.
    pub fn shutdown(mut self) {
        self.shutdown_inner();
    }

    fn handle_ref(&self) -> HandleRef<'_> {
        HandleRef(&self.inner)
    }

    fn shutdown_inner(&mut self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        for w in self.inner.workers() {
            w.shared.request_shutdown();
        }
        let me = thread::current().id();
        for t in self.threads.drain(..) {
            if t.thread().id() == me {
                // Dropped from one of its own tasks: that worker stops by itself once this
                // task returns; it cannot join itself.
                continue;
            }
            if t.join().is_err() {
                local::report("an executor thread panicked");
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown_inner();
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("cpus", &self.inner.cpus)
            .field("idle", &self.inner.config.idle)
            .field("task_batch", &self.inner.config.task_batch)
            .finish()
    }
}

/// A worker thread of a [`Runtime`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The CPU it is pinned to.
    pub cpu: usize,
    /// Its kernel thread id (`/proc/self/task/<tid>`).
    pub tid: i32,
}

/// A clonable, `Send + Sync` handle to a [`Runtime`], for spawning from other threads.
///
/// ```
/// let rt = async_doca::Runtime::builder().cpus("0".parse()?).build()?;
/// let handle = rt.handle();
/// let t = std::thread::spawn(move || handle.spawn(async { "from another thread" }));
/// let jh = t.join().unwrap();
/// assert_eq!(rt.block_on(jh)?, "from another thread");
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct Handle {
    inner: Arc<RtInner>,
}

impl Handle {
    /// The CPUs of the runtime's workers.
    pub fn cpus(&self) -> CpuSet {
        self.inner.cpus
    }

    /// See [`Runtime::workers`].
    pub fn workers(&self) -> Vec<WorkerInfo> {
        self.inner
            .workers()
            .iter()
            .map(|w| WorkerInfo { cpu: w.cpu, tid: w.shared.tid.load(Ordering::Relaxed) })
            .collect()
    }

    /// Spawns a `Send` future on one of the workers (round-robin). After the runtime shut
    /// down, the task is cancelled at once (its handle reports [`ErrorKind::Cancelled`]).
    pub fn spawn<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        HandleRef(&self.inner).spawn(fut)
    }

    /// Spawns on the worker pinned to `cpu` the future that `factory` builds there. The
    /// future may be `!Send` (it may create and own DOCA objects); only the factory and the
    /// output cross threads. Fails if the runtime has no worker on `cpu`.
    pub fn spawn_on<Fac, Fut>(&self, cpu: usize, factory: Fac) -> Result<JoinHandle<Fut::Output>>
    where
        Fac: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        HandleRef(&self.inner).spawn_on(cpu, factory)
    }

    /// Runs `fut` to completion on the calling thread, in a temporary executor with its own
    /// PE (see the module documentation). Tasks spawned with `spawn_local` inside it are
    /// cancelled when `fut` finishes; DOCA objects created inside it are stopped and
    /// destroyed then too. The calling thread is not pinned and never busy-polls: with
    /// [`IdleMode::Polling`] it spins for the adaptive budget and then sleeps, so it does not
    /// take a core from the pinned workers. Latency-critical loops belong on a worker
    /// ([`spawn_on`](Handle::spawn_on)).
    ///
    /// # Panics
    /// When called from inside an async-doca executor (use `.await` instead), or when the
    /// temporary executor cannot be created (no PE). A panic of `fut` propagates, after the
    /// temporary executor has been shut down.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        HandleRef(&self.inner).block_on(fut)
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle").field("cpus", &self.inner.cpus).finish()
    }
}

/// The operations of [`Handle`] on a borrowed runtime (no `Arc` clone).
struct HandleRef<'a>(&'a Arc<RtInner>);

impl HandleRef<'_> {
    fn spawn<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let workers = self.0.workers();
        let shared = if workers.is_empty() || self.0.closed.load(Ordering::Acquire) {
            None
        } else {
            let i = self.0.next.fetch_add(1, Ordering::Relaxed) % workers.len();
            Some(&workers[i].shared)
        };
        match shared {
            Some(s) => task::spawn_send(s, fut),
            None => cancelled_handle(fut),
        }
    }

    fn spawn_on<Fac, Fut>(&self, cpu: usize, factory: Fac) -> Result<JoinHandle<Fut::Output>>
    where
        Fac: FnOnce() -> Fut + Send + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let Some(w) = self.0.workers().iter().find(|w| w.cpu == cpu) else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("spawn_on: the runtime has no executor on CPU {cpu} (CPUs {})", self.0.cpus),
            ));
        };
        Ok(task::spawn_factory(&w.shared, factory))
    }

    fn block_on<F: Future>(&self, fut: F) -> F::Output {
        assert!(
            !local::in_executor(),
            "async-doca: block_on called from inside an executor; use .await or spawn instead"
        );
        // The calling thread is not one of the runtime's pinned CPUs: busy-polling there
        // would take a core from a pinned worker (three spinners on two cores showed up as
        // millisecond stalls in perf). So it spins at most the adaptive budget, then sleeps.
        let mut config = self.0.config;
        if config.idle == IdleMode::Polling {
            config.idle = IdleMode::Adaptive(DEFAULT_SPIN);
        }
        let core = Core::new(None, config, Some(Handle { inner: self.0.clone() }))
            .unwrap_or_else(|e| panic!("async-doca: cannot create the block_on executor: {e}"));
        let core = Rc::new(core);
        // Drop order (reverse of declaration): the future first (so that DOCA objects it owns
        // are retired), then the executor's shutdown, then leaving the executor.
        let enter = Enter::new(&core);
        let _shutdown = ShutdownGuard(enter.core());
        let fut = pin!(fut);
        core.block_on(fut).expect("a block_on executor is never asked to shut down")
    }
}

/// A handle whose task was cancelled before it ran (spawning into a closed runtime).
fn cancelled_handle<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    // The runnable is dropped right here, which cancels the task: the future never runs and
    // the handle reports cancellation.
    let builder = async_task::Builder::new().metadata(task::TaskMeta::new(None));
    let (runnable, task) = builder.spawn(move |_| async move { Ok(fut.await) }, local::schedule);
    drop(runnable);
    JoinHandle::new(task)
}
