//! The rest of `doca_dev.h`: network addresses and link properties of a device, its PCI
//! function type and capability flags (representors: `rep.rs`).
//!
//! # What a soft device answers (decisions; see also `docs/soft-provider.md`)
//!
//! A soft device is a name, a PCI address and an interface name (see `dev.rs`); it has no
//! port of its own. Where DOCA reads a property from the port, the soft provider reads it from
//! the **host interface of the same name**, if one exists (`DOCA_SOFT_DEVICES=soft0@03:00.0@lo`
//! gives the loopback interface's addresses), and otherwise answers what DOCA answers for a
//! device without that property:
//!
//! | query | soft answer |
//! |---|---|
//! | IPv4 / IPv6 address | the interface's first address of that family; `DOCA_ERROR_NOT_FOUND` when it has none or does not exist (DOCA: NOT_FOUND when none is assigned) |
//! | MAC address | the interface's 6-byte hardware address; `DOCA_ERROR_NOT_FOUND` without such an interface; `DOCA_ERROR_NOT_SUPPORTED` for an interface whose address is not 6 bytes (InfiniBand, as DOCA) |
//! | LID | `DOCA_ERROR_NOT_SUPPORTED`: the soft device behaves as an Ethernet (RoCE) port, GRH addressing only |
//! | active rate | the interface's speed (Mb/s in sysfs) in bits per second; `DOCA_ERROR_NOT_SUPPORTED` when the interface has no link speed (no such interface, loopback, virtual) |
//! | VHCA id | `DOCA_ERROR_NOT_SUPPORTED`: no virtual HCA behind a soft device |
//! | PCI function type | `DOCA_PCI_FUNC_TYPE_PF` |
//! | SF index | `DOCA_ERROR_NOT_SUPPORTED`: a PF has no SF index |
//! | hotplug manager, notification moderation, accelerated resource reclaim | 0 (not supported) |
//! | representor list | by role, see `rep.rs`: `DOCA_ERROR_NOT_SUPPORTED` on a host (as DOCA), the host PF's representor in the DPU role |
//!
//! Buffer sizes below the matching `DOCA_DEVINFO_*_SIZE` are `DOCA_ERROR_INVALID_VALUE`.

use std::ffi::CStr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ptr;

use crate::dev::{dev_ref, devinfo_ref, doca_dev, doca_devinfo};
use crate::ffi::{guard_err, out};
use crate::types::*;

pub use crate::rep::{doca_dev_rep, doca_devinfo_rep};

// ---- host interface lookups ----

