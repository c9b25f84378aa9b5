//! RDMA as futures: reliable connections and the eight DOCA RDMA operations.
//!
//! An [`Rdma`] is one DOCA RDMA context on the current executor. It is created with
//! [`Rdma::builder`], [exported](Rdma::export) into a blob plus a [`PendingConnection`], and
//! [connected](PendingConnection::connect) with the peer's blob (exchanged out of band) into
//! a [`Connection`]. Or connect by address: a server [listens](Rdma::listen) on a port and
//! [accepts](Listener::accept) (or [rejects](ConnectionRequest::reject)), a client
//! [connects](Rdma::connect) to `IP:port`; such connections know their
//! [peer](Connection::peer_addr), the server's [private data](Connection::private_data), and
//! when the peer [goes away](Connection::closed). Operations are futures:
//!
//! | on | operation | local buffer | remote | result |
//! | --- | --- | --- | --- | --- |
//! | [`Connection`] | [`send`](Connection::send), [`send_imm`](Connection::send_imm) | source | — | `()` |
//! | [`Rdma`] | [`recv`](Rdma::recv) | destination | — | [`Received`] |
//! | [`Connection`] | [`write`](Connection::write), [`write_imm`](Connection::write_imm) | source | destination | `()` |
//! | [`Connection`] | [`read`](Connection::read) | destination | source | `()` |
//! | [`Connection`] | [`compare_swap`](Connection::compare_swap), [`fetch_add`](Connection::fetch_add) | 8-byte result | 8-byte target | the old value |
//!
//! Receives are posted on the context, not on a connection (DOCA 3.x): any connection's next
//! message completes the oldest posted receive, and [`Received::conn`] says which connection
//! it came from.
//!
//! # Owned buffers
//! Every operation takes its local [`Buf`] by value and gives it back with the result, as
//! `(Result<T>, Buf)` (the tokio-uring / monoio pattern), whether the operation succeeded or
//! not, so the caller reuses its buffers. Remote targets are [`RemoteSlice`]s, cheap handles
//! taken by value (clone them to reuse). While DOCA may access the memory, the operation owns
//! it: dropping the future of an operation in flight does not cancel it (DOCA has no
//! per-task cancel) and does not free anything; the buffer, its registration and the
//! `doca_buf` descriptors stay alive until the completion (or the context's flush) arrives.
//! The `doca_buf` descriptors are lent by the memory they describe (each registration keeps
//! those of the slices it was used with, see [`crate::mem`]; the context's inventory serves
//! when none is free), held by the operation and given back as soon as DOCA completes the
//! task. So the cheap pattern is to reuse the same buffers and targets: the next operation
//! on the same bytes finds its descriptors ready.
//!
//! # Tasks
//! A [`Connection`] keeps the DOCA tasks its operation futures (and its operations on a
//! peer's sync event, [`Connection::remote_event`]) run on: one per operation in
//! flight at once, per kind, allocated at first use with the connection set and then only
//! pointed at each operation's buffers and submitted again (the connection's pool grows to
//! the largest number of operations of a kind it had in flight together). Idle ones are a
//! cache: they go back to DOCA when the context stops or restarts, when an allocation finds
//! the context's task pool spent, or with the connection. Receives are posted on the
//! context, which keeps the tasks of its receive futures the same way, and a [`Window`]
//! keeps one task per lane and kind. A kept task also keeps the descriptors of its last
//! operation's memory while it is idle, so that an operation on the same buffer and target
//! as the one before it (a loop of `.await`s, a window cycling over its slices) neither looks
//! them up nor points the task anew; dropping that memory meanwhile is fine (its
//! registration takes them back).
//!
//! # Pipelining and back-pressure
//! Any number of operations may be in flight (spawn them, or poll many futures at once).
//! Operation futures are lazy: the first poll submits. A [`Pipeline`] keeps many of them in
//! flight from one task, without a task per operation. A [`Window`]
//! ([`Connection::window`]) keeps many writes, reads and sends in flight on one connection
//! without even a future per operation, and rings their doorbells once per batch: the
//! path for message rate with any buffers. [`Lanes`] ([`Connection::lanes`],
//! [`Rdma::recv_lanes`]) do it on fixed memory, each lane keeping its own task and
//! submitting it again as it is: the path for message rate when the memory is known up
//! front, at about the cost of a C program's loop on DOCA (taken a batch at a time with
//! [`Lanes::batch`], one wait per batch of ready lanes).
//! Each operation returns a named, `Unpin` future ([`WriteFuture`], [`ReadFuture`],
//! [`SendFuture`], [`AtomicFuture`], [`RecvFuture`]), so a struct can hold one, or a
//! `Pipeline<WriteFuture<'a>>`, without boxing; it borrows its [`Connection`] (or [`Rdma`]).
//! Each operation kind has a task pool ([`RdmaBuilder::max_tasks`]) and the send queue a
//! depth ([`RdmaBuilder::send_queue_size`]); when either is full the next operation waits
//! for a completion instead of failing.
//!
//! # Errors and recovery
//! Failures are [`Error`]s naming the operation (`"rdma.write"`) and carrying DOCA's code.
//! The [`ErrorKind`] says what happened: [`InvalidArgument`](ErrorKind::InvalidArgument)
//! (out of range, misaligned atomic, message larger than the receive buffer, bad blob),
//! [`PermissionDenied`](ErrorKind::PermissionDenied) (the peer's memory or context does not
//! allow the access), [`ConnectionLost`](ErrorKind::ConnectionLost) (peer gone, stopped or
//! reset, or a connection from before a restart), [`Cancelled`](ErrorKind::Cancelled)
//! (flushed by a stop), [`BadState`](ErrorKind::BadState) (the context is in the error
//! state). Checks this crate can make itself (slice lengths, result buffers) fail before
//! anything is submitted and leave the context untouched.
//!
//! **A task that fails in DOCA moves the whole context to the error state** (DOCA's
//! semantics): other operations in flight fail, later ones fail with `BadState`, and the
//! peer sees its connection reset. To recover, either [`restart`](Rdma::restart) the context
//! (stop, flushing everything, and start) or drop it and build a new one; in both cases both
//! sides export and connect again with fresh blobs.
//!
//! # Threads
//! `Rdma`, `PendingConnection` and `Connection` are `!Send` (cheap `Rc` clones): a DOCA
//! context, its tasks and buffers belong to the executor that created them. Create one per
//! executor (`spawn_on`) and exchange the blobs, which are plain bytes.
//!
//! An executor destroys its contexts when it ends, even while handles to them live on
//! (returned out of `block_on`, or kept by a task of another runtime). Such handles are
//! inert: operations fail with [`BadState`](ErrorKind::BadState), waits for a request or a
//! handshake end with it, [`Connection::closed`] completes, what was in flight reads as
//! [`Cancelled`](ErrorKind::Cancelled), and dropping them is safe anywhere, also outside any
//! executor. See `docs/ARCHITECTURE.md`, "Contexts: start, stop, drop".
//!
//! ```
//! use async_doca::rdma::Rdma;
//! use async_doca::{Access, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     // Two endpoints; normally in two processes that exchange the blobs out of band.
//!     let a = Rdma::builder(&dev).build().await?;
//!     let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
//!     let (blob_a, pending_a) = a.export()?;
//!     let (blob_b, pending_b) = b.export()?;
//!     let to_b = pending_a.connect(&blob_b).await?;
//!     let _to_a = pending_b.connect(&blob_a).await?;
//!
//!     // b registers memory and hands its blob to a; a writes into it, one-sided.
//!     let target = dev.alloc(4096, Access::RDMA_ALL)?;
//!     let remote = dev.import(&target.export_rdma()?)?;
//!     let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
//!     let mut src = mem.slice(0..5);
//!     src.write(0, b"hello");
//!     let (res, src) = to_b.write(src, remote.slice(100..105)).await;
//!     res?;
//!     assert_eq!(target.slice(100..105).to_vec(), b"hello");
//!
//!     // Two-sided: b posts a receive, a sends with an immediate.
//!     let recv = async_doca::spawn_local({
//!         let b = b.clone();
//!         let buf = target.slice(0..64);
//!         async move { b.recv(buf).await }
//!     });
//!     let (res, _src) = to_b.send_imm(src, 7).await;
//!     res?;
//!     let (msg, buf) = recv.await?;
//!     let msg = msg?;
//!     assert_eq!((msg.len, msg.imm), (5, Some(7)));
//!     assert_eq!(buf.to_vec()[..5], *b"hello");
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

