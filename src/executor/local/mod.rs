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
//!   `Runnable` to the injection queue; they notify only an executor that announced sleep
//!   ([`ParkState::notify_queued`]), since a running one looks at the queue every turn.
//!
//! The loop (one turn): consume remote notifications → look at the injection queue, run
//! up to `task_batch` tasks → drain the PE (and while the drain woke tasks and the batch
//! lasts, run them and drain again) → fire due timers (every [`TIMER_CHECK_TURNS`]
//! turns, or at once when the idle spin or `poll` saw one due: each look reads the clock) →
//! retire stopped contexts → if nothing happened: spin for the idle budget, then arm the PE,
//! drain it once more (closing the arm race), announce sleep and look at the injection queue
//! once more ([`ParkState::try_sleep_unless`]) and block in `mio::Poll::poll` until the next
//! timer deadline → clear the PE notification → next turn. There is no fixed sleep anywhere;
//! spurious wake-ups just cost one empty turn.
//!
//! Shutdown (on the executor's thread, `CURRENT` still set), bounded by
//! [`SHUTDOWN_BUDGET`]: cancel every task (wake all registered tasks so that their runnables
//! come back, then drop the runnables: futures are dropped on their own thread) → close the
//! injection queue → stop every live context and keep progressing until all are IDLE
//! (in-flight tasks are flushed through their error callbacks, which release their slots) →
//! destroy the contexts → destroy the PE → close the poll and waker fds. Anything that cannot
//! be released safely within the budget (a context that never reaches IDLE, memory the
//! provider may still write) is reported (a `WARN` tracing event, see [`crate::trace`]) and leaked,
//! never freed under DOCA's feet.
//!
//! One module per concept:
//! * `shared`: [`Shared`], what other threads see, and the wakers of `block_on` futures.
//! * `turn`: one turn of the loop (tasks, the PE, timers) and the inline fast paths.
//! * `idle`: the idle protocol (spin, arm the PE, announce sleep, wait, clear), written
//!   once for both drivers: the executor's own loop blocks in its `mio::Poll`, a foreign
//!   reactor (the tokio driver) gets the same steps cut where it waits instead.
//! * `foreign`: the seam a foreign reactor drives.
//! * `shutdown`: cancelling tasks, stopping contexts, releasing the PE.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{RawWakerVTable, Waker};
use std::time::Duration;

use crossbeam_queue::SegQueue;
use mio::unix::SourceFd;
use mio::{Events, Interest, Token};

use super::completion::{KeptWaker, Slots};
use super::context::{Contexts, CtxRecord};
use super::learned_spin::LearnedSpin;
pub(crate) use super::learned_spin::SpinKind;
use super::park::ParkState;
use super::pe::Pe;
use super::posted_ahead::PostedAheadSpin;
use super::runtime::{Handle, IdleMode};
use super::slab::Slab;
use super::task::{wake_local_into, Runnable, TaskMeta};
use super::time::Timers;
use crate::error::{Error, Result};
use run_queue::RunQueue;

#[cfg(feature = "tokio")]
mod foreign;
mod idle;
mod run_queue;
mod shared;
mod shutdown;
mod turn;

#[cfg(feature = "tokio")]
pub(crate) use foreign::ForeignIdle;
pub(crate) use shared::{drop_quietly, is_main_kept, main_kept_waker, same_main, MainWaker, Shared};

/// How long shutdown may wait for tasks to be dropped and contexts to reach IDLE.
pub(crate) const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);

/// How many `doca_pe_progress` calls an operation may make inline, right after its submit
/// (see [`Core::progress_inline`]). Small: its completion is normally the first (or only)
/// one queued; if others are ahead of it, the operation takes the normal path.
pub(crate) const INLINE_PROGRESS: usize = 4;

/// How many `doca_pe_progress` calls a task waiting for its operation may make inside its own
/// poll when the executor would spin anyway (see [`Core::spin_inline`]): a few microseconds
/// when the PE polls memory, enough for a peer's answer on a machine with one CPU per
/// process, short enough that the executor's own loop (contexts' state work, timers) is
/// never far.
pub(crate) const SPIN_INLINE_ROUNDS: u32 = 128;

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
    /// Whether an operation's poll may progress the PE (`Builder::inline_progress`).
    pub(crate) inline_progress: bool,
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

/// Whether this thread runs the executor of `meta` (the owner of its task).
#[inline]
pub(crate) fn on_owner(meta: &TaskMeta) -> bool {
    // `Core::owns` inside `with_current` would say the same; written out, the owner is read
    // before the thread-local look-up, which saves every local wake 2 instructions
    // (`op_cost spawned_yield`).
    let Some(owner) = meta.owner() else { return false };
    with_current(|core| ptr::eq(&*core.shared, owner)).unwrap_or(false)
}

