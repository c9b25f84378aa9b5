//! How long an executor in [`IdleMode::Adaptive`](super::IdleMode::Adaptive) spins before it
//! sleeps: learned from its own waits.
//!
//! # Why a fixed spin is not enough
//! A sleeping executor pays a wake-up when its work comes: the system calls, and the time the
//! kernel takes to run a thread whose CPU went idle. That is 2–5 µs on bare metal, but
//! 20–40 µs on the VMs this project is measured on (`docs/cost.md`). Two executors that wait
//! for each other (a ping-pong, a collective's rounds) with a spin shorter than the wake-up
//! fall into a slow mode that keeps itself going: once one of them sleeps, its answer comes a
//! wake-up late, which outlasts the other's spin, so the other sleeps too, and so on.
//! `perf --test allreduce_lat --mode host` (8 B, two processes, a 5 µs spin) ran at 2 µs
//! for most collectives and ~80 µs for every tenth or more: p50 2.1 µs, p90 78 µs.
//!
//! # The rule
//! The budget starts at the configured one (the *floor*) and moves within
//! `[floor, ceiling]` ([`ceiling_for`]), after each idle episode that spun:
//! * the spin found work: the budget stays;
//! * the spin ran out, and the sleep that followed was ended by work (not by a timer) before
//!   the wait as a whole (spin + sleep) reached the ceiling: the next spin lasts as long as
//!   this wait did. That spin would have caught it, without the sleep and the wake-up;
//! * the wait was longer than the ceiling: the spin was waste; the budget halves (not below
//!   the floor);
//! * a raised budget that ran out again, followed by another short sleep, three times in a
//!   row: the work came each time only once this thread gave its CPU up, which is what
//!   happens when the peer shares the CPU (more processes than CPUs). Spinning longer
//!   cannot help there, it only delays the peer: back to the floor, and no raise for the
//!   next [`HOLD_SLEEPS`] sleeps.
//!
//! The price is bounded: an executor whose waits are all long spins about the floor per
//! idle episode, as before; one whose waits are short spins at most the ceiling, and only
//! while that catches its work.
//!
//! # Sharing a CPU
//! Past the floor, the executor's spin (`Core::spin`) calls `sched_yield` at each of its
//! clock looks (every 16 rounds once the first 16 are done), and the tokio driver's spin at
//! each of its rounds: a thread that waits for this CPU, typically the peer the spin waits
//! for, runs at once instead of after the spin. Alone on its CPU the call returns at once
//! (a system call: 0.49 µs on this VM). The fruitless-raise rule alone was not enough:
//! without the yield, four host-only members on two CPUs (two per CPU) spun the learned
//! budget while their CPU's other member waited, and an 8 B allreduce took 3× longer (p50
//! 34 → 98–109 µs); with it, 34 → 23 µs.
//!
//! Measured on the 2-CPU VM (`perf --test allreduce_lat,barrier_lat --mode host --size 8`,
//! builds alternated, load 0.8–1.9): two processes, allreduce p90 56–79 µs → 1.7–2.4 µs, p99
//! 75–102 → 7.1–10.1 µs; the p50 (1.6 µs) and the offloaded rows did not move.
//!
//! # Waiting for another processor's answer: the yielding spin
//! While every operation in flight is an offloaded command (`DocaTask::REMOTE`: a UROM
//! worker's answer), what the executor waits for is another processor's work. On a
//! BlueField that is the DPU's; on the soft provider it is a worker process that, with fewer
//! CPUs than processes, waits for this very CPU. A busy spin would only delay it, and a
//! sleep costs the answer a wake-up (an eventfd write, the switch back and the idle
//! protocol's system calls: ~2 µs of this VM's ~4.5 µs eventfd round trip on one CPU,
//! against ~2.8 µs for a `sched_yield` round trip). So that wait has its own spin
//! ([`SpinKind::Yielding`]): a progress call and a `sched_yield` per round, for its own
//! learned budget. It gives the CPU to the worker at once, and takes the answer without a
//! wake-up when it comes within the budget; alone on its CPU (a DPU does the work) each
//! round is a 0.5 µs system call, a spin like any other. The same rules teach its budget,
//! except the fruitless-raise rule: a spin that yields at every round never keeps a peer
//! from its CPU, so a longer one cannot hurt it.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How far the learned budget may rise above the floor.
pub(crate) const CEILING_FACTOR: u32 = 20;

/// The most the learned budget rises to, whatever the floor (a floor above it stays as is).
pub(crate) const MAX_LEARNED: Duration = Duration::from_micros(100);

