//! The UROM service's workers in the registry (`async-doca urom-service --drom-key KEY`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use doca_soft::urom::daemon::WorkerCpus;

use super::{Flags, Membership, Registry};
use crate::CpuSet;

/// Registers the UROM service's worker processes in a registry and applies the changes
/// `async-doca taskset` makes to them.
///
/// A worker registers with the cpuset it was started on; when those CPUs belong to another
/// process (workers often share CPUs), it is not registered and the service logs why. A new
/// mask is applied to every thread of the worker, but never outside the service's CPUs: a
/// mask reaching outside is applied on its part inside them (and logged), and one with no
/// CPU inside leaves the worker where it is; in both cases the change is acknowledged, so
/// the registry records what the administrator asked for.
#[derive(Debug)]
pub struct UromWorkers {
    reg: Registry,
    workers: Mutex<BTreeMap<libc::pid_t, Membership>>,
    interval: Duration,
}

impl UromWorkers {
    /// Workers go to the registry of `key` (created if missing); changes are applied within
    /// `interval`.
    pub fn new(key: &str, interval: Duration) -> crate::Result<UromWorkers> {
        Ok(UromWorkers { reg: Registry::open(key)?, workers: Mutex::new(BTreeMap::new()), interval })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<libc::pid_t, Membership>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A problem following a worker's mask: nobody to return it to (the daemon's poll loop).
fn log(msg: &str) {
    crate::trace::report!("urom-service: drom: {msg}");
}

impl WorkerCpus for UromWorkers {
    fn started(&self, worker_pid: libc::pid_t, cpus: &[u64; 16]) {
        let set = CpuSet::from_words(*cpus);
        match self.reg.register_pid(worker_pid, &set, Flags::NONE) {
            Ok(m) => {
                self.map().insert(worker_pid, m);
            }
            Err(e) => log(&format!("worker pid {worker_pid} (cpus {set}) not registered: {e}")),
        }
    }

    fn exited(&self, worker_pid: libc::pid_t) {
        self.map().remove(&worker_pid);
    }

    fn poll(&self, service: &[u64; 16]) {
        let service = CpuSet::from_words(*service);
        for (&pid, m) in self.map().iter() {
            let Ok(Some(mask)) = m.poll() else { continue };
            let inside = mask.intersection(&service);
            if inside.is_empty() {
                log(&format!("worker pid {pid}: mask {mask} has no CPU of the service's {service}; the worker stays"));
            } else {
                if inside != mask {
                    log(&format!(
                        "worker pid {pid}: mask {mask} reaches outside the service's CPUs {service}; using {inside}"
                    ));
                }
                if let Err(e) = super::pin_process(pid, &inside) {
                    log(&format!("worker pid {pid}: {e}"));
                }
            }
            crate::trace::event!(info, { pid = pid, mask = crate::trace::disp(&inside) }, "DROM: UROM worker moved");
            if let Err(e) = m.applied(&mask) {
                log(&format!("worker pid {pid}: {e}"));
            }
        }
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}
