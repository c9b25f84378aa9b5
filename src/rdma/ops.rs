//! The RDMA operations as named futures: one request type per operation family (what the
//! operation's task is made of) and one future type per family, built in place.
//!
//! Why named types rather than `async fn`s: an `async fn` operation is a state machine that
//! moves the next layer's future into its own state, and its type cannot be written down.
//! Here an operation is one [`HeldOp`] (a task held by its connection, or for a receive by
//! its context; see `completion::held_op`) whose preparation is a small request struct
//! ([`HeldRequest`]) instead of a closure, wrapped in an enum that also holds a check that
//! failed before anything was submitted. Creating the future builds it where the caller
//! puts it (everything on the way is inlined), polling it polls the task future directly,
//! and users can name the type (`Pipeline<WriteFuture<'a>>` in a struct field).
//!
//! A request is the operation's target (context, connection) and operands only: its
//! descriptors are made from the buffers the future owns when the task is prepared
//! ([`HeldRequest::prepare`]), not carried in the future (64 bytes fewer to build and copy
//! per write). Preparing takes them ([`Descs`], handed to the held record), then points the
//! held task at them with the task type's setters (unless it still points at them: the same
//! bytes as its previous operation, [`Descs::changed`]) and sets its operands, or else
//! re-initialises a task kept for reuse (every field) or allocates one; a failure gives a
//! kept task back untouched. A [`Window`](super::Window) runs the same requests on its
//! lanes' held records, over the descriptors of each push's memory.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::{CmpSwp, FetchAdd, RdmaInner, Read, Received, Recv, Write, WriteImm};
use super::{Send as SendTask, SendImm};
use crate::error::{Error, Result};
use crate::executor::completion::{HeldOp, HeldRequest};
use crate::ext::{DocaTask, TaskOutput, TaskSlot};
use crate::mem::descriptors::{Desc, Descs};
use crate::mem::{Buf, RemoteSlice};
use crate::sys;

/// What preparing a task of kind `K` gives: the task, or DOCA's error.
pub(super) type Alloc<K> = std::result::Result<*mut <K as DocaTask>::Task, sys::doca_error_t>;

/// Which operation a window's push or a lane submits (the atomics only through lanes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Write,
    WriteImm,
    Read,
    Send,
    SendImm,
    Recv,
    FetchAdd,
    CmpSwp,
}

impl Kind {
    /// The operation's name, in its errors.
    pub(super) const fn name(self) -> &'static str {
        match self {
            Kind::Write => "rdma.write",
            Kind::WriteImm => "rdma.write_imm",
            Kind::Read => "rdma.read",
            Kind::Send => "rdma.send",
            Kind::SendImm => "rdma.send_imm",
            Kind::Recv => "rdma.recv",
            Kind::FetchAdd => "rdma.fetch_add",
            Kind::CmpSwp => "rdma.compare_swap",
        }
    }

    /// Whether the kind's task type is posted ahead of what completes it
    /// ([`DocaTask::POSTED_AHEAD`]: a receive), for a window's wait.
    pub(super) const fn posted_ahead(self) -> bool {
        match self {
            Kind::Write => Write::POSTED_AHEAD,
            Kind::WriteImm => WriteImm::POSTED_AHEAD,
            Kind::Read => Read::POSTED_AHEAD,
            Kind::Send => SendTask::POSTED_AHEAD,
            Kind::SendImm => SendImm::POSTED_AHEAD,
            Kind::Recv => Recv::POSTED_AHEAD,
            Kind::FetchAdd => FetchAdd::POSTED_AHEAD,
            Kind::CmpSwp => CmpSwp::POSTED_AHEAD,
        }
    }
}

/// What every request holds: the context (its kept tasks and its inventory), its DOCA
/// object and the connection (null for a receive, which is posted on the context).
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    pub(super) inner: &'a RdmaInner,
    pub(super) rdma: *mut sys::doca_rdma,
    pub(super) conn: *mut sys::doca_rdma_connection,
}

impl<'a> Target<'a> {
    /// Where the operation's descriptors come from: its memories' caches, else the
    /// context's inventory (taken before the task, so that a kept task, once taken, is used).
    #[inline(always)]
    pub(super) fn descs<'s>(&'s self, slot: &'s TaskSlot) -> Descs<'s> {
        Descs::new(&self.inner.inv, slot.descs())
    }
}

