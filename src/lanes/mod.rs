//! [`Lanes`]: operations in flight on fixed memory, each lane with its own task, kept and
//! submitted again as it is. The path for message rate when the memory is known up front,
//! as in perftest (`ib_write_bw`) or an `io_uring` with registered buffers: RDMA operations
//! ([`Connection::lanes`](crate::rdma::Connection::lanes),
//! [`Rdma::recv_lanes`](crate::rdma::Rdma::recv_lanes)), DMA copies
//! ([`Dma::lanes`](crate::dma::Dma::lanes)) and the Comch fast path
//! ([`Producer::lanes`](crate::comch::fast::Producer::lanes),
//! [`Consumer::recv_lanes`](crate::comch::fast::Consumer::recv_lanes)).
//!
//! A [`Window`](crate::rdma::Window) or a [`Pipeline`](crate::rdma::Pipeline) takes any
//! buffer (and any remote slice) per operation, so each operation pays for taking a held
//! task and giving it back, for finding its descriptors again (or lending new ones when its
//! memory changed) and for its result's way back through a future or the window. `Lanes` are
//! made over one local buffer (and, for writes, reads and copies, one remote slice) cut into
//! `depth` equal lanes: lane *k* is bytes `k * len .. (k + 1) * len` of both. Each lane
//! allocates its task once, with its descriptors, and then only submits it again (a
//! destination's data length reset, an immediate set): the completion goes straight into
//! the lane's record. An operation costs about what it costs a C program that does the same
//! with DOCA (`docs/cost.md`).
//!
//! | made by | each lane | result |
//! | --- | --- | --- |
//! | [`Connection::lanes`](crate::rdma::Connection::lanes) with [`rdma::LaneOp::Write`](crate::rdma::LaneOp::Write) / [`WriteImm`](crate::rdma::LaneOp::WriteImm) | writes its bytes to its remote slice (with an immediate) | `()` |
//! | [`Connection::lanes`](crate::rdma::Connection::lanes) with [`rdma::LaneOp::Read`](crate::rdma::LaneOp::Read) | reads its remote slice into its bytes | `()` |
//! | [`Connection::lanes`](crate::rdma::Connection::lanes) with [`rdma::LaneOp::Send`](crate::rdma::LaneOp::Send) / [`SendImm`](crate::rdma::LaneOp::SendImm) | sends its bytes (with an immediate) | `()` |
//! | [`Rdma::recv_lanes`](crate::rdma::Rdma::recv_lanes) | receives a message into its bytes | [`Received`](crate::rdma::Received) |
//! | [`Connection::lanes`](crate::rdma::Connection::lanes) with [`rdma::LaneOp::FetchAdd`](crate::rdma::LaneOp::FetchAdd) / [`CompareSwap`](crate::rdma::LaneOp::CompareSwap) | updates the 8-byte target all lanes share; the old value lands in its first 8 bytes | `()` |
//! | [`Dma::lanes`](crate::dma::Dma::lanes) with [`dma::LaneOp::CopyIn`](crate::dma::LaneOp::CopyIn) | copies its slice of the imported memory into its bytes | `()` |
//! | [`Dma::lanes`](crate::dma::Dma::lanes) with [`dma::LaneOp::CopyOut`](crate::dma::LaneOp::CopyOut) | copies its bytes into its slice of the imported memory | `()` |
//! | [`Producer::lanes`](crate::comch::fast::Producer::lanes) | sends its bytes to one consumer (with up to 16 immediate bytes: [`submit_imm_bytes`](LaneMut::submit_imm_bytes)) | `()` |
//! | [`Consumer::recv_lanes`](crate::comch::fast::Consumer::recv_lanes) | is a posted buffer that a producer's send fills | [`comch::fast::Received`](crate::comch::fast::Received) |
//!
//! * **Taking a lane.** [`lane`](Lanes::lane) gives a [`LaneMut`]: an idle lane at once, or,
//!   when every lane has an operation, the oldest one once it completed, with its result.
//!   Fill it ([`write`](LaneMut::write), [`write_u64`](LaneMut::write_u64)), or read what a
//!   read, receive or copy brought ([`buf`](LaneMut::buf)), and
//!   [`submit`](LaneMut::submit) it. [`next`](Lanes::next) waits for the oldest operation
//!   and gives its result and lane: to drain, or to read what arrived and post again.
//!   Dropping a `LaneMut` without submitting leaves the lane idle.
//! * **Batches.** [`batch`](Lanes::batch) waits once for a lane and then hands out, without
//!   waiting, every lane that can be taken ([`Batch::lane`]): the loop for message rate,
//!   which pays the wait and its inline progress once per batch instead of once per lane.
//! * **Results in submission order**, exactly one per submitted operation. An operation
//!   DOCA refused (a context that does not run, a connection closed) takes its place and
//!   yields the refusal in turn. DOCA completes one connection's operations in order (and a
//!   context's receives in posting order); a DMA context completes its copies in order.
//! * **Back-pressure.** A lane that finds the send queue or the task pool full is not
//!   refused: it waits, in order, and the next [`lane`](Lanes::lane) or
//!   [`next`](Lanes::next) submits it once a task of the context completes. Lanes deeper
//!   than the task pool share the tasks they could get: a lane without one takes that of a
//!   lane with no operation in flight. A Comch send that finds no buffer posted (DOCA's
//!   `AGAIN`, which no completion of the producer resolves) waits the same way, in order
//!   with the lanes after it, and is tried again as
//!   [`Producer::send`](crate::comch::fast::Producer::send) is: after a yield to the
//!   executor, and once those are spent every
//!   [`SEND_RETRY`](crate::comch::fast::SEND_RETRY), so that a consumer that posts nothing
//!   for long does not keep the executor busy.
//! * **Doorbells** are deferred: the submissions of a batch are handed to DOCA together when
//!   the executor (or an inline progress of `lane`/`next`) next progresses the PE. An
//!   operation submitted while no other is in the lanes rings its doorbell at once: there is
//!   nothing to batch it with, and its wait usually comes next (one lane used for latency).
//!   A Comch send rings its doorbell at every submit: a deferred one would meet a missing
//!   buffer at the flush, as a failed completion after later sends may have gone out.
//! * **Tasks.** The lanes take up to `depth` tasks of their kind from the context's pool
//!   ([`RdmaBuilder::max_tasks`](crate::rdma::RdmaBuilder::max_tasks),
//!   [`DmaBuilder::max_tasks`](crate::dma::DmaBuilder::max_tasks),
//!   [`ProducerBuilder::tasks`](crate::comch::fast::ProducerBuilder::tasks),
//!   [`ConsumerBuilder::tasks`](crate::comch::fast::ConsumerBuilder::tasks)) for their whole
//!   life, and a descriptor per lane (two where the operation has remote memory: writes, reads,
//!   atomics, copies) from its inventory. When the context leaves RUNNING (a restart, an
//!   error, shutdown), the idle tasks are given back so that it can stop, and lanes allocate
//!   again at their next use.
//! * **Dropping** the `Lanes` with operations in flight discards their results; the memory
//!   and descriptors stay alive until DOCA completes them (or a stop flushes them).
//!
//! **Errors** are those of the matching operation ([`Connection::write`](crate::rdma::Connection::write),
//! [`Dma::memcpy`](crate::dma::Dma::memcpy), [`Producer::send`](crate::comch::fast::Producer::send),
//! [`Consumer::recv`](crate::comch::fast::Consumer::recv), ...). Making lanes fails with
//! [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when `depth` is 0, the
//! buffer is empty or not a multiple of `depth` bytes, or the remote slice is shorter than
//! the buffer (for atomics: a target under 8 bytes, or lanes under 8 bytes); with [`ErrorKind::BadState`](crate::ErrorKind::BadState) on a destroyed
//! context; with DOCA's code when the inventory has no descriptor left. Comch receive lanes
//! over memory other than the consumer's fail with
//! [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) too.
//!
//! **Threads.** `Lanes` borrow their context (the [`Connection`](crate::rdma::Connection),
//! [`Rdma`](crate::rdma::Rdma), [`Dma`](crate::dma::Dma),
//! [`Producer`](crate::comch::fast::Producer) or [`Consumer`](crate::comch::fast::Consumer)):
//! `!Send`, on the executor that owns it.
//!
//! ```
//! use async_doca::rdma::{LaneOp, Rdma};
//! use async_doca::{Access, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     let a = Rdma::builder(&dev).build().await?;
//!     let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
//!     let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
//!     let (conn, _peer) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
//!     let target = dev.alloc(32 * 8, Access::RDMA_ALL)?;
//!     let remote = dev.import(&target.export_rdma()?)?;
//!     let src = dev.alloc(32 * 8, Access::LOCAL_READ_WRITE)?;
//!
//!     // 1000 writes of 8 bytes, 32 lanes: lane k writes to target bytes 8k..8k+8.
//!     let mut lanes = conn.lanes(LaneOp::Write(remote.slice(..)), src.buf(), 32)?;
//!     for i in 0..1000u64 {
//!         let (prev, mut lane) = lanes.lane().await;
//!         if let Some(res) = prev {
//!             res?; // the write this lane carried before
//!         }
//!         lane.write_u64(0, i);
//!         lane.submit();
//!     }
//!     while let Some((res, _lane)) = lanes.next().await {
//!         res?;
//!     }
//!     // Write 999 went out of lane 999 % 32 = 7 (lanes are taken in turn).
//!     assert_eq!(target.buf().read_u64(7 * 8), 999);
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

