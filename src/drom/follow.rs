//! How a process follows its DROM mask: registration and the follower thread.
//!
//! This is DROM's side of [`Builder::drom`](crate::Builder::drom). It knows the registry
//! protocol (register or adopt a reservation, wait for a change, poll it, acknowledge it) but
//! nothing of executors: what "run on this mask now" means for a runtime is a hook the
//! runtime hands to [`Follower::spawn`] (the executor's side lives in
//! `executor/follow_drom.rs`). So the dependency points one way, executor → drom.
//!
//! One follower thread per runtime (`async-doca-drom`) sleeps on the registry's futex word
//! of the process, so that a setter wakes it at once; it also wakes every check interval
//! (in case a wake-up was lost, for example when the setter died between its write and its
//! wake), and executors about to sleep wake it when they see a pending change (a load from
//! shared memory per park, [`Follower::park_check`]). When a change is pending it calls the
//! runtime's hook (which re-pins, displaces or starts executors and moves the process's other
//! threads) and acknowledges the mask in the registry. The hook holds only a weak reference
//! to the runtime, and the runtime stops and joins the follower first at shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::{Flags, Membership, Options, Registry, DEFAULT_CHECK_INTERVAL, ENV_RESERVATION};
use crate::cpuset::CpuSet;
use crate::error::{ErrorKind, Result};

/// Registers the process (or adopts its reservation); returns the registration.
pub(crate) fn join(opts: &Options, cpus: &CpuSet) -> Result<Membership> {
    if opts.adopt {
        if let Ok(value) = std::env::var(ENV_RESERVATION) {
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

/// The runtime's side of the follower thread.
pub(crate) struct Follower {
    membership: Arc<Membership>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Follower {
    /// A follower of `membership` with no thread yet. The runtime stores it before
    /// [`spawn`](Follower::spawn) so that its shutdown path finds it whatever happens next.
    pub(crate) fn new(membership: Membership) -> Follower {
        Follower { membership: Arc::new(membership), stop: Arc::new(AtomicBool::new(false)), thread: Mutex::new(None) }
    }

    /// Starts the follower thread. `apply` is the runtime's hook: it makes the runtime run on
    /// exactly the given mask, and returns false once the runtime is gone (the thread then
    /// ends without acknowledging). `interval`: see [`Options::check_interval`].
    pub(crate) fn spawn<F>(&self, interval: Option<Duration>, apply: F) -> Result<()>
    where
        F: FnMut(&CpuSet) -> bool + Send + 'static,
    {
        let interval = interval.unwrap_or(DEFAULT_CHECK_INTERVAL);
        let membership = self.membership.clone();
        let stop = self.stop.clone();
        let spawned = thread::Builder::new()
            .name("async-doca-drom".into())
            .spawn(move || follow(membership, stop, interval, apply))
            .map_err(|e| crate::Error::os(e, "runtime: spawn the DROM follower thread"))?;
        *self.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(spawned);
        Ok(())
    }

    /// An executor is about to sleep: if a change is pending, make sure the follower runs.
    pub(crate) fn park_check(&self) {
        if self.membership.is_dirty() {
            self.membership.wake_waiters();
        }
    }

    /// Stops and joins the follower thread (from any thread but itself).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.membership.wake_waiters();
        let t = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = t {
            if t.thread().id() != thread::current().id() && t.join().is_err() {
                crate::trace::report!("the DROM follower thread panicked");
            }
        }
    }

    /// Leaves the registry (after the executors stopped).
    pub(crate) fn unregister(&self) {
        self.membership.unregister();
    }
}

fn follow<F>(m: Arc<Membership>, stop: Arc<AtomicBool>, interval: Duration, mut apply: F)
where
    F: FnMut(&CpuSet) -> bool,
{
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
                    crate::trace::report!("DROM: {e}; the runtime no longer follows the registry");
                    return;
                }
                if !reported {
                    crate::trace::report!("DROM: cannot read the registry: {e}");
                    reported = true;
                }
                thread::sleep(interval);
                continue;
            }
        };
        if !apply(&mask) {
            return;
        }
        if let Err(e) = m.applied(&mask) {
            crate::trace::report!("DROM: cannot acknowledge mask {mask}: {e}");
            thread::sleep(interval);
        }
    }
}
