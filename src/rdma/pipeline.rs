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
        let i = (self.head + self.len) % self.lanes.len();
        let lane: *mut Lane<F> = &mut self.lanes[i];
        debug_assert!(matches!(self.lanes[i], Lane::Empty), "the lane after the last one is free");
        // SAFETY: the lane is `Empty` (the pipeline is not full and lanes past the last
        // operation are emptied by `poll_next`), so overwriting it drops nothing. A plain write
        // rather than `Pin::set`, which assigns (drop the old value, then move the new one in)
        // and so first builds the lane in a temporary: the future would be copied twice.
        unsafe { lane.write(Lane::Running(op)) };
        self.len += 1;
        // The first poll submits the operation. With a no-op waker: only the oldest
        // operation's completion needs to wake the task (see the module documentation).
        self.poll_lane(i, &mut Context::from_waker(Waker::noop()));
        Ok(())
    }

    /// Adds `op` (submitting it at once, as [`try_push`](Pipeline::try_push)); when the
    /// pipeline is full it first waits for the oldest operation and returns its output.
    pub async fn push(&mut self, op: F) -> Option<F::Output> {
        let oldest = if self.is_full() { self.next().await } else { None };
        if self.try_push(op).is_err() {
            unreachable!("a lane was freed just above");
        }
        oldest
    }

    /// Polls for the oldest operation's output: `Ready(None)` when the pipeline is empty.
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
        self.head = (h + 1) % self.lanes.len();
        self.len -= 1;
        Poll::Ready(Some(out))
    }

    /// Waits for the oldest operation and returns its output; `None` when the pipeline is
    /// empty.
    pub async fn next(&mut self) -> Option<F::Output> {
        poll_fn(|cx| self.poll_next(cx)).await
    }
}

impl<F: Future> fmt::Debug for Pipeline<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline").field("depth", &self.lanes.len()).field("len", &self.len).finish()
    }
}
