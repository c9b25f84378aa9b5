//! The Comch fast path: buffers written straight into the peer's posted memory
//! (`doca_comch_consumer.h`, `doca_comch_producer.h`), beside a [`Connection`]'s messages.
//!
//! A [`Consumer`] posts receive buffers from one registered [`Memory`]; the peer's
//! [`Producer`] sends a [`Buf`] (with up to [`MAX_IMM_DATA`] bytes of immediate data) to a
//! consumer by id, and the bytes land in the consumer's oldest posted buffer. The connection
//! carries the control: it tells each side the ids of the other side's consumers
//! ([`Connection::next_remote_consumer`], [`Connection::remote_consumers`]).
//!
//! | on | operation | result |
//! | --- | --- | --- |
//! | [`ConsumerBuilder`] | [`build`](ConsumerBuilder::build) | a started [`Consumer`], announced to the peer |
//! | [`Consumer`] | [`recv`](Consumer::recv) | [`Received`] (length, producer id, immediate data) and the buffer back |
//! | [`ProducerBuilder`] | [`build`](ProducerBuilder::build) | a started [`Producer`] |
//! | [`Producer`] | [`send`](Producer::send) | `()` once the bytes are in the consumer's buffer, and the buffer back |
//! | [`Consumer`] | [`recv_lanes`](Consumer::recv_lanes) | [`Lanes`] whose lanes are posted buffers, each yielding [`Received`] |
//! | [`Producer`] | [`lanes`](Producer::lanes) | [`Lanes`] whose lanes send their bytes to one consumer, each yielding `()` |
//!
//! **Lanes** are the held path for message rate and latency ([`crate::lanes`]): memory
//! fixed up front and cut into lanes, each lane with its own task and descriptor, submitted
//! again as it is, the completion straight into the lane's record, where
//! [`send`](Producer::send) and [`recv`](Consumer::recv) take any buffer and pay per
//! operation for a descriptor, a task's setters and a future (`examples/op_cost`: kind
//! `fast_lanes` against `fast`). A send lane sends all its bytes; its immediate bytes,
//! up to [`MAX_IMM_DATA`], are given at each submit
//! ([`submit_imm_bytes`](crate::lanes::LaneMut::submit_imm_bytes), or
//! [`submit`](crate::lanes::LaneMut::submit) for none), copied into the lane, which keeps
//! them where DOCA may read them until the send is done: the lanes' operands are two words
//! of immediate bytes and their count.
//!
//! # Errors
//! - [`Consumer::recv`]: a buffer outside the consumer's memory or empty
//!   ([`ErrorKind::InvalidArgument`], nothing posted); a message larger than the buffer, or
//!   a producer that died mid-write (DOCA's code); the consumer stopped (its posted buffers are
//!   flushed: [`ErrorKind::Cancelled`] or DOCA's code).
//! - [`Producer::send`]: more immediate bytes than [`MAX_IMM_DATA`] or than the consumer
//!   takes, data larger than the consumer's buffer ([`ErrorKind::InvalidArgument`]); a
//!   consumer that is unknown or withdrawn ([`ErrorKind::ConnectionLost`]). A consumer with no
//!   buffer posted is not an error: DOCA answers `AGAIN` and the send tries again (yielding
//!   to the executor, then every [`SEND_RETRY`]) until a buffer is posted or the future is
//!   dropped.
//! - [`Consumer::recv_lanes`], [`Producer::lanes`]: those of [`crate::lanes`] (a `depth` of
//!   0, a buffer that does not cut into `depth` equal lanes, a stopped context, no
//!   descriptor left), and receive lanes over other memory than the consumer's
//!   ([`ErrorKind::InvalidArgument`]). Each lane's result is that of [`recv`](Consumer::recv)
//!   or [`send`](Producer::send); a send lane with no buffer posted waits as `send` does, in
//!   order with the lanes after it, and dropping the lanes drops it unsent.
//!   [`submit_imm_bytes`](crate::lanes::LaneMut::submit_imm_bytes) panics with more than
//!   [`MAX_IMM_DATA`] bytes.
//!
//! # Threads and lifetimes
//! Like the connection, consumers and producers are `!Send`: they belong to the executor of
//! their connection. DOCA (and doca-soft) would allow one per thread over a connection
//! another thread progresses; the runtime does not offer that yet, because a consumer on
//! another executor would have to keep the connection's executor-bound objects alive from
//! there. Each keeps its connection
//! (and its server or client) alive. Both are cheap shared handles: dropping the last handle
//! stops the context; buffers still posted come back to their futures' slots once DOCA
//! flushed them, and a peer's producer then sees the consumer withdrawn. [`Lanes`] borrow
//! their producer or consumer, on its executor; dropped with buffers posted or sends in
//! flight, they keep that memory (and its descriptors) alive until DOCA is done with it.
//!
//! # Example
//! ```
//! use async_doca::comch::fast::{Consumer, Producer};
//! use async_doca::comch::{Client, Server};
//! use async_doca::{spawn_local, Access, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     let name = format!("doc-fast-{}", std::process::id());
//!     let server = Server::builder(&dev, &name).build().await?;
//!     let client = spawn_local({
//!         let dev = dev.clone();
//!         async move { Client::builder(&dev, &name).connect().await }
//!     });
//!     let dpu = server.accept().await?;
//!     let host = client.await??;
//!
//!     // The host consumes into its memory; the DPU produces to it.
//!     let inbox = dev.alloc(4096, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
//!     let consumer = Consumer::builder(&host, &inbox).imm_data_len(4).build().await?;
//!     let producer = Producer::builder(&dpu).build().await?;
//!     let id = dpu.next_remote_consumer().await?;
//!     assert_eq!(id, consumer.id());
//!
//!     let posted = spawn_local(async move {
//!         let (r, buf) = consumer.recv(inbox.slice(..64)).await;
//!         r.map(|got| (got, buf.to_vec()))
//!     });
//!     let mut msg = dev.alloc(64, Access::LOCAL_READ_WRITE)?.slice(..5);
//!     msg.write(0, b"hello");
//!     let (sent, _msg) = producer.send(msg, id, b"tag!").await;
//!     sent?;
//!     let (got, bytes) = posted.await??;
//!     assert_eq!((got.len(), got.imm(), got.producer_id()), (5, &b"tag!"[..], producer.id()));
//!     assert_eq!(&bytes[..5], b"hello");
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```
//!
//! # Example: lanes
//! ```
//! use async_doca::comch::fast::{Consumer, Producer};
//! use async_doca::comch::{Client, Server};
//! use async_doca::{spawn_local, Access, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     let name = format!("doc-fast-lanes-{}", std::process::id());
//!     let server = Server::builder(&dev, &name).build().await?;
//!     let client = spawn_local({
//!         let dev = dev.clone();
//!         async move { Client::builder(&dev, &name).connect().await }
//!     });
//!     let dpu = server.accept().await?;
//!     let host = client.await??;
//!
//!     // The host posts 4 receive lanes of 8 bytes; the DPU sends through 2 lanes.
//!     let inbox = dev.alloc(4 * 8, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
//!     let consumer = Consumer::builder(&host, &inbox).imm_data_len(2).build().await?;
//!     let producer = Producer::builder(&dpu).build().await?;
//!     let id = dpu.next_remote_consumer().await?;
//!     let mut posted = consumer.recv_lanes(inbox.buf(), 4)?;
//!     for _ in 0..4 {
//!         posted.lane().await.1.submit();
//!     }
//!     let out = dev.alloc(2 * 8, Access::LOCAL_READ_WRITE)?;
//!     let mut sends = producer.lanes(out.buf(), 2, id)?;
//!     for i in 0..100u64 {
//!         let (prev, mut lane) = sends.lane().await;
//!         if let Some(res) = prev {
//!             res?; // the send this lane carried before
//!         }
//!         lane.write_u64(0, i);
//!         lane.submit_imm_bytes(&(i as u16).to_le_bytes());
//!         // The oldest message, read from its lane, which is posted again.
//!         let (got, lane) = posted.next().await.expect("four posted");
//!         let got = got?;
//!         assert_eq!((got.len(), got.producer_id(), got.imm()), (8, producer.id(), &(i as u16).to_le_bytes()[..]));
//!         assert_eq!(lane.buf().read_u64(0), i);
//!         lane.submit();
//!     }
//!     while let Some((res, _lane)) = sends.next().await {
//!         res?;
//!     }
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use super::{with_slot, Connection};
use crate::error::{check, Error, ErrorKind, Result};
use crate::executor::completion::{HeldOp, HeldPool, HeldRequest};
use crate::ext::{completion_cb, success_cb, DocaCtx, DocaTask, TaskOutput, TaskSlot};
use crate::lanes::kind::{lane_task, LaneKind, Operands, Remote};
use crate::lanes::{Lanes, Outcome};
use crate::mem::descriptors::{Desc, Descs, Inventory};
use crate::mem::{Buf, Memory};
use crate::sys;

