//! `doca_urom_service_get_workers_by_gid_task`: ask the daemon which workers have a group id.
//!
//! The pool has [`super::GID_TASKS`] tasks per service (configured at service start; one more:
//! `NO_MEMORY`). The callback is given at allocation and used for success and failure alike
//! (`doca_task_get_status` tells them apart). The result (count and ids) belongs to the task
//! and stays valid until the task is released or submitted again.
//!
//! Layering: this module is the task type and its per-task entry points (decode and
//! validate). The service (`service.rs`), the layer above, owns what moves a request: the task
//! kind's hooks and the `..._allocate` entry points (which take a service), so this module
//! never names the service.

use core::cell::{Cell, RefCell};
use core::ptr;

use crate::ffi::{guard, guard_err};
use crate::task::{self, doca_task, TaskState};
use crate::types::*;

/// `struct doca_urom_service_get_workers_by_gid_task`.
#[repr(C)]
pub struct doca_urom_service_get_workers_by_gid_task {
    base: doca_task,
    gid: Cell<u32>,
    ids: RefCell<Vec<u64>>,
}

impl doca_urom_service_get_workers_by_gid_task {
    /// A task as it sits free in the pool (the pool's `with_header`).
    pub(super) fn idle(base: doca_task) -> Self {
        Self { base, gid: Cell::new(0), ids: RefCell::new(Vec::new()) }
    }

    /// The group id the task asks about.
    pub(super) fn gid(&self) -> u32 {
        self.gid.get()
    }

    /// Prepares a freshly allocated task: it asks about `gid` and has no result.
    pub(super) fn reset(&self, gid: u32) {
        self.gid.set(gid);
        self.ids.borrow_mut().clear();
    }

    /// Forgets the previous result (a new submit), keeping the allocation.
    pub(super) fn clear_result(&self) {
        self.ids.borrow_mut().clear();
    }

    /// Frees the result's memory (the task is released or flushed).
    pub(super) fn free_result(&self) {
        *self.ids.borrow_mut() = Vec::new();
    }

    pub(crate) fn set_result(&self, ids: Vec<u64>) {
        *self.ids.borrow_mut() = ids;
    }
}

/// Validates a gid task pointer from C (a live, allocated-or-in-flight task of this kind).
///
/// # Safety
/// A non-NULL `p` must point to a task handed out by this provider.
unsafe fn gid_ref<'a>(
    p: *const doca_urom_service_get_workers_by_gid_task,
) -> Result<&'a doca_urom_service_get_workers_by_gid_task, doca_error_t> {
    // SAFETY: per the contract (the header is the first field).
    let h = unsafe { crate::task::task_ref(p.cast::<doca_task>()) }?;
    if !h.is::<doca_urom_service_get_workers_by_gid_task>() || h.state() == TaskState::Free {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: kind checked just above.
    Ok(unsafe { h.downcast::<doca_urom_service_get_workers_by_gid_task>() })
}

/// Sets the group id an allocated (not submitted) task asks about; ignored otherwise.
#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_set_gid(
    task: *mut doca_urom_service_get_workers_by_gid_task,
    gid: u32,
) {
    guard((), || {
        // SAFETY: as in gid_ref.
        if let Ok(g) = unsafe { gid_ref(task) } {
            if task::header(g).state() == TaskState::Allocated {
                g.gid.set(gid);
            }
        }
    })
}

/// Sets the completion callback (success and failure alike) of an allocated task.
#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_set_cb(
    task: *mut doca_urom_service_get_workers_by_gid_task,
    cb: doca_urom_service_get_workers_by_gid_task_completion_cb_t,
) {
    guard((), || {
        // SAFETY: as in gid_ref.
        if let Ok(g) = unsafe { gid_ref(task) } {
            if task::header(g).state() == TaskState::Allocated {
                task::set_callbacks(g, cb, cb);
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_release(
    task: *mut doca_urom_service_get_workers_by_gid_task,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in gid_ref.
        let g = unsafe { gid_ref(task) }?;
        if task::header(g).state() != TaskState::Allocated {
            // Submitted or completed and not yet delivered: owned by the library.
            return Err(DOCA_ERROR_IN_PROGRESS);
        }
        // SAFETY: an allocated task of ours; the release hook clears its result.
        unsafe { crate::task::doca_task_free(task.cast()) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_as_task(
    task: *mut doca_urom_service_get_workers_by_gid_task,
) -> *mut doca_task {
    guard(ptr::null_mut(), || {
        // SAFETY: as in gid_ref.
        match unsafe { gid_ref(task) } {
            Ok(_) => task.cast(),
            Err(_) => ptr::null_mut(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_get_workers_count(
    task: *mut doca_urom_service_get_workers_by_gid_task,
) -> usize {
    guard(0, || {
        // SAFETY: as in gid_ref.
        match unsafe { gid_ref(task) } {
            Ok(g) => g.ids.borrow().len(),
            Err(_) => 0,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_get_worker_ids(
    task: *mut doca_urom_service_get_workers_by_gid_task,
) -> *const u64 {
    guard(ptr::null(), || {
        // SAFETY: as in gid_ref.
        match unsafe { gid_ref(task) } {
            Ok(g) => {
                let ids = g.ids.borrow();
                // The vector is replaced only by the next submit or the release.
                if ids.is_empty() {
                    ptr::null()
                } else {
                    ids.as_ptr()
                }
            }
            Err(_) => ptr::null(),
        }
    })
}
