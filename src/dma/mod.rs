//! DMA as futures: memcpy between registered memory and memory on the other side of PCIe.
//!
//! A [`Dma`] is one DOCA DMA context on the current executor. Its one operation,
//! [`memcpy`](Dma::memcpy), copies all of a source into the start of a destination. Each side
//! is either a local [`Buf`] (memory this process registered with [`Device::alloc`]) or a
//! [`RemoteSlice`] of memory another process exported with [`Memory::export_pci`](crate::mem::Memory::export_pci) and this one
//! opened with [`Device::import`]: the host/DPU pattern, where the host exports a buffer and
//! the DPU program copies it in, computes, and copies a result back.
//!
//! | source | destination | typical use |
//! | --- | --- | --- |
//! | [`RemoteSlice`] | [`Buf`] | the DPU reads host memory in |
//! | [`Buf`] | [`RemoteSlice`] | the DPU writes a result back to the host |
//! | [`Buf`] | [`Buf`] | local copy (the PE samples' pattern) |
//! | [`RemoteSlice`] | [`RemoteSlice`] | host to host, through the DPU |
//!
//! # Owned buffers and cancellation
//! As in [`rdma`](crate::rdma): `memcpy` takes both sides by value and gives them back with the
//! result, `(Result<()>, S, D)`, whether the copy succeeded or not. Dropping the future of a
//! copy in flight does not cancel it (DOCA has no per-task cancel) and frees nothing: the
//! memory and its `doca_buf` descriptors stay alive until the completion (or the context's
//! flush) arrives.
//!
//! # Pipelining and back-pressure
//! Any number of copies may be in flight. On fixed memory, [`Dma::lanes`] keeps `depth`
//! copies in flight, each lane holding its task (the path for message rate, see
//! [`Lanes`]). With any memory, keep many copy futures in one task with an
//! [`rdma::Pipeline`](crate::rdma::Pipeline) (the cheap way; the copy future,
//! [`MemcpyFuture`], is a named `Unpin` type, so a struct can hold it too), spawn them, or
//! poll several futures at once. The task pool ([`DmaBuilder::max_tasks`]) and the descriptor inventory
//! ([`DmaBuilder::descriptors`]) bound them; when either is exhausted the next copy waits for
//! a completion instead of failing. The context keeps the tasks its copies run on (one per
//! copy in flight at once; see [`crate::rdma`]'s "Tasks"), re-pointed at each copy's
//! regions rather than freed, and the descriptors of slices copied before are lent again by
//! their memory (see [`crate::mem`]): copying from and into the same slices again allocates
//! nothing.
//!
//! # Errors
//! Failures are [`Error`]s named `"dma.memcpy"` with DOCA's code. Checked here before
//! anything is submitted: a destination shorter than the source
//! ([`ErrorKind::InvalidArgument`]). From DOCA: a local destination without
//! [`Access::LOCAL_READ_WRITE`](crate::mem::Access::LOCAL_READ_WRITE), remote memory exported without the needed `PCI_*` right, or
//! memory imported from an *RDMA* export ([`ErrorKind::PermissionDenied`]); an exporter that
//! is gone ([`ErrorKind::ConnectionLost`]); a copy larger than the device's
//! [`max_copy_size`](Dma::max_copy_size) ([`ErrorKind::InvalidArgument`], DOCA's TOO_BIG).
//! A copy that fails in DOCA stops its context, as DOCA's DMA does (NVIDIA's PE samples
//! rely on it): the copies in flight with it fail too, with [`ErrorKind::Cancelled`] (DOCA
//! flushes them; a copy submitted in the same batch, a lane among them, may fail that way),
//! and the `Dma` starts its context again as soon as it is idle. Copies started after the
//! failure wait for that restart and then run normally, so one bad copy costs only the copies
//! that were in flight beside it.
//!
//! With the soft provider the thread that submits a copy performs it (there is no copy
//! engine), so a copy does not overlap the executor thread that issued it; it overlaps every
//! other thread and process. On a BlueField the DMA engine does the work.
//!
//! # Threads
//! `Dma` is `!Send` (a cheap `Rc` clone): a DOCA context, its tasks and buffers belong to
//! the executor that created it. The export blob is plain bytes: send it anywhere.
//!
//! ```
//! use async_doca::dma::Dma;
//! use async_doca::{Access, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     // "Host" memory, exported over PCIe; normally the blob goes to the DPU program.
//!     let host = dev.alloc(4096, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
//!     host.slice(0..5).write(0, b"hello");
//!     let remote = dev.import(&host.export_pci()?)?;
//!
//!     // The "DPU" side: copy in, then a result back.
//!     let dma = Dma::builder(&dev).build().await?;
//!     let local = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
//!     let (res, _src, dst) = dma.memcpy(remote.slice(0..5), local.slice(0..5)).await;
//!     res?;
//!     assert_eq!(dst.to_vec(), b"hello");
//!     let (res, _src, _dst) = dma.memcpy(dst, remote.slice(100..105)).await;
//!     res?;
//!     assert_eq!(host.slice(100..105).to_vec(), b"hello");
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};

