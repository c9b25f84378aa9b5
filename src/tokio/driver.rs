//! The in-tokio driver: an executor core driven by tokio's reactor instead of its own loop.
//!
//! The future returned by [`run_local`] (a [`RunLocal`]) owns one executor core, created on
//! the thread that first polls it. It polls two things, each with a waker of its own so
//! that neither is polled for nothing: the user's future, and the driver. The driver is the
//! native loop cut where the loop would block:
//!
//! 1. a turn (`Core::foreign_turn`): remote work, local async-doca tasks, drain the PE, due
//!    timers; if anything happened, yield to tokio (wake itself) and come back;
//! 2. idle: spin for the idle budget, one progress call per round, the rounds interleaved
//!    with polls of the user future and handed back to tokio every `POLL_ROUNDS` rounds
//!    (so other tokio tasks run in between); then arm the PE, drain once more and announce
//!    sleep (`Core::foreign_idle`);
//! 3. sleep: return `Pending` with the PE fd and the core's waker fd registered in tokio's
//!    reactor and a tokio timer at the next async-doca timer deadline;
//! 4. on any wake-up: clear the PE notification and consume the wake-ups
//!    (`Core::foreign_woke`), then a turn again.
//!
//! Work that only a turn would notice (an async-doca task spawned or woken on this thread, an
//! async-doca timer registered, buffers of orphaned operations to drop) wakes the driver
//! through `Core::wake_foreign`.

use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;

use crate::error::{Error, ErrorKind, Result};
use crate::executor::local::{self, Config, Core, Enter, ForeignIdle, SpinKind};
use crate::executor::runtime::DEFAULT_TASK_BATCH;
use crate::executor::IdleMode;

/// Runs `fut` on the calling tokio thread with an async-doca executor driven by tokio (see
/// the [module documentation](crate::tokio)), with the default configuration
/// ([`Driver::new`]). DOCA objects may be created and awaited inside `fut` and inside tasks
/// it spawns with `tokio::task::spawn_local`.
///
/// The output is `Err` when the executor cannot be created: no PE, or the thread already
/// runs an async-doca executor (a nested `run_local` or a `block_on`).
///
/// # Panics
/// When polled outside a tokio runtime with IO and time enabled.
///
/// ```
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// let n = rt.block_on(async_doca::tokio::run_local(async {
///     async_doca::time::sleep(std::time::Duration::from_millis(1)).await;
///     async_doca::spawn_local(async { 41 + 1 }).await
/// }))??;
/// assert_eq!(n, 42);
/// # Ok::<(), async_doca::Error>(())
/// ```
pub fn run_local<F: Future>(fut: F) -> RunLocal<F> {
    Driver::new().run(fut)
}

/// Configures the in-tokio driver; [`Driver::run`] makes the future that runs it.
///
/// ```
/// use async_doca::{tokio::Driver, IdleMode};
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// let out = rt.block_on(Driver::new().idle(IdleMode::Event).run(async { 7 }))?;
/// assert_eq!(out, 7);
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use = "a driver does nothing until `run` and the future it returns is awaited"]
pub struct Driver {
    idle: IdleMode,
    task_batch: usize,
    inline_progress: bool,
}

impl Default for Driver {
    fn default() -> Driver {
        Driver::new()
    }
}

impl Driver {
    /// The defaults of a native executor: [`IdleMode::default`] (spin a few microseconds,
    /// yielding to tokio between rounds, then sleep in tokio's reactor) and
    /// [`DEFAULT_TASK_BATCH`].
    pub fn new() -> Driver {
        Driver { idle: IdleMode::default(), task_batch: DEFAULT_TASK_BATCH, inline_progress: true }
    }

    /// How the driver waits when idle. [`IdleMode::Polling`] never sleeps: the driver keeps
    /// itself scheduled, so the tokio thread never parks (lowest latency, one busy core).
    pub fn idle(mut self, mode: IdleMode) -> Driver {
        self.idle = mode;
        self
    }

    /// How many async-doca task polls (and inline completions of operations awaited by the
    /// tokio tasks of this thread) one driver turn allows before the PE is drained again.
    pub fn task_batch(mut self, n: usize) -> Driver {
        self.task_batch = n.max(1);
        self
    }

