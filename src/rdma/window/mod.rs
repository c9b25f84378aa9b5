//! [`Window`] and [`RecvWindow`]: many operations in flight on one connection (receives:
//! on one context), without a future per operation.
//!
//! Message rate is what is left of a DOCA operation once the runtime's cost per operation
//! is paid. A [`Pipeline`](super::Pipeline) keeps whole operation futures in its lanes; a
//! `Window` keeps only what an operation in flight needs: the memory DOCA may touch, and for
//! each lane a task held for it (per operation kind), which keeps its descriptors while the
//! lane works on the same bytes. Pushing an operation points the lane's task at its buffers
//! (unless it still points at them), submits it with its doorbell deferred, and puts it in
//! the lane; no future is built, moved or dropped, and the doorbells of every operation
//! pushed since the executor last progressed the PE are rung together
//! (`doca_task_submit_ex` without the flush flag, one `doca_ctx_flush_tasks`).
//!
//! When every operation uses the same memory over and over (lane *k* always on the same
//! bytes), [`Lanes`](super::Lanes) do the same for about half the cost per operation: each
//! lane keeps its task and descriptors and submits them again as they are.
//!
//! | method | what it submits | gives back |
//! | --- | --- | --- |
//! | [`write`](Window::write), [`write_imm`](Window::write_imm) | as [`Connection::write`] | the source |
//! | [`read`](Window::read) | as [`Connection::read`] | the destination |
//! | [`send`](Window::send), [`send_imm`](Window::send_imm) | as [`Connection::send`] | the source |
//! | [`RecvWindow::recv`] ([`Rdma::recv_window`]) | as [`Rdma::recv`] | the destination, with [`Received`] |
//!
//! * **Results in push order.** Each pushed operation yields exactly one result,
//!   `(Result<()>, Buf)` (a receive: `(Result<Received>, Buf)`), from
//!   [`next`](Window::next), or from a push that found the window full (it returns the
//!   oldest operation's result to make room). A check that fails before anything is
//!   submitted (a source longer than its target, a destroyed context) takes its lane like
//!   any operation and yields its error in turn: nothing is reported out of order, nothing
//!   is lost.
//! * **Submission in push order**, always: only one push is in progress at a time (it
//!   borrows the window), and a push that finds the context's task pool
//!   ([`RdmaBuilder::max_tasks`](super::RdmaBuilder::max_tasks)) or send queue full waits
//!   for room; it does not fail. DOCA completes the operations of one connection in order.
//! * **Waiting.** A push into a full window, and [`next`](Window::next), wait for the oldest
//!   operation. When the task may progress the PE, they collect completions inline (no trip
//!   round the executor's loop); otherwise the oldest operation's completion wakes the task.
//! * **Dropping.** A push dropped before it resolved leaves the window as it was (the
//!   operation is not submitted, its buffer dropped). Dropping the window discards the
//!   results of the operations in it; those in flight keep their buffers, remote slices and
//!   descriptors alive with the lanes' tasks until DOCA is done, as a dropped operation
//!   future does.
//! * **Costs.** Per operation: the lane's task, held by the window (allocated at the lane's
//!   first operation of a kind), and its descriptors, found again when the lane's bytes are
//!   those of its previous operation, else lent by the memory's cache; no completion slot,
//!   no allocation in the steady state.
//!   `examples/op_cost window` measures it against a `Pipeline` (`pipeline`) and a single
//!   write (`write`); `docs/cost.md` has the figures.
//!
//! **Errors** are those of the operation's future ([`Connection::write`], ... and the RDMA
//! module's [errors and recovery](super#errors-and-recovery)): a failed check, DOCA's
//! status at completion (a task that fails moves the context to the error state, and the
//! operations after it fail too), `Cancelled` or `ConnectionLost` for what a stop flushed.
//!
//! **Threads.** A window borrows its [`Connection`] (or [`Rdma`]), so it is `!Send` and lives
//! on the executor that owns the context, like the connection.
//!
//! Modules: `ring` (the lanes and what each holds), `push` (an operation on its way into
//! its lane).
//!
//! ```
//! use async_doca::rdma::Rdma;
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
//!     // 1000 writes, 32 in flight, one task, no future per write.
//!     let mut window = conn.window(32);
//!     for i in 0..1000usize {
//!         let k = i % 64;
//!         let mut buf = src.slice(k * 8..k * 8 + 8);
//!         buf.write_u64(0, i as u64);
//!         if let Some((res, _buf)) = window.write(buf, remote.slice(k * 8..k * 8 + 8)).await {
//!             res?; // the oldest write
//!         }
//!     }
//!     while let Some((res, _buf)) = window.next().await {
//!         res?;
//!     }
//!     assert_eq!(target.buf().read_u64(999 % 64 * 8), 999);
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