mod cm;
pub mod lanes;
pub use lanes::{Batch, BatchFuture, LaneFuture, LaneMut, LaneOp, Lanes, NextFuture};
mod ops;
pub use ops::{AtomicFuture, ReadFuture, RecvFuture, SendFuture, WriteFuture};
pub mod pipeline;
pub use cm::{ConnectionRequest, Listener};
pub use pipeline::{Pipeline, Push};
pub mod stream;
pub mod window;
pub use window::{RecvWindow, Window, WindowPush};
// Not under Miri: every test there runs RDMA over the provider (shared memory from
// `memfd_create`, doorbell sockets, a PE's epoll), which Miri does not model; gating the
// module keeps a new test there from stopping the Miri run (scripts/sanitize.sh miri).
#[cfg(all(test, not(miri)))]
mod tests;
pub use stream::{RdmaStream, RdmaStreamListener, StreamConfig};

use std::fmt;
use std::rc::Rc;

use crate::device::Device;
use crate::error::{check, Error, ErrorKind, Result};
use crate::executor::completion::{HeldOp, HeldPool, HeldRequest};
use crate::ext::DocaCtx;
use crate::ext::{completion_cb, success_cb, DocaTask, TaskOutput};
use crate::mem::descriptors::{Desc, Inventory};
use crate::mem::{Access, Buf, RemoteSlice};
use crate::sys;

/// Default queue depths (send and receive), as DOCA's.
pub const DEFAULT_QUEUE_SIZE: u32 = 256;
/// Default task-pool size of each operation kind.
pub const DEFAULT_MAX_TASKS: u32 = 256;

// ---- task kinds ----

