//! The tokio bridge (feature `tokio`): use async-doca from an existing tokio application.
//!
//! Two styles, for two situations (the design note is `docs/tokio.md`):
//!
//! * **In-tokio driver** ([`run_local`], [`Driver`]): the calling tokio thread becomes an
//!   async-doca executor. Its DOCA progress engine is driven inside tokio: the PE
//!   notification fd is registered with tokio's reactor ([`AsyncFd`](::tokio::io::unix::AsyncFd)),
//!   and the driver follows the same protocol as the native executor (run a turn; when idle,
//!   spin for the idle budget, then arm, drain once more, sleep until the fd is readable,
//!   clear). DOCA objects created on that thread ([`Device`](crate::Device) memory,
//!   [`Rdma`](crate::rdma::Rdma), [`Connection`](crate::rdma::Connection),
//!   [`SyncEvent`](crate::sync_event::SyncEvent), UROM objects) are awaited directly from
//!   tokio tasks on that thread: the future passed to `run_local` and the tasks it spawns
//!   with `tokio::task::spawn_local`. No extra thread. Use it on a current-thread runtime,
//!   or in a `LocalSet` of a multi-thread runtime.
//! * **Handle** ([`Bridge`], [`Pinned`]): a `Send + Sync + Clone` handle to an async-doca
//!   [`Runtime`](crate::Runtime), used from any tokio worker thread. Work runs on the
//!   runtime's pinned executors, where the DOCA objects live; results come back through the
//!   task's completion (a channel). At most `max_in_flight` jobs run at once (back-pressure:
//!   the next caller waits for a permit); errors and panics come back as [`Error`](crate::Error)s; dropping
//!   the awaiting tokio future cancels the job on its executor.
//!
//! Who owns what: with the driver, the [`Driver`] state (PE, completion slots, contexts) lives
//! in the `run_local` future on the tokio thread that polls it, and the thread-local
//! "current executor" that DOCA objects look for is set on that thread from the first poll to
//! the end of the future. When the future ends (or is dropped), the driver shuts down like a
//! `block_on` executor: its async-doca tasks are cancelled, contexts stopped and flushed, the
//! PE destroyed; DOCA objects still held by other tasks then fail with errors (never touch
//! freed memory). With the handle, DOCA objects never leave their executor: a job is a `Send`
//! closure that builds a (possibly `!Send`) future on the executor, and [`Pinned`] keeps a
//! `!Send` state (a connection, registered memory) on one executor for many jobs.
//!
//! Timers: [`crate::time::sleep`] and [`crate::time::timeout`] work inside the driver (its
//! timer queue is fired by the driver, which sleeps in tokio until the next deadline). Tokio's
//! own timers work anywhere in tokio as usual. The tokio runtime must have IO and time enabled
//! (`enable_all()`).
//!
//! ```
//! use async_doca::sync_event::SyncEvent;
//! use async_doca::Device;
//!
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let local = tokio::task::LocalSet::new();
//! let seen = local.block_on(&rt, async_doca::tokio::run_local(async {
//!     let dev = Device::open_default()?;
//!     let ev = SyncEvent::builder(&dev).build().await?;
//!     let peer = SyncEvent::open(&dev, &ev.export()?).await?;
//!     // A tokio task on this thread waits; the main future adds.
//!     let waiter = tokio::task::spawn_local(async move { peer.wait_gt(0).await });
//!     ev.add(1).await?;
//!     waiter.await.expect("the waiter ran")
//! }))??;
//! assert_eq!(seen, 1);
//! # Ok::<(), async_doca::Error>(())
//! ```

mod driver;
mod handle;

pub use driver::{run_local, Driver, RunLocal};
pub use handle::{Bridge, BridgeBuilder, Pinned, DEFAULT_BRIDGE_SPIN, DEFAULT_IN_FLIGHT_PER_EXECUTOR};

#[cfg(all(test, not(loom)))]
mod tests;
