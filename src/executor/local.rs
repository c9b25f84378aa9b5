//! One executor: its thread-local state ([`Core`]), its cross-thread face ([`Shared`]), the
//! loop that runs tasks and drives the PE, and its shutdown.
//!
//! Who owns what:
//! * [`Core`] is created on the executor's thread, lives in an `Rc`, and is only touched from
//!   that thread: the local run queue, the registry of live tasks, the [`Pe`], the
//!   `mio::Poll`, the timers, the completion slots and the context registry. While the loop
//!   runs, a thread-local pointer (`CURRENT`) names it, so that `spawn_local`, wakers of local
//!   tasks and the DOCA callbacks (which run inside `doca_pe_progress`, on this thread) find
//!   it. DOCA objects created on the executor hold an `Rc<Core>` and are `!Send`.
//! * [`Shared`] (in an `Arc`) is what other threads see: the injection queue, the park state
//!   (see [`park`](super::park)) and the `mio::Waker`. Remote spawns and remote wakes push a
//!   `Runnable` to the injection queue and notify.
//!
//! The loop (one turn): consume remote notifications → run up to `task_batch` tasks →
//! drain the PE → fire due timers (every [`TIMER_CHECK_TURNS`] turns, or at once when the
//! idle spin or `poll` saw one due: each look reads the clock) → retire stopped contexts → if nothing happened: spin for
//! the idle budget, then arm the PE, drain it once more (closing the arm race), announce
//! sleep ([`ParkState::try_sleep`]) and block in `mio::Poll::poll` until the next timer
//! deadline → clear the PE notification → next turn. There is no fixed sleep anywhere;
//! spurious wake-ups just cost one empty turn.
//!
//! Shutdown (on the executor's thread, `CURRENT` still set), bounded by
//! [`SHUTDOWN_BUDGET`]: cancel every task (wake all registered tasks so that their runnables
//! come back, then drop the runnables: futures are dropped on their own thread) → close the
//! injection queue → stop every live context and keep progressing until all are IDLE
//! (in-flight tasks are flushed through their error callbacks, which release their slots) →
//! destroy the contexts → destroy the PE → close the poll and waker fds. Anything that cannot
//! be released safely within the budget (a context that never reaches IDLE, memory the
//! provider may still write) is reported (a `WARN` tracing event, see [`crate::trace`]) and leaked, never freed under DOCA's feet.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskCx, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use super::task::Runnable;
use crossbeam_queue::SegQueue;
use mio::unix::SourceFd;
use mio::{Events, Interest, Token};

use super::completion::Slots;
use super::context::Contexts;
use super::park::{Notify, ParkState};
use super::pe::Pe;
use super::runtime::{Handle, IdleMode};
use super::slab::Slab;
use super::time::Timers;
use crate::error::{Error, Result};

/// How long shutdown may wait for tasks to be dropped and contexts to reach IDLE.
pub(crate) const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);

/// How many `doca_pe_progress` calls an operation may make inline, right after its submit
/// (see [`Core::progress_inline`]). Small: its completion is normally the first (or only)
/// one queued; if others are ahead of it, the operation takes the normal path.
const INLINE_PROGRESS: usize = 4;

/// A turn looks at the timers only every this many turns: a look costs a clock read (~25 ns
/// on a VM), which would otherwise be paid twice per wake-up (the turn that runs the woken
/// task, and the empty turn before the executor spins again). An idle executor looks at
/// them anyway: the spin every 16 rounds, `park` through its `poll` timeout; either forces
/// a look in the next turn when a timer is due. So a due timer is late by at most this
/// many busy turns (or 16 spin rounds).
const TIMER_CHECK_TURNS: u32 = 8;

const WAKER_TOKEN: Token = Token(0);
const PE_TOKEN: Token = Token(1);

/// Reports a problem that cannot be returned to anyone (in `Drop`, in a callback, in shutdown):
/// a `WARN` tracing event (see [`crate::trace`]).
pub(crate) fn report(msg: &str) {
    crate::trace::report!("{msg}");
}

/// Executor configuration, shared by the workers and `block_on` executors of a runtime.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) idle: IdleMode,
    pub(crate) task_batch: usize,
}

/// The cross-thread face of an executor.
pub(crate) struct Shared {
    /// Unique over the process's life (never reused), so stale registrations never match.
    pub(crate) id: u64,
    /// The CPU a worker is pinned to; `None` for a `block_on` executor.
    pub(crate) cpu: Option<usize>,
    /// The executor thread's kernel thread id (filled in by the thread itself).
    pub(crate) tid: AtomicI32,
    inject: SegQueue<Runnable>,
    park: ParkState,
    /// Taken (closing its eventfd) at shutdown; only the `Notify::Wake` path locks it, and
    /// that path is only taken when the executor sleeps, so the lock is off the hot path.
    waker: Mutex<Option<mio::Waker>>,
    shutdown: AtomicBool,
    /// Set while DROM took this worker's CPU away: it runs on the process's other CPUs and
    /// must never busy-poll there (see `Builder::drom`).
    pub(crate) displaced: AtomicBool,
}

