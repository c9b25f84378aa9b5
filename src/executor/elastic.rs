//! How a runtime follows its DROM mask (see [`Builder::drom`](super::Builder::drom)).
//!
//! One follower thread per runtime (`async-doca-drom`) sleeps on the registry's futex word
//! of the process, so that a setter wakes it at once; it also wakes every check interval
//! (in case a wake-up was lost, for example when the setter died between its write and its
//! wake), and executors about to sleep wake it when they see a pending change (a load from
//! shared memory per park). When a change is pending it re-pins, displaces or starts
//! executors, moves the process's other threads, and acknowledges the mask in the registry.
//! It holds only a weak reference to the runtime, and the runtime stops and joins it first
//! at shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::Duration;

use super::local;
use super::runtime::RtInner;
use crate::cpuset::CpuSet;
use crate::drom::{self, Flags, Membership, Options, Registry};
use crate::error::{ErrorKind, Result};

/// Registers the process (or adopts its reservation); returns the registration.
pub(super) fn join(opts: &Options, cpus: &CpuSet) -> Result<Membership> {
    if opts.adopt {
        if let Ok(value) = std::env::var(drom::ENV_RESERVATION) {
            if value.strip_prefix(opts.key.as_str()).is_some_and(|rest| rest.starts_with(':')) {
                match Membership::adopt(&value) {
                    Ok(m) => return Ok(m),
                    // Inherited by a grandchild, or adopted already: register normally.
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(e.context_prefix("runtime: adopt the DROM reservation")),
                }
            }
        }
    }
    let reg = Registry::open(&opts.key)?;
    let flags = if opts.steal { Flags::STEAL_CPUS } else { Flags::NONE };
    reg.register(cpus, flags).map_err(|e| e.context_prefix("runtime: register in the DROM registry"))
}

/// Starts following `membership` (the workers are running).
pub(super) fn start(inner: &Arc<RtInner>, membership: Membership, interval: Option<Duration>) -> Result<()> {
    let interval = interval.unwrap_or(drom::DEFAULT_CHECK_INTERVAL);
    let membership = Arc::new(membership);
    move_other_threads(inner, &membership.current());
    let stop = Arc::new(AtomicBool::new(false));
    let follower = Follower { membership: membership.clone(), stop: stop.clone(), thread: Mutex::new(None) };
    if inner.drom.set(follower).is_err() {
        unreachable!("a runtime starts its follower once");
    }
    let weak = Arc::downgrade(inner);
    let spawned = thread::Builder::new()
        .name("async-doca-drom".into())
        .spawn(move || follow(weak, membership, stop, interval))
        .map_err(|e| crate::Error::os(e, "runtime: spawn the DROM follower thread"))?;
    if let Some(f) = inner.drom.get() {
        *f.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(spawned);
    }
    Ok(())
}

/// The runtime's side of the follower thread.
pub(crate) struct Follower {
    membership: Arc<Membership>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Follower {
    /// An executor is about to sleep: if a change is pending, make sure the follower runs.
    pub(super) fn park_check(&self) {
        if self.membership.is_dirty() {
            self.membership.wake_waiters();
        }
    }

    /// Stops and joins the follower thread (from any thread but itself).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.membership.wake_waiters();
        let t = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = t {
            if t.thread().id() != thread::current().id() && t.join().is_err() {
                local::report("the DROM follower thread panicked");
            }
        }
    }

    /// Leaves the registry (after the executors stopped).
    pub(super) fn unregister(&self) {
        self.membership.unregister();
    }
}

fn follow(rt: Weak<RtInner>, m: Arc<Membership>, stop: Arc<AtomicBool>, interval: Duration) {
    let mut reported = false;
    while !stop.load(Ordering::SeqCst) {
        m.wait(interval);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let mask = match m.poll() {
            Ok(Some(mask)) => mask,
            Ok(None) => continue,
            Err(e) => {
                if e.kind() == ErrorKind::NotFound {
                    local::report(&format!("DROM: {e}; the runtime no longer follows the registry"));
                    return;
                }
                if !reported {
                    local::report(&format!("DROM: cannot read the registry: {e}"));
                    reported = true;
                }
                thread::sleep(interval);
                continue;
            }
        };
        let Some(inner) = rt.upgrade() else { return };
        crate::trace::event!(info, { mask = crate::trace::disp(&mask) }, "DROM: following a new CPU mask");
        apply(&inner, &mask);
        drop(inner);
        if let Err(e) = m.applied(&mask) {
            local::report(&format!("DROM: cannot acknowledge mask {mask}: {e}"));
            thread::sleep(interval);
        }
    }
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