/// Immediate bytes a [`Consumer`] returns with each buffer, at most: a completion's results
/// travel in the runtime's four-word task output (length and producer id, the immediate's
/// length, 16 bytes). DOCA may allow more (`doca_comch_consumer_cap_get_max_imm_data_len`);
/// [`ConsumerBuilder::imm_data_len`] refuses more than this.
pub const MAX_IMM_DATA: usize = 16;
/// Default receive task pool of a consumer (buffers posted at once).
pub const DEFAULT_CONSUMER_TASKS: u32 = 64;
/// Default send task pool of a producer (sends in flight at once).
pub const DEFAULT_PRODUCER_TASKS: u32 = 64;
/// How long a send waits before it tries again, once yielding has not found a posted buffer.
pub const SEND_RETRY: Duration = Duration::from_micros(50);
/// Sends tried again with only a yield in between before they wait [`SEND_RETRY`].
const SEND_YIELDS: u32 = 64;

/// The name of a send, in its errors (as [`Producer::send`]'s and its lanes').
const SEND_OP: &str = "comch.producer.send";
/// The name of a receive, in its errors (as [`Consumer::recv`]'s and its lanes').
const RECV_OP: &str = "comch.consumer.recv";

/// `doca_comch_consumer_task_post_recv`, as the runtime sees it.
struct PostRecv;
// SAFETY: the conversion is the task type's own; post-receive tasks are freed with
// doca_task_free (the default).
unsafe impl DocaTask for PostRecv {
    type Task = sys::doca_comch_consumer_task_post_recv;
    // Kept for reuse: its results are read by `on_complete`, and a reuse sets its buffer
    // (the only parameter) again; a consumer has no other task kind.
    const REUSE: Option<usize> = Some(0);
    // Posted ahead of the peer's send, which often answers what the posting task sends next.
    const POSTED_AHEAD: bool = true;
    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
        // SAFETY: forwarded; the caller passes a live task.
        unsafe { sys::doca_comch_consumer_task_post_recv_as_task(task) }
    }
    unsafe fn on_complete(task: *mut Self::Task, status: sys::doca_error_t, out: &mut TaskOutput) {
        if status != sys::DOCA_SUCCESS {
            return;
        }
        // SAFETY: the live, completed task: its buffer and results are readable now; the
        // immediate bytes are the task's, `imm_len` of them.
        unsafe {
            let mut len = 0usize;
            let _ = sys::doca_buf_get_data_len(sys::doca_comch_consumer_task_post_recv_get_buf(task), &mut len);
            let producer = sys::doca_comch_consumer_task_post_recv_get_producer_id(task);
            let imm_len = (sys::doca_comch_consumer_task_post_recv_get_imm_data_len(task) as usize).min(MAX_IMM_DATA);
            let imm = sys::doca_comch_consumer_task_post_recv_get_imm_data(task);
            let mut bytes = [0u8; MAX_IMM_DATA];
            if imm_len > 0 && !imm.is_null() {
                std::ptr::copy_nonoverlapping(imm, bytes.as_mut_ptr(), imm_len);
            }
            out[0] = (len as u64 & u64::from(u32::MAX)) | (u64::from(producer) << 32);
            out[1] = imm_len as u64;
            out[2] = u64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes"));
            out[3] = u64::from_ne_bytes(bytes[8..].try_into().expect("8 bytes"));
        }
    }
}

