//! The executor's side of following a DROM mask (see [`Builder::drom`](super::Builder::drom)).
//!
//! DROM itself (registration, the follower thread, the registry protocol) lives in
//! `crate::drom` (`drom/follow.rs`); this file is the hook the follower calls when the mask
//! changes: it re-pins, displaces or starts executors and moves the process's other threads.
//! It also keeps the list of executor threads that no follower may move.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::local;
use super::runtime::RtInner;
use crate::cpuset::CpuSet;
use crate::drom::follow::Follower;
use crate::drom::Membership;
use crate::error::Result;

/// Starts following `membership` (the workers are running).
pub(super) fn start(inner: &Arc<RtInner>, membership: Membership, interval: Option<Duration>) -> Result<()> {
    move_other_threads(inner, &membership.current());
    if inner.drom.set(Follower::new(membership)).is_err() {
        unreachable!("a runtime starts its follower once");
    }
    let weak = Arc::downgrade(inner);
    let hook = move |mask: &CpuSet| {
        let Some(inner) = weak.upgrade() else { return false };
        crate::trace::event!(info, { mask = crate::trace::disp(mask) }, "DROM: following a new CPU mask");
        apply(&inner, mask);
        true
    };
    if let Some(f) = inner.drom.get() {
        f.spawn(interval, hook)?;
    }
    Ok(())
}

/// Makes the runtime run on exactly `mask` (see [`Builder::drom`](super::Builder::drom)).
fn apply(inner: &Arc<RtInner>, mask: &CpuSet) {
    let mut have = CpuSet::new();
    {
        for w in inner.workers().iter() {
            let _ = have.insert(w.cpu);
            let tid = w.shared.tid.load(Ordering::Relaxed);
            let home = mask.contains(w.cpu);
            let target = if home { CpuSet::from_cpus([w.cpu]).unwrap_or(*mask) } else { *mask };
            if let Err(e) = target.pin_thread(tid) {
                local::report(&format!("DROM: cannot move the executor of CPU {} to {target}: {e}", w.cpu));
            }
            w.shared.displaced.store(!home, Ordering::Relaxed);
            w.active.store(home, Ordering::Release);
            // Let it notice the change of idle mode (a displaced executor never spins).
            w.shared.unpark();
        }
    }
    for cpu in mask.difference(&have).iter() {
        if let Err(e) = inner.start_worker(cpu) {
            local::report(&format!("DROM: cannot start an executor on new CPU {cpu}: {e}"));
        }
    }
    move_other_threads(inner, mask);
}

/// The kernel thread ids of every runtime's worker threads in this process.
static EXECUTORS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Marks the calling thread as a pinned executor while it lives.
pub(super) struct ExecutorThread(i32);

impl ExecutorThread {
    pub(super) fn enter() -> ExecutorThread {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        EXECUTORS.lock().unwrap_or_else(|p| p.into_inner()).push(tid);
        ExecutorThread(tid)
    }
}

impl Drop for ExecutorThread {
    fn drop(&mut self) {
        EXECUTORS.lock().unwrap_or_else(|p| p.into_inner()).retain(|&t| t != self.0);
    }
}

/// Moves every thread of the process that is not an executor (of any runtime) onto `mask`.
fn move_other_threads(inner: &RtInner, mask: &CpuSet) {
    let mut executors: Vec<i32> = inner.workers().iter().map(|w| w.shared.tid.load(Ordering::Relaxed)).collect();
    executors.extend(EXECUTORS.lock().unwrap_or_else(|p| p.into_inner()).iter());
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return };
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if executors.contains(&tid) {
            continue;
        }
        // A thread that exited meanwhile (ESRCH) is fine to miss.
        let _ = mask.pin_thread(tid);
    }
}
