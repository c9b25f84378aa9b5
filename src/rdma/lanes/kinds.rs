//! What a lane does with its task, one implementation per operation kind: allocate it over
//! the lane's descriptors, point it at another lane's, and ready it for its next operation.
//! The ring ([`super::ring`]) dispatches on the kind once per submission and then runs one
//! kind's code, with no other branch on it.

use super::super::{CmpSwp, FetchAdd, Read, Recv, Send as SendTask, SendImm, Write, WriteImm};
use crate::ext::DocaTask;
use crate::sys;

/// Where a lane's task is made: the context, the connection (null for a receive), the
/// lane's descriptors `[local, remote]` and its operands.
pub(super) struct At {
    pub(super) rdma: *mut sys::doca_rdma,
    pub(super) conn: *mut sys::doca_rdma_connection,
    pub(super) bufs: [*mut sys::doca_buf; 2],
    pub(super) operands: [u64; 2],
}

/// What a lane does with a task of one kind: make it, point it at another lane's
/// descriptors, and ready it for its next operation. One implementation per kind, so that
/// the submission path, once dispatched on the kind, has no other branch on it.
///
/// # Safety
/// Each function is called on a task of this kind that DOCA does not own, with descriptors
/// that outlive every task using them.
pub(super) unsafe trait LaneTask: DocaTask {
    /// `*_allocate_init` over `at` with user data `ud`.
    ///
    /// # Safety
    /// `at` names a live context and connection and the lane's live descriptors.
    unsafe fn alloc(at: &At, ud: sys::doca_data, task: &mut *mut Self::Task) -> sys::doca_error_t;

    /// Points `task` at descriptors `l` (local) and `r` (remote, null for none).
    ///
    /// # Safety
    /// `task` is a live task of this kind that DOCA does not own.
    unsafe fn repoint(task: *mut Self::Task, l: *mut sys::doca_buf, r: *mut sys::doca_buf);

    /// Readies `task` for its next operation: every parameter stays, but results are
    /// appended after a buffer's data, so each buffer a result lands in (a write's remote
    /// destination, a read's or a receive's local one, an atomic's result) is emptied; the
    /// operands are set. A read's remote source and an atomic's target keep their data.
    ///
    /// # Safety
    /// As for [`repoint`](LaneTask::repoint); `l` and `r` are the task's own descriptors.
    unsafe fn prepare(task: *mut Self::Task, l: *mut sys::doca_buf, r: *mut sys::doca_buf, operands: [u64; 2]);
}

/// Implements [`LaneTask`] for one kind: its allocation, its setters, its reset.
macro_rules! lane_task {
    // Three closures in order: allocate, repoint, prepare (closure syntax, so that rustfmt
    // formats the invocations).
    ($kind:ty, |$at:ident, $ud:ident, $t:ident| $alloc:expr,
     |$rt:ident, $rl:ident, $rr:ident| $repoint:block,
     |$pt:ident, $pl:ident, $pr:ident, $ops:ident| $prepare:block $(,)?) => {
        // SAFETY: the calls are the kind's own `allocate_init` and setters, made on a task of
        // this kind as the trait's contract requires.
        unsafe impl LaneTask for $kind {
            #[inline(always)]
            unsafe fn alloc($at: &At, $ud: sys::doca_data, $t: &mut *mut Self::Task) -> sys::doca_error_t {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $alloc }
            }
            #[inline(always)]
            unsafe fn repoint($rt: *mut Self::Task, $rl: *mut sys::doca_buf, $rr: *mut sys::doca_buf) {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $repoint }
            }
            #[inline(always)]
            unsafe fn prepare($pt: *mut Self::Task, $pl: *mut sys::doca_buf, $pr: *mut sys::doca_buf, $ops: [u64; 2]) {
                // SAFETY: forwarded (the caller's contract). (A send has nothing to ready.)
                #[allow(unused_unsafe)]
                unsafe {
                    $prepare
                }
            }
        }
    };
}

/// The immediate among a lane's operands, as DOCA takes it (big-endian).
fn imm(ops: [u64; 2]) -> u32 {
    (ops[0] as u32).to_be()
}