use crate::device::Device;
use crate::error::{check, Error, ErrorKind, Result};
use crate::executor::completion::{HeldOp, HeldPool, HeldRequest};
use crate::ext::DocaCtx;
use crate::ext::{completion_cb, success_cb, DocaTask, TaskSlot};
use crate::mem::descriptors::{Descs, Inventory};
use crate::mem::{Buf, RemoteSlice};
use crate::sys;

mod lanes;

pub use self::lanes::LaneOp;
pub use crate::lanes::{Batch, BatchFuture, LaneFuture, LaneMut, Lanes, NextFuture};

/// Default task-pool size (copies in flight at once).
pub const DEFAULT_MAX_TASKS: u32 = 256;

/// The memcpy task. Completed ones are kept on their context for the next copy (see
/// [`DocaTask::REUSE`]), which re-initialises every field: source, destination, user data.
struct Memcpy;
// SAFETY: `as_task` is the task type's own conversion; memcpy tasks are freed with
// doca_task_free (the default).
unsafe impl DocaTask for Memcpy {
    type Task = sys::doca_dma_task_memcpy;
    const REUSE: Option<usize> = Some(0);
    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
        // SAFETY: forwarded; the caller passes a live memcpy task.
        unsafe { sys::doca_dma_task_memcpy_as_task(task) }
    }
}

// ---- the two sides of a copy ----

// The trait is unreachable from outside the crate (sealed), so `Desc` never escapes.
#[allow(private_interfaces)]
mod sealed {
    use crate::mem::descriptors::Desc;

    /// The part of [`Region`](super::Region) only this crate implements and calls.
    pub trait Sealed {
        fn desc(&self) -> Desc;
    }

    impl Sealed for crate::mem::Buf {
        fn desc(&self) -> Desc {
            Desc::local(self)
        }
    }

    impl Sealed for crate::mem::RemoteSlice {
        fn desc(&self) -> Desc {
            Desc::remote(self)
        }
    }
}

/// One side of a copy: a local [`Buf`] or a [`RemoteSlice`] of imported memory. Sealed.
pub trait Region: sealed::Sealed + 'static {}

impl Region for Buf {}

impl Region for RemoteSlice {}

// ---- the context ----

/// Configures and creates a [`Dma`] context.
///
/// ```
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::{dma::Dma, Device};
/// let dev = Device::open_default()?;
/// let dma = Dma::builder(&dev).max_tasks(64).build().await?;
/// assert!(dma.max_copy_size()? >= 1 << 20);
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build() is awaited"]
pub struct DmaBuilder {
    dev: Device,
    max_tasks: u32,
    descriptors: Option<usize>,
}

impl DmaBuilder {
    /// The task pool: copies in flight at once (default 256). More copies wait for a free
    /// task (back-pressure), they do not fail.
    pub fn max_tasks(mut self, n: u32) -> Self {
        self.max_tasks = n;
        self
    }

