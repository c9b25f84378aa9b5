//! What one measured test reports: a row of the table, a JSON object, a line of a plot.

use serde::Serialize;

/// One measured test. Serialized (with `serde_json`) as one JSON object per line by
/// `perf --json`: the keys are the field names below; the optional ones are left out when a
/// test has no such figure.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub test: &'static str,
    pub mode: &'static str,
    /// Payload size in bytes (8 for counter operations, 0 for spawn).
    pub size: usize,
    pub iters: u64,
    /// 1: both sides in one process (two executors or threads); 2: two processes.
    pub procs: u32,
    pub p50_ns: f64,
    /// p90, p99.9 and the maximum come from our own histogram; a reference row (`ucx`)
    /// reports only p50 and p99 and leaves them out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90_ns: Option<f64>,
    pub p99_ns: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ns: Option<f64>,
    /// The mean of the fastest 99% of the samples: resolves what a quantile cannot where
    /// the clock is coarse (see `Samples::trimmed_mean`); not for reference rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_ns: Option<f64>,
    /// Operations completed per second over the whole timed run.
    pub ops_per_sec: f64,
    /// Payload megabytes (10^6 bytes) per second, for bandwidth tests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb_per_sec: Option<f64>,
    /// Share of a compute loop done while a collective was in flight, for `coll_overlap`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap_pct: Option<f64>,
    /// Which round of `perf --rounds N` measured it (1-based); left out with one round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// The machine reference of the round that measured it: the p50 round trip, in ns, of a
    /// bare atomic ping-pong between the tests' two CPUs (`machine.rs`), to tell a round
    /// taken in the machine's slow state from a regression. Left out with `--no-ref`. With
    /// several rounds, the table's row carries the median over them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ref_ns: Option<f64>,
    /// The latency CDF, (ns, share at or below), for `--plot`; not part of the JSON.
    #[serde(skip)]
    pub cdf: Vec<(f64, f64)>,
}

impl Report {
    /// One JSON object on one line.
    pub fn to_json(&self) -> String {
        // A struct of numbers and strings always serializes.
        serde_json::to_string(self).expect("a Report serializes to JSON")
    }

    /// Adds the bandwidth of `size`-byte operations at the measured rate.
    pub fn with_bandwidth(mut self) -> Report {
        self.mb_per_sec = Some(self.ops_per_sec * self.size as f64 / 1e6);
        self
    }

    /// Whether `other` measured the same thing (test, size, process count) in another mode.
    pub fn same_point(&self, other: &Report) -> bool {
        self.test == other.test && self.size == other.size && self.procs == other.procs
    }
}

#[cfg(test)]
mod tests {
    use super::super::stats::{Run, Samples};
    use super::*;
    use std::time::Duration;

    #[test]
    fn json_has_the_documented_keys() {
        let mut s = Samples::default();
        s.extend_ns([10.0, 20.0]);
        let r = Run { test: "t", mode: "raw", size: 8, procs: 2 }.report(s, 4, Duration::from_secs(2));
        let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        for key in
            ["test", "mode", "size", "iters", "procs", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns", "ops_per_sec"]
        {
            assert!(j.get(key).is_some(), "{key} missing in {j}");
        }
        assert_eq!(j["ops_per_sec"], 2.0);
        assert_eq!(j["max_ns"], 20.0);
        assert!(j.get("mb_per_sec").is_none() && j.get("cdf").is_none(), "{j}");
        let bw: serde_json::Value =
            serde_json::from_str(&Report { size: 1_000_000, ..r }.with_bandwidth().to_json()).unwrap();
        assert_eq!(bw["mb_per_sec"], 2.0);
    }
}
