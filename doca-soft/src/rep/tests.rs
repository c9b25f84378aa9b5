//! Representors in both roles. The role is chosen per test thread (`set_test_role`), except
//! in the child-process test that checks the environment variable itself.

use std::ffi::{CStr, CString};

use super::*;
use crate::dev::{doca_dev_as_devinfo, doca_dev_close, parse_role, set_test_role};
use crate::testkit::dev::test_open_private;

/// Sets this thread's role for the test's duration and clears it on the way out.
struct RoleGuard;
impl RoleGuard {
    fn new(r: Role) -> RoleGuard {
        set_test_role(Some(r));
        RoleGuard
    }
}
impl Drop for RoleGuard {
    fn drop(&mut self) {
        set_test_role(None);
    }
}

fn cap(f: unsafe extern "C" fn(*const doca_devinfo, *mut u8) -> doca_error_t, info: *const doca_devinfo) -> u8 {
    let mut v = 9u8;
    // SAFETY: a live devinfo and a valid out-pointer.
    assert_eq!(unsafe { f(info, &mut v) }, DOCA_SUCCESS);
    v
}

/// Lists the representors of `dev` under `filter`; returns (list, count).
fn list(dev: *mut doca_dev, filter: u32) -> (*mut *mut doca_devinfo_rep, u32) {
    let mut l = ptr::null_mut();
    let mut n = 77u32;
    // SAFETY: a live device and valid out-pointers.
    assert_eq!(unsafe { doca_devinfo_rep_create_list(dev, filter as i32, &mut l, &mut n) }, DOCA_SUCCESS);
    (l, n)
}

#[test]
fn role_values_and_vuids() {
    assert_eq!(parse_role("host"), Some(Role::Host));
    assert_eq!(parse_role(""), Some(Role::Host));
    assert_eq!(parse_role(" dpu "), Some(Role::Dpu));
    assert_eq!(parse_role("DPU-ish"), None);
    assert_eq!(vuid_of("0000:03:00.0"), "SOFT000003000HPF");
    assert_eq!(vuid_of("0000:af:1f.7"), vuid_of("0000:af:1f.7"), "stable");
}

