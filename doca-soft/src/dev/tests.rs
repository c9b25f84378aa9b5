//! Unit tests of `dev.rs` (moved out of line: longer than the workspace's ~150-line limit for
//! inline test modules).

use super::*;

// Tests never set DOCA_SOFT_DEVICES in this process (the environment is shared by the
// parallel tests); the parser is tested directly, and a child process checks the env.

#[test]
fn pci_parsing() {
    assert_eq!(parse_pci("0000:03:00.0").as_deref(), Some("0000:03:00.0"));
    assert_eq!(parse_pci("03:00.0").as_deref(), Some("0000:03:00.0"));
    assert_eq!(parse_pci("0000:AF:1F.7").as_deref(), Some("0000:af:1f.7"));
    for bad in ["", "03:00", "0000:03:00.8", "00000:03:00.0", "0000:03:20.0", "x:03:00.0", "0:0:0:0.0", "03:00.0.1"] {
        assert!(parse_pci(bad).is_none(), "{bad}");
    }
}

#[test]
fn list_open_close() {
    let mut list = ptr::null_mut();
    let mut n = 0u32;
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(doca_devinfo_create_list(&mut list, &mut n), DOCA_SUCCESS);
    }
    if std::env::var_os(DEVICES_ENV).is_some() {
        return; // configured by the environment: the defaults below do not apply
    }
    assert_eq!(n, 1);
    // SAFETY: the list has n + 1 entries.
    let info = unsafe { *list };
    assert!(!info.is_null());
    // SAFETY: list has a NULL terminator at index n.
    assert!(unsafe { *list.add(1) }.is_null());
    let mut pci = [0 as c_char; DOCA_DEVINFO_PCI_ADDR_SIZE];
    let mut name = [0 as c_char; DOCA_DEVINFO_IBDEV_NAME_SIZE];
    let mut iface = [0 as c_char; DOCA_DEVINFO_IFACE_NAME_SIZE];
    let mut eq = 9u8;
    let mut dev = ptr::null_mut();
    // SAFETY: all buffers are valid for the sizes passed; `info` is from the list.
    unsafe {
        assert_eq!(doca_devinfo_get_pci_addr_str(info, pci.as_mut_ptr()), DOCA_SUCCESS);
        assert_eq!(cstr(&pci), "0000:03:00.0");
        assert_eq!(doca_devinfo_get_ibdev_name(info, name.as_mut_ptr(), name.len() as u32), DOCA_SUCCESS);
        assert_eq!(cstr(&name), "soft0");
        assert_eq!(doca_devinfo_get_iface_name(info, iface.as_mut_ptr(), iface.len() as u32), DOCA_SUCCESS);
        assert_eq!(cstr(&iface), "sfeth0");
        // Exactly fitting and one byte short.
        assert_eq!(doca_devinfo_get_ibdev_name(info, name.as_mut_ptr(), 6), DOCA_SUCCESS);
        assert_eq!(doca_devinfo_get_ibdev_name(info, name.as_mut_ptr(), 5), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_get_iface_name(info, iface.as_mut_ptr(), 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_is_equal_pci_addr(info, c"03:00.0".as_ptr(), &mut eq), DOCA_SUCCESS);
        assert_eq!(eq, 1);
        assert_eq!(doca_devinfo_is_equal_pci_addr(info, c"0000:03:00.0".as_ptr(), &mut eq), DOCA_SUCCESS);
        assert_eq!(eq, 1);
        assert_eq!(doca_devinfo_is_equal_pci_addr(info, c"0000:04:00.0".as_ptr(), &mut eq), DOCA_SUCCESS);
        assert_eq!(eq, 0);
        assert_eq!(doca_devinfo_is_equal_pci_addr(info, c"garbage".as_ptr(), &mut eq), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(
            doca_devinfo_is_equal_pci_addr(info, c"0000:03:00.0000000000000000000000000000000".as_ptr(), &mut eq),
            DOCA_ERROR_INVALID_VALUE
        );

        assert_eq!(doca_dev_open(info, &mut dev), DOCA_SUCCESS);
        // The devinfo stays valid after the list is destroyed.
        assert_eq!(doca_devinfo_destroy_list(list), DOCA_SUCCESS);
        assert_eq!(doca_devinfo_destroy_list(list), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_as_devinfo(dev), info);
        assert_eq!(doca_devinfo_get_ibdev_name(info, name.as_mut_ptr(), 64), DOCA_SUCCESS);

        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);

        // A device of this test only (other tests open the default one in parallel).
        let dev = test_open_private("list-open-close");
        let info = doca_dev_as_devinfo(dev);
        // Opens are counted per device: the same object, released by the last close.
        let mut again = ptr::null_mut();
        assert_eq!(doca_dev_open(info, &mut again), DOCA_SUCCESS);
        assert_eq!(again, dev);
        // In use while referenced, at the last close only.
        let r = dev_ref(dev).unwrap();
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS, "not the last close");
        assert_eq!(doca_dev_close(dev), DOCA_ERROR_IN_USE);
        let r2 = r.clone();
        drop(r);
        assert_eq!(doca_dev_close(dev), DOCA_ERROR_IN_USE);
        drop(r2);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
        assert_eq!(doca_dev_close(dev), DOCA_ERROR_INVALID_VALUE);
        assert!(doca_dev_as_devinfo(dev).is_null());
        // Opened again after the last close: a new device.
        assert_eq!(doca_dev_open(info, &mut again), DOCA_SUCCESS);
        assert_eq!(doca_dev_close(again), DOCA_SUCCESS);
    }
}