/// `send` and `send_imm` (`imm` only for the latter).
pub(super) struct SendReq<'a> {
    pub(super) t: Target<'a>,
    pub(super) imm: u32,
}

impl SendReq<'_> {
    /// Prepares the task of a `send` of `src`.
    #[inline(always)]
    pub(super) fn send(&self, slot: &TaskSlot, src: &Buf) -> Alloc<SendTask> {
        let Self { t, .. } = *self;
        let set = t.descs(slot);
        let s = set.src(0, Desc::local(src))?;
        // SAFETY: every field of a send is set (source, connection: a held task's since its
        // allocation); live context and connection; `s` describes memory the operation owns.
        unsafe {
            // A held task (the connection's own) is pointed at the buffers unless it still
            // points at them; a kept one gets its connection too.
            let bufs = |k| sys::doca_rdma_task_send_set_src_buf(k, s);
            let operands = |_| {};
            t.inner.ctx.reuse_held_or_alloc::<SendTask>(
                slot,
                set.changed(),
                bufs,
                operands,
                |k| sys::doca_rdma_task_send_set_rdma_connection(k, t.conn),
                |task| sys::doca_rdma_task_send_allocate_init(t.rdma, t.conn, s, slot.user_data(), task),
            )
        }
    }
}

impl SendReq<'_> {
    /// Prepares the task of a `send_imm` of `src`.
    #[inline(always)]
    pub(super) fn send_imm(&self, slot: &TaskSlot, src: &Buf) -> Alloc<SendImm> {
        let Self { t, imm } = *self;
        let set = t.descs(slot);
        let s = set.src(0, Desc::local(src))?;
        // SAFETY: as in `send`, the immediate too.
        unsafe {
            // A held task (the connection's own) is pointed at the buffers unless it still
            // points at them; a kept one gets its connection too.
            let bufs = |k| sys::doca_rdma_task_send_imm_set_src_buf(k, s);
            let operands = |k| sys::doca_rdma_task_send_imm_set_immediate_data(k, imm.to_be());
            t.inner.ctx.reuse_held_or_alloc::<SendImm>(
                slot,
                set.changed(),
                bufs,
                operands,
                |k| sys::doca_rdma_task_send_imm_set_rdma_connection(k, t.conn),
                |task| {
                    sys::doca_rdma_task_send_imm_allocate_init(t.rdma, t.conn, s, imm.to_be(), slot.user_data(), task)
                },
            )
        }
    }
}

/// `write` and `write_imm` (`imm` only for the latter).
pub(super) struct WriteReq<'a> {
    pub(super) t: Target<'a>,
    pub(super) imm: u32,
}

impl WriteReq<'_> {
    /// Prepares the task of a `write` of `src` into `dst`.
    #[inline(always)]
    pub(super) fn write(&self, slot: &TaskSlot, src: &Buf, dst: &RemoteSlice) -> Alloc<Write> {
        let Self { t, .. } = *self;
        let set = t.descs(slot);
        let (sb, db) = (set.src(0, Desc::local(src))?, set.dst(1, Desc::remote(dst))?);
        // SAFETY: every field of a write is set (source, destination, connection: a held task's
        // since its allocation); live context and connection; both buffers describe memory the
        // operation owns (the source Buf, the remote slice's import).
        unsafe {
            // A held task (the connection's own) is pointed at the buffers unless it still
            // points at them; a kept one gets its connection too.
            let bufs = |k| {
                sys::doca_rdma_task_write_set_src_buf(k, sb);
                sys::doca_rdma_task_write_set_dst_buf(k, db);
            };
            let operands = |_| {};
            t.inner.ctx.reuse_held_or_alloc::<Write>(
                slot,
                set.changed(),
                bufs,
                operands,
                |k| sys::doca_rdma_task_write_set_rdma_connection(k, t.conn),
                |task| sys::doca_rdma_task_write_allocate_init(t.rdma, t.conn, sb, db, slot.user_data(), task),
            )
        }
    }
}

