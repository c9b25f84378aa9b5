//! The clock that stamps operations: the CPU's time-stamp counter where it is invariant, the
//! monotonic clock elsewhere.
//!
//! Every latency round and every operation of a bandwidth test is stamped, so the clock's own
//! cost is inside every figure perf prints. `Instant::now` (`clock_gettime` through the vDSO)
//! costs ~23 ns on this VM; reading the TSC costs ~10 ns. A bandwidth operation is stamped at
//! its submit and at its result, so with `Instant` ~46 ns of each operation were the clock:
//! that diluted async/raw (the same clock cost on both sides), and it inflated raw against
//! UCX, whose `ucx_perftest` stamps with the TSC (`ucs_get_time`), as perftest does
//! (`get_cycles`). See `docs/cost.md` for the figures before and after.
//!
//! The TSC is used on x86_64 when the CPU says it is invariant (`constant_tsc` and
//! `nonstop_tsc` in `/proc/cpuinfo`: one rate on every CPU, in every power state), so stamps
//! taken on different CPUs or across a sleep compare. Its rate is calibrated once per process,
//! against `Instant` over [`CALIBRATION`], before the first stamp is read.
//! `PERF_CLOCK=monotonic` forces `Instant` (to compare the two).
//!
//! **Resolution.** The TSC this VM's guest sees advances in steps of 26 ticks (10 ns at its
//! 2.6 GHz), so each sample is known to 10 ns, which is also what `ucx_perftest` reports to (µs
//! with three decimals). A run's elapsed time, which makes ops/s, spans millions of ticks, so
//! the step costs it nothing. On hardware whose TSC counts every tick, samples resolve
//! below a nanosecond.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the TSC's rate is measured against the monotonic clock (once per process): the
/// rate is then known to ~1e-6, far below the histogram's three digits.
const CALIBRATION: Duration = Duration::from_millis(20);

/// A point in time, in the clock's own units (TSC ticks, or nanoseconds since the process's
/// first stamp).
#[derive(Clone, Copy, Debug)]
pub struct Stamp(u64);

#[derive(Debug)]
enum Source {
    /// The invariant TSC, `ns_per_tick` nanoseconds per tick.
    Tsc { ns_per_tick: f64 },
    /// `Instant`, as nanoseconds since `epoch`.
    Monotonic { epoch: Instant },
}

static SOURCE: OnceLock<Source> = OnceLock::new();

fn source() -> &'static Source {
    SOURCE.get_or_init(|| {
        let forced = std::env::var("PERF_CLOCK").is_ok_and(|v| v == "monotonic");
        if !forced && tsc::invariant() {
            Source::Tsc { ns_per_tick: tsc::calibrate(CALIBRATION) }
        } else {
            Source::Monotonic { epoch: Instant::now() }
        }
    })
}

/// Which clock stamps, for the line under perf's table.
pub fn describe() -> String {
    match source() {
        Source::Tsc { ns_per_tick } => {
            format!("the invariant TSC ({:.3} GHz; PERF_CLOCK=monotonic for clock_gettime)", 1.0 / ns_per_tick)
        }
        Source::Monotonic { .. } => "clock_gettime (CLOCK_MONOTONIC)".to_string(),
    }
}

/// Picks the clock (and calibrates the TSC: [`CALIBRATION`] of busy waiting) now, so that no
/// later stamp waits for it. Every perf process calls it first, before it meets its peers: a
/// process that calibrated at its first stamp kept its peer waiting that long inside a timed
/// iteration (every host-only collective test after the first of a run showed a 20 ms
/// maximum: the fresh peer process calibrating while the already calibrated parent waited).
pub fn init() {
    source();
}

impl Stamp {
    /// Now. The first call in a process picks the clock (and calibrates the TSC) before it
    /// reads it, so no stamp carries the calibration.
    #[inline]
    pub fn now() -> Stamp {
        match source() {
            Source::Tsc { .. } => Stamp(tsc::read()),
            Source::Monotonic { epoch } => Stamp(epoch.elapsed().as_nanos() as u64),
        }
    }

