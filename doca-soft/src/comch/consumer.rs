//! The fast path's consumer (`doca_comch_consumer.h`): a ctx on a comch connection that posts
//! receive buffers a producer on the other side fills.
//!
//! # Model
//!
//! * **Create** on a connected connection and a started local mmap (the one its receive
//!   buffers come from): the consumer gets its id (unique on the connection, from 1) and holds
//!   the connection until it is destroyed.
//! * **Start** (`IN_PROGRESS`, as NVIDIA's sample expects; RUNNING at the next progress):
//!   creates its receive queue in shared memory (`fastq.rs`) with one slot per task of its
//!   pool, exports its mmap the way `doca_mmap_export_pci` does, and announces both to the
//!   peer in a CONSUMER_NEW record on the connection (`wire.rs`). The peer's server or client
//!   reports it through its new-consumer event when its PE is progressed.
//! * **Post** (`post_recv` task submit): the buffer's free space (after its data) goes to a
//!   slot of the queue. A producer of the peer claims the oldest posted slot, writes its
//!   buffer's data there through the export, writes its id and immediate data into the slot
//!   and rings this consumer's PE.
//! * **Complete**: progress completes post-receive tasks in posting order as their slots are
//!   finished: the buffer's data_len grows by the bytes received, and the producer id and
//!   immediate data are the task's results.
//! * **Stop** closes the queue (later claims fail), waits (bounded) for a producer that is
//!   writing into a claimed buffer right now, tells the peer (CONSUMER_GONE: its expired
//!   event), and the posted tasks are flushed.
//!
//! # Threads
//! As in DOCA, a consumer is used on one thread, with its own PE: the thread of its
//! connection's server or client, or another one (a consumer per thread over one connection).
//! On another thread its start's announcement and its stop's withdrawal wait in the
//! connection's outbox, and the server's or client's PE is rung to send them at its next
//! progress; on the connection's thread they go to the socket at once. Either way they reach
//! the peer in the order this consumer made them. Producers writing to it may be in any
//! process and thread.

use core::cell::{Cell, RefCell};
use core::ptr;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::chan::{conn_ref, doca_comch_connection, release_fast};
use super::fastq::{FastQueue, Received, MAX_IMM};
use super::wire;
use crate::buf::{buf_ref, doca_buf};
use crate::ctx::{doca_ctx, mark_started, CtxOps, StartMode};
use crate::dev::{dev_ref, devinfo_ref, doca_devinfo, DevRef};
use crate::ffi::{guard, guard_err, obj, out};
use crate::mmap::{doca_mmap, mmap_ref};
use crate::shm::own_pid;
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

/// `"CONS"`: marks a live consumer.
const CONSUMER_MAGIC: u32 = 0x434f_4e53;
/// Largest post-receive pool (`doca_comch_consumer_cap_get_max_num_tasks`).
pub const MAX_NUM_TASKS: u32 = 8192;
/// Largest buffer a consumer receives into (`cap_get_max_buf_size`): 1 GiB, the soft
/// provider's transfer bound elsewhere.
pub const MAX_BUF_SIZE: u32 = 1 << 30;
/// Consumers per connection (`cap_get_max_consumers`).
pub const MAX_CONSUMERS: u32 = 1024;
/// How long a stop waits for a producer that is writing into a claimed buffer.
const CLAIM_WAIT: Duration = Duration::from_secs(1);

/// `struct doca_comch_consumer`.
#[repr(C)]
pub struct doca_comch_consumer {
    ctx: doca_ctx,
    magic: u32,
    conn: *const doca_comch_connection,
    dev: DevRef,
    mmap: *mut doca_mmap,
    id: u32,
    imm_len: Cell<u32>,
    queue: RefCell<Option<FastQueue>>,
    /// Submitted post-receive tasks in posting order, with their slots.
    posted: RefCell<VecDeque<(*const doca_task, u32)>>,
    free: RefCell<Vec<u32>>,
    /// What the queue's sleep line was last set to ([`sync_sleep`]): stores only on change.
    sleeping: Cell<bool>,
    /// Looks at an oldest slot found claimed (being written) by another process since its
    /// producer's liveness was last checked (see [`front_result`]).
    claimed_looks: Cell<u32>,
}

/// `struct doca_comch_consumer_task_post_recv`.
#[repr(C)]
pub struct doca_comch_consumer_task_post_recv {
    base: doca_task,
    buf: Cell<*mut doca_buf>,
    producer_id: Cell<u32>,
    imm: Cell<[u8; MAX_IMM]>,
    imm_len: Cell<u32>,
}

