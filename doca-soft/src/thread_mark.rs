//! [`ThreadMark`]: which thread last drove an object, for objects whose parts other threads
//! may use while the rest stays with one thread.
//!
//! DOCA lets a program create a Comch consumer or producer per thread, each on its own PE,
//! over one connection that another thread progresses. doca-soft's connections keep their
//! socket and send queue with the thread that progresses their server or client; a consumer
//! announcing or withdrawing itself sends directly only when it runs on that thread, and
//! otherwise leaves its record for that thread's next progress. The endpoint marks the thread
//! that progresses it, and its connections share the mark.
//!
//! The mark is the address of a thread-local: unique among live threads, read and written
//! with relaxed atomics so that a look from another thread is itself no data race. A program
//! that hands its server or client to another thread moves the mark at that thread's first
//! progress; until then the thread that handed it over still counts as its own, so it must
//! not send from its consumers meanwhile (DOCA's hand-over is a quiet point anyway).

use std::sync::atomic::{AtomicUsize, Ordering};

/// The calling thread's mark: the address of one of its thread-locals (non-zero, unique among
/// the threads alive now).
#[inline]
pub(crate) fn this_thread() -> usize {
    thread_local! {
        static MARK: u8 = const { 0 };
    }
    MARK.with(|m| std::ptr::from_ref(m) as usize)
}

/// The thread that last drove an object (created or progressed it).
#[derive(Debug)]
pub(crate) struct ThreadMark(AtomicUsize);

impl ThreadMark {
    /// Marked with the calling thread.
    pub(crate) fn here() -> ThreadMark {
        ThreadMark(AtomicUsize::new(this_thread()))
    }

    /// The calling thread drives the object now. A load first: the mark changes only when
    /// a program hands its object to another thread, and progress calls this every time.
    #[inline]
    pub(crate) fn touch(&self) {
        let me = this_thread();
        if self.0.load(Ordering::Relaxed) != me {
            self.0.store(me, Ordering::Relaxed);
        }
    }

    /// Whether the calling thread is the one that last drove the object.
    #[inline]
    pub(crate) fn is_here(&self) -> bool {
        self.0.load(Ordering::Relaxed) == this_thread()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_tell_threads_apart_and_follow_a_hand_off() {
        let mark = ThreadMark::here();
        assert!(mark.is_here());
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!mark.is_here(), "another thread is not the marked one");
                mark.touch();
                assert!(mark.is_here());
            });
        });
        assert!(!mark.is_here(), "the object was handed to the other thread");
        mark.touch();
        assert!(mark.is_here());
    }
}