use std::fmt;
use std::future::poll_fn;
use std::task::{Context, Poll};

mod push;
pub(in crate::rdma) mod ring;

use super::ops::Kind;
pub(in crate::rdma) use crate::lanes::Outcome;
use push::Op;
pub use push::WindowPush;
use ring::Ring;

use super::{Connection, Rdma, Received};
use crate::error::Result;
use crate::mem::{Buf, RemoteSlice};

/// What a pushed write, read or send gives back: its result and its local buffer.
pub type Completed = (Result<()>, Buf);

/// Up to `depth` operations in flight, results in push order, with no future per
/// operation: writes, reads and sends on one [`Connection`] (`Window<'a>`, made by
/// [`Connection::window`]), or receives posted on one [`Rdma`] context
/// ([`RecvWindow<'a>`](RecvWindow), made by [`Rdma::recv_window`]). `T` is what each
/// operation yields besides its buffer: `()`, or [`Received`]. See the
/// [module documentation](self).
pub struct Window<'a, T = ()> {
    /// The connection of a connection's window (none for receives).
    conn: Option<&'a Connection>,
    ring: Ring<'a, T>,
}

/// Up to `depth` receives posted on one [`Rdma`] context, results in post order (the order
/// in which DOCA completes them: any connection's next message completes the oldest), with
/// no future per receive. Made by [`Rdma::recv_window`]; otherwise as a [`Window`] (see the
/// [module documentation](self)).
///
/// ```
/// use async_doca::rdma::Rdma;
/// use async_doca::{Access, Device, Runtime};
///
/// Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
///     let dev = Device::open_default()?;
///     let a = Rdma::builder(&dev).build().await?;
///     let b = Rdma::builder(&dev).build().await?;
///     let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
///     let (to_b, _to_a) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
///     let (out, inbox) = (dev.alloc(8, Access::LOCAL_READ_WRITE)?, dev.alloc(16 * 8, Access::LOCAL_READ_WRITE)?);
///
///     // b keeps 16 receives posted; a sends 100 messages, 16 in flight.
///     let mut posted = b.recv_window(16);
///     for k in 0..16 {
///         assert!(posted.recv(inbox.slice(k * 8..k * 8 + 8)).await.is_none());
///     }
///     let mut sends = to_b.window(16);
///     for i in 0..100u32 {
///         if let Some((res, _)) = sends.send_imm(out.slice(0..8), i).await {
///             res?;
///         }
///         // Take the oldest message and post its buffer again.
///         let (msg, buf) = posted.next().await.expect("16 posted");
///         assert_eq!(msg?.imm, Some(i));
///         assert!(posted.recv(buf).await.is_none());
///     }
///     while let Some((res, _)) = sends.next().await {
///         res?;
///     }
///     Ok::<(), async_doca::Error>(())
/// })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
pub type RecvWindow<'a> = Window<'a, Received>;

