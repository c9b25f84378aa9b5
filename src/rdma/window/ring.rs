//! [`Ring`]: the lanes of a window and what each holds, from the push that submits an
//! operation to the result taken out of it (or the held group that inherits its memory when
//! the window is dropped).
//!
//! Lane `i`'s operation runs on record `i` of the held group of its kind (`completion::held`:
//! one group per kind the window used, made at its first push, a record per lane). A record
//! keeps its task between operations and, for the same bytes, its descriptors
//! (`mem::descriptors`, parked loans): a window cycling over the same buffers (lane `k` on
//! slice `k`) points no task anew. No completion slot, no task allocated per operation.

use std::rc::Rc;
use std::task::{Context, Poll};

use crate::error::{Error, Result};
use crate::executor::completion::{HeldGroup, HeldState, Ticket};
use crate::ext::{DocaTask, TaskOutput};
use crate::lanes::{wrap, Outcome};
use crate::mem::{Buf, RemoteSlice};
use crate::rdma::ops::Kind;
use crate::rdma::RdmaInner;

/// How many operation kinds a window may hold (`Kind as usize` indexes them).
const KINDS: usize = 8;

/// One lane.
pub(super) enum Lane {
    Empty,
    /// Submitted: the lane's record in its kind's group receives the completion; the lane
    /// owns the memory DOCA may touch.
    InFlight {
        kind: Kind,
        buf: Buf,
        remote: Option<RemoteSlice>,
    },
    /// Failed before anything was submitted: its result waits for its turn.
    Failed(Error, Buf),
}

/// The lanes of a window on one RDMA context; the operations are `head..head + len`
/// (modulo the depth), oldest first, after the stashed one if any. `T` is what an operation
/// yields besides its buffer.
pub(super) struct Ring<'a, T> {
    pub(super) inner: &'a RdmaInner,
    lanes: Box<[Lane]>,
    /// Per kind, the held records of the lanes.
    groups: [Option<Rc<HeldGroup>>; KINDS],
    head: usize,
    len: usize,
    /// The oldest operation's result, taken out of its lane to free it for a push into a
    /// full window that then had to wait: still the window's oldest result, returned first
    /// (by that push, the next one, or `poll_next`).
    stash: Option<(Result<T>, Buf)>,
    /// The kind of the waiting push (a push borrows the window, so there is one at most)
    /// whose record, at the lane after the newest, it prepared: the record holds the
    /// descriptors of its buffers until it is submitted, or the push is dropped.
    pub(super) prepared: Option<Kind>,
    /// That push's place among the context's waiters for a free task or for room.
    pub(super) ticket: Ticket,
}

impl<'a, T> Ring<'a, T> {
    /// # Panics
    /// If `depth` is 0.
    pub(super) fn new(inner: &'a RdmaInner, depth: usize) -> Ring<'a, T> {
        assert!(depth > 0, "a window needs at least one lane");
        Ring {
            inner,
            lanes: (0..depth).map(|_| Lane::Empty).collect(),
            groups: Default::default(),
            head: 0,
            len: 0,
            stash: None,
            prepared: None,
            ticket: None,
        }
    }

    pub(super) fn depth(&self) -> usize {
        self.lanes.len()
    }

    /// Operations in the window, the stashed one included.
    pub(super) fn len(&self) -> usize {
        self.len + usize::from(self.stash.is_some())
    }

    pub(super) fn is_full(&self) -> bool {
        self.len() == self.lanes.len()
    }

    /// Whether every lane holds an operation (then none is stashed).
    #[inline(always)]
    pub(super) fn lanes_full(&self) -> bool {
        self.len == self.lanes.len()
    }

    /// The lane the next operation goes into (there is room in the lanes).
    #[inline(always)]
    pub(super) fn free_lane(&self) -> usize {
        debug_assert!(self.len < self.lanes.len());
        self.wrap(self.head + self.len)
    }

    /// The group of kind `K` (`kind`), made with a record per lane at its first use, and the
    /// waiting push's place among the context's waiters (borrowed together: a push submits on
    /// the one and waits with the other).
    #[inline(always)]
    pub(super) fn group<K: DocaTask>(&mut self, kind: Kind) -> (&HeldGroup, &mut Ticket) {
        let depth = self.lanes.len();
        let ctx = self.inner.ctx.record();
        let group = self.groups[kind as usize].get_or_insert_with(|| HeldGroup::for_ops::<K>(ctx, depth));
        (group, &mut self.ticket)
    }

    /// The group of a kind the window used.
    #[inline(always)]
    fn used(&self, kind: Kind) -> &HeldGroup {
        self.groups[kind as usize].as_deref().expect("a lane's kind has its group")
    }

    #[inline(always)]
    fn wrap(&self, i: usize) -> usize {
        wrap(i, self.lanes.len())
    }

    /// Puts `lane` in the free lane after the newest operation.
    #[inline(always)]
    pub(super) fn place(&mut self, lane: Lane) {
        let i = self.free_lane();
        let free = &mut self.lanes[i];
        debug_assert!(matches!(free, Lane::Empty), "the lane after the newest operation is free");
        // Overwritten without dropping: an `Empty` lane owns nothing (a plain assignment
        // would call the lane's drop glue per operation).
        std::mem::forget(std::mem::replace(free, lane));
        self.len += 1;
    }

    /// The waiting push is dropped (or forgotten): its prepared record gives its
    /// descriptors back (its task stays, for the next operation to point anew).
    pub(super) fn unprepare(&mut self) {
        if let Some(kind) = self.prepared.take() {
            let i = self.free_lane();
            self.used(kind).record(i).descs().release();
        }
    }
}

impl<T: Outcome> Ring<'_, T> {
    /// Ready once the oldest operation's result is there (the window is not empty). When
    /// this poll may progress the PE, it first collects completions inline.
    #[inline]
    pub(super) fn poll_oldest(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.stash.is_some() {
            return Poll::Ready(());
        }
        let Lane::InFlight { kind, .. } = &self.lanes[self.head] else { return Poll::Ready(()) };
        let group = self.used(*kind);
        let rec = group.record(self.head);
        let done = || rec.state() == HeldState::Done;
        if done() {
            return Poll::Ready(());
        }
        let core = self.inner.ctx.core();
        if core.wait_batch_inline(self.len, kind.posted_ahead(), done) {
            return Poll::Ready(());
        }
        group.poll_done(core, rec, cx)
    }

