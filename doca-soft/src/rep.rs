//! Representors: what a DPU-role soft device lists for the host function it manages.
//!
//! On a BlueField, the DPU's own device manages the PCI functions the host sees: from an open
//! DPU-side device, `doca_devinfo_rep_create_list` lists a *representor* for each of them, and
//! DPU programs (a Comch server, the sync-event PCI samples) pick the host function they serve
//! by its PCI address or VUID. On the host the same call answers `DOCA_ERROR_NOT_SUPPORTED`.
//!
//! One machine running doca-soft plays both sides, so the side is a setting of the process,
//! read by `dev.rs` (which owns the soft devices' configuration, `DOCA_SOFT_DEVICES` and
//! `DOCA_SOFT_ROLE` alike; `doca_devinfo_create_list` refuses a bad role):
//!
//! | `DOCA_SOFT_ROLE` | meaning |
//! |---|---|
//! | unset, empty or `host` | the soft devices are host devices: no representors (`NOT_SUPPORTED`, as DOCA on a host) |
//! | `dpu` | each soft device is the DPU side of the host PF with the same PCI address: it lists one representor of that PF |
//! | anything else | a configuration error: `doca_devinfo_create_list` answers `DOCA_ERROR_BAD_CONFIG` and logs why |
//!
//! A DPU-role representor answers: PCI address = the soft device's own (the host runs the same
//! `DOCA_SOFT_DEVICES`, so the host's `-p` PCI address finds it), VUID `SOFT<pci without
//! punctuation>HPF` (stable: derived from the address only), PCI function type PF, not
//! hot-plugged, interface `pf<N>hpf` (N = the device's index in the device list, BlueField's
//! naming of host PF representors), VHCA id `NOT_SUPPORTED` (no virtual HCA behind a soft
//! device). It is a network function: filters ALL (0) and NET list it, EMULATED alone does
//! not, and the capability flags say so (all and net supported, emulated not).
//!
//! Objects: representor infos are interned per (device, role) and live as long as the process,
//! like devinfos, so a pointer kept past `doca_devinfo_rep_destroy_list` stays a valid
//! *object* for the getters (DOCA leaves that undefined; we choose not to crash). Lists and
//! opened representors are tracked: freeing one twice, or passing a pointer we did not
//! create, is `DOCA_ERROR_INVALID_VALUE` and never dereferenced.

use std::ffi::c_char;
use std::ptr;
use std::sync::{Mutex, MutexGuard};

use crate::dev::{
    current_devinfos, dev_ref, devinfo_ref, doca_dev, doca_devinfo, read_pci_arg, role, write_cstr, ListRegistry, Role,
    ROLE_ENV,
};
use crate::ffi::{guard, guard_err, out};
use crate::types::*;

/// `struct doca_devinfo_rep`: one function a DPU-side soft device represents.
#[derive(Debug)]
pub struct doca_devinfo_rep {
    /// The device that manages the function.
    dev: &'static doca_devinfo,
    vuid: String,
    iface: String,
}

/// `struct doca_dev_rep`: an opened representor.
#[derive(Debug)]
pub struct doca_dev_rep {
    info: &'static doca_devinfo_rep,
}

/// Locks a table, recovering from poisoning (a panic elsewhere must not disable representors).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every representor info ever created (never freed, as devinfos).
static REP_INFOS: Mutex<Vec<&'static doca_devinfo_rep>> = Mutex::new(Vec::new());
/// Live representor lists.
static REP_LISTS: ListRegistry<doca_devinfo_rep> = ListRegistry::new();
/// Live opened representors (addresses of boxed `doca_dev_rep`s).
static REP_DEVS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The VUID of the host PF that the device at `pci` serves: stable across processes and runs
/// because it depends on the address only.
fn vuid_of(pci: &str) -> String {
    let digits: String = pci.chars().filter(char::is_ascii_hexdigit).collect();
    format!("SOFT{}HPF", digits.to_ascii_uppercase())
}

/// The (interned) representor of the host PF served by `dev`, the `index`-th soft device.
fn intern_rep(dev: &'static doca_devinfo, index: usize) -> &'static doca_devinfo_rep {
    let mut all = lock(&REP_INFOS);
    let iface = format!("pf{index}hpf");
    if let Some(r) = all.iter().find(|r| ptr::eq(r.dev, dev) && r.iface == iface) {
        return r;
    }
    let r: &'static doca_devinfo_rep =
        Box::leak(Box::new(doca_devinfo_rep { dev, vuid: vuid_of(dev.pci_addr()), iface }));
    all.push(r);
    r
}

/// The representor info behind `p`, if it is one of ours; INVALID_VALUE otherwise.
fn rep_info_ref(p: *const doca_devinfo_rep) -> Result<&'static doca_devinfo_rep, doca_error_t> {
    if p.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    lock(&REP_INFOS).iter().copied().find(|r| ptr::eq(*r, p)).ok_or(DOCA_ERROR_INVALID_VALUE)
}

