//! Latency samples and the figures we report from them.
//!
//! Latency tests record one sample per round trip and report half of it (as perftest does).
//! We report medians and the 99th percentile, never means: these machines are shared and
//! a mean is dragged by every scheduling hiccup.

use std::future::Future;
use std::time::{Duration, Instant};

use async_doca::Result;

/// One measured test, as printed in the table and as one JSON line.
#[derive(Clone, Debug)]
pub struct Report {
    pub test: &'static str,
    pub mode: &'static str,
    /// Payload size in bytes (8 for counter operations, 0 for spawn).
    pub size: usize,
    pub iters: u64,
    /// 1: both sides in one process (two executors or threads); 2: two processes.
    pub procs: u32,
    pub p50_ns: f64,
    pub p99_ns: f64,
    /// Operations completed per second over the whole timed run.
    pub ops_per_sec: f64,
    /// Payload megabytes (10^6 bytes) per second, for bandwidth tests.
    pub mb_per_sec: Option<f64>,
    /// Share of a compute loop done while a collective was in flight, for `coll_overlap`.
    pub overlap_pct: Option<f64>,
}

impl Report {
    /// One JSON object on one line. Written by hand: the keys are fixed and the values are
    /// numbers or plain identifiers, so no escaping is needed.
    pub fn to_json(&self) -> String {
        let mut mb = self.mb_per_sec.map(|v| format!(",\"mb_per_sec\":{v:.1}")).unwrap_or_default();
        if let Some(v) = self.overlap_pct {
            mb.push_str(&format!(",\"overlap_pct\":{v:.1}"));
        }
        format!(
            "{{\"test\":\"{}\",\"mode\":\"{}\",\"size\":{},\"iters\":{},\"procs\":{},\"p50_ns\":{:.1},\"p99_ns\":{:.1},\"ops_per_sec\":{:.1}{mb}}}",
            self.test, self.mode, self.size, self.iters, self.procs, self.p50_ns, self.p99_ns, self.ops_per_sec
        )
    }

    /// Adds the bandwidth of `size`-byte operations at the measured rate.
    pub fn with_bandwidth(mut self) -> Report {
        self.mb_per_sec = Some(self.ops_per_sec * self.size as f64 / 1e6);
        self
    }
}

/// Runs `step(i)` for `warmup + iters` rounds (`i` counts from 0) and times the last `iters`:
/// one sample per round, divided by `divisor` (2 for half a round trip). Returns the samples
/// and the length of the timed part. The loop every latency test shares; [`timed_async`] is
/// the same for steps that are futures.
pub fn timed(
    warmup: u64,
    iters: u64,
    divisor: f64,
    mut step: impl FnMut(u64) -> Result<()>,
) -> Result<(Samples, Duration)> {
    let mut samples = Samples::with_capacity(iters as usize);
    let mut start = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            start = Instant::now();
        }
        let t0 = Instant::now();
        step(i)?;
        if i >= warmup {
            samples.push(t0.elapsed(), divisor);
        }
    }
    Ok((samples, start.elapsed()))
}

/// [`timed`] for asynchronous steps.
pub async fn timed_async<F: Future<Output = Result<()>>>(
    warmup: u64,
    iters: u64,
    divisor: f64,
    mut step: impl FnMut(u64) -> F,
) -> Result<(Samples, Duration)> {
    let mut samples = Samples::with_capacity(iters as usize);
    let mut start = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            start = Instant::now();
        }
        let t0 = Instant::now();
        step(i).await?;
        if i >= warmup {
            samples.push(t0.elapsed(), divisor);
        }
    }
    Ok((samples, start.elapsed()))
}

/// Per-operation latency samples in nanoseconds.
#[derive(Debug, Default)]
pub struct Samples {
    ns: Vec<f64>,
}

impl Samples {
    pub fn with_capacity(n: usize) -> Samples {
        Samples { ns: Vec::with_capacity(n) }
    }

    pub fn push(&mut self, d: Duration, divisor: f64) {
        self.ns.push(d.as_nanos() as f64 / divisor);
    }

    #[cfg(test)]
    pub fn extend_ns(&mut self, ns: impl IntoIterator<Item = f64>) {
        self.ns.extend(ns);
    }

    pub fn len(&self) -> usize {
        self.ns.len()
    }

    /// The `q` quantile (0..=1) by the nearest-rank method; 0 for no samples.
    pub fn quantile(&mut self, q: f64) -> f64 {
        if self.ns.is_empty() {
            return 0.0;
        }
        self.ns.sort_by(f64::total_cmp);
        let rank = ((q * self.ns.len() as f64).ceil() as usize).clamp(1, self.ns.len());
        self.ns[rank - 1]
    }
}

