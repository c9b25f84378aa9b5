//! [`Pipeline`]: many operations in flight from one task, without a task per operation.
//!
//! Message rate comes from keeping many operations in flight. Spawning a task per
//! operation costs a task allocation, a run-queue hop and a join per operation; a
//! `Pipeline` instead keeps up to `depth` operation futures in fixed lanes inside the
//! caller's task:
//!
//! * [`try_push`](Pipeline::try_push) (or [`push`](Pipeline::push), which first waits for
//!   room) polls the new operation **once, at once**: operation futures are lazy, and this
//!   first poll is what submits the task to DOCA (and may even complete it, if the provider
//!   completes it inline). So the operation is on the wire when `push` returns.
//! * [`next`](Pipeline::next) waits for the **oldest** operation and returns its output:
//!   results come back in submission order, the order in which a reliable connection
//!   completes the operations of one queue.
//!
//! Only the oldest operation is polled with the task's waker; the others were polled with
//! a no-op waker at their submission. So a completion wakes the task only when the
//! operation it waits for completes (no waker clone and no wake-up per operation), and an
//! operation that could not be submitted at once (task pool or send queue full: it waits
//! for a completion) is retried at the latest when it becomes the oldest.
//!
//! **Order.** Results come back in push order. Operations are *submitted* in push order as
//! long as none has to wait for room: keep the depth within the context's task pool
//! ([`RdmaBuilder::max_tasks`](super::RdmaBuilder::max_tasks)) and send queue when the order
//! of submission matters (a write, then a send announcing it). Deeper, an operation that
//! waited may be submitted after a later one that found room.
//!
//! Dropping a pipeline drops its operations: those in flight keep their buffers alive in
//! their completion slots until DOCA is done (see the [RDMA module](super)), as any dropped
//! operation future does.
//!
//! For writes, reads and sends on one connection, a [`Window`](super::Window) does the same
//! without a future per operation (each lane keeps only the completion slot and the
//! memory) and with one doorbell per batch: cheaper per operation. A `Pipeline` holds any
//! future: receives, atomics, operations of several connections or contexts.
//!
//! The operations have named types ([`WriteFuture`](super::WriteFuture), ...), so a pipeline
//! can live in a struct: `Pipeline<WriteFuture<'a>>` holds writes on a connection borrowed
//! for `'a` (second example). To mix kinds in one pipeline, wrap them in an enum of your own.
//!
//! ```
//! use async_doca::rdma::{Pipeline, Rdma};
//! use async_doca::{Access, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     let a = Rdma::builder(&dev).build().await?;
//!     let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
//!     let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
//!     let (conn, _peer) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
//!     let target = dev.alloc(64 * 8, Access::RDMA_ALL)?;
//!     let remote = dev.import(&target.export_rdma()?)?;
//!     let src = dev.alloc(64 * 8, Access::LOCAL_READ_WRITE)?;
//!
//!     // 1000 writes, 16 in flight, one task.
//!     let mut pipe = Pipeline::new(16);
//!     for i in 0..1000usize {
//!         let k = i % 64;
//!         let mut buf = src.slice(k * 8..k * 8 + 8);
//!         buf.write(0, &(i as u64).to_le_bytes());
//!         if let Some((res, _buf)) = pipe.push(conn.write(buf, remote.slice(k * 8..k * 8 + 8))).await {
//!             res?;
//!         }
//!     }
//!     while let Some((res, _buf)) = pipe.next().await {
//!         res?;
//!     }
//!     assert_eq!(target.buf().read_u64(999 % 64 * 8), 999);
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```
//!
//! A pipeline in a struct, with the operation type named:
//!
//! ```
//! use async_doca::rdma::{Connection, Pipeline, Rdma, WriteFuture};
//! use async_doca::{Access, Buf, Device, RemoteSlice, Result, Runtime};
//!
//! /// Streams writes to one peer, up to 16 in flight.
//! struct Writer<'a> {
//!     conn: &'a Connection,
//!     pipe: Pipeline<WriteFuture<'a>>,
//! }
//!
//! impl Writer<'_> {
//!     async fn put(&mut self, src: Buf, dst: RemoteSlice) -> Result<()> {
//!         let op = self.conn.write(src, dst);
//!         match self.pipe.push(op).await {
//!             Some((res, _buf)) => res, // the oldest write, completed
//!             None => Ok(()),
//!         }
//!     }
//!
//!     async fn flush(&mut self) -> Result<()> {
//!         while let Some((res, _buf)) = self.pipe.next().await {
//!             res?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     let a = Rdma::builder(&dev).build().await?;
//!     let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
//!     let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
//!     let (conn, _peer) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
//!     let target = dev.alloc(64 * 8, Access::RDMA_ALL)?;
//!     let remote = dev.import(&target.export_rdma()?)?;
//!     let src = dev.alloc(64 * 8, Access::LOCAL_READ_WRITE)?;
//!
//!     let mut w = Writer { conn: &conn, pipe: Pipeline::new(16) };
//!     for k in 0..64usize {
//!         let mut buf = src.slice(k * 8..k * 8 + 8);
//!         buf.write_u64(0, k as u64);
//!         w.put(buf, remote.slice(k * 8..k * 8 + 8)).await?;
//!     }
//!     w.flush().await?;
//!     assert_eq!(target.buf().read_u64(63 * 8), 63);
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// One lane of a [`Pipeline`].
enum Lane<F: Future> {
    Empty,
    /// The operation's future, pinned in its lane until it completes or is dropped.
    Running(F),
    /// Completed before it was the oldest: its output waits for [`Pipeline::next`].
    Done(F::Output),
}