/// `doca_comch_producer_task_send`, as the runtime sees it.
struct ProducerSend;
// SAFETY: as for PostRecv.
unsafe impl DocaTask for ProducerSend {
    type Task = sys::doca_comch_producer_task_send;
    // Kept for reuse: a reuse sets every parameter again (buffer, consumer, immediate
    // bytes); a producer has no other task kind.
    const REUSE: Option<usize> = Some(0);
    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
        // SAFETY: forwarded; the caller passes a live task.
        unsafe { sys::doca_comch_producer_task_send_as_task(task) }
    }
}

// ---- consumer ----

/// Configures and starts a [`Consumer`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build() is awaited"]
pub struct ConsumerBuilder {
    conn: Connection,
    memory: Memory,
    tasks: u32,
    imm_len: u32,
}

impl ConsumerBuilder {
    /// Buffers posted at once (default [`DEFAULT_CONSUMER_TASKS`]); more
    /// [`recv`](Consumer::recv)s wait for one to complete.
    pub fn tasks(mut self, n: u32) -> Self {
        self.tasks = n;
        self
    }

    /// Immediate bytes each send to this consumer may carry (default 0; at most
    /// [`MAX_IMM_DATA`]).
    pub fn imm_data_len(mut self, n: u32) -> Self {
        self.imm_len = n;
        self
    }

