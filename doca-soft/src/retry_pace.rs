//! [`RetryPace`]: how often a busy-polling context repeats a socket call that found nothing:
//! a listener's `accept(2)` (RDMA connection management, Comch servers: the default
//! interval, [`ACCEPT_INTERVAL`]), a Comch client's `connect(2)` to a server not there yet
//! (`comch::CONNECT_RETRY`).
//!
//! A failing `accept(2)` is not free: the kernel allocates and frees a socket for it. A
//! listener progressed in a busy-polling loop made one such call per progress (for a Comch
//! server, about three per message of a ping-pong). After an `accept` that found nothing, the
//! listener therefore waits [`ACCEPT_INTERVAL`] before trying again, unless the check made
//! when the PE is armed (`has_work`) saw it readable. A burst is accepted back to back (the
//! wait starts only after a fruitless call); a new client of a busy-polling listener waits at
//! most the interval longer, less than a connection handshake takes.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long a listener that found no pending connection waits before `accept(2)` again.
pub(crate) const ACCEPT_INTERVAL: Duration = Duration::from_micros(50);

/// When a context may make its socket call again (see the module documentation).
pub(crate) struct RetryPace {
    /// Not before this instant (None: at the next progress).
    not_before: Cell<Option<Instant>>,
    /// The wait after a call that found nothing.
    interval: Duration,
}

impl Default for RetryPace {
    /// The listeners' pace: [`ACCEPT_INTERVAL`].
    fn default() -> RetryPace {
        RetryPace::every(ACCEPT_INTERVAL)
    }
}

impl RetryPace {
    /// A pace that waits `interval` after a call that found nothing.
    pub(crate) fn every(interval: Duration) -> RetryPace {
        RetryPace { not_before: Cell::new(None), interval }
    }

    /// Whether a progress at `now` should make the call.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.not_before.get().is_none_or(|t| now >= t)
    }

    /// The calls of a progress at `now` are done; `found` says whether they found anything.
    pub(crate) fn tried(&self, now: Instant, found: bool) {
        self.not_before.set(if found { None } else { Some(now + self.interval) });
    }

    /// The listener is readable: the next progress accepts, interval or not.
    pub(crate) fn readable(&self) {
        self.not_before.set(None);
    }
}