/// Up to `depth` operations in flight in one task, results in push order.
///
/// Each push submits its operation at once; only the oldest is polled with the task's
/// waker; results (and, within the context's task pool, submissions) follow push order.
/// Dropping the pipeline drops its operations, whose in-flight memory stays alive until
/// DOCA is done. Example and details: the [module documentation](self).
pub struct Pipeline<F: Future> {
    /// A ring of lanes, allocated once and never moved or resized: a running future stays
    /// at its address until its lane drops it in place (it is pinned there).
    lanes: Box<[Lane<F>]>,
    /// The oldest operation's lane.
    head: usize,
    /// Operations in the pipeline (running or done, not yet returned by `next`).
    len: usize,
}

impl<F: Future> Pipeline<F> {
    /// A pipeline of `depth` lanes.
    ///
    /// # Panics
    /// If `depth` is 0.
    pub fn new(depth: usize) -> Pipeline<F> {
        assert!(depth > 0, "a pipeline needs at least one lane");
        Pipeline { lanes: (0..depth).map(|_| Lane::Empty).collect(), head: 0, len: 0 }
    }

    /// How many operations it holds at most.
    pub fn depth(&self) -> usize {
        self.lanes.len()
    }

    /// Operations in the pipeline (in flight, or completed and not yet returned).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no operation.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every lane is taken ([`try_push`](Pipeline::try_push) would refuse).
    pub fn is_full(&self) -> bool {
        self.len == self.lanes.len()
    }

    /// `i` (< twice the depth) as a lane index: a compare, not a division (`%` by a depth
    /// known only at run time is a `div`, tens of cycles, twice per operation).
    #[inline(always)]
    fn wrap(&self, i: usize) -> usize {
        if i >= self.lanes.len() {
            i - self.lanes.len()
        } else {
            i
        }
    }

    /// The lane `i`, pinned.
    fn lane(&mut self, i: usize) -> Pin<&mut Lane<F>> {
        // SAFETY: the lanes live in a boxed slice that is never moved, resized or
        // reallocated while the pipeline lives, and a `Running` future leaves its lane only
        // by being dropped in place (`Pin::set`): a pinned future is never moved.
        unsafe { Pin::new_unchecked(&mut self.lanes[i]) }
    }

    /// Polls lane `i` if it is running; a completed future is dropped in place and its
    /// output kept in the lane.
    fn poll_lane(&mut self, i: usize, cx: &mut Context<'_>) {
        let mut lane = self.lane(i);
        // SAFETY: structural pinning of `Running`'s field: the future is never moved out of
        // the lane (it is only dropped in place, by `set` below), see `lane`.
        let polled = unsafe {
            match lane.as_mut().get_unchecked_mut() {
                Lane::Running(f) => Pin::new_unchecked(f).poll(cx),
                _ => return,
            }
        };
        if let Poll::Ready(out) = polled {
            lane.set(Lane::Done(out));
        }
    }