macro_rules! task_kind {
    ($(#[$m:meta])* $name:ident, $task:ident, $as_task:ident) => {
        task_kind!($(#[$m])* $name, $task, $as_task, None);
    };
    ($(#[$m:meta])* $name:ident, $task:ident, $as_task:ident, $reuse:expr) => {
        $(#[$m])*
        struct $name;
        // SAFETY: `as_task` is the task type's own conversion; RDMA tasks are freed with
        // doca_task_free (the default).
        unsafe impl DocaTask for $name {
            type Task = sys::$task;
            const REUSE: Option<usize> = $reuse;
            unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
                // SAFETY: forwarded; the caller passes a live task of this type.
                unsafe { sys::$as_task(task) }
            }
            unsafe fn free(task: *mut Self::Task) {
                // SAFETY: forwarded (the caller's contract).
                unsafe { sys::doca_task_free(sys::$as_task(task)) }
            }
        }
    };
}

// The kinds below keep their completed tasks for reuse (distinct indices, see
// `DocaTask::REUSE`); every operation re-initialises all of a kept task's fields.
task_kind!(Send, doca_rdma_task_send, doca_rdma_task_send_as_task, Some(0));
task_kind!(SendImm, doca_rdma_task_send_imm, doca_rdma_task_send_imm_as_task, Some(1));
task_kind!(Read, doca_rdma_task_read, doca_rdma_task_read_as_task, Some(2));
task_kind!(Write, doca_rdma_task_write, doca_rdma_task_write_as_task, Some(3));
task_kind!(WriteImm, doca_rdma_task_write_imm, doca_rdma_task_write_imm_as_task, Some(4));
task_kind!(CmpSwp, doca_rdma_task_atomic_cmp_swp, doca_rdma_task_atomic_cmp_swp_as_task, Some(5));
task_kind!(FetchAdd, doca_rdma_task_atomic_fetch_add, doca_rdma_task_atomic_fetch_add_as_task, Some(6));

// After `task_kind!`, which it uses.
mod remote_event;
pub use remote_event::{RemoteEvent, RemoteEventOps};

/// The receive task: its results are copied out of the task when it completes, before it
/// is kept (a posted receive's future, or a receive window's lane, runs on a held task of
/// its context) or freed.
struct Recv;
// SAFETY: as in `task_kind!`.
unsafe impl DocaTask for Recv {
    type Task = sys::doca_rdma_task_receive;
    // After the remote events' kinds (7 to 9).
    const REUSE: Option<usize> = Some(10);
    // Posted ahead of the peer's send, which often answers what the posting task sends next.
    const POSTED_AHEAD: bool = true;
    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
        // SAFETY: forwarded; the caller passes a live receive task.
        unsafe { sys::doca_rdma_task_receive_as_task(task) }
    }
    unsafe fn free(task: *mut Self::Task) {
        // SAFETY: forwarded (the caller's contract).
        unsafe { sys::doca_task_free(sys::doca_rdma_task_receive_as_task(task)) }
    }
    unsafe fn on_complete(task: *mut Self::Task, status: sys::doca_error_t, out: &mut TaskOutput) {
        if status != sys::DOCA_SUCCESS {
            return;
        }
        // SAFETY: the live, completed receive task (the result getters are valid now).
        unsafe {
            out[0] = u64::from(sys::doca_rdma_task_receive_get_result_opcode(task));
            out[1] = u64::from(sys::doca_rdma_task_receive_get_result_len(task));
            out[2] = u64::from(sys::doca_rdma_task_receive_get_result_immediate_data(task));
            out[3] = sys::doca_rdma_task_receive_get_result_rdma_connection(task) as usize as u64;
        }
    }
}

// ---- the context ----

/// Configures and creates an [`Rdma`] context.
///
/// ```
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::{rdma::Rdma, Access, Device};
/// let dev = Device::open_default()?;
/// let rdma = Rdma::builder(&dev)
///     .permissions(Access::LOCAL_READ_WRITE | Access::RDMA_WRITE) // what peers may do to us
///     .send_queue_size(64)
///     .recv_queue_size(64)
///     .max_connections(4)
///     .max_tasks(64)
///     .build()
///     .await?;
/// let (blob, _pending) = rdma.export()?;
/// assert!(!blob.is_empty());
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build() is awaited"]
pub struct RdmaBuilder {
    dev: Device,
    permissions: Access,
    send_queue: u32,
    recv_queue: u32,
    max_connections: u16,
    max_tasks: u32,
    recv_tasks: Option<u32>,
    descriptors: Option<usize>,
}

impl RdmaBuilder {
    /// What peers may do through this context's connections (DOCA's default:
    /// [`Access::LOCAL_READ_WRITE`], so peers need [`Access::RDMA_READ`],
    /// [`Access::RDMA_WRITE`] or [`Access::RDMA_ATOMIC`] here *and* on the memory they
    /// target).
    pub fn permissions(mut self, access: Access) -> Self {
        self.permissions = access;
        self
    }

    /// Send-queue depth: send-side operations in flight at once (default 256).
    pub fn send_queue_size(mut self, n: u32) -> Self {
        self.send_queue = n;
        self
    }

    /// Receive-queue depth: receives posted at once (default 256).
    pub fn recv_queue_size(mut self, n: u32) -> Self {
        self.recv_queue = n;
        self
    }

    /// How many connections this context may export (default 1).
    pub fn max_connections(mut self, n: u16) -> Self {
        self.max_connections = n;
        self
    }

    /// The task pool of each operation kind (default 256). More operations wait for a free
    /// task (back-pressure), they do not fail.
    pub fn max_tasks(mut self, n: u32) -> Self {
        self.max_tasks = n;
        self
    }

    /// The receive task pool (default: the receive queue size).
    pub fn recv_tasks(mut self, n: u32) -> Self {
        self.recv_tasks = Some(n);
        self
    }

    /// How many `doca_buf` descriptors the context keeps for its operations (default: two
    /// per task of every pool, plus a margin). An operation needs one or two, and first
    /// borrows them from its memory's own cache (the descriptors of the slices it was
    /// used with, see [`crate::mem`]); the context's are for operations whose cache has
    /// none to lend (many operations on the same bytes at once). When none is free the
    /// operation waits like for a task.
    pub fn descriptors(mut self, n: usize) -> Self {
        self.descriptors = Some(n);
        self
    }

    /// Creates the context on the current executor and starts it.
    ///
    /// # Errors
    /// Outside an executor ([`ErrorKind::BadState`]), zero sizes
    /// ([`ErrorKind::InvalidArgument`]), or what DOCA refuses (with its code).
    pub async fn build(self) -> Result<Rdma> {
        let recv_tasks = self.recv_tasks.unwrap_or(self.recv_queue);
        if self.max_tasks == 0 || recv_tasks == 0 || self.max_connections == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, "rdma: task pools and max_connections must be >= 1"));
        }
        let descriptors =
            self.descriptors.unwrap_or_else(|| 2 * (7 * self.max_tasks as usize + recv_tasks as usize) + 64).max(2);
        let mut rdma = std::ptr::null_mut();
        // SAFETY: the device is open; valid out-pointer. Ownership passes to DocaCtx below.
        check(unsafe { sys::doca_rdma_create(self.dev.as_ptr(), &mut rdma) }, "rdma: doca_rdma_create")?;
        let keep_dev = self.dev.clone();
        // The addresses of cancelled connect attempts: the context's record parks them, its
        // destroy step frees what is left once DOCA can no longer use them.
        let abandoned = cm::Abandoned::default();
        let abandoned_after = abandoned.clone();
        // SAFETY: `rdma` is live, fresh, of this thread, destroyed only by the DocaCtx; its
        // ctx is IDLE and unconnected. The closure keeps the device open until then.
        let ctx = unsafe {
            DocaCtx::new("rdma", rdma, sys::doca_rdma_as_ctx(rdma), move |r| {
                let rc = sys::doca_rdma_destroy(r);
                if rc == sys::DOCA_SUCCESS {
                    // SAFETY: the context is destroyed: its connect attempts are over.
                    abandoned_after.free_after_destroy();
                }
                drop(keep_dev);
                rc
            })
        }?;
        let n = self.max_tasks;
        // SAFETY: `rdma` is live and IDLE.
        unsafe { cm::install(rdma) }?;
        // SAFETY: as above.
        unsafe { remote_event::configure(rdma, self.max_tasks) }?;
        let cm = cm::CmShared::register(ctx.user_data().as_u64(), abandoned, ctx.record().clone());
        // SAFETY: `rdma` is live and IDLE; each callback is the completion callback of the
        // matching kind, with the exact C signature.
        unsafe {
            check(sys::doca_rdma_set_permissions(rdma, self.permissions.bits()), "rdma: set permissions")?;
            check(sys::doca_rdma_set_send_queue_size(rdma, self.send_queue), "rdma: set send queue size")?;
            // DOCA 3.0 documents NOT_SUPPORTED here on the CPU data path (the library sizes the
            // receive queue itself); that is not a failure of the build.
            let r = sys::doca_rdma_set_recv_queue_size(rdma, self.recv_queue);
            if r != sys::DOCA_ERROR_NOT_SUPPORTED {
                check(r, "rdma: set receive queue size")?;
            }
            check(sys::doca_rdma_set_max_num_connections(rdma, self.max_connections), "rdma: set max connections")?;
            check(
                sys::doca_rdma_task_receive_set_conf(
                    rdma,
                    Some(success_cb::<Recv>),
                    Some(completion_cb::<Recv>),
                    recv_tasks,
                ),
                "rdma: configure receive tasks",
            )?;
            check(
                sys::doca_rdma_task_send_set_conf(rdma, Some(success_cb::<Send>), Some(completion_cb::<Send>), n),
                "rdma: configure send tasks",
            )?;
            check(
                sys::doca_rdma_task_send_imm_set_conf(
                    rdma,
                    Some(success_cb::<SendImm>),
                    Some(completion_cb::<SendImm>),
                    n,
                ),
                "rdma: configure send_imm tasks",
            )?;
            check(
                sys::doca_rdma_task_read_set_conf(rdma, Some(success_cb::<Read>), Some(completion_cb::<Read>), n),
                "rdma: configure read tasks",
            )?;
            check(
                sys::doca_rdma_task_write_set_conf(rdma, Some(success_cb::<Write>), Some(completion_cb::<Write>), n),
                "rdma: configure write tasks",
            )?;
            check(
                sys::doca_rdma_task_write_imm_set_conf(
                    rdma,
                    Some(success_cb::<WriteImm>),
                    Some(completion_cb::<WriteImm>),
                    n,
                ),
                "rdma: configure write_imm tasks",
            )?;
            check(
                sys::doca_rdma_task_atomic_cmp_swp_set_conf(
                    rdma,
                    Some(success_cb::<CmpSwp>),
                    Some(completion_cb::<CmpSwp>),
                    n,
                ),
                "rdma: configure compare_swap tasks",
            )?;
            check(
                sys::doca_rdma_task_atomic_fetch_add_set_conf(
                    rdma,
                    Some(success_cb::<FetchAdd>),
                    Some(completion_cb::<FetchAdd>),
                    n,
                ),
                "rdma: configure fetch_add tasks",
            )?;
        }
        let inv = Rc::new(Inventory::new(descriptors, "rdma")?);
        ctx.start().await?;
        let pool = HeldPool::new(ctx.record(), inv.clone());
        Ok(Rdma { inner: Rc::new(RdmaInner { pool, ctx, inv, dev: self.dev, cm }) })
    }
}

