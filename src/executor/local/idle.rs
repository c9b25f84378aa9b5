//! The idle protocol, written once for both drivers of a core.
//!
//! When a turn found nothing to do, the core goes idle in three steps:
//! 1. **Prepare** ([`Core::prepare_sleep`]): arm the PE's notification, drain the PE once
//!    more (work that arrived before the arm produced no notification, so it must be
//!    collected now or never wake us), and announce sleep to other threads, then look at
//!    the injection queue once more, whose pushers notify only a sleeper
//!    ([`ParkState::try_sleep_unless`](crate::executor::park::ParkState::try_sleep_unless)). If anything
//!    showed up meanwhile the answer is [`Idle::Busy`]: the notification is cleared again and
//!    the next turn runs.
//! 2. **Wait** for the PE fd, the cross-thread waker or the next timer deadline. This is the
//!    only step the drivers do differently: the executor's own loop blocks in its
//!    `mio::Poll` ([`Core::park`]); a foreign reactor (the tokio driver, see `foreign`) gets
//!    the deadline and waits in its own reactor.
//! 3. **Wake** ([`Core::woke`]): note that a timer may be due, consume remote notifications
//!    and clear the PE notification (DOCA's arm → wait → clear protocol).
//!
//! There is no fixed sleep anywhere; a spurious wake-up costs one empty turn.

use std::time::{Duration, Instant};

use super::{report, Core, MainWaker};
use crate::executor::learned_spin::SpinKind;

/// The answer of [`Core::prepare_sleep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idle {
    /// Work showed up while preparing (the PE notification is cleared again): run a turn.
    Busy,
    /// The PE notification cannot be armed: sleeping could miss completions, so the caller
    /// polls instead (said once on stderr).
    CannotArm,
    /// Armed and announced: wait for the PE fd, the cross-thread waker or the deadline,
    /// then call [`Core::woke`].
    Sleep(Option<Instant>),
}

impl Core {
    /// Step 1 of the idle protocol (see the module documentation). `main` is the waker of
    /// the `block_on` future the own loop drives (a foreign driver has none): its wake-up
    /// is work like a queued task. `after_spin`: the adaptive spin that ran out just before,
    /// if one did; the sleep's length then teaches that spin's learned budget how long the
    /// wait was (`learned_spin`, measured from here to [`Core::woke`]).
    pub(super) fn prepare_sleep(&self, main: Option<&MainWaker>, after_spin: Option<SpinKind>) -> Idle {
        let ready = || !self.queue.is_empty() || main.is_some_and(|m| self.main_woken(m));
        let pe_active = self.pe_active();
        if pe_active {
            if let Err(e) = self.pe.arm() {
                if !self.arm_error_reported.replace(true) {
                    report(&format!("cannot arm the PE notification, polling instead: {e}"));
                }
                return Idle::CannotArm;
            }
            // Work that arrived before the arm produced no new notification: drain it now.
            if self.drain_pe() > 0 || ready() {
                self.clear_pe();
                return Idle::Busy;
            }
        }
        if ready() || !self.shared.park.try_sleep_unless(|| self.shared.has_injected()) {
            if pe_active {
                self.clear_pe();
            }
            self.take_notifications();
            return Idle::Busy;
        }
        let deadline = self.timers.next_deadline();
        self.learned_spin.sleeping(after_spin == Some(SpinKind::Busy), deadline);
        self.learned_yield.sleeping(after_spin == Some(SpinKind::Yielding), deadline);
        Idle::Sleep(deadline)
    }

    /// Step 3 of the idle protocol, after the wait: `timed` says whether the wait had a
    /// deadline (a timer may be due now).
    pub(super) fn woke(&self, timed: bool) {
        self.learned_spin.woke();
        self.learned_yield.woke();
        if timed {
            self.timers_need_check();
        }
        self.take_notifications();
        if self.pe_active() {
            self.clear_pe();
        }
    }

    /// The executor's own idle: the protocol with step 2 as a blocking `mio::Poll::poll`
    /// until the PE, a remote notification or the next timer wakes us.
    /// `after_spin`: see [`Core::prepare_sleep`].
    pub(super) fn park(&self, main: &MainWaker, after_spin: Option<SpinKind>) {
        match self.prepare_sleep(Some(main), after_spin) {
            Idle::Busy => {}
            // Degrade to polling: yield, never a fixed sleep.
            Idle::CannotArm => std::thread::yield_now(),
            Idle::Sleep(deadline) => {
                if let Some(rt) = &self.runtime {
                    rt.park_check();
                }
                let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                self.poll(timeout);
                self.woke(timeout.is_some());
            }
        }
    }

    /// Waits in the core's own poll (the PE fd and the cross-thread waker are registered
    /// there) for at most `timeout`.
    pub(super) fn poll(&self, timeout: Option<Duration>) {
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

    pub(super) fn clear_pe(&self) {
        if let Err(e) = self.pe.clear() {
            report(&format!("doca_pe_clear_notification failed: {e}"));
        }
    }
}
