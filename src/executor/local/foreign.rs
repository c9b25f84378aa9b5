//! The seam for a foreign reactor (the tokio driver): the same turn, spin and idle protocol
//! as the executor's own loop, cut at the points where the own loop would block, so that the
//! reactor can wait instead.

use std::task::Waker;
use std::time::{Duration, Instant};

use super::idle::Idle;
use super::Core;
use crate::executor::learned_spin::SpinKind;

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
/// (inside [`Enter`](super::Enter)) whenever these run.
#[cfg(feature = "tokio")]
impl Core {
    /// The PE notification fd, for the foreign reactor to watch.
    pub(crate) fn pe_fd(&self) -> std::os::fd::RawFd {
        self.pe.fd()
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
        let worked = self.work();
        // `drain_pe` drops deferred buffers only when a context is connected.
        self.slots.drop_deferred();
        self.budget.set(self.config.task_batch);
        worked || self.has_local_work()
    }

    /// Sets what the next polls may do inline (see `budget`).
    pub(crate) fn set_budget(&self, n: usize) {
        self.budget.set(n);
    }

    /// One round of an idle spin: one progress call; whether work showed up. A yielding
    /// spin ([`SpinKind::Yielding`]) gives the CPU up after a round that found nothing.
    pub(crate) fn foreign_spin(&self, kind: SpinKind) -> bool {
        if self.has_local_work() || self.progress_once() {
            return true;
        }
        // The clock only when there is a timer to compare it with.
        if !self.timers.is_empty() && self.timers.is_due(Instant::now()) {
            self.timers_need_check();
            return true;
        }
        if kind == SpinKind::Yielding {
            std::thread::yield_now();
        }
        false
    }

    /// Step 1 of the idle protocol (see `idle`): arms the PE, drains once more (closing the
    /// arm race) and announces sleep. `after_spin`: the adaptive spin that ran out just
    /// before, if one did (see `Core::prepare_sleep`).
    pub(crate) fn foreign_idle(&self, after_spin: Option<SpinKind>) -> ForeignIdle {
        match self.prepare_sleep(None, after_spin) {
            // The driver runs another turn (it yields to its reactor between turns).
            Idle::Busy | Idle::CannotArm => ForeignIdle::Busy,
            Idle::Sleep(deadline) => ForeignIdle::Sleep(deadline),
        }
    }

    /// Step 3 of the idle protocol, after the foreign reactor woke the driver (or its
    /// deadline passed): consume the wake-ups and clear the PE notification.
    pub(crate) fn foreign_woke(&self, timed: bool) {
        if let Some(r) = self.reactor.borrow_mut().as_mut() {
            // Only the cross-thread waker is registered: consume its event, never block.
            let _ = r.poll.poll(&mut r.events, Some(Duration::ZERO));
        }
        self.woke(timed);
    }

    pub(super) fn has_local_work(&self) -> bool {
        !self.queue.is_empty()
            || self.shared.park.is_notified()
            || self.shared.has_injected()
            || self.slots.has_deferred()
    }
}