    /// Creates the consumer on the connection's executor, starts it and announces it to the
    /// peer (whose [`Connection::next_remote_consumer`] then returns its id).
    ///
    /// # Errors
    /// A zero pool or too many immediate bytes ([`ErrorKind::InvalidArgument`]), a connection
    /// that ended ([`ErrorKind::ConnectionLost`]), memory the peer cannot be given (DOCA's
    /// code: it must allow PCI access), or what DOCA refuses.
    pub async fn build(self) -> Result<Consumer> {
        const OP: &str = "comch.consumer";
        if self.tasks == 0 || self.imm_len as usize > MAX_IMM_DATA {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{OP}: tasks must be >= 1 and imm_data_len <= {MAX_IMM_DATA}"),
            ));
        }
        let conn = self.conn.open_ptr(OP)?;
        let mmap = self.memory.raw_mmap();
        let mut c = std::ptr::null_mut();
        // SAFETY: a live connection (checked above) and a started mmap the memory keeps;
        // valid out-pointer.
        check(unsafe { sys::doca_comch_consumer_create(conn, mmap, &mut c) }, "comch: doca_comch_consumer_create")?;
        // The memory and the connection (with its server or client) outlive the consumer.
        let keep = (self.memory.clone(), self.conn.clone());
        // SAFETY: a fresh, IDLE, unconnected consumer of this thread, destroyed only by
        // DocaCtx; the closure keeps what it was created on until then.
        let ctx = unsafe {
            DocaCtx::new("comch_consumer", c, sys::doca_comch_consumer_as_ctx(c), move |c| {
                let rc = sys::doca_comch_consumer_destroy(c);
                drop(keep);
                rc
            })
        }?;
        // SAFETY: the consumer is live and IDLE; the callbacks have the exact C signatures.
        unsafe {
            if self.imm_len > 0 {
                check(sys::doca_comch_consumer_set_imm_data_len(c, self.imm_len), "comch: consumer imm data len")?;
            }
            check(
                sys::doca_comch_consumer_task_post_recv_set_conf(
                    c,
                    Some(success_cb::<PostRecv>),
                    Some(completion_cb::<PostRecv>),
                    self.tasks,
                ),
                "comch: configure post-receive tasks",
            )?;
        }
        let inv = Rc::new(Inventory::new(self.tasks as usize + 16, "comch consumer")?);
        ctx.start().await.map_err(|e| e.context_prefix(OP))?;
        let mut id = 0;
        // SAFETY: a live consumer; valid out-pointer.
        check(unsafe { sys::doca_comch_consumer_get_id(c, &mut id) }, "comch: consumer id")?;
        let pool = HeldPool::new(ctx.record(), inv.clone());
        Ok(Consumer { inner: Rc::new(ConsumerInner { pool, ctx, inv, memory: self.memory, id }) })
    }
}

/// Receives [`Producer`] sends into buffers of one [`Memory`] (see the
/// [module documentation](self)).
///
/// Cloning shares the consumer (buffers are posted from any clone, in one order). Dropping
/// the last handle stops it.
#[derive(Clone)]
pub struct Consumer {
    inner: Rc<ConsumerInner>,
}

struct ConsumerInner {
    /// The tasks the consumer's receives run on (see `completion::held_op`). Before `ctx`: its
    /// idle tasks go back before the context is stopped.
    pool: HeldPool,
    ctx: DocaCtx<sys::doca_comch_consumer>,
    inv: Rc<Inventory>,
    memory: Memory,
    id: u32,
}

/// What a [`Consumer::recv`] got.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Received {
    len: usize,
    producer_id: u32,
    imm_len: u8,
    imm: [u8; MAX_IMM_DATA],
}

impl Received {
    /// The bytes written at the start of the buffer.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the send carried no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The id of the [`Producer`] that sent them.
    pub fn producer_id(&self) -> u32 {
        self.producer_id
    }
    /// The send's immediate data.
    pub fn imm(&self) -> &[u8] {
        &self.imm[..self.imm_len as usize]
    }

    fn of(out: TaskOutput) -> Received {
        let mut imm = [0u8; MAX_IMM_DATA];
        imm[..8].copy_from_slice(&out[2].to_ne_bytes());
        imm[8..].copy_from_slice(&out[3].to_ne_bytes());
        Received {
            len: (out[0] & u64::from(u32::MAX)) as usize,
            producer_id: (out[0] >> 32) as u32,
            imm_len: out[1].min(MAX_IMM_DATA as u64) as u8,
            imm,
        }
    }
}

impl crate::lanes::sealed::Sealed for Received {}

impl Outcome for Received {
    const READS_OUTPUT: bool = true;
    #[inline(always)]
    fn from_output(out: TaskOutput) -> Received {
        Received::of(out)
    }
}

impl fmt::Debug for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("len", &self.len)
            .field("producer_id", &self.producer_id)
            .field("imm", &self.imm())
            .finish()
    }
}

impl Consumer {
    /// A builder for a consumer on `conn` whose buffers come from `memory` (registered with
    /// PCI access, which DOCA needs to give it to the peer's producers).
    pub fn builder(conn: &Connection, memory: &Memory) -> ConsumerBuilder {
        ConsumerBuilder { conn: conn.clone(), memory: memory.clone(), tasks: DEFAULT_CONSUMER_TASKS, imm_len: 0 }
    }

