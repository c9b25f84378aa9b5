//! The sync event's capability queries (`doca_sync_event_cap_*`): SUCCESS when the device can,
//! NOT_SUPPORTED when it cannot, INVALID_VALUE for a NULL or foreign devinfo. NVIDIA's
//! sync-event samples filter devices with them (`sync_event_local_pci` asks for PCI export,
//! `sync_event_remote_pci` for import, both for the wait task), so without them those samples
//! do not link. The remote-net pair lives with the remote-net handle (`remote_net.rs`).
//!
//! Every soft device can export to and import from another process of this host (the PCI
//! pattern) and runs every task kind; there is no DPA nor GPU here.

use super::*;
use crate::dev::doca_devinfo;

/// SUCCESS for a valid devinfo: what every soft device supports.
fn supported(devinfo: *const doca_devinfo) -> doca_error_t {
    guard_err(|| crate::dev::devinfo_ref(devinfo).map(|_| ()))
}

/// NOT_SUPPORTED for a valid devinfo (INVALID_VALUE otherwise): no soft device has it.
fn unsupported(devinfo: *const doca_devinfo) -> doca_error_t {
    guard_err(|| crate::dev::devinfo_ref(devinfo).and(Err(DOCA_ERROR_NOT_SUPPORTED)))
}

macro_rules! caps {
    ($answer:ident: $($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(devinfo: *const doca_devinfo) -> doca_error_t {
            $answer(devinfo)
        }
    )*};
}

caps!(supported:
    doca_sync_event_cap_is_create_from_export_supported,
    doca_sync_event_cap_is_export_to_remote_pci_supported,
    doca_sync_event_cap_task_get_is_supported,
    doca_sync_event_cap_task_notify_set_is_supported,
    doca_sync_event_cap_task_notify_add_is_supported,
    doca_sync_event_cap_task_wait_eq_is_supported,
    doca_sync_event_cap_task_wait_neq_is_supported,
);

caps!(unsupported:
    doca_sync_event_cap_is_export_to_dpa_supported,
    doca_sync_event_cap_is_export_to_gpu_supported,
    doca_sync_event_cap_remote_net_is_export_to_dpa_supported,
    doca_sync_event_cap_remote_net_is_export_to_gpu_supported,
);
