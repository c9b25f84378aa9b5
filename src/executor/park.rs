//! The sleep/notify handshake between an executor and the threads that send it work.
//!
//! One [`ParkState`] per executor, shared (inside `Shared`) by the executor thread and every
//! thread that pushes to its injection queue or wakes one of its tasks. It decides whether a
//! remote wake must pay for a syscall (`mio::Waker::wake`, an eventfd write): only when the
//! executor has announced that it is going to sleep. While the executor is awake a remote
//! notification costs one atomic read-modify-write, and a push to the injection queue (remote
//! spawns, remote wakes of tasks) a fence and a load.
//!
//! The whole state is one atomic byte, so the "sleeper announces, then re-checks" and the
//! "waker publishes, then checks the sleeper" halves of the classic handshake become two
//! read-modify-writes on the same location, totally ordered:
//!
//! * remote side, after publishing work (pushing to a queue, setting a flag):
//!   `notify()` = `fetch_or(NOTIFIED)`. If the previous value was exactly `SLEEPING`, the
//!   executor is (or is about to be) blocked in `poll` and nobody has woken it yet: the caller
//!   must write the eventfd ([`WakeAction::Wake`]). Otherwise the executor is awake (it will see
//!   `NOTIFIED` before it sleeps) or someone already woke it ([`WakeAction::Skip`]).
//! * executor, about to block: `try_sleep()` = `compare_exchange(RUNNING -> SLEEPING)`. It
//!   fails if `NOTIFIED` is set, i.e. if work was published since the executor last consumed
//!   notifications; this compare is the "re-check the queues after announcing sleep" step.
//! * executor, after `poll` returns or when it consumes notifications: `wake()` clears
//!   `SLEEPING | NOTIFIED`. It synchronizes with every `notify()` before it in the
//!   modification order, so the work they published is visible to the queue drain that
//!   follows.
//! * executor, shutting down: `close()` sets `CLOSED`. A `notify()` that observes `CLOSED`
//!   returns [`WakeAction::Closed`]: the executor may already have drained its queue for the last
//!   time, so the caller must take back what it pushed ([`WakeAction::Closed`] never loses work:
//!   either the executor's final drain, which follows `close()`, sees the push, or the
//!   pusher sees `CLOSED`).
//!
//! * remote side, after pushing to the injection queue: [`notify_queued()`] = a `SeqCst`
//!   fence and a load, and only if that load finds the executor `SLEEPING` or `CLOSED`,
//!   `notify()`. While the executor is awake this writes nothing to the state's cache line,
//!   so the executor's polling loop keeps reading it from its own cache, and neither side
//!   pays a cross-CPU read-modify-write: the executor finds the work by looking at the
//!   queue itself (its tail is written by the push anyway). On the test VM, where moving a
//!   cache line between CPUs costs ~180 ns, this took ~2 such moves out of every remote
//!   wake (`perf --test bridge_lat`).
//! * executor, about to block, for that queue: [`try_sleep_unless()`] = `try_sleep()`, a
//!   `SeqCst` fence, and a look at the queue; work found there undoes the announcement.
//!   The two fences make this the store-buffering handshake: of "push, fence, load the
//!   state" and "announce, fence, look at the queue", at least one side sees the other's
//!   write, so a push is either seen by the executor before it sleeps or seen sleeping by
//!   the pusher, which wakes it.
//!
//! No lost wake-up: if the executor's `try_sleep` precedes a notifier's `fetch_or`, the
//! notifier reads `SLEEPING` and writes the eventfd, which `poll` then reports (the eventfd
//! stays readable until it is consumed, so a write that lands before `poll` starts is not
//! lost). If the `fetch_or` precedes `try_sleep`, the compare fails and the executor does not
//! sleep. The loom model at the bottom checks exactly this, the queue's handshake, and the
//! close race for both kinds of notifier.
//!
//! [`notify_queued()`]: ParkState::notify_queued
//! [`try_sleep_unless()`]: ParkState::try_sleep_unless
//!
//! Under `--cfg loom` the atomics are loom's, so the crate builds for the loom tests
//! (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom`); only the `loom` tests may run
//! in that configuration.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU8, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU8, Ordering};

/// The executor is running (neither bit set).
const RUNNING: u8 = 0;
/// The executor announced that it is going to block in `poll`.
const SLEEPING: u8 = 1;
/// Work was published since the executor last consumed notifications.
const NOTIFIED: u8 = 2;
/// The executor is shutting down; pushes after this may not be drained.
const CLOSED: u8 = 4;

/// What a notifier must do after [`ParkState::notify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WakeAction {
    /// The executor is awake or already woken: nothing to do.
    Skip,
    /// The executor sleeps and nobody woke it: write its eventfd.
    Wake,
    /// The executor is closing: take back the work just published.
    Closed,
}

pub(crate) struct ParkState {
    state: AtomicU8,
}

impl ParkState {
    pub(crate) fn new() -> ParkState {
        ParkState { state: AtomicU8::new(RUNNING) }
    }

