//! Per-task getters and setters of the RDMA tasks (`doca_rdma_task_X_set_F` /
//! `doca_rdma_task_X_get_F`), for re-using a task.
//!
//! # Re-use (DOCA 3.0 semantics)
//!
//! In its completion callback a task belongs to the user again, with every parameter it was
//! allocated with (buffers, connection, values, user data). The user may change any of them
//! with these setters and submit it again, from the callback or later. Nothing is reset by
//! the provider: results are appended after a destination's existing data, so the user resets
//! the destination (`doca_buf_reset_data_len`) or gives a fresh one, or the next run writes
//! after the first result (or fails for lack of room, `DOCA_ERROR_INVALID_VALUE` for an
//! atomic result buffer without 8 free bytes). Submit validates the new parameters exactly as
//! for a fresh task; a failed submit leaves the task with the user, unchanged.
//!
//! # Rules for setters
//!
//! Setters return nothing, so they cannot report misuse: a setter on a task the library owns
//! (submitted, not yet delivered), on a task of another type or on an invalid pointer changes
//! nothing and logs an ERROR record in the SDK log. A NULL or foreign buffer or connection is
//! stored as given and refused by the next submit (`DOCA_ERROR_INVALID_VALUE`), as DOCA's
//! setters do not validate either. Getters return NULL / 0 for an invalid task.

use core::ptr;

use super::conn::doca_rdma_connection;
use super::tasks::{
    doca_rdma_task_atomic_cmp_swp, doca_rdma_task_atomic_fetch_add, doca_rdma_task_read, doca_rdma_task_receive,
    doca_rdma_task_send, doca_rdma_task_send_imm, doca_rdma_task_write, doca_rdma_task_write_imm,
};
use crate::buf::doca_buf;
use crate::task::task_field as field;
use crate::types::*;

type Conn = doca_rdma_connection;
type Buf = doca_buf;

// receive: dst_buf (the result getters are in tasks.rs)
field!(doca_rdma_task_receive, dst,
    doca_rdma_task_receive_set_dst_buf(*mut Buf), doca_rdma_task_receive_get_dst_buf -> *mut Buf = ptr::null_mut());

// send: src_buf, rdma_connection
field!(doca_rdma_task_send, src,
    doca_rdma_task_send_set_src_buf(*const Buf), doca_rdma_task_send_get_src_buf -> *const Buf = ptr::null());
field!(doca_rdma_task_send, conn,
    doca_rdma_task_send_set_rdma_connection(*mut Conn),
    doca_rdma_task_send_get_rdma_connection -> *const Conn = ptr::null());

// send_imm: src_buf, immediate_data, rdma_connection
field!(doca_rdma_task_send_imm, src,
    doca_rdma_task_send_imm_set_src_buf(*const Buf),
    doca_rdma_task_send_imm_get_src_buf -> *const Buf = ptr::null());
field!(doca_rdma_task_send_imm, imm,
    doca_rdma_task_send_imm_set_immediate_data(doca_be32_t),
    doca_rdma_task_send_imm_get_immediate_data -> doca_be32_t = 0);
field!(doca_rdma_task_send_imm, conn,
    doca_rdma_task_send_imm_set_rdma_connection(*mut Conn),
    doca_rdma_task_send_imm_get_rdma_connection -> *const Conn = ptr::null());

// read: src_buf, dst_buf, rdma_connection, result_len
field!(doca_rdma_task_read, src,
    doca_rdma_task_read_set_src_buf(*const Buf), doca_rdma_task_read_get_src_buf -> *const Buf = ptr::null());
field!(doca_rdma_task_read, dst,
    doca_rdma_task_read_set_dst_buf(*mut Buf), doca_rdma_task_read_get_dst_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_read, conn,
    doca_rdma_task_read_set_rdma_connection(*mut Conn),
    doca_rdma_task_read_get_rdma_connection -> *const Conn = ptr::null());

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_read_get_result_len(task: *const doca_rdma_task_read) -> u32 {
    crate::ffi::guard(0, || {
        // SAFETY: non-NULL task pointers come from this provider (DOCA contract).
        unsafe { crate::task::typed(task) }.map_or(0, |t| t.res_len.get())
    })
}

