//! [`WaiterList`]: futures waiting for an event of a context (a task freed, a state change).

use std::cell::{Cell, RefCell};
use std::task::Waker;

/// Keeps `waker` in `cell` for a completion to wake: the waker already there if it wakes the
/// same task (no clone per poll), else a clone. The one home of "the single waiter of a
/// completion slot or of a held group".
#[inline(always)]
pub(crate) fn keep_waker(cell: &Cell<Option<Waker>>, waker: &Waker) {
    let stale = cell.take();
    match stale {
        Some(w) if w.will_wake(waker) => cell.set(Some(w)),
        _ => cell.set(Some(waker.clone())),
    }
}

/// Waiters on a context event (task freed, state changed). Each future keeps a ticket so
/// that re-polling replaces its waker instead of queueing duplicates; every wake-up drains
/// the list and opens a new epoch.
pub(crate) struct WaiterList {
    epoch: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

/// A future's place in a [`WaiterList`].
pub(crate) type Ticket = Option<(u64, usize)>;

impl WaiterList {
    pub(crate) fn new() -> WaiterList {
        WaiterList { epoch: Cell::new(0), wakers: RefCell::new(Vec::new()) }
    }

    pub(crate) fn register(&self, ticket: &mut Ticket, waker: &Waker) {
        let mut wakers = self.wakers.borrow_mut();
        if let Some((epoch, i)) = *ticket {
            if epoch == self.epoch.get() {
                if let Some(w) = wakers.get_mut(i) {
                    if !w.will_wake(waker) {
                        w.clone_from(waker);
                    }
                    return;
                }
            }
        }
        *ticket = Some((self.epoch.get(), wakers.len()));
        wakers.push(waker.clone());
    }

    /// Opens a new epoch and wakes every waiter. Inlined for its common case, called at
    /// every completion: nobody waits, and it costs one epoch store and one length test.
    #[inline]
    pub(crate) fn wake_all(&self) {
        self.new_epoch();
        if self.has_waiters() {
            self.wake_waiting();
        }
    }

    /// The first half of [`wake_all`](WaiterList::wake_all): a new epoch, even when nobody
    /// waits (`TaskFreed` compares epochs to see events).
    #[inline]
    pub(crate) fn new_epoch(&self) {
        self.epoch.set(self.epoch.get().wrapping_add(1));
    }

    /// Whether any future waits.
    #[inline]
    pub(crate) fn has_waiters(&self) -> bool {
        !self.wakers.borrow().is_empty()
    }

    /// The second half of [`wake_all`](WaiterList::wake_all), after
    /// [`new_epoch`](WaiterList::new_epoch): wakes every waiter.
    #[cold]
    pub(crate) fn wake_waiting(&self) {
        // Not borrowed while waking (a waker may register again); the list's allocation
        // is kept, so that a context under back-pressure (a wake-up at every completion,
        // a registration at every retry) does not free and allocate it each time.
        let mut wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for w in wakers.drain(..) {
            w.wake();
        }
        let mut list = self.wakers.borrow_mut();
        if list.is_empty() {
            *list = wakers;
        }
    }

    /// The current epoch (changes at every `wake_all`).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.get()
    }
}
