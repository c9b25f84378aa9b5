//! Timers: [`sleep`], [`sleep_until`], [`timeout`], on each executor's own timer queue.
//!
//! Each executor keeps its pending timers in an ordered map (deadline, sequence number) →
//! waker, on its own thread. The earliest deadline becomes the timeout of the executor's
//! `poll`, so a sleeping executor wakes exactly when its next timer is due (rounded up to the
//! millisecond by `epoll`); there is no timer thread and no periodic tick.
//!
//! [`Sleep`] and [`Timeout`] are `Send` (they hold no executor state, only a key), so they
//! can be used in tasks spawned with [`spawn`](crate::spawn). They must be polled inside an
//! async-doca executor. A `Sleep` registers its deadline with the executor that polls it and
//! removes it when dropped.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskCx, Poll, Waker};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;

use super::local::with_current;
use crate::error::{Error, ErrorKind};

/// The timer queue of one executor (executor-thread only).
pub(crate) struct Timers {
    map: RefCell<BTreeMap<(Instant, u64), Waker>>,
    seq: Cell<u64>,
}

impl Timers {
    pub(crate) fn new() -> Timers {
        Timers { map: RefCell::new(BTreeMap::new()), seq: Cell::new(0) }
    }

    fn register(&self, deadline: Instant, waker: Waker) -> u64 {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        self.map.borrow_mut().insert((deadline, seq), waker);
        seq
    }

    /// Refreshes the waker of a registered timer; `false` if it already fired.
    fn update(&self, deadline: Instant, seq: u64, waker: &Waker) -> bool {
        match self.map.borrow_mut().get_mut(&(deadline, seq)) {
            Some(w) => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
                true
            }
            None => false,
        }
    }

    fn cancel(&self, deadline: Instant, seq: u64) {
        let w = self.map.borrow_mut().remove(&(deadline, seq));
        drop(w);
    }

    /// Wakes every timer that is due; returns how many.
    pub(crate) fn fire_due(&self) -> usize {
        if self.map.borrow().is_empty() {
            return 0;
        }
        let now = Instant::now();
        let mut due = Vec::new();
        {
            let mut map = self.map.borrow_mut();
            while let Some(entry) = map.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
        }
        let n = due.len();
        // Wake outside the borrow: a waker may run code that registers timers.
        for w in due {
            w.wake();
        }
        n
    }

    pub(crate) fn is_due(&self, now: Instant) -> bool {
        self.map.borrow().first_key_value().is_some_and(|((d, _), _)| *d <= now)
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.map.borrow().first_key_value().map(|((d, _), _)| *d)
    }

    pub(crate) fn clear(&self) {
        let map = std::mem::take(&mut *self.map.borrow_mut());
        drop(map);
    }
}

/// A deadline far enough away to mean "never" (`Instant + Duration::MAX` overflows).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(60 * 60 * 24 * 365 * 30)
}

fn deadline_after(d: Duration) -> Instant {
    Instant::now().checked_add(d).unwrap_or_else(far_future)
}

#[derive(Clone, Copy)]
struct Registration {
    exec: u64,
    deadline: Instant,
    seq: u64,
}

/// Waits until `duration` has passed.
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
    Sleep { deadline: deadline_after(duration), reg: None }
}

/// Waits until `deadline`.
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep { deadline, reg: None }
}

/// The future of [`sleep`] and [`sleep_until`].
///
/// # Panics
/// When polled outside an async-doca executor.
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Sleep {
    deadline: Instant,
    reg: Option<Registration>,
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
    }

    fn deregister(&mut self) {
        if let Some(r) = self.reg.take() {
            with_current(|core| {
                if core.shared.id == r.exec {
                    core.timers.cancel(r.deadline, r.seq);
                }
            });
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            self.deregister();
            return Poll::Ready(());
        }
        let deadline = self.deadline;
        let reg = self.reg;
        let new_reg = with_current(|core| {
            let exec = core.shared.id;
            match reg {
                Some(r)
                    if r.exec == exec && r.deadline == deadline && core.timers.update(deadline, r.seq, cx.waker()) =>
                {
                    r
                }
                _ => {
                    if let Some(r) = reg {
                        if r.exec == exec {
                            core.timers.cancel(r.deadline, r.seq);
                        }
                    }
                    Registration { exec, deadline, seq: core.timers.register(deadline, cx.waker().clone()) }
                }
            }
        });
        match new_reg {
            Some(r) => self.reg = Some(r),
            None => panic!("async_doca::time::Sleep polled outside an async-doca executor"),
        }
        Poll::Pending
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
    Timeout { fut, sleep: sleep(duration) }
}

/// Like [`timeout`], with an absolute deadline.
pub fn timeout_at<F: Future>(deadline: Instant, fut: F) -> Timeout<F> {
    Timeout { fut, sleep: sleep_until(deadline) }
}

pin_project! {
    /// The future of [`timeout`].
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<F> {
        #[pin]
        fut: F,
        sleep: Sleep,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The inner future first: a result that is ready at the deadline still counts.
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match Pin::new(this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout").field("deadline", &self.sleep.deadline).finish_non_exhaustive()
    }
}