pub(crate) mod kind;
mod ring;

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use self::kind::{LaneKind, Operands};
pub(crate) use self::ring::wrap;
use self::ring::{LaneHost, LaneRing};
use crate::error::{Error, Result};
use crate::executor::completion::{TaskOutput, OUT_WORDS};
use crate::executor::context::DocaCtx;
use crate::mem::descriptors::Inventory;
use crate::mem::{Buf, RemoteSlice};
use crate::sys;

/// What an operation of a [`Lanes`] (or an RDMA [`Window`](crate::rdma::Window)) yields,
/// made from its task's result area: `()`, or [`Received`](crate::rdma::Received) for
/// RDMA receives ([`comch::fast::Received`](crate::comch::fast::Received) for Comch ones). Implemented by the crate only (sealed: the result area is the crate's).
pub trait Outcome: sealed::Sealed + Sized {
    /// Whether the result area is read (otherwise only the status, without copying it).
    #[doc(hidden)]
    const READS_OUTPUT: bool;
    /// The value, from the result area (all zeros when `READS_OUTPUT` is false).
    #[doc(hidden)]
    fn from_output(out: TaskOutput) -> Self;
}

/// Seals [`Outcome`]: the trait is public (it bounds public types) but nameable only here.
pub(crate) mod sealed {
    pub trait Sealed {}
    impl Sealed for () {}
}