/// Raises that ran out in a row before the budget goes back to the floor.
const FRUITLESS_LIMIT: u8 = 3;

/// Sleeps without a raise after the budget went back to the floor for fruitless raises.
pub(crate) const HOLD_SLEEPS: u16 = 64;

/// The ceiling of a floor: [`CEILING_FACTOR`] times it, at most [`MAX_LEARNED`], and never
/// below the floor itself.
pub(crate) fn ceiling_for(floor: Duration) -> Duration {
    floor.saturating_mul(CEILING_FACTOR).min(MAX_LEARNED).max(floor)
}

/// The two ways an idle executor spins (see the module documentation); each has its own
/// learned budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpinKind {
    /// Poll the PE round after round, yielding the CPU only past the floor: the completion
    /// comes from memory this process polls (hardware, or the provider in this process).
    Busy,
    /// A progress call and a `sched_yield` per round: only offloaded commands are in flight,
    /// whose answer is another processor's work.
    Yielding,
}

/// The learned spin budget of one executor (see the module documentation). Thread-local, as
/// the executor's other idle state.
#[derive(Debug)]
pub(crate) struct LearnedSpin {
    /// Which spin this budget is for: a yielding spin skips the fruitless-raise rule.
    kind: SpinKind,
    floor: Duration,
    ceiling: Duration,
    budget: Cell<Duration>,
    /// Raised spins that ran out in a row, each followed by a short sleep.
    fruitless: Cell<u8>,
    /// Sleeps left before the budget may rise again.
    hold: Cell<u16>,
    /// The sleep under way, if a spin ran out just before it: when it began, and the timer
    /// deadline that would end it (see [`LearnedSpin::sleeping`]).
    sleep: Cell<Option<(Instant, Option<Instant>)>>,
}

impl LearnedSpin {
    /// A budget for a spin of `kind` that starts at `floor`.
    pub(crate) fn new(kind: SpinKind, floor: Duration) -> LearnedSpin {
        LearnedSpin {
            kind,
            floor,
            ceiling: ceiling_for(floor),
            budget: Cell::new(floor),
            fruitless: Cell::new(0),
            hold: Cell::new(0),
            sleep: Cell::new(None),
        }
    }

    /// The configured budget, below which the learned one never falls.
    #[inline]
    pub(crate) fn floor(&self) -> Duration {
        self.floor
    }

    /// How long the next spin may last.
    #[inline]
    pub(crate) fn budget(&self) -> Duration {
        self.budget.get()
    }

    /// A spin found work within the budget.
    #[inline]
    pub(crate) fn caught(&self) {
        self.fruitless.set(0);
    }

    /// The executor is about to sleep (step 1 of the idle protocol said so), until work or
    /// `deadline`. `after_spin`: a spin of the budget ran out just before, so the sleep's
    /// length will say how long the wait was ([`LearnedSpin::woke`]); a sleep without a spin
    /// first teaches nothing.
    pub(crate) fn sleeping(&self, after_spin: bool, deadline: Option<Instant>) {
        self.sleep.set(after_spin.then(|| (Instant::now(), deadline)));
    }

    /// The executor woke from the sleep of [`LearnedSpin::sleeping`]: unless its deadline
    /// ended it, the wait was the spin and this sleep ([`LearnedSpin::slept`]).
    pub(crate) fn woke(&self) {
        if let Some((start, deadline)) = self.sleep.take() {
            let now = Instant::now();
            if deadline.is_none_or(|d| now < d) {
                self.slept(now - start);
            }
        }
    }

