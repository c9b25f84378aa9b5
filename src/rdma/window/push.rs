//! [`WindowPush`]: one operation on its way into a window's lane: its checks, its request,
//! its [`Submission`], and the wait for a free task or for room (the submission parked in the
//! window meanwhile).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::ring::{Lane, Ring};
use crate::error::{Error, Result};
use crate::executor::completion::{SlotRef, Submission, Ticket};
use crate::ext::{AllocTask, DocaTask, TaskOutput};
use crate::lanes::Outcome;
use crate::mem::{Buf, RemoteSlice};
use crate::rdma::ops::{Kind, ReadReq, RecvReq, SendReq, WriteReq};
use crate::rdma::{Connection, RdmaInner, Read, Received, Recv, Send as SendTask, SendImm, Write, WriteImm};

/// An operation not yet in its lane: what the caller gave.
pub(super) struct Op {
    pub(super) kind: Kind,
    pub(super) imm: u32,
    /// The local buffer, given back with the result.
    pub(super) buf: Buf,
    /// The remote slice of a write or read.
    pub(super) remote: Option<RemoteSlice>,
}

/// A submission that had to wait for a free task or for room in the queue (back-pressure),
/// parked in the window until the push is polled again.
pub(super) enum Waiting<'a> {
    Write(Submission<Write>, WriteReq<'a>),
    WriteImm(Submission<WriteImm>, WriteReq<'a>),
    Read(Submission<Read>, ReadReq<'a>),
    Send(Submission<SendTask>, SendReq<'a>),
    SendImm(Submission<SendImm>, SendReq<'a>),
    Recv(Submission<Recv>, RecvReq<'a>),
}

impl crate::lanes::sealed::Sealed for Received {}

impl Outcome for Received {
    const READS_OUTPUT: bool = true;
    #[inline(always)]
    fn from_output(out: TaskOutput) -> Received {
        Received::from_output(out)
    }
}

/// Where one attempt to submit a pushed operation got.
enum Step {
    /// DOCA has the task; the slot receives its completion.
    Submitted(SlotRef),
    /// The operation failed before anything was submitted (its slot is released).
    Failed(Error),
    /// It waits for a free task or for room (back-pressure), parked in the window.
    Wait,
}

/// Drives `sub` (the task of request `req`) to DOCA with a deferred doorbell (the window
/// progresses when it waits); when they must wait, `park` makes both a [`Waiting`], kept in
/// `parked` (written in place: a `Step` carrying it would be copied on every return).
#[inline(always)]
// Each argument is borrowed from a different owner (the window, the push, the caller).
#[allow(clippy::too_many_arguments)]
fn submit<'a, K: DocaTask, R: AllocTask<K>>(
    inner: &RdmaInner,
    name: &'static str,
    mut sub: Submission<K>,
    mut req: R,
    ticket: &mut Ticket,
    cx: &mut Context<'_>,
    parked: &mut Option<Waiting<'a>>,
    park: impl FnOnce(Submission<K>, R) -> Waiting<'a>,
) -> Step {
    let ctx = &inner.ctx;
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
    fn start<'a>(&self, ring: &mut Ring<'a>, conn: Option<&'a Connection>, cx: &mut Context<'_>) -> Step {
        let (inner, name) = (ring.inner, self.kind.name());
        let core = inner.ctx.core();
        let (ticket, parked) = (&mut ring.ticket, &mut ring.parked);
        let conn = || conn.expect("an operation on a connection is pushed into a connection's window");
        let remote = || self.remote.as_ref().expect("a write or read has a remote slice");
        macro_rules! go {
            ($req:expr, $park:path) => {
                match $req {
                    Ok(r) => submit(inner, name, Submission::reserve(core), r, ticket, cx, parked, $park),
                    Err(e) => Step::Failed(e),
                }
            };
        }
        match self.kind {
            Kind::Write => go!(conn().write_req(name, &self.buf, remote(), 0), Waiting::Write),
            Kind::WriteImm => go!(conn().write_req(name, &self.buf, remote(), self.imm), Waiting::WriteImm),
            Kind::Read => go!(conn().read_req(name, remote(), &self.buf), Waiting::Read),
            Kind::Send => go!(conn().send_req(name, &self.buf, 0), Waiting::Send),
            Kind::SendImm => go!(conn().send_req(name, &self.buf, self.imm), Waiting::SendImm),
            Kind::Recv => go!(inner.recv_req(name, &self.buf), Waiting::Recv),
            Kind::FetchAdd | Kind::CmpSwp => unreachable!("a window's methods push no atomics"),
        }
    }
}

impl<'a> Waiting<'a> {
    /// The next attempt, after a wait.
    fn resume(self, ring: &mut Ring<'a>, name: &'static str, cx: &mut Context<'_>) -> Step {
        let (inner, ticket, parked) = (ring.inner, &mut ring.ticket, &mut ring.parked);
        match self {
            Waiting::Write(s, r) => submit(inner, name, s, r, ticket, cx, parked, Waiting::Write),
            Waiting::WriteImm(s, r) => submit(inner, name, s, r, ticket, cx, parked, Waiting::WriteImm),
            Waiting::Read(s, r) => submit(inner, name, s, r, ticket, cx, parked, Waiting::Read),
            Waiting::Send(s, r) => submit(inner, name, s, r, ticket, cx, parked, Waiting::Send),
            Waiting::SendImm(s, r) => submit(inner, name, s, r, ticket, cx, parked, Waiting::SendImm),
            Waiting::Recv(s, r) => submit(inner, name, s, r, ticket, cx, parked, Waiting::Recv),
        }
    }

    /// Gives the slot back (freeing an allocated, unsubmitted task first).
    pub(super) fn release(self, inner: &RdmaInner) {
        let (core, rec) = (inner.ctx.core(), inner.ctx.record());
        let slot = match self {
            Waiting::Write(s, _) => s.into_slot(rec),
            Waiting::WriteImm(s, _) => s.into_slot(rec),
            Waiting::Read(s, _) => s.into_slot(rec),
            Waiting::Send(s, _) => s.into_slot(rec),
            Waiting::SendImm(s, _) => s.into_slot(rec),
            Waiting::Recv(s, _) => s.into_slot(rec),
        };
        slot.release(core);
    }
}

/// The future of a push into a window ([`Window::write`](super::Window::write),
/// [`read`](super::Window::read), [`send`](super::Window::send), ...,
/// [`RecvWindow::recv`](super::RecvWindow::recv)): resolves, once the operation is
/// submitted (or has failed a check) and has its lane, to the oldest operation's result if
/// the window was full, `None` otherwise. `T` is what an operation of that window yields:
/// `()` (writes, reads, sends) or [`Received`] (receives). Dropping it before it resolves
/// leaves the window unchanged and drops the operation unsubmitted.
#[must_use = "the operation is not submitted unless the push is awaited"]
pub struct WindowPush<'w, 'a, T = ()> {
    ring: &'w mut Ring<'a>,
    /// The connection of a connection's window (none for receives).
    conn: Option<&'a Connection>,
    /// The operation, until it is in its lane (while it waits for a free task or for room,
    /// its submission is parked in the window).
    op: Option<Op>,
    _out: PhantomData<fn() -> T>,
}

impl<'w, 'a, T> WindowPush<'w, 'a, T> {
    #[inline(always)]
    pub(super) fn new(ring: &'w mut Ring<'a>, conn: Option<&'a Connection>, op: Op) -> Self {
        WindowPush { ring, conn, op: Some(op), _out: PhantomData }
    }
}

impl<T: Outcome> WindowPush<'_, '_, T> {
    /// The poll of every push, whatever its output type.
    #[inline(always)]
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Result<T>, Buf)>> {
        let ring = &mut *self.ring;
        // Room first: the oldest operation leaves (below) only once this one is submitted,
        // so a push dropped while it waits takes nothing out of the window.
        if ring.is_full() && ring.poll_oldest(cx).is_pending() {
            return Poll::Pending;
        }
        let op = self.op.as_ref().expect("WindowPush polled after completion");
        let step = match ring.parked.take() {
            None => op.start(ring, self.conn, cx),
            Some(w) => w.resume(ring, op.kind.name(), cx),
        };
        let lane = match step {
            Step::Wait => return Poll::Pending,
            Step::Submitted(slot) => {
                let Op { kind, buf, remote, .. } = self.op.take().expect("checked above");
                Lane::InFlight { slot, kind, buf, remote }
            }
            Step::Failed(e) => {
                let Op { buf, .. } = self.op.take().expect("checked above");
                Lane::Failed(e, buf)
            }
        };
        let oldest = if ring.is_full() { Some(ring.pop()) } else { None };
        ring.place(lane);
        Poll::Ready(oldest)
    }
}

impl<T> Unpin for WindowPush<'_, '_, T> {}

impl<T: Outcome> Future for WindowPush<'_, '_, T> {
    type Output = Option<(Result<T>, Buf)>;

    // Inlined into the caller's `.await`: out of line, the result (with the buffer) came back
    // through memory, stored and at once loaded back (see `BufTaskFuture`'s poll).
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().poll_push(cx)
    }
}

impl<T> Drop for WindowPush<'_, '_, T> {
    fn drop(&mut self) {
        // Never submitted (a submitted operation is in its lane in the same poll): free its
        // task and release its slot, then (the field, afterwards) drop its memory.
        if let Some(w) = self.ring.parked.take() {
            w.release(self.ring.inner);
        }
    }
}

impl<T> fmt::Debug for WindowPush<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowPush")
            .field("depth", &self.ring.depth())
            .field("len", &self.ring.len())
            .field("op", &self.op.as_ref().map(|op| op.kind.name()))
            .finish()
    }
}