/// The addresses of the host interface `iface`: (IPv4 list, IPv6 list, interface exists).
fn iface_addrs(iface: &str) -> (Vec<Ipv4Addr>, Vec<Ipv6Addr>, bool) {
    let (mut v4, mut v6, mut found) = (Vec::new(), Vec::new(), false);
    let mut head: *mut libc::ifaddrs = ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return (v4, v6, false);
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        if unsafe { CStr::from_ptr(ifa.ifa_name) }.to_bytes() != iface.as_bytes() {
            continue;
        }
        found = true;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-NULL ifa_addr points to a sockaddr whose family says its real type.
        match i32::from(unsafe { (*ifa.ifa_addr).sa_family }) {
            libc::AF_INET => {
                // SAFETY: family AF_INET: the sockaddr is a sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                v4.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6: the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                v6.push(Ipv6Addr::from(sin6.sin6_addr.s6_addr));
            }
            _ => {}
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    (v4, v6, found)
}

/// A sysfs attribute of the host interface `iface`, trimmed (None if unreadable).
fn sysfs_net(iface: &str, attr: &str) -> Option<String> {
    // Interface names were validated (alphanumerics, '_', '-', '.'; no '/'): no path tricks.
    if iface.contains('/') || iface.starts_with('.') {
        return None;
    }
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{attr}")).ok().map(|s| s.trim().to_string())
}

/// Parses "aa:bb:cc:dd:ee:ff" (any number of colon-separated hex bytes).
fn parse_hw_addr(s: &str) -> Option<Vec<u8>> {
    s.split(':').map(|b| u8::from_str_radix(b, 16).ok()).collect()
}

/// Writes `bytes` into a caller buffer of `size` bytes that must hold at least `need`.
///
/// # Safety
/// A non-NULL `dst` must be writable for `size` bytes.
unsafe fn write_bytes(dst: *mut u8, size: u32, need: usize, bytes: &[u8]) -> Result<(), doca_error_t> {
    if dst.is_null() || (size as usize) < need || bytes.len() > need {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `bytes.len() <= need <= size` writable bytes (contract); distinct allocations.
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
    Ok(())
}

// ---- address and link queries ----

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_ipv4_addr(
    devinfo: *const doca_devinfo,
    ipv4_addr: *mut u8,
    size: u32,
) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if ipv4_addr.is_null() || (size as usize) < DOCA_DEVINFO_IPV4_ADDR_SIZE {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let a = iface_addrs(info.iface_name()).0.first().copied().ok_or(DOCA_ERROR_NOT_FOUND)?;
        // SAFETY: checked non-NULL and large enough; writable by the caller's contract.
        unsafe { write_bytes(ipv4_addr, size, DOCA_DEVINFO_IPV4_ADDR_SIZE, &a.octets()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_ipv6_addr(
    devinfo: *const doca_devinfo,
    ipv6_addr: *mut u8,
    size: u32,
) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if ipv6_addr.is_null() || (size as usize) < DOCA_DEVINFO_IPV6_ADDR_SIZE {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let a = iface_addrs(info.iface_name()).1.first().copied().ok_or(DOCA_ERROR_NOT_FOUND)?;
        // SAFETY: as in doca_devinfo_get_ipv4_addr.
        unsafe { write_bytes(ipv6_addr, size, DOCA_DEVINFO_IPV6_ADDR_SIZE, &a.octets()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_mac_addr(
    devinfo: *const doca_devinfo,
    mac_addr: *mut u8,
    size: u32,
) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if mac_addr.is_null() || (size as usize) < DOCA_DEVINFO_MAC_ADDR_SIZE {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let raw = sysfs_net(info.iface_name(), "address").ok_or(DOCA_ERROR_NOT_FOUND)?;
        let mac = parse_hw_addr(&raw).ok_or(DOCA_ERROR_NOT_FOUND)?;
        if mac.len() != DOCA_DEVINFO_MAC_ADDR_SIZE {
            // NOT_SUPPORTED, reason: the interface is not Ethernet (e.g. a 20-byte InfiniBand
            // address); DOCA answers the same for an InfiniBand port.
            return Err(crate::sdk_fail!(
                DOCA_ERROR_NOT_SUPPORTED,
                "doca_devinfo_get_mac_addr: the interface's address is not a 6-byte Ethernet MAC"
            ));
        }
        // SAFETY: as in doca_devinfo_get_ipv4_addr.
        unsafe { write_bytes(mac_addr, size, DOCA_DEVINFO_MAC_ADDR_SIZE, &mac) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_lid(devinfo: *const doca_devinfo, lid: *mut u16) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        if lid.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // NOT_SUPPORTED, reason: the soft device behaves as an Ethernet (RoCE) port, which has
        // no LID (DOCA answers the same for an Ethernet port).
        Err(crate::sdk_fail!(
            DOCA_ERROR_NOT_SUPPORTED,
            "doca_devinfo_get_lid: a soft device is an Ethernet (RoCE) port, without a LID"
        ))
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_active_rate(
    devinfo: *const doca_devinfo,
    active_rate: *mut u64,
) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if active_rate.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // sysfs reports Mb/s, or -1 / an error for links without a speed.
        let mbps = sysfs_net(info.iface_name(), "speed").and_then(|s| s.parse::<i64>().ok()).filter(|&v| v > 0);
        // NOT_SUPPORTED, reason: no host interface of that name with a link speed (the soft
        // device itself has no link).
        let mbps = mbps.ok_or(DOCA_ERROR_NOT_SUPPORTED)?;
        // SAFETY: checked non-NULL; writable by the caller's contract.
        unsafe { out(active_rate, (mbps as u64).saturating_mul(1_000_000)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_vhca_id(devinfo: *const doca_devinfo, vhca_id: *mut u16) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        if vhca_id.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // NOT_SUPPORTED, reason: no virtual HCA stands behind a soft device.
        Err(crate::sdk_fail!(
            DOCA_ERROR_NOT_SUPPORTED,
            "doca_devinfo_get_vhca_id: no virtual HCA stands behind a soft device"
        ))
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_pci_func_type(
    devinfo: *const doca_devinfo,
    pci_func_type: *mut doca_pci_func_type,
) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        // SAFETY: NULL refused by `out`; writable by the caller's contract.
        unsafe { out(pci_func_type, DOCA_PCI_FUNC_TYPE_PF) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_sf_index(devinfo: *const doca_devinfo, sf_index: *mut u32) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        if sf_index.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // NOT_SUPPORTED, reason: a soft device is a PF (doca_devinfo_get_pci_func_type), and
        // only scalable functions have an SF index.
        Err(crate::sdk_fail!(
            DOCA_ERROR_NOT_SUPPORTED,
            "doca_devinfo_get_sf_index: a soft device is a PF; only SFs have an SF index"
        ))
    })
}

/// Writes 0 ("not supported") for a capability flag of a valid devinfo.
fn flag_off(devinfo: *const doca_devinfo, dst: *mut u8) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        // SAFETY: NULL refused by `out`; writable by the caller's contract.
        unsafe { out(dst, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_cap_is_hotplug_manager_supported(
    devinfo: *const doca_devinfo,
    is_hotplug_manager: *mut u8,
) -> doca_error_t {
    flag_off(devinfo, is_hotplug_manager)
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_cap_is_notification_moderation_supported(
    devinfo: *const doca_devinfo,
    is_notification_moderation_supported: *mut u8,
) -> doca_error_t {
    flag_off(devinfo, is_notification_moderation_supported)
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_cap_is_accelerate_resource_reclaim_supported(
    devinfo: *const doca_devinfo,
    is_accelerate_resource_reclaim: *mut u8,
) -> doca_error_t {
    flag_off(devinfo, is_accelerate_resource_reclaim)
}

#[no_mangle]
pub unsafe extern "C" fn doca_dev_accelerate_resource_reclaim(dev: *mut doca_dev) -> doca_error_t {
    guard_err(|| {
        dev_ref(dev)?;
        // NOT_SUPPORTED, reason: the capability is off (doca_devinfo_cap_is_accelerate_
        // resource_reclaim_supported answers 0): soft resources are freed when destroyed.
        Err(crate::sdk_fail!(
            DOCA_ERROR_NOT_SUPPORTED,
            "doca_dev_accelerate_resource_reclaim: soft resources are freed when they are destroyed"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::{doca_dev_as_devinfo, doca_dev_close};
    use crate::rep::*;
    use crate::testkit::dev::test_open_default;

    #[test]
    fn hw_addr_parsing() {
        assert_eq!(parse_hw_addr("00:1a:2B:3c:4d:5e"), Some(vec![0, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e]));
        assert_eq!(parse_hw_addr("zz:00"), None);
        assert_eq!(
            parse_hw_addr("00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33").map(|v| v.len()),
            Some(20)
        );
    }

    #[test]
    fn loopback_interface_addresses_are_read_from_the_host() {
        // The host's own view, to compare with.
        let (v4, _, found) = iface_addrs("lo");
        if !found {
            return; // no loopback interface in this sandbox
        }
        assert!(v4.contains(&Ipv4Addr::LOCALHOST) || v4.is_empty());
        let (_, _, none) = iface_addrs("no-such-if0");
        assert!(!none);
        assert_eq!(sysfs_net("../x", "address"), None);
    }

    #[test]
    fn default_device_answers() {
        let dev = test_open_default();
        // SAFETY: a live device and valid buffers; deliberate NULLs and short sizes are refused.
        unsafe {
            let info = doca_dev_as_devinfo(dev);
            let iface = (*info).iface_name().to_string();
            let (v4, v6, exists) = iface_addrs(&iface);
            let mut b = [0u8; 16];
            let r = doca_devinfo_get_ipv4_addr(info, b.as_mut_ptr(), 4);
            match v4.first() {
                Some(a) => assert_eq!((r, &b[..4]), (DOCA_SUCCESS, &a.octets()[..])),
                None => assert_eq!(r, DOCA_ERROR_NOT_FOUND),
            }
            let r = doca_devinfo_get_ipv6_addr(info, b.as_mut_ptr(), 16);
            match v6.first() {
                Some(a) => assert_eq!((r, &b[..]), (DOCA_SUCCESS, &a.octets()[..])),
                None => assert_eq!(r, DOCA_ERROR_NOT_FOUND),
            }
            assert_eq!(doca_devinfo_get_ipv4_addr(info, b.as_mut_ptr(), 3), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_devinfo_get_ipv6_addr(info, b.as_mut_ptr(), 15), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_devinfo_get_mac_addr(info, b.as_mut_ptr(), 5), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_devinfo_get_ipv4_addr(info, ptr::null_mut(), 4), DOCA_ERROR_INVALID_VALUE);
            let r = doca_devinfo_get_mac_addr(info, b.as_mut_ptr(), 6);
            if !exists {
                assert_eq!(r, DOCA_ERROR_NOT_FOUND);
            }
            let mut lid = 0u16;
            assert_eq!(doca_devinfo_get_lid(info, &mut lid), DOCA_ERROR_NOT_SUPPORTED);
            assert_eq!(doca_devinfo_get_vhca_id(info, &mut lid), DOCA_ERROR_NOT_SUPPORTED);
            let mut rate = 0u64;
            let r = doca_devinfo_get_active_rate(info, &mut rate);
            assert!(r == DOCA_SUCCESS && rate > 0 || r == DOCA_ERROR_NOT_SUPPORTED, "{r:?}");
            let mut ft = 9;
            assert_eq!(doca_devinfo_get_pci_func_type(info, &mut ft), DOCA_SUCCESS);
            assert_eq!(ft, DOCA_PCI_FUNC_TYPE_PF);
            let mut sf = 0u32;
            assert_eq!(doca_devinfo_get_sf_index(info, &mut sf), DOCA_ERROR_NOT_SUPPORTED);
            let mut f = 9u8;
            assert_eq!(doca_devinfo_cap_is_hotplug_manager_supported(info, &mut f), DOCA_SUCCESS);
            assert_eq!(f, 0);
            f = 9;
            assert_eq!(doca_devinfo_rep_cap_is_filter_net_supported(info, &mut f), DOCA_SUCCESS);
            assert_eq!(f, 0);
            assert_eq!(doca_dev_accelerate_resource_reclaim(dev), DOCA_ERROR_NOT_SUPPORTED);
            // Representors: none on a soft device.
            let mut list = ptr::null_mut();
            let mut n = 7u32;
            assert_eq!(
                doca_devinfo_rep_create_list(dev, DOCA_DEVINFO_REP_FILTER_NET as i32, &mut list, &mut n),
                DOCA_ERROR_NOT_SUPPORTED
            );
            assert_eq!(doca_devinfo_rep_create_list(dev, 1 << 9, &mut list, &mut n), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_devinfo_rep_create_list(ptr::null_mut(), 0, &mut list, &mut n), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_devinfo_rep_destroy_list(0x1000 as *mut _), DOCA_ERROR_INVALID_VALUE);
            assert!(doca_dev_rep_as_devinfo(0x1000 as *mut _).is_null());
            assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
        }
    }

    /// A device named after the host's loopback interface answers with the loopback's
    /// addresses (child process: the environment of this one is left alone).
    #[test]
    fn a_device_on_a_host_interface_reports_its_addresses() {
        const ROLE: &str = "DOCA_SOFT_TEST_DEV_LO_CHILD";
        if std::env::var_os(ROLE).is_some() {
            let mut list = ptr::null_mut();
            let mut n = 0u32;
            let mut b = [0u8; 6];
            // SAFETY: valid out-pointers and buffers.
            unsafe {
                assert_eq!(crate::dev::doca_devinfo_create_list(&mut list, &mut n), DOCA_SUCCESS);
                assert_eq!(n, 1);
                assert_eq!(doca_devinfo_get_ipv4_addr(*list, b.as_mut_ptr(), 4), DOCA_SUCCESS);
                assert_eq!(b[..4], [127, 0, 0, 1]);
                assert_eq!(doca_devinfo_get_mac_addr(*list, b.as_mut_ptr(), 6), DOCA_SUCCESS);
                assert_eq!(b, [0; 6], "the loopback's hardware address is all zeros");
                assert_eq!(crate::dev::doca_devinfo_destroy_list(list), DOCA_SUCCESS);
            }
            return;
        }
        if !iface_addrs("lo").0.contains(&Ipv4Addr::LOCALHOST) || sysfs_net("lo", "address").is_none() {
            return; // no usable loopback in this sandbox
        }
        let name = format!(
            "{}::a_device_on_a_host_interface_reports_its_addresses",
            module_path!().split_once("::").map_or("", |x| x.1)
        );
        let st = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(ROLE, "1")
            .env(crate::dev::DEVICES_ENV, "soft0@03:00.0@lo")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    }
}
