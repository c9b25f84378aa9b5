//! The executor's local run queue, without a `RefCell`'s borrow count.
//!
//! Every parked operation's task goes through it twice per turn (its completion pushes it,
//! the loop pops it, and pops once more to find the queue empty); a `RefCell`'s check,
//! mark and release around each of those cost ~4 instructions apiece. Here each method
//! does its whole operation on the `VecDeque` and returns: no reference to the deque
//! outlives a call, and nothing inside a call can reach the queue again (below), so no two
//! references to it are ever live together.

use std::cell::UnsafeCell;
use std::collections::VecDeque;

use crate::executor::task::Runnable;

/// A `VecDeque<Runnable>` owned by one executor's `Core`, which never leaves its thread (the
/// `UnsafeCell` makes this type `!Sync`).
pub(super) struct RunQueue {
    q: UnsafeCell<VecDeque<Runnable>>,
}

impl RunQueue {
    pub(super) fn with_capacity(cap: usize) -> RunQueue {
        RunQueue { q: UnsafeCell::new(VecDeque::with_capacity(cap)) }
    }

    /// Runs `f` on the deque. Private, and only given closures that call `VecDeque`'s own
    /// methods, none of which runs code of ours or of a task: no runnable is dropped or run
    /// inside (`pop_*` moves one out, `push_back` moves one in), so no path leads from inside
    /// `f` back to this queue. A growth's allocation is the global allocator's, which does
    /// not schedule tasks.
    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&mut VecDeque<Runnable>) -> R) -> R {
        // SAFETY: the queue is only reached through these methods, on the executor's thread
        // (`UnsafeCell` is `!Sync`); each makes the one reference to the deque for the length
        // of `f`, which cannot re-enter (see above), so the reference is unique while it lives.
        f(unsafe { &mut *self.q.get() })
    }

    #[inline(always)]
    pub(super) fn push_back(&self, r: Runnable) {
        self.with(|q| q.push_back(r));
    }

    #[inline(always)]
    pub(super) fn pop_front(&self) -> Option<Runnable> {
        self.with(VecDeque::pop_front)
    }

    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.with(|q| q.is_empty())
    }

    pub(super) fn len(&self) -> usize {
        self.with(|q| q.len())
    }

    /// Takes the queue's only runnable if its address is `id` (see `Core::run_inline`).
    pub(super) fn take_only(&self, id: usize) -> Option<Runnable> {
        self.with(|q| if q.len() == 1 && q.front().is_some_and(|r| r.addr() == id) { q.pop_front() } else { None })
    }
}
