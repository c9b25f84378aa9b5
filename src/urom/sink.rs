//! Variable-length task results.
//!
//! A completion slot's result area holds four words, enough for counters and lengths but not
//! for a notification or a list of worker ids. UROM operations therefore hand the task a
//! [`Sink`]: a heap cell whose address the allocation closure writes into word 0 of the result
//! area, and into which [`DocaTask::on_complete`](crate::ext::DocaTask) copies
//! the result before DOCA frees the task. The operation's future keeps the sink alive through
//! `with_buffers`, so even a future dropped mid-flight leaves a valid destination behind until
//! the completion arrives.

use std::cell::UnsafeCell;

use crate::ext::TaskOutput;

/// Where a completion copies a variable-length result. Used on one executor thread only.
#[derive(Default)]
pub(crate) struct Sink<T> {
    data: UnsafeCell<Vec<T>>,
}

impl<T: Copy> Sink<T> {
    /// Word 0 of a result area naming this sink.
    pub(crate) fn as_word(&self) -> u64 {
        self as *const Sink<T> as usize as u64
    }

    /// Stores `items` in the sink named by word 0 of `out`.
    ///
    /// # Safety
    /// Word 0 of `out` was set with [`as_word`](Sink::as_word) of a sink that is still alive
    /// (kept by the operation's future or its orphaned slot), and no reference to its contents
    /// is held (completions run on the executor thread, between polls of the future).
    pub(crate) unsafe fn fill(out: &TaskOutput, items: &[T]) {
        let sink = out[0] as usize as *const Sink<T>;
        if sink.is_null() {
            return;
        }
        // SAFETY: the caller guarantees the sink is alive and unaliased.
        let data = unsafe { &mut *(*sink).data.get() };
        data.clear();
        data.extend_from_slice(items);
    }

    /// The result, once the operation completed.
    pub(crate) fn take(self) -> Vec<T> {
        self.data.into_inner()
    }
}