    /// Remote side: call after publishing work for the executor.
    #[inline]
    pub(crate) fn notify(&self) -> WakeAction {
        let prev = self.state.fetch_or(NOTIFIED, Ordering::SeqCst);
        if prev & CLOSED != 0 {
            WakeAction::Closed
        } else if prev == SLEEPING {
            WakeAction::Wake
        } else {
            WakeAction::Skip
        }
    }

    /// Remote side, after pushing to a queue that the executor looks at on every turn and in
    /// [`try_sleep_unless`](Self::try_sleep_unless) (the injection queue): wakes the
    /// executor only if it sleeps, and writes nothing while it runs (see the module
    /// documentation).
    #[inline]
    pub(crate) fn notify_queued(&self) -> WakeAction {
        // Orders the push before the load: pairs with the fence in `try_sleep_unless`.
        fence(Ordering::SeqCst);
        if self.state.load(Ordering::Relaxed) & (SLEEPING | CLOSED) == 0 {
            WakeAction::Skip
        } else {
            // Sleeping (wake it, unless another notifier did) or closing (take back).
            self.notify()
        }
    }

    /// Executor: [`try_sleep`](Self::try_sleep), then a look at the queues whose pushers
    /// call [`notify_queued`](Self::notify_queued): `queued()` true undoes the announcement
    /// (the state is running again) and returns false, as a pending notification does.
    #[inline]
    pub(crate) fn try_sleep_unless(&self, queued: impl FnOnce() -> bool) -> bool {
        if !self.try_sleep() {
            return false;
        }
        // Orders the announcement before the look: pairs with the fence in `notify_queued`.
        fence(Ordering::SeqCst);
        if queued() {
            self.wake();
            return false;
        }
        true
    }

    /// Executor: announce that it is about to block. `false` means a notification is
    /// pending: do not block, call [`wake`](Self::wake) and look at the queues again.
    #[inline]
    pub(crate) fn try_sleep(&self) -> bool {
        self.state.compare_exchange(RUNNING, SLEEPING, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Executor: back to running, consuming pending notifications. Returns whether a
    /// notification was pending. Call it after `poll` returns, and before draining the
    /// queues whenever [`is_notified`](Self::is_notified) says so.
    #[inline]
    pub(crate) fn wake(&self) -> bool {
        self.state.fetch_and(CLOSED, Ordering::SeqCst) & NOTIFIED != 0
    }

    /// A cheap hint (no read-modify-write) that work was published. Correctness never
    /// depends on it: [`try_sleep`](Self::try_sleep) is the authoritative check.
    #[inline]
    pub(crate) fn is_notified(&self) -> bool {
        self.state.load(Ordering::Relaxed) & NOTIFIED != 0
    }

    /// Executor: shutting down. Call before the final drain of the injection queue.
    pub(crate) fn close(&self) {
        self.state.fetch_or(CLOSED, Ordering::SeqCst);
        // Orders the close before the final drain's look at the queue: pairs with the
        // fence in `notify_queued`, whose pusher then either sees `CLOSED` or is drained.
        fence(Ordering::SeqCst);
    }
}

impl std::fmt::Debug for ParkState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.load(Ordering::Relaxed);
        f.debug_struct("ParkState")
            .field("sleeping", &(s & SLEEPING != 0))
            .field("notified", &(s & NOTIFIED != 0))
            .field("closed", &(s & CLOSED != 0))
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sequential_protocol() {
        let p = ParkState::new();
        assert_eq!(p.notify(), WakeAction::Skip, "awake executor: no syscall");
        assert!(p.is_notified());
        assert!(!p.try_sleep(), "pending notification blocks sleep");
        assert!(p.wake());
        assert!(p.try_sleep());
        assert_eq!(p.notify(), WakeAction::Wake, "first notifier of a sleeper wakes it");
        assert_eq!(p.notify(), WakeAction::Skip, "second notifier does not");
        assert!(p.wake());
        assert!(!p.wake());
        p.close();
        assert_eq!(p.notify(), WakeAction::Closed);
    }

    #[test]
    fn queued_protocol() {
        let p = ParkState::new();
        assert_eq!(p.notify_queued(), WakeAction::Skip, "awake executor: nothing written");
        assert!(!p.is_notified(), "the executor finds queued work by looking at the queue");
        assert!(!p.try_sleep_unless(|| true), "queued work undoes the announcement");
        assert!(p.try_sleep_unless(|| false), "the announcement was undone: the executor may announce again");
        assert_eq!(p.notify_queued(), WakeAction::Wake, "first notifier of a sleeper wakes it");
        assert_eq!(p.notify_queued(), WakeAction::Skip, "second notifier does not");
        assert!(p.wake());
        p.close();
        assert_eq!(p.notify_queued(), WakeAction::Closed);
    }
}

/// Loom models of the handshake. The eventfd behind `mio::Waker` is modelled by
/// `loom::sync::Notify` (a sticky permit: a notification sent before `wait` is not lost,
/// several collapse into one, as with an eventfd), the injection queue by a counter written
/// with release and drained with acquire (what `SegQueue` guarantees).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering::*};
    use loom::sync::{Arc, Notify as EventFd};
    use loom::thread;

