//! `doca_urom_service_get_workers_by_gid_task`: ask the daemon which workers have a group id.
//!
//! The pool has [`super::GID_TASKS`] tasks per service (configured at service start; one more:
//! `NO_MEMORY`). The callback is given at allocation and used for success and failure alike
//! (`doca_task_get_status` tells them apart). The result (count and ids) belongs to the task
//! and stays valid until the task is released or submitted again.

use core::cell::{Cell, RefCell};
use core::ptr;

use super::service::{service_of, service_ref};
use crate::ffi::{guard, guard_err, out};
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskState, TaskType};
use crate::types::*;

/// `struct doca_urom_service_get_workers_by_gid_task`.
#[repr(C)]
pub struct doca_urom_service_get_workers_by_gid_task {
    base: doca_task,
    gid: Cell<u32>,
    ids: RefCell<Vec<u64>>,
}

static GID_KIND: TaskKind = TaskKind::new::<doca_urom_service_get_workers_by_gid_task>(
    "urom.get_workers_by_gid",
    submit_hook,
    Some(release_hook),
    Some(release_hook),
);

// SAFETY: #[repr(C)] with the doca_task header first; KIND is built with TaskKind::new::<Self>.
unsafe impl TaskType for doca_urom_service_get_workers_by_gid_task {
    const KIND: &'static TaskKind = &GID_KIND;
    fn with_header(base: doca_task) -> Self {
        Self { base, gid: Cell::new(0), ids: RefCell::new(Vec::new()) }
    }
}

impl doca_urom_service_get_workers_by_gid_task {
    pub(crate) fn set_result(&self, ids: Vec<u64>) {
        *self.ids.borrow_mut() = ids;
    }
}

unsafe fn submit_hook(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: this hook is only called for gid tasks, whose ctx is a service ctx.
    let (g, s) = unsafe { (t.downcast::<doca_urom_service_get_workers_by_gid_task>(), service_of(t.ctx())) };
    g.ids.borrow_mut().clear();
    s.submit_gid(t, g.gid.get())
}

unsafe fn release_hook(t: &doca_task) {
    // SAFETY: only called for gid tasks.
    let g = unsafe { t.downcast::<doca_urom_service_get_workers_by_gid_task>() };
    *g.ids.borrow_mut() = Vec::new();
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

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_allocate_init(
    service: *mut doca_urom_service,
    gid: u32,
    cb: doca_urom_service_get_workers_by_gid_task_completion_cb_t,
    task: *mut *mut doca_urom_service_get_workers_by_gid_task,
) -> doca_error_t {
    // SAFETY: forwarded; the caller's contract is the same.
    unsafe { allocate(service, gid, cb, task, true) }
}

/// The split form of `allocate_init`: a task with gid 0 and no callback; set them with
/// `doca_urom_service_get_workers_by_gid_task_set_gid` / `_set_cb` before submitting (a submit
/// without a callback is `DOCA_ERROR_INVALID_VALUE`: its result could never be delivered).
#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_allocate(
    service: *mut doca_urom_service,
    task: *mut *mut doca_urom_service_get_workers_by_gid_task,
) -> doca_error_t {
    // SAFETY: forwarded; the caller's contract is the same.
    unsafe { allocate(service, 0, None, task, false) }
}

/// Both allocation forms: `allocate_init` requires the callback, `allocate` leaves it unset.
///
/// # Safety
/// As `doca_urom_service_get_workers_by_gid_task_allocate_init`.
unsafe fn allocate(
    service: *mut doca_urom_service,
    gid: u32,
    cb: doca_urom_service_get_workers_by_gid_task_completion_cb_t,
    task: *mut *mut doca_urom_service_get_workers_by_gid_task,
    cb_required: bool,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL service pointers come from doca_urom_service_create (contract).
        let s = unsafe { service_ref(service) }?;
        if task.is_null() || (cb_required && cb.is_none()) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let t = task::alloc::<doca_urom_service_get_workers_by_gid_task>(s.ctx(), doca_data::from_u64(0))?;
        // SAFETY: a freshly allocated slot of this pool, owned by us until written out.
        let g = unsafe { t.as_ref() };
        g.gid.set(gid);
        g.ids.borrow_mut().clear();
        task::set_callbacks(g, cb, cb);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(task, t.as_ptr()) }
    })
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
