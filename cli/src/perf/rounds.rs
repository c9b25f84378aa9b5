//! `perf --rounds N`: the whole plan measured N times, one round after another, and each
//! point summarised by medians over the rounds.
//!
//! Why rounds rather than more iterations: on a shared machine the noise is not spread over
//! operations but over stretches of time (another job takes a CPU for a second, the host
//! moves a virtual CPU). One long run of a mode followed by one long run of another can
//! land in a good minute and a bad one, and their ratio then measures the machine. Short
//! rounds that each run every mode, with the median of the per-round ratios, compare the
//! modes under the same conditions round by round; the range over the rounds shows how far
//! one run could be trusted. With one round (the default) every figure is that round's.

use super::report::Report;

/// The reports of every round, each round in plan order.
#[derive(Debug, Default)]
pub struct Rounds(Vec<Vec<Report>>);

/// A figure over the rounds: its median and its range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// One mode against its base at one point (test, size, process count), over the rounds
/// that measured both.
#[derive(Clone, Debug, PartialEq)]
pub struct Ratio {
    pub test: &'static str,
    pub size: usize,
    pub procs: u32,
    /// How many rounds measured both modes at this point.
    pub rounds: usize,
    /// p50 of the mode / p50 of the base.
    pub p50: Spread,
    /// p50 of the mode − p50 of the base, in ns.
    pub p50_diff_ns: Spread,
    /// The same for the trimmed means (`Report::mean_ns`), when both rows have one: finer
    /// than the p50's difference where the clock is coarse.
    pub mean_diff_ns: Option<Spread>,
    pub p99: Spread,
    pub ops_per_sec: Spread,
}

impl Spread {
    /// The median and range of `values`; `None` when there are none. An even count takes
    /// the mean of the two middle values.
    pub fn of(mut values: Vec<f64>) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 };
        Some(Spread { median, min: values[0], max: values[n - 1] })
    }
}

impl Rounds {
    /// Starts the next round; the reports pushed from now on belong to it.
    pub fn begin(&mut self) {
        self.0.push(Vec::new());
    }

    /// A report of the current round.
    pub fn push(&mut self, report: Report) {
        if self.0.is_empty() {
            self.begin();
        }
        self.0.last_mut().expect("a round was begun").push(report);
    }

    /// The reports of the current round so far.
    pub fn current(&self) -> &[Report] {
        self.0.last().map_or(&[], Vec::as_slice)
    }

    pub fn count(&self) -> usize {
        self.0.len()
    }

    /// One report per point and mode, in the order of the first round: every figure the
    /// median over the rounds that measured it, and the latency CDF of the round whose p50
    /// is nearest that median (a real curve, not a blend of several). With one round, its
    /// reports as they are.
    pub fn medians(&self) -> Vec<Report> {
        let Some(first) = self.0.first() else { return Vec::new() };
        if self.0.len() == 1 {
            return first.clone();
        }
        first
            .iter()
            .map(|r| {
                let all: Vec<&Report> =
                    self.0.iter().flatten().filter(|o| o.mode == r.mode && o.same_point(r)).collect();
                let med = |f: &dyn Fn(&Report) -> f64| Spread::of(all.iter().map(|r| f(r)).collect()).map(|s| s.median);
                let opt = |f: &dyn Fn(&Report) -> Option<f64>| {
                    let v: Vec<f64> = all.iter().filter_map(|r| f(r)).collect();
                    Spread::of(v).map(|s| s.median)
                };
                let p50 = med(&|r| r.p50_ns).unwrap_or(r.p50_ns);
                let nearest = all
                    .iter()
                    .min_by(|a, b| (a.p50_ns - p50).abs().total_cmp(&(b.p50_ns - p50).abs()))
                    .map_or(r, |r| *r);
                Report {
                    p50_ns: p50,
                    p90_ns: opt(&|r| r.p90_ns),
                    p99_ns: med(&|r| r.p99_ns).unwrap_or(r.p99_ns),
                    p999_ns: opt(&|r| r.p999_ns),
                    max_ns: opt(&|r| r.max_ns),
                    mean_ns: opt(&|r| r.mean_ns),
                    ops_per_sec: med(&|r| r.ops_per_sec).unwrap_or(r.ops_per_sec),
                    mb_per_sec: opt(&|r| r.mb_per_sec),
                    overlap_pct: opt(&|r| r.overlap_pct),
                    ref_ns: opt(&|r| r.ref_ns),
                    cdf: nearest.cdf.clone(),
                    ..r.clone()
                }
            })
            .collect()
    }