/// The schedule function of every task: to the owner's local queue when called on the
/// owner's thread (no atomics), otherwise to its injection queue plus a notification. The
/// owner is found in the task's metadata (see `task::raw` for which runnables may be queued
/// where).
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
                core.queue_local(r);
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

/// [`schedule`] for a wake on the task's owner thread, which the caller has just checked
/// ([`on_owner`]): straight to this executor's local queue, without looking up the owner a
/// second time (a wake on its own executor's thread is the hot path of a parked operation).
pub(crate) fn schedule_local(runnable: Runnable) {
    let mut runnable = Some(runnable);
    with_current(|core| {
        if let Some(r) = runnable.take() {
            core.queue_local(r);
        }
    });
    if let Some(r) = runnable {
        // Not on an executor after all: the general path decides.
        schedule(r);
    }
}

struct Reactor {
    poll: mio::Poll,
    events: Events,
}

/// The thread-local state of one executor. See the module documentation.
///
/// # The state model
/// Core's flags are not independent switches; together they say three things.
///
/// **Lifecycle** (`foreign`, `closing`, `pe_alive`), one of, in this order:
///
/// | state | `foreign` | `closing` | `pe_alive` | what runs |
/// | --- | --- | --- | --- | --- |
/// | own loop | false | false | true | [`Core::block_on`]: turns, spin, park in the own poll |
/// | foreign | true | false | true | a foreign reactor calls the `foreign_*` steps |
/// | closing | false | true | true | [`Core::shutdown`]: no task is queued or run inline, contexts are stopped |
/// | closed | false | true | false | nothing: the PE is destroyed (or leaked) |
///
/// A foreign core becomes an own-loop one only by closing (shutdown waits in the own poll).
///
/// **Where the thread is** (`in_progress`, `inline_run`, `budget`): inside
/// `doca_pe_progress` or a DOCA callback (no progress, no context destruction, no user
/// code); running a task inline from another task's poll (no nesting); and how much inline
/// work the poll being run may still do (0 outside a poll). Each is set around the region
/// it describes and restored when the region ends (guards), so they nest correctly.
///
/// **What the next turn must look at** (`main_woken_local`, `busy_turns`, `spun_out`):
/// hints set by an event (a local wake of the main future, a timer possibly due, an inline
/// spin that used up the adaptive budget) and cleared by the turn that acts on them. A hint
/// may be stale (a wasted look, or one sleep without a spin first), never missing: every
/// event sets its hint before anything could wait for it. Remote work needs no hint: the
/// turn looks at the injection queue itself. `arm_error_reported` only latches a one-time
/// report.
pub(crate) struct Core {
    pub(crate) shared: Arc<Shared>,
    queue: RunQueue,
    /// Wakers of tasks that have returned `Pending` at least once (and so may be idle with
    /// their waker somewhere else); shutdown wakes them to get their runnables back.
    tasks: RefCell<Slab<Waker>>,
    pe: Pe,
    reactor: RefCell<Option<Reactor>>,
    pub(crate) timers: Timers,
    pub(crate) slots: Slots,
    pub(crate) ctxs: Contexts,
    /// Contexts that owe a doorbell: tasks were submitted to them without DOCA's flush flag
    /// since the last progress. Rung by [`Core::ring_doorbells`] before every progress of
    /// the PE, so once per turn for all the operations a turn submitted.
    doorbells: RefCell<Vec<Rc<CtxRecord>>>,
    /// Whether `doorbells` may hold a context: set with each push, cleared by the ring. The
    /// look before every progress is then one flag, not the list's borrow and an empty pop
    /// (~5 instructions of each drain and each inline progress, where nothing is owed).
    doorbells_owed: Cell<bool>,
    config: Config,
    pub(crate) runtime: Option<Handle>,
    /// Tasks submitted through this executor whose completion callback has not run yet
    /// ([`Core::submit_deferred`], [`Core::submit_now`], [`Core::task_delivered`]): when none
    /// is left, a drain of the PE stops (see [`Core::drain_pe`]).
    in_flight: Cell<usize>,
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
    /// The waker of the main future while [`Core::block_on`] runs (its data and vtable
    /// pointers), by which a completion recognises it ([`main_kept_waker`]); null otherwise.
    main_waker: Cell<(*const (), *const RawWakerVTable)>,
    /// A task's inline spin used up the adaptive budget (see `Core::spin_inline`): the next
    /// idle turn sleeps without spinning again.
    spun_out: Cell<bool>,
    /// The adaptive budget as this executor's waits taught it (see `learned_spin`); its floor
    /// is [`IdleMode::Adaptive`]'s duration (zero in the other modes, which do not use it).
    pub(crate) learned_spin: LearnedSpin,
    /// The same for the yielding spin, while only offloaded commands are in flight
    /// ([`SpinKind::Yielding`]); same floor.
    pub(crate) learned_yield: LearnedSpin,
    /// Whether a posted-ahead operation (a receive, a wait) may spin in its poll, as this
    /// executor's spins for them taught it (see `posted_ahead`): in a later poll (index 0),
    /// in the poll that submitted it (index 1).
    posted_ahead: [PostedAheadSpin; 2],
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
        let adaptive_floor = match config.idle {
            IdleMode::Adaptive(floor) => floor,
            IdleMode::Event | IdleMode::Polling => Duration::ZERO,
        };
        Ok(Core {
            shared,
            queue: RunQueue::with_capacity(256),
            tasks: RefCell::new(Slab::new()),
            pe,
            reactor: RefCell::new(Some(Reactor { poll, events: Events::with_capacity(16) })),
            timers: Timers::new(),
            slots: Slots::new(),
            ctxs: Contexts::new(),
            doorbells: RefCell::new(Vec::new()),
            doorbells_owed: Cell::new(false),
            config: Config { task_batch: config.task_batch.max(1), ..config },
            runtime,
            in_flight: Cell::new(0),
            in_progress: Cell::new(false),
            budget: Cell::new(0),
            busy_turns: Cell::new(0),
            inline_run: Cell::new(false),
            main_woken_local: Cell::new(false),
            main_waker: Cell::new((ptr::null(), ptr::null())),
            spun_out: Cell::new(false),
            learned_spin: LearnedSpin::new(SpinKind::Busy, adaptive_floor),
            learned_yield: LearnedSpin::new(SpinKind::Yielding, adaptive_floor),
            posted_ahead: Default::default(),
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

    /// Submits `task` of `ctx` with a deferred doorbell: `doca_task_submit_ex` without the
    /// flush flag, the doorbell rung by [`ring_doorbells`](Core::ring_doorbells) before the
    /// PE is next progressed. Operations submitted in one turn (a pipeline, many tasks)
    /// then share one doorbell per context. DOCA may hold such a task until a flushed
    /// submit or `doca_ctx_flush_tasks`; nothing can wait for its completion without a
    /// progress of this PE, which rings first.
    ///
    /// # Safety
    /// `task` is a live, allocated task of `ctx`, owned by the caller (as for
    /// `doca_task_submit`).
    #[inline]
    pub(crate) unsafe fn submit_deferred(
        &self,
        ctx: &CtxRecord,
        task: *mut crate::sys::doca_task,
    ) -> crate::sys::doca_error_t {
        // SAFETY: the caller's contract.
        let rc = unsafe { crate::sys::doca_task_submit_ex(task, crate::sys::DOCA_TASK_SUBMIT_FLAG_NONE) };
        if rc == crate::sys::DOCA_SUCCESS {
            self.in_flight.set(self.in_flight.get() + 1);
            if ctx.owe_doorbell() {
                self.note_doorbell(ctx);
            }
        }
        rc
    }

    /// Whether an operation submitted now would be alone: nothing of this executor in
    /// flight and no task waiting to run, so nothing is known to follow it in the turn. An
    /// operation future that cannot progress inline then still goes with its doorbell
    /// ([`submit_now`](Core::submit_now)), as a lane alone in its lanes does: it is the
    /// operation that parks (no inline progress, or its budget spent) and waits for the drain
    /// right after its task's poll, so deferring its doorbell bought nothing and cost ~125
    /// instructions (the provider's held list and flush, the executor's list of owed
    /// contexts; docs/cost.md, nineteenth session). Operations submitted behind it in the
    /// same poll are deferred as before, for one more doorbell per batch at most.
    ///
    /// Not for lanes and windows, whose own rule (ring for an operation alone *in them*)
    /// sees their batch: a batch that begins with every earlier operation delivered has
    /// nothing of the executor in flight, yet the rest of the batch follows at once. (A first
    /// version that rang the first of each such batch measured `write_bw` at 8 B 0.932 →
    /// 0.903 of raw in twelve alternations, and equal once lanes were left out; raw itself
    /// moves by as much between builds, so the reason above is the one to trust.)
    #[inline]
    pub(crate) fn submit_would_be_alone(&self) -> bool {
        self.in_flight.get() == 0 && self.queue.is_empty()
    }

    /// Lists `ctx` among the contexts owed a doorbell: once per batch, so out of line and
    /// the per-operation part of [`submit_deferred`](Core::submit_deferred) stays small
    /// enough to inline.
    #[cold]
    #[inline(never)]
    fn note_doorbell(&self, ctx: &CtxRecord) {
        self.doorbells.borrow_mut().push(ctx.rc());
        self.doorbells_owed.set(true);
    }

    /// Submits `task` with its doorbell (`doca_task_submit`): for an operation whose inline
    /// progress follows at once, which would ring a deferred doorbell first thing anyway.
    /// DOCA's flush also hands over the context's earlier deferred tasks, ahead of this
    /// one, so the submission order stays the order of the submits.
    ///
    /// # Safety
    /// `task` is a live, allocated task of a context of this executor, owned by the caller.
    #[inline]
    pub(crate) unsafe fn submit_now(&self, task: *mut crate::sys::doca_task) -> crate::sys::doca_error_t {
        // SAFETY: the caller's contract.
        let rc = unsafe { crate::sys::doca_task_submit(task) };
        if rc == crate::sys::DOCA_SUCCESS {
            self.in_flight.set(self.in_flight.get() + 1);
        }
        rc
    }

    /// Tasks submitted and not delivered yet (the tokio bridge's tests' view).
    #[cfg(all(test, feature = "tokio", not(loom)))]
    pub(crate) fn tasks_in_flight(&self) -> usize {
        self.in_flight.get()
    }

    /// A completion callback ran for a task this executor submitted. Saturating: a task
    /// submitted by hand on a runtime PE (outside these functions) may come back through our
    /// callbacks too.
    #[inline]
    pub(crate) fn task_delivered(&self) {
        self.in_flight.set(self.in_flight.get().saturating_sub(1));
    }

    /// Rings every owed doorbell (see `doorbells`). Cheap when none is owed.
    ///
    /// Pops one context at a time rather than taking the list: the borrow is not held
    /// across the FFI call, nothing is moved or re-appended, and the list keeps its
    /// allocation. The order among contexts does not matter (DOCA orders tasks within a
    /// context, and each context's tasks are flushed in submit order by its own call).
    #[inline]
    pub(crate) fn ring_doorbells(&self) {
        if !self.doorbells_owed.get() {
            return;
        }
        self.doorbells_owed.set(false);
        loop {
            let Some(rec) = self.doorbells.borrow_mut().pop() else { return };
            rec.flush_doorbell();
        }
    }

    /// The raw PE, for connecting contexts. `None` once shutdown destroyed it.
    pub(crate) fn pe_raw(&self) -> Option<*mut crate::sys::doca_pe> {
        self.pe_alive.get().then(|| self.pe.raw())
    }

    pub(crate) fn in_progress(&self) -> bool {
        self.in_progress.get()
    }

    /// Marks the thread as inside a DOCA callback (or progress) until the guard drops; see
    /// `in_progress`. Nests: the previous value is restored.
    pub(crate) fn enter_progress(&self) -> InProgress<'_> {
        InProgress { core: self, prev: self.in_progress.replace(true) }
    }

    /// Marks the thread as inside the inline progress of a task's poll until the guard
    /// drops: inside DOCA's progress (`in_progress`), with the drops of kept buffers
    /// deferred (`Slots::defer`: their destructors are user code, which must not run in the
    /// middle of another task's poll). Only after [`take_inline_progress`](Core::take_inline_progress)
    /// said yes, which it says only outside progress: so neither flag is set here, and the
    /// guard clears both rather than restore what it found (no nesting to restore; a write
    /// each way instead of a read and a write, on every inline progress).
    #[inline(always)]
    pub(crate) fn enter_inline_progress(&self) -> InlineProgress<'_> {
        debug_assert!(!self.in_progress.get(), "inline progress nested in a progress");
        self.in_progress.set(true);
        self.slots.set_defer(true);
        InlineProgress { core: self }
    }