    /// The consumer's id, which the peer's producers send to.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Posts `buf` (a slice of the consumer's memory) and waits for a send to fill it; gives
    /// the buffer back either way. Buffers are filled in posting order, from their start.
    ///
    /// The future posts at its first poll. It is a named, `Unpin` type ([`RecvFuture`]), so
    /// that several can be kept posted ahead (in a `VecDeque`, polled once each to post
    /// them) while the caller sends: a ping-pong that posts its next buffer only after its
    /// answer went out leaves the peer's producer to find none posted. Dropping the future
    /// after its first poll leaves `buf` posted until a send fills it or the consumer stops.
    pub fn recv(&self, buf: Buf) -> RecvFuture<'_> {
        const OP: &str = RECV_OP;
        let inner = &*self.inner;
        if buf.is_empty() || buf.memory().raw_mmap() != inner.memory.raw_mmap() {
            let e = Error::new(
                ErrorKind::InvalidArgument,
                format!("{OP}: the buffer must be a non-empty slice of the consumer's memory"),
            );
            return RecvFuture(Recv::Failed(Some((e, buf))));
        }
        let consumer = match inner.ctx.as_ptr() {
            Ok(p) => p,
            Err(e) => return RecvFuture(Recv::Failed(Some((e.context_prefix(OP), buf)))),
        };
        let req = PostRecvReq { ctx: &inner.ctx, consumer, inv: &inner.inv };
        let len = buf.len();
        RecvFuture(Recv::Posting(HeldOp::new(inner.ctx.core(), &inner.pool, OP, req, None, len, buf)))
    }
}

impl Consumer {
    /// `depth` receive buffers posted again and again: `local` (a slice of the consumer's
    /// memory) cut into `depth` equal lanes, each with its own post-receive task, a
    /// submitted lane a posted buffer. A completed lane yields what [`recv`](Consumer::recv)
    /// does ([`Received`]: length, producer id, immediate bytes), its bytes in the lane
    /// ([`LaneMut::buf`](crate::lanes::LaneMut::buf)); submit it again to post it again.
    /// Lanes are filled in posting order, as buffers are. See [`crate::lanes`] for how
    /// lanes behave.
    ///
    /// # Errors
    /// `local` outside the consumer's memory ([`ErrorKind::InvalidArgument`]), and those of
    /// [`crate::lanes`] (a `depth` of 0, a buffer that does not cut into `depth` lanes, a
    /// stopped consumer, no descriptor left).
    pub fn recv_lanes(&self, local: Buf, depth: usize) -> Result<Lanes<'_, Received>> {
        let inner = &*self.inner;
        if local.memory().raw_mmap() != inner.memory.raw_mmap() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("{RECV_OP}: lanes: the buffer must be a slice of the consumer's memory"),
            ));
        }
        // SAFETY: the post-receive table on the consumer's own context.
        unsafe { Lanes::with_peer(&inner.ctx, &inner.inv, 0, &RECV_LANE, local, depth) }
    }
}

/// The future of [`Consumer::recv`]: resolves to `(Result<Received>, buf)` once a send filled
/// the buffer (or the receive failed). It posts at its first poll; see [`Consumer::recv`] for
/// what dropping it does. Named and `Unpin`, as the RDMA operations' futures are: it can be
/// stored, and polled with `Pin::new(&mut fut)`.
#[must_use = "a receive posts nothing unless polled; once posted, dropping it leaves the buffer posted"]
pub struct RecvFuture<'a>(Recv<'a>);

enum Recv<'a> {
    /// A check failed before anything was posted: resolves to the error at the first poll.
    Failed(Option<(Error, Buf)>),
    Posting(HeldOp<'a, PostRecv, PostRecvReq<'a>, Buf>),
}

impl Future for RecvFuture<'_> {
    type Output = (Result<Received>, Buf);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Recv::Failed(f) => {
                let (e, buf) = f.take().expect("comch receive future polled after completion");
                Poll::Ready((Err(e), buf))
            }
            Recv::Posting(f) => {
                let (r, buf) = ready!(Pin::new(f).poll(cx));
                Poll::Ready((r.map(Received::of), buf))
            }
        }
    }
}

impl fmt::Debug for RecvFuture<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Recv::Failed(Some((e, _))) => f.debug_tuple("RecvFuture::Failed").field(e).finish(),
            Recv::Failed(None) => f.write_str("RecvFuture::Finished"),
            Recv::Posting(t) => f.debug_tuple("RecvFuture").field(t).finish(),
        }
    }
}

