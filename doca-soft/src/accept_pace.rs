//! [`AcceptPace`]: how often a busy-polling listener calls `accept(2)`; one rule for every
//! listening context (RDMA connection management, Comch servers).
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

/// When a listener may call `accept(2)` again (see the module documentation).
#[derive(Default)]
pub(crate) struct AcceptPace {
    /// Not before this instant (None: at the next progress).
    not_before: Cell<Option<Instant>>,
}

impl AcceptPace {
    /// Whether a progress at `now` should call `accept(2)`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.not_before.get().is_none_or(|t| now >= t)
    }

    /// The accepts of a progress at `now` are done; `found` says whether any connection came.
    pub(crate) fn tried(&self, now: Instant, found: bool) {
        self.not_before.set(if found { None } else { Some(now + ACCEPT_INTERVAL) });
    }

    /// The listener is readable: the next progress accepts, interval or not.
    pub(crate) fn readable(&self) {
        self.not_before.set(None);
    }
}