#[test]
fn null_and_foreign_pointers() {
    let mut x = [0 as c_char; 64];
    let mut n = 0u32;
    let mut list = ptr::null_mut();
    let fake = 0x1000 as *mut doca_devinfo;
    // SAFETY: every call gets NULL or a foreign pointer that the provider must refuse
    // without dereferencing.
    unsafe {
        assert_eq!(doca_devinfo_create_list(ptr::null_mut(), &mut n), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_create_list(&mut list, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_destroy_list(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_destroy_list(0x1000 as *mut _), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_open(ptr::null_mut(), &mut ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_open(fake, &mut ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_close(ptr::null_mut()), DOCA_SUCCESS, "NULL: a no-op (NVIDIA's DMA samples close twice)");
        assert_eq!(doca_dev_close(0x1000 as *mut _), DOCA_ERROR_INVALID_VALUE);
        assert!(doca_dev_as_devinfo(ptr::null()).is_null());
        assert_eq!(doca_devinfo_get_pci_addr_str(fake, x.as_mut_ptr()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_get_ibdev_name(fake, x.as_mut_ptr(), 64), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_get_iface_name(ptr::null(), x.as_mut_ptr(), 64), DOCA_ERROR_INVALID_VALUE);
        let mut eq = 0;
        assert_eq!(doca_devinfo_is_equal_pci_addr(fake, c"03:00.0".as_ptr(), &mut eq), DOCA_ERROR_INVALID_VALUE);
        // A valid devinfo with NULL buffers.
        let dev = test_open_default();
        let info = doca_dev_as_devinfo(dev);
        assert_eq!(doca_devinfo_get_pci_addr_str(info, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_get_ibdev_name(info, ptr::null_mut(), 64), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_is_equal_pci_addr(info, ptr::null(), &mut eq), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(
            doca_devinfo_is_equal_pci_addr(info, c"03:00.0".as_ptr(), ptr::null_mut()),
            DOCA_ERROR_INVALID_VALUE
        );
        assert_eq!(doca_dev_open(info, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
}

/// Runs in a child process with DOCA_SOFT_DEVICES set (the environment of this process
/// is left alone).
#[test]
fn env_configured_devices() {
    const ROLE: &str = "DOCA_SOFT_TEST_DEV_ENV_CHILD";
    if std::env::var_os(ROLE).is_some() {
        let mut list = ptr::null_mut();
        let mut n = 0u32;
        let mut buf = [0 as c_char; 64];
        // SAFETY: valid out-pointers and buffers.
        unsafe {
            assert_eq!(doca_devinfo_create_list(&mut list, &mut n), DOCA_SUCCESS);
            assert_eq!(n, 2);
            assert_eq!(doca_devinfo_get_ibdev_name(*list.add(1), buf.as_mut_ptr(), 64), DOCA_SUCCESS);
            assert_eq!(cstr(&buf), "mlx5_1");
            assert_eq!(doca_devinfo_get_pci_addr_str(*list.add(1), buf.as_mut_ptr()), DOCA_SUCCESS);
            assert_eq!(cstr(&buf), "0000:04:00.1");
            assert_eq!(doca_devinfo_get_iface_name(*list.add(1), buf.as_mut_ptr(), 64), DOCA_SUCCESS);
            assert_eq!(cstr(&buf), "p1");
            assert_eq!(doca_devinfo_get_iface_name(*list, buf.as_mut_ptr(), 64), DOCA_SUCCESS);
            assert_eq!(cstr(&buf), "sfeth0");
            assert_eq!(doca_devinfo_destroy_list(list), DOCA_SUCCESS);
        }
        return;
    }
    let name = format!("{}::env_configured_devices", module_path!().split_once("::").map_or("", |x| x.1));
    let run = |spec: &str| {
        let st = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(ROLE, "1")
            .env(DEVICES_ENV, spec)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        st.success()
    };
    assert!(run("soft0@0000:03:00.0, mlx5_1@04:00.1@p1"));
    // Bad configurations make create_list fail (BAD_CONFIG), so the child's assert fails.
    assert!(!run("soft0"));
    assert!(!run("soft0@zz:00.0"));
    // Parser checks in-process.
    assert!(parse_spec("a@03:00.0,a@04:00.0").is_err());
    assert!(parse_spec("a@03:00.0@toolonginterface0").is_err());
    assert_eq!(parse_spec("").unwrap().len(), 0);
}