impl Outcome for () {
    const READS_OUTPUT: bool = false;
    #[inline(always)]
    fn from_output(_: TaskOutput) {}
}

/// `depth` operations in flight on fixed memory, one task per lane submitted again and
/// again, results in submission order. `T` is what an operation yields: `()`, or
/// [`Received`](crate::rdma::Received) ([`comch::fast::Received`](crate::comch::fast::Received))
/// for RDMA (Comch) receive lanes. See the [module documentation](self).
pub struct Lanes<'a, T = ()> {
    ring: LaneRing<'a>,
    _out: PhantomData<fn() -> T>,
}

/// An operation's status and result area as what the lanes yield.
#[inline(always)]
fn outcome<T: Outcome>(ring: &LaneRing<'_>, index: u32, status: sys::doca_error_t) -> Result<T> {
    if status != sys::DOCA_SUCCESS {
        return Err(Error::from_doca(status, ring.kind.name));
    }
    Ok(T::from_output(if T::READS_OUTPUT { ring.output(index) } else { [0; OUT_WORDS] }))
}

impl<'a, T> Lanes<'a, T> {
    fn new(ring: LaneRing<'a>) -> Self {
        Lanes { ring, _out: PhantomData }
    }

    /// How many lanes.
    pub fn depth(&self) -> usize {
        self.ring.depth()
    }

