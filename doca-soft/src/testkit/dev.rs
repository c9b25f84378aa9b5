//! Devices for tests: open a device of one's own, or the default one.
//!
//! Tests run in parallel in one process and device opens are counted per device, so a test
//! that counts opens or expects `DOCA_ERROR_IN_USE` from a close needs a device no other test
//! opens ([`test_open_private`]); the others share the first configured device.

use core::ptr;

use crate::dev::{current_devinfos, doca_dev, doca_dev_open, doca_devinfo, intern_devinfo, interned_devinfos};
use crate::types::*;

/// Test helper shared with other modules' tests: opens a device of its own (a devinfo no
/// other test opens, named `tag`), for tests that count opens or expect `DOCA_ERROR_IN_USE`
/// from a close (opens are counted per device and tests run in parallel).
pub(crate) fn test_open_private(tag: &str) -> *mut doca_dev {
    let n = interned_devinfos();
    let info = intern_devinfo(format!("soft-{tag}"), format!("0000:{:02x}:1f.7", 0x80 + n % 0x7f), "sfpriv0".into());
    let mut dev = ptr::null_mut();
    // SAFETY: `info` is a registered devinfo and `dev` a valid out-pointer.
    let r = unsafe { doca_dev_open(info as *const doca_devinfo as *mut doca_devinfo, &mut dev) };
    assert_eq!(r, DOCA_SUCCESS);
    dev
}

/// Test helper shared with other modules' tests: opens the first configured device.
pub(crate) fn test_open_default() -> *mut doca_dev {
    let infos = current_devinfos().expect("device config");
    let info = infos
        .first()
        .copied()
        .unwrap_or_else(|| intern_devinfo("soft0".into(), "0000:03:00.0".into(), "sfeth0".into()));
    let mut dev = ptr::null_mut();
    // SAFETY: `info` is a registered devinfo and `dev` a valid out-pointer.
    let r = unsafe { doca_dev_open(info as *const doca_devinfo as *mut doca_devinfo, &mut dev) };
    assert_eq!(r, DOCA_SUCCESS);
    dev
}
