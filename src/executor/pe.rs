//! The executor's DOCA progress engine.
//!
//! One [`Pe`] per executor, created on the executor's thread and used only there (a DOCA PE
//! is not thread-safe). Its notification handle is a file descriptor owned by the PE; the
//! executor registers it with its `mio::Poll` and follows DOCA's event protocol
//! (progress until 0, arm, progress once more, wait, clear). The PE is destroyed explicitly
//! by the executor's shutdown after every context connected to it is destroyed (DOCA refuses
//! with IN_USE otherwise); `Drop` only destroys a PE that shutdown did not reach.

use std::cell::Cell;
use std::os::fd::RawFd;

use crate::error::{check, Error, Result};
use crate::sys;

/// How many `doca_pe_progress` calls one drain may make before returning to the task queue.
/// DOCA says "progress until it returns 0"; the bound keeps a provider that always has work
/// from starving tasks (the loop comes back to the PE on the next turn anyway).
const DRAIN_LIMIT: usize = 1 << 14;

/// The handle and the fd are cells, so that every use takes `&Pe` and the executor holds it
/// without a `RefCell`: a borrow's count, taken and given back around every drain and every
/// inline progress, cost a parked operation ~7 instructions per turn. Only the executor's
/// shutdown invalidates them ([`destroy`](Pe::destroy), [`leak`](Pe::leak)), never from
/// inside a progress (DOCA refuses to destroy a PE with contexts connected anyway); a
/// progress after that finds the handle null and does nothing.
pub(crate) struct Pe {
    raw: Cell<*mut sys::doca_pe>,
    fd: Cell<RawFd>,
}

impl Pe {
    /// Creates a PE on the calling thread and reads its notification handle.
    pub(crate) fn new() -> Result<Pe> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check(unsafe { sys::doca_pe_create(&mut raw) }, "doca_pe_create")?;
        let pe = Pe { raw: Cell::new(raw), fd: Cell::new(sys::DOCA_NOTIFICATION_HANDLE_INVALID) };
        let mut fd = sys::DOCA_NOTIFICATION_HANDLE_INVALID;
        // SAFETY: `raw` is the live PE just created; `fd` is a valid out-pointer.
        check(unsafe { sys::doca_pe_get_notification_handle(raw, &mut fd) }, "doca_pe_get_notification_handle")?;
        if fd < 0 {
            return Err(Error::from_doca(sys::DOCA_ERROR_UNEXPECTED, "doca_pe_get_notification_handle: invalid fd"));
        }
        pe.fd.set(fd);
        Ok(pe)
    }

    pub(crate) fn raw(&self) -> *mut sys::doca_pe {
        self.raw.get()
    }

    /// The notification fd (owned by the PE; valid until the PE is destroyed).
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.get()
    }

    /// One unit of work; `true` if there was any. Callbacks run inside.
    #[inline]
    pub(crate) fn progress(&self) -> bool {
        let raw = self.raw.get();
        // SAFETY: the PE is live (only `destroy` invalidates it, and it nulls `raw`) and used
        // on its own thread (`Pe` is !Send because of the raw pointer).
        !raw.is_null() && unsafe { sys::doca_pe_progress(raw) } != 0
    }

    /// Progresses until the PE reports no more work (bounded by [`DRAIN_LIMIT`]), or until
    /// `more()` says nothing more is expected after a call that did work; returns how many
    /// units of work were done.
    pub(crate) fn drain(&self, more: impl Fn() -> bool) -> usize {
        let mut n = 0;
        while n < DRAIN_LIMIT && self.progress() {
            n += 1;
            if !more() {
                break;
            }
        }
        n
    }

    /// Arms the notification: the fd becomes readable when work arrives after this call.
    pub(crate) fn arm(&self) -> Result<()> {
        // SAFETY: live PE on its own thread.
        check(unsafe { sys::doca_pe_request_notification(self.raw.get()) }, "doca_pe_request_notification")
    }

    /// Acknowledges a notification (after `poll` returned, or to disarm).
    pub(crate) fn clear(&self) -> Result<()> {
        // SAFETY: live PE on its own thread; the handle is the PE's own.
        check(unsafe { sys::doca_pe_clear_notification(self.raw.get(), self.fd.get()) }, "doca_pe_clear_notification")
    }

    /// Forgets the PE without destroying it (contexts that never stopped are still connected
    /// to it; destroying it under them is not an option).
    pub(crate) fn leak(&self) {
        self.raw.set(std::ptr::null_mut());
        self.fd.set(sys::DOCA_NOTIFICATION_HANDLE_INVALID);
    }

    /// Destroys the PE. Every context connected to it must be destroyed first.
    pub(crate) fn destroy(&self) -> Result<()> {
        let raw = self.raw.get();
        if raw.is_null() {
            return Ok(());
        }
        // SAFETY: live PE, destroyed once (`raw` is nulled on success).
        check(unsafe { sys::doca_pe_destroy(raw) }, "doca_pe_destroy")?;
        self.leak();
        Ok(())
    }
}

impl Drop for Pe {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            // Contexts are still connected (shutdown timed out): leaking the PE is the only
            // safe choice, destroying it under them is not.
            super::local::report(&format!("leaking a progress engine: {e}"));
        }
    }
}

impl std::fmt::Debug for Pe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pe").field("raw", &self.raw).field("fd", &self.fd).finish()
    }
}
