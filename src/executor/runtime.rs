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
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use super::local::{self, Config, Core, Enter, Shared, ShutdownGuard};
use super::task::{self, JoinHandle};
use crate::cpuset::{CpuSet, MAX_CPUS};
use crate::error::{Error, ErrorKind, Result};

/// The default spin budget of [`IdleMode::Adaptive`] (its floor: the executor may learn to
/// spin longer).
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
    /// Lowest latency: a task that awaits an operation still in flight, while nothing else
    /// can run, polls the PE from its own poll for a few microseconds before it goes
    /// `Pending` (no wake-up, run queue and re-poll when the completion comes in that time).
    Polling,
    /// Poll for a budget, then sleep as in [`Event`](IdleMode::Event). The default
    /// ([`DEFAULT_SPIN`]). A task awaiting an operation polls from its own poll first, as in
    /// [`Polling`](IdleMode::Polling), within the same budget; if it uses the budget up there,
    /// the executor sleeps at once instead of spinning a second one.
    ///
    /// The given duration is the budget's floor. Each executor learns from its own waits how
    /// long to spin, up to 20 times the floor (at most 100 µs, never less than the floor):
    /// a wait that outlasted the spin but ended shortly after the executor fell asleep
    /// makes the next spin that long, and waits longer than that ceiling halve it again.
    /// Without it, two executors that wait for each other on a machine whose wake-ups cost
    /// more than the spin (20–40 µs on a VM) take turns sleeping, each answer a wake-up late:
    /// a host-only 8 B allreduce of two processes ran at 2 µs, with every tenth one or more at
    /// ~80 µs. Past the floor the spin yields its CPU now and then, so a peer that shares the
    /// CPU is not kept waiting by it.
    ///
    /// While only offloaded commands (UROM) are in flight, whose answers are another
    /// processor's work, the spin yields its CPU at every round instead, on a learned budget
    /// of its own with the same floor: the worker it waits for may need this CPU (the soft
    /// provider), and alone on its CPU a round costs a system call. Use
    /// [`Event`](IdleMode::Event) for an executor that must never spin.
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
    no_inline_progress: bool,
    drom: Option<crate::drom::Options>,
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

    /// Whether an operation's poll may progress the PE right after its submit (default:
    /// yes).
    ///
    /// * **Yes**: a completion the provider delivers at once (doca-soft's, most of a
    ///   loopback's) returns from the very poll that submitted the operation: no park, no
    ///   wake, no trip round the loop. An executor that would spin when idle
    ///   ([`IdleMode::Polling`], an adaptive spin with budget left) spins inside that poll
    ///   for the completion. The price, when the completion is not there yet (on hardware,
    ///   a round trip takes microseconds): one `doca_pe_progress` that finds nothing, and
    ///   the operation's doorbell rung at its submit rather than with the turn's others.
    /// * **No**: the operation's task parks at once, and the executor's loop delivers the
    ///   completion at its next drain of the PE, ringing the doorbells of every operation
    ///   submitted since its last drain together. That is the path every operation takes
    ///   when its completion comes later; `perf --park` measures it on doca-soft.
    pub fn inline_progress(mut self, on: bool) -> Builder {
        self.no_inline_progress = !on;
        self
    }

    /// Takes part in a DLB-style CPU registry (see [`drom`](crate::drom)): the runtime
    /// registers the process with its CPUs (or adopts the reservation a launcher such as
    /// `async-doca taskset -c CPUS -- PROGRAM` made for it, whose CPUs then replace
    /// [`cpus`](Builder::cpus)), follows the changes others make to its mask, and
    /// unregisters on shutdown. Fails to build if the CPUs belong to other processes
    /// (unless [`steal`](crate::drom::Options::steal)) or the process is registered under
    /// that key already (one registration per process and key).
    ///
    /// Following a change (within the [check
    /// interval](crate::drom::Options::check_interval), usually at once): the executor of a
    /// removed CPU is *displaced*: it is re-pinned onto the remaining CPUs, gets no more
    /// [`spawn`](Runtime::spawn) work and sleeps whenever it is idle (it never busy-polls),
    /// but keeps its tasks and DOCA objects and keeps running them (they are `!Send` and
    /// cannot move); [`spawn_on`](Runtime::spawn_on) still reaches it. When its CPU comes
    /// back it is pinned home again. A CPU the runtime never had gets a new executor, which
    /// takes `spawn` work at once (if it cannot start, for example because a cgroup forbids
    /// the CPU, that is reported as a `WARN` tracing event and the other CPUs are used). The process's other
    /// threads (the one that called `build`, `block_on` threads) are moved onto the whole new
    /// mask. See `docs/drom.md`.
    pub fn drom(mut self, options: crate::drom::Options) -> Builder {
        self.drom = Some(options);
        self
    }

    /// Starts the workers. Fails if the CPU set is empty, a CPU cannot be pinned to, or an
    /// executor cannot create its PE or poll; workers already started are stopped again.
    pub fn build(self) -> Result<Runtime> {
        crate::trace::route_provider_log();
        let mut cpus = match self.cpus {
            Some(c) => c,
            None => CpuSet::current_affinity()?,
        };
        let membership = match &self.drom {
            Some(opts) => {
                let m = crate::drom::follow::join(opts, &cpus)?;
                cpus = m.current();
                Some(m)
            }
            None => None,
        };
        if cpus.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArgument, "runtime: empty CPU set"));
        }
        let config = Config {
            idle: self.idle,
            task_batch: self.task_batch.unwrap_or(DEFAULT_TASK_BATCH),
            inline_progress: !self.no_inline_progress,
        };
        let inner = Arc::new(RtInner {
            config,
            workers: WorkerList::new(),
            threads: Mutex::new(Vec::with_capacity(cpus.len())),
            next: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            drom: OnceLock::new(),
        });
        let mut rt = Runtime { inner: inner.clone() };
        let mut failure = None;
        for cpu in cpus.iter() {
            if let Err(e) = inner.start_worker(cpu) {
                failure = Some(e);
                break;
            }
        }
        if let (None, Some(m)) = (&failure, membership) {
            if let Err(e) = super::follow_drom::start(&inner, m, self.drom.as_ref().map(|o| o.check_interval)) {
                failure = Some(e);
            }
        }
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
    // Known as a pinned executor, so that no runtime's DROM follower moves it.
    let _pinned = super::follow_drom::ExecutorThread::enter();
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