    /// Whether an operation's poll may progress the PE right after its submit (default:
    /// yes), as [`Builder::inline_progress`](crate::Builder::inline_progress) says.
    pub fn inline_progress(mut self, on: bool) -> Driver {
        self.inline_progress = on;
        self
    }

    /// The future that runs `fut` under this driver (see [`run_local`]).
    pub fn run<F: Future>(self, fut: F) -> RunLocal<F> {
        RunLocal { config: self, fut: Some(Box::pin(fut)), state: None, failed: false }
    }
}

/// The future of [`run_local`] / [`Driver::run`]. `!Send`: it owns an executor bound to the
/// thread that polls it first. Dropping it before it finishes drops the user future, then
/// shuts the executor down (bounded, like the end of a `block_on`).
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct RunLocal<F: Future> {
    config: Driver,
    fut: Option<Pin<Box<F>>>,
    state: Option<State>,
    failed: bool,
}

impl<F: Future> std::fmt::Debug for RunLocal<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLocal")
            .field("config", &self.config)
            .field("started", &self.state.is_some())
            .field("finished", &self.fut.is_none())
            .finish()
    }
}

/// A waker that raises its flag and wakes the task of the whole `RunLocal`.
struct Flag {
    set: AtomicBool,
    outer: Mutex<Option<Waker>>,
}

impl Flag {
    fn new() -> Arc<Flag> {
        Arc::new(Flag { set: AtomicBool::new(true), outer: Mutex::new(None) })
    }

    fn update(&self, w: &Waker) {
        let mut outer = self.outer.lock().unwrap_or_else(|p| p.into_inner());
        if !outer.as_ref().is_some_and(|o| o.will_wake(w)) {
            *outer = Some(w.clone());
        }
    }

    /// Raises the flag without waking the outer task: for the driver's own yields, which
    /// `RunLocal::poll` turns into one wake-up of its task (no lock).
    fn raise(&self) {
        self.set.store(true, Ordering::Release);
    }

    fn take(&self) -> bool {
        self.set.load(Ordering::Relaxed) && self.set.swap(false, Ordering::Acquire)
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // A flag already set means a wake-up of the outer task is already on its way.
        if !self.set.swap(true, Ordering::Release) {
            // Waking under the lock is fine: a waker only schedules its task, it never
            // comes back here.
            if let Some(w) = self.outer.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                w.wake_by_ref();
            }
        }
    }
}

/// Rounds (a poll of the user future and a step of the driver) per poll of `RunLocal`
/// before it yields to tokio: small, so other tokio tasks wait at most a few microseconds.
const POLL_ROUNDS: usize = 32;

/// Where the driver is in its protocol.
enum Phase {
    /// Run a turn next.
    Run,
    /// Idle since this instant: spinning for the idle budget, in this kind of spin.
    Spin(Instant, SpinKind),
    /// Armed and announced asleep; the deadline is the next async-doca timer's.
    Sleep(Option<Instant>),
}

/// Everything `RunLocal` creates on its first poll. Dropping it (see `Drop`) removes the
/// reactor registrations before the shutdown closes the PE fd, and shuts the executor down
/// while it is still current (`enter` is dropped last, with the fields).
struct State {
    pe_fd: Option<AsyncFd<RawFd>>,
    wake_fd: Option<AsyncFd<RawFd>>,
    timer: Pin<Box<::tokio::time::Sleep>>,
    timer_at: Option<Instant>,
    idle: IdleMode,
    phase: Phase,
    user: Arc<Flag>,
    user_waker: Waker,
    driver: Arc<Flag>,
    driver_waker: Waker,
    /// The waker of the task polling `RunLocal`, as last given to the flags.
    outer: Option<Waker>,
    core: Rc<Core>,
    _enter: Enter,
}

