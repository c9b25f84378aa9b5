//! DMA (`doca_dma_*`): a ctx kind with one task, memcpy, between memory the device can reach.
//!
//! # Model
//!
//! A `doca_dma` is a ctx kind (see `ctx.rs`) with a synchronous start and no state of its own
//! beyond its task pool. A memcpy task copies the **payload** of its source buffer (data,
//! data_len) into the **free space after the destination's payload** and grows the
//! destination's data_len by the bytes copied, as DOCA documents. Either buffer may be over:
//!
//! * a local mmap of this process (the destination needs `DOCA_ACCESS_FLAG_LOCAL_READ_WRITE`);
//! * an mmap created from a `doca_mmap_export_pci` blob of another process (or this one): the
//!   host/DPU pattern, where the DPU side imports host memory and copies in and out of it. The
//!   copy goes through the import's `RemoteRegion` (shared memory or `process_vm_*`) with its
//!   range, permission (`PCI_READ_ONLY`/`PCI_READ_WRITE`) and key checks. An mmap imported
//!   from an *RDMA* export is refused (`DOCA_ERROR_NOT_PERMITTED`): DMA reaches memory over
//!   PCIe, not over the network.
//!
//! Remote to remote goes through a bounce buffer of [`BOUNCE_BYTES`].
//!
//! **Buffer lists.** Either buffer may be the first element of a list (`buf/list.rs`) of up to
//! [`MAX_BUF_LIST_LEN`] elements: the source's payloads are gathered in element order and
//! scattered into the room after each destination element's payload, one element filled
//! before the next, each element's data_len growing by what it received (`dma/copy.rs`). This
//! is what NVIDIA's DMA samples rely on: they cut a region into segments, chain them, copy
//! and read the destination region back whole. Elements of one list may lie in different
//! mmaps, local or imported.
//!
//! **When the copy happens.** There is no copy engine here: the submitting thread copies
//! inside `doca_task_submit`, and the completion (success or error) is delivered by a later
//! `doca_pe_progress`, like every completion of this provider. A copy thus never overlaps the
//! thread that submitted it; it does overlap everything else (other processes, other PEs).
//!
//! # Errors (decisions; hardware may differ in the code)
//! * Submit fails (the task stays with the caller): NULL source or destination
//!   (`INVALID_VALUE`), a buffer already returned to its inventory (`BAD_STATE`), a list
//!   longer than [`MAX_BUF_LIST_LEN`] (`INVALID_VALUE`, logged), a payload larger than
//!   [`MAX_BUF_SIZE`] (`TOO_BIG`).
//! * The task completes through its error callback: the destination lacks room for the payload
//!   or a range is outside its mmap (`INVALID_VALUE`), a local destination without
//!   LOCAL_READ_WRITE, a remote side exported without the needed PCI right, or an import of
//!   an RDMA export (`NOT_PERMITTED`), the exporting process gone (`CONNECTION_ABORTED`: seen
//!   within `OWNER_RECHECK`, 1 ms, and a tick of the coarse clock, see `mmap/liveness.rs`)
//!   or its export revoked (`NOT_PERMITTED`). The destination's data_len grows only on
//!   success, and every check runs before the first byte moves.
//! * A failed copy stops the ctx, as DOCA's DMA does (NVIDIA's `pe_task_error` sample says the
//!   context moves to STOPPING when a task fails and every later task fails; `pe_async_stop`
//!   says the same of DMA errors, and both wait for STOPPING → IDLE). Copies submitted after the failed one still submit successfully and complete
//!   with `FLUSH_STATUS` (`DOCA_ERROR_SHUTDOWN`), without touching memory; the next progress
//!   reports RUNNING → STOPPING before it delivers any completion (the failed copy's
//!   callback finds the ctx STOPPING); the ctx is IDLE once every task is freed, and may be
//!   started again (`ctx::mark_failed`).
//! * An empty source (data_len 0) fails (`INVALID_VALUE`), as on hardware.
//! * Allocation: the framework's BAD_STATE (not RUNNING), NOT_SUPPORTED (never configured),
//!   NO_MEMORY (pool exhausted).
//!
//! # Threads
//! As in DOCA: a `doca_dma` and its tasks are used on the thread of its PE.

use core::cell::Cell;
use core::ptr;

use crate::buf::{buf_ref, doca_buf};
use crate::ctx::{doca_ctx, CtxOps, StartMode, FLUSH_STATUS};
use crate::dev::{dev_ref, devinfo_ref, doca_dev, doca_devinfo, DevRef};
use crate::ffi::{guard, guard_err, obj, out};
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

/// The largest single copy (`doca_dma_cap_task_memcpy_get_max_buf_size`): 1 GiB, the same
/// bound as RDMA transfers here. A software choice; hardware reports its own value.
pub const MAX_BUF_SIZE: u64 = 1 << 30;
/// `doca_dma_cap_task_memcpy_get_max_buf_list_len`: the most elements the source list, and
/// the destination list, of one copy may have. A software choice (the copy walks the lists
/// once); NVIDIA's DMA samples check `num_src_buf + num_dst_buf` against it, 2 by default.
pub const MAX_BUF_LIST_LEN: u32 = 32;
/// `doca_dma_cap_get_max_num_tasks`: the largest task pool one `set_conf` may ask for.
pub const MAX_NUM_TASKS: u32 = 1 << 16;
/// The bounce buffer of a remote-to-remote copy.
pub const BOUNCE_BYTES: usize = 1 << 20;

