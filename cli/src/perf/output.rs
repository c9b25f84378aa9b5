//! How `perf` shows its reports: JSON lines (`--json`), or an aligned table followed by the
//! ratios of modes measured side by side in the same run.

use super::report::Report;
use super::rounds::{Rounds, Spread};

/// A figure in ns for the table: no decimals, `-` when the row has none.
fn ns(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
}

/// A figure of a ratio line: its median, and with several rounds its range over them
/// (`fmt` writes one value; `unit` follows the median, `to` separates the range's ends).
fn spread(s: Spread, rounds: usize, fmt: impl Fn(f64) -> String, unit: &str, to: &str) -> String {
    if rounds > 1 {
        format!("{}{unit} [{}{to}{}]", fmt(s.median), fmt(s.min), fmt(s.max))
    } else {
        format!("{}{unit}", fmt(s.median))
    }
}

/// A ratio: `1.25x [1.17–1.25]`.
fn times(s: Spread, rounds: usize) -> String {
    spread(s, rounds, |v| format!("{v:.2}"), "x", "–")
}

/// Prints reports as an aligned table (with several rounds: each figure the median over
/// them), then a ratio line per point measured in a mode and in the one it is compared
/// with, each ratio taken within a round (see `rounds.rs`).
pub fn print_table(reports: &[Report], rounds: &Rounds) {
    if rounds.count() > 1 {
        println!("medians over {} rounds (each round measured every row below):\n", rounds.count());
    }
    println!(
        "{:<20} {:<12} {:>8} {:>9} {:>5} {:>9} {:>9} {:>9} {:>9} {:>10} {:>13} {:>9}",
        "test", "mode", "size", "iters", "procs", "p50 (ns)", "p90", "p99", "p99.9", "max", "ops/s", "MB/s"
    );
    for r in reports {
        let mb = match (r.mb_per_sec, r.overlap_pct) {
            (Some(v), _) => format!("{v:.0}"),
            (None, Some(o)) => format!("{o:.0}% ovl"),
            (None, None) => String::new(),
        };
        println!(
            "{:<20} {:<12} {:>8} {:>9} {:>5} {:>9.0} {:>9} {:>9.0} {:>9} {:>10} {:>13.0} {:>9}",
            r.test,
            r.mode,
            r.size,
            r.iters,
            r.procs,
            r.p50_ns,
            ns(r.p90_ns),
            r.p99_ns,
            ns(r.p999_ns),
            ns(r.max_ns),
            r.ops_per_sec,
            mb
        );
    }
    let each = if rounds.count() > 1 { ", per round: median [range]" } else { "" };
    let offload = rounds.ratios("offload", "host");
    if !offload.is_empty() {
        println!("\noffload / host (the workers run the collective / the hosts do), side by side{each}:");
    }
    for r in &offload {
        println!(
            "  {:<20} size {:>8}  procs {}  p50 {}  p99 {}",
            r.test,
            r.size,
            r.procs,
            times(r.p50, r.rounds),
            times(r.p99, r.rounds)
        );
    }
    // Each mode against the one it is built on, measured side by side in this run; the UCX
    // anchor (`perf --anchor ucx`) against both of ours.
    for (mode, base) in [
        ("async", "raw"),
        ("lanes", "raw"),
        ("tokio", "async"),
        ("tokio-handle", "async"),
        ("traced", "async"),
        ("raw", "ucx"),
        ("async", "ucx"),
        ("async", "tcp"),
    ] {
        let ratios = rounds.ratios(mode, base);
        if !ratios.is_empty() {
            println!(
                "\n{mode} / {base}, measured side by side{each} (p50 {mode} − {base} in ns; mean: of the fastest 99%):"
            );
        }
        for r in &ratios {
            if base == "ucx" && r.test.ends_with("_bw") {
                // `ucx_perftest`'s bandwidth tests report the time per message (the inverse of
                // the rate), ours each operation's completion latency with the window in
                // flight: only the rates compare.
                println!(
                    "  {:<20} size {:>8}  procs {}  ops/s {}  (latencies not comparable: UCX reports time per message)",
                    r.test,
                    r.size,
                    r.procs,
                    times(r.ops_per_sec, r.rounds)
                );
                continue;
            }
            // Signed, so the range's ends are set apart by an ellipsis: `+20 ns [-5…+30]`.
            let mut diff = spread(r.p50_diff_ns, r.rounds, |v| format!("{v:+.0}"), " ns", "…");
            if let Some(m) = r.mean_diff_ns {
                diff += &format!(", mean {}", spread(m, r.rounds, |v| format!("{v:+.1}"), " ns", "…"));
            }
            println!(
                "  {:<20} size {:>8}  procs {}  p50 {} ({diff})  p99 {}  ops/s {}",
                r.test,
                r.size,
                r.procs,
                times(r.p50, r.rounds),
                times(r.p99, r.rounds),
                times(r.ops_per_sec, r.rounds)
            );
        }
    }
}

/// Prints one report as a JSON line (`--json`), as soon as it is measured.
pub fn print_json(report: &Report) {
    println!("{}", report.to_json());
}
