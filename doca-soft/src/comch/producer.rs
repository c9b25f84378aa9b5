//! The fast path's producer (`doca_comch_producer.h`): a ctx on a comch connection whose send
//! task moves a buffer's data (and immediate bytes) into a receive posted by a consumer of the
//! peer (`consumer.rs`).
//!
//! # Model
//!
//! * **Create** on a connected connection (an id unique on it, from 1); **start** is
//!   synchronous, as NVIDIA's sample expects.
//! * **Send** (submit): the target consumer must have been announced on the connection (its
//!   new-consumer event seen by the server or client, whose PE must be progressed for that)
//!   and not withdrawn: else `DOCA_ERROR_NOT_CONNECTED`. The send claims the consumer's oldest
//!   posted receive (`fastq.rs`); with none posted the submit answers `DOCA_ERROR_AGAIN` and the
//!   task stays with the caller, as on DOCA, whose samples retry until it is accepted. Then,
//!   inside the submit, the buffer's data (a list's payloads, in order) is written into the
//!   posted buffer through the consumer's export, the slot gets this producer's id and the
//!   immediate bytes, and the consumer's PE is rung. The send completes (its callback runs
//!   from a later progress) with success, or with the error that also fails the receive: the
//!   data longer than the posted room or immediate bytes longer than the consumer's
//!   `imm_data_len` (`INVALID_VALUE`), the consumer's memory refused (`NOT_PERMITTED`: its mmap
//!   needs `DOCA_ACCESS_FLAG_PCI_READ_WRITE`, as NVIDIA's sample gives it).
//! * A send submitted with `doca_task_submit_ex` without the flush flag claims at the flush; a
//!   consumer with nothing posted then fails it through its error callback with
//!   `DOCA_ERROR_AGAIN`.
//!
//! # Threads
//! As for the consumer: a producer is used on one thread, with its own PE, which may be the
//! thread of its connection's server or client or another one. A send on another thread
//! locks nothing while it sends to the same consumer as before: the producer keeps that
//! consumer's queue and import (shared with the connection's table, which marks it withdrawn
//! when it lets go of it), and looks up the table, behind a mutex, only when the target
//! changes or was withdrawn.

use core::cell::{Cell, RefCell};
use core::ptr;
use std::sync::Arc;

use super::chan::{conn_ref, doca_comch_connection, release_fast, RemoteConsumer};
use super::fastq::MAX_IMM;
use crate::buf::{buf_ref, doca_buf};
use crate::ctx::{doca_ctx, CtxOps, StartMode};
use crate::dev::{devinfo_ref, doca_devinfo};
use crate::ffi::{guard, guard_err, obj, out};
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

/// `"PROD"`: marks a live producer.
const PRODUCER_MAGIC: u32 = 0x5052_4f44;
/// Largest send pool (`doca_comch_producer_cap_get_max_num_tasks`).
pub const MAX_NUM_TASKS: u32 = 8192;
/// Producers per connection (`cap_get_max_producers`).
pub const MAX_PRODUCERS: u32 = 1024;
/// Longest source list (`cap_get_max_buf_list_len`): the data of a list's elements is sent
/// one after the other.
pub const MAX_BUF_LIST_LEN: u32 = 16;

/// `struct doca_comch_producer`.
#[repr(C)]
pub struct doca_comch_producer {
    ctx: doca_ctx,
    magic: u32,
    conn: *const doca_comch_connection,
    id: u32,
    /// The consumer the last send went to, kept: a send to the same one (the usual case)
    /// looks nothing up and locks nothing. Looked up again when the id changes or the
    /// connection's table let go of it (withdrawn); dropped at stop.
    target: RefCell<Option<(u32, Arc<RemoteConsumer>)>>,
}

/// `struct doca_comch_producer_task_send`.
#[repr(C)]
pub struct doca_comch_producer_task_send {
    base: doca_task,
    buf: Cell<*const doca_buf>,
    consumer_id: Cell<u32>,
    imm: Cell<[u8; MAX_IMM]>,
    imm_len: Cell<u32>,
}

static SEND_KIND: TaskKind =
    TaskKind::new::<doca_comch_producer_task_send>("comch.producer_send", submit_send, None, None);