    /// How many bytes each lane has.
    pub fn lane_len(&self) -> usize {
        self.ring.lane_len()
    }

    #[cfg(test)]
    pub(crate) fn remote_data_len(&self, lane: usize) -> Option<usize> {
        self.ring.remote_data_len(lane as u32)
    }

    /// Operations submitted (or waiting for room) whose results were not taken yet.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether no lane has an operation.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// A lane to fill and submit: an idle one at once (`None`), or, when every lane has an
    /// operation, the oldest once it completed, with that operation's result.
    pub fn lane(&mut self) -> LaneFuture<'_, 'a, T> {
        LaneFuture { ring: Lent(Some(&mut self.ring)), _out: PhantomData }
    }

    /// Waits until a lane can be taken, then gives every lane that can be taken now as a
    /// [`Batch`]: the idle ones, and the operations in flight, oldest first, as far as they
    /// are done, each lane once. The loop for message rate: one wait (and one inline
    /// progress) per batch instead of one per lane, the batch's submissions sharing a
    /// doorbell.
    ///
    /// ```
    /// # use async_doca::rdma::{LaneOp, Rdma};
    /// # use async_doca::{Access, Device, Runtime};
    /// # Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
    /// # let dev = Device::open_default()?;
    /// # let a = Rdma::builder(&dev).build().await?;
    /// # let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    /// # let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
    /// # let (conn, _peer) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
    /// # let target = dev.alloc(32 * 8, Access::RDMA_ALL)?;
    /// # let remote = dev.import(&target.export_rdma()?)?;
    /// # let src = dev.alloc(32 * 8, Access::LOCAL_READ_WRITE)?;
    /// let mut lanes = conn.lanes(LaneOp::Write(remote.slice(..)), src.buf(), 32)?;
    /// let mut sent = 0u64;
    /// while sent < 1000 {
    ///     let mut batch = lanes.batch().await;
    ///     // At least one lane; at most 32 (what is submitted here completes later).
    ///     while let Some((prev, mut lane)) = batch.lane() {
    ///         if let Some(res) = prev {
    ///             res?;
    ///         }
    ///         lane.write_u64(0, sent);
    ///         lane.submit();
    ///         sent += 1;
    ///         if sent == 1000 {
    ///             break;
    ///         }
    ///     }
    /// }
    /// while let Some((res, _lane)) = lanes.next().await {
    ///     res?;
    /// }
    /// assert_eq!(target.buf().read_u64(999 % 32 * 8), 999);
    /// # Ok::<(), async_doca::Error>(())
    /// # })?;
    /// # Ok::<(), async_doca::Error>(())
    /// ```
    pub fn batch(&mut self) -> BatchFuture<'_, 'a, T> {
        BatchFuture { ring: Lent(Some(&mut self.ring)), _out: PhantomData }
    }

    /// Waits for the oldest operation and gives its result with its lane (submit it again,
    /// or drop it to leave the lane idle); `None` when no lane has an operation.
    // A future, as `Window::next` and a stream's `next` are, not an iterator's `next`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> NextFuture<'_, 'a, T> {
        NextFuture { ring: Lent(Some(&mut self.ring)), _out: PhantomData }
    }
}

/// The future of [`Lanes::next`]: the oldest operation's result and lane, once it is done.
// Named, as `LaneFuture`: the `async fn` it was cost a round trip through one lane ~40
// instructions (`op_cost lane` 717 -> 674).
#[must_use = "futures do nothing unless awaited"]
pub struct NextFuture<'l, 'a, T> {
    ring: Lent<'l, 'a>,
    _out: PhantomData<fn() -> T>,
}