impl State {
    fn new(config: &Driver) -> Result<State> {
        if local::in_executor() {
            return Err(Error::new(
                ErrorKind::BadState,
                "tokio::run_local: this thread already runs an async-doca executor",
            ));
        }
        let core = Rc::new(Core::new_foreign(Config {
            idle: config.idle,
            task_batch: config.task_batch,
            inline_progress: config.inline_progress,
        })?);
        let enter = Enter::new(&core);
        // If a registration fails below, dropping `enter` and `core` leaves no executor
        // behind: nothing was connected to the PE yet.
        // SAFETY: (both registrations) the PE fd and the core's poll fd are owned by the
        // core, which `State` keeps alive; `State`'s `Drop` removes these registrations
        // before anything closes the fds (the shutdown destroys the PE), and nothing closes
        // or replaces them meanwhile.
        let pe_fd = unsafe { AsyncFd::register_with_interest(core.pe_fd(), Interest::READABLE) }
            .map_err(|e| Error::os(e.into(), "tokio::run_local: register the PE notification fd"))?;
        let wake_fd = match core.reactor_fd() {
            // SAFETY: as above.
            Some(fd) => Some(
                unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                    .map_err(|e| Error::os(e.into(), "tokio::run_local: register the executor's waker"))?,
            ),
            None => None,
        };
        let (user, driver) = (Flag::new(), Flag::new());
        Ok(State {
            pe_fd: Some(pe_fd),
            wake_fd,
            timer: Box::pin(::tokio::time::sleep(Duration::ZERO)),
            timer_at: None,
            idle: config.idle,
            phase: Phase::Run,
            user_waker: Waker::from(user.clone()),
            user,
            driver_waker: Waker::from(driver.clone()),
            driver,
            outer: None,
            core,
            _enter: enter,
        })
    }

    /// Drives the core until it must wait; returns with the wake-ups registered. Called
    /// only when the driver's flag was raised: by tokio's reactor (the PE fd, the waker fd),
    /// the tokio timer, the core (`wake_foreign`) or the driver itself (a yield).
    fn drive(&mut self) {
        let core = self.core.clone();
        core.set_foreign_waker(&self.driver_waker);
        let waker = self.driver_waker.clone();
        let mut cx = Context::from_waker(&waker);
        // Come back for another step: `RunLocal::poll` sees the flag, and wakes its task
        // itself if it yields to tokio with the flag still raised.
        let yield_now = || self.driver.raise();
        // Polled while asleep: something woke us, even if no fd says so (a local wake-up).
        let mut woken = matches!(self.phase, Phase::Sleep(_));
        // Bounded: every path either returns or moves on to a phase that returns.
        for _ in 0..4 {
            match self.phase {
                Phase::Run => {
                    if core.foreign_turn() {
                        // Let tokio run what the turn woke, then come back.
                        yield_now();
                        return;
                    }
                    // As the executor's own loop: each adaptive spin on its own budget.
                    let kind = match self.idle {
                        IdleMode::Adaptive(_) => core.adaptive_spin_kind(),
                        IdleMode::Polling | IdleMode::Event => SpinKind::Busy,
                    };
                    self.phase = match self.idle {
                        IdleMode::Event => self.go_idle(None),
                        IdleMode::Adaptive(_) if core.learned(kind).budget().is_zero() => self.go_idle(None),
                        _ => Phase::Spin(Instant::now(), kind),
                    };
                }
                Phase::Spin(since, kind) => {
                    let adaptive = matches!(self.idle, IdleMode::Adaptive(_));
                    let over = match self.idle {
                        IdleMode::Polling => false,
                        IdleMode::Adaptive(_) => {
                            let spun = since.elapsed();
                            let learned = core.learned(kind);
                            let over = spun >= learned.budget();
                            // Past the floor, as the executor's own spin: give the CPU to a
                            // thread waiting for it (see `learned_spin`). A yielding spin
                            // gives it up at every round (`foreign_spin`).
                            if !over && kind == SpinKind::Busy && spun >= learned.floor() {
                                std::thread::yield_now();
                            }
                            over
                        }
                        IdleMode::Event => true,
                    };
                    if over {
                        self.phase = self.go_idle(adaptive.then_some(kind));
                        continue;
                    }
                    // One round (one progress call); `RunLocal::poll` runs a few rounds,
                    // interleaved with polls of the user future, before it yields to tokio.
                    if core.foreign_spin(kind) {
                        if adaptive {
                            core.learned(kind).caught();
                        }
                        self.phase = Phase::Run;
                    }
                    yield_now();
                    return;
                }
                Phase::Sleep(deadline) => {
                    // Register interest with the reactor and the timer; readiness of any
                    // (or the wake-up that brought us here) ends the sleep.
                    if let Some(Poll::Ready(Ok(mut g))) = self.pe_fd.as_ref().map(|f| f.poll_read_ready(&mut cx)) {
                        g.clear_ready();
                        woken = true;
                    }
                    if let Some(w) = &self.wake_fd {
                        if let Poll::Ready(Ok(mut g)) = w.poll_read_ready(&mut cx) {
                            g.clear_ready();
                            woken = true;
                        }
                    }
                    let mut timed = false;
                    if let Some(d) = deadline {
                        if self.timer_at != Some(d) {
                            self.timer.as_mut().reset(::tokio::time::Instant::from_std(d));
                            self.timer_at = Some(d);
                        }
                        if self.timer.as_mut().poll(&mut cx).is_ready() {
                            self.timer_at = None;
                            timed = true;
                        }
                    }
                    if !woken && !timed {
                        return;
                    }
                    woken = false;
                    // The readiness was cleared before the notification: an event after
                    // the clear re-arms tokio's readiness, and the turn drains anyway.
                    core.foreign_woke(timed);
                    self.phase = Phase::Run;
                }
            }
        }
        // Still busy after the bounded rounds: come back after the other tokio tasks.
        yield_now();
    }

