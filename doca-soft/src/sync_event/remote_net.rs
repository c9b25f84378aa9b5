//! Remote-net handles: a peer's sync event opened from its `export_to_remote_net` blob, the
//! target of the RDMA remote-net sync-event tasks (`rdma/remote.rs`), and the remote-net
//! capability queries.
//!
//! Apart from `mod.rs` (the local event object and its data path) because a handle is a
//! different object with its own lifetime: it can be neither started nor waited on, it only
//! maps the exporter's counter segment for the RDMA tasks to update.

use super::*;

/// `"RNSE"`: marks a live remote-net handle.
const REMOTE_NET_MAGIC: u32 = 0x524e_5345;

/// `struct doca_sync_event_remote_net`: a peer's event opened from its
/// `export_to_remote_net` blob. It cannot be started, waited on or read directly: it is only
/// the target of `doca_rdma_task_remote_net_sync_event_*` tasks on an RDMA connection to the
/// exporting process (checked when such a task runs). It maps the exporter's counter
/// segment, so an update through it wakes the exporter's waiters exactly as a local update
/// does (futex and PE doorbells): nobody polls.
pub struct doca_sync_event_remote_net {
    magic: u32,
    seg: ShmSegment,
    pid: u32,
    _dev: DevRef,
}

impl doca_sync_event_remote_net {
    fn shared(&self) -> &SyncShared {
        // SAFETY: the segment is SHARED_LEN bytes (checked at import), page-aligned, lives as
        // long as `self`, and SyncShared is all atomics (any contents are a valid value).
        unsafe { &*self.seg.as_ptr().cast::<SyncShared>() }
    }

    /// The process that exported the event (the RDMA peer a task must go through).
    pub(crate) fn owner_pid(&self) -> u32 {
        self.pid
    }

    /// The remote value.
    pub(crate) fn get(&self) -> u64 {
        self.shared().counter.load(SeqCst)
    }

    /// Sets the remote value and wakes its waiters.
    pub(crate) fn set(&self, v: u64) {
        self.shared().counter.store(v, SeqCst);
        self.shared().wake_all();
    }

    /// Adds to the remote value atomically, wakes its waiters; returns the previous value.
    pub(crate) fn add(&self, v: u64) -> u64 {
        let old = self.shared().counter.fetch_add(v, SeqCst);
        self.shared().wake_all();
        old
    }
}

/// Validates a remote-net handle pointer (NULL or foreign: INVALID_VALUE).
///
/// # Safety
/// A non-NULL `p` must point to a handle created by this provider and not destroyed.
pub(crate) unsafe fn remote_net_ref<'a>(
    p: *const doca_sync_event_remote_net,
) -> Result<&'a doca_sync_event_remote_net, doca_error_t> {
    // SAFETY: per the contract.
    let e = unsafe { crate::ffi::obj(p) }?;
    if e.magic != REMOTE_NET_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(e)
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_remote_net_create_from_export(
    dev: *mut doca_dev,
    data: *const u8,
    sz: usize,
    event: *mut *mut doca_sync_event_remote_net,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let (dref, seg, pid) = unsafe {
            import_blob(
                dev,
                data,
                sz,
                event.is_null(),
                true,
                "doca_sync_event_remote_net_create_from_export: this blob was exported to PCI; open it with \
                 doca_sync_event_create_from_export",
            )
        }?;
        let h = doca_sync_event_remote_net { magic: REMOTE_NET_MAGIC, seg, pid, _dev: dref };
        let raw = Box::into_raw(Box::new(h));
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(event, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_remote_net_destroy(event: *mut doca_sync_event_remote_net) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { remote_net_ref(event) }?;
        // SAFETY: created by Box::into_raw in create_from_export. Tasks naming it are the
        // caller's to finish first (DOCA contract), as for any object a task references.
        let mut b = unsafe { Box::from_raw(event) };
        b.magic = 0;
        drop(b);
        Ok(())
    })
}

/// Capability checks shared by the remote-net entry points: a valid devinfo is enough (every
/// soft device can export to and import from the network, on this host).
fn remote_net_cap(devinfo: *const crate::dev::doca_devinfo) -> doca_error_t {
    guard_err(|| crate::dev::devinfo_ref(devinfo).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_cap_remote_net_is_create_from_export_supported(
    devinfo: *const crate::dev::doca_devinfo,
) -> doca_error_t {
    remote_net_cap(devinfo)
}

#[no_mangle]
pub unsafe extern "C" fn doca_sync_event_cap_is_export_to_remote_net_supported(
    devinfo: *const crate::dev::doca_devinfo,
) -> doca_error_t {
    remote_net_cap(devinfo)
}