impl<'l, 'a, T: Outcome> Future for NextFuture<'l, 'a, T> {
    type Output = Option<(Result<T>, LaneMut<'l, 'a, T>)>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let step = |ring: &mut LaneRing<'a>, cx: &mut Context<'_>| {
            if ring.is_empty() {
                Poll::Ready(None)
            } else {
                ring.poll_next(cx).map(Some)
            }
        };
        self.ring.poll("Lanes::next", cx, step).map(|(taken, ring)| {
            let taken = taken?;
            let status = taken.status.expect("the oldest operation is done");
            Some((outcome(ring, taken.index, status), LaneMut::new(ring, taken.index)))
        })
    }
}

impl<T> fmt::Debug for NextFuture<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NextFuture").field("ready", &self.ring.is_ready()).finish()
    }
}

/// The lanes a pending future of theirs borrows ([`LaneFuture`], [`NextFuture`],
/// [`BatchFuture`]), handed on once it is ready to what it yields (a lane or a batch
/// borrows them for as long).
struct Lent<'l, 'a>(Option<&'l mut LaneRing<'a>>);

impl<'l, 'a> Lent<'l, 'a> {
    /// Polls `step` on the lanes; once it is ready, hands them on with its result. `what`
    /// names the future for the panic of a poll after that.
    #[inline(always)]
    fn poll<R>(
        &mut self,
        what: &str,
        cx: &mut Context<'_>,
        step: impl FnOnce(&mut LaneRing<'a>, &mut Context<'_>) -> Poll<R>,
    ) -> Poll<(R, &'l mut LaneRing<'a>)> {
        let Some(ring) = self.0.as_mut() else { polled_after_ready(what) };
        let Poll::Ready(r) = step(ring, cx) else { return Poll::Pending };
        Poll::Ready((r, self.0.take().expect("checked above")))
    }

    fn is_ready(&self) -> bool {
        self.0.is_none()
    }
}

#[cold]
#[inline(never)]
fn polled_after_ready(what: &str) -> ! {
    panic!("{what} polled after it was ready")
}

/// The future of [`Lanes::lane`]: a lane to fill, with the result of the operation it carried.
// A named future rather than an `async fn`: the state machine of an `async fn` around the
// ring's poll cost the lanes' hot loop ~4 instructions per operation.
#[must_use = "futures do nothing unless awaited"]
pub struct LaneFuture<'l, 'a, T> {
    ring: Lent<'l, 'a>,
    _out: PhantomData<fn() -> T>,
}

impl<'l, 'a, T: Outcome> Future for LaneFuture<'l, 'a, T> {
    type Output = (Option<Result<T>>, LaneMut<'l, 'a, T>);

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.ring.poll("Lanes::lane", cx, |ring, cx| ring.poll_lane(cx)).map(|(taken, ring)| {
            let result = taken.status.map(|status| outcome(ring, taken.index, status));
            (result, LaneMut::new(ring, taken.index))
        })
    }
}

impl<T> fmt::Debug for LaneFuture<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneFuture").field("ready", &self.ring.is_ready()).finish()
    }
}

/// The future of [`Lanes::batch`]: ready once a lane can be taken.
#[must_use = "futures do nothing unless awaited"]
pub struct BatchFuture<'l, 'a, T> {
    ring: Lent<'l, 'a>,
    _out: PhantomData<fn() -> T>,
}

impl<'l, 'a, T> Future for BatchFuture<'l, 'a, T> {
    type Output = Batch<'l, 'a, T>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.ring.poll("Lanes::batch", cx, |ring, cx| ring.poll_ready(cx)).map(|((), ring)| Batch {
            idle: ring.idle_len(),
            oldest: ring.len(),
            ring,
            _out: PhantomData,
        })
    }
}

impl<T> fmt::Debug for BatchFuture<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchFuture").field("ready", &self.ring.is_ready()).finish()
    }
}

