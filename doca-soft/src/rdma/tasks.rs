//! The eight RDMA task types, their kinds, submit-time validation and entry points.
//!
//! Every task is a `#[repr(C)]` struct with the [`doca_task`] header first (see `task.rs`).
//! Allocation (`*_allocate_init`) stores the arguments; submit validates them (every submit
//! validates, as `doca_task_try_submit` does in DOCA) and hands the task to the engine:
//! receives join the ctx's posted-receive queue, everything else its connection's queue.
//!
//! Submit-time failures (the task stays with the caller, the ctx is unaffected):
//! * a NULL buffer where one is needed, a buffer of the wrong side (a local buffer as remote
//!   memory or the reverse), an atomic result buffer with less than 8 free bytes, a
//!   connection of another `doca_rdma`: `DOCA_ERROR_INVALID_VALUE`; a buffer already
//!   returned to its inventory: `DOCA_ERROR_BAD_STATE`;
//! * a local destination without `LOCAL_READ_WRITE`: `DOCA_ERROR_NOT_PERMITTED`;
//! * a message or transfer above [`super::MAX_MESSAGE_BYTES`]: `DOCA_ERROR_TOO_BIG`;
//! * the send or receive queue full: `DOCA_ERROR_NO_MEMORY`;
//! * a connection not connected (or from before a restart): `DOCA_ERROR_NOT_CONNECTED`; a
//!   broken connection: its code; the ctx in the error state: the error code.
//!
//! Allocation also fails in the error state (same codes), besides the framework's
//! BAD_STATE / NOT_SUPPORTED / NO_MEMORY.

use core::cell::Cell;
use core::ptr;

use super::conn::{conn_ref, doca_rdma_connection};
use super::{doca_rdma, engine, rdma_of, rdma_ref, MAX_MESSAGE_BYTES};
use crate::buf::{buf_ref, doca_buf};
use crate::ffi::{guard, guard_err, out};
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

// ---- task types ----

/// `struct doca_rdma_task_receive`.
#[repr(C)]
pub struct doca_rdma_task_receive {
    base: doca_task,
    pub(crate) dst: Cell<*mut doca_buf>,
    pub(crate) res_opcode: Cell<doca_rdma_opcode>,
    pub(crate) res_len: Cell<u32>,
    pub(crate) res_imm: Cell<doca_be32_t>,
    pub(crate) res_conn: Cell<*const doca_rdma_connection>,
}

/// `struct doca_rdma_task_send`.
#[repr(C)]
pub struct doca_rdma_task_send {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) src: Cell<*const doca_buf>,
    progress: Cell<u64>,
}

/// `struct doca_rdma_task_send_imm`.
#[repr(C)]
pub struct doca_rdma_task_send_imm {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) src: Cell<*const doca_buf>,
    pub(super) imm: Cell<doca_be32_t>,
    progress: Cell<u64>,
}

/// `struct doca_rdma_task_read`.
#[repr(C)]
pub struct doca_rdma_task_read {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) src: Cell<*const doca_buf>,
    pub(super) dst: Cell<*mut doca_buf>,
    /// Bytes the read brings (the destination's free space at submit); valid after success.
    pub(super) res_len: Cell<u32>,
}

/// `struct doca_rdma_task_write`.
#[repr(C)]
pub struct doca_rdma_task_write {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) src: Cell<*const doca_buf>,
    pub(super) dst: Cell<*mut doca_buf>,
    progress: Cell<u64>,
}

/// `struct doca_rdma_task_write_imm`.
#[repr(C)]
pub struct doca_rdma_task_write_imm {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) src: Cell<*const doca_buf>,
    pub(super) dst: Cell<*mut doca_buf>,
    pub(super) imm: Cell<doca_be32_t>,
    progress: Cell<u64>,
}

/// `struct doca_rdma_task_atomic_cmp_swp`.
#[repr(C)]
pub struct doca_rdma_task_atomic_cmp_swp {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) dst: Cell<*mut doca_buf>,
    pub(super) result: Cell<*mut doca_buf>,
    pub(super) cmp: Cell<u64>,
    pub(super) swap: Cell<u64>,
}