impl Shared {
    /// Queues a runnable from any thread and makes sure the executor will run it.
    pub(crate) fn schedule_remote(&self, runnable: Runnable) {
        self.inject.push(runnable);
        self.unpark();
    }

    /// Makes sure the executor looks at its queues and flags again (after publishing work).
    pub(crate) fn unpark(&self) {
        match self.park.notify() {
            Notify::Skip => {}
            Notify::Wake => {
                let guard = self.waker.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(w) = guard.as_ref() {
                    if let Err(e) = w.wake() {
                        report(&format!("executor wake-up failed: {e}"));
                    }
                }
            }
            Notify::Closed => {
                // The executor is gone or going and may have drained for the last time: take
                // back what is queued. Only tasks that never ran can be here (every task that
                // ran was cancelled on the executor's thread before `close`), and a task that
                // never ran holds only its `Send` parts, so dropping it here is sound.
                while let Some(r) = self.inject.pop() {
                    drop_quietly(r);
                }
            }
        }
    }

    /// Asks a worker to shut down (from any thread).
    pub(crate) fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.unpark();
    }

    fn shutdown_requested(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("id", &self.id)
            .field("cpu", &self.cpu)
            .field("tid", &self.tid.load(Ordering::Relaxed))
            .field("park", &self.park)
            .finish_non_exhaustive()
    }
}

/// Drops a runnable (and with it the task's future), containing a panic from the future's
/// destructor so that it cannot take the executor down.
pub(crate) fn drop_quietly(r: Runnable) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(r))).is_err() {
        report("a task's destructor panicked while the task was cancelled");
    }
}

thread_local! {
    /// The executor running on this thread, if any. Non-null only inside [`Enter`], which
    /// holds an `Rc<Core>`, so the pointee is alive whenever the pointer is non-null.
    static CURRENT: Cell<*const Core> = const { Cell::new(ptr::null()) };
}

/// Runs `f` with the executor of this thread, or returns `None` outside any executor
/// (including during thread-local destruction).
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(&Core) -> R) -> Option<R> {
    let p = CURRENT.try_with(Cell::get).ok()?;
    if p.is_null() {
        return None;
    }
    // SAFETY: CURRENT is non-null only while an `Enter` guard (which owns an `Rc<Core>`) is
    // alive on this thread, so `p` points to a live `Core`; only shared references are made.
    Some(f(unsafe { &*p }))
}

