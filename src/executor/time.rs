//! Timers: [`sleep`], [`sleep_until`], [`timeout`], on each executor's own timer queue.
//!
//! Each executor keeps its pending timers on its own thread, in a binary min-heap ordered
//! by (deadline, registration sequence number) whose entries know their position, so that
//! cancelling a timer removes it at once, in O(log n), and nothing is allocated in steady
//! state. A new timer is only staged (appended to a list) until the executor next looks at
//! its timers, and enters the heap then: most timers are cancelled before that (every
//! [`timeout`] whose future finishes first), and those never touch the heap. Timers fire in
//! (deadline, registration) order. The earliest deadline becomes the timeout of the
//! executor's `poll`, so a sleeping executor wakes exactly when its next timer is due
//! (rounded up to the millisecond by `epoll`); there is no timer thread and no periodic tick.
//!
//! A long timer (at least 100 ticks of the kernel's coarse clock: 400 ms with the usual
//! 4 ms tick) takes its start from that clock, `CLOCK_MONOTONIC_COARSE` (~5 ns to read,
//! against ~22 ns for `Instant::now()`): it ends at most two ticks late, never early (see
//! `coarse_clock.rs`). Arming a [`timeout`] of seconds around an operation that is pending
//! costs ~47 ns instead of ~68 (`benches/executor.rs`, `timeout_armed`).
//!
//! [`Sleep`] and [`Timeout`] are `Send` (they hold no executor state, only a key), so they
//! can be used in tasks spawned with [`spawn`](crate::spawn). They must be polled inside an
//! async-doca executor. A `Sleep` registers its deadline with the executor that polls it and
//! removes it when dropped.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;

use super::coarse_clock;
use super::local::with_current;
use super::slab::Slab;
use crate::error::{Error, ErrorKind};

/// The timer queue of one executor (executor-thread only). See the module documentation.
pub(crate) struct Timers {
    inner: RefCell<Queue>,
}

struct Entry {
    waker: Waker,
    deadline: Instant,
    seq: u64,
    /// Where the timer is in `Queue::heap`, or [`STAGED`].
    pos: usize,
}

/// `Entry::pos` of a timer that is in `Queue::staged`, not in the heap yet.
const STAGED: usize = usize::MAX;

#[derive(Clone, Copy)]
struct HeapEntry {
    deadline: Instant,
    seq: u64,
    key: u64,
}

impl HeapEntry {
    fn before(&self, other: &HeapEntry) -> bool {
        (self.deadline, self.seq) < (other.deadline, other.seq)
    }
}

struct Queue {
    /// The live timers, by key.
    entries: Slab<Entry>,
    /// A binary min-heap of the live timers that are not staged; `entries[key].pos` is
    /// each one's index here.
    heap: Vec<HeapEntry>,
    /// Keys of timers registered since the last look at the timers (some may have been
    /// cancelled since: their keys find nothing).
    staged: Vec<u64>,
    seq: u64,
}

impl Queue {
    /// Moves the staged timers into the heap: before anything reads the heap.
    fn flush(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        let staged = std::mem::take(&mut self.staged);
        for &key in &staged {
            let Some(e) = self.entries.get(key) else { continue };
            let (deadline, seq) = (e.deadline, e.seq);
            let pos = self.heap.len();
            self.heap.push(HeapEntry { deadline, seq, key });
            self.sift_up(pos);
        }
        // Keep the list's allocation for the next registrations.
        self.staged = staged;
        self.staged.clear();
    }

    fn set(&mut self, pos: usize, e: HeapEntry) {
        self.heap[pos] = e;
        if let Some(entry) = self.entries.get_mut(e.key) {
            entry.pos = pos;
        }
    }