/// `struct doca_rdma_task_atomic_fetch_add`.
#[repr(C)]
pub struct doca_rdma_task_atomic_fetch_add {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) dst: Cell<*mut doca_buf>,
    pub(super) result: Cell<*mut doca_buf>,
    pub(super) add: Cell<u64>,
}

static RECEIVE_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_receive>("rdma.receive", submit_receive, None, Some(flush_receive))
        .with_admit(admit_receive);
static SEND_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_send>("rdma.send", submit_op, None, None).with_admit(admit_op);
static SEND_IMM_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_send_imm>("rdma.send_imm", submit_op, None, None).with_admit(admit_op);
static READ_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_read>("rdma.read", submit_op, None, None).with_admit(admit_op);
static WRITE_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_write>("rdma.write", submit_op, None, None).with_admit(admit_op);
static WRITE_IMM_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_write_imm>("rdma.write_imm", submit_op, None, None).with_admit(admit_op);
static CMP_SWP_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_atomic_cmp_swp>("rdma.atomic_cmp_swp", submit_op, None, None).with_admit(admit_op);
static FETCH_ADD_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_atomic_fetch_add>("rdma.atomic_fetch_add", submit_op, None, None)
        .with_admit(admit_op);

fn null_conn() -> Cell<*const doca_rdma_connection> {
    Cell::new(ptr::null())
}

// SAFETY: (this and the impls below) #[repr(C)] with the doca_task header first; KIND is built with
// TaskKind::new::<Self>.
unsafe impl TaskType for doca_rdma_task_receive {
    const KIND: &'static TaskKind = &RECEIVE_KIND;
    fn with_header(base: doca_task) -> Self {
        Self {
            base,
            dst: Cell::new(ptr::null_mut()),
            res_opcode: Cell::new(DOCA_RDMA_OPCODE_RECV_SEND),
            res_len: Cell::new(0),
            res_imm: Cell::new(0),
            res_conn: Cell::new(ptr::null()),
        }
    }
}
// SAFETY: as above.
unsafe impl TaskType for doca_rdma_task_send {
    const KIND: &'static TaskKind = &SEND_KIND;
    fn with_header(base: doca_task) -> Self {
        Self { base, conn: null_conn(), src: Cell::new(ptr::null()), progress: Cell::new(0) }
    }
}
// SAFETY: as above.
unsafe impl TaskType for doca_rdma_task_send_imm {
    const KIND: &'static TaskKind = &SEND_IMM_KIND;
    fn with_header(base: doca_task) -> Self {
        Self { base, conn: null_conn(), src: Cell::new(ptr::null()), imm: Cell::new(0), progress: Cell::new(0) }
    }
}
// SAFETY: as above.
unsafe impl TaskType for doca_rdma_task_read {
    const KIND: &'static TaskKind = &READ_KIND;
    fn with_header(base: doca_task) -> Self {
        Self {
            base,
            conn: null_conn(),
            src: Cell::new(ptr::null()),
            dst: Cell::new(ptr::null_mut()),
            res_len: Cell::new(0),
        }
    }
}
// SAFETY: as above.
unsafe impl TaskType for doca_rdma_task_write {
    const KIND: &'static TaskKind = &WRITE_KIND;
    fn with_header(base: doca_task) -> Self {
        Self {
            base,
            conn: null_conn(),
            src: Cell::new(ptr::null()),
            dst: Cell::new(ptr::null_mut()),
            progress: Cell::new(0),
        }
    }
}
// SAFETY: as above.
unsafe impl TaskType for doca_rdma_task_write_imm {
    const KIND: &'static TaskKind = &WRITE_IMM_KIND;
    fn with_header(base: doca_task) -> Self {
        Self {
            base,
            conn: null_conn(),
            src: Cell::new(ptr::null()),
            dst: Cell::new(ptr::null_mut()),
            imm: Cell::new(0),
            progress: Cell::new(0),
        }
    }
}
// SAFETY: as above.
unsafe impl TaskType for doca_rdma_task_atomic_cmp_swp {
    const KIND: &'static TaskKind = &CMP_SWP_KIND;
    fn with_header(base: doca_task) -> Self {
        Self {
            base,
            conn: null_conn(),
            dst: Cell::new(ptr::null_mut()),
            result: Cell::new(ptr::null_mut()),
            cmp: Cell::new(0),
            swap: Cell::new(0),
        }
    }
}
// SAFETY: as above.
unsafe impl TaskType for doca_rdma_task_atomic_fetch_add {
    const KIND: &'static TaskKind = &FETCH_ADD_KIND;
    fn with_header(base: doca_task) -> Self {
        Self {
            base,
            conn: null_conn(),
            dst: Cell::new(ptr::null_mut()),
            result: Cell::new(ptr::null_mut()),
            add: Cell::new(0),
        }
    }
}