/// The representor info of the open representor `p`; INVALID_VALUE if `p` is not one.
fn rep_dev_info(p: *const doca_dev_rep) -> Result<&'static doca_devinfo_rep, doca_error_t> {
    let devs = lock(&REP_DEVS);
    if p.is_null() || !devs.contains(&(p as usize)) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `p` is in REP_DEVS, so it is a live boxed doca_dev_rep; it cannot be closed
    // while we hold the REP_DEVS lock (close removes it under that lock first).
    Ok(unsafe { &*p }.info)
}

/// True when `p` is NULL or an open representor (what a Comch server may be given).
pub(crate) fn is_open_or_null(p: *const doca_dev_rep) -> bool {
    p.is_null() || lock(&REP_DEVS).contains(&(p as usize))
}

/// Filter bits `doca_devinfo_rep_create_list` knows.
const REP_FILTERS: i32 = (DOCA_DEVINFO_REP_FILTER_NET | DOCA_DEVINFO_REP_FILTER_EMULATED) as i32;

/// True when `filter` selects a network function (the only kind a soft device represents).
fn selects_net(filter: i32) -> bool {
    filter == DOCA_DEVINFO_REP_FILTER_ALL as i32 || filter & DOCA_DEVINFO_REP_FILTER_NET as i32 != 0
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_create_list(
    dev: *mut doca_dev,
    filter: i32,
    dev_list_rep: *mut *mut *mut doca_devinfo_rep,
    nb_devs_rep: *mut u32,
) -> doca_error_t {
    guard_err(|| {
        let d = dev_ref(dev)?;
        if dev_list_rep.is_null() || nb_devs_rep.is_null() || filter & !REP_FILTERS != 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if role()? == Role::Host {
            // NOT_SUPPORTED, reason: in the host role a soft device manages no other PCI
            // functions; DOCA answers the same on a host.
            return Err(crate::sdk_fail!(
                DOCA_ERROR_NOT_SUPPORTED,
                "doca_devinfo_rep_create_list: a host device has no representors (set {ROLE_ENV}=dpu for the DPU side)"
            ));
        }
        let info = d.dev().devinfo();
        let mut arr: Vec<*mut doca_devinfo_rep> = Vec::new();
        if selects_net(filter) {
            // The index names the representor's interface; a device no longer configured
            // (the environment changed after it was opened) keeps index 0.
            let index = current_devinfos()?.iter().position(|x| ptr::eq(*x, info)).unwrap_or(0);
            arr.push(intern_rep(info, index) as *const doca_devinfo_rep as *mut doca_devinfo_rep);
        }
        // SAFETY: both out-pointers were checked non-NULL; writable by the caller's contract.
        unsafe { REP_LISTS.publish(arr, dev_list_rep, nb_devs_rep) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_destroy_list(dev_list_rep: *mut *mut doca_devinfo_rep) -> doca_error_t {
    // The infos it points to stay (never freed, as devinfos).
    guard_err(|| REP_LISTS.free(dev_list_rep))
}

#[no_mangle]
pub unsafe extern "C" fn doca_dev_rep_open(
    devinfo: *mut doca_devinfo_rep,
    dev_rep: *mut *mut doca_dev_rep,
) -> doca_error_t {
    guard_err(|| {
        let info = rep_info_ref(devinfo)?;
        if dev_rep.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let raw = Box::into_raw(Box::new(doca_dev_rep { info }));
        lock(&REP_DEVS).push(raw as usize);
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { out(dev_rep, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dev_rep_close(dev: *mut doca_dev_rep) -> doca_error_t {
    guard_err(|| {
        let mut devs = lock(&REP_DEVS);
        let i = devs.iter().position(|&p| p == dev as usize).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        devs.swap_remove(i);
        // SAFETY: `dev` was in REP_DEVS, so it came from Box::into_raw in open; removed under
        // the lock, so it is freed exactly once and no lookup can reach it afterwards.
        drop(unsafe { Box::from_raw(dev) });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dev_rep_as_devinfo(dev_rep: *mut doca_dev_rep) -> *mut doca_devinfo_rep {
    guard(ptr::null_mut(), || {
        rep_dev_info(dev_rep).map_or(ptr::null_mut(), |i| i as *const doca_devinfo_rep as *mut doca_devinfo_rep)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_get_vuid(
    devinfo_rep: *const doca_devinfo_rep,
    rep_vuid: *mut c_char,
    size: u32,
) -> doca_error_t {
    guard_err(|| {
        let r = rep_info_ref(devinfo_rep)?;
        if rep_vuid.is_null() || (size as usize) < DOCA_DEVINFO_REP_VUID_SIZE {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL, `size` writable bytes by the caller's contract.
        unsafe { write_cstr(rep_vuid, size as usize, &r.vuid) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_get_pci_addr_str(
    devinfo_rep: *const doca_devinfo_rep,
    pci_addr_str: *mut c_char,
) -> doca_error_t {
    guard_err(|| {
        let r = rep_info_ref(devinfo_rep)?;
        if pci_addr_str.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL; DOCA's contract is a buffer of DOCA_DEVINFO_REP_PCI_ADDR_SIZE
        // (13) bytes, and a normalised address is 12 characters.
        unsafe { write_cstr(pci_addr_str, DOCA_DEVINFO_REP_PCI_ADDR_SIZE, r.dev.pci_addr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_get_pci_func_type(
    devinfo_rep: *const doca_devinfo_rep,
    pci_func_type: *mut doca_pci_func_type,
) -> doca_error_t {
    guard_err(|| {
        rep_info_ref(devinfo_rep)?;
        // SAFETY: NULL refused by `out`; writable by the caller's contract.
        unsafe { out(pci_func_type, DOCA_PCI_FUNC_TYPE_PF) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_get_is_hotplug(
    devinfo_rep: *const doca_devinfo_rep,
    is_hotplug: *mut u8,
) -> doca_error_t {
    guard_err(|| {
        rep_info_ref(devinfo_rep)?;
        // SAFETY: NULL refused by `out`; writable by the caller's contract.
        unsafe { out(is_hotplug, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_get_iface_name(
    devinfo_rep: *const doca_devinfo_rep,
    iface_name: *mut c_char,
    size: u32,
) -> doca_error_t {
    guard_err(|| {
        let r = rep_info_ref(devinfo_rep)?;
        if iface_name.is_null() || (size as usize) < DOCA_DEVINFO_IFACE_NAME_SIZE {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL, `size` writable bytes by the caller's contract.
        unsafe { write_cstr(iface_name, size as usize, &r.iface) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_get_vhca_id(
    devinfo_rep: *const doca_devinfo_rep,
    vhca_id: *mut u16,
) -> doca_error_t {
    guard_err(|| {
        rep_info_ref(devinfo_rep)?;
        if vhca_id.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // NOT_SUPPORTED, reason: as for the device itself, no virtual HCA stands behind a
        // soft function.
        Err(crate::sdk_fail!(
            DOCA_ERROR_NOT_SUPPORTED,
            "doca_devinfo_rep_get_vhca_id: no virtual HCA stands behind a soft function"
        ))
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_is_equal_pci_addr(
    devinfo_rep: *const doca_devinfo_rep,
    pci_addr_str: *const c_char,
    is_equal: *mut u8,
) -> doca_error_t {
    guard_err(|| {
        let r = rep_info_ref(devinfo_rep)?;
        if pci_addr_str.is_null() || is_equal.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL checked; NUL-terminated by the caller's contract.
        let norm = unsafe { read_pci_arg(pci_addr_str) }?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { out(is_equal, u8::from(norm == r.dev.pci_addr())) }
    })
}

/// Answers a representor filter capability: supported (1) in the DPU role when `net` (the
/// soft functions are network functions), 0 otherwise.
fn filter_cap(devinfo: *const doca_devinfo, dst: *mut u8, net: bool) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        let on = net && role()? == Role::Dpu;
        // SAFETY: NULL refused by `out`; writable by the caller's contract.
        unsafe { out(dst, u8::from(on)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_cap_is_filter_all_supported(
    devinfo: *const doca_devinfo,
    filter_all_supported: *mut u8,
) -> doca_error_t {
    filter_cap(devinfo, filter_all_supported, true)
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_cap_is_filter_net_supported(
    devinfo: *const doca_devinfo,
    filter_net_supported: *mut u8,
) -> doca_error_t {
    filter_cap(devinfo, filter_net_supported, true)
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_rep_cap_is_filter_emulated_supported(
    devinfo: *const doca_devinfo,
    filter_emulated_supported: *mut u8,
) -> doca_error_t {
    filter_cap(devinfo, filter_emulated_supported, false)
}

#[cfg(test)]
mod tests;