// SAFETY: #[repr(C)] with the header first; KIND is built for this type.
unsafe impl TaskType for doca_comch_producer_task_send {
    const KIND: &'static TaskKind = &SEND_KIND;
    fn with_header(base: doca_task) -> Self {
        doca_comch_producer_task_send {
            base,
            buf: Cell::new(ptr::null()),
            consumer_id: Cell::new(0),
            imm: Cell::new([0; MAX_IMM]),
            imm_len: Cell::new(0),
        }
    }
}

impl doca_comch_producer_task_send {
    /// Copies the immediate bytes into the task (DOCA: "data to copy to task"); more than
    /// [`MAX_IMM`] is INVALID_VALUE (nothing stored).
    ///
    /// # Safety
    /// `imm` is NULL or readable for `len` bytes.
    unsafe fn store_imm(&self, imm: *const u8, len: u32) -> Result<(), doca_error_t> {
        if len as usize > MAX_IMM || (imm.is_null() && len > 0) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut a = [0u8; MAX_IMM];
        if len > 0 {
            // SAFETY: readable for `len` bytes (the caller's contract); `len <= MAX_IMM`.
            a[..len as usize].copy_from_slice(unsafe { core::slice::from_raw_parts(imm, len as usize) });
        }
        self.imm.set(a);
        self.imm_len.set(len);
        Ok(())
    }
}

static PRODUCER_OPS: CtxOps = CtxOps {
    name: "comch_producer",
    can_connect: None,
    start: producer_start,
    stop: producer_stop,
    stopped: None,
    progress: None,
    has_work: None,
    stop_via_progress: false,
};

unsafe fn producer_start(_ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    Ok(StartMode::Sync)
}

unsafe fn producer_stop(ctx: &doca_ctx) {
    // Sends finish inside their submit: nothing is held but the last target, let go so that
    // a stopped producer keeps no import of the peer's memory.
    // SAFETY: ops contract.
    unsafe { producer_of(ctx) }.target.borrow_mut().take();
}

/// The producer embedding `ctx`.
///
/// # Safety
/// `ctx` is the ctx of a producer.
unsafe fn producer_of(ctx: &doca_ctx) -> &doca_comch_producer {
    // SAFETY: the ctx is the first field of the #[repr(C)] producer.
    unsafe { &*(ctx as *const doca_ctx).cast::<doca_comch_producer>() }
}

unsafe fn submit_send(t: &doca_task, mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: this hook is only registered for the send kind.
    let x = unsafe { t.downcast::<doca_comch_producer_task_send>() };
    // SAFETY: send tasks live in pools of producers.
    let p = unsafe { producer_of(t.ctx()) };
    // SAFETY: the producer holds its connection until destroyed.
    let conn = unsafe { &*p.conn };
    // SAFETY: buffers given to alloc_init/set_buf come from this provider's inventories and
    // live while the task does (DOCA contract); buf_ref rejects NULL and returned buffers.
    let b = unsafe { buf_ref(x.buf.get()) }?;
    if b.mmap().is_imported() || b.list_longer_than(MAX_BUF_LIST_LEN) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let want = x.consumer_id.get();
    {
        let mut target = p.target.borrow_mut();
        let kept = matches!(&*target, Some((id, rc)) if *id == want && !rc.withdrawn());
        if !kept {
            *target = conn.remote_consumer(want).map(|rc| (want, rc));
        }
    }
    let target = p.target.borrow();
    // The producer's own reference keeps the consumer's queue and import mapped for the whole
    // send, even if the endpoint's thread withdraws it meanwhile (the claim then fails).
    let outcome = target.as_ref().map(|(_, rc)| {
        let Some(claim) = rc.queue.claim()? else { return Ok(None) };
        let imm = x.imm.get();
        let imm_len = x.imm_len.get();
        // The bytes written on success (the source's payload), none on failure.
        let (status, n) = if imm_len > rc.queue.imm_len() {
            (DOCA_ERROR_INVALID_VALUE, 0)
        } else {
            match write_into(b, rc, claim.addr, claim.room) {
                Ok(n) => (DOCA_SUCCESS, n),
                Err(e) => (e, 0),
            }
        };
        rc.queue.finish(claim.slot, status, n, p.id, &imm[..imm_len as usize]);
        // Only a sleeping consumer is rung (a polling one sees the slot done by itself). A
        // consumer whose PE is gone is told by nothing: its queue is its state.
        if rc.queue.consumer_sleeping() {
            let _ = crate::doorbell::ring(rc.queue.doorbell());
        }
        Ok(Some(status))
    });
    drop(target);
    match outcome {
        None => Err(DOCA_ERROR_NOT_CONNECTED),
        Some(Err(e)) => Err(e),
        Some(Ok(None)) if mode == SubmitMode::Held => {
            // Accepted at submit and flushed now with nothing posted: DOCA's AGAIN, as a
            // failed completion (the task left the caller's hands at submit).
            task::complete(t, DOCA_ERROR_AGAIN);
            Ok(())
        }
        Some(Ok(None)) => Err(DOCA_ERROR_AGAIN),
        Some(Ok(Some(status))) => {
            task::complete(t, status);
            Ok(())
        }
    }
}