/// `rc` of a task of kind `K` just allocated at `t` (an `*_alloc_init` without a user data
/// argument): on success the task gets `slot`'s user data.
fn with_user_data<K: DocaTask>(rc: sys::doca_error_t, t: *mut K::Task, slot: &TaskSlot) -> sys::doca_error_t {
    with_slot::<K>(rc, t, slot).err().unwrap_or(sys::DOCA_SUCCESS)
}

/// A post-receive task over one destination descriptor (empty payload: the send fills it).
struct PostRecvReq<'a> {
    ctx: &'a DocaCtx<sys::doca_comch_consumer>,
    consumer: *mut sys::doca_comch_consumer,
    inv: &'a Inventory,
}

impl HeldRequest<PostRecv, Buf> for PostRecvReq<'_> {
    /// The descriptor of the buffer the future owns, then the held task pointed at it
    /// (unless it still points there), a kept one re-initialised, or a fresh one.
    #[inline(always)]
    fn prepare(
        &mut self,
        slot: &TaskSlot,
        buf: &Buf,
    ) -> std::result::Result<*mut sys::doca_comch_consumer_task_post_recv, sys::doca_error_t> {
        let set = Descs::new(self.inv, slot.descs());
        let d = set.get(0, Desc::local(buf), 0)?;
        // SAFETY: the buffer, a post-receive's one parameter, is set; a live consumer; `d`
        // describes memory the operation owns until the task is done.
        unsafe {
            // The task's one field: a held one's (the consumer's own) unless it still points at
            // this buffer, a kept one's always.
            let bufs = |k| sys::doca_comch_consumer_task_post_recv_set_buf(k, d);
            self.ctx.reuse_held_or_alloc::<PostRecv>(
                slot,
                set.changed(),
                bufs,
                |_| {},
                |_| {},
                |t| {
                    let rc = sys::doca_comch_consumer_task_post_recv_alloc_init(self.consumer, d, t);
                    with_user_data::<PostRecv>(rc, *t, slot)
                },
            )
        }
    }
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("comch::fast::Consumer").field("id", &self.inner.id).field("ctx", &self.inner.ctx).finish()
    }
}

// ---- producer ----

/// Configures and starts a [`Producer`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build() is awaited"]
pub struct ProducerBuilder {
    conn: Connection,
    tasks: u32,
}

impl ProducerBuilder {
    /// Sends in flight at once (default [`DEFAULT_PRODUCER_TASKS`]); more wait.
    pub fn tasks(mut self, n: u32) -> Self {
        self.tasks = n;
        self
    }

    /// Creates the producer on the connection's executor and starts it.
    ///
    /// # Errors
    /// A zero pool ([`ErrorKind::InvalidArgument`]), a connection that ended
    /// ([`ErrorKind::ConnectionLost`]), or what DOCA refuses.
    pub async fn build(self) -> Result<Producer> {
        const OP: &str = "comch.producer";
        if self.tasks == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, format!("{OP}: tasks must be >= 1")));
        }
        let conn = self.conn.open_ptr(OP)?;
        let mut p = std::ptr::null_mut();
        // SAFETY: a live connection (checked above); valid out-pointer.
        check(unsafe { sys::doca_comch_producer_create(conn, &mut p) }, "comch: doca_comch_producer_create")?;
        let keep = self.conn.clone();
        // SAFETY: as for the consumer.
        let ctx = unsafe {
            DocaCtx::new("comch_producer", p, sys::doca_comch_producer_as_ctx(p), move |p| {
                let rc = sys::doca_comch_producer_destroy(p);
                drop(keep);
                rc
            })
        }?;
        check(
            // SAFETY: the producer is live and IDLE; the callbacks have the exact C signatures.
            unsafe {
                sys::doca_comch_producer_task_send_set_conf(
                    p,
                    Some(success_cb::<ProducerSend>),
                    Some(completion_cb::<ProducerSend>),
                    self.tasks,
                )
            },
            "comch: configure producer send tasks",
        )?;
        let inv = Rc::new(Inventory::new(self.tasks as usize + 16, "comch producer")?);
        ctx.start().await.map_err(|e| e.context_prefix(OP))?;
        let mut id = 0;
        // SAFETY: a live producer; valid out-pointer.
        check(unsafe { sys::doca_comch_producer_get_id(p, &mut id) }, "comch: producer id")?;
        let pool = HeldPool::new(ctx.record(), inv.clone());
        Ok(Producer { inner: Rc::new(ProducerInner { pool, ctx, inv, id }) })
    }
}

/// Sends buffers into the peer's [`Consumer`]s (see the [module documentation](self)).
///
/// Cloning shares the producer. Dropping the last handle stops it.
#[derive(Clone)]
pub struct Producer {
    inner: Rc<ProducerInner>,
}