pub(super) struct Worker {
    pub(super) cpu: usize,
    pub(super) shared: Arc<Shared>,
    /// Takes `spawn` work; false while displaced from its CPU (see [`Builder::drom`]).
    pub(super) active: AtomicBool,
}

/// The workers of a runtime: append-only (a worker lives until the runtime shuts down), so
/// that `spawn` reads it without a lock: a slot is filled before the length that covers it
/// is published.
pub(super) struct WorkerList {
    slots: Box<[OnceLock<Worker>]>,
    len: AtomicUsize,
    /// Serialises appends (the builder, then the DROM follower).
    append: Mutex<()>,
}

impl WorkerList {
    fn new() -> WorkerList {
        WorkerList {
            slots: (0..MAX_CPUS).map(|_| OnceLock::new()).collect(),
            len: AtomicUsize::new(0),
            append: Mutex::new(()),
        }
    }

    /// The published slots (each filled).
    fn as_slice(&self) -> &[OnceLock<Worker>] {
        &self.slots[..self.len.load(Ordering::Acquire)]
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Worker> {
        self.as_slice().iter().filter_map(OnceLock::get)
    }

    /// Appends `w`; gives it back if the list is full (it cannot be: there is at most one
    /// worker per CPU number, and CPU numbers are below `MAX_CPUS`).
    fn push(&self, w: Worker) -> std::result::Result<(), Worker> {
        let _g = self.append.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.len.load(Ordering::Relaxed);
        let Some(slot) = self.slots.get(n) else { return Err(w) };
        slot.set(w)?;
        self.len.store(n + 1, Ordering::Release);
        Ok(())
    }
}

pub(super) struct RtInner {
    config: Config,
    pub(super) workers: WorkerList,
    threads: Mutex<Vec<thread::JoinHandle<()>>>,
    next: AtomicUsize,
    closed: AtomicBool,
    pub(super) drom: OnceLock<crate::drom::follow::Follower>,
}

impl RtInner {
    pub(super) fn workers(&self) -> &WorkerList {
        &self.workers
    }

    /// The CPUs of the workers that take `spawn` work.
    fn active_cpus(&self) -> CpuSet {
        self.workers().iter().filter(|w| w.active.load(Ordering::Relaxed)).map(|w| w.cpu).collect()
    }