    /// Nanoseconds from `earlier` to `self` (0 when `earlier` is not earlier).
    #[inline]
    pub fn ns_since(self, earlier: Stamp) -> f64 {
        Stamp::ticks_to_ns(self.ticks_since(earlier))
    }

    /// The clock's raw difference from `earlier` to `self` (0 when `earlier` is not
    /// earlier), for [`Stamp::ticks_to_ns`] later: a loop that stamps every round keeps these
    /// and converts them afterwards.
    #[inline]
    pub fn ticks_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The clock's raw units from `self` to now (see [`Stamp::ticks_since`]).
    #[inline]
    pub fn ticks_to_now(self) -> u64 {
        Stamp::now().ticks_since(self)
    }

    /// Nanoseconds in `ticks` of the clock's raw units.
    #[inline]
    pub fn ticks_to_ns(ticks: u64) -> f64 {
        let units = ticks as f64;
        match source() {
            Source::Tsc { ns_per_tick } => units * ns_per_tick,
            Source::Monotonic { .. } => units,
        }
    }

    /// [`ns_since`](Stamp::ns_since) as a `Duration`.
    pub fn since(self, earlier: Stamp) -> Duration {
        Duration::from_nanos(self.ns_since(earlier).round() as u64)
    }

    /// Nanoseconds from `self` to now (the byte streams' timing, which needs tokio).
    #[cfg(any(feature = "tokio", test))]
    #[inline]
    pub fn elapsed_ns(self) -> f64 {
        Stamp::now().ns_since(self)
    }

    /// From `self` to now.
    pub fn elapsed(self) -> Duration {
        Stamp::now().since(self)
    }
}

#[cfg(target_arch = "x86_64")]
mod tsc {
    use std::time::{Duration, Instant};

    /// The counter.
    #[inline(always)]
    pub fn read() -> u64 {
        // SAFETY: RDTSC exists on every x86_64 CPU and reads a counter; it touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Whether the kernel reports the TSC as invariant.
    pub fn invariant() -> bool {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else { return false };
        let Some(flags) = info.lines().find(|l| l.starts_with("flags")) else { return false };
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        has("constant_tsc") && has("nonstop_tsc")
    }

    /// Nanoseconds per tick, measured against `Instant` over `span`.
    pub fn calibrate(span: Duration) -> f64 {
        let (t0, c0) = (Instant::now(), read());
        while t0.elapsed() < span {
            std::hint::spin_loop();
        }
        let (c1, t1) = (read(), Instant::now());
        (t1 - t0).as_nanos() as f64 / c1.saturating_sub(c0).max(1) as f64
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tsc {
    use std::time::Duration;

    // Never read: `invariant` says no, so the monotonic clock stamps.
    pub fn read() -> u64 {
        0
    }

    pub fn invariant() -> bool {
        false
    }

    pub fn calibrate(_: Duration) -> f64 {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_measure_a_sleep_in_nanoseconds() {
        let t0 = Stamp::now();
        std::thread::sleep(Duration::from_millis(30));
        let ns = t0.elapsed_ns();
        // The sleep lasts at least 30 ms; the bound above only catches a wrong rate (a TSC
        // calibrated 1000x off), not a slow machine.
        assert!(ns >= 30e6 * 0.99, "{ns} ns for a 30 ms sleep ({})", describe());
        assert!(ns < 30e9, "{ns} ns for a 30 ms sleep ({})", describe());
    }

    #[test]
    fn stamps_agree_with_instant() {
        let (s0, i0) = (Stamp::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (s1, i1) = (Stamp::now(), Instant::now());
        let (ours, theirs) = (s1.ns_since(s0), (i1 - i0).as_nanos() as f64);
        assert!((ours - theirs).abs() < theirs * 0.02 + 1e5, "stamps {ours} ns, Instant {theirs} ns ({})", describe());
        assert_eq!(s0.ns_since(s1), 0.0, "a later stamp minus an earlier one is 0, not negative");
    }
}