    /// Whether the task of `meta` belongs to this executor and this executor is the one
    /// running on this thread: the owner check of a local waker made for a slot of this
    /// executor (`completion::keep_waker_in`), without the hooks' indirect call to
    /// `on_owner` and its look-up of the current executor. The poll that keeps the waker is
    /// normally this executor's (the operation's future holds it); the local waker's generic
    /// wake assumes the task's executor is the current one (`schedule_local`), so that is
    /// checked too: a `false` keeps a clone instead.
    #[inline]
    pub(crate) fn owns_here(&self, meta: &TaskMeta) -> bool {
        self.owns(meta) && self.is_current()
    }

    /// Whether the task of `meta` belongs to this executor.
    #[inline]
    fn owns(&self, meta: &TaskMeta) -> bool {
        meta.owner().is_some_and(|o| ptr::eq(o, &*self.shared))
    }

    /// Whether this core is the executor running on this thread.
    #[inline]
    fn is_current(&self) -> bool {
        CURRENT.try_with(|c| ptr::eq(c.get(), self)).unwrap_or(false)
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.get()
    }

    /// Queues a runnable of a task this executor owns, and tells a foreign driver there is
    /// work.
    // Inlined into both schedule functions: out of line, the owner's wake cost 12 more
    // instructions (`op_cost spawned_yield` 276 against 264).
    #[inline(always)]
    fn queue_local(&self, r: Runnable) {
        self.queue.push_back(r);
        self.wake_foreign();
    }

