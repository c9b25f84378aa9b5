//! Sync event task accessors (`doca_sync_event.h`, DOCA 3.0, experimental there), for re-using
//! a task: setters only while the caller owns the task (before submit or in its callback).

use super::*;

extern "C" {
    pub fn doca_sync_event_task_get_set_ret_val_ptr(task: *mut doca_sync_event_task_get, ret_val_ptr: *mut u64);
    pub fn doca_sync_event_task_get_get_ret_val_ptr(task: *const doca_sync_event_task_get) -> *mut u64;
    pub fn doca_sync_event_task_notify_set_set_set_val(task: *mut doca_sync_event_task_notify_set, set_val: u64);
    pub fn doca_sync_event_task_notify_set_get_set_val(task: *const doca_sync_event_task_notify_set) -> u64;
    pub fn doca_sync_event_task_notify_add_set_inc_val(task: *mut doca_sync_event_task_notify_add, inc_val: u64);
    pub fn doca_sync_event_task_notify_add_get_inc_val(task: *const doca_sync_event_task_notify_add) -> u64;
    pub fn doca_sync_event_task_notify_add_set_fetched_val_ptr(
        task: *mut doca_sync_event_task_notify_add,
        fetched_val_ptr: *mut u64,
    );
    pub fn doca_sync_event_task_notify_add_get_fetched_val_ptr(
        task: *const doca_sync_event_task_notify_add,
    ) -> *mut u64;
    pub fn doca_sync_event_task_wait_eq_set_wait_val(task: *mut doca_sync_event_task_wait_eq, wait_val: u64);
    pub fn doca_sync_event_task_wait_eq_get_wait_val(task: *const doca_sync_event_task_wait_eq) -> u64;
    pub fn doca_sync_event_task_wait_eq_set_mask(task: *mut doca_sync_event_task_wait_eq, mask: u64);
    pub fn doca_sync_event_task_wait_eq_get_mask(task: *const doca_sync_event_task_wait_eq) -> u64;
    pub fn doca_sync_event_task_wait_neq_set_wait_val(task: *mut doca_sync_event_task_wait_neq, wait_val: u64);
    pub fn doca_sync_event_task_wait_neq_get_wait_val(task: *const doca_sync_event_task_wait_neq) -> u64;
    pub fn doca_sync_event_task_wait_neq_set_mask(task: *mut doca_sync_event_task_wait_neq, mask: u64);
    pub fn doca_sync_event_task_wait_neq_get_mask(task: *const doca_sync_event_task_wait_neq) -> u64;
}

opaque!(
    /// A peer's sync event opened from its remote-net export: the target of the RDMA
    /// remote-net tasks.
    doca_sync_event_remote_net,
);

// ---- remote-net handles ----
extern "C" {
    pub fn doca_sync_event_remote_net_create_from_export(
        dev: *mut doca_dev,
        data: *const u8,
        sz: usize,
        event: *mut *mut doca_sync_event_remote_net,
    ) -> doca_error_t;
    pub fn doca_sync_event_remote_net_destroy(event: *mut doca_sync_event_remote_net) -> doca_error_t;
    pub fn doca_sync_event_cap_remote_net_is_create_from_export_supported(devinfo: *const doca_devinfo)
        -> doca_error_t;
    pub fn doca_sync_event_cap_is_export_to_remote_net_supported(devinfo: *const doca_devinfo) -> doca_error_t;
}

// ---- capabilities: SUCCESS when the device supports it, NOT_SUPPORTED otherwise ----
extern "C" {
    pub fn doca_sync_event_cap_is_create_from_export_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_is_export_to_remote_pci_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_is_export_to_dpa_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_is_export_to_gpu_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_remote_net_is_export_to_dpa_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_remote_net_is_export_to_gpu_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_task_get_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_task_notify_set_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_task_notify_add_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_task_wait_eq_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_sync_event_cap_task_wait_neq_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
}

// ---- synchronous waits that yield the CPU between looks ----
extern "C" {
    pub fn doca_sync_event_wait_eq_yield(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t;
    pub fn doca_sync_event_wait_neq_yield(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t;
}