// write: src_buf, dst_buf, rdma_connection
field!(doca_rdma_task_write, src,
    doca_rdma_task_write_set_src_buf(*const Buf), doca_rdma_task_write_get_src_buf -> *const Buf = ptr::null());
field!(doca_rdma_task_write, dst,
    doca_rdma_task_write_set_dst_buf(*mut Buf), doca_rdma_task_write_get_dst_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_write, conn,
    doca_rdma_task_write_set_rdma_connection(*mut Conn),
    doca_rdma_task_write_get_rdma_connection -> *const Conn = ptr::null());

// write_imm: src_buf, dst_buf, immediate_data, rdma_connection
field!(doca_rdma_task_write_imm, src,
    doca_rdma_task_write_imm_set_src_buf(*const Buf),
    doca_rdma_task_write_imm_get_src_buf -> *const Buf = ptr::null());
field!(doca_rdma_task_write_imm, dst,
    doca_rdma_task_write_imm_set_dst_buf(*mut Buf),
    doca_rdma_task_write_imm_get_dst_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_write_imm, imm,
    doca_rdma_task_write_imm_set_immediate_data(doca_be32_t),
    doca_rdma_task_write_imm_get_immediate_data -> doca_be32_t = 0);
field!(doca_rdma_task_write_imm, conn,
    doca_rdma_task_write_imm_set_rdma_connection(*mut Conn),
    doca_rdma_task_write_imm_get_rdma_connection -> *const Conn = ptr::null());

// atomic_cmp_swp: dst_buf, result_buf, cmp_data, swap_data, rdma_connection
field!(doca_rdma_task_atomic_cmp_swp, dst,
    doca_rdma_task_atomic_cmp_swp_set_dst_buf(*mut Buf),
    doca_rdma_task_atomic_cmp_swp_get_dst_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_atomic_cmp_swp, result,
    doca_rdma_task_atomic_cmp_swp_set_result_buf(*mut Buf),
    doca_rdma_task_atomic_cmp_swp_get_result_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_atomic_cmp_swp, cmp,
    doca_rdma_task_atomic_cmp_swp_set_cmp_data(u64), doca_rdma_task_atomic_cmp_swp_get_cmp_data -> u64 = 0);
field!(doca_rdma_task_atomic_cmp_swp, swap,
    doca_rdma_task_atomic_cmp_swp_set_swap_data(u64), doca_rdma_task_atomic_cmp_swp_get_swap_data -> u64 = 0);
field!(doca_rdma_task_atomic_cmp_swp, conn,
    doca_rdma_task_atomic_cmp_swp_set_rdma_connection(*mut Conn),
    doca_rdma_task_atomic_cmp_swp_get_rdma_connection -> *const Conn = ptr::null());

// atomic_fetch_add: dst_buf, result_buf, add_data, rdma_connection
field!(doca_rdma_task_atomic_fetch_add, dst,
    doca_rdma_task_atomic_fetch_add_set_dst_buf(*mut Buf),
    doca_rdma_task_atomic_fetch_add_get_dst_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_atomic_fetch_add, result,
    doca_rdma_task_atomic_fetch_add_set_result_buf(*mut Buf),
    doca_rdma_task_atomic_fetch_add_get_result_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_atomic_fetch_add, add,
    doca_rdma_task_atomic_fetch_add_set_add_data(u64), doca_rdma_task_atomic_fetch_add_get_add_data -> u64 = 0);
field!(doca_rdma_task_atomic_fetch_add, conn,
    doca_rdma_task_atomic_fetch_add_set_rdma_connection(*mut Conn),
    doca_rdma_task_atomic_fetch_add_get_rdma_connection -> *const Conn = ptr::null());