    fn sift_up(&mut self, mut pos: usize) {
        let e = self.heap[pos];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if !e.before(&self.heap[parent]) {
                break;
            }
            let p = self.heap[parent];
            self.set(pos, p);
            pos = parent;
        }
        self.set(pos, e);
    }

    fn sift_down(&mut self, mut pos: usize) {
        let e = self.heap[pos];
        let len = self.heap.len();
        loop {
            let left = 2 * pos + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].before(&self.heap[left]) { right } else { left };
            if !self.heap[child].before(&e) {
                break;
            }
            let c = self.heap[child];
            self.set(pos, c);
            pos = child;
        }
        self.set(pos, e);
    }

    /// Removes the heap entry at `pos` (its slab entry is the caller's business).
    fn remove_at(&mut self, pos: usize) {
        let last = self.heap.pop().expect("remove_at on an empty timer heap");
        if pos < self.heap.len() {
            self.set(pos, last);
            self.sift_down(pos);
            self.sift_up(pos);
        }
    }
}

impl Timers {
    pub(crate) fn new() -> Timers {
        Timers { inner: RefCell::new(Queue { entries: Slab::new(), heap: Vec::new(), staged: Vec::new(), seq: 0 }) }
    }

    /// Registers a timer (staged; see the module documentation); returns its key.
    fn register(&self, deadline: Instant, waker: Waker) -> u64 {
        let mut q = self.inner.borrow_mut();
        q.seq = q.seq.wrapping_add(1);
        let seq = q.seq;
        let key = q.entries.insert(Entry { waker, deadline, seq, pos: STAGED });
        q.staged.push(key);
        key
    }

    /// Refreshes the waker of a registered timer; `false` if it already fired.
    fn update(&self, key: u64, waker: &Waker) -> bool {
        match self.inner.borrow_mut().entries.get_mut(key) {
            Some(e) => {
                if !e.waker.will_wake(waker) {
                    e.waker.clone_from(waker);
                }
                true
            }
            None => false,
        }
    }

    fn cancel(&self, key: u64) {
        let removed = {
            let mut q = self.inner.borrow_mut();
            let removed = q.entries.remove(key);
            match &removed {
                // Still staged: its key stays in the list and will find nothing; drop it
                // now if it is the last one (the usual case: the newest timer goes first).
                Some(e) if e.pos == STAGED && q.staged.last() == Some(&key) => {
                    q.staged.pop();
                }
                Some(e) if e.pos == STAGED => {}
                Some(e) => q.remove_at(e.pos),
                None => {}
            }
            removed
        };
        // The waker is dropped outside the borrow.
        drop(removed);
    }

    /// Wakes every timer that is due; returns how many.
    pub(crate) fn fire_due(&self) -> usize {
        {
            let mut q = self.inner.borrow_mut();
            if q.entries.is_empty() {
                // Keys of timers cancelled while staged, not in last-in first-out order.
                q.staged.clear();
                return 0;
            }
        }
        let now = Instant::now();
        let mut due = Vec::new();
        {
            let mut q = self.inner.borrow_mut();
            q.flush();
            while let Some(&first) = q.heap.first() {
                if first.deadline > now {
                    break;
                }
                q.remove_at(0);
                if let Some(e) = q.entries.remove(first.key) {
                    due.push(e.waker);
                }
            }
        }
        let n = due.len();
        // Wake outside the borrow: a waker may run code that registers timers.
        for w in due {
            w.wake();
        }
        n
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inner.borrow().entries.is_empty()
    }

    pub(crate) fn is_due(&self, now: Instant) -> bool {
        self.next_deadline().is_some_and(|d| d <= now)
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let mut q = self.inner.borrow_mut();
        q.flush();
        q.heap.first().map(|e| e.deadline)
    }

    pub(crate) fn clear(&self) {
        let entries = {
            let mut q = self.inner.borrow_mut();
            q.heap.clear();
            q.staged.clear();
            std::mem::replace(&mut q.entries, Slab::new())
        };
        drop(entries);
    }
}

/// A deadline far enough away to mean "never" (`Instant + Duration::MAX` overflows).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(60 * 60 * 24 * 365 * 30)
}

fn deadline_after(d: Duration) -> Instant {
    coarse_clock::deadline_after(d).unwrap_or_else(far_future)
}

#[derive(Clone, Copy)]
struct Registration {
    exec: u64,
    deadline: Instant,
    key: u64,
}

