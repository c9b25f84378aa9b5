//! The CPUs the service offers its workers, and where the workers really run.
//!
//! On a BlueField the service runs on the DPU and offers the DPU's Arm cores (CPUs 0–7 on a
//! BlueField-2, 0–15 on a BlueField-3); NVIDIA's UROM samples check that CPUs 0–7 are in the
//! service's cpuset before they spawn a worker, and end without one otherwise. On the soft
//! provider the "DPU" is this machine, which may have fewer CPUs. With `arm_cpus = N` the
//! service offers the logical CPUs `0..N` in `doca_urom_service_get_cpuset`, checks workers'
//! cpusets against them, and pins each worker to the real CPUs behind its logical ones:
//! logical CPU `i` runs on the `i mod R`-th of the service's `R` real CPUs, in ascending order.
//! Without it, offered and real are the same set.

use crate::urom::proto::{cpuset_is_empty, CpuSet};

/// The largest `arm_cpus`: a wire cpuset holds CPUs 0 to 1023.
pub const MAX_ARM_CPUS: u32 = 1024;

/// The service's CPUs: what it offers, and the real CPUs behind them.
#[derive(Debug, Clone)]
pub(crate) struct ServiceCpus {
    offered: CpuSet,
    real: CpuSet,
    /// The real CPUs in ascending order when the offered CPUs are logical; empty otherwise.
    backing: Vec<usize>,
}

impl ServiceCpus {
    /// The service on `real` (not empty), offering `arm_cpus` logical CPUs when given.
    pub(crate) fn new(real: CpuSet, arm_cpus: Option<u32>) -> Result<ServiceCpus, String> {
        debug_assert!(!cpuset_is_empty(&real));
        let Some(n) = arm_cpus else { return Ok(ServiceCpus { offered: real, real, backing: Vec::new() }) };
        if n == 0 || n > MAX_ARM_CPUS {
            return Err(format!("{n} Arm CPUs asked for: the service offers 1 to {MAX_ARM_CPUS}"));
        }
        let mut offered = [0u64; 16];
        (0..n as usize).for_each(|c| set_cpu(&mut offered, c));
        Ok(ServiceCpus { offered, real, backing: cpus_of(&real).collect() })
    }

    /// What `Welcome` tells hosts, and what workers' cpusets are checked against.
    pub(crate) fn offered(&self) -> &CpuSet {
        &self.offered
    }

    /// The real CPUs workers may run on (what DROM may move them within).
    pub(crate) fn real(&self) -> &CpuSet {
        &self.real
    }

    /// The real CPUs behind `set`, a subset of [`offered`](ServiceCpus::offered).
    pub(crate) fn to_real(&self, set: &CpuSet) -> CpuSet {
        if self.backing.is_empty() {
            return *set;
        }
        let mut real = [0u64; 16];
        for logical in cpus_of(set) {
            set_cpu(&mut real, self.backing[logical % self.backing.len()]);
        }
        real
    }
}

fn set_cpu(set: &mut CpuSet, cpu: usize) {
    set[cpu / 64] |= 1 << (cpu % 64);
}

/// The CPUs of `set`, ascending.
fn cpus_of(set: &CpuSet) -> impl Iterator<Item = usize> + '_ {
    (0..1024).filter(|&c| has_cpu(set, c))
}

fn has_cpu(set: &CpuSet, cpu: usize) -> bool {
    set[cpu / 64] & (1 << (cpu % 64)) != 0
}

/// Parses a CPU list such as `0-3,8,10-11` into a cpuset.
pub fn parse_cpu_list(s: &str) -> Result<CpuSet, String> {
    let mut set = [0u64; 16];
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: usize = a.parse().map_err(|_| format!("bad CPU {a:?} in {s:?}"))?;
        let b: usize = b.parse().map_err(|_| format!("bad CPU {b:?} in {s:?}"))?;
        if a > b || b >= 1024 {
            return Err(format!("bad CPU range {part:?} (CPUs are 0 to 1023)"));
        }
        for cpu in a..=b {
            set_cpu(&mut set, cpu);
        }
    }
    if cpuset_is_empty(&set) {
        return Err(format!("empty CPU list {s:?}"));
    }
    Ok(set)
}

/// Formats a cpuset as a CPU list (`0-3,8`).
pub fn format_cpu_list(set: &CpuSet) -> String {
    let on = |c: usize| has_cpu(set, c);
    let mut out = Vec::new();
    let mut c = 0;
    while c < 1024 {
        if on(c) {
            let start = c;
            while c + 1 < 1024 && on(c + 1) {
                c += 1;
            }
            out.push(if start == c { format!("{c}") } else { format!("{start}-{c}") });
        }
        c += 1;
    }
    out.join(",")
}