#[test]
fn host_role_has_no_representors() {
    let _g = RoleGuard::new(Role::Host);
    let dev = test_open_private("rep-host");
    // SAFETY: a live device, valid out-pointers; foreign pointers are refused, not read.
    unsafe {
        let info = doca_dev_as_devinfo(dev);
        let (mut l, mut n) = (ptr::null_mut(), 5u32);
        for filter in [DOCA_DEVINFO_REP_FILTER_ALL, DOCA_DEVINFO_REP_FILTER_NET] {
            assert_eq!(doca_devinfo_rep_create_list(dev, filter as i32, &mut l, &mut n), DOCA_ERROR_NOT_SUPPORTED);
        }
        assert_eq!(n, 5, "nothing written on failure");
        assert_eq!(cap(doca_devinfo_rep_cap_is_filter_all_supported, info), 0);
        assert_eq!(cap(doca_devinfo_rep_cap_is_filter_net_supported, info), 0);
        assert_eq!(cap(doca_devinfo_rep_cap_is_filter_emulated_supported, info), 0);
        assert_eq!(doca_devinfo_rep_destroy_list(0x1000 as *mut _), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_rep_close(0x1000 as *mut _), DOCA_ERROR_INVALID_VALUE);
        let mut r = ptr::null_mut();
        assert_eq!(doca_dev_rep_open(0x1000 as *mut _, &mut r), DOCA_ERROR_INVALID_VALUE);
        assert!(doca_dev_rep_as_devinfo(0x1000 as *mut _).is_null());
        let mut ft = 0;
        assert_eq!(doca_devinfo_rep_get_pci_func_type(ptr::null(), &mut ft), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
}

#[test]
fn dpu_role_lists_the_host_pf_it_serves() {
    let _g = RoleGuard::new(Role::Dpu);
    let dev = test_open_private("rep-dpu");
    // SAFETY: live objects and valid buffers throughout; deliberate bad inputs are refused.
    unsafe {
        let info = doca_dev_as_devinfo(dev);
        let pci = (*info).pci_addr().to_string();
        assert_eq!(cap(doca_devinfo_rep_cap_is_filter_all_supported, info), 1);
        assert_eq!(cap(doca_devinfo_rep_cap_is_filter_net_supported, info), 1);
        assert_eq!(cap(doca_devinfo_rep_cap_is_filter_emulated_supported, info), 0);

        // Filters: ALL, NET and NET|EMULATED list the PF; EMULATED alone lists nothing.
        let (l, n) = list(dev, DOCA_DEVINFO_REP_FILTER_EMULATED);
        assert_eq!(n, 0);
        assert!((*l).is_null());
        assert_eq!(doca_devinfo_rep_destroy_list(l), DOCA_SUCCESS);
        let (l2, n2) = list(dev, DOCA_DEVINFO_REP_FILTER_NET | DOCA_DEVINFO_REP_FILTER_EMULATED);
        assert_eq!(n2, 1);
        let (l, n) = list(dev, DOCA_DEVINFO_REP_FILTER_ALL);
        assert_eq!(n, 1);
        let rep = *l;
        assert_eq!(*l2, rep, "the same function, the same object");
        assert_eq!(doca_devinfo_rep_destroy_list(l2), DOCA_SUCCESS);
        assert_eq!(doca_devinfo_rep_destroy_list(l2), DOCA_ERROR_INVALID_VALUE, "freed once");
        let (mut bad, mut nb) = (ptr::null_mut(), 0u32);
        assert_eq!(doca_devinfo_rep_create_list(dev, 1 << 9, &mut bad, &mut nb), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_rep_create_list(dev, 0, ptr::null_mut(), &mut nb), DOCA_ERROR_INVALID_VALUE);

        // Getters.
        let mut buf = [0 as c_char; 256];
        assert_eq!(doca_devinfo_rep_get_pci_addr_str(rep, buf.as_mut_ptr()), DOCA_SUCCESS);
        assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), pci);
        assert_eq!(doca_devinfo_rep_get_vuid(rep, buf.as_mut_ptr(), 128), DOCA_SUCCESS);
        assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), vuid_of(&pci));
        assert_eq!(doca_devinfo_rep_get_vuid(rep, buf.as_mut_ptr(), 127), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_rep_get_iface_name(rep, buf.as_mut_ptr(), 256), DOCA_SUCCESS);
        assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "pf0hpf");
        assert_eq!(doca_devinfo_rep_get_iface_name(rep, buf.as_mut_ptr(), 255), DOCA_ERROR_INVALID_VALUE);
        let mut ft = 9;
        assert_eq!(doca_devinfo_rep_get_pci_func_type(rep, &mut ft), DOCA_SUCCESS);
        assert_eq!(ft, DOCA_PCI_FUNC_TYPE_PF);
        let mut hp = 9u8;
        assert_eq!(doca_devinfo_rep_get_is_hotplug(rep, &mut hp), DOCA_SUCCESS);
        assert_eq!(hp, 0);
        let mut vhca = 0u16;
        assert_eq!(doca_devinfo_rep_get_vhca_id(rep, &mut vhca), DOCA_ERROR_NOT_SUPPORTED);
        let mut eq = 9u8;
        let full = CString::new(pci.clone()).unwrap();
        assert_eq!(doca_devinfo_rep_is_equal_pci_addr(rep, full.as_ptr(), &mut eq), DOCA_SUCCESS);
        assert_eq!(eq, 1);
        let short = CString::new(&pci[5..]).unwrap(); // "BB:DD.F", domain 0000 assumed
        assert_eq!(doca_devinfo_rep_is_equal_pci_addr(rep, short.as_ptr(), &mut eq), DOCA_SUCCESS);
        assert_eq!(eq, 1);
        let other = CString::new("0000:00:00.0").unwrap();
        assert_eq!(doca_devinfo_rep_is_equal_pci_addr(rep, other.as_ptr(), &mut eq), DOCA_SUCCESS);
        assert_eq!(eq, 0);
        let junk = CString::new("not-a-pci").unwrap();
        assert_eq!(doca_devinfo_rep_is_equal_pci_addr(rep, junk.as_ptr(), &mut eq), DOCA_ERROR_INVALID_VALUE);

        // Open, as_devinfo, close (twice is refused).
        let mut r = ptr::null_mut();
        assert_eq!(doca_dev_rep_open(rep, &mut r), DOCA_SUCCESS);
        assert!(is_open_or_null(r) && is_open_or_null(ptr::null()));
        assert_eq!(doca_dev_rep_as_devinfo(r), rep);
        // A Comch server bound to it keeps it.
        let name = CString::new(format!("rep-test-{}", std::process::id())).unwrap();
        let mut s = ptr::null_mut();
        assert_eq!(crate::comch::chan::doca_comch_server_create(dev, r, name.as_ptr(), &mut s), DOCA_SUCCESS);
        let mut got = ptr::null_mut();
        assert_eq!(crate::comch::chan::doca_comch_server_get_device_rep(s, &mut got), DOCA_SUCCESS);
        assert_eq!(got, r);
        assert_eq!(crate::comch::chan::doca_comch_server_destroy(s), DOCA_SUCCESS);
        assert_eq!(doca_devinfo_rep_destroy_list(l), DOCA_SUCCESS, "an open rep outlives its list");
        assert_eq!(doca_devinfo_rep_get_pci_func_type(doca_dev_rep_as_devinfo(r), &mut ft), DOCA_SUCCESS);
        assert_eq!(doca_dev_rep_close(r), DOCA_SUCCESS);
        assert!(!is_open_or_null(r));
        assert_eq!(doca_dev_rep_close(r), DOCA_ERROR_INVALID_VALUE);
        assert!(doca_dev_rep_as_devinfo(r).is_null());
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
}

