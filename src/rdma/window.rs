//! [`Window`]: many operations in flight on one connection, without a future per operation.
//!
//! Message rate is what is left of a DOCA operation once the runtime's cost per operation
//! is paid. A [`Pipeline`](super::Pipeline) keeps whole operation futures in its lanes; a
//! `Window` keeps only what an operation in flight needs: its completion slot and the
//! memory DOCA may touch. Pushing an operation allocates (or re-initialises a kept) task,
//! submits it with its doorbell deferred, and puts it in the next lane; no future is built,
//! moved or dropped, and the doorbells of every operation pushed since the executor last
//! progressed the PE are rung together (`doca_task_submit_ex` without the flush flag, one
//! `doca_ctx_flush_tasks`).
//!
//! | method | what it submits | gives back |
//! | --- | --- | --- |
//! | [`write`](Window::write), [`write_imm`](Window::write_imm) | as [`Connection::write`] | the source |
//! | [`read`](Window::read) | as [`Connection::read`] | the destination |
//! | [`send`](Window::send), [`send_imm`](Window::send_imm) | as [`Connection::send`] | the source |
//!
//! * **Results in push order.** Each pushed operation yields exactly one result,
//!   `(Result<()>, Buf)`, from [`next`](Window::next), or from a push that found the window
//!   full (it returns the oldest operation's result to make room). A check that fails before
//!   anything is submitted (a source longer than its target, a destroyed context) takes its
//!   lane like any operation and yields its error in turn: nothing is reported out of order,
//!   nothing is lost.
//! * **Submission in push order**, as long as the context's task pool
//!   ([`RdmaBuilder::max_tasks`](super::RdmaBuilder::max_tasks)) and send queue have room for
//!   the window's depth: a push waits (it does not fail) while either is full, and a push
//!   waits only for its own operation, never reorders it. DOCA completes the operations of
//!   one connection in order.
//! * **Waiting.** A push into a full window, and [`next`](Window::next), wait for the oldest
//!   operation. When the task may progress the PE, they collect completions inline (no trip
//!   round the executor's loop); otherwise the oldest operation's completion wakes the task.
//! * **Dropping.** A push dropped before it resolved leaves the window as it was (the
//!   operation is not submitted, its buffer dropped). Dropping the window discards the
//!   results of the operations in it; those in flight keep their buffers, remote slices and
//!   descriptors alive in their completion slots until DOCA is done, as a dropped operation
//!   future does.
//! * **Costs.** Per operation: a completion slot, a task (kept ones are reused), the two
//!   descriptors lent by the memory's cache; no allocation in the steady state.
//!   `examples/op_cost window` measures it against a `Pipeline` (`pipeline`) and a single
//!   write (`write`); `docs/cost.md` has the figures.
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
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::ops::{ReadReq, SendReq, WriteReq};
use super::{Connection, Read, Send as SendTask, SendImm, Write, WriteImm};
use crate::error::{Error, Result};
use crate::executor::completion::{SlotRef, Submission, Ticket};
use crate::ext::{AllocTask, DocaTask};
use crate::mem::{Buf, RemoteSlice};

/// What a pushed operation gives back: its result and its local buffer.
pub type Completed = (Result<()>, Buf);

/// One lane of a [`Window`].
enum Lane {
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

/// Up to `depth` operations in flight on one [`Connection`], results in push order, with
/// no future per operation. Made by [`Connection::window`]; see the
/// [module documentation](self).
pub struct Window<'a> {
    conn: &'a Connection,
    /// A ring; the operations are `head..head + len` (modulo the depth).
    lanes: Box<[Lane]>,
    head: usize,
    len: usize,
    /// The submission of the one push in progress (a push borrows the window) while it
    /// waits for a free task or for room: kept here rather than in the push, so that the
    /// push future stays small (it is moved into the caller's state at every `.await`).
    parked: Option<Waiting<'a>>,
    /// That push's place among the context's waiters for a free task.
    ticket: Ticket,
}

