//! Single-thread synchronisation between the tasks of one executor: a wake-up flag and a
//! result slot (no OS signals involved; the file was `signal.rs` before).
//!
//! Layers that run a driver task beside the futures they hand out (the collectives) need two
//! small things: a way for event sources to tell the driver that something changed, and a
//! place where the driver leaves one operation's result for the future that awaits it. Both
//! live on one executor thread (`Rc`, `Cell`), so neither needs atomics.

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// A flag with one waiter: [`notify`](WakeFlag::notify) sets it and wakes the waiter;
/// [`wait`](WakeFlag::wait) resolves once it is set and clears it. Notifications that arrive
/// while nobody waits are not lost, and several of them fold into one.
#[derive(Default)]
pub(crate) struct WakeFlag {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl WakeFlag {
    pub(crate) fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    pub(crate) fn wait(&self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| self.poll_wait(cx))
    }

    /// Ready (and cleared) if set; otherwise registers `cx`'s waker for the next notification.
    pub(crate) fn poll_wait(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.set.replace(false) {
            Poll::Ready(())
        } else {
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// Forgets a pending notification (for a waiter about to look at everything anyway).
    pub(crate) fn clear(&self) {
        self.set.set(false);
    }
}

/// Where one operation's result lands; the operation's future takes it.
pub(crate) struct ResultCell<T> {
    result: RefCell<Option<crate::Result<T>>>,
    waker: RefCell<Option<Waker>>,
}

impl<T> Default for ResultCell<T> {
    fn default() -> Self {
        ResultCell { result: RefCell::new(None), waker: RefCell::new(None) }
    }
}

impl<T> ResultCell<T> {
    /// Stores the result and wakes the future waiting for it.
    pub(crate) fn complete(&self, r: crate::Result<T>) {
        *self.result.borrow_mut() = Some(r);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Resolves with the result once it is stored, or with `gone(ctx)` (its refusal,
    /// `CtxRecord::destroyed`) once `ctx` no longer exists. The executor destroys its contexts when it ends, and whatever
    /// would have completed the cell (a driver task of that executor) went with it; nothing
    /// may wake this future for that (the executor that would is the one that ended), so
    /// each poll looks, after the result.
    pub(crate) async fn wait_on(
        self: Rc<Self>,
        ctx: Rc<crate::executor::context::CtxRecord>,
        gone: impl Fn(&crate::executor::context::CtxRecord) -> crate::Error,
    ) -> crate::Result<T> {
        poll_fn(|cx| {
            if let Some(r) = self.result.borrow_mut().take() {
                return Poll::Ready(r);
            }
            if !ctx.is_alive() {
                return Poll::Ready(Err(gone(&ctx)));
            }
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}