impl WriteReq<'_> {
    /// Prepares the task of a `write_imm` of `src` into `dst`.
    #[inline(always)]
    pub(super) fn write_imm(&self, slot: &TaskSlot, src: &Buf, dst: &RemoteSlice) -> Alloc<WriteImm> {
        let Self { t, imm } = *self;
        let set = t.descs(slot);
        let (sb, db) = (set.src(0, Desc::local(src))?, set.dst(1, Desc::remote(dst))?);
        // SAFETY: as in `write`, the immediate too.
        unsafe {
            // A held task (the connection's own) is pointed at the buffers unless it still
            // points at them; a kept one gets its connection too.
            let bufs = |k| {
                sys::doca_rdma_task_write_imm_set_src_buf(k, sb);
                sys::doca_rdma_task_write_imm_set_dst_buf(k, db);
            };
            let operands = |k| sys::doca_rdma_task_write_imm_set_immediate_data(k, imm.to_be());
            t.inner.ctx.reuse_held_or_alloc::<WriteImm>(
                slot,
                set.changed(),
                bufs,
                operands,
                |k| sys::doca_rdma_task_write_imm_set_rdma_connection(k, t.conn),
                |task| {
                    sys::doca_rdma_task_write_imm_allocate_init(
                        t.rdma,
                        t.conn,
                        sb,
                        db,
                        imm.to_be(),
                        slot.user_data(),
                        task,
                    )
                },
            )
        }
    }
}

/// `read`: `src` is the remote memory (exactly the bytes read), `dst` the local buffer.
///
/// The remote source carries those bytes as its data, as NVIDIA's read sample makes it
/// (`doca_buf_inventory_buf_get_by_data` over the peer's memory): DOCA's header calls it
/// the buffer "holding the data that should be read", and the read moves exactly that data
/// (an empty source reads nothing), on hardware and in the soft provider alike.
pub(super) struct ReadReq<'a> {
    pub(super) t: Target<'a>,
}

impl ReadReq<'_> {
    /// Prepares the task of a `read` of `src` into `dst`: the remote source's descriptor
    /// covers exactly the bytes read (see above).
    #[inline(always)]
    pub(super) fn read(&self, slot: &TaskSlot, src: &RemoteSlice, dst: &Buf) -> Alloc<Read> {
        let Self { t } = *self;
        let set = t.descs(slot);
        let (sb, db) = (set.src(0, Desc::remote(src).prefix(dst.len()))?, set.dst(1, Desc::local(dst))?);
        // SAFETY: every field of a read is set (source, destination, connection: a held task's
        // since its allocation); live context and connection; both buffers describe memory the
        // operation owns.
        unsafe {
            // A held task (the connection's own) is pointed at the buffers unless it still
            // points at them; a kept one gets its connection too.
            let bufs = |k| {
                sys::doca_rdma_task_read_set_src_buf(k, sb);
                sys::doca_rdma_task_read_set_dst_buf(k, db);
            };
            let operands = |_| {};
            t.inner.ctx.reuse_held_or_alloc::<Read>(
                slot,
                set.changed(),
                bufs,
                operands,
                |k| sys::doca_rdma_task_read_set_rdma_connection(k, t.conn),
                |task| sys::doca_rdma_task_read_allocate_init(t.rdma, t.conn, sb, db, slot.user_data(), task),
            )
        }
    }
}

/// `compare_swap` (`a` compare, `b` swap) and `fetch_add` (`a` the addend): `dst` the
/// remote target (its 8 bytes), `result` the local 8 bytes receiving the old value.
///
/// The target carries its 8 bytes as data: DOCA's header says an atomic considers "the
/// first 8 bytes of data in the head buffer" of its destination. An empty one (as a write's
/// destination is) has no such bytes; the soft provider only looks at its address.
pub(super) struct AtomicReq<'a> {
    pub(super) t: Target<'a>,
    pub(super) a: u64,
    pub(super) b: u64,
}

