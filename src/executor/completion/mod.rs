//! Completion slots: the bridge between DOCA task callbacks and futures.
//!
//! Every DOCA task the runtime submits carries, as its `doca_data` user data, the key of a
//! **slot** in its executor's slot table (`Slots`), or, for a task an owner keeps (lanes, a
//! connection's operation futures), the address of its own record (`held`). The extern "C" callback
//! [`completion_cb`] (installed as the error callback of a task type, and [`success_cb`], the
//! same without asking for the status, as its success callback)
//! runs inside `doca_pe_progress` on the executor's thread; it reads the status, lets the
//! task kind copy kind-specific results out of the task ([`DocaTask::on_complete`]), frees
//! the task, stores the status in the slot and wakes the future ([`TaskFuture`]).
//!
//! Ownership and lifetimes:
//! * The slot table belongs to one executor and is used only on its thread. Slots live in
//!   fixed-size chunks that are never moved or freed while the executor lives, so a slot's
//!   result area has a **stable address**: DOCA may write into it through raw pointers while
//!   the task is in flight (a sync event `get` writes `*ret_val_ptr`, `notify_add` the
//!   fetched value) — see [`TaskSlot::out_ptr`]. Slots are recycled through a free list, so
//!   steady-state operation allocates nothing.
//! * A key packs the slot index and a generation, so a late or duplicate callback for a
//!   recycled slot is detected instead of completing someone else's operation.
//! * DOCA has no per-task cancellation. Dropping a [`TaskFuture`] whose task is in flight
//!   marks its slot **orphaned**: the slot (its result area and any buffers handed over with
//!   [`TaskFuture::with_buffers`]) stays alive until the completion (or the flush of a
//!   stopping context) arrives; the callback then releases it. The only ways to end an
//!   in-flight task early are to drop its future (the result is discarded) or to stop its
//!   context (the task is flushed with an error).
//! * Task reuse: a kind with [`DocaTask::REUSE`] keeps its successfully completed tasks on
//!   their ctx instead of freeing them (the completion callback is the moment DOCA hands a
//!   task back, so a kept task is never one the provider may still touch). The next
//!   operation of that kind re-initialises one with the setters and submits it: no
//!   allocation from the pool. Kept tasks count as freed for back-pressure (they are not
//!   outstanding) and are freed when the ctx leaves RUNNING (before `doca_ctx_stop`, which
//!   cannot reach IDLE while tasks are allocated) or is destroyed.
//! * Back-pressure: when a task pool is exhausted (`*_alloc_init` returns NO_MEMORY) or the
//!   submit queue is full (`doca_task_submit` returns AGAIN or NO_MEMORY), the future waits
//!   (no spinning, no spurious error) until a task of the same context is freed — every
//!   completion wakes that context's waiters — and retries. If nothing of that context is
//!   outstanding, waiting could never end, so the error is returned instead.
//!
//! One module per concept:
//! * `doca_task`: [`DocaTask`], what the runtime needs to know of a DOCA task type.
//! * `slots`: the slot table, its states and its ownership rules.
//! * `callback`: [`completion_cb`] and [`success_cb`], the C callbacks of every task type.
//! * `future`: [`TaskFuture`] and [`BufTaskFuture`], an operation as a future,
//!   [`AllocTask`], how it allocates its task (a closure, or a named request type), and
//!   [`TaskSlot`], what an allocation sees of its slot.
//! * `submission`: `Submission`, the steps of one operation through a slot (reserve,
//!   allocate, submit, collect or abandon) that a [`TaskFuture`] runs.
//! * `waiters`: the lists of futures waiting for a context event (back-pressure).
//! * `held`: tasks one owner keeps and resubmits as they are, each with its own completion
//!   record instead of a slot ([`rdma::Lanes`](crate::rdma::Lanes)).
//! * `held_op`: `HeldOp`, one operation as a future on a held task of its owner, and
//!   `HeldPool`, the owner's idle ones: an RDMA connection's operation futures, which take
//!   no slot.
//!
//! The descriptors a slot or a held record holds for its task are `mem::descriptors`'
//! `TaskDescs`: the memory layer owns what a descriptor is and when it goes back.

mod callback;
mod doca_task;
mod future;
mod held;
mod held_op;
mod slots;
mod submission;
mod waiters;

pub use callback::{completion_cb, success_cb};
pub use doca_task::DocaTask;
pub use future::{AllocTask, BufTaskFuture, TaskFuture, TaskSlot};
pub(crate) use held::{HeldGroup, HeldState};
pub(crate) use held_op::{poll_submit_record, HeldPool, Stage};
pub(crate) use held_op::{HeldOp, HeldRequest};
pub(crate) use slots::Slots;
#[cfg(all(test, not(loom)))]
pub(crate) use waiters::keep_waker_in;
pub(crate) use waiters::{KeptWaker, Ticket, WaiterList};

/// How many task kinds of one ctx can keep completed tasks for reuse ([`DocaTask::REUSE`]).
pub const REUSE_KINDS: usize = 11;

/// Number of 64-bit words in a slot's result area.
pub const OUT_WORDS: usize = 4;

/// The results of a completed task: the words of the slot's result area (what DOCA wrote
/// through [`TaskSlot::out_ptr`], and what [`DocaTask::on_complete`] copied out of the task).
pub type TaskOutput = [u64; OUT_WORDS];