    /// Wakes `kept`, the waker a completion slot of this executor kept, from the slot's
    /// completion callback: when it is a local waker of a task of this executor, the task
    /// goes straight to the run queue (no waker vtable, no hooks' indirect call, no
    /// thread-local look-up of the executor, which the callback has at hand); the same for
    /// the main future of its `block_on`. Any other waker is woken as usual.
    ///
    /// The generic path (`schedule_local`) queues on the *current* executor, which it assumes
    /// to be the task's; this one queues on `self` after checking that `self` is the task's
    /// executor, and falls back to the generic wake when it is not (a local waker of another
    /// executor's task on this thread: not expected, as a local waker is made only for a
    /// task of the current executor and a completion is delivered by the executor whose PE
    /// progresses, the current one; checked anyway, it is one comparison).
    ///
    /// Out of line: the callback's code is compiled per task kind, and this is its one wake.
    #[inline(never)]
    pub(crate) fn wake_kept(&self, kept: KeptWaker) {
        // SAFETY: a `KeptWaker` never leaves the thread it was made on, nor does its waker
        // here.
        let waker = unsafe { kept.into_waker() };
        // The main future of this executor's `block_on`, the other waker a slot keeps in a
        // form of its own: its flag set here, as its waker would after looking the current
        // executor up. Only when the waker names `self`'s main future (otherwise the waker
        // decides, below); it holds nothing, so forgetting it releases nothing. (Looked at
        // first: after the task's path, with the generic wake out of line, it made the task's
        // path lose the inlining of the run queue's push, +17 instructions.)
        if is_main_kept(&waker) && self.main_waker.get().0 == waker.data() {
            self.main_woken_local.set(true);
            std::mem::forget(waker);
            return;
        }
        // SAFETY: the waker stays on this thread; `self` runs on this thread (a `Core` never
        // leaves its thread), and `queue_local` puts the runnable in its local queue, the
        // queue of the executor that the check found to own the task.
        let other = unsafe { wake_local_into(waker, |meta| self.owns(meta), |r| self.queue_local(r)) };
        if let Some(waker) = other {
            wake_generic(waker);
        }
    }

