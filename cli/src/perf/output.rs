//! How `perf` shows its reports: JSON lines (`--json`), or an aligned table followed by the
//! ratios of modes measured side by side in the same run.

use super::report::Report;

/// A figure in ns for the table: no decimals, `-` when the row has none.
fn ns(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
}

/// Prints reports as an aligned table, and a ratio line per test that ran in several modes.
pub fn print_table(reports: &[Report]) {
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
    let mut printed_header = false;
    for r in reports.iter().filter(|r| r.mode == "offload") {
        if let Some(host) = reports.iter().find(|b| b.mode == "host" && b.same_point(r)) {
            if !printed_header {
                println!("\noffload / host (the workers run the collective / the hosts do), side by side in this run:");
                printed_header = true;
            }
            println!(
                "  {:<20} size {:>8}  procs {}  p50 {:.2}x  p99 {:.2}x",
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
        ("lanes", "raw"),
        ("tokio", "async"),
        ("tokio-handle", "async"),
        ("traced", "async"),
        ("raw", "ucx"),
        ("async", "ucx"),
        ("async", "tcp"),
    ] {
        let mut printed_header = false;
        for r in reports.iter().filter(|r| r.mode == mode) {
            if let Some(b) = reports.iter().find(|b| b.mode == base && b.same_point(r)) {
                if !printed_header {
                    println!("\n{mode} / {base}, measured side by side in this run (p50 {mode} − {base} in ns):");
                    printed_header = true;
                }
                println!(
                    "  {:<20} size {:>8}  procs {}  p50 {:.2}x ({:+.0} ns)  p99 {:.2}x  ops/s {:.2}x",
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

/// Prints one report as a JSON line (`--json`), as soon as it is measured.
pub fn print_json(report: &Report) {
    println!("{}", report.to_json());
}