    /// How many `doca_buf` descriptors the context keeps (default: two per task plus a
    /// margin). A copy needs two, and first borrows them from its memory's own cache (see
    /// [`crate::mem`]); the context's serve copies whose cache has none to lend. When none
    /// is free the copy waits like for a task.
    pub fn descriptors(mut self, n: usize) -> Self {
        self.descriptors = Some(n);
        self
    }

    /// Creates the context on the current executor and starts it.
    ///
    /// # Errors
    /// Outside an executor ([`ErrorKind::BadState`]), a zero pool
    /// ([`ErrorKind::InvalidArgument`]), a device without DMA memcpy
    /// ([`ErrorKind::NotSupported`]), or what DOCA refuses (with its code).
    pub async fn build(self) -> Result<Dma> {
        if self.max_tasks == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, "dma: max_tasks must be >= 1"));
        }
        check(
            // SAFETY: the device is open; its devinfo lives as long as it.
            unsafe { sys::doca_dma_cap_task_memcpy_is_supported(sys::doca_dev_as_devinfo(self.dev.as_ptr())) },
            "dma: memcpy capability",
        )?;
        let descriptors = self.descriptors.unwrap_or(2 * self.max_tasks as usize + 16).max(2);
        let mut dma = std::ptr::null_mut();
        // SAFETY: the device is open; valid out-pointer. Ownership passes to DocaCtx below.
        check(unsafe { sys::doca_dma_create(self.dev.as_ptr(), &mut dma) }, "dma: doca_dma_create")?;
        let keep_dev = self.dev.clone();
        // SAFETY: `dma` is live, fresh, of this thread, destroyed only by the DocaCtx; its ctx
        // is IDLE and unconnected. The closure keeps the device open until then.
        let ctx = unsafe {
            DocaCtx::new("dma", dma, sys::doca_dma_as_ctx(dma), move |d| {
                let rc = sys::doca_dma_destroy(d);
                drop(keep_dev);
                rc
            })
        }?;
        check(
            // SAFETY: `dma` is live and IDLE; the callbacks have the exact C signature.
            unsafe {
                sys::doca_dma_task_memcpy_set_conf(
                    dma,
                    Some(success_cb::<Memcpy>),
                    Some(completion_cb::<Memcpy>),
                    self.max_tasks,
                )
            },
            "dma: configure memcpy tasks",
        )?;
        let inv = Rc::new(Inventory::new(descriptors, "dma")?);
        // DOCA stops a DMA context when a copy fails; started again, it serves the next ones.
        ctx.restart_after_errors();
        ctx.start().await?;
        let pool = HeldPool::new(ctx.record(), inv.clone());
        Ok(Dma { inner: Rc::new(DmaInner { pool, ctx, inv, dev: self.dev }) })
    }
}

struct DmaInner {
    /// The tasks the context's copies run on (see `completion::held_op`). Before `ctx`: its
    /// idle tasks go back before the context is stopped.
    pool: HeldPool,
    ctx: DocaCtx<sys::doca_dma>,
    inv: Rc<Inventory>,
    dev: Device,
}

/// A DMA context on the current executor (see the [module documentation](self)).
///
/// Cloning shares the context. Dropping the last handle stops it: copies still in flight
/// are flushed and their memory released once DOCA is done.
#[derive(Clone)]
pub struct Dma {
    inner: Rc<DmaInner>,
}

impl Dma {
    /// A builder for a context on `dev`.
    pub fn builder(dev: &Device) -> DmaBuilder {
        DmaBuilder { dev: dev.clone(), max_tasks: DEFAULT_MAX_TASKS, descriptors: None }
    }

    /// The device of the context.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// The largest single copy the device supports, in bytes.
    pub fn max_copy_size(&self) -> Result<u64> {
        let mut n = 0u64;
        check(
            // SAFETY: the device is open; valid out-pointer.
            unsafe {
                sys::doca_dma_cap_task_memcpy_get_max_buf_size(
                    sys::doca_dev_as_devinfo(self.inner.dev.as_ptr()),
                    &mut n,
                )
            },
            "dma: max copy size",
        )?;
        Ok(n)
    }