lane_task!(
    Write,
    |a, ud, t| sys::doca_rdma_task_write_allocate_init(a.rdma, a.conn, a.bufs[0], a.bufs[1], ud, t),
    |t, l, r| {
        sys::doca_rdma_task_write_set_src_buf(t, l);
        sys::doca_rdma_task_write_set_dst_buf(t, r);
    },
    |_t, _l, r, _o| {
        sys::doca_buf_reset_data_len(r);
    }
);
lane_task!(
    WriteImm,
    |a, ud, t| sys::doca_rdma_task_write_imm_allocate_init(
        a.rdma,
        a.conn,
        a.bufs[0],
        a.bufs[1],
        imm(a.operands),
        ud,
        t
    ),
    |t, l, r| {
        sys::doca_rdma_task_write_imm_set_src_buf(t, l);
        sys::doca_rdma_task_write_imm_set_dst_buf(t, r);
    },
    |t, _l, r, o| {
        sys::doca_buf_reset_data_len(r);
        sys::doca_rdma_task_write_imm_set_immediate_data(t, imm(o));
    }
);
lane_task!(
    Read,
    |a, ud, t| sys::doca_rdma_task_read_allocate_init(a.rdma, a.conn, a.bufs[1], a.bufs[0], ud, t),
    |t, l, r| {
        sys::doca_rdma_task_read_set_src_buf(t, r);
        sys::doca_rdma_task_read_set_dst_buf(t, l);
    },
    |_t, l, _r, _o| {
        sys::doca_buf_reset_data_len(l);
    }
);
lane_task!(
    SendTask,
    |a, ud, t| sys::doca_rdma_task_send_allocate_init(a.rdma, a.conn, a.bufs[0], ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_send_set_src_buf(t, l);
    },
    |_t, _l, _r, _o| {}
);
lane_task!(
    SendImm,
    |a, ud, t| sys::doca_rdma_task_send_imm_allocate_init(a.rdma, a.conn, a.bufs[0], imm(a.operands), ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_send_imm_set_src_buf(t, l);
    },
    |t, _l, _r, o| {
        sys::doca_rdma_task_send_imm_set_immediate_data(t, imm(o));
    }
);
lane_task!(
    Recv,
    |a, ud, t| sys::doca_rdma_task_receive_allocate_init(a.rdma, a.bufs[0], ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_receive_set_dst_buf(t, l);
    },
    |_t, l, _r, _o| {
        sys::doca_buf_reset_data_len(l);
    }
);
lane_task!(
    FetchAdd,
    |a, ud, t| sys::doca_rdma_task_atomic_fetch_add_allocate_init(
        a.rdma,
        a.conn,
        a.bufs[1],
        a.bufs[0],
        a.operands[0],
        ud,
        t
    ),
    |t, l, r| {
        sys::doca_rdma_task_atomic_fetch_add_set_dst_buf(t, r);
        sys::doca_rdma_task_atomic_fetch_add_set_result_buf(t, l);
    },
    |t, l, _r, o| {
        sys::doca_buf_reset_data_len(l);
        sys::doca_rdma_task_atomic_fetch_add_set_add_data(t, o[0]);
    }
);
lane_task!(
    CmpSwp,
    |a, ud, t| sys::doca_rdma_task_atomic_cmp_swp_allocate_init(
        a.rdma,
        a.conn,
        a.bufs[1],
        a.bufs[0],
        a.operands[0],
        a.operands[1],
        ud,
        t
    ),
    |t, l, r| {
        sys::doca_rdma_task_atomic_cmp_swp_set_dst_buf(t, r);
        sys::doca_rdma_task_atomic_cmp_swp_set_result_buf(t, l);
    },
    |t, l, _r, o| {
        sys::doca_buf_reset_data_len(l);
        sys::doca_rdma_task_atomic_cmp_swp_set_cmp_data(t, o[0]);
        sys::doca_rdma_task_atomic_cmp_swp_set_swap_data(t, o[1]);
    }
);
