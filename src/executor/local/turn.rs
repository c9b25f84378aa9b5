//! One turn of the executor's loop: remote work, local tasks, the PE, the timers; and the
//! inline fast paths a task's poll may take (progress right after a submit, run a task it
//! just spawned).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::{Core, InProgress, MainWaker, SPIN_INLINE_ROUNDS, TIMER_CHECK_TURNS};
use crate::executor::learned_spin::{LearnedSpin, SpinKind};
use crate::executor::posted_ahead::Spun;
use crate::executor::runtime::IdleMode;

impl Core {
    /// The inline completion fast path, first half: whether an operation may progress the
    /// PE from its own poll now; if so, one unit of the poll's budget is taken for it and
    /// the operation calls [`progress_inline`](Core::progress_inline) right after its
    /// submit. It asks before it submits: when progress follows at once, it submits with
    /// the doorbell (one call to DOCA) rather than deferring the doorbell to that progress.
    ///
    /// Refused when not allowed or not useful:
    /// * inside `doca_pe_progress` or a DOCA callback (DOCA forbids progress from there);
    /// * when this core is not the executor running on this thread (the callbacks would
    ///   look for their slots in another executor's table), or it is shutting down;
    /// * when the poll's `budget` is spent: a task that keeps submitting operations that
    ///   complete at once then goes `Pending` every `task_batch` operations, like a task
    ///   that yields, so it cannot starve the other tasks, the PE or the timers;
    /// * always, when the runtime was built without it (`Builder::inline_progress(false)`).
    #[inline]
    pub(crate) fn take_inline_progress(&self) -> bool {
        let budget = self.budget.get();
        if budget == 0
            || !self.config.inline_progress
            || self.in_progress.get()
            || self.closing.get()
            || !self.pe_alive.get()
            || !self.is_current()
        {
            return false;
        }
        self.budget.set(budget - 1);
        true
    }