    /// `depth` copies in flight on fixed memory: `local` and the imported slice of `op` cut
    /// into `depth` equal lanes, each with its own task, submitted again as it is. The path
    /// for message rate when the memory is known up front: a copy through a lane costs
    /// about what it costs a C program that keeps its tasks, where each [`memcpy`](Dma::memcpy)
    /// pays for its descriptors and for re-pointing its task. See [`Lanes`].
    ///
    /// ```
    /// use async_doca::dma::{Dma, LaneOp};
    /// use async_doca::{Access, Device, Runtime};
    ///
    /// Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
    ///     let dev = Device::open_default()?;
    ///     // "Host" memory of 16 records of 64 bytes, exported over PCIe.
    ///     let host = dev.alloc(16 * 64, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
    ///     for k in 0..16 {
    ///         host.buf().write_u64(k * 64, k as u64);
    ///     }
    ///     let remote = dev.import(&host.export_pci()?)?;
    ///     let dma = Dma::builder(&dev).build().await?;
    ///     let local = dev.alloc(16 * 64, Access::LOCAL_READ_WRITE)?;
    ///
    ///     // Copy the 16 records in at once: lane k brings record k.
    ///     let mut lanes = dma.lanes(LaneOp::CopyIn(remote.slice(..)), local.buf(), 16)?;
    ///     let mut batch = lanes.batch().await;
    ///     while let Some((_, lane)) = batch.lane() {
    ///         lane.submit();
    ///     }
    ///     let mut sum = 0;
    ///     while let Some((res, lane)) = lanes.next().await {
    ///         res?;
    ///         sum += lane.buf().read_u64(0);
    ///     }
    ///     assert_eq!(sum, (0..16u64).sum::<u64>());
    ///     Ok::<(), async_doca::Error>(())
    /// })?;
    /// # Ok::<(), async_doca::Error>(())
    /// ```
    ///
    /// # Errors
    /// As in [`Lanes`]' module documentation (the buffer does not make `depth` equal lanes,
    /// an imported slice shorter than it, a destroyed context, no descriptor left); each
    /// copy's result carries [`memcpy`](Dma::memcpy)'s errors.
    pub fn lanes(&self, op: LaneOp, local: Buf, depth: usize) -> Result<Lanes<'_>> {
        lanes::on_dma(self, op, local, depth)
    }

    /// Copies all of `src` to the start of `dst` and gives both back with the result.
    ///
    /// `dst` must be at least as long as `src` (else [`ErrorKind::InvalidArgument`], and
    /// nothing is submitted). An empty `src` completes at once. See the
    /// [module documentation](self) for the errors DOCA reports and for cancellation.
    // Inlined so the future is built in the caller's frame (see
    // `TaskFuture::with_buffers_traced`).
    #[inline]
    pub fn memcpy<S: Region, D: Region>(&self, src: S, dst: D) -> MemcpyFuture<'_, S, D> {
        const OP: &str = "dma.memcpy";
        let (s, d) = (src.desc(), dst.desc());
        if d.len < s.len {
            let e = Error::new(
                ErrorKind::InvalidArgument,
                format!("{OP}: destination of {} bytes is shorter than the source ({} bytes)", d.len, s.len),
            );
            return MemcpyFuture(Copy::Ready(Some((Err(e), src, dst))));
        }
        if s.len == 0 {
            return MemcpyFuture(Copy::Ready(Some((Ok(()), src, dst))));
        }
        let dma = match self.inner.ctx.as_ptr() {
            Ok(p) => p,
            Err(e) => return MemcpyFuture(Copy::Ready(Some((Err(e.context_prefix(OP)), src, dst)))),
        };
        let inner = &*self.inner;
        let req = MemcpyReq { dma, ctx: &inner.ctx, inv: &inner.inv };
        // A future dropped mid-flight leaves the regions to its held task's group, which keeps
        // them (and the inventory of their descriptors) until DOCA is done.
        let fut = HeldOp::new(inner.ctx.core(), &inner.pool, OP, req, None, s.len, (src, dst));
        MemcpyFuture(Copy::Running(fut))
    }
}

