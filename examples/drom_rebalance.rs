//! A runtime doing steady work while an administrator moves its CPUs.
//!
//! The runtime registers in a private DROM registry on CPUs 0-1 and keeps spawning small
//! tasks; each records the CPU it actually ran on (`sched_getcpu`). Between phases, the
//! administrator sets the runtime's mask to `0`, then `1`, then `0-1` again, with
//! `async-doca taskset -p PID -c CPUS --sync` when the tool is built next to this example
//! (`cargo build --release --bin async-doca`), else with the same registry calls in-process.
//! The program prints the per-CPU work counts of every phase and exits 0 only if the work
//! followed the mask (nothing ran on a CPU the runtime did not own).
//!
//! ```text
//! cargo run --release --example drom_rebalance [PHASE_MS]
//! ```

use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_doca::drom::{Flags, Options, Registry};
use async_doca::{CpuSet, Error, ErrorKind, Result, Runtime};

const CPUS: usize = 2;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drom_rebalance: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How the administrator changes the mask.
enum Admin {
    Tool(std::path::PathBuf),
    Api(Registry),
}

impl Admin {
    fn set(&self, key: &str, pid: i32, cpus: &CpuSet) -> Result<()> {
        match self {
            Admin::Tool(exe) => {
                let out = Command::new(exe)
                    .args(["taskset", "--key", key, "-p", &pid.to_string(), "-c", &cpus.to_string(), "--sync"])
                    .output()
                    .map_err(|e| Error::os(e, "run async-doca taskset"))?;
                if !out.status.success() {
                    return Err(Error::new(
                        ErrorKind::Other,
                        format!("taskset failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
                    ));
                }
                Ok(())
            }
            Admin::Api(reg) => reg.set_mask(pid, cpus, Flags::SYNC_QUERY),
        }
    }
}

fn run() -> Result<()> {
    let phase = Duration::from_millis(std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(300));
    let all: CpuSet = "0-1".parse()?;
    if !all.is_subset(&CpuSet::current_affinity()?) {
        println!("drom_rebalance: needs CPUs 0 and 1; nothing to show here");
        return Ok(());
    }
    let key = format!("example-{}", std::process::id());
    let rt = Runtime::builder().cpus(all).drom(Options::new(&key)).build()?;
    let pid = std::process::id() as i32;
    let tool = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("async-doca")))
        .filter(|p| p.is_file());
    let admin = match tool {
        Some(p) => {
            println!("administrator: {} taskset", p.display());
            Admin::Tool(p)
        }
        None => {
            println!("administrator: the registry API in this process (build the async-doca binary to use the tool)");
            Admin::Api(Registry::attach(&key)?)
        }
    };
    let mut ok = true;
    for mask in ["0-1", "0", "1", "0-1"] {
        let mask: CpuSet = mask.parse()?;
        let mut took = String::new();
        if rt.cpus() != mask {
            let t0 = Instant::now();
            admin.set(&key, pid, &mask)?;
            took = format!("  (changed and applied in {:.1} ms)", t0.elapsed().as_secs_f64() * 1e3);
        }
        let counts = steady_work(&rt, phase);
        let line: Vec<String> = (0..CPUS).map(|c| format!("cpu{c} {:>7}", counts[c])).collect();
        println!(
            "mask {:<4}  runtime cpus {:<4}  work ran on: {}{took}",
            mask.to_string(),
            rt.cpus().to_string(),
            line.join("  ")
        );
        for (c, &n) in counts.iter().enumerate() {
            if !mask.contains(c) && n > 0 {
                println!("  ERROR: {n} tasks ran on CPU {c}, outside the mask {mask}");
                ok = false;
            }
            if mask.contains(c) && n == 0 {
                println!("  ERROR: no work ran on CPU {c} of the mask {mask}");
                ok = false;
            }
        }
    }
    rt.shutdown();
    Registry::remove(&key)?;
    if ok {
        println!("the work followed every mask");
        Ok(())
    } else {
        Err(Error::new(ErrorKind::Other, "the work did not follow the mask"))
    }
}

/// Spawns batches of small tasks for `dur`; returns how many ran on each CPU.
fn steady_work(rt: &Runtime, dur: Duration) -> [u64; CPUS] {
    let counts: Arc<[AtomicU64; CPUS]> = Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
    let end = Instant::now() + dur;
    rt.block_on(async {
        while Instant::now() < end {
            let batch: Vec<_> = (0..16)
                .map(|_| {
                    let counts = counts.clone();
                    async_doca::spawn(async move {
                        // A little real work, so that the executors are busy.
                        let mut x = 0u64;
                        for i in 0..2_000u64 {
                            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                        }
                        // SAFETY: sched_getcpu has no preconditions.
                        let cpu = unsafe { libc::sched_getcpu() };
                        if let Some(c) = counts.get(cpu as usize) {
                            c.fetch_add(1, Ordering::Relaxed);
                        }
                        x
                    })
                })
                .collect();
            for h in batch {
                let _ = h.await;
            }
        }
    });
    std::array::from_fn(|c| counts[c].load(Ordering::Relaxed))
}
