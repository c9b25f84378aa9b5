//! Where the two sides of a test run: CPUs, pinned threads, runtimes.

use async_doca::{CpuSet, Error, ErrorKind, Result};

use super::IdleArg;

/// The two CPUs the two sides run on: the first two of this process's affinity (or the
/// same one twice on a one-CPU machine).
pub fn two_cpus() -> Result<(usize, usize)> {
    let cpus = CpuSet::current_affinity()?;
    let mut it = cpus.iter();
    let a = it.next().ok_or_else(|| Error::new(ErrorKind::NotFound, "no CPU in affinity"))?;
    Ok((a, it.next().unwrap_or(a)))
}

/// Pins the calling thread to `cpu`: for threads a test spawns for one side, which end with
/// it. The thread that runs the tests uses [`pinned`].
pub fn pin(cpu: usize) -> Result<()> {
    CpuSet::from_cpus([cpu])?.pin_current_thread()
}

/// Pins the calling thread to `cpu` until the guard is dropped, which gives the thread its
/// affinity back. A side that runs on the thread running the tests must not leave it
/// pinned: every later test of the run would find one CPU in [`two_cpus`], put both its
/// sides on it, and measure them competing for it (a raw `comch_lat` used to make the async
/// `comch_lat` after it 3.6x slower than raw; alone it is 1.7x).
#[must_use = "the thread is unpinned when the guard drops"]
pub fn pinned(cpu: usize) -> Result<Pinned> {
    let before = CpuSet::current_affinity()?;
    pin(cpu)?;
    Ok(Pinned { before })
}

/// The guard of [`pinned`].
pub struct Pinned {
    before: CpuSet,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Err(e) = self.before.pin_current_thread() {
            eprintln!("perf: could not restore the thread's CPU affinity ({e}); later tests may share one CPU");
        }
    }
}

/// The result of a side's thread (a panic becomes an error).
pub fn joined<T>(h: std::thread::JoinHandle<Result<T>>) -> Result<T> {
    h.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Other, "perf thread panicked")))
}

/// An async-doca runtime on `cpus` whose executors wait for work as `idle` says, and whose
/// operations never progress the PE from their own poll if `park` (`perf --park`).
pub fn runtime(cpus: &[usize], idle: IdleArg, park: bool) -> Result<async_doca::Runtime> {
    let idle = match idle {
        IdleArg::Polling => async_doca::IdleMode::Polling,
        IdleArg::Adaptive => async_doca::IdleMode::default(),
        IdleArg::Event => async_doca::IdleMode::Event,
    };
    async_doca::Runtime::builder()
        .cpus(CpuSet::from_cpus(cpus.iter().copied())?)
        .idle(idle)
        .inline_progress(!park)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_side_gives_the_thread_its_affinity_back() {
        let before = CpuSet::current_affinity().unwrap();
        let (a, _) = two_cpus().unwrap();
        {
            let _pinned = pinned(a).unwrap();
            assert_eq!(CpuSet::current_affinity().unwrap(), CpuSet::from_cpus([a]).unwrap());
        }
        assert_eq!(CpuSet::current_affinity().unwrap(), before, "the tests after it see every CPU again");
    }
}