impl<T: Outcome> Window<'_, T> {
    /// How many operations it holds at most.
    pub fn depth(&self) -> usize {
        self.ring.depth()
    }

    /// Operations in the window (in flight, or completed and not yet returned).
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether it holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ring.len() == 0
    }

    /// Whether every lane is taken (the next push first returns the oldest result).
    pub fn is_full(&self) -> bool {
        self.ring.is_full()
    }

    /// Waits for the oldest operation and returns its result; `None` when the window is
    /// empty.
    pub async fn next(&mut self) -> Option<(Result<T>, Buf)> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the oldest operation's result: `Ready(None)` when the window is empty.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Result<T>, Buf)>> {
        self.ring.poll_next(cx)
    }
}

impl<'a> Window<'a> {
    /// A window of `depth` lanes on `conn`.
    ///
    /// # Panics
    /// If `depth` is 0.
    pub(in crate::rdma) fn new(conn: &'a Connection, depth: usize) -> Window<'a> {
        Window { conn: Some(conn), ring: Ring::new(&conn.inner.rdma, depth) }
    }

    /// Writes all of `src` to the start of `dst`, as [`Connection::write`]. Resolves once
    /// the write is submitted (or has failed a check and taken its lane), to the oldest
    /// operation's result if the window was full, else `None`.
    #[inline]
    pub fn write(&mut self, src: Buf, dst: RemoteSlice) -> WindowPush<'_, 'a> {
        self.push(Kind::Write, 0, src, Some(dst))
    }

    /// Writes with immediate data, as [`Connection::write_imm`]; otherwise as
    /// [`write`](Window::write).
    #[inline]
    pub fn write_imm(&mut self, src: Buf, dst: RemoteSlice, imm: u32) -> WindowPush<'_, 'a> {
        self.push(Kind::WriteImm, imm, src, Some(dst))
    }

    /// Reads `dst.len()` bytes from the start of `src` into `dst`, as
    /// [`Connection::read`]; the result comes with `dst`. Otherwise as
    /// [`write`](Window::write).
    #[inline]
    pub fn read(&mut self, src: RemoteSlice, dst: Buf) -> WindowPush<'_, 'a> {
        self.push(Kind::Read, 0, dst, Some(src))
    }

    /// Sends `src` as one message, as [`Connection::send`]; otherwise as
    /// [`write`](Window::write).
    #[inline]
    pub fn send(&mut self, src: Buf) -> WindowPush<'_, 'a> {
        self.push(Kind::Send, 0, src, None)
    }

    /// Sends `src` with immediate data, as [`Connection::send_imm`]; otherwise as
    /// [`write`](Window::write).
    #[inline]
    pub fn send_imm(&mut self, src: Buf, imm: u32) -> WindowPush<'_, 'a> {
        self.push(Kind::SendImm, imm, src, None)
    }

    #[inline(always)]
    fn push(&mut self, kind: Kind, imm: u32, buf: Buf, remote: Option<RemoteSlice>) -> WindowPush<'_, 'a> {
        WindowPush::new(&mut self.ring, self.conn, Op { kind, imm, buf, remote })
    }
}

impl<'a> Window<'a, Received> {
    /// A window of `depth` lanes for receives posted on `rdma`.
    ///
    /// # Panics
    /// If `depth` is 0.
    pub(in crate::rdma) fn new_recv(rdma: &'a Rdma, depth: usize) -> RecvWindow<'a> {
        Window { conn: None, ring: Ring::new(&rdma.inner, depth) }
    }

    /// Posts a receive into `buf`, as [`Rdma::recv`]. Resolves once it is posted (or has
    /// failed and taken its lane), to the oldest receive's result if the window was full,
    /// else `None`.
    #[inline]
    pub fn recv(&mut self, buf: Buf) -> WindowPush<'_, 'a, Received> {
        WindowPush::new(&mut self.ring, None, Op { kind: Kind::Recv, imm: 0, buf, remote: None })
    }
}

impl<T> fmt::Debug for Window<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(if self.conn.is_some() { "Window" } else { "RecvWindow" })
            .field("conn", &self.conn.map(Connection::id))
            .field("depth", &self.ring.depth())
            .field("len", &self.ring.len())
            .finish()
    }
}