struct RdmaInner {
    /// The tasks the context's receive futures run on (see `completion::held_op`). First:
    /// its idle tasks go back before the context (declared after it) is stopped.
    pool: HeldPool,
    ctx: DocaCtx<sys::doca_rdma>,
    inv: Rc<Inventory>,
    dev: Device,
    /// Connection-management events (see `cm.rs`).
    cm: Rc<cm::CmShared>,
}

impl RdmaInner {
    /// The request of a receive (the context must be alive). One home for the future and
    /// the [`RecvWindow`].
    #[inline(always)]
    fn recv_req(&self, op: &'static str) -> Result<ops::RecvReq<'_>> {
        let rdma = self.ctx.as_ptr().map_err(|e| e.context_prefix(op))?;
        Ok(ops::RecvReq { t: ops::Target { inner: self, rdma, conn: std::ptr::null_mut() } })
    }
}

/// An RDMA context on the current executor (see the [module documentation](self)).
///
/// Cloning shares the context. Dropping the last handle (and every [`Connection`]) stops
/// it: operations still in flight are flushed and their memory released once DOCA is done.
#[derive(Clone)]
pub struct Rdma {
    inner: Rc<RdmaInner>,
}

impl Rdma {
    /// The context's record: whether DOCA's object still exists (see
    /// `ResultCell::wait_on`).
    pub(crate) fn ctx_record(&self) -> Rc<crate::executor::context::CtxRecord> {
        self.inner.ctx.record().clone()
    }