    /// The inline completion fast path, second half, once
    /// [`take_inline_progress`](Core::take_inline_progress) said yes and the operation's task
    /// is submitted: progresses the PE up to `calls` times while it has work, until `done()`
    /// (the operation's slot is complete); returns whether it is. The future then returns
    /// `Ready` at once instead of `Pending`, a trip round the loop and a re-poll.
    ///
    /// A single operation passes [`INLINE_PROGRESS`](super::INLINE_PROGRESS): its completion
    /// is normally the first one queued. A batch goes through
    /// [`progress_batch_inline`](Core::progress_batch_inline): the number of its operations
    /// in flight and a `done` that is never true, so that the loop ends when the PE has
    /// nothing more: each `doca_pe_progress` delivers one completion, and stopping at the
    /// oldest would come back here for every other result, paying this call's fixed cost and
    /// a doorbell flush for one or two operations each time instead of once per batch.
    ///
    /// Completions of other operations delivered meanwhile wake their tasks as usual (their
    /// callbacks run no user code: they store results and wake wakers; slots released
    /// here drop their kept buffers later, from the loop).
    // Inlined into the futures' poll (a call and its register saves, ~33 instructions of every
    // operation that completes during its own poll).
    #[inline]
    pub(crate) fn progress_inline(&self, calls: usize, done: impl Fn() -> bool) -> bool {
        let _inside = self.enter_inline_progress();
        // The doorbells owed by earlier submits (of this context or others).
        self.ring_doorbells();
        let pe = &self.pe;
        let mut complete = false;
        for _ in 0..calls {
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

    /// The inline progress of a batch of operations (a window's, the lanes'), waiting for its
    /// oldest: when this poll may progress the PE ([`take_inline_progress`](Core::take_inline_progress)),
    /// collects every completion the PE has, up to one call per operation in flight, not
    /// just the oldest: one call (and one flush of the doorbells the batch deferred) per
    /// batch of results rather than per one or two, and a poll bounded like a single
    /// operation's. Returns whether it progressed (the caller then looks at its oldest).
    #[inline]
    pub(crate) fn progress_batch_inline(&self, in_flight: usize) -> bool {
        if !self.take_inline_progress() {
            return false;
        }
        self.progress_inline(in_flight, || false);
        true
    }

    /// The wait of a batch (a window's, the lanes') for its oldest operation from its own
    /// poll: the batch's inline progress, then, if the oldest is still in flight, the inline
    /// spin ([`spin_inline`](Core::spin_inline)); for a batch of receives (`posted_ahead`)
    /// the spin only as the executor's later-poll rule for posted-ahead waits allows
    /// ([`spin_inline_for`](Core::spin_inline_for): the batch's operations were submitted
    /// before this wait). Returns whether `oldest_done()`; if not, the caller registers its
    /// waker (after the spin, so that a completion the spin delivered wakes nobody).
    // Always inlined: left to LLVM, it went out of line in the lanes' `poll_next` once the
    // window called it too (`op_cost lane` +22).
    #[inline(always)]
    pub(crate) fn wait_batch_inline(
        &self,
        in_flight: usize,
        posted_ahead: bool,
        oldest_done: impl Fn() -> bool,
    ) -> bool {
        (self.progress_batch_inline(in_flight) && oldest_done())
            || self.spin_inline_for(false, posted_ahead, false, oldest_done)
    }

    /// The wait of a task whose operation is in flight and that the executor would only
    /// spin for: progresses the PE from the task's own poll, as the executor's idle spin
    /// would, up to [`SPIN_INLINE_ROUNDS`] calls, until `done()`. Returns whether it is done;
    /// the future then returns `Ready` without the trip back to the executor (the waker, the
    /// run queue, the re-poll: ~30 ns of each two-sided round trip here).
    ///
    /// Only when the executor would spin in its place, for as long:
    /// * its idle mode spins: [`IdleMode::Polling`], or [`IdleMode::Adaptive`], whose budget
    ///   bounds this spin as it bounds the executor's (measured from the end of round 1, the
    ///   clock read after rounds 2, 4, 8 ...: a round costs microseconds when a context's
    ///   progress makes system calls). An adaptive spin that used up its budget here leaves
    ///   the executor to sleep at its next idle turn instead of spinning a second budget
    ///   ([`take_spun_out`](Core::take_spun_out));
    /// * it is not displaced nor under a foreign driver (tokio's reactor must get its thread
    ///   back), and the poll may progress ([`take_inline_progress`](Core::take_inline_progress));
    /// * nothing else can run. It stops as soon as something else can: another task woken (by
    ///   a completion of this progress, or from another thread), the main future woken, a
    ///   shutdown.
    #[inline]
    pub(crate) fn spin_inline(&self, done: impl Fn() -> bool) -> bool {
        // The mode's check inline: an executor that never spins pays one comparison.
        self.config.idle != IdleMode::Event && self.spin_inline_spinning(done) == Spun::Caught
    }

    /// The wait of a task for an operation of its own, from its poll: the inline spin
    /// ([`spin_inline`](Core::spin_inline)) for most kinds; for a kind posted ahead of what
    /// completes it (`DocaTask::POSTED_AHEAD`: a receive, a sync-event wait), the same spin
    /// only where this executor's earlier spins for such waits say the task is not about to
    /// send what completes it (`posted_ahead`), learned apart for the poll that submitted
    /// the operation (`submitted_now`) and for the later ones; never for an offloaded
    /// command (`DocaTask::REMOTE`, see there). Returns whether `done()`.
    // Inlined into the futures' poll, where the kind's constants fold it to one of its arms.
    #[inline(always)]
    pub(crate) fn spin_inline_for(
        &self,
        remote: bool,
        posted_ahead: bool,
        submitted_now: bool,
        done: impl Fn() -> bool,
    ) -> bool {
        if remote {
            return false;
        }
        if !posted_ahead {
            return self.spin_inline(done);
        }
        if self.config.idle == IdleMode::Event {
            return false;
        }
        let rule = &self.posted_ahead[usize::from(submitted_now)];
        if !rule.admit() {
            return false;
        }
        let spun = self.spin_inline_spinning(done);
        rule.learn(spun);
        spun == Spun::Caught
    }

    /// The backoff of the posted-ahead rule of the polls that submit (`submitted_now`) or
    /// of the later ones (the tests' view).
    #[cfg(test)]
    pub(crate) fn posted_ahead_backoff(&self, submitted_now: bool) -> u32 {
        self.posted_ahead[usize::from(submitted_now)].backoff()
    }

    fn spin_inline_spinning(&self, done: impl Fn() -> bool) -> Spun {
        let budget = match self.config.idle {
            IdleMode::Adaptive(_) => match self.learned_spin.budget() {
                b if b.is_zero() => return Spun::Stopped,
                b => Some(b),
            },
            _ => None,
        };
        if self.foreign.get()
            || self.shared.displaced.load(Ordering::Relaxed)
            || self.has_other_work()
            || !self.take_inline_progress()
        {
            return Spun::Stopped;
        }
        let _inside = self.enter_inline_progress();
        self.ring_doorbells();
        let pe = &self.pe;
        let mut budget = budget.map(SpinBudget::new);
        for round in 1..=SPIN_INLINE_ROUNDS {
            pe.progress();
            if done() {
                self.learned_spin.caught();
                return Spun::Caught;
            }
            if self.has_other_work() {
                return Spun::Stopped;
            }
            if let Some(budget) = &mut budget {
                if round.is_power_of_two() && budget.spent(Instant::now()) {
                    self.spun_out.set(true);
                    return Spun::RanOut;
                }
            }
            std::hint::spin_loop();
        }
        Spun::RanOut
    }

    /// The spin an adaptive idle uses now: the yielding one while every operation in flight
    /// is an offloaded command (`DocaTask::REMOTE`), whose answer is another processor's work
    /// that may be waiting for this CPU (see `learned_spin`); the busy one otherwise.
    pub(crate) fn adaptive_spin_kind(&self) -> SpinKind {
        if self.slots.only_remote() {
            SpinKind::Yielding
        } else {
            SpinKind::Busy
        }
    }

    /// The learned budget of the spin of `kind`.
    pub(crate) fn learned(&self, kind: SpinKind) -> &LearnedSpin {
        match kind {
            SpinKind::Busy => &self.learned_spin,
            SpinKind::Yielding => &self.learned_yield,
        }
    }

    /// Whether a task's inline spin used up the adaptive budget since the last idle turn
    /// (then that turn sleeps at once: the executor's own spin would only repeat it).
    /// Consumes the flag.
    pub(crate) fn take_spun_out(&self) -> bool {
        self.spun_out.replace(false)
    }

    /// [`has_ready`](Core::has_ready) as a task's poll sees it: the main future's
    /// cross-thread flag is not at hand there, but its waker also notifies the park (and
    /// `has_ready` adds the flag itself).
    fn has_other_work(&self) -> bool {
        !self.queue.is_empty()
            || self.main_woken_local.get()
            || self.shared.park.is_notified()
            || self.shared.has_injected()
            || self.shared.shutdown_requested()
    }

    pub(super) fn main_woken(&self, main: &MainWaker) -> bool {
        self.main_woken_local.get() || main.woken.load(Ordering::Relaxed)
    }

    /// Consumes the main future's wake-up flags; whether it must be polled.
    pub(super) fn take_main_woken(&self, main: &MainWaker) -> bool {
        // `|` not `||`: both flags are consumed. The swap (not load + store) is needed for the
        // cross-thread flag: it synchronizes with the waker's store, so what the waker
        // published before waking is visible to the poll that follows.
        self.main_woken_local.replace(false)
            | (main.woken.load(Ordering::Relaxed) && main.woken.swap(false, Ordering::Acquire))
    }

    /// Work that this thread can see without the handshake: local tasks, a woken main future,
    /// and (cheap hints) remote work and shutdown.
    pub(super) fn has_ready(&self, main: &MainWaker) -> bool {
        self.has_other_work() || main.woken.load(Ordering::Relaxed)
    }

    /// Runs `fut` to completion on this executor (the calling thread), running spawned tasks
    /// and driving the PE meanwhile. Returns `None` if a shutdown was requested first.
    /// Must be called inside [`Enter`](super::Enter) for this core.
    pub(crate) fn block_on<F: Future>(&self, mut fut: Pin<&mut F>) -> Option<F::Output> {
        let main = Arc::new(MainWaker { woken: AtomicBool::new(false), shared: self.shared.clone() });
        self.main_woken_local.set(true);
        let waker = Waker::from(main.clone());
        let _main = self.enter_main(&waker);
        let mut cx = Context::from_waker(&waker);
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

    /// Consumes pending remote notifications. The work they announced has its own flag or
    /// queue, which the turn looks at anyway (the injection queue among them, whose pushers
    /// notify only a sleeping executor).
    #[inline]
    pub(super) fn take_notifications(&self) {
        self.shared.park.wake();
    }

    /// The work of a turn, the same for both drivers: remote notifications, up to
    /// `task_batch` task runs, drains of the PE, due timers. Returns whether the PE or the
    /// timers had work, which may have woken tasks. Tasks that ran are not a reason by
    /// themselves for another turn: what they woke or spawned is in the queue, which the
    /// caller looks at, and the drain after them already took what their submits completed.
    /// A turn that ran tasks and found the PE empty goes idle at once instead of draining it
    /// again (an offloaded command's turn: one walk over the PE's contexts fewer, ~1 100
    /// instructions with a UROM worker's connections).
    ///
    /// The tasks a drain woke run in the same turn while the batch lasts, and the PE is
    /// drained again after them: an operation that parks (its completion comes after its
    /// poll, as on hardware when nothing spins for it) then costs its task one run and one
    /// drain, not a whole turn of the loop (the return to `block_on`, its looks at the main
    /// future and at a shutdown, the notifications, the injection queue and the timers'
    /// count: 83 instructions a parked operation in a task, docs/cost.md, nineteenth
    /// session). The loop ends when a drain finds nothing, wakes no task, or wakes the main
    /// future (whose poll comes first), and when the batch is spent; remote work and the
    /// timers wait at most one batch, as behind a batch of tasks that never park.
    pub(super) fn work(&self) -> bool {
        if self.shared.park.is_notified() {
            self.take_notifications();
        }
        self.take_injected();
        let mut left = self.config.task_batch;
        let mut progressed = false;
        // What the last drain left of the batch. A run takes one unit at least, so finding it
        // unchanged after `run_tasks` says the drain woke no task: the pop that found the queue
        // empty is the look at it (a look of its own after each drain, then the pop, cost
        // ~5 instructions of every parked operation's turn).
        let mut after_drain = usize::MAX;
        loop {
            left = self.run_tasks(left);
            if left == after_drain {
                break;
            }
            if self.drain_pe_inlined() == 0 {
                break;
            }
            progressed = true;
            if left == 0 || self.main_woken_local.get() {
                break;
            }
            after_drain = left;
        }
        let fired = self.fire_timers();
        progressed || fired > 0
    }

    /// One turn of the loop (see the module documentation).
    pub(super) fn turn(&self, main: &MainWaker) {
        if self.work() || self.has_ready(main) {
            return;
        }
        let idle = if self.shared.displaced.load(Ordering::Relaxed) { IdleMode::Event } else { self.config.idle };
        match idle {
            IdleMode::Polling => {
                self.spin(main, None);
            }
            IdleMode::Event => self.park(main, None),
            IdleMode::Adaptive(_) => {
                let kind = self.adaptive_spin_kind();
                let learned = self.learned(kind);
                let budget = learned.budget();
                let caught = !budget.is_zero()
                    && match kind {
                        // A task's inline spin that used the budget up leaves nothing for
                        // this one to do but repeat it.
                        SpinKind::Busy => !self.take_spun_out() && self.spin(main, Some(budget)),
                        SpinKind::Yielding => self.spin_yielding(main, budget),
                    };
                if caught {
                    learned.caught();
                } else {
                    // A sleep teaches the budget only when a spin of it preceded.
                    self.park(main, (!budget.is_zero()).then_some(kind));
                }
            }
        }
    }

    /// Fires the due timers if enough turns went by since the last look, or a look was
    /// asked for (see [`TIMER_CHECK_TURNS`]); returns how many fired.
    pub(super) fn fire_timers(&self) -> usize {
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
    pub(super) fn timers_need_check(&self) {
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
        let Some(runnable) = self.queue.take_only(id) else { return false };
        self.budget.set(budget - 1);
        self.inline_run.set(true);
        struct Reset<'a>(&'a Cell<bool>);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _reset = Reset(&self.inline_run);
        // Never unwinds: the run catches panics of the future (`task::raw`).
        runnable.run();
        true
    }

    /// Moves remote work to the local queue, up to `task_batch` runnables. The injection
    /// queue is looked at (its two ends, lines that stay in this CPU's cache until a push)
    /// before it is popped: remote pushes notify only a sleeping executor
    /// (`Shared::schedule_remote`), so the queue itself is what says there is work.
    #[inline]
    fn take_injected(&self) {
        if self.shared.has_injected() {
            for _ in 0..self.config.task_batch {
                let Some(r) = self.shared.inject.pop() else { break };
                self.queue.push_back(r);
            }
        }
    }

    /// Runs local runnables until the queue is empty or `batch` runs are spent; returns how
    /// many runs are left. A run's inline work (see `budget`) counts against the batch.
    #[inline]
    fn run_tasks(&self, batch: usize) -> usize {
        let mut left = batch;
        while left > 0 {
            // Popped before `run`: the task may schedule itself or others.
            let next = self.queue.pop_front();
            let Some(r) = next else { break };
            // The task may spend what is left of the batch on inline work (see `budget`).
            left -= 1;
            self.budget.set(left);
            // Never unwinds: the run catches panics of the future (`task::raw`).
            r.run();
            left = self.budget.replace(0);
        }
        left
    }

    /// Drains the PE (callbacks run inside), then does the context work that callbacks
    /// deferred. Returns the number of progress units done: 0 only when the PE had nothing.
    ///
    /// The drain stops early once no task of this executor is in flight (after a call that
    /// did work, so the caller comes back for the rest): the tasks those completions woke
    /// then run at once, rather than after one more `doca_pe_progress` that could find only
    /// a context's event, at best. That call walks every context of the PE, and it lay on
    /// the path from every parked operation's completion to its task: ~290 instructions
    /// on doca-soft (`OP_COST_PARK=1 op_cost`, docs/cost.md, eighteenth session).
    pub(crate) fn drain_pe(&self) -> usize {
        self.drain_pe_inlined()
    }

    /// [`drain_pe`](Core::drain_pe), inlined into the turn's loop (`work`): the call cost a
    /// parked operation in the main future 14 instructions (2 in a task).
    #[inline(always)]
    fn drain_pe_inlined(&self) -> usize {
        if !self.pe_active() {
            return 0;
        }
        self.ring_doorbells();
        let n = {
            // Never nested: a drain is the loop's, the idle protocol's or shutdown's, none of
            // which runs inside a progress (DOCA forbids progress from there anyway). So the
            // guard restores `false` rather than what it found: a store instead of a load and a
            // store, and the context upkeep's look at the flag below is known to pass.
            debug_assert!(!self.in_progress.get(), "a drain of the PE nested in a progress");
            self.in_progress.set(true);
            let _inside = InProgress { core: self, prev: false };
            self.pe.drain(|| self.in_flight.get() > 0)
        };
        self.slots.drop_deferred();
        self.ctxs.maintain(self);
        n
    }

    /// One `doca_pe_progress` call (callbacks run inside), then the context work that
    /// callbacks deferred. Returns whether there was work.
    pub(super) fn progress_once(&self) -> bool {
        if !self.pe_active() {
            return false;
        }
        self.ring_doorbells();
        let did = {
            let _inside = self.enter_progress();
            self.pe.progress()
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
    pub(super) fn spin(&self, main: &MainWaker, budget: Option<Duration>) -> bool {
        let mut budget = budget.map(SpinBudget::new);
        let floor = self.learned_spin.floor();
        let mut i: u32 = 0;
        loop {
            if self.has_ready(main) || self.progress_once() {
                return true;
            }
            i = i.wrapping_add(1);
            // The clock, for the timers and for the budget (not when there is neither):
            // every 16 rounds, and with a budget also after rounds 1, 2, 4 and 8. A round is
            // cheap when the PE polls memory, but costs microseconds when a ctx's progress
            // makes system calls (a UROM worker's sockets: ~3 µs); reading the clock only
            // every 16 rounds then stretched the 5 µs adaptive budget to ~46 µs, which on a
            // machine whose CPUs the awaited process shares (the soft UROM worker) delayed the
            // answer by as much. The early reads bound the overshoot to about two rounds or 2×
            // the budget, for four clock reads (~20 ns each) per spin; a polling spin (no
            // budget) only looks at the timers, every 16 rounds as before.
            let look = if budget.is_some() {
                i % 16 == 0 || (i < 16 && i.is_power_of_two())
            } else {
                i % 16 == 0 && !self.timers.is_empty()
            };
            if look {
                let now = Instant::now();
                if self.timers.is_due(now) {
                    self.timers_need_check();
                    return true;
                }
                if let Some(b) = budget.as_mut() {
                    let spun = b.spun(now);
                    if spun >= b.budget {
                        return false;
                    }
                    // Beyond the configured budget (a learned extension, see `learned_spin`),
                    // give the CPU to any thread waiting for it: when the awaited peer shares
                    // this CPU, spinning on would only delay it. Alone on its CPU the thread
                    // is back at once.
                    if spun >= floor {
                        std::thread::yield_now();
                    }
                }
            }
            std::hint::spin_loop();
        }
    }

    /// The yielding spin ([`SpinKind::Yielding`]): one progress call per round, and the CPU
    /// given up after each round that found nothing, for at most `budget`. Returns whether
    /// work showed up. A round costs a system call, so the clock is read every round.
    ///
    /// Entered right after the turn's [`work`](Core::work), whose drain found the PE empty:
    /// the first round gives the CPU up before it progresses again. What it waits for is
    /// another processor's answer, a round trip of microseconds at the least, unlikely to
    /// have come in the moment since; and where that processor's work runs on this CPU (the
    /// soft worker), the yield is what lets it start.
    pub(super) fn spin_yielding(&self, main: &MainWaker, budget: Duration) -> bool {
        let mut budget = SpinBudget::new(budget);
        let mut first = true;
        loop {
            if self.has_ready(main) || (!first && self.progress_once()) {
                return true;
            }
            first = false;
            let now = Instant::now();
            if self.timers.is_due(now) {
                self.timers_need_check();
                return true;
            }
            if budget.spent(now) {
                return false;
            }
            std::thread::yield_now();
        }
    }
}

/// An adaptive spin's time budget, measured from the end of its first round: the spin looks
/// at the clock only after a round (rounds 1, 2, 4 ... of a task's inline spin, of the
/// executor's idle spin), and the first look only starts the measure. A wait that the first
/// round ends (most of them: a completion already under way) reads no clock at all (~23 ns a
/// read here), for an overshoot of at most that round.
struct SpinBudget {
    budget: Duration,
    start: Option<Instant>,
}

impl SpinBudget {
    fn new(budget: Duration) -> SpinBudget {
        SpinBudget { budget, start: None }
    }

    /// Whether the budget is spent by `now` (the clock at one of the spin's looks).
    fn spent(&mut self, now: Instant) -> bool {
        self.spun(now) >= self.budget
    }

    /// How long the spin has lasted by `now` (the clock at one of the spin's looks).
    fn spun(&mut self, now: Instant) -> Duration {
        match self.start {
            None => {
                self.start = Some(now);
                Duration::ZERO
            }
            Some(start) => now.duration_since(start),
        }
    }
}