static POST_RECV_KIND: TaskKind = TaskKind::new::<doca_comch_consumer_task_post_recv>(
    "comch.post_recv",
    submit_post_recv,
    None,
    Some(flush_post_recv),
);

// SAFETY: #[repr(C)] with the header first; KIND is built for this type.
unsafe impl TaskType for doca_comch_consumer_task_post_recv {
    const KIND: &'static TaskKind = &POST_RECV_KIND;
    fn with_header(base: doca_task) -> Self {
        doca_comch_consumer_task_post_recv {
            base,
            buf: Cell::new(ptr::null_mut()),
            producer_id: Cell::new(0),
            imm: Cell::new([0; MAX_IMM]),
            imm_len: Cell::new(0),
        }
    }
}

impl doca_comch_consumer_task_post_recv {
    fn reset_results(&self) {
        self.producer_id.set(0);
        self.imm_len.set(0);
    }
}

static CONSUMER_OPS: CtxOps = CtxOps {
    name: "comch_consumer",
    can_connect: None,
    start: consumer_start,
    stop: consumer_stop,
    stopped: None,
    progress: Some(consumer_progress),
    has_work: Some(consumer_has_work),
    stop_via_progress: false,
};

/// The consumer embedding `ctx`.
///
/// # Safety
/// `ctx` is the ctx of a consumer (true for every ctx with CONSUMER_OPS).
unsafe fn consumer_of(ctx: &doca_ctx) -> &doca_comch_consumer {
    // SAFETY: the ctx is the first field of the #[repr(C)] consumer.
    unsafe { &*(ctx as *const doca_ctx).cast::<doca_comch_consumer>() }
}

impl doca_comch_consumer {
    fn conn(&self) -> &doca_comch_connection {
        // SAFETY: the consumer holds its connection (`hold_for_fast_path`) until destroyed.
        unsafe { &*self.conn }
    }
}

unsafe fn consumer_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: ops contract.
    let c = unsafe { consumer_of(ctx) };
    let pe = ctx.pe().ok_or(DOCA_ERROR_NOT_CONNECTED)?;
    // One queue slot per post-receive task: a posted task always has a slot to claim.
    let cap = ctx.pool_for(&POST_RECV_KIND).map_or(1, |p| p.capacity());
    let queue = FastQueue::create(cap, c.imm_len.get(), pe.doorbell_address())?;
    let (mut blob, mut n) = (ptr::null(), 0usize);
    // SAFETY: a live mmap (the consumer was created on it) and device; valid out-pointers.
    let rc = unsafe { crate::mmap::doca_mmap_export_pci(c.mmap, c.dev.as_ptr(), &mut blob, &mut n) };
    if rc != DOCA_SUCCESS {
        return Err(crate::sdk_fail!(
            rc,
            "doca_comch_consumer start: its mmap cannot be exported to the producer's side ({rc:?}): \
             it must be started and have the connection's device added"
        ));
    }
    let (pid, fd, len) = queue.location();
    // SAFETY: the export blob belongs to the mmap, alive for this call; read for its length.
    let blob = unsafe { core::slice::from_raw_parts(blob.cast::<u8>(), n) };
    let rec = wire::encode_consumer(&wire::Consumer::New { id: c.id, pid, fd, len: len as u64, blob });
    c.conn().send_fast_record(rec)?;
    *c.free.borrow_mut() = (0..cap).rev().collect();
    c.posted.borrow_mut().clear();
    *c.queue.borrow_mut() = Some(queue);
    Ok(StartMode::Async)
}

unsafe fn consumer_stop(ctx: &doca_ctx) {
    // SAFETY: ops contract.
    let c = unsafe { consumer_of(ctx) };
    if let Some(q) = c.queue.borrow().as_ref() {
        q.close();
        // A producer that claimed a slot before the close may be writing into its buffer
        // right now (in any process or thread): the buffer is not given back (flushed) while
        // it does. Producers write inside one submit call, so this is short; a producer that
        // died mid-write never finishes (its process is checked).
        let deadline = Instant::now() + CLAIM_WAIT;
        let posted = c.posted.borrow().len();
        while q.claims_in_flight(posted, process_exists) && Instant::now() < deadline {
            std::thread::yield_now();
        }
    }
    // The peer's expired event; a connection already over has nobody to tell.
    let _ = c.conn().send_fast_record(wire::encode_consumer(&wire::Consumer::Gone { id: c.id }));
    // The framework flushes the posted tasks right after this hook.
    c.posted.borrow_mut().clear();
    c.sleeping.set(false);
    *c.queue.borrow_mut() = None;
}