    /// `mode` against `base` at every point both measured in the same round, in the order
    /// of the first round that has the point: each ratio taken within a round, then their
    /// median and range over the rounds.
    pub fn ratios(&self, mode: &str, base: &str) -> Vec<Ratio> {
        let mut out: Vec<Ratio> = Vec::new();
        let mut pairs: Vec<(&Report, Vec<(&Report, &Report)>)> = Vec::new();
        for round in &self.0 {
            for r in round.iter().filter(|r| r.mode == mode) {
                let Some(b) = round.iter().find(|b| b.mode == base && b.same_point(r)) else { continue };
                match pairs.iter_mut().find(|(p, _)| p.same_point(r)) {
                    Some((_, v)) => v.push((r, b)),
                    None => pairs.push((r, vec![(r, b)])),
                }
            }
        }
        for (point, v) in pairs {
            let spread = |f: &dyn Fn(&Report, &Report) -> f64| {
                Spread::of(v.iter().map(|(r, b)| f(r, b)).collect()).expect("a point has a pair")
            };
            out.push(Ratio {
                test: point.test,
                size: point.size,
                procs: point.procs,
                rounds: v.len(),
                p50: spread(&|r, b| r.p50_ns / b.p50_ns),
                p50_diff_ns: spread(&|r, b| r.p50_ns - b.p50_ns),
                mean_diff_ns: Spread::of(v.iter().filter_map(|(r, b)| Some(r.mean_ns? - b.mean_ns?)).collect()),
                p99: spread(&|r, b| r.p99_ns / b.p99_ns),
                ops_per_sec: spread(&|r, b| r.ops_per_sec / b.ops_per_sec),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::stats::{Run, Samples};
    use super::*;
    use std::time::Duration;

    fn report(mode: &'static str, p50: f64, ops: u64) -> Report {
        let mut s = Samples::default();
        s.extend_ns([p50, p50, p50 * 2.0]);
        Run { test: "write_lat", mode, size: 8, procs: 2 }.report(s, ops, Duration::from_secs(1))
    }

    #[test]
    fn a_spread_is_the_median_and_the_range() {
        assert_eq!(Spread::of(vec![]), None);
        assert_eq!(Spread::of(vec![3.0, 1.0, 2.0]), Some(Spread { median: 2.0, min: 1.0, max: 3.0 }));
        assert_eq!(Spread::of(vec![4.0, 1.0, 2.0, 3.0]), Some(Spread { median: 2.5, min: 1.0, max: 4.0 }));
    }

    #[test]
    fn ratios_are_taken_within_each_round_then_summarised() {
        let mut rounds = Rounds::default();
        // Round 1 is slow for both modes, round 2 fast for both: the ratio is 2 in each
        // round, while the ratio of the medians (150 / 300 against 300 / 600) would be too,
        // but a ratio across rounds (async of round 2 / raw of round 1) would be 1.
        for (raw, asy) in [(200.0, 400.0), (100.0, 200.0), (150.0, 300.0)] {
            rounds.begin();
            rounds.push(report("raw", raw, 1000));
            rounds.push(report("async", asy, 500));
        }
        let r = rounds.ratios("async", "raw");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].rounds, 3);
        assert_eq!(r[0].p50, Spread { median: 2.0, min: 2.0, max: 2.0 });
        assert_eq!(r[0].p50_diff_ns, Spread { median: 150.0, min: 100.0, max: 200.0 });
        assert_eq!(r[0].ops_per_sec.median, 0.5);
        // Each row's samples are p50, p50 and 2 × p50, none above the p99 (the largest of
        // three): the trimmed mean is 4/3 of the p50, and its difference likewise.
        let m = r[0].mean_diff_ns.expect("both modes report a mean");
        for (got, want) in [(m.median, 200.0), (m.min, 400.0 / 3.0), (m.max, 800.0 / 3.0)] {
            assert!((got - want).abs() < 0.01, "mean difference {got}, expected {want}");
        }
        assert!(rounds.ratios("lanes", "raw").is_empty());
    }

    #[test]
    fn a_point_missing_from_a_round_counts_only_the_rounds_that_have_it() {
        let mut rounds = Rounds::default();
        rounds.begin();
        rounds.push(report("raw", 100.0, 1000));
        rounds.push(report("async", 110.0, 900));
        rounds.begin();
        rounds.push(report("raw", 100.0, 1000));
        let r = rounds.ratios("async", "raw");
        assert_eq!(r[0].rounds, 1);
        assert!((r[0].p50.median - 1.1).abs() < 1e-9);
    }

    #[test]
    fn medians_take_each_figure_over_the_rounds_and_the_nearest_rounds_cdf() {
        let mut rounds = Rounds::default();
        for p50 in [100.0, 300.0, 200.0] {
            rounds.begin();
            rounds.push(report("raw", p50, p50 as u64));
        }
        let m = rounds.medians();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].p50_ns, 200.0);
        assert_eq!(m[0].ops_per_sec, 200.0);
        assert_eq!(m[0].cdf, rounds.0[2][0].cdf, "the CDF of the round whose p50 is the median");
        let mut one = Rounds::default();
        one.push(report("raw", 100.0, 10));
        assert_eq!(one.medians()[0].p50_ns, 100.0);
    }
}
