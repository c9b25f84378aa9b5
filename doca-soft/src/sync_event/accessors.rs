//! Per-task getters and setters of the sync event tasks (`doca_sync_event_task_Y_set_F` /
//! `_get_F`), for re-using a task: in its completion callback a task is the caller's again with
//! its parameters; change them and submit it again. Same rules as the RDMA accessors
//! (`rdma/accessors.rs`): setters only while the caller owns the task (ignored with a
//! diagnostic otherwise); a NULL result pointer is stored and refused by the next submit
//! (`DOCA_ERROR_INVALID_VALUE`); getters answer NULL / 0 for an invalid task.

use core::ptr;

use super::tasks::{
    doca_sync_event_task_get, doca_sync_event_task_notify_add, doca_sync_event_task_notify_set,
    doca_sync_event_task_wait_eq, doca_sync_event_task_wait_neq,
};
use crate::task::task_field as field;

field!(doca_sync_event_task_get, ret_val_ptr,
    doca_sync_event_task_get_set_ret_val_ptr(*mut u64),
    doca_sync_event_task_get_get_ret_val_ptr -> *mut u64 = ptr::null_mut());
field!(doca_sync_event_task_notify_set, set_val,
    doca_sync_event_task_notify_set_set_set_val(u64), doca_sync_event_task_notify_set_get_set_val -> u64 = 0);
field!(doca_sync_event_task_notify_add, inc_val,
    doca_sync_event_task_notify_add_set_inc_val(u64), doca_sync_event_task_notify_add_get_inc_val -> u64 = 0);
field!(doca_sync_event_task_notify_add, fetched_val_ptr,
    doca_sync_event_task_notify_add_set_fetched_val_ptr(*mut u64),
    doca_sync_event_task_notify_add_get_fetched_val_ptr -> *mut u64 = ptr::null_mut());
field!(doca_sync_event_task_wait_eq, wait_val,
    doca_sync_event_task_wait_eq_set_wait_val(u64), doca_sync_event_task_wait_eq_get_wait_val -> u64 = 0);
field!(doca_sync_event_task_wait_eq, mask,
    doca_sync_event_task_wait_eq_set_mask(u64), doca_sync_event_task_wait_eq_get_mask -> u64 = 0);
field!(doca_sync_event_task_wait_neq, wait_val,
    doca_sync_event_task_wait_neq_set_wait_val(u64), doca_sync_event_task_wait_neq_get_wait_val -> u64 = 0);
field!(doca_sync_event_task_wait_neq, mask,
    doca_sync_event_task_wait_neq_set_mask(u64), doca_sync_event_task_wait_neq_get_mask -> u64 = 0);