impl AtomicReq<'_> {
    /// Prepares the task of a `compare_swap` on `dst`'s first 8 bytes (its descriptor covers
    /// them, see above), the old value into `result`.
    #[inline(always)]
    pub(super) fn compare_swap(&self, slot: &TaskSlot, dst: &RemoteSlice, result: &Buf) -> Alloc<CmpSwp> {
        let Self { t, a: cmp, b: swap } = *self;
        let set = t.descs(slot);
        let (db, rb) = (set.src(0, Desc::remote(dst).prefix(8))?, set.dst(1, Desc::local(result))?);
        // SAFETY: every field of a compare-swap is set (target, result, both operands, connection:
        // a held task's since its allocation); live context and connection; both buffers
        // describe memory the operation owns.
        unsafe {
            // A held task (the connection's own) is pointed at the buffers unless it still
            // points at them; a kept one gets its connection too.
            let bufs = |k| {
                sys::doca_rdma_task_atomic_cmp_swp_set_dst_buf(k, db);
                sys::doca_rdma_task_atomic_cmp_swp_set_result_buf(k, rb);
            };
            let operands = |k| {
                sys::doca_rdma_task_atomic_cmp_swp_set_cmp_data(k, cmp);
                sys::doca_rdma_task_atomic_cmp_swp_set_swap_data(k, swap);
            };
            t.inner.ctx.reuse_held_or_alloc::<CmpSwp>(
                slot,
                set.changed(),
                bufs,
                operands,
                |k| sys::doca_rdma_task_atomic_cmp_swp_set_rdma_connection(k, t.conn),
                |task| {
                    sys::doca_rdma_task_atomic_cmp_swp_allocate_init(
                        t.rdma,
                        t.conn,
                        db,
                        rb,
                        cmp,
                        swap,
                        slot.user_data(),
                        task,
                    )
                },
            )
        }
    }
}

impl AtomicReq<'_> {
    /// Prepares the task of a `fetch_add` on `dst`'s first 8 bytes, as a compare-swap.
    #[inline(always)]
    pub(super) fn fetch_add(&self, slot: &TaskSlot, dst: &RemoteSlice, result: &Buf) -> Alloc<FetchAdd> {
        let Self { t, a: add, .. } = *self;
        let set = t.descs(slot);
        let (db, rb) = (set.src(0, Desc::remote(dst).prefix(8))?, set.dst(1, Desc::local(result))?);
        // SAFETY: every field of a fetch-add is set (target, result, addend, connection: a held
        // task's since its allocation); live context and connection; both buffers describe
        // memory the operation owns.
        unsafe {
            // A held task (the connection's own) is pointed at the buffers unless it still
            // points at them; a kept one gets its connection too.
            let bufs = |k| {
                sys::doca_rdma_task_atomic_fetch_add_set_dst_buf(k, db);
                sys::doca_rdma_task_atomic_fetch_add_set_result_buf(k, rb);
            };
            let operands = |k| sys::doca_rdma_task_atomic_fetch_add_set_add_data(k, add);
            t.inner.ctx.reuse_held_or_alloc::<FetchAdd>(
                slot,
                set.changed(),
                bufs,
                operands,
                |k| sys::doca_rdma_task_atomic_fetch_add_set_rdma_connection(k, t.conn),
                |task| {
                    sys::doca_rdma_task_atomic_fetch_add_allocate_init(
                        t.rdma,
                        t.conn,
                        db,
                        rb,
                        add,
                        slot.user_data(),
                        task,
                    )
                },
            )
        }
    }
}

/// `recv`: posted on the context (`conn` is null).
pub(super) struct RecvReq<'a> {
    pub(super) t: Target<'a>,
}

impl RecvReq<'_> {
    /// Prepares the task of a `recv` into `dst`.
    #[inline(always)]
    pub(super) fn recv(&self, slot: &TaskSlot, dst: &Buf) -> Alloc<Recv> {
        let Self { t } = *self;
        let set = t.descs(slot);
        let d = set.dst(0, Desc::local(dst))?;
        // SAFETY: a receive's one field is its destination; live context; `d` describes
        // memory the operation owns until the task is done.
        unsafe {
            // A held task (the context's own) is pointed at the buffer unless it still points
            // at it; a kept one always.
            let bufs = |k| sys::doca_rdma_task_receive_set_dst_buf(k, d);
            t.inner.ctx.reuse_held_or_alloc::<Recv>(
                slot,
                set.changed(),
                bufs,
                |_| {},
                |_| {},
                |task| sys::doca_rdma_task_receive_allocate_init(t.rdma, d, slot.user_data(), task),
            )
        }
    }
}

