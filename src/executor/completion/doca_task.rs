//! [`DocaTask`]: what the runtime needs to know of one DOCA task type.

use super::TaskOutput;
use crate::sys;

/// One DOCA task type as the runtime sees it (one implementation per task type: sync event
/// get, RDMA write, ...). The implementing type is a marker (often a unit struct) that names
/// the task object type and how to convert and free it; it is called a *kind* in the
/// runtime's comments (`REUSE_KINDS`, "the kinds of one ctx"). Named `DocaTask` rather than
/// `TaskKind` because doca-soft's `TaskKind` is an unrelated struct (a task type's descriptor
/// inside the provider).
///
/// # Safety
/// `as_task` must return the `doca_task` of the given task object, and `free` must give the
/// task back to DOCA (the default calls `doca_task_free`; UROM command tasks use their own
/// release function). [`completion_cb`](super::completion_cb) relies on both.
///
/// ```
/// use async_doca::ext::DocaTask;
/// use async_doca::sys;
///
/// /// `doca_sync_event_task_get`: the counter value is written to the result area by DOCA.
/// pub struct Get;
/// // SAFETY: the conversion is the task type's own; sync event tasks are freed with
/// // doca_task_free (the default).
/// unsafe impl DocaTask for Get {
///     type Task = sys::doca_sync_event_task_get;
///     unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
///         // SAFETY: forwarded; the caller passes a live task.
///         unsafe { sys::doca_sync_event_task_get_as_doca_task(task) }
///     }
/// }
/// ```
pub unsafe trait DocaTask: 'static {
    /// The task object type (for example `doca_sync_event_task_get`).
    type Task;

    /// `doca_*_as_task` of this type.
    ///
    /// # Safety
    /// `task` is a live task of this kind.
    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task;

    /// Reads kind-specific results out of the task before it is freed (for example the
    /// length, opcode and immediate data of an RDMA receive) into `out`. Called for every
    /// completion, successful or not (`status`). The default does nothing.
    ///
    /// # Safety
    /// `task` is the live, completed task.
    unsafe fn on_complete(task: *mut Self::Task, status: sys::doca_error_t, out: &mut TaskOutput) {
        let _ = (task, status, out);
    }

    /// Where completed tasks of this kind are kept for reuse on their ctx: an index below
    /// [`REUSE_KINDS`](super::REUSE_KINDS), unique among the kinds of one ctx type, or `None`
    /// (the default: a completed task is freed). A kept task is given back to DOCA
    /// ([`free`](DocaTask::free)) when its ctx leaves RUNNING; whoever takes one (see
    /// `DocaCtx::reuse_or_alloc`) must re-initialise every field with the task type's setters
    /// and `doca_task_set_user_data` before submitting it. The index also names the kind's
    /// free list in an owner's pool of held tasks (`completion::held_op`), which only kinds
    /// with one can use.
    const REUSE: Option<usize> = None;

    /// Whether a completion of this kind is a round trip through another processor's work,
    /// such as a UROM worker command (a message to the worker, the plugin's work, the
    /// answer). `false` (the default) for the kinds the device completes by itself within
    /// microseconds, which an idle executor's busy spin
    /// ([`IdleMode::Adaptive`](crate::IdleMode::Adaptive)) catches. A remote answer takes
    /// longer, and where the worker shares the host's CPUs (the soft provider) a busy spin
    /// even delays it: the worker may be waiting for the very CPU the spin holds. While every
    /// operation in flight on an executor is of remote kinds, its adaptive idle spins the
    /// yielding way instead, on a learned budget of its own (`sched_yield` at every round;
    /// see `executor/learned_spin.rs`); one operation of another kind in flight restores the
    /// busy spin. [`IdleMode::Polling`](crate::IdleMode::Polling) still polls: a program that
    /// gives its executor a CPU of its own and wants the lowest latency chooses it.
    const REMOTE: bool = false;

    /// Whether operations of this kind are posted ahead of what completes them: a receive,
    /// posted so that the peer's next message finds a buffer, or a sync-event wait for a
    /// value another party sets. Its completion waits for the peer, and the peer often waits
    /// for what the posting task does next (its request, its answer), or the operation is
    /// polled among other futures (`join!`, `select!` with a timeout, `poll_once` then a
    /// send). A spin in its poll for its completion (the runtime's inline spin, which
    /// assumes the task has nothing else to do) then holds the send the answer waits for
    /// until the spin gives up: a Comch fast-path ping-pong that posts with `poll_once`
    /// measured ~60 µs per message, against 5 µs raw. Without the spin, a task that awaits
    /// a receive at once pays a wake-up: `send_lat` async − raw +60/+65 ns against +28/+35.
    ///
    /// So such a future spins in its poll only where the executor's earlier spins for
    /// posted-ahead operations caught their completions, and backs off where they ran out
    /// (`executor/posted_ahead.rs`: at worst one spin per 4 096 such operations for a task
    /// that always posts ahead). Its poll always collects a completion the PE already has.
    /// `false` by default.
    const POSTED_AHEAD: bool = false;

    /// Gives the task back to DOCA. The default is `doca_task_free`.
    ///
    /// # Safety
    /// `task` is a live task of this kind that DOCA does not own (not submitted, or
    /// completed), and it is not used afterwards.
    unsafe fn free(task: *mut Self::Task) {
        // SAFETY: the caller passes a live task it owns; `as_task` is correct by the trait's
        // contract.
        unsafe { sys::doca_task_free(Self::as_task(task)) }
    }
}
