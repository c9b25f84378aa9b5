//! `perf --plot DIR`: SVG pictures of a run, drawn with `plotters`' SVG backend (no font
//! files or system libraries: text is written as SVG `<text>` and laid out with plotters'
//! built-in size estimate).
//!
//! * `lat_<test>_<size>B_<procs>p.svg`: the latency CDF of one test at one size and process
//!   count, one curve per mode (raw, async, tokio, ...), on a logarithmic latency axis, so the
//!   medians and the tails of the modes measured side by side can be compared at a glance.
//! * `bw_<test>_<procs>p.svg`: MB/s by payload size of a bandwidth test, one line per mode
//!   (and `memcpy_bw` as a reference when it ran).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use async_doca::{Error, ErrorKind, Result};
use plotters::prelude::*;

use super::report::Report;

const SIZE: (u32, u32) = (900, 560);
/// Points drawn per CDF curve at most: enough for a smooth curve, small files.
const MAX_POINTS: usize = 400;

/// Writes the pictures of `reports` into `dir` (created if needed); returns their paths.
pub fn write(dir: &Path, reports: &[Report]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::os(e, &format!("perf --plot: create {}", dir.display())))?;
    let mut written = Vec::new();
    let points: BTreeSet<(&str, usize, u32)> =
        reports.iter().filter(|r| !r.cdf.is_empty()).map(|r| (r.test, r.size, r.procs)).collect();
    for (test, size, procs) in points {
        let rows: Vec<&Report> =
            reports.iter().filter(|r| (r.test, r.size, r.procs) == (test, size, procs) && !r.cdf.is_empty()).collect();
        let path = dir.join(format!("lat_{test}_{size}B_{procs}p.svg"));
        latency_cdf(&path, &format!("{test}, {size} B, {procs} process(es): latency CDF"), &rows)
            .map_err(|e| draw_err(&path, e))?;
        written.push(path);
    }
    let bw: BTreeSet<(&str, u32)> =
        reports.iter().filter(|r| r.mb_per_sec.is_some() && r.test != "memcpy_bw").map(|r| (r.test, r.procs)).collect();
    for (test, procs) in bw {
        let path = dir.join(format!("bw_{test}_{procs}p.svg"));
        let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for r in reports.iter().filter(|r| r.test == test && r.procs == procs) {
            let Some(mb) = r.mb_per_sec else { continue };
            match lines.iter_mut().find(|(m, _)| m == r.mode) {
                Some((_, pts)) => pts.push((r.size.max(1) as f64, mb)),
                None => lines.push((r.mode.to_owned(), vec![(r.size.max(1) as f64, mb)])),
            }
        }
        let memcpy: Vec<(f64, f64)> = reports
            .iter()
            .filter(|r| r.test == "memcpy_bw")
            .filter_map(|r| Some((r.size.max(1) as f64, r.mb_per_sec?)))
            .collect();
        if !memcpy.is_empty() {
            lines.push(("memcpy".to_owned(), memcpy));
        }
        for (_, pts) in &mut lines {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        bandwidth(&path, &format!("{test}, {procs} process(es): bandwidth by size"), &lines)
            .map_err(|e| draw_err(&path, e))?;
        written.push(path);
    }
    Ok(written)
}

fn draw_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Other, format!("perf --plot: drawing {}: {e}", path.display()))
}

/// The colour of a mode: the same in every picture.
fn colour(mode: &str) -> RGBColor {
    match mode {
        "raw" => RGBColor(31, 119, 180),
        "async" => RGBColor(214, 39, 40),
        "tokio" => RGBColor(44, 160, 44),
        "tokio-handle" => RGBColor(148, 103, 189),
        "ucx" => RGBColor(0, 0, 0),
        "offload" => RGBColor(255, 127, 14),
        "host" => RGBColor(23, 190, 207),
        _ => RGBColor(127, 127, 127),
    }
}

/// Every `n`-th point of a long curve, keeping the last one (the maximum).
fn thin(cdf: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let step = cdf.len().div_ceil(MAX_POINTS).max(1);
    let mut pts: Vec<(f64, f64)> = cdf.iter().step_by(step).map(|&(x, y)| (x.max(1.0), y)).collect();
    if let Some(&(x, y)) = cdf.last() {
        if pts.last() != Some(&(x.max(1.0), y)) {
            pts.push((x.max(1.0), y));
        }
    }
    pts
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn latency_cdf(path: &Path, title: &str, rows: &[&Report]) -> DrawResult {
    let curves: Vec<(&str, Vec<(f64, f64)>)> = rows.iter().map(|r| (r.mode, thin(&r.cdf))).collect();
    let lo = curves.iter().flat_map(|(_, c)| c.first()).map(|p| p.0).fold(f64::INFINITY, f64::min);
    let hi = curves.iter().flat_map(|(_, c)| c.last()).map(|p| p.0).fold(1.0, f64::max);
    let (lo, hi) = ((lo.min(hi) * 0.9).max(1.0), hi * 1.1);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1.0f64)?;
    chart.configure_mesh().x_desc("latency (ns, log scale)").y_desc("share of operations at or below").draw()?;
    for (mode, pts) in curves {
        let c = colour(mode);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(mode)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn bandwidth(path: &Path, title: &str, lines: &[(String, Vec<(f64, f64)>)]) -> DrawResult {
    let all = || lines.iter().flat_map(|(_, p)| p.iter());
    let (xlo, xhi) = (all().map(|p| p.0).fold(f64::INFINITY, f64::min), all().map(|p| p.0).fold(1.0, f64::max));
    let yhi = all().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let (xlo, xhi) = ((xlo.min(xhi) / 1.5).max(1.0), xhi * 1.5);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((xlo..xhi).log_scale(), 0f64..yhi)?;
    chart.configure_mesh().x_desc("payload size (bytes, log scale)").y_desc("MB/s (10^6 bytes)").draw()?;
    for (mode, pts) in lines {
        let c = colour(mode);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?
            .label(mode.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::stats::{Run, Samples};
    use super::*;
    use std::time::Duration;

    fn row(test: &'static str, mode: &'static str, size: usize, ns: &[f64]) -> Report {
        let mut s = Samples::default();
        s.extend_ns(ns.iter().copied());
        Run { test, mode, size, procs: 1 }.report(s, ns.len() as u64, Duration::from_millis(1)).with_bandwidth()
    }

    #[test]
    fn writes_a_cdf_per_point_and_a_bandwidth_picture_per_test() {
        let dir = std::env::temp_dir().join(format!("async-doca-plot-unit-{}", std::process::id()));
        let reports = [
            row("write_bw", "raw", 8, &[100.0, 200.0, 300.0]),
            row("write_bw", "async", 8, &[150.0, 250.0, 900.0]),
            row("write_bw", "raw", 4096, &[400.0, 500.0]),
            row("write_bw", "async", 4096, &[450.0, 700.0]),
        ];
        let files = write(&dir, &reports).unwrap();
        let names: Vec<String> = files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["lat_write_bw_8B_1p.svg", "lat_write_bw_4096B_1p.svg", "bw_write_bw_1p.svg"]);
        for f in &files {
            let svg = std::fs::read_to_string(f).unwrap();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{}", f.display());
            assert!(svg.contains("async") && svg.contains("raw"), "legend missing in {}", f.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