// The requests of operation futures: their descriptors are made from the buffers the future
// owns, at each preparation, rather than carried in the future (64 bytes fewer per future,
// built and copied once less per operation). A window calls the same methods with its push's
// buffers. Each line: the request, the task kind, the future's buffers, and the method that
// prepares the task from them.
macro_rules! held_requests {
    ($($req:ident: $kind:ty, $bufs:ty, |$r:ident, $slot:ident, $pat:pat_param| $prepare:expr;)*) => {$(
        impl HeldRequest<$kind, $bufs> for $req<'_> {
            #[inline(always)]
            fn prepare(&mut self, $slot: &TaskSlot, $pat: &$bufs) -> Alloc<$kind> {
                let $r = &*self;
                $prepare
            }
        }
    )*};
}

held_requests! {
    SendReq: SendTask, Buf, |r, slot, src| r.send(slot, src);
    SendReq: SendImm, Buf, |r, slot, src| r.send_imm(slot, src);
    WriteReq: Write, (Buf, RemoteSlice), |r, slot, (src, dst)| r.write(slot, src, dst);
    WriteReq: WriteImm, (Buf, RemoteSlice), |r, slot, (src, dst)| r.write_imm(slot, src, dst);
    ReadReq: Read, (Buf, RemoteSlice), |r, slot, (dst, src)| r.read(slot, src, dst);
    AtomicReq: CmpSwp, (Buf, RemoteSlice), |r, slot, (result, dst)| r.compare_swap(slot, dst, result);
    AtomicReq: FetchAdd, (Buf, RemoteSlice), |r, slot, (result, dst)| r.fetch_add(slot, dst, result);
    RecvReq: Recv, Buf, |r, slot, dst| r.recv(slot, dst);
}

/// One operation on a connection, of kind `K1` or `K2` (`write` or `write_imm`, ...), with
/// request `R` and the caller's buffers `B`, on a held task of the connection (see
/// `completion::held_op`): what the public futures of the connection's operations hold.
pub(super) type ConnOps<'a, K1, K2, R, B> = Op<HeldOp<'a, K1, R, B>, HeldOp<'a, K2, R, B>, B>;

/// One RDMA operation of one of two futures (`F1` or `F2`: a `write` or a `write_imm`, ...;
/// a family of one kind uses `F2 = F1` and never builds `Second`), each resolving to the
/// result and the buffers `B`, or a check that failed before anything was submitted.
pub(super) enum Op<F1, F2, B> {
    /// Resolves to the error, with the buffers, at the first poll; nothing was submitted.
    Failed(Option<(Error, B)>),
    First(F1),
    Second(F2),
}

impl<F1, F2, B> Op<F1, F2, B> {
    /// The operation failing at its first poll with `e`, giving back `keep`.
    pub(super) fn failed(e: Error, keep: B) -> Self {
        Op::Failed(Some((e, keep)))
    }
}

impl<F1, F2, B> Op<F1, F2, B>
where
    F1: Future<Output = (Result<TaskOutput>, B)> + Unpin,
    F2: Future<Output = (Result<TaskOutput>, B)> + Unpin,
{
    #[inline(always)]
    fn poll_op(&mut self, cx: &mut Context<'_>) -> Poll<(Result<TaskOutput>, B)> {
        match self {
            Op::Failed(f) => {
                let (e, keep) = f.take().expect("RDMA operation future polled after completion");
                Poll::Ready((Err(e), keep))
            }
            Op::First(f) => Pin::new(f).poll(cx),
            Op::Second(f) => Pin::new(f).poll(cx),
        }
    }
}

impl<F1: fmt::Debug, F2: fmt::Debug, B> fmt::Debug for Op<F1, F2, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Failed(Some((e, _))) => f.debug_tuple("Failed").field(e).finish(),
            Op::Failed(None) => f.write_str("Finished"),
            Op::First(t) => t.fmt(f),
            Op::Second(t) => t.fmt(f),
        }
    }
}