struct ProducerInner {
    /// The tasks the producer's sends run on (see `completion::held_op`). Before `ctx`: its
    /// idle tasks go back before the context is stopped.
    pool: HeldPool,
    ctx: DocaCtx<sys::doca_comch_producer>,
    inv: Rc<Inventory>,
    id: u32,
}

impl Producer {
    /// A builder for a producer on `conn`.
    pub fn builder(conn: &Connection) -> ProducerBuilder {
        ProducerBuilder { conn: conn.clone(), tasks: DEFAULT_PRODUCER_TASKS }
    }

    /// The producer's id, which the consumer sees in [`Received::producer_id`].
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Writes `buf`'s bytes, with `imm` as immediate data, into the oldest buffer that
    /// consumer `consumer` posted, and completes once they are there; gives the buffer back
    /// either way. With no buffer posted it tries again until one is (see the
    /// [module documentation](self)).
    pub async fn send(&self, buf: Buf, consumer: u32, imm: &[u8]) -> (Result<()>, Buf) {
        const OP: &str = SEND_OP;
        if imm.len() > MAX_IMM_DATA {
            let e = Error::new(
                ErrorKind::InvalidArgument,
                format!("{OP}: {} immediate bytes (at most {MAX_IMM_DATA})", imm.len()),
            );
            return (Err(e), buf);
        }
        // The immediate bytes need an address that stays put while the task may read them:
        // boxed once per send that has any (none for the common send without), and kept by
        // the operation until its task is done.
        let mut imm_keep = (!imm.is_empty()).then(|| {
            let mut bytes = Box::new([0u8; MAX_IMM_DATA]);
            bytes[..imm.len()].copy_from_slice(imm);
            bytes
        });
        let (mut buf, mut tries) = (buf, 0u32);
        loop {
            let inner = &*self.inner;
            let producer = match inner.ctx.as_ptr() {
                Ok(p) => p,
                Err(e) => return (Err(e.context_prefix(OP)), buf),
            };
            let req = SendReq {
                ctx: &inner.ctx,
                producer,
                inv: &inner.inv,
                imm: imm_keep.as_ref().map_or(std::ptr::null_mut(), |b| b.as_ptr().cast_mut()),
                imm_len: imm.len() as u32,
                consumer,
            };
            let len = buf.len();
            let (r, (back, imm_back)) =
                HeldOp::new(inner.ctx.core(), &inner.pool, OP, req, None, len, (buf, imm_keep)).await;
            (buf, imm_keep) = (back, imm_back);
            match r {
                Err(e) if e.code().map(|c| c.0) == Some(sys::DOCA_ERROR_AGAIN) => {
                    // No buffer posted yet: not an error in DOCA's model; try again.
                    tries += 1;
                    if tries <= SEND_YIELDS {
                        crate::executor::yield_now().await;
                    } else {
                        crate::time::sleep(SEND_RETRY).await;
                    }
                }
                r => return (r.map(drop), buf),
            }
        }
    }
}

impl Producer {
    /// `depth` sends in flight to consumer `consumer` from fixed memory: `local` cut into
    /// `depth` equal lanes, each with its own send task, sending all its bytes
    /// ([`lane_len`](Lanes::lane_len)) as one message, with immediate bytes given per submit
    /// ([`LaneMut::submit_imm_bytes`](crate::lanes::LaneMut::submit_imm_bytes); none with
    /// [`submit`](crate::lanes::LaneMut::submit)). A lane that finds no buffer posted
    /// (DOCA's `AGAIN`) waits in order, with the lanes after it, and is tried again as
    /// [`send`](Producer::send) is (yielding, then every [`SEND_RETRY`]). See
    /// [`crate::lanes`] for how lanes behave.
    ///
    /// # Errors
    /// Those of [`crate::lanes`] (a `depth` of 0, a buffer that does not cut into `depth`
    /// lanes, a stopped producer, no descriptor left); each operation's, those of
    /// [`send`](Producer::send).
    pub fn lanes(&self, local: Buf, depth: usize, consumer: u32) -> Result<Lanes<'_>> {
        let inner = &*self.inner;
        // SAFETY: the send table on the producer's own context.
        unsafe { Lanes::with_peer(&inner.ctx, &inner.inv, consumer, &SEND_LANE, local, depth) }
    }
}

/// A producer send task over one source descriptor (its whole payload).
struct SendReq<'a> {
    ctx: &'a DocaCtx<sys::doca_comch_producer>,
    producer: *mut sys::doca_comch_producer,
    inv: &'a Inventory,
    imm: *mut u8,
    imm_len: u32,
    consumer: u32,
}