    /// A builder for a context on `dev`.
    pub fn builder(dev: &Device) -> RdmaBuilder {
        RdmaBuilder {
            dev: dev.clone(),
            permissions: Access::LOCAL_READ_WRITE,
            send_queue: DEFAULT_QUEUE_SIZE,
            recv_queue: DEFAULT_QUEUE_SIZE,
            max_connections: 1,
            max_tasks: DEFAULT_MAX_TASKS,
            recv_tasks: None,
            descriptors: None,
        }
    }

    /// The device of the context.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Exports a new connection: the blob to give the peer (out of band; it carries secrets)
    /// and the connection, to [connect](PendingConnection::connect) with the peer's blob.
    ///
    /// # Errors
    /// More exports than [`RdmaBuilder::max_connections`] in one start cycle
    /// ([`ErrorKind::ResourceExhausted`]); a context in the error state.
    pub fn export(&self) -> Result<(Vec<u8>, PendingConnection)> {
        let rdma = self.inner.ctx.as_ptr()?;
        let mut p = std::ptr::null();
        let mut n = 0usize;
        let mut conn = std::ptr::null_mut();
        // SAFETY: live, started context of this thread; valid out-pointers.
        check(unsafe { sys::doca_rdma_export(rdma, &mut p, &mut n, &mut conn) }, "rdma.export")?;
        if p.is_null() || conn.is_null() {
            return Err(Error::new(ErrorKind::Other, "rdma.export: DOCA returned no blob"));
        }
        // SAFETY: DOCA returned `n` readable bytes owned by the connection, which lives as
        // long as the context; copied at once.
        let blob = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }.to_vec();
        Ok((blob, PendingConnection { rdma: self.inner.clone(), conn }))
    }

    /// Posts a receive into `buf` and waits for a message from any connection of this
    /// context (a send, a send with immediate, or a write with immediate). The message is
    /// placed at the start of `buf` (a write with immediate places nothing: its data went
    /// to the memory it targeted).
    ///
    /// Posted receives are consumed in posting order. A message larger than `buf` fails
    /// with [`ErrorKind::InvalidArgument`] and puts the context in the error state.
    /// An empty `buf` takes only empty messages.
    #[inline(always)]
    pub fn recv(&self, buf: Buf) -> RecvFuture<'_> {
        const OP: &str = "rdma.recv";
        let inner = &*self.inner;
        let req = match inner.recv_req(OP) {
            Ok(r) => r,
            Err(e) => return RecvFuture(ops::Op::failed(e, buf)),
        };
        let op = HeldOp::new(inner.ctx.core(), &inner.pool, OP, req, None, buf.len(), buf);
        RecvFuture(ops::Op::First(op))
    }

    /// A [`RecvWindow`] of up to `depth` receives posted on this context, without a future
    /// per receive: the receiving side of message rate (see [`window`]).
    ///
    /// # Panics
    /// If `depth` is 0.
    pub fn recv_window(&self, depth: usize) -> RecvWindow<'_> {
        RecvWindow::new_recv(self, depth)
    }

    /// `depth` receives kept posted into fixed memory: `local` cut into `depth` equal lanes,
    /// each with its own receive task, posted again as it is. See [`Lanes`].
    ///
    /// # Errors
    /// As in [`Lanes`]' module documentation (the buffer does not make `depth` equal lanes,
    /// a destroyed context, no descriptor left).
    pub fn recv_lanes(&self, local: Buf, depth: usize) -> Result<Lanes<'_, Received>> {
        lanes::on_rdma(self, local, depth)
    }

    /// Stops the context (every operation in flight fails with [`ErrorKind::Cancelled`] or
    /// the error of the state it was in) and starts it again: the way out of the error
    /// state. Existing [`Connection`]s are closed for good (their operations fail with
    /// [`ErrorKind::ConnectionLost`]); [export](Rdma::export) and connect again, on both
    /// sides.
    pub async fn restart(&self) -> Result<()> {
        self.inner.ctx.stop().await.map_err(|e| e.context_prefix("rdma.restart"))?;
        self.inner.ctx.start().await.map_err(|e| e.context_prefix("rdma.restart"))
    }
}