/// Defines a public operation future around an [`Op`]: `Unpin` (every part is), `#[must_use]`,
/// `Debug`; its output is `$map` applied to the task's result and the kept buffers; `poll`
/// names the inline attribute of its `poll` (see there).
macro_rules! op_future {
    (
        $(#[$doc:meta])*
        poll #[$inline:meta]
        $name:ident, $f1:ty, $f2:ty, $keep:ty => $out:ty, $map:expr
    ) => {
        $(#[$doc])*
        ///
        /// The future is lazy: nothing is allocated or submitted before its first poll. A
        /// check that fails before submission (see the method's errors) resolves at the first
        /// poll, with the buffer given back and nothing submitted. Dropping the future before
        /// it is polled drops the buffer; dropping it while the task is in flight does not
        /// cancel the task (DOCA has no per-task cancel): the result is discarded, and the
        /// memory the provider may touch (the buffer, its registration, the remote slice and
        /// the `doca_buf` descriptors) stays alive until DOCA is done with it.
        ///
        /// A named, `Unpin` type: it can be stored in a struct (`Pipeline<WriteFuture<'a>>`)
        /// and polled with `Pin::new(&mut fut)`. It borrows the connection (or context) it
        /// was created from.
        #[must_use = "a DOCA operation does nothing unless awaited; once submitted, dropping it discards the result but cannot cancel the task"]
        pub struct $name<'a>(pub(super) Op<$f1, $f2, $keep>);

        impl Future for $name<'_> {
            type Output = ($out, Buf);

            // Inlined into the caller's `.await` (always, but for the atomics), as the task
            // future inside it is: out of line, its result (the status and the buffer) comes
            // back through memory. Measured (perf, docs/cost.md, seventeenth session): read
            // −13..21 ns and write −11 ns through futures; the atomics took 23 more
            // instructions and 4–7 ns more inlined, so they are left to the compiler. Send and
            // receive follow write (not measured on their own).
            #[$inline]
            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                let (r, keep) = ready!(self.get_mut().0.poll_op(cx));
                let map: fn(Result<TaskOutput>, $keep) -> Self::Output = $map;
                Poll::Ready(map(r, keep))
            }
        }

        impl fmt::Debug for $name<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($name)).field(&self.0).finish()
            }
        }
    };
}

op_future!(
    /// The future of [`Connection::send`](super::Connection::send) and
    /// [`Connection::send_imm`](super::Connection::send_imm): resolves to `(Result<()>, src)`.
    poll #[inline(always)]
    SendFuture, HeldOp<'a, SendTask, SendReq<'a>, Buf>, HeldOp<'a, SendImm, SendReq<'a>, Buf>, Buf
        => Result<()>, |r, src| (r.map(drop), src)
);

op_future!(
    /// The future of [`Connection::write`](super::Connection::write) and
    /// [`Connection::write_imm`](super::Connection::write_imm): resolves to
    /// `(Result<()>, src)`.
    poll #[inline(always)]
    WriteFuture,
    HeldOp<'a, Write, WriteReq<'a>, (Buf, RemoteSlice)>,
    HeldOp<'a, WriteImm, WriteReq<'a>, (Buf, RemoteSlice)>,
    (Buf, RemoteSlice) => Result<()>, |r, (src, _dst)| (r.map(drop), src)
);

op_future!(
    /// The future of [`Connection::read`](super::Connection::read): resolves to
    /// `(Result<()>, dst)`.
    poll #[inline(always)]
    ReadFuture,
    HeldOp<'a, Read, ReadReq<'a>, (Buf, RemoteSlice)>,
    HeldOp<'a, Read, ReadReq<'a>, (Buf, RemoteSlice)>,
    (Buf, RemoteSlice) => Result<()>, |r, (dst, _src)| (r.map(drop), dst)
);

op_future!(
    /// The future of [`Connection::compare_swap`](super::Connection::compare_swap) and
    /// [`Connection::fetch_add`](super::Connection::fetch_add): resolves to
    /// `(Result<u64>, result)`, the value the target had.
    poll #[inline]
    AtomicFuture,
    HeldOp<'a, CmpSwp, AtomicReq<'a>, (Buf, RemoteSlice)>,
    HeldOp<'a, FetchAdd, AtomicReq<'a>, (Buf, RemoteSlice)>,
    (Buf, RemoteSlice) => Result<u64>,
    // The old value was placed at the start of the result buffer (native byte order).
    |r, (result, _dst)| (r.map(|_| result.read_u64(0)), result)
);

op_future!(
    /// The future of [`Rdma::recv`](super::Rdma::recv): resolves to
    /// `(Result<Received>, buf)`.
    poll #[inline(always)]
    RecvFuture, HeldOp<'a, Recv, RecvReq<'a>, Buf>, HeldOp<'a, Recv, RecvReq<'a>, Buf>, Buf
        => Result<Received>, |r, buf| (r.map(Received::from_output), buf)
);