/// `"DMA!"`: marks a live `doca_dma`.
const DMA_MAGIC: u32 = 0x444d_4121;

/// `struct doca_dma`.
#[repr(C)]
pub struct doca_dma {
    ctx: doca_ctx,
    magic: u32,
    _dev: DevRef,
}

/// `struct doca_dma_task_memcpy`.
#[repr(C)]
pub struct doca_dma_task_memcpy {
    base: doca_task,
    src: Cell<*const doca_buf>,
    dst: Cell<*mut doca_buf>,
}

static MEMCPY_KIND: TaskKind = TaskKind::new::<doca_dma_task_memcpy>("dma.memcpy", submit_memcpy, None, None);

// SAFETY: #[repr(C)] with the header first; KIND is built for this type.
unsafe impl TaskType for doca_dma_task_memcpy {
    const KIND: &'static TaskKind = &MEMCPY_KIND;
    fn with_header(base: doca_task) -> Self {
        doca_dma_task_memcpy { base, src: Cell::new(ptr::null()), dst: Cell::new(ptr::null_mut()) }
    }
}

static DMA_CTX_OPS: CtxOps = CtxOps {
    name: "dma",
    can_connect: None,
    start: dma_start,
    stop: dma_stop,
    stopped: None,
    progress: None,
    has_work: None,
    stop_via_progress: false,
};

unsafe fn dma_start(_ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    Ok(StartMode::Sync)
}

unsafe fn dma_stop(_ctx: &doca_ctx) {
    // Copies finish inside submit: the kind never holds a submitted task.
}

/// The dma behind `p`: INVALID_VALUE for NULL or a foreign object.
///
/// # Safety
/// A non-NULL `p` must point to a `doca_dma` of this provider (the DOCA contract).
unsafe fn dma_ref<'a>(p: *const doca_dma) -> Result<&'a doca_dma, doca_error_t> {
    // SAFETY: per the contract.
    let d = unsafe { obj(p) }?;
    if d.magic != DMA_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(d)
}

unsafe fn submit_memcpy(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: this hook is only registered for the memcpy kind.
    let x = unsafe { t.downcast::<doca_dma_task_memcpy>() };
    // SAFETY: buffer pointers come from this provider's inventories and the caller keeps them
    // alive while the task exists (DOCA contract); buf_ref rejects NULL and returned buffers.
    let src = unsafe { buf_ref(x.src.get()) }?;
    // SAFETY: as above.
    let dst = unsafe { buf_ref(x.dst.get()) }?;
    copy::check_sizes(src, dst)?;
    let ctx = t.ctx();
    if ctx.failing() {
        // An earlier copy failed and progress has not stopped the ctx yet: on hardware this
        // copy would be flushed with the queue; so here, without touching memory.
        task::complete(t, FLUSH_STATUS);
        return Ok(());
    }
    let status = match copy::copy(src, dst) {
        Ok(()) => DOCA_SUCCESS,
        Err(e) => {
            crate::ctx::mark_failed(ctx);
            e
        }
    };
    task::complete(t, status);
    Ok(())
}

// ---- entry points ----

