//! [`Shared`]: the cross-thread face of an executor, and [`MainWaker`], the waker of a
//! `block_on` future, with the form a completion keeps of it ([`main_kept_waker`]).

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{RawWaker, RawWakerVTable, Wake, Waker};

use crossbeam_queue::SegQueue;

use super::{report, with_current, Core};
use crate::executor::park::{ParkState, WakeAction};
use crate::executor::task::Runnable;

/// The cross-thread face of an executor.
pub(crate) struct Shared {
    /// Unique over the process's life (never reused), so stale registrations never match.
    pub(crate) id: u64,
    /// The CPU a worker is pinned to; `None` for a `block_on` executor.
    pub(crate) cpu: Option<usize>,
    /// The executor thread's kernel thread id (filled in by the thread itself).
    pub(crate) tid: AtomicI32,
    pub(super) inject: SegQueue<Runnable>,
    pub(super) park: ParkState,
    /// Taken (closing its eventfd) at shutdown; only the `WakeAction::Wake` path locks it, and
    /// that path is only taken when the executor sleeps, so the lock is off the hot path.
    pub(super) waker: Mutex<Option<mio::Waker>>,
    pub(super) shutdown: AtomicBool,
    /// Set while DROM took this worker's CPU away: it runs on the process's other CPUs and
    /// must never busy-poll there (see `Builder::drom`).
    pub(crate) displaced: AtomicBool,
}

impl Shared {
    /// Queues a runnable from any thread and makes sure the executor will run it.
    pub(crate) fn schedule_remote(&self, runnable: Runnable) {
        self.inject.push(runnable);
        // The executor looks at this queue itself on every turn and before it sleeps, so
        // the push needs no notification unless it sleeps (see `ParkState::notify_queued`).
        self.act(self.park.notify_queued());
    }

    /// Whether the injection queue holds work (a look at its two ends, no pop).
    pub(super) fn has_injected(&self) -> bool {
        !self.inject.is_empty()
    }

    /// Makes sure the executor looks at its queues and flags again (after publishing work).
    pub(crate) fn unpark(&self) {
        self.act(self.park.notify());
    }

    /// Does what a notification asks of its notifier.
    fn act(&self, action: WakeAction) {
        match action {
            WakeAction::Skip => {}
            WakeAction::Wake => {
                let guard = self.waker.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(w) = guard.as_ref() {
                    if let Err(e) = w.wake() {
                        report(&format!("executor wake-up failed: {e}"));
                    }
                }
            }
            WakeAction::Closed => {
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

    pub(super) fn shutdown_requested(&self) -> bool {
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

/// The waker of a `block_on` future (and of a worker's idle main loop).
pub(crate) struct MainWaker {
    /// Set by wake-ups from other threads (followed by a notification).
    pub(super) woken: AtomicBool,
    pub(super) shared: Arc<Shared>,
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

/// A *kept* waker of the main future, if `waker` is the waker of the main future of the
/// `block_on` running on this thread: the same data pointer, with no reference. A clone of
/// the waker and the wake by value that drops it are two atomic read-modify-writes on the
/// `Arc` per parked operation; the main future needs none, since a kept waker's wake
/// checks that the `block_on` it names still runs here (its waker is still the current
/// main waker, see [`Core::enter_main`]) and does nothing otherwise.
///
/// # Safety
/// The returned waker stays on this thread: it is woken, dropped or cloned only here.
#[inline]
pub(crate) unsafe fn main_kept_waker(waker: &Waker) -> Option<Waker> {
    if !is_current_main(waker) {
        return None;
    }
    // SAFETY: `MAIN_KEPT_VTABLE`'s functions keep the `RawWaker` contract on this thread
    // (the caller's contract): they hold nothing and look the main future up when called.
    Some(unsafe { Waker::from_raw(RawWaker::new(waker.data(), &MAIN_KEPT_VTABLE)) })
}

/// Whether `kept`, a waker made by [`main_kept_waker`], wakes the same main future as
/// `waker`.
#[inline]
pub(crate) fn same_main(kept: &Waker, waker: &Waker) -> bool {
    ptr::eq(kept.vtable(), &MAIN_KEPT_VTABLE) && ptr::eq(kept.data(), waker.data()) && is_current_main(waker)
}

/// Whether `kept` was made by [`main_kept_waker`].
#[inline]
pub(crate) fn is_main_kept(kept: &Waker) -> bool {
    ptr::eq(kept.vtable(), &MAIN_KEPT_VTABLE)
}

/// Whether `waker` is the waker of the main future of the `block_on` running on this thread.
fn is_current_main(waker: &Waker) -> bool {
    let id = (waker.data(), ptr::from_ref(waker.vtable()));
    with_current(|core| core.main_waker.get() == id).unwrap_or(false)
}

static MAIN_KEPT_VTABLE: RawWakerVTable =
    RawWakerVTable::new(clone_main_kept, wake_main_kept, wake_main_kept, drop_main_kept);

unsafe fn clone_main_kept(data: *const ()) -> RawWaker {
    // Holds nothing, so neither does its clone.
    RawWaker::new(data, &MAIN_KEPT_VTABLE)
}

unsafe fn wake_main_kept(data: *const ()) {
    // Its `block_on` still runs here if its waker is still the current main waker. (A later
    // `block_on` whose `MainWaker` took the same address gets a spurious wake-up: harmless.)
    with_current(|core| {
        if core.main_waker.get().0 == data {
            core.main_woken_local.set(true);
        }
    });
}

unsafe fn drop_main_kept(_: *const ()) {}

/// Makes `waker` the current main waker until dropped (see [`Core::enter_main`]).
pub(crate) struct MainGuard<'a>(&'a Core);

impl Drop for MainGuard<'_> {
    fn drop(&mut self) {
        self.0.main_waker.set((ptr::null(), ptr::null()));
    }
}

impl Core {
    /// Takes the flag a wake of the main future on this thread sets.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn take_main_woken_for_test(&self) -> bool {
        self.main_woken_local.replace(false)
    }

    /// Records `waker` as the main future's, so that completions recognise it
    /// ([`main_kept_waker`]), until the guard is dropped (when `block_on` returns or unwinds).
    pub(super) fn enter_main(&self, waker: &Waker) -> MainGuard<'_> {
        self.main_waker.set((waker.data(), ptr::from_ref(waker.vtable())));
        MainGuard(self)
    }
}
