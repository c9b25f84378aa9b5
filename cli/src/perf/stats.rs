//! Latency samples and the figures we report from them.
//!
//! Latency tests record one sample per round trip and report half of it (as perftest does).
//! We report percentiles (p50, p90, p99, p99.9) and the maximum, never means: these machines
//! are shared and a mean is dragged by every scheduling hiccup. The samples live in an
//! [`hdrhistogram`] (see [`Samples`]); [`Run::report`] turns them into a [`Report`].

use std::future::Future;
use std::time::Duration;

use async_doca::Result;
use hdrhistogram::Histogram;

use super::clock::Stamp;

// Re-exported: every test module builds its rows with `stats::{Run, Report}`.
pub use super::report::Report;

/// Runs `step(i)` for `warmup + iters` rounds (`i` counts from 0) and times the last `iters`:
/// one sample per round, divided by `divisor` (2 for half a round trip). Returns the samples
/// and the length of the timed part. The loop every latency test shares; [`timed_async`] is
/// the same for steps that are futures.
///
/// One clock read per round (as perftest's consecutive time stamps): a round's sample runs
/// from the previous round's read to its own, so the timed part is exactly the sum of the
/// samples. The round keeps only the clock's raw difference ([`Recorder`]); converting it and
/// filing it in the histogram wait for the end of a batch.
pub fn timed(
    warmup: u64,
    iters: u64,
    divisor: f64,
    mut step: impl FnMut(u64) -> Result<()>,
) -> Result<(Samples, Duration)> {
    let mut deltas = Recorder::new(divisor, iters);
    let mut last = Stamp::now();
    let mut start = last;
    for i in 0..warmup + iters {
        if i == warmup {
            start = last;
        }
        step(i)?;
        let now = Stamp::now();
        if i >= warmup {
            deltas.push(now.ticks_since(last));
        }
        last = now;
    }
    Ok((deltas.into_samples(), last.since(start)))
}

/// [`timed`] for asynchronous steps.
pub async fn timed_async<F: Future<Output = Result<()>>>(
    warmup: u64,
    iters: u64,
    divisor: f64,
    step: impl FnMut(u64) -> F,
) -> Result<(Samples, Duration)> {
    timed_rounds(warmup, iters, divisor, &mut Steps(step)).await
}

/// One round of a timed asynchronous loop whose state the round needs mutably (lanes, buffers):
/// a closure cannot lend its captures to the future it returns, a method can.
pub trait Round {
    /// Round `i` (counting from 0, warm-up included).
    fn round(&mut self, i: u64) -> impl Future<Output = Result<()>>;
}

/// The closure of [`timed_async`] as a [`Round`].
struct Steps<S>(S);

impl<S: FnMut(u64) -> F, F: Future<Output = Result<()>>> Round for Steps<S> {
    #[inline]
    fn round(&mut self, i: u64) -> impl Future<Output = Result<()>> {
        (self.0)(i)
    }
}

/// [`timed`] for the rounds of `r`: the loop of every asynchronous latency test.
pub async fn timed_rounds(warmup: u64, iters: u64, divisor: f64, r: &mut impl Round) -> Result<(Samples, Duration)> {
    let mut deltas = Recorder::new(divisor, iters);
    let mut last = Stamp::now();
    let mut start = last;
    for i in 0..warmup + iters {
        if i == warmup {
            start = last;
        }
        r.round(i).await?;
        let now = Stamp::now();
        if i >= warmup {
            deltas.push(now.ticks_since(last));
        }
        last = now;
    }
    Ok((deltas.into_samples(), last.since(start)))
}

/// The samples of a timed loop, kept as the clock's raw differences until a batch is full and
/// only then converted to nanoseconds and filed in the histogram. The iteration that takes a
/// sample pays a store, not the conversion and the histogram's update (~130 instructions: on
/// a ping-pong's critical path they delayed the next operation, and in a bandwidth loop they
/// were ~13% of a raw 8 B write's time), as perftest and `ucx_perftest` only store their
/// stamps in their loops. One iteration in [`Recorder::BATCH`] pays the filing of the batch;
/// the memory stays bounded however long the run. Every latency and bandwidth loop of perf
/// records through one.
pub struct Recorder {
    raw: Vec<u64>,
    divisor: f64,
    samples: Samples,
}