/// The lanes that can be taken without waiting, from [`Lanes::batch`]: take them one at a
/// time with [`lane`](Batch::lane) until it says `None`, then wait for the next batch.
///
/// A batch hands out the lanes that were idle when it began, then the lanes of the
/// operations in flight when it began, oldest first, as far as those are done: each lane at
/// most once, so a batch ends, even when what it submits is refused at once. A lane dropped
/// without submitting is idle again, and the next batch begins with it.
pub struct Batch<'l, 'a, T> {
    ring: &'l mut LaneRing<'a>,
    /// Idle lanes this batch may still hand out.
    idle: usize,
    /// Operations (of those in the lanes when it began) it may still hand out.
    oldest: usize,
    _out: PhantomData<fn() -> T>,
}

impl<'a, T: Outcome> Batch<'_, 'a, T> {
    /// The next lane of the batch, as [`Lanes::lane`] gives it (an idle lane, or the oldest
    /// operation's with its result), or `None` once taking one would mean waiting. The
    /// first call after [`Lanes::batch`] always has one.
    #[inline]
    pub fn lane(&mut self) -> Option<(Option<Result<T>>, LaneMut<'_, 'a, T>)> {
        let taken = self.ring.take_ready(self.idle > 0, self.oldest > 0)?;
        if taken.status.is_none() {
            self.idle -= 1;
        } else {
            self.oldest -= 1;
        }
        let result = taken.status.map(|status| outcome(self.ring, taken.index, status));
        Some((result, LaneMut::new(self.ring, taken.index)))
    }
}

impl<T> fmt::Debug for Batch<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("lanes", &self.ring)
            .field("idle", &self.idle)
            .field("oldest", &self.oldest)
            .finish()
    }
}

impl<'a, T> Lanes<'a, T> {
    /// `depth` lanes of `kind` on the context `ctx` (its inventory `inv`, the operations'
    /// connection `conn`, null for none) over `local` and `remote`: what each context's own
    /// constructor (`Connection::lanes`, `Dma::lanes`...) calls with its kind's table.
    ///
    /// # Safety
    /// `kind`'s functions are called with `ctx`'s DOCA object and `conn`: `kind` must be a
    /// table for the context type `C` (an RDMA table with an RDMA context and one of its
    /// connections or null, a DMA table with a DMA context), or DOCA receives an object of
    /// another type.
    pub(crate) unsafe fn with<C>(
        ctx: &'a DocaCtx<C>,
        inv: &'a std::rc::Rc<Inventory>,
        conn: *mut std::ffi::c_void,
        kind: &'static LaneKind,
        local: Buf,
        remote: Option<RemoteSlice>,
        depth: usize,
    ) -> Result<Lanes<'a, T>> {
        LaneRing::new(LaneHost::new(ctx, inv, conn, 0), kind, local, remote, depth).map(Lanes::new)
    }

    /// Lanes of `kind` on `ctx` whose operations go to the peer endpoint `peer` (a Comch
    /// consumer id; [`At::peer`](kind::At)), with no connection and no remote memory: what
    /// `Producer::lanes` and `Consumer::recv_lanes` call.
    ///
    /// # Safety
    /// As for [`with`](Lanes::with): `kind` is a table for the context type `C`.
    pub(crate) unsafe fn with_peer<C>(
        ctx: &'a DocaCtx<C>,
        inv: &'a std::rc::Rc<Inventory>,
        peer: u32,
        kind: &'static LaneKind,
        local: Buf,
        depth: usize,
    ) -> Result<Lanes<'a, T>> {
        let host = LaneHost::new(ctx, inv, std::ptr::null_mut(), peer);
        LaneRing::new(host, kind, local, None, depth).map(Lanes::new)
    }
}

impl<T> fmt::Debug for Lanes<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.ring.fmt(f)
    }
}