/// Waits until `duration` has passed: never less; a `duration` of at least 100 coarse clock
/// ticks (400 ms with a 4 ms tick) may end up to two ticks later (see the module docs).
///
/// ```
/// use std::time::{Duration, Instant};
/// let rt = async_doca::Runtime::new()?;
/// let start = Instant::now();
/// rt.block_on(async_doca::time::sleep(Duration::from_millis(5)));
/// assert!(start.elapsed() >= Duration::from_millis(5));
/// # Ok::<(), async_doca::Error>(())
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    Sleep { deadline: deadline_after(duration), reg: None, fresh: duration >= FRESH_MIN }
}

/// Waits until `deadline`.
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep { deadline, reg: None, fresh: false }
}

/// See `Sleep::fresh`.
const FRESH_MIN: Duration = Duration::from_millis(1);

/// The future of [`sleep`] and [`sleep_until`].
///
/// # Panics
/// When polled outside an async-doca executor.
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Sleep {
    deadline: Instant,
    reg: Option<Registration>,
    /// Made by [`sleep`] with a duration of at least [`FRESH_MIN`] and not polled yet: its
    /// first poll registers it without reading the clock (~25 ns). Its deadline can only
    /// have passed if that poll comes at least `FRESH_MIN` late, and then the timer just
    /// fires at the executor's next look at its timers. Shorter sleeps (zero included) are
    /// checked against the clock first, so they complete on their first poll when due.
    fresh: bool,
}