impl Recorder {
    /// Samples converted at once, at most.
    pub const BATCH: usize = 1 << 16;

    /// A recorder whose samples are the differences divided by `divisor` (2 for half a round
    /// trip), for about `expected` of them (the buffer is sized for one batch at most).
    pub fn new(divisor: f64, expected: u64) -> Recorder {
        let cap = usize::try_from(expected).unwrap_or(usize::MAX).min(Self::BATCH);
        Recorder { raw: Vec::with_capacity(cap), divisor, samples: Samples::default() }
    }

    /// One sample of `ticks` of the clock's raw units ([`Stamp::ticks_since`]).
    #[inline]
    pub fn push(&mut self, ticks: u64) {
        if self.raw.len() == Self::BATCH {
            self.file();
        }
        self.raw.push(ticks);
    }

    fn file(&mut self) {
        for &t in &self.raw {
            self.samples.push_ns(Stamp::ticks_to_ns(t) / self.divisor);
        }
        self.raw.clear();
    }

    /// Every sample recorded, in the histogram.
    pub fn into_samples(mut self) -> Samples {
        self.file();
        self.samples
    }
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new(1.0, Recorder::BATCH as u64)
    }
}

/// Per-operation latency samples in nanoseconds, kept in an HDR histogram: three
/// significant digits at any magnitude (a 1 µs sample is known to the nanosecond, a 10 ms one
/// to 10 µs), in constant memory however long the run, and every percentile (and the CDF the
/// plots draw) read from the same counts.
#[derive(Clone, Debug)]
pub struct Samples {
    hist: Histogram<u64>,
}

/// An empty set. The histogram sizes itself: no expected count is needed.
impl Default for Samples {
    fn default() -> Samples {
        // 3 significant digits; the range grows on demand (auto-resize), so no sample is
        // ever rejected as too large.
        let hist = Histogram::new(3).expect("3 significant digits is a valid histogram precision");
        Samples { hist }
    }
}

impl Samples {
    /// One sample of `ns` nanoseconds (rounded; negative or NaN counts as 0).
    pub fn push_ns(&mut self, ns: f64) {
        let v = if ns.is_finite() && ns > 0.0 { ns.round() as u64 } else { 0 };
        // `record` grows the histogram's range as needed (auto-resize); it fails only for
        // values beyond what a u64 histogram can grow to (centuries in ns): those saturate
        // rather than vanish. (`saturating_record` alone would clamp to the current range.)
        if self.hist.record(v).is_err() {
            self.hist.saturating_record(v);
        }
    }

    #[cfg(test)]
    fn from_ns(ns: f64) -> Samples {
        let mut s = Samples::default();
        s.push_ns(ns);
        s
    }

    #[cfg(test)]
    pub fn extend_ns(&mut self, ns: impl IntoIterator<Item = f64>) {
        for v in ns {
            self.push_ns(v);
        }
    }

    pub fn len(&self) -> usize {
        self.hist.len() as usize
    }

