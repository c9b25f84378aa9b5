//! The machine's own speed, with no DOCA in it: an atomic counter bounced between two
//! threads pinned to two CPUs. `bridge_lat`'s raw row is this bounce, and `perf` measures it
//! again before every round as the round's reference (`ref_ns`, `--no-ref` to skip it).
//!
//! Why a reference: this VM switches between two states within a minute, even idle (the
//! bounce takes ~130 ns round trip in one, ~350–450 ns in the other), and every raw latency
//! follows it (docs/cost.md, "Wall clock (2026-12-03)"). A round taken in the slow state
//! looks like a regression; its reference says which state it was taken in.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_doca::{Error, ErrorKind, Result};

use super::cpu::{joined, pin, pinned, two_cpus};
use super::stats::{timed, Samples};

/// When the spinning side stops waiting for the echo.
#[derive(Clone, Copy, Debug)]
pub enum GiveUp {
    /// After one round trip took this long: the echo thread died (`bridge_lat`, which runs
    /// as many round trips as it is asked for). `bridge_lat` is built with the `tokio`
    /// feature only.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Trip(Duration),
    /// At this instant, however many round trips are left: the reference must cost a
    /// bounded time even when another job holds one of the CPUs.
    At(Instant),
}

/// `warmup + iters` whole round trips of an atomic counter between a thread on `cpu_a` (the
/// calling thread, pinned for the while) and one on `cpu_b`, timed by perf's clock.
pub fn ping_pong(cpu_a: usize, cpu_b: usize, warmup: u64, iters: u64, give_up: GiveUp) -> Result<(Samples, Duration)> {
    // Each on its own cache line, as a job queue and its completion would be.
    #[repr(align(64))]
    struct Line(AtomicU64);
    let ask = Arc::new(Line(AtomicU64::new(0)));
    let answer = Arc::new(Line(AtomicU64::new(0)));
    let done = Arc::new(AtomicBool::new(false));
    let echo = {
        let (ask, answer, done) = (ask.clone(), answer.clone(), done.clone());
        std::thread::spawn(move || -> Result<()> {
            pin(cpu_b)?;
            let mut seen = 0;
            while !done.load(Ordering::Relaxed) {
                let v = ask.0.load(Ordering::Acquire);
                if v != seen {
                    seen = v;
                    answer.0.store(v, Ordering::Release);
                } else {
                    std::hint::spin_loop();
                }
            }
            Ok(())
        })
    };
    // A closure, so that the echo thread is stopped below however this ends.
    let measured = (|| {
        let _on_a = pinned(cpu_a)?;
        timed(warmup, iters, 1.0, |i| {
            ask.0.store(i + 1, Ordering::Release);
            // Bounded: the echo thread answers within microseconds unless it died or lost
            // its CPU. The clock is read only after 4096 looks, never in a round trip that
            // is timed normally.
            let mut trip_limit = None;
            let mut spins = 0u32;
            while answer.0.load(Ordering::Acquire) != i + 1 {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                if spins % 4096 == 0 {
                    let now = Instant::now();
                    let limit = match give_up {
                        GiveUp::Trip(d) => *trip_limit.get_or_insert(now + d),
                        GiveUp::At(t) => t,
                    };
                    if now > limit {
                        return Err(Error::new(
                            ErrorKind::TimedOut,
                            "perf: the atomic ping-pong's echo did not answer",
                        ));
                    }
                }
            }
            Ok(())
        })
    })();
    done.store(true, Ordering::Relaxed);
    joined(echo)?;
    measured
}

/// Round trips of the reference: ~3–10 ms on this VM, enough for a steady p50.
const REF_TRIPS: u64 = 20_000;
const REF_WARMUP: u64 = 2_000;
/// The most a reference may take; far above its usual few milliseconds.
const REF_LIMIT: Duration = Duration::from_secs(2);

/// A round's reference: the p50 of a bare ping-pong between the two CPUs the tests use.
#[derive(Clone, Copy, Debug)]
pub struct Reference {
    pub cpu_a: usize,
    pub cpu_b: usize,
    /// p50 of a whole round trip, in ns.
    pub p50_ns: f64,
}

/// Measures the reference between the two CPUs every test puts its two sides on
/// ([`two_cpus`]). Fails on a one-CPU machine, where the two threads would take turns on
/// one CPU and measure the scheduler.
pub fn reference() -> Result<Reference> {
    let (cpu_a, cpu_b) = two_cpus()?;
    if cpu_a == cpu_b {
        return Err(Error::new(ErrorKind::NotFound, "one CPU only, no pair to bounce between"));
    }
    let (samples, _) = ping_pong(cpu_a, cpu_b, REF_WARMUP, REF_TRIPS, GiveUp::At(Instant::now() + REF_LIMIT))?;
    Ok(Reference { cpu_a, cpu_b, p50_ns: samples.quantile(0.5) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_measured_between_two_cpus_and_positive() {
        let (a, b) = two_cpus().unwrap();
        if a == b {
            assert!(reference().is_err(), "one CPU has no reference");
            return;
        }
        let r = reference().unwrap();
        assert_eq!((r.cpu_a, r.cpu_b), (a, b));
        assert!(r.p50_ns > 0.0, "{r:?}");
    }
}