/// One lane of [`Lanes`], not in flight: fill it (or read what arrived) and
/// [`submit`](LaneMut::submit) it. Dropped without submitting, the lane stays idle.
#[must_use = "a lane does nothing unless submitted"]
pub struct LaneMut<'l, 'a, T = ()> {
    lanes: &'l mut LaneRing<'a>,
    index: u32,
    /// Set by a submit: the lane is in the order, not idle.
    submitted: bool,
    _out: PhantomData<fn() -> T>,
}

impl<'l, 'a, T> LaneMut<'l, 'a, T> {
    #[inline(always)]
    fn new(lanes: &'l mut LaneRing<'a>, index: u32) -> Self {
        LaneMut { lanes, index, submitted: false, _out: PhantomData }
    }

    /// The lane's number, `0..depth`: its bytes are `index * lane_len ..` of the buffer (and
    /// of the remote slice).
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The lane's bytes, to read: what a read or receive brought, an atomic's old value, or
    /// what a write or send carries.
    pub fn buf(&self) -> &Buf {
        self.lanes.buf(self.index)
    }

    /// The lane's bytes to fill before [`submit`](LaneMut::submit), through its writers
    /// ([`write`](LaneMut::write), [`write_u64`](LaneMut::write_u64),
    /// [`fill`](LaneMut::fill)): the lane hands out no `&mut Buf`, which could be swapped
    /// for other memory while the lane's task and descriptors stay on this one.
    fn bytes(&mut self) -> &mut Buf {
        self.lanes.buf_mut(self.index)
    }

    /// Copies `data` into the lane's bytes at `at`, as [`Buf::write`] (panics when out of
    /// bounds).
    pub fn write(&mut self, at: usize, data: &[u8]) {
        self.bytes().write(at, data);
    }

    /// Writes `v` at `at` (native byte order), as [`Buf::write_u64`].
    pub fn write_u64(&mut self, at: usize, v: u64) {
        self.bytes().write_u64(at, v);
    }

    /// Sets every byte of the lane to `byte`, as [`Buf::fill`].
    pub fn fill(&mut self, byte: u8) {
        self.bytes().fill(byte);
    }

    /// Submits the lane's operation (its doorbell deferred to the next progress). It yields
    /// its result from a later [`lane`](Lanes::lane) or [`next`](Lanes::next), in order.
    ///
    /// # Panics
    /// On lanes whose operation takes an operand ([`rdma::LaneOp::WriteImm`](crate::rdma::LaneOp::WriteImm), [`SendImm`](crate::rdma::LaneOp::SendImm),
    /// [`FetchAdd`](crate::rdma::LaneOp::FetchAdd), [`CompareSwap`](crate::rdma::LaneOp::CompareSwap)): use the method that gives it. (A Comch send's immediate
    /// bytes are optional: `submit` sends none.)
    #[inline]
    pub fn submit(mut self) {
        // One compare inline, as before Comch sends, whose immediate bytes are optional, were
        // lanes too: the check of a match here took `submit` out of line (+4 instructions
        // per RDMA write, `op_cost lane`).
        if self.lanes.kind.operands != Operands::None {
            self.without_operands();
        }
        self.go();
    }

    /// `submit` on lanes whose operation takes operands: a Comch send without immediate
    /// bytes (the lane's last ones are not sent again), or the wrong method.
    #[inline(never)]
    fn without_operands(&mut self) {
        if self.lanes.kind.operands != Operands::ImmBytes {
            self.wrong_submit("submit");
        }
        self.lanes.set_operands(self.index, [0; 3]);
    }

