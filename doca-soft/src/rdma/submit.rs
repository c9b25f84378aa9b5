//! How a task enters the engine: the task kinds (which bind every RDMA task type to the
//! hooks below), admission to the send and receive queues, and the submit hooks.
//!
//! A submit decodes the task once into an [`Op`] (`tasks.rs`, `remote.rs`), validates it
//! together with its connection, and hands both to the engine (`engine.rs`), which executes
//! the `Op` without reading the task again. Receives are validated and posted.
//!
//! This module sits on top: it names the task types and the engine; neither names it.

use super::conn::conn_ref;
use super::engine;
use super::op::Op;
use super::rdma_of;
use super::remote::{
    doca_rdma_task_remote_net_sync_event_get, doca_rdma_task_remote_net_sync_event_notify_add,
    doca_rdma_task_remote_net_sync_event_notify_set,
};
use super::tasks::{
    check_receive_dst, doca_rdma_task_atomic_cmp_swp, doca_rdma_task_atomic_fetch_add, doca_rdma_task_read,
    doca_rdma_task_receive, doca_rdma_task_send, doca_rdma_task_send_imm, doca_rdma_task_write,
    doca_rdma_task_write_imm, live_buf, reset_receive, validate, SendTask,
};
use crate::ffi::refused;
use crate::task::{doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

// ---- the task kinds ----

static RECEIVE_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_receive>("rdma.receive", submit_receive, None, Some(flush_receive))
        .with_admit(admit_receive);
static SEND_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_send>("rdma.send", submit_op::<doca_rdma_task_send>, None, None)
        .with_admit(admit_op);
static SEND_IMM_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_send_imm>("rdma.send_imm", submit_op::<doca_rdma_task_send_imm>, None, None)
        .with_admit(admit_op);
static READ_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_read>("rdma.read", submit_op::<doca_rdma_task_read>, None, None)
        .with_admit(admit_op);
static WRITE_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_write>("rdma.write", submit_op::<doca_rdma_task_write>, None, None)
        .with_admit(admit_op);
static WRITE_IMM_KIND: TaskKind =
    TaskKind::new::<doca_rdma_task_write_imm>("rdma.write_imm", submit_op::<doca_rdma_task_write_imm>, None, None)
        .with_admit(admit_op);
static CMP_SWP_KIND: TaskKind = TaskKind::new::<doca_rdma_task_atomic_cmp_swp>(
    "rdma.atomic_cmp_swp",
    submit_op::<doca_rdma_task_atomic_cmp_swp>,
    None,
    None,
)
.with_admit(admit_op);
static FETCH_ADD_KIND: TaskKind = TaskKind::new::<doca_rdma_task_atomic_fetch_add>(
    "rdma.atomic_fetch_add",
    submit_op::<doca_rdma_task_atomic_fetch_add>,
    None,
    None,
)
.with_admit(admit_op);
static GET_KIND: TaskKind = TaskKind::new::<doca_rdma_task_remote_net_sync_event_get>(
    "rdma.remote_net_sync_event_get",
    submit_op::<doca_rdma_task_remote_net_sync_event_get>,
    None,
    None,
)
.with_admit(admit_op);
static SET_KIND: TaskKind = TaskKind::new::<doca_rdma_task_remote_net_sync_event_notify_set>(
    "rdma.remote_net_sync_event_notify_set",
    submit_op::<doca_rdma_task_remote_net_sync_event_notify_set>,
    None,
    None,
)
.with_admit(admit_op);
static ADD_KIND: TaskKind = TaskKind::new::<doca_rdma_task_remote_net_sync_event_notify_add>(
    "rdma.remote_net_sync_event_notify_add",
    submit_op::<doca_rdma_task_remote_net_sync_event_notify_add>,
    None,
    None,
)
.with_admit(admit_op);

/// Binds a task type of `tasks.rs` or `remote.rs` to its kind above.
macro_rules! bind_kind {
    ($($ty:ident => $kind:ident),* $(,)?) => {$(
        // SAFETY: the type is #[repr(C)] with the doca_task header first (see its
        // definition), and the kind is built with TaskKind::new::<$ty>.
        unsafe impl TaskType for $ty {
            const KIND: &'static TaskKind = &$kind;
            fn with_header(base: doca_task) -> Self {
                $ty::new(base)
            }
        }
    )*};
}

bind_kind!(
    doca_rdma_task_receive => RECEIVE_KIND,
    doca_rdma_task_send => SEND_KIND,
    doca_rdma_task_send_imm => SEND_IMM_KIND,
    doca_rdma_task_read => READ_KIND,
    doca_rdma_task_write => WRITE_KIND,
    doca_rdma_task_write_imm => WRITE_IMM_KIND,
    doca_rdma_task_atomic_cmp_swp => CMP_SWP_KIND,
    doca_rdma_task_atomic_fetch_add => FETCH_ADD_KIND,
    doca_rdma_task_remote_net_sync_event_get => GET_KIND,
    doca_rdma_task_remote_net_sync_event_notify_set => SET_KIND,
    doca_rdma_task_remote_net_sync_event_notify_add => ADD_KIND,
);

// ---- admission and submit hooks ----

/// The `admit` hook of receives (`doca_task_submit_ex` without FLUSH): a place in the
/// receive queue is taken now, as DOCA posts the receive at submit; `NO_MEMORY` when full.
unsafe fn admit_receive(t: &doca_task) -> Result<(), doca_error_t> {
    // SAFETY: RDMA task kinds only live in pools of RDMA ctxs.
    let r = unsafe { rdma_of(t.ctx()) };
    if r.recvs.borrow().len() + r.rq_held.get() as usize >= r.rq_size.get() as usize {
        return Err(refused(DOCA_ERROR_NO_MEMORY));
    }
    r.rq_held.set(r.rq_held.get() + 1);
    Ok(())
}

/// The `admit` hook of the send-side operations: a place in the send queue is taken at
/// submit (`NO_MEMORY` when full), the doorbell waits for the flush. Only the room is
/// checked here; the rest of the validation runs when the flush pushes the task (a refusal
/// then completes it with the error, as a bad work request completes on hardware).
unsafe fn admit_op(t: &doca_task) -> Result<(), doca_error_t> {
    // SAFETY: RDMA task kinds only live in pools of RDMA ctxs.
    let r = unsafe { rdma_of(t.ctx()) };
    if r.sq_inflight.get() + r.sq_held.get() >= r.sq_size.get() {
        return Err(refused(DOCA_ERROR_NO_MEMORY));
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
    check_receive_dst(x.dst.get(), r)?;
    if r.recvs.borrow().len() >= r.rq_size.get() as usize {
        return Err(DOCA_ERROR_NO_MEMORY);
    }
    reset_receive(x);
    engine::post_receive(r, t);
    Ok(())
}

unsafe fn flush_receive(t: &doca_task) {
    // SAFETY: this hook is only registered for the receive kind.
    reset_receive(unsafe { t.downcast::<doca_rdma_task_receive>() });
}

/// The submit hook of the send-side kinds, one instance per task type `T` (the hook of
/// `T`'s kind is `submit_op::<T>`, so `t` is a `T`).
unsafe fn submit_op<T: SendTask>(t: &doca_task, mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: RDMA task kinds only live in pools of RDMA ctxs.
    let r = unsafe { rdma_of(t.ctx()) };
    if mode == SubmitMode::Held {
        // Its place was reserved at submit (`admit_op`); it takes it now.
        r.sq_held.set(r.sq_held.get().saturating_sub(1));
    }
    // SAFETY: this hook is registered only for T's kind.
    let (cp, op) = unsafe { t.downcast::<T>() }.decode();
    // SAFETY: connection pointers come from allocate_init (validated there) or from a
    // re-use setter (stored as given: DOCA's contract makes it a connection of this provider,
    // and conn_ref rejects NULL and foreign magic); connection objects live until the rdma
    // is destroyed, which cannot happen while this task is allocated.
    let c = unsafe { conn_ref(cp) }?;
    if !r.owns(c) {
        return Err(refused(DOCA_ERROR_INVALID_VALUE));
    }
    engine::check_conn_on_submit(r, c)?;
    validate(&op, r)?;
    if r.sq_inflight.get() >= r.sq_size.get() {
        return Err(refused(DOCA_ERROR_NO_MEMORY));
    }
    match op {
        // SAFETY: `decode` just pointed `progress` into `t`, which is alive.
        Op::Send { progress, .. } | Op::Write { progress, .. } => unsafe { &*progress }.set(0),
        Op::Read { src, .. } => {
            // A read moves the source's data (validated just above), so its result length
            // is known now; doca_rdma_task_read_get_result_len reports it.
            let n = if src.is_null() { 0 } else { live_buf(src)?.data().1 };
            // SAFETY: `decode` gave a Read, so the task is a read task.
            unsafe { t.downcast::<doca_rdma_task_read>() }.res_len.set(n as u32);
        }
        _ => {}
    }
    engine::enqueue(r, c, t, &op);
    Ok(())
}
