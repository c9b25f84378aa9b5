//! Shutdown: cancel every task, close the injection queue, stop and destroy the contexts,
//! then the PE (see the [module documentation](super)).

use std::task::Waker;
use std::time::Instant;

use mio::unix::SourceFd;
use mio::Interest;

use super::{drop_quietly, report, Core, PE_TOKEN, SHUTDOWN_BUDGET};

impl Core {
    /// Waits (following the PE protocol) until `done()` holds or `deadline` passes, driving
    /// only the PE and timers, not tasks. Used by shutdown.
    pub(super) fn progress_until(&self, deadline: Instant, mut done: impl FnMut(&Core) -> bool) -> bool {
        loop {
            self.drain_pe();
            if done(self) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if !self.pe_active() {
                // Nothing can change any more without the PE.
                return done(self);
            }
            if self.pe.arm().is_err() {
                std::thread::yield_now();
                continue;
            }
            if self.drain_pe() == 0 && !done(self) {
                self.poll(Some(deadline - now));
            }
            self.clear_pe();
        }
    }

    /// Stops everything this executor owns. See the module documentation. Runs on the
    /// executor's thread, inside `Enter`.
    pub(crate) fn shutdown(&self) {
        if self.closing.replace(true) {
            return;
        }
        let deadline = Instant::now() + SHUTDOWN_BUDGET;

        // 1. Cancel tasks. Waking every registered task brings its runnable back to a queue
        // (local, or the injection queue if a remote waker is scheduling it right now);
        // dropping the runnable drops the future here, on its own thread, and unregisters it.
        loop {
            let wakers: Vec<Waker> = {
                let tasks = self.tasks.borrow();
                tasks.keys().into_iter().filter_map(|k| tasks.get(k).cloned()).collect()
            };
            for w in wakers {
                w.wake();
            }
            self.drop_queued();
            if self.tasks.borrow().is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                report(&format!(
                    "shutdown: {} task(s) could not be cancelled within {SHUTDOWN_BUDGET:?}; leaking them",
                    self.tasks.borrow().len()
                ));
                break;
            }
            // A remote thread is between "task scheduled" and "runnable pushed": let it finish.
            std::thread::yield_now();
        }

        // 2. Close the injection queue: from now on pushers take their work back.
        self.shared.park.close();
        self.drop_queued();

        // A foreign reactor watched the PE fd until now; the shutdown waits in our own poll.
        if self.foreign.replace(false) {
            self.foreign_waker.borrow_mut().take();
            if let Some(r) = self.reactor.borrow().as_ref() {
                let fd = self.pe.fd();
                if let Err(e) = r.poll.registry().register(&mut SourceFd(&fd), PE_TOKEN, Interest::READABLE) {
                    report(&format!("shutdown: cannot watch the PE fd, polling instead: {e}"));
                }
            }
        }

        // 3. Contexts: stop all, progress until IDLE (flushing in-flight tasks), destroy.
        self.ctxs.stop_all(self);
        let flushed = self.progress_until(deadline, |core| core.ctxs.all_idle());
        if !flushed {
            report(&format!("shutdown: {} context(s) did not reach IDLE within {SHUTDOWN_BUDGET:?}", self.ctxs.len()));
        }
        let remaining = self.ctxs.destroy_all(self);

        // 4. Completion slots still pending belong to contexts that never stopped: the
        // provider may still write their memory, so it is leaked, not freed.
        self.slots.drop_deferred();
        let pending = self.slots.leak_pending();
        if pending > 0 {
            report(&format!("shutdown: leaking {pending} completion slot(s) of tasks that never completed"));
        }
        self.timers.clear();

        // 5. The PE, once nothing is connected to it; then the poll and waker fds.
        if let Some(r) = self.reactor.borrow_mut().take() {
            let fd = self.pe.fd();
            let _ = r.poll.registry().deregister(&mut SourceFd(&fd));
            drop(r);
        }
        if remaining == 0 {
            match self.pe.destroy() {
                Ok(()) => self.pe_alive.set(false),
                Err(e) => report(&format!("shutdown: {e}")),
            }
        } else {
            report(&format!("shutdown: leaking the progress engine ({remaining} context(s) still connected)"));
            self.pe_alive.set(false);
            self.pe.leak();
        }
        let waker = self.shared.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(waker);
    }

    /// Drops every queued runnable (cancelling its task).
    pub(super) fn drop_queued(&self) {
        loop {
            let next = self.queue.pop_front().or_else(|| self.shared.inject.pop());
            match next {
                Some(r) => drop_quietly(r),
                None => break,
            }
        }
    }
}
