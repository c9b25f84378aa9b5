//! Whether an operation posted ahead of what completes it (a receive, a sync-event wait:
//! `DocaTask::POSTED_AHEAD`) may spin in its own poll for its completion: learned from how
//! such spins ended on this executor.
//!
//! # What is at stake
//! A task that awaits its operation at once and that the executor would only spin for waits
//! in its own poll (`Core::spin_inline`): the completion is taken without the wake-up, the
//! run queue and the re-poll. For a receive that is the two-sided round trip's last step, and
//! the spin is worth ~25 ns of it: side by side on the 2-CPU VM, with this rule, `send_lat`
//! async − raw +60/+65 → +28/+35 ns (1 process / 2), `write_imm_lat` +60/+50 → +45/+40,
//! `comch_fast_lat` +60 → +40 (`docs/cost.md`, "Thirty-first session").
//!
//! But a receive is often posted *ahead*: polled once, or among other futures (`join!`,
//! `select!` with a timeout), and then its task sends the request its peer answers. A spin
//! in that first poll holds the send back until the spin gives up, and the peer waits for
//! it: every message then costs a whole spin (a Comch fast-path ping-pong that posts with
//! `poll_once` and then sends measured ~60 µs per message against 5 µs raw). The future
//! cannot tell the two apart: both are a first poll with nothing else in flight.
//!
//! # The rule
//! The spin tells them apart afterwards. A spin *ran out* when its rounds (or the adaptive
//! budget) were used up while nothing else could run: the completion did not come in the
//! time a peer answers, which is what the held-back request looks like. A spin that
//! *caught* its completion was the awaited-at-once case. A spin stopped because other work
//! became ready teaches nothing.
//! * Each run-out doubles the *backoff* (from 1, at most [`MAX_BACKOFF`]) and skips that many
//!   posted-ahead waits: they go `Pending` at once, as every receive did before this rule.
//! * After the skipped waits, the next one spins again. Each [`CATCH_STREAK`] catches in a
//!   row halve the backoff, down to 0 (a run-out then skips one wait).
//!
//! The poll that submits the operation and the later ones learn apart (an executor keeps
//! a rule for each). A task that posts a receive ahead (`poll_once`, then its send) and
//! awaits it afterwards runs out the posting polls' spins, and so stops spinning there, while
//! its await, a later poll once the request is out, still spins and catches the answer: the
//! pattern of a C program that keeps its receives posted. A batch of receives (receive
//! lanes, a `RecvWindow`) waits for its oldest under the later polls' rule: its operations
//! were posted before the wait.
//!
//! The price is bounded. A task that always posts ahead loses one spin (at most
//! [`SPIN_INLINE_ROUNDS`](super::local::SPIN_INLINE_ROUNDS) progress calls) per
//! [`MAX_BACKOFF`] waits, once a dozen run-outs have grown the backoff. A task that mixes
//! the two patterns grows it too: the catches between its run-outs are not a streak. A peer
//! that is merely slow also runs spins out; that costs nothing, since the executor spins in
//! their place anyway (the inline spin is only taken where it would), and once the peer is
//! fast again the spin comes back after at most [`MAX_BACKOFF`] waits.

use std::cell::Cell;

/// The most posted-ahead waits skipped after a run-out.
pub(crate) const MAX_BACKOFF: u32 = 4096;

/// Catches in a row that halve the backoff.
pub(crate) const CATCH_STREAK: u8 = 8;

/// How a task's inline spin ended (`Core::spin_inline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spun {
    /// The operation completed during the spin.
    Caught,
    /// Not spun, or stopped early: another task, the main future, remote work or a shutdown
    /// became ready, or the poll may not progress the PE.
    Stopped,
    /// Its rounds or the adaptive budget were used up while nothing else could run.
    RanOut,
}

/// This executor's rule for posted-ahead waits (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct PostedAheadSpin {
    /// Posted-ahead waits still to go `Pending` without a spin.
    skip: Cell<u32>,
    /// What the next run-out sets `skip` to, halved.
    backoff: Cell<u32>,
    /// Catches since the last run-out or halving.
    streak: Cell<u8>,
}

impl PostedAheadSpin {
    /// Whether this posted-ahead wait may spin; a refusal counts it among the skipped ones.
    #[inline]
    pub(crate) fn admit(&self) -> bool {
        match self.skip.get() {
            0 => true,
            n => {
                self.skip.set(n - 1);
                false
            }
        }
    }