    /// The `q` quantile (0..=1) in ns: the smallest recorded value (to the histogram's
    /// precision) with at least `q` of the samples at or below it; 0 for no samples.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.value_at_quantile(q) as f64
    }

    /// The largest sample (to the histogram's precision).
    pub fn max(&self) -> f64 {
        self.hist.max() as f64
    }

    /// The mean of the samples at or below the p99 (0 without samples). Where the clock is
    /// coarse every sample, and so every quantile, is a multiple of its step (this VM's TSC
    /// advances by ~26 cycles, 10 ns at a time), while the mean of many samples resolves
    /// finer; leaving out the slowest 1% keeps a rare stall of the shared machine out of it.
    pub fn trimmed_mean(&self) -> f64 {
        let cut = self.hist.value_at_quantile(0.99);
        let (mut sum, mut n) = (0.0, 0u64);
        for v in self.hist.iter_recorded() {
            if v.value_iterated_to() > cut {
                break;
            }
            sum += v.value_iterated_to() as f64 * v.count_at_value() as f64;
            n += v.count_at_value();
        }
        if n == 0 {
            0.0
        } else {
            sum / n as f64
        }
    }

    /// The cumulative distribution: (latency in ns, share of samples at or below it) at
    /// every distinct recorded value, ascending; what the latency plots draw.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let total = self.hist.len() as f64;
        if total == 0.0 {
            return Vec::new();
        }
        let mut seen = 0u64;
        self.hist
            .iter_recorded()
            .map(|v| {
                seen += v.count_at_value();
                (self.hist.highest_equivalent(v.value_iterated_to()) as f64, seen as f64 / total)
            })
            .collect()
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
    pub fn report(&self, samples: Samples, ops: u64, elapsed: Duration) -> Report {
        let secs = elapsed.as_secs_f64();
        Report {
            test: self.test,
            mode: self.mode,
            size: self.size,
            iters: samples.len() as u64,
            procs: self.procs,
            p50_ns: samples.quantile(0.50),
            p90_ns: Some(samples.quantile(0.90)),
            p99_ns: samples.quantile(0.99),
            p999_ns: Some(samples.quantile(0.999)),
            max_ns: Some(samples.max()),
            mean_ns: Some(samples.trimmed_mean()),
            ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
            mb_per_sec: None,
            overlap_pct: None,
            round: None,
            ref_ns: None,
            cdf: samples.cdf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_rank() {
        let mut s = Samples::default();
        s.extend_ns((1..=100).map(f64::from));
        assert_eq!(s.quantile(0.5), 50.0);
        assert_eq!(s.quantile(0.9), 90.0);
        assert_eq!(s.quantile(0.99), 99.0);
        assert_eq!(s.quantile(1.0), 100.0);
        assert_eq!(s.max(), 100.0);
        assert_eq!(Samples::default().quantile(0.5), 0.0);
    }

    #[test]
    fn every_timed_round_is_one_sample_across_batches() {
        let iters = Recorder::BATCH as u64 * 2 + 17;
        let mut n = 0u64;
        let (s, _) = timed(3, iters, 2.0, |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, iters + 3, "warm-up rounds run untimed");
        assert_eq!(s.len() as u64, iters, "one sample per timed round, whatever the batches");
        // The divisor is applied when a batch is filed: 2 000 ticks over 2 are 1 000 of them.
        let mut d = Recorder::new(2.0, 1);
        d.push(2_000);
        let one = d.into_samples();
        assert_eq!(one.len(), 1);
        assert_eq!(one.max(), Samples::from_ns(Stamp::ticks_to_ns(2_000) / 2.0).max());
    }

    #[test]
    fn the_trimmed_mean_leaves_out_the_slowest_percent_and_resolves_below_the_step() {
        let mut s = Samples::default();
        // Samples on a 10 ns grid: 75 of 70 ns, 24 of 80 ns, and one stall of 50 µs.
        s.extend_ns((0..99).map(|i| if i % 4 == 3 { 80.0 } else { 70.0 }).chain([50_000.0]));
        assert_eq!(s.quantile(0.5), 70.0);
        let m = s.trimmed_mean();
        assert!((m - (75.0 * 70.0 + 24.0 * 80.0) / 99.0).abs() < 1e-9, "{m}");
        assert_eq!(Samples::default().trimmed_mean(), 0.0);
    }

    #[test]
    fn large_samples_keep_three_significant_digits() {
        let mut s = Samples::default();
        s.push_ns(10e6);
        s.push_ns(2_000.0 / 2.0);
        assert_eq!(s.quantile(0.0), 1_000.0);
        let max = s.max();
        assert!((max - 1e7).abs() / 1e7 < 1e-3, "{max}");
    }

    #[test]
    fn timed_samples_only_the_timed_rounds() {
        let mut seen = Vec::new();
        let (s, elapsed) = timed(2, 3, 1.0, |i| {
            seen.push(i);
            // The warm-up rounds are slow: neither a sample nor the elapsed time may hold them.
            std::thread::sleep(Duration::from_millis(if i < 2 { 150 } else { 2 }));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert_eq!(s.len(), 3);
        assert!(s.quantile(0.0) >= 2e6 * 0.999, "{}", s.quantile(0.0));
        assert!(s.max() < 150e6, "{}", s.max());
        assert!(elapsed >= Duration::from_millis(6) && elapsed < Duration::from_millis(300), "{elapsed:?}");
    }

    #[test]
    fn cdf_rises_to_one() {
        let mut s = Samples::default();
        s.extend_ns([10.0, 10.0, 20.0, 40.0]);
        assert_eq!(s.cdf(), vec![(10.0, 0.5), (20.0, 0.75), (40.0, 1.0)]);
        assert!(Samples::default().cdf().is_empty());
    }
}
