//! Deadlines of long timers from the kernel's coarse monotonic clock.
//!
//! Arming a timer needs "now". `Instant::now()` reads `CLOCK_MONOTONIC` (~22 ns through the
//! vDSO on the machines we measure, as much as the rest of an operation's wait), while
//! `CLOCK_MONOTONIC_COARSE` returns the same clock as of the last scheduler tick (~5 ns, no
//! TSC read). For a timer of seconds a tick (1–10 ms) does not matter, as long as the
//! timer never ends early. On hardware every operation is still pending at its first poll
//! (a completion comes microseconds after the submit), so every
//! [`timeout`](super::time::timeout) around an operation arms its timer: this is where that
//! cost is paid.
//!
//! **The bound.** Both clocks are one timeline: the coarse one is the precise one truncated
//! to its last tick, so it lags by `[0, res)` (`res` from `clock_getres`). The anchor reads
//! the coarse clock, then `Instant::now()`; a later estimate of now is the anchor's instant
//! plus the coarse time since. That estimate lies within one `res` of the true time (plus
//! the anchor's two reads apart), so a deadline of estimate + `d` + `res` is never before
//! `Instant::now() + d` at the call, and at most two ticks (and those few ns) after it.
//! [`deadline_after`] takes this path only for `d` of at least [`TICKS_PER_LONG`] ticks,
//! so a timer ends at most 2% late; shorter ones read the precise clock.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A duration of at least this many coarse ticks is long enough to take its start from the
/// coarse clock: two ticks late at most is then 2% of it (400 ms with the usual 4 ms tick).
const TICKS_PER_LONG: u32 = 100;

/// The pair of readings coarse estimates are made from, and the coarse clock's resolution.
struct Anchor {
    coarse: Duration,
    fine: Instant,
    res: Duration,
}

/// Made at the first long deadline of the process; `None` when the coarse clock is missing
/// or too coarse to help (then every deadline reads the precise clock).
static ANCHOR: OnceLock<Option<Anchor>> = OnceLock::new();

fn anchor() -> Option<&'static Anchor> {
    ANCHOR
        .get_or_init(|| {
            let res = coarse(libc::clock_getres)?;
            if res.is_zero() || res > Duration::from_millis(50) {
                return None;
            }
            // The coarse reading first: the precise one, after it, is then no earlier than
            // the true time of the coarse one (see the module docs).
            let coarse = coarse(libc::clock_gettime)?;
            Some(Anchor { coarse, fine: Instant::now(), res })
        })
        .as_ref()
}

/// `call` (`clock_gettime` or `clock_getres`) on `CLOCK_MONOTONIC_COARSE`, as a duration.
#[inline(always)]
fn coarse(call: unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int) -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: both calls write only the timespec, through a valid out-pointer.
    if unsafe { call(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// An instant `d` from now, for a timer: never earlier than `Instant::now() + d` read at this
/// call, and for a long `d` (at least [`TICKS_PER_LONG`] coarse ticks) at most two ticks
/// later, taken from the coarse clock (see the module docs). `None` when `Instant + d`
/// overflows.
#[inline]
pub(crate) fn deadline_after(d: Duration) -> Option<Instant> {
    if let Some(a) = anchor() {
        if d >= a.res * TICKS_PER_LONG {
            if let Some(c) = coarse(libc::clock_gettime) {
                // The coarse clock never goes back, so `c` is at least the anchor's reading.
                let from_anchor = c.saturating_sub(a.coarse).checked_add(a.res)?.checked_add(d)?;
                return a.fine.checked_add(from_anchor);
            }
        }
    }
    Instant::now().checked_add(d)
}

/// The coarse clock's resolution, when long deadlines use it.
#[cfg(all(test, not(loom)))]
pub(crate) fn resolution() -> Option<Duration> {
    anchor().map(|a| a.res)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The bound of the module docs, checked against the precise clock around each call.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "calls clock_getres and clock_gettime on CLOCK_MONOTONIC_COARSE, which Miri does not run"
    )]
    fn a_long_deadline_is_never_early_and_at_most_two_ticks_late() {
        let Some(res) = resolution() else {
            eprintln!("no usable CLOCK_MONOTONIC_COARSE here: every deadline reads the precise clock");
            return;
        };
        let d = res * TICKS_PER_LONG;
        let start = Instant::now();
        let mut calls = 0u32;
        // Long enough to cross several ticks, bounded in calls and time.
        while calls < 2_000_000 && start.elapsed() < res * 5 {
            let before = Instant::now();
            let deadline = deadline_after(d).expect("no overflow");
            let after = Instant::now();
            assert!(deadline >= before + d, "early by {:?}", before + d - deadline);
            assert!(deadline <= after + d + 2 * res + Duration::from_millis(1), "late by {:?}", deadline - (after + d));
            calls += 1;
        }
        assert!(calls > 100, "only {calls} calls in five ticks");
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "calls clock_getres and clock_gettime on CLOCK_MONOTONIC_COARSE, which Miri does not run"
    )]
    fn a_short_deadline_reads_the_precise_clock() {
        let before = Instant::now();
        let deadline = deadline_after(Duration::from_micros(10)).unwrap();
        let after = Instant::now();
        assert!(deadline >= before + Duration::from_micros(10) && deadline <= after + Duration::from_micros(10));
        assert_eq!(deadline_after(Duration::MAX), None);
    }
}