impl<'a> Window<'a> {
    /// A window of `depth` lanes on `conn`.
    ///
    /// # Panics
    /// If `depth` is 0.
    pub(super) fn new(conn: &'a Connection, depth: usize) -> Window<'a> {
        assert!(depth > 0, "a window needs at least one lane");
        Window { conn, lanes: (0..depth).map(|_| Lane::Empty).collect(), head: 0, len: 0, parked: None, ticket: None }
    }

    /// How many operations it holds at most.
    pub fn depth(&self) -> usize {
        self.lanes.len()
    }

    /// Operations in the window (in flight, or completed and not yet returned).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no operation.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every lane is taken (the next push first returns the oldest result).
    pub fn is_full(&self) -> bool {
        self.len == self.lanes.len()
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

    /// Waits for the oldest operation and returns its result; `None` when the window is
    /// empty.
    pub async fn next(&mut self) -> Option<Completed> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the oldest operation's result: `Ready(None)` when the window is empty.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Completed>> {
        if self.len == 0 {
            return Poll::Ready(None);
        }
        if self.poll_oldest(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(Some(self.pop()))
    }

    #[inline(always)]
    fn push(&mut self, kind: Kind, imm: u32, buf: Buf, remote: Option<RemoteSlice>) -> WindowPush<'_, 'a> {
        WindowPush { win: self, op: Some(Op { kind, imm, buf, remote }) }
    }

    /// Ready once the oldest operation's result is there (the window is not empty). When
    /// this poll may progress the PE, it first collects completions inline.
    #[inline]
    fn poll_oldest(&self, cx: &mut Context<'_>) -> Poll<()> {
        let Lane::InFlight { slot, .. } = &self.lanes[self.head] else { return Poll::Ready(()) };
        if slot.is_done() {
            return Poll::Ready(());
        }
        let core = self.conn.inner.rdma.ctx.core();
        if core.take_inline_progress() && core.progress_inline(|| slot.is_done()) {
            return Poll::Ready(());
        }
        slot.poll_done(cx)
    }

    /// Takes the oldest operation's result out (it is there: `poll_oldest` said so).
    fn pop(&mut self) -> Completed {
        let lane = std::mem::replace(&mut self.lanes[self.head], Lane::Empty);
        self.head = (self.head + 1) % self.lanes.len();
        self.len -= 1;
        match lane {
            Lane::InFlight { slot, kind, buf, remote } => {
                let r = slot.take_output(self.conn.inner.rdma.ctx.core(), kind.name()).map(drop);
                // Only now: the slot gave the descriptors over this memory back.
                drop(remote);
                (r, buf)
            }
            Lane::Failed(e, buf) => (Err(e), buf),
            Lane::Empty => unreachable!("the lanes head..head + len hold operations"),
        }
    }

    /// Puts `lane` after the newest operation (there is room).
    #[inline(always)]
    fn place(&mut self, lane: Lane) {
        debug_assert!(!self.is_full());
        let i = (self.head + self.len) % self.lanes.len();
        let free = &mut self.lanes[i];
        debug_assert!(matches!(free, Lane::Empty), "the lane after the newest operation is free");
        // Overwritten without dropping: an `Empty` lane owns nothing (a plain assignment
        // would call the lane's drop glue per operation).
        std::mem::forget(std::mem::replace(free, lane));
        self.len += 1;
    }
}

impl Drop for Window<'_> {
    fn drop(&mut self) {
        let core = self.conn.inner.rdma.ctx.core();
        let inv = &self.conn.inner.rdma.inv;
        // A push that was forgotten (`mem::forget`) instead of dropped left its submission.
        if let Some(w) = self.parked.take() {
            w.release(self.conn);
        }
        for lane in std::mem::take(&mut self.lanes).into_vec() {
            match lane {
                Lane::InFlight { slot, buf, remote, .. } if slot.in_flight() => {
                    // DOCA may still touch the memory (and the context inventory's
                    // descriptors): the slot keeps them until the completion.
                    slot.abandon(core, Some(Box::new((inv.clone(), buf, remote))));
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

impl fmt::Debug for Window<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("conn", &self.conn.id())
            .field("depth", &self.lanes.len())
            .field("len", &self.len)
            .finish()
    }
}

/// Which operation a push submits.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Write,
    WriteImm,
    Read,
    Send,
    SendImm,
}

impl Kind {
    /// The operation's name, in its errors.
    fn name(self) -> &'static str {
        match self {
            Kind::Write => "rdma.write",
            Kind::WriteImm => "rdma.write_imm",
            Kind::Read => "rdma.read",
            Kind::Send => "rdma.send",
            Kind::SendImm => "rdma.send_imm",
        }
    }
}

/// An operation not yet in its lane: what the caller gave.
struct Op {
    kind: Kind,
    imm: u32,
    /// The local buffer, given back with the result.
    buf: Buf,
    /// The remote slice of a write or read.
    remote: Option<RemoteSlice>,
}

/// A submission that had to wait for a free task or for room in the queue (back-pressure),
/// kept until the push is polled again.
enum Waiting<'a> {
    Write(Submission<Write>, WriteReq<'a>),
    WriteImm(Submission<WriteImm>, WriteReq<'a>),
    Read(Submission<Read>, ReadReq<'a>),
    Send(Submission<SendTask>, SendReq<'a>),
    SendImm(Submission<SendImm>, SendReq<'a>),
}

/// The future of a push into a [`Window`] ([`write`](Window::write), [`read`](Window::read),
/// [`send`](Window::send), ...): resolves, once the operation is submitted (or has failed
/// a check) and has its lane, to the oldest operation's result if the window was full,
/// `None` otherwise. Dropping it before it resolves leaves the window unchanged and drops
/// the operation unsubmitted.
#[must_use = "the operation is not submitted unless the push is awaited"]
pub struct WindowPush<'w, 'a> {
    win: &'w mut Window<'a>,
    /// The operation, until it is in its lane (while it waits for a free task or for room,
    /// its submission is parked in the window).
    op: Option<Op>,
}

/// Where one attempt to submit a pushed operation got.
enum Step {
    /// DOCA has the task; the slot receives its completion.
    Submitted(SlotRef),
    /// The operation failed before anything was submitted (its slot is released).
    Failed(Error),
    /// It waits for a free task or for room (back-pressure), parked in the push.
    Wait,
}

/// Drives `sub` (the task of request `req`) to DOCA with a deferred doorbell (the window
/// progresses when it waits); when they must wait, `park` makes both a [`Waiting`], kept in
/// `parked` (written in place: a `Step` carrying it would be copied on every return).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn submit<'a, K: DocaTask, R: AllocTask<K>>(
    conn: &Connection,
    name: &'static str,
    mut sub: Submission<K>,
    mut req: R,
    ticket: &mut Ticket,
    cx: &mut Context<'_>,
    parked: &mut Option<Waiting<'a>>,
    park: impl FnOnce(Submission<K>, R) -> Waiting<'a>,
) -> Step {
    let ctx = &conn.inner.rdma.ctx;
    match sub.poll_submit(ctx.core(), ctx.record(), name, &mut req, ticket, cx, false) {
        Poll::Ready(Ok(_)) => Step::Submitted(sub.into_slot(ctx.record())),
        Poll::Ready(Err(e)) => {
            // Nothing was submitted: the slot (and any descriptor) goes back now, before
            // the memory does.
            sub.into_slot(ctx.record()).release(ctx.core());
            Step::Failed(e)
        }
        Poll::Pending => {
            *parked = Some(park(sub, req));
            Step::Wait
        }
    }
}

impl Op {
    /// The first attempt: the operation's checks, its request, a slot, then [`submit`].
    #[inline(always)]
    fn start<'a>(
        &self,
        conn: &'a Connection,
        ticket: &mut Ticket,
        cx: &mut Context<'_>,
        parked: &mut Option<Waiting<'a>>,
    ) -> Step {
        let name = self.kind.name();
        let core = conn.inner.rdma.ctx.core();
        let remote = || self.remote.as_ref().expect("a write or read has a remote slice");
        match self.kind {
            Kind::Write => match conn.write_req(name, &self.buf, remote(), 0) {
                Ok(r) => submit(conn, name, Submission::reserve(core), r, ticket, cx, parked, Waiting::Write),
                Err(e) => Step::Failed(e),
            },
            Kind::WriteImm => match conn.write_req(name, &self.buf, remote(), self.imm) {
                Ok(r) => submit(conn, name, Submission::reserve(core), r, ticket, cx, parked, Waiting::WriteImm),
                Err(e) => Step::Failed(e),
            },
            Kind::Read => match conn.read_req(name, remote(), &self.buf) {
                Ok(r) => submit(conn, name, Submission::reserve(core), r, ticket, cx, parked, Waiting::Read),
                Err(e) => Step::Failed(e),
            },
            Kind::Send => match conn.send_req(name, &self.buf, 0) {
                Ok(r) => submit(conn, name, Submission::reserve(core), r, ticket, cx, parked, Waiting::Send),
                Err(e) => Step::Failed(e),
            },
            Kind::SendImm => match conn.send_req(name, &self.buf, self.imm) {
                Ok(r) => submit(conn, name, Submission::reserve(core), r, ticket, cx, parked, Waiting::SendImm),
                Err(e) => Step::Failed(e),
            },
        }
    }
}

impl<'a> Waiting<'a> {
    /// The next attempt, after a wait.
    fn resume(
        self,
        conn: &Connection,
        name: &'static str,
        ticket: &mut Ticket,
        cx: &mut Context<'_>,
        parked: &mut Option<Waiting<'a>>,
    ) -> Step {
        match self {
            Waiting::Write(s, r) => submit(conn, name, s, r, ticket, cx, parked, Waiting::Write),
            Waiting::WriteImm(s, r) => submit(conn, name, s, r, ticket, cx, parked, Waiting::WriteImm),
            Waiting::Read(s, r) => submit(conn, name, s, r, ticket, cx, parked, Waiting::Read),
            Waiting::Send(s, r) => submit(conn, name, s, r, ticket, cx, parked, Waiting::Send),
            Waiting::SendImm(s, r) => submit(conn, name, s, r, ticket, cx, parked, Waiting::SendImm),
        }
    }

    /// Gives the slot back (freeing an allocated, unsubmitted task first).
    fn release(self, conn: &Connection) {
        let ctx = &conn.inner.rdma.ctx;
        let rec = ctx.record();
        let slot = match self {
            Waiting::Write(s, _) => s.into_slot(rec),
            Waiting::WriteImm(s, _) => s.into_slot(rec),
            Waiting::Read(s, _) => s.into_slot(rec),
            Waiting::Send(s, _) => s.into_slot(rec),
            Waiting::SendImm(s, _) => s.into_slot(rec),
        };
        slot.release(ctx.core());
    }
}

impl Unpin for WindowPush<'_, '_> {}

impl Future for WindowPush<'_, '_> {
    type Output = Option<Completed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Completed>> {
        let this = self.get_mut();
        let win = &mut *this.win;
        // Room first: the oldest operation leaves (below) only once this one is submitted,
        // so a push dropped while it waits takes nothing out of the window.
        if win.is_full() && win.poll_oldest(cx).is_pending() {
            return Poll::Pending;
        }
        let op = this.op.as_ref().expect("WindowPush polled after completion");
        let conn = win.conn;
        let step = match win.parked.take() {
            None => op.start(conn, &mut win.ticket, cx, &mut win.parked),
            Some(w) => w.resume(conn, op.kind.name(), &mut win.ticket, cx, &mut win.parked),
        };
        let lane = match step {
            Step::Wait => return Poll::Pending,
            Step::Submitted(slot) => {
                let Op { kind, buf, remote, .. } = this.op.take().expect("checked above");
                Lane::InFlight { slot, kind, buf, remote }
            }
            Step::Failed(e) => {
                let Op { buf, .. } = this.op.take().expect("checked above");
                Lane::Failed(e, buf)
            }
        };
        let oldest = if win.is_full() { Some(win.pop()) } else { None };
        win.place(lane);
        Poll::Ready(oldest)
    }
}

impl Drop for WindowPush<'_, '_> {
    fn drop(&mut self) {
        // Never submitted (a submitted operation is in its lane in the same poll): free its
        // task and release its slot, then (the field, afterwards) drop its memory.
        if let Some(w) = self.win.parked.take() {
            w.release(self.win.conn);
        }
    }
}

impl fmt::Debug for WindowPush<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowPush")
            .field("window", &self.win)
            .field("op", &self.op.as_ref().map(|op| op.kind.name()))
            .finish()
    }
}
