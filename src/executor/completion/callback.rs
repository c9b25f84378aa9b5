//! [`completion_cb`] and [`success_cb`]: the C callbacks of every task type, which move a
//! completion into its slot (or held record) and wake the operation's future.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::held::{on_held_completion, HELD_TAG};
use super::slots::SlotState;
use super::DocaTask;
use crate::executor::local::{report, with_current};
use crate::sys;

/// The completion callback of every task of kind `K`: pass `Some(completion_cb::<K>)` as
/// the error callback of the task type's `*_set_conf` (and as its success callback, or
/// [`success_cb`] there, which skips asking for the status), or as the one callback of a task
/// type that has one (the function pointer type matches `*_completion_cb_t` exactly, no cast
/// needed).
///
/// It runs inside `doca_pe_progress` on the executor's thread: it reads the status, calls
/// [`DocaTask::on_complete`], frees the task ([`DocaTask::free`]) or keeps it for reuse
/// ([`DocaTask::REUSE`]), stores the status in the
/// slot named by `task_user_data` and wakes the future, or releases the slot if the future
/// was dropped. It wakes futures waiting for a free task of the same context (named by
/// `ctx_user_data`). It never unwinds into C.
///
/// # Safety
/// Only DOCA calls it, for a task submitted through [`TaskFuture`](super::TaskFuture) (so `task_user_data` is a
/// slot key and `ctx_user_data` the key set by [`DocaCtx`](crate::executor::context::DocaCtx)),
/// or a held task (`task_user_data` is its record's tagged address, see the `held` module).
pub unsafe extern "C" fn completion_cb<K: DocaTask>(
    task: *mut K::Task,
    task_user_data: sys::doca_data,
    ctx_user_data: sys::doca_data,
) {
    // SAFETY: DOCA passes the live, completed task of this kind.
    let status = unsafe { sys::doca_task_get_status(K::as_task(task)) };
    // SAFETY: the caller's contract, and `status` is the task's.
    unsafe { deliver::<K>(task, task_user_data, ctx_user_data, status) }
}

/// [`completion_cb`] for a task type's success callback: DOCA calls the success callback
/// only for a task that completed with `DOCA_SUCCESS` (its error callback for the others),
/// so the status is not asked for (a call into the provider per operation saved). Install
/// it as the success callback and [`completion_cb`] as the error callback.
///
/// # Safety
/// As for [`completion_cb`], and only as a success callback.
pub unsafe extern "C" fn success_cb<K: DocaTask>(
    task: *mut K::Task,
    task_user_data: sys::doca_data,
    ctx_user_data: sys::doca_data,
) {
    // SAFETY: the caller's contract; a success callback's task succeeded.
    unsafe { deliver::<K>(task, task_user_data, ctx_user_data, sys::DOCA_SUCCESS) }
}

/// Both callbacks' work once the status is known. Never unwinds.
///
/// # Safety
/// As for [`completion_cb`]; `status` is the task's.
#[inline]
unsafe fn deliver<K: DocaTask>(
    task: *mut K::Task,
    task_user_data: sys::doca_data,
    ctx_user_data: sys::doca_data,
    status: sys::doca_error_t,
) {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let key = task_user_data.as_u64();
        if key & HELD_TAG != 0 {
            // SAFETY: DOCA passes the live, completed task of this kind; its user data is a
            // held record's (only `HeldGroup::user_data` sets the tag), and a group with a
            // task in flight is alive.
            unsafe { on_held_completion::<K>(task, key, status) }
        } else {
            // SAFETY: DOCA passes the live, completed task of this kind, owned by us again.
            unsafe { on_completion::<K>(task, key, ctx_user_data.as_u64(), status) }
        }
    }));
    if r.is_err() {
        report("a panic in a DOCA completion callback was contained");
    }
}

/// # Safety
/// `task` is a live completed task of kind `K` that we own, `status` its status.
unsafe fn on_completion<K: DocaTask>(task: *mut K::Task, key: u64, ctx_key: u64, status: sys::doca_error_t) {
    let handled = with_current(|core| {
        core.task_delivered();
        match core.slots.get(key) {
            Some(slot) if matches!(slot.state.get(), SlotState::InFlight | SlotState::Orphaned) => {
                // SAFETY: the task completed, so DOCA no longer writes the result area; this
                // thread is the only other user and holds no other reference to it now.
                unsafe { K::on_complete(task, status, &mut *slot.out.get()) };
                // The task is kept for reuse or freed; either way the provider is done with
                // it and with its descriptors, which go back before the waiters for a free
                // task (or descriptor) of the context are woken.
                // SAFETY: we own the completed task of this kind and ctx; not used after this.
                unsafe {
                    core.ctxs.task_over::<K>(ctx_key, task, status, || {
                        slot.release_descs();
                    })
                };
                if slot.state.get() == SlotState::Orphaned {
                    // Still the live slot of `key`: only this callback releases an orphan.
                    core.slots.release_slot(key, slot);
                } else {
                    slot.status.set(status);
                    slot.state.set(SlotState::Done);
                    if let Some(w) = slot.waker.take() {
                        core.wake_kept(w);
                    }
                }
            }
            _ => {
                report(&format!("completion for an unknown or stale slot {key:#x}; task freed"));
                // SAFETY: as above.
                unsafe { K::free(task) };
                core.ctxs.task_freed(ctx_key);
            }
        }
    });
    if handled.is_none() {
        // Progress was called outside the runtime (by hand, on a runtime PE): there is no
        // slot table to complete. Free the task so that the context can still stop.
        report("completion callback outside an async-doca executor; task freed, result lost");
        // SAFETY: as above.
        unsafe { K::free(task) };
    }
}