    /// Queues a runnable spawned on this thread (or drops it if the executor is closing,
    /// which cancels the task: its `JoinHandle` reports cancellation).
    pub(crate) fn push_local(&self, r: Runnable) {
        if self.closing.get() {
            drop_quietly(r);
        } else {
            self.queue_local(r);
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
    #[cfg(all(test, not(loom)))]
    pub(crate) fn registered_tasks(&self) -> usize {
        self.tasks.borrow().len()
    }

    /// Whether the PE can have work: only a connected context produces any.
    fn pe_active(&self) -> bool {
        self.pe_alive.get() && !self.ctxs.is_empty()
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("shared", &self.shared)
            .field("queued", &self.queue.len())
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

/// See [`Core::enter_inline_progress`].
pub(crate) struct InlineProgress<'a> {
    core: &'a Core,
}

impl Drop for InlineProgress<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.core.slots.set_defer(false);
        self.core.in_progress.set(false);
    }
}

/// [`Core::wake_kept`]'s other wakers: out of its way, so that its task's path stays small
/// enough for the run queue's push to be inlined into it (with this wake inline, the push
/// was a call: a parked write in a task 1 489 instructions against 1 470).
#[cold]
#[inline(never)]
fn wake_generic(waker: Waker) {
    waker.wake();
}

/// Runs `core`'s shutdown when dropped (also while unwinding).
pub(crate) struct ShutdownGuard<'a>(pub(crate) &'a Core);

impl Drop for ShutdownGuard<'_> {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}