/// Writes the source list's payloads, in order, into the consumer's posted room at `addr`;
/// the bytes written.
fn write_into(src: &doca_buf, rc: &super::chan::RemoteConsumer, addr: u64, room: u64) -> Result<u64, doca_error_t> {
    let n = src.payload_len() as u64;
    if n > room {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the imported mmap lives as long as the consumer's record.
    let region = unsafe { &*rc.mmap }.remote_region_ref()?;
    let mut at = addr;
    for (b, _, _) in src.payload_spans() {
        // SAFETY: registered local memory the caller leaves untouched while the task is in
        // flight (DOCA contract); the slice is dropped at the end of the iteration.
        let data = unsafe { b.payload_slice() }?;
        let off = region.offset_of(at, data.len())?;
        region.write(off, data)?;
        at += data.len() as u64;
    }
    Ok(n)
}

/// The producer behind `p`: INVALID_VALUE for NULL or a foreign object.
///
/// # Safety
/// A non-NULL `p` must point to a producer of this provider (DOCA contract).
unsafe fn producer_ref<'a>(p: *const doca_comch_producer) -> Result<&'a doca_comch_producer, doca_error_t> {
    // SAFETY: per the contract.
    let c = unsafe { obj(p) }?;
    if c.magic != PRODUCER_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(c)
}

/// The send task behind `p`, if it is one.
///
/// # Safety
/// A non-NULL `p` must point to a task of this provider.
unsafe fn send_ref<'a>(p: *const doca_comch_producer_task_send) -> Option<&'a doca_comch_producer_task_send> {
    // SAFETY: per the contract; `typed` checks the kind.
    unsafe { task::typed::<doca_comch_producer_task_send>(p) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_create(
    comch_connection: *mut doca_comch_connection,
    producer: *mut *mut doca_comch_producer,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: the caller passes a connection of this provider (or NULL, refused).
        let conn = unsafe { conn_ref(comch_connection) }?;
        if producer.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let id = conn.hold_for_fast_path()?;
        let raw = Box::into_raw(Box::new(doca_comch_producer {
            ctx: doca_ctx::new(&PRODUCER_OPS),
            magic: PRODUCER_MAGIC,
            conn,
            id,
            target: RefCell::new(None),
        }));
        // SAFETY: `raw` was just created from a Box; only shared access follows.
        unsafe { (*raw).ctx.bind_owner(raw) };
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(producer, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_destroy(producer: *mut doca_comch_producer) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in create.
        let p = unsafe { producer_ref(producer) }?;
        p.ctx.teardown().map_err(|_| DOCA_ERROR_BAD_STATE)?;
        // SAFETY: created by Box::into_raw in create; IDLE with no task: nothing references
        // it. Freed once (the magic is cleared).
        let mut b = unsafe { Box::from_raw(producer) };
        b.magic = 0;
        // SAFETY: the hold taken at create, given back once.
        unsafe { release_fast(b.conn) };
        drop(b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_as_ctx(producer: *mut doca_comch_producer) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in create.
        unsafe { producer_ref(producer) }.map_or(ptr::null_mut(), |p| &p.ctx as *const _ as *mut _)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_get_id(
    producer: *const doca_comch_producer,
    id: *mut u32,
) -> doca_error_t {
    // SAFETY: as in create; `out` checks NULL.
    guard_err(|| unsafe { out(id, producer_ref(producer)?.id) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_is_supported(devinfo: *const doca_devinfo) -> doca_error_t {
    guard_err(|| devinfo_ref(devinfo).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_get_max_num_tasks(
    devinfo: *const doca_devinfo,
    max_num_tasks: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_num_tasks, MAX_NUM_TASKS)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_get_max_buf_size(
    devinfo: *const doca_devinfo,
    max_buf_size: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_buf_size, super::consumer::MAX_BUF_SIZE)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_get_max_buf_list_len(
    devinfo: *const doca_devinfo,
    max_buf_list_len: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_buf_list_len, MAX_BUF_LIST_LEN)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_get_max_producers(
    devinfo: *const doca_devinfo,
    max_producers: *mut u32,
) -> doca_error_t {
    super::fast_cap(devinfo, max_producers, MAX_PRODUCERS)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_set_conf(
    producer: *mut doca_comch_producer,
    task_completion_cb: doca_comch_producer_task_send_completion_cb_t,
    task_error_cb: doca_comch_producer_task_send_completion_cb_t,
    num_send_tasks: u32,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in create.
        let p = unsafe { producer_ref(producer) }?;
        if num_send_tasks > MAX_NUM_TASKS {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        task::set_conf::<doca_comch_producer_task_send>(&p.ctx, task_completion_cb, task_error_cb, num_send_tasks)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_alloc_init(
    producer: *mut doca_comch_producer,
    buf: *const doca_buf,
    imm_data: *mut u8,
    imm_data_len: u32,
    consumer_id: u32,
    task: *mut *mut doca_comch_producer_task_send,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in create.
        let p = unsafe { producer_ref(producer) }?;
        if task.is_null() || buf.is_null() || imm_data_len as usize > MAX_IMM {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let t = task::alloc::<doca_comch_producer_task_send>(&p.ctx, doca_data::from_u64(0))?;
        // SAFETY: a freshly allocated slot of this ctx's pool.
        let x = unsafe { t.as_ref() };
        // SAFETY: `imm_data` is readable for its length (the caller's contract).
        if let Err(e) = unsafe { x.store_imm(imm_data, imm_data_len) } {
            // SAFETY: our fresh task, not handed out.
            unsafe { task::doca_task_free(task::header(x).raw()) };
            return Err(e);
        }
        x.buf.set(buf);
        x.consumer_id.set(consumer_id);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(task, t.as_ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_get_buf(
    task: *const doca_comch_producer_task_send,
) -> *const doca_buf {
    // SAFETY: the caller passes a task of this provider (or NULL).
    guard(ptr::null(), || unsafe { send_ref(task) }.map_or(ptr::null(), |x| x.buf.get()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_set_buf(
    task: *mut doca_comch_producer_task_send,
    buf: *const doca_buf,
) {
    guard((), || {
        // SAFETY: as above.
        if let Some(x) = unsafe { send_ref(task) } {
            x.buf.set(buf);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_get_consumer_id(
    task: *const doca_comch_producer_task_send,
) -> u32 {
    // SAFETY: as above.
    guard(0, || unsafe { send_ref(task) }.map_or(0, |x| x.consumer_id.get()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_set_consumer_id(
    task: *mut doca_comch_producer_task_send,
    consumer_id: u32,
) {
    guard((), || {
        // SAFETY: as above.
        if let Some(x) = unsafe { send_ref(task) } {
            x.consumer_id.set(consumer_id);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_get_imm_data(
    task: *const doca_comch_producer_task_send,
) -> *mut u8 {
    guard(ptr::null_mut(), || {
        // SAFETY: as above.
        match unsafe { send_ref(task) } {
            Some(x) if x.imm_len.get() > 0 => x.imm.as_ptr().cast::<u8>(),
            _ => ptr::null_mut(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_get_imm_data_len(
    task: *const doca_comch_producer_task_send,
) -> u32 {
    // SAFETY: as above.
    guard(0, || unsafe { send_ref(task) }.map_or(0, |x| x.imm_len.get()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_set_imm_data(
    task: *mut doca_comch_producer_task_send,
    imm_data: *mut u8,
    imm_data_len: u32,
) {
    guard((), || {
        // SAFETY: as above; the bytes are readable for their length (the caller's contract).
        if let Some(x) = unsafe { send_ref(task) } {
            // A length over the limit changes nothing (the setter has no status to report it).
            // SAFETY: readable for its length (the caller's contract).
            let _ = unsafe { x.store_imm(imm_data, imm_data_len) };
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_as_task(
    task: *mut doca_comch_producer_task_send,
) -> *mut doca_task {
    // SAFETY: as above.
    guard(ptr::null_mut(), || unsafe { send_ref(task) }.map_or(ptr::null_mut(), |x| task::header(x).raw()))
}