/// Whether process `pid` exists (a claim of a dead producer is never finished).
fn process_exists(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Completes the posted tasks whose slots a producer finished, in posting order.
unsafe fn consumer_progress(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let c = unsafe { consumer_of(ctx) };
    if ctx.state() == DOCA_CTX_STATE_STARTING {
        mark_started(ctx);
        return true;
    }
    let q = c.queue.borrow();
    let Some(q) = q.as_ref() else { return false };
    sync_sleep(ctx, c, q);
    let mut did = false;
    while let Some((t, slot, r)) = front_result(c, q, false) {
        c.posted.borrow_mut().pop_front();
        q.free(slot);
        c.free.borrow_mut().push(slot);
        // SAFETY: posted tasks are submitted tasks of this ctx's live pool.
        let t = unsafe { &*t };
        // SAFETY: only post-receive tasks are posted.
        let x = unsafe { t.downcast::<doca_comch_consumer_task_post_recv>() };
        let mut status = r.status;
        if status == DOCA_SUCCESS {
            x.producer_id.set(r.producer_id);
            x.imm.set(r.imm);
            x.imm_len.set(r.imm_len);
            // SAFETY: the posted buffer is live while its task is (DOCA contract).
            match unsafe { buf_ref(x.buf.get()) }.and_then(|b| b.grow_data_len(r.len)) {
                Ok(()) => {}
                Err(e) => status = e,
            }
        }
        task::complete(t, status);
        did = true;
    }
    did
}

/// Looks at a slot claimed by another process between two checks of that process's
/// liveness, while progress polls: a check is a system call (`kill(pid, 0)`), and a producer
/// copying through `process_vm_writev` keeps its claim for microseconds, which a polling
/// consumer saw tens of times per message.
const CLAIMED_LOOKS_PER_CHECK: u32 = 64;

/// The oldest posted receive and its result, once it has one (receives complete in posting
/// order): what a producer finished into its slot, or CONNECTION_ABORTED when the producer
/// that claimed the slot died before finishing; such a claim is never finished, and must not
/// hold up the receives posted after it. The claimer's liveness is checked when `check_now`
/// (at arm: a PE about to sleep must not wait for a dead producer, which rings nobody), else
/// every [`CLAIMED_LOOKS_PER_CHECK`] looks; a claim of this process is alive by definition.
fn front_result(c: &doca_comch_consumer, q: &FastQueue, check_now: bool) -> Option<(*const doca_task, u32, Received)> {
    let (t, slot) = *c.posted.borrow().front()?;
    let r = match q.finished(slot) {
        Some(r) => r,
        None => match q.claimer(slot) {
            Some(pid) if pid != own_pid() && claimer_check_due(c, check_now) && !process_exists(pid) => Received {
                status: DOCA_ERROR_CONNECTION_ABORTED,
                len: 0,
                producer_id: 0,
                imm_len: 0,
                imm: [0; MAX_IMM],
            },
            _ => return None,
        },
    };
    Some((t, slot, r))
}

/// Whether this look at a claimed slot checks its producer's liveness (see [`front_result`]).
fn claimer_check_due(c: &doca_comch_consumer, check_now: bool) -> bool {
    let looks = c.claimed_looks.get() + 1;
    if check_now || looks >= CLAIMED_LOOKS_PER_CHECK {
        c.claimed_looks.set(0);
        return true;
    }
    c.claimed_looks.set(looks);
    false
}

/// Keeps the queue's sleep line equal to "the PE is armed and a receive is posted" (see
/// `fastq`): from progress (a PE no longer armed clears it), from `has_work` (at arm: set,
/// then the caller re-checks the oldest slot), and after a post.
fn sync_sleep(ctx: &doca_ctx, c: &doca_comch_consumer, q: &FastQueue) {
    let on = ctx.pe().is_some_and(|pe| pe.is_armed()) && !c.posted.borrow().is_empty();
    if on != c.sleeping.get() {
        c.sleeping.set(on);
        q.set_sleeping(on);
    }
}

unsafe fn consumer_has_work(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let c = unsafe { consumer_of(ctx) };
    if ctx.state() == DOCA_CTX_STATE_STARTING {
        return true;
    }
    let q = c.queue.borrow();
    q.as_ref().is_some_and(|q| {
        // The line first, then the look at the oldest slot (the Dekker order).
        sync_sleep(ctx, c, q);
        front_result(c, q, true).is_some()
    })
}

unsafe fn submit_post_recv(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: this hook is only registered for the post-receive kind.
    let x = unsafe { t.downcast::<doca_comch_consumer_task_post_recv>() };
    // SAFETY: post-receive tasks live in pools of consumers.
    let c = unsafe { consumer_of(t.ctx()) };
    // SAFETY: buffers given to alloc_init/set_buf come from this provider's inventories and
    // live while the task does (DOCA contract); buf_ref rejects NULL and returned buffers.
    let b = unsafe { buf_ref(x.buf.get()) }?;
    // In the consumer's mmap (what DOCA requires), one buffer (not a list), not imported.
    if !ptr::eq(b.mmap_ptr(), c.mmap) || !b.is_single() || b.mmap().is_imported() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let (addr, room) = b.tail_space();
    let q = c.queue.borrow();
    let q = q.as_ref().ok_or(DOCA_ERROR_BAD_STATE)?;
    let slot = c.free.borrow_mut().pop().ok_or(DOCA_ERROR_NO_MEMORY)?;
    x.reset_results();
    q.post(slot, addr as u64, room as u64);
    c.posted.borrow_mut().push_back((t as *const doca_task, slot));
    if !c.sleeping.get() {
        // Posted while armed: the line goes up now, and a producer that finished the oldest
        // slot before it was up did not ring, so an armed PE is told here.
        sync_sleep(t.ctx(), c, q);
        if c.sleeping.get() && front_result(c, q, true).is_some() {
            if let Some(pe) = t.ctx().pe() {
                pe.notify_work();
            }
        }
    }
    Ok(())
}

unsafe fn flush_post_recv(t: &doca_task) {
    // SAFETY: this hook is only registered for the post-receive kind.
    unsafe { t.downcast::<doca_comch_consumer_task_post_recv>() }.reset_results();
}

/// The consumer behind `p`: INVALID_VALUE for NULL or a foreign object.
///
/// # Safety
/// A non-NULL `p` must point to a consumer of this provider (DOCA contract).
unsafe fn consumer_ref<'a>(p: *const doca_comch_consumer) -> Result<&'a doca_comch_consumer, doca_error_t> {
    // SAFETY: per the contract.
    let c = unsafe { obj(p) }?;
    if c.magic != CONSUMER_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(c)
}

/// The post-receive task behind `p`, if it is one.
///
/// # Safety
/// A non-NULL `p` must point to a task of this provider.
unsafe fn post_recv_ref<'a>(
    p: *const doca_comch_consumer_task_post_recv,
) -> Option<&'a doca_comch_consumer_task_post_recv> {
    // SAFETY: per the contract; `typed` checks the kind.
    unsafe { task::typed::<doca_comch_consumer_task_post_recv>(p.cast()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_create(
    comch_connection: *mut doca_comch_connection,
    buf_mmap: *mut doca_mmap,
    consumer: *mut *mut doca_comch_consumer,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes a connection of this provider (or NULL, refused).
        let conn = unsafe { conn_ref(comch_connection) }?;
        // SAFETY: as above, an mmap.
        let m = unsafe { mmap_ref(buf_mmap) }?;
        if consumer.is_null() || m.is_imported() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let dev = dev_ref(conn.fast_path_device()?)?;
        let id = conn.hold_for_fast_path()?;
        let raw = Box::into_raw(Box::new(doca_comch_consumer {
            ctx: doca_ctx::new(&CONSUMER_OPS),
            magic: CONSUMER_MAGIC,
            conn,
            dev,
            mmap: buf_mmap,
            id,
            imm_len: Cell::new(0),
            queue: RefCell::new(None),
            posted: RefCell::new(VecDeque::new()),
            free: RefCell::new(Vec::new()),
            sleeping: Cell::new(false),
            claimed_looks: Cell::new(0),
        }));
        // SAFETY: `raw` was just created from a Box; only shared access follows.
        unsafe { (*raw).ctx.bind_owner(raw) };
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(consumer, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_destroy(consumer: *mut doca_comch_consumer) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in create.
        let c = unsafe { consumer_ref(consumer) }?;
        c.ctx.teardown().map_err(|_| DOCA_ERROR_BAD_STATE)?;
        // SAFETY: created by Box::into_raw in create; IDLE with no task: nothing references
        // it. Freed once (the magic is cleared).
        let mut b = unsafe { Box::from_raw(consumer) };
        b.magic = 0;
        // SAFETY: the hold taken at create, given back once.
        unsafe { release_fast(b.conn) };
        drop(b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_as_ctx(consumer: *mut doca_comch_consumer) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in create.
        unsafe { consumer_ref(consumer) }.map_or(ptr::null_mut(), |c| &c.ctx as *const _ as *mut _)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_get_id(
    consumer: *const doca_comch_consumer,
    id: *mut u32,
) -> doca_error_t {
    // SAFETY: as in create; `out` checks NULL.
    guard_err(|| unsafe { out(id, consumer_ref(consumer)?.id) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_is_supported(devinfo: *const doca_devinfo) -> doca_error_t {
    guard_err(|| devinfo_ref(devinfo).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_num_tasks(
    devinfo: *const doca_devinfo,
    max_num_tasks: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_num_tasks, MAX_NUM_TASKS)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_buf_size(
    devinfo: *const doca_devinfo,
    max_buf_size: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_buf_size, MAX_BUF_SIZE)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_buf_list_len(
    devinfo: *const doca_devinfo,
    max_buf_list_len: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_buf_list_len, 1)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_consumers(
    devinfo: *const doca_devinfo,
    max_consumers: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_consumers, MAX_CONSUMERS)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_imm_data_len(
    devinfo: *const doca_devinfo,
    max_imm_data_len: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_imm_data_len, MAX_IMM as u32)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_set_imm_data_len(
    consumer: *mut doca_comch_consumer,
    imm_data_len: u32,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in create.
        let c = unsafe { consumer_ref(consumer) }?;
        if c.ctx.state() != DOCA_CTX_STATE_IDLE {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        if imm_data_len as usize > MAX_IMM {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        c.imm_len.set(imm_data_len);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_get_imm_data_len(
    consumer: *const doca_comch_consumer,
    imm_data_len: *mut u32,
) -> doca_error_t {
    // SAFETY: as in create; `out` checks NULL.
    guard_err(|| unsafe { out(imm_data_len, consumer_ref(consumer)?.imm_len.get()) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_set_conf(
    consumer: *mut doca_comch_consumer,
    task_completion_cb: doca_comch_consumer_task_post_recv_completion_cb_t,
    task_error_cb: doca_comch_consumer_task_post_recv_completion_cb_t,
    num_post_recv_tasks: u32,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in create.
        let c = unsafe { consumer_ref(consumer) }?;
        if num_post_recv_tasks > MAX_NUM_TASKS {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        task::set_conf::<doca_comch_consumer_task_post_recv>(
            &c.ctx,
            task_completion_cb,
            task_error_cb,
            num_post_recv_tasks,
        )?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_alloc_init(
    consumer: *mut doca_comch_consumer,
    buf: *mut doca_buf,
    task: *mut *mut doca_comch_consumer_task_post_recv,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in create.
        let c = unsafe { consumer_ref(consumer) }?;
        if task.is_null() || buf.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let t = task::alloc::<doca_comch_consumer_task_post_recv>(&c.ctx, doca_data::from_u64(0))?;
        // SAFETY: a freshly allocated slot of this ctx's pool.
        unsafe { t.as_ref() }.buf.set(buf);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(task, t.as_ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_get_buf(
    task: *const doca_comch_consumer_task_post_recv,
) -> *mut doca_buf {
    // SAFETY: the caller passes a task of this provider (or NULL).
    guard(ptr::null_mut(), || unsafe { post_recv_ref(task) }.map_or(ptr::null_mut(), |x| x.buf.get()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_set_buf(
    task: *mut doca_comch_consumer_task_post_recv,
    buf: *mut doca_buf,
) {
    guard((), || {
        // SAFETY: as above.
        if let Some(x) = unsafe { post_recv_ref(task) } {
            x.buf.set(buf);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_get_producer_id(
    task: *const doca_comch_consumer_task_post_recv,
) -> u32 {
    // SAFETY: as above.
    guard(0, || unsafe { post_recv_ref(task) }.map_or(0, |x| x.producer_id.get()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_get_imm_data(
    task: *const doca_comch_consumer_task_post_recv,
) -> *const u8 {
    guard(ptr::null(), || {
        // SAFETY: as above.
        match unsafe { post_recv_ref(task) } {
            // The bytes live in the task (a Cell of an array: its address is stable).
            Some(x) if x.imm_len.get() > 0 => x.imm.as_ptr().cast::<u8>(),
            _ => ptr::null(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_get_imm_data_len(
    task: *const doca_comch_consumer_task_post_recv,
) -> u32 {
    // SAFETY: as above.
    guard(0, || unsafe { post_recv_ref(task) }.map_or(0, |x| x.imm_len.get()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_as_task(
    task: *mut doca_comch_consumer_task_post_recv,
) -> *mut doca_task {
    // SAFETY: as above.
    guard(ptr::null_mut(), || unsafe { post_recv_ref(task) }.map_or(ptr::null_mut(), |x| task::header(x).raw()))
}