    /// Adds `op` and polls it once at once (which submits it), unless every lane is taken:
    /// then `op` is given back, untouched.
    ///
    /// # Errors
    /// The pipeline is full: `Err(op)`.
    pub fn try_push(&mut self, op: F) -> Result<(), F> {
        if self.is_full() {
            return Err(op);
        }
        let op = std::mem::ManuallyDrop::new(op);
        // SAFETY: not full; `op` is not used (nor dropped: ManuallyDrop) afterwards.
        let i = unsafe { self.place(&*op) };
        self.submit(i);
        Ok(())
    }

    /// Moves the operation at `op` into the next lane, which it returns (to [`submit`]).
    ///
    /// # Safety
    /// The pipeline is not full, `op` points to a live future that the caller treats as
    /// moved out from then on (it neither uses nor drops it).
    ///
    /// [`submit`]: Pipeline::submit
    #[inline(always)]
    unsafe fn place(&mut self, op: *const F) -> usize {
        let i = self.wrap(self.head + self.len);
        let lane: *mut Lane<F> = &mut self.lanes[i];
        debug_assert!(matches!(self.lanes[i], Lane::Empty), "the lane after the last one is free");
        // SAFETY: the lane is `Empty` (the pipeline is not full and lanes past the last
        // operation are emptied by `poll_next`), so overwriting it drops nothing; the future
        // is read from `op`, which the caller gives up (the contract). A plain write rather
        // than `Pin::set`, which assigns (drop the old value, then move the new one in) and so
        // first builds the lane in a temporary: a copy of the future more per operation.
        unsafe { lane.write(Lane::Running(std::ptr::read(op))) };
        self.len += 1;
        i
    }

    /// The first poll of the operation just placed in lane `i`, which submits it. With a
    /// no-op waker: only the oldest operation's completion needs to wake the task (see the
    /// module documentation).
    #[inline(always)]
    fn submit(&mut self, i: usize) {
        self.poll_lane(i, &mut Context::from_waker(Waker::noop()));
    }

    /// Adds `op` (submitting it at once, as [`try_push`](Pipeline::try_push)); when the
    /// pipeline is full it first waits for the oldest operation and returns its output.
    ///
    /// The returned future does nothing until polled (`op` is not submitted before).
    // A named future rather than an `async fn`, whose state would copy `op` once more.
    #[inline]
    pub fn push(&mut self, op: F) -> Push<'_, F> {
        Push { pipe: self, op: Some(op) }
    }

    /// Polls for the oldest operation's output: `Ready(None)` when the pipeline is empty.
    // Inlined for the same reason as `Push::poll`, which calls it.
    #[inline]
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        if self.len == 0 {
            return Poll::Ready(None);
        }
        let h = self.head;
        self.poll_lane(h, cx);
        let lane: *mut Lane<F> = &mut self.lanes[h];
        // SAFETY: `lane` points to a live lane. When it is `Done` it holds no future (nothing
        // pinned is moved): the output is read out and the lane overwritten with `Empty`
        // without dropping it (its only content was the output, now ours). Done by hand
        // because `mem::replace` would copy the whole lane, a future's size, per operation.
        let out = unsafe {
            let Lane::Done(out) = &*lane else { return Poll::Pending };
            let out = std::ptr::read(out);
            lane.write(Lane::Empty);
            out
        };
        self.head = self.wrap(h + 1);
        self.len -= 1;
        Poll::Ready(Some(out))
    }

    /// Waits for the oldest operation and returns its output; `None` when the pipeline is
    /// empty.
    pub async fn next(&mut self) -> Option<F::Output> {
        poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// The future of [`Pipeline::push`]: resolves, once `op` is in the pipeline (submitted), to
/// the oldest operation's output if the pipeline was full, `None` otherwise. Dropping it
/// before it resolves drops `op` unsubmitted.
#[must_use = "the operation is not pushed unless the future is awaited"]
pub struct Push<'a, F: Future> {
    pipe: &'a mut Pipeline<F>,
    /// The operation, until it is moved into its lane.
    op: Option<F>,
}