    /// Polls for the oldest operation's result: `Ready(None)` when the window is empty.
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Result<T>, Buf)>> {
        if self.len() == 0 {
            return Poll::Ready(None);
        }
        if self.poll_oldest(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Some(self.take_oldest()))
    }

    /// Takes the oldest operation's result out (it is there: `poll_oldest` said so).
    pub(super) fn take_oldest(&mut self) -> (Result<T>, Buf) {
        match self.stash.take() {
            Some(r) => r,
            None => self.pop(),
        }
    }

    /// Moves the oldest operation's result (it is there: `poll_oldest` said so) out of its
    /// lane into the stash, freeing the lane.
    pub(super) fn stash_oldest(&mut self) {
        debug_assert!(self.stash.is_none());
        let oldest = self.pop();
        self.stash = Some(oldest);
    }

    /// The stashed result, if any.
    pub(super) fn take_stash(&mut self) -> Option<(Result<T>, Buf)> {
        self.stash.take()
    }

    /// Takes the result out of the head lane, which is done.
    fn pop(&mut self) -> (Result<T>, Buf) {
        let i = self.head;
        let lane = std::mem::replace(&mut self.lanes[i], Lane::Empty);
        self.head = self.wrap(i + 1);
        self.len -= 1;
        match lane {
            Lane::InFlight { kind, buf, remote } => {
                let rec = self.used(kind).record(i);
                let status = rec.take();
                let r = if status != crate::sys::DOCA_SUCCESS {
                    Err(Error::from_doca(status, kind.name()))
                } else if T::READS_OUTPUT {
                    Ok(T::from_output(rec.output()))
                } else {
                    Ok(T::from_output(TaskOutput::default()))
                };
                // The completion gave back the descriptors it does not park; parked ones are
                // taken back from the record if this memory goes.
                drop(remote);
                (r, buf)
            }
            Lane::Failed(e, buf) => (Err(e), buf),
            Lane::Empty => unreachable!("the lanes head..head + len hold operations"),
        }
    }
}

impl<T> Drop for Ring<'_, T> {
    fn drop(&mut self) {
        // A push that was forgotten (`mem::forget`) instead of dropped left its record
        // prepared.
        self.unprepare();
        // Per group, the memory of its operations still in flight.
        let mut keep: [Vec<(Buf, Option<RemoteSlice>)>; KINDS] = Default::default();
        for (i, lane) in std::mem::take(&mut self.lanes).into_vec().into_iter().enumerate() {
            let Lane::InFlight { kind, buf, remote } = lane else { continue };
            let rec = self.used(kind).record(i);
            match rec.state() {
                HeldState::InFlight => keep[kind as usize].push((buf, remote)),
                HeldState::Done => {
                    // Completed and never taken: its descriptors are back (or parked).
                    let _ = rec.take();
                }
                HeldState::Idle => {}
            }
        }
        for (group, keep) in self.groups.iter_mut().zip(keep) {
            let Some(group) = group.take() else { continue };
            if keep.is_empty() {
                // Nothing in flight: the group's drop frees its tasks and gives its parked
                // descriptors back.
                drop(group);
            } else {
                // DOCA may still touch the memory (and the context inventory's descriptors):
                // the group keeps them, and itself, until its last completion.
                group.abandon(Box::new((self.inner.inv.clone(), keep)));
            }
        }
    }
}