    /// Starts the executor thread of `cpu` and waits until it runs.
    pub(super) fn start_worker(self: &Arc<Self>, cpu: usize) -> Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        let rt_inner = self.clone();
        let config = self.config;
        let spawned = thread::Builder::new()
            .name(format!("async-doca-cpu{cpu}"))
            .spawn(move || worker_main(cpu, config, rt_inner, tx));
        let join = spawned.map_err(|e| Error::os(e, &format!("spawn the executor thread for CPU {cpu}")))?;
        match rx.recv() {
            Ok(Ok(shared)) => {
                self.threads.lock().unwrap_or_else(|p| p.into_inner()).push(join);
                let handle = shared.clone();
                if let Err(w) = self.workers.push(Worker { cpu, shared, active: AtomicBool::new(true) }) {
                    w.shared.request_shutdown();
                    return Err(Error::new(
                        ErrorKind::ResourceExhausted,
                        format!("runtime: no room for an executor on CPU {cpu}"),
                    ));
                }
                if self.closed.load(Ordering::SeqCst) {
                    // Shut down while this one started: make sure it stops too.
                    handle.request_shutdown();
                }
                Ok(())
            }
            Ok(Err(e)) => {
                let _ = join.join();
                Err(e.context_prefix(&format!("executor on CPU {cpu}")))
            }
            Err(_) => {
                let _ = join.join();
                Err(Error::new(ErrorKind::Other, format!("executor on CPU {cpu} died while starting")))
            }
        }
    }

    /// Called by an executor about to sleep: makes the DROM follower look at a pending
    /// change (a cheap load from the registry when there is one).
    pub(super) fn park_check(&self) {
        if let Some(f) = self.drom.get() {
            f.park_check();
        }
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

    /// The CPUs of the workers (with [`Builder::drom`]: the CPUs the runtime owns now,
    /// which change when the registry says so).
    pub fn cpus(&self) -> CpuSet {
        self.inner.active_cpus()
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
    /// stopped) are reported as `WARN` tracing events (see [`crate::trace`]).
    pub fn shutdown(mut self) {
        self.shutdown_inner();
    }

    fn handle_ref(&self) -> HandleRef<'_> {
        HandleRef(&self.inner)
    }

    fn shutdown_inner(&mut self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        // The follower first: it may be starting workers.
        if let Some(f) = self.inner.drom.get() {
            f.stop();
        }
        for w in self.inner.workers().iter() {
            w.shared.request_shutdown();
        }
        let me = thread::current().id();
        let threads = std::mem::take(&mut *self.inner.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            if t.thread().id() == me {
                // Dropped from one of its own tasks: that worker stops by itself once this
                // task returns; it cannot join itself.
                continue;
            }
            if t.join().is_err() {
                local::report("an executor thread panicked");
            }
        }
        // Unregister once the executors left their CPUs.
        if let Some(f) = self.inner.drom.get() {
            f.unregister();
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
            .field("cpus", &self.inner.active_cpus())
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
    /// Whether it runs on its CPU and takes [`spawn`](Runtime::spawn) work; false while a
    /// DROM change displaced it (see [`Builder::drom`]).
    pub active: bool,
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
    /// See [`Runtime::cpus`].
    pub fn cpus(&self) -> CpuSet {
        self.inner.active_cpus()
    }

    /// See [`Runtime::workers`].
    pub fn workers(&self) -> Vec<WorkerInfo> {
        self.inner
            .workers()
            .iter()
            .map(|w| WorkerInfo {
                cpu: w.cpu,
                tid: w.shared.tid.load(Ordering::Relaxed),
                active: w.active.load(Ordering::Relaxed),
            })
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

impl Handle {
    /// See [`RtInner::park_check`].
    pub(super) fn park_check(&self) {
        self.inner.park_check();
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle").field("cpus", &self.inner.active_cpus()).finish()
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
        let workers = self.0.workers().as_slice();
        let shared = if workers.is_empty() || self.0.closed.load(Ordering::Acquire) {
            None
        } else {
            // Round-robin over the active workers (all of them, unless DROM displaced some).
            let start = self.0.next.fetch_add(1, Ordering::Relaxed);
            (0..workers.len())
                .filter_map(|k| workers[start.wrapping_add(k) % workers.len()].get())
                .find(|w| w.active.load(Ordering::Relaxed))
                .map(|w| &w.shared)
        };
        match shared {
            Some(s) => task::spawn_send(s, fut),
            None => task::cancelled(fut),
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
                format!("spawn_on: the runtime has no executor on CPU {cpu} (CPUs {})", self.0.active_cpus()),
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
