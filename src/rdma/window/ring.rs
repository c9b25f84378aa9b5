//! [`Ring`]: the lanes of a window and what each holds, from the push that submits an
//! operation to the result taken out of it (or the completion slot that inherits its memory
//! when the window is dropped).

use std::task::{Context, Poll};

use super::push::Waiting;
use crate::error::{Error, Result};
use crate::executor::completion::{SlotRef, Ticket};
use crate::ext::OUT_WORDS;
use crate::lanes::{wrap, Outcome};
use crate::mem::{Buf, RemoteSlice};
use crate::rdma::ops::Kind;
use crate::rdma::RdmaInner;

/// One lane.
pub(super) enum Lane {
    Empty,
    /// Submitted: its slot receives the completion; the lane owns the memory DOCA may touch.
    InFlight {
        slot: SlotRef,
        kind: Kind,
        buf: Buf,
        remote: Option<RemoteSlice>,
    },
    /// Failed before anything was submitted: its result waits for its turn.
    Failed(Error, Buf),
}

/// The lanes of a window on one RDMA context; the operations are `head..head + len`
/// (modulo the depth), oldest first.
pub(super) struct Ring<'a> {
    pub(super) inner: &'a RdmaInner,
    lanes: Box<[Lane]>,
    head: usize,
    len: usize,
    /// The submission of the one push in progress (a push borrows the window) while it
    /// waits for a free task or for room: kept here rather than in the push, so that the
    /// push future stays small (it is moved into the caller's state at every `.await`).
    pub(super) parked: Option<Waiting<'a>>,
    /// That push's place among the context's waiters for a free task.
    pub(super) ticket: Ticket,
}

impl<'a> Ring<'a> {
    /// # Panics
    /// If `depth` is 0.
    pub(super) fn new(inner: &'a RdmaInner, depth: usize) -> Ring<'a> {
        assert!(depth > 0, "a window needs at least one lane");
        Ring { inner, lanes: (0..depth).map(|_| Lane::Empty).collect(), head: 0, len: 0, parked: None, ticket: None }
    }

    pub(super) fn depth(&self) -> usize {
        self.lanes.len()
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_full(&self) -> bool {
        self.len == self.lanes.len()
    }

    /// Ready once the oldest operation's result is there (the ring is not empty). When this
    /// poll may progress the PE, it first collects completions inline.
    #[inline]
    pub(super) fn poll_oldest(&self, cx: &mut Context<'_>) -> Poll<()> {
        let Lane::InFlight { slot, .. } = &self.lanes[self.head] else { return Poll::Ready(()) };
        if slot.is_done() {
            return Poll::Ready(());
        }
        if self.inner.ctx.core().wait_batch_inline(self.len, || slot.is_done()) {
            return Poll::Ready(());
        }
        slot.poll_done(self.inner.ctx.core(), cx)
    }

    /// Polls for the oldest operation's result: `Ready(None)` when the ring is empty.
    pub(super) fn poll_next<T: Outcome>(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Result<T>, Buf)>> {
        if self.len == 0 {
            return Poll::Ready(None);
        }
        if self.poll_oldest(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Some(self.pop()))
    }

    /// Takes the oldest operation's result out (it is there: `poll_oldest` said so).
    pub(super) fn pop<T: Outcome>(&mut self) -> (Result<T>, Buf) {
        let lane = std::mem::replace(&mut self.lanes[self.head], Lane::Empty);
        self.head = self.wrap(self.head + 1);
        self.len -= 1;
        match lane {
            Lane::InFlight { slot, kind, buf, remote } => {
                let core = self.inner.ctx.core();
                let r = if T::READS_OUTPUT {
                    slot.take_output(core, kind.name()).map(T::from_output)
                } else {
                    slot.take_status(core, kind.name()).map(|()| T::from_output([0; OUT_WORDS]))
                };
                // Only now: the slot gave the descriptors over this memory back.
                drop(remote);
                (r, buf)
            }
            Lane::Failed(e, buf) => (Err(e), buf),
            Lane::Empty => unreachable!("the lanes head..head + len hold operations"),
        }
    }

    #[inline(always)]
    fn wrap(&self, i: usize) -> usize {
        wrap(i, self.lanes.len())
    }

    /// Puts `lane` after the newest operation (there is room).
    #[inline(always)]
    pub(super) fn place(&mut self, lane: Lane) {
        debug_assert!(!self.is_full());
        let i = self.wrap(self.head + self.len);
        let free = &mut self.lanes[i];
        debug_assert!(matches!(free, Lane::Empty), "the lane after the newest operation is free");
        // Overwritten without dropping: an `Empty` lane owns nothing (a plain assignment
        // would call the lane's drop glue per operation).
        std::mem::forget(std::mem::replace(free, lane));
        self.len += 1;
    }
}

impl Drop for Ring<'_> {
    fn drop(&mut self) {
        let core = self.inner.ctx.core();
        // A push that was forgotten (`mem::forget`) instead of dropped left its submission.
        if let Some(w) = self.parked.take() {
            w.release(self.inner);
        }
        for lane in std::mem::take(&mut self.lanes).into_vec() {
            match lane {
                Lane::InFlight { slot, buf, remote, .. } if slot.in_flight() => {
                    // DOCA may still touch the memory (and the context inventory's
                    // descriptors): the slot keeps them until the completion.
                    slot.abandon(core, Some(Box::new((self.inner.inv.clone(), buf, remote))));
                }
                Lane::InFlight { slot, buf, remote, .. } => {
                    slot.release(core);
                    drop((buf, remote));
                }
                Lane::Failed(..) | Lane::Empty => {}
            }
        }
    }
}