    /// Arms the PE and announces sleep; the phase that follows. `after_spin`: the adaptive
    /// spin that ran out just before, if one did (the sleep then teaches its learned budget).
    fn go_idle(&self, after_spin: Option<SpinKind>) -> Phase {
        match self.core.foreign_idle(after_spin) {
            ForeignIdle::Busy => Phase::Run,
            ForeignIdle::Sleep(deadline) => Phase::Sleep(deadline),
        }
    }
}

impl<F: Future> Future for RunLocal<F> {
    type Output = Result<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<F::Output>> {
        // `RunLocal` is Unpin (the user future is boxed).
        let this = self.get_mut();
        if this.failed || this.fut.is_none() {
            return Poll::Ready(Err(Error::new(ErrorKind::BadState, "tokio::run_local polled after it finished")));
        }
        if this.state.is_none() {
            match State::new(&this.config) {
                Ok(s) => this.state = Some(s),
                Err(e) => {
                    this.failed = true;
                    return Poll::Ready(Err(e));
                }
            }
        }
        let state = this.state.as_mut().expect("created above");
        if !state.outer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            state.user.update(cx.waker());
            state.driver.update(cx.waker());
            state.outer = Some(cx.waker().clone());
        }
        // Like the native loop: the user future and the driver in turns, for a bounded number
        // of rounds while either has something to do (a yield, a completion, a spin round),
        // then back to tokio, which runs its other tasks (a flag still raised has already
        // woken this task again).
        for _ in 0..POLL_ROUNDS {
            let mut did = false;
            if state.user.take() {
                did = true;
                let mut ucx = Context::from_waker(&state.user_waker);
                // The user future may complete operations inline, within the turn's batch.
                state.core.set_budget(this.config.task_batch);
                let polled = this.fut.as_mut().expect("checked above").as_mut().poll(&mut ucx);
                if let Poll::Ready(v) = polled {
                    this.finish();
                    return Poll::Ready(Ok(v));
                }
            }
            if state.driver.take() {
                did = true;
                state.drive();
            }
            if !did {
                break;
            }
        }
        // The driver raised its own flag (a yield) without waking anyone: come back after
        // tokio's other tasks. (A flag raised by a waker has woken this task already.)
        if state.driver.set.load(Ordering::Acquire) {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl<F: Future> RunLocal<F> {
    /// Drops the user future while the executor is still current (DOCA objects it owns are
    /// retired there), then shuts the executor down (see [`State`]).
    fn finish(&mut self) {
        let Some(state) = self.state.take() else {
            self.fut = None;
            return;
        };
        drop(self.fut.take());
        // `State`'s drop does the rest: reactor registrations, the shutdown, leaving the
        // executor.
        drop(state);
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // The reactor must forget the fds before the shutdown closes the PE's (a reused fd
        // number would otherwise be deregistered under its new owner).
        drop(self.pe_fd.take());
        drop(self.wake_fd.take());
        self.core.shutdown();
    }
}

impl<F: Future> Drop for RunLocal<F> {
    fn drop(&mut self) {
        self.finish();
    }
}
