//! The rest of `doca_dev.h` (DOCA 3.0): device addresses and link properties, PCI function
//! type, capability flags and representors (the functions a DPU-side device manages).
//!
//! `doca_devinfo_get_pci_func_type` and `doca_devinfo_get_sf_index` are newer than DOCA 3.0
//! (NVIDIA's 3.3 samples call them); a program that calls them does not link against a 3.0
//! SDK. Address getters need `size` of at least the matching `DOCA_DEVINFO_*_SIZE`.

use super::*;

opaque!(
    /// Static information about a representor (a function managed by a DPU-side device).
    doca_devinfo_rep,
    /// An open representor.
    doca_dev_rep,
);

extern "C" {
    // ---- representors ----
    /// `filter`: a mask of `DOCA_DEVINFO_REP_FILTER_*` (0: all).
    pub fn doca_devinfo_rep_create_list(
        dev: *mut doca_dev,
        filter: c_int,
        dev_list_rep: *mut *mut *mut doca_devinfo_rep,
        nb_devs_rep: *mut u32,
    ) -> doca_error_t;
    pub fn doca_devinfo_rep_destroy_list(dev_list_rep: *mut *mut doca_devinfo_rep) -> doca_error_t;
    pub fn doca_dev_rep_open(devinfo: *mut doca_devinfo_rep, dev_rep: *mut *mut doca_dev_rep) -> doca_error_t;
    pub fn doca_dev_rep_close(dev: *mut doca_dev_rep) -> doca_error_t;
    pub fn doca_dev_rep_as_devinfo(dev_rep: *mut doca_dev_rep) -> *mut doca_devinfo_rep;
    pub fn doca_devinfo_rep_get_vuid(
        devinfo_rep: *const doca_devinfo_rep,
        rep_vuid: *mut c_char,
        size: u32,
    ) -> doca_error_t;
    pub fn doca_devinfo_rep_get_pci_addr_str(
        devinfo_rep: *const doca_devinfo_rep,
        pci_addr_str: *mut c_char,
    ) -> doca_error_t;
    pub fn doca_devinfo_rep_get_pci_func_type(
        devinfo_rep: *const doca_devinfo_rep,
        pci_func_type: *mut doca_pci_func_type,
    ) -> doca_error_t;
    pub fn doca_devinfo_rep_get_is_hotplug(devinfo_rep: *const doca_devinfo_rep, is_hotplug: *mut u8) -> doca_error_t;
    pub fn doca_devinfo_rep_get_iface_name(
        devinfo_rep: *const doca_devinfo_rep,
        iface_name: *mut c_char,
        size: u32,
    ) -> doca_error_t;
    pub fn doca_devinfo_rep_get_vhca_id(devinfo_rep: *const doca_devinfo_rep, vhca_id: *mut u16) -> doca_error_t;
    pub fn doca_devinfo_rep_is_equal_pci_addr(
        devinfo_rep: *const doca_devinfo_rep,
        pci_addr_str: *const c_char,
        is_equal: *mut u8,
    ) -> doca_error_t;
    pub fn doca_devinfo_rep_cap_is_filter_all_supported(
        devinfo: *const doca_devinfo,
        filter_all_supported: *mut u8,
    ) -> doca_error_t;
    pub fn doca_devinfo_rep_cap_is_filter_net_supported(
        devinfo: *const doca_devinfo,
        filter_net_supported: *mut u8,
    ) -> doca_error_t;
    pub fn doca_devinfo_rep_cap_is_filter_emulated_supported(
        devinfo: *const doca_devinfo,
        filter_emulated_supported: *mut u8,
    ) -> doca_error_t;

    // ---- addresses and link ----
    pub fn doca_devinfo_get_ipv4_addr(devinfo: *const doca_devinfo, ipv4_addr: *mut u8, size: u32) -> doca_error_t;
    pub fn doca_devinfo_get_ipv6_addr(devinfo: *const doca_devinfo, ipv6_addr: *mut u8, size: u32) -> doca_error_t;
    pub fn doca_devinfo_get_mac_addr(devinfo: *const doca_devinfo, mac_addr: *mut u8, size: u32) -> doca_error_t;
    pub fn doca_devinfo_get_lid(devinfo: *const doca_devinfo, lid: *mut u16) -> doca_error_t;
    /// Bits per second.
    pub fn doca_devinfo_get_active_rate(devinfo: *const doca_devinfo, active_rate: *mut u64) -> doca_error_t;
    pub fn doca_devinfo_get_vhca_id(devinfo: *const doca_devinfo, vhca_id: *mut u16) -> doca_error_t;
    pub fn doca_devinfo_cap_is_hotplug_manager_supported(
        devinfo: *const doca_devinfo,
        is_hotplug_manager: *mut u8,
    ) -> doca_error_t;
    pub fn doca_devinfo_cap_is_notification_moderation_supported(
        devinfo: *const doca_devinfo,
        is_notification_moderation_supported: *mut u8,
    ) -> doca_error_t;
    pub fn doca_devinfo_cap_is_accelerate_resource_reclaim_supported(
        devinfo: *const doca_devinfo,
        is_accelerate_resource_reclaim: *mut u8,
    ) -> doca_error_t;
    pub fn doca_dev_accelerate_resource_reclaim(dev: *mut doca_dev) -> doca_error_t;

    // ---- newer than DOCA 3.0 (see the module docs) ----
    pub fn doca_devinfo_get_pci_func_type(
        devinfo: *const doca_devinfo,
        pci_func_type: *mut doca_pci_func_type,
    ) -> doca_error_t;
    pub fn doca_devinfo_get_sf_index(devinfo: *const doca_devinfo, sf_index: *mut u32) -> doca_error_t;
}
