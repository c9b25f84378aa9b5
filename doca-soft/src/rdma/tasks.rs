//! The eight RDMA task types: their structs, decoding into the [`Op`] the engine executes,
//! argument validation, and their entry points (`*_allocate_init`, `*_set_conf`,
//! `*_as_task`, the receive's result getters; the re-use setters and getters are in
//! `accessors.rs`).
//!
//! Every task is a `#[repr(C)]` struct with the [`doca_task`] header first (see `task.rs`).
//! Allocation stores the arguments; submit (`submit.rs`) decodes and validates them once
//! (every submit validates, as `doca_task_try_submit` does in DOCA) and hands the task to
//! the engine: receives join the ctx's posted-receive queue, everything else its
//! connection's queue. This module knows nothing of queues or connection state: the engine
//! (`engine.rs`) owns every state transition.
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

use super::conn::{conn_ref, doca_rdma_connection, ReceiveTarget};
use super::op::Op;
use super::{doca_rdma, rdma_ref, MAX_MESSAGE_BYTES};
use crate::buf::{buf_ref, buf_ref_on_submit, doca_buf};
use crate::ffi::{guard, guard_err, out, refused};
use crate::sync_event::doca_sync_event_remote_net;
use crate::task::{self, doca_task, TaskType};
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
    /// Bytes the read brings (the source's data length at submit); valid after success.
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

fn null_conn() -> Cell<*const doca_rdma_connection> {
    Cell::new(ptr::null())
}

impl doca_rdma_task_receive {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
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
impl doca_rdma_task_send {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
        Self { base, conn: null_conn(), src: Cell::new(ptr::null()), progress: Cell::new(0) }
    }
}
impl doca_rdma_task_send_imm {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
        Self { base, conn: null_conn(), src: Cell::new(ptr::null()), imm: Cell::new(0), progress: Cell::new(0) }
    }
}
impl doca_rdma_task_read {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
        Self {
            base,
            conn: null_conn(),
            src: Cell::new(ptr::null()),
            dst: Cell::new(ptr::null_mut()),
            res_len: Cell::new(0),
        }
    }
}
impl doca_rdma_task_write {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
        Self {
            base,
            conn: null_conn(),
            src: Cell::new(ptr::null()),
            dst: Cell::new(ptr::null_mut()),
            progress: Cell::new(0),
        }
    }
}
impl doca_rdma_task_write_imm {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
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
impl doca_rdma_task_atomic_cmp_swp {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
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
impl doca_rdma_task_atomic_fetch_add {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
        Self {
            base,
            conn: null_conn(),
            dst: Cell::new(ptr::null_mut()),
            result: Cell::new(ptr::null_mut()),
            add: Cell::new(0),
        }
    }
}

// ---- decoding: what the engine executes ----

/// A send-side task type, decoded once at submit into its connection and the [`Op`] the
/// engine executes. The submit hook is generic over it (`submit.rs`), so a submit reads the
/// fields of its own type without asking which type the task is.
pub(crate) trait SendTask: TaskType {
    fn decode(&self) -> (*const doca_rdma_connection, Op);
}

impl SendTask for doca_rdma_task_send {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        (self.conn.get(), Op::Send { src: self.src.get(), imm: None, progress: ptr::from_ref(&self.progress) })
    }
}

impl SendTask for doca_rdma_task_send_imm {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        let op = Op::Send { src: self.src.get(), imm: Some(self.imm.get()), progress: ptr::from_ref(&self.progress) };
        (self.conn.get(), op)
    }
}

impl SendTask for doca_rdma_task_write {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        let op =
            Op::Write { src: self.src.get(), dst: self.dst.get(), imm: None, progress: ptr::from_ref(&self.progress) };
        (self.conn.get(), op)
    }
}

impl SendTask for doca_rdma_task_write_imm {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        let op = Op::Write {
            src: self.src.get(),
            dst: self.dst.get(),
            imm: Some(self.imm.get()),
            progress: ptr::from_ref(&self.progress),
        };
        (self.conn.get(), op)
    }
}

impl SendTask for doca_rdma_task_read {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        (self.conn.get(), Op::Read { src: self.src.get(), dst: self.dst.get() })
    }
}

impl SendTask for doca_rdma_task_atomic_cmp_swp {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        let op =
            Op::CmpSwp { dst: self.dst.get(), result: self.result.get(), cmp: self.cmp.get(), swap: self.swap.get() };
        (self.conn.get(), op)
    }
}