#[no_mangle]
pub unsafe extern "C" fn doca_dma_create(dev: *mut doca_dev, dma: *mut *mut doca_dma) -> doca_error_t {
    guard_err(|| {
        let d = dev_ref(dev)?;
        if dma.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let raw = Box::into_raw(Box::new(doca_dma { ctx: doca_ctx::new(&DMA_CTX_OPS), magic: DMA_MAGIC, _dev: d }));
        // SAFETY: `raw` was just created from a Box; only shared access follows.
        unsafe { (*raw).ctx.bind_owner(raw) };
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(dma, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_destroy(dma: *mut doca_dma) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL dma pointers come from doca_dma_create (DOCA contract).
        let d = unsafe { dma_ref(dma) }?;
        // DOCA documents IN_USE for a dma that is still in use (not IDLE, or with tasks).
        d.ctx.teardown().map_err(|_| DOCA_ERROR_IN_USE)?;
        // SAFETY: created by Box::into_raw in create; IDLE, no task allocated, disconnected
        // from its PE: nothing references it any more. Freed once (the magic is cleared).
        let mut b = unsafe { Box::from_raw(dma) };
        b.magic = 0;
        drop(b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_as_ctx(dma: *mut doca_dma) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in doca_dma_destroy.
        match unsafe { dma_ref(dma) } {
            // SAFETY: `dma` is live; the field address stays valid for its life.
            Ok(_) => unsafe { ptr::addr_of_mut!((*dma).ctx) },
            Err(_) => ptr::null_mut(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_cap_task_memcpy_is_supported(devinfo: *const doca_devinfo) -> doca_error_t {
    guard_err(|| {
        // Every soft device can copy (the CPU is the engine).
        devinfo_ref(devinfo)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_cap_get_max_num_tasks(dma: *mut doca_dma, max_num_tasks: *mut u32) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_dma_destroy.
        unsafe { dma_ref(dma) }?;
        // SAFETY: NULL is rejected; otherwise writable by the caller's contract.
        unsafe { out(max_num_tasks, MAX_NUM_TASKS) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_cap_task_memcpy_get_max_buf_list_len(
    devinfo: *const doca_devinfo,
    max_buf_list_len: *mut u32,
) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        // SAFETY: as in doca_dma_cap_get_max_num_tasks.
        unsafe { out(max_buf_list_len, MAX_BUF_LIST_LEN) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_cap_task_memcpy_get_max_buf_size(
    devinfo: *const doca_devinfo,
    buf_size: *mut u64,
) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        // SAFETY: as in doca_dma_cap_get_max_num_tasks.
        unsafe { out(buf_size, MAX_BUF_SIZE) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_task_memcpy_set_conf(
    dma: *mut doca_dma,
    task_completion_cb: doca_dma_task_memcpy_completion_cb_t,
    task_error_cb: doca_dma_task_memcpy_completion_cb_t,
    num_memcpy_tasks: u32,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_dma_destroy.
        let d = unsafe { dma_ref(dma) }?;
        if num_memcpy_tasks > MAX_NUM_TASKS {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        task::set_conf::<doca_dma_task_memcpy>(&d.ctx, task_completion_cb, task_error_cb, num_memcpy_tasks)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_task_memcpy_alloc_init(
    dma: *mut doca_dma,
    src: *const doca_buf,
    dst: *mut doca_buf,
    user_data: doca_data,
    task: *mut *mut doca_dma_task_memcpy,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_dma_destroy.
        let d = unsafe { dma_ref(dma) }?;
        if task.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // The buffers are checked at submit (they may be set or changed until then).
        let t = task::alloc::<doca_dma_task_memcpy>(&d.ctx, user_data)?;
        // SAFETY: a freshly allocated slot of this ctx's pool.
        let x = unsafe { t.as_ref() };
        x.src.set(src);
        x.dst.set(dst);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(task, t.as_ptr()) }
    })
}

/// The memcpy task behind `p`, checked to be one (NULL or another kind: None).
///
/// # Safety
/// A non-NULL `p` must point to a task handed out by this provider.
unsafe fn memcpy_ref<'a>(p: *const doca_dma_task_memcpy) -> Option<&'a doca_dma_task_memcpy> {
    // SAFETY: per the contract, a non-NULL pointer is a task header of a live ctx.
    let h = unsafe { task::task_ref(p.cast::<doca_task>()) }.ok()?;
    if !h.is::<doca_dma_task_memcpy>() {
        return None;
    }
    // SAFETY: the kind was checked just above.
    Some(unsafe { h.downcast::<doca_dma_task_memcpy>() })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_task_memcpy_as_task(task: *mut doca_dma_task_memcpy) -> *mut doca_task {
    // The header is the first field: the conversion is a cast (NULL stays NULL).
    task.cast()
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_task_memcpy_set_src(task: *mut doca_dma_task_memcpy, src: *const doca_buf) {
    guard((), || {
        // SAFETY: the caller passes a task of this provider (DOCA contract).
        if let Some(t) = unsafe { memcpy_ref(task) } {
            t.src.set(src);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_task_memcpy_get_src(task: *const doca_dma_task_memcpy) -> *const doca_buf {
    guard(ptr::null(), || {
        // SAFETY: as in doca_dma_task_memcpy_set_src.
        unsafe { memcpy_ref(task) }.map_or(ptr::null(), |t| t.src.get())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_task_memcpy_set_dst(task: *mut doca_dma_task_memcpy, dst: *mut doca_buf) {
    guard((), || {
        // SAFETY: as in doca_dma_task_memcpy_set_src.
        if let Some(t) = unsafe { memcpy_ref(task) } {
            t.dst.set(dst);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_task_memcpy_get_dst(task: *const doca_dma_task_memcpy) -> *mut doca_buf {
    guard(ptr::null_mut(), || {
        // SAFETY: as in doca_dma_task_memcpy_set_src.
        unsafe { memcpy_ref(task) }.map_or(ptr::null_mut(), |t| t.dst.get())
    })
}

/// `struct doca_gpu_dma`: never created here (no GPU).
#[repr(C)]
pub struct doca_gpu_dma {
    _private: [u8; 0],
}

#[no_mangle]
pub unsafe extern "C" fn doca_dma_get_gpu_handle(dma: *mut doca_dma, gpu_dma: *mut *mut doca_gpu_dma) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_dma_destroy.
        unsafe { dma_ref(dma) }?;
        if gpu_dma.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // The soft provider has no GPU (GPUNetIO) data path.
        Err(DOCA_ERROR_NOT_SUPPORTED)
    })
}

mod copy;

#[cfg(test)]
mod tests;