/// What a copy's task is made of: the context (its kept tasks), its DOCA object and its
/// inventory; the descriptors are made from the regions the operation owns when it prepares
/// its task.
struct MemcpyReq<'a> {
    dma: *mut sys::doca_dma,
    ctx: &'a DocaCtx<sys::doca_dma>,
    inv: &'a Inventory,
}

impl<S: Region, D: Region> HeldRequest<Memcpy, (S, D)> for MemcpyReq<'_> {
    /// Takes the two descriptors of the regions the future owns (source with its whole
    /// payload, destination empty), then points the held task at them (unless it still
    /// points there), or re-initialises a task kept for reuse with them, or allocates one.
    #[inline(always)]
    fn prepare(
        &mut self,
        slot: &TaskSlot,
        (src, dst): &(S, D),
    ) -> std::result::Result<*mut sys::doca_dma_task_memcpy, sys::doca_error_t> {
        let (s, d) = (src.desc(), dst.desc());
        let set = Descs::new(self.inv, slot.descs());
        let src = set.get(0, s, s.len)?;
        let dst = set.get(1, d, 0)?;
        // SAFETY: both fields of a memcpy task are set; live context; the buffers describe
        // memory the operation owns until the task is done.
        unsafe {
            // Every field of the task: a held one's (the context's own) unless it still points
            // at these buffers, a kept one's always.
            let bufs = |k| {
                sys::doca_dma_task_memcpy_set_src(k, src);
                sys::doca_dma_task_memcpy_set_dst(k, dst);
            };
            self.ctx.reuse_held_or_alloc::<Memcpy>(
                slot,
                set.changed(),
                bufs,
                |_| {},
                |_| {},
                |t| sys::doca_dma_task_memcpy_alloc_init(self.dma, src, dst, slot.user_data(), t),
            )
        }
    }
}

enum Copy<'a, S: Region, D: Region> {
    /// Decided before anything was submitted (a failed check, or an empty source):
    /// resolves at the first poll.
    Ready(Option<(Result<()>, S, D)>),
    Running(HeldOp<'a, Memcpy, MemcpyReq<'a>, (S, D)>),
}

/// The future of [`Dma::memcpy`]: resolves to `(Result<()>, src, dst)`.
///
/// The future is lazy: nothing is allocated or submitted before its first poll. A check that
/// fails before submission resolves at the first poll, with both regions given back and
/// nothing submitted. Dropping the future before it is polled drops the regions; dropping
/// it while the copy is in flight does not cancel it (DOCA has no per-task cancel): the
/// result is discarded, and the memory DOCA may touch (both regions, their registrations and
/// the `doca_buf` descriptors) stays alive until DOCA is done with it.
///
/// A named, `Unpin` type (it can be stored in a struct and polled with `Pin::new`); it
/// borrows the [`Dma`] it was created from.
#[must_use = "a DOCA operation does nothing unless awaited; once submitted, dropping it discards the result but cannot cancel the task"]
pub struct MemcpyFuture<'a, S: Region, D: Region>(Copy<'a, S, D>);

// Nothing in it is structurally pinned: the regions are only moved in and out (and both
// region types are `Unpin` anyway), and the task future is `Unpin`.
impl<S: Region, D: Region> Unpin for MemcpyFuture<'_, S, D> {}

impl<S: Region, D: Region> Future for MemcpyFuture<'_, S, D> {
    type Output = (Result<()>, S, D);

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Copy::Ready(r) => Poll::Ready(r.take().expect("MemcpyFuture polled after completion")),
            Copy::Running(f) => {
                let (r, (src, dst)) = ready!(Pin::new(f).poll(cx));
                Poll::Ready((r.map(drop), src, dst))
            }
        }
    }
}

impl<S: Region, D: Region> fmt::Debug for MemcpyFuture<'_, S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Copy::Ready(Some((r, _, _))) => f.debug_tuple("MemcpyFuture").field(r).finish(),
            Copy::Ready(None) => f.write_str("MemcpyFuture(finished)"),
            Copy::Running(t) => f.debug_tuple("MemcpyFuture").field(t).finish(),
        }
    }
}

impl fmt::Debug for Dma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dma").field("ctx", &self.inner.ctx).finish()
    }
}
