//! [`WindowPush`]: one operation on its way into a window's lane: its checks, its request,
//! and its submission on the lane's held record, with the wait for a free task or for room
//! (the record stays prepared meanwhile).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::ring::{Lane, Ring};
use crate::error::{Error, Result};
use crate::executor::completion::{poll_submit_record, Stage};
use crate::ext::{AllocTask, DocaTask, TaskOutput, TaskSlot};
use crate::lanes::Outcome;
use crate::mem::{Buf, RemoteSlice};
use crate::rdma::ops::Kind;
use crate::rdma::{Connection, Read, Received, Recv, Send as SendTask, SendImm, Write, WriteImm};

/// An operation not yet in its lane: what the caller gave.
pub(super) struct Op {
    pub(super) kind: Kind,
    pub(super) imm: u32,
    /// The local buffer, given back with the result.
    pub(super) buf: Buf,
    /// The remote slice of a write or read.
    pub(super) remote: Option<RemoteSlice>,
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
    /// DOCA has the task; the lane's record receives its completion.
    Submitted,
    /// The operation failed before anything was submitted.
    Failed(Error),
    /// It waits for a free task or for room (back-pressure), its record prepared or not
    /// (`Ring::prepared`).
    Wait,
}

/// Submits the operation of request `req` (kind `K`, `kind`) on the record of the free lane,
/// with a deferred doorbell (the window progresses when it waits).
#[inline(always)]
fn submit<K: DocaTask, R: AllocTask<K>, T: Outcome>(
    ring: &mut Ring<'_, T>,
    kind: Kind,
    name: &'static str,
    mut req: R,
    cx: &mut Context<'_>,
) -> Step {
    let i = ring.free_lane();
    debug_assert!(ring.prepared.is_none_or(|k| k == kind), "one push waits at a time");
    let mut stage = if ring.prepared.is_some() { Stage::Prepared } else { Stage::Start };
    let inner = ring.inner;
    let (group, ticket) = ring.group::<K>(kind);
    let polled = poll_submit_record::<K, R>(
        inner.ctx.core(),
        inner.ctx.record(),
        group,
        group.record(i),
        &mut stage,
        name,
        &mut req,
        ticket,
        cx,
        false,
    );
    ring.prepared = (stage == Stage::Prepared).then_some(kind);
    match polled {
        Poll::Ready(Ok(_)) => Step::Submitted,
        Poll::Ready(Err(e)) => Step::Failed(e),
        Poll::Pending => Step::Wait,
    }
}

impl Op {
    /// An attempt: the operation's checks, its request, then [`submit`]. Made again after a
    /// wait (the checks give the same answer; the request is a few words).
    #[inline(always)]
    fn attempt<T: Outcome>(&self, ring: &mut Ring<'_, T>, conn: Option<&Connection>, cx: &mut Context<'_>) -> Step {
        let name = self.kind.name();
        let conn = || conn.expect("an operation on a connection is pushed into a connection's window");
        let remote = || self.remote.as_ref().expect("a write or read has a remote slice");
        // The request (its checks), then its task prepared over this operation's memory, as
        // an operation future prepares it over the buffers it owns.
        macro_rules! go {
            ($req:expr, $k:ty, |$r:ident, $slot:ident| $prepare:expr) => {
                match $req {
                    Ok($r) => submit::<$k, _, T>(ring, self.kind, name, |$slot: &TaskSlot| $prepare, cx),
                    Err(e) => Step::Failed(e),
                }
            };
        }
        let (inner, buf) = (ring.inner, &self.buf);
        match self.kind {
            Kind::Write => go!(conn().write_req(name, buf, remote(), 0), Write, |r, slot| r.write(slot, buf, remote())),
            Kind::WriteImm => {
                go!(conn().write_req(name, buf, remote(), self.imm), WriteImm, |r, slot| r.write_imm(
                    slot,
                    buf,
                    remote()
                ))
            }
            Kind::Read => go!(conn().read_req(name, remote(), buf), Read, |r, slot| r.read(slot, remote(), buf)),
            Kind::Send => go!(conn().send_req(name, 0), SendTask, |r, slot| r.send(slot, buf)),
            Kind::SendImm => go!(conn().send_req(name, self.imm), SendImm, |r, slot| r.send_imm(slot, buf)),
            Kind::Recv => go!(inner.recv_req(name), Recv, |r, slot| r.recv(slot, buf)),
            Kind::FetchAdd | Kind::CmpSwp => unreachable!("a window's methods push no atomics"),
        }
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
    ring: &'w mut Ring<'a, T>,
    /// The connection of a connection's window (none for receives).
    conn: Option<&'a Connection>,
    /// The operation, until it is in its lane (while it waits for a free task or for room,
    /// its record stays prepared).
    op: Option<Op>,
    _out: PhantomData<fn() -> T>,
}

impl<'w, 'a, T> WindowPush<'w, 'a, T> {
    #[inline(always)]
    pub(super) fn new(ring: &'w mut Ring<'a, T>, conn: Option<&'a Connection>, op: Op) -> Self {
        WindowPush { ring, conn, op: Some(op), _out: PhantomData }
    }
}

impl<T: Outcome> WindowPush<'_, '_, T> {
    /// The poll of every push, whatever its output type.
    #[inline(always)]
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Result<T>, Buf)>> {
        let ring = &mut *self.ring;
        // Room first: a full window's oldest result moves out of its lane (into the stash,
        // still the window's: a push dropped while it waits takes nothing out of the window)
        // so that this operation can use the lane's record.
        if ring.lanes_full() {
            if ring.poll_oldest(cx).is_pending() {
                return Poll::Pending;
            }
            ring.stash_oldest();
        }
        let op = self.op.as_ref().expect("WindowPush polled after completion");
        let lane = match op.attempt(ring, self.conn, cx) {
            Step::Wait => return Poll::Pending,
            Step::Submitted => {
                let Op { kind, buf, remote, .. } = self.op.take().expect("checked above");
                Lane::InFlight { kind, buf, remote }
            }
            Step::Failed(e) => {
                let Op { buf, .. } = self.op.take().expect("checked above");
                Lane::Failed(e, buf)
            }
        };
        ring.place(lane);
        Poll::Ready(ring.take_stash())
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
        // Never submitted (a submitted operation is in its lane in the same poll): its record
        // gives back the descriptors of its memory, then (the field, afterwards) the memory
        // is dropped.
        self.ring.unprepare();
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