// ---- the engine's view of a send-side task ----

/// A send-side operation, decoded from its task.
#[derive(Clone, Copy)]
pub(crate) enum Op<'a> {
    /// send / send_imm: stream a record (header + payload) into the peer's ring.
    Send {
        src: *const doca_buf,
        imm: Option<doca_be32_t>,
        progress: &'a Cell<u64>,
    },
    /// write / write_imm: one-sided write, then (imm) a notification record.
    Write {
        src: *const doca_buf,
        dst: *mut doca_buf,
        imm: Option<doca_be32_t>,
        progress: &'a Cell<u64>,
    },
    Read {
        src: *const doca_buf,
        dst: *mut doca_buf,
    },
    CmpSwp {
        dst: *mut doca_buf,
        result: *mut doca_buf,
        cmp: u64,
        swap: u64,
    },
    FetchAdd {
        dst: *mut doca_buf,
        result: *mut doca_buf,
        add: u64,
    },
    /// Remote-net sync event tasks (`remote.rs`).
    RemoteGet {
        event: *const crate::sync_event::doca_sync_event_remote_net,
        dst: *mut doca_buf,
    },
    RemoteSet {
        event: *const crate::sync_event::doca_sync_event_remote_net,
        src: *const doca_buf,
    },
    RemoteAdd {
        event: *const crate::sync_event::doca_sync_event_remote_net,
        result: *mut doca_buf,
        add: u64,
    },
}

/// The connection and operation of a send-side task (None for a receive).
pub(crate) fn decode(t: &doca_task) -> Option<(*const doca_rdma_connection, Op<'_>)> {
    // SAFETY: every downcast below follows an `is` check of the same kind.
    unsafe {
        if t.is::<doca_rdma_task_send>() {
            let x = t.downcast::<doca_rdma_task_send>();
            let op = Op::Send { src: x.src.get(), imm: None, progress: &x.progress };
            Some((x.conn.get(), op))
        } else if t.is::<doca_rdma_task_send_imm>() {
            let x = t.downcast::<doca_rdma_task_send_imm>();
            let op = Op::Send { src: x.src.get(), imm: Some(x.imm.get()), progress: &x.progress };
            Some((x.conn.get(), op))
        } else if t.is::<doca_rdma_task_write>() {
            let x = t.downcast::<doca_rdma_task_write>();
            let op = Op::Write { src: x.src.get(), dst: x.dst.get(), imm: None, progress: &x.progress };
            Some((x.conn.get(), op))
        } else if t.is::<doca_rdma_task_write_imm>() {
            let x = t.downcast::<doca_rdma_task_write_imm>();
            let op = Op::Write { src: x.src.get(), dst: x.dst.get(), imm: Some(x.imm.get()), progress: &x.progress };
            Some((x.conn.get(), op))
        } else if t.is::<doca_rdma_task_read>() {
            let x = t.downcast::<doca_rdma_task_read>();
            Some((x.conn.get(), Op::Read { src: x.src.get(), dst: x.dst.get() }))
        } else if t.is::<doca_rdma_task_atomic_cmp_swp>() {
            let x = t.downcast::<doca_rdma_task_atomic_cmp_swp>();
            let op = Op::CmpSwp { dst: x.dst.get(), result: x.result.get(), cmp: x.cmp.get(), swap: x.swap.get() };
            Some((x.conn.get(), op))
        } else if t.is::<doca_rdma_task_atomic_fetch_add>() {
            let x = t.downcast::<doca_rdma_task_atomic_fetch_add>();
            let op = Op::FetchAdd { dst: x.dst.get(), result: x.result.get(), add: x.add.get() };
            Some((x.conn.get(), op))
        } else {
            super::remote::decode(t)
        }
    }
}