impl fmt::Debug for Rdma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rdma").field("ctx", &self.inner.ctx).finish()
    }
}

/// A connection exported by [`Rdma::export`], waiting for the peer's blob.
pub struct PendingConnection {
    rdma: Rc<RdmaInner>,
    conn: *mut sys::doca_rdma_connection,
}

impl PendingConnection {
    /// Connects with the blob the peer's [`Rdma::export`] produced. Both sides connect, each
    /// with the other's blob.
    ///
    /// # Errors
    /// A corrupted or foreign blob ([`ErrorKind::InvalidArgument`]), another version
    /// ([`ErrorKind::NotSupported`]), a peer that is gone ([`ErrorKind::NotFound`]), a blob
    /// some other connection uses already ([`ErrorKind::BadState`]).
    pub async fn connect(self, peer_blob: &[u8]) -> Result<Connection> {
        let rdma = self.rdma.ctx.as_ptr()?;
        if peer_blob.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArgument, "rdma.connect: empty blob"));
        }
        check(
            // SAFETY: live context and one of its connections; the blob is readable for its
            // length and only parsed.
            unsafe { sys::doca_rdma_connect(rdma, peer_blob.as_ptr().cast(), peer_blob.len(), self.conn) },
            "rdma.connect",
        )?;
        crate::trace::event!(info, { conn = self.conn as usize }, "rdma: connected (blob exchange)");
        Ok(Connection { inner: Rc::new(ConnInner::new(self.rdma, self.conn, None)) })
    }
}

impl fmt::Debug for PendingConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingConnection").field("id", &ConnId(self.conn as usize)).finish()
    }
}

/// Identifies a connection of a context: compare [`Received::conn`] with
/// [`Connection::id`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ConnId(usize);

/// What kind of message completed a receive (`enum doca_rdma_opcode`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Opcode {
    /// A send.
    Send,
    /// A send with immediate data.
    SendImm,
    /// A write with immediate data (the data went to the targeted memory).
    WriteImm,
    /// A value this crate does not know.
    Unknown(u32),
}

/// A completed receive.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Received {
    /// Bytes received (for a write with immediate: bytes written to the targeted memory).
    pub len: usize,
    /// What the peer did.
    pub opcode: Opcode,
    /// The immediate data, for [`Opcode::SendImm`] and [`Opcode::WriteImm`] (converted from
    /// DOCA's big-endian `doca_be32_t`).
    pub imm: Option<u32>,
    /// The connection it came on.
    pub conn: ConnId,
}

impl Received {
    fn from_output(out: TaskOutput) -> Received {
        let opcode = match out[0] as u32 {
            sys::DOCA_RDMA_OPCODE_RECV_SEND => Opcode::Send,
            sys::DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM => Opcode::SendImm,
            sys::DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM => Opcode::WriteImm,
            other => Opcode::Unknown(other),
        };
        let imm = matches!(opcode, Opcode::SendImm | Opcode::WriteImm).then(|| u32::from_be(out[2] as u32));
        Received { len: out[1] as usize, opcode, imm, conn: ConnId(out[3] as usize) }
    }
}

struct ConnInner {
    rdma: Rc<RdmaInner>,
    conn: *mut sys::doca_rdma_connection,
    /// Set for connections made by address (`cm.rs`).
    cm: Option<cm::ConnCm>,
    /// The tasks this connection's operation futures run on, kept with the connection set
    /// (see `completion::held_op`).
    pool: HeldPool,
}

impl ConnInner {
    fn new(rdma: Rc<RdmaInner>, conn: *mut sys::doca_rdma_connection, cm: Option<cm::ConnCm>) -> ConnInner {
        let pool = HeldPool::new(rdma.ctx.record(), rdma.inv.clone());
        ConnInner { rdma, conn, cm, pool }
    }

