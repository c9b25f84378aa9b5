//! **Unstable** extension API: what you need to wrap another DOCA library (a task-driven DOCA
//! object this crate does not wrap yet) so that its tasks become futures on the async-doca
//! executors.
//!
//! > **Unstable: may change in any release**, including patch releases. It exposes the
//! > runtime's internal contract with DOCA (raw pointers, task callbacks, the ctx registry)
//! > and changes when that contract does. Pin an exact version if you build on it.
//!
//! This module is the one deliberate door into the runtime's internals; the modules behind it
//! (`executor/context.rs`, `executor/completion/`) are private. The crate's own wrappers
//! ([`rdma`](crate::rdma), [`dma`](crate::dma), [`comch`](crate::comch),
//! [`sync_event`](crate::sync_event), [`urom`](crate::urom)) are built on exactly these items.
//!
//! # What a wrapper needs
//!
//! * [`DocaCtx`]: takes ownership of your DOCA object and its `doca_ctx`, connects the ctx to
//!   the current executor's progress engine, and runs its lifecycle ([`DocaCtx::start`],
//!   [`DocaCtx::stop`], [`CtxState`]; stop, flush and destroy at drop or executor shutdown).
//! * [`DocaTask`]: one implementation (on a marker type) per DOCA task type: the task object
//!   type, its `*_as_doca_task` conversion, optionally how to copy results out of the task
//!   ([`DocaTask::on_complete`] into a [`TaskOutput`]) and how to free it.
//! * [`completion_cb`]: the `extern "C"` callback to install, monomorphised per task type, as
//!   the error callback in the task type's `*_set_conf` (and as its success callback, or
//!   [`success_cb`], which knows the status is `DOCA_SUCCESS` and saves asking for it).
//! * [`DocaCtx::submit`]: allocates a task (your closure calls `*_alloc_init` with the
//!   [`TaskSlot`]'s user data and, if DOCA writes results through a pointer, its
//!   [`out_ptr`](TaskSlot::out_ptr)), submits it and returns a [`TaskFuture`] that resolves
//!   with the [`TaskOutput`] when the callback runs. Back-pressure (pool or queue full) waits
//!   instead of failing; [`TaskFuture::with_buffers`] keeps buffers alive while the task may
//!   touch them, even if the future is dropped ([`BufTaskFuture`]). To give the future a
//!   type users can name (a closure's type has no name), implement [`AllocTask`] on a
//!   request struct and submit it with [`DocaCtx::submit_with`].
//! * [`current_pe`]: the executor's `doca_pe`, for the few DOCA calls that need one.
//!
//! Rules every wrapper follows: create and use the object on one executor (`DocaCtx` is
//! `!Send`); configure task types after [`DocaCtx::new`] and before [`DocaCtx::start`]; never
//! call `doca_pe_progress`, `doca_pe_connect_ctx`, `doca_ctx_stop` or the object's destroy
//! yourself (the `DocaCtx` does); give every `unsafe` block its `// SAFETY:` argument.
//!
//! # Example: wrapping a DOCA task type
//!
//! A minimal wrapper of DOCA sync events with two task types: `notify_add` (DOCA writes the
//! previous value through a pointer) and `get`. The crate's real wrapper is
//! [`sync_event`](crate::sync_event); this is the same pattern, reduced.
//!
//! ```
//! use async_doca::ext::{completion_cb, success_cb, DocaCtx, DocaTask};
//! use async_doca::{sys, Error, Result, Runtime};
//!
//! /// `doca_sync_event_task_get`, as the runtime sees it.
//! struct Get;
//! // SAFETY: the conversion is the task type's own; sync event tasks are freed with
//! // doca_task_free (the default `free`).
//! unsafe impl DocaTask for Get {
//!     type Task = sys::doca_sync_event_task_get;
//!     unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
//!         // SAFETY: forwarded; the caller passes a live task.
//!         unsafe { sys::doca_sync_event_task_get_as_doca_task(task) }
//!     }
//! }
//!
//! /// `doca_sync_event_task_notify_add`.
//! struct Add;
//! // SAFETY: as for `Get`.
//! unsafe impl DocaTask for Add {
//!     type Task = sys::doca_sync_event_task_notify_add;
//!     unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
//!         // SAFETY: forwarded; the caller passes a live task.
//!         unsafe { sys::doca_sync_event_task_notify_add_as_doca_task(task) }
//!     }
//! }
//!
//! fn check(rc: sys::doca_error_t, what: &'static str) -> Result<()> {
//!     if rc == sys::DOCA_SUCCESS { Ok(()) } else { Err(Error::from_doca(rc, what)) }
//! }
//!
//! /// The wrapper: a counter whose tasks are futures.
//! struct Counter {
//!     ctx: DocaCtx<sys::doca_sync_event>,
//! }
//!
//! impl Counter {
//!     async fn new() -> Result<Counter> {
//!         let mut ev = std::ptr::null_mut();
//!         // SAFETY: valid out-pointer; the new event is owned by the DocaCtx below.
//!         check(unsafe { sys::doca_sync_event_create(&mut ev) }, "create")?;
//!         // SAFETY: `ev` is live, created on this thread and destroyed only by the DocaCtx;
//!         // its ctx is IDLE and not connected to any PE.
//!         let ctx = unsafe {
//!             DocaCtx::new("counter", ev, sys::doca_sync_event_as_ctx(ev), |e| sys::doca_sync_event_destroy(e))
//!         }?;
//!         let e = ctx.as_ptr()?;
//!         // SAFETY: live, IDLE event; each callback is monomorphised for its task type.
//!         unsafe {
//!             // The success callback knows the status; the error callback asks DOCA for it.
//!             // Both hand it to the future.
//!             let (get_ok, get_err) = (success_cb::<Get>, completion_cb::<Get>);
//!             let (add_ok, add_err) = (success_cb::<Add>, completion_cb::<Add>);
//!             check(sys::doca_sync_event_task_get_set_conf(e, Some(get_ok), Some(get_err), 4), "conf get")?;
//!             check(sys::doca_sync_event_task_notify_add_set_conf(e, Some(add_ok), Some(add_err), 4), "conf add")?;
//!         }
//!         ctx.start().await?;
//!         Ok(Counter { ctx })
//!     }
//!
//!     /// Adds `v`; resolves to the value before the addition.
//!     async fn add(&self, v: u64) -> Result<u64> {
//!         let e = self.ctx.as_ptr()?;
//!         let out = self
//!             .ctx
//!             .submit::<Add, _>("counter.add", |slot| {
//!                 let mut t = std::ptr::null_mut();
//!                 let (out, data) = (slot.out_ptr(0), slot.user_data());
//!                 // SAFETY: live event; the slot's result word stays valid until completion.
//!                 match unsafe { sys::doca_sync_event_task_notify_add_alloc_init(e, v, out, data, &mut t) } {
//!                     sys::DOCA_SUCCESS => Ok(t),
//!                     rc => Err(rc),
//!                 }
//!             })
//!             .await?;
//!         Ok(out[0])
//!     }
//!
//!     /// The current value.
//!     async fn get(&self) -> Result<u64> {
//!         let e = self.ctx.as_ptr()?;
//!         let out = self
//!             .ctx
//!             .submit::<Get, _>("counter.get", |slot| {
//!                 let mut t = std::ptr::null_mut();
//!                 let (out, data) = (slot.out_ptr(0), slot.user_data());
//!                 // SAFETY: live event; the slot's result word stays valid until completion.
//!                 match unsafe { sys::doca_sync_event_task_get_alloc_init(e, out, data, &mut t) } {
//!                     sys::DOCA_SUCCESS => Ok(t),
//!                     rc => Err(rc),
//!                 }
//!             })
//!             .await?;
//!         Ok(out[0])
//!     }
//! }
//!
//! let rt = Runtime::builder().cpus("0".parse()?).build()?;
//! let (before, now) = rt.block_on(async {
//!     let c = Counter::new().await?;
//!     let before = c.add(5).await?;
//!     Ok::<_, Error>((before, c.get().await?))
//! })?;
//! assert_eq!((before, now), (0, 5));
//! # Ok::<(), Error>(())
//! ```

pub use crate::executor::completion::{
    completion_cb, success_cb, AllocTask, BufTaskFuture, DocaTask, TaskFuture, TaskOutput, TaskSlot, OUT_WORDS,
    REUSE_KINDS,
};
pub use crate::executor::context::{CtxState, DocaCtx, TaskFreed};
pub use crate::executor::current_pe;