/// Builds a report from the samples of one run.
pub struct Run {
    pub test: &'static str,
    pub mode: &'static str,
    pub size: usize,
    pub procs: u32,
}

impl Run {
    /// `ops` operations completed in `elapsed`; `samples` are per-operation latencies.
    pub fn report(&self, mut samples: Samples, ops: u64, elapsed: Duration) -> Report {
        let secs = elapsed.as_secs_f64();
        Report {
            test: self.test,
            mode: self.mode,
            size: self.size,
            iters: samples.len() as u64,
            procs: self.procs,
            p50_ns: samples.quantile(0.50),
            p99_ns: samples.quantile(0.99),
            ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
            mb_per_sec: None,
            overlap_pct: None,
        }
    }
}

/// Prints reports as an aligned table, and a ratio line per test that ran in several modes.
pub fn print_table(reports: &[Report]) {
    println!(
        "{:<16} {:<12} {:>8} {:>9} {:>5} {:>10} {:>10} {:>14} {:>10}",
        "test", "mode", "size", "iters", "procs", "p50 (ns)", "p99 (ns)", "ops/s", "MB/s"
    );
    for r in reports {
        let mb = match (r.mb_per_sec, r.overlap_pct) {
            (Some(v), _) => format!("{v:.0}"),
            (None, Some(o)) => format!("{o:.0}% ovl"),
            (None, None) => String::new(),
        };
        println!(
            "{:<16} {:<12} {:>8} {:>9} {:>5} {:>10.0} {:>10.0} {:>14.0} {:>10}",
            r.test, r.mode, r.size, r.iters, r.procs, r.p50_ns, r.p99_ns, r.ops_per_sec, mb
        );
    }
    let mut printed_header = false;
    for r in reports.iter().filter(|r| r.mode == "offload") {
        if let Some(host) =
            reports.iter().find(|b| b.mode == "host" && b.test == r.test && b.size == r.size && b.procs == r.procs)
        {
            if !printed_header {
                println!("\noffload / host (the workers run the collective / the hosts do), side by side in this run:");
                printed_header = true;
            }
            println!(
                "  {:<16} size {:>8}  procs {}  p50 {:.2}x  p99 {:.2}x",
                r.test,
                r.size,
                r.procs,
                r.p50_ns / host.p50_ns,
                r.p99_ns / host.p99_ns
            );
        }
    }
    // Each mode against the one it is built on, measured side by side in this run; the UCX
    // anchor (`perf --anchor ucx`) against both of ours.
    for (mode, base) in [
        ("async", "raw"),
        ("tokio", "async"),
        ("tokio-handle", "async"),
        ("traced", "async"),
        ("raw", "ucx"),
        ("async", "ucx"),
    ] {
        let mut printed_header = false;
        for r in reports.iter().filter(|r| r.mode == mode) {
            if let Some(b) =
                reports.iter().find(|b| b.mode == base && b.test == r.test && b.size == r.size && b.procs == r.procs)
            {
                if !printed_header {
                    println!("\n{mode} / {base}, measured side by side in this run (p50 {mode} − {base} in ns):");
                    printed_header = true;
                }
                println!(
                    "  {:<16} size {:>8}  procs {}  p50 {:.2}x ({:+.0} ns)  p99 {:.2}x  ops/s {:.2}x",
                    r.test,
                    r.size,
                    r.procs,
                    r.p50_ns / b.p50_ns,
                    r.p50_ns - b.p50_ns,
                    r.p99_ns / b.p99_ns,
                    r.ops_per_sec / b.ops_per_sec
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut s = Samples::default();
        s.extend_ns((1..=100).map(f64::from));
        assert_eq!(s.quantile(0.5), 50.0);
        assert_eq!(s.quantile(0.99), 99.0);
        assert_eq!(s.quantile(1.0), 100.0);
        assert_eq!(Samples::default().quantile(0.5), 0.0);
    }

    #[test]
    fn json_has_the_documented_keys() {
        let r = Run { test: "t", mode: "raw", size: 8, procs: 2 }.report(
            {
                let mut s = Samples::default();
                s.extend_ns([10.0, 20.0]);
                s
            },
            4,
            Duration::from_secs(2),
        );
        let j = r.to_json();
        for key in ["test", "mode", "size", "iters", "procs", "p50_ns", "p99_ns", "ops_per_sec"] {
            assert!(j.contains(&format!("\"{key}\":")), "{key} missing in {j}");
        }
        assert!(j.contains("\"ops_per_sec\":2.0"));
        assert!(!j.contains("mb_per_sec"));
        let bw = Report { size: 1_000_000, ..r }.with_bandwidth().to_json();
        assert!(bw.contains("\"mb_per_sec\":2.0"), "{bw}");
    }
}