    /// Learns from how an admitted spin ended.
    #[inline]
    pub(crate) fn learn(&self, spun: Spun) {
        match spun {
            Spun::Caught => {
                let streak = self.streak.get() + 1;
                if streak == CATCH_STREAK {
                    self.backoff.set(self.backoff.get() / 2);
                    self.streak.set(0);
                } else {
                    self.streak.set(streak);
                }
            }
            Spun::RanOut => {
                self.streak.set(0);
                let b = (self.backoff.get() * 2).clamp(1, MAX_BACKOFF);
                self.backoff.set(b);
                self.skip.set(b);
            }
            Spun::Stopped => {}
        }
    }

    #[cfg(test)]
    pub(crate) fn backoff(&self) -> u32 {
        self.backoff.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(p: &PostedAheadSpin, waits: u32) -> u32 {
        (0..waits).filter(|_| p.admit()).count() as u32
    }

    #[test]
    fn run_outs_back_off_and_catches_bring_the_spin_back() {
        let p = PostedAheadSpin::default();
        assert!(p.admit() && p.admit(), "a new executor spins for every wait");
        p.learn(Spun::RanOut);
        assert_eq!(admitted(&p, 1), 0, "one wait skipped after the first run-out");
        assert!(p.admit());
        p.learn(Spun::RanOut);
        assert_eq!(admitted(&p, 2), 0);
        assert!(p.admit());
        // Stopped spins teach nothing.
        p.learn(Spun::Stopped);
        assert_eq!(p.backoff(), 2);
        assert!(p.admit());
        // A streak of catches halves it: 2 → 1 → 0; fewer do not.
        for _ in 1..CATCH_STREAK {
            p.learn(Spun::Caught);
        }
        assert_eq!(p.backoff(), 2);
        p.learn(Spun::Caught);
        assert_eq!(p.backoff(), 1);
        for _ in 0..2 * CATCH_STREAK {
            p.learn(Spun::Caught);
        }
        assert_eq!(p.backoff(), 0);
        assert!(p.admit());
        p.learn(Spun::RanOut);
        assert_eq!(p.backoff(), 1);
    }

    #[test]
    fn a_task_that_always_posts_ahead_spins_rarely() {
        let p = PostedAheadSpin::default();
        let mut spins = 0;
        let waits = 100_000;
        for _ in 0..waits {
            if p.admit() {
                spins += 1;
                p.learn(Spun::RanOut);
            }
        }
        // 13 run-outs reach the cap (1, 2, ... 4096), then one per 4 097 waits.
        assert!(spins <= 13 + waits / (MAX_BACKOFF + 1) + 1, "{spins} spins");
        assert_eq!(p.backoff(), MAX_BACKOFF);
    }

    #[test]
    fn alternating_patterns_keep_the_backoff_up() {
        // Every other wait would run out (posted ahead), the others catch (awaited at once):
        // the backoff grows as for a task that always posts ahead.
        let p = PostedAheadSpin::default();
        let (mut spins, mut run_outs) = (0u32, 0u32);
        for i in 0..100_000u32 {
            if p.admit() {
                spins += 1;
                let spun = if i % 2 == 0 { Spun::RanOut } else { Spun::Caught };
                run_outs += u32::from(spun == Spun::RanOut);
                p.learn(spun);
            }
        }
        assert!(run_outs <= 13 + 100_000 / MAX_BACKOFF + 1, "{run_outs} run-outs in {spins} spins");
        assert_eq!(p.backoff(), MAX_BACKOFF);
    }

    #[test]
    fn a_fast_peer_again_brings_the_spin_back_within_a_bounded_number_of_waits() {
        let p = PostedAheadSpin::default();
        while p.backoff() < MAX_BACKOFF {
            p.learn(Spun::RanOut);
        }
        let mut waits = 0;
        while p.backoff() > 0 {
            waits += 1;
            if p.admit() {
                p.learn(Spun::Caught);
            }
        }
        // The skipped waits, then a streak per halving.
        let most = MAX_BACKOFF + 13 * u32::from(CATCH_STREAK);
        assert!(waits <= most, "{waits} waits to spin again");
    }
}
