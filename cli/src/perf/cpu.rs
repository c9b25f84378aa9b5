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

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> Result<()> {
    CpuSet::from_cpus([cpu])?.pin_current_thread()
}

/// The result of a side's thread (a panic becomes an error).
pub fn joined<T>(h: std::thread::JoinHandle<Result<T>>) -> Result<T> {
    h.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Other, "perf thread panicked")))
}

/// An async-doca runtime on `cpus` whose executors wait for work as `idle` says.
pub fn runtime(cpus: &[usize], idle: IdleArg) -> Result<async_doca::Runtime> {
    let idle = match idle {
        IdleArg::Polling => async_doca::IdleMode::Polling,
        IdleArg::Adaptive => async_doca::IdleMode::default(),
        IdleArg::Event => async_doca::IdleMode::Event,
    };
    async_doca::Runtime::builder().cpus(CpuSet::from_cpus(cpus.iter().copied())?).idle(idle).build()
}
