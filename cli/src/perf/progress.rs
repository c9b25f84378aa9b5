//! The progress line: which run of how many is measuring now, on stderr when stderr is a
//! terminal (an `indicatif` bar), nothing at all otherwise (a pipe, a log file, CI), so the
//! output of a scripted run is only what it asked for.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A line for `total` runs: drawn on a terminal, hidden otherwise.
    pub fn new(total: usize) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: ProgressBar::hidden() };
        }
        let bar = ProgressBar::new(total as u64);
        // The template is a constant known to be valid; fall back to the default look if not.
        if let Ok(style) = ProgressStyle::with_template("{prefix:>5} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix("perf");
        Progress { bar }
    }

    /// The run that starts now.
    pub fn start(&self, what: String) {
        self.bar.set_message(what);
    }

    /// The run finished.
    pub fn done(&self) {
        self.bar.inc(1);
    }

    /// Runs `f` (which prints a line) with the progress line hidden, so the two do not mix.
    pub fn suspend(&self, f: impl FnOnce()) {
        self.bar.suspend(f);
    }

    /// Erases the line, before the table is printed.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