// ---- submit-time validation ----

/// Which side of the wire a buffer must describe.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Local memory read by the operation.
    LocalSource,
    /// Local memory written by the operation.
    LocalDest,
    /// Memory of the peer (an imported mmap).
    Remote,
}

/// Checks a buffer argument: live, on the right side, writable when written locally.
fn check_buf<'a>(p: *const doca_buf, side: Side) -> Result<&'a doca_buf, doca_error_t> {
    // SAFETY: buffer pointers given to allocate_init come from this provider's inventories,
    // which the caller keeps alive while the task exists (DOCA contract); buf_ref rejects
    // NULL and returned buffers.
    let b = unsafe { buf_ref(p) }?;
    // Lock-free reads: a live buffer keeps its mmap started and unchangeable (mmap.rs).
    let m = b.mmap();
    let imported = m.is_imported();
    match side {
        Side::Remote if !imported => Err(DOCA_ERROR_INVALID_VALUE),
        Side::LocalSource | Side::LocalDest if imported => Err(DOCA_ERROR_INVALID_VALUE),
        Side::LocalDest if m.perms_of_started() & DOCA_ACCESS_FLAG_LOCAL_READ_WRITE == 0 => {
            Err(DOCA_ERROR_NOT_PERMITTED)
        }
        _ => Ok(b),
    }
}

fn check_len(n: usize) -> Result<(), doca_error_t> {
    if n > MAX_MESSAGE_BYTES {
        Err(DOCA_ERROR_TOO_BIG)
    } else {
        Ok(())
    }
}