    struct Exec {
        park: ParkState,
        queue: AtomicUsize,
        eventfd: EventFd,
    }

    /// A push followed by a notification (`Shared::unpark`).
    fn push(e: &Exec) {
        e.queue.fetch_add(1, Release);
        act(e, e.park.notify());
    }

    /// A push to the injection queue (`Shared::schedule_remote`): no write to the state
    /// unless the executor sleeps or closes.
    fn push_queued(e: &Exec) {
        e.queue.fetch_add(1, Release);
        act(e, e.park.notify_queued());
    }

    /// What a notifier does after notifying (`Shared::act`).
    fn act(e: &Exec, action: WakeAction) {
        match action {
            WakeAction::Wake => e.eventfd.notify(),
            WakeAction::Skip => {}
            // Take back what we pushed: the executor will not drain again.
            WakeAction::Closed => {
                e.queue.swap(0, Acquire);
            }
        }
    }

    /// The executor loop: drain, then sleep only if the handshake allows (the queue is
    /// looked at after the announcement, for `push_queued`). If a wake-up were lost, `wait`
    /// would block forever and loom would report a deadlock.
    fn run_until(e: &Exec, expected: usize) {
        let mut got = 0;
        loop {
            if e.park.is_notified() {
                e.park.wake();
            }
            got += e.queue.swap(0, Acquire);
            if got == expected {
                return;
            }
            if e.park.try_sleep_unless(|| e.queue.load(Relaxed) != 0) {
                e.eventfd.wait();
            }
            e.park.wake();
        }
    }

    /// Models with two or more notifiers. Since the executor also looks at its queue after
    /// announcing sleep (`try_sleep_unless`), exploring them exhaustively takes over five
    /// minutes each; they are explored up to 4 preemptions (~20 s each here; a bound of 5
    /// also passes, in ~4.5 minutes). Models with one notifier stay exhaustive.
    fn model_bounded(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(4);
        b.check(f);
    }

    fn exec() -> Arc<Exec> {
        Arc::new(Exec { park: ParkState::new(), queue: AtomicUsize::new(0), eventfd: EventFd::new() })
    }

    /// One push, by `push`, while the executor runs until it has it.
    fn one_push(push: fn(&Exec)) {
        loom::model(move || {
            let e = exec();
            let e2 = e.clone();
            let t = thread::spawn(move || push(&e2));
            run_until(&e, 1);
            t.join().unwrap();
        });
    }

    /// One push, by `push`, while the executor closes and drains once: the push is either
    /// drained by the executor or taken back by the pusher. Nothing stays in the queue.
    fn push_during_close(push: fn(&Exec)) {
        loom::model(move || {
            let e = exec();
            let e2 = e.clone();
            let t = thread::spawn(move || push(&e2));
            e.park.close();
            e.queue.swap(0, Acquire);
            t.join().unwrap();
            assert_eq!(e.queue.load(Acquire), 0, "work stranded after close");
        });
    }

    #[test]
    fn loom_no_lost_wakeup_one_notifier() {
        one_push(push);
    }

    #[test]
    fn loom_no_lost_wakeup_two_notifiers() {
        model_bounded(|| {
            let e = exec();
            let ts: Vec<_> = (0..2)
                .map(|_| {
                    let e2 = e.clone();
                    thread::spawn(move || push(&e2))
                })
                .collect();
            run_until(&e, 2);
            for t in ts {
                t.join().unwrap();
            }
        });
    }

    #[test]
    fn loom_no_lost_wakeup_repeated() {
        // Two pushes by one notifier: the executor sleeps between them, exercising the
        // re-arm path (wake() then try_sleep() again) and a stale eventfd permit.
        loom::model(|| {
            let e = exec();
            let e2 = e.clone();
            let t = thread::spawn(move || {
                push(&e2);
                push(&e2);
            });
            run_until(&e, 2);
            t.join().unwrap();
        });
    }

    #[test]
    fn loom_no_lost_wakeup_queued_notifiers() {
        // A pusher that writes nothing to the state while the executor runs, pushing twice
        // (the executor may sleep between its pushes), beside a notifier of the other kind.
        model_bounded(|| {
            let e = exec();
            let e2 = e.clone();
            let e3 = e.clone();
            let t = thread::spawn(move || {
                push_queued(&e2);
                push_queued(&e2);
            });
            let u = thread::spawn(move || push(&e3));
            run_until(&e, 3);
            t.join().unwrap();
            u.join().unwrap();
        });
    }

    #[test]
    fn loom_no_lost_wakeup_one_queued_notifier() {
        one_push(push_queued);
    }

    #[test]
    fn loom_close_never_strands_queued_work() {
        push_during_close(push_queued);
    }

    #[test]
    fn loom_close_never_strands_work() {
        push_during_close(push);
    }
}