/// The environment variable itself, in child processes of this test binary: `dpu` lists
/// representors of the configured devices, an unknown value fails the device listing.
#[test]
fn role_comes_from_the_environment() {
    const CHILD: &str = "DOCA_SOFT_TEST_REP_ROLE_CHILD";
    if let Ok(mode) = std::env::var(CHILD) {
        let (mut infos, mut n) = (ptr::null_mut(), 0u32);
        // SAFETY: valid out-pointers; the device comes from the list.
        unsafe {
            let r = crate::dev::doca_devinfo_create_list(&mut infos, &mut n);
            if mode == "bad" {
                assert_eq!(r, DOCA_ERROR_BAD_CONFIG);
                return;
            }
            assert_eq!((r, n), (DOCA_SUCCESS, 2));
            let mut dev = ptr::null_mut();
            assert_eq!(crate::dev::doca_dev_open(*infos.add(1), &mut dev), DOCA_SUCCESS);
            let (l, cnt) = list(dev, DOCA_DEVINFO_REP_FILTER_NET);
            assert_eq!(cnt, 1);
            let mut buf = [0 as c_char; 256];
            assert_eq!(doca_devinfo_rep_get_pci_addr_str(*l, buf.as_mut_ptr()), DOCA_SUCCESS);
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "0000:04:00.0");
            assert_eq!(doca_devinfo_rep_get_iface_name(*l, buf.as_mut_ptr(), 256), DOCA_SUCCESS);
            assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "pf1hpf", "second device");
            assert_eq!(doca_devinfo_rep_destroy_list(l), DOCA_SUCCESS);
            assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
            assert_eq!(crate::dev::doca_devinfo_destroy_list(infos), DOCA_SUCCESS);
        }
        return;
    }
    let name = format!("{}::role_comes_from_the_environment", module_path!().split_once("::").map_or("", |x| x.1));
    for (mode, role) in [("dpu", "dpu"), ("bad", "dpu-please")] {
        let st = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(CHILD, mode)
            .env(ROLE_ENV, role)
            .env(crate::dev::DEVICES_ENV, "soft0@03:00.0,soft1@04:00.0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "child {mode}");
    }
}