/// Argument checks of a send-side operation (see the module docs).
fn validate(op: &Op<'_>) -> Result<(), doca_error_t> {
    match *op {
        Op::Send { src, .. } => {
            if !src.is_null() {
                check_len(check_buf(src, Side::LocalSource)?.data().1)?;
            }
        }
        Op::Write { src, dst, .. } => {
            let s = check_buf(src, Side::LocalSource)?;
            check_buf(dst, Side::Remote)?;
            check_len(s.data().1)?;
        }
        Op::Read { src, dst } => {
            check_buf(src, Side::Remote)?;
            check_len(check_buf(dst, Side::LocalDest)?.tail_space().1)?;
        }
        Op::CmpSwp { dst, result, .. } | Op::FetchAdd { dst, result, .. } => {
            check_buf(dst, Side::Remote)?;
            check_room_for_u64(result)?;
        }
        Op::RemoteGet { event, dst: result } | Op::RemoteAdd { event, result, .. } => {
            super::remote::event_of(event)?;
            check_room_for_u64(result)?;
        }
        Op::RemoteSet { event, src } => {
            super::remote::event_of(event)?;
            if check_buf(src, Side::LocalSource)?.data().1 < 8 {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
        }
    }
    Ok(())
}

/// A local result buffer that must take a 64-bit value (atomics, remote-net get and add).
fn check_room_for_u64(p: *mut doca_buf) -> Result<(), doca_error_t> {
    if check_buf(p, Side::LocalDest)?.tail_space().1 < 8 {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Validates a receive's destination (NULL allowed: only empty messages then fit).
pub(crate) fn check_receive_dst(p: *mut doca_buf) -> Result<(), doca_error_t> {
    if !p.is_null() {
        check_buf(p, Side::LocalDest)?;
    }
    Ok(())
}

/// The destination buffer of a matched receive for `len` payload bytes: its free space's
/// address. TOO_BIG when it does not fit ("a message longer than the posted buffer fails the
/// receive"), other buffer errors as at submit.
pub(crate) fn receive_target(p: *mut doca_buf, len: u32) -> Result<usize, doca_error_t> {
    if len == 0 {
        return Ok(0);
    }
    if p.is_null() {
        return Err(DOCA_ERROR_TOO_BIG);
    }
    let b = check_buf(p, Side::LocalDest)?;
    let (addr, room) = b.tail_space();
    if room < len as usize {
        return Err(DOCA_ERROR_TOO_BIG);
    }
    Ok(addr)
}

/// A live buffer for the engine (re-checked at execution).
pub(crate) fn live_buf<'a>(p: *const doca_buf) -> Result<&'a doca_buf, doca_error_t> {
    // SAFETY: as in check_buf.
    unsafe { buf_ref(p) }
}

// ---- submit hooks ----

/// The `admit` hook of receives (`doca_task_submit_ex` without FLUSH): a place in the
/// receive queue is taken now, as DOCA posts the receive at submit; `NO_MEMORY` when full.
unsafe fn admit_receive(t: &doca_task) -> Result<(), doca_error_t> {
    // SAFETY: RDMA task kinds only live in pools of RDMA ctxs.
    let r = unsafe { rdma_of(t.ctx()) };
    if r.recvs.borrow().len() + r.rq_held.get() as usize >= r.rq_size.get() as usize {
        return Err(DOCA_ERROR_NO_MEMORY);
    }
    r.rq_held.set(r.rq_held.get() + 1);
    Ok(())
}

/// The `admit` hook of the send-side operations: a place in the send queue is taken at
/// submit (`NO_MEMORY` when full), the doorbell waits for the flush. Only the room is
/// checked here; the rest of the validation runs when the flush pushes the task (a refusal
/// then completes it with the error, as a bad work request completes on hardware).
pub(super) unsafe fn admit_op(t: &doca_task) -> Result<(), doca_error_t> {
    // SAFETY: RDMA task kinds only live in pools of RDMA ctxs.
    let r = unsafe { rdma_of(t.ctx()) };
    if r.sq_inflight.get() + r.sq_held.get() >= r.sq_size.get() {
        return Err(DOCA_ERROR_NO_MEMORY);
    }
    r.sq_held.set(r.sq_held.get() + 1);
    Ok(())
}

unsafe fn submit_receive(t: &doca_task, mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: RDMA task kinds only live in pools of RDMA ctxs.
    let r = unsafe { rdma_of(t.ctx()) };
    if mode == SubmitMode::Held {
        // Its place was reserved at submit (`admit_receive`); it takes it now.
        r.rq_held.set(r.rq_held.get().saturating_sub(1));
    }
    // SAFETY: this hook is only registered for the receive kind.
    let x = unsafe { t.downcast::<doca_rdma_task_receive>() };
    r.check_usable(None)?;
    check_receive_dst(x.dst.get())?;
    if r.recvs.borrow().len() >= r.rq_size.get() as usize {
        return Err(DOCA_ERROR_NO_MEMORY);
    }
    reset_receive(x);
    let was_empty = r.recvs.borrow().is_empty();
    r.recvs.borrow_mut().push_back(t);
    if was_empty {
        engine::receive_posted(r);
    }
    Ok(())
}

/// Puts back a receive that had been matched with a record that will never complete, at the
/// head of the posted receives (see `engine::drop_partial_record`).
pub(crate) fn repost_receive(r: &doca_rdma, t: &doca_task) {
    // SAFETY: only receive tasks are matched with records.
    reset_receive(unsafe { t.downcast::<doca_rdma_task_receive>() });
    r.recvs.borrow_mut().push_front(t);
}

fn reset_receive(x: &doca_rdma_task_receive) {
    x.res_opcode.set(DOCA_RDMA_OPCODE_RECV_SEND);
    x.res_len.set(0);
    x.res_imm.set(0);
    x.res_conn.set(ptr::null());
}

unsafe fn flush_receive(t: &doca_task) {
    // SAFETY: this hook is only registered for the receive kind.
    reset_receive(unsafe { t.downcast::<doca_rdma_task_receive>() });
}

pub(super) unsafe fn submit_op(t: &doca_task, mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: RDMA task kinds only live in pools of RDMA ctxs.
    let r = unsafe { rdma_of(t.ctx()) };
    if mode == SubmitMode::Held {
        // Its place was reserved at submit (`admit_op`); it takes it now.
        r.sq_held.set(r.sq_held.get().saturating_sub(1));
    }
    let (cp, op) = decode(t).ok_or(DOCA_ERROR_UNEXPECTED)?;
    // SAFETY: connection pointers come from allocate_init (validated there) or from a
    // re-use setter (stored as given: DOCA's contract makes it a connection of this provider,
    // and conn_ref rejects NULL and foreign magic); connection objects live until the rdma
    // is destroyed, which cannot happen while this task is allocated.
    let c = unsafe { conn_ref(cp) }?;
    if !r.owns(c) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    engine::check_peer_on_submit(r, c)?;
    r.conn_usable(c)?;
    validate(&op)?;
    if r.sq_inflight.get() >= r.sq_size.get() {
        return Err(DOCA_ERROR_NO_MEMORY);
    }
    match op {
        Op::Send { progress, .. } | Op::Write { progress, .. } => progress.set(0),
        Op::Read { dst, .. } => {
            // A read fills the destination's free space (validated just above), so its
            // result length is known now; doca_rdma_task_read_get_result_len reports it.
            let room = live_buf(dst)?.tail_space().1;
            // SAFETY: `decode` gave a Read, so the task is a read task.
            unsafe { t.downcast::<doca_rdma_task_read>() }.res_len.set(room as u32);
        }
        _ => {}
    }
    r.sq_inflight.set(r.sq_inflight.get() + 1);
    engine::enqueue(r, c, t);
    Ok(())
}

// ---- entry points ----

macro_rules! task_entry_points {
    ($ty:ident, $cb:ident, $set_conf:ident, $as_task:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $set_conf(
            rdma: *mut $crate::rdma::doca_rdma,
            ok_cb: $cb,
            err_cb: $cb,
            num_tasks: u32,
        ) -> $crate::types::doca_error_t {
            $crate::ffi::guard_err(|| {
                // SAFETY: non-NULL rdma pointers come from doca_rdma_create (DOCA contract).
                let r = unsafe { $crate::rdma::rdma_ref(rdma) }?;
                $crate::task::set_conf::<$ty>(r.ctx(), ok_cb, err_cb, num_tasks)
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $as_task(task: *mut $ty) -> *mut $crate::task::doca_task {
            // The header is the first field: a cast (NULL stays NULL).
            $crate::ffi::guard(core::ptr::null_mut(), || task.cast::<$crate::task::doca_task>())
        }
    };
}
pub(super) use task_entry_points;

task_entry_points!(
    doca_rdma_task_receive,
    doca_rdma_task_receive_completion_cb_t,
    doca_rdma_task_receive_set_conf,
    doca_rdma_task_receive_as_task
);
task_entry_points!(
    doca_rdma_task_send,
    doca_rdma_task_send_completion_cb_t,
    doca_rdma_task_send_set_conf,
    doca_rdma_task_send_as_task
);
task_entry_points!(
    doca_rdma_task_send_imm,
    doca_rdma_task_send_imm_completion_cb_t,
    doca_rdma_task_send_imm_set_conf,
    doca_rdma_task_send_imm_as_task
);
task_entry_points!(
    doca_rdma_task_read,
    doca_rdma_task_read_completion_cb_t,
    doca_rdma_task_read_set_conf,
    doca_rdma_task_read_as_task
);
task_entry_points!(
    doca_rdma_task_write,
    doca_rdma_task_write_completion_cb_t,
    doca_rdma_task_write_set_conf,
    doca_rdma_task_write_as_task
);
task_entry_points!(
    doca_rdma_task_write_imm,
    doca_rdma_task_write_imm_completion_cb_t,
    doca_rdma_task_write_imm_set_conf,
    doca_rdma_task_write_imm_as_task
);
task_entry_points!(
    doca_rdma_task_atomic_cmp_swp,
    doca_rdma_task_atomic_cmp_swp_completion_cb_t,
    doca_rdma_task_atomic_cmp_swp_set_conf,
    doca_rdma_task_atomic_cmp_swp_as_task
);
task_entry_points!(
    doca_rdma_task_atomic_fetch_add,
    doca_rdma_task_atomic_fetch_add_completion_cb_t,
    doca_rdma_task_atomic_fetch_add_set_conf,
    doca_rdma_task_atomic_fetch_add_as_task
);

/// Allocates a `T` on the rdma's ctx (for `conn`, if given) and writes it to `task`; `init`
/// fills the fields.
///
/// # Safety
/// `rdma` NULL or a live rdma; `conn` NULL or a connection of a live rdma; `task` NULL or
/// writable.
pub(super) unsafe fn alloc_init<T: TaskType>(
    rdma: *mut doca_rdma,
    conn: Option<*mut doca_rdma_connection>,
    user_data: doca_data,
    task: *mut *mut T,
    init: impl FnOnce(&T),
) -> Result<(), doca_error_t> {
    // SAFETY: per the contract.
    let r = unsafe { rdma_ref(rdma) }?;
    if task.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let c = match conn {
        Some(p) => {
            // SAFETY: per the contract.
            let c = unsafe { conn_ref(p) }?;
            if !r.owns(c) {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            Some(c)
        }
        None => None,
    };
    r.check_usable(c)?;
    let t = task::alloc::<T>(r.ctx(), user_data)?;
    // SAFETY: `t` is a freshly allocated slot of type T, alive while the ctx lives.
    init(unsafe { t.as_ref() });
    // SAFETY: non-NULL out-pointer, writable by the caller's contract.
    unsafe { out(task, t.as_ptr()) }
}

pub(super) fn nonnull<T>(p: *const T) -> Result<(), doca_error_t> {
    if p.is_null() {
        Err(DOCA_ERROR_INVALID_VALUE)
    } else {
        Ok(())
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_receive_allocate_init(
    rdma: *mut doca_rdma,
    dst_buf: *mut doca_buf,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_receive,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, None, user_data, task, |t: &doca_rdma_task_receive| {
                t.dst.set(dst_buf);
                reset_receive(t);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_send_allocate_init(
    rdma: *mut doca_rdma,
    conn: *mut doca_rdma_connection,
    src_buf: *const doca_buf,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_send,
) -> doca_error_t {
    guard_err(|| {
        nonnull(conn)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, Some(conn), user_data, task, |t: &doca_rdma_task_send| {
                t.conn.set(conn);
                t.src.set(src_buf);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_send_imm_allocate_init(
    rdma: *mut doca_rdma,
    conn: *mut doca_rdma_connection,
    src_buf: *const doca_buf,
    immediate_data: doca_be32_t,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_send_imm,
) -> doca_error_t {
    guard_err(|| {
        nonnull(conn)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, Some(conn), user_data, task, |t: &doca_rdma_task_send_imm| {
                t.conn.set(conn);
                t.src.set(src_buf);
                t.imm.set(immediate_data);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_read_allocate_init(
    rdma: *mut doca_rdma,
    conn: *mut doca_rdma_connection,
    src_buf: *const doca_buf,
    dst_buf: *mut doca_buf,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_read,
) -> doca_error_t {
    guard_err(|| {
        nonnull(conn)?;
        nonnull(src_buf)?;
        nonnull(dst_buf)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, Some(conn), user_data, task, |t: &doca_rdma_task_read| {
                t.conn.set(conn);
                t.src.set(src_buf);
                t.dst.set(dst_buf);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_write_allocate_init(
    rdma: *mut doca_rdma,
    conn: *mut doca_rdma_connection,
    src_buf: *const doca_buf,
    dst_buf: *mut doca_buf,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_write,
) -> doca_error_t {
    guard_err(|| {
        nonnull(conn)?;
        nonnull(src_buf)?;
        nonnull(dst_buf)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, Some(conn), user_data, task, |t: &doca_rdma_task_write| {
                t.conn.set(conn);
                t.src.set(src_buf);
                t.dst.set(dst_buf);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_write_imm_allocate_init(
    rdma: *mut doca_rdma,
    conn: *mut doca_rdma_connection,
    src_buf: *const doca_buf,
    dst_buf: *mut doca_buf,
    immediate_data: doca_be32_t,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_write_imm,
) -> doca_error_t {
    guard_err(|| {
        nonnull(conn)?;
        nonnull(src_buf)?;
        nonnull(dst_buf)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, Some(conn), user_data, task, |t: &doca_rdma_task_write_imm| {
                t.conn.set(conn);
                t.src.set(src_buf);
                t.dst.set(dst_buf);
                t.imm.set(immediate_data);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_atomic_cmp_swp_allocate_init(
    rdma: *mut doca_rdma,
    conn: *mut doca_rdma_connection,
    dst_buf: *mut doca_buf,
    result_buf: *mut doca_buf,
    cmp_data: u64,
    swap_data: u64,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_atomic_cmp_swp,
) -> doca_error_t {
    guard_err(|| {
        nonnull(conn)?;
        nonnull(dst_buf)?;
        nonnull(result_buf)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, Some(conn), user_data, task, |t: &doca_rdma_task_atomic_cmp_swp| {
                t.conn.set(conn);
                t.dst.set(dst_buf);
                t.result.set(result_buf);
                t.cmp.set(cmp_data);
                t.swap.set(swap_data);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_atomic_fetch_add_allocate_init(
    rdma: *mut doca_rdma,
    conn: *mut doca_rdma_connection,
    dst_buf: *mut doca_buf,
    result_buf: *mut doca_buf,
    add_data: u64,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_atomic_fetch_add,
) -> doca_error_t {
    guard_err(|| {
        nonnull(conn)?;
        nonnull(dst_buf)?;
        nonnull(result_buf)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, Some(conn), user_data, task, |t: &doca_rdma_task_atomic_fetch_add| {
                t.conn.set(conn);
                t.dst.set(dst_buf);
                t.result.set(result_buf);
                t.add.set(add_data);
            })
        }
    })
}

/// The receive task behind a C pointer, if it is one.
///
/// # Safety
/// A non-NULL `task` must be a task of this provider.
unsafe fn receive_ref<'a>(task: *const doca_rdma_task_receive) -> Option<&'a doca_rdma_task_receive> {
    // SAFETY: per the contract.
    let t = unsafe { task::task_ref(task.cast::<doca_task>()) }.ok()?;
    if !t.is::<doca_rdma_task_receive>() {
        return None;
    }
    // SAFETY: kind checked just above.
    Some(unsafe { t.downcast::<doca_rdma_task_receive>() })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_receive_get_result_opcode(
    task: *const doca_rdma_task_receive,
) -> doca_rdma_opcode {
    guard(DOCA_RDMA_OPCODE_RECV_SEND, || {
        // SAFETY: non-NULL task pointers come from this provider (DOCA contract).
        unsafe { receive_ref(task) }.map_or(DOCA_RDMA_OPCODE_RECV_SEND, |t| t.res_opcode.get())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_receive_get_result_len(task: *const doca_rdma_task_receive) -> u32 {
    guard(0, || {
        // SAFETY: as above.
        unsafe { receive_ref(task) }.map_or(0, |t| t.res_len.get())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_receive_get_result_immediate_data(
    task: *const doca_rdma_task_receive,
) -> doca_be32_t {
    guard(0, || {
        // SAFETY: as above.
        unsafe { receive_ref(task) }.map_or(0, |t| t.res_imm.get())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_receive_get_result_rdma_connection(
    task: *const doca_rdma_task_receive,
) -> *const doca_rdma_connection {
    guard(ptr::null(), || {
        // SAFETY: as above.
        unsafe { receive_ref(task) }.map_or(ptr::null(), |t| t.res_conn.get())
    })
}