    /// The future of one operation of kind `K` on this connection: `req` takes the
    /// operation's doca_bufs (its record holds them until the task is over) and
    /// re-initialises the connection's held task, or allocates one; `keep` (the caller's
    /// buffers) is owned by the operation until DOCA is done and then returned. `size` is the
    /// bytes moved, in the operation's trace span.
    // Inlined so the future is built in place.
    #[inline(always)]
    fn op<K, R, B>(&self, op: &'static str, size: usize, req: R, keep: B) -> HeldOp<'_, K, R, B>
    where
        K: DocaTask,
        R: HeldRequest<K, B>,
        B: 'static,
    {
        HeldOp::new(self.rdma.ctx.core(), &self.pool, op, req, Some(self.conn as usize), size, keep)
    }
}

impl Drop for ConnInner {
    fn drop(&mut self) {
        // The idle tasks go back while their connection exists.
        self.pool.clear();
        if let Some(c) = &self.cm {
            c.close(self.conn);
        }
    }
}

/// A connected RDMA connection: sends and one-sided operations (see the
/// [module documentation](self) for buffers, errors and recovery).
///
/// Cheap to clone (the clones are the same connection). It keeps its context alive.
///
/// ```
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::{rdma::Rdma, Access, Device};
/// let dev = Device::open_default()?;
/// let (a, b) = (Rdma::builder(&dev).build().await?, Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?);
/// let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
/// let (conn, _peer) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
///
/// let counter = dev.alloc(8, Access::RDMA_ALL)?; // on b's side
/// let remote = dev.import(&counter.export_rdma()?)?;
/// let result = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
/// let (old, result) = conn.fetch_add(remote.slice(0..8), 5, result).await;
/// assert_eq!(old?, 0);
/// let (old, _result) = conn.compare_swap(remote.slice(0..8), 5, 9, result).await;
/// assert_eq!(old?, 5);
/// assert_eq!(counter.buf().read_u64(0), 9);
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct Connection {
    inner: Rc<ConnInner>,
}

fn too_short(op: &'static str, what: &str) -> Error {
    Error::new(ErrorKind::InvalidArgument, format!("{op}: {what}"))
}

impl Connection {
    /// This connection's id (as reported by [`Received::conn`] on the peer's messages).
    pub fn id(&self) -> ConnId {
        ConnId(self.inner.conn as usize)
    }

    /// A [`Window`] of up to `depth` operations in flight on this connection, without a
    /// future per operation: the path for message rate (see [`window`]).
    ///
    /// # Panics
    /// If `depth` is 0.
    pub fn window(&self, depth: usize) -> Window<'_> {
        Window::new(self, depth)
    }

