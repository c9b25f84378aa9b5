//! [`ThreadMark`]: which thread last drove an object, for the objects DOCA lets other threads
//! build on while doca-soft keeps them single-threaded.
//!
//! DOCA lets a program create a Comch consumer or producer per thread, each on its own PE,
//! over one connection that another thread progresses. doca-soft's connections are
//! single-threaded (their state is in `Cell`s, progressed by their server's or client's PE),
//! so such a consumer would touch them from two threads at once. The provider cannot honour
//! that, and says so: the connection's endpoint marks the thread that progresses it, and a
//! fast-path object created from another thread is refused with NOT_SUPPORTED and a log
//! line, before anything of the connection is touched.
//!
//! The mark is the address of a thread-local: unique among live threads, read and written
//! with relaxed atomics so that the check from the other thread is itself no data race.

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