impl SendTask for doca_rdma_task_atomic_fetch_add {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        (self.conn.get(), Op::FetchAdd { dst: self.dst.get(), result: self.result.get(), add: self.add.get() })
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
#[inline(always)]
fn check_buf<'a>(p: *const doca_buf, side: Side) -> Result<&'a doca_buf, doca_error_t> {
    // SAFETY: buffer pointers given to allocate_init come from this provider's inventories,
    // which the caller keeps alive while the task exists (DOCA contract); buf_ref rejects
    // NULL and returned buffers.
    let b = unsafe { buf_ref_on_submit(p) }?;
    check_side(b, side)?;
    Ok(b)
}

/// The side and permission checks of [`check_buf`], for one live buffer.
#[inline(always)]
fn check_side(b: &doca_buf, side: Side) -> Result<(), doca_error_t> {
    // Lock-free reads: a live buffer keeps its mmap started and unchangeable (mmap.rs).
    let m = b.mmap();
    let imported = m.is_imported();
    match side {
        Side::Remote if !imported => Err(refused(DOCA_ERROR_INVALID_VALUE)),
        Side::LocalSource | Side::LocalDest if imported => Err(refused(DOCA_ERROR_INVALID_VALUE)),
        Side::LocalDest if m.perms_of_started() & DOCA_ACCESS_FLAG_LOCAL_READ_WRITE == 0 => {
            Err(refused(DOCA_ERROR_NOT_PERMITTED))
        }
        _ => Ok(()),
    }
}

/// A checked buffer in a place where DOCA takes a list (send, send_imm, write and write_imm
/// sources, the read and receive destinations): a list may have at most `limit` elements
/// (`max_send_buf_list_len`, or the receive's `dst_buf_list_len`), each on the same side as
/// the first. (Where DOCA takes only a list's first element, the remote side and atomics,
/// only that element is checked and used.)
#[inline(always)]
fn check_list(b: &doca_buf, side: Side, limit: u32) -> Result<&doca_buf, doca_error_t> {
    if !b.is_single() {
        check_elements(b, side, limit)?;
    }
    Ok(b)
}

#[cold]
#[inline(never)]
fn check_elements(b: &doca_buf, side: Side, limit: u32) -> Result<(), doca_error_t> {
    for (i, e) in b.elements().enumerate() {
        if i as u32 >= limit {
            return Err(crate::sdk_fail!(
                DOCA_ERROR_INVALID_VALUE,
                "doca_rdma: a buffer list longer than its limit of {limit} (max_send_buf_list_len, or the receive's dst_buf_list_len)"
            ));
        }
        if i > 0 {
            check_side(e, side)?;
        }
    }
    Ok(())
}

#[inline(always)]
fn check_len(n: usize) -> Result<(), doca_error_t> {
    if n > MAX_MESSAGE_BYTES {
        Err(refused(DOCA_ERROR_TOO_BIG))
    } else {
        Ok(())
    }
}

/// Argument checks of a send-side operation (see the module docs).
// Always inlined: `submit_op::<T>` is one instance per task type, whose decoded `Op` is of
// one known variant, so each instance keeps only its own arm of the match.
#[inline(always)]
pub(super) fn validate(op: &Op, r: &doca_rdma) -> Result<(), doca_error_t> {
    let limit = || r.send_buf_list_len.get();
    match *op {
        Op::Send { src, .. } => {
            if !src.is_null() {
                check_len(doca_buf::payload_len(check_list(
                    check_buf(src, Side::LocalSource)?,
                    Side::LocalSource,
                    limit(),
                )?))?;
            }
        }
        // DOCA: a NULL source writes (or reads) no data, and the destination may then be
        // NULL too; a source needs a destination (`check_buf` refuses NULL).
        Op::Write { src, dst, .. } => {
            let n = if src.is_null() {
                0
            } else {
                doca_buf::payload_len(check_list(check_buf(src, Side::LocalSource)?, Side::LocalSource, limit())?)
            };
            if !src.is_null() || !dst.is_null() {
                check_buf(dst, Side::Remote)?;
            }
            check_len(n)?;
        }
        Op::Read { src, dst } => {
            // DOCA's read: the source's data ("holding the data that should be read") is
            // appended after the destination's, which needs the room.
            let n = if src.is_null() { 0 } else { check_buf(src, Side::Remote)?.data().1 };
            check_len(n)?;
            if (!src.is_null() || !dst.is_null())
                && doca_buf::room_len(check_list(check_buf(dst, Side::LocalDest)?, Side::LocalDest, limit())?) < n
            {
                return Err(refused(DOCA_ERROR_INVALID_VALUE));
            }
        }
        Op::CmpSwp { dst, result, .. } | Op::FetchAdd { dst, result, .. } => {
            check_buf(dst, Side::Remote)?;
            check_room_for_u64(result)?;
        }
        Op::RemoteGet { event, dst: result } | Op::RemoteAdd { event, result, .. } => {
            event_of(event)?;
            check_room_for_u64(result)?;
        }
        Op::RemoteSet { event, src } => {
            event_of(event)?;
            if check_buf(src, Side::LocalSource)?.data().1 < 8 {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
        }
    }
    Ok(())
}

/// A local result buffer that must take a 64-bit value (atomics, remote-net get and add).
#[inline(always)]
fn check_room_for_u64(p: *mut doca_buf) -> Result<(), doca_error_t> {
    if check_buf(p, Side::LocalDest)?.tail_space().1 < 8 {
        return Err(refused(DOCA_ERROR_INVALID_VALUE));
    }
    Ok(())
}

/// Validates a receive's destination (NULL allowed: only empty messages then fit), a list of
/// at most the receive's `dst_buf_list_len` elements.
pub(crate) fn check_receive_dst(p: *mut doca_buf, r: &doca_rdma) -> Result<(), doca_error_t> {
    if !p.is_null() {
        check_list(check_buf(p, Side::LocalDest)?, Side::LocalDest, r.recv_buf_list_len.get())?;
    }
    Ok(())
}

/// The destination of a matched receive for `len` payload bytes. TOO_BIG when it does not
/// fit ("a message longer than the posted buffer fails the receive"), other buffer errors as
/// at submit (the list's elements were checked at submit, and stay the task's meanwhile).
pub(crate) fn receive_target(p: *mut doca_buf, len: u32) -> Result<ReceiveTarget, doca_error_t> {
    if len == 0 {
        return Ok(ReceiveTarget::Single(0));
    }
    if p.is_null() {
        return Err(DOCA_ERROR_TOO_BIG);
    }
    let b = check_buf(p, Side::LocalDest)?;
    if !b.is_single() {
        if b.room_len() < len as usize {
            return Err(DOCA_ERROR_TOO_BIG);
        }
        return Ok(ReceiveTarget::List(b));
    }
    let (addr, room) = b.tail_space();
    if room < len as usize {
        return Err(DOCA_ERROR_TOO_BIG);
    }
    Ok(ReceiveTarget::Single(addr))
}

/// A live buffer for the engine (re-checked at execution).
pub(crate) fn live_buf<'a>(p: *const doca_buf) -> Result<&'a doca_buf, doca_error_t> {
    // SAFETY: as in check_buf.
    unsafe { buf_ref(p) }
}

/// The remote-net handle of a task, checked live.
pub(crate) fn event_of<'a>(
    p: *const doca_sync_event_remote_net,
) -> Result<&'a doca_sync_event_remote_net, doca_error_t> {
    // SAFETY: handles given to allocate_init or the setters come from this provider; the
    // caller keeps them alive while a task names them (DOCA contract). remote_net_ref
    // rejects NULL and destroyed handles.
    unsafe { crate::sync_event::remote_net_ref(p) }
}

/// Clears the results of a receive (at allocation, at every posting and when flushed).
pub(super) fn reset_receive(x: &doca_rdma_task_receive) {
    x.res_opcode.set(DOCA_RDMA_OPCODE_RECV_SEND);
    x.res_len.set(0);
    x.res_imm.set(0);
    x.res_conn.set(ptr::null());
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

/// The buffers of a write or read: a NULL source means no data, and then the destination may
/// be NULL too (DOCA); a source needs a destination.
fn source_needs_destination(src: *const doca_buf, dst: *mut doca_buf) -> Result<(), doca_error_t> {
    if src.is_null() {
        Ok(())
    } else {
        nonnull(dst)
    }
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
        source_needs_destination(src_buf, dst_buf)?;
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
        source_needs_destination(src_buf, dst_buf)?;
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
        source_needs_destination(src_buf, dst_buf)?;
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
