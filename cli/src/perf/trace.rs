//! What the library's `tracing` costs, side by side in one run: `write_lat` and `send_lat`
//! again (procs 1, async mode), now with every operation's span built and recorded by the
//! command line's subscriber (`async_doca::trace=trace` added to its filter for the run;
//! nothing is printed, the spans are only created, entered, given their fields and closed).
//! Their rows say mode `traced`, and the table's `traced / async` line is the cost of a
//! recorded span per operation. The `async` rows themselves run with the feature on and the
//! spans filtered out, which is the case a program without a trace-level subscriber is in;
//! docs/tracing.md compares them with a build without the feature.

use async_doca::{Error, ErrorKind, Result};

use super::{rdma, Mode, Params, Report};

/// The test's row (`write_lat` or `send_lat`) with op spans recorded.
pub fn run(test: rdma::Test, p: &Params) -> Result<Report> {
    if p.mode != Mode::Async {
        return Err(p.mode.unsupported(test.name()));
    }
    let r = crate::logging::with_directive("async_doca::trace=trace", || rdma::run(test, p))
        .map_err(|e| Error::new(ErrorKind::Other, format!("perf: tracing filter: {e}")))?;
    Ok(Report { mode: "traced", ..r? })
}