// `op` is never polled (nor pinned) while it is here: only once it is in its lane.
impl<F: Future> Unpin for Push<'_, F> {}

impl<F: Future> Future for Push<'_, F> {
    type Output = Option<F::Output>;

    // Inlined into the caller's `.await`: out of line, the oldest output (with its buffer)
    // came back through memory, stored and at once loaded back (see `BufTaskFuture`'s poll).
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        let this = self.get_mut();
        assert!(this.op.is_some(), "Pipeline::push polled after completion");
        let oldest = if this.pipe.is_full() {
            match this.pipe.poll_next(cx) {
                Poll::Ready(out) => out,
                Poll::Pending => return Poll::Pending,
            }
        } else {
            None
        };
        let op: *mut Option<F> = &mut this.op;
        assert!(!this.pipe.is_full(), "a lane was free or freed just above");
        // SAFETY: not full (checked); the future is copied straight from `this.op` into its
        // lane, then `this.op` becomes `None` without dropping what was moved out of it.
        // (`Option::take` would copy the future once more, into a temporary.)
        // `None` is written before the first poll, so a panic in it cannot drop the future
        // twice (from the lane and from here).
        let i = unsafe {
            let f: *const F = (*op).as_ref().expect("checked above");
            let i = this.pipe.place(f);
            op.write(None);
            i
        };
        this.pipe.submit(i);
        Poll::Ready(oldest)
    }
}

impl<F: Future> fmt::Debug for Push<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Push").field("pipeline", &self.pipe).field("pushed", &self.op.is_none()).finish()
    }
}

impl<F: Future> fmt::Debug for Pipeline<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline").field("depth", &self.lanes.len()).field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::rc::Rc;

    /// A future that counts its drops, resolves to `value` (or panics when polled if
    /// `value` is `None`).
    struct Counted {
        drops: Rc<Cell<usize>>,
        value: Option<u32>,
    }

    impl Future for Counted {
        type Output = u32;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<u32> {
            Poll::Ready(self.value.expect("a poll that panics"))
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.drops.set(self.drops.get() + 1);
        }
    }

    fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn push_returns_the_oldest_output_when_full_and_drops_every_future_once() {
        let drops = Rc::new(Cell::new(0));
        let op = |v| Counted { drops: drops.clone(), value: Some(v) };
        let mut pipe = Pipeline::new(2);
        assert_eq!(poll(&mut pipe.push(op(1))), Poll::Ready(None));
        assert_eq!(poll(&mut pipe.push(op(2))), Poll::Ready(None));
        // Completed at their first poll: dropped in their lanes, outputs kept.
        assert_eq!(drops.get(), 2);
        assert_eq!(poll(&mut pipe.push(op(3))), Poll::Ready(Some(1)));
        // A push dropped before its first poll drops its future, unsubmitted.
        drop(pipe.push(op(4)));
        assert_eq!((drops.get(), pipe.len()), (4, 2));
        assert_eq!(poll(&mut pipe.push(op(5))), Poll::Ready(Some(2)));
        let mut rest = Vec::new();
        while let Poll::Ready(Some(v)) = pipe.poll_next(&mut Context::from_waker(Waker::noop())) {
            rest.push(v);
        }
        assert_eq!(rest, [3, 5]);
        assert_eq!(drops.get(), 5);
    }

    #[test]
    fn a_first_poll_that_panics_drops_the_future_once() {
        let drops = Rc::new(Cell::new(0));
        let mut pipe = Pipeline::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _ = poll(&mut pipe.push(Counted { drops: drops.clone(), value: None }));
        }));
        assert!(r.is_err());
        assert_eq!(drops.get(), 0, "the future stays in its lane");
        drop(pipe);
        assert_eq!(drops.get(), 1, "dropped once, with the pipeline");
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut pipe = Pipeline::new(1);
            let _ = pipe.try_push(Counted { drops: drops.clone(), value: None });
        }));
        assert!(r.is_err());
        assert_eq!(drops.get(), 2);
    }
}