impl<I> HeldRequest<ProducerSend, (Buf, I)> for SendReq<'_> {
    /// The descriptor of the buffer the future owns (the immediate bytes, `I`, are the
    /// request's `imm`), then the held task pointed at it (unless it still points there) with
    /// its operands, a kept one re-initialised, or a fresh one.
    #[inline(always)]
    fn prepare(
        &mut self,
        slot: &TaskSlot,
        (buf, _): &(Buf, I),
    ) -> std::result::Result<*mut sys::doca_comch_producer_task_send, sys::doca_error_t> {
        let set = Descs::new(self.inv, slot.descs());
        let s = set.src(0, Desc::local(buf))?;
        let (imm, imm_len, consumer) = (self.imm, self.imm_len, self.consumer);
        // SAFETY: every parameter of a send is set (buffer, consumer, immediate bytes); a live
        // producer; `s` describes memory the operation owns until the task is done, and
        // `imm` `imm_len` bytes the operation keeps as long (NULL when 0).
        unsafe {
            // Every field of the task: a held one's (the producer's own) buffer unless it still
            // points at it, the rest always; a kept one's all.
            let bufs = |k| sys::doca_comch_producer_task_send_set_buf(k, s);
            let operands = |k| {
                sys::doca_comch_producer_task_send_set_consumer_id(k, consumer);
                sys::doca_comch_producer_task_send_set_imm_data(k, imm, imm_len);
            };
            self.ctx.reuse_held_or_alloc::<ProducerSend>(
                slot,
                set.changed(),
                bufs,
                operands,
                |_| {},
                |t| {
                    let rc = sys::doca_comch_producer_task_send_alloc_init(self.producer, s, imm, imm_len, consumer, t);
                    with_user_data::<ProducerSend>(rc, *t, slot)
                },
            )
        }
    }
}

// ---- lanes ----

/// `rc` of a task of kind `K` just allocated at `t` (an `*_alloc_init` without a user data
/// argument) for a lane: on success the task gets the lane's user data `ud`.
///
/// # Safety
/// On success `t` is the live task of kind `K` just allocated, nobody else's.
unsafe fn with_lane_data<K: DocaTask>(rc: sys::doca_error_t, t: *mut K::Task, ud: sys::doca_data) -> sys::doca_error_t {
    if rc == sys::DOCA_SUCCESS {
        // SAFETY: the caller's contract.
        unsafe { sys::doca_task_set_user_data(K::as_task(t), ud) };
    }
    rc
}

lane_task!(
    ProducerSend => ProducerSend,
    |a, ud, t| {
        // No immediate yet: `prepare` sets it before every submit.
        let rc = sys::doca_comch_producer_task_send_alloc_init(
            a.ctx.cast(),
            a.bufs[0],
            std::ptr::null_mut(),
            0,
            a.peer,
            t,
        );
        with_lane_data::<ProducerSend>(rc, *t, ud)
    },
    |t, l, _r| {
        sys::doca_comch_producer_task_send_set_buf(t, l);
    },
    |t, _l, _r, o| {
        // The immediate bytes are the operands' first two words, their count the third; the
        // operands live in the lanes' memory as long as the task may read them.
        let len = o.get()[2] as u32;
        let imm = if len == 0 { std::ptr::null_mut() } else { o.as_ptr().cast::<u8>() };
        sys::doca_comch_producer_task_send_set_imm_data(t, imm, len);
    }
);
lane_task!(
    PostRecv => PostRecv,
    |a, ud, t| {
        let rc = sys::doca_comch_consumer_task_post_recv_alloc_init(a.ctx.cast(), a.bufs[0], t);
        with_lane_data::<PostRecv>(rc, *t, ud)
    },
    |t, l, _r| {
        sys::doca_comch_consumer_task_post_recv_set_buf(t, l);
    },
    |_t, l, _r, _o| {
        sys::doca_buf_reset_data_len(l);
    }
);

// The lanes carry a send's immediate bytes in two operand words (`LaneMut::submit_imm_bytes`).
const _: () = assert!(MAX_IMM_DATA == 16);

// A send reads its lane (all its bytes) and its AGAIN means no buffer posted; a receive
// writes its lane.
static SEND_LANE: LaneKind = LaneKind::of::<ProducerSend>(SEND_OP, Operands::ImmBytes, true, Remote::None)
    .again_from_peer(SEND_YIELDS, SEND_RETRY);
static RECV_LANE: LaneKind = LaneKind::of::<PostRecv>(RECV_OP, Operands::None, false, Remote::None);

impl fmt::Debug for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("comch::fast::Producer").field("id", &self.inner.id).field("ctx", &self.inner.ctx).finish()
    }
}

// Not under Miri: Comch over the provider.
#[cfg(all(test, not(miri)))]
#[path = "fast_lanes_tests.rs"]
mod lanes_tests;
