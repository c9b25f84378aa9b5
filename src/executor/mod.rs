//! The thread-per-core executor: runtime, tasks, the DOCA progress engine, completion slots,
//! contexts, timers and CPU pinning.
//!
//! One module per concept:
//! * [`runtime`]: [`Runtime`] (pinned worker threads), [`Builder`], [`Handle`], [`IdleMode`].
//! * `local`: one executor — its thread-local state (one state model), its loop (tasks, PE,
//!   timers; the idle protocol written once for its own poll and for a foreign reactor) and
//!   its shutdown.
//! * `park`: the sleep/notify handshake with other threads (loom-checked).
//! * `learned_spin`: how long an adaptive executor spins before it sleeps, learned from its
//!   own waits.
//! * `pe`: the executor's `doca_pe` and DOCA's arm/progress/clear protocol.
//! * `task`: spawning, [`JoinHandle`], and the task allocation (`task::raw`: its run state is
//!   touched only by its executor's thread, so a wake and a run there need no atomic).
//! * `completion`: completion slots, [`DocaTask`](crate::ext::DocaTask),
//!   [`completion_cb`](crate::ext::completion_cb), [`TaskFuture`](crate::ext::TaskFuture),
//!   back-pressure — the bridge between DOCA callbacks and futures.
//! * `context`: [`DocaCtx`](crate::ext::DocaCtx), ownership of a `doca_ctx` on the current executor.
//! * [`time`]: `sleep`, `timeout`.
//! * `coarse_clock`: the start of long timers from the kernel's coarse clock (~5 ns against
//!   ~22 ns for `Instant::now()`), never early and at most two ticks late.
//! * `local_sync`: a wake-up flag and a result cell for driver tasks on one executor (the
//!   collectives' drivers use them).
//! * `follow_drom`: the executor's side of following a DROM mask (re-pin, displace, start
//!   executors); DROM's side, the follower thread, is `crate::drom`'s.
//! * [`CpuSet`] and [`MAX_CPUS`] are re-exported from `crate::cpuset` (their home since the
//!   DROM registry needs them too, and DROM must not depend on the executor).
//!
//! `completion` and `context` are private: what a wrapper of a DOCA library needs from them is
//! re-exported, as an unstable API, by [`crate::ext`].
//!
//! Threads: every executor (a runtime worker, or the temporary executor of a `block_on`)
//! owns its PE and everything connected to it, on its own thread. DOCA objects are created
//! on an executor and stay there (`!Send`). Other threads talk to an executor only through
//! its injection queue ([`Handle::spawn`], [`Handle::spawn_on`], wakers of its tasks).

mod coarse_clock;
mod follow_drom;
mod learned_spin;
pub(crate) mod local;
pub(crate) mod local_sync;
mod park;
mod pe;
mod posted_ahead;
mod slab;
mod task;

// Private: wrappers of DOCA libraries reach what they need through `crate::ext`.
pub(crate) mod completion;
pub(crate) mod context;
pub mod runtime;
pub mod time;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Re-exported from the crate root's `cpuset` module (the old path `executor::CpuSet` keeps working).
pub use crate::cpuset::{CpuSet, MAX_CPUS};
pub use runtime::{Builder, Handle, IdleMode, Runtime, WorkerInfo};
pub use task::JoinHandle;

/// Spawns a `!Send` future on the current executor (the worker, or the `block_on`
/// executor, running this code).
///
/// # Panics
/// Outside an async-doca executor.
///
/// ```
/// let rt = async_doca::Runtime::new()?;
/// rt.block_on(async {
///     let shared = std::rc::Rc::new(std::cell::Cell::new(0));
///     let s = shared.clone();
///     async_doca::spawn_local(async move { s.set(1) }).await.unwrap();
///     assert_eq!(shared.get(), 1);
/// });
/// # Ok::<(), async_doca::Error>(())
/// ```
pub fn spawn_local<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    // The executor first, then the future moved once, into its task: moved into a lookup
    // closure instead, it was copied twice more on the way (a memcpy of the whole future each).
    let Some(core) = local::current_rc() else {
        panic!("async_doca::spawn_local called outside an async-doca executor")
    };
    task::spawn_local_in(&core, fut)
}

/// Spawns a `Send` future on one of the current runtime's workers.
///
/// # Panics
/// Outside an async-doca executor.
///
/// ```
/// let rt = async_doca::Runtime::new()?;
/// let v = rt.block_on(async { async_doca::spawn(async { 40 + 2 }).await })?;
/// assert_eq!(v, 42);
/// # Ok::<(), async_doca::Error>(())
/// ```
pub fn spawn<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match local::with_current(|core| core.runtime.clone()).flatten() {
        Some(handle) => handle.spawn(fut),
        None => panic!("async_doca::spawn called outside an async-doca executor"),
    }
}

/// The CPU the current executor is pinned to: `Some(cpu)` on a runtime worker, `None` on a
/// `block_on` executor or outside any executor.
pub fn current_cpu() -> Option<usize> {
    local::with_current(|core| core.shared.cpu).flatten()
}

/// A handle to the runtime of the current executor, if any.
pub fn current_handle() -> Option<Handle> {
    local::with_current(|core| core.runtime.clone()).flatten()
}

/// The progress engine of the current executor, for DOCA calls that need one (such as
/// `doca_pe_get_num_inflight_tasks`). Contexts are connected to it by [`DocaCtx::new`](crate::ext::DocaCtx::new);
/// never call `doca_pe_progress`, `doca_pe_connect_ctx` or `doca_pe_destroy` on it yourself.
/// `None` outside an executor or during its shutdown.
pub fn current_pe() -> Option<*mut crate::sys::doca_pe> {
    local::with_current(|core| if core.is_closing() { None } else { core.pe_raw() }).flatten()
}

/// Yields once to the other tasks of the executor (and to its PE).
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// The future of [`yield_now`].
#[derive(Debug)]
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