impl Sleep {
    /// When this sleep ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the deadline has passed.
    pub fn is_elapsed(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Moves the deadline (earlier or later), keeping the future.
    pub fn reset(&mut self, deadline: Instant) {
        self.deregister();
        self.deadline = deadline;
        self.fresh = false;
    }

    fn deregister(&mut self) {
        if let Some(r) = self.reg.take() {
            with_current(|core| {
                if core.shared.id == r.exec {
                    core.timers.cancel(r.key);
                }
            });
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let (deadline, reg, fresh) = (self.deadline, self.reg, std::mem::replace(&mut self.fresh, false));
        let step = with_current(|core| {
            let exec = core.shared.id;
            if let Some(r) = reg {
                if r.exec == exec && r.deadline == deadline {
                    // Registered here: the executor fires it (removes it and wakes us) once
                    // the deadline has passed, so no clock read is needed: still registered
                    // means pending, gone means elapsed.
                    return if core.timers.update(r.key, cx.waker()) { Some(r) } else { None };
                }
                if r.exec == exec {
                    core.timers.cancel(r.key);
                }
            }
            if !fresh && Instant::now() >= deadline {
                return None;
            }
            let key = core.timers.register(deadline, cx.waker().clone());
            // A foreign driver sleeping until a later deadline must look at this one.
            core.wake_foreign();
            Some(Registration { exec, deadline, key })
        });
        match step {
            Some(Some(r)) => {
                self.reg = Some(r);
                Poll::Pending
            }
            Some(None) => {
                self.reg = None;
                Poll::Ready(())
            }
            None => panic!("async_doca::time::Sleep polled outside an async-doca executor"),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.deregister();
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep").field("deadline", &self.deadline).field("registered", &self.reg.is_some()).finish()
    }
}

/// The error of a [`timeout`] whose deadline passed first. Converts into an [`Error`] of
/// kind [`ErrorKind::TimedOut`], so `?` works in functions returning `async_doca::Result`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed(());

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for Error {
    fn from(_: Elapsed) -> Error {
        Error::new(ErrorKind::TimedOut, "timeout: deadline elapsed")
    }
}

/// Runs `fut` with a time limit: `Ok(output)` if it finishes within `duration`, else
/// `Err(Elapsed)` (and `fut` is dropped, which cancels it).
///
/// The limit counts from the first poll that finds `fut` pending, not from this call: a
/// future starts its work at its first poll, and one that is ready then (an operation whose
/// completion the poll's inline progress collected) costs no clock read and no timer. The
/// clock read alone is ~23 ns here, as much as the rest of an operation's wait; tokio's
/// `timeout`, which reads the clock when called, would pay it on every operation.
///
/// ```
/// use std::time::Duration;
/// use async_doca::time::{sleep, timeout};
///
/// let rt = async_doca::Runtime::new()?;
/// rt.block_on(async {
///     assert_eq!(timeout(Duration::from_secs(5), async { 7 }).await, Ok(7));
///     let late = timeout(Duration::from_millis(1), sleep(Duration::from_secs(60))).await;
///     assert!(late.is_err());
///     // Elapsed converts into the crate's error type.
///     let r: async_doca::Result<()> = late.map_err(Into::into);
///     assert_eq!(r.unwrap_err().kind(), async_doca::ErrorKind::TimedOut);
/// });
/// # Ok::<(), async_doca::Error>(())
/// ```
pub fn timeout<F: Future>(duration: Duration, fut: F) -> Timeout<F> {
    Timeout { fut, limit: Limit::After(duration) }
}

/// Like [`timeout`], with an absolute deadline.
pub fn timeout_at<F: Future>(deadline: Instant, fut: F) -> Timeout<F> {
    Timeout { fut, limit: Limit::Armed(sleep_until(deadline)) }
}

pin_project! {
    /// The future of [`timeout`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<F> {
        #[pin]
        fut: F,
        limit: Limit,
    }
}

/// A [`Timeout`]'s limit: a duration until the first pending poll (see [`timeout`]), then
/// the sleep to its deadline.
enum Limit {
    After(Duration),
    Armed(Sleep),
}

impl<F> Timeout<F> {
    /// The deadline: `None` until a poll found the future pending (see [`timeout`]).
    pub fn deadline(&self) -> Option<Instant> {
        match &self.limit {
            Limit::After(_) => None,
            Limit::Armed(sleep) => Some(sleep.deadline()),
        }
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The inner future first: a result that is ready at the deadline still counts.
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        if let Limit::After(duration) = *this.limit {
            *this.limit = Limit::Armed(sleep(duration));
        }
        let Limit::Armed(sleep) = this.limit else { unreachable!("armed just above") };
        match Pin::new(sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout").field("deadline", &self.deadline()).finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::task::Wake;

    use super::*;

    struct Log(Arc<Mutex<Vec<u32>>>, u32);
    impl Wake for Log {
        fn wake(self: Arc<Self>) {
            self.0.lock().unwrap().push(self.1);
        }
    }

    #[test]
    fn timers_fire_in_deadline_then_registration_order_across_cancellations() {
        let timers = Timers::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        // Deadlines in the past (all due), with duplicates, in a scrambled order.
        let base = Instant::now() - Duration::from_secs(3600);
        let mut expected = Vec::new();
        let mut keys = Vec::new();
        let mut x: u32 = 12345;
        for id in 0..500u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let offset = u64::from(x >> 16) % 97;
            let deadline = base + Duration::from_millis(offset);
            let key = timers.register(deadline, Waker::from(Arc::new(Log(log.clone(), id))));
            keys.push((key, id, offset));
            if id == 250 {
                // The first half enters the heap (a look at the timers); the second half
                // stays staged: cancellations below hit both.
                assert!(timers.next_deadline().is_some());
            }
        }
        // Cancel every third timer, and one twice (a no-op the second time).
        for (i, &(key, id, offset)) in keys.iter().enumerate() {
            if i % 3 == 0 {
                timers.cancel(key);
            } else {
                expected.push((offset, id));
            }
        }
        timers.cancel(keys[0].0);
        // A far timer that must not fire.
        let far = timers.register(Instant::now() + Duration::from_secs(3600), Waker::noop().clone());
        expected.sort_unstable();
        assert_eq!(timers.fire_due(), expected.len());
        let fired = log.lock().unwrap().clone();
        assert_eq!(fired, expected.iter().map(|&(_, id)| id).collect::<Vec<_>>());
        assert!(timers.next_deadline().is_some());
        assert!(timers.update(far, Waker::noop()));
        timers.cancel(far);
        assert!(timers.next_deadline().is_none());
        assert_eq!(timers.fire_due(), 0);
    }
}