/// The executor of this thread as an `Rc`, for objects that must keep it alive.
pub(crate) fn current_rc() -> Option<Rc<Core>> {
    let p = CURRENT.try_with(Cell::get).ok()?;
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` came from `Rc::as_ptr` of the `Rc<Core>` held by the live `Enter` guard
    // (see `with_current`); incrementing first makes the new `Rc` own its own count.
    unsafe {
        Rc::increment_strong_count(p);
        Some(Rc::from_raw(p))
    }
}

/// Makes `core` the current executor of this thread until dropped.
pub(crate) struct Enter {
    core: Rc<Core>,
}

impl Enter {
    pub(crate) fn new(core: &Rc<Core>) -> Enter {
        CURRENT.with(|c| {
            assert!(
                c.get().is_null(),
                "async-doca: an executor is already running on this thread (block_on cannot be nested \
                 inside an executor; use .await or spawn instead)"
            );
            c.set(Rc::as_ptr(core));
        });
        Enter { core: core.clone() }
    }

    pub(crate) fn core(&self) -> &Rc<Core> {
        &self.core
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| c.set(ptr::null()));
    }
}

/// Whether an executor runs on this thread.
pub(crate) fn in_executor() -> bool {
    with_current(|_| ()).is_some()
}

/// The schedule function of every task: to the owner's local queue when called on the
/// owner's thread (no atomics), otherwise to its injection queue plus a notification. The
/// owner is found in the task's metadata, so this function captures nothing: async-task
/// then lets a waker that is woken by value hand its reference to the runnable (no
/// reference-count increment and decrement per wake-up).
pub(crate) fn schedule(runnable: Runnable) {
    let Some(owner) = runnable.metadata().owner().map(|s| s as *const Shared) else {
        // A task without an executor (a handle cancelled at spawn) is never scheduled;
        // dropping the runnable would cancel it anyway.
        drop_quietly(runnable);
        return;
    };
    let mut runnable = Some(runnable);
    with_current(|core| {
        if ptr::eq(&*core.shared, owner) {
            if let Some(r) = runnable.take() {
                core.queue.borrow_mut().push_back(r);
                core.wake_foreign();
            }
        }
    });
    if let Some(r) = runnable {
        // The executor may run and free the task (and with it the metadata's reference to
        // `Shared`) as soon as it is pushed: keep a reference of our own until we are done.
        let shared = r.metadata().shared().cloned().expect("checked above");
        shared.schedule_remote(r);
    }
}

/// The waker of a `block_on` future (and of a worker's idle main loop).
pub(crate) struct MainWaker {
    /// Set by wake-ups from other threads (followed by a notification).
    woken: AtomicBool,
    shared: Arc<Shared>,
}

impl Wake for MainWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // On the executor's own thread (the common case: a local task or a DOCA callback
        // woke the main future) a plain cell suffices, and the loop looks at it before it
        // sleeps. From another thread: the atomic flag, then the handshake.
        let local = with_current(|core| {
            let mine = ptr::eq(&*core.shared, &*self.shared);
            if mine {
                core.main_woken_local.set(true);
            }
            mine
        });
        if local != Some(true) {
            self.woken.store(true, Ordering::Release);
            self.shared.unpark();
        }
    }
}

struct Reactor {
    poll: mio::Poll,
    events: Events,
}

/// The thread-local state of one executor. See the module documentation.
pub(crate) struct Core {
    pub(crate) shared: Arc<Shared>,
    queue: RefCell<VecDeque<Runnable>>,
    /// Wakers of tasks that have returned `Pending` at least once (and so may be idle with
    /// their waker somewhere else); shutdown wakes them to get their runnables back.
    tasks: RefCell<Slab<Waker>>,
    pe: RefCell<Pe>,
    reactor: RefCell<Option<Reactor>>,
    pub(crate) timers: Timers,
    pub(crate) slots: Slots,
    pub(crate) ctxs: Contexts,
    config: Config,
    pub(crate) runtime: Option<Handle>,
    /// Set while `doca_pe_progress` runs (from the loop or inline) and while a state-change
    /// callback runs: DOCA forbids some calls from callbacks (progress itself, destroying a
    /// context), so such work is refused or deferred until progress returns.
    in_progress: Cell<bool>,
    /// What the task (or main future) being polled may still do inline, without going back
    /// to the loop: completing an operation by progressing the PE from its poll
    /// ([`Core::progress_inline`]). Set before each poll to what is left of the turn's
    /// `task_batch`, so inline work counts like task polls and the PE, the timers and the
    /// other tasks are still served every `task_batch` units; 0 outside a poll.
    budget: Cell<usize>,
    /// Turns since the timers were last looked at (see [`TIMER_CHECK_TURNS`]).
    busy_turns: Cell<u32>,
    /// Set while a task runs inline (see [`Core::run_inline`]): inline runs do not nest.
    inline_run: Cell<bool>,
    /// The main (`block_on`) future was woken from this thread.
    main_woken_local: Cell<bool>,
    /// The injection queue may hold work: set whenever a notification is consumed (every
    /// push is followed by one), cleared when a pop finds the queue empty. Saves a pop (a
    /// few atomic loads on shared cache lines) per turn when nothing came from outside.
    inject_pending: Cell<bool>,
    closing: Cell<bool>,
    pe_alive: Cell<bool>,
    arm_error_reported: Cell<bool>,
    /// Set when a foreign reactor (the tokio driver, `crate::tokio`) drives this core instead
    /// of its own loop; then the PE fd is not in the core's `mio::Poll` (the foreign reactor
    /// watches it) until shutdown registers it there.
    foreign: Cell<bool>,
    /// The foreign driver's waker: woken when work appears that only a turn of the core
    /// would notice (a local task queued, a timer registered, buffers left to drop).
    foreign_waker: RefCell<Option<Waker>>,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Core {
    /// Creates an executor on the calling thread: poll, waker, PE (registered with the poll).
    pub(crate) fn new(cpu: Option<usize>, config: Config, runtime: Option<Handle>) -> Result<Core> {
        Core::build(cpu, config, runtime, false)
    }

    /// Creates an executor core on the calling thread for a foreign reactor to drive (see
    /// the `foreign_*` methods): the PE fd stays out of the core's own poll, which then only
    /// carries the cross-thread waker.
    #[cfg(feature = "tokio")]
    pub(crate) fn new_foreign(config: Config) -> Result<Core> {
        Core::build(None, config, None, true)
    }

    fn build(cpu: Option<usize>, config: Config, runtime: Option<Handle>, foreign: bool) -> Result<Core> {
        let poll = mio::Poll::new().map_err(|e| Error::os(e, "mio::Poll::new"))?;
        let waker = mio::Waker::new(poll.registry(), WAKER_TOKEN).map_err(|e| Error::os(e, "mio::Waker::new"))?;
        let pe = Pe::new()?;
        let fd = pe.fd();
        if !foreign {
            poll.registry()
                .register(&mut SourceFd(&fd), PE_TOKEN, Interest::READABLE)
                .map_err(|e| Error::os(e, "register the PE notification fd"))?;
        }
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            cpu,
            // SAFETY: gettid has no preconditions.
            tid: AtomicI32::new(unsafe { libc::gettid() }),
            inject: SegQueue::new(),
            park: ParkState::new(),
            waker: Mutex::new(Some(waker)),
            shutdown: AtomicBool::new(false),
            displaced: AtomicBool::new(false),
        });
        Ok(Core {
            shared,
            queue: RefCell::new(VecDeque::with_capacity(256)),
            tasks: RefCell::new(Slab::new()),
            pe: RefCell::new(pe),
            reactor: RefCell::new(Some(Reactor { poll, events: Events::with_capacity(16) })),
            timers: Timers::new(),
            slots: Slots::new(),
            ctxs: Contexts::new(),
            config: Config { idle: config.idle, task_batch: config.task_batch.max(1) },
            runtime,
            in_progress: Cell::new(false),
            budget: Cell::new(0),
            busy_turns: Cell::new(0),
            inline_run: Cell::new(false),
            main_woken_local: Cell::new(false),
            inject_pending: Cell::new(false),
            closing: Cell::new(false),
            pe_alive: Cell::new(true),
            arm_error_reported: Cell::new(false),
            foreign: Cell::new(foreign),
            foreign_waker: RefCell::new(None),
        })
    }

    /// Tells a foreign driver that the core has work only a turn would notice. A no-op
    /// (one flag test) for the executor's own loop, which looks at everything every turn.
    #[inline]
    pub(crate) fn wake_foreign(&self) {
        if self.foreign.get() {
            if let Some(w) = self.foreign_waker.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
    }

    /// The raw PE, for connecting contexts. `None` once shutdown destroyed it.
    pub(crate) fn pe_raw(&self) -> Option<*mut crate::sys::doca_pe> {
        self.pe_alive.get().then(|| self.pe.borrow().raw())
    }

    pub(crate) fn in_progress(&self) -> bool {
        self.in_progress.get()
    }

    /// Marks the thread as inside a DOCA callback (or progress) until the guard drops; see
    /// `in_progress`. Nests: the previous value is restored.
    pub(crate) fn enter_progress(&self) -> InProgress<'_> {
        InProgress { core: self, prev: self.in_progress.replace(true) }
    }

    /// Whether this core is the executor running on this thread.
    #[inline]
    fn is_current(&self) -> bool {
        CURRENT.try_with(|c| ptr::eq(c.get(), self)).unwrap_or(false)
    }

    /// The inline completion fast path: called by an operation right after a successful
    /// `doca_task_submit`, from its future's poll. Progresses the PE up to
    /// [`INLINE_PROGRESS`] times while it has work, until `done()` (the operation's slot is
    /// complete); returns whether it is. The future then returns `Ready` at once instead of
    /// `Pending`, a trip round the loop and a re-poll.
    ///
    /// Completions of other operations delivered meanwhile wake their tasks as usual (their
    /// callbacks run no user code: they store results and wake wakers; slots released
    /// here drop their kept buffers later, from the loop). Refused when not allowed or not
    /// useful:
    /// * inside `doca_pe_progress` or a DOCA callback (DOCA forbids progress from there);
    /// * when this core is not the executor running on this thread (the callbacks would
    ///   look for their slots in another executor's table), or it is shutting down;
    /// * when the poll's `budget` is spent: a task that keeps submitting operations that
    ///   complete at once then goes `Pending` every `task_batch` operations, like a task
    ///   that yields, so it cannot starve the other tasks, the PE or the timers.
    pub(crate) fn progress_inline(&self, done: impl Fn() -> bool) -> bool {
        let budget = self.budget.get();
        if budget == 0 || self.in_progress.get() || self.closing.get() || !self.pe_alive.get() || !self.is_current() {
            return false;
        }
        self.budget.set(budget - 1);
        let _inside = self.enter_progress();
        let _defer = self.slots.defer_drops();
        let pe = self.pe.borrow();
        let mut complete = false;
        for _ in 0..INLINE_PROGRESS {
            if !pe.progress() {
                break;
            }
            if done() {
                complete = true;
                break;
            }
        }
        // Under a foreign driver, nothing else would drop the buffers deferred meanwhile
        // until its next turn, which may be far away: ask for one.
        if self.foreign.get() && self.slots.has_deferred() {
            self.wake_foreign();
        }
        complete
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.get()
    }

    /// Queues a runnable spawned on this thread (or drops it if the executor is closing,
    /// which cancels the task: its `JoinHandle` reports cancellation).
    pub(crate) fn push_local(&self, r: Runnable) {
        if self.closing.get() {
            drop_quietly(r);
        } else {
            self.queue.borrow_mut().push_back(r);
            self.wake_foreign();
        }
    }

    /// Registers a task that is about to return `Pending`; returns its key.
    pub(crate) fn register_task(&self, waker: Waker) -> u64 {
        self.tasks.borrow_mut().insert(waker)
    }

    pub(crate) fn unregister_task(&self, key: u64) {
        // Take the waker out first and drop it after the borrow ends: dropping a waker may
        // free a task, which never re-enters here, but keep borrows short on principle.
        let w = self.tasks.borrow_mut().remove(key);
        drop(w);
    }

    /// Number of tasks that are registered (have been pending at least once and are alive).
    #[cfg(test)]
    pub(crate) fn registered_tasks(&self) -> usize {
        self.tasks.borrow().len()
    }

    fn main_woken(&self, main: &MainWaker) -> bool {
        self.main_woken_local.get() || main.woken.load(Ordering::Relaxed)
    }

    /// Consumes the main future's wake-up flags; whether it must be polled.
    fn take_main_woken(&self, main: &MainWaker) -> bool {
        // `|` not `||`: both flags are consumed. The swap (not load + store) is needed for the
        // cross-thread flag: it synchronizes with the waker's store, so what the waker
        // published before waking is visible to the poll that follows.
        self.main_woken_local.replace(false)
            | (main.woken.load(Ordering::Relaxed) && main.woken.swap(false, Ordering::Acquire))
    }

    /// Work that this thread can see without the handshake: local tasks, a woken main future,
    /// and (cheap hints) remote work and shutdown.
    fn has_ready(&self, main: &MainWaker) -> bool {
        !self.queue.borrow().is_empty()
            || self.main_woken(main)
            || self.shared.park.is_notified()
            || self.inject_pending.get()
            || self.shared.shutdown_requested()
    }

    /// Runs `fut` to completion on this executor (the calling thread), running spawned tasks
    /// and driving the PE meanwhile. Returns `None` if a shutdown was requested first.
    /// Must be called inside [`Enter`] for this core.
    pub(crate) fn block_on<F: Future>(&self, mut fut: Pin<&mut F>) -> Option<F::Output> {
        let main = Arc::new(MainWaker { woken: AtomicBool::new(false), shared: self.shared.clone() });
        self.main_woken_local.set(true);
        let waker = Waker::from(main.clone());
        let mut cx = TaskCx::from_waker(&waker);
        loop {
            if self.take_main_woken(&main) {
                self.budget.set(self.config.task_batch);
                let polled = fut.as_mut().poll(&mut cx);
                self.budget.set(0);
                if let Poll::Ready(v) = polled {
                    return Some(v);
                }
            }
            if self.shared.shutdown_requested() {
                return None;
            }
            self.turn(&main);
        }
    }

    /// Consumes pending remote notifications (see `inject_pending`).
    #[inline]
    fn take_notifications(&self) {
        if self.shared.park.wake() {
            self.inject_pending.set(true);
        }
    }

    /// One turn of the loop (see the module documentation).
    fn turn(&self, main: &MainWaker) {
        if self.shared.park.is_notified() {
            self.take_notifications();
        }
        let ran = self.run_tasks();
        let progressed = self.drain_pe();
        let fired = self.fire_timers();
        if ran > 0 || progressed > 0 || fired > 0 || self.has_ready(main) {
            return;
        }
        let idle = if self.shared.displaced.load(Ordering::Relaxed) { IdleMode::Event } else { self.config.idle };
        match idle {
            IdleMode::Polling => {
                self.spin(main, None);
            }
            IdleMode::Event => self.park(main),
            IdleMode::Adaptive(budget) => {
                if budget.is_zero() || !self.spin(main, Some(budget)) {
                    self.park(main);
                }
            }
        }
    }

    /// Fires the due timers if enough turns went by since the last look, or a look was
    /// asked for (see [`TIMER_CHECK_TURNS`]); returns how many fired.
    fn fire_timers(&self) -> usize {
        let turns = self.busy_turns.get() + 1;
        if turns >= TIMER_CHECK_TURNS {
            self.busy_turns.set(0);
            self.timers.fire_due()
        } else {
            self.busy_turns.set(turns);
            0
        }
    }

    /// Makes the next turn look at the timers (one is due, or may be).
    fn timers_need_check(&self) {
        self.busy_turns.set(TIMER_CHECK_TURNS);
    }

    /// Runs the task whose runnable has address `id` right now, from inside the poll of the
    /// current task (or main future), if it is the only runnable in the local queue; returns
    /// whether it ran. Called by the first poll of a `spawn_local` task's `JoinHandle`.
    ///
    /// Being alone in the queue, the task is the next one this executor would run anyway:
    /// running it now reorders nothing among the local tasks (only the PE drain, the timers
    /// and remote work that the loop might have looked at in between come after it). The
    /// run counts against the poll's budget like a task poll (a task that keeps spawning
    /// and awaiting still goes back to the loop every `task_batch` runs), inline runs do not
    /// nest (stack depth), and none happens inside DOCA progress or a callback, nor while
    /// the executor is closing. A runnable found in this thread's local queue belongs to
    /// this executor, so it is run on its own thread, as `!Send` tasks require.
    pub(crate) fn run_inline(&self, id: usize) -> bool {
        let budget = self.budget.get();
        if budget == 0 || self.inline_run.get() || self.in_progress.get() || self.closing.get() {
            return false;
        }
        let runnable = {
            let mut queue = self.queue.borrow_mut();
            if queue.len() != 1 {
                return false;
            }
            let Some(r) = queue.pop_back() else { return false };
            let raw = r.into_raw();
            // SAFETY: `raw` comes from `into_raw` just above; only its address is read.
            let r = unsafe { Runnable::from_raw(raw) };
            if raw.as_ptr() as usize != id {
                queue.push_back(r);
                return false;
            }
            r
        };
        self.budget.set(budget - 1);
        self.inline_run.set(true);
        struct Reset<'a>(&'a Cell<bool>);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _reset = Reset(&self.inline_run);
        // Never unwinds: the task wrapper catches panics of the future.
        runnable.run();
        true
    }

    /// Moves remote work to the local queue and runs up to `task_batch` runnables.
    fn run_tasks(&self) -> usize {
        let batch = self.config.task_batch;
        if self.inject_pending.get() {
            for _ in 0..batch {
                match self.shared.inject.pop() {
                    Some(r) => self.queue.borrow_mut().push_back(r),
                    None => {
                        self.inject_pending.set(false);
                        break;
                    }
                }
            }
        }
        let mut n = 0;
        while n < batch {
            // The borrow ends before `run`: the task may schedule itself or others.
            let next = self.queue.borrow_mut().pop_front();
            let Some(r) = next else { break };
            // The task may spend what is left of the batch on inline work (see `budget`).
            let left = batch - n - 1;
            self.budget.set(left);
            // Never unwinds: the task wrapper catches panics of the future.
            r.run();
            n += 1 + (left - self.budget.replace(0));
        }
        n
    }

    /// Whether the PE can have work: only a connected context produces any.
    fn pe_active(&self) -> bool {
        self.pe_alive.get() && !self.ctxs.is_empty()
    }

    /// Drains the PE (callbacks run inside), then does the context work that callbacks
    /// deferred. Returns the number of progress units done.
    pub(crate) fn drain_pe(&self) -> usize {
        if !self.pe_active() {
            return 0;
        }
        let n = {
            let _inside = self.enter_progress();
            self.pe.borrow().drain()
        };
        self.slots.drop_deferred();
        self.ctxs.maintain(self);
        n
    }

    /// One `doca_pe_progress` call (callbacks run inside), then the context work that
    /// callbacks deferred. Returns whether there was work.
    fn progress_once(&self) -> bool {
        if !self.pe_active() {
            return false;
        }
        let did = {
            let _inside = self.enter_progress();
            self.pe.borrow().progress()
        };
        self.slots.drop_deferred();
        self.ctxs.maintain(self);
        did
    }

    /// Busy-waits for work, for at most `budget` (forever if `None`). Returns whether work
    /// showed up.
    ///
    /// The PE is progressed one call at a time, not drained: as soon as one unit of work
    /// was done (typically a completion that woke a task) the loop goes back to run the
    /// task, which is what a waiting task's latency is made of; the turn after it drains
    /// the PE fully.
    fn spin(&self, main: &MainWaker, budget: Option<Duration>) -> bool {
        // The clock is read only when there is a budget to measure.
        let start = budget.map(|_| Instant::now());
        let mut i: u32 = 0;
        loop {
            if self.has_ready(main) || self.progress_once() {
                return true;
            }
            i = i.wrapping_add(1);
            // Every 16 rounds, the clock: for the timers, and for the budget. Not when
            // there is neither.
            if i % 16 == 0 && (start.is_some() || !self.timers.is_empty()) {
                let now = Instant::now();
                if self.timers.is_due(now) {
                    self.timers_need_check();
                    return true;
                }
                if let (Some(b), Some(start)) = (budget, start) {
                    if now.duration_since(start) >= b {
                        return false;
                    }
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Blocks in `poll` until the PE, a remote notification or the next timer wakes us.
    fn park(&self, main: &MainWaker) {
        let pe_active = self.pe_active();
        if pe_active {
            if let Err(e) = self.pe.borrow().arm() {
                // Without an armed PE, sleeping could miss completions: degrade to polling
                // (yield, never a fixed sleep) and say so once.
                if !self.arm_error_reported.replace(true) {
                    report(&format!("cannot arm the PE notification, polling instead: {e}"));
                }
                std::thread::yield_now();
                return;
            }
            // Work that arrived before the arm produced no new notification: drain it now.
            if self.drain_pe() > 0 || !self.queue.borrow().is_empty() || self.main_woken(main) {
                self.clear_pe();
                return;
            }
        }
        if !self.queue.borrow().is_empty() || self.main_woken(main) || !self.shared.park.try_sleep() {
            if pe_active {
                self.clear_pe();
            }
            self.take_notifications();
            return;
        }
        if let Some(rt) = &self.runtime {
            rt.park_check();
        }
        let timeout = self.timers.next_deadline().map(|d| d.saturating_duration_since(Instant::now()));
        self.poll(timeout);
        if timeout.is_some() {
            self.timers_need_check();
        }
        self.take_notifications();
        if pe_active {
            self.clear_pe();
        }
    }

    fn poll(&self, timeout: Option<Duration>) {
        let mut reactor = self.reactor.borrow_mut();
        let Some(r) = reactor.as_mut() else { return };
        match r.poll.poll(&mut r.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                report(&format!("mio poll failed: {e}"));
                std::thread::yield_now();
            }
        }
        // The events themselves do not matter: every turn looks at every source.
    }

    fn clear_pe(&self) {
        if let Err(e) = self.pe.borrow().clear() {
            report(&format!("doca_pe_clear_notification failed: {e}"));
        }
    }

    /// Waits (following the PE protocol) until `done()` holds or `deadline` passes, driving
    /// only the PE and timers, not tasks. Used by shutdown.
    fn progress_until(&self, deadline: Instant, mut done: impl FnMut(&Core) -> bool) -> bool {
        loop {
            self.drain_pe();
            if done(self) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if !self.pe_active() {
                // Nothing can change any more without the PE.
                return done(self);
            }
            if self.pe.borrow().arm().is_err() {
                std::thread::yield_now();
                continue;
            }
            if self.drain_pe() == 0 && !done(self) {
                self.poll(Some(deadline - now));
            }
            self.clear_pe();
        }
    }

    /// Stops everything this executor owns. See the module documentation. Runs on the
    /// executor's thread, inside `Enter`.
    pub(crate) fn shutdown(&self) {
        if self.closing.replace(true) {
            return;
        }
        let deadline = Instant::now() + SHUTDOWN_BUDGET;

        // 1. Cancel tasks. Waking every registered task brings its runnable back to a queue
        // (local, or the injection queue if a remote waker is scheduling it right now);
        // dropping the runnable drops the future here, on its own thread, and unregisters it.
        loop {
            let wakers: Vec<Waker> = {
                let tasks = self.tasks.borrow();
                tasks.keys().into_iter().filter_map(|k| tasks.get(k).cloned()).collect()
            };
            for w in wakers {
                w.wake();
            }
            self.drop_queued();
            if self.tasks.borrow().is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                report(&format!(
                    "shutdown: {} task(s) could not be cancelled within {SHUTDOWN_BUDGET:?}; leaking them",
                    self.tasks.borrow().len()
                ));
                break;
            }
            // A remote thread is between "task scheduled" and "runnable pushed": let it finish.
            std::thread::yield_now();
        }

        // 2. Close the injection queue: from now on pushers take their work back.
        self.shared.park.close();
        self.drop_queued();

        // A foreign reactor watched the PE fd until now; the shutdown waits in our own poll.
        if self.foreign.replace(false) {
            self.foreign_waker.borrow_mut().take();
            if let Some(r) = self.reactor.borrow().as_ref() {
                let fd = self.pe.borrow().fd();
                if let Err(e) = r.poll.registry().register(&mut SourceFd(&fd), PE_TOKEN, Interest::READABLE) {
                    report(&format!("shutdown: cannot watch the PE fd, polling instead: {e}"));
                }
            }
        }

        // 3. Contexts: stop all, progress until IDLE (flushing in-flight tasks), destroy.
        self.ctxs.stop_all(self);
        let flushed = self.progress_until(deadline, |core| core.ctxs.all_idle());
        if !flushed {
            report(&format!("shutdown: {} context(s) did not reach IDLE within {SHUTDOWN_BUDGET:?}", self.ctxs.len()));
        }
        let remaining = self.ctxs.destroy_all(self);

        // 4. Completion slots still pending belong to contexts that never stopped: the
        // provider may still write their memory, so it is leaked, not freed.
        self.slots.drop_deferred();
        let pending = self.slots.leak_pending();
        if pending > 0 {
            report(&format!("shutdown: leaking {pending} completion slot(s) of tasks that never completed"));
        }
        self.timers.clear();

        // 5. The PE, once nothing is connected to it; then the poll and waker fds.
        if let Some(r) = self.reactor.borrow_mut().take() {
            let fd = self.pe.borrow().fd();
            let _ = r.poll.registry().deregister(&mut SourceFd(&fd));
            drop(r);
        }
        if remaining == 0 {
            match self.pe.borrow_mut().destroy() {
                Ok(()) => self.pe_alive.set(false),
                Err(e) => report(&format!("shutdown: {e}")),
            }
        } else {
            report(&format!("shutdown: leaking the progress engine ({remaining} context(s) still connected)"));
            self.pe_alive.set(false);
            self.pe.borrow_mut().leak();
        }
        let waker = self.shared.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(waker);
    }

    /// Drops every queued runnable (cancelling its task).
    fn drop_queued(&self) {
        loop {
            let next = self.queue.borrow_mut().pop_front().or_else(|| self.shared.inject.pop());
            match next {
                Some(r) => drop_quietly(r),
                None => break,
            }
        }
    }
}

/// What a foreign driver does next (see [`Core::foreign_idle`]).
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForeignIdle {
    /// Work showed up while arming: run another turn (the notification was cleared).
    Busy,
    /// The PE is armed and the core announced sleep: wait for the PE fd, the reactor fd
    /// (remote wake-ups) or the deadline, then call [`Core::foreign_woke`].
    Sleep(Option<Instant>),
}

/// The seam for a foreign reactor (the tokio driver): the same turn, spin and
/// arm/drain/sleep/clear protocol as the executor's own loop, cut at the points where the
/// own loop would block, so that the reactor can wait instead. The core must be current
/// (inside [`Enter`]) whenever these run.
#[cfg(feature = "tokio")]
impl Core {
    /// The PE notification fd, for the foreign reactor to watch.
    pub(crate) fn pe_fd(&self) -> std::os::fd::RawFd {
        self.pe.borrow().fd()
    }

    /// The fd of the core's own poll (readable when another thread woke the core).
    pub(crate) fn reactor_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.reactor.borrow().as_ref().map(|r| r.poll.as_raw_fd())
    }

    /// Installs the driver's waker (see [`Core::wake_foreign`]).
    pub(crate) fn set_foreign_waker(&self, waker: &Waker) {
        let mut w = self.foreign_waker.borrow_mut();
        if !w.as_ref().is_some_and(|old| old.will_wake(waker)) {
            *w = Some(waker.clone());
        }
    }

    /// One turn without blocking: remote work, local tasks, the PE, the timers, retired
    /// contexts. Returns whether anything happened (or is ready to happen at once). Leaves
    /// the turn's task batch as the budget of inline work (see `budget`) for the foreign
    /// reactor's own tasks, which run between the driver's turns.
    pub(crate) fn foreign_turn(&self) -> bool {
        if self.shared.park.is_notified() {
            self.take_notifications();
        }
        let ran = self.run_tasks();
        let progressed = self.drain_pe();
        let fired = self.fire_timers();
        // `drain_pe` drops deferred buffers only when a context is connected.
        self.slots.drop_deferred();
        self.budget.set(self.config.task_batch);
        ran > 0 || progressed > 0 || fired > 0 || self.has_local_work()
    }

    /// Sets what the next polls may do inline (see `budget`).
    pub(crate) fn set_budget(&self, n: usize) {
        self.budget.set(n);
    }

    /// One round of an idle spin: one progress call; whether work showed up.
    pub(crate) fn foreign_spin(&self) -> bool {
        if self.has_local_work() || self.progress_once() {
            return true;
        }
        // The clock only when there is a timer to compare it with.
        if !self.timers.is_empty() && self.timers.is_due(Instant::now()) {
            self.timers_need_check();
            return true;
        }
        false
    }

    /// Arms the PE, drains once more (closing the arm race) and announces sleep.
    pub(crate) fn foreign_idle(&self) -> ForeignIdle {
        let pe_active = self.pe_active();
        if pe_active {
            if let Err(e) = self.pe.borrow().arm() {
                if !self.arm_error_reported.replace(true) {
                    report(&format!("cannot arm the PE notification, polling instead: {e}"));
                }
                return ForeignIdle::Busy;
            }
            if self.drain_pe() > 0 || !self.queue.borrow().is_empty() {
                self.clear_pe();
                return ForeignIdle::Busy;
            }
        }
        if !self.queue.borrow().is_empty() || !self.shared.park.try_sleep() {
            if pe_active {
                self.clear_pe();
            }
            self.take_notifications();
            return ForeignIdle::Busy;
        }
        ForeignIdle::Sleep(self.timers.next_deadline())
    }

    /// After the foreign reactor woke the driver (or its deadline passed): consume the
    /// wake-ups and clear the PE notification, as the own loop does after `poll`.
    pub(crate) fn foreign_woke(&self, timed: bool) {
        if let Some(r) = self.reactor.borrow_mut().as_mut() {
            // Only the cross-thread waker is registered: consume its event, never block.
            let _ = r.poll.poll(&mut r.events, Some(Duration::ZERO));
        }
        if timed {
            self.timers_need_check();
        }
        self.take_notifications();
        if self.pe_active() {
            self.clear_pe();
        }
    }

    fn has_local_work(&self) -> bool {
        !self.queue.borrow().is_empty()
            || self.shared.park.is_notified()
            || self.inject_pending.get()
            || self.slots.has_deferred()
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("shared", &self.shared)
            .field("queued", &self.queue.try_borrow().map(|q| q.len()).ok())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// See [`Core::enter_progress`].
pub(crate) struct InProgress<'a> {
    core: &'a Core,
    prev: bool,
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.core.in_progress.set(self.prev);
    }
}

/// Runs `core`'s shutdown when dropped (also while unwinding).
pub(crate) struct ShutdownGuard<'a>(pub(crate) &'a Core);

impl Drop for ShutdownGuard<'_> {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}