    /// `depth` operations of `op` in flight on fixed memory: `local` (and the remote slice
    /// of a write or read) cut into `depth` equal lanes, each with its own task, submitted
    /// again as it is. The path for message rate when the memory is known up front. See
    /// [`Lanes`].
    ///
    /// # Errors
    /// As in [`Lanes`]' module documentation (the buffer does not make `depth` equal lanes,
    /// a remote slice shorter than it, a destroyed context, no descriptor left).
    pub fn lanes(&self, op: LaneOp, local: Buf, depth: usize) -> Result<Lanes<'_>> {
        lanes::on_conn(self, op, local, depth)
    }

    /// Sends `src` as one message; it completes a receive posted on the peer's context.
    #[inline(always)]
    pub fn send(&self, src: Buf) -> SendFuture<'_> {
        SendFuture(self.send_op("rdma.send", src, None))
    }

    /// Sends `src` with 32-bit immediate data (the peer's [`Received::imm`]).
    #[inline(always)]
    pub fn send_imm(&self, src: Buf, imm: u32) -> SendFuture<'_> {
        SendFuture(self.send_op("rdma.send_imm", src, Some(imm)))
    }

    /// The request of an operation on this connection, or the error that fails it before
    /// anything is submitted (the context is gone).
    #[inline(always)]
    fn target(&self, op: &'static str) -> Result<ops::Target<'_>> {
        let inner = &*self.inner.rdma;
        match inner.ctx.as_ptr() {
            Ok(rdma) => Ok(ops::Target { inner, rdma, conn: self.inner.conn }),
            Err(e) => Err(e.context_prefix(op)),
        }
    }

    // The operations below are inlined into their public methods, and those into their
    // callers (small, generic-free): the future is then built where the caller keeps it
    // instead of being returned through layers by copy. `#[inline(always)]`, not a hint:
    // across crates the compiler kept `write` out of line with `#[inline]`, which cost 64
    // instructions per write (examples/op_cost under callgrind).
    #[inline(always)]
    fn send_op(
        &self,
        op: &'static str,
        src: Buf,
        imm: Option<u32>,
    ) -> ops::ConnOps<'_, Send, SendImm, ops::SendReq<'_>, Buf> {
        let req = match self.send_req(op, imm.unwrap_or(0)) {
            Ok(r) => r,
            Err(e) => return ops::Op::failed(e, src),
        };
        let (size, inner) = (src.len(), &*self.inner);
        match imm {
            None => ops::Op::First(inner.op::<Send, _, _>(op, size, req, src)),
            Some(_) => ops::Op::Second(inner.op::<SendImm, _, _>(op, size, req, src)),
        }
    }

    /// The request of a send with immediate `imm` (a send without one ignores it). One home
    /// for the futures and the [`Window`].
    #[inline(always)]
    fn send_req(&self, op: &'static str, imm: u32) -> Result<ops::SendReq<'_>> {
        Ok(ops::SendReq { t: self.target(op)?, imm })
    }

    /// Writes all of `src` to the start of `dst` (one-sided: the peer's CPU is not involved).
    ///
    /// # Errors
    /// `src` longer than `dst`: [`ErrorKind::InvalidArgument`] (nothing submitted); the peer's
    /// memory or context without [`Access::RDMA_WRITE`]: [`ErrorKind::PermissionDenied`].
    #[inline(always)]
    pub fn write(&self, src: Buf, dst: RemoteSlice) -> WriteFuture<'_> {
        WriteFuture(self.write_op("rdma.write", src, dst, None))
    }

    /// Writes like [`write`](Connection::write), then delivers `imm` to a receive posted on
    /// the peer's context ([`Opcode::WriteImm`]); the data is visible when that receive
    /// completes.
    #[inline(always)]
    pub fn write_imm(&self, src: Buf, dst: RemoteSlice, imm: u32) -> WriteFuture<'_> {
        WriteFuture(self.write_op("rdma.write_imm", src, dst, Some(imm)))
    }

    #[inline(always)]
    fn write_op(
        &self,
        op: &'static str,
        src: Buf,
        dst: RemoteSlice,
        imm: Option<u32>,
    ) -> ops::ConnOps<'_, Write, WriteImm, ops::WriteReq<'_>, (Buf, RemoteSlice)> {
        let req = match self.write_req(op, &src, &dst, imm.unwrap_or(0)) {
            Ok(r) => r,
            Err(e) => return ops::Op::failed(e, (src, dst)),
        };
        let (size, inner) = (src.len(), &*self.inner);
        match imm {
            None => ops::Op::First(inner.op::<Write, _, _>(op, size, req, (src, dst))),
            Some(_) => ops::Op::Second(inner.op::<WriteImm, _, _>(op, size, req, (src, dst))),
        }
    }

    /// The request of a write of `src` to `dst` (the checks before anything is submitted).
    #[inline(always)]
    fn write_req(&self, op: &'static str, src: &Buf, dst: &RemoteSlice, imm: u32) -> Result<ops::WriteReq<'_>> {
        if src.len() > dst.len() {
            return Err(too_short(op, &format!("source of {} bytes exceeds the {}-byte target", src.len(), dst.len())));
        }
        Ok(ops::WriteReq { t: self.target(op)?, imm })
    }

    /// Reads `dst.len()` bytes from the start of `src` into `dst` (one-sided).
    ///
    /// # Errors
    /// `dst` longer than `src`: [`ErrorKind::InvalidArgument`] (nothing submitted); no
    /// [`Access::RDMA_READ`] on the peer's side: [`ErrorKind::PermissionDenied`].
    #[inline(always)]
    pub fn read(&self, src: RemoteSlice, dst: Buf) -> ReadFuture<'_> {
        const OP: &str = "rdma.read";
        let req = match self.read_req(OP, &src, &dst) {
            Ok(r) => r,
            Err(e) => return ReadFuture(ops::Op::failed(e, (dst, src))),
        };
        let size = dst.len();
        ReadFuture(ops::Op::First(self.inner.op::<Read, _, _>(OP, size, req, (dst, src))))
    }

    /// The request of a read of `src` into `dst` (the checks before anything is submitted).
    #[inline(always)]
    fn read_req(&self, op: &'static str, src: &RemoteSlice, dst: &Buf) -> Result<ops::ReadReq<'_>> {
        if dst.len() > src.len() {
            return Err(too_short(
                op,
                &format!("{}-byte destination exceeds the {}-byte source", dst.len(), src.len()),
            ));
        }
        Ok(ops::ReadReq { t: self.target(op)? })
    }

    /// Atomically replaces the 8-byte value at the start of `dst` with `swap` if it equals
    /// `compare`; returns the value it had. `result` (at least 8 bytes, registered with
    /// [`Access::LOCAL_READ_WRITE`]) receives the old value and is given back.
    ///
    /// # Errors
    /// `dst` or `result` shorter than 8 bytes: [`ErrorKind::InvalidArgument`] (nothing
    /// submitted); a misaligned target: [`ErrorKind::InvalidArgument`]; no
    /// [`Access::RDMA_ATOMIC`]: [`ErrorKind::PermissionDenied`].
    #[inline(always)]
    pub fn compare_swap(&self, dst: RemoteSlice, compare: u64, swap: u64, result: Buf) -> AtomicFuture<'_> {
        AtomicFuture(self.atomic("rdma.compare_swap", dst, result, Some((compare, swap)), 0))
    }

    /// Atomically adds `add` to the 8-byte value at the start of `dst`; returns the value
    /// it had. `result` as for [`compare_swap`](Connection::compare_swap).
    #[inline(always)]
    pub fn fetch_add(&self, dst: RemoteSlice, add: u64, result: Buf) -> AtomicFuture<'_> {
        AtomicFuture(self.atomic("rdma.fetch_add", dst, result, None, add))
    }

    #[inline(always)]
    fn atomic(
        &self,
        op: &'static str,
        dst: RemoteSlice,
        result: Buf,
        cas: Option<(u64, u64)>,
        add: u64,
    ) -> ops::ConnOps<'_, CmpSwp, FetchAdd, ops::AtomicReq<'_>, (Buf, RemoteSlice)> {
        if dst.len() < 8 || result.len() < 8 {
            return ops::Op::failed(too_short(op, "the target and the result buffer need 8 bytes"), (result, dst));
        }
        let t = match self.target(op) {
            Ok(t) => t,
            Err(e) => return ops::Op::failed(e, (result, dst)),
        };
        let inner = &*self.inner;
        match cas {
            Some((a, b)) => {
                let req = ops::AtomicReq { t, a, b };
                ops::Op::First(inner.op::<CmpSwp, _, _>(op, 8, req, (result, dst)))
            }
            None => {
                let req = ops::AtomicReq { t, a: add, b: 0 };
                ops::Op::Second(inner.op::<FetchAdd, _, _>(op, 8, req, (result, dst)))
            }
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection").field("id", &self.id()).finish()
    }
}