    /// Submits the lane's Comch send with `imm` as its immediate data (what the consumer
    /// sees in [`comch::fast::Received::imm`](crate::comch::fast::Received::imm)); otherwise
    /// as [`submit`](LaneMut::submit), which sends none. The bytes are copied into the lane:
    /// `imm` is free once this returns.
    ///
    /// # Panics
    /// Unless the lanes are a [`Producer::lanes`](crate::comch::fast::Producer::lanes), or
    /// with more than [`MAX_IMM_DATA`](crate::comch::fast::MAX_IMM_DATA) bytes (more than the
    /// consumer takes is the operation's error, as with
    /// [`Producer::send`](crate::comch::fast::Producer::send)).
    #[inline]
    pub fn submit_imm_bytes(self, imm: &[u8]) {
        self.expect(self.lanes.kind.operands == Operands::ImmBytes, "submit_imm_bytes");
        let mut bytes = [0u8; 16];
        assert!(imm.len() <= bytes.len(), "{}: {} immediate bytes (at most 16)", self.lanes.kind.name, imm.len());
        bytes[..imm.len()].copy_from_slice(imm);
        let word = |k: usize| u64::from_ne_bytes(bytes[k..k + 8].try_into().expect("8 bytes"));
        self.lanes.set_operands(self.index, [word(0), word(8), imm.len() as u64]);
        self.go();
    }

    /// Submits the lane's operation with immediate data `imm`; otherwise as
    /// [`submit`](LaneMut::submit).
    ///
    /// # Panics
    /// Unless the lanes are of [`rdma::LaneOp::WriteImm`](crate::rdma::LaneOp::WriteImm) or [`SendImm`](crate::rdma::LaneOp::SendImm).
    #[inline]
    pub fn submit_imm(self, imm: u32) {
        self.expect(self.lanes.kind.operands == Operands::Imm, "submit_imm");
        self.lanes.set_operands(self.index, [u64::from(imm), 0, 0]);
        self.go();
    }

    /// Submits the lane's fetch-and-add of `add`; the target's old value lands in the lane's
    /// first 8 bytes (read them from the lane its result comes with). Otherwise as
    /// [`submit`](LaneMut::submit).
    ///
    /// # Panics
    /// Unless the lanes are of [`rdma::LaneOp::FetchAdd`](crate::rdma::LaneOp::FetchAdd).
    #[inline]
    pub fn submit_fetch_add(self, add: u64) {
        self.expect(self.lanes.kind.operands == Operands::FetchAdd, "submit_fetch_add");
        self.lanes.set_operands(self.index, [add, 0, 0]);
        self.go();
    }

    /// Submits the lane's compare-and-swap: `swap` replaces the target if it equals
    /// `compare`; its old value lands in the lane's first 8 bytes. Otherwise as
    /// [`submit`](LaneMut::submit).
    ///
    /// # Panics
    /// Unless the lanes are of [`rdma::LaneOp::CompareSwap`](crate::rdma::LaneOp::CompareSwap).
    #[inline]
    pub fn submit_compare_swap(self, compare: u64, swap: u64) {
        self.expect(self.lanes.kind.operands == Operands::CompareSwap, "submit_compare_swap");
        self.lanes.set_operands(self.index, [compare, swap, 0]);
        self.go();
    }

    /// Panics with the method that submits these lanes unless `ok`.
    #[inline(always)]
    fn expect(&self, ok: bool, called: &str) {
        if !ok {
            self.wrong_submit(called);
        }
    }

    #[cold]
    #[inline(never)]
    fn wrong_submit(&self, called: &str) -> ! {
        let kind = self.lanes.kind;
        let right = match kind.operands {
            Operands::Imm => "submit_imm",
            Operands::FetchAdd => "submit_fetch_add",
            Operands::CompareSwap => "submit_compare_swap",
            Operands::ImmBytes => "submit_imm_bytes",
            Operands::None => "submit",
        };
        panic!("{}: these lanes are submitted with {right}, not {called}", kind.name);
    }

    #[inline(always)]
    fn go(mut self) {
        self.submitted = true;
        self.lanes.submit_lane(self.index);
    }
}

impl<T> Drop for LaneMut<'_, '_, T> {
    #[inline]
    fn drop(&mut self) {
        if !self.submitted {
            self.lanes.release(self.index);
        }
    }
}

impl<T> fmt::Debug for LaneMut<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneMut").field("op", &self.lanes.kind.name).field("index", &self.index).finish()
    }
}