    /// A spin of the current budget ran out, and the sleep after it lasted `slept` before
    /// work ended it. (A sleep that a timer's deadline ended says nothing about when work
    /// comes: do not report it.)
    pub(crate) fn slept(&self, slept: Duration) {
        let spun = self.budget.get();
        let wait = spun.saturating_add(slept);
        if wait > self.ceiling {
            self.fruitless.set(0);
            self.budget.set((spun / 2).max(self.floor));
            return;
        }
        if self.hold.get() > 0 {
            self.hold.set(self.hold.get() - 1);
            return;
        }
        if spun > self.floor && self.kind == SpinKind::Busy {
            let n = self.fruitless.get() + 1;
            if n >= FRUITLESS_LIMIT {
                self.fruitless.set(0);
                self.budget.set(self.floor);
                self.hold.set(HOLD_SLEEPS);
                return;
            }
            self.fruitless.set(n);
        }
        self.budget.set(wait.max(self.floor));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn the_ceiling_is_twenty_floors_at_most_a_hundred_microseconds_never_below_the_floor() {
        assert_eq!(ceiling_for(US * 2), US * 40);
        assert_eq!(ceiling_for(US * 5), US * 100);
        assert_eq!(ceiling_for(US * 50), US * 100);
        assert_eq!(ceiling_for(US * 500), US * 500);
        assert_eq!(ceiling_for(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_short_wait_sets_the_next_spin_to_its_length() {
        let s = LearnedSpin::new(SpinKind::Busy, US * 5);
        s.slept(US * 40);
        assert_eq!(s.budget(), US * 45, "spin 5 + sleep 40: a 45 µs spin would have caught it");
        s.caught();
        assert_eq!(s.budget(), US * 45, "a spin that catches its work keeps the budget");
    }

    #[test]
    fn a_wait_beyond_the_ceiling_halves_the_budget_down_to_the_floor() {
        let s = LearnedSpin::new(SpinKind::Busy, US * 5);
        s.slept(US * 75);
        assert_eq!(s.budget(), US * 80);
        s.slept(Duration::from_millis(3));
        assert_eq!(s.budget(), US * 40);
        s.slept(Duration::from_millis(3));
        s.slept(Duration::from_millis(3));
        s.slept(Duration::from_millis(3));
        assert_eq!(s.budget(), US * 5, "never below the floor");
    }

    #[test]
    fn raises_that_keep_running_out_fall_back_to_the_floor_and_hold() {
        // The peer shares the CPU: every spin runs out, the work comes a few µs into the sleep.
        let s = LearnedSpin::new(SpinKind::Busy, US * 5);
        s.slept(US * 4); // floor spin: raise to 9
        assert_eq!(s.budget(), US * 9);
        s.slept(US * 4); // raised, ran out: 1st fruitless, 13
        s.slept(US * 4); // 2nd, 17
        assert_eq!(s.budget(), US * 17);
        s.slept(US * 4); // 3rd: back to the floor
        assert_eq!(s.budget(), US * 5);
        for _ in 0..HOLD_SLEEPS {
            s.slept(US * 4);
            assert_eq!(s.budget(), US * 5, "no raise while held");
        }
        s.slept(US * 4);
        assert_eq!(s.budget(), US * 9, "the hold is over: one probe again");
    }

    #[test]
    fn a_yielding_spin_keeps_raising_to_the_waits_it_sees() {
        // The answer comes a few µs after each spin ran out: a yielding spin delays no peer,
        // so the budget keeps following the waits instead of falling back to the floor.
        let s = LearnedSpin::new(SpinKind::Yielding, US * 5);
        for i in 1..=FRUITLESS_LIMIT as u32 + 2 {
            s.slept(US * 2);
            assert_eq!(s.budget(), US * (5 + 2 * i));
        }
    }

    #[test]
    fn a_caught_wait_resets_the_count_of_fruitless_raises() {
        let s = LearnedSpin::new(SpinKind::Busy, US * 5);
        s.slept(US * 30);
        s.slept(US * 1); // raised, ran out once
        s.caught();
        s.slept(US * 1);
        s.slept(US * 1);
        assert!(s.budget() > US * 5, "two fruitless raises after a catch are not yet three");
    }

    #[test]
    fn a_sleep_teaches_only_after_a_spin_and_only_when_work_ended_it() {
        let s = LearnedSpin::new(SpinKind::Busy, US * 5);
        s.slept(US * 40);
        assert_eq!(s.budget(), US * 45);
        let nap = || std::thread::sleep(Duration::from_millis(2));
        // No spin before it: nothing learned.
        s.sleeping(false, None);
        nap();
        s.woke();
        assert_eq!(s.budget(), US * 45);
        // Its timer's deadline ended it: nothing learned.
        s.sleeping(true, Some(Instant::now()));
        nap();
        s.woke();
        assert_eq!(s.budget(), US * 45);
        // Work ended it, 2 ms after a spin: a long wait, the budget halves.
        s.sleeping(true, None);
        nap();
        s.woke();
        assert_eq!(s.budget(), US * 45 / 2);
        // A wake-up without a recorded sleep changes nothing.
        s.woke();
        assert_eq!(s.budget(), US * 45 / 2);
    }

    #[test]
    fn a_zero_floor_never_rises() {
        let s = LearnedSpin::new(SpinKind::Busy, Duration::ZERO);
        s.slept(US * 3);
        assert_eq!(s.budget(), Duration::ZERO);
    }
}
